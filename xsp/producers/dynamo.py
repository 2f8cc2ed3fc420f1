"""torch.compile'd code while recording: compilations as spans, and the source modules of what
compiled code runs (docs/api.md, "torch.compile"); the tables over a finished trace are
xsp.analysis.compiled.

Recording (xsp.profile calls prepare() when it is made):
  - Compilations are spans, recorded live: Dynamo's compile callbacks
    (torch._dynamo.callback_handler, on_compile_start / on_compile_end) run in Python on the
    compiling thread, around each frame's compilation, and begin and end a span of kind
    "scope" there: "torch.compile: compile forward" (attribute type "compile"), or
    "torch.compile: recompile forward" (type "recompile", attribute reason: the guard that
    failed).  The ops that tracing runs (fake tensors) nest under it.  Each graph break found
    during that compilation is a zero-length span "torch.compile: graph break" (attributes
    reason and source, the user's "file:line") at the end of its compile span: Dynamo keeps
    the reasons, not their times.  The breaks are those Dynamo adds to its list
    torch._dynamo.utils.graph_break_reasons meanwhile (dynamo_breaks(): what
    torch._dynamo.explain reports; counters["graph_break"] misses a data-dependent branch,
    which Dynamo files under counters["unimplemented"]).  The
    compile span's attributes, added at stop from the tables below: compile_id ("0/0", the
    same as its region span "Torch-Compiled Region: 0/0"), frame ("forward (file.py:12)"),
    outcome ("compiled", "skipped: why", "failed"), graphs (graphs made), graph_breaks.
  - Source modules: right after each compilation (inside its span, so that the cost is
    shown there), the compiled graph is read, never changed, and turned into a table
    {span name: [modules of its 1st call, of its 2nd call, ...]} per compile id:
      Dynamo's graph (the FX GraphModule it hands the backend) keeps, per node,
      meta["nn_module_stack"], whose innermost entry is the module the node came from
      ("L['self'].layer1[0].conv1" -> "layer1.0.conv1"); nodes outside every submodule
      belong to the compiled frame's own module or function ("Net", or "step");
      Inductor's output code (CompiledFxGraph.source_code) lists each kernel call in the order
      it runs, with the Dynamo nodes it came from: "# Topologically Sorted Source Nodes:
      [linear, relu]" before extern kernel calls (extern_kernels.addmm -> span aten::addmm)
      and before each Triton kernel's definition; for C++ kernels (no such comment) the
      provenance tables Inductor keeps when config.trace.provenance_tracking_level is 1
      (kernel -> post-grad nodes -> Dynamo nodes); without them a C++ kernel's modules are
      unknown (counted);
      AOTAutograd's forward graph (aot_eager) is aten ops with the same node meta;
      the eager backend runs Dynamo's graph itself: its nodes' torch functions (linear, relu,
      mul, ...) are taken for the aten ops of the same name.
    A call that fuses nodes of several modules lists them all, comma-separated, in graph
    order: a fused kernel is never given to one of its modules.  At stop the C session
    (csrc/python/tracefinish.c, xsp_py_attach_tables) gives attribute "modules" to the k-th
    top span of that name in each region "Torch-Compiled Region: <compile id>": a child of the
    region, or of a wrapper inside it (CompiledFunction, a CUDA launch).  C++ kernels are
    spans named graph_<n>_<kernel> only when torch._inductor.config.cpp.enable_kernel_profile
    is set before compiling (xsp never sets it: it changes the generated code); Triton
    kernels are level G kernel spans under their CUDA launch.
  - Graphs compiled before the callbacks were installed (before the first profile, or after
    torch._dynamo.reset(), which clears every callback) are found when the next profile is
    made, from Dynamo's cache entries of the code objects it compiled.

What torch does not keep, and so no trace has (docs/api.md): the modules of backward kernels
(the backward graph's nodes carry no nn_module_stack), the modules of C++ kernels without
provenance tracking, and the times of graph breaks within a compilation.

Why this way: xsp never changes what Dynamo compiles (tests/py/producers/test_compile.py and
test_compile_events.py compare Dynamo's counters): no backend wrapper, no custom pass, no
config change; the callbacks and the reading of finished graphs are observation only.  The one
thing xsp tells Dynamo is to leave xsp's own frames alone (its skip rules, and each xsp code
object marked to run uncompiled with what it calls; the module wrapper is C and calls the
user's module from no frame of xsp's): after a graph break the module wrapper's Python helpers
run inside a compiled call, and Dynamo would compile them as user code.  A failure inside the
callbacks is counted (meta "compile.hook_errors"), never raised into Dynamo.

Reading the spans of a finished trace is xsp.analysis.compiled (compiles, graph_breaks,
summary) and xsp.values.compiling (compile_mask, compiling_steps).
"""
import re
import sys
import threading

