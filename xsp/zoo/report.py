"""xsp.zoo.report: the cross-model report of a results database (issue 26), as a text summary
for the terminal and as one self-contained HTML file.

    xsp zoo report DIR               text(DIR) on stdout
    xsp zoo report DIR -o zoo.html   html(DIR, "zoo.html")

Both read xsp.zoo.analyses (whose docstring defines every number: the chosen evaluation per
model, system and batch size, the saturation batch size, the shares and which latency each
divides by, the speedup) over one snapshot of the results (analyses.connect): a results
directory, a list of them (several machines' results side by side) or a connection from
xsp.zoo.store.open.

The HTML has a section per analysis: the systems; throughput against batch size (an SVG line
per model, log axes, the saturation batch size marked) with the saturation and scaling
tables; layer-type shares as stacked bars per model and per family; the top layers and ops;
the roofline (xsp._html.roofline_svg, one point per model at its largest batch size with
FLOPs, per system); memory per model; GPU against CPU per model (when level G was
measured); two systems side by side (when the results hold two or more); the failures.
Tables are xsp._html.table_html's, sortable by a click on a header (SORT_SCRIPT, inline).
The page loads nothing from outside itself, and every name from the results (models,
families, layers, ops, hosts, reasons: they come from users' manifests) is escaped.

Its size is bounded whatever the zoo holds: a plot draws at most max_models models (the
first by best throughput; max_systems plots per section) and a table shows at most max_rows
rows, each saying how many it leaves out ("12 more models not shown ...") and which analysis
gives them all.  A name is cut to NAME_CHARS characters in plots (whole in the tooltip).
"""
import math
import os

import numpy as np

from xsp.report import parts as H
from xsp.core.fmt import fmt_bytes, fmt_count, fmt_ns, fmt_share, fmt_si, number as _number
from xsp.core.util import atomic_write, printable
from . import analyses as Z

__all__ = ["text", "html", "MAX_MODELS", "MAX_ROWS", "MAX_SYSTEMS"]

MAX_MODELS = 20     # models per plot
MAX_ROWS = 50       # rows per table
MAX_SYSTEMS = 4     # plots per section (one per system)
NAME_CHARS = 32     # characters of a name in a plot
TEXT_WIDTH = 100    # columns of the text summary
PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b2", "#937860", "#da8bc3",
           "#8c8c8c", "#ccb974", "#64b5cd")
OTHER_COLOR = "#d0d0d0"
_TYPES_SHOWN = 8    # layer types with a colour of their own in the stacked bars

_esc = H._esc


def _cut(s, n=NAME_CHARS):
    s = printable(str(s))
    return s if len(s) <= n else s[:n - 1] + "…"


_num = _number       # v as a float, None for None, NA (float(NA) raises), NaN and non-numbers


def _is(col, v):
    """The mask of a column's rows equal to v (missing values equal to a missing v)."""
    return col.isna() if _num(v) is None and not isinstance(v, str) else col == v


def _plural(n, word, many=None):
    """'1 model', '2 models'; many: the plural when it is not word + 's'."""
    return "%d %s" % (n, word if n == 1 else many or word + "s")


# -- what the report reads ---------------------------------------------------------------------

class _Results:
    """Every analysis the report shows, read once from one snapshot."""

    def __init__(self, con, tolerance, peaks, base, other):
        self.tolerance = tolerance
        self.systems = Z.systems(con)
        self.failures = Z.failures(con)
        self.scaling = Z.scaling(con, tolerance)
        self.saturation = Z.saturation(con, tolerance)
        self.types = Z.layer_types(con)
        self.families = Z.layer_types(con, by="family")
        self.layers = Z.top_layers(con, n=None)
        self.ops = Z.top_ops(con, n=None)
        self.roofline = Z.roofline(con, peaks=peaks)
        self.memory = Z.memory(con)
        self.gpu = Z.gpu_share(con)
        self.peaks = peaks
        present = sorted(s for s in self.scaling["system_id"].dropna().unique())
        self.present = present
        self.compare = self.compare_types = None
        self.compare_note = None
        if base is not None or other is not None or len(present) >= 2:
            if base is None and other is None and len(present) > 2:
                base, other = present[0], present[1]
                self.compare_note = ("%d systems hold ok evaluations: the first two by "
                                     "system_id are compared (choose with base= and other=)"
                                     % len(present))
            self.compare = Z.compare_systems(con, base, other)
            self.compare_types = Z.compare_systems(con, base, other, by="layer_type")
        self.label = dict(zip(self.systems["system_id"], self.systems["label"]))
        self.host = dict(zip(self.systems["system_id"], [
            h if isinstance(h, str) else s for h, s in zip(self.systems["hostname"],
                                                           self.systems["system_id"])]))
        n_ok = int(self.systems["ok"].sum())
        self.counts = {"ok": n_ok}
        for st in ("failed", "timeout", "killed"):
            self.counts[st] = int(self.systems[st].sum())
        self.models = sorted(set(self.scaling["model"]))
        self.families_present = sorted(set(f for f in self.scaling["family"] if
                                           isinstance(f, str)))

    def system_name(self, sid):
        return self.label.get(sid) or (sid if isinstance(sid, str) else "(no system)")

    def model_label(self, model, sid):
        """A model's name in a plot with several systems: "model @ host"."""
        if len(self.present) <= 1:
            return str(model)
        return "%s @ %s" % (model, self.host.get(sid) or sid)

    def ranked_models(self, sid=None):
        """(model, system) pairs by best throughput, highest first (then by name)."""
        s = self.saturation
        if sid is not None:
            s = s[_is(s["system_id"], sid)]
        s = s.assign(_t=s["best_throughput_per_s"].fillna(-1.0))
        s = s.sort_values(["_t", "model"], ascending=[False, True], kind="stable")
        return list(zip(s["model"], s["system_id"]))


