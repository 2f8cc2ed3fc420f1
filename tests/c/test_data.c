/*
 * test_data.c: data events (xsp_rec_data): op inputs decoded into torch.profiler's texts, and
 * allocations attributed to the innermost open span, with everything that cannot be attached
 * counted.  Fake clock: exact times.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/inmemo.h"
#include "trace_check.h"
#include "core/clock.h"
#include "core/inputs.h"
#include "core/recorder.h"
#include "core/strtab.h"
#include "core/trace.h"

static const char *attr_s(const xsp_trace *t, uint32_t id, const char *key)
{
    const xsp_span *s = &t->spans[id];
    for (uint32_t i = 0; i < s->attr_n; i++) {
        const xsp_attr *a = &t->attrs[s->attr_off + i];
        if (a->type == XSP_ATTR_STR && strcmp(xsp_strtab_get(&t->strings, a->key, NULL), key) == 0)
            return xsp_strtab_get(&t->strings, a->v.s, NULL);
    }
    return "(none)";
}

/* A payload builder, as the shim writes it (inputs.h). */
typedef struct pb {
    uint8_t b[512];
    uint32_t n;
} pb;

static void pb_bytes(pb *p, const void *v, uint32_t n)
{
    memcpy(p->b + p->n, v, n);
    p->n += n;
}
static void pb_u8(pb *p, uint8_t v) { pb_bytes(p, &v, 1); }
static void pb_i64(pb *p, int64_t v) { pb_bytes(p, &v, 8); }
static void pb_f64(pb *p, double v) { pb_bytes(p, &v, 8); }

static void pb_head(pb *p, const char *overload, uint8_t flags, uint16_t n)
{
    p->n = 0;
    pb_u8(p, XSP_IN_VERSION);
    pb_u8(p, (uint8_t)strlen(overload));
    pb_bytes(p, overload, (uint32_t)strlen(overload));
    pb_u8(p, flags);
    pb_bytes(p, &n, 2);
}

static void pb_tensor(pb *p, uint8_t dtype, int nd, const int64_t *sizes, const int64_t *strides)
{
    pb_u8(p, 'T');
    pb_u8(p, dtype);
    pb_u8(p, (uint8_t)nd);
    pb_u8(p, strides != NULL);
    for (int i = 0; i < nd; i++)
        pb_i64(p, sizes[i]);
    for (int i = 0; strides && i < nd; i++)
        pb_i64(p, strides[i]);
}

static void op(const char *name, uint64_t key)
{
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_OP, name, strlen(name), NULL, 0, key, -1, 0);
}

static void mem(int64_t size, int64_t total, uint32_t dev)
{
    xsp_mem_event ev = {size, total, dev, 0};
    xsp_rec_data(XSP_DATA_MEM, &ev, sizeof ev);
}

static void test_fmt_double(void)
{
    char b[32];
    static const struct { double d; const char *s; } cases[] = {
        {0.0, "0."}, {1.0, "1."}, {-3.0, "-3."}, {2.5, "2.5"}, {0.1, "0.10000000000000001"},
        {-1.5e-7, "-1.4999999999999999e-07"}, {1e20, "1e+20"}, {1e10, "10000000000"},
        {9999999999.0, "9999999999."},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        xsp_inputs_fmt_double(cases[i].d, b, sizeof b);
        CHECK(strcmp(b, cases[i].s) == 0);
        if (strcmp(b, cases[i].s) != 0)
            fprintf(stderr, "  %.17g -> %s, want %s\n", cases[i].d, b, cases[i].s);
    }
    xsp_inputs_fmt_double(-0.0, b, sizeof b);
    CHECK(strcmp(b, "-0.") == 0);
    xsp_inputs_fmt_double(INFINITY, b, sizeof b);
    CHECK(strcmp(b, "inf") == 0);
    xsp_inputs_fmt_double(NAN, b, sizeof b);
    CHECK(strcmp(b, "nan") == 0 || strcmp(b, "-nan") == 0);
}