from xsp import _core
from xsp.values.compiling import (COMPILE, GRAPH_BREAK, META, MODULES, RECOMPILE, REGION, _SCOPE,
                                  _TEXT)


# -- recording: the Dynamo callbacks ----------------------------------------------------------
class _Observer:
    """The process's one set of Dynamo compile callbacks and the tables they fill.

    tables: {compile id: {span name: [modules str or None, ...]}}, plain dicts, lists and
    strs only (the C stop reads them without running Python); handed to every profile.
    Protected by the GIL (callbacks and profiles mutate them from Python only)."""

    def __init__(self):
        self.tables = {}
        self.indexed = set()        # names of the __compiled_fn globals already read
        self.errors = 0             # failures inside the callbacks (counted, never raised)
        self.skipping = False       # xsp's directory is in Dynamo's skip rules
        self.tls = threading.local()

    # the callbacks: module-level functions below call these
    def start(self, args):
        stack = getattr(self.tls, "stack", None)
        if stack is None:
            stack = self.tls.stack = []
        rec = {"id": str(getattr(args, "compile_id", "?")), "key": None, "prof": None}
        stack.append(rec)
        # a compile id names one compilation; an old table under it (from before a
        # torch._dynamo.reset(), which numbers frames from 0 again) is not this one's
        self.tables.pop(rec["id"], None)
        try:
            dyn = _compile_frame()
            rec["code"] = dyn.get("code") if dyn else None
            reason = dyn.get("recompile_reason") if dyn else None
            rec["reason"] = str(reason)[:_TEXT] if reason else ""
            utils = sys.modules.get("torch._dynamo.utils")
            c = utils.counters if utils is not None else {}
            rec["breaks"] = dict(c.get("graph_break", {}))
            made = dynamo_breaks()
            rec["gb0"] = len(made) if made is not None else None
            rec["graphs"] = int(c.get("stats", {}).get("unique_graphs", 0))
            prof = _core.active_session()
            spec = getattr(prof, "_span_attrs", None) if prof is not None else None
            if prof is None or not isinstance(spec, dict) or not _core.active():
                return
            code = rec["code"]
            label = code.co_name if code is not None else "?"
            if _root_label(code)[1] == "fn":    # torch's frame for a built-in module
                fn = (dyn.get("locals") or {}).get("fn")
                label = type(fn).__name__ + ".forward" if fn is not None else label
            rec["name"] = (RECOMPILE if rec["reason"] else COMPILE) + label
            rec["level"] = 0 if "M" in prof.levels else 1
            rec["prof"] = prof
            rec["t0"] = _core.now()
            rec["key"] = _core.begin(rec["level"], _SCOPE, rec["name"],
                                     "recompile" if rec["reason"] else "compile")
            rec["t1"] = _core.now()
        except Exception:       # noqa: BLE001 -- never into Dynamo: counted
            self._failed(rec)

    def end(self, args):
        stack = getattr(self.tls, "stack", None)
        if not stack:
            return
        rec = stack.pop()
        try:
            dyn = _compile_frame()
            result = dyn.get("_result") if dyn else None
            outcome = "failed"
            guarded = None
            if result is not None:
                ret = result[0] if isinstance(result, tuple) else result
                guarded = getattr(ret, "guarded_code", None)
                outcome = ("compiled" if guarded is not None else
                           "skipped: " + str(getattr(ret, "skip_reason", "") or "no graph")[:_TEXT])
            if guarded is not None:
                self.index_code(guarded.code, getattr(guarded, "trace_annotation", ""),
                                dyn.get("globals"), rec.get("code"))
            if rec["key"] is None:
                return
            utils = sys.modules.get("torch._dynamo.utils")
            c = utils.counters if utils is not None else {}
            new_breaks = self._new_breaks(rec, c, stack)
            events = rec["prof"]._span_attrs.setdefault("events", [])
            for reason, where in new_breaks:
                t0 = _core.now()
                _core.end(_core.begin(rec["level"], _SCOPE, GRAPH_BREAK, "graph break"))
                attrs = {"reason": reason, "compile_id": rec["id"]}
                if where:
                    attrs["source"] = where
                events.append((t0, _core.now(), GRAPH_BREAK, attrs))
            code = rec.get("code")
            frame = ("%s (%s:%d)" % (code.co_name, code.co_filename, code.co_firstlineno)
                     if code is not None else "?")
            attrs = {"compile_id": rec["id"], "frame": frame, "outcome": outcome,
                     "graphs": int(c.get("stats", {}).get("unique_graphs", 0)) - rec["graphs"],
                     "graph_breaks": len(new_breaks)}
            if rec["reason"]:
                attrs["reason"] = rec["reason"]
            events.append((rec["t0"], rec["t1"], rec["name"], attrs))
        except Exception:       # noqa: BLE001
            self._failed(rec)
        finally:
            if rec["key"] is not None:
                _core.end(rec["key"])

    def _new_breaks(self, rec, c, stack):
        """[(reason, "file:line" or None)] of the graph breaks Dynamo made during the
        compilation rec (see dynamo_breaks()): the ones added to its list since rec began, less
        those of compilations nested in it (claimed when they ended); without that list (an
        older torch), the rise of counters["graph_break"], without source lines."""
        made = dynamo_breaks()
        if made is None or rec.get("gb0") is None:
            out = []
            for reason, n in dict(c.get("graph_break", {})).items():
                out += [(str(reason).split("\n")[0][:_TEXT], None)] * (
                    int(n) - int(rec["breaks"].get(reason, 0)))
            return out
        claimed = getattr(self.tls, "claimed", None)
        if claimed is None:
            claimed = self.tls.claimed = set()
        first = rec["gb0"] if rec["gb0"] <= len(made) else 0   # reset() emptied the list
        new = [r for r in list(made[first:]) if id(r) not in claimed]
        if stack:                   # an enclosing compilation must not count them again
            claimed.update(id(r) for r in new)
        else:
            claimed.clear()
        return [describe_break(r) for r in new]

    def _failed(self, rec):
        self.errors += 1
        prof = rec.get("prof") or _core.active_session()
        meta = getattr(prof, "_meta", None)
        if isinstance(meta, dict):
            meta["compile.hook_errors"] = meta.get("compile.hook_errors", 0) + 1

    # -- reading compiled graphs -------------------------------------------------------------
    def index_code(self, code, annotation, glob, orig_code):
        """Reads the graphs that transformed code `code` calls (its __compiled_fn globals, in
        `glob`) into tables[compile id of annotation]."""
        if not annotation.startswith(REGION) or glob is None:
            return
        fns = sorted((_fn_number(n), n) for n in code.co_names if n.startswith("__compiled_fn"))
        table = {}
        for _, n in fns:
            fn = glob.get(n)
            if fn is None:
                continue
            for name, modules in _calls(fn, _root_label(orig_code)):
                table.setdefault(name, []).append(modules)
            self.indexed.add(n)
        if fns:
            self.tables[annotation[len(REGION):]] = table

    def scan(self):
        """Indexes the graphs Dynamo compiled while no callback of ours was installed: the
        cache entries of every code object it compiled, their globals found in sys.modules."""
        conv = sys.modules.get("torch._dynamo.convert_frame")
        ef = sys.modules.get("torch._dynamo.eval_frame")
        if conv is None or ef is None:
            return
        want = {}
        for ref in list(getattr(conv.input_codes, "seen", ())):
            code = ref()
            if code is None:
                continue
            for entry in ef._debug_get_cache_entry_list(code):
                names = [n for n in entry.code.co_names if n.startswith("__compiled_fn")]
                if any(n not in self.indexed for n in names):
                    want[id(entry.code)] = (entry.code, entry.trace_annotation, code, names)
        if not want:
            return
        needed = {n for v in want.values() for n in v[3]}
        where = {}
        for mod in list(sys.modules.values()):
            d = getattr(mod, "__dict__", None)
            if not isinstance(d, dict):
                continue
            for n in needed.intersection(d):
                where[n] = d
        for code, annotation, orig, names in want.values():
            glob = where.get(names[0]) if names else None
            if glob is not None:
                self.index_code(code, annotation, glob, orig)


