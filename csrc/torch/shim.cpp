/*
 * shim.cpp: PyTorch RecordFunction events -> the core's level-L spans (see shim.h).
 *
 * One global at::RecordFunction callback, scopes FUNCTION, BACKWARD_FUNCTION and USER_SCOPE,
 * with inputs, outputs and ids switched off (each costs torch work per op).  The start
 * callback calls rec_op_start(ret, key, kind, ...) (level L), which returns no
 * ObserverContext, so torch allocates nothing for us per op; the end callback calls
 * rec_end_l(key).  The key is the address of the RecordFunction, which is the same object at
 * start and at end and cannot be shared by two RecordFunctions alive at once; the core matches
 * begin and end per thread, so an async RecordFunction that ends on another thread is counted
 * as unmatched, not misfiled.
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
#include "core/inputs.h"    /* the inputs payload's layout (XSP_IN_*) */
#include "core/trace.h"     /* XSP_LEVEL_L, XSP_KIND_*: only the enums are used */
#include "include/xsp_fast.h"   /* the op entry's and exit's fast paths, inline */
}

#include <ATen/core/List.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <ATen/Parallel.h>
#include <torch/version.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <variant>

namespace {

/* noexcept: the core's functions are C and cannot throw, so the callbacks can tail-call them */
using begin_fn = void *(*)(void *, uint64_t, uint32_t, int64_t, int64_t,
                           const char *) noexcept;           /* rec_op_start */
using end_fn = void (*)(uint64_t) noexcept;                 /* rec_end_l */
using changed_fn = void (*)() noexcept;                     /* names_changed */
using data_fn = void (*)(uint32_t, const void *, uint32_t) noexcept;   /* rec_data */

/* Set at attach, never cleared (see the lifetime note above).  g_begin and g_end are stored
 * before the first at::addGlobalCallback, which publishes them to every thread that can run
 * on_start or on_end: those read them without a null check. */
std::atomic<begin_fn> g_begin{nullptr};  /* the core's rec_op_start, null before the first attach */
std::atomic<end_fn> g_end{nullptr};      /* the core's rec_end_l, null before the first attach */
std::atomic<changed_fn> g_changed{nullptr};  /* the core's names_changed */
std::atomic<data_fn> g_data{nullptr};        /* the core's rec_data (options only) */

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

/* RecordScope -> xsp kind with XSP_OP_TAG, as rec_op_start takes it, for the three scopes we
 * register (others cannot reach us). */
constexpr uint8_t kind_for(size_t scope) noexcept
{
    return XSP_OP_TAG
           | (scope == static_cast<size_t>(at::RecordScope::BACKWARD_FUNCTION) ? XSP_KIND_BACKWARD
              : scope == static_cast<size_t>(at::RecordScope::USER_SCOPE)    ? XSP_KIND_SCOPE
                                                                              : XSP_KIND_OP);
}


/*
 * Stable names.  RecordFunction::name() is an out-of-line call that returns either the
 * dispatcher's schema name (an operator called through the dispatcher: the string lives in
 * the operator's registration, unchanged until the operator is deregistered) or a copy the
 * RecordFunction owns (user scopes, backward nodes, RECORD_FUNCTION with a string: freed at
 * its end, and its address soon reused for other bytes).  Only the first kind may skip the
 * core's byte comparison (passed bare; the others carry XSP_NAME_UNSTABLE), and only while no operator is registered or
 * deregistered: a registration listener tells the core (names_changed) whenever one is.
 *
 * Which kind a RecordFunction holds is in its private member fn_ (a std::variant of the two).
 * It is read through a pointer to member obtained by explicit template instantiation, which
 * the standard exempts from access checking ([temp.spec.general]/6): no layout is assumed, the
 * compiler checks the member's name and type against the torch headers xsp is built with.
 * Torch versions whose fn_ we have not checked (XSP_TORCH_FN_CHECKED) use name() and pass
 * every name with XSP_NAME_UNSTABLE.
 */
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4
#define XSP_TORCH_FN_CHECKED 1
using fn_variant = std::variant<std::string, at::RecordFunction::schema_ref_t>;
using fn_member = fn_variant at::RecordFunction::*;

struct fn_tag {
    friend fn_member fn_member_of(fn_tag) noexcept;
};

template <fn_member M>
struct fn_steal {
    friend fn_member fn_member_of(fn_tag) noexcept { return M; }
};

template struct fn_steal<&at::RecordFunction::fn_>;
#else
#define XSP_TORCH_FN_CHECKED 0
#endif

/* A name the core must compare at every sighting (see "Stable names" above): its address with
 * XSP_NAME_UNSTABLE, which a schema's name, passed bare, does not carry */
inline const char *unstable(const char *name) noexcept
{
    return reinterpret_cast<const char *>(reinterpret_cast<uintptr_t>(name) | XSP_NAME_UNSTABLE);
}

/* kind_for as a table over every value a RecordScope (an 8-bit enum) can hold: one load on the
 * hot path, no compare */
struct kind_table {
    uint8_t k[256];
    constexpr kind_table() : k()
    {
        for (size_t i = 0; i < 256; i++)
            k[i] = kind_for(i);
    }
};
constexpr kind_table KINDS{};
static_assert(sizeof(at::RecordScope) == 1, "RecordScope is an 8-bit enum");

inline uint8_t kind_of(at::RecordScope scope) noexcept
{
    return KINDS.k[static_cast<uint8_t>(scope)];
}

/* Tells the core when operator names may have moved: every (de)registration bumps its epoch. */
class names_listener final : public c10::OpRegistrationListener {
public:
    void onOperatorRegistered(const c10::OperatorHandle &) override { bump(); }
    void onOperatorDeregistered(const c10::OperatorHandle &) override { bump(); }

private:
    static void bump() noexcept
    {
        changed_fn f = g_changed.load(std::memory_order_acquire);
        if (f != nullptr)
            f();
    }
};

/* true once the listener is registered (for the process's life: never removed, since the
 * dispatcher may outlive or predecease us at exit).  The first attach registers it before it
 * adds the callback (or fails without adding it), so every on_start runs with the listener in
 * place and may pass a schema's name bare without checking.  Protected by g_lock. */
bool g_listening = false;

#if !XSP_TORCH_FN_CHECKED
/* fn.name() with XSP_NAME_UNSTABLE in its address, or null if it threw (it cannot in practice:
 * it returns the interned schema name or the scope's string). */
const char *name_or_null(const at::RecordFunction &fn) noexcept
{
    try {
        const char *name = fn.name();
        return unstable(name != nullptr ? name : "");
    } catch (...) {
        return nullptr;
    }
}
#endif

/* The begin of every span, through the core's op entry, which stores a null pointer at ret
 * and returns ret (recorder.h, xsp_rec_op_start); *schema_out, when schema_out is not null:
 * the op's schema when it has one (for the inputs), else null.  Nothing here can throw (no
 * try block: the fast path is one tail call, with no register saved for a handler). */
inline void *begin_span(void *ret, const at::RecordFunction &fn,
                        const c10::FunctionSchema **schema_out) noexcept
{
    if (schema_out != nullptr)
        *schema_out = nullptr;
    begin_fn begin = g_begin.load(std::memory_order_relaxed);   /* set: see g_begin */
    uint32_t kind = kind_of(fn.scope());
    const char *name;
#if XSP_TORCH_FN_CHECKED
    const fn_variant &v = fn.*fn_member_of(fn_tag{});
    if (const auto *schema = std::get_if<at::RecordFunction::schema_ref_t>(&v)) {
        name = schema->get().name().c_str();
        if (schema_out != nullptr)
            *schema_out = &schema->get();
    } else if (const auto *str = std::get_if<std::string>(&v)) {
        name = unstable(str->c_str());
    } else {
        name = unstable("");     /* valueless (never, but std::get would throw) */
    }
#else
    name = name_or_null(fn);
    if (name == nullptr) {
        /* the span is lost and its end is counted as unmatched by the core */
        void *null = nullptr;
        std::memcpy(ret, &null, sizeof null);
        return ret;
    }
#endif
    /* a backward node's forward thread: the core asks forward_tid (below) in the slow
     * path that every backward node's begin takes (its name is never stable) */
    uint64_t tid = fn.threadId();
    /* level L, a NUL-terminated name: the core finds a name it saw at this address
     * without strlen or hashing, and compares the bytes unless the name is stable. */
    return begin(ret, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&fn)), kind, fn.seqNr(),
                 static_cast<int64_t>(tid), name);
}

