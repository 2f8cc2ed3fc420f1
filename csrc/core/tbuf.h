/*
 * tbuf.h: a thread's recording buffer (internal to the core: recorder.c writes it on the hot
 * path, merge.c reads it at stop).
 *
 * Ownership: a tbuf belongs to one OS thread for that thread's life and is linked into a
 * process-wide registry that only grows at the head (lock-free push).  Only its thread writes
 * it while `busy` is set and a session is active; xsp_session_stop() reads and resets it after
 * switching the generation and waiting for `busy` to clear.  That handshake is the only
 * synchronisation: the hot path takes no lock.
 *
 * Records are fixed-size (48 bytes), appended to chunks of XSP_CHUNK_RECS; a record's local
 * index is chunk * XSP_CHUNK_RECS + slot.  Names are interned per thread into `names`.
 */
#ifndef XSP_TBUF_H
#define XSP_TBUF_H

#include <stdatomic.h>
#include <stdint.h>

#include "clock.h"
#include "recorder.h"
#include "strtab.h"

#define XSP_CHUNK_RECS 4096u
#define XSP_NONE UINT32_MAX
#define XSP_REC_HAS_CHILD 0x8000u   /* merge-time only: some record names this one as parent */

typedef struct xsp_rec {
    uint64_t start;     /* begin time, clock ticks (clock.h) */
    uint64_t end;       /* end time, clock ticks, 0 while open */
    int64_t  a0;        /* kind-specific: ops: sequence number (-1 none) */
    int64_t  a1;        /* kind-specific: ops: RecordFunction (forward) thread id */
    uint32_t name;      /* local name id in the thread's strtab */
    uint32_t name2;     /* local id of the second string (module class), 0 = none */
    uint32_t parent;    /* local index of the parent record, XSP_NONE for a root */
    uint8_t  level;     /* enum xsp_level */
    uint8_t  kind;      /* enum xsp_kind */
    uint16_t flags;     /* enum xsp_span_flag bits */
} xsp_rec;

/* A direct-mapped cache of names passed NUL-terminated (the shim's): pointer -> id, hit only
 * when the bytes at the pointer still equal the interned copy, so a reused pointer is safe. */
#define XSP_NAME_CACHE 256u
typedef struct xsp_name_slot {
    const char *ptr;    /* the caller's pointer, NULL = empty */
    uint32_t id;        /* local name id */
    uint32_t len;       /* length of the name */
} xsp_name_slot;

typedef struct xsp_open {
    uint64_t key;       /* the caller's key, matched at end */
    xsp_rec *rec;       /* the record, NULL if the span was lost (cap) */
    uint32_t idx;       /* local index of rec, or of the nearest recorded ancestor if lost */
    uint32_t pushed;    /* 1 if an external correlation id was pushed for it (pop at end) */
} xsp_open;

typedef struct xsp_tbuf {
    _Atomic int busy;           /* 1 while the owner is inside a begin/end (see stop) */
    _Atomic int dead;           /* set when the owning thread has exited */
    uint64_t gen;               /* session generation the contents belong to */
    uint64_t tid;               /* OS thread id of the owner */
    uint32_t serial;            /* unique number of this buffer in the process (external ids) */
    uint32_t pad2;              /* unused */
    xsp_rec **chunks;           /* chunk pointers, n_chunks used; owned */
    uint32_t n_chunks;          /* chunks in use */
    uint32_t cap_chunks;        /* capacity of chunks */
    uint32_t slot;              /* records used in the last chunk */
    uint32_t depth;             /* open spans on the stack */
    uint32_t overflow;          /* spans begun past XSP_MAX_DEPTH and not yet ended */
    uint32_t pad;               /* unused */
    uint64_t lost_cap;          /* spans not recorded because the memory cap was reached */
    uint64_t lost_depth;        /* spans not recorded because nesting exceeded XSP_MAX_DEPTH */
    uint64_t unmatched;         /* ends whose key was not open (began before the session) */
    uint64_t forced;            /* spans ended early because an enclosing span ended */
    uint64_t names_bytes;       /* bytes of `names` charged to the session cap */
    xsp_strtab names;           /* this thread's interned names */
    xsp_name_slot ncache[XSP_NAME_CACHE]; /* name pointer cache, cleared with names */
    xsp_open stack[XSP_MAX_DEPTH]; /* open spans, innermost last */
    struct xsp_tbuf *next;      /* registry link; written once before publication */
} xsp_tbuf;

/* Local index -> record. idx must be < the buffer's record count. Cannot fail. */
static inline xsp_rec *xsp_tbuf_rec(const xsp_tbuf *tb, uint32_t idx)
{
    return &tb->chunks[idx / XSP_CHUNK_RECS][idx % XSP_CHUNK_RECS];
}

/* Number of records in the buffer. Cannot fail. */
static inline uint32_t xsp_tbuf_count(const xsp_tbuf *tb)
{
    return tb->n_chunks ? (tb->n_chunks - 1) * XSP_CHUNK_RECS + tb->slot : 0;
}

/* merge.c: builds the merged trace from n buffers of one session; start and stop are the
 * session's clock readings (ticks), map converts ticks to ns.  Returns a new trace or NULL on
 * allocation failure.  Buffers are read, and their open spans ended at stop. */
xsp_trace *xsp_merge(xsp_tbuf *const *bufs, uint32_t n, uint64_t start, uint64_t stop,
                     const xsp_clock_map *map, int adopt_roots, const xsp_merge_extra *extra);

#endif
