/*
 * test_names.c: names longer than the format's limit (XSP_STRTAB_MAX_LEN, 65535 bytes) are cut
 * at a UTF-8 character boundary, never inside a character, and counted: the string table's
 * ncut, then the trace counter "names.cut" that a recording adds when it is nonzero.
 * Regression guard (bug: a name over the limit was cut at exactly 65535 bytes, possibly inside
 * a UTF-8 character, so Python could not print it, and nothing said it had been cut).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/recorder.h"
#include "core/strtab.h"
#include "core/trace.h"

#define MAX XSP_STRTAB_MAX_LEN

static const char EURO[] = "\xe2\x82\xac";         /* U+20AC, 3 bytes */
static const char GRIN[] = "\xf0\x9f\x98\x80";     /* U+1F600, 4 bytes */

/* A buffer of n bytes of 'a' (not NUL-terminated use), owned by the caller. */
static char *as(size_t n)
{
    char *b = malloc(n + 1);
    if (b) {
        memset(b, 'a', n);
        b[n] = '\0';
    }
    return b;
}

/* 1 if the n bytes at s are valid UTF-8 (no overlong or surrogate checks needed here). */
static int utf8_ok(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t len = u[i] < 0x80 ? 1 : (u[i] & 0xE0) == 0xC0 ? 2 : (u[i] & 0xF0) == 0xE0 ? 3
                     : (u[i] & 0xF8) == 0xF0 ? 4 : 0;
        if (!len || i + len > n)
            return 0;
        for (size_t j = 1; j < len; j++)
            if ((u[i + j] & 0xC0) != 0x80)
                return 0;
        i += len;
    }
    return 1;
}

static void test_cut_len(void)
{
    size_t n = MAX + 16;
    char *b = as(n);
    if (!b)
        return;
    CHECK_EQ_U(xsp_strtab_cut_len(b, 0), 0);
    CHECK_EQ_U(xsp_strtab_cut_len(b, MAX), MAX);           /* at the limit: kept whole */
    CHECK_EQ_U(xsp_strtab_cut_len(b, MAX + 1), MAX);       /* ASCII: cut at the limit */
    /* a 4-byte character at every position around the limit: cut before it when it would
     * straddle, at the limit when it ends at or starts at the limit */
    for (size_t at = MAX - 5; at <= MAX + 1; at++) {
        memset(b, 'a', n);
        memcpy(b + at, GRIN, 4);
        size_t want = at + 4 <= MAX || at >= MAX ? MAX : at;
        CHECK_EQ_U(xsp_strtab_cut_len(b, n), want);
        CHECK(utf8_ok(b, xsp_strtab_cut_len(b, n)));
    }
    for (size_t at = MAX - 3; at <= MAX; at++) {           /* 3 and 2 bytes */
        memset(b, 'a', n);
        memcpy(b + at, EURO, 3);
        CHECK_EQ_U(xsp_strtab_cut_len(b, n), at + 3 <= MAX || at >= MAX ? MAX : at);
        memset(b, 'a', n);
        memcpy(b + at, "\xc3\xa9", 2);
        CHECK_EQ_U(xsp_strtab_cut_len(b, n), at + 2 <= MAX || at >= MAX ? MAX : at);
    }
    /* not UTF-8 at the limit: continuation bytes only, or after an ASCII byte */
    memset(b, 0x80, n);
    CHECK_EQ_U(xsp_strtab_cut_len(b, n), MAX);
    memset(b, 'a', n);
    b[MAX] = (char)0x80;
    CHECK_EQ_U(xsp_strtab_cut_len(b, n), MAX);
    b[MAX - 1] = (char)0x80;
    CHECK_EQ_U(xsp_strtab_cut_len(b, n), MAX);
    free(b);
}

/* "a" then euros: 1 + 3k bytes, so the limit falls inside a euro (65535 = 1 + 3 * 21844 + 2). */
static char *a_then_euros(size_t n_euros, size_t *len)
{
    *len = 1 + 3 * n_euros;
    char *b = malloc(*len + 1);
    if (!b)
        return NULL;
    b[0] = 'a';
    for (size_t i = 0; i < n_euros; i++)
        memcpy(b + 1 + 3 * i, EURO, 3);
    b[*len] = '\0';
    return b;
}

