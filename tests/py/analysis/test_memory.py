"""xsp.analysis.memory.summary: the totals per device that the text summary prints (issue 28:
`xsp summary` reads them from the trace's attribute columns, without pandas).  Guards against the
numpy reading of a Trace drifting from the span table's (pandas' to_numeric over to_pandas'
columns): the same dict from both, on a recorded training step and on hand-made spans whose
figures are worked out below, text values (only in a damaged file) read as pandas reads them,
and a device without a peak (once a ValueError: int(NaN)).
"""
import torch

import xsp
from xsp.analysis import memory


def S(name, kind, start, end, parent=None, **attrs):
    return {"name": name, "kind": kind, "start_ns": start, "end_ns": end, "parent": parent,
            "attrs": attrs}


def mem(allocs, alloc_bytes, frees, freed_bytes, peak, total, dev="cpu"):
    return {"mem.%s.%s" % (dev, f): v for f, v in zip(memory.FIELDS, (
        allocs, alloc_bytes, frees, freed_bytes, peak, total))}


def hand_trace(extra=None):
    spans = [S("prof", "region", 0, 1000),
             S("step#0", "step", 0, 500, 0),
             S("aten::mm", "op", 20, 100, 1, **mem(2, 1024, 1, 512, 4096, 512)),
             S("aten::add", "op", 120, 200, 1, **mem(3, 2 ** 60 + 1, 0, 0, 9000, 700),
               **mem(1, 2 ** 53 + 1, 0, 0, 2 ** 61 + 3, 2 ** 53 + 1, dev="cuda")),
             S("step#1", "step", 500, 1000, 0),
             S("aten::mm", "op", 520, 600, 4, **(extra or mem(1, 8, 1, 8, 100, 0)))]
    return xsp.Trace.from_spans(spans, meta={"levels": "ML", "region": "prof"},
                                counters={"memory.outside_spans.cpu.alloc_bytes": 77,
                                          "memory.outside_spans.cpu.freed_bytes": 5})


def without_outside(s):
    return {dev: dict(t, outside_alloc_bytes=0, outside_freed_bytes=0) for dev, t in s.items()}


def test_summary_of_a_trace_exact_and_equal_to_the_span_tables():
    tr = hand_trace()
    s = memory.summary(tr)
    # sums and the peak as float64, as the span table's to_numeric reads them: 2**60 + 1 + ...
    # and 2**53 + 1 round to the nearest float
    assert s == {
        "cpu": {"allocs": 6, "alloc_bytes": int(float(1024) + float(2 ** 60 + 1) + 8.0),
                "frees": 2, "freed_bytes": 520, "peak_bytes": 9000,
                "outside_alloc_bytes": 77, "outside_freed_bytes": 5},
        "cuda": {"allocs": 1, "alloc_bytes": 2 ** 53, "frees": 0, "freed_bytes": 0,
                 "peak_bytes": 2 ** 61, "outside_alloc_bytes": 0, "outside_freed_bytes": 0}}
    assert without_outside(s) == memory.summary(tr.to_pandas())


def test_summary_of_a_recorded_step_equals_the_span_tables():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 8)
    with xsp.profile(levels="ML", profile_memory=True) as prof:
        for _ in range(2):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            xsp.step()
    tr = prof.trace
    s = memory.summary(tr)
    assert set(s) == {"cpu"} and s["cpu"]["allocs"] > 0 and s["cpu"]["frees"] > 0
    assert without_outside(s) == memory.summary(tr.to_pandas())
    spans = memory.spans(tr, device="cpu")
    assert s["cpu"]["alloc_bytes"] == int(spans["alloc_bytes"].sum())
    assert s["cpu"]["peak_bytes"] == int(spans["peak_bytes"].max())


def test_text_values_are_read_as_the_span_table_reads_them():
    """"3" is 3 (pandas' to_numeric reads numeric text), "x" is missing, 2.5 a float."""
    tr = hand_trace(extra={"mem.cpu.allocs": "3", "mem.cpu.alloc_bytes": "x",
                           "mem.cpu.freed_bytes": 2.5, "mem.cpu.peak": 100})
    s = memory.summary(tr)
    assert s["cpu"] == {"allocs": 8, "alloc_bytes": int(float(1024) + float(2 ** 60 + 1)),
                        "frees": 1, "freed_bytes": 514, "peak_bytes": 9000,
                        "outside_alloc_bytes": 77, "outside_freed_bytes": 5}
    assert without_outside(s) == memory.summary(tr.to_pandas())


def test_a_device_without_a_peak_has_none_and_the_summary_says_so():
    tr = hand_trace(extra={"mem.other.allocs": 4})
    s = memory.summary(tr)
    assert s["other"] == {"allocs": 4, "alloc_bytes": 0, "frees": 0, "freed_bytes": 0,
                          "peak_bytes": None, "outside_alloc_bytes": 0,
                          "outside_freed_bytes": 0}
    assert "  other: 4 allocations, 0 B allocated, 0 B freed, peak - allocated; outside every " \
           "span 0 B allocated\n" in xsp.report.text(tr)
