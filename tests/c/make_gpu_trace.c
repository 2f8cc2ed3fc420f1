/*
 * make_gpu_trace.c: writes an .xsp trace of a small training loop at levels M, L and G without a
 * GPU, for the Python tests of what reads level G (tests/py/formats/test_kineto.py: HTA's and
 * TensorBoard's GPU views of xsp's Kineto export).
 *
 * The trace is made the way a real one is: the real recording session (core/session.c) with
 * the GPU source's merge (gpu/gpu_merge.c), whose store the program fills with the records
 * CUPTI would deliver (as tests/c/test_gpu_merge.c does), and saved by the real writer
 * (io/tracefile.c).  Each of STEPS steps runs, on the calling thread:
 *   aten::linear > aten::addmm   launches gemm_fwd   (cudaLaunchKernel)
 *   aten::relu                   launches relu_fwd
 *   aten::copy_                  copies 4096 bytes host to device (cudaMemcpyAsync)
 *   MmBackward0 (its forward op: the addmm, same sequence number)  launches gemm_bwd
 *   cudaStreamSynchronize with its synchronisation record, under the step
 * then xsp_session_step.  The clock is the core's fake clock (1 us per reading, no conversion),
 * so the trace is the same on every run: the GPU record times are computed from the
 * readings (a launch 2 us long, its work queued 5 us after it starts or when the stream is
 * free, one stream, no overlap).  Usage: make_gpu_trace OUT.xsp; exit status 0 on success.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/recorder.h"
#include "core/session.h"
#include "gpu/activity.h"
#include "gpu/gpu_merge.h"
#include "io/tracefile.h"
#include "gpu_fill.h"

#define STEPS 4

static uint64_t last_pushed;     /* the external id the core pushed last */

static void hook_push(uint64_t id)
{
    last_pushed = id;
}

static void hook_pop(void)
{
}

static void release_store(void *ctx)
{
    xsp_gpu_store_free(ctx);
}

static xsp_gpu_store *store;
static uint32_t corr = 100, tid;
static uint64_t gpu_free;        /* when the stream is free again */

static void begin(uint8_t kind, const char *name, uint64_t key, int64_t seq)
{
    xsp_rec_begin(XSP_LEVEL_L, kind, name, strlen(name), NULL, 0, key, seq, 1);
}

/* An API call from inside the open span (its external id is the one pushed last) and the GPU
 * work it queues: kind XSP_KIND_KERNEL, _MEMCPY; dur_ns of GPU time. */
static void launch(const char *api, uint8_t kind, const char *name, uint64_t dur_ns)
{
    uint64_t t = xsp_clock_ns();
    uint32_t c = corr++;
    fill_ext(store, last_pushed, 5, c);
    xsp_gpu_rec *r = fill_rec(store, XSP_KIND_RUNTIME, api, t, t + 2000, c);
    r->u.api.tid = tid;
    uint64_t g = t + 5000 > gpu_free ? t + 5000 : gpu_free;
    r = fill_rec(store, kind, name, g, g + dur_ns, c);
    r->device = 0;
    r->stream = 7;
    if (kind == XSP_KIND_KERNEL) {
        r->u.kernel.grid[0] = 80; r->u.kernel.grid[1] = 1; r->u.kernel.grid[2] = 1;
        r->u.kernel.block[0] = 128; r->u.kernel.block[1] = 1; r->u.kernel.block[2] = 1;
        r->u.kernel.regs = 40;
        r->u.kernel.smem_static = 4096;
    } else {
        r->u.copy.bytes = 4096;
        r->u.copy.copy_kind = 1;
    }
    gpu_free = g + dur_ns + 1000;
    /* the call returns after its own 2 us (launches are asynchronous) */
    while (xsp_clock_ns() < t + 3000)
        ;
}

