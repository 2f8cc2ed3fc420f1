/*
 * test_core.c: unit tests of the C core: string interning, the recorder's nesting, keys,
 * caps and loss counting, threads, elision, adoption, backward links, trace invariants, and
 * adding attributes to the spans of a finished trace (xsp_trace_add_span_attrs).
 * Run with the fake clock, so every timestamp is known exactly.
 */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "trace_check.h"
#include "core/clock.h"
#include "core/recorder.h"
#include "core/strtab.h"
#include "core/trace.h"
#include "include/xsp_fast.h"

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
    CHECK(xsp_rec_stop(&t, NULL, err, sizeof err) == 0);
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
    CHECK(xsp_rec_start(&(xsp_config){0}, err, sizeof err) == 0);   /* reads 1000 */
    CHECK(xsp_rec_start(&(xsp_config){0}, err, sizeof err) != 0);   /* refused, no read */
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
        CHECK(strcmp(span_name(t, i), names[i]) == 0);
        CHECK_EQ_U(t->spans[i].parent, parents[i]);
        CHECK_EQ_U(t->spans[i].start_ns, starts[i]);
        CHECK_EQ_U(t->spans[i].end_ns, ends[i]);
        CHECK_EQ_U(t->spans[i].flags, 0);
    }
    CHECK_EQ_U(t->spans[1].level, XSP_LEVEL_M);
    CHECK_EQ_U(t->spans[4].kind, XSP_KIND_OP);
    CHECK(strcmp(attr_str(t, 2, "type"), "Linear") == 0);
    CHECK(strcmp(attr_str(t, 1, "type"), "Net") == 0);
    CHECK_EQ_U(span_attr_int(t, 3, "seq", -1), 7);
    CHECK_EQ_U(span_attr_int(t, 6, "fwd_op", -1), 4);   /* aten::addmm, not the enclosing linear */
    CHECK_EQ_U(span_attr_int(t, 0, "seq", -1), (uint64_t)-1);
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
    CHECK(xsp_rec_start(NULL, err, sizeof err) == 0);    /* 0 */
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
    CHECK(xsp_rec_start(NULL, err, sizeof err) == 0);
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
    CHECK(strcmp(span_name(t, 1), "Net") == 0);
    CHECK_EQ_U(t->spans[1].parent, 0);
    CHECK_EQ_U(t->spans[2].parent, 1);
    CHECK(strcmp(span_name(t, 3), "step#2") == 0);
    CHECK_EQ_U(t->spans[3].parent, 0);
    CHECK_EQ_U(t->spans[3].flags, 0);
    CHECK_EQ_U(t->spans[4].parent, 3);
    xsp_trace_free(t);
}

/* The memory cap: past it spans are counted, nesting stays right, nothing crashes. */
static void test_cap(void)
{
    char err[256];
    /* cap = one log chunk (196608 bytes); the pool takes it all.  Begins take 32 bytes and
     * ends 16; a chunk takes events while 32 bytes remain: "r" (32) and 2047 outer/inner
     * pairs (96 each) leave 64, room for one more pair's begins; their ends, and r's, go to
     * the small chunk past the cap that holds ends of spans begun before it. */
    xsp_config cfg = {.max_bytes = 4096 * 48, .pool_bytes = 4096 * 48};
    CHECK(xsp_rec_start(&cfg, err, sizeof err) == 0);
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
    CHECK_EQ_U(t->n_spans, 1 + 2 * 2048);
    CHECK_EQ_U(xsp_trace_counter(t, "lost.cap"), 20001 - (1 + 2 * 2048));
    CHECK_EQ_U(xsp_trace_counter(t, "unmatched_end"), 0);
    CHECK_EQ_U(xsp_trace_counter(t, "open_at_stop"), 0);
    /* every recorded inner span's parent is an "outer" (or, past the cap, none was lost) */
    for (uint32_t i = 1; i < t->n_spans; i++) {
        if (strcmp(span_name(t, i), "outer") == 0)
            CHECK_EQ_U(t->spans[i].parent, 0);
        else
            CHECK_EQ_U(t->spans[i].parent, i - 1);
    }
    xsp_trace_free(t);
}

/* Past the cap, only the ends of lost spans are skipped, matched by key: a recorded span that
 * ends before a lost one keeps its own end (not force-ended, not open at stop), and a lost
 * span whose end never comes eats no other end. */
static void test_cap_lost_ends(void)
{
    char err[256];
    xsp_config cfg = {.max_bytes = 4096 * 48, .pool_bytes = 4096 * 48};
    for (int scenario = 0; scenario < 2; scenario++) {
        xsp_clock_set_fake(100, 1);
        CHECK(xsp_rec_start(&cfg, err, sizeof err) == 0);       /* 100 */
        begin(XSP_KIND_OP, "A", 1);                                  /* 101 */
        if (scenario == 1)
            begin(XSP_KIND_OP, "C", 3);                              /* 102 */
        for (uint64_t i = 0; i < 5000; i++) {   /* fills the chunk, then is lost */
            begin(XSP_KIND_OP, "x", 10 + i);
            xsp_rec_end(10 + i, 0);             /* every end reads the clock */
        }
        begin(XSP_KIND_OP, "B", 2);             /* lost: no clock reading */
        if (scenario == 1)
            xsp_rec_end(3, 0);                  /* C ends while lost B is open */
        xsp_rec_end(1, 0);                      /* A ends before B */
        if (scenario == 0)
            xsp_rec_end(2, 0);                  /* B's end: skipped; in scenario 1 it never comes */
        xsp_trace *t = stop();
        xsp_clock_set_fake(0, 0);
        if (!t)
            return;
        /* the chunk (196608 bytes, events written while 32 bytes remain) takes the begins of
         * A (and C) and of 4095 x: with C, the last x's end goes to a chunk past the cap */
        uint64_t rx = 4095, first = scenario == 0 ? 102 : 103;
        CHECK_EQ_U(t->n_spans, 1 + scenario + rx);
        CHECK_EQ_U(xsp_trace_counter(t, "lost.cap"), 5000 - rx + 1);
        CHECK_EQ_U(xsp_trace_counter(t, "unmatched_end"), 0);
        CHECK_EQ_U(xsp_trace_counter(t, "open_at_stop"), 0);
        CHECK_EQ_U(xsp_trace_counter(t, "forced_end"), 0);
        /* readings: x recorded 2 each, lost x 1 each (its end); then C's end, then A's */
        uint64_t after = first + 2 * rx + (5000 - rx);
        CHECK(strcmp(span_name(t, 0), "A") == 0);
        CHECK_EQ_U(t->spans[0].start_ns, 101);
        CHECK_EQ_U(t->spans[0].end_ns, after + (uint64_t)scenario);
        CHECK_EQ_U(t->spans[0].flags, 0);
        if (scenario == 1) {
            CHECK(strcmp(span_name(t, 1), "C") == 0);
            CHECK_EQ_U(t->spans[1].end_ns, after);
            CHECK_EQ_U(t->spans[1].flags, 0);
        }
        xsp_trace_free(t);
    }
}