static void test_intern_counts_cut_strings(void)
{
    xsp_strtab t;
    CHECK(xsp_strtab_init(&t) == 0);
    CHECK_EQ_U(t.ncut, 0);
    size_t len;
    char *b = a_then_euros(22000, &len);
    if (!b) {
        xsp_strtab_free(&t);
        return;
    }
    uint32_t id = xsp_strtab_intern(&t, b, len);
    size_t got;
    const char *s = xsp_strtab_get(&t, id, &got);
    CHECK_EQ_U(got, 1 + 3 * 21844);                       /* the straddling euro left out */
    CHECK(s && memcmp(s, b, got) == 0 && utf8_ok(s, got));
    CHECK_EQ_U(t.ncut, 1);
    CHECK_EQ_U(xsp_strtab_intern(&t, b, len), id);         /* the same name again: one count */
    CHECK_EQ_U(xsp_strtab_intern(&t, b, len - 3), id);     /* cut to the same bytes */
    CHECK_EQ_U(xsp_strtab_intern(&t, b, got), id);         /* the cut string, not cut */
    CHECK_EQ_U(t.ncut, 1);
    char *c = as(MAX + 100);
    if (c) {
        uint32_t id2 = xsp_strtab_intern(&t, c, MAX + 100);
        CHECK(id2 != id);
        CHECK_EQ_U(t.ncut, 2);
        CHECK(xsp_strtab_get(&t, id2, &got) != NULL && got == MAX);
        CHECK_EQ_U(xsp_strtab_intern(&t, c, MAX), id2);    /* exactly at the limit: no cut */
        CHECK_EQ_U(xsp_strtab_intern(&t, "short", 5), 3);
        CHECK_EQ_U(t.ncut, 2);
        free(c);
    }
    xsp_strtab_clear(&t);
    CHECK_EQ_U(t.ncut, 0);
    free(b);
    xsp_strtab_free(&t);
}

static int64_t counter_or(const xsp_trace *t, const char *key, int64_t absent)
{
    for (uint32_t i = 0; i < t->n_counters; i++)
        if (strcmp(xsp_strtab_get(&t->strings, t->counters[i].key, NULL), key) == 0)
            return t->counters[i].v.i;
    return absent;
}

typedef struct long_name_arg {
    const char *name;   /* the long name */
    size_t len;         /* its length */
} long_name_arg;

/* Records two spans with the long name and one with a short name on the calling thread. */
static void *record_long(void *p)
{
    const long_name_arg *a = p;
    uint64_t key = (uint64_t)(uintptr_t)p << 4;
    for (int i = 0; i < 2; i++) {
        xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_SCOPE, a->name, a->len, NULL, 0, key + 1, -1, 0);
        xsp_rec_end(key + 1, 0);
    }
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_OP, "aten::add", XSP_NAME_NUL, NULL, 0, key + 2, -1, 0);
    xsp_rec_end(key + 2, 0);
    return NULL;
}

static void test_recording_counts_names_cut(void)
{
    char err[256];
    size_t len;
    char *b = a_then_euros(22000, &len);
    if (!b)
        return;
    long_name_arg arg = {b, len};

    /* no long name: no counter at all (the usual counters only) */
    xsp_config cfg = {0};
    CHECK(xsp_rec_start(&cfg, err, sizeof err) == 0);
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_OP, "aten::add", XSP_NAME_NUL, NULL, 0, 1, -1, 0);
    xsp_rec_end(1, 0);
    xsp_trace *t = NULL;
    CHECK(xsp_rec_stop(&t, NULL, err, sizeof err) == 0 && t);
    if (t)
        CHECK_EQ_U(counter_or(t, "names.cut", -1), (uint64_t)-1);
    xsp_trace_free(t);

    /* one thread: the long name is cut once, at the character boundary, however often used */
    CHECK(xsp_rec_start(&cfg, err, sizeof err) == 0);
    record_long(&arg);
    t = NULL;
    CHECK(xsp_rec_stop(&t, NULL, err, sizeof err) == 0 && t);
    if (t) {
        CHECK(xsp_trace_check(t, err, sizeof err) == 0);
        CHECK_EQ_U(t->n_spans, 3);
        CHECK_EQ_U(counter_or(t, "names.cut", -1), 1);
        size_t got;
        const char *s = xsp_strtab_get(&t->strings, t->spans[0].name, &got);
        CHECK_EQ_U(got, 1 + 3 * 21844);
        CHECK(s && memcmp(s, b, got) == 0 && utf8_ok(s, got));
        CHECK_EQ_U(t->spans[1].name, t->spans[0].name);
    }
    xsp_trace_free(t);

    /* two threads: each thread's table cuts it, so it counts once per thread (documented) */
    CHECK(xsp_rec_start(&cfg, err, sizeof err) == 0);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, record_long, &arg) == 0);
    pthread_join(th, NULL);
    record_long(&arg);
    t = NULL;
    CHECK(xsp_rec_stop(&t, NULL, err, sizeof err) == 0 && t);
    if (t) {
        CHECK_EQ_U(t->n_spans, 6);
        CHECK_EQ_U(counter_or(t, "names.cut", -1), 2);
    }
    xsp_trace_free(t);

    /* the next session starts from 0 again (the thread's table is cleared, not freed) */
    CHECK(xsp_rec_start(&cfg, err, sizeof err) == 0);
    xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_OP, "aten::mul", XSP_NAME_NUL, NULL, 0, 1, -1, 0);
    xsp_rec_end(1, 0);
    t = NULL;
    CHECK(xsp_rec_stop(&t, NULL, err, sizeof err) == 0 && t);
    if (t)
        CHECK_EQ_U(counter_or(t, "names.cut", -1), (uint64_t)-1);
    xsp_trace_free(t);
    free(b);
}

int main(void)
{
    test_cut_len();
    test_intern_counts_cut_strings();
    test_recording_counts_names_cut();
    return CHECK_DONE();
}
