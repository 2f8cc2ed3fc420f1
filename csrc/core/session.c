/*
 * session.c: one profiling session, started and stopped whole (see session.h).
 *
 * The session's own spans (region, steps) use keys with bit 54 set: never an address (the
 * torch shim's keys, below 2^47) nor a key of the CPython binding (bit 55 set, modcall.h), and
 * constant, since one session records at a time.
 *
 * Step spans are named by their number, first_step + the steps ended so far (a schedule's cycles
 * number them globally), and keyed by the latter.  A schedule's cut is a clock reading taken
 * inside the step() that begins the first kept step, between the two step spans' end and begin;
 * the merge converts it to ns with the trace's clock map (merge_all), and xsp_session_cut drops
 * what lies before it once the caller has finished decorating the trace.
 *
 * Each source's stop writes its message into its own slot of errs[], which becomes meta
 * "<name>_error" once the trace exists: stop never fails for a source's sake.
 */
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REGION_KEY ((1ull << 54) | 1u)
#define STEP_KEY(n) ((1ull << 54) | (2u + ((uint64_t)(n) & 0xFFFFFFFFu)))
#define ERRLEN 512

struct xsp_session {
    xsp_config core;                              /* the recorder's config */
    char *region;                                 /* region span name (owned), NULL: no M */
    char *levels;                                 /* meta "levels" (owned) */
    xsp_source src[XSP_SESSION_MAX_SOURCES];      /* in start order */
    char errs[XSP_SESSION_MAX_SOURCES][ERRLEN];   /* each source's stop message, "" if none */
    uint32_t n_src;                               /* sources added */
    uint32_t n_started;                           /* src[0..n_started) are started */
    uint32_t steps;                               /* step() calls */
    int state;                                    /* enum xsp_session_state */
    int step_open;                                /* a step span is open (M) or counted */
    int numbered;                                 /* xsp_session_set_steps was called */
    uint64_t first_step;                          /* number of the step begun at start */
    uint64_t cut_step;                            /* first step kept; <= first_step: no cut */
    int cut_marked;                               /* step cut_step has begun */
    uint64_t cut_ticks;                           /* the clock then (ticks) */
    uint64_t cut_ns;                              /* the same in ns, set by the merge */
};

/* Begins the step span of the step now current (steps ended so far after the first). */
static void begin_step(xsp_session *s)
{
    char name[32];
    int n = snprintf(name, sizeof name, "step#%llu",
                     (unsigned long long)(s->first_step + s->steps));
    xsp_rec_begin(XSP_LEVEL_M, XSP_KIND_STEP, name, (size_t)n, NULL, 0, STEP_KEY(s->steps), -1,
                  0);
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    return d ? memcpy(d, s, n) : NULL;
}

xsp_session *xsp_session_new(const xsp_config *core, const char *region, const char *levels)
{
    xsp_session *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    if (core)
        s->core = *core;
    s->region = region ? dup_str(region) : NULL;
    s->levels = dup_str(levels ? levels : "");
    if ((region && !s->region) || !s->levels) {
        free(s->region);
        free(s->levels);
        free(s);
        return NULL;
    }
    return s;
}

int xsp_session_add_source(xsp_session *s, const xsp_source *src, char *err, size_t errlen)
{
    const char *why = NULL;
    if (s->state != XSP_SESSION_NEW)
        why = "the session has started";
    else if (s->n_src == XSP_SESSION_MAX_SOURCES)
        why = "too many sources";
    for (uint32_t i = 0; !why && src->hooks && i < s->n_src; i++)
        if (s->src[i].hooks)
            why = "two sources with span hooks";
    if (why) {
        snprintf(err, errlen, "cannot add source %s: %s", src->name, why);
        if (src->release)
            src->release(src->ctx);
        return -1;
    }
    s->src[s->n_src] = *src;
    s->src[s->n_src++].early = src->early != 0;
    return 0;
}

/* Starts the sources with early == e, in order; -1 with "<name>: msg" on the first failure
 * (those started stay started: the caller unwinds them). */
