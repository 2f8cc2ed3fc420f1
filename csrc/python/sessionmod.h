/*
 * sessionmod.h: xsp._core.Session, one profiling session as a Python object (see sessionmod.c).
 */
#ifndef XSP_SESSIONMOD_H
#define XSP_SESSIONMOD_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../include/xsp_api.h"

/* The type's spec (a base type: xsp.profile subclasses it). */
extern PyType_Spec xsp_session_spec;

/* xsp._core's module definition (coremod.c): sessions find the module state through it. */
extern struct PyModuleDef xsp_core_module_def;

/* The core's function table handed to the torch shim (coremod.c). Cannot fail. */
const xsp_core_api *xsp_py_core_api(void);

/* The profile recording in this process, or None: a new reference. Cannot fail. */
PyObject *xsp_py_active_session(void);

/* os.register_at_fork(after_in_child=...): makes the inherited profile inert in the child (puts
 * Module.__call__ back, detaches the torch callback, forgets the core session without touching
 * the parent's state).  Returns None; cannot fail. */
PyObject *xsp_py_after_fork_child(void);

#endif
