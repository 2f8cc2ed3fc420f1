"""The layering of the Python package (docs/design.md, "Python layers"), checked on the source.

The package's folders are its layers, bottom to top (LAYERS): core (the small modules over the C
extensions, which sit beside them), values, formats, then producers and analysis side by side
(neither imports the other), report, and on top perf, the pytest plugin and the entry points
(cli, demo, the zoo, the package itself).  Every xsp/**/*.py is parsed with ast; its imports of
xsp modules (absolute, relative, from-package, inside functions, importlib.import_module with a
constant name) are the edges of the import graph.  The graph must have no cycle, and every edge
must go down the layers or stay in its folder (or be one of ENTRY_POINT_EDGES).  The one
exception: a function that warns of a deprecated spelling (calls deprecated()) or is a value's
view drawn by the reports (_repr_html_, Trace.tree) may import upward, to hand the call on.  Outside
the values, no module may read a private member of a Trace or Span.
"""
import ast
import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.join(ROOT, "xsp")

# the units (a folder, or a module at the top) and their layers
LAYERS = {
    "_core": -1, "_torch": -1, "_bench": -1, "_version": -1,     # the C extensions, the version
    "core": 0, "models": 0,
    "values": 1,
    "formats": 2,
    "producers": 3, "analysis": 3,
    "report": 4,
    "perf": 5, "pytest_plugin": 6,
    "cli": 7, "demo": 7, "__main__": 7, "__init__": 7, "zoo": 7,
}
# units of one layer that must not import each other
APART = {("producers", "analysis"), ("analysis", "producers")}
# the entry points use the package, the CLI hands `xsp zoo` to the zoo's
ENTRY_POINT_EDGES = {("cli", "__init__"), ("demo", "__init__"), ("__main__", "cli"),
                     ("cli", "zoo"), ("zoo", "__init__")}
# the modules that must not touch a Trace's or Span's private members (the values may; the
# formats' kineto writer and the producers' profiler build and write the C trace directly)
PUBLIC_API_ONLY = ("analysis.tables", "analysis.flops", "analysis.memory", "analysis.compare",
                   "analysis.compiled", "formats.chrome", "formats.otlp", "report.summary",
                   "report.page", "report.parts", "report.ranks", "report.tree",
                   "report.__init__", "producers.leveled", "values.measurement", "cli", "demo",
                   "perf")
# functions that may import upward: they hand a deprecated spelling to its new home, or are a
# value's views drawn by the reports (a notebook's _repr_html_, Trace.tree's text)
UPWARD_OK_NAMES = ("_repr_html_", "tree")


def _sources():
    """{dotted module name under xsp ("values.trace", "cli", "zoo.runner"): path}."""
    out = {}
    for path in sorted(glob.glob(os.path.join(PKG, "**", "*.py"), recursive=True)):
        rel = os.path.relpath(path, PKG)[:-3].split(os.sep)
        if rel[-1] == "__init__" and len(rel) > 1:
            rel = rel[:-1] + ["__init__"]
        out[".".join(rel)] = path
    return out


def _modules():
    return set(_sources()) | {"_core", "_torch", "_bench"}


def unit(mod):
    """The layer unit of a module: its folder, or itself at the top."""
    return mod.split(".")[0]


def _parse(path):
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), filename=path)


def _resolve(dotted, modules):
    """The module that importing xsp.<dotted> loads: the longest prefix that is a module, a
    package standing for its __init__."""
    parts = dotted.split(".") if dotted else []
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in modules:
            return name
        if name + ".__init__" in modules:
            return name + ".__init__"
    return "__init__"


def _package_of(mod):
    parts = mod.split(".")
    return parts[:-1]


def _exempt_lines(tree):
    """The lines of the functions that may import upward (see the module's docstring)."""
    lines = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        calls = {getattr(c.func, "id", getattr(c.func, "attr", None))
                 for c in ast.walk(fn) if isinstance(c, ast.Call)}
        if "deprecated" in calls or fn.name in UPWARD_OK_NAMES:
            lines.update(range(fn.lineno, fn.end_lineno + 1))
    return lines


