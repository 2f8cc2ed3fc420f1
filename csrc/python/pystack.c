/*
 * pystack.c: xsp._core.PyStack, the Python function calls of a with_stack=True profile as
 * spans of kind "python" (pystack.h).
 *
 * What it is for: torch.profiler's with_stack gives each op the Python call stack it ran
 * under.  Here every Python function call inside the profile becomes a span (level L, kind
 * python, named as torch.profiler names its python_function events, "file(line): name" with
 * the function's first line), begun at the call and ended at the return, on the thread that
 * ran it; the ops, modules and scopes begun inside it nest under it, so an op's stack is its
 * python ancestors (Trace.stack_of) and the Kineto export writes them as python_function
 * events.  Functions of xsp's own package (skip, a co_filename prefix) are not recorded, nor
 * anything they call (a per-thread count of the open calls of xsp's code, belonging to one
 * PyStack: the bookkeeping of the module wrapper's rare paths, named_modules() and the like,
 * is xsp's, not the program's).
 *
 * How: a C profile function (PyEval_SetProfile), the cheapest hook CPython 3.11 offers: it is
 * called for every Python call and return (C calls are ignored: the ops record themselves).
 * Per event: the frame's code object, a probe of a table code -> name (codetab.h; made once
 * per code object, kept, with a strong reference to the code, as long as the PyStack: the core
 * reads a name passed as stable without comparing it again, csrc/core/recorder.h), and the core's
 * op entry with the frame object's address as the key (bit 54 set: never a module span's
 * key, bit 55, and an object alive at the call is alive at its return, so keys pair up).
 * CPython makes a frame object for every frame a profile function sees; that, and the call
 * into the hook, is most of the cost (docs/performance.md, "with_stack").
 *
 * Threads: start installs the function on the calling thread and sets threading's profile
 * hook (the attribute threading.setprofile sets; stored directly, so no Python code runs) to
 * this object, whose call, the first event of each thread started from then on, installs the
 * C function on that thread.  Threads already running at start are not traced (CPython 3.11
 * can install a profile function only on the calling thread).  Stop removes it from the
 * calling thread and puts the hook back; on other threads it removes itself at its next event
 * (on is 0), recording nothing more.  A profile function already installed (sys.setprofile:
 * cProfile, a debugger) makes start refuse rather than replace it.
 */
#include "pystack.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/recorder.h"
#include "codetab.h"

#define FRAME_KEY_BIT (UINT64_C(1) << 54)

typedef struct entry {
    PyObject *code;             /* the code object (strong) */
    char *name;                 /* "file(line): name", NUL-terminated (owned), or NULL: not
                                 * recorded (xsp's own code) */
} entry;

typedef struct {
    PyObject_HEAD
    xsp_codetab codes;          /* the code objects seen: entry, keyed by code (hash
                                 * xsp_codetab_hash(code, 0, NULL)); owned */
    PyObject *skip;             /* str: the co_filename prefix not recorded (strong) */
    PyObject *pass;             /* tuple of the code objects of xsp's that run the user's
                                 * code (the module wrapper, measure, xsp run): not recorded,
                                 * but what they call is (strong) */
    PyObject *threading;        /* the threading module while started (strong), or NULL */
    PyObject *hook_prev;        /* threading._profile_hook found at start (strong), or NULL */
    _Atomic int on;             /* 1 from start to stop */
    uint64_t serial;            /* identifies the per-thread skip count made for this one */
#ifdef Py_GIL_DISABLED
    PyMutex lock;               /* protects codes */
#endif
} PyStackObject;

#ifdef Py_GIL_DISABLED
#define LOCK(s) PyMutex_Lock(&(s)->lock)
#define UNLOCK(s) PyMutex_Unlock(&(s)->lock)
#else
#define LOCK(s) ((void)0)       /* the GIL: a lookup runs no Python code */
#define UNLOCK(s) ((void)0)
#endif

static char unknown_name[] = "?";    /* a name that could not be made (out of memory) */
static char pass_name[] = "";        /* the name of a pass-through code object (s->pass) */
static _Atomic uint64_t next_serial = 1;    /* serials of PyStack objects */

/* Per thread, written only by its thread: the open calls of skipped code (xsp's own) on it,
 * counted for the PyStack whose serial is tls_serial (another one's count starts at 0). */
