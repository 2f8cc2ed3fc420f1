/*
 * sessionopts.h: xsp._core.SessionOptions, everything a Session needs from Python, made once
 * by the profile before its start and given to Session._setup (see sessionopts.c).
 */
#ifndef XSP_SESSIONOPTS_H
#define XSP_SESSIONOPTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The options of one session: a plain record, its fields writable from Python until _setup
 * reads them (sessionmod.c copies what it keeps; later writes change nothing).  An object
 * field left unset reads as NULL or None: both mean "none". */
typedef struct {
    PyObject_HEAD
    PyObject *levels;           /* str, e.g. "ML": the levels to record (required) */
    PyObject *region;           /* str: the region span's name; None: no M spans */
    unsigned long long max_bytes;       /* the recorder's memory cap in bytes; 0: the core's */
    unsigned long long gpu_max_bytes;   /* cap on the GPU records kept; 0: the GPU store's */
    char gpu;                   /* record level G (CUPTI) */
    char gpu_share;             /* trace G without CUPTI's one subscription when held */
    char gpu_fallback;          /* G refused at start: warn and record M and L */
    PyObject *module_type;      /* nn.Module, whose __call__ the wrapper replaces, or None */
    PyObject *wrapper;          /* the ModuleCall installed as module_type.__call__, or None;
                                 * also where hook_errors and the call sites are read at stop */
    PyObject *torch;            /* xsp._torch._C_API (level L ops), or None */
    unsigned int torch_options; /* XSP_TORCH_INPUTS | XSP_TORCH_MEMORY for the shim */
    PyObject *sync;             /* callable run at stop (level G): None or a message */
    PyObject *stack;            /* with_stack's PyStack, or None */
    PyObject *schedule;         /* (wait, warmup, active, repeat, skip_first), or None */
    PyObject *on_trace_ready;   /* with a schedule: called with the profile per cycle, or None */
    PyObject *meta;             /* dict {str: int|float|str} written into the trace at stop */
    PyObject *where;            /* str: where the profile was made, for messages */
    /* the tables the stop reads (no Python runs there: exact dicts, lists, str, int) */
    PyObject *thread_names;     /* dict {native thread id: name} that Python fills as it sees
                                 * threads; names the trace's CPU tracks */
    PyObject *side;             /* dict {native thread id: [[shapes, mem0, delta], ...]}: the
                                 * module wrapper's record_shapes / profile_memory records */
    PyObject *span_attrs;       /* xsp/producers/dynamo.py's attribute tables (tracefinish.h,
                                 * xsp_py_attach_tables), or None */
} xsp_pysessionopts;

/* The type's spec; coremod.c turns it into a heap type at exec. */
extern PyType_Spec xsp_sessionopts_spec;

/* 1 when o is a SessionOptions, else 0.  Cannot fail. */
int xsp_sessionopts_is(PyObject *o);

/* The object o of an options field, or NULL for unset and None (borrowed).  Cannot fail. */
static inline PyObject *xsp_opt(PyObject *o)
{
    return o == Py_None ? NULL : o;
}

#endif
