/*
 * strtab.c: the interning string table (see strtab.h for the contract).
 *
 * Layout: strings are appended NUL-terminated to one growing arena; offs/lens/hashes are
 * parallel arrays indexed by id; slots is an open-addressing table (linear probing) holding
 * id + 1, kept at most half full so probes stay short.  Ids are never reused, and clear()
 * keeps capacity so a thread buffer reused by the next session does not reallocate.
 *
 * Strings longer than XSP_STRTAB_MAX_LEN (the format's limit, docs/format.md) are cut at a
 * UTF-8 character boundary, never inside a character, so a cut name still decodes, and the
 * table counts the cut strings it adds (ncut) for the trace's "names.cut" counter.  Only a
 * string over the limit pays for this: a bounded look at the 4 bytes around the cut.
 *
 * Historical note: a pointer-keyed cache (name pointer -> id) would skip hashing for aten op
 * names, whose strings live as long as the operator registration, but record_function and
 * autograd names are temporaries, so the table always keys on the bytes.
 */
#include "strtab.h"

#include <stdlib.h>
#include <string.h>

#define MIN_SLOTS 256u

static inline uint64_t load64(const char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint64_t mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

uint64_t xsp_strtab_hash(const char *s, size_t len)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (len * 0xc2b2ae3d27d4eb4fULL);
    size_t i = 0;
    for (; i + 8 <= len; i += 8)
        h = (h ^ load64(s + i)) * 0x100000001b3ULL * 0x9e3779b97f4a7c15ULL;
    if (i < len) {
        uint64_t tail = 0;
        memcpy(&tail, s + i, len - i);
        h = (h ^ tail) * 0x9e3779b97f4a7c15ULL;
    }
    return mix(h);
}

int xsp_strtab_init(xsp_strtab *t)
{
    memset(t, 0, sizeof *t);
    t->arena_cap = 1024;
    t->arena = malloc(t->arena_cap);
    t->cap = 64;
    t->offs = malloc(t->cap * sizeof *t->offs);
    t->lens = malloc(t->cap * sizeof *t->lens);
    t->hashes = malloc(t->cap * sizeof *t->hashes);
    t->slots = calloc(MIN_SLOTS, sizeof *t->slots);
    if (!t->arena || !t->offs || !t->lens || !t->hashes || !t->slots) {
        xsp_strtab_free(t);
        return -1;
    }
    t->mask = MIN_SLOTS - 1;
    xsp_strtab_clear(t);
    return 0;
}

