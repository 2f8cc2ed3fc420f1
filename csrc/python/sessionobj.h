/*
 * sessionobj.h: the state of an xsp._core.Session, shared by the three files that make the
 * type: sessionmod.c (the type, its sources, start and stop), sessionsched.c (a profile with a
 * step schedule: one core session per cycle) and sessionfork.c (a forked child's inert copy).
 *
 * Python sees none of this (sessionmod.h is the type's face); everything here is internal to
 * xsp._core, with hidden visibility.  Every function declared here is called with the GIL held
 * (or, in a free-threaded build, by the one thread that started the profile, as xsp.profile's
 * methods require), on a Session or an instance of a subclass.
 */
#ifndef XSP_SESSIONOBJ_H
#define XSP_SESSIONOBJ_H

#include "sessionmod.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "../core/session.h"
#include "../core/trace.h"
#include "tracedata.h"

typedef struct xsp_pysession {
    PyObject_HEAD
    xsp_session *sess;          /* the core session, made at start; owned */
    PyObject *module_type;      /* nn.Module (strong), or NULL: no module wrapper */
    PyObject *wrapper;          /* the ModuleCall installed as module_type.__call__ (strong);
                                 * it also counts hook_errors and holds the call sites */
    PyObject *orig;             /* the __call__ it replaced, set at start (strong) */
    PyObject *torch;            /* xsp._torch's capsule (strong), or NULL: no level L ops */
    unsigned int torch_opts;    /* XSP_TORCH_INPUTS | XSP_TORCH_MEMORY for the shim's attach */
    PyObject *sync;             /* callable run at stop, returns None or a message, or NULL */
    PyObject *names;            /* dict native tid -> thread name that Python fills as it
                                 * sees threads, read at stop (strong), or NULL */
    PyObject *side;             /* dict native tid -> [[shapes, mem0, delta], ...], or NULL */
    PyObject *span_attrs;       /* xsp/producers/dynamo.py's attribute tables, read at stop
                                 * (strong), or NULL */
    PyObject *stack;            /* with_stack's PyStack (strong), or NULL: source "stack" */
    PyObject *meta;             /* dict of meta added at stop (strong), or NULL */
    PyObject *where;            /* str: where the profile was made, for messages */
    PyObject *data;             /* the TraceData after stop, else NULL */
    PyObject *pending;          /* a non-Exception raised in a stop callout, re-raised after */
    char *region;               /* region span name (owned), NULL: no M spans */
    char levels[8];             /* "MLG" subset */
    xsp_config core;            /* the recorder's config */
    uint64_t gpu_max;           /* GPU store cap */
    int gpu, gpu_share, gpu_fallback;   /* G asked for; share CUPTI; fall back to M/L */
    int forked;                 /* set in a forked child: inert */
    int set_up;                 /* _setup has run */
    pid_t pid;                  /* process that started the session */
    unsigned long thread;       /* thread that started it (PyThread ident) */
    /* a step schedule (sched.active != 0), see sessionsched.c */
    xsp_schedule sched;         /* the schedule; all zero: none */
    PyObject *on_ready;         /* on_trace_ready, called with self once a cycle's trace is
                                 * stored, or NULL (strong) */
    PyObject *before_start;     /* called with no arguments before a start (the clock
                                 * exchange of a distributed job), or NULL (strong) */
    PyObject *after_stop;       /* called with no arguments after the stop that stored the
                                 * trace, or NULL (strong) */
    PyObject *traces;           /* every cycle's TraceData in order, a list, when on_ready is
                                 * NULL; else NULL (strong) */
    uint64_t step_no;           /* the current step: step() calls since the start */
    uint64_t cyc;               /* the cycle recording now (or last) */
    int ran;                    /* the block was entered: a profile runs once */
    int running;                /* inside the block: the active profile, recording or not */
    int busy;                   /* a step() or stop is changing cycles (a callout may run):
                                 * step and stop are refused */
} xsp_pysession;

/* The one profile recording in the process (a scheduled one for its whole block, recording or
 * between cycles), a strong reference, or NULL.  Protected by xsp_pysession_lock (the module
 * declares it does not need the GIL); in a forked child, sessionfork.c re-initialises the lock
 * and clears the pointer before any other thread exists. */
extern pthread_mutex_t xsp_pysession_lock;
extern xsp_pysession *xsp_pysession_active;

/* xsp._core's module state, found through self's type: the state, or NULL with an exception
 * set (a type not made from the module's spec). */
xsp_core_state *xsp_pysession_state(PyObject *self);

/* Makes and starts a core session with self's sources (self->sess RECORDING afterwards):
 * returns 0, or -1 with an exception set, self->sess NULL and nothing left installed.
 * numbered: a schedule's cycle, whose steps are numbered from first and cut at cut
 * (xsp_session_set_steps).  When G cannot start and self->gpu_fallback is set, falls back to
 * M and L with a warning, and self->levels says what is recorded. */
int xsp_pysession_start_core(xsp_pysession *self, int numbered, uint64_t first, uint64_t cut);

/* Writes everything the finished trace t says besides its spans (self's meta, hook_errors,
 * how the block ended, from block_exc: NULL or None when it did not raise; thread names, the
 * side table, the call sites, torch.compile's attributes, xsp's own cost), from the objects
 * _setup was given (SessionOptions): no attribute is looked up and no Python code runs; a
 * failure loses a detail, never the trace.  t stays the caller's. */
void xsp_pysession_decorate(xsp_pysession *self, xsp_trace *t, PyObject *block_exc);

/* The trace is lost (why): sets TraceLostError, or, when an interrupt arrived during stop
 * (self->pending), raises that interrupt with a note saying so (self->pending is then NULL).
 * Always returns -1. */
int xsp_pysession_lost(xsp_pysession *self, xsp_core_state *st, const char *why);

/* self is no longer the active profile (a new one may start); nothing when it was not.
 * Cannot fail. */
void xsp_pysession_release(xsp_pysession *self);

/* Turns the module wrapper off and puts the original nn.Module.__call__ back when the wrapper
 * is still the class attribute.  Runs no Python code.  Returns 0, or -1 with an exception set
 * (MemoryError).  self->module_type must be set. */
int xsp_pysession_unwrap(xsp_pysession *self);

/* The torch shim's table (xsp_api.h) of a profile with level L ops (self->torch set, checked
 * by _setup).  Cannot fail. */
static inline const xsp_torch_api *xsp_pysession_torch(xsp_pysession *self)
{
    return PyCapsule_GetPointer(self->torch, XSP_TORCH_API_CAPSULE);
}

#endif
