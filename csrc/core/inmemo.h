/*
 * inmemo.h: decodes each distinct op-input payload once per merge (record_shapes).
 *
 * A model runs the same ops on the same shapes every iteration, so a trace of n ops holds few
 * distinct input payloads (the encoder's bytes of one op's inputs: csrc/core/inputs.h).  The
 * memo maps a payload's bytes to the attributes its decoding appended (the texts already
 * interned in the trace's strings), so a repeat appends copies of them: a hash of the bytes
 * and a compare instead of formatting four texts and interning them again.  Open addressing,
 * keyed by the payload's hash, length and bytes (which stay in the thread buffers for the whole
 * merge, so the memo points at them instead of copying).  A payload that is malformed is
 * remembered too (it counts as malformed each time, as without the memo).
 */
#ifndef XSP_INMEMO_H
#define XSP_INMEMO_H

#include <stdint.h>

#include "inputs.h"
#include "trace.h"

#define XSP_INMEMO_ATTRS 6u     /* the most attributes one decode appends (inputs.c) */

typedef struct xsp_inmemo_slot {
    const uint8_t *p;           /* the payload's bytes (not owned); NULL: an empty slot */
    uint64_t hash;              /* xsp_strtab_hash of the bytes */
    uint32_t len;               /* bytes */
    int32_t rc;                 /* what xsp_inputs_decode returned: 0 or 1 (malformed) */
    uint32_t n;                 /* attributes in a */
    xsp_attr a[XSP_INMEMO_ATTRS]; /* the attributes decoding appended */
} xsp_inmemo_slot;

typedef struct xsp_inmemo {
    xsp_inmemo_slot *slots;     /* cap slots, or NULL before the first use; owned */
    uint32_t cap;               /* a power of two, or 0 */
    uint32_t used;              /* slots holding a payload */
    uint64_t hits;              /* decodes saved */
} xsp_inmemo;

/* As xsp_inputs_decode (same arguments, results and failure contract), through the memo m
 * (zero-initialised before the first call; the payload bytes must stay put while m is used).
 * When the memo cannot grow (out of memory) it decodes without it: never a failure of its
 * own. */
int xsp_inmemo_decode(xsp_inmemo *m, xsp_trace *t, const xsp_inputs_keys *k, const uint8_t *p,
                      uint32_t len, uint32_t *n_added);

/* Frees what m owns and zeroes it.  Accepts NULL. */
void xsp_inmemo_free(xsp_inmemo *m);

#endif
