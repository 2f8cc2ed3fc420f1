/*
 * modcall.c: xsp._core.ModuleCall, the nn.Module.__call__ wrapper of levels M and L, in C.
 *
 * While a profile records M or L, its session (sessionmod.c) replaces nn.Module.__call__ with
 * one of these objects, made by xsp/producers/profiler.py (_ModuleCalls) and given the __call__
 * it wraps at the session's start (the one in place then); it is the one wrapper, whatever the
 * profile's options.  It is a method descriptor (Py_TPFLAGS_METHOD_DESCRIPTOR), so CPython
 * calls it unbound with the module first, as it calls a Python function, and a vectorcall: a
 * nested module call costs one dict lookup, the core's begin and end, and the call of the
 * wrapped __call__, with no Python frame of ours.  (A wrapper written in Python cost 0.6-1.4 us
 * per call.)
 *
 * Per thread, a small C11 thread-local state: the number of open module calls and the
 * qualified-name map {id(module): "layer1.0.conv1"} of the current top-level (model) call.  The
 * rare paths stay in Python, called from here: top(module, site) for a top-level call (maps
 * the model's names, begins the model span, returns (key or None, names)), name_of(module) for a
 * module missing from the map (returns (name, names)), new_thread() the first time a thread
 * calls (records its name).  A failure in any of them, or here, is counted in `errors` and the
 * call goes on without a span: bookkeeping never changes what the model does or raises.
 *
 * The state belongs to one wrapper (its serial): a thread's first call through a newer wrapper
 * resets it, and a call that began under an older wrapper does not touch the newer state when
 * it returns.  The names map is borrowed: the Python side keeps every map it hands out alive
 * for the session, so a thread that exits leaks nothing.  A helper's Exception is counted; a
 * KeyboardInterrupt or SystemExit raised in one propagates, before the forward runs.
 *
 * Where each call comes from: with a ModuleSites table (modsites.h), a call that begins a span
 * looks up its site (the calling frame's code and instruction offset, and the module's class)
 * and passes the index as the span's a0 (to top() for a top-level call), from which the span
 * gets its "source" and "call_site" attributes at stop; a nested call of level M only, which
 * begins no span, looks nothing up.
 *
 * record_shapes / profile_memory: a wrapper made with enter and leave calls them around the
 * forward of each call that began a span, and only then: enter(module, *args, **kwargs), with
 * the call's own arguments, returns a record that the Python side keeps in its side table (in
 * begin order per thread: the input shapes, the memory allocated at entry), and leave(record)
 * after the forward, whatever it raised (the exception in flight is saved and restored around
 * it), completes it (the memory delta).  Their failures are counted as the other helpers' are;
 * a KeyboardInterrupt in leave replaces the call's result, as a `finally` would.  That path is
 * a function of its own (call_with_record): without these options a call runs the code it
 * ran before they existed, one pointer test longer.
 *
 * What the session reads at stop comes from here, passed, not looked up: the failures counted
 * (hook_errors: the C paths' and the Python helpers', which report theirs by count_error()) and
 * the call-site table (xsp_modulecall_errors, xsp_modulecall_sites).
 *
 * The wrapper's begin and end pair up in its own C frame, so an exception from the forward
 * (KeyboardInterrupt included) still ends the span.  `on` turns it into a plain forwarder once
 * the profile stops, in case another tool wrapped __call__ after us.
 */
#include "modcall.h"
#include "pyexc.h"

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <structmember.h>

#include "../core/recorder.h"
#include "modsites.h"

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;  /* mc_vectorcall */
    PyObject *orig;             /* the __call__ wrapped (strong) */
    PyObject *top;              /* top(module) -> (key or None, names) (strong) */
    PyObject *name_of;          /* name_of(module) -> (name, names) (strong) */
    PyObject *new_thread;       /* new_thread() -> None (strong) */
    PyObject *sites;            /* the ModuleSites of the profile (strong), or NULL: a0 -1 */
    PyObject *enter;            /* enter(module, *args, **kwargs) -> record (strong), or NULL:
                                 * no shapes or memory recorded */
    PyObject *leave;            /* leave(record) (strong); set with enter */
    uint64_t serial;            /* identifies the per-thread state made for this wrapper */
    int record_modules;         /* 1: nested calls get module spans (level L) */
    _Atomic int on;             /* 1 while the profile records; set by set_on() */
    _Atomic long long errors;   /* failures in the bookkeeping (counted, never raised) */
} xsp_ModuleCallObject;

