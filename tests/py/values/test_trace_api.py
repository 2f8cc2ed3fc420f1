"""xsp.Trace and xsp.Span: indexing, iteration, navigation, durations, filters, views."""
import inspect

import numpy as np
import pandas as pd
import pytest
import torch

import xsp
from helpers import check_tree, main_tid
import models


class Outer(torch.nn.Module):
    """A model span with a module span (inner: one add) and two muls of its own."""

    def __init__(self):
        super().__init__()
        self.inner = models.Add()

    def forward(self, a, b):
        return torch.mul(torch.mul(self.inner(a, b), b), b)


def call(m, a):
    """The recorded call of the tiny traces, from one line (their model span's call_site)."""
    return m(a, a)


def _where(fn, text=None):
    """file:line of fn's first line, or of the line of fn that holds text."""
    code = fn.__code__
    if text is None:
        return "%s:%d" % (code.co_filename, code.co_firstlineno)
    lines, first = inspect.getsourcelines(fn)
    line, = [first + k for k, ln in enumerate(lines) if text in ln]
    return "%s:%d" % (code.co_filename, line)


@pytest.fixture
def tiny(fake_clock):
    """A 6-span trace with exact times (fake clock from 1000, step 10):
    1000 start, 1010 region, 1020 step#0, 1030 Outer, 1040 inner, 1050/1060 add,
    1070 inner end, 1080/1090 mul, 1100/1110 mul, 1120 Outer end, 1130 step#0 end (elided),
    1140 region end, 1150 stop."""
    m, a = Outer(), torch.ones(2)
    m(a, a)
    fake_clock(1000, 10)
    with xsp.profile() as prof:
        call(m, a)
    return prof.trace


SEQ = object()   # stands for the ops' autograd sequence number, which depends on what ran before
ROWS = [
    # id, parent, level, kind, name, start, end, duration, self, depth, module, attrs
    (0, None, "M", "region", "xsp.profile", 1010, 1140, 130, 40, 0, None, {}),
    (1, 0, "M", "model", "Outer", 1030, 1120, 90, 40, 1, "Outer",
     {"type": "Outer", "source": _where(Outer.forward), "call_site": _where(call, "m(a, a)")}),
    (2, 1, "L", "module", "inner", 1040, 1070, 30, 20, 2, "inner",
     {"type": "Add", "source": _where(models.Add.forward),
      "call_site": _where(Outer.forward, "self.inner(a, b)")}),
    (3, 2, "L", "op", "aten::add", 1050, 1060, 10, 10, 3, "inner", {"seq": SEQ}),
    (4, 1, "L", "op", "aten::mul", 1080, 1090, 10, 10, 2, "Outer", {"seq": SEQ}),
    (5, 1, "L", "op", "aten::mul", 1100, 1110, 10, 10, 2, "Outer", {"seq": SEQ}),
]


def _rows(tiny):
    """ROWS with SEQ replaced by the ops' sequence number: the thread's next autograd sequence
    number, the same for all three since none of them creates an autograd node."""
    seqs = {s.attrs["seq"] for s in tiny.spans(kind="op")}
    assert len(seqs) == 1
    seq = seqs.pop()
    assert isinstance(seq, int) and seq >= 0
    return [r[:11] + ({k: seq if v is SEQ else v for k, v in r[11].items()},) for r in ROWS]


def test_spans_exact(tiny):
    check_tree(tiny)
    assert len(tiny) == 6
    got = [(s.id, s.parent, s.level, s.kind, s.name, s.start_ns, s.end_ns, s.duration_ns,
            s.self_ns, int(tiny.depth[s.id]), None, s.attrs) for s in tiny]
    assert got == [r[:10] + (None, r[11]) for r in _rows(tiny)]
    for s in tiny:
        assert (s.thread, s.thread_name, s.flags) == (main_tid(), "MainThread", 0)
    assert tiny.threads == [(main_tid(), "MainThread", 0)]


