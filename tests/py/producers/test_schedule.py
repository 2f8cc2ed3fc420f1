"""xsp.schedule: a profile that records a few steps of a long loop, as torch.profiler's schedule
does.  Steps are counted by step() calls; each cycle of warmup and active steps is one trace,
its warmup cut off (in C, csrc/core/trace.c), its step spans named by the global step number;
on_trace_ready runs between cycles; a KeyboardInterrupt anywhere leaves nothing installed."""
import collections
import os
import sys

import pytest
import torch

import xsp
import xsp._torch
from xsp import _core, cli
from helpers import check_tree
from test_interrupts import _Injector
import models

ORIG_CALL = torch.nn.Module.__call__
CLIPPED = 16


def _net():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.ones(3, 4)

    def iteration():
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    iteration()             # lazy initialisation out of the way
    return iteration


ITER = _net()


def _subtree(trace, root):
    """Multiset of (kind, name) of the spans under span root (not itself)."""
    out, todo = collections.Counter(), list(trace.children_of(root))
    while todo:
        i = int(todo.pop())
        out[(trace[i].kind, trace[i].name)] += 1
        todo.extend(trace.children_of(i))
    return out


def _reference_step():
    """What one steady iteration records: the subtree of an unscheduled profile's step."""
    with xsp.profile() as prof:
        for i in range(3):
            if i:
                prof.step()
            ITER()
    tr = prof.trace
    steps = tr.spans(kind="step")
    subs = [_subtree(tr, s.id) for s in steps]
    assert subs[1] == subs[2]
    return subs[1]


STEP = _reference_step()
STEP_SPANS = sum(STEP.values())


def _broken():
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


def _check_cycle(tr, names, cycle, first, schedule, partial=0, warmup=True, last_open=False):
    """A cycle's trace: exactly these step spans under the region, each recording exactly one
    iteration, nothing else (no wait or warmup span), and the schedule's meta.  The region began
    in the warmup, when there was one: clipped."""
    check_tree(tr)
    steps = tr.spans(kind="step")
    assert [s.name for s in steps] == names
    assert [s.parent for s in steps] == [0] * len(names)
    assert tr[0].kind == "region" and tr.roots() == [tr[0]]
    assert tr[0].flags == tr.flag_bits[0] == (CLIPPED if warmup else 0)
    # a last step ended by the block's end, not by a step() call, is flagged open at stop (1)
    assert [s.flags for s in steps] == [0] * (len(steps) - 1) + [1 if last_open else 0]
    assert all(f == 0 for i, f in enumerate(tr.flag_bits[1:], 1)
               if tr[i].kind != "step")
    for s in steps:
        assert _subtree(tr, s.id) == STEP, s.name
    assert len(tr) == 1 + len(names) * (1 + STEP_SPANS)            # exactly their spans
    assert [c.kind for c in tr[0].children] == ["step"] * len(names)
    m = tr.meta
    assert (m["schedule"], m["cycle"], m["first_step"], m["steps"], m["partial"]) == (
        schedule, cycle, first, len(names), partial)
    assert m["levels"] == "ML" and m["region"] == "xsp.profile"
    assert tr.counters["schedule.unlinked"] == 0
    assert tr.counters["forced_end"] == 0 and tr.counters["open_at_stop"] == 0
    assert tr[0].start_ns < steps[0].start_ns


# -- the schedule object -----------------------------------------------------------------------

def test_schedule_object():
    s = xsp.schedule(wait=1, warmup=2, active=3, repeat=4, skip_first=5)
    assert repr(s) == "xsp.schedule(wait=1, warmup=2, active=3, repeat=4, skip_first=5)"
    assert (s.wait, s.warmup, s.active, s.repeat, s.skip_first) == (1, 2, 3, 4, 5)
    assert s == xsp.schedule(wait=1, warmup=2, active=3, repeat=4, skip_first=5)
    assert hash(s) == hash(xsp.schedule(wait=1, warmup=2, active=3, repeat=4, skip_first=5))
    assert repr(xsp.schedule()) == ("xsp.schedule(wait=0, warmup=0, active=1, repeat=0, "
                                    "skip_first=0)")
    with pytest.raises(AttributeError, match="immutable"):
        s.active = 9
    with pytest.raises(TypeError):
        xsp.schedule(1, 1, 1)                      # keywords only
    for bad, msg in [({"active": 0}, "active must be an int of at least 1"),
                     ({"wait": -1}, "wait must be an int of at least 0"),
                     ({"warmup": 1.0}, "warmup must be an int"),
                     ({"repeat": True}, "repeat must be an int"),
                     ({"skip_first": 1 << 31}, "skip_first must be an int")]:
        with pytest.raises(ValueError, match=msg):
            xsp.schedule(**bad)
    with pytest.raises(TypeError, match="xsp.schedule"):
        xsp.profile(schedule=(1, 1, 1, 1, 1))
    with pytest.raises(TypeError, match="needs a schedule"):
        xsp.profile(on_trace_ready=print)
    with pytest.raises(TypeError, match="callable"):
        xsp.profile(schedule=s, on_trace_ready=3)


