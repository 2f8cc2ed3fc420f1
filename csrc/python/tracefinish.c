/*
 * tracefinish.c: what a session's stop writes into its finished trace from Python objects,
 * before the trace is handed out (see tracefinish.h).  None of these runs Python code: dicts
 * and lists are read with the concrete API, and a Thread's plain attributes with a generic
 * attribute read.  A failure loses a detail (the exception is cleared), never the trace.
 */
#include "tracefinish.h"

#include <stdlib.h>

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

/* The record_shapes / profile_memory side table: per thread, the k-th record the Python wrapper
 * kept belongs to the k-th model or module span of that thread in start order.  A thread whose
 * counts differ (spans lost to the memory cap) gets none: their number goes into meta
 * "attrs_unmatched".  Returns 0, or -1 on allocation failure (no exception set). */
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

/* Names the CPU tracks of t after the Python threads alive now, from threading._active
 * ({ident: Thread}) read directly: each Thread's plain attributes _native_id and _name, so no
 * Python code runs (threading.enumerate would, and an exception raised inside it by a trace
 * function at its `with` line's exit leaves threading's lock held).  A thread without them is
 * skipped. */
void xsp_py_name_live_threads(xsp_trace *t, PyObject *threads)
{
    if (!PyDict_Check(threads))
        return;
    PyObject *names = PyDict_New();
    Py_ssize_t pos = 0;
    PyObject *k, *th;
    while (names && PyDict_Next(threads, &pos, &k, &th)) {
        Py_INCREF(th);
        /* the instance dict itself, not attribute lookups (a Thread subclass's property or
         * __getattr__ would run Python) */
        PyObject *d = PyObject_GenericGetDict(th, NULL);
        PyObject *tid = d && PyDict_Check(d) ? PyDict_GetItemString(d, "_native_id") : NULL;
        PyObject *name = d && PyDict_Check(d) ? PyDict_GetItemString(d, "_name") : NULL;
        if (tid && name && PyLong_Check(tid) && PyUnicode_Check(name)
            && PyDict_SetItem(names, tid, name) < 0)
            PyErr_Clear();
        Py_XDECREF(d);
        Py_DECREF(th);
        PyErr_Clear();
    }
    if (names)
        xsp_py_name_threads(t, names);
    Py_XDECREF(names);
    PyErr_Clear();
}
