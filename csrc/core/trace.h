/*
 * trace.h: the merged trace, the one structure every recorder feeds and every reader uses.
 *
 * A trace is a flat array of spans sorted by start time, each span's id being its index.  The
 * hierarchy is stored as a parent id per span, set from per-thread nesting while recording (or
 * from CUPTI correlation for GPU spans), never guessed from time afterwards.  Invariants that
 * xsp_trace_check() verifies and every producer keeps:
 *   - spans are sorted by (start_ns, thread, record order), so ids grow with start time;
 *   - parent == XSP_NO_PARENT or parent < id (a parent starts no later than its child);
 *   - start_ns <= end_ns;
 *   - name, and every string id in attrs, meta and threads, is < strings.n;
 *   - a span's attributes are attrs[attr_off .. attr_off + attr_n).
 *
 * Names, attribute keys and string values live in one string table, so the file format and the
 * Python side can share ids.  Counters record what was lost and why ("lost.cap" and friends):
 * nothing is dropped silently.
 */
#ifndef XSP_TRACE_H
#define XSP_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "strtab.h"

#define XSP_NO_PARENT UINT32_MAX

/* Levels, in XSP's order: model, layer, GPU. */
enum xsp_level { XSP_LEVEL_M = 0, XSP_LEVEL_L = 1, XSP_LEVEL_G = 2, XSP_NLEVELS = 3 };

/* Kinds of span.  The numbers are part of the file format: append only. */
enum xsp_kind {
    XSP_KIND_REGION = 0,   /* M: the profiled block itself */
    XSP_KIND_MODEL = 1,    /* M: a top-level model call (a forward not inside another's) */
    XSP_KIND_STEP = 2,     /* M: one step/iteration marked by the user */
    XSP_KIND_MODULE = 3,   /* L: an nn.Module forward inside a model */
    XSP_KIND_OP = 4,       /* L: an aten operator (RecordFunction scope FUNCTION) */
    XSP_KIND_BACKWARD = 5, /* L: an autograd backward function (scope BACKWARD_FUNCTION) */
    XSP_KIND_SCOPE = 6,    /* L: a user scope, torch.profiler.record_function (USER_SCOPE) */
    XSP_KIND_RUNTIME = 7,  /* G: a CUDA runtime API call */
    XSP_KIND_DRIVER = 8,   /* G: a CUDA driver API call */
    XSP_KIND_KERNEL = 9,   /* G: a GPU kernel */
    XSP_KIND_MEMCPY = 10,  /* G: a memory copy */
    XSP_KIND_MEMSET = 11,  /* G: a memory set */
    XSP_KIND_SYNC = 12,    /* G: a synchronization */
    XSP_KIND_OVERHEAD = 13,/* G: CUPTI's own overhead */
    XSP_KIND_PYTHON = 14,  /* L: a Python function call (with_stack; csrc/python/pystack.c) */
    XSP_NKINDS = 15
};

/* Span flags (bits).  Part of the file format. */
enum xsp_span_flag {
    XSP_FLAG_OPEN_AT_STOP = 1u << 0,  /* still open when recording stopped: end_ns = stop time */
    XSP_FLAG_FORCED_END = 1u << 1,    /* ended because an enclosing span ended first */
    XSP_FLAG_ELIDE = 1u << 2,         /* recording-time only: remove, re-parent its children */
    XSP_FLAG_ELIDE_IF_EMPTY = 1u << 3,/* recording-time only: remove if it has no children */
    XSP_FLAG_CLIPPED = 1u << 4        /* began before a schedule's active steps: start_ns moved
                                       * to the first active step's start (xsp_trace_drop_before);
                                       * 16, so that no bit means two things in this enum */
};

/* Attribute value types.  Part of the file format. */
enum xsp_attr_type { XSP_ATTR_INT = 0, XSP_ATTR_FLOAT = 1, XSP_ATTR_STR = 2 };

