"""The roofline (docs/analyses.md, "Roofline"): the machine's peaks (xsp.peaks: the
micro-benchmarks, the theoretical peak, the cache, overrides), the roofline table
(xsp.analysis.roofline by kernel, op, layer and model) and its plot in the HTML report.

The table's arithmetic is checked on hand-built traces (Trace.from_spans) with given peaks and
a stand-in for xsp.analysis.flops.op_costs that reads each op's costs from test attributes (c_flops,
c_bytes, c_dtype, c_status), so every expected value is worked out from the span list; one
test runs the real xsp.analysis.flops on a real model.  The benchmarks run with a budget of a fraction
of a second; every test that could write a cache file points XDG_CACHE_HOME at its tmp_path.
"""
import json
import math
import os
import sys
import types
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

import xsp
from xsp.analysis import tables as A
from xsp.analysis import peaks as P

STREAM = 7
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Every test gets its own cache directory and no XSP_PEAKS from the environment."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(P.ENV, raising=False)


def S(name, kind, start, end, parent=None, thread=0, **attrs):
    return {"name": name, "kind": kind, "start_ns": start, "end_ns": end, "parent": parent,
            "thread": thread, "attrs": attrs}


def C(flops, nbytes, dtype, status=None):
    """The attributes of an op with inputs whose costs the stand-in op_costs reports."""
    a = {"input_dims": "[]", "c_bytes": float(nbytes), "c_dtype": dtype}
    if flops is not None:
        a["c_flops"] = float(flops)
    a["c_status"] = status or ("formula" if flops is not None else "no formula")
    return a


def fake_op_costs(trace):
    """xsp.analysis.flops.op_costs' columns, from the test attributes of the spans with inputs."""
    df = trace.to_pandas()
    df = df[df["input_dims"].notna()]
    return pd.DataFrame({
        "id": df["id"].to_numpy(np.int64), "name": df["name"].to_numpy(),
        "overload": "", "flops": df["c_flops"].astype(float).to_numpy()
        if "c_flops" in df else np.nan,
        "bytes_read": df["c_bytes"].astype(float).to_numpy(), "bytes_written": 0.0,
        "bytes": df["c_bytes"].astype(float).to_numpy(),
        "dtype": [d if isinstance(d, str) else None for d in df["c_dtype"]],
        "counted": (df["c_status"] == "formula").to_numpy(),
        "status": df["c_status"].to_numpy()})


@pytest.fixture
def stand_in(monkeypatch):
    """xsp.analysis.flops replaced by fake_op_costs for the test (as the module and the
    package's attribute, where the tables import it when a roofline needs it)."""
    mod = types.ModuleType("xsp.analysis.flops")
    mod.op_costs = fake_op_costs
    monkeypatch.setitem(sys.modules, "xsp.analysis.flops", mod)
    monkeypatch.setattr(xsp.analysis, "flops", mod)
    return mod


def cpu_trace():
    """One training step on the CPU (levels ML): fc (Linear) with linear > addmm > copy_
    (nested), act (ReLU), fc2 (Linear) in bfloat16, an add in the model itself, a loss sum
    outside every layer, then the backward of fc's addmm (an engine op, its backward function
    linked to the addmm, an mm inside).  step#0 holds only an mm: setup, left out."""
    spans = [
        S("prof", "region", 0, 6000),                                         # 0
        S("step#0", "step", 0, 500, 0),                                       # 1
        S("aten::mm", "op", 100, 400, 1, **C(5e6, 1e5, "float32")),           # 2: setup
        S("step#1", "step", 500, 5500, 0),                                    # 3
        S("Net", "model", 600, 4500, 3, type="Net"),                          # 4
        S("fc", "module", 700, 2700, 4, type="Linear"),                       # 5
        S("aten::linear", "op", 800, 2600, 5, **C(None, 0, "float32", "composite")),  # 6
        S("aten::addmm", "op", 900, 2500, 6, **C(8e6, 4e5, "float32")),       # 7
        S("aten::copy_", "op", 1000, 1100, 7, **C(0, 0, "float32", "nested")),  # 8
        S("act", "module", 2800, 3300, 4, type="ReLU"),                       # 9
        S("aten::relu", "op", 2900, 3200, 9, **C(None, 2e5, "float32")),      # 10
        S("fc2", "module", 3400, 4400, 4, type="Linear"),                     # 11
        S("aten::mm", "op", 3500, 4300, 11, **C(1e6, 1e5, "bfloat16")),       # 12
        S("aten::add", "op", 4420, 4480, 4, **C(None, 3e4, "float32")),       # 13
        S("aten::sum", "op", 4500, 4600, 3, **C(None, 1e3, "float32")),       # 14
        S("autograd::engine::evaluate_function: AddmmBackward0", "op", 4700, 5400, 3),  # 15
        S("AddmmBackward0", "backward", 4750, 5350, 15, fwd_op=7),            # 16
        S("aten::mm", "op", 4800, 5300, 16, **C(4e6, 2e5, "float32")),        # 17
    ]
    return xsp.Trace.from_spans(spans, meta={"levels": "ML", "region": "prof"})


