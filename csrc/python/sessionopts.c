/*
 * sessionopts.c: xsp._core.SessionOptions, the contract between xsp.profile and its Session.
 *
 * What it is for: everything the C session needs from Python, passed, not discovered.  The
 * profile (xsp/producers/profiler.py) makes one, fills its fields, and hands it to
 * Session._setup, which checks and copies what it keeps (sessionmod.c); from then on the C side
 * holds its own references.  Among the fields are the tables the stop reads: the thread names
 * Python fills as it sees threads, the module wrapper's side table and the torch.compile
 * attribute tables.  They are plain dicts and lists that Python mutates in place while the
 * profile runs; the stop reads them with the concrete API, so no Python code runs there, and
 * no attribute of any Python object is looked up by name: not at stop, and not at setup
 * either, where the fields are this struct's (sessionopts.h documents each).
 *
 * Why a type and not _setup keywords: the profile builds its options in named steps (one per
 * source), and the record's fields, with their types enforced by the member descriptors and
 * their meaning stated once in sessionopts.h, are the whole contract.  Its fields stay
 * writable, so a test can make a session of exactly the sources it wants.
 */
#include "sessionopts.h"

#include <stddef.h>
#include <structmember.h>

static PyObject *opts_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    return type->tp_alloc(type, 0);     /* every field zero: NULL (none), 0, False */
}

/* SessionOptions(levels=None, region=None, **fields): each keyword sets the field of its
 * name; an unknown one is a TypeError. */
static int opts_init(PyObject *self, PyObject *args, PyObject *kw)
{
    static const char *const pos[] = {"levels", "region"};
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n > 2) {
        PyErr_Format(PyExc_TypeError, "SessionOptions takes at most 2 positional arguments "
                     "(levels, region), not %zd", n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (PyObject_SetAttrString(self, pos[i], PyTuple_GET_ITEM(args, i)) < 0)
            return -1;
    Py_ssize_t at = 0;
    PyObject *k, *v;
    while (kw && PyDict_Next(kw, &at, &k, &v)) {
        if (PyObject_SetAttr(self, k, v) == 0)
            continue;
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "SessionOptions has no option %R", k);
        }
        return -1;
    }
    return 0;
}

#define OBJ(name, doc) {#name, T_OBJECT, offsetof(xsp_pysessionopts, name), 0, doc}

static PyMemberDef opts_members[] = {
    OBJ(levels, "str: the levels to record, e.g. 'ML'"),
    OBJ(region, "str: the region span's name, or None (no M spans)"),
    {"max_bytes", T_ULONGLONG, offsetof(xsp_pysessionopts, max_bytes), 0,
     "the recorder's memory cap in bytes (0: the core's default)"},
    {"gpu_max_bytes", T_ULONGLONG, offsetof(xsp_pysessionopts, gpu_max_bytes), 0,
     "cap on the GPU records kept, in bytes"},
    {"gpu", T_BOOL, offsetof(xsp_pysessionopts, gpu), 0, "record level G (CUPTI)"},
    {"gpu_share", T_BOOL, offsetof(xsp_pysessionopts, gpu_share), 0,
     "trace G without CUPTI's one subscription when another client holds it"},
    {"gpu_fallback", T_BOOL, offsetof(xsp_pysessionopts, gpu_fallback), 0,
     "when G cannot start: warn and record M and L"},
    OBJ(module_type, "nn.Module, whose __call__ the wrapper replaces while recording, or None"),
    OBJ(wrapper, "the ModuleCall to install (with module_type), or None"),
    OBJ(torch, "xsp._torch._C_API: level L ops, or None"),
    {"torch_options", T_UINT, offsetof(xsp_pysessionopts, torch_options), 0,
     "the shim's options: 1 each op's inputs, 2 its allocations"},
    OBJ(sync, "callable run at stop (level G), returning None or a message, or None"),
    OBJ(stack, "with_stack's PyStack, or None"),
    OBJ(schedule, "(wait, warmup, active, repeat, skip_first), or None"),
    OBJ(on_trace_ready, "with a schedule: called with the profile once per cycle, or None"),
    OBJ(meta, "dict {str: int|float|str} written into the trace at stop, or None"),
    OBJ(where, "str: where the profile was made, for messages"),
    OBJ(thread_names, "dict {native thread id: name}, filled by Python as it sees threads; "
                      "read at stop"),
    OBJ(side, "dict {native thread id: [[shapes, mem0, delta], ...]}: the module wrapper's "
              "record_shapes/profile_memory records, read at stop, or None"),
    OBJ(span_attrs, "torch.compile's attribute tables (xsp/producers/dynamo.py), read at "
                    "stop, or None"),
    {NULL, 0, 0, 0, NULL},
};

#undef OBJ

/* Every object field, for traverse and clear. */
#define OPTS_OBJECTS(X)                                                                      \
    X(levels) X(region) X(module_type) X(wrapper) X(torch) X(sync) X(stack) X(schedule)      \
    X(on_trace_ready) X(meta) X(where) X(thread_names) X(side) X(span_attrs)

static int opts_traverse(PyObject *op, visitproc visit, void *arg)
{
    xsp_pysessionopts *self = (xsp_pysessionopts *)op;
    Py_VISIT(Py_TYPE(op));
#define VISIT(f) Py_VISIT(self->f);
    OPTS_OBJECTS(VISIT)
#undef VISIT
    return 0;
}

static int opts_clear(PyObject *op)
{
    xsp_pysessionopts *self = (xsp_pysessionopts *)op;
#define CLEAR(f) Py_CLEAR(self->f);
    OPTS_OBJECTS(CLEAR)
#undef CLEAR
    return 0;
}

static void opts_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    opts_clear(op);
    tp->tp_free(op);
    Py_DECREF(tp);
}

int xsp_sessionopts_is(PyObject *o)
{
    return Py_TYPE(o)->tp_dealloc == opts_dealloc;
}

static PyType_Slot opts_slots[] = {
    {Py_tp_new, opts_new},
    {Py_tp_init, opts_init},
    {Py_tp_dealloc, opts_dealloc},
    {Py_tp_traverse, opts_traverse},
    {Py_tp_clear, opts_clear},
    {Py_tp_members, opts_members},
    {Py_tp_doc, "SessionOptions(levels=None, region=None, **fields): what Session._setup "
                "needs (see csrc/python/sessionopts.h)."},
    {0, NULL},
};

PyType_Spec xsp_sessionopts_spec = {
    .name = "xsp._core.SessionOptions",
    .basicsize = sizeof(xsp_pysessionopts),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = opts_slots,
};
