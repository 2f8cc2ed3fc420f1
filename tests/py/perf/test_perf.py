"""xsp.perf, the library under the pytest plugin: the counts a performance test pins, checked
against torch.profiler and Dynamo on the same work; budgets and baselines with exact values
(synthetic samples and traces); hostile result files."""
import json
import math

import numpy as np
import pytest
import torch

import xsp
from xsp import _core, perf
from xsp.values.measurement import Measurement
from xsp.values.trace import KINDS, Trace


def mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x = torch.randn(16, 32)

    def step():
        model(x).sum().backward()
    return step


# -- against the real thing -----------------------------------------------------------------
def test_op_counts_equal_torch_profiler():
    step = mlp()
    r = perf.measure(step, levels="ML", repeat=3, warmup=1)
    step()
    n = 4
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
        for _ in range(n):
            step()
    theirs = {}
    for e in p.events():
        if e.name.startswith(("aten::", "autograd::engine::")):
            theirs[e.name] = theirs.get(e.name, 0) + 1
    assert all(v % n == 0 for v in theirs.values())
    assert r.ops == {k: v // n for k, v in theirs.items()}
    assert r.counts["ops_total"] == sum(r.ops.values())
    assert r.data["varying"] == {}


def test_bytes_allocated_equal_torch_profiler_memory():
    step = mlp()
    r = perf.measure(step, levels="M", repeat=2, warmup=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as p:
        step()
    allocs, nbytes = 0, 0

    def walk(e):
        nonlocal allocs, nbytes
        if type(e.extra_fields).__name__ == "_ExtraFields_Allocation" and \
                e.extra_fields.alloc_size > 0:
            allocs += 1
            nbytes += e.extra_fields.alloc_size
        for c in e.children:
            walk(c)
    for root in p.profiler.kineto_results.experimental_event_tree():
        walk(root)
    assert allocs > 0
    assert (r.counts["allocations"], r.counts["bytes_allocated"]) == (allocs, nbytes)
    # M only: no op counts, and budgets on them say why they cannot be checked
    assert r.counts["ops_total"] is None and r.ops == {}
    with pytest.raises(perf.BudgetExceeded, match="ops budget cannot be checked: level L "
                                                  "not measured"):
        r.check(ops=10)


def test_memory_counter_refuses_beside_torch_profiler():
    from xsp import _torch
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True):
        with pytest.raises(RuntimeError, match="another profiler .* holds this thread's "
                                               "profiler state"):
            _torch.mem_begin()
        r = perf.measure(mlp(), levels="M", repeat=2, warmup=0)
    assert r.counts["bytes_allocated"] is None
    assert "holds this thread's profiler state" in r.data["unmeasured"]["bytes_allocated"]
    with pytest.raises(RuntimeError, match="no memory counting window is open"):
        _torch.mem_end()


def test_graph_breaks_and_recompiles_are_dynamo_s():
    import torch._dynamo.utils as du

    def fn(x):
        y = x * 2
        if y.sum().item() > 0:          # a graph break: Tensor.item()
            return y + 1
        return y - 1
    f = torch.compile(fn, backend="eager", dynamic=False)
    shapes = iter(range(3, 1000))

    def work():                         # a new shape on every call: a recompile each
        f(torch.ones(next(shapes)))
    torch._dynamo.reset()
    before = sum(du.counters["graph_break"].values())
    n_metrics = len(du.get_compilation_metrics())
    r = perf.measure(work, levels="M", repeat=2, warmup=1, count_memory=False)
    breaks = sum(du.counters["graph_break"].values()) - before
    metrics = list(du.get_compilation_metrics())[n_metrics:]
    assert breaks >= 1 and r.counts["graph_breaks"] == breaks
    assert r.counts["recompiles"] == sum(1 for m in metrics if m.recompile_reason) >= 1
    assert any("Tensor.item()" in k for k in r.compile["graph_break_reasons"])
    assert any("size mismatch" in w for w in r.compile["recompile_reasons"])
    with pytest.raises(perf.BudgetExceeded) as e:
        r.check(graph_breaks=0, recompiles=0)
    msg = str(e.value)
    assert "graph breaks: %d per iteration, budget 0 (+%d)" % (breaks, breaks) in msg
    assert "graph breaks x" in msg and "Tensor.item()" in msg and "size mismatch" in msg
    # nothing compiled in a later measurement: zero, not unknown
    r2 = perf.measure(mlp(), levels="M", repeat=2, warmup=0, count_memory=False)
    assert (r2.counts["graph_breaks"], r2.counts["recompiles"]) == (0, 0)


# -- level G counts from synthetic traces ----------------------------------------------------
L_M, L_L, L_G = 0, 1, 2


def synthetic_trace(run, repeat, extra_kernel_in=None):
    """A measure()-shaped trace of one run: a priming step then `repeat` steps, each a model
    call with one op (ML and deeper) that launches a kernel, copies in and out and syncs
    (MLG).  Iteration extra_kernel_in (0-based, after the priming step) launches a second
    kernel."""
    K = KINDS.index
    spans = []
    t0 = 1000
    spans.append([0, 10 ** 9, -1, L_M, K("region"), "xsp.measure", 0, 0, {}])
    for s in range(repeat + 1):
        b = t0 + s * 10000
        step = len(spans)
        spans.append([b, b + 9000, 0, L_M, K("step"), "step#%d" % s, 0, 0, {}])
        model = len(spans)
        spans.append([b + 10, b + 8000, step, L_M, K("model"), "Net", 0, 0, {"type": "Net"}])
        if run == "M":
            continue
        op = len(spans)
        spans.append([b + 20, b + 7000, model, L_L, K("op"), "aten::mm", 0, 0, {}])
        if run != "MLG":
            continue
        spans.append([b + 30, b + 40, op, L_G, K("kernel"), "gemm", 1, 0, {}])
        if s - 1 == extra_kernel_in:
            spans.append([b + 41, b + 45, op, L_G, K("kernel"), "gemm", 1, 0, {}])
        spans.append([b + 50, b + 60, op, L_G, K("memcpy"), "Memcpy HtoD", 1, 0,
                      {"copy_kind": 1, "bytes": 4096}])
        spans.append([b + 70, b + 80, op, L_G, K("memcpy"), "Memcpy DtoH", 1, 0,
                      {"copy_kind": 2, "bytes": 16}])
        spans.append([b + 90, b + 100, op, L_G, K("sync"), "cudaStreamSynchronize", 1, 0,
                      {"sync_type": 3}])
    return Trace(_core.build(spans, [(100, "main", 0), (7, "stream 7", 1)],
                             {"levels": run}, {}))


def test_gpu_counts_from_the_mlg_run():
    repeat = 3
    traces = {r: synthetic_trace(r, repeat, extra_kernel_in=1) for r in ("M", "ML", "MLG")}
    m = Measurement("MLG", traces, warmup=0, repeat=repeat, trim=0.0, batch_size=None)
    r = perf.from_measurement(m, name="synthetic")
    assert r.latency.samples_ns == (9000.0,) * 3
    assert r.ops == {"aten::mm": 1}
    c = r.counts
    assert (c["kernels"], c["copies"], c["copies_htod"], c["copies_dtoh"], c["copy_bytes"],
            c["syncs"]) == (2, 2, 1, 1, 4112, 1)
    assert r.kernels_by_name == {"gemm": 2}
    # the pinned count is the largest; the spread over the iterations is kept
    assert r.data["varying"] == {"kernel gemm": [1, 2], "kernels": [1, 2]}
    assert r.data["times"]["kernels"] == {"gemm": [10.0, 14.0, 10.0]}
    with pytest.raises(perf.BudgetExceeded) as e:
        r.check(kernels={"gemm": 1}, syncs=0, copy_bytes="4 KiB")
    assert e.value.failures == [
        "gemm: 2 launches per iteration, budget 1 (+1)",
        "synchronisations: 1 per iteration, budget 0 (+1)",
        "bytes copied: 4.0 KiB per iteration, budget 4.0 KiB (+16 B)"]
    r.check(kernels=2, copies=2, copies_htod=1, copies_dtoh=1, syncs=1)
    # against itself: equal; against a run without the extra kernel: the count changed
    assert r.compare(r).status == "ok"
    base = perf.from_measurement(Measurement(
        "MLG", {x: synthetic_trace(x, repeat) for x in ("M", "ML", "MLG")}, warmup=0,
        repeat=repeat, trim=0.0, batch_size=None), name="synthetic")
    v = r.compare(base)
    assert v.status == "counts changed"
    assert v.count_changes == [("kernel launches", 1, 2), ("kernel gemm", 1, 2)]
    assert r.compare(base, allow={"kernels": 1, "kernels_by_name": 1}).status == "ok"


def test_without_g_kernel_budgets_say_why():
    traces = {r: synthetic_trace(r, 2) for r in ("M", "ML")}
    r = perf.from_measurement(Measurement("ML", traces, 0, 2, 0.0, None), name="cpu")
    assert r.counts["kernels"] is None
    with pytest.raises(perf.BudgetExceeded) as e:
        r.check(kernels=3, syncs=0)
    assert e.value.failures == ["kernels budget cannot be checked: level G not measured",
                                "synchronisations budget cannot be checked: level G not "
                                "measured"]


# -- budgets and baselines on exact samples ---------------------------------------------------
def result(samples, ops=None, layers=None, name="w"):
    """A Result from samples (ns) and op counts, the way a loaded one looks."""
    n = len(samples)
    return perf.from_dict({
        "schema": perf.SCHEMA, "name": name, "levels": "ML", "runs": ["M", "ML"],
        "repeat": n, "rounds": 1, "warmup": 0,
        "latency": {"samples_ns": list(samples), **perf.stats(samples)},
        "counts": dict({k: None for k in perf.COUNTS}, ops_total=sum((ops or {}).values())),
        "named": {"ops": dict(ops or {}), "kernels_by_name": {}},
        "times": {"layers": layers or {}, "ops": {}, "kernels": {}},
        "unmeasured": {}, "varying": {}, "step_ns": {"ML": float(np.mean(samples))}})


def test_latency_budget_is_beyond_noise_only():
    # mean 1000, sample std 100 (ddof 1) over 4 samples: noise = 2 * 100 / sqrt(4) = 100
    r = result([900, 900, 1100, 1100])
    assert r.latency.std_ns == pytest.approx(2 / math.sqrt(3) * 100)
    s = r.latency.std_ns
    noise = 2 * s / 2
    r.check(latency="%f ns" % (1000 - noise + 0.01))         # within the noise: passes
    with pytest.raises(perf.BudgetExceeded) as e:
        r.check(latency="%f ns" % (1000 - noise - 1))
    assert e.value.failures[0].startswith("latency 1.000 us ± %s (4 iterations) is over the "
                                          "budget" % xsp.core.fmt.fmt_ns(s))
    # one sample has no spread: a mean over the budget fails
    with pytest.raises(perf.BudgetExceeded):
        result([1000]).check(latency=999e-9)
    result([1000]).check(latency=1e-6)


def test_baseline_latency_verdicts_and_threshold():
    base = result([1000, 1010, 990, 1000, 1000])
    same = result([1000, 1005, 995, 1000, 1000])
    assert base.compare(same).status == "ok"
    slow = result([1100, 1110, 1090, 1100, 1100])          # +10 %, far beyond the noise
    v = slow.compare(base, threshold=5)
    assert (v.status, v.regressed, v.latency["verdict"]) == ("regressed", True, "slower")
    assert v.latency["delta_share"] == pytest.approx(0.1)
    assert v.lines() == ["latency 1.000 us -> 1.100 us: +100 ns (+10.0%%), beyond the noise "
                         "(%s) and the threshold (5%%)" % xsp.core.fmt.fmt_ns(
                             v.latency["noise_ns"])]
    assert slow.compare(base, threshold=10.5).status == "ok"      # within the threshold
    fast = result([900, 910, 890, 900, 900])
    assert fast.compare(base).status == "faster" and not fast.compare(base).failed
    # a single sample on a side: the spread is unknown, nothing is called
    assert result([5000]).compare(result([1000])).status == "ok"


def test_baseline_offenders_are_the_layers_that_grew():
    base = result([1000] * 4 + [1002], layers={"fc1|Linear": [300.0] * 4 + [301.0],
                                               "act|ReLU": [50.0] * 4 + [51.0]})
    slow = result([1300] * 4 + [1302], layers={"fc1|Linear": [600.0] * 4 + [601.0],
                                               "act|ReLU": [50.0] * 4 + [51.0]})
    v = slow.compare(base)
    assert [w for w, _ in v.offenders] == ["layer fc1 (Linear)"]
    with pytest.raises(perf.BudgetExceeded) as e:
        v.check()
    assert "layer fc1 (Linear)" in str(e.value) and "+300 ns (+99.9%)" in str(e.value)


def test_count_allowances():
    base = result([1000, 1001], ops={"aten::mm": 10, "aten::add": 2})
    after = result([1000, 1001], ops={"aten::mm": 11, "aten::add": 2})
    assert after.compare(base).count_changes == [("ops", 12, 13), ("op aten::mm", 10, 11)]
    assert after.compare(base, allow={"ops": 1, "ops_total": 1}).status == "ok"
    assert after.compare(base, allow={"op:aten::mm": "10%", "ops_total": "10%"}).status == "ok"
    assert after.compare(base, allow={"op:aten::mm": "5%", "ops_total": 1}).status == \
        "counts changed"
    with pytest.raises(ValueError, match="allowance for ops must be an int or 'N%'"):
        after.compare(base, allow={"ops": "lots"})


def test_units_and_budget_arguments():
    assert perf.parse_duration("2 ms") == 2e6 and perf.parse_duration("150us") == 150e3
    assert perf.parse_duration(0.5) == 5e8 and perf.parse_duration("800 ns") == 800
    assert perf.parse_bytes("4 MiB") == 4 << 20 and perf.parse_bytes("512 kB") == 512000
    assert perf.parse_bytes(7) == 7 and perf.parse_bytes("10") == 10
    for bad in ("2 parsecs", "fast", -1, 0, True):
        with pytest.raises(ValueError, match="latency must be"):
            perf.parse_duration(bad)
    with pytest.raises(ValueError, match="units B, kB"):
        perf.parse_bytes("4 MiBs")
    r = result([1000, 1001])
    with pytest.raises(TypeError, match="unknown budget 'latncy'"):
        r.check(latncy="1 ms")
    with pytest.raises(ValueError, match="the syncs budget must be an int >= 0"):
        r.check(syncs=-1)


# -- files ----------------------------------------------------------------------------------
def test_save_load_round_trip(tmp_path):
    r = perf.measure(mlp(), levels="ML", repeat=2, warmup=0)
    p = xsp.save(r, str(tmp_path / "r.json"))
    back = perf.load(p)
    assert back.data == json.loads(r.to_json()) and back.path == p
    assert back.compare(r).status == "ok" and back.trace is None


@pytest.mark.parametrize("content, offset, words", [
    (b'{"schema": "xsp.perf/1", "name": ', 33, "malformed JSON"),
    (b'{"a": 1}\xff', 8, "not UTF-8"),
    (b'[1, 2]', None, "(top level) is a list"),
    (b'{"schema": "other"}', None, "schema is 'other'"),
])
def test_hostile_result_files(tmp_path, content, offset, words):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(perf.BaselineError) as e:
        perf.load(str(p))
    assert e.value.path == str(p) and e.value.offset == offset
    assert str(e.value).startswith(str(p) + ": ") and words in str(e.value)
    if offset is not None:
        assert "byte %d" % offset in str(e.value)


def test_hostile_fields(tmp_path):
    good = json.loads(result([1000, 1001], ops={"aten::mm": 1}).to_json())
    for path, value, field in ((("latency", "samples_ns"), [1, "x"], "latency.samples_ns"),
                               (("named", "ops"), {"aten::mm": 1.5}, "named.ops"),
                               (("times", "layers"), {"a": [True]}, "times.layers"),
                               (("counts", "syncs"), True, "counts.syncs"),
                               (("repeat",), "3", "repeat")):
        doc = json.loads(json.dumps(good))
        d = doc
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
        p = tmp_path / "f.json"
        p.write_text(json.dumps(doc))
        with pytest.raises(perf.BaselineError) as e:
            perf.load(str(p))
        assert e.value.field == field, field


def test_layer_budgets(fake_clock):
    # the fake clock makes every iteration's layer time the same, so the budget rule has no
    # noise to forgive and its verdict is exact on any machine
    step = mlp()
    fake_clock(1000, 10)
    r = perf.measure(step, levels="ML", repeat=3, warmup=1, count_memory=False)
    fake_clock(0, 0)
    mods = r.data["times"]["modules"]
    assert sorted(mods) == ["0|Linear", "1|ReLU", "2|Linear"]
    fc = mods["0|Linear"]
    assert len(set(fc)) == 1 and fc[0] > 1, fc
    r.check(layers={"0": "1 s"})
    with pytest.raises(perf.BudgetExceeded) as e:
        r.check(layers={"0": "1 ns", "enc": "1 ms"})
    assert e.value.failures[0].startswith("layer 0: %s ± " % xsp.core.fmt.fmt_ns(np.mean(fc)))
    assert "is over the budget 1 ns by" in e.value.failures[0]
    assert e.value.failures[1] == "layer enc: no module of that name ran (modules: 0, 1, 2)"
    m_only = perf.measure(step, levels="M", repeat=2, warmup=0, count_memory=False)
    with pytest.raises(perf.BudgetExceeded, match="layer 0 budget cannot be checked: level L "
                                                  "not measured"):
        m_only.check(layers={"0": "1 ms"})