def cpu_peaks():
    return P.Peaks("cpu", {"float32": 1e13, "bfloat16": 4e13}, 1e12, "override")


def gpu_trace():
    """A model call (levels MLG) whose fc's addmm launched a kernel with hardware counters
    (flops, dram_bytes: the tree linear > addmm is measured), act's relu a kernel without,
    and fc2's mm two kernels of which one has counters (a partial tree: analytical)."""
    spans = [
        S("prof", "region", 0, 3000),                                         # 0
        S("Net", "model", 0, 3000, 0, type="Net"),                            # 1
        S("fc", "module", 100, 1000, 1, type="Linear"),                       # 2
        S("aten::linear", "op", 200, 900, 2, **C(None, 0, "float16", "composite")),  # 3
        S("aten::addmm", "op", 300, 800, 3, **C(1e9, 1e6, "float16")),        # 4
        S("gemm", "kernel", 400, 700, 4, 1, flops=2e8, dram_bytes=5e5),       # 5
        S("act", "module", 1100, 2000, 1, type="ReLU"),                       # 6
        S("aten::relu", "op", 1200, 1900, 6, **C(None, 2e6, "float16")),      # 7
        S("relu_k", "kernel", 1300, 1500, 7, 1),                              # 8
        S("fc2", "module", 2100, 2900, 1, type="Linear"),                     # 9
        S("aten::mm", "op", 2200, 2800, 9, **C(3e8, 5e5, "float16")),         # 10
        S("k1", "kernel", 2300, 2400, 10, 1, flops=1e8, dram_bytes=1e5),      # 11
        S("k2", "kernel", 2500, 2700, 10, 1),                                 # 12
    ]
    return xsp.Trace.from_spans(spans, threads=[(11, "main", 0), (STREAM, "stream 7", 1)],
                                meta={"levels": "MLG", "region": "prof"})


def gpu_peaks():
    return P.Peaks("cuda:0", {"float16": 1e15}, 2e12, "override")


def rows(df):
    return [tuple(None if (isinstance(v, float) and math.isnan(v)) or v is pd.NA else v
                  for v in r) for r in df.itertuples(index=False)]


def roof(F, B, t_ns, peak, bw):
    """The expected roof columns of a row of one dtype, from the definitions."""
    ai = F / B
    fps = F / (t_ns * 1e-9)
    bps = B / (t_ns * 1e-9)
    if ai * bw < peak:
        return ai, fps, bps, ai * bw, "memory", bps / bw
    return ai, fps, bps, peak, "compute", fps / peak


