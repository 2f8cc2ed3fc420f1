"""The HTML pieces of xsp._html (docs/analyses.md, "HTML pieces") on hand-built traces with
known numbers: the timeline's rectangles, tooltips, sub-pixel merging and notes; the tree's
lines, folding and hidden counts; tables with units in the cells.  Also training_trace(), a
small training loop that test_browser.py renders in a real browser."""
import html.parser
import re
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

import xsp
from xsp.report import parts as H

STREAM = 7
US = 1000


def S(name, kind, start, end, parent=None, thread=0, **attrs):
    return {"name": name, "kind": kind, "start_ns": start, "end_ns": end, "parent": parent,
            "thread": thread, "attrs": attrs}


def small_trace():
    spans = [
        S("prof", "region", 0, 10000),                          # 0
        S("Net", "model", 0, 8000, 0, type="Net"),              # 1
        S("fc", "module", 1000, 5000, 1, type="Linear"),        # 2
        S('<script>&"', "op", 1500, 4500, 2),                   # 3
        S("gemm", "kernel", 2000, 6000, 3, 1),                  # 4: on the stream
        S("tiny", "op", 6000, 6001, 1),                         # 5: under a pixel
    ]
    return xsp.Trace.from_spans(spans, threads=[(11, "main", 0), (STREAM, "stream 7", 1)])


def by_start(spans):
    """spans (S dicts, parents by index) sorted into trace order, parents renumbered."""
    order = sorted(range(len(spans)), key=lambda i: (spans[i]["start_ns"], i))
    new = {old: k for k, old in enumerate(order)}
    out = []
    for old in order:
        s = dict(spans[old])
        if s["parent"] is not None:
            s["parent"] = new[s["parent"]]
        out.append(s)
    return out


def training_trace(steps=2):
    """A training loop: region > step#k > Net (features: Conv2d, ReLU; classifier: Linear),
    a loss op, a backward function on the autograd thread, an optimizer scope with 40
    consecutive 2 us aten::add_ and 300 consecutive 200 ns aten::mul (under a pixel in a 1 ms
    window), an op named <script>&"; a kernel under the conv and the addmm on a stream."""
    sp = []

    def add(*a, **k):
        sp.append(S(*a, **k))
        return len(sp) - 1

    reg = add("train", "region", 0, steps * 1000 * US + 10 * US)
    for k in range(steps):
        b = k * 1000 * US
        st = add("step#%d" % k, "step", b, b + 1000 * US, reg)
        net = add("Net", "model", b + 10 * US, b + 400 * US, st, type="Net")
        feat = add("features", "module", b + 20 * US, b + 250 * US, net, type="Sequential")
        c = add("features.0", "module", b + 25 * US, b + 180 * US, feat, type="Conv2d")
        o = add("aten::conv2d", "op", b + 30 * US, b + 175 * US, c)
        o = add("aten::convolution", "op", b + 35 * US, b + 170 * US, o)
        add("cudaLaunchKernel", "runtime", b + 40 * US, b + 48 * US, o)
        add("implicit_convolve_sgemm<float>", "kernel", b + 55 * US, b + 335 * US, o, 2)
        r = add("features.1", "module", b + 190 * US, b + 240 * US, feat, type="ReLU")
        add("aten::relu", "op", b + 195 * US, b + 235 * US, r)
        fc = add("classifier", "module", b + 260 * US, b + 390 * US, net, type="Linear")
        o = add("aten::linear", "op", b + 265 * US, b + 385 * US, fc)
        o = add("aten::addmm", "op", b + 270 * US, b + 380 * US, o)
        add("cudaLaunchKernel", "runtime", b + 275 * US, b + 282 * US, o)
        add("ampere_sgemm_32x32_tn", "kernel", b + 340 * US, b + 420 * US, o, 2)
        add("aten::mse_loss", "op", b + 405 * US, b + 430 * US, st)
        bw = add("autograd::engine::evaluate_function: AddmmBackward0", "backward",
                 b + 440 * US, b + 560 * US, st, 1)
        add("aten::mm", "op", b + 450 * US, b + 540 * US, bw, 1)
        opt = add("Optimizer.step#SGD.step", "scope", b + 600 * US, b + 990 * US, st)
        t = b + 610 * US
        for _ in range(40):
            add("aten::add_", "op", t, t + 2 * US, opt)
            t += 3 * US
        for _ in range(300):
            add("aten::mul", "op", t, t + 200, opt)
            t += 400
        add('<script>&"', "op", t + 5 * US, t + 60 * US, opt)
    return xsp.Trace.from_spans(by_start(sp), threads=[(11, "main", 0), (12, "autograd", 0),
                                                       (STREAM, "stream 7", 1)],
                                meta={"levels": "MLG", "region": "train"})


