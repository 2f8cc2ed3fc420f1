/*
 * otlpw.c: one OTLP/JSON span per xsp span (otlpw.h).
 *
 * The attribute names of a span are collected as they are written (the keys table below,
 * reset per span) so that an xsp attribute whose "xsp.<key>" is taken becomes
 * "xsp.attr.<key>" exactly as the reference's `while key in attrs` loop renames it.  A span
 * has few attributes: names are compared by a linear scan, the span's own repeated keys by a
 * scan of those before it (as kinetow.c does).  The tables grow with the largest span, once;
 * nothing else is allocated per span.
 */
#include "otlpw.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The names of one span's attributes so far, back to back in buf. */
typedef struct kent {
    size_t off, len;            /* a name's offset in buf and its length */
} kent;

typedef struct keys {
    char *buf;                  /* the names */
    size_t used, cap;           /* bytes of buf used and allocated */
    kent *e;                    /* the names' places */
    size_t n, capn;             /* names and room for them */
    char *p;                    /* scratch: a key made printable */
    size_t pcap;                /* its room */
} keys;

/* p (cap items of size bytes) with room for need items: p itself, a larger block (p then
 * freed, *cap updated), or NULL on allocation failure (p and *cap unchanged). */
static void *grow(void *p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return p;
    size_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    void *q = realloc(p, c * size);
    if (q)
        *cap = c;
    return q;
}

/* Appends the name pre + (m times "attr.") + s[0..n) to the table; -1 on allocation failure. */
static int keys_add(keys *k, const char *pre, unsigned m, const char *s, size_t n)
{
    size_t pn = strlen(pre), total = pn + 5 * (size_t)m + n;
    char *buf = grow(k->buf, &k->cap, k->used + total, 1);
    if (!buf)
        return -1;
    k->buf = buf;
    kent *e = grow(k->e, &k->capn, k->n + 1, sizeof *e);
    if (!e)
        return -1;
    k->e = e;
    char *d = k->buf + k->used;
    memcpy(d, pre, pn);
    for (unsigned r = 0; r < m; r++)
        memcpy(d + pn + 5 * r, "attr.", 5);
    if (n)
        memcpy(d + pn + 5 * (size_t)m, s, n);
    k->e[k->n].off = k->used;
    k->e[k->n++].len = total;
    k->used += total;
    return 0;
}

/* Whether "xsp." + (m times "attr.") + s[0..n) is in the table. */
static int keys_has(const keys *k, unsigned m, const char *s, size_t n)
{
    size_t total = 4 + 5 * (size_t)m + n;
    for (size_t j = 0; j < k->n; j++) {
        if (k->e[j].len != total)
            continue;
        const char *e = k->buf + k->e[j].off;
        if (memcmp(e, "xsp.", 4) != 0)
            continue;
        unsigned r;
        for (r = 0; r < m && memcmp(e + 4 + 5 * r, "attr.", 5) == 0; r++)
            ;
        if (r == m && memcmp(e + 4 + 5 * (size_t)m, s, n) == 0)
            return 1;
    }
    return 0;
}

/* s[0..n) with each byte that is not part of well-formed UTF-8 as '?' (Python's printable), in
 * k->p; its length, or (size_t)-1 on allocation failure. */
static size_t printable(keys *k, const char *s, size_t n)
{
    char *p = grow(k->p, &k->pcap, n + 1, 1);
    if (!p)
        return (size_t)-1;
    k->p = p;
    size_t i = 0;
    while (i < n) {
        size_t len = (unsigned char)s[i] < 0x80 ? 1 : xsp_utf8_seq((const unsigned char *)s + i,
                                                                    n - i);
        if (!len) {
            k->p[i++] = '?';
            continue;
        }
        memcpy(k->p + i, s + i, len);
        i += len;
    }
    return n;
}

static const char *str_of(const xsp_trace *t, uint32_t id, size_t *n)
{
    const char *s = xsp_strtab_get(&t->strings, id, n);
    if (!s) {
        *n = 0;
        return "";
    }
    return s;
}

/* ,{"key":<key>,"value":{ -- the key a literal needing no escapes */
static void key_lit(xsp_jsonw *w, const char *key)
{
    xsp_jsonw_lit(w, ",{\"key\":\"");
    xsp_jsonw_lit(w, key);
    xsp_jsonw_lit(w, "\",\"value\":{");
}

static void int_value(xsp_jsonw *w, int64_t v)
{
    xsp_jsonw_lit(w, "\"intValue\":\"");
    xsp_jsonw_int(w, v);
    xsp_jsonw_lit(w, "\"}}");
}

