"""Pieces of the HTML report that are drawn from a Trace: a timeline of one window as inline
SVG, the span tree as nested <details>, and DataFrames as tables with units in the cells; and
a roofline plot, a memory timeline and the report's bar charts (iterations_svg: bars over runs
of consecutive iterations; barh_svg: a top-N table's durations) as inline SVG, drawn from the
values they are given; a chart's size is a fixed number of elements per bar, so the caller
bounds it by the bars it asks for.

Each function is pure: a Trace (and a window, or a DataFrame) in, a str of HTML out.  The
pieces need no JavaScript and no network: the SVG carries its own <style>, the tree opens and
closes with <details>, and every name is escaped for XML.  What cannot be drawn is said, never
dropped silently: the timeline counts the spans under one pixel, past max_spans or nested too
deep in a note; the tree counts the lines hidden under min_share, below max_depth or past
max_nodes.

This helper sits beside the analyses, over the data layer: it reads a Trace through its public
members only (start_ns, end_ns, parent_ids, depth, kind_codes, name_codes, strings,
thread_index, threads, attr_column, self_ns, flag_bits) and imports nothing but
xsp.values.trace and xsp.core's fmt (every number it prints) and util.  The work is vectorised with numpy; the Python loops run over what is drawn (at
most max_spans rectangles, max_nodes lines), so a window of a million spans costs a few
array passes.
"""
import html as _html_mod
import math
import re

import numpy as np

from xsp.core.fmt import fmt_bytes, fmt_ns, fmt_share, fmt_si
from xsp.core.util import printable
from xsp.values.trace import KINDS, ancestor_count

__all__ = ["timeline_svg", "tree_html", "table_html", "page", "CSS", "KIND_COLORS",
           "roofline_svg", "memory_svg", "iterations_svg", "barh_svg", "SORT_SCRIPT"]

# fill colours per kind, light enough for black labels; "merged" is a box of sub-pixel spans
KIND_COLORS = {
    "region": "#d9d9d9", "model": "#9db4d8", "step": "#c9bce6", "module": "#a6d8a8",
    "op": "#f5c28e", "backward": "#f09a9a", "scope": "#dcc7a6", "runtime": "#f2b8de",
    "driver": "#d4cde0", "kernel": "#7fd3c4", "memcpy": "#f0e08a", "memset": "#a8d8ea",
    "sync": "#e6a3c8", "overhead": "#bdbdbd", "python": "#e8e3a0", "merged": "#9e9e9e",
}

_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _esc(s):
    """s as XML/HTML text or attribute value: & < > " ' escaped, characters XML cannot hold
    (control characters, lone surrogates from names that were not UTF-8) as '?'."""
    return _html_mod.escape(_XML_BAD.sub("?", printable(str(s))), quote=True)


def _n(count, word="span"):
    """'1 span', '12 spans'."""
    return "%d %s%s" % (count, word, "" if count == 1 else "s")


def _type_of(trace):
    """{span id: value of its `type` attribute} for the spans that have one (str values)."""
    ids, vals = trace.attr_column("type")
    vals = vals.tolist() if isinstance(vals, np.ndarray) else vals
    return {int(i): v for i, v in zip(ids.tolist(), vals) if isinstance(v, str)}


def _places_of(trace):
    """({span id: source}, {span id: call_site}): the str values of the attributes that say
    where a model or module span's code is (docs/api.md), for tooltips."""
    out = []
    for key in ("source", "call_site"):
        ids, vals = trace.attr_column(key)
        vals = vals.tolist() if isinstance(vals, np.ndarray) else vals
        out.append({i: v for i, v in zip(ids.tolist(), vals) if isinstance(v, str)})
    return tuple(out)


def _place_tip(places, members):
    """'forward at <source>\ncalled at <call_site>' of spans members (one line of the tree,
    or one rectangle): the first's source, the call site they share or how many there are;
    '' when they have neither."""
    src, call = places
    i = int(members[0])
    sites = sorted({call[j] for j in map(int, members) if j in call})
    lines = ["forward at " + src[i]] if i in src else []
    if len(sites) == 1:
        lines.append("called at " + sites[0])
    elif sites:
        lines.append("called at %d sites: %s" % (len(sites), ", ".join(sites[:5])
                                                 + (", …" if len(sites) > 5 else "")))
    return "\n".join(lines)


def _label(trace, i, types):
    """'name [kind type]': the type attribute (modules: the class) when it is not the name."""
    name = trace.strings[trace.name_codes[i]]
    kind = KINDS[trace.kind_codes[i]]
    typ = types.get(int(i))
    return name, ("%s %s" % (kind, typ) if typ and typ != name else kind)


# -- timeline ---------------------------------------------------------------------------------
_LABEL_W = 170      # px of the track labels left of the plot
_ROW_H = 16         # px per nesting level
_MAX_ROWS = 48      # nesting levels drawn per track; deeper spans are counted in a note


def _nice_step(span_ns, target=8):
    """A round tick step (1, 2 or 5 times a power of ten, in ns) giving about target ticks."""
    raw = max(span_ns / target, 1.0)
    mag = 10.0 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


def _tick_unit(step_ns):
    for div, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if step_ns >= div:
            return div, unit
    return 1.0, "ns"


def _tick_label(t_ns, step_ns):
    """A tick's time as a round number in the unit of the step: '0', '250 us', '1.5 ms'."""
    if t_ns == 0:
        return "0"
    div, unit = _tick_unit(step_ns)
    dec = max(0, -int(math.floor(math.log10(step_ns / div) + 1e-9)))
    return "%.*f %s" % (dec, t_ns / div, unit)


def _track_label(thread):
    tid, name, kind = thread
    if kind == 1:
        return "%s [GPU]" % (name or "stream %d" % tid)
    if kind == 2:
        return "%s [overhead]" % (name or str(tid))
    return "%s (%d)" % (name or "thread", tid)


def _fit(text, px, char_px=6.8):
    """text cut to what fits in px at about char_px per character ('' when nothing fits)."""
    n = int((px - 4) / char_px)
    if n < 2:
        return ""
    return text if len(text) <= n else text[:n - 1] + "…"


def _window_depths(parents, thread, win):
    """For the spans win (ids, increasing) of a window, their nesting depth within their own
    track: how many of their ancestors in the window are on the same track.  Parents outside
    the window end the chain (a span's ancestors on its own track contain it, so they are in
    the window)."""
    n_all = len(parents)
    pos = np.full(n_all, -1, dtype=np.int64)
    pos[win] = np.arange(len(win))
    p = parents[win]
    sub = np.where(p >= 0, pos[np.maximum(p, 0)], -1)
    th = thread[win]
    depth = np.zeros(len(win), dtype=np.int64)
    for t in np.unique(th):
        on = th == t
        depth[on] = ancestor_count(sub, on)[on]
    return depth


class _Window:
    """The spans of a trace in the window [t0, t1) of a timeline, as drawn: ids (win), clipped
    starts and ends (s, e), widths in px, tracks (th) and nesting depths on their track."""

    def __init__(self, trace, t0, t1, plot_w):
        self.t0, self.t1 = t0, t1
        self.scale = plot_w / float(t1 - t0)            # px per ns
        start, end = trace.start_ns, trace.end_ns
        self.win = np.flatnonzero(((start < t1) & (end > t0)) |
                                  ((start == end) & (start >= t0) & (start < t1)))
        self.s = np.clip(start[self.win], t0, t1)
        self.e = np.clip(end[self.win], t0, t1)
        self.px = (self.e - self.s) * self.scale
        thread = trace.thread_index
        self.th = thread[self.win].astype(np.int64)
        self.depth = _window_depths(trace.parent_ids, thread, self.win) if len(self.win) \
            else np.zeros(0, dtype=np.int64)
        self.deep = self.depth >= _MAX_ROWS


