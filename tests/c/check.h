/* check.h: the C tests' tiny harness.  CHECK keeps going and counts; main returns failures. */
#ifndef XSP_CHECK_H
#define XSP_CHECK_H

#include <stdio.h>

static int check_failures = 0;
static int check_count = 0;

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        check_count++;                                                                         \
        if (!(cond)) {                                                                         \
            if (check_failures++ < 20)                                                         \
                fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);       \
        }                                                                                      \
    } while (0)

#define CHECK_EQ_U(a, b)                                                                       \
    do {                                                                                       \
        unsigned long long _a = (unsigned long long)(a), _b = (unsigned long long)(b);         \
        check_count++;                                                                         \
        if (_a != _b) {                                                                        \
            if (check_failures++ < 20)                                                         \
                fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%llu != %llu)\n", __FILE__,    \
                        __LINE__, #a, #b, _a, _b);                                             \
        }                                                                                      \
    } while (0)

#define CHECK_DONE()                                                                           \
    (fprintf(stderr, "%s: %d checks, %d failed\n", __FILE__, check_count, check_failures),     \
     check_failures ? 1 : 0)

#endif
