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

/* A new key for a span begun from Python or from the module wrapper: bit 55 set, so it never
 * equals an object address (the torch shim's keys, below 2^47), and below 2^56 as the core
 * requires.  Cannot fail; thread-safe. */
uint64_t xsp_py_new_key(void);

#endif