# -- what is recorded ----------------------------------------------------------------------------

SCHED = xsp.schedule(wait=1, warmup=1, active=2, repeat=2)
SCHED_TEXT = "wait=1 warmup=1 active=2 repeat=2 skip_first=0"


def test_two_cycles_exact():
    """wait=1 warmup=1 active=2 repeat=2 over 10 steps: cycle 0 is steps 2 and 3 (1 warmed up,
    0 waited), cycle 1 steps 6 and 7; steps 8 and 9 come after the last cycle."""
    states = []
    with xsp.profile(schedule=SCHED) as prof:
        for i in range(10):
            ITER()
            prof.step()
            states.append((prof._state, len(prof.traces)))
    assert states == [("recording", 0), ("recording", 0), ("recording", 0), ("waiting", 1),
                      ("recording", 1), ("recording", 1), ("recording", 1), ("waiting", 2),
                      ("waiting", 2), ("waiting", 2)]
    assert prof._state == "done" and prof._steps == 10
    assert len(prof.traces) == 2
    t0, t1 = prof.traces
    assert prof.trace is t1 and prof.traces[0] is t0          # each wrapped once
    _check_cycle(t0, ["step#2", "step#3"], 0, 2, SCHED_TEXT)
    _check_cycle(t1, ["step#6", "step#7"], 1, 6, SCHED_TEXT)
    assert t0[0].end_ns < t1[0].start_ns
    assert _broken() == []


def test_on_trace_ready_sees_each_cycle_once():
    seen = []

    def ready(p):
        assert p is prof
        assert p._state == "waiting"                          # between cycles: nothing records
        assert not _core.active() and not xsp._torch.attached()
        seen.append((p._steps, p.trace.meta["cycle"], [s.name for s in p.trace.spans(kind="step")]))

    with xsp.profile(schedule=SCHED, on_trace_ready=ready) as prof:
        for i in range(10):
            ITER()
            prof.step()
    assert seen == [(4, 0, ["step#2", "step#3"]), (8, 1, ["step#6", "step#7"])]
    assert prof.traces == []                                  # not kept: on_trace_ready has them
    _check_cycle(prof.trace, ["step#6", "step#7"], 1, 6, SCHED_TEXT)


def test_skip_first():
    sched = xsp.schedule(skip_first=3, wait=1, warmup=1, active=1, repeat=1)
    with xsp.profile(schedule=sched) as prof:
        for i in range(9):
            ITER()
            prof.step()
    assert len(prof.traces) == 1
    _check_cycle(prof.trace, ["step#5"], 0, 5,
                 "wait=1 warmup=1 active=1 repeat=1 skip_first=3")


def test_repeat_zero_runs_for_ever():
    sched = xsp.schedule(wait=1, warmup=1, active=2)
    with xsp.profile(schedule=sched) as prof:
        for i in range(12):
            ITER()
            prof.step()
    text = "wait=1 warmup=1 active=2 repeat=0 skip_first=0"
    assert len(prof.traces) == 3
    for k, tr in enumerate(prof.traces):
        _check_cycle(tr, ["step#%d" % (4 * k + 2), "step#%d" % (4 * k + 3)], k, 4 * k + 2, text)


def test_no_warmup_no_wait_every_step_a_cycle():
    """active=1 alone: every step is a cycle of its own; nothing is cut, the region is not
    clipped."""
    with xsp.profile(schedule=xsp.schedule(active=1, repeat=3)) as prof:
        for i in range(5):
            ITER()
            prof.step()
    assert [[s.name for s in t.spans(kind="step")] for t in prof.traces] == [
        ["step#0"], ["step#1"], ["step#2"]]
    for t in prof.traces:
        assert t.flag_bits[0] == 0 and t.meta["steps"] == 1 and t.meta["partial"] == 0
        assert _subtree(t, 1) == STEP and len(t) == 2 + STEP_SPANS


