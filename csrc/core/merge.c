/*
 * merge.c: turns the thread buffers of a finished session into one trace (runs at stop only).
 *
 * Steps, each linear in the number of records (threads are few, so the k-way merge scans the
 * k heads):
 *   0. (before: replay.c turned each thread's event log into records)
 *   1. per thread: resolve parents through elided spans;
 *      map local name ids to trace string ids;
 *   2. k-way merge by (start, thread order, record order): global ids grow with start time,
 *      and since a parent is recorded before its children on its thread, its global id is
 *      known when a child is emitted; each record chunk is given back once its records are
 *      emitted (a thread's records are read in order from here on: gid answers the rest);
 *   3. attributes from the kind-specific record fields ("type", "seq", "fwd_op", and "site":
 *      a model or module span's a0 when not negative, the index of its call site, which the
 *      Python binding turns into "source" and "call_site" at stop, csrc/python/modsites.h);
 *   4. backward functions are linked to the forward op that created their autograd node: the
 *      last op on the forward thread to start with the same sequence number (composite ops
 *      that enclose it carry the number too, but start earlier), through a map keyed by the
 *      backward records' (thread, number) pairs only;
 *   5. roots on other threads are adopted by the region span when asked, and the roots of
 *      PyTorch's intra-op threads by the op that spawned them (spawn.h);
 *   6. other sources (the GPU) add their spans through an xsp_merge_extra, given a resolver
 *      from external ids (buffer serial, record index) to span ids;
 *   7. counters of everything lost, and metadata.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "inmemo.h"
#include "inputs.h"
#include "spawn.h"
#include "tbuf.h"

typedef struct thread_view {
    xsp_tbuf *tb;         /* the buffer (its record chunks given back as they are emitted) */
    uint32_t count;       /* records in it */
    uint32_t next;        /* next local index to emit */
    uint32_t thread;      /* trace thread index */
    uint32_t *gid;        /* local index -> global id; an elided record's is its parent's
                           * (XSP_NONE for a root), so that no record is read to resolve it
                           * once its chunk is gone; owned */
    uint32_t *names;      /* local name id -> trace string id; owned */
    uint32_t di;          /* next inputs entry (tb->dents) to attach */
    uint32_t mi;          /* next memory entry (tb->ments) to attach */
} thread_view;

/* The data events' attribute keys and what their decoding met (merge-wide). */
typedef struct data_keys {
    xsp_inputs_keys in;                    /* interned once inputs exist */
    xsp_inmemo memo;                       /* each distinct inputs payload decoded once */
    int in_ready;                          /* in is interned */
    uint32_t mem[XSP_MEM_DEVS][6];         /* mem.<dev>.{allocs,alloc_bytes,frees,freed_bytes,
                                            * peak,total}, interned on first use (0: not yet) */
    uint64_t malformed;                    /* inputs payloads that did not decode */
} data_keys;

static const char *const MEM_DEV[XSP_MEM_DEVS] = {"cpu", "cuda", "other"};
static const char *const MEM_FIELD[6] = {"allocs", "alloc_bytes", "frees", "freed_bytes",
                                         "peak", "total"};

/* The data entries of record i (inputs, then memory per device) as attributes of s. */
static int add_data_attrs(xsp_trace *t, xsp_span *s, uint32_t i, thread_view *v, data_keys *dk)
{
    const xsp_tbuf *tb = v->tb;
    while (v->di < tb->n_dents && tb->dents[v->di].rec < i)
        v->di++;
    if (v->di < tb->n_dents && tb->dents[v->di].rec == i) {
        const xsp_data_ent *e = &tb->dents[v->di++];
        if (!dk->in_ready) {
            if (xsp_inputs_keys_init(t, &dk->in) != 0)
                return -1;
            dk->in_ready = 1;
        }
        uint32_t added = 0;
        int rc = xsp_inmemo_decode(&dk->memo, t, &dk->in, tb->dbytes + e->off, e->len, &added);
        if (rc < 0)
            return -1;
        if (rc > 0)
            dk->malformed++;
        s->attr_n = (uint16_t)(s->attr_n + added);
    }
    while (v->mi < tb->n_ments && tb->ments[v->mi].rec < i)
        v->mi++;
    for (; v->mi < tb->n_ments && tb->ments[v->mi].rec == i; v->mi++) {
        const xsp_mem_ent *m = &tb->ments[v->mi];
        int64_t vals[6] = {(int64_t)m->allocs, (int64_t)m->alloc_bytes, (int64_t)m->frees,
                           (int64_t)m->free_bytes, m->peak, m->total};
        for (int f = 0; f < 6; f++) {
            uint32_t *key = &dk->mem[m->dev][f];
            if (!*key) {
                char name[40];
                int n = snprintf(name, sizeof name, "mem.%s.%s", MEM_DEV[m->dev], MEM_FIELD[f]);
                *key = xsp_strtab_intern(&t->strings, name, (size_t)n);
                if (*key == UINT32_MAX) {
                    *key = 0;
                    return -1;
                }
            }
            xsp_attr a = {.key = *key, .type = XSP_ATTR_INT, .v.i = vals[f]};
            if (xsp_trace_add_attr(t, &a) == UINT32_MAX)
                return -1;
            s->attr_n++;
        }
    }
    return 0;
}

