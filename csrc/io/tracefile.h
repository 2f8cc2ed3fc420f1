/*
 * tracefile.h: the xsp trace file (.xsp), a versioned msgpack document.
 *
 * Written with msgpack-c's packer; read back with a bounded pull reader of our own (mpread.h)
 * that checks every length against the bytes left before allocating anything, so a corrupt or
 * hostile file can cost at most O(file size) memory and always fails with the byte offset of
 * the first bad byte.  The byte layout is documented in docs/format.md.
 */
#ifndef XSP_TRACEFILE_H
#define XSP_TRACEFILE_H

#include <stddef.h>
#include <stdint.h>

#include "../core/trace.h"

#define XSP_FILE_MAGIC "XSPTRACE"   /* first element of the top-level array */
#define XSP_FILE_VERSION 1          /* bumped on any incompatible layout change */

/* Kinds of load failure, so the binding can raise OSError or TraceFormatError. */
enum xsp_load_error { XSP_LOAD_OK = 0, XSP_LOAD_IO = 1, XSP_LOAD_FORMAT = 2, XSP_LOAD_NOMEM = 3 };

/* Serialises t into a new malloc'd buffer: *buf (owned by the caller, free()) of *len bytes.
 * Returns 0, or -1 with a message in err (errlen bytes) on allocation failure, when t fails
 * xsp_trace_check (a file that could not be read back is never written), or when t exceeds
 * a format limit (more than 613 million spans); *buf is then NULL.  t is not modified. */
int xsp_trace_dump(const xsp_trace *t, char **buf, size_t *len, char *err, size_t errlen);

/* Writes t to path, replacing what is there: the bytes go to a new temporary file in path's
 * directory (a fresh unpredictable name per call, created with O_EXCL|O_NOFOLLOW, so never
 * an existing file nor through a symlink; mode 0666 less the umask), which is fsynced and
 * renamed over path, then the directory is fsynced.  So a reader of path sees the old file
 * or the new one whole, whatever other threads and processes save there at the same time,
 * and a symlink at path itself is replaced, not followed.  Returns 0, or -1 with a message
 * naming the path and the system error in err (errlen bytes); on failure path is unchanged
 * and no temporary file is left.  t is not modified; safe to call from several threads. */
int xsp_trace_save(const xsp_trace *t, const char *path, char *err, size_t errlen);

/* Parses len bytes at buf.  Returns a new trace (caller frees with xsp_trace_free), or NULL
 * with *kind set (XSP_LOAD_FORMAT or XSP_LOAD_NOMEM), *offset set to the byte offset where
 * decoding failed, and a message in err saying what was wrong.  Never reads outside
 * buf[0..len), never allocates more than a small multiple of len, always terminates.  The
 * result satisfies xsp_trace_check(). */
xsp_trace *xsp_trace_parse(const void *buf, size_t len, int *kind, uint64_t *offset,
                           char *err, size_t errlen);

/* Reads and parses the file at path.  As xsp_trace_parse, plus *kind = XSP_LOAD_IO when the
 * file cannot be opened or read (err names the path and the system error). */
xsp_trace *xsp_trace_load(const char *path, int *kind, uint64_t *offset, char *err,
                          size_t errlen);

#endif
