/*
 * activity.h: decoded CUPTI activity records and the store that collects them.
 *
 * CUPTI hands us buffers of variable-size, versioned records (cupti_activity.h).  The decoder
 * walks each buffer once with CUPTI's own iterator (cuptiActivityGetNextRecord, reached through
 * the cupti_load table) and turns every record we understand into one fixed-size xsp_gpu_rec:
 * a common header (kind, times, correlation id, device/context/stream, name) and a union with
 * the kind-specific fields.  Strings CUPTI owns (kernel names) are copied into the store's
 * string table at once: CUPTI may free them after the buffer is returned.
 *
 * External-correlation records ({externalKind, externalId, correlationId}: CUPTI emits one
 * before each API record made while an id was pushed) go into a separate array; the merge
 * joins them to API records by correlation id, and kernels/memcpys/memsets to API records by
 * the same id (docs/gpu.md).  Timestamps are whatever clock CUPTI was given: the session clock
 * when the session registered it (clock == 1 below).
 *
 * Nothing is dropped silently.  The store counts: records CUPTI dropped for lack of buffer
 * space (dropped), records decoded but not kept because of the memory cap or an allocation
 * failure (lost), records of kinds we do not decode (unknown_kinds[kind]), buffers whose walk
 * ended with an iterator error rather than CUPTI_ERROR_MAX_LIMIT_REACHED (bad_buffers).
 *
 * Threading: CUPTI calls the buffer-completed callback from its own worker thread or from the
 * thread that flushes.  xsp_gpu_decode takes the store's mutex once per buffer (not per record)
 * and holds it for the whole walk; nothing here touches Python.  After xsp_gpu_stop returns,
 * no callback touches the store any more, and readers need no lock.
 */
#ifndef XSP_GPU_ACTIVITY_H
#define XSP_GPU_ACTIVITY_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/strtab.h"

#define XSP_GPU_NONE UINT32_MAX          /* device/context/stream not applicable or unknown */
#define XSP_GPU_KIND_SLOTS 64u           /* unknown_kinds[]: CUPTI kinds >= 63 share slot 63 */
#define XSP_GPU_CBID_CACHE 1024u         /* API name cache entries per domain */
#define XSP_GPU_DEFAULT_MAX_BYTES (256ull << 20)

/* Record flags (bits of xsp_gpu_rec.flags). */
enum xsp_gpu_flag {
    XSP_GPU_F_NO_TIME = 1u << 0,         /* start == end == 0: CUPTI could not time it */
    XSP_GPU_F_SERIAL_KERNEL = 1u << 1    /* kernel from CUPTI_ACTIVITY_KIND_KERNEL (serialised) */
};

