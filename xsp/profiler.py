"""The profiling session: `xsp.profile`, a context manager that records one merged trace.

Recording sources, all feeding the C core's per-thread buffers (no Python per op):
  - M: the region span (the `with` block), step spans (`prof.step()`), and one model span per
    top-level model call (a module forward not inside another module's forward), recorded by
    a wrapper around nn.Module.__call__ installed for the session (_ModuleCalls);
  - L: a module span per nested nn.Module forward (qualified names such as layer1.0.conv1, with
    the class as attribute "type"), recorded by the same wrapper, and the ops, autograd backward
    functions and record_function scopes that the torch shim (xsp._torch) records from global
    RecordFunction callbacks straight into the core.

Ordering is what keeps the tree right: the region begins before any hook or callback is
installed and ends after all are removed, so everything recorded on the profiling thread nests
under it; roots on other threads are adopted by the region at stop.
"""
import os
import sys
import threading
import warnings
import weakref

from . import _core
from .errors import LevelUnavailableError, ProfilerError, XSPWarning
from .levels import parse_levels
from .trace import Trace

LEVEL_M, LEVEL_L = 0, 1
KIND = {name: i for i, name in enumerate(_core.KINDS)}

# Smallest cap: one chunk of 4096 48-byte records (csrc/core/tbuf.h), so the region fits.
MIN_MEMORY = 1 << 18

_active_lock = threading.Lock()
_active = None   # the profile currently recording, protected by _active_lock


def _caller():
    """file:line of the user code that started a profile, for error messages."""
    here = os.path.dirname(os.path.abspath(__file__))
    f = sys._getframe(1)
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == here:
        f = f.f_back
    return "%s:%d" % (f.f_code.co_filename, f.f_lineno) if f is not None else "?"


