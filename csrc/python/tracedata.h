/*
 * tracedata.h: xsp._core.TraceData, the Python object that owns a merged C trace.
 *
 * The Python package (xsp/values/trace.py) wraps it: it views the span array through the buffer
 * protocol (read-only, field offsets from span_layout(), see tracedata.c), pulls the
 * attribute columns out once as bytes, and never reaches into the C struct otherwise.
 */
#ifndef XSP_TRACEDATA_H
#define XSP_TRACEDATA_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../core/trace.h"

typedef struct {
    PyObject_HEAD
    xsp_trace *trace;   /* owned; never NULL after construction; never changed after it */
} xsp_TraceDataObject;

/* The type's spec, turned into a heap type by the module's exec slot. */
extern PyType_Spec xsp_tracedata_spec;

/* Wraps t (ownership passes to the new object, also on failure, where t is freed) in a new
 * TraceData of type tp. Returns a new reference, or NULL with an exception set. */
PyObject *xsp_tracedata_wrap(PyTypeObject *tp, xsp_trace *t);

/* Conversions from Python values shared with coremod.c's build().  Each returns 0 on success,
 * XSP_PY_TYPE when o has the wrong type or XSP_PY_RANGE when its value is out of range (no
 * exception set: the caller raises, naming where the value came from), or -1 with an exception
 * set (MemoryError and the like). */
enum { XSP_PY_TYPE = 1, XSP_PY_RANGE = 2 };

/* An int (bool included, no other type) in 0..hi into *out. */
int xsp_py_u64(PyObject *o, uint64_t hi, uint64_t *out);

/* An attribute value into *a (a->key untouched): int or bool (XSP_PY_RANGE outside int64)
 * as XSP_ATTR_INT, float as XSP_ATTR_FLOAT, str as XSP_ATTR_STR interned into t->strings. */
int xsp_py_attr_value(xsp_trace *t, PyObject *o, xsp_attr *a);

/* The UTF-8 bytes of str s, encoded with surrogateescape (the inverse of how strings leave the
 * trace, so any name read from a trace goes back in unchanged).  A new reference, or NULL with
 * an exception set.  s must be a str. */
PyObject *xsp_py_utf8(PyObject *s);

/* Interns str s (as xsp_py_utf8 encodes it) into t->strings: its id, or UINT32_MAX with an
 * exception set (the table then unchanged). */
uint32_t xsp_py_intern(xsp_trace *t, PyObject *s);

/* Sets metadata key (a C string) to value: int or bool, float, or str.  Returns 0, XSP_PY_TYPE
 * for another type (trace unchanged), or -1 with an exception set: OverflowError for an int
 * outside int64, ValueError for a str holding a NUL character, MemoryError. */
int xsp_py_set_meta(xsp_trace *t, const char *key, PyObject *value);

/* The module state, shared with coremod.c. */
typedef struct {
    PyTypeObject *tracedata_type;   /* xsp._core.TraceData */
    PyTypeObject *session_type;     /* xsp._core.Session */
    PyObject *format_error;         /* xsp.TraceFormatError (a ValueError) */
    PyObject *profiler_error;       /* xsp.ProfilerError (a RuntimeError): the base of these */
    PyObject *level_error;          /* xsp.LevelUnavailableError: a level cannot be recorded */
    PyObject *gpu_error;            /* xsp.GPUError (a LevelUnavailableError): G cannot */
    PyObject *active_error;         /* xsp.SessionActiveError: another session records */
    PyObject *state_error;          /* xsp.SessionStateError: not recording, already run, the
                                     * wrong thread */
    PyObject *source_error;         /* xsp.SourceError: a recorder refused to start */
    PyObject *lost_error;           /* xsp.TraceLostError: stop could not make the trace */
    PyObject *warning;              /* xsp.XSPWarning (a UserWarning) */
} xsp_core_state;

#endif
