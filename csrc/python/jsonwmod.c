/*
 * jsonwmod.c: _core.write_kineto / _core.write_chrome / _core.write_otlp and
 * _core.encode_otlp (jsonwmod.h).
 *
 * The columns arrive in a dict; each is taken through the buffer protocol (checked for its
 * item kind, size and length, held until the write ends) and each list of bytes as a tuple
 * (held too), so that the text is written with the GIL released from memory nothing else can
 * change: the trace is immutable once wrapped (tracedata.h).
 */
#include "jsonwmod.h"

#include <errno.h>

#include "../io/chromew.h"
#include "../io/kinetow.h"
#include "../io/otlppb.h"
#include "../io/otlpw.h"
#include "tracedata.h"

#define MAX_VIEWS 32
#define MAX_HOLDS 8

typedef struct cols {
    PyObject *dict;                 /* the columns dict (borrowed) */
    Py_buffer views[MAX_VIEWS];     /* buffers held */
    int n_views;
    PyObject *holds[MAX_HOLDS];     /* tuples held */
    xsp_bytes *lists[MAX_HOLDS];    /* their items, malloc'd */
    int n_holds;
} cols;

static void cols_release(cols *c)
{
    for (int i = 0; i < c->n_views; i++)
        PyBuffer_Release(&c->views[i]);
    for (int i = 0; i < c->n_holds; i++) {
        Py_XDECREF(c->holds[i]);
        PyMem_Free(c->lists[i]);
    }
}

/* Column key: kind 'i' (signed), 'u' (unsigned) or 'f' (float) of size bytes, len items (or
 * any length when len < 0, stored in *n).  Returns its data, or NULL with an exception set. */
