"""The C writers of Kineto's JSON, Chrome trace-event JSON and OTLP/JSON (csrc/io/kinetow.c,
chromew.c, otlpw.c over jsonw.c) against the Python writers they replaced
(kineto._reference_write, chrome._reference_write, otlp._reference_write: the OpenTelemetry
SDK's encoder and protobuf's JSON mapping, with xsp[otlp] installed; OTLP with one trace id
per profile and per step, a fixed trace id): for every kind of trace the other tests build
(real profiles with shapes and memory, a training loop with steps, the level-G trace make
ctest writes, a loaded torch.profiler trace, a Measurement's leveled latencies, intra-op
threads, every hostile trace of test_hostile_files.py), json.load of the two files is the
same value.  Also gzip and the
atomic write (nothing left beside the file, a failure leaves what was there)."""
import functools
import glob
import gzip
import importlib.util
import json
import math
import os
import warnings
from unittest import mock

import pytest
import torch

import xsp
from xsp.formats import chrome, kineto, otlp, tracks
from helpers import have_otlp
from test_kineto import workload          # the same folder: a small training step

HAVE_OTLP = have_otlp()
TRACE_ID = 0x0123456789ABCDEF0123456789ABCDEF

HERE = os.path.dirname(os.path.abspath(__file__))
GPU_TRACE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "c", "bin", "gpu_steps.xsp")


@functools.lru_cache(maxsize=None)
def _hostile():
    """test_hostile_files.hostile_traces(), wherever that file lives under tests/py."""
    found = glob.glob(os.path.join(os.path.dirname(HERE), "**", "test_hostile_files.py"),
                      recursive=True)
    spec = importlib.util.spec_from_file_location("_hostile_for_writers", found[0])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.hostile_traces()


def _same(x, y):
    """x == y for loaded JSON, NaN equal to itself (the reader loads the literal NaN)."""
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return True
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(_same(a, b) for a, b in zip(x, y))
    return x == y and type(x) is type(y) or (isinstance(x, (int, float)) and
                                             isinstance(y, (int, float)) and x == y)


def _load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def check_same(value, tmp_path, **options):
    """Writes value with both writers of both formats (plain and gzip) and asserts the
    documents are equal."""
    tmp_path = str(tmp_path)
    for ext in (".pt.trace.json", ".pt.trace.json.gz"):
        got, want = tmp_path + "/c" + ext, tmp_path + "/py" + ext
        assert kineto.write(value, got, **options) == got
        kineto._reference_write(value, want, **options)
        a, b = _load(got), _load(want)
        tr = value if isinstance(value, xsp.Trace) else value.trace
        if "kineto.trace_id" not in tr.meta:        # a fresh random id per file
            a.pop("trace_id"), b.pop("trace_id")
        assert a.keys() == b.keys()
        for k in a:
            if k != "traceEvents":
                assert _same(a[k], b[k]), k
        assert len(a["traceEvents"]) == len(b["traceEvents"])
        for i, (x, y) in enumerate(zip(a["traceEvents"], b["traceEvents"])):
            assert _same(x, y), (i, x, y)
    names = ["c.json", "py.json", "c.pt.trace.json", "py.pt.trace.json", "c.pt.trace.json.gz",
             "py.pt.trace.json.gz"]
    if HAVE_OTLP:
        check_same_otlp(value, tmp_path)
        names += ["c.otlp.json", "c.otlp.json.gz", "py.otlp.json"]
    got, want = tmp_path + "/c.json", tmp_path + "/py.json"
    chrome.write(value, got)
    chrome._reference_write(value, want)
    a, b = _load(got), _load(want)
    assert _same(a["otherData"], b["otherData"])
    assert len(a["traceEvents"]) == len(b["traceEvents"])
    for i, (x, y) in enumerate(zip(a["traceEvents"], b["traceEvents"])):
        assert _same(x, y), (i, x, y)
    assert sorted(os.listdir(tmp_path)) == sorted(names)       # no temporary file left


