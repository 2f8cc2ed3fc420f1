/*
 * coremod.c: the CPython module xsp._core, a thin binding over the C core.
 *
 * Multi-phase initialisation, module state (tracedata.h) instead of globals, public API only.
 * What Python calls here is the cold path (start, stop, load, build) plus begin/end for the spans
 * Python records itself (regions, steps, modules); per-op recording never passes through here:
 * the torch shim calls the core directly through the function table exported as the capsule
 * "xsp._core._C_API" (xsp_api.h).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdatomic.h>
#include <string.h>

#include "../core/clock.h"
#include "../core/recorder.h"
#include "../include/xsp_api.h"
#include "../io/tracefile.h"
#include "gpumod.h"
#include "modcall.h"
#include "tracedata.h"

static const xsp_core_api core_api = {
    .version = XSP_CORE_API_VERSION,
    .size = sizeof(xsp_core_api),
    .rec_begin = xsp_rec_begin,
    .rec_end = xsp_rec_end,
    .rec_now = xsp_rec_now,
    .session_active = xsp_session_active,
    .rec_begin_l = xsp_rec_begin_l,
    .rec_end_l = xsp_rec_end_l,
    .names_changed = xsp_rec_names_changed,
};

static xsp_core_state *xsp_state(PyObject *mod)
{
    return PyModule_GetState(mod);
}

static PyObject *core_start(PyObject *mod, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"max_bytes", "pool_bytes", "adopt_roots", "gpu", "gpu_max_bytes",
                             "gpu_share", NULL};
    unsigned long long max_bytes = 0, pool_bytes = 0, gpu_max = 0;
    int adopt = 1, gpu = 0, share = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|KKppKp:start", kwlist, &max_bytes, &pool_bytes,
                                     &adopt, &gpu, &gpu_max, &share))
        return NULL;
    xsp_config cfg = {.max_bytes = max_bytes, .pool_bytes = pool_bytes, .adopt_roots = adopt};
    char err[1024];
    int rc = gpu ? xsp_pygpu_session_start(&cfg, gpu_max, share, err, sizeof err)
                 : xsp_session_start(&cfg, err, sizeof err);
    if (rc != 0)   /* -1 from the G path: CUPTI; else the core session itself */
        return PyErr_Format(gpu && rc == -1 ? xsp_state(mod)->gpu_error : PyExc_RuntimeError,
                            "xsp: %s", err);
    Py_RETURN_NONE;
}

static PyObject *core_stop(PyObject *mod, PyObject *Py_UNUSED(ignored))
{
    xsp_core_state *st = xsp_state(mod);
    xsp_trace *t;
    char err[256], gpu_err[512] = "";
    int rc;
    int gpu = xsp_pygpu_active();
    Py_BEGIN_ALLOW_THREADS
    rc = gpu ? xsp_pygpu_session_stop(&t, gpu_err, sizeof gpu_err, err, sizeof err)
             : xsp_session_stop(&t, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc != 0)
        return PyErr_Format(PyExc_RuntimeError, "xsp: %s", err);
    if (gpu_err[0] && xsp_trace_set_meta_str(t, "gpu_error", gpu_err) != 0) {
        xsp_trace_free(t);
        return PyErr_NoMemory();
    }
    return xsp_tracedata_wrap(st->tracedata_type, t);
}

/* gpu_info() -> dict(built=bool, reason=str|None, library=str|None) */
static PyObject *core_gpu_info(PyObject *mod, PyObject *Py_UNUSED(ignored))
{
    (void)mod;
    const char *why;
    int built = xsp_pygpu_built(&why);
    const char *lib = xsp_pygpu_library();
    return Py_BuildValue("{s:O,s:s,s:s}", "built", built ? Py_True : Py_False, "reason", why,
                         "library", lib);
}

/* gpu_open(dirs) -> str: loads libcupti, searching dirs after a copy already loaded. */
static PyObject *core_gpu_open(PyObject *mod, PyObject *arg)
{
    PyObject *seq = PySequence_Fast(arg, "gpu_open() needs a list of folders");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > 8)
        n = 8;
    const char *dirs[8];
    for (Py_ssize_t i = 0; i < n; i++) {
        dirs[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
        if (!dirs[i]) {
            Py_DECREF(seq);
            return NULL;
        }
    }
    char err[4096];
    int rc = xsp_pygpu_open(dirs, (size_t)n, err, sizeof err);
    Py_DECREF(seq);
    if (rc != 0)
        return PyErr_Format(xsp_state(mod)->gpu_error, "xsp: %s", err);
    return PyUnicode_FromString(xsp_pygpu_library() ? xsp_pygpu_library() : "");
}

