"""What the reports say about an ordinary training loop (docs/analyses.md, "Iterations",
"Phases of a step", "Models and layers"): iterations equal the user's steps, the setup before
the first step() is shown and never an iteration, a loss or a lone layer is a layer and not a
model, each figure says what it is, the op table, units in the cells, noise."""

import numpy as np
import pytest
import torch
from torch import nn

import xsp
from xsp.analysis import tables as A
from xsp import report


def S(name, kind, start, end, parent=None, thread=0, **attrs):
    return {"name": name, "kind": kind, "start_ns": start, "end_ns": end, "parent": parent,
            "thread": thread, "attrs": attrs}


def rows(df):
    return [tuple(None if (isinstance(v, float) and np.isnan(v)) else v for v in r)
            for r in df.itertuples(index=False)]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.fc(x))


def train(steps, step_first=False, tail=False, model=None):
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    lossf = nn.CrossEntropyLoss()
    x, y = torch.randn(4, 8), torch.tensor([0, 1, 2, 3])
    with xsp.profile(levels="ML", model=model) as prof:
        torch.ones(2)                   # setup work before any model call
        for _ in range(steps):
            if step_first:
                xsp.step()
            opt.zero_grad()
            loss = lossf(net(x), y)
            loss.backward()
            opt.step()
            if not step_first:
                xsp.step()
        if tail:
            torch.zeros(3)              # a leftover after the last step(): no model call
    return prof.trace


def test_five_steps_give_five_iterations_step_at_the_end():
    tr = train(5)
    steps = tr.spans(kind="step")
    assert [s.name for s in steps] == ["step#%d" % i for i in range(5)]
    it = A.model_latency(tr)
    assert it["iteration"].tolist() == [0, 1, 2, 3, 4]
    assert it["name"].tolist() == ["step#%d" % i for i in range(5)]
    # iteration 0 is carved from step#0: from its first model call to the first step()
    first_call = [s for s in tr.spans(kind="model") if s.parent == steps[0].id][0]
    assert it["start_ns"].iloc[0] == first_call.start_ns
    assert it["latency_ns"].iloc[0] == steps[0].end_ns - first_call.start_ns
    assert it["latency_ns"].iloc[1:].tolist() == [s.duration_ns for s in steps[1:]]
    su = A.setup(tr)
    assert su == {"id": steps[0].id, "start_ns": steps[0].start_ns,
                  "duration_ns": first_call.start_ns - steps[0].start_ns}
    # the setup's op is in no iteration; everything of the first model call is
    of = A._src(tr).iteration_of()
    ones = [s for s in tr.spans(name="aten::ones")][0]
    assert of[ones.id] == -1 and of[first_call.id] == 0
    txt = report.text(tr)
    assert "5 iterations: steps (the work between step() calls)" in txt
    assert "setup (before the first step() and its first model call; not an iteration): %s" \
        % xsp.core.fmt.fmt_ns(su["duration_ns"]) in txt


def test_five_steps_give_five_iterations_step_at_the_start_and_a_tail_is_dropped():
    tr = train(5, step_first=True)
    it = A.model_latency(tr)
    # step#0 holds no model call: it is all setup; step#5, after the last step(), holds the
    # fifth iteration's model call: an iteration
    assert it["name"].tolist() == ["step#%d" % i for i in range(1, 6)]
    s0 = tr.spans(name="step#0")[0]
    assert A.setup(tr) == {"id": s0.id, "start_ns": s0.start_ns, "duration_ns": s0.duration_ns}
    tr = train(5, tail=True)
    assert [s.name for s in tr.spans(kind="step")] == ["step#%d" % i for i in range(6)]
    assert A.model_latency(tr)["name"].tolist() == ["step#%d" % i for i in range(5)]
    zeros = tr.spans(name="aten::zeros")[0]
    assert A._src(tr).iteration_of()[zeros.id] == -1


