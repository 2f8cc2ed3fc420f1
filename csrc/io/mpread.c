/*
 * mpread.c: the bounded msgpack pull reader (see mpread.h for the contract).
 *
 * Everything funnels through xsp_mpr_peek, which decodes one header in three steps:
 *   1. classify the format byte: family, width of the length/value field that follows it,
 *      and extra header bytes (the ext type byte);
 *   2. check that the header fits in the bytes left, then read the field (big-endian);
 *   3. check that the payload (str/bin/ext) or the declared element count (array/map, at
 *      least one byte per element) fits in the bytes left after the header.
 * Only after all three does a caller see a length, which is what makes "allocate what the
 * file declares" safe for the trace reader: a declared count never exceeds the bytes left.
 * All arithmetic is done as "needed <= left" with left = len - pos, never as pos + needed,
 * so it cannot overflow however large a declared length is.
 *
 * xsp_mpr_uint takes a fast path for positive fixint and uint8..64, which are nearly all the
 * fields of a trace file (span deltas, ids, counts), before falling back to the general
 * decoder (which also produces the error messages).
 */
#include "mpread.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Records the first error (later ones are dropped) and returns -1. */
static int fail(xsp_mpr *r, enum xsp_mp_err err, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(xsp_mpr *r, enum xsp_mp_err err, size_t off, const char *fmt, ...)
{
    if (r->err)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
    r->err = err;
    r->err_off = off;
    return -1;
}

static uint64_t load_be(const unsigned char *p, unsigned width)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < width; i++)
        v = v << 8 | p[i];
    return v;
}

void xsp_mpr_init(xsp_mpr *r, const void *buf, size_t len)
{
    memset(r, 0, sizeof *r);
    r->buf = buf;
    r->len = len;
}

size_t xsp_mpr_left(const xsp_mpr *r)
{
    return r->len - r->pos;
}

const char *xsp_mpr_errname(enum xsp_mp_err err)
{
    switch (err) {
    case XSP_MP_OK: return "";
    case XSP_MP_ETRUNC: return "truncated";
    case XSP_MP_EBADBYTE: return "malformed";
    case XSP_MP_ETYPE: return "wrong type";
    case XSP_MP_ERANGE: return "out of range";
    }
    return "?";
}

const char *xsp_mpr_fmtname(uint8_t b)
{
    static const char *const c0[] = {
        "nil",     "never-used byte 0xc1", "false",   "true",    "bin8",    "bin16",
        "bin32",   "ext8",    "ext16",   "ext32",   "float32", "float64", "uint8",
        "uint16",  "uint32",  "uint64",  "int8",    "int16",   "int32",   "int64",
        "fixext1", "fixext2", "fixext4", "fixext8", "fixext16", "str8",   "str16",
        "str32",   "array16", "array32", "map16",   "map32"};
    if (b <= 0x7f)
        return "positive fixint";
    if (b <= 0x8f)
        return "fixmap";
    if (b <= 0x9f)
        return "fixarray";
    if (b <= 0xbf)
        return "fixstr";
    if (b >= 0xe0)
        return "negative fixint";
    return c0[b - 0xc0];
}

/* Step 1 for the bytes 0xc0..0xdf: family, field width and extra header bytes.  For fixext
 * the "width" is 0 and the payload size is fixed, returned in *fixed. */
