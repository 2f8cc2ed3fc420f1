/*
 * cupti_session.c: starting and stopping CUPTI activity tracing (see cupti_session.h).
 *
 * State and what protects it:
 *   g_sess     start/stop bookkeeping. Protected by g_sess_lock (held for a whole start/stop).
 *   g_store    the store receiving buffers; atomic.  A completion callback increments
 *              g_inflight, then loads g_store; stop stores NULL, then waits for g_inflight to
 *              reach 0.  Both sides are seq_cst, so either the callback sees NULL or stop sees
 *              it in flight and waits (the core's busy/generation handshake, in miniature).
 *              Stop does not hold any lock the callback takes while it flushes, so a flush that
 *              runs the callback on the stopping thread cannot deadlock.
 *   g_pool     the buffer pool. Protected by g_pool.lock (taken per buffer request/return).
 *   g_push_on  1 while pushes reach CUPTI; atomic.  t_depth/t_epoch are per thread.
 *
 * Order matters at start: subscribe first (detects another client before we change anything;
 * an idle one is shared when the caller allows it: store->share_ok), then the timestamp
 * callback (CUPTI requires it before any kind is enabled; registered once, see g_ts_clock), the thread-id
 * type, the buffer callbacks, and the kinds last.  At stop the kinds are disabled before the
 * forced flush, so no record can be written after the flush into a buffer nobody collects
 * (Kineto also disables, then flushes).
 *
 * Not calling cuptiFinalize at stop follows Kineto, which finalizes only when TEARDOWN_CUPTI=1
 * and then from inside a CUDA API exit callback: NVIDIA documents cuptiFinalize as safe there,
 * or when no other thread is in CUDA or CUPTI, which a profiler embedded in a training process
 * cannot promise (a thread inside cuptiActivityPushExternalCorrelationId while another
 * finalizes corrupts CUPTI's heap).  What stays behind: our timestamp callback (torch.profiler
 * registers its own on Linux; see docs/gpu.md) and our buffer callbacks (replaced by the next
 * client's registration; while no session runs they decline requests).
 */
#include "cupti_session.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cupti_load.h"

/* The kinds a session enables, in order; optional ones may fail without failing start. */
static const struct {
    CUpti_ActivityKind kind; /* CUPTI kind */
    int optional;            /* 1: a failure other than "no driver" is tolerated */
} k_kinds[] = {
    {CUPTI_ACTIVITY_KIND_RUNTIME, 0},
    {CUPTI_ACTIVITY_KIND_DRIVER, 0},
    {CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, 0},
    {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, 0},
    {CUPTI_ACTIVITY_KIND_MEMCPY, 0},
    {CUPTI_ACTIVITY_KIND_MEMSET, 0},
    {CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, 1},
    {CUPTI_ACTIVITY_KIND_OVERHEAD, 1},
    /* kernels the driver launches outside any public API call: without their launch record a
     * kernel would have no API call and no op */
    {CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API, 1},
};
#define N_KINDS (sizeof k_kinds / sizeof *k_kinds)

static pthread_mutex_t g_sess_lock = PTHREAD_MUTEX_INITIALIZER; /* serialises start/stop */

/* The timestamp callback registered last, and with which library.  Registered once, not at
 * every start: re-registering has been reported (pytorch/pytorch#192021) to make CUPTI return
 * one more record per session in its default clock domain.  Registered again when the clock or
 * the library changes, or when another client shares CUPTI (it may have put its own there).
 * Protected by g_sess_lock. */
static xsp_gpu_clock_fn g_ts_clock;
static const xsp_cupti_fns *g_ts_fns;
static struct {
    int active;                          /* a session is started */
    const xsp_cupti_fns *f;              /* the table the session started with */
    xsp_gpu_store *store;                /* the session's store (g_store may already be NULL) */
    CUpti_SubscriberHandle sub;          /* our subscription */
    int tid_restore;                     /* 1: restore tid_prev at stop */
    CUpti_ActivityThreadIdType tid_prev; /* thread-id type before start */
    uint32_t enabled;                    /* bit i: k_kinds[i] enabled */
} g_sess;                                /* Protected by g_sess_lock */

static _Atomic(xsp_gpu_store *) g_store;  /* see the design comment */
static _Atomic int g_inflight;            /* completion callbacks between load and done */
static _Atomic int g_push_on;             /* pushes reach CUPTI */
static _Atomic uint32_t g_epoch;          /* bumped by xsp_gpu_finalize: older stacks are gone */
static _Thread_local uint32_t t_depth;    /* this thread's pushes not yet popped */
static _Thread_local uint32_t t_epoch;    /* g_epoch when they were pushed */

