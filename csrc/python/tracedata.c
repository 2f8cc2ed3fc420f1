/*
 * tracedata.c: the TraceData type (see tracedata.h).
 *
 * The spans leave without a copy: the object exports its array of xsp_span structs through
 * the buffer protocol (read-only), and span_layout() gives each field's offset and size, so the
 * Python side views every span column as a strided numpy array over that memory (a column copy
 * costs a pass over fresh memory: 0.7 s for 10^7 spans on the development VM).  Each view holds
 * a reference to the object.  Attribute columns leave as bytes in native byte order (one copy).
 * Strings are decoded as UTF-8 with surrogateescape, so any byte string survives a round trip;
 * strings coming in (_core.build and the session's stop, through the xsp_py_* converters) are
 * encoded the same way.
 *
 * A TraceData never changes: it is made whole (by a session's stop, a load or build) and then
 * only read, so views, saves without the GIL and Trace objects built on it can never see it
 * change under them.  (Historical note: it once had set_meta, add_attrs and set_thread_name,
 * which forced a "saving" guard, copied attr_off/attr_n columns and a segfault regression test.)
 */
#include "tracedata.h"

#include <stddef.h>
#include <string.h>

#include "../io/tracefile.h"

PyObject *xsp_tracedata_wrap(PyTypeObject *tp, xsp_trace *t)
{
    xsp_TraceDataObject *self = PyObject_GC_New(xsp_TraceDataObject, tp);
    if (!self) {
        xsp_trace_free(t);
        return NULL;
    }
    self->trace = t;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

static void td_dealloc(xsp_TraceDataObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    xsp_trace_free(self->trace);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static int td_traverse(xsp_TraceDataObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static Py_ssize_t td_len(xsp_TraceDataObject *self)
{
    return (Py_ssize_t)self->trace->n_spans;
}

static PyObject *str_of(const xsp_trace *t, uint32_t id)
{
    size_t len;
    const char *s = xsp_strtab_get(&t->strings, id, &len);
    if (!s)
        return PyUnicode_FromString("");
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)len, "surrogateescape");
}

/* Copies field (size bytes at offset off) of n structs of the given stride into new bytes. */
static PyObject *column(const void *base, size_t stride, size_t off, size_t size, uint32_t n)
{
    PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n * (Py_ssize_t)size);
    if (!b)
        return NULL;
    char *d = PyBytes_AS_STRING(b);
    const char *src = (const char *)base + off;
    for (uint32_t i = 0; i < n; i++)
        memcpy(d + (size_t)i * size, src + (size_t)i * stride, size);
    return b;
}

#define COLUMN(arr, n, T, f) column((arr), sizeof(T), offsetof(T, f), sizeof(((T *)0)->f), (n))

/* Sets d[key] = value, stealing value. Returns 0 or -1. */
static int put(PyObject *d, const char *key, PyObject *value)
{
    if (!value)
        return -1;
    int rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc;
}

/* The buffer protocol: the span array, read-only, as n_spans * sizeof(xsp_span) bytes. */
static int td_getbuffer(xsp_TraceDataObject *self, Py_buffer *view, int flags)
{
    static char empty[1];
    const xsp_trace *t = self->trace;
    void *buf = t->n_spans ? (void *)t->spans : (void *)empty;
    return PyBuffer_FillInfo(view, (PyObject *)self, buf,
                             (Py_ssize_t)t->n_spans * (Py_ssize_t)sizeof(xsp_span), 1, flags);
}

