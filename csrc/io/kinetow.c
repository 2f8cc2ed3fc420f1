/*
 * kinetow.c: one Kineto trace event per span (kinetow.h).
 *
 * Each span's args are assembled as the Python reference writer's dict was: an ordered list of
 * (key, value) entries where a later "set" of an existing key replaces its value and a
 * "setdefault" does nothing, so that a k.<arg> attribute read from a Kineto file overrides the
 * value a rule gave, as it did there.  A span has few entries (a dozen rules and its
 * attributes): keys are compared by a linear scan.
 *
 * Attribute keys are classified once per string id (the role table): the known keys the rules
 * read (seq, fwd_op, api, correlation, ...) and how the generic attribute loop writes a key
 * (k.<arg>: as <arg>; k.<arg>[]: as <arg> with its JSON list; seq and fwd_op: not at all; any
 * other: as xsp.<key> unless a rule wrote that key).
 */
#include "kinetow.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "kmemw.h"

/* the keys the rules read; 0 is none */
enum { K_NONE, K_SEQ, K_FWD_OP, K_API, K_CORRELATION, K_CBID, K_DEVICE, K_STREAM, K_REGISTERS,
       K_SMEM_STATIC, K_SMEM_DYNAMIC, K_GRID_X, K_GRID_Y, K_GRID_Z, K_BLOCK_X, K_BLOCK_Y,
       K_BLOCK_Z, K_BYTES, K_KCAT, K_INPUT_DIMS, K_INPUT_TYPES, K_INPUT_STRIDES,
       K_CONCRETE_INPUTS, K_MEM0, K_N = K_MEM0 + XSP_KMEM_NDEV * XSP_KMEM_NFIELD };
static const char *const KNOWN[K_N] = {
    "", "seq", "fwd_op", "api", "correlation", "cbid", "device", "stream", "registers",
    "smem_static", "smem_dynamic", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
    "block_z", "bytes", "k.cat", "input_dims", "input_types", "input_strides",
    "concrete_inputs"};     /* then mem.<dev>.<field>, matched by role_of */
/* how the attribute loop writes a key (the role's high byte) */
enum { M_OTHER = 0, M_K = 1, M_KLIST = 2, M_SKIP = 3 };
#define ROLE_MEM 0x400u             /* the key starts with "mem.": the span has memory sums */
#define ROLE_UNSET 0xFFFFu

static const char *const CATEGORY[XSP_NKINDS] = {
    "Trace", "python_function", "user_annotation", "python_function", "cpu_op", "cpu_op",
    "user_annotation", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset",
    "cuda_sync", "overhead", "python_function"};

/* a value of an arg */
enum { V_INT, V_FLOAT, V_STR, V_TEXT, V_NULL, V_LIST };
typedef struct kval {
    int t;                      /* V_* */
    int64_t i;                  /* V_INT */
    double f;                   /* V_FLOAT */
    const char *s;              /* V_STR bytes, V_TEXT JSON text */
    size_t n;                   /* their length; V_LIST: the number of items */
    const struct kval *items;   /* V_LIST items */
} kval;

typedef struct karg {
    const char *pre;            /* key prefix ("" or "xsp."), NUL-terminated */
    size_t pn;                  /* its length */
    const char *k;              /* key bytes after it */
    size_t kn;                  /* their length */
    int lit;                    /* nonzero: a rule's key, ASCII needing no escapes */
    kval v;                     /* the value */
} karg;

typedef struct ctx {
    xsp_jsonw *w;
    const xsp_trace *t;
    const xsp_kineto_cols *c;
    uint16_t *role;             /* per string id: K_* | M_* << 8 | ROLE_MEM, or ROLE_UNSET */
    uint32_t *first, *next;     /* children lists (xsp_kmem_children), made at the first span
                                 * with memory; NULL before */
    int nomem;                  /* an allocation failed: the memory instants are missing */
    karg *args;                 /* the span's args being built */
    uint32_t n_args;
    const xsp_attr *kv[K_N];    /* the span's known attributes (the last of each key) */
    kval lists[2][3];           /* grid and block items */
    int comma;                  /* nonzero: an event was written before (write ",\n") */
} ctx;

