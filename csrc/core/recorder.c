/*
 * recorder.c: sessions, thread buffers and the hot path (see recorder.h and tbuf.h).
 *
 * Global state:
 *   g_gen       two counters in one word, so that the fast paths check both with one compare:
 *               the low 32 bits are the session generation, odd while a session records, even
 *               otherwise, bumped by start and stop; the high 32 bits are the names epoch,
 *               bumped by xsp_rec_names_changed.  Read by every begin/end (seq_cst, paired with
 *               the thread's busy flag).  Changed only by atomic read-modify-writes, since the
 *               epoch's bump does not take g_lock.
 *   g_registry  head of the list of all thread buffers ever attached (lock-free push).
 *   g_sess      the session's pool and cap accounting.  Written by start/stop under g_lock;
 *               the hot path reads it only between busy=1 and busy=0 with g_gen odd.
 *   g_lock      serialises start and stop (never taken on the hot path).
 *
 * The stop protocol (Dekker): a recorder stores busy=1 then loads g_gen; stop stores g_gen
 * then loads each busy.  (The fast paths' busy is the write pointer's low bit and their g_gen
 * is the buffer's limit: "The fast paths' limit", below, and fast_enter.)  With a full fence on both sides at least one sees the other: either
 * the recorder sees the session ended and leaves, or stop sees busy and waits for it to clear.
 * So after stop's wait no thread touches any buffer until the next session, and stop may read
 * and free chunks without a lock.  Where membarrier(2) is available the recorder's fence is
 * only a compiler barrier and stop issues membarrier(PRIVATE_EXPEDITED), which runs a full
 * fence on every thread of the process (an xchg per begin and end saved on the hot path);
 * elsewhere both sides use seq_cst.
 *
 * The fast paths' limit: the op entry and exit (xsp_rec_begin_l, xsp_rec_end_l) check one word
 * of their own buffer, tb->flimit, where the slow paths load g_gen.  The owner sets it (in a
 * slow path, busy set: fast_update) only after enter() found the session and names epoch of
 * the buffer current, and with a store, a full fence and a second load of g_gen, taking it
 * back when g_gen moved; stop and xsp_rec_names_changed bump g_gen first and then null every
 * buffer's limit.  In the single order of those seq_cst operations either the owner's second
 * load sees the bump (and it nulls its own limit) or the nulling store comes after its store:
 * once stop or names_changed has nulled them, no limit stays set from before the bump.  Stop's
 * membarrier then plays the role it plays for g_gen in the protocol above: a fast path whose
 * busy store stop does not see loads the null limit and leaves.
 *
 * Chunks come first from a pool reserved at start (so steady-state recording does not call
 * malloc), then from mappings of their own (chunk.h: stop gives them back one by one) while
 * the cap allows; both are charged to g_sess.bytes.
 */
#include "recorder.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "chunk.h"
#include "clock.h"
#include "tbuf.h"
#include "../include/xsp_fast.h"

#define DEFAULT_CAP (1ull << 30)
#define DEFAULT_POOL (4ull << 20)
#define CHUNK_BYTES ((uint64_t)XSP_LOG_BYTES)

typedef struct rec_session {
    uint64_t gen;                /* generation while active (odd) */
    uint64_t cap;                /* max_bytes */
    int adopt_roots;             /* config.adopt_roots */
    int own_hooks;               /* 1: start installed config.hooks, stop removes them */
    uint64_t start_ticks;        /* clock at start */
    int fake;                    /* the fake clock was on at start: readings are ns */
    char *pool;                  /* pool_n chunks reserved at start; owned */
    uint32_t pool_n;             /* chunks in the pool */
    _Atomic uint32_t pool_next;  /* next unused pool chunk, at most pool_n */
    _Atomic int full;            /* sticky: the cap was reached, no more chunks this session */
    _Atomic uint64_t bytes;      /* bytes charged against cap */
} rec_session;

static _Atomic uint64_t g_gen = 0;               /* see above */
#define GEN_SESSION(w) ((uint32_t)(w))           /* g_gen's session generation */
#define GEN_EPOCH(w) ((uint32_t)((w) >> 32))     /* g_gen's names epoch */
#define GEN_EPOCH_ONE (UINT64_C(1) << 32)        /* one names epoch */
static _Atomic(xsp_tbuf *) g_registry = NULL;    /* see above */
static rec_session g_sess;                         /* protected by g_lock, see above */
static char *g_pool = NULL;                      /* the pool memory, kept between sessions;
                                                    protected by g_lock */
static uint32_t g_pool_n = 0;                    /* chunks in g_pool; protected by g_lock */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t g_key;                      /* thread-exit destructor marks tbuf dead */
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static xsp_span_hooks g_hooks = {NULL, NULL};    /* set while no session records (see
                                                    xsp_rec_set_hooks); read by the hot path */
static _Atomic uint32_t g_serial = 0;            /* next tbuf serial number */
static _Atomic(xsp_thread_role_fn) g_role_fn = NULL;  /* xsp_rec_set_thread_role_fn */
static int g_release = 1;                        /* xsp_rec_set_release; protected by g_lock */
static _Atomic(xsp_forward_tid_fn) g_fwd_fn = NULL;   /* xsp_rec_set_forward_tid_fn */
/* A thread without a buffer points at g_notb, never at NULL, so that the fast paths need no
 * null check: its limit is NULL, which no write pointer is below, so they leave it for the
 * slow path at once (it only ever sees their busy stores, from any thread: nobody waits on
 * it, and it is in no registry that stop or names_changed walk). */
static xsp_tbuf g_notb;
/* this thread's buffer (or g_notb), never freed while the thread lives.  initial-exec: one
 * load from the GOT and one %fs-relative load per begin or end, where the TLS descriptor
 * costs a call and three more instructions.  The price: the module is dlopen()ed, so glibc
 * must place all of its thread-locals (352 bytes in xsp._core on 2026-12-03: readelf -l, the
 * TLS segment) in the static TLS surplus it keeps for such modules (rtld.optional_static_tls,
 * 512 bytes by default, shared with every other module loaded so); were it used up, the
 * import would fail with "cannot allocate memory in static TLS block" (the remedy:
 * GLIBC_TUNABLES=glibc.rtld.optional_static_tls=2048, or dropping this attribute). */
