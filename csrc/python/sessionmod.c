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
 *   modules       installs the nn.Module.__call__ wrapper (a ModuleCall, modcall.c) by a
 *                 plain type attribute store, and at stop turns it off and puts the original
 *                 back when it is still the class attribute
 *   torch         attaches the shim's RecordFunction callback (xsp._torch's capsule, xsp_api.h)
 *   stack         with_stack: the Python function spans' profile function (pystack.h)
 * and starts it whole, or raises with nothing installed.  Stop stops it whole, then finishes the
 * trace in C before anyone sees it: meta (the session's, this profile's, hook_errors, how the
 * block ended), thread names, and the shapes and memory attributes of module spans.  The trace
 * comes back as a TraceData that never changes (tracedata.c).
 *
 * The contract with Python is passed, not discovered: _setup takes one SessionOptions
 * (sessionopts.h), made by xsp/producers/profiler.py, and keeps its own references to what it
 * needs, among them the tables the stop reads (thread names, the side table, torch.compile's
 * attribute tables: dicts that Python fills in place) and the ModuleCall, whose counter and
 * call-site table give hook_errors and the spans' source lines.  Stop reads no attribute of
 * any Python object.
 *
 * Stop runs Python code only for level G (the sync callable); it is a callout: an Exception it
 * raises becomes a message in the trace, anything else (KeyboardInterrupt, SystemExit: a second
 * Ctrl-C during stop) is kept and raised once stop is complete and the trace stored, with meta
 * "interrupted" saying so.  Thread names come from the dict Python fills as it sees threads
 * (before the start, and at each thread's first module call).  A Ctrl-C during the merge
 * itself (long for large traces, run without the GIL) is delivered by CPython after __exit__
 * returns.  If the
 * merge runs out of memory the trace is lost, and the exception says so (TraceLostError, or a
 * note on the pending interrupt).
 *
 * A profile made with a step schedule (SessionOptions.schedule) runs one core session per
 * cycle, started and stopped by step() calls in C, and delivers each cycle's trace before its
 * one Python callout (on_trace_ready): sessionsched.c.  A forked child's copy of a running profile
 * is inert: sessionfork.c.  The state the three files share, and xsp_pysession_active (the one
 * profile recording in the process), are declared in sessionobj.h.
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
#include "sessionfork.h"
#include "sessionobj.h"
#include "sessionopts.h"
#include "sessionsched.h"
#include "tracedata.h"
#include "tracefinish.h"

pthread_mutex_t xsp_pysession_lock = PTHREAD_MUTEX_INITIALIZER;
xsp_pysession *xsp_pysession_active = NULL;   /* strong; protected by xsp_pysession_lock */

xsp_core_state *xsp_pysession_state(PyObject *self)
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
static void absorb(xsp_pysession *self, char *err, size_t errlen)
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
int xsp_pysession_unwrap(xsp_pysession *self)
{
    xsp_modulecall_set_on(self->wrapper, 0);
    PyObject *d = type_dict(self->module_type);
    PyObject *cur = d ? PyDict_GetItemString(d, "__call__") : NULL;   /* borrowed */
    if (cur == self->wrapper && self->orig)
        return PyObject_SetAttrString(self->module_type, "__call__", self->orig);
    return 0;
}

static int modules_start(void *ctx, char *err, size_t errlen)
{
    xsp_pysession *self = ctx;
    PyObject *d = type_dict(self->module_type);
    PyObject *orig = d ? PyDict_GetItemString(d, "__call__") : NULL;
    if (!orig) {
        snprintf(err, errlen, "nn.Module has no __call__ of its own to wrap");
        return -1;
    }
    Py_XSETREF(self->orig, Py_NewRef(orig));
    xsp_modulecall_set_orig(self->wrapper, orig);
    xsp_modulecall_set_on(self->wrapper, 1);
    if (PyObject_SetAttrString(self->module_type, "__call__", self->wrapper) == 0)
        return 0;
    PyObject *exc = xsp_take_exc();
    exc_text(exc, err, errlen);
    Py_XDECREF(exc);
    xsp_modulecall_set_on(self->wrapper, 0);
    return -1;
}

static void modules_stop(void *ctx, char *err, size_t errlen)
{
    xsp_pysession *self = ctx;
    if (xsp_pysession_unwrap(self) < 0) {
        PyObject *exc = xsp_take_exc();
        exc_text(exc, err, errlen);
        Py_XDECREF(exc);
    }
}

static int torch_start(void *ctx, char *err, size_t errlen)
{
    xsp_pysession *self = ctx;
    return xsp_pysession_torch(self)->attach(xsp_py_core_api(), self->torch_opts, err, errlen);
}

static void torch_stop(void *ctx, char *err, size_t errlen)
{
    const xsp_torch_api *api = xsp_pysession_torch(ctx);
    api->detach();
    if (api->attached())    /* torch threw inside removeCallback: say so, in meta torch_error */
        snprintf(err, errlen, "the RecordFunction callback could not be removed; later L "
                 "profiles in this process will be refused");
}

static int stack_start(void *ctx, char *err, size_t errlen)
{
    return xsp_pystack_start(((xsp_pysession *)ctx)->stack, err, errlen);
}

static void stack_stop(void *ctx, char *err, size_t errlen)
{
    xsp_pystack_stop(((xsp_pysession *)ctx)->stack, err, errlen);
}

static void sync_stop(void *ctx, char *err, size_t errlen)
{
    xsp_pysession *self = ctx;
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
static xsp_session *make_session(xsp_pysession *self, int gpu, const char *levels)
{
    xsp_core_state *st = xsp_pysession_state((PyObject *)self);
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
int xsp_pysession_start_core(xsp_pysession *self, int numbered, uint64_t first, uint64_t cut)
{
    xsp_core_state *st = xsp_pysession_state((PyObject *)self);
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


/* Starts the profile: 0, or -1 with an exception set and nothing left installed.  A scheduled
 * profile becomes the active one for the whole block and records only from its first cycle on
 * (at once when step 0 is recorded). */
static int session_start(xsp_pysession *self)
{
    xsp_core_state *st = xsp_pysession_state((PyObject *)self);
    if (!st)
        return -1;
    if (self->sess || self->data || self->ran) {
        PyErr_SetString(st->state_error, "this xsp.profile has already run; create a new one");
        return -1;
    }
    pthread_mutex_lock(&xsp_pysession_lock);
    xsp_pysession *other = xsp_pysession_active;
    if (other) {
        PyObject *where = Py_NewRef(other->where ? other->where : Py_None);
        pthread_mutex_unlock(&xsp_pysession_lock);
        PyErr_Format(st->active_error, "another xsp.profile is already recording (started at "
                     "%S); xsp records one session at a time: stop it before starting this one",
                     where);
        Py_DECREF(where);
        return -1;
    }
    xsp_pysession_active = self;   /* claimed: a start on another thread now fails above */
    Py_INCREF(self);
    pthread_mutex_unlock(&xsp_pysession_lock);

    if (self->sched.active) {
        self->step_no = 0;
        if (xsp_schedule_starts(&self->sched, 0) && xsp_pysched_begin(self) < 0)
            goto fail;
        self->ran = self->running = 1;
    } else if (xsp_pysession_start_core(self, 0, 0, 0) < 0) {
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
    pthread_mutex_lock(&xsp_pysession_lock);
    if (xsp_pysession_active == self)
        xsp_pysession_active = NULL;
    pthread_mutex_unlock(&xsp_pysession_lock);
    Py_DECREF(self);        /* the claim's reference; the caller holds another */
    return -1;
}

/* xsp's own cost (meta overhead.*, docs/api.md): overhead.spans, the spans the core recorded
 * (not the region, not GPU activity records: CUPTI's cost is paid in the driver);
 * overhead.stop_ns, the stop's time from the trace's stop_ns to now; and, when the profile
 * passed a calibrated per-span cost in its meta (overhead.per_span_ns, xsp/producers/profiler.py, made
 * before the start), overhead.estimate_ns = spans x per_span_ns + stop_ns.  Reads the clock
 * once, after everything else of the stop; runs no Python code.  Failures lose the meta. */
static void overhead_meta(xsp_pysession *self, xsp_trace *t)
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

/* Everything the trace says besides its spans, in C on the finished trace, from the objects
 * _setup was given: this profile's meta, hook_errors (the wrapper's counter), the call sites
 * (the wrapper's table), thread names, the side table, torch.compile's tables, how the block
 * ended.  No attribute lookup, no Python code.  Failures here lose a detail, never the
 * trace. */
void xsp_pysession_decorate(xsp_pysession *self, xsp_trace *t, PyObject *block_exc)
{
    xsp_py_meta_from(t, self->meta);
    if (self->module_type) {
        /* the call sites of the module spans become their source and call_site attributes */
        PyObject *sites = xsp_modulecall_sites(self->wrapper);
        char serr[256];
        if (sites && xsp_sites_attach(sites, t, serr, sizeof serr) != 0)
            xsp_trace_set_meta_str(t, "source_error", serr);
        xsp_trace_set_meta_int(t, "hook_errors", xsp_modulecall_errors(self->wrapper));
    }
    xsp_py_name_threads(t, self->names);
    if (self->side && PyDict_Check(self->side) && xsp_py_attach_side(t, self->side) != 0)
        xsp_trace_set_meta_str(t, "attrs_error", "out of memory while attaching attributes");
    /* xsp/producers/dynamo.py's tables (compile spans, source modules in compiled regions) */
    if (self->span_attrs && xsp_py_attach_tables(t, self->span_attrs) != 0)
        xsp_trace_set_meta_str(t, "attrs_error", "torch.compile attributes: out of memory, "
                               "or a span already had the attribute");
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


/* The trace is lost (why): TraceLostError, or, when an interrupt arrived during stop, that
 * interrupt with a note saying so.  Returns -1 with the exception set. */
int xsp_pysession_lost(xsp_pysession *self, xsp_core_state *st, const char *why)
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
void xsp_pysession_release(xsp_pysession *self)
{
    pthread_mutex_lock(&xsp_pysession_lock);
    xsp_pysession *was = xsp_pysession_active == self ? self : NULL;
    if (was)
        xsp_pysession_active = NULL;
    pthread_mutex_unlock(&xsp_pysession_lock);
    Py_XDECREF(was);
}

/* Stops the session and stores the finished trace in self->data.  block_exc: the exception
 * that ended the with block, or NULL / None.  Returns 0, or -1 with an exception set (not
 * recording, the wrong thread, the trace lost, or an interrupt that arrived during stop: the
 * trace is stored first). */
static int session_stop(xsp_pysession *self, PyObject *block_exc)
{
    xsp_core_state *st = xsp_pysession_state((PyObject *)self);
    if (!st)
        return -1;
    if (self->sched.active)
        return xsp_pysched_refused(self, st, "stop()") < 0
                   ? -1 : xsp_pysched_stop(self, st, block_exc);
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
    xsp_pysession_release(self);
    if (rc != 0)
        return xsp_pysession_lost(self, st, err);
    xsp_pysession_decorate(self, t, block_exc);
    self->data = xsp_tracedata_wrap(st->tracedata_type, t);
    if (!self->data) {
        PyErr_Clear();
        return xsp_pysession_lost(self, st, "out of memory");
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


/* _setup(options): configures the session from a SessionOptions (sessionopts.h), before its
 * start, once.  Checks every field, then keeps strong references to the objects it needs
 * (later writes to the options change nothing).  Returns None, or raises with the session
 * unchanged (TypeError, ValueError, SessionStateError, SourceError for a shim of another
 * build). */
static PyObject *sess_setup(xsp_pysession *self, PyObject *arg)
{
    if (!xsp_sessionopts_is(arg))
        return PyErr_Format(PyExc_TypeError, "_setup: options must be an "
                            "xsp._core.SessionOptions, not %s", Py_TYPE(arg)->tp_name);
    const xsp_pysessionopts *o = (const xsp_pysessionopts *)arg;
    PyObject *module_type = xsp_opt(o->module_type), *wrapper = xsp_opt(o->wrapper),
             *torch = xsp_opt(o->torch), *sched = xsp_opt(o->schedule),
             *ready = xsp_opt(o->on_trace_ready), *stack = xsp_opt(o->stack),
             *sync = xsp_opt(o->sync), *region_o = xsp_opt(o->region);
    xsp_core_state *st = xsp_pysession_state((PyObject *)self);
    if (!st)
        return NULL;
    if (self->set_up) {
        PyErr_SetString(st->state_error, "_setup: this session is set up already");
        return NULL;
    }
    const char *levels = o->levels && PyUnicode_Check(o->levels)
                             ? PyUnicode_AsUTF8(o->levels) : NULL;
    const char *region = region_o && PyUnicode_Check(region_o)
                             ? PyUnicode_AsUTF8(region_o) : NULL;
    if (PyErr_Occurred())
        return NULL;
    if (!levels || (region_o && !region))
        return PyErr_Format(PyExc_TypeError, "_setup: levels must be a str, region a str or "
                            "None");
    if (strlen(levels) >= sizeof self->levels)
        return PyErr_Format(PyExc_ValueError, "_setup: levels %s is too long", levels);
    if (stack && !xsp_pystack_is(stack))
        return PyErr_Format(PyExc_TypeError, "_setup: stack must be a PyStack or None");
    if (o->torch_options & ~(XSP_TORCH_INPUTS | XSP_TORCH_MEMORY))
        return PyErr_Format(PyExc_ValueError, "_setup: unknown torch_options %u",
                            o->torch_options);
    if ((module_type == NULL) != (wrapper == NULL) || (module_type && !PyType_Check(module_type))
        || (wrapper && !xsp_modulecall_is(wrapper)))
        return PyErr_Format(PyExc_TypeError, "_setup: module_type (a class) and wrapper (a "
                            "ModuleCall) go together");
    if (sync && !PyCallable_Check(sync))
        return PyErr_Format(PyExc_TypeError, "_setup: sync must be a callable or None");
#define DICT_OR_NONE(f)                                                                      \
    if (xsp_opt(o->f) && !PyDict_CheckExact(o->f))                                           \
        return PyErr_Format(PyExc_TypeError, "_setup: " #f " must be a dict or None");
    DICT_OR_NONE(meta)
    DICT_OR_NONE(thread_names)
    DICT_OR_NONE(side)
    DICT_OR_NONE(span_attrs)
#undef DICT_OR_NONE
    xsp_schedule sc = {0};
    if (sched && xsp_pysched_parse(sched, &sc) < 0)
        return NULL;
    if (ready && (!sched || !PyCallable_Check(ready)))
        return PyErr_Format(PyExc_TypeError, "_setup: on_trace_ready must be a callable, and "
                            "goes with a schedule");
    if (torch && !PyCapsule_IsValid(torch, XSP_TORCH_API_CAPSULE))
        return PyErr_Format(PyExc_TypeError, "_setup: torch must be xsp._torch._C_API");
    if (torch) {
        const xsp_torch_api *api = PyCapsule_GetPointer(torch, XSP_TORCH_API_CAPSULE);
        if (!api || api->version != XSP_ABI_VERSION || api->size != sizeof *api)
            return PyErr_Format(st->source_error, "xsp._torch is from another build than "
                                "xsp._core (its table is of version %u, size %u; this xsp._core "
                                "needs version %u, size %u): reinstall xsp",
                                api ? (unsigned)api->version : 0u,
                                api ? (unsigned)api->size : 0u, (unsigned)XSP_ABI_VERSION,
                                (unsigned)sizeof *api);
    }
    if (sched && !ready && !(self->traces = PyList_New(0)))
        return NULL;
    if (region && !(self->region = dup_cstr(region))) {
        Py_CLEAR(self->traces);
        return PyErr_NoMemory();
    }
    snprintf(self->levels, sizeof self->levels, "%s", levels);
    self->core = (xsp_config){.max_bytes = o->max_bytes, .adopt_roots = 1};
    self->gpu = o->gpu;
    self->gpu_max = o->gpu_max_bytes;
    self->gpu_share = o->gpu_share;
    self->gpu_fallback = o->gpu_fallback;
    self->torch_opts = o->torch_options;
    self->sched = sc;
    self->set_up = 1;
#define KEEP(field, obj) self->field = xsp_opt(obj) ? Py_NewRef(obj) : NULL
    KEEP(module_type, o->module_type);
    KEEP(wrapper, o->wrapper);
    KEEP(torch, o->torch);
    KEEP(sync, o->sync);
    KEEP(names, o->thread_names);
    KEEP(side, o->side);
    KEEP(span_attrs, o->span_attrs);
    KEEP(stack, o->stack);
    KEEP(meta, o->meta);
    KEEP(where, o->where);
    KEEP(on_ready, o->on_trace_ready);
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

static PyObject *sess_enter(xsp_pysession *self, PyObject *Py_UNUSED(ignored))
{
    if (!xsp_pyfork_inert(self) && call_hook(self->before_start) < 0)
        return NULL;
    if (session_start(self) < 0)
        return NULL;
    return Py_NewRef(self);
}

static PyObject *sess_exit(xsp_pysession *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (xsp_pyfork_inert(self))
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

static PyObject *sess_start(xsp_pysession *self, PyObject *Py_UNUSED(ignored))
{
    if (!xsp_pyfork_inert(self) && call_hook(self->before_start) < 0)
        return NULL;
    if (session_start(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* _set_hooks(before_start, after_stop): each a callable or None (see call_hook). */
static PyObject *sess_set_hooks(xsp_pysession *self, PyObject *args)
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
static PyObject *sess_stop(xsp_pysession *self, PyObject *Py_UNUSED(ignored))
{
    if (xsp_pyfork_inert(self))
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
static PyObject *sess_step(xsp_pysession *self, PyObject *Py_UNUSED(ignored))
{
    if (xsp_pyfork_inert(self))
        Py_RETURN_FALSE;
    xsp_core_state *st = xsp_pysession_state((PyObject *)self);
    if (!st)
        return NULL;
    if (self->sched.active) {
        if (xsp_pysched_refused(self, st, "step()") < 0 || xsp_pysched_step(self, st) < 0)
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

static PyObject *sess_get_data(xsp_pysession *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->data ? self->data : Py_None);
}

static PyObject *sess_get_state(xsp_pysession *self, void *Py_UNUSED(closure))
{
    if (xsp_pyfork_is_forked(self))
        return PyUnicode_FromString("forked");
    if (self->sched.active && !self->sess)   /* between cycles, or not (or no longer) running */
        return PyUnicode_FromString(self->running ? "waiting" : self->ran ? "done" : "new");
    if (!self->sess)
        return PyUnicode_FromString(self->data ? "done" : "new");
    static const char *names[] = {"new", "recording", "stopping", "done", "failed"};
    return PyUnicode_FromString(names[xsp_session_state(self->sess)]);
}

static PyObject *sess_get_levels(xsp_pysession *self, void *Py_UNUSED(closure))
{
    return PyUnicode_FromString(self->levels);
}

static PyObject *sess_get_where(xsp_pysession *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->where ? self->where : Py_None);
}

static PyObject *sess_get_steps(xsp_pysession *self, void *Py_UNUSED(closure))
{
    if (self->sched.active)
        return PyLong_FromUnsignedLongLong(self->step_no);
    return PyLong_FromUnsignedLong(self->sess ? xsp_session_steps(self->sess) : 0);
}

static PyObject *sess_get_traces(xsp_pysession *self, void *Py_UNUSED(closure))
{
    if (self->traces)
        return PyList_GetSlice(self->traces, 0, PyList_GET_SIZE(self->traces));
    if (!self->sched.active && self->data)
        return Py_BuildValue("[O]", self->data);
    return PyList_New(0);
}

static PyObject *sess_get_schedule(xsp_pysession *self, void *Py_UNUSED(closure))
{
    const xsp_schedule *sc = &self->sched;
    if (!sc->active)
        Py_RETURN_NONE;
    return Py_BuildValue("(IIIII)", (unsigned)sc->wait, (unsigned)sc->warmup,
                         (unsigned)sc->active, (unsigned)sc->repeat, (unsigned)sc->skip_first);
}

static PyObject *sess_get_thread(xsp_pysession *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLong(self->thread);
}

static int sess_traverse(xsp_pysession *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->module_type);
    Py_VISIT(self->wrapper);
    Py_VISIT(self->orig);
    Py_VISIT(self->torch);
    Py_VISIT(self->sync);
    Py_VISIT(self->names);
    Py_VISIT(self->side);
    Py_VISIT(self->span_attrs);
    Py_VISIT(self->stack);
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

static int sess_clear(xsp_pysession *self)
{
    /* a recording session is never collected: xsp_pysession_active holds a reference to it */
    Py_CLEAR(self->module_type);
    Py_CLEAR(self->wrapper);
    Py_CLEAR(self->orig);
    Py_CLEAR(self->torch);
    Py_CLEAR(self->sync);
    Py_CLEAR(self->names);
    Py_CLEAR(self->side);
    Py_CLEAR(self->span_attrs);
    Py_CLEAR(self->stack);
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

static void sess_dealloc(xsp_pysession *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (xsp_pyfork_is_forked(self) && self->sess)
        xsp_session_forget(self->sess); /* the parent's recording: nothing to stop here */
    xsp_session_free(self->sess);       /* never recording here (see sess_clear) */
    sess_clear(self);
    PyMem_Free(self->region);
    tp->tp_free(self);
    Py_DECREF(tp);
}

PyObject *xsp_py_active_session(void)
{
    pthread_mutex_lock(&xsp_pysession_lock);
    PyObject *a = Py_NewRef(xsp_pysession_active ? (PyObject *)xsp_pysession_active : Py_None);
    pthread_mutex_unlock(&xsp_pysession_lock);
    return a;
}


static PyMethodDef sess_methods[] = {
    {"_setup", (PyCFunction)sess_setup, METH_O,
     "_setup(options): configure from an xsp._core.SessionOptions, once, before start "
     "(xsp/producers/profiler.py)."},
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
    .basicsize = sizeof(xsp_pysession),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .slots = sess_slots,
};
