/*
 * kjson.c: the text half of the Kineto JSON reader (kjson.h): yajl's callbacks and the
 * interface; the values (numbers, fields, args) are kjvalue.c's, the judging of one event
 * kjevent.c's, the records made into a trace kbuild.c's.
 *
 * yajl calls back once per token; the reader keeps a stack of what each open container is
 * (the top-level object, traceEvents, one event, its args, a value inside an arg, something
 * skipped) and acts on the tokens that matter:
 *   - top-level keys: traceEvents (the array of events), baseTimeNanoseconds, the metadata
 *     kept in meta (trace_id, host_name, traceName, schemaVersion, displayTimeUnit) and
 *     distributedInfo's rank, world_size and backend; everything else is skipped;
 *   - an event's fields ph, name, cat, ts, dur, pid, tid, id and args; when the event's
 *     object ends it is judged whole (fields may come in any order): a complete event (ph X)
 *     becomes a kj_rec, a thread_name a kj_tname, a fwdbwd flow end a kj_flow, the rest is
 *     counted;
 *   - each arg becomes an attribute "k.<key>" at once, in t->attrs: bool as 0/1, integers
 *     that fit int64 as ints, others as their decimal text, other numbers as doubles, strings
 *     as strings, and null, arrays and objects as JSON text under "k.<key>[]" (separators as
 *     Python's json.dumps writes them, numbers as the file wrote them).  A key given twice
 *     keeps its first place and its last value, as a Python dict would.
 *
 * Nothing here converts a number before its size is known: yajl hands numbers over as text
 * (the yajl_number callback), ts and dur are converted exactly from it (xsp_kj_decimal, kjvalue.c), so a
 * million-digit exponent costs its length, not its value.  Memory is that of the records and
 * the interned strings; the deepest nesting is XSP_KJSON_MAX_DEPTH.
 */
#include "kjson_impl.h"

#include <locale.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const WELL_KNOWN[S_N] = {
    [S_K_NAME] = "k.name", [S_K_CAT] = "k.cat", [S_K_CORR] = "k.correlation",
    [S_K_DEVICE] = "k.device", [S_K_STREAM] = "k.stream", [S_K_CBID] = "k.cbid",
    [S_K_BYTES] = "k.bytes", [S_K_REGS] = "k.registers per thread", [S_K_GRID] = "k.grid[]",
    [S_K_BLOCK] = "k.block[]", [S_K_SEQ] = "k.Sequence number", [S_K_DIMS] = "k.Input Dims[]",
    [S_K_TYPES] = "k.Input type[]", [S_K_STRIDES] = "k.Input Strides[]",
    [S_K_CONCRETE] = "k.Concrete Inputs[]", [S_K_CORR_J] = "k.correlation[]",
    [S_K_DEVICE_J] = "k.device[]", [S_K_STREAM_J] = "k.stream[]",
    [S_SEQ] = "seq", [S_DIMS] = "input_dims", [S_TYPES] = "input_types",
    [S_STRIDES] = "input_strides", [S_CONCRETE] = "concrete_inputs", [S_TYPE] = "type",
    [S_CORR] = "correlation", [S_DEVICE] = "device", [S_STREAM] = "stream", [S_CBID] = "cbid",
    [S_BYTES] = "bytes", [S_REGS] = "registers", [S_GRID_X] = "grid_x", [S_GRID_Y] = "grid_y",
    [S_GRID_Z] = "grid_z", [S_BLOCK_X] = "block_x", [S_BLOCK_Y] = "block_y",
    [S_BLOCK_Z] = "block_z", [S_API] = "api", [S_FWD_OP] = "fwd_op",
    [S_CPU_OP] = "cpu_op", [S_USER_ANN] = "user_annotation", [S_PYFUNC] = "python_function",
    [S_RUNTIME] = "cuda_runtime", [S_DRIVER] = "cuda_driver", [S_KERNEL] = "kernel",
    [S_MEMCPY] = "gpu_memcpy", [S_MEMSET] = "gpu_memset", [S_SYNC] = "cuda_sync",
    [S_OVERHEAD] = "overhead", [S_TRACE] = "Trace", [S_FWDBWD] = "fwdbwd",
    [S_K_MEM_BYTES] = "k.Bytes", [S_K_MEM_TOTAL] = "k.Total Allocated",
    [S_K_MEM_DEVTYPE] = "k.Device Type",
};