static _Atomic uint64_t next_key = 0;       /* see xsp_py_new_key */
static _Atomic uint64_t next_serial = 1;    /* serials of ModuleCall objects */

/* Per-thread state, written only by its thread. */
static _Thread_local uint64_t tls_serial;   /* serial of the wrapper it belongs to, 0 = none */
static _Thread_local long tls_depth;        /* open module calls through that wrapper */
static _Thread_local PyObject *tls_names;   /* names map of the current top-level call:
                                             * borrowed, kept alive by the Python side for the
                                             * wrapper's session; read only while tls_serial
                                             * is the calling wrapper's */

uint64_t xsp_py_new_key(void)
{
    /* bit 55: the core keeps 56 bits of a key (recorder.h); addresses stay below 2^47 */
    return (1ull << 55) | (atomic_fetch_add_explicit(&next_key, 1, memory_order_relaxed)
                           & ((1ull << 55) - 1));
}

/* A helper failed: an Exception is counted and cleared (bookkeeping never changes what the
 * model does); anything else (KeyboardInterrupt, SystemExit) is left set and *stop becomes 1,
 * so the call raises it before the forward runs. */
static void count_error(xsp_ModuleCallObject *self, int *stop)
{
    if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_Exception)) {
        *stop = 1;
        return;
    }
    PyErr_Clear();
    atomic_fetch_add_explicit(&self->errors, 1, memory_order_relaxed);
}

/* Takes a (x, dict) pair returned by a Python helper: makes the dict the thread's names map
 * and returns x (borrowed from the pair, which the caller releases), or NULL (counted; the map
 * is then emptied). */
static PyObject *take_pair(xsp_ModuleCallObject *self, PyObject *pair, int *stop)
{
    if (pair == NULL || !PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2
        || !PyDict_Check(PyTuple_GET_ITEM(pair, 1))) {
        count_error(self, stop);
        tls_names = NULL;
        return NULL;
    }
    tls_names = PyTuple_GET_ITEM(pair, 1);   /* borrowed: the Python side keeps every map it
                                              * hands out alive for the session (_c_keep) */
    return PyTuple_GET_ITEM(pair, 0);
}

/* The site of this call of module (modsites.h), or -1 without a table.  Runs no Python code,
 * cannot fail visibly. */
static int64_t call_site(xsp_ModuleCallObject *self, PyObject *module)
{
    if (!self->sites)
        return -1;
    /* the frame of the code calling the module: this wrapper is C and pushed none */
    return xsp_sites_lookup(self->sites, PyEval_GetFrame(), Py_TYPE(module));
}

/* Begins the span of a call (returns its key, or 0 for none).  *stop = 1: an exception that
 * is not an Exception is set; the call must raise it. */
static uint64_t begin_call(xsp_ModuleCallObject *self, PyObject *module, int *stop)
{
    if (tls_serial != self->serial) {       /* this thread's first call through this wrapper */
        tls_names = NULL;
        tls_depth = 0;
        tls_serial = self->serial;
        PyObject *r = PyObject_CallNoArgs(self->new_thread);
        if (r == NULL)
            count_error(self, stop);
        Py_XDECREF(r);
        if (*stop)
            return 0;
    }
    if (tls_depth == 0) {                   /* a top-level (model) call: Python maps names */
        PyObject *site = PyLong_FromLongLong(call_site(self, module));
        PyObject *args[2] = {module, site};
        PyObject *pair = site ? PyObject_Vectorcall(self->top, args, 2, NULL) : NULL;
        Py_XDECREF(site);
        PyObject *k = take_pair(self, pair, stop);
        uint64_t key = 0;
        if (k != NULL && k != Py_None) {
            key = PyLong_AsUnsignedLongLong(k);
            if (key == (uint64_t)-1 && PyErr_Occurred()) {
                count_error(self, stop);
                key = 0;
            }
        }
        Py_XDECREF(pair);
        return key;
    }
    if (!self->record_modules)
        return 0;
    PyObject *id = PyLong_FromVoidPtr(module);
    if (id == NULL) {
        count_error(self, stop);
        return 0;
    }
    PyObject *name = tls_names ? PyDict_GetItemWithError(tls_names, id) : NULL;  /* borrowed */
    Py_DECREF(id);
    PyObject *pair = NULL;
    if (name == NULL) {                     /* not in the map: Python names it (rare) */
        if (PyErr_Occurred()) {
            count_error(self, stop);
            return 0;
        }
        pair = PyObject_CallOneArg(self->name_of, module);
        name = take_pair(self, pair, stop);
    }
    const char *s = name != NULL && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    uint64_t key = 0;
    if (s == NULL) {
        if (name != NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "xsp: a module name that is not a str");
            count_error(self, stop);
        }
    } else {
        /* both strings are NUL-terminated and stay put for the session (the names map keeps
         * the str, the class its name): the core's pointer cache finds them without hashing */
        const char *cls = Py_TYPE(module)->tp_name;
        if (!(Py_TYPE(module)->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
            const char *dot = strrchr(cls, '.');   /* a static type: "package.Name" */
            if (dot != NULL)
                cls = dot + 1;
        }
        key = xsp_py_new_key();
        xsp_rec_begin(XSP_LEVEL_L, XSP_KIND_MODULE, s, XSP_NAME_NUL, cls, XSP_NAME_NUL, key,
                      call_site(self, module), 0);
    }
    Py_XDECREF(pair);
    return key;
}

