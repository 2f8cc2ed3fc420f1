"""Source lines of model and module spans: attribute "source" (file:line of the forward of the
module's class) and "call_site" (file:line of the call), from the call sites both module
wrappers look up (xsp._core.ModuleSites, csrc/python/modsites.c) and the session turns into
strings at stop; and how the tree, to_pandas, the exports and the HTML report show them."""
import functools
import importlib.util
import inspect
import json
import os
import threading

import pytest
import torch
from torch import nn

import xsp
from xsp import _core
from xsp.report import parts as _html


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.fc(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.b1 = Block()
        self.b2 = Block()

    def forward(self, x):
        x = self.b1(x)
        x = self.b2(x)
        x = self.b1(x)
        return x


def place(fn):
    """Where the source attribute of a module whose forward is fn points: co_filename and the
    first line, as inspect finds it."""
    fn = inspect.unwrap(fn)
    return "%s:%d" % (fn.__code__.co_filename, inspect.getsourcelines(fn)[1])


def line_of(fn, text, nth=0):
    """file:line of the nth line of fn's source that contains text."""
    lines, first = inspect.getsourcelines(fn)
    hits = [first + k for k, ln in enumerate(lines) if text in ln]
    return "%s:%d" % (fn.__code__.co_filename, hits[nth])


def here():
    """file:line of the caller's current line."""
    f = inspect.currentframe().f_back
    return "%s:%d" % (f.f_code.co_filename, f.f_lineno)


def where(span):
    return span.attrs.get("source"), span.attrs.get("call_site")


def spans_of(trace):
    return trace.spans(kind="model") + trace.spans(kind="module")


# the wrapper's two paths: plain, and with record_shapes (its enter/leave helpers around calls)
PATHS = [pytest.param(False, id="plain"), pytest.param(True, id="record_shapes")]


@pytest.mark.parametrize("shapes", PATHS)
def test_nested_modules_and_a_module_called_from_two_sites(shapes):
    net, x = Net(), torch.ones(1, 3)
    with xsp.profile(levels="ML", record_shapes=shapes) as prof:
        net(x); call = here()  # noqa: E702 -- the same line as the call
    tr = prof.trace
    model, = tr.spans(kind="model")
    assert where(model) == (place(Net.forward), call)
    mods = [(s.name, where(s)) for s in tr.spans(kind="module")]
    blk, lin, relu = place(Block.forward), place(nn.Linear.forward), place(nn.ReLU.forward)
    fc = act = line_of(Block.forward, "self.act(self.fc(x))")   # one line, two calls
    assert mods == [
        ("b1", (blk, line_of(Net.forward, "self.b1(x)", 0))),
        ("b1.fc", (lin, fc)), ("b1.act", (relu, act)),
        ("b2", (blk, line_of(Net.forward, "self.b2(x)"))),
        ("b2.fc", (lin, fc)), ("b2.act", (relu, act)),
        ("b1", (blk, line_of(Net.forward, "self.b1(x)", 1))),
        ("b1.fc", (lin, fc)), ("b1.act", (relu, act)),
    ]
    # the first and the third call of b1 come from two lines of Net.forward
    assert mods[0][1][1] != mods[6][1][1]
    # the attributes follow type; no span keeps the recording-time "site"
    assert list(model.attrs)[:3] == ["type", "source", "call_site"]
    assert all("site" not in s.attrs for s in tr)
    if shapes:
        assert model.attrs["shapes"] == "[1, 3]"


@pytest.mark.parametrize("shapes", PATHS)
def test_sites_are_found_once_and_reused(shapes):
    """Steady state: the table grows only with new sites, so calls from a loop share one."""
    net, x = Net(), torch.ones(1, 3)
    with xsp.profile(levels="ML", record_shapes=shapes) as prof:
        for _ in range(5):
            net(x)
    sites = prof._modules.sites
    # the model call, b1 twice and b2 in Net.forward, fc and act in Block.forward
    assert len(sites) == 6
    tr = prof.trace
    assert len({where(s) for s in tr.spans(kind="model")}) == 1
    assert {sites.site(i) for i in range(len(sites))} == {where(s) for s in spans_of(tr)}


def test_level_m_records_the_model_call_only():
    net, x = Net(), torch.ones(1, 3)
    with xsp.profile(levels="M") as prof:
        net(x); call = here()  # noqa: E702
    model, = prof.trace.spans(kind="model")
    assert where(model) == (place(Net.forward), call)
    assert len(prof._modules.sites) == 1     # nested calls without a span look nothing up


def test_level_l_top_level_calls_are_modules_with_sites():
    net, x = Net(), torch.ones(1, 3)
    with xsp.profile(levels="L") as prof:
        net(x); call = here()  # noqa: E702
    top = prof.trace.spans(kind="module")[0]
    assert (top.name, where(top)) == ("Net", (place(Net.forward), call))


def test_threads_each_get_their_own_call_sites():
    net, x = Net(), torch.ones(1, 3)
    calls = {}

    def work(tag):
        net(x); calls[tag] = here()  # noqa: E702

    with xsp.profile(levels="ML") as prof:
        ts = [threading.Thread(target=work, args=(k,), name="w%d" % k) for k in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        net(x); calls["main"] = here()  # noqa: E702
    tr = prof.trace
    models = tr.spans(kind="model")
    assert len(models) == 3
    by_thread = {m.thread_name: m.attrs["call_site"] for m in models}
    assert by_thread == {"w0": calls[0], "w1": calls[1], "MainThread": calls["main"]}
    assert calls[0] == calls[1]         # one site: the same line, the same class
    for m in tr.spans(kind="module"):
        assert m.attrs["source"] in (place(Block.forward), place(nn.Linear.forward),
                                     place(nn.ReLU.forward))


SNIPPET = '''
import torch.nn as nn

class Cell(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        return self.lin(x)

def run(cell, x):
    return cell(x)
'''


@pytest.mark.parametrize("shapes", PATHS)
def test_a_class_from_a_notebook_like_string(shapes):
    ns = {}
    exec(compile(SNIPPET, "<string>", "exec"), ns)
    lines = SNIPPET.splitlines()
    fwd = 1 + next(k for k, ln in enumerate(lines) if "def forward" in ln)
    lin = 1 + next(k for k, ln in enumerate(lines) if "self.lin(x)" in ln)
    run = 1 + next(k for k, ln in enumerate(lines) if "cell(x)" in ln and "return" in ln)
    with xsp.profile(levels="ML", record_shapes=shapes) as prof:
        ns["run"](ns["Cell"](), torch.ones(1, 2))
    model, = prof.trace.spans(kind="model")
    sub, = prof.trace.spans(kind="module")
    assert where(model) == ("<string>:%d" % fwd, "<string>:%d" % run)
    assert where(sub) == (place(nn.Linear.forward), "<string>:%d" % lin)
    assert "@ <string>:%d from <string>:%d" % (fwd, run) in prof.trace.tree(source=True)


def scaled(fn):
    @functools.wraps(fn)
    def wrapper(self, x):
        return fn(self, x) * 2
    return wrapper


class Decorated(nn.Module):
    @scaled
    def forward(self, x):
        return x + 1


class Inherits(Decorated):
    pass


class NoPython(nn.Module):
    forward = functools.partial(torch.mul, other=3)    # not a Python function


def test_decorated_inherited_and_non_python_forwards():
    x = torch.ones(2)
    with xsp.profile(levels="L") as prof:
        Decorated()(x); c1 = here()  # noqa: E702
        Inherits()(x); c2 = here()  # noqa: E702
        NoPython()(x); c3 = here()  # noqa: E702
    d, i, n = prof.trace.spans(kind="module")
    # functools.wraps' __wrapped__ leads to the function written in the class
    assert where(d) == (place(Decorated.forward), c1)
    wrapper = Decorated.forward.__code__           # scaled's inner function, not shown
    assert d.attrs["source"] != "%s:%d" % (wrapper.co_filename, wrapper.co_firstlineno)
    assert where(i) == (place(Decorated.forward), c2)
    assert where(n) == (None, c3)       # no forward to point at: the call site alone
    assert list(n.attrs) == ["type", "call_site"]


def test_schedule_cycles_share_the_table():
    net, x = Net(), torch.ones(1, 3)
    with xsp.profile(levels="ML", schedule=xsp.schedule(active=1, repeat=2)) as prof:
        for _ in range(2):
            net(x); call = here()  # noqa: E702
            prof.step()
    t0, t1 = prof.traces
    for tr in (t0, t1):
        model, = tr.spans(kind="model")
        assert where(model) == (place(Net.forward), call)
        assert [where(s) for s in tr.spans(kind="module")] == \
            [where(s) for s in t0.spans(kind="module")]
    assert len(prof._modules.sites) == 6


def test_module_sites_table_directly():
    sites = _core.ModuleSites()
    m = nn.ReLU()

    def call_here():
        return sites.here(m)            # the site of a call made by call_here's caller

    i = call_here(); c = here()  # noqa: E702
    assert (i, len(sites)) == (0, 1)
    assert sites.site(0) == (place(nn.ReLU.forward), c)
    assert call_here() == 1             # another line: another site
    assert sites.site(1)[1] != c
    with pytest.raises(IndexError, match="site 2 out of range"):
        sites.site(2)
    with pytest.raises(TypeError):
        _core.ModuleSites(1)
    with pytest.raises(TypeError, match="sites must be a ModuleSites"):
        _core.ModuleCall(print, print, print, print, True, object())


def test_exports_and_views_carry_them(tmp_path):
    net, x = Net(), torch.ones(1, 3)
    with xsp.profile(levels="ML") as prof:
        net(x); call = here()  # noqa: E702
    tr = prof.trace
    expect = {s.id: where(s) for s in spans_of(tr)}
    # to_pandas: text columns, missing on the other spans
    df = tr.to_pandas()
    got = {int(r.id): (r.source, r.call_site) for r in df.itertuples()
           if r.kind in ("model", "module")}
    assert got == expect
    assert df[~df["kind"].isin(["model", "module"])]["source"].isna().all()
    # Kineto's JSON: args on the python_function events
    xsp.save(tr, str(tmp_path / "k.json"), format="kineto")
    events = json.load(open(tmp_path / "k.json"))["traceEvents"]
    py = {e["args"]["xsp.id"]: (e["args"]["xsp.source"], e["args"]["xsp.call_site"])
          for e in events if e.get("cat") == "python_function"}
    assert py == expect
    # Chrome JSON: args
    xsp.formats.chrome.write(tr, str(tmp_path / "c.json"))
    events = json.load(open(tmp_path / "c.json"))["traceEvents"]
    ch = {e["args"]["id"]: (e["args"]["source"], e["args"]["call_site"])
          for e in events if e.get("ph") == "X" and "source" in e["args"]}
    assert ch == expect
    # the .xsp file keeps them
    assert xsp.Trace.from_bytes(tr.to_bytes()).attrs_of(tr.spans(kind="model")[0].id) \
        == tr.spans(kind="model")[0].attrs
    # the tree: a compact suffix when asked, nothing by default
    text = tr.tree(source=True)
    fwd = place(Net.forward).rsplit("/", 1)[1]
    assert "Net [model] " in text and " @ %s from %s" % (fwd, call.rsplit("/", 1)[1]) in text
    lin = place(nn.Linear.forward).rsplit("/", 1)[1]
    assert " @ %s from test_source_lines.py:" % lin in text
    assert " @ " not in tr.tree()
    # the HTML tree and timeline: in the tooltips
    html = _html.tree_html(tr, min_share=0)
    assert "forward at %s" % place(Net.forward) in html
    assert "called at %s" % call in html
    svg = _html.timeline_svg(tr, tr.start_ns.min(), tr.end_ns.max())
    assert "forward at %s" % place(Net.forward) in svg


# -- with_stack: Python function calls as spans of kind "python" (csrc/python/pystack.c) -------

def inner(a):
    return torch.add(a, a)


def outer(a):
    return inner(a) * 2


XSP_DIR = os.path.dirname(os.path.abspath(xsp.__file__)) + os.sep


def xsp_frames(spans):
    """The names of the python spans of xsp's own code: those whose file lies in xsp's package
    directory (the prefix pystack.c skips).  Not every path with a folder named xsp in it: a
    checkout cloned as .../xsp/ holds these tests, and a user's project may be called xsp."""
    return [s.name for s in spans if s.name.startswith(XSP_DIR)]


def frame_name(fn):
    """The name of fn's python spans, as torch.profiler names its python_function events."""
    code = fn.__code__
    return "%s(%d): %s" % (code.co_filename, code.co_firstlineno, code.co_name)


def op(trace, name):
    found = trace.spans(kind="op", name=name)
    assert len(found) == 1, name
    return found[0]


def test_with_stack_gives_each_op_its_python_stack():
    x = torch.ones(2)
    with xsp.profile(levels="ML", with_stack=True) as prof:
        outer(x)
    tr = prof.trace
    assert tr.stack_of(op(tr, "aten::add")) == [frame_name(inner), frame_name(outer)]
    assert tr.stack_of(op(tr, "aten::mul").id) == [frame_name(outer)]
    py = tr.spans(kind="python")
    assert [(s.name, s.level, s.parent_span.kind) for s in py] == [
        (frame_name(outer), "L", "region"), (frame_name(inner), "L", "python")]
    assert tr.stack_of(py[1]) == [frame_name(outer)]
    # xsp's own code is not recorded, nothing is left open or unmatched
    assert xsp_frames(py) == []
    assert tr.counters["unmatched_end"] == tr.counters["open_at_stop"] == 0
    # and the profile function is gone
    import sys
    assert sys.getprofile() is None and threading._profile_hook is None
    with pytest.raises(IndexError):
        tr.stack_of(len(tr))


def test_with_stack_nests_modules_and_their_forwards():
    net, x = Net(), torch.ones(1, 3)
    with xsp.profile(levels="ML", with_stack=True) as prof:
        net(x)
    tr = prof.trace
    linear = tr.spans(kind="op", name="aten::linear")[0]
    stack = tr.stack_of(linear)
    fwd = [s for s in stack if s.endswith(": forward")]
    assert fwd == [frame_name(nn.Linear.forward), frame_name(Block.forward),
                   frame_name(Net.forward)]
    # torch's own call machinery lies between a module span and its forward
    assert [s.rsplit(": ", 1)[1] for s in stack[:3]] == ["forward", "_call_impl",
                                                         "_wrapped_call_impl"]
    mod = linear.parent_span
    while mod.kind != "module":
        mod = mod.parent_span
    assert mod.name == "b1.fc"
    # xsp's own bookkeeping (the first call maps the model's names) is not recorded
    assert not any(s.name.endswith((": named_modules", ": current_thread"))
                   for s in tr.spans(kind="python"))
    # the module column still names the module; module spans keep their source lines
    df = tr.to_pandas()
    assert df.loc[linear.id, "module"] == "b1.fc"
    assert where(mod) == (place(nn.Linear.forward), line_of(Block.forward, "self.fc(x)"))


def test_with_stack_on_a_thread_started_inside():
    x = torch.ones(2)

    def work():
        inner(x)

    with xsp.profile(levels="ML", with_stack=True) as prof:
        t = threading.Thread(target=work, name="worker")
        t.start()
        t.join()
    tr = prof.trace
    add = op(tr, "aten::add")
    assert add.thread == t.native_id != threading.get_native_id()
    stack = tr.stack_of(add)
    assert stack[:2] == [frame_name(inner), frame_name(work)]
    assert stack[2].endswith(": run") and "threading.py" in stack[2]
    assert threading._profile_hook is None


def test_with_stack_records_exceptions_and_generators():
    def boom(a):
        torch.neg(a)
        raise ValueError("x")

    def gen(a):
        yield torch.abs(a)
        yield torch.sin(a)

    x = torch.ones(2)
    with xsp.profile(levels="ML", with_stack=True) as prof:
        with pytest.raises(ValueError):
            boom(x)
        list(gen(x))
    tr = prof.trace
    assert tr.stack_of(op(tr, "aten::neg"))[0] == frame_name(boom)
    b, = [s for s in tr.spans(kind="python") if s.name == frame_name(boom)]
    assert b.flags == 0                              # ended by the exception's return
    # a generator is one span per resumption
    assert [s.name for s in tr.spans(kind="python")].count(frame_name(gen)) == 3
    assert tr.stack_of(op(tr, "aten::sin")) == [frame_name(gen)]
    assert tr.counters["unmatched_end"] == 0


def test_with_stack_refuses_to_replace_another_profiler():
    import sys
    calls = []
    sys.setprofile(lambda *a: calls.append(a[1]))
    try:
        prof = xsp.profile(levels="ML", with_stack=True)
        with pytest.raises(xsp.SourceError, match="a profile function is already installed"):
            prof.start()
        assert sys.getprofile() is not None         # the other profiler is untouched
    finally:
        sys.setprofile(None)
    assert calls                                     # it ran meanwhile
    assert type(nn.Module.__dict__["__call__"]) is not _core.ModuleCall   # nothing left
    with pytest.raises(ValueError, match="with_stack records Python function calls at level L"):
        xsp.profile(levels="M", with_stack=True)


def test_with_stack_exports(tmp_path):
    x = torch.ones(2)
    with xsp.profile(levels="ML", with_stack=True) as prof:
        outer(x)
    tr = prof.trace
    xsp.save(tr, str(tmp_path / "k.json"), format="kineto")
    events = json.load(open(tmp_path / "k.json"))["traceEvents"]
    py = [e for e in events if e.get("cat") == "python_function"]
    assert [e["name"] for e in py] == [frame_name(outer), frame_name(inner)]
    assert py[1]["args"]["Python parent id"] == py[0]["args"]["Python id"]
    assert py[0]["args"]["Python parent id"] is None
    # read back: the frames are python spans again, the op under them
    back = xsp.load(str(tmp_path / "k.json"), format="kineto")
    assert [s.name for s in back.spans(kind="python")] == [frame_name(outer), frame_name(inner)]
    assert back.stack_of(back.spans(kind="op", name="aten::add")[0]) == [frame_name(inner),
                                                                          frame_name(outer)]
    # the .xsp file keeps the kind
    assert xsp.Trace.from_bytes(tr.to_bytes()).spans(kind="python")[0].name == frame_name(outer)


def test_with_stack_and_scopes_that_cross_python_frames():
    """A record_function scope begins in its __enter__'s frame and ends in its __exit__'s:
    the python spans and the scope cross; each ends alone (csrc/core/replay.c), nothing is
    forced or unmatched, and what runs in the with block nests under the scope."""
    x = torch.ones(2)
    net = nn.Linear(2, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with xsp.profile(levels="ML", with_stack=True) as prof:
        with torch.profiler.record_function("mine"):
            inner(x)
        net(x).sum().backward()
        opt.step()                  # the optimizer's own record_function scope
    tr = prof.trace
    assert tr.counters["forced_end"] == tr.counters["unmatched_end"] == 0
    assert all(s.flags == 0 for s in tr)
    mine, = tr.spans(kind="scope", name="mine")
    add = op(tr, "aten::add")
    assert mine in add.ancestors() and mine.parent_span.kind == "region"
    assert tr.stack_of(add) == [frame_name(inner)]
    enter = [s for s in tr.spans(kind="python") if s.name.endswith(": __enter__")]
    assert mine.parent in {s.parent for s in enter}   # the scope's sibling, as it crossed
    step, = [s for s in tr.spans(kind="scope") if s.name.startswith("Optimizer.step#SGD")]
    assert [s.name for s in tr.spans(kind="python") if step in s.ancestors()
            and s.name.endswith(": step")] == [frame_name(inspect.unwrap(torch.optim.SGD.step))]
    # a crossing span ends where the span it crossed begins: siblings never overlap, so no
    # self time is negative and every child lies inside its parent
    assert (tr.self_ns >= 0).all()
    for sp in tr:
        kids = [tr[int(c)] for c in tr.children_of(sp.id)]
        assert all(sp.start_ns <= k.start_ns and k.end_ns <= sp.end_ns for k in kids)
        assert all(a.end_ns <= b.start_ns for a, b in zip(kids, kids[1:]))


def test_with_stack_records_user_code_that_xsp_calls():
    """xsp's own frames are left out, not what they run for the user: the forwards called
    through the module wrapper with record_shapes (its Python helpers run around each call),
    and fn under xsp.measure.
    Regression: every call below an xsp frame was skipped, so `xsp run --with-stack` and
    measure(with_stack=True) recorded no Python span of the user's at all."""
    net, x = Net(), torch.ones(1, 3)
    with xsp.profile(levels="ML", with_stack=True, record_shapes=True) as prof:
        net(x)
    tr = prof.trace
    stack = tr.stack_of(tr.spans(kind="op", name="aten::linear")[0])
    assert [s for s in stack if s.endswith(": forward")] == [
        frame_name(nn.Linear.forward), frame_name(Block.forward), frame_name(Net.forward)]
    assert xsp_frames(tr.spans(kind="python")) == []



def test_with_stack_records_user_code_in_a_folder_named_xsp(tmp_path):
    """Regression: the tests once took any frame whose path had "/xsp/" in it for xsp's own,
    and failed in a checkout cloned as .../xsp/.  Code of the user's in a folder named xsp is
    recorded, and the check (xsp's package directory) still finds no frame of xsp's."""
    (tmp_path / "xsp").mkdir()
    path = tmp_path / "xsp" / "user_code.py"
    path.write_text("import torch\n"
                    "def work(x):\n"
                    "    return torch.add(x, x)\n")
    spec = importlib.util.spec_from_file_location("user_code_in_xsp", str(path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with xsp.profile(levels="ML", with_stack=True) as prof:
        mod.work(torch.ones(2))
    tr = prof.trace
    py = tr.spans(kind="python")
    assert tr.stack_of(op(tr, "aten::add")) == ["%s(2): work" % path]
    assert any("/xsp/" in s.name for s in py)       # what the old check took for xsp's
    assert xsp_frames(py) == []


def test_with_stack_under_xsp_run_records_the_script(tmp_path):
    """xsp run --with-stack: the script's own functions are spans (xsp's runner is left out,
    not what it runs), also for a script in a folder named xsp (see the test above)."""
    import subprocess
    import sys
    (tmp_path / "xsp").mkdir()
    script = tmp_path / "xsp" / "s.py"
    script.write_text("import torch\n"
                      "def work(x):\n"
                      "    return x * 2\n"
                      "work(torch.ones(2))\n")
    out = tmp_path / "s.xsp"
    r = subprocess.run([sys.executable, "-m", "xsp", "run", "-q", "--with-stack", "-o",
                        str(out), str(script)], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    tr = xsp.load(str(out))
    mul = tr.spans(kind="op", name="aten::mul")
    assert len(mul) == 1
    assert tr.stack_of(mul[0])[:2] == ["%s(2): work" % script, "%s(1): <module>" % script]
    assert any("/xsp/" in s.name for s in tr.spans(kind="python"))
    assert xsp_frames(tr.spans(kind="python")) == []
