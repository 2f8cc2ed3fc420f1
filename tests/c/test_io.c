/*
 * test_io.c: unit tests of the trace file (csrc/io): the msgpack pull reader and the writer
 * and reader of .xsp files.
 *
 * What is guarded, in order:
 *   - mpread decodes every msgpack family msgpack-c writes, in each size class, and refuses
 *     wrong types, out-of-range values and declared lengths larger than the bytes left;
 *   - a trace with every kind of content (all attribute types and edge values, unicode and
 *     empty names, flags, far parents, several tracks, meta, counters) survives dump -> parse
 *     and save -> load equal, and the bytes form one msgpack object per msgpack-c's unpacker;
 *   - every truncation prefix of a valid file fails as XSP_LOAD_FORMAT; every single-byte
 *     corruption either fails cleanly or yields a trace that passes xsp_trace_check (run this
 *     under ASan/UBSan to make "cleanly" mean "no out-of-bounds read");
 *   - foreign and hostile inputs fail fast with the expected message and byte offset;
 *   - spans stay compact: under 20 bytes per span for a typical synthetic trace.
 * Inputs handed to the parser are copied into exact-size heap blocks so that ASan catches a
 * read one byte past the end.
 *
 * Build and run (see the Makefile):
 *   gcc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wstrict-prototypes -Werror -g -O1 -Icsrc \
 *       tests/c/test_io.c csrc/io/ *.c csrc/core/strtab.c csrc/core/trace.c \
 *       $(pkg-config --cflags --libs msgpack) -o /tmp/test_io && /tmp/test_io
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <msgpack.h>

#include "core/trace.h"
#include "io/mpread.h"
#include "io/tracefile.h"

static int n_checks, n_failed;

#define CHECK(c)                                                                      \
    do {                                                                              \
        n_checks++;                                                                   \
        if (!(c)) {                                                                   \
            n_failed++;                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c);     \
        }                                                                             \
    } while (0)

/* CHECK with a message printed on failure (the parser's error, usually). */
#define CHECKM(c, msg)                                                                \
    do {                                                                              \
        n_checks++;                                                                   \
        if (!(c)) {                                                                   \
            n_failed++;                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n    (%s)\n", __FILE__, __LINE__, \
                    #c, (msg));                                                       \
        }                                                                             \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------------------------------
 * Building traces
 * ---------------------------------------------------------------------------------------- */

static uint32_t str_id(xsp_trace *t, const char *s)
{
    return xsp_strtab_intern(&t->strings, s, strlen(s));
}

/* Appends a span; its attributes are those added next (attrs stay in span order). */
static uint32_t add_span(xsp_trace *t, uint64_t start, uint64_t end, uint32_t parent,
                         const char *name, unsigned level, unsigned kind, uint32_t thread,
                         uint32_t flags)
{
    xsp_span s = {.start_ns = start, .end_ns = end, .parent = parent, .name = str_id(t, name),
                  .thread = thread, .attr_off = t->n_attrs, .attr_n = 0,
                  .level = (uint8_t)level, .kind = (uint8_t)kind, .flags = flags};
    return xsp_trace_add_span(t, &s);
}

/* Appends an attribute to the last span. */
static void add_attr(xsp_trace *t, const char *key, uint32_t type, int64_t i, double f,
                     const char *s)
{
    xsp_attr a = {.key = str_id(t, key), .type = type};
    if (type == XSP_ATTR_INT)
        a.v.i = i;
    else if (type == XSP_ATTR_FLOAT)
        a.v.f = f;
    else
        a.v.s = str_id(t, s);
    CHECK(xsp_trace_add_attr(t, &a) != UINT32_MAX);
    t->spans[t->n_spans - 1].attr_n++;
}

#define T0 1700000000000000000ull  /* a realistic wall-clock epoch in ns */

/* A trace exercising every field; with_long adds strings of 300 and 65535 bytes. */
static xsp_trace *sample_trace(int with_long)
{
    xsp_trace *t = xsp_trace_new();
    CHECK(t != NULL);
    xsp_trace_add_thread(t, 12345, "main", 0);
    xsp_trace_add_thread(t, (uint64_t)0 << 32 | 7, "stream 7", 1);
    xsp_trace_add_thread(t, 99, "", 0);
    xsp_trace_add_thread(t, UINT64_MAX, "ワーカー", 0);
    xsp_trace_set_meta_str(t, "xsp.version", "0.1");
    xsp_trace_set_meta_int(t, "levels", 7);
    xsp_trace_set_meta_float(t, "clock.scale", 1.0 / 3);
    xsp_trace_set_meta_str(t, "empty", "");
    xsp_trace_add_counter(t, "lost.cap", 3);
    xsp_trace_add_counter(t, "lost.nomem", 0);
    xsp_trace_add_counter(t, "negative", -5);

    add_span(t, T0, T0 + 1000000000, XSP_NO_PARENT, "region", XSP_LEVEL_M, XSP_KIND_REGION, 0, 0);
    add_attr(t, "device", XSP_ATTR_STR, 0, 0, "cuda:0");
    add_attr(t, "batch", XSP_ATTR_INT, 32, 0, NULL);
    add_span(t, T0 + 100, T0 + 500000000, 0, "ResNet50", XSP_LEVEL_M, XSP_KIND_MODEL, 0, 0);
    add_span(t, T0 + 150, T0 + 200, 1, "", XSP_LEVEL_L, XSP_KIND_MODULE, 0, 0);
    add_attr(t, "min", XSP_ATTR_INT, INT64_MIN, 0, NULL);
    add_attr(t, "max", XSP_ATTR_INT, INT64_MAX, 0, NULL);
    add_attr(t, "neg", XSP_ATTR_INT, -33, 0, NULL);
    add_attr(t, "tenth", XSP_ATTR_FLOAT, 0, 0.1, NULL);
    add_attr(t, "half", XSP_ATTR_FLOAT, 0, 1.5, NULL);
    add_attr(t, "nan", XSP_ATTR_FLOAT, 0, NAN, NULL);
    add_attr(t, "-inf", XSP_ATTR_FLOAT, 0, -INFINITY, NULL);
    add_attr(t, "-0", XSP_ATTR_FLOAT, 0, -0.0, NULL);
    add_attr(t, "huge", XSP_ATTR_FLOAT, 0, 1e300, NULL);
    add_attr(t, "", XSP_ATTR_STR, 0, 0, "");
    add_span(t, T0 + 150, T0 + 150, 2, "aten::conv2d", XSP_LEVEL_L, XSP_KIND_OP, 0,
             XSP_FLAG_OPEN_AT_STOP | XSP_FLAG_FORCED_END);
    add_span(t, T0 + 160, T0 + 170, 3, "cudaLaunchKernel", XSP_LEVEL_G, XSP_KIND_RUNTIME, 0, 0);
    add_span(t, T0 + 300, T0 + 900, 4, "ümlaut_kernel<float>🚀", XSP_LEVEL_G, XSP_KIND_KERNEL,
             1, 0);
    add_attr(t, "grid", XSP_ATTR_INT, 65536, 0, NULL);
    add_attr(t, "stream", XSP_ATTR_INT, 7, 0, NULL);
    add_span(t, T0 + 300, T0 + 301, XSP_NO_PARENT, "region", XSP_LEVEL_L, XSP_KIND_SCOPE, 3,
             1u << 31);
    add_span(t, T0 + 999999999, T0 + 1000000000, 0, "tail", XSP_LEVEL_G, XSP_KIND_OVERHEAD, 2, 0);
    if (with_long) {
        char *s = malloc(XSP_STRTAB_MAX_LEN + 1);
        memset(s, 'x', XSP_STRTAB_MAX_LEN);
        s[XSP_STRTAB_MAX_LEN] = '\0';
        add_attr(t, "long", XSP_ATTR_STR, 0, 0, s);
        s[300] = '\0';
        add_attr(t, s, XSP_ATTR_STR, 0, 0, "value");
        free(s);
    }
    char err[256];
    CHECKM(xsp_trace_check(t, err, sizeof err) == 0, err);
    return t;
}

/* n spans of a typical shape: a model span over layers of ops over kernels, small deltas. */
static xsp_trace *synth_trace(uint32_t n, int attrs_every)
{
    xsp_trace *t = xsp_trace_new();
    char name[32];
    xsp_trace_add_thread(t, 1, "main", 0);
    xsp_trace_add_thread(t, 7, "stream 7", 1);
    for (unsigned i = 0; i < 50; i++) {
        snprintf(name, sizeof name, "aten::op%u", i);
        str_id(t, name);
    }
    uint64_t start = T0;
    uint32_t layer = XSP_NO_PARENT;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t parent = i == 0 ? XSP_NO_PARENT : (i % 8 == 1) ? 0 : layer;
        unsigned kind = i == 0 ? XSP_KIND_MODEL : (i % 8 == 1) ? XSP_KIND_MODULE : XSP_KIND_OP;
        unsigned level = kind == XSP_KIND_MODEL ? XSP_LEVEL_M : XSP_LEVEL_L;
        uint64_t dur = i == 0 ? (uint64_t)n * 2000 : 200 + (i * 2654435761u) % 4000;
        snprintf(name, sizeof name, "aten::op%u", (i * 7) % 50);
        add_span(t, start, start + dur, parent, name, level, kind, i % 8 == 7, 0);
        if (attrs_every && i % attrs_every == 0) {
            add_attr(t, "seq", XSP_ATTR_INT, i, 0, NULL);
            add_attr(t, "dtype", XSP_ATTR_STR, 0, 0, "float32");
        }
        if (i % 8 == 1)
            layer = i;
        start += 300 + (i * 40503u) % 1500;
    }
    return t;
}

/* Copies len bytes into an exact-size heap block (so ASan sees reads past the end). */
static char *exact_copy(const void *p, size_t len)
{
    char *q = malloc(len ? len : 1);
    memcpy(q, p, len);
    return q;
}

/* Parses len bytes from an exact-size copy. Stores kind, offset and the message. */
static xsp_trace *parse_copy(const void *p, size_t len, int *kind, uint64_t *off, char *err,
                             size_t errlen)
{
    char *q = exact_copy(p, len);
    xsp_trace *t = xsp_trace_parse(q, len, kind, off, err, errlen);
    free(q);
    return t;
}

/* Expects parsing to fail as a format error whose message contains want (if not NULL) at
 * offset want_off (if not UINT64_MAX). */
static void expect_fail(const void *p, size_t len, const char *want, uint64_t want_off,
                        int line)
{
    int kind = -1;
    uint64_t off = 0;
    char err[512];
    xsp_trace *t = parse_copy(p, len, &kind, &off, err, sizeof err);
    n_checks++;
    if (t || kind != XSP_LOAD_FORMAT || (want && !strstr(err, want))
        || (want_off != UINT64_MAX && off != want_off)) {
        n_failed++;
        fprintf(stderr, "line %d: expected failure '%s' at %" PRIu64 ", got %s kind %d at %"
                PRIu64 ": '%s'\n", line, want ? want : "", want_off, t ? "a trace" : "NULL",
                kind, off, err);
    }
    xsp_trace_free(t);
}

/* ------------------------------------------------------------------------------------------
 * mpread
 * ---------------------------------------------------------------------------------------- */

static void test_mpread_scalars(void)
{
    static const uint64_t us[] = {0, 127, 128, 255, 256, 65535, 65536, 4294967295u,
                                  4294967296u, UINT64_MAX};
    static const int64_t is[] = {-1, -32, -33, -128, -129, -32768, -32769, INT32_MIN,
                                 (int64_t)INT32_MIN - 1, INT64_MIN, 5};
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (size_t i = 0; i < sizeof us / sizeof us[0]; i++)
        msgpack_pack_uint64(&pk, us[i]);
    for (size_t i = 0; i < sizeof is / sizeof is[0]; i++)
        msgpack_pack_int64(&pk, is[i]);
    msgpack_pack_nil(&pk);
    msgpack_pack_true(&pk);
    msgpack_pack_false(&pk);
    msgpack_pack_float(&pk, 2.5f);
    msgpack_pack_double(&pk, 0.1);
    msgpack_pack_float(&pk, 3.0f);
    msgpack_pack_uint64(&pk, UINT64_MAX);  /* read as int: out of range */
    msgpack_pack_int64(&pk, -1);            /* read as uint: out of range */

    char *buf = exact_copy(sb.data, sb.size);
    xsp_mpr r;
    xsp_mpr_init(&r, buf, sb.size);
    for (size_t i = 0; i < sizeof us / sizeof us[0]; i++) {
        uint64_t v = 1;
        CHECK(xsp_mpr_uint(&r, &v) == 0 && v == us[i]);
    }
    for (size_t i = 0; i < sizeof is / sizeof is[0]; i++) {
        int64_t v = 1;
        CHECK(xsp_mpr_int(&r, &v) == 0 && v == is[i]);
    }
    int b = -1;
    float f = 0;
    double d = 0;
    CHECK(xsp_mpr_nil(&r) == 0);
    CHECK(xsp_mpr_bool(&r, &b) == 0 && b == 1);
    CHECK(xsp_mpr_bool(&r, &b) == 0 && b == 0);
    CHECK(xsp_mpr_float(&r, &f) == 0 && f == 2.5f);
    CHECK(xsp_mpr_double(&r, &d) == 0 && d == 0.1);
    CHECK(xsp_mpr_double(&r, &d) == 0 && d == 3.0);  /* float32 widened */
    int64_t iv;
    size_t at = r.pos;
    CHECK(xsp_mpr_int(&r, &iv) == -1 && r.err == XSP_MP_ERANGE && r.err_off == at);
    CHECK(r.pos == at);
    uint64_t uv;
    CHECK(xsp_mpr_uint(&r, &uv) == -1);  /* sticky: the first error stays */
    CHECK(r.err == XSP_MP_ERANGE && r.err_off == at);

    xsp_mpr_init(&r, buf + sb.size - 1, 1);  /* the trailing -1 alone */
    CHECK(xsp_mpr_uint(&r, &uv) == -1 && r.err == XSP_MP_ERANGE);
    xsp_mpr_init(&r, buf, 0);
    CHECK(xsp_mpr_uint(&r, &uv) == -1 && r.err == XSP_MP_ETRUNC && r.err_off == 0);
    free(buf);
    msgpack_sbuffer_destroy(&sb);
}

static void test_mpread_sized(void)
{
    static const uint32_t lens[] = {0, 31, 32, 255, 256, 65535, 65536};
    char *payload = calloc(1, 65536);
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (size_t i = 0; i < 7; i++) {
        msgpack_pack_str(&pk, lens[i]);
        msgpack_pack_str_body(&pk, payload, lens[i]);
        msgpack_pack_bin(&pk, lens[i]);
        msgpack_pack_bin_body(&pk, payload, lens[i]);
    }
    static const uint32_t counts[] = {0, 15, 16, 65535, 65536};
    for (size_t i = 0; i < 5; i++) {
        msgpack_pack_array(&pk, counts[i]);
        for (uint32_t j = 0; j < counts[i]; j++)
            msgpack_pack_nil(&pk);
        msgpack_pack_map(&pk, counts[i]);
        for (uint32_t j = 0; j < 2 * counts[i]; j++)
            msgpack_pack_uint8(&pk, 1);
    }
    msgpack_pack_ext(&pk, 3, 5);
    msgpack_pack_ext_body(&pk, "abc", 3);
    msgpack_pack_ext(&pk, 4, -1);
    msgpack_pack_ext_body(&pk, "abcd", 4);

    char *buf = exact_copy(sb.data, sb.size);
    xsp_mpr r;
    xsp_mpr_init(&r, buf, sb.size);
    for (size_t i = 0; i < 7; i++) {
        const char *s;
        uint32_t n = 1;
        CHECK(xsp_mpr_str(&r, &s, &n) == 0 && n == lens[i] && memcmp(s, payload, n) == 0);
        CHECK(xsp_mpr_bin(&r, &s, &n) == 0 && n == lens[i]);
    }
    for (size_t i = 0; i < 5; i++) {
        uint32_t n = 1;
        CHECK(xsp_mpr_array(&r, &n) == 0 && n == counts[i]);
        for (uint32_t j = 0; j < n; j++)
            xsp_mpr_nil(&r);
        CHECK(xsp_mpr_map(&r, &n) == 0 && n == counts[i]);
        for (uint32_t j = 0; j < 2 * n; j++) {
            uint64_t v;
            xsp_mpr_uint(&r, &v);
        }
    }
    xsp_mp_obj o;
    CHECK(xsp_mpr_next(&r, &o) == 0 && o.type == XSP_MP_EXT && o.ext_type == 5 && o.n == 3);
    CHECK(xsp_mpr_next(&r, &o) == 0 && o.type == XSP_MP_EXT && o.ext_type == -1 && o.n == 4);
    CHECK(r.err == XSP_MP_OK && xsp_mpr_left(&r) == 0);

    /* skip: the whole buffer, object by object */
    xsp_mpr_init(&r, buf, sb.size);
    unsigned objs = 0;
    while (xsp_mpr_left(&r) && xsp_mpr_skip(&r) == 0)
        objs++;
    CHECK(r.err == XSP_MP_OK && objs == 7 * 2 + 5 * 2 + 2);
    free(buf);
    free(payload);
    msgpack_sbuffer_destroy(&sb);
}

static void test_mpread_hostile(void)
{
    xsp_mpr r;
    uint32_t n;
    const char *s;
    /* declared lengths larger than the bytes left fail before anyone can allocate */
    static const unsigned char arr32[] = {0xdd, 0xff, 0xff, 0xff, 0xff, 0, 0, 0};
    xsp_mpr_init(&r, arr32, sizeof arr32);
    CHECK(xsp_mpr_array(&r, &n) == -1 && r.err == XSP_MP_ETRUNC && r.err_off == 0);
    CHECKM(strstr(r.msg, "array32 of 4294967295 elements at byte 0") != NULL, r.msg);
    static const unsigned char map16[] = {0xde, 0x00, 0x03, 1, 1, 1, 1, 1};  /* 3 pairs: 6 > 5 */
    xsp_mpr_init(&r, map16, sizeof map16);
    CHECK(xsp_mpr_map(&r, &n) == -1 && r.err == XSP_MP_ETRUNC);
    static const unsigned char str32[] = {0xdb, 0x00, 0x00, 0x00, 0x04, 'a', 'b', 'c'};
    xsp_mpr_init(&r, str32, sizeof str32);
    CHECK(xsp_mpr_str(&r, &s, &n) == -1 && r.err == XSP_MP_ETRUNC);
    CHECKM(strcmp(r.msg, "str32 of 4 bytes at byte 0 ends at byte 9 but the file has 8 bytes")
           == 0, r.msg);
    static const unsigned char u64[] = {0xcf, 1, 2, 3};
    xsp_mpr_init(&r, u64, sizeof u64);
    uint64_t v;
    CHECK(xsp_mpr_uint(&r, &v) == -1 && r.err == XSP_MP_ETRUNC);
    CHECKM(strcmp(r.msg, "uint64 at byte 0 ends at byte 9 but the file has 4 bytes") == 0, r.msg);
    static const unsigned char c1[] = {0xc1};
    xsp_mpr_init(&r, c1, 1);
    CHECK(xsp_mpr_skip(&r) == -1 && r.err == XSP_MP_EBADBYTE);
    static const unsigned char ext[] = {0xd8, 1, 2};  /* fixext16 with 1 byte of payload */
    xsp_mpr_init(&r, ext, sizeof ext);
    CHECK(xsp_mpr_skip(&r) == -1 && r.err == XSP_MP_ETRUNC);
    static const unsigned char wrong[] = {0xa1, 'x'};
    xsp_mpr_init(&r, wrong, sizeof wrong);
    CHECK(xsp_mpr_uint(&r, &v) == -1 && r.err == XSP_MP_ETYPE && r.pos == 0);

    /* deep nesting is skipped iteratively: 10^6 levels of [[[...nil]]] */
    size_t depth = 1000000;
    unsigned char *deep = malloc(depth + 1);
    memset(deep, 0x91, depth);
    deep[depth] = 0xc0;
    xsp_mpr_init(&r, deep, depth + 1);
    CHECK(xsp_mpr_skip(&r) == 0 && xsp_mpr_left(&r) == 0);
    xsp_mpr_init(&r, deep, depth);  /* the innermost array cannot hold its element */
    CHECK(xsp_mpr_skip(&r) == -1 && r.err == XSP_MP_ETRUNC && r.err_off == depth - 1);
    free(deep);
}

/* ------------------------------------------------------------------------------------------
 * Trace files
 * ---------------------------------------------------------------------------------------- */

/* Checks with msgpack-c's own unpacker that buf is exactly one msgpack object, an array
 * starting with the magic and the version. */
static void check_with_msgpack_c(const char *buf, size_t len)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    msgpack_unpack_return rc = msgpack_unpack_next(&u, buf, len, &off);
    CHECK(rc == MSGPACK_UNPACK_SUCCESS);
    CHECK(off == len);
    msgpack_object o = u.data;
    CHECK(o.type == MSGPACK_OBJECT_ARRAY && o.via.array.size == 8);
    if (o.type == MSGPACK_OBJECT_ARRAY && o.via.array.size == 8) {
        msgpack_object m = o.via.array.ptr[0], v = o.via.array.ptr[1];
        CHECK(m.type == MSGPACK_OBJECT_STR && m.via.str.size == 8
              && memcmp(m.via.str.ptr, "XSPTRACE", 8) == 0);
        CHECK(v.type == MSGPACK_OBJECT_POSITIVE_INTEGER && v.via.u64 == XSP_FILE_VERSION);
        for (unsigned i = 2; i < 8; i++)
            CHECK(o.via.array.ptr[i].type == MSGPACK_OBJECT_ARRAY);
    }
    msgpack_unpacked_destroy(&u);
}

