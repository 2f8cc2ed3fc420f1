/*
 * test_session.c: core/session.c with recording sources that log what is done to them: the
 * order of start and stop (early sources around the region, late ones inside it, reverse order
 * at stop), all-or-nothing start (a failing source unwinds everything before it), the region
 * and step spans, the meta, source messages, and a stop split in halves.  Fake clock: exact.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "core/clock.h"
#include "core/recorder.h"
#include "core/session.h"
#include "core/trace.h"

static char g_log[512];        /* what the sources saw, in order */
static int g_fail_start = -1;  /* index of the source whose start fails, -1: none */
static int g_pushes, g_pops;   /* span hook calls */
static int g_merged;           /* merge calls */
static int g_released;         /* release calls */

static void logf_(const char *what, void *ctx)
{
    size_t n = strlen(g_log);
    snprintf(g_log + n, sizeof g_log - n, "%s%s ", what, (const char *)ctx);
}

static int src_start(void *ctx, char *err, size_t errlen)
{
    logf_("start:", ctx);
    if (g_fail_start >= 0 && ((const char *)ctx)[0] - 'a' == g_fail_start) {
        snprintf(err, errlen, "refused on purpose");
        return -1;
    }
    /* a late source starts inside the region, an early one before it */
    return 0;
}

static void src_stop(void *ctx, char *err, size_t errlen)
{
    logf_("stop:", ctx);
    if (strcmp(ctx, "c") == 0)
        snprintf(err, errlen, "c had trouble");
}

static int src_merge(xsp_trace *t, xsp_resolve_fn resolve, void *rctx, const xsp_clock_map *map,
                     void *ctx)
{
    (void)resolve;
    (void)rctx;
    (void)map;
    (void)ctx;
    g_merged++;
    return xsp_trace_add_counter(t, "merged", 1);
}

static void src_release(void *ctx)
{
    (void)ctx;
    g_released++;
}

static void push(uint64_t id)
{
    (void)id;
    g_pushes++;
}

static void pop(void)
{
    g_pops++;
}

static const xsp_span_hooks HOOKS = {push, pop};

static const char *nm(const xsp_trace *t, uint32_t id)
{
    return xsp_strtab_get(&t->strings, t->spans[id].name, NULL);
}

static const char *meta_str(const xsp_trace *t, const char *key)
{
    for (uint32_t i = 0; i < t->n_meta; i++)
        if (strcmp(xsp_strtab_get(&t->strings, t->meta[i].key, NULL), key) == 0)
            return t->meta[i].type == XSP_ATTR_STR ? xsp_strtab_get(&t->strings, t->meta[i].v.s,
                                                                    NULL)
                                                   : "(not a str)";
    return NULL;
}

static int64_t meta_int(const xsp_trace *t, const char *key)
{
    for (uint32_t i = 0; i < t->n_meta; i++)
        if (strcmp(xsp_strtab_get(&t->strings, t->meta[i].key, NULL), key) == 0)
            return t->meta[i].v.i;
    return -999;
}

/* a (early, hooks, merge), b (late), d (late, a stop but no start: like the device
 * synchronisation), c (late, a message at stop) */
static xsp_session *make(const char *region)
{
    xsp_session *s = xsp_session_new(&(xsp_config){.adopt_roots = 1}, region, "ML");
    char err[128];
    xsp_source b = {.name = "b", .start = src_start, .stop = src_stop, .release = src_release,
                    .ctx = "b"};
    xsp_source a = {.name = "a", .early = 1, .hooks = &HOOKS, .start = src_start,
                    .stop = src_stop, .merge = src_merge, .release = src_release, .ctx = "a"};
    xsp_source c = {.name = "c", .start = src_start, .stop = src_stop, .release = src_release,
                    .ctx = "c"};
    xsp_source d = {.name = "d", .stop = src_stop, .ctx = "d"};
    CHECK(s && xsp_session_add_source(s, &b, err, sizeof err) == 0);
    CHECK(xsp_session_add_source(s, &d, err, sizeof err) == 0);
    CHECK(xsp_session_add_source(s, &a, err, sizeof err) == 0);
    CHECK(xsp_session_add_source(s, &c, err, sizeof err) == 0);
    return s;
}

static void reset(void)
{
    g_log[0] = '\0';
    g_fail_start = -1;
    g_pushes = g_pops = g_merged = g_released = 0;
}