_OBS = _Observer()


def _on_start(args):
    _OBS.start(args)


def _on_end(args):
    _OBS.end(args)


def prepare(meta):
    """Called by xsp.profile when it is made: installs the Dynamo compile callbacks when
    torch._dynamo is imported (again after torch._dynamo.reset(), which clears them, reading
    what was compiled meanwhile) and returns the profile's attribute tables (the dict its stop
    reads, see the module docstring), or None when torch._dynamo is not imported (nothing can
    have been compiled; a compile later in the block is not recorded).  Never raises: a
    failure (a torch whose internals moved) is counted in meta, the profile's meta dict, as
    "compile.hook_errors"."""
    cb = sys.modules.get("torch._dynamo.callback")
    if cb is None:
        return None
    try:
        rules = sys.modules.get("torch._dynamo.trace_rules")
        ef = sys.modules.get("torch._dynamo.eval_frame")
        if rules is not None and ef is not None and not _OBS.skipping \
                and "torch._dynamo.types" in sys.modules:
            # Dynamo skips xsp's own frames: the module wrapper's Python helpers (a top-level
            # call run eagerly inside a compiled call, after a graph break) would otherwise be
            # compiled as user code; marked per code object too, so that Dynamo does not
            # even look at them (its frame counters stay those of the run without xsp)
            rules.add("xsp")
            types_ = sys.modules.get("torch._dynamo.types")
            skip = types_.FrameAction.SKIP
            for code in _xsp_codes():
                # and what they call (threading, named_modules, _shapes_of).  The user's
                # module is called by the wrapper itself, in C, from no frame of xsp's: Dynamo
                # sees that call as it would without xsp
                ef.set_code_exec_strategy(code, types_.FrameExecStrategy(skip, skip))
            _OBS.skipping = True
        h = cb.callback_handler
        fresh = _on_start not in h.start_callbacks
        if fresh:
            h.register_start_callback(_on_start)
        if _on_end not in h.end_callbacks:
            h.register_end_callback(_on_end)
        if fresh:
            # first use, or torch._dynamo.reset() cleared our callbacks: what was compiled
            # before is gone from Dynamo's caches, and compile ids start again at 0/0
            _OBS.tables.clear()
            _OBS.indexed.clear()
            _OBS.scan()
    except Exception:           # noqa: BLE001 -- a torch whose internals moved: counted
        _OBS.errors += 1
        meta["compile.hook_errors"] = meta.get("compile.hook_errors", 0) + 1
    return {"events": [], "regions": [(REGION, MODULES, _OBS.tables, META)]}


