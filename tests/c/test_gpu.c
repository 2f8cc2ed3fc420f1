/*
 * test_gpu.c: the GPU source (csrc/gpu) without a GPU.
 *
 * Runs against the real libcupti (dlopened from /usr/local/cuda or wherever the search finds
 * it): loading and the search message; a session start that fails cleanly on a GPU-less
 * machine; the decoder driven by CUPTI's own iterator over buffers we lay out with the real
 * record structs; and the session's start/stop/buffer/push logic against fake entry points
 * (a copy of the real table with some calls replaced), which is the only way to exercise it
 * without a device.  On a machine with a GPU the no-GPU checks are skipped.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/clock.h"
#include "core/trace.h"
#include "core/session.h"
#include "gpu/activity.h"
#include "gpu/gpu_source.h"
#include "gpu/cupti_load.h"
#include "gpu/cupti_session.h"

static uint64_t test_clock(void)
{
    return xsp_clock_ticks();
}

/* ---- a CUPTI-style buffer: records end to end, 8-byte aligned ---- */

typedef struct cbuf {
    _Alignas(8) uint8_t b[1 << 16];  /* the records */
    size_t n;                        /* bytes used */
} cbuf;

static void *put(cbuf *c, size_t size)
{
    void *p = c->b + c->n;
    memset(p, 0, size);
    c->n += size;
    return p;
}
#define PUT(c, T) ((T *)put((c), sizeof(T)))

static xsp_gpu_store *decode_new(cbuf *c, size_t valid, int *rc)
{
    xsp_gpu_store *s = xsp_gpu_store_new(0);
    CHECK(s != NULL);
    *rc = xsp_gpu_decode(s, c->b, valid);
    return s;
}

/* ---- loading ---- */

static void test_search_message(void)
{
    const char *extra[] = {"/nonexistent-extra"};
    xsp_cupti_paths *p = malloc(sizeof *p);
    setenv("XSP_CUPTI_LIB", "/nonexistent/libcupti-bogus.so", 1);
    setenv("CUDA_HOME", "/nonexistent-cuda", 1);
    xsp_cupti_candidates(extra, 1, p);
    CHECK_EQ_U(p->n, 1 + 5 * 3);
    CHECK(strcmp(p->path[0], "/nonexistent/libcupti-bogus.so") == 0);
    CHECK(strcmp(p->path[1], "/nonexistent-extra/libcupti.so") == 0);
    CHECK(strcmp(p->path[3], "/nonexistent-extra/libcupti.so.12") == 0);
    CHECK(strcmp(p->path[4], "/nonexistent-cuda/extras/CUPTI/lib64/libcupti.so") == 0);
    CHECK(strcmp(p->path[7], "/nonexistent-cuda/lib64/libcupti.so") == 0);
    CHECK(strcmp(p->path[10], "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so") == 0);
    CHECK(strcmp(p->path[13], "/usr/local/cuda/lib64/libcupti.so") == 0);
    CHECK(strcmp(p->path[15], "/usr/local/cuda/lib64/libcupti.so.12") == 0);

    /* only the bogus candidates: the message lists each and the loader's last error */
    p->n = 7;
    char err[1024];
    size_t which = 99;
    CHECK(xsp_cupti_try_paths(p, &which, err, sizeof err) == NULL);
    CHECK_EQ_U(which, 99);
    CHECK(strstr(err, "/nonexistent/libcupti-bogus.so, ") != NULL);
    CHECK(strstr(err, "/nonexistent-extra/libcupti.so{,.13,.12}") != NULL);
    CHECK(strstr(err, "/nonexistent-cuda/extras/CUPTI/lib64/libcupti.so{,.13,.12}") != NULL);
    CHECK(strstr(err, "last error: /nonexistent-cuda/extras/CUPTI/lib64/libcupti.so.12") != NULL);
    CHECK(strstr(err, "XSP_CUPTI_LIB") != NULL);

    /* a file that exists but is no library: its own error is reported too */
    const char *junk = "/tmp/xsp_test_gpu_notalib.so";
    FILE *fp = fopen(junk, "w");
    CHECK(fp != NULL);
    if (fp) {
        fputs("not an ELF file\n", fp);
        fclose(fp);
    }
    snprintf(p->path[0], XSP_CUPTI_PATH_MAX, "%s", junk);
    CHECK(xsp_cupti_try_paths(p, NULL, err, sizeof err) == NULL);
    CHECK(strstr(err, "/tmp/xsp_test_gpu_notalib.so exists but:") != NULL);
    remove(junk);

    /* a tiny err buffer is truncated, not overrun */
    char small[16];
    CHECK(xsp_cupti_try_paths(p, NULL, small, sizeof small) == NULL);
    CHECK_EQ_U(strlen(small), sizeof small - 1);

    /* duplicate folders appear once */
    setenv("CUDA_HOME", "/usr/local/cuda", 1);
    xsp_cupti_candidates(NULL, 0, p);
    CHECK_EQ_U(p->n, 1 + 2 * 3);
    free(p);
}

static void test_open(void)
{
    char err[1024] = "";
    CHECK(xsp_cupti() == NULL);
    /* a bogus XSP_CUPTI_LIB is tried first and skipped; /usr/local/cuda is found after it */
    setenv("XSP_CUPTI_LIB", "/nonexistent/libcupti-bogus.so", 1);
    unsetenv("CUDA_HOME");
    int rc = xsp_cupti_open(NULL, 0, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "xsp_cupti_open: %s\n", err);
    CHECK_EQ_U(rc, 0);
    unsetenv("XSP_CUPTI_LIB");
    const xsp_cupti_fns *f = xsp_cupti();
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK(strstr(f->path, "libcupti.so") != NULL);
    CHECK(f->version >= 18);  /* CUDA 12.0's CUPTI is API version 18; 13.0's is 130001 */
    CHECK(f->ActivityGetNextRecord && f->ActivityPushExternalCorrelationId && f->GetTimestamp);
    CHECK(f->Finalize && f->GetCallbackName && f->SetThreadIdType);
    CHECK_EQ_U(xsp_cupti_open(NULL, 0, err, sizeof err), 0);
    CHECK(xsp_cupti() == f);
    CHECK(strcmp(xsp_cupti_result_name(CUPTI_ERROR_UNKNOWN), "CUPTI_ERROR_UNKNOWN") == 0);
    uint64_t ts = 0;
    CHECK_EQ_U(f->GetTimestamp(&ts), CUPTI_SUCCESS);
    CHECK(ts > 0);

    /* an extra dir holding the library is found by its versioned name (pip wheels) */
    xsp_cupti_paths *p = malloc(sizeof *p);
    const char *dirs[] = {"/nonexistent-extra", "/usr/local/cuda/lib64"};
    xsp_cupti_candidates(dirs, 2, p);
    p->n = 6;
    size_t which = 99;
    void *h = xsp_cupti_try_paths(p, &which, err, sizeof err);
    CHECK(h != NULL);
    CHECK_EQ_U(which, 3);
    CHECK(strcmp(p->path[which], "/usr/local/cuda/lib64/libcupti.so") == 0);
    if (h)
        dlclose(h);                            /* drops our extra reference only */
    free(p);
}