static const char *str_of(const xsp_trace *t, uint32_t id, size_t *n)
{
    const char *s = xsp_strtab_get(&t->strings, id, n);
    if (!s) {
        *n = 0;
        return "";
    }
    return s;
}

static unsigned role_of(ctx *x, uint32_t key)
{
    if (x->role[key] != ROLE_UNSET)
        return x->role[key];
    size_t n;
    const char *s = str_of(x->t, key, &n);
    unsigned known = K_NONE, mode = M_OTHER, mem = 0;
    for (unsigned k = 1; k < K_MEM0; k++)
        if (strlen(KNOWN[k]) == n && memcmp(KNOWN[k], s, n) == 0)
            known = k;
    if (n >= 4 && memcmp(s, "mem.", 4) == 0) {
        mem = ROLE_MEM;
        for (unsigned k = 0; k < K_N - K_MEM0; k++) {
            char name[40];
            int len = snprintf(name, sizeof name, "mem.%s.%s", xsp_kmem_dev(k / XSP_KMEM_NFIELD),
                               xsp_kmem_field(k % XSP_KMEM_NFIELD));
            if ((size_t)len == n && memcmp(name, s, n) == 0)
                known = K_MEM0 + k;
        }
    }
    if (n >= 2 && s[0] == 'k' && s[1] == '.')
        mode = n >= 4 && s[n - 2] == '[' && s[n - 1] == ']' ? M_KLIST : M_K;
    else if (known == K_SEQ || known == K_FWD_OP)
        mode = M_SKIP;
    x->role[key] = (uint16_t)(known | mode << 8 | mem);
    return x->role[key];
}

static kval attr_val(const xsp_trace *t, const xsp_attr *a)
{
    kval v = {0};
    if (a->type == XSP_ATTR_INT) {
        v.t = V_INT;
        v.i = a->v.i;
    } else if (a->type == XSP_ATTR_FLOAT) {
        v.t = V_FLOAT;
        v.f = a->v.f;
    } else {
        v.t = V_STR;
        v.s = str_of(t, a->v.s, &v.n);
    }
    return v;
}

static kval vint(int64_t i)
{
    kval v = {0};
    v.t = V_INT;
    v.i = i;
    return v;
}

static int key_eq(const karg *a, const char *pre, size_t pn, const char *k, size_t kn)
{
    if (a->pn + a->kn != pn + kn)
        return 0;
    if (a->pn == pn)                    /* the usual case: compare the parts */
        return memcmp(a->pre, pre, pn) == 0 && memcmp(a->k, k, kn) == 0;
    for (size_t i = 0; i < pn + kn; i++) {
        char ca = i < a->pn ? a->pre[i] : a->k[i - a->pn];
        char cb = i < pn ? pre[i] : k[i - pn];
        if (ca != cb)
            return 0;
    }
    return 1;
}

/* args[pre + k] = v (replace: when the key is there, its value is replaced, else appended) */
static void put(ctx *x, const char *pre, const char *k, size_t kn, kval v, int replace, int lit)
{
    size_t pn = strlen(pre);
    for (uint32_t i = 0; i < x->n_args; i++)
        if (key_eq(&x->args[i], pre, pn, k, kn)) {
            if (replace)
                x->args[i].v = v;
            return;
        }
    karg *a = &x->args[x->n_args++];
    a->pre = pre;
    a->pn = pn;
    a->k = k;
    a->kn = kn;
    a->lit = lit;
    a->v = v;
}

static void set(ctx *x, const char *k, kval v)
{
    put(x, "", k, strlen(k), v, 1, 1);
}

