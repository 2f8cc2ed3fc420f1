/*
 * tracebuild.c: _core.build(), a trace made from Python data, for tests and importers
 * (xsp.Trace.from_spans).  Every entry is checked as it is read; messages name the entry
 * ("span 3: ...", "thread 1: ...") in the words xsp_trace_check uses, which has the last word
 * on ordering.  The result is made whole here and never changes afterwards (tracedata.c).
 */
#include "tracebuild.h"

#include <string.h>

#include "tracedata.h"

/* Reads int field of entry i of what (span, thread) in 0..hi into *out. 0, or -1 with TypeError
 * or ValueError naming the entry and field. */
static int int_field(PyObject *o, const char *what, Py_ssize_t i, const char *field, uint64_t hi,
                     uint64_t *out)
{
    int rc = xsp_py_u64(o, hi, out);
    if (rc == XSP_PY_TYPE)
        PyErr_Format(PyExc_TypeError, "%s %zd: %s must be an int, not %s", what, i, field,
                     Py_TYPE(o)->tp_name);
    else if (rc == XSP_PY_RANGE)
        PyErr_Format(PyExc_ValueError, "%s %zd: %s %R out of range (0..%llu)", what, i, field, o,
                     (unsigned long long)hi);
    return rc ? -1 : 0;
}

/* The n items of entry i of what: a tuple or list of exactly n items (borrowed; nothing run
 * while they are read can change the entry), or NULL with TypeError or ValueError. */
static PyObject **entry_items(PyObject *o, Py_ssize_t n, const char *what, Py_ssize_t i,
                              const char *shape)
{
    if (!PyTuple_Check(o) && !PyList_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s %zd must be a tuple %s, not %s", what, i, shape,
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    if (PySequence_Fast_GET_SIZE(o) != n) {
        PyErr_Format(PyExc_ValueError, "%s %zd must have %zd items %s, not %zd", what, i, n,
                     shape, PySequence_Fast_GET_SIZE(o));
        return NULL;
    }
    return PySequence_Fast_ITEMS(o);
}

/* A tuple of the entries of sequence o, or NULL with TypeError. */
static PyObject *entries(PyObject *o, const char *what)
{
    if (!PySequence_Check(o) || PyUnicode_Check(o) || PyBytes_Check(o))
        return PyErr_Format(PyExc_TypeError, "build: %s must be a sequence, not %s", what,
                            Py_TYPE(o)->tp_name);
    return PySequence_Tuple(o);
}

/* The UTF-8 bytes of dict key k of what (meta, counters) as a C string, or NULL with TypeError
 * (not a str) or ValueError (a NUL inside). */
static PyObject *c_key(PyObject *k, const char *what)
{
    if (!PyUnicode_Check(k))
        return PyErr_Format(PyExc_TypeError, "build: %s keys must be str, not %s", what,
                            Py_TYPE(k)->tp_name);
    PyObject *b = xsp_py_utf8(k);
    if (b && strlen(PyBytes_AS_STRING(b)) != (size_t)PyBytes_GET_SIZE(b)) {
        Py_DECREF(b);
        return PyErr_Format(PyExc_ValueError, "build: %s key %R contains a NUL character", what,
                            k);
    }
    return b;
}

static int build_threads(xsp_trace *t, PyObject *threads)
{
    PyObject *seq = entries(threads, "threads");
    if (!seq)
        return -1;
    int rc = -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(seq); i++) {
        PyObject **f = entry_items(PyTuple_GET_ITEM(seq, i), 3, "thread", i, "(tid, name, kind)");
        uint64_t tid, kind;
        if (!f || int_field(f[0], "thread", i, "tid", UINT64_MAX, &tid)
            || int_field(f[2], "thread", i, "kind", 2, &kind))
            goto done;
        if (!PyUnicode_Check(f[1])) {
            PyErr_Format(PyExc_TypeError, "thread %zd: name must be a str, not %s", i,
                         Py_TYPE(f[1])->tp_name);
            goto done;
        }
        uint32_t name = xsp_py_intern(t, f[1]);
        if (name == UINT32_MAX)
            goto done;
        uint32_t idx = xsp_trace_add_thread(t, tid, NULL, (uint32_t)kind);
        if (idx == UINT32_MAX) {
            PyErr_NoMemory();
            goto done;
        }
        t->threads[idx].name = name;
    }
    rc = 0;
done:
    Py_DECREF(seq);
    return rc;
}

