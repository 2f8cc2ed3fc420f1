"""Hostile but valid trace files: whatever xsp.load accepts, the views, exporters, analyses and
reports built on a Trace must either work or raise xsp's typed errors, never a raw TypeError,
ValueError, OverflowError, KeyError or RecursionError from deep inside, and never hang.

Three kinds of tests:
  - regression tests for what fuzzing found, each named after what it guards against, with
    exact assertions;
  - a 100,000-deep parent chain through tree(), to_pandas(), the analyses and report.text
    (everything must be linear or n log n in the number of spans);
  - a mutation fuzzer over the .xsp bytes of a few small real traces: byte flips, truncations
    and structured mutations of the decoded msgpack (attribute values of the wrong type, huge
    ints, strings where ints are expected, meta of the wrong types, odd tracks, spans, names).
    Every mutant the reader accepts goes through everything; only xsp.TraceFormatError may
    escape.  Deterministic (fixed seed, fake clock); XSP_FUZZ_MUTANTS=20000 runs more.
"""
import os
import random
import struct
import time

import numpy as np
import pytest
import torch

import xsp
from xsp import _core
from xsp import analysis as A
from xsp.trace import KINDS, LEVELS

ANALYSES = [getattr(A, name) for name in A.__all__]


def S(name, kind, start, end, parent=None, thread=0, **attrs):
    return {"name": name, "kind": kind, "start_ns": start, "end_ns": end, "parent": parent,
            "thread": thread, "attrs": attrs}