static void classify_c0(uint8_t b, enum xsp_mp_type *type, unsigned *width, unsigned *extra,
                        uint64_t *fixed)
{
    static const unsigned char widths[] = {0, 0, 0, 0, 1, 2, 4, 1, 2, 4, 4, 8, 1, 2, 4, 8,
                                           1, 2, 4, 8, 0, 0, 0, 0, 0, 1, 2, 4, 2, 4, 2, 4};
    static const unsigned char types[] = {
        XSP_MP_NIL,   XSP_MP_NIL,    XSP_MP_BOOL,    XSP_MP_BOOL,    XSP_MP_BIN,    XSP_MP_BIN,
        XSP_MP_BIN,   XSP_MP_EXT,    XSP_MP_EXT,     XSP_MP_EXT,     XSP_MP_FLOAT32, XSP_MP_FLOAT64,
        XSP_MP_UINT,  XSP_MP_UINT,   XSP_MP_UINT,    XSP_MP_UINT,    XSP_MP_NEGINT, XSP_MP_NEGINT,
        XSP_MP_NEGINT, XSP_MP_NEGINT, XSP_MP_EXT,    XSP_MP_EXT,     XSP_MP_EXT,    XSP_MP_EXT,
        XSP_MP_EXT,   XSP_MP_STR,    XSP_MP_STR,     XSP_MP_STR,     XSP_MP_ARRAY,  XSP_MP_ARRAY,
        XSP_MP_MAP,   XSP_MP_MAP};
    unsigned i = b - 0xc0u;
    *type = (enum xsp_mp_type)types[i];
    *width = widths[i];
    *extra = (*type == XSP_MP_EXT) ? 1 : 0;
    *fixed = (b >= 0xd4 && b <= 0xd8) ? (uint64_t)1 << (b - 0xd4) : 0;
}

/* Step 2 for a value field: stores integer, float or bool values into o. */
static void decode_scalar(xsp_mp_obj *o, const unsigned char *p, unsigned width)
{
    uint64_t raw = load_be(p, width);
    if (o->type == XSP_MP_UINT) {
        o->v.u = raw;
    } else if (o->type == XSP_MP_NEGINT) {
        int64_t v = width == 1 ? (int8_t)raw : width == 2 ? (int16_t)raw
                  : width == 4 ? (int32_t)raw : (int64_t)raw;
        if (v >= 0) {
            o->type = XSP_MP_UINT;
            o->v.u = (uint64_t)v;
        } else {
            o->v.i = v;
        }
    } else if (o->type == XSP_MP_FLOAT32) {
        uint32_t bits = (uint32_t)raw;
        float f;
        memcpy(&f, &bits, sizeof f);
        o->v.d = f;
    } else if (o->type == XSP_MP_FLOAT64) {
        memcpy(&o->v.d, &raw, sizeof o->v.d);
    } else if (o->type == XSP_MP_BOOL) {
        o->v.b = o->byte == 0xc3;
    }
}

/* Step 3: the payload or the declared elements must fit in the bytes left after the header. */
static int check_body(xsp_mpr *r, xsp_mp_obj *o, size_t hdr)
{
    size_t left = r->len - o->off - hdr;
    const char *what = xsp_mpr_fmtname(o->byte);
    if (o->type == XSP_MP_ARRAY || o->type == XSP_MP_MAP) {
        uint64_t need = o->type == XSP_MP_MAP ? 2 * o->n : o->n;
        if (need > left)
            return fail(r, XSP_MP_ETRUNC, o->off,
                        "%s of %" PRIu64 " %s at byte %zu would end at byte %" PRIu64
                        " or later but the file has %zu bytes",
                        what, o->n, o->type == XSP_MP_MAP ? "pairs" : "elements", o->off,
                        (uint64_t)(o->off + hdr) + need, r->len);
        o->end = o->off + hdr;
        return 0;
    }
    if (o->n > left)
        return fail(r, XSP_MP_ETRUNC, o->off,
                    "%s of %" PRIu64 " bytes at byte %zu ends at byte %" PRIu64
                    " but the file has %zu bytes",
                    what, o->n, o->off, (uint64_t)(o->off + hdr) + o->n, r->len);
    o->data = (const char *)r->buf + o->off + hdr;
    o->end = o->off + hdr + (size_t)o->n;
    return 0;
}

