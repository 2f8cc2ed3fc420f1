"""Asynchronous exceptions at any moment of a profile: KeyboardInterrupt injected at every line
xsp executes while making, starting and stopping a profile (sys.settrace), and delivered by a
signal raised at the n-th checkpoint of 2,000 short profiles (every one of them once, then
random ones; counted by the core's fake clock, not by time), at levels M, L and ML.

The guarantee (docs/design.md, "Interrupts"): afterwards no callback, wrapper or session stays
installed, the next profile records exactly what a clean one does, and the trace is kept
whenever recording had started (meta "interrupted" says so) or the exception says it was lost.
"""
import collections
import contextlib
import gc
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
    """One traced profile of MODEL(X), interrupted at line event `at` (0: never).  The
    collector is off while it runs: a finalizer of an earlier test's garbage, run by a
    collection inside one run and not the next, would add line events to one count only, and
    the runs must see the same lines."""
    inj = _Injector(at)
    holder = {}
    gc_was = gc.isenabled()
    gc.disable()
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
        if gc_was:
            gc.enable()
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
    s._setup(_core.SessionOptions("M", "r", sync=interrupted))
    with pytest.raises(KeyboardInterrupt, match="second Ctrl-C"):
        with s:
            pass
    assert _broken() == []
    meta = s._data.meta()
    assert meta["interrupted"] == "KeyboardInterrupt during stop" and meta["region"] == "r"
    s = _core.Session()
    s._setup(_core.SessionOptions("M", "r", sync=failing))
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
#
# A signal at the n-th checkpoint, not after a delay.  The core's fake clock numbers its
# checkpoints (every clock reading: the core's start, each span's begin and end, stop), and
# _core.fake_clock_signal(at, signum) makes the reading that returns `at` raise(3) the signal
# from inside that C code (the torch callback of an op, the module wrapper, start, stop with
# the GIL released).  CPython's C handler only marks it pending; the Python handler runs at the
# next bytecode boundary, wherever that is, exactly as for a SIGINT from the terminal.  Which
# moment is hit no longer depends on the machine's speed, so every outcome is known before the
# run and counted exactly.

STEP = 10          # ns per fake clock reading


def _handler(signum, frame):
    raise KeyboardInterrupt("SIGALRM")


@contextlib.contextmanager
def _alarm_handler():
    """SIGALRM's handler raises KeyboardInterrupt, as SIGINT's does; the fake clock on, the
    collector off (a finalizer it ran would take the pending KeyboardInterrupt and report it
    as unraisable: CPython's doing, not xsp's, and it would make the counts below
    nondeterministic); all restored afterwards."""
    assert threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGALRM, _handler)
    gc_was = gc.isenabled()
    gc.disable()
    _core.set_fake_clock(10 ** 9, STEP)
    try:
        yield
    finally:
        _core.set_fake_clock(0, 0)            # disarms the signal too
        signal.signal(signal.SIGALRM, old)
        if gc_was:
            gc.enable()


def _settle():
    """A Python call: its first instruction runs a signal that is still pending."""


def _at(n):
    """Arms SIGALRM at the n-th clock reading from now (n >= 1)."""
    _core.fake_clock_signal(_core.now() + n * STEP, signal.SIGALRM)


