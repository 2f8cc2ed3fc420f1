/*
 * trace.c: the merged trace container (see trace.h for the layout and invariants).
 *
 * Arrays grow by doubling; every add either succeeds or leaves the trace unchanged, so a
 * producer that runs out of memory can still hand back a consistent (smaller) trace.
 */
#include "trace.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Grows *arr (of *cap elements of size sz) to hold n + 1. Returns 0 or -1 (unchanged). */
static int grow(void **arr, uint32_t *cap, uint32_t n, size_t sz)
{
    if (n < *cap)
        return 0;
    if (*cap >= UINT32_MAX / 2)
        return -1;
    uint32_t ncap = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, (size_t)ncap * sz);
    if (!p)
        return -1;
    *arr = p;
    *cap = ncap;
    return 0;
}

xsp_trace *xsp_trace_new(void)
{
    xsp_trace *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    if (xsp_strtab_init(&t->strings) != 0) {
        free(t);
        return NULL;
    }
    return t;
}

void xsp_trace_free(xsp_trace *t)
{
    if (!t)
        return;
    free(t->spans);
    free(t->attrs);
    free(t->threads);
    free(t->meta);
    free(t->counters);
    xsp_strtab_free(&t->strings);
    free(t);
}

uint32_t xsp_trace_add_span(xsp_trace *t, const xsp_span *s)
{
    if (t->n_spans == UINT32_MAX - 1
        || grow((void **)&t->spans, &t->cap_spans, t->n_spans, sizeof *s) != 0)
        return UINT32_MAX;
    t->spans[t->n_spans] = *s;
    return t->n_spans++;
}

uint32_t xsp_trace_add_attr(xsp_trace *t, const xsp_attr *a)
{
    if (grow((void **)&t->attrs, &t->cap_attrs, t->n_attrs, sizeof *a) != 0)
        return UINT32_MAX;
    t->attrs[t->n_attrs] = *a;
    return t->n_attrs++;
}

/* Returns 1 when string id of t holds exactly the len bytes at s, else 0. */
static int str_is(const xsp_trace *t, uint32_t id, const char *s, size_t len)
{
    size_t l;
    const char *p = xsp_strtab_get(&t->strings, id, &l);
    return p && l == len && memcmp(p, s, len) == 0;
}

/* Checks xsp_trace_add_span_attrs' arguments against t (n > 0) and stores in *total the number
 * of attributes the rebuilt array holds.  Returns 0, or -1 with err filled. */
static int check_span_attrs(const xsp_trace *t, const char *key, size_t klen, uint32_t n,
                            const uint32_t *ids, const xsp_attr *values, uint64_t *total,
                            char *err, size_t errlen)
{
    uint64_t sum = n;
    for (uint32_t i = 0; i < t->n_spans; i++) {
        const xsp_span *s = &t->spans[i];
        if ((uint64_t)s->attr_off + s->attr_n > t->n_attrs) {
            snprintf(err, errlen, "span %" PRIu32 ": attributes %" PRIu32 "..%" PRIu64
                     " out of range (%" PRIu32 " attributes)", i, s->attr_off,
                     (uint64_t)s->attr_off + s->attr_n, t->n_attrs);
            return -1;
        }
        sum += s->attr_n;
    }
    for (uint32_t k = 0; k < n; k++) {
        uint32_t id = ids[k];
        const xsp_attr *v = &values[k];
        if (id >= t->n_spans) {
            snprintf(err, errlen, "span %" PRIu32 " (ids[%" PRIu32 "]): no such span (the trace "
                     "has %" PRIu32 ")", id, k, t->n_spans);
            return -1;
        }
        if (k && id <= ids[k - 1]) {
            snprintf(err, errlen, "span %" PRIu32 " (ids[%" PRIu32 "]): not after ids[%" PRIu32
                     "] = %" PRIu32 " (ids must be strictly increasing)", id, k, k - 1, ids[k - 1]);
            return -1;
        }
        if (v->type > XSP_ATTR_STR) {
            snprintf(err, errlen, "span %" PRIu32 " (ids[%" PRIu32 "]): unknown value type %"
                     PRIu32, id, k, v->type);
            return -1;
        }
        if (v->type == XSP_ATTR_STR && v->v.s >= t->strings.n) {
            snprintf(err, errlen, "span %" PRIu32 " (ids[%" PRIu32 "]): string value id %" PRIu32
                     " out of range (%" PRIu32 " strings)", id, k, v->v.s, t->strings.n);
            return -1;
        }
        const xsp_span *s = &t->spans[id];
        if (s->attr_n == UINT16_MAX) {
            snprintf(err, errlen, "span %" PRIu32 " (ids[%" PRIu32 "]): already has %u attributes, "
                     "the most a span can have", id, k, (unsigned)UINT16_MAX);
            return -1;
        }
        for (uint32_t j = 0; j < s->attr_n; j++) {
            if (str_is(t, t->attrs[s->attr_off + j].key, key, klen)) {
                snprintf(err, errlen, "span %" PRIu32 " (ids[%" PRIu32 "]): already has attribute "
                         "\"%s\"", id, k, key);
                return -1;
            }
        }
    }
    if (sum >= UINT32_MAX || sum > SIZE_MAX / sizeof(xsp_attr)) {
        snprintf(err, errlen, "too many attributes: %" PRIu64 " (at most %" PRIu32 ")", sum,
                 UINT32_MAX - 1);
        return -1;
    }
    *total = sum;
    return 0;
}

