"""torch.compile's graph breaks as torch._dynamo.explain counts them (xsp/producers/dynamo.py), with
their reasons and the user's lines, in the trace, the report and perf's counts; and the tables
and shares of a compiled model leaving out the iterations that compiled (xsp/analysis/tables.py,
docs/analyses.md "Compiling iterations").

Regressions guarded: a data-dependent branch (`if y.sum() > 0:`) counted as 0 graph breaks
(Dynamo files it under counters["unimplemented"], not counters["graph_break"]), so that
`check(graph_breaks=0)` passed; the first call's compilation making OptimizedModule 100 % of
the layer table and every op near 0 %.  The eager and aot_eager backends keep compiling fast;
the Inductor check is in test_compile_events.py."""
import os

import numpy as np
import pytest
import torch
import torch._dynamo.utils as du
from torch import nn

import xsp
from xsp.analysis import tables as A
from xsp import perf, report
from xsp.analysis import compiled
from xsp.values.trace import nearest_ancestor

HERE = os.path.abspath(__file__)
# Dynamo warns once about the C builtin it cannot trace; measure warns that it compiled
pytestmark = [pytest.mark.filterwarnings("ignore:Dynamo does not know how to trace"),
              pytest.mark.filterwarnings("ignore:measure. torch.compile compiled")]


def line_of(marker):
    """The line number of the line of this file that ends with the comment `# <marker>`."""
    with open(HERE) as f:
        for i, ln in enumerate(f, 1):
            if ln.rstrip().endswith("# " + marker):
                return i
    raise AssertionError(marker)