static void test_roundtrip(void)
{
    for (int with_long = 0; with_long <= 1; with_long++) {
        xsp_trace *t = sample_trace(with_long);
        char *buf, *buf2, err[512];
        size_t len, len2;
        CHECKM(xsp_trace_dump(t, &buf, &len, err, sizeof err) == 0, err);
        check_with_msgpack_c(buf, len);
        int kind;
        uint64_t off;
        xsp_trace *u = parse_copy(buf, len, &kind, &off, err, sizeof err);
        CHECKM(u != NULL && kind == XSP_LOAD_OK, err);
        if (u) {
            CHECK(xsp_trace_equal(t, u));
            CHECK(u->strings.n == t->strings.n);
            CHECK(xsp_trace_dump(u, &buf2, &len2, err, sizeof err) == 0);
            CHECK(len2 == len && memcmp(buf, buf2, len) == 0);  /* the format is canonical */
            free(buf2);
        }
        xsp_trace_free(u);
        free(buf);
        xsp_trace_free(t);
    }
    /* an empty trace */
    xsp_trace *e = xsp_trace_new();
    char *buf, err[256];
    size_t len;
    CHECK(xsp_trace_dump(e, &buf, &len, err, sizeof err) == 0);
    CHECK(len == 1 + 9 + 1 + 2 + 5);  /* header, magic, version, [""], five empty arrays */
    int kind;
    uint64_t off;
    xsp_trace *u = parse_copy(buf, len, &kind, &off, err, sizeof err);
    CHECKM(u && xsp_trace_equal(e, u), err);
    xsp_trace_free(u);
    free(buf);
    xsp_trace_free(e);
}

