/*
 * strtab.h: an interning string table.
 *
 * A strtab maps byte strings to dense 32-bit ids (0, 1, 2, ...) in insertion order and back.
 * Id 0 is always the empty string, so a zeroed id field means "no name".  Strings are copied
 * into an arena owned by the table and stay valid until the table is cleared or freed.
 *
 * The same structure serves two roles:
 *  - per thread, while recording: each thread buffer owns one, touched only by its thread, so
 *    lookups take no lock; a lookup of a known name allocates nothing (steady state);
 *  - in a merged trace: one table for all names of the trace.
 *
 * Lookups hash the bytes (64-bit multiply-mix, 8 bytes at a time) into an open-addressing table
 * of power-of-two size kept at most half full.  Not thread-safe: the owner serialises access.
 */
#ifndef XSP_STRTAB_H
#define XSP_STRTAB_H

#include <stddef.h>
#include <stdint.h>

#define XSP_STRTAB_MAX_LEN 0xFFFFu   /* longer strings are cut to at most this many bytes */

typedef struct xsp_strtab {
    char     *arena;      /* string bytes, each NUL-terminated; owned */
    size_t    arena_len;  /* bytes used in arena */
    size_t    arena_cap;  /* bytes allocated for arena */
    uint64_t *offs;       /* offs[id] = byte offset of string id in arena; owned */
    uint32_t *lens;       /* lens[id] = length of string id, without the NUL; owned */
    uint32_t  n;          /* number of strings, including the empty string at id 0 */
    uint32_t  cap;        /* capacity of offs and lens */
    uint32_t *slots;      /* hash slots: id + 1, 0 = empty; owned */
    uint64_t *hashes;     /* hashes[id] = hash of string id, to skip memcmp on mismatch; owned */
    uint32_t  mask;       /* number of slots - 1 (power of two), 0 when no slots yet */
    uint32_t  ncut;       /* strings added cut to XSP_STRTAB_MAX_LEN (each once, when added;
                           * reset by clear) */
} xsp_strtab;

/* Initialises *t as a table holding only "" (id 0). Returns 0, or -1 on allocation failure
 * (then *t is zeroed and safe to xsp_strtab_free). */
int xsp_strtab_init(xsp_strtab *t);

/* Frees everything *t owns and zeroes it. Accepts NULL and a zeroed table. */
void xsp_strtab_free(xsp_strtab *t);

/* Forgets all strings but "" and keeps the allocated memory for reuse. Cannot fail. */
void xsp_strtab_clear(xsp_strtab *t);

/* Returns the id of the len bytes at s, adding a copy if new.  s need not be NUL-terminated
 * and may contain NULs.  A string longer than XSP_STRTAB_MAX_LEN is cut to
 * xsp_strtab_cut_len(s, len) bytes first (so its id is that of the cut string), and when the
 * cut string is new, t->ncut counts it.  Returns UINT32_MAX when the string is new and memory
 * cannot be grown; the table is then unchanged. */
uint32_t xsp_strtab_intern(xsp_strtab *t, const char *s, size_t len);

/* The id of the len bytes at s (cut as xsp_strtab_intern cuts them) when the table holds
 * them, else UINT32_MAX; the table is never changed.  Cannot fail. */
uint32_t xsp_strtab_find(const xsp_strtab *t, const char *s, size_t len);

/* The length the table keeps of the len bytes at s: len itself when len <=
 * XSP_STRTAB_MAX_LEN; otherwise at most XSP_STRTAB_MAX_LEN bytes, cut before the first byte
 * of the UTF-8 character that would straddle the limit (so valid UTF-8 stays valid).  Bytes
 * that are not UTF-8 there (more than 3 continuation bytes in a row, or continuation bytes
 * after an ASCII byte) are cut at XSP_STRTAB_MAX_LEN.  Reads at most the 4 bytes at
 * s[XSP_STRTAB_MAX_LEN - 3 .. XSP_STRTAB_MAX_LEN], only when len is over the limit.  Cannot
 * fail. */
size_t xsp_strtab_cut_len(const char *s, size_t len);

/* Returns the NUL-terminated string with the given id and stores its length in *len (if len is
 * not NULL); the pointer is owned by the table.  Returns NULL for an id not in the table. */
const char *xsp_strtab_get(const xsp_strtab *t, uint32_t id, size_t *len);

/* Bytes of heap memory the table holds (for memory accounting). Cannot fail. */
size_t xsp_strtab_bytes(const xsp_strtab *t);

/* The hash used by the table, exposed for tests. Cannot fail. */
uint64_t xsp_strtab_hash(const char *s, size_t len);

#endif