def _source_name(src):
    if isinstance(src, (list, tuple)):
        return ", ".join(os.fspath(s) for s in src)
    if isinstance(src, (str, os.PathLike)):
        return os.fspath(src)
    return "a results connection"


# -- text ---------------------------------------------------------------------------------

def _text_table(rows, heads, width, right=()):
    """Rows (lists of str) under heads, columns padded; the last column cut so that a line
    fits width characters."""
    if not rows:
        return []
    cols = list(zip(*([heads] + rows)))
    w = [max(len(c) for c in col) for col in cols]
    out = []
    for r in [heads] + rows:
        cells = [c.rjust(w[i]) if i in right else c.ljust(w[i]) for i, c in enumerate(r)]
        out.append(_fit_line("  " + "  ".join(cells).rstrip(), width))
    return out


def _fit_line(s, width):
    return s if len(s) <= width else s[:width - 1] + "…"


def _rate(v):
    return fmt_si(v, "/s")


def text(src, *, top=10, width=TEXT_WIDTH, tolerance=Z.TOLERANCE):
    """The report as a terminal summary (a str): the counts of evaluations by status, the
    systems, each model's best throughput and saturation batch size, the layer types with the
    largest shares, the top ops and the failures with their reasons; top rows per table,
    lines at most width characters (names cut with "…").  Raises analyses.NoResultsError for
    a missing or empty results directory."""
    if width < 40:
        raise ValueError("width must be at least 40 characters, not %r" % (width,))
    with Z.connect(src) as con:
        r = _Results(con, tolerance, None, None, None)
    lines = []
    add = lines.append
    add(_fit_line("xsp zoo report: %s" % _source_name(src), width))
    c = r.counts
    not_done = c["failed"] + c["timeout"] + c["killed"]
    add("%d ok evaluations, %d not done (%d failed, %d timeout, %d killed); %s, %s, %s" % (
        c["ok"], not_done, c["failed"], c["timeout"], c["killed"],
        _plural(len(r.models), "model"), _plural(len(r.families_present), "family", "families"),
        _plural(len(r.present), "system")))
    add("")
    add("systems:")
    lines += _text_table(
        [[str(s.system_id), _cut(s.label, 40), str(s.ok), str(s.failed + s.timeout + s.killed)]
         for s in r.systems.itertuples(index=False)],
        ["system", "host", "ok", "not ok"], width, right={2, 3})
    add("")
    tol = "%g%%" % (100 * tolerance)
    add("throughput (samples/s; saturation: the smallest batch within %s of the best):" % tol)
    sat = r.saturation
    order = r.ranked_models()
    rows = []
    by = {(m, s): row for m, s, row in zip(sat["model"], sat["system_id"],
                                           sat.to_dict("records"))}
    for m, s in order[:top]:
        row = by[(m, s)]
        rows.append([_cut(m), str(s), _rate(row["best_throughput_per_s"]),
                     fmt_count(row["best_batch_size"]), fmt_count(row["saturation_batch_size"]),
                     _trend(row)])
    lines += _text_table(rows, ["model", "system", "best", "at batch", "saturates",
                                "trend"], width, right={2, 3, 4})
    if len(order) > top:
        add("  … %d more" % (len(order) - top))
    add("")
    add("layer types (mean share of the models' leaf-layer time, per system):")
    fam = _type_means(r.types)
    lines += _text_table([[_cut(t), str(s), fmt_share(v), str(n)] for t, s, v, n in fam[:top]],
                         ["layer type", "system", "share", "models"], width, right={2, 3})
    if not fam:
        add("  none: no evaluation recorded layers (levels ML)")
    elif len(fam) > top:
        add("  … %d more" % (len(fam) - top))
    add("")
    add("top ops (mean share of the iteration in run ML over the profiles):")
    ops = r.ops
    lines += _text_table([[_cut(o.op, 48), fmt_share(o.mean_share), str(o.models),
                           "%s (%s)" % (_cut(o.max_model, 24), fmt_share(o.max_share))]
                          for o in ops.head(top).itertuples(index=False)],
                         ["op", "share", "models", "highest in"], width, right={1, 2})
    if not len(ops):
        add("  none: no evaluation recorded ops (levels ML)")
    elif len(ops) > top:
        add("  … %d more" % (len(ops) - top))
    if r.compare is not None and len(r.compare):
        cmp = r.compare
        add("")
        add(_fit_line("speedup of %s over %s: %s (the geometric mean over %s measured "
                      "on both)" % (cmp.attrs["other"], cmp.attrs["base"],
                                    _times(_geomean(cmp["speedup"])),
                                    _plural(len(cmp), "model and batch size",
                                            "models and batch sizes")), width))
    add("")
    f = r.failures
    add("failures: %s" % ("none" if not len(f) else len(f)))
    lines += _text_table([[_cut(x.model), "batch %d" % x.batch_size, str(x.system_id),
                           str(x.status), printable(str(x.reason or ""))]
                          for x in f.head(top).itertuples(index=False)],
                         ["model", "batch", "system", "status", "reason"], width)
    if len(f) > top:
        add("  … %d more: xsp zoo status DIR" % (len(f) - top))
    return "".join(_fit_line(ln, width) + "\n" for ln in lines)