int xsp_trace_add_span_attrs(xsp_trace *t, const char *key, uint32_t n, const uint32_t *ids,
                             const xsp_attr *values, char *err, size_t errlen)
{
    if (!key || (n && (!ids || !values))) {
        snprintf(err, errlen, "add_span_attrs: key, ids and values must not be NULL");
        return -1;
    }
    size_t klen = strlen(key);
    if (klen > XSP_STRTAB_MAX_LEN) {
        snprintf(err, errlen, "attribute key of %zu bytes: at most %u allowed", klen,
                 (unsigned)XSP_STRTAB_MAX_LEN);
        return -1;
    }
    if (n == 0)
        return 0;
    uint64_t total;
    if (check_span_attrs(t, key, klen, n, ids, values, &total, err, errlen) != 0)
        return -1;
    /* Everything that can fail happens before the trace is touched: the array, then the key
     * (the string table is unchanged when interning fails). */
    xsp_attr *na = malloc((size_t)total * sizeof *na);
    if (!na) {
        snprintf(err, errlen, "out of memory for %" PRIu64 " attributes", total);
        return -1;
    }
    uint32_t kid = xsp_strtab_intern(&t->strings, key, klen);
    if (kid == UINT32_MAX) {
        free(na);
        snprintf(err, errlen, "out of memory interning attribute key \"%s\"", key);
        return -1;
    }
    uint32_t out = 0, k = 0;
    for (uint32_t i = 0; i < t->n_spans; i++) {
        xsp_span *s = &t->spans[i];
        if (s->attr_n)
            memcpy(na + out, t->attrs + s->attr_off, s->attr_n * sizeof *na);
        s->attr_off = out;
        out += s->attr_n;
        if (k < n && ids[k] == i) {
            const xsp_attr *v = &values[k++];
            xsp_attr *a = &na[out++];
            memset(a, 0, sizeof *a);
            a->key = kid;
            a->type = v->type;
            if (v->type == XSP_ATTR_INT)
                a->v.i = v->v.i;
            else if (v->type == XSP_ATTR_FLOAT)
                a->v.f = v->v.f;
            else
                a->v.s = v->v.s;
            s->attr_n++;
        }
    }
    free(t->attrs);
    t->attrs = na;
    t->n_attrs = out;
    t->cap_attrs = (uint32_t)total;
    return 0;
}

/* 1 when attribute key id kid is one of the n_keys names in keys. */
static int is_id_key(const xsp_trace *t, uint32_t kid, const char *const *keys, uint32_t n_keys)
{
    for (uint32_t k = 0; k < n_keys; k++)
        if (keys[k] && str_is(t, kid, keys[k], strlen(keys[k])))
            return 1;
    return 0;
}

