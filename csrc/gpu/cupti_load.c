/*
 * cupti_load.c: finding libcupti and resolving its entry points (see cupti_load.h).
 *
 * The table is filled in a private static, then published by a release store of its address;
 * readers (xsp_cupti()) do an acquire load and never see a half-filled table.  g_open_lock
 * serialises searches so two threads do not load two copies.  Symbols are looked up in the
 * handle we opened (dlsym(handle, ...)), never with RTLD_DEFAULT, so another library's
 * interposed cupti* symbols cannot be picked up by accident.
 *
 * Historical note: linking libcupti at build time (as Kineto does) would make importing xsp
 * fail on machines without CUDA, and would pin one CUPTI major version; the pip wheels of
 * torch bring their own libcupti.so.12, which we must share rather than load a second copy.
 */
#include "cupti_load.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const k_names[3] = {"libcupti.so", "libcupti.so.13", "libcupti.so.12"};

static pthread_mutex_t g_open_lock = PTHREAD_MUTEX_INITIALIZER; /* serialises xsp_cupti_open */
static xsp_cupti_fns g_fns;       /* the table; Protected by g_open_lock until published */
static _Atomic(const xsp_cupti_fns *) g_table; /* published table, NULL before; never reset
                                                  except by xsp_cupti_swap_for_tests */

const xsp_cupti_fns *xsp_cupti(void)
{
    return atomic_load_explicit(&g_table, memory_order_acquire);
}

const xsp_cupti_fns *xsp_cupti_swap_for_tests(const xsp_cupti_fns *t)
{
    return atomic_exchange(&g_table, t);
}

const char *xsp_cupti_result_name(CUptiResult r)
{
    static _Thread_local char buf[32];  /* fallback text, per thread */
    const xsp_cupti_fns *f = xsp_cupti();
    const char *s = NULL;
    if (f && f->GetResultString && f->GetResultString(r, &s) == CUPTI_SUCCESS && s)
        return s;
    snprintf(buf, sizeof buf, "CUPTI error %d", (int)r);
    return buf;
}

/* Appends printf-style text to err at *len, truncating silently. */
static void append(char *err, size_t errlen, size_t *len, const char *fmt, ...)
{
    if (!err || errlen == 0 || *len + 1 >= errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err + *len, errlen - *len, fmt, ap);
    va_end(ap);
    if (n > 0)
        *len = (*len + (size_t)n < errlen) ? *len + (size_t)n : errlen - 1;
}

static void add_path(xsp_cupti_paths *out, const char *dir, const char *name)
{
    if (out->n >= XSP_CUPTI_MAX_PATHS)
        return;
    int n = dir ? snprintf(out->path[out->n], XSP_CUPTI_PATH_MAX, "%s/%s", dir, name)
                : snprintf(out->path[out->n], XSP_CUPTI_PATH_MAX, "%s", name);
    if (n > 0 && n < XSP_CUPTI_PATH_MAX)
        out->n++;
}

/* Adds dir/libcupti.so{,.13,.12} unless dir is empty or already listed. */
static void add_dir(xsp_cupti_paths *out, const char *dir)
{
    if (!dir || !*dir)
        return;
    char probe[XSP_CUPTI_PATH_MAX];
    if (snprintf(probe, sizeof probe, "%s/%s", dir, k_names[0]) >= (int)sizeof probe)
        return;
    for (size_t i = 0; i < out->n; i++)
        if (strcmp(out->path[i], probe) == 0)
            return;
    for (size_t i = 0; i < 3; i++)
        add_path(out, dir, k_names[i]);
}

void xsp_cupti_candidates(const char *const *extra_dirs, size_t n_extra, xsp_cupti_paths *out)
{
    out->n = 0;
    const char *env = getenv("XSP_CUPTI_LIB");
    if (env && *env)
        add_path(out, NULL, env);
    if (n_extra > XSP_CUPTI_MAX_EXTRA_DIRS)
        n_extra = XSP_CUPTI_MAX_EXTRA_DIRS;
    for (size_t i = 0; i < n_extra && extra_dirs; i++)
        add_dir(out, extra_dirs[i]);
    const char *home = getenv("CUDA_HOME");
    if (home && *home) {
        char d[XSP_CUPTI_PATH_MAX];
        if (snprintf(d, sizeof d, "%s/extras/CUPTI/lib64", home) < (int)sizeof d)
            add_dir(out, d);
        if (snprintf(d, sizeof d, "%s/lib64", home) < (int)sizeof d)
            add_dir(out, d);
    }
    add_dir(out, "/usr/local/cuda/extras/CUPTI/lib64");
    add_dir(out, "/usr/local/cuda/lib64");
}

/* Writes the "tried: ..." list, folding dir/libcupti.so, .so.13, .so.12 into
 * dir/libcupti.so{,.13,.12}. */
static void list_paths(const xsp_cupti_paths *p, char *err, size_t errlen, size_t *len)
{
    for (size_t i = 0; i < p->n; i++) {
        const char *s = p->path[i];
        size_t l = strlen(s);
        append(err, errlen, len, "%s", i ? ", " : "");
        if (i + 2 < p->n && l > 11 && strcmp(s + l - 11, "libcupti.so") == 0 &&
            strncmp(p->path[i + 1], s, l) == 0 && strcmp(p->path[i + 1] + l, ".13") == 0 &&
            strncmp(p->path[i + 2], s, l) == 0 && strcmp(p->path[i + 2] + l, ".12") == 0) {
            append(err, errlen, len, "%s{,.13,.12}", s);
            i += 2;
        } else {
            append(err, errlen, len, "%s", s);
        }
    }
}