static _Thread_local xsp_tbuf *tls_tb __attribute__((tls_model("initial-exec"))) = &g_notb;
static uint8_t g_nochunk[16] __attribute__((aligned(8)));   /* wp = g_nochunk + 8 > wend =
                                                    g_nochunk: "no room", so the next event
                                                    takes the slow path, which finds a chunk
                                                    (8, not 1: an odd wp is a busy one) */

/* 1 when membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) works: then the hot path needs only a
 * compiler barrier between its busy store and its generation load, and stop pays for the
 * fence on every thread at once (the asymmetric Dekker of userspace RCU).  Set before the
 * first session starts, under g_lock; read by the hot path. */
static int g_membarrier = 0;
static int g_membarrier_probed = 0;   /* protected by g_lock */

static void probe_membarrier(void)
{
    if (g_membarrier_probed)
        return;
    g_membarrier_probed = 1;
    long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    if (cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED)
        && syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0)
        g_membarrier = 1;
}

/* Stop's side of the protocol: after this, every thread's earlier busy store is visible and
 * every later generation load sees the new value. */
static void fence_all(void)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (g_membarrier && syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
        g_membarrier = 0;   /* cannot happen once registered; stay correct if it does */
}

static void on_thread_exit(void *p)
{
    /* forget it first: a later destructor that records attaches a fresh buffer (glibc runs
     * destructors again for keys set during a destructor pass), never this one, which a stop
     * may free from now on */
    tls_tb = &g_notb;
    atomic_store(&((xsp_tbuf *)p)->dead, 1);
}

/* In a forked child (a DataLoader worker, say) the parent's session must not go on
 * recording into copies of its buffers that nobody will read: the child starts with no
 * session, a fresh lock and no buffers (the copies are leaked, never touched again). */
static void on_fork_child(void)
{
    uint64_t gen = atomic_load(&g_gen);
    atomic_store(&g_gen, (gen | 1) + 1);
    pthread_mutex_init(&g_lock, NULL);
    atomic_store(&g_registry, NULL);
    tls_tb = &g_notb;
    g_sess.pool = NULL;
    g_sess.pool_n = 0;
    g_pool = NULL;                 /* the parent's; leaked in the child */
    g_pool_n = 0;
    g_hooks = (xsp_span_hooks){NULL, NULL};   /* the parent's CUPTI session is not ours */
}

static void make_key(void)
{
    pthread_key_create(&g_key, on_thread_exit);
    pthread_atfork(NULL, NULL, on_fork_child);
}

/* Slow path, once per thread: creates and publishes the thread's buffer. NULL on OOM. */
static xsp_tbuf *tbuf_attach(void)
{
    xsp_tbuf *tb = calloc(1, sizeof *tb);
    if (!tb)
        return NULL;
    if (xsp_strtab_init(&tb->names) != 0) {
        free(tb);
        return NULL;
    }
    tb->wp = g_nochunk + 8;
    tb->wend = g_nochunk;
    tb->tid = (uint64_t)syscall(SYS_gettid);
    tb->serial = atomic_fetch_add(&g_serial, 1);
    xsp_thread_role_fn role = atomic_load(&g_role_fn);
    if (role)
        tb->role = role(&tb->role_num);
    pthread_once(&g_key_once, make_key);
    pthread_setspecific(g_key, tb);
    xsp_tbuf *head = atomic_load(&g_registry);
    do {
        tb->next = head;
    } while (!atomic_compare_exchange_weak(&g_registry, &head, tb));
    tls_tb = tb;
    return tb;
}

void xsp_rec_set_thread_role_fn(xsp_thread_role_fn fn)
{
    atomic_store(&g_role_fn, fn);
}

void xsp_rec_set_forward_tid_fn(xsp_forward_tid_fn fn)
{
    atomic_store(&g_fwd_fn, fn);
}

/* Takes the fast paths away from tb until the next fast_update.  Any thread. */
static inline void fast_off(xsp_tbuf *tb)
{
    atomic_store_explicit(&tb->flimit, NULL, memory_order_relaxed);
}

/* Sets tb->flimit after any change of what the fast paths depend on (the session, the names
 * epoch, the chunk, the cap and lost spans): they skip the busy fence's seq_cst half
 * (membarrier), the hooks, the cap and lost-span checks and the reset, and read the TSC, so
 * they may run only when all of those are moot, and only on the current chunk (wend).
 * Called by the owner, busy set, with tb->gen and tb->names_epoch as enter() last found
 * g_gen.  The second load of g_gen: "The fast paths' limit", above. */
static void fast_update(xsp_tbuf *tb)
{
    if (!(g_membarrier && !g_hooks.push && !g_hooks.pop
          && atomic_load_explicit(&xsp_clock_rdtsc, memory_order_relaxed)
          && !tb->capped && !tb->ldepth && !tb->loverflow)) {
        fast_off(tb);
        return;
    }
    atomic_store(&tb->flimit, tb->wend + 2);   /* the busy wp, wend + 1 at most */
    if (atomic_load(&g_gen) != ((uint64_t)tb->names_epoch << 32 | tb->gen))
        fast_off(tb);
}

/* Called by the owner, busy set, when g_gen's names epoch is not the one its stable slots were
 * checked at: every slot compares its bytes again at its next hit. */
static void names_refresh(xsp_tbuf *tb, uint32_t epoch)
{
    for (uint32_t i = 0; i < XSP_NAME_CACHE; i++)
        if (tb->ncache[i].key != 0)
            tb->ncache[i].key |= XSP_SLOT_UNSTABLE;
    tb->names_epoch = epoch;
    fast_update(tb);
}

/* Called by the owner, busy set, when its contents belong to an older session (whose stop
 * released its chunks). */
static void tbuf_reset(xsp_tbuf *tb, uint64_t gen)
{
    tb->gen = gen;
    tb->n_log = 0;
    tb->wp = g_nochunk + 8;         /* no chunk: the first event takes the slow path */
    tb->wend = g_nochunk;
    tb->nb = 0;
    tb->capped = 0;
    tb->ldepth = 0;
    tb->loverflow = 0;
    tb->lost_cap = tb->lost_end = 0;
    tb->lost_data = 0;
    tb->hdepth = 0;
    tb->hoverflow = 0;
    xsp_strtab_clear(&tb->names);
    memset(tb->ncache, 0, sizeof tb->ncache);
    tb->names_bytes = xsp_strtab_bytes(&tb->names);   /* only growth is charged to the cap */
    fast_update(tb);
}

