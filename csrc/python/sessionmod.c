/*
 * sessionmod.c: xsp._core.Session, one profiling session as a Python object; xsp.profile
 * subclasses it.
 *
 * The guarantee it exists for: start (__enter__) and stop (__exit__) are each one C call, so an
 * asynchronous exception (KeyboardInterrupt from SIGINT, or any exception a signal handler or
 * a trace function raises) lands before or after them, never in between.  CPython runs signal
 * handlers only between bytecodes, and a C method runs none of its own; the with statement calls
 * __enter__ and __exit__ directly (BEFORE_WITH, and the exception table covers the block from
 * the instruction after it), so once __enter__ returns, __exit__ runs.
 *
 * Start builds the core session (core/session.h) with the sources of this profile, in order:
 *   gpu (early)   CUPTI, through gpu/gpu_source.c
 *   sync (late)   a Python callable run at stop that synchronises the CUDA devices, so that
 *                 the GPU flush gets every record; its message becomes meta "sync_error"
 *   modules       installs the nn.Module.__call__ wrapper (a ModuleCall, or the Python wrapper
 *                 of record_shapes/profile_memory, which reads [on, orig] from a list) by a
 *                 plain type attribute store, and at stop turns it off and puts the original
 *                 back when it is still the class attribute
 *   torch         attaches the shim's RecordFunction callback (xsp._torch's capsule, xsp_api.h)
 *   stack         with_stack: the Python function spans' profile function (pystack.h)
 * and starts it whole, or raises with nothing installed.  Stop stops it whole, then finishes the
 * trace in C before anyone sees it: meta (the session's, this profile's, hook_errors, how the
 * block ended), thread names, and the shapes and memory attributes of module spans.  The trace
 * comes back as a TraceData that never changes (tracedata.c).
 *
 * Stop runs Python code only for level G (the sync callable); it is a callout: an Exception it
 * raises becomes a message in the trace, anything else (KeyboardInterrupt, SystemExit: a second
 * Ctrl-C during stop) is kept and raised once stop is complete and the trace stored, with meta
 * "interrupted" saying so.  Thread names come from threading._active, read in C.  A Ctrl-C during the merge itself (long for
 * large traces, run without the GIL) is delivered by CPython after __exit__ returns.  If the
 * merge runs out of memory the trace is lost, and the exception says so (TraceLostError, or a
 * note on the pending interrupt).
 *
 * A profile made with a step schedule (_setup's schedule=) runs one core session per cycle,
 * started and stopped by step() calls in C, and delivers each cycle's trace before its one
 * Python callout (on_trace_ready); see "schedules" below.
 *
 * Fork: a forked child inherits the running profile but not its recording (the core drops it in
 * its pthread_atfork handler); _after_fork_child, registered by xsp/profiler.py with
 * os.register_at_fork, puts Module.__call__ back and detaches the torch callback in the child.
 * The child's copy is inert: step() and stop do nothing, there is no trace, and one warning per
 * process says so.
 *
 * g_active is the one profile recording in the process (a scheduled one for its whole block,
 * recording or between cycles), protected by g_lock (the module declares it does not need the
 * GIL).
 */
#include "pyexc.h"
#include "sessionmod.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/clock.h"
#include "../core/session.h"
#include "gpumod.h"
#include "modcall.h"
#include "modsites.h"
#include "pystack.h"
#include "tracedata.h"
#include "tracefinish.h"

typedef struct {
    PyObject_HEAD
    xsp_session *sess;          /* the core session, made at start; owned */
    PyObject *module_type;      /* nn.Module (strong), or NULL: no module wrapper */
    PyObject *wrapper;          /* installed as module_type.__call__ (strong) */
    PyObject *orig;             /* the __call__ it replaced, set at start (strong) */
    PyObject *cell;             /* the Python wrapper's list [on, orig] (strong), or NULL */
    PyObject *torch;            /* xsp._torch's capsule (strong), or NULL: no level L ops */
    unsigned int torch_opts;    /* XSP_TORCH_INPUTS | XSP_TORCH_MEMORY for the shim's attach */
    PyObject *sync;             /* callable run at stop, returns None or a message, or NULL */
    PyObject *names;            /* dict native tid -> thread name, or NULL */
    PyObject *threads;          /* threading._active, {ident: Thread}, read at stop, or NULL */
    PyObject *side;             /* dict native tid -> [[shapes, mem0, delta], ...], or NULL */
    PyObject *stack;            /* with_stack's PyStack (strong), or NULL: source "stack" */
    PyObject *hook_owner;       /* object whose int attribute _errors counts failures, or NULL */
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
    /* a step schedule (sched.active != 0), see "schedules" below */
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
} SessionObject;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static SessionObject *g_active = NULL;   /* strong; protected by g_lock */
static int g_fork_warned = 0;            /* one warning per process; with the GIL */

static xsp_core_state *state_of(PyObject *self)
{
    PyObject *mod = PyType_GetModuleByDef(Py_TYPE(self), &xsp_core_module_def);
    return mod ? PyModule_GetState(mod) : NULL;
}

/* -- exceptions as values ------------------------------------------------------------------ */


/* "Type: message" of exc into buf (NUL-terminated). */
static void exc_text(PyObject *exc, char *buf, size_t len)
{
    buf[0] = '\0';
    if (!exc || !len)
        return;
    PyObject *s = PyObject_Str(exc);
    const char *m = s ? PyUnicode_AsUTF8(s) : NULL;
    snprintf(buf, len, "%s%s%s", Py_TYPE(exc)->tp_name, m && m[0] ? ": " : "", m ? m : "");
    if (!m)
        PyErr_Clear();
    Py_XDECREF(s);
}

/* After a failed Python call during stop: an Exception becomes text in err (when err) and is
 * cleared; anything else is kept in self->pending (the first one; later ones are dropped). */
static void absorb(SessionObject *self, char *err, size_t errlen)
{
    PyObject *exc = xsp_take_exc();
    if (!exc)
        return;
    if (PyObject_TypeCheck(exc, (PyTypeObject *)PyExc_Exception)) {
        if (err)
            exc_text(exc, err, errlen);
        Py_DECREF(exc);
    } else if (!self->pending) {
        self->pending = exc;
    } else {
        Py_DECREF(exc);
    }
}

/* -- the Python-side sources ---------------------------------------------------------------- */

static PyObject *type_dict(PyObject *type)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *d = PyType_GetDict((PyTypeObject *)type);   /* new reference */
    Py_XDECREF(d);                                        /* the type keeps it */
    return d;
#else
    return ((PyTypeObject *)type)->tp_dict;
#endif
}

