/*
 * kjvalue.c: the values of the Kineto JSON reader (kjson.h): numbers read from their text
 * (exactly, range-checked first), the scalar fields of an event, and each arg made into an
 * attribute as it arrives (a list or object as JSON text built token by token).
 */
#include "kjson_impl.h"

#include <stdlib.h>
#include <string.h>

/* -- numbers --------------------------------------------------------------------------------- */

/* 1 when the JSON number text s[0..n) is an integer (no fraction, no exponent). */
int xsp_kj_is_integer(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] == '.' || s[i] == 'e' || s[i] == 'E')
            return 0;
    return 1;
}

/* The integer text s[0..n) (JSON syntax) as int64 in *out; 0, or -1 when it does not fit. */
int xsp_kj_parse_i64(const char *s, size_t n, int64_t *out)
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


int xsp_kj_to_val(xsp_kjson *r, const tok *k, kj_val *v)
{
    memset(v, 0, sizeof *v);
    v->type = (uint8_t)k->type;
    if (k->type == KV_BOOL)
        v->i = k->i;
    if (k->type == KV_INT && xsp_kj_parse_i64(k->s, k->n, &v->i) != 0)
        v->type = KV_NUM;
    if (v->type == KV_STR || v->type == KV_NUM) {
        v->s = xsp_kj_intern(r, k->s, k->n);
        if (v->s == UINT32_MAX)
            return -1;
    }
    return 0;
}

/* ts or dur from a token. */
void xsp_kj_to_time(const tok *k, kj_time *t)
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
    if (xsp_kj_put(r, "k.", 2) || xsp_kj_put(r, key, klen) || (json && xsp_kj_put(r, "[]", 2)))
        return -1;
    a.key = xsp_kj_intern(r, r->buf, r->buf_len);
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
        return xsp_kj_nomem(r);
    r->arg_raw[r->n_args++] = r->arg_key;
    return 0;
}

/* A scalar arg value. */
int xsp_kj_arg_scalar(xsp_kjson *r, const tok *k)
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
        if (xsp_kj_to_val(r, &t, &r->ev.tname))
            return -1;
    }
    switch (k->type) {
    case KV_BOOL:
        a.type = XSP_ATTR_INT;
        a.v.i = k->i;
        break;
    case KV_INT:
        a.type = XSP_ATTR_INT;
        if (xsp_kj_parse_i64(k->s, k->n, &a.v.i) != 0) {     /* past int64: its digits */
            a.type = XSP_ATTR_STR;
            if ((a.v.s = xsp_kj_intern(r, k->s, k->n)) == UINT32_MAX)
                return -1;
        }
        break;
    case KV_NUM:
        a.type = XSP_ATTR_FLOAT;
        a.v.f = to_double(r, k->s, k->n);
        break;
    case KV_STR:
        a.type = XSP_ATTR_STR;
        if ((a.v.s = xsp_kj_intern(r, k->s, k->n)) == UINT32_MAX)
            return -1;
        break;
    default:                                        /* null: JSON text */
        a.type = XSP_ATTR_STR;
        if ((a.v.s = xsp_kj_intern(r, "null", 4)) == UINT32_MAX)
            return -1;
        return set_arg(r, a, 1);
    }
    return set_arg(r, a, 0);
}

/* The JSON text in the scratch buffer, ended, as the value of the arg that owns it. */
int xsp_kj_arg_json_done(xsp_kjson *r)
{
    uint32_t s = xsp_kj_intern(r, r->buf, r->buf_len);
    if (s == UINT32_MAX)
        return -1;
    if (r->arg_is_name)
        r->ev.tname = (kj_val){.type = KV_STR, .s = s};
    return set_arg(r, (xsp_attr){.type = XSP_ATTR_STR, .v.s = s}, 1);
}

/* A value inside a JSON-text container: its separator first. */
int xsp_kj_json_sep(xsp_kjson *r)
{
    int d = r->depth - 1;
    if (r->ctx[d] == C_JARR && !r->jfirst[d] && xsp_kj_put(r, ", ", 2))
        return -1;
    r->jfirst[d] = 0;
    return 0;
}

int xsp_kj_json_scalar(xsp_kjson *r, const tok *k)
{
    if (r->ctx[r->depth - 1] == C_JARR && xsp_kj_json_sep(r))
        return -1;
    switch (k->type) {
    case KV_NULL: return xsp_kj_put(r, "null", 4);
    case KV_BOOL: return k->i ? xsp_kj_put(r, "true", 4) : xsp_kj_put(r, "false", 5);
    case KV_STR: return xsp_kj_put_json_string(r, (const unsigned char *)k->s, k->n);
    default: return xsp_kj_put(r, k->s, k->n);
    }
}

