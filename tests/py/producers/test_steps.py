"""prof.step(): step spans step#0..step#N-1 under the region."""
import pytest
import torch

import xsp
from helpers import check_tree
import models


def _step_of(span):
    for a in span.ancestors():
        if a.kind == "step":
            return a
    return None


def test_step_between_iterations():
    model, x = models.cnn()
    models.fwd_bwd(model, x)
    with xsp.profile() as prof:
        for i in range(3):
            if i:
                prof.step()
            models.fwd_bwd(model, x)
    trace = prof.trace
    check_tree(trace)
    steps = trace.spans(kind="step")
    # the last step is ended by the stop, not by a step() call: flagged open at stop (1)
    assert [(s.name, s.level, s.parent, s.flags) for s in steps] == [
        ("step#0", "M", 0, 0), ("step#1", "M", 0, 0), ("step#2", "M", 0, 1)]
    assert [c.id for c in trace[0].children] == [s.id for s in steps]
    for st in steps:
        assert [c.name for c in st.children if c.kind == "model"] == ["TinyCNN"]
        # each step's backward work hangs directly off it (the engine's evaluate_function ops)
        assert sum(c.kind == "op" and c.name.startswith("autograd::engine::evaluate_function")
                   for c in st.children) == 45
    assert len(trace.spans(kind="module")) == 3 * 25
    # the whole iteration (forward, loss, backward) is inside its step
    for s in trace:
        if s.kind in ("region", "step"):
            continue
        st = _step_of(s)
        assert st is not None, s
        if s.kind == "backward" and "fwd_op" in s.attrs:
            assert _step_of(trace[s.attrs["fwd_op"]]) == st
    assert trace.meta["steps"] == 3


def test_no_step_call_means_no_step_span():
    model, x = models.cnn()
    model(x)
    with xsp.profile() as prof:
        model(x)
        model(x)
    trace = prof.trace
    assert trace.spans(kind="step") == []
    assert [(s.kind, s.parent) for s in trace.spans(level="M")] == [
        ("region", None), ("model", 0), ("model", 0)]
    assert trace.meta["steps"] == 0


def test_step_spans_exact_with_fake_clock(fake_clock):
    """Each clock reading advances the fake clock by 10 ns: start(1000), region begin 1010,
    step#0 begin 1020, then per iteration model begin, add begin, add end, model end; step()
    ends step#0 and begins step#1 (two readings)."""
    add, a = models.Add(), torch.ones(2)
    add(a, a)
    fake_clock(1000, 10)
    with xsp.profile() as prof:
        add(a, a)              # 1030 model, 1040/1050 add, 1060 model end
        prof.step()            # 1070 step#0 end, 1080 step#1 begin
        add(a, a)              # 1090 model, 1100/1110 add, 1120 model end
    # teardown: 1130 step#1 end (kept: it has children), 1140 region end, 1150 stop
    got = [(s.id, s.parent, s.kind, s.name, s.start_ns, s.end_ns) for s in prof.trace]
    assert got == [
        (0, None, "region", "xsp.profile", 1010, 1140),
        (1, 0, "step", "step#0", 1020, 1070),
        (2, 1, "model", "Add", 1030, 1060),
        (3, 2, "op", "aten::add", 1040, 1050),
        (4, 0, "step", "step#1", 1080, 1130),
        (5, 4, "model", "Add", 1090, 1120),
        (6, 5, "op", "aten::add", 1100, 1110),
    ]
    assert (prof.trace.meta["start_ns"], prof.trace.meta["stop_ns"]) == (1000, 1150)


def test_trailing_empty_step_is_dropped():
    """step() after every iteration leaves an empty step open at stop: it is elided."""
    add, a = models.Add(), torch.ones(2)
    with xsp.profile() as prof:
        for _ in range(3):
            add(a, a)
            prof.step()
    trace = prof.trace
    check_tree(trace)
    assert [s.name for s in trace.spans(kind="step")] == ["step#0", "step#1", "step#2"]
    for st in trace.spans(kind="step"):
        assert [(c.kind, c.name) for c in st.children] == [("model", "Add")]


def test_meta_steps_counts_the_step_spans():
    """Regression guard (bug: profile._teardown sets meta "steps" to step() calls + 1 even when
    the last step is empty and elided at merge): with step() after each of 3 iterations the
    trace has 3 step spans, so meta["steps"] must be 3, not 4."""
    add, a = models.Add(), torch.ones(2)
    with xsp.profile() as prof:
        for _ in range(3):
            add(a, a)
            prof.step()
    trace = prof.trace
    assert len(trace.spans(kind="step")) == 3
    assert trace.meta["steps"] == len(trace.spans(kind="step"))


