/*
 * test_jsonw.c: the JSON text writer of the exporters (csrc/io/jsonw.h), plain and under ASan +
 * UBSan: every byte 0-255 in a string, invalid UTF-8 (each byte that is not part of a
 * well-formed sequence as '?', as the Python writers wrote the lone surrogates of
 * surrogateescape), doubles as Python's repr, NaN and the infinities as strings, int64 and
 * uint64 extremes, exact microseconds from ns (negative and past 2**64), a text longer than
 * the buffer, gzip that inflates back, and a failed write reported by close.  Then the span
 * writers over it (kinetow.c, kmemw.c, chromew.c, otlpw.c) on a small trace with attributes of
 * every kind the rules read, some of the wrong type, under the sanitizers: the events they must
 * write (the comparison with the Python writers is tests/py/formats/test_json_writers.py);
 * OTLP's attribute renaming, repeated keys and a trace index out of range.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "io/chromew.h"
#include "io/jsonw.h"
#include "io/kinetow.h"
#include "io/otlpw.h"

/* Runs fn on a writer to a temporary file and returns the file's bytes (malloc'd, NUL-ended),
 * inflated when gz. */
static char *capture(void (*fn)(xsp_jsonw *), int gz, size_t *len)
{
    FILE *f = tmpfile();
    xsp_jsonw *w = xsp_jsonw_open(fileno(f), gz);
    fn(w);
    char err[128];
    CHECK(xsp_jsonw_close(w, err, sizeof err) == 0);
    long n = ftell(f);
    n = lseek(fileno(f), 0, SEEK_END);
    lseek(fileno(f), 0, SEEK_SET);
    char *raw = malloc((size_t)n + 1);
    CHECK(read(fileno(f), raw, (size_t)n) == n);
    fclose(f);
    if (!gz) {
        raw[n] = 0;
        *len = (size_t)n;
        return raw;
    }
    size_t cap = 64u << 20;
    char *out = malloc(cap + 1);
    z_stream z = {0};
    CHECK(inflateInit2(&z, 15 + 16) == Z_OK);
    z.next_in = (unsigned char *)raw;
    z.avail_in = (uInt)n;
    z.next_out = (unsigned char *)out;
    z.avail_out = (uInt)cap;
    CHECK(inflate(&z, Z_FINISH) == Z_STREAM_END);
    *len = cap - z.avail_out;
    out[*len] = 0;
    inflateEnd(&z);
    free(raw);
    return out;
}

static void check_text(void (*fn)(xsp_jsonw *), const char *want)
{
    size_t n;
    char *got = capture(fn, 0, &n);
    CHECK(n == strlen(want) && memcmp(got, want, n) == 0);
    if (n != strlen(want) || memcmp(got, want, n) != 0)
        fprintf(stderr, "  got  %s\n  want %s\n", got, want);
    free(got);
}

static void w_bytes(xsp_jsonw *w)
{
    char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (char)i;
    xsp_jsonw_str(w, all, 256);
}

/* json.dumps(bytes(range(256)).decode("utf-8", "surrogateescape") with the surrogates as '?',
 * ensure_ascii=False) */
static const char ALL_BYTES[] =
    "\"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r\\u000e"
    "\\u000f\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019\\u001a"
    "\\u001b\\u001c\\u001d\\u001e\\u001f !\\\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNO"
    "PQRSTUVWXYZ[\\\\]^_`abcdefghijklmnopqrstuvwxyz{|}~\x7f"
    "????????????????????????????????????????????????????????????????"
    "????????????????????????????????????????????????????????????????\"";

static void w_utf8(xsp_jsonw *w)
{
    static const char *const cases[] = {
        "caf\xc3\xa9",          /* valid 2-byte */
        "\xe2\x82\xac",         /* valid 3-byte (euro) */
        "\xf0\x9f\x98\x80",     /* valid 4-byte */
        "\xe2\x82" "A",         /* cut short: 2 bytes */
        "\xc0\xaf",             /* overlong */
        "\xed\xa0\x80",         /* a surrogate */
        "\xf4\x90\x80\x80",     /* past U+10FFFF */
        "\x80" "b",             /* stray continuation */
        "\xf0\x9f\x98",         /* 4-byte cut at the end */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        xsp_jsonw_str(w, cases[i], strlen(cases[i]));
        xsp_jsonw_lit(w, ",");
    }
    xsp_jsonw_str2(w, "xsp.", "k\xff", 2);
    xsp_jsonw_lit(w, ",");
    xsp_jsonw_text(w, "[\"a\xff\", 1]", 9);
}

