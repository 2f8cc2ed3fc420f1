/*
 * recorder.c: sessions, thread buffers and the hot path (see recorder.h and tbuf.h).
 *
 * Global state:
 *   g_gen       odd while a session records, even otherwise; bumped by start and stop.  Read
 *               by every begin/end (seq_cst, paired with the thread's busy flag).
 *   g_registry  head of the list of all thread buffers ever attached (lock-free push).
 *   g_sess      the session's pool and cap accounting.  Written by start/stop under g_lock;
 *               the hot path reads it only between busy=1 and busy=0 with g_gen odd.
 *   g_lock      serialises start and stop (never taken on the hot path).
 *
 * The stop protocol (Dekker): a recorder stores busy=1 then loads g_gen; stop stores g_gen
 * then loads each busy.  With a full fence on both sides at least one sees the other: either
 * the recorder sees the session ended and leaves, or stop sees busy and waits for it to clear.
 * So after stop's wait no thread touches any buffer until the next session, and stop may read
 * and free chunks without a lock.  Where membarrier(2) is available the recorder's fence is
 * only a compiler barrier and stop issues membarrier(PRIVATE_EXPEDITED), which runs a full
 * fence on every thread of the process (an xchg per begin and end saved on the hot path);
 * elsewhere both sides use seq_cst.
 *
 * Chunks come first from a pool reserved at start (so steady-state recording does not call
 * malloc), then from malloc while the cap allows; both are charged to g_sess.bytes.
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

#include "clock.h"
#include "tbuf.h"

#define DEFAULT_CAP (1ull << 30)
#define DEFAULT_POOL (4ull << 20)
#define CHUNK_BYTES ((uint64_t)XSP_CHUNK_RECS * sizeof(xsp_rec))

typedef struct xsp_session {
    uint64_t gen;                /* generation while active (odd) */
    uint64_t cap;                /* max_bytes */
    int adopt_roots;             /* config.adopt_roots */
    uint64_t start_ticks;        /* clock at start */
    int fake;                    /* the fake clock was on at start: readings are ns */
    char *pool;                  /* pool_n chunks reserved at start; owned */
    uint32_t pool_n;             /* chunks in the pool */
    _Atomic uint32_t pool_next;  /* next unused pool chunk, at most pool_n */
    _Atomic int full;            /* sticky: the cap was reached, no more chunks this session */
    _Atomic uint64_t bytes;      /* bytes charged against cap */
} xsp_session;

static _Atomic uint64_t g_gen = 0;               /* see above */
static _Atomic(xsp_tbuf *) g_registry = NULL;    /* see above */
static xsp_session g_sess;                       /* protected by g_lock, see above */
static char *g_pool = NULL;                      /* the pool memory, kept between sessions;
                                                    protected by g_lock */
static uint32_t g_pool_n = 0;                    /* chunks in g_pool; protected by g_lock */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t g_key;                      /* thread-exit destructor marks tbuf dead */
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static xsp_span_hooks g_hooks = {NULL, NULL};    /* set while no session records (see
                                                    xsp_rec_set_hooks); read by the hot path */
static _Atomic uint32_t g_serial = 0;            /* next tbuf serial number */
static _Thread_local xsp_tbuf *tls_tb = NULL;    /* this thread's buffer, never freed while
                                                    the thread lives */

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
    tls_tb = NULL;
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
    tls_tb = NULL;
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
    tb->tid = (uint64_t)syscall(SYS_gettid);
    tb->serial = atomic_fetch_add(&g_serial, 1);
    pthread_once(&g_key_once, make_key);
    pthread_setspecific(g_key, tb);
    xsp_tbuf *head = atomic_load(&g_registry);
    do {
        tb->next = head;
    } while (!atomic_compare_exchange_weak(&g_registry, &head, tb));
    tls_tb = tb;
    return tb;
}

