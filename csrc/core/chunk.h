/*
 * chunk.h: the memory of the recorder's full-size chunks, log and records alike (tbuf.h):
 * each chunk is its own anonymous mapping, unmapped when it is freed.
 *
 * Why not malloc: stop gives the event log back chunk by chunk while it builds the trace
 * (replay.c, merge.c), so that the trace takes the log's place instead of coming on top of it,
 * and that only works if a freed chunk leaves the process's resident memory at once.  glibc
 * serves blocks of a chunk's size (192 KiB) from mmap only until the first such block is
 * freed; its dynamic mmap threshold then rises past them and later ones come from the heap,
 * where a freed block stays resident until the top of the heap is trimmed (rarely: the trace's
 * arrays are mapped separately and cannot reuse it).  munmap takes a chunk's pages out of RSS
 * in the call.  The cost is a system call per chunk (4096 spans) on the recorder's slow path,
 * where malloc made the same call for the session's first chunks anyway.
 *
 * The pool's chunks (recorder.c) are not made here: the pool is one block kept between
 * sessions, and its chunks are never freed one by one.
 */
#ifndef XSP_CHUNK_H
#define XSP_CHUNK_H

#include <stdint.h>

/* Maps a new chunk of XSP_LOG_BYTES (tbuf.h) zeroed bytes.  Returns it, or NULL when the
 * kernel refuses the mapping.  Thread-safe. */
void *xsp_chunk_new(void);

/* Unmaps a chunk that xsp_chunk_new returned; its pages leave the process's RSS.  Accepts
 * NULL.  Thread-safe; cannot fail (a refused munmap, which only an invalid argument causes,
 * leaves the mapping in place and is counted as freed). */
void xsp_chunk_free(void *c);

/* Chunks mapped and not yet freed in this process: a test's view of when stop gives the log
 * back (never read on the recording path).  Thread-safe; cannot fail. */
uint64_t xsp_chunk_live(void);

#endif
