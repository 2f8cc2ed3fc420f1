/*
 * tracefinish.c: what a session's stop writes into its finished trace from Python objects,
 * before the trace is handed out (see tracefinish.h).  None of these runs Python code: the
 * tables are the dicts and lists the session was given at setup (sessionopts.h), read with the
 * concrete API; no attribute of a Python object is looked up.  A failure loses a detail (the
 * exception is cleared), never the trace.
 */
#include "tracefinish.h"

#include <stdlib.h>
#include <string.h>

#include "tracedata.h"

/* The index of t's CPU track whose OS thread id is the int key, or UINT32_MAX (not an int, out
 * of range, no such track; no exception left set). */
static uint32_t cpu_track(const xsp_trace *t, PyObject *key)
{
    if (!PyLong_Check(key))
        return UINT32_MAX;
    unsigned long long tid = PyLong_AsUnsignedLongLong(key);
    if (tid == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return UINT32_MAX;
    }
    for (uint32_t i = 0; i < t->n_threads; i++)
        if (t->threads[i].tid == tid && t->threads[i].kind == 0)
            return i;
    return UINT32_MAX;
}

/* Names the CPU tracks of t from dict {native tid: name}. */
void xsp_py_name_threads(xsp_trace *t, PyObject *names)
{
    if (!names || !PyDict_Check(names))
        return;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(names, &pos, &k, &v)) {
        uint32_t track = PyUnicode_Check(v) ? cpu_track(t, k) : UINT32_MAX;
        if (track == UINT32_MAX)
            continue;
        uint32_t sid = xsp_py_intern(t, v);
        if (sid == UINT32_MAX)
            PyErr_Clear();
        else
            t->threads[track].name = sid;
    }
}

typedef struct {
    uint32_t id;
    xsp_attr v;
} id_value;

static int by_id(const void *a, const void *b)
{
    uint32_t x = ((const id_value *)a)->id, y = ((const id_value *)b)->id;
    return (x > y) - (x < y);
}

/* Adds attribute key to the spans in pairs[0..n) (sorted here). 0, or -1 (out of memory). */
static int add_pairs(xsp_trace *t, const char *key, id_value *pairs, uint32_t n)
{
    if (!n)
        return 0;
    qsort(pairs, n, sizeof *pairs, by_id);
    uint32_t *ids = malloc(n * sizeof *ids);
    xsp_attr *vals = malloc(n * sizeof *vals);
    char err[256];
    int rc = -1;
    if (ids && vals) {
        for (uint32_t k = 0; k < n; k++) {
            ids[k] = pairs[k].id;
            vals[k] = pairs[k].v;
        }
        rc = xsp_trace_add_span_attrs(t, key, n, ids, vals, err, sizeof err);
    }
    free(ids);
    free(vals);
    return rc;
}

/* The record_shapes / profile_memory side table: per thread, the k-th record the module
 * wrapper's enter() kept belongs to the k-th model or module span of that thread in start
 * order.  A thread whose counts differ (spans lost to the memory cap) gets none: their number
 * goes into meta "attrs_unmatched".  Returns 0, or -1 on allocation failure (no exception set). */
int xsp_py_attach_side(xsp_trace *t, PyObject *side)
{
    uint32_t cap = t->n_spans ? t->n_spans : 1, n_shapes = 0, n_mem = 0;
    id_value *shapes = malloc(cap * sizeof *shapes), *mem = malloc(cap * sizeof *mem);
    uint32_t *ids = malloc(cap * sizeof *ids);
    int64_t unmatched = 0;
    int rc = -1;
    if (!shapes || !mem || !ids)
        goto done;
    Py_ssize_t pos = 0;
    PyObject *k, *recs;
    while (PyDict_Next(side, &pos, &k, &recs)) {
        if (!PyList_Check(recs))
            continue;
        uint32_t track = cpu_track(t, k), n = 0;
        for (uint32_t i = 0; track != UINT32_MAX && i < t->n_spans; i++) {
            const xsp_span *sp = &t->spans[i];
            if (sp->thread == track
                && (sp->kind == XSP_KIND_MODEL || sp->kind == XSP_KIND_MODULE))
                ids[n++] = i;
        }
        Py_ssize_t m = PyList_GET_SIZE(recs);
        if ((Py_ssize_t)n != m) {
            unmatched += m;
            continue;
        }
        for (uint32_t j = 0; j < n; j++) {
            PyObject *rec = PyList_GET_ITEM(recs, j);
            if (!PyList_Check(rec) || PyList_GET_SIZE(rec) != 3)
                continue;
            PyObject *sh = PyList_GET_ITEM(rec, 0), *delta = PyList_GET_ITEM(rec, 2);
            if (PyUnicode_Check(sh)) {
                uint32_t sid = xsp_py_intern(t, sh);
                if (sid == UINT32_MAX) {
                    PyErr_Clear();
                    goto done;
                }
                shapes[n_shapes++] = (id_value){ids[j], {.type = XSP_ATTR_STR, .v.s = sid}};
            }
            if (PyLong_Check(delta)) {
                long long d = PyLong_AsLongLong(delta);
                if (d == -1 && PyErr_Occurred())
                    PyErr_Clear();
                else
                    mem[n_mem++] = (id_value){ids[j], {.type = XSP_ATTR_INT, .v.i = d}};
            }
        }
    }
    rc = add_pairs(t, "shapes", shapes, n_shapes) || add_pairs(t, "mem_bytes", mem, n_mem)
         || (unmatched && xsp_trace_set_meta_int(t, "attrs_unmatched", unmatched) != 0) ? -1 : 0;
done:
    free(shapes);
    free(mem);
    free(ids);
    return rc;
}

