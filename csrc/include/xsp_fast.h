/*
 * xsp_fast.h: the op entry's and exit's fast paths, inline in the torch shim (x86-64 Linux).
 *
 * The core's op entry and exit (recorder.h: xsp_rec_op_start, xsp_rec_end_l) are reached from
 * the shim's RecordFunction callbacks through the function table of xsp_api.h: an indirect
 * tail call per callback, and the argument moves that the call's fixed register order costs.
 * With this header the shim runs the same fast paths itself, on the core's per-thread buffer,
 * and calls the core only for what they do not take (the slow paths: a thread's first event,
 * a full chunk, a name not yet in the cache, a session that is stopping, ...).  The fast
 * paths here and in csrc/core/recorder.c (fast_enter, begin_l_fast, xsp_rec_end_l) are the
 * same protocol and must stay so; recorder.c asserts the layout below against its xsp_tbuf.
 *
 * The protocol (recorder.c, "The fast paths' limit" and fast_enter, has the full argument):
 *   - the thread's buffer comes from the core's thread-local pointer, at the thread-pointer
 *     offset that xsp_core_api.fast_tls gives (the core's TLS is initial-exec, so the offset
 *     is the same in every thread); a thread without a buffer points at one whose limit is
 *     NULL, so its first event takes the slow path, which makes one;
 *   - the busy flag is the write pointer's low bit: one increment on entry, cleared by the add
 *     past the event on the way out; stop waits for it to clear before it reads the buffer;
 *   - the fast path runs only while the (odd) write pointer is below the buffer's limit, which
 *     the core sets only when every condition of the fast paths holds (session, names epoch,
 *     chunk room, TSC clock, no hooks, ...) and clears from any thread, before it waits;
 *   - a begin is 32 bytes (w0 TSC, w1 key with the tag byte on top, w2 a0, w3 name id | a1 <<
 *     32) and an end 16 (w0 TSC, w1 key): csrc/core/tbuf.h.
 * Nothing here allocates, locks, throws or calls anything.
 */
#ifndef XSP_FAST_H
#define XSP_FAST_H

#include <stdint.h>
#include <string.h>

#define XSP_FAST_NAME_SLOTS 256u   /* the core's XSP_NAME_CACHE */

/* A slot of the core's name cache (tbuf.h, xsp_name_slot): key is the name's bare address
 * when a stable name was checked at the buffer's names epoch, else something a bare address
 * never equals. */
typedef struct xsp_fast_slot {
    uint64_t key;
    uint32_t id;           /* the name's id */
    uint32_t pad;
} xsp_fast_slot;

/* The first bytes of the core's xsp_tbuf, as the fast paths use them (the core's own fields
 * between flimit and the name cache are not touched here). */
typedef struct xsp_fast_buf {
    uint8_t *wp;           /* next free byte of the current chunk; odd while inside a fast path */
    uint8_t *flimit;       /* the fast paths run while wp (odd) < flimit; NULL: never */
    uint8_t core[32];      /* the core's */
    xsp_fast_slot slots[XSP_FAST_NAME_SLOTS];
} xsp_fast_buf;

#if defined(__x86_64__) && defined(__linux__)
#define XSP_FAST_INLINE 1

/* This thread's buffer: the pointer at offset tls from the thread pointer (%fs). */
static inline __attribute__((always_inline)) xsp_fast_buf *xsp_fast_buf_of(intptr_t tls)
{
    xsp_fast_buf *b;
    __asm__ __volatile__("movq %%fs:(%1), %0" : "=r"(b) : "r"(tls));
    return b;
}

/* Enters a fast path on b: 1 with the busy bit set, or 0 (not busy) when its limit says no. */
static inline __attribute__((always_inline)) int xsp_fast_enter(xsp_fast_buf *b)
{
    __asm__ __volatile__("incq %0" : "+m"(b->wp));
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    __asm__ goto("cmpq %1, %0\n\tjae %l[slow]"
                 : : "r"(b->wp), "m"(b->flimit) : "cc" : slow);
    return 1;
slow:
    __asm__ __volatile__("decq %0" : "+m"(b->wp));
    return 0;
}

/* Leaves a fast path: the write pointer past the event of n bytes that began at b->wp - 1,
 * clearing the busy bit with the same add; the event's stores come first. */
static inline __attribute__((always_inline)) void xsp_fast_leave(xsp_fast_buf *b, uint32_t n)
{
    __atomic_signal_fence(__ATOMIC_RELEASE);
    b->wp += n - 1;
}

static inline __attribute__((always_inline)) void xsp_fast_tsc(uint8_t *p)
{
    uint32_t lo, hi;
    __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
    memcpy(p, &lo, 4);
    memcpy(p + 4, &hi, 4);
}

/* The op entry's fast path (the core's begin_l_fast): a level-L begin of key with tag (the
 * begin's tag byte, XSP_OP_TAG | kind), a0, a1 and the NUL-terminated name, whose address is
 * bare only for a stable name.  1 when written; 0 when the caller must take the core's op entry
 * (which tries again and takes its slow path). */
static inline __attribute__((always_inline)) int xsp_fast_begin(xsp_fast_buf *b, uint64_t key,
                                                                uint32_t tag, int64_t a0,
                                                                int64_t a1, const char *name)
{
    if (!xsp_fast_enter(b))
        return 0;
    uintptr_t p = (uintptr_t)name;
    const xsp_fast_slot *slot = (const xsp_fast_slot *)(const void *)(
        (const char *)b->slots + ((p ^ (p >> 8)) & ((XSP_FAST_NAME_SLOTS - 1) << 4)));
    if (__builtin_expect(slot->key != p, 0)) {
        __asm__ __volatile__("decq %0" : "+m"(b->wp));
        return 0;
    }
    uint8_t *e = b->wp - 1;
    uint8_t t = (uint8_t)tag;
    uint32_t nid = slot->id, a1_32 = (uint32_t)a1;
    memcpy(e + 8, &key, 8);
    e[15] = t;
    memcpy(e + 16, &a0, 8);
    memcpy(e + 24, &nid, 4);
    __asm__("" : : : "memory");   /* two 4-byte stores, not one joined in a vector register */
    memcpy(e + 28, &a1_32, 4);
    xsp_fast_tsc(e);              /* last: the span starts after the bookkeeping */
    xsp_fast_leave(b, 32);
    return 1;
}

/* The op exit's fast path (the core's xsp_rec_end_l): an end of key (below 2^56) at the TSC
 * read first.  1 when written; 0 when the caller must call the core's op exit. */
static inline __attribute__((always_inline)) int xsp_fast_end(xsp_fast_buf *b, uint64_t key)
{
    uint32_t lo, hi;
    __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
    if (!xsp_fast_enter(b))
        return 0;
    uint8_t *e = b->wp - 1;
    memcpy(e, &lo, 4);
    memcpy(e + 4, &hi, 4);
    memcpy(e + 8, &key, 8);
    xsp_fast_leave(b, 16);
    return 1;
}
#endif

#endif
