/*
 * kjevent.c: one event of the Kineto JSON reader (kjson.h), judged whole when its object ends
 * (its fields may come in any order): a complete event (ph X) becomes a kj_rec with the
 * attributes xsp derives from its own fields (seq, the op inputs, a step's and a module's
 * names, the GPU ids; a slot reserved for api or fwd_op, which kbuild.c fills), a
 * thread_name a kj_tname, a fwdbwd flow end a kj_flow; the rest is counted.  Every field of
 * the wrong type is refused here, naming the event and the field.
 */
#include "kjson_impl.h"

#include <stdlib.h>
#include <string.h>

/* -- the event ------------------------------------------------------------------------------- */

static int str_is(const xsp_kjson *r, const kj_val *v, const char *lit)
{
    size_t n;
    const char *s = v->type == KV_STR ? xsp_strtab_get(&r->t->strings, v->s, &n) : NULL;
    return s && n == strlen(lit) && memcmp(s, lit, n) == 0;
}

/* The key id of a pid, tid or flow id (bool, arrays and objects refused by the caller). */
static uint32_t key_of(xsp_kjson *r, const kj_val *v)
{
    unsigned char b[9];
    size_t n = 1;
    b[0] = v->type == KV_ABSENT ? KV_NULL : v->type;
    if (v->type == KV_INT) {
        memcpy(b + 1, &v->i, 8);
        n = 9;
    } else if (v->type == KV_STR || v->type == KV_NUM) {
        memcpy(b + 1, &v->s, 4);
        n = 5;
    }
    uint32_t id = xsp_strtab_intern(&r->keys, (const char *)b, n);
    if (id == UINT32_MAX)
        xsp_kj_nomem(r);
    return id;
}

/* Checks that field what of event i (v) is an id: an integer, another number, a string or
 * null. */
static int check_id(xsp_kjson *r, const kj_val *v, const char *what, int64_t i)
{
    if (v->type == KV_BOOL || v->type == KV_ARRAY || v->type == KV_OBJECT)
        return xsp_kj_fail(r, i, -1, "%s must be an integer or a string, not %s", what,
                           xsp_kj_type_name(v->type));
    return 0;
}

static int check_time(xsp_kjson *r, const kj_time *t, const char *what, int64_t i)
{
    if (t->status == KT_TYPE)
        return xsp_kj_fail(r, i, -1, "%s must be a number, not %s", what,
                           xsp_kj_type_name(t->type));
    if (t->status == KT_RANGE)
        return xsp_kj_fail(r, i, -1, "%s %s is out of range (more than 2**63 ns)", what,
                           t->text);
    return 0;
}

/* The attribute with key id key among the event's, or NULL. */
static xsp_attr *ev_attr(xsp_kjson *r, uint32_t key)
{
    for (uint32_t j = r->ev_attr0; j < r->t->n_attrs; j++)
        if (r->t->attrs[j].key == key)
            return &r->t->attrs[j];
    return NULL;
}

/* Sets (replacing) or appends an attribute of the event. */
static int ev_set(xsp_kjson *r, int key, xsp_attr a)
{
    if ((a.key = xsp_kj_intern_id(r, key)) == UINT32_MAX)
        return -1;
    xsp_attr *old = ev_attr(r, a.key);
    if (old) {
        *old = a;
        return 0;
    }
    return xsp_trace_add_attr(r->t, &a) == UINT32_MAX ? xsp_kj_nomem(r) : 0;
}

static int ev_set_int(xsp_kjson *r, int key, int64_t v)
{
    return ev_set(r, key, (xsp_attr){.type = XSP_ATTR_INT, .v.i = v});
}

/* An id-like arg of a GPU or API event (correlation, device, stream): absent, or an integer;
 * anything else is refused, naming it. */
