"""The profiling session: `xsp.profile`, a context manager that records one merged trace.

Recording sources, all feeding the C core's per-thread buffers (no Python per op):
  - M: the region span (the `with` block), step spans (`prof.step()`), and one model span per
    top-level model call (a module forward not inside another module's forward), recorded by
    a wrapper around nn.Module.__call__ installed for the session (_ModuleCalls);
  - L: a module span per nested nn.Module forward (qualified names such as layer1.0.conv1, with
    the class as attribute "type"), recorded by the same wrapper, and the ops, autograd backward
    functions and record_function scopes that the torch shim (xsp._torch) records from global
    RecordFunction callbacks straight into the core.

`profile` is a subclass of the C type xsp._core.Session (csrc/python/sessionmod.c): its
__enter__ and __exit__ are C functions that start and stop everything in one call each, so a
KeyboardInterrupt lands before or after them, never between two steps.  Everything that needs
Python (importing torch, checking the GPU, making the module wrapper) happens in __init__,
before anything is installed, in steps that fill one _core.SessionOptions: the whole contract
with the C session, tables for the stop included (thread names, the side table, torch.compile's
attributes: dicts filled in place).  Stop finishes the trace in C from those (meta, thread
names, attributes), reading no attribute of any Python object, and the trace never changes
afterwards.  Ordering keeps the tree right: the region begins
before the wrapper and the torch callback are installed and ends after both are removed.
"""
import os
import sys
import threading
import warnings
import weakref

import numpy as np

from xsp import _core
from xsp._version import __version__
from xsp.core.errors import LevelUnavailableError, ProfilerError, SessionStateError, XSPWarning
from xsp.core.levels import parse_levels
from xsp.core.util import deprecated
from xsp.producers import clock as distributed
from xsp.producers import dynamo
from xsp.values.trace import Trace

LEVEL_M, LEVEL_L = 0, 1
KIND = {name: i for i, name in enumerate(_core.KINDS)}

# Smallest cap: one chunk of 4096 48-byte records (csrc/core/tbuf.h), so the region fits.
MIN_MEMORY = 1 << 18


# the package's directory: frames of code in it (any of its folders) are xsp's own
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _caller():
    """file:line of the user code that made a profile, for error messages."""
    f = sys._getframe(1)
    while f is not None and os.path.abspath(f.f_code.co_filename).startswith(_PACKAGE_DIR):
        f = f.f_back
    return "%s:%d" % (f.f_code.co_filename, f.f_lineno) if f is not None else "?"


