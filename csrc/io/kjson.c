/*
 * kjson.c: the text half of the Kineto JSON reader (kjson.h): yajl's callbacks.
 *
 * yajl calls back once per token; the reader keeps a stack of what each open container is
 * (the top-level object, traceEvents, one event, its args, a value inside an arg, something
 * skipped) and acts on the tokens that matter:
 *   - top-level keys: traceEvents (the array of events), baseTimeNanoseconds, the metadata
 *     kept in meta (trace_id, host_name, traceName, schemaVersion, displayTimeUnit) and
 *     distributedInfo's rank, world_size and backend; everything else is skipped;
 *   - an event's fields ph, name, cat, ts, dur, pid, tid, id and args; when the event's
 *     object ends it is judged whole (fields may come in any order): a complete event (ph X)
 *     becomes a kj_rec, a thread_name a kj_tname, a fwdbwd flow end a kj_flow, the rest is
 *     counted;
 *   - each arg becomes an attribute "k.<key>" at once, in t->attrs: bool as 0/1, integers
 *     that fit int64 as ints, others as their decimal text, other numbers as doubles, strings
 *     as strings, and null, arrays and objects as JSON text under "k.<key>[]" (separators as
 *     Python's json.dumps writes them, numbers as the file wrote them).  A key given twice
 *     keeps its first place and its last value, as a Python dict would.
 *
 * Nothing here converts a number before its size is known: yajl hands numbers over as text
 * (the yajl_number callback), ts and dur are converted exactly from it (kj_decimal_ns), so a
 * million-digit exponent costs its length, not its value.  Memory is that of the records and
 * the interned strings; the deepest nesting is XSP_KJSON_MAX_DEPTH.
 */
#include "kjson_impl.h"

#include <locale.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const WELL_KNOWN[S_N] = {
    [S_K_NAME] = "k.name", [S_K_CAT] = "k.cat", [S_K_CORR] = "k.correlation",
    [S_K_DEVICE] = "k.device", [S_K_STREAM] = "k.stream", [S_K_CBID] = "k.cbid",
    [S_K_BYTES] = "k.bytes", [S_K_REGS] = "k.registers per thread", [S_K_GRID] = "k.grid[]",
    [S_K_BLOCK] = "k.block[]", [S_K_SEQ] = "k.Sequence number", [S_K_DIMS] = "k.Input Dims[]",
    [S_K_TYPES] = "k.Input type[]", [S_K_STRIDES] = "k.Input Strides[]",
    [S_K_CONCRETE] = "k.Concrete Inputs[]", [S_K_CORR_J] = "k.correlation[]",
    [S_K_DEVICE_J] = "k.device[]", [S_K_STREAM_J] = "k.stream[]",
    [S_SEQ] = "seq", [S_DIMS] = "input_dims", [S_TYPES] = "input_types",
    [S_STRIDES] = "input_strides", [S_CONCRETE] = "concrete_inputs", [S_TYPE] = "type",
    [S_CORR] = "correlation", [S_DEVICE] = "device", [S_STREAM] = "stream", [S_CBID] = "cbid",
    [S_BYTES] = "bytes", [S_REGS] = "registers", [S_GRID_X] = "grid_x", [S_GRID_Y] = "grid_y",
    [S_GRID_Z] = "grid_z", [S_BLOCK_X] = "block_x", [S_BLOCK_Y] = "block_y",
    [S_BLOCK_Z] = "block_z", [S_API] = "api", [S_FWD_OP] = "fwd_op",
    [S_CPU_OP] = "cpu_op", [S_USER_ANN] = "user_annotation", [S_PYFUNC] = "python_function",
    [S_RUNTIME] = "cuda_runtime", [S_DRIVER] = "cuda_driver", [S_KERNEL] = "kernel",
    [S_MEMCPY] = "gpu_memcpy", [S_MEMSET] = "gpu_memset", [S_SYNC] = "cuda_sync",
    [S_OVERHEAD] = "overhead", [S_TRACE] = "Trace", [S_FWDBWD] = "fwdbwd",
};

const char *xsp_kj_type_name(int type)
{
    static const char *const names[] = {"nothing", "NoneType", "bool", "int", "float", "str",
                                        "list", "dict"};
    return type >= 0 && type <= KV_OBJECT ? names[type] : "?";
}

int xsp_kj_fail(xsp_kjson *r, int64_t event, int64_t offset, const char *fmt, ...)
{
    if (r->err.msg[0])
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err.msg, sizeof r->err.msg, fmt, ap);
    va_end(ap);
    if (!r->err.msg[0])
        snprintf(r->err.msg, sizeof r->err.msg, "error");
    r->err.event = event;
    r->err.offset = offset;
    return -1;
}

static int nomem(xsp_kjson *r)
{
    xsp_kj_fail(r, -1, -1, "out of memory");
    r->err.nomem = 1;
    return -1;
}

/* The offset of the token being read: yajl's count into the current chunk. */
static int64_t here(const xsp_kjson *r)
{
    return (int64_t)(r->fed + (r->h ? yajl_get_bytes_consumed(r->h) : 0));
}

/* Grows *p (of *cap elements of size sz) to hold n + 1; 0 or -1 (unchanged). */
static int grow(void **p, uint32_t *cap, uint32_t n, size_t sz)
{
    if (n < *cap)
        return 0;
    if (n >= UINT32_MAX / 2)
        return -1;
    uint32_t nc = *cap ? *cap * 2 : 256;
    void *q = realloc(*p, (size_t)nc * sz);
    if (!q)
        return -1;
    *p = q;
    *cap = nc;
    return 0;
}

/* Appends n bytes to the scratch buffer; 0 or -1. */
static int put(xsp_kjson *r, const char *s, size_t n)
{
    if (r->buf_len + n > r->buf_cap) {
        size_t nc = r->buf_cap ? r->buf_cap : 256;
        while (nc < r->buf_len + n)
            nc *= 2;
        char *q = realloc(r->buf, nc);
        if (!q)
            return nomem(r);
        r->buf = q;
        r->buf_cap = nc;
    }
    memcpy(r->buf + r->buf_len, s, n);
    r->buf_len += n;
    return 0;
}

/* Appends s as a JSON string (quotes, escapes of '"', '\\' and control characters; other
 * bytes as they are, so UTF-8 stays UTF-8). */
