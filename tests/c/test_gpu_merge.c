/*
 * test_gpu_merge.c: the GPU records joined to the CPU trace at stop (csrc/gpu/gpu_merge.c),
 * without a GPU: a real recording session (fake clock) whose span hooks capture the external
 * ids the core pushes, and a GPU store filled by hand with the records CUPTI would deliver.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "check.h"
#include "gpu_fill.h"
#include "core/clock.h"
#include "core/recorder.h"
#include "gpu/activity.h"
#include "core/session.h"
#include "gpu/gpu_merge.h"

static uint64_t pushed[64];     /* external ids pushed, in order */
static int n_pushed, depth, max_depth;

static void fake_push(uint64_t id)
{
    pushed[n_pushed++] = id;
    if (++depth > max_depth)
        max_depth = depth;
}

static void fake_pop(void)
{
    depth--;
}

static const char *nm(const xsp_trace *t, uint32_t id)
{
    return xsp_strtab_get(&t->strings, t->spans[id].name, NULL);
}

static int64_t attr(const xsp_trace *t, uint32_t id, const char *key)
{
    const xsp_span *s = &t->spans[id];
    for (uint32_t i = 0; i < s->attr_n; i++) {
        const xsp_attr *a = &t->attrs[s->attr_off + i];
        if (strcmp(xsp_strtab_get(&t->strings, a->key, NULL), key) == 0)
            return a->v.i;
    }
    return -999;
}

static uint32_t find(const xsp_trace *t, const char *name, int nth)
{
    for (uint32_t i = 0; i < t->n_spans; i++)
        if (strcmp(nm(t, i), name) == 0 && nth-- == 0)
            return i;
    return UINT32_MAX;
}

static void release_store(void *ctx)
{
    xsp_gpu_store_free(ctx);
}

static void begin(uint8_t level, uint8_t kind, const char *name, uint64_t key, int64_t seq)
{
    xsp_rec_begin(level, kind, name, strlen(name), NULL, 0, key, seq, 1);
}

