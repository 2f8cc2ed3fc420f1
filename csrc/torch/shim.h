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

#include "include/xsp_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Registers the shim's global RecordFunction callback, which from then on calls
 * api->rec_begin / api->rec_end for every op, backward node and user scope on any thread.
 * api must hold rec_begin and rec_end (version >= 1, size large enough); the two pointers are
 * copied, so the caller may free or reuse *api afterwards, but the functions they point to
 * must stay callable for the life of the process (an op in flight at detach can still call
 * rec_end later).  Returns 0, or -1 with a one-line message in err (errlen bytes,
 * NUL-terminated; err may be NULL when errlen is 0) when already attached, when api is NULL or
 * too old, or when torch refuses the callback (its exception's message is copied); nothing
 * changed on failure.  Never throws.  Thread-safe against detach. */
int xsp_torch_attach(const xsp_core_api *api, char *err, size_t errlen);

/* Removes the shim's callback (only ours: other tools' callbacks stay).  Does nothing when not
 * attached.  Ops already in flight may still run the end callback afterwards; it stays
 * harmless.  Cannot fail; never throws.  Thread-safe against attach. */
void xsp_torch_detach(void);

/* Returns 1 while attached, else 0. Cannot fail. */
int xsp_torch_attached(void);

/* Benchmarks only: registers / removes a do-nothing global callback with the same scopes and
 * options as ours (the floor any RecordFunction-based profiler pays); with clock nonzero, one
 * that only reads the TSC at entry and at exit on x86-64 (xsp's clock when the kernel's
 * clocksource is tsc; the steady clock elsewhere): the floor of a profiler timestamping both
 * ends of an op with that clock.  attach returns 0, or -1 when one is already attached or
 * torch refused; detach accepts being called when none is attached. */
int xsp_torch_floor_attach(int clock);
void xsp_torch_floor_detach(void);

/* Benchmarks only: runs at::add on two 8-float CPU tensors warm times untimed, then n times
 * timed (the order of xsp._torch.bench_add(n, warm)), from C++ (each call one RecordFunction event through the dispatcher, as torch.add
 * from Python, without the interpreter around it), and stores the timed loop's duration in ns
 * (steady clock) in *ns.  Returns 0, or -1 (with a message in err) when torch threw.  Touches
 * no Python object: callable without the GIL. */
int xsp_torch_bench_add(uint64_t n, uint64_t warm, uint64_t *ns, char *err, size_t errlen);

/* Returns the version of the torch headers the shim was compiled against, e.g. "2.13.0"
 * (TORCH_VERSION, without a local suffix such as "+cpu").  A static string; cannot fail.
 * Python compares it with torch.__version__ and refuses a shim built for another torch, since
 * libtorch's C++ ABI changes between versions. */
const char *xsp_torch_build_version(void);

#ifdef __cplusplus
}
#endif

#endif
