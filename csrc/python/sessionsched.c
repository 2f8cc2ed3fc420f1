/*
 * sessionsched.c: a Session with a step schedule (sessionsched.h), as torch.profiler's
 * schedule(wait, warmup, active, repeat, skip_first): one core session per cycle, each cycle's
 * trace delivered before its one Python callout (on_trace_ready).
 *
 * A scheduled profile is the active one (xsp_pysession_active) from __enter__ to __exit__,
 * recording or not, so a second profile is refused during the whole block.  Each cycle is one core session
 * (core/session.h), made and started by the step() that begins the cycle's warmup (or by
 * __enter__ when step 0 is recorded) and stopped by the step() that ends its last active step,
 * or by the block's end; between cycles nothing is installed and nothing records.  A step() is
 * one C call that leaves the profile consistent whatever happens: the cycle's trace is stored
 * (self->data, appended to self->traces) before the schedule's one Python callout,
 * on_trace_ready(self), and the next cycle starts after it (so its time is not recorded);
 * anything the callout or the stop raises, and a trace lost, is kept in self->pending and
 * raised from step() once the next cycle has started.  busy refuses a step() or stop called
 * back from the callout (or from the stop's own callout).
 */
#include "pyexc.h"
#include "sessionsched.h"

#include <stdio.h>
#include <string.h>

#include "tracedata.h"

/* The schedule tuple (wait, warmup, active, repeat, skip_first) of a SessionOptions into *sc:
 * 0, or -1 with ValueError / TypeError set. */
int xsp_pysched_parse(PyObject *o, xsp_schedule *sc)
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

/* Starts recording the cycle whose first recorded step is self->step_no: 0, or -1 with an
 * exception set (nothing records). */
int xsp_pysched_begin(xsp_pysession *self)
{
    self->cyc = xsp_schedule_cycle(&self->sched, self->step_no);
    return xsp_pysession_start_core(self, 1, self->step_no,
                                    xsp_schedule_first_active(&self->sched, self->cyc));
}


/* The trace of the cycle is lost (why): the exception xsp_pysession_lost() makes is kept in
 * self->pending. */
static void defer_lost(xsp_pysession *self, xsp_core_state *st, const char *why)
{
    char what[600];
    snprintf(what, sizeof what, "cycle %llu of the schedule: %s", (unsigned long long)self->cyc,
             why);
    xsp_pysession_lost(self, st, what);
    self->pending = xsp_take_exc();
}

/* Keeps exc (stolen; NULL: nothing) in self->pending to raise once the profile is consistent;
 * the first one kept wins. */
static void defer(xsp_pysession *self, PyObject *exc)
{
    if (!exc)
        return;
    if (!self->pending)
        self->pending = exc;
    else
        Py_DECREF(exc);
}

/* The schedule's meta on the cut trace of cycle self->cyc; at_end: the block ended it. */
static void schedule_meta(xsp_pysession *self, xsp_trace *t, int at_end)
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
static int end_cycle(xsp_pysession *self, xsp_core_state *st, PyObject *block_exc, int at_end)
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
        xsp_pysession_decorate(self, t, block_exc);
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
static void call_ready(xsp_pysession *self)
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
static int raise_pending(xsp_pysession *self)
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
int xsp_pysched_step(xsp_pysession *self, xsp_core_state *st)
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
    if (xsp_schedule_starts(&self->sched, self->step_no) && xsp_pysched_begin(self) < 0)
        defer(self, xsp_take_exc());
    self->busy = 0;
    return raise_pending(self);
}

/* A scheduled profile's stop (the block's end): the cycle recording, if any, ends (delivered
 * when an active step recorded something, else discarded), the profile stops being the active
 * one, then on_trace_ready runs for a delivered cycle.  Returns 0, or -1 with the first
 * exception kept on the way raised; nothing records or is installed afterwards either way. */
int xsp_pysched_stop(xsp_pysession *self, xsp_core_state *st, PyObject *block_exc)
{
    self->busy = 1;
    int ready = self->sess ? end_cycle(self, st, block_exc, 1) : 0;
    self->running = 0;
    xsp_pysession_release(self);         /* before the callout: it may start a profile of its own */
    if (ready)
        call_ready(self);
    self->busy = 0;
    return raise_pending(self);
}

/* Refuses a step or stop of a scheduled profile that cannot run now (what: "step()" or
 * "stop()"): -1 with SessionStateError set, else 0. */
int xsp_pysched_refused(xsp_pysession *self, xsp_core_state *st, const char *what)
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