static void write_val(xsp_jsonw *w, const kval *v)
{
    switch (v->t) {
    case V_INT: xsp_jsonw_int(w, v->i); break;
    case V_FLOAT: xsp_jsonw_double(w, v->f); break;
    case V_STR: xsp_jsonw_str(w, v->s, v->n); break;
    case V_TEXT: xsp_jsonw_text(w, v->s, v->n); break;
    case V_NULL: xsp_jsonw_lit(w, "null"); break;
    default:
        xsp_jsonw_raw(w, "[", 1);
        for (size_t i = 0; i < v->n; i++) {
            if (i)
                xsp_jsonw_raw(w, ", ", 2);
            write_val(w, &v->items[i]);
        }
        xsp_jsonw_raw(w, "]", 1);
    }
}

/* The JSON text of string value sid: 1 with *v set, 0 when it is not JSON, -1 unknown. */
static int json_of(const xsp_kineto_cols *c, uint32_t sid, kval *v)
{
    uint32_t lo = 0, hi = c->n_json;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (c->json_sid[mid] < sid)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == c->n_json || c->json_sid[lo] != sid)
        return -1;
    if (!c->json_text[lo].s)
        return 0;
    v->t = V_TEXT;
    v->s = c->json_text[lo].s;
    v->n = c->json_text[lo].n;
    return 1;
}

static const char *name_of(const ctx *x, int64_t sid, size_t *n)
{
    if (sid >= 0 && (uint64_t)sid < x->t->strings.n)
        return str_of(x->t, (uint32_t)sid, n);
    uint64_t k = (uint64_t)sid - x->t->strings.n;
    if (sid >= 0 && k < x->c->n_extra && x->c->extra[k].s) {
        *n = x->c->extra[k].n;
        return x->c->extra[k].s;
    }
    *n = 0;
    return "";
}

static int is_int(const xsp_attr *a)
{
    return a && a->type == XSP_ATTR_INT;
}

/* attribute key (fwd_op, api) of the span naming one of the trace's spans: its id, or -1 */
static int64_t span_ref(const ctx *x, unsigned key)
{
    const xsp_attr *a = x->kv[key];
    return is_int(a) && a->v.i >= 0 && a->v.i < (int64_t)x->t->n_spans ? a->v.i : -1;
}

/* torch's input lists of an op (record_shapes), left out without inputs */
static void put_inputs(ctx *x)
{
    static const struct { unsigned key; const char *name; } IN[4] = {
        {K_CONCRETE_INPUTS, "Concrete Inputs"}, {K_INPUT_TYPES, "Input type"},
        {K_INPUT_STRIDES, "Input Strides"}, {K_INPUT_DIMS, "Input Dims"}};
    const xsp_attr *d = x->kv[K_INPUT_DIMS];
    if (!d)
        return;
    if (d->type == XSP_ATTR_STR) {
        size_t n;
        const char *s = str_of(x->t, d->v.s, &n);
        if (n == 2 && s[0] == '[' && s[1] == ']')
            return;
    }
    for (int k = 0; k < 4; k++) {
        const xsp_attr *a = x->kv[IN[k].key];
        kval v = {0};
        if (a && a->type == XSP_ATTR_STR && json_of(x->c, a->v.s, &v) == 1)
            set(x, IN[k].name, v);
    }
}

