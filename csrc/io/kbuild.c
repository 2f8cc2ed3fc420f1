/*
 * kbuild.c: the build half of the Kineto JSON reader (kjson.h): the records of the complete
 * events made into a trace, in passes over flat arrays (no per-event allocation):
 *
 *   1. times: ts + baseTimeNanoseconds, checked to lie in 0 .. 2^63 ns;
 *   2. CPU events nested per thread (pid, tid) by time: sorted by (thread, start, longest
 *      first, file order), a stack per thread; an event that outlasts its parent is cut to
 *      the parent's end (kineto.overlaps).  An op whose parent op is named
 *      "autograd::engine::evaluate_function: <its name>" is a backward function; a module
 *      call with no module above it is a model call;
 *   3. GPU work (kernel, gpu_memcpy, gpu_memset, cuda_sync, overhead) under the op whose
 *      cuda_runtime / cuda_driver call has its correlation id (attribute "api": that call),
 *      a sync under the call itself; without a call, kineto.unattributed;
 *   4. the region: the first cat "Trace" event (widened to hold everything), else one made
 *      from the first start to the last end; children that start before their parent (the GPU
 *      clock's skew) are moved to its start (kineto.clamped);
 *   5. tracks: CPU threads in the order they first appear, then GPU streams (device << 32 |
 *      stream);
 *   6. the spans in trace order (start, depth, file order), the region first;
 *   7. backward functions linked to their forward op (attribute "fwd_op"): through fwdbwd flows
 *      (s at the op's start, f at the backward node's start), else the last op before it with
 *      the same sequence number;
 *   8. the memory events (profile_memory's "[memory]" instants) folded into the innermost span
 *      open at their time on their thread, as mem.<dev>.* attributes (those are added last,
 *      with xsp_trace_add_span_attrs, which lays the attributes out again in span order).
 *
 * Attributes stay where kjson.c put them (t->attrs in file order, each span's contiguous,
 * with its reserved slot filled for api or fwd_op); those of events that became no span are
 * left unreferenced, which every reader of a trace allows (trace.h).
 */
#include "kjson_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX

/* -- a map from 64-bit keys to 32-bit values (open addressing, sized once) ------------------- */
typedef struct kmap {
    uint64_t *keys;     /* slot keys; owned */
    uint32_t *vals;     /* slot values, NONE = empty slot; owned */
    uint64_t  mask;     /* slots - 1 */
} kmap;

/* A map for up to n keys; 0 or -1. */
static int kmap_init(kmap *m, uint64_t n)
{
    uint64_t cap = 16;
    while (cap < 2 * n + 2)
        cap *= 2;
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    m->mask = cap - 1;
    if (!m->keys || !m->vals)
        return -1;
    memset(m->vals, 0xff, cap * sizeof *m->vals);
    return 0;
}

static void kmap_free(kmap *m)
{
    free(m->keys);
    free(m->vals);
}

/* The value slot of key: its value, or NONE in a slot now holding key (set it). */
static uint32_t *kmap_at(kmap *m, uint64_t key)
{
    uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> 20 & m->mask;
    while (m->vals[i] != NONE && m->keys[i] != key)
        i = (i + 1) & m->mask;
    m->keys[i] = key;
    return &m->vals[i];
}

/* -- a stable merge sort of record indices ---------------------------------------------------- */
typedef struct build build;
typedef int (*less_fn)(const build *b, uint32_t x, uint32_t y);

/* Sorts a[0..n) stably by less, with tmp of n entries; runs already in order cost one
 * comparison each, so a trace written in time order sorts in linear time. */
static void msort(uint32_t *a, uint32_t n, uint32_t *tmp, less_fn less, const build *b)
{
    for (uint32_t w = 1; w < n; w *= 2) {
        for (uint32_t lo = 0; lo + w < n; lo += 2 * w) {
            uint32_t mid = lo + w, hi = mid + w < n ? mid + w : n;
            if (!less(b, a[mid], a[mid - 1]))
                continue;
            uint32_t i = lo, j = mid, k = 0;
            while (i < mid && j < hi)
                tmp[k++] = less(b, a[j], a[i]) ? a[j++] : a[i++];
            while (i < mid)
                tmp[k++] = a[i++];
            while (j < hi)
                tmp[k++] = a[j++];
            memcpy(a + lo, tmp, (size_t)k * sizeof *a);
        }
    }
}

/* -- the build -------------------------------------------------------------------------------- */
struct build {
    xsp_kjson *r;
    xsp_trace *t;
    kj_rec    *rec;     /* r->recs */
    uint32_t   n;       /* records */
    int64_t   *start;   /* per record: start ns (base added, clamped) */
    int64_t   *end;     /* per record: end ns (cut to the parent's) */
    uint32_t  *parent;  /* per record: parent record, NONE for a root */
    uint32_t  *depth;   /* per record: ancestors */
    uint32_t  *pair;    /* per record: dense id of its (pid, tid) */
    uint32_t  *track;   /* per record: track index */
    uint32_t  *api;     /* per record: the runtime call of GPU work, or NONE */
    uint32_t  *id;      /* per record: span id */
    uint32_t  *cpu;     /* CPU records (nesting order after pass 2) */
    uint32_t   n_cpu;
    uint32_t  *gpu;     /* GPU records, file order */
    uint32_t   n_gpu;
    uint32_t   cpu_first;   /* the first CPU record in file order, or NONE */
    uint32_t  *order;   /* all records but the region, in trace order */
    uint32_t  *tmp;     /* sort scratch */
    uint32_t  *gstart;  /* per pair: its first index in cpu (after the sort), n_pairs + 1 */
    uint32_t   n_pairs;
    kmap       pairs;   /* (pid key << 32 | tid key) -> pair id */
    uint32_t  *mpair;   /* per memory event: its pair id (NONE: a thread without spans) */
    int64_t   *mts;     /* per memory event: its time, ns */
    int64_t    overlaps, clamped, unattributed;
};

