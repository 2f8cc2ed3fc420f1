/*
 * otlpw.c: one OTLP/JSON span per xsp span (otlpw.h).
 *
 * What each span holds (ids, parent or link, times, attributes with their names resolved) is
 * otlpspan.c's, shared with the protobuf encoder (otlppb.c); this file only writes it as text.
 * The fixed parts of a span are formatted in place in room reserved from the JSON layer (one
 * call per part instead of one per piece); nothing is allocated per span.
 */
#include "otlpw.h"

#include <math.h>
#include <string.h>

/* Formatting into room from xsp_jsonw_reserve: each returns the end of what it wrote. */
#define PUT(p, lit) (memcpy((p), (lit), sizeof(lit) - 1), (p) + sizeof(lit) - 1)

static char *put_hex(char *p, uint64_t v)
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--, v >>= 4)
        p[i] = digits[v & 15];
    return p + 16;
}

static char *put_u64(char *p, uint64_t v)
{
    return p + xsp_u64_dec(p, v);
}

/* "traceId":"..","spanId":".." */
static char *put_ids(char *p, const xsp_otlp_cols *c, uint32_t trace, uint64_t span)
{
    p = PUT(p, "\"traceId\":\"");
    p = put_hex(p, c->trace_hi[trace]);
    p = put_hex(p, c->trace_lo[trace]);
    p = PUT(p, "\",\"spanId\":\"");
    p = put_hex(p, span);
    return PUT(p, "\"");
}

/* Whether the n bytes at s are written in JSON as they are (printable ASCII but '"' and '\'):
 * eight bytes at a time (a byte is found by the "has a zero byte" test on a word). */
#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull
#define ZERO_IN(v) (((v) - ONES) & ~(v) & HIGHS)

static int plain(const char *s, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x;
        memcpy(&x, s + i, 8);
        if ((x & HIGHS) || ZERO_IN(x ^ (0x7f * ONES)) || (((x - 0x20 * ONES) & ~x & HIGHS))
            || ZERO_IN(x ^ ('"' * ONES)) || ZERO_IN(x ^ ('\\' * ONES)))
            return 0;
    }
    for (; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\')
            return 0;
    }
    return 1;
}

/* One attribute, formatted in place (the fast path: a key and a string needing no escapes,
 * short enough for one reservation); 0, or -1 when it is not such an attribute. */
static int put_attr(xsp_jsonw *w, const xsp_otlp_kv *kv, int first)
{
    size_t need = kv->key_len + 96 + (kv->type == XSP_OTLP_STR ? kv->n : 0);
    if (need > XSP_JSONW_RESERVE || (!kv->key_plain && !plain(kv->key, kv->key_len))
        || (kv->type == XSP_OTLP_STR && !plain(kv->s, kv->n)))
        return -1;
    char *b = xsp_jsonw_reserve(w, need), *o = b;
    o = first ? PUT(o, "{\"key\":\"") : PUT(o, ",{\"key\":\"");
    memcpy(o, kv->key, kv->key_len);
    o += kv->key_len;
    if (kv->type == XSP_OTLP_INT) {
        o = PUT(o, "\",\"value\":{\"intValue\":\"");
        if (kv->i < 0)
            *o++ = '-';
        o = put_u64(o, kv->i < 0 ? (uint64_t)0 - (uint64_t)kv->i : (uint64_t)kv->i);
        o = PUT(o, "\"}}");
    } else if (kv->type == XSP_OTLP_DOUBLE) {
        o = PUT(o, "\",\"value\":{\"doubleValue\":");
        if (isnan(kv->f))
            o = PUT(o, "\"NaN\"");
        else if (isinf(kv->f))
            o = kv->f > 0 ? PUT(o, "\"Infinity\"") : PUT(o, "\"-Infinity\"");
        else
            o += xsp_json_fmt_double(o, kv->f);
        o = PUT(o, "}}");
    } else {
        o = PUT(o, "\",\"value\":{\"stringValue\":\"");
        memcpy(o, kv->s, kv->n);
        o += kv->n;
        o = PUT(o, "\"}}");
    }
    xsp_jsonw_commit(w, (size_t)(o - b));
    return 0;
}

