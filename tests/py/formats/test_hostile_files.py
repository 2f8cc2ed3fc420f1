"""Hostile but valid trace files: whatever xsp.load accepts, the views, exporters, analyses and
reports built on a Trace must either work or raise xsp's typed errors, never a raw TypeError,
ValueError, OverflowError, KeyError or RecursionError from deep inside, and never hang.

"Everything" is listed explicitly: exporters() (save/load .xsp, Kineto's JSON, the Chrome
trace, the OTLP exports, the text and HTML reports) and analyses() (the views, xsp.analysis,
xsp.flops, xsp.memory, xsp.compare, xsp.compiled and xsp.distributed's readers), each call by
name; run_all() lets through only xsp's typed errors (TYPED) and the documented refusals of a
trace that lacks what an analysis needs (REFUSALS).

Four kinds of tests:
  - regression tests for what fuzzing found, each named after what it guards against, with
    exact assertions;
  - hostile traces built by hand (hostile_traces(): attributes of unexpected types, names like
    columns, huge ids, times past 2**63, zero-length iterations, odd names, a merged job of
    odd ranks, a deep chain) through every exporter and analysis;
  - a 100,000-deep parent chain through tree(), to_pandas(), the analyses and report.text
    (everything must be linear or n log n in the number of spans);
  - a mutation fuzzer over the .xsp bytes of a few small real traces: byte flips, truncations
    and structured mutations of the decoded msgpack (attribute values of the wrong type, huge
    ints, strings where ints are expected, meta of the wrong types, odd tracks, spans, names).
    Every mutant the reader accepts goes through every exporter (and every tenth through every
    analysis); only xsp's typed errors may escape.  Deterministic (fixed seed, fake clock);
    XSP_FUZZ_MUTANTS=20000 runs more, each through everything.
"""
import os
import random
import re
import struct
import time
import warnings

import numpy as np
import pytest
import torch

import xsp
import xsp.analysis.distributed
import xsp.formats.otlp
import xsp.analysis.peaks
from xsp import _core
from xsp.analysis import tables as A
from xsp.values.trace import KINDS, LEVELS

from helpers import have_otlp

ANALYSES = [getattr(A, name) for name in A.__all__]
TYPED = (xsp.TraceFormatError, xsp.ProfilerError, xsp.formats.otlp.ExportError,
         xsp.formats.otlp.TimeRangeError, xsp.analysis.distributed.MergeError, xsp.analysis.peaks.PeaksError)
# the documented refusals of a trace that lacks what an analysis needs (a ValueError whose
# message says what to record: docs/analyses.md); anything else escaping is a bug
REFUSALS = re.compile(r"this trace has no input shapes: |this trace has no op input shapes: |"
                      r"this trace has no memory per span: |roofline\(by='\w+'\) needs the "
                      r"ops' inputs |this trace has no op inputs \(span attribute input_dims\)")

HAVE_OTLP = have_otlp()


def S(name, kind, start, end, parent=None, thread=0, **attrs):
    return {"name": name, "kind": kind, "start_ns": start, "end_ns": end, "parent": parent,
            "thread": thread, "attrs": attrs}


def roundtrip(tr, path):
    xsp.save(tr, path)
    assert xsp.load(path) == tr


def exporters(tr, tmp_path, html=True):
    """Every exporter of a Trace, by name: xsp.save in every format (the .xsp file loaded back
    equal; Kineto's JSON plain and gzip, the Chrome trace, OTLP/JSON plain and gzip), the OTLP
    spans (with xsp[otlp] installed), the text report and (with html) the HTML report and
    fragment."""
    at = lambda name: str(tmp_path / name)          # noqa: E731
    out = [
        ("save/load .xsp", lambda: roundtrip(tr, at("t.xsp"))),
        ("kineto.write", lambda: xsp.save(tr, at("t.pt.trace.json"))),
        ("kineto.write .gz", lambda: xsp.save(tr, at("t.pt.trace.json.gz"))),
        ("chrome.write", lambda: xsp.save(tr, at("t.json"))),
        ("otlp.write", lambda: xsp.save(tr, at("t.otlp.json"))),
        ("otlp.write per step .gz", lambda: xsp.formats.otlp.write(tr, at("t.otlp.json.gz"),
                                                                   trace_per="step")),
        ("report.text", lambda: xsp.report.text(tr)),
    ]
    if HAVE_OTLP:
        out += [("otlp.spans", lambda: xsp.formats.otlp.spans(tr)),
                ("otlp.spans per step", lambda: xsp.formats.otlp.spans(tr, trace_per="step"))]
    if html:
        out += [("report.html", lambda: xsp.report.html(tr, at("t.html"))),
                ("report.html_fragment", lambda: xsp.report.html_fragment(tr))]
    return out


