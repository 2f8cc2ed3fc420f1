"""Op inputs (record_shapes=True) and memory per op (profile_memory=True), recorded by the shim,
checked against torch.profiler with the same option on the same workload: every op's Input
Dims, Input type, Input Strides and Concrete Inputs, and every op's self CPU memory."""
import json
import threading
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.profiler import ProfilerActivity, profile as torch_profile  # noqa: E402

import xsp  # noqa: E402
from xsp.analysis import redispatches  # noqa: E402

from models import cnn  # noqa: E402

INPUT_KEYS = (("Input Dims", "input_dims"), ("Input type", "input_types"),
              ("Input Strides", "input_strides"), ("Concrete Inputs", "concrete_inputs"))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class Attention(nn.Module):
    """Both kinds: scaled_dot_product_attention and softmax(QK^T / sqrt(d)) V by hand."""

    def __init__(self, d=8, heads=2):
        super().__init__()
        self.qkv, self.out, self.heads = nn.Linear(d, 3 * d), nn.Linear(d, d), heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        w = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        return self.out((a + w @ v).transpose(1, 2).reshape(b, t, d))


class LSTMNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm, self.head = nn.LSTM(6, 8, num_layers=1, batch_first=True), nn.Linear(8, 3)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.head(y[:, -1])


def _cases():
    torch.manual_seed(0)
    return {
        "cnn": cnn(),
        "mlp": (MLP(), torch.randn(4, 16)),
        "attention": (Attention(), torch.randn(2, 5, 8)),
        "lstm": (LSTMNet(), torch.randn(2, 4, 6)),
    }


CASES = _cases()


def _step(model, x):
    model.zero_grad(set_to_none=True)
    loss = model(x).float().pow(2).mean() * 0.5
    loss.backward()


def _torch_ops(model, x, tmp_path):
    with torch_profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        _step(model, x)
    path = tmp_path / "torch.json"
    p.export_chrome_trace(str(path))
    return [e for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "cpu_op"]


def _key_torch(e):
    args = e["args"]
    # torch leaves the four out for an op without inputs
    return (e["name"],) + tuple(json.dumps(args.get(k, [])) for k, _ in INPUT_KEYS)


def _key_xsp(s):
    return (s.name,) + tuple(s.attrs[k] for _, k in INPUT_KEYS)


@pytest.mark.parametrize("case", sorted(CASES))
def test_inputs_equal_torch_profiler(case, tmp_path):
    model, x = CASES[case]
    _step(model, x)                                   # warm: lazy inits out of the runs
    events = _torch_ops(model, x, tmp_path)
    theirs = Counter(_key_torch(e) for e in events)
    with xsp.profile(levels="L", record_shapes=True) as prof:
        _step(model, x)
    tr = prof.trace
    ops = [s for s in tr if s.kind in ("op", "backward", "scope")]
    assert ops and all("input_dims" in s.attrs for s in ops)
    # torch.profiler records the threads it propagates to; xsp's global callback also sees
    # intra-op workers (flash attention's backward allocates on one): compare the same threads
    tids = {e["tid"] for e in events}
    ours = Counter(_key_xsp(s) for s in ops if s.thread in tids)
    assert ours == theirs
    assert tr.lost == 0
    # each text is JSON, and an op with a schema says its overload
    for s in ops:
        dims, types = json.loads(s.attrs["input_dims"]), json.loads(s.attrs["input_types"])
        assert len(dims) == len(types) == len(json.loads(s.attrs["concrete_inputs"]))
        assert ("overload" in s.attrs) == (s.kind == "op" and s.name.startswith("aten::"))


