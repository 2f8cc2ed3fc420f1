"""Leveled measurement (xsp.measure) with the core's fake clock: every clock reading advances
it by a fixed step, so what each deeper level adds is known exactly.  In run M a model span
reads the clock twice (begin, end); in run ML each of the n spans recorded inside it reads it
twice more, so the model span grows from 1 to 1 + 2n steps: the L level's overhead on M.  A
module that reads the clock k times itself (Tick) makes the latencies vary per iteration."""
import io
import sys

import numpy as np
import pytest
import torch
from torch import nn

import xsp
from xsp import _core
from xsp.producers.leveled import _Progress
from xsp.values.measurement import trimmed_stats
from helpers import descendants

STEP = 1000


class Tick(nn.Module):
    """Reads the (fake) clock ks[i] times on its i-th call: k steps of model time."""

    def __init__(self, ks):
        super().__init__()
        self.ks = list(ks)
        self.calls = 0

    def forward(self, x):
        k = self.ks[self.calls] if self.calls < len(self.ks) else 0
        self.calls += 1
        for _ in range(k):
            _core.now()
        return x


def test_trimmed_stats():
    assert trimmed_stats([6, 2, 3, 4], 0.25) == (3.5, 0.5, 2.0, 6.0, 4)
    assert trimmed_stats([5], 0.4) == (5.0, 0.0, 5.0, 5.0, 1)
    assert trimmed_stats([1, 2, 3, 100], 0.0) == (26.5, np.std([1, 2, 3, 100]), 1.0, 100.0, 4)
    m = trimmed_stats([], 0.1)
    assert np.isnan(m[0]) and m[4] == 0


def test_leveled_latencies_and_overhead_exact(fake_clock, one_thread):
    # warm-up 1 call, run M: a priming call (left out) and 4 calls, run ML the same
    tick = Tick([0, 9, 5, 1, 2, 3, 9, 1, 1, 1, 1])
    model = nn.Sequential(nn.Linear(4, 4), tick)
    x = torch.randn(2, 4)
    fake_clock(10_000_000, STEP)
    with torch.no_grad():
        m = xsp.measure(lambda: model(x), levels="ML", warmup=1, repeat=4, trim=0.25,
                        progress=False)
    assert m.runs == ("M", "ML") and m.levels == "ML" and tick.calls == 11
    tm, tml = m.traces["M"], m.traces["ML"]
    # run M: per iteration, model = (1 + k) steps, step = model + 2 steps
    models_m = tm.spans(kind="model")
    assert [s.duration_ns for s in models_m] == [10 * STEP, 6 * STEP, 2 * STEP, 3 * STEP,
                                                 4 * STEP]
    assert [s.duration_ns for s in tm.spans(kind="step")] == [12 * STEP, 8 * STEP, 4 * STEP,
                                                              5 * STEP, 6 * STEP]
    # run ML: n spans inside each model span, k = 1 each time
    models_ml = tml.spans(kind="model")
    n = descendants(tml, models_ml[0].id)
    assert n >= 4     # two module spans, aten::linear and what it calls
    assert [s.duration_ns for s in models_ml] == [(10 + 2 * n) * STEP] + [(2 + 2 * n) * STEP] * 4

    t = m.span_table()
    assert t["id"].tolist() == list(range(len(t)))
    assert t.loc[0, "kind"] == "step" and t.loc[0, "parent"] == -1
    model_row = t[t["kind"] == "model"].iloc[0]
    # latency of the model from run M: trimmed mean of 6,2,3,4 (drop 2 and 6) = 3.5 steps
    assert model_row["latency_ns"] == 3.5 * STEP and model_row["duration_ns"] == 3500
    assert model_row["std_ns"] == 0.5 * STEP
    assert (model_row["min_ns"], model_row["max_ns"]) == (2 * STEP, 6 * STEP)
    assert model_row["samples"] == 4 and model_row["source_run"] == "M"
    assert model_row["ns_M"] == 3.5 * STEP and model_row["ns_ML"] == (2 + 2 * n) * STEP
    # layers come from run ML; the Tick layer read the clock once: 1 + 1 steps
    tick_row = t[(t["kind"] == "module") & (t["name"] == "1")].iloc[0]
    assert tick_row["source_run"] == "ML" and tick_row["latency_ns"] == 2 * STEP
    assert np.isnan(tick_row["ns_M"])
    lin = t[(t["kind"] == "module") & (t["name"] == "0")].iloc[0]
    assert lin["latency_ns"] == (1 + 2 * descendants(tml, tml.spans(name="0")[0].id)) * STEP
    assert (t.loc[t["kind"] != "step", "parent"] >= 0).all()

    ov = m.overhead
    assert ov[["level", "run"]].values.tolist() == [["M", "M"], ["M", "ML"], ["L", "ML"]]
    # M: the step, (1 + k + 2) steps in run M: 8,4,5,6 -> trimmed mean 5.5
    assert ov.loc[0, "latency_ns"] == 5.5 * STEP and ov.loc[0, "added_ns"] == 0
    # run ML: step = model (2 + 2n) + 2
    assert ov.loc[1, "latency_ns"] == (4 + 2 * n) * STEP
    assert ov.loc[1, "added_ns"] == (4 + 2 * n) * STEP - 5.5 * STEP
    assert ov.loc[1, "added_share"] == pytest.approx(((4 + 2 * n) - 5.5) / 5.5)
    # L: the two module spans directly under the model
    assert ov.loc[2, "latency_ns"] == lin["latency_ns"] + 2 * STEP
    assert m.latency_ns == 5.5 * STEP
    assert m.unmatched == {"M": 0, "ML": 0}
    # noise: 2 standard errors of the difference; run M keeps 5, 6 (sample variance 0.5
    # steps^2, 2 samples), run ML is constant: noise = 2 * sqrt(0.5 / 2) steps = 1 step, far
    # below what L added
    assert np.isnan(ov.loc[0, "noise_ns"]) and not ov.loc[0, "within_noise"]
    assert ov.loc[1, "noise_ns"] == pytest.approx(2 * np.sqrt(0.5 * STEP ** 2 / 2))
    assert not ov.loc[1, "within_noise"]


