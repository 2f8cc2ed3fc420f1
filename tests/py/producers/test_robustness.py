"""Errors inside profiled code, overlapping sessions, coexistence with torch.profiler, nesting
limits."""
import collections
import os

import pytest
import torch
import torch.nn.modules.module as nn_module
from torch.profiler import ProfilerActivity, record_function

import xsp
import xsp._torch
from xsp import _core
from helpers import check_tree, main_tid
import models

HOOK_DICTS = ("_global_forward_pre_hooks", "_global_forward_hooks",
              "_global_forward_hooks_always_called")


def _hooks_snapshot():
    return {d: dict(getattr(nn_module, d)) for d in HOOK_DICTS}


def _xsp_wrapper_installed():
    """Whether nn.Module.__call__ is xsp's session wrapper (xsp.producers.profiler._ModuleCalls)."""
    return torch.nn.Module.__dict__["__call__"].__qualname__ == "Module.__call__ (xsp)"


def _torch_ops(fn):
    with torch.profiler.profile(activities=[ProfilerActivity.CPU]) as p:
        fn()
    return collections.Counter(e.name() for e in p.profiler.kineto_results.events()
                               if e.name().startswith("aten::"))


def test_module_wrapper_is_installed_only_while_recording():
    """xsp records module calls by wrapping nn.Module.__call__ for the session (no global
    hooks, which would send every module call down torch's slow path); afterwards the original
    is back and no global hook was ever added."""
    before = _hooks_snapshot()
    orig = torch.nn.Module.__dict__["__call__"]
    with xsp.profile():
        assert _xsp_wrapper_installed()
        assert xsp._torch.attached() and _core.active()
        assert _hooks_snapshot() == before
    assert torch.nn.Module.__dict__["__call__"] is orig
    assert _hooks_snapshot() == before
    assert not xsp._torch.attached() and not _core.active()


@pytest.mark.parametrize("exc", [KeyError("x"), KeyboardInterrupt()])
def test_exception_in_the_with_block(exc):
    before = _hooks_snapshot()
    a = torch.ones(2)
    add = models.Add()
    with pytest.raises(type(exc)):
        with xsp.profile() as prof:
            add(a, a)
            raise exc
    assert not _core.active()
    assert not xsp._torch.attached()
    assert not _xsp_wrapper_installed() and _hooks_snapshot() == before
    trace = prof.trace
    check_tree(trace)
    assert [(s.kind, s.name, s.parent, s.flags) for s in trace] == [
        ("region", "xsp.profile", None, 0), ("model", "Add", 0, 0), ("op", "aten::add", 1, 0)]
    # the profile is finished: recording nothing more, stop() just returns the trace
    torch.sub(a, a)
    assert prof.stop() is trace and len(trace) == 3


def test_exception_inside_a_forward_closes_the_module_spans(fake_clock):
    """The always_call forward hook ends module spans whose forward raised, so later spans nest
    under the right parents.  Fake clock: every reading adds 10 ns."""
    a = torch.ones(2)
    seq = torch.nn.Sequential(models.Raises())
    add = models.Add()
    add(a, a)
    fake_clock(1000, 10)
    with xsp.profile() as prof:            # start 1000, region 1010, step#0 1020
        with pytest.raises(RuntimeError, match="boom"):
            seq(a)                         # model 1030, module 1040, neg 1050-1060,
        add(a, a)                          # module end 1070, model end 1080; then 1090-1120
    # teardown: step#0 end 1130 (elided), region end 1140, stop 1150
    trace = prof.trace
    check_tree(trace)
    assert [(s.id, s.parent, s.kind, s.name, s.start_ns, s.end_ns, s.flags) for s in trace] == [
        (0, None, "region", "xsp.profile", 1010, 1140, 0),
        (1, 0, "model", "Sequential", 1030, 1080, 0),
        (2, 1, "module", "0", 1040, 1070, 0),
        (3, 2, "op", "aten::neg", 1050, 1060, 0),
        (4, 0, "model", "Add", 1090, 1120, 0),
        (5, 4, "op", "aten::add", 1100, 1110, 0),
    ]
    assert trace.counters == {"lost.cap": 0, "lost.depth": 0, "unmatched_end": 0,
                              "forced_end": 0, "open_at_stop": 0,
                              "fwd_op.skipped": 0}
    assert trace.meta["hook_errors"] == 0