/* Turns the wrapper off (it forwards from now on) and puts the original __call__ back when the
 * wrapper is still the class attribute (another tool that wrapped it after us keeps its own).
 * Runs no Python code (a type attribute store on nn.Module, whose metaclass is type).  Returns
 * 0, or -1 with an exception set (MemoryError). */
static int unwrap(SessionObject *self)
{
    if (xsp_modulecall_is(self->wrapper))
        xsp_modulecall_set_on(self->wrapper, 0);
    if (self->cell && PyList_SetItem(self->cell, 0, Py_NewRef(Py_False)) < 0)
        return -1;
    PyObject *d = type_dict(self->module_type);
    PyObject *cur = d ? PyDict_GetItemString(d, "__call__") : NULL;   /* borrowed */
    if (cur == self->wrapper && self->orig)
        return PyObject_SetAttrString(self->module_type, "__call__", self->orig);
    return 0;
}

static int modules_start(void *ctx, char *err, size_t errlen)
{
    SessionObject *self = ctx;
    PyObject *d = type_dict(self->module_type);
    PyObject *orig = d ? PyDict_GetItemString(d, "__call__") : NULL;
    if (!orig) {
        snprintf(err, errlen, "nn.Module has no __call__ of its own to wrap");
        return -1;
    }
    Py_XSETREF(self->orig, Py_NewRef(orig));
    if (xsp_modulecall_is(self->wrapper)) {
        xsp_modulecall_set_orig(self->wrapper, orig);
        xsp_modulecall_set_on(self->wrapper, 1);
    }
    if (self->cell && (PyList_SetItem(self->cell, 1, Py_NewRef(orig)) < 0
                       || PyList_SetItem(self->cell, 0, Py_NewRef(Py_True)) < 0))
        goto fail;
    if (PyObject_SetAttrString(self->module_type, "__call__", self->wrapper) < 0)
        goto fail;
    return 0;
fail:;
    PyObject *exc = xsp_take_exc();
    exc_text(exc, err, errlen);
    Py_XDECREF(exc);
    if (xsp_modulecall_is(self->wrapper))
        xsp_modulecall_set_on(self->wrapper, 0);
    return -1;
}

static void modules_stop(void *ctx, char *err, size_t errlen)
{
    SessionObject *self = ctx;
    if (unwrap(self) < 0) {
        PyObject *exc = xsp_take_exc();
        exc_text(exc, err, errlen);
        Py_XDECREF(exc);
    }
}

static const xsp_torch_api *torch_api(SessionObject *self)
{
    return PyCapsule_GetPointer(self->torch, XSP_TORCH_API_CAPSULE);
}

static int torch_start(void *ctx, char *err, size_t errlen)
{
    SessionObject *self = ctx;
    return torch_api(self)->attach2(xsp_py_core_api(), self->torch_opts, err, errlen);
}

static void torch_stop(void *ctx, char *err, size_t errlen)
{
    const xsp_torch_api *api = torch_api(ctx);
    api->detach();
    if (api->attached())    /* torch threw inside removeCallback: say so, in meta torch_error */
        snprintf(err, errlen, "the RecordFunction callback could not be removed; later L "
                 "profiles in this process will be refused");
}

static int stack_start(void *ctx, char *err, size_t errlen)
{
    return xsp_pystack_start(((SessionObject *)ctx)->stack, err, errlen);
}

static void stack_stop(void *ctx, char *err, size_t errlen)
{
    xsp_pystack_stop(((SessionObject *)ctx)->stack, err, errlen);
}

static void sync_stop(void *ctx, char *err, size_t errlen)
{
    SessionObject *self = ctx;
    PyObject *r = PyObject_CallNoArgs(self->sync);
    if (!r) {
        absorb(self, err, errlen);
        return;
    }
    if (PyUnicode_Check(r)) {
        const char *m = PyUnicode_AsUTF8(r);
        if (m)
            snprintf(err, errlen, "%s", m);
        else
            PyErr_Clear();
    }
    Py_DECREF(r);
}

/* A new core session with this profile's sources (gpu: with the GPU one).  NULL with an
 * exception set. */
static xsp_session *make_session(SessionObject *self, int gpu, const char *levels)
{
    xsp_core_state *st = state_of((PyObject *)self);
    if (!st)
        return NULL;
    xsp_session *s = xsp_session_new(&self->core, self->region, levels);
    if (!s) {
        PyErr_NoMemory();
        return NULL;
    }
    char err[1024];
    if (gpu) {
        xsp_source src;
        if (xsp_pygpu_source(&src, self->gpu_max, self->gpu_share, err, sizeof err) != 0) {
            xsp_session_free(s);
            PyErr_Format(st->gpu_error, "level G cannot be recorded: %s", err);
            return NULL;
        }
        if (xsp_session_add_source(s, &src, err, sizeof err) != 0)
            goto fail;
    }
    if (self->sync && (gpu || !self->gpu)) {   /* a G session that fell back to M and L
                                                 * does without the device synchronisation */
        xsp_source src = {.name = "sync", .stop = sync_stop, .ctx = self};
        if (xsp_session_add_source(s, &src, err, sizeof err) != 0)
            goto fail;
    }
    if (self->module_type) {
        xsp_source src = {.name = "modules", .start = modules_start, .stop = modules_stop,
                          .ctx = self};
        if (xsp_session_add_source(s, &src, err, sizeof err) != 0)
            goto fail;
    }
    if (self->torch) {
        xsp_source src = {.name = "torch", .start = torch_start, .stop = torch_stop,
                          .ctx = self};
        if (xsp_session_add_source(s, &src, err, sizeof err) != 0)
            goto fail;
    }
    if (self->stack) {      /* last: the Python function spans open inside everything else */
        xsp_source src = {.name = "stack", .start = stack_start, .stop = stack_stop,
                          .ctx = self};
        if (xsp_session_add_source(s, &src, err, sizeof err) != 0)
            goto fail;
    }
    return s;
fail:
    xsp_session_free(s);
    PyErr_Format(st->source_error, "%s", err);
    return NULL;
}

/* -- start --------------------------------------------------------------------------------- */

/* Makes and starts a core session with this profile's sources: 0 with self->sess RECORDING, or
 * -1 with an exception set, self->sess NULL and nothing left installed.  numbered: a schedule's
 * cycle, its steps numbered from first and cut at cut (xsp_session_set_steps).  When G cannot
 * start, gpu_fallback falls back to M and L (a warning), and self->levels then says what is
 * recorded; a later cycle asks for what the first one got. */