def _times(v):
    return "-" if v is None else "%.3gx" % v


def _geomean(values):
    v = np.asarray([x for x in map(_num, values) if x is not None and x > 0], float)
    return float(np.exp(np.log(v).mean())) if len(v) else None


def _trend(row):
    if row["still_growing"] is None:
        return "one batch size"
    if row["still_growing"]:
        return "still growing (%+.0f%%)" % (100 * row["last_growth"])
    return "saturated"


def _type_means(types):
    """[(layer type, system, mean share over the system's models, models with it)], largest
    first: the mean of the models' shares, a model without the type counting 0."""
    if not len(types):
        return []
    n = types.groupby("system_id", dropna=False)["model"].nunique()
    out = []
    for (t, s), g in types.groupby(["layer_type", "system_id"], dropna=False):
        out.append((t, s, float(g["share"].sum()) / n[s], g["model"].nunique()))
    out.sort(key=lambda x: (-x[2], str(x[0]), str(x[1])))
    return out


# -- SVG plots ------------------------------------------------------------------------------

_SVG_STYLE = ("<style>.xsp-z text{font:11px system-ui,sans-serif;fill:#222}"
              ".xsp-z .xsp-tick{fill:#555;font-size:10px}.xsp-z .xsp-note{fill:#8a4b00}"
              ".xsp-z .xsp-plot{fill:#fafafa;stroke:#999}.xsp-z .xsp-grid{stroke:#e2e2e2}"
              ".xsp-z .xsp-line{fill:none;stroke-width:2}"
              ".xsp-z rect.xsp-seg:hover,.xsp-z circle:hover{stroke:#000;stroke-width:1}"
              "</style>")


def _svg(kind, width, height, label, body):
    return ('<svg xmlns="http://www.w3.org/2000/svg" class="xsp-z xsp-%s" width="%d" '
            'height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">%s\n%s\n</svg>'
            % (kind, width, height, width, height, _esc(label), _SVG_STYLE, "\n".join(body)))


def _color(i):
    return PALETTE[i % len(PALETTE)]