def everything(tr, tmp_path, deep=True, html=True):
    """Runs every consumer of a Trace on tr (with deep, the analyses and report.text too;
    with html, report.html); returns nothing, raises what they raise."""
    tr.tree()
    tr.tree(max_depth=2, max_children=2, min_share=0.01, max_lines=20)
    tr.tree(fold=False, min_duration_ns=1)
    tr.tree(root=len(tr) // 2) if len(tr) else None
    tr.to_pandas()
    repr(tr)
    tr._repr_html_()
    for s in list(tr)[:50]:
        s.name.encode("utf-8", "surrogateescape")
        repr(s)
        s.attrs
    xsp.chrome.write(tr, str(tmp_path / "t.json"))
    if deep:
        tr.top()
        for f in ANALYSES:
            f(tr)
        xsp.report.text(tr)
    if html:
        xsp.report.html(tr, str(tmp_path / "t.html"))


# -- regressions found by fuzzing ---------------------------------------------------------------

def test_attribute_of_an_unexpected_type_is_shown_as_its_value():
    """Regression guard (bug: a `type` attribute stored as an int made tree() raise
    TypeError: can only concatenate str (not "int") to str)."""
    tr = xsp.Trace.from_spans([S("r", "region", 0, 1000),
                               S("fc", "module", 100, 600, 0, type=3),
                               S("act", "module", 600, 900, 0, type=2.5)],
                              meta={"levels": "ML"})
    assert tr.tree().splitlines() == [
        "r [region] 1.000 us (self 200 ns)",
        "├─ fc [module 3] 500 ns",
        "└─ act [module 2.5] 300 ns",
    ]
    # to_pandas, and so the analyses, see a type as text, whatever the file held
    assert tr.to_pandas()["type"].tolist()[1:] == ["3", "2.5"]
    assert A.layers(tr)["type"].tolist() == ["3", "2.5"]
    assert A.layer_types(tr)["type"].tolist() == ["3", "2.5"]
    assert "fc" in xsp.report.text(tr)


def test_attributes_named_like_columns_or_of_the_wrong_type_keep_the_table_sane(tmp_path):
    """Regression guard (bugs: an attribute named "id" replaced to_pandas' id column, so every
    analysis raised ValueError "the span table's ids must be 0..n-1"; a mem_bytes attribute
    holding a string made layers() raise ValueError in pandas)."""
    import json
    fc = S("fc", "module", 10, 90, 0, type="Linear", id="x", mem_bytes="aten::addmm",
           seq=1.5, flops="many")
    fc["attrs"]["parent"] = 7
    tr = xsp.Trace.from_spans([S("r", "region", 0, 100), fc], meta={"levels": "ML"})
    df = tr.to_pandas()
    assert df["id"].tolist() == [0, 1] and df["parent"].tolist() == [-1, 0]
    assert df["attr.id"].tolist()[1:] == ["x"] and df["attr.parent"].tolist() == [None, 7]
    assert df["mem_bytes"].tolist() == [None, None] and df["seq"].tolist() == [None, None]
    assert df["flops"].tolist() == [None, None]
    assert tr[1].attrs["mem_bytes"] == "aten::addmm"          # the stored value, unchanged
    assert A.layers(tr)["name"].tolist() == ["fc"]
    assert A.layers(tr)["allocated_bytes"].isna().all()
    xsp.chrome.write(tr, str(tmp_path / "t.json"))
    doc = json.loads((tmp_path / "t.json").read_text())
    assert [e["args"] for e in doc["traceEvents"] if e["ph"] == "X"][1] == {
        "type": "Linear", "attr.id": "x", "attr.parent": 7, "mem_bytes": "aten::addmm",
        "seq": 1.5, "flops": "many", "id": 1, "parent": 0}


def test_pid_meta_that_is_not_an_int_falls_back_to_0(tmp_path):
    """Regression guard (bug: a `pid` meta stored as a string made xsp.chrome.write raise
    ValueError: invalid literal for int())."""
    import json
    for bad in ("abc", "1", 1.5, -1, 2 ** 31, -2 ** 63):
        tr = xsp.Trace.from_spans([S("r", "region", 0, 1000)], meta={"pid": bad})
        xsp.chrome.write(tr, str(tmp_path / "t.json"))
        doc = json.loads((tmp_path / "t.json").read_text())
        assert {e["pid"] for e in doc["traceEvents"]} == {0}
        assert doc["otherData"]["xsp"]["pid_note"] == (
            "meta pid %r is not a process id (an int from 0 to 2**31-1); events use pid 0"
            % (bad,))
        assert doc["otherData"]["xsp"]["meta"]["pid"] == bad
    tr = xsp.Trace.from_spans([S("r", "region", 0, 1000)], meta={"pid": 4242})
    xsp.chrome.write(tr, str(tmp_path / "t.json"))
    doc = json.loads((tmp_path / "t.json").read_text())
    assert {e["pid"] for e in doc["traceEvents"]} == {4242}
    assert "pid_note" not in doc["otherData"]["xsp"]


def test_thread_ids_of_2_63_and_more_keep_their_value():
    """Regression guard (bug: a track's tid of 2**63 or more made to_pandas, and so every
    analysis and report, raise OverflowError: tids were made int64)."""
    tids = [2 ** 63, 2 ** 64 - 1, 5]
    tr = xsp.Trace.from_spans([S("r", "region", 0, 1000, None, 0),
                               S("m", "module", 10, 500, 0, 1, type="Linear"),
                               S("k", "module", 20, 400, 0, 2, type="ReLU")],
                              threads=[(t, "t%d" % i, 0) for i, t in enumerate(tids)],
                              meta={"levels": "ML"})
    df = tr.to_pandas()
    assert df["thread"].dtype == np.uint64
    assert df["thread"].tolist() == tids
    assert [s.thread for s in tr] == tids
    assert A.layer_ranking(tr)["name"].tolist() == ["m", "k"]
    assert "levels ML, 3 spans" in xsp.report.text(tr)
    # small tids stay int64, as before
    assert xsp.Trace.from_spans([S("r", "region", 0, 1)]).to_pandas()["thread"].dtype == np.int64


def test_names_that_are_not_utf8_in_a_file_print_as_question_marks(tmp_path):
    """A file's strings are copied as they are (docs/format.md); a name that is not UTF-8 is
    decoded with surrogateescape (kept byte for byte, written back unchanged), and every text
    that xsp makes from it shows the bad bytes as '?'."""
    bad = b"lin\xff\xfe".decode("utf-8", "surrogateescape")
    tr = xsp.Trace.from_spans([S("r", "region", 0, 100), S(bad, "module", 10, 90, 0,
                                                          type=b"T\xc3".decode("utf-8",
                                                                              "surrogateescape"))],
                              meta={"levels": "ML"})
    back = xsp.Trace.from_bytes(tr.to_bytes())
    assert back[1].name == bad and back.to_bytes() == tr.to_bytes()
    assert back.tree().splitlines()[1] == "└─ lin?? [module T?] 80 ns"
    back.tree().encode("utf-8")               # printable: no lone surrogates left
    assert "lin??" in xsp.report.text(back)
    xsp.chrome.write(back, str(tmp_path / "t.json"))
    import json
    doc = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))
    assert [(e["name"], e["args"].get("type")) for e in doc["traceEvents"] if e["ph"] == "X"] \
        == [("r", None), ("lin??", "T?")]


