/*
 * test_jsonw.c: the JSON text writer of the exporters (csrc/io/jsonw.h), plain and under ASan +
 * UBSan: every byte 0-255 in a string, invalid UTF-8 (each byte that is not part of a
 * well-formed sequence as '?', as the Python writers wrote the lone surrogates of
 * surrogateescape), doubles as Python's repr, NaN and the infinities as strings, int64 and
 * uint64 extremes, exact microseconds from ns (negative and past 2**64), a text longer than
 * the buffer, gzip that inflates back, and a failed write reported by close.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "io/jsonw.h"

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

int main(void)
{
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