/* Charges n bytes to the session cap. Returns 1 if within the cap, else 0 (nothing charged). */
static int charge(uint64_t n)
{
    uint64_t used = atomic_fetch_add_explicit(&g_sess.bytes, n, memory_order_relaxed);
    if (used + n <= g_sess.cap)
        return 1;
    atomic_fetch_sub_explicit(&g_sess.bytes, n, memory_order_relaxed);
    return 0;
}

/* Appends chunk (bytes long) to tb's log as the current chunk. 0, or -1 on OOM. */
static int log_push(xsp_tbuf *tb, uint8_t *chunk, uint32_t bytes)
{
    if (tb->n_log == tb->cap_log) {
        uint32_t cap = tb->cap_log ? tb->cap_log * 2 : 16;
        uint8_t **c = realloc(tb->log, cap * sizeof *c);
        if (!c)
            return -1;
        tb->log = c;
        uint32_t *u = realloc(tb->log_used, cap * sizeof *u);
        if (!u)
            return -1;
        tb->log_used = u;
        u = realloc(tb->log_size, cap * sizeof *u);
        if (!u)
            return -1;
        tb->log_size = u;
        tb->cap_log = cap;
    }
    if (tb->n_log)
        tb->log_used[tb->n_log - 1] = (uint32_t)(tb->wp - tb->log[tb->n_log - 1]);
    tb->log_size[tb->n_log] = bytes;
    tb->log[tb->n_log++] = chunk;
    tb->wp = chunk;
    tb->wend = chunk + bytes - 32;
    fast_update(tb);
    return 0;
}

/* Slow path: a new log chunk for tb, from the pool or charged to the cap. 0, or -1 when the
 * cap or memory is exhausted. */
static int tbuf_new_chunk(xsp_tbuf *tb)
{
    if (atomic_load_explicit(&g_sess.full, memory_order_relaxed))
        return -1;                       /* at the cap: no atomics per lost span */
    uint8_t *chunk = NULL;
    uint32_t i = atomic_load_explicit(&g_sess.pool_next, memory_order_relaxed);
    while (i < g_sess.pool_n   /* saturating: the counter never runs past pool_n */
           && !atomic_compare_exchange_weak_explicit(&g_sess.pool_next, &i, i + 1,
                                                     memory_order_relaxed, memory_order_relaxed))
        ;
    int pooled = i < g_sess.pool_n;
    if (pooled) {
        chunk = (uint8_t *)g_sess.pool + (uint64_t)i * CHUNK_BYTES;
    } else if (charge(CHUNK_BYTES)) {
        chunk = xsp_chunk_new();
        if (!chunk)
            atomic_fetch_sub_explicit(&g_sess.bytes, CHUNK_BYTES, memory_order_relaxed);
    }
    if (chunk && log_push(tb, chunk, (uint32_t)CHUNK_BYTES) != 0) {
        if (!pooled) {
            xsp_chunk_free(chunk);
            atomic_fetch_sub_explicit(&g_sess.bytes, CHUNK_BYTES, memory_order_relaxed);
        }
        chunk = NULL;     /* a pool chunk is simply not used again this session */
    }
    if (!chunk) {
        atomic_store_explicit(&g_sess.full, 1, memory_order_relaxed);
        return -1;
    }
    return 0;
}

/* Past the cap, the ends of spans begun before it still need a place: small chunks outside
 * the cap (ends of lost spans are not written, so these hold at most the ends of the spans
 * open when the cap was hit, and of spans begun before the session). 0, or -1 on OOM. */
#define END_RESERVE_BYTES 4096u
static int tbuf_end_chunk(xsp_tbuf *tb)
{
    uint8_t *chunk = malloc(END_RESERVE_BYTES);
    if (chunk && log_push(tb, chunk, END_RESERVE_BYTES) == 0)
        return 0;
    free(chunk);
    return -1;
}

/* Interns on the owner's table, charging growth to the cap. UINT32_MAX if lost. */
static uint32_t tbuf_intern(xsp_tbuf *tb, const char *s, size_t len)
{
    uint32_t n = tb->names.n;
    uint32_t id = xsp_strtab_intern(&tb->names, s, len);
    if (__builtin_expect(tb->names.n != n, 0)) {
        uint64_t bytes = xsp_strtab_bytes(&tb->names);
        if (bytes > tb->names_bytes) {
            if (!charge(bytes - tb->names_bytes))
                return UINT32_MAX;   /* counted below; the copy stays, harmlessly */
            tb->names_bytes = bytes;
        }
    }
    return id;
}

/* The cache slot of a NUL-terminated name's address: index ((p >> 4) ^ (p >> 12)) mod
 * XSP_NAME_CACHE, computed as its byte offset (p ^ (p >> 8)) & 0xFF0, which is the same number
 * times the slot's 16 bytes in three instructions instead of six. */
static inline xsp_name_slot *name_slot(xsp_tbuf *tb, const char *s)
{
    uintptr_t p = (uintptr_t)s;
    return (xsp_name_slot *)(void *)((char *)tb->ncache
                                     + ((p ^ (p >> 8)) & ((XSP_NAME_CACHE - 1) << 4)));
}
_Static_assert(sizeof(xsp_name_slot) == 16, "name_slot's offset assumes 16-byte slots");

/* A cache hit: the slot holds this address (stable or not) and the bytes there still are the
 * interned name. */
static inline int name_hit(const xsp_tbuf *tb, const xsp_name_slot *slot, const char *s)
{
    return (slot->key | XSP_SLOT_UNSTABLE) == ((uintptr_t)s | XSP_SLOT_UNSTABLE)
           && strncmp(s, tb->names.arena + tb->names.offs[slot->id],
                      (size_t)tb->names.lens[slot->id] + 1) == 0;
}

/* Interns a name on the owner's table, charging growth to the cap. UINT32_MAX if lost.
 * len == XSP_NAME_NUL: s is NUL-terminated and goes through the pointer cache first; stable:
 * the caller passed XSP_NAME_STABLE, so the slot may skip the comparison while the names epoch
 * stays the buffer's (enter() read it before these bytes are read: a change after that makes
 * names_refresh demote the slot before the fast path can take it). */