def test_times_past_2_63_do_not_break_the_views(tmp_path):
    """Times are uint64 in a file but int64 columns in Python (docs/api.md: times at or above
    2**63 wrap): a file may hold them; nothing may crash on them."""
    tr = xsp.Trace.from_spans([S("r", "region", 2 ** 63 + 5, 2 ** 64 - 1),
                               S("m", "module", 2 ** 63 + 6, 2 ** 63 + 100, 0, type="Linear")],
                              meta={"levels": "ML"})
    assert tr.tree().splitlines()[1] == "└─ m [module Linear] 94 ns"
    everything(tr, tmp_path)


def test_report_html_of_zero_length_iterations(tmp_path):
    """Regression guard (bug: report.html drew a timeline of the median iteration and raised
    ValueError "timeline window is empty" when that iteration lasted 0 ns)."""
    tr = xsp.Trace.from_spans([S("r", "region", 0, 100), S("step#0", "step", 50, 50, 0),
                               S("step#1", "step", 60, 60, 0)], meta={"levels": "ML"})
    doc = xsp.report.html(tr, str(tmp_path / "t.html"))
    assert "Timeline of" not in doc and "<h3>Tree</h3>" in doc


def test_a_name_over_65535_bytes_is_cut_at_a_character_boundary_and_counted():
    """Regression guard (bug: a name over 65,535 bytes, the format's limit, was cut at exactly
    that many bytes without being counted, possibly inside a UTF-8 character, and then
    print(span.name) raised UnicodeEncodeError)."""
    long = "a" + "\u20ac" * 22000                # 1 + 3 * 22000 bytes; the limit cuts a euro
    kept = "a" + "\u20ac" * 21844                # 65533 bytes
    with xsp.profile(levels="ML") as prof:
        with torch.profiler.record_function(long):
            pass
        with torch.profiler.record_function(long):
            pass
        with torch.profiler.record_function("short"):
            pass
    tr = prof.trace
    scopes = tr.spans(kind="scope")
    assert [s.name == kept for s in scopes] == [True, True, False]
    assert len(scopes[0].name.encode("utf-8")) == 65533    # encodes: no lone surrogate
    assert tr.counters["names.cut"] == 1                   # one name, cut once
    assert tr.tree().splitlines()[-1] == "counters: names.cut 1"
    back = xsp.Trace.from_bytes(tr.to_bytes())
    assert back == tr and back.counters["names.cut"] == 1
    # a trace without long names has no such counter
    with xsp.profile(levels="ML") as prof:
        with torch.profiler.record_function("short"):
            pass
    assert "names.cut" not in prof.trace.counters
    # from_spans cuts and counts the same way (names, attribute values, meta)
    built = xsp.Trace.from_spans([S(long, "region", 0, 10, type=long + "x")],
                                 meta={"region": "\u20ac" * 30000}, counters={"lost.cap": 0})
    assert built[0].name == kept and built[0].attrs["type"] == kept
    assert built.meta["region"] == "\u20ac" * 21845       # 65535 bytes: a whole euro fits
    assert built.counters == {"lost.cap": 0, "names.cut": 2}   # the name and the meta value


# -- a 100,000-deep parent chain ----------------------------------------------------------------

DEEP = 100_000


@pytest.fixture(scope="module")
def deep_trace():
    kinds = ("module", "op")
    spans = [S("r", "region", 0, 4 * DEEP)]
    spans += [S("s%d" % i, kinds[i % 2], i + 1, 4 * DEEP - i - 1, i,
                **({"type": "T%d" % (i % 3)} if i % 2 == 0 else {})) for i in range(DEEP)]
    spans.append(S("k", "kernel", DEEP + 1, DEEP + 2, DEEP, 1))
    return xsp.Trace.from_spans(spans, threads=[(1, "main", 0), (7, "stream 7", 1)],
                                meta={"levels": "MLG", "region": "deep"})


