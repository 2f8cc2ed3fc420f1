/*
 * shim.cpp: PyTorch RecordFunction events -> the core's level-L spans (see shim.h).
 *
 * One global at::RecordFunction callback, scopes FUNCTION, BACKWARD_FUNCTION and USER_SCOPE,
 * with inputs, outputs and ids switched off (each costs torch work per op).  The start
 * callback calls rec_begin_l(kind, name, ...) (level L) and returns no ObserverContext, so torch
 * allocates nothing for us per op; the end callback calls rec_end(key, 0).  The key is the
 * address of the RecordFunction, which is the same object at start and at end and cannot be
 * shared by two RecordFunctions alive at once; the core matches begin and end per thread, so
 * an async RecordFunction that ends on another thread is counted as unmatched, not misfiled.
 *
 * Span arguments: a0 = seqNr(), a1 = forwardThreadId() for a backward node and threadId()
 * for everything else.  Measured on torch 2.13: with grad mode on, every op dispatched through
 * autograd carries its thread's *next* autograd sequence number, whether or not it records a
 * backward node (only an op that does record one consumes the number), so the number is not
 * unique: a backward node's (seqNr, forwardThreadId) names the last op on that thread that
 * started with that number.  Under no_grad, inference_mode and inside backward (without
 * create_graph) ops get -1; AccumulateGrad nodes get -1 too.  Both thread ids are
 * RecordFunction's logical ids (1, 2, ... in the order threads first record), not OS ids.
 *
 * Lifetime: torch copies the callback pointers into each RecordFunction when it starts, so an
 * op in flight when we detach still runs our end callback afterwards, and a re-attach can
 * happen while it does.  Hence the two core functions are kept in file-static atomics that
 * are set at attach and never cleared: the end callback stays a harmless call into the core
 * (whose rec_end is a no-op outside a session and counts unmatched keys), and there is no
 * data race when a re-attach stores the pointers again.  Relaxed loads are plain moves on the
 * machines we run on; the pointers are published to other threads by torch's own
 * synchronisation of its global callback list.
 *
 * Hot path rules: no allocation, no lock, no exception escapes (the callbacks are noexcept and
 * catch everything), no Python.  RecordFunction::name() is an out-of-line call that returns
 * the interned schema name (or the user scope's string) without allocating.
 */
#include "shim.h"

extern "C" {
#include "core/trace.h"  /* XSP_LEVEL_L, XSP_KIND_*: only the enums are used */
}

#include <ATen/record_function.h>
#include <torch/version.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>

namespace {

using begin_fn = void (*)(uint8_t, const char *, uint64_t, int64_t, int64_t);   /* rec_begin_l */
using end_fn = void (*)(uint64_t, uint32_t);

/* Set at attach, never cleared (see the lifetime note above). */
std::atomic<begin_fn> g_begin{nullptr};  /* the core's rec_begin_l, null before the first attach */
std::atomic<end_fn> g_end{nullptr};      /* the core's rec_end, null before the first attach */

/* Protected by g_lock: written by attach/detach only. */
std::mutex g_lock;                        /* serialises attach and detach */
at::CallbackHandle g_handle = at::INVALID_CALLBACK_HANDLE;  /* our callback, 0 when detached */
std::atomic<int> g_attached{0};           /* 1 while g_handle is registered; read lock-free */

/* Writes a NUL-terminated message into err when there is room. */
void set_err(char *err, size_t errlen, const char *msg) noexcept
{
    if (err != nullptr && errlen > 0)
        std::snprintf(err, errlen, "%s", msg);
}

uint8_t kind_of(at::RecordScope scope) noexcept
{
    switch (scope) {
    case at::RecordScope::BACKWARD_FUNCTION:
        return XSP_KIND_BACKWARD;
    case at::RecordScope::USER_SCOPE:
        return XSP_KIND_SCOPE;
    default:                               /* FUNCTION: the only other scope we register */
        return XSP_KIND_OP;
    }
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction &fn) noexcept
{
    try {
        begin_fn begin = g_begin.load(std::memory_order_relaxed);
        if (begin == nullptr)
            return nullptr;
        at::RecordScope scope = fn.scope();
        const char *name = fn.name();
        if (name == nullptr)
            name = "";
        uint64_t tid = scope == at::RecordScope::BACKWARD_FUNCTION ? fn.forwardThreadId()
                                                                   : fn.threadId();
        /* level L, a NUL-terminated name: the core finds a name it saw at this address
         * without strlen or hashing (aten names live in the dispatcher), and checks the bytes
         * still match. */
        begin(kind_of(scope), name, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&fn)),
              fn.seqNr(), static_cast<int64_t>(tid));
    } catch (...) {
        /* name() cannot throw in practice; if it ever does, the span is lost and its end is
         * counted as unmatched by the core. */
    }
    return nullptr;
}