static uint32_t tbuf_name(xsp_tbuf *tb, const char *s, size_t len, int stable)
{
    xsp_name_slot *slot = NULL;
    uintptr_t key = (uintptr_t)s | (stable ? 0 : XSP_SLOT_UNSTABLE);
    if (len == XSP_NAME_NUL) {
        slot = name_slot(tb, s);
        if (name_hit(tb, slot, s)) {
            slot->key = key;
            return slot->id;
        }
        len = strlen(s);
    }
    uint32_t id = tbuf_intern(tb, s, len);
    if (slot && id != UINT32_MAX)
        *slot = (xsp_name_slot){.key = key, .id = id};
    return id;
}

/* Enters the slow path: returns the thread's buffer with busy set, or NULL when not recording
 * (busy is then clear). */
static xsp_tbuf *enter(void)
{
    xsp_tbuf *tb = tls_tb;
    if (__builtin_expect(tb == &g_notb, 0)) {
        if (!(atomic_load_explicit(&g_gen, memory_order_relaxed) & 1))
            return NULL;
        tb = tbuf_attach();
        if (!tb)
            return NULL;
    }
    uint64_t w;
    if (__builtin_expect(g_membarrier, 1)) {
        /* stop's membarrier() turns this compiler barrier into a full fence when it matters */
        atomic_store_explicit(&tb->busy, 1, memory_order_relaxed);
        atomic_signal_fence(memory_order_seq_cst);
        /* acquire: the session state start published before the generation is visible */
        w = atomic_load_explicit(&g_gen, memory_order_acquire);
    } else {
        atomic_store_explicit(&tb->busy, 1, memory_order_seq_cst);
        w = atomic_load_explicit(&g_gen, memory_order_seq_cst);
    }
    if (!(w & 1)) {
        atomic_store_explicit(&tb->busy, 0, memory_order_release);
        return NULL;
    }
    if (__builtin_expect(tb->gen != GEN_SESSION(w), 0))
        tbuf_reset(tb, GEN_SESSION(w));
    if (__builtin_expect(tb->names_epoch != GEN_EPOCH(w), 0))
        names_refresh(tb, GEN_EPOCH(w));   /* before any name's bytes are read */
    return tb;
}

/* Stop's read of a fast path's busy bit (fast_enter): 1 while the owner is inside one.  The
 * owner writes the word in place (no C11 atomic: an asm increment and a plain add), so it is
 * read with GCC's atomic builtin, an aligned 8-byte load; acquire, as the busy flag's load, so
 * that what the owner stored before the add that cleared the bit is visible after it. */
static inline int stop_busy_wp(xsp_tbuf *tb)
{
    return (int)((uintptr_t)__atomic_load_n(&tb->wp, __ATOMIC_ACQUIRE) & 1u);
}

static inline void leave(xsp_tbuf *tb)
{
    atomic_store_explicit(&tb->busy, 0, memory_order_release);
}

static inline uint64_t begin_tag(uint8_t level, uint8_t kind)
{
    return (uint64_t)(XSP_EV_BEGIN | ((level & 3u) << 4) | (kind & 15u)) << 56;
}

/* Writes a begin event at p (room checked). */
static inline void put_begin(uint8_t *p, uint64_t key_tag, int64_t a0, uint64_t w3,
                             uint64_t ticks)
{
    uint64_t *w = (uint64_t *)(void *)p;
    w[0] = ticks;
    w[1] = key_tag;
    w[2] = (uint64_t)a0;
    w[3] = w3;
}

/* Writes an end event at p (room checked); flags below 64. */
static inline void put_end(uint8_t *p, uint64_t key, uint32_t flags, uint64_t ticks)
{
    uint64_t *w = (uint64_t *)(void *)p;
    w[0] = ticks;
    w[1] = key | (uint64_t)(XSP_EV_END | (flags & 0x3Fu)) << 56;
}

#if defined(__x86_64__)
/* The TSC as rdtsc gives it: two 32-bit halves. */
typedef struct tsc_halves {
    uint32_t lo, hi;
} tsc_halves;

static inline __attribute__((always_inline)) tsc_halves read_tsc(void)
{
    tsc_halves t;
    __asm__ __volatile__("rdtsc" : "=a"(t.lo), "=d"(t.hi));
    return t;
}

/* Stores a TSC reading at p as its two halves (little-endian: the 64-bit count), which saves
 * the shift and the or that join them. */
static inline __attribute__((always_inline)) void put_tsc(uint8_t *p, tsc_halves t)
{
    memcpy(p, &t.lo, 4);
    memcpy(p + 4, &t.hi, 4);
}

/* The fast path's level-L begin at p (room checked), as put_begin writes it, in fewer
 * instructions: the tag as a byte over the top byte of the key (below 2^56, so zero there),
 * kind (an enum xsp_kind, below 16) ORed in unmasked, w3 as its two halves, and the TSC as
 * its halves, last, so that the span starts after the bookkeeping. */
static inline __attribute__((always_inline)) void put_begin_l(uint8_t *p, uint64_t key,
                                                             uint32_t kind, int64_t a0,
                                                             uint32_t nid, int64_t a1)
{
    uint8_t tag = (uint8_t)kind;   /* with XSP_OP_TAG: the caller's */
    uint32_t a1_32 = (uint32_t)a1;
    memcpy(p + 8, &key, 8);
    p[15] = tag;
    memcpy(p + 16, &a0, 8);
    memcpy(p + 24, &nid, 4);
    /* two stores where one would need a shift and an or: the barrier keeps GCC from joining
     * them in a vector register */
    __asm__("" : : : "memory");
    memcpy(p + 28, &a1_32, 4);
    put_tsc(p, read_tsc());
}
#endif

/* The fast paths' entry: the busy handshake of enter(), membarrier flavour (the limit is NULL
 * without membarrier), with the buffer's own limit where enter() loads g_gen: the thread's
 * buffer, busy, if the fast paths may run on it (it belongs to this session, its stable name
 * slots were checked at the current names epoch: fast_update) and its chunk has room for any
 * event; else NULL, not busy (the caller takes its slow path).
 *
 * The fast paths' busy flag is the write pointer's low bit (events are 8-byte aligned, so it
 * is clear otherwise): the entry sets it with one increment, the exit clears it with the bump
 * past the event (fast_leave), one instruction where a flag of its own takes two stores.  The
 * write pointer is then odd: the event starts at tb->wp - 1.  The increment is an asm
 * statement, as the decrement of the way out: the owner is the only writer, and stop reads
 * the word (stop_wait) with a relaxed atomic load, which on x86-64 is the same aligned load. */
