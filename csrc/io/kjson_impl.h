/*
 * kjson_impl.h: the reader's state, shared by its two halves: kjson.c (the text: yajl's
 * callbacks, one record per event) and kbuild.c (the records made into a trace).  Not part of
 * the interface (kjson.h).
 */
#ifndef XSP_KJSON_IMPL_H
#define XSP_KJSON_IMPL_H

#include <locale.h>

#include <yajl/yajl_parse.h>

#include "kjson.h"

/* What a scalar field of an event was (kj_val.type). */
enum { KV_ABSENT, KV_NULL, KV_BOOL, KV_INT, KV_NUM, KV_STR, KV_ARRAY, KV_OBJECT };

/* A field of an event as it came: pid, tid, ph, name, cat, a flow's id, a meta value. */
typedef struct kj_val {
    int64_t  i;         /* KV_INT: the value; KV_BOOL: 0 or 1 */
    uint32_t s;         /* KV_STR: string id; KV_NUM (not an int64): id of the number's text */
    uint8_t  type;      /* KV_* */
} kj_val;

/* ts or dur as read (kj_time.status). */
enum { KT_ABSENT, KT_OK, KT_TYPE, KT_RANGE };

typedef struct kj_time {
    int64_t ns;         /* KT_OK: the value in ns (µs x 1000, rounded half to even) */
    uint8_t status;     /* KT_* */
    uint8_t type;       /* KT_TYPE: the KV_* type it had instead of a number */
    char    text[40];   /* the number as written, cut to fit (for messages) */
} kj_time;

/* A complete event (ph X) kept for the trace. */
typedef struct kj_rec {
    int64_t  ts;        /* start, ns relative to baseTimeNanoseconds */
    int64_t  dur;       /* ns, >= 0 */
    uint32_t name;      /* string id (a step's: "step#N") */
    uint32_t cat;       /* string id, 0 when none */
    uint32_t pid, tid;  /* key ids (xsp_kjson.keys) of the event's pid and tid */
    uint32_t index;     /* the event's index in traceEvents */
    uint32_t attr_off;  /* its first attribute in t->attrs */
    uint16_t attr_n;    /* its attributes, not counting the reserved slot */
    uint8_t  kind;      /* enum xsp_kind as the event alone tells (op, module: see kbuild.c) */
    uint8_t  slot;      /* 1: t->attrs[attr_off + attr_n] is reserved for "api" or "fwd_op" */
} kj_rec;

/* A fwdbwd flow's end (ph s or f). */
typedef struct kj_flow {
    int64_t  ts;        /* ns relative to baseTimeNanoseconds */
    uint32_t id;        /* key id of the flow's id */
    uint32_t pid, tid;  /* key ids */
    uint8_t  start;     /* 1 for ph "s" (the forward op), 0 for "f" (the backward node) */
} kj_flow;

/* An allocation or free torch.profiler(profile_memory=True) reported: a "[memory]" instant
 * event (ph i). */
typedef struct kj_mem {
    int64_t  ts;        /* ns relative to baseTimeNanoseconds */
    int64_t  bytes;     /* args "Bytes": > 0 allocated, < 0 freed */
    int64_t  total;     /* args "Total Allocated" after it */
    uint32_t pid, tid;  /* key ids */
    uint32_t index;     /* the event's index in traceEvents */
    uint8_t  dev;       /* 0 cpu, 1 cuda, 2 other (args "Device Type" 0, 1, else) */
} kj_mem;

/* A thread_name metadata event (ph M). */
typedef struct kj_tname {
    uint32_t pid, tid;  /* key ids */
    uint32_t name;      /* string id */
} kj_tname;

/* Well-known strings, interned once into the trace's table (ids in xsp_kjson.id). */
enum {
    S_K_NAME, S_K_CAT, S_K_CORR, S_K_DEVICE, S_K_STREAM, S_K_CBID, S_K_BYTES, S_K_REGS,
    S_K_GRID, S_K_BLOCK, S_K_SEQ, S_K_DIMS, S_K_TYPES, S_K_STRIDES, S_K_CONCRETE,
    S_K_CORR_J, S_K_DEVICE_J, S_K_STREAM_J,
    S_SEQ, S_DIMS, S_TYPES, S_STRIDES, S_CONCRETE, S_TYPE, S_CORR, S_DEVICE, S_STREAM,
    S_CBID, S_BYTES, S_REGS, S_GRID_X, S_GRID_Y, S_GRID_Z, S_BLOCK_X, S_BLOCK_Y, S_BLOCK_Z,
    S_API, S_FWD_OP,
    S_CPU_OP, S_USER_ANN, S_PYFUNC, S_RUNTIME, S_DRIVER, S_KERNEL, S_MEMCPY, S_MEMSET,
    S_SYNC, S_OVERHEAD, S_TRACE, S_FWDBWD, S_K_MEM_BYTES, S_K_MEM_TOTAL, S_K_MEM_DEVTYPE,
    S_N
};

