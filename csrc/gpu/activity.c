/*
 * activity.c: the CUPTI record decoder and the store (see activity.h for the contract).
 *
 * The walk is CUPTI's: cuptiActivityGetNextRecord knows each record's size for the library's
 * own version, so a newer libcupti with longer records still iterates correctly; we only read
 * fields present at the same offsets since CUDA 12 (kind-specific decoders below name the
 * struct they read).  A record is kept in two steps: room in the array (grown by doubling,
 * clamped to the cap), then its name interned.  Before interning we compute the most the
 * string table could grow if the name were new; when that would pass the cap the record is
 * counted as lost instead, so the cap holds exactly (no allocation is attempted past it).
 *
 * API names come from cuptiGetCallbackName, with CUPTI's version suffix ("_v7000") cut off so
 * they read like torch.profiler's ("cudaLaunchKernel"), and are cached per (domain, cbid) in
 * the store so a buffer full of launches does one lookup.
 *
 * Historical note: decoding into per-kind arrays was considered; one array of fixed-size
 * records keeps buffer order (which the merge's correlation join does not need, but tests and
 * debugging do) and costs 88 bytes per record whatever the kind.
 */
#include "activity.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/trace.h"
#include "cupti_load.h"

_Static_assert(sizeof(xsp_gpu_rec) == 88, "xsp_gpu_rec layout changed: update docs/gpu.md");
_Static_assert(sizeof(xsp_gpu_ext) == 16, "xsp_gpu_ext layout changed");

xsp_gpu_store *xsp_gpu_store_new(uint64_t max_bytes)
{
    xsp_gpu_store *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    if (xsp_strtab_init(&s->names) != 0) {
        free(s);
        return NULL;
    }
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        xsp_strtab_free(&s->names);
        free(s);
        return NULL;
    }
    s->max_bytes = max_bytes ? max_bytes : XSP_GPU_DEFAULT_MAX_BYTES;
    s->tid_type = -1;
    return s;
}

void xsp_gpu_store_free(xsp_gpu_store *s)
{
    if (!s)
        return;
    pthread_mutex_destroy(&s->lock);
    free(s->recs);
    free(s->ext);
    xsp_strtab_free(&s->names);
    free(s);
}

size_t xsp_gpu_store_bytes(const xsp_gpu_store *s)
{
    return (size_t)s->cap_recs * sizeof *s->recs + (size_t)s->cap_ext * sizeof *s->ext
           + xsp_strtab_bytes(&s->names);
}

void xsp_gpu_store_add_dropped(xsp_gpu_store *s, uint64_t n)
{
    pthread_mutex_lock(&s->lock);
    s->dropped += n;
    pthread_mutex_unlock(&s->lock);
}

const char *xsp_gpu_rec_name(const xsp_gpu_store *s, const xsp_gpu_rec *r)
{
    const char *n = xsp_strtab_get(&s->names, r->name, NULL);
    return n ? n : "";
}

/* Grows *arr (elements of size elem, *cap of them) to hold one more, within the cap.
 * Returns 0, or -1 when the cap or memory forbids it (array unchanged). */