static void test_inputs(void)
{
    static const char *const names[] = {"unsigned char", "signed char", "short int", "int",
                                        "long int", "c10::Half", "float", "double"};
    CHECK(xsp_inputs_set_dtype_names(names, 8) == 0);
    xsp_clock_set_fake(1000, 10);
    char err[256];
    CHECK(xsp_rec_start(&(xsp_config){0}, err, sizeof err) == 0);
    pb p;
    /* aten::conv2d(x, w, b, stride, padding, dilation, groups) */
    op("aten::conv2d", 1);
    pb_head(&p, "", XSP_IN_SCHEMA, 7);
    pb_tensor(&p, 6, 4, (int64_t[]){2, 3, 8, 8}, (int64_t[]){192, 64, 8, 1});
    pb_tensor(&p, 6, 4, (int64_t[]){4, 3, 3, 3}, (int64_t[]){27, 9, 3, 1});
    pb_tensor(&p, 6, 1, (int64_t[]){4}, (int64_t[]){1});
    for (int k = 0; k < 3; k++) {
        pb_u8(&p, 'I');
        pb_u8(&p, 2);
        pb_i64(&p, 1);
        pb_i64(&p, 1);
    }
    pb_u8(&p, 'i');
    pb_i64(&p, 1);
    xsp_rec_data(XSP_DATA_INPUTS, p.b, p.n);
    mem(1024, 5000, 0);                                   /* inside conv2d */
    op("aten::empty", 2);                                 /* no inputs: none attached */
    mem(512, 5512, 0);
    mem(-512, 5000, 0);
    mem(256, 9256, 1);                                    /* CUDA, same span */
    xsp_rec_end(2, 0);
    xsp_rec_end(1, 0);
    /* aten::cat([a, undefined], 1), a double, a bool, None, other, a bool list, double list */
    op("aten::cat", 3);
    pb_head(&p, "names", XSP_IN_SCHEMA | XSP_IN_TRUNCATED, 8);
    pb_u8(&p, 'L');
    pb_bytes(&p, &(uint16_t){2}, 2);
    pb_tensor(&p, 4, 2, (int64_t[]){2, 3}, NULL);          /* not strided: strides [] */
    pb_u8(&p, 'U');
    pb_u8(&p, 'd');
    pb_f64(&p, 0.1);
    pb_u8(&p, 'b');
    pb_u8(&p, 0);
    pb_u8(&p, 'N');
    pb_u8(&p, 'O');
    pb_u8(&p, 'B');
    pb_u8(&p, 3);
    pb_u8(&p, 0);
    pb_u8(&p, 1);
    pb_u8(&p, 1);
    pb_u8(&p, 'D');
    pb_u8(&p, 2);
    pb_f64(&p, 0.5);
    pb_f64(&p, 1.0);
    pb_u8(&p, 'T');                                        /* dtype without a name */
    pb_u8(&p, 40);
    pb_u8(&p, 0);
    pb_u8(&p, 1);
    xsp_rec_data(XSP_DATA_INPUTS, p.b, p.n);
    xsp_rec_end(3, 0);
    /* a user scope (no schema) with one int list; then data that cannot be attached */
    op("my_scope", 4);
    pb_head(&p, "", 0, 1);
    pb_u8(&p, 'I');
    pb_u8(&p, 0);
    xsp_rec_data(XSP_DATA_INPUTS, p.b, p.n);
    xsp_rec_data(XSP_DATA_INPUTS, p.b, p.n);             /* a second one: lost.data */
    xsp_rec_end(4, 0);
    xsp_rec_data(XSP_DATA_INPUTS, p.b, p.n);             /* after an end: lost.data */
    mem(100, 5100, 0);                                    /* no span open: outside */
    mem(-100, 5000, 2);
    op("aten::bad", 5);
    uint8_t bad[] = {XSP_IN_VERSION, 0, XSP_IN_SCHEMA, 1, 0, 'T', 6, 200};   /* dims past end */
    xsp_rec_data(XSP_DATA_INPUTS, bad, sizeof bad);
    xsp_rec_end(5, 0);
    xsp_rec_data(99, NULL, 0);                            /* unknown sub: lost.data */
    static uint8_t big[XSP_DATA_MAX + 1];
    xsp_rec_data(XSP_DATA_INPUTS, big, sizeof big);       /* too long: lost.data */
    xsp_trace *t = NULL;
    CHECK(xsp_rec_stop(&t, NULL, err, sizeof err) == 0);
    xsp_clock_set_fake(0, 0);
    if (!t)
        return;
    CHECK(xsp_trace_check(t, err, sizeof err) == 0);
    CHECK_EQ_U(t->n_spans, 5);
    CHECK(strcmp(attr_s(t, 0, "input_dims"),
                 "[[2, 3, 8, 8], [4, 3, 3, 3], [4], [], [], [], []]") == 0);
    CHECK(strcmp(attr_s(t, 0, "input_types"), "[\"float\", \"float\", \"float\", \"ScalarList\", "
                 "\"ScalarList\", \"ScalarList\", \"Scalar\"]") == 0);
    CHECK(strcmp(attr_s(t, 0, "input_strides"),
                 "[[192, 64, 8, 1], [27, 9, 3, 1], [1], [], [], [], []]") == 0);
    CHECK(strcmp(attr_s(t, 0, "concrete_inputs"),
                 "[\"\", \"\", \"\", \"[1, 1]\", \"[1, 1]\", \"[1, 1]\", \"1\"]") == 0);
    CHECK(strcmp(attr_s(t, 0, "overload"), "") == 0);
    CHECK_EQ_U(span_attr_int(t, 0, "mem.cpu.allocs", -1), 1);
    CHECK_EQ_U(span_attr_int(t, 0, "mem.cpu.alloc_bytes", -1), 1024);
    CHECK_EQ_U(span_attr_int(t, 0, "mem.cpu.frees", -1), 0);
    CHECK_EQ_U(span_attr_int(t, 0, "mem.cpu.peak", -1), 5000);
    CHECK_EQ_U(span_attr_int(t, 0, "mem.cuda.allocs", -1), (uint64_t)-1);   /* the child's */
    CHECK(strcmp(attr_s(t, 1, "input_dims"), "(none)") == 0);
    CHECK_EQ_U(span_attr_int(t, 1, "mem.cpu.allocs", -1), 1);
    CHECK_EQ_U(span_attr_int(t, 1, "mem.cpu.frees", -1), 1);
    CHECK_EQ_U(span_attr_int(t, 1, "mem.cpu.freed_bytes", -1), 512);
    CHECK_EQ_U(span_attr_int(t, 1, "mem.cpu.peak", -1), 5512);
    CHECK_EQ_U(span_attr_int(t, 1, "mem.cpu.total", -1), 5000);
    CHECK_EQ_U(span_attr_int(t, 1, "mem.cuda.alloc_bytes", -1), 256);
    CHECK_EQ_U(span_attr_int(t, 1, "mem.cuda.total", -1), 9256);
    CHECK(strcmp(attr_s(t, 2, "input_dims"), "[[[2, 3], []], [], [], [], [], [], [], []]") == 0);
    CHECK(strcmp(attr_s(t, 2, "input_strides"), "[[[], []], [], [], [], [], [], [], []]") == 0);
    CHECK(strcmp(attr_s(t, 2, "input_types"), "[\"TensorList\", \"Scalar\", \"Scalar\", \"\", "
                 "\"\", \"ScalarList\", \"ScalarList\", \"dtype40\"]") == 0);
    CHECK(strcmp(attr_s(t, 2, "concrete_inputs"), "[\"\", \"0.10000000000000001\", \"False\", "
                 "\"\", \"\", \"[False, True, True]\", \"[0.5, 1.]\", \"\"]") == 0);
    CHECK(strcmp(attr_s(t, 2, "overload"), "names") == 0);
    CHECK_EQ_U(span_attr_int(t, 2, "inputs_truncated", -1), 1);
    CHECK(strcmp(attr_s(t, 3, "input_types"), "[\"ScalarList\"]") == 0);
    CHECK(strcmp(attr_s(t, 3, "concrete_inputs"), "[\"[]\"]") == 0);
    CHECK(strcmp(attr_s(t, 3, "overload"), "(none)") == 0);
    CHECK(strcmp(attr_s(t, 4, "input_dims"), "(none)") == 0);
    CHECK_EQ_U(xsp_trace_counter(t, "inputs.malformed"), 1);
    CHECK_EQ_U(xsp_trace_counter(t, "lost.data"), 4);
    CHECK_EQ_U(xsp_trace_counter(t, "memory.outside_spans.cpu.alloc_bytes"), 100);
    CHECK_EQ_U(xsp_trace_counter(t, "memory.outside_spans.other.freed_bytes"), 100);
    xsp_trace_free(t);
}