def test_exception_from_a_forward_out_of_the_with_block():
    a = torch.ones(2)
    seq = torch.nn.Sequential(torch.nn.Identity(), models.Raises())
    with pytest.raises(RuntimeError, match="boom"):
        with xsp.profile() as prof:
            seq(a)
    trace = prof.trace
    check_tree(trace)
    assert [(s.kind, s.name, s.parent, s.flags) for s in trace] == [
        ("region", "xsp.profile", None, 0), ("model", "Sequential", 0, 0),
        ("module", "0", 1, 0), ("module", "1", 1, 0), ("op", "aten::neg", 3, 0)]
    assert not _core.active() and not _xsp_wrapper_installed()


def test_second_profile_is_refused_and_the_first_goes_on():
    a = torch.ones(2)
    with xsp.profile(name="first") as first:
        torch.add(a, a)
        second = xsp.profile(name="second")
        with pytest.raises(xsp.SessionActiveError) as ei:
            with second:
                pass
        msg = str(ei.value)
        assert "already recording" in msg
        assert os.path.basename(__file__) in msg          # where the first one started
        with pytest.raises(xsp.ProfilerError):
            second.start()
        assert second.trace is None
        assert _core.active() and xsp._torch.attached()
        torch.mul(a, a)
    trace = first.trace
    assert [(s.kind, s.name, s.parent) for s in trace] == [
        ("region", "first", None), ("op", "aten::add", 0), ("op", "aten::mul", 0)]
    assert not _core.active() and not xsp._torch.attached()
    with pytest.raises(xsp.SessionStateError, match="not recording"):
        second.stop()


def test_profiles_started_on_several_threads_at_once():
    """Eight threads start a profile at the same moment: exactly one records, the others get
    SessionActiveError with nothing installed; the winner's trace holds its own op only."""
    import threading
    barrier = threading.Barrier(8)
    results = [None] * 8
    a = torch.ones(2)

    def run(k):
        prof = xsp.profile(levels="L", name="t%d" % k)
        barrier.wait()
        try:
            with prof:
                torch.add(a, a)
                barrier_done.wait()
            results[k] = ("ok", [s.name for s in prof.trace])
        except xsp.SessionActiveError as exc:
            results[k] = ("refused", str(exc))
            barrier_done.wait()

    barrier_done = threading.Barrier(8)
    threads = [threading.Thread(target=run, args=(k,)) for k in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(r[0] for r in results) == ["ok"] + ["refused"] * 7
    assert [r[1] for r in results if r[0] == "ok"] == [["aten::add"]]
    assert all("already recording" in r[1] for r in results if r[0] == "refused")
    assert not _core.active() and not xsp._torch.attached()
    assert _core.active_session() is None


def test_a_profile_runs_once():
    prof = xsp.profile()
    with prof:
        pass
    with pytest.raises(xsp.SessionStateError, match="already run"):
        prof.start()
    assert prof.stop() is prof.trace
    assert repr(prof) == "<xsp.profile levels=ML done>"
    assert repr(xsp.profile("L")) == "<xsp.profile levels=L new>"


def test_nothing_is_recorded_after_the_block():
    a = torch.ones(2)
    with xsp.profile() as p1:
        torch.add(a, a)
    assert not _core.active()
    for _ in range(10):
        torch.sub(a, a)                    # after the block: recorded nowhere
    models.Add()(a, a)
    with xsp.profile() as p2:
        torch.mul(a, a)
    assert [s.name for s in p1.trace] == ["xsp.profile", "aten::add"]
    assert [s.name for s in p2.trace] == ["xsp.profile", "aten::mul"]
    assert p2.trace.counters["unmatched_end"] == 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="name"):
        xsp.profile(name="")
    with pytest.raises(ValueError, match="max_memory"):
        xsp.profile(max_memory=1000)
    with pytest.raises(ValueError, match="max_memory"):
        xsp.profile(max_memory=float(1 << 20))


def test_torch_profiler_works_after_xsp():
    a = torch.ones(2)
    with xsp.profile():
        torch.add(a, a)
    assert _torch_ops(lambda: (torch.add(a, a), torch.mul(a, a))) == collections.Counter(
        {"aten::add": 1, "aten::mul": 1})


def test_xsp_inside_torch_profiler_both_record():
    a = torch.ones(2)
    with torch.profiler.profile(activities=[ProfilerActivity.CPU]) as tp:
        torch.sub(a, a)
        with xsp.profile() as prof:
            torch.add(a, a)
            with record_function("scope"):
                torch.mul(a, a)
        torch.div(a, a)                    # after xsp stopped: torch.profiler still records
    names = [e.name() for e in tp.profiler.kineto_results.events()]
    assert names == ["aten::sub", "aten::add", "scope", "aten::mul", "aten::div"]
    assert [(s.kind, s.name, s.parent) for s in prof.trace] == [
        ("region", "xsp.profile", None), ("op", "aten::add", 0), ("scope", "scope", 0),
        ("op", "aten::mul", 2)]


