/*
 * replay.c: at stop, a thread's event log becomes records (see tbuf.h).
 *
 * The hot path only appends begin and end events; here they are matched, in the order they
 * happened on the thread, with the rules recorder.h states:
 *   - a begin opens a record whose parent is the innermost open one; nesting deeper than
 *     XSP_MAX_DEPTH is not recorded (counted in lost_depth, and the end of such a span is
 *     recognised as one and skipped);
 *   - an end closes the innermost open span with its key; spans open above it are closed at
 *     the same time with XSP_FLAG_FORCED_END; an end whose key is not open is counted in
 *     unmatched (the op began before the session);
 *   - except where a Python function span (kind python, with_stack) and the spans open above
 *     it cross, which Python code does without anything going wrong: a record_function
 *     scope begins in its __enter__'s frame and ends in its __exit__'s.  When the span ending
 *     is a python span, or every span open above it is one, it ends alone, at the start of
 *     the lowest span open above it (so that siblings do not overlap and what it ran before
 *     that lies inside it): the spans above stay open, the lowest of them moved to its parent
 *     as its next sibling; no span is forced;
 *   - spans still open at the end of the log are ended at stop with XSP_FLAG_OPEN_AT_STOP.
 * Each begin's rank maps to its record (or, past the depth limit, to its nearest recorded
 * ancestor) in ord2rec: the GPU's external ids name spans by that rank.
 *
 * Memory: each log chunk, once read, becomes the next chunk of records (its pages were faulted
 * in while recording: the replay touches almost no fresh memory), or is given back at once
 * (unmapped, chunk.h); so records and log together stay near the log's size, and the merge
 * then gives back each record chunk as it emits its records (merge.c).  Nothing here reads a
 * chunk the replay has passed, except the records of spans still open (the stack): those are
 * in record chunks, which live until the merge.
 */
#include <stdlib.h>
#include <string.h>

#include "tbuf.h"

typedef struct open_span {
    uint64_t key;       /* the caller's key */
    uint32_t idx;       /* its record */
    uint32_t mem[XSP_MEM_DEVS];  /* its memory entries per device (ments), XSP_NONE: none yet */
} open_span;

/* Grows *p (elements of size sz, *cap of them) to hold need. 0, or -1 on OOM. */
static int grow(void **p, uint32_t *cap, uint32_t need, size_t sz)
{
    if (need <= *cap)
        return 0;
    uint64_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    if (c > UINT32_MAX)
        return -1;
    void *n = realloc(*p, (size_t)c * sz);
    if (!n)
        return -1;
    *p = n;
    *cap = (uint32_t)c;
    return 0;
}

/* An XSP_DATA_INPUTS payload for record rec: copied out of the log (which is reused). */
static int keep_inputs(xsp_tbuf *tb, uint32_t rec, const uint8_t *data, uint32_t len)
{
    if ((uint64_t)tb->n_dbytes + len > UINT32_MAX
        || grow((void **)&tb->dbytes, &tb->cap_dbytes, tb->n_dbytes + len, 1) != 0
        || grow((void **)&tb->dents, &tb->cap_dents, tb->n_dents + 1, sizeof *tb->dents) != 0)
        return -1;
    memcpy(tb->dbytes + tb->n_dbytes, data, len);
    tb->dents[tb->n_dents++] = (xsp_data_ent){rec, tb->n_dbytes, len};
    tb->n_dbytes += len;
    return 0;
}

/* An XSP_DATA_MEM event inside open span o (NULL: none open). 0, or -1 on OOM. */
static int add_mem(xsp_tbuf *tb, open_span *o, const uint8_t *data, uint32_t len)
{
    xsp_mem_event ev;
    if (len != sizeof ev) {
        tb->lost_data++;
        return 0;
    }
    memcpy(&ev, data, sizeof ev);
    uint32_t d = ev.dev < XSP_MEM_DEVS ? ev.dev : XSP_MEM_DEVS - 1;
    if (!o) {
        tb->mem_outside[d][ev.size < 0] += (uint64_t)(ev.size < 0 ? -ev.size : ev.size);
        return 0;
    }
    if (o->mem[d] == XSP_NONE) {
        if (grow((void **)&tb->ments, &tb->cap_ments, tb->n_ments + 1, sizeof *tb->ments) != 0)
            return -1;
        o->mem[d] = tb->n_ments;
        tb->ments[tb->n_ments++] = (xsp_mem_ent){.rec = o->idx, .dev = d, .peak = INT64_MIN};
    }
    xsp_mem_ent *m = &tb->ments[o->mem[d]];
    if (ev.size >= 0) {
        m->allocs++;
        m->alloc_bytes += (uint64_t)ev.size;
    } else {
        m->frees++;
        m->free_bytes += (uint64_t)-ev.size;
    }
    m->total = ev.total;
    if (ev.total > m->peak)
        m->peak = ev.total;
    return 0;
}

