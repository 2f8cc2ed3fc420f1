/*
 * kjson.h: a streaming reader of Kineto's trace JSON (torch.profiler's export_chrome_trace)
 * into a merged trace (trace.h), with bounded memory and typed, located errors.
 *
 * The text is fed in chunks of any size (a file read piece by piece, a gzip stream as it is
 * inflated): yajl (a SAX JSON parser packaged by Debian, as msgpack-c is) tokenises it, and
 * each event of traceEvents is kept as one fixed-size record plus its args as trace
 * attributes, interned as they arrive, so memory grows with the events read, never with
 * whitespace, nesting or a number's length.  Numbers are taken as text and range-checked
 * before any conversion (ts and dur exactly: decimal microseconds to integer ns, rounded half
 * to even).  At the end the records become spans: nested per thread by time, GPU work under
 * the op whose runtime call has its correlation id, kinds from categories (docs/format.md,
 * "Kineto's JSON", says which and what is counted).
 *
 * Errors say where: a JSON syntax error or a nesting too deep gives the byte offset into the
 * text fed; a malformed event gives its index in traceEvents and the field.  After an error
 * the reader only accepts xsp_kjson_free.
 */
#ifndef XSP_KJSON_H
#define XSP_KJSON_H

#include <stddef.h>
#include <stdint.h>

#include "../core/trace.h"

typedef struct xsp_kjson xsp_kjson;

/* The most containers open at once (deeper text is refused with its offset). */
#define XSP_KJSON_MAX_DEPTH 1000
/* The longest token (a string with its quotes, a number, a literal) the reader takes: yajl
 * lexes a token that spans several pieces of text again from its start at every piece, so a
 * token's cost grows with its length squared; longer ones are refused at their first byte. */
#define XSP_KJSON_MAX_TOKEN ((uint64_t)16 << 20)
/* The most attributes an event may give its span (its args plus what xsp derives). */
#define XSP_KJSON_MAX_ATTRS 250

/* What went wrong: a one-line message, the event's index in traceEvents (-1: not one
 * event's fault) and the byte offset into the text (-1: not known / not a syntax error). */
typedef struct xsp_kjson_error {
    char    msg[512];   /* NUL-terminated; "" while there is no error */
    int64_t event;      /* index into traceEvents, or -1 */
    int64_t offset;     /* byte offset into the text fed, or -1 */
    int     nomem;      /* 1 when the cause is allocation failure */
} xsp_kjson_error;

/* A new reader, or NULL on allocation failure.  Free it with xsp_kjson_free. */
xsp_kjson *xsp_kjson_new(void);

/* Frees the reader and whatever it holds.  Accepts NULL. */
void xsp_kjson_free(xsp_kjson *r);

/* Feeds the next len bytes of the text (any split, len 0 allowed).  Returns 0, or -1 with
 * the error in xsp_kjson_err(r) (the reader is then spent).  The caller keeps buf. */
int xsp_kjson_feed(xsp_kjson *r, const void *buf, size_t len);

/* Ends the text and builds the trace.  Returns the trace (owned by the caller, who frees it
 * with xsp_trace_free), or NULL with the error in xsp_kjson_err(r).  Either way the reader is
 * spent: only xsp_kjson_free may follow. */
xsp_trace *xsp_kjson_finish(xsp_kjson *r);

/* The reader's error (msg "" when none).  Cannot fail; the pointer lives as long as r. */
const xsp_kjson_error *xsp_kjson_err(const xsp_kjson *r);

#endif
