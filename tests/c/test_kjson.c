/*
 * test_kjson.c: the streaming Kineto JSON reader (csrc/io/kjson.h), plain and under ASan +
 * UBSan: exact spans of a small trace (nesting, backward and model calls, GPU work under its
 * op, tracks, flows, the region), the same trace whatever the chunks it is fed in, every
 * truncation and 20,000 random mutations of it ending in a trace or a located error (never a
 * crash or a read out of bounds), exact ns from decimal text, and hostile numbers, nesting and
 * types refused with their event and field.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "io/kjson.h"

static const char TRACE[] =
    "{\"schemaVersion\": 1, \"baseTimeNanoseconds\": 1000000,\n"
    " \"traceEvents\": [\n"
    "  {\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 7, \"tid\": 8, \"args\": {\"name\": \"main\"}},\n"
    "  {\"ph\": \"X\", \"cat\": \"Trace\", \"name\": \"PyTorch Profiler (0)\", \"pid\": \"Spans\", \"tid\": \"x\", \"ts\": 0, \"dur\": 100},\n"
    "  {\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#3\", \"pid\": 7, \"tid\": 8, \"ts\": 1, \"dur\": 90},\n"
    "  {\"ph\": \"X\", \"cat\": \"python_function\", \"name\": \"nn.Module: Net_0\", \"pid\": 7, \"tid\": 8, \"ts\": 2, \"dur\": 40},\n"
    "  {\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mm\", \"pid\": 7, \"tid\": 8, \"ts\": 3, \"dur\": 10,\n"
    "   \"args\": {\"Sequence number\": 5, \"Input Dims\": [[2, 3], [3, 4]], \"Input type\": [\"float\", \"float\"],\n"
    "            \"Ev Idx\": 1, \"Ev Idx\": 2, \"note\": \"a \\\"q\\\" \\u00e9\"}},\n"
    "  {\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": 7, \"tid\": 8, \"ts\": 4.0005, \"dur\": 1.0015,\n"
    "   \"args\": {\"correlation\": 9, \"cbid\": 211}},\n"
    "  {\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"gemm\", \"pid\": 0, \"tid\": 7, \"ts\": 6, \"dur\": 5,\n"
    "   \"args\": {\"correlation\": 9, \"device\": 0, \"stream\": 7, \"grid\": [4, 1, 1], \"block\": [128, 1, 1]}},\n"
    "  {\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"autograd::engine::evaluate_function: MmBackward0\", \"pid\": 7, \"tid\": 9, \"ts\": 50, \"dur\": 20},\n"
    "  {\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"MmBackward0\", \"pid\": 7, \"tid\": 9, \"ts\": 51, \"dur\": 30,\n"
    "   \"args\": {\"Sequence number\": 5}},\n"
    "  {\"ph\": \"s\", \"cat\": \"fwdbwd\", \"id\": 1, \"pid\": 7, \"tid\": 8, \"ts\": 3},\n"
    "  {\"ph\": \"f\", \"cat\": \"fwdbwd\", \"id\": 1, \"pid\": 7, \"tid\": 9, \"ts\": 51, \"bp\": \"e\"},\n"
    "  {\"ph\": \"i\", \"name\": \"[memory]\", \"pid\": 7, \"tid\": 8, \"ts\": 5}\n"
    " ], \"traceName\": \"t\"}\n";

static const char *str(const xsp_trace *t, uint32_t id)
{
    return xsp_strtab_get(&t->strings, id, NULL);
}

/* The attribute key of span s, or NULL. */
static const xsp_attr *attr(const xsp_trace *t, uint32_t s, const char *key)
{
    for (uint32_t j = 0; j < t->spans[s].attr_n; j++) {
        const xsp_attr *a = &t->attrs[t->spans[s].attr_off + j];
        if (strcmp(str(t, a->key), key) == 0)
            return a;
    }
    return NULL;
}

static const char *meta_str(const xsp_trace *t, const char *key)
{
    for (uint32_t i = 0; i < t->n_meta; i++)
        if (strcmp(str(t, t->meta[i].key), key) == 0)
            return t->meta[i].type == XSP_ATTR_STR ? str(t, t->meta[i].v.s) : "(not a str)";
    return NULL;
}