def approx_rows(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert len(g) == len(w)
        for a, b in zip(g, w):
            if isinstance(b, float):
                assert a == pytest.approx(b, rel=1e-12), (g, w)
            else:
                assert a == b, (g, w)


# -- peaks: the micro-benchmarks and the theoretical peak ---------------------------------------
def test_the_benchmark_is_sane():
    p = P.benchmark("cpu", budget_s=0.5, dtypes=["float32", "float64"])
    assert p.source == "measured" and p.device == "cpu"
    assert sorted(p.flops_per_s) == ["float32", "float64"]
    theo = P.theoretical("cpu")
    for d, v in p.flops_per_s.items():
        assert v > 0.2e9, (d, v)                 # above a single core's scalar floor
        if theo["flops_per_s"] is not None:
            assert v < theo["flops_per_s"][d], (d, v, theo)
        m = p.method["matmul"][d]
        assert m["n"] >= 256 and m["n"] & (m["n"] - 1) == 0      # a power of two
        assert m["rounds"] >= 3 and m["reps"] >= 1 and m["best_s"] > 0
        assert m["flops"] == 2.0 * m["n"] ** 3 * m["reps"]
        assert v == m["flops"] / m["best_s"]
    cp = p.method["copy"]
    assert cp["buffer_bytes"] >= 64 << 20
    if cp["llc_bytes"]:
        assert cp["buffer_bytes"] >= min(4 * cp["llc_bytes"], 1 << 30)
    assert p.bytes_per_s == cp["bytes"] / cp["best_s"]
    assert cp["bytes"] == 2.0 * cp["buffer_bytes"] * cp["reps"]
    assert 2e8 < p.bytes_per_s < 2e12            # 200 MB/s .. 2 TB/s: a memory, not a cache
    assert p.method["threads"] == __import__("torch").get_num_threads()
    assert p.theoretical == theo
    assert p.key["threads"] == p.method["threads"] and p.key["device"] == "cpu"


def test_the_half_precision_matmuls_run_where_the_cpu_has_them():
    p = P.benchmark("cpu", budget_s=0.2, dtypes=["bfloat16"])
    # torch runs bfloat16 matmuls on every CPU (emulated without native support): either a
    # figure, or a note saying why not; never silently missing
    assert ("bfloat16" in p.flops_per_s and p.flops_per_s["bfloat16"] > 0) or \
        any(n.startswith("bfloat16: matmul did not run") for n in p.notes)


def test_benchmark_arguments_are_checked():
    with pytest.raises(ValueError, match="budget_s must be a number of seconds >= 0.01"):
        P.benchmark(budget_s=0)
    with pytest.raises(ValueError, match="rounds must be an int >= 1"):
        P.benchmark(budget_s=1, rounds=0)
    with pytest.raises(ValueError, match="dtypes must be a non-empty list of float64"):
        P.benchmark(budget_s=1, dtypes=["int8"])
    with pytest.raises(ValueError, match="device must be 'cpu', 'cuda' or 'cuda:N', not 'tpu'"):
        P.benchmark("tpu")
    with pytest.raises(TypeError, match="device must be a str"):
        P.get(0)


CPUINFO = """processor\t: 0
model name\t: Test CPU
physical id\t: 0
core id\t: 0
cpu MHz\t\t: 2500.000
flags\t\t: fpu sse2 avx avx2 fma

processor\t: 1
model name\t: Test CPU
physical id\t: 0
core id\t: 0
cpu MHz\t\t: 2400.000
flags\t\t: fpu sse2 avx avx2 fma

processor\t: 2
model name\t: Test CPU
physical id\t: 0
core id\t: 1
cpu MHz\t\t: 2600.000
flags\t\t: fpu sse2 avx avx2 fma
"""


def test_theoretical_peak_from_cpuinfo():
    t = P.cpu_theoretical(CPUINFO)
    # processors 0 and 1 are one core (hyperthreads); the fastest current clock
    assert (t["isa"], t["cores"], t["hz"], t["hz_source"]) == (
        "AVX2 FMA", 2, 2600e6, "/proc/cpuinfo cpu MHz (current)")
    assert t["flops_per_cycle_per_core"] == {"float32": 32, "float64": 16}
    assert t["flops_per_s"] == {"float32": 32 * 2 * 2600e6, "float64": 16 * 2 * 2600e6}
    assert t["reason"] is None and t["bytes_per_s"] is None and t["bytes_reason"]
    # cpufreq's maximum wins over the current clock; the CPUs this process may use
    t = P.cpu_theoretical(CPUINFO.replace("avx2 fma", "avx2 fma avx512f"), max_khz=3.1e6,
                          cpus=[0, 1])
    assert (t["isa"], t["cores"], t["hz"], t["hz_source"]) == ("AVX-512 FMA", 1, 3.1e9,
                                                               "cpufreq max")
    assert t["flops_per_s"] == {"float32": 64 * 3.1e9, "float64": 32 * 3.1e9}
    t = P.cpu_theoretical(CPUINFO.replace(" avx avx2 fma", ""))
    assert t["isa"] == "SSE2 (add + mul)" and t["flops_per_s"]["float32"] == 8 * 2 * 2600e6


def test_theoretical_peak_says_why_not():
    t = P.cpu_theoretical(CPUINFO.replace("fpu sse2 avx avx2 fma", "fpu"))
    assert t["flops_per_s"] is None and t["reason"].startswith("no SIMD flag xsp knows")
    t = P.cpu_theoretical("\n".join(ln for ln in CPUINFO.splitlines() if "MHz" not in ln))
    assert t["flops_per_s"] is None and t["reason"].startswith("no clock: neither cpufreq")
    t = P.cpu_theoretical("")
    assert t["flops_per_s"] is None and "lists no processor" in t["reason"]
    assert P.theoretical("cpu")["reason"] is None or P.theoretical("cpu")["flops_per_s"] is None


def test_gpu_theoretical_peak_from_the_properties():
    props = types.SimpleNamespace(multi_processor_count=132, clock_rate=1980000, major=9,
                                  minor=0, memory_clock_rate=2619000, memory_bus_width=5120)
    t = P.gpu_theoretical(props)
    assert t["flops_per_s"] == {"float32": 132 * 128 * 2.0 * 1.98e9}
    assert t["bytes_per_s"] == 2.0 * 2.619e9 * 5120 / 8
    assert t["reason"] is None and t["bytes_reason"] is None
    t = P.gpu_theoretical(types.SimpleNamespace(multi_processor_count=10, clock_rate=1000,
                                                major=3, minor=5))
    assert t["flops_per_s"] is None and t["reason"] == \
        "FP32 lanes per SM unknown for compute capability 3.5"
    assert t["bytes_per_s"] is None and "memory_clock_rate" in t["bytes_reason"]
    t = P.gpu_theoretical(types.SimpleNamespace(multi_processor_count=132, clock_rate=0,
                                                major=9, minor=0))
    assert t["flops_per_s"] is None and "no SM count or clock" in t["reason"]


def test_peaks_arithmetic():
    p = cpu_peaks()
    assert p.flops("float32") == 1e13 and p.flops("float16") is None
    assert p.ridge("float32") == 10.0 and p.ridge("bfloat16") == 40.0
    assert p.roof(5, "float32") == 5e12 and p.roof(100, "float32") == 1e13
    assert p.roof(5, "float16") is None and p.roof(float("nan"), "float32") is None
    assert "float32 10 TFLOP/s" in repr(p) and "memory 1 TB/s" in repr(p)


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_gpu_peaks_measured_on_the_device():
    p = P.benchmark("cuda", budget_s=1.0, dtypes=["float32", "bfloat16"])
    assert p.device.startswith("cuda:") and p.flops_per_s["float32"] > 1e11
    assert p.flops_per_s["bfloat16"] > p.flops_per_s["float32"]
    theo = p.theoretical
    if theo["flops_per_s"] and p.method["float32_matmul_precision"] == "highest":
        assert p.flops_per_s["float32"] < theo["flops_per_s"]["float32"]
    if theo["bytes_per_s"]:
        assert 1e10 < p.bytes_per_s < theo["bytes_per_s"]


# -- peaks: the cache and overrides -------------------------------------------------------------
@pytest.fixture
def fake_measure(monkeypatch):
    """P.benchmark replaced by a counter returning fixed peaks (the cache is what is tested)."""
    calls = []

    def benchmark(device="cpu", budget_s=2.0, dtypes=None, rounds=3):
        calls.append((device, budget_s))
        return P.Peaks(device, {"float32": 1e11 * len(calls)}, 5e9, "measured",
                       method={"budget_s": budget_s}, theoretical={"reason": "test"},
                       key=P._key(device))
    monkeypatch.setattr(P, "benchmark", benchmark)
    return calls


def test_the_cache_round_trips(tmp_path, fake_measure):
    path = P.cache_path("cpu")
    assert path.startswith(str(tmp_path / "cache" / "xsp" / "peaks-cpu-"))
    p = P.get("cpu", budget_s=0.3)
    assert p.source == "measured" and fake_measure == [("cpu", 0.3)]
    with open(path) as f:
        assert json.load(f) == p.to_dict()
    q = P.get("cpu")
    assert q.source == "cache" and len(fake_measure) == 1
    assert (q.flops_per_s, q.bytes_per_s, q.key, q.theoretical) == (
        p.flops_per_s, p.bytes_per_s, p.key, p.theoretical)
    assert q.method == p.method and q.notes == []
    r = P.get("cpu", refresh=True)
    assert r.source == "measured" and r.flops_per_s == {"float32": 2e11}
    assert P.get("cpu").flops_per_s == {"float32": 2e11}       # the refreshed one is cached


def test_a_real_measurement_round_trips_through_the_cache():
    p = P.get("cpu", budget_s=0.3)
    q = P.get("cpu")
    assert (p.source, q.source) == ("measured", "cache")
    # everything but the source comes back as it was measured (JSON keeps the floats exact)
    assert {k: v for k, v in q.to_dict().items() if k != "source"} == \
        {k: v for k, v in p.to_dict().items() if k != "source"}


def test_a_bad_or_foreign_cache_file_is_measured_again(fake_measure):
    path = P.cache_path("cpu")
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        f.write("{not json")
    with pytest.warns(RuntimeWarning, match="unreadable"):
        p = P.get("cpu")
    assert p.source == "measured" and len(fake_measure) == 1
    assert p.notes == [n for n in p.notes if n.startswith("cache file %s unreadable" % path)]
    assert len(p.notes) == 1
    d = json.load(open(path))                       # rewritten, good now
    d["key"]["threads"] += 1                        # another setting's file under this name
    with open(path, "w") as f:
        json.dump(d, f)
    with pytest.warns(RuntimeWarning, match="another machine or setting"):
        assert P.get("cpu").source == "measured"
    assert len(fake_measure) == 2


def test_an_unwritable_cache_is_said(tmp_path, monkeypatch, fake_measure):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))      # a file, not a directory
    with pytest.warns(RuntimeWarning, match="peaks not cached: cannot write"):
        p = P.get("cpu")
    assert p.source == "measured" and p.notes[0].startswith("peaks not cached")


