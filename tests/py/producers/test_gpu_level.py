"""Level G on a machine without a usable GPU (this one and CI): a clear error naming what is
missing, an explicit fallback to M and L, and nothing left running.  The GPU-side logic itself
is tested in C on synthetic CUPTI buffers (tests/c/test_gpu.c, test_gpu_merge.c); the checks
on a real device are in tests/gpu/."""
import warnings

import pytest
import torch

import xsp
import xsp._torch  # noqa: F401 -- the checks read xsp._torch.attached()
from xsp import _core
from helpers import check_tree
import models

pytestmark = pytest.mark.skipif(torch.cuda.is_available(),
                                reason="a CUDA device is present: see tests/gpu")


@pytest.mark.parametrize("levels", ["G", "MLG", "LG"])
def test_g_without_a_device_raises_a_clear_error(levels):
    with pytest.raises(xsp.LevelUnavailableError) as ei:
        with xsp.profile(levels=levels):
            pytest.fail("the block must not run")
    msg = str(ei.value)
    assert msg.startswith("level G cannot be recorded: ")
    assert "no CUDA device or driver was found" in msg
    assert "gpu_fallback=True" in msg
    assert isinstance(ei.value, xsp.ProfilerError)
    assert not _core.active() and not xsp._torch.attached()
    # and the next profile starts normally
    with xsp.profile(levels="M") as prof:
        pass
    assert [s.kind for s in prof.trace] == ["region"]


def test_gpu_fallback_warns_and_records_m_and_l():
    model, x = models.cnn()
    models.fwd(model, x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with xsp.profile(levels="MLG", gpu_fallback=True) as prof:
            models.fwd(model, x)
    msgs = [str(w.message) for w in caught if issubclass(w.category, xsp.XSPWarning)]
    assert len(msgs) == 1
    assert "no CUDA device or driver was found" in msgs[0]
    assert "recording levels ML only (gpu_fallback=True)" in msgs[0]
    assert prof.levels == "ML"
    trace = prof.trace
    check_tree(trace)
    assert trace.meta["levels"] == "ML"
    assert set(trace._level.tolist()) == {0, 1}
    assert "gpu.records" not in trace.counters


def _open_cupti():
    info = _core.gpu_info()
    if not info["built"]:
        pytest.skip(info["reason"])
    try:
        return _core.gpu_open([])
    except _core.GPUError as exc:
        pytest.skip("no libcupti here: %s" % exc)


def test_session_gpu_start_error_path_leaves_nothing_running():
    """The C path below xsp.profile's checks: libcupti loads (CUDA toolkit present), but
    without a device CUPTI refuses to subscribe (CUPTI_ERROR_UNKNOWN); the session's start
    (core/session.c) undoes the core session it had started and the span hooks, so a plain
    session works next."""
    assert "libcupti" in _open_cupti()
    s = _core.Session()
    s._setup(_core.SessionOptions("MG", "r", gpu=True))
    with pytest.raises(xsp.GPUError, match="no CUDA device or driver was found") as ei:
        s._start()
    assert isinstance(ei.value, xsp.LevelUnavailableError)
    assert s._state == "new" and not _core.active() and _core.active_session() is None
    plain = _core.Session()
    plain._setup(_core.SessionOptions("M", "r"))
    with plain:
        pass
    data = plain._data
    assert len(data) == 1 and "gpu.records" not in data.counters()


def test_session_gpu_start_falls_back_to_m_and_l_when_asked():
    """gpu_fallback at CUPTI's refusal (after xsp.profile's own checks passed): one warning,
    the session runs without G, and the trace says levels 'M'."""
    _open_cupti()
    s = _core.Session()
    s._setup(_core.SessionOptions("MG", "r", gpu=True, gpu_fallback=True))
    with pytest.warns(xsp.XSPWarning, match="recording levels M only"):
        with s:
            assert _core.active()
    assert s._levels == "M" and s._data.meta()["levels"] == "M"
    assert not _core.active()


def test_core_failure_on_the_gpu_path_is_not_reported_as_a_gpu_problem():
    """Guards against every failure of a G start becoming GPUError: a session already
    recording is SessionActiveError, which gpu_fallback must not 'fall back' from."""
    _open_cupti()
    first = _core.Session()
    first._setup(_core.SessionOptions("M", "r"))
    second = _core.Session()
    second._setup(_core.SessionOptions("MG", "r2", gpu=True, gpu_fallback=True))
    with first:
        with pytest.raises(xsp.SessionActiveError, match="already recording") as ei:
            second._start()
        assert not isinstance(ei.value, xsp.LevelUnavailableError)
    assert not _core.active()


def test_cupti_is_shared_only_while_torch_profiler_is_not_recording():
    """Kineto keeps an idle CUPTI subscription after torch.profiler's first use; G shares it
    then, and is refused while torch.profiler records (xsp.producers.profiler._cupti_share_ok)."""
    import torch
    from xsp.producers import profiler as P
    assert P._cupti_share_ok() is True
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert P._cupti_share_ok() is False
    assert P._cupti_share_ok() is True