def check_same_otlp(value, tmp_path):
    """otlp.write (C) and otlp._reference_write (the SDK) of value, per profile and per step,
    plain and gzip: the same JSON value, or the same exception from both.  An estimated wall
    clock (no meta clock.wall_offset_ns) is taken once for both."""
    tr = value if isinstance(value, xsp.Trace) else value.trace
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", xsp.XSPWarning)
        clock = otlp.wall_clock(tr)
    for trace_per in ("profile", "step"):
        opts = {"trace_id": TRACE_ID, "trace_per": trace_per}
        want, got = tmp_path + "/py.otlp.json", tmp_path + "/c.otlp.json"
        with mock.patch.object(otlp, "wall_clock", lambda t: clock), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore", xsp.XSPWarning)
            try:
                otlp._reference_write(value, want, **opts)
            except Exception as exc:            # a trace OTLP cannot carry: the same error
                with pytest.raises(type(exc)):
                    otlp.write(value, got, **opts)
                with pytest.raises(type(exc)):
                    otlp._Export(value, "xsp", trace_per, None, None, TRACE_ID)
                continue
            check_same_otlp_requests(value, trace_per)
            b = _load(want)
            for path in (got, got + ".gz"):
                assert otlp.write(value, path, **opts) == path
                a = _load(path)
                assert a.keys() == b.keys()
                if not b:                           # no spans: an empty request
                    continue
                (ra,), (rb,) = a["resourceSpans"], b["resourceSpans"]
                assert _same(ra["resource"], rb["resource"])
                (sa,), (sb,) = ra["scopeSpans"], rb["scopeSpans"]
                assert sa["scope"] == sb["scope"] and len(sa["spans"]) == len(sb["spans"])
                for i, (x, y) in enumerate(zip(sa["spans"], sb["spans"])):
                    assert _same(x, y), (trace_per, i, x, y)
                assert _same(a, b)


