/*
 * modsites.c: xsp._core.ModuleSites, the call sites of recorded module calls (modsites.h).
 *
 * What it is for: every model and module span says where its code is, "source" (file:line of
 * the forward of the module's class: co_filename:co_firstlineno), and where it was called
 * from, "call_site" (file:line of the Python frame that called the module).  Building those
 * strings per call would cost more than the rest of the module wrapper, so a call only finds
 * its site, and the strings are made at stop, once per site.
 *
 * A site is (the calling frame's code object, its instruction offset, type(module)): the
 * same call expression calling modules of one class is one site, so a model's sites are a
 * few hundred at most whatever the number of calls.  The module wrapper (modcall.c) looks a
 * recorded call's site up here, per call through xsp_sites_lookup (Python code can ask the
 * same through here(), for a call made by its caller), and passes its index as the span's a0;
 * the merge makes a0 the span's integer attribute "site" (core/merge.c), and at stop the
 * session (sessionmod.c, decorate) calls xsp_sites_attach, which turns "site" into "source"
 * and "call_site".  The table belongs to one profile (xsp/producers/profiler.py, _ModuleCalls) and
 * lives as long as it: a schedule's cycles share it, so an index means the same site in
 * every cycle.
 *
 * Per call: the calling frame (PyEval_GetFrame, borrowed; on 3.11 and later it makes the
 * frame object of a frame that has none, once per activation of the calling function, which
 * CPython frees when that function returns), its code object and instruction offset, a hash
 * and a probe of the table (codetab.h: open addressing, kept at most half full).  Nothing is
 * allocated for a site seen before.  A new site takes strong references to its code object,
 * its type and the forward's code object, so that no address it is matched by can be reused
 * while the table lives, and may double the table.  No Python code runs in a lookup: the forward is read from
 * the dicts along the type's MRO (a module's `forward` is a class attribute; one set on an
 * instance is not seen) and unwrapped through the __wrapped__ attributes functools.wraps sets
 * (a plain function's attribute read runs none), so under the GIL a lookup is atomic; a
 * free-threaded build takes the table's mutex.  A site that cannot be stored (out of memory)
 * gives -1 (no attributes for that span), counted and reported at the next attach as the
 * trace counter "source.lost".
 */
#include "pyexc.h"
#include "modsites.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codetab.h"
#include "tracedata.h"

#define MAX_UNWRAP 32           /* __wrapped__ links followed at most (a cycle stops there) */

typedef struct site {
    PyObject *code;             /* code object of the calling frame (strong) */
    PyObject *type;             /* type(module) (strong) */
    PyObject *fwd;              /* code object of the class's forward (strong), or NULL */
    int lasti;                  /* the call's instruction offset in code, in bytes */
} site;

typedef struct {
    PyObject_HEAD
    xsp_codetab sites;          /* the sites, by index (a site's number), keyed by (code,
                                 * lasti, type) hashed by xsp_codetab_hash; owned */
    PyObject *forward;          /* the str "forward" (strong) */
    PyObject *wrapped;          /* the str "__wrapped__" (strong) */
    long long lost;             /* sites that could not be stored since the last attach */
#ifdef Py_GIL_DISABLED
    PyMutex lock;               /* protects everything above but the two str */
#endif
} SitesObject;

#ifdef Py_GIL_DISABLED
#define LOCK(s) PyMutex_Lock(&(s)->lock)
#define UNLOCK(s) PyMutex_Unlock(&(s)->lock)
#else
#define LOCK(s) ((void)0)       /* the GIL: a lookup runs no Python code, so nothing */
#define UNLOCK(s) ((void)0)     /* can run between its probe and its insert */
#endif

/* Site i (i < s->sites.n). */
static site *site_at(const SitesObject *s, int64_t i)
{
    return xsp_codetab_at(&s->sites, (uint32_t)i);
}