# -- reading the output --------------------------------------------------------------------
def span_rects(svg):
    """[(class, x, y, width, tooltip)] of the span rectangles (not legend keys, not bands)."""
    out = []
    for m in re.finditer(r'<rect class="xsp-s ([^"]*)" x="([\d.]+)" y="(\d+)" '
                         r'width="([\d.]+)" height="\d+"><title>(.*?)</title></rect>', svg,
                         re.S):
        out.append((m.group(1), float(m.group(2)), int(m.group(3)), float(m.group(4)),
                    H._html_mod.unescape(m.group(5))))
    return out


def notes(svg):
    return [H._html_mod.unescape(t) for t in
            re.findall(r'<text class="xsp-note"[^>]*>(.*?)</text>', svg)]


class _Lines(html.parser.HTMLParser):
    """The text of each line of a tree (a summary, a leaf line or a note), with its depth in
    <details> and whether that details is open; checks tags balance."""

    def __init__(self):
        super().__init__()
        self.lines, self.stack, self.cur, self.opened = [], [], None, []

    def handle_starttag(self, tag, attrs):
        if tag == "details":
            self.opened.append("open" in dict(attrs))
        if tag in ("summary",) or (tag == "div" and dict(attrs).get("class") in
                                   ("xsp-leaf", "xsp-more")):
            self.cur = []
        self.stack.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, (self.stack, tag)
        self.stack.pop()
        if tag == "details":
            self.opened.pop()
        if self.cur is not None and (tag == "summary" or tag == "div"):
            depth = len(self.opened) - (1 if tag == "summary" else 0)
            opened = self.opened[-1] if tag == "summary" else None
            self.lines.append((depth, "".join(self.cur), opened))
            self.cur = None

    def handle_data(self, data):
        if self.cur is not None and self.stack[-1] != "style":
            self.cur.append(data)


def tree_lines(out):
    """[(depth, text, open)] of tree_html's output (open: None for a leaf line or note)."""
    p = _Lines()
    p.feed(out)
    p.close()
    assert p.stack == [], p.stack
    return p.lines


