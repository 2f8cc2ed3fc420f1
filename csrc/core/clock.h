/*
 * clock.h: the session clock.
 *
 * Recording reads "ticks", converted to nanoseconds once, at stop:
 *   - on x86-64, when the kernel itself keeps time with the TSC (clocksource "tsc", which it
 *     only does for an invariant, synchronised TSC), ticks are the TSC (one rdtsc, about 12 ns
 *     here against 29 ns for clock_gettime through the vDSO);
 *   - otherwise ticks are CLOCK_MONOTONIC nanoseconds;
 *   - tests install a fake clock (nanoseconds) that advances by a fixed step per reading, so
 *     durations are exact; a session started under the fake clock is not converted.
 * The conversion is linear, anchored at the first session's start and calibrated at each stop
 * against CLOCK_MONOTONIC, so it gets more precise the longer the process lives (for a 1 ms
 * session, the error is below 1e-4 of a duration).  CUPTI is given xsp_clock_ticks as its
 * timestamp source, so GPU records share the same ticks and the same conversion.
 */
#ifndef XSP_CLOCK_H
#define XSP_CLOCK_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

extern _Atomic uint64_t xsp_fake_step;  /* 0 = real clock; else fake clock step in ns */
extern _Atomic uint64_t xsp_fake_now;   /* next fake reading */
extern int xsp_clock_tsc;               /* 1: ticks are the TSC; set once by xsp_clock_init */
extern _Atomic int xsp_clock_rdtsc;     /* 1: a reading is one rdtsc (TSC, no fake clock): the
                                         * hot path's only test; kept by init and set_fake */

/* CLOCK_MONOTONIC in ns (or the fake clock). Cannot fail; thread-safe; no allocation. */
static inline uint64_t xsp_clock_ns(void)
{
    uint64_t step = atomic_load_explicit(&xsp_fake_step, memory_order_relaxed);
    if (__builtin_expect(step != 0, 0))
        return atomic_fetch_add_explicit(&xsp_fake_now, step, memory_order_relaxed);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* xsp_clock_ns() out of line: the hot path's rare branch, kept out of its frame. */
uint64_t xsp_clock_ns_call(void);

/* The recording clock in ticks (see above). Cannot fail; thread-safe; no allocation. */
static inline uint64_t xsp_clock_ticks(void)
{
#if defined(__x86_64__)
    if (__builtin_expect(atomic_load_explicit(&xsp_clock_rdtsc, memory_order_relaxed), 1))
        return __rdtsc();
#endif
    return xsp_clock_ns_call();
}

/* A linear map from ticks to ns: ns = ns0 + (ticks - t0) * ns_per_tick; identity when
 * ns_per_tick == 0. */
typedef struct xsp_clock_map {
    uint64_t t0;          /* anchor, ticks */
    uint64_t ns0;         /* anchor, ns */
    double ns_per_tick;   /* slope; 0 = identity (ticks already are ns) */
} xsp_clock_map;

/* Decides once per process whether ticks are the TSC and takes the anchor. Thread-safe,
 * idempotent, cannot fail (falls back to CLOCK_MONOTONIC). */
void xsp_clock_init(void);

/* The current ticks -> ns map (identity under the fake clock or without the TSC). */
xsp_clock_map xsp_clock_calibrate(void);

static inline uint64_t xsp_clock_to_ns(const xsp_clock_map *m, uint64_t ticks)
{
    if (m->ns_per_tick == 0)
        return ticks;
    return m->ns0 + (uint64_t)((double)(int64_t)(ticks - m->t0) * m->ns_per_tick);
}

/* Installs a fake clock whose next reading is start and which advances by step ns per reading;
 * step 0 restores the real clock.  Cannot fail. */
void xsp_clock_set_fake(uint64_t start, uint64_t step);

#endif
