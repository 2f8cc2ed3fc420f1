/*
 * recorder.h: the recording session and the hot path that every CPU-side recorder calls.
 *
 * One session at a time per process.  Each thread that records gets its own buffer (tbuf.h):
 * an append-only log of begin and end events, touched only by that thread, so a begin or end
 * takes no lock and, once the thread's first chunk and names exist, allocates nothing.  The
 * hot path only appends; at stop the log is replayed (replay.c) into spans with parents.
 *
 * Begin/end pairs are matched by a caller-chosen key (the RecordFunction's address for ops, a
 * token for Python-recorded spans; only the low 56 bits count): an end closes the innermost
 * open span with its key; spans still open above it are closed at the same time and flagged
 * XSP_FLAG_FORCED_END (except where Python function spans, kind python, cross: see
 * replay.c); an end whose key is not open (an op that started before the session) is
 * counted, not recorded.
 *
 * Memory is capped: the log lives in chunks reserved against config.max_bytes; once the cap
 * is reached, further spans are counted in "lost.cap" and the trace says so (the ends of spans
 * begun before that still find room, in small chunks past the cap).  Nesting deeper than
 * XSP_MAX_DEPTH is counted in "lost.depth".
 *
 * Stopping: xsp_rec_stop() flips the global generation so that every later begin/end is a
 * no-op, waits for any thread inside a begin/end to leave it (a per-thread busy flag, Dekker
 * style, so the hot path needs no lock), then replays and merges all buffers into one trace.
 */
#ifndef XSP_RECORDER_H
#define XSP_RECORDER_H

#include <stddef.h>
#include <stdint.h>

#include "clock.h"
#include "include/xsp_api.h"
#include "trace.h"

#define XSP_MAX_DEPTH 1024          /* deepest nesting recorded per thread */
#ifndef XSP_NAME_NUL
#define XSP_NAME_NUL ((size_t)-1)   /* name_len meaning: the name is NUL-terminated */
#endif

typedef struct xsp_config {
    uint64_t max_bytes;   /* cap on recording memory (records + names); 0 = default 1 GiB */
    uint64_t pool_bytes;  /* record memory reserved at start, 0 = default min(4 MiB, cap) */
    int      adopt_roots; /* 1: roots on other threads become children of the region span */
    const struct xsp_span_hooks *hooks;  /* installed by start under the session lock (so no
                                          * other start can race it) and removed by stop; NULL:
                                          * those of xsp_rec_set_hooks stay as they are */
} xsp_config;

/* Starts a session.  Returns 0, or -1 with a message in err when a session is already active
 * or memory for the pool cannot be had (then nothing changed).  Thread-safe against stop. */
int xsp_rec_start(const xsp_config *cfg, char *err, size_t errlen);

/* Returns 1 while a session is recording, else 0. Cannot fail. */
int xsp_rec_active(void);

/* Thread roles: what a recording thread is, as the torch shim tells the core once per thread
 * (the merge names the thread's track after it and ties an intra-op thread's roots to their
 * spawning op, spawn.h). */
#define XSP_ROLE_PLAIN 0u      /* any thread */
#define XSP_ROLE_INTRAOP 1u    /* a thread of PyTorch's intra-op pool (not its team's thread 0) */

/* Asked on a thread's first event, when its buffer is made (the slow path, never again for
 * that thread): returns an XSP_ROLE_* and may set *num (the thread's number in its team).  It
 * must not block, allocate or call back into the core. */
typedef uint32_t (*xsp_thread_role_fn)(uint32_t *num);

/* Sets the role function (NULL: none, every new thread is plain); threads that already have a
 * buffer keep their role.  The function must stay callable for the life of the process.
 * Thread-safe; cannot fail. */
void xsp_rec_set_thread_role_fn(xsp_thread_role_fn fn);

/* The forward thread of a backward node: given the key xsp_rec_begin_l received for a begin of
 * kind XSP_KIND_BACKWARD (the shim's: its RecordFunction's address), returns the RecordFunction
 * thread id of the thread that ran the node's forward op, which the merge pairs with the
 * forward op's own thread id and sequence number.  Called on the recording thread in the slow
 * path (a backward node's name is never stable, so its begin never takes the fast path), with
 * the RecordFunction live; it must not block, allocate or call back into the core. */
typedef int64_t (*xsp_forward_tid_fn)(uint64_t key);

/* Sets the forward-thread function (NULL: none; xsp_rec_begin_l then keeps a backward begin's
 * a1 as given).  The function must stay callable for the life of the process.  Thread-safe;
 * cannot fail. */
