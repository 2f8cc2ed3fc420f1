/*
 * test_release.c: stop gives the event log back as it reads it (chunk.h, replay.c, merge.c).
 *
 * The same recording, made twice under the fake clock with threads that take turns (so that
 * both runs write the same events at the same readings, interleaved across threads), is
 * stopped once with the early release (the default) and once with every chunk kept until the
 * trace is made (xsp_rec_set_release(0), as stop worked before): the traces must be equal,
 * and so must the span ids the merge's resolver gives the GPU source for each begin's external
 * id (elided spans to their parent).  The release is observed through the count of mapped
 * chunks (xsp_chunk_live), read by a merge extra, which runs after the last span is emitted and
 * before stop frees what is left: none is left mapped then with the release, all of them
 * without; after stop none in either.  The recording covers what stop reads beside begins and
 * ends: inputs and memory payloads, backward links, elided spans, forced ends, unmatched ends,
 * spans open at stop, several log chunks per thread, the pool's chunks, and the cap (lost spans,
 * the small chunks of ends past it).  And a stop that fails after the release leaves nothing
 * mapped and the recorder usable.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/chunk.h"
#include "core/clock.h"
#include "core/inputs.h"
#include "core/recorder.h"
#include "core/strtab.h"
#include "core/trace.h"

#define WORKERS 3
#define BATCHES 120            /* per worker: about 125 spans each, ~15000 spans, 4 chunks */
#define MAX_IDS 20000          /* external ids captured per thread */

/* The external ids pushed on each thread (the GPU hooks' view), in begin order. */
typedef struct ids {
    uint64_t id[MAX_IDS];
    uint32_t n;
} ids;
static ids g_ids[WORKERS + 1];          /* [WORKERS]: the main thread */
static _Thread_local ids *t_ids;        /* this thread's entry */
static _Atomic int g_turn;              /* the worker whose batch is next */

static void push_id(uint64_t ext)
{
    if (t_ids && t_ids->n < MAX_IDS)
        t_ids->id[t_ids->n++] = ext;
}
static void pop_id(void) {}

/* What the merge extra saw. */
typedef struct seen {
    uint64_t live;                      /* xsp_chunk_live() after the last span was emitted */
    uint32_t span[WORKERS + 1][MAX_IDS];/* resolve() of each captured external id */
    uint32_t elided, elided_parent;     /* resolve() of worker 0's first elided span, and its
                                         * parent's */
} seen;

/* Begin indices (ranks on worker 0) of the first elided span and of its parent. */
static uint32_t g_elided_ord, g_elided_parent_ord;

static int extra_fn(xsp_trace *t, xsp_resolve_fn resolve, void *rctx, const xsp_clock_map *map,
                    void *arg)
{
    (void)t;
    (void)map;
    seen *s = arg;
    s->live = xsp_chunk_live();
    for (int w = 0; w <= WORKERS; w++)
        for (uint32_t i = 0; i < g_ids[w].n; i++)
            s->span[w][i] = resolve(rctx, g_ids[w].id[i]);
    s->elided = resolve(rctx, g_ids[0].id[g_elided_ord]);
    s->elided_parent = resolve(rctx, g_ids[0].id[g_elided_parent_ord]);
    return 0;
}

static void begin(uint8_t kind, const char *name, const char *name2, uint64_t key, int64_t a0,
                  int64_t a1)
{
    xsp_rec_begin(kind <= XSP_KIND_STEP ? XSP_LEVEL_M : XSP_LEVEL_L, kind, name, strlen(name),
                  name2, name2 ? strlen(name2) : 0, key, a0, a1);
}

/* An op's inputs as the shim encodes them (inputs.h): one float tensor of n elements. */
static void inputs(int64_t n)
{
    uint8_t b[64];
    uint32_t k = 0;
    uint16_t count = 1;
    b[k++] = XSP_IN_VERSION;
    b[k++] = 0;                        /* no overload name */
    b[k++] = XSP_IN_SCHEMA;
    memcpy(b + k, &count, 2);
    k += 2;
    b[k++] = 'T';
    b[k++] = 6;                        /* float */
    b[k++] = 1;                        /* one dimension */
    b[k++] = 1;                        /* with strides */
    int64_t one = 1;
    memcpy(b + k, &n, 8);
    k += 8;
    memcpy(b + k, &one, 8);
    k += 8;
    xsp_rec_data(XSP_DATA_INPUTS, b, k);
}

static void mem(int64_t size, int64_t total)
{
    xsp_mem_event ev = {size, total, 0, 0};
    xsp_rec_data(XSP_DATA_MEM, &ev, sizeof ev);
}

/* One batch of worker w: a module call around ops with inputs and memory, a backward
 * function linked to the previous batch's op, an elided empty scope, an elided span with a
 * child, an unmatched end and, every seventh batch, a forced end.  The module span stays open
 * until the worker's next batch, across the other workers' turns. */
