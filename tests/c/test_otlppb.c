/*
 * test_otlppb.c: the OTLP protobuf encoder (csrc/io/otlppb.h over otlpspan.h), plain and under
 * ASan + UBSan: the exact bytes of a one-span request (a golden, worked out by hand from
 * opentelemetry-proto's field numbers); then requests whose lengths need 2- and 3-byte varints
 * (a large resource, a 200-byte name, a 20000-byte value), a negative int (a 10-byte varint),
 * a NaN's bits, bytes that are not UTF-8, a link with trace_per="step" and leveled latencies
 * asked out of order, read back by a small protobuf reader that checks every length lands
 * where its message ends; batches that start inside the trace, one buffer reused across
 * requests of different sizes, the empty request and a trace index out of range.  The byte
 * equality with the OpenTelemetry SDK's encoder over every kind of trace is
 * tests/py/formats/test_json_writers.py's.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "io/otlppb.h"

static uint32_t sid(xsp_trace *t, const char *s, size_t n)
{
    return xsp_strtab_intern(&t->strings, s, n);
}

static void span(xsp_trace *t, uint64_t start, uint64_t end, uint32_t parent, const char *name,
                 unsigned kind)
{
    xsp_span s = {.start_ns = start, .end_ns = end, .parent = parent,
                  .name = sid(t, name, strlen(name)), .attr_off = t->n_attrs,
                  .level = XSP_LEVEL_L, .kind = (uint8_t)kind};
    CHECK(xsp_trace_add_span(t, &s) != UINT32_MAX);
}

static void attr(xsp_trace *t, xsp_attr a)
{
    CHECK(xsp_trace_add_attr(t, &a) != UINT32_MAX);
    t->spans[t->n_spans - 1].attr_n++;
}

static const uint64_t HI[2] = {0, 0x1111111111111111ull}, LO[2] = {1, 0x2222222222222222ull};

/* -- a small reader ---------------------------------------------------------------------- */

typedef struct field {
    unsigned num, wire;             /* field number, wire type */
    uint64_t v;                     /* varint, fixed64 or fixed32 value */
    const unsigned char *p;         /* wire type 2: the bytes */
    size_t n;                       /* and their length */
} field;