def _check_timeline(t0, t1, width, max_spans):
    if t1 <= t0:
        raise ValueError("timeline window is empty: end_ns (%d) must be after start_ns (%d)"
                         % (t1, t0))
    if width < 400:
        raise ValueError("timeline width must be at least 400 px, not %r" % (width,))
    if max_spans < 1:
        raise ValueError("max_spans must be at least 1, not %r" % (max_spans,))


def _sub_pixel_runs(w, small):
    """The boxes of the sub-pixel spans small (a mask over the window): [(px width, "box",
    window positions)], one per run on one row whose gaps are under a pixel and that is at
    least a pixel wide.  Vectorised: sort by (row, start); a run breaks at a new row or where
    a span starts more than a pixel after every earlier span of its run has ended (a running
    maximum of the ends, kept per row by giving each row its own offset)."""
    s, e, t0 = w.s, w.e, w.t0
    gap = 1.0 / w.scale
    sj = np.flatnonzero(small)
    row = w.th[sj] * _MAX_ROWS + w.depth[sj]
    o = np.lexsort((s[sj], row))
    sj, row = sj[o], row[o]
    rank = np.concatenate(([0], np.cumsum(row[1:] != row[:-1])))
    off = rank.astype(np.float64) * (float(w.t1 - t0) + 2 * gap + 2)
    cm = np.maximum.accumulate((e[sj] - t0) + off)
    brk = np.ones(len(sj), dtype=bool)
    brk[1:] = (rank[1:] != rank[:-1]) | ((s[sj][1:] - t0) + off[1:] > cm[:-1] + gap)
    first = np.flatnonzero(brk)
    last = np.append(first[1:], len(sj))
    wide = (np.maximum.reduceat(e[sj], first) - s[sj][first]) * w.scale
    sel = wide >= 1.0                     # (a run of one span is under 1 px)
    return [(wd, "box", sj[a:b])
            for a, b, wd in zip(first[sel].tolist(), last[sel].tolist(), wide[sel].tolist())]


def _cap_items(w, items, max_spans, notes):
    """items cut to the max_spans widest (in their order), the rest counted in notes."""
    if len(items) <= max_spans:
        return items
    s, e = w.s, w.e
    order = sorted(range(len(items)), key=lambda k: (-items[k][0], k))
    keep = sorted(order[:max_spans])
    dropped = [items[k] for k in order[max_spans:]]
    n_drop = sum(1 if kind == "span" else len(p) for _, kind, p in dropped)
    t_drop = sum(int(e[p] - s[p]) if kind == "span" else int((e[p] - s[p]).sum())
                 for _, kind, p in dropped)
    notes.append("%s not drawn past max_spans %d: the narrowest, %s in all"
                 % (_n(n_drop), max_spans, fmt_ns(t_drop)))
    return [items[k] for k in keep]


def _timeline_items(w, max_spans):
    """(items, notes): what to draw, [(px width, "span", window position) or (px width, "box",
    window positions of a run of sub-pixel spans)], and the notes on what is not drawn."""
    notes = []
    if w.deep.any():
        notes.append("%s nested deeper than %d rows not drawn" % (_n(int(w.deep.sum())),
                                                                  _MAX_ROWS))
    small = (w.px < 1.0) & ~w.deep
    big = ~small & ~w.deep
    items = [(float(w.px[j]), "span", int(j)) for j in np.flatnonzero(big)]
    n_small = int(small.sum())
    if n_small:
        boxes = _sub_pixel_runs(w, small)
        items += boxes
        msg = "%s under 1 px not drawn" % _n(n_small)
        if boxes:
            msg += " (%d of them shown merged, as %d grey box%s)" % (
                sum(len(p) for _, _, p in boxes), len(boxes), "" if len(boxes) == 1 else "es")
        notes.append(msg)
    return _cap_items(w, items, max_spans, notes), notes


def _track_layout(trace, w, axis_h):
    """(tracks, rows per track, y of each track, bottom of the plot): the tracks with
    something in the window, CPU threads first, then GPU streams."""
    th, deep = w.th, w.deep
    tracks = sorted({int(t) for t in th[~deep]}, key=lambda t: (trace.threads[t][2], t))
    rows = {}
    for t in tracks:
        on = (th == t) & ~deep
        rows[t] = int(w.depth[on].max()) + 1 if on.any() else 1
    y = axis_h
    track_y = {}
    for t in tracks:
        track_y[t] = y
        y += rows[t] * _ROW_H + 8
    return tracks, rows, track_y, y


def _span_svg(trace, w, p, y, types, places):
    """The rectangle (with its tooltip) and the label of the span at window position p."""
    t0, t1 = w.t0, w.t1
    start, end = trace.start_ns, trace.end_ns
    i = int(w.win[p])
    name, lab = _label(trace, i, types)
    k = KINDS[trace.kind_codes[i]]
    x = _LABEL_W + (w.s[p] - t0) * w.scale
    wd = max(w.px[p], 1.0)
    tip = "%s [%s]\n%s, self %s\n" % (name, lab, fmt_ns(end[i] - start[i]),
                                      fmt_ns(trace.self_ns[i]))
    if start[i] < t0:
        tip += "starts %s before the window" % fmt_ns(t0 - start[i])
    else:
        tip += "starts at +%s" % fmt_ns(start[i] - t0)
    if end[i] > t1:
        tip += ", ends %s after it" % fmt_ns(end[i] - t1)
    where = _place_tip(places, [i])
    if where:
        tip += "\n" + where
    out = ['<rect class="xsp-s xsp-k-%s" x="%.1f" y="%d" width="%.1f" '
           'height="%d"><title>%s</title></rect>' % (k, x, y, wd, _ROW_H - 2, _esc(tip))]
    text = _fit(name, wd)
    if text:
        # in its own viewport, which clips what the estimate of its width missed
        out.append('<svg x="%.1f" y="%d" width="%.1f" height="%d"><text x="2" y="11">'
                   '%s</text></svg>' % (x, y, wd, _ROW_H - 2, _esc(text)))
    return k, out


def _box_svg(trace, w, run, y):
    """The grey box of a run of sub-pixel spans (window positions run), its tooltip naming
    how many there are and the three commonest names."""
    s, e = w.s, w.e
    x0, x1 = s[run[0]], e[run].max()
    x = _LABEL_W + (x0 - w.t0) * w.scale
    codes, counts = np.unique(trace.name_codes[w.win[run]], return_counts=True)
    top = np.argsort(-counts, kind="stable")[:3]
    names = ", ".join("%s x%d" % (trace.strings[codes[j]], counts[j]) for j in top)
    if len(codes) > 3:
        names += ", …"
    tip = "%d spans under 1 px each, merged: %s in all over %s\n%s" % (
        len(run), fmt_ns(int((e[run] - s[run]).sum())), fmt_ns(x1 - x0), names)
    return ('<rect class="xsp-s xsp-merged" x="%.1f" y="%d" width="%.1f" '
            'height="%d"><title>%s</title></rect>'
            % (x, y, max((x1 - x0) * w.scale, 1.0), _ROW_H - 2, _esc(tip)))


def _draw_items(trace, w, items, track_y):
    """(SVG lines of the spans and boxes, the kinds drawn: "merged" for a box)."""
    types = _type_of(trace)
    places = _places_of(trace)
    out = []
    kinds_drawn = set()
    for _, kind, p in items:
        q = p if kind == "span" else p[0]
        y = track_y[int(w.th[q])] + int(w.depth[q]) * _ROW_H
        if kind == "span":
            k, lines = _span_svg(trace, w, p, y, types, places)
            kinds_drawn.add(k)
            out += lines
        else:
            kinds_drawn.add("merged")
            out.append(_box_svg(trace, w, p, y))
    return out, kinds_drawn