static PyObject *type_dict(PyTypeObject *tp)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *d = PyType_GetDict(tp);   /* new reference */
    Py_XDECREF(d);                      /* the type keeps it */
    return d;
#else
    return tp->tp_dict;
#endif
}

/* The code object of the forward of class tp, unwrapped (a new reference), or NULL when it is
 * not a Python function.  Runs no Python code: dicts along the MRO, then the __wrapped__ of
 * plain functions (a generic attribute read, whose only source is the function's own dict);
 * leaves no exception set. */
static PyObject *forward_code(SitesObject *s, PyTypeObject *tp)
{
    PyObject *mro = tp->tp_mro, *fn = NULL;
    for (Py_ssize_t i = 0; mro && PyTuple_Check(mro) && i < PyTuple_GET_SIZE(mro) && !fn; i++) {
        PyObject *d = type_dict((PyTypeObject *)PyTuple_GET_ITEM(mro, i));
        fn = d ? PyDict_GetItemWithError(d, s->forward) : NULL;   /* borrowed */
    }
    PyErr_Clear();
    if (!fn || !PyFunction_Check(fn))
        return NULL;
    Py_INCREF(fn);
    for (int k = 0; k < MAX_UNWRAP; k++) {   /* functools.wraps' chain to the user's code */
        PyObject *w = PyObject_GenericGetAttr(fn, s->wrapped);
        if (!w) {
            PyErr_Clear();
            break;
        }
        if (!PyFunction_Check(w)) {
            Py_DECREF(w);
            break;
        }
        Py_SETREF(fn, w);
    }
    PyObject *code = Py_NewRef(PyFunction_GET_CODE(fn));
    Py_DECREF(fn);
    return code;
}

/* Stores a new site (fwd: its forward's code, a reference stolen, or NULL) at slot j: its
 * index, or -1 (out of memory, counted; the table unchanged, fwd released). */
static int64_t add_site(SitesObject *s, uint32_t j, PyObject *code, int lasti, PyTypeObject *tp,
                        uint64_t h, PyObject *fwd)
{
    site e = {.code = code, .type = (PyObject *)tp, .fwd = fwd, .lasti = lasti};
    int64_t i = xsp_codetab_add(&s->sites, j, h, &e);
    if (i < 0) {
        Py_XDECREF(fwd);
        s->lost++;
        return -1;
    }
    Py_INCREF(code);            /* the site's references */
    Py_INCREF(tp);
    return i;
}

/* Probes for (code, lasti, tp): its index, or -1 with *slot the empty slot where it belongs. */
static int64_t probe(const SitesObject *s, const PyObject *code, int lasti,
                     const PyTypeObject *tp, uint64_t h, uint32_t *slot)
{
    uint32_t j = xsp_codetab_probe(&s->sites, h);
    for (uint32_t k; (k = xsp_codetab_next(&s->sites, h, &j)) != 0;) {
        const site *e = site_at(s, k - 1);
        if (e->code == code && e->lasti == lasti && e->type == (PyObject *)tp)
            return k - 1;
    }
    *slot = j;
    return -1;
}

int64_t xsp_sites_lookup(PyObject *o, PyFrameObject *f, PyTypeObject *tp)
{
    if (f == NULL)
        return -1;
    SitesObject *s = (SitesObject *)o;
    PyCodeObject *code = PyFrame_GetCode(f);   /* new reference; the running frame keeps one */
    int lasti = PyFrame_GetLasti(f);
    Py_DECREF(code);
    uint64_t h = xsp_codetab_hash(code, lasti, tp);
    uint32_t j;
    LOCK(s);
    int64_t idx = probe(s, (PyObject *)code, lasti, tp, h, &j);
    UNLOCK(s);
    if (idx >= 0)
        return idx;
    /* a new site: its forward first, outside the table's critical part (the allocations in
     * there may run the collector, and a finaliser may call a module: it finds the table
     * consistent), then probed again and stored */
    PyObject *exc = xsp_take_exc();
    PyObject *fwd = forward_code(s, tp);
    xsp_give_exc(exc);
    LOCK(s);
    idx = probe(s, (PyObject *)code, lasti, tp, h, &j);
    if (idx >= 0)
        Py_XDECREF(fwd);
    else
        idx = add_site(s, j, (PyObject *)code, lasti, tp, h, fwd);
    UNLOCK(s);
    return idx;
}

