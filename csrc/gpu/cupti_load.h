/*
 * cupti_load.h: libcupti reached only through dlopen/dlsym, resolved once and cached.
 *
 * Nothing here runs at import: the first xsp_cupti_open() (the first G-level session, or a
 * test) searches for the library, resolves every entry point into one function table and
 * publishes it; from then on the table is constant and read without a lock (Proton's Dispatch
 * style).  The library is never closed: CUPTI keeps threads and our callbacks alive inside it.
 *
 * Search order (the first file that dlopen accepts wins):
 *   (a) a copy already in the process: dlopen(RTLD_NOLOAD) of libcupti.so, libcupti.so.13,
 *       libcupti.so.12 -- torch's own libcupti when torch.profiler has used it, so that one
 *       process never holds two CUPTIs;
 *   (b) the file named by the environment variable XSP_CUPTI_LIB;
 *   (c) the caller's extra_dirs (the Python side passes the nvidia-cuda-cupti wheel's lib/);
 *   (d) $CUDA_HOME/extras/CUPTI/lib64 and $CUDA_HOME/lib64;
 *   (e) /usr/local/cuda/extras/CUPTI/lib64 and /usr/local/cuda/lib64.
 * In each folder the names libcupti.so, libcupti.so.13 and libcupti.so.12 are tried (the pip
 * wheels ship only the versioned name).  A failure message names every path tried and the
 * loader's error for the last one (and for the first file that exists but would not load).
 *
 * Function types are taken from the real declarations in <cupti.h> with __typeof__, so a
 * mismatch with the headers is a compile error.  Record layouts are those of CUDA 13.0
 * (CUPTI_API_VERSION 130001); CUPTI only appends fields to a record version, and the decoder
 * reads only fields that older versions (CUDA 12) already had at the same offsets.
 */
#ifndef XSP_CUPTI_LOAD_H
#define XSP_CUPTI_LOAD_H

#include <stddef.h>
#include <stdint.h>

#include <cupti.h>

#define XSP_CUPTI_MAX_EXTRA_DIRS 8    /* extra_dirs past this many are ignored */
#define XSP_CUPTI_PATH_MAX 512        /* longest candidate path; longer ones are skipped */
#define XSP_CUPTI_MAX_PATHS (1 + (XSP_CUPTI_MAX_EXTRA_DIRS + 4) * 3)

/* The resolved entry points.  Required ones are never NULL in a published table; the
 * optional ones are NULL when this libcupti lacks them. */
typedef struct xsp_cupti_fns {
    void    *handle;                  /* dlopen handle; never closed */
    uint32_t version;                 /* cuptiGetVersion() of the loaded library */
    uint32_t pad;                     /* unused */
    char     path[XSP_CUPTI_PATH_MAX];/* the file loaded, or "loaded:<name>" for case (a) */
    /* required */
    __typeof__(cuptiGetVersion)                        *GetVersion;
    __typeof__(cuptiGetResultString)                   *GetResultString;
    __typeof__(cuptiSubscribe)                         *Subscribe;
    __typeof__(cuptiUnsubscribe)                       *Unsubscribe;
    __typeof__(cuptiActivityRegisterCallbacks)         *ActivityRegisterCallbacks;
    __typeof__(cuptiActivityRegisterTimestampCallback) *ActivityRegisterTimestampCallback;
    __typeof__(cuptiActivityEnable)                    *ActivityEnable;
    __typeof__(cuptiActivityDisable)                   *ActivityDisable;
    __typeof__(cuptiActivityFlushAll)                  *ActivityFlushAll;
    __typeof__(cuptiActivityGetNextRecord)             *ActivityGetNextRecord;
    __typeof__(cuptiActivityGetNumDroppedRecords)      *ActivityGetNumDroppedRecords;
    __typeof__(cuptiActivityPushExternalCorrelationId) *ActivityPushExternalCorrelationId;
    __typeof__(cuptiActivityPopExternalCorrelationId)  *ActivityPopExternalCorrelationId;
    __typeof__(cuptiGetTimestamp)                      *GetTimestamp;
    /* optional */
    __typeof__(cuptiFinalize)                          *Finalize;        /* detach */
    __typeof__(cuptiGetCallbackName)                   *GetCallbackName; /* API names */
    __typeof__(cuptiGetThreadIdType)                   *GetThreadIdType; /* save ... */
    __typeof__(cuptiSetThreadIdType)                   *SetThreadIdType; /* ... and restore */
} xsp_cupti_fns;

/* A candidate list (exposed for tests). */
typedef struct xsp_cupti_paths {
    size_t n;                                            /* candidates used */
    char   path[XSP_CUPTI_MAX_PATHS][XSP_CUPTI_PATH_MAX];/* in search order */
} xsp_cupti_paths;

/* Finds, loads and resolves libcupti once (search order above); later calls return 0 at once
 * and ignore their arguments.  extra_dirs may be NULL when n_extra is 0; the strings are only
 * read during the call.  Returns 0, or -1 with a message in err (errlen bytes, NUL-terminated)
 * naming every path tried; nothing is cached on failure, so a later call searches again.
 * Thread-safe. */
int xsp_cupti_open(const char *const *extra_dirs, size_t n_extra, char *err, size_t errlen);

/* The published table, or NULL before a successful xsp_cupti_open.  Lock-free; cannot fail. */
const xsp_cupti_fns *xsp_cupti(void);

/* CUPTI's name for a result code ("CUPTI_ERROR_UNKNOWN"), or "CUPTI error <n>" when CUPTI is
 * not open or does not know it.  The pointer stays valid for the process.  Cannot fail. */
const char *xsp_cupti_result_name(CUptiResult r);

/* Tests: fills *out with steps (b)-(e) of the search order (not (a)), reading XSP_CUPTI_LIB
 * and CUDA_HOME now; duplicate folders appear once.  Cannot fail. */
void xsp_cupti_candidates(const char *const *extra_dirs, size_t n_extra, xsp_cupti_paths *out);

/* Tests: dlopens the candidates in order, without caching anything.  Returns the handle of the
 * first that loads (the caller owns it) and stores its index in *which (if not NULL), or
 * returns NULL with the "tried ..." message in err. */
void *xsp_cupti_try_paths(const xsp_cupti_paths *p, size_t *which, char *err, size_t errlen);

/* Tests only: makes t the published table (NULL unpublishes) and returns the previous one, so
 * that session logic can run against fake entry points.  Not thread-safe against sessions. */
const xsp_cupti_fns *xsp_cupti_swap_for_tests(const xsp_cupti_fns *t);

#endif
