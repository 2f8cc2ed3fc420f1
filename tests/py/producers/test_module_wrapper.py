"""The nn.Module.__call__ wrapper in C (xsp._core.ModuleCall, csrc/python/modcall.c): what it
records, how it binds, how it fails, and that it is the one wrapper, recording shapes and
memory too."""
import threading

import pytest
import torch
from torch import nn

import xsp
from xsp import _core
from xsp.producers import profiler as P
from helpers import check_tree


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.act = nn.ReLU()
        self.stranger = None

    def forward(self, x):
        x = self.act(self.fc(x))
        if self.stranger is not None:          # a module that is not a submodule
            x = self.stranger(x)
        return x


def names(trace, kind):
    return [(s.name, s.attrs.get("type")) for s in trace.spans(kind=kind)]


def test_c_wrapper_records_and_is_removed():
    net = Net()
    orig = nn.Module.__dict__["__call__"]
    with xsp.profile(levels="ML") as prof:
        w = nn.Module.__dict__["__call__"]
        assert type(w) is _core.ModuleCall and w.__wrapped__ is orig
        assert w.__qualname__ == "Module.__call__ (xsp)"
        net(torch.ones(1, 3))
        # an attribute read on an instance gives the original __call__ bound (what
        # torch.compile must see, test_compile.py): an explicit net.__call__(x) calls it,
        # unrecorded as a model call; its submodules, called as fc(x), still go through us
        assert net.__call__.__func__ is orig
        net.__call__(torch.ones(1, 3))
        assert prof._modules.depth() == 0
    assert nn.Module.__dict__["__call__"] is orig
    tr = prof.trace
    assert names(tr, "model") == [("Net", "Net")]
    # the explicit call's submodules are top-level calls of torch.nn leaf layers: layers
    assert names(tr, "module") == [("fc", "Linear"), ("act", "ReLU"), ("Linear", "Linear"),
                                   ("ReLU", "ReLU")]
    for m in tr.spans(kind="module")[:2]:
        assert m.parent_span.kind == "model"
    assert tr.meta["hook_errors"] == 0
    # after the profile the wrapper object, if someone kept it, only forwards
    assert w(net, torch.ones(1, 3)).shape == (1, 3)


def test_levels_m_only_and_nested_depth():
    net = Net()
    seen = []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append(prof._modules.depth())
            return x

    net.stranger = Probe()
    with xsp.profile(levels="M") as prof:
        net(torch.ones(1, 3))
    assert seen == [2]          # the model call and the probe's own
    assert names(prof.trace, "model") == [("Net", "Net")]
    assert names(prof.trace, "module") == []


def test_a_module_that_is_not_a_submodule_is_named_by_its_class():
    net = Net()
    object.__setattr__(net, "stranger", nn.Tanh())     # an attribute, not registered
    assert "stranger" not in dict(net.named_modules())
    with xsp.profile(levels="ML") as prof:
        net(torch.ones(1, 3))
        net(torch.ones(1, 3))
    assert names(prof.trace, "module") == [("fc", "Linear"), ("act", "ReLU"),
                                           ("Tanh", "Tanh")] * 2


def test_module_added_during_the_session_gets_its_qualified_name():
    net = Net()
    with xsp.profile(levels="ML") as prof:
        net(torch.ones(1, 3))
        net.extra = nn.Sigmoid()
        net.stranger = net.extra
        net(torch.ones(1, 3))
    assert names(prof.trace, "module")[-1] == ("extra", "Sigmoid")


def test_bookkeeping_failures_are_counted_not_raised(monkeypatch):
    net = Net()

    def broken(self, root):
        raise RuntimeError("named_modules failed")

    monkeypatch.setattr(P._ModuleCalls, "_qualnames", broken)
    with xsp.profile(levels="ML") as prof:
        out = net(torch.ones(1, 3))
    assert out.shape == (1, 3)
    tr = prof.trace
    # the top-level call could not map names: no model span, the failure counted; the
    # nested calls then try to name their modules and fail the same way
    assert tr.spans(kind="model") == []
    assert tr.meta["hook_errors"] == 3


def test_forward_exceptions_end_the_span_and_propagate():
    class Boom(nn.Module):
        def forward(self, x):
            raise KeyboardInterrupt

    net = Net()
    net.stranger = Boom()
    with xsp.profile(levels="ML") as prof:
        with pytest.raises(KeyboardInterrupt):
            net(torch.ones(1, 3))
        assert prof._modules.depth() == 0
        net.stranger = None
        net(torch.ones(1, 3))
    tr = prof.trace
    assert [s.flags for s in tr.spans(kind="model")] == [0, 0]
    assert tr.counters["open_at_stop"] == 0 and tr.counters["forced_end"] == 0


def test_threads_record_their_own_calls():
    net = Net()
    done = []

    def work():
        net(torch.ones(1, 3))
        done.append(threading.get_native_id())

    with xsp.profile(levels="ML") as prof:
        th = threading.Thread(target=work, name="worker-1")
        th.start()
        th.join()
        net(torch.ones(1, 3))
    tr = prof.trace
    models = tr.spans(kind="model")
    assert sorted(m.thread_name for m in models) == sorted(["MainThread", "worker-1"])
    assert {m.thread for m in models} >= set(done)


@pytest.mark.parametrize("options", [{"record_shapes": True}, {"profile_memory": True},
                                     {"record_shapes": True, "profile_memory": True}])