def test_iteration_and_indexing(tiny):
    ids = [s.id for s in tiny]
    assert ids == list(range(6))
    starts = [s.start_ns for s in tiny]
    assert starts == sorted(starts)
    assert tiny[0].name == "xsp.profile"
    assert tiny[-1].id == 5 and tiny[-6].id == 0
    assert tiny[np.int64(2)].name == "inner"
    for bad in (6, -7, 100):
        with pytest.raises(IndexError, match="out of range"):
            tiny[bad]
    with pytest.raises(TypeError, match="span ids"):
        tiny["inner"]
    with pytest.raises(TypeError):
        tiny[1.0]


def test_navigation(tiny):
    region, outer, inner, add, mul1, mul2 = list(tiny)
    assert tiny.roots() == [region]
    assert region.children == [outer]
    assert outer.children == [inner, mul1, mul2]
    assert inner.children == [add]
    assert add.children == [] and mul2.children == []
    assert add.parent_span == inner and region.parent_span is None
    assert add.ancestors() == [inner, outer, region]
    assert region.ancestors() == []
    assert tiny.children_of(1).tolist() == [2, 4, 5]
    assert tiny.parent_ids.tolist() == [-1, 0, 1, 2, 1, 1]
    # spans compare by trace and id, and hash accordingly
    assert tiny[2] == inner and tiny[2] != tiny[3] and len({tiny[2], inner, tiny[3]}) == 2


def test_durations(tiny):
    assert tiny.duration_ns.tolist() == [130, 90, 30, 10, 10, 10]
    # self = duration - the durations of same-thread children
    assert tiny.self_ns.tolist() == [130 - 90, 90 - 30 - 10 - 10, 30 - 10, 10, 10, 10]
    assert tiny.duration_ns.dtype == np.int64 and tiny.self_ns.dtype == np.int64
    assert tiny.depth.tolist() == [0, 1, 2, 3, 2, 2]


def test_filters(tiny):
    assert [s.id for s in tiny.spans(kind="op")] == [3, 4, 5]
    assert [s.id for s in tiny.spans(level="M")] == [0, 1]
    assert [s.id for s in tiny.spans(level="L")] == [2, 3, 4, 5]
    assert [s.id for s in tiny.spans(name="aten::mul")] == [4, 5]
    assert [s.id for s in tiny.spans(kind="op", name="aten::add", level="L")] == [3]
    assert tiny.spans(kind="op", level="M") == []
    assert tiny.spans(name="no such span") == []
    assert tiny.spans(level="G") == []
    with pytest.raises(ValueError, match="unknown kind 'bogus'"):
        tiny.spans(kind="bogus")
    with pytest.raises(ValueError, match="unknown level 'X'"):
        tiny.spans(level="X")


def test_tree_text(tiny):
    assert tiny.tree(fold=False) == "\n".join([
        "xsp.profile [region] 130 ns (self 40 ns)",
        "└─ Outer [model] 90 ns (self 40 ns)",
        "   ├─ inner [module Add] 30 ns (self 20 ns)",
        "   │  └─ aten::add [op] 10 ns",
        "   ├─ aten::mul [op] 10 ns",
        "   └─ aten::mul [op] 10 ns",
    ])
    # by default repeated siblings (same name and kind, one after the other) fold into one line
    assert tiny.tree() == "\n".join([
        "xsp.profile [region] 130 ns (self 40 ns)",
        "└─ Outer [model] 90 ns (self 40 ns)",
        "   ├─ inner [module Add] 30 ns (self 20 ns)",
        "   │  └─ aten::add [op] 10 ns",
        "   └─ x2 aten::mul [op] 20 ns (mean 10 ns)",
    ])
    assert tiny.tree(max_depth=1) == "\n".join([
        "xsp.profile [region] 130 ns (self 40 ns)",
        "└─ Outer [model] 90 ns (self 40 ns)",
    ])
    assert tiny.tree(max_depth=0) == "xsp.profile [region] 130 ns (self 40 ns)"
    assert tiny.tree(max_children=1) == "\n".join([
        "xsp.profile [region] 130 ns (self 40 ns)",
        "└─ Outer [model] 90 ns (self 40 ns)",
        "   ├─ inner [module Add] 30 ns (self 20 ns)",
        "   │  └─ aten::add [op] 10 ns",
        "   └─ … 2 more (20 ns)",
    ])
    assert tiny.tree(min_duration_ns=20) == "\n".join([
        "xsp.profile [region] 130 ns (self 40 ns)",
        "└─ Outer [model] 90 ns (self 40 ns)",
        "   └─ inner [module Add] 30 ns (self 20 ns)",
    ])


