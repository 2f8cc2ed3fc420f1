"""The HTML report: one self-contained HTML file (html()), and the fragment that Jupyter shows
for a Measurement (`_repr_html_`; a Trace shows its own short summary, and html_fragment(trace)
gives it this report).

It shows the figures of the text summary (xsp.report.summary's _Summary) as tables and plots.
The plots are inline SVG drawn by xsp.report.parts (no matplotlib), so the file stands alone and
its size is bounded however big the trace: the per-iteration table and chart bin the iterations
when there are more than ITER_ROWS and ITER_BARS, the other tables are top-N or cut at
TABLE_ROWS rows, and the page says so each time.
"""
import html as _html_mod

import numpy as np

from xsp.analysis import distributed, memory
from xsp.analysis import peaks as P
from xsp.analysis import tables as A
from xsp.core.fmt import fmt_bytes, fmt_ns, fmt_share, fmt_si
from xsp.core.util import atomic_write, printable
from xsp.report import parts as _html
from xsp.report.summary import _median_index, _overhead_notes, _pretty, _Summary


_CSS = """
.xsp-report{font-family:system-ui,sans-serif;font-size:13px}
.xsp-report h2{font-size:17px;margin:8px 0}.xsp-report h3{font-size:14px;margin:14px 0 4px}
.xsp-report table.xsp{border-collapse:collapse}
.xsp-report table.xsp td,.xsp-report table.xsp th{border:1px solid #ccc;padding:2px 6px;
text-align:right}
.xsp-report table.xsp td:first-child,.xsp-report table.xsp th:first-child{text-align:left}
.xsp-report figure svg{max-width:100%;height:auto}
"""


ITER_ROWS = 30      # rows of the HTML iterations table: more iterations are binned into as many
ITER_BARS = 120     # bars of the per-iteration chart: more iterations are binned likewise
TABLE_ROWS = 50     # rows of an HTML table that is not a top-N one (layer types, GPU vs CPU)
PHASES = (("forward", "#4c72b0"), ("toplevel_layers", "#8172b2"), ("backward", "#dd8452"),
          ("optimizer", "#55a868"), ("other", "#bbbbbb"))
PHASE_LABELS = {"toplevel_layers": "loss, top-level layers"}


def iteration_bins(n, max_bins):
    """(first, last): the iterations 0..n-1 cut into min(n, max_bins) runs of consecutive
    iterations whose sizes differ by one at most (the larger ones last), as int64 arrays of
    each run's first and last iteration; empty arrays for n = 0."""
    k = min(n, max_bins)
    if k <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    edges = (np.arange(k + 1, dtype=np.int64) * n) // k
    return edges[:-1], edges[1:] - 1


def bin_stats(values, first, last):
    """(mean, min, max) of values (one per iteration) over each run first[k]..last[k]
    (iteration_bins), as float64 arrays; the sums are taken in int64 when values are
    integers, so the means are exact to a float's precision."""
    v = np.asarray(values)
    if v.dtype.kind in "iub":
        v = v.astype(np.int64)
    n = (last - first + 1).astype(np.float64)
    return (np.add.reduceat(v, first) / n, np.minimum.reduceat(v, first).astype(np.float64),
            np.maximum.reduceat(v, first).astype(np.float64))


def bins_words(first, last):
    """What a binning did, for a caption: "1,830 iterations in 120 bins of 15-16 consecutive
    iterations" ("of 15" when all are the same size)."""
    sizes = last - first + 1
    lo, hi = int(sizes.min()), int(sizes.max())
    return "%s iterations in %d bins of %s consecutive iterations" % (
        format(int(last[-1]) + 1, ","), len(first), lo if lo == hi else "%d-%d" % (lo, hi))


def _binned_phases(cols, max_rows):
    """The iterations table binned (more iterations than max_rows): one row per run of
    consecutive iterations (iteration_bins): "iterations" ("0-14"), count, the mean step
    latency, its min and max, and the mean of each phase; and the words saying so."""
    import pandas as pd
    first, last = iteration_bins(len(cols["step_ns"]), max_rows)
    mean, lo, hi = bin_stats(cols["step_ns"], first, last)
    df = {"iterations": ["%d-%d" % (a, b) if a != b else str(a) for a, b in zip(first, last)],
          "count": last - first + 1, "step_ns": mean, "min_ns": lo, "max_ns": hi}
    for name, _ in PHASES:
        df[name + "_ns"] = bin_stats(cols[name + "_ns"], first, last)[0]
    return pd.DataFrame(df), (
        "%s: each row the means of its bin (step: the step latency; min and max: its fastest "
        "and slowest step); xsp.analysis.phases(trace) has one row per iteration"
        % bins_words(first, last))