/* The worked example of docs/format.md, byte for byte: guards against silent format changes. */
static void test_golden(void)
{
    static const unsigned char want[] =
        "\x98\xa8XSPTRACE\x01"                                  /* header */
        "\x9a\xa0\xa4main\xa9monotonic\xa5" "clock\xa8lost.cap\xa4step\xa9" "aten::add"
        "\xa1n\xa5" "dtype\xa7" "float32"                       /* string table */
        "\x93\xcd\x10\x92\x01\x00"                             /* threads */
        "\x92\x0e\x02"                                         /* meta */
        "\x92\x10\x00"                                         /* counters */
        "\x9e\xcd\x03\xe8\xcd\x0f\xa0\x00\x05\x02\x00\x00"       /* span 0 */
        "\xcc\xc8\xcd\x01\x2c\x01\x06\x14\x00\x02"               /* span 1 */
        "\x94\x1c\x03\x22\x09";                                /* attributes */
    xsp_trace *t = xsp_trace_new();
    xsp_trace_add_thread(t, 4242, "main", 0);
    xsp_trace_set_meta_str(t, "clock", "monotonic");
    xsp_trace_add_counter(t, "lost.cap", 0);
    add_span(t, 1000, 5000, XSP_NO_PARENT, "step", XSP_LEVEL_M, XSP_KIND_STEP, 0, 0);
    add_span(t, 1200, 1500, 0, "aten::add", XSP_LEVEL_L, XSP_KIND_OP, 0, 0);
    add_attr(t, "n", XSP_ATTR_INT, 3, 0, NULL);
    add_attr(t, "dtype", XSP_ATTR_STR, 0, 0, "float32");
    char *buf, err[256];
    size_t len;
    CHECKM(xsp_trace_dump(t, &buf, &len, err, sizeof err) == 0, err);
    CHECK(len == sizeof want - 1 && len == 113);
    CHECK(len == sizeof want - 1 && memcmp(buf, want, len) == 0);
    free(buf);
    xsp_trace_free(t);
}