/* Reads text[0..n) fed in pieces of step bytes (0: whole); the error into *err. */
static xsp_trace *read_text(const char *text, size_t n, size_t step, xsp_kjson_error *err)
{
    xsp_kjson *r = xsp_kjson_new();
    if (!r)
        return NULL;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i += step ? step : n)
        rc = xsp_kjson_feed(r, text + i, step && n - i > step ? step : n - i);
    xsp_trace *t = rc == 0 ? xsp_kjson_finish(r) : NULL;
    if (err)
        *err = *xsp_kjson_err(r);
    xsp_kjson_free(r);
    return t;
}

static void test_small_trace(void)
{
    xsp_kjson_error e;
    xsp_trace *t = read_text(TRACE, sizeof TRACE - 1, 0, &e);
    CHECK(t != NULL);
    if (!t) {
        fprintf(stderr, "error: %s\n", e.msg);
        return;
    }
    char err[256];
    CHECK(xsp_trace_check(t, err, sizeof err) == 0);
    /* region, step, model, mm, launch, gemm, evaluate_function, MmBackward0 */
    static const struct { const char *name; unsigned kind; uint32_t parent; uint64_t start, end; }
    want[] = {
        {"PyTorch Profiler (0)", XSP_KIND_REGION, XSP_NO_PARENT, 1000000, 1100000},
        {"step#3", XSP_KIND_STEP, 0, 1001000, 1091000},
        {"nn.Module: Net_0", XSP_KIND_MODEL, 1, 1002000, 1042000},
        {"aten::mm", XSP_KIND_OP, 2, 1003000, 1013000},
        {"cudaLaunchKernel", XSP_KIND_RUNTIME, 3, 1004000, 1005002},  /* 4000.5 -> 4000, 1001.5 -> 1002 */
        {"gemm", XSP_KIND_KERNEL, 3, 1006000, 1011000},
        {"autograd::engine::evaluate_function: MmBackward0", XSP_KIND_OP, 0, 1050000, 1070000},
        {"MmBackward0", XSP_KIND_BACKWARD, 6, 1051000, 1070000},       /* cut to its parent */
    };
    CHECK_EQ_U(t->n_spans, sizeof want / sizeof want[0]);
    for (uint32_t i = 0; i < t->n_spans && i < sizeof want / sizeof want[0]; i++) {
        CHECK(strcmp(str(t, t->spans[i].name), want[i].name) == 0);
        CHECK_EQ_U(t->spans[i].kind, want[i].kind);
        CHECK_EQ_U(t->spans[i].parent, want[i].parent);
        CHECK_EQ_U(t->spans[i].start_ns, want[i].start);
        CHECK_EQ_U(t->spans[i].end_ns, want[i].end);
    }
    if (t->n_spans != 8) {
        xsp_trace_free(t);
        return;
    }
    /* args: dedup keeps the last value; strings unescaped; lists as JSON text */
    CHECK(attr(t, 3, "k.Ev Idx") && attr(t, 3, "k.Ev Idx")->v.i == 2);
    CHECK(attr(t, 3, "k.note") && strcmp(str(t, attr(t, 3, "k.note")->v.s), "a \"q\" \xc3\xa9") == 0);
    CHECK(attr(t, 3, "input_dims") && strcmp(str(t, attr(t, 3, "input_dims")->v.s),
                                               "[[2, 3], [3, 4]]") == 0);
    CHECK(attr(t, 3, "input_types") && strcmp(str(t, attr(t, 3, "input_types")->v.s),
                                                "[\"float\", \"float\"]") == 0);
    CHECK(attr(t, 3, "seq") && attr(t, 3, "seq")->v.i == 5);
    CHECK(attr(t, 2, "type") && strcmp(str(t, attr(t, 2, "type")->v.s), "Net") == 0);
    CHECK(attr(t, 1, "k.name") && strcmp(str(t, attr(t, 1, "k.name")->v.s), "ProfilerStep#3") == 0);
    CHECK(attr(t, 5, "api") && attr(t, 5, "api")->v.i == 4);
    CHECK(attr(t, 5, "grid_x") && attr(t, 5, "grid_x")->v.i == 4);
    CHECK(attr(t, 5, "block_x") && attr(t, 5, "block_x")->v.i == 128);
    CHECK(attr(t, 7, "fwd_op") && attr(t, 7, "fwd_op")->v.i == 3);
    CHECK(attr(t, 3, "k.cat") && !attr(t, 0, "k.cat"));
    /* tracks: thread 8 (named), thread 9, then the GPU stream */
    CHECK_EQ_U(t->n_threads, 3);
    CHECK_EQ_U(t->threads[0].tid, 8);
    CHECK(strcmp(str(t, t->threads[0].name), "main") == 0);
    CHECK_EQ_U(t->threads[1].tid, 9);
    CHECK_EQ_U(t->threads[2].tid, (0ull << 32) | 7);
    CHECK_EQ_U(t->threads[2].kind, 1);
    CHECK_EQ_U(t->spans[5].thread, 2);
    CHECK(meta_str(t, "levels") && strcmp(meta_str(t, "levels"), "MLG") == 0);
    CHECK(meta_str(t, "kineto.traceName") && strcmp(meta_str(t, "kineto.traceName"), "t") == 0);
    CHECK_EQ_U(xsp_trace_counter(t, "kineto.skipped"), 1);     /* the [memory] instant */
    CHECK_EQ_U(xsp_trace_counter(t, "kineto.overlaps"), 1);
    CHECK_EQ_U(xsp_trace_counter(t, "kineto.unattributed"), 0);
    /* the same trace whatever the chunks */
    for (size_t step = 1; step <= 64; step++) {
        xsp_trace *u = read_text(TRACE, sizeof TRACE - 1, step, NULL);
        CHECK(u && xsp_trace_equal(t, u));
        xsp_trace_free(u);
    }
    xsp_trace_free(t);
}

