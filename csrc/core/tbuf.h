/*
 * tbuf.h: a thread's recording buffer (internal to the core: recorder.c writes it on the hot
 * path, replay.c and merge.c read it at stop).
 *
 * Ownership: a tbuf belongs to one OS thread for that thread's life and is linked into a
 * process-wide registry that only grows at the head (lock-free push).  Only its thread writes
 * it while `busy` is set and a session is active; xsp_rec_stop() reads and resets it after
 * switching the generation and waiting for `busy` to clear.  That handshake is the only
 * synchronisation: the hot path takes no lock.
 *
 * Recording appends events to a log of chunks (CHUNK_BYTES each), nothing else:
 *   begin  32 bytes: w0 ticks; w1 key | tag << 56 (tag: XSP_EV_BEGIN | level << 4 | kind,
 *          XSP_EV_NAME2 when w3's high half is the second name); w2 a0; w3 name id | (a1 as
 *          32 bits, or the second name's id) << 32
 *   end    16 bytes: w0 ticks; w1 key | flags << 56 (XSP_EV_END is 0: the op exit stores the
 *          key as it comes, below 2^56)
 *   data   16 bytes + the payload padded to 8: w0 ticks; w1 len | sub << 32 | XSP_EV_DATA << 56
 *          (sub: XSP_DATA_INPUTS, attached to the begin just before it; XSP_DATA_MEM, to the
 *          innermost open span; see recorder.h, xsp_rec_data)
 * Matching ends to begins, parents, forced ends and the depth limit are all worked out at stop
 * by replaying the log (replay.c) into fixed-size records (xsp_rec, 48 bytes) that the merge
 * reads; a record's local index is its begin's rank among the thread's recorded begins.
 * Names are interned per thread into `names` when first seen (a pointer cache makes the next
 * sighting cheap).
 *
 * Memory at stop: the full-size chunks (log and records, XSP_LOG_BYTES each) are mappings of
 * their own (chunk.h) or the pool's.  A log chunk, once replayed, holds records (a span's
 * record is as big as its begin and end) or is unmapped; a record chunk is unmapped once the
 * merge has emitted its records.  So at every moment of stop the log, the records and the
 * trace together take about the larger of the log and the trace (docs/design.md, Memory).
 */
#ifndef XSP_TBUF_H
#define XSP_TBUF_H

#include <stdatomic.h>
#include <stdint.h>

#include "chunk.h"
#include "clock.h"
#include "recorder.h"
#include "strtab.h"

#define XSP_CHUNK_RECS 4096u
#define XSP_LOG_BYTES (XSP_CHUNK_RECS * 48u)   /* bytes of a log chunk: 4096 begin+end pairs */
#define XSP_NONE UINT32_MAX
#define XSP_REC_HAS_CHILD 0x8000u   /* merge-time only: some record names this one as parent */

/* Event tags (top byte of an event's second word). */
#define XSP_EV_BEGIN 0x80u         /* a begin; low bits: level << 4 | kind */
#define XSP_EV_NAME2 0x40u         /* with XSP_EV_BEGIN: w3's high half is the second name */
#define XSP_EV_END 0x00u           /* neither bit 7 nor 6: an end; low 6 bits: its flags */
#define XSP_EV_DATA 0x40u          /* without XSP_EV_BEGIN: a data event (exactly this tag) */
#define XSP_EV_KEY_MASK ((UINT64_C(1) << 56) - 1)
_Static_assert(XSP_NKINDS <= 16 && XSP_NLEVELS <= 4, "kind and level fit a begin's tag");

