"""Asynchronous exceptions at any moment of a profile: KeyboardInterrupt injected at every line
xsp executes while making, starting and stopping a profile (sys.settrace), and delivered by a
timer at random moments of 2,000 short profiles (setitimer), at levels M, L and ML.

The guarantee (docs/design.md, "Interrupts"): afterwards no callback, wrapper or session stays
installed, the next profile records exactly what a clean one does, and the trace is kept
whenever recording had started (meta "interrupted" says so) or the exception says it was lost.
"""
import random
import signal
import sys
import threading

import pytest
import torch

import xsp
import xsp._torch
from xsp import _core

LEVELS = ["M", "L", "ML"]
ORIG_CALL = torch.nn.Module.__call__


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()), torch.ones(2, 4)


MODEL, X = _model()


def _spans(trace):
    """What a profile recorded, without times: (level, kind, name, parent, type) per span."""
    return [(s.level, s.kind, s.name, s.parent, s.attrs.get("type")) for s in trace]


def _clean(levels):
    with xsp.profile(levels=levels) as prof:
        MODEL(X)
    return _spans(prof.trace)


REFERENCE = {lv: _clean(lv) for lv in LEVELS}


def _broken():
    """The states an interrupt must never leave behind; [] when all is well."""
    out = []
    if _core.active():
        out.append("core session running")
    if _core.active_session() is not None:
        out.append("a profile still marked recording")
    if xsp._torch.attached():
        out.append("torch callback attached")
    if torch.nn.Module.__dict__.get("__call__") is not ORIG_CALL:
        out.append("Module.__call__ still wrapped")
    return out


def _check_after(prof, levels, what):
    """After an interrupted profile: nothing broken, a kept trace where recording started, and
    the next profile exactly right."""
    assert _broken() == [], "%s: %s" % (what, _broken())
    if prof is not None and prof._state not in ("new", "failed"):
        tr = prof.trace
        assert tr is not None, "%s: recording had started but the trace is gone" % what
        assert tr.meta["levels"] == levels
    assert _clean(levels) == REFERENCE[levels], "%s: the next profile differs" % what


def _one(levels):
    """One short profile as a user writes it; returns the profile object when it was made."""
    prof = None
    prof = xsp.profile(levels=levels)
    with prof:
        MODEL(X)
    return prof


# -- every line --------------------------------------------------------------------------------

class _Injector:
    """A trace function that counts 'line' events and raises KeyboardInterrupt at the n-th."""

    def __init__(self, at):
        self.at, self.n, self.fired = at, 0, None

    def __call__(self, frame, event, arg):
        if event == "line":
            self.n += 1
            if self.n == self.at:
                self.fired = "%s:%d" % (frame.f_code.co_filename, frame.f_lineno)
                raise KeyboardInterrupt("injected at line event %d" % self.at)
        return self


def _run_traced(levels, at):
    inj = _Injector(at)
    holder = {}
    sys.settrace(inj)
    try:
        holder["prof"] = xsp.profile(levels=levels)
        with holder["prof"]:
            MODEL(X)
        outcome = "completed"
    except KeyboardInterrupt:
        outcome = "interrupted"
    finally:
        sys.settrace(None)
    return inj, holder.get("prof"), outcome


@pytest.mark.parametrize("levels", LEVELS)
def test_keyboard_interrupt_at_every_executed_line(levels):
    """Every line event from making the profile to the end of its __exit__ (xsp's Python, and
    whatever it calls: torch's, the module wrapper's helpers), each once.  Stop itself runs no
    Python at levels M and L."""
    _run_traced(levels, 0)          # once-per-process code is not counted (test_schedule)
    total, _, outcome = _run_traced(levels, 0)
    assert outcome == "completed" and total.n > 20
    kept = 0
    for at in range(1, total.n + 1):
        inj, prof, outcome = _run_traced(levels, at)
        assert inj.fired is not None
        assert outcome == "interrupted", "line event %d (%s) did not interrupt" % (at, inj.fired)
        _check_after(prof, levels, "KeyboardInterrupt at %s (event %d)" % (inj.fired, at))
        if prof is not None and prof.trace is not None:
            kept += 1
            assert "interrupted" in prof.trace.meta, inj.fired
    # the positions inside the block keep a trace (marked "KeyboardInterrupt in the block")
    assert kept > 0


def test_interrupt_during_stop_keeps_the_trace_and_says_so():
    """A second Ctrl-C during stop, in stop's one Python callout (the device synchronisation
    of level G, here a session's sync source without a GPU): stop finishes, the trace is stored
    with meta "interrupted", then the KeyboardInterrupt is raised.  An Exception there becomes
    meta "sync_error"."""
    def interrupted():
        raise KeyboardInterrupt("second Ctrl-C")

    def failing():
        raise RuntimeError("CUDA error: an illegal memory access")

    s = _core.Session()
    s._setup("M", "r", sync=interrupted)
    with pytest.raises(KeyboardInterrupt, match="second Ctrl-C"):
        with s:
            pass
    assert _broken() == []
    meta = s._data.meta()
    assert meta["interrupted"] == "KeyboardInterrupt during stop" and meta["region"] == "r"
    s = _core.Session()
    s._setup("M", "r", sync=failing)
    with s:
        pass
    assert s._data.meta()["sync_error"] == "RuntimeError: CUDA error: an illegal memory access"
    assert _clean("ML") == REFERENCE["ML"]


