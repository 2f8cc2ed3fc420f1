/*
 * shim.h: the plain-C face of the torch shim (shim.cpp), the only code in xsp that includes
 * libtorch headers.
 *
 * The shim turns PyTorch's RecordFunction events into the core's begin/end spans at level L:
 * aten operators (scope FUNCTION), autograd backward nodes (BACKWARD_FUNCTION) and user scopes
 * such as torch.profiler.record_function (USER_SCOPE).  It registers one *global* callback, so
 * it also sees ops run on autograd's backward threads, and it talks to the core only through
 * the function table of xsp_api.h, because the core is a separate extension module whose
 * symbols are hidden.
 *
 * The header is C and C++ alike so that the CPython module (torchmod.c, C11) can call the
 * C++ side without knowing about it.  Nothing declared here throws, and nothing here touches
 * Python.  Attach and detach serialise themselves with a lock of their own; the callbacks take
 * no lock.
 */
#ifndef XSP_TORCH_SHIM_H
#define XSP_TORCH_SHIM_H

#include <stddef.h>
#include <stdint.h>

#include "include/xsp_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Registers the shim's global RecordFunction callback, which from then on calls
 * api->rec_op_start / api->rec_end_l for every op, backward node and user scope on any thread,
 * and api->names_changed whenever an operator is registered or deregistered; the shim's
 * thread-role function is handed to api->set_thread_role_fn.  api must be the table of a core
 * of this build (version XSP_ABI_VERSION, size sizeof(xsp_core_api)); its pointers are
 * copied, so the caller may free or reuse *api afterwards, but the functions they point to
 * must stay callable for the life of the process (an op in flight at detach can still call
 * rec_end_l later).
 *
 * options: XSP_TORCH_INPUTS (xsp_api.h) registers the callback with torch's inputs on, and
 * hands each op's inputs to the core as an XSP_DATA_INPUTS event right after its begin
 * (record_shapes; the core gets the dtype names first, api->set_dtype_names);
 * XSP_TORCH_MEMORY pushes a memory reporter as the calling thread's PROFILER_STATE, whose
 * allocations and frees (those PyTorch reports to profilers, on this thread and the threads
 * its work is handed to) become XSP_DATA_MEM events, popped by xsp_torch_detach on the same
 * thread (elsewhere it stays, inert).
 *
 * Returns 0, or -1 with a one-line message in err (errlen bytes, NUL-terminated; err may be
 * NULL when errlen is 0) when already attached, when api is NULL or of another build, for
 * unknown options, when (XSP_TORCH_MEMORY) another profiler holds the thread's profiler state,
 * or when torch refuses the callback (its exception's message is copied); nothing changed on
 * failure.  Never throws.  Thread-safe against detach. */
int xsp_torch_attach(const xsp_core_api *api, uint32_t options, char *err, size_t errlen);

/* Removes the shim's callback (only ours: other tools' callbacks stay).  Does nothing when not
 * attached.  Ops already in flight may still run the end callback afterwards; it stays
 * harmless.  Cannot fail; never throws.  Thread-safe against attach. */
void xsp_torch_detach(void);

/* Returns 1 while attached, else 0. Cannot fail. */
int xsp_torch_attached(void);

/* Returns the version of the torch headers the shim was compiled against, e.g. "2.13.0"
 * (TORCH_VERSION, without a local suffix such as "+cpu").  A static string; cannot fail.
 * Python compares it with torch.__version__ and refuses a shim built for another torch, since
 * libtorch's C++ ABI changes between versions. */
const char *xsp_torch_build_version(void);

/* Allocation counts of one counting window (xsp_torch_mem_begin .. xsp_torch_mem_end), per
 * device type: index 0 the CPU, 1 CUDA, 2 any other device.  Bytes are what the allocator
 * reported: for CUDA the caching allocator's block sizes (rounded up), for the CPU the
 * requested sizes.  A free counts only for a block allocated inside the window (the CPU
 * allocator knows nothing of older blocks).  peak_bytes is the highest net allocation
 * (allocated minus freed) reached during the window, all devices of the type together. */
typedef struct xsp_torch_mem_counts {
    uint64_t allocs[3];
    uint64_t alloc_bytes[3];
    uint64_t frees[3];
    uint64_t free_bytes[3];
    int64_t peak_bytes[3];
} xsp_torch_mem_counts;

/* Starts counting the allocations PyTorch reports to profilers (c10's memory reporting, the
 * mechanism of torch.profiler's profile_memory) on the calling thread and on the threads its
 * work is handed to (autograd's workers, at::launch), by pushing the shim's reporter as the
 * thread's profiler state.  The counters start at zero.  Returns 0, or -1 with a one-line
 * message in err when a window is already open, or when the thread's profiler state is taken
 * (torch.profiler or another tool is profiling on this thread); nothing changed then.  The
 * counting path takes no lock and allocates nothing (relaxed atomics).  Never throws. */
int xsp_torch_mem_begin(char *err, size_t errlen);

/* Ends the window xsp_torch_mem_begin opened, on the same thread, and fills *out with its
 * counts.  Returns 0; -1 with a message in err when no window is open, when called on another
 * thread, or when another tool pushed a profiler state above ours and did not pop it (the
 * window then stays open).  Never throws. */
int xsp_torch_mem_end(xsp_torch_mem_counts *out, char *err, size_t errlen);

/* The shim's functions as xsp._torch hands them to xsp._core (the capsule
 * XSP_TORCH_API_CAPSULE, xsp_api.h), so that a session attaches and detaches the callback in
 * its own start and stop.  A static table; cannot fail. */
const xsp_torch_api *xsp_torch_api_table(void);

#ifdef __cplusplus
}
#endif

#endif