/* Which container the parser is in (xsp_kjson.ctx[depth - 1]). */
enum { C_TOP = 1, C_EVENTS, C_EVENT, C_ARGS, C_DIST, C_JARR, C_JMAP, C_SKIP };

/* The top-level keys that matter (xsp_kjson.top_key). */
enum { TK_OTHER, TK_EVENTS, TK_BASE, TK_DIST, TK_TRACE_ID, TK_HOST, TK_TRACE_NAME,
       TK_SCHEMA, TK_TIME_UNIT, TK_N };
/* An event's fields (xsp_kjson.ev_key). */
enum { EK_OTHER, EK_PH, EK_NAME, EK_CAT, EK_TS, EK_DUR, EK_PID, EK_TID, EK_ID, EK_ARGS };
/* distributedInfo's (xsp_kjson.dist_key). */
enum { DK_OTHER, DK_RANK, DK_WORLD, DK_BACKEND, DK_N };

struct xsp_kjson {
    yajl_handle     h;          /* the tokenizer; NULL once spent */
    xsp_trace      *t;          /* the trace being filled: strings and attributes as they come */
    xsp_strtab      keys;       /* pid, tid and flow id values, as type byte + value bytes */
    uint32_t        id[S_N];    /* string ids of the well-known strings, UINT32_MAX until
                                 * the trace's table has them (xsp_kj_id) */
    kj_rec         *recs;       /* complete events kept; owned */
    uint32_t        n_recs, cap_recs;
    kj_flow        *flows;      /* fwdbwd flow ends; owned */
    uint32_t        n_flows, cap_flows;
    kj_mem         *mems;       /* memory events, file order; owned */
    uint32_t        n_mems, cap_mems;
    kj_tname       *tnames;     /* thread names; owned */
    uint32_t        n_tnames, cap_tnames;
    int64_t         region;     /* index in recs of the region (first cat "Trace" event), or -1 */
    uint64_t        fed;        /* bytes fed before the segment yajl is parsing */
    int             scan_in_string;  /* the blank-run scan of feed: inside a string ... */
    int             scan_escape;     /* ... and just after its backslash */
    uint64_t        scan_token;      /* bytes of the token the scan is in (0: between tokens) */
    xsp_kjson_error err;        /* the error, once there is one */
    /* counts */
    uint64_t        n_events;   /* elements of traceEvents */
    uint64_t        n_flow_ev;  /* flow events (ph s, f, t) */
    uint64_t        skipped;    /* events not read as spans (counter kineto.skipped) */
    /* where the parser is */
    int             depth;      /* containers open */
    uint8_t         ctx[XSP_KJSON_MAX_DEPTH];   /* C_* of each open container */
    uint8_t         jfirst[XSP_KJSON_MAX_DEPTH];/* 1 while a JSON-text container is empty */
    int             seen_top;   /* the top-level value has begun */
    int             seen_events;/* traceEvents has begun */
    int             top_key;    /* TK_* of the top-level value that comes */
    int             dist_key;   /* DK_* of the distributedInfo value that comes */
    int             ev_key;     /* EK_* of the event field that comes */
    /* the event being read */
    struct {
        kj_val  ph, name, cat, pid, tid, id, tname;  /* tname: args.name of a ph M event */
        kj_time ts, dur;
        uint8_t args;           /* KV_* of its args (KV_ABSENT when none) */
    } ev;
    uint32_t        ev_attr0;   /* the event's first attribute in t->attrs */
    uint32_t        n_args;     /* distinct args so far */
    uint32_t        arg_raw[XSP_KJSON_MAX_ATTRS + 1];  /* string id of each arg's raw key */
    uint32_t        arg_key;    /* string id of the raw key of the arg whose value comes */
    int             arg_is_name;/* that key is "name" (a thread_name's value) */
    char           *buf;        /* scratch: "k." + key, a JSON text being built; owned */
    size_t          buf_len, buf_cap;
    /* top-level values */
    kj_val          top[TK_N];  /* TK_BASE and the meta keys */
    kj_val          dist[DK_N]; /* distributedInfo's rank, world_size, backend */
    locale_t        c_locale;   /* the C locale, for doubles whatever the process's; or 0 */
};

