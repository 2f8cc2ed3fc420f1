/*
 * otlpspan.h: one OTLP span of an xsp span, as xsp/formats/otlp.py's spans() makes it (an
 * OpenTelemetry SDK ReadableSpan): its ids, its parent or its link, its Unix-epoch times and
 * its attributes in order.  The two encodings of OTLP write what this gives: otlpw.c as
 * OTLP/JSON (the file of otlp.write), otlppb.c as protobuf (the requests of otlp.send), so the
 * mapping (docs/format.md, "OTLP") lives in one place.
 *
 * The attributes, in the order otlp.spans() inserts them into its dict: xsp.level, xsp.kind,
 * xsp.span_id, xsp.thread (an int below 2**63, else its decimal text), xsp.thread_name (when
 * not empty), xsp.module (model and module spans), xsp.flags (when nonzero), xsp.leveled_ns,
 * then the span's own attributes as "xsp.<key>" (a key repeated in the span: its first place,
 * its last value, as a dict keeps it), "xsp.attr." inserted while the name is taken; the bytes
 * of a key that are not UTF-8 as '?' (before the comparison).  String values and the name are
 * given as the trace holds them: each byte that is not part of well-formed UTF-8 is written as
 * '?' by the encoding (one byte for one, so a length is the same before and after).
 *
 * What needs a view of the whole trace (the ids' seed, each span's trace with
 * trace_per="step", the wall-clock offset and its range check, the leveled latencies) is
 * computed in Python and passed as the columns below.
 */
#ifndef XSP_OTLPSPAN_H
#define XSP_OTLPSPAN_H

#include <stddef.h>
#include <stdint.h>

#include "../core/trace.h"

typedef struct xsp_otlp_cols {
    uint64_t span_base;         /* span id of xsp span i: span_base + i (no wrap: checked by
                                 * the caller) */
    uint64_t offset;            /* Unix-epoch ns = t + offset, modulo 2**64 (the caller has
                                 * checked that every result is in range) */
    uint32_t n_traces;          /* trace ids: 0 the profile's, then one per step; >= 1 */
    const uint64_t *trace_hi;   /* their high and low 64 bits */
    const uint64_t *trace_lo;
    const int32_t *trace_ix;    /* per span: its trace (an index into the ids), or NULL: all
                                 * the profile's */
    /* leveled latencies, by span id, increasing */
    uint32_t n_lev;
    const int64_t *lev_id;
    const double *lev_val;
} xsp_otlp_cols;

enum xsp_otlp_type {
    XSP_OTLP_STR,               /* AnyValue string_value */
    XSP_OTLP_INT,               /* int_value */
    XSP_OTLP_DOUBLE             /* double_value */
};

/* One attribute of a span. */
typedef struct xsp_otlp_kv {
    const char *key;            /* its name: UTF-8, nothing left to replace; valid until the
                                 * next xsp_otlp_span_get on the same xsp_otlp_span */
    size_t key_len;             /* its bytes */
    int key_plain;              /* nonzero: the key is printable ASCII without '"' or '\\' (one
                                 * of the names xsp sets), written as it is in any encoding */
    int type;                   /* enum xsp_otlp_type */
    int64_t i;                  /* XSP_OTLP_INT */
    double f;                   /* XSP_OTLP_DOUBLE */
    const char *s;              /* XSP_OTLP_STR: the bytes as the trace holds them */
    size_t n;                   /* their length */
} xsp_otlp_kv;

enum xsp_otlp_parent {
    XSP_OTLP_ROOT,              /* no parent */
    XSP_OTLP_PARENT,            /* parent_span_id = parent_id, in the same trace */
    XSP_OTLP_LINK               /* a root linked to its xsp parent in another trace (a step
                                 * span with trace_per="step"): link to link_trace, parent_id,
                                 * with the attribute xsp.link = "parent" */
};

/* A span as the encodings write it; reused from span to span (zero it before the first
 * xsp_otlp_span_get, release it with xsp_otlp_span_release). */
typedef struct xsp_otlp_span {
    uint32_t trace;             /* its trace id: an index into the columns' ids */
    uint32_t link_trace;        /* XSP_OTLP_LINK: the parent's trace id's index */
    int parent;                 /* enum xsp_otlp_parent */
    uint64_t span_id;           /* its span id */
    uint64_t parent_id;         /* the parent's span id (XSP_OTLP_PARENT, XSP_OTLP_LINK) */
    const char *name;           /* its name as the trace holds it (empty: left out) */
    size_t name_len;            /* its bytes */
    uint64_t start, end;        /* Unix-epoch ns (0: left out, as protobuf leaves out a
                                 * default) */
    const xsp_otlp_kv *kv;      /* its attributes, in order */
    size_t n_kv;                /* how many */
    /* private: the tables reused from span to span */
    xsp_otlp_kv *kv_buf;        /* room for the attributes */
    size_t kv_cap;              /* its size, in attributes */
    char *keys;                 /* the span's own attribute names, back to back */
    size_t keys_used, keys_cap; /* bytes used and allocated */
    struct xsp_otlp_kent {
        size_t off, len;        /* a name's offset in keys and its length */
    } *key_ent;                 /* the names' places */
    size_t n_keys, keys_capn;   /* names and room for them */
    char *scratch;              /* a key made printable */
    size_t scratch_cap;         /* its room */
    uint32_t lev_next;          /* the first leveled entry not below the last span asked */
    uint32_t last;              /* the last span asked + 1 (0: none yet) */
    char tid[24];               /* xsp.thread's decimal text, past int64 */
} xsp_otlp_span;

/* Fills s with span i of t (i < t->n_spans) under the columns c.  Spans may be asked in any
 * order (in increasing order the leveled latencies are found by a cursor, else by a binary
 * search).  Returns 0, or -1 on allocation failure or a trace index past c->n_traces (s then
 * holds no span; its tables stay valid for release).  t and c are not modified; s points into
 * t, c and its own tables until the next call. */
int xsp_otlp_span_get(xsp_otlp_span *s, const xsp_trace *t, const xsp_otlp_cols *c, uint32_t i);

/* Frees s's tables (not s itself), leaving it zeroed for reuse.  Accepts NULL. */
void xsp_otlp_span_release(xsp_otlp_span *s);

#endif