int xsp_trace_drop_before(xsp_trace *t, uint64_t t0, const char *const *id_keys, uint32_t n_keys,
                          uint64_t *unlinked, char *err, size_t errlen)
{
    if (unlinked)
        *unlinked = 0;
    if (n_keys && !id_keys) {
        snprintf(err, errlen, "drop_before: id_keys must not be NULL");
        return -1;
    }
    /* Everything that can fail comes first: the checks, then both arrays. */
    uint64_t kept_attrs = 0;
    for (uint32_t i = 0; i < t->n_spans; i++) {
        const xsp_span *s = &t->spans[i];
        if (s->parent != XSP_NO_PARENT && s->parent >= i) {
            snprintf(err, errlen, "span %" PRIu32 ": parent %" PRIu32 " is not before it", i,
                     s->parent);
            return -1;
        }
        if ((uint64_t)s->attr_off + s->attr_n > t->n_attrs) {
            snprintf(err, errlen, "span %" PRIu32 ": attributes %" PRIu32 "..%" PRIu64
                     " out of range (%" PRIu32 " attributes)", i, s->attr_off,
                     (uint64_t)s->attr_off + s->attr_n, t->n_attrs);
            return -1;
        }
        kept_attrs += s->attr_n;   /* an upper bound: every span's */
    }
    if (kept_attrs >= UINT32_MAX || kept_attrs >= SIZE_MAX / sizeof(xsp_attr)) {
        snprintf(err, errlen, "too many attributes: %" PRIu64, kept_attrs);
        return -1;
    }
    uint32_t *map = malloc(((size_t)t->n_spans + 1) * sizeof *map);
    xsp_attr *na = malloc(((size_t)kept_attrs + 1) * sizeof *na);
    if (!map || !na) {
        free(map);
        free(na);
        snprintf(err, errlen, "out of memory for the schedule's cut of %" PRIu32 " spans",
                 t->n_spans);
        return -1;
    }
    /* The new ids: a span is kept when it reaches past t0 and its parent is kept. */
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n_spans; i++) {
        const xsp_span *s = &t->spans[i];
        int keep = (s->end_ns > t0 || s->start_ns >= t0)
                   && (s->parent == XSP_NO_PARENT || map[s->parent] != XSP_NO_PARENT);
        map[i] = keep ? n++ : XSP_NO_PARENT;
    }
    /* Moved down in place (a span's new id is never above its old one); attributes are read
     * from the old array and written to the new one. */
    uint32_t out = 0;
    for (uint32_t i = 0; i < t->n_spans; i++) {
        if (map[i] == XSP_NO_PARENT)
            continue;
        xsp_span s = t->spans[i];
        if (s.parent != XSP_NO_PARENT)
            s.parent = map[s.parent];
        if (s.start_ns < t0) {
            s.start_ns = t0;
            s.flags |= XSP_FLAG_CLIPPED;
        }
        uint32_t off = out;
        for (uint32_t j = 0; j < s.attr_n; j++) {
            xsp_attr a = t->attrs[s.attr_off + j];
            if (a.type == XSP_ATTR_INT && is_id_key(t, a.key, id_keys, n_keys)) {
                if (a.v.i < 0 || a.v.i >= (int64_t)t->n_spans
                    || map[a.v.i] == XSP_NO_PARENT) {
                    if (unlinked)
                        (*unlinked)++;
                    continue;
                }
                a.v.i = map[a.v.i];
            }
            na[out++] = a;
        }
        s.attr_off = off;
        s.attr_n = (uint16_t)(out - off);
        t->spans[map[i]] = s;
    }
    free(map);
    free(t->attrs);
    t->attrs = na;
    t->n_attrs = out;
    t->cap_attrs = (uint32_t)kept_attrs + 1;
    t->n_spans = n;
    return 0;
}

uint32_t xsp_trace_add_thread(xsp_trace *t, uint64_t tid, const char *name, uint32_t kind)
{
    uint32_t sid = xsp_strtab_intern(&t->strings, name ? name : "", name ? strlen(name) : 0);
    if (sid == UINT32_MAX
        || grow((void **)&t->threads, &t->cap_threads, t->n_threads, sizeof *t->threads) != 0)
        return UINT32_MAX;
    t->threads[t->n_threads] = (xsp_thread){.tid = tid, .name = sid, .kind = kind};
    return t->n_threads++;
}

