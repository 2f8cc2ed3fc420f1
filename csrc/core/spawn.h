/*
 * spawn.h: ties the spans of PyTorch's intra-op pool threads to the op that spawned them
 * (runs at stop, in the merge, step 5).
 *
 * An op's kernel that calls at::parallel_for runs its body on the calling thread (OpenMP's
 * thread 0) and on the pool's threads; ops the body calls (at::select, at::empty, ...) are
 * recorded on each thread by the global RecordFunction callback, so on a pool thread they are
 * roots: nothing on that thread encloses them.  The pool does not carry the caller's
 * thread-local state, so nothing at recording time names the spawner; the merge finds it by
 * time: parallel_for returns only when every thread is done, so the spawner encloses the
 * pool span on its own thread.
 *
 * The rule, for each root on an intra-op thread, over the other (non-pool) CPU threads:
 *   - on each such thread, the innermost op (op, backward or scope span) whose interval holds
 *     the root's whole interval;
 *   - from it, up past ops whose name is also the name of a span on a pool thread: those are
 *     the spawner's own share of the loop on thread 0 (the same body, the same ops), not the
 *     spawner;
 *   - one thread with such an op: the root's parent is that op (linked); none: the region
 *     adopts it (unlinked); more than one (several threads in parallel ops at once): the region
 *     adopts it (ambiguous).
 * An op the spawner runs both in and outside the loop under the same name is passed over (its
 * caller is taken): a documented limit of naming by time.
 */
#ifndef XSP_SPAWN_H
#define XSP_SPAWN_H

#include <stdint.h>

#include "trace.h"

/* What xsp_spawn_link did. */
typedef struct xsp_spawn_counts {
    uint64_t linked;     /* pool roots given their spawning op as parent */
    uint64_t unlinked;   /* pool roots with no enclosing op on another thread */
    uint64_t ambiguous;  /* pool roots enclosed by ops on more than one other thread */
} xsp_spawn_counts;

/* Links the roots of the intra-op threads of t (pool[k] != 0: trace thread k is one; n_pool
 * entries, threads past them are not pool threads) to their spawning ops, by the rule above,
 * and adopts every other root of a thread other than the region's, which starts before the
 * region ends, as a child of the region span (the first span of kind region; none: only the
 * links are made).  Keeps the trace's invariants (a parent's id is below its child's: a
 * spawner found with a higher id is not taken, the root counts as unlinked).  Returns 0, or
 * -1 when memory for the per-thread index runs out (then no root was linked; the region
 * adoption is still done and counts->unlinked holds every pool root).  counts may be NULL. */
int xsp_spawn_link(xsp_trace *t, const uint8_t *pool, uint32_t n_pool, xsp_spawn_counts *counts);

#endif
