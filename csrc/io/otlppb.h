/*
 * otlppb.h: spans of a trace as one OTLP/HTTP request body, the protobuf encoding of
 * opentelemetry-proto's ExportTraceServiceRequest (docs/format.md, "OTLP"); the encoder of
 * xsp/formats/otlp.py's send().
 *
 * The bytes are those that the OpenTelemetry SDK's encoder gives for the same batch of the
 * ReadableSpans otlp.spans() makes (encode_spans(...).SerializeToString(), protobuf's upb
 * serializer): fields in field-number order, a field at its default left out, a set message
 * field written even when empty.  The request, for the fixed schema xsp sends:
 *
 *   ExportTraceServiceRequest  1: ResourceSpans (one)
 *   ResourceSpans              1: Resource (given, serialized)   2: ScopeSpans (one)
 *   ScopeSpans                 1: InstrumentationScope (given)   2: Span (each span, in order)
 *   Span      1: trace_id (16 bytes, big-endian)   2: span_id (8)   4: parent_span_id (8; a
 *             parent in the same trace)   5: name (UTF-8; not when empty)   6: kind = 1
 *             (INTERNAL)   7, 8: start and end Unix ns (fixed64; not when 0)   9: attributes
 *             (KeyValue, otlpspan.h's order)   13: a Link (a step span's parent in another
 *             trace, with trace_per="step")   15: Status (empty: unset)   16: flags = 256
 *             (fixed32: SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)
 *   Link      1: trace_id   2: span_id   4: KeyValue xsp.link = "parent"   6: flags = 256
 *   KeyValue  1: key   2: AnyValue (1: string_value | 3: int_value, varint of the int64's two's
 *             complement | 4: double_value, fixed64 of its IEEE bits, NaN's payload kept)
 *
 * Strings are written with each byte that is not part of well-formed UTF-8 as '?' (the SDK's
 * spans hold otlp.spans()'s printable() text), one byte for one.
 *
 * Lengths before bodies: each span's length is computed from its attributes (otlpspan.c
 * resolves them once; the sizes are arithmetic on the lengths it gives) and the span is then
 * written forward; the lengths of the ResourceSpans and ScopeSpans around all the spans are
 * known only at the end, so the spans are written after a gap as large as the longest header
 * can be, and the header is then written into the gap, ending where the spans begin: one pass
 * over the spans, no copy of the body.
 */
#ifndef XSP_OTLPPB_H
#define XSP_OTLPPB_H

#include <stddef.h>
#include <stdint.h>

#include "../core/trace.h"
#include "otlpspan.h"

/* A request's bytes, in a buffer reused from request to request (zero it before the first
 * xsp_otlp_encode). */
typedef struct xsp_otlp_pb {
    unsigned char *buf;         /* the buffer; owned */
    size_t cap;                 /* its size */
    const unsigned char *data;  /* the last request: data[0..len) inside buf, or NULL */
    size_t len;                 /* its bytes */
    xsp_otlp_span span;         /* the span being encoded (its tables reused) */
} xsp_otlp_pb;

/* Encodes spans lo to hi - 1 of t (lo <= hi <= t->n_spans) under the columns c as one
 * ExportTraceServiceRequest: one ResourceSpans holding the serialized Resource message
 * resource[0..res_len) and one ScopeSpans holding the serialized InstrumentationScope
 * scope[0..scope_len) and the spans, in id order (lo == hi: the empty request, 0 bytes).
 * Returns 0 with pb->data and pb->len set, or -1 on allocation failure or a trace index past
 * c->n_traces (pb->data then NULL).  t, c, resource and scope are not modified or kept. */
int xsp_otlp_encode(xsp_otlp_pb *pb, const xsp_trace *t, const xsp_otlp_cols *c, uint32_t lo,
                    uint32_t hi, const void *resource, size_t res_len, const void *scope,
                    size_t scope_len);

/* Frees pb's buffer and tables (not pb itself), leaving it zeroed.  Accepts NULL. */
void xsp_otlp_pb_release(xsp_otlp_pb *pb);

#endif