/* Appends span i's attributes (a dict str -> int|float|str) to t->attrs; *n = how many. */
static int build_attrs(xsp_trace *t, Py_ssize_t i, PyObject *attrs, uint16_t *n)
{
    if (!PyDict_Check(attrs)) {
        PyErr_Format(PyExc_TypeError, "span %zd: attrs must be a dict, not %s", i,
                     Py_TYPE(attrs)->tp_name);
        return -1;
    }
    if (PyDict_GET_SIZE(attrs) > UINT16_MAX) {
        PyErr_Format(PyExc_ValueError, "span %zd: %zd attributes, at most %u allowed", i,
                     PyDict_GET_SIZE(attrs), (unsigned)UINT16_MAX);
        return -1;
    }
    *n = (uint16_t)PyDict_GET_SIZE(attrs);
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(attrs, &pos, &k, &v)) {
        if (!PyUnicode_Check(k)) {
            PyErr_Format(PyExc_TypeError, "span %zd: attribute names must be str, not %s", i,
                         Py_TYPE(k)->tp_name);
            return -1;
        }
        xsp_attr a = {.key = xsp_py_intern(t, k)};
        if (a.key == UINT32_MAX)
            return -1;
        int rc = xsp_py_attr_value(t, v, &a);
        if (rc == XSP_PY_TYPE)
            PyErr_Format(PyExc_TypeError, "span %zd: attribute %R must be an int, float or str, "
                         "not %s", i, k, Py_TYPE(v)->tp_name);
        else if (rc == XSP_PY_RANGE)
            PyErr_Format(PyExc_OverflowError, "span %zd: attribute %R = %R does not fit in a "
                         "64-bit signed int", i, k, v);
        if (rc != 0)
            return -1;
        if (xsp_trace_add_attr(t, &a) == UINT32_MAX) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

/* Appends span i from its 9 fields f (see core_build). */
static int build_span(xsp_trace *t, Py_ssize_t i, PyObject **f)
{
    uint64_t start, end, parent = XSP_NO_PARENT, level, kind, thread, flags;
    if (int_field(f[0], "span", i, "start_ns", UINT64_MAX, &start)
        || int_field(f[1], "span", i, "end_ns", UINT64_MAX, &end))
        return -1;
    int overflow = 0;   /* parent: -1 for a root, else a span id */
    long long p = PyLong_Check(f[2]) ? PyLong_AsLongLongAndOverflow(f[2], &overflow) : 0;
    if (p == -1 && PyErr_Occurred())
        return -1;
    if (p != -1 || overflow) {
        int rc = xsp_py_u64(f[2], XSP_NO_PARENT - 1, &parent);
        if (rc == XSP_PY_RANGE)
            PyErr_Format(PyExc_ValueError, "span %zd: parent %R is neither -1 (a root) nor a span "
                         "id", i, f[2]);
        else if (rc == XSP_PY_TYPE)
            PyErr_Format(PyExc_TypeError, "span %zd: parent must be an int (-1 for a root), not "
                         "%s", i, Py_TYPE(f[2])->tp_name);
        if (rc != 0)
            return -1;
    }
    if (int_field(f[3], "span", i, "level", XSP_NLEVELS - 1, &level)
        || int_field(f[4], "span", i, "kind", XSP_NKINDS - 1, &kind)
        || int_field(f[6], "span", i, "thread", UINT32_MAX, &thread)
        || int_field(f[7], "span", i, "flags", UINT32_MAX, &flags))
        return -1;
    if (thread >= t->n_threads) {
        PyErr_Format(PyExc_ValueError, "span %zd: thread %R is not an index into threads (of "
                     "length %u)", i, f[6], (unsigned)t->n_threads);
        return -1;
    }
    if (!PyUnicode_Check(f[5])) {
        PyErr_Format(PyExc_TypeError, "span %zd: name must be a str, not %s", i,
                     Py_TYPE(f[5])->tp_name);
        return -1;
    }
    xsp_span s = {.start_ns = start, .end_ns = end, .parent = (uint32_t)parent,
                  .name = xsp_py_intern(t, f[5]), .thread = (uint32_t)thread,
                  .attr_off = t->n_attrs, .level = (uint8_t)level, .kind = (uint8_t)kind,
                  .flags = (uint32_t)flags};
    if (s.name == UINT32_MAX || build_attrs(t, i, f[8], &s.attr_n) != 0)
        return -1;
    if (xsp_trace_add_span(t, &s) == UINT32_MAX) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static int build_spans(xsp_trace *t, PyObject *spans)
{
    PyObject *seq = entries(spans, "spans");
    if (!seq)
        return -1;
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PyTuple_GET_SIZE(seq); i++) {
        PyObject **f = entry_items(PyTuple_GET_ITEM(seq, i), 9, "span", i,
                                   "(start_ns, end_ns, parent, level, kind, name, thread, flags, "
                                   "attrs)");
        rc = f ? build_span(t, i, f) : -1;
    }
    Py_DECREF(seq);
    return rc;
}

static int build_meta(xsp_trace *t, PyObject *meta)
{
    if (!PyDict_Check(meta)) {
        PyErr_Format(PyExc_TypeError, "build: meta must be a dict, not %s", Py_TYPE(meta)->tp_name);
        return -1;
    }
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(meta, &pos, &k, &v)) {
        PyObject *kb = c_key(k, "meta");
        if (!kb)
            return -1;
        int rc = xsp_py_set_meta(t, PyBytes_AS_STRING(kb), v);
        Py_DECREF(kb);
        if (rc == XSP_PY_TYPE)
            PyErr_Format(PyExc_TypeError, "build: meta[%R] must be an int, float or str, not %s",
                         k, Py_TYPE(v)->tp_name);
        if (rc != 0)
            return -1;
    }
    return 0;
}

