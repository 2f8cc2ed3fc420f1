/*
 * otlppb.c: the protobuf encoding of an OTLP/HTTP request (otlppb.h).
 *
 * Protobuf's wire format, as much of it as this schema uses: a field is a tag (field number
 * << 3 | wire type, a varint) and its value; wire type 0 a varint (7 bits a byte, low first,
 * the high bit set on all but the last), 1 eight little-endian bytes (fixed64, double), 2 a
 * varint length and that many bytes (bytes, strings, messages), 5 four little-endian bytes
 * (fixed32).  Every tag here is below 16 but flags' (16: two bytes, 0x85 0x01).
 *
 * Each span is sized (span_size) and then written (put_span) from the same xsp_otlp_span; the
 * two walk the fields in the same order and are kept side by side so that they stay in step.
 * Historical note: sizing the whole batch in a first pass (resolving every span's attributes
 * twice) or writing each span backwards from the end of the buffer were the alternatives; the
 * first costs a second resolution per span, the second a reversed copy of every string.
 */
#include "otlppb.h"

#include <stdlib.h>
#include <string.h>

#include "jsonw.h"

/* A varint's bytes. */
static size_t vsize(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static unsigned char *put_varint(unsigned char *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    return p;
}

static unsigned char *put_be64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
    return p + 8;
}

static unsigned char *put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++, v >>= 8)
        p[i] = (unsigned char)v;
    return p + 8;
}

/* A length-delimited field of n bytes: its tag, length and the bytes. */
static size_t ld_size(size_t n)
{
    return 1 + vsize(n) + n;
}

/* The n bytes at s, each byte that is not part of well-formed UTF-8 as '?'. */
static unsigned char *put_text(unsigned char *p, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && u[j] < 0x80)
            j++;
        memcpy(p + i, u + i, j - i);
        if (j == n)
            break;
        size_t k = xsp_utf8_seq(u + j, n - j);
        if (k)
            memcpy(p + j, u + j, k);
        else
            p[j] = '?';
        i = j + (k ? k : 1);
    }
    return p + n;
}

static unsigned char *put_ld_text(unsigned char *p, unsigned tag, const char *s, size_t n)
{
    *p++ = (unsigned char)tag;
    p = put_varint(p, n);
    return put_text(p, s, n);
}

/* An AnyValue's bytes. */
static size_t any_size(const xsp_otlp_kv *kv)
{
    if (kv->type == XSP_OTLP_INT)
        return 1 + vsize((uint64_t)kv->i);
    if (kv->type == XSP_OTLP_DOUBLE)
        return 9;
    return ld_size(kv->n);
}

/* A KeyValue's bytes (an empty key left out, as a default). */
static size_t kv_size(const xsp_otlp_kv *kv)
{
    return (kv->key_len ? ld_size(kv->key_len) : 0) + ld_size(any_size(kv));
}

static unsigned char *put_kv(unsigned char *p, const xsp_otlp_kv *kv)
{
    if (kv->key_len) {
        *p++ = 0x0a;                                    /* 1: key */
        p = put_varint(p, kv->key_len);
        memcpy(p, kv->key, kv->key_len);
        p += kv->key_len;
    }
    *p++ = 0x12;                                        /* 2: value */
    p = put_varint(p, any_size(kv));
    if (kv->type == XSP_OTLP_INT) {
        *p++ = 0x18;                                    /* 3: int_value */
        return put_varint(p, (uint64_t)kv->i);
    }
    if (kv->type == XSP_OTLP_DOUBLE) {
        uint64_t bits;
        memcpy(&bits, &kv->f, 8);
        *p++ = 0x21;                                    /* 4: double_value */
        return put_le64(p, bits);
    }
    return put_ld_text(p, 0x0a, kv->s, kv->n);          /* 1: string_value */
}

/* A link to the parent: 1: trace_id, 2: span_id, 4: the KeyValue xsp.link = "parent",
 * 6: flags 256. */
static const unsigned char LINK_ATTR[] = {
    0x22, 20, 0x0a, 8, 'x', 's', 'p', '.', 'l', 'i', 'n', 'k',
    0x12, 8, 0x0a, 6, 'p', 'a', 'r', 'e', 'n', 't'};
#define LINK_SIZE (18 + 10 + sizeof LINK_ATTR + 5)

/* Status {} (15) and flags 256 (16, fixed32), the end of every span. */
static const unsigned char SPAN_END[] = {0x7a, 0x00, 0x85, 0x01, 0x00, 0x01, 0x00, 0x00};

/* The Span message's bytes. */
static size_t span_size(const xsp_otlp_span *s)
{
    size_t n = 18 + 10;                                 /* trace_id, span_id */
    if (s->parent == XSP_OTLP_PARENT)
        n += 10;
    if (s->name_len)
        n += ld_size(s->name_len);
    n += 2;                                             /* kind */
    n += (s->start ? 9 : 0) + (s->end ? 9 : 0);
    for (size_t j = 0; j < s->n_kv; j++)
        n += ld_size(kv_size(&s->kv[j]));
    if (s->parent == XSP_OTLP_LINK)
        n += ld_size(LINK_SIZE);
    return n + sizeof SPAN_END;
}