GOOD = {"flops_per_s": {"float32": 2e11, "bfloat16": 4e11}, "bytes_per_s": 1e10}


def test_overrides(tmp_path, monkeypatch, fake_measure):
    f = tmp_path / "peaks.json"
    f.write_text(json.dumps(GOOD))
    for spec, where in ((GOOD, "peaks argument"), (json.dumps(GOOD), "peaks argument"),
                        (str(f), "peaks argument (file %s)" % f), (f, "peaks argument (file %s)"
                                                                   % f)):
        p = P.get("cpu", peaks=spec)
        assert (p.source, p.flops_per_s, p.bytes_per_s) == ("override", GOOD["flops_per_s"],
                                                            1e10)
        assert p.method == {"override": where}
    monkeypatch.setenv(P.ENV, json.dumps(GOOD))
    assert P.get("cpu").method == {"override": "XSP_PEAKS"}
    monkeypatch.setenv(P.ENV, str(f))
    p = P.get("cpu")
    assert p.source == "override" and p.method == {"override": "XSP_PEAKS (file %s)" % f}
    # the argument wins over the environment, an override over refresh
    assert P.get("cpu", peaks={"flops_per_s": {"float64": 1.0}, "bytes_per_s": 2.0}
                 ).flops_per_s == {"float64": 1.0}
    assert P.get("cpu", refresh=True).source == "override"
    # a saved Peaks (to_dict, a cache file) is an override too, keyed by device or not
    saved = P.Peaks("cpu", {"float16": 3e9}, 4e9, "measured", method={"n": 1}).to_dict()
    p = P.get("cpu", peaks={"cpu": saved, "cuda": GOOD})
    assert p.flops_per_s == {"float16": 3e9} and p.method == {
        "override": "peaks argument['cpu']", "measured": {"n": 1}}
    assert P.load(P.get("cpu", peaks=GOOD)).flops_per_s == GOOD["flops_per_s"]
    assert fake_measure == []


