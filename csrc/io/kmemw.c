/*
 * kmemw.c: the "[memory]" instants of the Kineto writer (kmemw.h).
 *
 * Running totals are computed in 128 bits: the sums are int64, so a total can leave int64
 * (the Python writer's ints are unbounded) but never 128 bits.
 */
#include "kmemw.h"

#include <string.h>

__extension__ typedef __int128 i128;

static const char *const DEV[XSP_KMEM_NDEV] = {"cpu", "cuda", "other"};
static const char *const FIELD[XSP_KMEM_NFIELD] = {"allocs", "alloc_bytes", "frees",
                                                   "freed_bytes", "peak", "total"};
static const int DEV_TYPE[XSP_KMEM_NDEV] = {0, 1, 0};   /* torch's Device Type */
static const int DEV_ID[XSP_KMEM_NDEV] = {-1, 0, -1};   /* and Device Id */

const char *xsp_kmem_dev(unsigned d)
{
    return d < XSP_KMEM_NDEV ? DEV[d] : "?";
}

const char *xsp_kmem_field(unsigned f)
{
    return f < XSP_KMEM_NFIELD ? FIELD[f] : "?";
}

void xsp_kmem_children(const xsp_trace *t, uint32_t *first, uint32_t *next)
{
    for (uint32_t i = 0; i < t->n_spans; i++)
        first[i] = next[i] = UINT32_MAX;
    for (uint32_t c = t->n_spans; c-- > 0;) {
        uint32_t p = t->spans[c].parent;
        if (p != XSP_NO_PARENT && p < t->n_spans) {
            next[c] = first[p];
            first[p] = c;
        }
    }
}

uint64_t xsp_kmem_instant(const xsp_trace *t, const uint32_t *first, const uint32_t *next,
                          uint32_t i)
{
    const xsp_span *s = &t->spans[i];
    uint64_t at = s->start_ns;
    for (uint32_t c = first[i]; c != UINT32_MAX; c = next[c]) {
        if (t->spans[c].start_ns > at)
            break;
        if (t->spans[c].end_ns > at)
            at = t->spans[c].end_ns;
    }
    if (at < s->end_ns)
        return at;
    uint64_t last = s->end_ns ? s->end_ns - 1 : 0;
    return last > s->start_ns ? last : s->start_ns;
}

static void put_i128(xsp_jsonw *w, i128 v)
{
    char tmp[48];
    int k = 48;
    unsigned __int128 m = v < 0 ? (unsigned __int128)0 - (unsigned __int128)v
                                : (unsigned __int128)v;
    do {
        tmp[--k] = (char)('0' + (int)(m % 10));
        m /= 10;
    } while (m);
    if (v < 0)
        tmp[--k] = '-';
    xsp_jsonw_raw(w, tmp + k, (size_t)(48 - k));
}

static void event(xsp_jsonw *w, int64_t pid, uint64_t tid, uint64_t at_ns, int64_t base_ns,
                  unsigned d, i128 total, i128 bytes)
{
    xsp_jsonw_lit(w, ",\n{\"ph\": \"i\", \"cat\": \"cpu_instant_event\", \"s\": \"t\", "
                     "\"name\": \"[memory]\", \"pid\": ");
    xsp_jsonw_int(w, pid);
    xsp_jsonw_lit(w, ", \"tid\": ");
    xsp_jsonw_uint(w, tid);
    xsp_jsonw_lit(w, ", \"ts\": ");
    xsp_jsonw_us(w, at_ns, base_ns);
    xsp_jsonw_lit(w, ", \"args\": {\"Total Reserved\": 0, \"Device Id\": ");
    xsp_jsonw_int(w, DEV_ID[d]);
    xsp_jsonw_lit(w, ", \"Device Type\": ");
    xsp_jsonw_int(w, DEV_TYPE[d]);
    xsp_jsonw_lit(w, ", \"Addr\": 0, \"Total Allocated\": ");
    put_i128(w, total);
    xsp_jsonw_lit(w, ", \"Bytes\": ");
    put_i128(w, bytes);
    xsp_jsonw_lit(w, "}}");
}

void xsp_kmem_write(xsp_jsonw *w, const xsp_attr *const *mem, int64_t pid, uint64_t tid,
                    uint64_t at_ns, int64_t base_ns)
{
    for (unsigned d = 0; d < XSP_KMEM_NDEV; d++) {
        const xsp_attr *const *a = mem + d * XSP_KMEM_NFIELD;
        int ok = 1;
        for (unsigned f = 0; f < XSP_KMEM_NFIELD; f++)
            ok = ok && a[f] && a[f]->type == XSP_ATTR_INT;
        if (!ok)
            continue;
        i128 n_a = a[0]->v.i, b_a = a[1]->v.i, n_f = a[2]->v.i, b_f = a[3]->v.i;
        i128 peak = a[4]->v.i, total = a[5]->v.i;
        if (n_a < 0 || b_a < 0 || n_f < 0 || b_f < 0 || n_a + n_f <= 0
            || n_a + n_f > (1 << 20))
            continue;           /* no memory on d, or sums no allocator reports */
        /* the peak is the highest total after one of the span's events: after its last
         * allocation, or without any, after its first free */
        i128 tot = n_a ? peak - b_a : peak + b_f / n_f + b_f % n_f;
        for (i128 k = 0; k < n_a; k++) {
            i128 size = b_a / n_a + (k == 0 ? b_a % n_a : 0);
            tot += size;
            event(w, pid, tid, at_ns, base_ns, d, tot, size);
        }
        for (i128 k = 0; k < n_f; k++) {
            i128 size = b_f / n_f + (k == 0 ? b_f % n_f : 0);
            tot = k == n_f - 1 ? total : tot - size;
            event(w, pid, tid, at_ns, base_ns, d, tot, -size);
        }
    }
}