class _ModuleCalls:
    """Records model and module spans by wrapping nn.Module.__call__ while a profile runs.

    Why not global forward hooks: with any global hook installed, every module call takes
    torch's slow _call_impl path, which alone costs several microseconds per call (measured:
    about 3-4 us on this machine, more than xsp's recording); one wrapper costs a fraction of
    that.  The wrapper is C (_core.ModuleCall, csrc/python/modcall.c), the same one whatever the
    options; this class makes it (make()) and holds the Python helpers it calls on its rare
    paths.  The session installs it at start, gives it the __call__ in place then, turns it off
    at stop (it then only forwards, in case another tool wrapped __call__ after us) and puts
    the original back when the wrapper is still the class attribute, all in C (sessionmod.c).

    Per thread the wrapper keeps (in C) the number of open module calls and the qualified-name
    map (id(submodule) -> 'layer1.0.conv1', from named_modules()) of the top-level (model) call
    that names the modules called inside it; _c_top and _c_name_of make those maps.  A call's
    span key lives in the wrapper's C frame, so begin and end pair up whatever the forward
    raises.

    With record_shapes or profile_memory the wrapper also calls _side_enter(module, *args,
    **kwargs) and _side_leave(record) around each call that began a span: a record [input
    shapes, bytes allocated at entry, delta] per call, kept in `side` in begin order per thread
    and matched to the spans at stop.

    Where: each call that begins a span looks its call site up in `sites` (a C table,
    csrc/python/modsites.c: the calling frame's code and instruction offset, and the module's
    class) and passes the site's index with the span; at stop the session turns it into the
    span's attributes "source" (file:line of the class's forward) and "call_site" (file:line
    of the call), the strings made once per site.

    What the stop reads is handed to the session at setup, never looked up (sessionopts.h):
    the wrapper (its failure counter, hook_errors, and its `sites`), `side`, and
    `thread_names`, the {native thread id: name} map filled here as threads are seen.
    """

    def __init__(self, torch, record_model, record_modules, record_shapes=False,
                 profile_memory=False, model=None):
        self._torch = torch
        self._model = model         # None, or module -> bool: is this top-level call the model
        self._kind_cache = {}       # class -> "model", "layer" or "leaf" (see _is_model)
        self._shapes = record_shapes
        self._memory = profile_memory and torch.cuda.is_available()
        # per native thread id: [shapes str or None, allocated bytes at entry, delta], one per
        # recorded model/module span in begin order; matched to the spans at stop
        self.side = {} if (record_shapes or profile_memory) else None
        self._record_model = record_model
        self._record_modules = record_modules
        self._names = {}            # id(root) -> (weakref(root), {id(module): qualname})
        self._c = None              # the wrapper (_core.ModuleCall), made by make()
        self._roots = {}            # thread ident -> its current top-level module
        self._c_keep = {}           # id -> every names map handed to the C wrapper, kept alive
                                    # for the session (it holds them borrowed)
        self.sites = _core.ModuleSites()    # call sites of the recorded calls (the wrapper's)
        self.thread_names = {}      # native thread id -> Python thread name

    def make(self):
        """The wrapper to install as nn.Module.__call__ (the session gives it the __call__ in
        place at start)."""
        extra = (self._side_enter, self._side_leave) if self.side is not None else (None, None)
        self._c = _core.ModuleCall(self._torch.nn.Module.__call__, self._c_top, self._c_name_of,
                                   self._c_new_thread, self._record_modules, self.sites, *extra)
        self._c.set_on(False)
        return self._c

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

    def _failed(self):
        """Counts a failure inside the bookkeeping (in the wrapper's counter: hook_errors); the
        call then records no span."""
        self._c.count_error()
        return None

    # -- called by the C wrapper on its rare paths (modcall.c) ----------------------------------
    def _c_new_thread(self):
        self.thread_names[threading.get_native_id()] = threading.current_thread().name

    def _c_top(self, module, site):
        """A top-level call from site (an index into sites, or -1): maps the model's module
        names and begins its span: a model span for a model call (_is_model), else a module
        span named after the class (a layer under the step; the same with L alone).  Returns
        (key or None, the model's qualified-name map)."""
        names = {}
        try:
            names = self._qualnames(module)
            cls = type(module).__name__
            if self._record_model and self._is_model(module):
                key = _core.begin(LEVEL_M, KIND["model"], cls, cls, site)
            elif self._record_modules:
                key = _core.begin(LEVEL_L, KIND["module"], cls, cls, site)
            else:
                key = None
        except Exception:
            key = self._failed()
        self._roots[threading.get_ident()] = module
        self._c_keep.setdefault(id(names), names)
        return key, names

    def _c_name_of(self, module):
        """A module missing from the current model's map: (its qualified name, the map rebuilt
        once: a module added since), else its class name (not a submodule at all), remembered
        either way."""
        root = self._roots.get(threading.get_ident())
        self._names.pop(id(root), None)
        names = self._qualnames(root) if root is not None else {}
        name = names.get(id(module))
        if name is None:
            name = names[id(module)] = type(module).__name__
        self._c_keep.setdefault(id(names), names)
        return name, names

    def _side_enter(self, module, *args, **kwargs):
        """record_shapes / profile_memory, for a call that began a span: its record [input
        shapes, bytes allocated at entry, delta], appended to the side table in begin order
        per thread; what it raises is counted by the wrapper."""
        rec = [_shapes_of(args, kwargs, self._torch) if self._shapes else None,
               self._torch.cuda.memory_allocated() if self._memory else None, None]
        self.side.setdefault(threading.get_native_id(), []).append(rec)
        return rec

    def _side_leave(self, rec):
        """After the call's forward: the memory delta into its record."""
        if rec[1] is not None:
            rec[2] = self._torch.cuda.memory_allocated() - rec[1]

    def _is_model(self, module):
        """Whether a top-level call of module is a model call (see profile's `model`): the
        named model when one is named, else anything but a loss or a built-in leaf layer."""
        if self._model is not None:
            return self._model(module)
        cls = type(module)
        verdict = self._kind_cache.get(cls)
        if verdict is None:
            nn = self._torch.nn
            verdict = ("layer" if issubclass(cls, nn.modules.loss._Loss) else
                       "leaf" if cls.__module__.startswith("torch.nn.") else "model")
            self._kind_cache[cls] = verdict
        if verdict == "leaf":       # a built-in layer: a layer when it has no submodules
            return bool(module._modules)
        return verdict == "model"

    def depth(self):
        """Open module calls on the calling thread."""
        return self._c.depth() if self._c is not None else 0