def test_partial_cycle_at_the_block_end():
    """The block ends in an active step: the cycle is delivered, partial when it holds fewer
    steps than active; the empty step open at the end is dropped as always."""
    sched = xsp.schedule(warmup=1, active=3, repeat=1)
    text = "wait=0 warmup=1 active=3 repeat=1 skip_first=0"
    seen = []
    with xsp.profile(schedule=sched, on_trace_ready=lambda p: seen.append(p.trace)) as prof:
        for i in range(3):
            ITER()
            prof.step()                                      # step 3 begins empty, then ends
    assert len(seen) == 1 and seen[0] is prof.trace
    _check_cycle(prof.trace, ["step#1", "step#2"], 0, 1, text, partial=1)
    # step() between iterations: the block's end closes the last active step, whole
    with xsp.profile(schedule=sched) as prof:
        for i in range(4):
            if i:
                prof.step()
            ITER()
    _check_cycle(prof.trace, ["step#1", "step#2", "step#3"], 0, 1, text, partial=0,
                 last_open=True)


def test_cycle_still_in_warmup_is_discarded():
    seen = []
    sched = xsp.schedule(wait=1, warmup=2, active=1)
    with xsp.profile(schedule=sched, on_trace_ready=seen.append) as prof:
        for i in range(3):
            ITER()
            prof.step()                                      # steps 1 and 2 warm up
        assert prof._state == "recording"
    assert seen == [] and prof.trace is None and prof.traces == []
    assert prof._state == "done" and _broken() == []
    # nor is a block that ends in an active step that recorded nothing
    with xsp.profile(schedule=xsp.schedule(warmup=1, active=2)) as prof:
        ITER()
        prof.step()
    assert prof.trace is None and _broken() == []


def test_xsp_step_drives_the_schedule():
    with xsp.profile(schedule=SCHED) as prof:
        for i in range(10):
            ITER()
            xsp.step()
    assert len(prof.traces) == 2
    _check_cycle(prof.traces[1], ["step#6", "step#7"], 1, 6, SCHED_TEXT)


def test_nothing_runs_while_waiting_and_a_second_profile_is_refused():
    with xsp.profile(schedule=xsp.schedule(wait=2, active=1, repeat=1)) as prof:
        for i in range(4):
            if i < 2:      # steps 0 and 1 wait: nothing is installed, the profile is active
                assert prof._state == "waiting"
                assert not _core.active() and not xsp._torch.attached()
                assert torch.nn.Module.__dict__["__call__"] is ORIG_CALL
                assert _core.active_session() is prof
                with pytest.raises(xsp.SessionActiveError, match="already recording"):
                    with xsp.profile():
                        pass
            ITER()
            prof.step()
        assert prof._state == "waiting"          # after its one cycle, still the active one
        with pytest.raises(xsp.SessionActiveError):
            xsp.profile().start()
    assert _broken() == []
    with xsp.profile() as p2:                    # and free again after the block
        ITER()
    assert len(p2.trace.spans(kind="model")) == 1
    _check_cycle(prof.trace, ["step#2"], 0, 2, "wait=2 warmup=0 active=1 repeat=1 skip_first=0",
                 warmup=False)


def test_stop_and_step_rules():
    prof = xsp.profile(schedule=SCHED)
    with pytest.raises(xsp.SessionStateError, match="needs a running"):
        prof.step()
    prof.start()
    for i in range(5):
        ITER()
        prof.step()
    tr = prof.stop()                                          # in cycle 1's warmup: discarded
    assert tr is prof.traces[0] and len(prof.traces) == 1
    assert prof._state == "done" and _broken() == []
    assert prof.stop() is tr                                  # stopped already
    with pytest.raises(xsp.SessionStateError, match="needs a running"):
        prof.step()
    with pytest.raises(xsp.SessionStateError, match="already run"):
        prof.start()


