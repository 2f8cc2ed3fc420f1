"""xsp records the same aten ops as torch.profiler, and record_function scopes.

What differs, and why (torch 2.13, CPU):
  - torch.profiler's EventList (prof.events()) post-processes its events: a child with the
    same name as its parent, when it is that parent's only child, is removed
    (EventList._remove_dup_nodes), e.g. aten::sum calling the aten::sum.dim_IntList overload,
    aten::div_ calling aten::div_.Tensor.  The raw kineto events keep them, and so does xsp.
    So the raw events equal xsp's ops exactly, and events() equals xsp's ops after the same
    rule.
  - torch.profiler installs thread-local callbacks, which OpenMP worker threads do not
    inherit; xsp's callback is global, so it also sees ops that intra-op workers run (the
    encoder's flash-attention backward allocates per-thread buffers with aten::empty on
    them).  Those ops appear on their own thread ("intra-op thread 1"), under the op that
    spawned the parallel region.
"""
import collections

import pytest
import torch
from torch.profiler import ProfilerActivity, record_function

import xsp
from helpers import aten_counts, check_tree, main_tid
import models


DEDUP_FWD = collections.Counter({"aten::div_": 1})
DEDUP_FWD_BWD = collections.Counter({"aten::div_": 1, "aten::sum": 1, "aten::div": 1})


def _torch_profile(fn):
    """(raw kineto aten multiset, events() aten multiset) of fn() under torch.profiler."""
    with torch.profiler.profile(activities=[ProfilerActivity.CPU]) as p:
        fn()
    raw = collections.Counter(e.name() for e in p.profiler.kineto_results.events()
                              if e.name().startswith("aten::"))
    post = collections.Counter(e.name for e in p.events() if e.name.startswith("aten::"))
    return raw, post


def _dedup(trace, thread):
    """xsp's aten multiset on one thread after torch's EventList._remove_dup_nodes rule."""
    out = collections.Counter()
    for s in trace:
        if not s.name.startswith("aten::") or s.thread != thread:
            continue
        p = s.parent_span
        if p is not None and p.name == s.name and len(p.children) == 1:
            continue
        out[s.name] += 1
    return out


@pytest.mark.parametrize("make", [models.cnn, models.encoder], ids=["cnn", "encoder"])
@pytest.mark.parametrize("fn", [models.fwd, models.fwd_bwd], ids=["fwd", "fwd_bwd"])
def test_aten_ops_equal_torch_profiler(make, fn):
    model, x = make()
    fn(model, x)
    fn(model, x)                               # warm-up: no lazy initialisation below
    with xsp.profile() as prof:
        fn(model, x)
    trace = prof.trace
    check_tree(trace)
    raw, post = _torch_profile(lambda: fn(model, x))
    main = main_tid()
    assert aten_counts(trace, main) == raw
    assert _dedup(trace, main) == post
    # exactly what the dedup rule removes: aten::mean's in-place division redispatching to
    # another aten::div_ overload; with backward also the loss's .sum() (aten::sum calling
    # another aten::sum overload) and MeanBackward1's aten::div calling another aten::div
    assert raw - post == (DEDUP_FWD_BWD if fn is models.fwd_bwd else DEDUP_FWD)
    assert post - raw == collections.Counter()
    # ops on other threads: only intra-op workers' allocations, inside the main thread's
    # flash-attention backward, under it (the op that spawned the parallel region)
    others = [s for s in trace if s.thread != main]
    flash = trace.spans(name="aten::_scaled_dot_product_flash_attention_for_cpu_backward")
    if make is models.cnn or fn is models.fwd:
        assert others == [] and flash == []
    else:
        assert len(flash) == 1
        for s in others:
            assert (s.kind, s.name, s.parent, s.thread_name) == (
                "op", "aten::empty", flash[0].id, "intra-op thread 1")
            assert flash[0].start_ns <= s.start_ns and s.end_ns <= flash[0].end_ns
        assert aten_counts(trace) == raw + collections.Counter({"aten::empty": len(others)})


def test_record_function_scopes_nest_their_ops():
    model, x = models.cnn()
    model(x)
    a = torch.ones(3)
    with xsp.profile() as prof:
        with record_function("outer"):
            torch.mul(a, a)
            with record_function("inner"):
                model(x)
            torch.add(a, a)
    trace = prof.trace
    check_tree(trace)
    outer, = trace.spans(name="outer")
    inner, = trace.spans(name="inner")
    assert (outer.kind, outer.level, outer.parent, outer.attrs) == ("scope", "L", 0, {})
    assert (inner.kind, inner.level, inner.parent) == ("scope", "L", outer.id)
    assert [(c.kind, c.name) for c in outer.children] == [
        ("op", "aten::mul"), ("scope", "inner"), ("op", "aten::add")]
    # a model called inside a scope is still a model span (the top-level call), under it
    assert [(c.kind, c.name) for c in inner.children] == [("model", "TinyCNN")]
    model_span = inner.children[0]
    assert len(trace.spans(kind="module")) == 25
    # every op is either one of outer's own two or inside the model, under inner
    for s in trace.spans(kind="op"):
        assert s.parent == outer.id or model_span in s.ancestors(), s
    assert [s.name for s in trace.spans(kind="op") if s.parent == outer.id] == [
        "aten::mul", "aten::add"]


def test_record_function_inside_a_forward():
    class Scoped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)

        def forward(self, x):
            with record_function("in_forward"):
                return self.lin(x)

    m = Scoped()
    x = torch.ones(1, 2)
    m(x)
    with xsp.profile() as prof:
        m(x)
    trace = prof.trace
    check_tree(trace)
    scope, = trace.spans(kind="scope")
    assert (scope.name, scope.parent_span.kind, scope.parent_span.name) == (
        "in_forward", "model", "Scoped")
    assert [(c.kind, c.name) for c in scope.children] == [("module", "lin")]
    assert [c.name for c in scope.children[0].children] == ["aten::linear"]
