/*
 * tracefile.c: the xsp trace file, written with msgpack-c's packer and read back with the
 * bounded pull reader in mpread.c.  docs/format.md is the normative description; in short:
 *
 *   array(8 or more) [
 *     [0] str   "XSPTRACE"                         magic
 *     [1] uint  1                                  format version (XSP_FILE_VERSION)
 *     [2] array(N)  str...                          string table; string i has id i, [0] = ""
 *     [3] array(3T) tid, name, kind ...             threads (tracks), flat
 *     [4] array(2M) kt, value ...                   metadata, flat attributes
 *     [5] array(2C) kt, value ...                   counters, flat attributes (all INT)
 *     [6] array(7S) dstart, dur, dparent, name, lkf, thread, nattr ...     spans, flat
 *     [7] array(2A) kt, value ...                   span attributes in span order
 *     [8..] anything                               later additions: skipped by this reader
 *   ]
 *   dstart  = start_ns - previous span's start_ns (the first span: start_ns itself)
 *   dur     = end_ns - start_ns
 *   dparent = id - parent, 0 for a root
 *   lkf     = flags << 8 | level << 4 | kind
 *   kt      = key string id << 2 | value type; value: int (INT), float32/64 (FLOAT), uint (STR)
 *
 * Every field is a msgpack integer in its smallest encoding, so a typical span (a few-us
 * delta and duration, a close parent, a name among the first 128 strings, no flags, one
 * thread of the first few, no attributes) costs 3+3+1+1+1+1+1 = 11 bytes.
 *
 * Why flat rows.  Three layouts were weighed:
 *   - an array per span, [dstart, dur, ...]: one more byte per span (the fixarray header,
 *     ~10% of a typical span) for nothing the reader needs, since the field count is fixed;
 *   - one array per field (columnar): the same size as flat rows, but the writer and reader
 *     make seven passes over the span array instead of one, and an error cannot say "span 17"
 *     as directly; its real strength (skipping whole columns, per-column compression) does
 *     not apply to a reader that always builds every field;
 *   - flat rows (chosen): the fields of span i are elements 7i..7i+6 of one array.  One
 *     sequential pass each way, same bytes as columnar, and a generic msgpack tool still
 *     reads the file (numpy: np.array(spans).reshape(-1, 7)).  The cost: 7S must fit an
 *     array32 count, i.e. at most 613 million spans per file, which the writer checks.
 *
 * Attributes are stored out of line, in span order: a span's attributes are the next nattr
 * of the attrs section, so the reader sets attr_off to the running sum of nattr.  The writer
 * walks each span's attrs[attr_off .. +attr_n) rather than copying t->attrs, so a trace whose
 * attributes are not laid out in span order is written canonically (and unreferenced
 * attributes are not written); xsp_trace_equal compares attributes per span, so such a trace
 * still round-trips equal.  The value type lives in the key slot (kt) because INT and STR
 * values are both msgpack integers; a key among the first 32 strings keeps kt one byte.
 *
 * Reading trusts nothing: every declared count is checked against the bytes left before it
 * is allocated (mpread), every id is range-checked as it is read, and the finished trace must
 * pass xsp_trace_check.  So a hostile file costs O(file size) memory and fails with the byte
 * offset of the offending object.  Errors read "<category>: <where>: <detail>", e.g.
 * "truncated: span 17 of 1000, duration: uint32 at byte 240 ends at byte 245 but the file
 * has 242 bytes".
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include "tracefile.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <msgpack.h>

#include "mpread.h"

#define TOP_ELEMS 8      /* top-level elements this version reads; later ones are skipped */
#define SPAN_FIELDS 7    /* integers per span */
#define THREAD_FIELDS 3  /* integers per thread */
#define ATTR_FIELDS 2    /* objects per attribute (kt, value) */

/* ------------------------------------------------------------------------------------------
 * Writing
 * ---------------------------------------------------------------------------------------- */

/* The growable output buffer behind the packer. */
typedef struct wbuf {
    char  *p;    /* bytes written so far; owned until handed to the caller */
    size_t len;  /* bytes used */
    size_t cap;  /* bytes allocated */
    int    oom;  /* sticky: a write failed to grow the buffer */
} wbuf;

/* Grows w to hold n more bytes, doubling. Returns 0 or -1 (w unchanged). */
static int wbuf_grow(wbuf *w, size_t n)
{
    size_t cap = w->cap ? w->cap : 4096;
    while (n > cap - w->len) {
        if (cap > SIZE_MAX / 2)
            return -1;
        cap *= 2;
    }
    char *p = realloc(w->p, cap);
    if (!p)
        return -1;
    w->p = p;
    w->cap = cap;
    return 0;
}

