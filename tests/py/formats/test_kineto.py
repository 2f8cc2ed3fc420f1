"""Kineto's JSON (xsp/formats/kineto.py): xsp's export checked field by field against torch.profiler's
own trace of the same workload and loaded by the real tools (HTA, TensorBoard's profiler
plugin), torch.profiler traces read into xsp traces, the round trip, and hostile files.

HTA and torch-tb-profiler are test tools (`make test` installs them, pinned); without
XSP_TEST_TOOLS=1 the tests that need them skip, with it they fail when missing."""
import collections
import contextlib
import gzip
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

import xsp
from xsp.analysis import tables as analysis

STEPS = 4
TOOLS = os.environ.get("XSP_TEST_TOOLS") == "1"


def tool(name):
    if TOOLS:
        return __import__(name)
    return pytest.importorskip(name, reason="%s is a test tool (make test installs it)" % name)


def workload():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(8, 16)

    def step():
        opt.zero_grad()
        with torch.profiler.record_function("forward"):
            y = m(x)
        y.sum().backward()
        opt.step()
    step()
    return step


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """(torch.profiler's trace path, xsp's Kineto export path, the xsp Trace): the same
    workload, STEPS steps each."""
    d = tmp_path_factory.mktemp("kineto")
    step = workload()
    torch_path = str(d / "torch.pt.trace.json")
    sched = torch.profiler.schedule(wait=0, warmup=1, active=STEPS)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=sched,
                                on_trace_ready=lambda p: p.export_chrome_trace(torch_path)) as p:
        for _ in range(STEPS + 1):
            step()
            p.step()
    with xsp.profile(levels="ML") as prof:
        for _ in range(STEPS):
            step()
            prof.step()
    xsp_path = str(d / "xsp.pt.trace.json")
    assert xsp.save(prof.trace, xsp_path, format="kineto") == xsp_path
    return torch_path, xsp_path, prof.trace


def events(path):
    with open(path) as f:
        return json.load(f)