/* After the forward of a call that enter() recorded: leave(rec), with the forward's
 * exception (res NULL) saved and restored around it.  Returns res, or NULL with the exception
 * that leave raised when it is not an Exception (res is then released, the forward's exception
 * becomes its context).  Steals rec and res. */
static PyObject *call_leave(xsp_ModuleCallObject *self, PyObject *rec, PyObject *res)
{
    PyObject *exc = res == NULL ? xsp_take_exc() : NULL;
    PyObject *r = PyObject_CallOneArg(self->leave, rec);
    Py_DECREF(rec);
    if (r != NULL) {
        Py_DECREF(r);
    } else {
        int stop = 0;
        count_error(self, &stop);
        if (stop) {                         /* an interrupt: it wins, as in a `finally` */
            Py_XDECREF(res);
            if (exc != NULL) {
                PyObject *now = xsp_take_exc();
                PyException_SetContext(now, exc);   /* steals exc */
                xsp_give_exc(now);
            }
            return NULL;
        }
    }
    xsp_give_exc(exc);
    return res;
}

/* The forward of a call, with the thread's depth counted around it.  Returns what the
 * wrapped __call__ returned (NULL with its exception set). */
static inline PyObject *forward(xsp_ModuleCallObject *self, PyObject *const *args,
                                size_t nargsf, PyObject *kwnames)
{
    uint64_t serial = self->serial;
    tls_depth++;
    PyObject *res = PyObject_Vectorcall(self->orig, args, nargsf, kwnames);
    if (tls_serial == serial)   /* a newer wrapper may have reset this thread meanwhile */
        tls_depth--;
    return res;
}

/* A call with record_shapes / profile_memory (self->enter set): the common path plus the
 * record of a call that began a span.  Kept out of line, so that the common path's code is
 * what it was without these options. */
static __attribute__((noinline)) PyObject *
call_with_record(xsp_ModuleCallObject *self, PyObject *const *args, size_t nargsf,
                 PyObject *kwnames)
{
    int stop = 0;
    uint64_t key = begin_call(self, args[0], &stop);
    PyObject *rec = NULL;
    if (key != 0 && !stop) {
        rec = PyObject_Vectorcall(self->enter, args, nargsf, kwnames);
        if (rec == NULL)
            count_error(self, &stop);
    }
    if (stop) {                             /* Ctrl-C (or the like) inside our bookkeeping */
        if (key != 0)
            xsp_rec_end(key, 0);
        return NULL;
    }
    PyObject *res = forward(self, args, nargsf, kwnames);
    if (rec != NULL)
        res = call_leave(self, rec, res);
    if (key != 0)
        xsp_rec_end(key, 0);
    return res;
}