/* The rules of the reference writer for span i's kind: its args before its attributes. */
static void kind_args(ctx *x, uint32_t i, unsigned k, int64_t step)
{
    const xsp_kineto_cols *c = x->c;
    const xsp_span *s = &x->t->spans[i];
    kval null = {0};
    null.t = V_NULL;
    if (k == XSP_KIND_REGION)
        set(x, "Op count", vint(0));
    else if (k == XSP_KIND_STEP && step >= 0) {
        int64_t how = c->step_how[step];
        if (how == XSP_KSTEP_STEP)
            set(x, "xsp.iteration", vint(c->step_j[step]));
        else if (how > 0 && how < 4) {
            kval v = {0};
            v.t = V_STR;
            v.s = c->step_why[how].s ? c->step_why[how].s : "";
            v.n = c->step_why[how].n;
            set(x, "xsp.why", v);
        }
    } else if (k == XSP_KIND_MODEL || k == XSP_KIND_MODULE || k == XSP_KIND_PYTHON) {
        int64_t pp = c->near_mod[i];
        set(x, "Python id", vint(c->ext[i]));
        set(x, "Python parent id", pp >= 0 ? vint(c->ext[pp]) : null);
        if (k != XSP_KIND_PYTHON)
            set(x, "Python module id", vint(c->mod_id[i]));
    }
    int cpu = k == XSP_KIND_OP || k == XSP_KIND_BACKWARD || k == XSP_KIND_SCOPE
              || k == XSP_KIND_STEP || k == XSP_KIND_MODEL || k == XSP_KIND_MODULE;
    int gpu = k == XSP_KIND_KERNEL || k == XSP_KIND_MEMCPY || k == XSP_KIND_MEMSET;
    if (cpu) {
        set(x, "External id", vint(c->ext[i]));
        if (k != XSP_KIND_MODEL && k != XSP_KIND_MODULE) {
            set(x, "Record function id", vint(0));
            put_inputs(x);
            set(x, "Ev Idx", vint(c->ext[i] - 1));
        }
        const xsp_attr *seq = x->kv[K_SEQ];
        if (is_int(seq) && seq->v.i >= 0 && (k == XSP_KIND_OP || k == XSP_KIND_BACKWARD)) {
            set(x, "Sequence number", vint(seq->v.i));
            int64_t f = k == XSP_KIND_BACKWARD ? span_ref(x, K_FWD_OP) : -1;
            set(x, "Fwd thread id", vint(f >= 0 ? c->fwd_rank[x->t->spans[f].thread] : 0));
        }
    } else if (k == XSP_KIND_RUNTIME || k == XSP_KIND_DRIVER) {
        if (x->kv[K_CBID])
            set(x, "cbid", attr_val(x->t, x->kv[K_CBID]));
        if (x->kv[K_CORRELATION])
            set(x, "correlation", attr_val(x->t, x->kv[K_CORRELATION]));
        if (c->near_cpu[i] >= 0)
            set(x, "External id", vint(c->ext[c->near_cpu[i]]));
    } else if (gpu || k == XSP_KIND_SYNC) {
        if (c->near_cpu[i] >= 0)
            set(x, "External id", vint(c->ext[c->near_cpu[i]]));
        if (k == XSP_KIND_KERNEL)
            set(x, "queued", vint(0));
        static const struct { unsigned key; const char *name; } COPY[3] = {
            {K_DEVICE, "device"}, {K_STREAM, "stream"}, {K_CORRELATION, "correlation"}};
        for (int j = 0; j < 3; j++)
            if (x->kv[COPY[j].key])
                set(x, COPY[j].name, attr_val(x->t, x->kv[COPY[j].key]));
        if (k == XSP_KIND_KERNEL) {
            if (x->kv[K_REGISTERS])
                set(x, "registers per thread", attr_val(x->t, x->kv[K_REGISTERS]));
            const xsp_attr *ss = x->kv[K_SMEM_STATIC], *sd = x->kv[K_SMEM_DYNAMIC];
            if ((ss || sd) && (!ss || is_int(ss)) && (!sd || is_int(sd)))
                set(x, "shared memory", vint((ss ? ss->v.i : 0) + (sd ? sd->v.i : 0)));
            static const char *const LIST[2] = {"grid", "block"};
            for (int g = 0; g < 2; g++) {
                if (!x->kv[K_GRID_X + 3 * g])
                    continue;
                for (int d = 0; d < 3; d++) {
                    const xsp_attr *a = x->kv[K_GRID_X + 3 * g + d];
                    x->lists[g][d] = a ? attr_val(x->t, a) : vint(1);
                }
                kval v = {0};
                v.t = V_LIST;
                v.n = 3;
                v.items = x->lists[g];
                set(x, LIST[g], v);
            }
        }
        const xsp_attr *b = x->kv[K_BYTES];
        if ((k == XSP_KIND_MEMCPY || k == XSP_KIND_MEMSET) && b) {
            set(x, "bytes", attr_val(x->t, b));
            uint64_t d = s->end_ns - s->start_ns;
            if (b->type != XSP_ATTR_STR) {
                kval v = {0};
                v.t = V_FLOAT;
                double bv = b->type == XSP_ATTR_INT ? (double)b->v.i : b->v.f;
                v.f = d ? bv / (double)d : 0.0;
                set(x, "memory bandwidth (GB/s)", v);
            }
        }
    }
}

