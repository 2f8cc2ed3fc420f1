/*
 * session.h: one profiling session, started and stopped whole.
 *
 * A session is everything one `with xsp.profile(...)` block turns on: the core's recording
 * buffers (recorder.h), the M-level region and step spans, and a list of sources, each a
 * recorder living elsewhere that the session starts and stops (the GPU's CUPTI session, the
 * torch shim's RecordFunction callback, the nn.Module.__call__ wrapper, the device
 * synchronisation before the GPU flush).  The core knows a source only by its four functions,
 * so it stays free of Python, torch and CUPTI.
 *
 * Start and stop are one call each and all or nothing.  Start: the span hooks (at most one
 * source has them), the core, the early sources (in order), the region span, the late sources
 * (in order), the first step span; when anything fails, everything done so far is undone in
 * reverse (the stop of each started source that has a start function; the hooks go in and out
 * with the core's start and stop, under its lock) and the session is left FAILED with nothing
 * installed.  Stop: the step span ends, the
 * late sources stop (in reverse), the region ends, the early sources stop (in reverse), the core
 * stops and merges (each source's merge joins its records to the CPU spans), the hooks go, and
 * the meta every trace carries is set (levels, region, steps, and each source's error, as
 * "<name>_error").  Stop cannot fail to stop: whatever goes wrong, nothing is left running; it
 * fails only to produce a trace (out of memory while merging).
 *
 * Why early and late: the GPU source starts before the region begins so that the region's own
 * external correlation id is pushed to a running CUPTI (work launched outside any op then still
 * finds the region), and its flush runs after the region ends (the region does not carry it).
 * The torch callback and the module wrapper start after the region begins and stop before it
 * ends, so that everything they record on the profiling thread nests under it.
 *
 * Stop comes in two halves for callers that hold a lock or an interpreter lock the early
 * sources and the merge do not need: detach (step, late sources, region: quick) and finish (early
 * sources, merge: long).  xsp_session_stop runs both.
 *
 * Schedules: a torch.profiler-style step schedule (xsp_schedule, below) runs as one session per
 * cycle.  The caller starts a session where a cycle's warmup begins, numbers its steps from the
 * global step number and marks its first active step (xsp_session_set_steps), ends it with the
 * cycle's last active step (xsp_session_end_step, then stop), and cuts the warmup off the
 * finished trace (xsp_session_cut).  Between cycles no session exists, so nothing records.
 *
 * Threads: a session is driven from one thread at a time (the caller serialises start, step
 * and stop; the CPython binding does it with the GIL).  Recording itself, from any thread, goes
 * through the core's hot path and never touches the session object.
 */
#ifndef XSP_SESSION_H
#define XSP_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "recorder.h"
#include "trace.h"

#define XSP_SESSION_MAX_SOURCES 8

/* A recorder the session starts and stops.  Every function gets ctx. */
typedef struct xsp_source {
    const char *name;                 /* short, in messages and meta keys: "gpu", "torch" */
    int early;                        /* nonzero: started before the region, stopped after it */
    const xsp_span_hooks *hooks;      /* installed before the core starts, or NULL; at most
                                       * one source of a session has them */
    /* Starts recording.  0, or -1 with a one-line message in err; on failure the source has
     * nothing left running.  NULL: nothing to start. */
    int (*start)(void *ctx, char *err, size_t errlen);
    /* Stops recording; cannot fail to stop.  Writes a one-line message into err (else leaves
     * it empty) when something went wrong on the way; the session keeps it as meta
     * "<name>_error".  NULL: nothing to stop. */
    void (*stop)(void *ctx, char *err, size_t errlen);
    /* Merges this source's records into t at the core's stop (see xsp_merge_extra): 0, or -1
     * on allocation failure.  NULL: the source has no records of its own. */
    int (*merge)(xsp_trace *t, xsp_resolve_fn resolve, void *rctx, const xsp_clock_map *map,
                 void *ctx);
    /* Frees ctx; called once by xsp_session_free.  NULL: nothing to free. */
    void (*release)(void *ctx);
    void *ctx;                        /* the source's own state; owned by the session once
                                       * added (released by release) */
} xsp_source;