/* (itemsize, ((field, offset, size), ...)): where each span field lies in the exported buffer. */
static PyObject *td_span_layout(xsp_TraceDataObject *self, PyObject *Py_UNUSED(ignored))
{
    (void)self;
#define FIELD(f) {#f, offsetof(xsp_span, f), sizeof(((xsp_span *)0)->f)}
    static const struct {
        const char *name;
        size_t off, size;
    } fields[] = {FIELD(start_ns), FIELD(end_ns), FIELD(parent),   FIELD(name),
                  FIELD(thread),   FIELD(attr_off), FIELD(attr_n), FIELD(level),
                  FIELD(kind),     FIELD(flags)};
#undef FIELD
    size_t n = sizeof fields / sizeof fields[0];
    PyObject *tup = PyTuple_New((Py_ssize_t)n);
    if (!tup)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        PyObject *f = Py_BuildValue("(snn)", fields[i].name, (Py_ssize_t)fields[i].off,
                                    (Py_ssize_t)fields[i].size);
        if (!f) {
            Py_DECREF(tup);
            return NULL;
        }
        PyTuple_SET_ITEM(tup, (Py_ssize_t)i, f);
    }
    return Py_BuildValue("nN", (Py_ssize_t)sizeof(xsp_span), tup);
}

/* The attribute columns: key (u32), type (u8), value (8 bytes: int64, float64 or u32 id). */
static PyObject *td_attrs(xsp_TraceDataObject *self, PyObject *Py_UNUSED(ignored))
{
    const xsp_trace *t = self->trace;
    uint32_t n = t->n_attrs;
    PyObject *d = PyDict_New();
    if (!d || put(d, "key", COLUMN(t->attrs, n, xsp_attr, key))
        || put(d, "type", COLUMN(t->attrs, n, xsp_attr, type))
        || put(d, "int", COLUMN(t->attrs, n, xsp_attr, v.i))
        || put(d, "float", COLUMN(t->attrs, n, xsp_attr, v.f))
        || put(d, "str", COLUMN(t->attrs, n, xsp_attr, v.s))) {
        Py_XDECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *td_strings(xsp_TraceDataObject *self, PyObject *Py_UNUSED(ignored))
{
    const xsp_trace *t = self->trace;
    PyObject *l = PyList_New(t->strings.n);
    for (uint32_t i = 0; l && i < t->strings.n; i++) {
        PyObject *s = str_of(t, i);
        if (!s) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, i, s);
    }
    return l;
}

static PyObject *td_threads(xsp_TraceDataObject *self, PyObject *Py_UNUSED(ignored))
{
    const xsp_trace *t = self->trace;
    PyObject *l = PyList_New(t->n_threads);
    for (uint32_t i = 0; l && i < t->n_threads; i++) {
        PyObject *name = str_of(t, t->threads[i].name);
        PyObject *tup = name ? Py_BuildValue("(KNI)", (unsigned long long)t->threads[i].tid, name,
                                             (unsigned)t->threads[i].kind)
                             : NULL;
        if (!tup) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, i, tup);
    }
    return l;
}

static PyObject *value_of(const xsp_trace *t, const xsp_attr *a)
{
    switch (a->type) {
    case XSP_ATTR_INT:
        return PyLong_FromLongLong(a->v.i);
    case XSP_ATTR_FLOAT:
        return PyFloat_FromDouble(a->v.f);
    default:
        return str_of(t, a->v.s);
    }
}

static PyObject *kv_dict(const xsp_trace *t, const xsp_attr *a, uint32_t n)
{
    PyObject *d = PyDict_New();
    for (uint32_t i = 0; d && i < n; i++) {
        PyObject *k = str_of(t, a[i].key), *v = k ? value_of(t, &a[i]) : NULL;
        if (!v || PyDict_SetItem(d, k, v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(k);
        Py_XDECREF(v);
    }
    return d;
}

static PyObject *td_meta(xsp_TraceDataObject *self, PyObject *Py_UNUSED(ignored))
{
    return kv_dict(self->trace, self->trace->meta, self->trace->n_meta);
}

static PyObject *td_counters(xsp_TraceDataObject *self, PyObject *Py_UNUSED(ignored))
{
    return kv_dict(self->trace, self->trace->counters, self->trace->n_counters);
}

int xsp_py_u64(PyObject *o, uint64_t hi, uint64_t *out)
{
    if (!PyLong_Check(o))
        return XSP_PY_TYPE;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow < 0 || (!overflow && v < 0))
        return XSP_PY_RANGE;
    uint64_t u = (uint64_t)v;
    if (overflow > 0) {   /* past INT64_MAX: may still fit in 64 unsigned bits */
        unsigned long long w = PyLong_AsUnsignedLongLong(o);
        if (w == (unsigned long long)-1 && PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_OverflowError))
                return -1;
            PyErr_Clear();
            return XSP_PY_RANGE;
        }
        u = w;
    }
    if (u > hi)
        return XSP_PY_RANGE;
    *out = u;
    return 0;
}