static int by_thread(const build *b, uint32_t x, uint32_t y)
{
    if (b->pair[x] != b->pair[y])
        return b->pair[x] < b->pair[y];
    if (b->rec[x].ts != b->rec[y].ts)
        return b->rec[x].ts < b->rec[y].ts;
    return b->rec[x].dur > b->rec[y].dur;       /* longer first; file order by stability */
}

static int by_trace(const build *b, uint32_t x, uint32_t y)
{
    if (b->start[x] != b->start[y])
        return b->start[x] < b->start[y];
    if (b->depth[x] != b->depth[y])
        return b->depth[x] < b->depth[y];
    return b->rec[x].index < b->rec[y].index;
}

static int is_gpu(int kind)
{
    return kind >= XSP_KIND_KERNEL && kind <= XSP_KIND_OVERHEAD;
}

/* The integer attribute key (a string id) of record x: 1 with *v, or 0. */
static int rec_int(const build *b, uint32_t x, uint32_t key, int64_t *v)
{
    const xsp_attr *a = &b->t->attrs[b->rec[x].attr_off];
    for (uint16_t j = 0; j < b->rec[x].attr_n; j++)
        if (a[j].key == key && a[j].type == XSP_ATTR_INT) {
            *v = a[j].v.i;
            return 1;
        }
    return 0;
}

/* Decodes key id k (xsp_kjson.keys) into *v. */
static void key_val(const xsp_kjson *r, uint32_t k, kj_val *v)
{
    size_t n;
    const unsigned char *s = (const unsigned char *)xsp_strtab_get(&r->keys, k, &n);
    memset(v, 0, sizeof *v);
    v->type = s[0];
    if (v->type == KV_INT)
        memcpy(&v->i, s + 1, 8);
    else if (v->type == KV_STR || v->type == KV_NUM)
        memcpy(&v->s, s + 1, 4);
}

static int fail(build *b, int64_t event, const char *msg)
{
    return xsp_kj_fail(b->r, event, -1, "%s", msg);
}

static int nomem(build *b)
{
    fail(b, -1, "out of memory");
    b->r->err.nomem = 1;
    return -1;
}

/* Pass 1: times, and the records split into CPU and GPU (the region apart). */
static int pass_times(build *b, int64_t base)
{
    for (uint32_t x = 0; x < b->n; x++) {
        const kj_rec *e = &b->rec[x];
        int64_t s, t;
        if (__builtin_add_overflow(base, e->ts, &s) || s < 0)
            return xsp_kj_fail(b->r, e->index, -1, "ts %.3f is before time 0 or past 2**63 ns "
                               "(with baseTimeNanoseconds %lld)", (double)e->ts / 1000.0,
                               (long long)base);
        if (__builtin_add_overflow(s, e->dur, &t))
            return fail(b, e->index, "ends past 2**63 ns");
        b->start[x] = s;
        b->end[x] = t;
        b->parent[x] = b->api[x] = NONE;
        b->depth[x] = 0;
        if (e->kind == XSP_KIND_REGION)
            continue;
        if (is_gpu(e->kind))
            b->gpu[b->n_gpu++] = x;
        else
            b->cpu[b->n_cpu++] = x;
    }
    return 0;
}