static int check_int_arg(xsp_kjson *r, int plain, int json, const char *what, int64_t i)
{
    xsp_attr *a = ev_attr(r, xsp_kj_id(r, plain));
    const char *bad = NULL;
    if (a && a->type == XSP_ATTR_STR) {
        /* a string, or an integer past int64 kept as its text: digits that would not fit */
        size_t n = 0;
        const char *s = xsp_strtab_get(&r->t->strings, a->v.s, &n);
        size_t neg = n && s[0] == '-', d = neg;
        while (d < n && s[d] >= '0' && s[d] <= '9')
            d++;
        size_t digits = n - neg;
        if (d == n && digits > 0 && s[neg] != '0'
            && (digits > 19 || (digits == 19 && strncmp(s + neg, neg ? "9223372036854775808"
                                                         : "9223372036854775807", 19) > 0)))
            return xsp_kj_fail(r, i, -1, "args.%s %.20s... (%zu digits) is out of int64's "
                               "range", what, s, digits);
    }
    if (a && a->type != XSP_ATTR_INT)
        bad = a->type == XSP_ATTR_FLOAT ? "float" : "str";
    a = ev_attr(r, xsp_kj_id(r, json));
    if (a) {
        const char *s = xsp_strtab_get(&r->t->strings, a->v.s, NULL);
        bad = s[0] == '[' ? "list" : s[0] == '{' ? "dict" : "NoneType";
    }
    if (bad)
        return xsp_kj_fail(r, i, -1, "args.%s must be an integer, not %s", what, bad);
    return 0;
}

/* grid or block: "k.<ax>[]" holding [x, y, z] of integers, as <ax>_x, _y, _z. */
static int put_dim3(xsp_kjson *r, int src, int dst)
{
    xsp_attr *a = ev_attr(r, xsp_kj_id(r, src));
    if (!a)
        return 0;
    const char *s = xsp_strtab_get(&r->t->strings, a->v.s, NULL);
    int64_t v[3];
    for (int k = 0; k < 3; k++) {
        if (*s++ != (k ? ',' : '['))
            return 0;
        while (*s == ' ')
            s++;
        const char *e = s + (*s == '-');
        while (*e >= '0' && *e <= '9')
            e++;
        if (e == s || xsp_kj_parse_i64(s, (size_t)(e - s), &v[k]) != 0)
            return 0;
        s = e;
    }
    if (strcmp(s, "]") != 0)
        return 0;
    for (int k = 0; k < 3; k++)
        if (ev_set_int(r, dst + k, v[k]))
            return -1;
    return 0;
}

/* The kind of a complete event from its category and name alone (backward and model are
 * told in kbuild.c from the nesting), or -1 for an event that is no span (counted). */
static int kind_of(xsp_kjson *r)
{
    const kj_val *c = &r->ev.cat;
    uint32_t cat = c->type == KV_STR ? c->s : 0;
    size_t n;
    const char *name = xsp_strtab_get(&r->t->strings, r->ev.name.s, &n);
    static const int gpu[][2] = {{S_KERNEL, XSP_KIND_KERNEL}, {S_MEMCPY, XSP_KIND_MEMCPY},
                                 {S_MEMSET, XSP_KIND_MEMSET}, {S_SYNC, XSP_KIND_SYNC},
                                 {S_OVERHEAD, XSP_KIND_OVERHEAD}};
    for (size_t k = 0; k < sizeof gpu / sizeof gpu[0]; k++)
        if (cat == xsp_kj_id(r, gpu[k][0]))
            return gpu[k][1];
    if (cat == xsp_kj_id(r, S_TRACE))
        return r->region < 0 ? XSP_KIND_REGION : -1;   /* a second Trace span: counted */
    if (cat == 0 && r->ev.pid.type == KV_STR)
        return -1;                                      /* a viewer's own track */
    if (cat == xsp_kj_id(r, S_CPU_OP))
        return XSP_KIND_OP;
    if (cat == xsp_kj_id(r, S_USER_ANN))
        return n > 13 && memcmp(name, "ProfilerStep#", 13) == 0 ? XSP_KIND_STEP
                                                                : XSP_KIND_SCOPE;
    if (cat == xsp_kj_id(r, S_PYFUNC))
        return n >= 11 && memcmp(name, "nn.Module: ", 11) == 0 ? XSP_KIND_MODULE
                                                               : XSP_KIND_PYTHON;
    if (cat == xsp_kj_id(r, S_RUNTIME))
        return XSP_KIND_RUNTIME;
    if (cat == xsp_kj_id(r, S_DRIVER))
        return XSP_KIND_DRIVER;
    return XSP_KIND_SCOPE;                              /* gpu_user_annotation, ... */
}

static int is_gpu_kind(int kind)
{
    return kind >= XSP_KIND_KERNEL && kind <= XSP_KIND_OVERHEAD;
}