static const void *col(cols *c, const char *key, char kind, Py_ssize_t size, Py_ssize_t len,
                       uint32_t *n)
{
    PyObject *o = PyDict_GetItemString(c->dict, key);
    if (!o) {
        PyErr_Format(PyExc_ValueError, "write: column %s is missing", key);
        return NULL;
    }
    Py_buffer *v = &c->views[c->n_views];
    if (PyObject_GetBuffer(o, v, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    c->n_views++;
    const char *f = v->format ? v->format : "B";
    if (*f == '<' || *f == '=' || *f == '@')
        f++;
    char got = (*f == 'd' || *f == 'f') ? 'f' : (*f >= 'A' && *f <= 'Z') ? 'u' : 'i';
    if (got != kind || v->itemsize != size || v->ndim != 1) {
        PyErr_Format(PyExc_TypeError, "write: column %s must be a 1-d array of %s%d", key,
                     kind == 'f' ? "float" : kind == 'u' ? "uint" : "int", (int)size * 8);
        return NULL;
    }
    Py_ssize_t items = v->len / size;
    if ((len >= 0 && items != len) || items > UINT32_MAX) {
        PyErr_Format(PyExc_ValueError, "write: column %s has %zd items, not %zd", key, items,
                     len);
        return NULL;
    }
    if (n)
        *n = (uint32_t)items;
    return v->buf;
}

/* A list of bytes (or None) under key, as n xsp_bytes. */
static const xsp_bytes *blist(cols *c, const char *key, Py_ssize_t len, uint32_t *n)
{
    PyObject *o = PyDict_GetItemString(c->dict, key);
    if (!o) {
        PyErr_Format(PyExc_ValueError, "write: column %s is missing", key);
        return NULL;
    }
    PyObject *tup = PySequence_Tuple(o);
    if (!tup)
        return NULL;
    Py_ssize_t k = PyTuple_GET_SIZE(tup);
    xsp_bytes *b = PyMem_Calloc((size_t)k + 1, sizeof *b);
    c->holds[c->n_holds] = tup;
    c->lists[c->n_holds++] = b;
    if (!b)
        return PyErr_NoMemory(), NULL;
    if ((len >= 0 && k != len) || k > UINT32_MAX) {
        PyErr_Format(PyExc_ValueError, "write: column %s has %zd items, not %zd", key, k, len);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *it = PyTuple_GET_ITEM(tup, i);
        if (it == Py_None)
            continue;
        if (!PyBytes_Check(it)) {
            PyErr_Format(PyExc_TypeError, "write: column %s holds a %s, not bytes or None",
                         key, Py_TYPE(it)->tp_name);
            return NULL;
        }
        b[i].s = PyBytes_AS_STRING(it);
        b[i].n = (size_t)PyBytes_GET_SIZE(it);
    }
    if (n)
        *n = (uint32_t)k;
    return b;
}

typedef struct job {
    int fd, flags;           /* flags: XSP_JSONW_* */
    const xsp_trace *t;
    Py_buffer head, tail;
} job;

/* the events of one format: 0, or -1 on allocation failure (w's own failures stay in w) */
typedef int (*events_fn)(xsp_jsonw *w, const xsp_trace *t, const void *fc);

static int kineto_events(xsp_jsonw *w, const xsp_trace *t, const void *fc)
{
    return xsp_kineto_write_events(w, t, fc, 1);
}

static int chrome_events(xsp_jsonw *w, const xsp_trace *t, const void *fc)
{
    xsp_chrome_write_events(w, t, fc);
    return 0;
}

static int otlp_spans(xsp_jsonw *w, const xsp_trace *t, const void *fc)
{
    return xsp_otlp_write_spans(w, t, fc);
}

/* Writes head, the events (fn over fc), tail; raises on failure. */
static PyObject *run(job *j, events_fn fn, const void *fc)
{
    char err[256] = "";
    int rc = -1, nomem = 0, saved = 0;
    Py_BEGIN_ALLOW_THREADS
    xsp_jsonw *w = xsp_jsonw_open(j->fd, j->flags);
    if (!w)
        nomem = 1;
    else {
        xsp_jsonw_raw(w, j->head.buf, (size_t)j->head.len);
        nomem = fn(w, j->t, fc) < 0;
        xsp_jsonw_raw(w, j->tail.buf, (size_t)j->tail.len);
        rc = xsp_jsonw_close(w, err, sizeof err);
        saved = errno;
    }
    Py_END_ALLOW_THREADS
    if (nomem)
        return PyErr_NoMemory();
    if (rc < 0) {
        errno = saved;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static int parse(PyTypeObject *tp, PyObject *args, job *j, cols *c)
{
    PyObject *td;
    if (!PyArg_ParseTuple(args, "iiO!y*y*O!:write", &j->fd, &j->flags, tp, &td, &j->head,
                          &j->tail, &PyDict_Type, &c->dict))
        return -1;
    j->t = ((xsp_TraceDataObject *)td)->trace;
    return 0;
}

PyObject *xsp_py_write_kineto(PyTypeObject *tp, PyObject *args)
{
    job j = {0};
    cols c = {0};
    xsp_kineto_cols k = {0};
    PyObject *res = NULL;
    if (parse(tp, args, &j, &c) < 0)
        return NULL;
    Py_ssize_t nt = j.t->n_threads, ns = j.t->n_spans;
    const xsp_bytes *why;
    uint32_t n_why;
    PyObject *base = PyDict_GetItemString(c.dict, "base_ns");
    k.base_ns = base ? PyLong_AsLongLong(base) : 0;
    if (PyErr_Occurred())
        goto out;
    if (!(k.track_pid = col(&c, "track_pid", 'i', 8, nt, NULL))
        || !(k.track_tid = col(&c, "track_tid", 'u', 8, nt, NULL))
        || !(k.fwd_rank = col(&c, "fwd_rank", 'i', 8, nt, NULL))
        || !(k.ext = col(&c, "ext", 'i', 8, ns, NULL))
        || !(k.near_cpu = col(&c, "near_cpu", 'i', 8, ns, NULL))
        || !(k.near_mod = col(&c, "near_mod", 'i', 8, ns, NULL))
        || !(k.name_sid = col(&c, "name_sid", 'i', 8, ns, NULL))
        || !(k.mod_id = col(&c, "mod_id", 'i', 8, ns, NULL))
        || !(k.extra = blist(&c, "extra", -1, &k.n_extra))
        || !(k.step_id = col(&c, "step_id", 'i', 8, -1, &k.n_steps))
        || !(k.step_how = col(&c, "step_how", 'i', 8, k.n_steps, NULL))
        || !(k.step_j = col(&c, "step_j", 'i', 8, k.n_steps, NULL))
        || !(k.step_s0 = col(&c, "step_s0", 'u', 8, k.n_steps, NULL))
        || !(k.step_e0 = col(&c, "step_e0", 'u', 8, k.n_steps, NULL))
        || !(why = blist(&c, "step_why", 4, &n_why))
        || !(k.lev_id = col(&c, "lev_id", 'i', 8, -1, &k.n_lev))
        || !(k.json_sid = col(&c, "json_sid", 'u', 4, -1, &k.n_json))
        || !(k.json_text = blist(&c, "json_text", k.n_json, NULL))
        || !(k.spawn_i = col(&c, "spawn_i", 'i', 8, -1, &k.n_spawn))
        || !(k.spawn_j = col(&c, "spawn_j", 'i', 8, k.n_spawn, NULL)))
        goto out;
    for (int i = 0; i < 4; i++)
        k.step_why[i] = why[i];
    PyObject *lev = PyDict_GetItemString(c.dict, "lev_val");
    if (lev && PyObject_CheckBuffer(lev)) {
        Py_buffer v;
        if (PyObject_GetBuffer(lev, &v, PyBUF_FORMAT) < 0)
            goto out;
        int isf = v.format && (v.format[0] == 'd' || v.format[0] == 'f');
        PyBuffer_Release(&v);
        if (isf && !(k.lev_float = col(&c, "lev_val", 'f', 8, k.n_lev, NULL)))
            goto out;
        if (!isf && !(k.lev_int = col(&c, "lev_val", 'i', 8, k.n_lev, NULL)))
            goto out;
    } else {
        PyErr_SetString(PyExc_ValueError, "write: column lev_val is missing");
        goto out;
    }
    res = run(&j, kineto_events, &k);
out:
    cols_release(&c);
    PyBuffer_Release(&j.head);
    PyBuffer_Release(&j.tail);
    return res;
}

PyObject *xsp_py_write_chrome(PyTypeObject *tp, PyObject *args)
{
    job j = {0};
    cols c = {0};
    xsp_chrome_cols k = {0};
    PyObject *res = NULL;
    if (parse(tp, args, &j, &c) < 0)
        return NULL;
    PyObject *t0 = PyDict_GetItemString(c.dict, "t0");
    k.t0 = t0 ? PyLong_AsUnsignedLongLong(t0) : 0;
    if (PyErr_Occurred())
        goto out;
    if (!(k.track_pid = col(&c, "track_pid", 'i', 8, j.t->n_threads, NULL))
        || !(k.spawn_i = col(&c, "spawn_i", 'i', 8, -1, &k.n_spawn))
        || !(k.spawn_j = col(&c, "spawn_j", 'i', 8, k.n_spawn, NULL)))
        goto out;
    res = run(&j, chrome_events, &k);
out:
    cols_release(&c);
    PyBuffer_Release(&j.head);
    PyBuffer_Release(&j.tail);
    return res;
}

/* write_otlp's and encode_otlp's columns from c into k, checked against t; -1 with an exception
 * set. */
static int otlp_cols(cols *c, const xsp_trace *t, xsp_otlp_cols *k)
{
    PyObject *base = PyDict_GetItemString(c->dict, "span_base");
    PyObject *off = PyDict_GetItemString(c->dict, "offset");
    if (!base || !off) {
        PyErr_SetString(PyExc_ValueError, "write: span_base or offset is missing");
        return -1;
    }
    k->span_base = PyLong_AsUnsignedLongLong(base);
    k->offset = PyLong_AsUnsignedLongLong(off);
    if (PyErr_Occurred())
        return -1;
    uint32_t n_ix;
    if (!(k->trace_hi = col(c, "trace_hi", 'u', 8, -1, &k->n_traces))
        || !(k->trace_lo = col(c, "trace_lo", 'u', 8, k->n_traces, NULL))
        || !(k->trace_ix = col(c, "trace_ix", 'i', 4, -1, &n_ix))
        || !(k->lev_id = col(c, "lev_id", 'i', 8, -1, &k->n_lev))
        || !(k->lev_val = col(c, "lev_val", 'f', 8, k->n_lev, NULL)))
        return -1;
    if (!k->n_traces || (n_ix && n_ix != t->n_spans)
        || (uint64_t)t->n_spans > UINT64_MAX - k->span_base) {
        PyErr_Format(PyExc_ValueError, "write: no trace id, %u trace indexes for %u spans, or "
                     "span ids past 2**64-1", (unsigned)n_ix, (unsigned)t->n_spans);
        return -1;
    }
    for (uint32_t i = 0; i < n_ix; i++)
        if (k->trace_ix[i] < 0 || (uint32_t)k->trace_ix[i] >= k->n_traces) {
            PyErr_Format(PyExc_ValueError, "write: trace_ix[%u] = %d is not an index into the "
                         "%u trace ids", (unsigned)i, (int)k->trace_ix[i],
                         (unsigned)k->n_traces);
            return -1;
        }
    for (uint32_t i = 1; i < k->n_lev; i++)
        if (k->lev_id[i] <= k->lev_id[i - 1]) {
            PyErr_Format(PyExc_ValueError, "write: lev_id is not increasing at %u", (unsigned)i);
            return -1;
        }
    if (!n_ix)
        k->trace_ix = NULL;
    return 0;
}

PyObject *xsp_py_write_otlp(PyTypeObject *tp, PyObject *args)
{
    job j = {0};
    cols c = {0};
    xsp_otlp_cols k = {0};
    PyObject *res = NULL;
    if (parse(tp, args, &j, &c) < 0)
        return NULL;
    if (otlp_cols(&c, j.t, &k) == 0)
        res = run(&j, otlp_spans, &k);
    cols_release(&c);
    PyBuffer_Release(&j.head);
    PyBuffer_Release(&j.tail);
    return res;
}

PyObject *xsp_py_encode_otlp(PyTypeObject *tp, PyObject *args)
{
    PyObject *td, *res = NULL;
    Py_buffer resource = {0}, scope = {0};
    unsigned long long lo, hi;
    cols c = {0};
    xsp_otlp_cols k = {0};
    if (!PyArg_ParseTuple(args, "O!y*y*O!KK:encode_otlp", tp, &td, &resource, &scope,
                          &PyDict_Type, &c.dict, &lo, &hi))
        return NULL;
    const xsp_trace *t = ((xsp_TraceDataObject *)td)->trace;
    if (lo > hi || hi > t->n_spans) {
        PyErr_Format(PyExc_ValueError, "encode_otlp: spans %llu to %llu are not a range of the "
                     "trace's %u", lo, hi, (unsigned)t->n_spans);
        goto out;
    }
    if (otlp_cols(&c, t, &k) < 0)
        goto out;
    xsp_otlp_pb pb = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = xsp_otlp_encode(&pb, t, &k, (uint32_t)lo, (uint32_t)hi, resource.buf,
                         (size_t)resource.len, scope.buf, (size_t)scope.len);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        PyErr_NoMemory();       /* the columns were checked: allocation is what can fail */
    else
        res = PyBytes_FromStringAndSize((const char *)pb.data, (Py_ssize_t)pb.len);
    xsp_otlp_pb_release(&pb);
out:
    cols_release(&c);
    PyBuffer_Release(&resource);
    PyBuffer_Release(&scope);
    return res;
}