/* Finds or appends the entry with this key in a key/value list. NULL on allocation failure. */
static xsp_attr *kv_slot(xsp_trace *t, xsp_attr **arr, uint32_t *n, uint32_t *cap,
                         const char *key)
{
    uint32_t kid = xsp_strtab_intern(&t->strings, key, strlen(key));
    if (kid == UINT32_MAX)
        return NULL;
    for (uint32_t i = 0; i < *n; i++)
        if ((*arr)[i].key == kid)
            return &(*arr)[i];
    if (grow((void **)arr, cap, *n, sizeof **arr) != 0)
        return NULL;
    xsp_attr *a = &(*arr)[(*n)++];
    memset(a, 0, sizeof *a);
    a->key = kid;
    return a;
}

int xsp_trace_set_meta_str(xsp_trace *t, const char *key, const char *value)
{
    uint32_t sid = xsp_strtab_intern(&t->strings, value, strlen(value));
    if (sid == UINT32_MAX)
        return -1;
    xsp_attr *a = kv_slot(t, &t->meta, &t->n_meta, &t->cap_meta, key);
    if (!a)
        return -1;
    a->type = XSP_ATTR_STR;
    a->v.s = sid;
    return 0;
}

int xsp_trace_set_meta_int(xsp_trace *t, const char *key, int64_t value)
{
    xsp_attr *a = kv_slot(t, &t->meta, &t->n_meta, &t->cap_meta, key);
    if (!a)
        return -1;
    a->type = XSP_ATTR_INT;
    a->v.i = value;
    return 0;
}

int xsp_trace_set_meta_float(xsp_trace *t, const char *key, double value)
{
    xsp_attr *a = kv_slot(t, &t->meta, &t->n_meta, &t->cap_meta, key);
    if (!a)
        return -1;
    a->type = XSP_ATTR_FLOAT;
    a->v.f = value;
    return 0;
}

int xsp_trace_add_counter(xsp_trace *t, const char *key, int64_t delta)
{
    xsp_attr *a = kv_slot(t, &t->counters, &t->n_counters, &t->cap_counters, key);
    if (!a)
        return -1;
    a->type = XSP_ATTR_INT;
    a->v.i += delta;
    return 0;
}

int64_t xsp_trace_counter(const xsp_trace *t, const char *key)
{
    size_t len = strlen(key);
    for (uint32_t i = 0; i < t->n_counters; i++) {
        size_t klen;
        const char *k = xsp_strtab_get(&t->strings, t->counters[i].key, &klen);
        if (k && klen == len && memcmp(k, key, len) == 0)
            return t->counters[i].v.i;
    }
    return 0;
}

/* Checks one attribute list. Returns 0, or -1 with err filled. */
static int check_attrs(const xsp_trace *t, const xsp_attr *a, uint32_t n, const char *what,
                       char *err, size_t errlen)
{
    for (uint32_t i = 0; i < n; i++) {
        if (a[i].key >= t->strings.n) {
            snprintf(err, errlen, "%s %" PRIu32 ": key string id %" PRIu32 " out of range (%" PRIu32
                     " strings)", what, i, a[i].key, t->strings.n);
            return -1;
        }
        if (a[i].type > XSP_ATTR_STR) {
            snprintf(err, errlen, "%s %" PRIu32 ": unknown value type %" PRIu32, what, i, a[i].type);
            return -1;
        }
        if (a[i].type == XSP_ATTR_STR && a[i].v.s >= t->strings.n) {
            snprintf(err, errlen, "%s %" PRIu32 ": string value id %" PRIu32 " out of range (%"
                     PRIu32 " strings)", what, i, a[i].v.s, t->strings.n);
            return -1;
        }
    }
    return 0;
}

