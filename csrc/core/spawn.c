/*
 * spawn.c: the spawning op of each intra-op pool root (spawn.h has the rule).
 *
 * Index: the spans of every non-pool CPU thread, in id order (= start order), one array cut
 * per thread by counting.  A query for root r on thread T: a binary search for the last span
 * of T starting at or before r, then up its parent chain (parents on T enclose it) to the
 * first span that also ends at or after r; then up to the nearest op, then past the loop's
 * own ops.  Each query costs log n plus the nesting depth, per thread: threads are few.
 */
#include <stdlib.h>
#include <string.h>

#include "spawn.h"

static int is_op(uint8_t kind)
{
    return kind == XSP_KIND_OP || kind == XSP_KIND_BACKWARD || kind == XSP_KIND_SCOPE;
}

/* The spawner of root r among the spans ids[0..n) of one thread (ids ascending), by the rule
 * of spawn.h, or XSP_NO_PARENT.  loopname[s] != 0: string s names a span on a pool thread. */
static uint32_t spawner_on(const xsp_trace *t, const uint32_t *ids, uint32_t n, uint32_t r,
                           const uint8_t *loopname)
{
    const xsp_span *sp = t->spans, *rs = &t->spans[r];
    uint32_t lo = 0, hi = n;            /* the first index whose span starts after r */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (sp[ids[mid]].start_ns <= rs->start_ns)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (!lo)
        return XSP_NO_PARENT;
    uint32_t j = ids[lo - 1], th = sp[j].thread;
    while (j != XSP_NO_PARENT && (sp[j].end_ns < rs->end_ns || !is_op(sp[j].kind))) {
        uint32_t p = sp[j].parent;
        j = p != XSP_NO_PARENT && sp[p].thread == th ? p : XSP_NO_PARENT;
    }
    while (j != XSP_NO_PARENT && loopname[sp[j].name]) {
        uint32_t p = sp[j].parent;
        if (p == XSP_NO_PARENT || sp[p].thread != th || !is_op(sp[p].kind))
            break;
        j = p;
    }
    return j;
}

/* Step 1 of xsp_spawn_link: the per-thread index of the non-pool threads' spans.  *off gets
 * n_threads + 1 offsets into *ids.  0, or -1 (out of memory; nothing allocated). */
static int build_index(const xsp_trace *t, const uint8_t *pool, uint32_t n_pool,
                       uint32_t **ids, uint32_t **off)
{
    uint32_t nt = t->n_threads;
    *off = calloc((size_t)nt + 1, sizeof **off);
    *ids = malloc((t->n_spans ? t->n_spans : 1) * sizeof **ids);
    if (!*off || !*ids) {
        free(*off);
        free(*ids);
        return -1;
    }
    for (uint32_t i = 0; i < t->n_spans; i++) {
        uint32_t th = t->spans[i].thread;
        if (th < nt && !(th < n_pool && pool[th]))
            (*off)[th + 1]++;
    }
    for (uint32_t k = 0; k < nt; k++)
        (*off)[k + 1] += (*off)[k];
    uint32_t *fill = malloc((nt ? nt : 1) * sizeof *fill);
    if (!fill) {
        free(*off);
        free(*ids);
        return -1;
    }
    memcpy(fill, *off, nt * sizeof *fill);
    for (uint32_t i = 0; i < t->n_spans; i++) {
        uint32_t th = t->spans[i].thread;
        if (th < nt && !(th < n_pool && pool[th]))
            (*ids)[fill[th]++] = i;
    }
    free(fill);
    return 0;
}

int xsp_spawn_link(xsp_trace *t, const uint8_t *pool, uint32_t n_pool, xsp_spawn_counts *counts)
{
    xsp_spawn_counts c = {0, 0, 0};
    uint32_t region = XSP_NO_PARENT;
    for (uint32_t i = 0; i < t->n_spans && region == XSP_NO_PARENT; i++)
        if (t->spans[i].kind == XSP_KIND_REGION)
            region = i;
    int any = 0;
    for (uint32_t i = 0; i < t->n_spans && !any; i++)
        any = t->spans[i].parent == XSP_NO_PARENT && t->spans[i].thread < n_pool
              && pool[t->spans[i].thread];
    uint32_t *ids = NULL, *off = NULL;
    uint8_t *loopname = NULL;
    int rc = 0;
    if (any) {
        loopname = calloc(t->strings.n ? t->strings.n : 1, 1);
        if (!loopname || build_index(t, pool, n_pool, &ids, &off) != 0) {
            free(loopname);
            loopname = NULL;
            rc = -1;
        } else {
            for (uint32_t i = 0; i < t->n_spans; i++) {
                const xsp_span *s = &t->spans[i];
                if (s->thread < n_pool && pool[s->thread] && s->name < t->strings.n)
                    loopname[s->name] = 1;
            }
        }
    }
    const xsp_span *rs = region != XSP_NO_PARENT ? &t->spans[region] : NULL;
    for (uint32_t i = 0; i < t->n_spans; i++) {
        xsp_span *s = &t->spans[i];
        if (s->parent != XSP_NO_PARENT || i == region)
            continue;
        int in_pool = s->thread < n_pool && pool[s->thread];
        uint32_t link = XSP_NO_PARENT;
        int found = 0;
        if (in_pool && loopname) {
            for (uint32_t th = 0; th < t->n_threads; th++) {
                uint32_t j = spawner_on(t, ids + off[th], off[th + 1] - off[th], i, loopname);
                if (j != XSP_NO_PARENT) {
                    found++;
                    link = j;
                }
            }
        }
        if (in_pool) {
            if (found == 1 && link < i) {
                s->parent = link;
                c.linked++;
                continue;
            }
            if (found > 1)
                c.ambiguous++;
            else
                c.unlinked++;
        }
        if (rs && i > region && s->thread != rs->thread && s->start_ns <= rs->end_ns)
            s->parent = region;
    }
    free(ids);
    free(off);
    free(loopname);
    if (counts)
        *counts = c;
    return rc;
}