def _passthrough_codes():
    """with_stack: the code objects of xsp's that run the user's code (measure, xsp run's
    script runner): not recorded, but what they call is, even when xsp's own code called them
    (csrc/python/pystack.c).  The module wrapper is C: it pushes no frame of ours."""
    codes = []
    for mod, name in (("xsp.producers.leveled", "measure"), ("xsp.cli", "_run_script"),
                      ("xsp.perf", "_count_memory")):
        f = getattr(sys.modules.get(mod), name, None)
        if f is not None and hasattr(f, "__code__"):
            codes.append(f.__code__)
    return tuple(codes)


TORCH_INPUTS = 1          # XSP_TORCH_INPUTS (csrc/include/xsp_api.h)
TORCH_MEMORY = 2          # XSP_TORCH_MEMORY


class profile(_core.Session):
    """Records one merged trace of the code run inside the `with` block.

        with xsp.profile(levels="ML") as prof:
            loss = model(x).sum(); loss.backward()
            prof.step()            # optional: marks the end of an iteration
        trace = prof.trace         # an xsp.Trace

    levels: letters M, L, G in any order and case.  G needs a CUDA device, a CUDA build of torch
        and an xsp built with CUPTI's headers; otherwise making the profile (or starting it,
        when CUPTI refuses) raises LevelUnavailableError saying which is missing, or, with
        gpu_fallback=True, warns and records M and L only.
    name: the region span's name.
    model: which top-level module calls are model calls (M-level model spans): an nn.Module,
        a class, a class name (or module.ClassName), or a list of them.  Other top-level calls
        are layers (module spans) under the step.  By default every top-level call is a model
        call except a loss (a subclass of nn.modules.loss._Loss) and a built-in leaf layer (a
        torch.nn class without submodules, e.g. an nn.Linear called on its own): those are
        layers.  docs/api.md, "Models and layers".
    max_memory: cap in bytes on recording memory; spans past it are counted in the trace's
        counters ("lost.cap"), never a crash.
    gpu_max_memory: cap in bytes on the GPU records kept (past it they are counted in
        "gpu.lost"); CUPTI's own buffers come on top (8 MiB each, at most 32).
    schedule: an xsp.schedule, to record a few steps of a long job as torch.profiler's
        schedule does: one trace per cycle of warmup and active steps, counted by step() calls
        (prof.trace the latest, prof.traces all of them when on_trace_ready is None).
    on_trace_ready: with a schedule, called as on_trace_ready(prof) once each cycle's trace is
        prof.trace, before the next cycle starts; what it raises is raised from step() (or at
        the block's end) once the profile is consistent.
    with_stack: also record every Python function call (level L, kind "python", named
        "file(line): name" as torch.profiler names its python_function events), so that each
        op nests under the Python functions that ran it: its stack (Trace.stack_of).  Costly
        (a profile function on every Python call); needs L; refused while another profile
        function (sys.setprofile) is installed.  docs/api.md, "with_stack".
    clock_sync: in a distributed job, exchange clock samples with rank 0 right before
        recording starts and right after it stops, for xsp.merge (docs/distributed.md).  None
        (default): when torch.distributed is initialised with more than one rank; then every
        rank must enter and leave the profile (the exchange is collective): pass False when
        only some ranks profile.
    Only one profile records at a time; starting a second raises SessionActiveError (with a
    schedule: during the whole block, recording or not).

    Interrupts: start and stop are one C call each.  After any exception or KeyboardInterrupt at
    any moment of the block, including during start and stop, nothing stays installed and the
    next profile works; the trace is kept whenever recording had started (meta "interrupted" or
    "exception" says how the block ended), or the exception says it was lost.
    Fork: a child forked inside the block inherits an inert copy: it records nothing, has no
    trace, and warns once (docs/design.md).
    """

    def __init__(self, levels="ML", *, name="xsp.profile", max_memory=1 << 30,
                 gpu_fallback=False, gpu_max_memory=256 << 20, record_shapes=False,
                 profile_memory=False, model=None, schedule=None, on_trace_ready=None,
                 clock_sync=None, with_stack=False):
        # Everything that needs Python happens here, in steps, before anything is installed;
        # the steps fill one SessionOptions, the whole contract with the C session
        # (csrc/python/sessionopts.h), handed over by _setup at the end.
        levels = parse_levels(levels)
        _check_options(levels, name, max_memory, gpu_max_memory, schedule, on_trace_ready,
                       with_stack)
        self._keep_options(name, max_memory, gpu_max_memory, gpu_fallback, record_shapes,
                           profile_memory, schedule, on_trace_ready, with_stack)
        torch = self._torch_mod = _torch_for(levels)
        if "G" in levels:
            levels = self._check_gpu(levels, torch)
        opts = _core.SessionOptions(levels, name if "M" in levels else None,
                                    max_bytes=max_memory, where=_caller(),
                                    schedule=schedule._fields() if schedule is not None else None,
                                    on_trace_ready=on_trace_ready)
        self._add_gpu(opts, levels)
        self._add_torch(opts, levels, torch)
        self._add_modules(opts, levels, torch, model)
        self._add_meta(opts, levels, torch, model, clock_sync)
        self._setup(opts)

    # -- the steps of __init__ ------------------------------------------------------------------
    def _keep_options(self, name, max_memory, gpu_max_memory, gpu_fallback, record_shapes,
                      profile_memory, schedule, on_trace_ready, with_stack):
        """The options as the profile's attributes, and the state of its traces."""
        self.name = name
        self.max_memory = max_memory
        self.gpu_max_memory = gpu_max_memory
        self.gpu_fallback = bool(gpu_fallback)
        self.record_shapes = bool(record_shapes)
        self.profile_memory = bool(profile_memory)
        self.with_stack = bool(with_stack)
        self.schedule = schedule
        self._trace = None
        self._wrapped = []          # [(TraceData, Trace)]: each wrapped once; every cycle's
                                    # with a schedule and no on_trace_ready, else the latest
        self._keep_all = schedule is not None and on_trace_ready is None

    def _check_gpu(self, levels, torch):
        """Levels G can be recorded in this process, or it is dropped (gpu_fallback) or
        refused (LevelUnavailableError): the levels to record."""
        why = gpu_unavailable_reason(torch)
        return levels if why is None else self._no_gpu("level G cannot be recorded: " + why,
                                                        levels)

    def _add_gpu(self, opts, levels):
        """Level G: CUPTI's options, and the device synchronisation run at stop."""
        if "G" not in levels:
            return
        opts.gpu = True
        opts.gpu_max_bytes = self.gpu_max_memory
        opts.gpu_share = _cupti_share_ok()
        opts.gpu_fallback = self.gpu_fallback
        opts.sync = _synchronize_all

    def _add_modules(self, opts, levels, torch, model):
        """Levels M and L: the nn.Module.__call__ wrapper (made, not installed), its side table
        (record_shapes, profile_memory), and the thread-name table, which starts with this
        thread and the threads alive at each start (_see_threads)."""
        self._modules = None
        names = {}
        if torch is not None and ("M" in levels or "L" in levels):
            self._modules = _ModuleCalls(torch, "M" in levels, "L" in levels,
                                         self.record_shapes, self.profile_memory,
                                         _model_matcher(model, torch))
            opts.module_type = torch.nn.Module
            opts.wrapper = self._modules.make()
            opts.side = self._modules.side
            names = self._modules.thread_names
        names[threading.get_native_id()] = threading.current_thread().name
        opts.thread_names = self._thread_names = names

    def _add_torch(self, opts, levels, torch):
        """Level L: the torch shim's table and its options (each op's inputs with
        record_shapes, the allocations PyTorch reports per span with profile_memory), and
        with_stack's Python function spans (xsp's own code left out, csrc/python/pystack.c)."""
        if "L" not in levels:
            return
        opts.torch = _load_shim(torch)._C_API
        opts.torch_options = (TORCH_INPUTS * self.record_shapes
                              | TORCH_MEMORY * self.profile_memory)
        if self.with_stack:
            opts.stack = _core.PyStack(_PACKAGE_DIR, _passthrough_codes())

    def _add_meta(self, opts, levels, torch, model, clock_sync):
        """The meta the stop writes into the trace, torch.compile's attribute tables, xsp's own
        cost, and the clock exchange of a distributed job with its hooks."""
        meta = {"xsp_version": __version__}
        meta.update(_process_meta(torch))
        self._meta = opts.meta = meta   # start samples go in (_sync_start)
        # torch.compile: Dynamo's compile callbacks record compile spans; the tables (filled
        # in place while recording, read by the stop) give them and the spans of compiled
        # regions attributes
        self._span_attrs = opts.span_attrs = dynamo.prepare(meta)
        # xsp's own cost (meta overhead.*): the per-span cost of these levels and options,
        # calibrated here, before the start (never inside a recorded region)
        cost = _span_cost(levels, self.record_shapes, self.profile_memory, self.with_stack,
                          torch)
        if cost is not None:
            meta["overhead.per_span_ns"] = cost
        # the clock exchange with rank 0 before and after recording (xsp/producers/clock.py):
        # by default whenever torch.distributed runs more than one rank when the profile is made
        self._clock_sync = bool(clock_sync or (clock_sync is None and distributed.active()))
        if not self._clock_sync and "rank" in meta:
            meta["clock.sync"] = "off" if clock_sync is False else "same host"
        if torch is not None:
            meta["torch_version"] = str(torch.__version__)
        if model is not None:       # what was asked, so that a report can say it matched
            meta["model"] = ",".join(_model_label(m) for m in (
                model if isinstance(model, (list, tuple)) else [model]))
        # the hooks hold a weak reference: bound methods would make a cycle through the C
        # object
        ref = weakref.ref(self)
        self._set_hooks(lambda: _hook(ref, "_before_start"),
                        (lambda: _hook(ref, "_sync_stop")) if self._clock_sync else None)

    def _no_gpu(self, msg, levels):
        if not self.gpu_fallback:
            raise LevelUnavailableError(msg + "; profile with levels='ML', or pass "
                                        "gpu_fallback=True to fall back to M and L")
        warnings.warn(msg + "; recording levels %s only (gpu_fallback=True)"
                      % levels.replace("G", ""), XSPWarning, stacklevel=3)
        return levels.replace("G", "")

    @property
    def levels(self):
        """The levels recorded (without G when gpu_fallback dropped it)."""
        return self._levels

    @property
    def trace(self):
        """The xsp.Trace, once the profile has stopped (else None); with a schedule, the
        latest cycle's, from the moment it is delivered (during the block too)."""
        data = self._data
        if data is not None and (self._trace is None or self._trace._data is not data):
            self._trace = self._wrap(data)
        return self._trace

    @property
    def traces(self):
        """With a schedule and no on_trace_ready: a list of every cycle's trace so far, in
        order (with on_trace_ready: empty, so that long jobs do not keep them all).  Without a
        schedule: [prof.trace] once stopped."""
        return [self._wrap(d) for d in self._traces]

    def _wrap(self, data):
        for d, tr in self._wrapped:
            if d is data:
                return tr
        tr = Trace(data)
        if self._keep_all:
            self._wrapped.append((data, tr))
        else:
            self._wrapped[:] = [(data, tr)]
        return tr

    # -- starting and stopping: one C call each (the C type's _start, _stop, __enter__ and
    # __exit__).  In a distributed job the clock exchange runs before the start and after the
    # stop, outside the recording (docs/distributed.md): the C calls run the hooks
    # (_set_hooks), so no Python line of ours sits between a hook and the start or stop
    def _before_start(self):
        self._see_threads()
        if self._clock_sync:
            self._sync_start()

    def _see_threads(self):
        """Puts the Python threads alive now into the thread-name table the stop reads, by
        their public native_id and name (a thread started later is named at its first module
        call).  threading._active is copied in one C call: threading.enumerate() takes
        threading's lock, which an exception raised by a trace function at its `with` line's
        exit would leave held."""
        names = self._thread_names
        for th in list(threading._active.values()):
            try:
                tid, name = th.native_id, th.name
            except Exception:       # noqa: BLE001 -- a Thread subclass's own property: unnamed
                continue
            if isinstance(tid, int) and isinstance(name, str):
                names[tid] = name

    def _sync_start(self):
        if self._state != "new":
            return
        if distributed.active():
            self._meta.update(_process_meta(self._torch_mod))
        self._meta.update(distributed.start_meta(_core.now))

    def _sync_stop(self):
        # only after a start exchange: every rank then comes here too (SPMD)
        if self._meta.get("clock.sync") == "process group" and self._data is not None:
            self._data._add_meta(distributed.stop_meta(_core.now, self._meta["job_id"]))

    def start(self):
        """Starts recording (what `with` does on entry)."""
        self._start()

    def stop(self):
        """Stops recording and returns the trace (what `with` does on exit, which is the safer
        way: a KeyboardInterrupt between a start() and its stop() leaves the profile
        recording).  Must run on the thread that started the profile."""
        self._stop()
        return self.trace

    def step(self):
        """Marks the end of one iteration: closes the current step span and opens the next.

        Steps are M-level spans "step#0", "step#1", ... under the region; the step open at stop
        is kept only if something was recorded in it.  Call it between model calls, not inside
        one (ProfilerError).  Without M in the levels it does nothing.  With a schedule it also
        counts the steps, ending and starting cycles (and running on_trace_ready) as the
        schedule says; what on_trace_ready raised is raised from here.
        """
        if (self._state == "recording" and self._modules is not None and "M" in self.levels
                and threading.get_ident() == self._thread and self._modules.depth()):
            raise ProfilerError("step() was called inside a model call; call it between "
                                "iterations")
        self._step()

    def report(self, top=10):
        """Deprecated: xsp.report.text(prof.trace); after the block only."""
        deprecated("profile.report()", "xsp.report.text(prof.trace)")
        if self.trace is None:
            raise SessionStateError("report() needs a finished profile: call it after the "
                                    "block")
        from xsp import report
        return report.text(self.trace, top=top)

    def _repr_html_(self):
        return self.trace._repr_html_() if self.trace is not None else None

    def __repr__(self):
        return "<xsp.profile levels=%s %s>" % (self.levels, self._state)