@pytest.mark.parametrize("bad, message", [
    ({"flops_per_s": {"float32": 1e9}}, "key 'bytes_per_s': missing"),
    ({"bytes_per_s": 1e9}, "key 'flops_per_s': missing"),
    (dict(GOOD, speed=1), "key 'speed': unknown key; keys are device, flops_per_s"),
    (dict(GOOD, flops_per_s={"float33": 1e9}), "key 'flops_per_s.float33': unknown dtype; "
                                               "dtypes are float64, float32"),
    (dict(GOOD, flops_per_s={"float32": -1}), "key 'flops_per_s.float32': must be a positive "
                                              "finite number, not -1"),
    (dict(GOOD, flops_per_s={"float32": True}), "must be a positive finite number, not True"),
    (dict(GOOD, flops_per_s={}), "key 'flops_per_s': must be a non-empty object"),
    (dict(GOOD, bytes_per_s="fast"), "key 'bytes_per_s': must be a positive finite number, "
                                     "not 'fast'"),
    (dict(GOOD, device="cuda:0"), "key 'device': these are peaks of cuda:0, not of cpu"),
    ({"cuda": GOOD}, "has peaks for cuda, not for cpu"),
    ([1, 2], "peaks must be a JSON object"),
    ("{nope", "not valid JSON"),
])
def test_bad_overrides_name_the_key(bad, message, fake_measure):
    spec = bad if not isinstance(bad, list) else json.dumps(bad)
    with pytest.raises(P.PeaksError, match="^peaks argument: .*" + _re(message)):
        P.get("cpu", peaks=spec)
    assert fake_measure == []


def _re(s):
    import re
    return re.escape(s)


def test_bad_override_files_and_environment(tmp_path, monkeypatch):
    missing = tmp_path / "none.json"
    with pytest.raises(P.PeaksError, match="^peaks argument: file %s cannot be read"
                       % _re(str(missing))):
        P.get("cpu", peaks=str(missing))
    f = tmp_path / "bad.json"
    f.write_text('{"flops_per_s": {"float32": 1e9},\n "bytes_per_s": }')
    with pytest.raises(P.PeaksError, match="file %s is not valid JSON: .*line 2"
                       % _re(str(f))):
        P.get("cpu", peaks=f)
    f.write_text(json.dumps(dict(GOOD, bytes_per_s=0)))
    monkeypatch.setenv(P.ENV, str(f))
    with pytest.raises(P.PeaksError, match="^XSP_PEAKS \\(file %s\\): key 'bytes_per_s': "
                       % _re(str(f))):
        P.get("cpu")
    monkeypatch.setenv(P.ENV, '{"flops_per_s": 3, "bytes_per_s": 1}')
    with pytest.raises(P.PeaksError, match="^XSP_PEAKS: key 'flops_per_s': must be a "
                                           "non-empty object"):
        P.get("cpu")
    with pytest.raises(TypeError, match="peaks must be a Peaks, a dict, a JSON text or a file "
                                        "path, not int"):
        P.get("cpu", peaks=3)


# -- the roofline table ---------------------------------------------------------------------------
def test_roofline_by_op(stand_in):
    df = A.roofline(cpu_trace(), by="op", peaks=cpu_peaks())
    assert list(df.columns) == ["name", "calls"] + A.ROOF_COLUMNS
    f32, bf16, bw = 1e13, 4e13, 1e12
    # in the iteration (step#0's mm is setup), costed ops only (copy_ is nested, linear
    # composite: their work is in addmm); longest first; an op's time is its span's
    # inclusive duration
    approx_rows(rows(df), [
        ("aten::addmm", 1, "float32", 8e6, 4e5, 1600) + roof(8e6, 4e5, 1600, f32, bw)
        + ("analytical", 1, 0),
        ("aten::mm", 1, "bfloat16", 1e6, 1e5, 800) + roof(1e6, 1e5, 800, bf16, bw)
        + ("analytical", 1, 0),
        ("aten::mm", 1, "float32", 4e6, 2e5, 500) + roof(4e6, 2e5, 500, f32, bw)
        + ("analytical", 1, 0),
        ("aten::relu", 1, "float32", None, 2e5, 300, None, None, 2e5 / 300e-9, None, None,
         None, "analytical", 1, 1),
        ("aten::sum", 1, "float32", None, 1e3, 100, None, None, 1e3 / 100e-9, None, None,
         None, "analytical", 1, 1),
        ("aten::add", 1, "float32", None, 3e4, 60, None, None, 3e4 / 60e-9, None, None,
         None, "analytical", 1, 1)])
    # the bf16 mm is under its ridge (40): memory bound; the fp32 ones above theirs (10)
    assert df["bound"].tolist()[:3] == ["compute", "memory", "compute"]
    assert df.attrs["peaks"] == cpu_peaks().to_dict() and df.attrs["durations"] == "CPU spans"