def cpu_op_counts(doc, steps_only=True):
    ev = doc["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev
             if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")]
    return collections.Counter(e["name"] for e in ev if e.get("cat") == "cpu_op" and (
        not steps_only or any(a <= e["ts"] <= b for a, b in steps)))


# -- the export, field by field -------------------------------------------------------------
def test_top_level_keys_and_process_and_thread_names(traces):
    torch_path, xsp_path, tr = traces
    ours, theirs = events(xsp_path), events(torch_path)
    keys = list(theirs)
    assert keys == ["schemaVersion", "deviceProperties", "trace_id", "host_name",
                    "displayTimeUnit", "baseTimeNanoseconds", "traceEvents", "traceName"]
    assert [k for k in ours if k in keys] == keys
    assert ours["schemaVersion"] == 1 and ours["deviceProperties"] == []
    assert ours["displayTimeUnit"] == "ms" and ours["baseTimeNanoseconds"] == 0
    assert ours["xsp"]["meta"]["levels"] == "ML" and ours["xsp"]["counters"] == tr.counters
    meta_ev = {e["name"] for e in theirs["traceEvents"] if e["ph"] == "M"}
    assert meta_ev <= {e["name"] for e in ours["traceEvents"] if e["ph"] == "M"}
    pid = tr.meta["pid"]
    name = [e for e in ours["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"]
    assert name == [{"ts": name[0]["ts"], "ph": "M", "name": "thread_name", "pid": pid,
                     "tid": tr.threads[0][0],
                     "args": {"name": "thread %d (MainThread)" % tr.threads[0][0]}}]


def test_timestamps_are_microseconds_with_the_nanoseconds(traces):
    _, xsp_path, tr = traces
    with open(xsp_path) as f:
        raw = f.read()
    stamps = re.findall(r'"(ts|dur)": (-?[0-9.]+)', raw)
    assert stamps and all(re.fullmatch(r"-?\d+\.\d{3}", v) for _, v in stamps)
    xs = [e for e in json.loads(raw)["traceEvents"] if e["ph"] == "X"]
    by_id = {e["args"]["xsp.id"]: e for e in xs}
    # every span at its own ns; a step over its iteration's window (xsp.analysis' iterations)
    its = xsp.analysis.model_latency(tr)
    window = {i: (s0, s0 + d) for i, s0, d in zip(its["id"], its["start_ns"], its["latency_ns"])}
    checked = 0
    for s in list(tr)[:50]:
        e = by_id[s.id]
        s0, e0 = window[s.id] if s.kind == "step" else (s.start_ns, s.end_ns)
        assert round(e["ts"] * 1000) == s0 and round(e["dur"] * 1000) == e0 - s0
        checked += s.kind == "step"
    assert checked >= 1


def test_events_match_torch_profiler_s(traces):
    torch_path, xsp_path, tr = traces
    ours, theirs = events(xsp_path), events(torch_path)
    # the same ops, per name, in the steps
    assert cpu_op_counts(ours) == cpu_op_counts(theirs)
    # steps and scopes: ProfilerStep#N, the optimizer's and the user's record_function
    ann = [e["name"] for e in ours["traceEvents"] if e.get("cat") == "user_annotation"]
    assert [a for a in ann if a.startswith("ProfilerStep#")] == [
        "ProfilerStep#%d" % i for i in range(STEPS)]
    rest = collections.Counter(a for a in ann if not a.startswith("ProfilerStep#"))
    theirs_rest = collections.Counter(e["name"] for e in theirs["traceEvents"] if e.get(
        "cat") == "user_annotation" and not e["name"].startswith("ProfilerStep#"))
    assert rest == theirs_rest == {"Optimizer.zero_grad#SGD.zero_grad": STEPS,
                                   "Optimizer.step#SGD.step": STEPS, "forward": STEPS}
    # the args torch writes on cpu ops, where xsp has them
    for e in ours["traceEvents"]:
        if e.get("cat") == "cpu_op":
            assert {"External id", "Record function id", "Ev Idx"} <= set(e["args"])
            assert ("Sequence number" in e["args"]) == ("Fwd thread id" in e["args"])
    # backward functions with their forward thread, as torch writes them
    bw = [e for e in ours["traceEvents"] if e.get("args", {}).get("xsp.kind") == "backward"]
    linked = [e for e in bw if "xsp.fwd_op" in e["args"]]
    assert linked and all(e["cat"] == "cpu_op" and e["args"]["Fwd thread id"] == 1
                          for e in linked)
    # AccumulateGrad has no sequence number: neither arg, as torch writes it
    acc = [e for e in bw if e["name"] == "torch::autograd::AccumulateGrad"]
    assert acc and all("Sequence number" not in e["args"] for e in acc)
    # fwdbwd flows: one per backward function linked to its forward op, as many as torch's
    fl = collections.Counter((e["ph"], e["cat"]) for e in ours["traceEvents"]
                             if e.get("cat") == "fwdbwd")
    tfl = collections.Counter((e["ph"], e["cat"]) for e in theirs["traceEvents"]
                              if e.get("cat") == "fwdbwd")
    assert fl == tfl and fl[("s", "fwdbwd")] > 0
    # every flow's two ends sit on the starts of the forward op and the backward function
    xs = {(e["tid"], e["ts"]): e for e in ours["traceEvents"] if e["ph"] == "X"}
    for e in ours["traceEvents"]:
        if e.get("cat") == "fwdbwd":
            at = xs[(e["tid"], e["ts"])]["args"]["xsp.kind"]
            assert at == ("op" if e["ph"] == "s" else "backward")


def test_modules_are_python_function_events(traces):
    _, xsp_path, tr = traces
    mods = [e for e in events(xsp_path)["traceEvents"] if e.get("cat") == "python_function"]
    assert [e["name"] for e in mods[:4]] == ["nn.Module: Sequential_0", "nn.Module: Linear_0",
                                           "nn.Module: ReLU_0", "nn.Module: Linear_1"]
    assert [e["args"]["xsp.module"] for e in mods[:4]] == ["Sequential", "0", "1", "2"]
    top = mods[0]["args"]["Python id"]
    assert mods[0]["args"]["Python parent id"] is None
    assert [e["args"]["Python parent id"] for e in mods[1:4]] == [top] * 3
    assert len({e["args"]["Python module id"] for e in mods}) == 4


# -- the real tools ---------------------------------------------------------------------------
HTA_METHODS = ["get_comm_comp_overlap", "get_cuda_kernel_launch_stats",
               "get_gpu_kernel_breakdown", "get_gpu_user_annotation_breakdown",
               "get_memory_bw_summary", "get_memory_bw_time_series", "get_profiler_steps",
               "get_queue_length_summary", "get_queue_length_time_series",
               "get_idle_time_breakdown", "get_potential_stragglers", "get_temporal_breakdown",
               "get_aten_op_kernels_and_delay"]


@contextlib.contextmanager
def hta(path):
    """HTA's TraceAnalysis of one trace file (rank 0, every step), its logging and warnings
    quiet while in use."""
    tool("hta")
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    import logging
    import warnings
    from hta.trace_analysis import TraceAnalysis
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield TraceAnalysis(trace_files={0: path}, trace_dir=os.path.dirname(path),
                                include_last_profiler_step=True)
    finally:
        logging.disable(logging.NOTSET)


def hta_run(path):
    """{method: ("ok", result) or ("error", exception type name)} of HTA on one trace."""
    with hta(path) as ta:
        out = {}
        for name in HTA_METHODS:
            try:
                out[name] = ("ok", getattr(ta, name)())
            except Exception as exc:       # noqa: BLE001 -- HTA's own failures
                out[name] = ("error", type(exc).__name__)
        df = ta.t.get_trace(0)
        sym = ta.t.symbol_table.get_sym_table()
        out["ops"] = collections.Counter(sym[i] for i in df[df["cat"].map(
            lambda c: sym[c]) == "cpu_op"]["name"])
    return out


def shape(v):
    if hasattr(v, "shape"):
        return tuple(v.shape)
    if isinstance(v, dict):
        return {k: shape(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [shape(x) for x in v]
    return type(v).__name__


def test_hta_succeeds_where_it_succeeds_on_torch_s_trace(traces):
    torch_path, xsp_path, _ = traces
    theirs, ours = hta_run(torch_path), hta_run(xsp_path)
    ok = [m for m in HTA_METHODS if theirs[m][0] == "ok"]
    assert len(ok) >= 8
    assert [m for m in HTA_METHODS if ours[m][0] == "ok"] == ok
    for m in ok:
        assert shape(ours[m][1]) == shape(theirs[m][1]), m
    assert len(ours["get_profiler_steps"][1]) == len(theirs["get_profiler_steps"][1]) == STEPS
    # HTA's own parse of the ops: the same names and counts
    assert ours["ops"] == theirs["ops"] and sum(ours["ops"].values()) > 100


def tb_profile(path, tmp_path):
    tool("torch_tb_profiler")
    from torch_tb_profiler.profiler.data import RunProfileData
    from torch_tb_profiler.profiler.run_generator import RunGenerator
    data = RunProfileData.parse("worker0", None, path, str(tmp_path))
    return RunGenerator("worker0", None, data).generate_run_profile()


def test_tensorboard_plugin_loads_the_export(traces, tmp_path):
    _, xsp_path, tr = traces
    prof = tb_profile(xsp_path, tmp_path)
    assert [r[0] for r in prof.overview["steps"]["rows"]] == [str(i) for i in range(STEPS)]
    assert prof.get_operator_tree() is not None and prof.tid2tree
    assert prof.get_module_view() is not None
    tb = {r["name"]: r["calls"] for r in prof.operation_table_by_name["data"]}
    # the plugin merges a redispatch (an op that is the only child of an op of its name) as
    # xsp's op table and torch.profiler's key_averages do, and lists the backward functions
    # (xsp's kind backward) among the operators
    ops = analysis.ops(tr)
    src = tr.to_pandas()
    it = analysis._src(tr).iteration_of()
    dup = analysis.redispatches((src["kind"] == "op").to_numpy(), src["name"].to_numpy(),
                                tr.parent_ids) & (it >= 0)
    assert collections.Counter(src["name"].to_numpy()[dup].tolist()) == {"aten::sum": STEPS}
    bw = collections.Counter(src["name"].to_numpy()[((src["kind"] == "backward").to_numpy())
                                                    & (it >= 0)].tolist())
    assert bw["AddmmBackward0"] == 2 * STEPS
    want = dict(zip(ops["name"], ops["calls"]))
    want.update(bw)
    assert tb == want


# -- reading torch.profiler's traces --------------------------------------------------------
def test_load_kineto_rebuilds_the_tree(traces):
    torch_path, _, _ = traces
    tr = xsp.load(torch_path, format="kineto")
    doc = events(torch_path)
    n_x = sum(1 for e in doc["traceEvents"] if e["ph"] == "X")
    assert len(tr) == n_x                         # every complete event, the Trace region too
    assert tr[0].kind == "region" and tr[0].name == "PyTorch Profiler (0)"
    assert [s.name for s in tr if s.kind == "step"] == ["step#%d" % i for i in
                                                        range(1, STEPS + 1)]
    assert tr.meta["source"] == "kineto" and tr.meta["levels"] == "ML"
    assert tr.counters == {"kineto.skipped": 2, "kineto.unattributed": 0,
                           "kineto.clamped": 0, "kineto.overlaps": 0}
    # nesting by time: every span lies inside its parent, on its thread
    for s in tr:
        p = s.parent_span
        if p is not None and p.kind != "region":
            assert p.start_ns <= s.start_ns and s.end_ns <= p.end_ns and p.thread == s.thread
    # the same op multiset as torch's events
    assert collections.Counter(s.name for s in tr if s.kind in ("op", "backward")) == \
        collections.Counter(e["name"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op")
    # backward functions: kind, sequence number and their forward op through the flows
    bws = [s for s in tr if s.kind == "backward"]
    assert bws and all(s.parent_span.name == "autograd::engine::evaluate_function: " + s.name
                       for s in bws)
    for s in [s for s in bws if "seq" in s.attrs]:
        f = tr[s.attrs["fwd_op"]]
        assert f.kind == "op" and f.attrs["seq"] == s.attrs["seq"] and f.start_ns < s.start_ns
    # xsp's analyses on it: the op table's calls are torch.profiler's key_averages counts
    ops = analysis.ops(tr)
    assert dict(zip(ops["name"], ops["calls"]))["aten::addmm"] == 2 * STEPS
    assert len(analysis.model_latency(tr)) == STEPS


def test_load_kineto_op_table_equals_key_averages():
    step = workload()
    sched = torch.profiler.schedule(wait=0, warmup=1, active=STEPS)
    got = {}

    def ready(p):
        got["avg"] = {e.key: e.count for e in p.key_averages()}
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "xsp-ka-%d.json" % os.getpid())
        p.export_chrome_trace(path)
        got["path"] = path
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=sched, on_trace_ready=ready) as p:
        for _ in range(STEPS + 1):
            step()
            p.step()
    try:
        tr = xsp.load(got["path"], format="kineto")
    finally:
        os.unlink(got["path"])
    ops = analysis.ops(tr)
    ours = {k: v for k, v in zip(ops["name"], ops["calls"])}
    theirs = {k: v for k, v in got["avg"].items() if k in ours or k.startswith("aten::")}
    # what key_averages has beyond the ops: the backward functions and the scopes
    extra = set(got["avg"]) - set(ours)
    assert extra == {s.name for s in tr if s.kind in ("backward", "scope")} | {"ProfilerStep*"}
    assert ours == theirs


def test_round_trip_gives_torch_s_events_and_hta_s_results(traces, tmp_path):
    torch_path, _, _ = traces
    out = str(tmp_path / "again.pt.trace.json")
    xsp.save(xsp.load(torch_path, format="kineto"), out, format="kineto")
    a, b = events(torch_path), events(out)
    assert b["baseTimeNanoseconds"] == a["baseTimeNanoseconds"]
    assert b["trace_id"] == a["trace_id"] and b["traceName"] == a["traceName"]

    def xev(doc):
        return sorted((e["ts"], e["dur"], e["name"], e["cat"], str(e["pid"]), str(e["tid"]))
                      for e in doc["traceEvents"] if e["ph"] == "X")
    assert xev(b) == xev(a)
    by = {(e["ts"], e["name"], str(e["tid"])): e for e in b["traceEvents"] if e["ph"] == "X"}
    for e in a["traceEvents"]:
        if e["ph"] == "X":
            mine = by[(e["ts"], e["name"], str(e["tid"]))]["args"]
            assert {k: mine[k] for k in e.get("args", {})} == e.get("args", {})
    flows = collections.Counter(e["cat"] for e in a["traceEvents"] if e["ph"] in "sf")
    assert collections.Counter(e["cat"] for e in b["traceEvents"] if e["ph"] in "sf") == flows
    ha, hb = hta_run(torch_path), hta_run(out)
    assert {m: r[0] for m, r in ha.items() if m != "ops"} == \
        {m: r[0] for m, r in hb.items() if m != "ops"}
    for m in HTA_METHODS:
        if ha[m][0] == "ok":
            assert repr(ha[m][1]) == repr(hb[m][1]), m
    assert ha["ops"] == hb["ops"]


def test_gzip_and_the_cli(traces, tmp_path):
    torch_path, _, tr = traces
    gz = str(tmp_path / "t.pt.trace.json.gz")
    with open(torch_path, "rb") as f, gzip.open(gz, "wb") as g:
        g.write(f.read())
    assert len(xsp.load(gz, format="kineto")) == len(xsp.load(torch_path, format="kineto"))
    xspf = str(tmp_path / "r.xsp")
    xsp.save(tr, xspf)
    cli = [sys.executable, "-m", "xsp"]
    out = str(tmp_path / "k.json.gz")
    r = subprocess.run(cli + ["export", xspf, "--format", "kineto", "-o", out],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert len(xsp.load(out, format="kineto")) == len(tr)
    r = subprocess.run(cli + ["summary", gz, "--top", "3"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "xsp report: PyTorch Profiler (0)" in r.stdout and "%d iterations" % STEPS in r.stdout
    r = subprocess.run(cli + ["compare", torch_path, out], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "iterations: %d -> %d" % (STEPS, STEPS) in r.stdout
    html = str(tmp_path / "r.html")
    r = subprocess.run(cli + ["report", gz, "-o", html], capture_output=True, text=True)
    assert r.returncode == 0 and os.path.getsize(html) > 1000


# -- hostile files ----------------------------------------------------------------------------
@pytest.mark.parametrize("content, words, offset, event", [
    (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, ', "malformed JSON", 51, None),
    (b'{"a": 1}', "no traceEvents list", None, None),
    (b'[]', "no traceEvents list", None, None),
    (b'{"traceEvents": [1]}', "event 0: not an object but int", None, 0),
    (b'{"traceEvents": [{"ph": "M"}, {"ph": "X", "name": "a", "ts": 1}]}',
     "event 1: a complete event (ph X) without 'dur'", None, 1),
    (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": "1", "dur": 2}]}',
     "event 0: ts must be a number, not str", None, 0),
    (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": -2}]}',
     "event 0: dur -2 is negative", None, 0),
    (b'{"traceEvents": [{"ph": "X", "name": 5, "ts": 1, "dur": 2}]}',
     "event 0: name must be a string, not int", None, 0),
    (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "args": []}]}',
     "event 0: args must be an object, not list", None, 0),
    (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1e999, "dur": 2}]}',
     "event 0: ts 1e999 is out of range (more than 2**63 ns)", None, 0),
    (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": Infinity, "dur": 2}]}',
     "malformed JSON", 48, None),
    (b'{"traceEvents": []}', "no complete events", None, None),
    (b'\x1f\x8bnot gzip', "not a gzip file", 0, None),
    (b'{"traceEvents": ["\xff"]}', "not UTF-8", 18, None),
])
def test_hostile_kineto_files(tmp_path, content, words, offset, event):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(xsp.TraceFormatError) as e:
        xsp.load(str(p), format="kineto")
    assert str(e.value).startswith(str(p) + ": ") and words in str(e.value)
    assert e.value.path == str(p) and e.value.offset == offset
    assert getattr(e.value, "event", None) == event


def test_overlapping_events_are_cut_and_counted(tmp_path):
    p = tmp_path / "o.json"
    p.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 10, "dur": 10},
        {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 15, "dur": 10},
        {"ph": "X", "cat": "cpu_op", "name": "c", "pid": 1, "tid": 1, "ts": 30, "dur": 1},
        {"ph": "i", "name": "instant", "pid": 1, "tid": 1, "ts": 31}]}))
    tr = xsp.load(str(p), format="kineto")
    assert [(s.name, s.start_ns, s.end_ns, s.parent) for s in tr] == [
        ("torch.profiler trace", 10000, 31000, None), ("a", 10000, 20000, 0),
        ("b", 15000, 20000, 1), ("c", 30000, 31000, 0)]
    assert tr.counters["kineto.overlaps"] == 1 and tr.counters["kineto.skipped"] == 1
    assert np.array_equal(tr.level_codes, [0, 1, 1, 1])