/* -- at stop ---------------------------------------------------------------------------------- */

/* Interns "<co_filename>:<line>" of code object c into t: its id, or UINT32_MAX (out of
 * memory; no exception left set).  A file name that is not a str shows as "?". */
static uint32_t intern_place(xsp_trace *t, PyObject *c, int line)
{
    PyObject *fn = ((PyCodeObject *)c)->co_filename;
    PyObject *b = fn && PyUnicode_Check(fn) ? xsp_py_utf8(fn) : NULL;
    PyErr_Clear();
    const char *name = b ? PyBytes_AS_STRING(b) : "?";
    size_t len = b ? (size_t)PyBytes_GET_SIZE(b) : 1;
    char *buf = malloc(len + 24);
    uint32_t id = UINT32_MAX;
    if (buf) {
        memcpy(buf, name, len);
        int k = snprintf(buf + len, 24, ":%d", line);
        id = xsp_strtab_intern(&t->strings, buf, len + (size_t)(k > 0 ? k : 0));
    }
    free(buf);
    Py_XDECREF(b);
    return id;
}

static uint32_t intern_cstr(xsp_trace *t, const char *s)
{
    return xsp_strtab_intern(&t->strings, s, strlen(s));
}

/* Whether span kind k carries a site (the module wrappers' spans). */
static int has_site(unsigned k)
{
    return k == XSP_KIND_MODEL || k == XSP_KIND_MODULE;
}

/* The index in t->attrs of span i's integer "site" attribute, or UINT32_MAX. */
static uint32_t site_attr(const xsp_trace *t, uint32_t i, uint32_t key)
{
    const xsp_span *sp = &t->spans[i];
    if (!has_site(sp->kind))
        return UINT32_MAX;
    for (uint32_t j = sp->attr_off; j < sp->attr_off + sp->attr_n && j < t->n_attrs; j++)
        if (t->attrs[j].key == key && t->attrs[j].type == XSP_ATTR_INT)
            return j;
    return UINT32_MAX;
}