class _ModuleCalls:
    """Records model and module spans by wrapping nn.Module.__call__ while a profile runs.

    Why not global forward hooks: with any global hook installed, every module call takes
    torch's slow _call_impl path, which alone costs several microseconds per call (measured:
    about 3-4 us on this machine, more than xsp's recording); one wrapper function costs a
    fraction of that.  try/finally also ends the span when the forward raises anything,
    KeyboardInterrupt included.  The wrapper is inert once stopped (in case another tool wrapped
    __call__ after us and we cannot unwrap), and restored when it is still the class attribute.

    Each thread keeps its own state: the number of open module calls, and the qualified-name
    map (id(submodule) -> 'layer1.0.conv1', from named_modules()) of the top-level (model) call
    that names the modules called inside it.  A call's span key lives in the wrapper's frame,
    so begin and end pair up whatever the forward raises.
    """

    def __init__(self, torch, record_model, record_modules, record_shapes=False,
                 profile_memory=False):
        self._torch = torch
        self._shapes = record_shapes
        self._memory = profile_memory and torch.cuda.is_available()
        # per native thread id: [shapes str or None, allocated bytes at entry, delta], one per
        # recorded model/module span in begin order; matched to the spans at stop
        self.side = {} if (record_shapes or profile_memory) else None
        self._record_model = record_model
        self._record_modules = record_modules
        self._tls = threading.local()
        self._names = {}            # id(root) -> (weakref(root), {id(module): qualname})
        self._on = [False]          # read by the wrapper on every call
        self._orig = None           # the __call__ we wrapped
        self._wrapper = None        # our wrapper
        self._errors = 0            # exceptions caught inside the Python bookkeeping
        self._c = None              # the C wrapper (_core.ModuleCall) when it is used
        self._roots = {}            # thread ident -> its current top-level module (C wrapper)
        self._c_keep = {}           # id -> every names map handed to the C wrapper, kept alive
                                    # for the session (it holds them borrowed)
        self.thread_names = {}      # native thread id -> Python thread name

    @property
    def errors(self):
        """Failures inside the bookkeeping (counted, never raised)."""
        return self._errors + (self._c.errors if self._c is not None else 0)

    def install(self):
        Module = self._torch.nn.Module
        orig = Module.__call__
        if self.side is None:
            # the common case: the wrapper in C (csrc/python/modcall.c); a nested module call
            # runs no Python of ours
            self._c = _core.ModuleCall(orig, self._c_top, self._c_name_of, self._c_new_thread,
                                       self._record_modules)
            self._orig, self._wrapper = orig, self._c
            self._on[0] = True
            Module.__call__ = self._c
            return
        # recording shapes or memory: a Python wrapper, which also keeps the side table
        on, tls, end = self._on, self._tls, _core.end
        new_state = self._new_state
        key_of, extra_enter, extra_leave = self._key, self._extra_enter, self._extra_leave

        def __call__(module, *args, **kwargs):
            if not on[0]:
                return orig(module, *args, **kwargs)
            try:
                state = tls.state
            except AttributeError:
                state = new_state()
            key = key_of(module, state)
            rec = extra_enter(args, kwargs) if key is not None else None
            state[0] += 1
            try:
                return orig(module, *args, **kwargs)
            finally:
                state[0] -= 1
                if rec is not None:
                    extra_leave(rec)
                if key is not None:
                    end(key)

        __call__.__wrapped__ = orig
        __call__.__qualname__ = "Module.__call__ (xsp)"
        self._orig, self._wrapper = orig, __call__
        on[0] = True
        Module.__call__ = __call__

    def remove(self):
        self._on[0] = False
        if self._c is not None:
            self._c.set_on(False)
        self._roots.clear()
        Module = self._torch.nn.Module
        if Module.__dict__.get("__call__") is self._wrapper:
            Module.__call__ = self._orig

    def _qualnames(self, root):
        entry = self._names.get(id(root))
        if entry is None or entry[0]() is not root:
            try:
                ref = weakref.ref(root)
            except TypeError:
                ref = lambda: root  # noqa: E731
            entry = (ref, {id(m): n for n, m in root.named_modules()})
            self._names[id(root)] = entry
        return entry[1]

    def _new_state(self):
        """The calling thread's state: [open module calls, qualified-name map of the model
        being called, that model]."""
        state = self._tls.state = [0, {}, None]
        self.thread_names[threading.get_native_id()] = threading.current_thread().name
        return state

    def _failed(self):
        """Counts a failure inside the bookkeeping; the call then records no span."""
        self._errors += 1
        return None

    # -- called by the C wrapper on its rare paths (modcall.c) ----------------------------------
    def _c_new_thread(self):
        self.thread_names[threading.get_native_id()] = threading.current_thread().name

    def _c_top(self, module):
        """A top-level call: (key or None, the model's qualified-name map)."""
        state = [0, {}, None]
        key = self._top_key(module, state)
        self._roots[threading.get_ident()] = module
        self._c_keep.setdefault(id(state[1]), state[1])
        return key, state[1]

    def _c_name_of(self, module):
        """A module missing from the map: (its name, the map rebuilt)."""
        state = [1, {}, self._roots.get(threading.get_ident())]
        name = self._name_of(module, state)
        self._c_keep.setdefault(id(state[1]), state[1])
        return name, state[1]

    def _top_key(self, module, state):
        """A top-level call: maps the model's module names, begins its span (model, or module
        with L alone).  Returns the key or None."""
        state[1], state[2] = {}, module
        try:
            state[1] = self._qualnames(module)
            cls = type(module).__name__
            if self._record_model:
                return _core.begin(LEVEL_M, KIND["model"], cls, cls)
            if self._record_modules:
                return _core.begin(LEVEL_L, KIND["module"], cls, cls)
            return None
        except Exception:
            return self._failed()

    def _name_of(self, module, state):
        """Qualified name of a module missing from the model's map: rebuilt once (a module
        added since), else the class name (not a submodule at all), remembered either way."""
        root = state[2]
        self._names.pop(id(root), None)
        state[1] = names = self._qualnames(root) if root is not None else {}
        name = names.get(id(module))
        if name is None:
            name = names[id(module)] = type(module).__name__
        return name

    def _key(self, module, state):
        """Begins the span of one call as the fast wrapper does; returns its key or None."""
        if not state[0]:
            return self._top_key(module, state)
        if not self._record_modules:
            return None
        try:
            name = state[1].get(id(module))
            if name is None:
                name = self._name_of(module, state)
            return _core.begin(LEVEL_L, KIND["module"], name, type(module).__name__)
        except Exception:
            return self._failed()

    def _extra_enter(self, args, kwargs):
        """Input shapes and allocated memory at entry, for a call that begun a span: a record
        [shapes, bytes allocated at entry, delta] kept in begin order per thread."""
        try:
            rec = [_shapes_of(args, kwargs, self._torch) if self._shapes else None,
                   self._torch.cuda.memory_allocated() if self._memory else None, None]
            self.side.setdefault(threading.get_native_id(), []).append(rec)
            return rec
        except Exception:
            return self._failed()

    def _extra_leave(self, rec):
        try:
            if rec[1] is not None:
                rec[2] = self._torch.cuda.memory_allocated() - rec[1]
        except Exception:
            self._failed()

    def depth(self):
        """Open module calls on the calling thread."""
        if self._c is not None:
            return self._c.depth()
        state = getattr(self._tls, "state", None)
        return state[0] if state is not None else 0