/* A name that no longer fits under the cap loses its span only: names already interned keep
 * recording while the chunks have room. */
static void test_cap_names(void)
{
    char err[256], nm[64];
    xsp_config cfg = {.max_bytes = 4096 * 48 + 20000, .pool_bytes = 4096 * 48};
    CHECK(xsp_rec_start(&cfg, err, sizeof err) == 0);
    uint64_t k = 1;
    for (int i = 0; i < 2000; i++) {
        int n = snprintf(nm, sizeof nm, "unique_name_number_%d", i);
        xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_OP, nm, (size_t)n, NULL, 0, k, -1, 0);
        xsp_rec_end(k++, 0);
    }
    for (int i = 0; i < 100; i++) {
        xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_OP, "unique_name_number_0", 20, NULL, 0, k, -1, 0);
        xsp_rec_end(k++, 0);
    }
    xsp_trace *t = stop();
    if (!t)
        return;
    int64_t lost = xsp_trace_counter(t, "lost.cap");
    CHECK(lost > 0 && lost < 2000);                 /* some new names did not fit */
    CHECK_EQ_U(t->n_spans + (uint64_t)lost, 2100);   /* every span recorded or counted */
    uint32_t repeats = 0;
    for (uint32_t i = 0; i < t->n_spans; i++)
        repeats += strcmp(span_name(t, i), "unique_name_number_0") == 0;
    CHECK_EQ_U(repeats, 101);                       /* the first and all 100 repeats */
    CHECK_EQ_U(xsp_trace_counter(t, "unmatched_end"), 0);
    xsp_trace_free(t);
}

/* Nesting deeper than XSP_MAX_DEPTH is counted and the ends still pair up. */
static void test_depth(void)
{
    char err[256];
    CHECK(xsp_rec_start(NULL, err, sizeof err) == 0);
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
    CHECK(xsp_rec_start(NULL, err, sizeof err) == 0);
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
    CHECK(strcmp(span_name(t, XSP_MAX_DEPTH), "after") == 0);
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
    CHECK(xsp_rec_start(&(xsp_config){.adopt_roots = 1}, err, sizeof err) == 0);
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
        const char *nm = span_name(t, i);
        if (strcmp(nm, "thread_root") == 0) {
            roots++;
            CHECK_EQ_U(s->parent, 0);
        } else if (strcmp(nm, "op") == 0) {
            ops++;
            CHECK(s->parent != XSP_NO_PARENT && s->thread == t->spans[s->parent].thread
                  && strcmp(span_name(t, s->parent), "thread_root") == 0);
        }
    }
    CHECK_EQ_U(roots, NTHREADS);
    CHECK_EQ_U(ops, NTHREADS * PER_THREAD);
    xsp_trace_free(t);
    /* a second session after the threads are gone: nothing stale leaks in */
    CHECK(xsp_rec_start(NULL, err, sizeof err) == 0);
    begin(XSP_KIND_OP, "solo", 5);
    xsp_rec_end(5, 0);
    t = stop();
    if (t) {
        CHECK_EQ_U(t->n_spans, 1);
        CHECK_EQ_U(t->n_threads, 1);
        xsp_trace_free(t);
    }
}

/* The shim's callbacks on x86-64 Linux (csrc/torch/shim.cpp, on_start_fast and on_end_inline),
 * less the RecordFunction: the fast paths of include/xsp_fast.h on the core's buffer, found at
 * the thread-pointer offset xsp_rec_fast_tls gives; what they do not take goes to the core's op
 * entry and exit.  shim_fast counts the begins and ends the inline paths wrote. */
static atomic_uint_least64_t shim_fast;
static void *shim_start(void *ret, uint64_t key, uint32_t tag, int64_t a0, int64_t a1,
                        const char *name)
{
    void *null = NULL;
    memcpy(ret, &null, sizeof null);
#ifdef XSP_FAST_INLINE
    if (xsp_fast_begin(xsp_fast_buf_of(xsp_rec_fast_tls()), key, tag, a0, a1, name)) {
        atomic_fetch_add_explicit(&shim_fast, 1, memory_order_relaxed);
        return ret;
    }
#endif
    return xsp_rec_op_start(ret, key, tag, a0, a1, name);
}

static void shim_end(uint64_t key)
{
#ifdef XSP_FAST_INLINE
    if (xsp_fast_end(xsp_fast_buf_of(xsp_rec_fast_tls()), key)) {
        atomic_fetch_add_explicit(&shim_fast, 1, memory_order_relaxed);
        return;
    }
#endif
    xsp_rec_end_l(key);
}

/* Stop while other threads record on the fast paths (the busy bit in the write pointer,
 * recorder.c fast_enter; thread 0 the core's, thread 1 the shim's inline copy): two threads run ops with a stable name without pause, through 40
 * sessions; each session stops once both threads have finished 100 ops in it, so every stop
 * finds them mid-op or about to be.  Each trace is well-formed, holds only those ops, at
 * least 99 per thread, and none ends before it begins. */
#define RACE_THREADS 2
static atomic_int race_run;
static atomic_uint_least64_t race_ops[RACE_THREADS];

static void *shim_start(void *ret, uint64_t key, uint32_t tag, int64_t a0, int64_t a1,
                        const char *name);
static void shim_end(uint64_t key);

static void *race_worker(void *p)
{
    uintptr_t me = (uintptr_t)p;
    uint64_t key = (me + 1) << 40;
    while (atomic_load(&race_run)) {
        if (me == 0) {       /* the core's fast paths */
            xsp_rec_begin_l(XSP_KIND_OP, "aten::relu", key, 0, 1);
            xsp_rec_end_l(key);
        } else {             /* the shim's inline copy of them (include/xsp_fast.h) */
            void *slot;
            shim_start(&slot, key, XSP_KIND_OP | XSP_OP_TAG, 0, 1, "aten::relu");
            shim_end(key);
        }
        key++;
        atomic_fetch_add(&race_ops[me], 1);
    }
    return NULL;
}