PyObject *xsp_py_utf8(PyObject *s)
{
    return PyUnicode_AsEncodedString(s, "utf-8", "surrogateescape");
}

uint32_t xsp_py_intern(xsp_trace *t, PyObject *s)
{
    PyObject *b = xsp_py_utf8(s);
    if (!b)
        return UINT32_MAX;
    uint32_t id = xsp_strtab_intern(&t->strings, PyBytes_AS_STRING(b),
                                    (size_t)PyBytes_GET_SIZE(b));
    Py_DECREF(b);
    if (id == UINT32_MAX)
        PyErr_NoMemory();
    return id;
}

int xsp_py_attr_value(xsp_trace *t, PyObject *o, xsp_attr *a)
{
    if (PyLong_Check(o)) {   /* bool included */
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (overflow)
            return XSP_PY_RANGE;
        a->type = XSP_ATTR_INT;
        a->v.i = v;
    } else if (PyFloat_Check(o)) {
        a->type = XSP_ATTR_FLOAT;
        a->v.f = PyFloat_AS_DOUBLE(o);
    } else if (PyUnicode_Check(o)) {
        uint32_t id = xsp_py_intern(t, o);
        if (id == UINT32_MAX)
            return -1;
        a->type = XSP_ATTR_STR;
        a->v.s = id;
    } else {
        return XSP_PY_TYPE;
    }
    return 0;
}