static int start_core(SessionObject *self, int numbered, uint64_t first, uint64_t cut)
{
    xsp_core_state *st = state_of((PyObject *)self);
    if (!st)
        return -1;
    char err[1024], levels[sizeof self->levels];
    memcpy(levels, self->levels, sizeof levels);
    int gpu = self->gpu && strchr(levels, 'G') != NULL;
    for (;;) {
        self->sess = make_session(self, gpu, levels);
        if (!self->sess)
            return -1;
        if (numbered)
            xsp_session_set_steps(self->sess, first, cut);   /* NEW: cannot fail */
        if (xsp_session_start(self->sess, err, sizeof err) == 0)
            break;
        xsp_session_free(self->sess);
        self->sess = NULL;
        int gpu_failed = gpu && strncmp(err, "gpu: ", 5) == 0;
        if (!gpu_failed) {
            PyErr_Format(strstr(err, "already active") ? st->active_error : st->source_error,
                         "xsp: %s", err);
            return -1;
        }
        if (!self->gpu_fallback) {
            PyErr_Format(st->gpu_error, "level G cannot be recorded: %s; profile with "
                         "levels='ML', or pass gpu_fallback=True to fall back to M and L",
                         err + 5);
            return -1;
        }
        /* fall back: nothing runs now, so a warning that raises leaves nothing behind */
        char *g = strchr(levels, 'G');
        if (g)
            memmove(g, g + 1, strlen(g));
        if (PyErr_WarnFormat(st->warning, 1, "level G cannot be recorded: %s; recording levels "
                             "%s only (gpu_fallback=True)", err + 5, levels) < 0)
            return -1;
        gpu = 0;
    }
    memcpy(self->levels, levels, sizeof levels);   /* what is recorded, once it records */
    return 0;
}

/* Starts recording the cycle whose first recorded step is self->step_no: 0, or -1 with an
 * exception set (nothing records). */
static int start_cycle(SessionObject *self)
{
    self->cyc = xsp_schedule_cycle(&self->sched, self->step_no);
    return start_core(self, 1, self->step_no, xsp_schedule_first_active(&self->sched, self->cyc));
}

/* Starts the profile: 0, or -1 with an exception set and nothing left installed.  A scheduled
 * profile becomes the active one for the whole block and records only from its first cycle on
 * (at once when step 0 is recorded). */
static int session_start(SessionObject *self)
{
    xsp_core_state *st = state_of((PyObject *)self);
    if (!st)
        return -1;
    if (self->sess || self->data || self->ran) {
        PyErr_SetString(st->state_error, "this xsp.profile has already run; create a new one");
        return -1;
    }
    pthread_mutex_lock(&g_lock);
    SessionObject *other = g_active;
    if (other) {
        PyObject *where = Py_NewRef(other->where ? other->where : Py_None);
        pthread_mutex_unlock(&g_lock);
        PyErr_Format(st->active_error, "another xsp.profile is already recording (started at "
                     "%S); xsp records one session at a time: stop it before starting this one",
                     where);
        Py_DECREF(where);
        return -1;
    }
    g_active = self;        /* claimed: a profile started on another thread now fails above */
    Py_INCREF(self);
    pthread_mutex_unlock(&g_lock);

    if (self->sched.active) {
        self->step_no = 0;
        if (xsp_schedule_starts(&self->sched, 0) && start_cycle(self) < 0)
            goto fail;
        self->ran = self->running = 1;
    } else if (start_core(self, 0, 0, 0) < 0) {
        goto fail;
    }
    self->pid = getpid();
    self->thread = PyThread_get_thread_ident();
    return 0;
fail:
    if (self->pending) {    /* no callout runs at start; should one ever, its interrupt wins */
        PyErr_Clear();
        xsp_give_exc(self->pending);
        self->pending = NULL;
    }
    pthread_mutex_lock(&g_lock);
    if (g_active == self)
        g_active = NULL;
    pthread_mutex_unlock(&g_lock);
    Py_DECREF(self);        /* the claim's reference; the caller holds another */
    return -1;
}

/* xsp's own cost (meta overhead.*, docs/api.md): overhead.spans, the spans the core recorded
 * (not the region, not GPU activity records: CUPTI's cost is paid in the driver);
 * overhead.stop_ns, the stop's time from the trace's stop_ns to now; and, when the profile
 * passed a calibrated per-span cost in its meta (overhead.per_span_ns, xsp/profiler.py, made
 * before the start), overhead.estimate_ns = spans x per_span_ns + stop_ns.  Reads the clock
 * once, after everything else of the stop; runs no Python code.  Failures lose the meta. */
static void overhead_meta(SessionObject *self, xsp_trace *t)
{
    int64_t spans = 0, stop = 0;
    for (uint32_t i = 0; i < t->n_spans; i++) {
        uint8_t k = t->spans[i].kind;
        spans += k != XSP_KIND_REGION && (k < XSP_KIND_RUNTIME || k > XSP_KIND_OVERHEAD);
    }
    uint32_t key = xsp_strtab_find(&t->strings, "stop_ns", 7);
    uint64_t now = xsp_clock_ns();
    for (uint32_t i = 0; key != UINT32_MAX && i < t->n_meta; i++)
        if (t->meta[i].key == key && t->meta[i].type == XSP_ATTR_INT && t->meta[i].v.i >= 0
            && (uint64_t)t->meta[i].v.i <= now)
            stop = (int64_t)(now - (uint64_t)t->meta[i].v.i);
    xsp_trace_set_meta_int(t, "overhead.spans", spans);
    xsp_trace_set_meta_int(t, "overhead.stop_ns", stop);
    PyObject *per = self->meta && PyDict_Check(self->meta)
                        ? PyDict_GetItemString(self->meta, "overhead.per_span_ns") : NULL;
    if (per && PyLong_Check(per)) {
        long long c = PyLong_AsLongLong(per);
        if (c >= 0 && !PyErr_Occurred())
            xsp_trace_set_meta_int(t, "overhead.estimate_ns", spans * (int64_t)c + stop);
    }
    PyErr_Clear();
}

/* Everything the trace says besides its spans, in C on the finished trace: this profile's
 * meta, hook_errors, how the block ended, thread names, the side table.  No Python code runs.
 * Failures here lose a detail, never the trace. */
