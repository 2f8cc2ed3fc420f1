"""One number, one text (issue 25: "the same number prints three ways" must end): every report
formats a number with xsp.core.fmt, so a value prints the same in the text report, the HTML
report, the pytest plugin's summary and the peaks' description.

Guards against a report growing a formatter of its own again: 123,456,789 bytes was
"117.7 MiB" in the HTML table, "118 MiB" in the plot and "117.74 MiB" in the pytest summary.
"""
import html
import re

import pytest

import xsp
from xsp import report
from xsp.analysis import peaks as P
from xsp.core import fmt
from xsp import pytest_plugin

BYTES = 123_456_789
FLOPS_PER_S = 1.2345e11


def S(name, kind, start, end, parent=None, **attrs):
    return {"name": name, "kind": kind, "start_ns": start, "end_ns": end, "parent": parent,
            "attrs": attrs}


def _mem(alloc):
    return {"mem.cpu.allocs": 1, "mem.cpu.alloc_bytes": alloc, "mem.cpu.frees": 1,
            "mem.cpu.freed_bytes": alloc, "mem.cpu.peak": alloc, "mem.cpu.total": 0}


def _trace():
    """A model call with one addmm (inputs as torch.profiler records them: 2 x 8 x 16 x 32
    = 8192 FLOPs) that allocated and freed BYTES."""
    mm = {"input_dims": "[[32], [8, 16], [16, 32], [], []]",
          "input_types": '["float", "float", "float", "Scalar", "Scalar"]',
          "input_strides": "[[1], [16, 1], [1, 16], [], []]",
          "concrete_inputs": '["", "", "", "1", "1"]', "overload": ""}
    return xsp.Trace.from_spans(
        [S("prof", "region", 0, 10_000), S("Net", "model", 100, 9_000, 0, type="Net"),
         S("aten::addmm", "op", 200, 8_000, 1, **mm, **_mem(BYTES))],
        meta={"levels": "ML", "region": "prof"})


class _Terminal:
    def __init__(self):
        self.lines = []

    def write_sep(self, sep, title):
        self.lines.append(title)

    def write_line(self, line):
        self.lines.append(line)


class _State:
    json = None
    results = [{"key": "test_x", "mean_ns": 1e6, "std_ns": 1e4, "iterations": 10,
                "counts": {"ops_total": 12, "bytes_allocated": BYTES}, "baseline": None,
                "baseline_note": None, "failures": [], "status": "passed"}]


def _pytest_summary():
    term = _Terminal()
    pytest_plugin._summary(term, _State())
    return "\n".join(term.lines)


def test_the_kinds_of_number():
    assert fmt.fmt_bytes(BYTES) == "117.7 MiB"
    assert fmt.fmt_si(FLOPS_PER_S, "FLOP/s") == "123 GFLOP/s"
    assert fmt.fmt_si(30_700) == "30.7 k"
    assert fmt.fmt_ns(1_234_567) == "1.235 ms"
    assert fmt.fmt_signed(-193_900, -0.019) == "-193.900 us (-1.9%)"
    assert fmt.fmt_share(0.1234) == "12.3%"
    assert fmt.fmt_share(0.000123, precise=True) == "0.0123%"
    assert fmt.fmt_count(12) == "12"
    assert fmt.fmt_count(1_048_576, exact=True) == "1,048,576"
    assert fmt.fmt_count(2.5, exact=True) == "2.50"
    for f in (fmt.fmt_ns, fmt.fmt_signed, fmt.fmt_bytes, fmt.fmt_si, fmt.fmt_share,
              fmt.fmt_count):
        assert f(None) == "-" and f(float("nan")) == "-"


def test_bytes_print_the_same_in_every_report():
    text = fmt.fmt_bytes(BYTES)
    tr = _trace()
    reports = {"text": report.text(tr), "html": html.unescape(report.html(tr)),
               "pytest summary": _pytest_summary()}
    for name, out in reports.items():
        assert text in out, name
        # no other rendering of the same number
        assert not re.search(r"117\.\d\d+ MiB|\b118 MiB|123\.\d+ MB|\b123456789\b", out), name


def test_flops_print_the_same_in_every_report(monkeypatch, tmp_path):
    pytest.importorskip("torch")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(P.ENV, '{"device": "cpu", "flops_per_s": {"float32": %r}, '
                       '"bytes_per_s": 2e10}' % FLOPS_PER_S)
    tr = _trace()
    flops = fmt.fmt_si(8192)
    rate = fmt.fmt_si(FLOPS_PER_S, "FLOP/s")
    text, page = report.text(tr), html.unescape(report.html(tr))
    assert "%s FLOPs" % flops in text
    assert flops in page and "8192" not in page
    assert "float32 %s" % rate in page
    assert "float32 %s" % rate in repr(P.get("cpu"))