/* The attributes xsp derives from a complete event's own fields; *name may change (a step). */
static int derive(xsp_kjson *r, int kind, uint32_t *name, int64_t i)
{
    if (kind == XSP_KIND_OP) {
        xsp_attr *seq = ev_attr(r, xsp_kj_id(r, S_K_SEQ));
        if (seq && seq->type == XSP_ATTR_INT && ev_set_int(r, S_SEQ, seq->v.i))
            return -1;
    }
    if (kind == XSP_KIND_OP || kind == XSP_KIND_SCOPE) {
        static const int inputs[][2] = {{S_K_CONCRETE, S_CONCRETE}, {S_K_TYPES, S_TYPES},
                                        {S_K_STRIDES, S_STRIDES}, {S_K_DIMS, S_DIMS}};
        xsp_attr *dims = ev_attr(r, xsp_kj_id(r, S_K_DIMS));
        if (dims && xsp_strtab_get(&r->t->strings, dims->v.s, NULL)[0] == '[') {
            for (size_t k = 0; k < 4; k++) {
                xsp_attr *a = ev_attr(r, xsp_kj_id(r, inputs[k][0]));
                if (a && xsp_strtab_get(&r->t->strings, a->v.s, NULL)[0] == '['
                    && ev_set(r, inputs[k][1], (xsp_attr){.type = XSP_ATTR_STR, .v.s = a->v.s}))
                    return -1;
            }
        }
    }
    size_t n;
    const char *s = xsp_strtab_get(&r->t->strings, *name, &n);
    if (kind == XSP_KIND_STEP || kind == XSP_KIND_REGION) {
        if (ev_set(r, S_K_NAME, (xsp_attr){.type = XSP_ATTR_STR, .v.s = *name}))
            return -1;
    }
    if (kind == XSP_KIND_STEP) {                /* "ProfilerStep#N" -> "step#N" (N stripped) */
        const char *a = memchr(s, '#', n) + 1, *b = s + n;
        while (a < b && (*a == ' ' || (*a >= '\t' && *a <= '\r')))
            a++;
        while (b > a && (b[-1] == ' ' || (b[-1] >= '\t' && b[-1] <= '\r')))
            b--;
        r->buf_len = 0;
        if (xsp_kj_put(r, "step#", 5) || xsp_kj_put(r, a, (size_t)(b - a))
            || (*name = xsp_kj_intern(r, r->buf, r->buf_len)) == UINT32_MAX)
            return -1;
    }
    if (kind == XSP_KIND_MODULE) {              /* "nn.Module: Linear_0" -> type "Linear" */
        const char *a = s + 11, *b = s + n;
        const char *u = b;
        while (u > a && u[-1] != '_')
            u--;
        if (u > a)
            b = u - 1;
        uint32_t typ = xsp_kj_intern(r, a, (size_t)(b - a));
        if (typ == UINT32_MAX || ev_set(r, S_TYPE, (xsp_attr){.type = XSP_ATTR_STR, .v.s = typ}))
            return -1;
    }
    if (is_gpu_kind(kind) || kind == XSP_KIND_RUNTIME || kind == XSP_KIND_DRIVER) {
        if (check_int_arg(r, S_K_CORR, S_K_CORR_J, "correlation", i))
            return -1;
        if (is_gpu_kind(kind) && (check_int_arg(r, S_K_DEVICE, S_K_DEVICE_J, "device", i)
                                  || check_int_arg(r, S_K_STREAM, S_K_STREAM_J, "stream", i)))
            return -1;
        static const int ints[][2] = {{S_K_CORR, S_CORR}, {S_K_DEVICE, S_DEVICE},
                                      {S_K_STREAM, S_STREAM}, {S_K_CBID, S_CBID},
                                      {S_K_BYTES, S_BYTES}, {S_K_REGS, S_REGS}};
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
            xsp_attr *a = ev_attr(r, xsp_kj_id(r, ints[k][0]));
            if (a && a->type == XSP_ATTR_INT && ev_set_int(r, ints[k][1], a->v.i))
                return -1;
        }
        if (put_dim3(r, S_K_GRID, S_GRID_X) || put_dim3(r, S_K_BLOCK, S_BLOCK_X))
            return -1;
    }
    if (kind != XSP_KIND_REGION && r->ev.cat.type == KV_STR && r->ev.cat.s != 0
        && ev_set(r, S_K_CAT, (xsp_attr){.type = XSP_ATTR_STR, .v.s = r->ev.cat.s}))
        return -1;
    return 0;
}

