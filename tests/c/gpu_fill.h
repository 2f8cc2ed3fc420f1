/*
 * gpu_fill.h: filling a GPU store by hand with the records CUPTI would deliver, for the
 * programs that run the real session and merge without a GPU (test_gpu_merge.c,
 * make_gpu_trace.c).  Header-only, for tests: the helpers abort when out of memory.
 */
#ifndef XSP_TESTS_GPU_FILL_H
#define XSP_TESTS_GPU_FILL_H

#include <stdlib.h>
#include <string.h>

#include "gpu/activity.h"

/* Appends a record of kind with name, times and correlation id to s (grown as needed),
 * zeroed otherwise, with device, context and stream XSP_GPU_NONE; returns it for the caller
 * to fill.  The pointer is valid until the next append. */
static inline xsp_gpu_rec *fill_rec(xsp_gpu_store *s, uint8_t kind, const char *name,
                                    uint64_t start, uint64_t end, uint32_t corr)
{
    if (s->n_recs == s->cap_recs) {
        s->cap_recs = s->cap_recs ? 2 * s->cap_recs : 16;
        s->recs = realloc(s->recs, s->cap_recs * sizeof *s->recs);
        if (!s->recs)
            abort();
    }
    xsp_gpu_rec *r = &s->recs[s->n_recs++];
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->start_ns = start;
    r->end_ns = end;
    r->correlation_id = corr;
    r->name = xsp_strtab_intern(&s->names, name, strlen(name));
    r->device = r->context = r->stream = XSP_GPU_NONE;
    return r;
}

/* Appends an external-id record (CUPTI's EXTERNAL_CORRELATION): ext_id of kind (5 is xsp's
 * CUSTOM2) for correlation id corr. */
static inline void fill_ext(xsp_gpu_store *s, uint64_t ext_id, uint32_t kind, uint32_t corr)
{
    if (s->n_ext == s->cap_ext) {
        s->cap_ext = s->cap_ext ? 2 * s->cap_ext : 16;
        s->ext = realloc(s->ext, s->cap_ext * sizeof *s->ext);
        if (!s->ext)
            abort();
    }
    s->ext[s->n_ext++] = (xsp_gpu_ext){.external_id = ext_id, .external_kind = kind,
                                       .correlation_id = corr};
}

#endif
