"""Checks shared by the Python tests: tree invariants, module lookup, op multisets."""
import collections
import os
import threading

import xsp

MODULE_KINDS = ("module", "model")
TESTS = os.path.dirname(os.path.abspath(__file__))      # tests/py


def sibling(folder, name):
    """The test module tests/py/<folder>/<name>.py, for a test that reuses another folder's
    builders (a trace, a command runner): the module pytest imported when it collected that
    file, or imported now under the same name (pytest's rootdir-less "prepend" mode names a
    test module by its file name), so that its fixtures and caches are shared either way."""
    import importlib.util
    import sys
    mod = sys.modules.get(name)
    if mod is not None and os.path.dirname(os.path.abspath(mod.__file__)) == os.path.join(
            TESTS, folder):
        return mod
    spec = importlib.util.spec_from_file_location(name, os.path.join(TESTS, folder,
                                                                     name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod

# A models file for the zoo tests' python: sources (xsp.zoo runs it in its workers): an MLP
# and a small convnet, with seeded inputs of any batch size
TINY_MODELS = '''import torch


def _inputs(*shape):
    def make(batch_size):
        g = torch.Generator().manual_seed(0)
        return torch.randn(batch_size, *shape, generator=g)
    return make


def mlp(width=16):
    model = torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, 4))
    return model, _inputs(8)


def convnet():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(4, 2))
    return model, _inputs(3, 8, 8)
'''


def descendants(trace, i):
    """How many spans lie below span i (its whole subtree, i not counted)."""
    out, todo = 0, [i]
    while todo:
        kids = trace.children_of(todo.pop()).tolist()
        out += len(kids)
        todo.extend(kids)
    return out


def have_otlp():
    """Whether the extra xsp[otlp] is installed (always, under make test's XSP_TEST_TOOLS)."""
    if os.environ.get("XSP_TEST_TOOLS") == "1":
        return True
    try:
        import google.protobuf.json_format  # noqa: F401
        import opentelemetry.exporter.otlp.proto.common.trace_encoder  # noqa: F401
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return False
    return True


def browser_checker():
    """(scripts/browser_check.py as a module, a skipif mark for the tests that need chromium).
    Under `make test` (XSP_TEST_TOOLS=1) the test tools were installed: a missing chromium
    is an error there, not a skip."""
    import importlib.util

    import pytest
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = importlib.util.spec_from_file_location(
        "browser_check", os.path.join(root, "scripts", "browser_check.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if mod.find_chromium() is None and os.environ.get("XSP_TEST_TOOLS") == "1":
        raise RuntimeError("XSP_TEST_TOOLS=1 but chromium is not installed: scripts/setup.sh "
                           "could not install it (see its warning)")
    return mod, pytest.mark.skipif(
        mod.find_chromium() is None,
        reason="chromium is not installed: run `XSP_TEST_TOOLS=1 scripts/setup.sh` (as root "
               "or with sudo; it runs apt-get install chromium) or set XSP_CHROMIUM to a "
               "browser")


def profiled(fn, *args, levels="ML", **kw):
    """Runs fn(*args) inside xsp.profile(levels, **kw) and returns the trace."""
    with xsp.profile(levels=levels, **kw) as prof:
        fn(*args)
    return prof.trace


def check_tree(trace, nesting=True):
    """Asserts the invariants every trace keeps: the core's own check, ids growing with start
    time, parents before children, start <= end, and (nesting=True) same-thread children
    inside their parents, which recording guarantees but a file cannot prove."""
    assert trace._data.check() is None
    start, end, parents = trace.start_ns, trace.end_ns, trace.parent_ids
    for i in range(len(trace)):
        assert start[i] <= end[i], i
        if i:
            assert start[i - 1] <= start[i], i
        p = parents[i]
        if p < 0:
            continue
        assert p < i, (p, i)
        if nesting and trace.thread_index[p] == trace.thread_index[i]:
            assert start[p] <= start[i] and end[i] <= end[p], (p, i)


def nearest_module(span):
    """The closest enclosing module or model span (not the span itself), or None."""
    for a in span.ancestors():
        if a.kind in MODULE_KINDS:
            return a
    return None


def aten_counts(trace, thread=None):
    """Multiset of 'aten::' span names, optionally only those on one OS thread."""
    return collections.Counter(s.name for s in trace if s.name.startswith("aten::")
                               and (thread is None or s.thread == thread))


def main_tid():
    return threading.get_native_id()