def test_overload_and_scalars():
    a = torch.randn(2, 3)
    with xsp.profile(levels="L", record_shapes=True) as prof:
        torch.add(a, a, alpha=0.25)
        torch.add(a, 2)
        a.sum(dim=(0, 1), keepdim=False)
        torch.cat([a, a])
    by = {}
    for s in prof.trace:
        by.setdefault(s.name, []).append(s.attrs)
    add_t, add_s = by["aten::add"][:2]
    assert (add_t["overload"], add_t["input_types"], add_t["concrete_inputs"]) == (
        "Tensor", '["float", "float", "Scalar"]', '["", "", "0.25"]')
    # the Python int is wrapped into a 0-dim long tensor before dispatch
    assert (add_s["input_dims"], add_s["input_types"]) == ('[[2, 3], [], []]',
                                                          '["float", "long int", "Scalar"]')
    sums = [d for d in by["aten::sum"] if d["overload"] == "dim_IntList"]
    assert sums and sums[0]["concrete_inputs"] == '["", "[0, 1]", "False", ""]'
    cat = by["aten::cat"][0]
    assert (cat["input_dims"], cat["input_types"]) == ('[[[2, 3], [2, 3]], []]',
                                                      '["TensorList", "Scalar"]')


def test_off_by_default():
    a = torch.randn(3)
    with xsp.profile(levels="L") as prof:
        a + a
    for s in prof.trace:
        assert not any(k.startswith(("input_", "concrete", "mem.")) for k in s.attrs)
    assert not any(k.startswith(("lost.data", "memory.")) for k in prof.trace.counters)


def test_inputs_on_other_threads():
    a = torch.randn(4, 4)
    out = {}

    def work():
        out["r"] = a @ a

    with xsp.profile(levels="L", record_shapes=True) as prof:
        t = threading.Thread(target=work)
        t.start()
        t.join()
    mms = [s for s in prof.trace if s.name == "aten::mm"]
    assert [s.attrs["input_dims"] for s in mms] == ["[[4, 4], [4, 4]]"]
    assert mms[0].thread == t.native_id != threading.get_native_id()


def _self_mem_xsp(tr, tids):
    """(name, self CPU bytes) per op on threads tids, a redispatch merged into its parent as
    torch does."""
    ops = [s for s in tr if s.kind in ("op", "backward", "scope")
           and s.thread in tids]
    df = tr.to_pandas()
    is_op = df["kind"].isin(["op", "backward", "scope"]).to_numpy()
    dup = redispatches(is_op, df["name"].to_numpy(), df["parent"].to_numpy())
    net = {}
    for s in ops:
        net[s.id] = s.attrs.get("mem.cpu.alloc_bytes", 0) - s.attrs.get("mem.cpu.freed_bytes", 0)
    for i in sorted(np.nonzero(dup)[0], reverse=True):     # children after parents
        if int(i) in net:
            net[int(df["parent"].iloc[i])] += net.pop(int(i))
    return Counter((tr[i].name, v) for i, v in net.items())


def _torch_memory(model, x):
    """torch.profiler(profile_memory=True) of one step, and its (name, self CPU memory)
    multiset."""
    _step(model, x)
    with torch_profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
        _step(model, x)
    return p, Counter((e.name, e.self_cpu_memory_usage) for e in p.events()
                      if e.name != "[memory]")


@pytest.mark.parametrize("case", sorted(CASES))
def test_memory_equals_torch_profiler(case):
    model, x = CASES[case]
    p, theirs = _torch_memory(model, x)
    # on the CPU torch.profiler sees this thread only (its FunctionEvent.thread is a logical
    # id, 1); xsp sees intra-op workers too: compare this thread's ops
    assert {e.thread for e in p.events()} == {1}
    with xsp.profile(levels="L", profile_memory=True) as prof:
        _step(model, x)
    ours = _self_mem_xsp(prof.trace, {threading.get_native_id()})
    assert ours == theirs
    assert any(v > 0 for _, v in ours)


@pytest.mark.parametrize("case", sorted(CASES))
def test_memory_read_from_torch_trace_equals_torch_profiler(case, tmp_path):
    """Kineto's [memory] events, read back (csrc/io/kbuild.c, pass 8): every op's self CPU
    memory equals torch.profiler's own, and xsp.memory works on torch's file."""
    p, theirs = _torch_memory(*CASES[case])
    path = str(tmp_path / "torch.json")
    p.export_chrome_trace(path)
    with open(path) as f:
        mem = [e["args"] for e in json.load(f)["traceEvents"] if e.get("name") == "[memory]"]
    n_mem = len(mem)
    tr = xsp.load(path, format="kineto")
    assert tr.meta["kineto.memory"] == n_mem > 0
    assert tr.counters["kineto.skipped"] == 2       # "Iteration Start", "Record Window End"
    cpu_threads = {tid for tid, _, kind in tr.threads if kind == 0}
    assert _self_mem_xsp(tr, cpu_threads) == theirs
    total = xsp.analysis.memory.summary(tr)["cpu"]
    assert total["alloc_bytes"] + total["outside_alloc_bytes"] == sum(
        a["Bytes"] for a in mem if a["Bytes"] > 0)
    assert total["freed_bytes"] + total["outside_freed_bytes"] == -sum(
        a["Bytes"] for a in mem if a["Bytes"] < 0)