/* Without data events nothing changes: no counters of the options, no attributes. */
static void test_no_data(void)
{
    char err[256];
    CHECK(xsp_rec_start(&(xsp_config){0}, err, sizeof err) == 0);
    op("aten::add", 1);
    xsp_rec_end(1, 0);
    xsp_trace *t = NULL;
    CHECK(xsp_rec_stop(&t, NULL, err, sizeof err) == 0);
    if (!t)
        return;
    CHECK_EQ_U(t->n_spans, 1);
    CHECK_EQ_U(t->spans[0].attr_n, 0);
    for (uint32_t i = 0; i < t->n_counters; i++) {
        const char *k = xsp_strtab_get(&t->strings, t->counters[i].key, NULL);
        CHECK(strcmp(k, "lost.data") != 0 && strncmp(k, "memory.", 7) != 0
              && strcmp(k, "inputs.malformed") != 0);
    }
    xsp_trace_free(t);
}

/* Payloads that fill chunks: every one lands (the log takes a new chunk when one is full). */
static void test_many(void)
{
    char err[256];
    CHECK(xsp_rec_start(&(xsp_config){0}, err, sizeof err) == 0);
    pb p;
    pb_head(&p, "out", XSP_IN_SCHEMA, 1);
    pb_tensor(&p, 6, 8, (int64_t[]){1, 2, 3, 4, 5, 6, 7, 8}, (int64_t[]){8, 7, 6, 5, 4, 3, 2, 1});
    enum { N = 20000 };
    for (uint64_t i = 0; i < N; i++) {
        op("aten::mul", i + 1);
        xsp_rec_data(XSP_DATA_INPUTS, p.b, p.n);
        mem(64, (int64_t)i, 0);
        xsp_rec_end(i + 1, 0);
    }
    xsp_trace *t = NULL;
    CHECK(xsp_rec_stop(&t, NULL, err, sizeof err) == 0);
    if (!t)
        return;
    CHECK_EQ_U(t->n_spans, N);
    uint32_t good = 0;
    for (uint32_t i = 0; i < t->n_spans; i++)
        good += strcmp(attr_s(t, i, "input_dims"), "[[1, 2, 3, 4, 5, 6, 7, 8]]") == 0
                && span_attr_int(t, i, "mem.cpu.total", -1) == i;
    CHECK_EQ_U(good, N);
    CHECK_EQ_U(xsp_trace_counter(t, "lost.data"), 0);
    xsp_trace_free(t);
}