def _iterations_svg(s):
    """The per-iteration chart as SVG: a bar per iteration, stacked by phase for steps; with
    more than ITER_BARS iterations, a bar per run of consecutive iterations (iteration_bins),
    the mean of each phase (or of the latency) over the run, its whisker the min-max latency.
    (svg, caption: what the binning did, or None)."""
    cols = s.phase_cols
    lat = cols["step_ns"] if s.iteration_kind == "step" else \
        s.iters["latency_ns"].to_numpy(np.int64)
    first, last = iteration_bins(len(lat), ITER_BARS)
    mean, lo, hi = bin_stats(lat, first, last)
    if s.iteration_kind == "step":
        series = [(PHASE_LABELS.get(name, name), bin_stats(cols[name + "_ns"], first, last)[0],
                   color) for name, color in PHASES if cols[name + "_ns"].any()]
        title, what = "Step latency per iteration, by phase", "the mean of each phase"
    else:
        series = [("latency", mean, "#4c72b0")]
        title, what = "Latency per iteration", "the mean latency"
    if len(first) == len(lat):          # a bar per iteration: nothing binned
        return _html.iterations_svg(first, last, series, title=title), None
    caption = "%s: each bar %s over its bin, the whisker its fastest and slowest iteration" % (
        bins_words(first, last), what)
    return _html.iterations_svg(first, last, series, lo, hi, title=title), caption


def _plots(s):
    """[(alt text, SVG, caption or None)] for the summary's figures, drawn as inline SVG
    (xsp.report.parts): the latency per iteration (binned when there are more than ITER_BARS
    iterations), then bars of the top-N tables."""
    plots = []
    if len(s.iters) > 1:
        plots.append(("Latency per iteration",) + _iterations_svg(s))
    blue, orange = "#4c72b0", "#dd8452"

    def bars(title, labels, series, xlabel="time"):
        plots.append((title, _html.barh_svg(labels, series, title=title, xlabel=xlabel), None))

    if len(s.ranking):
        bars("Top layers: forward and backward time (all calls)", s.ranking["name"],
             [("forward", s.ranking["total_ns"], blue),
              ("backward", s.ranking["backward_ns"], orange)])
    types = s.types.head(TABLE_ROWS)      # as the table: the rest are counted under it
    if len(types):
        bars("Layer types: forward and backward time", types["type"],
             [("forward", types["total_ns"], blue), ("backward", types["backward_ns"], orange)])
    if len(s.ops):
        bars("Top ops by self time", s.ops["name"], [("self", s.ops["self_ns"], blue)],
             "self time")
    if s.has_gpu and len(s.kernels):
        bars("Top kernels by GPU time", s.kernels["name"],
             [("GPU", s.kernels["total_ns"], blue)], "total GPU time")
    if s.has_gpu:
        g = s.gvc[s.gvc["layer"] != "(model)"]
        g = g.sort_values("latency_ns", ascending=False).head(s.top)
        if len(g):
            bars("GPU vs CPU time per layer", g["layer"],
                 [("GPU", g["gpu_ns"], "#55a868"), ("CPU", g["cpu_ns"], "#c44e52")])
    if s.overhead is not None and len(s.overhead):
        ov = s.overhead
        bars("Latency of each level in each run",
             ["%s in run %s" % (a, b) for a, b in zip(ov["level"], ov["run"])],
             [("latency", ov["latency_ns"], blue)], "latency")
    return plots


def _peaks_words(attrs):
    """What the roofs are, for the report: the peaks' device, source and figures."""
    p = attrs.get("peaks")
    if not p:
        return attrs.get("peaks_note") or "no roofs"
    if "peak_gflops" in p:
        return "roofs: peak %s, memory %s (given)" % (fmt_si(p["peak_gflops"] * 1e9, "FLOP/s"),
                                                     fmt_si(p["peak_dram_gbps"] * 1e9, "B/s"))
    src = p.get("source")
    how = {"measured": "measured now by xsp.peaks", "cache": "measured by xsp.peaks, cached",
           "override": "given (%s)" % (p.get("method") or {}).get("override", "override")}
    return "roofs: %s peaks %s: %s; memory %s" % (
        p.get("device"), how.get(src, src), ", ".join(
            "%s %s" % (d, fmt_si(v, "FLOP/s")) for d, v in sorted(p["flops_per_s"].items())),
        fmt_si(p.get("bytes_per_s"), "B/s"))