void xsp_rec_set_forward_tid_fn(xsp_forward_tid_fn fn);

/* Maps an external id (xsp_ext_id) to the id of its span in the trace being merged (an elided
 * span maps to its parent), or XSP_NO_PARENT. */
typedef uint32_t (*xsp_resolve_fn)(void *ctx, uint64_t ext_id);

/* A further source of spans merged at stop (the GPU): fn adds its spans to t, which holds the
 * CPU spans sorted and numbered, keeping the trace's invariants (it may re-sort and renumber),
 * using resolve(rctx, ext_id) for parents and map to convert its ticks.  Returns 0, or -1 on
 * allocation failure (the stop then fails). */
typedef struct xsp_merge_extra {
    int (*fn)(xsp_trace *t, xsp_resolve_fn resolve, void *rctx, const xsp_clock_map *map,
              void *arg);
    void *arg;   /* handed to fn */
} xsp_merge_extra;

/* Stops the active session and merges everything recorded, and the spans of extra (a further
 * source, or NULL: none), into *out (a new trace owned by the caller).  Spans still open are
 * ended at the stop time with XSP_FLAG_OPEN_AT_STOP.  Returns 0, or -1 with a message in err
 * when no session is active or merging runs out of memory (the session is stopped either way
 * and its buffers are freed). */
int xsp_rec_stop(xsp_trace **out, const xsp_merge_extra *extra, char *err, size_t errlen);

/* Testing: whether stop gives the event log back as it reads it (1, the default: each log
 * chunk is unmapped, or reused for records, as soon as the replay has read it, and each record
 * chunk as soon as the merge has emitted it, so that the trace is built in the log's memory)
 * or keeps every chunk until the trace is made (0: the same trace, with the log and the trace
 * in memory together; tests compare the two).  Takes effect at the next stop.  Thread-safe;
 * cannot fail. */
void xsp_rec_set_release(int early);

/* Hot path.  Begins a span on the calling thread.  name/name_len: the span's name (need not be
 * NUL-terminated, copied on first sight); name2: an optional second string (a module's class)
 * or NULL; key: matched by xsp_rec_end; a0, a1: kind-specific integers (ops: sequence number
 * and RecordFunction thread id; a1 is kept as an unsigned 32-bit value, and only when name2
 * is NULL).  Never fails visibly: when not recording it does nothing;
 * when out of memory or depth it counts the span as lost.  No lock; no allocation in steady
 * state; safe from any thread.  name_len may be XSP_NAME_NUL for a NUL-terminated name: a
 * name passed again at the same address is then found without hashing.  key: only its low
 * 56 bits count. */
void xsp_rec_begin(uint8_t level, uint8_t kind, const char *name, size_t name_len,
                   const char *name2, size_t name2_len, uint64_t key, int64_t a0, int64_t a1);

/* Hot path.  xsp_rec_begin(XSP_LEVEL_L, kind, name, XSP_NAME_NUL, NULL, 0, key, a0, a1): the
 * torch shim's entry for ops, with the constants folded (five arguments, all in registers).
 * key must be below 2^56 (an address is); a1 is kept as 32 bits, and replaced by what the
 * forward-thread function returns for a backward node (xsp_rec_set_forward_tid_fn, when one is
 * set); kind is an enum xsp_kind.
 * name is the address of a NUL-terminated name, as it is when the caller guarantees that its
 * bytes stay unchanged until the next xsp_rec_names_changed() (a stable name: one seen at this
 * address since then is taken without reading it, as xsp_rec_begin's XSP_NAME_STABLE), or
 * that address | XSP_NAME_UNSTABLE when it does not (the bytes are then compared at every
 * sighting).  Bit 62 is free in a user-space address on the 64-bit targets xsp builds for
 * (below 2^57 even with five-level paging; pointer tags, where used, sit in bits 56-59).
 * Same guarantees as xsp_rec_begin. */
#ifndef XSP_NAME_STABLE
#define XSP_NAME_STABLE 0x80u
#endif
#ifndef XSP_NAME_UNSTABLE
#define XSP_NAME_UNSTABLE (UINT64_C(1) << 62)
#endif
void xsp_rec_begin_l(uint32_t kind, const char *name, uint64_t key, int64_t a0, int64_t a1);