def _checkpoints(lv):
    """A clean profile's clock readings under the fake clock, counted from a reading the caller
    takes just before making the profile (reading 0) to the one just after its block (N + 1):
    (N, the reading of the first span's begin, the reading after the last span's end)."""
    a = _core.now()
    with xsp.profile(levels=lv) as prof:
        MODEL(X)
    b = _core.now()
    tr = prof.trace
    assert _spans(tr) == REFERENCE[lv]
    return ((b - a) // STEP - 1, int(tr.start_ns.min() - a) // STEP,
            int(tr.end_ns.max() - a) // STEP + 1)


def _one_at(lv, n):
    """One short profile as a user writes it, with SIGALRM at checkpoint n: 0 is the caller's
    reading before the profile is made, N + 1 the caller's reading after its block (the
    profile is complete), beyond that nothing fires.  Returns (outcome, the profile or None)."""
    holder = {}
    try:
        _at(n + 1)                  # _at's own reading is not one of them
        try:
            _core.now()             # checkpoint 0
            holder["prof"] = xsp.profile(levels=lv)
            with holder["prof"]:
                MODEL(X)
            _core.now()             # checkpoint N + 1
            _settle()
        finally:
            _core.fake_clock_signal(0, signal.SIGALRM)
        return "completed", holder.get("prof")
    except KeyboardInterrupt as exc:
        assert str(exc) == "SIGALRM"
        return "interrupted", holder.get("prof")


def test_keyboard_interrupt_at_random_moments_of_2000_profiles():
    """A real signal (SIGALRM, whose handler raises KeyboardInterrupt as SIGINT's does) raised
    at a checkpoint of each of 2,000 short profiles (levels M, L and ML in turn), delivered
    wherever CPython next checks for signals.  The moments are counted by the core's fake
    clock, not by the wall clock (which made this test depend on the machine's load): first
    every checkpoint of each level once, by construction before the profile is made, in
    __enter__ before recording starts, inside recording (ops' and modules' begins and ends in
    the torch callback and the module wrapper), during stop (after the last span's end: the
    core's stop, GIL released) and after the block; then random ones (fixed seed).  Unlike the
    line-by-line test above, the interrupt is raised from inside C code, as a Ctrl-C is.

    Every outcome is known in advance: interrupted up to checkpoint N + 1, completed beyond;
    the trace kept whenever recording had started, whole when the signal came during stop or
    after the block (stop runs no Python at these levels: CPython delivers it after __exit__),
    cut short and marked "KeyboardInterrupt in the block" or whole inside recording; nothing
    left installed, and the next profile exact."""
    rng = random.Random(1234)
    outcomes = collections.Counter()
    expected = collections.Counter()
    with _alarm_handler():
        points = {lv: _checkpoints(lv) for lv in LEVELS}
        for lv, (n, r0, r1) in points.items():
            assert 1 <= r0 < r1 <= n, (lv, points[lv])
            assert _checkpoints(lv) == points[lv]           # the same every time
        plan = [(lv, k) for lv in LEVELS for k in range(points[lv][0] + 3)]
        plan += [(LEVELS[i % 3], rng.randint(0, points[LEVELS[i % 3]][0] + 2))
                 for i in range(len(plan), 2000)]
        for i, (lv, k) in enumerate(plan):
            n, r0, r1 = points[lv]
            phase = ("before the profile" if k == 0 else "before recording" if k < r0 else
                     "recording" if k < r1 else "stop" if k <= n else
                     "after the block" if k == n + 1 else "no signal")
            expected["completed" if phase == "no signal" else "interrupted"] += 1
            outcome, prof = _one_at(lv, k)
            what = "profile %d (%s, signal at checkpoint %d of %d: %s)" % (i, lv, k, n, phase)
            outcomes[outcome] += 1
            assert outcome == ("completed" if phase == "no signal" else "interrupted"), what
            _check_after(prof, lv, what)
            tr = prof.trace if prof is not None else None
            if phase == "before the profile":
                assert tr is None, what
            elif phase in ("stop", "after the block", "no signal"):
                assert _spans(tr) == REFERENCE[lv] and "interrupted" not in tr.meta, what
            elif phase == "recording":
                spans = _spans(tr)
                if "interrupted" in tr.meta:
                    outcomes["cut short in the block"] += 1
                    assert tr.meta["interrupted"] == "KeyboardInterrupt in the block", what
                    assert spans == REFERENCE[lv][:len(spans)], what
                else:
                    assert spans == REFERENCE[lv], what
    assert outcomes["interrupted"] == expected["interrupted"] > 1000
    assert outcomes["completed"] == expected["completed"] > 50
    assert outcomes["cut short in the block"] > 100


def test_second_ctrl_c_during_a_long_stop():
    """A Ctrl-C that arrives while a large trace is merged (stop runs without the GIL): stop
    finishes, then the KeyboardInterrupt is raised, and the trace is whole.  300,000 ops from
    a C++ loop (xsp._bench, dev builds); the signal is raised by stop's own clock reading (the
    fake clock's checkpoint, counted ahead from two small runs: no timer that a fast merge
    could outlast), and its replay and merge then run with it pending."""
    _bench = pytest.importorskip("xsp._bench")
    n = 300_000

    def readings(k):
        a = _core.now()
        with xsp.profile(levels="L") as p:
            _bench.bench_add(k)
        return (_core.now() - a) // STEP - 1, int(p.trace.end_ns.max() - a) // STEP

    with _alarm_handler():
        (r10, end10), (r20, end20) = readings(10), readings(20)
        per_op = (r20 - r10) // 10                   # an op's begin and end
        assert per_op == 2 and r10 - 10 * per_op == r20 - 20 * per_op
        # the last add ends, then the core stops, then the stop's last reading (the end of
        # the stop's time, meta overhead.stop_ns)
        assert r10 - end10 == r20 - end20 == 2
        last = r10 - 1 + (n - 10) * per_op           # the core's stop reading
        a = _core.now()
        _core.fake_clock_signal(a + last * STEP, signal.SIGALRM)
        prof = xsp.profile(levels="L")
        with pytest.raises(KeyboardInterrupt, match="SIGALRM"):
            with prof:
                _bench.bench_add(n)
        # the prediction held: the last add ended one reading before the armed one
        assert prof.trace.end_ns.max() == a + (last - 1) * STEP
    tr = prof.trace
    assert len(tr.spans(kind="op", name="aten::add")) == n
    assert "interrupted" not in tr.meta        # delivered after __exit__, as designed
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
    s._setup(_core.SessionOptions("M", "r", sync=reenter))
    with s:
        pass
    assert calls == ["this xsp.profile is not recording", "step() needs a running xsp.profile"]
    meta = s._data.meta()
    assert meta["sync_error"] == "RuntimeError: after 2 refusals" and meta["steps"] == 0
    assert s._state == "done" and _broken() == []