using start_cb = at::RecordFunctionCallback::StartCallback;
using start_result = std::unique_ptr<at::ObserverContext>;

#if defined(__x86_64__) && defined(__linux__)
/* The start callback as the x86-64 System V ABI sees it.  A start_result (a unique_ptr, one
 * pointer with a non-trivial destructor) is returned through a hidden pointer: the caller
 * passes the result's address in the first argument register (the RecordFunction then comes
 * second) and gets it back in the return register.  A function of this type taking
 * (result address, RecordFunction) and returning the address is therefore the same function
 * at the machine level, and its body is one tail call into the core, which stores the null
 * result (no frame, no saved register: 7 instructions fewer per op than on_start_portable). */
static_assert(sizeof(start_result) == sizeof(void *)
                  && !std::is_trivially_destructible_v<start_result>
                  && !std::is_trivially_copy_constructible_v<start_result>,
              "the start callback's result is returned through a hidden pointer");
void *on_start_sysv(void *ret, const at::RecordFunction &fn) noexcept
{
    return begin_span(ret, fn, nullptr);
}
const start_cb on_start = reinterpret_cast<start_cb>(reinterpret_cast<void (*)()>(on_start_sysv));
#else
start_result on_start_portable(const at::RecordFunction &fn) noexcept
{
    void *unused;
    begin_span(&unused, fn, nullptr);
    return nullptr;
}
const start_cb on_start = on_start_portable;
#endif


