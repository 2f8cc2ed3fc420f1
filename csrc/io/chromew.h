/*
 * chromew.h: the spans of a trace as Chrome trace events (chrome://tracing, Perfetto UI),
 * streamed through jsonw.h; the writer of xsp/formats/chrome.py.
 *
 * One complete ("X") event per span on its thread's track, ts relative to t0 (the earliest
 * start) in microseconds with three decimals from integer ns, cat "<level>.<kind>", args the
 * span's attributes (an attribute named id or parent as attr.id, attr.parent, with one more
 * "attr." while that name is taken too) then "id" and "parent"; then an intra-op flow per
 * spawn link.  The header (otherData, process and thread names) and the tail come as text
 * from Python.
 */
#ifndef XSP_CHROMEW_H
#define XSP_CHROMEW_H

#include <stdint.h>

#include "../core/trace.h"
#include "jsonw.h"

typedef struct xsp_chrome_cols {
    uint64_t t0;                /* ts = (start - t0) / 1000 */
    const int64_t *track_pid;   /* per track (t->n_threads): the pid its events go under */
    uint32_t n_spawn;           /* intra-op flows: (span, the op that spawned it) */
    const int64_t *spawn_i;
    const int64_t *spawn_j;
} xsp_chrome_cols;

/* Writes the events of every span of t, then the flows, to w, each preceded by ",\n" (the
 * header ends after an event).  Failures are sticky in w; cannot fail otherwise.  t and cols
 * are not modified. */
void xsp_chrome_write_events(xsp_jsonw *w, const xsp_trace *t, const xsp_chrome_cols *cols);

#endif
