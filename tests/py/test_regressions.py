"""Regression tests for problems found in review, each naming what it guards against."""
import json
import os
import threading

import pytest
import torch

import xsp
from xsp import _core
from helpers import check_tree
import models


def test_forked_child_does_not_record():
    """Guards against forked workers (DataLoader) inheriting a live session: they kept
    recording every op into copies of the buffers that nobody reads, up to the cap each."""
    a = torch.ones(2)
    with xsp.profile() as prof:
        torch.add(a, a)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:                                  # the child
            ok = not _core.active() and not xsp._torch.attached()
            torch.add(a, a)
            with xsp.profile() as child:              # and it can profile on its own
                torch.mul(a, a)
            ok = ok and [s.name for s in child.trace.spans(kind="op")] == ["aten::mul"]
            os.write(w, b"1" if ok else b"0")
            os._exit(0)
        os.close(w)
        got = os.read(r, 1)
        os.close(r)
        os.waitpid(pid, 0)
        torch.add(a, a)
    assert got == b"1"
    assert [s.name for s in prof.trace.spans(kind="op")] == ["aten::add", "aten::add"]


def test_stop_from_another_thread_is_refused():
    """Guards against stop() on another thread ending the region and step on the wrong
    thread's stack (region left open, ends unmatched)."""
    prof = xsp.profile()
    prof.start()
    errors = []
    th = threading.Thread(target=lambda: errors.append(pytest.raises(xsp.ProfilerError,
                                                                     prof.stop)))
    th.start()
    th.join()
    assert len(errors) == 1 and "thread that started" in str(errors[0].value)
    prof.stop()
    assert prof.trace.counters["unmatched_end"] == 0
    assert prof.trace[0].kind == "region" and prof.trace[0].flags == 0


def test_tree_of_a_deep_trace():
    """Guards against Trace.tree() recursing once per level (RecursionError at ~1000)."""
    depth = 1000
    with xsp.profile(levels="L") as prof:
        scopes = [torch.profiler.record_function("s%d" % i) for i in range(depth)]
        for s in scopes:
            s.__enter__()
        for s in reversed(scopes):
            s.__exit__(None, None, None)
    lines = prof.trace.tree().splitlines()
    scope_lines = [ln for ln in lines if "[scope]" in ln]
    assert len(scope_lines) == depth
    assert scope_lines[-1].lstrip(" │└├─").startswith("s%d [scope]" % (depth - 1))


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


def test_unregistered_module_is_looked_up_once():
    """Guards against rebuilding the model's qualified names (named_modules()) on every call
    of a module that is not a submodule (a module kept in a plain list, a shared loss)."""
    helper = torch.nn.ReLU()

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)
            self.extra = [helper]            # not registered

        def forward(self, x):
            for _ in range(5):
                x = self.extra[0](x)
            return self.fc(x)

    model, x = Model(), torch.ones(1, 2)
    calls = []
    orig = Model.named_modules

    def counting(self, *a, **k):
        calls.append(1)
        return orig(self, *a, **k)

    Model.named_modules = counting
    try:
        with xsp.profile() as prof:
            for _ in range(4):
                model(x)
    finally:
        Model.named_modules = orig
    assert len(calls) == 2                 # the first map, one rebuild on the first miss
    mods = prof.trace.spans(kind="module")
    assert [s.name for s in mods].count("ReLU") == 20
    assert [s.name for s in mods].count("fc") == 4
    check_tree(prof.trace)


def test_fake_clock_cannot_change_during_a_session():
    """Guards against mixing clocks in one session (fake at start, real at stop gave negative
    times)."""
    with xsp.profile():
        with pytest.raises(RuntimeError, match="not while a session"):
            _core.set_fake_clock(0, 1)


def test_now_is_nanoseconds():
    """Guards against _core.now() returning TSC ticks once a session had run."""
    import time
    with xsp.profile():
        pass
    lo = time.monotonic_ns()
    a = _core.now()
    hi = time.monotonic_ns()
    assert lo <= a <= hi          # both CLOCK_MONOTONIC: exact, however long each call took


def test_a_trace_cannot_be_changed_so_saving_on_another_thread_is_safe(tmp_path):
    """Regression: save() writes with the GIL released, and TraceData once had add_attrs,
    set_meta and set_thread_name, which freed the arrays a save was reading (a segfault; then a
    "saving" guard).  Now a trace is finished at stop and has no method that changes it: saves
    on one thread while another reads every column give whole, equal files."""
    import threading
    spans = [{"name": "r", "kind": "region", "start_ns": 0, "end_ns": 10}] + [
        {"name": "s%d" % i, "kind": "op", "start_ns": i + 1, "end_ns": i + 2, "parent": 0,
         "attrs": {"k": i}} for i in range(50000)]
    tr = xsp.Trace.from_spans(spans)
    td = tr._data
    assert [m for m in dir(td) if m.startswith(("set", "add"))] == []
    errors = []

    def saver(k):
        try:
            for _ in range(3):
                td.save(str(tmp_path / ("t%d.xsp" % k)))
        except Exception as exc:     # noqa: BLE001 -- reported below
            errors.append(exc)

    threads = [threading.Thread(target=saver, args=(k,)) for k in range(2)]
    for th in threads:
        th.start()
    for _ in range(20):
        assert td.attrs()["key"] and len(td.strings()) == 50004 and len(td) == 50001
    for th in threads:
        th.join()
    assert errors == []
    assert xsp.load(str(tmp_path / "t0.xsp")) == tr == xsp.load(str(tmp_path / "t1.xsp"))