static void w_numbers(xsp_jsonw *w)
{
    static const double d[] = {0.0, -0.0, 1.0, 0.1, 100.0, 1e16, 1e-05, 0.0001, 123.456,
                               1234567890123456.0, 1.5e300, 5e-324, 2.5, -3.75, 1e22,
                               0.30000000000000004};
    for (size_t i = 0; i < sizeof d / sizeof *d; i++) {
        xsp_jsonw_double(w, d[i]);
        xsp_jsonw_lit(w, " ");
    }
    xsp_jsonw_double(w, 0.0 / 0.0 * 0.0 + __builtin_nan(""));
    xsp_jsonw_lit(w, " ");
    xsp_jsonw_double(w, __builtin_inf());
    xsp_jsonw_lit(w, " ");
    xsp_jsonw_double(w, -__builtin_inf());
    xsp_jsonw_lit(w, " ");
    xsp_jsonw_int(w, INT64_MIN);
    xsp_jsonw_lit(w, " ");
    xsp_jsonw_int(w, INT64_MAX);
    xsp_jsonw_lit(w, " ");
    xsp_jsonw_uint(w, UINT64_MAX);
    xsp_jsonw_lit(w, " ");
    xsp_jsonw_int(w, 0);
}

static void w_times(xsp_jsonw *w)
{
    xsp_jsonw_us(w, 0, 0);
    xsp_jsonw_lit(w, " ");
    xsp_jsonw_us(w, 1234567, 0);
    xsp_jsonw_lit(w, " ");
    xsp_jsonw_us(w, 5, 6);                          /* -1 ns */
    xsp_jsonw_lit(w, " ");
    xsp_jsonw_us(w, 0, 1000000);                    /* -1000 us */
    xsp_jsonw_lit(w, " ");
    xsp_jsonw_us(w, UINT64_MAX, 0);
    xsp_jsonw_lit(w, " ");
    xsp_jsonw_us(w, UINT64_MAX, INT64_MIN);         /* 2**64 - 1 + 2**63, past 2**64 */
    xsp_jsonw_lit(w, " ");
    xsp_jsonw_us(w, 0, INT64_MIN);                  /* 2**63 */
    xsp_jsonw_lit(w, " ");
    xsp_jsonw_us(w, 0, INT64_MAX);
}

static void w_big(xsp_jsonw *w)
{
    /* 3 MB of text: many flushes, a string split across them */
    char s[1000];
    memset(s, 'a', sizeof s);
    s[500] = '"';
    for (int i = 0; i < 3000; i++)
        xsp_jsonw_str(w, s, sizeof s);
}

/* -- the span writers ------------------------------------------------------------------ */

static uint32_t sid(xsp_trace *t, const char *s)
{
    return xsp_strtab_intern(&t->strings, s, strlen(s));
}

static void span(xsp_trace *t, uint64_t start, uint64_t end, uint32_t parent, const char *name,
                 unsigned level, unsigned kind, uint32_t thread)
{
    xsp_span s = {.start_ns = start, .end_ns = end, .parent = parent, .name = sid(t, name),
                  .thread = thread, .attr_off = t->n_attrs, .level = (uint8_t)level,
                  .kind = (uint8_t)kind};
    CHECK(xsp_trace_add_span(t, &s) != UINT32_MAX);
}

static void attr_i(xsp_trace *t, const char *key, int64_t v)
{
    xsp_attr a = {.key = sid(t, key), .type = XSP_ATTR_INT, .v.i = v};
    CHECK(xsp_trace_add_attr(t, &a) != UINT32_MAX);
    t->spans[t->n_spans - 1].attr_n++;
}