static PyObject *core_active(PyObject *mod, PyObject *Py_UNUSED(ignored))
{
    (void)mod;
    return PyBool_FromLong(xsp_session_active());
}

/* begin(level, kind, name, name2=None) -> key */
static PyObject *core_begin(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    (void)mod;
    if (nargs < 3 || nargs > 4)
        return PyErr_Format(PyExc_TypeError, "begin(level, kind, name, name2=None) takes 3 or 4 "
                            "arguments (%zd given)", nargs);
    long level = PyLong_AsLong(args[0]), kind = PyLong_AsLong(args[1]);
    if ((level == -1 || kind == -1) && PyErr_Occurred())
        return NULL;
    if (level < 0 || level >= XSP_NLEVELS || kind < 0 || kind >= XSP_NKINDS)
        return PyErr_Format(PyExc_ValueError, "bad level %ld or kind %ld", level, kind);
    Py_ssize_t len, len2 = 0;
    const char *name = PyUnicode_AsUTF8AndSize(args[2], &len), *name2 = NULL;
    if (!name)
        return NULL;
    if (nargs == 4 && args[3] != Py_None && !(name2 = PyUnicode_AsUTF8AndSize(args[3], &len2)))
        return NULL;
    uint64_t key = xsp_py_new_key();   /* never an object address: see modcall.h */
    xsp_rec_begin((uint8_t)level, (uint8_t)kind, name, (size_t)len, name2, (size_t)len2, key, -1,
                  0);
    return PyLong_FromUnsignedLongLong(key);
}

