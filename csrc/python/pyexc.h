/*
 * pyexc.h: exceptions as values, for the C code that runs inside someone else's call (the
 * session's sources, the call-site table) and must save and restore the exception in flight.
 * Static inline: each extension file that includes it gets its own copy; no state.
 */
#ifndef XSP_PYEXC_H
#define XSP_PYEXC_H

#include <Python.h>

/* The exception set, taken out (normalised, with its traceback), or NULL when none is set.
 * Cannot fail. */
static inline PyObject *xsp_take_exc(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    if (!t)
        return NULL;
    PyErr_NormalizeException(&t, &v, &tb);
    if (tb && v)
        PyException_SetTraceback(v, tb);
    Py_XDECREF(t);
    Py_XDECREF(tb);
    return v;
#endif
}

/* Sets exc (stolen) as the exception in flight; NULL does nothing.  Cannot fail. */
static inline void xsp_give_exc(PyObject *exc)
{
    if (!exc)
        return;
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, PyException_GetTraceback(exc));
#endif
}

#endif