static void batch(int w, uint32_t b, uint64_t *ord)
{
    uint64_t base = ((uint64_t)w + 1) << 40 | (uint64_t)b << 16;
    if (b > 0)
        xsp_rec_end((((uint64_t)w + 1) << 40 | (uint64_t)(b - 1) << 16) | 1, 0);
    begin(XSP_KIND_MODULE, "layer", "Linear", base | 1, b, 0);
    uint64_t layer_ord = (*ord)++;
    begin(XSP_KIND_OP, "aten::mm", NULL, base | 2, b, w);   /* seq b on RecordFunction thread w */
    (*ord)++;
    inputs(1 + b % 5);
    mem(256, 256 + b);
    mem(-256, b);
    xsp_rec_end(base | 2, 0);
    for (uint64_t i = 0; i < 100; i++) {
        begin(XSP_KIND_OP, "aten::add", NULL, base | (100 + i), -1, 0);
        (*ord)++;
        xsp_rec_end(base | (100 + i), 0);
    }
    if (b > 0) {
        begin(XSP_KIND_BACKWARD, "MmBackward0", NULL, base | 3, b - 1, w);
        (*ord)++;
        xsp_rec_end(base | 3, 0);
    }
    if (w == 0 && b == 1) {
        g_elided_parent_ord = (uint32_t)layer_ord;
        g_elided_ord = (uint32_t)*ord;           /* "empty", just below */
    }
    begin(XSP_KIND_SCOPE, "empty", NULL, base | 4, -1, 0);  /* elided: no children */
    (*ord)++;
    xsp_rec_end(base | 4, XSP_FLAG_ELIDE_IF_EMPTY);
    begin(XSP_KIND_SCOPE, "wrapper", NULL, base | 5, -1, 0);   /* elided, its child moves up */
    (*ord)++;
    begin(XSP_KIND_OP, "aten::relu", NULL, base | 6, -1, 0);
    (*ord)++;
    xsp_rec_end(base | 6, 0);
    xsp_rec_end(base | 5, XSP_FLAG_ELIDE);
    xsp_rec_end(base | 7, 0);                                  /* never begun */
    if (b % 7 == 0) {
        begin(XSP_KIND_OP, "outer", NULL, base | 8, -1, 0);
        begin(XSP_KIND_OP, "inner", NULL, base | 9, -1, 0);   /* forced: outer ends first */
        *ord += 2;
        xsp_rec_end(base | 8, 0);
    }
}

static void *worker(void *arg)
{
    int w = (int)(uintptr_t)arg;
    t_ids = &g_ids[w];
    uint64_t ord = 0;
    for (uint32_t b = 0; b < BATCHES; b++) {
        while (atomic_load(&g_turn) != w)
            sched_yield();
        batch(w, b, &ord);
        atomic_store(&g_turn, (w + 1) % WORKERS);
    }
    /* the last batch's module span stays open: ended at stop */
    return NULL;
}

/* One recording, stopped with the release or without.  Returns the trace (tids replaced by
 * the track's index, the one thing that differs between runs) and fills s. */
static xsp_trace *run(const xsp_config *cfg, int release, seen *s)
{
    char err[256];
    memset(g_ids, 0, sizeof g_ids);
    t_ids = &g_ids[WORKERS];
    atomic_store(&g_turn, 0);
    xsp_span_hooks hooks = {push_id, pop_id};
    CHECK(xsp_rec_set_hooks(&hooks) == 0);
    xsp_rec_set_release(release);
    xsp_clock_set_fake(1000, 10);
    CHECK(xsp_rec_start(cfg, err, sizeof err) == 0);
    begin(XSP_KIND_REGION, "r", NULL, 1, -1, 0);
    pthread_t th[WORKERS];
    for (uintptr_t w = 0; w < WORKERS; w++)   /* they attach in turn order: the same tracks */
        pthread_create(&th[w], NULL, worker, (void *)w);
    for (int w = 0; w < WORKERS; w++)
        pthread_join(th[w], NULL);
    xsp_rec_end(1, 0);
    uint64_t live_before = xsp_chunk_live();
    memset(s, 0, sizeof *s);
    xsp_merge_extra extra = {extra_fn, s};
    xsp_trace *t = NULL;
    CHECK(xsp_rec_stop(&t, &extra, err, sizeof err) == 0);
    xsp_clock_set_fake(0, 0);
    CHECK(xsp_rec_set_hooks(NULL) == 0);
    xsp_rec_set_release(1);
    CHECK(t != NULL);
    CHECK(live_before > 0);                      /* chunks were mapped past the pool */
    if (release)
        CHECK_EQ_U(s->live, 0);                  /* all given back before the trace was done */
    else                                         /* all kept, but for the spares (at most two
                                                  * a thread) the replay did not fill */
        CHECK(s->live > 0 && s->live + 2 * (WORKERS + 1) >= live_before);
    CHECK_EQ_U(xsp_chunk_live(), 0);             /* none left behind by either */
    if (t) {
        CHECK(xsp_trace_check(t, err, sizeof err) == 0);
        for (uint32_t i = 0; i < t->n_threads; i++)
            t->threads[i].tid = i;
    }
    return t;
}

/* The released and the kept stop of the same recording under cfg give equal traces and
 * resolve every external id alike. */
