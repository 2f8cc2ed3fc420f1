/*
 * bench_core.c: the C core's hot path alone: ns per begin/end pair, the clock read, and the
 * stop-time merge per span, with no torch and no Python.  Built and run by `make bench`.
 *
 *   op entry    one xsp_rec_begin_l + xsp_rec_end_l with a stable NUL-terminated name at a
 *               fixed address: what the torch shim calls for an aten op (the fast paths)
 *   general     one xsp_rec_begin + xsp_rec_end, same name: what the module wrapper and
 *               Python call (the slow paths: the name's bytes compared, every check made)
 *               both one thread, with a pool that holds the round (round 1 includes the
 *               page faults of the pool)
 *   clock       xsp_clock_ticks() (rdtsc where the kernel's clocksource is the TSC)
 *   stop        xsp_rec_stop: the merge into one trace, per span
 *   G hooks     the op entry in a session with span hooks installed, as level G installs
 *               them (the CUPTI external-id push and pop; here they only count): the path
 *               every op takes in a G session, without CUPTI's own cost, in its own session
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/recorder.h"

static volatile uint64_t g_pushes, g_pops;

static __attribute__((noinline)) void count_push(uint64_t ext_id)
{
    g_pushes += ext_id != 0;
}

static __attribute__((noinline)) void count_pop(void)
{
    g_pops++;
}

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1000000;
    const char *name = "aten::add";
    char err[256];
    printf("xsp core hot path, %d spans per round (clock: %s)\n", n,
           (xsp_clock_init(), xsp_clock_tsc) ? "TSC" : "CLOCK_MONOTONIC");
    for (int r = 1; r <= 5; r++) {
        /* a pool that holds both loops' events: the hot path alone, without the page faults
         * of chunks malloc'd past the pool (round 1 still faults the pool in; the docs give
         * the figures with the default 4 MiB pool too) */
        xsp_config cfg = {.max_bytes = 1ull << 31, .pool_bytes = (uint64_t)n * 2 * 48 + (1u << 20)};
        if (xsp_rec_start(&cfg, err, sizeof err) != 0)
            return fprintf(stderr, "%s\n", err), 1;
        double ta = now_ns();
        for (int i = 0; i < n; i++) {
            xsp_rec_begin_l(XSP_KIND_OP, name, (uint64_t)i, 5, 1);
            xsp_rec_end_l((uint64_t)i);
        }
        double t0 = now_ns();
        for (int i = 0; i < n; i++) {
            xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_OP, name, XSP_NAME_NUL, NULL, 0,
                          (uint64_t)(n + i), 5, 1);
            xsp_rec_end((uint64_t)(n + i), 0);
        }
        double t1 = now_ns();
        volatile uint64_t sink = 0;
        for (int i = 0; i < n; i++)
            sink += xsp_clock_ticks();
        double t2 = now_ns();
        xsp_trace *t = NULL;
        if (xsp_rec_stop(&t, NULL, err, sizeof err) != 0)
            return fprintf(stderr, "%s\n", err), 1;
        double t3 = now_ns();
        xsp_trace_free(t);
        (void)sink;

        const xsp_span_hooks hooks = {count_push, count_pop};
        if (xsp_rec_set_hooks(&hooks) != 0 || xsp_rec_start(&cfg, err, sizeof err) != 0)
            return fprintf(stderr, "hooks: %s\n", err), 1;
        g_pushes = g_pops = 0;
        double t4 = now_ns();
        for (int i = 0; i < n; i++) {
            xsp_rec_begin_l(XSP_KIND_OP, name, (uint64_t)i, 5, 1);
            xsp_rec_end_l((uint64_t)i);
        }
        double t5 = now_ns();
        if (xsp_rec_stop(&t, NULL, err, sizeof err) != 0)
            return fprintf(stderr, "%s\n", err), 1;
        xsp_rec_set_hooks(NULL);
        if (g_pushes != (uint64_t)n || g_pops != (uint64_t)n || t->n_spans != (uint64_t)n)
            return fprintf(stderr, "hooks: %llu pushes, %llu pops, %llu spans for %d ops\n",
                           (unsigned long long)g_pushes, (unsigned long long)g_pops,
                           (unsigned long long)t->n_spans, n), 1;
        xsp_trace_free(t);
        printf("round %d: op entry %.1f ns/pair, general %.1f ns/pair, clock %.1f ns/read, "
               "stop %.1f ns/span, op entry with G hooks %.1f ns/pair\n", r, (t0 - ta) / n,
               (t1 - t0) / n, (t2 - t1) / n, (t3 - t2) / (2.0 * n), (t5 - t4) / n);
    }
    return 0;
}