static int put_json_string(xsp_kjson *r, const unsigned char *s, size_t n)
{
    if (put(r, "\"", 1))
        return -1;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        if (put(r, (const char *)s + run, i - run))
            return -1;
        char esc[8];
        switch (c) {
        case '"': memcpy(esc, "\\\"", 3); break;
        case '\\': memcpy(esc, "\\\\", 3); break;
        case '\n': memcpy(esc, "\\n", 3); break;
        case '\r': memcpy(esc, "\\r", 3); break;
        case '\t': memcpy(esc, "\\t", 3); break;
        case '\b': memcpy(esc, "\\b", 3); break;
        case '\f': memcpy(esc, "\\f", 3); break;
        default: snprintf(esc, sizeof esc, "\\u%04x", c); break;
        }
        if (put(r, esc, strlen(esc)))
            return -1;
        run = i + 1;
    }
    return put(r, (const char *)s + run, n - run) || put(r, "\"", 1) ? -1 : 0;
}

/* The string id of well-known string k when the trace's table has it, else UINT32_MAX (which
 * no attribute key or category equals).  Nothing is interned: the table holds only what the
 * file and its spans use (readers ask it whether a key occurs, e.g. "input_dims"). */
uint32_t xsp_kj_id(xsp_kjson *r, int k)
{
    if (r->id[k] == UINT32_MAX)
        r->id[k] = xsp_strtab_find(&r->t->strings, WELL_KNOWN[k], strlen(WELL_KNOWN[k]));
    return r->id[k];
}

uint32_t xsp_kj_intern_id(xsp_kjson *r, int k)
{
    if (xsp_kj_id(r, k) == UINT32_MAX
        && (r->id[k] = xsp_strtab_intern(&r->t->strings, WELL_KNOWN[k],
                                         strlen(WELL_KNOWN[k]))) == UINT32_MAX)
        nomem(r);
    return r->id[k];
}

static uint32_t intern(xsp_kjson *r, const void *s, size_t n)
{
    uint32_t id = xsp_strtab_intern(&r->t->strings, s, n);
    if (id == UINT32_MAX)
        nomem(r);
    return id;
}

/* -- numbers --------------------------------------------------------------------------------- */

/* 1 when the JSON number text s[0..n) is an integer (no fraction, no exponent). */
static int is_integer(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] == '.' || s[i] == 'e' || s[i] == 'E')
            return 0;
    return 1;
}