/* The attributes of span i, as the reference writer's loop over them. */
static void attr_args(ctx *x, const xsp_span *s)
{
    const xsp_attr *at = x->t->attrs + s->attr_off;
    for (uint32_t j = 0; j < s->attr_n; j++) {
        int later = 0;                  /* a dict keeps a repeated key's last value */
        for (uint32_t m = j + 1; m < s->attr_n && !later; m++)
            later = at[m].key == at[j].key;
        if (later)
            continue;
        unsigned mode = role_of(x, at[j].key) >> 8 & 3;
        size_t n;
        const char *key = str_of(x->t, at[j].key, &n);
        kval v = attr_val(x->t, &at[j]);
        if (mode == M_K)
            put(x, "", key + 2, n - 2, v, 1, 0);
        else if (mode == M_KLIST) {
            if (at[j].type == XSP_ATTR_STR)
                json_of(x->c, at[j].v.s, &v);       /* not JSON: the string itself */
            put(x, "", key + 2, n - 4, v, 1, 0);
        } else if (mode == M_OTHER)
            put(x, "xsp.", key, n, v, 0, 0);
    }
}

/* ",\n" before every event but the first of the array */
static void sep(ctx *x)
{
    if (x->comma)
        xsp_jsonw_raw(x->w, ",\n", 2);
    x->comma = 1;
}

/* The "[memory]" instants of span i, at the first ns of its own time. */
static void memory(ctx *x, uint32_t i)
{
    const xsp_trace *t = x->t;
    if (!x->first) {
        x->first = malloc(sizeof *x->first * t->n_spans);
        x->next = malloc(sizeof *x->next * t->n_spans);
        if (!x->first || !x->next) {
            free(x->first);
            free(x->next);
            x->first = x->next = NULL;
            x->nomem = 1;
            return;
        }
        xsp_kmem_children(t, x->first, x->next);
    }
    const xsp_span *s = &t->spans[i];
    xsp_kmem_write(x->w, &x->kv[K_MEM0], x->c->track_pid[s->thread], x->c->track_tid[s->thread],
                   xsp_kmem_instant(t, x->first, x->next, i), x->c->base_ns);
}