def check_same_otlp_requests(value, trace_per):
    """The requests otlp.send sends (csrc/io/otlppb.c) are, byte for byte, those the
    OpenTelemetry SDK's encoder gives for otlp.spans() of each batch, for one batch of all the
    spans and for batches of 3 (requests that start inside the trace); each parses with
    opentelemetry-proto's decoder and serializes back to itself."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import \
        ExportTraceServiceRequest
    sdk = otlp.spans(value, trace_id=TRACE_ID, trace_per=trace_per)
    for batch in (max(1, len(sdk)), 3):
        ex = otlp._Export(value, "xsp", trace_per, None, None, TRACE_ID)
        bodies = list(otlp._bodies(ex, batch))
        assert [(lo, hi) for lo, hi, _ in bodies] == [
            (lo, min(lo + batch, len(sdk))) for lo in range(0, len(sdk), batch)]
        for lo, hi, body in bodies:
            want = encode_spans(sdk[lo:hi]).SerializeToString()
            assert body == want, (trace_per, batch, lo)
            assert ExportTraceServiceRequest.FromString(body).SerializeToString() == body


def test_a_profile_with_shapes_and_memory(tmp_path):
    step = workload()
    with xsp.profile(record_shapes=True, profile_memory=True) as p:
        step()
    check_same(p.trace, tmp_path)


def test_a_training_loop_with_steps(tmp_path):
    step = workload()
    with xsp.profile(levels="ML") as p:
        for _ in range(3):
            step()
            p.step()
    check_same(p.trace, tmp_path)
    check_same(p.trace, tmp_path, base_ns=12345)


def test_a_measurement_with_leveled_latencies(tmp_path):
    step = workload()
    m = xsp.measure(step, levels="ML", warmup=1, repeat=3, progress=False)
    assert m.leveled_ns()
    check_same(m, tmp_path)


def test_the_level_g_trace(tmp_path):
    if not os.path.exists(GPU_TRACE):
        pytest.skip("%s is missing: run make ctest first" % GPU_TRACE)
    check_same(xsp.load(GPU_TRACE), tmp_path)


def test_a_loaded_torch_profiler_trace(tmp_path):
    step = workload()
    path = str(tmp_path / "torch.pt.trace.json")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                record_shapes=True, profile_memory=True,
                                with_modules=True) as p:
        step()
    p.export_chrome_trace(path)
    tr = xsp.load(path)
    os.unlink(path)
    check_same(tr, tmp_path)


def test_intra_op_threads(tmp_path):
    spans = [{"name": "aten::mm", "kind": "op", "start_ns": 0, "end_ns": 100},
             {"name": "chunk", "kind": "op", "start_ns": 10, "end_ns": 50, "parent": 0,
              "thread": 1}]
    tr = xsp.Trace.from_spans(spans, threads=[(1, "main", 0), (2, "intra-op thread 1", 0)],
                              meta={"levels": "ML"})
    assert tracks.spawn_links(tr) == [(1, 0)]
    check_same(tr, tmp_path)


def test_odd_names_invalid_utf8_and_odd_values(tmp_path):
    bad = b"op\xff\xfe\xe2\x82 \xed\xa0\x80 \xc3\xa9\x00\n\"\\".decode("utf-8", "surrogateescape")
    spans = [{"name": "r", "kind": "region", "start_ns": 0, "end_ns": 10 ** 6},
             {"name": bad, "kind": "op", "start_ns": 5, "end_ns": 99, "parent": 0,
              "attrs": {bad: bad, "id": 3, "attr.id": 4, "parent": "p", "f": 0.1,
                        "nan": float("nan"), "inf": float("-inf"), "big": -2 ** 63,
                        "tiny": 5e-324, "k.x[]": '[1, NaN, "\\ud800", {"a": 1e400}]',
                        "k.cat": bad, "seq": 3}},
             {"name": "\u20ac" * 100, "kind": "module", "start_ns": 100, "end_ns": 200,
              "parent": 0, "attrs": {"type": bad}}]
    odd = bad.replace("\x00", "")                 # meta and thread names hold no NUL
    tr = xsp.Trace.from_spans(spans, threads=[(7, odd, 0)],
                              meta={"levels": "ML", "region": odd, odd: 1.5})
    check_same(tr, tmp_path)


@pytest.mark.parametrize("name", sorted(_hostile()))
def test_every_hostile_trace(name, tmp_path):
    check_same(_hostile()[name], tmp_path)


def test_a_failed_write_leaves_what_was_there(tmp_path, monkeypatch):
    """The C writer writes through atomic_write: a failure (here, the writer's own error)
    leaves the old file and no temporary one."""
    path = str(tmp_path / "t.pt.trace.json")
    with open(path, "w") as f:
        f.write("old")
    tr = xsp.Trace.from_spans([{"name": "a", "kind": "op", "start_ns": 0, "end_ns": 1}])

    def boom(*args):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(kineto._core, "write_kineto", boom)
    with pytest.raises(OSError):
        kineto.write(tr, path)
    assert open(path).read() == "old" and os.listdir(tmp_path) == ["t.pt.trace.json"]


@pytest.mark.skipif(not HAVE_OTLP, reason="xsp[otlp] is not installed")
def test_otlp_attribute_names_and_edge_values(tmp_path):
    """OTLP's own cases: xsp attributes named as xsp's (xsp.attr.level, xsp.attr.attr.level),
    keys that are the same once their bytes that are not UTF-8 are '?', a thread without a
    name and one past 2**63, flags, a span without a name, a start at 0 ns once anchored (left
    out, as protobuf's JSON mapping leaves a default out), leveled NaN and infinity, resource
    attributes of every type and an empty key; the region under no step with trace_per="step"
    keeps the profile's trace id."""
    bad1 = b"a\xff".decode("utf-8", "surrogateescape")
    bad2 = b"a\xfe".decode("utf-8", "surrogateescape")
    spans = [{"name": "", "kind": "region", "start_ns": 6, "end_ns": 10 ** 6},
             {"name": "s", "kind": "step", "start_ns": 7, "end_ns": 900, "parent": 0},
             {"name": "m", "kind": "module", "start_ns": 8, "end_ns": 99, "parent": 1,
              "thread": 1, "flags": 2,
              "attrs": {"level": 1, "attr.level": "x", "thread_name": "t", "module": 2.5,
                        bad1: 1, bad2: 2, "a?": 3, "leveled_ns": -0.0}},
             {"name": "op", "kind": "op", "start_ns": 9, "end_ns": 9, "parent": 2,
              "thread": 1, "attrs": {"f": float("inf"), "n": -2 ** 63}}]
    tr = xsp.Trace.from_spans(spans, threads=[(1, "main", 0), (2 ** 64 - 1, "", 0)],
                              meta={"levels": "ML", "clock.wall_offset_ns": -6})
    leveled = {0: float("nan"), 2: float("-inf"), 3: 7}
    for per in ("profile", "step"):
        opts = dict(trace_id=TRACE_ID, trace_per=per, leveled=leveled, service="svc",
                    resource={"b": True, "f": 0.5, "big": 2 ** 70, "": "dropped", "s": ""})
        got, want = str(tmp_path / "c.otlp.json"), str(tmp_path / "py.otlp.json")
        otlp.write(tr, got, **opts)
        otlp._reference_write(tr, want, **opts)
        a, b = _load(got), _load(want)
        assert _same(a, b)
        sp = a["resourceSpans"][0]["scopeSpans"][0]["spans"]
        assert "name" not in sp[0] and "startTimeUnixNano" not in sp[0]
        keys = [kv["key"] for kv in sp[2]["attributes"]]
        assert keys == ["xsp.level", "xsp.kind", "xsp.span_id", "xsp.thread", "xsp.module",
                        "xsp.flags", "xsp.leveled_ns", "xsp.attr.level", "xsp.attr.attr.level",
                        "xsp.thread_name", "xsp.attr.module", "xsp.a?", "xsp.attr.a?",
                        "xsp.attr.attr.a?", "xsp.attr.leveled_ns"]
        assert sp[2]["attributes"][3]["value"] == {"stringValue": str(2 ** 64 - 1)}
        assert sp[0]["attributes"][-1] == {"key": "xsp.leveled_ns",
                                           "value": {"doubleValue": "NaN"}}
        res = {kv["key"]: kv["value"] for kv in a["resourceSpans"][0]["resource"]["attributes"]}
        assert res["b"] == {"boolValue": True} and res["big"] == {"stringValue": str(2 ** 70)}
        assert "" not in res and res["s"] == {"stringValue": ""}
        ids = {s["traceId"] for s in sp}
        assert len(ids) == (2 if per == "step" else 1) and sp[0]["traceId"] == "%032x" % TRACE_ID


def test_otlp_write_needs_no_opentelemetry(tmp_path):
    """The C writer makes the OTLP/JSON file without the OpenTelemetry packages; xsp.save
    writes .otlp.json.gz as gzip-compressed OTLP/JSON (not Kineto's, as .json.gz is)."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
    code = ("import sys; sys.modules['opentelemetry'] = None; sys.modules['google'] = None\n"
            "import json, xsp\n"
            "tr = xsp.Trace.from_spans([{'name': 'a', 'kind': 'op', 'start_ns': 1, "
            "'end_ns': 2}], meta={'clock.wall_offset_ns': 5})\n"
            "import gzip\n"
            "xsp.save(tr, sys.argv[1], trace_id=3)\n"
            "xsp.save(tr, sys.argv[1] + '.gz', trace_id=3)\n"
            "assert json.load(gzip.open(sys.argv[1] + '.gz')) == json.load(open(sys.argv[1]))\n"
            "sp = json.load(open(sys.argv[1]))['resourceSpans'][0]['scopeSpans'][0]['spans']\n"
            "print(sp[0]['traceId'], sp[0]['startTimeUnixNano'], sp[0]['endTimeUnixNano'])\n")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "t.otlp.json")], cwd=root,
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=root))
    assert r.returncode == 0, r.stderr
    assert r.stdout == "%032x 6 7\n" % 3