static int start_phase(xsp_session *s, int e, char *err, size_t errlen)
{
    for (uint32_t i = 0; i < s->n_src; i++) {
        xsp_source *src = &s->src[i];
        if (src->early != e || i < s->n_started)
            continue;
        /* sources start in order, so n_started marks the prefix: early ones come first */
        char msg[ERRLEN] = "";
        if (src->start && src->start(src->ctx, msg, sizeof msg) != 0) {
            snprintf(err, errlen, "%s: %s", src->name, msg[0] ? msg : "failed to start");
            return -1;
        }
        s->n_started = i + 1;
    }
    return 0;
}

/* Stops the started sources with early == e, in reverse order.  undo: a start is being undone,
 * and a source without a start function has nothing to undo (the device synchronisation, say,
 * whose stop is for a real stop only). */
static void stop_phase(xsp_session *s, int e, int undo)
{
    for (uint32_t i = s->n_started; i-- > 0;) {
        xsp_source *src = &s->src[i];
        if (src->early != e || (undo && !src->start))
            continue;
        s->errs[i][0] = '\0';
        if (src->stop)
            src->stop(src->ctx, s->errs[i], ERRLEN);
    }
}

/* Early sources before late ones, so that "started" is a prefix of the list. */
static void order_sources(xsp_session *s)
{
    xsp_source tmp[XSP_SESSION_MAX_SOURCES];
    uint32_t n = 0;
    for (int e = 1; e >= 0; e--)
        for (uint32_t i = 0; i < s->n_src; i++)
            if ((s->src[i].early != 0) == e)
                tmp[n++] = s->src[i];
    memcpy(s->src, tmp, n * sizeof tmp[0]);
}

static const xsp_span_hooks *hooks_of(const xsp_session *s)
{
    for (uint32_t i = 0; i < s->n_src; i++)
        if (s->src[i].hooks)
            return s->src[i].hooks;
    return NULL;
}

int xsp_session_start(xsp_session *s, char *err, size_t errlen)
{
    if (s->state != XSP_SESSION_NEW) {
        snprintf(err, errlen, "this session has already run");
        return -1;
    }
    order_sources(s);
    /* the hooks go in with the core's start, under its lock, and out with its stop */
    xsp_config core = s->core;
    core.hooks = hooks_of(s);
    if (xsp_rec_start(&core, err, errlen) != 0) {
        s->state = XSP_SESSION_FAILED;
        return -1;
    }
    if (start_phase(s, 1, err, errlen) != 0)
        goto unwind;
    if (s->region)
        xsp_rec_begin(XSP_LEVEL_M, XSP_KIND_REGION, s->region, strlen(s->region), NULL, 0,
                      REGION_KEY, -1, 0);
    if (start_phase(s, 0, err, errlen) != 0) {
        if (s->region)   /* ended, so that its hook push is popped; the trace is discarded */
            xsp_rec_end(REGION_KEY, XSP_FLAG_ELIDE);
        goto unwind;
    }
    if (s->region)
        begin_step(s);
    s->step_open = s->region != NULL || s->numbered;
    s->state = XSP_SESSION_RECORDING;
    return 0;
unwind:
    stop_phase(s, 0, 1);
    stop_phase(s, 1, 1);
    s->n_started = 0;
    xsp_trace *t = NULL;
    char ignored[64];
    xsp_rec_stop(&t, NULL, ignored, sizeof ignored);   /* removes the hooks */
    xsp_trace_free(t);
    s->state = XSP_SESSION_FAILED;
    return -1;
}

int xsp_session_set_steps(xsp_session *s, uint64_t first, uint64_t cut)
{
    if (s->state != XSP_SESSION_NEW)
        return -1;
    s->numbered = 1;
    s->first_step = first;
    s->cut_step = cut;
    return 0;
}

/* Ends the step span now open (a step() call ended it) and counts it: 0, or -1 when the
 * session is not recording or no step is open. */
static int end_current_step(xsp_session *s)
{
    if (s->state != XSP_SESSION_RECORDING || !s->step_open)
        return -1;
    if (s->region)
        xsp_rec_end(STEP_KEY(s->steps), 0);
    s->steps++;
    return 0;
}