const char *xsp_kj_type_name(int type)
{
    static const char *const names[] = {"nothing", "NoneType", "bool", "int", "float", "str",
                                        "list", "dict"};
    return type >= 0 && type <= KV_OBJECT ? names[type] : "?";
}

int xsp_kj_fail(xsp_kjson *r, int64_t event, int64_t offset, const char *fmt, ...)
{
    if (r->err.msg[0])
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err.msg, sizeof r->err.msg, fmt, ap);
    va_end(ap);
    if (!r->err.msg[0])
        snprintf(r->err.msg, sizeof r->err.msg, "error");
    r->err.event = event;
    r->err.offset = offset;
    return -1;
}

int xsp_kj_nomem(xsp_kjson *r)
{
    xsp_kj_fail(r, -1, -1, "out of memory");
    r->err.nomem = 1;
    return -1;
}

/* The offset of the token being read: yajl's count into the current chunk. */
static int64_t here(const xsp_kjson *r)
{
    return (int64_t)(r->fed + (r->h ? yajl_get_bytes_consumed(r->h) : 0));
}

/* Grows *p (of *cap elements of size sz) to hold n + 1; 0 or -1 (unchanged). */
int xsp_kj_grow(void **p, uint32_t *cap, uint32_t n, size_t sz)
{
    if (n < *cap)
        return 0;
    if (n >= UINT32_MAX / 2)
        return -1;
    uint32_t nc = *cap ? *cap * 2 : 256;
    void *q = realloc(*p, (size_t)nc * sz);
    if (!q)
        return -1;
    *p = q;
    *cap = nc;
    return 0;
}

/* Appends n bytes to the scratch buffer; 0 or -1. */
int xsp_kj_put(xsp_kjson *r, const char *s, size_t n)
{
    if (r->buf_len + n > r->buf_cap) {
        size_t nc = r->buf_cap ? r->buf_cap : 256;
        while (nc < r->buf_len + n)
            nc *= 2;
        char *q = realloc(r->buf, nc);
        if (!q)
            return xsp_kj_nomem(r);
        r->buf = q;
        r->buf_cap = nc;
    }
    memcpy(r->buf + r->buf_len, s, n);
    r->buf_len += n;
    return 0;
}

/* Appends s as a JSON string (quotes, escapes of '"', '\\' and control characters; other
 * bytes as they are, so UTF-8 stays UTF-8). */
int xsp_kj_put_json_string(xsp_kjson *r, const unsigned char *s, size_t n)
{
    if (xsp_kj_put(r, "\"", 1))
        return -1;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        if (xsp_kj_put(r, (const char *)s + run, i - run))
            return -1;
        char esc[8];
        switch (c) {
        case '"': memcpy(esc, "\\\"", 3); break;
        case '\\': memcpy(esc, "\\\\", 3); break;
        case '\n': memcpy(esc, "\\n", 3); break;
        case '\r': memcpy(esc, "\\r", 3); break;
        case '\t': memcpy(esc, "\\t", 3); break;
        case '\b': memcpy(esc, "\\b", 3); break;
        case '\f': memcpy(esc, "\\f", 3); break;
        default: snprintf(esc, sizeof esc, "\\u%04x", c); break;
        }
        if (xsp_kj_put(r, esc, strlen(esc)))
            return -1;
        run = i + 1;
    }
    return xsp_kj_put(r, (const char *)s + run, n - run) || xsp_kj_put(r, "\"", 1) ? -1 : 0;
}

/* The string id of well-known string k when the trace's table has it, else UINT32_MAX (which
 * no attribute key or category equals).  Nothing is interned: the table holds only what the
 * file and its spans use (readers ask it whether a key occurs, e.g. "input_dims"). */
uint32_t xsp_kj_id(xsp_kjson *r, int k)
{
    if (r->id[k] == UINT32_MAX)
        r->id[k] = xsp_strtab_find(&r->t->strings, WELL_KNOWN[k], strlen(WELL_KNOWN[k]));
    return r->id[k];
}