/* The integer text s[0..n) (JSON syntax) as int64 in *out; 0, or -1 when it does not fit. */
static int parse_i64(const char *s, size_t n, int64_t *out)
{
    size_t i = 0;
    int neg = n && s[0] == '-';
    i += (size_t)neg;
    uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < n; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (lim - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* The JSON number text s[0..n) times 10^scale, rounded half to even, as an int64 strictly
 * between -2^63 and 2^63 in *out.  0, or -1 when out of that range.  Exact: the digits are
 * read as text; the exponent saturates (any exponent past 10^9 is out of range or rounds to
 * 0), so the cost is the text's length whatever its value. */
int xsp_kj_decimal(const char *s, size_t n, int scale, int64_t *out)
{
    size_t i = 0;
    int neg = n && s[0] == '-';
    i += (size_t)neg;
    size_t int0 = i;
    while (i < n && s[i] >= '0' && s[i] <= '9')
        i++;
    size_t int1 = i, frac0 = i, frac1 = i;
    if (i < n && s[i] == '.') {
        frac0 = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        frac1 = i;
    }
    int64_t exp = 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        int eneg = i < n && s[i] == '-';
        if (i < n && (s[i] == '-' || s[i] == '+'))
            i++;
        for (; i < n; i++)
            if (exp < 1000000000)
                exp = exp * 10 + (s[i] - '0');
        if (eneg)
            exp = -exp;
    }
    /* digits: s[int0..int1) then s[frac0..frac1); value = digits x 10^(exp - nfrac) */
    size_t nint = int1 - int0, nd = nint + (frac1 - frac0);
#define DIGIT(j) (s[(j) < nint ? int0 + (j) : frac0 + (j) - nint] - '0')
    size_t lead = 0;
    while (lead < nd && DIGIT(lead) == 0)
        lead++;
    if (lead == nd) {
        *out = 0;
        return 0;
    }
    int64_t e = exp - (int64_t)(frac1 - frac0) + scale;
    /* the integer part: significant digits lead .. lead + k */
    int64_t k = (int64_t)(nd - lead) + e;
    if (k > 19)
        return -1;
    uint64_t q = 0;
    size_t take = k <= 0 ? 0 : (size_t)k < nd - lead ? (size_t)k : nd - lead;
    for (size_t j = 0; j < take; j++)
        q = q * 10 + (uint64_t)DIGIT(lead + j);
    for (int64_t j = (int64_t)take; j < k; j++) {  /* trailing zeros of a positive exponent */
        if (q > UINT64_MAX / 10)
            return -1;
        q *= 10;
    }
    if (k >= 0 && (size_t)k < nd - lead) {            /* round half to even on what is cut */
        int first = DIGIT(lead + (size_t)k), rest = 0;
        for (size_t j = lead + (size_t)k + 1; j < nd && !rest; j++)
            rest = DIGIT(j) != 0;
        if (first > 5 || (first == 5 && (rest || (q & 1))))
            q++;
    }
#undef DIGIT
    if (q > (uint64_t)INT64_MAX)
        return -1;
    *out = neg ? -(int64_t)q : (int64_t)q;
    return 0;
}

/* The number text as a double, read in the C locale whatever the process's. */
static double to_double(const xsp_kjson *r, const char *s, size_t n)
{
    locale_t c_locale = r->c_locale;
    char small[64];
    char *tmp = n < sizeof small ? small : malloc(n + 1);
    if (!tmp)
        return 0.0;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    double v = c_locale ? strtod_l(tmp, NULL, c_locale) : strtod(tmp, NULL);
    if (tmp != small)
        free(tmp);
    return v;
}

/* -- values ---------------------------------------------------------------------------------- */

/* A scalar token as a kj_val (strings and non-int64 numbers interned). */
typedef struct tok {
    int type;                   /* KV_* */
    const char *s;              /* KV_STR: the bytes; KV_INT / KV_NUM: the number's text */
    size_t n;                   /* their length */
    int64_t i;                  /* KV_BOOL: 0 or 1 */
} tok;

static int to_val(xsp_kjson *r, const tok *k, kj_val *v)
{
    memset(v, 0, sizeof *v);
    v->type = (uint8_t)k->type;
    if (k->type == KV_BOOL)
        v->i = k->i;
    if (k->type == KV_INT && parse_i64(k->s, k->n, &v->i) != 0)
        v->type = KV_NUM;
    if (v->type == KV_STR || v->type == KV_NUM) {
        v->s = intern(r, k->s, k->n);
        if (v->s == UINT32_MAX)
            return -1;
    }
    return 0;
}

/* ts or dur from a token. */
static void to_time(const tok *k, kj_time *t)
{
    memset(t, 0, sizeof *t);
    if (k->type != KV_INT && k->type != KV_NUM) {
        t->status = KT_TYPE;
        t->type = (uint8_t)k->type;
        return;
    }
    t->status = xsp_kj_decimal(k->s, k->n, 3, &t->ns) == 0 ? KT_OK : KT_RANGE;
    size_t n = k->n < sizeof t->text - 4 ? k->n : sizeof t->text - 4;
    memcpy(t->text, k->s, n);
    memcpy(t->text + n, k->n > n ? "..." : "", k->n > n ? 4 : 1);
}

/* -- args ------------------------------------------------------------------------------------ */

/* Index in the event's attributes of the arg with raw key id raw, or -1. */
static int64_t find_arg(const xsp_kjson *r, uint32_t raw)
{
    for (uint32_t j = 0; j < r->n_args; j++)
        if (r->arg_raw[j] == raw)
            return j;
    return -1;
}

/* Sets the arg whose raw key is r->arg_key to a (its key: "k.<key>", "[]" added when json):
 * a new attribute, or the old one's place when the key came before. */
static int set_arg(xsp_kjson *r, xsp_attr a, int json)
{
    size_t klen;
    const char *key = xsp_strtab_get(&r->keys, r->arg_key, &klen);
    r->buf_len = 0;
    if (put(r, "k.", 2) || put(r, key, klen) || (json && put(r, "[]", 2)))
        return -1;
    a.key = intern(r, r->buf, r->buf_len);
    if (a.key == UINT32_MAX)
        return -1;
    int64_t j = find_arg(r, r->arg_key);
    if (j >= 0) {
        r->t->attrs[r->ev_attr0 + (uint32_t)j] = a;
        return 0;
    }
    if (r->n_args >= XSP_KJSON_MAX_ATTRS)
        return xsp_kj_fail(r, (int64_t)r->n_events - 1, -1,
                           "more than %d args: more than xsp keeps per span",
                           XSP_KJSON_MAX_ATTRS);
    if (xsp_trace_add_attr(r->t, &a) == UINT32_MAX)
        return nomem(r);
    r->arg_raw[r->n_args++] = r->arg_key;
    return 0;
}

/* A scalar arg value. */
static int arg_scalar(xsp_kjson *r, const tok *k)
{
    xsp_attr a = {0};
    if (r->arg_is_name) {                   /* a thread_name's name, as Python's str() */
        tok t = *k;
        if (k->type == KV_NULL)
            t = (tok){.type = KV_STR, .s = "None", .n = 4};
        else if (k->type == KV_BOOL)
            t = (tok){.type = KV_STR, .s = k->i ? "True" : "False", .n = k->i ? 4 : 5};
        else if (k->type != KV_STR)
            t.type = KV_STR;                /* a number: its text */
        if (to_val(r, &t, &r->ev.tname))
            return -1;
    }
    switch (k->type) {
    case KV_BOOL:
        a.type = XSP_ATTR_INT;
        a.v.i = k->i;
        break;
    case KV_INT:
        a.type = XSP_ATTR_INT;
        if (parse_i64(k->s, k->n, &a.v.i) != 0) {     /* past int64: its digits */
            a.type = XSP_ATTR_STR;
            if ((a.v.s = intern(r, k->s, k->n)) == UINT32_MAX)
                return -1;
        }
        break;
    case KV_NUM:
        a.type = XSP_ATTR_FLOAT;
        a.v.f = to_double(r, k->s, k->n);
        break;
    case KV_STR:
        a.type = XSP_ATTR_STR;
        if ((a.v.s = intern(r, k->s, k->n)) == UINT32_MAX)
            return -1;
        break;
    default:                                        /* null: JSON text */
        a.type = XSP_ATTR_STR;
        if ((a.v.s = intern(r, "null", 4)) == UINT32_MAX)
            return -1;
        return set_arg(r, a, 1);
    }
    return set_arg(r, a, 0);
}

/* The JSON text in the scratch buffer, ended, as the value of the arg that owns it. */
static int arg_json_done(xsp_kjson *r)
{
    uint32_t s = intern(r, r->buf, r->buf_len);
    if (s == UINT32_MAX)
        return -1;
    if (r->arg_is_name)
        r->ev.tname = (kj_val){.type = KV_STR, .s = s};
    return set_arg(r, (xsp_attr){.type = XSP_ATTR_STR, .v.s = s}, 1);
}

/* A value inside a JSON-text container: its separator first. */
static int json_sep(xsp_kjson *r)
{
    int d = r->depth - 1;
    if (r->ctx[d] == C_JARR && !r->jfirst[d] && put(r, ", ", 2))
        return -1;
    r->jfirst[d] = 0;
    return 0;
}

static int json_scalar(xsp_kjson *r, const tok *k)
{
    if (r->ctx[r->depth - 1] == C_JARR && json_sep(r))
        return -1;
    switch (k->type) {
    case KV_NULL: return put(r, "null", 4);
    case KV_BOOL: return k->i ? put(r, "true", 4) : put(r, "false", 5);
    case KV_STR: return put_json_string(r, (const unsigned char *)k->s, k->n);
    default: return put(r, k->s, k->n);
    }
}

/* -- the event ------------------------------------------------------------------------------- */

static int str_is(const xsp_kjson *r, const kj_val *v, const char *lit)
{
    size_t n;
    const char *s = v->type == KV_STR ? xsp_strtab_get(&r->t->strings, v->s, &n) : NULL;
    return s && n == strlen(lit) && memcmp(s, lit, n) == 0;
}

/* The key id of a pid, tid or flow id (bool, arrays and objects refused by the caller). */
static uint32_t key_of(xsp_kjson *r, const kj_val *v)
{
    unsigned char b[9];
    size_t n = 1;
    b[0] = v->type == KV_ABSENT ? KV_NULL : v->type;
    if (v->type == KV_INT) {
        memcpy(b + 1, &v->i, 8);
        n = 9;
    } else if (v->type == KV_STR || v->type == KV_NUM) {
        memcpy(b + 1, &v->s, 4);
        n = 5;
    }
    uint32_t id = xsp_strtab_intern(&r->keys, (const char *)b, n);
    if (id == UINT32_MAX)
        nomem(r);
    return id;
}

/* Checks that field what of event i (v) is an id: an integer, another number, a string or
 * null. */
static int check_id(xsp_kjson *r, const kj_val *v, const char *what, int64_t i)
{
    if (v->type == KV_BOOL || v->type == KV_ARRAY || v->type == KV_OBJECT)
        return xsp_kj_fail(r, i, -1, "%s must be an integer or a string, not %s", what,
                           xsp_kj_type_name(v->type));
    return 0;
}

static int check_time(xsp_kjson *r, const kj_time *t, const char *what, int64_t i)
{
    if (t->status == KT_TYPE)
        return xsp_kj_fail(r, i, -1, "%s must be a number, not %s", what,
                           xsp_kj_type_name(t->type));
    if (t->status == KT_RANGE)
        return xsp_kj_fail(r, i, -1, "%s %s is out of range (more than 2**63 ns)", what,
                           t->text);
    return 0;
}

/* The attribute with key id key among the event's, or NULL. */
static xsp_attr *ev_attr(xsp_kjson *r, uint32_t key)
{
    for (uint32_t j = r->ev_attr0; j < r->t->n_attrs; j++)
        if (r->t->attrs[j].key == key)
            return &r->t->attrs[j];
    return NULL;
}

/* Sets (replacing) or appends an attribute of the event. */
static int ev_set(xsp_kjson *r, int key, xsp_attr a)
{
    if ((a.key = xsp_kj_intern_id(r, key)) == UINT32_MAX)
        return -1;
    xsp_attr *old = ev_attr(r, a.key);
    if (old) {
        *old = a;
        return 0;
    }
    return xsp_trace_add_attr(r->t, &a) == UINT32_MAX ? nomem(r) : 0;
}

static int ev_set_int(xsp_kjson *r, int key, int64_t v)
{
    return ev_set(r, key, (xsp_attr){.type = XSP_ATTR_INT, .v.i = v});
}

/* An id-like arg of a GPU or API event (correlation, device, stream): absent, or an integer;
 * anything else is refused, naming it. */
static int check_int_arg(xsp_kjson *r, int plain, int json, const char *what, int64_t i)
{
    xsp_attr *a = ev_attr(r, xsp_kj_id(r, plain));
    const char *bad = NULL;
    if (a && a->type != XSP_ATTR_INT)
        bad = a->type == XSP_ATTR_FLOAT ? "float" : "str";
    a = ev_attr(r, xsp_kj_id(r, json));
    if (a) {
        const char *s = xsp_strtab_get(&r->t->strings, a->v.s, NULL);
        bad = s[0] == '[' ? "list" : s[0] == '{' ? "dict" : "NoneType";
    }
    if (bad)
        return xsp_kj_fail(r, i, -1, "args.%s must be an integer, not %s", what, bad);
    return 0;
}

/* grid or block: "k.<ax>[]" holding [x, y, z] of integers, as <ax>_x, _y, _z. */
static int put_dim3(xsp_kjson *r, int src, int dst)
{
    xsp_attr *a = ev_attr(r, xsp_kj_id(r, src));
    if (!a)
        return 0;
    const char *s = xsp_strtab_get(&r->t->strings, a->v.s, NULL);
    int64_t v[3];
    for (int k = 0; k < 3; k++) {
        if (*s++ != (k ? ',' : '['))
            return 0;
        while (*s == ' ')
            s++;
        const char *e = s + (*s == '-');
        while (*e >= '0' && *e <= '9')
            e++;
        if (e == s || parse_i64(s, (size_t)(e - s), &v[k]) != 0)
            return 0;
        s = e;
    }
    if (strcmp(s, "]") != 0)
        return 0;
    for (int k = 0; k < 3; k++)
        if (ev_set_int(r, dst + k, v[k]))
            return -1;
    return 0;
}

/* The kind of a complete event from its category and name alone (backward and model are
 * told in kbuild.c from the nesting), or -1 for an event that is no span (counted). */
static int kind_of(xsp_kjson *r)
{
    const kj_val *c = &r->ev.cat;
    uint32_t cat = c->type == KV_STR ? c->s : 0;
    size_t n;
    const char *name = xsp_strtab_get(&r->t->strings, r->ev.name.s, &n);
    static const int gpu[][2] = {{S_KERNEL, XSP_KIND_KERNEL}, {S_MEMCPY, XSP_KIND_MEMCPY},
                                 {S_MEMSET, XSP_KIND_MEMSET}, {S_SYNC, XSP_KIND_SYNC},
                                 {S_OVERHEAD, XSP_KIND_OVERHEAD}};
    for (size_t k = 0; k < sizeof gpu / sizeof gpu[0]; k++)
        if (cat == xsp_kj_id(r, gpu[k][0]))
            return gpu[k][1];
    if (cat == xsp_kj_id(r, S_TRACE))
        return r->region < 0 ? XSP_KIND_REGION : -1;   /* a second Trace span: counted */
    if (cat == 0 && r->ev.pid.type == KV_STR)
        return -1;                                      /* a viewer's own track */
    if (cat == xsp_kj_id(r, S_CPU_OP))
        return XSP_KIND_OP;
    if (cat == xsp_kj_id(r, S_USER_ANN))
        return n > 13 && memcmp(name, "ProfilerStep#", 13) == 0 ? XSP_KIND_STEP
                                                                : XSP_KIND_SCOPE;
    if (cat == xsp_kj_id(r, S_PYFUNC))
        return n >= 11 && memcmp(name, "nn.Module: ", 11) == 0 ? XSP_KIND_MODULE
                                                               : XSP_KIND_PYTHON;
    if (cat == xsp_kj_id(r, S_RUNTIME))
        return XSP_KIND_RUNTIME;
    if (cat == xsp_kj_id(r, S_DRIVER))
        return XSP_KIND_DRIVER;
    return XSP_KIND_SCOPE;                              /* gpu_user_annotation, ... */
}

static int is_gpu_kind(int kind)
{
    return kind >= XSP_KIND_KERNEL && kind <= XSP_KIND_OVERHEAD;
}

/* The attributes xsp derives from a complete event's own fields; *name may change (a step). */
static int derive(xsp_kjson *r, int kind, uint32_t *name, int64_t i)
{
    if (kind == XSP_KIND_OP) {
        xsp_attr *seq = ev_attr(r, xsp_kj_id(r, S_K_SEQ));
        if (seq && seq->type == XSP_ATTR_INT && ev_set_int(r, S_SEQ, seq->v.i))
            return -1;
    }
    if (kind == XSP_KIND_OP || kind == XSP_KIND_SCOPE) {
        static const int inputs[][2] = {{S_K_CONCRETE, S_CONCRETE}, {S_K_TYPES, S_TYPES},
                                        {S_K_STRIDES, S_STRIDES}, {S_K_DIMS, S_DIMS}};
        xsp_attr *dims = ev_attr(r, xsp_kj_id(r, S_K_DIMS));
        if (dims && xsp_strtab_get(&r->t->strings, dims->v.s, NULL)[0] == '[') {
            for (size_t k = 0; k < 4; k++) {
                xsp_attr *a = ev_attr(r, xsp_kj_id(r, inputs[k][0]));
                if (a && xsp_strtab_get(&r->t->strings, a->v.s, NULL)[0] == '['
                    && ev_set(r, inputs[k][1], (xsp_attr){.type = XSP_ATTR_STR, .v.s = a->v.s}))
                    return -1;
            }
        }
    }
    size_t n;
    const char *s = xsp_strtab_get(&r->t->strings, *name, &n);
    if (kind == XSP_KIND_STEP || kind == XSP_KIND_REGION) {
        if (ev_set(r, S_K_NAME, (xsp_attr){.type = XSP_ATTR_STR, .v.s = *name}))
            return -1;
    }
    if (kind == XSP_KIND_STEP) {                /* "ProfilerStep#N" -> "step#N" (N stripped) */
        const char *a = memchr(s, '#', n) + 1, *b = s + n;
        while (a < b && (*a == ' ' || (*a >= '\t' && *a <= '\r')))
            a++;
        while (b > a && (b[-1] == ' ' || (b[-1] >= '\t' && b[-1] <= '\r')))
            b--;
        r->buf_len = 0;
        if (put(r, "step#", 5) || put(r, a, (size_t)(b - a))
            || (*name = intern(r, r->buf, r->buf_len)) == UINT32_MAX)
            return -1;
    }
    if (kind == XSP_KIND_MODULE) {              /* "nn.Module: Linear_0" -> type "Linear" */
        const char *a = s + 11, *b = s + n;
        const char *u = b;
        while (u > a && u[-1] != '_')
            u--;
        if (u > a)
            b = u - 1;
        uint32_t typ = intern(r, a, (size_t)(b - a));
        if (typ == UINT32_MAX || ev_set(r, S_TYPE, (xsp_attr){.type = XSP_ATTR_STR, .v.s = typ}))
            return -1;
    }
    if (is_gpu_kind(kind) || kind == XSP_KIND_RUNTIME || kind == XSP_KIND_DRIVER) {
        if (check_int_arg(r, S_K_CORR, S_K_CORR_J, "correlation", i))
            return -1;
        if (is_gpu_kind(kind) && (check_int_arg(r, S_K_DEVICE, S_K_DEVICE_J, "device", i)
                                  || check_int_arg(r, S_K_STREAM, S_K_STREAM_J, "stream", i)))
            return -1;
        static const int ints[][2] = {{S_K_CORR, S_CORR}, {S_K_DEVICE, S_DEVICE},
                                      {S_K_STREAM, S_STREAM}, {S_K_CBID, S_CBID},
                                      {S_K_BYTES, S_BYTES}, {S_K_REGS, S_REGS}};
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
            xsp_attr *a = ev_attr(r, xsp_kj_id(r, ints[k][0]));
            if (a && a->type == XSP_ATTR_INT && ev_set_int(r, ints[k][1], a->v.i))
                return -1;
        }
        if (put_dim3(r, S_K_GRID, S_GRID_X) || put_dim3(r, S_K_BLOCK, S_BLOCK_X))
            return -1;
    }
    if (kind != XSP_KIND_REGION && r->ev.cat.type == KV_STR && r->ev.cat.s != 0
        && ev_set(r, S_K_CAT, (xsp_attr){.type = XSP_ATTR_STR, .v.s = r->ev.cat.s}))
        return -1;
    return 0;
}