def test_steps_around_plain_tensor_code_give_one_iteration_per_step_call():
    """Regression guard (issue 27: three step() calls around tensor code with no nn.Module
    gave 2 iterations, step#0 being taken as setup though it was the first iteration's work):
    with no model call to carve step#0 at, step#0 is iteration 0 when it did work, and all
    setup when empty; the report says which."""
    a = torch.randn(16, 16)

    def work():
        return (a @ a).relu()
    with xsp.profile() as prof:             # step() at the end of each iteration
        for _ in range(3):
            work()
            xsp.step()
    tr = prof.trace
    assert [s.name for s in tr.spans(kind="step")] == ["step#0", "step#1", "step#2"]
    it = A.model_latency(tr)
    assert it["name"].tolist() == ["step#0", "step#1", "step#2"]
    assert it["latency_ns"].tolist() == [s.duration_ns for s in tr.spans(kind="step")]
    assert A.setup(tr) is None
    of = A._src(tr).iteration_of()
    assert [of[s.id] for s in tr.spans(name="aten::relu")] == [0, 1, 2]
    assert ("no setup: the trace has no model call to carve step#0 at, so step#0 (the work "
            "before the first step()) is iteration 0") in report.text(tr)
    with xsp.profile() as prof:             # step() at the start: step#0 is empty
        for _ in range(3):
            xsp.step()
            work()
    tr = prof.trace
    assert A.model_latency(tr)["name"].tolist() == ["step#1", "step#2", "step#3"]
    s0 = tr.spans(name="step#0")[0]
    assert A.setup(tr) == {"id": s0.id, "start_ns": s0.start_ns, "duration_ns": s0.duration_ns}
    assert "note: step#0 is empty (step() starts each iteration): it is all setup" \
        in report.text(tr)
    with xsp.profile() as prof:             # step() at the end, and work after the loop
        for _ in range(3):
            work()
            xsp.step()
        torch.zeros(3)
    tr = prof.trace
    assert len(tr.spans(kind="step")) == 4
    assert A.model_latency(tr)["name"].tolist() == ["step#0", "step#1", "step#2"]
    assert A._src(tr).iteration_of()[tr.spans(name="aten::zeros")[0].id] == -1
    assert ("not an iteration: the step after the last step() (step() ends each iteration "
            "(step#0 holds work and no step has a model call), so what follows the last "
            "step() is a leftover)") in report.text(tr)


def test_steps_around_a_real_model_give_one_iteration_per_step_call():
    """The same loops on a real model (a CNN, forward and backward): step#0 is carved at its
    first model call (step() at the end) or is all setup (step() at the start), never taken
    whole as iteration 0."""
    import models
    model, x = models.cnn()
    for step_first in (False, True):
        with xsp.profile() as prof:
            torch.ones(2)                   # setup before the loop
            for _ in range(3):
                if step_first:
                    xsp.step()
                models.fwd_bwd(model, x)
                if not step_first:
                    xsp.step()
        tr = prof.trace
        it = A.model_latency(tr)
        names = ["step#1", "step#2", "step#3"] if step_first else ["step#0", "step#1", "step#2"]
        assert it["name"].tolist() == names
        assert len(tr.spans(kind="model")) == 3
        s0, su = tr.spans(name="step#0")[0], A.setup(tr)
        first = [s for s in tr.spans(kind="model") if s.parent == s0.id]
        assert su["id"] == s0.id and su["duration_ns"] == (
            first[0].start_ns - s0.start_ns if not step_first else s0.duration_ns)
        assert A._src(tr).iteration_of()[tr.spans(name="aten::ones")[0].id] == -1
        assert "no setup" not in report.text(tr)


