"""Chrome trace event export (xsp.formats.chrome.write)."""
import json
import os
import re
import sys
import threading
from decimal import Decimal

import pytest
import torch

import xsp
import xsp.formats.chrome
from helpers import main_tid
import models


def _load(path):
    """The JSON with every number that has a fraction parsed exactly (Decimal)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return text, json.loads(text, parse_float=Decimal)


def _ns(us):
    """Exact integer ns from a Decimal microsecond value."""
    v = us * 1000
    assert v == int(v), us
    return int(v)


def _check_export(trace, path):
    """Asserts the export of trace at path: metadata, one X event per span with exact times,
    per-thread nesting; returns the X events in span id order."""
    xsp.formats.chrome.write(trace, path)
    text, doc = _load(path)
    assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]
    assert doc["displayTimeUnit"] == "ns"
    assert doc["otherData"]["xsp"]["counters"] == trace.counters
    pid = trace.meta["pid"]
    assert doc["otherData"]["xsp"]["meta"]["pid"] == pid
    events = doc["traceEvents"]
    meta = [e for e in events if e["ph"] == "M"]
    xs = [e for e in events if e["ph"] == "X"]
    # flows: an intra-op pool thread's spans from the op that spawned them (one s, one f each)
    flows = [e for e in events if e["ph"] in ("s", "f")]
    links = xsp.formats.tracks.spawn_links(trace)
    assert len(meta) + len(xs) + len(flows) == len(events) and len(flows) == 2 * len(links)
    assert sorted((e["ph"], e["id"], e["tid"]) for e in flows) == sorted(
        [("s", n, trace.threads[trace.thread_index[j]][0]) for n, (_, j) in
         enumerate(links, 1)] + [("f", n, trace.threads[trace.thread_index[i]][0])
                                 for n, (i, _) in enumerate(links, 1)])
    assert meta[0] == {"ph": "M", "name": "process_name", "pid": pid,
                       "args": {"name": "xsp: %s" % trace.meta["region"]}}
    assert sorted((e["tid"], e["args"]["name"]) for e in meta[1:]) == sorted(
        (tid, name or "thread %d" % tid) for tid, name, _ in trace.threads)
    assert all(e["name"] == "thread_name" and e["pid"] == pid for e in meta[1:])
    # every ts/dur is written with exactly three decimals (ns resolution)
    for m in re.finditer(r'"(ts|dur)":([^,]*),', text):
        assert re.fullmatch(r"\d+\.\d{3}", m.group(2)), m.group(0)
    assert len(xs) == len(trace)
    t0 = int(trace.start_ns.min()) if len(trace) else 0
    for e, s in zip(xs, trace):
        assert e["args"]["id"] == s.id
        assert e["name"] == s.name and e["pid"] == pid and e["tid"] == s.thread
        assert e["cat"] == "%s.%s" % (s.level, s.kind)
        assert _ns(e["ts"]) == s.start_ns - t0
        assert _ns(e["dur"]) == s.duration_ns
        args = dict(e["args"])
        del args["id"]
        if s.parent is None:
            assert "parent" not in args
        else:
            assert args.pop("parent") == s.parent
        assert args == s.attrs
    by_id = {e["args"]["id"]: e for e in xs}
    for e in xs:
        p = by_id.get(e["args"].get("parent"))
        if p is not None and p["tid"] == e["tid"]:
            assert p["ts"] <= e["ts"] and e["ts"] + e["dur"] <= p["ts"] + p["dur"]
    return xs


def test_tiny_trace_exact(fake_clock, tmp_path):
    add, a = models.Add(), torch.ones(2)
    add(a, a)
    fake_clock(1000, 10)
    with xsp.profile(name="réGion") as prof:
        add(a, a); line = sys._getframe().f_lineno  # noqa: E702 -- the call's line
    # region 1010-1080, model 1030-1060, add 1040-1050: relative to the first start (1010)
    fwd = models.Add.forward.__code__
    xs = _check_export(prof.trace, str(tmp_path / "t.json"))
    tid = main_tid()
    assert [(e["name"], e["cat"], e["tid"], e["ts"], e["dur"], e["args"]) for e in xs] == [
        ("réGion", "M.region", tid, Decimal("0.000"), Decimal("0.070"), {"id": 0}),
        ("Add", "M.model", tid, Decimal("0.020"), Decimal("0.030"),
         {"type": "Add", "source": "%s:%d" % (fwd.co_filename, fwd.co_firstlineno),
          "call_site": "%s:%d" % (sys._getframe().f_code.co_filename, line), "id": 1,
          "parent": 0}),
        ("aten::add", "L.op", tid, Decimal("0.030"), Decimal("0.010"),
         {"seq": prof.trace[2].attrs["seq"], "id": 2, "parent": 1}),
    ]


def test_large_times_keep_ns(fake_clock, tmp_path):
    """Microsecond values far from the origin keep their nanoseconds (no float rounding)."""
    add, a = models.Add(), torch.ones(2)
    add(a, a)
    fake_clock(10 ** 15, 10 ** 14 + 1)
    with xsp.profile() as prof:
        for _ in range(3):
            add(a, a)
    xs = _check_export(prof.trace, str(tmp_path / "t.json"))
    # the third add begins 11 readings after the region (step#0, then 4 per call):
    # 11 * (1e14 + 1) ns, written with all 16 significant digits
    assert xs[-1]["ts"] == Decimal("1100000000000.011")


def test_real_model_export(tmp_path):
    model, x = models.cnn()
    models.fwd_bwd(model, x)
    with xsp.profile() as prof:
        models.fwd_bwd(model, x)
    xs = _check_export(prof.trace, str(tmp_path / "cnn.json"))
    bwd = [e for e in xs if e["cat"] == "L.backward" and "fwd_op" in e["args"]]
    assert len(bwd) == 25
    for e in bwd:
        assert xs[e["args"]["fwd_op"]]["cat"] == "L.op"


def test_threads_export(tmp_path):
    """Several tracks, including a thread without a Python name (an intra-op worker, when
    torch uses one: the encoder's flash-attention backward allocates on it)."""
    cnn, xc = models.cnn()
    enc, xe = models.encoder()
    models.fwd_bwd(cnn, xc)
    models.fwd_bwd(enc, xe)
    with xsp.profile() as prof:
        t = threading.Thread(target=models.fwd_bwd, args=(cnn, xc), name="wörker")
        t.start()
        models.fwd_bwd(enc, xe)
        t.join()
    trace = prof.trace
    names = {name for _, name, _ in trace.threads}
    assert {"MainThread", "wörker"} <= names
    # the pool's track is named, and its spans hang under the op that spawned them
    assert all(name.startswith(("MainThread", "wörker", "intra-op thread ")) for name in names)
    xs = _check_export(trace, str(tmp_path / "threads.json"))
    assert {e["tid"] for e in xs} == {tid for tid, _, _ in trace.threads}


def test_export_errors(tmp_path):
    with xsp.profile(levels="M") as prof:
        pass
    with pytest.raises(OSError):
        xsp.formats.chrome.write(prof.trace, str(tmp_path / "missing" / "t.json"))
    xs = _check_export(prof.trace, str(tmp_path / "ok.json"))
    assert [(e["name"], e["ts"], e["args"]) for e in xs] == [
        ("xsp.profile", Decimal("0.000"), {"id": 0})]


def test_chrome_json_has_no_nan(tmp_path):
    """Guards against bare NaN/Infinity in the Chrome JSON (float metadata), which the viewers'
    JSON.parse rejects."""
    tr = xsp.Trace.from_spans([{"name": "r", "kind": "region", "start_ns": 0, "end_ns": 10}],
                              meta={"ratio": float("nan")})
    path = tmp_path / "t.json"
    from xsp.formats import chrome
    chrome.write(tr, str(path))
    text = path.read_text()
    assert "NaN" not in text.replace('"nan"', "")
    doc = json.loads(text, parse_constant=lambda c: pytest.fail("bare constant %s" % c))
    assert doc["otherData"]["xsp"]["meta"]["ratio"] == "nan"
    assert not [p for p in os.listdir(tmp_path) if ".tmp." in p]