uint32_t xsp_kj_intern_id(xsp_kjson *r, int k)
{
    if (xsp_kj_id(r, k) == UINT32_MAX
        && (r->id[k] = xsp_strtab_intern(&r->t->strings, WELL_KNOWN[k],
                                         strlen(WELL_KNOWN[k]))) == UINT32_MAX)
        xsp_kj_nomem(r);
    return r->id[k];
}

uint32_t xsp_kj_intern(xsp_kjson *r, const void *s, size_t n)
{
    uint32_t id = xsp_strtab_intern(&r->t->strings, s, n);
    if (id == UINT32_MAX)
        xsp_kj_nomem(r);
    return id;
}

/* -- the token dispatch ---------------------------------------------------------------------- */

/* A value begins (a scalar k, or a container when k is NULL and type is KV_ARRAY/KV_OBJECT)
 * in the container the parser is in.  For a container, *push is set to what it will be. */
static int value(xsp_kjson *r, int type, const tok *k, int *push)
{
    int in = r->depth ? r->ctx[r->depth - 1] : 0;
    *push = C_SKIP;
    switch (in) {
    case 0:
        if (type != KV_OBJECT)
            return xsp_kj_fail(r, -1, -1,
                               "not a Kineto trace: no traceEvents list at the top level");
        r->seen_top = 1;
        *push = C_TOP;
        return 0;
    case C_TOP:
        if (r->top_key == TK_EVENTS) {
            if (type != KV_ARRAY)
                return xsp_kj_fail(r, -1, -1, "not a Kineto trace: traceEvents is a %s, not a "
                                   "list", xsp_kj_type_name(type));
            if (r->seen_events)
                return xsp_kj_fail(r, -1, here(r) - 1, "traceEvents is given twice");
            r->seen_events = 1;
            *push = C_EVENTS;
        } else if (r->top_key == TK_DIST && type == KV_OBJECT) {
            *push = C_DIST;
        } else if (r->top_key != TK_OTHER && k) {
            return xsp_kj_to_val(r, k, &r->top[r->top_key]);
        }
        return 0;
    case C_DIST:
        if (r->dist_key != DK_OTHER && k)
            return xsp_kj_to_val(r, k, &r->dist[r->dist_key]);
        return 0;
    case C_EVENTS:
        if (type != KV_OBJECT)
            return xsp_kj_fail(r, (int64_t)r->n_events, -1, "not an object but %s",
                               xsp_kj_type_name(type));
        xsp_kj_begin_event(r);
        *push = C_EVENT;
        return 0;
    case C_EVENT: {
        kj_val *v = NULL;
        switch (r->ev_key) {
        case EK_PH: v = &r->ev.ph; break;
        case EK_NAME: v = &r->ev.name; break;
        case EK_CAT: v = &r->ev.cat; break;
        case EK_PID: v = &r->ev.pid; break;
        case EK_TID: v = &r->ev.tid; break;
        case EK_ID: v = &r->ev.id; break;
        case EK_TS:
        case EK_DUR: {
            tok t = k ? *k : (tok){.type = type};
            xsp_kj_to_time(&t, r->ev_key == EK_TS ? &r->ev.ts : &r->ev.dur);
            return 0;
        }
        case EK_ARGS:
            r->ev.args = (uint8_t)type;
            r->t->n_attrs = r->ev_attr0;        /* a second args object replaces the first */
            r->n_args = 0;
            if (type == KV_OBJECT) {
                *push = C_ARGS;
            }
            return 0;
        default:
            return 0;
        }
        if (k)
            return xsp_kj_to_val(r, k, v);
        memset(v, 0, sizeof *v);
        v->type = (uint8_t)type;
        return 0;
    }
    case C_ARGS:
        if (k)
            return xsp_kj_arg_scalar(r, k);
        r->buf_len = 0;
        if (xsp_kj_put(r, type == KV_ARRAY ? "[" : "{", 1))
            return -1;
        *push = type == KV_ARRAY ? C_JARR : C_JMAP;
        return 0;
    case C_JARR:
    case C_JMAP:
        if (k)
            return xsp_kj_json_scalar(r, k);
        if (in == C_JARR && xsp_kj_json_sep(r))
            return -1;
        if (xsp_kj_put(r, type == KV_ARRAY ? "[" : "{", 1))
            return -1;
        *push = type == KV_ARRAY ? C_JARR : C_JMAP;
        return 0;
    default:
        return 0;
    }
}

