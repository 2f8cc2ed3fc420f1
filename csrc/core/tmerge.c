/*
 * tmerge.c: merging several traces onto one clock (see tmerge.h).
 *
 * Two passes over the inputs, in the inputs' own order ("old" ids: input k's span i is
 * base[k] + i), then one sort:
 *   1. every span is copied with its times shifted, its name re-interned and its parent, thread
 *      and attribute range moved into the old numbering; its depth is its parent's + 1 (an
 *      input lists parents first), and the attributes are copied with their strings
 *      re-interned (id-valued ones moved into the old numbering);
 *   2. an index is sorted by (start, depth, old id): the new order.  Sorting by depth among
 *      equal starts puts a parent before a child that starts with it (a child never starts
 *      before its parent: the offset line moves both alike, and rounding is settled by
 *      clamping a child to its parent's start);
 *   3. the spans and their attributes are laid out in the new order, parents and id-valued
 *      attributes renumbered.
 * Memory: the output plus, while merging, 32 bytes per span (the sort keys and the maps).
 */
#include "tmerge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct skey {
    uint64_t start;   /* shifted start */
    uint32_t depth;   /* parents first among equal starts */
    uint32_t old;     /* old id: ties keep the inputs' order */
} skey;

static int skey_cmp(const void *pa, const void *pb)
{
    const skey *a = pa, *b = pb;
    if (a->start != b->start)
        return a->start < b->start ? -1 : 1;
    if (a->depth != b->depth)
        return a->depth < b->depth ? -1 : 1;
    return a->old < b->old ? -1 : a->old > b->old;
}

static void set_err(char *err, size_t errlen, const char *msg)
{
    if (err && errlen)
        snprintf(err, errlen, "%s", msg);
}

/* t + offset(t) of input in, rounded; 0 with *bad set when it leaves 0..2^64. */
static uint64_t shifted(const xsp_merge_in *in, uint64_t t, int *bad)
{
    double off = in->o0;
    if (in->t1 != in->t0)
        off += (in->o1 - in->o0) * ((double)t - in->t0) / (in->t1 - in->t0);
    /* rounded half away from zero, without libm; offsets beyond 2^62 ns are errors */
    if (!(off > -4.6e18 && off < 4.6e18)) {
        *bad = 1;
        return 0;
    }
    int64_t r = (int64_t)(off >= 0 ? off + 0.5 : off - 0.5);
    if (r < 0 && t < (uint64_t)(-r)) {
        *bad = 1;
        return 0;
    }
    if (r >= 0 && t > UINT64_MAX - (uint64_t)r) {
        *bad = 1;
        return 0;
    }
    return r < 0 ? t - (uint64_t)(-r) : t + (uint64_t)r;
}