int xsp_mpr_peek(xsp_mpr *r, xsp_mp_obj *o)
{
    if (r->err)
        return -1;
    size_t p = r->pos, left = r->len - p;
    if (left == 0)
        return fail(r, XSP_MP_ETRUNC, p,
                    "an object should start at byte %zu but the file ends there", p);
    uint8_t b = r->buf[p];
    memset(o, 0, sizeof *o);
    o->byte = b;
    o->off = p;
    unsigned width = 0, extra = 0;
    uint64_t fixed = 0;
    if (b <= 0x7f) {
        o->type = XSP_MP_UINT;
        o->v.u = b;
    } else if (b >= 0xe0) {
        o->type = XSP_MP_NEGINT;
        o->v.i = (int8_t)b;
    } else if (b <= 0xbf) {
        o->type = b <= 0x8f ? XSP_MP_MAP : b <= 0x9f ? XSP_MP_ARRAY : XSP_MP_STR;
        o->n = b <= 0x9f ? (b & 0x0fu) : (b & 0x1fu);
    } else if (b == 0xc1) {
        return fail(r, XSP_MP_EBADBYTE, p, "byte 0xc1 at byte %zu is never used by msgpack", p);
    } else {
        classify_c0(b, &o->type, &width, &extra, &fixed);
    }
    size_t hdr = 1 + width + extra;
    if (hdr > left)
        return fail(r, XSP_MP_ETRUNC, p, "%s at byte %zu ends at byte %zu but the file has %zu bytes",
                    xsp_mpr_fmtname(b), p, p + hdr, r->len);
    const unsigned char *q = r->buf + p + 1;
    switch (o->type) {
    case XSP_MP_STR: case XSP_MP_BIN: case XSP_MP_ARRAY: case XSP_MP_MAP: case XSP_MP_EXT:
        if (width)
            o->n = load_be(q, width);
        if (o->type == XSP_MP_EXT) {
            o->n = width ? o->n : fixed;
            o->ext_type = (int8_t)q[width];
        }
        return check_body(r, o, hdr);
    default:
        if (width)
            decode_scalar(o, q, width);
        else if (o->type == XSP_MP_BOOL)
            o->v.b = b == 0xc3;
        o->end = p + hdr;
        return 0;
    }
}

int xsp_mpr_next(xsp_mpr *r, xsp_mp_obj *o)
{
    if (xsp_mpr_peek(r, o) != 0)
        return -1;
    r->pos = o->end;
    return 0;
}

/* Fails with ETYPE: expected `want`, found the object o. */
static int wrong_type(xsp_mpr *r, const xsp_mp_obj *o, const char *want)
{
    return fail(r, XSP_MP_ETYPE, o->off, "expected %s at byte %zu, found %s (0x%02x)", want,
                o->off, xsp_mpr_fmtname(o->byte), o->byte);
}

int xsp_mpr_uint(xsp_mpr *r, uint64_t *v)
{
    if (!r->err && r->pos < r->len) {
        unsigned b = r->buf[r->pos];
        if (b <= 0x7f) {  /* positive fixint */
            *v = b;
            r->pos++;
            return 0;
        }
        unsigned width = (b >= 0xcc && b <= 0xcf) ? 1u << (b - 0xcc) : 0;
        if (width && width < r->len - r->pos) {  /* uint8..uint64, fully inside */
            *v = load_be(r->buf + r->pos + 1, width);
            r->pos += 1 + width;
            return 0;
        }
    }
    xsp_mp_obj o;
    if (xsp_mpr_peek(r, &o) != 0)
        return -1;
    if (o.type == XSP_MP_NEGINT)
        return fail(r, XSP_MP_ERANGE, o.off, "negative value %" PRId64
                    " at byte %zu where an unsigned integer is expected", o.v.i, o.off);
    if (o.type != XSP_MP_UINT)
        return wrong_type(r, &o, "an unsigned integer");
    *v = o.v.u;
    r->pos = o.end;
    return 0;
}

int xsp_mpr_int(xsp_mpr *r, int64_t *v)
{
    xsp_mp_obj o;
    if (xsp_mpr_peek(r, &o) != 0)
        return -1;
    if (o.type == XSP_MP_UINT) {
        if (o.v.u > INT64_MAX)
            return fail(r, XSP_MP_ERANGE, o.off, "value %" PRIu64 " at byte %zu does not fit in int64",
                        o.v.u, o.off);
        *v = (int64_t)o.v.u;
    } else if (o.type == XSP_MP_NEGINT) {
        *v = o.v.i;
    } else {
        return wrong_type(r, &o, "an integer");
    }
    r->pos = o.end;
    return 0;
}

