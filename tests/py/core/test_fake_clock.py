"""Exact timestamps and durations with the core's fake clock.

The fake clock returns start, start + step, start + 2 * step, ... one value per reading.  The
core reads it once when a session starts (meta start_ns), once per span begin (as the last
thing it does), once per span end (as the first thing), and once at stop (meta stop_ns).  So
with step 10 every span's bounds follow from counting begins and ends.
"""
import numpy as np
import torch

import xsp
from xsp import _core
from helpers import check_tree
import models
import pytest


def test_tiny_function_exact(fake_clock):
    add, a, b = models.Add(), torch.ones(3), torch.ones(3)
    add(a, b)
    fake_clock(1000, 10)
    with xsp.profile() as prof:
        add(a, b)
    trace = prof.trace
    # 1000 session start        1040 aten::add begin     1080 region end
    # 1010 region begin         1050 aten::add end       1090 stop
    # 1020 step#0 begin         1060 model end
    # 1030 model begin          1070 step#0 end (elided: no step() call)
    assert [(s.kind, s.name, s.start_ns, s.end_ns, s.duration_ns, s.self_ns) for s in trace] == [
        ("region", "xsp.profile", 1010, 1080, 70, 40),     # 70 - 30 (model)
        ("model", "Add", 1030, 1060, 30, 20),              # 30 - 10 (op)
        ("op", "aten::add", 1040, 1050, 10, 10),
    ]
    assert (trace.meta["start_ns"], trace.meta["stop_ns"]) == (1000, 1090)
    assert trace.duration_ns.tolist() == [70, 30, 10]
    assert trace.self_ns.tolist() == [40, 20, 10]


def test_level_L_exact(fake_clock):
    add, a = models.Add(), torch.ones(3)
    add(a, a)
    fake_clock(0, 1)
    with xsp.profile(levels="L") as prof:
        add(a, a)
    # 0 start, 1 module begin, 2/3 op, 4 module end, 5 stop: no region, no step
    assert [(s.kind, s.name, s.start_ns, s.end_ns) for s in prof.trace] == [
        ("module", "Add", 1, 4), ("op", "aten::add", 2, 3)]
    assert (prof.trace.meta["start_ns"], prof.trace.meta["stop_ns"]) == (0, 5)


def test_level_M_exact(fake_clock):
    add, a = models.Add(), torch.ones(3)
    add(a, a)
    fake_clock(500, 5)
    with xsp.profile(levels="M") as prof:
        add(a, a)
    # 500 start, 505 region, 510 step#0, 515/520 model (no op: level L is off),
    # 525 step#0 end, 530 region end, 535 stop
    assert [(s.kind, s.name, s.start_ns, s.end_ns, s.self_ns) for s in prof.trace] == [
        ("region", "xsp.profile", 505, 530, 20), ("model", "Add", 515, 520, 5)]
    assert prof.trace.meta["stop_ns"] == 535


def test_now_reads_the_fake_clock(fake_clock):
    fake_clock(7, 3)
    assert [_core.now() for _ in range(3)] == [7, 10, 13]


def test_real_model_durations_count_clock_readings(fake_clock):
    """On one thread with step s, a span's duration is s * (2 * descendants + 1) (each
    descendant reads the clock at its begin and end inside it, plus the span's own end) and
    its self time is s * (children + 1); the region also contains the elided step#0's two
    readings, which count as the region's own time."""
    model, x = models.cnn()
    models.fwd_bwd(model, x)
    fake_clock(10 ** 6, 10)
    with xsp.profile() as prof:
        models.fwd_bwd(model, x)
    trace = prof.trace
    check_tree(trace)
    assert len(trace.threads) == 1
    n = len(trace)
    parents = trace.parent_ids
    desc = np.zeros(n, dtype=np.int64)
    kids = np.bincount(parents[parents >= 0], minlength=n)
    for i in range(n - 1, 0, -1):         # children come after parents
        desc[parents[i]] += desc[i] + 1
    desc[0] += 1                          # the elided step#0 inside the region
    assert trace.duration_ns.tolist() == (10 * (2 * desc + 1)).tolist()
    kids[0] += 2                          # the elided step#0's begin and end are region self
    assert trace.self_ns.tolist() == (10 * (kids + 1)).tolist()
    # every begin and end read the clock once, in order: start times are distinct multiples
    assert len(set(trace.start_ns.tolist())) == n
    assert all(v % 10 == 0 for v in trace.start_ns.tolist())
    assert trace.start_ns[0] == 10 ** 6 + 10
    assert trace.meta["stop_ns"] == trace.end_ns[0] + 10


