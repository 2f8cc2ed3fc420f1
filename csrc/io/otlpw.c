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
    char tmp[20];
    int k = 20;
    do {
        tmp[--k] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    memcpy(p, tmp + k, (size_t)(20 - k));
    return p + (20 - k);
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

/* The span's attributes, as otlpspan.h gives them. */
static void attrs(xsp_jsonw *w, const xsp_otlp_span *sp)
{
    for (size_t j = 0; j < sp->n_kv; j++) {
        const xsp_otlp_kv *kv = &sp->kv[j];
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