# -- timeline ------------------------------------------------------------------------------
def test_timeline_rects_tooltips_and_escaping():
    svg = H.timeline_svg(small_trace(), 0, 10000)
    ET.fromstring(svg)                       # well-formed XML: every name escaped
    assert "<script>" not in svg and "&lt;script&gt;&amp;&quot;" in svg
    rects = span_rects(svg)
    assert [r[0] for r in rects] == ["xsp-k-region", "xsp-k-model", "xsp-k-module",
                                     "xsp-k-op", "xsp-k-kernel"]
    assert [r[4] for r in rects] == [
        "prof [region]\n10.000 us, self 2.000 us\nstarts at +0 ns",
        "Net [model]\n8.000 us, self 3.999 us\nstarts at +0 ns",
        "fc [module Linear]\n4.000 us, self 1.000 us\nstarts at +1.000 us",
        '<script>&" [op]\n3.000 us, self 3.000 us\nstarts at +1.500 us',
        "gemm [kernel]\n4.000 us, self 4.000 us\nstarts at +2.000 us"]
    # x = time: 918 px for 10 us from x 170
    assert [(r[1], r[3]) for r in rects] == [(170.0, 918.0), (170.0, 734.4), (261.8, 367.2),
                                             (307.7, 275.4), (353.6, 367.2)]
    # stacked by depth on the CPU track; the kernel starts its own lane group (depth 0)
    ys = [r[2] for r in rects]
    assert ys[1] - ys[0] == ys[2] - ys[1] == ys[3] - ys[2] == 16 and ys[4] > ys[3] + 16
    assert notes(svg) == ["1 span under 1 px not drawn"]
    assert re.findall(r'<text class="xsp-tick"[^>]*>([^<]*)</text>', svg) == [
        "0", "2 us", "4 us", "6 us", "8 us", "10 us", "window 10.000 us"]
    assert re.findall(r'<rect class="xsp-key xsp-k-(\w+)"', svg) == [
        "region", "model", "module", "op", "kernel"]
    assert ">main (11)</text>" in svg and ">stream 7 [GPU]</text>" in svg


def test_timeline_window_clips_and_selects():
    tr = small_trace()
    svg = H.timeline_svg(tr, 2000, 4000, width=600)
    rects = span_rects(svg)
    # the spans overlapping [2 us, 4 us): all but the 1 ns op at 6 us
    assert len(rects) == 5 and 'aria-label="xsp timeline: 2.000 us, 5 spans in the window"' \
        in svg
    assert rects[0][4] == ("prof [region]\n10.000 us, self 2.000 us\n"
                           "starts 2.000 us before the window, ends 6.000 us after it")
    assert all(r[1] == 170.0 and r[3] == 418.0 for r in rects)   # clipped to the window
    assert notes(svg) == []
    empty = H.timeline_svg(tr, 20000, 30000)
    assert span_rects(empty) == [] and notes(empty) == ["no spans in this window"]
    ET.fromstring(empty)
    with pytest.raises(ValueError, match="window is empty"):
        H.timeline_svg(tr, 5, 5)
    with pytest.raises(ValueError, match="at least 400 px"):
        H.timeline_svg(tr, 0, 10, width=100)


def test_timeline_merges_runs_of_sub_pixel_spans_and_counts_them():
    # 1 ms over 918 px: 1 px = 1089 ns.  100 ops of 100 ns every 200 ns make one run (one
    # grey box, 19.9 us wide); 5 more, 100 us apart, are each alone under a pixel
    spans = [S("prof", "region", 0, 1000 * US), S("opt", "scope", 0, 1000 * US, 0)]
    spans += [S("aten::mul", "op", 100 * US + 200 * k, 100 * US + 200 * k + 100, 1)
              for k in range(100)]
    spans += [S("aten::add", "op", 300 * US + 100 * US * k, 300 * US + 100 * US * k + 50, 1)
              for k in range(5)]
    svg = H.timeline_svg(xsp.Trace.from_spans(spans), 0, 1000 * US)
    rects = span_rects(svg)
    assert [r[0] for r in rects] == ["xsp-k-region", "xsp-k-scope", "xsp-merged"]
    assert rects[2][4] == ("100 spans under 1 px each, merged: 10.000 us in all over "
                           "19.900 us\naten::mul x100")
    assert rects[2][3] == 18.3
    assert notes(svg) == ["105 spans under 1 px not drawn (100 of them shown merged, as 1 "
                          "grey box)"]
    assert 'class="xsp-key xsp-merged"' in svg and ">spans under 1 px, merged</text>" in svg


