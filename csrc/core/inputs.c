/*
 * inputs.c: decoding the shim's op-input payloads into torch.profiler's texts (see inputs.h).
 *
 * Runs at stop only, once per op that carries inputs.  The four texts are built side by side
 * in growable buffers while the items are read, with every read bounds-checked against the
 * payload: a malformed payload (a bug, or memory trodden on) gives 1, never a read past it.
 */
#include "inputs.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Protected by g_names_lock: the dtype names (owned copies). */
static pthread_mutex_t g_names_lock = PTHREAD_MUTEX_INITIALIZER;
static char *g_names[XSP_IN_MAX_DTYPES];

int xsp_inputs_set_dtype_names(const char *const *names, uint32_t n)
{
    char *copy[XSP_IN_MAX_DTYPES] = {0};
    if (n > XSP_IN_MAX_DTYPES)
        n = XSP_IN_MAX_DTYPES;
    for (uint32_t i = 0; i < n; i++) {
        if (!names[i])
            continue;
        copy[i] = strdup(names[i]);
        if (!copy[i]) {
            for (uint32_t j = 0; j < i; j++)
                free(copy[j]);
            return -1;
        }
    }
    pthread_mutex_lock(&g_names_lock);
    for (uint32_t i = 0; i < XSP_IN_MAX_DTYPES; i++) {
        free(g_names[i]);
        g_names[i] = copy[i];
    }
    pthread_mutex_unlock(&g_names_lock);
    return 0;
}

int xsp_inputs_keys_init(xsp_trace *t, xsp_inputs_keys *k)
{
    static const char *const names[] = {"input_dims", "input_types", "input_strides",
                                        "concrete_inputs", "overload", "inputs_truncated"};
    uint32_t *dst[] = {&k->dims, &k->types, &k->strides, &k->concrete, &k->overload,
                       &k->truncated};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        *dst[i] = xsp_strtab_intern(&t->strings, names[i], strlen(names[i]));
        if (*dst[i] == UINT32_MAX)
            return -1;
    }
    return 0;
}

void xsp_inputs_fmt_double(double d, char *buf, size_t size)
{
    /* c10's IValue printer: an integral value below 1e10 prints as "<int>.", "-0." for a
     * negative zero; anything else with max_digits10 (17) significant digits, as %.17g */
    int c = fpclassify(d);
    if ((c == FP_NORMAL || c == FP_ZERO) && fabs(d) < 1e10) {
        long long i = (long long)d;
        if ((double)i == d) {
            snprintf(buf, size, "%s%lld.", i == 0 && signbit(d) ? "-" : "", i);
            return;
        }
    }
    snprintf(buf, size, "%.17g", d);
}

/* A growable text. */
typedef struct text {
    char *s;            /* bytes; owned */
    size_t n, cap;      /* used, allocated */
    int oom;            /* sticky: an append failed */
} text;

static void put(text *t, const char *s, size_t n)
{
    if (t->oom)
        return;
    if (t->n + n > t->cap) {
        size_t cap = t->cap ? t->cap : 128;
        while (cap < t->n + n)
            cap *= 2;
        char *p = realloc(t->s, cap);
        if (!p) {
            t->oom = 1;
            return;
        }
        t->s = p;
        t->cap = cap;
    }
    memcpy(t->s + t->n, s, n);
    t->n += n;
}

static void puts_(text *t, const char *s)
{
    put(t, s, strlen(s));
}

static void put_i64(text *t, int64_t v)
{
    char b[24];
    int n = snprintf(b, sizeof b, "%lld", (long long)v);
    put(t, b, (size_t)n);
}

/* A JSON string of s (torch's texts need no escaping but quotes and backslashes; control
 * bytes become \u00XX). */
static void put_json_str(text *t, const char *s, size_t n)
{
    put(t, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            put(t, e, 2);
        } else if (c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", c);
            put(t, e, 6);
        } else {
            put(t, (const char *)&s[i], 1);
        }
    }
    put(t, "\"", 1);
}

/* The payload reader: every read checks the remaining length. */
typedef struct reader {
    const uint8_t *p, *end;
    int bad;            /* sticky: a read ran past the end */
} reader;

