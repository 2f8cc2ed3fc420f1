/*
 * tracedata.h: xsp._core.TraceData, the Python object that owns a merged C trace.
 *
 * The Python package (xsp/trace.py) wraps it: it pulls columns out once as bytes (turned into
 * numpy arrays without copying again) and never reaches into the C struct otherwise.
 */
#ifndef XSP_TRACEDATA_H
#define XSP_TRACEDATA_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../core/trace.h"

typedef struct {
    PyObject_HEAD
    xsp_trace *trace;   /* owned; never NULL after construction */
} xsp_TraceDataObject;

/* The type's spec, turned into a heap type by the module's exec slot. */
extern PyType_Spec xsp_tracedata_spec;

/* Wraps t (ownership passes to the new object, also on failure, where t is freed) in a new
 * TraceData of type tp. Returns a new reference, or NULL with an exception set. */
PyObject *xsp_tracedata_wrap(PyTypeObject *tp, xsp_trace *t);

/* The module state, shared with coremod.c. */
typedef struct {
    PyTypeObject *tracedata_type;   /* xsp._core.TraceData */
    PyObject *format_error;         /* xsp._core.TraceFormatError (a ValueError) */
    PyObject *gpu_error;            /* xsp._core.GPUError (a RuntimeError) */
} xsp_core_state;

#endif
