"""Shared fixtures for the Python tests: import paths, the fake clock, and a per-test check that
no test leaves a profile recording or xsp's torch callback attached (which would make later
tests record into a stale session)."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for p in (HERE, ROOT):          # the repo root first, so `import xsp` is this checkout
    if p in sys.path:
        sys.path.remove(p)
    sys.path.insert(0, p)

import torch  # noqa: E402

import xsp  # noqa: E402
from xsp import _core  # noqa: E402
from xsp.producers import profiler as _profiler  # noqa: E402

torch.manual_seed(0)

# the roofline's machine peaks (xsp.peaks) are cached under $XDG_CACHE_HOME/xsp: the tests
# keep theirs in a directory of their own, never the user's (test_roofline.py sets one per test)
if "XSP_TEST_KEEP_CACHE" not in os.environ:
    import tempfile
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="xsp-test-cache-")


@pytest.fixture
def fake_clock():
    """Returns set(start, step), which installs the core's fake clock (each clock reading
    returns the previous one + step, the first one `start`); the real clock is restored when
    the test ends, whatever happens."""
    def install(start, step):
        _core.set_fake_clock(start, step)

    yield install
    _core.set_fake_clock(0, 0)


@pytest.fixture
def torch_threads():
    """Returns set(n), which sets torch's intra-op threads to n for the test; the setting
    before is restored when the test ends, whatever happens."""
    import torch
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


@pytest.fixture
def one_thread(torch_threads):
    """One intra-op thread: no intra-op worker reads the fake clock."""
    torch_threads(1)


@pytest.fixture(autouse=True)
def no_session_left_behind():
    """Fails a test that leaves a profile recording, and cleans up after it so that one broken
    test does not cascade into every later one."""
    yield
    leaked = _core.active_session()
    if leaked is not None:
        leaked.stop()
    attached = False
    if "xsp._torch" in sys.modules:
        attached = bool(sys.modules["xsp._torch"].attached())
    active = bool(_core.active())
    _core.set_fake_clock(0, 0)
    assert leaked is None and not active and not attached, \
        "test left a session behind: profile=%r core active=%r shim attached=%r" % (
            leaked, active, attached)