class TwoLayers(nn.Module):
    """fc1, then fc2: each test module's forward puts its break between them."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 8)


class Branch(TwoLayers):
    """A data-dependent branch between two layers."""

    def forward(self, x):
        y = self.fc1(x)
        if y.sum() > -1e9:      # break: branch
            y = y.relu()
        return self.fc2(y)


class Print(TwoLayers):
    def forward(self, x):
        y = self.fc1(x)
        print("", end="")       # break: print
        return self.fc2(y)


class Builtin(TwoLayers):
    """A C builtin Dynamo cannot trace."""

    def forward(self, x):
        y = self.fc1(x)
        os.getpid()             # break: builtin
        return self.fc2(y)


class Explicit(TwoLayers):
    def forward(self, x):
        y = self.fc1(x)
        torch._dynamo.graph_break()     # break: explicit
        return self.fc2(y)


class Two(TwoLayers):
    """Two breaks in one forward: a branch, then an explicit graph_break()."""

    def forward(self, x):
        y = self.fc1(x)
        if y.sum() > -1e9:      # break: two-branch
            y = y.relu()
        torch._dynamo.graph_break()     # break: two-explicit
        return self.fc2(y).sin()


CASES = {  # model, markers of its break lines, words every reason of its breaks has
    "branch": (Branch, ["branch"], "Data-dependent branching"),
    "print": (Print, ["print"], "`print`"),
    "builtin": (Builtin, ["builtin"], "posix.getpid"),
    "explicit": (Explicit, ["explicit"], "torch._dynamo.graph_break()"),
    "two": (Two, ["two-branch", "two-explicit"], None),
}


def fresh():
    torch._dynamo.reset()
    du.counters.clear()
    du.clear_compilation_metrics()      # a bounded deque: a full one would not grow
    torch.manual_seed(0)


@pytest.fixture(scope="module", autouse=True)
def _forget_compilation_metrics():
    """Dynamo keeps its last 64 compilation metrics: emptied before this file (a test slices
    the metrics its own compilations added, which a full deque would not grow by: the earlier
    test files' compilations made test_recompiles_... read none) and for the files after it."""
    du.clear_compilation_metrics()
    yield
    du.clear_compilation_metrics()
    torch._dynamo.reset()


def explained(model, x):
    """torch._dynamo.explain's (graph_break_count, [(reason, "file:line")]) for model(x)."""
    e = torch._dynamo.explain(model)(x)
    return e.graph_break_count, [
        (r.reason, "%s:%d" % (r.user_stack[-1].filename, r.user_stack[-1].lineno))
        for r in e.break_reasons]


def profiled(model, x, steps=3, levels="ML"):
    """The trace of `steps` steps of torch.compile(model, backend="eager") after a reset."""
    fresh()
    f = torch.compile(model, backend="eager")
    with xsp.profile(levels=levels) as prof:
        for _ in range(steps):
            f(x)
            prof.step()
    return prof.trace


@pytest.mark.parametrize("case", sorted(CASES))
def test_graph_breaks_are_explain_s(case):
    """The count, reasons and lines of the graph breaks in the trace are explain's: one per
    break line here, the reason containing explain's and the expected words, the source
    the user's line in this file."""
    cls, markers, words = CASES[case]
    x = torch.randn(4, 8)
    model = cls()
    count, reasons = explained(model, x)
    assert count == len(reasons) == len(markers)
    tr = profiled(model, x)
    gb = compiled.graph_breaks(tr)
    assert compiled.summary(tr)["graph_breaks"] == count
    assert int(compiled.compiles(tr)["graph_breaks"].sum()) == count
    assert gb["source"].tolist() == [w for _, w in reasons] == [
        "%s:%d" % (HERE, line_of("break: " + m)) for m in markers]
    for (why, _), got in zip(reasons, gb["reason"]):
        assert why.splitlines()[0] in got and len(got) > len(why.splitlines()[0])
        if words:
            assert words in got
    if case == "two":
        assert "Data-dependent branching" in gb["reason"][0]
        assert "User-inserted graph break" in gb["reason"][1]
    # the graph break spans carry them, under the compilation that made them
    for row in gb.itertuples(index=False):
        a = tr.attrs_of(row.id)
        assert (a["reason"], a["source"], a["compile_id"]) == (row.reason, row.source,
                                                               row.compile_id)
        assert compiled.compile_mask(tr)[tr.parent_ids[row.id]]
    # and the text report lists each, with its line
    text = report.text(tr)
    assert "%d graph break%s" % (count, "" if count == 1 else "s") in text
    for row in gb.itertuples(index=False):
        assert "  graph break at %s: %s" % (row.source, row.reason) in text


def test_a_data_dependent_branch_fails_a_graph_break_budget():
    """Regression: perf's counts missed a data-dependent branch (counters["unimplemented"]),
    so check(graph_breaks=0) passed on a model that breaks in two."""
    fresh()
    x = torch.randn(4, 8)
    f = torch.compile(Branch(), backend="eager")
    r = perf.measure(lambda: f(x), levels="M", repeat=2, warmup=0, count_memory=False)
    assert r.counts["graph_breaks"] == 1
    (reason,) = r.compile["graph_break_reasons"]
    assert reason.startswith("Data-dependent branching")
    assert reason.endswith("(%s:%d)" % (HERE, line_of("break: branch")))
    with pytest.raises(perf.BudgetExceeded) as e:
        r.check(graph_breaks=0)
    assert "Data-dependent branching" in str(e.value)


def test_recompiles_are_counted_apart_from_graph_breaks():
    """A new shape recompiles the forward and its resume function: recompiles are counted
    on their own (Dynamo's recompile reasons), and the graph breaks are explain's for each
    shape, one per compilation of the forward."""
    model = Branch()
    a, b = torch.randn(4, 8), torch.randn(6, 8)
    per_shape = [explained(model, a)[0], explained(model, b)[0]]
    assert per_shape == [1, 1]
    fresh()
    f = torch.compile(model, backend="eager", dynamic=False)
    n_metrics = len(du.get_compilation_metrics())
    with xsp.profile(levels="ML") as prof:
        for x in (a, a, b, b):
            f(x)
            prof.step()
    tr = prof.trace
    metrics = list(du.get_compilation_metrics())[n_metrics:]
    s = compiled.summary(tr)
    c = compiled.compiles(tr)
    assert s["recompiles"] == sum(1 for m in metrics if m.recompile_reason) == 2
    assert s["graph_breaks"] == sum(per_shape) == 2
    assert c[c["type"] == "recompile"]["reason"].str.contains("size mismatch").all()
    assert compiled.graph_breaks(tr)["source"].tolist() == [
        "%s:%d" % (HERE, line_of("break: branch"))] * 2
    assert s["steps"] == ["step#0", "step#2"]


# -- tables without the compiling iterations ------------------------------------------------
@pytest.fixture(scope="module")
def block():
    """A compiled nn.TransformerEncoderLayer (aot_eager), four steps under levels ML: the
    first compiles."""
    fresh()
    torch.manual_seed(0)
    m = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
    f = torch.compile(m, backend="aot_eager")
    x = torch.randn(2, 5, 16)
    with xsp.profile(levels="ML") as prof:
        for _ in range(4):
            f(x).sum().backward()
            prof.step()
    return prof.trace


def test_the_compiling_iteration_is_the_first(block):
    src = A._src(block)
    assert src.compiling().tolist() == [True, False, False, False]
    assert compiled.summary(block)["steps"] == ["step#0"]


def test_layer_tables_leave_the_compiling_iteration_out(block):
    """OptimizedModule's total and shares are of iterations 1-3: exact sums of its spans
    there over their latencies; include_compile=True counts iteration 0 too."""
    df = block.to_pandas()
    it = A.model_latency(block)
    lat = it["latency_ns"].to_numpy()
    owner = A._src(block).iteration_of()
    model = np.nonzero((df["kind"] == "model").to_numpy())[0]
    assert len(model) == 4 and (df["name"][model] == "OptimizedModule").all()
    dur = df["duration_ns"].to_numpy()
    warm = [i for i in model if owner[i] > 0]
    assert len(warm) == 3
    r = A.layer_ranking(block)
    assert r.attrs["compiling_left_out"] == 1 and r.attrs["compiling_kept"] == 0
    row = r.iloc[0]
    assert (row["name"], row["calls"], row["total_ns"]) == (
        "OptimizedModule", 3, int(dur[warm].sum()))
    assert row["forward_share"] == 1.0
    assert row["step_share"] == (row["total_ns"] + row["backward_ns"]) / int(lat[1:].sum())
    t = A.layer_types(block)
    assert t.attrs["compiling_left_out"] == 1
    assert int(t["total_ns"].iloc[0]) == int(dur[warm].sum())
    assert t["step_share"].iloc[0] == row["step_share"]
    inc = A.layer_ranking(block, include_compile=True)
    assert inc.attrs == {"compiling_left_out": 0, "compiling_kept": 1}
    assert (inc["calls"].iloc[0], inc["total_ns"].iloc[0]) == (4, int(dur[model].sum()))
    assert inc["step_share"].iloc[0] == (inc["total_ns"].iloc[0]
                                         + inc["backward_ns"].iloc[0]) / int(lat.sum())
    # the compiling iteration's own OptimizedModule call holds the compilation
    first = [i for i in model if owner[i] == 0][0]
    assert dur[first] > dur[warm].max()


def test_ops_leave_the_compiling_iteration_out(block):
    """The op table counts the ops of iterations 1-3 (none under a compile span), their
    self_share over those iterations' time."""
    src = A._src(block)
    df = block.to_pandas()
    owner = src.iteration_of()
    ops = A.ops(block)
    assert ops.attrs["compiling_left_out"] == 1
    warm = (df["kind"] == "op").to_numpy() & (owner > 0)
    names = df["name"].to_numpy()
    assert "aten::mm" in ops["name"].tolist()
    calls = int(ops.set_index("name")["calls"]["aten::mm"])
    assert calls == int((warm & (names == "aten::mm")).sum())
    lat = A.model_latency(block)["latency_ns"].to_numpy()
    row = ops.set_index("name").loc["aten::mm"]
    assert row["self_share"] == row["self_ns"] / int(lat[1:].sum())
    inc = A.ops(block, include_compile=True).set_index("name")
    # iteration 0 ran aten::mm too (after compiling), but never the ops tracing ran
    under = nearest_ancestor(src.parent, src.compile_spans(), include_self=True) >= 0
    all_mm = (df["kind"] == "op").to_numpy() & (owner >= 0) & ~under & (names == "aten::mm")
    assert int(inc["calls"]["aten::mm"]) == int(all_mm.sum()) > calls
    assert under.any() and ((df["kind"] == "op").to_numpy() & under).any()


def test_the_report_says_what_the_tables_left_out(block):
    text = report.text(block)
    assert ("tables and shares: the 1 iteration that compiled (iteration 0) left out, as in "
            "the step line (include_compile=True counts them)") in text
    assert "step latency (the 1 that compiled left out)" in text
    r = A.layer_ranking(block)
    assert "OptimizedModule" in text and report.summary.fmt_share(r["step_share"].iloc[0]) in text
    inc = report.text(block, include_compile=True)
    assert "counted (include_compile=True): their compile time is in them" in inc
    assert report.summary.fmt_share(A.layer_ranking(block, include_compile=True)["step_share"]
                            .iloc[0]) in inc
    html = report.html(block)
    assert "tables and shares: the 1 iteration that compiled" in html


def test_xsp_summary_include_compile(block, tmp_path, capsys):
    from xsp import cli
    path = str(tmp_path / "t.xsp")
    xsp.save(block, path)
    assert cli.main(["summary", path]) == 0
    assert "the 1 iteration that compiled (iteration 0) left out" in capsys.readouterr().out
    assert cli.main(["summary", path, "--include-compile"]) == 0
    assert "counted (include_compile=True)" in capsys.readouterr().out


def test_the_roofline_leaves_the_compiling_iteration_out():
    """by="op" and "model" count the ops of the iterations that did not compile."""
    fresh()
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    f = torch.compile(m, backend="aot_eager")
    x = torch.randn(8, 16)
    with torch.no_grad(), xsp.profile(levels="ML", record_shapes=True) as prof:
        for _ in range(3):
            f(x)
            prof.step()
    tr = prof.trace
    df = tr.to_pandas()
    src = A._src(tr)
    assert src.compiling().tolist() == [True, False, False]
    owner = src.iteration_of()
    under = nearest_ancestor(src.parent, src.compile_spans(), include_self=True) >= 0
    is_addmm = (df["name"] == "aten::addmm").to_numpy()
    # the outermost calls (the first run also redispatches one inside each, a nested op the
    # roofline leaves to its caller)
    addmm = is_addmm & ~under & (nearest_ancestor(src.parent, is_addmm, include_self=False) < 0)
    kw = {"peak_gflops": 100.0, "peak_dram_gbps": 10.0}
    op = A.roofline(tr, by="op", **kw).set_index("name")
    assert op.attrs["compiling_left_out"] == 1
    assert int(op["calls"]["aten::addmm"]) == int((addmm & (owner > 0)).sum()) == 4
    inc = A.roofline(tr, by="op", include_compile=True, **kw).set_index("name")
    assert int(inc["calls"]["aten::addmm"]) == int((addmm & (owner >= 0)).sum()) == 6
    model = A.roofline(tr, by="model", **kw)
    lat = A.model_latency(tr)["latency_ns"].to_numpy()
    assert (int(model["iterations"].iloc[0]), int(model["duration_ns"].iloc[0])) == (
        2, int(lat[1:].sum()))