def _dash(i):
    """A dash pattern for the series past the palette's colours."""
    return ["", "6 3", "2 2", "8 3 2 3"][(i // len(PALETTE)) % 4]


def _throughput_svg(series, notes=(), width=820):
    """Throughput against batch size: one line per series (label, [(batch, throughput)],
    saturation batch or None, tooltip), log2 x axis with a tick at every batch size, log10
    y axis, the saturation point a larger dot, a legend right of the plot; notes under it."""
    left, top, legend_w = 70, 14, 230
    ph = 300
    pw = width - left - legend_w - 10
    xs = sorted({b for _, pts, _, _ in series for b, _ in pts})
    ys = [t for _, pts, _, _ in series for _, t in pts]
    x0, x1 = math.log2(xs[0]), math.log2(xs[-1])
    if x1 - x0 < 1:
        x0, x1 = x0 - 0.5, x1 + 0.5
    y0, y1 = H._decades(min(ys) / 1.5, max(ys) * 1.5)

    def px(b):
        return left + (math.log2(b) - x0) / (x1 - x0) * pw

    def py(t):
        return top + ph - (math.log10(t) - y0) / (y1 - y0) * ph

    out = ['<rect class="xsp-plot" x="%d" y="%d" width="%d" height="%d"/>' % (left, top, pw,
                                                                               ph)]
    step = max(1, int(math.ceil(len(xs) / 12.0)))
    for b in xs[::step]:
        out.append('<line class="xsp-grid" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/><text '
                   'class="xsp-tick" x="%.1f" y="%d" text-anchor="middle">%d</text>'
                   % (px(b), top, px(b), top + ph, px(b), top + ph + 14, b))
    for e in range(y0, y1 + 1):
        out.append('<line class="xsp-grid" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/><text '
                   'class="xsp-tick" x="%d" y="%.1f" text-anchor="end">%s</text>'
                   % (left, py(10.0 ** e), left + pw, py(10.0 ** e), left - 4,
                      py(10.0 ** e) + 3, _esc(fmt_si(10.0 ** e))))
    out.append('<text x="%.1f" y="%d" text-anchor="middle">batch size (log scale)</text>'
               % (left + pw / 2, top + ph + 30))
    out.append('<text transform="translate(14 %.1f) rotate(-90)" text-anchor="middle">'
               'samples/s (log scale)</text>' % (top + ph / 2))
    for i, (label, pts, sat, tip) in enumerate(series):
        col, dash = _color(i), _dash(i)
        coords = " ".join("%.1f,%.1f" % (px(b), py(t)) for b, t in pts)
        out.append('<polyline class="xsp-line" stroke="%s"%s points="%s"><title>%s</title>'
                   '</polyline>' % (col, ' stroke-dasharray="%s"' % dash if dash else "",
                                    coords, _esc(tip)))
        for b, t in pts:
            big = b == sat
            out.append('<circle cx="%.1f" cy="%.1f" r="%s" fill="%s"><title>%s</title>'
                       '</circle>' % (px(b), py(t), "5.5" if big else "3", col, _esc(
                           "%s: batch %d, %s%s" % (label, b, fmt_si(t, "samples/s"),
                                                   " (saturation batch)" if big else ""))))
        ly = top + 8 + 16 * i
        out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>'
                   '<text x="%d" y="%d">%s<title>%s</title></text>'
                   % (left + pw + 12, ly, left + pw + 32, ly, col,
                      ' stroke-dasharray="%s"' % dash if dash else "", left + pw + 36, ly + 4,
                      _esc(_cut(label)), _esc(label)))
    ny = max(top + ph + 50, top + 16 * len(series) + 20)
    for n in notes:
        out.append('<text class="xsp-note" x="%d" y="%d">%s</text>' % (left, ny, _esc(n)))
        ny += 16
    return _svg("scaling", width, ny, "throughput against batch size: %d models"
                % len(series), out)


def _stacked_svg(rows, keys, notes=(), width=820, what="share"):
    """Horizontal stacked bars of shares: rows (label, {key: fraction}), keys (the keys with
    a colour, in order; the rest of a row's shares go to "other"), 0 to 100%; a legend under
    the bars; notes under it."""
    left, top, bar_h = 240, 22, 18
    pw = width - left - 20
    out = []
    for k in range(5):
        x = left + pw * k / 4
        out.append('<line class="xsp-grid" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/><text '
                   'class="xsp-tick" x="%.1f" y="%d" text-anchor="middle">%d%%</text>'
                   % (x, top - 4, x, top + bar_h * len(rows), x, top - 8, 25 * k))
    colors = {k: _color(i) for i, k in enumerate(keys)}
    for i, (label, shares) in enumerate(rows):
        y = top + i * bar_h
        out.append('<text x="%d" y="%d" text-anchor="end">%s<title>%s</title></text>'
                   % (left - 6, y + 13, _esc(_cut(label)), _esc(label)))
        x = float(left)
        rest = sum(v for k, v in shares.items() if k not in colors and _num(v))
        parts = [(k, shares.get(k) or 0.0, colors[k]) for k in keys] + \
            [("other", rest, OTHER_COLOR)]
        for k, v, col in parts:
            if not v or v <= 0:
                continue
            w = min(v, 1.0) * pw
            out.append('<rect class="xsp-seg" x="%.1f" y="%d" width="%.1f" height="%d" '
                       'fill="%s"><title>%s</title></rect>'
                       % (x, y + 2, w, bar_h - 4, col,
                          _esc("%s: %s %s (%s)" % (label, k, fmt_share(v), what))))
            x += w
    ly = top + bar_h * len(rows) + 18
    lx = left
    for k, col in list(colors.items()) + [("other", OTHER_COLOR)]:
        lab = _cut(k, 24)
        wlab = 22 + int(6.6 * len(lab))
        if lx + wlab > width:
            lx, ly = left, ly + 16
        out.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" '
                   'y="%d">%s<title>%s</title></text>' % (lx, ly - 10, col, lx + 16, ly,
                                                          _esc(lab), _esc(k)))
        lx += wlab
    ny = ly + 22
    for n in notes:
        out.append('<text class="xsp-note" x="%d" y="%d">%s</text>' % (20, ny, _esc(n)))
        ny += 16
    return _svg("stacked", width, ny, "%s per row: %d rows" % (what, len(rows)), out)