def test_step_inside_a_forward_raises():
    a = torch.ones(2)
    add = models.Add()
    with xsp.profile() as prof:
        with pytest.raises(xsp.ProfilerError, match="inside a model call"):
            models.StepInForward(prof)(a)
        # from the model's own forward pre-hook (xsp's global pre-hook ran first, so the
        # model span is open)
        h = add.register_forward_pre_hook(lambda m, args: prof.step())
        with pytest.raises(xsp.ProfilerError, match="inside a model call"):
            add(a, a)
        h.remove()
        # from a submodule's forward hook (the enclosing model is still running)
        seq = torch.nn.Sequential(torch.nn.Identity(), torch.nn.Identity())
        h = seq[0].register_forward_hook(lambda m, args, out: prof.step())
        with pytest.raises(xsp.ProfilerError, match="inside a model call"):
            seq(a)
        h.remove()
        add(a, a)             # the profile goes on recording after the refusals
    trace = prof.trace
    check_tree(trace)
    assert trace.spans(kind="step") == []
    assert [(s.kind, s.name, s.parent, s.flags) for s in trace.spans(level="M")] == [
        ("region", "xsp.profile", None, 0), ("model", "StepInForward", 0, 0),
        ("model", "Add", 0, 0), ("model", "Sequential", 0, 0), ("model", "Add", 0, 0)]
    # every refused call still closed its spans normally
    assert [(s.name, s.parent_span.name) for s in trace.spans(kind="module")] == [
        ("0", "Sequential")]
    assert trace.meta["steps"] == 0
    assert trace.counters["forced_end"] == 0


def test_step_from_a_model_forward_hook_is_inside_the_model_call():
    """A model's own forward hooks run inside its __call__, which xsp wraps, so step() called
    from one is inside the model call and refused like any step() inside a forward."""
    add, a = models.Add(), torch.ones(2)
    with xsp.profile() as prof:
        h = add.register_forward_hook(lambda m, args, out: prof.step())
        with pytest.raises(xsp.ProfilerError, match="inside a model call"):
            add(a, a)
        h.remove()
        add(a, a)
    trace = prof.trace
    check_tree(trace)
    assert [(s.id, s.kind, s.name, s.parent) for s in trace] == [
        (0, "region", "xsp.profile", None), (1, "model", "Add", 0), (2, "op", "aten::add", 1),
        (3, "model", "Add", 0), (4, "op", "aten::add", 3)]


def test_step_needs_a_running_profile():
    prof = xsp.profile()
    with pytest.raises(xsp.ProfilerError, match="needs a running"):
        prof.step()
    with prof:
        prof.step()
    with pytest.raises(xsp.ProfilerError, match="needs a running"):
        prof.step()
    # step#0 was ended by step() and is kept (empty); step#1, open at stop and empty, is not
    assert [(s.name, s.parent, s.children) for s in prof.trace.spans(kind="step")] == [
        ("step#0", 0, [])]


def test_step_without_level_M_does_nothing():
    add, a = models.Add(), torch.ones(2)
    with xsp.profile(levels="L") as prof:
        add(a, a)
        prof.step()
        add(a, a)
    trace = prof.trace
    assert trace.spans(kind="step") == []
    assert [(s.kind, s.name, s.parent) for s in trace] == [
        ("module", "Add", None), ("op", "aten::add", 0),
        ("module", "Add", None), ("op", "aten::add", 2)]


def test_step_from_another_thread_is_refused_or_correct():
    """Regression guard (bug: step() on a thread other than the one that started the profile
    ends step#0 with a key that thread's core stack does not hold (counted as unmatched_end),
    begins step#1 on that other thread, so both iterations land in step#0, which is then
    force-ended, and an empty step#1 is left open at stop).  step() from another thread must
    either raise ProfilerError or mark the step boundary correctly."""
    import threading
    add, a = models.Add(), torch.ones(2)
    errors = []

    def other():
        try:
            prof.step()
        except xsp.ProfilerError as e:
            errors.append(e)

    with xsp.profile() as prof:
        add(a, a)
        t = threading.Thread(target=other)
        t.start()
        t.join()
        add(a, a)
    trace = prof.trace
    check_tree(trace)
    assert trace.counters["unmatched_end"] == 0
    assert trace.counters["forced_end"] == 0 and trace.counters["open_at_stop"] == 0
    steps = [(s.name, [c.name for c in s.children]) for s in trace.spans(kind="step")]
    if errors:
        assert steps == []
    else:
        assert steps == [("step#0", ["Add"]), ("step#1", ["Add"])]