/* ---- a session on a machine without a GPU ---- */

static void test_start_without_gpu(void)
{
    xsp_gpu_store *s = xsp_gpu_store_new(0);
    char err[512] = "";
    int rc = xsp_gpu_start(s, test_clock, err, sizeof err);
    if (rc == 0) {
        fprintf(stderr, "test_gpu: a GPU is present: skipping the no-GPU start checks\n");
        CHECK_EQ_U(xsp_gpu_stop(s, err, sizeof err), 0);
        xsp_gpu_store_free(s);
        return;
    }
    CHECK(strstr(err, "no CUDA device or driver was found") != NULL);
    CHECK(strstr(err, "CUPTI_ERROR_UNKNOWN") || strstr(err, "CUPTI_ERROR_NOT_INITIALIZED"));
    CHECK_EQ_U(xsp_gpu_active(), 0);
    CHECK_EQ_U(s->clock, 0);
    /* nothing left registered: the same failure again, then stop has nothing to stop */
    char err2[512] = "";
    CHECK(xsp_gpu_start(s, test_clock, err2, sizeof err2) == -1);
    CHECK(strcmp(err, err2) == 0);
    CHECK(xsp_gpu_stop(s, err2, sizeof err2) == -1);
    CHECK(strstr(err2, "no GPU tracing session is active") != NULL);
    xsp_gpu_push(7);   /* no-ops outside a session */
    xsp_gpu_pop();
    xsp_gpu_pop();
    CHECK_EQ_U(s->n_recs, 0);
    CHECK(xsp_gpu_start(NULL, test_clock, err2, sizeof err2) == -1);
    xsp_gpu_store_free(s);
}

/* ---- decoding buffers laid out with the real structs ---- */

static void test_decode_kernels(void)
{
    cbuf *c = calloc(1, sizeof *c);
    char name1[] = "ampere_sgemm_128x64_nn";
    char name2[] = "void at::native::vectorized_elementwise_kernel<4>";
    CUpti_ActivityKernel10 *k = PUT(c, CUpti_ActivityKernel10);
    k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k->start = 1000;
    k->end = 1500;
    k->deviceId = 1;
    k->contextId = 2;
    k->streamId = 7;
    k->gridX = 128; k->gridY = 2; k->gridZ = 1;
    k->blockX = 256; k->blockY = 1; k->blockZ = 1;
    k->registersPerThread = 64;
    k->staticSharedMemory = 4096;
    k->dynamicSharedMemory = 16384;
    k->correlationId = 42;
    k->name = name1;
    k = PUT(c, CUpti_ActivityKernel10);
    k->kind = CUPTI_ACTIVITY_KIND_KERNEL;                /* serialised kernel: same struct */
    k->start = 2000;
    k->end = 2100;
    k->correlationId = 43;
    k->name = name2;
    k = PUT(c, CUpti_ActivityKernel10);
    k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;    /* no name, no timestamps */
    k->correlationId = 44;
    int rc;
    xsp_gpu_store *s = decode_new(c, c->n, &rc);
    memset(name1, 'X', sizeof name1 - 1);               /* CUPTI reuses its memory ... */
    memset(name2, 'Y', sizeof name2 - 1);
    CHECK_EQ_U(rc, 0);
    CHECK_EQ_U(s->n_recs, 3);
    CHECK_EQ_U(s->buffers, 1);
    CHECK_EQ_U(s->bytes, 3 * sizeof(CUpti_ActivityKernel10));
    const xsp_gpu_rec *r = &s->recs[0];
    CHECK(strcmp(xsp_gpu_rec_name(s, r), "ampere_sgemm_128x64_nn") == 0);  /* ... we copied */
    CHECK_EQ_U(r->kind, XSP_KIND_KERNEL);
    CHECK_EQ_U(r->flags, 0);
    CHECK_EQ_U(r->start_ns, 1000);
    CHECK_EQ_U(r->end_ns, 1500);
    CHECK_EQ_U(r->device, 1);
    CHECK_EQ_U(r->context, 2);
    CHECK_EQ_U(r->stream, 7);
    CHECK_EQ_U(r->correlation_id, 42);
    CHECK_EQ_U(r->u.kernel.grid[0], 128);
    CHECK_EQ_U(r->u.kernel.grid[1], 2);
    CHECK_EQ_U(r->u.kernel.grid[2], 1);
    CHECK_EQ_U(r->u.kernel.block[0], 256);
    CHECK_EQ_U(r->u.kernel.block[1], 1);
    CHECK_EQ_U(r->u.kernel.block[2], 1);
    CHECK_EQ_U(r->u.kernel.regs, 64);
    CHECK_EQ_U(r->u.kernel.smem_static, 4096);
    CHECK_EQ_U(r->u.kernel.smem_dynamic, 16384);
    CHECK_EQ_U(r->u.kernel.graph_id, 0);
    CHECK_EQ_U(r->u.kernel.graph_node, 0);
    r = &s->recs[1];
    CHECK(strcmp(xsp_gpu_rec_name(s, r), "void at::native::vectorized_elementwise_kernel<4>") == 0);
    CHECK_EQ_U(r->flags, XSP_GPU_F_SERIAL_KERNEL);
    CHECK_EQ_U(r->correlation_id, 43);
    r = &s->recs[2];
    CHECK(strcmp(xsp_gpu_rec_name(s, r), "(unnamed kernel)") == 0);
    CHECK_EQ_U(r->flags, XSP_GPU_F_NO_TIME);
    CHECK_EQ_U(s->no_time, 1);
    CHECK_EQ_U(s->lost + s->dropped + s->bad_buffers, 0);
    xsp_gpu_store_free(s);
    free(c);
}