def test_the_loss_is_a_layer_not_a_model():
    tr = train(2)
    assert [s.name for s in tr.spans(kind="model")] == ["Net", "Net"]
    losses = tr.spans(name="CrossEntropyLoss")
    assert [(s.kind, s.level, s.parent_span.kind) for s in losses] == [("module", "L", "step")] * 2
    lr = A.layer_ranking(tr)
    assert sorted(lr["name"]) == ["CrossEntropyLoss", "act", "fc"]
    ph = A.phases(tr)
    loss_ns = [s.duration_ns for s in losses]
    assert ph["toplevel_layers_ns"].tolist() == loss_ns


def test_a_lone_linear_is_a_layer_and_a_named_one_is_a_model_and_its_layer():
    lin, x = nn.Linear(4, 4), torch.randn(2, 4)
    with xsp.profile(levels="ML") as prof:
        for _ in range(3):
            lin(x)
            prof.step()
    tr = prof.trace
    assert tr.spans(kind="model") == []
    assert [s.kind for s in tr.spans(name="Linear")] == ["module"] * 3
    lr = A.layer_ranking(tr)
    assert rows(lr[["name", "type", "calls"]]) == [("Linear", "Linear", 3)]
    assert len(A.model_latency(tr)) == 3
    assert "no layer" not in report.text(tr)
    with xsp.profile(levels="ML", model=lin) as prof:
        for _ in range(3):
            lin(x)
            prof.step()
    tr = prof.trace
    assert [s.kind for s in tr.spans(name="Linear")] == ["model"] * 3
    assert rows(A.layer_ranking(tr)[["name", "type", "calls"]]) == [("Linear", "Linear", 3)]
    # a user's own module without submodules is a model by default
    class Own(nn.Module):
        def forward(self, x):
            return x * 2

    with xsp.profile(levels="ML") as prof:
        Own()(x)
    assert [s.kind for s in prof.trace.spans(name="Own")] == ["model"]


def test_model_named_by_class_name_or_class_and_bad_values():
    tr = train(2, model="Net")
    assert [s.name for s in tr.spans(kind="model")] == ["Net", "Net"]
    tr = train(1, model=[Net, "CrossEntropyLoss"])
    assert sorted(s.name for s in tr.spans(kind="model")) == ["CrossEntropyLoss", "Net"]
    tr = train(1, model=nn.Linear)          # no call of Net is the model now: a layer
    assert tr.spans(kind="model") == []
    assert [s.kind for s in tr.spans(name="Net")] == ["module"]
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        xsp.profile(levels="ML", model=3)
    with pytest.raises(ValueError, match="empty list"):
        xsp.profile(levels="ML", model=[])


def phase_trace():
    spans = [
        S("prof", "region", 0, 1000),                                               # 0
        S("step#1", "step", 0, 500, 0),                                             # 1
        S("Optimizer.zero_grad#SGD.zero_grad", "scope", 5, 15, 1),                  # 2
        S("Net", "model", 20, 220, 1, type="Net"),                                  # 3
        S("fc", "module", 30, 130, 3, type="Linear"),                               # 4
        S("aten::linear", "op", 40, 120, 4, seq=3),                                 # 5
        S("aten::addmm", "op", 50, 110, 5),                                         # 6
        S("act", "module", 140, 210, 3, type="ReLU"),                               # 7
        S("aten::relu", "op", 150, 200, 7, seq=4),                                  # 8
        S("CrossEntropyLoss", "module", 230, 260, 1, type="CrossEntropyLoss"),      # 9
        S("aten::cross_entropy_loss", "op", 235, 255, 9),                           # 10
        S("autograd::engine::evaluate_function: ReluBackward0", "op", 270, 300, 1),  # 11
        S("ReluBackward0", "backward", 275, 295, 11, fwd_op=8),                     # 12
        S("autograd::engine::evaluate_function: AddmmBackward0", "op", 300, 360, 1),  # 13
        S("AddmmBackward0", "backward", 305, 355, 13, fwd_op=5),                    # 14
        S("aten::mm", "op", 310, 350, 14),                                          # 15
        S("Optimizer.step#SGD.step", "scope", 400, 460, 1),                         # 16
        S("aten::add_", "op", 410, 420, 16),                                        # 17
        S("aten::add_", "op", 430, 440, 16),                                        # 18
        S("step#2", "step", 500, 1000, 0),                                          # 19
        S("Net", "model", 520, 720, 19, type="Net"),                                # 20
        S("fc", "module", 530, 600, 20, type="Linear"),                             # 21
        S("aten::linear", "op", 540, 590, 21),                                      # 22
        S("act", "module", 610, 700, 20, type="ReLU"),                              # 23
        S("aten::relu", "op", 620, 690, 23),                                        # 24
    ]
    return xsp.Trace.from_spans(spans, meta={"levels": "ML", "region": "prof"})


