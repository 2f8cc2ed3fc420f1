/*
 * bench_torch.cpp: xsp._bench, the benchmarks' own native helpers; not part of the production
 * library (setup.py builds it only in dev builds, XSP_DEV=1).
 *
 * floor_attach(clock=False) / floor_detach(): a global RecordFunction callback with exactly the
 * scopes and options of xsp's shim (csrc/torch/shim.cpp) that does nothing, so benchmarks can
 * measure what any RecordFunction-based profiler pays before it records anything; with
 * clock=True the same callback reads the TSC on x86-64 (xsp's clock when the kernel's
 * clocksource is tsc; the steady clock elsewhere) at entry and at exit: what a profiler that
 * timestamps both ends of an op pays at least.
 *
 * bench_add(n, warm=0) -> ns: at::add on two 8-float CPU tensors, warm times untimed, then n
 * times timed, from a C++ loop with the GIL released: the same dispatcher and RecordFunction
 * path as torch.add from Python, without the interpreter around it.
 *
 * The module keeps its one handle under a mutex of its own; nothing here throws into Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <ATen/ops/add.h>
#include <ATen/ops/ones.h>
#include <ATen/record_function.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace {

std::unique_ptr<at::ObserverContext> floor_start(const at::RecordFunction &) noexcept
{
    return nullptr;
}

void floor_end(const at::RecordFunction &, at::ObserverContext *) noexcept {}

/* one clock read, kept alive without a store */
inline void clock_read() noexcept
{
#if defined(__x86_64__)
    uint64_t t = __rdtsc();
#else
    int64_t t = std::chrono::steady_clock::now().time_since_epoch().count();
#endif
    __asm__ volatile("" : : "r"(t));
}

std::unique_ptr<at::ObserverContext> floor_clock_start(const at::RecordFunction &) noexcept
{
    clock_read();
    return nullptr;
}

void floor_clock_end(const at::RecordFunction &, at::ObserverContext *) noexcept
{
    clock_read();
}

std::mutex g_lock;                                          /* serialises attach and detach */
at::CallbackHandle g_floor = at::INVALID_CALLBACK_HANDLE;   /* protected by g_lock */

/* 0, or -1 when one is attached already or torch refused. */
int floor_attach(bool clock) noexcept
{
    try {
        std::lock_guard<std::mutex> guard(g_lock);
        if (g_floor != at::INVALID_CALLBACK_HANDLE)
            return -1;
        g_floor = at::addGlobalCallback(
            at::RecordFunctionCallback(clock ? floor_clock_start : floor_start,
                                       clock ? floor_clock_end : floor_end)
                .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                         at::RecordScope::USER_SCOPE})
                .needsInputs(false)
                .needsOutputs(false)
                .needsIds(false));
        return g_floor == at::INVALID_CALLBACK_HANDLE ? -1 : 0;
    } catch (...) {
        return -1;
    }
}

void floor_detach() noexcept
{
    try {
        std::lock_guard<std::mutex> guard(g_lock);
        if (g_floor != at::INVALID_CALLBACK_HANDLE)
            at::removeCallback(g_floor);
        g_floor = at::INVALID_CALLBACK_HANDLE;
    } catch (...) {
    }
}

/* 0 with the timed loop's ns in *ns, or -1 with torch's message in err. */
int bench_add(uint64_t n, uint64_t warm, uint64_t *ns, char *err, size_t errlen) noexcept
{
    try {
        at::Tensor a = at::ones({8});
        at::Tensor b = at::ones({8});
        for (uint64_t i = 0; i < warm; i++)
            (void)at::add(a, b);
        auto t0 = std::chrono::steady_clock::now();
        for (uint64_t i = 0; i < n; i++)
            (void)at::add(a, b);
        auto t1 = std::chrono::steady_clock::now();
        *ns = static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
        return 0;
    } catch (const std::exception &e) {
        std::snprintf(err, errlen, "%s", e.what());
    } catch (...) {
        std::snprintf(err, errlen, "xsp._bench.bench_add: unknown C++ exception");
    }
    return -1;
}

PyObject *py_floor_attach(PyObject *, PyObject *args, PyObject *kwargs)
{
    static const char *kwlist[] = {"clock", nullptr};
    int clock = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:floor_attach", const_cast<char **>(kwlist),
                                     &clock))
        return nullptr;
    if (floor_attach(clock != 0) != 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "xsp._bench: floor callback already attached or refused");
        return nullptr;
    }
    Py_RETURN_NONE;
}

PyObject *py_floor_detach(PyObject *, PyObject *)
{
    floor_detach();
    Py_RETURN_NONE;
}

PyObject *py_bench_add(PyObject *, PyObject *args)
{
    Py_ssize_t n = 0, warm = 0;
    if (!PyArg_ParseTuple(args, "n|n:bench_add", &n, &warm))
        return nullptr;
    if (n < 0 || warm < 0) {
        PyErr_Format(PyExc_ValueError, "bench_add: n and warm must be >= 0, got %zd and %zd", n,
                     warm);
        return nullptr;
    }
    uint64_t ns = 0;
    char err[256] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = bench_add(static_cast<uint64_t>(n), static_cast<uint64_t>(warm), &ns, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        PyErr_SetString(PyExc_RuntimeError, err);
        return nullptr;
    }
    return PyLong_FromUnsignedLongLong(ns);
}

PyMethodDef methods[] = {
    {"floor_attach", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(py_floor_attach)),
     METH_VARARGS | METH_KEYWORDS,
     "floor_attach(clock=False): a do-nothing RecordFunction callback (the floor); with "
     "clock=True one that reads the TSC (x86-64) at entry and exit."},
    {"floor_detach", py_floor_detach, METH_NOARGS, "Removes the floor callback."},
    {"bench_add", py_bench_add, METH_VARARGS,
     "bench_add(n, warm=0) -> int: ns taken by n calls of at::add on two 8-float CPU tensors, "
     "looped in C++ after warm untimed calls (the GIL released)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef_Slot slots[] = {
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
#ifdef Py_mod_gil
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, nullptr},
};

PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "xsp._bench",
    "xsp's benchmark helpers (dev builds only): the floor callbacks and a C++ loop of at::add.",
    0, methods, slots, nullptr, nullptr, nullptr,
};

} // namespace

PyMODINIT_FUNC PyInit__bench(void)
{
    return PyModuleDef_Init(&module);
}