def test_timeline_past_max_spans_skips_the_narrowest_and_says_so():
    spans = [S("prof", "region", 0, 100 * US)]
    t = 0
    for k in range(10):                     # widths 1..10 us
        spans.append(S("op%d" % k, "op", t, t + (k + 1) * US, 0))
        t += (k + 1) * US
    svg = H.timeline_svg(xsp.Trace.from_spans(spans), 0, 100 * US, max_spans=4)
    names = [r[4].split(" [")[0] for r in span_rects(svg)]
    assert names == ["prof", "op7", "op8", "op9"]          # the widest, in trace order
    assert notes(svg) == ["7 spans not drawn past max_spans 4: the narrowest, 28.000 us in "
                          "all"]


def test_timeline_depth_is_counted_on_each_track_and_capped():
    # a chain of 60 nested spans: 48 rows drawn, 12 counted
    spans = [S("d%d" % k, "op", k, 1000 - k, k - 1 if k else None) for k in range(60)]
    # a span of the autograd thread adopted by d0: its own lane group, depth 0
    spans.append(S("bw", "backward", 100, 200, 0, 1))
    tr = xsp.Trace.from_spans(by_start(spans), threads=[(1, "main", 0), (2, "autograd", 0)])
    svg = H.timeline_svg(tr, 0, 1000)
    rects = span_rects(svg)
    assert len(rects) == 49
    assert notes(svg) == ["12 spans nested deeper than 48 rows not drawn"]
    ys = sorted({r[2] for r in rects if not r[4].startswith("bw ")})
    assert len(ys) == 48 and ys == list(range(ys[0], ys[0] + 48 * 16, 16))
    bw_y = [r[2] for r in rects if r[4].startswith("bw ")][0]
    assert bw_y > ys[-1]                     # below the main thread's 48 rows


def test_timeline_names_that_xml_cannot_hold():
    tr = xsp.Trace.from_spans([S("a\x01b\x1f'c'", "op", 0, 1000)])
    svg = H.timeline_svg(tr, 0, 1000)
    ET.fromstring(svg)
    assert span_rects(svg)[0][4].startswith("a?b?'c' [op]")


def test_timeline_of_one_training_iteration():
    tr = training_trace()
    step = tr.spans(kind="step")[0]
    svg = H.timeline_svg(tr, step.start_ns, step.end_ns)
    ET.fromstring(svg)
    rects = span_rects(svg)
    kinds = [r[0] for r in rects]
    # region, step, model, 2 features, 3 modules... every span of step#0 at 1 px or more
    assert kinds.count("xsp-k-kernel") == 2 and kinds.count("xsp-k-backward") == 1
    assert kinds.count("xsp-merged") == 1
    assert sum(r[4].startswith("aten::add_ [op]") for r in rects) == 40
    assert notes(svg) == ["300 spans under 1 px not drawn (300 of them shown merged, as 1 "
                          "grey box)"]
    # only spans of the window: nothing of step#1
    assert not any("step#1" in r[4] for r in rects)
    labels = re.findall(r'<text class="xsp-track"[^>]*><title>([^<]*)</title>', svg)
    assert labels == ["main (11)", "autograd (12)", "stream 7 [GPU]"]


# -- tree ----------------------------------------------------------------------------------
def test_tree_lines_kinds_types_and_shares():
    out = H.tree_html(small_trace())
    assert "<script>" not in out.split("</style>", 1)[1]
    assert tree_lines(out) == [
        (0, "prof [region] 10.000 us, self 2.000 us, 100.0%", True),
        (1, "Net [model] 8.000 us, self 3.999 us, 80.0%", True),
        (2, "fc [module Linear] 4.000 us, self 1.000 us, 40.0%", False),
        (3, '<script>&" [op] 3.000 us, self 3.000 us, 30.0%', False),
        (4, "gemm [kernel] 4.000 us, self 4.000 us, 40.0%", None),
        # the 1 ns op is under 0.5% of the trace
        (2, "… 1 more, 1 ns (each line under 0.5% of the trace)", None)]
    # a subtree: shares of its root; open_depth
    sub = tree_lines(H.tree_html(small_trace(), 2, open_depth=1))
    assert sub[:2] == [(0, "fc [module Linear] 4.000 us, self 1.000 us, 100.0%", True),
                       (1, '<script>&" [op] 3.000 us, self 3.000 us, 75.0%', False)]
    assert tree_lines(H.tree_html(small_trace(), small_trace()[2]))[0][1].startswith("fc ")
    with pytest.raises(IndexError, match="out of range"):
        H.tree_html(small_trace(), 6)


