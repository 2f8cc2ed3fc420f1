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
 *   - spans still open at the end of the log are ended at stop with XSP_FLAG_OPEN_AT_STOP.
 * Each begin's rank maps to its record (or, past the depth limit, to its nearest recorded
 * ancestor) in ord2rec: the GPU's external ids name spans by that rank.
 *
 * Memory: each log chunk, once read, becomes the next chunk of records (its pages were faulted
 * in while recording: the replay touches almost no fresh memory), or is freed; so records and
 * log together stay near the log's size.
 */
#include <stdlib.h>

#include "tbuf.h"

typedef struct open_span {
    uint64_t key;       /* the caller's key */
    uint32_t idx;       /* its record */
} open_span;

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
                                  : malloc((size_t)XSP_CHUNK_RECS * sizeof *chunk);
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

int xsp_tbuf_replay(xsp_tbuf *tb, uint64_t stop, const char *pool_lo, const char *pool_hi,
                    int need_ord)
{
    tb->n_chunks = 0;
    tb->slot = 0;
    tb->n_ord = 0;
    tb->open = 0;
    tb->lost_depth = tb->unmatched = tb->forced = 0;
    open_span *stack = malloc(XSP_MAX_DEPTH * sizeof *stack);
    if (!stack)
        return -1;
    if (tb->n_log)
        tb->log_used[tb->n_log - 1] = (uint32_t)(tb->wp - tb->log[tb->n_log - 1]);
    uint32_t depth = 0, overflow = 0, ord_cap = 0;
    spare_chunks spare = {{NULL, NULL}, 0};
    int rc = 0;
    for (uint32_t c = 0; c < tb->n_log && rc == 0; c++) {
        const uint8_t *p = tb->log[c], *end = p + tb->log_used[c];
        while (p < end) {
            const uint64_t *w = (const uint64_t *)(const void *)p;
            uint32_t tag = (uint32_t)(w[1] >> 56);
            uint64_t key = w[1] & XSP_EV_KEY_MASK;
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
                stack[depth++] = (open_span){key, idx};
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
         * freed, see tbuf_release); a small one (ends past the cap) is freed */
        const char *chunk = (const char *)tb->log[c];
        int pooled = chunk >= pool_lo && chunk < pool_hi;
        if (tb->log_size[c] == XSP_LOG_BYTES && spare.n < 2) {
            spare.c[spare.n++] = tb->log[c];
            tb->log[c] = NULL;
        } else if (!pooled) {
            free(tb->log[c]);
            tb->log[c] = NULL;
        }
    }
    while (spare.n) {               /* left over: back to malloc (or, pooled, to the pool) */
        const char *chunk = (const char *)spare.c[--spare.n];
        if (!(chunk >= pool_lo && chunk < pool_hi))
            free(spare.c[spare.n]);
    }
    for (uint32_t d = 0; d < depth; d++) {
        xsp_rec *r = xsp_tbuf_rec(tb, stack[d].idx);
        r->end = stop;
        r->flags |= XSP_FLAG_OPEN_AT_STOP;
    }
    tb->open = depth;
    free(stack);
    return rc;
}
