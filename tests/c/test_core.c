/*
 * test_core.c: unit tests of the C core: string interning, the recorder's nesting, keys,
 * caps and loss counting, threads, elision, adoption, backward links, and trace invariants.
 * Run with the fake clock, so every timestamp is known exactly.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "core/clock.h"
#include "core/recorder.h"
#include "core/strtab.h"
#include "core/trace.h"

static const char *name_of(const xsp_trace *t, uint32_t id)
{
    return xsp_strtab_get(&t->strings, t->spans[id].name, NULL);
}

/* Value of integer attribute key of span id, or def. */
static int64_t attr_int(const xsp_trace *t, uint32_t id, const char *key, int64_t def)
{
    const xsp_span *s = &t->spans[id];
    for (uint32_t i = 0; i < s->attr_n; i++) {
        const xsp_attr *a = &t->attrs[s->attr_off + i];
        if (strcmp(xsp_strtab_get(&t->strings, a->key, NULL), key) == 0)
            return a->v.i;
    }
    return def;
}

static const char *attr_str(const xsp_trace *t, uint32_t id, const char *key)
{
    const xsp_span *s = &t->spans[id];
    for (uint32_t i = 0; i < s->attr_n; i++) {
        const xsp_attr *a = &t->attrs[s->attr_off + i];
        if (a->type == XSP_ATTR_STR && strcmp(xsp_strtab_get(&t->strings, a->key, NULL), key) == 0)
            return xsp_strtab_get(&t->strings, a->v.s, NULL);
    }
    return NULL;
}

static void begin(uint8_t kind, const char *name, uint64_t key)
{
    xsp_rec_begin(kind <= XSP_KIND_STEP ? XSP_LEVEL_M : XSP_LEVEL_L, kind, name, strlen(name),
                  NULL, 0, key, -1, 0);
}

static xsp_trace *stop(void)
{
    xsp_trace *t = NULL;
    char err[256];
    CHECK(xsp_session_stop(&t, err, sizeof err) == 0);
    CHECK(t != NULL);
    if (t) {
        CHECK(xsp_trace_check(t, err, sizeof err) == 0);
    }
    return t;
}

static void test_strtab(void)
{
    xsp_strtab t;
    CHECK(xsp_strtab_init(&t) == 0);
    CHECK_EQ_U(xsp_strtab_intern(&t, "", 0), 0);
    uint32_t a = xsp_strtab_intern(&t, "aten::add", 9);
    uint32_t b = xsp_strtab_intern(&t, "aten::mul", 9);
    CHECK_EQ_U(a, 1);
    CHECK_EQ_U(b, 2);
    CHECK_EQ_U(xsp_strtab_intern(&t, "aten::add_extra", 9), a);   /* by length, not NUL */
    char many[32];
    for (int i = 0; i < 5000; i++) {   /* forces slot and arena growth */
        int n = snprintf(many, sizeof many, "name%d", i);
        CHECK_EQ_U(xsp_strtab_intern(&t, many, (size_t)n), 3 + (uint32_t)i);
    }
    for (int i = 0; i < 5000; i += 97) {
        int n = snprintf(many, sizeof many, "name%d", i);
        CHECK_EQ_U(xsp_strtab_intern(&t, many, (size_t)n), 3 + (uint32_t)i);
        size_t len;
        CHECK(strcmp(xsp_strtab_get(&t, 3 + (uint32_t)i, &len), many) == 0 && len == (size_t)n);
    }
    CHECK(xsp_strtab_get(&t, 99999, NULL) == NULL);
    char nul[3] = {'a', 0, 'b'};
    uint32_t c = xsp_strtab_intern(&t, nul, 3);
    CHECK(c != xsp_strtab_intern(&t, "a", 1));
    xsp_strtab_clear(&t);
    CHECK_EQ_U(t.n, 1);
    CHECK_EQ_U(xsp_strtab_intern(&t, "aten::mul", 9), 1);
    xsp_strtab_free(&t);
    xsp_strtab_free(NULL);
}