/* Sets the error (the first one wins) and returns -1: event is an index or -1, offset a byte
 * offset or -1. */
int xsp_kj_fail(xsp_kjson *r, int64_t event, int64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The string id of well-known string k (S_*) in the trace's table, UINT32_MAX while absent. */
uint32_t xsp_kj_id(xsp_kjson *r, int k);

/* The same, interned when absent; UINT32_MAX with r->err set on allocation failure. */
uint32_t xsp_kj_intern_id(xsp_kjson *r, int k);

/* The records made into the trace (kbuild.c).  Returns r->t (then owned by the caller, r->t
 * NULL) or NULL with r->err set. */
xsp_trace *xsp_kj_build(xsp_kjson *r);

/* The JSON number text s[0..n) times 10^scale, rounded half to even, as an int64 strictly
 * between -2^63 and 2^63 in *out.  0, or -1 when out of that range (kjson.c). */
int xsp_kj_decimal(const char *s, size_t n, int scale, int64_t *out);

/* The Python name of a KV_* type, for messages ("int", "str", "list", ...). */
const char *xsp_kj_type_name(int type);

/* -- shared by kjson.c, kjvalue.c and kjevent.c (one event's worth of work each) ------------ */

/* A scalar token as yajl gave it. */
typedef struct tok {
    int type;                   /* KV_* */
    const char *s;              /* KV_STR: the bytes; KV_INT / KV_NUM: the number's text */
    size_t n;                   /* their length */
    int64_t i;                  /* KV_BOOL: 0 or 1 */
} tok;

/* Sets the error "out of memory" (err.nomem) and returns -1. */
int xsp_kj_nomem(xsp_kjson *r);
/* Grows *p (of *cap elements of size sz) to hold n + 1; 0 or -1 (unchanged). */
int xsp_kj_grow(void **p, uint32_t *cap, uint32_t n, size_t sz);
/* Appends n bytes to r->buf; 0 or -1 (out of memory, set). */
int xsp_kj_put(xsp_kjson *r, const char *s, size_t n);
/* Appends s[0..n) to r->buf as a JSON string; 0 or -1. */
int xsp_kj_put_json_string(xsp_kjson *r, const unsigned char *s, size_t n);
/* Interns s[0..n) into the trace's strings: its id, or UINT32_MAX (out of memory, set). */
uint32_t xsp_kj_intern(xsp_kjson *r, const void *s, size_t n);

/* 1 when the JSON number text s[0..n) has no fraction and no exponent. */
int xsp_kj_is_integer(const char *s, size_t n);
/* The integer text s[0..n) as an int64 in *out; 0, or -1 when it does not fit. */
int xsp_kj_parse_i64(const char *s, size_t n, int64_t *out);
/* A token as a kj_val (strings and non-int64 numbers interned); 0 or -1. */
int xsp_kj_to_val(xsp_kjson *r, const tok *k, kj_val *v);
/* A token as ts or dur: exact ns, or why not.  Cannot fail. */
void xsp_kj_to_time(const tok *k, kj_time *t);
/* A scalar arg value: its attribute set (0), or -1 with the error set. */
int xsp_kj_arg_scalar(xsp_kjson *r, const tok *k);
/* The JSON text in r->buf, ended, as the value of the arg it belongs to; 0 or -1. */
int xsp_kj_arg_json_done(xsp_kjson *r);
/* The separator before a value in the JSON-text array being built; 0 or -1. */
int xsp_kj_json_sep(xsp_kjson *r);
/* A scalar inside a list or object arg, appended to its JSON text; 0 or -1. */
int xsp_kj_json_scalar(xsp_kjson *r, const tok *k);

/* An element of traceEvents begins (an object). Cannot fail. */
void xsp_kj_begin_event(xsp_kjson *r);
/* It ends: judged whole (kjevent.c); 0, or -1 with the error set (naming event and field). */
int xsp_kj_end_event(xsp_kjson *r);

#endif