/* A trace whose attributes are not in span order is written canonically and reads back equal. */
static void test_noncanonical_attrs(void)
{
    xsp_trace *t = xsp_trace_new();
    xsp_trace_add_thread(t, 1, "t", 0);
    add_span(t, 10, 20, XSP_NO_PARENT, "a", 0, 0, 0, 0);
    add_span(t, 11, 12, 0, "b", 1, 4, 0, 0);
    xsp_attr x = {.key = str_id(t, "k"), .type = XSP_ATTR_INT, .v.i = 1};
    xsp_attr y = {.key = str_id(t, "k"), .type = XSP_ATTR_INT, .v.i = 2};
    xsp_trace_add_attr(t, &x);
    xsp_trace_add_attr(t, &y);
    xsp_trace_add_attr(t, &x);  /* unreferenced: not written */
    t->spans[0] = (xsp_span){10, 20, XSP_NO_PARENT, t->spans[0].name, 0, 1, 1, 0, 0, 0};
    t->spans[1] = (xsp_span){11, 12, 0, t->spans[1].name, 0, 0, 1, 1, 4, 0};
    char *buf, err[256];
    size_t len;
    CHECKM(xsp_trace_dump(t, &buf, &len, err, sizeof err) == 0, err);
    int kind;
    uint64_t off;
    xsp_trace *u = parse_copy(buf, len, &kind, &off, err, sizeof err);
    CHECKM(u != NULL, err);
    if (u) {
        CHECK(xsp_trace_equal(t, u));
        CHECK(u->n_attrs == 2 && u->spans[0].attr_off == 0 && u->spans[1].attr_off == 1);
        CHECK(u->attrs[0].v.i == 2 && u->attrs[1].v.i == 1);
    }
    xsp_trace_free(u);
    free(buf);
    /* an invalid trace is refused, not written */
    t->spans[1].parent = 1;
    CHECK(xsp_trace_dump(t, &buf, &len, err, sizeof err) == -1 && buf == NULL);
    CHECKM(strstr(err, "cannot write an invalid trace: span 1") != NULL, err);
    xsp_trace_free(t);
}