def test_memory_attributes_exact():
    with xsp.profile(levels="L", profile_memory=True) as prof:
        a = torch.empty(1000, dtype=torch.float32)       # 4000 bytes
        b = torch.empty(10, dtype=torch.float64)         # 80 bytes
        del a, b
    tr = prof.trace
    empties = [s for s in tr if s.name == "aten::empty"]
    assert [(s.attrs["mem.cpu.allocs"], s.attrs["mem.cpu.alloc_bytes"]) for s in empties] == [
        (1, 4000), (1, 80)]
    assert empties[1].attrs["mem.cpu.peak"] - empties[0].attrs["mem.cpu.peak"] == 80
    # the frees happen outside every op (del): counted, not lost
    assert tr.counters["memory.outside_spans.cpu.freed_bytes"] == 4080


def test_memory_refused_when_torch_profiler_runs():
    with torch_profile(activities=[ProfilerActivity.CPU], profile_memory=True):
        with pytest.raises(xsp.SourceError, match="profile_memory: another profiler"):
            with xsp.profile(levels="L", profile_memory=True):
                pass
    with xsp.profile(levels="L", profile_memory=True) as prof:   # and works again after
        torch.empty(4)
    assert any("mem.cpu.allocs" in s.attrs for s in prof.trace)


def test_memory_counter_window_refused_inside_profile_memory():
    from xsp import _torch
    with xsp.profile(levels="L", profile_memory=True):
        with pytest.raises(RuntimeError, match="another profiler"):
            _torch.mem_begin()
    _torch.mem_begin()                 # popped at stop: the window opens again
    _torch.mem_end()


def test_kineto_export_carries_inputs_as_torch_writes_them(tmp_path):
    """xsp's Kineto JSON has the same four args per cpu_op as torch.profiler's, left out
    where torch leaves them out; loading torch's trace gives the attributes back."""
    model, x = CASES["mlp"]
    _step(model, x)
    events = _torch_ops(model, x, tmp_path)
    with xsp.profile(levels="ML", record_shapes=True) as prof:
        _step(model, x)
    xsp.save(prof.trace, str(tmp_path / "xsp.json"), format="kineto")
    ours = [e for e in json.loads((tmp_path / "xsp.json").read_text())["traceEvents"]
            if e.get("cat") == "cpu_op"]

    def key(e):
        return (e["name"],) + tuple(json.dumps(e["args"].get(k)) for k, _ in INPUT_KEYS)

    assert Counter(map(key, ours)) == Counter(map(key, events))
    back = xsp.load(str(tmp_path / "torch.json"), format="kineto")
    got = Counter(_key_xsp(s) for s in back if "input_dims" in s.attrs)
    assert got == Counter(_key_torch(e) for e in events if "Input Dims" in e["args"])


@pytest.mark.parametrize("case", sorted(CASES))
def test_flops_of_xsp_traces_equal_flop_counter(case):
    """xsp.analysis.flops on a trace the shim recorded (not a torch.profiler trace converted) totals
    what FlopCounterMode counts on the same step, forward and backward."""
    from torch.utils.flop_counter import FlopCounterMode
    import xsp.analysis.flops
    model, x = CASES[case]
    _step(model, x)
    with FlopCounterMode(display=False) as fc:
        _step(model, x)
    with xsp.profile(levels="ML", record_shapes=True) as prof:
        _step(model, x)
    s = xsp.analysis.flops.summary(prof.trace)
    assert s["flops"] == fc.get_total_flops() > 0
    assert s["failed"] == {}