class profile:
    """Records one merged trace of the code run inside the `with` block.

        with xsp.profile(levels="ML") as prof:
            loss = model(x).sum(); loss.backward()
            prof.step()            # optional: marks the end of an iteration
        trace = prof.trace         # an xsp.Trace

    levels: letters M, L, G in any order and case.  G needs a CUDA device, a CUDA build of torch
        and an xsp built with CUPTI's headers; otherwise starting raises LevelUnavailableError
        saying which is missing, or, with gpu_fallback=True, warns and records M and L only.
    name: the region span's name.
    max_memory: cap in bytes on recording memory; spans past it are counted in the trace's
        counters ("lost.cap"), never a crash.
    gpu_max_memory: cap in bytes on the GPU records kept (past it they are counted in
        "gpu.lost"); CUPTI's own buffers come on top (8 MiB each, at most 32).
    Only one profile records at a time; starting a second raises ProfilerError.
    """

    def __init__(self, levels="ML", *, name="xsp.profile", max_memory=1 << 30,
                 gpu_fallback=False, gpu_max_memory=256 << 20, record_shapes=False,
                 profile_memory=False):
        self.levels = parse_levels(levels)
        self.record_shapes = bool(record_shapes)
        self.profile_memory = bool(profile_memory)
        self.gpu_fallback = bool(gpu_fallback)
        if not isinstance(gpu_max_memory, int) or gpu_max_memory < 1 << 20:
            raise ValueError("gpu_max_memory must be an int of at least 1 MiB, not %r"
                             % (gpu_max_memory,))
        self.gpu_max_memory = gpu_max_memory
        if not isinstance(name, str) or not name:
            raise ValueError("name must be a non-empty string")
        if not isinstance(max_memory, int) or max_memory < MIN_MEMORY:
            raise ValueError("max_memory must be an int of at least %d bytes (one chunk of "
                             "records), not %r" % (MIN_MEMORY, max_memory))
        self.name = name
        self.max_memory = max_memory
        self.trace = None
        self._modules = None
        self._shim = None
        self._region = None
        self._step = None
        self._steps = 0
        self._where = None
        self._thread = None
        self._sync_error = None

    # -- starting and stopping ---------------------------------------------------------------
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.stop()
        return False

    def start(self):
        """Starts recording (what `with` does on entry)."""
        global _active
        if self.trace is not None:
            raise ProfilerError("this xsp.profile has already run; create a new one")
        torch = None
        if "L" in self.levels or "G" in self.levels:
            torch = _import_torch()
        elif "torch" in sys.modules:
            torch = sys.modules["torch"]
        if "G" in self.levels:
            self._check_gpu(torch)
        shim = _load_shim(torch) if "L" in self.levels else None
        with _active_lock:
            if _active is not None:
                raise ProfilerError(
                    "another xsp.profile is already recording (started at %s); xsp records one "
                    "session at a time: stop it before starting this one" % _active._where)
            self._where = _caller()
            self._thread = threading.get_ident()
            self._start_core()
            _active = self
        try:
            if "M" in self.levels:
                self._region = _core.begin(LEVEL_M, KIND["region"], self.name)
            if torch is not None and ("M" in self.levels or "L" in self.levels):
                self._modules = _ModuleCalls(torch, "M" in self.levels, "L" in self.levels,
                                             self.record_shapes, self.profile_memory)
                self._modules.thread_names[threading.get_native_id()] = \
                    threading.current_thread().name
                self._modules.install()
            if shim is not None:
                shim.attach()
                self._shim = shim
            if "M" in self.levels:
                # the first step begins once everything is installed, so that it does not
                # carry the set-up (and ends, at stop, before anything is taken down)
                self._step = _core.begin(LEVEL_M, KIND["step"], "step#0")
        except BaseException:
            self._teardown()
            raise

    def _check_gpu(self, torch):
        """Raises LevelUnavailableError (or, with gpu_fallback, warns and drops G) when G cannot
        be recorded here; loads libcupti otherwise."""
        why = gpu_unavailable_reason(torch)
        if why is not None:
            self._no_gpu("level G cannot be recorded: " + why)

    def _no_gpu(self, msg):
        if not self.gpu_fallback:
            raise LevelUnavailableError(msg + "; profile with levels='ML', or pass "
                                        "gpu_fallback=True to fall back to M and L")
        warnings.warn(msg + "; recording levels %s only (gpu_fallback=True)"
                      % self.levels.replace("G", ""), XSPWarning, stacklevel=4)
        self.levels = self.levels.replace("G", "")

    def _start_core(self):
        if "G" not in self.levels:
            _core.start(max_bytes=self.max_memory, adopt_roots=True)
            return
        try:
            _core.start(max_bytes=self.max_memory, adopt_roots=True, gpu=True,
                        gpu_max_bytes=self.gpu_max_memory, gpu_share=_cupti_share_ok())
        except _core.GPUError as exc:
            self._no_gpu("level G cannot be recorded: " + str(exc).replace("xsp: ", "", 1))
            _core.start(max_bytes=self.max_memory, adopt_roots=True)

    def step(self):
        """Marks the end of one iteration: closes the current step span and opens the next.

        Steps are M-level spans "step#0", "step#1", ... under the region; the step open at stop
        is kept only if something was recorded in it.  Call it between model calls, not inside
        one (ProfilerError).  Without M in the levels it does nothing.
        """
        if self.trace is not None or _active is not self:
            raise ProfilerError("step() needs a running xsp.profile")
        if threading.get_ident() != self._thread:
            raise ProfilerError("step() must be called on the thread that started the profile")
        if self._step is None:
            return
        if self._modules is not None and self._modules.depth():
            raise ProfilerError("step() was called inside a model call; call it between "
                                "iterations")
        _core.end(self._step)
        self._steps += 1
        self._step = _core.begin(LEVEL_M, KIND["step"], "step#%d" % self._steps)

    def stop(self):
        """Stops recording and builds `self.trace` (what `with` does on exit).  Must run on the
        thread that started the profile (its region and step spans are open there)."""
        if _active is not self:
            if self.trace is not None:
                return self.trace
            raise ProfilerError("this xsp.profile is not recording")
        if threading.get_ident() != self._thread:
            raise ProfilerError("stop() must be called on the thread that started the profile")
        self._teardown()
        return self.trace

    def _teardown(self):
        """Removes the callback and the module wrapper, ends M spans, stops the core, keeps the
        trace.  Whatever fails, the session ends and the next profile can start."""
        global _active
        try:
            try:
                if self._step is not None:
                    flag = _core.FLAG_ELIDE if self._steps == 0 else _core.FLAG_ELIDE_IF_EMPTY
                    _core.end(self._step, flag)
                if "G" in self.levels:
                    self._sync_error = _synchronize_all()
                if self._shim is not None:
                    self._shim.detach()
                if self._modules is not None:
                    self._modules.remove()
                if self._region is not None:
                    _core.end(self._region)
            finally:
                data = _core.stop()
        finally:
            with _active_lock:
                _active = None
        self.trace = Trace(data)
        try:
            self._decorate(data)
            if self._modules is not None and self._modules.side:
                _attach_side(data, self.trace, self._modules.side)
                self.trace = Trace(data)
        finally:
            self.trace.meta = data.meta()

    def _decorate(self, data):
        """Metadata and thread names; a failure here never loses the trace."""
        data.set_meta("levels", self.levels)
        data.set_meta("region", self.name)
        data.set_meta("steps", int((self.trace._kind == KIND["step"]).sum()))
        if self._modules is not None:
            data.set_meta("hook_errors", self._modules.errors)
        if self._sync_error:
            data.set_meta("sync_error", self._sync_error)
        torch = sys.modules.get("torch")
        if torch is not None:
            data.set_meta("torch_version", str(torch.__version__))
        from . import __version__
        data.set_meta("xsp_version", __version__)
        names = dict(self._modules.thread_names) if self._modules is not None else {}
        names.setdefault(threading.get_native_id(), threading.current_thread().name)
        for t in threading.enumerate():
            if t.native_id is not None:
                names.setdefault(t.native_id, t.name)
        for tid, name in names.items():
            try:
                data.set_thread_name(tid, name)
            except (UnicodeError, ValueError):
                data.set_thread_name(tid, name.encode("utf-8", "replace").decode("utf-8"))
        self.trace.threads = data.threads()

    def report(self, top=10):
        """The text summary of the trace (xsp.report.text); after the block only."""
        if self.trace is None:
            raise ProfilerError("report() needs a finished profile: call it after the block")
        return self.trace.report(top=top)

    def _repr_html_(self):
        return self.trace._repr_html_() if self.trace is not None else None

    def __repr__(self):
        state = "recording" if _active is self else ("done" if self.trace is not None else "new")
        return "<xsp.profile levels=%s %s>" % (self.levels, state)