static void attr_s(xsp_trace *t, const char *key, const char *v)
{
    xsp_attr a = {.key = sid(t, key), .type = XSP_ATTR_STR, .v.s = sid(t, v)};
    CHECK(xsp_trace_add_attr(t, &a) != UINT32_MAX);
    t->spans[t->n_spans - 1].attr_n++;
}

static void attr_f(xsp_trace *t, const char *key, double v)
{
    xsp_attr a = {.key = sid(t, key), .type = XSP_ATTR_FLOAT, .v.f = v};
    CHECK(xsp_trace_add_attr(t, &a) != UINT32_MAX);
    t->spans[t->n_spans - 1].attr_n++;
}

static xsp_trace *small_trace(void)
{
    xsp_trace *t = xsp_trace_new();
    xsp_trace_add_thread(t, 7, "main", 0);
    xsp_trace_add_thread(t, (uint64_t)0 << 32 | 3, "stream 3", 1);
    span(t, 1000, 9000, XSP_NO_PARENT, "region", XSP_LEVEL_M, XSP_KIND_REGION, 0);
    span(t, 1100, 2000, 0, "aten::mm\xff", XSP_LEVEL_L, XSP_KIND_OP, 0);      /* 1 */
    attr_i(t, "seq", 4);
    attr_s(t, "input_dims", "[[2, 3]]");
    attr_s(t, "k.x[]", "[1, 2]");
    attr_s(t, "k.cat", "my_cat");
    attr_i(t, "id", 5);
    attr_i(t, "attr.id", 6);
    attr_f(t, "ratio", 0.0 / 0.0 * 0.0 + __builtin_nan(""));
    attr_i(t, "mem.cpu.allocs", 2);
    attr_i(t, "mem.cpu.alloc_bytes", 9);
    attr_i(t, "mem.cpu.frees", 1);
    attr_i(t, "mem.cpu.freed_bytes", 4);
    attr_i(t, "mem.cpu.peak", INT64_MAX);
    attr_i(t, "mem.cpu.total", INT64_MIN);
    span(t, 1200, 1300, 1, "cudaLaunchKernel", XSP_LEVEL_G, XSP_KIND_RUNTIME, 0);   /* 2 */
    attr_i(t, "correlation", 11);
    span(t, 1400, 1900, 2, "gemm", XSP_LEVEL_G, XSP_KIND_KERNEL, 1);                 /* 3 */
    attr_i(t, "correlation", 11);
    attr_i(t, "api", 2);
    attr_s(t, "grid_x", "four");
    attr_i(t, "smem_static", 8);
    span(t, 3000, 4000, 0, "MmBackward0", XSP_LEVEL_L, XSP_KIND_BACKWARD, 0);        /* 4 */
    attr_i(t, "seq", 4);
    attr_i(t, "fwd_op", 1);
    attr_i(t, "fwd_op", 1 << 30);             /* the last one counts: no span */
    span(t, 5000, 5000, 0, "HtoD", XSP_LEVEL_G, XSP_KIND_MEMCPY, 1);                 /* 5 */
    attr_f(t, "bytes", 1e300);
    char err[128];
    CHECK(xsp_trace_check(t, err, sizeof err) == 0);
    return t;
}

static xsp_trace *W_TRACE;

static void w_kineto(xsp_jsonw *w)
{
    const xsp_trace *t = W_TRACE;
    int64_t pid[2] = {42, 0}, rank[2] = {1, 0}, zero[6] = {0}, none[6], ext[6];
    uint64_t tid[2] = {7, 3};
    for (int i = 0; i < 6; i++) {
        none[i] = i == 2 || i == 3 ? 1 : -1;      /* the runtime call's and kernel's op */
        ext[i] = i + 1;
    }
    uint32_t json_sid[2] = {xsp_strtab_find(&t->strings, "[[2, 3]]", 8),
                            xsp_strtab_find(&t->strings, "[1, 2]", 6)};
    xsp_bytes json_text[2] = {{"[[2, 3]]", 8}, {"[1, 2]", 6}};
    if (json_sid[0] > json_sid[1]) {
        uint32_t s = json_sid[0];
        json_sid[0] = json_sid[1];
        json_sid[1] = s;
        xsp_bytes b = json_text[0];
        json_text[0] = json_text[1];
        json_text[1] = b;
    }
    int64_t name_sid[6];
    for (uint32_t i = 0; i < 6; i++)
        name_sid[i] = t->spans[i].name;
    int64_t none_mod[6] = {-1, -1, -1, -1, -1, -1};
    xsp_kineto_cols c = {.base_ns = 1000, .track_pid = pid, .track_tid = tid, .fwd_rank = rank,
                         .ext = ext, .near_cpu = none, .near_mod = none_mod,
                         .name_sid = name_sid, .mod_id = zero, .n_json = 2,
                         .json_sid = json_sid, .json_text = json_text};
    xsp_jsonw_lit(w, "[");
    CHECK(xsp_kineto_write_events(w, t, &c, 0) == 0);
    xsp_jsonw_lit(w, "]");
}