static void test_decode_graph(void)
{
    cbuf *c = calloc(1, sizeof *c);
    CUpti_ActivityAPI *a = PUT(c, CUpti_ActivityAPI);
    a->kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    a->cbid = CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000;
    a->start = 10;
    a->end = 20;
    a->correlationId = 500;
    for (uint32_t i = 0; i < 3; i++) {
        CUpti_ActivityKernel10 *k = PUT(c, CUpti_ActivityKernel10);
        k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        k->start = 100 + 10 * i;
        k->end = 105 + 10 * i;
        k->correlationId = 500;        /* one graph launch: one correlation id for all */
        k->graphId = 7;
        k->graphNodeId = 0x100000000ull + i;
        k->streamId = 3;
        k->name = i == 1 ? "graph_kernel_b" : "graph_kernel_a";
    }
    int rc;
    xsp_gpu_store *s = decode_new(c, c->n, &rc);
    CHECK_EQ_U(rc, 0);
    CHECK_EQ_U(s->n_recs, 4);
    CHECK(strcmp(xsp_gpu_rec_name(s, &s->recs[0]), "cudaGraphLaunch") == 0);
    for (uint32_t i = 0; i < 3; i++) {
        const xsp_gpu_rec *r = &s->recs[1 + i];
        CHECK_EQ_U(r->kind, XSP_KIND_KERNEL);
        CHECK_EQ_U(r->correlation_id, 500);
        CHECK_EQ_U(r->u.kernel.graph_id, 7);
        CHECK_EQ_U(r->u.kernel.graph_node, 0x100000000ull + i);
        CHECK_EQ_U(r->start_ns, 100 + 10 * i);
    }
    CHECK(s->recs[1].name == s->recs[3].name);         /* interned once */
    CHECK(s->recs[1].name != s->recs[2].name);
    xsp_gpu_store_free(s);
    free(c);
}

static void test_decode_copies(void)
{
    cbuf *c = calloc(1, sizeof *c);
    CUpti_ActivityMemcpy6 *m = PUT(c, CUpti_ActivityMemcpy6);
    m->kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    m->copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
    m->srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
    m->dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    m->flags = CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC;
    m->bytes = 1ull << 33;
    m->start = 50;
    m->end = 90;
    m->deviceId = 0;
    m->contextId = 1;
    m->streamId = 13;
    m->correlationId = 9;
    m->graphId = 4;
    m->graphNodeId = 44;
    m = PUT(c, CUpti_ActivityMemcpy6);
    m->kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    m->copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
    m->start = 91;
    m->end = 92;
    m = PUT(c, CUpti_ActivityMemcpy6);
    m->kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    m->copyKind = 200;                                  /* a kind newer than our table */
    m->start = 93;
    m->end = 94;
    CUpti_ActivityMemset4 *z = PUT(c, CUpti_ActivityMemset4);
    z->kind = CUPTI_ACTIVITY_KIND_MEMSET;
    z->value = 0xAB;
    z->bytes = 4096;
    z->start = 95;
    z->end = 99;
    z->deviceId = 2;
    z->contextId = 3;
    z->streamId = 4;
    z->correlationId = 10;
    z->memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    z->graphId = 5;
    z->graphNodeId = 55;
    int rc;
    xsp_gpu_store *s = decode_new(c, c->n, &rc);
    CHECK_EQ_U(rc, 0);
    CHECK_EQ_U(s->n_recs, 4);
    const xsp_gpu_rec *r = &s->recs[0];
    CHECK(strcmp(xsp_gpu_rec_name(s, r), "Memcpy HtoD") == 0);
    CHECK_EQ_U(r->kind, XSP_KIND_MEMCPY);
    CHECK_EQ_U(r->u.copy.bytes, 1ull << 33);
    CHECK_EQ_U(r->u.copy.copy_kind, CUPTI_ACTIVITY_MEMCPY_KIND_HTOD);
    CHECK_EQ_U(r->u.copy.src_kind, CUPTI_ACTIVITY_MEMORY_KIND_PINNED);
    CHECK_EQ_U(r->u.copy.dst_kind, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);
    CHECK_EQ_U(r->u.copy.flags, CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC);
    CHECK_EQ_U(r->u.copy.graph_id, 4);
    CHECK_EQ_U(r->u.copy.graph_node, 44);
    CHECK_EQ_U(r->start_ns, 50);
    CHECK_EQ_U(r->end_ns, 90);
    CHECK_EQ_U(r->device, 0);
    CHECK_EQ_U(r->context, 1);
    CHECK_EQ_U(r->stream, 13);
    CHECK_EQ_U(r->correlation_id, 9);
    CHECK(strcmp(xsp_gpu_rec_name(s, &s->recs[1]), "Memcpy DtoH") == 0);
    CHECK(strcmp(xsp_gpu_rec_name(s, &s->recs[2]), "Memcpy") == 0);
    r = &s->recs[3];
    CHECK(strcmp(xsp_gpu_rec_name(s, r), "Memset") == 0);
    CHECK_EQ_U(r->kind, XSP_KIND_MEMSET);
    CHECK_EQ_U(r->u.set.value, 0xAB);
    CHECK_EQ_U(r->u.set.bytes, 4096);
    CHECK_EQ_U(r->u.set.memory_kind, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);
    CHECK_EQ_U(r->u.set.graph_id, 5);
    CHECK_EQ_U(r->u.set.graph_node, 55);
    CHECK_EQ_U(r->device, 2);
    CHECK_EQ_U(r->context, 3);
    CHECK_EQ_U(r->stream, 4);
    CHECK_EQ_U(r->correlation_id, 10);
    CHECK_EQ_U(r->start_ns, 95);
    CHECK_EQ_U(r->end_ns, 99);
    xsp_gpu_store_free(s);
    free(c);
}

/* A kernel launch the driver makes outside any public API call has its own kind (48), with
 * the API record layout: decoded as a driver call, so its kernel has a launch and an op. */
static void test_decode_internal_launch(void)
{
    cbuf *c = calloc(1, sizeof *c);
    CUpti_ActivityAPI *a = PUT(c, CUpti_ActivityAPI);
    a->kind = CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API;
    a->cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
    a->start = 700;
    a->end = 705;
    a->threadId = 42;
    a->correlationId = 81;
    int rc;
    xsp_gpu_store *s = decode_new(c, c->n, &rc);
    CHECK_EQ_U(rc, 0);
    CHECK_EQ_U(s->n_recs, 1);
    CHECK_EQ_U(s->recs[0].kind, XSP_KIND_DRIVER);
    CHECK_EQ_U(s->recs[0].start_ns, 700);
    CHECK_EQ_U(s->recs[0].end_ns, 705);
    CHECK_EQ_U(s->recs[0].correlation_id, 81);
    CHECK_EQ_U(s->recs[0].u.api.tid, 42);
    CHECK(strcmp(xsp_gpu_rec_name(s, &s->recs[0]), "cuLaunchKernel") == 0);
    CHECK_EQ_U(s->unknown_kinds[CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API], 0);
    xsp_gpu_store_free(s);
    free(c);
}

