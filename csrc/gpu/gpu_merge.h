/*
 * gpu_merge.h: joins the GPU store's records to the merged CPU trace at stop.
 *
 * Runs as the core's xsp_merge_extra (recorder.h): the CPU spans are merged and numbered; this
 * adds one span per GPU record and re-sorts.  Parents, by CUPTI correlation:
 *   API call (runtime/driver)          -> the span whose external id (CUSTOM2) was pushed on
 *                                         that thread when the call was made: the innermost
 *                                         recorded span, normally an op
 *   kernel / memcpy / memset           -> the same span as its launching API call (kernels
 *                                         replayed from a CUDA graph share the correlation id
 *                                         of cudaGraphLaunch, so they land under the op that
 *                                         launched the graph); attribute "api" = that call
 *   synchronization                    -> its API call
 *   overhead, and anything whose call  -> the region span (or a root without M): never
 *   was made outside every span           dropped; counted in "gpu.unattributed"
 * Tracks: API calls and syncs on the calling CPU thread; kernels, copies and memsets on a GPU
 * stream track (tid = device << 32 | stream, kind 1); CUPTI overhead on its own track (kind 2).
 */
#ifndef XSP_GPU_MERGE_H
#define XSP_GPU_MERGE_H

#include "../core/recorder.h"
#include "activity.h"

/* The xsp_merge_extra function; arg is the xsp_gpu_store (read, not changed).  Adds the GPU
 * spans, re-sorts and renumbers (span-id attributes "fwd_op" included), and adds the "gpu.*"
 * counters.  Returns 0, or -1 on allocation failure (t may then be partly changed: the core
 * discards it and the stop fails). */
int xsp_gpu_merge(xsp_trace *t, xsp_resolve_fn resolve, void *rctx, const xsp_clock_map *map,
                  void *arg);

#endif
