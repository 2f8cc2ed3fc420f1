"""Reports over the analyses: a text summary, one self-contained HTML file, and the HTML that
Jupyter shows for a Measurement (`_repr_html_`; a Trace shows its own short summary, and
html_fragment(trace) gives it this report).

Sources are what xsp.analysis takes: a Trace, a Measurement or a span table.  Plots are drawn
with matplotlib's object API (Figure + the Agg canvas, never pyplot), so making a report does
not change the backend of a notebook; they are embedded as base64 PNG, so the HTML file stands
alone.  Without matplotlib the reports say so and keep their tables.
"""
import base64
import html as _html
import io

import numpy as np
import pandas as pd

from . import analysis as A
from ._util import atomic_write, fmt_ns, printable


def fmt_share(x):
    if x is None or x is pd.NA or (isinstance(x, float) and np.isnan(x)):
        return "-"
    return "%.1f%%" % (100.0 * float(x))


def _pretty(df, ns=(), share=()):
    """A copy of df with ns columns and share columns formatted for reading."""
    out = df.copy()
    for c in out.columns:
        if c in ns or c.endswith("_ns"):
            out[c] = [fmt_ns(v) for v in out[c]]
        elif c in share or c.endswith("share"):
            out[c] = [fmt_share(v) for v in out[c]]
    return out.fillna("-") if len(out) else out


class _Summary:
    """Everything the reports show, computed once."""

    def __init__(self, source, top):
        self.src = A._src(source)
        # a Measurement (xsp.leveled) is recognised by duck typing, as xsp.analysis does it (a
        # span_table() method and a trace attribute; the Measurement docstring says so):
        # leveled is a layer above the reports (it imports them), so no isinstance here
        self.measurement = self.src.measurement
        meta = self.src.meta
        self.title = "xsp report: %s" % meta.get("region", "trace")
        self.levels = meta.get("levels", "?")
        if self.measurement is not None:
            self.levels = self.measurement.levels
        self.top = top
        self.iters = A.model_latency(self.src)
        self.ranking = A.layer_ranking(self.src, n=top)
        self.types = A.layer_types(self.src)
        self.kernels = A.kernels_by_name(self.src).head(top)
        self.gvc = A.gpu_vs_cpu(self.src)
        self.has_gpu = self.src.has_gpu
        self.overhead = self.measurement.overhead if self.measurement is not None else None
        trace = self.measurement.trace if self.measurement is not None else \
            (source if hasattr(source, "counters") else None)
        self.counters = dict(trace.counters) if trace is not None else {}
        if self.measurement is not None:      # what any session of the measurement lost
            self.counters = {}
            for ts in self.measurement.all_traces.values():
                for t in ts:
                    for k, v in t.counters.items():
                        self.counters[k] = self.counters.get(k, 0) + v
        self.n_spans = len(trace) if trace is not None else len(self.src.df)

    def headline(self):
        lat = self.iters["latency_ns"].to_numpy()
        if self.measurement is None:
            lines = [self.title, "levels %s, %d spans, %d iteration%s" % (
                self.levels, self.n_spans, len(lat), "" if len(lat) == 1 else "s")]
        else:
            m = self.measurement
            lines = [self.title, "levels %s, %d spans per iteration (run %s: %d spans in all)"
                     % (self.levels, len(self.src.df), m.runs[-1], self.n_spans)]
            lines.append("leveled measurement: runs %s, %d warm-up, %d repeat (+%d priming)%s, "
                         "trim %g" % (" / ".join(m.runs), m.warmup, m.repeat, m.skip,
                                      " x %d interleaved rounds" % m.rounds
                                      if m.rounds > 1 else "", m.trim))
            ov = m.overhead.iloc[0]
            s = "model latency %s (trimmed mean; std %s)" % (fmt_ns(ov["latency_ns"]),
                                                            fmt_ns(ov["std_ns"]))
            if m.batch_size:
                s += ", throughput %.1f samples/s at batch %d" % (m.throughput_per_s,
                                                                 m.batch_size)
            lines.append(s)
        if self.measurement is None and len(lat):
            lines.append("model latency: mean %s, median %s, min %s, max %s" % (
                fmt_ns(lat.mean()), fmt_ns(np.median(lat)), fmt_ns(lat.min()),
                fmt_ns(lat.max())))
        lost = {k: v for k, v in self.counters.items() if v}
        lines.append("lost or dropped: %s" % (", ".join("%s %d" % kv for kv in
                                                        sorted(lost.items())) or "none"))
        return lines

    def gpu_total(self):
        return self.gvc[self.gvc["layer"] == "(model)"].iloc[0]