static int build_counters(xsp_trace *t, PyObject *counters)
{
    if (!PyDict_Check(counters)) {
        PyErr_Format(PyExc_TypeError, "build: counters must be a dict, not %s",
                     Py_TYPE(counters)->tp_name);
        return -1;
    }
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(counters, &pos, &k, &v)) {
        if (!PyLong_Check(v)) {
            PyErr_Format(PyExc_TypeError, "build: counters[%R] must be an int, not %s", k,
                         Py_TYPE(v)->tp_name);
            return -1;
        }
        int overflow;
        long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (n == -1 && PyErr_Occurred())
            return -1;
        if (overflow) {
            PyErr_Format(PyExc_OverflowError, "build: counters[%R] = %R does not fit in a 64-bit "
                         "signed int", k, v);
            return -1;
        }
        PyObject *kb = c_key(k, "counters");
        if (!kb)
            return -1;
        int rc = xsp_trace_add_counter(t, PyBytes_AS_STRING(kb), n);
        Py_DECREF(kb);
        if (rc != 0) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

PyObject *xsp_py_build(PyTypeObject *tracedata_type, PyObject *args)
{
    PyObject *spans, *threads, *meta, *counters;
    if (!PyArg_ParseTuple(args, "OOOO:build", &spans, &threads, &meta, &counters))
        return NULL;
    xsp_trace *t = xsp_trace_new();
    if (!t)
        return PyErr_NoMemory();
    char err[256];
    if (build_threads(t, threads) || build_spans(t, spans) || build_meta(t, meta)
        || build_counters(t, counters)) {
        xsp_trace_free(t);
        return NULL;
    }
    /* strings over XSP_STRTAB_MAX_LEN were cut as they were interned: counted as a recording
     * counts them */
    if (t->strings.ncut && xsp_trace_add_counter(t, "names.cut", (int64_t)t->strings.ncut)) {
        xsp_trace_free(t);
        return PyErr_NoMemory();
    }
    if (xsp_trace_check(t, err, sizeof err) != 0) {
        xsp_trace_free(t);
        return PyErr_Format(PyExc_ValueError, "%s", err);
    }
    return xsp_tracedata_wrap(tracedata_type, t);
}
