"""Comparing two runs (xsp.compare, xsp.report.compare, `xsp compare`; docs/analyses.md,
"Comparing two runs") on hand-built training loops whose per-iteration durations are known, so
that every mean, standard deviation and noise threshold below is worked out by hand; then the
BatchNorm insertion that renames an nn.Sequential's layers, one iteration per run, the CLI's
--fail-above status, and two real recorded runs of a tiny model end to end.
"""
import math

import numpy as np
import pytest
import torch
from torch import nn

import xsp
from xsp import cli
from xsp.analysis.compare import Comparison, compare
from test_analysis import S, STREAM

OP = {"Linear": "aten::linear", "ReLU": "aten::relu", "Conv2d": "aten::conv2d",
      "BatchNorm2d": "aten::batch_norm", "Dropout": "aten::dropout", "Softmax": "aten::softmax"}


def train(iters, gpu=False):
    """A training loop: one step per iteration (step#1, step#2, ...; no setup step#0), each
    [50 ns, the Net model call with the leaf layers back to back, the layers' backward
    functions under the step, 50 ns], so step latency = forward + backward + 100.  Each layer
    holds one op for its whole duration (self time = the layer's); with gpu, a kernel "k_<type>"
    of half its duration on a stream, under the op.  iters: per iteration a list of (name,
    type, forward_ns, backward_ns)."""
    spans = [S("prof", "region", 0, 0)]
    t = 0
    for i, layers in enumerate(iters):
        fwd = sum(l[2] for l in layers)
        bwd = sum(l[3] for l in layers)
        step = len(spans)
        spans.append(S("step#%d" % (i + 1), "step", t, t + fwd + bwd + 100, 0))
        model = len(spans)
        spans.append(S("Net", "model", t + 50, t + 50 + fwd, step, type="Net"))
        u = t + 50
        ops = []
        for name, typ, f, _ in layers:
            spans.append(S(name, "module", u, u + f, model, type=typ))
            ops.append(len(spans))
            spans.append(S(OP[typ], "op", u, u + f, len(spans) - 1))
            if gpu:
                spans.append(S("k_" + typ, "kernel", u, u + f // 2, ops[-1], 1))
            u += f
        for (name, typ, _, b), op in zip(layers, ops):
            if b:
                spans.append(S(typ + "Backward0", "backward", u, u + b, step, fwd_op=op))
                u += b
        t += fwd + bwd + 100
    spans[0]["end_ns"] = t
    threads = [(11, "main", 0), (STREAM, "stream 7", 1)] if gpu else None
    return xsp.Trace.from_spans(spans, threads=threads,
                                meta={"levels": "MLG" if gpu else "ML", "region": "prof"})


# fc: forward 100, 110, 90, 100 -> 150, 160, 140, 150 (mean 100 -> 150, each sample variance
#     (0 + 100 + 100 + 0) / 3 = 200/3): noise 2 sqrt(200/3/4 + 200/3/4) = 11.55 < 50: slower;
#     backward 30 -> 40 in every iteration: no spread, noise 0 < 10: slower
# act: 50, 90, 10, 50 -> 70, 110, 30, 70 (mean 50 -> 70, variance 3200/3): noise
#     2 sqrt(3200/3/2) = 46.19 > 20: within noise, a larger change than fc's backward but not
#     called, so listed after it
# out: 200 in every iteration: no change
FC_B, FC_A = [100, 110, 90, 100], [150, 160, 140, 150]
ACT_B, ACT_A = [50, 90, 10, 50], [70, 110, 30, 70]


def loop(fc, act, fc_bwd, gpu=False):
    return train([[("fc", "Linear", f, fc_bwd), ("act", "ReLU", a, 0), ("out", "Linear", 200, 0)]
                  for f, a in zip(fc, act)], gpu=gpu)


def noise(var_b, nb, var_a, na, k=2.0):
    return k * math.sqrt(var_b / nb + var_a / na)


def test_means_spreads_and_the_noise_threshold():
    c = compare(loop(FC_B, ACT_B, 30), loop(FC_A, ACT_A, 40))
    assert isinstance(c, Comparison) and c.iterations == (4, 4) and c.k == 2.0
    cols = ["before_ns", "after_ns", "before_std_ns", "after_std_ns", "delta_ns",
            "delta_share", "noise_ns", "verdict"]
    assert list(c.layers.columns) == ["name", "type", "pass"] + cols
    got = [tuple(r) for r in c.layers.itertuples(index=False)]
    sd_fc, sd_act = math.sqrt(200 / 3), math.sqrt(3200 / 3)
    expect = [
        ("fc", "Linear", "forward", 100, 150, sd_fc, sd_fc, 50, 0.5,
         noise(200 / 3, 4, 200 / 3, 4), "slower"),
        ("fc", "Linear", "backward", 30, 40, 0, 0, 10, 10 / 30, 0, "slower"),
        ("act", "ReLU", "forward", 50, 70, sd_act, sd_act, 20, 0.4,
         noise(3200 / 3, 4, 3200 / 3, 4), "within noise"),
        ("out", "Linear", "forward", 200, 200, 0, 0, 0, 0, 0, "within noise"),
    ]
    assert len(got) == len(expect)
    for g, e in zip(got, expect):
        assert g[:3] == e[:3] and g[-1] == e[-1]
        assert g[3:-1] == pytest.approx(e[3:-1], abs=1e-9), g
    assert noise(200 / 3, 4, 200 / 3, 4) == pytest.approx(11.547, abs=1e-3)
    assert noise(3200 / 3, 4, 3200 / 3, 4) == pytest.approx(46.188, abs=1e-3)
    assert len(c.added) == len(c.removed) == len(c.retyped) == 0

    # step = 100 + fc + act + out + backward: 480, 530, 430, 480 -> 560, 610, 510, 560
    # (variance 5000/3 each: noise 57.74 < 80); the phases: forward (the Net call) 350, 400,
    # 300, 350 -> 420, 470, 370, 420; backward 30 -> 40; other 100 -> 100
    s = c.summary
    assert list(s.columns) == ["figure"] + cols
    assert s["figure"].tolist() == ["step", "forward", "toplevel_layers", "backward",
                                    "optimizer", "other"]
    assert s[["before_ns", "after_ns", "delta_ns"]].values.tolist() == [
        [480, 560, 80], [350, 420, 70], [0, 0, 0], [30, 40, 10], [0, 0, 0], [100, 100, 0]]
    assert s["noise_ns"].tolist() == pytest.approx(
        [noise(5000 / 3, 4, 5000 / 3, 4), noise(5000 / 3, 4, 5000 / 3, 4), 0, 0, 0, 0])
    assert s["verdict"].tolist() == ["slower", "slower", "within noise", "slower",
                                     "within noise", "within noise"]
    assert s["delta_share"][0] == pytest.approx(80 / 480)

    # ops by name, self time per iteration: aten::linear = fc + out, aten::relu = act
    assert c.ops[["name", "before_ns", "after_ns", "verdict"]].values.tolist() == [
        ["aten::linear", 300, 350, "slower"], ["aten::relu", 50, 70, "within noise"]]
    assert c.ops["noise_ns"][0] == pytest.approx(noise(200 / 3, 4, 200 / 3, 4))
    assert len(c.kernels) == 0 and c.has_gpu == (False, False)

    # k scales the threshold: with k = 0.5, act's +20 ns clears 0.5 sqrt(3200/3/2) = 11.5 ns
    # and is called, and now comes before fc's backward (+10 ns)
    ck = compare(loop(FC_B, ACT_B, 30), loop(FC_A, ACT_A, 40), k=0.5)
    assert ck.layers[["name", "pass", "verdict"]].values.tolist() == [
        ["fc", "forward", "slower"], ["act", "forward", "slower"], ["fc", "backward", "slower"],
        ["out", "forward", "within noise"]]
    assert ck.layers["noise_ns"][1] == pytest.approx(noise(3200 / 3, 4, 3200 / 3, 4, k=0.5))
    assert ck.layers["noise_ns"][1] == pytest.approx(11.547, abs=1e-3)
    with pytest.raises(ValueError, match="k must be a positive finite number"):
        compare(loop(FC_B, ACT_B, 30), loop(FC_A, ACT_A, 40), k=0)


def test_text_has_units_in_the_cells_and_signed_changes():
    c = compare(loop(FC_B, ACT_B, 30), loop(FC_A, ACT_A, 40))
    text = xsp.report.text(c, names=("a.xsp", "b.xsp"))
    lines = text.splitlines()
    assert lines[0] == "xsp compare: a.xsp -> b.xsp"
    assert lines[1].startswith("iterations: 4 -> 4; a change is called when |change| > "
                               "noise = 2 x sqrt(sb^2/nb + sa^2/na)")
    assert lines[2] == ("(each row is its own test: among many rows of two runs of the same "
                        "code, a few are called by chance; trust the step first, then the "
                        "largest rows)")
    assert lines[3].startswith("note: fewer than 5 iterations in a run (4 and 4): the noise "
                               "is poorly known; record more steps")
    # then what differs, and the exact figures (none here: the same ops in every iteration)
    assert lines[4] == "no exact difference; 6 rows beyond noise, 4 within noise"
    assert lines[6] == "Exact differences: none (op calls compared)"
    assert lines[7].startswith("  (not compared: input shapes, FLOPs, bytes moved: "
                               "record_shapes=True not in either run; kernel launches, ")
    i = lines.index("") + 1
    i = lines.index("", i) + 1
    assert lines[i].split() == ["figure", "before", "after", "change", "noise", "verdict"]
    assert lines[i + 1].split() == ["step", "480", "ns", "560", "ns", "+80", "ns", "(+16.7%)",
                                    "58", "ns", "slower"]
    # the phases that are 0 in both runs are left out
    assert [ln.split()[0] for ln in lines[i + 1:i + 5]] == ["step", "forward", "backward",
                                                           "other"]
    assert lines[i + 5] == ""
    j = lines.index("Layers (leaf modules matched by name and type, time per iteration; "
                    "called changes first)")
    assert lines[j + 1].split() == ["name", "type", "pass", "before", "after", "change",
                                    "noise", "verdict"]
    assert lines[j + 2].split() == ["fc", "Linear", "forward", "100", "ns", "150", "ns", "+50",
                                    "ns", "(+50.0%)", "12", "ns", "slower"]
    assert lines[j + 4].split()[-2:] == ["within", "noise"]
    assert "Layers added" not in text and "Layers removed" not in text
    assert "Layers retyped" not in text
    assert "Kernels: level G was not recorded in either run" in text
    assert "+-" not in text and "_ns" not in text
    # a faster run: the sign is a minus, never "+-"
    back = xsp.report.text(compare(loop(FC_A, ACT_A, 40), loop(FC_B, ACT_B, 30)))
    assert "-80 ns (-14.3%)" in back and "+-" not in back
    assert "faster" in back
    # top limits the tables and says how many rows are left out
    short = xsp.report.text(c, top=1).splitlines()
    j = short.index(lines[j])
    assert short[j + 2].split()[0] == "fc" and short[j + 3] == "  ... 3 more"
    with pytest.raises(ValueError, match="top must be a positive int"):
        xsp.report.text(c, top=0)
    assert repr(c) == ("<xsp.analysis.compare.Comparison step +80 ns (+16.7%) slower; iterations 4 "
                       "-> 4; layers: 2 slower, 0 faster, 0 added, 0 removed, 0 retyped>")


def test_batchnorm_inserted_in_a_sequential_is_never_compared_with_a_relu():
    """Regression: matching by position printed `features.4 95.089 us 768.169 us +707.8%`, a
    ReLU against the BatchNorm2d inserted before it, with no warning.  Inserting features.1
    renames the layers after it, as nn.Sequential numbers them; features.3 Dropout moves to
    features.4; classifier is gone."""
    before = [("features.0", "Conv2d", 300, 0), ("features.1", "ReLU", 95, 0),
              ("features.2", "Linear", 200, 0), ("features.3", "Dropout", 20, 0),
              ("classifier", "Softmax", 10, 0)]
    after = [("features.0", "Conv2d", 300, 0), ("features.1", "BatchNorm2d", 768, 0),
             ("features.2", "ReLU", 95, 0), ("features.3", "Linear", 200, 0),
             ("features.4", "Dropout", 20, 0)]
    c = compare(train([before] * 3), train([after] * 3))
    assert c.layers[["name", "type", "pass", "verdict"]].values.tolist() == [
        ["features.0", "Conv2d", "forward", "within noise"]]
    assert c.retyped.values.tolist() == [
        ["features.1", "ReLU", "BatchNorm2d", 95, 768],
        ["features.2", "Linear", "ReLU", 200, 95],
        ["features.3", "Dropout", "Linear", 20, 200]]
    assert c.added.values.tolist() == [["features.4", "Dropout", 20, 0]]
    assert c.removed.values.tolist() == [["classifier", "Softmax", 10, 0]]
    assert list(c.added.columns) == ["name", "type", "after_ns", "after_backward_ns"]
    assert list(c.removed.columns) == ["name", "type", "before_ns", "before_backward_ns"]
    assert list(c.retyped.columns) == ["name", "before_type", "after_type", "before_ns",
                                       "after_ns"]
    text = xsp.report.text(c)
    lines = text.splitlines()
    a = lines.index("Layers added (in after only; time per iteration)")
    assert lines[a + 1].split() == ["name", "type", "forward", "backward"]
    assert lines[a + 2].split() == ["features.4", "Dropout", "20", "ns", "0", "ns"]
    r = lines.index("Layers removed (in before only; time per iteration)")
    assert lines[r + 2].split() == ["classifier", "Softmax", "10", "ns", "0", "ns"]
    t = lines.index("Layers retyped (same name, another type: not compared)")
    assert lines[t + 1].split() == ["name", "before", "type", "after", "type", "before",
                                    "after"]
    assert lines[t + 2].split() == ["features.1", "ReLU", "BatchNorm2d", "95", "ns", "768",
                                    "ns"]
    assert "inserting or removing one renames those after it" in lines[t + 5]
    # nothing in the compared table puts one type against another, and no +708 % appears
    j = lines.index("Layers (leaf modules matched by name and type, time per iteration; "
                    "called changes first)")
    assert [ln.split()[0] for ln in lines[j + 2:] if ln.startswith("  ") and
            ln.split()[0].startswith("features")] == ["features.0"]
    assert "708" not in text and "707" not in text
    # the added layer shows in the step latency; with one type per name nothing is hidden
    assert c.summary["delta_ns"][0] == 768 - 10


def test_one_iteration_has_no_spread_and_never_calls_a_change():
    c = compare(loop([100], [50], 30), loop([900], [50], 30))
    assert c.iterations == (1, 1)
    fc = c.layers.iloc[0]
    assert (fc["name"], fc["before_ns"], fc["after_ns"], fc["delta_ns"]) == ("fc", 100, 900,
                                                                            800)
    assert math.isnan(fc["before_std_ns"]) and math.isnan(fc["noise_ns"])
    assert set(c.layers["verdict"]) | set(c.summary["verdict"]) | set(c.ops["verdict"]) == {
        "no spread (1 iteration)"}
    assert c.worst(0.0) is None and len(c.regressions(0.0, layers=True)) == 0
    text = xsp.report.text(c)
    assert "note: fewer than 5 iterations in a run (1 and 1): the noise is poorly known, " \
           "and below 2 no change is called" in text
    assert "no spread (1 iteration)" in text and "slower" not in text
    # one side with one iteration is enough to leave the spread unknown
    c = compare(loop(FC_B, ACT_B, 30), loop([900], [50], 30))
    assert c.iterations == (4, 1)
    assert c.summary["verdict"][0] == "no spread (1 iteration)"


def test_iterations_where_a_layer_is_absent_count_as_zero():
    """A layer called in some iterations only: its mean is over every iteration (a missing
    one is 0), so a layer that runs every other step is not doubled."""
    it = [[("fc", "Linear", 100, 0), ("aux", "ReLU", 60, 0)], [("fc", "Linear", 100, 0)]]
    c = compare(train(it * 2), train(it * 2))
    aux = c.layers[c.layers["name"] == "aux"].iloc[0]
    # samples 60, 0, 60, 0: mean 30, variance (4 x 30^2) / 3 = 1200
    assert (aux["before_ns"], aux["after_ns"]) == (30, 30)
    assert aux["before_std_ns"] == pytest.approx(math.sqrt(1200))
    assert aux["noise_ns"] == pytest.approx(noise(1200, 4, 1200, 4))


def test_worst_and_regressions_for_ci():
    c = compare(loop(FC_B, ACT_B, 30), loop(FC_A, ACT_A, 40))
    w = c.worst(0.10)                     # the step: +16.7 % > 10 %, beyond the noise
    assert w["what"] == "step" and w["delta_ns"] == 80 and w["verdict"] == "slower"
    assert w["delta_share"] == pytest.approx(80 / 480)
    assert c.worst(0.20) is None          # 16.7 % is not above 20 %
    # with layers: fc forward +50 %, fc backward +33 %, then the step; act is within noise
    r = c.regressions(0.10, layers=True)
    assert r["what"].tolist() == ["layer fc (Linear, forward)", "layer fc (Linear, backward)",
                                  "step"]
    assert c.worst(0.40, layers=True)["what"] == "layer fc (Linear, forward)"
    # a run that got faster never fails
    assert compare(loop(FC_A, ACT_A, 40), loop(FC_B, ACT_B, 30)).worst(0.0) is None


def test_kernels_by_name_with_level_g():
    c = compare(loop(FC_B, ACT_B, 30, gpu=True), loop(FC_A, ACT_A, 40, gpu=True))
    assert c.has_gpu == (True, True)
    # k_Linear = fc/2 + out/2 = 150, 155, 145, 150 -> 175, 180, 170, 175 (variance 50/3)
    k = c.kernels
    assert k[["name", "before_ns", "after_ns", "delta_ns", "verdict"]].values.tolist() == [
        ["k_Linear", 150, 175, 25, "slower"], ["k_ReLU", 25, 35, 10, "within noise"]]
    assert k["noise_ns"][0] == pytest.approx(noise(50 / 3, 4, 50 / 3, 4))
    text = xsp.report.text(c)
    i = text.splitlines().index("Kernels (GPU time per iteration)")
    assert text.splitlines()[i + 2].split()[0] == "k_Linear"
    # one side without G: no kernel comparison, and the text says which
    c = compare(loop(FC_B, ACT_B, 30, gpu=True), loop(FC_A, ACT_A, 40))
    assert len(c.kernels) == 0
    assert "Kernels: level G was not recorded in after" in xsp.report.text(c)


def test_report_wrappers():
    b, a = loop(FC_B, ACT_B, 30), loop(FC_A, ACT_A, 40)
    c = xsp.report.compare(b, a)
    assert isinstance(c, Comparison)
    short = xsp.report.compare(b, a, top=1)
    assert len(short.layers) == 1 and len(short.ops) == 1
    assert short.summary.equals(c.summary)
    assert xsp.report.compare_text(b, a, top=3, names=("x", "y")) == xsp.report.text(c, top=3,
                                                                            names=("x", "y"))
    # every source xsp.analysis takes: a span table compares like its trace
    assert xsp.report.text(compare(b.to_pandas(), a)) == xsp.report.text(c)


def test_cli_fail_above_exit_status(tmp_path, capsys):
    xsp.save(loop(FC_B, ACT_B, 30), str(tmp_path / "b.xsp"))
    xsp.save(loop(FC_A, ACT_A, 40), str(tmp_path / "a.xsp"))
    b, a = str(tmp_path / "b.xsp"), str(tmp_path / "a.xsp")
    assert cli.main(["compare", b, a, "--fail-above", "10"]) == 3
    out, err = capsys.readouterr()
    assert out.startswith("xsp compare: %s -> %s\n" % (b, a))
    assert err == ("xsp compare: step latency slower by +80 ns (+16.7%), beyond the noise "
                   "(58 ns) and above --fail-above 10%\n")
    assert cli.main(["compare", b, a, "--fail-above", "20"]) == 0
    assert capsys.readouterr().err == ""
    assert cli.main(["compare", b, a]) == 0                 # without --fail-above: 0
    assert cli.main(["compare", a, b, "--fail-above", "0"]) == 0        # faster
    capsys.readouterr()
    # one iteration: nothing can be called; status 0, and stderr says why
    xsp.save(loop([100], [50], 30), str(tmp_path / "b1.xsp"))
    xsp.save(loop([900], [50], 30), str(tmp_path / "a1.xsp"))
    assert cli.main(["compare", str(tmp_path / "b1.xsp"), str(tmp_path / "a1.xsp"),
                     "--fail-above", "1"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("xsp compare: --fail-above: a run has fewer than 2 iterations")
    assert cli.main(["compare", b, a, "--fail-above", "-1"]) == 1
    assert capsys.readouterr().err == \
        "xsp: error: --fail-above must be a percentage >= 0, not -1.0\n"


def _recorded(batchnorm):
    """A tiny nn.Sequential trained for 4 steps under xsp.profile(levels="ML"), xsp.step()
    after each; with batchnorm a BatchNorm1d is inserted after the first Linear."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), *([nn.BatchNorm1d(16)] if batchnorm else []),
                          nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 8)

    def one():
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    one()                                   # warm up outside the profile
    with xsp.profile(levels="ML") as prof:
        for _ in range(4):
            one()
            xsp.step()
    return prof.trace


def test_two_recorded_runs_end_to_end():
    c = compare(_recorded(False), _recorded(True))
    assert c.iterations == (4, 4) and c.latency == "step"
    s = c.summary.set_index("figure")
    for fig in ("step", "forward", "backward", "optimizer"):
        assert s.loc[fig, "before_ns"] > 0 and s.loc[fig, "after_ns"] > 0, fig
    assert np.isfinite(s["noise_ns"]).all()
    # the BatchNorm1d renames "1" and "2"; "3" is new; only "0" is compared, forward and
    # backward (its AddmmBackward0)
    assert c.retyped[["name", "before_type", "after_type"]].values.tolist() == [
        ["1", "ReLU", "BatchNorm1d"], ["2", "Linear", "ReLU"]]
    assert c.added[["name", "type"]].values.tolist() == [["3", "Linear"]]
    assert len(c.removed) == 0
    assert sorted(map(tuple, c.layers[["name", "type", "pass"]].values.tolist())) == [
        ("0", "Linear", "backward"), ("0", "Linear", "forward")]
    assert "aten::native_batch_norm" in set(c.ops["name"])
    ops = c.ops.set_index("name")
    assert ops.loc["aten::native_batch_norm", "before_ns"] == 0
    assert set(c.layers["verdict"]) <= {"slower", "faster", "within noise"}
    text = xsp.report.text(c, top=5)
    assert "Layers retyped" in text and "Layers added" in text


# -- exact differences on real runs -----------------------------------------------------------
def _mlp_run(fake_clock, extra=False, batch=4, memory=False):
    """An MLP (Linear 8->16, ReLU, [Linear 16->16,] Linear 16->4) run 3 times under
    xsp.profile(levels="ML", record_shapes=True), xsp.step() after each, on the core's fake
    clock (every reading 10 ns after the last): times follow from the spans recorded, not from
    the machine.  extra: the third Linear; batch: the input's rows; memory: profile_memory
    instead of record_shapes."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), *([nn.Linear(16, 16)] if extra else []),
                          nn.Linear(16, 4))
    x = torch.randn(batch, 8)
    with torch.no_grad():
        model(x)                            # warm up outside the profile
        fake_clock(1000, 10)
        opts = {"profile_memory": True} if memory else {"record_shapes": True}
        with xsp.profile(levels="ML", **opts) as prof:
            for _ in range(3):
                model(x)
                xsp.step()
        fake_clock(0, 0)
    return prof.trace


def _changes(c):
    return [(r["figure"], r["name"], r["inputs"], r["before"], r["after"])
            for _, r in c.changes.iterrows()]


def test_an_extra_linear_is_listed_exactly_op_calls_shapes_and_flops(fake_clock):
    """Regression: compare ranked times only, so an extra layer showed as a few "slower" rows
    among noise.  The exact figures come first: one more aten::linear (and the ops it calls)
    per iteration, its inputs, and its 2 x 4 x 16 x 16 = 2048 FLOPs."""
    c = compare(_mlp_run(fake_clock), _mlp_run(fake_clock, extra=True))
    assert c.changed and c.iterations == (3, 3)
    got = _changes(c)
    calls = [g[1:2] + g[3:] for g in got if g[0] == "op calls"]
    assert calls == [("aten::linear", 2, 3), ("aten::t", 2, 3), ("aten::transpose", 2, 3),
                     ("aten::as_strided", 4, 6), ("aten::addmm", 2, 3), ("aten::expand", 2, 3),
                     ("aten::copy_", 2, 3), ("aten::resolve_conj", 4, 6)]
    shapes = {g[1:5] for g in got if g[0] == "input shapes"}
    assert ("aten::linear", "[[4, 16], [16, 16], [16]]", 0, 1) in shapes
    assert ("aten::addmm", "[[16], [4, 16], [16, 16], [], []]", 0, 1) in shapes
    # FLOPs: addmm 2*4*8*16 + 2*4*16*4 = 1536 before, + 2*4*16*16 = 3584 after
    assert [g[1:2] + g[3:] for g in got if g[0] == "FLOPs"] == [
        ("(total)", 1536, 3584), ("aten::addmm", 1536, 3584)]
    # bytes moved by the new addmm: reads bias 16, input 4x16, weight 16x16, writes 4x16
    # floats: (16 + 64 + 256 + 64) * 4 = 1600
    by = {g[1]: (g[3], g[4]) for g in got if g[0] == "bytes moved"}
    assert by["aten::addmm"][1] - by["aten::addmm"][0] == 1600
    assert c.not_compared == {f: "level G not in either run" for f in (
        "kernel launches", "copies", "memsets", "syncs")} | {
        f: "profile_memory=True not in either run" for f in ("allocations", "bytes allocated")}
    assert c.added[["name", "type"]].values.tolist() == [["3", "Linear"]]
    text = xsp.report.text(c)
    lines = text.splitlines()
    assert lines[4].startswith("21 exact differences; ")
    e = lines.index("Exact differences (per iteration; counted, not timed: no noise)")
    assert lines[e + 1].split() == ["figure", "name", "inputs", "before", "after", "change"]
    assert lines[e + 2].split() == ["op", "calls", "aten::linear", "2", "3", "+1"]
    flops = [ln.split() for ln in lines if ln.startswith("  FLOPs")]
    assert flops[0] == ["FLOPs", "(total)", "1,536", "3,584", "+2,048"]
    # the exact section comes before the times
    assert e < lines.index("Layers added (in after only; time per iteration)")
    # on the fake clock the extra layer's spans add time in every iteration alike: the step
    # is slower, and the ops that explain it come first
    assert c.summary["verdict"][0] == "slower"
    assert c.ops["verdict"].iloc[0] == "slower"
    assert c.ops["delta_ns"].iloc[0] == c.ops["delta_ns"].max()


def test_another_batch_size_changes_the_shapes_and_flops_not_the_op_calls(fake_clock):
    c = compare(_mlp_run(fake_clock), _mlp_run(fake_clock, batch=6))
    got = _changes(c)
    assert {g[0] for g in got} == {"input shapes", "FLOPs", "bytes moved"}
    shapes = [g[1:5] for g in got if g[0] == "input shapes"]
    assert ("aten::linear", "[[4, 8], [16, 8], [16]]", 1, 0) in shapes
    assert ("aten::linear", "[[6, 8], [16, 8], [16]]", 0, 1) in shapes
    assert ("aten::relu", "[[6, 16]]", 0, 1) in shapes
    assert len(shapes) == 22            # 11 signatures with 4 rows, each gone, 11 with 6
    # FLOPs scale with the batch: 1536 * 6 / 4
    assert [g[1:2] + g[3:] for g in got if g[0] == "FLOPs"] == [
        ("(total)", 1536, 2304), ("aten::addmm", 1536, 2304)]


def test_identical_workloads_have_no_exact_difference_whatever_the_timing(fake_clock):
    """The exact part never depends on time: two runs of one model, one on the fake clock and
    one on the real clock, do the same work."""
    before = _mlp_run(fake_clock)
    torch.manual_seed(0)
    after = _mlp_run(fake_clock)
    c = compare(before, after)
    assert not c.changed and len(c.changes) == 0
    assert c.headline() == "no difference beyond noise; 16 rows within noise"
    text = xsp.report.text(c)
    assert text.splitlines()[4] == "no difference beyond noise; 16 rows within noise"
    assert "Exact differences: none (op calls, input shapes, FLOPs, bytes moved compared)" \
        in text
    # on the real clock the times differ, the exact figures do not
    model, x = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), torch.randn(4, 8)
    with torch.no_grad(), xsp.profile(levels="ML", record_shapes=True) as prof:
        for _ in range(3):
            model(x)
            xsp.step()
    real = compare(before, prof.trace)
    assert len(real.changes) == 0 and not real.changed
    assert real.headline().startswith(("no difference beyond noise", "no exact difference"))


def test_bytes_allocated_from_profile_memory(fake_clock):
    same = compare(_mlp_run(fake_clock, memory=True), _mlp_run(fake_clock, memory=True))
    assert not same.changed and "bytes allocated" not in same.not_compared
    c = compare(_mlp_run(fake_clock, memory=True), _mlp_run(fake_clock, batch=6, memory=True))
    # the outputs of both addmm and the relu, float32: (4x16 + 4x16 + 4x4) x 4 bytes -> with
    # 6 rows (6x16 + 6x16 + 6x4) x 4
    assert _changes(c) == [("bytes allocated", "cpu", "", 576, 864)]
    assert c.not_compared["FLOPs"] == "record_shapes=True not in either run"
    # one run with shapes, one without: the shapes are not compared, and it says which
    mixed = compare(_mlp_run(fake_clock), _mlp_run(fake_clock, memory=True))
    assert mixed.not_compared["input shapes"] == "record_shapes=True not in after"
    assert mixed.not_compared["allocations"] == "profile_memory=True not in before"


def test_cli_fail_on_change(tmp_path, capsys, fake_clock):
    xsp.save(_mlp_run(fake_clock), str(tmp_path / "b.xsp"))
    xsp.save(_mlp_run(fake_clock, extra=True), str(tmp_path / "a.xsp"))
    xsp.save(_mlp_run(fake_clock), str(tmp_path / "same.xsp"))
    b, a, same = (str(tmp_path / f) for f in ("b.xsp", "a.xsp", "same.xsp"))
    assert cli.main(["compare", b, a]) == 0              # without the flag: 0
    capsys.readouterr()
    assert cli.main(["compare", b, a, "--fail-on-change"]) == 4
    err = capsys.readouterr().err
    assert err == ("xsp compare: the runs did different work: 21 exact differences, the first "
                   "op calls aten::linear 2 -> 3 per iteration (--fail-on-change)\n")
    assert cli.main(["compare", b, same, "--fail-on-change"]) == 0
    assert capsys.readouterr().err == ""
    # --fail-above's status wins: the step got slower beyond noise (the fake clock's spans)
    assert cli.main(["compare", b, a, "--fail-above", "1", "--fail-on-change"]) == 3