def step():
    """Marks the end of an iteration in the profile that is recording, as its step() does;
    does nothing when none is.  For code profiled from outside, e.g. by `xsp run`."""
    prof = _active
    if prof is not None:
        prof.step()


def _shapes_of(args, kwargs, torch):
    """Input shapes of a module call as text: tensors as [2, 3, 32, 32], lists and tuples of
    them in parentheses, anything else by its type name; keyword arguments as name=shape."""
    Tensor = torch.Tensor

    def one(a, depth=0):
        if isinstance(a, Tensor):
            return "[%s]" % ", ".join(str(d) for d in a.shape)
        if isinstance(a, (list, tuple)) and depth < 2:
            return "(%s)" % ", ".join(one(b, depth + 1) for b in a)
        return type(a).__name__

    parts = [one(a) for a in args] + ["%s=%s" % (k, one(v)) for k, v in kwargs.items()]
    return ", ".join(parts)


def _attach_side(data, trace, side):
    """Adds the attributes the module wrapper collected (shapes, mem_bytes) to the model and
    module spans they belong to: per thread, the k-th recorded call is the k-th model/module
    span of that thread in start order.  A thread whose counts differ (spans lost to the memory
    cap) gets none; their number goes into meta "attrs_unmatched"."""
    import numpy as np
    kinds = np.isin(trace._kind, (KIND["model"], KIND["module"]))
    tids = np.array([t[0] for t in trace.threads], dtype=np.int64)
    span_tid = tids[trace._thread] if len(trace) else np.zeros(0, dtype=np.int64)
    shapes_ids, shapes_vals, mem_ids, mem_vals = [], [], [], []
    unmatched = 0
    for tid, recs in side.items():
        ids = np.nonzero(kinds & (span_tid == tid))[0]
        if len(ids) != len(recs):
            unmatched += len(recs)
            continue
        for i, rec in zip(ids.tolist(), recs):
            if rec[0] is not None:
                shapes_ids.append(i)
                shapes_vals.append(rec[0])
            if rec[2] is not None:
                mem_ids.append(i)
                mem_vals.append(int(rec[2]))
    for key, ids, vals in (("shapes", shapes_ids, shapes_vals), ("mem_bytes", mem_ids, mem_vals)):
        if ids:
            order = np.argsort(ids, kind="stable")
            data.add_attrs(key, [ids[j] for j in order], [vals[j] for j in order])
    if unmatched:
        data.set_meta("attrs_unmatched", unmatched)


