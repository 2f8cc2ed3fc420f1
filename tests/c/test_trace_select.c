/*
 * test_trace_select.c: xsp_trace_drop_before, the schedule's cut of a cycle's warmup steps, on
 * hand-built traces with exact expectations: which spans are kept (they reach past t0 and their
 * parent is kept), the new ids and parents, the clipped starts and their flag, the span-id
 * attributes remapped or dropped and counted, the trace unchanged on bad input, and the edges
 * (t0 = 0 keeps everything, a t0 past every span keeps nothing).
 */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "trace_check.h"
#include "core/trace.h"

static const char *const ID_KEYS[] = {"fwd_op", "api"};

typedef struct {
    uint64_t start, end;
    uint32_t parent, thread, flags;
    const char *name;
    uint8_t kind;
    const char *k1;   /* up to two integer attributes: key, value */
    int64_t v1;
    const char *k2;
    int64_t v2;
} spec;

#define NP XSP_NO_PARENT

static uint32_t intern(xsp_trace *t, const char *s)
{
    return xsp_strtab_intern(&t->strings, s, strlen(s));
}

static xsp_trace *build(const spec *sp, uint32_t n, uint32_t threads)
{
    xsp_trace *t = xsp_trace_new();
    CHECK(t != NULL);
    if (!t)
        return NULL;
    for (uint32_t i = 0; i < threads; i++)
        CHECK(xsp_trace_add_thread(t, 100 + i, NULL, i == 2 ? 1 : 0) == i);
    for (uint32_t i = 0; i < n; i++) {
        xsp_span s = {.start_ns = sp[i].start, .end_ns = sp[i].end, .parent = sp[i].parent,
                      .name = intern(t, sp[i].name), .thread = sp[i].thread,
                      .attr_off = t->n_attrs, .level = sp[i].kind >= XSP_KIND_RUNTIME
                                                       ? XSP_LEVEL_G : XSP_LEVEL_L,
                      .kind = sp[i].kind, .flags = sp[i].flags};
        const char *keys[2] = {sp[i].k1, sp[i].k2};
        int64_t vals[2] = {sp[i].v1, sp[i].v2};
        for (int k = 0; k < 2; k++) {
            if (!keys[k])
                continue;
            xsp_attr a = {.key = intern(t, keys[k]), .type = XSP_ATTR_INT, .v.i = vals[k]};
            CHECK(xsp_trace_add_attr(t, &a) != UINT32_MAX);
            s.attr_n++;
        }
        CHECK(xsp_trace_add_span(t, &s) == i);
    }
    return t;
}

/* A warmup step (step#1) and an active one (step#2) under a region and a record_function scope
 * around the loop; another thread's span across the cut and one before it; GPU kernels under a
 * dropped op and under a kept backward; backward links to a dropped and to a kept op. */
static const spec LOOP[] = {
    /*  start  end  parent thread flags name       kind               attributes */
    {100, 1000, NP, 0, 0, "region", XSP_KIND_REGION, NULL, 0, NULL, 0},            /* 0 */
    {105, 950, 0, 0, 0, "loop", XSP_KIND_SCOPE, NULL, 0, NULL, 0},                 /* 1 */
    {110, 400, 1, 0, 0, "step#1", XSP_KIND_STEP, NULL, 0, NULL, 0},                /* 2 */
    {120, 200, 2, 0, 0, "opA", XSP_KIND_OP, "seq", 5, NULL, 0},                    /* 3 */
    {210, 390, 2, 0, 0, "opB", XSP_KIND_OP, NULL, 0, NULL, 0},                     /* 4 */
    {220, 300, 4, 0, 0, "opC", XSP_KIND_OP, NULL, 0, NULL, 0},                     /* 5 */
    {250, 450, NP, 1, 1, "X", XSP_KIND_OP, NULL, 0, NULL, 0},                      /* 6 */
    {260, 280, 6, 1, 0, "Y", XSP_KIND_OP, NULL, 0, NULL, 0},                       /* 7 */
    {380, 700, 4, 2, 0, "K1", XSP_KIND_KERNEL, "api", 4, NULL, 0},                 /* 8 */
    {405, 405, 0, 0, 0, "Z", XSP_KIND_SCOPE, NULL, 0, NULL, 0},                    /* 9 */
    {410, 900, 1, 0, 0, "step#2", XSP_KIND_STEP, NULL, 0, NULL, 0},                /* 10 */
    {420, 500, 10, 0, 0, "opD", XSP_KIND_OP, "seq", 7, NULL, 0},                   /* 11 */
    {510, 600, 10, 0, 0, "bwd1", XSP_KIND_BACKWARD, "seq", 5, "fwd_op", 3},        /* 12 */
    {610, 700, 10, 0, 0, "bwd2", XSP_KIND_BACKWARD, "seq", 7, "fwd_op", 11},       /* 13 */
    {620, 640, 13, 2, 0, "K2", XSP_KIND_KERNEL, "api", 13, "fwd_op", 99},          /* 14 */
};
#define NLOOP (sizeof LOOP / sizeof LOOP[0])