static int ment_cmp(const void *a, const void *b)
{
    const xsp_mem_ent *x = a, *y = b;
    if (x->rec != y->rec)
        return x->rec < y->rec ? -1 : 1;
    return x->dev < y->dev ? -1 : x->dev > y->dev;
}

_Static_assert(XSP_LOG_BYTES == XSP_CHUNK_RECS * sizeof(xsp_rec),
               "a log chunk, once read, is reused as a record chunk");

/* Log chunks already read, whose memory (faulted in while recording) becomes record chunks:
 * a span takes 48 bytes of log and 48 of record, so the log read so far nearly always holds
 * the records made from it, and the replay touches no fresh page. */
typedef struct spare_chunks {
    uint8_t *c[2];        /* at most two wait: one chunk of records is made per chunk read */
    uint32_t n;
} spare_chunks;

/* A new record at the end of tb's chunks; its index in *idx. NULL on OOM. */
static xsp_rec *new_rec(xsp_tbuf *tb, spare_chunks *spare, uint32_t *idx)
{
    if (__builtin_expect(tb->slot == XSP_CHUNK_RECS || tb->n_chunks == 0, 0)) {
        if (tb->n_chunks == tb->cap_chunks) {
            uint32_t cap = tb->cap_chunks ? tb->cap_chunks * 2 : 16;
            xsp_rec **c = realloc(tb->chunks, cap * sizeof *c);
            if (!c)
                return NULL;
            tb->chunks = c;
            tb->cap_chunks = cap;
        }
        xsp_rec *chunk = spare->n ? (xsp_rec *)(void *)spare->c[--spare->n]
                                  : (xsp_rec *)xsp_chunk_new();
        if (!chunk)
            return NULL;
        tb->chunks[tb->n_chunks++] = chunk;
        tb->slot = 0;
    }
    *idx = (tb->n_chunks - 1) * XSP_CHUNK_RECS + tb->slot;
    return &tb->chunks[tb->n_chunks - 1][tb->slot++];
}

/* Records ord -> idx in ord2rec, growing it (*cap entries). 0, or -1 on OOM. */
static int put_ord(xsp_tbuf *tb, uint32_t *cap, uint32_t idx)
{
    if (tb->n_ord == *cap) {
        uint32_t c = *cap ? *cap * 2 : 1024;
        uint32_t *m = realloc(tb->ord2rec, (size_t)c * sizeof *m);
        if (!m)
            return -1;
        tb->ord2rec = m;
        *cap = c;
    }
    tb->ord2rec[tb->n_ord++] = idx;
    return 0;
}

/* Whether the end of stack[d - 1], with stack[d .. depth) open above it, is a crossing of
 * Python function spans (see the top): it or all of those above are kind python. */
static int crosses(const xsp_tbuf *tb, const open_span *stack, uint32_t d, uint32_t depth)
{
    if (xsp_tbuf_rec(tb, stack[d - 1].idx)->kind == XSP_KIND_PYTHON)
        return 1;
    for (uint32_t i = d; i < depth; i++)
        if (xsp_tbuf_rec(tb, stack[i].idx)->kind != XSP_KIND_PYTHON)
            return 0;
    return 1;
}