def test_phases_of_a_step_exact():
    ph = A.phases(phase_trace())
    assert list(ph.columns) == ["iteration", "step_ns", "forward_ns", "toplevel_layers_ns",
                                "backward_ns", "optimizer_ns", "other_ns"]
    # step 1: forward 200, loss 30, backward 30 + 60, optimizer 10 + 60, other the rest
    assert rows(ph) == [(0, 500, 200, 30, 90, 70, 500 - 200 - 30 - 90 - 70),
                        (1, 500, 200, 0, 0, 0, 300)]


def test_layer_shares_of_forward_and_of_step_exact():
    tr = phase_trace()
    lr = A.layer_ranking(tr)
    # forward time: the Net calls and the loss, 200 + 30 + 200; the steps' time: 1000.
    # backward through the forward op: ReluBackward0 (20) -> act, AddmmBackward0 (50) -> fc
    got = {r[0]: r[1:] for r in rows(lr[["name", "calls", "total_ns", "backward_ns",
                                          "forward_share", "step_share"]])}
    assert got == {"fc": (2, 170, 50, 170 / 430, 220 / 1000),
                   "act": (2, 160, 20, 160 / 430, 180 / 1000),
                   "CrossEntropyLoss": (1, 30, 0, 30 / 430, 30 / 1000)}
    assert lr["name"].tolist() == ["fc", "act", "CrossEntropyLoss"]
    assert lr["cumulative_step_share"].tolist() == pytest.approx([0.22, 0.40, 0.43])


def test_op_table_exact():
    tr = phase_trace()
    ops = A.ops(tr)
    assert list(ops.columns) == ["name", "calls", "total_ns", "self_ns", "mean_ns", "std_ns",
                                 "self_share", "gpu_ns", "gpu_self_ns"]
    got = {r[0]: r[1:7] for r in rows(ops)}
    assert got["aten::linear"] == (2, 80 + 50, 20 + 50, 65, np.std([80, 50], ddof=1),
                                   70 / 1000)
    assert got["aten::add_"] == (2, 20, 20, 10, 0.0, 20 / 1000)
    assert got["aten::mm"] == (1, 40, 40, 40, None, 40 / 1000)
    assert ops["gpu_ns"].isna().all()            # no level G: unknown, not 0
    assert ops["self_ns"].tolist() == sorted(ops["self_ns"].tolist(), reverse=True)
    assert A.ops(tr, sort="calls", n=1)["name"].tolist() == ["aten::linear"]
    with pytest.raises(ValueError, match="sort must be one of"):
        A.ops(tr, sort="nope")
    with pytest.raises(ValueError, match="no op input shapes"):
        A.ops(tr, by_shape=True)


def test_op_table_merges_a_redispatch_with_its_self_time():
    spans = [S("prof", "region", 0, 200), S("step#1", "step", 0, 200, 0),
             S("Net", "model", 0, 200, 1, type="Net"),
             S("aten::to", "op", 10, 90, 2), S("aten::to", "op", 20, 80, 3),
             S("aten::copy_", "op", 30, 40, 4)]
    ops = A.ops(xsp.Trace.from_spans(spans, meta={"levels": "ML"}))
    # one aten::to call (the inner one is its redispatch): self 80 - 10 (copy_), as
    # torch.profiler's key_averages gives it
    assert rows(ops[["name", "calls", "total_ns", "self_ns"]]) == [
        ("aten::to", 1, 80, 70), ("aten::copy_", 1, 10, 10)]