/* msgpack_packer_write callback: appends n bytes.  After a failure it fails every call, so
 * the writer checks w->oom once at the end instead of after every pack call. */
static int wbuf_write(void *data, const char *src, size_t n)
{
    wbuf *w = data;
    if (w->oom || (n > w->cap - w->len && wbuf_grow(w, n) != 0)) {
        w->oom = 1;
        return -1;
    }
    char *dst = w->p + w->len;
    w->len += n;
    if (n <= 9) {  /* most calls: one integer of 1..9 bytes; a loop beats a memcpy call */
        while (n--)
            *dst++ = *src++;
        return 0;
    }
    memcpy(dst, src, n);
    return 0;
}

/* 1 when d survives a round trip through float32 bit for bit (NaNs keep float64). */
static int fits_float32(double d)
{
    if (isnan(d) || d > FLT_MAX || d < -FLT_MAX)
        return isinf(d);
    double back = (float)d;
    return memcmp(&back, &d, sizeof d) == 0;
}

static void put_attr(msgpack_packer *pk, const xsp_attr *a)
{
    msgpack_pack_uint64(pk, (uint64_t)a->key << 2 | a->type);
    if (a->type == XSP_ATTR_INT)
        msgpack_pack_int64(pk, a->v.i);
    else if (a->type == XSP_ATTR_STR)
        msgpack_pack_uint32(pk, a->v.s);
    else if (fits_float32(a->v.f))
        msgpack_pack_float(pk, (float)a->v.f);
    else
        msgpack_pack_double(pk, a->v.f);
}

static void put_attr_list(msgpack_packer *pk, const xsp_attr *a, uint32_t n)
{
    msgpack_pack_array(pk, (size_t)n * ATTR_FIELDS);
    for (uint32_t i = 0; i < n; i++)
        put_attr(pk, &a[i]);
}

static void put_strings(msgpack_packer *pk, const xsp_strtab *st)
{
    msgpack_pack_array(pk, st->n);
    for (uint32_t i = 0; i < st->n; i++) {
        size_t n;
        const char *s = xsp_strtab_get(st, i, &n);
        msgpack_pack_str(pk, n);
        msgpack_pack_str_body(pk, s, n);
    }
}

static void put_threads(msgpack_packer *pk, const xsp_trace *t)
{
    msgpack_pack_array(pk, (size_t)t->n_threads * THREAD_FIELDS);
    for (uint32_t i = 0; i < t->n_threads; i++) {
        msgpack_pack_uint64(pk, t->threads[i].tid);
        msgpack_pack_uint32(pk, t->threads[i].name);
        msgpack_pack_uint32(pk, t->threads[i].kind);
    }
}

static void put_spans(msgpack_packer *pk, const xsp_trace *t)
{
    uint64_t prev = 0;
    msgpack_pack_array(pk, (size_t)t->n_spans * SPAN_FIELDS);
    for (uint32_t i = 0; i < t->n_spans; i++) {
        const xsp_span *s = &t->spans[i];
        msgpack_pack_uint64(pk, s->start_ns - prev);
        msgpack_pack_uint64(pk, s->end_ns - s->start_ns);
        msgpack_pack_uint32(pk, s->parent == XSP_NO_PARENT ? 0 : i - s->parent);
        msgpack_pack_uint32(pk, s->name);
        msgpack_pack_uint64(pk, (uint64_t)s->flags << 8 | (unsigned)s->level << 4 | s->kind);
        msgpack_pack_uint32(pk, s->thread);
        msgpack_pack_uint16(pk, s->attr_n);
        prev = s->start_ns;
    }
}

static void put_span_attrs(msgpack_packer *pk, const xsp_trace *t, uint64_t total)
{
    msgpack_pack_array(pk, (size_t)total * ATTR_FIELDS);
    for (uint32_t i = 0; i < t->n_spans; i++)
        for (uint32_t j = 0; j < t->spans[i].attr_n; j++)
            put_attr(pk, &t->attrs[t->spans[i].attr_off + j]);
}

/* Checks that t can be written and read back: the trace invariants plus the format's array
 * limits.  Stores the number of span attributes to write in *total.  Returns 0 or -1. */
