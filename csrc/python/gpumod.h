/*
 * gpumod.h: the G level as seen from xsp._core: opening CUPTI, starting and stopping its
 * session around the core's, and merging its records at stop.  Compiled in every build; without
 * CUPTI's headers (XSP_HAVE_CUPTI undefined) every call says why G is unavailable.
 */
#ifndef XSP_GPUMOD_H
#define XSP_GPUMOD_H

#include <stddef.h>
#include <stdint.h>

#include "../core/trace.h"

/* 1 when this build has the GPU source; else 0 and *why says what is missing. Cannot fail. */
int xsp_pygpu_built(const char **why);

/* Loads libcupti (extra_dirs first after a copy already in the process). Returns 0, or -1 with
 * a message in err. */
int xsp_pygpu_open(const char *const *dirs, size_t n, char *err, size_t errlen);

/* Starts a recording session with G: installs the span hooks, starts the core, then CUPTI.
 * Returns 0; -1 with a message in err when CUPTI (G) cannot start; -2 when the core session
 * cannot (already active, no memory).  On failure nothing is left running or installed.
 * share_ok: see xsp_gpu_store.share_ok (the caller has checked the other client is idle). */
int xsp_pygpu_session_start(const void *core_cfg, uint64_t gpu_max_bytes, int share_ok,
                            char *err, size_t errlen);

/* 1 while a session started by xsp_pygpu_session_start records. Cannot fail. */
int xsp_pygpu_active(void);

/* Stops CUPTI (forced flush), then the core, merging the GPU records; removes the hooks.
 * *gpu_err receives a message when CUPTI's stop failed (the trace is still made).  Returns 0,
 * or -1 with a message in err (as xsp_session_stop). */
int xsp_pygpu_session_stop(xsp_trace **out, char *gpu_err, size_t gpu_errlen, char *err,
                           size_t errlen);

/* Path of the libcupti in use, or NULL. Cannot fail. */
const char *xsp_pygpu_library(void);

#endif