static struct {
    pthread_mutex_t lock;                 /* protects the fields below */
    uint8_t *all[XSP_GPU_POOL_MAX];       /* every buffer we allocated and still own */
    uint32_t n_all;                       /* entries in all */
    uint8_t *free[XSP_GPU_POOL_MAX];      /* buffers ready to hand to CUPTI */
    uint32_t n_free;                      /* entries in free */
    int open;                             /* 1 during a session: requests are served */
    uint64_t refused;                     /* requests declined since the session started */
    uint64_t foreign;                     /* completed buffers that were not in all */
    uint64_t late;                        /* completions with no store registered */
} g_pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* ---- buffer pool ---- */

static uint8_t *pool_get(void)
{
    uint8_t *b = NULL;
    pthread_mutex_lock(&g_pool.lock);
    if (g_pool.open) {
        if (g_pool.n_free) {
            b = g_pool.free[--g_pool.n_free];
        } else if (g_pool.n_all < XSP_GPU_POOL_MAX) {
            b = aligned_alloc(64, XSP_GPU_BUF_BYTES);
            if (b)
                g_pool.all[g_pool.n_all++] = b;
        }
        if (!b)
            g_pool.refused++;  /* outside a session nobody wants records: not counted */
    }
    pthread_mutex_unlock(&g_pool.lock);
    return b;
}

/* Takes back a buffer CUPTI returned: kept while open, freed otherwise; a buffer we did not
 * allocate is left alone. */
static void pool_put(uint8_t *b)
{
    pthread_mutex_lock(&g_pool.lock);
    uint32_t i = 0;
    while (i < g_pool.n_all && g_pool.all[i] != b)
        i++;
    if (i == g_pool.n_all) {
        g_pool.foreign++;
    } else if (g_pool.open) {
        g_pool.free[g_pool.n_free++] = b;
    } else {
        g_pool.all[i] = g_pool.all[--g_pool.n_all];
        free(b);
    }
    pthread_mutex_unlock(&g_pool.lock);
}

static void pool_open(void)
{
    pthread_mutex_lock(&g_pool.lock);
    g_pool.open = 1;
    g_pool.refused = 0;
    g_pool.foreign = 0;
    pthread_mutex_unlock(&g_pool.lock);
}

/* Closes the pool: frees the idle buffers (those CUPTI still holds are freed on return) and
 * adds the session's refused/foreign counts to store (if not NULL). */
static void pool_close(xsp_gpu_store *store)
{
    pthread_mutex_lock(&g_pool.lock);
    g_pool.open = 0;
    while (g_pool.n_free) {
        uint8_t *b = g_pool.free[--g_pool.n_free];
        for (uint32_t i = 0; i < g_pool.n_all; i++)
            if (g_pool.all[i] == b) {
                g_pool.all[i] = g_pool.all[--g_pool.n_all];
                break;
            }
        free(b);
    }
    if (store) {
        store->refused_buffers += g_pool.refused;
        store->foreign_buffers += g_pool.foreign;
    }
    g_pool.refused = 0;
    g_pool.foreign = 0;
    pthread_mutex_unlock(&g_pool.lock);
}

uint64_t xsp_gpu_late_buffers(void)
{
    pthread_mutex_lock(&g_pool.lock);
    uint64_t n = g_pool.late;
    pthread_mutex_unlock(&g_pool.lock);
    return n;
}

/* ---- CUPTI callbacks ---- */

static void CUPTIAPI buf_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = pool_get();
    *size = *buffer ? XSP_GPU_BUF_BYTES : 0;
    *max_records = 0;                     /* as many records as fit */
}

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
                                   size_t valid)
{
    (void)size;
    atomic_fetch_add(&g_inflight, 1);
    xsp_gpu_store *s = atomic_load(&g_store);
    if (s) {
        if (buf && valid)
            xsp_gpu_decode(s, buf, valid);
        const xsp_cupti_fns *f = xsp_cupti();
        size_t dropped = 0;
        if (f && f->ActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS &&
            dropped)
            xsp_gpu_store_add_dropped(s, dropped);
    }
    atomic_fetch_sub(&g_inflight, 1);
    if (!s) {
        pthread_mutex_lock(&g_pool.lock);
        g_pool.late++;
        pthread_mutex_unlock(&g_pool.lock);
    }
    if (buf)
        pool_put(buf);
}

/* Subscribing only claims CUPTI; no callback domain is enabled, so this never runs. */
static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain,
                                 CUpti_CallbackId cbid, const void *data)
{
    (void)userdata;
    (void)domain;
    (void)cbid;
    (void)data;
}

/* ---- start / stop ---- */

