"""The benchmarks' own machinery: the floor callbacks, the round scheduler, paired differences,
and bench_ops / bench_models run end to end on tiny sizes (their figures are not asserted:
timing is the benchmarks' business, docs/performance.md; their structure is)."""
import os
import re
import sys

import pytest

torch = pytest.importorskip("torch")

import xsp  # noqa: E402
_bench = pytest.importorskip(
    "xsp._bench", reason="a release build: xsp._bench comes with XSP_DEV=1 or XSP_BENCH=1")

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))), "benchmarks")
sys.path.insert(0, BENCH)

import bench_models  # noqa: E402
import bench_ops  # noqa: E402
import common  # noqa: E402


@pytest.mark.parametrize("clock", [False, True])
def test_floor_attach_detach(clock):
    _bench.floor_attach(clock=clock)
    try:
        with pytest.raises(RuntimeError, match="floor callback already attached"):
            _bench.floor_attach()
        # the floor coexists with xsp's own callback: xsp still records every op
        a = torch.ones(2)
        with xsp.profile(levels="L") as p:
            for _ in range(3):
                torch.add(a, a)
        assert [s.name for s in p.trace] == ["aten::add"] * 3
    finally:
        _bench.floor_detach()
    _bench.floor_detach()                # detaching twice is allowed
    _bench.floor_attach(clock=not clock)
    _bench.floor_detach()


def test_floor_attach_bad_argument():
    with pytest.raises(TypeError):
        _bench.floor_attach(clock=True, other=1)
    with pytest.raises(TypeError):
        _bench.floor_attach(1, 2)


def test_rounds_shuffled_each_round_and_seeded():
    log = []

    def variant(k):
        def run():
            log.append(k)
            return {"n": len(log)}
        return run

    names = ["a", "b", "c", "d"]
    res = common.rounds({k: variant(k) for k in names}, 30)
    # every round runs each variant exactly once
    rounds = [log[i:i + 4] for i in range(0, len(log), 4)]
    assert len(rounds) == 30
    assert all(sorted(r) == names for r in rounds)
    # values are kept in round order: the position in the log where each ran
    for k in names:
        assert res[k]["n"] == [i * 4 + r.index(k) + 1 for i, r in enumerate(rounds)]
    # no variant always follows the same other one (what a rotated order would do)
    for k in names:
        before = {r[r.index(k) - 1] for r in rounds if r.index(k) > 0}
        assert len(before) == 3, (k, before)
    # seeded: the same orders again
    first = list(log)
    log.clear()
    common.rounds({k: variant(k) for k in names}, 30)
    assert log == first


def test_paired_scaled_and_ratio():
    # round r: overhead x_r / base_r - 1, in units of the base's median (2.0)
    res = {"x": {"t": [2.0, 6.0, 3.0]}, "base": {"t": [1.0, 4.0, 2.0]}}
    assert common.paired_scaled(res, "x", "base", "t") == [2.0, 1.0, 1.0]
    # a round where the whole machine ran 4x slower counts as the same overhead (0.5 base)
    assert common.med(common.paired_scaled(res, "x", "base", "t")) == 1.0
    assert common.ratio(3.0, 2.0) == "1.50"
    assert common.ratio(3.0, 0.0) == "n/a" and common.ratio(3.0, -1.0) == "n/a"
    assert common.ratio(50.0, 2.0, "%.1f") == "25.0"


ROW = re.compile(r"^(floor|floor\+clock|torch\.profiler|xsp L)\s+(-?[\d.]+) ±([\d.]+)\s+"
                 r"(-?[\d.]+) ±([\d.]+)$")