int xsp_tbuf_replay(xsp_tbuf *tb, uint64_t stop, const char *pool_lo, const char *pool_hi,
                    int need_ord, int release)
{
    tb->pool_lo = (uintptr_t)pool_lo;
    tb->pool_hi = (uintptr_t)pool_hi;
    tb->release = release;
    tb->n_chunks = 0;
    tb->slot = 0;
    tb->n_ord = 0;
    tb->open = 0;
    tb->lost_depth = tb->unmatched = tb->forced = 0;
    tb->n_dbytes = tb->n_dents = tb->n_ments = 0;
    memset(tb->mem_outside, 0, sizeof tb->mem_outside);
    open_span *stack = malloc(XSP_MAX_DEPTH * sizeof *stack);
    if (!stack)
        return -1;
    if (tb->n_log)
        tb->log_used[tb->n_log - 1] = (uint32_t)(tb->wp - tb->log[tb->n_log - 1]);
    uint32_t depth = 0, overflow = 0, ord_cap = 0;
    spare_chunks spare = {{NULL, NULL}, 0};
    int rc = 0;
    uint32_t last_begin = XSP_NONE;   /* the record of the event just read, if a recorded begin */
    for (uint32_t c = 0; c < tb->n_log && rc == 0; c++) {
        const uint8_t *p = tb->log[c], *end = p + tb->log_used[c];
        while (p < end) {
            const uint64_t *w = (const uint64_t *)(const void *)p;
            uint32_t tag = (uint32_t)(w[1] >> 56);
            uint64_t key = w[1] & XSP_EV_KEY_MASK;
            if (tag == XSP_EV_DATA) {
                uint32_t len = (uint32_t)w[1], sub = (uint32_t)(w[1] >> 32) & 0xFFu;
                const uint8_t *data = p + 16;
                p += 16 + ((len + 7u) & ~7u);
                int r = 0;
                if (sub == XSP_DATA_INPUTS && last_begin != XSP_NONE)
                    r = keep_inputs(tb, last_begin, data, len);
                else if (sub == XSP_DATA_MEM && (depth || !overflow))
                    r = add_mem(tb, depth ? &stack[depth - 1] : NULL, data, len);
                else
                    tb->lost_data++;   /* its span was lost (depth), or no begin before it */
                last_begin = XSP_NONE;
                if (r != 0) {
                    rc = -1;
                    break;
                }
                continue;
            }
            last_begin = XSP_NONE;
            if (tag & XSP_EV_BEGIN) {
                p += 32;
                uint32_t parent = depth ? stack[depth - 1].idx : XSP_NONE;
                if (depth >= XSP_MAX_DEPTH) {
                    overflow++;
                    tb->lost_depth++;
                    if (need_ord && put_ord(tb, &ord_cap, parent) != 0) {
                        rc = -1;
                        break;
                    }
                    continue;
                }
                uint32_t idx;
                xsp_rec *r = new_rec(tb, &spare, &idx);
                if (!r || (need_ord && put_ord(tb, &ord_cap, idx) != 0)) {
                    rc = -1;
                    break;
                }
                uint32_t hi = (uint32_t)(w[3] >> 32);
                int named2 = (tag & XSP_EV_NAME2) != 0;
                *r = (xsp_rec){
                    .start = w[0],
                    .end = 0,
                    .a0 = (int64_t)w[2],
                    .a1 = named2 ? 0 : (int64_t)hi,
                    .name = (uint32_t)w[3],
                    .name2 = named2 ? hi : 0,
                    .parent = parent,
                    .level = (uint8_t)((tag >> 4) & 3u),
                    .kind = (uint8_t)(tag & 15u),
                    .flags = 0,
                };
                stack[depth++] = (open_span){key, idx, {XSP_NONE, XSP_NONE, XSP_NONE}};
                last_begin = idx;
            } else {
                p += 16;
                uint32_t d = depth;
                while (d > 0 && stack[d - 1].key != key)
                    d--;
                if (d == 0) {
                    if (overflow)
                        overflow--;          /* the end of a span begun past the limit */
                    else
                        tb->unmatched++;
                    continue;
                }
                if (d < depth && crosses(tb, stack, d, depth)) {
                    xsp_rec *r = xsp_tbuf_rec(tb, stack[d - 1].idx);
                    xsp_rec *up = xsp_tbuf_rec(tb, stack[d].idx);
                    r->end = up->start;
                    r->flags |= (uint16_t)(tag & 0x3Fu);
                    up->parent = r->parent;
                    memmove(&stack[d - 1], &stack[d], (depth - d) * sizeof *stack);
                    depth--;
                    continue;
                }
                overflow = 0;                /* an enclosing span ends: those past it too */
                for (uint32_t i = depth; i > d; i--) {
                    xsp_rec *r = xsp_tbuf_rec(tb, stack[i - 1].idx);
                    r->end = w[0];
                    r->flags |= XSP_FLAG_FORCED_END;
                    tb->forced++;
                }
                xsp_rec *r = xsp_tbuf_rec(tb, stack[d - 1].idx);
                r->end = w[0];
                r->flags |= (uint16_t)(tag & 0x3Fu);
                depth = d - 1;
            }
        }
        /* read: a full-size chunk becomes a spare (pool chunks too: records in them are not
         * freed, see xsp_tbuf_chunk_free); else, when releasing, it goes now (a small one,
         * ends past the cap, was malloc'd) */
        if (tb->log_size[c] == XSP_LOG_BYTES && spare.n < 2) {
            spare.c[spare.n++] = tb->log[c];
            tb->log[c] = NULL;
        } else if (release) {
            if (tb->log_size[c] == XSP_LOG_BYTES)
                xsp_tbuf_chunk_free(tb, tb->log[c]);
            else
                free(tb->log[c]);
            tb->log[c] = NULL;
        }
    }
    while (spare.n)                 /* left over: unmapped (or, pooled, left to the pool) */
        xsp_tbuf_chunk_free(tb, spare.c[--spare.n]);
    for (uint32_t d = 0; d < depth; d++) {
        xsp_rec *r = xsp_tbuf_rec(tb, stack[d].idx);
        r->end = stop;
        r->flags |= XSP_FLAG_OPEN_AT_STOP;
    }
    tb->open = depth;
    free(stack);
    if (tb->n_ments > 1)
        qsort(tb->ments, tb->n_ments, sizeof *tb->ments, ment_cmp);
    return rc;
}
