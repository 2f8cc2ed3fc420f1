/*
 * pystack.h: xsp._core.PyStack, the Python function calls of a profile made with
 * with_stack=True, recorded as spans of kind "python" so that every op nests under the Python
 * functions that were running when it ran (its stack).
 *
 * See pystack.c for the design.  coremod.c turns the spec into a heap type at exec;
 * sessionmod.c starts and stops it as the session's source "stack".
 */
#ifndef XSP_PYSTACK_H
#define XSP_PYSTACK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The type's spec. */
extern PyType_Spec xsp_pystack_spec;

/* 1 when o is a PyStack, else 0.  Cannot fail. */
int xsp_pystack_is(PyObject *o);

/* Installs o's profile function (o must be a PyStack) on the calling thread (and, where
 * CPython has PyEval_SetProfileAllThreads, on every thread), and makes threads started from
 * now on install it (threading's profile hook).  Runs no Python code.  Returns 0, or -1 with
 * a message in err when a profile function (sys.setprofile: cProfile, another profiler) is
 * already installed on the calling thread: then nothing changed. */
int xsp_pystack_start(PyObject *o, char *err, size_t errlen);

/* Turns o off: the profile function is removed from the calling thread (every thread where
 * PyEval_SetProfileAllThreads exists; elsewhere each other thread removes it at its next
 * event, recording nothing more) and threading's profile hook is put back as start found it.
 * Runs no Python code; cannot fail (a failure to restore the hook is written to err). */
void xsp_pystack_stop(PyObject *o, char *err, size_t errlen);

#endif