def _xsp_codes():
    """Every code object of the xsp modules imported now: their functions, methods and the
    functions nested in them."""
    import types
    out, seen = [], set()

    def add(code):
        if id(code) in seen:
            return
        seen.add(id(code))
        out.append(code)
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                add(c)

    for name, mod in list(sys.modules.items()):
        if not (name == "xsp" or name.startswith("xsp.")) or mod is None:
            continue
        for v in list(vars(mod).values()):
            fns = [v]
            if isinstance(v, type) and v.__module__ == mod.__name__:
                fns = list(vars(v).values())
            for f in fns:
                f = getattr(f, "__func__", f)
                if isinstance(f, property):
                    f = f.fget
                code = getattr(f, "__code__", None)
                if isinstance(code, types.CodeType):
                    add(code)
    return out


def _compile_frame():
    """The locals Dynamo's _compile frame (convert_frame.py) has now: code, globals,
    recompile_reason, ..., plus "_result" from its compile_inner (present once that returned):
    read from the calling stack, or None when not found."""
    f = sys._getframe(2)
    inner = None
    for _ in range(40):
        if f is None:
            return None
        if f.f_code.co_filename.endswith("convert_frame.py"):
            if f.f_code.co_name == "compile_inner" and inner is None:
                inner = f
            elif f.f_code.co_name == "_compile":
                out = dict(f.f_locals)
                if inner is not None:
                    out["_result"] = inner.f_locals.get("result")
                return out
        f = f.f_back
    return None