static void test_cut_exact(void)
{
    xsp_trace *t = build(LOOP, NLOOP, 3);
    if (!t)
        return;
    char err[256];
    CHECK(xsp_trace_check(t, err, sizeof err) == 0);
    uint64_t unlinked = 77;
    CHECK(xsp_trace_drop_before(t, 405, ID_KEYS, 2, &unlinked, err, sizeof err) == 0);
    CHECK(xsp_trace_check(t, err, sizeof err) == 0);
    /* kept: region and loop (clipped), X (clipped, across the cut on its own thread), Z (starts
     * at t0), step#2 and everything under it.  Dropped: step#1 (ends at 400) and its subtree,
     * K1 (its op was dropped, though it ends after t0), Y (ends before t0). */
    static const char *names[] = {"region", "loop", "X", "Z", "step#2", "opD", "bwd1", "bwd2",
                                  "K2"};
    static const uint32_t parents[] = {NP, 0, NP, 0, 1, 4, 4, 4, 7};
    static const uint64_t starts[] = {405, 405, 405, 405, 410, 420, 510, 610, 620};
    static const uint64_t ends[] = {1000, 950, 450, 405, 900, 500, 600, 700, 640};
    static const uint32_t flags[] = {16, 16, 17, 0, 0, 0, 0, 0, 0};
    static const uint32_t threads[] = {0, 0, 1, 0, 0, 0, 0, 0, 2};
    static const uint16_t nattr[] = {0, 0, 0, 0, 0, 1, 1, 2, 1};
    CHECK_EQ_U(t->n_spans, 9);
    for (uint32_t i = 0; i < 9 && i < t->n_spans; i++) {
        CHECK(strcmp(span_name(t, i), names[i]) == 0);
        CHECK_EQ_U(t->spans[i].parent, parents[i]);
        CHECK_EQ_U(t->spans[i].start_ns, starts[i]);
        CHECK_EQ_U(t->spans[i].end_ns, ends[i]);
        CHECK_EQ_U(t->spans[i].flags, flags[i]);
        CHECK_EQ_U(t->spans[i].thread, threads[i]);
        CHECK_EQ_U(t->spans[i].attr_n, nattr[i]);
    }
    CHECK_EQ_U(XSP_FLAG_CLIPPED, 16);
    /* attributes rebuilt in span order; span ids remapped, lost targets dropped and counted:
     * bwd1's fwd_op (opA was dropped) and K2's fwd_op 99 (no such span) */
    CHECK_EQ_U(t->n_attrs, 5);
    CHECK_EQ_U(span_attr_int(t, 5, "seq", -1), 7);
    CHECK_EQ_U(span_attr_int(t, 6, "seq", -1), 5);
    CHECK_EQ_U(span_attr_int(t, 6, "fwd_op", -1), (uint64_t)-1);
    CHECK_EQ_U(span_attr_int(t, 7, "seq", -1), 7);
    CHECK_EQ_U(span_attr_int(t, 7, "fwd_op", -1), 5);        /* opD: 11 -> 5 */
    CHECK_EQ_U(span_attr_int(t, 8, "api", -1), 7);           /* bwd2: 13 -> 7 */
    CHECK_EQ_U(span_attr_int(t, 8, "fwd_op", -1), (uint64_t)-1);
    CHECK_EQ_U(unlinked, 2);
    for (uint32_t i = 1; i < t->n_spans; i++)
        CHECK_EQ_U(t->spans[i].attr_off, t->spans[i - 1].attr_off + t->spans[i - 1].attr_n);
    CHECK_EQ_U(t->n_threads, 3);                    /* tracks stay */
    /* a second cut at the same t0 changes nothing more */
    CHECK(xsp_trace_drop_before(t, 405, ID_KEYS, 2, NULL, err, sizeof err) == 0);
    CHECK_EQ_U(t->n_spans, 9);
    CHECK_EQ_U(t->n_attrs, 5);
    xsp_trace_free(t);
}