static void test_stop_racing_fast_paths(void)
{
    char err[256];
    pthread_t th[RACE_THREADS];
    atomic_store(&race_run, 1);
    for (uintptr_t i = 0; i < RACE_THREADS; i++)
        pthread_create(&th[i], NULL, race_worker, (void *)i);
    uint32_t bad = 0, few = 0;
    for (int sess = 0; sess < 40; sess++) {
        CHECK(xsp_rec_start(NULL, err, sizeof err) == 0);
        uint64_t at[RACE_THREADS];
        for (int i = 0; i < RACE_THREADS; i++)
            at[i] = atomic_load(&race_ops[i]);
        for (int i = 0; i < RACE_THREADS; i++)
            while (atomic_load(&race_ops[i]) < at[i] + 100)
                sched_yield();
        xsp_trace *t = stop();
        if (!t)
            continue;
        uint32_t per[RACE_THREADS + 1] = {0};
        for (uint32_t k = 0; k < t->n_spans; k++) {
            const xsp_span *sp = &t->spans[k];
            bad += strcmp(span_name(t, k), "aten::relu") != 0 || sp->kind != XSP_KIND_OP
                   || sp->level != XSP_LEVEL_L || sp->end_ns < sp->start_ns;
            if (sp->thread < RACE_THREADS + 1)
                per[sp->thread]++;
        }
        few += t->n_threads != RACE_THREADS || per[0] < 99 || per[1] < 99;
        xsp_trace_free(t);
    }
    atomic_store(&race_run, 0);
    for (int i = 0; i < RACE_THREADS; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ_U(bad, 0);
    CHECK_EQ_U(few, 0);
#ifdef XSP_FAST_INLINE
    if (atomic_load(&xsp_clock_rdtsc))
        CHECK(atomic_load(&shim_fast) > 0);   /* the inline paths ran */
#endif
}

/* Recording outside a session does nothing; stop without a session fails cleanly. */
static void test_inactive(void)
{
    begin(XSP_KIND_OP, "nothing", 1);
    xsp_rec_end(1, 0);
    xsp_trace *t = (xsp_trace *)1;
    char err[256];
    CHECK(xsp_rec_stop(&t, NULL, err, sizeof err) == -1);
    CHECK(t == NULL);
    CHECK(strstr(err, "no recording session") != NULL);
    CHECK(!xsp_rec_active());
    /* an end left over from a previous session is counted as unmatched in the next one */
    CHECK(xsp_rec_start(NULL, err, sizeof err) == 0);
    begin(XSP_KIND_OP, "leftover", 77);
    t = stop();
    xsp_trace_free(t);
    CHECK(xsp_rec_start(NULL, err, sizeof err) == 0);
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
    CHECK(xsp_rec_start(NULL, err, sizeof err) == 0);
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
        CHECK(strcmp(span_name(t, i), names[i]) == 0);
    xsp_trace_free(t);
}

/* name | XSP_NAME_UNSTABLE: xsp_rec_begin_l's name argument for a name that is not stable */
static const char *unstable(const char *name)
{
    return (const char *)((uintptr_t)name | XSP_NAME_UNSTABLE);
}

/* The op entry and exit, xsp_rec_begin_l (or the shim's xsp_rec_op_start) and xsp_rec_end_l,
 * give the same records as the general entries, interleaved with their spans: names seen
 * again at an address (stable or not) are found, names at a reused address are read again, an
 * operator registration (names epoch) makes a stable name be read again, keys keep 56 bits,
 * a1 keeps 32 bits, and thousands of ops cross log chunks.  fake: under the fake clock (exact times; the slow paths,
 * since the fast paths need the TSC); else the real clock (the fast paths where the TSC is the
 * clock; times checked for order and nesting). */
/* The forward-thread function op_entry(fwd) sets: key 8 (its backward node) ran its forward on
 * the thread with RecordFunction id 2^32-1. */
static int fwd_calls = 0;
static int64_t fwd_of(uint64_t key)
{
    fwd_calls++;
    return key == 8 ? INT64_C(0xFFFFFFFF) : -1;
}

/* op_entry's begins: xsp_rec_begin_l, or (op_start_mode) the shim's entry, xsp_rec_op_start,
 * which must also store a null pointer at its first argument and return it, on the fast and the
 * slow paths alike (op_start_bad counts the times it did not). */
static int op_start_mode;   /* 0 xsp_rec_begin_l, 1 xsp_rec_op_start, 2 the shim's inline */
static uint64_t op_start_bad;
static void op_begin(uint32_t kind, const char *name, uint64_t key, int64_t a0, int64_t a1)
{
    if (!op_start_mode) {
        xsp_rec_begin_l(kind, name, key, a0, a1);
        return;
    }
    void *slot = &slot;                           /* not null: the entry must clear it */
    void *r = (op_start_mode == 1 ? xsp_rec_op_start : shim_start)(&slot, key, kind | XSP_OP_TAG,
                                                                   a0, a1, name);
    op_start_bad += r != (void *)&slot || slot != NULL;
}

/* op_entry's ends: xsp_rec_end_l, or (op_start_mode 2) the shim's inline exit */
static void op_end(uint64_t key)
{
    if (op_start_mode == 2)
        shim_end(key);
    else
        xsp_rec_end_l(key);
}

static void op_entry(int fake, int fwd)
{
    char buf[16] = "aten::add";
    char err[256];
    if (fake)
        xsp_clock_set_fake(100, 1);
    CHECK(xsp_rec_start(NULL, err, sizeof err) == 0);                 /* 100 */
    begin(XSP_KIND_REGION, "r", 1);                                       /* 101 */
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_MODULE, "fc", 2, "Linear", 6, 2, -1, 0);   /* 102 */
    uint64_t top = UINT64_C(0xAB) << 56;          /* dropped: keys keep their low 56 bits */
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_OP, "aten::linear", 12, NULL, 0, top | 3,
                  INT64_C(1) << 40, 7);                                   /* 103 */
    op_begin(XSP_KIND_OP, buf, 4, 9, 7);                       /* 104, miss */
    op_end(4);                                                     /* 105 */
    op_begin(XSP_KIND_OP, buf, 5, 10, 7);                      /* 106, hit */
    op_end(5);                                                     /* 107 */
    strcpy(buf, "aten::mul");                     /* same address, other bytes */
    xsp_rec_names_changed();                      /* as the shim's registration listener */
    op_begin(XSP_KIND_OP, buf, 6, 11, 0xFFFFFFFFu);            /* 108 */
    op_end(6);                                                     /* 109 */
    xsp_rec_end(3, 0);                            /* top bits differ: still its end, 110 */
    /* fwd: as the shim, the backward node's own thread id, and the core asks fwd_of */
    if (fwd)
        xsp_rec_set_forward_tid_fn(fwd_of);
    fwd_calls = 0;
    op_begin(XSP_KIND_BACKWARD, unstable("MulBackward0"), 8, 11,
             fwd ? 77 : 0xFFFFFFFFu);                               /* 111 */
    xsp_rec_set_forward_tid_fn(NULL);
    CHECK_EQ_U(fwd_calls, fwd ? 1 : 0);
    op_end(8);                                                     /* 112 */
    xsp_rec_end(2, 0);                                                    /* 113 */
    const uint64_t n = 10000;                     /* 3 log chunks of ops */
    char scope[16] = "scope";                     /* not stable: compared at every sighting */
    for (uint64_t i = 0; i < n; i++) {
        op_begin(i % 100 == 0 ? XSP_KIND_SCOPE : XSP_KIND_OP,
                 i % 100 == 0 ? unstable(scope) : "aten::relu", 100 + i, (int64_t)i, 1);
        op_end(100 + i);
    }
    xsp_rec_end(1, 0);
    xsp_trace *t = stop();
    if (fake)
        xsp_clock_set_fake(0, 0);
    if (!t)
        return;
    CHECK_EQ_U(t->n_spans, 7 + n);
    static const char *names[] = {"r", "fc", "aten::linear", "aten::add", "aten::add",
                                  "aten::mul", "MulBackward0"};
    static const uint32_t parents[] = {XSP_NO_PARENT, 0, 1, 2, 2, 2, 1};
    static const uint64_t starts[] = {101, 102, 103, 104, 106, 108, 111};
    static const uint64_t ends[] = {114 + 2 * n, 113, 110, 105, 107, 109, 112};
    for (uint32_t i = 0; i < 7; i++) {
        CHECK(strcmp(span_name(t, i), names[i]) == 0);
        CHECK_EQ_U(t->spans[i].parent, parents[i]);
        if (fake) {
            CHECK_EQ_U(t->spans[i].start_ns, starts[i]);
            CHECK_EQ_U(t->spans[i].end_ns, ends[i]);
        }
        CHECK_EQ_U(t->spans[i].flags, 0);
        CHECK_EQ_U(t->spans[i].level, i == 0 ? XSP_LEVEL_M : XSP_LEVEL_L);
    }
    CHECK(strcmp(attr_str(t, 1, "type"), "Linear") == 0);
    CHECK_EQ_U(span_attr_int(t, 2, "seq", -1), UINT64_C(1) << 40);
    CHECK_EQ_U(span_attr_int(t, 5, "seq", -1), 11);
    CHECK_EQ_U(span_attr_int(t, 6, "fwd_op", -1), 5);   /* seq 11 on thread 2^32-1: aten::mul */
    CHECK_EQ_U(t->spans[6].kind, XSP_KIND_BACKWARD);
    uint32_t bad = 0;
    for (uint64_t i = 0; i < n; i++) {
        const xsp_span *s = &t->spans[7 + i];
        int sc = i % 100 == 0;
        bad += s->parent != 0 || s->kind != (sc ? XSP_KIND_SCOPE : XSP_KIND_OP)
               || span_attr_int(t, (uint32_t)(7 + i), "seq", -1) != (sc ? -1 : (int64_t)i)
               || strcmp(span_name(t, (uint32_t)(7 + i)), sc ? "scope" : "aten::relu") != 0
               || (fake && (s->start_ns != 114 + 2 * i || s->end_ns != 115 + 2 * i))
               || s->end_ns < s->start_ns
               || (i > 0 && s->start_ns < t->spans[6 + i].end_ns);
    }
    CHECK_EQ_U(bad, 0);
    for (uint32_t i = 1; i < t->n_spans; i++) {   /* children inside their parents */
        const xsp_span *s = &t->spans[i], *p = &t->spans[s->parent];
        if (s->parent != XSP_NO_PARENT)
            bad += s->start_ns < p->start_ns || s->end_ns > p->end_ns;
    }
    CHECK_EQ_U(bad, 0);
    xsp_trace_free(t);
}