# -- level G: a trace from synthetic CUPTI records through the real session and merge ---------
GPU_TRACE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "c",
                         "bin", "gpu_steps.xsp")


@pytest.fixture(scope="module")
def gpu_export(tmp_path_factory):
    """(xsp trace, its Kineto export): tests/c/make_gpu_trace.c's loop (make ctest writes it),
    4 steps of gemm_fwd, relu_fwd, an HtoD copy and gemm_bwd on one stream, then a sync."""
    if not os.path.exists(GPU_TRACE):
        if TOOLS:
            pytest.fail("%s is missing: make ctest writes it (it needs CUPTI's headers)"
                        % GPU_TRACE)
        pytest.skip("%s is missing: run make ctest first" % GPU_TRACE)
    tr = xsp.load(GPU_TRACE)
    path = str(tmp_path_factory.mktemp("gpu") / "gpu.pt.trace.json")
    xsp.save(tr, path, format="kineto")
    return tr, path


def test_gpu_events_and_flows(gpu_export):
    tr, path = gpu_export
    doc = events(path)
    ev = doc["traceEvents"]
    assert doc["deviceProperties"] == [{"id": 0, "name": ""}]
    cats = collections.Counter(e.get("cat") for e in ev if e["ph"] == "X")
    kinds = collections.Counter(s.kind for s in tr)
    assert (cats["kernel"], cats["gpu_memcpy"], cats["cuda_runtime"], cats["cuda_sync"]) == (
        kinds["kernel"], kinds["memcpy"], kinds["runtime"], kinds["sync"]) == (12, 4, 20, 4)
    k = next(e for e in ev if e.get("cat") == "kernel")
    s = tr[k["args"]["xsp.id"]]
    assert (k["pid"], k["tid"]) == (0, 7)
    assert {key: k["args"][key] for key in ("device", "stream", "correlation", "grid", "block",
                                            "registers per thread", "shared memory",
                                            "External id")} == {
        "device": 0, "stream": 7, "correlation": s.attrs["correlation"], "grid": [80, 1, 1],
        "block": [128, 1, 1], "registers per thread": 40, "shared memory": 4096,
        "External id": next(e for e in ev if e.get("args", {}).get("xsp.id") ==
                            s.parent)["args"]["External id"]}
    cp = next(e for e in ev if e.get("cat") == "gpu_memcpy")
    assert cp["args"]["bytes"] == 4096
    assert cp["args"]["memory bandwidth (GB/s)"] == pytest.approx(4096 / 3000)
    # ac2g: from each API call to the GPU work it queued, keyed by the correlation id
    s_ends = {e["id"]: e for e in ev if e.get("cat") == "ac2g" and e["ph"] == "s"}
    f_ends = {e["id"]: e for e in ev if e.get("cat") == "ac2g" and e["ph"] == "f"}
    assert len(s_ends) == len(f_ends) == 16 and set(s_ends) == set(f_ends)
    xs = {(str(e["pid"]), str(e["tid"]), e["ts"]): e for e in ev if e["ph"] == "X"}
    for c, e in s_ends.items():
        assert xs[(str(e["pid"]), str(e["tid"]), e["ts"])]["cat"] == "cuda_runtime"
        g = xs[(str(f_ends[c]["pid"]), str(f_ends[c]["tid"]), f_ends[c]["ts"])]
        assert g["cat"] in ("kernel", "gpu_memcpy") and g["args"]["correlation"] == c


