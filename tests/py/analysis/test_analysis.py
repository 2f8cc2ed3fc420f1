"""The analyses of xsp.analysis on hand-built traces with known numbers (docs/analyses.md).

The GPU trace: two iterations (steps between step() calls: step#1, step#2) of a model with layers fc1 (Linear), act (ReLU), fc2 (Linear);
kernels on a stream track hang under the ops (or, in the second iteration, directly under the
layers) that launched them; one memcpy.  Every expected value below is worked out by hand from
the span list.
"""
import math

import numpy as np
import pandas as pd
import pytest

import xsp
from xsp.analysis import tables as A

STREAM = (0 << 32) | 7


def S(name, kind, start, end, parent=None, thread=0, **attrs):
    return {"name": name, "kind": kind, "start_ns": start, "end_ns": end, "parent": parent,
            "thread": thread, "attrs": attrs}


def gpu_trace():
    spans = [
        S("prof", "region", 0, 1000),                                      # 0
        S("step#1", "step", 0, 500, 0),                                    # 1
        S("Net", "model", 10, 490, 1, type="Net"),                         # 2
        S("fc1", "module", 20, 220, 2, type="Linear"),                     # 3
        S("aten::linear", "op", 30, 210, 3),                               # 4
        S("aten::addmm", "op", 40, 200, 4),                                # 5
        S("cudaLaunchKernel", "runtime", 50, 60, 5),                       # 6
        S("gemm", "kernel", 70, 170, 5, 1, flops=2000, dram_bytes=100, grid_x=4),   # 7
        S("act", "module", 230, 300, 2, type="ReLU"),                      # 8
        S("aten::relu", "op", 240, 290, 8),                                # 9
        S("cudaLaunchKernel", "runtime", 250, 255, 9),                     # 10
        S("relu_k", "kernel", 260, 280, 9, 1),                             # 11
        S("fc2", "module", 310, 480, 2, type="Linear"),                    # 12
        S("aten::linear", "op", 320, 470, 12),                             # 13
        S("aten::addmm", "op", 330, 460, 13),                              # 14
        S("cudaMemcpyAsync", "runtime", 340, 345, 14),                     # 15
        S("Memcpy HtoD", "memcpy", 350, 370, 14, 1, bytes=64),             # 16
        S("gemm", "kernel", 380, 440, 14, 1, flops=1200, dram_bytes=60),   # 17
        S("step#2", "step", 500, 1000, 0),                                 # 18
        S("Net", "model", 510, 990, 18, type="Net"),                       # 19
        S("fc1", "module", 520, 700, 19, type="Linear"),                   # 20
        S("gemm", "kernel", 530, 650, 20, 1, flops=2400, dram_bytes=120),  # 21
        S("act", "module", 710, 750, 19, type="ReLU"),                     # 22
        S("fc2", "module", 760, 980, 19, type="Linear"),                   # 23
        S("gemm", "kernel", 770, 970, 23, 1, flops=4000, dram_bytes=200),  # 24
    ]
    return xsp.Trace.from_spans(spans, threads=[(11, "main", 0), (STREAM, "stream 7", 1)],
                                meta={"levels": "MLG", "region": "prof"})


def cpu_trace():
    """The same model, levels ML: no GPU spans at all."""
    spans = [
        S("prof", "region", 0, 300),
        S("Net", "model", 0, 300, 0, type="Net"),
        S("fc1", "module", 10, 110, 1, type="Linear"),
        S("aten::linear", "op", 20, 100, 2),
        S("act", "module", 120, 150, 1, type="ReLU"),
        S("fc2", "module", 160, 290, 1, type="Linear"),
    ]
    return xsp.Trace.from_spans(spans, meta={"levels": "ML", "region": "prof"})


def rows(df):
    return [tuple(None if (isinstance(v, float) and math.isnan(v)) or v is pd.NA else v
                  for v in r) for r in df.itertuples(index=False)]


def test_model_latency_per_iteration_and_throughput():
    df = A.model_latency(gpu_trace(), batch_size=8)
    assert list(df.columns) == ["iteration", "id", "name", "kind", "start_ns", "latency_ns",
                                "throughput_per_s"]
    assert rows(df) == [(0, 1, "step#1", "step", 0, 500, 8e9 / 500),
                        (1, 18, "step#2", "step", 500, 500, 8e9 / 500)]
    assert A.model_latency(gpu_trace())["throughput_per_s"].isna().all()
    # without steps the model spans are the iterations
    assert rows(A.model_latency(cpu_trace())[["id", "name", "latency_ns"]]) == [(1, "Net", 300)]
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        A.model_latency(gpu_trace(), batch_size=0)


