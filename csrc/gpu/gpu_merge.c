/*
 * gpu_merge.c: see gpu_merge.h for what is joined to what.
 *
 * Steps: index API records by correlation id and external correlations (CUSTOM2) by
 * correlation id; make one pending span per GPU record with its parent given either as a CPU
 * span id or as another pending span (a sync's API call); sort the pending spans by start
 * (API calls first on ties, so a sync follows its call); merge them with the CPU spans by
 * start (CPU first on ties, so a parent precedes its children); renumber parents and the
 * attributes whose values are span ids ("fwd_op", "api").
 *
 * Kernel names: CUPTI reports the mangled symbol (_ZN2at6native...); torch.profiler and
 * people read the demangled one, so each distinct kernel name is demangled once, here, with
 * the C++ runtime's __cxa_demangle when the process has one (torch brings libstdc++; found by
 * dlsym, so the core does not link C++).  Without it, or when demangling fails, the name stays
 * as CUPTI gave it.
 */
#include "gpu_merge.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXT_KIND_CUSTOM2 5u   /* CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2 */
#define NONE UINT32_MAX
#define GPU_BIT 0x80000000u   /* pending parent refers to a pending span, not a CPU span */
#define MAX_ATTRS 16

typedef struct pending {
    uint64_t start, end;      /* ns */
    uint32_t parent;          /* CPU span id, or GPU_BIT | pending index, or NONE */
    uint32_t name;            /* trace string id */
    uint32_t thread;          /* trace thread index */
    uint32_t rec;             /* index in the store */
    uint32_t api;             /* pending index of the launching API call, or NONE */
    uint8_t  kind;            /* enum xsp_kind */
    uint8_t  rank;            /* tie-break at equal start: API calls first */
} pending;

/* u32 -> u32 open-addressing map (keys != 0: correlation ids start at 1). */
typedef struct u32map {
    uint32_t *k, *v;          /* keys (0 = empty) and values */
    uint32_t mask;            /* slots - 1 */
} u32map;

static int map_init(u32map *m, uint32_t n)
{
    uint32_t slots = 16;
    while (slots < 2 * (uint64_t)n + 2 && slots < (1u << 31))
        slots *= 2;
    m->k = calloc(slots, sizeof *m->k);
    m->v = malloc(slots * sizeof *m->v);
    m->mask = slots - 1;
    return m->k && m->v ? 0 : -1;
}

static void map_free(u32map *m)
{
    free(m->k);
    free(m->v);
}

static void map_put(u32map *m, uint32_t key, uint32_t val)
{
    if (!key)
        return;
    uint32_t j = (key * 2654435761u) & m->mask;
    while (m->k[j] && m->k[j] != key)
        j = (j + 1) & m->mask;
    m->k[j] = key;
    m->v[j] = val;
}

static uint32_t map_get(const u32map *m, uint32_t key)
{
    if (!key)
        return NONE;
    uint32_t j = (key * 2654435761u) & m->mask;
    while (m->k[j]) {
        if (m->k[j] == key)
            return m->v[j];
        j = (j + 1) & m->mask;
    }
    return NONE;
}

/* Finds or adds a track. NONE on allocation failure. */
static uint32_t track(xsp_trace *t, uint64_t tid, uint32_t kind, const char *name)
{
    for (uint32_t i = 0; i < t->n_threads; i++)
        if (t->threads[i].tid == tid && t->threads[i].kind == kind)
            return i;
    return xsp_trace_add_thread(t, tid, name, kind);
}

static uint32_t intern(xsp_trace *t, const char *s)
{
    return xsp_strtab_intern(&t->strings, s, strlen(s));
}

static int cmp_pending(const void *a, const void *b)
{
    const pending *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->rec < y->rec ? -1 : x->rec > y->rec;
}