static unsigned char *put_ids(unsigned char *p, const xsp_otlp_cols *c, uint32_t trace,
                              uint64_t span)
{
    *p++ = 0x0a;                                        /* 1: trace_id */
    *p++ = 16;
    p = put_be64(p, c->trace_hi[trace]);
    p = put_be64(p, c->trace_lo[trace]);
    *p++ = 0x12;                                        /* 2: span_id */
    *p++ = 8;
    return put_be64(p, span);
}

/* The Span message (size bytes, as span_size gives). */
static unsigned char *put_span(unsigned char *p, const xsp_otlp_span *s, const xsp_otlp_cols *c,
                               size_t size)
{
    *p++ = 0x12;                                        /* ScopeSpans 2: spans */
    p = put_varint(p, size);
    p = put_ids(p, c, s->trace, s->span_id);
    if (s->parent == XSP_OTLP_PARENT) {
        *p++ = 0x22;                                    /* 4: parent_span_id */
        *p++ = 8;
        p = put_be64(p, s->parent_id);
    }
    if (s->name_len)
        p = put_ld_text(p, 0x2a, s->name, s->name_len); /* 5: name */
    *p++ = 0x30;                                        /* 6: kind INTERNAL */
    *p++ = 1;
    if (s->start) {
        *p++ = 0x39;                                    /* 7: start_time_unix_nano */
        p = put_le64(p, s->start);
    }
    if (s->end) {
        *p++ = 0x41;                                    /* 8: end_time_unix_nano */
        p = put_le64(p, s->end);
    }
    for (size_t j = 0; j < s->n_kv; j++) {
        *p++ = 0x4a;                                    /* 9: attributes */
        p = put_varint(p, kv_size(&s->kv[j]));
        p = put_kv(p, &s->kv[j]);
    }
    if (s->parent == XSP_OTLP_LINK) {
        *p++ = 0x6a;                                    /* 13: links */
        *p++ = (unsigned char)LINK_SIZE;
        p = put_ids(p, c, s->link_trace, s->parent_id);
        memcpy(p, LINK_ATTR, sizeof LINK_ATTR);
        p += sizeof LINK_ATTR;
        static const unsigned char flags[] = {0x35, 0x00, 0x01, 0x00, 0x00};
        memcpy(p, flags, sizeof flags);
        p += sizeof flags;
    }
    memcpy(p, SPAN_END, sizeof SPAN_END);
    return p + sizeof SPAN_END;
}

/* pb's buffer with room for need bytes (its contents kept); -1 on allocation failure. */
static int room(xsp_otlp_pb *pb, size_t need)
{
    if (need <= pb->cap)
        return 0;
    size_t c = pb->cap ? pb->cap : 1 << 16;
    while (c < need)
        c *= 2;
    unsigned char *b = realloc(pb->buf, c);
    if (!b)
        return -1;
    pb->buf = b;
    pb->cap = c;
    return 0;
}

int xsp_otlp_encode(xsp_otlp_pb *pb, const xsp_trace *t, const xsp_otlp_cols *c, uint32_t lo,
                    uint32_t hi, const void *resource, size_t res_len, const void *scope,
                    size_t scope_len)
{
    pb->data = NULL;
    pb->len = 0;
    if (lo >= hi) {                     /* no spans: no ResourceSpans, the empty message */
        pb->data = pb->buf ? pb->buf : (const unsigned char *)"";
        return 0;
    }
    /* the gap: the longest header, three tags with 10-byte lengths, two tags with theirs */
    size_t gap = 5 * 11 + res_len + scope_len, end = gap;
    for (uint32_t i = lo; i < hi; i++) {
        if (xsp_otlp_span_get(&pb->span, t, c, i) < 0)
            return -1;
        size_t size = span_size(&pb->span);
        if (room(pb, end + 1 + 10 + size) < 0)
            return -1;
        unsigned char *e = put_span(pb->buf + end, &pb->span, c, size);
        end = (size_t)(e - pb->buf);
    }
    size_t spans = end - gap;
    size_t ss = ld_size(scope_len) + spans;             /* ScopeSpans */
    size_t rs = ld_size(res_len) + 1 + vsize(ss) + ss;  /* ResourceSpans */
    size_t head = 1 + vsize(rs) + rs - spans;
    unsigned char *p = pb->buf + gap - head, *start = p;
    *p++ = 0x0a;                                        /* request 1: resource_spans */
    p = put_varint(p, rs);
    *p++ = 0x0a;                                        /* ResourceSpans 1: resource */
    p = put_varint(p, res_len);
    if (res_len)
        memcpy(p, resource, res_len);
    p += res_len;
    *p++ = 0x12;                                        /* ResourceSpans 2: scope_spans */
    p = put_varint(p, ss);
    *p++ = 0x0a;                                        /* ScopeSpans 1: scope */
    p = put_varint(p, scope_len);
    if (scope_len)
        memcpy(p, scope, scope_len);
    p += scope_len;
    (void)p;                                            /* == pb->buf + gap */
    pb->data = start;
    pb->len = end - (size_t)(start - pb->buf);
    return 0;
}

void xsp_otlp_pb_release(xsp_otlp_pb *pb)
{
    if (!pb)
        return;
    free(pb->buf);
    xsp_otlp_span_release(&pb->span);
    memset(pb, 0, sizeof *pb);
}