static void w_chrome(xsp_jsonw *w)
{
    int64_t pid[2] = {42, 42};
    xsp_chrome_cols c = {.t0 = 1000, .track_pid = pid};
    xsp_jsonw_lit(w, "[{}");
    xsp_chrome_write_events(w, W_TRACE, &c);
    xsp_jsonw_lit(w, "]");
}

static void check_has(const char *text, const char *want)
{
    CHECK(strstr(text, want) != NULL);
    if (!strstr(text, want))
        fprintf(stderr, "  missing: %s\n", want);
}

static const uint64_t HI[2] = {0x0123456789abcdefull, 0xffffffffffffffffull};
static const uint64_t LO[2] = {0x1ull, 0xfedcba9876543210ull};
static const int32_t IX[6] = {0, 1, 1, 1, 1, 1};   /* the region the profile's, the rest one
                                                     * other trace's (as under a step) */

static void w_otlp(xsp_jsonw *w)
{
    int64_t lev_id[2] = {1, 5};
    double lev_val[2] = {2.5, -__builtin_inf()};
    xsp_otlp_cols c = {.span_base = 0xfffffffffffffff0ull, .offset = (uint64_t)-1000,
                       .n_traces = 2, .trace_hi = HI, .trace_lo = LO, .trace_ix = IX,
                       .n_lev = 2, .lev_id = lev_id, .lev_val = lev_val};
    xsp_jsonw_lit(w, "[");
    CHECK(xsp_otlp_write_spans(w, W_TRACE, &c) == 0);
    xsp_jsonw_lit(w, "]");
}

static xsp_trace *R_TRACE;

/* OTLP's renaming: one op with keys that are xsp's own, the same once made printable, or
 * repeated; and enough keys that the names table grows. */
static void w_otlp_names(xsp_jsonw *w)
{
    xsp_otlp_cols c = {.span_base = 1, .n_traces = 1, .trace_hi = HI, .trace_lo = LO};
    CHECK(xsp_otlp_write_spans(w, R_TRACE, &c) == 0);
}

static void w_otlp_bad_index(xsp_jsonw *w)
{
    int32_t ix[6] = {0, 0, 2, 0, 0, 0};             /* 2: past the two trace ids */
    xsp_otlp_cols c = {.span_base = 1, .n_traces = 2, .trace_hi = HI, .trace_lo = LO,
                       .trace_ix = ix};
    CHECK(xsp_otlp_write_spans(w, W_TRACE, &c) == -1);
}

static xsp_trace *BIG_TRACE;

static void w_otlp_big(xsp_jsonw *w)
{
    xsp_otlp_cols c = {.span_base = 1, .n_traces = 1, .trace_hi = HI, .trace_lo = LO};
    xsp_jsonw_lit(w, "[");
    CHECK(xsp_otlp_write_spans(w, BIG_TRACE, &c) == 0);
    xsp_jsonw_lit(w, "]");
}

/* 5000 spans (about 2 MB of text, the 64 KiB buffer flushed many times under the writer's
 * reserved records), plain and gzip: every span once, in order, the text whole. */