/* region > model > module > {op > op, op}, with fake clock start 1000 step 10. */
static void test_nesting_exact(void)
{
    xsp_clock_set_fake(1000, 10);
    char err[256];
    CHECK(xsp_session_start(&(xsp_config){0}, err, sizeof err) == 0);   /* reads 1000 */
    CHECK(xsp_session_start(&(xsp_config){0}, err, sizeof err) != 0);   /* refused, no read */
    CHECK(strstr(err, "already active") != NULL);
    begin(XSP_KIND_REGION, "xsp.profile", 1);                 /* 1010 */
    xsp_rec_begin(XSP_LEVEL_M, XSP_KIND_MODEL, "Net", 3, "Net", 3, 2, -1, 0);   /* 1020 */
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_MODULE, "fc", 2, "Linear", 6, 3, -1, 0);   /* 1030 */
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_OP, "aten::linear", 12, NULL, 0, 4, 7, 1); /* 1040 */
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_OP, "aten::addmm", 11, NULL, 0, 5, 7, 1);  /* 1050 */
    xsp_rec_end(5, 0);                                        /* 1060 */
    xsp_rec_end(4, 0);                                        /* 1070 */
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_OP, "aten::relu", 10, NULL, 0, 6, 8, 1);   /* 1080 */
    xsp_rec_end(6, 0);                                        /* 1090 */
    xsp_rec_end(3, 0);                                        /* 1100 */
    xsp_rec_end(2, 0);                                        /* 1110 */
    /* backward of addmm (seq 7, forward thread 1): links to the LAST op with seq 7 */
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_BACKWARD, "AddmmBackward0", 14, NULL, 0, 7, 7, 1); /* 1120 */
    xsp_rec_end(7, 0);                                        /* 1130 */
    xsp_rec_end(1, 0);                                        /* 1140 */
    xsp_rec_end(1234, 0);                                     /* unmatched, reads 1150 */
    xsp_trace *t = stop();                                    /* 1160 */
    xsp_clock_set_fake(0, 0);
    if (!t)
        return;
    CHECK_EQ_U(t->n_spans, 7);
    CHECK_EQ_U(t->n_threads, 1);
    static const char *names[] = {"xsp.profile", "Net", "fc", "aten::linear", "aten::addmm",
                                  "aten::relu", "AddmmBackward0"};
    static const uint32_t parents[] = {XSP_NO_PARENT, 0, 1, 2, 3, 2, 0};
    static const uint64_t starts[] = {1010, 1020, 1030, 1040, 1050, 1080, 1120};
    static const uint64_t ends[] = {1140, 1110, 1100, 1070, 1060, 1090, 1130};
    for (uint32_t i = 0; i < 7; i++) {
        CHECK(strcmp(name_of(t, i), names[i]) == 0);
        CHECK_EQ_U(t->spans[i].parent, parents[i]);
        CHECK_EQ_U(t->spans[i].start_ns, starts[i]);
        CHECK_EQ_U(t->spans[i].end_ns, ends[i]);
        CHECK_EQ_U(t->spans[i].flags, 0);
    }
    CHECK_EQ_U(t->spans[1].level, XSP_LEVEL_M);
    CHECK_EQ_U(t->spans[4].kind, XSP_KIND_OP);
    CHECK(strcmp(attr_str(t, 2, "type"), "Linear") == 0);
    CHECK(strcmp(attr_str(t, 1, "type"), "Net") == 0);
    CHECK_EQ_U(attr_int(t, 3, "seq", -1), 7);
    CHECK_EQ_U(attr_int(t, 6, "fwd_op", -1), 4);   /* aten::addmm, not the enclosing linear */
    CHECK_EQ_U(attr_int(t, 0, "seq", -1), (uint64_t)-1);
    CHECK_EQ_U(xsp_trace_counter(t, "unmatched_end"), 1);
    CHECK_EQ_U(xsp_trace_counter(t, "lost.cap"), 0);
    CHECK_EQ_U(xsp_trace_counter(t, "open_at_stop"), 0);
    xsp_trace_free(t);
}

/* An end with an outer key closes the inner spans (flagged); open spans end at stop. */
static void test_forced_and_open(void)
{
    xsp_clock_set_fake(0, 1);
    char err[256];
    CHECK(xsp_session_start(NULL, err, sizeof err) == 0);    /* 0 */
    begin(XSP_KIND_REGION, "r", 1);                          /* 1 */
    begin(XSP_KIND_MODULE, "m", 2);                          /* 2 */
    begin(XSP_KIND_OP, "a", 3);                              /* 3 */
    begin(XSP_KIND_OP, "b", 4);                              /* 4 */
    xsp_rec_end(2, 0);                                       /* 5: closes b, a, m */
    begin(XSP_KIND_OP, "c", 5);                              /* 6, left open */
    xsp_trace *t = stop();                                   /* 7 */
    xsp_clock_set_fake(0, 0);
    if (!t)
        return;
    CHECK_EQ_U(t->n_spans, 5);
    CHECK_EQ_U(t->spans[2].end_ns, 5);
    CHECK_EQ_U(t->spans[3].flags, XSP_FLAG_FORCED_END);
    CHECK_EQ_U(t->spans[2].flags, XSP_FLAG_FORCED_END);
    CHECK_EQ_U(t->spans[1].flags, 0);
    CHECK_EQ_U(t->spans[0].flags, XSP_FLAG_OPEN_AT_STOP);
    CHECK_EQ_U(t->spans[0].end_ns, 7);
    CHECK_EQ_U(t->spans[4].flags, XSP_FLAG_OPEN_AT_STOP);
    CHECK_EQ_U(t->spans[4].parent, 0);
    CHECK_EQ_U(xsp_trace_counter(t, "forced_end"), 2);
    CHECK_EQ_U(xsp_trace_counter(t, "open_at_stop"), 2);
    xsp_trace_free(t);
}