def test_torch_profiler_inside_xsp_both_record():
    a = torch.ones(2)
    with xsp.profile() as prof:
        torch.sub(a, a)
        with torch.profiler.profile(activities=[ProfilerActivity.CPU]) as tp:
            torch.add(a, a)
        torch.mul(a, a)
    assert [e.name() for e in tp.profiler.kineto_results.events()] == ["aten::add"]
    # torch.profiler's own start/stop may run ops; the user's three are all there, in order
    user = [s.name for s in prof.trace if s.name in ("aten::sub", "aten::add", "aten::mul")]
    assert user == ["aten::sub", "aten::add", "aten::mul"]
    check_tree(prof.trace)


def test_other_global_module_hooks_survive():
    calls = []
    h = nn_module.register_module_forward_hook(lambda m, i, o: calls.append(type(m).__name__))
    try:
        a = torch.ones(2)
        add = models.Add()
        with xsp.profile():
            add(a, a)
        add(a, a)
        assert calls == ["Add", "Add"]
    finally:
        h.remove()


def test_nesting_deeper_than_max_depth_is_counted():
    """Spans nested deeper than MAX_DEPTH (1024 open spans per thread) are counted in
    lost.depth and the rest of the tree stays right."""
    depth = _core.MAX_DEPTH
    assert depth == 1024
    extra = 6
    a = torch.ones(2)
    scopes = []
    with xsp.profile() as prof:
        for i in range(depth + extra):     # region and step#0 are open too
            scopes.append(record_function("s%d" % i))
            scopes[-1].__enter__()
        torch.add(a, a)                    # lost: too deep
        for s in reversed(scopes):
            s.__exit__(None, None, None)
        torch.mul(a, a)                    # back at depth 2: recorded under the region
    trace = prof.trace
    check_tree(trace)
    kept = depth - 2
    assert trace.counters["lost.depth"] == extra + 2 + 1
    assert trace.lost == extra + 3
    scope_spans = trace.spans(kind="scope")
    assert [s.name for s in scope_spans] == ["s%d" % i for i in range(kept)]
    for i, s in enumerate(scope_spans):
        assert s.parent == (0 if i == 0 else scope_spans[i - 1].id)
        assert s.flags == 0
    assert [s.name for s in trace.spans(kind="op")] == ["aten::mul"]
    assert trace.spans(kind="op")[0].parent == 0
    assert trace.counters["forced_end"] == 0 and trace.counters["unmatched_end"] == 0
    assert trace[0].thread == main_tid()


def test_scope_left_open_at_stop_without_region(fake_clock):
    """With level L only there is no region to close it: a scope still open when recording
    stops ends at the stop time, flagged open-at-stop (1).  Fake clock, step 1: start 100,
    add 101/102, scope 103, mul 104/105, stop 106."""
    a = torch.ones(2)
    torch.add(a, a)
    rf = record_function("open")
    fake_clock(100, 1)
    with xsp.profile(levels="L") as prof:
        torch.add(a, a)
        rf.__enter__()
        torch.mul(a, a)
    fake_clock(0, 0)
    rf.__exit__(None, None, None)          # after stop: records nothing
    trace = prof.trace
    check_tree(trace)
    assert [(s.kind, s.name, s.start_ns, s.end_ns, s.flags, s.parent) for s in trace] == [
        ("op", "aten::add", 101, 102, 0, None), ("scope", "open", 103, 106, 1, None),
        ("op", "aten::mul", 104, 105, 0, 1)]
    assert trace.meta["stop_ns"] == 106
    assert trace.counters["open_at_stop"] == 1 and trace.counters["forced_end"] == 0
    assert trace.tree().splitlines()[1] == "open [scope] 3 ns (self 2 ns) {open at stop}"