static void decorate(SessionObject *self, xsp_trace *t, PyObject *block_exc)
{
    xsp_py_meta_from(t, self->meta);
    if (self->module_type) {
        long long errors = xsp_modulecall_is(self->wrapper)
                               ? xsp_modulecall_errors(self->wrapper) : 0;
        /* the instance dict itself: an attribute lookup could run a property's Python */
        PyObject *d = self->hook_owner ? PyObject_GenericGetDict(self->hook_owner, NULL) : NULL;
        PyObject *e = d && PyDict_Check(d) ? PyDict_GetItemString(d, "_errors") : NULL;
        if (e && PyLong_Check(e))
            errors += PyLong_AsLongLong(e);
        /* the call sites of the module spans become their source and call_site attributes */
        PyObject *sites = d && PyDict_Check(d) ? PyDict_GetItemString(d, "sites") : NULL;
        char serr[256];
        if (sites && xsp_sites_is(sites) && xsp_sites_attach(sites, t, serr, sizeof serr) != 0)
            xsp_trace_set_meta_str(t, "source_error", serr);
        Py_XDECREF(d);
        PyErr_Clear();
        xsp_trace_set_meta_int(t, "hook_errors", errors);
    }
    xsp_py_name_threads(t, self->names);
    if (self->threads)
        xsp_py_name_live_threads(t, self->threads);
    if (self->side && PyDict_Check(self->side) && xsp_py_attach_side(t, self->side) != 0)
        xsp_trace_set_meta_str(t, "attrs_error", "out of memory while attaching attributes");
    {   /* xsp/compiled.py's tables (compile spans, source modules in compiled regions), read
         * from the instance dict itself: an attribute lookup could run Python */
        PyObject *d = PyObject_GenericGetDict((PyObject *)self, NULL);
        PyObject *spec = d && PyDict_Check(d) ? PyDict_GetItemString(d, "_span_attrs") : NULL;
        if (spec && xsp_py_attach_tables(t, spec) != 0)
            xsp_trace_set_meta_str(t, "attrs_error", "torch.compile attributes: out of memory, "
                                   "or a span already had the attribute");
        Py_XDECREF(d);
        PyErr_Clear();
    }
    if (block_exc && block_exc != Py_None) {
        int interrupt = !PyObject_TypeCheck(block_exc, (PyTypeObject *)PyExc_Exception);
        char what[256];
        snprintf(what, sizeof what, "%s%s", Py_TYPE(block_exc)->tp_name,
                 interrupt ? " in the block" : "");
        xsp_trace_set_meta_str(t, interrupt ? "interrupted" : "exception", what);
    }
    if (self->pending) {
        char what[256];
        snprintf(what, sizeof what, "%s during stop", Py_TYPE(self->pending)->tp_name);
        xsp_trace_set_meta_str(t, "interrupted", what);
    }
    overhead_meta(self, t);     /* last: its clock reading ends the stop's time */
}

/* -- stop ---------------------------------------------------------------------------------- */

/* In a forked child, the inherited profile goes inert: Module.__call__ back, the torch callback
 * detached, the core session forgotten (the core's own at-fork handler dropped its recording),
 * and no longer the active one.  Cannot fail. */
static void go_inert(SessionObject *self)
{
    self->forked = 1;
    self->running = 0;
    if (self->module_type && unwrap(self) < 0)
        PyErr_Clear();
    if (self->torch)
        torch_api(self)->detach();
    if (self->stack) {
        char err[256];
        xsp_pystack_stop(self->stack, err, sizeof err);
    }
    if (self->sess)
        xsp_session_forget(self->sess);
    if (g_active == self) {
        g_active = NULL;
        Py_DECREF(self);    /* the claim's reference; the caller holds another */
    }
}

/* In a forked child: the profile goes inert if the at-fork handler did not run (a C-level
 * fork), then one warning per process (errors from it are dropped: the child's exit status
 * stays its own). */
static void warn_forked(SessionObject *self)
{
    PyObject *exc = xsp_take_exc();
    if (!self->forked)
        go_inert(self);
    xsp_core_state *st = state_of((PyObject *)self);
    if (!g_fork_warned && st) {
        g_fork_warned = 1;
        if (PyErr_WarnFormat(st->warning, 1, "this process is a fork of the one that started "
                             "this xsp.profile (pid %d): the child records nothing, and its "
                             "copy of the profile has no trace", (int)self->pid) < 0)
            PyErr_Clear();
    }
    PyErr_Clear();
    if (exc)
        xsp_give_exc(exc);
}

/* 1 in a forked child whose parent was recording this profile at the fork: the at-fork
 * handler marks it (os.fork), and a child made by a C-level fork that skipped the handler is
 * recognised by its pid. */
static int is_forked(SessionObject *self);

/* 1 (after warn_forked) when self is a forked child's inert copy, for the calls that then do
 * nothing; else 0. */
static int inert(SessionObject *self)
{
    if (!is_forked(self))
        return 0;
    warn_forked(self);
    return 1;
}

static int is_forked(SessionObject *self)
{
    return self->forked
           || (((self->sess && xsp_session_state(self->sess) == XSP_SESSION_RECORDING)
                || self->running)
               && self->pid != getpid());
}

/* The trace is lost (why): TraceLostError, or, when an interrupt arrived during stop, that
 * interrupt with a note saying so.  Returns -1 with the exception set. */
static int lost(SessionObject *self, xsp_core_state *st, const char *why)
{
    if (!self->pending) {
        PyErr_Format(st->lost_error, "xsp: the trace was lost: %s", why);
        return -1;
    }
    PyObject *note = PyUnicode_FromFormat("xsp: the trace was lost: %s", why);
    PyObject *r = note ? PyObject_CallMethod(self->pending, "add_note", "O", note) : NULL;
    Py_XDECREF(r);
    Py_XDECREF(note);
    PyErr_Clear();
    xsp_give_exc(self->pending);
    self->pending = NULL;
    return -1;
}

/* self is no longer the active profile (a new one may start).  Cannot fail. */
static void release_active(SessionObject *self)
{
    pthread_mutex_lock(&g_lock);
    SessionObject *was = g_active == self ? self : NULL;
    if (was)
        g_active = NULL;
    pthread_mutex_unlock(&g_lock);
    Py_XDECREF(was);
}

/* -- schedules -----------------------------------------------------------------------------
 *
 * A scheduled profile is the active one (g_active) from __enter__ to __exit__, recording or
 * not, so a second profile is refused during the whole block.  Each cycle is one core session
 * (core/session.h), made and started by the step() that begins the cycle's warmup (or by
 * __enter__ when step 0 is recorded) and stopped by the step() that ends its last active step,
 * or by the block's end; between cycles nothing is installed and nothing records.  A step() is
 * one C call that leaves the profile consistent whatever happens: the cycle's trace is stored
 * (self->data, appended to self->traces) before the schedule's one Python callout,
 * on_trace_ready(self), and the next cycle starts after it (so its time is not recorded);
 * anything the callout or the stop raises, and a trace lost, is kept in self->pending and
 * raised from step() once the next cycle has started.  busy refuses a step() or stop called
 * back from the callout (or from the stop's own callout). */

/* The trace of the cycle is lost (why): the exception lost() makes is kept in self->pending. */
static void defer_lost(SessionObject *self, xsp_core_state *st, const char *why)
{
    char what[600];
    snprintf(what, sizeof what, "cycle %llu of the schedule: %s", (unsigned long long)self->cyc,
             why);
    lost(self, st, what);
    self->pending = xsp_take_exc();
}