static int varint(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 70 && *p < end; shift += 7) {
        unsigned char b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

/* The next field of [*p, end): 1, 0 at the end, -1 when malformed (a length past end). */
static int next(const unsigned char **p, const unsigned char *end, field *f)
{
    if (*p == end)
        return 0;
    uint64_t tag;
    if (varint(p, end, &tag) < 0)
        return -1;
    f->num = (unsigned)(tag >> 3);
    f->wire = (unsigned)(tag & 7);
    if (f->wire == 0)
        return varint(p, end, &f->v) < 0 ? -1 : 1;
    size_t k = f->wire == 1 ? 8 : f->wire == 5 ? 4 : 0;
    if (k) {
        if ((size_t)(end - *p) < k)
            return -1;
        f->v = 0;
        for (size_t i = 0; i < k; i++)
            f->v |= (uint64_t)(*p)[i] << (8 * i);
        *p += k;
        return 1;
    }
    if (f->wire != 2 || varint(p, end, &f->v) < 0 || f->v > (uint64_t)(end - *p))
        return -1;
    f->p = *p;
    f->n = (size_t)f->v;
    *p += f->n;
    return 1;
}

/* The only field numbered num of the message m[0..n) (wire type 2), or NULL. */
static const unsigned char *sub(const unsigned char *m, size_t n, unsigned num, size_t *len)
{
    const unsigned char *p = m, *found = NULL;
    field f;
    int rc;
    while ((rc = next(&p, m + n, &f)) == 1)
        if (f.num == num && f.wire == 2) {
            CHECK(found == NULL);
            found = f.p;
            *len = f.n;
        }
    CHECK(rc == 0);
    return found;
}

/* -- the golden ---------------------------------------------------------------------------- */

static void golden(void)
{
    xsp_trace *t = xsp_trace_new();
    xsp_trace_add_thread(t, 7, "", 0);
    span(t, 1, 2, XSP_NO_PARENT, "a", XSP_KIND_OP);
    xsp_otlp_cols c = {.span_base = 1, .offset = 0, .n_traces = 1, .trace_hi = HI,
                       .trace_lo = LO};
    static const unsigned char want[] = {
        0x0a, 0x91, 0x01,                               /* resource_spans, 145 bytes */
        0x0a, 0x02, 0xaa, 0xbb,                         /* resource (given) */
        0x12, 0x8a, 0x01,                               /* scope_spans, 138 */
        0x0a, 0x01, 0xcc,                               /* scope (given) */
        0x12, 0x84, 0x01,                               /* a span, 132 */
        0x0a, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,          /* trace_id */
        0x12, 0x08, 0, 0, 0, 0, 0, 0, 0, 1,             /* span_id */
        0x2a, 0x01, 'a',                                /* name */
        0x30, 0x01,                                     /* kind INTERNAL */
        0x39, 1, 0, 0, 0, 0, 0, 0, 0,                   /* start */
        0x41, 2, 0, 0, 0, 0, 0, 0, 0,                   /* end */
        0x4a, 0x10, 0x0a, 0x09, 'x', 's', 'p', '.', 'l', 'e', 'v', 'e', 'l',
        0x12, 0x03, 0x0a, 0x01, 'L',
        0x4a, 0x10, 0x0a, 0x08, 'x', 's', 'p', '.', 'k', 'i', 'n', 'd',
        0x12, 0x04, 0x0a, 0x02, 'o', 'p',
        0x4a, 0x11, 0x0a, 0x0b, 'x', 's', 'p', '.', 's', 'p', 'a', 'n', '_', 'i', 'd',
        0x12, 0x02, 0x18, 0x00,
        0x4a, 0x10, 0x0a, 0x0a, 'x', 's', 'p', '.', 't', 'h', 'r', 'e', 'a', 'd',
        0x12, 0x02, 0x18, 0x07,
        0x7a, 0x00,                                     /* status {} */
        0x85, 0x01, 0x00, 0x01, 0x00, 0x00};            /* flags 256 */
    xsp_otlp_pb pb = {0};
    CHECK(xsp_otlp_encode(&pb, t, &c, 0, 1, "\xaa\xbb", 2, "\xcc", 1) == 0);
    CHECK_EQ_U(pb.len, sizeof want);
    CHECK(pb.len == sizeof want && memcmp(pb.data, want, sizeof want) == 0);
    /* the empty request; then the same again from the reused buffer */
    CHECK(xsp_otlp_encode(&pb, t, &c, 1, 1, "\xaa\xbb", 2, "\xcc", 1) == 0);
    CHECK(pb.data != NULL && pb.len == 0);
    CHECK(xsp_otlp_encode(&pb, t, &c, 0, 1, "\xaa\xbb", 2, "\xcc", 1) == 0);
    CHECK(pb.len == sizeof want && memcmp(pb.data, want, sizeof want) == 0);
    xsp_otlp_pb_release(&pb);
    xsp_otlp_pb_release(&pb);                           /* released twice: zeroed the first */
    xsp_otlp_pb_release(NULL);
    xsp_trace_free(t);
}

/* -- large lengths, read back -------------------------------------------------------------- */

#define N 6

static void framing(void)
{
    xsp_trace *t = xsp_trace_new();
    xsp_trace_add_thread(t, 7, "main", 0);
    char name[201], big[20000];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = 0;
    memset(big, 'v', sizeof big);
    big[5] = (char)0xff;                                /* not UTF-8: '?' */
    span(t, 10, 900, XSP_NO_PARENT, "region", XSP_KIND_REGION);                 /* 0 */
    span(t, 20, 800, 0, "step#0", XSP_KIND_STEP);                               /* 1 */
    span(t, 30, 700, 1, name, XSP_KIND_MODULE);                                 /* 2 */
    attr(t, (xsp_attr){.key = sid(t, "v", 1), .type = XSP_ATTR_STR,
                       .v.s = sid(t, big, sizeof big)});
    attr(t, (xsp_attr){.key = sid(t, "neg", 3), .type = XSP_ATTR_INT, .v.i = -1});
    span(t, 40, 50, 2, "op\xc3", XSP_KIND_OP);                                  /* 3 */
    uint64_t nan_bits = 0xfff8000000000123ull;
    double nan;
    memcpy(&nan, &nan_bits, 8);
    attr(t, (xsp_attr){.key = sid(t, "f", 1), .type = XSP_ATTR_FLOAT, .v.f = nan});
    span(t, 60, 70, 2, "op", XSP_KIND_OP);                                      /* 4 */
    span(t, 80, 90, 0, "tail", XSP_KIND_OP);                                    /* 5 */
    char err[128];
    CHECK(xsp_trace_check(t, err, sizeof err) == 0);
    const int32_t ix[N] = {0, 1, 1, 1, 1, 0};          /* trace_per="step" */
    const int64_t lev_id[2] = {3, 4};
    const double lev_val[2] = {1.5, 2.5};
    xsp_otlp_cols c = {.span_base = 100, .offset = 1000, .n_traces = 2, .trace_hi = HI,
                       .trace_lo = LO, .trace_ix = ix, .n_lev = 2, .lev_id = lev_id,
                       .lev_val = lev_val};
    unsigned char res[300];
    for (size_t i = 0; i < sizeof res; i++)
        res[i] = (unsigned char)i;
    xsp_otlp_pb pb = {0};
    /* every batch of 1 to N spans starting anywhere: the leveled latencies asked out of order */
    for (uint32_t size = N; size >= 1; size--)
        for (uint32_t lo = 0; lo + size <= N; lo++) {
            uint32_t hi = lo + size;
            CHECK(xsp_otlp_encode(&pb, t, &c, lo, hi, res, sizeof res, "sc", 2) == 0);
            const unsigned char *p = pb.data, *end = pb.data + pb.len;
            field f;
            CHECK(next(&p, end, &f) == 1 && f.num == 1 && f.wire == 2 && p == end);
            size_t rn, sn, scn;
            const unsigned char *r = sub(f.p, f.n, 1, &rn), *ss = sub(f.p, f.n, 2, &sn);
            CHECK(r && rn == sizeof res && memcmp(r, res, rn) == 0);
            CHECK(ss != NULL);
            if (!ss)
                continue;
            const unsigned char *sc = sub(ss, sn, 1, &scn);
            CHECK(sc && scn == 2 && memcmp(sc, "sc", 2) == 0);
            const unsigned char *q = ss, *qend = ss + sn;
            uint32_t i = lo;
            while (next(&q, qend, &f) == 1) {
                if (f.num != 2)
                    continue;
                const unsigned char *s = f.p, *send = f.p + f.n;
                field g;
                int kvs = 0, links = 0, parent = 0, lev = 0;
                while (next(&s, send, &g) == 1) {
                    if (g.num == 2) {                       /* span_id */
                        uint64_t id = 0;
                        for (int b = 0; b < 8; b++)
                            id = id << 8 | g.p[b];
                        CHECK_EQ_U(id, 100 + i);
                    } else if (g.num == 4)
                        parent = 1;
                    else if (g.num == 5 && i == 2)
                        CHECK(g.n == 200 && g.p[0] == 'n' && g.p[199] == 'n');
                    else if (g.num == 5 && i == 3)
                        CHECK(g.n == 3 && memcmp(g.p, "op?", 3) == 0);
                    else if (g.num == 7)
                        CHECK_EQ_U(g.v, t->spans[i].start_ns + 1000);
                    else if (g.num == 9) {
                        kvs++;
                        size_t kn, vn;
                        const unsigned char *k = sub(g.p, g.n, 1, &kn);
                        const unsigned char *v = sub(g.p, g.n, 2, &vn);
                        CHECK(k && v);
                        if (!k || !v)
                            continue;
                        const unsigned char *vp = v;
                        field h;
                        CHECK(next(&vp, v + vn, &h) == 1 && vp == v + vn);
                        if (kn == 5 && memcmp(k, "xsp.v", 5) == 0)
                            CHECK(h.num == 1 && h.n == sizeof big && h.p[5] == '?'
                                  && h.p[6] == 'v');
                        if (kn == 7 && memcmp(k, "xsp.neg", 7) == 0)
                            CHECK(h.num == 3 && h.v == UINT64_MAX && vn == 11);
                        if (kn == 5 && memcmp(k, "xsp.f", 5) == 0)
                            CHECK(h.num == 4 && h.wire == 1 && h.v == nan_bits);
                        if (kn == 14 && memcmp(k, "xsp.leveled_ns", 14) == 0) {
                            double d;
                            memcpy(&d, &h.v, 8);
                            CHECK(d == (i == 3 ? 1.5 : 2.5));
                            lev++;
                        }
                    } else if (g.num == 13)
                        links++;
                }
                CHECK(s == send);
                CHECK_EQ_U(links, i == 1);                  /* the step: linked, no parent */
                CHECK_EQ_U(parent, i != 0 && i != 1);
                CHECK_EQ_U(lev, i == 3 || i == 4);
                CHECK(kvs >= 4);
                i++;
            }
            CHECK(q == qend);
            CHECK_EQ_U(i, hi);
        }
    /* a trace index past the ids: -1, no request */
    const int32_t bad[N] = {0, 1, 2, 1, 1, 0};
    c.trace_ix = bad;
    CHECK(xsp_otlp_encode(&pb, t, &c, 0, N, res, sizeof res, "sc", 2) == -1);
    CHECK(pb.data == NULL);
    xsp_otlp_pb_release(&pb);
    xsp_trace_free(t);
}

int main(void)
{
    golden();
    framing();
    return CHECK_DONE();
}