int xsp_py_set_meta(xsp_trace *t, const char *key, PyObject *value)
{
    int rc;
    if (PyLong_Check(value)) {   /* bool included */
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (overflow) {
            PyErr_Format(PyExc_OverflowError, "meta value for %s = %R does not fit in a 64-bit "
                         "signed int", key, value);
            return -1;
        }
        rc = xsp_trace_set_meta_int(t, key, v);
    } else if (PyFloat_Check(value)) {
        rc = xsp_trace_set_meta_float(t, key, PyFloat_AS_DOUBLE(value));
    } else if (PyUnicode_Check(value)) {
        PyObject *b = xsp_py_utf8(value);
        if (!b)
            return -1;
        if (strlen(PyBytes_AS_STRING(b)) != (size_t)PyBytes_GET_SIZE(b)) {
            Py_DECREF(b);
            PyErr_Format(PyExc_ValueError, "meta value for %s contains a NUL character", key);
            return -1;
        }
        rc = xsp_trace_set_meta_str(t, key, PyBytes_AS_STRING(b));
        Py_DECREF(b);
    } else {
        return XSP_PY_TYPE;
    }
    if (rc != 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static PyObject *td_save(xsp_TraceDataObject *self, PyObject *arg)
{
    PyObject *bytes;
    if (!PyUnicode_FSConverter(arg, &bytes))
        return NULL;
    char err[512];
    int rc;
    Py_BEGIN_ALLOW_THREADS          /* the trace never changes: nothing to guard */
    rc = xsp_trace_save(self->trace, PyBytes_AS_STRING(bytes), err, sizeof err);
    Py_END_ALLOW_THREADS
    Py_DECREF(bytes);
    if (rc != 0)
        return PyErr_Format(PyExc_OSError, "%s", err);
    Py_RETURN_NONE;
}

static PyObject *td_dumps(xsp_TraceDataObject *self, PyObject *Py_UNUSED(ignored))
{
    char *buf;
    size_t len;
    char err[256];
    if (xsp_trace_dump(self->trace, &buf, &len, err, sizeof err) != 0)
        return PyErr_NoMemory();
    PyObject *b = PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
    free(buf);
    return b;
}

static PyObject *td_equal(xsp_TraceDataObject *self, PyObject *other)
{
    if (Py_TYPE(other) != Py_TYPE(self))
        return PyErr_Format(PyExc_TypeError, "equal() needs a TraceData, not %s",
                            Py_TYPE(other)->tp_name);
    return PyBool_FromLong(xsp_trace_equal(self->trace, ((xsp_TraceDataObject *)other)->trace));
}

static PyObject *td_check(xsp_TraceDataObject *self, PyObject *Py_UNUSED(ignored))
{
    char err[256];
    if (xsp_trace_check(self->trace, err, sizeof err) != 0)
        return PyUnicode_FromString(err);
    Py_RETURN_NONE;
}

/* _add_meta(dict): adds (or replaces) meta entries of a trace that nobody has read yet.  Only
 * the profile calls it, in its __exit__/stop, between the C stop and handing the trace out
 * (the clock samples taken after recording stopped, docs/distributed.md): a TraceData is
 * otherwise never changed.  Meta is not part of the span views, so no exported buffer goes
 * stale.  Raises TypeError for a key that is not a str or a value that is not an int, float
 * or str; MemoryError; entries before the failing one stay added. */
static PyObject *td_add_meta(xsp_TraceDataObject *self, PyObject *arg)
{
    if (!PyDict_Check(arg))
        return PyErr_Format(PyExc_TypeError, "_add_meta: a dict, not %s", Py_TYPE(arg)->tp_name);
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(arg, &pos, &k, &v)) {
        if (!PyUnicode_Check(k))
            return PyErr_Format(PyExc_TypeError, "_add_meta: keys must be str, not %s",
                                Py_TYPE(k)->tp_name);
        const char *key = PyUnicode_AsUTF8(k);
        if (!key)
            return NULL;
        int rc = xsp_py_set_meta(self->trace, key, v);
        if (rc == XSP_PY_TYPE)
            return PyErr_Format(PyExc_TypeError, "_add_meta: meta[%R] must be an int, float or "
                                "str, not %s", k, Py_TYPE(v)->tp_name);
        if (rc != 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef td_methods[] = {
    {"_add_meta", (PyCFunction)td_add_meta, METH_O,
     "_add_meta(dict): the profile's post-stop meta (clock samples); nobody else calls it."},
    {"span_layout", (PyCFunction)td_span_layout, METH_NOARGS,
     "(itemsize, ((field, offset, size), ...)) of the span array this object exports through "
     "the buffer protocol."},
    {"attrs", (PyCFunction)td_attrs, METH_NOARGS, "Attribute columns as a dict of bytes."},
    {"strings", (PyCFunction)td_strings, METH_NOARGS, "The string table, a list of str."},
    {"threads", (PyCFunction)td_threads, METH_NOARGS, "Tracks: a list of (tid, name, kind)."},
    {"meta", (PyCFunction)td_meta, METH_NOARGS, "Metadata dict."},
    {"counters", (PyCFunction)td_counters, METH_NOARGS, "Lost/dropped counters dict."},
    {"save", (PyCFunction)td_save, METH_O, "save(path): write the .xsp file."},
    {"dumps", (PyCFunction)td_dumps, METH_NOARGS, "The .xsp file's bytes."},
    {"equal", (PyCFunction)td_equal, METH_O, "equal(other) -> bool"},
    {"check", (PyCFunction)td_check, METH_NOARGS, "None if the invariants hold, else a message."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot td_slots[] = {
    {Py_tp_dealloc, td_dealloc},
    {Py_tp_traverse, td_traverse},
    {Py_tp_methods, td_methods},
    {Py_sq_length, td_len},
    {Py_bf_getbuffer, td_getbuffer},
    {Py_tp_doc, "A merged trace owned by the C core (see xsp.Trace for the public API)."},
    {0, NULL},
};

PyType_Spec xsp_tracedata_spec = {
    .name = "xsp._core.TraceData",
    .basicsize = sizeof(xsp_TraceDataObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE
             | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = td_slots,
};