_WALL_OFFSET = None         # wall - monotonic ns, taken once per process (_process_meta)


# -- xsp's own cost ----------------------------------------------------------------------
# Every trace of a profile says what recording it cost (meta overhead.*, docs/api.md): the
# spans it recorded times a per-span cost, plus the stop, computed by the C stop
# (csrc/python/sessionmod.c, overhead_meta) from overhead.per_span_ns, which the profile passes
# in its meta.  The per-span cost is calibrated once per process and configuration (levels
# without G, record_shapes, profile_memory, with_stack) by a short profile of its own, made
# when a profile is made (so before its start, never in a recorded region): CALIBRATION_CALLS
# calls of a one-op module timed unprofiled and profiled (the fastest of CALIBRATION_ROUNDS
# batches each), the difference divided by the spans recorded per call.  GPU activity records
# (CUPTI's) are not counted: their cost is paid in the driver, not per span here.  Not under
# the fake clock: the calibration's readings would move every later one.
CALIBRATION_CALLS = 50
CALIBRATION_ROUNDS = 3
_SPAN_COST = {}             # configuration -> ns per span (int); filled by _span_cost
_calibrating = False        # a calibration profile is being made: it does not calibrate
NOT_COUNTED = tuple(KIND[k] for k in ("region", "runtime", "driver", "kernel", "memcpy",
                                      "memset", "sync", "overhead"))