def fold_trace():
    """step > parent > [12 x aten::add (each with an aten::empty child), aten::mul,
    3 x aten::add, 7 tiny ops of 5 ns]."""
    spans = [S("step#0", "step", 0, 10000), S("parent", "module", 0, 9000, 0, type="Block")]
    t = 0
    for _ in range(12):
        spans.append(S("aten::add", "op", t, t + 100, 1))
        spans.append(S("aten::empty", "op", t + 10, t + 30, len(spans) - 1))
        t += 100
    spans.append(S("aten::mul", "op", t, t + 500, 1))
    t += 500
    for _ in range(3):
        spans.append(S("aten::add", "op", t, t + 200, 1))
        t += 200
    for k in range(7):
        spans.append(S("aten::tiny%d" % k, "op", t, t + 5, 1))
        t += 5
    return xsp.Trace.from_spans(spans)


def test_tree_folds_consecutive_siblings_and_counts_hidden_ones():
    lines = tree_lines(H.tree_html(fold_trace(), 0))
    assert lines == [
        (0, "step#0 [step] 10.000 us, self 1.000 us, 100.0%", True),
        (1, "parent [module Block] 9.000 us, self 6.665 us, 90.0%", True),
        (2, "x12 aten::add [op] 1.200 us, self 960 ns, 12.0%, mean 100 ns", False),
        # the members' children, merged
        (3, "x12 aten::empty [op] 240 ns, self 240 ns, 2.4%, mean 20 ns", None),
        (2, "aten::mul [op] 500 ns, self 500 ns, 5.0%", None),
        (2, "x3 aten::add [op] 600 ns, self 600 ns, 6.0%, mean 200 ns", None),
        (2, "… 7 more, 35 ns (each line under 0.5% of the root)", None)]
    flat = tree_lines(H.tree_html(fold_trace(), 0, fold=False, min_share=0))
    assert len(flat) == 2 + 12 * 2 + 1 + 3 + 7
    assert flat[2] == (2, "aten::add [op] 100 ns, self 80 ns, 1.0%", False)


def test_tree_max_depth_and_max_nodes_are_counted():
    lines = tree_lines(H.tree_html(fold_trace(), 0, max_depth=1))
    assert lines == [
        (0, "step#0 [step] 10.000 us, self 1.000 us, 100.0%", True),
        (1, "parent [module Block] 9.000 us, self 6.665 us, 90.0% … 35 spans below "
            "(max_depth 1)", None)]
    out = H.tree_html(fold_trace(), 0, max_nodes=3)
    lines = tree_lines(out)                  # tags still balance
    # 3 lines: 1 + 1 + 12 spans shown; the 7 hidden ones counted; 12 + 1 + 3 left
    assert [ln[1].split(" [")[0] for ln in lines[:3]] == ["step#0", "parent", "x12 aten::add"]
    assert lines[3:] == [(2, "… 7 more, 35 ns (each line under 0.5% of the root)", None),
                         (0, "… stopped at max_nodes 3 lines; 16 spans not shown", None)]
    with pytest.raises(ValueError, match="max_nodes"):
        H.tree_html(fold_trace(), max_nodes=0)