def _roofline_parts(trace, top):
    """The report's roofline section (HTML strings): a note, the plot (xsp._html.roofline_svg,
    one point per layer, or per op without layers) and the table's first `top` rows; [] when
    the trace's ops carry no inputs (xsp.profile(record_shapes=True))."""
    if trace is None:
        return []
    src = A._src(trace)
    if not A._has_inputs(src):
        return []
    esc = _html_mod.escape
    by = "layer" if A._layer_mask(src).any() else "op"
    out = ["<h3>Roofline</h3>"]
    notes = []
    try:
        try:
            df = A.roofline(trace, by=by)
        except P.PeaksError as e:
            notes.append("roofs left out: %s" % e)
            df = A.roofline(trace, by=by, peaks=False)
    except (ValueError, TypeError, RuntimeError, ImportError) as e:
        out.append("<p>%s</p>" % esc("No roofline: %s" % e))
        return out
    kinds = set(df["source"].dropna()) if len(df) else set()
    values = ("measured (hardware counters of the kernels)" if kinds == {"measured"} else
              "analytical: FLOPs from PyTorch's formulas and bytes from a model of the "
              "recorded shapes (xsp.flops), not measured" if kinds <= {"analytical"} else
              "analytical (xsp.flops, from the shapes) where the kernels had no hardware "
              "counters, measured where they had: the source column says which")
    what = ("one point per layer: the ops each layer owns, forward and backward (its "
            "sublayers' are theirs)" if by == "layer" else "one point per op name and dtype")
    dur = ("durations: the GPU work the ops launched" if df.attrs.get("durations") ==
           "GPU work" else "durations: the ops' CPU spans (inclusive)")
    out.append("<p>%s</p>" % esc("%s; values are %s; %s; %s." % (
        what, values, dur, _peaks_words(df.attrs))))
    if df.attrs.get("partial"):
        notes.append("%d op trees had some kernels with hardware counters and some without: "
                     "their values are analytical" % df.attrs["partial"])
    label = df.columns[0]
    pk = df.attrs.get("peaks") or {}
    points = []
    for r in df.to_dict("records"):
        tip = "%s [%s, %s]\n%s, %s in %s\nintensity %s FLOP/B; achieved %s; roof %s (%s " \
              "bound); %s of the roof" % (
                  r[label], r["dtype"] or "dtype ?", r["source"], fmt_si(r["flops"], "FLOP"),
                  fmt_si(r["bytes"], "B"), fmt_ns(r["duration_ns"]),
                  fmt_si(r["arithmetic_intensity"]), fmt_si(r["flops_per_s"], "FLOP/s"),
                  fmt_si(r["roof_flops_per_s"], "FLOP/s"), r["bound"] or "?",
                  fmt_share(r["roof_fraction"], precise=True))
        points.append({"label": r[label], "intensity": r["arithmetic_intensity"],
                       "flops_per_s": r["flops_per_s"], "dtype": r["dtype"], "tip": tip})
    peak = dict(pk.get("flops_per_s") or {})
    if "peak_gflops" in pk:
        peak = {d: pk["peak_gflops"] * 1e9 for p in points
                for d in str(p["dtype"] or "").split("+") if d}
    bw = pk.get("bytes_per_s") or (pk["peak_dram_gbps"] * 1e9 if "peak_dram_gbps" in pk
                                   else None)
    out.append(_html.roofline_svg(points, bw, peak, notes=notes))
    shown = df.head(top)
    import pandas as pd
    table = pd.DataFrame({
        label: shown[label], "dtype": shown["dtype"],
        "FLOPs": [fmt_si(v) for v in shown["flops"]],
        "bytes": [fmt_si(v) for v in shown["bytes"]],
        "time": [fmt_ns(v) for v in shown["duration_ns"]],
        "FLOP/byte": [fmt_si(v) for v in shown["arithmetic_intensity"]],
        "achieved": [fmt_si(v, "FLOP/s") for v in shown["flops_per_s"]],
        "roof": [fmt_si(v, "FLOP/s") for v in shown["roof_flops_per_s"]],
        "bound": shown["bound"],
        "of roof": [fmt_share(v, precise=True) for v in shown["roof_fraction"]],
        "source": shown["source"], "ops": shown["ops"], "no formula": shown["uncounted"]})
    out.append(_html.table_html(table))
    if len(df) > top:
        out.append("<p>%s</p>" % esc("%d more rows: xsp.analysis.roofline(trace, by=%r)"
                                     % (len(df) - top, by)))
    return out