/* An elided span disappears and its children move to its parent. */
static void test_elide(void)
{
    xsp_clock_set_fake(0, 1);
    char err[256];
    CHECK(xsp_session_start(NULL, err, sizeof err) == 0);
    begin(XSP_KIND_REGION, "r", 1);
    begin(XSP_KIND_STEP, "step#0", 2);
    begin(XSP_KIND_MODEL, "Net", 3);
    begin(XSP_KIND_OP, "a", 4);
    xsp_rec_end(4, 0);
    xsp_rec_end(3, 0);
    xsp_rec_end(2, XSP_FLAG_ELIDE);
    begin(XSP_KIND_STEP, "step#1", 5);   /* empty: elided */
    xsp_rec_end(5, XSP_FLAG_ELIDE_IF_EMPTY);
    begin(XSP_KIND_STEP, "step#2", 6);   /* not empty: kept */
    begin(XSP_KIND_OP, "b", 7);
    xsp_rec_end(7, 0);
    xsp_rec_end(6, XSP_FLAG_ELIDE_IF_EMPTY);
    xsp_rec_end(1, 0);
    xsp_trace *t = stop();
    xsp_clock_set_fake(0, 0);
    if (!t)
        return;
    CHECK_EQ_U(t->n_spans, 5);
    CHECK(strcmp(name_of(t, 1), "Net") == 0);
    CHECK_EQ_U(t->spans[1].parent, 0);
    CHECK_EQ_U(t->spans[2].parent, 1);
    CHECK(strcmp(name_of(t, 3), "step#2") == 0);
    CHECK_EQ_U(t->spans[3].parent, 0);
    CHECK_EQ_U(t->spans[3].flags, 0);
    CHECK_EQ_U(t->spans[4].parent, 3);
    xsp_trace_free(t);
}

/* The memory cap: past it spans are counted, nesting stays right, nothing crashes. */
static void test_cap(void)
{
    char err[256];
    /* cap = one chunk (4096 records * 48 bytes); the pool takes it all. */
    xsp_config cfg = {.max_bytes = 4096 * 48, .pool_bytes = 4096 * 48};
    CHECK(xsp_session_start(&cfg, err, sizeof err) == 0);
    begin(XSP_KIND_REGION, "r", 1);
    for (uint64_t i = 0; i < 10000; i++) {
        begin(XSP_KIND_OP, "outer", 10 + 2 * i);
        begin(XSP_KIND_OP, "inner", 11 + 2 * i);
        xsp_rec_end(11 + 2 * i, 0);
        xsp_rec_end(10 + 2 * i, 0);
    }
    xsp_rec_end(1, 0);
    xsp_trace *t = stop();
    if (!t)
        return;
    CHECK_EQ_U(t->n_spans, 4096);
    CHECK_EQ_U(xsp_trace_counter(t, "lost.cap"), 20001 - 4096);
    CHECK_EQ_U(xsp_trace_counter(t, "unmatched_end"), 0);
    CHECK_EQ_U(xsp_trace_counter(t, "open_at_stop"), 0);
    /* every recorded inner span's parent is an "outer" (or, past the cap, none was lost) */
    for (uint32_t i = 1; i < t->n_spans; i++) {
        if (strcmp(name_of(t, i), "outer") == 0)
            CHECK_EQ_U(t->spans[i].parent, 0);
        else
            CHECK_EQ_U(t->spans[i].parent, i - 1);
    }
    xsp_trace_free(t);
}