def test_to_pandas(tiny):
    df = tiny.to_pandas()
    assert list(df.columns) == ["id", "parent", "level", "kind", "name", "start_ns", "end_ns",
                                "duration_ns", "self_ns", "thread", "depth", "module",
                                "flags", "seq", "type", "source", "call_site"]
    assert len(df) == len(tiny)
    for col in ("id", "parent", "start_ns", "end_ns", "duration_ns", "self_ns", "thread",
                "flags"):
        assert df[col].dtype == np.int64, col
    assert df["depth"].dtype == np.int32
    for col in ("level", "kind", "name"):
        assert pd.api.types.is_string_dtype(df[col]) or df[col].dtype == object, col
    for row, exp in zip(df.itertuples(index=False), _rows(tiny)):
        i, parent, level, kind, name, start, end, dur, self_, depth, module, attrs = exp
        assert (row.id, row.parent, row.level, row.kind, row.name, row.start_ns, row.end_ns,
                row.duration_ns, row.self_ns, row.depth, row.flags, row.thread) == (
            i, -1 if parent is None else parent, level, kind, name, start, end, dur, self_,
            depth, 0, main_tid())
        assert (module is None and pd.isna(row.module)) or row.module == module
        for key in ("seq", "type"):
            v = getattr(row, key)
            assert (key not in attrs and pd.isna(v)) or v == attrs[key], (i, key, v)
    # the same values as the Span objects, for every span
    for s in tiny:
        r = df.iloc[s.id]
        assert (r["name"], r["kind"], r["start_ns"], r["end_ns"], r["self_ns"]) == (
            s.name, s.kind, s.start_ns, s.end_ns, s.self_ns)


def test_top(tiny):
    ops = tiny.top(kind="op")
    assert list(ops.columns) == ["name", "type", "calls", "total_ns", "mean_ns", "self_ns",
                                 "share"]
    assert ops[["name", "calls", "total_ns", "mean_ns", "self_ns"]].values.tolist() == [
        ["aten::mul", 2, 20, 10, 20], ["aten::add", 1, 10, 10, 10]]
    assert ops["share"].tolist() == [20 / 130, 10 / 130]
    mods = tiny.top()                      # kind="module", leaf modules only
    assert list(mods.columns) == ["name", "type", "calls", "total_ns", "mean_ns", "self_ns",
                                  "backward_ns", "share"]
    assert mods.values.tolist() == [["inner", "Add", 1, 30, 30, 20, 0, 30 / 130]]
    assert tiny.top(kind="op", n=1)["name"].tolist() == ["aten::mul"]


def test_reprs(tiny):
    assert repr(tiny) == "<xsp.Trace 6 spans (M 2, L 4), 1 threads, 130 ns, lost 0>"
    assert [repr(s) for s in tiny] == [
        "<Span #0 M region 'xsp.profile' 130 ns>", "<Span #1 M model 'Outer' 90 ns>",
        "<Span #2 L module 'inner' 30 ns>", "<Span #3 L op 'aten::add' 10 ns>",
        "<Span #4 L op 'aten::mul' 10 ns>", "<Span #5 L op 'aten::mul' 10 ns>"]


def test_repr_units():
    model, x = models.cnn()
    model(x)
    with xsp.profile() as prof:
        model(x)
    r = repr(prof.trace)
    n = len(prof.trace)
    nm = len(prof.trace.spans(level="M"))
    assert r.startswith("<xsp.Trace %d spans (M %d, L %d), 1 threads, " % (n, nm, n - nm))
    assert r.endswith(" ms, lost 0>") or r.endswith(" us, lost 0>")