/* A complete event (ph X), checked whole: kept as a record, or counted. */
static int end_complete(xsp_kjson *r, int64_t i)
{
    static const struct { int key; const char *name; } need[] = {
        {EK_NAME, "name"}, {EK_TS, "ts"}, {EK_DUR, "dur"}};
    for (size_t k = 0; k < 3; k++) {
        int absent = need[k].key == EK_NAME ? r->ev.name.type == KV_ABSENT
                   : need[k].key == EK_TS ? r->ev.ts.status == KT_ABSENT
                                          : r->ev.dur.status == KT_ABSENT;
        if (absent)
            return xsp_kj_fail(r, i, -1, "a complete event (ph X) without '%s'", need[k].name);
    }
    if (r->ev.name.type != KV_STR)
        return xsp_kj_fail(r, i, -1, "name must be a string, not %s",
                           xsp_kj_type_name(r->ev.name.type));
    if (r->ev.args != KV_ABSENT && r->ev.args != KV_OBJECT)
        return xsp_kj_fail(r, i, -1, "args must be an object, not %s",
                           xsp_kj_type_name(r->ev.args));
    if (check_time(r, &r->ev.ts, "ts", i) || check_time(r, &r->ev.dur, "dur", i))
        return -1;
    if (r->ev.dur.ns < 0)
        return xsp_kj_fail(r, i, -1, "dur %s is negative", r->ev.dur.text);
    if (check_id(r, &r->ev.pid, "pid", i) || check_id(r, &r->ev.tid, "tid", i))
        return -1;
    if (r->ev.cat.type != KV_ABSENT && r->ev.cat.type != KV_NULL && r->ev.cat.type != KV_STR)
        return xsp_kj_fail(r, i, -1, "cat must be a string, not %s",
                           xsp_kj_type_name(r->ev.cat.type));
    int kind = kind_of(r);
    if (kind < 0) {
        r->skipped++;
        r->t->n_attrs = r->ev_attr0;
        return 0;
    }
    uint32_t name = r->ev.name.s;
    if (derive(r, kind, &name, i))
        return -1;
    uint32_t n = r->t->n_attrs - r->ev_attr0;
    if (n > XSP_KJSON_MAX_ATTRS)
        return xsp_kj_fail(r, i, -1, "%u args: more than xsp keeps per span (%d)", (unsigned)n,
                           XSP_KJSON_MAX_ATTRS);
    int slot = kind == XSP_KIND_OP || is_gpu_kind(kind);   /* fwd_op or api, at the end */
    if (slot && xsp_trace_add_attr(r->t, &(xsp_attr){0}) == UINT32_MAX)
        return nomem(r);
    if (grow((void **)&r->recs, &r->cap_recs, r->n_recs, sizeof *r->recs))
        return nomem(r);
    kj_rec *rec = &r->recs[r->n_recs];
    *rec = (kj_rec){.ts = r->ev.ts.ns, .dur = r->ev.dur.ns, .name = name,
                    .cat = r->ev.cat.type == KV_STR ? r->ev.cat.s : 0,
                    .pid = key_of(r, &r->ev.pid), .tid = key_of(r, &r->ev.tid),
                    .index = (uint32_t)i, .attr_off = r->ev_attr0, .attr_n = (uint16_t)n,
                    .kind = (uint8_t)kind, .slot = (uint8_t)slot};
    if (rec->pid == UINT32_MAX || rec->tid == UINT32_MAX)
        return -1;
    if (kind == XSP_KIND_REGION)
        r->region = r->n_recs;
    r->n_recs++;
    return 0;
}

