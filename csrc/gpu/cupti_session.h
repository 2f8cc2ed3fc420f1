/*
 * cupti_session.h: the G-level session: CUPTI activity tracing into an xsp_gpu_store.
 *
 * CUPTI is process-global and, up to CUDA 13.2, single-client, so there is at most one session
 * per process.  Start subscribes (which fails when another client, e.g. torch.profiler or
 * Nsight, holds CUPTI, and keeps a later one from silently taking our records), gives CUPTI the
 * session clock, asks for system thread ids in API records, registers the buffer callbacks and
 * enables the activity kinds.  Stop disables the kinds, flushes, collects the dropped count and
 * gives CUPTI back (unsubscribes, restores the thread-id type), so torch.profiler can run next.
 *
 * Buffers: CUPTI asks for 8 MiB buffers (8-byte aligned) from a small pool, at most
 * XSP_GPU_POOL_MAX of them; a completed buffer is decoded at once, in the completion callback
 * (xsp_gpu_decode, which locks the store once per buffer), and goes back to the pool.  When the
 * pool is exhausted the request is declined: CUPTI then drops records and counts them, and the
 * store reports both.
 *
 * External correlation: the op shim calls xsp_gpu_push(id) at an op's begin and xsp_gpu_pop()
 * at its end; CUPTI then precedes each CUDA API record made inside the op with an
 * external-correlation record {CUSTOM2, id, correlationId}.  Kineto uses CUSTOM0 and CUSTOM1.
 * Push/pop take no lock, allocate nothing (beyond the thread's TLS block on its first call)
 * and are no-ops outside a session; a per-thread depth counter keeps CUPTI's per-thread stack
 * balanced when a session starts or stops between an op's begin and its end.
 */
#ifndef XSP_CUPTI_SESSION_H
#define XSP_CUPTI_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "activity.h"

#define XSP_GPU_BUF_BYTES (8u << 20)  /* bytes per CUPTI activity buffer */
#define XSP_GPU_POOL_MAX 32u          /* most buffers alive at once (256 MiB) */

/* The clock CUPTI stamps records with: the core's session clock, CLOCK_MONOTONIC ns. */
typedef uint64_t (*xsp_gpu_clock_fn)(void);

/* Starts tracing into store (loading libcupti first if needed, with the default search).
 * clock must be a plain function (not the inline xsp_clock_ticks itself: pass a wrapper such as
 * xsp_rec_now).  Returns 0, or -1 with a message in err when a session is active, libcupti
 * cannot be loaded, another CUPTI client holds CUPTI ("another tool such as torch.profiler or
 * Nsight holds CUPTI"), there is no usable GPU ("no CUDA device or driver was found"), or any
 * CUPTI call fails (the message names the call and CUPTI's result).  On failure everything done
 * so far is undone: kinds disabled, thread-id type restored, subscription released, no store
 * registered; the timestamp and buffer callbacks stay registered with CUPTI (it has no call to
 * remove them) but are inert.  The store is not freed and must outlive the session.  Sets
 * store->tid_type, clock, cupti_version and kinds_missing (SYNCHRONIZATION and OVERHEAD are
 * optional).  Thread-safe against stop. */
int xsp_gpu_start(xsp_gpu_store *store, xsp_gpu_clock_fn clock, char *err, size_t errlen);

/* Stops the session of store.  The caller synchronises the device(s) first so that the records
 * of finished work are complete.  Disables the kinds, forces a flush (the remaining buffers are
 * decoded into store before this returns), adds CUPTI's dropped count, unregisters the store,
 * restores the thread-id type and unsubscribes.  Does not call cuptiFinalize (see
 * xsp_gpu_finalize).  Returns 0, or -1 with a message when no session is active, store is not
 * its store, or a CUPTI call failed; in the last case the session is stopped anyway and store
 * keeps what was decoded.  After it returns no CUPTI callback touches store. */
int xsp_gpu_stop(xsp_gpu_store *store, char *err, size_t errlen);

/* Returns 1 while a session is started, else 0.  Cannot fail. */
int xsp_gpu_active(void);

/* Hot path, for the op shim.  Pushes external_id (kind CUSTOM2) on the calling thread's CUPTI
 * stack when a session is active; otherwise does nothing.  No lock, no allocation, never
 * fails visibly. */
void xsp_gpu_push(uint64_t external_id);

/* Hot path.  Pops what this thread's last xsp_gpu_push pushed, if it pushed anything that is
 * still on the stack (even when the session has stopped since); otherwise does nothing. */
void xsp_gpu_pop(void);

/* Detaches CUPTI from the process (cuptiFinalize), which also drops our timestamp and buffer
 * callbacks.  Optional, and only safe when no session is active and no other thread can be
 * inside a CUDA or CUPTI call (xsp_gpu_push/pop included): NVIDIA recommends calling it from a
 * CUDA API exit callback.  Returns 0, or -1 with a message (session active, CUPTI not open, no
 * cuptiFinalize in this libcupti, or CUPTI's error). */
int xsp_gpu_finalize(char *err, size_t errlen);

/* Buffers completed while no session was registered (decoded nowhere, freed).  Debugging. */
uint64_t xsp_gpu_late_buffers(void);

#endif
