"""Hand-built traces: Trace.from_spans (over _core.build).  Guards the exact contents of a
built trace (columns, attributes, tracks, meta, counters, the DataFrame), its file round trip,
and that every bad input is refused with the right exception naming the span and the key."""
import pandas as pd
import pytest
import torch

import xsp
from xsp import _core
from xsp.values.trace import KINDS, LEVELS, Trace

import models

THREADS = [(101, "main", 0), (1 << 32 | 7, "stream 7", 1)]
SPANS = [
    dict(name="xsp.profile", kind="region", start_ns=1000, end_ns=2000),
    dict(name="Net", kind="model", start_ns=1100, end_ns=1900, parent=0,
         attrs={"type": "Net"}),
    dict(name="fc", kind="module", start_ns=1200, end_ns=1500, parent=1,
         attrs={"type": "Linear", "scale": 0.5}),
    dict(name="aten::addmm", kind="op", start_ns=1300, end_ns=1400, parent=2,
         attrs={"seq": 7, "neg": -(1 << 63)}, flags=2),
    dict(name="gemm_kernel", kind="kernel", start_ns=1350, end_ns=1380, parent=3, thread=1),
    dict(name="späte", kind="scope", start_ns=1600, end_ns=1600, parent=1, level="G",
         attrs={}),
]
META = {"region": "xsp.profile", "steps": 0, "ratio": 2.5}
COUNTERS = {"lost.cap": 3, "forced_end": 1}


def col(df, name):
    """A DataFrame column as a list, missing values (None or NaN, as pandas chooses) as None."""
    return [None if pd.isna(v) else v for v in df[name].tolist()]


@pytest.fixture
def built():
    return Trace.from_spans(SPANS, threads=THREADS, meta=META, counters=COUNTERS)


def test_from_spans_columns_exact(built):
    tr = built
    assert len(tr) == 6
    assert tr.start_ns.tolist() == [1000, 1100, 1200, 1300, 1350, 1600]
    assert tr.end_ns.tolist() == [2000, 1900, 1500, 1400, 1380, 1600]
    assert tr.parent_ids.tolist() == [-1, 0, 1, 2, 3, 1]
    assert [s.name for s in tr] == [s["name"] for s in SPANS]
    assert [s.kind for s in tr] == ["region", "model", "module", "op", "kernel", "scope"]
    # levels default from the kind; an explicit level wins
    assert [s.level for s in tr] == ["M", "M", "L", "L", "G", "G"]
    assert [s.thread for s in tr] == [101, 101, 101, 101, 1 << 32 | 7, 101]
    assert [s.thread_name for s in tr] == ["main"] * 4 + ["stream 7", "main"]
    assert [s.flags for s in tr] == [0, 0, 0, 2, 0, 0]
    assert [s.attrs for s in tr] == [{}, {"type": "Net"}, {"type": "Linear", "scale": 0.5},
                                     {"seq": 7, "neg": -(1 << 63)}, {}, {}]
    assert tr.threads == THREADS
    assert tr.meta == META
    assert tr.counters == COUNTERS
    assert tr.lost == 3
    assert tr.self_ns.tolist() == [200, 500, 200, 100, 30, 0]  # the kernel: another track
    assert tr._data.check() is None


def test_from_spans_to_pandas(built):
    df = built.to_pandas()
    assert df["id"].tolist() == list(range(6))
    assert df["parent"].tolist() == [-1, 0, 1, 2, 3, 1]
    assert df["level"].tolist() == ["M", "M", "L", "L", "G", "G"]
    assert df["kind"].tolist() == ["region", "model", "module", "op", "kernel", "scope"]
    assert df["name"].tolist() == [s["name"] for s in SPANS]
    assert df["duration_ns"].tolist() == [1000, 800, 300, 100, 30, 0]
    assert df["thread"].tolist() == [101, 101, 101, 101, 1 << 32 | 7, 101]
    assert df["depth"].tolist() == [0, 1, 2, 3, 4, 2]
    assert col(df, "module") == [None, "Net", "fc", "fc", "fc", "Net"]
    assert df["flags"].tolist() == [0, 0, 0, 2, 0, 0]
    assert col(df, "type") == [None, "Net", "Linear", None, None, None]
    assert col(df, "scale") == [None, None, 0.5, None, None, None]
    assert col(df, "seq") == [None, None, None, 7, None, None]
    assert col(df, "neg") == [None, None, None, -(1 << 63), None, None]