static void write_event(ctx *x, uint32_t i, int64_t *step_cur, int64_t *lev_cur)
{
    const xsp_trace *t = x->t;
    const xsp_kineto_cols *c = x->c;
    const xsp_span *s = &t->spans[i];
    unsigned k = s->kind < XSP_NKINDS ? s->kind : XSP_KIND_OVERHEAD;
    xsp_jsonw *w = x->w;
    memset(x->kv, 0, sizeof x->kv);
    const xsp_attr *at = t->attrs + s->attr_off;
    unsigned has_mem = 0;
    for (uint32_t j = 0; j < s->attr_n; j++) {
        unsigned role = role_of(x, at[j].key), known = role & 0xFF;
        has_mem |= role & ROLE_MEM;
        if (known)
            x->kv[known] = &at[j];
    }
    int64_t step = -1;
    while (*step_cur < c->n_steps && c->step_id[*step_cur] < i)
        ++*step_cur;
    if (*step_cur < c->n_steps && c->step_id[*step_cur] == i)
        step = *step_cur;
    x->n_args = 0;
    kind_args(x, i, k, k == XSP_KIND_STEP ? step : -1);
    /* what only xsp knows */
    set(x, "xsp.id", vint(i));
    kval v = {0};
    v.t = V_STR;
    v.s = xsp_kind_name(k);
    v.n = strlen(v.s);
    set(x, "xsp.kind", v);
    v.s = xsp_level_name(s->level);
    v.n = strlen(v.s);
    set(x, "xsp.level", v);
    if (k == XSP_KIND_MODEL || k == XSP_KIND_MODULE) {
        v.s = str_of(t, s->name, &v.n);
        set(x, "xsp.module", v);
    }
    attr_args(x, s);
    if (is_int(x->kv[K_FWD_OP]))
        set(x, "xsp.fwd_op", vint(x->kv[K_FWD_OP]->v.i));
    while (*lev_cur < c->n_lev && c->lev_id[*lev_cur] < i)
        ++*lev_cur;
    if (*lev_cur < c->n_lev && c->lev_id[*lev_cur] == i) {
        kval lv = {0};
        if (c->lev_float) {
            lv.t = V_FLOAT;
            lv.f = c->lev_float[*lev_cur];
        } else
            lv = vint(c->lev_int[*lev_cur]);
        set(x, "xsp.leveled_ns", lv);
    }
    /* the event */
    sep(x);
    xsp_jsonw_lit(w, "{\"ph\": \"X\", \"cat\": ");
    if (x->kv[K_KCAT]) {                /* a read event's own category */
        kval cv = attr_val(t, x->kv[K_KCAT]);
        write_val(w, &cv);
    } else
        xsp_jsonw_str(w, CATEGORY[k], strlen(CATEGORY[k]));
    xsp_jsonw_lit(w, ", \"name\": ");
    size_t nn;
    const char *name = name_of(x, c->name_sid[i], &nn);
    xsp_jsonw_str(w, name, nn);
    if (k == XSP_KIND_REGION)
        xsp_jsonw_lit(w, ", \"pid\": \"Spans\", \"tid\": \"PyTorch Profiler\", \"ts\": ");
    else {
        xsp_jsonw_lit(w, ", \"pid\": ");
        xsp_jsonw_int(w, c->track_pid[s->thread]);
        xsp_jsonw_lit(w, ", \"tid\": ");
        xsp_jsonw_uint(w, c->track_tid[s->thread]);
        xsp_jsonw_lit(w, ", \"ts\": ");
    }
    if (step >= 0 && k == XSP_KIND_STEP && c->step_how[step] == XSP_KSTEP_STEP) {
        uint64_t s0 = c->step_s0[step], e0 = c->step_e0[step];
        xsp_jsonw_us(w, s0, c->base_ns);
        xsp_jsonw_lit(w, ", \"dur\": ");
        if (e0 < s0)
            xsp_jsonw_raw(w, "-", 1);
        xsp_jsonw_us(w, e0 < s0 ? s0 - e0 : e0 - s0, 0);
    } else {
        xsp_jsonw_us(w, s->start_ns, c->base_ns);
        xsp_jsonw_lit(w, ", \"dur\": ");
        xsp_jsonw_us(w, s->end_ns - s->start_ns, 0);
    }
    xsp_jsonw_lit(w, ", \"args\": {");
    for (uint32_t j = 0; j < x->n_args; j++) {
        const karg *a = &x->args[j];
        if (j)
            xsp_jsonw_raw(w, ", ", 2);
        if (a->lit) {
            xsp_jsonw_raw(w, "\"", 1);
            xsp_jsonw_raw(w, a->k, a->kn);
            xsp_jsonw_raw(w, "\": ", 3);
        } else {
            xsp_jsonw_str2(w, a->pre, a->k, a->kn);
            xsp_jsonw_raw(w, ": ", 2);
        }
        write_val(w, &a->v);
    }
    xsp_jsonw_lit(w, "}}");
    if (has_mem && k != XSP_KIND_REGION)       /* profile_memory: as torch writes it */
        memory(x, i);
}