def test_layer_table():
    df = A.layers(gpu_trace())
    assert list(df.columns) == ["index", "id", "name", "type", "depth", "leaf", "iteration",
                                "latency_ns", "self_ns", "allocated_bytes"]
    assert df["iteration"].tolist() == [0, 0, 0, 1, 1, 1]
    assert rows(df[["index", "id", "name", "type", "depth", "leaf", "latency_ns"]]) == [
        (0, 3, "fc1", "Linear", 0, True, 200), (1, 8, "act", "ReLU", 0, True, 70),
        (2, 12, "fc2", "Linear", 0, True, 170), (3, 20, "fc1", "Linear", 0, True, 180),
        (4, 22, "act", "ReLU", 0, True, 40), (5, 23, "fc2", "Linear", 0, True, 220)]
    # self time: minus children on the same thread only (kernels are on the stream track)
    assert df["self_ns"].tolist() == [200 - 180, 70 - 50, 170 - 150, 180, 40, 220]
    assert df["allocated_bytes"].isna().all()          # not recorded: empty, not 0
    with pytest.raises(ValueError, match="record_shapes=True"):
        A.layers(gpu_trace(), shapes=True)


def test_layer_ranking_backward_time_through_the_forward_op():
    spans = [
        S("prof", "region", 0, 1000),
        S("Net", "model", 0, 400, 0, type="Net"),
        S("fc", "module", 10, 200, 1, type="Linear"),
        S("aten::linear", "op", 20, 190, 2, seq=7),
        S("act", "module", 210, 390, 1, type="ReLU"),
        S("aten::relu", "op", 220, 380, 4, seq=8),
        S("ReluBackward0", "backward", 500, 560, 0, seq=8, fwd_op=5),
        S("AddmmBackward0", "backward", 600, 900, 0, seq=7, fwd_op=3),
    ]
    tr = xsp.Trace.from_spans(spans, meta={"levels": "ML"})
    assert rows(A.layer_ranking(tr)[["name", "total_ns", "backward_ns"]]) == [
        ("fc", 190, 300), ("act", 180, 60)]


def test_layer_table_shapes_memory_and_nesting():
    spans = [
        S("Net", "model", 0, 100, type="Net"),
        S("block", "module", 10, 90, 0, type="Sequential", shapes="[2, 4]", mem_bytes=4096),
        S("block.0", "module", 20, 50, 1, type="Linear", shapes="[2, 4]", mem_bytes=1024),
        S("block.1", "module", 60, 80, 1, type="ReLU", shapes="[2, 8]"),
    ]
    tr = xsp.Trace.from_spans(spans, meta={"levels": "ML"})
    df = A.layers(tr, shapes=True)
    assert rows(df[["name", "depth", "leaf", "shapes", "latency_ns", "self_ns",
                    "allocated_bytes"]]) == [
        ("block", 0, False, "[2, 4]", 80, 30, 4096.0),
        ("block.0", 1, True, "[2, 4]", 30, 30, 1024.0),
        ("block.1", 1, True, "[2, 8]", 20, 20, None)]
    # aggregates use leaf layers only, so nothing is counted twice
    assert rows(A.layer_ranking(tr)[["name", "total_ns"]]) == [("block.0", 30), ("block.1", 20)]


def test_layer_ranking_and_types():
    df = A.layer_ranking(gpu_trace())
    # forward time: the two Net calls, 480 + 480; the iterations' time: 500 + 500
    assert list(df.columns) == ["rank", "name", "type", "calls", "total_ns", "mean_ns",
                                "std_ns", "backward_ns", "forward_share", "step_share",
                                "cumulative_step_share"]
    # std over the calls: fc2 170, 220; fc1 200, 180; act 70, 40
    assert rows(df) == [(1, "fc2", "Linear", 2, 390, 195, np.std([170, 220], ddof=1), 0,
                         390 / 960, 0.39, 0.39),
                        (2, "fc1", "Linear", 2, 380, 190, np.std([200, 180], ddof=1), 0,
                         380 / 960, 0.38, 0.77),
                        (3, "act", "ReLU", 2, 110, 55, np.std([70, 40], ddof=1), 0,
                         110 / 960, 0.11, 0.88)]
    assert rows(A.layer_ranking(gpu_trace(), n=1))[0][1] == "fc2"
    t = A.layer_types(gpu_trace())
    assert list(t.columns) == ["type", "count", "total_ns", "backward_ns", "count_share",
                               "forward_share", "step_share"]
    assert rows(t) == [("Linear", 4, 770, 0, 4 / 6, 770 / 960, 0.77),
                       ("ReLU", 2, 110, 0, 2 / 6, 110 / 960, 0.11)]