/* The kind-specific part.  Which member is valid follows xsp_gpu_rec.kind. */
typedef union xsp_gpu_detail {
    struct {                   /* XSP_KIND_RUNTIME, XSP_KIND_DRIVER (CUpti_ActivityAPI) */
        uint32_t cbid;         /* CUpti_CallbackId in the runtime or driver domain */
        uint32_t tid;          /* calling CPU thread: gettid() when store->tid_type == 1 */
        uint32_t pid;          /* calling process id */
        uint32_t ret;          /* return value: cudaError_t (runtime) or CUresult (driver) */
    } api;
    struct {                   /* XSP_KIND_KERNEL (CUpti_ActivityKernel10) */
        int32_t  grid[3];      /* gridX, gridY, gridZ */
        int32_t  block[3];     /* blockX, blockY, blockZ */
        int32_t  smem_static;  /* staticSharedMemory per block, bytes */
        int32_t  smem_dynamic; /* dynamicSharedMemory per block, bytes */
        uint32_t graph_id;     /* graphId: the CUDA graph it was launched from, 0 = none */
        uint16_t regs;         /* registersPerThread */
        uint16_t pad;          /* unused */
        uint64_t graph_node;   /* graphNodeId, 0 = not from a graph */
    } kernel;
    struct {                   /* XSP_KIND_MEMCPY (CUpti_ActivityMemcpy6) */
        uint64_t bytes;        /* bytes copied */
        uint64_t graph_node;   /* graphNodeId, 0 = not from a graph */
        uint32_t graph_id;     /* graphId, 0 = none */
        uint8_t  copy_kind;    /* CUpti_ActivityMemcpyKind (HtoD = 1, DtoH = 2, ...) */
        uint8_t  src_kind;     /* CUpti_ActivityMemoryKind of the source */
        uint8_t  dst_kind;     /* CUpti_ActivityMemoryKind of the destination */
        uint8_t  flags;        /* CUpti_ActivityFlag bits (e.g. async) */
    } copy;
    struct {                   /* XSP_KIND_MEMSET (CUpti_ActivityMemset4) */
        uint64_t bytes;        /* bytes set */
        uint64_t graph_node;   /* graphNodeId, 0 = not from a graph */
        uint32_t graph_id;     /* graphId, 0 = none */
        uint32_t value;        /* the value set */
        uint16_t memory_kind;  /* CUpti_ActivityMemoryKind of the destination */
        uint16_t flags;        /* CUpti_ActivityFlag bits */
    } set;
    struct {                   /* XSP_KIND_SYNC (CUpti_ActivitySynchronization2) */
        uint32_t type;         /* CUpti_ActivitySynchronizationType */
        uint32_t event_id;     /* cudaEventId for event syncs, else CUPTI's invalid value */
    } sync;
    struct {                   /* XSP_KIND_OVERHEAD (CUpti_ActivityOverhead3) */
        uint32_t overhead_kind;/* CUpti_ActivityOverheadKind */
        uint32_t object_kind;  /* CUpti_ActivityObjectKind: what device/context/stream/tid mean */
        uint32_t tid;          /* thread id when object_kind is PROCESS or THREAD */
        uint32_t pid;          /* process id when object_kind is PROCESS or THREAD */
    } overhead;
} xsp_gpu_detail;

/* One decoded record: 88 bytes. */
typedef struct xsp_gpu_rec {
    uint64_t start_ns;         /* start on the clock CUPTI was given */
    uint64_t end_ns;           /* end, >= start_ns except when CUPTI says otherwise */
    uint32_t correlation_id;   /* CUPTI correlation id: links API call and GPU work; 0 = none */
    uint32_t name;             /* string id in the store's names */
    uint32_t device;           /* device id, XSP_GPU_NONE for API records and syncs */
    uint32_t context;          /* context id, XSP_GPU_NONE for API records */
    uint32_t stream;           /* stream id, XSP_GPU_NONE for API records */
    uint8_t  kind;             /* enum xsp_kind: XSP_KIND_RUNTIME .. XSP_KIND_OVERHEAD */
    uint8_t  flags;            /* enum xsp_gpu_flag bits */
    uint16_t pad;              /* unused, 0 */
    xsp_gpu_detail u;          /* kind-specific fields */
} xsp_gpu_rec;

/* One external-correlation record. */
typedef struct xsp_gpu_ext {
    uint64_t external_id;      /* the id pushed (xsp_gpu_push for CUSTOM2) */
    uint32_t external_kind;    /* CUpti_ExternalCorrelationKind: xsp pushes CUSTOM2 (5) */
    uint32_t correlation_id;   /* the API record it precedes */
} xsp_gpu_ext;