/* Meta from a dict {str: int|float|str}; entries of another type are skipped. */
void xsp_py_meta_from(xsp_trace *t, PyObject *meta)
{
    if (!meta || !PyDict_Check(meta))
        return;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(meta, &pos, &k, &v)) {
        const char *key = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
        if (!key || xsp_py_set_meta(t, key, v) != 0)
            PyErr_Clear();
    }
}

/* -- span attribute tables (xsp/producers/dynamo.py): xsp_py_attach_tables ------------------------ */

typedef struct {
    PyObject *key;      /* attribute key, an exact str (borrowed from the spec) */
    uint32_t id;        /* span id */
    xsp_attr v;         /* the value (a string already interned) */
} keyed_value;

typedef struct {
    keyed_value *a;     /* owned */
    size_t n, cap;
} keyed_list;

/* Appends one (key, span, value) triple; 0, or -1 (out of memory). */
static int keyed_push(keyed_list *l, PyObject *key, uint32_t id, xsp_attr v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        keyed_value *a = realloc(l->a, cap * sizeof *a);
        if (!a)
            return -1;
        l->a = a;
        l->cap = cap;
    }
    l->a[l->n++] = (keyed_value){key, id, v};
    return 0;
}

/* Exact str keys only (no Python runs in the comparison), then span id. */
static int by_key_id(const void *x, const void *y)
{
    const keyed_value *a = x, *b = y;
    if (a->key != b->key) {
        int c = PyUnicode_Compare(a->key, b->key);
        if (c)
            return c;
    }
    return (a->id > b->id) - (a->id < b->id);
}

/* An attribute value from an exact str, int or float: 1 with *out filled, 0 for None or another
 * type (nothing to attach), -1 (out of memory interning; no exception left set). */