static void otlp_big(void)
{
    BIG_TRACE = xsp_trace_new();
    xsp_trace_add_thread(BIG_TRACE, 7, "main", 0);
    span(BIG_TRACE, 0, 1u << 30, XSP_NO_PARENT, "region", XSP_LEVEL_M, XSP_KIND_REGION, 0);
    for (uint32_t i = 1; i < 5000; i++) {
        span(BIG_TRACE, i, i + 1, 0, "aten::add_", XSP_LEVEL_L, XSP_KIND_OP, 0);
        attr_i(BIG_TRACE, "seq", i);
    }
    for (int gz = 0; gz < 2; gz++) {
        size_t n;
        char *o = capture(w_otlp_big, gz, &n);
        CHECK(n > 2u << 20 && o[0] == '[' && o[n - 2] == '}' && o[n - 1] == ']');
        const char *at = o;
        uint32_t seen = 0;
        char want[64];
        for (;;) {
            snprintf(want, sizeof want, "\"spanId\":\"%016x\"", seen + 1);
            const char *q = strstr(at, "\"spanId\":\"");
            if (!q)
                break;
            if (strncmp(q, want, strlen(want)) != 0)
                break;
            at = q + 1;
            seen++;
        }
        CHECK(seen == 5000);
        check_has(o, "{\"key\":\"xsp.span_id\",\"value\":{\"intValue\":\"4999\"}},{\"key\":"
                     "\"xsp.thread\",\"value\":{\"intValue\":\"7\"}},{\"key\":"
                     "\"xsp.thread_name\",\"value\":{\"stringValue\":\"main\"}},{\"key\":"
                     "\"xsp.seq\",\"value\":{\"intValue\":\"4999\"}}],\"status\":{},"
                     "\"flags\":256}]");
        free(o);
    }
    xsp_trace_free(BIG_TRACE);
}