typedef struct xsp_span {
    uint64_t start_ns;  /* start, ns on the session clock */
    uint64_t end_ns;    /* end, ns on the session clock, >= start_ns */
    uint32_t parent;    /* id of the enclosing span, XSP_NO_PARENT for a root */
    uint32_t name;      /* string id of the name */
    uint32_t thread;    /* index into the trace's threads (CPU thread or GPU stream track) */
    uint32_t attr_off;  /* index of the first attribute in the trace's attrs */
    uint16_t attr_n;    /* number of attributes */
    uint8_t  level;     /* enum xsp_level */
    uint8_t  kind;      /* enum xsp_kind */
    uint32_t flags;     /* enum xsp_span_flag bits */
} xsp_span;

typedef struct xsp_attr {
    uint32_t key;       /* string id of the key */
    uint32_t type;      /* enum xsp_attr_type */
    union {
        int64_t  i;     /* XSP_ATTR_INT */
        double   f;     /* XSP_ATTR_FLOAT */
        uint32_t s;     /* XSP_ATTR_STR: string id */
    } v;                /* the value */
} xsp_attr;

/* A track: a CPU thread (kind 0) or a GPU stream (kind 1, tid = device << 32 | stream). */
typedef struct xsp_thread {
    uint64_t tid;       /* OS thread id, or device << 32 | stream for a GPU track */
    uint32_t name;      /* string id of a readable name, 0 if none */
    uint32_t kind;      /* 0 = CPU thread, 1 = GPU stream */
} xsp_thread;

typedef struct xsp_trace {
    xsp_span   *spans;      /* n_spans spans, sorted as above; owned */
    uint32_t    n_spans;    /* number of spans */
    uint32_t    cap_spans;  /* allocated spans */
    xsp_attr   *attrs;      /* span attributes; owned */
    uint32_t    n_attrs;    /* number of attributes */
    uint32_t    cap_attrs;  /* allocated attributes */
    xsp_thread *threads;    /* tracks; owned */
    uint32_t    n_threads;  /* number of tracks */
    uint32_t    cap_threads;/* allocated tracks */
    xsp_attr   *meta;       /* trace metadata (levels, clock, versions, ...); owned */
    uint32_t    n_meta;     /* number of metadata entries */
    uint32_t    cap_meta;   /* allocated metadata entries */
    xsp_attr   *counters;   /* counters of lost/dropped records, all XSP_ATTR_INT; owned */
    uint32_t    n_counters; /* number of counters */
    uint32_t    cap_counters;/* allocated counters */
    xsp_strtab  strings;    /* all names, keys and string values */
} xsp_trace;

/* Allocates an empty trace (strings holds only ""). Returns NULL on allocation failure. */
xsp_trace *xsp_trace_new(void);

/* Frees the trace and everything it owns. Accepts NULL. */
void xsp_trace_free(xsp_trace *t);

/* Appends a span and returns its id, or UINT32_MAX on allocation failure (trace unchanged).
 * The caller keeps the sorting invariants; attr_off/attr_n are taken as given. */
uint32_t xsp_trace_add_span(xsp_trace *t, const xsp_span *s);

/* Appends an attribute to t->attrs and returns its index, or UINT32_MAX on allocation failure
 * (trace unchanged).  The caller sets the owning span's attr_off/attr_n. */
uint32_t xsp_trace_add_attr(xsp_trace *t, const xsp_attr *a);