/* The end of an event's object. */
static int end_event(xsp_kjson *r)
{
    int64_t i = (int64_t)r->n_events - 1;
    const kj_val *ph = &r->ev.ph;
    if (ph->type != KV_ABSENT && ph->type != KV_STR)
        return xsp_kj_fail(r, i, -1, "ph must be a string, not %s", xsp_kj_type_name(ph->type));
    if (str_is(r, ph, "X"))
        return end_complete(r, i);
    r->t->n_attrs = r->ev_attr0;                /* only complete events keep their args */
    if (str_is(r, ph, "M")) {
        if (check_id(r, &r->ev.pid, "pid", i) || check_id(r, &r->ev.tid, "tid", i))
            return -1;
        if (str_is(r, &r->ev.name, "thread_name") && r->ev.args == KV_OBJECT) {
            if (grow((void **)&r->tnames, &r->cap_tnames, r->n_tnames, sizeof *r->tnames))
                return nomem(r);
            kj_tname *tn = &r->tnames[r->n_tnames];
            tn->pid = key_of(r, &r->ev.pid);
            tn->tid = key_of(r, &r->ev.tid);
            tn->name = r->ev.tname.type == KV_STR ? r->ev.tname.s : 0;
            if (tn->pid == UINT32_MAX || tn->tid == UINT32_MAX)
                return -1;
            r->n_tnames++;
        }
        return 0;
    }
    int s = str_is(r, ph, "s"), f = str_is(r, ph, "f");
    if (s || f || str_is(r, ph, "t")) {
        r->n_flow_ev++;
        if ((s || f) && r->ev.cat.type == KV_STR && r->ev.cat.s == xsp_kj_id(r, S_FWDBWD)) {
            if (check_id(r, &r->ev.id, "id", i) || check_id(r, &r->ev.pid, "pid", i)
                || check_id(r, &r->ev.tid, "tid", i))
                return -1;
            if (r->ev.ts.status != KT_OK)
                return 0;                       /* a flow end without a usable time: unused */
            if (grow((void **)&r->flows, &r->cap_flows, r->n_flows, sizeof *r->flows))
                return nomem(r);
            kj_flow *fl = &r->flows[r->n_flows];
            *fl = (kj_flow){.ts = r->ev.ts.ns, .id = key_of(r, &r->ev.id),
                            .pid = key_of(r, &r->ev.pid), .tid = key_of(r, &r->ev.tid),
                            .start = (uint8_t)s};
            if (fl->id == UINT32_MAX || fl->pid == UINT32_MAX || fl->tid == UINT32_MAX)
                return -1;
            r->n_flows++;
        }
        return 0;
    }
    r->skipped++;
    return 0;
}