static void compare(const xsp_config *cfg, int capped)
{
    seen *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    CHECK(a && b);
    if (!a || !b) {
        free(a);
        free(b);
        return;
    }
    xsp_trace *kept = run(cfg, 0, b);
    xsp_trace *rel = run(cfg, 1, a);
    if (kept && rel) {
        CHECK(xsp_trace_equal(rel, kept));
        CHECK(memcmp(a->span, b->span, sizeof a->span) == 0);
        CHECK_EQ_U(a->elided, a->elided_parent);   /* an elided span: its parent's id */
        CHECK(a->elided != XSP_NO_PARENT);
        CHECK(strcmp(xsp_strtab_get(&rel->strings, rel->spans[a->elided].name, NULL),
                     "layer") == 0);
        CHECK(a->span[0][0] != XSP_NO_PARENT);     /* worker 0's first "layer" */
        int64_t lost = xsp_trace_counter(rel, "lost.cap");
        CHECK(capped ? lost > 0 : lost == 0);
        CHECK(xsp_trace_counter(rel, "unmatched_end") > 0);
        if (!capped) {
            CHECK_EQ_U(xsp_trace_counter(rel, "open_at_stop"), WORKERS);
            CHECK_EQ_U(xsp_trace_counter(rel, "unmatched_end"), WORKERS * BATCHES);
            CHECK_EQ_U(xsp_trace_counter(rel, "forced_end"), WORKERS * ((BATCHES + 6) / 7));
            /* the region, and per batch: layer, mm, 100 adds, relu, and a backward after the
             * first, outer and inner every seventh (the elided two are gone) */
            CHECK_EQ_U(rel->n_spans, 1 + WORKERS * (BATCHES * 103 + (BATCHES - 1)
                                                    + 2 * ((BATCHES + 6) / 7)));
            CHECK_EQ_U(rel->n_threads, WORKERS + 1);
        }
    }
    xsp_trace_free(rel);
    xsp_trace_free(kept);
    free(a);
    free(b);
}

static int failing_extra(xsp_trace *t, xsp_resolve_fn resolve, void *rctx,
                         const xsp_clock_map *map, void *arg)
{
    (void)t;
    (void)resolve;
    (void)rctx;
    (void)map;
    *(uint64_t *)arg = xsp_chunk_live();
    return -1;
}

/* A stop that fails after the merge gave the records back (a further source out of memory)
 * frees what is left and ends the session: a second stop finds none, the next session works,
 * and no chunk stays mapped. */
static void test_failed_stop(void)
{
    char err[256];
    xsp_rec_set_release(1);
    CHECK(xsp_rec_start(&(xsp_config){.pool_bytes = 1}, err, sizeof err) == 0);
    for (uint64_t i = 0; i < 3 * 4096; i++) {
        begin(XSP_KIND_OP, "aten::add", NULL, 10 + i, -1, 0);
        if (i % 2)
            inputs(4);
        xsp_rec_end(10 + i, 0);
    }
    begin(XSP_KIND_OP, "open", NULL, 5, -1, 0);
    CHECK(xsp_chunk_live() >= 3);
    uint64_t live = UINT64_MAX;
    xsp_merge_extra extra = {failing_extra, &live};
    xsp_trace *t = (xsp_trace *)1;
    CHECK(xsp_rec_stop(&t, &extra, err, sizeof err) == -1);
    CHECK(t == NULL);
    CHECK(strstr(err, "out of memory") != NULL);
    CHECK_EQ_U(live, 0);                     /* given back before the failure */
    CHECK_EQ_U(xsp_chunk_live(), 0);
    CHECK(!xsp_rec_active());
    CHECK(xsp_rec_stop(&t, NULL, err, sizeof err) == -1);
    CHECK(strstr(err, "no recording session") != NULL);
    CHECK(xsp_rec_start(&(xsp_config){.pool_bytes = 1}, err, sizeof err) == 0);
    begin(XSP_KIND_OP, "after", NULL, 6, -1, 0);
    xsp_rec_end(6, 0);
    xsp_rec_end(5, 0);                       /* the failed session's: unmatched here */
    t = NULL;
    CHECK(xsp_rec_stop(&t, NULL, err, sizeof err) == 0);
    if (t) {
        CHECK_EQ_U(t->n_spans, 1);
        CHECK_EQ_U(xsp_trace_counter(t, "unmatched_end"), 1);
        xsp_trace_free(t);
    }
    CHECK_EQ_U(xsp_chunk_live(), 0);
}

int main(void)
{
    static const char *const dtypes[] = {"unsigned char", "signed char", "short int", "int",
                                         "long int", "c10::Half", "float", "double"};
    CHECK(xsp_inputs_set_dtype_names(dtypes, 8) == 0);
    /* no pool: every chunk mapped */
    compare(&(xsp_config){.pool_bytes = 1}, 0);
    /* a pool of three chunks: its chunks hold log and records and are never unmapped */
    compare(&(xsp_config){.pool_bytes = 3 * 4096 * 48}, 0);
    /* a cap of eight chunks: spans lost, ends past the cap in small chunks */
    compare(&(xsp_config){.pool_bytes = 1, .max_bytes = 8 * 4096 * 48}, 1);
    test_failed_stop();
    return CHECK_DONE();
}