/* Hot path.  The torch shim's op entry: stores a null pointer at ret (a pointer-sized object:
 * the std::unique_ptr<at::ObserverContext> that torch's start callback returns), then
 * xsp_rec_begin_l(kind & 15, name, key, a0, a1); returns ret.  kind is an enum xsp_kind ORed
 * with XSP_OP_TAG (include/xsp_api.h): the begin's tag in the log, which the fast path then
 * stores as it comes.  With the x86-64 System V ABI, a
 * function that returns a class with a non-trivial destructor takes the address of the result
 * in the first argument register and returns it, so a start callback whose only work is this
 * call compiles to one tail call (csrc/torch/shim.cpp).  ret must be valid for a pointer-sized
 * store. */
void *xsp_rec_op_start(void *ret, uint64_t key, uint32_t kind, int64_t a0, int64_t a1,
                       const char *name);

/* Hot path.  Ends the innermost open span with this key on the calling thread, ORing flags
 * (e.g. XSP_FLAG_ELIDE, below 64) into it.  Same guarantees as xsp_rec_begin. */
void xsp_rec_end(uint64_t key, uint32_t flags);

/* Hot path.  xsp_rec_end(key, 0) for a key below 2^56: the torch shim's exit for ops. */
void xsp_rec_end_l(uint64_t key);

/* The offset from the thread pointer (%fs on x86-64 Linux) of this module's thread-local
 * pointer to the calling thread's buffer, the same in every thread (initial-exec TLS): the
 * shim's inline fast paths (include/xsp_fast.h) read the buffer there.  0 where the fast
 * paths do not exist (not x86-64 Linux).  Any thread; cannot fail. */
intptr_t xsp_rec_fast_tls(void);

/* Data events.  Appends a payload of len bytes (at most XSP_DATA_MAX) to the calling thread's
 * log, timestamped now, to be attached at stop to a span recorded on this thread:
 *   XSP_DATA_INPUTS: to the span begun just before on this thread, when that begin was recorded
 *     and nothing else was logged since (the torch shim calls it right after an op's begin);
 *     the payload is an op's inputs as inputs.h encodes them;
 *   XSP_DATA_MEM: to the innermost span open on the thread at that point (its nearest recorded
 *     ancestor when nesting was too deep); the payload is one xsp_mem_event (below).  With no
 *     span open, it is counted per device in the counters "memory.outside_spans.*".
 * A payload that cannot be written (cap, a length over XSP_DATA_MAX, an unknown sub) or not
 * attached is counted in "lost.data".  Never fails visibly; no lock; allocates only a new log
 * chunk when the current one is full (as a begin does); safe from any thread; does nothing when
 * not recording.  data may be NULL when len is 0. */
/* XSP_DATA_INPUTS, XSP_DATA_MEM, XSP_DATA_MAX and xsp_mem_event are in include/xsp_api.h,
 * which the torch shim (C++) shares. */
void xsp_rec_data(uint32_t sub, const void *data, uint32_t len);

/* Tells the recorder that stable names (XSP_NAME_STABLE, xsp_rec_begin_l) may have changed (an operator was
 * registered or deregistered): each is read again when next seen.  Thread-safe, cannot fail;
 * takes the recorder's lock for a walk over the thread buffers (never on a recording path, and
 * the lock is never held while the recorder calls out), so it may wait for a stop to finish. */
void xsp_rec_names_changed(void);

/* Optional calls made on the hot path for every span begun / ended while set: the GPU source
 * pushes the span's external id as a CUPTI external correlation id (kind CUSTOM2) so that GPU
 * work launched inside the span can be tied to it.  An external id is (buffer serial: 24 bits,
 * session generation: 8 bits, local record index: 32 bits), see xsp_ext_id; the index is that of
 * the innermost *recorded* span, or XSP_NONE when no span is recorded on the thread; the
 * generation lets the merge reject ids left on CUPTI's stacks by an earlier session. */
typedef struct xsp_span_hooks {
    void (*push)(uint64_t ext_id);   /* after a begin, before its timestamp */
    void (*pop)(void);               /* after an end's timestamp, once per push */
} xsp_span_hooks;

static inline uint64_t xsp_ext_id(uint32_t serial, uint64_t gen, uint32_t idx)
{
    /* generations are odd while recording: gen >> 1 counts sessions, 256 apart to repeat */
    return ((uint64_t)(serial & 0xFFFFFFu) << 40) | (((gen >> 1) & 0xFFu) << 32) | idx;
}

/* Installs (or with NULL removes) the span hooks.  Returns 0, or -1 while a session records
 * (nothing changed): hooks change only between sessions, so the hot path reads them without
 * synchronisation. */
int xsp_rec_set_hooks(const xsp_span_hooks *hooks);

/* Reads the recording clock in ticks (clock.h), for recorders outside the core, such as
 * CUPTI's timestamp callback. Cannot fail. */
uint64_t xsp_rec_now(void);

#endif