static inline __attribute__((always_inline)) xsp_tbuf *fast_enter(void)
{
    xsp_tbuf *tb = tls_tb;   /* g_notb when the thread has no buffer: limit NULL */
#if defined(__x86_64__)
    __asm__ __volatile__("incq %0" : "+m"(tb->wp));
    atomic_signal_fence(memory_order_seq_cst);
    /* tb->wp < tb->flimit, the limit read as a relaxed atomic load is on x86-64 (one aligned
     * 8-byte load), but as the compare's memory operand: GCC loads an atomic into a register
     * first (one instruction more on each fast path) */
    __asm__ goto("cmpq %1, %0\n\tjae %l[slow]"
                 : : "r"(tb->wp), "m"(*(uint8_t *const *)&tb->flimit) : "cc" : slow);
    return tb;
slow:
    __asm__ __volatile__("decq %0" : "+m"(tb->wp));
    return NULL;
#else
    (void)tb;
    return NULL;             /* no fast paths: the limit is only ever set with the TSC clock */
#endif
}

/* The fast paths' exit: the write pointer past the event of n bytes (a multiple of 8) that
 * began at tb->wp - 1, its busy bit cleared by the same add; the event's stores come first. */
static inline __attribute__((always_inline)) void fast_leave(xsp_tbuf *tb, uint32_t n)
{
    atomic_signal_fence(memory_order_release);
    tb->wp += n - 1;
}

/* G sessions: the hook stack's side of a begin whose rank is ord (XSP_NONE: not written). */
static void hook_begin(xsp_tbuf *tb, uint64_t key, uint32_t ord)
{
    if (!tb->hstack) {
        tb->hstack = calloc(XSP_MAX_DEPTH, sizeof *tb->hstack);
        if (!tb->hstack)
            return;                          /* no pushes: GPU work lands higher up */
    }
    if (tb->hdepth >= XSP_MAX_DEPTH) {
        tb->hoverflow++;                     /* as the replay: past the limit, not recorded */
        return;
    }
    xsp_hook_open *e = &tb->hstack[tb->hdepth];
    if (ord == XSP_NONE)                     /* lost: its nearest recorded ancestor */
        ord = tb->hdepth ? e[-1].ord : XSP_NONE;
    tb->hdepth++;
    e->key = key;
    e->ord = ord;
    e->pushed = 0;
    if (g_hooks.push) {
        g_hooks.push(xsp_ext_id(tb->serial, tb->gen, ord));
        e->pushed = 1;
    }
}

/* G sessions: the hook stack's side of an end (the replay's matching rule). */
static void hook_end(xsp_tbuf *tb, uint64_t key)
{
    if (!tb->hstack)
        return;
    uint32_t d = tb->hdepth;
    while (d > 0 && tb->hstack[d - 1].key != key)
        d--;
    if (d == 0) {
        if (tb->hoverflow)
            tb->hoverflow--;
        return;
    }
    tb->hoverflow = 0;
    for (uint32_t i = tb->hdepth; i >= d; i--)
        if (tb->hstack[i - 1].pushed && g_hooks.pop)
            g_hooks.pop();
    tb->hdepth = d - 1;
}

/* A begin that cannot be recorded (cap): counted, and its key kept so that its end, and only
 * its end, is skipped too. */
static void lose_begin(xsp_tbuf *tb, uint64_t key)
{
    tb->lost_cap++;
    if (!tb->lstack)
        tb->lstack = malloc(XSP_MAX_DEPTH * sizeof *tb->lstack);
    if (tb->lstack && tb->ldepth < XSP_MAX_DEPTH)
        tb->lstack[tb->ldepth++] = key;
    else
        tb->loverflow++;          /* as past the depth limit: the next unknown end is its */
    fast_off(tb);
}

/* An end while lost spans are open: 1 if it is the end of one (then it is not written; lost
 * spans above it end with it), 0 if it must be written. */
static int lost_end_of(xsp_tbuf *tb, uint64_t key)
{
    uint32_t d = tb->ldepth;
    while (d > 0 && tb->lstack[d - 1] != key)
        d--;
    int lost = 1;
    if (d > 0) {
        tb->ldepth = d - 1;
        tb->loverflow = 0;
    } else if (tb->loverflow) {
        tb->loverflow--;
    } else {
        lost = 0;
    }
    if (!tb->ldepth && !tb->loverflow)
        fast_update(tb);
    return lost;
}

/* The general begin, and the op entry's slow path: everything the fast path leaves out (the
 * reset, a new chunk, the cap, a name's first sighting or the comparison of its bytes, the GPU
 * hooks, the fake clock). */
void xsp_rec_begin(uint8_t level, uint8_t kind, const char *name, size_t name_len,
                   const char *name2, size_t name2_len, uint64_t key, int64_t a0, int64_t a1)
{
    xsp_tbuf *tb = enter();
    if (!tb)
        return;
    key &= XSP_EV_KEY_MASK;
    uint32_t ord = XSP_NONE;
    if (!tb->capped && tb->wp > tb->wend && tbuf_new_chunk(tb) != 0)
        tb->capped = 1;
    uint32_t nid = 0, nid2 = 0;
    int stable = (kind & XSP_NAME_STABLE) != 0;
    kind &= (uint8_t)~XSP_NAME_STABLE;
    int lost = tb->capped;
    if (!lost) {
        nid = tbuf_name(tb, name, name_len, stable);
        nid2 = name2 ? tbuf_name(tb, name2, name2_len, 0) : 0;
        lost = nid == UINT32_MAX || nid2 == UINT32_MAX;   /* a new name past the cap */
    }
    if (tb->capped)
        fast_off(tb);
    if (lost) {
        lose_begin(tb, key);
    } else {
        uint64_t w3 = nid | (uint64_t)(name2 ? nid2 : (uint32_t)a1) << 32;
        uint64_t tag = begin_tag(level, kind) | (name2 ? (uint64_t)XSP_EV_NAME2 << 56 : 0);
        uint8_t *p = tb->wp;
        tb->wp = p + 32;
        ord = tb->nb++;
        if (__builtin_expect(g_hooks.push != NULL, 0))
            hook_begin(tb, key, ord);        /* before the timestamp: outside the span */
        put_begin(p, key | tag, a0, w3, xsp_clock_ticks());
        leave(tb);
        return;
    }
    if (__builtin_expect(g_hooks.push != NULL, 0))
        hook_begin(tb, key, XSP_NONE);
    leave(tb);
}