def test_positional_matching_with_repeated_modules(fake_clock, one_thread):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.act = nn.ReLU()
            self.tick = Tick([3, 1] * 4)

        def forward(self, x):
            return self.tick(self.act(self.tick(self.act(x))))

    net = Net()
    fake_clock(1_000_000, STEP)
    m = xsp.measure(lambda: net(torch.ones(3)), levels="ML", warmup=0, repeat=1,
                    progress=False)
    t = m.span_table()
    ticks = t[(t["kind"] == "module") & (t["name"] == "tick")]
    acts = t[(t["kind"] == "module") & (t["name"] == "act")]
    assert len(ticks) == 2 and len(acts) == 2
    # each run: a priming call (ticks 3, 1), then the measured one (3, 1): first tick 3 + 1
    assert ticks["latency_ns"].tolist() == [4 * STEP, 2 * STEP]


def test_interleaved_rounds_pool_their_samples(fake_clock, one_thread):
    # sessions in the order M, ML, M, ML; each: a priming call (9 ticks), then 2 calls
    tick = Tick([9, 1, 2, 9, 1, 1, 9, 3, 4, 9, 1, 1])
    model = nn.Sequential(tick)
    x = torch.ones(1)
    fake_clock(5_000_000, STEP)
    m = xsp.measure(lambda: model(x), levels="ML", warmup=0, repeat=2, rounds=2, trim=0.25,
                    progress=False)
    assert m.rounds == 2 and [len(m.all_traces[r]) for r in m.runs] == [2, 2]
    assert m.traces["M"] is m.all_traces["M"][0] and m.trace is m.all_traces["ML"][0]
    row = m.span_table().query("kind == 'model'").iloc[0]
    # run M's model: 1 + k ticks for k = 1, 2 (round 1) and 3, 4 (round 2): 2, 3, 4, 5 steps;
    # trimmed (one off each end): 3.5 steps
    assert row["samples"] == 4 and row["latency_ns"] == 3.5 * STEP
    assert (row["min_ns"], row["max_ns"]) == (2 * STEP, 5 * STEP)
    ov = m.overhead
    assert ov.loc[0, "latency_ns"] == (3.5 + 2) * STEP       # the step: model + 2 reads
    assert m.unmatched == {"M": 0, "ML": 0}
    with pytest.raises(ValueError, match="rounds must be an int >= 1"):
        xsp.measure(lambda: None, levels="M", rounds=0)