int xsp_session_step(xsp_session *s)
{
    if (end_current_step(s) != 0)
        return -1;
    if (s->cut_step > s->first_step && s->first_step + s->steps == s->cut_step) {
        /* between the end of the last warmup step and the begin of the first active one */
        s->cut_ticks = xsp_rec_now();
        s->cut_marked = 1;
    }
    if (s->region)
        begin_step(s);
    return 0;
}

int xsp_session_end_step(xsp_session *s)
{
    if (end_current_step(s) != 0)
        return -1;
    s->step_open = 0;
    return 0;
}

void xsp_session_detach(xsp_session *s)
{
    if (s->state != XSP_SESSION_RECORDING)
        return;
    /* DETACHED first: a source's stop may run code that calls back (a signal handler that
     * stops or steps the profile), and that must find the session stopping, not recording */
    s->state = XSP_SESSION_DETACHED;
    /* the step still open is ended by the stop, not by a step() call: flagged open at stop
     * (the analyses tell a leftover tail from a step that step() ended by it); an unnumbered
     * session without step() calls has no steps */
    if (s->region && s->step_open)
        xsp_rec_end(STEP_KEY(s->steps), s->steps == 0 && !s->numbered
                                            ? XSP_FLAG_ELIDE
                                            : XSP_FLAG_ELIDE_IF_EMPTY | XSP_FLAG_OPEN_AT_STOP);
    s->step_open = 0;
    stop_phase(s, 0, 0);
    if (s->region)
        xsp_rec_end(REGION_KEY, 0);
}

/* xsp_merge_extra's fn over every source that merges, in order. */
static int merge_all(xsp_trace *t, xsp_resolve_fn resolve, void *rctx, const xsp_clock_map *map,
                     void *arg)
{
    xsp_session *s = arg;
    if (s->cut_marked)
        s->cut_ns = xsp_clock_to_ns(map, s->cut_ticks);
    for (uint32_t i = 0; i < s->n_started; i++)
        if (s->src[i].merge && s->src[i].merge(t, resolve, rctx, map, s->src[i].ctx) != 0)
            return -1;
    return 0;
}

/* The number of step spans in t. */
static uint32_t count_steps(const xsp_trace *t)
{
    uint32_t steps = 0;
    for (uint32_t i = 0; i < t->n_spans; i++)
        steps += t->spans[i].kind == XSP_KIND_STEP;
    return steps;
}

/* The meta every session's trace carries.  0, or -1 on allocation failure. */
static int set_meta(xsp_session *s, xsp_trace *t)
{
    if (xsp_trace_set_meta_str(t, "levels", s->levels) != 0
        || xsp_trace_set_meta_int(t, "steps", count_steps(t)) != 0)
        return -1;
    if (s->region && xsp_trace_set_meta_str(t, "region", s->region) != 0)
        return -1;
    for (uint32_t i = 0; i < s->n_src; i++) {
        if (!s->errs[i][0])
            continue;
        char key[64];
        snprintf(key, sizeof key, "%s_error", s->src[i].name);
        if (xsp_trace_set_meta_str(t, key, s->errs[i]) != 0)
            return -1;
    }
    return 0;
}

int xsp_session_finish(xsp_session *s, xsp_trace **out, char *err, size_t errlen)
{
    *out = NULL;
    if (s->state == XSP_SESSION_RECORDING)
        xsp_session_detach(s);
    if (s->state != XSP_SESSION_DETACHED) {
        snprintf(err, errlen, s->state == XSP_SESSION_DONE ? "this session has already stopped"
                                                            : "this session is not recording");
        return -1;
    }
    stop_phase(s, 1, 0);
    int merges = s->cut_marked;   /* the merge converts the cut's time */
    for (uint32_t i = 0; i < s->n_started; i++)
        merges |= s->src[i].merge != NULL;
    xsp_merge_extra extra = {merge_all, s};
    xsp_trace *t = NULL;
    int rc = xsp_rec_stop(&t, merges ? &extra : NULL, err, errlen);   /* hooks removed */
    s->state = XSP_SESSION_DONE;
    if (rc == 0 && set_meta(s, t) != 0) {
        xsp_trace_free(t);
        snprintf(err, errlen, "out of memory while finishing the trace");
        return -1;
    }
    if (rc != 0)
        return -1;
    *out = t;
    return 0;
}

