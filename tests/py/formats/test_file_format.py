"""The .xsp file: round trips, and truncated, corrupt or foreign input."""
import os
import pathlib
import random
import threading

import pytest
import torch

import xsp
from helpers import check_tree
import models


def _trace_of(make, fn=models.fwd_bwd):
    model, x = make()
    fn(model, x)
    with xsp.profile() as prof:
        fn(model, x)
    return prof.trace


@pytest.fixture(scope="module")
def cnn_trace():
    return _trace_of(models.cnn)


@pytest.fixture(scope="module")
def small_file(cnn_trace):
    """The bytes of a small real trace: TinyCNN forward and backward (~460 spans)."""
    return cnn_trace.to_bytes()


def _same(a, b):
    """Field-by-field comparison, so a failure says what differs (== compares in C)."""
    assert len(a) == len(b)
    assert [(s.parent, s.level, s.kind, s.name, s.start_ns, s.end_ns, s.thread, s.flags,
             s.attrs) for s in a] == [(s.parent, s.level, s.kind, s.name, s.start_ns, s.end_ns,
                                       s.thread, s.flags, s.attrs) for s in b]
    assert a.threads == b.threads and a.meta == b.meta and a.counters == b.counters
    assert a == b and not (a != b)


@pytest.mark.parametrize("make", [models.cnn, models.encoder], ids=["cnn", "encoder"])
def test_real_model_round_trip(make, tmp_path):
    trace = _trace_of(make)
    path = tmp_path / "t.xsp"
    xsp.save(trace, path)                              # a pathlib.Path
    loaded = xsp.load(path)
    _same(loaded, trace)
    check_tree(loaded)
    data = trace.to_bytes()
    assert path.read_bytes() == data
    _same(xsp.Trace.from_bytes(data), trace)
    _same(xsp.load(str(path)), trace)             # a str
    _same(xsp.Trace.from_bytes(bytearray(data)), trace)
    assert loaded.to_bytes() == data              # loading and saving again changes nothing
    assert os.listdir(tmp_path) == ["t.xsp"]      # no temporary file left behind


def test_empty_ish_traces_round_trip(tmp_path):
    with xsp.profile(levels="M") as only_region:
        pass
    with xsp.profile(levels="L") as nothing:
        pass
    assert [s.kind for s in only_region.trace] == ["region"]
    assert len(nothing.trace) == 0 and nothing.trace.threads == []
    for i, trace in enumerate((only_region.trace, nothing.trace)):
        path = tmp_path / ("e%d.xsp" % i)
        xsp.save(trace, str(path))
        _same(xsp.load(path), trace)
        _same(xsp.Trace.from_bytes(trace.to_bytes()), trace)