static int cb_scalar(xsp_kjson *r, const tok *k)
{
    int push;
    return value(r, k->type, k, &push) ? 0 : 1;
}

static int cb_null(void *ctx)
{
    return cb_scalar(ctx, &(tok){.type = KV_NULL});
}

static int cb_bool(void *ctx, int b)
{
    return cb_scalar(ctx, &(tok){.type = KV_BOOL, .i = !!b});
}

static int cb_number(void *ctx, const char *s, size_t n)
{
    return cb_scalar(ctx, &(tok){.type = xsp_kj_is_integer(s, n) ? KV_INT : KV_NUM, .s = s, .n = n});
}

static int cb_string(void *ctx, const unsigned char *s, size_t n)
{
    return cb_scalar(ctx, &(tok){.type = KV_STR, .s = (const char *)s, .n = n});
}

static int open_container(xsp_kjson *r, int type)
{
    int push;
    if (value(r, type, NULL, &push))
        return 0;
    if (r->depth >= XSP_KJSON_MAX_DEPTH) {
        xsp_kj_fail(r, -1, here(r) - 1, "nested more than %d levels deep",  /* at its bracket */
                    XSP_KJSON_MAX_DEPTH);
        return 0;
    }
    r->ctx[r->depth] = (uint8_t)push;
    r->jfirst[r->depth] = 1;
    r->depth++;
    return 1;
}

static int cb_start_map(void *ctx)
{
    return open_container(ctx, KV_OBJECT);
}

static int cb_start_array(void *ctx)
{
    return open_container(ctx, KV_ARRAY);
}

static int close_container(xsp_kjson *r)
{
    int c = r->ctx[--r->depth];
    int in = r->depth ? r->ctx[r->depth - 1] : 0;
    switch (c) {
    case C_EVENT:
        return xsp_kj_end_event(r) ? 0 : 1;
    case C_TOP:
        if (!r->seen_events) {
            xsp_kj_fail(r, -1, -1, "not a Kineto trace: no traceEvents list at the top level");
            return 0;
        }
        return 1;
    case C_JARR:
    case C_JMAP:
        if (xsp_kj_put(r, c == C_JARR ? "]" : "}", 1))
            return 0;
        return in == C_ARGS ? (xsp_kj_arg_json_done(r) ? 0 : 1) : 1;
    default:
        return 1;
    }
}

static int cb_end(void *ctx)
{
    return close_container(ctx);
}

static int key_is(const unsigned char *s, size_t n, const char *lit)
{
    return n == strlen(lit) && memcmp(s, lit, n) == 0;
}

static int cb_map_key(void *ctx, const unsigned char *s, size_t n)
{
    xsp_kjson *r = ctx;
    switch (r->ctx[r->depth - 1]) {
    case C_TOP: {
        static const char *const names[TK_N] = {
            [TK_EVENTS] = "traceEvents", [TK_BASE] = "baseTimeNanoseconds",
            [TK_DIST] = "distributedInfo", [TK_TRACE_ID] = "trace_id",
            [TK_HOST] = "host_name", [TK_TRACE_NAME] = "traceName",
            [TK_SCHEMA] = "schemaVersion", [TK_TIME_UNIT] = "displayTimeUnit"};
        r->top_key = TK_OTHER;
        for (int k = 1; k < TK_N; k++)
            if (key_is(s, n, names[k]))
                r->top_key = k;
        return 1;
    }
    case C_DIST:
        r->dist_key = key_is(s, n, "rank") ? DK_RANK : key_is(s, n, "world_size") ? DK_WORLD
                    : key_is(s, n, "backend") ? DK_BACKEND : DK_OTHER;
        return 1;
    case C_EVENT: {
        static const char *const names[] = {NULL, "ph", "name", "cat", "ts", "dur", "pid",
                                            "tid", "id", "args"};
        r->ev_key = EK_OTHER;
        for (int k = 1; k <= EK_ARGS; k++)
            if (key_is(s, n, names[k]))
                r->ev_key = k;
        return 1;
    }
    case C_ARGS:
        r->arg_is_name = key_is(s, n, "name");
        r->arg_key = xsp_strtab_intern(&r->keys, (const char *)s, n);
        return r->arg_key == UINT32_MAX ? (xsp_kj_nomem(r), 0) : 1;
    case C_JMAP: {
        int d = r->depth - 1;
        if (!r->jfirst[d] && xsp_kj_put(r, ", ", 2))
            return 0;
        r->jfirst[d] = 0;
        return xsp_kj_put_json_string(r, s, n) || xsp_kj_put(r, ": ", 2) ? 0 : 1;
    }
    default:
        return 1;
    }
}

