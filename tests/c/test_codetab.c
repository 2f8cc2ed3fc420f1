/*
 * test_codetab.c: the code-object table of the binding's hooks (csrc/python/codetab.h) with
 * stand-in keys (addresses of a static array): indexes stay stable in insertion order through
 * the slot and entry growths, a key with a colliding hash is told apart by the caller's
 * compare, a reset empties the table but leaves the old entries readable (what the Python
 * types' tp_clear relies on), and a table is reusable after a reset.
 */
#include <stdint.h>

#include "check.h"
#include "python/codetab.h"

typedef struct {
    const void *code;   /* the key */
    int offset;         /* the key */
    uint32_t value;     /* the caller's payload */
} ent;

static char objs[5000];   /* distinct addresses standing for code objects */

/* The index of (code, offset) in t, added with value when new (-1 when it cannot be). */
static int64_t find_or_add(xsp_codetab *t, const void *code, int offset, uint32_t value,
                           int *added)
{
    uint64_t h = xsp_codetab_hash(code, offset, NULL);
    uint32_t j = xsp_codetab_probe(t, h);
    for (uint32_t k; (k = xsp_codetab_next(t, h, &j)) != 0;) {
        const ent *e = xsp_codetab_at(t, k - 1);
        if (e->code == code && e->offset == offset) {
            *added = 0;
            return k - 1;
        }
    }
    *added = 1;
    ent e = {.code = code, .offset = offset, .value = value};
    return xsp_codetab_add(t, j, h, &e);
}

static void test_growth_keeps_indexes(void)
{
    xsp_codetab t;
    CHECK(xsp_codetab_init(&t, sizeof(ent), 4, 2) == 0);
    int added, ok = 1;
    for (uint32_t i = 0; i < 5000; i++)
        ok &= find_or_add(&t, &objs[i], 7, i, &added) == i && added;
    CHECK(ok);
    CHECK_EQ_U(t.n, 5000);
    CHECK((uint64_t)t.mask + 1 >= 2 * (uint64_t)t.n + 1);   /* at most half full */
    ok = 1;
    for (uint32_t i = 0; i < 5000; i++) {   /* found again, not added */
        int64_t k = find_or_add(&t, &objs[i], 7, 0, &added);
        ok &= k == i && !added && ((ent *)xsp_codetab_at(&t, (uint32_t)k))->value == i;
    }
    CHECK(ok);
    /* the same code at another offset is another key */
    CHECK(find_or_add(&t, &objs[3], 8, 99, &added) == 5000 && added);
    xsp_codetab_free(&t);
    CHECK(t.slots == NULL && t.n == 0);
    xsp_codetab_free(&t);   /* twice: a freed table is an empty one */
    xsp_codetab_free(NULL);
}

/* Two keys whose hashes are equal: the probe offers both, the compare picks. */
static void test_equal_hashes(void)
{
    xsp_codetab t;
    CHECK(xsp_codetab_init(&t, sizeof(ent), 8, 4) == 0);
    ent a = {.code = &objs[0], .offset = 1, .value = 10};
    ent b = {.code = &objs[1], .offset = 2, .value = 20};
    uint64_t h = 42;
    uint32_t j = xsp_codetab_probe(&t, h);
    CHECK(xsp_codetab_next(&t, h, &j) == 0);
    CHECK(xsp_codetab_add(&t, j, h, &a) == 0);
    j = xsp_codetab_probe(&t, h);
    CHECK_EQ_U(xsp_codetab_next(&t, h, &j), 1);
    CHECK(xsp_codetab_next(&t, h, &j) == 0);
    CHECK(xsp_codetab_add(&t, j, h, &b) == 1);
    j = xsp_codetab_probe(&t, h);
    uint32_t k1 = xsp_codetab_next(&t, h, &j), k2 = xsp_codetab_next(&t, h, &j);
    CHECK(k1 == 1 && k2 == 2 && xsp_codetab_next(&t, h, &j) == 0);
    j = xsp_codetab_probe(&t, 43);   /* another hash: neither is offered */
    for (uint32_t k; (k = xsp_codetab_next(&t, 43, &j)) != 0;)
        CHECK(0);
    xsp_codetab_free(&t);
}

static void test_reset(void)
{
    xsp_codetab t;
    CHECK(xsp_codetab_init(&t, sizeof(ent), 16, 4) == 0);
    int added;
    for (uint32_t i = 0; i < 20; i++)
        find_or_add(&t, &objs[i], 0, i + 100, &added);
    uint32_t n = t.n;
    xsp_codetab_reset(&t);
    CHECK(t.n == 0 && n == 20);
    uint64_t h = xsp_codetab_hash(&objs[5], 0, NULL);
    uint32_t j = xsp_codetab_probe(&t, h);
    CHECK(xsp_codetab_next(&t, h, &j) == 0);            /* looks empty ... */
    CHECK_EQ_U(((ent *)xsp_codetab_at(&t, 5))->value, 105);   /* ... entries still readable */
    CHECK(find_or_add(&t, &objs[7], 0, 1, &added) == 0 && added);   /* reusable */
    xsp_codetab_free(&t);
}

int main(void)
{
    test_growth_keeps_indexes();
    test_equal_hashes();
    test_reset();
    return CHECK_DONE();
}
