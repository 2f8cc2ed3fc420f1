/*
 * chunk.c: full-size log and record chunks as anonymous mappings (see chunk.h).
 *
 * A live count is kept with one relaxed atomic add per map and unmap: chunks are made on the
 * recorder's slow path (one per 4096 spans) and freed at stop, so it costs nothing per span.
 */
#include "chunk.h"

#include <stdatomic.h>
#include <sys/mman.h>

#include "tbuf.h"

_Static_assert(XSP_LOG_BYTES % 4096u == 0, "a chunk is whole pages (of 4 KiB, or of 16 or "
               "64 KiB, which 192 KiB also is)");

static _Atomic uint64_t g_live = 0;   /* chunks mapped and not unmapped */

void *xsp_chunk_new(void)
{
    void *c = mmap(NULL, XSP_LOG_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (c == MAP_FAILED)
        return NULL;
    atomic_fetch_add_explicit(&g_live, 1, memory_order_relaxed);
    return c;
}

void xsp_chunk_free(void *c)
{
    if (!c)
        return;
    munmap(c, XSP_LOG_BYTES);
    atomic_fetch_sub_explicit(&g_live, 1, memory_order_relaxed);
}

uint64_t xsp_chunk_live(void)
{
    return atomic_load_explicit(&g_live, memory_order_relaxed);
}