static void test_op_entry(void)
{
    for (op_start_mode = 0; op_start_mode < 3; op_start_mode++) {
        op_start_bad = 0;
        uint64_t fast0 = atomic_load(&shim_fast);
        op_entry(1, 0);
        CHECK_EQ_U(atomic_load(&shim_fast), fast0);   /* the fake clock: never a fast path */
        op_entry(0, 0);
        op_entry(1, 1);
        op_entry(0, 1);
        CHECK_EQ_U(op_start_bad, 0);
#ifdef XSP_FAST_INLINE
        /* the real clock: with the TSC, the 10000 ops of two runs take the inline paths but
         * for a few (a name's first sighting, a new chunk, the unstable scope names) */
        if (op_start_mode == 2 && atomic_load(&xsp_clock_rdtsc))
            CHECK(atomic_load(&shim_fast) - fast0 > 2 * 2 * 9000);
        else
            CHECK_EQ_U(atomic_load(&shim_fast), fast0);
#endif
    }
    op_start_mode = 0;
    if (!atomic_load(&xsp_clock_rdtsc))
        printf("  note: the TSC is not the clock here: the op entry's fast path was not run\n");
}

/* The G level's hooks with the op entry: every begin pushes its rank (the slow paths run), every
 * end of a pushed span pops once, an end whose key is not open pops nothing. */
static uint64_t hk_ids[8];
static int hk_push, hk_pop;
static void hk_push_fn(uint64_t id)
{
    if (hk_push < 8)
        hk_ids[hk_push] = id;
    hk_push++;
}
static void hk_pop_fn(void)
{
    hk_pop++;
}

/* A stable name is read again on every thread after names_changed, called from another thread:
 * the caller nulls each buffer's fast-path limit (recorder.c, "The fast paths' limit"), so the
 * owner's next op entry takes the slow path, which marks its slots to be compared again.
 * Thread w records "aten::add" at buf twice (the second a cache hit on the fast path where the
 * TSC is the clock), then, after the main thread has rewritten buf and called names_changed,
 * once more: that span must read "aten::mul". */
typedef struct names_arg {
    char *buf;
    pthread_barrier_t *bar;
} names_arg;