static void test_decode_api_sync_overhead_ext(void)
{
    cbuf *c = calloc(1, sizeof *c);
    CUpti_ActivityExternalCorrelation *e = PUT(c, CUpti_ActivityExternalCorrelation);
    e->kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
    e->externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;
    e->externalId = 0x0000000300000005ull;
    e->correlationId = 77;
    CUpti_ActivityAPI *a = PUT(c, CUpti_ActivityAPI);
    a->kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    a->cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
    a->start = 300;
    a->end = 310;
    a->processId = 1234;
    a->threadId = 5678;
    a->correlationId = 77;
    a->returnValue = 0;
    a = PUT(c, CUpti_ActivityAPI);
    a->kind = CUPTI_ACTIVITY_KIND_DRIVER;
    a->cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
    a->start = 302;
    a->end = 308;
    a->threadId = 5678;
    a->correlationId = 78;
    a->returnValue = 999;
    a = PUT(c, CUpti_ActivityAPI);
    a->kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    a->cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;   /* cached name */
    a->start = 320;
    a->end = 321;
    a = PUT(c, CUpti_ActivityAPI);
    a->kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    a->cbid = 99999;                                             /* unknown to CUPTI */
    a->start = 330;
    a->end = 331;
    CUpti_ActivitySynchronization2 *y = PUT(c, CUpti_ActivitySynchronization2);
    y->kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
    y->type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
    y->start = 400;
    y->end = 450;
    y->correlationId = 80;
    y->contextId = 1;
    y->streamId = 7;
    y->cudaEventId = 12;
    y = PUT(c, CUpti_ActivitySynchronization2);
    y->kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
    y->type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE;
    y->start = 460;
    y->end = 470;
    CUpti_ActivityOverhead3 *o = PUT(c, CUpti_ActivityOverhead3);
    o->kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
    o->overheadKind = CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH;
    o->objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
    o->objectId.pt.processId = 1234;
    o->objectId.pt.threadId = 5678;
    o->start = 500;
    o->end = 600;
    o->correlationId = 91;
    o = PUT(c, CUpti_ActivityOverhead3);
    o->kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
    o->overheadKind = CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER;
    o->objectKind = CUPTI_ACTIVITY_OBJECT_STREAM;
    o->objectId.dcs.deviceId = 1;
    o->objectId.dcs.contextId = 2;
    o->objectId.dcs.streamId = 3;
    o->start = 610;
    o->end = 620;
    int rc;
    xsp_gpu_store *s = decode_new(c, c->n, &rc);
    CHECK_EQ_U(rc, 0);
    CHECK_EQ_U(s->n_ext, 1);
    CHECK_EQ_U(s->ext[0].external_kind, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2);
    CHECK_EQ_U(s->ext[0].external_id, 0x0000000300000005ull);
    CHECK_EQ_U(s->ext[0].correlation_id, 77);
    CHECK_EQ_U(s->n_recs, 8);
    const xsp_gpu_rec *r = &s->recs[0];
    CHECK(strcmp(xsp_gpu_rec_name(s, r), "cudaLaunchKernel") == 0);
    CHECK_EQ_U(r->kind, XSP_KIND_RUNTIME);
    CHECK_EQ_U(r->u.api.cbid, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000);
    CHECK_EQ_U(r->u.api.tid, 5678);
    CHECK_EQ_U(r->u.api.pid, 1234);
    CHECK_EQ_U(r->u.api.ret, 0);
    CHECK_EQ_U(r->correlation_id, 77);
    CHECK_EQ_U(r->start_ns, 300);
    CHECK_EQ_U(r->end_ns, 310);
    CHECK_EQ_U(r->device, XSP_GPU_NONE);
    CHECK_EQ_U(r->stream, XSP_GPU_NONE);
    r = &s->recs[1];
    CHECK(strcmp(xsp_gpu_rec_name(s, r), "cuLaunchKernel") == 0);
    CHECK_EQ_U(r->kind, XSP_KIND_DRIVER);
    CHECK_EQ_U(r->u.api.ret, 999);
    CHECK_EQ_U(r->correlation_id, 78);
    CHECK(s->recs[2].name == s->recs[0].name);
    CHECK(strcmp(xsp_gpu_rec_name(s, &s->recs[3]), "cbid 99999") == 0);
    r = &s->recs[4];
    CHECK(strcmp(xsp_gpu_rec_name(s, r), "Stream Sync") == 0);
    CHECK_EQ_U(r->kind, XSP_KIND_SYNC);
    CHECK_EQ_U(r->u.sync.type, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE);
    CHECK_EQ_U(r->u.sync.event_id, 12);
    CHECK_EQ_U(r->device, XSP_GPU_NONE);
    CHECK_EQ_U(r->context, 1);
    CHECK_EQ_U(r->stream, 7);
    CHECK_EQ_U(r->correlation_id, 80);
    CHECK_EQ_U(r->start_ns, 400);
    CHECK_EQ_U(r->end_ns, 450);
    CHECK(strcmp(xsp_gpu_rec_name(s, &s->recs[5]), "Event Sync") == 0);
    r = &s->recs[6];
    CHECK(strcmp(xsp_gpu_rec_name(s, r), "Overhead: CUPTI buffer flush") == 0);
    CHECK_EQ_U(r->kind, XSP_KIND_OVERHEAD);
    CHECK_EQ_U(r->u.overhead.object_kind, CUPTI_ACTIVITY_OBJECT_THREAD);
    CHECK_EQ_U(r->u.overhead.tid, 5678);
    CHECK_EQ_U(r->u.overhead.pid, 1234);
    CHECK_EQ_U(r->device, XSP_GPU_NONE);
    CHECK_EQ_U(r->start_ns, 500);
    CHECK_EQ_U(r->end_ns, 600);
    CHECK_EQ_U(r->correlation_id, xsp_cupti()->version >= 130000 ? 91 : 0);
    r = &s->recs[7];
    CHECK(strcmp(xsp_gpu_rec_name(s, r), "Overhead: driver compiler") == 0);
    CHECK_EQ_U(r->device, 1);
    CHECK_EQ_U(r->context, 2);
    CHECK_EQ_U(r->stream, 3);
    xsp_gpu_store_free(s);
    free(c);
}