def text(source, top=10):
    """The readable summary: headline, overhead per level (measurements), top layers, layer
    types, top kernels and GPU against CPU time.  Returns a str."""
    s = _Summary(source, top)
    out = s.headline()

    def section(title, df, empty):
        out.append("")
        out.append(title)
        if df is None or not len(df):
            out.append("  " + empty)
        else:
            out.extend("  " + ln for ln in _pretty(df).to_string(index=False).splitlines())

    if s.overhead is not None:
        section("Overhead per level (what each deeper run added)", s.overhead, "-")
    section("Top %d layers (leaf modules, by total latency)" % top,
            s.ranking.drop(columns=["cumulative_share"]), "no layers recorded (level L)")
    section("Layer types", s.types, "no layers recorded (level L)")
    if s.has_gpu:
        section("Top %d kernels" % top, s.kernels, "no kernels recorded")
        g = s.gpu_total()
        out.append("")
        out.append("GPU vs CPU: model %s = GPU work %s (%s) + CPU %s (%s)" % (
            fmt_ns(g["latency_ns"]), fmt_ns(g["gpu_ns"]), fmt_share(g["gpu_share"]),
            fmt_ns(g["cpu_ns"]), fmt_share(g["cpu_share"])))
    else:
        out.append("")
        out.append("Kernels, GPU vs CPU: level G was not recorded")
    return printable("\n".join(out) + "\n")


# -- HTML -----------------------------------------------------------------------------------
_CSS = """
.xsp-report{font-family:system-ui,sans-serif;font-size:13px}
.xsp-report h2{font-size:17px;margin:8px 0}.xsp-report h3{font-size:14px;margin:14px 0 4px}
.xsp-report table.xsp{border-collapse:collapse}
.xsp-report table.xsp td,.xsp-report table.xsp th{border:1px solid #ccc;padding:2px 6px;
text-align:right}
.xsp-report table.xsp td:first-child,.xsp-report table.xsp th:first-child{text-align:left}
.xsp-report img{max-width:100%}
"""