static void begin_event(xsp_kjson *r)
{
    memset(&r->ev, 0, sizeof r->ev);
    r->ev_attr0 = r->t->n_attrs;
    r->n_args = 0;
    r->n_events++;
}

/* -- the token dispatch ---------------------------------------------------------------------- */

/* A value begins (a scalar k, or a container when k is NULL and type is KV_ARRAY/KV_OBJECT)
 * in the container the parser is in.  For a container, *push is set to what it will be. */
static int value(xsp_kjson *r, int type, const tok *k, int *push)
{
    int in = r->depth ? r->ctx[r->depth - 1] : 0;
    *push = C_SKIP;
    switch (in) {
    case 0:
        if (type != KV_OBJECT)
            return xsp_kj_fail(r, -1, -1,
                               "not a Kineto trace: no traceEvents list at the top level");
        r->seen_top = 1;
        *push = C_TOP;
        return 0;
    case C_TOP:
        if (r->top_key == TK_EVENTS) {
            if (type != KV_ARRAY)
                return xsp_kj_fail(r, -1, -1, "not a Kineto trace: traceEvents is a %s, not a "
                                   "list", xsp_kj_type_name(type));
            if (r->seen_events)
                return xsp_kj_fail(r, -1, here(r) - 1, "traceEvents is given twice");
            r->seen_events = 1;
            *push = C_EVENTS;
        } else if (r->top_key == TK_DIST && type == KV_OBJECT) {
            *push = C_DIST;
        } else if (r->top_key != TK_OTHER && k) {
            return to_val(r, k, &r->top[r->top_key]);
        }
        return 0;
    case C_DIST:
        if (r->dist_key != DK_OTHER && k)
            return to_val(r, k, &r->dist[r->dist_key]);
        return 0;
    case C_EVENTS:
        if (type != KV_OBJECT)
            return xsp_kj_fail(r, (int64_t)r->n_events, -1, "not an object but %s",
                               xsp_kj_type_name(type));
        begin_event(r);
        *push = C_EVENT;
        return 0;
    case C_EVENT: {
        kj_val *v = NULL;
        switch (r->ev_key) {
        case EK_PH: v = &r->ev.ph; break;
        case EK_NAME: v = &r->ev.name; break;
        case EK_CAT: v = &r->ev.cat; break;
        case EK_PID: v = &r->ev.pid; break;
        case EK_TID: v = &r->ev.tid; break;
        case EK_ID: v = &r->ev.id; break;
        case EK_TS:
        case EK_DUR: {
            tok t = k ? *k : (tok){.type = type};
            to_time(&t, r->ev_key == EK_TS ? &r->ev.ts : &r->ev.dur);
            return 0;
        }
        case EK_ARGS:
            r->ev.args = (uint8_t)type;
            r->t->n_attrs = r->ev_attr0;        /* a second args object replaces the first */
            r->n_args = 0;
            if (type == KV_OBJECT) {
                *push = C_ARGS;
            }
            return 0;
        default:
            return 0;
        }
        if (k)
            return to_val(r, k, v);
        memset(v, 0, sizeof *v);
        v->type = (uint8_t)type;
        return 0;
    }
    case C_ARGS:
        if (k)
            return arg_scalar(r, k);
        r->buf_len = 0;
        if (put(r, type == KV_ARRAY ? "[" : "{", 1))
            return -1;
        *push = type == KV_ARRAY ? C_JARR : C_JMAP;
        return 0;
    case C_JARR:
    case C_JMAP:
        if (k)
            return json_scalar(r, k);
        if (in == C_JARR && json_sep(r))
            return -1;
        if (put(r, type == KV_ARRAY ? "[" : "{", 1))
            return -1;
        *push = type == KV_ARRAY ? C_JARR : C_JMAP;
        return 0;
    default:
        return 0;
    }
}