def test_a_100000_deep_chain_is_linear(deep_trace, tmp_path):
    """Regression guard (bug: tree() on a 100,000-deep chain took over 120 s: every line
    carried an indent as long as its depth, so the text alone was quadratic; the layer and op
    GPU sums also walked one level at a time over all spans)."""
    tr = deep_trace
    n = len(tr)
    t0 = time.monotonic()
    lines = tr.tree().splitlines()
    assert len(lines) == n
    assert lines[0] == "r [region] 400.000 us (self 2 ns)"
    assert lines[1] == "└─ s0 [module T0] 399.998 us (self 2 ns)"
    # past 32 levels the indent stops growing; such lines say their depth instead
    assert lines[32] == "   " * 31 + "└─ s31 [op] 399.936 us (self 2 ns)"
    assert lines[33] == "   " * 31 + "└─ s32 [module T2] 399.934 us (self 2 ns) [depth 33]"
    assert lines[-2] == "   " * 31 + "└─ s%d [op] 200.000 us [depth %d]" % (
        DEEP - 1, DEEP)
    assert lines[-1] == "   " * 31 + "└─ k [kernel] 1 ns [depth %d]" % (DEEP + 1)
    assert max(len(ln) for ln in lines) < 160
    df = tr.to_pandas()
    assert df["depth"].tolist() == list(range(n))
    assert len(A.layers(tr)) == DEEP // 2
    by_layer = A.kernels_by_layer(tr)
    assert len(by_layer) == DEEP // 2 and (by_layer["kernels"] == 1).all()
    assert (A.kernels_by_op(tr)["kernel_ns"] == 1).all()
    assert A.gpu_vs_cpu(tr)["layer"].tolist() == ["s%d" % (DEEP - 2), "(model)"]
    for f in ANALYSES:
        f(tr)
    text = xsp.report.text(tr)
    assert text.splitlines()[0] == "xsp report: deep"
    assert text.splitlines()[1].startswith("levels MLG, %d spans, 1 iteration" % n)
    assert time.monotonic() - t0 < 60         # a hang guard; this takes a few seconds


# -- the mutation fuzzer --------------------------------------------------------------------------

def mp_decode(b):
    """A small msgpack decoder for the types an .xsp file uses: ints, floats, str (as bytes),
    arrays.  Returns the object; raises ValueError on anything else or trailing bytes."""
    pos = 0

    def take(n):
        nonlocal pos
        if pos + n > len(b):
            raise ValueError("truncated")
        out = b[pos:pos + n]
        pos += n
        return out

    def obj():
        c = take(1)[0]
        if c <= 0x7f:
            return c
        if c >= 0xe0:
            return c - 0x100
        if 0xa0 <= c <= 0xbf:
            return bytes(take(c & 31))
        if 0x90 <= c <= 0x9f:
            return [obj() for _ in range(c & 15)]
        fmt = {0xcc: ">B", 0xcd: ">H", 0xce: ">I", 0xcf: ">Q", 0xd0: ">b", 0xd1: ">h",
               0xd2: ">i", 0xd3: ">q", 0xca: ">f", 0xcb: ">d"}.get(c)
        if fmt:
            return struct.unpack(fmt, take(struct.calcsize(fmt)))[0]
        if c in (0xd9, 0xda, 0xdb):
            n = struct.unpack({0xd9: ">B", 0xda: ">H", 0xdb: ">I"}[c], take(c - 0xd8 if c < 0xdb
                                                                            else 4))[0]
            return bytes(take(n))
        if c in (0xdc, 0xdd):
            n = struct.unpack(">H" if c == 0xdc else ">I", take(2 if c == 0xdc else 4))[0]
            return [obj() for _ in range(n)]
        raise ValueError("byte 0x%02x" % c)

    out = obj()
    if pos != len(b):
        raise ValueError("trailing bytes")
    return out