/* The span's attributes, as otlpspan.h gives them. */
static void attrs(xsp_jsonw *w, const xsp_otlp_span *sp)
{
    for (size_t j = 0; j < sp->n_kv; j++) {
        const xsp_otlp_kv *kv = &sp->kv[j];
        if (put_attr(w, kv, j == 0) == 0)
            continue;
        xsp_jsonw_lit(w, j ? ",{\"key\":" : "{\"key\":");
        xsp_jsonw_str(w, kv->key, kv->key_len);
        if (kv->type == XSP_OTLP_INT) {
            xsp_jsonw_lit(w, ",\"value\":{\"intValue\":\"");
            xsp_jsonw_int(w, kv->i);
            xsp_jsonw_lit(w, "\"}}");
        } else if (kv->type == XSP_OTLP_DOUBLE) {
            xsp_jsonw_lit(w, ",\"value\":{\"doubleValue\":");
            if (isnan(kv->f))
                xsp_jsonw_lit(w, "\"NaN\"");
            else if (isinf(kv->f))
                xsp_jsonw_lit(w, kv->f > 0 ? "\"Infinity\"" : "\"-Infinity\"");
            else
                xsp_jsonw_double(w, kv->f);
            xsp_jsonw_lit(w, "}}");
        } else {
            xsp_jsonw_lit(w, ",\"value\":{\"stringValue\":");
            xsp_jsonw_str(w, kv->s, kv->n);
            xsp_jsonw_lit(w, "}}");
        }
    }
}

int xsp_otlp_write_spans(xsp_jsonw *w, const xsp_trace *t, const xsp_otlp_cols *c)
{
    xsp_otlp_span sp = {0};
    int rc = 0;
    for (uint32_t i = 0; i < t->n_spans && !xsp_jsonw_failed(w); i++) {
        if (xsp_otlp_span_get(&sp, t, c, i) < 0) {
            rc = -1;
            break;
        }
        char *b = xsp_jsonw_reserve(w, 256), *o = b;
        o = i ? PUT(o, ",{") : PUT(o, "{");
        o = put_ids(o, c, sp.trace, sp.span_id);
        if (sp.parent == XSP_OTLP_PARENT) {
            o = PUT(o, ",\"parentSpanId\":\"");
            o = put_hex(o, sp.parent_id);
            o = PUT(o, "\"");
        }
        xsp_jsonw_commit(w, (size_t)(o - b));
        if (sp.name_len) {
            xsp_jsonw_lit(w, ",\"name\":");
            xsp_jsonw_str(w, sp.name, sp.name_len);
        }
        /* protobuf's JSON mapping leaves a default value out: a time of 0 */
        b = xsp_jsonw_reserve(w, 256);
        o = PUT(b, ",\"kind\":1");
        if (sp.start) {
            o = PUT(o, ",\"startTimeUnixNano\":\"");
            o = put_u64(o, sp.start);
            o = PUT(o, "\"");
        }
        if (sp.end) {
            o = PUT(o, ",\"endTimeUnixNano\":\"");
            o = put_u64(o, sp.end);
            o = PUT(o, "\"");
        }
        o = PUT(o, ",\"attributes\":[");
        xsp_jsonw_commit(w, (size_t)(o - b));
        attrs(w, &sp);
        b = xsp_jsonw_reserve(w, 512);
        o = PUT(b, "]");
        if (sp.parent == XSP_OTLP_LINK) {       /* a step span: its own trace's root, linked */
            o = PUT(o, ",\"links\":[{");
            o = put_ids(o, c, sp.link_trace, sp.parent_id);
            o = PUT(o, ",\"attributes\":[{\"key\":\"xsp.link\",\"value\":{\"stringValue\":"
                       "\"parent\"}}],\"flags\":256}]");
        }
        o = PUT(o, ",\"status\":{},\"flags\":256}");
        xsp_jsonw_commit(w, (size_t)(o - b));
    }
    xsp_otlp_span_release(&sp);
    return rc;
}