def test_roofline_by_layer(stand_in):
    df = A.roofline(cpu_trace(), by="layer", peaks=cpu_peaks())
    assert list(df.columns) == ["layer", "type", "calls", "forward_ns", "backward_ns"] + \
        A.ROOF_COLUMNS
    # fc owns linear, addmm and (through fwd_op) the backward's mm: forward 1800 (linear),
    # backward 600 (AddmmBackward0, taken from the engine op that holds it); the add in Net
    # itself is Net's; the loss sum and the engine op's other 100 ns are outside the layers
    approx_rows(rows(df), [
        ("fc", "Linear", 1, 1800, 600, "float32", 1.2e7, 6e5, 2400)
        + roof(1.2e7, 6e5, 2400, 1e13, 1e12) + ("analytical", 2, 0),
        ("fc2", "Linear", 1, 800, 0, "bfloat16", 1e6, 1e5, 800)
        + roof(1e6, 1e5, 800, 4e13, 1e12) + ("analytical", 1, 0),
        ("act", "ReLU", 1, 300, 0, "float32", None, 2e5, 300, None, None, 2e5 / 300e-9,
         None, None, None, "analytical", 1, 1),
        ("Net", "Net", 1, 60, 0, "float32", None, 3e4, 60, None, None, 3e4 / 60e-9,
         None, None, None, "analytical", 1, 1),
        (A.OUTSIDE_LAYERS, None, None, 100, 100, "float32", None, 1e3, 200, None, None,
         1e3 / 200e-9, None, None, None, "analytical", 1, 1)])


def test_roofline_by_model_weighs_the_dtypes(stand_in):
    df = A.roofline(cpu_trace(), by="model", peaks=cpu_peaks())
    assert list(df.columns) == ["model", "iterations"] + A.ROOF_COLUMNS
    F = 8e6 + 1e6 + 4e6
    B = 4e5 + 2e5 + 1e5 + 3e4 + 1e3 + 2e5
    # the compute roof of fp32 and bf16 FLOPs: the time they take, each at its peak
    peak = F / (1.2e7 / 1e13 + 1e6 / 4e13)
    approx_rows(rows(df), [("(model)", 1, "float32+bfloat16", F, B, 5000)
                           + roof(F, B, 5000, peak, 1e12) + ("analytical", 6, 3)])


def test_roofline_without_peaks_or_with_constants(stand_in):
    df = A.roofline(cpu_trace(), by="op", peaks=False)
    assert df["roof_flops_per_s"].isna().all() and df["bound"].tolist() == [None] * 6
    assert df.attrs["peaks"] is None and df.attrs["peaks_note"] == "no roofs: peaks=False"
    assert df["flops_per_s"].iloc[0] == pytest.approx(8e6 / 1600e-9, rel=1e-12)
    # the constants hold for every dtype: 1000 GFLOP/s and 10 GB/s, ridge 100
    df = A.roofline(cpu_trace(), by="op", peak_gflops=1000, peak_dram_gbps=10)
    assert df["bound"].tolist()[:3] == ["memory"] * 3
    assert df["roof_flops_per_s"].tolist()[:3] == pytest.approx([20 * 1e10, 10 * 1e10,
                                                                  20 * 1e10], rel=1e-12)
    assert df.attrs["peaks"] == {"peak_gflops": 1000.0, "peak_dram_gbps": 10.0}


def test_roofline_peaks_from_the_machine(stand_in, monkeypatch):
    monkeypatch.setenv(P.ENV, json.dumps({"flops_per_s": {"float32": 1e13}, "bytes_per_s": 1e12}))
    df = A.roofline(cpu_trace(), by="op")                 # peaks=None: xsp.analysis.peaks.get("cpu")
    assert df.attrs["peaks"]["source"] == "override"
    assert df["bound"].tolist()[:3] == ["compute", None, "compute"]   # no bf16 peak given
    monkeypatch.setenv(P.ENV, '{"flops_per_s": {"float32": 0}, "bytes_per_s": 1}')
    with pytest.raises(P.PeaksError, match="XSP_PEAKS: key 'flops_per_s.float32'"):
        A.roofline(cpu_trace(), by="op")
    # an override passed as a dict is read as get(peaks=) reads it
    df = A.roofline(cpu_trace(), by="layer", peaks={"flops_per_s": {"bfloat16": 4e13},
                                                    "bytes_per_s": 1e12})
    assert df["bound"].tolist() == [None, "memory", None, None, None]