static const yajl_callbacks CALLBACKS = {
    .yajl_null = cb_null,
    .yajl_boolean = cb_bool,
    .yajl_number = cb_number,
    .yajl_string = cb_string,
    .yajl_start_map = cb_start_map,
    .yajl_map_key = cb_map_key,
    .yajl_end_map = cb_end,
    .yajl_start_array = cb_start_array,
    .yajl_end_array = cb_end,
};

/* -- the interface --------------------------------------------------------------------------- */

xsp_kjson *xsp_kjson_new(void)
{
    xsp_kjson *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->region = -1;
    r->err.event = r->err.offset = -1;
    r->t = xsp_trace_new();
    if (!r->t || xsp_strtab_init(&r->keys) != 0)
        goto fail;
    memset(r->id, 0xff, sizeof r->id);
    r->c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    r->h = yajl_alloc(&CALLBACKS, NULL, r);
    if (!r->h)
        goto fail;
    return r;
fail:
    xsp_kjson_free(r);
    return NULL;
}

void xsp_kjson_free(xsp_kjson *r)
{
    if (!r)
        return;
    if (r->h)
        yajl_free(r->h);
    xsp_trace_free(r->t);
    xsp_strtab_free(&r->keys);
    if (r->c_locale)
        freelocale(r->c_locale);
    free(r->recs);
    free(r->flows);
    free(r->tnames);
    free(r->mems);
    free(r->buf);
    free(r);
}

const xsp_kjson_error *xsp_kjson_err(const xsp_kjson *r)
{
    return &r->err;
}

/* The length of the valid UTF-8 sequence at s[0..n), or 0 when s does not start one. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t len = s[0] < 0x80 ? 1 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : s[0] >= 0xe0 && s[0] < 0xf0
               ? 3 : s[0] >= 0xf0 && s[0] < 0xf5 ? 4 : 0;
    if (len == 0 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((len == 3 && s[0] == 0xe0 && s[1] < 0xa0) || (len == 3 && s[0] == 0xed && s[1] >= 0xa0)
        || (len == 4 && s[0] == 0xf0 && s[1] < 0x90) || (len == 4 && s[0] == 0xf4 && s[1] >= 0x90))
        return 0;
    return len;
}

/* yajl reports a string that is not UTF-8 where the string ends: the offset of its first
 * bad byte, when that lies in buf (the chunk being parsed; end: yajl's position in it). */
static int64_t bad_utf8(const xsp_kjson *r, const unsigned char *buf, size_t end)
{
    size_t a = end;
    while (a > 0 && buf[a - 1] != '"')          /* back to the closing quote ... */
        a--;
    if (a > 0)
        a--;
    while (a > 0 && buf[a - 1] != '"')          /* ... and to the opening one */
        a--;
    for (size_t i = a; i < end;) {
        size_t l = utf8_len(buf + i, end - i);
        if (l == 0)
            return (int64_t)(r->fed + i);
        i += l;
    }
    return (int64_t)(r->fed + end);
}

/* yajl's status after a parse call: 0, or -1 with the error set (syntax errors located). */
static int status(xsp_kjson *r, yajl_status st, const unsigned char *buf, size_t len)
{
    if (st == yajl_status_ok)
        return 0;
    if (st == yajl_status_client_canceled || r->err.msg[0]) {
        if (!r->err.msg[0])
            xsp_kj_fail(r, -1, here(r), "stopped");
        return -1;
    }
    unsigned char *e = yajl_get_error(r->h, 0, buf, len);
    const char *msg = e ? (const char *)e : "malformed";
    size_t ml = strlen(msg);
    while (ml && (msg[ml - 1] == '\n' || msg[ml - 1] == ' '))      /* yajl ends it in "\n" */
        ml--;
    int64_t off = here(r) - (yajl_get_bytes_consumed(r->h) > 0);    /* the offending byte */
    if (strstr(msg, "UTF8"))
        xsp_kj_fail(r, -1, bad_utf8(r, buf, yajl_get_bytes_consumed(r->h)), "not UTF-8");
    else if (strstr(msg, "premature EOF"))
        xsp_kj_fail(r, -1, off, "malformed JSON: the text ends inside a value");
    else
        xsp_kj_fail(r, -1, off, "malformed JSON: %.*s", (int)ml, msg);
    if (e)
        yajl_free_error(r->h, e);
    return -1;
}