def _bars_svg(rows, fmt, notes=(), width=820, log_ref=None, what="value"):
    """Horizontal bars: rows (label, value, tooltip).  Linear from 0; with log_ref (the
    speedup's 1) a log scale with the bars drawn from the reference, a line there."""
    left, top, bar_h = 240, 22, 18
    pw = width - left - 90
    vals = [v for _, v, _ in rows if v is not None and v > 0]
    out = []
    if log_ref is not None:
        lo = min(vals + [log_ref])
        hi = max(vals + [log_ref])
        a, b = math.log10(lo) - 0.1, math.log10(hi) + 0.1

        def px(v):
            return left + (math.log10(v) - a) / (b - a) * pw
        base = px(log_ref)
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#444"/><text '
                   'class="xsp-tick" x="%.1f" y="%d" text-anchor="middle">%s</text>'
                   % (base, top - 4, base, top + bar_h * len(rows), base, top - 8,
                      _esc(fmt(log_ref))))
    else:
        hi = max(vals) if vals else 1.0

        def px(v):
            return left + v / hi * pw
        base = float(left)
        out.append('<text class="xsp-tick" x="%d" y="%d">0</text><text class="xsp-tick" '
                   'x="%d" y="%d" text-anchor="end">%s</text>'
                   % (left, top - 8, left + pw, top - 8, _esc(fmt(hi))))
    for i, (label, v, tip) in enumerate(rows):
        y = top + i * bar_h
        out.append('<text x="%d" y="%d" text-anchor="end">%s<title>%s</title></text>'
                   % (left - 6, y + 13, _esc(_cut(label)), _esc(label)))
        if v is None or v <= 0:
            out.append('<text class="xsp-tick" x="%d" y="%d">-</text>' % (left + 4, y + 13))
            continue
        x1 = px(v)
        x, w = min(base, x1), max(abs(x1 - base), 1.0)
        out.append('<rect class="xsp-seg" x="%.1f" y="%d" width="%.1f" height="%d" '
                   'fill="%s"><title>%s</title></rect><text class="xsp-tick" x="%.1f" '
                   'y="%d">%s</text>' % (x, y + 2, w, bar_h - 4,
                                         PALETTE[0] if x1 >= base else PALETTE[3], _esc(tip),
                                         max(x, x1) + 4, y + 13, _esc(fmt(v))))
    ny = top + bar_h * len(rows) + 20
    for n in notes:
        out.append('<text class="xsp-note" x="%d" y="%d">%s</text>' % (20, ny, _esc(n)))
        ny += 16
    return _svg("bars", width, ny, "%s per row: %d rows" % (what, len(rows)), out)


# -- HTML sections ------------------------------------------------------------------------------

_CSS = (".xsp-cut,.xsp-why{color:#8a4b00}section{margin-bottom:28px}"
        "table.xsp-sort th[aria-sort=ascending]::after{content:' \\25B2'}"
        "table.xsp-sort th[aria-sort=descending]::after{content:' \\25BC'}"
        ".xsp-z{display:block;margin:6px 0}")


def _p(text, cls=None):
    return "<p%s>%s</p>" % (' class="%s"' % cls if cls else "", _esc(text))


def _table(df, max_rows, whole, units=None):
    """A sortable table of df's first max_rows rows, with a note of the rows left out and
    where to find them all (whole: the analysis call)."""
    if not len(df):
        return _p("none", "xsp-why")
    out = [H.table_html(df.head(max_rows), units=units, sortable=True)]
    if len(df) > max_rows:
        out.append(_p("%d more rows not shown (%d in all): %s" % (len(df) - max_rows, len(df),
                                                                 whole), "xsp-cut"))
    return "\n".join(out)


def _section(sid, title, parts):
    return '<section id="%s"><h2>%s</h2>\n%s\n</section>' % (sid, _esc(title),
                                                           "\n".join(parts))


def _cut_note(n_all, n_shown, what="models"):
    if n_all <= n_shown:
        return []
    return ["%d more %s not shown (%d in all): see the table" % (n_all - n_shown, what,
                                                                   n_all)]


def _per_system(r, max_systems):
    """The systems to draw a plot for (those with ok evaluations) and the note of those left
    out."""
    shown = r.present[:max_systems] or [None]
    left = len(r.present) - len(shown) if r.present else 0
    note = [_p("%d more systems not drawn: their rows are in the tables" % left, "xsp-cut")] \
        if left > 0 else []
    return shown, note


def _sec_summary(r):
    c = r.counts
    fams = len(r.families_present)
    lines = ["%d ok evaluations, %d not done: %d failed, %d timeout, %d killed (the latest "
             "attempt of each evaluation never done)" % (
                 c["ok"], c["failed"] + c["timeout"] + c["killed"], c["failed"],
                 c["timeout"], c["killed"]),
             "%s in %s on %s" % (_plural(len(r.models), "model"),
                                 _plural(fams, "family", "families"),
                                 _plural(len(r.present), "system")),
             "Each model, system and batch size is read from one evaluation: the ok one with "
             "the most levels, the latest of those (xsp.zoo.analyses)."]
    return _section("summary", "Summary", [_p(x) for x in lines])


def _sec_systems(r, max_rows):
    df = r.systems[["system_id", "label", "cpu_model", "cpu_count", "gpu_name",
                    "torch_version", "models", "ok", "failed", "timeout", "killed"]]
    return _section("systems", "Systems", [_table(df, max_rows, "xsp.zoo.analyses."
                                                                "systems(DIR)")])