#if XSP_TORCH_FN_CHECKED && defined(XSP_FAST_INLINE)
/* The callbacks with the core's fast paths inline (include/xsp_fast.h), installed when the
 * core gives the offset of its thread-local buffer pointer (xsp_core_api.fast_tls): no
 * indirect call and no argument moves into the core's register order on the way that nearly
 * every op takes; whatever the fast path does not take goes to the core's op entry and exit,
 * which try again and take their slow paths.  g_fast_tls is stored at attach, before
 * at::addGlobalCallback publishes these callbacks (as g_begin), and never changes: the core
 * is loaded once per process. */
std::atomic<intptr_t> g_fast_tls{0};

void *on_start_fast(void *ret, const at::RecordFunction &fn) noexcept
{
    const fn_variant &v = fn.*fn_member_of(fn_tag{});
    const auto *schema = std::get_if<at::RecordFunction::schema_ref_t>(&v);
    if (__builtin_expect(schema == nullptr, 0))
        return begin_span(ret, fn, nullptr);   /* a scope's or a backward node's name */
    const char *name = schema->get().name().c_str();   /* interned: stable (g_listening) */
    uint32_t tag = kind_of(fn.scope());
    uint64_t key = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&fn));
    int64_t a0 = fn.seqNr();
    int64_t a1 = static_cast<int64_t>(fn.threadId());
    void *null = nullptr;
    std::memcpy(ret, &null, sizeof null);
    xsp_fast_buf *b = xsp_fast_buf_of(g_fast_tls.load(std::memory_order_relaxed));
    if (__builtin_expect(xsp_fast_begin(b, key, tag, a0, a1, name), 1))
        return ret;
    return g_begin.load(std::memory_order_relaxed)(ret, key, tag, a0, a1, name);
}
const start_cb on_start_inline =
    reinterpret_cast<start_cb>(reinterpret_cast<void (*)()>(on_start_fast));

