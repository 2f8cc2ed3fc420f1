/*
 * jsonw.h: a streaming JSON text writer, the one layer the Kineto, Chrome and OTLP exporters
 * (kinetow.c, chromew.c, otlpw.c) share.
 *
 * Text goes into a fixed buffer that is flushed to a file descriptor (deflated on the way when
 * gzip is asked: a gzip member of its own, mtime 0), so memory stays bounded whatever the size
 * of the trace; the file's writeback to disk is started as it grows (jsonw.c).  Errors are
 * sticky: the first failing write(2) or deflate call is remembered, every later call does
 * nothing, and xsp_jsonw_close reports it; the exporters therefore never check a return value
 * in their loops.
 *
 * The text is always valid UTF-8 JSON, written as xsp's Python writers wrote it (so json.load of
 * either is the same value):
 *   - a string's bytes that are not part of a well-formed UTF-8 sequence (the bytes the trace
 *     keeps from names that were not UTF-8; Python sees them as lone surrogates through
 *     surrogateescape, and the writers wrote each as '?') become '?', one per byte;  '"', '\\'
 *     and control characters are escaped as json.dumps escapes them; other characters are
 *     written as they are (ensure_ascii off);
 *   - a double as Python's repr writes it (the shortest text that reads back the same double:
 *     "0.1", "1e-05", "1e+16", "100.0"); NaN and the infinities, which JSON lacks, as the
 *     strings "nan", "inf", "-inf" (the writers' repr of them);
 *   - integers in decimal; a span time as microseconds with exactly three decimals from integer
 *     nanoseconds (no float rounding).
 */
#ifndef XSP_JSONW_H
#define XSP_JSONW_H

#include <stddef.h>
#include <stdint.h>

typedef struct xsp_jsonw xsp_jsonw;

/* flags of xsp_jsonw_open */
#define XSP_JSONW_GZIP 1     /* the text gzip-compressed, as one gzip member */
#define XSP_JSONW_HINT 2     /* ask the kernel to start writing back every few MB: for a file
                              * the caller fsyncs after the text (see jsonw.c) */

/* A new writer to fd (not owned: never closed here), with flags (XSP_JSONW_*; other bits are
 * ignored).  Returns NULL on allocation failure (or zlib's refusal to start). */
xsp_jsonw *xsp_jsonw_open(int fd, int flags);

/* Flushes what is buffered, ends the gzip stream and frees w.  Returns 0, or -1 with a
 * message in err (errlen bytes) when any write since open failed (errno then holds the system
 * error where there was one).  Accepts NULL (returns 0). */
int xsp_jsonw_close(xsp_jsonw *w, char *err, size_t errlen);

/* Nonzero once a write has failed (the rest of the text is dropped). Cannot fail. */
int xsp_jsonw_failed(const xsp_jsonw *w);

/* n bytes as they are (JSON punctuation, keys known to need no escaping).  Cannot fail (a
 * failure is sticky, reported by close), as every writer below. */
void xsp_jsonw_raw(xsp_jsonw *w, const char *s, size_t n);

/* Room for up to n bytes (n <= XSP_JSONW_RESERVE) of text that the caller formats in place and
 * then hands over with xsp_jsonw_commit(w, k), k <= n, before any other call on w: the
 * writers' fast path for the fixed parts of a record (one call instead of one per piece).
 * Flushes first when the buffer has less room.  Cannot fail (after a failure the room is
 * still there; what is committed is dropped, as everything after a failure). */
#define XSP_JSONW_RESERVE 4096
char *xsp_jsonw_reserve(xsp_jsonw *w, size_t n);
void xsp_jsonw_commit(xsp_jsonw *w, size_t k);

/* A NUL-terminated literal, as xsp_jsonw_raw. */
void xsp_jsonw_lit(xsp_jsonw *w, const char *s);

/* The n bytes at s (any bytes, NULs included) as a quoted JSON string, as described above. */
void xsp_jsonw_str(xsp_jsonw *w, const char *s, size_t n);

/* A quoted string of the bytes of prefix (NUL-terminated) followed by the n bytes at s. */
void xsp_jsonw_str2(xsp_jsonw *w, const char *prefix, const char *s, size_t n);

/* JSON text that is already valid but may hold bytes that are not UTF-8: written as it is,
 * each such byte as '?'. */
void xsp_jsonw_text(xsp_jsonw *w, const char *s, size_t n);

void xsp_jsonw_int(xsp_jsonw *w, int64_t v);
void xsp_jsonw_uint(xsp_jsonw *w, uint64_t v);

/* The decimal digits of v into buf (room for 20 bytes; no NUL); returns how many.  Cannot
 * fail. */
size_t xsp_u64_dec(char *buf, uint64_t v);

/* v as Python's repr, or "nan" / "inf" / "-inf" (quoted) when not finite. */
void xsp_jsonw_double(xsp_jsonw *w, double v);

/* A time: ns (a - b, computed exactly) as microseconds with three decimals, e.g. "-0.001". */
void xsp_jsonw_us(xsp_jsonw *w, uint64_t a, int64_t b);

/* Formats v as Python's repr of a finite float into buf (at least 32 bytes); returns the
 * length.  For non-finite v, writes "nan", "inf" or "-inf".  Cannot fail. */
size_t xsp_json_fmt_double(char *buf, double v);

/* The length of the well-formed UTF-8 sequence at s[0..n) (1 to 4), or 0 when s[0] begins
 * none (a stray continuation byte, an overlong form, a surrogate, past U+10FFFF, cut
 * short).  n > 0.  Cannot fail. */
size_t xsp_utf8_seq(const unsigned char *s, size_t n);

#endif