/* Keeps exc (stolen; NULL: nothing) in self->pending to raise once the profile is consistent;
 * the first one kept wins. */
static void defer(SessionObject *self, PyObject *exc)
{
    if (!exc)
        return;
    if (!self->pending)
        self->pending = exc;
    else
        Py_DECREF(exc);
}

/* The schedule's meta on the cut trace of cycle self->cyc; at_end: the block ended it. */
static void schedule_meta(SessionObject *self, xsp_trace *t, int at_end)
{
    const xsp_schedule *sc = &self->sched;
    char text[160];
    snprintf(text, sizeof text, "wait=%u warmup=%u active=%u repeat=%u skip_first=%u",
             (unsigned)sc->wait, (unsigned)sc->warmup, (unsigned)sc->active,
             (unsigned)sc->repeat, (unsigned)sc->skip_first);
    uint64_t first = xsp_schedule_first_active(sc, self->cyc), steps = 0;
    if (self->region) {           /* the step spans the trace holds */
        for (uint32_t i = 0; i < t->n_spans; i++)
            steps += t->spans[i].kind == XSP_KIND_STEP;
    } else {                      /* no step spans without M: the active steps begun */
        steps = at_end ? self->step_no + 1 - first : sc->active;
    }
    xsp_trace_set_meta_str(t, "schedule", text);
    xsp_trace_set_meta_int(t, "cycle", (int64_t)self->cyc);
    xsp_trace_set_meta_int(t, "first_step", (int64_t)first);
    xsp_trace_set_meta_int(t, "steps", (int64_t)steps);
    xsp_trace_set_meta_int(t, "partial", at_end && steps < sc->active);
}

/* Stops the cycle recording now and stores its trace: self->data, appended to self->traces.
 * at_end: the block is ending (block_exc: how, or NULL / None); else the step() that ends the
 * cycle's last active step, which ends that step here (kept, even when empty).  The trace is
 * finished as an unscheduled one's (decorate, on every span recorded), then cut
 * (xsp_session_cut: the warmup removed) and given the schedule's meta.  At the block's end, a
 * cycle still in its warmup, or whose active steps recorded nothing but the region, is
 * discarded.  Returns 1 when a trace was stored (on_trace_ready is due), else 0; a trace lost
 * and an interrupt during the stop's callout are kept in self->pending.  Afterwards self->sess
 * is NULL and the side table empty. */
static int end_cycle(SessionObject *self, xsp_core_state *st, PyObject *block_exc, int at_end)
{
    xsp_session *sess = self->sess;
    int keep = !at_end || xsp_schedule_action(&self->sched, self->step_no) != XSP_SCHED_WARMUP;
    if (!at_end)
        xsp_session_end_step(sess);
    xsp_session_detach(sess);     /* late sources: Python callouts absorbed */
    xsp_trace *t = NULL;
    char err[512];
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = xsp_session_finish(sess, &t, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc == 0 && keep) {
        decorate(self, t, block_exc);
        rc = xsp_session_cut(sess, t, err, sizeof err);
    }
    self->sess = NULL;
    xsp_session_free(sess);
    if (self->side && PyDict_Check(self->side))   /* lists of str, int and None: no Python */
        PyDict_Clear(self->side);
    if (rc != 0) {
        xsp_trace_free(t);
        defer_lost(self, st, err);
        return 0;
    }
    if (keep && at_end) {          /* anything recorded in the active steps besides the region */
        keep = 0;
        for (uint32_t i = 0; i < t->n_spans && !keep; i++)
            keep = t->spans[i].kind != XSP_KIND_REGION;
    }
    if (!keep) {
        xsp_trace_free(t);
        return 0;
    }
    schedule_meta(self, t, at_end);
    PyObject *d = xsp_tracedata_wrap(st->tracedata_type, t);
    if (!d) {
        PyErr_Clear();
        defer_lost(self, st, "out of memory");
        return 0;
    }
    Py_XSETREF(self->data, d);
    if (self->traces && PyList_Append(self->traces, d) < 0)
        defer(self, xsp_take_exc());
    return 1;
}

/* on_trace_ready(self), the schedule's one Python callout; whatever it raises is deferred. */
static void call_ready(SessionObject *self)
{
    if (!self->on_ready)
        return;
    PyObject *r = PyObject_CallOneArg(self->on_ready, (PyObject *)self);
    if (r)
        Py_DECREF(r);
    else
        defer(self, xsp_take_exc());
}

/* Raises self->pending, if any: -1, else 0. */
static int raise_pending(SessionObject *self)
{
    if (!self->pending)
        return 0;
    PyErr_Clear();
    xsp_give_exc(self->pending);
    self->pending = NULL;
    return -1;
}

/* A scheduled profile's step(): the current step ends, the next begins.  Inside a cycle that is
 * the core session's step; the end of a cycle's last active step stops it, stores its trace
 * and calls on_trace_ready; a cycle that begins with the next step starts.  Returns 0, or -1
 * with the first exception kept on the way raised, the profile consistent either way (the
 * next cycle started when the schedule says so). */
static int sched_step(SessionObject *self, xsp_core_state *st)
{
    int prev = xsp_schedule_action(&self->sched, self->step_no);
    if (self->sess && prev != XSP_SCHED_LAST) {
        xsp_session_step(self->sess);
        self->step_no++;
        return 0;
    }
    self->busy = 1;
    int ready = self->sess ? end_cycle(self, st, NULL, 0) : 0;
    self->step_no++;
    if (ready)
        call_ready(self);
    if (xsp_schedule_starts(&self->sched, self->step_no) && start_cycle(self) < 0)
        defer(self, xsp_take_exc());
    self->busy = 0;
    return raise_pending(self);
}

/* A scheduled profile's stop (the block's end): the cycle recording, if any, ends (delivered
 * when an active step recorded something, else discarded), the profile stops being the active
 * one, then on_trace_ready runs for a delivered cycle.  Returns 0, or -1 with the first
 * exception kept on the way raised; nothing records or is installed afterwards either way. */
static int sched_stop(SessionObject *self, xsp_core_state *st, PyObject *block_exc)
{
    self->busy = 1;
    int ready = self->sess ? end_cycle(self, st, block_exc, 1) : 0;
    self->running = 0;
    release_active(self);         /* before the callout: it may start a profile of its own */
    if (ready)
        call_ready(self);
    self->busy = 0;
    return raise_pending(self);
}

/* Refuses a step or stop of a scheduled profile that cannot run now (what: "step()" or
 * "stop()"): -1 with SessionStateError set, else 0. */