/* Pass 2: CPU records nested per thread; backward functions and model calls told. */
static int pass_nest(build *b, uint32_t *stack)
{
    for (uint32_t k = 0; k < b->n_cpu; k++) {
        uint32_t x = b->cpu[k];
        uint32_t *p = kmap_at(&b->pairs, (uint64_t)b->rec[x].pid << 32 | b->rec[x].tid);
        if (*p == NONE)
            *p = b->n_pairs++;
        b->pair[x] = *p;
    }
    b->cpu_first = b->n_cpu ? b->cpu[0] : NONE;
    msort(b->cpu, b->n_cpu, b->tmp, by_thread, b);
    b->gstart = malloc(((size_t)b->n_pairs + 1) * sizeof *b->gstart);
    if (!b->gstart)
        return nomem(b);
    static const char PREFIX[] = "autograd::engine::evaluate_function: ";
    const size_t plen = sizeof PREFIX - 1;
    uint32_t depth = 0, g = NONE;
    for (uint32_t k = 0; k < b->n_cpu; k++) {
        uint32_t x = b->cpu[k];
        if (b->pair[x] != g) {
            g = b->pair[x];
            b->gstart[g] = k;
            depth = 0;
        }
        while (depth) {
            uint32_t top = stack[depth - 1];
            if ((b->start[x] >= b->start[top] && b->start[x] < b->end[top])
                || (b->start[x] == b->start[top] && b->start[top] == b->end[top]))
                break;
            depth--;
        }
        uint32_t par = depth ? stack[depth - 1] : NONE;
        if (par != NONE && b->end[x] > b->end[par]) {
            b->overlaps++;
            b->end[x] = b->end[par];            /* cut to its parent: a span nests */
        }
        b->parent[x] = par;
        b->depth[x] = par == NONE ? 0 : b->depth[par] + 1;
        stack[depth++] = x;
        kj_rec *e = &b->rec[x];
        if (par == NONE)
            continue;
        if (e->kind == XSP_KIND_OP && b->rec[par].kind == XSP_KIND_OP) {
            size_t nn, pn;
            const char *nm = xsp_strtab_get(&b->t->strings, e->name, &nn);
            const char *pm = xsp_strtab_get(&b->t->strings, b->rec[par].name, &pn);
            if (pn == plen + nn && memcmp(pm, PREFIX, plen) == 0 && memcmp(pm + plen, nm, nn) == 0)
                e->kind = XSP_KIND_BACKWARD;
        }
    }
    b->gstart[b->n_pairs] = b->n_cpu;
    /* model calls: module calls with no module or model call above them.  In nesting order
     * every parent comes before its children: track[] holds the nearest one above (reused
     * as scratch; tracks are set in pass 5). */
    for (uint32_t k = 0; k < b->n_cpu; k++) {
        uint32_t x = b->cpu[k], par = b->parent[x];
        uint32_t above = par == NONE ? NONE
                       : (b->rec[par].kind == XSP_KIND_MODULE || b->rec[par].kind == XSP_KIND_MODEL)
                             ? par : b->track[par];
        b->track[x] = above;
        if (b->rec[x].kind == XSP_KIND_MODULE && above == NONE)
            b->rec[x].kind = XSP_KIND_MODEL;
    }
    return 0;
}

/* Pass 3: GPU work under the op whose runtime call has its correlation id. */
static int pass_gpu(build *b)
{
    kmap calls;
    if (kmap_init(&calls, b->n_cpu))
        return kmap_free(&calls), nomem(b);
    /* the calls in file order, the last of a correlation id winning */
    for (uint32_t x = 0; x < b->n; x++) {
        int64_t c;
        int k = b->rec[x].kind;
        if ((k == XSP_KIND_RUNTIME || k == XSP_KIND_DRIVER)
            && rec_int(b, x, xsp_kj_id(b->r, S_CORR), &c))
            *kmap_at(&calls, (uint64_t)c) = x;
    }
    for (uint32_t k = 0; k < b->n_gpu; k++) {
        uint32_t x = b->gpu[k], call = NONE;
        int64_t c;
        if (rec_int(b, x, xsp_kj_id(b->r, S_CORR), &c)) {
            uint32_t *v = kmap_at(&calls, (uint64_t)c);
            call = *v;
        }
        if (call == NONE) {
            b->unattributed++;
            continue;
        }
        b->api[x] = call;
        b->parent[x] = b->rec[x].kind == XSP_KIND_SYNC ? call : b->parent[call];
        b->depth[x] = b->parent[x] == NONE ? 0 : b->depth[b->parent[x]] + 1;
    }
    kmap_free(&calls);
    return 0;
}

/* Pass 4: children that start before their parent moved to its start. */
static void pass_clamp(build *b)
{
    for (uint32_t x = 0; x < b->n; x++) {
        uint32_t p = b->parent[x];
        if (p == NONE || b->start[x] >= b->start[p])
            continue;
        b->clamped++;
        int64_t ps = b->start[p];
        b->end[x] = b->end[x] - (ps - b->start[x]) > ps ? b->end[x] - (ps - b->start[x]) : ps;
        b->start[x] = ps;
    }
}

/* The name of the thread (pid key, tid key), or 0. */
static uint32_t thread_name(kmap *names, uint32_t pid, uint32_t tid)
{
    uint32_t v = *kmap_at(names, (uint64_t)pid << 32 | tid);
    return v == NONE ? 0 : v;
}

/* The GPU track key of record x: device << 32 | stream, from its args (else pid and tid). */
static uint64_t gpu_key(const build *b, uint32_t x)
{
    int64_t dev, stream;
    kj_val v;
    if (!rec_int(b, x, xsp_kj_id(b->r, S_DEVICE), &dev)) {
        key_val(b->r, b->rec[x].pid, &v);
        dev = v.type == KV_INT ? v.i : -1;
    }
    if (!rec_int(b, x, xsp_kj_id(b->r, S_STREAM), &stream)) {
        key_val(b->r, b->rec[x].tid, &v);
        stream = v.type == KV_INT ? v.i : -1;
    }
    dev = dev >= 0 && dev < ((int64_t)1 << 31) ? dev : 0;
    stream = stream >= 0 && stream < ((int64_t)1 << 32) ? stream : 0;
    return (uint64_t)dev << 32 | (uint64_t)stream;
}

/* The first record (by start, then file order) among recs[0..n) of each of nk keys (key[x]
 * a dense key id of record x): first[k], NONE when key k has none. */