/* A complete event (ph X), checked whole: kept as a record, or counted. */
static int end_complete(xsp_kjson *r, int64_t i)
{
    static const struct { int key; const char *name; } need[] = {
        {EK_NAME, "name"}, {EK_TS, "ts"}, {EK_DUR, "dur"}};
    for (size_t k = 0; k < 3; k++) {
        int absent = need[k].key == EK_NAME ? r->ev.name.type == KV_ABSENT
                   : need[k].key == EK_TS ? r->ev.ts.status == KT_ABSENT
                                          : r->ev.dur.status == KT_ABSENT;
        if (absent)
            return xsp_kj_fail(r, i, -1, "a complete event (ph X) without '%s'", need[k].name);
    }
    if (r->ev.name.type != KV_STR)
        return xsp_kj_fail(r, i, -1, "name must be a string, not %s",
                           xsp_kj_type_name(r->ev.name.type));
    if (r->ev.args != KV_ABSENT && r->ev.args != KV_OBJECT)
        return xsp_kj_fail(r, i, -1, "args must be an object, not %s",
                           xsp_kj_type_name(r->ev.args));
    if (check_time(r, &r->ev.ts, "ts", i) || check_time(r, &r->ev.dur, "dur", i))
        return -1;
    if (r->ev.dur.ns < 0)
        return xsp_kj_fail(r, i, -1, "dur %s is negative", r->ev.dur.text);
    if (check_id(r, &r->ev.pid, "pid", i) || check_id(r, &r->ev.tid, "tid", i))
        return -1;
    if (r->ev.cat.type != KV_ABSENT && r->ev.cat.type != KV_NULL && r->ev.cat.type != KV_STR)
        return xsp_kj_fail(r, i, -1, "cat must be a string, not %s",
                           xsp_kj_type_name(r->ev.cat.type));
    int kind = kind_of(r);
    if (kind < 0) {
        r->skipped++;
        r->t->n_attrs = r->ev_attr0;
        return 0;
    }
    uint32_t name = r->ev.name.s;
    if (derive(r, kind, &name, i))
        return -1;
    uint32_t n = r->t->n_attrs - r->ev_attr0;
    if (n > XSP_KJSON_MAX_ATTRS)
        return xsp_kj_fail(r, i, -1, "%u args: more than xsp keeps per span (%d)", (unsigned)n,
                           XSP_KJSON_MAX_ATTRS);
    int slot = kind == XSP_KIND_OP || is_gpu_kind(kind);   /* fwd_op or api, at the end */
    if (slot && xsp_trace_add_attr(r->t, &(xsp_attr){0}) == UINT32_MAX)
        return xsp_kj_nomem(r);
    if (xsp_kj_grow((void **)&r->recs, &r->cap_recs, r->n_recs, sizeof *r->recs))
        return xsp_kj_nomem(r);
    kj_rec *rec = &r->recs[r->n_recs];
    *rec = (kj_rec){.ts = r->ev.ts.ns, .dur = r->ev.dur.ns, .name = name,
                    .cat = r->ev.cat.type == KV_STR ? r->ev.cat.s : 0,
                    .pid = key_of(r, &r->ev.pid), .tid = key_of(r, &r->ev.tid),
                    .index = (uint32_t)i, .attr_off = r->ev_attr0, .attr_n = (uint16_t)n,
                    .kind = (uint8_t)kind, .slot = (uint8_t)slot};
    if (rec->pid == UINT32_MAX || rec->tid == UINT32_MAX)
        return -1;
    if (kind == XSP_KIND_REGION)
        r->region = r->n_recs;
    r->n_recs++;
    return 0;
}

/* An integer arg of the event being judged (its "k.<arg>" key well-known string k): 1 with
 * *v, 0 when absent, -1 (refused, naming it) when it is there but not an integer. */
static int int_arg(xsp_kjson *r, int k, const char *what, int64_t i, int64_t *v)
{
    xsp_attr *a = ev_attr(r, xsp_kj_id(r, k));
    if (!a)
        return 0;
    if (a->type != XSP_ATTR_INT)
        return xsp_kj_fail(r, i, -1, "args.%s must be an integer", what);
    *v = a->v.i;
    return 1;
}

/* A "[memory]" instant event (ph i): an allocation (Bytes > 0) or free of profile_memory,
 * kept for kbuild.c to fold into the span it happened in, as a recording does (replay.c). */