/* Hash map (rf thread, seq) -> span id, open addressing.  Its keys are those of the backward
 * records, the only ones ever looked up, put in before the emission (with no span yet); an op
 * only updates the key of its (thread, seq) when it is there.  So the map is as big as the
 * backward functions need, not as every op with a sequence number (all ops in grad mode). */
typedef struct seqmap {
    uint64_t *keys;       /* 0 = empty; else hashed key | 1 */
    int64_t  *seq;        /* sequence numbers */
    int64_t  *tid;        /* RecordFunction thread ids */
    uint32_t *ids;        /* span ids */
    uint32_t mask;        /* slots - 1 */
} seqmap;

static uint64_t seq_hash(int64_t tid, int64_t seq)
{
    uint64_t h = (uint64_t)seq * 0x9e3779b97f4a7c15ULL ^ (uint64_t)tid * 0xc2b2ae3d27d4eb4fULL;
    return (h ^ (h >> 31)) | 1;
}

static int seqmap_init(seqmap *m, uint32_t n)
{
    uint32_t slots = 16;
    while (slots < 2 * (uint64_t)n && slots < (1u << 31))
        slots *= 2;
    m->keys = calloc(slots, sizeof *m->keys);
    m->seq = malloc(slots * sizeof *m->seq);
    m->tid = malloc(slots * sizeof *m->tid);
    m->ids = malloc(slots * sizeof *m->ids);
    m->mask = slots - 1;
    return m->keys && m->seq && m->tid && m->ids ? 0 : -1;
}

static void seqmap_free(seqmap *m)
{
    free(m->keys);
    free(m->seq);
    free(m->tid);
    free(m->ids);
}

/* Finds the slot of (tid, seq): its own or the empty one where it belongs. */
static uint32_t seqmap_slot(const seqmap *m, int64_t tid, int64_t seq)
{
    uint64_t h = seq_hash(tid, seq);
    uint32_t j = (uint32_t)h & m->mask;
    while (m->keys[j] && !(m->keys[j] == h && m->seq[j] == seq && m->tid[j] == tid))
        j = (j + 1) & m->mask;
    return j;
}

/* Puts the key (tid, seq) in with no span, if it is not there. */
static void seqmap_add_key(seqmap *m, int64_t tid, int64_t seq)
{
    uint32_t j = seqmap_slot(m, tid, seq);
    if (m->keys[j])
        return;
    m->keys[j] = seq_hash(tid, seq);
    m->seq[j] = seq;
    m->tid[j] = tid;
    m->ids[j] = XSP_NONE;
}

/* Maps (tid, seq) to span id, if the key is there. */
static void seqmap_update(seqmap *m, int64_t tid, int64_t seq, uint32_t id)
{
    uint32_t j = seqmap_slot(m, tid, seq);
    if (m->keys[j])
        m->ids[j] = id;
}

static uint32_t seqmap_get(const seqmap *m, int64_t tid, int64_t seq)
{
    uint32_t j = seqmap_slot(m, tid, seq);
    return m->keys[j] ? m->ids[j] : XSP_NONE;
}

/* Backward records with a sequence number: the keys of the backward-link map. */
static uint64_t count_backward(const thread_view *v)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < v->count; i++) {
        const xsp_rec *r = xsp_tbuf_rec(v->tb, i);
        n += r->kind == XSP_KIND_BACKWARD && r->a0 >= 0;
    }
    return n;
}