def test_hta_gpu_analyses_on_the_export(gpu_export):
    """HTA's GPU analyses on xsp's export equal what the xsp trace itself says (checked only
    on this synthetic trace: no GPU here)."""
    tr, path = gpu_export
    with hta(path) as ta:
        by_type, by_name = ta.get_gpu_kernel_breakdown(visualize=False)
        temporal = ta.get_temporal_breakdown(visualize=False)
        launch = ta.get_cuda_kernel_launch_stats(visualize=False)[0]
        bw = ta.get_memory_bw_summary()
        idle = ta.get_idle_time_breakdown(visualize=False)[0]
        queue = ta.get_queue_length_summary()
        aten = ta.get_aten_op_kernels_and_delay()[0]
        steps = ta.get_profiler_steps()
    df = tr.to_pandas()
    gpu = df[df["kind"].isin(["kernel", "memcpy"])]
    want = gpu.groupby("name")["duration_ns"].sum() / 1000
    assert dict(zip(by_name["name"], by_name["sum (us)"])) == want.to_dict()
    kern = df[df["kind"] == "kernel"]["duration_ns"].sum() / 1000
    copy = df[df["kind"] == "memcpy"]["duration_ns"].sum() / 1000
    window = (gpu["end_ns"].max() - gpu["start_ns"].min()) / 1000
    row = temporal.iloc[0]
    assert (row["compute_time(us)"], row["non_compute_time(us)"], row["idle_time(us)"]) == (
        kern, copy, window - kern - copy)
    assert idle["idle_time"].sum() == window - kern - copy
    # launch statistics: per kernel, the API call's time and the delay to the kernel's start
    by_corr = {s.attrs["correlation"]: s for s in tr if s.kind in ("kernel", "memcpy")}
    for _, r in launch.iterrows():
        k = by_corr[int(r["correlation"])]
        api = tr[k.attrs["api"]]
        assert (r["cpu_duration"], r["gpu_duration"], r["launch_delay"]) == (
            api.duration_ns / 1000, k.duration_ns / 1000, (k.start_ns - api.end_ns) / 1000)
    assert len(launch) == 16                       # 12 kernels and 4 copies
    assert bw.iloc[0][("memory_bw_gbps", "mean")] == pytest.approx(4096 / 3000)
    assert queue.iloc[0][("queue_length", "count")] == 32          # 16 launches, in and out
    assert dict(zip(aten["aten_op_name"], aten["occurrence_count"])) == {"aten::addmm": 4,
                                                                     "aten::relu": 4}
    assert len(steps) == 4


