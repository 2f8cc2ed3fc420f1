/*
 * torchmod.c: xsp._torch, the CPython face of the torch shim (csrc/torch/shim.h).
 *
 * A thin binding: attach() fetches the core's function table from the capsule that xsp._core
 * exports (XSP_CORE_API_CAPSULE, see xsp_api.h) and hands it to the shim; detach() and
 * attached() forward to it.  The module also exposes torch_version, the version of the torch
 * headers the shim was compiled against, so that the Python package can refuse to use a shim
 * built for another torch than the one imported (libtorch's C++ ABI is per version).  Import
 * torch before this module: the shared object links libc10 and libtorch_cpu.
 *
 * The module keeps no state of its own (m_size 0): the one thing attached is torch's global
 * callback list, which is process-wide by nature, and the shim guards it with its own lock.
 * That is also why the module does not support sub-interpreters (torch does not either) and
 * why it can run without the GIL: nothing here touches shared Python objects.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "include/xsp_api.h"
#include "torch/shim.h"

PyDoc_STRVAR(attach_doc,
"attach() -> None\n\n"
"Registers xsp's global RecordFunction callback, which records aten ops, autograd backward\n"
"nodes and user scopes into xsp._core's session.  Raises RuntimeError when already attached\n"
"or when torch or the core refuses.");

static PyObject *
xsp_torch_py_attach(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    (void)module;
    const xsp_core_api *api = (const xsp_core_api *)PyCapsule_Import(XSP_CORE_API_CAPSULE, 0);
    if (api == NULL)
        return NULL;  /* ImportError / AttributeError from the import, as set */
    char err[512];
    int rc;
    /* Not releasing the GIL: registering a callback is short, and the core's functions are
     * static for the life of the process, so the table needs no reference kept. */
    rc = xsp_torch_attach(api, err, sizeof err);
    if (rc != 0) {
        PyErr_SetString(PyExc_RuntimeError, err);
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(detach_doc,
"detach() -> None\n\n"
"Removes xsp's RecordFunction callback, leaving other tools' callbacks in place.  Does\n"
"nothing when not attached.");

static PyObject *
xsp_torch_py_detach(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    (void)module;
    xsp_torch_detach();
    Py_RETURN_NONE;
}

PyDoc_STRVAR(attached_doc,
"attached() -> bool\n\n"
"True while xsp's RecordFunction callback is registered.");

static PyObject *
xsp_torch_py_attached(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    (void)module;
    return PyBool_FromLong(xsp_torch_attached());
}

static PyObject *
xsp_torch_py_floor_attach(PyObject *module, PyObject *args, PyObject *kwargs)
{
    (void)module;
    static char *kwlist[] = {"clock", NULL};
    int clock = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:floor_attach", kwlist, &clock))
        return NULL;
    if (xsp_torch_floor_attach(clock) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "xsp._torch: floor callback already attached or refused");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
xsp_torch_py_floor_detach(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    (void)module;
    xsp_torch_floor_detach();
    Py_RETURN_NONE;
}

static PyObject *
xsp_torch_py_bench_add(PyObject *module, PyObject *args)
{
    (void)module;
    Py_ssize_t n = 0, warm = 0;
    if (!PyArg_ParseTuple(args, "n|n:bench_add", &n, &warm))
        return NULL;
    if (n < 0 || warm < 0) {
        PyErr_Format(PyExc_ValueError, "bench_add: n and warm must be >= 0, got %zd and %zd",
                     n, warm);
        return NULL;
    }
    uint64_t ns = 0;
    char err[256] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = xsp_torch_bench_add((uint64_t)n, (uint64_t)warm, &ns, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        PyErr_SetString(PyExc_RuntimeError, err);
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(ns);
}

static PyMethodDef xsp_torch_methods[] = {
    {"bench_add", xsp_torch_py_bench_add, METH_VARARGS,
     "bench_add(n, warm=0) -> int\n\nBenchmarks only: ns taken by n calls of at::add on two "
     "8-float CPU tensors, looped in C++ after warm untimed calls (the GIL released)."},
    {"floor_attach", (PyCFunction)(void (*)(void))xsp_torch_py_floor_attach,
     METH_VARARGS | METH_KEYWORDS,
     "floor_attach(clock=False)\n\nBenchmarks only: registers a do-nothing RecordFunction "
     "callback (the floor); with clock=True one that reads the TSC (x86-64) at entry and exit."},
    {"floor_detach", xsp_torch_py_floor_detach, METH_NOARGS,
     "Benchmarks only: removes the do-nothing callback."},
    {"attach", xsp_torch_py_attach, METH_NOARGS, attach_doc},
    {"detach", xsp_torch_py_detach, METH_NOARGS, detach_doc},
    {"attached", xsp_torch_py_attached, METH_NOARGS, attached_doc},
    {NULL, NULL, 0, NULL}
};

/* Py_mod_exec: adds torch_version.  Returns 0, or -1 with an exception set. */
static int
xsp_torch_exec(PyObject *module)
{
    return PyModule_AddStringConstant(module, "torch_version", xsp_torch_build_version());
}

static PyModuleDef_Slot xsp_torch_slots[] = {
    {Py_mod_exec, (void *)xsp_torch_exec},
#ifdef Py_mod_multiple_interpreters
    /* torch's callback list is process-wide and torch itself is not sub-interpreter safe. */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
#ifdef Py_mod_gil
    /* No Python state is shared; attach/detach are serialised by the shim's own lock. */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL}
};

PyDoc_STRVAR(module_doc,
"xsp._torch: records PyTorch's RecordFunction events (ops, backward nodes, user scopes)\n"
"into xsp._core.  Built against one torch version, given by torch_version.");

static struct PyModuleDef xsp_torch_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "xsp._torch",
    .m_doc = module_doc,
    .m_size = 0,
    .m_methods = xsp_torch_methods,
    .m_slots = xsp_torch_slots,
};

PyMODINIT_FUNC
PyInit__torch(void)
{
    return PyModuleDef_Init(&xsp_torch_module);
}
