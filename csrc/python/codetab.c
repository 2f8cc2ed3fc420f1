/*
 * codetab.c: a table of entries keyed by code objects (codetab.h).
 *
 * What it is for: two hooks of the CPython binding map a code object to something made once
 * per code object and kept, on every call they see: the module wrapper maps (the calling
 * frame's code, its instruction offset, the module's type) to a call site (modsites.c), and
 * with_stack's profile function maps a code object to its spans' name (pystack.c).  Both run
 * inside the profiled program, once per call, so a lookup must cost a hash and a probe or two,
 * allocate nothing and take no lock; this table is that, once for both.
 *
 * Layout: the entries in an array, by index, in the order they were added (an index is stable
 * for the table's life, which is what modsites hands out as a site's number), their hashes in
 * a parallel array, and an open-addressing index over them: slots holding index + 1 (0 is
 * empty), probed linearly from hash & mask, kept at most half full, so a probe ends after a
 * slot or two.  Adding may double the entry arrays or the slots (rehashed from the stored
 * hashes); nothing else allocates, and nothing is ever removed but all at once (reset, free).
 *
 * The keys are addresses: an entry keeps its objects alive (the caller holds strong
 * references in it), so an address it is matched by cannot be reused while the table lives.
 * The table knows nothing of Python: the caller compares keys, owns what entries hold, visits
 * and releases it, and serialises access (the GIL, or a mutex of its own in a free-threaded
 * build).
 */
#include "codetab.h"

#include <stdlib.h>
#include <string.h>

int xsp_codetab_init(xsp_codetab *t, size_t elem, uint32_t nslots, uint32_t first_cap)
{
    *t = (xsp_codetab){.elem = (uint32_t)elem, .first_cap = first_cap ? first_cap : 16};
    t->slots = calloc(nslots, sizeof *t->slots);
    if (!t->slots)
        return -1;
    t->mask = nslots - 1;
    return 0;
}

void xsp_codetab_free(xsp_codetab *t)
{
    if (!t)
        return;
    free(t->v);
    free(t->hash);
    free(t->slots);
    *t = (xsp_codetab){.elem = t->elem, .first_cap = t->first_cap};
}

void xsp_codetab_reset(xsp_codetab *t)
{
    t->n = 0;
    if (t->slots)
        memset(t->slots, 0, ((size_t)t->mask + 1) * sizeof *t->slots);
}

uint64_t xsp_codetab_hash(const void *code, int offset, const void *type)
{
    uint64_t h = (uint64_t)(uintptr_t)code * 0x9e3779b97f4a7c15ULL;
    h ^= (uint64_t)(uint32_t)offset * 0xc2b2ae3d27d4eb4fULL;
    h ^= (uint64_t)(uintptr_t)type * 0x165667b19e3779f9ULL;
    return h ^ (h >> 29);
}

/* Room for one more entry: 0, or -1 (out of memory; the entries unchanged). */
static int grow_entries(xsp_codetab *t)
{
    if (t->n < t->cap)
        return 0;
    uint32_t cap = t->cap ? 2 * t->cap : t->first_cap;
    if (cap <= t->cap)
        return -1;
    unsigned char *v = realloc(t->v, (size_t)cap * t->elem);
    if (!v)
        return -1;
    t->v = v;
    uint64_t *hash = realloc(t->hash, (size_t)cap * sizeof *hash);
    if (!hash)
        return -1;      /* v is larger, cap is not: consistent */
    t->hash = hash;
    t->cap = cap;
    return 0;
}

/* Doubles the slots (and rehashes).  0, or -1 (out of memory; the table unchanged). */
static int grow_slots(xsp_codetab *t)
{
    uint32_t nslots = (t->mask + 1) * 2;
    uint32_t *slots = calloc(nslots, sizeof *slots);
    if (!slots)
        return -1;
    for (uint32_t i = 0; i < t->n; i++) {
        uint32_t j = (uint32_t)t->hash[i] & (nslots - 1);
        while (slots[j])
            j = (j + 1) & (nslots - 1);
        slots[j] = i + 1;
    }
    free(t->slots);
    t->slots = slots;
    t->mask = nslots - 1;
    return 0;
}

int64_t xsp_codetab_add(xsp_codetab *t, uint32_t j, uint64_t h, const void *entry)
{
    if (grow_entries(t) != 0)
        return -1;
    if (2 * ((uint64_t)t->n + 1) + 1 > (uint64_t)t->mask + 1) {   /* keep it at most half full */
        if (grow_slots(t) != 0)
            return -1;
        j = (uint32_t)h & t->mask;
        while (t->slots[j])
            j = (j + 1) & t->mask;
    }
    uint32_t i = t->n++;
    memcpy(xsp_codetab_at(t, i), entry, t->elem);
    t->hash[i] = h;
    t->slots[j] = i + 1;
    return i;
}