def gpu_unavailable_reason(torch):
    """Why level G cannot be recorded in this process (a str), or None when it can; loads
    libcupti in the latter case.  Cannot raise for a missing GPU: that is the answer."""
    info = _core.gpu_info()
    if not info["built"]:
        return info["reason"]
    if not torch.cuda.is_available():
        return ("no CUDA device or driver was found (torch.cuda.is_available() is False; "
                "this torch is %s)" % ("CUDA %s" % torch.version.cuda if torch.version.cuda
                                       else "a CPU-only build"))
    try:
        _core.gpu_open(_cupti_dirs(torch))
    except _core.GPUError as exc:
        return str(exc).replace("xsp: ", "", 1)
    return None


def _cupti_share_ok():
    """Whether level G may trace without CUPTI's one subscription when another client holds it:
    yes unless torch.profiler is recording now.  (Kineto subscribes at torch.profiler's first
    use and keeps the subscription, idle, for the life of the process.)"""
    torch = sys.modules.get("torch")
    if torch is None:
        return True
    try:
        return not (torch._C._autograd._profiler_enabled()
                    or getattr(torch.autograd.profiler, "_is_profiler_enabled", False))
    except Exception:   # noqa: BLE001 -- a torch without these: do not share
        return False


def _synchronize_all():
    """Waits for the GPU work of every device, so that CUPTI's forced flush at stop delivers it
    all.  Returns None, or the error a device raised (a pending CUDA error from the profiled
    code): teardown goes on regardless, and the trace says so (meta "sync_error")."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    errors = []
    for d in range(torch.cuda.device_count()):
        try:
            torch.cuda.synchronize(d)
        except Exception as exc:   # noqa: BLE001 -- reported in the trace, never lost
            errors.append("cuda:%d: %s" % (d, exc))
    return "; ".join(errors) or None


def _cupti_dirs(torch):
    """Folders to look for libcupti in, after a copy already loaded: the nvidia pip packages
    matching torch's CUDA (nvidia/cuda_cupti/lib for CUDA 12 wheels, nvidia/cu13/lib for CUDA
    13 ones), then torch's own lib/."""
    dirs = []
    try:
        import importlib.util
        for pkg in ("nvidia.cuda_cupti", "nvidia.cu13"):
            spec = importlib.util.find_spec(pkg)
            for loc in (spec.submodule_search_locations or []) if spec else []:
                dirs.append(os.path.join(loc, "lib"))
    except (ImportError, ValueError):
        pass
    dirs.append(os.path.join(os.path.dirname(torch.__file__), "lib"))
    return [d for d in dirs if os.path.isdir(d)]