typedef struct xsp_gpu_store {
    pthread_mutex_t lock;      /* taken by xsp_gpu_decode/add_dropped per call */
    xsp_gpu_rec *recs;         /* decoded records in buffer order; owned. Protected by lock */
    uint32_t n_recs;           /* records used. Protected by lock */
    uint32_t cap_recs;         /* records allocated. Protected by lock */
    xsp_gpu_ext *ext;          /* external correlations; owned. Protected by lock */
    uint32_t n_ext;            /* used. Protected by lock */
    uint32_t cap_ext;          /* allocated. Protected by lock */
    xsp_strtab names;          /* record names (kernels, API calls, "Memcpy HtoD", ...).
                                  Protected by lock */
    uint64_t max_bytes;        /* cap on recs + ext + names memory; set at creation */
    uint64_t lost;             /* records (any kind) not kept: cap or out of memory.
                                  Protected by lock */
    uint64_t dropped;          /* records CUPTI dropped for lack of buffer space.
                                  Protected by lock */
    uint64_t bad_buffers;      /* walks ended by an iterator error. Protected by lock */
    uint64_t buffers;          /* buffers walked. Protected by lock */
    uint64_t bytes;            /* valid bytes walked. Protected by lock */
    uint64_t no_time;          /* records kept with XSP_GPU_F_NO_TIME. Protected by lock */
    uint64_t refused_buffers;  /* buffer requests declined (pool full), so CUPTI dropped
                                  records; added by xsp_gpu_stop once callbacks are done */
    uint64_t foreign_buffers;  /* completed buffers that were not ours (another client's,
                                  delivered to our callback): decoded, left alone; added by
                                  xsp_gpu_stop once callbacks are done */
    uint64_t unknown_kinds[XSP_GPU_KIND_SLOTS]; /* per CUpti_ActivityKind, records not
                                                   decoded. Protected by lock */
    uint32_t api_names[2][XSP_GPU_CBID_CACHE];  /* [driver?][cbid] -> name id + 1, 0 = not
                                                   looked up yet. Protected by lock */
    int32_t  tid_type;         /* api.tid: 1 = gettid (SYSTEM), 0 = pthread_self, -1 unknown;
                                  set by xsp_gpu_start */
    int32_t  clock;            /* 1: times are on the clock given to xsp_gpu_start; 0: CUPTI's
                                  default (CLOCK_REALTIME); set by xsp_gpu_start */
    uint32_t cupti_version;    /* cuptiGetVersion() of the library used; set by xsp_gpu_start */
    uint32_t kinds_missing;    /* bit i: optional kind i of xsp_gpu_start's list not enabled */
    int32_t  share_ok;         /* in (set before xsp_gpu_start): 1 = when another client holds
                                  CUPTI's one subscription but is not tracing (Kineto keeps an
                                  idle one after torch.profiler's first use), trace without it */
    int32_t  shared;           /* out: 1 = this session traces without the subscription */
    uint64_t incomplete;       /* buffers whose walk ended at an incomplete record
                                  (CUPTI_ERROR_INVALID_KIND). Protected by lock */
} xsp_gpu_store;

/* Allocates an empty store whose recs + ext + names may use up to max_bytes (0 = default
 * 256 MiB; the cap counts the empty string table too, and is never exceeded).  Returns NULL
 * on allocation failure. */
xsp_gpu_store *xsp_gpu_store_new(uint64_t max_bytes);

/* Frees the store and everything it owns.  Accepts NULL.  The store must not be in use by a
 * session (xsp_gpu_stop first). */
void xsp_gpu_store_free(xsp_gpu_store *s);

/* Decodes one CUPTI buffer of valid_size bytes into s: what the buffer-completed callback
 * calls.  The buffer is only read, and not referenced after the call.  Takes s->lock for the
 * whole walk.  Returns 0 when the walk reached the end (CUPTI_ERROR_MAX_LIMIT_REACHED, which
 * also ends a buffer whose last record is cut short by valid_size), or -1 when it stopped on an
 * iterator error (counted in bad_buffers; records before it are kept) or libcupti is not open
 * (nothing decoded).  Records past the memory cap are counted in lost.  Never crashes on a
 * malformed buffer beyond what CUPTI's iterator itself tolerates. */
int xsp_gpu_decode(xsp_gpu_store *s, uint8_t *buf, size_t valid_size);

/* Adds n to s->dropped under the lock.  Cannot fail. */
void xsp_gpu_store_add_dropped(xsp_gpu_store *s, uint64_t n);

/* Bytes of memory the store's records, correlations and names hold.  Caller holds the lock
 * or owns the store.  Cannot fail. */
size_t xsp_gpu_store_bytes(const xsp_gpu_store *s);

/* The record's name (owned by the store), "" for an unknown id.  Cannot fail. */
const char *xsp_gpu_rec_name(const xsp_gpu_store *s, const xsp_gpu_rec *r);

#endif