static int check_writable(const xsp_trace *t, uint64_t *total, char *err, size_t errlen)
{
    char why[256];
    if (xsp_trace_check(t, why, sizeof why) != 0) {
        snprintf(err, errlen, "cannot write an invalid trace: %s", why);
        return -1;
    }
    *total = 0;
    for (uint32_t i = 0; i < t->n_spans; i++)
        *total += t->spans[i].attr_n;
    const char *what = (uint64_t)t->n_spans * SPAN_FIELDS > UINT32_MAX ? "spans"
                     : *total * ATTR_FIELDS > UINT32_MAX ? "span attributes"
                     : (uint64_t)t->n_threads * THREAD_FIELDS > UINT32_MAX ? "threads"
                     : (uint64_t)t->n_meta * ATTR_FIELDS > UINT32_MAX ? "meta entries"
                     : (uint64_t)t->n_counters * ATTR_FIELDS > UINT32_MAX ? "counters"
                     : NULL;
    if (what) {
        snprintf(err, errlen, "cannot write the trace: too many %s for format version %d",
                 what, XSP_FILE_VERSION);
        return -1;
    }
    return 0;
}

int xsp_trace_dump(const xsp_trace *t, char **buf, size_t *len, char *err, size_t errlen)
{
    uint64_t total;
    *buf = NULL;
    *len = 0;
    if (check_writable(t, &total, err, errlen) != 0)
        return -1;
    wbuf w = {0};
    w.cap = 64 + t->strings.arena_len + 5 * (size_t)t->strings.n + 12 * (size_t)t->n_spans
            + 6 * (size_t)total + 16 * ((size_t)t->n_threads + t->n_meta + t->n_counters);
    w.p = malloc(w.cap);  /* a first guess; wbuf_write grows it (from 0 if this failed) */
    w.cap = w.p ? w.cap : 0;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &w, wbuf_write);
    msgpack_pack_array(&pk, TOP_ELEMS);
    msgpack_pack_str(&pk, sizeof XSP_FILE_MAGIC - 1);
    msgpack_pack_str_body(&pk, XSP_FILE_MAGIC, sizeof XSP_FILE_MAGIC - 1);
    msgpack_pack_uint32(&pk, XSP_FILE_VERSION);
    put_strings(&pk, &t->strings);
    put_threads(&pk, t);
    put_attr_list(&pk, t->meta, t->n_meta);
    put_attr_list(&pk, t->counters, t->n_counters);
    put_spans(&pk, t);
    put_span_attrs(&pk, t, total);
    if (w.oom) {
        free(w.p);
        snprintf(err, errlen, "out of memory while writing the trace (%zu bytes so far)", w.len);
        return -1;
    }
    *buf = w.p;
    *len = w.len;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Saving
 *
 * A save writes the whole file under a temporary name in path's directory, fsyncs it,
 * renames it over path and fsyncs the directory, so a reader of path sees the old file or
 * the new one, whole, never a part (rename is atomic), and after a crash path holds one of
 * the two (the data is on disk before the rename is, and the rename before we return).
 *
 * The temporary name is ".<base>.<16 hex digits>.<n>.tmp" beside path: base is path's last
 * component (cut to TMP_BASE_MAX bytes so that the name fits NAME_MAX), the digits are 8
 * random bytes fresh for each attempt (getrandom(2), else /dev/urandom) and n a per-process
 * counter, so that no two calls, in any threads or processes, pick the same name.  It is
 * opened O_CREAT|O_EXCL|O_NOFOLLOW: whatever is already at that name (a file, a symlink that
 * someone who can write the directory planted, dangling or not) makes the open fail with
 * EEXIST instead of being followed or truncated, and the writer tries another name, up to
 * TMP_TRIES times.  The random part keeps the names unpredictable, so that planting at them
 * cannot even make a save fail; O_EXCL alone keeps it safe should no randomness be had.
 *
 * Historical note: the first writer used "<path>.tmp.<pid>" opened O_CREAT|O_TRUNC, which
 * followed a symlink planted at that name (overwriting the file it pointed to) and made all
 * threads of a process write the same file at once (failed saves, torn loads).
 * ---------------------------------------------------------------------------------------- */

#define TMP_TRIES 100       /* names tried before a save gives up with EEXIST */
#define TMP_BASE_MAX 200    /* bytes of path's last component kept in a temporary name */

/* Per-process count of temporary names made; atomic, no lock. */
static atomic_uint_fast64_t tmp_serial;

/* Fills b with n random bytes: getrandom(2), else /dev/urandom, else (no randomness at all:
 * names are then predictable but still never followed, see above) the clock and the pid. */
