/*
 * otlpw.h: the spans of a trace as OTLP/JSON spans (docs/format.md, "OTLP"), streamed through
 * jsonw.h; the writer of xsp/formats/otlp.py's write().
 *
 * The text is what the reference path gives, value for value (json.load of both is equal):
 * the OpenTelemetry SDK's encoder (encode_spans) of the ReadableSpans that otlp.spans() makes,
 * protobuf's JSON mapping of it (MessageToDict, enums as integers) and the ids as lowercase
 * hex.  Per span, in field order:
 *
 *   {"traceId":"<32 hex>","spanId":"<16 hex>"[,"parentSpanId":"<16 hex>"][,"name":"..."],
 *    "kind":1[,"startTimeUnixNano":"<decimal>"][,"endTimeUnixNano":"<decimal>"],
 *    "attributes":[{"key":"xsp.level","value":{"stringValue":"L"}}, ...]
 *    [,"links":[{"traceId":..,"spanId":..,"attributes":[{"key":"xsp.link","value":
 *    {"stringValue":"parent"}}],"flags":256}]],"status":{},"flags":256}
 *
 * (the mapping leaves out a field at its default: an empty name, a time of 0; 64-bit integers
 * are decimal strings, doubles Python's repr or "NaN", "Infinity", "-Infinity").  The
 * attributes, in the order otlp.spans() inserts them into its dict: xsp.level, xsp.kind,
 * xsp.span_id, xsp.thread (an int below 2**63, else its decimal text), xsp.thread_name (when
 * not empty), xsp.module (model and module spans), xsp.flags (when nonzero), xsp.leveled_ns,
 * then the span's own attributes as "xsp.<key>" (a key repeated in the span: its first place,
 * its last value, as a dict keeps it), "xsp.attr." inserted while the name is taken; bytes
 * that are not UTF-8 as '?', in keys (before the comparison) and values.
 *
 * What needs a view of the whole trace (the ids' seed, each span's trace with
 * trace_per="step", the wall-clock offset and its range check, the leveled latencies) is
 * computed in Python and passed as the columns below; the resource and scope around the spans
 * come as text.
 */
#ifndef XSP_OTLPW_H
#define XSP_OTLPW_H

#include <stdint.h>

#include "../core/trace.h"
#include "jsonw.h"

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

/* Writes the span objects of every span of t to w, separated by ",".  Returns 0, or -1 on
 * allocation failure or a column out of range (a trace index past n_traces: w's text is then
 * incomplete).  Failures of w itself are sticky in w.  t and cols are not modified. */
int xsp_otlp_write_spans(xsp_jsonw *w, const xsp_trace *t, const xsp_otlp_cols *cols);

#endif