static void test_order_spans_and_meta(void)
{
    reset();
    xsp_clock_set_fake(1000, 10);
    xsp_session *s = make("region");
    char err[256];
    CHECK_EQ_U(xsp_session_state(s), XSP_SESSION_NEW);
    CHECK(xsp_session_start(s, err, sizeof err) == 0);           /* core 1000, region 1010,
                                                                   * step#0 1020 */
    CHECK_EQ_U(xsp_session_state(s), XSP_SESSION_RECORDING);
    CHECK(strcmp(g_log, "start:a start:b start:c ") == 0);
    CHECK(xsp_rec_active() == 1);
    CHECK(xsp_rec_set_hooks(NULL) == -1);                        /* installed, locked in */
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_OP, "op", 2, NULL, 0, 7, -1, 0);   /* 1030 */
    xsp_rec_end(7, 0);                                                     /* 1040 */
    CHECK(xsp_session_step(s) == 0);                             /* step#0 ends 1050, #1 1060 */
    CHECK_EQ_U(xsp_session_steps(s), 1);
    g_log[0] = '\0';
    xsp_trace *t = NULL;
    CHECK(xsp_session_stop(s, &t, err, sizeof err) == 0);       /* #1 ends 1070, empty:
                                                                 * elided; region ends 1080 */
    CHECK(strcmp(g_log, "stop:c stop:d stop:b stop:a ") == 0);
    CHECK_EQ_U(xsp_session_state(s), XSP_SESSION_DONE);
    CHECK(xsp_rec_active() == 0);
    CHECK(xsp_rec_set_hooks(NULL) == 0);                         /* removed by the stop */
    CHECK_EQ_U(g_merged, 1);
    CHECK_EQ_U(g_pushes, 4);                                     /* region, step#0, op, step#1 */
    CHECK_EQ_U(g_pops, 4);
    if (t) {
        CHECK(xsp_trace_check(t, err, sizeof err) == 0);
        CHECK_EQ_U(t->n_spans, 3);
        CHECK(strcmp(nm(t, 0), "region") == 0 && strcmp(nm(t, 1), "step#0") == 0
              && strcmp(nm(t, 2), "op") == 0);
        CHECK_EQ_U(t->spans[0].start_ns, 1010);
        CHECK_EQ_U(t->spans[0].end_ns, 1080);
        CHECK_EQ_U(t->spans[1].start_ns, 1020);
        CHECK_EQ_U(t->spans[1].end_ns, 1050);
        CHECK_EQ_U(t->spans[1].parent, 0);
        CHECK_EQ_U(t->spans[2].parent, 1);
        CHECK_EQ_U(t->spans[1].kind, XSP_KIND_STEP);
        CHECK(meta_str(t, "levels") && strcmp(meta_str(t, "levels"), "ML") == 0);
        CHECK(meta_str(t, "region") && strcmp(meta_str(t, "region"), "region") == 0);
        CHECK_EQ_U(meta_int(t, "steps"), 1);
        CHECK(meta_str(t, "c_error") && strcmp(meta_str(t, "c_error"), "c had trouble") == 0);
        CHECK(meta_str(t, "b_error") == NULL);
        CHECK_EQ_U(xsp_trace_counter(t, "merged"), 1);
    }
    xsp_trace_free(t);
    CHECK(xsp_session_stop(s, &t, err, sizeof err) == -1);       /* once only */
    CHECK(strstr(err, "already stopped") != NULL && t == NULL);
    CHECK(xsp_session_start(s, err, sizeof err) == -1);          /* and never again */
    xsp_session_free(s);
    CHECK_EQ_U(g_released, 3);
    xsp_clock_set_fake(0, 0);
}