/* The op entry's slow path, with the op entry's five register arguments so that the fast path
 * reaches it by a tail call and needs no stack frame. */
static __attribute__((noinline)) void begin_l_slow(uint32_t kind, const char *name, uint64_t key,
                                                   int64_t a0, int64_t a1)
{
    uintptr_t p = (uintptr_t)name;
    uint8_t k = (uint8_t)((kind & 15u) | (p & XSP_NAME_UNSTABLE ? 0 : XSP_NAME_STABLE));
    if ((kind & 15u) == XSP_KIND_BACKWARD) {
        /* the op entry passes every span's own thread id, which saves it a branch per op */
        xsp_forward_tid_fn fwd = atomic_load_explicit(&g_fwd_fn, memory_order_acquire);
        if (fwd)
            a1 = fwd(key);
    }
    xsp_rec_begin(XSP_LEVEL_L, k, (const char *)(p & ~(uintptr_t)XSP_NAME_UNSTABLE), XSP_NAME_NUL,
                  NULL, 0, key, a0, a1);
}

/* The op entry's fast path (x86-64, the TSC as clock): a buffer reset for this session with
 * room for the event, and a stable name found at its address in the pointer cache at the
 * current epoch; then a begin is six stores and an rdtsc.  1 when it recorded the begin, 0 when
 * the caller must take the slow path. */
static inline __attribute__((always_inline)) int begin_l_fast(uint32_t kind, const char *name,
                                                             uint64_t key, int64_t a0, int64_t a1)
{
    /* kind | XSP_OP_TAG: the tag of a level-L begin (the shim passes it so; an or otherwise) */
#if defined(__x86_64__)
    xsp_tbuf *tb = fast_enter();
    if (__builtin_expect(tb != NULL, 1)) {
        /* the slot of the bare address: XSP_NAME_UNSTABLE is above the hash's bits */
        const xsp_name_slot *slot = name_slot(tb, name);
        /* both the caller and the slot's filler vouch for the name (a slot's key is the bare
         * address only if a stable name filled it, at the names epoch that fast_enter found
         * unchanged, and the caller passes the bare address only for a stable name): a string
         * the dispatcher frees just after its deregistration listener ran is never taken for
         * a user scope's */
        if (__builtin_expect(slot->key == (uintptr_t)name, 1)) {
            put_begin_l(tb->wp - 1, key, kind, a0, slot->id, a1);
            fast_leave(tb, 32);
            return 1;
        }
        __asm__ __volatile__("decq %0" : "+m"(tb->wp));   /* not busy: the slow path */
    }
#else
    (void)kind, (void)name, (void)key, (void)a0, (void)a1;
#endif
    return 0;
}

/* The op entry for C callers: the fast path, and the function needs no stack frame
 * (everything else is a tail call). */
void xsp_rec_begin_l(uint32_t kind, const char *name, uint64_t key, int64_t a0, int64_t a1)
{
    if (begin_l_fast(kind | XSP_OP_TAG, name, key, a0, a1))
        return;
    begin_l_slow(kind, name, key, a0, a1);
}

/* The shim's op entry's slow path, with the op entry's six register arguments so that the fast
 * path reaches it by a tail call. */
static __attribute__((noinline)) void *op_start_slow(void *ret, uint64_t key, uint32_t kind,
                                                     int64_t a0, int64_t a1, const char *name)
{
    begin_l_slow(kind, name, key, a0, a1);
    return ret;
}

/* The shim's op entry (recorder.h): the null ObserverContext pointer stored first, then as
 * xsp_rec_begin_l; ret is returned in the register a function returning a class through a
 * hidden pointer returns it in, which lets the shim's start callback be one tail call.  The
 * parameters' order is the one of the 120 for which GCC's fast path has the fewest moves (30
 * instructions; key second, where the callback receives the RecordFunction's address). */
_Static_assert(XSP_OP_TAG == (XSP_EV_BEGIN | XSP_LEVEL_L << 4), "kind carries a begin's tag");
void *xsp_rec_op_start(void *ret, uint64_t key, uint32_t kind, int64_t a0, int64_t a1,
                       const char *name)
{
    void *null = NULL;
    memcpy(ret, &null, sizeof null);
    if (begin_l_fast(kind, name, key, a0, a1))
        return ret;
    return op_start_slow(ret, key, kind, a0, a1, name);
}

/* The slow path of an end. */
static __attribute__((noinline)) void end_slow(uint64_t key, uint32_t flags, uint64_t now)
{
    xsp_tbuf *tb = enter();
    if (!tb)
        return;
    key &= XSP_EV_KEY_MASK;
    if (__builtin_expect(g_hooks.pop != NULL, 0))
        hook_end(tb, key);
    if ((tb->ldepth || tb->loverflow) && lost_end_of(tb, key)) {
        leave(tb);                           /* the end of a span lost to the cap */
        return;
    }
    if (tb->wp > tb->wend && (tb->capped || tbuf_new_chunk(tb) != 0)) {
        if (!tb->capped) {
            tb->capped = 1;
            fast_off(tb);
        }
        if (tbuf_end_chunk(tb) != 0) {
            tb->lost_end++;
            leave(tb);
            return;
        }
    }
    put_end(tb->wp, key, flags, now);
    tb->wp += 16;
    leave(tb);
}

void xsp_rec_end(uint64_t key, uint32_t flags)
{
    uint64_t now = xsp_clock_ticks();   /* first, so the bookkeeping below is outside the span */
    xsp_tbuf *tb = fast_enter();
    if (__builtin_expect(tb != NULL, 1)) {
        put_end(tb->wp - 1, key & XSP_EV_KEY_MASK, flags, now);
        fast_leave(tb, 16);
        return;
    }
    end_slow(key, flags, now);
}