/* The attributes of one GPU record, into a (up to MAX_ATTRS). Returns the count. */
static uint32_t gpu_attrs(const xsp_gpu_rec *r, const uint32_t *keys, xsp_attr *a)
{
    uint32_t n = 0;
#define INT(k, val) (a[n++] = (xsp_attr){.key = keys[k], .type = XSP_ATTR_INT, .v.i = (int64_t)(val)})
    enum { CORR, DEV, STREAM, GX, GY, GZ, BX, BY, BZ, REGS, SSTAT, SDYN, GRAPH, GNODE, BYTES,
           COPYKIND, VALUE, CBID, SYNCTYPE, API };
    if (r->correlation_id)
        INT(CORR, r->correlation_id);
    switch (r->kind) {
    case XSP_KIND_KERNEL:
        INT(DEV, r->device); INT(STREAM, r->stream);
        INT(GX, r->u.kernel.grid[0]); INT(GY, r->u.kernel.grid[1]); INT(GZ, r->u.kernel.grid[2]);
        INT(BX, r->u.kernel.block[0]); INT(BY, r->u.kernel.block[1]);
        INT(BZ, r->u.kernel.block[2]);
        INT(REGS, r->u.kernel.regs); INT(SSTAT, r->u.kernel.smem_static);
        INT(SDYN, r->u.kernel.smem_dynamic);
        if (r->u.kernel.graph_id) {
            INT(GRAPH, r->u.kernel.graph_id); INT(GNODE, r->u.kernel.graph_node);
        }
        break;
    case XSP_KIND_MEMCPY:
        INT(DEV, r->device); INT(STREAM, r->stream); INT(BYTES, r->u.copy.bytes);
        INT(COPYKIND, r->u.copy.copy_kind);
        if (r->u.copy.graph_id) {
            INT(GRAPH, r->u.copy.graph_id); INT(GNODE, r->u.copy.graph_node);
        }
        break;
    case XSP_KIND_MEMSET:
        INT(DEV, r->device); INT(STREAM, r->stream); INT(BYTES, r->u.set.bytes);
        INT(VALUE, r->u.set.value);
        if (r->u.set.graph_id) {
            INT(GRAPH, r->u.set.graph_id); INT(GNODE, r->u.set.graph_node);
        }
        break;
    case XSP_KIND_RUNTIME:
    case XSP_KIND_DRIVER:
        INT(CBID, r->u.api.cbid);
        break;
    case XSP_KIND_SYNC:
        INT(SYNCTYPE, r->u.sync.type);
        if (r->stream != XSP_GPU_NONE)
            INT(STREAM, r->stream);
        break;
    default:
        break;
    }
#undef INT
    return n;
}

static const char *const KEYS[] = {"correlation", "device", "stream", "grid_x", "grid_y",
                                   "grid_z", "block_x", "block_y", "block_z", "registers",
                                   "smem_static", "smem_dynamic", "graph_id", "graph_node",
                                   "bytes", "copy_kind", "value", "cbid", "sync_type", "api"};
#define NKEYS (sizeof KEYS / sizeof KEYS[0])

typedef struct ctx {
    xsp_trace *t;             /* the trace */
    const xsp_gpu_store *s;   /* the store */
    xsp_resolve_fn resolve;   /* external id -> span id */
    void *rctx;               /* its context */
    const xsp_clock_map *map; /* ticks -> ns */
    uint32_t region;          /* the region span, or NONE */
    uint32_t region_thread;   /* its track (0 when none) */
    int64_t unattributed;     /* GPU records parented to the region for want of a span */
    int64_t no_time;          /* records CUPTI could not time: not added */
    uint32_t *kname;          /* store name id -> trace string id + 1 of a kernel's name, 0 =
                               * not yet (owned; one entry per store name) */
    uint64_t win_lo, win_hi;  /* first CPU start, last CPU end (ns); win_hi 0: no CPU span */
    int64_t bad_clock;        /* records far outside that window: not added (see BAD_CLOCK_NS) */
} ctx;

/* A GPU record that starts more than this before the first CPU span or after the last one is
 * on another clock (a CUPTI timestamp-callback mix-up: ~1e14 ns off), not late work: at stop
 * the device is synchronised before the region ends.  Counted in "gpu.bad_clock", not added. */
#define BAD_CLOCK_NS 60000000000ull

typedef char *(*demangle_fn)(const char *mangled, char *buf, size_t *n, int *status);
static demangle_fn g_demangle;             /* set once by find_demangler */
static pthread_once_t g_demangle_once = PTHREAD_ONCE_INIT;

static void find_demangler(void)
{
    void *sym = dlsym(RTLD_DEFAULT, "__cxa_demangle");
    memcpy(&g_demangle, &sym, sizeof g_demangle);   /* object -> function pointer, as POSIX */
}

/* The trace string id of a kernel's name, demangled (see the top of the file); NONE on
 * allocation failure. */
static uint32_t kernel_name(ctx *c, const xsp_gpu_rec *r, const char *raw)
{
    if (c->kname && r->name < c->s->names.n && c->kname[r->name])
        return c->kname[r->name] - 1;
    pthread_once(&g_demangle_once, find_demangler);
    uint32_t id = NONE;
    if (g_demangle && raw[0] == '_' && raw[1] == 'Z') {
        int status = -1;
        char *d = g_demangle(raw, NULL, NULL, &status);
        if (d && status == 0)
            id = intern(c->t, d);
        free(d);
    }
    if (id == NONE)
        id = intern(c->t, raw);
    if (id != NONE && c->kname && r->name < c->s->names.n)
        c->kname[r->name] = id + 1;
    return id;
}