static PyObject *mc_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames)
{
    xsp_ModuleCallObject *self = (xsp_ModuleCallObject *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (!atomic_load_explicit(&self->on, memory_order_relaxed) || nargs < 1)
        return PyObject_Vectorcall(self->orig, args, nargsf, kwnames);
    if (self->enter != NULL)
        return call_with_record(self, args, nargsf, kwnames);
    int stop = 0;
    uint64_t key = begin_call(self, args[0], &stop);
    if (stop) {                             /* Ctrl-C (or the like) inside our bookkeeping */
        if (key != 0)
            xsp_rec_end(key, 0);
        return NULL;
    }
    PyObject *res = forward(self, args, nargsf, kwnames);
    if (key != 0)
        xsp_rec_end(key, 0);   /* no Python, cannot raise: the forward's exception stays */
    return res;
}

/* ModuleCall(orig, top, name_of, new_thread, record_modules, sites=None, enter=None,
 *            leave=None) */
static PyObject *mc_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"orig", "top", "name_of", "new_thread", "record_modules", "sites",
                             "enter", "leave", NULL};
    PyObject *orig, *top, *name_of, *new_thread, *sites = Py_None, *enter = Py_None,
             *leave = Py_None;
    int record_modules;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOp|OOO:ModuleCall", kwlist, &orig, &top,
                                     &name_of, &new_thread, &record_modules, &sites, &enter,
                                     &leave))
        return NULL;
    if (sites != Py_None && !xsp_sites_is(sites))
        return PyErr_Format(PyExc_TypeError, "ModuleCall: sites must be a ModuleSites or None");
    if ((enter == Py_None) != (leave == Py_None)
        || (enter != Py_None && (!PyCallable_Check(enter) || !PyCallable_Check(leave))))
        return PyErr_Format(PyExc_TypeError, "ModuleCall: enter and leave are two callables, "
                            "or both None");
    if (!PyCallable_Check(orig) || !PyCallable_Check(top) || !PyCallable_Check(name_of)
        || !PyCallable_Check(new_thread))
        return PyErr_Format(PyExc_TypeError, "ModuleCall: orig, top, name_of and new_thread "
                            "must be callable");
    xsp_ModuleCallObject *self = (xsp_ModuleCallObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = mc_vectorcall;
    self->orig = Py_NewRef(orig);
    self->top = Py_NewRef(top);
    self->name_of = Py_NewRef(name_of);
    self->new_thread = Py_NewRef(new_thread);
    self->sites = sites == Py_None ? NULL : Py_NewRef(sites);
    self->enter = enter == Py_None ? NULL : Py_NewRef(enter);
    self->leave = leave == Py_None ? NULL : Py_NewRef(leave);
    self->serial = atomic_fetch_add_explicit(&next_serial, 1, memory_order_relaxed);
    self->record_modules = record_modules;
    atomic_store_explicit(&self->on, 1, memory_order_relaxed);
    atomic_store_explicit(&self->errors, 0, memory_order_relaxed);
    return (PyObject *)self;
}

static int mc_traverse(xsp_ModuleCallObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->orig);
    Py_VISIT(self->top);
    Py_VISIT(self->name_of);
    Py_VISIT(self->new_thread);
    Py_VISIT(self->sites);
    Py_VISIT(self->enter);
    Py_VISIT(self->leave);
    return 0;
}

static int mc_clear(xsp_ModuleCallObject *self)
{
    Py_CLEAR(self->orig);
    Py_CLEAR(self->top);
    Py_CLEAR(self->name_of);
    Py_CLEAR(self->new_thread);
    Py_CLEAR(self->sites);
    Py_CLEAR(self->enter);
    Py_CLEAR(self->leave);
    return 0;
}

static void mc_dealloc(xsp_ModuleCallObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    mc_clear(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

/* Attribute access.  On the class (nn.Module.__call__): the wrapper itself.  On an instance
 * (module.__call__): the WRAPPED __call__ bound to it, not the wrapper, so that what reads the
 * attribute sees an unpatched nn.Module: torch.compile's Dynamo traces straight into forward
 * only when `mod.__call__.__func__ is` the __call__ it saved at import, and OptimizedModule
 * binds `mod.__call__` when it is made; a wrapper seen there breaks the graph (for the whole
 * process: nothing guards Module.__call__).  A call `module(x)` does not read the attribute:
 * CPython calls a method descriptor unbound through the type, so it still reaches the
 * wrapper.  An explicit `module.__call__(x)` is therefore not recorded (docs/api.md); a
 * compiled module's is (is_compiled_module). */
/* Whether obj is a torch.compile'd module (torch._dynamo's OptimizedModule, by class name in
 * its MRO): its own __call__ reaches nn.Module's through super().__call__, an attribute read,
 * which must then give the wrapper, so that the compiled model's call is recorded.  Dynamo
 * never reads it (it binds the inner module's __call__). */
static int is_compiled_module(PyObject *obj)
{
    PyObject *mro = Py_TYPE(obj)->tp_mro;
    if (mro == NULL || !PyTuple_Check(mro))
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); i++) {
        const char *name = ((PyTypeObject *)PyTuple_GET_ITEM(mro, i))->tp_name;
        const char *dot = strrchr(name, '.');
        if (strcmp(dot ? dot + 1 : name, "OptimizedModule") == 0)
            return 1;
    }
    return 0;
}

/* The attribute read of the wrapper `self` of the __call__ `orig` (see above): the wrapper on
 * the class and for a compiled module, orig bound elsewhere. */