static void set_error(char *err, size_t errlen, const char *call, CUptiResult r)
{
    const char *name = xsp_cupti_result_name(r);
    switch (r) {
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
        snprintf(err, errlen, "another tool such as torch.profiler or Nsight holds CUPTI "
                 "(%s: %s); stop it before profiling at level G", call, name);
        break;
    case CUPTI_ERROR_UNKNOWN:
    case CUPTI_ERROR_NOT_INITIALIZED:
        snprintf(err, errlen, "no CUDA device or driver was found, so CUPTI cannot trace the "
                 "GPU (%s: %s)", call, name);
        break;
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
        snprintf(err, errlen, "not allowed to profile the GPU (%s: %s); see NVIDIA's "
                 "ERR_NVGPUCTRPERM", call, name);
        break;
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED:
        snprintf(err, errlen, "CUPTI does not support this virtualized GPU (%s: %s)", call, name);
        break;
    default:
        snprintf(err, errlen, "%s failed: %s", call, name);
        break;
    }
}

/* Waits until no completion callback is inside the store: after this, none will be. */
static void unregister_store(void)
{
    atomic_store(&g_store, NULL);
    while (atomic_load(&g_inflight) != 0)
        sched_yield();
}

/* Undoes start's steps in reverse; returns the first CUPTI error (CUPTI_SUCCESS if none) and
 * its call's name in *call. */
static CUptiResult teardown(const xsp_cupti_fns *f, xsp_gpu_store *store, int flush,
                            const char **call)
{
    CUptiResult first = CUPTI_SUCCESS, r;
#define NOTE(expr, name)                                                                       \
    do {                                                                                       \
        r = (expr);                                                                            \
        if (r != CUPTI_SUCCESS && first == CUPTI_SUCCESS) {                                    \
            first = r;                                                                         \
            *call = name;                                                                      \
        }                                                                                      \
    } while (0)
    atomic_store(&g_push_on, 0);
    for (size_t i = N_KINDS; i-- > 0;)
        if (g_sess.enabled & (1u << i))
            NOTE(f->ActivityDisable(k_kinds[i].kind), "cuptiActivityDisable");
    g_sess.enabled = 0;
    if (flush) {
        NOTE(f->ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
        size_t dropped = 0;
        if (f->ActivityGetNumDroppedRecords(NULL, 0, &dropped) == CUPTI_SUCCESS && dropped)
            xsp_gpu_store_add_dropped(store, dropped);
    }
    unregister_store();
    pool_close(store);
    if (g_sess.tid_restore && f->SetThreadIdType)
        NOTE(f->SetThreadIdType(g_sess.tid_prev), "cuptiSetThreadIdType");
    g_sess.tid_restore = 0;
    if (g_sess.sub)
        NOTE(f->Unsubscribe(g_sess.sub), "cuptiUnsubscribe");
    g_sess.sub = NULL;
#undef NOTE
    return first;
}

int xsp_gpu_start(xsp_gpu_store *store, xsp_gpu_clock_fn clock, char *err, size_t errlen)
{
    if (!store || !clock) {
        snprintf(err, errlen, "xsp_gpu_start needs a store and a clock");
        return -1;
    }
    int rc = -1;
    const xsp_cupti_fns *f = NULL;
    const char *call = "cuptiSubscribe";
    CUptiResult r;
    pthread_mutex_lock(&g_sess_lock);
    if (g_sess.active) {
        snprintf(err, errlen, "a GPU tracing session is already active");
        goto out;
    }
    if (xsp_cupti_open(NULL, 0, err, errlen) != 0)
        goto out;
    f = xsp_cupti();
    store->shared = 0;
    r = f->Subscribe(&g_sess.sub, on_callback, NULL);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && store->share_ok) {
        /* another client's idle subscription (the caller checked it is not tracing): the
         * activity API needs no subscriber, so trace without one, as Kineto does when its
         * own subscribe fails */
        g_sess.sub = NULL;
        store->shared = 1;
    } else if (r != CUPTI_SUCCESS) {
        g_sess.sub = NULL;
        goto fail;
    }
    call = "cuptiActivityRegisterTimestampCallback";
    if (g_ts_clock != clock || g_ts_fns != f || store->shared) {
        if ((r = f->ActivityRegisterTimestampCallback(clock)) != CUPTI_SUCCESS)
            goto fail;
        g_ts_clock = clock;
        g_ts_fns = f;
    }
    store->tid_type = -1;
    if (f->GetThreadIdType && f->SetThreadIdType &&
        f->GetThreadIdType(&g_sess.tid_prev) == CUPTI_SUCCESS) {
        if (g_sess.tid_prev == CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM) {
            store->tid_type = 1;
        } else if (f->SetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM) == CUPTI_SUCCESS) {
            store->tid_type = 1;
            g_sess.tid_restore = 1;
        } else {
            store->tid_type = g_sess.tid_prev == CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT ? 0 : -1;
        }
    }
    store->clock = 1;
    store->cupti_version = f->version;
    store->kinds_missing = 0;
    pool_open();
    atomic_store(&g_store, store);
    call = "cuptiActivityRegisterCallbacks";
    if ((r = f->ActivityRegisterCallbacks(buf_requested, buf_completed)) != CUPTI_SUCCESS)
        goto fail;
    call = "cuptiActivityEnable";
    for (size_t i = 0; i < N_KINDS; i++) {
        r = f->ActivityEnable(k_kinds[i].kind);
        if (r == CUPTI_SUCCESS) {
            g_sess.enabled |= 1u << i;
        } else if (k_kinds[i].optional && r != CUPTI_ERROR_UNKNOWN &&
                   r != CUPTI_ERROR_NOT_INITIALIZED) {
            store->kinds_missing |= 1u << i;
        } else {
            goto fail;
        }
    }
    g_sess.f = f;
    g_sess.store = store;
    g_sess.active = 1;
    atomic_store(&g_push_on, 1);
    rc = 0;
    goto out;