/* Nesting deeper than XSP_MAX_DEPTH is counted and the ends still pair up. */
static void test_depth(void)
{
    char err[256];
    CHECK(xsp_session_start(NULL, err, sizeof err) == 0);
    uint64_t n = XSP_MAX_DEPTH + 50;
    for (uint64_t i = 0; i < n; i++)
        begin(XSP_KIND_OP, "deep", i + 1);
    for (uint64_t i = n; i > 0; i--)
        xsp_rec_end(i, 0);
    begin(XSP_KIND_OP, "after", 99999);
    xsp_rec_end(99999, 0);
    xsp_trace *t = stop();
    if (!t)
        return;
    CHECK_EQ_U(t->n_spans, XSP_MAX_DEPTH + 1);
    CHECK_EQ_U(xsp_trace_counter(t, "lost.depth"), 50);
    CHECK_EQ_U(xsp_trace_counter(t, "unmatched_end"), 0);
    CHECK_EQ_U(t->spans[XSP_MAX_DEPTH].parent, XSP_NO_PARENT);
    xsp_trace_free(t);

    /* An enclosing span that ends while spans past the limit are open ends them all (no
     * later end is swallowed as theirs). */
    CHECK(xsp_session_start(NULL, err, sizeof err) == 0);
    for (uint64_t i = 0; i < n; i++)
        begin(XSP_KIND_OP, "deep", i + 1);
    xsp_rec_end(1, 0);                 /* the outermost, out of order */
    for (uint64_t i = n; i > 1; i--)
        xsp_rec_end(i, 0);             /* all unmatched now */
    begin(XSP_KIND_OP, "after", 99999);
    xsp_rec_end(99999, 0);
    t = stop();
    if (!t)
        return;
    CHECK_EQ_U(t->n_spans, XSP_MAX_DEPTH + 1);
    CHECK_EQ_U(xsp_trace_counter(t, "lost.depth"), 50);
    CHECK_EQ_U(xsp_trace_counter(t, "forced_end"), XSP_MAX_DEPTH - 1);
    CHECK_EQ_U(xsp_trace_counter(t, "unmatched_end"), n - 1);
    CHECK_EQ_U(t->spans[XSP_MAX_DEPTH].parent, XSP_NO_PARENT);
    CHECK(strcmp(name_of(t, XSP_MAX_DEPTH), "after") == 0);
    xsp_trace_free(t);
}

#define NTHREADS 4
#define PER_THREAD 20000

static void *worker(void *arg)
{
    uint64_t base = (uint64_t)(uintptr_t)arg * 1000000;
    begin(XSP_KIND_SCOPE, "thread_root", base);
    for (uint64_t i = 1; i <= PER_THREAD; i++) {
        begin(XSP_KIND_OP, "op", base + i);
        xsp_rec_end(base + i, 0);
    }
    xsp_rec_end(base, 0);
    return NULL;
}

/* Threads record concurrently into their own buffers; roots are adopted by the region;
 * the trace stays sorted; threads that exited are harvested. */
static void test_threads(void)
{
    char err[256];
    CHECK(xsp_session_start(&(xsp_config){.adopt_roots = 1}, err, sizeof err) == 0);
    begin(XSP_KIND_REGION, "r", 1);
    pthread_t th[NTHREADS];
    for (uintptr_t i = 0; i < NTHREADS; i++)
        pthread_create(&th[i], NULL, worker, (void *)(i + 1));
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    xsp_rec_end(1, 0);
    xsp_trace *t = stop();
    if (!t)
        return;
    CHECK_EQ_U(t->n_spans, 1 + NTHREADS * (PER_THREAD + 1));
    CHECK_EQ_U(t->n_threads, NTHREADS + 1);
    uint32_t roots = 0, ops = 0;
    for (uint32_t i = 0; i < t->n_spans; i++) {
        const xsp_span *s = &t->spans[i];
        const char *nm = name_of(t, i);
        if (strcmp(nm, "thread_root") == 0) {
            roots++;
            CHECK_EQ_U(s->parent, 0);
        } else if (strcmp(nm, "op") == 0) {
            ops++;
            CHECK(s->parent != XSP_NO_PARENT && s->thread == t->spans[s->parent].thread
                  && strcmp(name_of(t, s->parent), "thread_root") == 0);
        }
    }
    CHECK_EQ_U(roots, NTHREADS);
    CHECK_EQ_U(ops, NTHREADS * PER_THREAD);
    xsp_trace_free(t);
    /* a second session after the threads are gone: nothing stale leaks in */
    CHECK(xsp_session_start(NULL, err, sizeof err) == 0);
    begin(XSP_KIND_OP, "solo", 5);
    xsp_rec_end(5, 0);
    t = stop();
    if (t) {
        CHECK_EQ_U(t->n_spans, 1);
        CHECK_EQ_U(t->n_threads, 1);
        xsp_trace_free(t);
    }
}