def test_record_function_around_the_model_keeps_the_m_latency(fake_clock, one_thread):
    """An L span (a record_function scope) around the model call exists in run ML only: the
    model span is keyed by its M ancestors, so its latency still comes from run M."""
    model = nn.Sequential(nn.Linear(2, 2))
    x = torch.ones(1, 2)

    def fn():
        with torch.profiler.record_function("forward"):
            model(x)

    fake_clock(1_000_000, STEP)
    with torch.no_grad():
        m = xsp.measure(fn, levels="ML", warmup=0, repeat=2, progress=False)
    t = m.span_table()
    row = t[t["kind"] == "model"].iloc[0]
    assert row["source_run"] == "M" and row["ns_M"] == STEP and row["latency_ns"] == STEP
    assert m.unmatched == {"M": 0, "ML": 0}
    assert t.loc[t["kind"] == "scope", "name"].tolist() == ["forward"]
    # the L level's time per iteration is the scope's (the modules inside it count once)
    scopes = [sp.duration_ns for sp in m.traces["ML"].spans(kind="scope")][1:]   # no priming
    ov = m.overhead.set_index(["level", "run"])
    assert ov.loc[("L", "ML"), "latency_ns"] == np.mean(scopes)


def test_fn_that_steps_itself_is_refused():
    def fn():
        xsp.step()

    with pytest.raises(xsp.ProfilerError, match=r"calls prof.step\(\) or xsp.step\(\) itself"):
        xsp.measure(fn, levels="M", warmup=0, repeat=2, progress=False)


def test_measure_arguments():
    f = lambda: None  # noqa: E731
    with pytest.raises(ValueError, match="prefixes M, ML, MLG"):
        xsp.measure(f, levels="L")
    with pytest.raises(ValueError, match="unknown level letter 'Q'"):
        xsp.measure(f, levels="Q")
    with pytest.raises(ValueError, match="repeat must be an int >= 1"):
        xsp.measure(f, levels="M", repeat=0)
    with pytest.raises(ValueError, match="warmup must be an int >= 0"):
        xsp.measure(f, levels="M", warmup=-1)
    with pytest.raises(ValueError, match=r"trim must be a fraction in \[0, 0.5\)"):
        xsp.measure(f, levels="M", trim=0.5)
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        xsp.measure(f, levels="M", batch_size=0)
    with pytest.raises(TypeError, match="fn must be callable"):
        xsp.measure(3, levels="M")


def test_g_without_gpu_raises_or_falls_back():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    model = nn.Linear(2, 2)
    x = torch.ones(1, 2)
    with pytest.raises(xsp.LevelUnavailableError, match="level G cannot be recorded"):
        xsp.measure(lambda: model(x), levels="MLG", repeat=1, progress=False)
    with pytest.warns(xsp.XSPWarning, match="measuring M and L only"):
        m = xsp.measure(lambda: model(x), levels="MLG", repeat=2, progress=False,
                        gpu_fallback=True)
    assert m.levels == "ML" and m.runs == ("M", "ML")