int main(int argc, char **argv)
{
    char err[256];
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT.xsp\n", argv[0]);
        return 2;
    }
    tid = (uint32_t)syscall(SYS_gettid);
    xsp_span_hooks hooks = {hook_push, hook_pop};
    store = xsp_gpu_store_new(0);
    xsp_clock_set_fake(1000000, 1000);
    xsp_session *sess = xsp_session_new(&(xsp_config){.adopt_roots = 1}, "xsp.profile", "MLG");
    xsp_source gpu = {.name = "gpu", .early = 1, .hooks = &hooks, .merge = xsp_gpu_merge,
                      .release = release_store, .ctx = store};
    if (!sess || xsp_session_add_source(sess, &gpu, err, sizeof err) != 0
        || xsp_session_start(sess, err, sizeof err) != 0) {
        fprintf(stderr, "make_gpu_trace: cannot start: %s\n", err);
        return 1;
    }
    uint64_t key = 1;
    uint64_t step_ext = last_pushed;     /* step#0's, pushed by the start */
    for (int step = 0; step < STEPS; step++) {
        uint64_t k_linear = key++, k_addmm = key++, k_relu = key++, k_copy = key++,
                 k_bwd = key++;
        begin(XSP_KIND_OP, "aten::linear", k_linear, 10 + step);
        begin(XSP_KIND_OP, "aten::addmm", k_addmm, 10 + step);
        launch("cudaLaunchKernel", XSP_KIND_KERNEL, "gemm_fwd", 40000);
        xsp_rec_end(k_addmm, 0);
        xsp_rec_end(k_linear, 0);
        begin(XSP_KIND_OP, "aten::relu", k_relu, -1);
        launch("cudaLaunchKernel", XSP_KIND_KERNEL, "relu_fwd", 8000);
        xsp_rec_end(k_relu, 0);
        begin(XSP_KIND_OP, "aten::copy_", k_copy, -1);
        launch("cudaMemcpyAsync", XSP_KIND_MEMCPY, "Memcpy HtoD", 3000);
        xsp_rec_end(k_copy, 0);
        begin(XSP_KIND_BACKWARD, "MmBackward0", k_bwd, 10 + step);
        launch("cudaLaunchKernel", XSP_KIND_KERNEL, "gemm_bwd", 60000);
        xsp_rec_end(k_bwd, 0);
        /* the host waits for the stream: a synchronisation record under its call */
        uint64_t t = xsp_clock_ns();
        uint32_t c = corr++;
        fill_ext(store, step_ext, 5, c);
        uint64_t done = gpu_free > t + 1000 ? gpu_free : t + 1000;
        xsp_gpu_rec *r = fill_rec(store, XSP_KIND_RUNTIME, "cudaStreamSynchronize", t, done + 500,
                                 c);
        r->u.api.tid = tid;
        r = fill_rec(store, XSP_KIND_SYNC, "Stream Synchronize", t + 100, done + 400, c);
        r->u.sync.type = 3;
        while (xsp_clock_ns() < done + 1000)
            ;
        if (xsp_session_step(sess) != 0) {
            fprintf(stderr, "make_gpu_trace: step failed\n");
            return 1;
        }
        step_ext = last_pushed;          /* the next step's */
    }
    xsp_trace *t = NULL;
    int rc = xsp_session_stop(sess, &t, err, sizeof err);
    xsp_clock_set_fake(0, 0);
    if (rc != 0 || !t) {
        fprintf(stderr, "make_gpu_trace: cannot stop: %s\n", err);
        return 1;
    }
    if (xsp_trace_check(t, err, sizeof err) != 0
        || xsp_trace_save(t, argv[1], err, sizeof err) != 0) {
        fprintf(stderr, "make_gpu_trace: %s\n", err);
        return 1;
    }
    printf("make_gpu_trace: %u spans, %lld GPU records -> %s\n", t->n_spans,
           (long long)xsp_trace_counter(t, "gpu.records"), argv[1]);
    xsp_trace_free(t);
    xsp_session_free(sess);
    return 0;
}