/* The decoder on hostile payloads: random bytes and every truncation of a valid one never
 * read past the payload (ASan would say) and give 1 or 0, never a crash. */
static void test_decode_hostile(void)
{
    xsp_trace *t = xsp_trace_new();
    xsp_inputs_keys k;
    CHECK(t && xsp_inputs_keys_init(t, &k) == 0);
    if (!t)
        return;
    uint64_t x = 88172645463325252ull;
    uint8_t buf[256];
    uint32_t ok = 0, bad = 0;
    for (int round = 0; round < 20000; round++) {
        uint32_t len = (uint32_t)(x % sizeof buf);
        for (uint32_t i = 0; i < len; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[i] = (uint8_t)x;
        }
        if (len > 0)
            buf[0] = XSP_IN_VERSION;           /* past the version check, mostly */
        uint32_t added = 0;
        int rc = xsp_inputs_decode(t, &k, buf, len, &added);
        CHECK(rc == 0 || rc == 1);
        ok += rc == 0;
        bad += rc == 1;
        if (rc == 1)
            CHECK_EQ_U(added, 0);
        t->n_attrs = 0;                         /* unreferenced: drop them */
    }
    CHECK(bad > 0);
    pb p;
    pb_head(&p, "Tensor", XSP_IN_SCHEMA, 3);
    pb_tensor(&p, 6, 2, (int64_t[]){2, 3}, (int64_t[]){3, 1});
    pb_u8(&p, 'D');
    pb_u8(&p, 1);
    pb_f64(&p, 1.5);
    pb_u8(&p, 'L');
    pb_bytes(&p, &(uint16_t){1}, 2);
    pb_tensor(&p, 6, 1, (int64_t[]){4}, (int64_t[]){1});
    for (uint32_t cut = 0; cut < p.n; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1);   /* exactly cut bytes: ASan sees a read past */
        memcpy(copy, p.b, cut);
        uint32_t added = 0;
        CHECK(xsp_inputs_decode(t, &k, copy, cut, &added) == 1);
        free(copy);
    }
    uint32_t added = 0;
    CHECK(xsp_inputs_decode(t, &k, p.b, p.n, &added) == 0);
    CHECK_EQ_U(added, 5);
    xsp_trace_free(t);
    (void)ok;
}