def test_fake_clock_exact(fake_clock):
    """warmup=1 active=1 with the fake clock (each reading +10 ns): start 1000, region 1010,
    step#0 1020; step() ends it (1070), reads the cut (1080), begins step#1 (1090); the step()
    that ends step#1 (1140) stops the cycle: region end 1150, stop 1160."""
    add, a = models.Add(), torch.ones(2)
    add(a, a)
    fake_clock(1000, 10)
    with xsp.profile(schedule=xsp.schedule(warmup=1, active=1, repeat=1)) as prof:
        add(a, a)              # 1030 model, 1040/1050 add, 1060 model end (warmup)
        prof.step()
        add(a, a)              # 1100 model, 1110/1120 add, 1130 model end
        prof.step()
        add(a, a)              # after the cycle: not recorded
    tr = prof.trace
    got = [(s.id, s.parent, s.kind, s.name, s.start_ns, s.end_ns, s.flags) for s in tr]
    assert got == [
        (0, None, "region", "xsp.profile", 1080, 1150, CLIPPED),
        (1, 0, "step", "step#1", 1090, 1140, 0),
        (2, 1, "model", "Add", 1100, 1130, 0),
        (3, 2, "op", "aten::add", 1110, 1120, 0),
    ]
    assert (tr.meta["start_ns"], tr.meta["stop_ns"]) == (1000, 1160)
    assert (tr.meta["first_step"], tr.meta["steps"], tr.meta["partial"]) == (1, 1, 0)


def test_backward_links_and_level_L_and_shapes():
    """fwd_op ids are remapped by the cut; without M there are no step spans, but the cut
    still removes the warmup; record_shapes attributes are matched before the cut."""
    sched = xsp.schedule(warmup=1, active=1, repeat=1)
    with xsp.profile(schedule=sched) as prof:
        for i in range(2):
            ITER()
            prof.step()
    tr = prof.trace
    bwd = [s for s in tr.spans(kind="backward") if "fwd_op" in s.attrs]
    assert bwd
    for s in bwd:
        fwd = tr[s.attrs["fwd_op"]]
        assert fwd.kind == "op" and fwd.attrs["seq"] == s.attrs["seq"]
    with xsp.profile(levels="L", schedule=sched) as prof:
        for i in range(2):
            ITER()
            prof.step()
    tl = prof.trace
    check_tree(tl)
    assert tl.spans(kind="step") == [] and tl.spans(kind="region") == []
    assert collections.Counter((s.kind, s.name) for s in tl
                               if s.kind != "module" and s.name != "Sequential") == \
        collections.Counter({k: v for k, v in STEP.items()
                             if k[0] != "module" and k != ("model", "Sequential")})
    assert (tl.meta["steps"], tl.meta["partial"], tl.meta["first_step"]) == (1, 0, 1)
    with xsp.profile(schedule=sched, record_shapes=True) as prof:
        for i in range(2):
            ITER()
            prof.step()
    ts = prof.trace
    assert "attrs_unmatched" not in ts.meta
    assert [s.attrs.get("shapes") for s in ts.spans(kind="model")] == ["[3, 4]"]
    assert [s.attrs.get("shapes") for s in ts.spans(kind="module")] == ["[3, 4]", "[3, 8]",
                                                                        "[3, 8]"]


def test_file_round_trip_keeps_flags_and_meta(tmp_path):
    with xsp.profile(schedule=SCHED) as prof:
        for i in range(4):
            ITER()
            prof.step()
    path = str(tmp_path / "c.xsp")
    xsp.save(prof.trace, path)
    back = xsp.load(path)
    assert back == prof.trace
    assert back.flag_bits[0] == CLIPPED and back.meta["cycle"] == 0


# -- on_trace_ready raising, interrupts ------------------------------------------------------------

def test_on_trace_ready_raising_an_exception():
    """The callout's exception is raised from step() once the next cycle has started; the
    profile goes on."""
    calls = []

    def ready(p):
        calls.append(p.trace.meta["cycle"])
        if len(calls) == 1:
            raise ValueError("disk full")

    raised = []
    with xsp.profile(schedule=xsp.schedule(active=1, repeat=3), on_trace_ready=ready) as prof:
        for i in range(4):
            ITER()
            try:
                prof.step()
            except ValueError as exc:
                raised.append((i, str(exc), prof._state, _core.active()))
    assert raised == [(0, "disk full", "recording", True)]
    assert calls == [0, 1, 2]
    assert [s.name for s in prof.trace.spans(kind="step")] == ["step#2"]
    assert _broken() == []