/* Puts the keys of v's backward records into m. */
static void add_backward_keys(seqmap *m, const thread_view *v)
{
    for (uint32_t i = 0; i < v->count; i++) {
        const xsp_rec *r = xsp_tbuf_rec(v->tb, i);
        if (r->kind == XSP_KIND_BACKWARD && r->a0 >= 0)
            seqmap_add_key(m, r->a1, r->a0);
    }
}

/* Sizes the span array once, so merging does not double it repeatedly. 0 or -1. */
static int reserve_spans(xsp_trace *t, uint32_t n)
{
    if (n <= t->cap_spans)
        return 0;
    xsp_span *s = realloc(t->spans, (size_t)n * sizeof *s);
    if (!s)
        return -1;
    t->spans = s;
    t->cap_spans = n;
    return 0;
}

/* Step 1 for one thread. Returns 0 or -1 on allocation failure. */
static int prepare_thread(thread_view *v, xsp_trace *t)
{
    const xsp_tbuf *tb = v->tb;
    v->names = malloc((tb->names.n ? tb->names.n : 1) * sizeof *v->names);
    v->gid = malloc((v->count ? v->count : 1) * sizeof *v->gid);
    if (!v->names || !v->gid)
        return -1;
    for (uint32_t i = 0; i < tb->names.n; i++) {
        size_t len;
        const char *s = xsp_strtab_get(&tb->names, i, &len);
        v->names[i] = xsp_strtab_intern(&t->strings, s, len);
        if (v->names[i] == UINT32_MAX)
            return -1;
    }
    /* Which records have children, to elide the empty ones that asked for it. */
    for (uint32_t i = 0; i < v->count; i++) {
        xsp_rec *r = xsp_tbuf_rec(tb, i);
        if (r->parent != XSP_NONE)
            xsp_tbuf_rec(tb, r->parent)->flags |= XSP_REC_HAS_CHILD;
    }
    for (uint32_t i = 0; i < v->count; i++) {
        xsp_rec *r = xsp_tbuf_rec(tb, i);
        if ((r->flags & (XSP_FLAG_ELIDE_IF_EMPTY | XSP_REC_HAS_CHILD)) == XSP_FLAG_ELIDE_IF_EMPTY)
            r->flags |= XSP_FLAG_ELIDE;
    }
    /* Parents through elided spans: parents precede children, so one forward pass works. */
    for (uint32_t i = 0; i < v->count; i++) {
        xsp_rec *r = xsp_tbuf_rec(tb, i);
        uint32_t p = r->parent;
        if (p != XSP_NONE && (xsp_tbuf_rec(tb, p)->flags & XSP_FLAG_ELIDE))
            r->parent = xsp_tbuf_rec(tb, p)->parent;
    }
    return 0;
}

static const char *const INT_KEYS[] = {"seq", "fwd_op", "site"};

/* Steps 3-4 for one record now emitted as span id. Returns 0 or -1. */
static int add_attrs(xsp_trace *t, xsp_span *s, const xsp_rec *r, const thread_view *v,
                     seqmap *fwd, const uint32_t *keys)
{
    xsp_attr a;
    s->attr_off = t->n_attrs;
    s->attr_n = 0;
    if (r->name2) {
        a = (xsp_attr){.key = keys[2], .type = XSP_ATTR_STR, .v.s = v->names[r->name2]};
        if (xsp_trace_add_attr(t, &a) == UINT32_MAX)
            return -1;
        s->attr_n++;
    }
    if ((r->kind == XSP_KIND_MODEL || r->kind == XSP_KIND_MODULE) && r->a0 >= 0) {
        a = (xsp_attr){.key = keys[3], .type = XSP_ATTR_INT, .v.i = r->a0};
        if (xsp_trace_add_attr(t, &a) == UINT32_MAX)
            return -1;
        s->attr_n++;
    }
    if ((r->kind == XSP_KIND_OP || r->kind == XSP_KIND_BACKWARD) && r->a0 >= 0) {
        a = (xsp_attr){.key = keys[0], .type = XSP_ATTR_INT, .v.i = r->a0};
        if (xsp_trace_add_attr(t, &a) == UINT32_MAX)
            return -1;
        s->attr_n++;
        if (!fwd->keys) {
            /* no map: no link */
        } else if (r->kind == XSP_KIND_OP) {
            seqmap_update(fwd, r->a1, r->a0, t->n_spans);
        } else {
            uint32_t f = seqmap_get(fwd, r->a1, r->a0);
            if (f != XSP_NONE) {
                a = (xsp_attr){.key = keys[1], .type = XSP_ATTR_INT, .v.i = f};
                if (xsp_trace_add_attr(t, &a) == UINT32_MAX)
                    return -1;
                s->attr_n++;
            }
        }
    }
    return 0;
}