def test_scope_left_open_is_force_ended_by_the_region(fake_clock):
    """With level M the teardown ends step#0 and the region while the scope is still open: the
    scope is ended with them, flagged forced-end (2), and stays inside the region.  Fake clock,
    step 1: start 100, region 101, step#0 102, add 103/104, scope 105, mul 106/107, step#0 end
    108 (which force-ends the scope), region end 109, stop 110."""
    a = torch.ones(2)
    torch.add(a, a)
    rf = record_function("open")
    fake_clock(100, 1)
    with xsp.profile() as prof:
        torch.add(a, a)
        rf.__enter__()
        torch.mul(a, a)
    fake_clock(0, 0)
    rf.__exit__(None, None, None)
    trace = prof.trace
    check_tree(trace)
    assert [(s.kind, s.name, s.start_ns, s.end_ns, s.flags, s.parent) for s in trace] == [
        ("region", "xsp.profile", 101, 109, 0, None), ("op", "aten::add", 103, 104, 0, 0),
        ("scope", "open", 105, 108, 2, 0), ("op", "aten::mul", 106, 107, 0, 2)]
    assert trace.counters["forced_end"] == 1 and trace.counters["open_at_stop"] == 0
    assert trace.tree().splitlines()[2] == "└─ open [scope] 3 ns (self 2 ns) {forced end}"


def test_keyboard_interrupt_inside_a_forward_keeps_later_nesting_right():
    """Regression guard (limitation of forward hooks: torch runs always_call hooks only for
    Exception, so a KeyboardInterrupt escaping a forward and caught inside the block left the
    module stack stale and later model calls nested under dead spans).  The __call__ wrapper
    ends spans in a finally clause."""

    class Interrupting(torch.nn.Module):
        def forward(self, x):
            raise KeyboardInterrupt

    outer = torch.nn.Sequential(torch.nn.ReLU(), Interrupting())
    other = torch.nn.ReLU()
    x = torch.ones(2)
    with xsp.profile() as prof:
        try:
            outer(x)
        except KeyboardInterrupt:
            pass
        other(x)
    trace = prof.trace
    check_tree(trace)
    models_ = trace.spans(kind="model")
    assert [(s.name, s.parent) for s in models_] == [("Sequential", 0)]
    # a lone ReLU is a layer under the region, not a model (docs/api.md, "Models and layers")
    assert [(s.name, s.parent_span.name) for s in trace.spans(kind="module")] == [
        ("0", "Sequential"), ("1", "Sequential"), ("ReLU", "xsp.profile")]
    assert trace.counters["forced_end"] == 0 and trace.counters["open_at_stop"] == 0


def test_wrapper_left_inert_when_another_tool_wrapped_call_after_us():
    """If another tool replaces nn.Module.__call__ during the session (wrapping ours), xsp
    cannot unwrap it at stop; its wrapper must then do nothing but call through."""
    orig = torch.nn.Module.__dict__["__call__"]
    relu = torch.nn.ReLU()
    x = torch.ones(2)
    try:
        with xsp.profile():
            ours = torch.nn.Module.__call__

            def theirs(module, *args, **kwargs):
                return ours(module, *args, **kwargs)

            torch.nn.Module.__call__ = theirs
        assert torch.nn.Module.__dict__["__call__"] is theirs
        with xsp.profile(levels="L") as prof:
            relu(x)   # goes through theirs -> our stale wrapper -> the session's wrapper
        assert [s.name for s in prof.trace.spans(kind="module")] == ["ReLU"]
    finally:
        torch.nn.Module.__call__ = orig


def test_failure_in_a_module_hook_keeps_later_nesting_right():
    """Regression guard (bug: _ModuleCalls._enter pushes onto its per-thread stack only when
    everything succeeded, but _leave always pops; so when _enter fails, here because the module's
    name holds a lone surrogate that cannot be encoded as UTF-8, every later _leave pops its
    parent's entry: blk ends after its first child, blk.ok becomes blk's sibling, and 'tail'
    becomes a top-level model span named 'ReLU').  A hook failure may lose that module's span
    (counted in meta hook_errors) but must not misplace the others."""
    x = torch.ones(1, 2)
    inner = torch.nn.Sequential()
    inner.add_module("bad\udc80", torch.nn.ReLU())
    inner.add_module("ok", torch.nn.ReLU())
    seq = torch.nn.Sequential()
    seq.add_module("blk", inner)
    seq.add_module("tail", torch.nn.ReLU())
    seq(x)
    with xsp.profile() as prof:
        seq(x)
    trace = prof.trace
    check_tree(trace)
    mods = [(s.kind, s.name, s.parent_span.name) for s in trace.spans(level="M")[1:]
            + trace.spans(kind="module") if s.name.isascii()]
    assert sorted(mods) == sorted([("model", "Sequential", "xsp.profile"),
                                   ("module", "blk", "Sequential"),
                                   ("module", "blk.ok", "blk"),
                                   ("module", "tail", "Sequential")])
    assert trace.meta["hook_errors"] in (0, 1, 2)
