/*
 * tracefinish.h: finishing a session's trace from Python objects (sessionmod.c's stop): thread
 * names, the record_shapes / profile_memory side table, extra meta.  Each takes the trace
 * before it is wrapped as a TraceData (after that it never changes), runs no Python code,
 * and clears any exception it meets: a failure loses that detail, never the trace.
 */
#ifndef XSP_TRACEFINISH_H
#define XSP_TRACEFINISH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../core/trace.h"

/* Names the CPU tracks of t from a dict {native tid (int): name (str)}, the one Python fills
 * as it sees threads (xsp/producers/profiler.py); other entries and a non-dict are skipped.
 * Cannot fail visibly. */
void xsp_py_name_threads(xsp_trace *t, PyObject *names);

/* The module wrapper's side table (its enter() records, xsp/producers/profiler.py),
 * {native tid: [[shapes|None, mem0, delta|None], ...]}: per thread, the k-th record belongs to
 * the k-th model or module span of that thread in start order; shapes become attribute "shapes", delta "mem_bytes".  A thread whose counts
 * differ (spans lost to the memory cap) gets none, and their number goes into meta
 * "attrs_unmatched".  Returns 0, or -1 on allocation failure (t keeps its spans; no exception
 * set). */
int xsp_py_attach_side(xsp_trace *t, PyObject *side);

/* Meta from a dict {str: int|float|str}; entries of another type are skipped.  Cannot fail
 * visibly. */
void xsp_py_meta_from(xsp_trace *t, PyObject *meta);

/* Span attributes from the tables of xsp/producers/dynamo.py (SessionOptions.span_attrs), an
 * exact dict
 *   {"events": [(t_lo, t_hi, name, {key: value}), ...],
 *    "regions": [(prefix, key, {scope: {name: [value, ...]}}, meta_prefix), ...]}
 * where every container is of the exact built-in type and every value an exact str, int or
 * float, or None (anything else is skipped, so no Python code runs).
 *   events: each span named name that starts in [t_lo, t_hi] (session clock) gets the
 *     attributes of the dict (the compile spans that the Dynamo callbacks began);
 *   regions: a span whose name starts with prefix opens a region whose scope is the rest of
 *     its name ("Torch-Compiled Region: 0/0" -> "0/0"); inside it, a top span (a child of the
 *     region, or of a top span whose name is not in the scope's table: a wrapper such as
 *     "CompiledFunction") named name is the k-th top span of that name in its region, in start
 *     order, and gets attribute key = table[scope][name][k].  Counted in meta
 *     <meta_prefix>.attached, .unmatched (the region ran more spans of a name than the table
 *     lists) and .unknown (the value is None: torch kept no source for that call), set when a
 *     region with a table was found.
 * A span gets each key once (the first value given).  Returns 0, or -1 when an attribute could
 * not be added (out of memory, or a span already has that key: the trace keeps its spans and
 * the attributes added before; no exception set). */
int xsp_py_attach_tables(xsp_trace *t, PyObject *spec);

#endif