def _png(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _barh(labels, values, title, xlabel, stacked=None):
    from matplotlib.figure import Figure
    n = len(labels)
    fig = Figure(figsize=(7, 0.3 * n + 1.2))
    ax = fig.add_subplot()
    y = np.arange(n)[::-1]
    if stacked is None:
        ax.barh(y, values, color="#4c72b0")
    else:
        left = np.zeros(n)
        for name, vals, color in stacked:
            ax.barh(y, vals, left=left, label=name, color=color)
            left = left + np.nan_to_num(np.asarray(vals, dtype=float))
        ax.legend(loc="lower right")
    ax.set_yticks(y)
    ax.set_yticklabels([printable(str(s))[:48] for s in labels])
    ax.set_title(printable(title))
    ax.set_xlabel(xlabel)
    return _png(fig)


def _plots(s):
    """[(alt text, base64 PNG)] for the summary's figures; [] without matplotlib."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return None
    plots = []
    if len(s.iters) > 1:
        from matplotlib.figure import Figure
        fig = Figure(figsize=(7, 2.5))
        ax = fig.add_subplot()
        ax.plot(s.iters["iteration"], s.iters["latency_ns"] / 1e6, marker="o")
        ax.set_xlabel("iteration")
        ax.set_ylabel("latency (ms)")
        ax.set_title("Model latency per iteration")
        plots.append(("Model latency per iteration", _png(fig)))
    if len(s.ranking):
        plots.append(("Top layers by latency", _barh(
            s.ranking["name"], s.ranking["total_ns"] / 1e3, "Top layers by latency",
            "total latency (us)")))
    if len(s.types):
        plots.append(("Layer types by latency", _barh(
            s.types["type"], s.types["total_ns"] / 1e3, "Layer types by latency",
            "total latency (us)")))
    if s.has_gpu and len(s.kernels):
        plots.append(("Top kernels by GPU time", _barh(
            s.kernels["name"], s.kernels["total_ns"] / 1e3, "Top kernels by GPU time",
            "total GPU time (us)")))
    if s.has_gpu:
        g = s.gvc[s.gvc["layer"] != "(model)"]
        g = g.sort_values("latency_ns", ascending=False).head(s.top)
        if len(g):
            plots.append(("GPU vs CPU time per layer", _barh(
                g["layer"], None, "GPU vs CPU time per layer", "time (us)",
                stacked=[("GPU", g["gpu_ns"].to_numpy(float) / 1e3, "#55a868"),
                         ("CPU", np.clip(g["cpu_ns"].to_numpy(float), 0, None) / 1e3,
                          "#c44e52")])))
    if s.overhead is not None and len(s.overhead):
        ov = s.overhead
        plots.append(("Latency of each level in each run", _barh(
            ["%s in run %s" % (a, b) for a, b in zip(ov["level"], ov["run"])],
            ov["latency_ns"] / 1e3, "Latency of each level in each run", "latency (us)")))
    return plots


def html_fragment(source, top=10):
    """The report as an HTML fragment (a <div>), as Jupyter shows it."""
    s = _Summary(source, top)
    esc = _html.escape
    parts = ['<div class="xsp-report"><style>%s</style>' % _CSS]
    head = s.headline()
    parts.append("<h2>%s</h2>" % esc(head[0]))
    parts.extend("<p>%s</p>" % esc(ln) for ln in head[1:])

    def table(title, df, empty):
        parts.append("<h3>%s</h3>" % esc(title))
        if df is None or not len(df):
            parts.append("<p>%s</p>" % esc(empty))
        else:
            parts.append(_pretty(df).to_html(index=False, classes="xsp", border=0))

    if s.overhead is not None:
        table("Overhead per level", s.overhead, "-")
    table("Top %d layers" % top, s.ranking, "No layers recorded (level L).")
    table("Layer types", s.types, "No layers recorded (level L).")
    if s.has_gpu:
        table("Top %d kernels" % top, s.kernels, "No kernels recorded.")
        table("GPU vs CPU per layer", s.gvc, "-")
    else:
        parts.append("<h3>Kernels, GPU vs CPU</h3><p>Level G was not recorded.</p>")
    plots = _plots(s)
    parts.append("<h3>Plots</h3>")
    if plots is None:
        parts.append("<p>Plots need matplotlib (pip install matplotlib).</p>")
    for alt, png in plots or ():
        parts.append('<figure><img alt="%s" src="data:image/png;base64,%s"/></figure>'
                     % (esc(alt), png))
    parts.append("</div>")
    return printable("\n".join(parts))


def html(source, path=None, top=10):
    """The report as one self-contained HTML document (tables and embedded PNG plots).
    Written to path (atomically) when given; returns the document as a str."""
    s_frag = html_fragment(source, top=top)
    doc = ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>xsp report</title>"
           "</head><body>\n%s\n</body></html>\n" % s_frag)
    if path is not None:
        atomic_write(path, lambda f: f.write(doc))
    return doc


# -- comparing two traces --------------------------------------------------------------------
def compare(before, after, top=None):
    """Per layer and per kernel name, time per iteration before and after: returns (layers,
    kernels), two DataFrames with name, before_ns, after_ns, delta_ns (after - before) and
    delta_share (delta / before; NaN where before is 0 or missing), largest absolute delta
    first.  Layers are leaf layers by qualified name, kernels by name; a side's time is the
    total latency (layers) or GPU time (kernels) divided by its number of iterations, so
    traces of different lengths compare.  A name found on one side only has NaN on the
    other."""
    def side(src_b, src_a, fn, key):
        b = fn(src_b)
        a = fn(src_a)
        nb = max(len(src_b.iterations()), 1)
        na = max(len(src_a.iterations()), 1)
        b = b.set_index(key)["total_ns"] / nb if len(b) else pd.Series(dtype=float)
        a = a.set_index(key)["total_ns"] / na if len(a) else pd.Series(dtype=float)
        df = pd.DataFrame({"before_ns": b.astype(float), "after_ns": a.astype(float)})
        df["delta_ns"] = df["after_ns"] - df["before_ns"]
        df["delta_share"] = df["delta_ns"] / df["before_ns"].where(df["before_ns"] > 0)
        df = df.reset_index().rename(columns={"index": key})
        df = df.iloc[np.argsort(-df["delta_ns"].abs().fillna(np.inf).to_numpy(),
                                kind="stable")].reset_index(drop=True)
        return df if top is None else df.head(top)

    sb, sa = A._src(before), A._src(after)
    layers = side(sb, sa, A.layer_ranking, "name")
    kern = side(sb, sa, A.kernels_by_name, "name")
    return layers, kern


def compare_text(before, after, top=20, names=("before", "after")):
    """compare() as text: model latency before/after, then the layer and kernel tables."""
    lb = A.model_latency(before)["latency_ns"]
    la = A.model_latency(after)["latency_ns"]
    layers, kern = compare(before, after, top=top)
    out = ["xsp compare: %s -> %s" % names]
    mb = float(lb.mean()) if len(lb) else np.nan
    ma = float(la.mean()) if len(la) else np.nan
    d = ma - mb
    out.append("model latency (mean per iteration): %s -> %s (%s%s, %s)" % (
        fmt_ns(mb), fmt_ns(ma), "+" if d >= 0 else "", fmt_ns(d),
        fmt_share(d / mb if mb else np.nan)))
    for title, df in (("Layers", layers), ("Kernels", kern)):
        out.append("")
        out.append("%s (largest change first)" % title)
        if not len(df):
            out.append("  none recorded")
            continue
        out.extend("  " + ln for ln in _pretty(df).to_string(index=False).splitlines())
    return printable("\n".join(out) + "\n")


__all__ = ["text", "html", "html_fragment", "compare", "compare_text", "fmt_ns"]