static int sched_refused(SessionObject *self, xsp_core_state *st, const char *what)
{
    if (self->busy) {
        PyErr_Format(st->state_error, "%s was called while the profile was changing cycles "
                     "(from on_trace_ready, or from a callout of the cycle's stop); call it "
                     "from the profiled code", what);
        return -1;
    }
    if (!self->running) {
        PyErr_SetString(st->state_error, strcmp(what, "step()") == 0
                                             ? "step() needs a running xsp.profile"
                                             : "this xsp.profile is not recording");
        return -1;
    }
    if (PyThread_get_thread_ident() != self->thread) {
        PyErr_Format(st->state_error, "%s must be called on the thread that started the "
                     "profile", what);
        return -1;
    }
    return 0;
}

/* Stops the session and stores the finished trace in self->data.  block_exc: the exception
 * that ended the with block, or NULL / None.  Returns 0, or -1 with an exception set (not
 * recording, the wrong thread, the trace lost, or an interrupt that arrived during stop: the
 * trace is stored first). */
static int session_stop(SessionObject *self, PyObject *block_exc)
{
    xsp_core_state *st = state_of((PyObject *)self);
    if (!st)
        return -1;
    if (self->sched.active)
        return sched_refused(self, st, "stop()") < 0 ? -1 : sched_stop(self, st, block_exc);
    if (!self->sess || xsp_session_state(self->sess) != XSP_SESSION_RECORDING) {
        PyErr_SetString(st->state_error, "this xsp.profile is not recording");
        return -1;
    }
    if (PyThread_get_thread_ident() != self->thread) {
        PyErr_SetString(st->state_error, "stop() must be called on the thread that started "
                        "the profile");
        return -1;
    }
    xsp_session_detach(self->sess);   /* late sources: Python callouts absorbed */
    xsp_trace *t = NULL;
    char err[512];
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = xsp_session_finish(self->sess, &t, err, sizeof err);
    Py_END_ALLOW_THREADS
    release_active(self);
    if (rc != 0)
        return lost(self, st, err);
    decorate(self, t, block_exc);
    self->data = xsp_tracedata_wrap(st->tracedata_type, t);
    if (!self->data) {
        PyErr_Clear();
        return lost(self, st, "out of memory");
    }
    if (self->pending) {
        xsp_give_exc(self->pending);
        self->pending = NULL;
        return -1;
    }
    return 0;
}

/* -- the type ------------------------------------------------------------------------------ */

static char *dup_cstr(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = PyMem_Malloc(n);
    return d ? memcpy(d, s, n) : NULL;
}

/* The schedule tuple (wait, warmup, active, repeat, skip_first) of _setup into *sc: 0, or -1
 * with ValueError / TypeError set. */
static int parse_schedule(PyObject *o, xsp_schedule *sc)
{
    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 5) {
        PyErr_SetString(PyExc_TypeError, "_setup: schedule must be a tuple (wait, warmup, "
                        "active, repeat, skip_first)");
        return -1;
    }
    static const char *names[] = {"wait", "warmup", "active", "repeat", "skip_first"};
    uint32_t v[5];
    for (int i = 0; i < 5; i++) {
        PyObject *x = PyTuple_GET_ITEM(o, i);
        long long n = PyLong_Check(x) ? PyLong_AsLongLong(x) : -1;
        if (n == -1 && PyErr_Occurred())
            return -1;
        if (n < 0 || n >= (1ll << 31) || (i == 2 && n < 1)) {
            PyErr_Format(PyExc_ValueError, "_setup: schedule %s must be an int from %d to "
                         "2**31 - 1", names[i], i == 2 ? 1 : 0);
            return -1;
        }
        v[i] = (uint32_t)n;
    }
    *sc = (xsp_schedule){.wait = v[0], .warmup = v[1], .active = v[2], .repeat = v[3],
                         .skip_first = v[4]};
    return 0;
}

/* _setup(levels, region=None, *, max_bytes=0, pool_bytes=0, gpu=False, gpu_max_bytes=0,
 *        gpu_share=False, gpu_fallback=False, module_type=None, wrapper=None, cell=None,
 *        torch=None, sync=None, names=None, threads=None, side=None, hook_owner=None,
 *        meta=None, where=None, schedule=None, on_trace_ready=None, torch_options=0,
 *        stack=None) */
static PyObject *sess_setup(SessionObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"levels", "region", "max_bytes", "pool_bytes", "gpu",
                             "gpu_max_bytes", "gpu_share", "gpu_fallback", "module_type",
                             "wrapper", "cell", "torch", "sync", "names", "threads", "side",
                             "hook_owner", "meta", "where", "schedule", "on_trace_ready",
                             "torch_options", "stack", NULL};
    const char *levels, *region = NULL;
    unsigned long long max_bytes = 0, pool_bytes = 0, gpu_max = 0;
    int gpu = 0, share = 0, fallback = 0;
    PyObject *module_type = Py_None, *wrapper = Py_None, *cell = Py_None, *torch = Py_None,
             *sync = Py_None, *names = Py_None, *more = Py_None, *side = Py_None,
             *owner = Py_None, *meta = Py_None, *where = Py_None, *sched = Py_None,
             *ready = Py_None, *stack = Py_None;
    unsigned int topts = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|z$KKpKppOOOOOOOOOOOOOIO:_setup", kwlist,
                                     &levels, &region, &max_bytes, &pool_bytes, &gpu, &gpu_max,
                                     &share, &fallback, &module_type, &wrapper, &cell, &torch,
                                     &sync, &names, &more, &side, &owner, &meta, &where, &sched,
                                     &ready, &topts, &stack))
        return NULL;
    if (stack != Py_None && !xsp_pystack_is(stack))
        return PyErr_Format(PyExc_TypeError, "_setup: stack must be a PyStack or None");
    if (topts & ~(XSP_TORCH_INPUTS | XSP_TORCH_MEMORY))
        return PyErr_Format(PyExc_ValueError, "_setup: unknown torch_options %u", topts);
    xsp_core_state *st = state_of((PyObject *)self);
    if (!st)
        return NULL;
    if (self->set_up) {
        PyErr_SetString(st->state_error, "_setup: this session is set up already");
        return NULL;
    }
    if (strlen(levels) >= sizeof self->levels)
        return PyErr_Format(PyExc_ValueError, "_setup: levels %s is too long", levels);
    if ((module_type == Py_None) != (wrapper == Py_None)
        || (module_type != Py_None && !PyType_Check(module_type)))
        return PyErr_Format(PyExc_TypeError, "_setup: module_type (a class) and wrapper go "
                            "together");
    if (cell != Py_None && (!PyList_Check(cell) || PyList_GET_SIZE(cell) != 2))
        return PyErr_Format(PyExc_TypeError, "_setup: cell must be a list [on, orig]");
    xsp_schedule sc = {0};
    if (sched != Py_None && parse_schedule(sched, &sc) < 0)
        return NULL;
    if (ready != Py_None && (sched == Py_None || !PyCallable_Check(ready)))
        return PyErr_Format(PyExc_TypeError, "_setup: on_trace_ready must be a callable, and "
                            "goes with a schedule");
    if (torch != Py_None && !PyCapsule_IsValid(torch, XSP_TORCH_API_CAPSULE))
        return PyErr_Format(PyExc_TypeError, "_setup: torch must be xsp._torch._C_API");
    if (torch != Py_None) {
        const xsp_torch_api *api = PyCapsule_GetPointer(torch, XSP_TORCH_API_CAPSULE);
        if (!api || api->version < 2 || api->size < sizeof *api)
            return PyErr_Format(st->source_error, "xsp._torch's table is too old (version "
                                "%u): rebuild xsp", api ? (unsigned)api->version : 0u);
    }
    if (region && !(self->region = dup_cstr(region)))
        return PyErr_NoMemory();
    snprintf(self->levels, sizeof self->levels, "%s", levels);
    self->core = (xsp_config){.max_bytes = max_bytes, .pool_bytes = pool_bytes,
                              .adopt_roots = 1};
    self->gpu = gpu;
    self->gpu_max = gpu_max;
    self->gpu_share = share;
    self->gpu_fallback = fallback;
    self->torch_opts = topts;
    self->sched = sc;
    if (sched != Py_None && ready == Py_None && !(self->traces = PyList_New(0)))
        return NULL;
    self->set_up = 1;