void on_end_inline(const at::RecordFunction &fn, at::ObserverContext *) noexcept
{
    uint64_t key = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&fn));
    xsp_fast_buf *b = xsp_fast_buf_of(g_fast_tls.load(std::memory_order_relaxed));
    if (__builtin_expect(xsp_fast_end(b, key), 1))
        return;
    g_end.load(std::memory_order_relaxed)(key);
}
#define XSP_SHIM_INLINE 1
#else
#define XSP_SHIM_INLINE 0
#endif

/*
 * record_shapes: each op's inputs, encoded as inputs.h lays them out into a thread's scratch
 * buffer with stores only, then handed to the core as one data event (which copies it into the
 * thread's log).  Torch's own rules for what it shows (torch/csrc/profiler/collection.cpp,
 * InputOutputEncoder): a tensor that is undefined, nested or has symbolic sizes shows no
 * shape; strides only for strided layouts; a list is a scalar list when empty or when its
 * first element is a scalar and it has at most 30 elements; anything else is "other".
 */
constexpr size_t kScalarListLimit = 30;   /* torch's SCALAR_LIST_LENGTH_LIMIT */

struct encoder {
    uint8_t *p;        /* next byte */
    uint8_t *end;      /* one past the buffer */
    bool full;         /* an item did not fit: it and everything after are left out */

    bool room(size_t n) const noexcept { return static_cast<size_t>(end - p) >= n; }
    void u8(uint8_t v) noexcept { *p++ = v; }
    void bytes(const void *v, size_t n) noexcept
    {
        std::memcpy(p, v, n);
        p += n;
    }
};

thread_local uint8_t t_inputs[XSP_DATA_MAX];   /* the thread's scratch payload */

/* A tensor item ('T' or 'U'); false when it does not fit (nothing written). */
bool put_tensor(encoder &e, const at::Tensor &t)
{
    if (!t.defined() || t.is_nested() || t.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
        if (!e.room(1))
            return false;
        e.u8('U');
        return true;
    }
    c10::IntArrayRef sizes = t.sizes();
    bool strided = t.layout() == at::kStrided;
    size_t nd = sizes.size() > 255 ? 255 : sizes.size();
    if (!e.room(4 + nd * 8 * (strided ? 2 : 1)))
        return false;
    e.u8('T');
    e.u8(static_cast<uint8_t>(t.scalar_type()));
    e.u8(static_cast<uint8_t>(nd));
    e.u8(strided ? 1 : 0);
    e.bytes(sizes.data(), nd * 8);
    if (strided)
        e.bytes(t.strides().data(), nd * 8);
    return true;
}

/* A scalar IValue ('i', 'd', 'b', 'c'; symbolic ones as 'O'); false when it does not fit. */
bool put_scalar(encoder &e, const c10::IValue &v)
{
    if (!e.room(17))
        return false;
    if (v.isInt()) {
        int64_t x = v.toInt();
        e.u8('i');
        e.bytes(&x, 8);
    } else if (v.isDouble()) {
        double x = v.toDouble();
        e.u8('d');
        e.bytes(&x, 8);
    } else if (v.isBool()) {
        e.u8('b');
        e.u8(v.toBool() ? 1 : 0);
    } else if (v.isComplexDouble()) {
        c10::complex<double> z = v.toComplexDouble();
        double re = z.real(), im = z.imag();
        e.u8('c');
        e.bytes(&re, 8);
        e.bytes(&im, 8);
    } else {
        e.u8('O');
    }
    return true;
}