/* end(key, flags=0) */
static PyObject *core_end(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    (void)mod;
    if (nargs < 1 || nargs > 2)
        return PyErr_Format(PyExc_TypeError, "end(key, flags=0) takes 1 or 2 arguments");
    unsigned long long key = PyLong_AsUnsignedLongLong(args[0]);
    if (key == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    unsigned long flags = nargs == 2 ? PyLong_AsUnsignedLong(args[1]) : 0;
    if (flags == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    xsp_rec_end(key, (uint32_t)flags);
    Py_RETURN_NONE;
}

static PyObject *core_now(PyObject *mod, PyObject *Py_UNUSED(ignored))
{
    (void)mod;
    return PyLong_FromUnsignedLongLong(xsp_clock_ns());
}

static PyObject *core_set_fake_clock(PyObject *mod, PyObject *args)
{
    unsigned long long start, step;
    if (!PyArg_ParseTuple(args, "KK:set_fake_clock", &start, &step))
        return NULL;
    (void)mod;
    if (xsp_session_active())
        return PyErr_Format(PyExc_RuntimeError, "set_fake_clock: not while a session records");
    xsp_clock_set_fake(start, step);
    Py_RETURN_NONE;
}

/* Raises TraceFormatError(msg) with .path and .offset, or OSError / MemoryError. */
static PyObject *load_error(xsp_core_state *st, PyObject *path, int kind, uint64_t offset,
                            const char *msg)
{
    if (kind == XSP_LOAD_IO)
        return PyErr_Format(PyExc_OSError, "%s", msg);
    if (kind == XSP_LOAD_NOMEM)
        return PyErr_NoMemory();
    /* xsp_trace_load's messages already start with the path. */
    PyObject *text = PyUnicode_FromFormat("%s (at byte %llu)", msg, (unsigned long long)offset);
    PyObject *exc = text ? PyObject_CallOneArg(st->format_error, text) : NULL;
    Py_XDECREF(text);
    if (!exc)
        return NULL;
    PyObject *off = PyLong_FromUnsignedLongLong(offset);
    if (!off || PyObject_SetAttrString(exc, "offset", off) < 0
        || PyObject_SetAttrString(exc, "path", path ? path : Py_None) < 0) {
        Py_XDECREF(off);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(off);
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    return NULL;
}

static PyObject *core_load(PyObject *mod, PyObject *arg)
{
    xsp_core_state *st = xsp_state(mod);
    PyObject *bytes;
    if (!PyUnicode_FSConverter(arg, &bytes))
        return NULL;
    char err[512];
    int kind = 0;
    uint64_t off = 0;
    xsp_trace *t;
    Py_BEGIN_ALLOW_THREADS
    t = xsp_trace_load(PyBytes_AS_STRING(bytes), &kind, &off, err, sizeof err);
    Py_END_ALLOW_THREADS
    Py_DECREF(bytes);
    if (!t) {
        PyObject *p = PyOS_FSPath(arg);
        PyObject *r = p ? load_error(st, p, kind, off, err) : NULL;
        Py_XDECREF(p);
        return r;
    }
    return xsp_tracedata_wrap(st->tracedata_type, t);
}

static PyObject *core_loads(PyObject *mod, PyObject *arg)
{
    xsp_core_state *st = xsp_state(mod);
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    char err[512];
    int kind = 0;
    uint64_t off = 0;
    xsp_trace *t = xsp_trace_parse(view.buf, (size_t)view.len, &kind, &off, err, sizeof err);
    PyBuffer_Release(&view);
    if (!t)
        return load_error(st, NULL, kind, off, err);
    return xsp_tracedata_wrap(st->tracedata_type, t);
}

/* -- build(): a trace from Python data ------------------------------------------------------
 * For tests and importers (xsp.Trace.from_spans).  Messages name the entry ("span 3: ...",
 * "thread 1: ...") in the words xsp_trace_check uses, which has the last word on ordering. */

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

/* build(spans, threads, meta, counters) -> TraceData */
static PyObject *core_build(PyObject *mod, PyObject *args)
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
    if (xsp_trace_check(t, err, sizeof err) != 0) {
        xsp_trace_free(t);
        return PyErr_Format(PyExc_ValueError, "%s", err);
    }
    return xsp_tracedata_wrap(xsp_state(mod)->tracedata_type, t);
}

static PyMethodDef core_methods[] = {
    {"start", (PyCFunction)(void (*)(void))core_start, METH_VARARGS | METH_KEYWORDS,
     "start(max_bytes=0, pool_bytes=0, adopt_roots=True, gpu=False, gpu_max_bytes=0, "
     "gpu_share=False)\n\ngpu_share: trace without CUPTI's subscription when another client "
     "holds it idle (the caller has checked that it is not tracing)."},
    {"stop", core_stop, METH_NOARGS, "stop() -> TraceData: stop recording and merge."},
    {"gpu_info", core_gpu_info, METH_NOARGS, "gpu_info() -> dict(built, reason, library)"},
    {"gpu_open", core_gpu_open, METH_O, "gpu_open(dirs) -> path of the libcupti loaded"},
    {"active", core_active, METH_NOARGS, "active() -> bool"},
    {"begin", (PyCFunction)(void (*)(void))core_begin, METH_FASTCALL,
     "begin(level, kind, name, name2=None) -> key"},
    {"end", (PyCFunction)(void (*)(void))core_end, METH_FASTCALL, "end(key, flags=0)"},
    {"now", core_now, METH_NOARGS, "now() -> int: CLOCK_MONOTONIC (or the fake clock) in ns."},
    {"set_fake_clock", core_set_fake_clock, METH_VARARGS,
     "set_fake_clock(start, step): tests only; step 0 restores the real clock."},
    {"load", core_load, METH_O, "load(path) -> TraceData"},
    {"loads", core_loads, METH_O, "loads(bytes) -> TraceData"},
    {"build", core_build, METH_VARARGS,
     "build(spans, threads, meta, counters) -> TraceData: a trace from Python data.\n\n"
     "spans: a sequence of (start_ns, end_ns, parent, level, kind, name, thread, flags, attrs),\n"
     "ints except parent (a span id, -1 for a root), name (str) and attrs (dict str -> int,\n"
     "float or str); level and kind index LEVELS and KINDS, thread indexes threads.\n"
     "threads: a sequence of (tid, name, kind), kind 0 CPU thread, 1 GPU stream, 2 overhead.\n"
     "meta: dict str -> int, float or str; counters: dict str -> int.  The spans must be in\n"
     "trace order (sorted by start, parents first): ValueError with the first violation, as\n"
     "for out-of-range values (naming the span); TypeError for wrong types."},
    {NULL, NULL, 0, NULL},
};

static int add_names(PyObject *m, const char *attr, const char *(*fn)(unsigned), unsigned n)
{
    PyObject *t = PyTuple_New(n);
    for (unsigned i = 0; t && i < n; i++) {
        PyObject *s = PyUnicode_FromString(fn(i));
        if (!s) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, s);
    }
    int rc = t ? PyModule_AddObjectRef(m, attr, t) : -1;
    Py_XDECREF(t);
    return rc;
}

static int core_exec(PyObject *m)
{
    xsp_core_state *st = PyModule_GetState(m);
    st->tracedata_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &xsp_tracedata_spec, NULL);
    if (!st->tracedata_type || PyModule_AddType(m, st->tracedata_type) < 0)
        return -1;
    PyObject *mc_type = PyType_FromModuleAndSpec(m, &xsp_modulecall_spec, NULL);
    int mc_rc = mc_type ? PyModule_AddType(m, (PyTypeObject *)mc_type) : -1;
    Py_XDECREF(mc_type);
    if (mc_rc < 0)
        return -1;
    st->format_error = PyErr_NewExceptionWithDoc(
        "xsp._core.TraceFormatError",
        "A trace file is truncated, corrupt or not an xsp trace; .offset is the byte offset.",
        PyExc_ValueError, NULL);
    if (!st->format_error || PyModule_AddObjectRef(m, "TraceFormatError", st->format_error) < 0)
        return -1;
    st->gpu_error = PyErr_NewExceptionWithDoc(
        "xsp._core.GPUError", "Level G cannot be recorded: CUPTI, the device or the build.",
        PyExc_RuntimeError, NULL);
    if (!st->gpu_error || PyModule_AddObjectRef(m, "GPUError", st->gpu_error) < 0)
        return -1;
    PyObject *cap = PyCapsule_New((void *)&core_api, XSP_CORE_API_CAPSULE, NULL);
    int rc = cap ? PyModule_AddObjectRef(m, "_C_API", cap) : -1;
    Py_XDECREF(cap);
    if (rc < 0)
        return -1;
    if (add_names(m, "KINDS", xsp_kind_name, XSP_NKINDS) < 0
        || add_names(m, "LEVELS", xsp_level_name, XSP_NLEVELS) < 0)
        return -1;
    if (PyModule_AddIntConstant(m, "FLAG_OPEN_AT_STOP", XSP_FLAG_OPEN_AT_STOP) < 0
        || PyModule_AddIntConstant(m, "FLAG_FORCED_END", XSP_FLAG_FORCED_END) < 0
        || PyModule_AddIntConstant(m, "FLAG_ELIDE", XSP_FLAG_ELIDE) < 0
        || PyModule_AddIntConstant(m, "FLAG_ELIDE_IF_EMPTY", XSP_FLAG_ELIDE_IF_EMPTY) < 0
        || PyModule_AddIntConstant(m, "MAX_DEPTH", XSP_MAX_DEPTH) < 0
        || PyModule_AddIntConstant(m, "FILE_VERSION", XSP_FILE_VERSION) < 0)
        return -1;
    return 0;
}

