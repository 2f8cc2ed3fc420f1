"""Profiling code that runs on several Python threads at once."""
import collections
import threading

import torch

import xsp
from helpers import check_tree, main_tid
import models
from models import CNN_MODULE_CALLS, ENCODER_MODULE_CALLS
import pytest

# Seconds a wait may take before the test calls it a hang.  Only a hang guard: the order of
# events comes from barriers and events, never from how long something took, so a loaded
# machine only makes the tests slower.
HANG = 120


def _run_in_threads(jobs):
    """Runs each (name, fn) on its own thread, all released together by a barrier, inside one
    profile; returns (trace, {name: native thread id})."""
    barrier = threading.Barrier(len(jobs))
    tids = {}
    errors = []

    def body(name, fn):
        tids[name] = threading.get_native_id()
        barrier.wait()
        try:
            fn()
        except BaseException as e:        # re-raised on the main thread below
            errors.append(e)

    with xsp.profile() as prof:
        threads = [threading.Thread(target=body, args=job, name=job[0]) for job in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    return prof.trace, tids


def _spans_on(trace, tid):
    return [s for s in trace if s.thread == tid]


def test_two_threads_forward():
    cnn, xc = models.cnn()
    enc, xe = models.encoder()
    cnn(xc)
    enc(xe)
    # both threads meet inside their model calls, so the two model spans surely overlap
    inside = threading.Barrier(2)
    hooks = [m.register_forward_pre_hook(lambda mod, args: None if inside.wait(HANG) else None)
             for m in (cnn.layer1, enc.layer)]
    try:
        trace, tids = _run_in_threads([("t-cnn", lambda: cnn(xc)), ("t-enc", lambda: enc(xe))])
    finally:
        for h in hooks:
            h.remove()
    check_tree(trace)
    region = trace[0]
    assert (region.kind, region.thread, region.parent) == ("region", main_tid(), None)
    assert trace.roots() == [region]
    # the main thread only recorded the region (step#0 is elided)
    assert [s.id for s in _spans_on(trace, main_tid())] == [0]
    threads = {tid: name for tid, name, kind in trace.threads}
    assert threads == {main_tid(): "MainThread", tids["t-cnn"]: "t-cnn",
                       tids["t-enc"]: "t-enc"}
    for name, cls, calls in (("t-cnn", "TinyCNN", CNN_MODULE_CALLS),
                             ("t-enc", "Encoder", ENCODER_MODULE_CALLS)):
        spans = _spans_on(trace, tids[name])
        assert {s.thread_name for s in spans} == {name}
        # the thread's root (its model call) is adopted by the region; everything else on the
        # thread has a parent on the same thread
        roots = [s for s in spans if s.parent == 0]
        assert [(r.kind, r.name, r.level) for r in roots] == [("model", cls, "M")]
        for s in spans:
            if s.parent != 0:
                assert s.parent_span.thread == s.thread
                assert roots[0] in s.ancestors()
        assert [s.name for s in spans if s.kind == "module"] == calls
        assert region.start_ns <= roots[0].start_ns and roots[0].end_ns <= region.end_ns
    # the two models overlapped in time (so the per-thread stacks were both in use)
    a, b = (trace.spans(kind="model", name=n)[0] for n in ("TinyCNN", "Encoder"))
    assert a.start_ns < b.end_ns and b.start_ns < a.end_ns


def test_two_threads_forward_backward():
    """Autograd's work on each thread is recorded on that thread, and backward functions link to
    forward ops of their own thread even though both threads reuse the same (thread-local)
    autograd sequence numbers."""
    m1, x1 = models.cnn()
    m2, x2 = models.cnn()
    models.fwd_bwd(m1, x1)
    trace, tids = _run_in_threads([("a", lambda: models.fwd_bwd(m1, x1)),
                                   ("b", lambda: models.fwd_bwd(m2, x2))])
    check_tree(trace)
    seqs = {}
    for name in ("a", "b"):
        tid = tids[name]
        spans = _spans_on(trace, tid)
        bwd = [s for s in spans if s.kind == "backward"]
        assert collections.Counter(s.name for s in bwd) == collections.Counter({
            "torch::autograd::AccumulateGrad": 20, "ConvolutionBackward0": 6,
            "NativeBatchNormBackward0": 6, "ReluBackward0": 5, "AddBackward0": 2,
            "AddmmBackward0": 1, "MaxPool2DWithIndicesBackward0": 1, "MeanBackward1": 1,
            "SumBackward0": 1, "TBackward0": 1, "ViewBackward0": 1})
        for b in bwd:
            if "fwd_op" in b.attrs:
                f = trace[b.attrs["fwd_op"]]
                assert f.thread == tid and f.attrs["seq"] == b.attrs["seq"]
        # thread roots: the model call, the loss's sum, and the engine's evaluate_function
        # ops, all adopted by the region
        roots = [s for s in spans if s.parent == 0]
        assert roots[0].kind == "model" and roots[0].name == "TinyCNN"
        assert {r.name.split(":")[0] for r in roots[1:]} <= {"aten", "autograd"}
        seqs[name] = {s.attrs["seq"] for s in spans if s.kind == "op" and "seq" in s.attrs}
    assert seqs["a"] & seqs["b"]          # the same sequence numbers occur on both threads


def test_thread_running_across_start_and_stop():
    """A thread that keeps running ops while a profile starts and stops: its spans are adopted
    by the region, nothing is misfiled, and the trace stays consistent."""
    a = torch.ones(4)
    stop = threading.Event()
    started = threading.Event()
    reached = threading.Event()
    done = [0]          # adds the spinner finished
    want = [None]       # the count at which it sets `reached`

    def spin():
        while not stop.is_set():
            torch.add(a, a)
            done[0] += 1
            started.set()
            if want[0] is not None and done[0] >= want[0]:
                reached.set()

    t = threading.Thread(target=spin, name="spinner")
    t.start()
    try:
        assert started.wait(HANG)
        with xsp.profile() as prof:
            for _ in range(50):
                torch.mul(a, a)
            # two more adds of the spinner's, whatever the machine's load: the first may have
            # begun before the start, the second begins after it and ends before the stop
            want[0] = done[0] + 2
            assert reached.wait(HANG)
    finally:
        stop.set()
        t.join()
    trace = prof.trace
    check_tree(trace)
    tid = t.native_id
    spins = _spans_on(trace, tid)
    assert len(spins) > 0
    region = trace[0]
    for s in spins:
        assert (s.name, s.kind, s.thread_name) == ("aten::add", "op", "spinner")
        # adopted by the region; only an op whose begin raced with the teardown (its
        # RecordFunction copied xsp's callback before detach but stamped its start after the
        # region ended) can stay a root
        assert s.parent == 0 or (s.parent is None and s.start_ns > region.end_ns)
    assert [s.name for s in _spans_on(trace, main_tid())] == ["xsp.profile"] + ["aten::mul"] * 50
    assert trace.counters["lost.cap"] == 0 and trace.counters["forced_end"] == 0
    # an add in flight when recording began ends without a begin: counted, not recorded
    assert trace.counters["unmatched_end"] in (0, 1)


class _OwnNames(threading.Thread):
    """A Thread that keeps its name and OS thread id in attributes of its own, as a subclass
    may: Thread's private _name is wrong and _native_id absent while it runs."""

    def __init__(self, label, work):
        super().__init__(daemon=True)
        self._label, self._work = label, work

    name = property(lambda self: self._label)
    native_id = property(lambda self: self._tid)    # AttributeError until it runs: skipped

    def run(self):
        self._tid = threading.get_native_id()
        del self._native_id
        self._name = "not its name"
        self._work()


def test_threads_are_named_from_public_api_not_threads_private_attributes():
    """The stop-time contract is passed, not discovered: the thread names the stop writes come
    from the table Python fills (before the start from each live thread's public native_id and
    name; at a thread's first module call from threading.current_thread().name).  Regression:
    the C stop read each Thread's _native_id and _name from its instance dict, and left such a
    thread's track unnamed."""
    a, lin = torch.ones(4), torch.nn.Linear(4, 4)
    ready, reached, stop = threading.Event(), threading.Event(), threading.Event()
    done, want = [0], [None]

    def spin():
        while not stop.is_set():
            torch.add(a, a)
            done[0] += 1
            ready.set()
            if want[0] is not None and done[0] >= want[0]:
                reached.set()

    spinner = _OwnNames("spinner-own", spin)
    spinner.start()
    try:
        assert ready.wait(HANG)
        with xsp.profile(levels="ML") as prof:
            worker = _OwnNames("worker-own", lambda: lin(a))
            worker.start()
            worker.join(HANG)
            want[0] = done[0] + 2          # an add of the spinner's inside the profile
            assert reached.wait(HANG)
    finally:
        stop.set()
        spinner.join(HANG)
    tr = prof.trace
    named = {tid: name for tid, name, kind in tr.threads}
    assert named[spinner._tid] == "spinner-own"
    assert named[worker._tid] == "worker-own"
    # a lone nn.Linear is a layer: a module span, on the worker's named track
    assert [(s.name, s.thread_name) for s in tr.spans(kind="module")] == [
        ("Linear", "worker-own")]
    assert named[main_tid()] == threading.current_thread().name


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