/* Step 2: picks the thread whose next record starts first; -1 when all are done. */
static int pick(const thread_view *v, uint32_t n)
{
    int best = -1;
    uint64_t best_t = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (v[i].next >= v[i].count)
            continue;
        uint64_t st = xsp_tbuf_rec(v[i].tb, v[i].next)->start;
        if (best < 0 || st < best_t) {
            best = (int)i;
            best_t = st;
        }
    }
    return best;
}

/* Emits record i of tv as the next span (or, elided, as its parent's id).  0 or -1. */
static int emit_one(xsp_trace *t, thread_view *tv, uint32_t i, seqmap *fwd, const uint32_t *keys,
                    const xsp_clock_map *map, data_keys *dk)
{
    const xsp_rec *r = xsp_tbuf_rec(tv->tb, i);
    if (r->flags & XSP_FLAG_ELIDE) {   /* its parent is emitted (prepare_thread skips elided) */
        tv->gid[i] = r->parent == XSP_NONE ? XSP_NONE : tv->gid[r->parent];
        return 0;
    }
    xsp_span s = {
        .start_ns = xsp_clock_to_ns(map, r->start),
        .end_ns = xsp_clock_to_ns(map, r->end < r->start ? r->start : r->end),
        .parent = r->parent == XSP_NONE ? XSP_NO_PARENT : tv->gid[r->parent],
        .name = tv->names[r->name],
        .thread = tv->thread,
        .level = r->level,
        .kind = r->kind,
        .flags = r->flags & (XSP_FLAG_OPEN_AT_STOP | XSP_FLAG_FORCED_END),
    };
    if (add_attrs(t, &s, r, tv, fwd, keys) != 0
        || ((tv->tb->n_dents || tv->tb->n_ments) && add_data_attrs(t, &s, i, tv, dk) != 0))
        return -1;
    tv->gid[i] = xsp_trace_add_span(t, &s);
    return tv->gid[i] == UINT32_MAX ? -1 : 0;
}

/* Step 2, and the release: each thread's record chunk is given back once its last record is
 * emitted (only the next record of each thread is read from then on). */
static int emit_all(xsp_trace *t, thread_view *v, uint32_t n, seqmap *fwd, const uint32_t *keys,
                    const xsp_clock_map *map, data_keys *dk)
{
    for (int k; (k = pick(v, n)) >= 0;) {
        thread_view *tv = &v[k];
        uint32_t i = tv->next++;
        if (emit_one(t, tv, i, fwd, keys, map, dk) != 0)
            return -1;
        if (tv->tb->release && (tv->next % XSP_CHUNK_RECS == 0 || tv->next == tv->count)) {
            uint32_t c = i / XSP_CHUNK_RECS;
            xsp_tbuf_chunk_free(tv->tb, tv->tb->chunks[c]);
            tv->tb->chunks[c] = NULL;
        }
    }
    return 0;
}

/* Resolves an external id (xsp_ext_id) to the id of its span in the merged trace, an elided
 * span to its parent's (emit_one gave it that gid); XSP_NO_PARENT when unknown or not
 * recorded.  Reads no record: their chunks may be gone. */
typedef struct resolver {
    thread_view *v;      /* the thread views, gids assigned */
    uint32_t n;          /* number of views */
} resolver;

