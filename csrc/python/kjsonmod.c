/*
 * kjsonmod.c: _core.read_kineto(chunks) over io/kjson.h.  The text is parsed with the GIL
 * released (a chunk at a time); the Python side (xsp/formats/kineto.py) reads the file, inflates gzip
 * and enforces the size cap, so that a bomb is stopped between two chunks.
 */
#include "kjsonmod.h"

#include "../io/kjson.h"
#include "tracedata.h"

/* Raises format_error for the reader's error (MemoryError for allocation failure). */
static PyObject *raise(PyObject *format_error, const xsp_kjson_error *e)
{
    if (e->nomem)
        return PyErr_NoMemory();
    PyObject *exc = PyObject_CallFunction(format_error, "s", e->msg);
    if (!exc)
        return NULL;
    PyObject *ev = e->event >= 0 ? PyLong_FromLongLong(e->event) : Py_NewRef(Py_None);
    PyObject *off = e->offset >= 0 ? PyLong_FromLongLong(e->offset) : Py_NewRef(Py_None);
    if (ev && off && PyObject_SetAttrString(exc, "event", ev) == 0
        && PyObject_SetAttrString(exc, "offset", off) == 0)
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_XDECREF(ev);
    Py_XDECREF(off);
    Py_DECREF(exc);
    return NULL;
}

PyObject *xsp_py_read_kineto(PyObject *format_error, PyTypeObject *tracedata_type,
                             PyObject *chunks)
{
    PyObject *it = PyObject_GetIter(chunks);
    if (!it)
        return NULL;
    xsp_kjson *r = xsp_kjson_new();
    if (!r) {
        Py_DECREF(it);
        return PyErr_NoMemory();
    }
    PyObject *item, *result = NULL;
    int rc = 0;
    while (rc == 0 && (item = PyIter_Next(it)) != NULL) {
        Py_buffer view;
        if (PyObject_GetBuffer(item, &view, PyBUF_SIMPLE) < 0) {
            Py_DECREF(item);
            goto out;
        }
        Py_BEGIN_ALLOW_THREADS
        rc = xsp_kjson_feed(r, view.buf, (size_t)view.len);
        Py_END_ALLOW_THREADS
        PyBuffer_Release(&view);
        Py_DECREF(item);
    }
    if (PyErr_Occurred())
        goto out;
    if (rc == 0) {
        xsp_trace *t;
        Py_BEGIN_ALLOW_THREADS
        t = xsp_kjson_finish(r);
        Py_END_ALLOW_THREADS
        if (t) {
            result = xsp_tracedata_wrap(tracedata_type, t);
            goto out;
        }
    }
    raise(format_error, xsp_kjson_err(r));
out:
    Py_DECREF(it);
    xsp_kjson_free(r);
    return result;
}
