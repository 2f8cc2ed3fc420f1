"""Level G on a real CUDA device: the merged tree model -> module -> op -> CUDA API -> kernel,
checked against torch.profiler run separately on the same code.  Skipped without a GPU."""
import collections

import pytest
import torch
from torch.profiler import ProfilerActivity

import xsp
from helpers import check_tree

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

GPU_WORK = ("kernel", "memcpy", "memset")


class Synced(torch.nn.Module):
    """Runs the model and waits for the GPU, so the model span contains all its GPU work."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        out = self.model(x)
        torch.cuda.synchronize()
        return out


def workload(name, mode):
    from xsp import models
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    model, x = models.get(name, batch=8)
    model, x = Synced(model.cuda()), x.cuda()

    def run():
        if mode == "forward":
            with torch.no_grad():
                model(x)
        else:
            model.zero_grad(set_to_none=True)
            model(x).float().sum().backward()
        torch.cuda.synchronize()
    return run


def torch_kernels(run):
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        run()
    evs = p.profiler.kineto_results.events()
    return collections.Counter(e.name() for e in evs if e.device_type() == torch.autograd.DeviceType.CUDA
                               and not e.name().startswith(("Memcpy", "Memset")))


@pytest.mark.parametrize("name", ["resnet", "transformer"])
@pytest.mark.parametrize("mode", ["forward", "forward+backward"])
def test_mlg_tree_matches_torch_profiler(name, mode):
    run = workload(name, mode)
    for _ in range(3):
        run()                                   # warm-up: lazy init, cuBLAS/cuDNN handles
    expected = torch_kernels(run)
    with xsp.profile(levels="MLG") as prof:
        run()
    tr = prof.trace
    check_tree(tr, nesting=False)
    c = tr.counters
    print({k: v for k, v in c.items() if k.startswith("gpu.")}, "cupti_shared:",
          tr.meta.get("cupti_shared", 0))
    assert c["gpu.dropped"] == 0 and c["gpu.lost"] == 0 and c["gpu.bad_buffers"] == 0
    assert c["lost.cap"] == 0
    kernels = tr.spans(kind="kernel")
    assert kernels, "no kernel recorded"
    got = collections.Counter(k.name for k in kernels)
    assert got == expected, (got - expected, expected - got)
    models_ = tr.spans(kind="model")
    assert len(models_) == 1
    model = models_[0]
    for k in kernels:
        anc = k.ancestors()
        kinds = [a.kind for a in anc]
        assert "op" in kinds or "backward" in kinds, (k, anc)
        assert "api" in k.attrs, ("kernel without its launch", k, k.attrs)
        api = tr[k.attrs["api"]]
        assert api.kind in ("runtime", "driver") and api.parent == k.parent
        assert k.start_ns >= api.start_ns, (k, api)
        assert tr[k.parent].start_ns <= api.start_ns <= api.end_ns <= tr[k.parent].end_ns
        if "backward" not in kinds and not any(a.name.startswith("autograd::") for a in anc):
            # forward work: inside the model span in time, under a module of the model
            assert model in anc, (k, anc)
            assert model.start_ns <= k.start_ns and k.end_ns <= model.end_ns, (k, model)
            assert any(a.kind in ("module", "model") for a in anc)
    # convolution kernels in the CNN's forward sit under Conv2d modules
    for k in kernels:
        anc = k.ancestors()
        conv_ops = [a for a in anc if a.kind == "op" and a.name == "aten::convolution"]
        if conv_ops:
            mods = [a for a in anc if a.kind == "module"]
            assert mods and mods[0].attrs["type"] == "Conv2d", (k, mods[:1])


def test_graph_kernels_hang_under_the_op_that_launched_the_graph():
    x = torch.ones(1024, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            y = x * 2 + 1
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x * 2 + 1
    torch.cuda.synchronize()
    with xsp.profile(levels="MLG") as prof:
        with torch.profiler.record_function("replay"):
            g.replay()
        torch.cuda.synchronize()
    tr = prof.trace
    graph_kernels = [k for k in tr.spans(kind="kernel") if k.attrs.get("graph_id")]
    assert len(graph_kernels) >= 2, [k.attrs for k in tr.spans(kind="kernel")]
    for k in graph_kernels:
        assert "replay" in [a.name for a in k.ancestors()]
    assert tr.counters["gpu.dropped"] == 0
    del y


def test_torch_profiler_works_after_xsp():
    x = torch.ones(256, device="cuda")
    with xsp.profile(levels="MLG"):
        (x * 2).sum().item()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        (x * 2).sum().item()
    evs = p.profiler.kineto_results.events()
    assert any(e.device_type() == torch.autograd.DeviceType.CUDA for e in evs)


def test_xsp_refuses_g_while_torch_profiler_holds_cupti():
    x = torch.ones(256, device="cuda")
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        with pytest.raises(xsp.LevelUnavailableError, match="CUPTI|another tool"):
            with xsp.profile(levels="MLG"):
                (x * 2).sum().item()


def test_leveled_measurement_mlg_and_analyses():
    """xsp.measure at MLG: three runs, kernels matched across iterations by position, their
    latency from run MLG, the model's from run M; the analyses fill their G columns."""
    run = workload("resnet", "forward")
    m = xsp.measure(run, levels="MLG", warmup=2, repeat=5, progress=False)
    assert m.runs == ("M", "ML", "MLG")
    assert m.overhead[["level", "run"]].values.tolist() == [
        ["M", "M"], ["M", "ML"], ["M", "MLG"], ["L", "ML"], ["L", "MLG"], ["G", "MLG"]]
    t = m.span_table()
    k = t[t["kind"] == "kernel"]
    assert len(k) > 0
    assert (k["source_run"] == "MLG").all() and (k["samples"] == 5).all()
    assert t.loc[t["kind"] == "model", "source_run"].tolist() == ["M"]
    assert m.unmatched == {"M": 0, "ML": 0, "MLG": 0}
    kn = xsp.analysis.kernels(m)
    assert len(kn) == len(k) and kn["layer"].notna().all() and kn["op"].notna().all()
    by_name = xsp.analysis.kernels_by_name(m)
    assert by_name["count"].sum() == len(k)
    gv = xsp.analysis.gpu_vs_cpu(m)
    model_row = gv[gv["layer"] == "(model)"].iloc[0]
    assert model_row["gpu_ns"] > 0
    assert model_row["gpu_ns"] == k["duration_ns"].sum() + t.loc[
        t["kind"].isin(["memcpy", "memset"]), "duration_ns"].sum()
    assert "Top 10 kernels" in xsp.report.html(m) and "Top 10 kernels" in xsp.report.text(m)
