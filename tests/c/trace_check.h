/* trace_check.h: reading a finished xsp_trace in the C tests (names and integer attributes of
 * spans).  Include after core/trace.h. */
#ifndef XSP_TRACE_CHECK_H
#define XSP_TRACE_CHECK_H

#include <stdint.h>
#include <string.h>

#include "core/strtab.h"
#include "core/trace.h"

/* The name of span id of t. */
static inline const char *span_name(const xsp_trace *t, uint32_t id)
{
    return xsp_strtab_get(&t->strings, t->spans[id].name, NULL);
}

/* The value of integer attribute key of span id of t, or def when the span has none. */
static inline int64_t span_attr_int(const xsp_trace *t, uint32_t id, const char *key,
                                    int64_t def)
{
    const xsp_span *s = &t->spans[id];
    for (uint32_t i = 0; i < s->attr_n; i++) {
        const xsp_attr *a = &t->attrs[s->attr_off + i];
        if (strcmp(xsp_strtab_get(&t->strings, a->key, NULL), key) == 0)
            return a->v.i;
    }
    return def;
}

#endif