def test_tensorboard_plugin_gpu_views(gpu_export, tmp_path):
    tr, path = gpu_export
    prof = tb_profile(path, tmp_path)
    # (0.4.3 knows no "cuda_runtime" category, so it finds no runtime on torch's traces
    # either: has_runtime is False there too)
    assert prof.has_kernel and prof.has_memcpy_or_memset and not prof.has_runtime
    table = prof.kernel_table["data"]
    cols = [c["name"] for c in table["columns"]]
    rows = {r[0]: dict(zip(cols, r)) for r in table["rows"]}
    df = tr.to_pandas()
    kern = df[df["kind"] == "kernel"].groupby("name")["duration_ns"]
    assert {n: (r["Calls"], r["Total Duration (us)"]) for n, r in rows.items()} == {
        n: (len(v), v.sum() / 1000) for n, v in kern}
    names = collections.Counter({n: r["Calls"] for n, r in rows.items()})
    assert names == collections.Counter({"gemm_fwd": 4, "relu_fwd": 4, "gemm_bwd": 4})
    assert [r[0] for r in prof.overview["steps"]["rows"]] == ["0", "1", "2", "3"]


def test_measurement_export_carries_leveled_latencies(tmp_path):
    step = workload()
    m = xsp.measure(step, levels="ML", repeat=3, warmup=0, progress=False)
    path = xsp.save(m, str(tmp_path / "m.json"), format="kineto")
    ev = [e for e in events(path)["traceEvents"] if e["ph"] == "X"]
    lev = m.leveled_ns()
    table = m.span_table()
    # the model span's leveled latency is the M run's, as span_table() says
    model = [e for e in ev if e["args"].get("xsp.kind") == "model" and "xsp.leveled_ns" in
             e["args"]]
    assert len(model) == 3
    want = table[table["kind"] == "model"]["latency_ns"].iloc[0]
    assert all(e["args"]["xsp.leveled_ns"] == pytest.approx(want) for e in model)
    assert sum(1 for e in ev if "xsp.leveled_ns" in e["args"]) == len(lev)
    # the measured iterations are the steps, the priming step apart, and its spans have none
    steps = [e for e in ev if e["cat"] == "user_annotation" and e["args"]["xsp.kind"] == "step"]
    assert [e["name"] for e in steps] == ["xsp: priming"] + ["ProfilerStep#%d" % i
                                                             for i in range(3)]
    assert steps[0]["args"]["xsp.why"] == ("a priming call of xsp.measure, left out of its "
                                           "statistics")
    first = min(e["ts"] for e in ev if e["name"] == "ProfilerStep#0")
    assert all("xsp.leveled_ns" not in e["args"] for e in ev
               if e["ts"] < first and e["cat"] == "cpu_op")


