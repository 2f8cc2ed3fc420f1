"""torch.compile in a trace (xsp/producers/dynamo.py): compilations, recompiles and graph breaks as
spans with their reasons, kept out of measure's latencies; the source modules of the ops and
kernels compiled code runs; Dynamo's counters the same with xsp as without.

Compiling is slow, so the compiled models are shared: one module-scoped run per backend
(eager, aot_eager), and Inductor's C++ backend in one subprocess of its own (two compiles,
about 30 s; its imports would weigh on the timing of the tests after it)."""
import json
import os
import subprocess
import sys

import pytest
import torch
import torch._dynamo.utils as du
from torch import nn

import xsp
from xsp import _core
from xsp.analysis import compiled
from xsp.producers import dynamo
from xsp.values.trace import KINDS

from test_compile import counts

SCOPE = KINDS.index("scope")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.ReLU()
        self.gate = nn.Sigmoid()

    def forward(self, x):
        return self.gate(self.act(self.fc(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(Block(), Block())
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.layers(x)) * 2


class BreakNet(nn.Module):
    """A graph break between two layers: two graphs, two compilations."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x):
        h = self.act(self.fc1(x))
        torch._dynamo.graph_break()
        return self.fc2(h)


BREAK_LINE = BreakNet.forward.__code__.co_firstlineno + 2     # the graph_break() call


@pytest.fixture(scope="module", autouse=True)
def _forget_compilation_metrics():
    """Dynamo keeps its last 64 compilation metrics: this module's compiles would fill the
    deque for the tests after it (test_perf counts new ones by index), so it is emptied."""
    yield
    du.clear_compilation_metrics()


def fresh():
    torch._dynamo.reset()
    du.counters.clear()
    torch.manual_seed(0)


def named(tr, i):
    return tr.strings[tr.name_codes[i]]


def regions(tr):
    return [i for i in range(len(tr)) if named(tr, i).startswith(compiled.REGION)]


def top_ops(tr, region):
    """(name, modules attribute) of the ops a region runs at its top (its children, and the
    children of the wrappers in it), in start order."""
    parents = tr.parent_ids
    out = []
    for i in range(region + 1, len(tr)):
        p = parents[i]
        if p == region or (p >= 0 and parents[p] == region
                           and named(tr, p) in ("CompiledFunction",)):
            if tr.kind_codes[i] == KINDS.index("op") and named(tr, i) != "CompiledFunction":
                out.append((named(tr, i), tr.attrs_of(i).get("modules")))
    return out


# -- the C side: attributes from the tables at stop ------------------------------------------
def test_tables_attach_by_region_ordinal_and_by_time(fake_clock):
    """xsp_py_attach_tables: the k-th top span of a name in a region gets the k-th value; a
    wrapper passes topness through, an op in the table does not (its nested ops get nothing);
    None and missing values are counted; an event's attributes go to the span of its name
    that starts in its window, nowhere else."""
    fake_clock(1000, 10)
    x = torch.randn(4, 4)
    prof = xsp.profile(levels="ML")
    with prof:
        t0 = _core.now()
        k = _core.begin(0, SCOPE, "torch.compile: compile f", "compile")
        t1 = _core.now()
        _core.end(k)
        _core.end(_core.begin(0, SCOPE, "torch.compile: compile f", "compile"))   # outside
        with torch.profiler.record_function(compiled.REGION + "7/0"):
            with torch.profiler.record_function("CompiledFunction"):
                torch.mm(x, x)
                torch.relu(x)
                torch.mm(x, x)
                torch.mm(x, x)
        with torch.profiler.record_function(compiled.REGION + "8/0"):   # no table: nothing
            torch.relu(x)
        # the tables the session was given at setup, filled in place as Dynamo's callbacks do
        prof._span_attrs.clear()
        prof._span_attrs.update({
            "events": [(t0, t1, "torch.compile: compile f",
                        {"reason": "r", "graphs": 3, "share": 1.5, "none": None})],
            "regions": [(compiled.REGION, "modules",
                         {"7/0": {"aten::mm": ["fc1", None], "aten::relu": ["act"],
                                  "aten::resolve_conj": ["never: not a top span"]}},
                         "compile.modules")]})
    tr = prof.trace
    got = [(named(tr, i), tr.attrs_of(i).get("modules")) for i in range(len(tr))
           if tr.kind_codes[i] == KINDS.index("op")]
    assert [g for g in got if g[0] in ("aten::mm", "aten::relu")] == [
        ("aten::mm", "fc1"), ("aten::relu", "act"), ("aten::mm", None), ("aten::mm", None),
        ("aten::relu", None)]
    assert {g[1] for g in got if g[0] not in ("aten::mm", "aten::relu")} == {None}
    c = [i for i in range(len(tr)) if named(tr, i) == "torch.compile: compile f"]
    assert [tr.attrs_of(i) for i in c] == [
        {"type": "compile", "reason": "r", "graphs": 3, "share": 1.5}, {"type": "compile"}]
    assert {k: v for k, v in tr.meta.items() if k.startswith("compile.")} == {
        "compile.modules.attached": 2, "compile.modules.unmatched": 1,
        "compile.modules.unknown": 1}
    assert "attrs_error" not in tr.meta


@pytest.mark.parametrize("source, path", [
    ("L['self'].layers[0].fc", "layers.0.fc"), ("L['self'].layers.0.gate", "layers.0.gate"),
    ("L['self']._modules['head']", "head"), ("G['net'].fc1", "net.fc1"),
    ("getattr(L['self'].blocks, '0')", "blocks.0"), ("L['self']", ""),
    ("f(x)", "f(x)")])
def test_module_path_from_dynamo_sources(source, path):
    assert dynamo.module_path(source) == path


def test_module_path_of_a_compiled_built_in_module():
    """torch.compile(nn.Linear(...)) compiles a torch wrapper whose local fn is the module."""
    assert dynamo.module_path("L['fn']", root="fn") == ""
    assert dynamo.module_path("L['fn'].inner", root="fn") == "inner"


class _FakeOutput:
    """What _inductor_calls reads of a CompiledFxGraph: its output code, as Inductor writes it
    for Triton kernels (Source Nodes above each definition) and extern kernels (above the
    call), and the graph id."""

    def __init__(self, source):
        self.source_code = source
        self.fx_kwargs = {"graph_id": 3}
        self.inductor_provenance_mapping_str = None


TRITON_CODE = '''
# kernel path: /tmp/x.py
# Topologically Sorted Source Nodes: [relu, sigmoid], Original ATen: [aten.relu, aten.sigmoid]
# Source node to ATen node mapping:
#   relu => relu
triton_poi_fused_relu_sigmoid_0 = async_compile.triton('triton_poi_fused_relu_sigmoid_0', \'\'\'
@triton.jit
def triton_poi_fused_relu_sigmoid_0(in_out_ptr0, xnumel, XBLOCK : tl.constexpr):
    pass
\'\'\', device_str='cuda')

class Runner:
    def call(self, args):
        arg0_1, arg1_1 = args
        buf0 = empty_strided_cuda((4, 8), (8, 1), torch.float32)
        # Topologically Sorted Source Nodes: [linear], Original ATen: [aten.addmm]
        extern_kernels.addmm(arg1_1, arg0_1, arg0_1, alpha=1, beta=1, out=buf0)
        buf1 = buf0; del buf0  # reuse
        stream0 = get_raw_stream(0)
        triton_poi_fused_relu_sigmoid_0.run(buf1, 32, stream=stream0)
        # Topologically Sorted Source Nodes: [relu, sigmoid, linear_1], Original ATen: [aten.addmm]
        extern_kernels.addmm(arg1_1, buf1, arg0_1, alpha=1, beta=1, out=buf0)
        triton_poi_fused_relu_sigmoid_0.run(buf1, 32, stream=stream0)
        return (buf1, )

runner = Runner(partitions=[])
'''


def test_inductor_output_code_gives_each_kernel_call_its_modules():
    """The generic path over kernel names (Triton's on a GPU; C++'s the same way): a fused
    kernel lists the modules of all its nodes, in graph order; an extern kernel has the last of
    its sorted source nodes (the others produced its input buffer); a kernel defined once and
    called twice gets its definition's nodes each time."""
    by_node = {"linear": "fc1", "relu": "act", "sigmoid": "gate", "linear_1": "fc2"}
    calls = dynamo._inductor_calls(_FakeOutput(TRITON_CODE), by_node)
    k = "triton_poi_fused_relu_sigmoid_0"
    assert calls == [("aten::addmm", "fc1"), (k, "act,gate"), ("graph_3_" + k, "act,gate"),
                     ("aten::addmm", "fc2"), (k, "act,gate"), ("graph_3_" + k, "act,gate")]


# -- compilations as spans (the eager backend: a compile takes under a second) ----------------
@pytest.fixture(scope="module")
def eager():
    """Net compiled with the eager backend, its first call inside the profile (step#0
    compiles), step#1 runs the graph, step#2 recompiles for a new batch size; and the same
    model uncompiled under xsp, for its module spans.  Dynamo's records of the compiles come
    with it."""
    fresh()
    net = Net()
    f = torch.compile(net, backend="eager")
    before = list(du.get_compilation_metrics())
    x = torch.randn(4, 8)
    with xsp.profile(levels="ML") as prof:
        f(x)
        prof.step()
        f(x)
        prof.step()
        f(torch.randn(2, 8))
        prof.step()
    metrics = [m for m in du.get_compilation_metrics() if id(m) not in set(map(id, before))]
    with xsp.profile(levels="ML") as plain:
        net(x)
    return {"net": net, "trace": prof.trace, "metrics": metrics, "plain": plain.trace}


def test_a_compilation_is_a_span_in_the_step_that_compiled(eager):
    tr = eager["trace"]
    c = compiled.compiles(tr)
    code = Net.forward.__code__
    frame = "forward (%s:%d)" % (code.co_filename, code.co_firstlineno)
    assert c[["name", "type", "step", "compile_id", "frame", "outcome", "graphs",
              "graph_breaks", "graph_break_reasons"]].to_dict("records") == [
        {"name": "torch.compile: compile forward", "type": "compile", "step": "step#0",
         "compile_id": "0/0", "frame": frame, "outcome": "compiled", "graphs": 1,
         "graph_breaks": 0, "graph_break_reasons": ""},
        {"name": "torch.compile: recompile forward", "type": "recompile", "step": "step#2",
         "compile_id": "0/1", "frame": frame, "outcome": "compiled", "graphs": 1,
         "graph_breaks": 0, "graph_break_reasons": ""}]
    # each under its model call, before the region that runs what it compiled; tracing's
    # (fake tensor) ops nest under it
    for i, cid in zip(c["id"], ("0/0", "0/1")):
        parent = tr.parent_ids[i]
        assert named(tr, parent) == "OptimizedModule"
        kids = [j for j in range(len(tr)) if tr.parent_ids[j] == parent]
        assert [named(tr, j) for j in kids][-2:] == [named(tr, i), compiled.REGION + cid]
        assert (tr.parent_ids == i).sum() > 0
    assert [named(tr, s) for s in compiled.compiling_steps(tr)] == ["step#0", "step#2"]
    assert compiled.summary(tr) == {
        "compiles": 2, "recompiles": 1, "graph_breaks": 0,
        "compile_ns": int(tr.duration_ns[c["id"]].sum()), "steps": ["step#0", "step#2"]}


def test_a_recompile_says_which_guard_failed(eager):
    """The reason is Dynamo's own (its compilation metrics), and so is the compile's count."""
    c = compiled.compiles(eager["trace"])
    ms = eager["metrics"]
    assert len(ms) == len(c) == 2
    assert c["reason"].tolist() == ["", ms[1].recompile_reason]
    assert ms[0].recompile_reason is None and "size mismatch" in ms[1].recompile_reason


def test_ops_in_compiled_code_name_the_modules_they_came_from(eager):
    """Each op of the compiled region names the module whose forward called it: the same
    module span as the same op has in the uncompiled model's trace (the model's own forward,
    for `* 2`, is the model span, named by its class)."""
    plain = eager["plain"]
    kinds = plain.kind_codes
    want = [(named(plain, i), named(plain, plain.parent_ids[i])) for i in range(len(plain))
            if kinds[i] == KINDS.index("op") and plain.parent_ids[i] >= 0
            and kinds[plain.parent_ids[i]] in (KINDS.index("module"), KINDS.index("model"))]
    assert want[0] == ("aten::linear", "layers.0.fc") and want[-1] == ("aten::mul", "Net")
    tr = eager["trace"]
    rs = regions(tr)
    assert len(rs) == 3
    for r in rs:
        assert top_ops(tr, r) == want
    meta = {k: v for k, v in tr.meta.items() if k.startswith("compile.modules")}
    assert meta == {"compile.modules.attached": 3 * len(want), "compile.modules.unmatched": 0,
                    "compile.modules.unknown": 0}
    paths = {n for n, _ in eager["net"].named_modules()} | {"Net"}
    assert {m for _, m in want} <= paths


def test_the_report_says_what_compiled(eager):
    tr = eager["trace"]
    s = compiled.summary(tr)
    text = xsp.report.text(tr)
    assert ("torch.compile: 2 compiles (1 recompile), %s in all; the latency of step#0, "
            "step#2 includes compile time" % xsp.core.fmt.fmt_ns(s["compile_ns"])) in text


def test_an_uncompiled_trace_has_no_compile_spans(eager):
    plain = eager["plain"]
    assert not compiled.compile_mask(plain).any()
    assert compiled.summary(plain) is None and len(compiled.compiles(plain)) == 0
    assert "torch.compile" not in xsp.report.text(plain)


def test_a_failure_inside_the_callbacks_is_counted_not_raised(monkeypatch):
    """Reading the compiled graph fails (a torch whose internals moved): Dynamo compiles and
    runs as ever, the compile span is still recorded and ended, the failure is counted in meta
    compile.hook_errors, and the region's ops get no modules (no table, so no counts).
    Regression: the table of the compile id 0/0 from before torch._dynamo.reset() (which
    numbers compilations from 0/0 again) was given to the new region's ops."""
    fresh()
    xsp.profile(levels="ML")                    # installs the callbacks
    torch.compile(Net(), backend="eager")(torch.randn(4, 8))
    assert "0/0" in dynamo._OBS.tables
    fresh()

    def broken(fn, root):
        raise RuntimeError("a moved torch internal")

    monkeypatch.setattr(dynamo, "_calls", broken)
    net = Net()
    f = torch.compile(net, backend="eager")
    x = torch.randn(4, 8)
    with xsp.profile(levels="ML") as prof:
        out = f(x)
    assert torch.allclose(out, net(x))
    tr = prof.trace
    assert tr.meta["compile.hook_errors"] == 1
    (c,) = [i for i in range(len(tr)) if compiled.compile_mask(tr)[i]]
    assert tr.attrs_of(c) == {"type": "compile"} and tr.flag_bits[c] == 0
    assert not any("compile.modules" in k for k in tr.meta)
    assert all(m is None for r in regions(tr) for _, m in top_ops(tr, r))


# -- graph breaks, a compiled function, and Dynamo's counters ----------------------------------
def run_breaks(how, levels, **kwargs):
    """Dynamo's counters and the trace after compiling a fresh BreakNet (or a function calling
    it) `how` and calling it twice, both calls inside a profile of these levels when given
    (made after torch._dynamo.reset(), which clears every compile callback)."""
    fresh()
    profile = xsp.profile(levels=levels, **kwargs) if levels else None
    before = list(du.get_compilation_metrics())
    net = BreakNet()
    x = torch.randn(4, 8)
    if how == "module":
        f = torch.compile(net, backend="eager")
    else:
        def step(inp):
            return net(inp).relu().sum()
        f = torch.compile(step, backend="eager")
    if profile is None:
        out = [f(x), f(x)]
        return counts(before), out, None
    with profile as prof:
        out = [f(x)]
        prof.step()
        out.append(f(x))
    return counts(before), out, prof.trace


@pytest.mark.parametrize("how", ["module", "function"])
def test_graph_breaks_are_events_with_their_reasons(how):
    """Dynamo compiles the same with xsp as without, here where a graph break makes it run
    part of the code eagerly: xsp's module wrapper (Python) then runs inside a compiled
    frame's call, and Dynamo would compile it as user code (regression: 7 compiles instead of
    2, and graph breaks on xsp's functions) were xsp not in its skip rules.  Each graph break
    is a span under the compilation that found it, with Dynamo's reason and the user's line
    (test_compile_breaks.py checks them against torch._dynamo.explain)."""
    base, base_out, _ = run_breaks(how, None)
    got, out, tr = run_breaks(how, "ML")
    assert got == base
    assert all(torch.equal(a, b) for a, b in zip(out, base_out))
    made = [dynamo.describe_break(r) for r in du.graph_break_reasons]
    assert len(made) == got["graph_breaks"]
    reasons = sorted(r for r, _ in made)
    assert all(r.startswith("Call to `torch._dynamo.graph_break()`: User-inserted graph break")
               for r in reasons)
    c = compiled.compiles(tr)
    assert len(c) == got["compiles"] and c["outcome"].tolist() == ["compiled"] * len(c)
    assert int(c["graph_breaks"].sum()) == got["graph_breaks"] == (1 if how == "module" else 2)
    breaks = [i for i in range(len(tr)) if named(tr, i) == compiled.GRAPH_BREAK]
    assert sorted(tr.attrs_of(b)["reason"] for b in breaks) == reasons
    ids = c["id"].tolist()
    for b in breaks:            # under the compilation that found it, with its compile id
        p = int(tr.parent_ids[b])
        assert p in ids
        assert tr.attrs_of(b) == {"type": "graph break", "reason": tr.attrs_of(b)["reason"],
                                  "compile_id": c["compile_id"][ids.index(p)],
                                  "source": "%s:%d" % (__file__, BREAK_LINE)}
        assert tr.attrs_of(b)["reason"] in c["graph_break_reasons"][ids.index(p)]
    # the resume function after the break is compiled on its own, and its ops have modules
    assert c["name"].iloc[-1].startswith("torch.compile: compile torch_dynamo_resume_in_")
    mods = [m for r in regions(tr) for _, m in top_ops(tr, r)]
    assert {"fc1", "act", "fc2"} <= set(mods)
    assert tr.meta["hook_errors"] == 0 and "compile.hook_errors" not in tr.meta


@pytest.mark.parametrize("levels", ["M", "ML"])
def test_recompiles_are_the_same_with_xsp(levels):
    """The compile callbacks and the reading of the graphs change nothing Dynamo does: a
    recompile for a new batch size gives the same counters with xsp as without."""
    def go(levels):
        fresh()
        before = list(du.get_compilation_metrics())
        prof = xsp.profile(levels=levels) if levels else None
        f = torch.compile(Net(), backend="eager")
        xs = [torch.randn(4, 8), torch.randn(2, 8), torch.randn(4, 8)]
        if prof is None:
            for x in xs:
                f(x)
            return counts(before), None
        with prof:
            for x in xs:
                f(x)
        return counts(before), prof.trace
    base, _ = go(None)
    got, tr = go(levels)
    assert got == base and got["recompiles"] == 1
    assert compiled.compiles(tr)["type"].tolist() == ["compile", "recompile"]
    # level M alone records them too, at level M
    assert set(tr.level_codes[compiled.compile_mask(tr)].tolist()) == {0}


@pytest.mark.parametrize("how", ["module", "function"])
def test_record_shapes_after_a_graph_break_compiles_the_same(how):
    """With record_shapes the module wrapper calls Python helpers of xsp's around the user's
    module call, and after a graph break they run inside a compiled call: Dynamo skips them
    and still sees the user's module call (the wrapper makes it from C), so its counters are
    those of the run without xsp."""
    base, base_out, _ = run_breaks(how, None)
    got, out, tr = run_breaks(how, "ML", record_shapes=True)
    assert got == base
    assert all(torch.equal(a, b) for a, b in zip(out, base_out))
    assert len(compiled.compiles(tr)) == got["compiles"]


# -- aot_eager: AOTAutograd's aten graph -------------------------------------------------------
def test_aot_graph_ops_name_their_modules():
    """aot_eager runs AOTAutograd's forward graph of aten ops (t, addmm for a Linear): each
    names its module from the node meta AOTAutograd keeps; the Linear layers in the order the
    model calls them."""
    fresh()
    net = Net()
    f = torch.compile(net, backend="aot_eager")
    x = torch.randn(4, 8)
    f(x)                                # compiled before the profile: found by the scan
    with xsp.profile(levels="ML") as prof:
        f(x)
    tr = prof.trace
    assert len(compiled.compiles(tr)) == 0
    (r,) = regions(tr)
    ops = top_ops(tr, r)
    linears = [n for n, m in net.named_modules() if isinstance(m, nn.Linear)]
    assert [m for n, m in ops if n == "aten::addmm"] == linears
    assert [m for n, m in ops if n == "aten::relu"] == ["layers.0.act", "layers.1.act"]
    assert [m for n, m in ops if n == "aten::sigmoid"] == ["layers.0.gate", "layers.1.gate"]
    assert tr.meta["compile.modules.unmatched"] == 0


# -- measure: iterations that compiled are left out -----------------------------------------------
def test_measure_leaves_out_the_iterations_that_compiled():
    """A recompile in a measured iteration (a new batch size in iteration 0 of the M run) is
    not an iteration's latency: measure drops that iteration from every statistic, counts it
    (Measurement.compiling) and says so; the other runs keep all theirs."""
    fresh()
    f = torch.compile(Net(), backend="eager")
    xs = [torch.randn(4, 8), torch.randn(2, 8)]
    calls = []

    def fn():
        calls.append(1)
        return f(xs[(len(calls) - 1) % 2])

    with pytest.warns(xsp.XSPWarning, match=r"torch.compile compiled during the measured runs "
                      r"\(2 in run M\): the 1 measured iteration that compiled \(1 in run M\) "
                      r"is left out|are left out"):
        m = xsp.measure(fn, levels="ML", warmup=0, repeat=4, progress=False)
    assert m.compiling == {"M": 1}
    assert m.n_iterations == {"M": 3, "ML": 4}
    tr = m.traces["M"]
    comp = compiled.compiles(tr)
    assert comp["step"].tolist() == ["step#0", "step#1"]     # priming, then iteration 0
    step = m.span_table().iloc[0]
    assert step["kind"] == "step" and step["source_run"] == "M" and step["samples"] == 3
    assert m.overhead.iloc[0]["latency_ns"] < comp["duration_ns"].min()
    r = xsp.perf.from_measurement(m, name="fn")
    assert r.latency.n == 3 and r.data["varying"] == {}
    assert "torch.compile compiled in 1 measured iteration (1 in run M): left out" in \
        xsp.report.text(m)


# -- Inductor's C++ backend, in a process of its own ------------------------------------------
INDUCTOR = """
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
import torch._inductor.config as ic
import xsp
from xsp.analysis import compiled
from test_compile_events import Net, regions, top_ops, fresh
out = {}
ic.cpp.enable_kernel_profile = True      # C++ kernels as RecordFunction spans
x = torch.randn(4, 8)
for prov in (1, 0):
    ic.trace.provenance_tracking_level = prov
    fresh()
    f = torch.compile(Net(), backend="inductor")
    with torch.no_grad():
        with xsp.profile(levels="ML") as prof:
            f(x); prof.step(); f(x); prof.step()
    tr = prof.trace
    out[prov] = {"ops": [top_ops(tr, r) for r in regions(tr)],
                 "meta": {k: v for k, v in tr.meta.items() if k.startswith("compile")},
                 "compiles": compiled.compiles(tr)[["name", "step", "outcome"]].values.tolist()}
print(json.dumps(out))
"""


@pytest.mark.slow          # Inductor in a process of its own
def test_inductor_kernels_name_the_modules_they_fuse():
    """Inductor's C++ kernels, profiled (config.cpp.enable_kernel_profile), with provenance
    tracking: each kernel call names its modules, a kernel fusing ReLU and Sigmoid names both
    (never one of them), the same kernel called for the second Block names that Block's; the
    extern addmm names its Linear.  Without provenance tracking the C++ kernels' modules are
    unknown (torch keeps no source for them) and counted so; the extern kernels keep theirs."""
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([sys.executable, "-c", INDUCTOR, here], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    fused = "graph_%d_cpp_fused_relu_sigmoid_0"
    mul = "graph_%d_cpp_fused_mul_1"
    for prov, gid in (("1", 0), ("0", 1)):
        got = out[prov]
        assert got["compiles"] == [["torch.compile: compile forward", "step#0", "compiled"]]
        assert len(got["ops"]) == 2
        known = prov == "1"
        want = [["aten::addmm", "layers.0.fc"],
                [fused % gid, "layers.0.act,layers.0.gate" if known else None],
                ["aten::addmm", "layers.1.fc"],
                [fused % gid, "layers.1.act,layers.1.gate" if known else None],
                ["aten::addmm", "head"], [mul % gid, "Net" if known else None]]
        assert got["ops"] == [want, want]
        assert got["meta"] == {"compile.modules.attached": 12 if known else 6,
                               "compile.modules.unmatched": 0,
                               "compile.modules.unknown": 0 if known else 6}


def test_report_leaves_compiling_steps_out_of_the_latency():
    """The text report's step latency is of the steps that did not compile, and says so; the
    compile line says which step paid for it."""
    import re
    torch._dynamo.reset()
    m = torch.compile(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), backend="eager")
    x = torch.randn(4, 8)
    with xsp.profile(levels="ML") as p:
        for _ in range(4):
            m(x)
            p.step()
    text = xsp.report.text(p.trace)
    line = next(ln for ln in text.splitlines() if ln.startswith("step latency"))
    assert line.startswith("step latency (the 1 that compiled left out): ")
    steps = p.trace.spans(kind="step")
    durs = sorted(s.duration_ns for s in steps[1:])
    from xsp.core.fmt import fmt_ns
    assert ("max %s" % fmt_ns(durs[-1])) in line
    assert re.search(r"the latency of step#0 includes compile time", text)


def test_op_table_leaves_out_what_compiling_ran():
    """analysis.ops counts the ops the iterations ran, not those torch.compile ran while
    compiling (under the compile span): the compiling step's table equals a later step's."""
    import xsp.analysis as A
    torch._dynamo.reset()
    m = torch.compile(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), backend="aot_eager")
    x = torch.randn(4, 8)
    with xsp.profile(levels="ML") as p:
        m(x)
        p.step()
        m(x)
    tr = p.trace
    assert compiled.compile_mask(tr).any()
    df = tr.to_pandas()
    under = tr.nearest_ancestor(compiled.compile_mask(tr), include_self=True) >= 0
    assert (under & (df["kind"] == "op").to_numpy()).sum() > 0      # tracing ran ops
    ops = A.ops(tr).set_index("name")["calls"].to_dict()
    kind = df["kind"].to_numpy()
    names = df["name"].to_numpy()
    inside = {n for n in names[under & (kind == "op")]}
    outside = {n for n in names[~under & (kind == "op")]}
    only_compiling = inside - outside
    assert only_compiling and not (only_compiling & set(ops))
    for n in inside & outside & set(ops):          # counted without the compiling calls
        assert ops[n] <= int(((names == n) & ~under & (kind == "op")).sum())