/* Recording outside a session does nothing; stop without a session fails cleanly. */
static void test_inactive(void)
{
    begin(XSP_KIND_OP, "nothing", 1);
    xsp_rec_end(1, 0);
    xsp_trace *t = (xsp_trace *)1;
    char err[256];
    CHECK(xsp_session_stop(&t, err, sizeof err) == -1);
    CHECK(t == NULL);
    CHECK(strstr(err, "no recording session") != NULL);
    CHECK(!xsp_session_active());
    /* an end left over from a previous session is counted as unmatched in the next one */
    CHECK(xsp_session_start(NULL, err, sizeof err) == 0);
    begin(XSP_KIND_OP, "leftover", 77);
    t = stop();
    xsp_trace_free(t);
    CHECK(xsp_session_start(NULL, err, sizeof err) == 0);
    xsp_rec_end(77, 0);
    t = stop();
    if (t) {
        CHECK_EQ_U(t->n_spans, 0);
        CHECK_EQ_U(xsp_trace_counter(t, "unmatched_end"), 1);
        xsp_trace_free(t);
    }
}

static void test_trace_check(void)
{
    xsp_trace *t = xsp_trace_new();
    xsp_trace_add_thread(t, 1, "main", 0);
    xsp_span s = {.start_ns = 5, .end_ns = 9, .parent = XSP_NO_PARENT};
    xsp_trace_add_span(t, &s);
    s.parent = 1;   /* not before itself */
    xsp_trace_add_span(t, &s);
    char err[128];
    CHECK(xsp_trace_check(t, err, sizeof err) == -1);
    CHECK(strstr(err, "span 1: parent") != NULL);
    t->spans[1].parent = 0;
    t->spans[1].end_ns = 4;
    CHECK(xsp_trace_check(t, err, sizeof err) == -1);
    CHECK(strstr(err, "ends before") != NULL);
    t->spans[1].end_ns = 6;
    CHECK(xsp_trace_check(t, err, sizeof err) == 0);
    CHECK(xsp_trace_add_counter(t, "lost.cap", 3) == 0 && xsp_trace_add_counter(t, "lost.cap", 4) == 0);
    CHECK_EQ_U(xsp_trace_counter(t, "lost.cap"), 7);
    CHECK(strcmp(xsp_kind_name(XSP_KIND_KERNEL), "kernel") == 0);
    CHECK(strcmp(xsp_kind_name(200), "?") == 0);
    CHECK(strcmp(xsp_level_name(XSP_LEVEL_G), "G") == 0);
    xsp_trace_free(t);
    xsp_trace_free(NULL);
}

/* The pointer cache for NUL-terminated names: a pointer reused for other bytes must not hit. */
static void test_name_cache(void)
{
    char buf[16] = "aten::add";
    char err[256];
    xsp_clock_set_fake(0, 1);
    CHECK(xsp_session_start(NULL, err, sizeof err) == 0);
    for (uint64_t k = 1; k <= 3; k++) {
        xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_OP, buf, XSP_NAME_NUL, NULL, 0, k, -1, 0);
        xsp_rec_end(k, 0);
    }
    strcpy(buf, "aten::ad");      /* shorter, same address */
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_OP, buf, XSP_NAME_NUL, NULL, 0, 4, -1, 0);
    xsp_rec_end(4, 0);
    strcpy(buf, "aten::addmm");   /* longer, same address */
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_OP, buf, XSP_NAME_NUL, NULL, 0, 5, -1, 0);
    xsp_rec_end(5, 0);
    xsp_trace *t = stop();
    xsp_clock_set_fake(0, 0);
    if (!t)
        return;
    CHECK_EQ_U(t->n_spans, 5);
    static const char *names[] = {"aten::add", "aten::add", "aten::add", "aten::ad", "aten::addmm"};
    for (uint32_t i = 0; i < t->n_spans && i < 5; i++)
        CHECK(strcmp(name_of(t, i), names[i]) == 0);
    xsp_trace_free(t);
}

/* The real clock (TSC where the kernel trusts it): a 20 ms sleep measures as 20-200 ms. */
static void test_real_clock(void)
{
    char err[256];
    CHECK(xsp_session_start(NULL, err, sizeof err) == 0);
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_SCOPE, "sleep", 5, NULL, 0, 1, -1, 0);
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    xsp_rec_end(1, 0);
    xsp_trace *t = stop();
    if (!t)
        return;
    CHECK_EQ_U(t->n_spans, 1);
    uint64_t d = t->spans[0].end_ns - t->spans[0].start_ns;
    CHECK(d >= 20000000 && d < 200000000);
    xsp_trace_free(t);
}

int main(void)
{
    test_name_cache();
    test_real_clock();
    test_strtab();
    test_nesting_exact();
    test_forced_and_open();
    test_elide();
    test_cap();
    test_depth();
    test_threads();
    test_inactive();
    test_trace_check();
    return CHECK_DONE();
}