/* Gives span ids[k] one more attribute named key (a NUL-terminated string, at most
 * XSP_STRTAB_MAX_LEN bytes) with the type and value of values[k], for k < n (values[k].key is
 * ignored; an XSP_ATTR_STR value is a string id already in t->strings).  ids must be strictly
 * increasing and < t->n_spans, and no span ids[k] may already have an attribute named key.
 * t->attrs is rebuilt in span order, each span's old attributes first, then the new one, so
 * every span's attributes stay contiguous; attributes no span refers to are dropped.  key is
 * interned into t->strings.  O(n_spans + n_attrs).  Returns 0 (n == 0 changes nothing), or -1
 * with a one-line message in err (errlen bytes, NUL-terminated; which id and why) and the trace
 * unchanged: bad arguments, a span whose attributes lie outside t->attrs, a span that would
 * have more than UINT16_MAX attributes, allocation failure (the message then begins with "out of
 * memory").  The caller keeps ids and values. */
int xsp_trace_add_span_attrs(xsp_trace *t, const char *key, uint32_t n, const uint32_t *ids,
                             const xsp_attr *values, char *err, size_t errlen);

/* Appends a track and returns its index, or UINT32_MAX on allocation failure. */
uint32_t xsp_trace_add_thread(xsp_trace *t, uint64_t tid, const char *name, uint32_t kind);

/* Sets metadata key to a string / integer / float value, replacing an existing entry with the
 * same key.  Return 0, or -1 on allocation failure (trace unchanged). */
int xsp_trace_set_meta_str(xsp_trace *t, const char *key, const char *value);
int xsp_trace_set_meta_int(xsp_trace *t, const char *key, int64_t value);
int xsp_trace_set_meta_float(xsp_trace *t, const char *key, double value);

/* Adds delta to the counter named key (creating it at 0). Returns 0, or -1 on allocation
 * failure (trace unchanged). */
int xsp_trace_add_counter(xsp_trace *t, const char *key, int64_t delta);

/* Returns the value of counter key, 0 if absent. Cannot fail. */
int64_t xsp_trace_counter(const xsp_trace *t, const char *key);

/* Keeps only what happened from t0 on, in place: the schedule's cut of a cycle's warmup steps
 * (session.h, xsp_session_drop_warmup).  Span i is kept when it ends after t0 or starts at or
 * after t0 (end_ns > t0 || start_ns >= t0) and its parent is kept (or it is a root); a kept
 * span that starts before t0 gets start_ns = t0 and XSP_FLAG_CLIPPED.  The kept spans are
 * renumbered in their old order (so ids stay in start order and parents before children),
 * their parents remapped; their attributes are rebuilt in span order (the dropped spans'
 * attributes go).  Integer attributes whose key is one of id_keys[0 .. n_keys) (NUL-terminated
 * names, e.g. "fwd_op", "api") hold span ids: they are remapped to the new ids, and an attribute
 * whose target was dropped (or was no span) is removed and counted in *unlinked (when unlinked
 * is not NULL; set to 0 first).  Tracks, strings, meta and counters are left as they are.
 * t0 = 0 keeps everything (only the attributes are rebuilt).  O(n_spans + n_attrs * n_keys).
 * Returns 0, or -1 with a one-line message in err (errlen bytes, NUL-terminated) and the trace
 * unchanged: a span whose parent is not before it or whose attributes lie outside t->attrs,
 * or allocation failure (the message then begins with "out of memory").  The caller keeps
 * id_keys. */
int xsp_trace_drop_before(xsp_trace *t, uint64_t t0, const char *const *id_keys, uint32_t n_keys,
                          uint64_t *unlinked, char *err, size_t errlen);

/* Checks the invariants above.  Returns 0 when they hold; otherwise -1 and writes a one-line
 * description of the first violation into err (errlen bytes, NUL-terminated). */
int xsp_trace_check(const xsp_trace *t, char *err, size_t errlen);

/* Returns 1 when a and b hold the same spans, attributes, tracks, metadata, counters and
 * strings (string tables compared by content of each id), else 0. Cannot fail. */
int xsp_trace_equal(const xsp_trace *a, const xsp_trace *b);

/* Names: "M"/"L"/"G", and "region", "model", ... ; "?" for values out of range. */
const char *xsp_level_name(unsigned level);
const char *xsp_kind_name(unsigned kind);

#endif