# -- memory: [memory] events both ways --------------------------------------------------------
def _memory_profile():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    m(x).sum().backward()
    with xsp.profile(levels="ML", profile_memory=True) as prof:
        for _ in range(3):
            m(x).sum().backward()
            prof.step()
    return prof.trace


def test_memory_events_round_trip_exactly(tmp_path):
    """xsp's per-span memory sums, written as torch's [memory] instants at each span's own
    time and read back: every span's mem.* attributes are equal, and xsp.memory agrees."""
    tr = _memory_profile()
    path = str(tmp_path / "m.pt.trace.json")
    xsp.save(tr, path, format="kineto")
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    mem = [e for e in events if e.get("name") == "[memory]"]
    assert {(e["ph"], e["s"], e["cat"]) for e in mem} == {("i", "t", "cpu_instant_event")}
    assert len(mem) == sum(s.attrs.get("mem.cpu.allocs", 0) + s.attrs.get("mem.cpu.frees", 0)
                           for s in tr)
    back = xsp.load(path, format="kineto")

    def sums(t):
        return {(s.kind, s.start_ns): {k: v for k, v in s.attrs.items() if k.startswith("mem.")}
                for s in t if any(k.startswith("mem.") for k in s.attrs)}
    # the export's steps are the iterations: step#0 starts at its first model call, so the
    # memory of its setup part (the frees before that call) comes back outside every span, as
    # torch's own memory events before its first ProfilerStep do
    want = sums(tr)
    moved = want.pop(("step", tr.spans(kind="step")[0].start_ns))
    assert sums(back) == want and len(want) > 20
    assert (moved["mem.cpu.frees"], moved["mem.cpu.allocs"]) == (3, 0)
    ours = xsp.analysis.memory.summary(tr)["cpu"]
    assert xsp.analysis.memory.summary(back)["cpu"] == {
        **ours, "frees": ours["frees"] - 3,
        "freed_bytes": ours["freed_bytes"] - moved["mem.cpu.freed_bytes"],
        "outside_alloc_bytes": 0, "outside_freed_bytes": moved["mem.cpu.freed_bytes"]}