def _span_cost(levels, record_shapes, profile_memory, with_stack, torch):
    """The calibrated cost of one recorded span, in ns (an int), for this configuration;
    None when it cannot be calibrated now (another profile is recording, the fake clock is
    installed, torch is not imported, or no level records module calls or ops)."""
    global _calibrating
    key = (levels.replace("G", ""), bool(record_shapes), bool(profile_memory), bool(with_stack))
    if key in _SPAN_COST:
        return _SPAN_COST[key]
    if _calibrating or torch is None or not key[0] or _core.active() or _core.fake_clock_on():
        return None
    _calibrating = True
    try:
        cost = _calibrate(key, torch)
    except Exception:       # a profile is never refused for its calibration: no estimate
        cost = None
    finally:
        _calibrating = False
    if cost is not None:
        _SPAN_COST[key] = cost
    return cost


def _calibrate(key, torch):
    levels, shapes, memory, stack = key

    class Calibration(torch.nn.Module):
        def forward(self, x):
            return torch.add(x, x)
    mod, x = Calibration(), torch.ones(8)

    def batch():
        t0 = _core.now()
        for _ in range(CALIBRATION_CALLS):
            mod(x)
        return _core.now() - t0
    with torch.no_grad():
        for _ in range(10):
            mod(x)
        plain = min(batch() for _ in range(CALIBRATION_ROUNDS))
        prof = profile(levels, name="xsp.calibration", record_shapes=shapes,
                       profile_memory=memory, with_stack=stack, clock_sync=False)
        with prof:
            mod(x)              # the first profiled call pays one-off costs (names, sites)
            timed = min(batch() for _ in range(CALIBRATION_ROUNDS))
    kinds = prof.trace.kind_codes
    calls = 1 + CALIBRATION_CALLS * CALIBRATION_ROUNDS
    per_call = (len(kinds) - int(np.isin(kinds, NOT_COUNTED).sum())) / calls
    if per_call <= 0:
        return None
    return max(0, int(round((timed - plain) / (CALIBRATION_CALLS * per_call))))