static int end_memory(xsp_kjson *r, int64_t i)
{
    int64_t bytes = 0, total = 0, devtype = 0;
    int rc = 0;
    if (r->ev.args != KV_OBJECT || r->ev.ts.status != KT_OK
        || (rc = int_arg(r, S_K_MEM_BYTES, "Bytes", i, &bytes)) <= 0) {
        r->t->n_attrs = r->ev_attr0;
        if (rc < 0 || check_time(r, &r->ev.ts, "ts", i))
            return -1;
        r->skipped++;                           /* no time or no size: not an allocation */
        return 0;
    }
    if (int_arg(r, S_K_MEM_TOTAL, "Total Allocated", i, &total) < 0
        || int_arg(r, S_K_MEM_DEVTYPE, "Device Type", i, &devtype) < 0
        || check_id(r, &r->ev.pid, "pid", i) || check_id(r, &r->ev.tid, "tid", i))
        return -1;
    r->t->n_attrs = r->ev_attr0;
    if (xsp_kj_grow((void **)&r->mems, &r->cap_mems, r->n_mems, sizeof *r->mems))
        return xsp_kj_nomem(r);
    kj_mem *m = &r->mems[r->n_mems];
    *m = (kj_mem){.ts = r->ev.ts.ns, .bytes = bytes, .total = total,
                  .pid = key_of(r, &r->ev.pid), .tid = key_of(r, &r->ev.tid),
                  .index = (uint32_t)i, .dev = devtype == 0 ? 0 : devtype == 1 ? 1 : 2};
    if (m->pid == UINT32_MAX || m->tid == UINT32_MAX)
        return -1;
    r->n_mems++;
    return 0;
}

/* The end of an event's object. */
int xsp_kj_end_event(xsp_kjson *r)
{
    int64_t i = (int64_t)r->n_events - 1;
    const kj_val *ph = &r->ev.ph;
    if (ph->type != KV_ABSENT && ph->type != KV_STR)
        return xsp_kj_fail(r, i, -1, "ph must be a string, not %s", xsp_kj_type_name(ph->type));
    if (str_is(r, ph, "X"))
        return end_complete(r, i);
    if (str_is(r, ph, "i") && str_is(r, &r->ev.name, "[memory]"))
        return end_memory(r, i);
    r->t->n_attrs = r->ev_attr0;                /* only complete events keep their args */
    if (str_is(r, ph, "M")) {
        if (check_id(r, &r->ev.pid, "pid", i) || check_id(r, &r->ev.tid, "tid", i))
            return -1;
        if (str_is(r, &r->ev.name, "thread_name") && r->ev.args == KV_OBJECT) {
            if (xsp_kj_grow((void **)&r->tnames, &r->cap_tnames, r->n_tnames, sizeof *r->tnames))
                return xsp_kj_nomem(r);
            kj_tname *tn = &r->tnames[r->n_tnames];
            tn->pid = key_of(r, &r->ev.pid);
            tn->tid = key_of(r, &r->ev.tid);
            tn->name = r->ev.tname.type == KV_STR ? r->ev.tname.s : 0;
            if (tn->pid == UINT32_MAX || tn->tid == UINT32_MAX)
                return -1;
            r->n_tnames++;
        }
        return 0;
    }
    int s = str_is(r, ph, "s"), f = str_is(r, ph, "f");
    if (s || f || str_is(r, ph, "t")) {
        r->n_flow_ev++;
        if ((s || f) && r->ev.cat.type == KV_STR && r->ev.cat.s == xsp_kj_id(r, S_FWDBWD)) {
            if (check_id(r, &r->ev.id, "id", i) || check_id(r, &r->ev.pid, "pid", i)
                || check_id(r, &r->ev.tid, "tid", i))
                return -1;
            if (r->ev.ts.status != KT_OK)
                return 0;                       /* a flow end without a usable time: unused */
            if (xsp_kj_grow((void **)&r->flows, &r->cap_flows, r->n_flows, sizeof *r->flows))
                return xsp_kj_nomem(r);
            kj_flow *fl = &r->flows[r->n_flows];
            *fl = (kj_flow){.ts = r->ev.ts.ns, .id = key_of(r, &r->ev.id),
                            .pid = key_of(r, &r->ev.pid), .tid = key_of(r, &r->ev.tid),
                            .start = (uint8_t)s};
            if (fl->id == UINT32_MAX || fl->pid == UINT32_MAX || fl->tid == UINT32_MAX)
                return -1;
            r->n_flows++;
        }
        return 0;
    }
    r->skipped++;
    return 0;
}

void xsp_kj_begin_event(xsp_kjson *r)
{
    memset(&r->ev, 0, sizeof r->ev);
    r->ev_attr0 = r->t->n_attrs;
    r->n_args = 0;
    r->n_events++;
}