static void test_failing_source_unwinds_everything(void)
{
    char err_unused[128];
    for (int fail = 0; fail < 3; fail++) {
        reset();
        g_fail_start = fail;    /* 'a' (early), 'b', 'c' (late) */
        xsp_session *s = make("region");
        char err[256];
        CHECK(xsp_session_start(s, err, sizeof err) == -1);
        char want[64];
        snprintf(want, sizeof want, "%c: refused on purpose", 'a' + fail);
        CHECK(strcmp(err, want) == 0);
        CHECK_EQ_U(xsp_session_state(s), XSP_SESSION_FAILED);
        CHECK(xsp_rec_active() == 0);
        CHECK(xsp_rec_set_hooks(NULL) == 0);                     /* hooks gone */
        /* d has no start: nothing of it to undo, its stop is not called */
        static const char *logs[] = {
            "start:a ",
            "start:a start:b stop:a ",
            "start:a start:b start:c stop:b stop:a ",
        };
        CHECK(strcmp(g_log, logs[fail]) == 0);
        CHECK_EQ_U(g_pushes, g_pops);   /* the region begun before a late source failed ended */
        CHECK_EQ_U(g_pushes, fail ? 1 : 0);
        CHECK_EQ_U(g_merged, 0);
        xsp_trace *t = NULL;
        CHECK(xsp_session_stop(s, &t, err, sizeof err) == -1 && t == NULL);
        xsp_session_free(s);
        CHECK_EQ_U(g_released, 3);
    }
    /* early is a flag: any nonzero value means early, in order and in the phases alike */
    reset();
    xsp_session *e = xsp_session_new(NULL, "r", "G");
    xsp_source two = {.name = "e2", .early = 2, .start = src_start, .stop = src_stop,
                      .ctx = "e"};
    CHECK(xsp_session_add_source(e, &two, err_unused, sizeof err_unused) == 0);
    CHECK(xsp_session_start(e, err_unused, sizeof err_unused) == 0);
    xsp_trace *te = NULL;
    CHECK(xsp_session_stop(e, &te, err_unused, sizeof err_unused) == 0);
    CHECK(strcmp(g_log, "start:e stop:e ") == 0);
    xsp_trace_free(te);
    xsp_session_free(e);
    /* and the next session records normally */
    reset();
    xsp_session *s = make(NULL);
    char err[128];
    CHECK(xsp_session_start(s, err, sizeof err) == 0);
    CHECK(xsp_session_step(s) == -1);                            /* no M spans: no steps */
    xsp_trace *t = NULL;
    CHECK(xsp_session_stop(s, &t, err, sizeof err) == 0);
    CHECK(t && t->n_spans == 0 && meta_str(t, "region") == NULL);
    xsp_trace_free(t);
    xsp_session_free(s);
}

static void test_one_session_at_a_time_and_halves(void)
{
    reset();
    xsp_session *s = make("r1"), *s2 = xsp_session_new(NULL, "r2", "M");
    char err[256];
    CHECK(xsp_session_start(s, err, sizeof err) == 0);
    CHECK(xsp_session_start(s2, err, sizeof err) == -1);
    CHECK(strstr(err, "already active") != NULL);
    CHECK_EQ_U(xsp_session_state(s2), XSP_SESSION_FAILED);
    CHECK(xsp_rec_active() == 1);                                /* the first is untouched */
    xsp_source late = {.name = "x", .start = src_start, .ctx = "x"};
    CHECK(xsp_session_add_source(s, &late, err, sizeof err) == -1);   /* only while NEW */
    g_log[0] = '\0';
    xsp_session_detach(s);                                       /* late sources, region */
    CHECK(strcmp(g_log, "stop:c stop:d stop:b ") == 0);
    CHECK_EQ_U(xsp_session_state(s), XSP_SESSION_DETACHED);
    CHECK(xsp_rec_active() == 1);                                /* the core still records */
    CHECK(xsp_session_step(s) == -1);
    xsp_trace *t = NULL;
    CHECK(xsp_session_finish(s, &t, err, sizeof err) == 0);      /* early sources, merge */
    CHECK(strcmp(g_log, "stop:c stop:d stop:b stop:a ") == 0);
    CHECK(t && t->n_spans == 1 && strcmp(nm(t, 0), "r1") == 0);
    xsp_trace_free(t);
    xsp_session_free(s);
    xsp_session_free(s2);
    /* a session freed while recording is stopped first */
    reset();
    s = make("r3");
    CHECK(xsp_session_start(s, err, sizeof err) == 0);
    xsp_session_free(s);
    CHECK(xsp_rec_active() == 0);
    CHECK(strcmp(g_log, "start:a start:b start:c stop:c stop:d stop:b stop:a ") == 0);
    /* two sources with hooks, too many sources */
    s = xsp_session_new(NULL, NULL, "");
    xsp_source h = {.name = "h", .hooks = &HOOKS, .release = src_release, .ctx = "h"};
    g_released = 0;
    CHECK(xsp_session_add_source(s, &h, err, sizeof err) == 0);
    CHECK(xsp_session_add_source(s, &h, err, sizeof err) == -1);
    CHECK(strstr(err, "two sources with span hooks") != NULL);
    CHECK_EQ_U(g_released, 1);                                   /* the refused one's ctx */
    xsp_source n = {.name = "n", .ctx = "n"};
    for (int i = 0; i < XSP_SESSION_MAX_SOURCES - 1; i++)
        CHECK(xsp_session_add_source(s, &n, err, sizeof err) == 0);
    CHECK(xsp_session_add_source(s, &n, err, sizeof err) == -1);
    CHECK(strstr(err, "too many sources") != NULL);
    xsp_session_free(s);
    CHECK_EQ_U(g_released, 2);                                   /* h's, released by the free */
}

int main(void)
{
    test_order_spans_and_meta();
    test_failing_source_unwinds_everything();
    test_one_session_at_a_time_and_halves();
    return CHECK_DONE();
}
