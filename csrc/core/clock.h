/*
 * clock.h: the session clock, monotonic nanoseconds.
 *
 * Every span of a trace, CPU or GPU, is stamped with this clock (CUPTI is told to use it), so
 * one timeline needs no skew correction.  The real clock is CLOCK_MONOTONIC through the vDSO.
 * Tests install a fake clock that advances by a fixed step per reading, which makes durations
 * exact and reproducible; it is process-global and meant for tests only.
 */
#ifndef XSP_CLOCK_H
#define XSP_CLOCK_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

extern _Atomic uint64_t xsp_fake_step;  /* 0 = real clock; else fake clock step in ns */
extern _Atomic uint64_t xsp_fake_now;   /* next fake reading */

/* Returns the current time in ns. Cannot fail; thread-safe; no allocation. */
static inline uint64_t xsp_clock_now(void)
{
    uint64_t step = atomic_load_explicit(&xsp_fake_step, memory_order_relaxed);
    if (__builtin_expect(step != 0, 0))
        return atomic_fetch_add_explicit(&xsp_fake_now, step, memory_order_relaxed);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Installs a fake clock whose next reading is start and which advances by step ns per reading;
 * step 0 restores the real clock.  Cannot fail. */
void xsp_clock_set_fake(uint64_t start, uint64_t step);

#endif