def mp_encode(o, out=None):
    """Encodes what mp_decode gives, ints in their smallest form."""
    top = out is None
    out = bytearray() if top else out
    if isinstance(o, bool):
        out.append(0xc3 if o else 0xc2)
    elif isinstance(o, int):
        if 0 <= o <= 0x7f:
            out.append(o)
        elif -32 <= o < 0:
            out.append(o + 0x100)
        elif o >= 0:
            for lim, c, f in ((0xff, 0xcc, ">B"), (0xffff, 0xcd, ">H"),
                              (0xffffffff, 0xce, ">I"), (2 ** 64 - 1, 0xcf, ">Q")):
                if o <= lim:
                    out.append(c)
                    out += struct.pack(f, o)
                    break
            else:
                raise ValueError(o)
        else:
            for lim, c, f in ((-2 ** 7, 0xd0, ">b"), (-2 ** 15, 0xd1, ">h"),
                              (-2 ** 31, 0xd2, ">i"), (-2 ** 63, 0xd3, ">q")):
                if o >= lim:
                    out.append(c)
                    out += struct.pack(f, o)
                    break
            else:
                raise ValueError(o)
    elif isinstance(o, float):
        out.append(0xcb)
        out += struct.pack(">d", o)
    elif isinstance(o, (bytes, bytearray)):
        n = len(o)
        if n < 32:
            out.append(0xa0 | n)
        elif n <= 0xff:
            out += bytes((0xd9, n))
        elif n <= 0xffff:
            out.append(0xda)
            out += struct.pack(">H", n)
        else:
            out.append(0xdb)
            out += struct.pack(">I", n)
        out += o
    elif isinstance(o, list):
        n = len(o)
        if n < 16:
            out.append(0x90 | n)
        elif n <= 0xffff:
            out.append(0xdc)
            out += struct.pack(">H", n)
        else:
            out.append(0xdd)
            out += struct.pack(">I", n)
        for x in o:
            mp_encode(x, out)
    else:
        raise TypeError(type(o))
    return bytes(out) if top else out


# keys the views, analyses and reports read (docs/api.md, docs/analyses.md)
SPAN_KEYS = [b"type", b"seq", b"fwd_op", b"shapes", b"mem_bytes", b"flops", b"dram_bytes",
             b"device", b"stream", b"grid_x", b"block_x", b"registers", b"correlation",
             b"graph_id", b"bytes", b"name", b"id", b"parent", b"module", b"kind", b"depth"]
META_KEYS = [b"pid", b"levels", b"region", b"start_ns", b"stop_ns", b"steps", b"clock",
             b"hook_errors", b"torch_version", b"xsp_version", b"gpu_error", b"cupti_shared"]
COUNTER_KEYS = [b"lost.cap", b"lost.depth", b"unmatched_end", b"forced_end", b"gpu.lost",
                b"names.cut", b"open_at_stop"]
INTS = [0, 1, -1, 2, 7, 127, 128, 255, 2 ** 16, 2 ** 31 - 1, 2 ** 31, 2 ** 32, 2 ** 53 + 1,
        2 ** 62, 2 ** 63 - 1, -2 ** 63, -2 ** 31, -(2 ** 53)]
UINTS = [0, 1, 2, 3, 255, 2 ** 16, 2 ** 32 - 1, 2 ** 32, 2 ** 53 + 1, 2 ** 62, 2 ** 63 - 1,
         2 ** 63, 2 ** 63 + 1, 2 ** 64 - 2, 2 ** 64 - 1]
FLOATS = [0.0, -0.0, 1.5, -1.0, 1e300, -1e300, float("inf"), float("-inf"), float("nan"),
          5e-324, 2.0 ** 63, 2.0 ** 64]
STRS = [b"", b"G", b"MLG", b"ML", b"L", b"x" * 40, b"\xff\xfe", b"a\nb", b"\x00", b"\xe2\x82",
        b"caf\xc3\xa9", b"%s%d{}", b"<script>", b"12", b"-1", b"nan", "\u202e".encode()]