def analyses(tr):
    """Every analysis that takes a Trace, by name, with each of its modes: xsp.analysis,
    xsp.flops, xsp.memory, xsp.compare (and the report's compare), xsp.compiled and
    xsp.distributed's readers, and the Trace's own views."""
    from xsp.analysis import compiled
    from xsp.analysis import distributed
    from xsp.analysis import flops
    from xsp.analysis import memory
    from xsp.analysis.compare import compare
    out = [("tree", lambda: tr.tree()),
           ("tree limited", lambda: tr.tree(max_depth=2, max_children=2, min_share=0.01,
                                            max_lines=20)),
           ("tree unfolded", lambda: tr.tree(fold=False, min_duration_ns=1)),
           ("tree of a span", lambda: tr.tree(root=len(tr) // 2) if len(tr) else None),
           ("to_pandas", tr.to_pandas), ("top", tr.top),
           ("top ops", lambda: tr.top(kind="op", leaf_only=False))]
    out += [("analysis." + name, lambda f=getattr(A, name): f(tr)) for name in A.__all__
            if name != "roofline"]
    out += [("analysis.layers shapes", lambda: A.layers(tr, shapes=True)),
            ("analysis.ops by_shape", lambda: A.ops(tr, by_shape=True)),
            ("analysis.ops by calls", lambda: A.ops(tr, sort="calls", n=3)),
            ("analysis.model_latency batch", lambda: A.model_latency(tr, batch_size=3)),
            ("analysis.layer_ranking n", lambda: A.layer_ranking(tr, n=2))]
    out += [("analysis.roofline by " + by, lambda by=by: A.roofline(
        tr, by=by, peak_gflops=100.0, peak_dram_gbps=10.0)) for by in A.ROOFLINE_BY]
    out += [("flops.op_costs", lambda: flops.op_costs(tr)),
            ("flops.summary", lambda: flops.summary(tr))]
    out += [("flops.costs by " + by, lambda by=by: flops.costs(tr, by=by)) for by in flops.BY]
    out += [("memory.has_memory", lambda: memory.has_memory(tr)),
            ("memory.spans", lambda: memory.spans(tr)),
            ("memory.summary", lambda: memory.summary(tr))]
    for dev in memory.DEVICES:
        out += [("memory.spans " + dev, lambda d=dev: memory.spans(tr, device=d)),
                ("memory.layers " + dev, lambda d=dev: memory.layers(tr, device=d)),
                ("memory.timeline " + dev, lambda d=dev: memory.timeline(tr, device=d))]
    out += [("compare.compare", lambda: compare(tr, tr)),
            ("compare.compare text", lambda: xsp.report.text(compare(tr, tr))),
            ("report.compare_text", lambda: xsp.report.compare_text(tr, tr)),
            ("report.summary.median_iteration", lambda: xsp.report.summary.median_iteration(tr))]
    # compiled's readers of a trace (compile_mask, compiling_steps, compiles, summary, ...):
    # every name of its __all__ but its recording side and constants
    out += [("compiled." + f, lambda f=f: getattr(compiled, f)(tr))
            for f in compiled.__all__ if f not in COMPILED_NOT_READERS]
    # distributed's readers of a merged trace (rank_of, collectives, ranks, text, ...): every
    # name of its __all__ but its recording helpers and the two called with more arguments
    out += [("distributed." + f, lambda f=f: getattr(distributed, f)(tr))
            for f in distributed.__all__ if f not in DISTRIBUTED_NOT_READERS]
    out += [("distributed.rank_trace", lambda: [distributed.rank_trace(tr, int(r)) for r in
                                                sorted(set(distributed.rank_of(tr).tolist()))]),
            ("distributed.merge", lambda: distributed.merge([tr, tr], allow_missing=True)),
            ("distributed.text", lambda: xsp.report.ranks.text(tr))]
    return out


COMPILED_NOT_READERS = {"module_path", "prepare", "dynamo_breaks", "describe_break", "REGION",
                        "COMPILE", "RECOMPILE", "GRAPH_BREAK", "MODULES"}
DISTRIBUTED_NOT_READERS = {"active", "exchange", "start_meta", "stop_meta", "offset_at",
                           "error_ns", "MergeError", "COMM", "rank_trace", "merge"}


def run_all(calls):
    """Runs each (name, call) in calls; each must return or raise one of xsp's typed errors
    (TYPED, or a documented refusal in REFUSALS).  Raises AssertionError naming the first
    call that raised anything else, chained to what it raised."""
    for name, call in calls:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", xsp.XSPWarning)
                call()
        except TYPED:
            pass
        except ValueError as e:
            if not REFUSALS.match(str(e)):
                raise AssertionError("%s raised %r" % (name, e)) from e
        except Exception as e:                  # noqa: BLE001 - the point of the test
            raise AssertionError("%s raised %r" % (name, e)) from e


def everything(tr, tmp_path, deep=True, html=True):
    """Runs every consumer of a Trace on tr: the span views, every exporter and (with deep)
    every analysis; raises AssertionError naming the first that raised anything but xsp's
    typed errors."""
    repr(tr)
    tr._repr_html_()
    for s in list(tr)[:50]:
        s.name.encode("utf-8", "surrogateescape")
        repr(s)
        s.attrs
    calls = exporters(tr, tmp_path, html=html)
    if deep:
        calls += analyses(tr)
    else:
        calls += analyses(tr)[:7]               # the tree and table views, always
    run_all(calls)


def test_the_lists_cover_every_exporter_and_analysis(tmp_path):
    """exporters() and analyses() name every public function of the modules they cover, so a
    new analysis or exporter cannot be left out of these tests unnoticed."""
    from xsp.analysis import compiled
    from xsp.analysis import distributed
    from xsp.analysis import flops
    from xsp.analysis import memory
    tr = xsp.Trace.from_spans([S("r", "region", 0, 10)])
    names = {n.split(" ")[0] for n, _ in exporters(tr, tmp_path) + analyses(tr)}
    covered = {"analysis": set(A.__all__), "flops": set(flops.__all__) - {"footprint"},
               "memory": set(memory.__all__) - {"DEVICES"},
               "compiled": set(compiled.__all__) - COMPILED_NOT_READERS,
               "distributed": set(distributed.__all__) - DISTRIBUTED_NOT_READERS | {
                   "rank_trace", "merge"},
               "report": set(xsp.report.__all__) - {"compare", "compare_text"},
               "chrome": set(xsp.formats.chrome.__all__) - {"read"}}
    covered["otlp"] = {"spans", "write"} if HAVE_OTLP else {"write"}
    for mod, want in covered.items():
        assert {mod + "." + f for f in want} <= names, mod
    assert {"save/load", "kineto.write", "compare.compare"} <= names
    # what is left out takes no Trace: footprint (a tensor), fmt_ns (a number),
    # report.compare (an alias of compare.compare), the OTLP to_json/send (as write_json,
    # and a network), distributed's recording helpers, compiled's recording side
    assert {"compile_mask", "compiling_steps", "compiles", "summary"} <= covered["compiled"]
    assert {"rank_of", "collectives", "ranks"} <= covered["distributed"]
    assert "distributed.text" in names      # the cross-rank text: xsp.report.ranks
    assert set(distributed.__all__) - covered["distributed"] == {
        "offset_at", "error_ns", "MergeError", "COMM"}


# -- regressions found by fuzzing ---------------------------------------------------------------

def test_attribute_of_an_unexpected_type_is_shown_as_its_value():
    """Regression guard (bug: a `type` attribute stored as an int made tree() raise
    TypeError: can only concatenate str (not "int") to str)."""
    tr = xsp.Trace.from_spans([S("r", "region", 0, 1000),
                               S("fc", "module", 100, 600, 0, type=3),
                               S("act", "module", 600, 900, 0, type=2.5)],
                              meta={"levels": "ML"})
    assert tr.tree().splitlines() == [
        "r [region] 1.000 us (self 200 ns)",
        "├─ fc [module 3] 500 ns",
        "└─ act [module 2.5] 300 ns",
    ]
    # to_pandas, and so the analyses, see a type as text, whatever the file held
    assert tr.to_pandas()["type"].tolist()[1:] == ["3", "2.5"]
    assert A.layers(tr)["type"].tolist() == ["3", "2.5"]
    assert A.layer_types(tr)["type"].tolist() == ["3", "2.5"]
    assert "fc" in xsp.report.text(tr)


def test_attributes_named_like_columns_or_of_the_wrong_type_keep_the_table_sane(tmp_path):
    """Regression guard (bugs: an attribute named "id" replaced to_pandas' id column, so every
    analysis raised ValueError "the span table's ids must be 0..n-1"; a mem_bytes attribute
    holding a string made layers() raise ValueError in pandas)."""
    import json
    fc = S("fc", "module", 10, 90, 0, type="Linear", id="x", mem_bytes="aten::addmm",
           seq=1.5, flops="many")
    fc["attrs"]["parent"] = 7
    tr = xsp.Trace.from_spans([S("r", "region", 0, 100), fc], meta={"levels": "ML"})
    df = tr.to_pandas()
    assert df["id"].tolist() == [0, 1] and df["parent"].tolist() == [-1, 0]
    assert df["attr.id"].tolist()[1:] == ["x"] and df["attr.parent"].tolist() == [None, 7]
    assert df["mem_bytes"].tolist() == [None, None] and df["seq"].tolist() == [None, None]
    assert df["flops"].tolist() == [None, None]
    assert tr[1].attrs["mem_bytes"] == "aten::addmm"          # the stored value, unchanged
    assert A.layers(tr)["name"].tolist() == ["fc"]
    assert A.layers(tr)["allocated_bytes"].isna().all()
    xsp.formats.chrome.write(tr, str(tmp_path / "t.json"))
    doc = json.loads((tmp_path / "t.json").read_text())
    assert [e["args"] for e in doc["traceEvents"] if e["ph"] == "X"][1] == {
        "type": "Linear", "attr.id": "x", "attr.parent": 7, "mem_bytes": "aten::addmm",
        "seq": 1.5, "flops": "many", "id": 1, "parent": 0}


def test_pid_meta_that_is_not_an_int_falls_back_to_0(tmp_path):
    """Regression guard (bug: a `pid` meta stored as a string made xsp.formats.chrome.write raise
    ValueError: invalid literal for int())."""
    import json
    for bad in ("abc", "1", 1.5, -1, 2 ** 31, -2 ** 63):
        tr = xsp.Trace.from_spans([S("r", "region", 0, 1000)], meta={"pid": bad})
        xsp.formats.chrome.write(tr, str(tmp_path / "t.json"))
        doc = json.loads((tmp_path / "t.json").read_text())
        assert {e["pid"] for e in doc["traceEvents"]} == {0}
        assert doc["otherData"]["xsp"]["pid_note"] == (
            "meta pid %r is not a process id (an int from 0 to 2**31-1); events use pid 0"
            % (bad,))
        assert doc["otherData"]["xsp"]["meta"]["pid"] == bad
    tr = xsp.Trace.from_spans([S("r", "region", 0, 1000)], meta={"pid": 4242})
    xsp.formats.chrome.write(tr, str(tmp_path / "t.json"))
    doc = json.loads((tmp_path / "t.json").read_text())
    assert {e["pid"] for e in doc["traceEvents"]} == {4242}
    assert "pid_note" not in doc["otherData"]["xsp"]


def test_thread_ids_of_2_63_and_more_keep_their_value():
    """Regression guard (bug: a track's tid of 2**63 or more made to_pandas, and so every
    analysis and report, raise OverflowError: tids were made int64)."""
    tids = [2 ** 63, 2 ** 64 - 1, 5]
    tr = xsp.Trace.from_spans([S("r", "region", 0, 1000, None, 0),
                               S("m", "module", 10, 500, 0, 1, type="Linear"),
                               S("k", "module", 20, 400, 0, 2, type="ReLU")],
                              threads=[(t, "t%d" % i, 0) for i, t in enumerate(tids)],
                              meta={"levels": "ML"})
    df = tr.to_pandas()
    assert df["thread"].dtype == np.uint64
    assert df["thread"].tolist() == tids
    assert [s.thread for s in tr] == tids
    assert A.layer_ranking(tr)["name"].tolist() == ["m", "k"]
    assert "levels ML, 3 spans" in xsp.report.text(tr)
    # small tids stay int64, as before
    assert xsp.Trace.from_spans([S("r", "region", 0, 1)]).to_pandas()["thread"].dtype == np.int64


def test_names_that_are_not_utf8_in_a_file_print_as_question_marks(tmp_path):
    """A file's strings are copied as they are (docs/format.md); a name that is not UTF-8 is
    decoded with surrogateescape (kept byte for byte, written back unchanged), and every text
    that xsp makes from it shows the bad bytes as '?'."""
    bad = b"lin\xff\xfe".decode("utf-8", "surrogateescape")
    tr = xsp.Trace.from_spans([S("r", "region", 0, 100), S(bad, "module", 10, 90, 0,
                                                          type=b"T\xc3".decode("utf-8",
                                                                              "surrogateescape"))],
                              meta={"levels": "ML"})
    back = xsp.Trace.from_bytes(tr.to_bytes())
    assert back[1].name == bad and back.to_bytes() == tr.to_bytes()
    assert back.tree().splitlines()[1] == "└─ lin?? [module T?] 80 ns"
    back.tree().encode("utf-8")               # printable: no lone surrogates left
    assert "lin??" in xsp.report.text(back)
    xsp.formats.chrome.write(back, str(tmp_path / "t.json"))
    import json
    doc = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))
    assert [(e["name"], e["args"].get("type")) for e in doc["traceEvents"] if e["ph"] == "X"] \
        == [("r", None), ("lin??", "T?")]


