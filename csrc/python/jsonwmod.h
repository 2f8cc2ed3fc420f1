/*
 * jsonwmod.h: _core.write_kineto() and _core.write_chrome(), the bindings of the JSON
 * exporters (io/kinetow.h, io/chromew.h over io/jsonw.h).
 */
#ifndef XSP_JSONWMOD_H
#define XSP_JSONWMOD_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* write_kineto(fd, gzip, tracedata, head, tail, cols) and write_chrome(fd, gzip, tracedata,
 * head, tail, cols): head (bytes), the span events, tail (bytes) written to fd (an open file
 * descriptor, not closed; gzip-compressed when gzip is true) with the GIL released.  cols: a
 * dict of the columns of xsp_kineto_cols / xsp_chrome_cols by field name (numpy arrays,
 * C-contiguous, of the field's type and length; lists of bytes or None).  Returns None, or
 * NULL with OSError (the write's errno), MemoryError, TypeError or ValueError (a column of the
 * wrong type or length, naming it) raised. */
PyObject *xsp_py_write_kineto(PyTypeObject *tracedata_type, PyObject *args);
PyObject *xsp_py_write_chrome(PyTypeObject *tracedata_type, PyObject *args);

#endif