def test_op_table_gpu_columns_exact():
    from helpers import sibling
    gpu_trace = sibling("analysis", "test_analysis").gpu_trace
    ops = A.ops(gpu_trace())
    got = {r[0]: (r[1], r[7], r[8]) for r in rows(ops)}
    # aten::addmm launched gemm (100) in step 1, and the memcpy (20) and gemm (60) in fc2;
    # aten::linear holds them (inclusive) but launched nothing itself
    assert got["aten::addmm"] == (2, 100 + 20 + 60, 100 + 20 + 60)
    assert got["aten::linear"] == (2, 180, 0)
    assert got["aten::relu"] == (1, 20, 20)


def test_op_table_calls_equal_torch_profilers_key_averages():
    torch.manual_seed(0)
    net, lossf = Net(), nn.CrossEntropyLoss()
    x, y = torch.randn(4, 8), torch.tensor([0, 1, 2, 3])

    def step():
        lossf(net(x), y).backward()

    step()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as p:
        step()
    theirs = {e.key: e.count for e in p.key_averages() if e.key.startswith("aten::")}
    with xsp.profile(levels="ML") as prof:
        step()
        prof.step()
    ops = A.ops(prof.trace)
    mine = {k: v for k, v in zip(ops["name"], ops["calls"]) if k.startswith("aten::")}
    assert mine == theirs


def test_units_in_cells_never_in_headers():
    txt = report.text(phase_trace())
    header_lines = [ln for ln in txt.splitlines() if ln.strip().startswith(("rank", "type",
                                                                            "name"))]
    assert header_lines and not any("_ns" in ln or "_share" in ln for ln in header_lines)
    i = txt.splitlines().index("Top 10 ops (by self)")
    first = txt.splitlines()[i + 1].split()
    assert first == ["name", "calls", "total", "self", "mean", "std", "self-share"]
    assert report.summary.fmt_delta(-193_900) == "-193.900 us"
    assert report.summary.fmt_delta(1_234_567, 10_000_000) == "+1.235 ms (+12.3%)"
    assert report.summary.fmt_delta(-500, 1000) == "-500 ns (-50.0%)"
    assert report.summary.fmt_counters({"lost.cap": 2, "gpu.lost": 0, "lost.depth": 1}) == \
        "lost.cap 2, lost.depth 1"
    assert report.summary.fmt_counters({}) == "none"
    # DataFrames stay numeric
    assert A.layer_ranking(phase_trace())["total_ns"].dtype.kind == "i"


def test_the_step_medians_are_numpys():
    """The headline's medians (summary._median, which spares the text numpy.ma: issue 28) equal
    np.median's, odd and even counts, ties, NaN."""
    rng = np.random.default_rng(7)
    cases = [rng.integers(0, 10 ** 12, n).astype(np.float64) for n in range(1, 30)]
    cases += [rng.standard_normal(n) * 1e9 for n in (2, 3, 1000, 1001)]
    cases += [np.array([5.0, 5.0, 1.0, 5.0]), np.array([0.1, 0.2]), np.array([3e17, 3e17 + 64])]
    for x in cases:
        assert report.summary._median(x) == np.median(x), x
    assert np.isnan(report.summary._median(np.array([1.0, np.nan, 3.0])))


def test_headline_labels_each_figure():
    lines = report.text(phase_trace()).splitlines()
    assert lines[1] == "levels ML, 25 spans, 2 iterations: steps (the work between step() calls)"
    assert lines[2] == "step latency: mean 500 ns ± 0 ns, median 500 ns, min 500 ns, max 500 ns"
    assert lines[3] == ("per step (mean ± std): forward (model calls) 200 ns ± 0 ns, loss and "
                        "top-level layers 15 ns ± 21 ns, backward 45 ns ± 64 ns, optimizer "
                        "35 ns ± 49 ns, other 205 ns ± 134 ns")
    assert lines[4] == "lost or dropped: none"


