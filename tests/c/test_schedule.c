/*
 * test_schedule.c: the step schedule of core/session.h (what each step is, where cycles start,
 * their numbers), and a schedule's cycle as a numbered session: step spans named by the global
 * step number, the cut between the warmup and the first active step read inside step(), the
 * cycle's last step ended without a next one, and xsp_session_cut removing the warmup (backward
 * links into it counted, the region clipped).  Fake clock: every timestamp exact.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "trace_check.h"
#include "core/clock.h"
#include "core/recorder.h"
#include "core/session.h"
#include "core/trace.h"

static int64_t meta_int(const xsp_trace *t, const char *key)
{
    for (uint32_t i = 0; i < t->n_meta; i++)
        if (strcmp(xsp_strtab_get(&t->strings, t->meta[i].key, NULL), key) == 0)
            return t->meta[i].v.i;
    return -999;
}

/* The actions of steps 0..n-1 as letters: . none, w warmup, a active, L last. */
static void actions(const xsp_schedule *sc, unsigned n, char *out)
{
    static const char letters[] = ".waL";
    for (unsigned i = 0; i < n; i++)
        out[i] = letters[xsp_schedule_action(sc, i)];
    out[n] = '\0';
}

static void starts(const xsp_schedule *sc, unsigned n, char *out)
{
    for (unsigned i = 0; i < n; i++)
        out[i] = xsp_schedule_starts(sc, i) ? 'S' : '.';
    out[n] = '\0';
}

static void test_actions(void)
{
    char got[64];
    xsp_schedule a = {.wait = 1, .warmup = 1, .active = 2, .repeat = 2};
    actions(&a, 12, got);
    CHECK(strcmp(got, ".waL.waL....") == 0);
    starts(&a, 12, got);
    CHECK(strcmp(got, ".S...S......") == 0);
    CHECK_EQ_U(xsp_schedule_cycle(&a, 5), 1);
    CHECK_EQ_U(xsp_schedule_cycle(&a, 3), 0);
    CHECK_EQ_U(xsp_schedule_first_active(&a, 0), 2);
    CHECK_EQ_U(xsp_schedule_first_active(&a, 1), 6);

    xsp_schedule b = {.wait = 1, .warmup = 1, .active = 2, .repeat = 1, .skip_first = 3};
    actions(&b, 10, got);
    CHECK(strcmp(got, "....waL...") == 0);
    CHECK_EQ_U(xsp_schedule_cycle(&b, 2), 0);       /* skipped steps: cycle 0 */
    CHECK_EQ_U(xsp_schedule_cycle(&b, 6), 0);
    CHECK_EQ_U(xsp_schedule_first_active(&b, 0), 5);

    xsp_schedule forever = {.active = 1};           /* every step a whole cycle */
    actions(&forever, 5, got);
    CHECK(strcmp(got, "LLLLL") == 0);
    starts(&forever, 5, got);
    CHECK(strcmp(got, "SSSSS") == 0);
    CHECK_EQ_U(xsp_schedule_cycle(&forever, 4), 4);
    CHECK_EQ_U(xsp_schedule_action(&forever, UINT64_C(1) << 40), XSP_SCHED_LAST);

    xsp_schedule back = {.warmup = 1, .active = 2, .skip_first = 1};   /* no wait: back to back */
    actions(&back, 8, got);
    CHECK(strcmp(got, ".waLwaLw") == 0);
    starts(&back, 8, got);
    CHECK(strcmp(got, ".S..S..S") == 0);

    xsp_schedule none = {.wait = 1, .warmup = 1};   /* active 0: nothing is ever recorded */
    actions(&none, 4, got);
    CHECK(strcmp(got, "....") == 0);
    starts(&none, 4, got);
    CHECK(strcmp(got, "....") == 0);
}

/* One cycle as the binding runs it: the session starts at the warmup step 5 (cut at step 6),
 * steps to 6 and 7, the step() that ends 7 ends the cycle. */
