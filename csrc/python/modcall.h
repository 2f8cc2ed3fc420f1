/*
 * modcall.h: xsp._core.ModuleCall, the nn.Module.__call__ wrapper of levels M and L, in C.
 *
 * See modcall.c for the design.  coremod.c turns the spec into a heap type at exec.
 */
#ifndef XSP_MODCALL_H
#define XSP_MODCALL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

/* The type's spec. */
extern PyType_Spec xsp_modulecall_spec;

/* 1 when o is a ModuleCall, else 0. Cannot fail. */
int xsp_modulecall_is(PyObject *o);

/* For the session (o must be a ModuleCall; none of these fails or runs Python code):
 * set_on turns recording on (1) or makes the wrapper a plain forwarder (0); set_orig makes it
 * wrap orig (a new reference is taken and the old one released: the old one is a __call__ that
 * was the class attribute when the profile was made, which may be freed here; functions run no
 * finaliser); errors is the failures counted in its bookkeeping, in C and reported by the
 * Python helpers (count_error()), for meta hook_errors; sites is its ModuleSites (borrowed:
 * the wrapper keeps it for its life), or NULL when it was made without one. */
void xsp_modulecall_set_on(PyObject *o, int on);
void xsp_modulecall_set_orig(PyObject *o, PyObject *orig);
long long xsp_modulecall_errors(PyObject *o);
PyObject *xsp_modulecall_sites(PyObject *o);

/* A new key for a span begun from Python or from the module wrapper: bit 55 set, so it never
 * equals an object address (the torch shim's keys, below 2^47), and below 2^56 as the core
 * requires.  Cannot fail; thread-safe. */
uint64_t xsp_py_new_key(void);

#endif