def test_outlier_first_iteration_is_pointed_out():
    spans = [S("prof", "region", 0, 10_000)]
    t = 0
    for i, d in enumerate([5000, 100, 110, 90]):
        spans.append(S("step#%d" % (i + 1), "step", t, t + d, 0))
        spans.append(S("Net", "model", t, t + d, len(spans) - 1, type="Net"))
        t += d
    tr = xsp.Trace.from_spans(spans, meta={"levels": "M", "region": "prof"})
    txt = report.text(tr)
    assert ("note: iteration 0 took 47.6x the median (the first call pays one-off costs); the "
            "mean includes it") in txt


def test_measure_says_when_an_overhead_is_within_the_noise():
    from xsp.values.measurement import Measurement

    def run(durs):
        spans = [S("m", "region", 0, 10 ** 6)]
        t = 0
        for i, d in enumerate(durs):
            spans.append(S("step#%d" % i, "step", t, t + d, 0))
            spans.append(S("F", "model", t, t + d, len(spans) - 1, type="F"))
            t += d
        return xsp.Trace.from_spans(spans, meta={"levels": "M", "region": "m"})

    # run M: 100, 140, 60, 120, 80 (std 28.3); run ML: +5 each: within the noise
    m = Measurement("ML", {"M": [run([999, 100, 140, 60, 120, 80])],
                           "ML": [run([999, 105, 145, 65, 125, 85])]},
                    warmup=0, repeat=5, trim=0.0, batch_size=None)
    ov = m.overhead
    var = np.var([100, 140, 60, 120, 80], ddof=1)          # 1000
    assert ov.loc[1, "added_ns"] == 5
    assert ov.loc[1, "noise_ns"] == pytest.approx(2 * np.sqrt(2 * var / 5)) == 40
    assert bool(ov.loc[1, "within_noise"])
    txt = report.text(m)
    assert ("M in run ML: +5 ns added is within the noise (± %s): measure with a larger "
            "repeat to tell" % xsp.core.fmt.fmt_ns(ov.loc[1, "noise_ns"])) in txt


SCRIPT = '''
import torch
from torch import nn
import xsp

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x)

class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = nn.Linear(4, 4)

    def forward(self, x):
        return self.out(x)

net, head, lossf = Net(), Head(), nn.MSELoss()
x = torch.randn(2, 8)
for _ in range(5):
    lossf(head(net(x)), torch.zeros(2, 4)).backward()
    xsp.step()
'''