static int attach_locked(SitesObject *s, xsp_trace *t, char *err, size_t errlen)
{
    uint32_t key = intern_cstr(t, "site"), k_src = intern_cstr(t, "source"),
             k_call = intern_cstr(t, "call_site"), unknown = intern_cstr(t, "?");
    uint32_t n = s->sites.n;
    uint32_t *src = n ? malloc(n * sizeof *src) : NULL;    /* per site: string ids */
    uint32_t *call = n ? malloc(n * sizeof *call) : NULL;
    uint32_t *ids = NULL;
    xsp_attr *vals = NULL;
    int rc = -1;
    if (key == UINT32_MAX || k_src == UINT32_MAX || k_call == UINT32_MAX
        || unknown == UINT32_MAX || (n && (!src || !call)))
        goto oom;
    for (uint32_t i = 0; i < n; i++)
        src[i] = call[i] = UINT32_MAX;
    /* 1: the strings of the sites the trace uses, and the spans that get both attributes */
    uint32_t n_both = 0, n_unknown = 0;
    for (uint32_t i = 0; i < t->n_spans; i++) {
        uint32_t a = site_attr(t, i, key);
        if (a == UINT32_MAX)
            continue;
        int64_t v = t->attrs[a].v.i;
        if (v < 0 || v >= n) {
            n_unknown++;
            continue;
        }
        const site *e = site_at(s, v);
        if (call[v] == UINT32_MAX) {
            call[v] = intern_place(t, e->code, PyCode_Addr2Line((PyCodeObject *)e->code,
                                                                e->lasti));
            src[v] = e->fwd ? intern_place(t, e->fwd, ((PyCodeObject *)e->fwd)->co_firstlineno)
                            : 0;
            if (call[v] == UINT32_MAX || src[v] == UINT32_MAX)
                goto oom;
        }
        n_both += src[v] != 0;
    }
    /* 2: "call_site" after "site" on the spans that also get "source" (all or nothing) */
    ids = malloc((n_both ? n_both : 1) * sizeof *ids);
    vals = malloc((n_both ? n_both : 1) * sizeof *vals);
    if (!ids || !vals)
        goto oom;
    uint32_t m = 0;
    for (uint32_t i = 0; i < t->n_spans && m < n_both; i++) {
        uint32_t a = site_attr(t, i, key);
        int64_t v = a == UINT32_MAX ? -1 : t->attrs[a].v.i;
        if (v >= 0 && v < n && src[v] != 0) {
            ids[m] = i;
            vals[m++] = (xsp_attr){.type = XSP_ATTR_STR, .v.s = call[v]};
        }
    }
    if (xsp_trace_add_span_attrs(t, "call_site", m, ids, vals, err, errlen) != 0)
        goto done;
    /* 3: "site" itself becomes "source", or "call_site" where there is no source (cannot
     * fail: the attributes were rebuilt above, so they are found again) */
    for (uint32_t i = 0; i < t->n_spans; i++) {
        uint32_t a = site_attr(t, i, key);
        if (a == UINT32_MAX)
            continue;
        int64_t v = t->attrs[a].v.i;
        int known = v >= 0 && v < n;
        uint32_t str = !known ? unknown : src[v] ? src[v] : call[v];
        t->attrs[a] = (xsp_attr){.key = known && src[v] ? k_src : k_call, .type = XSP_ATTR_STR,
                                 .v.s = str};
    }
    if ((n_unknown && xsp_trace_add_counter(t, "source.unresolved", n_unknown) != 0)
        || (s->lost && xsp_trace_add_counter(t, "source.lost", s->lost) != 0))
        goto oom;
    s->lost = 0;
    rc = 0;
    goto done;
oom:
    snprintf(err, errlen, "out of memory while attaching the source attributes");
done:
    free(src);
    free(call);
    free(ids);
    free(vals);
    return rc;
}

int xsp_sites_attach(PyObject *o, xsp_trace *t, char *err, size_t errlen)
{
    SitesObject *s = (SitesObject *)o;
    LOCK(s);
    int rc = attach_locked(s, t, err, errlen);
    UNLOCK(s);
    PyErr_Clear();
    return rc;
}

/* -- the type --------------------------------------------------------------------------------- */

static PyObject *sites_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    if (PyTuple_GET_SIZE(args) || (kw && PyDict_GET_SIZE(kw)))
        return PyErr_Format(PyExc_TypeError, "ModuleSites() takes no arguments");
    SitesObject *s = (SitesObject *)tp->tp_alloc(tp, 0);
    if (!s)
        return NULL;
    int oom = xsp_codetab_init(&s->sites, sizeof(site), 64, 16) != 0;
    s->forward = PyUnicode_InternFromString("forward");
    s->wrapped = PyUnicode_InternFromString("__wrapped__");
    if (oom || !s->forward || !s->wrapped) {
        Py_DECREF(s);
        return oom ? PyErr_NoMemory() : NULL;
    }
    return (PyObject *)s;
}

static int sites_traverse(PyObject *op, visitproc visit, void *arg)
{
    SitesObject *s = (SitesObject *)op;
    Py_VISIT(Py_TYPE(op));
    for (uint32_t i = 0; i < s->sites.n; i++) {
        const site *e = site_at(s, i);
        Py_VISIT(e->code);
        Py_VISIT(e->type);
        Py_VISIT(e->fwd);
    }
    return 0;
}