def dynamo_breaks():
    """The graph breaks Dynamo has made in this process so far (since torch._dynamo.reset(),
    which empties it), or None when torch._dynamo is not imported or keeps no such list: its
    list torch._dynamo.utils.graph_break_reasons, to which each GraphCompileReason with
    graph_break=True adds itself when Dynamo splits a frame at a break (reason, user_stack).
    torch._dynamo.explain reports these same objects (break_reasons); counters["graph_break"]
    misses some of them: Dynamo files a data-dependent branch under counters["unimplemented"].
    Read only: never changed here."""
    utils = sys.modules.get("torch._dynamo.utils")
    made = getattr(utils, "graph_break_reasons", None) if utils is not None else None
    return made if isinstance(made, list) else None


def describe_break(r):
    """(reason, "file:line" of the user's line, or None) of one of dynamo_breaks()' entries:
    the reason is the first line of Dynamo's text (its graph break type) and its
    "Explanation:" line, "Failed to trace builtin operator: Dynamo does not know how to trace
    builtin operator `print` ..."; Dynamo's reason for a branch on a tensor's value is
    "generic_jump TensorVariable()" (symbolic_convert.generic_jump, which records the break
    itself as "Data-dependent branching"), given here as "Data-dependent branching
    (generic_jump TensorVariable())".  The line is the innermost frame of its user stack
    (the line inside a function the compiled code called)."""
    lines = [ln.strip() for ln in str(getattr(r, "reason", r)).splitlines() if ln.strip()]
    head = lines[0] if lines else "?"
    if head.startswith("generic_jump"):
        head = "Data-dependent branching (%s)" % head
    else:
        why = next((ln[len("Explanation:"):].strip() for ln in lines[1:]
                    if ln.startswith("Explanation:")), None)
        if why:
            head = "%s: %s" % (head, why)
    where = None
    stack = getattr(r, "user_stack", None) or []
    try:
        if stack:
            where = "%s:%d" % (stack[-1].filename, int(stack[-1].lineno))
    except (AttributeError, TypeError, ValueError):
        where = None
    return head[:_TEXT], where


def _fn_number(name):
    m = re.match(r"__compiled_fn_(\d+)", name)
    return int(m.group(1)) if m else 0


def _root_label(code):
    """(what the nodes outside every submodule belong to: the class of a compiled forward,
    "Net.forward" -> "Net", else the function's qualified name; the local that holds the root
    module: "self", or "fn" in the wrapper Dynamo compiles for a built-in module)."""
    if code is None:
        return (None, "self")
    if code.co_filename.replace("\\", "/").endswith("torch/_dynamo/external_utils.py"):
        return (None, "fn")
    return (_label(code), "self")


def _label(code):
    q = getattr(code, "co_qualname", code.co_name)
    parts = q.split(".")
    # a resume function after a graph break: "Net.torch_dynamo_resume_in_forward_at_12"
    m = re.match(r"^torch_dynamo_resume_in_(.+)_at_\d+$", parts[-1])
    if m:
        parts[-1] = m.group(1)
        q = ".".join(parts)
    if len(parts) >= 2 and parts[-1] == "forward" and "<locals>" != parts[-2]:
        return parts[-2]
    return q


_PATH_TOKEN = re.compile(r"\.(\w+)|\[\s*'([^']*)'\s*\]|\[\s*(-?\d+)\s*\]")


def module_path(source, root="self"):
    """A qualified module name (as named_modules() gives it) from a Dynamo source expression:
    "L['self'].layer1[0].conv1" -> "layer1.0.conv1", "L['self']._modules['fc']" -> "fc",
    "G['net'].fc1" -> "net.fc1", "getattr(L['self'].blocks, '0')" -> "blocks.0"; "" for the
    root itself (the local named root: self, or fn in the frame Dynamo compiles for a built-in
    module).  An expression of another form comes back unchanged."""
    s = str(source).replace("._modules[", "[")
    while True:
        m = re.match(r"^getattr\((.*),\s*'([^']*)'\)(.*)$", s)
        if not m:
            break
        s = "%s['%s']%s" % m.groups()
    m = re.match(r"^(?:L|G)\['([^']*)'\]", s)
    if not m:
        return str(source)
    parts = [] if m.group(1) == root else [m.group(1)]
    rest, pos = s[m.end():], 0
    while pos < len(rest):
        t = _PATH_TOKEN.match(rest, pos)
        if not t:
            return str(source)
        parts.append(next(g for g in t.groups() if g is not None))
        pos = t.end()
    return ".".join(parts)