static void tmp_random(unsigned char *b, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = getrandom(b + got, n - got, GRND_NONBLOCK);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    if (got == n)
        return;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        while (got < n) {
            ssize_t k = read(fd, b + got, n - got);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0)
                break;
            got += (size_t)k;
        }
        close(fd);
    }
    if (got == n)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    x ^= (uint64_t)getpid() << 40;
    for (size_t i = got; i < n; i++, x >>= 8)
        b[i] = (unsigned char)x;
}

/* Writes a new temporary name for path into tmp (tmplen bytes, at least strlen(path) + 64). */
static void tmp_name(const char *path, char *tmp, size_t tmplen)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int dirlen = (int)(base - path);
    size_t blen = strlen(base);
    int baselen = (int)(blen > TMP_BASE_MAX ? TMP_BASE_MAX : blen);
    unsigned char r[8];
    tmp_random(r, sizeof r);
    uint64_t rnd = 0;
    for (size_t i = 0; i < sizeof r; i++)
        rnd = rnd << 8 | r[i];
    uint64_t n = atomic_fetch_add(&tmp_serial, 1);
    snprintf(tmp, tmplen, "%.*s.%.*s.%016" PRIx64 ".%" PRIu64 ".tmp", dirlen, path, baselen,
             base, rnd, n);
}

/* Creates a new temporary file for path (never an existing one, never through a link) and
 * writes its name into tmp (tmplen bytes).  Returns the open descriptor, or -1 (errno set;
 * EEXIST after TMP_TRIES names were all taken; nothing was created). */