static int cb_scalar(xsp_kjson *r, const tok *k)
{
    int push;
    return value(r, k->type, k, &push) ? 0 : 1;
}

static int cb_null(void *ctx)
{
    return cb_scalar(ctx, &(tok){.type = KV_NULL});
}

static int cb_bool(void *ctx, int b)
{
    return cb_scalar(ctx, &(tok){.type = KV_BOOL, .i = !!b});
}

static int cb_number(void *ctx, const char *s, size_t n)
{
    return cb_scalar(ctx, &(tok){.type = is_integer(s, n) ? KV_INT : KV_NUM, .s = s, .n = n});
}

static int cb_string(void *ctx, const unsigned char *s, size_t n)
{
    return cb_scalar(ctx, &(tok){.type = KV_STR, .s = (const char *)s, .n = n});
}

static int open_container(xsp_kjson *r, int type)
{
    int push;
    if (value(r, type, NULL, &push))
        return 0;
    if (r->depth >= XSP_KJSON_MAX_DEPTH) {
        xsp_kj_fail(r, -1, here(r) - 1, "nested more than %d levels deep",  /* at its bracket */
                    XSP_KJSON_MAX_DEPTH);
        return 0;
    }
    r->ctx[r->depth] = (uint8_t)push;
    r->jfirst[r->depth] = 1;
    r->depth++;
    return 1;
}

static int cb_start_map(void *ctx)
{
    return open_container(ctx, KV_OBJECT);
}

static int cb_start_array(void *ctx)
{
    return open_container(ctx, KV_ARRAY);
}

static int close_container(xsp_kjson *r)
{
    int c = r->ctx[--r->depth];
    int in = r->depth ? r->ctx[r->depth - 1] : 0;
    switch (c) {
    case C_EVENT:
        return end_event(r) ? 0 : 1;
    case C_TOP:
        if (!r->seen_events) {
            xsp_kj_fail(r, -1, -1, "not a Kineto trace: no traceEvents list at the top level");
            return 0;
        }
        return 1;
    case C_JARR:
    case C_JMAP:
        if (put(r, c == C_JARR ? "]" : "}", 1))
            return 0;
        return in == C_ARGS ? (arg_json_done(r) ? 0 : 1) : 1;
    default:
        return 1;
    }
}

static int cb_end(void *ctx)
{
    return close_container(ctx);
}

static int key_is(const unsigned char *s, size_t n, const char *lit)
{
    return n == strlen(lit) && memcmp(s, lit, n) == 0;
}

static int cb_map_key(void *ctx, const unsigned char *s, size_t n)
{
    xsp_kjson *r = ctx;
    switch (r->ctx[r->depth - 1]) {
    case C_TOP: {
        static const char *const names[TK_N] = {
            [TK_EVENTS] = "traceEvents", [TK_BASE] = "baseTimeNanoseconds",
            [TK_DIST] = "distributedInfo", [TK_TRACE_ID] = "trace_id",
            [TK_HOST] = "host_name", [TK_TRACE_NAME] = "traceName",
            [TK_SCHEMA] = "schemaVersion", [TK_TIME_UNIT] = "displayTimeUnit"};
        r->top_key = TK_OTHER;
        for (int k = 1; k < TK_N; k++)
            if (key_is(s, n, names[k]))
                r->top_key = k;
        return 1;
    }
    case C_DIST:
        r->dist_key = key_is(s, n, "rank") ? DK_RANK : key_is(s, n, "world_size") ? DK_WORLD
                    : key_is(s, n, "backend") ? DK_BACKEND : DK_OTHER;
        return 1;
    case C_EVENT: {
        static const char *const names[] = {NULL, "ph", "name", "cat", "ts", "dur", "pid",
                                            "tid", "id", "args"};
        r->ev_key = EK_OTHER;
        for (int k = 1; k <= EK_ARGS; k++)
            if (key_is(s, n, names[k]))
                r->ev_key = k;
        return 1;
    }
    case C_ARGS:
        r->arg_is_name = key_is(s, n, "name");
        r->arg_key = xsp_strtab_intern(&r->keys, (const char *)s, n);
        return r->arg_key == UINT32_MAX ? (nomem(r), 0) : 1;
    case C_JMAP: {
        int d = r->depth - 1;
        if (!r->jfirst[d] && put(r, ", ", 2))
            return 0;
        r->jfirst[d] = 0;
        return put_json_string(r, s, n) || put(r, ": ", 2) ? 0 : 1;
    }
    default:
        return 1;
    }
}

static const yajl_callbacks CALLBACKS = {
    .yajl_null = cb_null,
    .yajl_boolean = cb_bool,
    .yajl_number = cb_number,
    .yajl_string = cb_string,
    .yajl_start_map = cb_start_map,
    .yajl_map_key = cb_map_key,
    .yajl_end_map = cb_end,
    .yajl_start_array = cb_start_array,
    .yajl_end_array = cb_end,
};

/* -- the interface --------------------------------------------------------------------------- */

xsp_kjson *xsp_kjson_new(void)
{
    xsp_kjson *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->region = -1;
    r->err.event = r->err.offset = -1;
    r->t = xsp_trace_new();
    if (!r->t || xsp_strtab_init(&r->keys) != 0)
        goto fail;
    memset(r->id, 0xff, sizeof r->id);
    r->c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    r->h = yajl_alloc(&CALLBACKS, NULL, r);
    if (!r->h)
        goto fail;
    return r;
fail:
    xsp_kjson_free(r);
    return NULL;
}

