"""The C writers of Kineto's JSON and Chrome trace-event JSON (csrc/io/kinetow.c, chromew.c
over jsonw.c) against the Python writers they replaced (kineto._reference_write,
chrome._reference_write): for every kind of trace the other tests build (real profiles with
shapes and memory, a training loop with steps, the level-G trace make ctest writes, a loaded
torch.profiler trace, a Measurement's leveled latencies, intra-op threads, every hostile trace
of test_hostile_files.py), json.load of the two files is the same value.  Also gzip and the
atomic write (nothing left beside the file, a failure leaves what was there)."""
import functools
import glob
import gzip
import importlib.util
import json
import math
import os

import pytest
import torch

import xsp
from xsp.formats import chrome, kineto, tracks
from test_kineto import workload          # the same folder: a small training step

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
    got, want = tmp_path + "/c.json", tmp_path + "/py.json"
    chrome.write(value, got)
    chrome._reference_write(value, want)
    a, b = _load(got), _load(want)
    assert _same(a["otherData"], b["otherData"])
    assert len(a["traceEvents"]) == len(b["traceEvents"])
    for i, (x, y) in enumerate(zip(a["traceEvents"], b["traceEvents"])):
        assert _same(x, y), (i, x, y)
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["c.json", "py.json", "c.pt.trace.json", "py.pt.trace.json", "c.pt.trace.json.gz",
         "py.pt.trace.json.gz"])                    # no temporary file left


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