/* Called by the owner, busy set, when its contents belong to an older session. */
static void tbuf_reset(xsp_tbuf *tb, uint64_t gen)
{
    tb->gen = gen;
    tb->n_chunks = 0;
    tb->slot = 0;
    tb->depth = 0;
    tb->overflow = 0;
    tb->lost_cap = tb->lost_depth = tb->unmatched = tb->forced = 0;
    xsp_strtab_clear(&tb->names);
    memset(tb->ncache, 0, sizeof tb->ncache);
    tb->names_bytes = xsp_strtab_bytes(&tb->names);   /* only growth is charged to the cap */
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

/* Slow path: a new chunk for tb. Returns 0, or -1 when the cap or memory is exhausted. */
static int tbuf_new_chunk(xsp_tbuf *tb)
{
    if (tb->n_chunks == tb->cap_chunks) {
        uint32_t cap = tb->cap_chunks ? tb->cap_chunks * 2 : 16;
        xsp_rec **c = realloc(tb->chunks, cap * sizeof *c);
        if (!c)
            return -1;
        tb->chunks = c;
        tb->cap_chunks = cap;
    }
    if (atomic_load_explicit(&g_sess.full, memory_order_relaxed))
        return -1;                       /* at the cap: no atomics per lost span */
    xsp_rec *chunk = NULL;
    uint32_t i = atomic_load_explicit(&g_sess.pool_next, memory_order_relaxed);
    while (i < g_sess.pool_n   /* saturating: the counter never runs past pool_n */
           && !atomic_compare_exchange_weak_explicit(&g_sess.pool_next, &i, i + 1,
                                                     memory_order_relaxed, memory_order_relaxed))
        ;
    if (i < g_sess.pool_n) {
        chunk = (xsp_rec *)(g_sess.pool + (uint64_t)i * CHUNK_BYTES);
    } else if (charge(CHUNK_BYTES)) {
        chunk = malloc(CHUNK_BYTES);
        if (!chunk)
            atomic_fetch_sub_explicit(&g_sess.bytes, CHUNK_BYTES, memory_order_relaxed);
    }
    if (!chunk) {
        atomic_store_explicit(&g_sess.full, 1, memory_order_relaxed);
        return -1;
    }
    tb->chunks[tb->n_chunks++] = chunk;
    tb->slot = 0;
    return 0;
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

/* Interns a name on the owner's table, charging growth to the cap. UINT32_MAX if lost.
 * len == XSP_NAME_NUL: s is NUL-terminated and goes through the pointer cache first. */
static inline uint32_t tbuf_name(xsp_tbuf *tb, const char *s, size_t len)
{
    xsp_name_slot *slot = NULL;
    if (len == XSP_NAME_NUL) {
        uintptr_t p = (uintptr_t)s;
        slot = &tb->ncache[((p >> 4) ^ (p >> 12)) & (XSP_NAME_CACHE - 1)];
        if (slot->ptr == s
            && strncmp(s, tb->names.arena + tb->names.offs[slot->id], (size_t)slot->len + 1) == 0)
            return slot->id;
        len = strlen(s);
    }
    uint32_t id = tbuf_intern(tb, s, len);
    if (slot && id != UINT32_MAX)
        *slot = (xsp_name_slot){.ptr = s, .id = id, .len = (uint32_t)tb->names.lens[id]};
    return id;
}


/* Enters the hot path: returns the thread's buffer with busy set, or NULL when not recording
 * (busy is then clear). */
static inline xsp_tbuf *enter(void)
{
    xsp_tbuf *tb = tls_tb;
    if (__builtin_expect(tb == NULL, 0)) {
        if (!(atomic_load_explicit(&g_gen, memory_order_relaxed) & 1))
            return NULL;
        tb = tbuf_attach();
        if (!tb)
            return NULL;
    }
    uint64_t gen;
    if (__builtin_expect(g_membarrier, 1)) {
        /* stop's membarrier() turns this compiler barrier into a full fence when it matters */
        atomic_store_explicit(&tb->busy, 1, memory_order_relaxed);
        atomic_signal_fence(memory_order_seq_cst);
        /* acquire: the session state start published before the generation is visible */
        gen = atomic_load_explicit(&g_gen, memory_order_acquire);
    } else {
        atomic_store_explicit(&tb->busy, 1, memory_order_seq_cst);
        gen = atomic_load_explicit(&g_gen, memory_order_seq_cst);
    }
    if (!(gen & 1)) {
        atomic_store_explicit(&tb->busy, 0, memory_order_release);
        return NULL;
    }
    if (__builtin_expect(tb->gen != gen, 0))
        tbuf_reset(tb, gen);
    return tb;
}

static inline void leave(xsp_tbuf *tb)
{
    atomic_store_explicit(&tb->busy, 0, memory_order_release);
}

/* The body of both begin entry points, inlined into each so that the op entry's constants
 * (level L, a NUL-terminated name, no second name) fold away. */
static inline __attribute__((always_inline)) void
rec_begin(uint8_t level, uint8_t kind, const char *name, size_t name_len, const char *name2,
          size_t name2_len, uint64_t key, int64_t a0, int64_t a1)
{
    xsp_tbuf *tb = enter();
    if (!tb)
        return;
    if (__builtin_expect(tb->depth >= XSP_MAX_DEPTH, 0)) {
        tb->overflow++;
        tb->lost_depth++;
        leave(tb);
        return;
    }
    xsp_open *e = &tb->stack[tb->depth];
    uint32_t parent = tb->depth ? e[-1].idx : XSP_NONE;
    tb->depth++;
    e->key = key;
    e->rec = NULL;
    e->idx = parent;
    e->pushed = 0;
    if (__builtin_expect(tb->n_chunks == 0 || tb->slot == XSP_CHUNK_RECS, 0)
        && tbuf_new_chunk(tb) != 0) {
        tb->lost_cap++;
        goto done;
    }
    uint32_t nid = tbuf_name(tb, name, name_len);
    uint32_t nid2 = name2 ? tbuf_name(tb, name2, name2_len) : 0;
    if (__builtin_expect(nid == UINT32_MAX || nid2 == UINT32_MAX, 0)) {
        tb->lost_cap++;
        goto done;
    }
    xsp_rec *r = &tb->chunks[tb->n_chunks - 1][tb->slot];
    e->rec = r;
    e->idx = (tb->n_chunks - 1) * XSP_CHUNK_RECS + tb->slot;
    tb->slot++;
    r->end = 0;
    r->a0 = a0;
    r->a1 = a1;
    r->name = nid;
    r->name2 = nid2;
    r->parent = parent;
    r->level = level;
    r->kind = kind;
    r->flags = 0;
done:
    if (__builtin_expect(g_hooks.push != NULL, 0)) {
        /* the innermost recorded span (this one, or its nearest recorded ancestor if it was
         * lost) becomes the external correlation id of GPU work launched from here */
        g_hooks.push(xsp_ext_id(tb->serial, tb->gen, e->idx));
        e->pushed = 1;
    }
    if (e->rec)
        e->rec->start = xsp_clock_ticks();   /* last: the bookkeeping above is outside it */
    leave(tb);
}

void xsp_rec_begin(uint8_t level, uint8_t kind, const char *name, size_t name_len,
                   const char *name2, size_t name2_len, uint64_t key, int64_t a0, int64_t a1)
{
    rec_begin(level, kind, name, name_len, name2, name2_len, key, a0, a1);
}

void xsp_rec_begin_l(uint8_t kind, const char *name, uint64_t key, int64_t a0, int64_t a1)
{
    rec_begin(XSP_LEVEL_L, kind, name, XSP_NAME_NUL, NULL, 0, key, a0, a1);
}

void xsp_rec_end(uint64_t key, uint32_t flags)
{
    uint64_t now = xsp_clock_ticks();   /* first, so the bookkeeping below is outside the span */
    xsp_tbuf *tb = enter();
    if (!tb)
        return;
    uint32_t d = tb->depth;
    while (d > 0 && tb->stack[d - 1].key != key)
        d--;
    if (__builtin_expect(d == 0, 0)) {
        if (tb->overflow)
            tb->overflow--;           /* the end of a span begun past the depth limit */
        else
            tb->unmatched++;
        leave(tb);
        return;
    }
    tb->overflow = 0;                 /* an enclosing span ends: the spans past the limit too */
    for (uint32_t i = tb->depth; i > d; i--) {
        xsp_open *e = &tb->stack[i - 1];
        if (e->rec) {
            e->rec->end = now;
            e->rec->flags |= XSP_FLAG_FORCED_END;
        }
        if (e->pushed && g_hooks.pop)
            g_hooks.pop();
        tb->forced++;
    }
    xsp_open *e = &tb->stack[d - 1];
    if (e->rec) {
        e->rec->end = now;
        e->rec->flags |= (uint16_t)flags;
    }
    if (e->pushed && g_hooks.pop)
        g_hooks.pop();
    tb->depth = d - 1;
    leave(tb);
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

int xsp_session_active(void)
{
    return (int)(atomic_load(&g_gen) & 1);
}

int xsp_session_start(const xsp_config *cfg, char *err, size_t errlen)
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
    g_sess.pool = mem;
    g_sess.pool_n = pool_n;
    atomic_store(&g_sess.pool_next, 0);
    atomic_store(&g_sess.full, 0);
    atomic_store(&g_sess.bytes, (uint64_t)pool_n * CHUNK_BYTES);
    xsp_clock_init();
    g_sess.fake = atomic_load(&xsp_fake_step) != 0;
    g_sess.start_ticks = xsp_clock_ticks();
    g_sess.gen = atomic_load(&g_gen) + 1;
    atomic_store(&g_gen, g_sess.gen);
    pthread_mutex_unlock(&g_lock);
    return 0;
}

/* Frees what stop no longer needs from a harvested buffer; the owner resets the rest. */
static void tbuf_release(xsp_tbuf *tb)
{
    char *lo = g_sess.pool, *hi = g_sess.pool + (size_t)g_sess.pool_n * CHUNK_BYTES;
    for (uint32_t i = 0; i < tb->n_chunks; i++) {
        char *c = (char *)tb->chunks[i];
        if (!(c >= lo && c < hi))
            free(c);
    }
    tb->n_chunks = 0;
    tb->slot = 0;
    tb->depth = 0;
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
            free(tb->chunks);
            xsp_strtab_free(&tb->names);
            free(tb);
        } else {
            prev = tb;
        }
    }
}