static void *names_worker(void *p)
{
    names_arg *a = p;
    for (uint64_t k = 1; k <= 2; k++) {
        xsp_rec_begin_l(XSP_KIND_OP, a->buf, k, 0, 1);
        xsp_rec_end_l(k);
    }
    pthread_barrier_wait(a->bar);   /* the main thread changes the name */
    pthread_barrier_wait(a->bar);
    xsp_rec_begin_l(XSP_KIND_OP, a->buf, 3, 0, 1);
    xsp_rec_end_l(3);
    return NULL;
}

static void test_names_changed_other_thread(void)
{
    char buf[16] = "aten::add";
    char err[256];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    names_arg a = {buf, &bar};
    CHECK(xsp_rec_start(NULL, err, sizeof err) == 0);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, names_worker, &a) == 0);
    pthread_barrier_wait(&bar);
    strcpy(buf, "aten::mul");
    xsp_rec_names_changed();
    pthread_barrier_wait(&bar);
    pthread_join(th, NULL);
    pthread_barrier_destroy(&bar);
    xsp_trace *t = stop();
    if (!t)
        return;
    CHECK_EQ_U(t->n_spans, 3);
    static const char *names[] = {"aten::add", "aten::add", "aten::mul"};
    for (uint32_t i = 0; i < 3 && i < t->n_spans; i++)
        CHECK(strcmp(span_name(t, i), names[i]) == 0);
    xsp_trace_free(t);
}

static void test_op_entry_hooks(void)
{
    char err[256];
    xsp_span_hooks hooks = {hk_push_fn, hk_pop_fn};
    CHECK(xsp_rec_set_hooks(&hooks) == 0);
    CHECK(xsp_rec_start(NULL, err, sizeof err) == 0);
    xsp_rec_begin_l(XSP_KIND_OP, "aten::linear", 1, 0, 1);
    xsp_rec_begin_l(XSP_KIND_OP, "aten::addmm", 2, 1, 1);
    xsp_rec_end_l(2);
    xsp_rec_end_l(77);                    /* not open: no pop */
    xsp_rec_begin_l(XSP_KIND_OP, "aten::addmm", 3, 2, 1);
    xsp_rec_end_l(1);                     /* closes 3 (forced) and 1: two pops */
    xsp_trace *t = stop();
    CHECK(xsp_rec_set_hooks(NULL) == 0);
    CHECK_EQ_U(hk_push, 3);
    CHECK_EQ_U(hk_pop, 3);
    for (int i = 0; i < 3 && i < hk_push; i++)
        CHECK_EQ_U((uint32_t)hk_ids[i], (uint32_t)i);   /* the begins' ranks */
    if (!t)
        return;
    CHECK_EQ_U(t->n_spans, 3);
    CHECK_EQ_U(t->spans[1].parent, 0);
    CHECK_EQ_U(t->spans[2].parent, 0);
    CHECK_EQ_U(t->spans[2].flags, XSP_FLAG_FORCED_END);
    CHECK_EQ_U(xsp_trace_counter(t, "unmatched_end"), 1);
    xsp_trace_free(t);
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The real clock (TSC where the kernel trusts it): a 20 ms sleep measures as at least 20 ms
 * and at most the CLOCK_MONOTONIC time around it, plus 1 ms for the conversion of ticks to
 * ns (a bound on the clock, not on the machine's load: a slow sleep widens both sides). */
static void test_real_clock(void)
{
    char err[256];
    CHECK(xsp_rec_start(NULL, err, sizeof err) == 0);
    uint64_t before = mono_ns();
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_SCOPE, "sleep", 5, NULL, 0, 1, -1, 0);
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    xsp_rec_end(1, 0);
    uint64_t after = mono_ns();
    xsp_trace *t = stop();
    if (!t)
        return;
    CHECK_EQ_U(t->n_spans, 1);
    uint64_t d = t->spans[0].end_ns - t->spans[0].start_ns;
    CHECK(d >= 20000000 && d <= after - before + 1000000);
    xsp_trace_free(t);
}

static volatile sig_atomic_t g_signals = 0;   /* SIGUSR1s seen by on_signal */

static void on_signal(int signum)
{
    (void)signum;
    g_signals++;
}

/* The fake clock's armed reading raises its signal first, once, in the reading thread; no
 * other reading does, a span's begin in a session is such a reading, and set_fake disarms. */
static void test_fake_clock_signal(void)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, &old) == 0);
    xsp_clock_set_fake(1000, 10);
    xsp_clock_fake_signal(1020, SIGUSR1);
    CHECK_EQ_U(xsp_clock_ns(), 1000);
    CHECK_EQ_U(g_signals, 0);
    CHECK_EQ_U(xsp_clock_ticks(), 1010);
    CHECK_EQ_U(g_signals, 0);
    CHECK_EQ_U(xsp_clock_ns(), 1020);
    CHECK_EQ_U(g_signals, 1);
    CHECK_EQ_U(xsp_clock_ns(), 1030);
    CHECK_EQ_U(g_signals, 1);
    /* in a session: start reads 2000, the begin 2010 (armed), its end 2020, stop 2030 */
    xsp_clock_set_fake(2000, 10);
    xsp_clock_fake_signal(2010, SIGUSR1);
    char err[256];
    CHECK(xsp_rec_start(NULL, err, sizeof err) == 0);
    CHECK_EQ_U(g_signals, 1);
    begin(XSP_KIND_SCOPE, "s", 1);
    CHECK_EQ_U(g_signals, 2);
    xsp_rec_end(1, 0);
    xsp_trace *t = stop();
    CHECK_EQ_U(g_signals, 2);
    if (t) {
        CHECK_EQ_U(t->n_spans, 1);
        CHECK_EQ_U(t->spans[0].start_ns, 2010);
        xsp_trace_free(t);
    }
    /* set_fake disarms; 0 disarms */
    xsp_clock_fake_signal(3010, SIGUSR1);
    xsp_clock_set_fake(3000, 10);
    CHECK_EQ_U(xsp_clock_ns(), 3000);
    CHECK_EQ_U(xsp_clock_ns(), 3010);
    xsp_clock_fake_signal(3020, SIGUSR1);
    xsp_clock_fake_signal(0, SIGUSR1);
    CHECK_EQ_U(xsp_clock_ns(), 3020);
    CHECK_EQ_U(g_signals, 2);
    xsp_clock_set_fake(0, 0);
    CHECK(sigaction(SIGUSR1, &old, NULL) == 0);
}

/* ------------------------------------------------------------------------------------------
 * xsp_trace_add_span_attrs
 * ---------------------------------------------------------------------------------------- */