static int value_of(xsp_trace *t, PyObject *v, xsp_attr *out)
{
    memset(out, 0, sizeof *out);
    if (PyUnicode_CheckExact(v)) {
        uint32_t sid = xsp_py_intern(t, v);
        if (sid == UINT32_MAX) {
            PyErr_Clear();
            return -1;
        }
        out->type = XSP_ATTR_STR;
        out->v.s = sid;
        return 1;
    }
    if (PyLong_CheckExact(v)) {
        long long i = PyLong_AsLongLong(v);
        if (i == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        out->type = XSP_ATTR_INT;
        out->v.i = i;
        return 1;
    }
    if (PyFloat_CheckExact(v)) {
        out->type = XSP_ATTR_FLOAT;
        out->v.f = PyFloat_AS_DOUBLE(v);
        return 1;
    }
    return 0;
}

/* The first span id whose start is >= t0 (spans are in start order). */
static uint32_t first_at(const xsp_trace *t, uint64_t t0)
{
    uint32_t lo = 0, hi = t->n_spans;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (t->spans[mid].start_ns < t0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* 1 when span i's name is the n bytes at s. */
static int name_is(const xsp_trace *t, uint32_t i, const char *s, size_t n)
{
    size_t len;
    const char *p = xsp_strtab_get(&t->strings, t->spans[i].name, &len);
    return p && len == n && memcmp(p, s, n) == 0;
}

/* The "events" entries: (t_lo, t_hi, name, {key: value}) each. */
static int events_into(xsp_trace *t, PyObject *events, keyed_list *out)
{
    if (!PyList_CheckExact(events))
        return 0;
    for (Py_ssize_t e = 0; e < PyList_GET_SIZE(events); e++) {
        PyObject *ev = PyList_GET_ITEM(events, e);
        if (!PyTuple_CheckExact(ev) || PyTuple_GET_SIZE(ev) != 4)
            continue;
        PyObject *lo = PyTuple_GET_ITEM(ev, 0), *hi = PyTuple_GET_ITEM(ev, 1),
                 *name = PyTuple_GET_ITEM(ev, 2), *attrs = PyTuple_GET_ITEM(ev, 3);
        if (!PyLong_CheckExact(lo) || !PyLong_CheckExact(hi) || !PyUnicode_CheckExact(name)
            || !PyDict_CheckExact(attrs))
            continue;
        unsigned long long t0 = PyLong_AsUnsignedLongLong(lo), t1 = PyLong_AsUnsignedLongLong(hi);
        Py_ssize_t nlen;
        const char *nm = PyUnicode_AsUTF8AndSize(name, &nlen);
        if (PyErr_Occurred() || !nm) {
            PyErr_Clear();
            continue;
        }
        for (uint32_t i = first_at(t, t0); i < t->n_spans && t->spans[i].start_ns <= t1; i++) {
            if (!name_is(t, i, nm, (size_t)nlen))
                continue;
            Py_ssize_t pos = 0;
            PyObject *k, *v;
            while (PyDict_Next(attrs, &pos, &k, &v)) {
                xsp_attr a;
                int rc = PyUnicode_CheckExact(k) ? value_of(t, v, &a) : 0;
                if (rc < 0 || (rc > 0 && keyed_push(out, k, i, a) != 0))
                    return -1;
            }
        }
    }
    return 0;
}

#define REGION_SELF 0x80000000u   /* region[i]: span i opens the region (index in low bits) */
#define NO_REGION UINT32_MAX
#define TOP 1u                    /* flags[i]: a top span of its region */
#define IN_TABLE 2u               /* flags[i]: its name is in its region's table */

typedef struct {
    uint32_t region, name, id;    /* region index, name string id, span id */
} candidate;

static int by_region_name_id(const void *x, const void *y)
{
    const candidate *a = x, *b = y;
    if (a->region != b->region)
        return (a->region > b->region) - (a->region < b->region);
    if (a->name != b->name)
        return (a->name > b->name) - (a->name < b->name);
    return (a->id > b->id) - (a->id < b->id);
}

/* One "regions" entry (prefix, key, {scope: {name: [value, ...]}}, meta_prefix). */
static int region_into(xsp_trace *t, PyObject *entry, keyed_list *out)
{
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 4)
        return 0;
    PyObject *prefix = PyTuple_GET_ITEM(entry, 0), *key = PyTuple_GET_ITEM(entry, 1),
             *tables = PyTuple_GET_ITEM(entry, 2), *mprefix = PyTuple_GET_ITEM(entry, 3);
    if (!PyUnicode_CheckExact(prefix) || !PyUnicode_CheckExact(key)
        || !PyDict_CheckExact(tables) || !PyUnicode_CheckExact(mprefix))
        return 0;
    Py_ssize_t plen;
    const char *pre = PyUnicode_AsUTF8AndSize(prefix, &plen);
    if (!pre) {
        PyErr_Clear();
        return 0;
    }
    uint32_t n = t->n_spans, n_str = t->strings.n;
    uint32_t *region = malloc((n ? n : 1) * sizeof *region);
    uint8_t *flags = calloc(n ? n : 1, 1);
    PyObject **names = calloc(n_str ? n_str : 1, sizeof *names);   /* name id -> str, lazily */
    PyObject **tabs = NULL;        /* region index -> its scope's table (borrowed) or NULL */
    candidate *cand = NULL;
    size_t n_reg = 0, cap_reg = 0, n_cand = 0, cap_cand = 0;
    int64_t attached = 0, unmatched = 0, unknown = 0, tabled = 0;
    int rc = -1;
    if (!region || !flags || !names)
        goto done;
    for (uint32_t i = 0; i < n; i++) {
        const xsp_span *s = &t->spans[i];
        size_t len;
        const char *nm = xsp_strtab_get(&t->strings, s->name, &len);
        region[i] = NO_REGION;
        if (nm && len >= (size_t)plen && memcmp(nm, pre, (size_t)plen) == 0) {
            if (n_reg == cap_reg) {
                size_t cap = cap_reg ? 2 * cap_reg : 16;
                PyObject **a = realloc(tabs, cap * sizeof *a);
                if (!a)
                    goto done;
                tabs = a;
                cap_reg = cap;
            }
            PyObject *scope = PyUnicode_DecodeUTF8(nm + plen, (Py_ssize_t)(len - (size_t)plen),
                                                   "surrogateescape");
            PyObject *tab = scope ? PyDict_GetItemWithError(tables, scope) : NULL;
            Py_XDECREF(scope);
            PyErr_Clear();
            tabs[n_reg] = tab && PyDict_CheckExact(tab) ? tab : NULL;
            tabled += tabs[n_reg] != NULL;
            region[i] = (uint32_t)n_reg++ | REGION_SELF;
            continue;
        }
        uint32_t p = s->parent;
        if (p == XSP_NO_PARENT || p >= i || region[p] == NO_REGION)
            continue;
        uint32_t r = region[p] & ~REGION_SELF;
        region[i] = r;
        PyObject *tab = tabs[r];
        if (!tab)
            continue;
        int top = (region[p] & REGION_SELF) || ((flags[p] & TOP) && !(flags[p] & IN_TABLE));
        if (!names[s->name]) {
            names[s->name] = nm ? PyUnicode_DecodeUTF8(nm, (Py_ssize_t)len, "surrogateescape")
                                : NULL;
            if (!names[s->name]) {
                PyErr_Clear();
                continue;
            }
        }
        PyObject *vals = PyDict_GetItemWithError(tab, names[s->name]);
        PyErr_Clear();
        if (vals)
            flags[i] |= IN_TABLE;
        if (top)
            flags[i] |= TOP;
        if (top && vals) {
            if (n_cand == cap_cand) {
                size_t cap = cap_cand ? 2 * cap_cand : 64;
                candidate *a = realloc(cand, cap * sizeof *a);
                if (!a)
                    goto done;
                cand = a;
                cap_cand = cap;
            }
            cand[n_cand++] = (candidate){r, s->name, i};
        }
    }
    if (n_cand)
        qsort(cand, n_cand, sizeof *cand, by_region_name_id);
    for (size_t c = 0, ord = 0; c < n_cand; c++) {
        ord = c && cand[c].region == cand[c - 1].region && cand[c].name == cand[c - 1].name
                  ? ord + 1 : 0;
        PyObject *vals = PyDict_GetItemWithError(tabs[cand[c].region], names[cand[c].name]);
        PyErr_Clear();
        Py_ssize_t nv = vals && (PyList_CheckExact(vals) || PyTuple_CheckExact(vals))
                            ? PySequence_Fast_GET_SIZE(vals) : 0;
        if ((Py_ssize_t)ord >= nv) {
            unmatched++;            /* more spans of this name than the graph has calls */
            continue;
        }
        xsp_attr a;
        int got = value_of(t, PySequence_Fast_GET_ITEM(vals, (Py_ssize_t)ord), &a);
        if (got < 0 || (got > 0 && keyed_push(out, key, cand[c].id, a) != 0))
            goto done;
        if (got > 0)
            attached++;
        else
            unknown++;              /* the graph has the call, torch kept no source for it */
    }
    rc = 0;
    if (tabled) {
        const char *mp = PyUnicode_AsUTF8(mprefix);
        char mk[256];
        static const char *const sfx[] = {".attached", ".unmatched", ".unknown"};
        int64_t vals[] = {attached, unmatched, unknown};
        for (int k = 0; mp && k < 3; k++) {
            snprintf(mk, sizeof mk, "%s%s", mp, sfx[k]);
            if (xsp_trace_set_meta_int(t, mk, vals[k]) != 0)
                rc = -1;
        }
        PyErr_Clear();
    }
done:
    if (names)
        for (uint32_t k = 0; k < n_str; k++)
            Py_XDECREF(names[k]);
    free(names);
    free(region);
    free(flags);
    free(tabs);
    free(cand);
    return rc;
}

int xsp_py_attach_tables(xsp_trace *t, PyObject *spec)
{
    if (!spec || !PyDict_CheckExact(spec))
        return 0;
    keyed_list l = {NULL, 0, 0};
    int rc = -1;
    PyObject *events = PyDict_GetItemString(spec, "events");
    PyObject *regions = PyDict_GetItemString(spec, "regions");
    if (events && events_into(t, events, &l) != 0)
        goto done;
    if (regions && PyList_CheckExact(regions))
        for (Py_ssize_t r = 0; r < PyList_GET_SIZE(regions); r++)
            if (region_into(t, PyList_GET_ITEM(regions, r), &l) != 0)
                goto done;
    rc = 0;
    if (l.n)
        qsort(l.a, l.n, sizeof *l.a, by_key_id);
    PyErr_Clear();
    for (size_t s = 0; s < l.n && rc == 0;) {
        size_t e = s + 1;
        while (e < l.n && (l.a[e].key == l.a[s].key
                           || PyUnicode_Compare(l.a[e].key, l.a[s].key) == 0))
            e++;
        id_value *pairs = malloc((e - s) * sizeof *pairs);
        uint32_t m = 0;
        if (!pairs) {
            rc = -1;
            break;
        }
        for (size_t k = s; k < e; k++)       /* one value per span: the first given */
            if (!m || pairs[m - 1].id != l.a[k].id)
                pairs[m++] = (id_value){l.a[k].id, l.a[k].v};
        const char *key = PyUnicode_AsUTF8(l.a[s].key);
        if (!key || add_pairs(t, key, pairs, m) != 0)
            rc = -1;
        free(pairs);
        s = e;
    }
done:
    PyErr_Clear();
    free(l.a);
    return rc;
}