static void firsts(const build *b, const uint32_t *recs, uint32_t n, const uint32_t *key,
                   uint32_t *first)
{
    for (uint32_t k = 0; k < n; k++) {
        uint32_t x = recs[k], *f = &first[key[x]];
        if (*f == NONE || b->start[x] < b->start[*f]
            || (b->start[x] == b->start[*f] && b->rec[x].index < b->rec[*f].index))
            *f = x;
    }
}

static int by_start(const build *b, uint32_t x, uint32_t y)
{
    if (b->start[x] != b->start[y])
        return b->start[x] < b->start[y];
    return b->rec[x].index < b->rec[y].index;
}

/* Pass 5: tracks. */
static int pass_tracks(build *b, kmap *names)
{
    xsp_trace *t = b->t;
    uint32_t cap = b->n_pairs + b->n_gpu + 1;
    uint32_t *first = malloc((size_t)cap * sizeof *first);
    uint32_t *gkey = malloc(((size_t)b->n + 1) * sizeof *gkey);
    kmap gk = {0};
    int rc = -1;
    if (!first || !gkey || kmap_init(&gk, b->n_gpu))
        goto out;
    memset(first, 0xff, (size_t)cap * sizeof *first);
    firsts(b, b->cpu, b->n_cpu, b->pair, first);
    msort(first, b->n_pairs, b->tmp, by_start, b);
    for (uint32_t k = 0; k < b->n_pairs; k++) {   /* first[k]: the k-th thread's first record */
        uint32_t x = first[k];
        kj_val tid;
        key_val(b->r, b->rec[x].tid, &tid);
        uint64_t os = tid.type == KV_INT && tid.i >= 0 ? (uint64_t)tid.i : t->n_threads;
        size_t nl;
        const char *nm = xsp_strtab_get(&t->strings,
                                        thread_name(names, b->rec[x].pid, b->rec[x].tid), &nl);
        uint32_t ti = xsp_trace_add_thread(t, os, nm, 0);
        if (ti == UINT32_MAX)
            goto out;
        b->id[b->pair[x]] = ti;     /* id[] is scratch here: the track of each pair */
    }
    for (uint32_t k = 0; k < b->n_cpu; k++)
        b->track[b->cpu[k]] = b->id[b->pair[b->cpu[k]]];
    /* GPU streams: dense keys, then their first records in order */
    uint32_t n_keys = 0;
    for (uint32_t k = 0; k < b->n_gpu; k++) {
        uint32_t x = b->gpu[k], *v = kmap_at(&gk, gpu_key(b, x));
        if (*v == NONE)
            *v = n_keys++;
        gkey[x] = *v;
    }
    memset(first, 0xff, (size_t)cap * sizeof *first);
    firsts(b, b->gpu, b->n_gpu, gkey, first);
    msort(first, n_keys, b->tmp, by_start, b);
    for (uint32_t k = 0; k < n_keys; k++) {
        uint32_t x = first[k];
        const char *nm = xsp_strtab_get(&t->strings,
                                        thread_name(names, b->rec[x].pid, b->rec[x].tid), NULL);
        uint32_t ti = xsp_trace_add_thread(t, gpu_key(b, x), nm, 1);
        if (ti == UINT32_MAX)
            goto out;
        b->id[gkey[x]] = ti;
    }
    for (uint32_t k = 0; k < b->n_gpu; k++)
        b->track[b->gpu[k]] = b->id[gkey[b->gpu[k]]];
    if (t->n_threads == 0 && xsp_trace_add_thread(t, 0, "", 0) == UINT32_MAX)
        goto out;
    rc = 0;
out:
    free(first);
    free(gkey);
    kmap_free(&gk);
    return rc ? nomem(b) : 0;
}

/* Lowest-id record of kind among the CPU records of pair g that start at ts, or NONE. */
static uint32_t at_start(const build *b, uint32_t g, int64_t ts, int kind)
{
    uint32_t lo = b->gstart[g], hi = b->gstart[g + 1];
    while (lo < hi) {                           /* first with start >= ts */
        uint32_t mid = lo + (hi - lo) / 2;
        if (b->start[b->cpu[mid]] < ts)
            lo = mid + 1;
        else
            hi = mid;
    }
    uint32_t best = NONE;
    for (; lo < b->gstart[g + 1] && b->start[b->cpu[lo]] == ts; lo++) {
        uint32_t x = b->cpu[lo];
        if (b->rec[x].kind == kind && (best == NONE || b->id[x] < b->id[best]))
            best = x;
    }
    return best;
}

static void set_slot(build *b, uint32_t x, uint32_t key, int64_t v)
{
    xsp_attr *a = &b->t->attrs[b->rec[x].attr_off + b->rec[x].attr_n];
    *a = (xsp_attr){.key = key, .type = XSP_ATTR_INT, .v.i = v};
}