static void test_decode_unknown_and_broken(void)
{
    cbuf *c = calloc(1, sizeof *c);
    CUpti_ActivityMarker2 *mk = PUT(c, CUpti_ActivityMarker2);
    mk->kind = CUPTI_ACTIVITY_KIND_MARKER;
    CUpti_ActivityName *nm = PUT(c, CUpti_ActivityName);
    nm->kind = CUPTI_ACTIVITY_KIND_NAME;
    CUpti_ActivityMemset4 *z = PUT(c, CUpti_ActivityMemset4);
    z->kind = CUPTI_ACTIVITY_KIND_MEMSET;
    z->start = 1;
    z->end = 2;
    size_t before_kernel = c->n;
    CUpti_ActivityKernel10 *k = PUT(c, CUpti_ActivityKernel10);
    k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k->name = "cut_short";
    int rc;
    /* kinds we do not decode are counted per kind */
    xsp_gpu_store *s = decode_new(c, c->n, &rc);
    CHECK_EQ_U(rc, 0);
    CHECK_EQ_U(s->n_recs, 2);
    CHECK_EQ_U(s->unknown_kinds[CUPTI_ACTIVITY_KIND_MARKER], 1);
    CHECK_EQ_U(s->unknown_kinds[CUPTI_ACTIVITY_KIND_NAME], 1);
    /* the same buffer again, valid_size ending inside the kernel: CUPTI ends the walk there */
    CHECK_EQ_U(xsp_gpu_decode(s, c->b, before_kernel + sizeof *k - 8), 0);
    CHECK_EQ_U(s->n_recs, 3);                     /* only the memset was added */
    CHECK_EQ_U(s->recs[2].kind, XSP_KIND_MEMSET);
    CHECK_EQ_U(s->unknown_kinds[CUPTI_ACTIVITY_KIND_MARKER], 2);
    CHECK_EQ_U(s->bad_buffers, 0);
    /* fewer bytes than any record, and an empty buffer */
    CHECK_EQ_U(xsp_gpu_decode(s, c->b, 3), 0);
    CHECK_EQ_U(xsp_gpu_decode(s, c->b, 0), 0);
    CHECK_EQ_U(s->n_recs, 3);
    CHECK_EQ_U(s->buffers, 4);
    /* an invalid kind (CUPTI_ERROR_INVALID_KIND: "incomplete or invalid") ends the walk, counted
     * as incomplete, not as an error; records before it are kept */
    ((CUpti_Activity *)(c->b + before_kernel))->kind = (CUpti_ActivityKind)0xFFFF;
    CHECK_EQ_U(xsp_gpu_decode(s, c->b, c->n), 0);
    CHECK_EQ_U(s->incomplete, 1);
    CHECK_EQ_U(s->bad_buffers, 0);
    CHECK_EQ_U(s->n_recs, 4);
    ((CUpti_Activity *)c->b)->kind = CUPTI_ACTIVITY_KIND_INVALID;
    CHECK_EQ_U(xsp_gpu_decode(s, c->b, c->n), 0);
    CHECK_EQ_U(s->incomplete, 2);
    CHECK_EQ_U(s->n_recs, 4);
    CHECK_EQ_U(s->lost, 0);
    xsp_gpu_store_free(s);
    free(c);
}

static void test_decode_cap(void)
{
    cbuf *c = calloc(1, sizeof *c);
    enum { N = 300 };
    for (int i = 0; i < N; i++) {
        CUpti_ActivityMemset4 *z = PUT(c, CUpti_ActivityMemset4);
        z->kind = CUPTI_ACTIVITY_KIND_MEMSET;
        z->start = 10 + (uint64_t)i;
        z->end = 11 + (uint64_t)i;
    }
    /* room for the empty string table and 100 records */
    xsp_gpu_store *probe = xsp_gpu_store_new(0);
    uint64_t base = xsp_gpu_store_bytes(probe);
    xsp_gpu_store_free(probe);
    xsp_gpu_store *s = xsp_gpu_store_new(base + 100 * sizeof(xsp_gpu_rec) + 50);
    CHECK_EQ_U(xsp_gpu_decode(s, c->b, c->n), 0);
    CHECK_EQ_U(s->n_recs, 100);
    CHECK_EQ_U(s->lost, N - 100);
    CHECK(xsp_gpu_store_bytes(s) <= s->max_bytes);
    CHECK_EQ_U(s->recs[99].start_ns, 10 + 99);
    xsp_gpu_store_free(s);

    /* names are capped as well: many distinct kernel names, no allocation past the cap */
    static char names[N][48];
    c->n = 0;
    for (int i = 0; i < N; i++) {
        CUpti_ActivityKernel10 *k = PUT(c, CUpti_ActivityKernel10);
        k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        k->start = 1;
        k->end = 2;
        snprintf(names[i], sizeof names[i], "kernel_number_%d_with_a_long_name", i);
        k->name = names[i];
    }
    s = xsp_gpu_store_new(base + N * sizeof(xsp_gpu_rec) + 2000);
    CHECK_EQ_U(xsp_gpu_decode(s, c->b, c->n), 0);
    CHECK(s->n_recs > 0 && s->n_recs < N);
    CHECK_EQ_U(s->n_recs + s->lost, N);
    CHECK(xsp_gpu_store_bytes(s) <= s->max_bytes);
    for (uint32_t i = 0; i < s->n_recs; i++)
        CHECK(strcmp(xsp_gpu_rec_name(s, &s->recs[i]), names[i]) == 0);
    xsp_gpu_store_free(s);

    /* external correlations count against the same cap */
    c->n = 0;
    for (int i = 0; i < N; i++) {
        CUpti_ActivityExternalCorrelation *e = PUT(c, CUpti_ActivityExternalCorrelation);
        e->kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
        e->externalId = (uint64_t)i;
    }
    s = xsp_gpu_store_new(base + 64 * sizeof(xsp_gpu_ext));
    CHECK_EQ_U(xsp_gpu_decode(s, c->b, c->n), 0);
    CHECK_EQ_U(s->n_ext, 64);
    CHECK_EQ_U(s->lost, N - 64);
    xsp_gpu_store_free(s);
    free(c);
}

/* CUPTI may complete buffers on its own thread while a flush completes others: the store
 * lock is taken per buffer, so concurrent decodes neither lose nor mix records. */
typedef struct decode_job {
    xsp_gpu_store *s;  /* shared store */
    cbuf *c;           /* shared, read-only buffer */
    int rounds;        /* decodes to run */
} decode_job;

static void *decode_thread(void *arg)
{
    decode_job *j = arg;
    for (int i = 0; i < j->rounds; i++)
        xsp_gpu_decode(j->s, j->c->b, j->c->n);
    return NULL;
}