def test_times_past_2_63_do_not_break_the_views(tmp_path):
    """Times are uint64 in a file but int64 columns in Python (docs/api.md: times at or above
    2**63 wrap): a file may hold them; nothing may crash on them."""
    tr = xsp.Trace.from_spans([S("r", "region", 2 ** 63 + 5, 2 ** 64 - 1),
                               S("m", "module", 2 ** 63 + 6, 2 ** 63 + 100, 0, type="Linear")],
                              meta={"levels": "ML"})
    assert tr.tree().splitlines()[1] == "└─ m [module Linear] 94 ns"
    everything(tr, tmp_path)


def test_report_html_of_zero_length_iterations(tmp_path):
    """Regression guard (bug: report.html drew a timeline of the median iteration and raised
    ValueError "timeline window is empty" when that iteration lasted 0 ns)."""
    tr = xsp.Trace.from_spans([S("r", "region", 0, 100), S("step#0", "step", 50, 50, 0),
                               S("step#1", "step", 60, 60, 0)], meta={"levels": "ML"})
    doc = xsp.report.html(tr, str(tmp_path / "t.html"))
    assert "Timeline of" not in doc and "<h3>Tree</h3>" in doc


def test_a_name_over_65535_bytes_is_cut_at_a_character_boundary_and_counted():
    """Regression guard (bug: a name over 65,535 bytes, the format's limit, was cut at exactly
    that many bytes without being counted, possibly inside a UTF-8 character, and then
    print(span.name) raised UnicodeEncodeError)."""
    long = "a" + "\u20ac" * 22000                # 1 + 3 * 22000 bytes; the limit cuts a euro
    kept = "a" + "\u20ac" * 21844                # 65533 bytes
    with xsp.profile(levels="ML") as prof:
        with torch.profiler.record_function(long):
            pass
        with torch.profiler.record_function(long):
            pass
        with torch.profiler.record_function("short"):
            pass
    tr = prof.trace
    scopes = tr.spans(kind="scope")
    assert [s.name == kept for s in scopes] == [True, True, False]
    assert len(scopes[0].name.encode("utf-8")) == 65533    # encodes: no lone surrogate
    assert tr.counters["names.cut"] == 1                   # one name, cut once
    assert tr.tree().splitlines()[-1] == "counters: names.cut 1"
    back = xsp.Trace.from_bytes(tr.to_bytes())
    assert back == tr and back.counters["names.cut"] == 1
    # a trace without long names has no such counter
    with xsp.profile(levels="ML") as prof:
        with torch.profiler.record_function("short"):
            pass
    assert "names.cut" not in prof.trace.counters
    # from_spans cuts and counts the same way (names, attribute values, meta)
    built = xsp.Trace.from_spans([S(long, "region", 0, 10, type=long + "x")],
                                 meta={"region": "\u20ac" * 30000}, counters={"lost.cap": 0})
    assert built[0].name == kept and built[0].attrs["type"] == kept
    assert built.meta["region"] == "\u20ac" * 21845       # 65535 bytes: a whole euro fits
    assert built.counters == {"lost.cap": 0, "names.cut": 2}   # the name and the meta value


# -- every hostile trace through every exporter and analysis ---------------------------------

BAD_UTF8 = b"lin\xff\xfe".decode("utf-8", "surrogateescape")


