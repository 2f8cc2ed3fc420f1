/*
 * jsonwmod.h: _core.write_kineto(), _core.write_chrome() and _core.write_otlp(), the bindings
 * of the JSON exporters (io/kinetow.h, io/chromew.h, io/otlpw.h over io/jsonw.h), and
 * _core.encode_otlp(), the OTLP protobuf encoder's (io/otlppb.h).
 */
#ifndef XSP_JSONWMOD_H
#define XSP_JSONWMOD_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* write_kineto(fd, gzip, tracedata, head, tail, cols), write_chrome(...) and write_otlp(...)
 * (the same arguments): head (bytes), the span events, tail (bytes) written to fd (an open file
 * descriptor, not closed; gzip-compressed when gzip is true) with the GIL released.  cols: a
 * dict of the columns of xsp_kineto_cols / xsp_chrome_cols / xsp_otlp_cols by field name
 * (numpy arrays, C-contiguous, of the field's type and length; lists of bytes or None).
 * Returns None, or NULL with OSError (the write's errno), MemoryError, TypeError or
 * ValueError (a column of the wrong type or length, naming it) raised. */
PyObject *xsp_py_write_kineto(PyTypeObject *tracedata_type, PyObject *args);
PyObject *xsp_py_write_chrome(PyTypeObject *tracedata_type, PyObject *args);
/* write_otlp's columns: span_base and offset (ints, 0 to 2**64-1), trace_hi and trace_lo
 * (uint64, at least one id), trace_ix (int32, one per span, each an index into the ids, or
 * empty: all 0), lev_id (int64, increasing) and lev_val (float64); ValueError for an index
 * past the ids, no id, or span ids that would pass 2**64-1. */
PyObject *xsp_py_write_otlp(PyTypeObject *tracedata_type, PyObject *args);

/* encode_otlp(tracedata, resource, scope, cols, lo, hi): spans lo to hi - 1 of the trace as one
 * OTLP/HTTP request body (an ExportTraceServiceRequest, bytes), encoded with the GIL released;
 * resource and scope: the serialized Resource and InstrumentationScope messages (bytes); cols:
 * as write_otlp's (lev_id strictly increasing).  Returns the bytes, or NULL with MemoryError,
 * TypeError or ValueError (a column as write_otlp says, or lo..hi not a range of the spans)
 * raised. */
PyObject *xsp_py_encode_otlp(PyTypeObject *tracedata_type, PyObject *args);

#endif