static void str_value(xsp_jsonw *w, const char *s, size_t n)
{
    xsp_jsonw_lit(w, "\"stringValue\":");
    xsp_jsonw_str(w, s, n);
    xsp_jsonw_lit(w, "}}");
}

static void double_value(xsp_jsonw *w, double v)
{
    xsp_jsonw_lit(w, "\"doubleValue\":");
    if (isnan(v))
        xsp_jsonw_lit(w, "\"NaN\"");
    else if (isinf(v))
        xsp_jsonw_lit(w, v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
    else
        xsp_jsonw_double(w, v);
    xsp_jsonw_lit(w, "}}");
}

static int same_key(const xsp_trace *t, uint32_t a, uint32_t b)
{
    if (a == b)
        return 1;
    size_t na, nb;
    const char *sa = str_of(t, a, &na), *sb = str_of(t, b, &nb);
    return na == nb && memcmp(sa, sb, na) == 0;
}

/* The span's own attributes, after the ones xsp sets (own: their names, n_own of them); -1 on
 * allocation failure. */
static int own_attrs(xsp_jsonw *w, const xsp_trace *t, const xsp_span *s, keys *k,
                     const char *const *own, unsigned n_own)
{
    if (!s->attr_n)
        return 0;
    k->n = 0;
    k->used = 0;
    for (unsigned j = 0; j < n_own; j++)
        if (keys_add(k, own[j], 0, "", 0) < 0)
            return -1;
    const xsp_attr *at = t->attrs + s->attr_off;
    for (uint32_t j = 0; j < s->attr_n; j++) {
        int seen = 0;                   /* a dict keeps a key's first place, its last value */
        for (uint32_t m = 0; m < j && !seen; m++)
            seen = same_key(t, at[m].key, at[j].key);
        if (seen)
            continue;
        const xsp_attr *a = &at[j];
        for (uint32_t m = j + 1; m < s->attr_n; m++)
            if (same_key(t, at[m].key, at[j].key))
                a = &at[m];
        size_t rn, n;
        const char *raw = str_of(t, at[j].key, &rn);
        if ((n = printable(k, raw, rn)) == (size_t)-1)
            return -1;
        unsigned m = 0;
        while (keys_has(k, m, k->p, n))
            m++;
        if (keys_add(k, "xsp.", m, k->p, n) < 0)
            return -1;
        xsp_jsonw_lit(w, ",{\"key\":");
        const kent *e = &k->e[k->n - 1];
        xsp_jsonw_str(w, k->buf + e->off, e->len);
        xsp_jsonw_lit(w, ",\"value\":{");
        if (a->type == XSP_ATTR_INT)
            int_value(w, a->v.i);
        else if (a->type == XSP_ATTR_FLOAT)
            double_value(w, a->v.f);
        else {
            size_t vn;
            const char *v = str_of(t, a->v.s, &vn);
            str_value(w, v, vn);
        }
    }
    return 0;
}

/* Formatting into room from xsp_jsonw_reserve: each returns the end of what it wrote. */
#define PUT(p, lit) (memcpy((p), (lit), sizeof(lit) - 1), (p) + sizeof(lit) - 1)

static char *put_str(char *p, const char *s)
{
    size_t n = strlen(s);
    memcpy(p, s, n);
    return p + n;
}

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

/* The attributes of span i, as otlp.spans() inserts them; -1 on allocation failure. */
static int attrs(xsp_jsonw *w, const xsp_trace *t, uint32_t i, const double *lev, keys *k)
{
    const xsp_span *s = &t->spans[i];
    const char *own[8] = {"xsp.level", "xsp.kind", "xsp.span_id", "xsp.thread"};
    unsigned n_own = 4;
    uint64_t tid = t->threads[s->thread].tid;
    char *b = xsp_jsonw_reserve(w, 512), *p = b;
    p = PUT(p, "{\"key\":\"xsp.level\",\"value\":{\"stringValue\":\"");
    p = put_str(p, xsp_level_name(s->level));
    p = PUT(p, "\"}},{\"key\":\"xsp.kind\",\"value\":{\"stringValue\":\"");
    p = put_str(p, xsp_kind_name(s->kind));
    p = PUT(p, "\"}},{\"key\":\"xsp.span_id\",\"value\":{\"intValue\":\"");
    p = put_u64(p, i);
    p = PUT(p, "\"}},{\"key\":\"xsp.thread\",\"value\":{\"");
    if (tid < (uint64_t)1 << 63)        /* int64; past it, its decimal text */
        p = PUT(p, "intValue\":\"");
    else
        p = PUT(p, "stringValue\":\"");
    p = put_u64(p, tid);
    p = PUT(p, "\"}}");
    xsp_jsonw_commit(w, (size_t)(p - b));
    size_t n;
    const char *tname = str_of(t, t->threads[s->thread].name, &n);
    if (n) {
        key_lit(w, "xsp.thread_name");
        str_value(w, tname, n);
        own[n_own++] = "xsp.thread_name";
    }
    if (s->kind == XSP_KIND_MODEL || s->kind == XSP_KIND_MODULE) {
        const char *name = str_of(t, s->name, &n);
        key_lit(w, "xsp.module");
        str_value(w, name, n);
        own[n_own++] = "xsp.module";
    }
    if (s->flags) {
        key_lit(w, "xsp.flags");
        int_value(w, s->flags);
        own[n_own++] = "xsp.flags";
    }
    if (lev) {
        key_lit(w, "xsp.leveled_ns");
        double_value(w, *lev);
        own[n_own++] = "xsp.leveled_ns";
    }
    return own_attrs(w, t, s, k, own, n_own);
}

int xsp_otlp_write_spans(xsp_jsonw *w, const xsp_trace *t, const xsp_otlp_cols *c)
{
    keys k = {0};
    int rc = 0;
    uint32_t lev_cur = 0;
    for (uint32_t i = 0; i < t->n_spans && !xsp_jsonw_failed(w) && !rc; i++) {
        const xsp_span *s = &t->spans[i];
        uint32_t tr = c->trace_ix ? (uint32_t)c->trace_ix[i] : 0, ptr = tr;  /* its trace, its
                                                                               * parent's */
        uint32_t p = s->parent;
        int has_parent = p != XSP_NO_PARENT && p < t->n_spans;
        if (has_parent && c->trace_ix)
            ptr = (uint32_t)c->trace_ix[p];
        if (tr >= c->n_traces || ptr >= c->n_traces) {
            rc = -1;
            break;
        }
        /* the same trace: the same id (as the reference compares them), not the same index */
        int same = c->trace_hi[ptr] == c->trace_hi[tr] && c->trace_lo[ptr] == c->trace_lo[tr];
        char *b = xsp_jsonw_reserve(w, 256), *o = b;
        o = i ? PUT(o, ",{") : PUT(o, "{");
        o = put_ids(o, c, tr, c->span_base + i);
        if (has_parent && same) {
            o = PUT(o, ",\"parentSpanId\":\"");
            o = put_hex(o, c->span_base + p);
            o = PUT(o, "\"");
        }
        xsp_jsonw_commit(w, (size_t)(o - b));
        size_t n;
        const char *name = str_of(t, s->name, &n);
        if (n) {
            xsp_jsonw_lit(w, ",\"name\":");
            xsp_jsonw_str(w, name, n);
        }
        /* protobuf's JSON mapping leaves a default value out: a time of 0 */
        uint64_t start = s->start_ns + c->offset, end = s->end_ns + c->offset;
        b = xsp_jsonw_reserve(w, 256);
        o = PUT(b, ",\"kind\":1");
        if (start) {
            o = PUT(o, ",\"startTimeUnixNano\":\"");
            o = put_u64(o, start);
            o = PUT(o, "\"");
        }
        if (end) {
            o = PUT(o, ",\"endTimeUnixNano\":\"");
            o = put_u64(o, end);
            o = PUT(o, "\"");
        }
        o = PUT(o, ",\"attributes\":[");
        xsp_jsonw_commit(w, (size_t)(o - b));
        while (lev_cur < c->n_lev && c->lev_id[lev_cur] < (int64_t)i)
            lev_cur++;
        const double *lev = lev_cur < c->n_lev && c->lev_id[lev_cur] == (int64_t)i
                            ? &c->lev_val[lev_cur] : NULL;
        if (attrs(w, t, i, lev, &k) < 0) {
            rc = -1;
            break;
        }
        b = xsp_jsonw_reserve(w, 512);
        o = PUT(b, "]");
        if (has_parent && !same) {      /* a step span: its own trace's root, linked */
            o = PUT(o, ",\"links\":[{");
            o = put_ids(o, c, ptr, c->span_base + p);
            o = PUT(o, ",\"attributes\":[{\"key\":\"xsp.link\",\"value\":{\"stringValue\":"
                       "\"parent\"}}],\"flags\":256}]");
        }
        o = PUT(o, ",\"status\":{},\"flags\":256}");
        xsp_jsonw_commit(w, (size_t)(o - b));
    }
    free(k.buf);
    free(k.e);
    free(k.p);
    return rc;
}
