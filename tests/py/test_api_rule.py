"""The one rule of the API (issue 25, docs/api.md "The rule"): xsp.load / xsp.save by format,
xsp.report for every value, one Latency record, and the spellings of the release before, each
still working with a DeprecationWarning that names the new one."""
import gzip
import importlib
import json
import math
import sys
import warnings

import pytest

import xsp
from xsp.values.measurement import Latency


def S(name, kind, start, end, parent=None, **attrs):
    return {"name": name, "kind": kind, "start_ns": start, "end_ns": end, "parent": parent,
            "attrs": attrs}


@pytest.fixture
def tr():
    return xsp.Trace.from_spans([S("region", "region", 0, 1000),
                                 S("step#0", "step", 10, 900, 0),
                                 S("Net", "module", 20, 800, 1, type="Net"),
                                 S("aten::mm", "op", 30, 500, 2),
                                 S("aten::relu", "op", 520, 700, 2)],
                                meta={"levels": "ML", "pid": 7})


@pytest.mark.parametrize("name,fmt", [("a.xsp", "xsp"), ("a.pt.trace.json", "kineto"),
                                      ("a.pt.trace.json.gz", "kineto"), ("A.JSON.GZ", "kineto"),
                                      ("a.json", "chrome"), ("a.otlp.json", "otlp"),
                                      ("A.OTLP.JSON.GZ", "otlp"), ("a.txt", None), ("a", None)])
def test_the_format_comes_from_the_extension(name, fmt):
    assert xsp.formats.format_of(name) == fmt


def test_save_and_load_by_extension(tr, tmp_path):
    p = xsp.save(tr, tmp_path / "a.xsp")
    assert p == tmp_path / "a.xsp" and xsp.load(p) == tr
    for name in ("a.pt.trace.json", "a.pt.trace.json.gz"):
        xsp.save(tr, tmp_path / name)
        back = xsp.load(tmp_path / name)
        assert [s.name for s in back.spans(kind="op")] == ["aten::mm", "aten::relu"], name
        assert [s.duration_ns for s in back.spans(kind="op")] == [470, 180], name
    xsp.save(tr, tmp_path / "a.json")       # trace events read back by the same reader
    back = xsp.load(tmp_path / "a.json")
    assert sorted((s.name, s.duration_ns) for s in back if s.name.startswith("aten::")) == [
        ("aten::mm", 470), ("aten::relu", 180)]
    with gzip.open(tmp_path / "a.pt.trace.json.gz") as f:
        assert "traceEvents" in json.load(f)
    with open(tmp_path / "a.json") as f:
        assert "traceEvents" in json.load(f)


def test_format_overrides_the_extension_and_unknown_paths_are_sniffed(tr, tmp_path):
    xsp.save(tr, tmp_path / "a.bin", format="xsp")
    xsp.save(tr, tmp_path / "b.bin", format="kineto")
    assert xsp.load(tmp_path / "a.bin") == tr                       # not JSON: the .xsp reader
    assert len(xsp.load(tmp_path / "b.bin").spans(kind="op")) == 2  # JSON: Kineto's reader
    assert xsp.load(tmp_path / "a.bin", format="xsp") == tr


def test_what_cannot_be_saved_or_loaded_says_why(tr, tmp_path):
    with pytest.raises(ValueError, match=r"'.*a\.txt' has no extension xsp knows.*pass format="):
        xsp.save(tr, tmp_path / "a.txt")
    with pytest.raises(ValueError, match="format must be one of xsp, kineto, chrome, otlp"):
        xsp.save(tr, tmp_path / "a.xsp", format="csv")
    with pytest.raises(TypeError, match="an .xsp file holds one xsp.Trace, not a dict"):
        xsp.save({}, tmp_path / "a.xsp")
    with pytest.raises(xsp.TraceFormatError, match="writes OTLP/JSON but does not read it"):
        xsp.load(tmp_path / "a.otlp.json")
    assert not list(tmp_path.iterdir())


class _Own:
    """A value with its own save and report (as xsp.perf's Result)."""
    def __xsp_save__(self, path, format=None):
        with open(path, "w") as f:
            f.write("own %s" % format)
        return path

    def __xsp_report__(self, kind, top=10):
        return "%s report, top %d" % (kind, top)


def test_a_value_with_its_own_save_and_report(tmp_path):
    assert xsp.save(_Own(), tmp_path / "x.json") == tmp_path / "x.json"
    assert (tmp_path / "x.json").read_text() == "own None"
    assert xsp.report.text(_Own(), top=3) == "text report, top 3"
    assert xsp.report.html_fragment(_Own()) == "html report, top 10"
    doc = xsp.report.html(_Own(), tmp_path / "x.html")
    assert doc.startswith("<!DOCTYPE html>") and "html report, top 10" in doc
    assert (tmp_path / "x.html").read_text() == doc


def test_report_text_of_a_comparison_is_its_text(tr):
    c = xsp.analysis.compare.compare(tr, tr)
    text = xsp.report.text(c, names=("a", "b"))
    assert text.splitlines()[0] == "xsp compare: a -> b"
    assert text == c._text(names=("a", "b"))
    assert xsp.report.text(c, top=1) == c._text(top=1)