def test_from_spans_save_load(built, tmp_path):
    path = tmp_path / "built.xsp"
    xsp.save(built, path)
    back = xsp.load(path)
    assert back == built
    assert back.to_bytes() == built.to_bytes()
    assert Trace.from_bytes(built.to_bytes()) == built
    assert [s.attrs for s in back] == [s.attrs for s in built]
    assert back.threads == THREADS and back.meta == META and back.counters == COUNTERS


def test_from_spans_defaults():
    tr = Trace.from_spans([dict(name="r", kind="region", start_ns=0, end_ns=10),
                           dict(name="k", kind="memcpy", start_ns=1, end_ns=2, parent=0)])
    assert tr.threads == [(1, "main", 0)]
    assert tr.meta == {} and tr.counters == {}
    assert [s.level for s in tr] == ["M", "G"]
    assert [s.thread for s in tr] == [1, 1]
    assert [s.parent for s in tr] == [None, 0]
    empty = Trace.from_spans([])
    assert len(empty) == 0 and empty.threads == [(1, "main", 0)]
    assert Trace.from_bytes(empty.to_bytes()) == empty


def test_from_spans_rebuilds_a_recorded_trace(fake_clock):
    """An importer's path: every span of a real trace, as dicts, builds an equal trace."""
    m, a = models.Add(), torch.ones(2)
    fake_clock(1000, 10)
    with xsp.profile() as prof:
        m(a, a)
    tr = prof.trace
    tids = [t[0] for t in tr.threads]
    spans = [dict(name=s.name, kind=s.kind, level=s.level, start_ns=s.start_ns,
                  end_ns=s.end_ns, parent=s.parent, thread=tids.index(s.thread),
                  flags=s.flags, attrs=s.attrs) for s in tr]
    again = Trace.from_spans(spans, threads=tr.threads, meta=tr.meta, counters=tr.counters)
    assert again == tr
    # attribute columns come in string-id order, which differs between the two: sort them
    a, b = again.to_pandas(), tr.to_pandas()
    assert a[sorted(a.columns)].equals(b[sorted(b.columns)])


def span(**kw):
    d = dict(name="s", kind="op", start_ns=0, end_ns=1)
    d.update(kw)
    return d


@pytest.mark.parametrize("spans, exc, words", [
    ([span(), span(colour="red")], ValueError, ["span 1", "unknown key", "'colour'"]),
    ([span(), {"kind": "op", "start_ns": 0, "end_ns": 1}], ValueError,
     ["span 1", "missing key", "'name'"]),
    ([span(kind="gpu")], ValueError, ["span 0", "'kind'", "unknown kind 'gpu'"]),
    ([span(kind=4)], ValueError, ["span 0", "'kind'", "unknown kind 4"]),
    ([span(level="X")], ValueError, ["span 0", "'level'", "unknown level 'X'"]),
    ([span(level=1)], ValueError, ["span 0", "'level'", "unknown level 1"]),
    ([span(), ("s", "op", 0, 1)], TypeError, ["span 1 must be a dict", "tuple"]),
    # the trace's invariant check, passed through
    ([span(start_ns=5, end_ns=9), span(start_ns=4, end_ns=9)], ValueError,
     ["span 1: starts before the previous span (spans must be sorted by start)"]),
    ([span(parent=1), span()], ValueError, ["span 0: parent is not before the span"]),
    ([span(), span(parent=1)], ValueError, ["span 1: parent is not before the span"]),
    ([span(start_ns=5, end_ns=4)], ValueError, ["span 0: ends before it starts"]),
    # ranges and types, checked while building
    ([span(), span(thread=2)], ValueError, ["span 1: thread 2 is not an index into threads"]),
    ([span(thread=-1)], ValueError, ["span 0: thread -1 out of range"]),
    ([span(parent=-2)], ValueError, ["span 0: parent -2 is neither -1 (a root) nor a span id"]),
    ([span(parent="0")], TypeError, ["span 0: parent must be an int", "str"]),
    ([span(start_ns=-1)], ValueError, ["span 0: start_ns -1 out of range"]),
    ([span(end_ns=1 << 64)], ValueError, ["span 0: end_ns", "out of range"]),
    ([span(flags=1 << 32)], ValueError, ["span 0: flags 4294967296 out of range"]),
    ([span(start_ns=1.0)], TypeError, ["span 0: start_ns must be an int, not float"]),
    ([span(), span(name=b"x")], TypeError, ["span 1: name must be a str, not bytes"]),
    ([span(attrs=[("a", 1)])], TypeError, ["span 0: attrs must be a dict, not list"]),
    ([span(attrs={1: 1})], TypeError, ["span 0: attribute names must be str, not int"]),
    ([span(attrs={"a": None})], TypeError,
     ["span 0: attribute 'a' must be an int, float or str, not NoneType"]),
    ([span(attrs={"a": 1 << 63})], OverflowError,
     ["span 0: attribute 'a'", "does not fit in a 64-bit signed int"]),
])
def test_from_spans_errors(spans, exc, words):
    with pytest.raises(exc) as e:
        Trace.from_spans(spans)
    for w in words:
        assert w in str(e.value)
    assert type(e.value) is exc