static int sites_clear(PyObject *op)
{
    SitesObject *s = (SitesObject *)op;
    uint32_t n = s->sites.n;
    xsp_codetab_reset(&s->sites);       /* first: a finaliser run below finds an empty table */
    for (uint32_t i = 0; i < n; i++) {
        site *e = site_at(s, i);
        Py_CLEAR(e->code);
        Py_CLEAR(e->type);
        Py_CLEAR(e->fwd);
    }
    return 0;
}

static void sites_dealloc(PyObject *op)
{
    SitesObject *s = (SitesObject *)op;
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    sites_clear(op);
    xsp_codetab_free(&s->sites);
    Py_XDECREF(s->forward);
    Py_XDECREF(s->wrapped);
    tp->tp_free(op);
    Py_DECREF(tp);
}

int xsp_sites_is(PyObject *o)
{
    return Py_TYPE(o)->tp_dealloc == sites_dealloc;
}

/* here(module) -> int */
static PyObject *sites_here(PyObject *op, PyObject *module)
{
    PyFrameObject *f = PyEval_GetFrame();          /* borrowed: the Python caller of here() */
    PyFrameObject *back = f ? PyFrame_GetBack(f) : NULL;    /* new reference */
    int64_t i = xsp_sites_lookup(op, back, Py_TYPE(module));
    Py_XDECREF(back);
    return PyLong_FromLongLong(i);
}

/* site(i) -> (source or None, call_site) */
static PyObject *sites_site(PyObject *op, PyObject *arg)
{
    SitesObject *s = (SitesObject *)op;
    long long i = PyLong_AsLongLong(arg);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    LOCK(s);
    if (i < 0 || i >= s->sites.n) {
        UNLOCK(s);
        return PyErr_Format(PyExc_IndexError, "site %lld out of range (%u sites)", i,
                            (unsigned)s->sites.n);
    }
    site e = *site_at(s, i);
    Py_INCREF(e.code);
    Py_XINCREF(e.fwd);
    UNLOCK(s);
    PyCodeObject *c = (PyCodeObject *)e.code, *fw = (PyCodeObject *)e.fwd;
    PyObject *call = PyUnicode_FromFormat("%S:%d", c->co_filename,
                                          PyCode_Addr2Line(c, e.lasti));
    PyObject *src = fw ? PyUnicode_FromFormat("%S:%d", fw->co_filename, fw->co_firstlineno)
                       : Py_NewRef(Py_None);
    Py_DECREF(e.code);
    Py_XDECREF(e.fwd);
    PyObject *r = call && src ? PyTuple_Pack(2, src, call) : NULL;
    Py_XDECREF(call);
    Py_XDECREF(src);
    return r;
}

static Py_ssize_t sites_len(PyObject *op)
{
    SitesObject *s = (SitesObject *)op;
    LOCK(s);
    Py_ssize_t n = s->sites.n;
    UNLOCK(s);
    return n;
}

static PyMethodDef sites_methods[] = {
    {"here", sites_here, METH_O,
     "here(module) -> int: the site of a call of module by the Python function that called "
     "the function calling here() (what a module wrapper written in Python would pass as its "
     "span's a0); -1 when there is none or it cannot be stored."},
    {"site", sites_site, METH_O,
     "site(i) -> (source, call_site): site i's 'file:line' strings (source None when the "
     "class's forward is not a Python function).  IndexError when out of range."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot sites_slots[] = {
    {Py_tp_new, sites_new},
    {Py_tp_dealloc, sites_dealloc},
    {Py_tp_traverse, sites_traverse},
    {Py_tp_clear, sites_clear},
    {Py_tp_methods, sites_methods},
    {Py_sq_length, sites_len},
    {Py_tp_doc, "ModuleSites(): the call sites of a profile's module calls, turned into the "
                "spans' source and call_site attributes at stop (see modsites.c)."},
    {0, NULL},
};

PyType_Spec xsp_sites_spec = {
    .name = "xsp._core.ModuleSites",
    .basicsize = sizeof(SitesObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = sites_slots,
};
