/*
 * codetab.h: a table of entries keyed by code objects, the one hash table of the CPython
 * binding's hot paths: the call sites of module calls (modsites.c) and the names of Python
 * functions (pystack.c).
 *
 * See codetab.c for the design.  The table indexes; the entries are the caller's: their type
 * (elem bytes each), what they hold and the references they own, and the equality of two keys
 * with the same hash.  No function here runs Python code or takes a lock.
 */
#ifndef XSP_CODETAB_H
#define XSP_CODETAB_H

#include <stddef.h>
#include <stdint.h>

typedef struct xsp_codetab {
    unsigned char *v;           /* the entries, elem bytes each, by index; owned */
    uint64_t *hash;             /* hash[i]: entry i's hash; owned */
    uint32_t *slots;            /* hash slots: index + 1, 0 = empty; owned; never NULL after a
                                 * successful init */
    uint32_t mask;              /* number of slots - 1 (a power of two), at least 2 * n + 1
                                 * slots */
    uint32_t n;                 /* entries stored */
    uint32_t cap;               /* capacity of v and hash, in entries */
    uint32_t elem;              /* bytes per entry */
    uint32_t first_cap;         /* the capacity of the first allocation of v */
} xsp_codetab;

/* Makes t an empty table of entries of elem bytes, with nslots slots (a power of two, at least
 * 2) and room for first_cap entries at the first add.  Returns 0, or -1 when out of memory
 * (t is then an empty table that xsp_codetab_free accepts). */
int xsp_codetab_init(xsp_codetab *t, size_t elem, uint32_t nslots, uint32_t first_cap);

/* Frees t's storage (not what the entries hold: release that first) and leaves t empty.
 * Accepts a table whose init failed, or one zeroed.  Cannot fail. */
void xsp_codetab_free(xsp_codetab *t);

/* Empties t without freeing its storage: the entries stay readable at their old indexes
 * (xsp_codetab_at, up to the n read before) until the next add, so that a caller can release
 * what they hold after the table looks empty to anyone called meanwhile.  Cannot fail. */
void xsp_codetab_reset(xsp_codetab *t);

/* The hash of a key made of a code object, an offset in it and a type (either of the two may
 * be 0 / NULL when the key has none).  Cannot fail. */
uint64_t xsp_codetab_hash(const void *code, int offset, const void *type);

/* Entry i (i < t->n). */
static inline void *xsp_codetab_at(const xsp_codetab *t, uint32_t i)
{
    return t->v + (size_t)i * t->elem;
}

/* The first slot a key of hash h is probed at, for xsp_codetab_next. */
static inline uint32_t xsp_codetab_probe(const xsp_codetab *t, uint64_t h)
{
    return (uint32_t)h & t->mask;
}

/* The next candidate for a key of hash h, probing from slot *j on: the index + 1 of an entry
 * whose hash is h (the caller compares its key; *j then points past it), or 0 when none is
 * left, with *j the empty slot where the key belongs (for xsp_codetab_add).  Allocates
 * nothing; cannot fail.  Usage:
 *     uint32_t j = xsp_codetab_probe(t, h);
 *     for (uint32_t k; (k = xsp_codetab_next(t, h, &j)) != 0;)
 *         if (same key as xsp_codetab_at(t, k - 1)) ...found...
 *     ...not found; j is the slot for xsp_codetab_add... */
static inline uint32_t xsp_codetab_next(const xsp_codetab *t, uint64_t h, uint32_t *j)
{
    for (uint32_t k; (k = t->slots[*j]) != 0;) {
        *j = (*j + 1) & t->mask;
        if (t->hash[k - 1] == h)
            return k;
    }
    return 0;
}

/* Adds a copy of entry (elem bytes) with hash h, for a key not in t, at slot j (what the probe
 * that did not find it left), growing the storage or the slots first where needed (the slot
 * is then found again).  Returns the new entry's index, or -1 when out of memory (t unchanged:
 * the caller still owns what entry holds). */
int64_t xsp_codetab_add(xsp_codetab *t, uint32_t j, uint64_t h, const void *entry);

#endif