typedef struct xsp_rec {
    uint64_t start;     /* begin time, clock ticks (clock.h) */
    uint64_t end;       /* end time, clock ticks */
    int64_t  a0;        /* kind-specific: ops: sequence number (-1 none) */
    int64_t  a1;        /* kind-specific: ops: RecordFunction (forward) thread id */
    uint32_t name;      /* local name id in the thread's strtab */
    uint32_t name2;     /* local id of the second string (module class), 0 = none */
    uint32_t parent;    /* local index of the parent record, XSP_NONE for a root */
    uint8_t  level;     /* enum xsp_level */
    uint8_t  kind;      /* enum xsp_kind */
    uint16_t flags;     /* enum xsp_span_flag bits */
} xsp_rec;

/* Replay-time side records of data events (xsp_rec_data), kept sorted by rec so that the merge
 * walks them with a cursor as it emits the thread's records in order. */
typedef struct xsp_data_ent {
    uint32_t rec;       /* local index of the record it belongs to */
    uint32_t off;       /* payload offset in the buffer's dbytes */
    uint32_t len;       /* payload bytes */
} xsp_data_ent;

/* Memory reported inside one record (itself, not its children), per device type
 * (0 CPU, 1 CUDA, 2 other): the allocator's events while the span was the innermost open one. */
typedef struct xsp_mem_ent {
    uint32_t rec;            /* local index of the record */
    uint32_t dev;            /* device type index, < XSP_MEM_DEVS */
    uint64_t allocs;         /* allocations */
    uint64_t frees;          /* frees */
    uint64_t alloc_bytes;    /* bytes allocated */
    uint64_t free_bytes;     /* bytes freed */
    int64_t  peak;           /* highest total allocated the allocator reported, INT64_MIN none */
    int64_t  total;          /* total allocated at its last event */
} xsp_mem_ent;
#define XSP_MEM_DEVS 3

/* A direct-mapped cache of names passed NUL-terminated (the shim's): pointer -> id, hit only
 * when the bytes at the pointer still equal the interned copy, so a reused pointer is safe;
 * for a name its caller declares stable (XSP_NAME_STABLE), when no operator was registered or
 * deregistered since the bytes were last compared (the names epoch is unchanged: a change
 * marks every slot unstable before the owner reads a name again, recorder.c names_refresh). */
#define XSP_NAME_CACHE 256u
#define XSP_SLOT_UNSTABLE (UINT64_C(1) << 63)   /* in a slot's key: compare the bytes (no user
                                                 * address has bit 63 set on x86-64, where the
                                                 * fast path runs; elsewhere the bytes decide) */
typedef struct xsp_name_slot {
    uint64_t key;       /* the caller's pointer, bare when a XSP_NAME_STABLE name was checked
                         * here at the buffer's names epoch (the fast path's one compare), or
                         * | XSP_SLOT_UNSTABLE (the bytes are compared at every hit); 0 = empty */
    uint32_t id;        /* local name id */
    uint32_t pad;       /* unused: 16-byte slots */
} xsp_name_slot;

/* An open span on the hook stack (G sessions only: the pushes and pops of external ids). */
typedef struct xsp_hook_open {
    uint64_t key;       /* the caller's key */
    uint32_t ord;       /* external id index pushed for it */
    uint32_t pushed;    /* 1 if pushed */
} xsp_hook_open;