static void test_edges(void)
{
    char err[256];
    /* t0 = 0: everything kept as it was */
    xsp_trace *t = build(LOOP, NLOOP, 3), *ref = build(LOOP, NLOOP, 3);
    if (!t || !ref)
        return;
    uint64_t unlinked = 5;
    CHECK(xsp_trace_drop_before(t, 0, ID_KEYS, 2, &unlinked, err, sizeof err) == 0);
    CHECK_EQ_U(t->n_spans, NLOOP);
    CHECK_EQ_U(unlinked, 1);                        /* K2's fwd_op 99 names no span */
    CHECK_EQ_U(span_attr_int(t, 12, "fwd_op", -1), 3);
    CHECK_EQ_U(span_attr_int(t, 8, "api", -1), 4);
    for (uint32_t i = 0; i < NLOOP; i++) {
        CHECK_EQ_U(t->spans[i].start_ns, ref->spans[i].start_ns);
        CHECK_EQ_U(t->spans[i].flags, ref->spans[i].flags);
        CHECK_EQ_U(t->spans[i].parent, ref->spans[i].parent);
    }
    xsp_trace_free(t);
    /* without id keys nothing is remapped or dropped from the attributes */
    t = build(LOOP, NLOOP, 3);
    CHECK(xsp_trace_drop_before(t, 0, NULL, 0, &unlinked, err, sizeof err) == 0);
    CHECK_EQ_U(unlinked, 0);
    CHECK(xsp_trace_equal(t, ref));
    xsp_trace_free(t);
    /* a t0 past every span: nothing left */
    t = build(LOOP, NLOOP, 3);
    CHECK(xsp_trace_drop_before(t, 5000, ID_KEYS, 2, &unlinked, err, sizeof err) == 0);
    CHECK_EQ_U(t->n_spans, 0);
    CHECK_EQ_U(t->n_attrs, 0);
    CHECK_EQ_U(unlinked, 0);
    CHECK(xsp_trace_check(t, err, sizeof err) == 0);
    xsp_trace_free(t);
    /* an empty trace */
    t = xsp_trace_new();
    CHECK(t && xsp_trace_drop_before(t, 10, ID_KEYS, 2, &unlinked, err, sizeof err) == 0);
    CHECK(t && t->n_spans == 0);
    xsp_trace_free(t);
    /* a span that ends exactly at t0 is before the cut; one that starts there is after it */
    static const spec EDGE[] = {
        {10, 20, NP, 0, 0, "ends_at_t0", XSP_KIND_OP, NULL, 0, NULL, 0},
        {20, 20, NP, 0, 0, "empty_at_t0", XSP_KIND_OP, NULL, 0, NULL, 0},
        {20, 30, NP, 0, 0, "starts_at_t0", XSP_KIND_OP, NULL, 0, NULL, 0},
    };
    t = build(EDGE, 3, 1);
    CHECK(xsp_trace_drop_before(t, 20, ID_KEYS, 2, NULL, err, sizeof err) == 0);
    CHECK_EQ_U(t->n_spans, 2);
    CHECK(t->n_spans == 2 && strcmp(span_name(t, 0), "empty_at_t0") == 0
          && strcmp(span_name(t, 1), "starts_at_t0") == 0 && t->spans[0].flags == 0);
    xsp_trace_free(t);
    xsp_trace_free(ref);
}

static void test_bad_input_leaves_the_trace_unchanged(void)
{
    char err[256];
    xsp_trace *t = build(LOOP, NLOOP, 3), *ref = build(LOOP, NLOOP, 3);
    if (!t || !ref)
        return;
    t->spans[5].parent = 7;                         /* a parent after its child */
    ref->spans[5].parent = 7;
    uint64_t unlinked = 9;
    CHECK(xsp_trace_drop_before(t, 405, ID_KEYS, 2, &unlinked, err, sizeof err) == -1);
    CHECK(strcmp(err, "span 5: parent 7 is not before it") == 0);
    CHECK(xsp_trace_equal(t, ref));
    CHECK_EQ_U(unlinked, 0);
    t->spans[5].parent = ref->spans[5].parent = 4;
    t->spans[3].attr_n = 40;                        /* attributes past the array */
    CHECK(xsp_trace_drop_before(t, 405, ID_KEYS, 2, NULL, err, sizeof err) == -1);
    CHECK(strstr(err, "span 3: attributes") != NULL);
    CHECK_EQ_U(t->n_spans, NLOOP);
    t->spans[3].attr_n = 1;
    CHECK(xsp_trace_equal(t, ref));
    CHECK(xsp_trace_drop_before(t, 405, NULL, 2, NULL, err, sizeof err) == -1);
    CHECK(strstr(err, "id_keys") != NULL);
    CHECK(xsp_trace_equal(t, ref));
    xsp_trace_free(t);
    xsp_trace_free(ref);
}

int main(void)
{
    test_cut_exact();
    test_edges();
    test_bad_input_leaves_the_trace_unchanged();
    return CHECK_DONE();
}
