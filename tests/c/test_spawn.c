/*
 * test_spawn.c: xsp_spawn_link (csrc/core/spawn.h) on hand-made traces: an intra-op root
 * linked to the op that spawned it, past the spawner's own share of the loop (the same op
 * names on thread 0), and the roots it must not link (no enclosing op, enclosing ops on two
 * threads, a spawner with a higher id), with the region adopting every other root.
 */
#include <string.h>

#include "check.h"
#include "core/spawn.h"
#include "core/strtab.h"

static uint32_t name_id(xsp_trace *t, const char *s)
{
    return xsp_strtab_intern(&t->strings, s, strlen(s));
}

static uint32_t add(xsp_trace *t, uint32_t thread, uint8_t kind, const char *name,
                    uint64_t start, uint64_t end, uint32_t parent)
{
    xsp_span s = {.start_ns = start, .end_ns = end, .parent = parent, .thread = thread,
                  .kind = kind, .name = name_id(t, name)};
    return xsp_trace_add_span(t, &s);
}

/* Threads: 0 main, 1 another Python thread, 2 and 3 intra-op pool threads. */
static void test_links_and_refusals(void)
{
    xsp_trace *t = xsp_trace_new();
    xsp_trace_add_thread(t, 100, "MainThread", 0);
    xsp_trace_add_thread(t, 101, "worker", 0);
    xsp_trace_add_thread(t, 102, "intra-op thread 1", 0);
    xsp_trace_add_thread(t, 103, "intra-op thread 1", 0);
    const uint32_t N = XSP_NO_PARENT;
    uint32_t region = add(t, 0, XSP_KIND_REGION, "xsp.profile", 0, 10000, N);      /* 0 */
    uint32_t mod = add(t, 0, XSP_KIND_MODULE, "ConvT", 50, 2000, region);          /* 1 */
    uint32_t conv = add(t, 0, XSP_KIND_OP, "aten::conv", 100, 1000, mod);          /* 2 */
    /* thread 0's share of the loop: the same op names as on the pool */
    uint32_t own = add(t, 0, XSP_KIND_OP, "aten::select", 200, 300, conv);         /* 3 */
    add(t, 0, XSP_KIND_OP, "aten::as_strided", 205, 295, own);                     /* 4 */
    /* a pool root that outlasts thread 0's select: the conv encloses it */
    uint32_t r1 = add(t, 2, XSP_KIND_OP, "aten::select", 210, 320, N);             /* 5 */
    uint32_t r1c = add(t, 2, XSP_KIND_OP, "aten::as_strided", 215, 310, r1);       /* 6 */
    /* one inside thread 0's select and its as_strided: up past both to the conv */
    uint32_t r2 = add(t, 3, XSP_KIND_OP, "aten::select", 220, 280, N);             /* 7 */
    /* the other Python thread, in a parallel op of its own over 400..600 */
    uint32_t w = add(t, 1, XSP_KIND_OP, "aten::mm", 390, 600, N);                  /* 8 */
    /* enclosed by the conv on thread 0 and by the mm on thread 1: ambiguous */
    uint32_t r3 = add(t, 2, XSP_KIND_OP, "aten::select", 400, 420, N);             /* 9 */
    /* under the module but under no op (1500 is past the conv): no spawner */
    uint32_t r4 = add(t, 3, XSP_KIND_OP, "aten::select", 1500, 1600, N);           /* 10 */
    /* past the region's end: left a root */
    uint32_t r5 = add(t, 2, XSP_KIND_OP, "aten::select", 10001, 10002, N);         /* 11 */
    uint8_t pool[4] = {0, 0, 1, 1};
    xsp_spawn_counts c;
    CHECK(xsp_spawn_link(t, pool, 4, &c) == 0);
    CHECK_EQ_U(t->spans[r1].parent, conv);
    CHECK_EQ_U(t->spans[r1c].parent, r1);       /* non-roots keep their parents */
    CHECK_EQ_U(t->spans[r2].parent, conv);
    CHECK_EQ_U(t->spans[r3].parent, region);
    CHECK_EQ_U(t->spans[r4].parent, region);
    CHECK_EQ_U(t->spans[r5].parent, N);
    CHECK_EQ_U(t->spans[w].parent, region);     /* the other thread's root: the region's */
    CHECK_EQ_U(c.linked, 2);
    CHECK_EQ_U(c.ambiguous, 1);
    CHECK_EQ_U(c.unlinked, 2);                  /* r4, and r5 (left a root) */
    char err[128];
    CHECK(xsp_trace_check(t, err, sizeof err) == 0);
    xsp_trace_free(t);
}

/* A spawner that starts at the same ns as the root but has the higher id (another thread
 * ordered first in the merge) is not taken: a parent's id must be below its child's. */
static void test_spawner_after_root_is_refused(void)
{
    xsp_trace *t = xsp_trace_new();
    xsp_trace_add_thread(t, 100, "MainThread", 0);
    xsp_trace_add_thread(t, 102, "intra-op thread 1", 0);
    const uint32_t N = XSP_NO_PARENT;
    uint32_t region = add(t, 0, XSP_KIND_REGION, "xsp.profile", 0, 1000, N);
    uint32_t r = add(t, 1, XSP_KIND_OP, "aten::select", 100, 200, N);
    add(t, 0, XSP_KIND_OP, "aten::conv", 100, 300, region);
    uint8_t pool[2] = {0, 1};
    xsp_spawn_counts c;
    CHECK(xsp_spawn_link(t, pool, 2, &c) == 0);
    CHECK_EQ_U(t->spans[r].parent, region);
    CHECK_EQ_U(c.linked, 0);
    CHECK_EQ_U(c.unlinked, 1);
    xsp_trace_free(t);
}

/* Without pool threads: only the adoption, nothing counted; no region: nothing changes. */
static void test_no_pool(void)
{
    xsp_trace *t = xsp_trace_new();
    xsp_trace_add_thread(t, 100, "MainThread", 0);
    xsp_trace_add_thread(t, 101, "pt_autograd_0", 0);
    const uint32_t N = XSP_NO_PARENT;
    add(t, 0, XSP_KIND_REGION, "xsp.profile", 0, 1000, N);
    uint32_t a = add(t, 1, XSP_KIND_BACKWARD, "MmBackward0", 10, 20, N);
    xsp_spawn_counts c;
    CHECK(xsp_spawn_link(t, NULL, 0, &c) == 0);
    CHECK_EQ_U(t->spans[a].parent, 0);
    CHECK_EQ_U(c.linked + c.unlinked + c.ambiguous, 0);
    xsp_trace_free(t);
    t = xsp_trace_new();
    xsp_trace_add_thread(t, 101, "intra-op thread 1", 0);
    uint32_t b = add(t, 0, XSP_KIND_OP, "aten::select", 10, 20, N);
    uint8_t pool[1] = {1};
    CHECK(xsp_spawn_link(t, pool, 1, NULL) == 0);
    CHECK_EQ_U(t->spans[b].parent, N);
    xsp_trace_free(t);
}

int main(void)
{
    test_links_and_refusals();
    test_spawner_after_root_is_refused();
    test_no_pool();
    return CHECK_DONE();
}