#define KEEP(field, o) self->field = (o) == Py_None ? NULL : Py_NewRef(o)
    KEEP(module_type, module_type);
    KEEP(wrapper, wrapper);
    KEEP(cell, cell);
    KEEP(torch, torch);
    KEEP(sync, sync);
    KEEP(names, names);
    KEEP(threads, more);
    KEEP(side, side);
    KEEP(stack, stack);
    KEEP(hook_owner, owner);
    KEEP(meta, meta);
    KEEP(where, where);
    KEEP(on_ready, ready);
#undef KEEP
    Py_RETURN_NONE;
}

/* The clock hooks (_set_hooks): before_start runs before anything is started, so what it
 * raises (a KeyboardInterrupt included) leaves nothing installed; after_stop runs once the
 * trace is stored, so what it raises is raised with the trace kept.  Each is one call from C:
 * no Python line of ours runs between the hook and the start or stop. */
static int call_hook(PyObject *hook)
{
    if (!hook)
        return 0;
    PyObject *r = PyObject_CallNoArgs(hook);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

static PyObject *sess_enter(SessionObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!inert(self) && call_hook(self->before_start) < 0)
        return NULL;
    if (session_start(self) < 0)
        return NULL;
    return Py_NewRef(self);
}

static PyObject *sess_exit(SessionObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (inert(self))
        Py_RETURN_FALSE;
    if (self->sched.active ? !self->running
                           : self->data || (self->sess
                                            && xsp_session_state(self->sess) == XSP_SESSION_DONE))
        Py_RETURN_FALSE;    /* stopped already (stop() inside the block: its error, if it lost
                             * the trace, was raised there) */
    if (session_stop(self, nargs >= 2 ? args[1] : NULL) < 0)
        return NULL;
    if (call_hook(self->after_stop) < 0)
        return NULL;
    Py_RETURN_FALSE;
}

static PyObject *sess_start(SessionObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!inert(self) && call_hook(self->before_start) < 0)
        return NULL;
    if (session_start(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* _set_hooks(before_start, after_stop): each a callable or None (see call_hook). */
static PyObject *sess_set_hooks(SessionObject *self, PyObject *args)
{
    PyObject *before, *after;
    if (!PyArg_ParseTuple(args, "OO:_set_hooks", &before, &after))
        return NULL;
    if ((before != Py_None && !PyCallable_Check(before))
        || (after != Py_None && !PyCallable_Check(after)))
        return PyErr_Format(PyExc_TypeError, "_set_hooks: callables or None");
    Py_XSETREF(self->before_start, before == Py_None ? NULL : Py_NewRef(before));
    Py_XSETREF(self->after_stop, after == Py_None ? NULL : Py_NewRef(after));
    Py_RETURN_NONE;
}

/* _stop() -> bool: True when this call stopped the session, False when it had stopped already
 * (or this is a forked child's inert copy). */
static PyObject *sess_stop(SessionObject *self, PyObject *Py_UNUSED(ignored))
{
    if (inert(self))
        Py_RETURN_FALSE;
    if (self->sched.active ? self->ran && !self->running : self->data != NULL)
        Py_RETURN_FALSE;
    if (session_stop(self, NULL) < 0)
        return NULL;
    if (call_hook(self->after_stop) < 0)
        return NULL;
    Py_RETURN_TRUE;
}

/* _step() -> bool: ends the current step span and begins the next (True), False in a forked
 * child (inert).  SessionStateError when not recording. */
static PyObject *sess_step(SessionObject *self, PyObject *Py_UNUSED(ignored))
{
    if (inert(self))
        Py_RETURN_FALSE;
    xsp_core_state *st = state_of((PyObject *)self);
    if (!st)
        return NULL;
    if (self->sched.active) {
        if (sched_refused(self, st, "step()") < 0 || sched_step(self, st) < 0)
            return NULL;
        Py_RETURN_TRUE;
    }
    if (!self->sess || xsp_session_state(self->sess) != XSP_SESSION_RECORDING) {
        PyErr_SetString(st->state_error, "step() needs a running xsp.profile");
        return NULL;
    }
    if (PyThread_get_thread_ident() != self->thread) {
        PyErr_SetString(st->state_error, "step() must be called on the thread that started the "
                        "profile");
        return NULL;
    }
    xsp_session_step(self->sess);
    Py_RETURN_TRUE;
}

static PyObject *sess_get_data(SessionObject *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->data ? self->data : Py_None);
}

static PyObject *sess_get_state(SessionObject *self, void *Py_UNUSED(closure))
{
    if (is_forked(self))
        return PyUnicode_FromString("forked");
    if (self->sched.active && !self->sess)   /* between cycles, or not (or no longer) running */
        return PyUnicode_FromString(self->running ? "waiting" : self->ran ? "done" : "new");
    if (!self->sess)
        return PyUnicode_FromString(self->data ? "done" : "new");
    static const char *names[] = {"new", "recording", "stopping", "done", "failed"};
    return PyUnicode_FromString(names[xsp_session_state(self->sess)]);
}

static PyObject *sess_get_levels(SessionObject *self, void *Py_UNUSED(closure))
{
    return PyUnicode_FromString(self->levels);
}

static PyObject *sess_get_where(SessionObject *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->where ? self->where : Py_None);
}

