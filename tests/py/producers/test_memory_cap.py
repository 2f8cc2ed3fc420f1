"""xsp.profile(max_memory=...): spans past the cap are counted in counters['lost.cap'],
exactly, and the trace stays consistent."""
import collections

import pytest
import torch

import xsp
from helpers import check_tree
import models

CAP = 1 << 18          # the core's first record chunk fits, little more


A = torch.ones(2)


def _adds(n, a=A):
    for _ in range(n):
        torch.add(a, a)


def test_lost_cap_counts_exactly_the_ops_not_recorded():
    n = 6000
    _adds(10)
    with xsp.profile() as full:
        _adds(n)
    # unprofiled-cap run: each torch.add is exactly one RecordFunction event
    assert collections.Counter(s.name for s in full.trace) == collections.Counter(
        {"xsp.profile": 1, "aten::add": n})
    assert full.trace.lost == 0
    with xsp.profile(max_memory=CAP) as capped:
        _adds(n)
    trace = capped.trace
    check_tree(trace)
    recorded = len(trace.spans(name="aten::add"))
    assert 0 < recorded < n
    assert trace.counters["lost.cap"] == n - recorded
    assert trace.lost == n - recorded
    assert trace.counters["lost.depth"] == 0
    # the region (recorded first) is kept and holds every recorded op
    assert [r.name for r in trace.roots()] == ["xsp.profile"]
    assert all(s.parent == 0 for s in trace.spans(kind="op"))
    assert trace.tree(max_depth=0).splitlines()[-1] == (
        "lost spans: %d (lost.cap %d)" % (n - recorded, n - recorded))


def test_cap_on_a_real_model_keeps_a_consistent_prefix():
    model, x = models.cnn()
    models.fwd_bwd(model, x)

    def work():
        for _ in range(12):
            models.fwd_bwd(model, x)

    with xsp.profile() as full:
        work()
    with xsp.profile(max_memory=CAP) as capped:
        work()
    f, c = full.trace, capped.trace
    check_tree(c)
    assert f.lost == 0
    lost = c.counters["lost.cap"]
    assert lost > 0
    assert len(f) - len(c) == lost
    # recording stops at the cap and never resumes: the capped trace is the full one's prefix,
    # same names, kinds and parents
    n = len(c)
    assert [(s.name, s.kind, s.parent) for s in c] == [(s.name, s.kind, s.parent)
                                                       for s in f][:n]
    assert c.counters["unmatched_end"] == 0 and c.counters["forced_end"] == 0
    # the views still work with lost spans
    df = c.to_pandas()
    assert len(df) == n
    assert xsp.Trace.from_bytes(c.to_bytes()) == c


def _smallest_accepted_cap():
    cap = 1 << 12
    while True:
        try:
            xsp.profile(max_memory=cap)
            return cap
        except ValueError:
            cap *= 2


def test_smallest_accepted_max_memory_records_the_region():
    """Regression guard (bug: xsp.profile accepts max_memory >= 65536, but the core charges
    whole record chunks of 4096 * 48 = 196608 bytes against the cap, so any cap below that
    records nothing at all, not even the region span).  The smallest cap the API accepts must
    still give a trace with its region and what fits."""
    cap = _smallest_accepted_cap()
    with xsp.profile(max_memory=cap) as prof:
        _adds(10)
    trace = prof.trace
    assert [r.kind for r in trace.roots()] == ["region"]
    # 12 spans begun: the region, step#0 (recorded second, elided at stop, so not in len) and
    # 10 adds
    assert trace.counters["lost.cap"] == 12 - (len(trace) + 1)


@pytest.mark.parametrize("cap", [1 << 16, 1 << 17, CAP])
def test_small_caps_never_crash(cap):
    """Every cap the API accepts gives a consistent trace, and every span begun is either in
    it or counted (the elided step#0 is begun and recorded whenever the region is).  A cap
    below the accepted minimum is refused up front."""
    if cap < _smallest_accepted_cap():
        with pytest.raises(ValueError, match="max_memory"):
            xsp.profile(max_memory=cap)
        return
    model, x = models.cnn()
    models.fwd_bwd(model, x)
    with xsp.profile() as full:
        for _ in range(10):
            models.fwd_bwd(model, x)
    begun = len(full.trace) + 1                       # + the elided step#0
    with xsp.profile(max_memory=cap) as prof:
        for _ in range(10):
            models.fwd_bwd(model, x)
    trace = prof.trace
    check_tree(trace)
    has_region = len(trace) > 0 and trace[0].kind == "region"
    assert trace.counters["lost.cap"] + len(trace) + has_region == begun
    assert trace.lost == trace.counters["lost.cap"] > 0
    assert trace.tree().splitlines()[-1].startswith("lost spans: %d (" % trace.lost)
    assert xsp.Trace.from_bytes(trace.to_bytes()) == trace