def _frame_svg(trace, w, layout, width, axis_h):
    """The track bands and labels, the time axis's ticks and grid lines, the window's length."""
    tracks, rows, track_y, plot_bottom = layout
    t0, t1 = w.t0, w.t1
    head = []
    for n_t, t in enumerate(tracks):
        ty = track_y[t]
        h = rows[t] * _ROW_H
        head.append('<rect class="xsp-band%s" x="0" y="%d" width="%d" height="%d"/>'
                    % (" xsp-alt" if n_t % 2 else "", ty - 3, width, h + 6))
        lab = _track_label(trace.threads[t])
        head.append('<text class="xsp-track" x="4" y="%d"><title>%s</title>%s</text>'
                    % (ty + 11, _esc(lab), _esc(_fit(lab, _LABEL_W - 8, 6.6))))
    step = _nice_step(t1 - t0)
    k = 0
    while k * step <= (t1 - t0) + 1e-6:
        x = _LABEL_W + k * step * w.scale
        head.append('<line class="xsp-grid" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>'
                    % (x, axis_h - 6, x, plot_bottom))
        anchor = "start" if k == 0 else "end" if x > width - 30 else "middle"
        head.append('<text class="xsp-tick" x="%.1f" y="%d" text-anchor="%s">%s</text>'
                    % (x, axis_h - 10, anchor, _esc(_tick_label(k * step, step))))
        k += 1
    head.append('<text class="xsp-tick" x="4" y="%d">window %s</text>'
                % (axis_h - 10, _esc(fmt_ns(t1 - t0))))
    return head


def _legend_svg(kinds_drawn, notes, plot_bottom, width):
    """(SVG lines of the legend, a key per kind drawn, and the notes under it; the height of
    the whole picture)."""
    legend = []
    lx, ly = _LABEL_W, plot_bottom + 8
    for name in [k for k in KINDS if k in kinds_drawn] + \
            (["merged"] if "merged" in kinds_drawn else []):
        text = "spans under 1 px, merged" if name == "merged" else name
        wlab = 22 + int(len(text) * 6.6)
        if lx + wlab > width:
            lx, ly = _LABEL_W, ly + 18
        legend.append('<rect class="xsp-key %s" x="%d" y="%d" width="12" height="12"/>'
                      '<text x="%d" y="%d">%s</text>'
                      % ("xsp-merged" if name == "merged" else "xsp-k-" + name, lx, ly,
                         lx + 16, ly + 10, _esc(text)))
        lx += wlab
    ny = ly + (30 if legend else 14)
    for note in notes:
        legend.append('<text class="xsp-note" x="%d" y="%d">%s</text>'
                      % (_LABEL_W, ny, _esc(note)))
        ny += 16
    return legend, ny + 4


_TIMELINE_STYLE = (
    "<style>.xsp-tl text{font:11px system-ui,sans-serif;fill:#222;"
    "pointer-events:none}.xsp-tl .xsp-track,.xsp-tl .xsp-note{pointer-events:auto}"
    ".xsp-tl .xsp-tick{fill:#555;font-size:10px}.xsp-tl .xsp-note{fill:#8a4b00}"
    ".xsp-tl .xsp-band{fill:#fafafa}.xsp-tl .xsp-alt{fill:#f0f3f7}"
    ".xsp-tl .xsp-grid{stroke:#ddd;stroke-width:1}"
    ".xsp-tl .xsp-s{stroke:#fff;stroke-width:0.5}"
    ".xsp-tl .xsp-s:hover{stroke:#000;stroke-width:1}"
    + "".join(".xsp-tl .xsp-k-%s{fill:%s}" % (k, KIND_COLORS[k]) for k in KINDS)
    + ".xsp-tl .xsp-merged{fill:%s}</style>" % KIND_COLORS["merged"])
_AXIS_H = 30        # px above the first track: the time axis


def timeline_svg(trace, start_ns, end_ns, *, width=1100, max_spans=4000):
    """A self-contained inline SVG (a str) of the spans of trace in [start_ns, end_ns): one lane
    group per track (trace.threads: CPU threads, GPU streams), spans as rectangles stacked by
    their nesting depth on that track within the window, x = time (spans clipped to the
    window), colour by kind, a <title> tooltip per rectangle ('name [kind type]', duration and
    self time, where it starts), a time axis with round ticks, a legend.

    Spans narrower than one pixel are not drawn one by one: runs of them on one row (gaps
    under a pixel) are drawn as one grey box with a tooltip naming the count, and a run still
    under a pixel is not drawn; past max_spans rectangles, the narrowest are skipped; spans
    nested deeper than 48 rows are skipped.  Each of these is counted in a note under the
    legend.  Raises ValueError for an empty window (end_ns <= start_ns), width under 400 or
    max_spans under 1."""
    t0, t1 = int(start_ns), int(end_ns)
    _check_timeline(t0, t1, width, max_spans)
    w = _Window(trace, t0, t1, width - _LABEL_W - 12)
    items, notes = _timeline_items(w, max_spans)
    layout = _track_layout(trace, w, _AXIS_H)
    spans, kinds_drawn = _draw_items(trace, w, items, layout[2])
    head = _frame_svg(trace, w, layout, width, _AXIS_H)
    if not len(w.win):
        notes.insert(0, "no spans in this window")
    legend, height = _legend_svg(kinds_drawn, notes, layout[3], width)
    summary = "xsp timeline: %s, %d spans in the window" % (fmt_ns(t1 - t0), len(w.win))
    return ('<svg xmlns="http://www.w3.org/2000/svg" class="xsp-tl" width="%d" height="%d" '
            'viewBox="0 0 %d %d" role="img" aria-label="%s">%s\n%s\n%s\n%s\n</svg>'
            % (width, height, width, height, _esc(summary), _TIMELINE_STYLE, "\n".join(head),
               "\n".join(spans), "\n".join(legend)))


# -- tree ---------------------------------------------------------------------------------
_TREE_CSS = (".xsp-tree{max-width:1100px;font:12px ui-monospace,SFMono-Regular,Menlo,"
             "monospace;line-height:1.45}"
             ".xsp-tree details>:not(summary),.xsp-tree .xsp-ch{margin-left:1.4em}"
             ".xsp-tree summary{cursor:pointer}.xsp-tree .xsp-leaf{padding-left:1.1em}"
             ".xsp-tree .xsp-k{color:#666}.xsp-tree .xsp-t{font-weight:600}"
             ".xsp-tree .xsp-sf{color:#555}.xsp-tree .xsp-p{color:#1f5fa8}"
             ".xsp-tree .xsp-more{color:#8a4b00;padding-left:1.1em}"
             ".xsp-tree .xsp-f{color:#b00}")


def _child_index(parents):
    """(offs, order): the children of span i are order[offs[i]:offs[i+1]], in id order (start
    order).  One stable argsort over the parent ids."""
    n = len(parents)
    ids = np.flatnonzero(parents >= 0)
    order = ids[np.argsort(parents[ids], kind="stable")]
    counts = np.bincount(parents[ids], minlength=n) if len(ids) else np.zeros(n, np.int64)
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offs[1:])
    return offs, order


def _gather(offs, order, members):
    """The children of every span in members (an id array), member by member."""
    lo = offs[members]
    cnt = offs[members + 1] - lo
    total = int(cnt.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    first = np.cumsum(cnt) - cnt
    return order[np.repeat(lo - first, cnt) + np.arange(total)]


def _subtree_sizes(parents, depth):
    """Spans in each span's subtree, itself included: children added to parents level by
    level from the deepest (one vectorised pass per nesting level)."""
    n = len(parents)
    size = np.ones(n, dtype=np.int64)
    if not n:
        return size
    by_depth = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[by_depth], np.arange(int(depth.max()) + 2))
    for d in range(int(depth.max()), 0, -1):
        idx = by_depth[bounds[d]:bounds[d + 1]]
        np.add.at(size, parents[idx], size[idx])
    return size