def _timeline_window(s):
    """(start, end, label, span id) of the iteration the timeline and the tree show: the
    median one by latency, so that neither the first (slow) call nor an outlier is what the
    reader sees; None without one, or when it lasts no time."""
    j = _median_index(s.iters)
    if j is None:
        return None
    lat = int(s.iters["latency_ns"].iloc[j])
    if lat <= 0:      # a zero-length iteration (negative: times wrapped in a file): no timeline
        return None
    start = int(s.iters["start_ns"].iloc[j])
    return (start, start + lat, "iteration %d (the median by latency)" % j,
            int(s.iters["id"].iloc[j]))


def _memory_parts(trace, top):
    """The report's memory section (HTML strings), for a trace recorded with
    profile_memory=True: per device the totals, the timeline (xsp._html.memory_svg) and the
    layers with the highest peaks; [] without memory."""
    if trace is None or not memory.has_memory(trace):
        return []
    esc = _html_mod.escape
    out = ["<h3>Memory</h3>", "<p>%s</p>" % esc(
        "allocations PyTorch reports to profilers (profile_memory=True), each in the innermost "
        "span open on the allocating thread; per op, allocated minus freed is torch.profiler's "
        "self memory (docs/analyses.md, Memory)")]
    for dev, tot in memory.summary(trace).items():
        out.append("<p>%s</p>" % esc(
            "%s: %d allocations, %s allocated, %s freed, peak %s allocated; outside every "
            "span: %s allocated, %s freed" % (
                dev, tot["allocs"], fmt_bytes(tot["alloc_bytes"]),
                fmt_bytes(tot["freed_bytes"]), fmt_bytes(tot["peak_bytes"]),
                fmt_bytes(tot["outside_alloc_bytes"]),
                fmt_bytes(tot["outside_freed_bytes"]))))
        tl = memory.timeline(trace, device=dev)
        out.append(_html.memory_svg(tl.to_dict("records"), device=dev,
                                    notes=["%s: total allocated after each span with "
                                           "allocations (line); red: a span's peak inside it, "
                                           "where above that" % dev]))
        lay = memory.layers(trace, device=dev).dropna(subset=["peak_bytes"])
        if len(lay):
            lay = lay.sort_values(["peak_bytes", "id"], ascending=[False, True]).head(top)
            for c in ("peak_bytes", "alloc_bytes", "self_bytes", "backward_alloc_bytes"):
                lay[c] = lay[c].astype("Int64")
            out.append(_pretty(lay[["name", "type", "peak_bytes", "alloc_bytes", "self_bytes",
                                    "backward_alloc_bytes"]]).to_html(
                index=False, classes="xsp", border=0))
    return out