def test_kernel_table():
    df = A.kernels(gpu_trace())
    assert rows(df[["index", "id", "name", "start_ns", "duration_ns", "op", "layer",
                    "stream", "grid_x"]]) == [
        (0, 7, "gemm", 70, 100, "aten::addmm", "fc1", None, 4),
        (1, 11, "relu_k", 260, 20, "aten::relu", "act", None, None),
        (2, 17, "gemm", 380, 60, "aten::addmm", "fc2", None, None),
        (3, 21, "gemm", 530, 120, None, "fc1", None, None),
        (4, 24, "gemm", 770, 200, None, "fc2", None, None)]


def test_kernels_by_name():
    df = A.kernels_by_name(gpu_trace())
    assert rows(df) == [("gemm", 4, 480, 120, 60, 200, 0.48),
                        ("relu_k", 1, 20, 20, 20, 20, 0.02)]


def test_kernels_by_layer_and_op():
    df = A.kernels_by_layer(gpu_trace())
    assert list(df.columns) == ["layer", "type", "calls", "latency_ns", "kernels", "kernel_ns",
                                "copy_ns", "gpu_ns", "cpu_ns", "gpu_share"]
    assert rows(df) == [
        ("fc1", "Linear", 2, 380, 2, 220, 0, 220, 160, 220 / 380),
        ("act", "ReLU", 2, 110, 1, 20, 0, 20, 90, 20 / 110),
        ("fc2", "Linear", 2, 390, 2, 260, 20, 280, 110, 280 / 390)]
    op = A.kernels_by_op(gpu_trace())
    assert rows(op) == [
        ("aten::linear", 2, 330, 2, 160, 20, 180, 150, 180 / 330),
        ("aten::addmm", 2, 290, 2, 160, 20, 180, 110, 180 / 290),
        ("aten::relu", 1, 50, 1, 20, 0, 20, 30, 20 / 50)]


def test_gpu_vs_cpu():
    df = A.gpu_vs_cpu(gpu_trace())
    assert rows(df) == [
        ("fc1", "Linear", 2, 380, 220, 160, 220 / 380, 160 / 380),
        ("act", "ReLU", 2, 110, 20, 90, 20 / 110, 90 / 110),
        ("fc2", "Linear", 2, 390, 280, 110, 280 / 390, 110 / 390),
        ("(model)", None, 2, 1000, 520, 480, 0.52, 0.48)]


def test_roofline():
    df = A.roofline(gpu_trace())
    # the columns of before come first, unchanged; the roof columns after them (dtype,
    # flops_per_s, ...) are checked in test_roofline.py
    assert list(df.columns)[:9] == ["name", "count", "duration_ns", "flops", "dram_bytes",
                                    "arithmetic_intensity", "gflops", "dram_gbps", "bound"]
    df = df.iloc[:, :9]
    assert rows(df) == [("gemm", 4, 480, 9600.0, 480.0, 20.0, 20.0, 1.0, None),
                        ("relu_k", 1, 20, None, None, None, None, None, None)]
    compute = A.roofline(gpu_trace(), peak_gflops=1000, peak_dram_gbps=100)   # ridge 10
    assert compute["bound"].tolist() == ["compute", None]
    memory = A.roofline(gpu_trace(), peak_gflops=1000, peak_dram_gbps=10)     # ridge 100
    assert memory["bound"].tolist() == ["memory", None]


def test_cpu_trace_leaves_gpu_columns_empty():
    tr = cpu_trace()
    assert len(A.kernels(tr)) == 0 and len(A.kernels_by_name(tr)) == 0
    assert len(A.roofline(tr)) == 0
    df = A.kernels_by_layer(tr)
    assert rows(df[["layer", "latency_ns"]]) == [("fc1", 100), ("act", 30), ("fc2", 130)]
    for c in ("kernels", "kernel_ns", "copy_ns", "gpu_ns", "cpu_ns", "gpu_share"):
        assert df[c].isna().all(), c
    g = A.gpu_vs_cpu(tr)
    assert g["layer"].tolist() == ["fc1", "act", "fc2", "(model)"]
    assert g["latency_ns"].tolist() == [100, 30, 130, 300]
    assert g[["gpu_ns", "cpu_ns", "gpu_share", "cpu_share"]].isna().all().all()