static _Thread_local uint64_t tls_serial;
static _Thread_local long tls_skip;
/* The skip counts saved by the pass-through calls open on the thread (what they call is
 * recorded even when they were called from skipped code): a stack, depth tls_npass. */
#define PASS_DEPTH 32
static _Thread_local long tls_saved[PASS_DEPTH];
static _Thread_local int tls_npass;

/* The UTF-8 of str o (borrowed from o), or NULL (not a str, not encodable: no exception
 * left set). */
static const char *utf8(PyObject *o, Py_ssize_t *len)
{
    const char *s = o && PyUnicode_Check(o) ? PyUnicode_AsUTF8AndSize(o, len) : NULL;
    if (!s)
        PyErr_Clear();
    return s;
}

/* The name of code c's spans (malloc'd; unknown_name without memory), or NULL when c is
 * xsp's own (its file under skip). */
static char *make_name(PyStackObject *s, PyCodeObject *c)
{
    Py_ssize_t nf = 0, nn = 0, np = 0;
    const char *file = utf8(c->co_filename, &nf), *name = utf8(c->co_name, &nn);
    const char *prefix = utf8(s->skip, &np);
    if (file && prefix && np > 0 && nf >= np && memcmp(file, prefix, (size_t)np) == 0) {
        for (Py_ssize_t i = 0; s->pass && i < PyTuple_GET_SIZE(s->pass); i++)
            if (PyTuple_GET_ITEM(s->pass, i) == (PyObject *)c)
                return pass_name;
        return NULL;
    }
    size_t len = (size_t)(file ? nf : 1) + (size_t)(name ? nn : 1) + 32;
    char *buf = malloc(len);
    if (!buf)
        return unknown_name;
    snprintf(buf, len, "%s(%d): %s", file ? file : "?", c->co_firstlineno, name ? name : "?");
    return buf;
}

/* The name spans of code c get, NULL when c is not recorded; made and kept on first sight
 * ("?" when there is no memory for it: the call is still recorded).  Runs no Python code. */
static const char *name_of(PyStackObject *s, PyCodeObject *c)
{
    const char *name;
    uint64_t h = xsp_codetab_hash(c, 0, NULL);
    LOCK(s);
    uint32_t j = xsp_codetab_probe(&s->codes, h);
    for (uint32_t k; (k = xsp_codetab_next(&s->codes, h, &j)) != 0;) {
        const entry *e = xsp_codetab_at(&s->codes, k - 1);
        if (e->code == (PyObject *)c) {
            name = e->name;
            UNLOCK(s);
            return name;
        }
    }
    char *made = make_name(s, c);
    entry e = {.code = (PyObject *)c, .name = made};
    if (xsp_codetab_add(&s->codes, j, h, &e) < 0) {
        UNLOCK(s);
        if (made != unknown_name && made != pass_name)
            free(made);
        return made == pass_name ? pass_name : made ? unknown_name : NULL;   /* not kept:
                                                      * looked up again next time */
    }
    Py_INCREF(c);               /* the entry's reference */
    UNLOCK(s);
    return made;
}

/* The profile function.  Never fails, never raises. */
static int prof_cb(PyObject *obj, PyFrameObject *f, int what, PyObject *arg)
{
    (void)arg;
    if (what != PyTrace_CALL && what != PyTrace_RETURN)
        return 0;
    PyStackObject *s = (PyStackObject *)obj;
    if (!atomic_load_explicit(&s->on, memory_order_relaxed)) {
        PyEval_SetProfile(NULL, NULL);   /* stopped: this thread lets go (may free s) */
        return 0;
    }
    PyCodeObject *code = PyFrame_GetCode(f);   /* new reference; the frame keeps one */
    Py_DECREF(code);
    const char *name = name_of(s, code);
    if (tls_serial != s->serial) {
        tls_serial = s->serial;
        tls_skip = 0;
        tls_npass = 0;
    }
    if (name == pass_name) {    /* xsp's, running the user's code: not it, but its callees */
        if (what == PyTrace_CALL) {
            if (tls_npass < PASS_DEPTH)
                tls_saved[tls_npass] = tls_skip;
            tls_npass++;
            tls_skip = 0;
        } else if (tls_npass > 0) {
            tls_npass--;
            if (tls_npass < PASS_DEPTH)
                tls_skip = tls_saved[tls_npass];
        }
        return 0;
    }
    if (!name) {                /* xsp's own code: neither it nor what it calls */
        if (what == PyTrace_CALL)
            tls_skip++;
        else if (tls_skip > 0)  /* (a return from a call made before start: none counted) */
            tls_skip--;
        return 0;
    }
    if (tls_skip > 0)
        return 0;
    uint64_t key = (uint64_t)(uintptr_t)f | FRAME_KEY_BIT;
    if (what == PyTrace_CALL)
        xsp_rec_begin_l(XSP_KIND_PYTHON, name, key, -1, 0);
    else
        xsp_rec_end_l(key);
    return 0;
}

