/*
 * sessionsched.h: a Session with a step schedule (SessionOptions.schedule): one core session
 * per cycle, started and stopped by step() calls in C (see sessionsched.c).
 */
#ifndef XSP_SESSIONSCHED_H
#define XSP_SESSIONSCHED_H

#include "sessionobj.h"

/* The schedule tuple (wait, warmup, active, repeat, skip_first) of a SessionOptions into *sc:
 * returns 0, or -1 with ValueError / TypeError set and *sc unchanged. */
int xsp_pysched_parse(PyObject *o, xsp_schedule *sc);

/* Starts recording the cycle whose first recorded step is self->step_no (self->cyc set):
 * returns 0, or -1 with an exception set (nothing records). */
int xsp_pysched_begin(xsp_pysession *self);

/* Refuses a step or stop of a scheduled profile that cannot run now (what: "step()" or
 * "stop()"): changing cycles already (a call from on_trace_ready), not running, or not on the
 * thread that started it.  Returns -1 with SessionStateError set, else 0. */
int xsp_pysched_refused(xsp_pysession *self, xsp_core_state *st, const char *what);

/* A scheduled profile's step(): the current step ends, the next begins; a cycle whose last
 * active step ends is stopped, its trace stored and on_trace_ready called, and a cycle that
 * begins with the next step is started.  Returns 0, or -1 with the first exception kept on the
 * way raised; the profile is consistent either way.  Call after xsp_pysched_refused. */
int xsp_pysched_step(xsp_pysession *self, xsp_core_state *st);

/* A scheduled profile's stop (the block's end; block_exc: how, or NULL / None): the cycle
 * recording, if any, ends (delivered when an active step recorded something), the profile
 * stops being the active one, then on_trace_ready runs for a delivered cycle.  Returns 0, or
 * -1 with the first exception kept on the way raised; nothing records or is installed
 * afterwards either way.  Call after xsp_pysched_refused. */
int xsp_pysched_stop(xsp_pysession *self, xsp_core_state *st, PyObject *block_exc);

#endif