def test_span_table_source_and_bad_sources():
    tr = gpu_trace()
    assert rows(A.layer_ranking(tr.to_pandas())) == rows(A.layer_ranking(tr))
    with pytest.raises(TypeError, match="xsp.Trace, an xsp.Measurement"):
        A.layers([1, 2])
    with pytest.raises(ValueError, match="lacks column"):
        A.layers(pd.DataFrame({"id": [0]}))


def test_analyses_on_a_real_cpu_model():
    torch = pytest.importorskip("torch")
    from xsp import models
    model, x = models.get("resnet", batch=2)
    with xsp.profile(levels="ML") as prof:
        with torch.no_grad():
            model(x)
    tr = prof.trace
    lay = A.layers(tr)
    named = dict(model.named_modules())
    assert set(lay["name"]) == {n for n in named if n}
    assert all(lay["type"] == [type(named[n]).__name__ for n in lay["name"]])
    leaf_names = {n for n, m in named.items() if n and not list(m.children())}
    assert set(lay.loc[lay["leaf"], "name"]) == leaf_names
    rk = A.layer_ranking(tr)
    assert rk["total_ns"].is_monotonic_decreasing
    assert rk["total_ns"].sum() <= A.model_latency(tr)["latency_ns"].sum()
    ty = A.layer_types(tr)
    assert ty["count"].sum() == lay["leaf"].sum()      # calls: relu runs twice per block
    assert len(A.kernels(tr)) == 0


def test_shapes_and_memory_recorded_by_profile():
    torch = pytest.importorskip("torch")
    from torch import nn
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    with xsp.profile(levels="ML", record_shapes=True, profile_memory=True) as prof:
        model(torch.ones(3, 4))
        model(torch.ones(5, 4))
    lay = A.layers(prof.trace, shapes=True)
    assert rows(lay[["name", "type", "shapes"]]) == [
        ("0", "Linear", "[3, 4]"), ("1", "ReLU", "[3, 8]"), ("2", "Linear", "[3, 8]"),
        ("0", "Linear", "[5, 4]"), ("1", "ReLU", "[5, 8]"), ("2", "Linear", "[5, 8]")]
    assert [s.attrs["shapes"] for s in prof.trace.spans(kind="model")] == ["[3, 4]", "[5, 4]"]
    # no CUDA here: PyTorch reports no allocations, so the column is empty, not 0
    if not torch.cuda.is_available():
        assert lay["allocated_bytes"].isna().all()
    # survives the file
    assert A.layers(xsp.Trace.from_bytes(prof.trace.to_bytes()), shapes=True)[
        "shapes"].tolist() == lay["shapes"].tolist()