/* A list that is neither a tensor list nor a scalar: 'I', 'D', 'B' or 'O'. */
bool put_list(encoder &e, const c10::IValue &v)
{
    c10::ArrayRef<c10::IValue> list = v.toListRef();
    size_t n = list.size();
    char tag = 'I';
    if (n > kScalarListLimit) {
        tag = 'O';
    } else if (n > 0) {
        const c10::IValue &first = list[0];
        tag = first.isInt() ? 'I' : first.isDouble() ? 'D' : first.isBool() ? 'B' : 'O';
        for (const c10::IValue &x : list)
            if ((tag == 'I' && !x.isInt()) || (tag == 'D' && !x.isDouble())
                || (tag == 'B' && !x.isBool()))
                tag = 'O';   /* torch would print them; mixed lists do not occur in aten */
    }
    if (tag == 'O') {
        if (!e.room(1))
            return false;
        e.u8('O');
        return true;
    }
    if (!e.room(2 + n * 8))
        return false;
    e.u8(static_cast<uint8_t>(tag));
    e.u8(static_cast<uint8_t>(n));
    for (const c10::IValue &x : list) {
        if (tag == 'I') {
            int64_t y = x.toInt();
            e.bytes(&y, 8);
        } else if (tag == 'D') {
            double y = x.toDouble();
            e.bytes(&y, 8);
        } else {
            e.u8(x.toBool() ? 1 : 0);
        }
    }
    return true;
}

/* One input; false when it does not fit (the encoder is left where it was). */
bool put_input(encoder &e, const c10::IValue &v)
{
    uint8_t *mark = e.p;
    bool ok;
    if (v.isTensor()) {
        ok = put_tensor(e, v.toTensor());
    } else if (v.isScalar()) {
        ok = put_scalar(e, v);
    } else if (v.isTensorList()) {
        ok = e.room(3);
        if (ok) {
            c10::List<at::Tensor> list = v.toTensorList();
            size_t n = list.size() > 0xFFFF ? 0xFFFF : list.size();
            uint16_t n16 = static_cast<uint16_t>(n);
            e.u8('L');
            e.bytes(&n16, 2);
            for (size_t i = 0; ok && i < n; i++)
                ok = put_tensor(e, list.get(i));
        }
    } else if (v.isList()) {
        ok = put_list(e, v);
    } else {
        ok = e.room(1);
        if (ok)
            e.u8(v.isNone() ? 'N' : 'O');
    }
    if (!ok)
        e.p = mark;
    return ok;
}

/* Encodes fn's inputs into t_inputs; returns the payload's length. */
uint32_t encode_inputs(const at::RecordFunction &fn, const c10::FunctionSchema *schema)
{
    encoder e{t_inputs, t_inputs + sizeof t_inputs, false};
    const std::string *ov = schema != nullptr ? &schema->overload_name() : nullptr;
    size_t olen = ov != nullptr ? (ov->size() > 255 ? 255 : ov->size()) : 0;
    e.u8(XSP_IN_VERSION);
    e.u8(static_cast<uint8_t>(olen));
    if (olen)
        e.bytes(ov->data(), olen);
    uint8_t *flags = e.p;
    e.u8(schema != nullptr ? XSP_IN_SCHEMA : 0);
    uint8_t *count = e.p;
    e.p += 2;
    uint16_t n = 0;
    for (const c10::IValue &v : fn.inputs()) {
        if (n == 0xFFFF || !put_input(e, v)) {
            *flags |= XSP_IN_TRUNCATED;
            break;
        }
        n++;
    }
    std::memcpy(count, &n, 2);
    return static_cast<uint32_t>(e.p - t_inputs);
}

std::unique_ptr<at::ObserverContext> on_start_inputs(const at::RecordFunction &fn) noexcept
{
    const c10::FunctionSchema *schema;
    void *unused;
    begin_span(&unused, fn, &schema);
    try {
        data_fn data = g_data.load(std::memory_order_relaxed);
        if (data != nullptr)
            data(XSP_DATA_INPUTS, t_inputs, encode_inputs(fn, schema));
    } catch (...) {
        /* an IValue accessor threw (none does for the tags checked): no inputs for this op,
         * which the trace shows as an op without input_dims */
    }
    return nullptr;
}

void on_end(const at::RecordFunction &fn, at::ObserverContext *) noexcept
{
    end_fn end = g_end.load(std::memory_order_relaxed);   /* set: see g_begin */
    end(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&fn)));
}

} // namespace