void on_end(const at::RecordFunction &fn, at::ObserverContext *) noexcept
{
    end_fn end = g_end.load(std::memory_order_relaxed);
    if (end != nullptr)
        end(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&fn)), 0);
}

} // namespace

extern "C" int xsp_torch_attach(const xsp_core_api *api, char *err, size_t errlen)
{
    try {
        std::lock_guard<std::mutex> guard(g_lock);
        if (g_handle != at::INVALID_CALLBACK_HANDLE) {
            set_err(err, errlen, "xsp._torch: already attached");
            return -1;
        }
        if (api == nullptr) {
            set_err(err, errlen, "xsp._torch: no core API table");
            return -1;
        }
        size_t need = offsetof(xsp_core_api, rec_begin_l) + sizeof(api->rec_begin_l);
        if (api->version < 2 || api->size < need) {
            char msg[160];
            std::snprintf(msg, sizeof msg,
                          "xsp._torch: core API table too old (version %u, size %u; need "
                          "version >= 2, size >= %zu): rebuild xsp",
                          (unsigned)api->version, (unsigned)api->size, need);
            set_err(err, errlen, msg);
            return -1;
        }
        if (api->rec_begin_l == nullptr || api->rec_end == nullptr) {
            set_err(err, errlen, "xsp._torch: core API table lacks rec_begin_l/rec_end");
            return -1;
        }
        g_begin.store(api->rec_begin_l, std::memory_order_release);
        g_end.store(api->rec_end, std::memory_order_release);
        at::CallbackHandle h = at::addGlobalCallback(
            at::RecordFunctionCallback(on_start, on_end)
                .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                         at::RecordScope::USER_SCOPE})
                .needsInputs(false)
                .needsOutputs(false)
                .needsIds(false));
        if (h == at::INVALID_CALLBACK_HANDLE) {
            set_err(err, errlen, "xsp._torch: at::addGlobalCallback returned no handle");
            return -1;
        }
        g_handle = h;
        g_attached.store(1, std::memory_order_release);
        return 0;
    } catch (const std::exception &e) {
        char msg[512];
        std::snprintf(msg, sizeof msg, "xsp._torch: torch refused the callback: %s", e.what());
        set_err(err, errlen, msg);
    } catch (...) {
        set_err(err, errlen, "xsp._torch: torch refused the callback (unknown exception)");
    }
    return -1;
}

extern "C" void xsp_torch_detach(void)
{
    try {
        std::lock_guard<std::mutex> guard(g_lock);
        if (g_handle == at::INVALID_CALLBACK_HANDLE)
            return;
        at::removeCallback(g_handle);  /* only ours: never clearCallbacks / clearGlobalCallbacks */
        g_handle = at::INVALID_CALLBACK_HANDLE;
        g_attached.store(0, std::memory_order_release);
    } catch (...) {
        /* std::mutex::lock or torch threw (neither does in practice): we stay attached, so
         * attached() tells the truth and a later detach can try again. */
    }
}

extern "C" int xsp_torch_attached(void)
{
    return g_attached.load(std::memory_order_acquire);
}

extern "C" const char *xsp_torch_build_version(void)
{
    return TORCH_VERSION;
}

/*
 * The benchmark floor: a global callback with exactly our scopes and options that does
 * nothing, so benchmarks can measure what any RecordFunction-based profiler pays before it
 * records anything.  Not used by profiling.
 */
namespace {

std::unique_ptr<at::ObserverContext> floor_start(const at::RecordFunction &) noexcept
{
    return nullptr;
}

void floor_end(const at::RecordFunction &, at::ObserverContext *) noexcept {}

at::CallbackHandle g_floor = at::INVALID_CALLBACK_HANDLE;  /* protected by g_lock */

} // namespace

extern "C" int xsp_torch_floor_attach(void)
{
    try {
        std::lock_guard<std::mutex> guard(g_lock);
        if (g_floor != at::INVALID_CALLBACK_HANDLE)
            return -1;
        g_floor = at::addGlobalCallback(
            at::RecordFunctionCallback(floor_start, floor_end)
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

extern "C" void xsp_torch_floor_detach(void)
{
    try {
        std::lock_guard<std::mutex> guard(g_lock);
        if (g_floor != at::INVALID_CALLBACK_HANDLE)
            at::removeCallback(g_floor);
        g_floor = at::INVALID_CALLBACK_HANDLE;
    } catch (...) {
    }
}