/* The parent span (CPU id) of work with this correlation id: the span pushed on the calling
 * thread, else the region (counted). */
static uint32_t op_of(ctx *c, const u32map *ext, uint32_t corr)
{
    uint32_t e = map_get(ext, corr);
    if (e != NONE) {
        uint64_t id = c->s->ext[e].external_id;
        uint32_t p = c->resolve(c->rctx, id);
        if (p != XSP_NO_PARENT)
            return p;
    }
    c->unattributed++;
    return c->region;
}

/* One pending span per timed record. Returns 0 or -1. */
static int make_pending(ctx *c, pending *pd, uint32_t *np, const u32map *api, const u32map *ext)
{
    xsp_trace *t = c->t;
    const xsp_gpu_store *s = c->s;
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n_recs; i++) {
        const xsp_gpu_rec *r = &s->recs[i];
        if (r->flags & XSP_GPU_F_NO_TIME) {
            c->no_time++;
            continue;
        }
        pending *q = &pd[n];
        memset(q, 0, sizeof *q);
        q->start = xsp_clock_to_ns(c->map, r->start_ns);
        q->end = xsp_clock_to_ns(c->map, r->end_ns < r->start_ns ? r->start_ns : r->end_ns);
        if (c->win_hi && (q->start + BAD_CLOCK_NS < c->win_lo
                          || q->start > c->win_hi + BAD_CLOCK_NS)) {
            c->bad_clock++;
            continue;
        }
        q->rec = i;
        q->kind = r->kind;
        q->api = NONE;
        q->rank = (r->kind == XSP_KIND_RUNTIME || r->kind == XSP_KIND_DRIVER) ? 0 : 1;
        const char *nm = xsp_gpu_rec_name(s, r);
        q->name = r->kind == XSP_KIND_KERNEL && nm ? kernel_name(c, r, nm)
                                                   : intern(t, nm ? nm : "?");
        if (q->name == NONE)
            return -1;
        uint32_t a = map_get(api, r->correlation_id);   /* store index of the API call */
        char label[64];
        switch (r->kind) {
        case XSP_KIND_RUNTIME:
        case XSP_KIND_DRIVER:
            q->parent = op_of(c, ext, r->correlation_id);
            q->thread = track(t, r->u.api.tid, 0, NULL);
            break;
        case XSP_KIND_SYNC:
            /* under its API call (a store index until renumbered), on that call's thread */
            q->parent = a != NONE ? GPU_BIT | a : op_of(c, ext, r->correlation_id);
            q->thread = a != NONE ? track(t, s->recs[a].u.api.tid, 0, NULL)
                        : c->region != NONE ? c->region_thread
                                            : track(t, 0, 2, "CUPTI overhead");
            q->api = a;
            break;
        case XSP_KIND_KERNEL:
        case XSP_KIND_MEMCPY:
        case XSP_KIND_MEMSET:
            q->parent = op_of(c, ext, r->correlation_id);
            q->api = a;
            snprintf(label, sizeof label, "GPU %u stream %u", r->device, r->stream);
            q->thread = track(t, ((uint64_t)r->device << 32) | r->stream, 1, label);
            break;
        default:   /* overhead */
            q->parent = c->region;
            q->thread = track(t, 0, 2, "CUPTI overhead");
            break;
        }
        if (q->thread == NONE)
            return -1;
        n++;
    }
    *np = n;
    return 0;
}

static pending *g_sort_base;   /* qsort has no context argument; merge runs under the core's
                                  stop lock, one at a time */

static int cmp_index(const void *a, const void *b)
{
    return cmp_pending(&g_sort_base[*(const uint32_t *)a], &g_sort_base[*(const uint32_t *)b]);
}

/* Copies attrs [off, off+n) of src into t's new attribute array, remapping span-id values of
 * key fwd_key through cpu_new. */
static int copy_attrs(xsp_attr **out, uint32_t *nout, uint32_t *cap, const xsp_attr *src,
                      uint32_t n, uint32_t fwd_key, const uint32_t *cpu_new, uint32_t n_cpu)
{
    if (*nout + n > *cap) {
        uint32_t c = *cap ? *cap : 64;
        while (c < *nout + n)
            c *= 2;
        xsp_attr *a = realloc(*out, (size_t)c * sizeof *a);
        if (!a)
            return -1;
        *out = a;
        *cap = c;
    }
    for (uint32_t i = 0; i < n; i++) {
        xsp_attr a = src[i];
        if (a.key == fwd_key && a.type == XSP_ATTR_INT && a.v.i >= 0 && (uint64_t)a.v.i < n_cpu)
            a.v.i = cpu_new[a.v.i];
        (*out)[(*nout)++] = a;
    }
    return 0;
}