/* The op exit's slow path; tsc: the TSC read on entry, the end time if the TSC is the clock. */
static __attribute__((noinline)) void end_l_slow(uint64_t key, uint64_t tsc)
{
    uint64_t now = atomic_load_explicit(&xsp_clock_rdtsc, memory_order_relaxed)
                       ? tsc : xsp_clock_ticks();
    end_slow(key, 0, now);
}

/* The shim's copy of the fast paths (include/xsp_fast.h) works on the same buffer: its view of
 * the buffer's first bytes must be this one. */
_Static_assert(offsetof(xsp_tbuf, wp) == offsetof(xsp_fast_buf, wp)
                   && offsetof(xsp_tbuf, flimit) == offsetof(xsp_fast_buf, flimit)
                   && offsetof(xsp_tbuf, ncache) == offsetof(xsp_fast_buf, slots)
                   && XSP_NAME_CACHE == XSP_FAST_NAME_SLOTS
                   && sizeof(xsp_name_slot) == sizeof(xsp_fast_slot)
                   && offsetof(xsp_name_slot, key) == offsetof(xsp_fast_slot, key)
                   && offsetof(xsp_name_slot, id) == offsetof(xsp_fast_slot, id),
               "include/xsp_fast.h's view of a thread's buffer is xsp_tbuf's");

intptr_t xsp_rec_fast_tls(void)
{
#if defined(__x86_64__) && defined(__linux__)
    uintptr_t tp;
    __asm__("movq %%fs:0, %0" : "=r"(tp));   /* the thread pointer: the TCB's self pointer */
    return (intptr_t)((uintptr_t)&tls_tb - tp);
#else
    return 0;
#endif
}

/* The op exit.  The fast path (as the op entry's): two stores after an rdtsc, no frame. */
_Static_assert(XSP_EV_END == 0, "the op exit stores the key as its end's second word");
void xsp_rec_end_l(uint64_t key)
{
#if defined(__x86_64__)
    tsc_halves t = read_tsc();   /* first, so the bookkeeping below is outside the span */
    xsp_tbuf *tb = fast_enter();
    if (__builtin_expect(tb != NULL, 1)) {
        uint8_t *p = tb->wp - 1;
        put_tsc(p, t);
        memcpy(p + 8, &key, 8);   /* an end's tag is 0 (XSP_EV_END, no flags) */
        fast_leave(tb, 16);
        return;
    }
    uint64_t now = (uint64_t)t.hi << 32 | t.lo;
#else
    uint64_t now = 0;
#endif
    end_l_slow(key, now);
}

/* Data events: a payload attached to a span at stop (tbuf.h, replay.c).  Never on a fast
 * path: record_shapes and profile_memory are options that cost what they cost. */
void xsp_rec_data(uint32_t sub, const void *data, uint32_t len)
{
    uint64_t now = xsp_clock_ticks();
    xsp_tbuf *tb = enter();
    if (!tb)
        return;
    uint32_t padded = (len + 7u) & ~7u;
    if (len > XSP_DATA_MAX || sub == 0 || sub > 0xFFu) {
        tb->lost_data++;
        leave(tb);
        return;
    }
    /* room for the event and its payload: wend + 32 is the chunk's end */
    if (tb->capped || (tb->wp > tb->wend || (size_t)(tb->wend + 32 - tb->wp) < 16u + padded)) {
        if (tb->capped || tbuf_new_chunk(tb) != 0) {
            if (!tb->capped) {
                tb->capped = 1;
                fast_off(tb);
            }
            tb->lost_data++;
            leave(tb);
            return;
        }
    }
    uint64_t *w = (uint64_t *)(void *)tb->wp;
    w[0] = now;
    w[1] = (uint64_t)len | (uint64_t)sub << 32 | (uint64_t)XSP_EV_DATA << 56;
    if (len)
        memcpy(tb->wp + 16, data, len);
    if (padded > len)
        memset(tb->wp + 16 + len, 0, padded - len);
    tb->wp += 16 + padded;
    leave(tb);
}

/* Nulls every buffer's limit, after a bump of g_gen ("The fast paths' limit"), g_lock held
 * (stop's reap_dead frees buffers under it). */
static void fast_off_all(void)
{
    for (xsp_tbuf *tb = atomic_load(&g_registry); tb; tb = tb->next)
        atomic_store(&tb->flimit, NULL);
}

void xsp_rec_names_changed(void)
{
    /* the epoch wraps after 2^32 registrations: a thread would have to stay out of every slow
     * path across all of them to take a stale slot */
    atomic_fetch_add(&g_gen, GEN_EPOCH_ONE);
    pthread_mutex_lock(&g_lock);
    fast_off_all();
    pthread_mutex_unlock(&g_lock);
}

uint64_t xsp_rec_now(void)
{
    return xsp_clock_ticks();
}

int xsp_rec_set_hooks(const xsp_span_hooks *hooks)
{
    pthread_mutex_lock(&g_lock);
    int busy = (int)(atomic_load(&g_gen) & 1);
    if (!busy)
        g_hooks = hooks ? *hooks : (xsp_span_hooks){NULL, NULL};
    pthread_mutex_unlock(&g_lock);
    return busy ? -1 : 0;
}

void xsp_rec_set_release(int early)
{
    pthread_mutex_lock(&g_lock);
    g_release = early != 0;
    pthread_mutex_unlock(&g_lock);
}

int xsp_rec_active(void)
{
    return (int)(atomic_load(&g_gen) & 1);
}