static uint32_t resolve(void *ctx, uint64_t ext_id)
{
    const resolver *rs = ctx;
    uint32_t serial = (uint32_t)(ext_id >> 40), gen = (uint32_t)(ext_id >> 32) & 0xFFu;
    uint32_t ord = (uint32_t)ext_id;   /* the begin's rank on its thread */
    for (uint32_t i = 0; i < rs->n; i++) {
        const thread_view *tv = &rs->v[i];
        if ((tv->tb->serial & 0xFFFFFFu) != serial)
            continue;
        if (((tv->tb->gen >> 1) & 0xFFu) != gen)
            return XSP_NO_PARENT;      /* left on CUPTI's stack by an earlier session */
        uint32_t idx = ord < tv->tb->n_ord ? tv->tb->ord2rec[ord] : XSP_NONE;
        return idx < tv->count ? tv->gid[idx] : XSP_NO_PARENT;   /* XSP_NONE: no parent */
    }
    return XSP_NO_PARENT;
}

/* Step 5: the region adopts the other threads' roots, their spawning ops the intra-op
 * threads' (spawn.h), counted as "intraop.linked", ".unlinked" and ".ambiguous" when the
 * trace has intra-op roots.  0, or -1 (out of memory for the counters; the links' own
 * shortage leaves the roots with the region and counts them unlinked). */
static int adopt_and_link(xsp_trace *t, const thread_view *v, uint32_t n)
{
    uint8_t *pool = calloc(t->n_threads ? t->n_threads : 1, 1);
    int any = 0;
    for (uint32_t i = 0; pool && i < n; i++)
        if (v[i].tb->role == XSP_ROLE_INTRAOP && v[i].thread < t->n_threads)
            any = pool[v[i].thread] = 1;
    xsp_spawn_counts c;
    xsp_spawn_link(t, pool, pool ? t->n_threads : 0, &c);
    free(pool);
    if (!any)
        return 0;
    return xsp_trace_add_counter(t, "intraop.linked", (int64_t)c.linked)
           | xsp_trace_add_counter(t, "intraop.unlinked", (int64_t)c.unlinked)
           | xsp_trace_add_counter(t, "intraop.ambiguous", (int64_t)c.ambiguous);
}

/* Step 7 (after the other sources, so that the names they added count).  "names.cut" (names
 * over XSP_STRTAB_MAX_LEN, cut when interned) is added only when nonzero: the names each
 * thread cut, and those cut as they entered the trace's table (kernel names demangled past
 * the limit by the GPU merge, which counts its own store's); a name cut on two threads
 * counts twice. */
static int add_counters(xsp_trace *t, xsp_tbuf *const *bufs, uint32_t n, const data_keys *dk)
{
    int64_t cap = 0, depth = 0, unmatched = 0, forced = 0, open = 0, data = 0;
    int64_t outside[XSP_MEM_DEVS][2] = {{0}};
    int64_t cut = (int64_t)t->strings.ncut;
    for (uint32_t i = 0; i < n; i++) {
        cap += (int64_t)(bufs[i]->lost_cap + bufs[i]->lost_end);
        depth += (int64_t)bufs[i]->lost_depth;
        unmatched += (int64_t)bufs[i]->unmatched;
        forced += (int64_t)bufs[i]->forced;
        open += bufs[i]->open;
        cut += (int64_t)bufs[i]->names.ncut;
        data += (int64_t)bufs[i]->lost_data;
        for (int d = 0; d < XSP_MEM_DEVS; d++)
            for (int k = 0; k < 2; k++)
                outside[d][k] += (int64_t)bufs[i]->mem_outside[d][k];
    }
    /* the counters of the options (record_shapes, profile_memory) only where they count */
    int rc = 0;
    if (data)
        rc |= xsp_trace_add_counter(t, "lost.data", data);
    if (dk->malformed)
        rc |= xsp_trace_add_counter(t, "inputs.malformed", (int64_t)dk->malformed);
    for (int d = 0; d < XSP_MEM_DEVS; d++)
        for (int k = 0; k < 2; k++)
            if (outside[d][k]) {
                char name[64];
                snprintf(name, sizeof name, "memory.outside_spans.%s.%s", MEM_DEV[d],
                         k ? "freed_bytes" : "alloc_bytes");
                rc |= xsp_trace_add_counter(t, name, outside[d][k]);
            }
    if (rc)
        return -1;
    return xsp_trace_add_counter(t, "lost.cap", cap) | xsp_trace_add_counter(t, "lost.depth", depth)
           | xsp_trace_add_counter(t, "unmatched_end", unmatched)
           | xsp_trace_add_counter(t, "forced_end", forced)
           | xsp_trace_add_counter(t, "open_at_stop", open)
           | (cut ? xsp_trace_add_counter(t, "names.cut", cut) : 0);
}

