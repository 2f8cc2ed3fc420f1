/*
 * jsonw.c: the streaming JSON text writer (jsonw.h).
 *
 * One buffer of BUF bytes; each writer appends to it and flushes when it is full.  A flush
 * writes the buffer to the fd, or with gzip deflates it into a second buffer written as it
 * fills.  Strings are scanned once: runs of bytes that need nothing (printable ASCII but '"'
 * and '\\') are copied whole, the rest handled a character at a time.
 *
 * Why not build the text in memory and write it once: a trace of 10^7 spans is a few GB of
 * JSON; streaming keeps the writer's memory at two buffers.
 *
 * With XSP_JSONW_HINT (a save asked to be durable: xsp.save(..., fsync=True)), every
 * SYNC_EVERY bytes written, the kernel is asked to start writing the file's dirty pages back
 * (sync_file_range, Linux): the fsync that the atomic write makes after the text then finds
 * most of it on the disk already, instead of the whole file to write while the caller waits
 * (the disk writes while the text is made).  A hint only: its failure (a pipe, a file system
 * without it) is ignored.  Without the flag the pages are left to the kernel's own writeback,
 * as any buffered write's: the hint can block once the disk's queue is full (a 53 MB file
 * then waits for a slow disk about as long as an fsync would), which a save that is not
 * asked to be durable should not pay.
 */
#include "jsonw.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* bytes of text buffered before a flush, and so the most one write(2) takes: 64 KiB, since in
 * larger calls the page cache of Linux 6.18's ext4 allocates large folios, which on a machine
 * with fragmented memory cost up to 50x more (a 53 MB file: 0.016-0.031 s in 64 KiB calls,
 * up to 0.8 s in 128 or 256 KiB calls; docs/performance.md, "Exporting") */
#define BUF (64u << 10)
#define SYNC_EVERY (8u << 20) /* bytes written between two writeback hints */

struct xsp_jsonw {
    int fd;                  /* where the text goes; not owned */
    int gzip;                /* nonzero: deflated, as a gzip member */
    int hint;                /* nonzero: writeback hints (XSP_JSONW_HINT) */
    int failed;              /* sticky: 0, or the errno (or EIO) of the first failure */
    const char *what;        /* what failed: "write" or "deflate" */
    size_t n;                /* bytes in buf */
    size_t unhinted;         /* bytes written since the last writeback hint */
    z_stream z;              /* the deflate state, when gzip */
    unsigned char *zout;     /* deflate's output buffer (BUF bytes), when gzip */
    unsigned char buf[BUF];  /* the text not yet flushed */
};

static void fail(xsp_jsonw *w, const char *what, int err)
{
    if (!w->failed) {
        w->failed = err ? err : EIO;
        w->what = what;
    }
}

static void write_all(xsp_jsonw *w, const unsigned char *p, size_t n)
{
    while (n && !w->failed) {
        ssize_t k = write(w->fd, p, n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            fail(w, "write", errno);
            return;
        }
        p += k;
        n -= (size_t)k;
        w->unhinted += (size_t)k;
    }
#ifdef SYNC_FILE_RANGE_WRITE
    if (w->hint && w->unhinted >= SYNC_EVERY) {
        (void)sync_file_range(w->fd, 0, 0, SYNC_FILE_RANGE_WRITE);     /* a hint: see above */
        w->unhinted = 0;
    }
#endif
}

/* Deflates the buffer (finishing the stream when finish) and writes what comes out. */
static void deflate_out(xsp_jsonw *w, int finish)
{
    w->z.next_in = w->buf;
    w->z.avail_in = (uInt)w->n;
    for (;;) {
        w->z.next_out = w->zout;
        w->z.avail_out = BUF;
        int rc = deflate(&w->z, finish ? Z_FINISH : Z_NO_FLUSH);
        if (rc == Z_STREAM_ERROR) {
            fail(w, "deflate", EIO);
            return;
        }
        write_all(w, w->zout, BUF - w->z.avail_out);
        if (w->failed)
            return;
        if (finish ? rc == Z_STREAM_END : (w->z.avail_in == 0 && w->z.avail_out != 0))
            return;
    }
}

static void flush(xsp_jsonw *w, int finish)
{
    if (!w->failed) {
        if (w->gzip)
            deflate_out(w, finish);
        else
            write_all(w, w->buf, w->n);
    }
    w->n = 0;
}