def test_equality(tiny, fake_clock):
    assert tiny == xsp.Trace.from_bytes(tiny.to_bytes())
    assert not (tiny != xsp.Trace.from_bytes(tiny.to_bytes()))
    assert tiny != 5 and tiny != None  # noqa: E711
    with pytest.raises(TypeError):
        hash(tiny)
    # the same code under the same fake clock gives an equal trace except for metadata that
    # cannot repeat (nothing here: same pid, thread, versions) ...
    m, a = Outer(), torch.ones(2)
    fake_clock(1000, 10)
    with xsp.profile() as prof:
        call(m, a)
    assert prof.trace == tiny
    # ... and a different name makes it different
    fake_clock(1000, 10)
    with xsp.profile(name="other") as prof2:
        call(m, a)
    assert prof2.trace != tiny
    # ... and so does another call site: a call from another line
    fake_clock(1000, 10)
    with xsp.profile() as prof3:
        m(a, a)
    assert prof3.trace != tiny


def test_tree_of_a_subtree(tiny):
    sub = "\n".join(["inner [module Add] 30 ns (self 20 ns)", "└─ aten::add [op] 10 ns"])
    assert tiny.tree(root=2) == sub
    assert tiny.tree(root=tiny[2]) == sub
    assert tiny.tree(root=-1) == "aten::mul [op] 10 ns"
    assert tiny.tree(root=1, max_depth=1, fold=False).splitlines() == [
        "Outer [model] 90 ns (self 40 ns)", "├─ inner [module Add] 30 ns (self 20 ns)",
        "├─ aten::mul [op] 10 ns", "└─ aten::mul [op] 10 ns"]
    assert tiny.tree(root=1, max_depth=1).splitlines() == [
        "Outer [model] 90 ns (self 40 ns)", "├─ inner [module Add] 30 ns (self 20 ns)",
        "└─ x2 aten::mul [op] 20 ns (mean 10 ns)"]
    with pytest.raises(IndexError):
        tiny.tree(root=6)


def test_to_pandas_module_of_backward_work():
    """A backward function, and what runs inside it, belong to the module of the forward op it
    differentiates; AccumulateGrad (no forward op) and the engine's wrappers to none."""
    model, x = models.cnn()
    models.fwd_bwd(model, x)
    with xsp.profile() as prof:
        models.fwd_bwd(model, x)
    trace = prof.trace
    df = trace.to_pandas()
    assert len(df) == len(trace)
    module = df["module"].tolist()
    checked = 0
    for b in trace.spans(kind="backward"):
        if "fwd_op" in b.attrs:
            f = b.attrs["fwd_op"]
            want = module[f]
            assert df["fwd_op"][b.id] == f and df["seq"][b.id] == b.attrs["seq"]
            checked += 1
        else:
            want = module[b.parent]
            assert pd.isna(want)          # AccumulateGrad, under the engine's op, under region
        assert module[b.id] == want or (pd.isna(want) and pd.isna(module[b.id]))
        stack = list(b.children)
        while stack:
            c = stack.pop()
            assert module[c.id] == module[b.id] or (pd.isna(want) and pd.isna(module[c.id]))
            stack.extend(c.children)
    assert checked == 25                  # all but the 20 AccumulateGrads
    conv = [b for b in trace.spans(name="ConvolutionBackward0")]
    assert sorted(module[b.id] for b in conv) == [
        "conv1", "layer1.0.conv1", "layer1.0.conv2", "layer1.1.conv1", "layer1.1.conv2",
        "layer1.1.downsample.0"]
    # forward ops: the nearest enclosing module or model span
    for s in trace.spans(kind="op"):
        if s.start_ns >= trace.spans(kind="model")[0].end_ns:
            break
        mod = [a for a in s.ancestors() if a.kind in ("module", "model")][0]
        assert module[s.id] == mod.name


def test_empty_trace_views():
    """Level L with nothing run: no span, no thread; every view still works."""
    with xsp.profile(levels="L") as prof:
        pass
    t = prof.trace
    assert len(t) == 0 and list(t) == [] and t.roots() == [] and t.threads == []
    assert repr(t) == "<xsp.Trace 0 spans (none), 0 threads, 0 ns, lost 0>"
    assert t.tree() == ""
    with pytest.raises(IndexError):
        t[0]
    df = t.to_pandas()
    assert len(df) == 0 and list(df.columns) == [
        "id", "parent", "level", "kind", "name", "start_ns", "end_ns", "duration_ns",
        "self_ns", "thread", "depth", "module", "flags"]
    assert len(t.top()) == 0
    assert t.spans(kind="op") == [] and t.self_ns.tolist() == []


