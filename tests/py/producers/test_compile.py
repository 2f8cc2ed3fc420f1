"""torch.compile under xsp (issue: "never change what is compiled"): Dynamo's own counters are
the same with xsp as without, for a compiled module, a module compiled in place and a
compiled function, the first call inside a profile or before it, at every level and with
record_shapes.  Regression: the nn.Module.__call__ wrapper, seen by Dynamo as
`mod.__call__`, broke every graph for the whole process (unique_graphs 0 instead of 1), and
the pure-Python wrapper record_shapes once used raised AssertionError from inside Dynamo.  Now
an attribute read on an instance gives the original __call__ (csrc/python/modcall.c), while
module(x) still goes through the wrapper."""
import pytest
import torch
import torch._dynamo.utils as du
from torch import nn

import xsp


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def counts(before):
    """Dynamo's counters, and the compilations since `before` (the compilation metrics kept
    so far: torch._dynamo.reset does not clear them)."""
    c = du.counters
    seen = set(id(m) for m in before)
    new = [m for m in du.get_compilation_metrics() if id(m) not in seen]
    return {"stats": dict(c.get("stats", {})), "frames": dict(c.get("frames", {})),
            "graph_breaks": sum(c.get("graph_break", {}).values()),
            "recompiles": sum(1 for m in new if m.recompile_reason), "compiles": len(new)}


def run(how, profile=None, first_inside=True, backend="eager"):
    """Dynamo's counters after compiling a fresh Net (or a function) `how` and calling it
    three times, the first call inside the profile (or before it), the next inside it."""
    torch._dynamo.reset()
    du.counters.clear()
    before = list(du.get_compilation_metrics())
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(4, 8)
    if how == "module":
        f = torch.compile(net, backend=backend)
    elif how == "in place":
        net.compile(backend=backend)
        f = net
    else:
        def step(inp):
            return net(inp).relu().sum()
        f = torch.compile(step, backend=backend)
    out = []
    if not first_inside or profile is None:
        out.append(f(x))
    if profile is not None:
        with profile as prof:
            out.append(f(x))
            out.append(f(x))
    else:
        out.append(f(x))
    out.append(f(x))
    return counts(before), out, (prof.trace if profile is not None else None)


@pytest.mark.parametrize("how", ["module", "in place", "function"])
@pytest.mark.parametrize("first_inside", [True, False])
def test_dynamo_compiles_the_same_with_xsp(how, first_inside):
    base, base_out, _ = run(how)
    assert base["stats"]["unique_graphs"] >= 1 and base["graph_breaks"] == 0
    for levels in ("M", "L", "ML"):
        got, out, tr = run(how, xsp.profile(levels=levels), first_inside)
        assert got == base, (how, levels, first_inside)
        assert all(torch.equal(a, b) for a, b in zip(out, base_out[-len(out):]))
        assert tr.meta["hook_errors"] == 0


def test_record_shapes_does_not_break_dynamo():
    base, _, _ = run("module")
    got, _, tr = run("module", xsp.profile(levels="ML", record_shapes=True), True)
    assert got == base


def test_compiled_model_is_recorded_as_its_compiled_module():
    _, _, tr = run("module", xsp.profile(levels="ML"), first_inside=False)
    models = [s for s in tr if s.kind == "model"]
    assert [s.name for s in models] == ["OptimizedModule"] * 2
    names = {s.name for s in tr}
    assert any(n.startswith("Torch-Compiled Region") for n in names)


INDUCTOR = """
import sys
sys.path.insert(0, sys.argv[1])
import torch, xsp
from test_compile import run
base, base_out, _ = run("module", backend="inductor")
got, out, _ = run("module", xsp.profile(levels="ML"), True, backend="inductor")
assert got == base, (got, base)
assert torch.allclose(out[-1], base_out[-1])
print("same", got["stats"])
"""


@pytest.mark.slow          # Inductor in a process of its own
def test_inductor_same_graphs_with_xsp():
    """The C++ backend (no GPU here): one compile each way, about 10 s, in a process of its
    own (Inductor's imports would weigh on the timing of the tests that come after)."""
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([sys.executable, "-c", INDUCTOR, here], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("same {'calls_captured': ")


def test_measure_warns_when_it_measured_a_compile():
    """A first call that compiles must not pass for an iteration's latency: measure says which
    runs compiled, and with a warm-up that compiles first, none does."""
    torch._dynamo.reset()
    net = Net()
    x = torch.randn(4, 8)
    f = torch.compile(net, backend="eager")
    with pytest.warns(xsp.XSPWarning, match=r"torch.compile compiled during the measured runs "
                                             r"\(1 in run M\)"):
        m = xsp.measure(lambda: f(x), levels="ML", warmup=0, repeat=2, progress=False)
    assert m.compiled == {"M": 1}
    torch._dynamo.reset()
    g = torch.compile(Net(), backend="eager")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", xsp.XSPWarning)
        m2 = xsp.measure(lambda: g(x), levels="ML", warmup=1, repeat=2, progress=False)
    assert m2.compiled == {}