int xsp_kjson_feed(xsp_kjson *r, const void *buf, size_t len)
{
    if (!r->h || r->err.msg[0])
        return xsp_kj_fail(r, -1, -1, "the reader is spent");
    /* Runs of whitespace between tokens go to yajl as their first byte only (a run still
     * separates two numbers): a file padded with gigabytes of blanks costs this scan, not
     * yajl's lexer.  The scan follows strings (quotes and backslash escapes) across chunks,
     * so blanks inside a string are never touched; offsets still count every byte. */
    /* The same scan measures each token (a string from its opening quote to its closing
     * one, a number, a literal): one longer than XSP_KJSON_MAX_TOKEN is refused before yajl
     * lexes it again at every piece (see kjson.h). */
    const unsigned char *p = buf, *end = p + len, *seg = p;
    uint64_t token = r->scan_token;
    while (p < end) {
        unsigned char c = *p;
        if (r->scan_escape) {
            r->scan_escape = 0;
            token++;
        } else if (r->scan_in_string) {
            if (c == '\\')
                r->scan_escape = 1;
            else if (c == '"')
                r->scan_in_string = 0;
            token++;
        } else if (c == '"') {
            r->scan_in_string = 1;
            token = 1;
        } else if (c == ',' || c == ':' || c == '{' || c == '}' || c == '[' || c == ']') {
            token = 0;
        } else if (c != ' ' && c != '\n' && c != '\r' && c != '\t') {
            token++;                            /* a number's or a literal's */
        } else if (token = 0, end - p > 1
                   && (p[1] == ' ' || p[1] == '\n' || p[1] == '\r' || p[1] == '\t')) {
            const unsigned char *q = p + 1;
            while (q < end && (*q == ' ' || *q == '\n' || *q == '\r' || *q == '\t'))
                q++;
            if (q - p >= 64) {                  /* feed up to and with the first blank */
                if (status(r, yajl_parse(r->h, seg, (size_t)(p + 1 - seg)), seg,
                           (size_t)(p + 1 - seg)))
                    return -1;
                r->fed += (uint64_t)(q - seg);
                seg = q;
            }
            p = q;
            continue;
        }
        if (token > XSP_KJSON_MAX_TOKEN)
            return xsp_kj_fail(r, -1, (int64_t)(r->fed + (uint64_t)(p - seg)) - (int64_t)token + 1,
                               "a %s of more than %llu bytes: refused (the reader's limit for "
                               "one token)", r->scan_in_string || c == '"' ? "string" : "number", (unsigned long long)XSP_KJSON_MAX_TOKEN);
        p++;
    }
    r->scan_token = token;
    if (seg < end) {
        int rc = status(r, yajl_parse(r->h, seg, (size_t)(end - seg)), seg, (size_t)(end - seg));
        r->fed += (uint64_t)(end - seg);
        return rc;
    }
    return 0;
}

xsp_trace *xsp_kjson_finish(xsp_kjson *r)
{
    if (!r->h || r->err.msg[0]) {
        xsp_kj_fail(r, -1, -1, "the reader is spent");
        return NULL;
    }
    yajl_status st = yajl_complete_parse(r->h);
    /* bytes consumed now count from the last chunk's start: the text's end is r->fed */
    if (st != yajl_status_ok && st != yajl_status_client_canceled && !r->err.msg[0]) {
        if (!r->seen_top)
            xsp_kj_fail(r, -1, (int64_t)r->fed, "malformed JSON: no value");
        else
            xsp_kj_fail(r, -1, (int64_t)r->fed, "malformed JSON: the text ends inside a value");
    }
    yajl_free(r->h);
    r->h = NULL;
    if (r->err.msg[0] || st != yajl_status_ok) {
        if (!r->err.msg[0])
            xsp_kj_fail(r, -1, -1, "malformed JSON");
        return NULL;
    }
    return xsp_kj_build(r);
}