def test_top_attributes_backward_time_to_layers():
    """A layer's backward_ns in top() is the time of the backward functions linked (fwd_op) to
    the forward ops that ran in it."""
    model, x = models.cnn()
    models.fwd_bwd(model, x)
    with xsp.profile() as prof:
        models.fwd_bwd(model, x)
    tr = prof.trace
    top = tr.top(n=100).set_index("name")
    df = tr.to_pandas()
    bw = df[df.kind == "backward"]
    conv = "layer1.0.conv1"
    expected = int(bw[bw.module == conv]["duration_ns"].sum())
    assert expected > 0
    assert int(top.loc[conv, "backward_ns"]) == expected
    # each of those backward functions is linked to a forward op inside that Conv2d
    for fid in bw[bw.module == conv]["fwd_op"]:
        assert conv in [a.name for a in tr[int(fid)].ancestors()]


def test_span_columns_are_read_only_views_of_the_c_spans(tiny):
    """The span columns are strided views of the C span array (no copy at stop or load): exact
    values, read-only, and they keep the C trace alive after the Trace is gone."""
    import gc

    data = tiny._data
    itemsize, fields = data.span_layout()
    assert itemsize == 40
    assert [f[0] for f in fields] == ["start_ns", "end_ns", "parent", "name", "thread",
                                      "attr_off", "attr_n", "level", "kind", "flags"]
    assert [(f[1], f[2]) for f in fields] == [(0, 8), (8, 8), (16, 4), (20, 4), (24, 4),
                                              (28, 4), (32, 2), (34, 1), (35, 1), (36, 4)]
    view = memoryview(data)
    assert view.readonly and view.nbytes == 40 * len(tiny)
    import io
    with pytest.raises(TypeError, match="read-write"):     # a writable export is refused
        io.BytesIO(b"x").readinto(data)
    with pytest.raises(ValueError):
        np.frombuffer(data, dtype=np.uint8).setflags(write=True)
    for col in (tiny.start_ns, tiny.end_ns, tiny._parent, tiny._kind, tiny._flags):
        assert not col.flags.writeable
        assert col.strides == (40,)
        with pytest.raises(ValueError):
            col[0] = 1
    assert tiny.start_ns.dtype == np.int64 and tiny.end_ns.dtype == np.int64
    starts = tiny.start_ns
    assert starts.tolist() == [r[5] for r in ROWS]
    del tiny, data, view
    gc.collect()
    assert starts.tolist() == [r[5] for r in ROWS]     # still valid: the view holds the trace


def test_empty_trace_columns():
    tr = xsp.Trace.from_spans([])
    assert len(tr) == 0 and tr.start_ns.shape == (0,) and tr.start_ns.dtype == np.int64
    assert memoryview(tr._data).nbytes == 0
    assert tr.duration_ns.tolist() == [] and tr.roots() == []


# -- the public span table ---------------------------------------------------------------------