static void otlp_writer(void)
{
    otlp_big();
    size_t n;
    char *o = capture(w_otlp, 0, &n);
    /* the region: the profile's trace, no parent, time 1000 + offset = 0 left out */
    check_has(o, "[{\"traceId\":\"0123456789abcdef0000000000000001\",\"spanId\":"
                 "\"fffffffffffffff0\",\"name\":\"region\",\"kind\":1,"
                 "\"endTimeUnixNano\":\"8000\",\"attributes\":[{\"key\":\"xsp.level\","
                 "\"value\":{\"stringValue\":\"M\"}},{\"key\":\"xsp.kind\",\"value\":"
                 "{\"stringValue\":\"region\"}},{\"key\":\"xsp.span_id\",\"value\":"
                 "{\"intValue\":\"0\"}},{\"key\":\"xsp.thread\",\"value\":{\"intValue\":"
                 "\"7\"}},{\"key\":\"xsp.thread_name\",\"value\":{\"stringValue\":"
                 "\"main\"}}],\"status\":{},\"flags\":256}");
    /* span 1: in another trace than its parent, the region: a root with a link */
    check_has(o, ",{\"traceId\":\"fffffffffffffffffedcba9876543210\",\"spanId\":"
                 "\"fffffffffffffff1\",\"name\":\"aten::mm?\",\"kind\":1,"
                 "\"startTimeUnixNano\":\"100\",\"endTimeUnixNano\":\"1000\"");
    check_has(o, "{\"key\":\"xsp.leveled_ns\",\"value\":{\"doubleValue\":2.5}},"
                 "{\"key\":\"xsp.seq\",\"value\":{\"intValue\":\"4\"}}");
    check_has(o, "{\"key\":\"xsp.ratio\",\"value\":{\"doubleValue\":\"NaN\"}}");
    check_has(o, "{\"key\":\"xsp.mem.cpu.total\",\"value\":{\"intValue\":"
                 "\"-9223372036854775808\"}}],\"links\":[{\"traceId\":"
                 "\"0123456789abcdef0000000000000001\",\"spanId\":\"fffffffffffffff0\","
                 "\"attributes\":[{\"key\":\"xsp.link\",\"value\":{\"stringValue\":"
                 "\"parent\"}}],\"flags\":256}],\"status\":{},\"flags\":256}");
    /* span 2: its parent in its trace */
    check_has(o, "\"spanId\":\"fffffffffffffff2\",\"parentSpanId\":\"fffffffffffffff1\"");
    /* span 3 on the stream's track (tid 3, a name); span 4: fwd_op twice, the last value */
    check_has(o, "{\"key\":\"xsp.thread\",\"value\":{\"intValue\":\"3\"}},{\"key\":"
                 "\"xsp.thread_name\",\"value\":{\"stringValue\":\"stream 3\"}}");
    check_has(o, "{\"key\":\"xsp.fwd_op\",\"value\":{\"intValue\":\"1073741824\"}}],");
    CHECK(strstr(o, "\"xsp.fwd_op\",\"value\":{\"intValue\":\"1\"") == NULL);
    check_has(o, "{\"key\":\"xsp.leveled_ns\",\"value\":{\"doubleValue\":\"-Infinity\"}},"
                 "{\"key\":\"xsp.bytes\",\"value\":{\"doubleValue\":1e+300}}]");
    free(o);

    R_TRACE = xsp_trace_new();
    xsp_trace_add_thread(R_TRACE, (uint64_t)1 << 63, "", 0);
    span(R_TRACE, 0, 5, XSP_NO_PARENT, "", XSP_LEVEL_L, XSP_KIND_MODULE, 0);
    R_TRACE->spans[0].flags = 2;
    attr_i(R_TRACE, "level", 1);
    attr_i(R_TRACE, "attr.level", 2);
    attr_i(R_TRACE, "a\xff", 3);
    attr_i(R_TRACE, "a\xfe", 4);
    attr_i(R_TRACE, "a?", 5);
    attr_i(R_TRACE, "x", 6);
    attr_i(R_TRACE, "module", 7);
    attr_i(R_TRACE, "x", 8);
    for (int i = 0; i < 40; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%02d", i);
        attr_i(R_TRACE, key, i);
    }
    char *r = capture(w_otlp_names, 0, &n);
    check_has(r, "{\"traceId\":\"0123456789abcdef0000000000000001\",\"spanId\":"
                 "\"0000000000000001\",\"kind\":1,\"endTimeUnixNano\":\"5\","
                 "\"attributes\":[{\"key\":\"xsp.level\",\"value\":{\"stringValue\":"
                 "\"L\"}},{\"key\":\"xsp.kind\",\"value\":{\"stringValue\":\"module\"}},"
                 "{\"key\":\"xsp.span_id\",\"value\":{\"intValue\":\"0\"}},{\"key\":"
                 "\"xsp.thread\",\"value\":{\"stringValue\":\"9223372036854775808\"}},"
                 "{\"key\":\"xsp.module\",\"value\":{\"stringValue\":\"\"}},{\"key\":"
                 "\"xsp.flags\",\"value\":{\"intValue\":\"2\"}},{\"key\":\"xsp.attr.level\","
                 "\"value\":{\"intValue\":\"1\"}},{\"key\":\"xsp.attr.attr.level\",\"value\":"
                 "{\"intValue\":\"2\"}},{\"key\":\"xsp.a?\",\"value\":{\"intValue\":\"3\"}},"
                 "{\"key\":\"xsp.attr.a?\",\"value\":{\"intValue\":\"4\"}},{\"key\":"
                 "\"xsp.attr.attr.a?\",\"value\":{\"intValue\":\"5\"}},{\"key\":\"xsp.x\","
                 "\"value\":{\"intValue\":\"8\"}},{\"key\":\"xsp.attr.module\",\"value\":"
                 "{\"intValue\":\"7\"}},{\"key\":\"xsp.k00\",");
    check_has(r, "{\"key\":\"xsp.k39\",\"value\":{\"intValue\":\"39\"}}],\"status\":{},"
                 "\"flags\":256}");
    free(r);
    xsp_trace_free(R_TRACE);
    r = capture(w_otlp_bad_index, 0, &n);
    free(r);
}