/* Reads text expecting an error that contains words, at event (or -1) and offset (or -1). */
static void refused(const char *text, const char *words, int64_t event, int64_t offset)
{
    xsp_kjson_error e;
    xsp_trace *t = read_text(text, strlen(text), 0, &e);
    CHECK(t == NULL);
    xsp_trace_free(t);
    int ok = strstr(e.msg, words) != NULL && e.event == event && e.offset == offset;
    if (!ok)
        fprintf(stderr, "for %.60s: got '%s' event %lld offset %lld\n", text, e.msg,
                (long long)e.event, (long long)e.offset);
    CHECK(ok);
}

static void test_refused(void)
{
    refused("{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"a\", \"ts\": 1e999990, \"dur\": 1}]}",
            "ts 1e999990 is out of range", 0, -1);
    refused("{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"a\", \"ts\": 1, \"dur\": 1e10000000}]}",
            "dur 1e10000000 is out of range", 0, -1);
    refused("{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"a\", \"ts\": 9223372036854776, \"dur\": 1}]}",
            "out of range", 0, -1);
    refused("{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"a\", \"ts\": 1, \"dur\": 1, \"pid\": [1]}]}",
            "pid must be an integer or a string, not list", 0, -1);
    refused("{\"traceEvents\": [{\"ph\": \"M\", \"name\": \"thread_name\", \"tid\": {}, \"args\": {}}]}",
            "tid must be an integer or a string, not dict", 0, -1);
    refused("{\"traceEvents\": [{}, {\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"ts\": 1, "
            "\"dur\": 1, \"args\": {\"correlation\": [1]}}]}",
            "args.correlation must be an integer, not list", 1, -1);
    refused("{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"ts\": 1, "
            "\"dur\": 1, \"args\": {\"device\": {\"a\": 1}}}]}",
            "args.device must be an integer, not dict", 0, -1);
    refused("{\"traceEvents\": [{\"ph\": [], \"name\": \"k\"}]}", "ph must be a string, not list",
            0, -1);
    refused("{\"traceEvents\": [{\"ph\": \"f\", \"cat\": \"fwdbwd\", \"id\": [2], \"ts\": 1}]}",
            "id must be an integer or a string, not list", 0, -1);
    refused("{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"a\", \"ts\": 1, \"dur\": 1, \"cat\": 3}]}",
            "cat must be a string, not int", 0, -1);
    refused("{\"traceEvents\": [], \"traceEvents\": []}", "traceEvents is given twice", -1, 35);
    refused("{\"traceEvents\": 5}", "traceEvents is a int", -1, -1);
    refused("[1]", "no traceEvents list", -1, -1);
    refused("", "no value", -1, 0);
    refused("{\"traceEvents\": [{}, {}", "ends inside a value", -1, 23);
    refused("{\"traceEvents\": []} x", "malformed JSON", -1, 20);
    refused("{\"traceEvents\": [\"a\xff\"]}", "not UTF-8", -1, 19);
    refused("{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"a\", \"ts\": -5, \"dur\": 1}]}",
            "before time 0", 0, -1);
    /* nesting: refused at the 1001st container, where it opens */
    size_t n = 20000;
    char *deep = malloc(2 * n + 64);
    strcpy(deep, "{\"traceEvents\": [{\"args\": ");
    size_t k = strlen(deep);
    size_t head = k;
    for (size_t i = 0; i < n; i++)
        deep[k++] = '[';
    for (size_t i = 0; i < n; i++)
        deep[k++] = ']';
    strcpy(deep + k, "}]}");
    char msg[64];
    snprintf(msg, sizeof msg, "nested more than %d levels deep", XSP_KJSON_MAX_DEPTH);
    refused(deep, msg, -1, (int64_t)(head + XSP_KJSON_MAX_DEPTH - 3));  /* at its bracket */
    free(deep);
    /* 251 distinct args */
    char *many = malloc(251 * 16 + 128);
    k = (size_t)sprintf(many, "{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"a\", \"ts\": 1, "
                              "\"dur\": 1, \"args\": {");
    for (int i = 0; i < 251; i++)
        k += (size_t)sprintf(many + k, "%s\"a%d\": 1", i ? ", " : "", i);
    strcpy(many + k, "}}]}");
    refused(many, "more than 250 args", 0, -1);
    free(many);
}