def test_public_span_table_columns(tiny):
    from xsp.values.trace import KINDS, LEVELS
    rows = _rows(tiny)
    cols = {"kind_codes": np.uint8, "level_codes": np.uint8, "name_codes": np.uint32,
            "thread_index": np.uint32, "flag_bits": np.uint32}
    for name, dtype in cols.items():
        col = getattr(tiny, name)
        assert col.dtype == dtype and col.shape == (6,), name
        assert not col.flags.writeable, name
        with pytest.raises(ValueError):
            col[0] = 1
    assert tiny.kind_codes.tolist() == [KINDS.index(r[3]) for r in rows]
    assert tiny.level_codes.tolist() == [LEVELS.index(r[2]) for r in rows]
    assert [tiny.strings[c] for c in tiny.name_codes] == [r[4] for r in rows]
    assert tiny.thread_index.tolist() == [0] * 6
    assert tiny.threads[0] == (main_tid(), "MainThread", 0)
    assert tiny.flag_bits.tolist() == [0] * 6
    assert [tiny.attrs_of(i) for i in range(6)] == [r[11] for r in rows]
    a = tiny.attrs_of(1)
    a["type"] = "changed"                      # a new dict each time
    assert tiny.attrs_of(1) == rows[1][11] and tiny[1].attrs == rows[1][11]
    ids, values = tiny.attr_column("type")
    assert ids.dtype == np.int64 and ids.tolist() == [1, 2] and values == ["Outer", "Add"]
    ids, values = tiny.attr_column("seq")
    seq = rows[3][11]["seq"]
    assert ids.tolist() == [3, 4, 5] and values.dtype == np.int64
    assert values.tolist() == [seq] * 3
    ids, values = tiny.attr_column("no such key")
    assert ids.dtype == np.int64 and ids.tolist() == [] and values.tolist() == []


def test_attr_column_types():
    tr = xsp.Trace.from_spans([
        dict(name="r", kind="region", start_ns=0, end_ns=10, attrs={"i": 7, "f": 0.5, "m": 1}),
        dict(name="a", kind="module", start_ns=1, end_ns=5, parent=0, attrs={"s": "x"}),
        dict(name="b", kind="op", start_ns=2, end_ns=3, parent=1,
             attrs={"i": -(1 << 63), "f": 2.0, "m": "y", "s": "z"}),
        dict(name="c", kind="op", start_ns=6, end_ns=7, parent=0, attrs={"m": 2.5})])
    ids, v = tr.attr_column("i")
    assert ids.tolist() == [0, 2] and v.dtype == np.int64 and v.tolist() == [7, -(1 << 63)]
    ids, v = tr.attr_column("f")
    assert ids.tolist() == [0, 2] and v.dtype == np.float64 and v.tolist() == [0.5, 2.0]
    assert tr.attr_column("s")[0].tolist() == [1, 2] and tr.attr_column("s")[1] == ["x", "z"]
    ids, v = tr.attr_column("m")                 # mixed types: a list of Python values
    assert ids.tolist() == [0, 2, 3] and v == [1, "y", 2.5]
    assert [type(x) for x in v] == [int, str, float]
    assert tr.attr_column("r")[0].tolist() == []  # a span name, not an attribute key


def test_nearest_ancestor(tiny):
    from xsp.values.trace import KINDS
    mod = np.isin(tiny.kind_codes, (KINDS.index("module"), KINDS.index("model")))
    assert tiny.nearest_ancestor(mod).tolist() == [-1, 1, 2, 2, 1, 1]
    assert tiny.nearest_ancestor(mod, include_self=False).tolist() == [-1, -1, 1, 2, 1, 1]
    none = np.zeros(6, dtype=bool)
    assert tiny.nearest_ancestor(none).tolist() == [-1] * 6
    assert tiny.nearest_ancestor(~none, include_self=False).tolist() == [-1, 0, 1, 2, 1, 1]
    assert tiny.nearest_ancestor(~none).dtype == np.int64
    with pytest.raises(ValueError, match="one entry per span"):
        tiny.nearest_ancestor(np.zeros(5, dtype=bool))
    with pytest.raises(TypeError, match="boolean"):
        tiny.nearest_ancestor(np.zeros(6, dtype=np.int64))
    empty = xsp.Trace.from_spans([])
    assert empty.nearest_ancestor(np.zeros(0, dtype=bool)).tolist() == []


