"""The HTML report stays bounded however many iterations the trace has (issue 28): the
iterations table and the per-iteration chart bin the iterations when there are more than
fit, the tables that are not top-N are cut, and the page says what was done each time; a
small trace keeps one row and one bar per iteration."""
import re

import numpy as np

import xsp
from xsp.core.fmt import fmt_ns
from xsp.report import page as R


def S(name, kind, start, end, parent=None, thread=0, **attrs):
    return {"name": name, "kind": kind, "start_ns": start, "end_ns": end, "parent": parent,
            "thread": thread, "attrs": attrs}


def lat_of(k):                  # step k's latency and forward time, deterministic
    return 400 + (k % 7) * 50, 100 + (k % 5) * 10


def many_steps(n, types=1, gpu=False):
    """n steps of a model with `types` layer types (one layer each) and an optimizer step; with
    gpu, layer j lasts 1+j ns and launches a kernel (track 1), and steps last what they need."""
    period = 1000 if not gpu else 400 + types * (types + 3)
    spans = [S("prof", "region", 0, n * period)]
    for k in range(n):
        t = k * period
        lat, fwd = lat_of(k)
        if gpu:
            fwd = types * (types + 3) // 2 + 2
            lat = fwd + 100
        sid = len(spans)
        spans.append(S("step#%d" % (k + 1), "step", t, t + lat, 0))
        mid = len(spans)
        spans.append(S("Net", "model", t + 10, t + 10 + fwd, sid, type="Net"))
        pos = t + 11
        for j in range(types):
            end = pos + (1 + j if gpu else 1)
            spans.append(S("l%d" % j, "module", pos, end, mid, type="T%d" % j))
            if gpu:
                spans.append(S("k%d" % j, "kernel", pos, end, len(spans) - 1, 1))
            pos = end + (1 if gpu else 0)
        opt = t + 200 if not gpu else t + 20 + fwd
        spans.append(S("Optimizer.step#SGD.step", "scope", opt, opt + 60, sid))
    return xsp.Trace.from_spans(
        spans, meta={"levels": "MLG" if gpu else "ML", "region": "prof"},
        threads=[(1, "main", 0)] + ([(7, "stream 7", 1)] if gpu else []))


def test_iteration_bins_are_consecutive_runs_of_near_equal_size():
    first, last = R.iteration_bins(10, 3)
    assert first.tolist() == [0, 3, 6] and last.tolist() == [2, 5, 9]
    first, last = R.iteration_bins(1830, 120)
    sizes = last - first + 1
    assert len(first) == 120 and sizes.sum() == 1830 and set(sizes.tolist()) == {15, 16}
    assert (first[1:] == last[:-1] + 1).all() and first[0] == 0 and last[-1] == 1829
    assert R.bins_words(first, last) == "1,830 iterations in 120 bins of 15-16 consecutive " \
        "iterations"
    first, last = R.iteration_bins(4, 120)          # fewer than the bins: one each
    assert first.tolist() == last.tolist() == [0, 1, 2, 3]
    assert R.bins_words(first, last) == "4 iterations in 4 bins of 1 consecutive iterations"
    assert [len(a) for a in R.iteration_bins(0, 5)] == [0, 0]


def test_bin_stats_exact():
    v = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3], dtype=np.int64)
    first, last = R.iteration_bins(10, 3)
    mean, lo, hi = R.bin_stats(v, first, last)
    assert mean.tolist() == [8 / 3, 5.0, 4.0]
    assert lo.tolist() == [1, 1, 2] and hi.tolist() == [4, 9, 6]


def test_html_size_does_not_grow_with_the_iterations():
    small = xsp.report.html(many_steps(400))
    big = xsp.report.html(many_steps(4000))
    # regression: one table row per iteration made 10^6 spans a 1 MB page (issue 28)
    assert len(big) < 120_000 and len(small) < 120_000
    assert len(big) < 1.1 * len(small)