fail:
    set_error(err, errlen, call, r);
    {
        const char *ignored = NULL;
        (void)teardown(f, store, 0, &ignored);
    }
    store->clock = 0;
out:
    pthread_mutex_unlock(&g_sess_lock);
    return rc;
}

int xsp_gpu_stop(xsp_gpu_store *store, char *err, size_t errlen)
{
    int rc = -1;
    const char *call = NULL;
    CUptiResult r;
    pthread_mutex_lock(&g_sess_lock);
    if (!g_sess.active) {
        snprintf(err, errlen, "no GPU tracing session is active");
        goto out;
    }
    if (store != g_sess.store) {
        snprintf(err, errlen, "xsp_gpu_stop: not the store of the active session");
        goto out;
    }
    r = teardown(g_sess.f, store, 1, &call);
    g_sess.active = 0;
    g_sess.store = NULL;
    if (r != CUPTI_SUCCESS)
        set_error(err, errlen, call, r);
    else
        rc = 0;
out:
    pthread_mutex_unlock(&g_sess_lock);
    return rc;
}

int xsp_gpu_active(void)
{
    pthread_mutex_lock(&g_sess_lock);
    int a = g_sess.active;
    pthread_mutex_unlock(&g_sess_lock);
    return a;
}

int xsp_gpu_finalize(char *err, size_t errlen)
{
    pthread_mutex_lock(&g_sess_lock);
    int rc = -1;
    const xsp_cupti_fns *f = xsp_cupti();
    if (g_sess.active)
        snprintf(err, errlen, "xsp_gpu_finalize: a GPU tracing session is active");
    else if (!f)
        snprintf(err, errlen, "xsp_gpu_finalize: libcupti is not loaded");
    else if (!f->Finalize)
        snprintf(err, errlen, "xsp_gpu_finalize: %s has no cuptiFinalize", f->path);
    else {
        atomic_fetch_add(&g_epoch, 1);
        g_ts_clock = NULL;          /* cuptiFinalize drops the timestamp callback too */
        g_ts_fns = NULL;
        CUptiResult r = f->Finalize();
        if (r != CUPTI_SUCCESS)
            set_error(err, errlen, "cuptiFinalize", r);
        else
            rc = 0;
    }
    pthread_mutex_unlock(&g_sess_lock);
    return rc;
}

/* ---- hot path ---- */

void xsp_gpu_push(uint64_t external_id)
{
    if (!atomic_load_explicit(&g_push_on, memory_order_acquire))
        return;
    const xsp_cupti_fns *f = xsp_cupti();
    if (!f)
        return;
    uint32_t ep = atomic_load_explicit(&g_epoch, memory_order_relaxed);
    if (t_depth && t_epoch != ep)
        t_depth = 0;                      /* CUPTI was finalized: that stack is gone */
    if (f->ActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2,
                                             external_id) == CUPTI_SUCCESS) {
        t_depth++;
        t_epoch = ep;
    }
}

void xsp_gpu_pop(void)
{
    if (!t_depth)
        return;
    t_depth--;
    const xsp_cupti_fns *f = xsp_cupti();
    if (!f || t_epoch != atomic_load_explicit(&g_epoch, memory_order_relaxed)) {
        t_depth = 0;
        return;
    }
    f->ActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, NULL);
}