def hostile_traces():
    """Valid traces that no recording makes, by name: each must go through every exporter and
    every analysis (test_every_exporter_and_analysis_takes_it)."""
    stream = 7
    ml = {"levels": "ML"}
    out = {}
    out["empty"] = xsp.Trace.from_spans([], meta=ml)
    out["attributes of unexpected types"] = xsp.Trace.from_spans(
        [S("r", "region", 0, 1000), S("fc", "module", 100, 600, 0, type=3, seq="x"),
         S("act", "module", 600, 900, 0, type=2.5, flops=float("nan")),
         S("aten::mm", "op", 610, 890, 2, seq=1.5, input_dims=7, input_types="[[", shapes=3,
           concrete_inputs=float("inf"), mem_bytes="x", fwd_op="y")], meta=ml)
    fc = S("fc", "module", 10, 90, 0, type="Linear", id="x", mem_bytes="aten::addmm",
           seq=1.5, flops="many", depth="deep", module=-1)
    fc["attrs"].update(parent=7, kind=3, name=4.5, thread="t", start_ns=-1)
    out["names like columns"] = xsp.Trace.from_spans([S("r", "region", 0, 100), fc], meta=ml)
    out["huge ids and values"] = xsp.Trace.from_spans(
        [S("r", "region", 0, 10 ** 6), S("step#0", "step", 0, 10 ** 6, 0),
         S("aten::mm", "op", 10, 900, 1, seq=2 ** 63 - 1, **{"k.External id": 2 ** 63 - 1}),
         S("cudaLaunchKernel", "runtime", 20, 30, 2, correlation=-2 ** 63, cbid="x"),
         S("k", "kernel", 40, 50, 2, 1, correlation=2 ** 63 - 1, api=2 ** 40, device=-1,
           stream=2 ** 63 - 1, grid_x="4", block_x=2 ** 63 - 1, registers="r",
           smem_static="s", smem_dynamic=2 ** 62, flops=-1, dram_bytes=float("inf")),
         S("Memcpy HtoD", "memcpy", 60, 60, 2, 1, bytes="many", api=-5, correlation=1.5),
         S("Memset", "memset", 70, 80, 2, 1, bytes=float("nan"), device="cuda:0"),
         S("MmBackward0", "backward", 1000, 2000, 1, seq=5, fwd_op=2 ** 62),
         S("MulBackward0", "backward", 2000, 3000, 1, seq=-2 ** 63, fwd_op=-1)],
        threads=[(2 ** 64 - 1, "main", 0), (2 ** 63 + stream, "stream", 1)],
        meta={"levels": "MLG", "pid": 2 ** 40, "rank": "zero", "world_size": -1,
              "kineto.baseTimeNanoseconds": "soon", "kineto.pid": "p", "gpu0.name": 3,
              "clock.wall_offset_ns": 2 ** 62})
    out["times past 2**63"] = xsp.Trace.from_spans(
        [S("r", "region", 2 ** 63 + 5, 2 ** 64 - 1),
         S("step#0", "step", 2 ** 63 + 5, 2 ** 63 + 200, 0),
         S("m", "module", 2 ** 63 + 6, 2 ** 63 + 100, 1, type="Linear"),
         S("aten::addmm", "op", 2 ** 63 + 7, 2 ** 63 + 99, 2, seq=0,
           input_dims="[[2, 3], [3, 4]]", input_types='["float", "float"]')],
        meta={"levels": "ML", "clock.wall_offset_ns": 0})
    out["zero-length iterations"] = xsp.Trace.from_spans(
        [S("r", "region", 0, 100), S("step#0", "step", 50, 50, 0),
         S("step#1", "step", 60, 60, 0), S("Net", "model", 60, 60, 2, type="Net"),
         S("aten::relu", "op", 60, 60, 3)], meta=ml)
    out["odd names"] = xsp.Trace.from_spans(
        [S("<script>alert(1)</script>", "region", 0, 100),
         S(BAD_UTF8, "module", 10, 90, 0, type=b"T\xc3".decode("utf-8", "surrogateescape")),
         S("\u202e%s%d{}\n\x00", "op", 11, 20, 1), S("", "op", 21, 30, 1),
         S("nccl:all_reduce", "op", 31, 40, 1), S("c10d::allreduce_", "op", 41, 50, 1),
         S("torch.compile: compile forward", "scope", 51, 60, 1, graph_breaks="x"),
         S("torch.compile: graph break", "scope", 60, 60, 6, reason=3),
         S("ProfilerStep#x", "step", 61, 70, 1, **{"k.name": 5, "k.cat": 6}),
         S("a" * 60000, "op", 71, 80, 1)],
        threads=[(1, BAD_UTF8, 0)], meta={"levels": "ML", "region": BAD_UTF8})
    out["kineto args of the wrong type"] = xsp.Trace.from_spans(
        [S("r", "region", 0, 100, **{"k.cat": 3}),
         S("aten::mm", "op", 10, 90, 0, input_dims="[[2, 2]]", **{
             "k.Input Dims[]": 3, "k.Input type[]": 1.5, "k.Concrete Inputs[]": "not json",
             "k.Input Strides[]": "[" * 50000, "k.External id": "e", "k.Python module id": 1.5,
             "k.name[]": "[1, 2]"})], meta=ml)
    threads = [(11, "rank 0: main", 0), (12, "rank 1: main", 0), (13, "rank \u00b2: odd", 0)]
    out["a merged job of odd ranks"] = xsp.Trace.from_spans(
        [S("r0", "region", 0, 100, None, 0, rank=0), S("step#0", "step", 0, 50, 0, 0),
         S("r1", "region", 5, 105, None, 1, rank="one"),
         S("r2", "region", 7, 107, None, 2, rank=2 ** 40),
         S("nccl:all_reduce", "op", 10, 20, 1, 0), S("nccl:all_reduce", "op", 15, 25, 2, 1)],
        threads=threads, meta={"levels": "ML", "ranks": "0,1", "rank0.pid": "p",
                               "rank1.host": 3, "world_size": "two", "merged": 1})
    mem = lambda dev, *v: {"mem.%s.%s" % (dev, f): x for f, x in zip(      # noqa: E731
        ("allocs", "alloc_bytes", "frees", "freed_bytes", "peak", "total"), v)}
    out["memory attributes of odd values"] = xsp.Trace.from_spans(
        [S("r", "region", 0, 1000), S("step#0", "step", 0, 1000, 0),
         S("aten::empty", "op", 10, 20, 1, **mem("cpu", "x", 1.5, 1, 2 ** 63 - 1, -5, 0)),
         S("aten::ones", "op", 30, 40, 1, **mem("cuda", 3, 2 ** 62, 0, 0, 2 ** 63 - 1, -2 ** 63)),
         S("aten::zeros", "op", 50, 50, 1, **mem("other", 2, 7, 2, 9, 4, 2)),
         S("aten::add", "op", 60, 70, 1, **{"mem.cpu.peak": float("nan"), "mem.gpu.x": 1,
                                           "mem.": "?", "mem.cpu.allocs": -1})],
        meta={"levels": "ML", "profile_memory": 1})
    kinds = ("module", "op")
    deep = [S("r", "region", 0, 40000)]
    deep += [S("s%d" % i, kinds[i % 2], i + 1, 40000 - i - 1, i) for i in range(3000)]
    out["a 3000-deep chain"] = xsp.Trace.from_spans(deep, meta=ml)
    return out


HOSTILE = hostile_traces()


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_every_exporter_and_analysis_takes_it(name, tmp_path):
    """Each hostile trace through every exporter and analysis (exporters(), analyses()): each
    returns or raises one of xsp's typed errors."""
    everything(HOSTILE[name], tmp_path)


def kineto_events(path):
    import json
    with open(path, encoding="utf-8") as f:
        return [e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]