def test_bench_ops_runs_and_prints_every_variant(capsys):
    assert bench_ops.main(["--ops", "40", "--rounds", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    heads = [i for i, line in enumerate(out) if line.startswith("per-op cost, ")]
    assert [out[i] for i in heads] == [
        "per-op cost, torch.add from a Python loop on 8 floats (cpu), 40 timed ops (after 10 "
        "untimed) x 3 rounds",
        "per-op cost, at::add from a C++ loop on 8 floats (cpu), 40 timed ops (after 10 "
        "untimed) x 3 rounds"]
    for start, end in ((heads[0], heads[1]), (heads[1], len(out))):
        table = out[start:end]
        rows = [m.group(1) for m in map(ROW.match, table) if m]
        assert rows == ["floor", "floor+clock", "torch.profiler", "xsp L"]
        assert sum(line.startswith("ratios: xsp/floor in block ") for line in table) == 1
        assert sum(line.startswith("clock floor: two clock reads per op cost ")
                   for line in table) == 1


def test_bench_ops_one_loop(capsys):
    assert bench_ops.main(["--ops", "8", "--rounds", "1", "--loop", "c++"]) == 0
    out = capsys.readouterr().out
    assert "C++ loop" in out and "Python loop" not in out
    for bad in (["--ops", "3"], ["--rounds", "0"], ["--loop", "c++", "--device", "cuda"]):
        with pytest.raises(SystemExit):
            bench_ops.main(bad)
    err = capsys.readouterr().err
    assert "--ops must be at least 4" in err and "--rounds must be at least 1" in err
    assert "--loop c++ runs CPU tensors only" in err


def test_bench_add_counts_and_errors():
    assert _bench.bench_add(0, 5) < 1_000_000         # nothing timed: a few clock reads
    assert _bench.bench_add(20000, 0) > _bench.bench_add(0, 20000)   # n is timed, warm is not
    with xsp.profile(levels="L") as p:
        _bench.bench_add(7, 3)
    names = [s.name for s in p.trace]
    assert names.count("aten::add") == 10
    with pytest.raises(TypeError):
        _bench.bench_add("x")
    with pytest.raises(ValueError, match="n and warm must be >= 0, got -1 and 0"):
        _bench.bench_add(-1)
    with pytest.raises(ValueError, match="got 1 and -2"):
        _bench.bench_add(1, -2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
@pytest.mark.parametrize("bench", [bench_ops, bench_models])
def test_cuda_refused_clearly_without_a_gpu(bench, capsys):
    assert bench.main(["--device", "cuda"]) == 2
    err = capsys.readouterr().err
    name = bench.__name__
    assert err.startswith(name + ": --device cuda needs level G, unavailable here: ")
    assert err.strip().endswith(xsp.producers.profiler.gpu_unavailable_reason(torch))


def test_bench_session_prints_every_variant(capsys):
    import bench_session
    assert bench_session.main(["--rounds", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("session fixed cost (start + stop around one op), 2 rounds; ")
    row = re.compile(r"^(xsp M|xsp L|xsp ML|torch\.profiler)\s+([\d.]+ ±[\d.]+\s+){3}([\d.]+)$")
    assert [m.group(1) for m in map(row.match, out) if m] == [
        "xsp M", "xsp L", "xsp ML", "torch.profiler"]


def test_the_production_shim_has_no_benchmark_code():
    """The floor callbacks and the C++ loop live in xsp._bench (dev builds), not in the torch
    shim every user loads."""
    import xsp._torch
    assert [n for n in dir(xsp._torch) if not n.startswith("__")] == [
        "_C_API", "attach", "attached", "detach", "mem_begin", "mem_end", "torch_version"]


def _options_tables(out):
    """bench_options' two tables (ns per op above unprofiled; times unprofiled) as lists of
    [option, profiler] rows, and the lines of the second."""
    cut = [i for i, line in enumerate(out) if line.startswith("time as a ratio to unprofiled")]
    assert len(cut) == 1
    pat = r"^\w+ (torch\.profiler|xsp)\s"
    above, times = out[:cut[0]], out[cut[0]:]
    return ([line.split()[0:2] for line in above if re.match(pat, line)],
            [line.split()[0:2] for line in times if re.match(pat, line)],
            [line for line in times if re.match(pat, line)])


def test_bench_options_prints_every_option(capsys):
    import bench_options
    assert bench_options.main(["--steps", "1", "--rounds", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    opts = bench_options.available()
    above, times, lines = _options_tables(out)
    assert above == times == [[o, v] for o in opts for v in ("torch.profiler", "xsp")]
    # each ratio row: in block and end to end, each "<median>x ±<half IQR>"
    assert all(re.fullmatch(r"\S+ \S+\s+(\d+\.\d{3}x ±\d+\.\d{3}\s*){2}", line)
               for line in lines), lines
    assert [line.split()[0] for line in out if "torch.profiler/xsp:" in line] == opts
    with pytest.raises(SystemExit):
        bench_options.main(["--options", "bogus"])
    with pytest.raises(SystemExit):
        bench_options.main(["--model", "resnet"])


def test_bench_options_vit_at_level_ml(capsys):
    """--model vit: transformers' ViT from a small ViTConfig, random weights, no download;
    xsp at levels ML records its model call (level M) beside the ops."""
    pytest.importorskip("transformers")
    import bench_options
    assert bench_options.main(["--model", "vit", "--levels", "ML", "--options", "record_shapes",
                               "--steps", "1", "--rounds", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    head = [line for line in out if line.startswith("per-op cost of each option: a ViT")]
    assert len(head) == 1 and head[0].endswith("xsp levels ML"), out
    above, times, _ = _options_tables(out)
    assert above == times == [["record_shapes", "torch.profiler"], ["record_shapes", "xsp"]]
    step, _ = bench_options.vit_step()
    with xsp.profile(levels="ML") as p:
        step()
    assert [s.name for s in p.trace.spans(kind="model")] == ["ViTForImageClassification"]


def test_bench_zoo_query_prints_every_query(capsys, monkeypatch):
    """bench_zoo's query half on 6 evaluations: every query, the same rows before and after
    compaction (it asserts that itself), and the compaction's line."""
    import bench_zoo
    monkeypatch.setattr(sys, "argv", ["bench_zoo.py", "--no-pipeline", "--evaluations", "6",
                                      "--rounds", "2"])
    bench_zoo.main()
    out = capsys.readouterr().out
    assert "query: 6 evaluations written in" in out
    for name, rows in (("throughput", 6), ("layer types", 10), ("top ops", 20)):
        assert re.search(r"\n  %s +%d rows: one file per evaluation .* compacted " % (name, rows),
                         out), out
    assert "compact() of the 6 evaluations:" in out
