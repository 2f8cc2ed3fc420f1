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
 * attributes and what each span holds come from otlpspan.h (the mapping, shared with the
 * protobuf encoder otlppb.h); bytes that are not UTF-8 are written as '?'.  The resource and
 * scope around the spans come as text.
 */
#ifndef XSP_OTLPW_H
#define XSP_OTLPW_H

#include <stdint.h>

#include "../core/trace.h"
#include "jsonw.h"
#include "otlpspan.h"

/* Writes the span objects of every span of t to w, separated by ",".  Returns 0, or -1 on
 * allocation failure or a column out of range (a trace index past n_traces: w's text is then
 * incomplete).  Failures of w itself are sticky in w.  t and cols are not modified. */
int xsp_otlp_write_spans(xsp_jsonw *w, const xsp_trace *t, const xsp_otlp_cols *cols);

#endif
