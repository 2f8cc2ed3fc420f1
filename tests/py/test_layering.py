"""The layering of the Python package (docs/design.md, "Python layers"), checked on the source.

Every xsp/*.py is parsed with ast; its imports of xsp modules (absolute `xsp.x`, relative `.x`,
`from . import x`, those inside functions too, and importlib.import_module with a constant
name) are the edges of the import graph.  The graph must have no cycle, and every edge must go
from a module to one in a lower layer of LAYERS (or be one of the same-layer imports in
SAME_LAYER).  Outside the data layer, no module may read a private member of a Trace or Span:
the attribute names that trace.py itself gives Trace and Span and starts with one underscore
may not appear as an attribute in the modules above it, unless that module defines the name
itself (its own private attributes and functions).
"""
import ast
import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.join(ROOT, "xsp")

# The layers, bottom to top: a module imports only from the layers below its own.
LAYERS = {
    # L0: the C extensions (the core, the torch shim, the dev-only benchmark helpers) and the
    # small modules that import no other xsp module
    "_core": 0, "_torch": 0, "_bench": 0, "_util": 0, "_version": 0, "errors": 0, "levels": 0,
    "models": 0,
    # _tree: the walks over a parent array (nearest_ancestor, ancestor_count, self_time), which
    # trace re-exports; iterations: the iteration rule over plain arrays (the analyses and the
    # Kineto export share it)
    "_tree": 0, "iterations": 0,
    # peaks measures the machine's FLOP/s and bandwidth for the roofline (torch inside its
    # functions; it imports only _util)
    "peaks": 0,
    # kineto reads and writes Kineto's JSON with the C core only (trace.py uses it for
    # Trace.to_kineto and load_kineto; it takes a Trace by duck typing)
    "kineto": 0,
    # L1: the data layer (Trace, Span, load, files, from_spans)
    "trace": 1,
    # L2: analyses and exporters, over the public API of Trace and Span
    "analysis": 2, "chrome": 2, "compare": 2,
    # flops: FLOPs and bytes per op, layer, step and model from the op input attributes
    "flops": 2,
    # memory: memory per op and layer, the memory timeline (profile_memory)
    "memory": 2,
    # compiled: torch.compile's compilations as spans (Dynamo's callbacks, which profiler
    # installs) and the source modules of compiled code; reads traces by the public API
    "compiled": 2,
    # distributed: clock samples (profiler calls them), merging ranks, analyses across ranks
    "distributed": 2,
    # otlp builds OpenTelemetry spans from a Trace (the SDK is imported inside its functions)
    "otlp": 2,
    # _html draws a Trace's timeline and tree for the reports: a helper of the data layer
    # (it imports only trace and _util; test_the_graph_is_read checks)
    "_html": 2,
    # L3: reports, over the analyses (a Measurement is recognised by duck typing)
    "report": 3,
    # L4: producers of traces and measurements
    "profiler": 4, "leveled": 4,
    # L5: performance tests over measurements (perf) and the pytest plugin over them
    "perf": 5, "pytest_plugin": 6,
    # L7: the entry points and the package itself
    "cli": 7, "demo": 7, "__main__": 7, "__init__": 7,
    # the evaluation pipeline, the subpackage xsp/zoo as one node (its own modules are checked
    # by test_the_zoo_sits_on_top): an entry point over the whole public API
    "zoo": 7,
}
# imports allowed within one layer (the graph must still have no cycle): errors re-exports the
# exception classes the C core defines; measure runs profiles; comparing two runs compares
# their analyses (and their FLOPs and memory); the analyses across ranks find each rank's
# iterations as the analyses do; the roofline reads xsp.flops' op costs; the entry points use
# the package
SAME_LAYER = {("errors", "_core"), ("iterations", "_tree"), ("kineto", "iterations"), ("kineto", "_core"), ("kineto", "_util"), ("peaks", "_util"),
              ("leveled", "profiler"), ("compare", "analysis"), ("analysis", "flops"),
              ("compare", "flops"), ("compare", "memory"), ("distributed", "analysis"),
              ("cli", "__init__"), ("demo", "__init__"), ("__main__", "cli"), ("cli", "zoo")}
# the modules above the data layer that must not touch a Trace's or Span's private members
# (profiler.py builds the Trace and is checked by the layer rule only)
PUBLIC_API_ONLY = ("analysis", "chrome", "otlp", "compare", "_html", "report", "leveled", "cli",
                   "demo", "flops", "memory", "compiled")


def _sources():
    return {os.path.splitext(os.path.basename(p))[0]: p
            for p in sorted(glob.glob(os.path.join(PKG, "*.py")))}


def _modules():
    """Every module name of the package: the .py files and the C extensions in the table."""
    return set(_sources()) | {m for m in LAYERS if m.startswith("_") and m != "__init__"
                              and m != "__main__"}


def _parse(path):
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), filename=path)