/* Pass 7: fwd_op of backward functions. fwd[] gets the forward record of each, or NONE. */
static int pass_backward(build *b, uint32_t *fwd, int64_t base)
{
    xsp_kjson *r = b->r;
    kmap s_end, f_last;
    int rc = -1;
    if (kmap_init(&s_end, r->n_flows) || kmap_init(&f_last, r->n_flows))
        goto out;
    for (uint32_t x = 0; x < b->n; x++)
        fwd[x] = NONE;
    for (uint32_t k = 0; k < r->n_flows; k++)
        *kmap_at(r->flows[k].start ? &s_end : &f_last, r->flows[k].id) = k;
    for (uint32_t k = 0; k < r->n_flows; k++) {
        const kj_flow *f = &r->flows[k];
        if (f->start || *kmap_at(&f_last, f->id) != k)
            continue;                           /* each id once, with its last f end */
        uint32_t si = *kmap_at(&s_end, f->id);
        if (si == NONE)
            continue;
        const kj_flow *s = &r->flows[si];
        uint32_t gf = *kmap_at(&b->pairs, (uint64_t)f->pid << 32 | f->tid);
        uint32_t gs = *kmap_at(&b->pairs, (uint64_t)s->pid << 32 | s->tid);
        int64_t tf, ts;
        if (gf == NONE || gs == NONE || __builtin_add_overflow(base, f->ts, &tf)
            || __builtin_add_overflow(base, s->ts, &ts))
            continue;
        uint32_t bw = at_start(b, gf, tf, XSP_KIND_BACKWARD);
        uint32_t fw = at_start(b, gs, ts, XSP_KIND_OP);
        if (bw != NONE && fw != NONE)
            fwd[bw] = fw;
    }
    /* the rest: the last op before it with the same sequence number */
    kmap_free(&s_end);
    if (kmap_init(&s_end, b->n_cpu))
        goto out;
    for (uint32_t k = 0; k < b->n_cpu + b->n_gpu; k++) {
        uint32_t x = b->order[k];
        int64_t seq;
        int kind = b->rec[x].kind;
        if ((kind != XSP_KIND_OP && kind != XSP_KIND_BACKWARD)
            || !rec_int(b, x, xsp_kj_id(r, S_SEQ), &seq))
            continue;
        uint32_t *v = kmap_at(&s_end, (uint64_t)seq);
        if (kind == XSP_KIND_OP)
            *v = x;
        else if (fwd[x] == NONE && *v != NONE && b->start[*v] <= b->start[x])
            fwd[x] = *v;
    }
    rc = 0;
out:
    kmap_free(&s_end);
    kmap_free(&f_last);
    return rc ? nomem(b) : 0;
}

static const uint8_t LEVEL[XSP_NKINDS] = {
    [XSP_KIND_REGION] = XSP_LEVEL_M, [XSP_KIND_MODEL] = XSP_LEVEL_M, [XSP_KIND_STEP] = XSP_LEVEL_M,
    [XSP_KIND_MODULE] = XSP_LEVEL_L, [XSP_KIND_OP] = XSP_LEVEL_L, [XSP_KIND_BACKWARD] = XSP_LEVEL_L,
    [XSP_KIND_SCOPE] = XSP_LEVEL_L, [XSP_KIND_PYTHON] = XSP_LEVEL_L,
    [XSP_KIND_RUNTIME] = XSP_LEVEL_G, [XSP_KIND_DRIVER] = XSP_LEVEL_G,
    [XSP_KIND_KERNEL] = XSP_LEVEL_G, [XSP_KIND_MEMCPY] = XSP_LEVEL_G,
    [XSP_KIND_MEMSET] = XSP_LEVEL_G, [XSP_KIND_SYNC] = XSP_LEVEL_G,
    [XSP_KIND_OVERHEAD] = XSP_LEVEL_G};

/* Pass 6: the spans, the region first. */
static int pass_spans(build *b, uint32_t region, int64_t lo, int64_t hi)
{
    xsp_trace *t = b->t;
    uint32_t n = b->n_cpu + b->n_gpu;
    t->spans = malloc(((size_t)n + 1) * sizeof *t->spans);
    if (!t->spans)
        return nomem(b);
    t->cap_spans = n + 1;
    xsp_span rs = {.start_ns = (uint64_t)lo, .end_ns = (uint64_t)hi, .parent = XSP_NO_PARENT,
                   .kind = XSP_KIND_REGION, .level = XSP_LEVEL_M};
    if (region != NONE) {
        rs.name = b->rec[region].name;
        rs.attr_off = b->rec[region].attr_off;
        rs.attr_n = b->rec[region].attr_n;
    } else {
        rs.name = xsp_strtab_intern(&t->strings, "torch.profiler trace", 20);
        if (rs.name == UINT32_MAX)
            return nomem(b);
    }
    rs.thread = b->cpu_first != NONE ? b->track[b->cpu_first] : 0;
    t->spans[t->n_spans++] = rs;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t x = b->order[k];
        kj_rec *e = &b->rec[x];
        if (b->api[x] != NONE) {
            if (e->attr_n + 1 > XSP_KJSON_MAX_ATTRS)
                return xsp_kj_fail(b->r, e->index, -1, "%d args: more than xsp keeps per span "
                                   "(%d)", e->attr_n + 1, XSP_KJSON_MAX_ATTRS);
            uint32_t key = xsp_kj_intern_id(b->r, S_API);
            if (key == UINT32_MAX)
                return -1;
            set_slot(b, x, key, b->id[b->api[x]]);
            e->attr_n++;
            e->slot = 0;
        }
        t->spans[t->n_spans++] = (xsp_span){
            .start_ns = (uint64_t)b->start[x], .end_ns = (uint64_t)b->end[x],
            .parent = b->parent[x] == NONE ? 0 : b->id[b->parent[x]], .name = e->name,
            .thread = b->track[x], .attr_off = e->attr_off, .attr_n = e->attr_n,
            .level = LEVEL[e->kind], .kind = e->kind};
    }
    return 0;
}

