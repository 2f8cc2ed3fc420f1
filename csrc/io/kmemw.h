/*
 * kmemw.h: torch.profiler's "[memory]" instants for a span's memory sums (profile_memory),
 * the part of the Kineto writer (kinetow.c) that turns xsp's per-span sums back into the
 * allocator events torch writes.
 *
 * A span with mem.<dev>.{allocs, alloc_bytes, frees, freed_bytes, peak, total} (dev cpu, cuda,
 * other) gets, at the first ns of its own time (xsp_kmem_instant), one instant per allocation
 * (its bytes split evenly, the remainder on the first) with "Total Allocated" rising to the
 * span's peak, then one per free, the last leaving its total: counts, bytes, peak and final
 * total are the span's exactly (the order of its events within it is not kept: xsp keeps
 * sums).  The rules are those of the Python reference writer (kineto._memory_events).
 */
#ifndef XSP_KMEMW_H
#define XSP_KMEMW_H

#include <stdint.h>

#include "../core/trace.h"
#include "jsonw.h"

#define XSP_KMEM_NDEV 3     /* cpu, cuda, other */
#define XSP_KMEM_NFIELD 6   /* allocs, alloc_bytes, frees, freed_bytes, peak, total */

/* The name of device d and field f ("cpu", "allocs"). Cannot fail. */
const char *xsp_kmem_dev(unsigned d);
const char *xsp_kmem_field(unsigned f);

/* Children lists of t's spans, in id order: first[i] the first child of span i, next[c] the
 * next child of c's parent, UINT32_MAX for none; both arrays of t->n_spans, filled here.
 * Cannot fail. */
void xsp_kmem_children(const xsp_trace *t, uint32_t *first, uint32_t *next);

/* The first ns of span i's own time: its start, or the first instant none of its children
 * covers (its end - 1 when they cover all of it; its start when it lasts 0 ns), so that a
 * reader folding each memory event into the innermost span open at its time gives it back to
 * span i.  Cannot fail. */
uint64_t xsp_kmem_instant(const xsp_trace *t, const uint32_t *first, const uint32_t *next,
                          uint32_t i);

/* Writes the instants of one span: mem[d * XSP_KMEM_NFIELD + f] its attribute for device d
 * and field f (NULL when absent; a device is skipped unless all six are ints, the counts and
 * bytes >= 0 and 0 < allocs + frees <= 2**20), on track (pid, tid) at ts = at_ns - base_ns,
 * each preceded by ",\n".  Cannot fail (w's failures are sticky). */
void xsp_kmem_write(xsp_jsonw *w, const xsp_attr *const *mem, int64_t pid, uint64_t tid,
                    uint64_t at_ns, int64_t base_ns);

#endif