def test_cli_run_model_and_summary_sort(tmp_path, capsys):
    from helpers import sibling
    xsp_cmd = sibling("cli", "test_cli").xsp_cmd
    from xsp import cli
    (tmp_path / "s.py").write_text(SCRIPT)
    r = xsp_cmd("run", "-q", "--model", "Net", "-o", "a.xsp", "s.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    tr = xsp.load(str(tmp_path / "a.xsp"))
    assert [s.name for s in tr.spans(kind="model")] == ["Net"] * 5
    assert [s.kind for s in tr.spans(name="Head")] == ["module"] * 5   # a layer under the step
    assert [s.kind for s in tr.spans(name="MSELoss")] == ["module"] * 5
    assert len(A.model_latency(tr)) == 5
    r = xsp_cmd("run", "-q", "-o", "b.xsp", "s.py", cwd=tmp_path)
    tr = xsp.load(str(tmp_path / "b.xsp"))
    assert [s.name for s in tr.spans(kind="model")] == ["Net", "Head"] * 5
    r = xsp_cmd("run", "-q", "--model", ",", "s.py", cwd=tmp_path)
    assert r.returncode == 1 and r.stderr == (
        "xsp: error: --model: give one or more class names separated by commas, e.g. --model "
        "ResNet or --model ResNet,Head (not ',')\n")
    assert cli.main(["summary", str(tmp_path / "a.xsp"), "--sort", "calls", "--top", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    i = out.index("Top 3 ops (by calls)")
    calls = [int(ln.split()[1]) for ln in out[i + 2:i + 5]]
    assert calls == sorted(calls, reverse=True)
    top = A.ops(xsp.load(str(tmp_path / "a.xsp")), sort="calls", n=3)
    assert calls == top["calls"].tolist()


def test_a_schedule_records_exactly_the_active_steps_and_they_are_the_iterations():
    torch.manual_seed(0)
    net, lossf = Net(), nn.CrossEntropyLoss()
    x, y = torch.randn(4, 8), torch.tensor([0, 1, 2, 3])
    got = []
    with xsp.profile(levels="ML", schedule=xsp.schedule(wait=1, warmup=1, active=2, repeat=2),
                     on_trace_ready=lambda p: got.append(p.trace)) as prof:
        for _ in range(10):
            lossf(net(x), y).backward()
            prof.step()
    assert len(got) == 2
    for tr, first in zip(got, (2, 6)):
        names = ["step#%d" % first, "step#%d" % (first + 1)]
        assert [s.name for s in tr.spans(kind="step")] == names
        it = A.model_latency(tr)
        assert it["name"].tolist() == names and A.setup(tr) is None
        assert it["latency_ns"].tolist() == [s.duration_ns for s in tr.spans(kind="step")]
        lr = A.layer_ranking(tr)
        assert sorted(zip(lr["name"], lr["calls"])) == [
            ("CrossEntropyLoss", 2), ("act", 2), ("fc", 2)]
        assert "2 iterations: steps" in report.text(tr)


def test_measure_with_one_sample_says_the_spread_is_unknown():
    from xsp.values.measurement import Measurement

    def run(d):
        return xsp.Trace.from_spans([S("m", "region", 0, 10 ** 6),
                                     S("step#0", "step", 0, 9, 0), S("F", "model", 0, 9, 1),
                                     S("step#1", "step", 10, 10 + d, 0),
                                     S("F", "model", 10, 10 + d, 3)],
                                    meta={"levels": "M", "region": "m"})

    m = Measurement("ML", {"M": [run(100)], "ML": [run(151)]}, warmup=0, repeat=1, trim=0.0,
                    batch_size=None)
    ov = m.overhead
    assert ov.loc[1, "added_ns"] == 51 and np.isnan(ov.loc[1, "noise_ns"])
    assert bool(ov.loc[1, "within_noise"])
    assert ("M in run ML: +51 ns added, spread unknown (one sample): measure with repeat >= 2 "
            "to tell") in report.text(m)


def test_a_model_call_after_the_last_step_or_an_interrupted_step_is_no_iteration():
    torch.manual_seed(0)
    net, x = Net(), torch.randn(4, 8)
    with xsp.profile(levels="ML") as prof:
        for _ in range(3):
            net(x).sum().backward()
            prof.step()
        with torch.no_grad():
            net(x)                      # an evaluation after the loop: a leftover
    tr = prof.trace
    assert [(s.name, s.flags) for s in tr.spans(kind="step")] == [
        ("step#0", 0), ("step#1", 0), ("step#2", 0), ("step#3", 1)]
    assert A.model_latency(tr)["name"].tolist() == ["step#0", "step#1", "step#2"]
    assert ("not an iteration: the step after the last step() (step() ends each iteration "
            "(step#0 holds a model call), so what follows the last step() is a leftover)"
            ) in report.text(tr)
    # step() at the start, and the block interrupted in the last iteration
    with pytest.raises(KeyboardInterrupt):
        with xsp.profile(levels="ML") as prof:
            for i in range(3):
                prof.step()
                net(x)
                if i == 2:
                    raise KeyboardInterrupt
    tr = prof.trace
    assert A.model_latency(tr)["name"].tolist() == ["step#1", "step#2"]
    txt = report.text(tr)
    assert "the profiled block ended with KeyboardInterrupt in the block" in txt
    assert ("the step after the last step() (the block ended with KeyboardInterrupt in the "
            "block: the step is incomplete)") in txt


def test_model_calls_on_another_thread_count_for_the_step_they_ran_in():
    import threading
    torch.manual_seed(0)
    net, x = Net(), torch.randn(4, 8)
    with xsp.profile(levels="ML") as prof:
        for _ in range(4):
            t = threading.Thread(target=lambda: net(x))
            t.start()
            t.join()
            prof.step()
    tr = prof.trace
    assert len(tr.spans(kind="model")) == 4
    assert A.model_latency(tr)["name"].tolist() == ["step#%d" % i for i in range(4)]


def test_cli_errors_and_warnings_are_one_line(tmp_path, capsys):
    from helpers import sibling
    xsp_cmd = sibling("cli", "test_cli").xsp_cmd
    from xsp import cli
    (tmp_path / "s.py").write_text(SCRIPT)
    if not torch.cuda.is_available():
        r = xsp_cmd("run", "--levels", "MLG", "s.py", cwd=tmp_path)
        assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.startswith("xsp: error: level G cannot be recorded: ")
        assert "--gpu-fallback" in r.stderr and "Traceback" not in r.stderr
    r = xsp_cmd("run", "-q", "--model", "Nope", "-o", "n.xsp", "s.py", cwd=tmp_path)
    assert r.returncode == 0
    assert r.stderr == ("xsp: warning: --model Nope matched no top-level call, so there are no "
                        "model spans (the top-level calls were of: Head, MSELoss, Net)\n")
    tr = xsp.load(str(tmp_path / "n.xsp"))
    assert tr.meta["model"] == "Nope"
    assert ("model named Nope: no top-level call matched it (every top-level call is a layer)"
            in report.text(tr))
    r = xsp_cmd("run", "--model", "Net,,x", "s.py", cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.startswith("xsp: error: --model: give one or more")
    # level M alone under xsp run: the script imports torch after the profile started
    r = xsp_cmd("run", "-q", "--levels", "M", "-o", "m.xsp", "s.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    tr = xsp.load(str(tmp_path / "m.xsp"))
    assert [s.name for s in tr.spans(kind="model")] == ["Net", "Head"] * 5
    assert len(A.model_latency(tr)) == 5
    assert cli.main(["summary", str(tmp_path / "m.xsp"), "--sort", "gpu"]) == 1
    assert capsys.readouterr().err == ("xsp: error: --sort gpu: %s has no GPU times (level G "
                                       "was not recorded)\n" % (tmp_path / "m.xsp"))


def test_a_torch_trace_without_modules_says_so_once(tmp_path):
    """torch.profiler records module calls only with with_stack=True: the report of such a
    trace says once what it lacks, the layer tables say why they are empty, and no forward
    time of 0 ns is printed."""
    import torch.profiler as tp
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    with tp.profile(activities=[tp.ProfilerActivity.CPU], record_shapes=True) as p:
        for _ in range(2):
            m(x).sum().backward()
    path = str(tmp_path / "t.json")
    p.export_chrome_trace(path)
    text = xsp.report.text(xsp.load(path, format="kineto"))
    assert text.count("this torch.profiler trace has no module calls (torch.profiler records "
                      "them only with with_stack=True)") == 1
    assert text.count("no layer calls: the torch.profiler trace has no module information") == 2
    assert "forward (model calls) 0 ns" not in text and "aten::addmm" in text
    assert "failed to rebuild" not in text
    with tp.profile(activities=[tp.ProfilerActivity.CPU], with_stack=True) as p:
        m(x).sum().backward()
    p.export_chrome_trace(path)
    assert "no module calls" not in xsp.report.text(xsp.load(path, format="kineto"))