def _groups(c, key, merge):
    """The lines that the sibling spans c make: (ordered ids, starts, counts).  merge=False:
    runs of consecutive spans with the same key (the children of one span; with fold off
    every key differs, so one span per line); merge=True: all spans with the same key, in
    order of first appearance (the children of a folded line)."""
    k = key[c]
    if merge:
        _, first, inv = np.unique(k, return_index=True, return_inverse=True)
        rank = np.empty(len(first), dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(len(first))
        g = rank[inv.reshape(-1)]
        o = np.argsort(g, kind="stable")
        c = c[o]
        counts = np.bincount(g)
        starts = np.cumsum(counts) - counts
        return c, starts, counts
    starts = np.concatenate(([0], np.flatnonzero(k[1:] != k[:-1]) + 1)) if len(c) else \
        np.zeros(0, dtype=np.int64)
    counts = np.diff(np.append(starts, len(c)))
    return c, starts, counts


def _tree_reference(trace, root):
    """(top span ids, reference duration for the shares, its name) of a tree: the root's
    duration, or with root None every root of the trace and the trace's extent."""
    n = len(trace)
    if root is None:
        tops = np.flatnonzero(trace.parent_ids < 0)
        # the file's uint64 times (the int64 columns wrap past 2**63), in Python ints
        ref = int(trace.end_ns.view(np.uint64).max()) - int(
            trace.start_ns.view(np.uint64).min()) if n else 0
        return tops, ref, "the trace"
    r = int(getattr(root, "id", root))
    if not 0 <= r < n:
        raise IndexError("root span id %d out of range (trace has %d spans)" % (r, n))
    return np.array([r], dtype=np.int64), int(trace.duration_ns[r]), "the root"


class _TreeWriter:
    """One tree_html call: the trace's columns it reads, the options, and the counts of the
    lines written (shown) and of the spans on a line or counted in a note (accounted)."""

    def __init__(self, trace, ref, ref_name, *, max_depth, min_share, fold, max_nodes,
                 open_depth):
        self.trace, self.ref, self.ref_name = trace, ref, ref_name
        self.max_depth, self.min_share, self.fold = max_depth, min_share, fold
        self.max_nodes, self.open_depth = max_nodes, open_depth
        self.thr = min_share * ref
        self.dur = trace.duration_ns
        self.selft = trace.self_ns
        self.flags = trace.flag_bits
        self.key = trace.name_codes.astype(np.int64) * len(KINDS) + trace.kind_codes
        self.offs, self.order = _child_index(trace.parent_ids)
        self.size = _subtree_sizes(trace.parent_ids, trace.depth.astype(np.int64))
        self.types = _type_of(trace)
        self.places = _places_of(trace)
        self.shown = 0
        self.accounted = 0

    def line_html(self, members, below):
        """(style attribute, inner HTML) of the line of spans members."""
        i = int(members[0])
        name, lab = _label(self.trace, i, self.types)
        cnt = len(members)
        incl = int(self.dur[members].sum())
        own = int(self.selft[members].sum())
        share = incl / self.ref if self.ref else None
        where = _place_tip(self.places, members)
        tip = ' title="%s"' % _esc(where) if where else ""
        txt = ['<span class="xsp-n"%s>%s%s</span>' % (tip, "x%d " % cnt if cnt > 1 else "",
                                                      _esc(name)),
               ' <span class="xsp-k">[%s]</span>' % _esc(lab),
               ' <span class="xsp-t">%s</span>' % fmt_ns(incl),
               '<span class="xsp-sf">, self %s</span>' % fmt_ns(own),
               '<span class="xsp-p">, %s</span>' % fmt_share(share)]
        if cnt > 1:
            txt.append('<span class="xsp-sf">, mean %s</span>' % fmt_ns(incl // cnt))
        fl = int(np.bitwise_or.reduce(self.flags[members]))
        if fl:
            txt.append(' <span class="xsp-f">{%s}</span>' % ",".join(
                f for b, f in ((1, "open at stop"), (2, "forced end")) if fl & b))
        if below:
            txt.append(' <span class="xsp-more">… %s below (max_depth %d)</span>'
                       % (_n(below), self.max_depth))
        bar = min(max(share or 0.0, 0.0), 1.0) * 100
        style = (' style="background:linear-gradient(90deg,#e4edf8 %.1f%%,transparent 0)"'
                 % bar) if bar >= 0.1 else ""
        return style, "".join(txt)

    def hidden_note(self, cnt, t):
        return ('<div class="xsp-more">… %d more, %s (each line under %s of %s)</div>'
                % (cnt, fmt_ns(t), fmt_share(self.min_share), self.ref_name))

    def visible(self, c, merge):
        """Split siblings c into lines; returns (list of member arrays shown, hidden note or
        None), accounting the hidden spans (with their subtrees)."""
        if not len(c):
            return [], None
        if not self.fold:
            starts = np.arange(len(c))
            counts = np.ones(len(c), dtype=np.int64)
        else:
            c, starts, counts = _groups(c, self.key, merge)
        totals = np.add.reduceat(self.dur[c], starts)
        keep = totals >= self.thr
        note = None
        if not keep.all():
            hid = np.repeat(~keep, counts)
            self.accounted += int(self.size[c[hid]].sum())
            note = self.hidden_note(int(counts[~keep].sum()), int(totals[~keep].sum()))
        lines = [c[a:a + b] for a, b in zip(starts[keep].tolist(), counts[keep].tolist())]
        return lines, note

    def node(self, members, d, out, todo):
        """Writes the line of spans members at depth d to out: a leaf, or a <details> whose
        children (and the closing tags) are pushed on todo."""
        self.shown += 1
        self.accounted += len(members)
        if self.max_depth is not None and d >= self.max_depth:
            below = int(self.size[members].sum()) - len(members)
            self.accounted += below
            style, txt = self.line_html(members, below)
            out.append('<div class="xsp-leaf"%s>%s</div>' % (style, txt))
            return
        offs, order = self.offs, self.order
        kids = order[offs[members[0]]:offs[members[0] + 1]] if len(members) == 1 else \
            _gather(offs, order, members)
        lines, note = self.visible(kids, len(members) > 1)
        style, txt = self.line_html(members, 0)
        if not lines and not note:
            out.append('<div class="xsp-leaf"%s>%s</div>' % (style, txt))
            return
        out.append('<details%s><summary%s>%s</summary><div class="xsp-ch">'
                   % (" open" if d < self.open_depth else "", style, txt))
        todo.append(("html", "</div></details>"))
        if note:
            todo.append(("html", note))
        todo.extend(("node", m, d + 1) for m in reversed(lines))

    def write(self, tops, whole):
        """The lines of the tree from tops (whole: the trace's roots, grouped as siblings),
        depth first with an explicit stack (nesting reaches 1024 levels, past Python's
        recursion limit): entries are ("node", members, depth) or ("html", text).  Returns
        (lines, whether max_nodes stopped it)."""
        out = []
        todo = []
        top_lines, top_note = self.visible(tops, False) if whole else ([tops], None)
        if top_note:
            todo.append(("html", top_note))
        todo.extend(("node", m, 0) for m in reversed(top_lines))
        stopped = False
        while todo:
            kind, a, *rest = todo.pop()
            if kind == "html":
                out.append(a)
            elif stopped:
                continue
            elif self.shown >= self.max_nodes:
                stopped = True
            else:
                self.node(a, rest[0], out, todo)
        return out, stopped


def tree_html(trace, root=None, *, max_depth=None, min_share=0.005, fold=True, max_nodes=2000,
              open_depth=2):
    """The span tree as nested <details>/<summary> (collapsible without JavaScript), a str: a
    <div class="xsp-tree"> with its own small <style>.

    Each line: name, [kind and the `type` attribute when present and not the name], inclusive
    time, self time, share of the reference: the root's duration (root: a span id or Span), or
    with root None (every root of the trace) the trace's extent (first start to last end).
    fold: consecutive siblings with the same name and kind make one line ('x12 aten::add [op]
    1.200 ms, ...', times summed, with the mean); the children of a folded line are its members'
    children, merged by name and kind in order of first appearance.  Lines under min_share of
    the reference are hidden and counted per parent ('… 7 more, 40.000 us ...').  max_depth:
    the deepest line shown (the top line is depth 0); what is below is counted on the line.
    max_nodes: at most this many lines; the spans left are counted at the end.  Lines at depth
    below open_depth are open, deeper ones closed.  Linear in the number of spans: children are
    indexed once (argsort of the parent ids) and each span is grouped once.  Raises IndexError
    for a root out of range, ValueError for max_nodes under 1 or a negative min_share."""
    if max_nodes < 1:
        raise ValueError("max_nodes must be at least 1, not %r" % (max_nodes,))
    if not min_share >= 0:
        raise ValueError("min_share must be a fraction >= 0, not %r" % (min_share,))
    tops, ref, ref_name = _tree_reference(trace, root)
    w = _TreeWriter(trace, ref, ref_name, max_depth=max_depth, min_share=min_share, fold=fold,
                    max_nodes=max_nodes, open_depth=open_depth)
    lines, stopped = w.write(tops, root is None)
    out = ['<div class="xsp-tree"><style>%s</style>' % _TREE_CSS] + lines
    if stopped:
        total = int(w.size[tops].sum())
        out.append('<div class="xsp-more">… stopped at max_nodes %d lines; %s not '
                   'shown</div>' % (max_nodes, _n(total - w.accounted)))
    if not len(trace):
        out.append('<div class="xsp-more">no spans</div>')
    out.append("</div>")
    return "\n".join(out)


# -- roofline -----------------------------------------------------------------------------
ROOF_COLORS = {"float32": "#4c72b0", "float64": "#55a868", "bfloat16": "#dd8452",
               "float16": "#c44e52"}
_ROOF_OTHER = "#8172b2"     # a point of several dtypes, or of one without a colour


def _decades(lo, hi):
    """(first exponent, last exponent) of the powers of ten around [lo, hi] (lo, hi > 0),
    at least one decade apart."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    return a, max(b, a + 1)


def _drawable(points):
    """(the points with an intensity and a FLOP/s that a log axis can show, how many not)."""
    good, bad = [], 0
    for p in points:
        x, y = p.get("intensity"), p.get("flops_per_s")
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and \
                0 < x < math.inf and 0 < y < math.inf:
            good.append(p)
        else:
            bad += 1
    return good, bad


def _roofs_of(good, bytes_per_s, flops_per_s):
    """(bandwidth or None, {dtype: peak FLOP/s}): the roofs of the points' dtypes, none
    without a bandwidth."""
    used = set()
    for p in good:
        used.update(str(p.get("dtype") or "").split("+"))
    bw = bytes_per_s if isinstance(bytes_per_s, (int, float)) and bytes_per_s > 0 else None
    roofs = {d: v for d, v in (flops_per_s or {}).items()
             if d in used and isinstance(v, (int, float)) and v > 0} if bw else {}
    return bw, roofs


class _LogAxes:
    """The plot's log-log axes: whole decades around the points and the roofs' ridges, the
    plot's box in px (left, top, pw, ph) and the mappings px(x), py(y)."""
    LEFT, RIGHT, TOP, BOTTOM = 74, 150, 16, 44

    def __init__(self, good, bw, roofs, width, height):
        xs = [p["intensity"] for p in good] + [v / bw for v in roofs.values()]
        ys = [p["flops_per_s"] for p in good] + list(roofs.values())
        if not xs:
            xs, ys = [1.0], [1.0]
        self.x0, self.x1 = _decades(min(xs) / 2, max(xs) * 2)
        self.y0, self.y1 = _decades(min(ys) / 2, max(ys) * 2)
        self.left, self.top = self.LEFT, self.TOP
        self.pw, self.ph = width - self.LEFT - self.RIGHT, height - self.TOP - self.BOTTOM

    def px(self, x):
        return self.left + (math.log10(x) - self.x0) / (self.x1 - self.x0) * self.pw

    def py(self, y):
        return self.top + self.ph - (math.log10(y) - self.y0) / (self.y1 - self.y0) * self.ph


def _roof_grid(ax, height):
    """The plot's box, a grid line and tick label per decade (every other one past 8), the
    axis titles."""
    left, top, pw, ph = ax.left, ax.top, ax.pw, ax.ph
    out = ['<rect class="xsp-rf-plot" x="%d" y="%d" width="%d" height="%d"/>'
           % (left, top, pw, ph)]
    for exps, axis in (((ax.x0, ax.x1), "x"), ((ax.y0, ax.y1), "y")):
        a, b = exps
        step = 1 if b - a <= 8 else 2
        for e in range(a, b + 1, step):
            v = 10.0 ** e
            if axis == "x":
                x = ax.px(v)
                out.append('<line class="xsp-grid" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>'
                           % (x, top, x, top + ph))
                out.append('<text class="xsp-tick" x="%.1f" y="%d" text-anchor="middle">%s'
                           '</text>' % (x, top + ph + 14, _esc("%g" % v)))
            else:
                y = ax.py(v)
                out.append('<line class="xsp-grid" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>'
                           % (left, y, left + pw, y))
                out.append('<text class="xsp-tick" x="%d" y="%.1f" text-anchor="end">%s'
                           '</text>' % (left - 4, y + 3, _esc(fmt_si(v))))
    out.append('<text class="xsp-axis" x="%.1f" y="%d" text-anchor="middle">arithmetic '
               'intensity (FLOP/byte)</text>' % (left + pw / 2, height - 8))
    out.append('<text class="xsp-axis" transform="translate(14 %.1f) rotate(-90)" '
               'text-anchor="middle">FLOP/s</text>' % (top + ph / 2))
    return out


def _roof_lines(ax, bw, roofs):
    """(the roofs, clipped to the plot: the memory slope up to each ridge, then the peak;
    their labels right of the plot)."""
    xa, xb = 10.0 ** ax.x0, 10.0 ** ax.x1
    px, py = ax.px, ax.py
    body, labels = [], []
    for d in sorted(roofs, key=lambda k: -roofs[k]):
        peak = roofs[d]
        ridge = peak / bw
        pts = [(xa, min(peak, xa * bw))]
        if xa < ridge < xb:
            pts.append((ridge, peak))
        pts.append((xb, min(peak, xb * bw)))
        color = ROOF_COLORS.get(d, _ROOF_OTHER)
        body.append('<polyline class="xsp-roof" stroke="%s" points="%s"><title>%s</title>'
                    '</polyline>' % (color, " ".join("%.1f,%.1f" % (px(x), py(max(y, 1e-300)))
                                                     for x, y in pts),
                                     _esc("%s roof: peak %s, ridge at %.3g FLOP/byte"
                                          % (d, fmt_si(peak, "FLOP/s"), ridge))))
        labels.append('<text class="xsp-rl" x="%d" y="%.1f" fill="%s">%s peak %s</text>'
                      % (ax.left + ax.pw + 4, py(peak) + 3, color, _esc(d),
                         _esc(fmt_si(peak, "FLOP/s"))))
    if roofs:
        labels.append('<text class="xsp-rl" x="%d" y="%d">memory %s</text>'
                      % (ax.left + ax.pw + 4, ax.top + ax.ph, _esc(fmt_si(bw, "B/s"))))
    return body, labels


def _roof_points(ax, good, max_labels):
    """A circle per point with its tooltip, and its label beside it when few enough."""
    body = []
    for p in good:
        d = p.get("dtype")
        color = ROOF_COLORS.get(d, _ROOF_OTHER) if d else _ROOF_OTHER
        cx, cy = ax.px(p["intensity"]), ax.py(p["flops_per_s"])
        body.append('<circle class="xsp-pt" cx="%.1f" cy="%.1f" r="4.5" fill="%s"><title>%s'
                    '</title></circle>' % (cx, cy, color,
                                           _esc(p.get("tip") or p.get("label") or "")))
        if len(good) <= max_labels:
            body.append('<text class="xsp-pl" x="%.1f" y="%.1f">%s</text>'
                        % (cx + 6, cy - 5, _esc(_fit(str(p.get("label") or ""), 150))))
    return body


def _roof_legend(ax, good, notes):
    """(the legend of the dtypes and the notes under the plot, the bottom they reach)."""
    legend = []
    ly = ax.top + ax.ph + 30
    lx = ax.left
    for d in sorted({(p.get("dtype") or "?") for p in good}):
        color = ROOF_COLORS.get(d, _ROOF_OTHER)
        legend.append('<circle cx="%d" cy="%d" r="4.5" fill="%s"/><text x="%d" y="%d">%s'
                      '</text>' % (lx + 5, ly - 4, color, lx + 13, ly, _esc(d)))
        lx += 24 + int(6.6 * len(d))
    ny = ly + (22 if legend else 4)
    for note in notes:
        legend.append('<text class="xsp-note" x="%d" y="%d">%s</text>' % (ax.left, ny,
                                                                            _esc(note)))
        ny += 16
    return legend, ny


_ROOFLINE_STYLE = ("<style>.xsp-rf text{font:11px system-ui,sans-serif;fill:#222}"
                   ".xsp-rf .xsp-tick{fill:#555;font-size:10px}.xsp-rf .xsp-note{fill:#8a4b00}"
                   ".xsp-rf .xsp-rf-plot{fill:#fafafa;stroke:#999}"
                   ".xsp-rf .xsp-grid{stroke:#e2e2e2;stroke-width:1}"
                   ".xsp-rf .xsp-roof{fill:none;stroke-width:2}"
                   ".xsp-rf .xsp-pt{stroke:#fff;stroke-width:1;fill-opacity:.85}"
                   ".xsp-rf .xsp-pl{font-size:10px;fill:#444;pointer-events:none}"
                   ".xsp-rf .xsp-pt:hover{stroke:#000;stroke-width:1.5}</style>")


def roofline_svg(points, bytes_per_s=None, flops_per_s=None, *, width=760, height=420,
                 notes=(), max_labels=30):
    """A roofline plot as a self-contained inline SVG (a str): log-log axes, arithmetic
    intensity (FLOP/byte) against FLOP/s; one roof per dtype, min(peak, intensity x
    bytes_per_s), labelled with its peak, the memory slope labelled with the bandwidth; one
    circle per point with a <title> tooltip, and its label beside it when there are at most
    max_labels points; a legend of the dtypes; notes (strs) under it.

    points: dicts with "label", "intensity" and "flops_per_s" (numbers > 0: others are not
    drawn and are counted in a note), "dtype" (colour: "float32", ...; another or None: one
    colour for the rest) and "tip" (the tooltip; default the label).  flops_per_s: {dtype:
    peak FLOP/s} of the roofs to draw (those of the points' dtypes; a point of several dtypes,
    "bfloat16+float32", names each); without bytes_per_s no roof is drawn.  Raises ValueError
    for width under 400 or height under 240."""
    if width < 400 or height < 240:
        raise ValueError("roofline plot must be at least 400 x 240 px, not %r x %r"
                         % (width, height))
    good, bad = _drawable(points)
    bw, roofs = _roofs_of(good, bytes_per_s, flops_per_s)
    ax = _LogAxes(good, bw, roofs, width, height)
    grid = _roof_grid(ax, height)
    body, labels = _roof_lines(ax, bw, roofs)
    body += _roof_points(ax, good, max_labels)
    all_notes = list(notes)
    if bad:
        all_notes.append("%d of %d not drawn: FLOPs, bytes or time unknown or zero (no "
                         "formula: see the table)" % (bad, len(points)))
    if not bw:
        all_notes.append("no roofs: the peaks are unknown")
    legend, bottom = _roof_legend(ax, good, all_notes)
    total_h = max(height, bottom + 4)
    summary = "xsp roofline: %d point%s, %d roof%s" % (len(good), "" if len(good) == 1 else
                                                      "s", len(roofs),
                                                      "" if len(roofs) == 1 else "s")
    return ('<svg xmlns="http://www.w3.org/2000/svg" class="xsp-rf" width="%d" height="%d" '
            'viewBox="0 0 %d %d" role="img" aria-label="%s">%s<defs><clipPath '
            'id="xsp-rf-clip"><rect x="%d" y="%d" width="%d" height="%d"/></clipPath></defs>'
            '\n%s\n<g clip-path="url(#xsp-rf-clip)">\n%s\n</g>\n%s\n</svg>'
            % (width, total_h, width, total_h, _esc(summary), _ROOFLINE_STYLE, ax.left,
               ax.top, ax.pw, ax.ph, "\n".join(grid), "\n".join(body),
               "\n".join(labels + legend)))


# -- tables -------------------------------------------------------------------------------
def _missing(v):
    return v is None or type(v).__name__ in ("NAType", "NaTType") or \
        (isinstance(v, float) and math.isnan(v))


def _plain(v):
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if v.is_integer() and abs(v) < 1e15:
            return "%d" % v
        return "%.1f" % v if abs(v) >= 1000 else "%.4g" % v
    return str(v)


_UNIT_SUFFIX = {"ns": "_ns", "bytes": "_bytes"}


def _unit_of(col):
    c = str(col)
    if c.endswith("_ns"):
        return "ns"
    if c.endswith("share"):
        return "share"
    if c.endswith("_bytes"):
        return "bytes"
    return None


def table_html(df, *, units=None, sortable=False):
    """A DataFrame as an HTML <table class="xsp"> (a str), formatted for reading; the frame is
    left as it is.  Each column's unit comes from units (a dict column -> "ns", "share",
    "bytes", "si" or None for plain) or else from its name: ..._ns -> durations with units in
    the cells ("1.952 ms"), ...share -> "12.3%", ..._bytes -> "4.0 KiB"; "si" is a number with
    an SI prefix ("3.2 k").  Headers drop the unit suffix and show underscores as spaces
    ("total_ns" -> "total", "gpu_share" -> "gpu share") unless two headers would then be the
    same.  Missing values (None, NaN, NA) show as "-"; numeric columns are right-aligned
    (class xsp-num).  Everything is escaped.

    sortable: the table gets class xsp-sort and each numeric cell its value in data-v, so
    that SORT_SCRIPT (once on the page) sorts the rows by a column when its header is
    clicked: numbers by value, text by text, missing values last, a second click reversing."""
    units = dict(units or {})
    cols = list(df.columns)
    unit = {c: units[c] if c in units else _unit_of(c) for c in cols}
    for c, u in unit.items():
        if u not in (None, "ns", "share", "bytes", "si"):
            raise ValueError("unit of column %r must be 'ns', 'share', 'bytes', 'si' or None, "
                             "not %r" % (c, u))
    heads = []
    for c in cols:
        h = str(c)
        suf = _UNIT_SUFFIX.get(unit[c])
        if suf and h.endswith(suf) and len(h) > len(suf):
            h = h[:-len(suf)]
        heads.append(h.replace("_", " "))
    for j, c in enumerate(cols):        # a header made ambiguous keeps the column's name
        if heads.count(heads[j]) > 1:
            heads[j] = str(c)
    fmt = {"ns": fmt_ns, "share": fmt_share, "bytes": fmt_bytes, "si": fmt_si, None: _plain}
    body = []
    columns = [df[c].tolist() for c in cols]
    numeric = []
    for c, vals in zip(cols, columns):
        numeric.append(unit[c] is not None or all(
            isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
            for v in vals if not _missing(v)) and any(not _missing(v) for v in vals))
    for r in range(len(df)):
        cells = []
        for j, c in enumerate(cols):
            v = columns[j][r]
            text = "-" if _missing(v) else fmt[unit[c]](v)
            attrs = ' class="xsp-num"' if numeric[j] else ""
            if sortable and numeric[j]:
                attrs += ' data-v="%s"' % ("" if _missing(v) else repr(float(v)))
            cells.append('<td%s>%s</td>' % (attrs, _esc(text)))
        body.append("<tr>%s</tr>" % "".join(cells))
    head = "".join('<th%s>%s</th>' % (' class="xsp-num"' if numeric[j] else "", _esc(h))
                   for j, h in enumerate(heads))
    return ('<table class="xsp%s"><thead><tr>%s</tr></thead><tbody>\n%s\n</tbody></table>'
            % (" xsp-sort" if sortable else "", head, "\n".join(body)))


# Sorts a table.xsp-sort by the column whose header is clicked (table_html(sortable=True)):
# by data-v as numbers in numeric columns (class xsp-num), else by the text; missing values
# last either way; the header shows the direction in aria-sort.  Array.sort is stable, so
# rows equal in the column keep their order.  No network, no other script needed.
SORT_SCRIPT = (
    "<script>(function(){"
    "function key(td,num){var v=td.hasAttribute('data-v')?td.getAttribute('data-v'):"
    "td.textContent;if(!num)return v;return v===''||v==='-'?null:parseFloat(v);}"
    "function sort(t,j,th){var asc=th.getAttribute('aria-sort')!=='ascending';"
    "var hs=t.tHead.rows[0].cells;for(var i=0;i<hs.length;i++)hs[i].removeAttribute("
    "'aria-sort');th.setAttribute('aria-sort',asc?'ascending':'descending');"
    "var num=th.classList.contains('xsp-num'),b=t.tBodies[0];"
    "var rows=Array.prototype.slice.call(b.rows);rows.sort(function(p,q){"
    "var x=key(p.cells[j],num),y=key(q.cells[j],num);if(x===null||y===null)"
    "return (x===null)-(y===null);var c=num?(x<y?-1:x>y?1:0):x.localeCompare(y);"
    "return asc?c:-c;});rows.forEach(function(r){b.appendChild(r);});}"
    "document.querySelectorAll('table.xsp-sort').forEach(function(t){"
    "var hs=t.tHead.rows[0].cells;Array.prototype.forEach.call(hs,function(th,j){"
    "th.style.cursor='pointer';th.title='sort by this column';"
    "th.addEventListener('click',function(){sort(t,j,th);});});});"
    "})();</script>")


# -- a standalone page ----------------------------------------------------------------------
CSS = ("body{font:13px system-ui,sans-serif;margin:16px;color:#222}"
       "h1{font-size:18px}h2{font-size:15px;margin:18px 0 6px}"
       "table.xsp{border-collapse:collapse}table.xsp td,table.xsp th{border:1px solid #ccc;"
       "padding:2px 6px;text-align:left}table.xsp .xsp-num{text-align:right}"
       "table.xsp th{background:#f3f3f3}")


def page(title, *parts):
    """A standalone HTML document (a str): title as <title> and <h1> (escaped), then parts
    (HTML strings, e.g. from the functions above) in order, with CSS for the tables."""
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>%s</title>'
            '<style>%s</style></head><body>\n<h1>%s</h1>\n%s\n</body></html>\n'
            % (_esc(title), CSS, _esc(title), "\n".join(parts)))


def memory_svg(rows, *, width=760, height=260, device="cpu", notes=()):
    """The memory timeline as a self-contained inline SVG (a str): bytes allocated on the
    device over time, a step line through each span's total after its events, a dot at a
    span's end where its peak (the highest total reported inside it) was above that total
    (its <title> names the span), the highest peak marked; notes (strs) under it.

    rows: dicts with "time_ns" (the span's end), "start_ns", "total_bytes", "peak_bytes" and
    "name", in time order (xsp.memory.timeline's rows).  Raises ValueError for width under 400
    or height under 160."""
    if width < 400 or height < 160:
        raise ValueError("memory plot must be at least 400 x 160 px, not %r x %r"
                         % (width, height))
    left, right, top, bottom = 80, 20, 16, 40
    pw, ph = width - left - right, height - top - bottom
    out = ['<svg xmlns="http://www.w3.org/2000/svg" class="xsp-memory" width="%d" height="%d" '
           'viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">'
           % (width, height + 14 * len(notes), width, height + 14 * len(notes))]
    rows = [r for r in rows if all(isinstance(r.get(k), (int, float)) for k in
                                   ("time_ns", "start_ns", "total_bytes", "peak_bytes"))]
    if not rows:
        out.append('<text x="%d" y="%d">no memory events on %s</text>'
                   % (left, top + ph // 2, _html_mod.escape(device)))
    else:
        t0 = min(r["start_ns"] for r in rows)
        t1 = max(max(r["time_ns"] for r in rows), t0 + 1)
        lo = min(min(r["total_bytes"] for r in rows), min(r["peak_bytes"] for r in rows))
        hi = max(max(r["peak_bytes"] for r in rows), lo + 1)
        lo = min(lo, 0)

        def px(t):
            return left + (t - t0) / (t1 - t0) * pw

        def py(b):
            return top + ph - (b - lo) / (hi - lo) * ph

        out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>'
                   % (left, top, pw, ph))
        for k in range(5):
            b = lo + (hi - lo) * k / 4
            out.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>'
                       % (left - 6, py(b) + 4, _html_mod.escape(fmt_bytes(b))))
            out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>'
                       % (left, left + pw, py(b), py(b)))
        out.append('<text x="%d" y="%d" text-anchor="middle">time (ms from the first '
                   'span with events; %s ms shown)</text>'
                   % (left + pw // 2, height - 8, "%.3g" % ((t1 - t0) / 1e6)))
        pts = []
        prev = None
        for r in rows:
            x, y = px(r["time_ns"]), py(r["total_bytes"])
            if prev is not None:
                pts.append("%.1f,%.1f" % (x, prev))
            pts.append("%.1f,%.1f" % (x, y))
            prev = y
        out.append('<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="%s"/>'
                   % " ".join(pts))
        best = max(rows, key=lambda r: r["peak_bytes"])
        for r in rows:
            if r["peak_bytes"] <= r["total_bytes"]:
                continue                 # the peak is the total after it: on the line
            tip = "%s: peak %s inside it, %s after" % (
                r.get("name", "?"), fmt_bytes(r["peak_bytes"]), fmt_bytes(r["total_bytes"]))
            out.append('<circle cx="%.1f" cy="%.1f" r="2.5" fill="#d62728"><title>%s</title>'
                       '</circle>' % (px(r["time_ns"]), py(r["peak_bytes"]),
                                      _html_mod.escape(tip)))
        out.append('<text x="%.1f" y="%.1f" fill="#d62728">peak %s (%s)</text>'
                   % (min(px(best["time_ns"]), left + pw - 160), max(py(best["peak_bytes"]) - 4,
                                                                   top + 10),
                      _html_mod.escape(fmt_bytes(best["peak_bytes"])),
                      _html_mod.escape(str(best.get("name", "?")))))
    for k, n in enumerate(notes):
        out.append('<text x="%d" y="%d">%s</text>' % (left, height + 12 + 14 * k, _html_mod.escape(n)))
    out.append("</svg>")
    return "".join(out)


def iterations_svg(first, last, series, lo=None, hi=None, *, title="", notes=(), width=760,
                   height=260):
    """Bars over runs of consecutive iterations as a self-contained inline SVG (a str): bar k
    covers iterations first[k]..last[k] on the x axis, stacked from series [(label, values in
    ns, colour)] (negative values drawn as 0), with a whisker from lo[k] to hi[k] (ns) when
    given; each bar's <title> gives its figures; a legend of the series and notes (strs) under
    it.  The elements drawn are a fixed number per bar, so the caller bounds the size by the
    number of bars (xsp.report.summary bins the iterations).  Raises ValueError for width
    under 400 or height under 160."""
    if width < 400 or height < 160:
        raise ValueError("iteration plot must be at least 400 x 160 px, not %r x %r"
                         % (width, height))
    first, last = np.asarray(first, dtype=np.int64), np.asarray(last, dtype=np.int64)
    vals = [np.clip(np.asarray(v, dtype=np.float64), 0, None) for _, v, _ in series]
    tops = np.sum(vals, axis=0) if vals else np.zeros(len(first))
    ymax = float(max(tops.max() if len(tops) else 0.0,
                     np.max(hi) if hi is not None and len(hi) else 0.0, 1.0))
    step = _nice_step(ymax, target=4)
    ymax = math.ceil(ymax / step) * step
    left, right, top, bottom = 80, 20, 24, 40
    pw, ph = width - left - right, height - top - bottom
    n_it = int(last[-1]) + 1 if len(last) else 1
    extra = 14 * (len(notes) + 1)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" class="xsp-iters" role="img" '
           'aria-label="%s" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" '
           'font-size="11">' % (_esc(title), width, height + extra, width, height + extra),
           '<text x="%d" y="14" font-weight="bold">%s</text>' % (left, _esc(title))]

    def px(i):
        return left + i / n_it * pw

    def py(v):
        return top + ph - v / ymax * ph

    k = 0
    while k * step <= ymax + step / 2:
        y = py(k * step)
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%d" '
                   'y="%.1f" text-anchor="end">%s</text>' % (
                       left, left + pw, y, y, left - 6, y + 4, _tick_label(k * step, step)))
        k += 1
    xstep = max(1, int(_nice_step(n_it, target=8)))
    for i in range(0, n_it + 1, xstep):
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>'
                   % (px(i), top + ph + 14, i))
    out.append('<text x="%d" y="%d" text-anchor="middle">iteration</text>'
               % (left + pw // 2, top + ph + 30))
    for b in range(len(first)):
        x0, x1 = px(first[b]), px(last[b] + 1)
        w = max(x1 - x0 - (1 if x1 - x0 > 3 else 0), 0.5)
        tip = ["iteration %d" % first[b] if first[b] == last[b] else
               "iterations %d-%d" % (first[b], last[b])]
        tip += ["%s %s" % (label, fmt_ns(float(v[b]))) for (label, _, _), v in
                zip(series, vals)]
        if lo is not None:
            tip.append("min %s, max %s" % (fmt_ns(float(lo[b])), fmt_ns(float(hi[b]))))
        g = ['<g><title>%s</title>' % _esc("\n".join(tip))]
        base = 0.0
        for (_, _, color), v in zip(series, vals):
            if v[b] > 0:
                g.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>' % (
                    x0, py(base + v[b]), w, py(base) - py(base + v[b]), color))
            base += v[b]
        if lo is not None:
            xm = x0 + w / 2
            g.append('<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#222"/>'
                     % (xm, xm, py(lo[b]), py(hi[b])))
        g.append("</g>")
        out.append("".join(g))
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>'
               % (left, top, pw, ph))
    x = left
    y = height + 10
    for label, _, color in series:
        out.append('<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" '
                   'y="%d">%s</text>' % (x, y - 9, color, x + 14, y, _esc(label)))
        x += 24 + int(6.5 * len(label))
    if lo is not None:
        out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#222"/><text x="%d" y="%d">'
                   'min-max</text>' % (x + 5, x + 5, y - 10, y, x + 14, y))
    for j, n in enumerate(notes):
        out.append('<text x="%d" y="%d">%s</text>' % (left, y + 14 * (j + 1), _esc(n)))
    out.append("</svg>")
    return "".join(out)