static void test_cycle_session(void)
{
    xsp_clock_set_fake(1000, 10);
    char err[256];
    xsp_session *s = xsp_session_new(&(xsp_config){.adopt_roots = 1}, "r", "ML");
    CHECK(s && xsp_session_set_steps(s, 5, 6) == 0);
    CHECK(xsp_session_start(s, err, sizeof err) == 0);   /* core 1000, region 1010, step#5 1020 */
    CHECK(xsp_session_set_steps(s, 0, 0) == -1);          /* only while NEW */
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_OP, "w", 1, NULL, 0, 11, 5, 1);          /* 1030 */
    xsp_rec_end(11, 0);                                                          /* 1040 */
    CHECK(xsp_session_step(s) == 0);       /* step#5 ends 1050, cut 1060, step#6 begins 1070 */
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_OP, "a", 1, NULL, 0, 12, 6, 1);          /* 1080 */
    xsp_rec_end(12, 0);                                                          /* 1090 */
    CHECK(xsp_session_step(s) == 0);                     /* step#6 ends 1100, #7 begins 1110 */
    /* backward functions of both ops: w's (seq 5) from the warmup, a's (seq 6) */
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_BACKWARD, "wb", 2, NULL, 0, 13, 5, 1);   /* 1120 */
    xsp_rec_end(13, 0);                                                          /* 1130 */
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_BACKWARD, "ab", 2, NULL, 0, 14, 6, 1);   /* 1140 */
    xsp_rec_end(14, 0);                                                          /* 1150 */
    CHECK(xsp_session_end_step(s) == 0);                 /* step#7 ends 1160 */
    CHECK(xsp_session_end_step(s) == -1);                /* no step open */
    CHECK(xsp_session_step(s) == -1);
    CHECK_EQ_U(xsp_session_steps(s), 3);
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_OP, "after", 5, NULL, 0, 15, -1, 0);     /* 1170 */
    xsp_rec_end(15, 0);                                                          /* 1180 */
    xsp_trace *t = NULL;
    CHECK(xsp_session_cut(s, t, err, sizeof err) == -1);  /* not stopped yet */
    CHECK(xsp_session_stop(s, &t, err, sizeof err) == 0);  /* region ends 1190, stop 1200 */
    if (!t) {
        xsp_session_free(s);
        return;
    }
    CHECK(xsp_trace_check(t, err, sizeof err) == 0);
    /* the whole recording first: the caller decorates it before the cut */
    static const char *all[] = {"r", "step#5", "w", "step#6", "a", "step#7", "wb", "ab",
                                "after"};
    CHECK_EQ_U(t->n_spans, 9);
    for (uint32_t i = 0; i < 9 && i < t->n_spans; i++)
        CHECK(strcmp(span_name(t, i), all[i]) == 0);
    CHECK_EQ_U(meta_int(t, "steps"), 3);
    CHECK_EQ_U(span_attr_int(t, 6, "fwd_op", -1), 2);
    CHECK(xsp_session_cut(s, t, err, sizeof err) == 0);
    CHECK(xsp_trace_check(t, err, sizeof err) == 0);
    static const char *kept[] = {"r", "step#6", "a", "step#7", "wb", "ab", "after"};
    static const uint32_t parents[] = {XSP_NO_PARENT, 0, 1, 0, 3, 3, 0};
    static const uint64_t st[] = {1060, 1070, 1080, 1110, 1120, 1140, 1170};
    static const uint64_t en[] = {1190, 1100, 1090, 1160, 1130, 1150, 1180};
    static const uint32_t fl[] = {XSP_FLAG_CLIPPED, 0, 0, 0, 0, 0, 0};
    CHECK_EQ_U(t->n_spans, 7);
    for (uint32_t i = 0; i < 7 && i < t->n_spans; i++) {
        CHECK(strcmp(span_name(t, i), kept[i]) == 0);
        CHECK_EQ_U(t->spans[i].parent, parents[i]);
        CHECK_EQ_U(t->spans[i].start_ns, st[i]);
        CHECK_EQ_U(t->spans[i].end_ns, en[i]);
        CHECK_EQ_U(t->spans[i].flags, fl[i]);
    }
    CHECK_EQ_U(span_attr_int(t, 4, "fwd_op", -1), (uint64_t)-1);   /* w was cut off */
    CHECK_EQ_U(span_attr_int(t, 4, "seq", -1), 5);
    CHECK_EQ_U(span_attr_int(t, 5, "fwd_op", -1), 2);              /* a: 4 -> 2 */
    CHECK_EQ_U(xsp_trace_counter(t, "schedule.unlinked"), 1);
    CHECK_EQ_U(meta_int(t, "steps"), 2);
    CHECK_EQ_U(meta_int(t, "start_ns"), 1000);               /* the recording's, unchanged */
    xsp_trace_free(t);
    xsp_session_free(s);
    xsp_clock_set_fake(0, 0);
}