typedef struct xsp_session xsp_session;

enum xsp_session_state {
    XSP_SESSION_NEW = 0,        /* made, not started */
    XSP_SESSION_RECORDING = 1,  /* started */
    XSP_SESSION_DETACHED = 2,   /* stop's first half done: nothing records into the core */
    XSP_SESSION_DONE = 3,       /* stopped (a trace was made, or the merge failed) */
    XSP_SESSION_FAILED = 4      /* start failed: nothing was left running */
};

/* A new session (state NEW).  core: the recorder's config (copied).  region: the region span's
 * name, or NULL for a session without M spans (no region, no steps); copied.  levels: the meta
 * "levels" text (copied), e.g. "ML".  Returns NULL on allocation failure. */
xsp_session *xsp_session_new(const xsp_config *core, const char *region, const char *levels);

/* Adds a source (copied; ctx becomes the session's, released by xsp_session_free, also when
 * this call fails).  Only in state NEW.  Returns 0, or -1 with a message in err: not NEW, too
 * many sources (XSP_SESSION_MAX_SOURCES), a second source with hooks. */
int xsp_session_add_source(xsp_session *s, const xsp_source *src, char *err, size_t errlen);

/* Starts everything, in the order of the file comment.  Only from NEW.  Returns 0 (state
 * RECORDING), or -1 with "<source name>: <its message>" (or the core's message) in err and
 * state FAILED, nothing left installed or running.  A second session while one records fails
 * in the core ("already active"). */
int xsp_session_start(xsp_session *s, char *err, size_t errlen);

/* Numbers this session's steps for a schedule's cycle (see xsp_schedule below).  first: the
 * number of the step begun at start, "step#<first>"; each step() begins the next number.  A
 * session numbered so keeps its first step span even when step() is never called (only an empty
 * step open at stop is removed, as always), and counts its steps without M spans too.  cut: the
 * number of the first step to keep (a cycle's first active step); when cut > first, the step()
 * that begins step cut reads the clock between the end of the step before it and the begin of
 * step cut: where xsp_session_cut cuts the finished trace.  Only in state NEW.  Returns 0, or -1
 * when not NEW (nothing changed). */
int xsp_session_set_steps(xsp_session *s, uint64_t first, uint64_t cut);

/* Ends the current step span and begins the next ("step#N", N counted from the first step
 * number, xsp_session_set_steps).  Returns 0, or -1 when the session is not RECORDING, has no
 * step open (xsp_session_end_step), or has no M spans and is not numbered (nothing changed).
 * Cannot fail otherwise. */
int xsp_session_step(xsp_session *s);

/* Ends the current step span as step() does (kept even when empty: it was ended by a step()
 * call), without beginning another; until the stop, the session records outside any step (a
 * schedule's cycle ends so: its last active step ends, then the session stops).  Counts as a
 * step ended (xsp_session_steps).  Returns 0, or -1 when the session is not RECORDING or has no
 * step open (nothing changed).  Cannot fail otherwise. */
int xsp_session_end_step(xsp_session *s);

/* Stop's first half: the state becomes DETACHED (so a stop or step called back from a source's
 * stop is refused), ends the step span (elided when no step() was called, kept when steps were
 * marked only if something was recorded in it), stops the late sources in reverse, ends the
 * region.  From RECORDING (else does nothing).  Cannot fail. */
void xsp_session_detach(xsp_session *s);

/* Stop's second half: stops the early sources in reverse, stops the core and merges, removes the
 * hooks, sets the meta.  From RECORDING (detaching first) or DETACHED.  Returns 0 with a new
 * trace in *out (owned by the caller), or -1 with a message in err and *out NULL (not started,
 * already stopped, or out of memory while merging).  Either way nothing is left running and the
 * state is DONE (unless it was not RECORDING or DETACHED: then nothing changed). */
int xsp_session_finish(xsp_session *s, xsp_trace **out, char *err, size_t errlen);