def _target(name, modules):
    """The module that importing xsp submodule or attribute `name` of the package loads."""
    return name if name in modules else "__init__"


def imports(mod, path, modules):
    """[(imported module, line)] of the xsp modules that module mod imports."""
    out = []
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "xsp":
                    out.append((parts[1] if len(parts) > 1 else "__init__", node.lineno))
        elif isinstance(node, ast.ImportFrom):
            assert node.level <= 1, "%s:%d: import from outside the package" % (
                path, node.lineno)
            if node.level == 1 or node.module == "xsp" or (node.module or "").startswith(
                    "xsp."):
                sub = node.module if node.level == 1 else node.module[len("xsp"):].lstrip(".")
                if sub:
                    out.append((sub.split(".")[0], node.lineno))
                else:                           # from . import x / from xsp import x
                    out.extend((_target(a.name, modules), node.lineno) for a in node.names)
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"):
            name = node.args[0].value           # relative names: to the package
            sub = name[1:] if name.startswith(".") else \
                name[len("xsp"):].lstrip(".") if name.split(".")[0] == "xsp" else None
            if sub is not None:
                out.append((sub.split(".")[0] or "__init__", node.lineno))
    return [(m, line) for m, line in out if m != mod]


def graph():
    """{module: [(imported module, line)]} over every xsp/*.py."""
    modules = _modules()
    return {mod: imports(mod, path, modules) for mod, path in _sources().items()}


def _where(mod, line):
    return "xsp/%s.py:%d" % (mod, line)


def test_every_module_has_a_layer():
    assert sorted(set(_sources()) - set(LAYERS)) == [], \
        "put the new module(s) in LAYERS of tests/py/test_layering.py"
    g = graph()
    unknown = ["%s: imports %s, which is not in LAYERS" % (_where(m, line), dst)
               for m, edges in g.items() for dst, line in edges if dst not in LAYERS]
    assert unknown == [], "\n".join(unknown)


def test_the_graph_is_read():
    """The collector sees the imports it is meant to see (so the checks below are not
    vacuous): absolute, relative, from-package and inside-function imports."""
    g = graph()
    names = {m: {dst for dst, _ in edges} for m, edges in g.items()}
    assert {"analysis", "_util"} <= names["report"]
    assert {"profiler", "report", "trace", "levels", "errors"} <= names["leveled"]
    assert {"__init__", "chrome", "report", "_util"} <= names["cli"]   # `import xsp`, lazy ones
    assert {"__init__", "models", "chrome", "report"} <= names["demo"]  # `from xsp import ..`
    assert names["trace"] <= {"_core", "_util", "levels", "errors", "kineto", "_tree"}
    assert names["_html"] == {"trace", "_util"}
    assert names["iterations"] == {"_tree"} and "iterations" in names["analysis"]


def test_no_import_cycle():
    g = graph()
    line_of = {(m, dst): line for m, edges in g.items() for dst, line in reversed(edges)}
    state = {}
    cycles = []

    def visit(m, stack):
        state[m] = "open"
        stack.append(m)
        for dst in sorted({d for d, _ in g.get(m, ())}):
            if state.get(dst) == "open":
                cyc = stack[stack.index(dst):] + [dst]
                cycles.append(" -> ".join("%s (%s)" % (a, _where(a, line_of[(a, b)]))
                                          for a, b in zip(cyc, cyc[1:])) + " -> " + dst)
            elif dst not in state:
                visit(dst, stack)
        stack.pop()
        state[m] = "done"

    for m in sorted(g):
        if m not in state:
            visit(m, [])
    assert cycles == [], "import cycle(s):\n" + "\n".join(cycles)


def test_imports_go_down_the_layers():
    bad = []
    for m, edges in sorted(graph().items()):
        for dst, line in edges:
            if dst not in LAYERS or m not in LAYERS:
                continue                        # test_every_module_has_a_layer says so
            if LAYERS[dst] < LAYERS[m] or (m, dst) in SAME_LAYER:
                continue
            bad.append("%s: %s (L%d) imports %s (L%d); a module imports only from the layers "
                       "below its own" % (_where(m, line), m, LAYERS[m], dst, LAYERS[dst]))
    assert bad == [], "\n".join(bad)


def trace_private_names():
    """The private attribute names trace.py gives Trace and Span: self._x assignments, _x
    methods and class attributes, and _x slots (dunder names are not private)."""
    names = set()

    def private(n):
        return n.startswith("_") and not n.startswith("__")

    for cls in ast.walk(_parse(os.path.join(PKG, "trace.py"))):
        if not (isinstance(cls, ast.ClassDef) and cls.name in ("Trace", "Span")):
            continue
        for node in ast.walk(cls):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    for e in ast.walk(t):
                        if (isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name)
                                and e.value.id == "self" and private(e.attr)):
                            names.add(e.attr)
                if (isinstance(node, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets)):
                    names.update(c.value for c in ast.walk(node.value)
                                 if isinstance(c, ast.Constant) and isinstance(c.value, str)
                                 and private(c.value))
            elif isinstance(node, ast.FunctionDef) and private(node.name) and node in cls.body:
                names.add(node.name)
        for node in cls.body:                   # class attributes: _SPAN_KEYS = ...
            if isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets
                             if isinstance(t, ast.Name) and private(t.id))
    return names