def test_shapes_and_memory_use_the_c_wrapper(options):
    """One wrapper for every configuration: record_shapes and profile_memory used to install a
    second, pure-Python wrapper; the C one now keeps their side table itself."""
    net = Net()
    orig = nn.Module.__dict__["__call__"]
    with xsp.profile(levels="ML", **options) as prof:
        w = nn.Module.__dict__["__call__"]
        assert type(w) is _core.ModuleCall and w.__wrapped__ is orig
        assert net.__call__.__func__ is orig        # torch.compile sees nn.Module unpatched
        net(torch.ones(2, 3))
        assert prof._modules.depth() == 0
    assert nn.Module.__dict__["__call__"] is orig
    tr = prof.trace
    assert names(tr, "module") == [("fc", "Linear"), ("act", "ReLU")]
    shapes = [s.attrs.get("shapes") for s in tr.spans(kind="model") + tr.spans(kind="module")]
    assert shapes == (["[2, 3]"] * 3 if options.get("record_shapes") else [None] * 3)
    assert tr.meta["hook_errors"] == 0 and "attrs_unmatched" not in tr.meta


def test_shapes_record_each_calls_own_arguments():
    """The side table is kept in begin order per thread: nested calls, keyword arguments and
    non-tensors as the wrapper's enter() sees them."""
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(3, 4), nn.Linear(4, 2)

        def forward(self, x, *, scale=1.0):
            return self.b(self.a(x)) * scale

    net = Two()
    with xsp.profile(levels="ML", record_shapes=True) as prof:
        net(torch.ones(5, 3), scale=2.0)
        net((torch.ones(1, 3)))
    got = [(s.name, s.attrs["shapes"]) for s in prof.trace
           if s.kind in ("model", "module")]
    assert got == [("Two", "[5, 3], scale=float"), ("a", "[5, 3]"), ("b", "[5, 4]"),
                   ("Two", "[1, 3]"), ("a", "[1, 3]"), ("b", "[1, 4]")]


def test_shape_bookkeeping_failures_are_counted_and_the_call_goes_on(monkeypatch):
    """enter() raising: the call runs, its span has no shapes (nor does its thread: the counts
    no longer match), the failure is in hook_errors; leave() raising likewise, with the
    forward's own exception kept."""
    net = Net()

    def broken(args, kwargs, torch):
        raise RuntimeError("no shapes today")

    monkeypatch.setattr(P, "_shapes_of", broken)
    with xsp.profile(levels="ML", record_shapes=True) as prof:
        assert net(torch.ones(2, 3)).shape == (2, 3)
    tr = prof.trace
    assert len(tr.spans(kind="module")) == 2
    assert tr.meta["hook_errors"] == 3
    monkeypatch.undo()

    class Boom(nn.Module):
        def forward(self, x):
            raise ValueError("the forward's own")

    def leave(self, rec):
        raise RuntimeError("leave failed")

    monkeypatch.setattr(P._ModuleCalls, "_side_leave", leave)
    with xsp.profile(levels="ML", profile_memory=True) as prof:
        with pytest.raises(ValueError, match="the forward's own"):
            Boom()(torch.ones(1))
        assert net(torch.ones(2, 3)).shape == (2, 3)
    assert prof.trace.meta["hook_errors"] == 4


def test_module_call_constructor_checks_its_arguments():
    with pytest.raises(TypeError, match="must be callable"):
        _core.ModuleCall(1, print, print, print, True)


def test_a_call_that_spans_two_sessions_leaves_the_new_state_alone():
    """Regression: a thread inside a forward when one profile stops and the next starts used
    to decrement the new session's depth on return, so its later model calls counted as
    nested (no model spans, modules named by class)."""
    go, parked = threading.Event(), threading.Event()

    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.park = False

        def forward(self, x):
            if self.park:
                self.park = False
                parked.set()
                go.wait(120)                # a hang guard only
            return self.lin(x)

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            return self.inner(x)

    net, x = Outer(), torch.ones(1, 2)
    net.inner.park = True

    def work():
        net(x)                        # parks inside net -> inner during session A
        for _ in range(3):
            net(x)                    # session B: three top-level calls

    t = threading.Thread(target=work)
    with xsp.profile(levels="ML"):
        t.start()
        assert parked.wait(120)
    with xsp.profile(levels="ML") as b:
        go.set()
        t.join(120)
    models = [s.name for s in b.trace.spans(kind="model")]
    # the parked call's inner linear ends in B (its module span began in A: not recorded);
    # then three model calls with their qualified module names
    assert models[-3:] == ["Outer"] * 3
    assert [s.name for s in b.trace.spans(kind="module")][-6:] == ["inner", "inner.lin"] * 3


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_jit_and_pickle_work_while_profiling():
    import copy
    import pickle
    net = nn.Linear(2, 2)
    with xsp.profile(levels="ML") as prof:
        traced = torch.jit.trace(net, torch.ones(1, 2))
        scripted = torch.jit.script(nn.ReLU())
        bound = copy.copy(net.__call__)
        assert pickle.loads(pickle.dumps(net.__call__))(torch.ones(1, 2)).shape == (1, 2)
        assert nn.Module.__call__.__name__ == "__call__"
    assert traced(torch.ones(1, 2)).shape == (1, 2)
    assert scripted(torch.ones(2)).shape == (2,)
    assert bound(torch.ones(1, 2)).shape == (1, 2)
    assert prof.trace.meta["hook_errors"] == 0


def test_ctrl_c_in_the_bookkeeping_propagates(monkeypatch):
    net = Net()
    ran = []
    orig_forward = Net.forward

    def forward(self, x):
        ran.append(1)
        return orig_forward(self, x)

    def interrupted(self, root):
        raise KeyboardInterrupt

    monkeypatch.setattr(Net, "forward", forward)
    monkeypatch.setattr(P._ModuleCalls, "_qualnames", interrupted)
    with xsp.profile(levels="ML") as prof:
        with pytest.raises(KeyboardInterrupt):
            net(torch.ones(1, 3))
        assert prof._modules.depth() == 0
    assert ran == [] and prof.trace.meta["hook_errors"] == 0


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