def _hook(ref, name):
    prof = ref()
    if prof is not None:
        getattr(prof, name)()


def _process_meta(torch):
    """What places the trace among a job's processes: host, the wall-clock offset of the
    monotonic clock (wall - monotonic ns: the session clock is monotonic), and, in a
    distributed job, rank, world_size, local_rank and backend: from torch.distributed when it
    is initialised, else from the launcher's environment (RANK, WORLD_SIZE, LOCAL_RANK, as
    torchrun sets them; meta rank_source says which).  docs/distributed.md."""
    import socket
    global _WALL_OFFSET
    if _WALL_OFFSET is None:
        # once per process: the same offset for every trace of it (two readings a few ns
        # apart would make two identical recordings differ), exact to the clocks' reading
        import time
        _WALL_OFFSET = time.time_ns() - time.monotonic_ns()
    meta = {"host": socket.gethostname(), "clock.wall_offset_ns": _WALL_OFFSET}
    dist = getattr(torch, "distributed", None) if torch is not None else None
    try:
        ready = dist is not None and dist.is_available() and dist.is_initialized()
    except Exception:               # a broken build: treat as not distributed
        ready = False
    env = os.environ
    if ready:
        meta["rank"] = int(dist.get_rank())
        meta["world_size"] = int(dist.get_world_size())
        try:
            meta["backend"] = str(dist.get_backend())
        except Exception:
            pass
        meta["rank_source"] = "torch.distributed"
    elif env.get("RANK", "").isdigit() and env.get("WORLD_SIZE", "").isdigit():
        meta["rank"] = int(env["RANK"])
        meta["world_size"] = int(env["WORLD_SIZE"])
        meta["rank_source"] = "environment"
    if "rank" in meta and env.get("LOCAL_RANK", "").isdigit():
        meta["local_rank"] = int(env["LOCAL_RANK"])
    if "rank" in meta and env.get("TORCHELASTIC_RUN_ID"):
        meta["job"] = env["TORCHELASTIC_RUN_ID"]
    return meta


