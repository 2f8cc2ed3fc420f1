/*
 * otlpspan.c: one OTLP span of an xsp span (otlpspan.h).
 *
 * The attribute names of a span are collected as they are made (the keys table, reset per
 * span) so that an xsp attribute whose "xsp.<key>" is taken becomes "xsp.attr.<key>" exactly
 * as the reference's `while key in attrs` loop renames it.  A span has few attributes: names
 * are compared by a linear scan, the span's own repeated keys by a scan of those before it (as
 * kinetow.c does).  The tables grow with the largest span, once; nothing else is allocated
 * per span.  The names of the span's own attributes point into the keys table, which may move
 * while it grows: they are kept as offsets and made pointers once the span is complete.
 */
#include "otlpspan.h"

#include <stdlib.h>
#include <string.h>

#include "jsonw.h"

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

/* Appends the name pre + (m times "attr.") + s[0..n) to the keys table; -1 on allocation
 * failure. */
static int keys_add(xsp_otlp_span *k, const char *pre, unsigned m, const char *s, size_t n)
{
    size_t pn = strlen(pre), total = pn + 5 * (size_t)m + n;
    char *buf = grow(k->keys, &k->keys_cap, k->keys_used + total, 1);
    if (!buf)
        return -1;
    k->keys = buf;
    struct xsp_otlp_kent *e = grow(k->key_ent, &k->keys_capn, k->n_keys + 1, sizeof *e);
    if (!e)
        return -1;
    k->key_ent = e;
    char *d = k->keys + k->keys_used;
    memcpy(d, pre, pn);
    for (unsigned r = 0; r < m; r++)
        memcpy(d + pn + 5 * r, "attr.", 5);
    if (n)
        memcpy(d + pn + 5 * (size_t)m, s, n);
    k->key_ent[k->n_keys].off = k->keys_used;
    k->key_ent[k->n_keys++].len = total;
    k->keys_used += total;
    return 0;
}