xsp_trace *xsp_merge(xsp_tbuf *const *bufs, uint32_t n, uint64_t start, uint64_t stop,
                     const xsp_clock_map *map, int adopt, const xsp_merge_extra *extra)
{
    xsp_trace *t = xsp_trace_new();
    thread_view *v = calloc(n ? n : 1, sizeof *v);
    seqmap fwd = {0};
    uint64_t total = 0;
    int ok = t && v;
    for (uint32_t i = 0; ok && i < n; i++) {
        v[i].tb = bufs[i];
        v[i].count = xsp_tbuf_count(bufs[i]);
        char pool_name[48];
        if (bufs[i]->role == XSP_ROLE_INTRAOP)
            snprintf(pool_name, sizeof pool_name, "intra-op thread %u", bufs[i]->role_num);
        v[i].thread = xsp_trace_add_thread(t, bufs[i]->tid,
                                           bufs[i]->role == XSP_ROLE_INTRAOP ? pool_name : NULL,
                                           0);
        total += v[i].count;
        ok = v[i].thread != UINT32_MAX && prepare_thread(&v[i], t) == 0;
    }
    uint32_t keys[4] = {0, 0, 0, 0};
    static const char *const type_key = "type";
    if (ok) {
        keys[0] = xsp_strtab_intern(&t->strings, INT_KEYS[0], strlen(INT_KEYS[0]));
        keys[1] = xsp_strtab_intern(&t->strings, INT_KEYS[1], strlen(INT_KEYS[1]));
        keys[2] = xsp_strtab_intern(&t->strings, type_key, strlen(type_key));
        keys[3] = xsp_strtab_intern(&t->strings, INT_KEYS[2], strlen(INT_KEYS[2]));
        ok = keys[0] != UINT32_MAX && keys[1] != UINT32_MAX && keys[2] != UINT32_MAX
             && keys[3] != UINT32_MAX
             && total < UINT32_MAX && reserve_spans(t, (uint32_t)total) == 0;
    }
    /* The backward links are a luxury: without memory for their map, the trace is still made
     * and the counter "fwd_op.skipped" says how many were not made.  No backward record, no
     * map. */
    uint64_t n_bwd = 0;
    for (uint32_t i = 0; ok && i < n; i++)
        n_bwd += count_backward(&v[i]);
    int linked = 1;
    if (ok && n_bwd) {
        linked = n_bwd < (1u << 30) && seqmap_init(&fwd, (uint32_t)n_bwd) == 0;
        for (uint32_t i = 0; linked && i < n; i++)
            add_backward_keys(&fwd, &v[i]);
        if (!linked) {
            seqmap_free(&fwd);
            memset(&fwd, 0, sizeof fwd);
        }
    }
    data_keys dk;
    memset(&dk, 0, sizeof dk);
    ok = ok && emit_all(t, v, n, &fwd, keys, map, &dk) == 0;
    if (ok && adopt)
        ok = adopt_and_link(t, v, n) == 0;
    if (ok && extra && extra->fn) {
        resolver rs = {v, n};
        ok = extra->fn(t, resolve, &rs, map, extra->arg) == 0;
    }
    xsp_inmemo_free(&dk.memo);
    ok = ok && add_counters(t, bufs, n, &dk) == 0
         && xsp_trace_add_counter(t, "fwd_op.skipped", linked ? 0 : (int64_t)n_bwd) == 0;
    ok = ok && xsp_trace_set_meta_int(t, "start_ns", (int64_t)xsp_clock_to_ns(map, start)) == 0
         && xsp_trace_set_meta_int(t, "stop_ns", (int64_t)xsp_clock_to_ns(map, stop)) == 0
         && xsp_trace_set_meta_str(t, "clock", map->ns_per_tick ? "tsc" : "monotonic") == 0
         && xsp_trace_set_meta_int(t, "pid", (int64_t)getpid()) == 0;
    for (uint32_t i = 0; v && i < n; i++) {
        free(v[i].gid);
        free(v[i].names);
    }
    free(v);
    seqmap_free(&fwd);
    if (!ok) {
        xsp_trace_free(t);
        return NULL;
    }
    return t;
}