namespace {

/* profile_memory: the allocations PyTorch reports to profilers, as data events of the span
 * open on the allocating thread.  Pushed as the attaching thread's PROFILER_STATE (which
 * ThreadLocalState carries into autograd's workers and at::launch tasks), popped at detach. */
struct mem_recorder final : c10::MemoryReportingInfoBase {
    void reportMemoryUsage(void *, int64_t size, size_t total_allocated, size_t,
                           c10::Device device) override
    {
        data_fn data = g_data.load(std::memory_order_relaxed);
        if (data == nullptr || size == 0)
            return;
        xsp_mem_event ev{size, static_cast<int64_t>(total_allocated),
                         device.is_cpu() ? 0u : device.is_cuda() ? 1u : 2u, 0u};
        data(XSP_DATA_MEM, &ev, sizeof ev);
    }
    bool memoryProfilingEnabled() const override { return true; }
};

/* Protected by g_lock. */
std::shared_ptr<mem_recorder> g_memrec;      /* made once, kept */
bool g_memrec_pushed = false;                /* pushed on g_memrec_thread */
std::thread::id g_memrec_thread;

/* The names torch prints for each ScalarType ("float", "long int", ...), handed to the core
 * once: its decoder turns the payloads' dtype numbers into them at stop. */
int send_dtype_names(const xsp_core_api *api)
{
    constexpr int n = static_cast<int>(c10::ScalarType::NumOptions);
    static std::string names[n];
    const char *ptrs[n];
    for (int i = 0; i < n; i++) {
        ptrs[i] = nullptr;
        try {
            c10::string_view v = c10::scalarTypeToTypeMeta(static_cast<c10::ScalarType>(i)).name();
            names[i].assign(v.data(), v.size());
            ptrs[i] = names[i].c_str();
        } catch (...) {
            /* a ScalarType without a TypeMeta: decoded as "dtype<i>" */
        }
    }
    return api->set_dtype_names(ptrs, static_cast<uint32_t>(n));
}

} // namespace

/* The core's thread role function (recorder.h, xsp_thread_role_fn): a thread whose first
 * event comes inside a parallel region as a thread other than its team's first is one of the
 * intra-op pool's (OpenMP's workers, or the native pool's); *num: its number in the team.
 * Two thread-local reads; cannot throw. */
static uint32_t thread_role(uint32_t *num) noexcept
{
    if (!at::in_parallel_region())
        return 0;
    int k = at::get_thread_num();
    if (k <= 0)
        return 0;
    *num = static_cast<uint32_t>(k);
    return 1;   /* XSP_ROLE_INTRAOP */
}

/* The core's forward-thread function (recorder.h, xsp_forward_tid_fn): key is the address of
 * the live RecordFunction of a backward node that on_start passed to rec_op_start. */
static int64_t forward_tid(uint64_t key) noexcept
{
    return static_cast<int64_t>(
        reinterpret_cast<const at::RecordFunction *>(static_cast<uintptr_t>(key))->forwardThreadId());
}

extern "C" int xsp_torch_attach(const xsp_core_api *api, uint32_t options, char *err,
                                size_t errlen)
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
        if (api->version != XSP_ABI_VERSION || api->size != sizeof(xsp_core_api)) {
            char msg[200];
            std::snprintf(msg, sizeof msg,
                          "xsp._torch: xsp._core is from another build (its table is of version "
                          "%u, size %u; this shim needs version %u, size %zu): reinstall xsp",
                          (unsigned)api->version, (unsigned)api->size,
                          (unsigned)XSP_ABI_VERSION, sizeof(xsp_core_api));
            set_err(err, errlen, msg);
            return -1;
        }
        if (options & ~(XSP_TORCH_INPUTS | XSP_TORCH_MEMORY)) {
            set_err(err, errlen, "xsp._torch: unknown attach options");
            return -1;
        }
        if (options) {
            if ((options & XSP_TORCH_MEMORY)
                && c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) != nullptr) {
                set_err(err, errlen,
                        "xsp._torch: profile_memory: another profiler (torch.profiler, or "
                        "xsp's allocation counter) holds this thread's profiler state");
                return -1;
            }
            if ((options & XSP_TORCH_INPUTS) && send_dtype_names(api) != 0) {
                set_err(err, errlen, "xsp._torch: out of memory for the dtype names");
                return -1;
            }
            g_data.store(reinterpret_cast<data_fn>(api->rec_data), std::memory_order_release);
        }
        api->set_thread_role_fn(thread_role);
        api->set_forward_tid_fn(forward_tid);
        /* the C functions cannot throw: their noexcept pointer types say so */
        g_begin.store(reinterpret_cast<begin_fn>(api->rec_op_start), std::memory_order_release);
        g_end.store(reinterpret_cast<end_fn>(api->rec_end_l), std::memory_order_release);
        g_changed.store(reinterpret_cast<changed_fn>(api->names_changed),
                        std::memory_order_release);
        if (XSP_TORCH_FN_CHECKED && !g_listening) {
            /* leaked on purpose: the handle's destructor would touch the dispatcher at exit */
            new c10::RegistrationHandleRAII(c10::Dispatcher::singleton().addRegistrationListener(
                std::make_unique<names_listener>()));
            g_listening = true;
        }
        bool inputs = (options & XSP_TORCH_INPUTS) != 0;
        start_cb start = inputs ? on_start_inputs : on_start;
        at::RecordFunctionCallback::EndCallback end = on_end;