class _Tty(io.StringIO):
    """A terminal stand-in that logs, for each write, whether a profile was recording."""

    def __init__(self, tty=True):
        super().__init__()
        self.tty, self.log = tty, []

    def isatty(self):
        return self.tty

    def write(self, text):
        self.log.append((_core.active(), text))
        return super().write(text)


def _add_fn():
    import models
    add, a = models.Add(), torch.ones(2)
    return lambda: add(a, a)


def test_progress_bar_only_on_a_terminal(monkeypatch):
    """Regression guard (issue 27: the bar was written on every stream, a log file or a
    notebook's output too): off a terminal, with progress=False, or without tqdm, nothing."""
    for tty, progress in ((False, True), (True, False)):
        err = _Tty(tty)
        monkeypatch.setattr("sys.stderr", err)
        xsp.measure(_add_fn(), levels="ML", warmup=1, repeat=2, progress=progress)
        monkeypatch.undo()
        assert err.getvalue() == "" and err.log == []
    err = _Tty()
    monkeypatch.setitem(sys.modules, "tqdm.autonotebook", None)
    monkeypatch.setattr("sys.stderr", err)
    xsp.measure(_add_fn(), levels="ML", warmup=1, repeat=2)
    monkeypatch.undo()
    assert err.getvalue() == ""


def test_progress_bar_never_writes_inside_a_measured_run(monkeypatch):
    """Regression guard (issue 27: the bar was written after each step(), inside the next
    measured iteration, so its write was timed): on a terminal it is written, and never while
    a profile records; it ends at the total of calls."""
    pytest.importorskip("tqdm")
    err = _Tty()
    monkeypatch.setattr("sys.stderr", err)
    xsp.measure(_add_fn(), levels="ML", warmup=2, repeat=3, rounds=2)
    monkeypatch.undo()
    assert err.log and [t for active, t in err.log if active] == []
    assert "xsp.measure" in err.getvalue()
    assert "18/18" in err.getvalue()            # 2 warm-up + 2 rounds x 2 runs x (3 + 1)
    bar = _Progress(4, True, _Tty(tty=False))   # off a terminal: no bar object at all
    bar.advance("warm-up")
    bar.close()
    assert bar.bar is None and bar.done == 1


def test_measure_real_model_and_sweep(capsys):
    from xsp import models
    model, x = models.get("resnet", batch=2)
    with torch.no_grad():
        m = xsp.measure(lambda: model(x), levels="ML", warmup=1, repeat=3, batch_size=2)
    assert "xsp.measure" not in capsys.readouterr().err     # captured: not a terminal
    t = m.span_table()
    named = {n for n, _ in model.named_modules() if n}
    assert set(t.loc[t["kind"] == "module", "name"]) == named
    assert (t["samples"] == 3).all()
    assert m.unmatched == {"M": 0, "ML": 0}
    assert m.throughput_per_s == pytest.approx(2e9 / m.latency_ns)
    rk = xsp.analysis.layer_ranking(m)
    leaves = {n for n, mod in model.named_modules() if n and not list(mod.children())}
    assert set(rk["name"]) == leaves        # one iteration: calls per forward (relu: 2)
    assert rk["calls"].sum() == t["name"].isin(leaves).sum()
    assert "Overhead per level" in xsp.report.text(m)

    def make(b):
        xb = torch.randn(b, 3, 16, 16)
        return lambda: model(xb)

    with torch.no_grad():
        sw, ms = xsp.sweep(make, [1, 2], warmup=0, repeat=2, progress=False,
                           return_measurements=True)
    assert sw["batch_size"].tolist() == [1, 2]
    assert list(sw.columns) == ["batch_size", "latency_ns", "std_ns", "throughput_per_s",
                                "added_ns"]
    for b, lat, tp in zip(sw["batch_size"], sw["latency_ns"], sw["throughput_per_s"]):
        assert tp == pytest.approx(b * 1e9 / lat)
    assert [mm.levels for mm in ms] == ["M", "M"]
    with pytest.raises(ValueError, match="batch sizes must be positive ints"):
        xsp.sweep(make, [0])
