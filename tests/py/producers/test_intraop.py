"""Ops on PyTorch's intra-op pool threads (csrc/core/spawn.h): a float64 DCGAN-style generator,
whose ConvTranspose2d runs at::parallel_for bodies that call aten ops on the pool's threads.
torch.profiler does not see them; xsp puts them on a named track, under the op that spawned
the parallel region, and exports the link as a flow (Kineto, Chrome)."""
import collections
import json

import pytest
import torch
from torch import nn

import xsp
from xsp.analysis import tables as analysis

POOL = "intra-op thread 1"


@pytest.fixture
def two_threads(torch_threads):
    """Two intra-op threads for the test (at::parallel_for then splits a batch of 4 into two
    halves, one per thread, on any machine), the setting restored after."""
    torch_threads(2)


def _generator():
    torch.manual_seed(0)
    g = nn.Sequential(nn.ConvTranspose2d(16, 8, 4, 1, 0, bias=False), nn.BatchNorm2d(8),
                      nn.ReLU(), nn.ConvTranspose2d(8, 3, 4, 2, 1, bias=False),
                      nn.Tanh()).double()
    return g, torch.randn(4, 16, 1, 1, dtype=torch.float64)


@pytest.fixture
def trace(two_threads):
    g, z = _generator()
    with xsp.profile(levels="ML") as prof:
        g(z).sum().backward()
    return prof.trace


def _pool_ids(tr):
    pool = [k for k, (_, name, _) in enumerate(tr.threads) if name == POOL]
    assert len(pool) == 1, tr.threads
    return [i for i in range(len(tr)) if tr.thread_index[i] == pool[0]]


def test_pool_ops_hang_under_the_op_that_spawned_them(trace):
    tr = trace
    ids = _pool_ids(tr)
    df = tr.to_pandas()
    # each ConvTranspose2d's forward splits the batch of 4: thread 1 takes 2 samples, 3
    # at::select each (each with its as_strided), all under the layer's slow_conv_transpose2d
    got = collections.Counter((tr[i].name, tr[i].parent_span.name, df["module"][i]) for i in ids)
    assert got == {("aten::select", "aten::slow_conv_transpose2d", "0"): 6,
                   ("aten::as_strided", "aten::select", "0"): 6,
                   ("aten::select", "aten::slow_conv_transpose2d", "3"): 6,
                   ("aten::as_strided", "aten::select", "3"): 6}
    roots = [i for i in ids if tr.thread_index[tr[i].parent_span.id] != tr.thread_index[i]]
    assert len(roots) == 12
    assert {k: v for k, v in tr.counters.items() if k.startswith("intraop.")} == {
        "intraop.linked": 12, "intraop.unlinked": 0, "intraop.ambiguous": 0}
    # a spawner encloses its pool spans in time, on another thread
    for i in roots:
        p = tr[i].parent_span
        assert p.start_ns <= tr[i].start_ns and tr[i].end_ns <= p.end_ns
    # self time is per thread: the pool's work is not taken from the spawner's
    sp = tr[roots[0]].parent_span.id
    same = [c.id for c in tr[sp].children if tr.thread_index[c.id] == tr.thread_index[sp]]
    assert tr.self_ns[sp] == tr.duration_ns[sp] - sum(tr.duration_ns[c] for c in same)
    # the analyses count them in their op and layer, in the iteration
    it = analysis._src(tr).iteration_of()
    assert (it[ids] == 0).all()
    ops = analysis.ops(tr)
    names = df["name"].to_numpy()
    dup = analysis.redispatches((df["kind"] == "op").to_numpy(), names, tr.parent_ids)
    assert not dup[roots].any()
    # (the iteration is the model call: the backward after it is outside, no steps here)
    fwd = [i for i in range(len(tr)) if names[i] == "aten::select" and not dup[i]
           and it[i] == 0]
    assert ops.set_index("name")["calls"]["aten::select"] == len(fwd) == 24
    assert set(ids) & set(fwd) == {i for i in roots if names[i] == "aten::select"}
    # the tree says which thread ran them
    text = tr.tree()
    assert text.count("aten::select [op]") >= 4
    assert sum(1 for ln in text.splitlines() if ln.endswith("on " + POOL)) >= 2
    for ln in text.splitlines():
        if ln.endswith("on " + POOL):
            assert "aten::select [op]" in ln