def test_on_trace_ready_interrupted_and_at_the_block_end():
    calls = []

    def ready(p):
        calls.append(p.trace.meta["cycle"])
        if len(calls) == 2:
            raise KeyboardInterrupt("Ctrl-C in on_trace_ready")

    prof = xsp.profile(schedule=xsp.schedule(warmup=1, active=1), on_trace_ready=ready)
    with pytest.raises(KeyboardInterrupt, match="Ctrl-C in on_trace_ready"):
        with prof:
            for i in range(10):
                ITER()
                prof.step()
    # raised from the 4th step(), after cycle 2 started (step 4, a warmup: discarded at exit)
    assert calls == [0, 1] and prof._steps == 4 and prof._state == "done"
    assert [s.name for s in prof.trace.spans(kind="step")] == ["step#3"]
    assert prof.trace.meta.get("interrupted") is None   # the cycle itself ended normally
    assert _broken() == []

    def fails(p):
        raise RuntimeError("at the end")

    prof = xsp.profile(schedule=xsp.schedule(active=3), on_trace_ready=fails)
    with pytest.raises(RuntimeError, match="at the end"):
        with prof:
            ITER()
    assert prof.trace.meta["partial"] == 1 and _broken() == []
    with xsp.profile() as p2:
        ITER()
    assert p2.trace is not None and _broken() == []


def test_step_or_stop_from_on_trace_ready_is_refused():
    msgs = []

    def ready(p):
        for fn in (p.step, p.stop, xsp.step):
            try:
                fn()
            except xsp.SessionStateError as exc:
                msgs.append(str(exc))

    with xsp.profile(schedule=xsp.schedule(active=1, repeat=1), on_trace_ready=ready) as prof:
        ITER()
        prof.step()
        ITER()
    assert len(msgs) == 3 and all("changing cycles" in m for m in msgs)
    assert prof._steps == 1 and len(prof.trace.spans(kind="step")) == 1


def test_block_interrupted_while_recording_keeps_the_partial_cycle():
    prof = xsp.profile(schedule=xsp.schedule(warmup=1, active=3))
    with pytest.raises(KeyboardInterrupt):
        with prof:
            for i in range(3):
                ITER()
                prof.step()
            raise KeyboardInterrupt
    tr = prof.trace
    assert tr.meta["interrupted"] == "KeyboardInterrupt in the block"
    assert [s.name for s in tr.spans(kind="step")] == ["step#1", "step#2"]
    assert tr.meta["partial"] == 1 and _broken() == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork")