def test_walks_over_a_parent_array():
    """xsp.trace's helpers, which the analyses use on span tables: exact results on a forest
    against the plain walk, and a cycle refused."""
    from xsp.values.trace import ancestor_count, nearest_ancestor, self_time
    #        0   1  2  3  4   5  6  7  8
    par = [-1, 0, 1, 2, 1, -1, 5, 6, 3]
    mask = np.array([0, 1, 0, 1, 0, 0, 0, 1, 0], dtype=bool)
    assert nearest_ancestor(par, mask).tolist() == [-1, 1, 1, 3, 1, -1, -1, 7, 3]
    assert nearest_ancestor(par, mask, include_self=False).tolist() == [
        -1, -1, 1, 1, 1, -1, -1, -1, 3]
    assert ancestor_count(par).tolist() == [0, 1, 2, 3, 2, 0, 1, 2, 4]
    assert ancestor_count(par, mask).tolist() == [0, 0, 1, 1, 1, 0, 0, 0, 2]
    # a deep chain: pointer jumping takes about log2(depth) passes, same answer
    n = 5000
    chain = np.arange(-1, n - 1, dtype=np.int64)
    deep = np.zeros(n, dtype=bool)
    deep[[0, 1234]] = True
    assert ancestor_count(chain).tolist() == list(range(n))
    got = nearest_ancestor(chain, deep)
    assert got[:1234].tolist() == [0] * 1234 and got[1234:].tolist() == [1234] * (n - 1234)
    # self time: minus the children on the same track only
    dur = [100, 60, 10, 5, 20, 50, 30, 8, 1]
    track = [0, 0, 0, 1, 0, 2, 2, 2, 1]
    assert self_time(dur, par, track).tolist() == [40, 30, 10, 4, 20, 20, 22, 8, 1]
    with pytest.raises(ValueError, match="cycle"):
        nearest_ancestor([1, 0], np.zeros(2, dtype=bool))
    with pytest.raises(ValueError, match="cycle"):
        ancestor_count([1, 0])
    with pytest.raises(ValueError, match="one entry per span"):
        nearest_ancestor(par, mask[:3])


def test_trace_repr_html_is_a_short_summary():
    spans = [dict(name="xsp.profile", kind="region", start_ns=0, end_ns=2000)]
    spans += [dict(name="m<%d>&" % i, kind="module", start_ns=10 + 10 * i, end_ns=15 + 10 * i,
                   parent=0, attrs={"type": "T"}) for i in range(60)]
    tr = xsp.Trace.from_spans(spans, threads=[(7, "main <thread>", 0)],
                              counters={"lost.cap": 3, "forced_end": 0})
    h = tr._repr_html_()
    assert h.startswith('<div class="xsp-trace">') and h.endswith("</div>")
    assert "<p><b>xsp.Trace</b>: 61 spans, 1 threads, 2.000 us; lost 3</p>" in h
    assert ("<tr><td>M (model)</td><td>1</td></tr><tr><td>L (layer)</td><td>60</td></tr>"
            "<tr><td>G (GPU)</td><td>0</td></tr>") in h
    assert "<p>threads: main &lt;thread&gt; (7)</p>" in h
    assert "<p>counters (lost or dropped): lost.cap 3</p>" in h
    pre = h[h.index("<pre>") + 5:h.index("</pre>")].split("\n")
    # the first lines of tree() (depth 3, 8 children a span, then the rest in one line)
    tree = tr.tree(max_depth=3, max_children=8).split("\n")
    assert pre == [ln.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
                   for ln in tree[:10]]
    assert pre[1] == "├─ m&lt;0&gt;&amp; [module T] 5 ns"
    assert pre[-1] == "└─ … 52 more (260 ns)"
    assert "m<0>" not in h


def test_trace_repr_html_long_tree_is_cut():
    spans = [dict(name="r%d" % i, kind="region", start_ns=i, end_ns=i + 1) for i in range(100)]
    h = xsp.Trace.from_spans(spans)._repr_html_()
    pre = h[h.index("<pre>") + 5:h.index("</pre>")].split("\n")
    assert pre == ["r%d [region] 1 ns" % i for i in range(40)] + ["…"]
    empty = xsp.Trace.from_spans([])._repr_html_()
    assert "0 spans, 1 threads, 0 ns; lost 0" in empty and "<pre></pre>" in empty


def test_trace_has_no_report_or_export_methods():
    """Reports and exports live one layer up (xsp.report, xsp.chrome), and the TraceData is
    read-only: the Trace has none of the methods that reached up or changed it."""
    for name in ("report", "to_html", "to_chrome_trace", "_with_attrs", "_attrs"):
        assert not hasattr(xsp.Trace, name), name