typedef struct xsp_tbuf {
    /* the hot path's fields, first */
    uint8_t *wp;                /* next free byte of the current log chunk; + 1 (odd) while
                                 * the owner is inside a fast path (recorder.c, fast_enter):
                                 * written by the owner only, read by stop */
    _Atomic(uint8_t *) flimit;  /* the fast paths run while wp + 1 < flimit: wend + 2 when they
                                 * may (buffer reset for the session, its stable name slots
                                 * checked at the names epoch, membarrier, no hooks, TSC clock,
                                 * no chunk refused, no lost span open), NULL otherwise.  Set
                                 * by the owner (fast_update, which checks g_gen again after
                                 * the store); nulled by stop and by names_changed from any
                                 * thread, after their g_gen bump (recorder.c, "The fast
                                 * paths' limit") */
    _Atomic int busy;           /* 1 while the owner is inside a slow path (see stop; the
                                 * fast paths' flag is wp's low bit) */
    _Atomic int dead;           /* set when the owning thread has exited */
    uint8_t *wend;              /* wp > wend: the chunk has no room for a 32-byte event */
    uint64_t gen;               /* session generation the contents belong to (g_gen's low
                                 * 32 bits) */
    uint32_t names_epoch;       /* names epoch (g_gen's high 32 bits) the stable slots of
                                 * ncache were checked at */
    xsp_name_slot ncache[XSP_NAME_CACHE]; /* name pointer cache, cleared with names */

    uint64_t tid;               /* OS thread id of the owner */
    uint32_t role;              /* XSP_ROLE_* the role function gave when the buffer was made
                                 * (recorder.h: xsp_rec_set_thread_role_fn); 0 without one */
    uint32_t role_num;          /* the role's number (an intra-op thread's number in its team) */
    uint32_t serial;            /* unique number of this buffer in the process (external ids) */
    uint32_t n_log;             /* log chunks in use (the last is the current one) */
    uint32_t cap_log;           /* capacity of log, log_used and log_size */
    uint32_t nb;                /* begins written this session (G sessions: external ids) */
    uint8_t **log;              /* log chunks, full-size ones mapped (chunk.h), small ones
                                 * malloc'd; owned (pool chunks are the session's); NULL once
                                 * the replay reused or freed it */
    uint32_t *log_used;         /* bytes used in each log chunk but the current one */
    uint32_t *log_size;         /* bytes of each log chunk (XSP_LOG_BYTES, or a small chunk
                                 * past the cap) */
    uint32_t capped;            /* 1 once a chunk was refused (cap or memory): spans lost */
    uint32_t ldepth;            /* lost spans (cap) still open: their keys on lstack */
    uint32_t loverflow;         /* lost spans still open past XSP_MAX_DEPTH of them */
    uint64_t *lstack;           /* keys of open lost spans (their ends are not written);
                                 * XSP_MAX_DEPTH entries, allocated at the first loss */
    uint64_t lost_cap;          /* spans not recorded because the memory cap was reached */
    uint64_t lost_end;          /* ends not recorded for want of memory (their spans show as
                                 * open at stop) */
    uint64_t names_bytes;       /* bytes of `names` charged to the session cap */
    xsp_strtab names;           /* this thread's interned names */
    uint32_t hdepth;            /* G sessions: open spans on hstack */
    uint32_t hoverflow;         /* G sessions: spans begun past XSP_MAX_DEPTH, not yet ended */
    xsp_hook_open *hstack;      /* G sessions: XSP_MAX_DEPTH entries, allocated on first use */

    /* filled at stop by xsp_tbuf_replay, read by the merge */
    xsp_rec **chunks;           /* record chunks (XSP_CHUNK_RECS each; read log chunks reused,
                                 * pool ones among them, else mapped); owned; NULL once the
                                 * merge gave it back */
    uint32_t n_chunks;          /* chunks in use */
    uint32_t cap_chunks;        /* capacity of chunks */
    uint32_t slot;              /* records used in the last chunk */
    uint32_t *ord2rec;          /* begin rank -> record index (or its nearest recorded
                                 * ancestor's, XSP_NONE); n_ord entries; owned */
    uint32_t n_ord;             /* begins replayed */
    uint32_t open;              /* spans still open at stop */
    uint64_t lost_depth;        /* spans not recorded because nesting exceeded XSP_MAX_DEPTH */
    uint64_t unmatched;         /* ends whose key was not open (began before the session) */
    uint64_t forced;            /* spans ended early because an enclosing span ended */
    uint8_t *dbytes;            /* payloads of XSP_DATA_INPUTS events; owned */
    uint32_t n_dbytes;          /* bytes used in dbytes */
    uint32_t cap_dbytes;        /* bytes allocated */
    xsp_data_ent *dents;        /* the inputs attached to records, by rec; owned */
    uint32_t n_dents;           /* entries used */
    uint32_t cap_dents;         /* entries allocated */
    xsp_mem_ent *ments;         /* memory per record and device, sorted by (rec, dev); owned */
    uint32_t n_ments;           /* entries used */
    uint32_t cap_ments;         /* entries allocated */
    uint64_t lost_data;         /* data events written but not attached (their span was lost,
                                 * or no begin preceded them) or not written (cap, too long) */
    uint64_t mem_outside[XSP_MEM_DEVS][2];  /* allocations / frees reported with no span open
                                 * on the thread: [dev][0] bytes allocated, [dev][1] freed */
    uintptr_t pool_lo;          /* the session's pool, [pool_lo, pool_hi): its chunks are never
                                 * freed one by one (xsp_tbuf_chunk_free); set by the replay */
    uintptr_t pool_hi;          /* see pool_lo */
    int release;                /* set by the replay: 1, each chunk is given back as soon as
                                 * stop has read it (a log chunk the replay does not reuse, a
                                 * record chunk the merge has emitted); 0, all stay until
                                 * recorder.c's tbuf_release (xsp_rec_set_release, tests) */
    struct xsp_tbuf *next;      /* registry link; written once before publication */
} xsp_tbuf;