def test_tensorboard_memory_view_opens_on_the_export(tmp_path):
    """TensorBoard's plugin builds its Memory view from the export: per operator, its self
    allocation count and size and its self size increase equal xsp's sums, and the curve's
    peak is xsp's peak."""
    tr = _memory_profile()
    path = str(tmp_path / "worker0.pt.trace.json")
    xsp.save(tr, path, format="kineto")
    prof = tb_profile(path, tmp_path)
    rows = prof.get_memory_stats(memory_metric="B")["rows"]["CPU"]
    ours = {}
    for s in tr:
        if s.kind in ("op", "backward"):
            o = ours.setdefault(s.name, [0, 0, 0])
            o[0] += s.attrs.get("mem.cpu.allocs", 0)
            o[1] += s.attrs.get("mem.cpu.alloc_bytes", 0)
            o[2] += s.attrs.get("mem.cpu.alloc_bytes", 0) - s.attrs.get("mem.cpu.freed_bytes", 0)
    got = {r[0]: [r[5], r[7], r[3]] for r in rows}
    assert got == {name: v for name, v in ours.items() if name in got}
    assert sum(v[0] for v in got.values()) > 10
    curve = prof.get_memory_curve(time_metric="us", memory_metric="B")
    peak = xsp.analysis.memory.summary(tr)["cpu"]["peak_bytes"]
    assert curve["metadata"]["peaks"]["CPU"] == "Peak Memory Usage: %.1fB" % peak