static int by_mem(const build *b, uint32_t x, uint32_t y)
{
    if (b->mpair[x] != b->mpair[y])
        return b->mpair[x] < b->mpair[y];
    return b->mts[x] < b->mts[y];               /* file order by stability */
}

/* What the memory events of one span and device add up to (mem.<dev>.* attributes). */
typedef struct mem_sum {
    uint32_t span;      /* span id */
    uint32_t dev;       /* 0 cpu, 1 cuda, 2 other */
    int64_t  f[6];      /* allocs, alloc_bytes, frees, freed_bytes, peak, total */
} mem_sum;

static int by_span(const void *a, const void *c)
{
    const mem_sum *x = a, *y = c;
    return x->span != y->span ? (x->span < y->span ? -1 : 1) : 0;
}

/* Folds event m into the sum of record x (NONE: outside every span, counted per device). */
static int fold_mem(build *b, const kj_mem *m, uint32_t x, kmap *at, mem_sum *sums,
                    uint32_t *n_sums, int64_t outside[3][2])
{
    if (x == NONE) {
        outside[m->dev][m->bytes < 0] += m->bytes < 0 ? -m->bytes : m->bytes;
        return 0;
    }
    uint32_t *v = kmap_at(at, (uint64_t)b->id[x] << 2 | m->dev);
    if (*v == NONE) {
        *v = (*n_sums)++;
        sums[*v] = (mem_sum){.span = b->id[x], .dev = m->dev, .f = {0, 0, 0, 0, INT64_MIN, 0}};
    }
    mem_sum *s = &sums[*v];
    s->f[m->bytes < 0 ? 2 : 0]++;
    s->f[m->bytes < 0 ? 3 : 1] += m->bytes < 0 ? -m->bytes : m->bytes;
    s->f[5] = m->total;
    if (m->total > s->f[4])
        s->f[4] = m->total;
    return 0;
}

/* 1 when record x is open at time t (the nesting's rule, pass 2). */
static int open_at(const build *b, uint32_t x, int64_t t)
{
    return (t >= b->start[x] && t < b->end[x]) || (t == b->start[x] && b->start[x] == b->end[x]);
}

/* Pass 8: the memory events ("[memory]", profile_memory) folded into the innermost CPU span
 * open at their time on their thread, as a recording folds its allocations (replay.c):
 * attributes mem.<dev>.{allocs, alloc_bytes, frees, freed_bytes, peak, total}; events outside
 * every span counted in memory.outside_spans.<dev>.{alloc_bytes, freed_bytes}.  One sweep per
 * thread over its spans and events in time order, spans first at equal times. */
static int pass_memory(build *b, int64_t base, uint32_t *stack)
{
    static const char *const DEV[3] = {"cpu", "cuda", "other"};
    static const char *const FIELD[6] = {"allocs", "alloc_bytes", "frees", "freed_bytes",
                                         "peak", "total"};
    xsp_kjson *r = b->r;
    uint32_t nm = r->n_mems;
    int64_t outside[3][2] = {{0}};
    if (nm == 0)
        return 0;
    int rc = -1;
    uint32_t *mo = malloc((size_t)nm * sizeof *mo), *tmp = malloc((size_t)nm * sizeof *tmp);
    uint32_t *ids = malloc((size_t)nm * sizeof *ids);
    xsp_attr *vals = malloc((size_t)nm * sizeof *vals);
    mem_sum *sums = malloc((size_t)nm * sizeof *sums);
    b->mpair = malloc((size_t)nm * sizeof *b->mpair);
    b->mts = malloc((size_t)nm * sizeof *b->mts);
    kmap at = {0};
    uint32_t n_sums = 0;
    if (!mo || !tmp || !ids || !vals || !sums || !b->mpair || !b->mts || kmap_init(&at, nm)) {
        nomem(b);
        goto out;
    }
    for (uint32_t k = 0; k < nm; k++) {
        const kj_mem *m = &r->mems[k];
        if (__builtin_add_overflow(base, m->ts, &b->mts[k]) || b->mts[k] < 0) {
            fail(b, m->index, "ts is before time 0 or past 2**63 ns (with baseTimeNanoseconds)");
            goto out;
        }
        b->mpair[k] = *kmap_at(&b->pairs, (uint64_t)m->pid << 32 | m->tid);
        mo[k] = k;
    }
    msort(mo, nm, tmp, by_mem, b);
    uint32_t j = 0;
    while (j < nm) {
        uint32_t g = b->mpair[mo[j]];
        if (g == NONE) {
            fold_mem(b, &r->mems[mo[j++]], NONE, &at, sums, &n_sums, outside);
            continue;
        }
        uint32_t i = b->gstart[g], hi = b->gstart[g + 1], depth = 0;
        for (; j < nm && b->mpair[mo[j]] == g; j++) {
            int64_t t = b->mts[mo[j]];
            for (; i < hi && b->start[b->cpu[i]] <= t; i++) {     /* the spans begun by t */
                uint32_t x = b->cpu[i];
                while (depth && !open_at(b, stack[depth - 1], b->start[x]))
                    depth--;
                stack[depth++] = x;
            }
            while (depth && !open_at(b, stack[depth - 1], t))
                depth--;
            fold_mem(b, &r->mems[mo[j]], depth ? stack[depth - 1] : NONE, &at, sums, &n_sums,
                     outside);
        }
    }
    qsort(sums, n_sums, sizeof *sums, by_span);
    char err[256];
    for (uint32_t d = 0; d < 3; d++) {
        uint32_t n = 0;
        for (uint32_t k = 0; k < n_sums; k++)
            if (sums[k].dev == d)
                ids[n++] = sums[k].span;
        for (int f = 0; f < 6 && n; f++) {
            uint32_t c = 0;
            for (uint32_t k = 0; k < n_sums; k++)
                if (sums[k].dev == d)
                    vals[c++] = (xsp_attr){.type = XSP_ATTR_INT, .v.i = sums[k].f[f]};
            char key[40];
            snprintf(key, sizeof key, "mem.%s.%s", DEV[d], FIELD[f]);
            if (xsp_trace_add_span_attrs(b->t, key, n, ids, vals, err, sizeof err) != 0) {
                if (strncmp(err, "out of memory", 13) == 0)
                    nomem(b);
                else
                    fail(b, -1, err);
                goto out;
            }
        }
    }
    for (uint32_t d = 0; d < 3; d++)
        for (int f = 0; f < 2; f++) {
            char key[64];
            snprintf(key, sizeof key, "memory.outside_spans.%s.%s", DEV[d],
                     f ? "freed_bytes" : "alloc_bytes");
            if (outside[d][f] && xsp_trace_add_counter(b->t, key, outside[d][f])) {
                nomem(b);
                goto out;
            }
        }
    rc = 0;
out:
    free(mo);
    free(tmp);
    free(ids);
    free(vals);
    free(sums);
    kmap_free(&at);
    return rc;
}