static uint32_t sid(xsp_trace *t, const char *s)
{
    return xsp_strtab_intern(&t->strings, s, strlen(s));
}

static xsp_attr a_int(xsp_trace *t, const char *key, int64_t v)
{
    return (xsp_attr){.key = sid(t, key), .type = XSP_ATTR_INT, .v.i = v};
}

static xsp_attr a_float(xsp_trace *t, const char *key, double v)
{
    return (xsp_attr){.key = sid(t, key), .type = XSP_ATTR_FLOAT, .v.f = v};
}

static xsp_attr a_str(xsp_trace *t, const char *key, const char *v)
{
    return (xsp_attr){.key = sid(t, key), .type = XSP_ATTR_STR, .v.s = sid(t, v)};
}

/* Five spans on one thread: 0 {type: "Net"}, 1 {}, 2 {seq: 7, w: 1.5}, 3 {}, 4 {type:
 * "Linear"}.  The attribute array is deliberately not in span order (span 4's attribute comes
 * before span 2's) and holds one attribute no span refers to, so the rebuild is seen to put
 * them in order and drop the orphan.  Built the same way every call, so that a second copy can
 * serve as the "unchanged" reference. */
static xsp_trace *attr_trace(void)
{
    xsp_trace *t = xsp_trace_new();
    CHECK(t != NULL);
    if (!t)
        return NULL;
    CHECK_EQ_U(xsp_trace_add_thread(t, 1, "main", 0), 0);
    xsp_attr at[] = {a_str(t, "type", "Net"), a_str(t, "type", "Linear"), a_int(t, "orphan", 9),
                     a_int(t, "seq", 7), a_float(t, "w", 1.5)};
    for (unsigned i = 0; i < 5; i++)
        CHECK_EQ_U(xsp_trace_add_attr(t, &at[i]), i);
    static const struct { uint32_t parent, off; uint16_t n; } sp[] = {
        {XSP_NO_PARENT, 0, 1}, {0, 0, 0}, {0, 3, 2}, {2, 0, 0}, {0, 1, 1}};
    for (uint32_t i = 0; i < 5; i++) {
        xsp_span s = {.start_ns = 10 * i, .end_ns = 100 - i, .parent = sp[i].parent,
                      .name = sid(t, i ? "op" : "root"), .attr_off = sp[i].off,
                      .attr_n = sp[i].n, .level = XSP_LEVEL_L, .kind = XSP_KIND_OP};
        CHECK_EQ_U(xsp_trace_add_span(t, &s), i);
    }
    char err[256];
    CHECK(xsp_trace_check(t, err, sizeof err) == 0);
    return t;
}

/* Byte-exact sameness of what xsp_trace_add_span_attrs may touch (xsp_span and xsp_attr have no
 * padding), plus xsp_trace_equal for the rest. */
static int same_raw(const xsp_trace *a, const xsp_trace *b)
{
    return xsp_trace_equal(a, b) && a->n_spans == b->n_spans && a->n_attrs == b->n_attrs
           && a->strings.n == b->strings.n
           && memcmp(a->spans, b->spans, a->n_spans * sizeof *a->spans) == 0
           && memcmp(a->attrs, b->attrs, a->n_attrs * sizeof *a->attrs) == 0;
}

/* Attribute j of span id has this key and type. */
static int attr_is(const xsp_trace *t, uint32_t id, uint32_t j, const char *key, uint32_t type)
{
    const xsp_span *s = &t->spans[id];
    if (j >= s->attr_n)
        return 0;
    const xsp_attr *a = &t->attrs[s->attr_off + j];
    return a->type == type && strcmp(xsp_strtab_get(&t->strings, a->key, NULL), key) == 0;
}

static const char *attr_sval(const xsp_trace *t, uint32_t id, uint32_t j)
{
    return xsp_strtab_get(&t->strings, t->attrs[t->spans[id].attr_off + j].v.s, NULL);
}

