/*
 * tmerge.h: one trace from several processes' traces (a distributed job's ranks), each shifted
 * onto a common clock, for xsp.distributed.merge (docs/distributed.md).
 *
 * The merged trace holds every input span once, sorted by (shifted) start with parents before
 * their children on ties, so it satisfies xsp_trace_check's order.  Names, keys and string
 * values are re-interned into the output's table; each input's tracks are copied with their
 * names prefixed "rank R: "; the attributes whose int values are span ids (id_keys: fwd_op,
 * api) are renumbered; a root region span gets an int attribute "rank"; counters are summed.
 * Meta is left to the caller.
 */
#ifndef XSP_TMERGE_H
#define XSP_TMERGE_H

#include <stddef.h>
#include <stdint.h>

#include "trace.h"

/* One input: a trace and how to move its times onto the common clock, t + offset(t) with
 *   offset(t) = o0 + (o1 - o0) * (t - t0) / (t1 - t0)      (o0 when t1 == t0),
 * rounded to the nearest ns (halves away from zero).  The end of a span moves by the offset at its end, and never
 * before its start. */
typedef struct xsp_merge_in {
    const xsp_trace *trace;  /* borrowed; not changed */
    int64_t rank;            /* written as attribute "rank" on its root region spans */
    double o0, t0, o1, t1;   /* the offset line, ns */
} xsp_merge_in;

/* Merges n >= 1 inputs.  id_keys: n_keys attribute keys whose int values are span ids of the
 * same trace (renumbered; a value that is no span id of its trace is dropped, and counted in
 * counter "merge.unlinked").  Returns a new trace owned by the caller (xsp_trace_free), or NULL
 * with a one-line message in err: out of memory, more spans or attributes than 32-bit ids
 * hold, or an offset that moves a span before time 0 or past 2^64 ns.  The inputs are never
 * changed. */
xsp_trace *xsp_trace_merge(const xsp_merge_in *in, uint32_t n, const char *const *id_keys,
                           uint32_t n_keys, char *err, size_t errlen);

#endif