/* The meta entries and counters. */
static int put_meta(build *b, uint32_t region, int64_t base)
{
    xsp_kjson *r = b->r;
    xsp_trace *t = b->t;
    char levels[4] = "M";
    int steps = 0, layer = 0;
    for (uint32_t k = 0; k < b->n_cpu; k++) {
        int kind = b->rec[b->cpu[k]].kind;
        steps += kind == XSP_KIND_STEP;
        layer |= kind != XSP_KIND_STEP && kind != XSP_KIND_MODEL;
    }
    if (layer)
        strcat(levels, "L");
    if (b->n_gpu)
        strcat(levels, "G");
    const char *rname = xsp_strtab_get(&t->strings, t->spans[0].name, NULL);
    (void)region;
    int rc = xsp_trace_set_meta_str(t, "levels", levels)
           | xsp_trace_set_meta_str(t, "source", "kineto")
           | xsp_trace_set_meta_int(t, "kineto.events", (int64_t)r->n_events)
           | xsp_trace_set_meta_int(t, "kineto.flows", (int64_t)r->n_flow_ev)
           | xsp_trace_set_meta_int(t, "kineto.memory", (int64_t)r->n_mems)
           | xsp_trace_set_meta_int(t, "kineto.baseTimeNanoseconds", base)
           | xsp_trace_set_meta_int(t, "steps", steps)
           | xsp_trace_set_meta_str(t, "region", rname);
    if (b->cpu_first != NONE) {                 /* the first CPU event with an integer pid */
        uint32_t first = NONE;
        for (uint32_t x = 0; x < b->n && first == NONE; x++) {
            kj_val v;
            key_val(r, b->rec[x].pid, &v);
            if (b->rec[x].kind != XSP_KIND_REGION && !is_gpu(b->rec[x].kind) && v.type == KV_INT)
                first = x;
            if (first != NONE && v.i >= 0)
                rc |= xsp_trace_set_meta_int(t, "pid", v.i);
        }
    }
    static const char *const top[TK_N] = {
        [TK_TRACE_ID] = "kineto.trace_id", [TK_HOST] = "kineto.host_name",
        [TK_TRACE_NAME] = "kineto.traceName", [TK_SCHEMA] = "kineto.schemaVersion",
        [TK_TIME_UNIT] = "kineto.displayTimeUnit"};
    static const char *const dist[DK_N] = {
        [DK_RANK] = "rank", [DK_WORLD] = "world_size", [DK_BACKEND] = "backend"};
    for (int pass = 0; pass < 2; pass++) {
        const kj_val *vals = pass ? r->dist : r->top;
        const char *const *keys = pass ? dist : top;
        int nk = pass ? DK_N : TK_N;
        for (int k = 0; k < nk; k++) {
            if (!keys[k])
                continue;
            if (vals[k].type == KV_INT)
                rc |= xsp_trace_set_meta_int(t, keys[k], vals[k].i);
            else if (vals[k].type == KV_STR)
                rc |= xsp_trace_set_meta_str(t, keys[k],
                                             xsp_strtab_get(&t->strings, vals[k].s, NULL));
        }
    }
    rc |= xsp_trace_add_counter(t, "kineto.skipped", (int64_t)r->skipped)
        | xsp_trace_add_counter(t, "kineto.unattributed", b->unattributed)
        | xsp_trace_add_counter(t, "kineto.clamped", b->clamped)
        | xsp_trace_add_counter(t, "kineto.overlaps", b->overlaps);
    if (t->strings.ncut)
        rc |= xsp_trace_add_counter(t, "names.cut", (int64_t)t->strings.ncut);
    return rc ? nomem(b) : 0;
}

