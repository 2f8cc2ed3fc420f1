/*
 * xsp_api.h: the C function table that xsp._core hands to other native modules.
 *
 * The torch shim (xsp._torch) is a separate shared object, loaded only after torch, so it
 * cannot link against the core's symbols (extensions are loaded RTLD_LOCAL and built with
 * hidden visibility).  Instead xsp._core exports a PyCapsule named "xsp._core._C_API" holding
 * one static const xsp_core_api; the shim copies the pointers it needs once at attach time.
 * The torch shim exports its own table back the same way (xsp_torch_api, below).
 *
 * ABI rule: the two extensions are built and shipped together, so the tables are not versioned
 * field by field: each carries XSP_ABI_VERSION and its own size, and each side refuses a table
 * whose version or size is not its own (a stale xsp._torch next to a new xsp._core, or the
 * reverse), with a message saying to reinstall xsp.  Any change to either table, or to what
 * its functions mean, bumps XSP_ABI_VERSION.
 *
 * Historical note: until version 6 the tables were append-only with a version per table
 * (core 1-5, shim 1-2), and the shim read the fields a core's version promised; since nothing
 * ever loads one extension without the other of its own build, that bought nothing but
 * compatibility entries (xsp_torch_attach2 beside xsp_torch_attach), and they went.
 */
#ifndef XSP_API_H
#define XSP_API_H

#include <stddef.h>
#include <stdint.h>

#define XSP_CORE_API_CAPSULE "xsp._core._C_API"
#ifndef XSP_NAME_NUL
#define XSP_NAME_NUL ((size_t)-1)   /* rec_begin name_len: NUL-terminated, cache by pointer */
#endif
#ifndef XSP_NAME_STABLE
#define XSP_NAME_STABLE 0x80u       /* rec_begin kind flag: the name's bytes stay put until
                                     * the next names_changed() (see recorder.h) */
#endif
#ifndef XSP_NAME_UNSTABLE
#define XSP_NAME_UNSTABLE (UINT64_C(1) << 62)  /* ORed into rec_op_start's name address when the
                                     * bytes may change before names_changed() (recorder.h) */
#endif
#define XSP_OP_TAG 0x90u            /* ORed into rec_op_start's kind by the shim: the bits of
                                     * a level-L begin's tag in the core's log (recorder.c
                                     * asserts it) */
/* The version of both tables (see the ABI rule above). */
#define XSP_ABI_VERSION 9

/* Data events (csrc/core/recorder.h, xsp_rec_data): sub-types and the memory event's
 * payload.  Part of the ABI between the core and the shim. */
#define XSP_DATA_INPUTS 1u      /* an op's inputs (csrc/core/inputs.h), after its begin */
#define XSP_DATA_MEM 2u         /* one xsp_mem_event, in the innermost open span */
#define XSP_DATA_MAX 8192u      /* longest payload */
typedef struct xsp_mem_event {
    int64_t size;          /* bytes allocated (> 0) or freed (< 0) */
    int64_t total;         /* total allocated on the device after it, as the allocator says */
    uint32_t dev;          /* device type: 0 CPU, 1 CUDA, 2 other */
    uint32_t pad;          /* 0 */
} xsp_mem_event;

typedef struct xsp_core_api {
    uint32_t version;      /* XSP_ABI_VERSION of the core that filled the table */
    uint32_t size;         /* sizeof(xsp_core_api) of the core that filled the table */
    /* recorder.h: xsp_rec_begin, xsp_rec_end, xsp_rec_now, xsp_rec_active */
    void (*rec_begin)(uint8_t level, uint8_t kind, const char *name, size_t name_len,
                      const char *name2, size_t name2_len, uint64_t key, int64_t a0, int64_t a1);
    void (*rec_end)(uint64_t key, uint32_t flags);
    uint64_t (*rec_now)(void);
    int (*session_active)(void);
    /* xsp_rec_op_start and xsp_rec_end_l, the shim's op entry and exit (recorder.h) */
    void *(*rec_op_start)(void *ret, uint64_t key, uint32_t kind, int64_t a0, int64_t a1,
                          const char *name);
    void (*rec_end_l)(uint64_t key);
    /* xsp_rec_names_changed, called by the shim when an operator is registered or
     * deregistered (see XSP_NAME_UNSTABLE) */
    void (*names_changed)(void);
    /* xsp_rec_data (recorder.h: an op's inputs, an allocation), and
     * xsp_inputs_set_dtype_names (inputs.h: the names torch prints for each ScalarType) */
    void (*rec_data)(uint32_t sub, const void *data, uint32_t len);
    int (*set_dtype_names)(const char *const *names, uint32_t n);
    /* xsp_rec_set_thread_role_fn (recorder.h): the shim's function that tells an intra-op
     * pool thread from any other, asked once per new thread; fn returns an XSP_ROLE_*
     * (recorder.h: 0 plain, 1 intra-op) and sets *num */
    void (*set_thread_role_fn)(uint32_t (*fn)(uint32_t *num));
    /* xsp_rec_set_forward_tid_fn (recorder.h): the shim's function that gives a backward
     * node's forward thread id from the key rec_op_start received for it */
    void (*set_forward_tid_fn)(int64_t (*fn)(uint64_t key));
    /* xsp_rec_fast_tls (recorder.h): where the shim's inline fast paths (xsp_fast.h) find the
     * calling thread's buffer; 0: no inline fast paths (call rec_op_start and rec_end_l) */
    intptr_t (*fast_tls)(void);
} xsp_core_api;

/* The other direction: the torch shim's table, exported by xsp._torch as the capsule
 * "xsp._torch._C_API", which xsp._core's sessions take to attach and detach the RecordFunction
 * callback inside their own start and stop (csrc/torch/shim.h has the contracts).  Same ABI
 * rule. */
#define XSP_TORCH_API_CAPSULE "xsp._torch._C_API"

typedef struct xsp_torch_api {
    uint32_t version;      /* XSP_ABI_VERSION of the shim that filled the table */
    uint32_t size;         /* sizeof(xsp_torch_api) of the shim that filled the table */
    /* xsp_torch_attach: options XSP_TORCH_INPUTS, XSP_TORCH_MEMORY */
    int (*attach)(const xsp_core_api *api, uint32_t options, char *err, size_t errlen);
    void (*detach)(void);                                              /* xsp_torch_detach */
    int (*attached)(void);                                             /* xsp_torch_attached */
} xsp_torch_api;

#define XSP_TORCH_INPUTS 1u   /* record each op's inputs (record_shapes) */
#define XSP_TORCH_MEMORY 2u   /* record allocations per span (profile_memory) */

#endif