static int core_traverse(PyObject *m, visitproc visit, void *arg)
{
    xsp_core_state *st = PyModule_GetState(m);
    Py_VISIT(st->tracedata_type);
    Py_VISIT(st->format_error);
    Py_VISIT(st->gpu_error);
    return 0;
}

static int core_clear(PyObject *m)
{
    xsp_core_state *st = PyModule_GetState(m);
    Py_CLEAR(st->tracedata_type);
    Py_CLEAR(st->format_error);
    Py_CLEAR(st->gpu_error);
    return 0;
}

static void core_free(void *m)
{
    core_clear((PyObject *)m);
}

static PyModuleDef_Slot core_slots[] = {
    {Py_mod_exec, core_exec},
#ifdef Py_mod_multiple_interpreters
    /* The recorder is process-global state: one interpreter at a time. */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
#ifdef Py_mod_gil
    /* Module state is only written at exec; the core synchronises itself. */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "xsp._core",
    .m_doc = "xsp's C core: recording sessions, merged traces and the trace file.",
    .m_size = sizeof(xsp_core_state),
    .m_methods = core_methods,
    .m_slots = core_slots,
    .m_traverse = core_traverse,
    .m_clear = core_clear,
    .m_free = core_free,
};

PyMODINIT_FUNC PyInit__core(void)
{
    return PyModuleDef_Init(&core_module);
}