/* The number of entries in directory dir, "." and ".." left out (-1 when it cannot be read):
 * what a save leaves there, temporary files included. */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static void test_save_load(void)
{
    char home[128], path[160], dir[160], err[512];
    snprintf(home, sizeof home, "/tmp/xsp_test_io_%ld", (long)getpid());
    CHECK(mkdir(home, 0700) == 0);
    snprintf(path, sizeof path, "%s/t.xsp", home);
    /* regression guard (bug: the temporary file was "<path>.tmp.<pid>", opened O_TRUNC
     * without O_NOFOLLOW: a symlink planted there had its target overwritten) */
    char victim[192], link[192];
    snprintf(victim, sizeof victim, "%s/victim", home);
    snprintf(link, sizeof link, "%s.tmp.%ld", path, (long)getpid());
    FILE *v = fopen(victim, "wb");
    fputs("keep", v);
    fclose(v);
    CHECK(symlink(victim, link) == 0);
    xsp_trace *t = sample_trace(1);
    CHECKM(xsp_trace_save(t, path, err, sizeof err) == 0, err);
    CHECKM(xsp_trace_save(t, path, err, sizeof err) == 0, err);    /* over the first */
    int kind = -1;
    uint64_t off = 1;
    xsp_trace *u = xsp_trace_load(path, &kind, &off, err, sizeof err);
    CHECKM(u != NULL && kind == XSP_LOAD_OK && xsp_trace_equal(t, u), err);
    xsp_trace_free(u);
    struct stat st;
    CHECK(stat(victim, &st) == 0 && st.st_size == 4);
    CHECK(count_entries(home) == 3);            /* t.xsp, victim, link: no temporary file */
    unlink(link);
    unlink(victim);

    /* a corrupt file on disk: format error, message names the path */
    FILE *f = fopen(path, "r+b");
    fseek(f, 0, SEEK_SET);
    fputc(0x7b, f);
    fclose(f);
    u = xsp_trace_load(path, &kind, &off, err, sizeof err);
    CHECKM(!u && kind == XSP_LOAD_FORMAT && off == 0 && strstr(err, path) == err, err);
    unlink(path);

    /* missing file: I/O error naming the path and the system error */
    u = xsp_trace_load(path, &kind, &off, err, sizeof err);
    CHECKM(!u && kind == XSP_LOAD_IO && strstr(err, path) && strstr(err, strerror(ENOENT)), err);

    /* saving over a directory fails at rename, names the path, leaves no temporary file */
    snprintf(dir, sizeof dir, "%s/sub", home);
    mkdir(dir, 0700);
    CHECK(xsp_trace_save(t, dir, err, sizeof err) == -1);
    CHECKM(strstr(err, dir) != NULL, err);
    CHECK(count_entries(home) == 1 && count_entries(dir) == 0);
    u = xsp_trace_load(dir, &kind, &off, err, sizeof err);
    CHECKM(!u && kind == XSP_LOAD_IO && strstr(err, dir), err);
    rmdir(dir);
    rmdir(home);

    /* saving into a missing directory */
    CHECK(xsp_trace_save(t, "/nonexistent-xsp-dir/t.xsp", err, sizeof err) == -1);
    CHECKM(strstr(err, "/nonexistent-xsp-dir/t.xsp") && strstr(err, strerror(ENOENT)), err);
    xsp_trace_free(t);
}

