/* clock.c: TSC detection, calibration and the fake clock behind clock.h. */
#include "clock.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Atomic uint64_t xsp_fake_step = 0;  /* written by tests only; read on every reading */
_Atomic uint64_t xsp_fake_now = 0;   /* advanced atomically by each fake reading */
_Atomic uint64_t xsp_fake_signal_at = 0;  /* armed by tests; cleared by the reading that fires */
static _Atomic int g_fake_signum = 0;     /* the signal it raises; written before it is armed */
int xsp_clock_tsc = 0;               /* written once under g_once, before any session */
_Atomic int xsp_clock_rdtsc = 0;     /* xsp_clock_tsc && no fake clock; see set_rdtsc */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static uint64_t g_anchor_ticks;      /* TSC at init; written once under g_once */
static uint64_t g_anchor_ns;         /* CLOCK_MONOTONIC at init; written once under g_once */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Reads the TSC between two CLOCK_MONOTONIC readings; *ns is their midpoint. */
static uint64_t pair(uint64_t *ns)
{
#if defined(__x86_64__)
    uint64_t a = mono_ns();
    uint64_t t = __rdtsc();
    uint64_t b = mono_ns();
    *ns = a + (b - a) / 2;
    return t;
#else
    *ns = mono_ns();
    return *ns;
#endif
}

static void init_once(void)
{
#if defined(__x86_64__)
    char buf[32] = {0};
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (f) {
        if (fgets(buf, sizeof buf, f) && strncmp(buf, "tsc", 3) == 0 && (buf[3] == '\n' || !buf[3]))
            xsp_clock_tsc = 1;
        fclose(f);
    }
    const char *env = getenv("XSP_CLOCK");   /* XSP_CLOCK=monotonic: never use the TSC */
    if (env && strcmp(env, "monotonic") == 0)
        xsp_clock_tsc = 0;
#endif
    g_anchor_ticks = pair(&g_anchor_ns);
    atomic_store(&xsp_clock_rdtsc, xsp_clock_tsc && atomic_load(&xsp_fake_step) == 0);
}

void xsp_clock_init(void)
{
    pthread_once(&g_once, init_once);
}

xsp_clock_map xsp_clock_calibrate(void)
{
    xsp_clock_map m = {0, 0, 0.0};
    xsp_clock_init();
    if (!xsp_clock_tsc || atomic_load(&xsp_fake_step) != 0)
        return m;
    uint64_t ns;
    uint64_t t = pair(&ns);
    if (t <= g_anchor_ticks || ns <= g_anchor_ns)
        return (xsp_clock_map){g_anchor_ticks, g_anchor_ns, 1.0};
    m.t0 = g_anchor_ticks;
    m.ns0 = g_anchor_ns;
    m.ns_per_tick = (double)(ns - g_anchor_ns) / (double)(t - g_anchor_ticks);
    return m;
}

__attribute__((noinline)) uint64_t xsp_clock_ns_call(void)
{
    return xsp_clock_ns();
}

uint64_t xsp_clock_fake_next(uint64_t step)
{
    uint64_t v = atomic_fetch_add_explicit(&xsp_fake_now, step, memory_order_relaxed);
    uint64_t at = atomic_load_explicit(&xsp_fake_signal_at, memory_order_acquire);
    /* the exchange makes it once, whichever thread reads the armed value */
    if (__builtin_expect(at != 0 && at == v, 0)
        && atomic_compare_exchange_strong(&xsp_fake_signal_at, &at, 0))
        raise(atomic_load(&g_fake_signum));
    return v;
}

void xsp_clock_fake_signal(uint64_t at, int signum)
{
    atomic_store(&xsp_fake_signal_at, 0);
    atomic_store(&g_fake_signum, signum);
    atomic_store(&xsp_fake_signal_at, at);
}

void xsp_clock_set_fake(uint64_t start, uint64_t step)
{
    xsp_clock_init();
    atomic_store(&xsp_fake_signal_at, 0);
    atomic_store(&xsp_clock_rdtsc, 0);
    atomic_store(&xsp_fake_step, 0);
    atomic_store(&xsp_fake_now, start);
    atomic_store(&xsp_fake_step, step);
    atomic_store(&xsp_clock_rdtsc, xsp_clock_tsc && step == 0);
}