/* __call__(frame, event, arg): threading's profile hook in a thread started while recording
 * (its first event, "call" of Thread.run): installs the C function on the thread and records
 * the event. */
static PyObject *ps_call(PyObject *op, PyObject *args, PyObject *kw)
{
    PyObject *frame, *event, *arg;
    if ((kw && PyDict_GET_SIZE(kw)) || !PyArg_ParseTuple(args, "OOO", &frame, &event, &arg))
        return kw && PyDict_GET_SIZE(kw) ? PyErr_Format(PyExc_TypeError, "no keywords") : NULL;
    PyStackObject *s = (PyStackObject *)op;
    if (!atomic_load_explicit(&s->on, memory_order_relaxed)) {
        PyEval_SetProfile(NULL, NULL);
        Py_RETURN_NONE;
    }
    PyEval_SetProfile(prof_cb, op);
    if (PyFrame_Check(frame) && PyUnicode_Check(event)) {
        if (PyUnicode_CompareWithASCIIString(event, "call") == 0)
            prof_cb(op, (PyFrameObject *)frame, PyTrace_CALL, arg);
        else if (PyUnicode_CompareWithASCIIString(event, "return") == 0)
            prof_cb(op, (PyFrameObject *)frame, PyTrace_RETURN, arg);
    }
    Py_RETURN_NONE;
}

/* threading's dict (borrowed from the module, which *mod then holds: a new reference), or
 * NULL when threading is not imported (no thread can be started through it then). */
static PyObject *threading_dict(PyObject **mod)
{
    PyObject *name = PyUnicode_FromString("threading");
    *mod = name ? PyImport_GetModule(name) : NULL;   /* no import: no Python code */
    Py_XDECREF(name);
    PyErr_Clear();
    PyObject *d = *mod && PyModule_Check(*mod) ? PyModule_GetDict(*mod) : NULL;
    if (!d) {
        Py_CLEAR(*mod);
        PyErr_Clear();
    }
    return d;
}

int xsp_pystack_start(PyObject *o, char *err, size_t errlen)
{
    PyStackObject *s = (PyStackObject *)o;
    PyThreadState *ts = PyThreadState_Get();
    if (ts->c_profilefunc != NULL) {
        snprintf(err, errlen, "with_stack: a profile function is already installed on this "
                 "thread (sys.setprofile: cProfile, a debugger or another profiler); remove it "
                 "first");
        return -1;
    }
    PyObject *mod = NULL, *d = threading_dict(&mod);
    if (d) {
        Py_XSETREF(s->hook_prev, Py_XNewRef(PyDict_GetItemString(d, "_profile_hook")));
        if (PyDict_SetItemString(d, "_profile_hook", o) < 0) {
            PyErr_Clear();
            Py_DECREF(mod);
            snprintf(err, errlen, "with_stack: out of memory");
            return -1;
        }
    }
    Py_XSETREF(s->threading, mod);
    atomic_store_explicit(&s->on, 1, memory_order_relaxed);
    PyEval_SetProfile(prof_cb, o);
    PyErr_Clear();
    return 0;
}

void xsp_pystack_stop(PyObject *o, char *err, size_t errlen)
{
    PyStackObject *s = (PyStackObject *)o;
    atomic_store_explicit(&s->on, 0, memory_order_relaxed);
    PyThreadState *ts = PyThreadState_Get();
    if (ts->c_profilefunc == prof_cb && ts->c_profileobj == o)
        PyEval_SetProfile(NULL, NULL);
    if (s->threading) {
        PyObject *d = PyModule_GetDict(s->threading);
        if (d && PyDict_GetItemString(d, "_profile_hook") == o
            && PyDict_SetItemString(d, "_profile_hook", s->hook_prev ? s->hook_prev
                                                                    : Py_None) < 0)
            snprintf(err, errlen, "with_stack: threading's profile hook could not be put "
                     "back");
    }
    Py_CLEAR(s->hook_prev);
    Py_CLEAR(s->threading);
    PyErr_Clear();
}

