/*
 * gpumod.h: the G level as seen from xsp._core: whether it was built, opening CUPTI, and the
 * session source (started, stopped and merged by core/session.c).  Compiled in every build; without
 * CUPTI's headers (XSP_HAVE_CUPTI undefined) every call says why G is unavailable.
 */
#ifndef XSP_GPUMOD_H
#define XSP_GPUMOD_H

#include <stddef.h>
#include <stdint.h>

#include "../core/session.h"

/* 1 when this build has the GPU source; else 0 and *why says what is missing. Cannot fail. */
int xsp_pygpu_built(const char **why);

/* Loads libcupti (extra_dirs first after a copy already in the process). Returns 0, or -1 with
 * a message in err. */
int xsp_pygpu_open(const char *const *dirs, size_t n, char *err, size_t errlen);

/* Fills *out with the GPU source of a session (gpu/gpu_source.h).  Returns 0, or -1 with a
 * message in err: not built with CUPTI, libcupti not loaded, out of memory. */
int xsp_pygpu_source(xsp_source *out, uint64_t gpu_max_bytes, int share_ok, char *err,
                     size_t errlen);

/* Path of the libcupti in use, or NULL. Cannot fail. */
const char *xsp_pygpu_library(void);

#endif