def _sec_scaling(r, max_models, max_rows, max_systems):
    parts = [_p("Throughput (samples per second: batch size / the latency of run M, the "
                "model alone) against batch size, one line per model; the larger dot is the "
                "saturation batch size: the smallest whose throughput is within %g%% of the "
                "model's best measured." % (100 * r.tolerance))]
    shown, note = _per_system(r, max_systems)
    sc = r.scaling
    sat = {(m, s): b for m, s, b in zip(r.saturation["model"], r.saturation["system_id"],
                                        r.saturation["saturation_batch_size"])}
    for sid in shown:
        pairs = r.ranked_models(sid)
        series = []
        for m, s in pairs[:max_models]:
            g = sc[(sc["model"] == m) & _is(sc["system_id"], s)]
            pts = [(int(b), float(t)) for b, t in zip(g["batch_size"], g["throughput_per_s"])
                   if _num(t) and t > 0]
            if pts:
                series.append((str(m), pts, _num(sat.get((m, s))), "%s on %s" % (
                    m, r.system_name(s))))
        parts.append("<h3>%s</h3>" % _esc("on " + r.system_name(sid)))
        if series:
            parts.append(_throughput_svg(series, _cut_note(len(pairs), len(series))))
        else:
            parts.append(_p("no throughput measured", "xsp-why"))
    parts += note
    sat = r.saturation[["model", "family", "system_id", "batch_sizes",
                        "best_throughput_per_s", "best_batch_size", "saturation_batch_size",
                        "saturation_throughput_per_s", "still_growing", "verdict"]]
    rate = {"best_throughput_per_s": "si", "saturation_throughput_per_s": "si"}
    parts.append("<h3>Saturation, per model and system</h3>")
    parts.append(_table(sat, max_rows, "xsp.zoo.analyses.saturation(DIR)", rate))
    parts.append("<h3>Latency and throughput, per batch size</h3>")
    cols = ["model", "system_id", "batch_size", "levels", "latency_M_mean_ns",
            "latency_M_std_ns", "latency_ML_mean_ns", "latency_MLG_mean_ns",
            "latency_per_sample_ns", "throughput_per_s", "relative_throughput"]
    # cost (a price per hour in the manifest) and energy (counters on the machine): where known
    cols += [c for c in ("cost_per_million", "energy_j") if sc[c].notna().any()]
    parts.append(_table(sc[cols], max_rows, "xsp.zoo.analyses.scaling(DIR)",
                        {"throughput_per_s": "si", "relative_throughput": "share"}))
    return _section("scaling", "Throughput and latency against batch size", parts)


def _sec_layer_types(r, max_models, max_rows):
    t = r.types
    if not len(t):
        return _section("layer-types", "Layer types", [_p(
            "No evaluation recorded layers: levels ML or MLG record them.", "xsp-why")])
    means = _type_means(t)
    keys = list(dict.fromkeys(x[0] for x in means))[:_TYPES_SHOWN]
    parts = [_p("The share of each layer type in a model's leaf-layer time (forward and "
                "backward, recorded in run ML), at the model's largest batch size with "
                "layers; a model's shares sum to 100%%. The %d types largest on average "
                "have a colour; the rest is 'other'." % len(keys))]
    pairs = [p for p in r.ranked_models() if ((t["model"] == p[0]) &
                                              _is(t["system_id"], p[1])).any()]
    rows = []
    for m, s in pairs[:max_models]:
        g = t[(t["model"] == m) & _is(t["system_id"], s)]
        rows.append(("%s (batch %d)" % (r.model_label(m, s), int(g["batch_size"].iloc[0])),
                     dict(zip(g["layer_type"], g["share"]))))
    parts.append("<h3>Per model</h3>")
    parts.append(_stacked_svg(rows, keys, _cut_note(len(pairs), len(rows)),
                              what="of the leaf-layer time"))
    f = r.families
    fam_keys = list(dict.fromkeys(zip(f["family"], f["system_id"])))
    frows = []
    for fam, s in fam_keys[:max_models]:
        g = f[_is(f["family"], fam) & _is(f["system_id"], s)]
        name = "%s (%s)" % (fam, _plural(int(g["family_models"].iloc[0]), "model"))
        if len(r.present) > 1:
            name += " @ %s" % (r.host.get(s) or s)
        frows.append((name, dict(zip(g["layer_type"], g["share"]))))
    parts.append("<h3>Per family</h3>")
    parts.append(_p("The mean of the family's models' shares: each model weighs the same."))
    parts.append(_stacked_svg(frows, keys, _cut_note(len(fam_keys), len(frows),
                                                     "families"),
                              what="mean share in the family"))
    parts.append(_table(f, max_rows, "xsp.zoo.analyses.layer_types(DIR, by='family')"))
    parts.append("<h3>Per model, every type</h3>")
    parts.append(_table(t, max_rows, "xsp.zoo.analyses.layer_types(DIR)"))
    return _section("layer-types", "Layer types", parts)


def _sec_top(r, max_rows):
    parts = [_p("The leaf layers with the largest share of their model's iteration in run ML "
                "(latency share: forward and backward time / the latency of run ML; share: "
                "of the model's leaf-layer time).")]
    parts.append(_table(r.layers, max_rows, "xsp.zoo.analyses.top_layers(DIR, n=None)"))
    layers = _section("top-layers", "Top layers across the zoo", parts)
    parts = [_p("Ops by their mean share of the iteration (self time / the latency of run "
                "ML) over the zoo's profiles (a model on a system, at its largest batch size "
                "with ops), 0 where a profile lacks the op.")]
    parts.append(_table(r.ops, max_rows, "xsp.zoo.analyses.top_ops(DIR, n=None)"))
    return layers + "\n" + _section("top-ops", "Top ops across the zoo", parts)