int xsp_session_stop(xsp_trace **out, char *err, size_t errlen)
{
    return xsp_session_stop_ex(out, NULL, err, errlen);
}

int xsp_session_stop_ex(xsp_trace **out, const xsp_merge_extra *extra, char *err, size_t errlen)
{
    *out = NULL;
    pthread_mutex_lock(&g_lock);
    uint64_t gen = atomic_load(&g_gen);
    if (!(gen & 1)) {
        pthread_mutex_unlock(&g_lock);
        snprintf(err, errlen, "no recording session is active");
        return -1;
    }
    atomic_store(&g_gen, gen + 1);
    fence_all();
    uint32_t n = 0, cap = 16;
    xsp_tbuf **bufs = malloc(cap * sizeof *bufs);
    for (xsp_tbuf *tb = atomic_load(&g_registry); tb; tb = tb->next) {
        while (atomic_load(&tb->busy))
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
    xsp_trace *t = bufs ? xsp_merge(bufs, n, g_sess.start_ticks, stop_ticks, &map,
                                    g_sess.adopt_roots, extra)
                        : NULL;
    for (xsp_tbuf *tb = atomic_load(&g_registry); tb; tb = tb->next)
        if (tb->gen == gen)
            tbuf_release(tb);
    free(bufs);
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