def test_memory_analyses_exact():
    import xsp.analysis.memory as M

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(10, 10), nn.Linear(10, 10)

        def forward(self, x):
            return self.b(self.a(x))

    m, x = Two(), torch.randn(4, 10)
    m(x)
    with xsp.profile(levels="ML", profile_memory=True) as prof:
        y = m(x)
    tr = prof.trace
    sp = M.spans(tr)
    assert set(sp["device"]) == {"cpu"}
    assert (sp["self_bytes"] == sp["alloc_bytes"] - sp["freed_bytes"]).all()
    lay = M.layers(tr).set_index("name")
    # each Linear's output: 4 x 10 floats, allocated inside its addmm, still alive after
    for name in ("a", "b"):
        assert lay.loc[name, "alloc_bytes"] == lay.loc[name, "self_bytes"] == 160
    assert lay.loc["a", "peak_bytes"] < lay.loc["b", "peak_bytes"]
    tl = M.timeline(tr)
    assert list(tl["time_ns"]) == sorted(tl["time_ns"])
    assert tl["total_bytes"].iloc[-1] - tl["total_bytes"].iloc[0] == 160
    total = M.summary(tr)["cpu"]
    assert total["alloc_bytes"] == int(sp["alloc_bytes"].sum()) and total["allocs"] >= 2
    del y
    with xsp.profile(levels="ML") as plain:
        m(x)
    assert not M.has_memory(plain.trace)
    with pytest.raises(ValueError, match="profile_memory=True"):
        M.layers(plain.trace)


def test_op_table_by_shape_groups_as_key_averages():
    """analysis.ops(by_shape=True) groups by input_dims as torch's
    key_averages(group_by_input_shape=True) groups by Input Dims: the same calls per (name,
    shapes), on a forward (every op inside the model call, xsp's iteration)."""
    import xsp.analysis as A
    model, x = CASES["cnn"]
    model(x)
    with torch_profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        model(x)
    theirs = {(e.key, str(e.input_shapes)): e.count
              for e in p.key_averages(group_by_input_shape=True)}
    with xsp.profile(levels="ML", record_shapes=True) as prof:
        model(x)
    df = A.ops(prof.trace, by_shape=True)
    ours = {(r.name, str(json.loads(r.shapes))): r.calls for r in df.itertuples()}
    assert ours == theirs


def test_memory_plot_and_report_section():
    from xsp.report import parts as _html
    rows = [{"time_ns": 100, "start_ns": 0, "total_bytes": 1024, "peak_bytes": 2048,
             "name": "aten::a"},
            {"time_ns": 300, "start_ns": 200, "total_bytes": 512, "peak_bytes": 512,
             "name": "aten::b<"}]
    svg = _html.memory_svg(rows, notes=["n1"])
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert svg.count("<circle") == 1                       # b's peak is its total: no dot
    assert "aten::a: peak 2.0 KiB inside it, 1.0 KiB after" in svg
    assert "peak 2.0 KiB (aten::a)" in svg and ">n1</text>" in svg
    assert "no memory events on cuda" in _html.memory_svg([], device="cuda")
    with pytest.raises(ValueError, match="at least 400 x 160"):
        _html.memory_svg(rows, width=100)
    model, x = CASES["mlp"]
    with xsp.profile(levels="ML", profile_memory=True) as prof:
        _step(model, x)
    doc = xsp.report.html_fragment(prof.trace)
    i = doc.index("<h3>Memory</h3>")
    assert "cpu: " in doc[i:] and '<svg xmlns="http://www.w3.org/2000/svg" class="xsp-memory"' \
        in doc[i:]
    with xsp.profile(levels="ML") as plain:
        _step(model, x)
    assert "<h3>Memory</h3>" not in xsp.report.html_fragment(plain.trace)


def test_torch_profiler_inside_profile_memory_is_refused_by_torch():
    """The thread's profiler slot is ours while profile_memory records: torch.profiler refuses
    to start there (its own error), and works again after the profile."""
    with xsp.profile(levels="L", profile_memory=True):
        with pytest.raises(RuntimeError, match="Profiler is already enabled on this thread"):
            with torch_profile(activities=[ProfilerActivity.CPU]):
                pass
    with torch_profile(activities=[ProfilerActivity.CPU]) as p:
        torch.ones(2) + 1
    assert any(e.name == "aten::add" for e in p.events())