int main(void)
{
    char err[256];
    /* the real session (core/session.c) with a GPU source whose records the test writes into
     * its store by hand: the hooks, the core, the merge and the hooks' removal are the
     * session's (no M spans of its own: the test records the region itself) */
    xsp_span_hooks hooks = {fake_push, fake_pop};
    xsp_gpu_store *s = xsp_gpu_store_new(0);
    xsp_session *sess = xsp_session_new(&(xsp_config){.adopt_roots = 1}, NULL, "MLG");
    xsp_source gpu = {.name = "gpu", .early = 1, .hooks = &hooks, .merge = xsp_gpu_merge,
                      .release = release_store, .ctx = s};
    CHECK(sess && xsp_session_add_source(sess, &gpu, err, sizeof err) == 0);
    xsp_clock_set_fake(1000, 10);
    CHECK(xsp_session_start(sess, err, sizeof err) == 0);     /* 1000 */
    CHECK(xsp_rec_set_hooks(NULL) == -1);                /* refused while recording */
    begin(XSP_LEVEL_M, XSP_KIND_REGION, "region", 1, -1);   /* 1010, push #0 */
    begin(XSP_LEVEL_L, XSP_KIND_OP, "aten::mm", 2, 5);      /* 1020, push #1 */
    xsp_rec_end(2, 0);                                      /* 1030 */
    begin(XSP_LEVEL_L, XSP_KIND_OP, "aten::add", 3, -1);    /* 1040, push #2 */
    xsp_rec_end(3, 0);                                      /* 1050 */
    begin(XSP_LEVEL_L, XSP_KIND_BACKWARD, "MmBackward0", 4, 5); /* 1060, push #3 */
    xsp_rec_end(4, 0);                                      /* 1070 */
    xsp_rec_end(1, 0);                                      /* 1080 */
    CHECK_EQ_U(n_pushed, 4);
    CHECK_EQ_U(depth, 0);
    CHECK_EQ_U(max_depth, 2);
    uint64_t ext_region = pushed[0], ext_mm = pushed[1], ext_add = pushed[2];
    CHECK_EQ_U(ext_mm & 0xFFFFFFFFu, 1);                    /* record index 1 on its buffer */
    CHECK_EQ_U(ext_mm >> 32, ext_region >> 32);             /* same buffer, same session */

    uint32_t tid = (uint32_t)syscall(SYS_gettid);
    /* aten::mm launches a kernel (corr 10) */
    fill_ext(s, ext_mm, 5, 10);
    fill_ext(s, 777, 0, 10);                                 /* another tool's kind: ignored */
    xsp_gpu_rec *r = fill_rec(s, XSP_KIND_RUNTIME, "cudaLaunchKernel", 1022, 1026, 10);
    r->u.api.tid = tid;
    r = fill_rec(s, XSP_KIND_KERNEL, "gemm_kernel", 1100, 1300, 10);
    r->device = 0;
    r->stream = 7;
    r->u.kernel.grid[0] = 64; r->u.kernel.grid[1] = 2; r->u.kernel.grid[2] = 1;
    r->u.kernel.block[0] = 256; r->u.kernel.block[1] = 1; r->u.kernel.block[2] = 1;
    r->u.kernel.regs = 32;
    r->u.kernel.smem_static = 1024;
    r->u.kernel.smem_dynamic = 2048;
    /* aten::add: a graph launch (corr 12) replaying two kernels, listed before their call */
    r = fill_rec(s, XSP_KIND_KERNEL, "graph_k1", 1400, 1410, 12);
    r->device = 0; r->stream = 7; r->u.kernel.graph_id = 3; r->u.kernel.graph_node = 30;
    /* a mangled kernel name (as CUPTI reports them): demangled, once per distinct name */
    r = fill_rec(s, XSP_KIND_KERNEL, "_Z8graph_k2Pfi", 1420, 1430, 12);
    r->device = 0; r->stream = 7; r->u.kernel.graph_id = 3; r->u.kernel.graph_node = 31;
    fill_ext(s, ext_add, 5, 12);
    r = fill_rec(s, XSP_KIND_RUNTIME, "cudaGraphLaunch", 1042, 1046, 12);
    r->u.api.tid = tid;
    /* a copy launched under the region only (no op open): corr 11 */
    fill_ext(s, ext_region, 5, 11);
    r = fill_rec(s, XSP_KIND_DRIVER, "cuMemcpyHtoDAsync", 1052, 1054, 11);
    r->u.api.tid = tid;
    r = fill_rec(s, XSP_KIND_MEMCPY, "Memcpy HtoD", 1060, 1070, 11);
    r->device = 0; r->stream = 0; r->u.copy.bytes = 4096; r->u.copy.copy_kind = 1;
    /* a stream synchronisation (corr 13) under the region */
    fill_ext(s, ext_region, 5, 13);
    r = fill_rec(s, XSP_KIND_RUNTIME, "cudaStreamSynchronize", 1072, 1078, 13);
    r->u.api.tid = tid;
    r = fill_rec(s, XSP_KIND_SYNC, "Stream Synchronize", 1073, 1077, 13);
    r->u.sync.type = 3;
    /* a kernel whose launch was never seen (another thread, before the session): corr 99 */
    r = fill_rec(s, XSP_KIND_KERNEL, "orphan", 1500, 1510, 99);
    r->device = 1; r->stream = 2;
    /* an id left on CUPTI's stack by an earlier session (other generation): not misattributed */
    fill_ext(s, ext_mm ^ (1ull << 32), 5, 15);
    r = fill_rec(s, XSP_KIND_RUNTIME, "cudaMemsetAsync", 1074, 1075, 15);
    r->u.api.tid = tid;
    /* one on another clock (a timestamp-callback mix-up: ~1e14 ns off): counted, not added */
    r = fill_rec(s, XSP_KIND_KERNEL, "offclock", 100000000000000ull, 100000000000100ull, 10);
    r->device = 0; r->stream = 7;
    /* one CUPTI could not time */
    r = fill_rec(s, XSP_KIND_MEMSET, "Memset", 0, 0, 14);
    r->flags = XSP_GPU_F_NO_TIME;
    s->dropped = 2;

    xsp_trace *t = NULL;
    CHECK(xsp_session_stop(sess, &t, err, sizeof err) == 0);
    xsp_clock_set_fake(0, 0);
    CHECK(xsp_rec_set_hooks(NULL) == 0);                 /* the session removed them */
    if (!t)
        return CHECK_DONE();
    CHECK(xsp_trace_check(t, err, sizeof err) == 0);
    CHECK_EQ_U(t->n_spans, 4 + 11);   /* 13 GPU records, one untimed, one on another clock */
    CHECK_EQ_U(xsp_trace_counter(t, "gpu.bad_clock"), 1);
    CHECK_EQ_U(find(t, "offclock", 0), UINT32_MAX);
    uint32_t region = find(t, "region", 0), mm = find(t, "aten::mm", 0),
             add = find(t, "aten::add", 0), bwd = find(t, "MmBackward0", 0),
             launch = find(t, "cudaLaunchKernel", 0), gemm = find(t, "gemm_kernel", 0),
             glaunch = find(t, "cudaGraphLaunch", 0), k1 = find(t, "graph_k1", 0),
             k2 = find(t, "graph_k2(float*, int)", 0), cpy_api = find(t, "cuMemcpyHtoDAsync", 0),
             cpy = find(t, "Memcpy HtoD", 0), sync_api = find(t, "cudaStreamSynchronize", 0),
             sync = find(t, "Stream Synchronize", 0), orphan = find(t, "orphan", 0);
    CHECK_EQ_U(region, 0);
    CHECK_EQ_U(t->spans[launch].parent, mm);
    CHECK_EQ_U(t->spans[launch].kind, XSP_KIND_RUNTIME);
    CHECK_EQ_U(t->spans[launch].level, XSP_LEVEL_G);
    CHECK_EQ_U(t->spans[launch].thread, t->spans[mm].thread);     /* on the calling thread */
    CHECK_EQ_U(t->spans[gemm].parent, mm);
    CHECK_EQ_U(attr(t, gemm, "api"), launch);
    CHECK_EQ_U(attr(t, gemm, "grid_x"), 64);
    CHECK_EQ_U(attr(t, gemm, "grid_y"), 2);
    CHECK_EQ_U(attr(t, gemm, "block_x"), 256);
    CHECK_EQ_U(attr(t, gemm, "registers"), 32);
    CHECK_EQ_U(attr(t, gemm, "smem_static"), 1024);
    CHECK_EQ_U(attr(t, gemm, "smem_dynamic"), 2048);
    CHECK_EQ_U(attr(t, gemm, "stream"), 7);
    CHECK_EQ_U(attr(t, gemm, "correlation"), 10);
    CHECK_EQ_U(t->spans[gemm].start_ns, 1100);
    CHECK_EQ_U(t->spans[gemm].end_ns, 1300);
    const xsp_thread *gt = &t->threads[t->spans[gemm].thread];
    CHECK_EQ_U(gt->kind, 1);
    CHECK_EQ_U(gt->tid, 7);
    CHECK(strcmp(xsp_strtab_get(&t->strings, gt->name, NULL), "GPU 0 stream 7") == 0);
    CHECK_EQ_U(t->spans[k1].parent, add);                          /* graph kernels */
    CHECK_EQ_U(t->spans[k2].parent, add);
    CHECK_EQ_U(attr(t, k1, "api"), glaunch);
    CHECK_EQ_U(attr(t, k2, "graph_id"), 3);
    CHECK_EQ_U(attr(t, k2, "graph_node"), 31);
    CHECK_EQ_U(t->spans[cpy_api].kind, XSP_KIND_DRIVER);
    CHECK_EQ_U(t->spans[cpy_api].parent, region);
    CHECK_EQ_U(t->spans[cpy].parent, region);
    CHECK_EQ_U(attr(t, cpy, "bytes"), 4096);
    CHECK_EQ_U(attr(t, cpy, "copy_kind"), 1);
    CHECK_EQ_U(t->spans[sync].parent, sync_api);
    CHECK_EQ_U(t->spans[sync].thread, t->spans[sync_api].thread);
    CHECK_EQ_U(t->spans[orphan].parent, region);                   /* never dropped */
    CHECK_EQ_U(t->threads[t->spans[orphan].thread].tid, (1ull << 32) | 2);
    CHECK_EQ_U(attr(t, bwd, "fwd_op"), mm);                        /* renumbered */
    CHECK(find(t, "Memset", 0) == UINT32_MAX);
    CHECK_EQ_U(t->spans[find(t, "cudaMemsetAsync", 0)].parent, region);
    CHECK_EQ_U(xsp_trace_counter(t, "gpu.unattributed"), 2);
    CHECK_EQ_U(xsp_trace_counter(t, "gpu.no_time"), 1);
    CHECK_EQ_U(xsp_trace_counter(t, "gpu.dropped"), 2);
    CHECK_EQ_U(xsp_trace_counter(t, "gpu.records"), 13);
    CHECK_EQ_U(xsp_trace_counter(t, "gpu.clamped"), 0);
    /* ids grow with start time and every parent precedes its child */
    for (uint32_t i = 1; i < t->n_spans; i++)
        CHECK(t->spans[i].start_ns >= t->spans[i - 1].start_ns);
    xsp_trace_free(t);
    xsp_session_free(sess);                              /* releases the store */
    return CHECK_DONE();
}
