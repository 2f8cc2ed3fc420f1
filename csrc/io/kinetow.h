/*
 * kinetow.h: the spans of a trace as Kineto's trace events (torch.profiler's JSON), streamed
 * through jsonw.h; the writer of xsp/formats/kineto.py (docs/format.md, "Kineto's JSON").
 *
 * The split with Python: what needs a view of the whole trace and is cheap as numpy columns
 * (External ids, the enclosing op and module of each span, module names, steps, track pids,
 * the re-parsed JSON of list attributes) is computed there and passed in as
 * the columns below; this file writes one event per span from them and the span's attributes,
 * applying the per-kind rules of the Python reference writer (kineto._reference_events)
 * exactly, then the flows.  The header (top-level keys, process and thread names) and the tail
 * come as text.
 */
#ifndef XSP_KINETOW_H
#define XSP_KINETOW_H

#include <stddef.h>
#include <stdint.h>

#include "../core/trace.h"
#include "jsonw.h"

typedef struct xsp_bytes {
    const char *s;          /* the bytes, or NULL for none */
    size_t n;               /* their length */
} xsp_bytes;

/* Step spans as written (kineto._steps_written). */
enum xsp_kstep_how { XSP_KSTEP_STEP = 0, XSP_KSTEP_SETUP = 1, XSP_KSTEP_LEFTOVER = 2,
                     XSP_KSTEP_PRIMING = 3 };

typedef struct xsp_kineto_cols {
    int64_t base_ns;            /* baseTimeNanoseconds: ts = (t - base_ns) / 1000 */
    /* per track (t->n_threads) */
    const int64_t *track_pid;   /* the pid its events go under */
    const uint64_t *track_tid;  /* the tid its events go under */
    const int64_t *fwd_rank;    /* Fwd thread id of a backward function whose forward op ran
                                 * on this track (the thread's rank among CPU tids, else 0) */
    /* per span (t->n_spans) */
    const int64_t *ext;         /* External id (0: none) */
    const int64_t *near_cpu;    /* the nearest enclosing CPU event (op, ...), -1 for none */
    const int64_t *near_mod;    /* the nearest enclosing module or Python function, -1 */
    const int64_t *name_sid;    /* the name written: a string id of t, or n_strings + k for
                                 * extra[k] (module and step names) */
    const int64_t *mod_id;      /* Python module id of a model or module span */
    const xsp_bytes *extra;     /* n_extra strings beyond t's */
    uint32_t n_extra;
    /* steps, by span id, increasing */
    uint32_t n_steps;
    const int64_t *step_id;
    const int64_t *step_how;    /* enum xsp_kstep_how */
    const int64_t *step_j;      /* the iteration of a "step" */
    const uint64_t *step_s0;    /* its window: start and end ns */
    const uint64_t *step_e0;
    xsp_bytes step_why[4];      /* the sentence of each other how (index by how) */
    /* leveled latencies, by span id, increasing: int64 values or (lev_float) doubles */
    uint32_t n_lev;
    const int64_t *lev_id;
    const int64_t *lev_int;
    const double *lev_float;    /* NULL when the values are int64 */
    /* JSON text of string values that are JSON lists (k.<arg>[] and the input attributes),
     * by string id, increasing; a NULL text: not JSON */
    uint32_t n_json;
    const uint32_t *json_sid;
    const xsp_bytes *json_text;
    /* intra-op flows: (span, the op that spawned it on another thread) */
    uint32_t n_spawn;
    const int64_t *spawn_i;
    const int64_t *spawn_j;
} xsp_kineto_cols;

/* Writes the events of every span of t (each preceded by ",\n" when comma, else the first
 * without), its memory instants (kmemw.h), then the ac2g, fwdbwd and intra-op flows, to w.  Returns 0,
 * or -1 on allocation failure (w's text then incomplete).  Failures of w itself are sticky in
 * w.  t and cols are not modified; the columns must have the lengths said above. */
int xsp_kineto_write_events(xsp_jsonw *w, const xsp_trace *t, const xsp_kineto_cols *cols,
                            int comma);

#endif