int xsp_gpu_merge(xsp_trace *t, xsp_resolve_fn resolve, void *rctx, const xsp_clock_map *map,
                  void *arg)
{
    const xsp_gpu_store *s = arg;
    ctx c = {t, s, resolve, rctx, map, NONE, 0, 0, 0, NULL, 0, 0, 0};
    if (t->n_spans) {
        c.win_lo = t->spans[0].start_ns;
        for (uint32_t i = 0; i < t->n_spans; i++)
            c.win_hi = t->spans[i].end_ns > c.win_hi ? t->spans[i].end_ns : c.win_hi;
    }
    c.kname = calloc((size_t)s->names.n + 1, sizeof *c.kname);   /* NULL: no cache, still right */
    for (uint32_t i = 0; i < t->n_spans && c.region == NONE; i++)
        if (t->spans[i].kind == XSP_KIND_REGION) {
            c.region = i;
            c.region_thread = t->spans[i].thread;
        }
    uint32_t keys[NKEYS], fwd_key = intern(t, "fwd_op");
    for (size_t k = 0; k < NKEYS; k++)
        keys[k] = intern(t, KEYS[k]);
    u32map api = {0}, ext = {0};
    uint32_t n_cpu = t->n_spans, n_pend = 0, n_new;
    pending *pd = malloc(((size_t)s->n_recs + 1) * sizeof *pd);
    uint32_t *rec2pend = malloc(((size_t)s->n_recs + 1) * sizeof *rec2pend);
    uint32_t *perm = NULL, *cpu_new = NULL, *gpu_new = NULL, nattr = 0, capattr = 0;
    xsp_span *spans = NULL;
    xsp_attr *attrs = NULL;
    int rc = -1;
    if (!pd || !rec2pend || map_init(&api, s->n_recs) || map_init(&ext, s->n_ext))
        goto out;
    for (uint32_t i = 0; i < s->n_recs; i++)
        if (s->recs[i].kind == XSP_KIND_RUNTIME || s->recs[i].kind == XSP_KIND_DRIVER)
            map_put(&api, s->recs[i].correlation_id, i);
    for (uint32_t i = 0; i < s->n_ext; i++)
        if (s->ext[i].external_kind == EXT_KIND_CUSTOM2)
            map_put(&ext, s->ext[i].correlation_id, i);
    if (make_pending(&c, pd, &n_pend, &api, &ext) != 0)
        goto out;
    for (uint32_t i = 0; i < s->n_recs; i++)
        rec2pend[i] = NONE;
    for (uint32_t j = 0; j < n_pend; j++)
        rec2pend[pd[j].rec] = j;
    /* A parent must start first: clamp (counted) the rare record that starts before it.
     * First the spans under CPU spans (API calls among them), then those under API calls
     * (syncs), whose parent index turns from a store index into a pending index. */
    int64_t clamped = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t j = 0; j < n_pend; j++) {
            pending *q = &pd[j];
            if (q->parent == NONE || !(q->parent & GPU_BIT) != (pass == 0))
                continue;
            uint64_t pstart;
            if (q->parent & GPU_BIT) {
                uint32_t pj = rec2pend[q->parent & ~GPU_BIT];
                if (pj == NONE) {          /* its call was not kept: under the region */
                    c.unattributed++;
                    q->parent = c.region;
                    if (q->parent == NONE)
                        continue;
                    pstart = t->spans[q->parent].start_ns;
                } else {
                    q->parent = GPU_BIT | pj;
                    pstart = pd[pj].start;
                }
            } else {
                pstart = t->spans[q->parent].start_ns;
            }
            if (q->start < pstart) {
                q->end = q->end < pstart ? pstart : q->end;
                q->start = pstart;
                clamped++;
            }
        }
    }
    perm = malloc(((size_t)n_pend + 1) * sizeof *perm);
    cpu_new = malloc(((size_t)n_cpu + 1) * sizeof *cpu_new);
    gpu_new = malloc(((size_t)n_pend + 1) * sizeof *gpu_new);
    n_new = n_cpu + n_pend;
    spans = malloc(((size_t)n_new + 1) * sizeof *spans);
    if (!perm || !cpu_new || !gpu_new || !spans || n_new < n_cpu)
        goto out;
    for (uint32_t j = 0; j < n_pend; j++)
        perm[j] = j;
    g_sort_base = pd;
    qsort(perm, n_pend, sizeof *perm, cmp_index);
    /* merge by start, CPU first on ties */
    uint32_t i = 0, j = 0, k = 0;
    while (i < n_cpu || j < n_pend) {
        int take_cpu = j == n_pend || (i < n_cpu && t->spans[i].start_ns <= pd[perm[j]].start);
        if (take_cpu)
            cpu_new[i++] = k++;
        else
            gpu_new[perm[j++]] = k++;
    }
    /* build the new span and attribute arrays in the new order */
    i = j = 0;
    for (k = 0; k < n_new; k++) {
        int take_cpu = j == n_pend || (i < n_cpu && cpu_new[i] == k);
        xsp_span *d = &spans[k];
        if (take_cpu) {
            const xsp_span *o = &t->spans[i++];
            *d = *o;
            d->parent = o->parent == XSP_NO_PARENT ? XSP_NO_PARENT : cpu_new[o->parent];
            d->attr_off = nattr;
            if (copy_attrs(&attrs, &nattr, &capattr, t->attrs + o->attr_off, o->attr_n, fwd_key,
                           cpu_new, n_cpu) != 0)
                goto out;
            continue;
        }
        const pending *q = &pd[perm[j++]];
        const xsp_gpu_rec *r = &s->recs[q->rec];
        *d = (xsp_span){.start_ns = q->start, .end_ns = q->end, .name = q->name,
                        .thread = q->thread, .level = XSP_LEVEL_G, .kind = q->kind};
        if (q->parent == NONE)
            d->parent = XSP_NO_PARENT;
        else if (q->parent & GPU_BIT)
            d->parent = gpu_new[q->parent & ~GPU_BIT];
        else
            d->parent = cpu_new[q->parent];
        xsp_attr a[MAX_ATTRS + 1];
        uint32_t na = gpu_attrs(r, keys, a);
        if (q->api != NONE && rec2pend[q->api] != NONE && q->kind != XSP_KIND_SYNC)
            a[na++] = (xsp_attr){.key = keys[NKEYS - 1], .type = XSP_ATTR_INT,
                                 .v.i = gpu_new[rec2pend[q->api]]};
        d->attr_off = nattr;
        d->attr_n = (uint16_t)na;
        if (copy_attrs(&attrs, &nattr, &capattr, a, na, NONE, NULL, 0) != 0)
            goto out;
    }
    if (xsp_trace_add_counter(t, "gpu.records", (int64_t)s->n_recs)
        || xsp_trace_add_counter(t, "gpu.dropped", (int64_t)s->dropped)
        || xsp_trace_add_counter(t, "gpu.refused_buffers", (int64_t)s->refused_buffers)
        || xsp_trace_add_counter(t, "gpu.lost", (int64_t)s->lost)
        || xsp_trace_add_counter(t, "gpu.bad_buffers", (int64_t)s->bad_buffers)
        || xsp_trace_add_counter(t, "gpu.no_time", c.no_time)
        || xsp_trace_add_counter(t, "gpu.unattributed", c.unattributed)
        || xsp_trace_add_counter(t, "gpu.clamped", clamped)
        || xsp_trace_add_counter(t, "gpu.incomplete", (int64_t)s->incomplete)
        || xsp_trace_add_counter(t, "gpu.bad_clock", c.bad_clock)
        || (s->names.ncut && xsp_trace_add_counter(t, "names.cut", (int64_t)s->names.ncut))
        || (s->shared && xsp_trace_set_meta_int(t, "cupti_shared", 1)))
        goto out;
    int64_t unknown = 0;
    for (uint32_t u = 0; u < XSP_GPU_KIND_SLOTS; u++)
        unknown += (int64_t)s->unknown_kinds[u];
    if (xsp_trace_add_counter(t, "gpu.unknown_kinds", unknown))
        goto out;
    free(t->spans);
    free(t->attrs);
    t->spans = spans;
    t->n_spans = t->cap_spans = n_new;
    t->attrs = attrs;
    t->n_attrs = nattr;
    t->cap_attrs = capattr;
    spans = NULL;
    attrs = NULL;
    rc = 0;
out:
    free(pd);
    free(rec2pend);
    free(perm);
    free(cpu_new);
    free(gpu_new);
    free(spans);
    free(attrs);
    map_free(&api);
    map_free(&ext);
    free(c.kname);
    return rc;
}