def test_latency_is_one_record():
    lat = Latency.of([5.0, 1.0, 3.0, 100.0, 2.0], trim=0.2)     # drops 1 and 100
    assert (lat.n, lat.mean_ns, lat.median_ns, lat.min_ns, lat.max_ns) == (5, 10 / 3, 3.0, 1.0,
                                                                            100.0)
    assert lat.std_ns == pytest.approx(math.sqrt(((2 - 10 / 3) ** 2 + (3 - 10 / 3) ** 2 +
                                                  (5 - 10 / 3) ** 2) / 2))
    assert lat.samples_ns == (5.0, 1.0, 3.0, 100.0, 2.0) and lat.trim == 0.2
    one = Latency.of([7.0])
    assert (one.n, one.mean_ns, one.median_ns) == (1, 7.0, 7.0) and math.isnan(one.std_ns)
    none = Latency.of([])
    assert none.n == 0 and math.isnan(none.mean_ns) and none.samples_ns == ()
    assert Latency.of([1.0, 2.0]) == Latency.of([1.0, 2.0]) != Latency.of([2.0, 1.0])
    with pytest.raises(AttributeError, match="immutable"):
        lat.n = 3
    assert lat.as_dict()["samples_ns"] == [5.0, 1.0, 3.0, 100.0, 2.0]
    with pytest.warns(DeprecationWarning, match=r"latency\['n'\] is deprecated: use latency.n"):
        assert lat["n"] == 5


def _warns(match):
    return pytest.warns(DeprecationWarning, match=match)


def test_the_old_spellings_warn_and_still_work(tr, tmp_path):
    with _warns(r"Trace.save\(path\) is deprecated: use xsp.save\(trace, path\)"):
        tr.save(str(tmp_path / "a.xsp"))
    assert xsp.load(tmp_path / "a.xsp") == tr
    with _warns(r"Trace.to_kineto\(path\) is deprecated: use xsp.save\(trace, path\)"):
        tr.to_kineto(str(tmp_path / "a.pt.trace.json"))
    with _warns(r"xsp.load_kineto\(path\) is deprecated: use xsp.load\(path\)"):
        back = xsp.load_kineto(str(tmp_path / "a.pt.trace.json"))
    assert len(back.spans(kind="op")) == 2
    c = xsp.analysis.compare.compare(tr, tr)
    with _warns(r"Comparison.text\(\) is deprecated: use xsp.report.text\(comparison\)"):
        assert c.text() == c._text()
    with _warns(r"xsp.report.compare_text\(before, after\) is deprecated"):
        assert xsp.report.compare_text(tr, tr) == c._text()
    with _warns(r"xsp.report.compare\(before, after\) is deprecated: use "
                r"xsp.analysis.compare.compare"):
        xsp.report.compare(tr, tr)
    with _warns(r"xsp.otlp.write_json\(source, path\) is deprecated: use xsp.save"):
        try:
            xsp.formats.otlp.write_json(tr, str(tmp_path / "a.otlp.json"))
        except ImportError:         # without the otlp extra: the warning came first
            pass


@pytest.mark.parametrize("old,new", [("chrome", "xsp.formats.chrome"),
                                     ("kineto", "xsp.formats.kineto"),
                                     ("flops", "xsp.analysis.flops"),
                                     ("memory", "xsp.analysis.memory"),
                                     ("compiled", "xsp.analysis.compiled"),
                                     ("distributed", "xsp.analysis.distributed"),
                                     ("peaks", "xsp.analysis.peaks"),
                                     ("compare", "xsp.analysis.compare"),
                                     ("trace", "xsp.values.trace"),
                                     ("leveled", "xsp.producers.leveled"),
                                     ("profiler", "xsp.producers.profiler")])
def test_old_module_paths_warn_and_give_the_new_module(old, new, monkeypatch):
    new_mod = importlib.import_module(new)
    monkeypatch.delitem(sys.modules, "xsp." + old, raising=False)
    if old in vars(xsp):            # set by an earlier import of the old path
        monkeypatch.delitem(vars(xsp), old)
    with _warns(r"xsp.%s is deprecated: use " % old):
        assert getattr(xsp, old) is new_mod
    with _warns(r"xsp.%s is deprecated: use " % old):
        assert importlib.import_module("xsp." + old) is new_mod


def test_the_new_spellings_do_not_warn(tr, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        xsp.save(tr, tmp_path / "a.xsp")
        xsp.save(tr, tmp_path / "a.pt.trace.json")
        xsp.save(tr, tmp_path / "a.json")
        xsp.load(tmp_path / "a.pt.trace.json")
        xsp.report.text(tr)
        xsp.report.text(xsp.analysis.compare.compare(tr, tr))
        xsp.analysis.ops(tr)
        xsp.analysis.flops.footprint  # noqa: B018 -- the attribute, reached the new way
        xsp.analysis.memory.DEVICES  # noqa: B018


def test_peaks_are_benchmarked_and_measure_is_the_old_spelling(monkeypatch):
    """One meaning per verb: measure times a workload (xsp.measure, xsp.perf.measure); a
    device's peaks are benchmark()ed.  peaks.measure warns and hands the call on, arguments
    and all."""
    from xsp.analysis import peaks
    calls = []
    monkeypatch.setattr(peaks, "benchmark", lambda device="cpu", budget_s=2.0, dtypes=None,
                        rounds=3: calls.append((device, budget_s, dtypes, rounds)) or "peaks")
    with _warns(r"xsp.analysis.peaks.measure\(device\) is deprecated: use "
                r"xsp.analysis.peaks.benchmark\(device\)"):
        assert peaks.measure("cpu", budget_s=0.5, dtypes=["float32"], rounds=2) == "peaks"
    assert calls == [("cpu", 0.5, ["float32"], 2)]