/* One flow event: {"ts": .., "ph": .., "id": .., "pid": .., "tid": .., "cat": .., "name": ..} */
static void flow(ctx *x, const char *ph, const kval *id, uint32_t track, uint64_t ts_ns,
                 const char *cat)
{
    xsp_jsonw *w = x->w;
    sep(x);
    xsp_jsonw_lit(w, "{\"ts\": ");
    xsp_jsonw_us(w, ts_ns, x->c->base_ns);
    xsp_jsonw_lit(w, ", \"ph\": \"");
    xsp_jsonw_lit(w, ph);
    xsp_jsonw_lit(w, "\", \"id\": ");
    write_val(w, id);
    xsp_jsonw_lit(w, ", \"pid\": ");
    xsp_jsonw_int(w, x->c->track_pid[track]);
    xsp_jsonw_lit(w, ", \"tid\": ");
    xsp_jsonw_uint(w, x->c->track_tid[track]);
    xsp_jsonw_lit(w, ", \"cat\": \"");
    xsp_jsonw_lit(w, cat);
    xsp_jsonw_lit(w, "\", \"name\": \"");
    xsp_jsonw_lit(w, cat);
    xsp_jsonw_lit(w, ph[0] == 'f' ? "\", \"bp\": \"e\"}" : "\"}");
}

static void flows(ctx *x)
{
    const xsp_trace *t = x->t;
    int64_t flow_id = 0;
    for (uint32_t i = 0; i < t->n_spans; i++) {
        const xsp_span *s = &t->spans[i];
        unsigned k = s->kind;
        int gpu = k == XSP_KIND_KERNEL || k == XSP_KIND_MEMCPY || k == XSP_KIND_MEMSET;
        if (!gpu && k != XSP_KIND_BACKWARD)
            continue;
        memset(x->kv, 0, sizeof x->kv);
        const xsp_attr *at = t->attrs + s->attr_off;
        for (uint32_t j = 0; j < s->attr_n; j++) {
            unsigned known = role_of(x, at[j].key) & 0xFF;
            if (known)
                x->kv[known] = &at[j];
        }
        int64_t j;
        if (gpu && x->kv[K_CORRELATION] && (j = span_ref(x, K_API)) >= 0) {
            kval id = attr_val(t, x->kv[K_CORRELATION]);
            flow(x, "s", &id, t->spans[j].thread, t->spans[j].start_ns, "ac2g");
            flow(x, "f", &id, s->thread, s->start_ns, "ac2g");
        }
        if (k == XSP_KIND_BACKWARD && (j = span_ref(x, K_FWD_OP)) >= 0) {
            kval id = vint(++flow_id);
            flow(x, "s", &id, t->spans[j].thread, t->spans[j].start_ns, "fwdbwd");
            flow(x, "f", &id, s->thread, s->start_ns, "fwdbwd");
        }
    }
    for (uint32_t n = 0; n < x->c->n_spawn; n++) {
        int64_t i = x->c->spawn_i[n], j = x->c->spawn_j[n];
        if (i < 0 || j < 0 || i >= (int64_t)t->n_spans || j >= (int64_t)t->n_spans)
            continue;
        kval id = vint(++flow_id);
        flow(x, "s", &id, t->spans[j].thread, t->spans[i].start_ns, "xsp_intraop");
        flow(x, "f", &id, t->spans[i].thread, t->spans[i].start_ns, "xsp_intraop");
    }
}

int xsp_kineto_write_events(xsp_jsonw *w, const xsp_trace *t, const xsp_kineto_cols *cols,
                            int comma)
{
    ctx x = {0};
    x.w = w;
    x.t = t;
    x.c = cols;
    x.comma = comma;
    uint32_t most = 0;
    for (uint32_t i = 0; i < t->n_spans; i++)
        if (t->spans[i].attr_n > most)
            most = t->spans[i].attr_n;
    x.role = malloc(sizeof *x.role * (t->strings.n ? t->strings.n : 1));
    x.args = malloc(sizeof *x.args * (most + 32));
    if (!x.role || !x.args) {
        free(x.role);
        free(x.args);
        return -1;
    }
    memset(x.role, 0xFF, sizeof *x.role * t->strings.n);
    int64_t step_cur = 0, lev_cur = 0;
    for (uint32_t i = 0; i < t->n_spans && !xsp_jsonw_failed(w); i++)
        write_event(&x, i, &step_cur, &lev_cur);
    flows(&x);
    free(x.role);
    free(x.args);
    free(x.first);
    free(x.next);
    return x.nomem ? -1 : 0;
}