def _after_fork_in_child():
    """A forked child (a DataLoader worker) does not inherit the recording: the core already
    dropped the session (pthread_atfork); here the torch callback and the module wrapper go."""
    global _active, _active_lock
    _active_lock = threading.Lock()   # the parent may have held it while forking
    prof = _active
    _active = None
    if prof is not None:
        try:
            if prof._shim is not None:
                prof._shim.detach()
            if prof._modules is not None:
                prof._modules.remove()
        except Exception:
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _import_torch():
    try:
        import torch
    except ImportError as exc:
        raise ProfilerError("level L records PyTorch modules and ops, but torch cannot be "
                            "imported: %s" % exc) from exc
    return torch


def _load_shim(torch):
    """Imports xsp._torch (after torch) and checks it was built for this torch."""
    try:
        from . import _torch
    except ImportError as exc:
        raise ProfilerError(
            "xsp was installed without its torch shim (xsp._torch), so it cannot record level L "
            "(%s); reinstall xsp after torch with `pip install --no-build-isolation .`" % exc
        ) from exc
    built = getattr(_torch, "torch_version", None)
    running = str(torch.__version__).split("+")[0]
    if built is not None and built.split("+")[0] != running:
        raise ProfilerError(
            "xsp._torch was built against torch %s but torch %s is running; rebuild xsp with "
            "`pip install --no-build-isolation .`" % (built, running))
    return _torch
