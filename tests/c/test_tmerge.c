/*
 * test_tmerge.c: xsp_trace_merge (core/tmerge.c) on small hand-made traces: the order after
 * the shift, parents and id-valued attributes renumbered, strings re-interned, the rank
 * attribute, the tracks' names, counters summed, and the errors.
 */
#include <string.h>

#include "check.h"
#include "core/tmerge.h"

static uint32_t str(xsp_trace *t, const char *s)
{
    return xsp_strtab_intern(&t->strings, s, strlen(s));
}

/* A rank's trace: region [start, start+1000] > op "mm" [start+100, start+400] (seq attr) >
 * backward "MmBackward" [start+500, start+600] with fwd_op = the op's id, and a counter. */
static xsp_trace *make(uint64_t start, const char *thread)
{
    xsp_trace *t = xsp_trace_new();
    xsp_trace_add_thread(t, 7, thread, 0);
    xsp_span r = {.start_ns = start, .end_ns = start + 1000, .parent = XSP_NO_PARENT,
                  .name = str(t, "region"), .kind = XSP_KIND_REGION};
    xsp_trace_add_span(t, &r);
    xsp_span op = {.start_ns = start + 100, .end_ns = start + 400, .parent = 0,
                   .name = str(t, "mm"), .level = XSP_LEVEL_L, .kind = XSP_KIND_OP,
                   .attr_off = t->n_attrs, .attr_n = 1};
    xsp_trace_add_attr(t, &(xsp_attr){.key = str(t, "seq"), .type = XSP_ATTR_INT, .v.i = 5});
    xsp_trace_add_span(t, &op);
    xsp_span bw = {.start_ns = start + 500, .end_ns = start + 600, .parent = 0,
                   .name = str(t, "MmBackward"), .level = XSP_LEVEL_L,
                   .kind = XSP_KIND_BACKWARD, .attr_off = t->n_attrs, .attr_n = 2};
    xsp_trace_add_attr(t, &(xsp_attr){.key = str(t, "fwd_op"), .type = XSP_ATTR_INT, .v.i = 1});
    xsp_trace_add_attr(t, &(xsp_attr){.key = str(t, "note"), .type = XSP_ATTR_STR,
                                      .v.s = str(t, "from rank")});
    xsp_trace_add_span(t, &bw);
    xsp_trace_add_counter(t, "lost.cap", 2);
    return t;
}

static const char *nm(const xsp_trace *t, uint32_t id)
{
    return xsp_strtab_get(&t->strings, id, NULL);
}

static int64_t attr_i(const xsp_trace *t, uint32_t span, const char *key)
{
    const xsp_span *s = &t->spans[span];
    for (uint32_t a = 0; a < s->attr_n; a++)
        if (strcmp(nm(t, t->attrs[s->attr_off + a].key), key) == 0)
            return t->attrs[s->attr_off + a].v.i;
    return -999;
}

int main(void)
{
    char err[256];
    xsp_trace *a = make(10000, "main"), *b = make(9000, "");
    /* rank 1's clock is 1250 ns behind at t=9000 and 1350 ns behind at t=10000 */
    xsp_merge_in in[2] = {{.trace = a, .rank = 0},
                          {.trace = b, .rank = 1, .o0 = 1250, .t0 = 9000, .o1 = 1350,
                           .t1 = 10000}};
    const char *keys[] = {"fwd_op", "api"};
    xsp_trace *m = xsp_trace_merge(in, 2, keys, 2, err, sizeof err);
    CHECK(m != NULL);
    if (!m)
        return CHECK_DONE();
    CHECK(xsp_trace_check(m, err, sizeof err) == 0);
    CHECK_EQ_U(m->n_spans, 6);
    /* rank 1's region: 9000 + 1250 = 10250; its op 9100 + 1260 = 10360; its backward
     * 9500 + 1300 = 10800: the order interleaves the ranks by shifted start */
    const char *order[6] = {"region", "mm", "region", "mm", "MmBackward", "MmBackward"};
    uint64_t starts[6] = {10000, 10100, 10250, 10360, 10500, 10800};
    for (uint32_t i = 0; i < 6; i++) {
        CHECK(strcmp(nm(m, m->spans[i].name), order[i]) == 0);
        CHECK_EQ_U(m->spans[i].start_ns, starts[i]);
    }
    CHECK_EQ_U(m->spans[2].end_ns, 10000 + 1350);         /* 10000 + offset(10000) */
    CHECK_EQ_U(m->spans[3].end_ns, 9400 + 1290);
    /* parents, ranks, tracks, renumbered fwd_op, re-interned strings */
    CHECK_EQ_U(m->spans[1].parent, 0);
    CHECK_EQ_U(m->spans[3].parent, 2);
    CHECK_EQ_U(m->spans[4].parent, 0);
    CHECK_EQ_U(m->spans[5].parent, 2);
    CHECK_EQ_U(attr_i(m, 0, "rank"), 0);
    CHECK_EQ_U(attr_i(m, 2, "rank"), 1);
    CHECK_EQ_U(attr_i(m, 4, "fwd_op"), 1);
    CHECK_EQ_U(attr_i(m, 5, "fwd_op"), 3);
    CHECK_EQ_U(attr_i(m, 3, "seq"), 5);
    CHECK_EQ_U(m->n_threads, 2);
    CHECK(strcmp(nm(m, m->threads[0].name), "rank 0: main") == 0);
    CHECK(strcmp(nm(m, m->threads[1].name), "rank 1: thread 7") == 0);
    CHECK_EQ_U(m->spans[3].thread, 1);
    CHECK_EQ_U(xsp_trace_counter(m, "lost.cap"), 4);
    CHECK_EQ_U(xsp_trace_counter(m, "merge.unlinked"), 0);
    xsp_trace_free(m);
    /* an id attribute naming no span of its trace is dropped and counted */
    b->attrs[b->spans[2].attr_off].v.i = 99;
    m = xsp_trace_merge(in, 2, keys, 2, err, sizeof err);
    CHECK(m != NULL && xsp_trace_counter(m, "merge.unlinked") == 1);
    CHECK(m != NULL && attr_i(m, 5, "fwd_op") == -999);
    xsp_trace_free(m);
    /* an offset that moves a span before 0 */
    in[1].o0 = in[1].o1 = -20000;
    CHECK(xsp_trace_merge(in, 2, keys, 2, err, sizeof err) == NULL);
    CHECK(strstr(err, "before time 0") != NULL);
    CHECK(xsp_trace_merge(in, 0, keys, 2, err, sizeof err) == NULL);
    CHECK(strcmp(err, "merge: no traces") == 0);
    xsp_trace_free(a);
    xsp_trace_free(b);
    return CHECK_DONE();
}