static void test_numbers(void)
{
    static const struct { const char *ts; uint64_t ns; } cases[] = {
        {"0", 0}, {"1", 1000}, {"1.0005", 1000}, {"1.0015", 1002}, {"1.00150001", 1002},
        {"0.0005", 0}, {"0.0015", 2}, {"0.00050001", 1}, {"1e3", 1000000}, {"1E-3", 1},
        {"12.5e-1", 1250}, {"-0", 0}, {"0.000", 0}, {"9223372036854775.807", 9223372036854775807ull},
        {"1e-999999999999", 0}, {"0.00000000000000000000000000000000000000001e45", 10000000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\", "
                 "\"name\": \"a\", \"ts\": %s, \"dur\": 0}]}", cases[i].ts);
        xsp_kjson_error e;
        xsp_trace *t = read_text(text, strlen(text), 0, &e);
        CHECK(t && t->n_spans == 2 && t->spans[1].start_ns == cases[i].ns);
        if (!t || t->spans[1].start_ns != cases[i].ns)
            fprintf(stderr, "ts %s: %s %llu\n", cases[i].ts, t ? "got" : e.msg,
                    t ? (unsigned long long)t->spans[1].start_ns : 0ull);
        xsp_trace_free(t);
    }
    /* an integer arg of 5000 digits: kept as its text; a pid of as many: an id like others */
    size_t n = 5000;
    char *big = malloc(2 * n + 256);
    size_t k = (size_t)sprintf(big, "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\", "
                                    "\"name\": \"a\", \"ts\": 1, \"dur\": 1, \"pid\": ");
    for (size_t i = 0; i < n; i++)
        big[k++] = (char)('1' + i % 9);
    k += (size_t)sprintf(big + k, ", \"args\": {\"x\": ");
    for (size_t i = 0; i < n; i++)
        big[k++] = (char)('1' + i % 9);
    strcpy(big + k, "}}]}");
    xsp_trace *t = read_text(big, strlen(big), 0, NULL);
    CHECK(t && t->n_spans == 2);
    if (t && t->n_spans == 2) {
        const xsp_attr *x = attr(t, 1, "k.x");
        CHECK(x && x->type == XSP_ATTR_STR && strlen(str(t, x->v.s)) == n);
    }
    xsp_trace_free(t);
    free(big);
}