def test_roofline_measured_counters_replace_analytical(stand_in):
    tr = gpu_trace()
    df = A.roofline(tr, by="op", peaks=gpu_peaks())
    # the tree linear > addmm: every kernel measured, so addmm (the launcher) carries the
    # kernel's counts and linear's row is gone; mm's tree is partial: analytical.  With G an
    # op's time is the GPU work it launched
    approx_rows(rows(df), [
        ("aten::addmm", 1, "float16", 2e8, 5e5, 300) + roof(2e8, 5e5, 300, 1e15, 2e12)
        + ("measured", 1, 0),
        ("aten::mm", 1, "float16", 3e8, 5e5, 300) + roof(3e8, 5e5, 300, 1e15, 2e12)
        + ("analytical", 1, 0),
        ("aten::relu", 1, "float16", None, 2e6, 200, None, None, 2e6 / 200e-9, None, None,
         None, "analytical", 1, 1)])
    assert df.attrs["partial"] == 1 and df.attrs["durations"] == "GPU work"
    lay = A.roofline(tr, by="layer", peaks=gpu_peaks())
    assert rows(lay[["layer", "forward_ns", "backward_ns", "flops", "source"]]) == [
        ("fc", 300, 0, 2e8, "measured"), ("fc2", 300, 0, 3e8, "analytical"),
        ("act", 200, 0, None, "analytical")]
    model = A.roofline(tr, by="model", peaks=gpu_peaks())
    assert rows(model[["flops", "bytes", "duration_ns", "source", "ops", "uncounted"]]) == [
        (5e8, 5e5 + 2e6 + 5e5, 800, "mixed", 3, 1)]


def test_roofline_by_kernel_keeps_its_columns_and_adds_the_roof(stand_in):
    df = A.roofline(gpu_trace(), peaks=gpu_peaks())
    assert list(df.columns) == A.KERNEL_ROOF_COLUMNS
    ai, fps, bps, rf, bound, frac = roof(2e8, 5e5, 300, 1e15, 2e12)
    approx_rows(rows(df), [
        ("gemm", 1, 300, 2e8, 5e5, ai, 2e8 / 300, 5e5 / 300, bound, "float16", fps, bps, rf,
         frac, "measured"),
        # no counters: no values (ties in time: first launched first)
        ("relu_k", 1, 200, None, None, None, None, None, None, None, None, None, None, None,
         None),
        ("k2", 1, 200, None, None, None, None, None, None, None, None, None, None, None, None),
        ("k1", 1, 100) + (1e8, 1e5, 1e3, 1e8 / 100, 1e5 / 100)
        + ("compute", "float16", 1e8 / 100e-9, 1e5 / 100e-9, 1e15, 1e8 / 100e-9 / 1e15,
           "measured")])


def test_roofline_bad_input(stand_in):
    with pytest.raises(ValueError, match="by must be one of kernel, op, layer, model, not 5"):
        A.roofline(cpu_trace(), 5)
    with pytest.raises(ValueError, match="give peaks= or peak_gflops= and peak_dram_gbps=, "
                                         "not both"):
        A.roofline(cpu_trace(), by="op", peaks=cpu_peaks(), peak_gflops=1, peak_dram_gbps=1)
    with pytest.raises(ValueError, match="peak_dram_gbps must be a positive number"):
        A.roofline(cpu_trace(), by="op", peak_gflops=1)
    with pytest.raises(TypeError, match="pass the trace"):
        A.roofline(cpu_trace().to_pandas(), by="layer", peaks=cpu_peaks())
    bare = xsp.Trace.from_spans([S("Net", "model", 0, 10), S("aten::mm", "op", 1, 9, 0)],
                                meta={"levels": "ML"})
    with pytest.raises(ValueError, match="record with xsp.profile\\(record_shapes=True\\)"):
        A.roofline(bare, by="layer")
    assert len(A.roofline(bare)) == 0                        # by kernel: no kernels, no rows


def test_a_gpu_trace_here_without_cuda_has_no_roofs(stand_in):
    if __import__("torch").cuda.is_available():
        pytest.skip("this machine has CUDA: peaks=None would measure it")
    df = A.roofline(gpu_trace(), by="op")
    assert df["bound"].tolist() == [None] * 3
    assert df.attrs["peaks_note"].startswith("no roofs: no peaks for cuda on this machine")
    # an override needs no device: the GPU's peaks, given, for its trace read here
    for spec in (dict(gpu_peaks().to_dict(), device="cuda:0"),
                 {"cpu": GOOD, "cuda:0": gpu_peaks().to_dict()}):
        df = A.roofline(gpu_trace(), by="op", peaks=spec)
        assert df["bound"].tolist() == ["memory", "compute", None]     # ridge 500
        assert df.attrs["peaks"]["flops_per_s"] == {"float16": 1e15}


