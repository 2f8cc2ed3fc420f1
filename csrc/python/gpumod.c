/*
 * gpumod.c: see gpumod.h.  No state of its own: the GPU source's store belongs to the session
 * (core/session.c), its start and stop to csrc/gpu.
 */
#include "gpumod.h"

#include <stdio.h>

#include "../core/recorder.h"

#ifdef XSP_HAVE_CUPTI
#include "../gpu/cupti_load.h"
#include "../gpu/gpu_source.h"

int xsp_pygpu_built(const char **why)
{
    *why = NULL;
    return 1;
}

int xsp_pygpu_open(const char *const *dirs, size_t n, char *err, size_t errlen)
{
    return xsp_cupti_open(dirs, n, err, errlen);
}

int xsp_pygpu_source(xsp_source *out, uint64_t gpu_max_bytes, int share_ok, char *err,
                     size_t errlen)
{
    return xsp_gpu_source(out, gpu_max_bytes, share_ok, err, errlen);
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

int xsp_pygpu_source(xsp_source *out, uint64_t gpu_max_bytes, int share_ok, char *err,
                     size_t errlen)
{
    (void)out;
    (void)gpu_max_bytes;
    (void)share_ok;
    snprintf(err, errlen, "%s", NOT_BUILT);
    return -1;
}

const char *xsp_pygpu_library(void)
{
    return NULL;
}

#endif