def _node_module(node, root):
    """The module a graph node came from: the innermost entry of meta nn_module_stack (the
    compiled module itself by its class name), or root (the compiled frame's own module or
    function) for a node outside every submodule.  root: (label, name of the root local)."""
    stack = node.meta.get("nn_module_stack") if hasattr(node, "meta") else None
    if stack:
        inner = list(stack.values())[-1]
        src = inner[0] if isinstance(inner, tuple) else inner
        path = module_path(src, root[1])
        if path:
            return path
        cls = inner[1] if isinstance(inner, tuple) and len(inner) > 1 else None
        return getattr(cls, "__name__", None) or root[0]
    return root[0]


def _join(modules):
    out = []
    for m in modules:
        if m and m not in out:
            out.append(m)
    return ",".join(out) or None


def _graphs(fn, budget=4000):
    """(Dynamo's GraphModule, AOTAutograd's forward GraphModule, Inductor's CompiledFxGraph) that
    a compiled fn holds, each or None, found by a bounded walk of its closures and attributes
    (never the lazy backward's)."""
    import types
    dynamo = aot = fx = None
    seen = {id(fn)}
    todo = [fn]
    while todo and budget > 0:
        o = todo.pop(0)
        budget -= 1
        tn = type(o).__name__
        if tn in ("GraphModule", "_LazyGraphModule"):
            if "dynamo_compile_id" in getattr(o, "meta", {}):
                dynamo = dynamo or o
            elif aot is None:
                aot = o
            continue
        if tn == "CompiledFxGraph":
            fx = fx or o
            continue
        kids = []
        if isinstance(o, types.FunctionType):
            kids += [c.cell_contents for c in (o.__closure__ or ()) if _cell_full(c)]
            kids += list(vars(o).values())
        elif isinstance(o, types.MethodType):
            kids += [o.__self__, o.__func__]
        elif isinstance(o, (list, tuple)):
            kids += list(o[:64])
        elif isinstance(o, dict):
            kids += list(o.values())[:64]
        elif isinstance(o, type):
            if o.__module__.startswith(("torch._functorch", "torch.autograd")):
                kids += [v for k, v in vars(o).items() if k != "_lazy_backward_info"]
        elif type(o).__module__.startswith(("torch._", "functools")) and hasattr(o, "__dict__"):
            kids += [v for k, v in vars(o).items() if k not in ("_lazy_backward_info",
                                                                 "compiled_bw")]
            kids.append(type(o))
        elif hasattr(o, "func") and hasattr(o, "args"):        # functools.partial
            kids += [o.func] + list(o.args)
        for k in kids:
            if id(k) not in seen and not isinstance(
                    k, (str, bytes, int, float, bool, type(None), types.ModuleType)):
                seen.add(id(k))
                todo.append(k)
    return dynamo, aot, fx


def _cell_full(c):
    try:
        c.cell_contents
        return True
    except ValueError:
        return False


def _aten_name(target):
    """The RecordFunction name of an aten overload ("aten::addmm"), or None."""
    schema = getattr(target, "_schema", None)
    return schema.name if schema is not None else None


_OPERATORS = {"mul": "mul", "add": "add", "sub": "sub", "truediv": "div", "matmul": "matmul",
              "neg": "neg", "pow": "pow", "floordiv": "floor_divide", "iadd": "add_",
              "imul": "mul_"}


def _torch_level_name(node):
    """The aten op a node of Dynamo's graph runs first, when the eager backend runs it: a torch
    function or Tensor method of the same name (linear -> aten::linear); None when unknown."""
    if node.op == "call_method":
        return "aten::" + str(node.target)
    if node.op != "call_function":
        return None
    t = node.target
    name = _aten_name(t)
    if name:
        return name
    mod = getattr(t, "__module__", "") or ""
    n = getattr(t, "__name__", None)
    if not n:
        return None
    if mod in ("_operator", "operator"):
        return "aten::" + _OPERATORS[n] if n in _OPERATORS else None
    return "aten::" + n.lstrip("_")