static void test_memory(void)
{
    static const char text[] =
        "{\"traceEvents\": [\n"
        " {\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"outer\", \"pid\": 1, \"tid\": 1, \"ts\": 10, \"dur\": 10},\n"
        " {\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"inner\", \"pid\": 1, \"tid\": 1, \"ts\": 12, \"dur\": 2},\n"
        " {\"ph\": \"i\", \"name\": \"[memory]\", \"pid\": 1, \"tid\": 1, \"ts\": 12, \"args\": {\"Bytes\": 64, \"Total Allocated\": 64, \"Device Type\": 0}},\n"
        " {\"ph\": \"i\", \"name\": \"[memory]\", \"pid\": 1, \"tid\": 1, \"ts\": 13, \"args\": {\"Bytes\": 16, \"Total Allocated\": 80, \"Device Type\": 0}},\n"
        " {\"ph\": \"i\", \"name\": \"[memory]\", \"pid\": 1, \"tid\": 1, \"ts\": 15, \"args\": {\"Bytes\": -64, \"Total Allocated\": 16, \"Device Type\": 0}},\n"
        " {\"ph\": \"i\", \"name\": \"[memory]\", \"pid\": 1, \"tid\": 1, \"ts\": 16, \"args\": {\"Bytes\": 512, \"Total Allocated\": 512, \"Device Type\": 1}},\n"
        " {\"ph\": \"i\", \"name\": \"[memory]\", \"pid\": 1, \"tid\": 1, \"ts\": 25, \"args\": {\"Bytes\": -16, \"Total Allocated\": 0, \"Device Type\": 0}},\n"
        " {\"ph\": \"i\", \"name\": \"[memory]\", \"pid\": 1, \"tid\": 2, \"ts\": 12, \"args\": {\"Bytes\": 8, \"Total Allocated\": 8, \"Device Type\": 0}}\n"
        "]}";
    xsp_kjson_error e;
    xsp_trace *t = read_text(text, sizeof text - 1, 5, &e);
    CHECK(t != NULL && t->n_spans == 3);
    if (!t || t->n_spans != 3) {
        fprintf(stderr, "memory: %s\n", t ? "spans" : e.msg);
        xsp_trace_free(t);
        return;
    }
    static const struct { uint32_t span; const char *key; int64_t v; } want[] = {
        {2, "mem.cpu.allocs", 2}, {2, "mem.cpu.alloc_bytes", 80}, {2, "mem.cpu.frees", 0},
        {2, "mem.cpu.peak", 80}, {2, "mem.cpu.total", 80},
        {1, "mem.cpu.allocs", 0}, {1, "mem.cpu.frees", 1}, {1, "mem.cpu.freed_bytes", 64},
        {1, "mem.cpu.total", 16}, {1, "mem.cuda.alloc_bytes", 512}, {1, "mem.cuda.peak", 512},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        const xsp_attr *a = attr(t, want[k].span, want[k].key);
        CHECK(a && a->type == XSP_ATTR_INT && a->v.i == want[k].v);
    }
    CHECK(attr(t, 0, "mem.cpu.allocs") == NULL && attr(t, 1, "k.cat") != NULL);
    CHECK_EQ_U(xsp_trace_counter(t, "memory.outside_spans.cpu.freed_bytes"), 16);
    CHECK_EQ_U(xsp_trace_counter(t, "memory.outside_spans.cpu.alloc_bytes"), 8);   /* tid 2 */
    CHECK_EQ_U(xsp_trace_counter(t, "kineto.skipped"), 0);
    char err[256];
    CHECK(xsp_trace_check(t, err, sizeof err) == 0);
    xsp_trace_free(t);
    refused("{\"traceEvents\": [{\"ph\": \"i\", \"name\": \"[memory]\", \"ts\": 1, "
            "\"args\": {\"Bytes\": \"64\"}}]}", "args.Bytes must be an integer", 0, -1);
}