def _model_label(m):
    """How meta "model" names an item of profile's model: a class name, or the class of an
    nn.Module object."""
    if isinstance(m, str):
        return m
    if isinstance(m, type):
        return m.__name__
    return type(m).__name__


def _model_matcher(model, torch):
    """profile's `model` as a predicate on a top-level module call, or None (the default
    rule).  model: an nn.Module (that object), a class (its instances), a str (a class name,
    or module.ClassName), or a list or tuple of those."""
    if model is None:
        return None
    items = list(model) if isinstance(model, (list, tuple)) else [model]
    if not items:
        raise ValueError("model: an empty list names no model")
    objs, classes, names = [], [], set()
    for m in items:
        if isinstance(m, torch.nn.Module):
            objs.append(weakref.ref(m))
        elif isinstance(m, type) and issubclass(m, torch.nn.Module):
            classes.append(m)
        elif isinstance(m, str) and m:
            names.add(m)
        else:
            raise TypeError("model must be an nn.Module, an nn.Module class or a class name "
                            "(str), or a list of them; not %r" % (m,))
    classes = tuple(classes)

    def is_model(module):
        if any(r() is module for r in objs) or (classes and isinstance(module, classes)):
            return True
        if names:
            cls = type(module)
            return cls.__name__ in names or "%s.%s" % (cls.__module__, cls.__qualname__) in names
        return False

    return is_model