static void test_add_span_attrs(void)
{
    xsp_trace *t = attr_trace(), *ref = attr_trace();
    if (!t || !ref)
        return;
    char err[256];
    uint32_t nstr = t->strings.n;

    /* n == 0 changes nothing, not even the string table */
    CHECK(xsp_trace_add_span_attrs(t, "unused", 0, NULL, NULL, err, sizeof err) == 0);
    CHECK(same_raw(t, ref));

    /* spans with (0, 4) and without (1, 3) attributes; int, float, string and negative values */
    uint32_t ids[] = {0, 1, 3, 4};
    xsp_attr v[] = {{.type = XSP_ATTR_INT, .v.i = 100}, {.type = XSP_ATTR_FLOAT, .v.f = 2.5},
                    {.type = XSP_ATTR_STR, .v.s = sid(t, "big")},
                    {.type = XSP_ATTR_INT, .v.i = -1}};
    CHECK_EQ_U(t->strings.n, nstr + 1);   /* "big" */
    CHECK(xsp_trace_add_span_attrs(t, "flops", 4, ids, v, err, sizeof err) == 0);
    CHECK_EQ_U(t->strings.n, nstr + 2);   /* "flops" */
    CHECK(xsp_trace_check(t, err, sizeof err) == 0);
    CHECK_EQ_U(t->n_attrs, 8);            /* 4 kept (the orphan dropped) + 4 new */
    static const uint32_t offs[] = {0, 2, 3, 5, 6}, ns[] = {2, 1, 2, 1, 2};
    for (uint32_t i = 0; i < 5; i++) {
        CHECK_EQ_U(t->spans[i].attr_off, offs[i]);
        CHECK_EQ_U(t->spans[i].attr_n, ns[i]);
    }
    CHECK(attr_is(t, 0, 0, "type", XSP_ATTR_STR) && strcmp(attr_sval(t, 0, 0), "Net") == 0);
    CHECK(attr_is(t, 0, 1, "flops", XSP_ATTR_INT) && t->attrs[1].v.i == 100);
    CHECK(attr_is(t, 1, 0, "flops", XSP_ATTR_FLOAT) && t->attrs[2].v.f == 2.5);
    CHECK(attr_is(t, 2, 0, "seq", XSP_ATTR_INT) && t->attrs[3].v.i == 7);
    CHECK(attr_is(t, 2, 1, "w", XSP_ATTR_FLOAT) && t->attrs[4].v.f == 1.5);
    CHECK(attr_is(t, 3, 0, "flops", XSP_ATTR_STR) && strcmp(attr_sval(t, 3, 0), "big") == 0);
    CHECK(attr_is(t, 4, 0, "type", XSP_ATTR_STR) && strcmp(attr_sval(t, 4, 0), "Linear") == 0);
    CHECK(attr_is(t, 4, 1, "flops", XSP_ATTR_INT) && t->attrs[7].v.i == -1);
    for (uint32_t i = 0; i < 5; i++) {   /* spans otherwise untouched */
        CHECK_EQ_U(t->spans[i].start_ns, ref->spans[i].start_ns);
        CHECK_EQ_U(t->spans[i].parent, ref->spans[i].parent);
        CHECK_EQ_U(t->spans[i].name, ref->spans[i].name);
    }
    CHECK(!xsp_trace_equal(t, ref));

    /* a key already used by other spans: only the spans named get it */
    uint32_t id2[] = {0, 4};
    xsp_attr v2[] = {{.type = XSP_ATTR_INT, .v.i = 1}, {.type = XSP_ATTR_INT, .v.i = 2}};
    CHECK(xsp_trace_add_span_attrs(t, "seq", 2, id2, v2, err, sizeof err) == 0);
    CHECK(xsp_trace_check(t, err, sizeof err) == 0);
    CHECK_EQ_U(t->n_attrs, 10);
    CHECK_EQ_U(t->spans[0].attr_n, 3);
    CHECK(attr_is(t, 0, 2, "seq", XSP_ATTR_INT) && t->attrs[t->spans[0].attr_off + 2].v.i == 1);
    CHECK(attr_is(t, 2, 0, "seq", XSP_ATTR_INT) && t->attrs[t->spans[2].attr_off].v.i == 7);
    CHECK(attr_is(t, 4, 2, "seq", XSP_ATTR_INT) && t->attrs[t->spans[4].attr_off + 2].v.i == 2);
    xsp_trace_free(t);

    /* every error leaves the trace as it was, byte for byte, string table included */
    struct {
        const char *key;
        uint32_t n, ids[3];
        xsp_attr v[3];
        const char *msg;
    } bad[] = {
        {"k", 2, {1, 1}, {{.type = 0}, {.type = 0}}, "span 1 (ids[1]): not after ids[0] = 1"},
        {"k", 2, {3, 1}, {{.type = 0}, {.type = 0}}, "span 1 (ids[1]): not after ids[0] = 3"},
        {"k", 2, {1, 5}, {{.type = 0}, {.type = 0}},
         "span 5 (ids[1]): no such span (the trace has 5)"},
        {"k", 1, {UINT32_MAX}, {{.type = 0}}, "span 4294967295 (ids[0]): no such span"},
        {"type", 2, {1, 4}, {{.type = 0}, {.type = 0}},
         "span 4 (ids[1]): already has attribute \"type\""},
        {"w", 1, {2}, {{.type = 0}}, "span 2 (ids[0]): already has attribute \"w\""},
        {"k", 2, {0, 3}, {{.type = 0}, {.type = 3}}, "span 3 (ids[1]): unknown value type 3"},
        {"k", 1, {2}, {{.type = XSP_ATTR_STR, .v.s = 1000}},
         "span 2 (ids[0]): string value id 1000 out of range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        t = attr_trace();
        if (!t)
            break;
        err[0] = 0;
        CHECK(xsp_trace_add_span_attrs(t, bad[i].key, bad[i].n, bad[i].ids, bad[i].v, err,
                                       sizeof err) == -1);
        if (!strstr(err, bad[i].msg))
            fprintf(stderr, "case %zu: got \"%s\", want \"%s\"\n", i, err, bad[i].msg);
        CHECK(strstr(err, bad[i].msg) != NULL);
        CHECK(strchr(err, '\n') == NULL);
        CHECK(same_raw(t, ref));
        xsp_trace_free(t);
    }

    /* NULL arguments, an over-long key, a span whose attributes lie outside the array */
    t = attr_trace();
    if (!t)
        return;
    uint32_t one[] = {1};
    xsp_attr v1[] = {{.type = XSP_ATTR_INT, .v.i = 1}};
    CHECK(xsp_trace_add_span_attrs(t, NULL, 1, one, v1, err, sizeof err) == -1);
    CHECK(strstr(err, "must not be NULL") != NULL);
    CHECK(xsp_trace_add_span_attrs(t, "k", 1, NULL, v1, err, sizeof err) == -1);
    CHECK(xsp_trace_add_span_attrs(t, "k", 1, one, NULL, err, sizeof err) == -1);
    char *longkey = malloc(XSP_STRTAB_MAX_LEN + 2);
    CHECK(longkey != NULL);
    if (longkey) {
        memset(longkey, 'x', XSP_STRTAB_MAX_LEN + 1);
        longkey[XSP_STRTAB_MAX_LEN + 1] = 0;
        CHECK(xsp_trace_add_span_attrs(t, longkey, 1, one, v1, err, sizeof err) == -1);
        CHECK(strstr(err, "attribute key of 65536 bytes") != NULL);
        longkey[XSP_STRTAB_MAX_LEN] = 0;    /* the longest allowed */
        xsp_trace *u = attr_trace();
        if (u) {
            CHECK(xsp_trace_add_span_attrs(u, longkey, 1, one, v1, err, sizeof err) == 0);
            CHECK(attr_is(u, 1, 0, longkey, XSP_ATTR_INT));
            xsp_trace_free(u);
        }
        free(longkey);
    }
    CHECK(same_raw(t, ref));
    t->spans[3].attr_off = 4;
    t->spans[3].attr_n = 2;   /* 4..6 of 5 */
    CHECK(xsp_trace_add_span_attrs(t, "k", 1, one, v1, err, sizeof err) == -1);
    CHECK(strstr(err, "span 3: attributes 4..6 out of range (5 attributes)") != NULL);
    CHECK_EQ_U(t->spans[3].attr_off, 4);
    CHECK_EQ_U(t->n_attrs, 5);
    CHECK_EQ_U(t->strings.n, ref->strings.n);
    xsp_trace_free(t);

    /* attr_n is a uint16: a span can reach 65535 attributes, not more */
    t = xsp_trace_new();
    if (!t)
        return;
    xsp_trace_add_thread(t, 1, "main", 0);
    xsp_attr a = a_int(t, "a", 0);
    for (uint32_t i = 0; i < UINT16_MAX - 1; i++)
        xsp_trace_add_attr(t, &a);
    CHECK_EQ_U(t->n_attrs, UINT16_MAX - 1);
    xsp_span s = {.parent = XSP_NO_PARENT, .attr_n = UINT16_MAX - 1};
    xsp_trace_add_span(t, &s);
    uint32_t zero[] = {0};
    CHECK(xsp_trace_add_span_attrs(t, "b", 1, zero, v1, err, sizeof err) == 0);
    CHECK_EQ_U(t->spans[0].attr_n, UINT16_MAX);
    CHECK(attr_is(t, 0, UINT16_MAX - 1, "b", XSP_ATTR_INT));
    uint32_t nstr2 = t->strings.n;
    CHECK(xsp_trace_add_span_attrs(t, "c", 1, zero, v1, err, sizeof err) == -1);
    CHECK(strstr(err, "span 0 (ids[0]): already has 65535 attributes") != NULL);
    CHECK_EQ_U(t->spans[0].attr_n, UINT16_MAX);
    CHECK_EQ_U(t->n_attrs, UINT16_MAX);
    CHECK_EQ_U(t->strings.n, nstr2);
    CHECK(xsp_trace_check(t, err, sizeof err) == 0);
    xsp_trace_free(t);

    /* an empty trace has no span to add to */
    t = xsp_trace_new();
    if (t) {
        CHECK(xsp_trace_add_span_attrs(t, "k", 1, zero, v1, err, sizeof err) == -1);
        CHECK(strstr(err, "span 0 (ids[0]): no such span (the trace has 0)") != NULL);
        CHECK_EQ_U(t->n_attrs, 0);
        CHECK(t->attrs == NULL);
        xsp_trace_free(t);
    }
    xsp_trace_free(ref);
}

/* A model or module span's a0, when not negative, becomes its integer attribute "site" (the
 * index of its call site, turned into source and call_site by the Python binding); -1 gives
 * none, and other kinds never get one. */
static void test_module_site(void)
{
    xsp_clock_set_fake(1000, 10);
    char err[256];
    CHECK(xsp_rec_start(&(xsp_config){0}, err, sizeof err) == 0);
    xsp_rec_begin(XSP_LEVEL_M, XSP_KIND_MODEL, "Net", 3, "Net", 3, 1, 0, 0);        /* 0 */
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_MODULE, "fc", 2, "Linear", 6, 2, 5, 0);     /* 1 */
    xsp_rec_end(2, 0);
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_MODULE, "act", 3, "ReLU", 4, 3, -1, 0);     /* 2 */
    xsp_rec_end(3, 0);
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_SCOPE, "s", 1, NULL, 0, 4, 9, 0);           /* 3 */
    xsp_rec_end(4, 0);
    xsp_rec_end(1, 0);
    xsp_trace *t = stop();
    xsp_clock_set_fake(0, 0);
    if (!t)
        return;
    CHECK_EQ_U(t->n_spans, 4);
    CHECK_EQ_U(span_attr_int(t, 0, "site", -1), 0);
    CHECK_EQ_U(span_attr_int(t, 1, "site", -1), 5);
    CHECK_EQ_U(t->spans[1].attr_n, 2);                  /* type, site */
    CHECK_EQ_U(span_attr_int(t, 2, "site", -1), (uint64_t)-1);
    CHECK_EQ_U(t->spans[2].attr_n, 1);                  /* type only */
    CHECK_EQ_U(t->spans[3].attr_n, 0);
    xsp_trace_free(t);
}