int xsp_mpr_nil(xsp_mpr *r)
{
    xsp_mp_obj o;
    if (xsp_mpr_peek(r, &o) != 0)
        return -1;
    if (o.type != XSP_MP_NIL)
        return wrong_type(r, &o, "nil");
    r->pos = o.end;
    return 0;
}

int xsp_mpr_bool(xsp_mpr *r, int *v)
{
    xsp_mp_obj o;
    if (xsp_mpr_peek(r, &o) != 0)
        return -1;
    if (o.type != XSP_MP_BOOL)
        return wrong_type(r, &o, "a boolean");
    *v = o.v.b;
    r->pos = o.end;
    return 0;
}

int xsp_mpr_float(xsp_mpr *r, float *v)
{
    xsp_mp_obj o;
    if (xsp_mpr_peek(r, &o) != 0)
        return -1;
    if (o.type != XSP_MP_FLOAT32)
        return wrong_type(r, &o, "a float32");
    *v = (float)o.v.d;
    r->pos = o.end;
    return 0;
}

int xsp_mpr_double(xsp_mpr *r, double *v)
{
    xsp_mp_obj o;
    if (xsp_mpr_peek(r, &o) != 0)
        return -1;
    if (o.type != XSP_MP_FLOAT32 && o.type != XSP_MP_FLOAT64)
        return wrong_type(r, &o, "a float");
    *v = o.v.d;
    r->pos = o.end;
    return 0;
}

/* Reads an object of family `type` with a payload or a count that fits in 32 bits. */
static int read_sized(xsp_mpr *r, enum xsp_mp_type type, const char *want, xsp_mp_obj *o)
{
    if (xsp_mpr_peek(r, o) != 0)
        return -1;
    if (o->type != type)
        return wrong_type(r, o, want);
    r->pos = o->end;
    return 0;
}

int xsp_mpr_str(xsp_mpr *r, const char **s, uint32_t *n)
{
    xsp_mp_obj o;
    if (read_sized(r, XSP_MP_STR, "a string", &o) != 0)
        return -1;
    *s = o.data;
    *n = (uint32_t)o.n;
    return 0;
}

int xsp_mpr_bin(xsp_mpr *r, const char **s, uint32_t *n)
{
    xsp_mp_obj o;
    if (read_sized(r, XSP_MP_BIN, "a binary", &o) != 0)
        return -1;
    *s = o.data;
    *n = (uint32_t)o.n;
    return 0;
}

int xsp_mpr_array(xsp_mpr *r, uint32_t *n)
{
    xsp_mp_obj o;
    if (read_sized(r, XSP_MP_ARRAY, "an array", &o) != 0)
        return -1;
    *n = (uint32_t)o.n;
    return 0;
}

int xsp_mpr_map(xsp_mpr *r, uint32_t *n)
{
    xsp_mp_obj o;
    if (read_sized(r, XSP_MP_MAP, "a map", &o) != 0)
        return -1;
    *n = (uint32_t)o.n;
    return 0;
}

int xsp_mpr_skip(xsp_mpr *r)
{
    uint64_t pending = 1;  /* objects still to skip; never more than the bytes left */
    while (pending) {
        xsp_mp_obj o;
        if (xsp_mpr_next(r, &o) != 0)
            return -1;
        pending--;
        if (o.type == XSP_MP_ARRAY)
            pending += o.n;
        else if (o.type == XSP_MP_MAP)
            pending += 2 * o.n;
        if (pending > r->len - r->pos)
            return fail(r, XSP_MP_ETRUNC, r->pos,
                        "%" PRIu64 " more objects expected from byte %zu but the file has %zu bytes",
                        pending, r->pos, r->len);
    }
    return 0;
}