def test_iterations_table_is_binned_and_says_how():
    n = 400
    doc = xsp.report.html(many_steps(n))
    assert ("400 iterations in 30 bins of 13-14 consecutive iterations: each row the means "
            "of its bin") in doc
    assert "xsp.analysis.phases(trace) has one row per iteration" in doc
    table = doc[doc.index("<h3>Iterations, by phase</h3>"):doc.index("<h3>Top 10 layers")]
    rows = re.findall(r"<tr>\s*(.*?)</tr>", table[table.index("<tbody>"):], re.S)
    assert len(rows) == 30
    cells = [re.findall(r"<td>(.*?)</td>", r) for r in rows]
    first, last = R.iteration_bins(n, 30)
    lat = np.array([lat_of(k)[0] for k in range(n)])
    fwd = np.array([lat_of(k)[1] for k in range(n)])
    for b in (0, 17, 29):
        sel = slice(first[b], last[b] + 1)
        # iterations, count, step (mean), min, max, forward (mean), ...
        assert cells[b][:6] == ["%d-%d" % (first[b], last[b]), str(last[b] - first[b] + 1),
                                fmt_ns(lat[sel].mean()), fmt_ns(lat[sel].min()),
                                fmt_ns(lat[sel].max()), fmt_ns(fwd[sel].mean())]


def test_iteration_chart_is_binned_and_says_how():
    n = 1830
    doc = xsp.report.html(many_steps(n))
    assert ("<figcaption>1,830 iterations in 120 bins of 15-16 consecutive iterations: each "
            "bar the mean of each phase over its bin, the whisker its fastest and slowest "
            "iteration</figcaption>") in doc
    svg = doc[doc.index('class="xsp-iters"'):]
    svg = svg[:svg.index("</svg>")]
    tips = re.findall(r"<title>(.*?)</title>", svg, re.S)
    assert len(tips) == 120
    first, last = R.iteration_bins(n, 120)
    lat = np.array([lat_of(k)[0] for k in range(n)])
    fwd = np.array([lat_of(k)[1] for k in range(n)])
    b = 57
    sel = slice(first[b], last[b] + 1)
    assert tips[b].split("\n")[:2] == ["iterations %d-%d" % (first[b], last[b]),
                                       "forward %s" % fmt_ns(fwd[sel].mean())]
    assert tips[b].split("\n")[-1] == "min %s, max %s" % (fmt_ns(lat[sel].min()),
                                                          fmt_ns(lat[sel].max()))
    # regression: matplotlib drew a bar per iteration and phase, most of the report's time
    assert "<img" not in doc


def test_a_small_trace_keeps_a_row_and_a_bar_per_iteration():
    n = R.ITER_ROWS
    doc = xsp.report.html(many_steps(n))
    table = doc[doc.index("<h3>Iterations, by phase</h3>"):doc.index("<h3>Top 10 layers")]
    assert table.count("<tr>") == n and "bins" not in table
    svg = doc[doc.index('class="xsp-iters"'):]
    svg = svg[:svg.index("</svg>")]
    tips = re.findall(r"<title>(.*?)</title>", svg, re.S)
    assert len(tips) == n and tips[3].split("\n") == [
        "iteration 3", "forward %s" % fmt_ns(lat_of(3)[1]), "optimizer 60 ns",
        "other %s" % fmt_ns(lat_of(3)[0] - lat_of(3)[1] - 60)]
    assert "<figcaption>" not in doc and "min-max" not in svg


def test_layer_types_table_is_cut_and_says_so():
    doc = xsp.report.html(many_steps(3, types=R.TABLE_ROWS + 7))
    table = doc[doc.index("<h3>Layer types</h3>"):doc.index("<h3>Top 10 ops")]
    assert table.count("<tr>") == R.TABLE_ROWS
    assert "7 more layer types not shown (the %d with the most forward time are): " \
        "xsp.analysis.layer_types(trace)" % R.TABLE_ROWS in table


def test_gpu_vs_cpu_table_is_cut_and_says_so():
    tr = many_steps(2, types=R.TABLE_ROWS + 5, gpu=True)
    doc = xsp.report.html(tr)
    table = doc[doc.index("<h3>GPU vs CPU per layer</h3>"):doc.index("<h3>Timeline")]
    names = re.findall(r"<tr>\s*<td>(.*?)</td>", table)
    # the 49 layers with the most latency (l6..l54), in order of first call, then the model's
    # row
    assert len(names) == R.TABLE_ROWS and names[-1] == "(model)"
    assert names[:-1] == ["l%d" % j for j in range(6, R.TABLE_ROWS + 5)]
    assert "6 more layers not shown (the 49 with the most latency are, in order of first " \
        "call): xsp.analysis.gpu_vs_cpu(trace)" in table
