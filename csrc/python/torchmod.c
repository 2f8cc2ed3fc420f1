/*
 * torchmod.c: xsp._torch, the CPython face of the torch shim (csrc/torch/shim.h).
 *
 * A thin binding: attach() fetches the core's function table from the capsule that xsp._core
 * exports (XSP_CORE_API_CAPSULE, see xsp_api.h) and hands it to the shim; detach() and
 * attached() forward to it.  The module also exposes torch_version, the version of the torch
 * headers the shim was compiled against, so that the Python package can refuse to use a shim
 * built for another torch than the one imported (libtorch's C++ ABI is per version).  Import
 * torch before this module: the shared object links libc10 and libtorch_cpu.  Profiles do not
 * call attach() and detach() from Python: xsp._core's session takes the shim's table from the
 * capsule _C_API and attaches inside its own start (one C call, see core/session.h).
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
    rc = xsp_torch_attach(api, 0, err, sizeof err);
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

PyDoc_STRVAR(mem_begin_doc,
"mem_begin() -> None\n\n"
"Starts counting the allocations and frees PyTorch reports to profilers on this thread (and\n"
"on the threads its work goes to: autograd's workers).  Raises RuntimeError when a window is\n"
"already open or when another profiler holds the thread's profiler state.");

static PyObject *
xsp_torch_py_mem_begin(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    (void)module;
    char err[512];
    if (xsp_torch_mem_begin(err, sizeof err) != 0) {
        PyErr_SetString(PyExc_RuntimeError, err);
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(mem_end_doc,
"mem_end() -> dict\n\n"
"Ends the window mem_begin() opened and returns its counts: {device: {allocs, alloc_bytes,\n"
"frees, free_bytes, peak_bytes}} for device 'cpu', 'cuda' and 'other'.  Raises\n"
"RuntimeError when no window is open or it was opened on another thread.");

static PyObject *
xsp_torch_py_mem_end(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    (void)module;
    char err[512];
    xsp_torch_mem_counts c;
    if (xsp_torch_mem_end(&c, err, sizeof err) != 0) {
        PyErr_SetString(PyExc_RuntimeError, err);
        return NULL;
    }
    static const char *const names[3] = {"cpu", "cuda", "other"};
    PyObject *out = PyDict_New();
    for (int i = 0; out != NULL && i < 3; i++) {
        PyObject *d = Py_BuildValue("{s:K,s:K,s:K,s:K,s:L}", "allocs",
                                    (unsigned long long)c.allocs[i], "alloc_bytes",
                                    (unsigned long long)c.alloc_bytes[i], "frees",
                                    (unsigned long long)c.frees[i], "free_bytes",
                                    (unsigned long long)c.free_bytes[i], "peak_bytes",
                                    (long long)c.peak_bytes[i]);
        if (d == NULL || PyDict_SetItemString(out, names[i], d) < 0)
            Py_CLEAR(out);
        Py_XDECREF(d);
    }
    return out;
}

static PyMethodDef xsp_torch_methods[] = {
    {"mem_begin", xsp_torch_py_mem_begin, METH_NOARGS, mem_begin_doc},
    {"mem_end", xsp_torch_py_mem_end, METH_NOARGS, mem_end_doc},
    {"attach", xsp_torch_py_attach, METH_NOARGS, attach_doc},
    {"detach", xsp_torch_py_detach, METH_NOARGS, detach_doc},
    {"attached", xsp_torch_py_attached, METH_NOARGS, attached_doc},
    {NULL, NULL, 0, NULL}
};

/* Py_mod_exec: adds torch_version and the capsule of the shim's table (xsp_api.h), through
 * which xsp._core's sessions attach and detach.  Returns 0, or -1 with an exception set. */
static int
xsp_torch_exec(PyObject *module)
{
    if (PyModule_AddStringConstant(module, "torch_version", xsp_torch_build_version()) < 0)
        return -1;
    PyObject *cap = PyCapsule_New((void *)xsp_torch_api_table(), XSP_TORCH_API_CAPSULE, NULL);
    int rc = cap ? PyModule_AddObjectRef(module, "_C_API", cap) : -1;
    Py_XDECREF(cap);
    return rc;
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