/* The schedule's cut of t, the trace this numbered session's finish made (the caller may have
 * added to it since, e.g. attributes matched to every span recorded): when the cut step began
 * (xsp_session_set_steps), xsp_trace_drop_before(t, the time read then, {"fwd_op", "api"})
 * removes what the steps before it (the warmup) recorded and clips what reaches across (the
 * region: XSP_FLAG_CLIPPED); counter "schedule.unlinked" (0 when none; set in every numbered
 * session's trace) counts the span-id attributes that lost their target; meta "steps" is set to
 * the step spans left.  When the cut step never began, only the counter and "steps" are set.
 * Only for a numbered session in state DONE.  Returns 0, or -1 with a message in err: not
 * numbered or not DONE (t unchanged), or out of memory (t keeps its spans; the counter and
 * "steps" may have been set).  The caller keeps t. */
int xsp_session_cut(xsp_session *s, xsp_trace *t, char *err, size_t errlen);

/* xsp_session_detach, then xsp_session_finish. */
int xsp_session_stop(xsp_session *s, xsp_trace **out, char *err, size_t errlen);

/* The state (enum xsp_session_state). Cannot fail. */
int xsp_session_state(const xsp_session *s);

/* Steps ended so far (the step() calls). Cannot fail. */
uint32_t xsp_session_steps(const xsp_session *s);

/* A step schedule, as torch.profiler.schedule's.  Steps are counted by the step() calls: step n
 * is the work between the n-th and the (n+1)-th call, step 0 the work before the first.  The
 * first skip_first steps are not recorded; then come cycles of wait steps (not recorded),
 * warmup steps (recorded, then cut off: the recorder warms up, names are interned, module names
 * mapped) and active steps (recorded and kept), repeat cycles of them (0: for ever).  The
 * schedule only computes; the CPython binding drives sessions by it (one per cycle, started
 * where a cycle's warmup begins, numbered and cut with xsp_session_set_steps, stopped when its
 * last active step ends). */
typedef struct xsp_schedule {
    uint32_t wait;        /* steps not recorded at the start of each cycle */
    uint32_t warmup;      /* steps recorded and cut off, after the wait */
    uint32_t active;      /* steps recorded and kept, after the warmup; at least 1 */
    uint32_t repeat;      /* cycles, 0: for ever */
    uint32_t skip_first;  /* steps not recorded before the first cycle */
} xsp_schedule;

enum xsp_sched_action {
    XSP_SCHED_NONE = 0,    /* not recorded: skipped, waiting, or after the last cycle */
    XSP_SCHED_WARMUP = 1,  /* recorded and cut off */
    XSP_SCHED_ACTIVE = 2,  /* recorded and kept, not the cycle's last */
    XSP_SCHED_LAST = 3     /* the cycle's last active step: its end ends the cycle */
};

/* What step n is under sc (enum xsp_sched_action); NONE for every step when sc->active is 0.
 * Cannot fail. */
int xsp_schedule_action(const xsp_schedule *sc, uint64_t n);

/* 1 when a cycle's recording begins with step n: n is recorded (WARMUP, ACTIVE or LAST) and
 * step n - 1 is not part of the same recording (n is 0, or step n - 1 is NONE or LAST).  Cannot
 * fail. */
int xsp_schedule_starts(const xsp_schedule *sc, uint64_t n);

/* The cycle (0, 1, ...) that step n falls in, counting from the end of skip_first (0 for the
 * skipped steps); and the number of cycle c's first active step.  Cannot fail. */
uint64_t xsp_schedule_cycle(const xsp_schedule *sc, uint64_t n);
uint64_t xsp_schedule_first_active(const xsp_schedule *sc, uint64_t c);

/* Forgets a session in a forked child without touching anything the parent owns: the core
 * already dropped its recording (pthread_atfork, recorder.c); the sources are not stopped
 * (their state belongs to the parent's threads), the state becomes DONE.  Cannot fail. */
void xsp_session_forget(xsp_session *s);

/* Frees the session and releases its sources' ctx.  A session still RECORDING is stopped first
 * (its trace discarded).  Accepts NULL. */
void xsp_session_free(xsp_session *s);

#endif