class Mutator:
    """Structured mutations of a decoded .xsp document (a list: docs/format.md)."""

    def __init__(self, rng, doc):
        self.r = rng
        self.d = doc

    # helpers ------------------------------------------------------------------------------
    def strings(self):
        return self.d[2]

    def string_id(self, s):
        """The id of string s, added (at the end) when missing."""
        t = self.strings()
        if s in t:
            return t.index(s)
        t.append(s)
        return len(t) - 1

    def fresh_string(self, s):
        """A new string id for s or, when s is taken, for a distinct variant of it."""
        t = self.strings()
        while s in t:
            s = s + b"~"
        t.append(s)
        return len(t) - 1

    def value(self, typ):
        r = self.r
        if typ == 0:
            return r.choice(INTS + [r.randrange(-2 ** 63, 2 ** 63), len(self.d[6]) // 7,
                                    r.randrange(0, max(1, len(self.d[6]) // 7 + 3))])
        if typ == 1:
            return r.choice(FLOATS + [r.uniform(-1e6, 1e6)])
        if r.random() < 0.7:
            return r.randrange(len(self.strings()))
        return self.string_id(r.choice(STRS))

    def n_spans(self):
        return len(self.d[6]) // 7

    def attr_slot(self, span):
        """Index in [7] (pairs) where span's attributes start."""
        sp = self.d[6]
        return sum(sp[7 * j + 6] for j in range(span))

    # mutations ----------------------------------------------------------------------------
    def retype_attr(self):
        sec = self.r.choice((4, 7, 7, 7))
        a = self.d[sec]
        if not a:
            return self.add_attr()
        k = 2 * self.r.randrange(len(a) // 2)
        typ = self.r.randrange(3)
        a[k] = (a[k] >> 2) << 2 | typ
        a[k + 1] = self.value(typ)

    def revalue_attr(self):
        sec = self.r.choice((4, 5, 7, 7))
        a = self.d[sec]
        if not a:
            return self.add_attr()
        k = 2 * self.r.randrange(len(a) // 2)
        a[k + 1] = self.value(a[k] & 3)

    def add_attr(self):
        n = self.n_spans()
        if not n:
            return
        i = self.r.randrange(n)
        key = self.string_id(self.r.choice(SPAN_KEYS))
        typ = self.r.randrange(3)
        at = self.attr_slot(i) + self.d[6][7 * i + 6]
        if self.d[6][7 * i + 6] >= 65535:
            return
        self.d[7][2 * at:2 * at] = [key << 2 | typ, self.value(typ)]
        self.d[6][7 * i + 6] += 1

    def add_meta(self):
        sec, keys = (4, META_KEYS) if self.r.random() < 0.8 else (5, COUNTER_KEYS)
        key = self.string_id(self.r.choice(keys))
        typ = 0 if sec == 5 and self.r.random() < 0.9 else self.r.randrange(3)
        a = self.d[sec]
        for k in range(0, len(a), 2):          # replace the key's entry when there is one
            if a[k] >> 2 == key:
                a[k], a[k + 1] = key << 2 | typ, self.value(typ)
                return
        a += [key << 2 | typ, self.value(typ)]

    def thread(self):
        th = self.d[3]
        if not th:
            return
        k = 3 * self.r.randrange(len(th) // 3)
        f = self.r.randrange(3)
        if f == 0:
            th[k] = self.r.choice(UINTS)
        elif f == 1:
            th[k + 1] = self.r.randrange(len(self.strings()))
        else:
            th[k + 2] = self.r.choice([0, 1, 2, 3, 7, 2 ** 31, 2 ** 32 - 1])

    def add_thread(self):
        self.d[3] += [self.r.choice(UINTS), self.r.randrange(len(self.strings())),
                      self.r.randrange(3)]
        n = self.n_spans()
        for _ in range(self.r.randrange(1, 4)):
            if n:
                self.d[6][7 * self.r.randrange(n) + 5] = len(self.d[3]) // 3 - 1

    def span(self):
        n = self.n_spans()
        if not n:
            return
        i = self.r.randrange(n)
        sp = self.d[6]
        f = self.r.choice((0, 1, 2, 3, 4, 4, 5))
        r = self.r
        if f == 0:
            sp[7 * i] = r.choice([0, 1, r.randrange(10 ** 6), 2 ** 40, 2 ** 62, 2 ** 63])
        elif f == 1:
            sp[7 * i + 1] = r.choice([0, 1, r.randrange(10 ** 9), 2 ** 40, 2 ** 62, 2 ** 63,
                                      2 ** 64 - 1 - sum(sp[0:7 * i + 1:7])])
        elif f == 2:
            sp[7 * i + 2] = r.randrange(i + 1)
        elif f == 3:
            sp[7 * i + 3] = r.randrange(len(self.strings()))
        elif f == 4:
            kind = r.randrange(len(KINDS))
            level = r.randrange(len(LEVELS))
            flags = r.choice([0, 0, 1, 2, 3, 4, 2 ** 31, 2 ** 32 - 1])
            sp[7 * i + 4] = kind | level << 4 | flags << 8
        else:
            sp[7 * i + 5] = r.randrange(max(1, len(self.d[3]) // 3))

    def same_kind(self):
        """Every span of one kind (and level) made another: all steps, all kernels, ..."""
        sp = self.d[6]
        kinds = sorted({sp[7 * i + 4] & 0xff for i in range(self.n_spans())})
        if not kinds:
            return
        src = self.r.choice(kinds)
        dst = self.r.randrange(len(KINDS)) | self.r.randrange(len(LEVELS)) << 4
        for i in range(self.n_spans()):
            if sp[7 * i + 4] & 0xff == src:
                sp[7 * i + 4] = (sp[7 * i + 4] & ~0xff) | dst

    def string(self):
        t = self.strings()
        if len(t) < 2:
            return
        i = self.r.randrange(1, len(t))
        r = self.r
        f = r.randrange(4)
        if f == 0:
            s = r.choice(STRS)
        elif f == 1:
            s = t[i] + bytes([r.randrange(0x80, 0x100)])
        elif f == 2:
            s = bytes(r.randrange(256) for _ in range(r.randrange(1, 12)))
        else:
            s = (b"\xe2\x82\xac" * 21845)[:65535 - r.randrange(3)]
        while s in t:
            s += b"~"
        if len(s) <= 65535:
            t[i] = s

    def trailing(self):
        self.d.append(self.r.choice([0, b"x", [1, 2, [3]], 1.5]))

    def swap_strings(self):
        """Two strings trade places: names become keys, keys values, and so on."""
        t = self.strings()
        if len(t) > 2:
            i, j = self.r.sample(range(1, len(t)), 2)
            t[i], t[j] = t[j], t[i]

    def move_attrs(self):
        """Attributes change owners: one span's count goes to another (the total stays)."""
        n = self.n_spans()
        sp = self.d[6]
        have = [i for i in range(n) if sp[7 * i + 6]]
        if have and n > 1:
            i = self.r.choice(have)
            j = self.r.randrange(n)
            k = self.r.randrange(1, sp[7 * i + 6] + 1)
            if sp[7 * j + 6] + k <= 65535:
                sp[7 * i + 6] -= k
                sp[7 * j + 6] += k

    def drop_meta(self):
        a = self.d[self.r.choice((4, 5))]
        if a:
            k = 2 * self.r.randrange(len(a) // 2)
            del a[k:k + 2]

    def reshape(self):
        """Every span at once: random parents, or zero or huge durations."""
        sp = self.d[6]
        f = self.r.randrange(3)
        for i in range(self.n_spans()):
            if f == 0:
                sp[7 * i + 2] = self.r.randrange(i + 1)
            elif f == 1:
                sp[7 * i + 1] = 0
            else:
                sp[7 * i] = 0
                sp[7 * i + 1] = self.r.choice((2 ** 62, 2 ** 63 - 1, 1))

    OPS = ("retype_attr", "revalue_attr", "add_attr", "add_attr", "add_meta", "add_meta",
           "thread", "add_thread", "span", "span", "span", "same_kind", "string", "trailing",
           "swap_strings", "move_attrs", "drop_meta", "reshape")

    def mutate(self):
        names = []
        for _ in range(self.r.choice((1, 1, 2, 3, 5))):
            op = self.r.choice(self.OPS)
            names.append(op)
            getattr(self, op)()
        return names


def byte_mutant(rng, data):
    b = bytearray(data)
    f = rng.randrange(5)
    if f == 0:                                  # flip a few bytes
        for _ in range(rng.randrange(1, 5)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b), "flip"
    if f == 1:                                  # interesting byte values
        for _ in range(rng.randrange(1, 3)):
            b[rng.randrange(len(b))] = rng.choice((0, 0x7f, 0x80, 0xc0, 0xcc, 0xcf, 0xd3,
                                                   0xdb, 0xdd, 0xff, 0xe0, 0xa0, 0x90))
        return bytes(b), "set"
    if f == 2:
        return bytes(b[:rng.randrange(len(b))]), "truncate"
    if f == 3:
        i = rng.randrange(len(b))
        del b[i:i + rng.randrange(1, 4)]
        return bytes(b), "delete"
    i = rng.randrange(len(b))
    b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))
    return bytes(b), "insert"


def seed_traces():
    """The bytes of a few small traces: a real ML profile (tiny nn.Sequential, forward and
    backward, two steps, fake clock), an M-only one, and a synthetic MLG one with kernels,
    runtime calls and a GPU stream track."""
    out = []
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    x = torch.ones(2, 4)
    model(x).sum().backward()
    _core.set_fake_clock(1000, 7)
    try:
        for levels in ("ML", "M"):
            with xsp.profile(levels=levels) as prof:
                for _ in range(2):
                    model(x).sum().backward()
                    prof.step()
            out.append(prof.trace.to_bytes())
    finally:
        _core.set_fake_clock(0, 0)
    stream = (0 << 32) | 7
    spans = [
        S("prof", "region", 0, 1000), S("step#0", "step", 0, 500, 0),
        S("Net", "model", 10, 490, 1, type="Net"),
        S("fc1", "module", 20, 220, 2, type="Linear", shapes="[2, 4]", mem_bytes=512),
        S("aten::linear", "op", 30, 210, 3, seq=4),
        S("aten::addmm", "op", 40, 200, 4, seq=5),
        S("cudaLaunchKernel", "runtime", 50, 60, 5, correlation=9),
        S("gemm", "kernel", 70, 170, 5, 1, flops=2000, dram_bytes=100, grid_x=4, device=0,
          stream=7, correlation=9),
        S("act", "module", 230, 300, 2, type="ReLU"), S("aten::relu", "op", 240, 290, 8),
        S("Memcpy HtoD", "memcpy", 250, 270, 9, 1, bytes=64),
        S("step#1", "step", 500, 1000, 0), S("Net", "model", 510, 990, 11, type="Net"),
        S("AddmmBackward0", "backward", 520, 700, 12, seq=5, fwd_op=5),
        S("gemm", "kernel", 530, 650, 13, 1, flops=2400, dram_bytes=120),
        S("cudaDeviceSynchronize", "sync", 710, 750, 12),
    ]
    out.append(xsp.Trace.from_spans(spans, threads=[(11, "main", 0), (stream, "stream 7", 1)],
                                    meta={"levels": "MLG", "region": "prof", "pid": 77},
                                    counters={"lost.cap": 0}).to_bytes())
    return out


class Stats:
    def __init__(self):
        self.made = self.accepted = self.rejected = 0
        self.failures = []
        self.slowest = (0.0, None)


def fuzz(count, seed, tmp_path, deep_every=1, html_every=1, time_limit=5.0):
    """Makes count mutants of the seed traces and runs everything() on each one that loads
    (the analyses and report.text on every deep_every-th, report.html on every
    html_every-th); returns Stats.  A failure is (mutant, ops, where, exception) for anything
    but TraceFormatError escaping, or a mutant slower than time_limit seconds."""
    import traceback
    rng = random.Random(seed)
    seeds = seed_traces()
    for b in seeds:                             # the unmutated seeds work (and warm up)
        everything(xsp.Trace.from_bytes(b), tmp_path, html=False)
    st = Stats()
    for m in range(count):
        k = rng.randrange(len(seeds))
        if rng.random() < 0.35:
            data, op = byte_mutant(rng, seeds[k])
            ops = [op]
        else:
            doc = mp_decode(seeds[k])
            ops = Mutator(rng, doc).mutate()
            try:
                data = mp_encode(doc)
            except (ValueError, TypeError):
                continue
        st.made += 1
        try:
            tr = xsp.Trace.from_bytes(data)
        except xsp.TraceFormatError:
            st.rejected += 1
            continue
        except Exception as e:                 # noqa: BLE001 - the point of the test
            st.failures.append((m, ops, "from_bytes", repr(e)))
            continue
        st.accepted += 1
        t0 = time.monotonic()
        try:
            everything(tr, tmp_path, deep=st.accepted % deep_every == 0,
                       html=st.accepted % html_every == 0)
        except xsp.TraceFormatError:
            pass
        except Exception as e:                 # noqa: BLE001
            st.failures.append((m, ops, "everything", "".join(
                traceback.format_exception(type(e), e, e.__traceback__)[-3:])))
        dt = time.monotonic() - t0
        if dt > st.slowest[0]:
            st.slowest = (dt, m)
        if dt > time_limit:
            st.failures.append((m, ops, "slow", "%.1f s" % dt))
    return st


def test_fuzz_accepted_mutants_raise_only_typed_errors(tmp_path):
    """Mutants of small real traces: every one that loads must go through tree, to_pandas,
    chrome.write, the analyses and the reports raising nothing but xsp.TraceFormatError."""
    count = int(os.environ.get("XSP_FUZZ_MUTANTS", "300"))
    full = count > 300                          # a long local run checks everything each time
    st = fuzz(count, seed=int(os.environ.get("XSP_FUZZ_SEED", "20240917")), tmp_path=tmp_path,
              deep_every=1 if full else 10, html_every=1 if full else 150)
    assert not st.failures, "%d failures, first: %r" % (len(st.failures), st.failures[:3])
    assert st.accepted > count // 4            # the mutations mostly make valid files
    assert st.rejected > 0
