/*
 * gpu_source.h: the G level as a session source (core/session.h): CUPTI's activity session
 * into a record store, the span hooks that push each span's external correlation id, and the
 * merge that joins the GPU records to the CPU spans at stop.
 *
 * The source is early (session.h): CUPTI starts before the region span begins and is flushed
 * after it ends.  The caller synchronises the devices before the session stops (a late source
 * of its own), so that the forced flush delivers every record of finished work.
 */
#ifndef XSP_GPU_SOURCE_H
#define XSP_GPU_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "../core/session.h"

/* Fills *out with the GPU source: a new record store capped at max_bytes (0: the store's
 * default), share_ok as xsp_gpu_store.share_ok (the caller has checked that another CUPTI
 * client is idle).  Returns 0 (the store is out->ctx, freed by out->release), or -1 with a
 * message in err (libcupti not loaded, out of memory) and nothing allocated. */
int xsp_gpu_source(xsp_source *out, uint64_t max_bytes, int share_ok, char *err, size_t errlen);

#endif