@pytest.mark.parametrize("kw, exc, words", [
    (dict(threads=[(1, "main", 3)]), ValueError, ["thread 0: kind 3 out of range (0..2)"]),
    (dict(threads=[(1, "main")]), ValueError, ["thread 0 must have 3 items"]),
    (dict(threads=[(1, 2, 0)]), TypeError, ["thread 0: name must be a str, not int"]),
    (dict(threads=[(-1, "main", 0)]), ValueError, ["thread 0: tid -1 out of range"]),
    (dict(threads=[]), ValueError, ["span 0: thread 0 is not an index into threads"]),
    (dict(threads=5), TypeError, ["threads must be a sequence, not int"]),
    (dict(meta={"a": [1]}), TypeError, ["meta['a'] must be an int, float or str, not list"]),
    (dict(meta={1: 1}), TypeError, ["meta keys must be str, not int"]),
    (dict(meta=[("a", 1)]), TypeError, ["meta must be a dict, not list"]),
    (dict(meta={"a\0b": 1}), ValueError, ["meta key", "contains a NUL character"]),
    (dict(counters={"lost.cap": 1.0}), TypeError, ["counters['lost.cap'] must be an int"]),
    (dict(counters={"x": 1 << 64}), OverflowError, ["counters['x']", "64-bit"]),
])
def test_from_spans_argument_errors(kw, exc, words):
    with pytest.raises(exc) as e:
        Trace.from_spans([span()], **kw)
    for w in words:
        assert w in str(e.value)
    assert type(e.value) is exc


@pytest.mark.parametrize("row, exc, words", [
    ((0, 1, -1, 3, 4, "s", 0, 0, {}), ValueError, ["span 0: level 3 out of range (0..2)"]),
    ((0, 1, -1, 1, len(KINDS), "s", 0, 0, {}), ValueError,
     ["span 0: kind %d out of range (0..%d)" % (len(KINDS), len(KINDS) - 1)]),
    ((0, 1, -1, 1, -1, "s", 0, 0, {}), ValueError, ["span 0: kind -1 out of range"]),
    ((0, 1, -1, 1, 4, "s", 0, 0), ValueError, ["span 0 must have 9 items", "not 8"]),
    ("span", TypeError, ["span 0 must be a tuple", "not str"]),
])
def test_core_build_errors(row, exc, words):
    with pytest.raises(exc) as e:
        _core.build([row], [(1, "main", 0)], {}, {})
    for w in words:
        assert w in str(e.value)
    assert type(e.value) is exc


def test_core_build_accepts_lists_and_bools():
    td = _core.build([[0, 1, -1, True, 4, "s", 0, False, {"b": True}]], [[5, "t", 0]], {}, {})
    tr = Trace(td)
    assert tr[0].level == LEVELS[1] and tr[0].attrs == {"b": 1} and tr.threads == [(5, "t", 0)]