def test_unicode_names_round_trip(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.add_module("blöck", torch.nn.Sequential())
    setattr(model[0], "çonv_ü", torch.nn.Conv2d(1, 1, 1))
    model.add_module("模块🙂", torch.nn.ReLU())
    x = torch.ones(1, 1, 2, 2)
    model(x)
    done = []
    with xsp.profile(name="région ✓") as prof:
        t = threading.Thread(target=lambda: done.append(model(x)), name="wörker-ß")
        t.start()
        t.join()
    trace = prof.trace
    assert [s.name for s in trace.spans(kind="module")] == ["blöck", "blöck.çonv_ü", "模块🙂"]
    assert trace[0].name == "région ✓" and trace.meta["region"] == "région ✓"
    assert ("wörker-ß" in [name for _, name, _ in trace.threads])
    path = tmp_path / "ü.xsp"
    xsp.save(trace, path)
    _same(xsp.load(path), trace)


def test_every_truncation_is_a_format_error(small_file, tmp_path):
    assert issubclass(xsp.TraceFormatError, ValueError)
    for n in range(len(small_file)):
        with pytest.raises(xsp.TraceFormatError) as ei:
            xsp.Trace.from_bytes(small_file[:n])
        e = ei.value
        assert isinstance(e.offset, int) and 0 <= e.offset <= n, (n, e.offset)
        msg = str(e)
        assert msg.startswith("truncated: ") or (n == 0 and msg.startswith(
            "not an xsp trace file: the file is empty")), (n, msg)
        assert msg.endswith("(at byte %d)" % e.offset)
        assert e.path is None
    # through a file: the same error, naming the file
    path = tmp_path / "cut.xsp"
    path.write_bytes(small_file[:len(small_file) // 2])
    with pytest.raises(xsp.TraceFormatError) as ei:
        xsp.load(path)
    assert str(path) in str(ei.value) and "truncated" in str(ei.value)
    assert ei.value.path == str(path) and ei.value.offset <= len(small_file) // 2


def test_trailing_bytes_are_a_format_error(small_file):
    with pytest.raises(xsp.TraceFormatError, match="trailing garbage") as ei:
        xsp.Trace.from_bytes(small_file + b"\x00")
    assert ei.value.offset == len(small_file)


def test_random_byte_flips_never_crash(small_file):
    rng = random.Random(20240611)
    loaded = failed = 0
    for _ in range(400):
        data = bytearray(small_file)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            trace = xsp.Trace.from_bytes(bytes(data))
        except xsp.TraceFormatError as e:
            assert isinstance(e.offset, int) and 0 <= e.offset <= len(data)
            assert str(e).endswith("(at byte %d)" % e.offset)
            failed += 1
        else:
            # whatever loads satisfies the trace invariants (a flipped duration can make a
            # child outlast its parent: the format stores no nesting proof), and the views
            # work on it
            check_tree(trace, nesting=False)
            trace.tree(max_depth=2)
            assert len(trace.to_pandas()) == len(trace)
            assert xsp.Trace.from_bytes(trace.to_bytes()) == trace
            loaded += 1
    assert loaded + failed == 400 and loaded > 0 and failed > 0


def test_foreign_files(tmp_path):
    cases = {
        "x.png": b"\x89PNG\r\n\x1a\n" + bytes(24),
        "x.json": b'{"traceEvents": []}',
        "empty.xsp": b"",
        "arr.xsp": b"\x93\x01\x02\x03",           # a msgpack array, not ours
    }
    for name, data in cases.items():       # the .xsp reader, whatever the extension says
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(xsp.TraceFormatError) as ei:
            xsp.load(path, format="xsp")
        assert str(path) in str(ei.value), name
        assert ei.value.offset == 0 or name == "arr.xsp"
        assert ei.value.path == str(path)
    with pytest.raises(xsp.TraceFormatError, match="not an xsp trace file"):
        xsp.load(tmp_path / "x.png")
    with pytest.raises(OSError) as ei:
        xsp.load(tmp_path)                         # a directory
    assert not isinstance(ei.value, xsp.TraceFormatError)
    assert str(tmp_path) in str(ei.value)
    missing = tmp_path / "nope.xsp"
    with pytest.raises(OSError) as ei:
        xsp.load(missing)
    assert str(missing) in str(ei.value) and "No such file" in str(ei.value)


def test_format_error_names_the_path_once(tmp_path):
    """Regression guard (bug: xsp_trace_load prefixes its message with the path and the
    binding's load_error prefixes it again, giving "p: p: not an xsp trace file ...")."""
    path = tmp_path / "x.json"
    path.write_bytes(b"{}")
    with pytest.raises(xsp.TraceFormatError) as ei:
        xsp.load(path)
    assert str(ei.value).count(str(path)) == 1


def test_save_errors(tmp_path, cnn_trace):
    bad = tmp_path / "no" / "such" / "dir" / "t.xsp"
    with pytest.raises(OSError) as ei:
        xsp.save(cnn_trace, bad)
    assert str(bad) in str(ei.value)
    assert not bad.parent.exists()
    pathlib.Path(tmp_path / "d").mkdir()
    with pytest.raises(OSError):
        xsp.save(cnn_trace, tmp_path / "d", format="xsp")   # a directory is not replaced
    assert (tmp_path / "d").is_dir()