/* Local index -> record. idx must be < the buffer's record count. Cannot fail. */
static inline xsp_rec *xsp_tbuf_rec(const xsp_tbuf *tb, uint32_t idx)
{
    return &tb->chunks[idx / XSP_CHUNK_RECS][idx % XSP_CHUNK_RECS];
}

/* Gives back a full-size chunk of tb (log or records) that stop no longer reads: unmapped,
 * or, if it belongs to the pool, left there.  Accepts NULL; cannot fail. */
static inline void xsp_tbuf_chunk_free(const xsp_tbuf *tb, void *c)
{
    uintptr_t p = (uintptr_t)c;
    if (c && !(p >= tb->pool_lo && p < tb->pool_hi))
        xsp_chunk_free(c);
}

/* Number of records in the buffer. Cannot fail. */
static inline uint32_t xsp_tbuf_count(const xsp_tbuf *tb)
{
    return tb->n_chunks ? (tb->n_chunks - 1) * XSP_CHUNK_RECS + tb->slot : 0;
}

/* replay.c, at stop (busy clear, the session over): turns tb's event log into records
 * (chunks, the counters, and ord2rec when need_ord: G sessions), ending spans still open at
 * stop (ticks) with XSP_FLAG_OPEN_AT_STOP.  Each log chunk, once read, becomes a record chunk
 * or, when release is 1, is given back at once (the pool's, [pool_lo, pool_hi), stay in the
 * pool); release also tells the merge to give back each record chunk once it has emitted its
 * records (tb->release).  Returns 0, or -1 on allocation failure (tb then holds what was
 * made; recorder.c's tbuf_release frees it). */
int xsp_tbuf_replay(xsp_tbuf *tb, uint64_t stop, const char *pool_lo, const char *pool_hi,
                    int need_ord, int release);

/* merge.c: builds the merged trace from n buffers of one session; start and stop are the
 * session's clock readings (ticks), map converts ticks to ns.  Returns a new trace or NULL on
 * allocation failure.  Buffers are read, and their open spans ended at stop; where a buffer's
 * release is set, each of its record chunks is given back (xsp_tbuf_chunk_free, its slot in
 * chunks set to NULL) as soon as the last of its records is emitted, so that the trace grows
 * into the memory the records leave.  Nothing reads a buffer's records after the merge. */
xsp_trace *xsp_merge(xsp_tbuf *const *bufs, uint32_t n, uint64_t start, uint64_t stop,
                     const xsp_clock_map *map, int adopt_roots, const xsp_merge_extra *extra);

#endif