#if XSP_SHIM_INLINE
        if (intptr_t tls = api->fast_tls()) {
            g_fast_tls.store(tls, std::memory_order_relaxed);   /* published as g_begin */
            start = inputs ? on_start_inputs : on_start_inline;
            end = on_end_inline;
        }
#endif
        at::CallbackHandle h = at::addGlobalCallback(
            at::RecordFunctionCallback(start, end)
                .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                         at::RecordScope::USER_SCOPE})
                .needsInputs(inputs)
                .needsOutputs(false)
                .needsIds(false));
        if (h == at::INVALID_CALLBACK_HANDLE) {
            set_err(err, errlen, "xsp._torch: at::addGlobalCallback returned no handle");
            return -1;
        }
        g_handle = h;
        g_attached.store(1, std::memory_order_release);
        if (options & XSP_TORCH_MEMORY) {
            if (!g_memrec)
                g_memrec = std::make_shared<mem_recorder>();
            c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, g_memrec);
            g_memrec_pushed = true;
            g_memrec_thread = std::this_thread::get_id();
        }
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
        /* ours is popped only where it is on top of the thread that pushed it; elsewhere it
         * stays, inert (the core records nothing outside a session) */
        if (g_memrec_pushed && g_memrec_thread == std::this_thread::get_id()
            && c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE)
                   == g_memrec.get()) {
            c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
            g_memrec_pushed = false;
        }
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

namespace {

/* The memory counter: c10 calls reportMemoryUsage for every allocation and free while it is
 * the thread's PROFILER_STATE (DebugInfoKind), which ThreadLocalState carries into autograd's
 * worker threads.  Only relaxed atomics: sums need no order, and the window's end reads them
 * after the work that made them has joined (the caller's thread). */
struct mem_counter final : c10::MemoryReportingInfoBase {
    std::atomic<uint64_t> allocs[3];
    std::atomic<uint64_t> alloc_bytes[3];
    std::atomic<uint64_t> frees[3];
    std::atomic<uint64_t> free_bytes[3];
    std::atomic<int64_t> net[3];
    std::atomic<int64_t> peak[3];

    mem_counter() { reset(); }

    void reset() noexcept
    {
        for (int i = 0; i < 3; i++) {
            allocs[i].store(0, std::memory_order_relaxed);
            alloc_bytes[i].store(0, std::memory_order_relaxed);
            frees[i].store(0, std::memory_order_relaxed);
            free_bytes[i].store(0, std::memory_order_relaxed);
            net[i].store(0, std::memory_order_relaxed);
            peak[i].store(0, std::memory_order_relaxed);
        }
    }