int xsp_rec_start(const xsp_config *cfg, char *err, size_t errlen)
{
    pthread_mutex_lock(&g_lock);
    if (atomic_load(&g_gen) & 1) {
        pthread_mutex_unlock(&g_lock);
        snprintf(err, errlen, "a recording session is already active");
        return -1;
    }
    probe_membarrier();
    pthread_once(&g_key_once, make_key);
    uint64_t cap = cfg && cfg->max_bytes ? cfg->max_bytes : DEFAULT_CAP;
    uint64_t pool = cfg && cfg->pool_bytes ? cfg->pool_bytes : DEFAULT_POOL;
    if (pool > cap)
        pool = cap;
    uint32_t pool_n = (uint32_t)(pool / CHUNK_BYTES);
    /* The pool is kept between sessions (g_pool), so its pages are faulted in once per
     * process, not at every start. */
    char *mem = NULL;
    if (pool_n) {
        if (g_pool_n >= pool_n) {
            mem = g_pool;
        } else {
            mem = malloc((size_t)pool_n * CHUNK_BYTES);
            if (!mem) {
                pthread_mutex_unlock(&g_lock);
                snprintf(err, errlen, "cannot reserve %llu bytes of recording memory",
                         (unsigned long long)pool);
                return -1;
            }
            memset(mem, 0, (size_t)pool_n * CHUNK_BYTES);   /* fault the pages in now */
            free(g_pool);
            g_pool = mem;
            g_pool_n = pool_n;
        }
    }
    g_sess.cap = cap;
    g_sess.adopt_roots = cfg ? cfg->adopt_roots : 0;
    g_sess.own_hooks = cfg && cfg->hooks;
    if (g_sess.own_hooks)
        g_hooks = *cfg->hooks;
    g_sess.pool = mem;
    g_sess.pool_n = pool_n;
    atomic_store(&g_sess.pool_next, 0);
    atomic_store(&g_sess.full, 0);
    atomic_store(&g_sess.bytes, (uint64_t)pool_n * CHUNK_BYTES);
    xsp_clock_init();
    g_sess.fake = atomic_load(&xsp_fake_step) != 0;
    g_sess.start_ticks = xsp_clock_ticks();
    /* even + 1: no carry into the epoch */
    g_sess.gen = GEN_SESSION(atomic_fetch_add(&g_gen, 1) + 1);
    pthread_mutex_unlock(&g_lock);
    return 0;
}

/* Frees what stop no longer needs from a harvested buffer (whether its replay ran, failed or
 * was never reached, and whatever the merge gave back already); the owner resets the rest. */
static void tbuf_release(xsp_tbuf *tb)
{
    tb->pool_lo = (uintptr_t)g_sess.pool;
    tb->pool_hi = (uintptr_t)g_sess.pool + (uintptr_t)g_sess.pool_n * CHUNK_BYTES;
    for (uint32_t i = 0; i < tb->n_log; i++) {
        if (tb->log_size[i] == XSP_LOG_BYTES)
            xsp_tbuf_chunk_free(tb, tb->log[i]);
        else
            free(tb->log[i]);          /* a small chunk past the cap */
    }
    tb->n_log = 0;
    tb->wp = g_nochunk + 8;
    tb->wend = g_nochunk;
    for (uint32_t i = 0; i < tb->n_chunks; i++)
        xsp_tbuf_chunk_free(tb, tb->chunks[i]);
    tb->n_chunks = 0;
    tb->slot = 0;
    free(tb->ord2rec);
    tb->ord2rec = NULL;
    tb->n_ord = 0;
    free(tb->dbytes);
    free(tb->dents);
    free(tb->ments);
    tb->dbytes = NULL;
    tb->dents = NULL;
    tb->ments = NULL;
    tb->n_dbytes = tb->cap_dbytes = tb->n_dents = tb->cap_dents = 0;
    tb->n_ments = tb->cap_ments = 0;
}

/* Unlinks and frees buffers of exited threads (not the head: pushers race only on it). */
static void reap_dead(void)
{
    xsp_tbuf *prev = atomic_load(&g_registry);
    if (!prev)
        return;
    for (xsp_tbuf *tb = prev->next; tb; tb = prev->next) {
        if (atomic_load(&tb->dead)) {
            prev->next = tb->next;
            free(tb->log);
            free(tb->log_used);
            free(tb->log_size);
            free(tb->chunks);
            free(tb->hstack);
            free(tb->lstack);
            xsp_strtab_free(&tb->names);
            free(tb);
        } else {
            prev = tb;
        }
    }
}

int xsp_rec_stop(xsp_trace **out, const xsp_merge_extra *extra, char *err, size_t errlen)
{
    *out = NULL;
    pthread_mutex_lock(&g_lock);
    uint64_t gen = GEN_SESSION(atomic_load(&g_gen));
    if (!(gen & 1)) {
        pthread_mutex_unlock(&g_lock);
        snprintf(err, errlen, "no recording session is active");
        return -1;
    }
    atomic_fetch_add(&g_gen, 1);   /* a carry past 2^32 sessions only bumps the epoch */
    fast_off_all();
    fence_all();
    uint32_t n = 0, cap = 16;
    xsp_tbuf **bufs = malloc(cap * sizeof *bufs);
    for (xsp_tbuf *tb = atomic_load(&g_registry); tb; tb = tb->next) {
        while (atomic_load(&tb->busy) || stop_busy_wp(tb))
            sched_yield();
        if (tb->gen != gen || !bufs)
            continue;
        if (n == cap) {
            xsp_tbuf **b = realloc(bufs, 2 * cap * sizeof *b);
            if (!b) {
                free(bufs);
                bufs = NULL;
                continue;
            }
            bufs = b;
            cap *= 2;
        }
        bufs[n++] = tb;
    }
    /* after the wait: no span begun in this session can start after the stop time */
    uint64_t stop_ticks = g_sess.fake ? xsp_clock_ns() : xsp_clock_ticks();
    xsp_clock_map map = g_sess.fake ? (xsp_clock_map){0, 0, 0.0} : xsp_clock_calibrate();
    const char *lo = g_sess.pool, *hi = g_sess.pool + (size_t)g_sess.pool_n * CHUNK_BYTES;
    int replayed = bufs != NULL;
    for (uint32_t i = 0; replayed && i < n; i++)
        replayed = xsp_tbuf_replay(bufs[i], stop_ticks, lo, hi, g_hooks.push != NULL,
                                   g_release) == 0;
    xsp_trace *t = replayed ? xsp_merge(bufs, n, g_sess.start_ticks, stop_ticks, &map,
                                    g_sess.adopt_roots, extra)
                        : NULL;
    for (xsp_tbuf *tb = atomic_load(&g_registry); tb; tb = tb->next)
        if (tb->gen == gen)
            tbuf_release(tb);
    free(bufs);
    if (g_sess.own_hooks)        /* after the replay, which still pops through them */
        g_hooks = (xsp_span_hooks){NULL, NULL};
    g_sess.own_hooks = 0;
    g_sess.pool = NULL;          /* stays allocated in g_pool for the next session */
    g_sess.pool_n = 0;
    reap_dead();
    pthread_mutex_unlock(&g_lock);
    if (!t) {
        snprintf(err, errlen, "out of memory while merging the trace");
        return -1;
    }
    *out = t;
    return 0;
}
