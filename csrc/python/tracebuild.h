/*
 * tracebuild.h: _core.build(spans, threads, meta, counters), a trace from Python data.
 */
#ifndef XSP_TRACEBUILD_H
#define XSP_TRACEBUILD_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* build(spans, threads, meta, counters) with args the call's tuple: a new TraceData of
 * tracedata_type, or NULL with TypeError / ValueError naming the entry (see coremod.c's
 * docstring of build for the shapes), MemoryError.  Nothing is kept on failure. */
PyObject *xsp_py_build(PyTypeObject *tracedata_type, PyObject *args);

#endif
