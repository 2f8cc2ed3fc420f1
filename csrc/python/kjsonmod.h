/*
 * kjsonmod.h: _core.read_kineto(), the binding of the streaming Kineto JSON reader
 * (io/kjson.h).
 */
#ifndef XSP_KJSONMOD_H
#define XSP_KJSONMOD_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* read_kineto(chunks): feeds each bytes-like object that iterating chunks gives to a new
 * reader, then builds the trace.  Returns a new TraceData (of tracedata_type), or NULL with
 * format_error(msg) raised (its .event and .offset set: an index into traceEvents and a byte
 * offset into the text, each None when not known), MemoryError, or whatever iterating chunks
 * raised.  Holds no reference to chunks afterwards. */
PyObject *xsp_py_read_kineto(PyObject *format_error, PyTypeObject *tracedata_type,
                             PyObject *chunks);

#endif