/* with_stack: a record_function scope begun in one Python frame (its __enter__) and ended in
 * another (its __exit__) crosses the python spans: each end closes its span alone, at the
 * start of the span above it, which moves to its parent; nothing is forced or unmatched.  Without python spans an
 * outer end still forces the inner ones (test_forced_and_open). */
static void test_python_spans_cross(void)
{
    xsp_clock_set_fake(0, 1);
    char err[256];
    CHECK(xsp_rec_start(NULL, err, sizeof err) == 0);                        /* 0 */
    begin(XSP_KIND_REGION, "r", 1);                                          /* 1 */
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_PYTHON, "enter", 5, NULL, 0, 10, -1, 0);  /* 2 */
    begin(XSP_KIND_SCOPE, "scope", 20);                                      /* 3 */
    xsp_rec_end(10, 0);                     /* 4: __enter__ returns, the scope stays open */
    begin(XSP_KIND_OP, "a", 40);                                             /* 5 */
    xsp_rec_end(40, 0);                                                      /* 6 */
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_PYTHON, "exit", 4, NULL, 0, 30, -1, 0);   /* 7 */
    xsp_rec_end(20, 0);                     /* 8: the scope ends inside __exit__ */
    xsp_rec_end(30, 0);                                                      /* 9 */
    xsp_rec_end(1, 0);                                                       /* 10 */
    xsp_trace *t = stop();
    xsp_clock_set_fake(0, 0);
    if (!t)
        return;
    CHECK_EQ_U(t->n_spans, 5);
    static const char *names[] = {"r", "enter", "scope", "a", "exit"};
    static const uint32_t parents[] = {XSP_NO_PARENT, 0, 0, 2, 0};
    /* each crossing span ends where the one it crossed begins: enter at the scope's start,
     * the scope at exit's */
    static const uint64_t starts[] = {1, 2, 3, 5, 7}, ends[] = {10, 3, 7, 6, 9};
    for (uint32_t i = 0; i < 5; i++) {
        CHECK(strcmp(span_name(t, i), names[i]) == 0);
        CHECK_EQ_U(t->spans[i].parent, parents[i]);
        CHECK_EQ_U(t->spans[i].start_ns, starts[i]);
        CHECK_EQ_U(t->spans[i].end_ns, ends[i]);
        CHECK_EQ_U(t->spans[i].flags, 0);
    }
    CHECK_EQ_U(t->spans[1].kind, XSP_KIND_PYTHON);
    CHECK_EQ_U(xsp_trace_counter(t, "forced_end"), 0);
    CHECK_EQ_U(xsp_trace_counter(t, "unmatched_end"), 0);
    CHECK(xsp_trace_check(t, err, sizeof err) == 0);
    xsp_trace_free(t);
}

int main(void)
{
    test_name_cache();
    test_op_entry();
    test_names_changed_other_thread();
    test_op_entry_hooks();
    test_real_clock();
    test_fake_clock_signal();
    test_strtab();
    test_nesting_exact();
    test_forced_and_open();
    test_elide();
    test_cap();
    test_cap_lost_ends();
    test_cap_names();
    test_depth();
    test_threads();
    test_stop_racing_fast_paths();
    test_inactive();
    test_trace_check();
    test_add_span_attrs();
    test_module_site();
    test_python_spans_cross();
    return CHECK_DONE();
}