def _sec_roofline(r, max_models, max_rows, max_systems):
    rf = r.roofline
    title = "FLOPs, intensity and the roofline"
    if not len(rf):
        return _section("roofline", title, [_p("No roofline: %s." % rf.attrs.get(
            "reason", "no FLOPs"), "xsp-why")])
    parts = [_p("FLOPs and bytes per iteration from the ops' shapes (xsp.analysis.flops: analytical, "
                "not measured); achieved FLOP/s over the latency of run M; one point per "
                "model, at its largest batch size with FLOPs.%s" % (
                    "" if r.peaks is not None else " No roofs: give the peaks of the machine "
                    "(xsp zoo report --peaks, or peaks= of xsp.zoo.report.html)."))]
    if rf.attrs.get("left_out"):
        parts.append(_p("%d evaluations without FLOPs are left out (record_shapes = true in "
                        "the manifest records them)." % rf.attrs["left_out"], "xsp-why"))
    shown, note = _per_system(r, max_systems)
    for sid in shown:
        g = rf[_is(rf["system_id"], sid)] if sid is not None else rf
        if not len(g):
            continue
        last = g.sort_values("batch_size").groupby("model", sort=False).tail(1)
        last = last.sort_values(["flops_per_s", "model"], ascending=[False, True])
        pts = []
        for x in last.head(max_models).to_dict("records"):
            pts.append({"label": x["model"], "intensity": _num(x["intensity"]),
                        "flops_per_s": _num(x["flops_per_s"]), "dtype": "float32",
                        "tip": "%s, batch %d: %s, %s per iteration; %s FLOP/byte; %s" % (
                            x["model"], x["batch_size"], fmt_si(x["flops"], "FLOP"),
                            fmt_si(x["bytes"], "B"), fmt_si(x["intensity"]),
                            fmt_si(x["flops_per_s"], "FLOP/s"))})
        peak_f = _num(g["peak_flops_per_s"].iloc[0]) if "peak_flops_per_s" in g else None
        peak_b = _num(g["peak_bytes_per_s"].iloc[0]) if "peak_bytes_per_s" in g else None
        parts.append("<h3>%s</h3>" % _esc("on " + r.system_name(sid)))
        parts.append(H.roofline_svg(pts, peak_b, {"float32": peak_f} if peak_f else None,
                                    notes=_cut_note(len(last), len(pts)),
                                    max_labels=max_models))
    parts += note
    parts.append(_table(rf, max_rows, "xsp.zoo.analyses.roofline(DIR)",
                        {"flops": "si", "bytes": "bytes", "intensity": None,
                         "flops_per_s": "si", "bytes_per_s": "si",
                         "peak_flops_per_s": "si", "peak_bytes_per_s": "si",
                         "roof_flops_per_s": "si", "roof_fraction": "share"}))
    return _section("roofline", title, parts)


def _sec_memory(r, max_models, max_rows):
    m = r.memory
    if not len(m):
        return _section("memory", "Memory", [_p("No memory: %s." % m.attrs.get("reason"),
                                                "xsp-why")])
    last = m.sort_values("batch_size").groupby(["model", "system_id"], sort=False,
                                               dropna=False).tail(1)
    last = last.sort_values(["peak_bytes", "model"], ascending=[False, True])
    rows = [("%s (batch %d)" % (r.model_label(x["model"], x["system_id"]), x["batch_size"]),
             _num(x["peak_bytes"]), "%s: peak %s on %s at batch %d" % (
                 x["model"], fmt_bytes(x["peak_bytes"]), x["device"], x["batch_size"]))
            for x in last.head(max_models).to_dict("records") if _num(x["peak_bytes"])]
    parts = [_p("The highest total the allocator reported during the profile (on the "
                "evaluation's device), per model at its largest batch size; per sample: what "
                "one more sample adds over the smallest batch size."),
             _bars_svg(rows, fmt_bytes, _cut_note(len(last), len(rows)),
                       what="peak memory"),
             _table(m, max_rows, "xsp.zoo.analyses.memory(DIR)")]
    return _section("memory", "Memory per model", parts)


def _sec_gpu(r, max_models, max_rows):
    g = r.gpu
    if not len(g):
        return _section("gpu", "GPU against CPU", [_p("No GPU share: %s." % g.attrs.get(
            "reason"), "xsp-why")])
    last = g.sort_values("batch_size").groupby(["model", "system_id"], sort=False,
                                               dropna=False).tail(1)
    rows = [("%s (batch %d)" % (r.model_label(x["model"], x["system_id"]), x["batch_size"]),
             {"GPU work": _num(x["gpu_share"]) or 0.0, "the rest": _num(x["cpu_share"]) or 0.0})
            for x in last.head(max_models).to_dict("records")]
    parts = [_p("GPU work per iteration (kernels, copies, memsets) against the latency of run "
                "MLG, which recorded it; the rest is the iteration's time outside GPU work "
                "(the CPU running the framework while the GPU waits)."),
             _stacked_svg(rows, ["GPU work", "the rest"], _cut_note(len(last), len(rows)),
                          what="of the iteration in run MLG"),
             _table(g, max_rows, "xsp.zoo.analyses.gpu_share(DIR)")]
    return _section("gpu", "GPU against CPU", parts)


