/* clock.c: the fake-clock state behind clock.h (the real clock is inline there). */
#include "clock.h"

_Atomic uint64_t xsp_fake_step = 0;  /* written by tests only; read on every reading */
_Atomic uint64_t xsp_fake_now = 0;   /* advanced atomically by each fake reading */

void xsp_clock_set_fake(uint64_t start, uint64_t step)
{
    atomic_store(&xsp_fake_step, 0);
    atomic_store(&xsp_fake_now, start);
    atomic_store(&xsp_fake_step, step);
}