def test_kineto_list_args_that_are_not_json_lists_are_written_as_their_value(tmp_path):
    """Regression guard (bug: to_kineto raised TypeError when a k.<arg>[] attribute, kept by
    the reader as a list's JSON text, held a number; `xsp export --format kineto` printed a
    traceback).  Such an attribute is written as its plain value; JSON text as the list."""
    tr = HOSTILE["kineto args of the wrong type"]
    xsp.save(tr, str(tmp_path / "t.json"), format="kineto")
    args = kineto_events(tmp_path / "t.json")[1]["args"]
    assert args["Input Dims"] == 3 and args["Input type"] == 1.5
    assert args["Concrete Inputs"] == "not json" and args["name"] == [1, 2]
    assert args["Input Strides"] == "[" * 50000              # too deep to parse: as it is
    assert args["External id"] == "e" and args["xsp.id"] == 1
    assert kineto_events(tmp_path / "t.json")[0]["cat"] == 3
    from xsp import cli
    xsp.save(tr, str(tmp_path / "t.xsp"))
    assert cli.main(["export", str(tmp_path / "t.xsp"), "--format", "kineto", "-o",
                     str(tmp_path / "k.json")]) == 0


def test_kineto_export_of_span_references_and_sizes_of_the_wrong_type(tmp_path):
    """Regression guard (bugs: to_kineto raised IndexError for a fwd_op or api attribute that
    names no span, TypeError for a memcpy's bytes that are not a number, ValueError for
    shared memory sizes or a baseTimeNanoseconds that are not ints).  Such attributes are
    written as xsp.* args only, and no flow or derived arg is made from them."""
    import json
    tr = HOSTILE["huge ids and values"]
    xsp.save(tr, str(tmp_path / "t.json"), format="kineto")
    with open(tmp_path / "t.json", encoding="utf-8") as f:
        doc = json.load(f)
    assert doc["baseTimeNanoseconds"] == 0
    ev = {e["name"]: e for e in doc["traceEvents"] if e["ph"] == "X"}
    assert ev["MmBackward0"]["args"]["Fwd thread id"] == 0
    assert ev["MmBackward0"]["args"]["xsp.fwd_op"] == 2 ** 62
    assert ev["MulBackward0"]["args"]["xsp.fwd_op"] == -1
    assert "shared memory" not in ev["k"]["args"] and ev["k"]["args"]["xsp.smem_static"] == "s"
    assert ev["Memcpy HtoD"]["args"]["bytes"] == "many"
    assert "memory bandwidth (GB/s)" not in ev["Memcpy HtoD"]["args"]
    assert [e["cat"] for e in doc["traceEvents"] if e["ph"] in ("s", "f")] == []


def test_times_past_2_63_keep_their_value_in_every_export(tmp_path):
    """Times are uint64 in a file (the int64 columns wrap): the exports write them as the file
    holds them; layer sums wrap as the int64 columns do (bugs: the roofline by layer raised
    OverflowError; rank_trace raised ValueError; OTLP refused the times as before the epoch)."""
    tr = HOSTILE["times past 2**63"]
    roof = A.roofline(tr, by="layer", peak_gflops=100.0, peak_dram_gbps=10.0)
    assert roof["layer"].tolist() == ["m"] and roof["forward_ns"].tolist() == [92]
    one = xsp.analysis.distributed.rank_trace(tr, 0)
    assert one.start_ns.view(np.uint64).tolist() == tr.start_ns.view(np.uint64).tolist()
    assert one.end_ns.view(np.uint64).tolist()[0] == 2 ** 64 - 1
    if HAVE_OTLP:
        spans = xsp.formats.otlp.spans(tr)
        assert [(s.start_time, s.end_time) for s in spans][:2] == [
            (2 ** 63 + 5, 2 ** 64 - 1), (2 ** 63 + 5, 2 ** 63 + 200)]


@pytest.mark.skipif(not HAVE_OTLP, reason="xsp[otlp] is not installed")
def test_otlp_times_outside_its_range_raise_time_range_error():
    """A wall-clock offset that puts a span past 2**64-1 ns or before the epoch: a typed
    TimeRangeError (a ValueError) naming the span, not the encoder's "Value out of range"."""
    tr = xsp.Trace.from_spans([S("r", "region", 0, 10), S("m", "module", 2, 2 ** 64 - 9, 0)],
                              meta={"levels": "ML", "clock.wall_offset_ns": 10})
    with pytest.raises(xsp.formats.otlp.TimeRangeError, match=re.escape(
            "span 1 ends past 2**64-1 ns once anchored to the wall clock (offset 10 ns, "
            "recorded): the trace's times are not what its meta says")):
        xsp.formats.otlp.spans(tr)
    tr = xsp.Trace.from_spans([S("r", "region", 5, 10)],
                              meta={"levels": "ML", "clock.wall_offset_ns": -6})
    with pytest.raises(xsp.formats.otlp.TimeRangeError, match=re.escape(
            "span 0 starts before the Unix epoch once anchored to the wall clock (offset -6 "
            "ns, recorded)")):
        xsp.formats.otlp.write_json(tr, os.devnull)


def test_html_tree_of_times_on_both_sides_of_2_63_does_not_overflow():
    """Regression guard (bug: the HTML tree of a whole trace took its reference time as
    end.max() - start.min() in int64, which overflowed, with a RuntimeWarning and a nonsense
    share, for a trace with times below and at or above 2**63)."""
    from xsp.report import parts as _html
    tr = xsp.Trace.from_spans([S("m", "op", 5, 10), S("x", "op", 2 ** 63 + 1, 2 ** 63 + 2)],
                              meta={"levels": "ML"})
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        doc = _html.tree_html(tr)
    assert doc.endswith('<div class="xsp-more">… 2 more, 6 ns (each line under 0.5% of the '
                        'trace)</div>\n</div>')        # 5 and 1 ns of a trace of 2**63 ns