def imports(mod, path, modules, exempt=False):
    """[(imported module, line)] of the xsp modules module mod imports; with exempt, also those
    in the functions of _exempt_lines (left out otherwise)."""
    out = []
    tree = _parse(path)
    skip = set() if exempt else _exempt_lines(tree)
    pkg = _package_of(mod)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "xsp":
                    out.append((_resolve(".".join(parts[1:]), modules), node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[:len(pkg) - (node.level - 1)] if node.level > 1 else pkg
                dotted = ".".join(base + ([node.module] if node.module else []))
            elif node.module == "xsp" or (node.module or "").startswith("xsp."):
                dotted = node.module[len("xsp"):].lstrip(".")
            else:
                continue
            for a in node.names:        # from P import m: the module P.m when there is one
                sub = (dotted + "." + a.name) if dotted else a.name
                target = _resolve(sub, modules)
                out.append((target if target != "__init__" or not dotted
                            else _resolve(dotted, modules), node.lineno))
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"):
            name = node.args[0].value
            if name.split(".")[0] == "xsp":
                out.append((_resolve(name[len("xsp"):].lstrip("."), modules), node.lineno))
    return [(m, line) for m, line in out if m != mod and line not in skip]


def graph(exempt=False):
    """{module: [(imported module, line)]} over every xsp/**/*.py."""
    modules = _modules()
    return {mod: imports(mod, path, modules, exempt) for mod, path in _sources().items()}


def _where(mod, line):
    return "%s:%d" % (os.path.relpath(_sources().get(mod, mod), ROOT), line)


def test_every_module_has_a_layer():
    assert sorted({unit(m) for m in _sources()} - set(LAYERS)) == [], \
        "put the new folder or module in LAYERS of tests/py/test_layering.py"


def test_the_folders_are_the_layers():
    """No module of the package lives at the top but the C extensions, the entry points and
    the few the layers name: a new module goes in its layer's folder."""
    top = sorted(m for m in _sources() if "." not in m)
    assert top == ["__init__", "__main__", "_version", "cli", "demo", "models", "perf",
                   "pytest_plugin"]


def test_the_graph_is_read():
    """The collector sees the imports it is meant to see (so the checks below are not
    vacuous): absolute, relative, from-package and inside-function imports, and the exempt
    ones only when asked."""
    g = graph()
    names = {m: {dst for dst, _ in edges} for m, edges in g.items()}
    assert {"analysis.tables", "core.util"} <= names["report.summary"]
    assert {"producers.profiler", "values.measurement", "core.levels", "core.errors"} <= \
        names["producers.leveled"]
    assert {"__init__", "formats.__init__", "report.__init__", "core.fmt"} <= names["cli"]
    assert {"__init__", "models"} <= names["demo"]
    assert names["values.trace"] <= {"_core", "core.util", "core.fmt", "core.levels", "core.tree"}
    assert names["report.parts"] == {"values.trace", "core.util", "core.fmt"}
    assert names["core.iterations"] == {"core.tree"}
    assert "core.iterations" in names["analysis.tables"]
    assert "zoo.store" in names["zoo.runner"]                     # relative, in a folder
    exempt = {m: {dst for dst, _ in edges} for m, edges in graph(exempt=True).items()}
    assert "formats.kineto" in exempt["values.trace"] - names["values.trace"]
    assert "report.__init__" in exempt["values.measurement"] - names["values.measurement"]


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
            a, b = unit(m), unit(dst)
            if a not in LAYERS or b not in LAYERS:
                continue                        # test_every_module_has_a_layer says so
            if a == b or (a, b) in ENTRY_POINT_EDGES:
                continue
            if LAYERS[b] < LAYERS[a]:
                continue
            why = "are side by side and apart" if (a, b) in APART else \
                "imports only from the layers below its own"
            bad.append("%s: %s (%s, L%d) imports %s (%s, L%d); %s" % (
                _where(m, line), m, a, LAYERS[a], dst, b, LAYERS[b], why))
    assert bad == [], "\n".join(bad)


def test_deprecated_spellings_warn():
    """Every function that imports upward says it is deprecated, or is a notebook's view:
    the exemption covers nothing else (checked from the other side)."""
    bad = []
    for mod, path in sorted(_sources().items()):
        tree = _parse(path)
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and fn.name not in UPWARD_OK_NAMES:
                calls = {getattr(c.func, "id", getattr(c.func, "attr", None))
                         for c in ast.walk(fn) if isinstance(c, ast.Call)}
                doc = ast.get_docstring(fn) or ""
                if "deprecated" in calls and not doc.startswith("Deprecated"):
                    bad.append("%s: %s warns but its docstring does not open 'Deprecated'"
                               % (_where(mod, fn.lineno), fn.name))
    assert bad == [], "\n".join(bad)


def trace_private_names():
    """The private attribute names trace.py gives Trace and Span: self._x assignments, _x
    methods and class attributes, and _x slots (dunder names are not private)."""
    names = set()

    def private(n):
        return n.startswith("_") and not n.startswith("__")

    for cls in ast.walk(_parse(os.path.join(PKG, "values", "trace.py"))):
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
        path = _sources()[mod]
        tree = _parse(path)
        forbidden = private - _own_private_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in forbidden:
                bad.append("%s: .%s is private to xsp.values.trace (a Trace's or Span's); use the "
                           "public API" % (_where(mod, node.lineno), node.attr))
    assert bad == [], "\n".join(sorted(bad))


def test_the_zoo_sits_on_top():
    """xsp/zoo imports xsp's modules of every layer below the entry points (and xsp itself),
    never the other entry points; nothing in xsp imports it but the CLI, so `import xsp`
    stays as light as it was."""
    g = graph()
    bad = ["%s: imports %s" % (_where(m, line), dst) for m, edges in sorted(g.items())
           if unit(m) == "zoo" for dst, line in edges
           if unit(dst) != "zoo" and LAYERS.get(unit(dst), 99) >= 7 and dst != "__init__"]
    assert bad == [], "\n".join(bad)
    users = sorted(m for m, edges in g.items() if unit(m) != "zoo"
                   and any(unit(d) == "zoo" for d, _ in edges))
    assert users == ["cli"]


# the zoo's readers of the results, over the store only: a report needs no model code, no
# worker and no torch (test_zoo_report checks the torch part on a real import)
ZOO_READERS = {"analyses": {"store"}, "report": {"analyses", "store"}}


def test_the_zoo_reports_read_the_store_only():
    g = graph()
    bad = []
    for mod, allowed in sorted(ZOO_READERS.items()):
        for dst, line in g["zoo." + mod]:
            if unit(dst) == "zoo" and dst.split(".")[1] not in allowed:
                bad.append("%s: xsp.zoo.%s imports %s; it reads the results through %s only"
                           % (_where("zoo." + mod, line), mod, dst, ", ".join(sorted(allowed))))
    assert bad == [], "\n".join(bad)


def test_every_package_folder_is_installed():
    """A non-editable install ships the packages pyproject.toml lists: every folder of xsp/
    must be one (a new layer folder left out installs an xsp that cannot import itself)."""
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    folders = {"xsp"} | {"xsp." + d for d in os.listdir(PKG)
                         if os.path.isfile(os.path.join(PKG, d, "__init__.py"))}
    assert listed == folders


def test_the_tests_are_laid_out_as_the_package():
    """tests/py has a folder per unit of the package (a layer's folder, or the perf and CLI
    entry points), each test file in the folder of what it tests; only the package-wide checks
    and the shared helpers sit at its top."""
    tests = os.path.join(ROOT, "tests", "py")
    folders = sorted(d for d in os.listdir(tests) if os.path.isdir(os.path.join(tests, d))
                     and not d.startswith((".", "__")))
    assert folders == ["analysis", "cli", "core", "formats", "perf", "producers", "report",
                       "values", "zoo"]
    assert all(unit(d) in LAYERS for d in folders)
    top = sorted(f for f in os.listdir(tests) if f.endswith(".py"))
    assert top == ["conftest.py", "helpers.py", "helpers_flops.py", "models.py",
                   "test_api_rule.py", "test_layering.py"]


def test_tests_import_no_test_module_of_another_folder():
    """A test imports another folder's test module through helpers.sibling only: a plain
    `from test_x import ...` finds it only when pytest collected that folder first, so the file
    fails when run alone."""
    tests = os.path.join(ROOT, "tests", "py")
    where = {}
    for path in glob.glob(os.path.join(tests, "*", "test_*.py")):
        where[os.path.basename(path)[:-3]] = os.path.dirname(path)
    bad = []
    for name, folder in sorted(where.items()):
        for node in ast.walk(_parse(os.path.join(folder, name + ".py"))):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            for m in mods:
                if m in where and where[m] != folder:
                    bad.append("%s:%d imports %s of %s" % (
                        os.path.relpath(os.path.join(folder, name), tests), node.lineno, m,
                        os.path.relpath(where[m], tests)))
    assert bad == [], "\n".join(bad)
