/*
 * modsites.h: xsp._core.ModuleSites, the call sites of recorded module calls, from which the
 * model and module spans get their "source" and "call_site" attributes.
 *
 * See modsites.c for the design.  coremod.c turns the spec into a heap type at exec.
 */
#ifndef XSP_MODSITES_H
#define XSP_MODSITES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "../core/trace.h"

/* The type's spec. */
extern PyType_Spec xsp_sites_spec;

/* 1 when o is a ModuleSites, else 0.  Cannot fail. */
int xsp_sites_is(PyObject *o);

/* The index of the site of a call of a module of type tp made by the code running in frame f
 * (borrowed), added to the table when new: the value a module wrapper passes as its span's
 * a0.  Returns -1 when f is NULL (no Python frame called the module) or a new site cannot be
 * stored (out of memory: counted, reported at the next attach).  Runs no Python code,
 * allocates nothing for a site already seen, leaves no exception set.  sites must be a
 * ModuleSites. */
int64_t xsp_sites_lookup(PyObject *sites, PyFrameObject *f, PyTypeObject *tp);

/* At stop, on the finished trace before it is handed out: every model and module span of t
 * whose integer attribute "site" (core/merge.c: its a0) names a site of the table gets
 * attributes "source" (file:line of the forward of the module's class) and "call_site"
 * (file:line of the call), in that order, in place of "site"; the strings are made and
 * interned once per site the trace uses.  A span whose site has no forward to show (not a
 * Python function) gets "call_site" only; a "site" the table does not hold (only in a trace
 * that was not recorded with this table) becomes call_site "?", counted in the trace's
 * counter "source.unresolved"; sites that could not be stored while recording (out of memory)
 * are counted in "source.lost".  Both counters are added only when nonzero.  Runs no Python
 * code and leaves no exception set.  Returns 0, or -1 with a one-line message in err (out of
 * memory: t may then hold some spans rewritten and none of "call_site"; no span is left with
 * both "site" and another's attribute). */
int xsp_sites_attach(PyObject *sites, xsp_trace *t, char *err, size_t errlen);

#endif