/* baseTimeNanoseconds: an integer (or a number, rounded), 0 when absent or not a number. */
static int base_of(xsp_kjson *r, int64_t *base)
{
    const kj_val *v = &r->top[TK_BASE];
    *base = 0;
    if (v->type == KV_INT)
        *base = v->i;
    else if (v->type == KV_NUM) {
        size_t n;
        const char *s = xsp_strtab_get(&r->t->strings, v->s, &n);
        if (xsp_kj_decimal(s, n, 0, base) != 0)
            return xsp_kj_fail(r, -1, -1, "baseTimeNanoseconds %.40s is out of range "
                               "(more than 2**63 ns)", s);
    }
    return 0;
}

xsp_trace *xsp_kj_build(xsp_kjson *r)
{
    build B = {.r = r, .t = r->t, .rec = r->recs, .n = r->n_recs, .cpu_first = NONE};
    build *b = &B;
    uint32_t *fwd = NULL, *stack = NULL;
    kmap names = {0};
    int64_t base;
    int ok = 0;
    size_t n1 = (size_t)b->n + 1;
    if (base_of(r, &base))
        return NULL;
    /* the per-record arrays, n + 1 entries each, in one block: the int64 ones first */
    enum { N_U32 = 11 };
    char *block = malloc(n1 * (2 * sizeof(int64_t) + N_U32 * sizeof(uint32_t)));
    if (block) {
        b->start = (int64_t *)block;
        b->end = b->start + n1;
        uint32_t **u32[N_U32] = {&b->parent, &b->depth, &b->pair, &b->track, &b->api, &b->id,
                                 &b->cpu, &b->gpu, &b->order, &b->tmp, &stack};
        uint32_t *next = (uint32_t *)(b->end + n1);
        for (int k = 0; k < N_U32; k++, next += n1)
            *u32[k] = next;
    }
    if (!block
        || kmap_init(&b->pairs, b->n) || kmap_init(&names, r->n_tnames)) {
        nomem(b);
        goto out;
    }
    if (pass_times(b, base))
        goto out;
    uint32_t region = r->region >= 0 ? (uint32_t)r->region : NONE;
    if (b->n_cpu + b->n_gpu == 0 && region == NONE) {
        fail(b, -1, "no complete events (ph X) to read");
        goto out;
    }
    if (pass_nest(b, stack) || pass_gpu(b))
        goto out;
    int64_t lo = INT64_MAX, hi = 0;
    for (uint32_t x = 0; x < b->n; x++) {
        if (b->rec[x].kind == XSP_KIND_REGION)
            continue;
        lo = b->start[x] < lo ? b->start[x] : lo;
        hi = b->end[x] > hi ? b->end[x] : hi;
    }
    if (region != NONE) {
        lo = b->start[region] < lo ? b->start[region] : lo;
        hi = b->end[region] > hi ? b->end[region] : hi;
    }
    pass_clamp(b);
    for (uint32_t k = 0; k < r->n_tnames; k++)      /* the last name of a thread wins */
        *kmap_at(&names, (uint64_t)r->tnames[k].pid << 32 | r->tnames[k].tid) =
            r->tnames[k].name;
    if (pass_tracks(b, &names))
        goto out;
    uint32_t n = b->n_cpu + b->n_gpu;
    memcpy(b->order, b->cpu, (size_t)b->n_cpu * sizeof *b->order);
    memcpy(b->order + b->n_cpu, b->gpu, (size_t)b->n_gpu * sizeof *b->order);
    msort(b->order, n, b->tmp, by_trace, b);
    if (region != NONE)
        b->id[region] = 0;
    for (uint32_t k = 0; k < n; k++)
        b->id[b->order[k]] = k + 1;
    if (pass_spans(b, region, lo, hi))
        goto out;
    fwd = b->tmp;                               /* the sorts are done */
    if (pass_backward(b, fwd, base))
        goto out;
    for (uint32_t x = 0; x < b->n; x++) {
        if (fwd[x] == NONE)
            continue;
        uint32_t key = xsp_kj_intern_id(r, S_FWD_OP);
        if (key == UINT32_MAX)
            goto out;
        set_slot(b, x, key, b->id[fwd[x]]);
        b->t->spans[b->id[x]].attr_n++;
    }
    if (pass_memory(b, base, stack) || put_meta(b, region, base))
        goto out;
    char err[256];
    if (xsp_trace_check(b->t, err, sizeof err) != 0) {
        xsp_kj_fail(r, -1, -1, "cannot be made into a trace: %s", err);
        goto out;
    }
    ok = 1;
out:
    free(block);
    free(b->gstart);
    free(b->mpair);
    free(b->mts);
    kmap_free(&b->pairs);
    kmap_free(&names);
    if (!ok)
        return NULL;
    xsp_trace *t = r->t;
    r->t = NULL;
    return t;
}