/* -- the type --------------------------------------------------------------------------------- */

/* PyStack(skip, passthrough=()): skip, a str, the co_filename prefix of the code not recorded
 * (nor what it calls); passthrough, a tuple of code objects under skip whose calls are not
 * recorded but whose callees are. */
static PyObject *ps_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    PyObject *skip, *pass = NULL;
    if ((kw && PyDict_GET_SIZE(kw)) || !PyArg_ParseTuple(args, "U|O!:PyStack", &skip,
                                                         &PyTuple_Type, &pass))
        return kw && PyDict_GET_SIZE(kw)
                   ? PyErr_Format(PyExc_TypeError, "PyStack takes no keyword arguments")
                   : NULL;
    PyStackObject *s = (PyStackObject *)tp->tp_alloc(tp, 0);
    if (!s)
        return NULL;
    int rc = xsp_codetab_init(&s->codes, sizeof(entry), 128, 64);
    s->skip = Py_NewRef(skip);
    s->pass = pass ? Py_NewRef(pass) : NULL;
    s->serial = atomic_fetch_add_explicit(&next_serial, 1, memory_order_relaxed);
    if (rc != 0) {
        Py_DECREF(s);
        return PyErr_NoMemory();
    }
    return (PyObject *)s;
}

static int ps_traverse(PyObject *op, visitproc visit, void *arg)
{
    PyStackObject *s = (PyStackObject *)op;
    Py_VISIT(Py_TYPE(op));
    for (uint32_t i = 0; i < s->codes.n; i++)
        Py_VISIT(((entry *)xsp_codetab_at(&s->codes, i))->code);
    Py_VISIT(s->threading);
    Py_VISIT(s->hook_prev);
    Py_VISIT(s->pass);
    return 0;
}

static int ps_clear(PyObject *op)
{
    PyStackObject *s = (PyStackObject *)op;
    uint32_t n = s->codes.n;
    xsp_codetab_reset(&s->codes);       /* first: what a finaliser below looks up is new */
    for (uint32_t i = 0; i < n; i++) {
        entry *e = xsp_codetab_at(&s->codes, i);
        Py_CLEAR(e->code);
        if (e->name != unknown_name && e->name != pass_name)
            free(e->name);
        e->name = NULL;
    }
    Py_CLEAR(s->threading);
    Py_CLEAR(s->hook_prev);
    Py_CLEAR(s->pass);
    return 0;
}

static void ps_dealloc(PyObject *op)
{
    PyStackObject *s = (PyStackObject *)op;
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    ps_clear(op);
    xsp_codetab_free(&s->codes);
    Py_XDECREF(s->skip);
    Py_XDECREF(s->pass);
    tp->tp_free(op);
    Py_DECREF(tp);
}

int xsp_pystack_is(PyObject *o)
{
    return Py_TYPE(o)->tp_dealloc == ps_dealloc;
}

static PyObject *ps_get_on(PyObject *op, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(atomic_load_explicit(&((PyStackObject *)op)->on,
                                                memory_order_relaxed));
}

static Py_ssize_t ps_len(PyObject *op)
{
    return ((PyStackObject *)op)->codes.n;
}

static PyGetSetDef ps_getset[] = {
    {"on", ps_get_on, NULL, "True from the session's start to its stop", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot ps_slots[] = {
    {Py_tp_new, ps_new},
    {Py_tp_dealloc, ps_dealloc},
    {Py_tp_traverse, ps_traverse},
    {Py_tp_clear, ps_clear},
    {Py_tp_call, ps_call},
    {Py_tp_getset, ps_getset},
    {Py_sq_length, ps_len},
    {Py_tp_doc, "PyStack(skip): with_stack's Python function spans (see pystack.c); "
                "len() is the number of code objects seen."},
    {0, NULL},
};

PyType_Spec xsp_pystack_spec = {
    .name = "xsp._core.PyStack",
    .basicsize = sizeof(PyStackObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = ps_slots,
};
