/*
 * inmemo.c: the decode memo of op-input payloads (inmemo.h).  Load factor at most 1/2;
 * growing rehashes by the stored hashes (the bytes are not read again).
 */
#include <stdlib.h>
#include <string.h>

#include "inmemo.h"
#include "strtab.h"

/* Doubles the table (or makes the first, 1024 slots).  0, or -1 (out of memory; unchanged). */
static int grow(xsp_inmemo *m)
{
    uint32_t cap = m->cap ? m->cap * 2 : 1024;
    if (cap < m->cap)
        return -1;
    xsp_inmemo_slot *s = calloc(cap, sizeof *s);
    if (!s)
        return -1;
    for (uint32_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].p)
            continue;
        uint32_t j = (uint32_t)m->slots[i].hash & (cap - 1);
        while (s[j].p)
            j = (j + 1) & (cap - 1);
        s[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = s;
    m->cap = cap;
    return 0;
}

int xsp_inmemo_decode(xsp_inmemo *m, xsp_trace *t, const xsp_inputs_keys *k, const uint8_t *p,
                      uint32_t len, uint32_t *n_added)
{
    if ((m->used + 1) * 2 > m->cap && grow(m) != 0)
        return xsp_inputs_decode(t, k, p, len, n_added);
    uint64_t h = xsp_strtab_hash((const char *)p, len);
    uint32_t j = (uint32_t)h & (m->cap - 1);
    for (; m->slots[j].p; j = (j + 1) & (m->cap - 1)) {
        xsp_inmemo_slot *s = &m->slots[j];
        if (s->hash != h || s->len != len || memcmp(s->p, p, len) != 0)
            continue;
        *n_added = 0;
        for (uint32_t i = 0; i < s->n; i++) {
            if (xsp_trace_add_attr(t, &s->a[i]) == UINT32_MAX)
                return -1;
            (*n_added)++;
        }
        m->hits++;
        return s->rc;
    }
    uint32_t first = t->n_attrs;
    int rc = xsp_inputs_decode(t, k, p, len, n_added);
    if (rc < 0 || *n_added > XSP_INMEMO_ATTRS)
        return rc;
    xsp_inmemo_slot *s = &m->slots[j];
    s->p = p;
    s->hash = h;
    s->len = len;
    s->rc = rc;
    s->n = *n_added;
    if (s->n)
        memcpy(s->a, t->attrs + first, s->n * sizeof *s->a);
    m->used++;
    return rc;
}

void xsp_inmemo_free(xsp_inmemo *m)
{
    if (!m)
        return;
    free(m->slots);
    memset(m, 0, sizeof *m);
}
