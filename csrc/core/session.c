/*
 * session.c: one profiling session, started and stopped whole (see session.h).
 *
 * The session's own spans (region, steps) use keys with bit 54 set: never an address (the
 * torch shim's keys, below 2^47) nor a key of the CPython binding (bit 55 set, modcall.h), and
 * constant, since one session records at a time.
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
};

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
        xsp_rec_begin(XSP_LEVEL_M, XSP_KIND_STEP, "step#0", 6, NULL, 0, STEP_KEY(0), -1, 0);
    s->state = XSP_SESSION_RECORDING;
    return 0;
unwind:
    stop_phase(s, 0, 1);
    stop_phase(s, 1, 1);
    s->n_started = 0;
    xsp_trace *t = NULL;
    char ignored[64];
    xsp_rec_stop(&t, ignored, sizeof ignored);   /* removes the hooks */
    xsp_trace_free(t);
    s->state = XSP_SESSION_FAILED;
    return -1;
}

int xsp_session_step(xsp_session *s)
{
    if (s->state != XSP_SESSION_RECORDING || !s->region)
        return -1;
    xsp_rec_end(STEP_KEY(s->steps), 0);
    s->steps++;
    char name[24];
    int n = snprintf(name, sizeof name, "step#%u", (unsigned)s->steps);
    xsp_rec_begin(XSP_LEVEL_M, XSP_KIND_STEP, name, (size_t)n, NULL, 0, STEP_KEY(s->steps), -1,
                  0);
    return 0;
}

void xsp_session_detach(xsp_session *s)
{
    if (s->state != XSP_SESSION_RECORDING)
        return;
    /* DETACHED first: a source's stop may run code that calls back (a signal handler that
     * stops or steps the profile), and that must find the session stopping, not recording */
    s->state = XSP_SESSION_DETACHED;
    if (s->region)
        xsp_rec_end(STEP_KEY(s->steps), s->steps == 0 ? XSP_FLAG_ELIDE : XSP_FLAG_ELIDE_IF_EMPTY);
    stop_phase(s, 0, 0);
    if (s->region)
        xsp_rec_end(REGION_KEY, 0);
}

/* xsp_merge_extra's fn over every source that merges, in order. */
static int merge_all(xsp_trace *t, xsp_resolve_fn resolve, void *rctx, const xsp_clock_map *map,
                     void *arg)
{
    xsp_session *s = arg;
    for (uint32_t i = 0; i < s->n_started; i++)
        if (s->src[i].merge && s->src[i].merge(t, resolve, rctx, map, s->src[i].ctx) != 0)
            return -1;
    return 0;
}

/* The meta every session's trace carries.  0, or -1 on allocation failure. */
static int set_meta(xsp_session *s, xsp_trace *t)
{
    uint32_t steps = 0;
    for (uint32_t i = 0; i < t->n_spans; i++)
        steps += t->spans[i].kind == XSP_KIND_STEP;
    if (xsp_trace_set_meta_str(t, "levels", s->levels) != 0
        || xsp_trace_set_meta_int(t, "steps", steps) != 0)
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
    int merges = 0;
    for (uint32_t i = 0; i < s->n_started; i++)
        merges |= s->src[i].merge != NULL;
    xsp_merge_extra extra = {merge_all, s};
    xsp_trace *t = NULL;
    int rc = xsp_rec_stop_ex(&t, merges ? &extra : NULL, err, errlen);   /* hooks removed */
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