def test_report_tables_fill_gaps_in_numeric_columns_without_a_pandas_upcast():
    """Regression guard (pandas warned that fillna("-") on a float column with gaps, which the
    text tables did, will raise in a future version): such a column is made object first, so
    the table reads as before."""
    import pandas as pd
    df = pd.DataFrame({"name": ["a", "b"], "flops": [1.5, float("nan")], "calls": [1, 2]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = xsp.report.summary._pretty(df)
    assert out.to_string().splitlines() == ["  name flops  calls", "0    a   1.5      1",
                                            "1    b     -      2"]


def test_memory_spans_leave_out_partial_or_odd_memory_attributes():
    """Regression guard (bug: xsp.analysis.memory.spans cast NaN, where a mem.<dev>.* attribute was
    missing or not a number, to int64: -2**63 in the table and a RuntimeWarning).  A span has
    memory on a device when it has all six numbers in range, as recording and load_kineto
    write them; the rest are left out."""
    tr = HOSTILE["memory attributes of odd values"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        df = xsp.analysis.memory.spans(tr)
    assert df[["id", "device", "allocs", "alloc_bytes", "frees", "freed_bytes", "self_bytes",
               "peak_bytes", "total_bytes"]].values.tolist() == [
        [4, "other", 2, 7, 2, 9, -2, 4, 2]]


# -- a 100,000-deep parent chain ----------------------------------------------------------------

DEEP = 100_000


@pytest.fixture(scope="module")
def deep_trace():
    kinds = ("module", "op")
    spans = [S("r", "region", 0, 4 * DEEP)]
    spans += [S("s%d" % i, kinds[i % 2], i + 1, 4 * DEEP - i - 1, i,
                **({"type": "T%d" % (i % 3)} if i % 2 == 0 else {})) for i in range(DEEP)]
    spans.append(S("k", "kernel", DEEP + 1, DEEP + 2, DEEP, 1))
    return xsp.Trace.from_spans(spans, threads=[(1, "main", 0), (7, "stream 7", 1)],
                                meta={"levels": "MLG", "region": "deep"})


def test_a_100000_deep_chain_is_linear(deep_trace, tmp_path):
    """Regression guard (bug: tree() on a 100,000-deep chain took over 120 s: every line
    carried an indent as long as its depth, so the text alone was quadratic; the layer and op
    GPU sums also walked one level at a time over all spans)."""
    tr = deep_trace
    n = len(tr)
    t0 = time.monotonic()
    lines = tr.tree().splitlines()
    assert len(lines) == n
    assert lines[0] == "r [region] 400.000 us (self 2 ns)"
    assert lines[1] == "└─ s0 [module T0] 399.998 us (self 2 ns)"
    # past 32 levels the indent stops growing; such lines say their depth instead
    assert lines[32] == "   " * 31 + "└─ s31 [op] 399.936 us (self 2 ns)"
    assert lines[33] == "   " * 31 + "└─ s32 [module T2] 399.934 us (self 2 ns) [depth 33]"
    assert lines[-2] == "   " * 31 + "└─ s%d [op] 200.000 us [depth %d]" % (
        DEEP - 1, DEEP)
    assert lines[-1] == "   " * 31 + "└─ k [kernel] 1 ns [depth %d]" % (DEEP + 1)
    assert max(len(ln) for ln in lines) < 160
    df = tr.to_pandas()
    assert df["depth"].tolist() == list(range(n))
    assert len(A.layers(tr)) == DEEP // 2
    by_layer = A.kernels_by_layer(tr)
    assert len(by_layer) == DEEP // 2 and (by_layer["kernels"] == 1).all()
    assert (A.kernels_by_op(tr)["kernel_ns"] == 1).all()
    assert A.gpu_vs_cpu(tr)["layer"].tolist() == ["s%d" % (DEEP - 2), "(model)"]
    for f in ANALYSES:
        f(tr)
    text = xsp.report.text(tr)
    assert text.splitlines()[0] == "xsp report: deep"
    assert text.splitlines()[1].startswith("levels MLG, %d spans, 1 iteration" % n)
    assert time.monotonic() - t0 < 60         # a hang guard; this takes a few seconds


# -- the mutation fuzzer --------------------------------------------------------------------------

def mp_decode(b):
    """A small msgpack decoder for the types an .xsp file uses: ints, floats, str (as bytes),
    arrays.  Returns the object; raises ValueError on anything else or trailing bytes."""
    pos = 0

    def take(n):
        nonlocal pos
        if pos + n > len(b):
            raise ValueError("truncated")
        out = b[pos:pos + n]
        pos += n
        return out

    def obj():
        c = take(1)[0]
        if c <= 0x7f:
            return c
        if c >= 0xe0:
            return c - 0x100
        if 0xa0 <= c <= 0xbf:
            return bytes(take(c & 31))
        if 0x90 <= c <= 0x9f:
            return [obj() for _ in range(c & 15)]
        fmt = {0xcc: ">B", 0xcd: ">H", 0xce: ">I", 0xcf: ">Q", 0xd0: ">b", 0xd1: ">h",
               0xd2: ">i", 0xd3: ">q", 0xca: ">f", 0xcb: ">d"}.get(c)
        if fmt:
            return struct.unpack(fmt, take(struct.calcsize(fmt)))[0]
        if c in (0xd9, 0xda, 0xdb):
            n = struct.unpack({0xd9: ">B", 0xda: ">H", 0xdb: ">I"}[c], take(c - 0xd8 if c < 0xdb
                                                                            else 4))[0]
            return bytes(take(n))
        if c in (0xdc, 0xdd):
            n = struct.unpack(">H" if c == 0xdc else ">I", take(2 if c == 0xdc else 4))[0]
            return [obj() for _ in range(n)]
        raise ValueError("byte 0x%02x" % c)

    out = obj()
    if pos != len(b):
        raise ValueError("trailing bytes")
    return out


def mp_encode(o, out=None):
    """Encodes what mp_decode gives, ints in their smallest form."""
    top = out is None
    out = bytearray() if top else out
    if isinstance(o, bool):
        out.append(0xc3 if o else 0xc2)
    elif isinstance(o, int):
        if 0 <= o <= 0x7f:
            out.append(o)
        elif -32 <= o < 0:
            out.append(o + 0x100)
        elif o >= 0:
            for lim, c, f in ((0xff, 0xcc, ">B"), (0xffff, 0xcd, ">H"),
                              (0xffffffff, 0xce, ">I"), (2 ** 64 - 1, 0xcf, ">Q")):
                if o <= lim:
                    out.append(c)
                    out += struct.pack(f, o)
                    break
            else:
                raise ValueError(o)
        else:
            for lim, c, f in ((-2 ** 7, 0xd0, ">b"), (-2 ** 15, 0xd1, ">h"),
                              (-2 ** 31, 0xd2, ">i"), (-2 ** 63, 0xd3, ">q")):
                if o >= lim:
                    out.append(c)
                    out += struct.pack(f, o)
                    break
            else:
                raise ValueError(o)
    elif isinstance(o, float):
        out.append(0xcb)
        out += struct.pack(">d", o)
    elif isinstance(o, (bytes, bytearray)):
        n = len(o)
        if n < 32:
            out.append(0xa0 | n)
        elif n <= 0xff:
            out += bytes((0xd9, n))
        elif n <= 0xffff:
            out.append(0xda)
            out += struct.pack(">H", n)
        else:
            out.append(0xdb)
            out += struct.pack(">I", n)
        out += o
    elif isinstance(o, list):
        n = len(o)
        if n < 16:
            out.append(0x90 | n)
        elif n <= 0xffff:
            out.append(0xdc)
            out += struct.pack(">H", n)
        else:
            out.append(0xdd)
            out += struct.pack(">I", n)
        for x in o:
            mp_encode(x, out)
    else:
        raise TypeError(type(o))
    return bytes(out) if top else out


# keys the views, analyses and reports read (docs/api.md, docs/analyses.md)
SPAN_KEYS = [b"type", b"seq", b"fwd_op", b"shapes", b"mem_bytes", b"flops", b"dram_bytes",
             b"device", b"stream", b"grid_x", b"block_x", b"registers", b"correlation",
             b"graph_id", b"bytes", b"name", b"id", b"parent", b"module", b"kind", b"depth"]
META_KEYS = [b"pid", b"levels", b"region", b"start_ns", b"stop_ns", b"steps", b"clock",
             b"hook_errors", b"torch_version", b"xsp_version", b"gpu_error", b"cupti_shared"]
COUNTER_KEYS = [b"lost.cap", b"lost.depth", b"unmatched_end", b"forced_end", b"gpu.lost",
                b"names.cut", b"open_at_stop"]
INTS = [0, 1, -1, 2, 7, 127, 128, 255, 2 ** 16, 2 ** 31 - 1, 2 ** 31, 2 ** 32, 2 ** 53 + 1,
        2 ** 62, 2 ** 63 - 1, -2 ** 63, -2 ** 31, -(2 ** 53)]
UINTS = [0, 1, 2, 3, 255, 2 ** 16, 2 ** 32 - 1, 2 ** 32, 2 ** 53 + 1, 2 ** 62, 2 ** 63 - 1,
         2 ** 63, 2 ** 63 + 1, 2 ** 64 - 2, 2 ** 64 - 1]
FLOATS = [0.0, -0.0, 1.5, -1.0, 1e300, -1e300, float("inf"), float("-inf"), float("nan"),
          5e-324, 2.0 ** 63, 2.0 ** 64]
STRS = [b"", b"G", b"MLG", b"ML", b"L", b"x" * 40, b"\xff\xfe", b"a\nb", b"\x00", b"\xe2\x82",
        b"caf\xc3\xa9", b"%s%d{}", b"<script>", b"12", b"-1", b"nan", "\u202e".encode()]


class Mutator:
    """Structured mutations of a decoded .xsp document (a list: docs/format.md)."""

    def __init__(self, rng, doc):
        self.r = rng
        self.d = doc

    # helpers ------------------------------------------------------------------------------
    def strings(self):
        return self.d[2]

    def string_id(self, s):
        """The id of string s, added (at the end) when missing."""
        t = self.strings()
        if s in t:
            return t.index(s)
        t.append(s)
        return len(t) - 1

    def fresh_string(self, s):
        """A new string id for s or, when s is taken, for a distinct variant of it."""
        t = self.strings()
        while s in t:
            s = s + b"~"
        t.append(s)
        return len(t) - 1

    def value(self, typ):
        r = self.r
        if typ == 0:
            return r.choice(INTS + [r.randrange(-2 ** 63, 2 ** 63), len(self.d[6]) // 7,
                                    r.randrange(0, max(1, len(self.d[6]) // 7 + 3))])
        if typ == 1:
            return r.choice(FLOATS + [r.uniform(-1e6, 1e6)])
        if r.random() < 0.7:
            return r.randrange(len(self.strings()))
        return self.string_id(r.choice(STRS))

    def n_spans(self):
        return len(self.d[6]) // 7

    def attr_slot(self, span):
        """Index in [7] (pairs) where span's attributes start."""
        sp = self.d[6]
        return sum(sp[7 * j + 6] for j in range(span))

    # mutations ----------------------------------------------------------------------------
    def retype_attr(self):
        sec = self.r.choice((4, 7, 7, 7))
        a = self.d[sec]
        if not a:
            return self.add_attr()
        k = 2 * self.r.randrange(len(a) // 2)
        typ = self.r.randrange(3)
        a[k] = (a[k] >> 2) << 2 | typ
        a[k + 1] = self.value(typ)

    def revalue_attr(self):
        sec = self.r.choice((4, 5, 7, 7))
        a = self.d[sec]
        if not a:
            return self.add_attr()
        k = 2 * self.r.randrange(len(a) // 2)
        a[k + 1] = self.value(a[k] & 3)

    def add_attr(self):
        n = self.n_spans()
        if not n:
            return
        i = self.r.randrange(n)
        key = self.string_id(self.r.choice(SPAN_KEYS))
        typ = self.r.randrange(3)
        at = self.attr_slot(i) + self.d[6][7 * i + 6]
        if self.d[6][7 * i + 6] >= 65535:
            return
        self.d[7][2 * at:2 * at] = [key << 2 | typ, self.value(typ)]
        self.d[6][7 * i + 6] += 1

    def add_meta(self):
        sec, keys = (4, META_KEYS) if self.r.random() < 0.8 else (5, COUNTER_KEYS)
        key = self.string_id(self.r.choice(keys))
        typ = 0 if sec == 5 and self.r.random() < 0.9 else self.r.randrange(3)
        a = self.d[sec]
        for k in range(0, len(a), 2):          # replace the key's entry when there is one
            if a[k] >> 2 == key:
                a[k], a[k + 1] = key << 2 | typ, self.value(typ)
                return
        a += [key << 2 | typ, self.value(typ)]

    def thread(self):
        th = self.d[3]
        if not th:
            return
        k = 3 * self.r.randrange(len(th) // 3)
        f = self.r.randrange(3)
        if f == 0:
            th[k] = self.r.choice(UINTS)
        elif f == 1:
            th[k + 1] = self.r.randrange(len(self.strings()))
        else:
            th[k + 2] = self.r.choice([0, 1, 2, 3, 7, 2 ** 31, 2 ** 32 - 1])

    def add_thread(self):
        self.d[3] += [self.r.choice(UINTS), self.r.randrange(len(self.strings())),
                      self.r.randrange(3)]
        n = self.n_spans()
        for _ in range(self.r.randrange(1, 4)):
            if n:
                self.d[6][7 * self.r.randrange(n) + 5] = len(self.d[3]) // 3 - 1

    def span(self):
        n = self.n_spans()
        if not n:
            return
        i = self.r.randrange(n)
        sp = self.d[6]
        f = self.r.choice((0, 1, 2, 3, 4, 4, 5))
        r = self.r
        if f == 0:
            sp[7 * i] = r.choice([0, 1, r.randrange(10 ** 6), 2 ** 40, 2 ** 62, 2 ** 63])
        elif f == 1:
            sp[7 * i + 1] = r.choice([0, 1, r.randrange(10 ** 9), 2 ** 40, 2 ** 62, 2 ** 63,
                                      2 ** 64 - 1 - sum(sp[0:7 * i + 1:7])])
        elif f == 2:
            sp[7 * i + 2] = r.randrange(i + 1)
        elif f == 3:
            sp[7 * i + 3] = r.randrange(len(self.strings()))
        elif f == 4:
            kind = r.randrange(len(KINDS))
            level = r.randrange(len(LEVELS))
            flags = r.choice([0, 0, 1, 2, 3, 4, 2 ** 31, 2 ** 32 - 1])
            sp[7 * i + 4] = kind | level << 4 | flags << 8
        else:
            sp[7 * i + 5] = r.randrange(max(1, len(self.d[3]) // 3))

    def same_kind(self):
        """Every span of one kind (and level) made another: all steps, all kernels, ..."""
        sp = self.d[6]
        kinds = sorted({sp[7 * i + 4] & 0xff for i in range(self.n_spans())})
        if not kinds:
            return
        src = self.r.choice(kinds)
        dst = self.r.randrange(len(KINDS)) | self.r.randrange(len(LEVELS)) << 4
        for i in range(self.n_spans()):
            if sp[7 * i + 4] & 0xff == src:
                sp[7 * i + 4] = (sp[7 * i + 4] & ~0xff) | dst

    def string(self):
        t = self.strings()
        if len(t) < 2:
            return
        i = self.r.randrange(1, len(t))
        r = self.r
        f = r.randrange(4)
        if f == 0:
            s = r.choice(STRS)
        elif f == 1:
            s = t[i] + bytes([r.randrange(0x80, 0x100)])
        elif f == 2:
            s = bytes(r.randrange(256) for _ in range(r.randrange(1, 12)))
        else:
            s = (b"\xe2\x82\xac" * 21845)[:65535 - r.randrange(3)]
        while s in t:
            s += b"~"
        if len(s) <= 65535:
            t[i] = s

    def trailing(self):
        self.d.append(self.r.choice([0, b"x", [1, 2, [3]], 1.5]))

    def swap_strings(self):
        """Two strings trade places: names become keys, keys values, and so on."""
        t = self.strings()
        if len(t) > 2:
            i, j = self.r.sample(range(1, len(t)), 2)
            t[i], t[j] = t[j], t[i]

    def move_attrs(self):
        """Attributes change owners: one span's count goes to another (the total stays)."""
        n = self.n_spans()
        sp = self.d[6]
        have = [i for i in range(n) if sp[7 * i + 6]]
        if have and n > 1:
            i = self.r.choice(have)
            j = self.r.randrange(n)
            k = self.r.randrange(1, sp[7 * i + 6] + 1)
            if sp[7 * j + 6] + k <= 65535:
                sp[7 * i + 6] -= k
                sp[7 * j + 6] += k

    def drop_meta(self):
        a = self.d[self.r.choice((4, 5))]
        if a:
            k = 2 * self.r.randrange(len(a) // 2)
            del a[k:k + 2]

    def reshape(self):
        """Every span at once: random parents, or zero or huge durations."""
        sp = self.d[6]
        f = self.r.randrange(3)
        for i in range(self.n_spans()):
            if f == 0:
                sp[7 * i + 2] = self.r.randrange(i + 1)
            elif f == 1:
                sp[7 * i + 1] = 0
            else:
                sp[7 * i] = 0
                sp[7 * i + 1] = self.r.choice((2 ** 62, 2 ** 63 - 1, 1))

    OPS = ("retype_attr", "revalue_attr", "add_attr", "add_attr", "add_meta", "add_meta",
           "thread", "add_thread", "span", "span", "span", "same_kind", "string", "trailing",
           "swap_strings", "move_attrs", "drop_meta", "reshape")

    def mutate(self):
        names = []
        for _ in range(self.r.choice((1, 1, 2, 3, 5))):
            op = self.r.choice(self.OPS)
            names.append(op)
            getattr(self, op)()
        return names


def byte_mutant(rng, data):
    b = bytearray(data)
    f = rng.randrange(5)
    if f == 0:                                  # flip a few bytes
        for _ in range(rng.randrange(1, 5)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b), "flip"
    if f == 1:                                  # interesting byte values
        for _ in range(rng.randrange(1, 3)):
            b[rng.randrange(len(b))] = rng.choice((0, 0x7f, 0x80, 0xc0, 0xcc, 0xcf, 0xd3,
                                                   0xdb, 0xdd, 0xff, 0xe0, 0xa0, 0x90))
        return bytes(b), "set"
    if f == 2:
        return bytes(b[:rng.randrange(len(b))]), "truncate"
    if f == 3:
        i = rng.randrange(len(b))
        del b[i:i + rng.randrange(1, 4)]
        return bytes(b), "delete"
    i = rng.randrange(len(b))
    b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))
    return bytes(b), "insert"


def seed_traces():
    """The bytes of a few small traces: a real ML profile (tiny nn.Sequential, forward and
    backward, two steps, fake clock), an M-only one, and a synthetic MLG one with kernels,
    runtime calls and a GPU stream track."""
    out = []
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    x = torch.ones(2, 4)
    model(x).sum().backward()
    _core.set_fake_clock(1000, 7)
    try:
        for levels in ("ML", "M"):
            with xsp.profile(levels=levels) as prof:
                for _ in range(2):
                    model(x).sum().backward()
                    prof.step()
            out.append(prof.trace.to_bytes())
    finally:
        _core.set_fake_clock(0, 0)
    stream = (0 << 32) | 7
    spans = [
        S("prof", "region", 0, 1000), S("step#0", "step", 0, 500, 0),
        S("Net", "model", 10, 490, 1, type="Net"),
        S("fc1", "module", 20, 220, 2, type="Linear", shapes="[2, 4]", mem_bytes=512),
        S("aten::linear", "op", 30, 210, 3, seq=4),
        S("aten::addmm", "op", 40, 200, 4, seq=5),
        S("cudaLaunchKernel", "runtime", 50, 60, 5, correlation=9),
        S("gemm", "kernel", 70, 170, 5, 1, flops=2000, dram_bytes=100, grid_x=4, device=0,
          stream=7, correlation=9),
        S("act", "module", 230, 300, 2, type="ReLU"), S("aten::relu", "op", 240, 290, 8),
        S("Memcpy HtoD", "memcpy", 250, 270, 9, 1, bytes=64),
        S("step#1", "step", 500, 1000, 0), S("Net", "model", 510, 990, 11, type="Net"),
        S("AddmmBackward0", "backward", 520, 700, 12, seq=5, fwd_op=5),
        S("gemm", "kernel", 530, 650, 13, 1, flops=2400, dram_bytes=120),
        S("cudaDeviceSynchronize", "sync", 710, 750, 12),
    ]
    out.append(xsp.Trace.from_spans(spans, threads=[(11, "main", 0), (stream, "stream 7", 1)],
                                    meta={"levels": "MLG", "region": "prof", "pid": 77},
                                    counters={"lost.cap": 0}).to_bytes())
    return out


class Stats:
    def __init__(self):
        self.made = self.accepted = self.rejected = 0
        self.failures = []
        self.slowest = (0.0, None)


def fuzz(count, seed, tmp_path, deep_every=1, html_every=1, time_limit=60.0):
    """Makes count mutants of the seed traces and runs everything() on each one that loads
    (every exporter on each, the analyses on every deep_every-th, report.html on every
    html_every-th); returns Stats.  A failure is (mutant, ops, where, exception) for anything
    but xsp's typed errors escaping, or a mutant slower than time_limit seconds (a hang guard
    only, far above the tens of milliseconds a mutant takes, so that a loaded machine cannot
    trip it)."""
    import traceback
    rng = random.Random(seed)
    seeds = seed_traces()
    for b in seeds:                             # the unmutated seeds work (and warm up)
        everything(xsp.Trace.from_bytes(b), tmp_path, html=False)
    st = Stats()
    for m in range(count):
        k = rng.randrange(len(seeds))
        if rng.random() < 0.35:
            data, op = byte_mutant(rng, seeds[k])
            ops = [op]
        else:
            doc = mp_decode(seeds[k])
            ops = Mutator(rng, doc).mutate()
            try:
                data = mp_encode(doc)
            except (ValueError, TypeError):
                continue
        st.made += 1
        try:
            tr = xsp.Trace.from_bytes(data)
        except xsp.TraceFormatError:
            st.rejected += 1
            continue
        except Exception as e:                 # noqa: BLE001 - the point of the test
            st.failures.append((m, ops, "from_bytes", repr(e)))
            continue
        st.accepted += 1
        t0 = time.monotonic()
        try:
            everything(tr, tmp_path, deep=st.accepted % deep_every == 0,
                       html=st.accepted % html_every == 0)
        except xsp.TraceFormatError:
            pass
        except Exception as e:                 # noqa: BLE001
            st.failures.append((m, ops, "everything", "".join(
                traceback.format_exception(type(e), e, e.__traceback__)[-3:])))
        dt = time.monotonic() - t0
        if dt > st.slowest[0]:
            st.slowest = (dt, m)
        if dt > time_limit:
            st.failures.append((m, ops, "slow", "%.1f s" % dt))
    return st


def test_fuzz_accepted_mutants_raise_only_typed_errors(tmp_path):
    """Mutants of small real traces: every one that loads must go through the views, every
    exporter, the analyses and the reports raising nothing but xsp's typed errors."""
    count = int(os.environ.get("XSP_FUZZ_MUTANTS", "300"))
    full = count > 300                          # a long local run checks everything each time
    st = fuzz(count, seed=int(os.environ.get("XSP_FUZZ_SEED", "20240917")), tmp_path=tmp_path,
              deep_every=1 if full else 10, html_every=1 if full else 150)
    assert not st.failures, "%d failures, first: %r" % (len(st.failures), st.failures[:3])
    assert st.accepted > count // 4            # the mutations mostly make valid files
    assert st.rejected > 0