int xsp_trace_check(const xsp_trace *t, char *err, size_t errlen)
{
    for (uint32_t i = 0; i < t->n_spans; i++) {
        const xsp_span *s = &t->spans[i];
        const char *why = NULL;
        if (s->parent != XSP_NO_PARENT && s->parent >= i)
            why = "parent is not before the span";
        else if (s->end_ns < s->start_ns)
            why = "ends before it starts";
        else if (i && s->start_ns < t->spans[i - 1].start_ns)
            why = "starts before the previous span (spans must be sorted by start)";
        else if (s->name >= t->strings.n)
            why = "name id out of range";
        else if (s->thread >= t->n_threads)
            why = "thread index out of range";
        else if (s->level >= XSP_NLEVELS)
            why = "unknown level";
        else if (s->kind >= XSP_NKINDS)
            why = "unknown kind";
        else if ((uint64_t)s->attr_off + s->attr_n > t->n_attrs)
            why = "attributes out of range";
        if (why) {
            snprintf(err, errlen, "span %" PRIu32 ": %s", i, why);
            return -1;
        }
    }
    for (uint32_t i = 0; i < t->n_threads; i++) {
        if (t->threads[i].name >= t->strings.n) {
            snprintf(err, errlen, "thread %" PRIu32 ": name id out of range", i);
            return -1;
        }
    }
    if (check_attrs(t, t->attrs, t->n_attrs, "attribute", err, errlen)
        || check_attrs(t, t->meta, t->n_meta, "meta entry", err, errlen)
        || check_attrs(t, t->counters, t->n_counters, "counter", err, errlen))
        return -1;
    for (uint32_t i = 0; i < t->n_counters; i++) {
        if (t->counters[i].type != XSP_ATTR_INT) {
            snprintf(err, errlen, "counter %" PRIu32 ": not an integer", i);
            return -1;
        }
    }
    return 0;
}

/* Compares two string ids of two traces by content. */
static int same_str(const xsp_trace *a, uint32_t ia, const xsp_trace *b, uint32_t ib)
{
    size_t la, lb;
    const char *sa = xsp_strtab_get(&a->strings, ia, &la);
    const char *sb = xsp_strtab_get(&b->strings, ib, &lb);
    if (!sa || !sb)
        return sa == sb;
    return la == lb && memcmp(sa, sb, la) == 0;
}

static int same_attrs(const xsp_trace *a, const xsp_attr *x, const xsp_trace *b,
                      const xsp_attr *y, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        if (x[i].type != y[i].type || !same_str(a, x[i].key, b, y[i].key))
            return 0;
        switch (x[i].type) {
        case XSP_ATTR_INT:
            if (x[i].v.i != y[i].v.i)
                return 0;
            break;
        case XSP_ATTR_FLOAT:
            if (memcmp(&x[i].v.f, &y[i].v.f, sizeof(double)) != 0)
                return 0;
            break;
        default:
            if (!same_str(a, x[i].v.s, b, y[i].v.s))
                return 0;
        }
    }
    return 1;
}

int xsp_trace_equal(const xsp_trace *a, const xsp_trace *b)
{
    if (a->n_spans != b->n_spans || a->n_threads != b->n_threads || a->n_meta != b->n_meta
        || a->n_counters != b->n_counters)
        return 0;
    for (uint32_t i = 0; i < a->n_spans; i++) {
        const xsp_span *x = &a->spans[i], *y = &b->spans[i];
        if (x->start_ns != y->start_ns || x->end_ns != y->end_ns || x->parent != y->parent
            || x->thread != y->thread || x->level != y->level || x->kind != y->kind
            || x->flags != y->flags || x->attr_n != y->attr_n || !same_str(a, x->name, b, y->name)
            || !same_attrs(a, a->attrs + x->attr_off, b, b->attrs + y->attr_off, x->attr_n))
            return 0;
    }
    for (uint32_t i = 0; i < a->n_threads; i++) {
        if (a->threads[i].tid != b->threads[i].tid || a->threads[i].kind != b->threads[i].kind
            || !same_str(a, a->threads[i].name, b, b->threads[i].name))
            return 0;
    }
    return same_attrs(a, a->meta, b, b->meta, a->n_meta)
           && same_attrs(a, a->counters, b, b->counters, a->n_counters);
}

const char *xsp_level_name(unsigned level)
{
    static const char *const names[XSP_NLEVELS] = {"M", "L", "G"};
    return level < XSP_NLEVELS ? names[level] : "?";
}

const char *xsp_kind_name(unsigned kind)
{
    static const char *const names[XSP_NKINDS] = {
        "region", "model",  "step",   "module", "op",   "backward", "scope",
        "runtime", "driver", "kernel", "memcpy", "memset", "sync", "overhead", "python"};
    return kind < XSP_NKINDS ? names[kind] : "?";
}