void *xsp_cupti_try_paths(const xsp_cupti_paths *p, size_t *which, char *err, size_t errlen)
{
    char last[256] = "no candidate paths";  /* dlerror of the last attempt */
    char found[256] = "";                   /* dlerror of the first existing file that failed */
    size_t found_at = 0;
    for (size_t i = 0; i < p->n; i++) {
        void *h = dlopen(p->path[i], RTLD_NOW | RTLD_LOCAL);
        if (h) {
            if (which)
                *which = i;
            return h;
        }
        const char *e = dlerror();
        snprintf(last, sizeof last, "%s", e ? e : "unknown dlopen error");
        if (!found[0] && access(p->path[i], F_OK) == 0) {
            snprintf(found, sizeof found, "%s", last);
            found_at = i;
        }
    }
    size_t len = 0;
    if (err && errlen)
        err[0] = '\0';
    append(err, errlen, &len, "libcupti not found (set XSP_CUPTI_LIB to its path, or install "
                              "the nvidia-cuda-cupti package); tried: ");
    list_paths(p, err, errlen, &len);
    append(err, errlen, &len, "; last error: %s", last);
    if (found[0] && strcmp(found, last) != 0)
        append(err, errlen, &len, "; %s exists but: %s", p->path[found_at], found);
    return NULL;
}

/* Resolves the table from h into f.  Returns 0, or -1 naming the missing symbol. */
static int resolve(void *h, xsp_cupti_fns *f, char *err, size_t errlen)
{
#define REQ(field, sym)                                                                        \
    do {                                                                                       \
        f->field = (__typeof__(f->field))dlsym(h, #sym);                                       \
        if (!f->field) {                                                                       \
            snprintf(err, errlen, "%s has no %s (xsp needs the CUPTI of CUDA 12 or newer)",    \
                     f->path, #sym);                                                           \
            return -1;                                                                         \
        }                                                                                      \
    } while (0)
#define OPT(field, sym) (f->field = (__typeof__(f->field))dlsym(h, #sym))
    REQ(GetVersion, cuptiGetVersion);
    REQ(GetResultString, cuptiGetResultString);
    REQ(Subscribe, cuptiSubscribe);
    REQ(Unsubscribe, cuptiUnsubscribe);
    REQ(ActivityRegisterCallbacks, cuptiActivityRegisterCallbacks);
    REQ(ActivityRegisterTimestampCallback, cuptiActivityRegisterTimestampCallback);
    REQ(ActivityEnable, cuptiActivityEnable);
    REQ(ActivityDisable, cuptiActivityDisable);
    REQ(ActivityFlushAll, cuptiActivityFlushAll);
    REQ(ActivityGetNextRecord, cuptiActivityGetNextRecord);
    REQ(ActivityGetNumDroppedRecords, cuptiActivityGetNumDroppedRecords);
    REQ(ActivityPushExternalCorrelationId, cuptiActivityPushExternalCorrelationId);
    REQ(ActivityPopExternalCorrelationId, cuptiActivityPopExternalCorrelationId);
    REQ(GetTimestamp, cuptiGetTimestamp);
    OPT(Finalize, cuptiFinalize);
    OPT(GetCallbackName, cuptiGetCallbackName);
    OPT(GetThreadIdType, cuptiGetThreadIdType);
    OPT(SetThreadIdType, cuptiSetThreadIdType);
#undef REQ
#undef OPT
    uint32_t v = 0;
    f->version = f->GetVersion(&v) == CUPTI_SUCCESS ? v : 0;
    return 0;
}

int xsp_cupti_open(const char *const *extra_dirs, size_t n_extra, char *err, size_t errlen)
{
    if (xsp_cupti())
        return 0;
    pthread_mutex_lock(&g_open_lock);
    if (xsp_cupti()) {
        pthread_mutex_unlock(&g_open_lock);
        return 0;
    }
    int rc = -1;
    xsp_cupti_fns f;
    memset(&f, 0, sizeof f);
    void *h = NULL;
    for (size_t i = 0; i < 3 && !h; i++) {         /* (a) already in the process */
        h = dlopen(k_names[i], RTLD_NOW | RTLD_NOLOAD);
        if (h)
            snprintf(f.path, sizeof f.path, "loaded:%s", k_names[i]);
    }
    if (!h) {                                       /* (b)-(e) */
        xsp_cupti_paths *p = malloc(sizeof *p);
        if (!p) {
            snprintf(err, errlen, "out of memory while looking for libcupti");
            goto out;
        }
        xsp_cupti_candidates(extra_dirs, n_extra, p);
        size_t which = 0;
        h = xsp_cupti_try_paths(p, &which, err, errlen);
        if (h)
            snprintf(f.path, sizeof f.path, "%s", p->path[which]);
        free(p);
        if (!h)
            goto out;
    }
    f.handle = h;
    if (resolve(h, &f, err, errlen) != 0)
        goto out;                                   /* handle leaked on purpose: see header */
    g_fns = f;
    atomic_store_explicit(&g_table, &g_fns, memory_order_release);
    rc = 0;
out:
    pthread_mutex_unlock(&g_open_lock);
    return rc;
}