static int rd(reader *r, void *out, size_t n)
{
    if (r->bad || (size_t)(r->end - r->p) < n) {
        r->bad = 1;
        memset(out, 0, n);
        return -1;
    }
    memcpy(out, r->p, n);
    r->p += n;
    return 0;
}

static uint8_t rd_u8(reader *r)
{
    uint8_t v;
    rd(r, &v, 1);
    return v;
}

static void dtype_name(uint8_t dt, char *buf, size_t size)
{
    pthread_mutex_lock(&g_names_lock);
    const char *n = dt < XSP_IN_MAX_DTYPES ? g_names[dt] : NULL;
    if (n)
        snprintf(buf, size, "%s", n);
    else
        snprintf(buf, size, "dtype%u", (unsigned)dt);
    pthread_mutex_unlock(&g_names_lock);
}

/* The four texts of one decode. */
typedef struct texts {
    text dims, types, strides, concrete;
} texts;

/* Reads a tensor item's body (after 'T'): its dims and strides as JSON arrays into d and s,
 * its dtype name into type. */
static void tensor_body(reader *r, text *d, text *s, char *type, size_t tsize)
{
    uint8_t dt = rd_u8(r), nd = rd_u8(r), strided = rd_u8(r);
    dtype_name(dt, type, tsize);
    put(d, "[", 1);
    for (uint32_t i = 0; i < nd && !r->bad; i++) {
        int64_t v;
        rd(r, &v, sizeof v);
        if (i)
            put(d, ", ", 2);
        put_i64(d, v);
    }
    put(d, "]", 1);
    put(s, "[", 1);
    for (uint32_t i = 0; strided && i < nd && !r->bad; i++) {
        int64_t v;
        rd(r, &v, sizeof v);
        if (i)
            put(s, ", ", 2);
        put_i64(s, v);
    }
    put(s, "]", 1);
}

/* One item: appends its entry to each of the four lists. */
static void item(reader *r, texts *x)
{
    uint8_t tag = rd_u8(r);
    char type[64] = "";
    char conc[80] = "";
    text cl = {0};   /* a scalar list's text */
    switch (tag) {
    case 'T':
        tensor_body(r, &x->dims, &x->strides, type, sizeof type);
        break;
    case 'L': {
        uint16_t n;
        rd(r, &n, sizeof n);
        snprintf(type, sizeof type, "TensorList");
        put(&x->dims, "[", 1);
        put(&x->strides, "[", 1);
        for (uint32_t i = 0; i < n && !r->bad; i++) {
            if (i) {
                put(&x->dims, ", ", 2);
                put(&x->strides, ", ", 2);
            }
            uint8_t t = rd_u8(r);
            char ignored[64];
            if (t == 'T') {
                tensor_body(r, &x->dims, &x->strides, ignored, sizeof ignored);
            } else if (t == 'U') {
                put(&x->dims, "[]", 2);
                put(&x->strides, "[]", 2);
            } else {
                r->bad = 1;
            }
        }
        put(&x->dims, "]", 1);
        put(&x->strides, "]", 1);
        break;
    }
    case 'i': case 'd': case 'b': case 'c': {
        snprintf(type, sizeof type, "Scalar");
        if (tag == 'i') {
            int64_t v;
            rd(r, &v, sizeof v);
            snprintf(conc, sizeof conc, "%lld", (long long)v);
        } else if (tag == 'd') {
            double v;
            rd(r, &v, sizeof v);
            xsp_inputs_fmt_double(v, conc, sizeof conc);
        } else if (tag == 'b') {
            snprintf(conc, sizeof conc, "%s", rd_u8(r) ? "True" : "False");
        } else {
            double re, im;
            rd(r, &re, sizeof re);
            rd(r, &im, sizeof im);
            char a[32], b[32];
            xsp_inputs_fmt_double(re, a, sizeof a);
            xsp_inputs_fmt_double(im, b, sizeof b);
            /* c10 prints a complex IValue as real + imag j, the sign of imag kept */
            snprintf(conc, sizeof conc, "%s%s%sj", a, im < 0 || signbit(im) ? "" : "+", b);
        }
        break;
    }
    case 'I': case 'D': case 'B': {
        snprintf(type, sizeof type, "ScalarList");
        uint8_t n = rd_u8(r);
        put(&cl, "[", 1);
        for (uint32_t i = 0; i < n && !r->bad; i++) {
            if (i)
                put(&cl, ", ", 2);
            char b[32];
            if (tag == 'I') {
                int64_t v;
                rd(r, &v, sizeof v);
                snprintf(b, sizeof b, "%lld", (long long)v);
            } else if (tag == 'D') {
                double v;
                rd(r, &v, sizeof v);
                xsp_inputs_fmt_double(v, b, sizeof b);
            } else {
                snprintf(b, sizeof b, "%s", rd_u8(r) ? "True" : "False");
            }
            puts_(&cl, b);
        }
        put(&cl, "]", 1);
        break;
    }
    case 'U': case 'N': case 'O':
        break;
    default:
        r->bad = 1;
    }
    if (tag != 'T' && tag != 'L') {
        put(&x->dims, "[]", 2);
        put(&x->strides, "[]", 2);
    }
    put_json_str(&x->types, type, strlen(type));
    if (cl.n || cl.oom)
        put_json_str(&x->concrete, cl.s ? cl.s : "", cl.n);
    else
        put_json_str(&x->concrete, conc, strlen(conc));
    if (cl.oom)
        x->concrete.oom = 1;
    free(cl.s);
}