static void test_truncations_and_flips(void)
{
    xsp_trace *t = sample_trace(0);
    char *buf, err[512];
    size_t len;
    CHECK(xsp_trace_dump(t, &buf, &len, err, sizeof err) == 0);
    int kind;
    uint64_t off;
    unsigned bad = 0;
    for (size_t k = 0; k < len; k++) {
        xsp_trace *u = parse_copy(buf, k, &kind, &off, err, sizeof err);
        if (u || kind != XSP_LOAD_FORMAT || off > k || !err[0]
            || (k > 0 && strncmp(err, "truncated: ", 11) != 0)) {
            if (bad++ < 5)
                fprintf(stderr, "prefix %zu of %zu: kind %d off %" PRIu64 " '%s'\n", k, len,
                        kind, off, err);
        }
        xsp_trace_free(u);
    }
    CHECK(bad == 0);

    static const int deltas[] = {1, 0x80, -1};
    static const int values[] = {0x00, 0xff, 0xc1, 0x7f, 0xdd, 0xa0};
    unsigned parsed = 0, failed = 0;
    bad = 0;
    char *copy = malloc(len);
    for (size_t i = 0; i < len; i++) {
        for (unsigned v = 0; v < 9; v++) {
            memcpy(copy, buf, len);
            if (v < 3)
                copy[i] = (char)((unsigned char)buf[i] ^ (unsigned)deltas[v]);
            else
                copy[i] = (char)values[v - 3];
            if (copy[i] == buf[i])
                continue;
            xsp_trace *u = parse_copy(copy, len, &kind, &off, err, sizeof err);
            if (u) {
                parsed++;
                if (xsp_trace_check(u, err, sizeof err) != 0 && bad++ < 5)
                    fprintf(stderr, "flip %zu/%u: parsed an invalid trace: %s\n", i, v, err);
            } else {
                failed++;
                if ((kind != XSP_LOAD_FORMAT || off > len || !err[0]) && bad++ < 5)
                    fprintf(stderr, "flip %zu/%u: kind %d off %" PRIu64 " '%s'\n", i, v, kind,
                            off, err);
            }
            xsp_trace_free(u);
        }
    }
    CHECK(bad == 0);
    printf("  byte flips of a %zu-byte file: %u parsed to valid traces, %u failed cleanly\n", len,
           parsed, failed);

    /* random multi-byte corruption, deterministic */
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    bad = 0;
    for (unsigned it = 0; it < 20000; it++) {
        memcpy(copy, buf, len);
        unsigned nflip = 1 + it % 4;
        for (unsigned j = 0; j < nflip; j++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            copy[(seed >> 33) % len] = (char)(seed >> 20);
        }
        size_t n = (it % 3 == 0) ? (size_t)((seed >> 40) % (len + 1)) : len;
        xsp_trace *u = parse_copy(copy, n, &kind, &off, err, sizeof err);
        if (u ? xsp_trace_check(u, err, sizeof err) != 0 : (kind != XSP_LOAD_FORMAT || off > n))
            bad++;
        xsp_trace_free(u);
    }
    CHECK(bad == 0);
    free(copy);
    free(buf);
    xsp_trace_free(t);
}

/* Writes ["XSPTRACE", version, strs, [1, 0, 0], [], [], spans f[0..nf), [], extra...] and
 * stores in *mark the offset at which f[mark_at] was written. */
static void craft(msgpack_sbuffer *sb, uint64_t version, const char *const *strs, uint32_t nstr,
                  const uint64_t *f, uint32_t nf, uint32_t mark_at, size_t *mark, int extra)
{
    msgpack_packer pk;
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 8 + (extra ? 2 : 0));
    msgpack_pack_str(&pk, 8);
    msgpack_pack_str_body(&pk, "XSPTRACE", 8);
    msgpack_pack_uint64(&pk, version);
    msgpack_pack_array(&pk, nstr);
    for (uint32_t i = 0; i < nstr; i++) {
        msgpack_pack_str(&pk, strlen(strs[i]));
        msgpack_pack_str_body(&pk, strs[i], strlen(strs[i]));
    }
    msgpack_pack_array(&pk, 3);
    msgpack_pack_uint8(&pk, 1);
    msgpack_pack_uint8(&pk, 0);
    msgpack_pack_uint8(&pk, 0);
    msgpack_pack_array(&pk, 0);
    msgpack_pack_array(&pk, 0);
    msgpack_pack_array(&pk, nf);
    for (uint32_t i = 0; i < nf; i++) {
        if (i == mark_at)
            *mark = sb->size;
        msgpack_pack_uint64(&pk, f[i]);
    }
    msgpack_pack_array(&pk, 0);
    if (extra) {  /* later additions: a nested map and an ext */
        msgpack_pack_map(&pk, 1);
        msgpack_pack_str(&pk, 6);
        msgpack_pack_str_body(&pk, "future", 6);
        msgpack_pack_array(&pk, 2);
        msgpack_pack_double(&pk, 1.5);
        msgpack_pack_map(&pk, 1);
        msgpack_pack_nil(&pk);
        msgpack_pack_bin(&pk, 2);
        msgpack_pack_bin_body(&pk, "ab", 2);
        msgpack_pack_ext(&pk, 1, 9);
        msgpack_pack_ext_body(&pk, "z", 1);
    }
}