xsp_trace *xsp_trace_merge(const xsp_merge_in *in, uint32_t n, const char *const *id_keys,
                           uint32_t n_keys, char *err, size_t errlen)
{
    uint64_t total = 0, total_attrs = 0;
    for (uint32_t k = 0; k < n; k++) {
        total += in[k].trace->n_spans;
        total_attrs += in[k].trace->n_attrs + 1;     /* + a rank attribute: grown if more */
    }
    if (n == 0) {
        set_err(err, errlen, "merge: no traces");
        return NULL;
    }
    if (total >= UINT32_MAX) {
        set_err(err, errlen, "merge: more spans than 32-bit span ids hold");
        return NULL;
    }
    xsp_trace *out = xsp_trace_new();
    skey *keys = malloc((total ? total : 1) * sizeof *keys);
    uint32_t *depth = malloc((total ? total : 1) * sizeof *depth);
    uint32_t *new_id = malloc((total ? total : 1) * sizeof *new_id);
    xsp_span *tmp = malloc((total ? total : 1) * sizeof *tmp);
    uint32_t *key_ids = calloc(n_keys ? n_keys : 1, sizeof *key_ids);
    xsp_attr *tattrs = NULL;
    uint32_t *smap = NULL;
    uint64_t n_tattrs = 0, cap_tattrs = total_attrs ? total_attrs : 1;
    int64_t unlinked = 0;
    const char *why = NULL;
    if (!out || !keys || !depth || !new_id || !tmp || !key_ids)
        goto nomem;
    tattrs = malloc(cap_tattrs * sizeof *tattrs);
    if (!tattrs)
        goto nomem;
    for (uint32_t j = 0; j < n_keys; j++)
        if ((key_ids[j] = xsp_strtab_intern(&out->strings, id_keys[j], strlen(id_keys[j])))
            == UINT32_MAX)
            goto nomem;
    uint32_t rank_key = xsp_strtab_intern(&out->strings, "rank", 4);
    if (rank_key == UINT32_MAX)
        goto nomem;
    /* 1: copy, shift, re-intern, in the old numbering */
    uint64_t base = 0;
    for (uint32_t k = 0; k < n; k++) {
        const xsp_trace *t = in[k].trace;
        free(smap);
        smap = malloc((t->strings.n ? t->strings.n : 1) * sizeof *smap);
        if (!smap)
            goto nomem;
        for (uint32_t s = 0; s < t->strings.n; s++) {
            size_t len;
            const char *p = xsp_strtab_get(&t->strings, s, &len);
            if ((smap[s] = xsp_strtab_intern(&out->strings, p, len)) == UINT32_MAX)
                goto nomem;
        }
        uint32_t tbase = out->n_threads;
        for (uint32_t h = 0; h < t->n_threads; h++) {
            char name[320];
            const char *tn = xsp_strtab_get(&t->strings, t->threads[h].name, NULL);
            if (tn && *tn)
                snprintf(name, sizeof name, "rank %lld: %s", (long long)in[k].rank, tn);
            else
                snprintf(name, sizeof name, "rank %lld: thread %llu", (long long)in[k].rank,
                         (unsigned long long)t->threads[h].tid);
            if (xsp_trace_add_thread(out, t->threads[h].tid, name, t->threads[h].kind)
                == UINT32_MAX)
                goto nomem;
        }
        for (uint32_t i = 0; i < t->n_spans; i++) {
            const xsp_span *s = &t->spans[i];
            uint64_t g = base + i;
            xsp_span *o = &tmp[g];
            int bad = 0;
            *o = *s;
            o->start_ns = shifted(&in[k], s->start_ns, &bad);
            uint64_t e = shifted(&in[k], s->end_ns, &bad);
            if (bad) {
                why = "merge: a clock offset moves a span before time 0 or past 2^64 ns";
                goto fail;
            }
            if (s->parent != XSP_NO_PARENT) {
                o->parent = (uint32_t)(base + s->parent);
                depth[g] = depth[o->parent] + 1;
                if (o->start_ns < tmp[o->parent].start_ns)   /* rounding: never before it */
                    o->start_ns = tmp[o->parent].start_ns;
            } else {
                depth[g] = 0;
            }
            o->end_ns = e < o->start_ns ? o->start_ns : e;
            o->name = smap[s->name];
            o->thread = tbase + s->thread;
            o->attr_off = (uint32_t)n_tattrs;
            uint32_t na = 0;
            for (uint32_t a = 0; a < s->attr_n; a++) {
                xsp_attr v = t->attrs[s->attr_off + a];
                v.key = smap[v.key];
                if (v.type == XSP_ATTR_STR)
                    v.v.s = smap[v.v.s];
                int is_id = 0;
                for (uint32_t j = 0; j < n_keys; j++)
                    is_id |= v.key == key_ids[j];
                if (is_id && v.type == XSP_ATTR_INT) {
                    if (v.v.i < 0 || (uint64_t)v.v.i >= t->n_spans) {
                        unlinked++;
                        continue;
                    }
                    v.v.i = (int64_t)(base + (uint64_t)v.v.i);
                }
                tattrs[n_tattrs++] = v;
                na++;
            }
            if (s->kind == XSP_KIND_REGION && s->parent == XSP_NO_PARENT) {
                if (n_tattrs == cap_tattrs) {
                    xsp_attr *grown = realloc(tattrs, 2 * cap_tattrs * sizeof *tattrs);
                    if (!grown)
                        goto nomem;
                    tattrs = grown;
                    cap_tattrs *= 2;
                }
                tattrs[n_tattrs++] = (xsp_attr){.key = rank_key, .type = XSP_ATTR_INT,
                                                .v.i = in[k].rank};
                na++;
            }
            if (na > UINT16_MAX || n_tattrs >= UINT32_MAX) {
                why = "merge: more attributes than the trace's ids hold";
                goto fail;
            }
            o->attr_n = (uint16_t)na;
            keys[g] = (skey){.start = o->start_ns, .depth = depth[g], .old = (uint32_t)g};
        }
        for (uint32_t c = 0; c < t->n_counters; c++) {
            const char *ck = xsp_strtab_get(&t->strings, t->counters[c].key, NULL);
            if (xsp_trace_add_counter(out, ck, t->counters[c].v.i) != 0)
                goto nomem;
        }
        base += t->n_spans;
    }
    /* 2: the new order */
    qsort(keys, (size_t)total, sizeof *keys, skey_cmp);
    for (uint64_t p = 0; p < total; p++)
        new_id[keys[p].old] = (uint32_t)p;
    /* 3: lay out spans and attributes in it */
    out->spans = malloc((total ? total : 1) * sizeof *out->spans);
    out->attrs = malloc((n_tattrs ? n_tattrs : 1) * sizeof *out->attrs);
    if (!out->spans || !out->attrs)
        goto nomem;
    out->cap_spans = (uint32_t)(total ? total : 1);
    out->cap_attrs = (uint32_t)(n_tattrs ? n_tattrs : 1);
    uint32_t na_out = 0;
    for (uint64_t p = 0; p < total; p++) {
        xsp_span s = tmp[keys[p].old];
        if (s.parent != XSP_NO_PARENT)
            s.parent = new_id[s.parent];
        uint32_t off = na_out;
        for (uint32_t a = 0; a < s.attr_n; a++) {
            xsp_attr v = tattrs[s.attr_off + a];
            int is_id = 0;
            for (uint32_t j = 0; j < n_keys; j++)
                is_id |= v.key == key_ids[j];
            if (is_id && v.type == XSP_ATTR_INT)
                v.v.i = new_id[v.v.i];
            out->attrs[na_out++] = v;
        }
        s.attr_off = off;
        out->spans[p] = s;
    }
    out->n_spans = (uint32_t)total;
    out->n_attrs = na_out;
    if (unlinked && xsp_trace_add_counter(out, "merge.unlinked", unlinked) != 0)
        goto nomem;
    goto done;
nomem:
    why = "merge: out of memory";
fail:
    set_err(err, errlen, why);
    xsp_trace_free(out);
    out = NULL;
done:
    free(keys);
    free(depth);
    free(new_id);
    free(tmp);
    free(key_ids);
    free(tattrs);
    free(smap);
    return out;
}