class Schedule:
    """A step schedule (xsp.schedule(...)): which steps a profile records, as torch.profiler's
    schedule.  Immutable; the C binding runs it (csrc/core/session.h, xsp_schedule)."""

    __slots__ = ("wait", "warmup", "active", "repeat", "skip_first")
    _FIELDS = __slots__

    def __init__(self, wait, warmup, active, repeat, skip_first):
        for key, value in zip(self._FIELDS, (wait, warmup, active, repeat, skip_first)):
            low = 1 if key == "active" else 0
            if isinstance(value, bool) or not isinstance(value, int) or not \
                    low <= value < 1 << 31:
                raise ValueError("xsp.schedule: %s must be an int of at least %d (below 2**31), "
                                 "not %r" % (key, low, value))
            object.__setattr__(self, key, value)

    def __setattr__(self, key, value):
        raise AttributeError("xsp.schedule is immutable: make a new one")

    __delattr__ = __setattr__

    def _fields(self):
        return tuple(getattr(self, k) for k in self._FIELDS)

    def __eq__(self, other):
        return isinstance(other, Schedule) and self._fields() == other._fields()

    def __hash__(self):
        return hash(self._fields())

    def __reduce__(self):
        return (Schedule, self._fields())

    def __repr__(self):
        return "xsp.schedule(%s)" % ", ".join("%s=%d" % (k, getattr(self, k))
                                               for k in self._FIELDS)


def schedule(*, wait=0, warmup=0, active=1, repeat=0, skip_first=0):
    """A step schedule for xsp.profile(schedule=...), as torch.profiler.schedule: steps are
    counted by step() calls (step n is the work between the n-th and the (n+1)-th call, step 0
    the work before the first); the first skip_first steps are not recorded, then come cycles of
    wait steps (not recorded), warmup steps (recorded, then cut off the trace: the recorder warms
    up) and active steps (recorded), repeat cycles of them (0: for ever).  Each cycle becomes
    one trace.  All are ints >= 0, active >= 1 (else ValueError)."""
    return Schedule(wait, warmup, active, repeat, skip_first)


def step():
    """Marks the end of an iteration in the profile that is recording, as its step() does;
    does nothing when none is.  For code profiled from outside, e.g. by `xsp run`."""
    prof = _core.active_session()
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


# A forked child (a DataLoader worker) does not inherit the recording: the core drops it in its
# pthread_atfork handler, and this C function puts Module.__call__ back, detaches the torch
# callback and makes the inherited profile inert (sessionmod.c).
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_core._after_fork_child)


def _check_options(levels, name, max_memory, gpu_max_memory, schedule, on_trace_ready,
                   with_stack):
    """profile's options that can be wrong whatever the machine: raises ValueError or TypeError
    saying which and why."""
    if with_stack and "L" not in levels:
        raise ValueError("with_stack records Python function calls at level L; profile "
                         "with levels that include L (levels=%r)" % (levels,))
    if schedule is not None and not isinstance(schedule, Schedule):
        raise TypeError("schedule must be an xsp.schedule(...), not %r" % (schedule,))
    if on_trace_ready is not None and (schedule is None or not callable(on_trace_ready)):
        raise TypeError("on_trace_ready must be a callable, and needs a schedule")
    if not isinstance(gpu_max_memory, int) or gpu_max_memory < 1 << 20:
        raise ValueError("gpu_max_memory must be an int of at least 1 MiB, not %r"
                         % (gpu_max_memory,))
    if not isinstance(name, str) or not name or "\0" in name:
        raise ValueError("name must be a non-empty string without NUL characters")
    if not isinstance(max_memory, int) or max_memory < MIN_MEMORY:
        raise ValueError("max_memory must be an int of at least %d bytes (one chunk of "
                         "records), not %r" % (MIN_MEMORY, max_memory))


def _torch_for(levels):
    """torch for these levels: imported for L and G (ProfilerError when it cannot be), the
    module already imported otherwise, or None."""
    if "L" in levels or "G" in levels:
        return _import_torch()
    return sys.modules.get("torch")


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
        from xsp import _torch
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