static int grow(xsp_gpu_store *s, void **arr, uint32_t *cap, size_t elem)
{
    size_t used = xsp_gpu_store_bytes(s);
    if (used >= s->max_bytes || *cap == UINT32_MAX)
        return -1;
    size_t room = (s->max_bytes - used) / elem;      /* more elements the cap allows */
    size_t want = *cap ? *cap : 1024;                /* double, starting at 1024 */
    if (want > room)
        want = room;
    if (want > (size_t)UINT32_MAX - *cap)
        want = (size_t)UINT32_MAX - *cap;
    if (want == 0)
        return -1;
    void *p = realloc(*arr, ((size_t)*cap + want) * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap += (uint32_t)want;
    return 0;
}

/* The most the names table could grow if a new string of len bytes were added. */
static size_t names_growth(const xsp_strtab *t, size_t len)
{
    size_t g = 0;
    if (len > XSP_STRTAB_MAX_LEN)
        len = XSP_STRTAB_MAX_LEN;
    if (t->arena_len + len + 1 > t->arena_cap) {
        size_t c = t->arena_cap * 2;
        while (c < t->arena_len + len + 1)
            c *= 2;
        g += c - t->arena_cap;
    }
    if (t->n == t->cap)
        g += (size_t)t->cap * (sizeof *t->offs + sizeof *t->lens + sizeof *t->hashes);
    if ((uint64_t)(t->n + 1) * 2 > (uint64_t)t->mask + 1)
        g += ((size_t)t->mask + 1) * sizeof *t->slots;
    return g;
}

/* Interns a name within the cap.  Returns its id, or UINT32_MAX (cap or memory). */
static uint32_t intern(xsp_gpu_store *s, const char *str, size_t len)
{
    if (xsp_gpu_store_bytes(s) + names_growth(&s->names, len) > s->max_bytes)
        return UINT32_MAX;
    return xsp_strtab_intern(&s->names, str, len);
}

/* A new record slot, zeroed, or NULL (counted lost). */
/* The next record, zeroed but for the fields every kind has (XSP_GPU_NONE where a kind has no
 * device, context or stream), or NULL when the cap or memory forbids it (counted as lost).
 * Committed by commit_id/commit_str. */
static xsp_gpu_rec *new_rec(xsp_gpu_store *s, uint8_t kind, uint64_t start, uint64_t end,
                            uint32_t corr, uint32_t device, uint32_t context, uint32_t stream)
{
    if (s->n_recs == s->cap_recs && grow(s, (void **)&s->recs, &s->cap_recs, sizeof *s->recs)) {
        s->lost++;
        return NULL;
    }
    xsp_gpu_rec *r = &s->recs[s->n_recs];
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->start_ns = start;
    r->end_ns = end;
    r->correlation_id = corr;
    r->device = device;
    r->context = context;
    r->stream = stream;
    return r;
}

/* Commits r with name id: flags records CUPTI could not time. */
static void commit_id(xsp_gpu_store *s, xsp_gpu_rec *r, uint32_t id)
{
    r->name = id;
    if (r->start_ns == 0 && r->end_ns == 0) {
        r->flags |= XSP_GPU_F_NO_TIME;
        s->no_time++;
    }
    s->n_recs++;
}

/* Names r and commits it, or counts it lost when the name does not fit.  Returns the name
 * id, or UINT32_MAX when lost. */
static uint32_t commit(xsp_gpu_store *s, xsp_gpu_rec *r, const char *name, size_t len)
{
    uint32_t id = intern(s, name, len);
    if (id == UINT32_MAX)
        s->lost++;
    else
        commit_id(s, r, id);
    return id;
}

static void commit_str(xsp_gpu_store *s, xsp_gpu_rec *r, const char *name)
{
    (void)commit(s, r, name, strlen(name));
}

/* ---- kind decoders: each reads only fields CUDA 12's record versions already had ---- */

static void dec_kernel(xsp_gpu_store *s, const CUpti_ActivityKernel10 *k, int serial)
{
    xsp_gpu_rec *r = new_rec(s, XSP_KIND_KERNEL, k->start, k->end, k->correlationId,
                             k->deviceId, k->contextId, k->streamId);
    if (!r)
        return;
    r->flags = serial ? XSP_GPU_F_SERIAL_KERNEL : 0;
    r->u.kernel.grid[0] = k->gridX;
    r->u.kernel.grid[1] = k->gridY;
    r->u.kernel.grid[2] = k->gridZ;
    r->u.kernel.block[0] = k->blockX;
    r->u.kernel.block[1] = k->blockY;
    r->u.kernel.block[2] = k->blockZ;
    r->u.kernel.smem_static = k->staticSharedMemory;
    r->u.kernel.smem_dynamic = k->dynamicSharedMemory;
    r->u.kernel.regs = k->registersPerThread;
    r->u.kernel.graph_id = k->graphId;
    r->u.kernel.graph_node = k->graphNodeId;
    commit_str(s, r, k->name ? k->name : "(unnamed kernel)");   /* copied: CUPTI owns it */
}

static const char *const k_copy_names[] = {
    "Memcpy", "Memcpy HtoD", "Memcpy DtoH", "Memcpy HtoA", "Memcpy AtoH", "Memcpy AtoA",
    "Memcpy AtoD", "Memcpy DtoA", "Memcpy DtoD", "Memcpy HtoH", "Memcpy PtoP"};

static void dec_memcpy(xsp_gpu_store *s, const CUpti_ActivityMemcpy6 *m)
{
    xsp_gpu_rec *r = new_rec(s, XSP_KIND_MEMCPY, m->start, m->end, m->correlationId,
                             m->deviceId, m->contextId, m->streamId);
    if (!r)
        return;
    r->u.copy.bytes = m->bytes;
    r->u.copy.graph_id = m->graphId;
    r->u.copy.graph_node = m->graphNodeId;
    r->u.copy.copy_kind = m->copyKind;
    r->u.copy.src_kind = m->srcKind;
    r->u.copy.dst_kind = m->dstKind;
    r->u.copy.flags = m->flags;
    size_t n = sizeof k_copy_names / sizeof *k_copy_names;
    commit_str(s, r, k_copy_names[m->copyKind < n ? m->copyKind : 0]);
}

static void dec_memset(xsp_gpu_store *s, const CUpti_ActivityMemset4 *m)
{
    xsp_gpu_rec *r = new_rec(s, XSP_KIND_MEMSET, m->start, m->end, m->correlationId,
                             m->deviceId, m->contextId, m->streamId);
    if (!r)
        return;
    r->u.set.bytes = m->bytes;
    r->u.set.graph_id = m->graphId;
    r->u.set.graph_node = m->graphNodeId;
    r->u.set.value = m->value;
    r->u.set.memory_kind = m->memoryKind;
    r->u.set.flags = m->flags;
    commit_str(s, r, "Memset");
}

/* Name id for an API cbid: cached, else cuptiGetCallbackName without "_vNNNN", else "cbid N". */
static void name_api(xsp_gpu_store *s, xsp_gpu_rec *r, int driver)
{
    uint32_t cbid = r->u.api.cbid;
    if (cbid < XSP_GPU_CBID_CACHE && s->api_names[driver][cbid]) {
        commit_id(s, r, s->api_names[driver][cbid] - 1);
        return;
    }
    const xsp_cupti_fns *f = xsp_cupti();
    const char *name = NULL;
    char buf[32];
    size_t len;
    CUpti_CallbackDomain dom = driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API;
    if (f && f->GetCallbackName && f->GetCallbackName(dom, cbid, &name) == CUPTI_SUCCESS && name) {
        len = strlen(name);
        size_t i = len;
        while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9')
            i--;
        if (i < len && i >= 3 && name[i - 1] == 'v' && name[i - 2] == '_')
            len = i - 2;                           /* cudaLaunchKernel_v7000 -> cudaLaunchKernel */
    } else {
        len = (size_t)snprintf(buf, sizeof buf, "cbid %u", cbid);
        name = buf;
    }
    uint32_t id = commit(s, r, name, len);
    if (id != UINT32_MAX && cbid < XSP_GPU_CBID_CACHE)
        s->api_names[driver][cbid] = id + 1;
}

static void dec_api(xsp_gpu_store *s, const CUpti_ActivityAPI *a, int driver)
{
    xsp_gpu_rec *r = new_rec(s, driver ? XSP_KIND_DRIVER : XSP_KIND_RUNTIME, a->start, a->end,
                             a->correlationId, XSP_GPU_NONE, XSP_GPU_NONE, XSP_GPU_NONE);
    if (!r)
        return;
    r->u.api.cbid = a->cbid;
    r->u.api.tid = a->threadId;
    r->u.api.pid = a->processId;
    r->u.api.ret = a->returnValue;
    name_api(s, r, driver);
}

static void dec_sync(xsp_gpu_store *s, const CUpti_ActivitySynchronization2 *y)
{
    static const char *const names[] = {"Sync", "Event Sync", "Stream Wait Event",
                                        "Stream Sync", "Context Sync"};
    /* the device is not in the record (the merge maps it from the API call's thread) */
    xsp_gpu_rec *r = new_rec(s, XSP_KIND_SYNC, y->start, y->end, y->correlationId, XSP_GPU_NONE,
                             y->contextId, y->streamId);
    if (!r)
        return;
    r->u.sync.type = (uint32_t)y->type;
    r->u.sync.event_id = y->cudaEventId;
    commit_str(s, r, names[(uint32_t)y->type < 5 ? (uint32_t)y->type : 0]);
}

static const char *overhead_name(uint32_t k)
{
    switch (k) {
    case CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER:
        return "Overhead: driver compiler";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH:
        return "Overhead: CUPTI buffer flush";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION:
        return "Overhead: CUPTI instrumentation";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE:
        return "Overhead: CUPTI resource";
    case CUPTI_ACTIVITY_OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING:
        return "Overhead: module loading";
    case CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING:
        return "Overhead: lazy function loading";
    case CUPTI_ACTIVITY_OVERHEAD_COMMAND_BUFFER_FULL:
        return "Overhead: command buffer full";
    case CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST:
        return "Overhead: activity buffer request";
    case CUPTI_ACTIVITY_OVERHEAD_UVM_ACTIVITY_INIT:
        return "Overhead: UVM activity init";
    default:
        return "Overhead";
    }
}

/* correlationId came with a later overhead record version than CUDA 12.0's (40-byte
 * CUpti_ActivityOverhead); it is read only from a CUPTI whose layout we checked (13.0). */
static void dec_overhead(xsp_gpu_store *s, const CUpti_ActivityOverhead3 *o, uint32_t version)
{
    /* CUPTI 13's Overhead3 may carry details "the client is responsible for freeing with
     * free()" (cupti_activity.h); we do not read them.  Older records end before the field. */
    if (version >= 130000)
        free(o->overheadData);
    xsp_gpu_rec *r = new_rec(s, XSP_KIND_OVERHEAD, o->start, o->end,
                             version >= 130000 ? o->correlationId : 0, XSP_GPU_NONE,
                             XSP_GPU_NONE, XSP_GPU_NONE);
    if (!r)
        return;
    r->u.overhead.overhead_kind = (uint32_t)o->overheadKind;
    r->u.overhead.object_kind = (uint32_t)o->objectKind;
    switch (o->objectKind) {
    case CUPTI_ACTIVITY_OBJECT_PROCESS:
    case CUPTI_ACTIVITY_OBJECT_THREAD:
        r->u.overhead.pid = o->objectId.pt.processId;
        r->u.overhead.tid = o->objectId.pt.threadId;
        break;
    case CUPTI_ACTIVITY_OBJECT_STREAM:
        r->stream = o->objectId.dcs.streamId;
        /* fall through */
    case CUPTI_ACTIVITY_OBJECT_CONTEXT:
        r->context = o->objectId.dcs.contextId;
        /* fall through */
    case CUPTI_ACTIVITY_OBJECT_DEVICE:
        r->device = o->objectId.dcs.deviceId;
        break;
    default:
        break;
    }
    commit_str(s, r, overhead_name((uint32_t)o->overheadKind));
}

static void dec_ext(xsp_gpu_store *s, const CUpti_ActivityExternalCorrelation *e)
{
    if (s->n_ext == s->cap_ext && grow(s, (void **)&s->ext, &s->cap_ext, sizeof *s->ext)) {
        s->lost++;
        return;
    }
    xsp_gpu_ext *x = &s->ext[s->n_ext++];
    x->external_id = e->externalId;
    x->external_kind = (uint32_t)e->externalKind;
    x->correlation_id = e->correlationId;
}

static void dec_one(xsp_gpu_store *s, const CUpti_Activity *a, uint32_t version)
{
    switch (a->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        dec_kernel(s, (const CUpti_ActivityKernel10 *)a, 0);
        break;
    case CUPTI_ACTIVITY_KIND_KERNEL:
        dec_kernel(s, (const CUpti_ActivityKernel10 *)a, 1);
        break;
    case CUPTI_ACTIVITY_KIND_MEMCPY:
        dec_memcpy(s, (const CUpti_ActivityMemcpy6 *)a);
        break;
    case CUPTI_ACTIVITY_KIND_MEMSET:
        dec_memset(s, (const CUpti_ActivityMemset4 *)a);
        break;
    case CUPTI_ACTIVITY_KIND_RUNTIME:
        dec_api(s, (const CUpti_ActivityAPI *)a, 0);
        break;
    case CUPTI_ACTIVITY_KIND_DRIVER:
    case CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API:   /* a driver launch outside public APIs */
        dec_api(s, (const CUpti_ActivityAPI *)a, 1);
        break;
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
        dec_sync(s, (const CUpti_ActivitySynchronization2 *)a);
        break;
    case CUPTI_ACTIVITY_KIND_OVERHEAD:
        dec_overhead(s, (const CUpti_ActivityOverhead3 *)a, version);
        break;
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
        dec_ext(s, (const CUpti_ActivityExternalCorrelation *)a);
        break;
    default: {
        uint32_t k = (uint32_t)a->kind;
        s->unknown_kinds[k < XSP_GPU_KIND_SLOTS ? k : XSP_GPU_KIND_SLOTS - 1]++;
        break;
    }
    }
}

int xsp_gpu_decode(xsp_gpu_store *s, uint8_t *buf, size_t valid_size)
{
    const xsp_cupti_fns *f = xsp_cupti();
    if (!f)
        return -1;
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    s->buffers++;
    s->bytes += valid_size;
    CUpti_Activity *rec = NULL;
    for (;;) {
        CUptiResult st = f->ActivityGetNextRecord(buf, valid_size, &rec);
        if (st == CUPTI_ERROR_MAX_LIMIT_REACHED)
            break;
        if (st == CUPTI_ERROR_INVALID_KIND) {
            /* "the record is incomplete or invalid": the end of what CUPTI finished writing
             * (NVIDIA's own samples stop there too); counted, not an error */
            s->incomplete++;
            break;
        }
        if (st != CUPTI_SUCCESS || !rec) {
            s->bad_buffers++;
            rc = -1;
            break;
        }
        dec_one(s, rec, f->version);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}