static PyObject *sess_get_steps(SessionObject *self, void *Py_UNUSED(closure))
{
    if (self->sched.active)
        return PyLong_FromUnsignedLongLong(self->step_no);
    return PyLong_FromUnsignedLong(self->sess ? xsp_session_steps(self->sess) : 0);
}

static PyObject *sess_get_traces(SessionObject *self, void *Py_UNUSED(closure))
{
    if (self->traces)
        return PyList_GetSlice(self->traces, 0, PyList_GET_SIZE(self->traces));
    if (!self->sched.active && self->data)
        return Py_BuildValue("[O]", self->data);
    return PyList_New(0);
}

static PyObject *sess_get_schedule(SessionObject *self, void *Py_UNUSED(closure))
{
    const xsp_schedule *sc = &self->sched;
    if (!sc->active)
        Py_RETURN_NONE;
    return Py_BuildValue("(IIIII)", (unsigned)sc->wait, (unsigned)sc->warmup,
                         (unsigned)sc->active, (unsigned)sc->repeat, (unsigned)sc->skip_first);
}

static PyObject *sess_get_thread(SessionObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLong(self->thread);
}

static int sess_traverse(SessionObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->module_type);
    Py_VISIT(self->wrapper);
    Py_VISIT(self->orig);
    Py_VISIT(self->cell);
    Py_VISIT(self->torch);
    Py_VISIT(self->sync);
    Py_VISIT(self->names);
    Py_VISIT(self->threads);
    Py_VISIT(self->side);
    Py_VISIT(self->stack);
    Py_VISIT(self->hook_owner);
    Py_VISIT(self->meta);
    Py_VISIT(self->where);
    Py_VISIT(self->data);
    Py_VISIT(self->pending);
    Py_VISIT(self->on_ready);
    Py_VISIT(self->before_start);
    Py_VISIT(self->after_stop);
    Py_VISIT(self->traces);
    return 0;
}

static int sess_clear(SessionObject *self)
{
    /* a recording session is never collected: g_active holds a reference to it */
    Py_CLEAR(self->module_type);
    Py_CLEAR(self->wrapper);
    Py_CLEAR(self->orig);
    Py_CLEAR(self->cell);
    Py_CLEAR(self->torch);
    Py_CLEAR(self->sync);
    Py_CLEAR(self->names);
    Py_CLEAR(self->threads);
    Py_CLEAR(self->side);
    Py_CLEAR(self->stack);
    Py_CLEAR(self->hook_owner);
    Py_CLEAR(self->meta);
    Py_CLEAR(self->where);
    Py_CLEAR(self->data);
    Py_CLEAR(self->pending);
    Py_CLEAR(self->on_ready);
    Py_CLEAR(self->before_start);
    Py_CLEAR(self->after_stop);
    Py_CLEAR(self->traces);
    return 0;
}

static void sess_dealloc(SessionObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (is_forked(self) && self->sess)
        xsp_session_forget(self->sess); /* the parent's recording: nothing to stop here */
    xsp_session_free(self->sess);       /* never recording here (see sess_clear) */
    sess_clear(self);
    PyMem_Free(self->region);
    tp->tp_free(self);
    Py_DECREF(tp);
}

PyObject *xsp_py_active_session(void)
{
    pthread_mutex_lock(&g_lock);
    PyObject *a = g_active ? Py_NewRef((PyObject *)g_active) : Py_NewRef(Py_None);
    pthread_mutex_unlock(&g_lock);
    return a;
}

PyObject *xsp_py_after_fork_child(void)
{
    pthread_mutex_init(&g_lock, NULL);   /* the parent may have held it while forking */
    if (g_active)
        go_inert(g_active);
    Py_RETURN_NONE;
}

static PyMethodDef sess_methods[] = {
    {"_setup", (PyCFunction)(void (*)(void))sess_setup, METH_VARARGS | METH_KEYWORDS,
     "_setup(levels, region=None, **sources): configure, before start (xsp/profiler.py)."},
    {"__enter__", (PyCFunction)sess_enter, METH_NOARGS, "Starts recording; returns self."},
    {"__exit__", (PyCFunction)(void (*)(void))sess_exit, METH_FASTCALL,
     "Stops recording and finishes the trace; never suppresses the block's exception."},
    {"_start", (PyCFunction)sess_start, METH_NOARGS, "Starts recording (as __enter__)."},
    {"_stop", (PyCFunction)sess_stop, METH_NOARGS,
     "Stops recording (as __exit__ without an exception) -> bool: stopped now."},
    {"_step", (PyCFunction)sess_step, METH_NOARGS, "Ends the step span, begins the next."},
    {"_set_hooks", (PyCFunction)sess_set_hooks, METH_VARARGS,
     "_set_hooks(before_start, after_stop): called before a start and after the stop that "
     "stores the trace (callables or None)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef sess_getset[] = {
    {"_data", (getter)sess_get_data, NULL, "the finished TraceData, or None", NULL},
    {"_state", (getter)sess_get_state, NULL,
     "'new' (also after a failed start), 'recording', 'stopping', 'done' or 'forked'; "
     "'waiting' for a scheduled profile between its cycles", NULL},
    {"_levels", (getter)sess_get_levels, NULL, "the levels recorded (G dropped by a fallback)",
     NULL},
    {"_steps", (getter)sess_get_steps, NULL, "step() calls so far", NULL},
    {"_where", (getter)sess_get_where, NULL,
     "file:line of the code that made the profile (str), or None", NULL},
    {"_traces", (getter)sess_get_traces, NULL,
     "a new list of the TraceData kept: every cycle's of a schedule without on_trace_ready "
     "(none with it), else the one trace once stopped", NULL},
    {"_schedule", (getter)sess_get_schedule, NULL,
     "(wait, warmup, active, repeat, skip_first), or None", NULL},
    {"_thread", (getter)sess_get_thread, NULL,
     "threading.get_ident() of the thread that started it (0 before)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot sess_slots[] = {
    {Py_tp_dealloc, sess_dealloc},
    {Py_tp_traverse, sess_traverse},
    {Py_tp_clear, sess_clear},
    {Py_tp_methods, sess_methods},
    {Py_tp_getset, sess_getset},
    {Py_tp_doc, "One profiling session, started and stopped whole (xsp.profile's base)."},
    {0, NULL},
};

PyType_Spec xsp_session_spec = {
    .name = "xsp._core.Session",
    .basicsize = sizeof(SessionObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .slots = sess_slots,
};