/* Whether "xsp." + (m times "attr.") + s[0..n) is in the keys table. */
static int keys_has(const xsp_otlp_span *k, unsigned m, const char *s, size_t n)
{
    size_t total = 4 + 5 * (size_t)m + n;
    for (size_t j = 0; j < k->n_keys; j++) {
        if (k->key_ent[j].len != total)
            continue;
        const char *e = k->keys + k->key_ent[j].off;
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
 * k->scratch; its length (n), or (size_t)-1 on allocation failure. */
static size_t printable(xsp_otlp_span *k, const char *s, size_t n)
{
    char *p = grow(k->scratch, &k->scratch_cap, n + 1, 1);
    if (!p)
        return (size_t)-1;
    k->scratch = p;
    size_t i = 0;
    while (i < n) {
        size_t len = (unsigned char)s[i] < 0x80 ? 1 : xsp_utf8_seq((const unsigned char *)s + i,
                                                                    n - i);
        if (!len) {
            p[i++] = '?';
            continue;
        }
        memcpy(p + i, s + i, len);
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

static int same_key(const xsp_trace *t, uint32_t a, uint32_t b)
{
    if (a == b)
        return 1;
    size_t na, nb;
    const char *sa = str_of(t, a, &na), *sb = str_of(t, b, &nb);
    return na == nb && memcmp(sa, sb, na) == 0;
}

/* The next attribute slot of s (room made by the caller), named key[0..key_len). */
static xsp_otlp_kv *kv_add(xsp_otlp_span *s, const char *key, size_t key_len, int type)
{
    xsp_otlp_kv *kv = &s->kv_buf[s->n_kv++];
    kv->key = key;
    kv->key_len = key_len;
    kv->key_plain = key != NULL;        /* a literal of this file; NULL: the span's own */
    kv->type = type;
    return kv;
}

/* kv_add of a literal key */
#define KV(s, lit, type) kv_add((s), (lit), sizeof(lit) - 1, (type))

static void kv_str(xsp_otlp_span *s, const char *key, size_t key_len, const char *v, size_t n)
{
    xsp_otlp_kv *kv = kv_add(s, key, key_len, XSP_OTLP_STR);
    kv->s = v;
    kv->n = n;
}

#define KV_STR(s, lit, v, n) kv_str((s), (lit), sizeof(lit) - 1, (v), (n))

/* The span's own attributes, after the ones xsp sets (own: their names, n_own of them); -1 on
 * allocation failure. */
static int own_attrs(xsp_otlp_span *k, const xsp_trace *t, const xsp_span *s,
                     const char *const *own, unsigned n_own)
{
    k->n_keys = 0;
    k->keys_used = 0;
    for (unsigned j = 0; j < n_own; j++)
        if (keys_add(k, own[j], 0, "", 0) < 0)
            return -1;
    size_t first = k->n_kv;
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
        while (keys_has(k, m, k->scratch, n))
            m++;
        if (keys_add(k, "xsp.", m, k->scratch, n) < 0)
            return -1;
        xsp_otlp_kv *kv = kv_add(k, NULL, 0,
                                 a->type == XSP_ATTR_INT ? XSP_OTLP_INT
                                 : a->type == XSP_ATTR_FLOAT ? XSP_OTLP_DOUBLE : XSP_OTLP_STR);
        if (a->type == XSP_ATTR_INT)
            kv->i = a->v.i;
        else if (a->type == XSP_ATTR_FLOAT)
            kv->f = a->v.f;
        else
            kv->s = str_of(t, a->v.s, &kv->n);
    }
    /* the names, now that the table has stopped moving: the k->n_kv - first last ones */
    for (size_t j = first, e = n_own; j < k->n_kv; j++, e++) {
        k->kv_buf[j].key = k->keys + k->key_ent[e].off;
        k->kv_buf[j].key_len = k->key_ent[e].len;
    }
    return 0;
}

/* The leveled latency of span i, or NULL. */
static const double *leveled(xsp_otlp_span *s, const xsp_otlp_cols *c, uint32_t i)
{
    if (!c->n_lev)
        return NULL;
    if (s->last != i) {                 /* not the next one: the first id >= i, by bisection */
        uint32_t lo = 0, hi = c->n_lev;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (c->lev_id[mid] < (int64_t)i)
                lo = mid + 1;
            else
                hi = mid;
        }
        s->lev_next = lo;
    }
    while (s->lev_next < c->n_lev && c->lev_id[s->lev_next] < (int64_t)i)
        s->lev_next++;
    return s->lev_next < c->n_lev && c->lev_id[s->lev_next] == (int64_t)i
           ? &c->lev_val[s->lev_next] : NULL;
}

/* v in decimal into buf (at least 21 bytes, NUL-ended); its length. */
static size_t u64_text(char *buf, uint64_t v)
{
    size_t n = xsp_u64_dec(buf, v);
    buf[n] = 0;
    return n;
}

int xsp_otlp_span_get(xsp_otlp_span *s, const xsp_trace *t, const xsp_otlp_cols *c, uint32_t i)
{
    const xsp_span *sp = &t->spans[i];
    const double *lev = leveled(s, c, i);
    s->last = i + 1;
    s->n_kv = 0;
    s->kv = NULL;
    uint32_t tr = c->trace_ix ? (uint32_t)c->trace_ix[i] : 0, ptr = tr;
    uint32_t p = sp->parent;
    int has_parent = p != XSP_NO_PARENT && p < t->n_spans;
    if (has_parent && c->trace_ix)
        ptr = (uint32_t)c->trace_ix[p];
    if (tr >= c->n_traces || ptr >= c->n_traces)
        return -1;
    /* the same trace: the same id (as the reference compares them), not the same index */
    int same = c->trace_hi[ptr] == c->trace_hi[tr] && c->trace_lo[ptr] == c->trace_lo[tr];
    s->trace = tr;
    s->link_trace = ptr;
    s->parent = !has_parent ? XSP_OTLP_ROOT : same ? XSP_OTLP_PARENT : XSP_OTLP_LINK;
    s->span_id = c->span_base + i;
    s->parent_id = has_parent ? c->span_base + p : 0;
    s->name = str_of(t, sp->name, &s->name_len);
    s->start = sp->start_ns + c->offset;
    s->end = sp->end_ns + c->offset;

    xsp_otlp_kv *kv = grow(s->kv_buf, &s->kv_cap, 8 + (size_t)sp->attr_n, sizeof *kv);
    if (!kv)
        return -1;
    s->kv_buf = kv;
    const char *own[8] = {"xsp.level", "xsp.kind", "xsp.span_id", "xsp.thread"};
    unsigned n_own = 4;
    const char *level = xsp_level_name(sp->level), *kind = xsp_kind_name(sp->kind);
    KV_STR(s, "xsp.level", level, strlen(level));
    KV_STR(s, "xsp.kind", kind, strlen(kind));
    KV(s, "xsp.span_id", XSP_OTLP_INT)->i = i;
    uint64_t tid = t->threads[sp->thread].tid;
    if (tid < (uint64_t)1 << 63)        /* int64; past it, its decimal text */
        KV(s, "xsp.thread", XSP_OTLP_INT)->i = (int64_t)tid;
    else {
        size_t tn = u64_text(s->tid, tid);
        KV_STR(s, "xsp.thread", s->tid, tn);
    }
    size_t n;
    const char *tname = str_of(t, t->threads[sp->thread].name, &n);
    if (n) {
        KV_STR(s, "xsp.thread_name", tname, n);
        own[n_own++] = "xsp.thread_name";
    }
    if (sp->kind == XSP_KIND_MODEL || sp->kind == XSP_KIND_MODULE) {
        KV_STR(s, "xsp.module", s->name, s->name_len);
        own[n_own++] = "xsp.module";
    }
    if (sp->flags) {
        KV(s, "xsp.flags", XSP_OTLP_INT)->i = sp->flags;
        own[n_own++] = "xsp.flags";
    }
    if (lev) {
        KV(s, "xsp.leveled_ns", XSP_OTLP_DOUBLE)->f = *lev;
        own[n_own++] = "xsp.leveled_ns";
    }
    if (sp->attr_n && own_attrs(s, t, sp, own, n_own) < 0) {
        s->n_kv = 0;
        return -1;
    }
    s->kv = s->kv_buf;
    return 0;
}

void xsp_otlp_span_release(xsp_otlp_span *s)
{
    if (!s)
        return;
    free(s->kv_buf);
    free(s->keys);
    free(s->key_ent);
    free(s->scratch);
    memset(s, 0, sizeof *s);
}
