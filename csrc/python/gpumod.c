/*
 * gpumod.c: see gpumod.h.  The one GPU store of the running session lives here, protected by
 * g_lock (stop runs without the GIL, and the module declares it does not need one); CUPTI's
 * threads touch the store only through its own lock, inside csrc/gpu.
 */
#include "gpumod.h"

#include <pthread.h>
#include <stdio.h>

#include "../core/recorder.h"

#ifdef XSP_HAVE_CUPTI
#include "../gpu/cupti_load.h"
#include "../gpu/cupti_session.h"
#include "../gpu/gpu_merge.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;  /* serialises start and stop */
static xsp_gpu_store *g_store = NULL;   /* the running session's store; protected by g_lock */

int xsp_pygpu_built(const char **why)
{
    *why = NULL;
    return 1;
}

int xsp_pygpu_open(const char *const *dirs, size_t n, char *err, size_t errlen)
{
    return xsp_cupti_open(dirs, n, err, errlen);
}

int xsp_pygpu_session_start(const void *core_cfg, uint64_t gpu_max_bytes, int share_ok,
                            char *err, size_t errlen)
{
    if (!xsp_cupti()) {
        snprintf(err, errlen, "libcupti is not loaded");
        return -1;
    }
    pthread_mutex_lock(&g_lock);
    xsp_span_hooks hooks = {xsp_gpu_push, xsp_gpu_pop};
    if (g_store || xsp_rec_set_hooks(&hooks) != 0) {
        pthread_mutex_unlock(&g_lock);
        snprintf(err, errlen, "a recording session is already active");
        return -2;
    }
    if (xsp_session_start(core_cfg, err, errlen) != 0) {
        xsp_rec_set_hooks(NULL);
        pthread_mutex_unlock(&g_lock);
        return -2;
    }
    g_store = xsp_gpu_store_new(gpu_max_bytes);
    if (g_store)
        g_store->share_ok = share_ok;
    if (!g_store || xsp_gpu_start(g_store, xsp_rec_now, err, errlen) != 0) {
        if (!g_store)
            snprintf(err, errlen, "out of memory for the GPU record store");
        xsp_trace *t = NULL;
        char ignored[64];
        xsp_session_stop(&t, ignored, sizeof ignored);
        xsp_trace_free(t);
        xsp_gpu_store_free(g_store);
        g_store = NULL;
        xsp_rec_set_hooks(NULL);
        pthread_mutex_unlock(&g_lock);
        return -1;
    }
    pthread_mutex_unlock(&g_lock);
    return 0;
}

int xsp_pygpu_active(void)
{
    pthread_mutex_lock(&g_lock);
    int on = g_store != NULL;
    pthread_mutex_unlock(&g_lock);
    return on;
}

int xsp_pygpu_session_stop(xsp_trace **out, char *gpu_err, size_t gpu_errlen, char *err,
                           size_t errlen)
{
    gpu_err[0] = '\0';
    pthread_mutex_lock(&g_lock);
    xsp_gpu_store *s = g_store;
    if (!s) {
        pthread_mutex_unlock(&g_lock);
        return xsp_session_stop(out, err, errlen);
    }
    if (xsp_gpu_stop(s, gpu_err, gpu_errlen) != 0 && !gpu_err[0])
        snprintf(gpu_err, gpu_errlen, "CUPTI's stop failed");
    xsp_merge_extra extra = {xsp_gpu_merge, s};
    int rc = xsp_session_stop_ex(out, &extra, err, errlen);
    g_store = NULL;
    xsp_gpu_store_free(s);
    xsp_rec_set_hooks(NULL);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

const char *xsp_pygpu_library(void)
{
    const xsp_cupti_fns *f = xsp_cupti();
    return f ? f->path : NULL;
}

#else /* no CUPTI headers at build time */

static const char NOT_BUILT[] =
    "this xsp was built without CUPTI's headers, so it cannot record level G; install the CUDA "
    "toolkit (or the nvidia-cuda-cupti package), set CUDA_HOME, and reinstall xsp";

int xsp_pygpu_built(const char **why)
{
    *why = NOT_BUILT;
    return 0;
}

int xsp_pygpu_open(const char *const *dirs, size_t n, char *err, size_t errlen)
{
    (void)dirs;
    (void)n;
    snprintf(err, errlen, "%s", NOT_BUILT);
    return -1;
}

int xsp_pygpu_session_start(const void *core_cfg, uint64_t gpu_max_bytes, int share_ok,
                            char *err, size_t errlen)
{
    (void)core_cfg;
    (void)gpu_max_bytes;
    (void)share_ok;
    snprintf(err, errlen, "%s", NOT_BUILT);
    return -1;
}

int xsp_pygpu_active(void)
{
    return 0;
}

int xsp_pygpu_session_stop(xsp_trace **out, char *gpu_err, size_t gpu_errlen, char *err,
                           size_t errlen)
{
    (void)gpu_errlen;
    gpu_err[0] = '\0';
    return xsp_session_stop(out, err, errlen);
}

const char *xsp_pygpu_library(void)
{
    return NULL;
}

#endif