xsp_jsonw *xsp_jsonw_open(int fd, int flags)
{
    xsp_jsonw *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->fd = fd;
    w->hint = (flags & XSP_JSONW_HINT) != 0;
    if (flags & XSP_JSONW_GZIP) {
        w->zout = malloc(BUF);
        /* 15 + 16: a gzip header and trailer (zlib writes mtime 0, no name) */
        if (!w->zout || deflateInit2(&w->z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY)
                            != Z_OK) {
            free(w->zout);
            free(w);
            return NULL;
        }
        w->gzip = 1;
    }
    return w;
}

int xsp_jsonw_failed(const xsp_jsonw *w)
{
    return w->failed != 0;
}

int xsp_jsonw_close(xsp_jsonw *w, char *err, size_t errlen)
{
    if (!w)
        return 0;
    flush(w, 1);
    int rc = 0;
    if (w->failed) {
        snprintf(err, errlen, "%s failed: %s", w->what, strerror(w->failed));
        errno = w->failed;
        rc = -1;
    }
    if (w->gzip)
        deflateEnd(&w->z);
    free(w->zout);
    free(w);
    return rc;
}

void xsp_jsonw_raw(xsp_jsonw *w, const char *s, size_t n)
{
    while (n) {
        size_t room = BUF - w->n;
        if (!room) {
            flush(w, 0);
            room = BUF;
        }
        size_t k = n < room ? n : room;
        memcpy(w->buf + w->n, s, k);
        w->n += k;
        s += k;
        n -= k;
    }
}

char *xsp_jsonw_reserve(xsp_jsonw *w, size_t n)
{
    if (BUF - w->n < n)
        flush(w, 0);
    return (char *)w->buf + w->n;
}

void xsp_jsonw_commit(xsp_jsonw *w, size_t k)
{
    w->n += k;
}

void xsp_jsonw_lit(xsp_jsonw *w, const char *s)
{
    xsp_jsonw_raw(w, s, strlen(s));
}

static inline void put(xsp_jsonw *w, char c)
{
    if (w->n == BUF)
        flush(w, 0);
    w->buf[w->n++] = (unsigned char)c;
}

size_t xsp_utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;      /* the range of the second byte */
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0;                  /* overlong */
        else if (c == 0xED)
            hi = 0x9F;                  /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;                  /* overlong */
        else if (c == 0xF4)
            hi = 0x8F;                  /* past U+10FFFF */
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t k = 2; k < len; k++)
        if ((s[k] & 0xC0) != 0x80)
            return 0;
    return len;
}

/* The bytes of a string's content: escaped when quoted is set, else (JSON text) as they are;
 * either way each byte that is not UTF-8 as '?'. */
static void content(xsp_jsonw *w, const unsigned char *s, size_t n, int escape)
{
    static const char hex[] = "0123456789abcdef";
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && s[j] >= 0x20 && s[j] < 0x80 && (!escape || (s[j] != '"' && s[j] != '\\')))
            j++;
        if (j > i)
            xsp_jsonw_raw(w, (const char *)s + i, j - i);
        if (j == n)
            return;
        unsigned c = s[j];
        if (c >= 0x80) {
            size_t k = xsp_utf8_seq(s + j, n - j);
            if (k)
                xsp_jsonw_raw(w, (const char *)s + j, k);
            else
                put(w, '?');
            i = j + (k ? k : 1);
            continue;
        }
        i = j + 1;
        if (!escape) {
            put(w, (char)c);
            continue;
        }
        put(w, '\\');
        switch (c) {
        case '"': put(w, '"'); break;
        case '\\': put(w, '\\'); break;
        case '\n': put(w, 'n'); break;
        case '\r': put(w, 'r'); break;
        case '\t': put(w, 't'); break;
        case '\b': put(w, 'b'); break;
        case '\f': put(w, 'f'); break;
        default:
            xsp_jsonw_raw(w, "u00", 3);
            put(w, hex[c >> 4]);
            put(w, hex[c & 15]);
        }
    }
}

void xsp_jsonw_str(xsp_jsonw *w, const char *s, size_t n)
{
    put(w, '"');
    content(w, (const unsigned char *)s, n, 1);
    put(w, '"');
}

void xsp_jsonw_str2(xsp_jsonw *w, const char *prefix, const char *s, size_t n)
{
    put(w, '"');
    content(w, (const unsigned char *)prefix, strlen(prefix), 1);
    content(w, (const unsigned char *)s, n, 1);
    put(w, '"');
}

void xsp_jsonw_text(xsp_jsonw *w, const char *s, size_t n)
{
    content(w, (const unsigned char *)s, n, 0);
}