static int tmp_create(const char *path, char *tmp, size_t tmplen)
{
    for (int i = 0; i < TMP_TRIES; i++) {
        tmp_name(path, tmp, tmplen);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    errno = EEXIST;
    return -1;
}

/* Writes all n bytes at p to fd, retrying short writes (0, or -1 with errno set), in write(2)
 * calls of at most WRITE_MAX bytes: on this project's machine (Linux 6.18, ext4 with large
 * folios) a 53 MB file written in 64 KiB calls took
 * 0.016-0.031 s in every round, in 128 or 256 KiB calls up to 0.8 s (the page cache then
 * allocates large folios, which a fragmented memory makes the kernel compact first; by hand,
 * 2026-12-03, docs/performance.md "Exporting").  The JSON writers' buffer is as big. */
#define WRITE_MAX (64u << 10)
static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = write(fd, p, n < WRITE_MAX ? n : WRITE_MAX);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* fsyncs the directory that holds path, so that a rename into it is on disk.  Best effort,
 * errors ignored (a directory that cannot be opened for reading, a file system that cannot
 * sync directories): the file is in place by then, and the save has succeeded. */
static void sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : NULL;
    if (slash && !dir)
        return;
    int fd = open(dir ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

int xsp_trace_save(const xsp_trace *t, const char *path, char *err, size_t errlen)
{
    char *buf, why[256];
    size_t len;
    if (xsp_trace_dump(t, &buf, &len, why, sizeof why) != 0) {
        snprintf(err, errlen, "cannot save '%s': %s", path, why);
        return -1;
    }
    size_t tmplen = strlen(path) + 64;
    char *tmp = malloc(tmplen);
    if (!tmp) {
        free(buf);
        snprintf(err, errlen, "cannot save '%s': out of memory", path);
        return -1;
    }
    int rc = -1, e = 0;
    int fd = tmp_create(path, tmp, tmplen);
    if (fd < 0) {
        e = errno;
    } else {
        if (write_all(fd, buf, len) == 0 && fsync(fd) == 0)
            rc = 0;
        else
            e = errno;
        if (close(fd) != 0 && rc == 0)
            rc = -1, e = errno;
        if (rc == 0 && rename(tmp, path) != 0)
            rc = -1, e = errno;
        if (rc != 0)
            unlink(tmp);
    }
    if (rc != 0)
        snprintf(err, errlen, "cannot save '%s': %s", path, strerror(e));
    else
        sync_dir(path);
    free(tmp);
    free(buf);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Reading
 * ---------------------------------------------------------------------------------------- */

/* The state of one parse. */
typedef struct parser {
    xsp_mpr    r;       /* the reader over the whole buffer */
    xsp_trace *t;       /* the trace being built; owned until returned */
    int        kind;    /* enum xsp_load_error of the first failure */
    uint64_t   off;     /* byte offset of the first failure */
    char      *err;     /* the caller's message buffer */
    size_t     errlen;  /* its size */
} parser;

/* Fails at byte off with kind XSP_LOAD_FORMAT and a message. Returns -1. */
static int fail_at(parser *P, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail_at(parser *P, size_t off, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(P->err, P->errlen, fmt, ap);
    va_end(ap);
    P->kind = XSP_LOAD_FORMAT;
    P->off = off;
    return -1;
}

/* Fails after a reader error: "<category>: <where>: <reader's detail>". Returns -1. */
static int fail_read(parser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail_read(parser *P, const char *fmt, ...)
{
    char where[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(where, sizeof where, fmt, ap);
    va_end(ap);
    return fail_at(P, P->r.err_off, "%s: %s: %s", xsp_mpr_errname(P->r.err), where, P->r.msg);
}

/* Fails with XSP_LOAD_NOMEM. Returns -1. */
static int fail_nomem(parser *P, const char *what, uint64_t n)
{
    fail_at(P, P->r.pos, "out of memory reading %" PRIu64 " %s", n, what);
    P->kind = XSP_LOAD_NOMEM;
    return -1;
}

/* Reads a flat section header: an array whose length is a multiple of per; *n = length / per.
 * Succeeds only when the array's elements fit in the bytes left, so *n is safe to allocate. */
static int read_section(parser *P, const char *name, unsigned per, uint32_t *n)
{
    size_t off = P->r.pos;
    if (xsp_mpr_array(&P->r, n) != 0)
        return fail_read(P, "%s section", name);
    if (*n % per)
        return fail_at(P, off, "%s section: %" PRIu32 " elements is not a multiple of %u",
                       name, *n, per);
    *n /= per;
    return 0;
}

/* Allocates an array of n elements of size sz (NULL for n == 0) into *arr. Returns 0 or -1. */
static int alloc_array(parser *P, void **arr, uint32_t n, size_t sz, const char *what)
{
    *arr = NULL;
    if (n && !(*arr = malloc((size_t)n * sz)))
        return fail_nomem(P, what, n);
    return 0;
}

/* Copies at most 16 bytes of s for a message, replacing unprintable bytes with '?'. */
static void printable(char *out, const char *s, uint32_t n)
{
    uint32_t k = n < 16 ? n : 16;
    for (uint32_t i = 0; i < k; i++)
        out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    strcpy(out + k, n > k ? "..." : "");
}

/* Reads the top-level array header, the magic and the version. Stores the element count. */
static int parse_header(parser *P, uint32_t *top)
{
    xsp_mpr *r = &P->r;
    xsp_mp_obj o;
    char text[24];
    if (r->len == 0)
        return fail_at(P, 0, "not an xsp trace file: the file is empty");
    unsigned char b = r->buf[0];
    if ((b & 0xf0) != 0x90 && b != 0xdc && b != 0xdd)
        return fail_at(P, 0, "not an xsp trace file: it starts with byte 0x%02x ('%c'), "
                       "not a msgpack array", b, b >= 0x20 && b < 0x7f ? b : '?');
    if (xsp_mpr_array(r, top) != 0)
        return fail_read(P, "top-level array");
    const char *magic;
    uint32_t n;
    if (*top < 1 || xsp_mpr_peek(r, &o) != 0 || o.type != XSP_MP_STR)
        return r->err ? fail_read(P, "magic")
             : fail_at(P, r->pos, "not an xsp trace file: no magic string at byte %zu", r->pos);
    xsp_mpr_str(r, &magic, &n);
    if (n != sizeof XSP_FILE_MAGIC - 1 || memcmp(magic, XSP_FILE_MAGIC, n) != 0) {
        printable(text, magic, n);
        return fail_at(P, o.off, "not an xsp trace file: magic is '%s'", text);
    }
    size_t voff = r->pos;
    uint64_t version;
    if (*top < 2)
        return fail_at(P, voff, "truncated: the top-level array ends after the magic");
    if (xsp_mpr_uint(r, &version) != 0)
        return fail_read(P, "format version");
    if (version != XSP_FILE_VERSION)
        return fail_at(P, voff, "unsupported format version %" PRIu64
                       " (this xsp reads version %d)", version, XSP_FILE_VERSION);
    if (*top < TOP_ELEMS)
        return fail_at(P, 0, "top-level array has %" PRIu32 " elements, version %d needs %d",
                       *top, XSP_FILE_VERSION, TOP_ELEMS);
    return 0;
}

/* Reads the string table into t->strings, which already holds "" as id 0. */
static int parse_strings(parser *P)
{
    uint32_t n;
    size_t off0 = P->r.pos;
    if (read_section(P, "string table", 1, &n) != 0)
        return -1;
    if (n == 0)
        return fail_at(P, off0, "string table is empty (string 0 must be \"\")");
    for (uint32_t i = 0; i < n; i++) {
        size_t off = P->r.pos;
        const char *s;
        uint32_t len;
        if (xsp_mpr_str(&P->r, &s, &len) != 0)
            return fail_read(P, "string %" PRIu32 " of %" PRIu32, i, n);
        if (len > XSP_STRTAB_MAX_LEN)
            return fail_at(P, off, "string %" PRIu32 ": %" PRIu32 " bytes, more than the %u "
                           "allowed", i, len, XSP_STRTAB_MAX_LEN);
        if (i == 0 && len != 0)
            return fail_at(P, off, "string 0 must be \"\", found %" PRIu32 " bytes", len);
        uint32_t id = i ? xsp_strtab_intern(&P->t->strings, s, len) : 0;
        if (id == UINT32_MAX)
            return fail_nomem(P, "strings", n);
        if (id != i) {
            char text[24];
            printable(text, s, len);
            return fail_at(P, off, "string %" PRIu32 " ('%s') repeats string %" PRIu32, i, text,
                           id);
        }
    }
    return 0;
}

/* Reads an unsigned integer below limit (a count of strings/threads, or 2^32 for any uint32). */
static int read_id(parser *P, uint64_t limit, const char *what, uint32_t *v, const char *ctx,
                   uint32_t i)
{
    size_t off = P->r.pos;
    uint64_t x;
    if (xsp_mpr_uint(&P->r, &x) != 0)
        return fail_read(P, "%s %" PRIu32 ", %s", ctx, i, what);
    if (x >= limit)
        return fail_at(P, off, "%s %" PRIu32 ": %s %" PRIu64 " out of range (%" PRIu64 ")", ctx,
                       i, what, x, limit);
    *v = (uint32_t)x;
    return 0;
}

static int parse_threads(parser *P)
{
    xsp_trace *t = P->t;
    uint32_t n;
    if (read_section(P, "threads", THREAD_FIELDS, &n) != 0
        || alloc_array(P, (void **)&t->threads, n, sizeof *t->threads, "threads") != 0)
        return -1;
    t->cap_threads = n;
    for (uint32_t i = 0; i < n; i++) {
        xsp_thread *th = &t->threads[i];
        if (xsp_mpr_uint(&P->r, &th->tid) != 0)
            return fail_read(P, "thread %" PRIu32 ", tid", i);
        if (read_id(P, t->strings.n, "name id", &th->name, "thread", i) != 0
            || read_id(P, (uint64_t)UINT32_MAX + 1, "kind", &th->kind, "thread", i) != 0)
            return -1;
        t->n_threads = i + 1;
    }
    return 0;
}

/* Reads one attribute (kt, value); ctx and i name it in messages. */
static int read_attr(parser *P, xsp_attr *a, const char *ctx, uint32_t i)
{
    size_t off = P->r.pos;
    uint64_t kt;
    if (xsp_mpr_uint(&P->r, &kt) != 0)
        return fail_read(P, "%s %" PRIu32 ", key", ctx, i);
    uint64_t key = kt >> 2;
    a->type = (uint32_t)(kt & 3);
    if (key >= P->t->strings.n)
        return fail_at(P, off, "%s %" PRIu32 ": key id %" PRIu64 " out of range (%" PRIu32
                       " strings)", ctx, i, key, P->t->strings.n);
    if (a->type > XSP_ATTR_STR)
        return fail_at(P, off, "%s %" PRIu32 ": unknown value type %" PRIu32, ctx, i, a->type);
    a->key = (uint32_t)key;
    if (a->type == XSP_ATTR_INT && xsp_mpr_int(&P->r, &a->v.i) != 0)
        return fail_read(P, "%s %" PRIu32 ", integer value", ctx, i);
    if (a->type == XSP_ATTR_FLOAT && xsp_mpr_double(&P->r, &a->v.f) != 0)
        return fail_read(P, "%s %" PRIu32 ", float value", ctx, i);
    if (a->type == XSP_ATTR_STR)
        return read_id(P, P->t->strings.n, "string value id", &a->v.s, ctx, i);
    return 0;
}

/* Reads a flat attribute section into a new array *arr of *n entries (capacity *cap); with
 * ints_only every value must be an INT (counters). */
static int parse_attr_list(parser *P, const char *name, xsp_attr **arr, uint32_t *n,
                           uint32_t *cap, int ints_only)
{
    uint32_t count;
    if (read_section(P, name, ATTR_FIELDS, &count) != 0
        || alloc_array(P, (void **)arr, count, sizeof **arr, name) != 0)
        return -1;
    *cap = count;
    for (uint32_t i = 0; i < count; i++) {
        size_t off = P->r.pos;
        if (read_attr(P, &(*arr)[i], name, i) != 0)
            return -1;
        if (ints_only && (*arr)[i].type != XSP_ATTR_INT)
            return fail_at(P, off, "%s %" PRIu32 ": value type %" PRIu32 ", must be an integer",
                           name, i, (*arr)[i].type);
        *n = i + 1;
    }
    return 0;
}

static const char *const span_field[SPAN_FIELDS] = {
    "start delta", "duration", "parent delta", "name id", "level/kind/flags", "thread",
    "attribute count"};

/* Turns the seven integers f of span i (read at offsets off) into *s. */
static int decode_span(parser *P, uint32_t i, const uint64_t *f, const size_t *off,
                       uint64_t *start, uint64_t *attr_sum, xsp_span *s)
{
    const xsp_trace *t = P->t;
    unsigned level = (f[4] >> 4) & 15, kind = f[4] & 15;
    if (f[0] > UINT64_MAX - *start || f[1] > UINT64_MAX - (*start + f[0]))
        return fail_at(P, off[f[0] > UINT64_MAX - *start ? 0 : 1],
                       "span %" PRIu32 ": time overflows 64 bits", i);
    if (f[2] > i)
        return fail_at(P, off[2], "span %" PRIu32 ": parent delta %" PRIu64
                       " points before span 0", i, f[2]);
    if (f[3] >= t->strings.n)
        return fail_at(P, off[3], "span %" PRIu32 ": name id %" PRIu64 " out of range (%"
                       PRIu32 " strings)", i, f[3], t->strings.n);
    if (level >= XSP_NLEVELS || kind >= XSP_NKINDS || f[4] >> 8 > UINT32_MAX)
        return fail_at(P, off[4], "span %" PRIu32 ": bad level/kind/flags %" PRIu64
                       " (level %u, kind %u)", i, f[4], level, kind);
    if (f[5] >= t->n_threads)
        return fail_at(P, off[5], "span %" PRIu32 ": thread %" PRIu64 " out of range (%"
                       PRIu32 " threads)", i, f[5], t->n_threads);
    if (f[6] > UINT16_MAX || *attr_sum + f[6] > UINT32_MAX)
        return fail_at(P, off[6], "span %" PRIu32 ": attribute count %" PRIu64
                       " too large", i, f[6]);
    *start += f[0];
    *s = (xsp_span){.start_ns = *start, .end_ns = *start + f[1],
                    .parent = f[2] ? i - (uint32_t)f[2] : XSP_NO_PARENT, .name = (uint32_t)f[3],
                    .thread = (uint32_t)f[5], .attr_off = (uint32_t)*attr_sum,
                    .attr_n = (uint16_t)f[6], .level = (uint8_t)level, .kind = (uint8_t)kind,
                    .flags = (uint32_t)(f[4] >> 8)};
    *attr_sum += f[6];
    return 0;
}

/* Reads the spans; stores the total attribute count they declare in *attr_sum. */
static int parse_spans(parser *P, uint64_t *attr_sum)
{
    xsp_trace *t = P->t;
    uint32_t n;
    uint64_t start = 0, f[SPAN_FIELDS];
    size_t off[SPAN_FIELDS];
    *attr_sum = 0;
    if (read_section(P, "spans", SPAN_FIELDS, &n) != 0
        || alloc_array(P, (void **)&t->spans, n, sizeof *t->spans, "spans") != 0)
        return -1;
    t->cap_spans = n;
    for (uint32_t i = 0; i < n; i++) {
        for (unsigned k = 0; k < SPAN_FIELDS; k++) {
            off[k] = P->r.pos;
            if (xsp_mpr_uint(&P->r, &f[k]) != 0)
                return fail_read(P, "span %" PRIu32 " of %" PRIu32 ", %s", i, n, span_field[k]);
        }
        if (decode_span(P, i, f, off, &start, attr_sum, &t->spans[i]) != 0)
            return -1;
        t->n_spans = i + 1;
    }
    return 0;
}

/* Reads the span attributes: exactly attr_sum of them, in span order. */
static int parse_span_attrs(parser *P, uint64_t attr_sum)
{
    xsp_trace *t = P->t;
    size_t off = P->r.pos;
    uint32_t n;
    if (read_section(P, "attributes", ATTR_FIELDS, &n) != 0)
        return -1;
    if (n != attr_sum)
        return fail_at(P, off, "attributes section holds %" PRIu32 " attributes but the spans "
                       "declare %" PRIu64, n, attr_sum);
    if (alloc_array(P, (void **)&t->attrs, n, sizeof *t->attrs, "attributes") != 0)
        return -1;
    t->cap_attrs = n;
    for (uint32_t i = 0; i < n; i++) {
        if (read_attr(P, &t->attrs[i], "attribute", i) != 0)
            return -1;
        t->n_attrs = i + 1;
    }
    return 0;
}

/* Reads everything after the header: sections, later additions, then the end of the file. */
static int parse_body(parser *P, uint32_t top)
{
    xsp_trace *t = P->t;
    uint64_t attr_sum;
    if (parse_strings(P) || parse_threads(P)
        || parse_attr_list(P, "meta", &t->meta, &t->n_meta, &t->cap_meta, 0)
        || parse_attr_list(P, "counter", &t->counters, &t->n_counters, &t->cap_counters, 1)
        || parse_spans(P, &attr_sum) || parse_span_attrs(P, attr_sum))
        return -1;
    for (uint32_t i = TOP_ELEMS; i < top; i++)
        if (xsp_mpr_skip(&P->r) != 0)
            return fail_read(P, "top-level element %" PRIu32 " of %" PRIu32, i, top);
    if (P->r.pos != P->r.len)
        return fail_at(P, P->r.pos, "trailing garbage after the trace at byte %zu (%zu bytes)",
                       P->r.pos, P->r.len - P->r.pos);
    char why[256];
    if (xsp_trace_check(t, why, sizeof why) != 0)
        return fail_at(P, 0, "invalid trace: %s", why);
    return 0;
}

xsp_trace *xsp_trace_parse(const void *buf, size_t len, int *kind, uint64_t *offset,
                           char *err, size_t errlen)
{
    parser P = {.kind = XSP_LOAD_OK, .err = err, .errlen = errlen};
    uint32_t top;
    xsp_mpr_init(&P.r, buf, len);
    if (errlen)
        err[0] = '\0';
    P.t = xsp_trace_new();
    if (!P.t)
        fail_nomem(&P, "trace", 1);
    else if (parse_header(&P, &top) != 0 || parse_body(&P, top) != 0) {
        xsp_trace_free(P.t);
        P.t = NULL;
    }
    *kind = P.kind;
    *offset = P.off;
    return P.t;
}

/* Reads the whole regular file behind fd into a new buffer. Returns 0, or -1 with errno set
 * (ENOMEM when the buffer cannot be allocated). */
static int read_whole(int fd, char **buf, size_t *len)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -1;
    if (S_ISDIR(st.st_mode)) {
        errno = EISDIR;
        return -1;
    }
    if ((uint64_t)st.st_size > SIZE_MAX - 1) {
        errno = EFBIG;
        return -1;
    }
    size_t size = (size_t)st.st_size, got = 0;
    char *p = malloc(size ? size : 1);
    if (!p) {
        errno = ENOMEM;
        return -1;
    }
    while (got < size) {
        ssize_t k = read(fd, p + got, size - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            int e = errno;
            free(p);
            errno = e;
            return -1;
        }
        if (k == 0)
            break;  /* the file shrank while reading: parse what is there */
        got += (size_t)k;
    }
    *buf = p;
    *len = got;
    return 0;
}

xsp_trace *xsp_trace_load(const char *path, int *kind, uint64_t *offset, char *err,
                          size_t errlen)
{
    char *buf = NULL, msg[512];
    size_t len = 0;
    *offset = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read_whole(fd, &buf, &len) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        *kind = e == ENOMEM ? XSP_LOAD_NOMEM : XSP_LOAD_IO;
        snprintf(err, errlen, "cannot read '%s': %s", path, strerror(e));
        return NULL;
    }
    close(fd);
    xsp_trace *t = xsp_trace_parse(buf, len, kind, offset, msg, sizeof msg);
    free(buf);
    if (t && errlen)
        err[0] = '\0';
    else if (!t)
        snprintf(err, errlen, "%s: %s", path, msg);
    return t;
}