def test_without_a_profile_of_the_pool_nothing_changes(one_thread):
    """One thread: no pool track, no intraop counters (they appear only when there are pool
    spans)."""
    g, z = _generator()
    with xsp.profile(levels="ML") as prof:
        g(z).sum().backward()
    tr = prof.trace
    assert [name for _, name, _ in tr.threads] == ["MainThread"]
    assert not any(k.startswith("intraop.") for k in tr.counters)


def test_the_links_are_flows_in_kineto_and_chrome_exports(trace, tmp_path):
    tr = trace
    roots = [i for i in _pool_ids(tr)
             if tr.thread_index[tr[i].parent_span.id] != tr.thread_index[i]]
    main = tr.threads[tr.thread_index[0]][0]
    pool = [tid for tid, name, _ in tr.threads if name == POOL][0]
    for fmt, path in (("kineto", tmp_path / "t.pt.trace.json"), ("chrome", tmp_path / "t.json")):
        if fmt == "kineto":
            xsp.save(tr, str(path), format="kineto")
        else:
            xsp.formats.chrome.write(tr, str(path))
        ev = json.loads(path.read_text())["traceEvents"]
        flows = [e for e in ev if e.get("cat") == "xsp_intraop"]
        s = sorted((e["id"], e["ts"]) for e in flows if e["ph"] == "s")
        f = sorted((e["id"], e["ts"]) for e in flows if e["ph"] == "f")
        assert len(s) == len(f) == len(roots) and s == f, fmt
        assert {e["tid"] for e in flows if e["ph"] == "s"} == {main}
        assert {e["tid"] for e in flows if e["ph"] == "f"} == {pool}
        assert all(e["bp"] == "e" for e in flows if e["ph"] == "f")
        # each flow ends at the start of a pool root
        starts = sorted("%d.%03d" % divmod(tr[i].start_ns - (0 if fmt == "kineto" else int(
            tr.start_ns.min())), 1000) for i in roots)
        assert sorted("%.3f" % e["ts"] for e in flows if e["ph"] == "f") == starts
        # the pool's track is named
        names = {e["tid"]: e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
        assert POOL in names[pool]
    # the Kineto file reads back: the pool's spans are all there (as roots: Kineto's JSON has
    # no cross-thread parent)
    back = xsp.load(str(tmp_path / "t.pt.trace.json"), format="kineto")
    assert len(back) == len(tr)


def test_hta_and_tensorboard_read_the_export_with_its_flows(trace, tmp_path):
    """The flows of a category of xsp's own do not disturb the tools: HTA parses every cpu_op
    (the pool's among them) and TensorBoard's plugin counts the pool's selects."""
    from helpers import sibling
    kineto_tests = sibling("formats", "test_kineto")
    hta, tb_profile = kineto_tests.hta, kineto_tests.tb_profile
    tr = trace
    path = str(tmp_path / "worker0.pt.trace.json")
    xsp.save(tr, path, format="kineto")
    with hta(path) as ta:
        df = ta.t.get_trace(0)
        sym = ta.t.symbol_table.get_sym_table()
        ops = df[df["cat"].map(lambda c: sym[c]) == "cpu_op"]
        assert len(ops) == sum(1 for s in tr if s.kind in ("op", "backward"))
    prof = tb_profile(path, tmp_path)
    calls = {r["name"]: r["calls"] for r in prof.operation_table_by_name["data"]}
    # every select of the trace, the pool's 12 among them (each has a child: none is merged)
    assert calls["aten::select"] == sum(1 for s in tr if s.name == "aten::select") == 48


def test_a_transformer_encoder_s_flash_attention_backward(two_threads):
    """The encoder's CPU flash-attention backward allocates its per-thread buffer on each pool
    thread inside the parallel region: that aten::empty hangs under the backward op, in the
    encoder layer's backward."""
    import models
    enc, xe = models.encoder()
    models.fwd_bwd(enc, xe)
    with xsp.profile() as prof:
        models.fwd_bwd(enc, xe)
    tr = prof.trace
    ids = _pool_ids(tr)
    assert [(tr[i].kind, tr[i].name, tr[i].parent_span.name) for i in ids] == [
        ("op", "aten::empty", "aten::_scaled_dot_product_flash_attention_for_cpu_backward")]
    assert tr.counters["intraop.linked"] == 1 and tr.counters["intraop.unlinked"] == 0
    assert [(s.kind, s.name) for s in tr[ids[0]].ancestors()] == [
        ("op", "aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
        ("backward", "ScaledDotProductFlashAttentionForCpuBackward0"),
        ("op", "autograd::engine::evaluate_function: "
               "ScaledDotProductFlashAttentionForCpuBackward0"),
        ("region", "xsp.profile")]