def html_fragment(source, top=10, include_compile=False):
    """The report as an HTML fragment (a <div>), as Jupyter shows it; include_compile as in
    text()."""
    s = _Summary(source, top, include_compile=include_compile)
    esc = _html_mod.escape
    parts = ['<div class="xsp-report"><style>%s</style>' % _CSS]
    head = s.headline()
    parts.append("<h2>%s</h2>" % esc(head[0]))
    parts.extend("<p>%s</p>" % esc(ln) for ln in head[1:])

    def table(title, df, empty, note=None):
        parts.append("<h3>%s</h3>" % esc(title))
        if note:
            parts.append("<p>%s</p>" % esc(note))
        if df is None or not len(df):
            parts.append("<p>%s</p>" % esc(empty))
        else:
            parts.append(_pretty(df).to_html(index=False, classes="xsp", border=0))

    meta = getattr(source, "meta", None)
    if isinstance(meta, dict) and "ranks" in meta:     # a merged job: the ranks first
        table("Ranks", distributed.ranks(source), "-",
              "a distributed job of %s ranks, clocks aligned by %s; per step means; wait: in "
              "collectives for the last rank; caused: the waiting a rank caused by arriving "
              "last; the straggler is the rank the others wait for (docs/distributed.md). "
              "The tables below are of all ranks together." % (
                  meta.get("merged"), meta.get("clock.aligned")))
    if s.overhead is not None:
        table("Overhead per level", s.overhead, "-")
        parts.extend("<p>%s</p>" % esc(n) for n in _overhead_notes(s.overhead))
    if s.iteration_kind == "step" and len(s.phases):
        what = ("forward: the model calls; loss, top-level layers: the loss and other top-level "
                "layer calls; backward: autograd's backward functions; optimizer: Optimizer.step "
                "and zero_grad; other: the rest of the step")
        if len(s.phases) > ITER_ROWS:       # a row per iteration would grow with the trace
            binned, words = _binned_phases(s.phase_cols, ITER_ROWS)
            table("Iterations, by phase", binned, "-", "%s. %s" % (words, what))
        else:
            table("Iterations, by phase", s.phases, "-", what)
    table("Top %d layers" % top, s.ranking, s.no_layers(),
          "leaf layers in the iterations, by forward time; backward through the forward op; "
          "'of forward' is of the model and top-level layer calls, 'of step (fwd+bwd)' is "
          "forward plus backward of the iterations' time")
    table("Layer types", s.types.head(TABLE_ROWS), s.no_layers())
    if len(s.types) > TABLE_ROWS:
        parts.append("<p>%s</p>" % esc("%d more layer types not shown (the %d with the most "
                                       "forward time are): xsp.analysis.layer_types(trace)"
                                       % (len(s.types) - TABLE_ROWS, TABLE_ROWS)))
    table("Top %d ops" % top, s.ops if s.has_gpu else s.ops.drop(columns=["gpu_ns",
                                                                          "gpu_self_ns"]),
          "no ops in the iterations", "aten ops in the iterations, by self time (total counts "
          "nested calls of the same op too, as torch.profiler does)")
    if s.has_gpu:
        table("Top %d kernels" % top, s.kernels, "No kernels recorded.")
        g = s.gvc
        if len(g) > TABLE_ROWS:      # the layers with the most latency, in order, and (model)
            lay = g.iloc[:-1]
            keep = np.sort(np.argsort(-lay["latency_ns"].to_numpy(float),
                                      kind="stable")[:TABLE_ROWS - 1])
            g = g.iloc[list(keep) + [len(g) - 1]]
        table("GPU vs CPU per layer", g, "-")
        if len(g) < len(s.gvc):
            parts.append("<p>%s</p>" % esc(
                "%d more layers not shown (the %d with the most latency are, in order of first "
                "call): xsp.analysis.gpu_vs_cpu(trace)" % (len(s.gvc) - len(g), len(g) - 1)))
    else:
        parts.append("<h3>Kernels, GPU vs CPU</h3><p>Level G was not recorded.</p>")
    trace = source if hasattr(source, "counters") and hasattr(source, "threads") else None
    if trace is None and s.measurement is not None:
        trace = s.measurement.trace
    parts.extend(_roofline_parts(trace, top))
    parts.extend(_memory_parts(trace, top))
    win = _timeline_window(s) if trace is not None and s.measurement is None else None
    if win is not None:
        parts.append("<h3>Timeline of %s</h3>" % esc(win[2]))
        parts.append(_html.timeline_svg(trace, win[0], win[1]))
    if trace is not None:
        root = win[3] if win is not None else None
        parts.append("<h3>Tree%s</h3>" % (" of that iteration" if root is not None else ""))
        parts.append(_html.tree_html(trace, root=root))
    parts.append("<h3>Plots</h3>")
    for alt, svg, caption in _plots(s):
        parts.append('<figure>%s%s</figure>' % (svg, "<figcaption>%s</figcaption>"
                                                % esc(caption) if caption else ""))
    parts.append("</div>")
    return printable("\n".join(parts))


def html(source, path=None, top=10, include_compile=False):
    """The report as one self-contained HTML document (tables, an SVG timeline of one
    iteration, the collapsible tree and SVG plots), include_compile as in text().
    Written to path (atomically) when given; returns the document as a str."""
    return document(html_fragment(source, top=top, include_compile=include_compile), path)


def document(fragment, path=None):
    """fragment (a report's <div>) as a self-contained HTML document, written to path
    (atomically) when given; returns the document.  OSError when path cannot be written."""
    doc = ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>xsp report</title>"
           "</head><body>\n%s\n</body></html>\n" % fragment)
    if path is not None:
        atomic_write(path, lambda f: f.write(doc))
    return doc