/* A cycle without warmup is not cut; one stopped in its warmup is not cut either; a numbered
 * session keeps its first step without step() calls, counts steps without M spans, and an
 * unnumbered one cannot be cut. */
static void test_no_cut(void)
{
    xsp_clock_set_fake(1000, 10);
    char err[256];
    xsp_session *s = xsp_session_new(NULL, "r", "M");
    CHECK(xsp_session_set_steps(s, 9, 9) == 0);
    CHECK(xsp_session_start(s, err, sizeof err) == 0);   /* 1000, region 1010, step#9 1020 */
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_OP, "x", 1, NULL, 0, 11, -1, 0);         /* 1030 */
    xsp_rec_end(11, 0);                                                          /* 1040 */
    xsp_trace *t = NULL;
    CHECK(xsp_session_stop(s, &t, err, sizeof err) == 0);  /* step#9 1050, region 1060 */
    CHECK(t && xsp_session_cut(s, t, err, sizeof err) == 0);
    if (t) {
        CHECK_EQ_U(t->n_spans, 3);
        CHECK(t->n_spans == 3 && strcmp(span_name(t, 1), "step#9") == 0);
        CHECK_EQ_U(t->spans[0].start_ns, 1010);
        CHECK_EQ_U(t->spans[0].flags, 0);
        CHECK_EQ_U(meta_int(t, "steps"), 1);
        CHECK_EQ_U(xsp_trace_counter(t, "schedule.unlinked"), 0);
    }
    xsp_trace_free(t);
    xsp_session_free(s);

    /* stopped in the warmup (the cut step 4 never began): nothing cut; the empty step open at
     * stop is elided as always */
    s = xsp_session_new(NULL, "r", "M");
    CHECK(xsp_session_set_steps(s, 2, 4) == 0);
    CHECK(xsp_session_start(s, err, sizeof err) == 0);
    CHECK(xsp_session_step(s) == 0);                     /* step#2 ended, step#3 begins */
    t = NULL;
    CHECK(xsp_session_stop(s, &t, err, sizeof err) == 0);
    CHECK(t && xsp_session_cut(s, t, err, sizeof err) == 0);
    if (t) {
        CHECK_EQ_U(t->n_spans, 2);
        CHECK(t->n_spans == 2 && strcmp(span_name(t, 1), "step#2") == 0);
        CHECK_EQ_U(meta_int(t, "steps"), 1);
    }
    xsp_trace_free(t);
    xsp_session_free(s);

    /* without M spans: steps are counted, the cut still read and applied */
    s = xsp_session_new(NULL, NULL, "L");
    CHECK(xsp_session_set_steps(s, 0, 1) == 0);
    CHECK(xsp_session_start(s, err, sizeof err) == 0);   /* 1000 */
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_OP, "w", 1, NULL, 0, 11, -1, 0);
    xsp_rec_end(11, 0);
    CHECK(xsp_session_step(s) == 0);                     /* the cut */
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_OP, "a", 1, NULL, 0, 12, -1, 0);
    xsp_rec_end(12, 0);
    CHECK(xsp_session_end_step(s) == 0);
    CHECK_EQ_U(xsp_session_steps(s), 2);
    t = NULL;
    CHECK(xsp_session_stop(s, &t, err, sizeof err) == 0);
    CHECK(t && xsp_session_cut(s, t, err, sizeof err) == 0);
    if (t) {
        CHECK_EQ_U(t->n_spans, 1);
        CHECK(t->n_spans == 1 && strcmp(span_name(t, 0), "a") == 0);
        CHECK_EQ_U(meta_int(t, "steps"), 0);
    }
    xsp_trace_free(t);
    xsp_session_free(s);

    /* an unnumbered session: no cut, and its steps as before (step#0 elided without step()) */
    s = xsp_session_new(NULL, "r", "M");
    CHECK(xsp_session_start(s, err, sizeof err) == 0);
    t = NULL;
    CHECK(xsp_session_stop(s, &t, err, sizeof err) == 0);
    CHECK(t && t->n_spans == 1);
    CHECK(t && xsp_session_cut(s, t, err, sizeof err) == -1);
    CHECK(strstr(err, "not a numbered session") != NULL);
    xsp_trace_free(t);
    xsp_session_free(s);
    xsp_clock_set_fake(0, 0);
}

int main(void)
{
    test_actions();
    test_cycle_session();
    test_no_cut();
    return CHECK_DONE();
}