# -- steps: the export's ProfilerStep#N are xsp's iterations ------------------------------------
RUN_SCRIPT = """
import sys, torch, xsp
from torch import nn
torch.manual_seed(0)
at_start = sys.argv[1] == "start"
# setup: data and a model built inside the profiled script, before the first iteration
data = [torch.randn(16, 3, 32, 32) for _ in range(5)]
w = torch.randn(256, 256) @ torch.randn(256, 256)
model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 30 * 30, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x in data:
    if at_start:
        xsp.step()              # at the start of each iteration
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
    if not at_start:
        xsp.step()              # at the end of each iteration
print(float(w.sum()) != 0.5)    # work after the loop
"""


@pytest.mark.parametrize("where", ["end", "start"])
def test_exported_steps_are_the_iterations_setup_apart_no_empty_tail(tmp_path, where):
    """A training script under `xsp run` (setup, then 5 iterations, xsp.step() at the end or
    at the start of each): the Kineto export has ProfilerStep#0..4 over xsp's iterations, the
    setup outside them (before ProfilerStep#0, or the whole step#0 as the annotation "xsp:
    setup"), the work after the last step() as "xsp: leftover", never as a step; HTA's and
    TensorBoard's per-step views see the same 5 steps with the latencies `xsp summary`
    reports."""
    script = tmp_path / "train.py"
    script.write_text(RUN_SCRIPT)
    out, kj = str(tmp_path / "t.xsp"), str(tmp_path / "worker0.pt.trace.json")
    cli = [sys.executable, "-m", "xsp"]
    r = subprocess.run(cli + ["run", "-q", "-o", out, str(script), where],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(cli + ["export", out, "--format", "kineto", "-o", kj],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    tr = xsp.load(out)
    its = analysis.model_latency(tr)
    steps = tr.spans(kind="step")
    setup = analysis.setup(tr)
    assert len(its) == 5 and setup is not None and setup["id"] == steps[0].id
    assert setup["start_ns"] == steps[0].start_ns
    ev = [e for e in events(kj)["traceEvents"] if e.get("cat") == "user_annotation"
          and e["args"].get("xsp.kind") == "step"]
    got = [(e["name"], e["args"].get("xsp.iteration"),
            (round(e["ts"] * 1000), round(e["dur"] * 1000))) for e in ev]
    want = [("ProfilerStep#%d" % i, i, (s, d))
            for i, s, d in zip(its["iteration"], its["start_ns"], its["latency_ns"])]
    if where == "start":
        # step#0 holds no model call: all of it is setup
        assert len(steps) == 6 and setup["duration_ns"] == steps[0].duration_ns
        want.insert(0, ("xsp: setup", None, (steps[0].start_ns, steps[0].duration_ns)))
        assert ev[0]["args"]["xsp.why"].startswith("step#0 holds no model call")
        # the last step runs to the stop, with the work after the loop: an iteration
        assert its["id"].iloc[-1] == steps[-1].id
    else:
        # step#0 is carved at its first model call: ProfilerStep#0 starts there; the work
        # after the last step() is a leftover
        assert len(steps) == 6 and its["start_ns"][0] == setup["start_ns"] + setup[
            "duration_ns"] > steps[0].start_ns
        want.append(("xsp: leftover", None, (steps[-1].start_ns, steps[-1].duration_ns)))
        assert ev[-1]["args"]["xsp.why"] == "no model call in it"
    assert got == want
    # xsp summary: the same 5 iterations
    r = subprocess.run(cli + ["summary", out], capture_output=True, text=True)
    assert r.returncode == 0 and "5 iterations" in r.stdout, r.stdout + r.stderr
    # HTA: 5 profiler steps, as long as xsp's iterations
    with hta(kj) as ta:
        assert ta.get_profiler_steps() == [0, 1, 2, 3, 4]
        df = ta.t.get_trace(0)
        sym = ta.t.symbol_table.get_sym_table()
        ps = df[df["name"].map(lambda c: sym[c].startswith("ProfilerStep#"))]
        assert ps["dur"].tolist() == pytest.approx([d / 1000 for d in its["latency_ns"]],
                                                   abs=1e-3)
    # TensorBoard's overview: steps 0..4, each as long as xsp's iteration
    prof = tb_profile(kj, tmp_path)
    rows = prof.overview["steps"]["rows"]
    assert [row[0] for row in rows] == ["0", "1", "2", "3", "4"]
    totals = [sum(v for v in row[1:] if isinstance(v, (int, float))) for row in rows]
    assert totals == pytest.approx([d / 1000 for d in its["latency_ns"]], abs=0.01)