void xsp_kjson_free(xsp_kjson *r)
{
    if (!r)
        return;
    if (r->h)
        yajl_free(r->h);
    xsp_trace_free(r->t);
    xsp_strtab_free(&r->keys);
    if (r->c_locale)
        freelocale(r->c_locale);
    free(r->recs);
    free(r->flows);
    free(r->tnames);
    free(r->buf);
    free(r);
}

const xsp_kjson_error *xsp_kjson_err(const xsp_kjson *r)
{
    return &r->err;
}

/* The length of the valid UTF-8 sequence at s[0..n), or 0 when s does not start one. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t len = s[0] < 0x80 ? 1 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : s[0] >= 0xe0 && s[0] < 0xf0
               ? 3 : s[0] >= 0xf0 && s[0] < 0xf5 ? 4 : 0;
    if (len == 0 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((len == 3 && s[0] == 0xe0 && s[1] < 0xa0) || (len == 3 && s[0] == 0xed && s[1] >= 0xa0)
        || (len == 4 && s[0] == 0xf0 && s[1] < 0x90) || (len == 4 && s[0] == 0xf4 && s[1] >= 0x90))
        return 0;
    return len;
}

/* yajl reports a string that is not UTF-8 where the string ends: the offset of its first
 * bad byte, when that lies in buf (the chunk being parsed; end: yajl's position in it). */
static int64_t bad_utf8(const xsp_kjson *r, const unsigned char *buf, size_t end)
{
    size_t a = end;
    while (a > 0 && buf[a - 1] != '"')          /* back to the closing quote ... */
        a--;
    if (a > 0)
        a--;
    while (a > 0 && buf[a - 1] != '"')          /* ... and to the opening one */
        a--;
    for (size_t i = a; i < end;) {
        size_t l = utf8_len(buf + i, end - i);
        if (l == 0)
            return (int64_t)(r->fed + i);
        i += l;
    }
    return (int64_t)(r->fed + end);
}

/* yajl's status after a parse call: 0, or -1 with the error set (syntax errors located). */
static int status(xsp_kjson *r, yajl_status st, const unsigned char *buf, size_t len)
{
    if (st == yajl_status_ok)
        return 0;
    if (st == yajl_status_client_canceled || r->err.msg[0]) {
        if (!r->err.msg[0])
            xsp_kj_fail(r, -1, here(r), "stopped");
        return -1;
    }
    unsigned char *e = yajl_get_error(r->h, 0, buf, len);
    const char *msg = e ? (const char *)e : "malformed";
    size_t ml = strlen(msg);
    while (ml && (msg[ml - 1] == '\n' || msg[ml - 1] == ' '))      /* yajl ends it in "\n" */
        ml--;
    int64_t off = here(r) - (yajl_get_bytes_consumed(r->h) > 0);    /* the offending byte */
    if (strstr(msg, "UTF8"))
        xsp_kj_fail(r, -1, bad_utf8(r, buf, yajl_get_bytes_consumed(r->h)), "not UTF-8");
    else if (strstr(msg, "premature EOF"))
        xsp_kj_fail(r, -1, off, "malformed JSON: the text ends inside a value");
    else
        xsp_kj_fail(r, -1, off, "malformed JSON: %.*s", (int)ml, msg);
    if (e)
        yajl_free_error(r->h, e);
    return -1;
}

int xsp_kjson_feed(xsp_kjson *r, const void *buf, size_t len)
{
    if (!r->h || r->err.msg[0])
        return xsp_kj_fail(r, -1, -1, "the reader is spent");
    /* Runs of whitespace between tokens go to yajl as their first byte only (a run still
     * separates two numbers): a file padded with gigabytes of blanks costs this scan, not
     * yajl's lexer.  The scan follows strings (quotes and backslash escapes) across chunks,
     * so blanks inside a string are never touched; offsets still count every byte. */
    const unsigned char *p = buf, *end = p + len, *seg = p;
    while (p < end) {
        unsigned char c = *p;
        if (r->scan_escape) {
            r->scan_escape = 0;
        } else if (r->scan_in_string) {
            if (c == '\\')
                r->scan_escape = 1;
            else if (c == '"')
                r->scan_in_string = 0;
        } else if (c == '"') {
            r->scan_in_string = 1;
        } else if ((c == ' ' || c == '\n' || c == '\r' || c == '\t') && end - p > 1
                   && (p[1] == ' ' || p[1] == '\n' || p[1] == '\r' || p[1] == '\t')) {
            const unsigned char *q = p + 1;
            while (q < end && (*q == ' ' || *q == '\n' || *q == '\r' || *q == '\t'))
                q++;
            if (q - p >= 64) {                  /* feed up to and with the first blank */
                if (status(r, yajl_parse(r->h, seg, (size_t)(p + 1 - seg)), seg,
                           (size_t)(p + 1 - seg)))
                    return -1;
                r->fed += (uint64_t)(q - seg);
                seg = q;
            }
            p = q;
            continue;
        }
        p++;
    }
    if (seg < end) {
        int rc = status(r, yajl_parse(r->h, seg, (size_t)(end - seg)), seg, (size_t)(end - seg));
        r->fed += (uint64_t)(end - seg);
        return rc;
    }
    return 0;
}

xsp_trace *xsp_kjson_finish(xsp_kjson *r)
{
    if (!r->h || r->err.msg[0]) {
        xsp_kj_fail(r, -1, -1, "the reader is spent");
        return NULL;
    }
    yajl_status st = yajl_complete_parse(r->h);
    /* bytes consumed now count from the last chunk's start: the text's end is r->fed */
    if (st != yajl_status_ok && st != yajl_status_client_canceled && !r->err.msg[0]) {
        if (!r->seen_top)
            xsp_kj_fail(r, -1, (int64_t)r->fed, "malformed JSON: no value");
        else
            xsp_kj_fail(r, -1, (int64_t)r->fed, "malformed JSON: the text ends inside a value");
    }
    yajl_free(r->h);
    r->h = NULL;
    if (r->err.msg[0] || st != yajl_status_ok) {
        if (!r->err.msg[0])
            xsp_kj_fail(r, -1, -1, "malformed JSON");
        return NULL;
    }
    return xsp_kj_build(r);
}
