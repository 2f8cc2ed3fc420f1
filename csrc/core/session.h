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

/* Ends the current step span and begins the next ("step#N").  Returns 0, or -1 when the session
 * is not RECORDING or has no M spans (nothing changed).  Cannot fail otherwise. */
int xsp_session_step(xsp_session *s);

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

/* xsp_session_detach, then xsp_session_finish. */
int xsp_session_stop(xsp_session *s, xsp_trace **out, char *err, size_t errlen);

/* The state (enum xsp_session_state). Cannot fail. */
int xsp_session_state(const xsp_session *s);

/* Steps ended so far (the step() calls). Cannot fail. */
uint32_t xsp_session_steps(const xsp_session *s);

/* Forgets a session in a forked child without touching anything the parent owns: the core
 * already dropped its recording (pthread_atfork, recorder.c); the sources are not stopped
 * (their state belongs to the parent's threads), the state becomes DONE.  Cannot fail. */
void xsp_session_forget(xsp_session *s);

/* Frees the session and releases its sources' ctx.  A session still RECORDING is stopped first
 * (its trace discarded).  Accepts NULL. */
void xsp_session_free(xsp_session *s);

#endif