def test_own_cost_is_spans_times_the_calibrated_cost_plus_the_stop(fake_clock, tmp_path,
                                                                   monkeypatch):
    """Every trace says what recording it cost (issue 27): meta overhead.spans (the spans the
    core recorded, the region left out), overhead.stop_ns (from stop_ns to the stop's last
    clock reading: one step here), overhead.per_span_ns (calibrated once per process and
    configuration, before a start) and overhead.estimate_ns = spans x per_span_ns + stop_ns;
    in the text and HTML reports and the Kineto export.  Under the fake clock nothing is
    calibrated (its readings would move every later one): the cost is then not estimated."""
    import json
    from xsp import report
    from xsp.producers import profiler
    from xsp.core.fmt import fmt_ns
    add, a = models.Add(), torch.ones(3)
    add(a, a)
    xsp.profile()                   # calibrates levels ML on the real clock (or it is cached)
    per = profiler._SPAN_COST[("ML", False, False, False)]
    assert isinstance(per, int) and per >= 0
    fake_clock(1000, 10)
    with xsp.profile() as prof:     # as test_tiny_function_exact: stop 1090, then 1100
        add(a, a)
    m = prof.trace.meta
    assert (m["stop_ns"], m["overhead.spans"], m["overhead.stop_ns"]) == (1090, 2, 10)
    assert m["overhead.per_span_ns"] == per
    assert m["overhead.estimate_ns"] == 2 * per + 10
    line = ("xsp's own cost (estimate): %s = 2 spans x %s per span (calibrated on this "
            "machine, " % (fmt_ns(2 * per + 10), fmt_ns(per)))
    assert line in report.text(prof.trace)
    assert "own cost (estimate): %s" % fmt_ns(2 * per + 10) in report.html(prof.trace)
    xsp.save(prof.trace, str(tmp_path / "t.json"), format="kineto")
    with open(tmp_path / "t.json") as f:
        top = json.load(f)["xsp"]["meta"]
    assert (top["overhead.estimate_ns"], top["overhead.per_span_ns"],
            top["overhead.stop_ns"]) == (2 * per + 10, per, 10)
    key = ("ML", True, True, False)     # a configuration first seen under the fake clock
    monkeypatch.delitem(profiler._SPAN_COST, key, raising=False)
    with xsp.profile(record_shapes=True, profile_memory=True) as prof:
        add(a, a)
    m = prof.trace.meta
    assert "overhead.per_span_ns" not in m and "overhead.estimate_ns" not in m
    assert key not in profiler._SPAN_COST
    assert (m["overhead.spans"], m["overhead.stop_ns"]) == (2, 10)
    assert ("xsp's own cost: 2 spans recorded (no per-span cost was calibrated), stop 10 ns"
            in report.text(prof.trace))


def test_own_cost_is_calibrated_once_per_configuration_and_never_while_recording(monkeypatch):
    """The calibration (a short profile of its own) runs when a profile is made, never while
    one records (a profile made inside another's block gets no per-span cost), and once per
    process and configuration (cached)."""
    from xsp.producers import profiler
    real, calls = profiler._calibrate, []

    def counting(key, torch):
        calls.append((key, _core.active()))
        return real(key, torch)
    monkeypatch.setattr(profiler, "_calibrate", counting)
    key = ("L", False, False, False)
    monkeypatch.delitem(profiler._SPAN_COST, key, raising=False)
    with xsp.profile(levels="M"):       # (its own configuration calibrated before the start)
        inner = xsp.profile(levels="L")
    assert [k for k, _ in calls] in ([], [("M", False, False, False)])
    assert "overhead.per_span_ns" not in inner._meta
    del calls[:]
    for _ in range(3):
        p = xsp.profile(levels="L")
    assert calls == [(key, False)] and p._meta["overhead.per_span_ns"] == profiler._SPAN_COST[key]


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
