/*
 * mpread.h: a small bounded msgpack pull reader.
 *
 * The trace file reader walks a msgpack document object by object instead of unpacking it
 * into a tree: it asks for "the next unsigned integer", "the next array header", and so on,
 * and builds its own structures as it goes.  The reader is built for untrusted input:
 *   - it never reads outside buf[0..len);
 *   - every length (string and binary payload sizes, array and map element counts) is checked
 *     against the bytes left BEFORE the caller sees it, so a caller that allocates "count"
 *     elements after a successful header read allocates at most one element per byte left
 *     (each msgpack object takes at least one byte);
 *   - the first error is sticky: it records the byte offset of the offending object and a
 *     one-line message, and every later call fails without reading;
 *   - nothing recurses: skipping a nested object counts pending elements in a loop, so depth
 *     costs neither stack nor heap.
 * The reader never allocates.  Strings and binaries are returned as pointers into the buffer.
 *
 * Offsets are byte offsets from buf, as size_t.  An error's offset is the first byte of the
 * object that could not be read (for a truncated file, possibly len itself: "the next object
 * would start here but the file ends").
 */
#ifndef XSP_MPREAD_H
#define XSP_MPREAD_H

#include <stddef.h>
#include <stdint.h>

/* msgpack object families, as the reader reports them. */
enum xsp_mp_type {
    XSP_MP_NIL = 0,    /* nil */
    XSP_MP_BOOL = 1,   /* false/true: value in v.b */
    XSP_MP_UINT = 2,   /* non-negative integer (positive fixint, uint8..64, or int8..64 >= 0) */
    XSP_MP_NEGINT = 3, /* negative integer (negative fixint, int8..64 < 0): value in v.i */
    XSP_MP_FLOAT32 = 4,/* float 32: value in v.d (widened exactly) */
    XSP_MP_FLOAT64 = 5,/* float 64: value in v.d */
    XSP_MP_STR = 6,    /* str: n payload bytes at data */
    XSP_MP_BIN = 7,    /* bin: n payload bytes at data */
    XSP_MP_ARRAY = 8,  /* array: n elements follow */
    XSP_MP_MAP = 9,    /* map: n key/value pairs follow */
    XSP_MP_EXT = 10    /* ext: n payload bytes at data, application type in ext_type */
};

/* Error categories, the first word of a message. */
enum xsp_mp_err {
    XSP_MP_OK = 0,        /* no error */
    XSP_MP_ETRUNC = 1,    /* the object (or its declared contents) runs past the end */
    XSP_MP_EBADBYTE = 2,  /* 0xc1, the one byte msgpack never uses */
    XSP_MP_ETYPE = 3,     /* the object is not of the type asked for */
    XSP_MP_ERANGE = 4     /* the value does not fit the type asked for */
};

#define XSP_MP_MSGLEN 192  /* size of the reader's message buffer */

/* The decoded header of one object. */
typedef struct xsp_mp_obj {
    enum xsp_mp_type type;  /* object family */
    uint8_t  byte;          /* first byte (format byte), for messages */
    int8_t   ext_type;      /* XSP_MP_EXT: the application type */
    size_t   off;           /* offset of the first byte */
    size_t   end;           /* offset just past the header (array/map) or the whole object */
    uint64_t n;             /* str/bin/ext: payload bytes; array/map: element/pair count */
    const char *data;       /* str/bin/ext: the payload, inside the buffer */
    union {
        uint64_t u;         /* XSP_MP_UINT */
        int64_t  i;         /* XSP_MP_NEGINT */
        double   d;         /* XSP_MP_FLOAT32/64 */
        int      b;         /* XSP_MP_BOOL: 0 or 1 */
    } v;                    /* the value of a scalar */
} xsp_mp_obj;

/* A reader over one buffer. Initialise with xsp_mpr_init; all fields are read-only for callers. */
typedef struct xsp_mpr {
    const unsigned char *buf;   /* the document; not owned */
    size_t len;                 /* bytes in buf */
    size_t pos;                 /* offset of the next object */
    enum xsp_mp_err err;        /* first error, XSP_MP_OK while none */
    size_t err_off;             /* offset of the object that failed */
    char msg[XSP_MP_MSGLEN];    /* "uint32 at byte 240 ends at byte 245 but ..." (no category) */
} xsp_mpr;

/* Starts reading len bytes at buf (which must stay valid while the reader is used). Cannot
 * fail. */
void xsp_mpr_init(xsp_mpr *r, const void *buf, size_t len);

/* Decodes the header of the next object into *o without consuming it.  Returns 0, or -1 with
 * the reader's error set (truncated header or payload, a declared count larger than the bytes
 * left, or the byte 0xc1). */
int xsp_mpr_peek(xsp_mpr *r, xsp_mp_obj *o);

/* As xsp_mpr_peek, then consumes the object's header and, for str/bin/ext, its payload (an
 * array's or map's elements stay to be read).  Returns 0 or -1 (position unchanged). */
int xsp_mpr_next(xsp_mpr *r, xsp_mp_obj *o);

/* Typed reads: each consumes one object of the named type and stores its value, or returns -1
 * with the reader's error set and the position unchanged (ETYPE for another type, ERANGE for a
 * value that does not fit).  Integers are accepted in any msgpack integer encoding whose value
 * fits; xsp_mpr_double also accepts float 32. */
int xsp_mpr_uint(xsp_mpr *r, uint64_t *v);
int xsp_mpr_int(xsp_mpr *r, int64_t *v);
int xsp_mpr_nil(xsp_mpr *r);
int xsp_mpr_bool(xsp_mpr *r, int *v);
int xsp_mpr_float(xsp_mpr *r, float *v);
int xsp_mpr_double(xsp_mpr *r, double *v);

/* Reads a str (or bin) header and payload: *s points into the buffer (not NUL-terminated) and
 * *n is its length.  Returns 0 or -1. */
int xsp_mpr_str(xsp_mpr *r, const char **s, uint32_t *n);
int xsp_mpr_bin(xsp_mpr *r, const char **s, uint32_t *n);

/* Reads an array / map header: *n elements / pairs follow.  Succeeds only when n (2n for a
 * map) is at most the bytes left after the header, so *n is safe to allocate for.  Returns 0
 * or -1. */
int xsp_mpr_array(xsp_mpr *r, uint32_t *n);
int xsp_mpr_map(xsp_mpr *r, uint32_t *n);

/* Skips one complete object, however deeply nested, without recursion: O(bytes skipped) time,
 * O(1) memory.  Returns 0 or -1 (truncation inside the object; position then at the failing
 * element). */
int xsp_mpr_skip(xsp_mpr *r);

/* Bytes left after the current position. Cannot fail. */
size_t xsp_mpr_left(const xsp_mpr *r);

/* The category word of an error: "truncated", "malformed", "wrong type", "out of range"; ""
 * for XSP_MP_OK. Cannot fail. */
const char *xsp_mpr_errname(enum xsp_mp_err err);

/* A short name of an object's encoding for messages: "uint32", "fixstr", "array32", ...
 * Cannot fail. */
const char *xsp_mpr_fmtname(uint8_t byte);

#endif