/* Every truncation and many random mutations: a trace that checks, or an error. */
static void test_hostile(void)
{
    size_t n = sizeof TRACE - 1;
    char *buf = malloc(n + 1);
    for (size_t cut = 0; cut < n; cut++) {
        memcpy(buf, TRACE, cut);
        xsp_kjson_error e;
        xsp_trace *t = read_text(buf, cut, 7, &e);
        CHECK(t != NULL || e.msg[0] != 0);
        xsp_trace_free(t);
    }
    static const char alphabet[] = "{}[]\",:0123456789.eE-+ \\ntrufalsXMsf\x80\xff";
    unsigned seed = 12345;
    int accepted = 0;
    for (int m = 0; m < 20000; m++) {
        memcpy(buf, TRACE, n);
        int flips = 1 + m % 4;
        for (int f = 0; f < flips; f++) {
            seed = seed * 1103515245u + 12345u;
            size_t at = (seed >> 8) % n;
            seed = seed * 1103515245u + 12345u;
            buf[at] = alphabet[(seed >> 8) % (sizeof alphabet - 1)];
        }
        xsp_kjson_error e;
        xsp_trace *t = read_text(buf, n, 1 + m % 97, &e);
        char err[256];
        CHECK(t != NULL || e.msg[0] != 0);
        if (t) {
            accepted++;
            CHECK(xsp_trace_check(t, err, sizeof err) == 0);
        }
        xsp_trace_free(t);
    }
    CHECK(accepted > 1000);
    free(buf);
}

/* A trace whose one arg value is a token of n bytes (kind 's': a string with its quotes,
 * 'n': a number), fed in pieces of step bytes; returns the trace or NULL with *e set, and
 * the token's offset in *at. */
static xsp_trace *one_token(char kind, size_t n, size_t step, xsp_kjson_error *e, int64_t *at)
{
    static const char head[] = "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\", "
                               "\"name\": \"a\", \"ts\": 1, \"dur\": 1, \"pid\": 1, \"tid\": 1, "
                               "\"args\": {\"x\": ";
    size_t h = sizeof head - 1;
    char *text = malloc(h + n + 8);
    if (!text)
        return NULL;
    memcpy(text, head, h);
    for (size_t i = 0; i < n; i++)
        text[h + i] = kind == 's' ? (i == 0 || i == n - 1 ? '"' : 'a' + (char)(i % 26))
                                  : (char)('1' + i % 9);
    strcpy(text + h + n, "}}]}");
    *at = (int64_t)h;
    xsp_trace *t = read_text(text, h + n + 4, step, e);
    free(text);
    return t;
}

/* One token longer than XSP_KJSON_MAX_TOKEN is refused at its first byte, a string or a
 * number, whole or fed in pieces (yajl would lex it again at every piece); one of exactly
 * that length is read (and cut to XSP_STRTAB_MAX_LEN, as every string is). */
static void test_token_cap(void)
{
    size_t cap = (size_t)XSP_KJSON_MAX_TOKEN;
    const char kinds[] = {'s', 'n'};
    const size_t steps[] = {0, 1 << 20, 65521};
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 3; j++) {
            xsp_kjson_error e;
            int64_t at;
            xsp_trace *t = one_token(kinds[k], cap + 1, steps[j], &e, &at);
            CHECK(t == NULL);
            CHECK(strstr(e.msg, kinds[k] == 's' ? "a string of more than 16777216 bytes: refused"
                                                : "a number of more than 16777216 bytes: refused"));
            CHECK(e.offset == at && e.event == -1);
            if (t || e.offset != at)
                fprintf(stderr, "token %c step %zu: '%s' offset %lld (want %lld)\n", kinds[k],
                        steps[j], e.msg, (long long)e.offset, (long long)at);
            xsp_trace_free(t);
        }
    for (int k = 0; k < 2; k++) {
        xsp_kjson_error e;
        int64_t at;
        xsp_trace *t = one_token(kinds[k], cap, 1 << 20, &e, &at);
        CHECK(t != NULL && t->n_spans == 2);
        if (!t)
            fprintf(stderr, "token %c of the cap: '%s' offset %lld\n", kinds[k], e.msg,
                    (long long)e.offset);
        if (t && t->n_spans == 2) {
            const xsp_attr *x = attr(t, 1, "k.x");
            /* kept, cut to the format's longest string */
            CHECK(x && x->type == XSP_ATTR_STR && strlen(str(t, x->v.s)) == XSP_STRTAB_MAX_LEN);
        }
        xsp_trace_free(t);
    }
}

int main(void)
{
    test_small_trace();
    test_refused();
    test_numbers();
    test_memory();
    test_hostile();
    test_token_cap();
    return CHECK_DONE();
}