/* The memo (inmemo.h) gives what plain decoding gives, payload for payload: 3000 distinct
 * payloads (valid ones of many shapes, and malformed ones) decoded three times each,
 * interleaved, through the memo into one trace and plainly into another; the memo grows past
 * its first 1024 slots and saves exactly the repeats. */
static void test_memo(void)
{
    xsp_trace *plain = xsp_trace_new(), *memo = xsp_trace_new();
    xsp_inputs_keys kp, km;
    CHECK(plain && memo && xsp_inputs_keys_init(plain, &kp) == 0
          && xsp_inputs_keys_init(memo, &km) == 0);
    if (!plain || !memo)
        return;
    enum { N = 3000 };
    static pb pay[N];
    for (int i = 0; i < N; i++) {
        pb_head(&pay[i], i % 3 ? "Tensor" : "Tensor(a)", XSP_IN_SCHEMA, 2);
        pb_tensor(&pay[i], 6, 2, (int64_t[]){i, 3}, (int64_t[]){3, 1});
        pb_u8(&pay[i], 'D');
        pb_u8(&pay[i], 1);
        pb_f64(&pay[i], i * 0.5);
        if (i % 7 == 0)
            pay[i].n -= 3;                      /* malformed: cut short */
    }
    xsp_inmemo m = {0};
    int same = 1;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            uint32_t ap = 0, am = 0, p0 = plain->n_attrs, m0 = memo->n_attrs;
            int rp = xsp_inputs_decode(plain, &kp, pay[i].b, pay[i].n, &ap);
            int rm = xsp_inmemo_decode(&m, memo, &km, pay[i].b, pay[i].n, &am);
            same &= rp == rm && ap == am && rp == (i % 7 == 0);
            for (uint32_t j = 0; same && j < ap; j++) {
                const xsp_attr *a = &plain->attrs[p0 + j], *b = &memo->attrs[m0 + j];
                same &= a->type == b->type
                        && strcmp(xsp_strtab_get(&plain->strings, a->key, NULL),
                                  xsp_strtab_get(&memo->strings, b->key, NULL)) == 0
                        && (a->type != XSP_ATTR_STR
                            || strcmp(xsp_strtab_get(&plain->strings, a->v.s, NULL),
                                      xsp_strtab_get(&memo->strings, b->v.s, NULL)) == 0)
                        && (a->type == XSP_ATTR_STR || a->v.i == b->v.i);
            }
        }
    }
    CHECK(same);
    CHECK_EQ_U(m.used, N);
    CHECK_EQ_U(m.hits, 2 * N);
    CHECK(m.cap >= 2 * N);
    CHECK_EQ_U(plain->n_attrs, memo->n_attrs);
    xsp_inmemo_free(&m);
    xsp_inmemo_free(NULL);
    CHECK(m.slots == NULL && m.cap == 0);
    xsp_trace_free(plain);
    xsp_trace_free(memo);
}

int main(void)
{
    test_memo();
    test_decode_hostile();
    test_fmt_double();
    test_inputs();
    test_no_data();
    test_many();
    return CHECK_DONE();
}