def _sec_compare(r, max_models, max_rows):
    if r.compare is None:
        return _section("compare", "Two systems", [_p(
            "One system in these results: read two machines' results together to compare "
            "them (xsp zoo report DIR1 DIR2 -o zoo.html).", "xsp-why")])
    c, ct = r.compare, r.compare_types
    base, other = c.attrs["base"], c.attrs["other"]
    parts = [_p("Speedup of %s over %s: the latency of run M on %s / on %s (above 1: %s is "
                "faster); per layer type the type's time summed over the models, at each "
                "model's largest batch size measured on both." % (
                    r.system_name(other), r.system_name(base), base, other, other))]
    if r.compare_note:
        parts.append(_p(r.compare_note, "xsp-why"))
    if len(c):
        last = c.sort_values("batch_size").groupby("model", sort=False).tail(1)
        last = last.sort_values(["speedup", "model"], ascending=[False, True])
        rows = [("%s (batch %d)" % (x["model"], x["batch_size"]), _num(x["speedup"]),
                 "%s at batch %d: %s on %s, %s on %s" % (
                     x["model"], x["batch_size"], fmt_ns(x["base_latency_ns"]), base,
                     fmt_ns(x["other_latency_ns"]), other))
                for x in last.head(max_models).to_dict("records")]
        parts.append("<h3>Per model (largest batch size on both)</h3>")
        parts.append(_bars_svg(rows, _times, _cut_note(len(last), len(rows)), log_ref=1.0,
                               what="speedup"))
    else:
        parts.append(_p("No model and batch size was measured on both.", "xsp-why"))
    parts.append(_table(c, max_rows, "xsp.zoo.analyses.compare_systems(DIR)",
                        {"base_throughput_per_s": "si", "other_throughput_per_s": "si"}))
    parts.append("<h3>Per layer type</h3>")
    parts.append(_table(ct, max_rows, "xsp.zoo.analyses.compare_systems(DIR, "
                                      "by='layer_type')"))
    return _section("compare", "Two systems side by side", parts)


def _sec_failures(r, max_rows):
    f = r.failures
    parts = [_p("The evaluations that did not finish and were not done since (the latest "
                "attempt of each); `xsp zoo run` again retries them.")]
    parts.append(_table(f[["model", "family", "system_id", "batch_size", "levels", "status",
                           "reason", "wall_s"]], max_rows, "xsp.zoo.analyses.failures(DIR)"))
    return _section("failures", "Failures", parts)


def html(src, path=None, *, peaks=None, base=None, other=None, tolerance=Z.TOLERANCE,
         max_models=MAX_MODELS, max_rows=MAX_ROWS, max_systems=MAX_SYSTEMS, title=None):
    """The report as one self-contained HTML document (a str), written to path (atomically)
    when given.  peaks: roofs for the roofline (analyses.roofline's); base, other: the
    systems to compare (default: the two present, or the first two by system_id); tolerance:
    the saturation's.  At most max_models models per plot, max_rows rows per table and
    max_systems plots per section, each cut said on the page.  Raises
    analyses.NoResultsError for a missing or empty results directory, analyses.SystemsError
    for base or other not present, ValueError for limits under 1."""
    for name, v in (("max_models", max_models), ("max_rows", max_rows),
                    ("max_systems", max_systems)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError("%s must be a positive integer, not %r" % (name, v))
    with Z.connect(src) as con:
        r = _Results(con, tolerance, peaks, base, other)
    title = title or "xsp zoo report: %s" % _source_name(src)
    nav = " · ".join('<a href="#%s">%s</a>' % (a, _esc(b)) for a, b in (
        ("summary", "summary"), ("systems", "systems"), ("scaling", "throughput"),
        ("layer-types", "layer types"), ("top-layers", "top layers"), ("top-ops", "top ops"),
        ("roofline", "roofline"), ("memory", "memory"), ("gpu", "GPU"),
        ("compare", "two systems"), ("failures", "failures")))
    doc = H.page(title, "<style>%s</style>" % _CSS, "<nav>%s</nav>" % nav,
                 _sec_summary(r), _sec_systems(r, max_rows),
                 _sec_scaling(r, max_models, max_rows, max_systems),
                 _sec_layer_types(r, max_models, max_rows), _sec_top(r, max_rows),
                 _sec_roofline(r, max_models, max_rows, max_systems),
                 _sec_memory(r, max_models, max_rows), _sec_gpu(r, max_models, max_rows),
                 _sec_compare(r, max_models, max_rows), _sec_failures(r, max_rows),
                 H.SORT_SCRIPT)
    doc = printable(doc)
    if path is not None:
        atomic_write(path, lambda f: f.write(doc))
    return doc