static int add_str(xsp_trace *t, uint32_t key, const char *s, size_t n, uint32_t *added)
{
    uint32_t id = xsp_strtab_intern(&t->strings, s, n);
    if (id == UINT32_MAX)
        return -1;
    xsp_attr a = {.key = key, .type = XSP_ATTR_STR, .v.s = id};
    if (xsp_trace_add_attr(t, &a) == UINT32_MAX)
        return -1;
    (*added)++;
    return 0;
}

int xsp_inputs_decode(xsp_trace *t, const xsp_inputs_keys *k, const uint8_t *p, uint32_t len,
                      uint32_t *n_added)
{
    *n_added = 0;
    reader r = {p, p + len, 0};
    if (rd_u8(&r) != XSP_IN_VERSION)
        return 1;
    uint8_t olen = rd_u8(&r);
    const uint8_t *ov = r.p;
    if ((size_t)(r.end - r.p) < olen)
        return 1;
    r.p += olen;
    uint8_t flags = rd_u8(&r);
    uint16_t n;
    rd(&r, &n, sizeof n);
    if (r.bad)
        return 1;
    texts x = {{0}, {0}, {0}, {0}};
    text *all[] = {&x.dims, &x.types, &x.strides, &x.concrete};
    for (int i = 0; i < 4; i++)
        put(all[i], "[", 1);
    for (uint32_t i = 0; i < n && !r.bad; i++) {
        if (i)
            for (int j = 0; j < 4; j++)
                put(all[j], ", ", 2);
        item(&r, &x);
    }
    for (int i = 0; i < 4; i++)
        put(all[i], "]", 1);
    int rc = 0;
    if (r.bad || r.p != r.end) {
        rc = 1;
    } else if (x.dims.oom || x.types.oom || x.strides.oom || x.concrete.oom) {
        rc = -1;
    } else {
        uint32_t keys[] = {k->dims, k->types, k->strides, k->concrete};
        for (int i = 0; i < 4 && rc == 0; i++)
            rc = add_str(t, keys[i], all[i]->s, all[i]->n, n_added);
        if (rc == 0 && (flags & XSP_IN_SCHEMA))
            rc = add_str(t, k->overload, (const char *)ov, olen, n_added);
        if (rc == 0 && (flags & XSP_IN_TRUNCATED)) {
            xsp_attr a = {.key = k->truncated, .type = XSP_ATTR_INT, .v.i = 1};
            if (xsp_trace_add_attr(t, &a) == UINT32_MAX)
                rc = -1;
            else
                (*n_added)++;
        }
    }
    for (int i = 0; i < 4; i++)
        free(all[i]->s);
    return rc;
}