def test_roofline_of_a_real_model_with_the_real_op_costs():
    torch = pytest.importorskip("torch")
    from torch import nn
    flops = pytest.importorskip("xsp.analysis.flops")
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    x = torch.randn(32, 64)
    with xsp.profile(levels="ML", record_shapes=True) as prof:
        model(x).sum().backward()
        prof.step()
    tr = prof.trace
    pk = P.Peaks("cpu", {"float32": 1e11}, 5e9, "override")
    lay = A.roofline(tr, by="layer", peaks=pk)
    # Linear(64, 128) on 32 rows: 2*32*64*128 forward, the same for the weight's gradient (the
    # input needs none); Linear(128, 10): forward, input and weight gradients
    by_layer = dict(zip(lay["layer"], lay["flops"]))
    assert by_layer["0"] == 2 * (2 * 32 * 64 * 128)
    assert by_layer["2"] == 3 * (2 * 32 * 128 * 10)
    assert math.isnan(by_layer["1"])                        # ReLU: no formula
    model_row = A.roofline(tr, by="model", peaks=pk).iloc[0]
    s = flops.summary(tr)
    assert model_row["flops"] == s["flops"] == lay["flops"].sum()
    assert model_row["dtype"] == "float32" and model_row["source"] == "analytical"
    assert lay["duration_ns"].tolist() == (lay["forward_ns"] + lay["backward_ns"]).tolist()
    assert (lay["forward_ns"] > 0).all()


# -- the plot in the HTML report -------------------------------------------------------------------
def test_the_report_draws_the_roofline(stand_in, monkeypatch, tmp_path):
    monkeypatch.setenv(P.ENV, json.dumps({"flops_per_s": {"float32": 1e13, "bfloat16": 4e13},
                                          "bytes_per_s": 1e12}))
    doc = xsp.report.html(cpu_trace(), str(tmp_path / "r.html"))
    i = doc.index("<h3>Roofline</h3>")
    assert "values are analytical" in doc[i:i + 2000]
    assert "roofs: cpu peaks given (XSP_PEAKS)" in doc[i:i + 2000]
    j = doc.index("<svg", i)
    svg = ET.fromstring(doc[j:doc.index("</svg>", j) + 6])
    assert svg.get("aria-label") == "xsp roofline: 2 points, 2 roofs"
    circles = [c for c in svg.iter(SVG + "circle") if c.find(SVG + "title") is not None]
    tips = [c.find(SVG + "title").text for c in circles]
    # one point per layer that has FLOPs: fc (fp32) and fc2 (bf16); act, Net and the ops
    # outside the layers have no formula and are counted in a note
    assert [t.split(" [")[0] for t in tips] == ["fc", "fc2"]
    assert tips[0].startswith("fc [float32, analytical]\n12 MFLOP, 600 kB in 2.400 us")
    assert [c.get("fill") for c in circles] == ["#4c72b0", "#dd8452"]
    roofs = [r.find(SVG + "title").text for r in svg.iter(SVG + "polyline")]
    assert roofs == ["bfloat16 roof: peak 40 TFLOP/s, ridge at 40 FLOP/byte",
                     "float32 roof: peak 10 TFLOP/s, ridge at 10 FLOP/byte"]
    notes = [t.text for t in svg.iter(SVG + "text") if t.get("class") == "xsp-note"]
    assert notes == ["3 of 5 not drawn: FLOPs, bytes or time unknown or zero (no formula: see "
                     "the table)"]
    # log-log: the points sit where their intensity and FLOP/s put them
    xs = {float(t.text): float(t.get("x")) for t in svg.iter(SVG + "text")
          if t.get("class") == "xsp-tick" and t.get("text-anchor") == "middle"}
    lo, hi = min(xs), max(xs)
    cx = float(circles[0].get("cx"))
    x_lo, x_hi = xs[lo], xs[hi]
    assert cx == pytest.approx(x_lo + (math.log10(20) - math.log10(lo)) /
                               (math.log10(hi) - math.log10(lo)) * (x_hi - x_lo), abs=0.06)
    assert "<td>fc</td>" in doc and "12 M" in doc


def test_no_roofline_without_inputs(tmp_path):
    tr = xsp.Trace.from_spans([S("Net", "model", 0, 10), S("aten::mm", "op", 1, 9, 0)],
                              meta={"levels": "ML"})
    assert "Roofline" not in xsp.report.html(tr)


def test_roofline_svg_checks_and_counts():
    from xsp.report import parts as H
    with pytest.raises(ValueError, match="at least 400 x 240 px"):
        H.roofline_svg([], width=300)
    svg = ET.fromstring(H.roofline_svg([{"label": "a", "intensity": 0, "flops_per_s": 1}]))
    notes = [t.text for t in svg.iter(SVG + "text") if t.get("class") == "xsp-note"]
    assert notes == ["1 of 1 not drawn: FLOPs, bytes or time unknown or zero (no formula: see "
                     "the table)", "no roofs: the peaks are unknown"]
    assert svg.get("aria-label") == "xsp roofline: 0 points, 0 roofs"
