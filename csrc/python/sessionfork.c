/*
 * sessionfork.c: what a forked child does with the profile its parent was running
 * (sessionfork.h).
 *
 * A forked child inherits the running profile but not its recording (the core drops it in its
 * pthread_atfork handler); _after_fork_child, registered by xsp/producers/profiler.py with
 * os.register_at_fork, puts Module.__call__ back and detaches the torch callback in the child
 * (xsp_py_after_fork_child, sessionmod.h).  The child's copy is inert: step() and stop do
 * nothing, there is no trace, and one warning per process says so.  A child made by a C-level
 * fork, which skips the Python at-fork handlers, is recognised by its pid at its first call and
 * made inert then.  Nothing here stops or frees the core session: its recording belongs to the
 * parent (xsp_session_forget).
 */
#include "pyexc.h"
#include "sessionfork.h"

#include <unistd.h>

#include "pystack.h"

static int g_fork_warned = 0;            /* one warning per process; with the GIL */

/* In a forked child, the inherited profile goes inert: Module.__call__ back, the torch callback
 * detached, the core session forgotten (the core's own at-fork handler dropped its recording),
 * and no longer the active one.  Cannot fail. */
static void go_inert(xsp_pysession *self)
{
    self->forked = 1;
    self->running = 0;
    if (self->module_type && xsp_pysession_unwrap(self) < 0)
        PyErr_Clear();
    if (self->torch)
        xsp_pysession_torch(self)->detach();
    if (self->stack) {
        char err[256];
        xsp_pystack_stop(self->stack, err, sizeof err);
    }
    if (self->sess)
        xsp_session_forget(self->sess);
    if (xsp_pysession_active == self) {
        xsp_pysession_active = NULL;
        Py_DECREF(self);    /* the claim's reference; the caller holds another */
    }
}

/* In a forked child: the profile goes inert if the at-fork handler did not run (a C-level
 * fork), then one warning per process (errors from it are dropped: the child's exit status
 * stays its own). */
static void warn_forked(xsp_pysession *self)
{
    PyObject *exc = xsp_take_exc();
    if (!self->forked)
        go_inert(self);
    xsp_core_state *st = xsp_pysession_state((PyObject *)self);
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

/* 1 (after warn_forked) when self is a forked child's inert copy, for the calls that then do
 * nothing; else 0. */
int xsp_pyfork_inert(xsp_pysession *self)
{
    if (!xsp_pyfork_is_forked(self))
        return 0;
    warn_forked(self);
    return 1;
}

int xsp_pyfork_is_forked(xsp_pysession *self)
{
    return self->forked
           || (((self->sess && xsp_session_state(self->sess) == XSP_SESSION_RECORDING)
                || self->running)
               && self->pid != getpid());
}

PyObject *xsp_py_after_fork_child(void)
{
    /* the parent may have held the lock while forking; no other thread exists here */
    pthread_mutex_init(&xsp_pysession_lock, NULL);
    if (xsp_pysession_active)
        go_inert(xsp_pysession_active);
    Py_RETURN_NONE;
}