size_t xsp_u64_dec(char *buf, uint64_t v)
{
    char tmp[20];
    int k = 20;
    do {
        tmp[--k] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    memcpy(buf, tmp + k, (size_t)(20 - k));
    return (size_t)(20 - k);
}

static void put_u64(xsp_jsonw *w, uint64_t v)
{
    char tmp[20];
    xsp_jsonw_raw(w, tmp, xsp_u64_dec(tmp, v));
}

void xsp_jsonw_uint(xsp_jsonw *w, uint64_t v)
{
    put_u64(w, v);
}

void xsp_jsonw_int(xsp_jsonw *w, int64_t v)
{
    if (v < 0) {
        put(w, '-');
        put_u64(w, (uint64_t)0 - (uint64_t)v);
    } else
        put_u64(w, (uint64_t)v);
}

void xsp_jsonw_us(xsp_jsonw *w, uint64_t a, int64_t b)
{
    /* a - b exactly: |a - b| < 2**65, so its magnitude is split into a borrow-free pair */
    uint64_t mag;
    int neg;
    if (b < 0) {
        uint64_t nb = (uint64_t)0 - (uint64_t)b;   /* 1 .. 2**63 */
        uint64_t sum = a + nb;
        if (sum < a) {                              /* past 2**64: q and r from the parts */
            /* (2**64 + sum) / 1000: 2**64 = 18446744073709551 * 1000 + 616 */
            uint64_t r = sum % 1000 + 616;
            uint64_t q = 18446744073709551ull + sum / 1000 + r / 1000;
            put_u64(w, q);
            char t[5] = {'.', (char)('0' + r % 1000 / 100), (char)('0' + r % 100 / 10),
                         (char)('0' + r % 10), 0};
            xsp_jsonw_raw(w, t, 4);
            return;
        }
        mag = sum;
        neg = 0;
    } else if (a >= (uint64_t)b) {
        mag = a - (uint64_t)b;
        neg = 0;
    } else {
        mag = (uint64_t)b - a;
        neg = 1;
    }
    if (neg)
        put(w, '-');
    put_u64(w, mag / 1000);
    uint64_t r = mag % 1000;
    char t[4] = {'.', (char)('0' + r / 100), (char)('0' + r / 10 % 10), (char)('0' + r % 10)};
    xsp_jsonw_raw(w, t, 4);
}

size_t xsp_json_fmt_double(char *buf, double v)
{
    if (isnan(v))
        return (size_t)sprintf(buf, "nan");
    if (isinf(v))
        return (size_t)sprintf(buf, v > 0 ? "inf" : "-inf");
    /* the fewest significant digits that read back as v, as "d.ddde[+-]x" */
    char sci[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(sci, sizeof sci, "%.*e", prec - 1, v);
        if (strtod(sci, NULL) == v)
            break;
    }
    char digits[24];
    size_t nd = 0;
    const char *p = sci;
    int neg = *p == '-';
    if (neg)
        p++;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9')
            digits[nd++] = *p;
    int e = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')   /* %.0e of 1e16 gives "1", of 100 "1": no zeros */
        nd--;
    size_t k = 0;
    if (neg)
        buf[k++] = '-';
    if (e < -4 || e >= 16) {        /* repr's exponent form: 1e-05, 1.5e+300 */
        buf[k++] = digits[0];
        if (nd > 1) {
            buf[k++] = '.';
            memcpy(buf + k, digits + 1, nd - 1);
            k += nd - 1;
        }
        k += (size_t)sprintf(buf + k, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    } else if (e < 0) {             /* 0.000123 */
        buf[k++] = '0';
        buf[k++] = '.';
        for (int z = 0; z < -e - 1; z++)
            buf[k++] = '0';
        memcpy(buf + k, digits, nd);
        k += nd;
    } else {                        /* 123.45, 100.0 */
        for (int d = 0; d <= e; d++)
            buf[k++] = (size_t)d < nd ? digits[d] : '0';
        buf[k++] = '.';
        if ((size_t)e + 1 < nd) {
            memcpy(buf + k, digits + e + 1, nd - (size_t)e - 1);
            k += nd - (size_t)e - 1;
        } else
            buf[k++] = '0';
    }
    buf[k] = 0;
    return k;
}

void xsp_jsonw_double(xsp_jsonw *w, double v)
{
    char buf[40];
    size_t n = xsp_json_fmt_double(buf, v);
    if (!isfinite(v))
        xsp_jsonw_str(w, buf, n);
    else
        xsp_jsonw_raw(w, buf, n);
}