def test_tree_flags_and_deep_nesting():
    # 3000 nested spans: past Python's recursion limit; the last one open at stop
    n = 3000
    spans = [S("d%d" % k, "op", k, 2 * n - k, k - 1 if k else None) for k in range(n)]
    spans[-1]["flags"] = 1
    out = H.tree_html(xsp.Trace.from_spans(spans), min_share=0, max_nodes=n)
    lines = tree_lines(out)
    assert len(lines) == n and lines[-1][1].endswith("{open at stop}")


def test_tree_is_linear_in_the_spans(monkeypatch):
    """Children are indexed once: tree_html never asks the trace for one span's children,
    and 50000 siblings in a row fold into one line."""
    spans = [S("step#0", "step", 0, 10 ** 7)]
    spans += [S("aten::add", "op", 100 * k, 100 * k + 50, 0) for k in range(50000)]
    tr = xsp.Trace.from_spans(spans)
    monkeypatch.setattr(type(tr), "children_of",
                        lambda *a: pytest.fail("children_of called per span"))
    assert tree_lines(H.tree_html(tr)) == [
        (0, "step#0 [step] 10.000 ms, self 7.500 ms, 100.0%", True),
        (1, "x50000 aten::add [op] 2.500 ms, self 2.500 ms, 25.0%, mean 50 ns", None)]


def test_tree_of_a_training_loop():
    tr = training_trace()
    lines = tree_lines(H.tree_html(tr))
    texts = [t for _, t, _ in lines]
    assert texts[0].startswith("train [region] 2.010 ms")
    assert "x40 aten::add_ [op] 80.000 us, self 80.000 us, 4.0%, mean 2.000 us" in texts
    assert "x300 aten::mul [op] 60.000 us, self 60.000 us, 3.0%, mean 200 ns" in texts
    assert sum(t.startswith("step#") for t in texts) == 2
    # the kernel under its op, across tracks
    # (its self time less its launch on the same thread, not the kernel on the stream)
    i = texts.index("aten::convolution [op] 135.000 us, self 127.000 us, 6.7%")
    assert texts[i + 1:i + 3] == [
        "implicit_convolve_sgemm<float> [kernel] 280.000 us, self 280.000 us, 13.9%",
        "… 1 more, 8.000 us (each line under 0.5% of the trace)"]


# -- tables --------------------------------------------------------------------------------
def test_table_units_in_cells_not_headers():
    df = pd.DataFrame({"name": ["fc<1>", "act"], "calls": [2, 1],
                       "total_ns": [1952000, 812], "gpu_share": [0.1234, np.nan],
                       "allocated_bytes": [4096.0, np.nan], "ratio": [1.5, None]})
    out = H.table_html(df)
    assert df["total_ns"].dtype == np.int64                  # the frame is left alone
    heads = re.findall(r"<th(?: [^>]*)?>(.*?)</th>", out)
    assert heads == ["name", "calls", "total", "gpu share", "allocated", "ratio"]
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", out)]
    assert rows[1:] == [["fc&lt;1&gt;", "2", "1.952 ms", "12.3%", "4.0 KiB", "1.5"],
                        ["act", "1", "812 ns", "-", "-", "-"]]
    assert '<td class="xsp-num">1.952 ms</td>' in out and "<td>act</td>" in out
    # units override the names; a header made ambiguous keeps the column name
    out = H.table_html(pd.DataFrame({"t": [1500], "t_ns": [2]}), units={"t": "ns"})
    assert re.findall(r"<th(?: [^>]*)?>(.*?)</th>", out) == ["t", "t_ns"]
    assert re.findall(r"<td[^>]*>(.*?)</td>", out) == ["1.500 us", "2 ns"]
    with pytest.raises(ValueError, match="unit of column 't'"):
        H.table_html(pd.DataFrame({"t": [1]}), units={"t": "px"})


def test_page_escapes_its_title():
    doc = H.page("a <b> & c", "<p>x</p>")
    assert "<title>a &lt;b&gt; &amp; c</title>" in doc and "<p>x</p>" in doc
    assert doc.startswith("<!DOCTYPE html>")