static void test_decode_threads(void)
{
    cbuf *c = calloc(1, sizeof *c);
    for (int i = 0; i < 100; i++) {
        CUpti_ActivityAPI *a = PUT(c, CUpti_ActivityAPI);
        a->kind = (i & 1) ? CUPTI_ACTIVITY_KIND_DRIVER : CUPTI_ACTIVITY_KIND_RUNTIME;
        a->cbid = (uint32_t)(i % 7) + 1;
        a->start = 1;
        a->end = 2;
    }
    xsp_gpu_store *s = xsp_gpu_store_new(0);
    decode_job j = {s, c, 50};
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, decode_thread, &j);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ_U(s->n_recs, 4 * 50 * 100);
    CHECK_EQ_U(s->buffers, 4 * 50);
    CHECK_EQ_U(s->lost + s->bad_buffers, 0);
    for (uint32_t i = 0; i < s->n_recs; i += 997)
        CHECK(s->recs[i].kind == XSP_KIND_RUNTIME || s->recs[i].kind == XSP_KIND_DRIVER);
    xsp_gpu_store_free(s);
    free(c);
}

/* ---- the session against fake entry points ---- */

static char g_log[2048];                              /* calls, in order, space-separated */
static CUptiResult g_sub_result;                      /* what fake Subscribe returns */
static CUpti_ActivityKind g_fail_kind;                /* fake Enable fails for this kind ... */
static CUptiResult g_fail_result;                     /* ... with this result */
static CUpti_BuffersCallbackRequestFunc g_req;        /* callbacks registered with the fake */
static CUpti_BuffersCallbackCompleteFunc g_done;
static CUpti_TimestampCallbackFunc g_ts;
static uint8_t *g_pending;                            /* buffer the fake flush completes */
static size_t g_pending_valid;
static size_t g_dropped;                              /* fake dropped count, read once */
static CUpti_ActivityThreadIdType g_tid_type;
static uint64_t g_pushed[8];
static int g_n_pushed, g_n_popped;
static int g_sub_token;

static void logf_(const char *fmt, unsigned v)
{
    size_t n = strlen(g_log);
    snprintf(g_log + n, sizeof g_log - n, fmt, v);
}

static CUptiResult f_subscribe(CUpti_SubscriberHandle *sub, CUpti_CallbackFunc cb, void *ud)
{
    (void)cb;
    (void)ud;
    logf_("sub ", 0);
    if (g_sub_result == CUPTI_SUCCESS)
        *sub = (CUpti_SubscriberHandle)(void *)&g_sub_token;
    return g_sub_result;
}
static CUptiResult f_unsubscribe(CUpti_SubscriberHandle sub)
{
    CHECK(sub == (CUpti_SubscriberHandle)(void *)&g_sub_token);
    logf_("unsub ", 0);
    return CUPTI_SUCCESS;
}
static CUptiResult f_ts(CUpti_TimestampCallbackFunc fn)
{
    g_ts = fn;
    logf_("ts ", 0);
    return CUPTI_SUCCESS;
}
static CUptiResult f_register(CUpti_BuffersCallbackRequestFunc req,
                              CUpti_BuffersCallbackCompleteFunc done)
{
    g_req = req;
    g_done = done;
    logf_("cb ", 0);
    return CUPTI_SUCCESS;
}
static CUptiResult f_enable(CUpti_ActivityKind k)
{
    if (k == g_fail_kind)
        return g_fail_result;
    logf_("en%u ", (unsigned)k);
    return CUPTI_SUCCESS;
}
static CUptiResult f_disable(CUpti_ActivityKind k)
{
    logf_("dis%u ", (unsigned)k);
    return CUPTI_SUCCESS;
}
static CUptiResult f_flush(uint32_t flag)
{
    logf_("flush%u ", flag);
    if (g_pending) {
        uint8_t *b = g_pending;
        g_pending = NULL;
        g_done(NULL, 0, b, XSP_GPU_BUF_BYTES, g_pending_valid);
    }
    return CUPTI_SUCCESS;
}
static CUptiResult f_dropped(CUcontext ctx, uint32_t stream, size_t *n)
{
    (void)ctx;
    (void)stream;
    *n = g_dropped;
    g_dropped = 0;
    return CUPTI_SUCCESS;
}
static CUptiResult f_gettid(CUpti_ActivityThreadIdType *t)
{
    *t = g_tid_type;
    logf_("gettid ", 0);
    return CUPTI_SUCCESS;
}
static CUptiResult f_settid(CUpti_ActivityThreadIdType t)
{
    g_tid_type = t;
    logf_("settid%u ", (unsigned)t);
    return CUPTI_SUCCESS;
}
static CUptiResult f_push(CUpti_ExternalCorrelationKind k, uint64_t id)
{
    CHECK_EQ_U(k, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2);
    if (g_n_pushed < 8)
        g_pushed[g_n_pushed] = id;
    g_n_pushed++;
    return CUPTI_SUCCESS;
}
static CUptiResult f_pop(CUpti_ExternalCorrelationKind k, uint64_t *last)
{
    CHECK_EQ_U(k, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2);
    (void)last;
    g_n_popped++;
    return CUPTI_SUCCESS;
}

static void fake_reset(void)
{
    g_log[0] = '\0';
    g_sub_result = CUPTI_SUCCESS;
    g_fail_kind = CUPTI_ACTIVITY_KIND_INVALID;
    g_fail_result = CUPTI_SUCCESS;
    g_pending = NULL;
    g_dropped = 0;
    g_tid_type = CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT;
    g_n_pushed = g_n_popped = 0;
}

/* Fills a buffer CUPTI would have: an op's external id, its launch, and the kernel. */
static size_t fill_launch(uint8_t *b, uint32_t corr, uint64_t ext_id)
{
    size_t n = 0;
    CUpti_ActivityExternalCorrelation *e = (void *)(b + n);
    memset(e, 0, sizeof *e);
    e->kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
    e->externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;
    e->externalId = ext_id;
    e->correlationId = corr;
    n += sizeof *e;
    CUpti_ActivityAPI *a = (void *)(b + n);
    memset(a, 0, sizeof *a);
    a->kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    a->cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
    a->start = 1;
    a->end = 2;
    a->correlationId = corr;
    n += sizeof *a;
    CUpti_ActivityKernel10 *k = (void *)(b + n);
    memset(k, 0, sizeof *k);
    k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k->start = 3;
    k->end = 4;
    k->correlationId = corr;
    k->name = "k";
    n += sizeof *k;
    return n;
}

static CUptiResult CUPTIAPI f_finalize(void)
{
    logf_("finalize %.0u", 0);
    return CUPTI_SUCCESS;
}