def test_fork_inside_a_scheduled_block(tmp_path):
    """A child forked while the schedule waits, and one forked while a cycle records: both
    copies are inert (step() does nothing, no cycle starts, no trace), the child may profile
    on its own; the parent's cycles are whole."""
    import subprocess
    import textwrap
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    script = tmp_path / "f.py"
    script.write_text(textwrap.dedent("""
        import os, warnings, torch, xsp
        m = torch.nn.Sequential(torch.nn.Linear(2, 2))
        x = torch.ones(1, 2)
        def child(prof):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for i in range(4):
                    m(x)
                    prof.step()
                    xsp.step()
                prof.stop()
                ok = (prof._state == "forked" and prof.traces == [] and
                      xsp._core.active_session() is None and not xsp._core.active())
                with xsp.profile() as again:
                    m(x)
            os._exit(0 if ok and len(again.trace.spans(kind="model")) == 1 else 5)
        with xsp.profile(schedule=xsp.schedule(wait=1, active=1, repeat=2)) as prof:
            for i in range(4):
                m(x)
                if i in (0, 1):      # 0: waiting, 1: recording
                    pid = os.fork()
                    if pid == 0:
                        child(prof)
                    print(i, prof._state, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
                prof.step()
        print([[s.name for s in t.spans(kind="step")] for t in prof.traces])
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=root), timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["0 waiting 0", "1 recording 0", "[['step#1'], ['step#3']]"]


MODEL = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
X = torch.ones(2, 4)


def _clean():
    with xsp.profile() as prof:
        MODEL(X)
    return [(s.level, s.kind, s.name, s.parent) for s in prof.trace]


REFERENCE = _clean()


def _scheduled(inj):
    """A scheduled profile as a user writes it, with on_trace_ready; every line traced."""
    holder = {"ready": 0}

    def ready(p):
        holder["ready"] += 1
        holder["last"] = p.trace

    sys.settrace(inj)
    try:
        holder["prof"] = xsp.profile(
            schedule=xsp.schedule(wait=1, warmup=1, active=1, repeat=2), on_trace_ready=ready)
        with holder["prof"]:
            for i in range(6):
                MODEL(X)
                xsp.step()
        outcome = "completed"
    except KeyboardInterrupt:
        outcome = "interrupted"
    finally:
        sys.settrace(None)
    return holder, outcome


def test_keyboard_interrupt_at_every_executed_line():
    """Every line event from making a scheduled profile to the end of its block: the steps
    that start and stop cycles, on_trace_ready, xsp.step().  Afterwards nothing is installed,
    every trace delivered is whole, and the next profile is exactly right."""
    # one untraced-count run first: code that runs once per process (a warning's first
    # report, a lazy import) must not be counted in the total the later runs are cut at
    _scheduled(_Injector(0))
    total = _Injector(0)
    holder, outcome = _scheduled(total)
    assert outcome == "completed" and holder["ready"] == 2 and total.n > 50
    delivered = collections.Counter()
    for at in range(1, total.n + 1):
        inj = _Injector(at)
        holder, outcome = _scheduled(inj)
        what = "KeyboardInterrupt at %s (event %d)" % (inj.fired, at)
        assert outcome == "interrupted", what
        assert _broken() == [], "%s: %s" % (what, _broken())
        prof = holder.get("prof")
        if prof is not None:
            assert prof._state in ("new", "done"), what
            for tr in [holder.get("last"), prof.trace]:
                if tr is not None:
                    check_tree(tr)
                    assert tr.meta["levels"] == "ML" and "cycle" in tr.meta, what
            delivered[holder["ready"]] += 1
        assert _clean() == REFERENCE, "%s: the next profile differs" % what
    assert delivered[0] and delivered[1] and delivered[2], delivered


# -- xsp run --schedule ------------------------------------------------------------------------

SCRIPT = """
import torch, xsp
m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
x = torch.ones(2, 4)
for i in range(8):
    m(x).sum().backward()
    xsp.step()
"""


def test_cli_schedule_files(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.py").write_text(SCRIPT)
    assert cli.main(["run", "--schedule", "wait=1,warmup=1,active=2,repeat=2", "--chrome",
                     "t.json", "job.py"]) == 0
    err = capsys.readouterr().err
    assert ("trace: job.cycle0.xsp, job.cycle1.xsp; chrome: t.cycle0.json, t.cycle1.json"
            in err)
    assert sorted(os.listdir(tmp_path)) == ["job.cycle0.xsp", "job.cycle1.xsp", "job.py",
                                            "t.cycle0.json", "t.cycle1.json"]
    for k, first in ((0, 2), (1, 6)):
        tr = xsp.load(str(tmp_path / ("job.cycle%d.xsp" % k)))
        assert [s.name for s in tr.spans(kind="step")] == ["step#%d" % first,
                                                            "step#%d" % (first + 1)]
        assert tr.meta["cycle"] == k and tr.meta["region"] == "job.py"
    # a single cycle (repeat=1): the plain name
    assert cli.main(["run", "-q", "-o", "one.xsp", "--schedule", "warmup=1,active=3,repeat=1",
                     "job.py"]) == 0
    tr = xsp.load(str(tmp_path / "one.xsp"))
    assert [s.name for s in tr.spans(kind="step")] == ["step#1", "step#2", "step#3"]
    assert not os.path.exists(tmp_path / "one.cycle0.xsp")
    capsys.readouterr()
    # nothing recorded: said so, nothing written
    assert cli.main(["run", "-q", "-o", "none.xsp", "--schedule", "skip_first=50",
                     "job.py"]) == 0
    assert "recorded an active step: no trace written" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "none.xsp")


@pytest.mark.parametrize("spec, message", [
    ("wat=1", "--schedule: unknown key 'wat' in 'wat=1' (keys: wait, warmup, active, repeat, "
              "skip_first)"),
    ("active=0", "--schedule: active must be an int of at least 1 (below 2**31), not 0"),
    ("wait=-1", "--schedule: wait=-1: the value must be a whole number (0, 1, 2, ...)"),
    ("active", "--schedule: active=: the value must be a whole number (0, 1, 2, ...)"),
    ("wait=1,wait=2", "--schedule: wait given twice"),
    (",", "--schedule: give key=value pairs, e.g. wait=1,warmup=1,active=3,repeat=1"),
])
def test_cli_schedule_errors(spec, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.py").write_text(SCRIPT)
    assert cli.main(["run", "-q", "--schedule", spec, "job.py"]) == 1
    assert capsys.readouterr().err == "xsp: error: %s\n" % message
    assert os.listdir(tmp_path) == ["job.py"]