def barh_svg(labels, series, *, title="", xlabel="time", width=760, max_label=48):
    """Horizontal bars of durations as a self-contained inline SVG (a str): one bar per label,
    top to bottom, stacked from series [(name, values in ns, colour)] (negative and missing
    values drawn as 0; a legend when there are several), each bar's <title> giving its
    figures; labels cut at max_label characters.  The caller bounds the bars (top-N)."""
    labels = [str(x) for x in labels]
    vals = [np.nan_to_num(np.clip(np.asarray(v, dtype=np.float64), 0, None)) for _, v, _ in series]
    tops = np.sum(vals, axis=0) if vals and len(labels) else np.zeros(0)
    xmax = float(max(tops.max() if len(tops) else 0.0, 1.0))
    step = _nice_step(xmax, target=5)
    xmax = math.ceil(xmax / step) * step
    shown = [printable(x) if len(x) <= max_label else printable(x)[:max_label - 1] + "…"
             for x in labels]
    left = 16 + int(6.2 * max([len(x) for x in shown] + [4]))
    right, top, bar_h = 24, 24, 18
    pw = max(width - left - right, 200)
    width = left + pw + right
    ph = bar_h * len(labels)
    height = top + ph + 40 + (16 if len(series) > 1 else 0)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" class="xsp-bars" role="img" '
           'aria-label="%s" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" '
           'font-size="11">' % (_esc(title), width, height, width, height),
           '<text x="%d" y="14" font-weight="bold">%s</text>' % (left, _esc(title))]

    def px(v):
        return left + v / xmax * pw

    k = 0
    while k * step <= xmax + step / 2:
        x = px(k * step)
        out.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#eee"/><text x="%.1f" '
                   'y="%d" text-anchor="middle">%s</text>' % (
                       x, x, top, top + ph, x, top + ph + 14, _tick_label(k * step, step)))
        k += 1
    out.append('<text x="%d" y="%d" text-anchor="middle">%s</text>'
               % (left + pw // 2, top + ph + 30, _esc(xlabel)))
    for i, label in enumerate(labels):
        y = top + i * bar_h
        tip = [label] + ["%s %s" % (name, fmt_ns(float(v[i]))) for (name, _, _), v in
                         zip(series, vals)]
        g = ['<g><title>%s</title><text x="%d" y="%d" text-anchor="end">%s</text>'
             % (_esc("\n".join(tip)), left - 6, y + 13, _esc(shown[i]))]
        base = 0.0
        for (_, _, color), v in zip(series, vals):
            if v[i] > 0:
                g.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>'
                         % (px(base), y + 2, px(base + v[i]) - px(base), bar_h - 4, color))
            base += v[i]
        g.append("</g>")
        out.append("".join(g))
    out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#888"/>'
               % (left, left, top, top + ph))
    if len(series) > 1:
        x, y = left, top + ph + 48
        for name, _, color in series:
            out.append('<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" '
                       'y="%d">%s</text>' % (x, y - 9, color, x + 14, y, _esc(name)))
            x += 24 + int(6.5 * len(name))
    out.append("</svg>")
    return "".join(out)