    void reportMemoryUsage(void *, int64_t size, size_t, size_t, c10::Device device) override
    {
        int d = device.is_cpu() ? 0 : device.is_cuda() ? 1 : 2;
        if (size > 0) {
            allocs[d].fetch_add(1, std::memory_order_relaxed);
            alloc_bytes[d].fetch_add(static_cast<uint64_t>(size), std::memory_order_relaxed);
            int64_t now = net[d].fetch_add(size, std::memory_order_relaxed) + size;
            int64_t p = peak[d].load(std::memory_order_relaxed);
            while (now > p && !peak[d].compare_exchange_weak(p, now, std::memory_order_relaxed))
                ;
        } else if (size < 0) {
            frees[d].fetch_add(1, std::memory_order_relaxed);
            free_bytes[d].fetch_add(static_cast<uint64_t>(-size), std::memory_order_relaxed);
            net[d].fetch_add(size, std::memory_order_relaxed);
        }
    }

    bool memoryProfilingEnabled() const override { return true; }
};

/* Protected by g_lock.  The counter is made once and kept (shared with c10's stack while a
 * window is open); g_mem_thread is the thread that opened the open window. */
std::shared_ptr<mem_counter> g_mem;
bool g_mem_open = false;
std::thread::id g_mem_thread;

} // namespace

extern "C" int xsp_torch_mem_begin(char *err, size_t errlen)
{
    try {
        std::lock_guard<std::mutex> guard(g_lock);
        if (g_mem_open) {
            set_err(err, errlen, "xsp._torch: a memory counting window is already open");
            return -1;
        }
        if (c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) != nullptr) {
            set_err(err, errlen,
                    "xsp._torch: another profiler (torch.profiler?) holds this thread's "
                    "profiler state: allocations cannot be counted while it runs");
            return -1;
        }
        if (!g_mem)
            g_mem = std::make_shared<mem_counter>();
        g_mem->reset();
        c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, g_mem);
        g_mem_open = true;
        g_mem_thread = std::this_thread::get_id();
        return 0;
    } catch (const std::exception &e) {
        char msg[512];
        std::snprintf(msg, sizeof msg, "xsp._torch: cannot count allocations: %s", e.what());
        set_err(err, errlen, msg);
    } catch (...) {
        set_err(err, errlen, "xsp._torch: cannot count allocations (unknown exception)");
    }
    return -1;
}

extern "C" int xsp_torch_mem_end(xsp_torch_mem_counts *out, char *err, size_t errlen)
{
    try {
        std::lock_guard<std::mutex> guard(g_lock);
        if (!g_mem_open) {
            set_err(err, errlen, "xsp._torch: no memory counting window is open");
            return -1;
        }
        if (g_mem_thread != std::this_thread::get_id()) {
            set_err(err, errlen, "xsp._torch: the memory counting window was opened on "
                                 "another thread");
            return -1;
        }
        if (c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) != g_mem.get()) {
            set_err(err, errlen, "xsp._torch: another tool pushed a profiler state above "
                                 "xsp's memory counter and did not pop it");
            return -1;
        }
        c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
        g_mem_open = false;
        for (int i = 0; i < 3; i++) {
            out->allocs[i] = g_mem->allocs[i].load(std::memory_order_relaxed);
            out->alloc_bytes[i] = g_mem->alloc_bytes[i].load(std::memory_order_relaxed);
            out->frees[i] = g_mem->frees[i].load(std::memory_order_relaxed);
            out->free_bytes[i] = g_mem->free_bytes[i].load(std::memory_order_relaxed);
            out->peak_bytes[i] = g_mem->peak[i].load(std::memory_order_relaxed);
        }
        return 0;
    } catch (const std::exception &e) {
        char msg[512];
        std::snprintf(msg, sizeof msg, "xsp._torch: cannot end the memory count: %s", e.what());
        set_err(err, errlen, msg);
    } catch (...) {
        set_err(err, errlen, "xsp._torch: cannot end the memory count (unknown exception)");
    }
    return -1;
}

extern "C" const xsp_torch_api *xsp_torch_api_table(void)
{
    static const xsp_torch_api table = {XSP_ABI_VERSION, sizeof(xsp_torch_api),
                                        xsp_torch_attach, xsp_torch_detach, xsp_torch_attached};
    return &table;
}