static void test_session_fake(void)
{
    const xsp_cupti_fns *real = xsp_cupti();
    CHECK(real != NULL);
    if (!real)
        return;
    static xsp_cupti_fns fake;
    fake = *real;
    fake.Subscribe = f_subscribe;
    fake.Unsubscribe = f_unsubscribe;
    fake.ActivityRegisterTimestampCallback = f_ts;
    fake.ActivityRegisterCallbacks = f_register;
    fake.ActivityEnable = f_enable;
    fake.ActivityDisable = f_disable;
    fake.ActivityFlushAll = f_flush;
    fake.ActivityGetNumDroppedRecords = f_dropped;
    fake.GetThreadIdType = f_gettid;
    fake.SetThreadIdType = f_settid;
    fake.ActivityPushExternalCorrelationId = f_push;
    fake.ActivityPopExternalCorrelationId = f_pop;
    CHECK(xsp_cupti_swap_for_tests(&fake) == real);
    char err[512];

    /* 1. a full session: start order, buffers, push/pop, stop order */
    fake_reset();
    xsp_gpu_store *s = xsp_gpu_store_new(0);
    xsp_gpu_push(1);                                  /* not active: nothing reaches CUPTI */
    CHECK_EQ_U(g_n_pushed, 0);
    CHECK_EQ_U(xsp_gpu_start(s, test_clock, err, sizeof err), 0);
    CHECK(strcmp(g_log, "sub ts gettid settid1 cb en5 en4 en39 en10 en1 en2 en38 en17 en48 ") == 0);
    CHECK(g_ts == test_clock);
    CHECK_EQ_U(xsp_gpu_active(), 1);
    CHECK_EQ_U(s->tid_type, 1);
    CHECK_EQ_U(s->clock, 1);
    CHECK_EQ_U(s->kinds_missing, 0);
    CHECK(xsp_gpu_start(s, test_clock, err, sizeof err) == -1);
    CHECK(strstr(err, "already active") != NULL);

    uint8_t *b1 = NULL, *b2 = NULL;
    size_t size = 0, maxrec = 1;
    g_req(&b1, &size, &maxrec);
    CHECK(b1 != NULL && ((uintptr_t)b1 & 7) == 0);
    CHECK_EQ_U(size, XSP_GPU_BUF_BYTES);
    CHECK_EQ_U(maxrec, 0);
    g_req(&b2, &size, &maxrec);
    CHECK(b2 != NULL && b2 != b1);
    g_dropped = 2;
    g_done(NULL, 0, b1, XSP_GPU_BUF_BYTES, fill_launch(b1, 11, 0x100000001ull));
    CHECK_EQ_U(s->n_recs, 2);
    CHECK_EQ_U(s->n_ext, 1);
    CHECK_EQ_U(s->dropped, 2);
    uint8_t *b3 = NULL;
    g_req(&b3, &size, &maxrec);
    CHECK(b3 == b1);                                  /* reused after decode */
    g_done(NULL, 0, b3, XSP_GPU_BUF_BYTES, 0);        /* an empty buffer comes back */
    g_pending = b2;                                   /* CUPTI still holds b2: flushed at stop */
    g_pending_valid = fill_launch(b2, 12, 0x100000002ull);

    xsp_gpu_push(0x100000007ull);
    xsp_gpu_push(0x100000008ull);
    CHECK_EQ_U(g_n_pushed, 2);
    CHECK_EQ_U(g_pushed[0], 0x100000007ull);
    CHECK_EQ_U(g_pushed[1], 0x100000008ull);
    xsp_gpu_pop();
    CHECK_EQ_U(g_n_popped, 1);

    g_dropped = 3;
    g_log[0] = '\0';
    CHECK_EQ_U(xsp_gpu_stop(s, err, sizeof err), 0);
    CHECK(strcmp(g_log, "dis48 dis17 dis38 dis2 dis1 dis10 dis39 dis4 dis5 flush1 settid0 unsub ") == 0);
    CHECK_EQ_U(xsp_gpu_active(), 0);
    CHECK_EQ_U(s->n_recs, 4);                         /* the flushed buffer was decoded */
    CHECK_EQ_U(s->n_ext, 2);
    CHECK_EQ_U(s->ext[1].external_id, 0x100000002ull);
    CHECK_EQ_U(s->dropped, 5);
    CHECK_EQ_U(s->refused_buffers + s->foreign_buffers, 0);
    CHECK_EQ_U(g_tid_type, CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT);  /* restored */
    /* the op pushed before stop still pops (keeps CUPTI's stack balanced); then nothing */
    xsp_gpu_pop();
    CHECK_EQ_U(g_n_popped, 2);
    xsp_gpu_pop();
    CHECK_EQ_U(g_n_popped, 2);
    xsp_gpu_push(9);
    CHECK_EQ_U(g_n_pushed, 2);
    /* after stop the callbacks are inert: requests declined, late buffers not decoded */
    uint8_t *b4 = (uint8_t *)1;
    g_req(&b4, &size, &maxrec);
    CHECK(b4 == NULL);
    CHECK_EQ_U(size, 0);
    CHECK(xsp_gpu_stop(s, err, sizeof err) == -1);
    xsp_gpu_store_free(s);

    /* 2. another client holds CUPTI: refused before anything else is touched */
    fake_reset();
    g_sub_result = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    s = xsp_gpu_store_new(0);
    CHECK(xsp_gpu_start(s, test_clock, err, sizeof err) == -1);
    CHECK(strstr(err, "another tool such as torch.profiler or Nsight holds CUPTI") != NULL);
    CHECK(strcmp(g_log, "sub ") == 0);
    CHECK_EQ_U(xsp_gpu_active(), 0);
    CHECK_EQ_U(s->shared, 0);

    /* 2b. the same, but the caller says the other client is idle (Kineto's subscription after
     * torch.profiler's first use): traced without the subscription, the timestamp callback put
     * back (the other client may have replaced it), nothing to unsubscribe at stop */
    fake_reset();
    g_sub_result = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    s->share_ok = 1;
    CHECK_EQ_U(xsp_gpu_start(s, test_clock, err, sizeof err), 0);
    CHECK_EQ_U(s->shared, 1);
    CHECK(strcmp(g_log, "sub ts gettid settid1 cb en5 en4 en39 en10 en1 en2 en38 en17 en48 ")
          == 0);
    g_log[0] = '\0';
    CHECK_EQ_U(xsp_gpu_stop(s, err, sizeof err), 0);
    CHECK(strcmp(g_log, "dis48 dis17 dis38 dis2 dis1 dis10 dis39 dis4 dis5 flush1 settid0 ") == 0);
    s->share_ok = 0;

    /* 3. an essential kind fails: what was done is undone, in reverse */
    fake_reset();
    g_fail_kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    g_fail_result = CUPTI_ERROR_NOT_COMPATIBLE;
    CHECK(xsp_gpu_start(s, test_clock, err, sizeof err) == -1);
    CHECK(strstr(err, "cuptiActivityEnable failed: CUPTI_ERROR_NOT_COMPATIBLE") != NULL);
    /* the timestamp callback stays registered from session 1: not registered again */
    CHECK(strcmp(g_log, "sub gettid settid1 cb en5 en4 en39 dis39 dis4 dis5 settid0 unsub ") == 0);
    CHECK_EQ_U(xsp_gpu_active(), 0);
    CHECK_EQ_U(s->clock, 0);
    b4 = (uint8_t *)1;
    g_req(&b4, &size, &maxrec);
    CHECK(b4 == NULL);

    /* 4. no driver at enable: the no-device message */
    fake_reset();
    g_fail_kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    g_fail_result = CUPTI_ERROR_UNKNOWN;
    CHECK(xsp_gpu_start(s, test_clock, err, sizeof err) == -1);
    CHECK(strstr(err, "no CUDA device or driver was found") != NULL);
    CHECK(strstr(err, "cuptiActivityEnable") != NULL);

    /* 5. an optional kind is missing: the session runs and says so */
    fake_reset();
    g_tid_type = CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM;  /* already SYSTEM: nothing to restore */
    g_fail_kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
    g_fail_result = CUPTI_ERROR_NOT_SUPPORTED;
    CHECK_EQ_U(xsp_gpu_start(s, test_clock, err, sizeof err), 0);
    CHECK_EQ_U(s->kinds_missing, 1u << 7);
    CHECK_EQ_U(s->tid_type, 1);
    g_log[0] = '\0';
    CHECK_EQ_U(xsp_gpu_stop(s, err, sizeof err), 0);
    CHECK(strcmp(g_log, "dis48 dis38 dis2 dis1 dis10 dis39 dis4 dis5 flush1 unsub ") == 0);

    /* 6. the pool declines past XSP_GPU_POOL_MAX buffers; CUPTI then drops records */
    fake_reset();
    CHECK_EQ_U(xsp_gpu_start(s, test_clock, err, sizeof err), 0);
    uint8_t *held[XSP_GPU_POOL_MAX + 1];
    for (unsigned i = 0; i <= XSP_GPU_POOL_MAX; i++)
        g_req(&held[i], &size, &maxrec);
    CHECK(held[XSP_GPU_POOL_MAX - 1] != NULL);
    CHECK(held[XSP_GPU_POOL_MAX] == NULL);
    for (unsigned i = 0; i < XSP_GPU_POOL_MAX; i++)
        g_done(NULL, 0, held[i], XSP_GPU_BUF_BYTES, 0);
    static _Alignas(8) uint8_t foreign[512];            /* another client's buffer */
    size_t fvalid = fill_launch(foreign, 1, 2) - sizeof(CUpti_ActivityKernel10);
    g_done(NULL, 0, foreign, sizeof foreign, fvalid);
    CHECK_EQ_U(xsp_gpu_stop(s, err, sizeof err), 0);
    CHECK_EQ_U(s->refused_buffers, 1);
    CHECK_EQ_U(s->foreign_buffers, 1);

    /* 7. cuptiFinalize drops the timestamp callback: the next start registers it again */
    fake.Finalize = f_finalize;
    fake_reset();
    CHECK_EQ_U(xsp_gpu_finalize(err, sizeof err), 0);
    CHECK(strcmp(g_log, "finalize ") == 0);
    fake_reset();
    CHECK_EQ_U(xsp_gpu_start(s, test_clock, err, sizeof err), 0);
    CHECK(strncmp(g_log, "sub ts ", 7) == 0);
    CHECK_EQ_U(xsp_gpu_stop(s, err, sizeof err), 0);
    xsp_gpu_store_free(s);

    /* 8. the GPU source in a real session (core/session.c): CUPTI starts after the core and
     * before the region begins (whose external id reaches CUPTI), and is flushed after the
     * region ends; a refusal unwinds the core session and the hooks */
    fake_reset();
    xsp_source src;
    CHECK_EQ_U(xsp_gpu_source(&src, 0, 0, err, sizeof err), 0);
    CHECK(src.early == 1 && src.hooks != NULL && strcmp(src.name, "gpu") == 0);
    xsp_session *sess = xsp_session_new(NULL, "region", "MG");
    CHECK(xsp_session_add_source(sess, &src, err, sizeof err) == 0);
    CHECK_EQ_U(xsp_session_start(sess, err, sizeof err), 0);
    CHECK(strncmp(g_log, "sub ", 4) == 0);
    CHECK_EQ_U(g_n_pushed, 2);                        /* region and step#0, CUPTI running */
    g_log[0] = '\0';
    xsp_trace *t = NULL;
    CHECK_EQ_U(xsp_session_stop(sess, &t, err, sizeof err), 0);
    CHECK(strstr(g_log, "flush1") != NULL && strstr(g_log, "unsub") != NULL);
    CHECK_EQ_U(g_n_popped, 2);
    CHECK(t != NULL && xsp_trace_counter(t, "gpu.records") == 0 && t->n_spans == 1);
    CHECK(xsp_rec_set_hooks(NULL) == 0 && xsp_rec_active() == 0);
    xsp_trace_free(t);
    xsp_session_free(sess);
    fake_reset();
    g_fail_kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    g_fail_result = CUPTI_ERROR_UNKNOWN;
    CHECK_EQ_U(xsp_gpu_source(&src, 0, 0, err, sizeof err), 0);
    sess = xsp_session_new(NULL, "region", "MG");
    CHECK(xsp_session_add_source(sess, &src, err, sizeof err) == 0);
    CHECK(xsp_session_start(sess, err, sizeof err) == -1);
    CHECK(strncmp(err, "gpu: ", 5) == 0 && strstr(err, "no CUDA device or driver") != NULL);
    CHECK(xsp_rec_set_hooks(NULL) == 0 && xsp_rec_active() == 0);
    CHECK_EQ_U(xsp_gpu_active(), 0);
    xsp_session_free(sess);

    CHECK(xsp_cupti_swap_for_tests(real) == &fake);
}

int main(void)
{
    xsp_clock_set_fake(0, 0);
    test_search_message();
    test_open();
    if (!xsp_cupti()) {
        fprintf(stderr, "test_gpu: libcupti could not be loaded; stopping\n");
        return CHECK_DONE();
    }
    test_decode_kernels();
    test_decode_graph();
    test_decode_copies();
    test_decode_api_sync_overhead_ext();
    test_decode_internal_launch();
    test_decode_unknown_and_broken();
    test_decode_cap();
    test_decode_threads();
    test_session_fake();
    test_start_without_gpu();
    return CHECK_DONE();
}