def _own_private_names(tree):
    """The private names a module defines itself: functions, classes, variables, the attributes
    it assigns on self (its own classes' members), import aliases."""
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                for e in ast.walk(t):
                    if (isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name)
                            and e.value.id == "self"):
                        own.add(e.attr)
                    elif isinstance(e, ast.Name):
                        own.add(e.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            own.update((a.asname or a.name).split(".")[0] for a in node.names)
    return {n for n in own if n.startswith("_")}


def test_trace_private_names_are_collected():
    names = trace_private_names()
    assert {"_data", "_kind", "_level", "_name", "_thread", "_parent", "_attr_off", "_attr_n",
            "_flags", "_akey", "_self_ns", "_depth", "_children", "_t", "_attr_owner",
            "_module_owner", "_child_index", "_SPAN_KEYS"} <= names
    assert not any(n.startswith("__") for n in names)


def test_no_trace_private_access_above_the_data_layer():
    private = trace_private_names() - {"_core"}
    bad = []
    for mod in PUBLIC_API_ONLY:
        path = os.path.join(PKG, mod + ".py")
        tree = _parse(path)
        forbidden = private - _own_private_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in forbidden:
                bad.append("%s: .%s is private to xsp.trace (a Trace's or Span's); use the "
                           "public API" % (_where(mod, node.lineno), node.attr))
    assert bad == [], "\n".join(sorted(bad))


def _zoo_imports(path):
    """[(kind, name, line)] of what an xsp/zoo/*.py imports from xsp: ("zoo", sibling) for its
    own package's modules, ("xsp", module) for the package's ("__init__" for xsp itself)."""
    out = []
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "xsp":
                    if parts[1:2] == ["zoo"]:
                        out.append(("zoo", parts[2] if len(parts) > 2 else "__init__",
                                    node.lineno))
                    else:
                        out.append(("xsp", parts[1] if len(parts) > 1 else "__init__",
                                    node.lineno))
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level == 1 or (node.level == 0 and mod.startswith("xsp.zoo")):
                sub = mod if node.level == 1 else mod[len("xsp.zoo"):].lstrip(".")
                names = [sub.split(".")[0]] if sub else [a.name for a in node.names]
                out.extend(("zoo", n, node.lineno) for n in names)
            elif node.level == 2 or (node.level == 0 and (mod == "xsp" or
                                                          mod.startswith("xsp."))):
                sub = mod if node.level == 2 else mod[len("xsp"):].lstrip(".")
                names = [sub.split(".")[0]] if sub else [
                    a.name if a.name in _modules() else "__init__" for a in node.names]
                out.extend(("xsp", n, node.lineno) for n in names)
            else:
                assert node.level == 0, "%s:%d: import from outside the package" % (
                    path, node.lineno)
    return out


def test_the_zoo_sits_on_top():
    """xsp/zoo imports xsp's modules of every layer below the entry points (and xsp itself),
    never the other entry points; nothing in xsp imports it but the CLI, so `import xsp`
    stays as light as it was."""
    paths = sorted(glob.glob(os.path.join(PKG, "zoo", "*.py")))
    assert paths, "xsp/zoo has no modules"
    bad = []
    for path in paths:
        for kind, name, line in _zoo_imports(path):
            if kind == "zoo":
                if not os.path.exists(os.path.join(PKG, "zoo", name + ".py")):
                    bad.append("%s:%d: xsp.zoo has no module %s" % (path, line, name))
            elif name not in LAYERS or (LAYERS[name] >= 7 and name != "__init__"):
                bad.append("%s:%d: imports xsp.%s" % (path, line, name))
    assert bad == [], "\n".join(bad)
    users = sorted(m for m, edges in graph().items() if any(d == "zoo" for d, _ in edges))
    assert users == ["cli"]


# the zoo's readers of the results, over the store only: a report needs no model code, no
# worker and no torch (test_zoo_report checks the torch part on a real import)
ZOO_READERS = {"analyses": {"store"}, "report": {"analyses", "store"}}


def test_the_zoo_reports_read_the_store_only():
    bad = []
    for mod, allowed in sorted(ZOO_READERS.items()):
        path = os.path.join(PKG, "zoo", mod + ".py")
        for kind, name, line in _zoo_imports(path):
            if kind == "zoo" and name not in allowed:
                bad.append("%s:%d: xsp.zoo.%s imports xsp.zoo.%s; it reads the results through "
                           "%s only" % (path, line, mod, name, ", ".join(sorted(allowed))))
    assert bad == [], "\n".join(bad)