void xsp_strtab_free(xsp_strtab *t)
{
    if (!t)
        return;
    free(t->arena);
    free(t->offs);
    free(t->lens);
    free(t->hashes);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

void xsp_strtab_clear(xsp_strtab *t)
{
    if (!t->arena)
        return;
    memset(t->slots, 0, ((size_t)t->mask + 1) * sizeof *t->slots);
    t->arena[0] = '\0';
    t->arena_len = 1;
    t->offs[0] = 0;
    t->lens[0] = 0;
    t->hashes[0] = xsp_strtab_hash("", 0);
    t->n = 1;
    t->ncut = 0;
    t->slots[t->hashes[0] & t->mask] = 1;
}

/* Doubles the slot table and rehashes. Returns 0 or -1 (table unchanged). */
static int grow_slots(xsp_strtab *t)
{
    uint32_t nslots = (t->mask + 1) * 2;
    uint32_t *slots = calloc(nslots, sizeof *slots);
    if (!slots)
        return -1;
    for (uint32_t id = 0; id < t->n; id++) {
        uint32_t j = (uint32_t)t->hashes[id] & (nslots - 1);
        while (slots[j])
            j = (j + 1) & (nslots - 1);
        slots[j] = id + 1;
    }
    free(t->slots);
    t->slots = slots;
    t->mask = nslots - 1;
    return 0;
}

/* Makes room for one more id and len + 1 arena bytes. Returns 0 or -1 (table unchanged). */
static int reserve(xsp_strtab *t, size_t len)
{
    if (t->arena_len + len + 1 > t->arena_cap) {
        size_t cap = t->arena_cap * 2;
        while (cap < t->arena_len + len + 1)
            cap *= 2;
        char *a = realloc(t->arena, cap);
        if (!a)
            return -1;
        t->arena = a;
        t->arena_cap = cap;
    }
    if (t->n == t->cap) {
        if (t->cap >= UINT32_MAX / 2)
            return -1;
        uint32_t cap = t->cap * 2;
        uint64_t *o = realloc(t->offs, cap * sizeof *o);
        if (!o)
            return -1;
        t->offs = o;
        uint32_t *l = realloc(t->lens, cap * sizeof *l);
        if (!l)
            return -1;
        t->lens = l;
        uint64_t *h = realloc(t->hashes, cap * sizeof *h);
        if (!h)
            return -1;
        t->hashes = h;
        t->cap = cap;
    }
    if ((uint64_t)(t->n + 1) * 2 > (uint64_t)t->mask + 1)
        return grow_slots(t);
    return 0;
}

size_t xsp_strtab_cut_len(const char *s, size_t len)
{
    if (len <= XSP_STRTAB_MAX_LEN)
        return len;
    const unsigned char *u = (const unsigned char *)s;
    size_t k = XSP_STRTAB_MAX_LEN;     /* u[k] is the first byte not kept */
    /* a continuation byte (10xxxxxx) there: back to the first byte of its character, at most
     * 3 bytes back (a UTF-8 character is at most 4 bytes) */
    while (k > XSP_STRTAB_MAX_LEN - 3 && (u[k] & 0xC0) == 0x80)
        k--;
    if (k < XSP_STRTAB_MAX_LEN && (u[k] & 0xC0) != 0xC0)
        return XSP_STRTAB_MAX_LEN;     /* not UTF-8 there: no character to keep whole */
    return k;
}

uint32_t xsp_strtab_intern(xsp_strtab *t, const char *s, size_t len)
{
    uint32_t cut = 0;
    if (__builtin_expect(len > XSP_STRTAB_MAX_LEN, 0)) {
        len = xsp_strtab_cut_len(s, len);
        cut = 1;
    }
    if (!t->slots)
        return UINT32_MAX;
    uint64_t h = xsp_strtab_hash(s, len);
    uint32_t j = (uint32_t)h & t->mask;
    for (;;) {
        uint32_t slot = t->slots[j];
        if (!slot)
            break;
        uint32_t id = slot - 1;
        if (t->hashes[id] == h && t->lens[id] == len && memcmp(t->arena + t->offs[id], s, len) == 0)
            return id;
        j = (j + 1) & t->mask;
    }
    if (reserve(t, len) != 0)
        return UINT32_MAX;
    uint32_t id = t->n++;
    t->offs[id] = t->arena_len;
    t->lens[id] = (uint32_t)len;
    t->hashes[id] = h;
    if (len)
        memcpy(t->arena + t->arena_len, s, len);
    t->arena[t->arena_len + len] = '\0';
    t->arena_len += len + 1;
    t->ncut += cut;
    j = (uint32_t)h & t->mask;
    while (t->slots[j])
        j = (j + 1) & t->mask;
    t->slots[j] = id + 1;
    return id;
}

uint32_t xsp_strtab_find(const xsp_strtab *t, const char *s, size_t len)
{
    if (len > XSP_STRTAB_MAX_LEN)
        len = xsp_strtab_cut_len(s, len);
    if (!t->slots)
        return UINT32_MAX;
    uint64_t h = xsp_strtab_hash(s, len);
    for (uint32_t j = (uint32_t)h & t->mask; t->slots[j]; j = (j + 1) & t->mask) {
        uint32_t id = t->slots[j] - 1;
        if (t->hashes[id] == h && t->lens[id] == len && memcmp(t->arena + t->offs[id], s, len) == 0)
            return id;
    }
    return UINT32_MAX;
}

const char *xsp_strtab_get(const xsp_strtab *t, uint32_t id, size_t *len)
{
    if (id >= t->n)
        return NULL;
    if (len)
        *len = t->lens[id];
    return t->arena + t->offs[id];
}

size_t xsp_strtab_bytes(const xsp_strtab *t)
{
    return t->arena_cap + (size_t)t->cap * (sizeof *t->offs + sizeof *t->lens + sizeof *t->hashes)
           + ((size_t)t->mask + 1) * sizeof *t->slots;
}