#define L4 (16 * XSP_LEVEL_L + XSP_KIND_OP)  /* the level/kind/flags word of an L op */

static void test_crafted(void)
{
    static const char *const strs[] = {"", "a", "b"};
    msgpack_sbuffer sb;
    size_t mark = 0;
    char err[512], want[256];
    int kind;
    uint64_t off;

    /* valid, with two later top-level additions that this version skips */
    /* span 0's big fields keep the spans array's declared count (14) below the bytes left
     * when the file is cut inside span 1, so the cut is found at the field, not the header */
    const uint64_t ok[] = {T0, 1000000000, 0, 1, L4, 0, 0, 3, 100000, 1, 2, L4 | 1u << 8, 0, 0};
    craft(&sb, 1, strs, 3, ok, 14, 99, &mark, 1);
    xsp_trace *u = parse_copy(sb.data, sb.size, &kind, &off, err, sizeof err);
    CHECKM(u != NULL, err);
    if (u) {
        CHECK(u->n_spans == 2 && u->spans[1].start_ns == T0 + 3 && u->spans[1].end_ns == T0 + 100003);
        CHECK(u->spans[1].parent == 0 && u->spans[1].flags == 1 && u->spans[0].parent == XSP_NO_PARENT);
        CHECK(u->spans[1].level == XSP_LEVEL_L && u->spans[1].kind == XSP_KIND_OP);
    }
    xsp_trace_free(u);
    msgpack_sbuffer_destroy(&sb);

    /* exact offset and message of a truncation inside span 1's duration (a uint32) */
    craft(&sb, 1, strs, 3, ok, 14, 8, &mark, 0);
    snprintf(want, sizeof want, "truncated: span 1 of 2, duration: uint32 at byte %zu ends at "
             "byte %zu but the file has %zu bytes", mark, mark + 5, mark + 3);
    xsp_trace_free(parse_copy(sb.data, mark + 3, &kind, &off, err, sizeof err));
    CHECKM(strcmp(err, want) == 0 && off == mark && kind == XSP_LOAD_FORMAT, err);
    /* and at an object boundary: the missing object starts where the file ends */
    expect_fail(sb.data, mark, "truncated: span 1 of 2, duration: an object should start at byte",
                mark, __LINE__);
    /* trailing garbage */
    msgpack_sbuffer_write(&sb, "\0", 1);
    snprintf(want, sizeof want, "trailing garbage after the trace at byte %zu", sb.size - 1);
    expect_fail(sb.data, sb.size, want, sb.size - 1, __LINE__);
    msgpack_sbuffer_destroy(&sb);

    /* semantic errors, each at the offset of the offending field */
    static const struct {
        unsigned field;  /* index into ok[] to change */
        uint64_t value;  /* new value */
        const char *want;
    } bad[] = {
        {10, 77, "span 1: name id 77 out of range (3 strings)"},
        {9, 2, "span 1: parent delta 2 points before span 0"},
        {12, 5, "span 1: thread 5 out of range (1 threads)"},
        {11, 16 * XSP_LEVEL_L + 15, "span 1: bad level/kind/flags"},
        {11, 16 * 3 + 1, "span 1: bad level/kind/flags"},
        {11, (uint64_t)1 << 40, "span 1: bad level/kind/flags"},
        {13, 70000, "span 1: attribute count 70000 too large"},
        {8, UINT64_MAX, "span 1: time overflows 64 bits"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t f[14];
        memcpy(f, ok, sizeof f);
        f[bad[i].field] = bad[i].value;
        craft(&sb, 1, strs, 3, f, 14, bad[i].field, &mark, 0);
        expect_fail(sb.data, sb.size, bad[i].want, mark, __LINE__);
        msgpack_sbuffer_destroy(&sb);
    }
    uint64_t f[14];
    memcpy(f, ok, sizeof f);
    f[13] = 1;
    craft(&sb, 1, strs, 3, f, 14, 99, &mark, 0);
    expect_fail(sb.data, sb.size, "attributes section holds 0 attributes but the spans declare 1",
                sb.size - 1, __LINE__);
    msgpack_sbuffer_destroy(&sb);
    craft(&sb, 1, strs, 3, ok, 8, 0, &mark, 0);
    expect_fail(sb.data, sb.size, "spans section: 8 elements is not a multiple of 7", mark - 1,
                __LINE__);
    msgpack_sbuffer_destroy(&sb);

    /* string table errors */
    static const char *const dup[] = {"", "a", "b", "a"};
    craft(&sb, 1, dup, 4, ok, 0, 0, &mark, 0);
    expect_fail(sb.data, sb.size, "string 3 ('a') repeats string 1", 17, __LINE__);
    msgpack_sbuffer_destroy(&sb);
    static const char *const nonempty[] = {"x"};
    craft(&sb, 1, nonempty, 1, ok, 0, 0, &mark, 0);
    expect_fail(sb.data, sb.size, "string 0 must be \"\"", 12, __LINE__);
    msgpack_sbuffer_destroy(&sb);

    /* versions */
    craft(&sb, 7, strs, 3, ok, 14, 0, &mark, 0);
    expect_fail(sb.data, sb.size, "unsupported format version 7 (this xsp reads version 1)", 10,
                __LINE__);
    msgpack_sbuffer_destroy(&sb);
    craft(&sb, 0, strs, 3, ok, 14, 0, &mark, 0);
    expect_fail(sb.data, sb.size, "unsupported format version 0", 10, __LINE__);
    msgpack_sbuffer_destroy(&sb);
}

static void test_foreign(void)
{
    expect_fail("", 0, "not an xsp trace file: the file is empty", 0, __LINE__);
    expect_fail("{}", 2, "not an xsp trace file: it starts with byte 0x7b ('{')", 0, __LINE__);
    const char *json = "[{\"name\": \"x\", \"ts\": 1}]";
    expect_fail(json, strlen(json), "not an xsp trace file: it starts with byte 0x5b ('[')", 0,
                __LINE__);
    expect_fail("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16, "not an xsp trace file: it starts with "
                "byte 0x89", 0, __LINE__);
    expect_fail("\x92\xa6GIF89a\x01", 9, "not an xsp trace file: magic is 'GIF89a'", 1, __LINE__);
    expect_fail("\x92\x01\x01", 3, "not an xsp trace file: no magic string at byte 1", 1,
                __LINE__);
    expect_fail("\x92\xa8XSPTRACE\x02", 11, "unsupported format version 2", 10, __LINE__);
    expect_fail("\x92\xa8XSPTRACE\x01", 11, "top-level array has 2 elements, version 1 needs 8",
                0, __LINE__);
    expect_fail("\x90", 1, "not an xsp trace file: no magic string at byte 1", 1, __LINE__);
    expect_fail("\xc1", 1, "not an xsp trace file: it starts with byte 0xc1", 0, __LINE__);
    expect_fail("\x91\xc1", 2, "malformed: magic: byte 0xc1 at byte 1", 1, __LINE__);

    /* huge declared lengths: fail at once, allocate nothing */
    unsigned char huge[20] = {0xdd, 0xff, 0xff, 0xff, 0xff};
    expect_fail(huge, sizeof huge, "truncated: top-level array: array32 of 4294967295 elements "
                "at byte 0 would end at byte 4294967300 or later but the file has 20 bytes", 0,
                __LINE__);
    static const unsigned char strtab[] = "\x98\xa8XSPTRACE\x01\xdd\xff\xff\xff\xff\0\0\0";
    expect_fail(strtab, sizeof strtab - 1, "truncated: string table section: array32 of "
                "4294967295 elements at byte 11", 11, __LINE__);
    static const unsigned char bigstr[] = "\x98\xa8XSPTRACE\x01\x91\xdb\xff\xff\xff\xff\0";
    expect_fail(bigstr, sizeof bigstr - 1, "truncated: string 0 of 1: str32 of 4294967295 bytes "
                "at byte 12", 12, __LINE__);
    static const unsigned char bigspans[] =
        "\x98\xa8XSPTRACE\x01\x91\xa0\x90\x90\x90\xdd\x7f\xff\xff\xff\x90";
    expect_fail(bigspans, sizeof bigspans - 1, "truncated: spans section: array32 of "
                "2147483647 elements at byte 16", 16, __LINE__);

    /* random bytes, some behind a valid header */
    uint64_t seed = 42;
    unsigned char rnd[300];
    unsigned bad = 0, parsed = 0;
    for (unsigned it = 0; it < 20000; it++) {
        size_t n = it % sizeof rnd;
        for (size_t i = 0; i < n; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            rnd[i] = (unsigned char)(seed >> 33);
        }
        if (it % 2 && n >= 11)
            memcpy(rnd, "\x98\xa8XSPTRACE\x01", 11);
        int kind;
        uint64_t off;
        char err[256];
        xsp_trace *u = parse_copy(rnd, n, &kind, &off, err, sizeof err);
        if (u)
            parsed++;
        else if (kind != XSP_LOAD_FORMAT || off > n || !err[0])
            bad++;
        xsp_trace_free(u);
    }
    CHECK(bad == 0 && parsed == 0);
}

/* Bytes per span and dump/parse speed for n synthetic spans. */
static void measure(uint32_t n, int attrs_every, int assert_small)
{
    xsp_trace *t = synth_trace(n, attrs_every);
    char *buf, err[256];
    size_t len;
    double t0 = now_s();
    CHECKM(xsp_trace_dump(t, &buf, &len, err, sizeof err) == 0, err);
    double t1 = now_s();
    int kind;
    uint64_t off;
    xsp_trace *u = xsp_trace_parse(buf, len, &kind, &off, err, sizeof err);
    double t2 = now_s();
    CHECKM(u && xsp_trace_equal(t, u), err);
    double per = (double)len / n;
    printf("  %7" PRIu32 " spans%s: %.2f bytes/span (%zu bytes), dump %.1f ms (%.0f ns/span), "
           "parse %.1f ms (%.0f ns/span)\n", n, attrs_every ? " + attrs" : "        ", per, len,
           (t1 - t0) * 1e3, (t1 - t0) * 1e9 / n, (t2 - t1) * 1e3, (t2 - t1) * 1e9 / n);
    if (assert_small)
        CHECK(per < 20);
    if (n <= 100000)
        check_with_msgpack_c(buf, len);
    xsp_trace_free(u);
    free(buf);
    xsp_trace_free(t);
}

int main(int argc, char **argv)
{
    (void)argv;
    test_mpread_scalars();
    test_mpread_sized();
    test_mpread_hostile();
    test_roundtrip();
    test_golden();
    test_noncanonical_attrs();
    test_save_load();
    test_truncations_and_flips();
    test_crafted();
    test_foreign();
    measure(100000, 0, 1);
    measure(100000, 4, 0);
    if (argc < 2)  /* any argument: skip the slow sizes (sanitizer runs) */
        measure(1000000, 0, 1);
    printf("test_io: %d checks, %d failed\n", n_checks, n_failed);
    return n_failed != 0;
}
