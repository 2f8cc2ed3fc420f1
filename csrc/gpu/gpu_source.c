/*
 * gpu_source.c: the G level as a session source (see gpu_source.h).  Plain glue: the store's
 * lifetime is the session's; CUPTI's start, stop and the merge are cupti_session.c's and
 * gpu_merge.c's.
 */
#include "gpu_source.h"

#include <stdio.h>

#include "activity.h"
#include "cupti_load.h"
#include "cupti_session.h"
#include "gpu_merge.h"

static const xsp_span_hooks HOOKS = {xsp_gpu_push, xsp_gpu_pop};

static int gpu_start(void *ctx, char *err, size_t errlen)
{
    return xsp_gpu_start(ctx, xsp_rec_now, err, errlen);
}

static void gpu_stop(void *ctx, char *err, size_t errlen)
{
    if (xsp_gpu_stop(ctx, err, errlen) != 0 && !err[0])
        snprintf(err, errlen, "CUPTI's stop failed");
}

static void gpu_release(void *ctx)
{
    xsp_gpu_store_free(ctx);
}

int xsp_gpu_source(xsp_source *out, uint64_t max_bytes, int share_ok, char *err, size_t errlen)
{
    if (!xsp_cupti()) {
        snprintf(err, errlen, "libcupti is not loaded");
        return -1;
    }
    xsp_gpu_store *store = xsp_gpu_store_new(max_bytes);
    if (!store) {
        snprintf(err, errlen, "out of memory for the GPU record store");
        return -1;
    }
    store->share_ok = share_ok;
    *out = (xsp_source){.name = "gpu", .early = 1, .hooks = &HOOKS, .start = gpu_start,
                        .stop = gpu_stop, .merge = xsp_gpu_merge, .release = gpu_release,
                        .ctx = store};
    return 0;
}