def test_interrupt_in_the_block_is_marked_and_the_trace_kept():
    prof = xsp.profile(levels="ML")
    with pytest.raises(KeyboardInterrupt):
        with prof:
            MODEL(X)
            raise KeyboardInterrupt
    assert prof.trace.meta["interrupted"] == "KeyboardInterrupt in the block"
    assert _spans(prof.trace) == REFERENCE["ML"]
    with pytest.raises(ValueError):
        with xsp.profile(levels="M") as p2:
            raise ValueError("x")
    assert p2.trace.meta["exception"] == "ValueError"
    assert "interrupted" not in p2.trace.meta


# -- random moments ----------------------------------------------------------------------------

class _Alarm(Exception):
    pass


def _handler(signum, frame):
    raise KeyboardInterrupt("SIGALRM")


def _drain():
    """Runs the handler of a signal that fired just before the timer was cancelled."""
    try:
        for _ in range(1000):
            pass
    except KeyboardInterrupt:
        pass


def test_keyboard_interrupt_at_random_moments_of_2000_profiles():
    """SIGALRM's handler raises KeyboardInterrupt, as SIGINT's does, at a random moment of each
    of 2,000 short profiles (levels M, L and ML in turn); the delays span the whole profile,
    from making it to the end of __exit__ (measured first)."""
    assert threading.current_thread() is threading.main_thread()
    # a large heap (other tests imported torch._dynamo or Inductor) makes the collector's
    # pauses long and frequent, so that the profiles of the loop take longer than those
    # timed before it and the alarms almost always win: move what exists out of its reach
    import gc
    gc.collect()
    gc.freeze()
    rng = random.Random(1234)
    timings = {}
    for lv in LEVELS:
        import time
        t0 = time.perf_counter()
        for _ in range(20):
            _one(lv)
        timings[lv] = (time.perf_counter() - t0) / 20
    old = signal.signal(signal.SIGALRM, _handler)
    outcomes = {"interrupted": 0, "completed": 0, "trace kept": 0}
    try:
        for i in range(2000):
            lv = LEVELS[i % 3]
            delay = rng.uniform(1e-6, timings[lv] * 1.2)
            holder = {}
            try:
                signal.setitimer(signal.ITIMER_REAL, delay)
                try:
                    holder["prof"] = xsp.profile(levels=lv)
                    with holder["prof"]:
                        MODEL(X)
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                outcomes["completed"] += 1
            except KeyboardInterrupt:
                outcomes["interrupted"] += 1
            _drain()
            prof = holder.get("prof")
            if prof is not None and prof.trace is not None:
                outcomes["trace kept"] += 1
            _check_after(prof, lv, "profile %d (%s, alarm after %.1f us)" % (i, lv, delay * 1e6))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        gc.unfreeze()
    # the alarms did land inside profiles, and not always
    assert outcomes["interrupted"] > 200, outcomes
    assert outcomes["completed"] > 100, outcomes


def test_second_ctrl_c_during_a_long_stop():
    """A Ctrl-C that arrives while a large trace is merged (stop runs without the GIL): stop
    finishes, then the KeyboardInterrupt is raised, and the trace is whole.  300,000 ops from
    a C++ loop (xsp._bench, dev builds) make the merge take tens of milliseconds; the alarm is
    set as the block's last statement to fire 5 ms later, inside __exit__."""
    _bench = pytest.importorskip("xsp._bench")
    import time
    n = 300_000
    old = signal.signal(signal.SIGALRM, _handler)
    try:
        prof = xsp.profile(levels="L")
        t0 = None
        with pytest.raises(KeyboardInterrupt):
            with prof:
                _bench.bench_add(n)
                t0 = time.perf_counter()
                signal.setitimer(signal.ITIMER_REAL, 0.005)
        took = time.perf_counter() - t0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert took > 0.005          # the alarm fired during stop, not in the block
    tr = prof.trace
    assert len(tr.spans(kind="op", name="aten::add")) == n
    assert tr.meta.get("interrupted") in (None, "KeyboardInterrupt during stop")
    assert _broken() == []
    assert _clean("ML") == REFERENCE["ML"]


def test_stop_called_back_from_inside_stop_is_refused():
    """A signal handler (here: the sync callout itself) that stops or steps the profile while
    its stop runs finds it stopping: refused (SessionStateError, kept as the callout's message);
    the outer stop completes once and the trace is whole."""
    calls = []

    def reenter():
        for fn in (s._stop, s._step):
            try:
                fn()
            except xsp.SessionStateError as exc:
                calls.append(str(exc))
        raise RuntimeError("after %d refusals" % len(calls))

    s = _core.Session()
    s._setup("M", "r", sync=reenter)
    with s:
        pass
    assert calls == ["this xsp.profile is not recording", "step() needs a running xsp.profile"]
    meta = s._data.meta()
    assert meta["sync_error"] == "RuntimeError: after 2 refusals" and meta["steps"] == 0
    assert s._state == "done" and _broken() == []