int xsp_session_cut(xsp_session *s, xsp_trace *t, char *err, size_t errlen)
{
    static const char *const id_keys[] = {"fwd_op", "api"};   /* the span-id attributes:
                                                                 * merge.c, gpu_merge.c */
    if (s->state != XSP_SESSION_DONE || !s->numbered) {
        snprintf(err, errlen, "cut: not a numbered session that has stopped");
        return -1;
    }
    /* the counter first, so that the calls after the drop find their keys and cannot fail */
    if (xsp_trace_add_counter(t, "schedule.unlinked", 0) != 0
        || xsp_trace_set_meta_int(t, "steps", count_steps(t)) != 0) {
        snprintf(err, errlen, "out of memory while cutting the trace");
        return -1;
    }
    if (!s->cut_marked)
        return 0;
    uint64_t unlinked = 0;
    if (xsp_trace_drop_before(t, s->cut_ns, id_keys, 2, &unlinked, err, errlen) != 0)
        return -1;
    xsp_trace_add_counter(t, "schedule.unlinked", (int64_t)unlinked);
    xsp_trace_set_meta_int(t, "steps", count_steps(t));
    return 0;
}

int xsp_session_stop(xsp_session *s, xsp_trace **out, char *err, size_t errlen)
{
    xsp_session_detach(s);
    return xsp_session_finish(s, out, err, errlen);
}

int xsp_session_state(const xsp_session *s)
{
    return s->state;
}

uint32_t xsp_session_steps(const xsp_session *s)
{
    return s->steps;
}

int xsp_schedule_action(const xsp_schedule *sc, uint64_t n)
{
    if (sc->active == 0 || n < sc->skip_first)
        return XSP_SCHED_NONE;
    n -= sc->skip_first;
    uint64_t period = (uint64_t)sc->wait + sc->warmup + sc->active;
    if (sc->repeat && n / period >= sc->repeat)
        return XSP_SCHED_NONE;
    uint64_t k = n % period;
    if (k < sc->wait)
        return XSP_SCHED_NONE;
    if (k < (uint64_t)sc->wait + sc->warmup)
        return XSP_SCHED_WARMUP;
    return k + 1 < period ? XSP_SCHED_ACTIVE : XSP_SCHED_LAST;
}

int xsp_schedule_starts(const xsp_schedule *sc, uint64_t n)
{
    if (xsp_schedule_action(sc, n) == XSP_SCHED_NONE)
        return 0;
    if (n == 0)
        return 1;
    int prev = xsp_schedule_action(sc, n - 1);
    return prev == XSP_SCHED_NONE || prev == XSP_SCHED_LAST;
}

uint64_t xsp_schedule_cycle(const xsp_schedule *sc, uint64_t n)
{
    uint64_t period = (uint64_t)sc->wait + sc->warmup + sc->active;
    return n < sc->skip_first || period == 0 ? 0 : (n - sc->skip_first) / period;
}

uint64_t xsp_schedule_first_active(const xsp_schedule *sc, uint64_t c)
{
    uint64_t period = (uint64_t)sc->wait + sc->warmup + sc->active;
    return sc->skip_first + c * period + sc->wait + sc->warmup;
}

void xsp_session_forget(xsp_session *s)
{
    s->n_started = 0;
    if (s->state == XSP_SESSION_RECORDING || s->state == XSP_SESSION_DETACHED)
        s->state = XSP_SESSION_DONE;
}

void xsp_session_free(xsp_session *s)
{
    if (!s)
        return;
    if (s->state == XSP_SESSION_RECORDING || s->state == XSP_SESSION_DETACHED) {
        xsp_trace *t = NULL;
        char ignored[64];
        xsp_session_stop(s, &t, ignored, sizeof ignored);
        xsp_trace_free(t);
    }
    for (uint32_t i = 0; i < s->n_src; i++)
        if (s->src[i].release)
            s->src[i].release(s->src[i].ctx);
    free(s->region);
    free(s->levels);
    free(s);
}
