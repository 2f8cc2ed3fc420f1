/*
 * coremod.c: the CPython module xsp._core, a thin binding over the C core.
 *
 * Multi-phase initialisation, module state (tracedata.h) instead of globals, public API only.
 * What Python calls here is the cold path (sessions: sessionmod.c; load; build: tracebuild.c)
 * plus begin/end for the spans Python begins itself (model spans, compile spans); per-op
 * recording never passes through here:
 * the torch shim calls the core directly through the function table exported as the capsule
 * "xsp._core._C_API" (xsp_api.h).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "../core/clock.h"
#include "../core/inputs.h"
#include "../core/recorder.h"
#include "../core/tmerge.h"
#include "../include/xsp_api.h"
#include "../io/tracefile.h"
#include "gpumod.h"
#include "jsonwmod.h"
#include "kjsonmod.h"
#include "modcall.h"
#include "modsites.h"
#include "pystack.h"
#include "sessionmod.h"
#include "sessionopts.h"
#include "tracebuild.h"
#include "tracedata.h"

static const xsp_core_api core_api = {
    .version = XSP_ABI_VERSION,
    .size = sizeof(xsp_core_api),
    .rec_begin = xsp_rec_begin,
    .rec_end = xsp_rec_end,
    .rec_now = xsp_rec_now,
    .session_active = xsp_rec_active,
    .rec_op_start = xsp_rec_op_start,
    .rec_end_l = xsp_rec_end_l,
    .names_changed = xsp_rec_names_changed,
    .rec_data = xsp_rec_data,
    .set_dtype_names = xsp_inputs_set_dtype_names,
    .set_thread_role_fn = xsp_rec_set_thread_role_fn,
    .set_forward_tid_fn = xsp_rec_set_forward_tid_fn,
    .fast_tls = xsp_rec_fast_tls,
};

static xsp_core_state *xsp_state(PyObject *mod)
{
    return PyModule_GetState(mod);
}

const xsp_core_api *xsp_py_core_api(void)
{
    return &core_api;
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
    return PyBool_FromLong(xsp_rec_active());
}

static PyObject *core_active_session(PyObject *mod, PyObject *Py_UNUSED(ignored))
{
    (void)mod;
    return xsp_py_active_session();
}

static PyObject *core_after_fork_child(PyObject *mod, PyObject *Py_UNUSED(ignored))
{
    (void)mod;
    return xsp_py_after_fork_child();
}

/* begin(level, kind, name, name2=None, a0=-1) -> key */
static PyObject *core_begin(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    (void)mod;
    if (nargs < 3 || nargs > 5)
        return PyErr_Format(PyExc_TypeError, "begin(level, kind, name, name2=None, a0=-1) takes "
                            "3 to 5 arguments (%zd given)", nargs);
    long level = PyLong_AsLong(args[0]), kind = PyLong_AsLong(args[1]);
    if ((level == -1 || kind == -1) && PyErr_Occurred())
        return NULL;
    if (level < 0 || level >= XSP_NLEVELS || kind < 0 || kind >= XSP_NKINDS)
        return PyErr_Format(PyExc_ValueError, "bad level %ld or kind %ld", level, kind);
    Py_ssize_t len, len2 = 0;
    const char *name = PyUnicode_AsUTF8AndSize(args[2], &len), *name2 = NULL;
    if (!name)
        return NULL;
    if (nargs >= 4 && args[3] != Py_None && !(name2 = PyUnicode_AsUTF8AndSize(args[3], &len2)))
        return NULL;
    long long a0 = nargs == 5 ? PyLong_AsLongLong(args[4]) : -1;   /* a module's site */
    if (a0 == -1 && PyErr_Occurred())
        return NULL;
    uint64_t key = xsp_py_new_key();   /* never an object address: see modcall.h */
    xsp_rec_begin((uint8_t)level, (uint8_t)kind, name, (size_t)len, name2, (size_t)len2, key, a0,
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
    if (xsp_rec_active())
        return PyErr_Format(PyExc_RuntimeError, "set_fake_clock: not while a session records");
    xsp_clock_set_fake(start, step);
    Py_RETURN_NONE;
}

/* fake_clock_on() -> bool: whether the fake clock is installed (xsp.profile then calibrates
 * nothing, as the calibration's clock readings would move every later reading).  Cannot fail. */
static PyObject *core_fake_clock_on(PyObject *mod, PyObject *Py_UNUSED(ignored))
{
    (void)mod;
    return PyBool_FromLong(atomic_load(&xsp_fake_step) != 0);
}

/* _set_release(early): tests and benchmarks only; see xsp_rec_set_release.  Cannot fail. */
static PyObject *core_set_release(PyObject *mod, PyObject *arg)
{
    (void)mod;
    int early = PyObject_IsTrue(arg);
    if (early < 0)
        return NULL;
    xsp_rec_set_release(early);
    Py_RETURN_NONE;
}

/* fake_clock_signal(at, signum): tests only; see xsp_clock_fake_signal. */
static PyObject *core_fake_clock_signal(PyObject *mod, PyObject *args)
{
    unsigned long long at;
    int signum;
    if (!PyArg_ParseTuple(args, "Ki:fake_clock_signal", &at, &signum))
        return NULL;
    (void)mod;
    if (signum < 1 || signum >= NSIG)
        return PyErr_Format(PyExc_ValueError, "fake_clock_signal: signal number %d out of range "
                            "1..%d", signum, NSIG - 1);
    if (at && atomic_load(&xsp_fake_step) == 0)
        return PyErr_Format(PyExc_RuntimeError, "fake_clock_signal: install the fake clock "
                            "first (set_fake_clock(start, step) with step > 0)");
    xsp_clock_fake_signal(at, signum);
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

static PyObject *core_read_kineto(PyObject *mod, PyObject *chunks)
{
    xsp_core_state *st = xsp_state(mod);
    return xsp_py_read_kineto(st->format_error, st->tracedata_type, chunks);
}

static PyObject *core_write_kineto(PyObject *mod, PyObject *args)
{
    return xsp_py_write_kineto(xsp_state(mod)->tracedata_type, args);
}

static PyObject *core_write_chrome(PyObject *mod, PyObject *args)
{
    return xsp_py_write_chrome(xsp_state(mod)->tracedata_type, args);
}

static PyObject *core_write_otlp(PyObject *mod, PyObject *args)
{
    return xsp_py_write_otlp(xsp_state(mod)->tracedata_type, args);
}

static PyObject *core_encode_otlp(PyObject *mod, PyObject *args)
{
    return xsp_py_encode_otlp(xsp_state(mod)->tracedata_type, args);
}

static PyObject *core_build(PyObject *mod, PyObject *args)
{
    return xsp_py_build(xsp_state(mod)->tracedata_type, args);
}

/* merge(inputs, id_keys): inputs a sequence of (TraceData, rank, o0, t0, o1, t1), id_keys a
 * sequence of str: xsp_trace_merge (core/tmerge.h) without the GIL.  Returns a new TraceData,
 * or raises TypeError for wrong arguments, ValueError or MemoryError with the merge's message.
 * The inputs are kept alive (references held) while the merge runs. */
static PyObject *core_merge(PyObject *mod, PyObject *args)
{
    xsp_core_state *st = xsp_state(mod);
    PyObject *inputs, *keys;
    if (!PyArg_ParseTuple(args, "OO:merge", &inputs, &keys))
        return NULL;
    PyObject *seq = PySequence_Fast(inputs, "merge: inputs must be a sequence");
    PyObject *kseq = seq ? PySequence_Fast(keys, "merge: id_keys must be a sequence") : NULL;
    if (!kseq) {
        Py_XDECREF(seq);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), nk = PySequence_Fast_GET_SIZE(kseq);
    xsp_merge_in *in = PyMem_Calloc(n ? (size_t)n : 1, sizeof *in);
    const char **ids = PyMem_Calloc(nk ? (size_t)nk : 1, sizeof *ids);
    PyObject *result = NULL;
    if (!in || !ids) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i), *td;
        long long rank;
        double o0, t0, o1, t1;
        if (!PyArg_ParseTuple(item, "O!Ldddd:merge input", st->tracedata_type, &td, &rank,
                              &o0, &t0, &o1, &t1))
            goto done;
        in[i] = (xsp_merge_in){.trace = ((xsp_TraceDataObject *)td)->trace, .rank = rank,
                               .o0 = o0, .t0 = t0, .o1 = o1, .t1 = t1};
    }
    for (Py_ssize_t j = 0; j < nk; j++) {
        PyObject *k = PySequence_Fast_GET_ITEM(kseq, j);
        if (!PyUnicode_Check(k)) {
            PyErr_SetString(PyExc_TypeError, "merge: id_keys must be str");
            goto done;
        }
        if (!(ids[j] = PyUnicode_AsUTF8(k)))
            goto done;
    }
    char err[256] = "";
    xsp_trace *t;
    Py_BEGIN_ALLOW_THREADS      /* the inputs never change; seq holds them */
    t = xsp_trace_merge(in, (uint32_t)n, ids, (uint32_t)nk, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (!t) {
        if (strstr(err, "out of memory"))
            PyErr_NoMemory();
        else
            PyErr_SetString(PyExc_ValueError, err);
        goto done;
    }
    result = xsp_tracedata_wrap(st->tracedata_type, t);
done:
    PyMem_Free(in);
    PyMem_Free(ids);
    Py_DECREF(seq);
    Py_DECREF(kseq);
    return result;
}

static PyMethodDef core_methods[] = {
    {"gpu_info", core_gpu_info, METH_NOARGS, "gpu_info() -> dict(built, reason, library)"},
    {"gpu_open", core_gpu_open, METH_O, "gpu_open(dirs) -> path of the libcupti loaded"},
    {"active", core_active, METH_NOARGS, "active() -> bool: the core records (any session)."},
    {"active_session", core_active_session, METH_NOARGS,
     "active_session() -> the Session (xsp.profile) recording in this process, or None."},
    {"_after_fork_child", core_after_fork_child, METH_NOARGS,
     "For os.register_at_fork(after_in_child=...): the inherited profile goes inert."},
    {"begin", (PyCFunction)(void (*)(void))core_begin, METH_FASTCALL,
     "begin(level, kind, name, name2=None, a0=-1) -> key (a0: a model or module span's "
     "site, ModuleSites)"},
    {"end", (PyCFunction)(void (*)(void))core_end, METH_FASTCALL, "end(key, flags=0)"},
    {"now", core_now, METH_NOARGS, "now() -> int: CLOCK_MONOTONIC (or the fake clock) in ns."},
    {"set_fake_clock", core_set_fake_clock, METH_VARARGS,
     "set_fake_clock(start, step): tests only; step 0 restores the real clock."},
    {"fake_clock_on", core_fake_clock_on, METH_NOARGS,
     "fake_clock_on() -> bool: whether set_fake_clock installed the fake clock."},
    {"_set_release", core_set_release, METH_O,
     "_set_release(early): tests and benchmarks only; False makes the next stops keep the\n"
     "whole event log until the trace is made (the reference for stop's memory), True (the\n"
     "default) gives each chunk back as soon as stop has read it."},
    {"fake_clock_signal", core_fake_clock_signal, METH_VARARGS,
     "fake_clock_signal(at, signum): tests only; the fake clock's reading that returns at\n"
     "first raises signal signum in the thread that reads it (once; at 0 disarms;\n"
     "set_fake_clock disarms it).  RuntimeError without the fake clock."},
    {"load", core_load, METH_O, "load(path) -> TraceData"},
    {"loads", core_loads, METH_O, "loads(bytes) -> TraceData"},
    {"merge", core_merge, METH_VARARGS,
     "merge(inputs, id_keys) -> TraceData: the spans of several traces on one clock.\n\n"
     "inputs: (TraceData, rank, o0, t0, o1, t1) each: its times move by the offset line\n"
     "o0 + (o1 - o0) * (t - t0) / (t1 - t0); id_keys: the attribute keys whose values are\n"
     "span ids.  docs/distributed.md."},
    {"read_kineto", core_read_kineto, METH_O,
     "read_kineto(chunks) -> TraceData: Kineto's trace JSON, fed as the bytes-like objects\n"
     "that iterating chunks gives (csrc/io/kjson.h).  TraceFormatError with .event (an index\n"
     "into traceEvents) and .offset (a byte offset into the text), each None when unknown."},
    {"write_kineto", core_write_kineto, METH_VARARGS,
     "write_kineto(fd, flags, tracedata, head, tail, cols): Kineto's trace JSON to fd, the GIL\n"
     "released (csrc/io/kinetow.h; xsp/formats/kineto.py makes the columns)."},
    {"write_chrome", core_write_chrome, METH_VARARGS,
     "write_chrome(fd, flags, tracedata, head, tail, cols): Chrome trace-event JSON to fd, the\n"
     "GIL released (csrc/io/chromew.h; xsp/formats/chrome.py makes the columns)."},
    {"write_otlp", core_write_otlp, METH_VARARGS,
     "write_otlp(fd, flags, tracedata, head, tail, cols): OTLP/JSON spans to fd, the GIL\n"
     "released (csrc/io/otlpw.h; xsp/formats/otlp.py makes the columns).\n\n"
     "flags of the three writers: 1 gzip, 2 writeback hints for a file to be fsynced\n"
     "(csrc/io/jsonw.h)."},
    {"encode_otlp", core_encode_otlp, METH_VARARGS,
     "encode_otlp(tracedata, resource, scope, cols, lo, hi) -> bytes: spans lo..hi-1 as one\n"
     "OTLP/HTTP protobuf request, the GIL released (csrc/io/otlppb.h; xsp/formats/otlp.py makes\n"
     "the resource, the scope and the columns)."},
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

/* A new exception class xsp.<name> (base, doc) into *slot and the module. 0, or -1. */
static int new_error(PyObject *m, PyObject **slot, const char *name, PyObject *base,
                     const char *doc)
{
    char full[64];
    snprintf(full, sizeof full, "xsp.%s", name);
    *slot = PyErr_NewExceptionWithDoc(full, doc, base, NULL);
    return *slot && PyModule_AddObjectRef(m, name, *slot) == 0 ? 0 : -1;
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
    PyObject *so_type = PyType_FromModuleAndSpec(m, &xsp_sessionopts_spec, NULL);
    int so_rc = so_type ? PyModule_AddType(m, (PyTypeObject *)so_type) : -1;
    Py_XDECREF(so_type);
    if (so_rc < 0)
        return -1;
    PyObject *si_type = PyType_FromModuleAndSpec(m, &xsp_sites_spec, NULL);
    int si_rc = si_type ? PyModule_AddType(m, (PyTypeObject *)si_type) : -1;
    Py_XDECREF(si_type);
    if (si_rc < 0)
        return -1;
    PyObject *ps_type = PyType_FromModuleAndSpec(m, &xsp_pystack_spec, NULL);
    int ps_rc = ps_type ? PyModule_AddType(m, (PyTypeObject *)ps_type) : -1;
    Py_XDECREF(ps_type);
    if (ps_rc < 0)
        return -1;
    PyObject *sess_type = PyType_FromModuleAndSpec(m, &xsp_session_spec, NULL);
    st->session_type = (PyTypeObject *)sess_type;
    if (!sess_type || PyModule_AddType(m, st->session_type) < 0)
        return -1;
    if (new_error(m, &st->format_error, "TraceFormatError", PyExc_ValueError,
                  "A trace file is truncated, corrupt or not an xsp trace; .path is the file, "
                  ".offset the byte offset.")
        || new_error(m, &st->profiler_error, "ProfilerError", PyExc_RuntimeError,
                     "A profiling session cannot start or stop as asked.")
        || new_error(m, &st->level_error, "LevelUnavailableError", st->profiler_error,
                     "A requested level cannot be recorded in this build or on this machine.")
        || new_error(m, &st->gpu_error, "GPUError", st->level_error,
                     "Level G cannot be recorded: CUPTI, the device or the build.")
        || new_error(m, &st->active_error, "SessionActiveError", st->profiler_error,
                     "Another profile is recording: xsp records one session at a time.")
        || new_error(m, &st->state_error, "SessionStateError", st->profiler_error,
                     "The profile is not in a state for this call: already run, not recording, "
                     "or called from another thread than the one that started it.")
        || new_error(m, &st->source_error, "SourceError", st->profiler_error,
                     "A recorder (the torch callback, the module wrapper) refused to start; "
                     "nothing was left installed.")
        || new_error(m, &st->lost_error, "TraceLostError", st->profiler_error,
                     "Stop could not make the trace (out of memory while merging); recording "
                     "stopped all the same.")
        || new_error(m, &st->warning, "XSPWarning", PyExc_UserWarning,
                     "Something was recorded differently from what was asked."))
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
    Py_VISIT(st->session_type);
    Py_VISIT(st->format_error);
    Py_VISIT(st->profiler_error);
    Py_VISIT(st->level_error);
    Py_VISIT(st->gpu_error);
    Py_VISIT(st->active_error);
    Py_VISIT(st->state_error);
    Py_VISIT(st->source_error);
    Py_VISIT(st->lost_error);
    Py_VISIT(st->warning);
    return 0;
}

static int core_clear(PyObject *m)
{
    xsp_core_state *st = PyModule_GetState(m);
    Py_CLEAR(st->tracedata_type);
    Py_CLEAR(st->session_type);
    Py_CLEAR(st->format_error);
    Py_CLEAR(st->profiler_error);
    Py_CLEAR(st->level_error);
    Py_CLEAR(st->gpu_error);
    Py_CLEAR(st->active_error);
    Py_CLEAR(st->state_error);
    Py_CLEAR(st->source_error);
    Py_CLEAR(st->lost_error);
    Py_CLEAR(st->warning);
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

struct PyModuleDef xsp_core_module_def = {
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
    return PyModuleDef_Init(&xsp_core_module_def);
}