static void span_writers(void)
{
    W_TRACE = small_trace();
    size_t n;
    char *k = capture(w_kineto, 0, &n);
    check_has(k, "[{\"ph\": \"X\", \"cat\": \"Trace\", \"name\": \"region\", \"pid\": "
                 "\"Spans\", \"tid\": \"PyTorch Profiler\", \"ts\": 0.000, \"dur\": 8.000");
    check_has(k, "\"cat\": \"my_cat\", \"name\": \"aten::mm?\", \"pid\": 42, \"tid\": 7");
    check_has(k, "\"External id\": 2, \"Record function id\": 0, \"Input Dims\": [[2, 3]], "
                 "\"Ev Idx\": 1, \"Sequence number\": 4, \"Fwd thread id\": 0");
    check_has(k, "\"x\": [1, 2]");
    check_has(k, "\"xsp.ratio\": \"nan\"");
    /* the memory sums back as instants: peak INT64_MAX after the 2 allocations (5 + 4 bytes),
     * the free leaving the total INT64_MIN */
    check_has(k, "\"Total Allocated\": 9223372036854775803, \"Bytes\": 5}}");
    check_has(k, "\"Total Allocated\": 9223372036854775807, \"Bytes\": 4}}");
    check_has(k, "\"Total Allocated\": -9223372036854775808, \"Bytes\": -4}}");
    check_has(k, "\"ts\": 0.200, \"ph\": \"s\", \"id\": 11");         /* ac2g from the call */
    check_has(k, "\"grid\": [\"four\", 1, 1]");
    check_has(k, "\"shared memory\": 8");
    check_has(k, "\"xsp.fwd_op\": 1073741824");
    CHECK(strstr(k, "fwdbwd") == NULL);                 /* fwd_op names no span */
    check_has(k, "\"memory bandwidth (GB/s)\": 0.0");   /* 0 ns */
    check_has(k, "\"bytes\": 1e+300");
    free(k);
    char *c = capture(w_chrome, 0, &n);
    check_has(c, "\"name\":\"aten::mm?\",\"cat\":\"L.op\",\"pid\":42,\"tid\":7,"
                 "\"ts\":0.100,\"dur\":0.900");
    check_has(c, "\"attr.attr.id\":5");
    check_has(c, "\"attr.id\":6");
    check_has(c, "\"id\":1,\"parent\":0}}");
    check_has(c, "\"cat\":\"G.kernel\",\"pid\":42,\"tid\":3");
    free(c);
    otlp_writer();
    xsp_trace_free(W_TRACE);
}

int main(void)
{
    span_writers();
    check_text(w_bytes, ALL_BYTES);
    check_text(w_utf8, "\"caf\xc3\xa9\",\"\xe2\x82\xac\",\"\xf0\x9f\x98\x80\",\"??A\",\"??\","
                       "\"???\",\"????\",\"?b\",\"???\",\"xsp.k?\",[\"a?\", 1]");
    /* Python: " ".join(repr(x) for x in (...)) and the ints */
    check_text(w_numbers,
               "0.0 -0.0 1.0 0.1 100.0 1e+16 1e-05 0.0001 123.456 1234567890123456.0 1.5e+300 "
               "5e-324 2.5 -3.75 1e+22 0.30000000000000004 \"nan\" \"inf\" \"-inf\" "
               "-9223372036854775808 9223372036854775807 18446744073709551615 0");
    /* Python: kineto._us(a - b) */
    check_text(w_times, "0.000 1234.567 -0.001 -1000.000 18446744073709551.615 "
                        "27670116110564327.423 9223372036854775.808 -9223372036854775.807");
    size_t n1, n2;
    char *plain = capture(w_big, 0, &n1), *gz = capture(w_big, 1, &n2);
    CHECK(n1 == 3000 * 1003 && n1 == n2 && memcmp(plain, gz, n1) == 0);
    free(plain);
    free(gz);
    /* a write that fails (a closed fd) is reported by close, not before */
    xsp_jsonw *w = xsp_jsonw_open(-1, 0);
    for (int i = 0; i < 1000; i++)
        xsp_jsonw_lit(w, "0123456789012345678901234567890123456789012345678901234567890123456789"
                         "0123456789012345678901234567890123456789012345678901234567890123456789"
                         "0123456789012345678901234567890123456789012345678901234567890123456789"
                         "0123456789012345678901234567890123456789012345678901234567890123456789");
    CHECK(xsp_jsonw_failed(w));
    char err[128];
    CHECK(xsp_jsonw_close(w, err, sizeof err) == -1 && strstr(err, "write failed"));
    CHECK(xsp_jsonw_close(NULL, err, sizeof err) == 0);
    return CHECK_DONE();
}