static PyObject *bind_call(PyObject *self, PyObject *orig, PyObject *obj)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    if (orig == NULL || is_compiled_module(obj))
        return PyMethod_New(self, obj);
    descrgetfunc get = Py_TYPE(orig)->tp_descr_get;
    if (get != NULL)
        return get(orig, obj, (PyObject *)Py_TYPE(obj));
    return PyMethod_New(orig, obj);
}

static PyObject *mc_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    (void)type;
    return bind_call(self, ((xsp_ModuleCallObject *)self)->orig, obj);
}

int xsp_modulecall_is(PyObject *o)
{
    return Py_TYPE(o)->tp_dealloc == (destructor)mc_dealloc;
}

void xsp_modulecall_set_on(PyObject *o, int on)
{
    atomic_store_explicit(&((xsp_ModuleCallObject *)o)->on, on, memory_order_relaxed);
}

void xsp_modulecall_set_orig(PyObject *o, PyObject *orig)
{
    xsp_ModuleCallObject *self = (xsp_ModuleCallObject *)o;
    Py_XSETREF(self->orig, Py_NewRef(orig));
}

long long xsp_modulecall_errors(PyObject *o)
{
    return atomic_load_explicit(&((xsp_ModuleCallObject *)o)->errors, memory_order_relaxed);
}

PyObject *xsp_modulecall_sites(PyObject *o)
{
    return ((xsp_ModuleCallObject *)o)->sites;
}

static PyObject *mc_count_error(xsp_ModuleCallObject *self, PyObject *Py_UNUSED(ignored))
{
    atomic_fetch_add_explicit(&self->errors, 1, memory_order_relaxed);
    Py_RETURN_NONE;
}

static PyObject *mc_set_on(xsp_ModuleCallObject *self, PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    atomic_store_explicit(&self->on, on, memory_order_relaxed);
    Py_RETURN_NONE;
}

static PyObject *mc_depth(xsp_ModuleCallObject *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLong(tls_serial == self->serial ? tls_depth : 0);
}

static PyObject *mc_get_errors(xsp_ModuleCallObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(atomic_load_explicit(&self->errors, memory_order_relaxed));
}

static PyObject *mc_get_wrapped(xsp_ModuleCallObject *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->orig ? self->orig : Py_None);
}

static PyObject *mc_get_qualname(PyObject *self, void *Py_UNUSED(closure))
{
    (void)self;
    return PyUnicode_FromString("Module.__call__ (xsp)");
}

static PyObject *mc_get_name(PyObject *self, void *Py_UNUSED(closure))
{
    (void)self;
    return PyUnicode_FromString("__call__");
}

static PyMethodDef mc_methods[] = {
    {"set_on", (PyCFunction)mc_set_on, METH_O,
     "set_on(flag): record (True) or only forward (False)."},
    {"depth", (PyCFunction)mc_depth, METH_NOARGS,
     "depth() -> open module calls on the calling thread."},
    {"count_error", (PyCFunction)mc_count_error, METH_NOARGS,
     "count_error(): one failure in the Python bookkeeping, counted in errors (hook_errors)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef mc_getset[] = {
    {"errors", (getter)mc_get_errors, NULL, "failures in the bookkeeping (counted)", NULL},
    {"__wrapped__", (getter)mc_get_wrapped, NULL, "the __call__ wrapped", NULL},
    {"__qualname__", mc_get_qualname, NULL, "what tracebacks and inspect show", NULL},
    {"__name__", mc_get_name, NULL, "__call__, as the function it replaces (torch.jit and "
     "pickle look methods up by it)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef mc_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(xsp_ModuleCallObject, vectorcall), READONLY,
     NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot mc_slots[] = {
    {Py_tp_new, mc_new},
    {Py_tp_dealloc, mc_dealloc},
    {Py_tp_traverse, mc_traverse},
    {Py_tp_clear, mc_clear},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, mc_descr_get},
    {Py_tp_methods, mc_methods},
    {Py_tp_getset, mc_getset},
    {Py_tp_members, mc_members},
    {Py_tp_doc, "ModuleCall(orig, top, name_of, new_thread, record_modules, sites=None, "
                "enter=None, leave=None): xsp's nn.Module.__call__ wrapper (see "
                "xsp/producers/profiler.py)."},
    {0, NULL},
};

PyType_Spec xsp_modulecall_spec = {
    .name = "xsp._core.ModuleCall",
    .basicsize = sizeof(xsp_ModuleCallObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL
             | Py_TPFLAGS_METHOD_DESCRIPTOR | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = mc_slots,
};