def test_text_and_html_reports_on_the_gpu_trace():
    from html.parser import HTMLParser
    tr = gpu_trace()
    txt = xsp.report.text(tr, top=2)
    lines = txt.splitlines()
    assert lines[:5] == ["xsp report: prof",
                         "levels MLG, 25 spans, 2 iterations: steps (the work between step() "
                         "calls)",
                         "step latency: mean 500 ns ± 0 ns, median 500 ns, min 500 ns, max "
                         "500 ns",
                         "per step (mean ± std): forward (model calls) 480 ns ± 0 ns, other "
                         "20 ns ± 0 ns",
                         "lost or dropped: none"]
    i = lines.index("Top 2 layers (leaf layers, by forward time; backward attributed through "
                    "the forward op)")
    assert lines[i + 1].split() == ["rank", "name", "type", "calls", "total", "mean", "std",
                                    "backward", "fwd-share", "step-share"]
    assert lines[i + 2].split() == ["1", "fc2", "Linear", "2", "390", "ns", "195", "ns", "35",
                                    "ns", "0", "ns", "40.6%", "39.0%"]
    i = lines.index("Top 2 kernels")
    assert lines[i + 2].split() == ["gemm", "4", "480", "ns", "120", "ns", "60", "ns", "200",
                                    "ns", "48.0%"]
    i = lines.index("Top 2 ops (by self)")
    assert lines[i + 2].split() == ["aten::addmm", "2", "290", "ns", "275", "ns", "145", "ns",
                                    "21", "ns", "27.5%", "180", "ns", "180", "ns"]
    assert lines[-1] == ("GPU vs CPU: model 1.000 us = GPU work 520 ns (52.0%) + CPU 480 ns "
                         "(48.0%)")

    class P(HTMLParser):
        def __init__(self):
            super().__init__()
            self.cells, self.h3, self.imgs, self._in = [], [], 0, None

        def handle_starttag(self, tag, attrs):
            self._in = tag
            self.imgs += tag == "img"

        def handle_endtag(self, tag):
            self._in = None

        def handle_data(self, data):
            if self._in in ("td", "th") and data.strip():
                self.cells.append(data.strip())
            if self._in == "h3" and data.strip():
                self.h3.append(data.strip())

    p = P()
    p.feed(xsp.report.html(tr, top=2))
    assert p.h3 == ["Iterations, by phase", "Top 2 layers", "Layer types", "Top 2 ops",
                    "Top 2 kernels", "GPU vs CPU per layer",
                    "Timeline of iteration 1 (the median by latency)", "Tree of that iteration",
                    "Plots"]
    k = p.cells.index("gemm")
    assert p.cells[k:k + 7] == ["gemm", "4", "480 ns", "120 ns", "60 ns", "200 ns", "48.0%"]
    m = p.cells.index("(model)")
    assert p.cells[m:m + 8] == ["(model)", "-", "2", "1.000 us", "520 ns", "480 ns", "52.0%",
                                "48.0%"]
    # latency per iteration by phase, top layers, layer types, top ops, top kernels, GPU vs CPU:
    # inline SVG (no PNG), after the timeline
    assert p.imgs == 0
    doc = xsp.report.html(tr, top=2)
    assert doc.count("<svg xmlns") == 1 + 6 and doc.count("<details") >= 1
    assert doc.count('class="xsp-iters"') == 1 and doc.count('class="xsp-bars"') == 5
    assert xsp.report.html_fragment(tr).startswith('<div class="xsp-report">')
    # CPU trace: no kernel section, says so
    assert "Kernels, GPU vs CPU: level G was not recorded" in xsp.report.text(cpu_trace())


def test_work_on_other_threads_belongs_to_the_iteration_it_started_in():
    # autograd's device thread (track 2) runs a backward function adopted by the region
    # during step#0; its kernel counts towards that iteration's GPU work
    spans = [
        S("prof", "region", 0, 1000),                                  # 0
        S("step#1", "step", 0, 500, 0),                                # 1
        S("Net", "model", 10, 200, 1, type="Net"),                     # 2
        S("fc", "module", 20, 190, 2, type="Linear"),                  # 3
        S("gemm", "kernel", 30, 130, 3, 1),                            # 4
        S("MmBackward0", "backward", 300, 450, 0, 2),                  # 5
        S("gemm_bw", "kernel", 310, 400, 5, 1),                        # 6
        dict(S("step#2", "step", 500, 1000, 0), flags=1),              # 7: open at stop
        S("late", "backward", 1001, 1002, 0, 2),                       # 8: after every step
        S("k_late", "kernel", 1001, 1002, 8, 1),                       # 9
    ]
    tr = xsp.Trace.from_spans(spans, threads=[(11, "main", 0), (STREAM, "s", 1),
                                               (12, "autograd", 0)], meta={"levels": "MLG"})
    g = A.gpu_vs_cpu(tr)
    # step#2 is the tail after the last step() (open at stop) with no model call in it: not
    # an iteration
    assert rows(A.model_latency(tr)[["id", "latency_ns"]]) == [(1, 500)]
    assert rows(g[g["layer"] == "(model)"][["latency_ns", "gpu_ns", "cpu_ns"]]) == [
        (500, 100 + 90, 500 - 190)]
    assert A.kernels(tr)["iteration"].tolist() == [0, 0, -1]   # every kernel is listed
    assert A.kernels_by_name(tr)["count"].sum() == 2      # those in iterations are counted


def test_level_l_alone_iterations_are_the_top_level_calls():
    spans = [
        S("aten::ones", "op", 0, 5),
        S("Net", "module", 10, 110, type="Net"),
        S("Net.fc", "module", 20, 100, 1, type="Linear"),
        S("aten::sum", "op", 120, 125),
        S("Net", "module", 200, 260, type="Net"),
    ]
    tr = xsp.Trace.from_spans(spans, meta={"levels": "L"})
    assert rows(A.model_latency(tr)[["id", "latency_ns"]]) == [(1, 100), (4, 60)]


def test_span_table_with_a_parent_cycle_is_refused():
    df = gpu_trace().to_pandas().head(3).copy()
    df.loc[1, "parent"] = 2
    with pytest.raises(ValueError, match="span 1: parent 2 is not before it"):
        A.layers(df)