def _calls(fn, root):
    """[(span name, modules str or None)] of the calls compiled fn makes, in order."""
    dynamo, aot, fx = _graphs(fn)
    by_node = {}
    if dynamo is not None:
        by_node = {n.name: _node_module(n, root) for n in dynamo.graph.nodes}
    if fx is not None and getattr(fx, "source_code", None):
        return _inductor_calls(fx, by_node)
    gm = aot if aot is not None else dynamo
    if gm is None:
        return []
    out = []
    for n in gm.graph.nodes:
        name = _aten_name(n.target) if gm is aot else _torch_level_name(n)
        if name:
            mod = _node_module(n, root) if gm is aot else by_node.get(n.name)
            if gm is aot and not n.meta.get("nn_module_stack") and n.meta.get("from_node"):
                mod = by_node.get(n.meta["from_node"][0].name, mod)
            out.append((name, mod))
    return out


_SOURCE_NODES = re.compile(r"#\s*(?:Topologically Sorted|Unsorted) Source Nodes: \[([^\]]*)\]")
_HANDLE = re.compile(r"#\s*\[Provenance debug handles\]\s*(\S+)")
_DEF = re.compile(r"^(\w+)\s*=\s*async_compile\.\w+\(")
_CALL = re.compile(r"^(?:[\w, ]+=\s*)?([A-Za-z_][\w.]*)\(")


def _inductor_calls(fx, by_node):
    """The kernel calls of Inductor's output code, in order, with their modules (see the
    module docstring): [(span name, modules or None)]; a C++ kernel is listed under both the
    name its profiled span has (graph_<id>_<kernel>) and its own."""
    src = fx.source_code
    prov = {}
    mapping = getattr(fx, "inductor_provenance_mapping_str", None)
    if mapping:
        import json
        try:
            m = json.loads(mapping)
        except ValueError:
            m = {}
        post_to_pre = m.get("postToPre", {})
        for k, v in m.items():
            if k.endswith("CodeToPost") and isinstance(v, dict):
                for kern, posts in v.items():
                    prov[kern] = [pre for p in posts for pre in post_to_pre.get(p, [])]
    gid = (getattr(fx, "fx_kwargs", None) or {}).get("graph_id")
    defs, pending, out = {}, None, []
    exact = sort = False
    order = {n: i for i, n in enumerate(by_node)}      # Dynamo's graph order
    lines = src.splitlines()
    in_call = False
    for line in lines:
        s = line.strip()
        m = _SOURCE_NODES.search(s)
        if m:
            pending = [x.strip() for x in m.group(1).split(",") if x.strip()]
            exact = False
            sort = "Topologically" in s
            continue
        h = _HANDLE.search(s)
        if h:
            if h.group(1) in prov:          # the exact mapping, when Inductor kept it
                pending, exact = prov[h.group(1)], True
            continue
        if not in_call:
            d = _DEF.match(line)
            if d:
                defs[d.group(1)] = pending
                pending = None
            if re.match(r"^\s*def call\(", line):
                in_call, pending = True, None
            continue
        if s.startswith("#") or not s:
            continue
        if re.match(r"^\S", line):          # the end of call()
            break
        c = _CALL.match(s)
        if not c:
            continue
        target = c.group(1)
        if target.startswith(("extern_kernels.", "torch.ops.aten.", "aten.")):
            names = ["aten::" + (target.split(".", 1)[1] if target.startswith("extern_")
                                 else target.split("aten.", 1)[1].split(".")[0])]
            if pending and not exact and sort:
                # an extern kernel computes one node, the last of its topologically sorted
                # source nodes; the others produced its inputs (realised into its buffers)
                pending = pending[-1:]
        else:
            base = target.split(".")[0]
            if base not in defs:
                continue
            names = [base] + (["graph_%s_%s" % (gid, base)] if gid is not None else [])
            if not pending:
                pending = defs[base] or next((v for k, v in prov.items()
                                              if k.split(":")[0] == base), None)
        mods = _join(by_node.get(n) for n in sorted(
            pending, key=lambda n: order.get(n, len(order)))) if pending else None
        for n in names:
            out.append((n, mods))
        pending, exact = None, False
    return out


__all__ = ["prepare", "dynamo_breaks", "describe_break", "module_path"]
