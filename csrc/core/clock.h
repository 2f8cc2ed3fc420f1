/*
 * clock.h: the session clock.
 *
 * Recording reads "ticks", converted to nanoseconds once, at stop:
 *   - on x86-64, when the kernel itself keeps time with the TSC (clocksource "tsc", which it
 *     only does for an invariant, synchronised TSC), ticks are the TSC (one rdtsc, about 12 ns
 *     here against 29 ns for clock_gettime through the vDSO);
 *   - otherwise ticks are CLOCK_MONOTONIC nanoseconds;
 *   - tests install a fake clock (nanoseconds) that advances by a fixed step per reading, so
 *     durations are exact; a session started under the fake clock is not converted.  The
 *     fake clock also numbers the core's checkpoints (every reading is one: start, each span's
 *     begin and end, each data event, stop), and a test may arm it to raise a signal at one
 *     reading (xsp_clock_fake_signal): an asynchronous interrupt at the n-th checkpoint, from
 *     inside C code, at a moment that does not depend on the machine's speed.
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
extern _Atomic uint64_t xsp_fake_signal_at;  /* the fake reading that raises a signal; 0 none */
extern int xsp_clock_tsc;               /* 1: ticks are the TSC; set once by xsp_clock_init */
extern _Atomic int xsp_clock_rdtsc;     /* 1: a reading is one rdtsc (TSC, no fake clock): the
                                         * hot path's only test; kept by init and set_fake */

/* The fake clock's next reading (step: xsp_fake_step, nonzero), raising the armed signal first
 * when it is the armed reading (xsp_clock_fake_signal).  Cannot fail; thread-safe; no
 * allocation; async-signal-safe. */
uint64_t xsp_clock_fake_next(uint64_t step);

/* CLOCK_MONOTONIC in ns (or the fake clock). Cannot fail; thread-safe; no allocation. */
static inline uint64_t xsp_clock_ns(void)
{
    uint64_t step = atomic_load_explicit(&xsp_fake_step, memory_order_relaxed);
    if (__builtin_expect(step != 0, 0))
        return xsp_clock_fake_next(step);
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
 * step 0 restores the real clock.  Disarms xsp_clock_fake_signal.  Cannot fail. */
void xsp_clock_set_fake(uint64_t start, uint64_t step);

/* Tests only: the fake clock's reading that returns `at` first raises signal signum (raise(3):
 * in the thread that reads it, whatever it is doing, the GIL held or not), once; at 0
 * disarms.  The real clock never checks it, so the hot path is unchanged.  Cannot fail
 * (a signum that raise rejects raises nothing). */
void xsp_clock_fake_signal(uint64_t at, int signum);

#endif
