"""The text tree of a trace: Trace.tree() and the first lines of a notebook's view.

One line per span with its kind, duration and self time, drawn with box characters, in
start order under each parent.  Built from the trace's public columns only (name_codes,
kind_codes, thread_index, flag_bits, parent_ids, children_of, attr_column), so a value keeps
its data and the rendering lives with the other reports.  A walk yields unformatted items
first (_items) and a formatter made once per call turns them into text (_formatter): counting
lines costs no formatting, and a caller may stop early (max_lines, the notebook's 40 lines).

Bounded in width however deep the nesting: the indent of the innermost 32 levels is drawn,
a deeper line keeps that width and ends with its depth, so the text of a deep chain grows
linearly, not with depth squared.  The walk uses an explicit stack: nesting may be far deeper
than Python's recursion limit.
"""
import html as _html
import itertools

import numpy as np

from xsp.core.levels import LEVEL_NAMES
from xsp.core.fmt import fmt_ns
from xsp.core.util import printable
from xsp.values.trace import KINDS, LEVELS

INDENT = 32                # levels whose indent is drawn
NAME_MAX = 400             # characters of a name a line shows (the rest as "…")
FLAG_NAMES = ((1, "open at stop"), (2, "forced end"))
# counters the tree's last line leaves out: a count of what was recorded, and what the span
# lines' flags already show
QUIET = ("gpu.records", "forced_end", "open_at_stop")
HTML_LINES = 40            # lines of the tree a notebook's view shows

# what a name shows in a line of text: C0 controls, DEL and the other characters that
# str.splitlines() breaks at, escaped, so that one span stays one line
_CONTROLS = {c: "\\x%02x" % c for c in list(range(32)) + [0x7f, 0x85]}
_CONTROLS.update({0x0a: "\\n", 0x09: "\\t", 0x0d: "\\r", 0x2028: "\\u2028",
                  0x2029: "\\u2029"})


def clean(text):
    """text for one line: control characters escaped (see _CONTROLS)."""
    return text.translate(_CONTROLS)


def text(trace, max_depth=None, min_duration_ns=0, max_children=None, root=None,
         min_share=None, fold=True, max_lines=None, source=False):
    """Trace.tree()'s text (its docstring says what each option does).  Raises TypeError or
    ValueError for a min_share or max_lines out of range, IndexError for a root out of
    range."""
    if root is not None:
        root = trace[int(getattr(root, "id", root))].id
    _check_min_share(min_share)
    _check_max_lines(max_lines)
    items = _items(trace, root, max_depth, min_duration_ns, max_children, min_share, fold)
    line = _formatter(trace, bool(source))
    if max_lines is None:
        lines = [line(it) for it in items]
    else:
        lines = [line(it) for it in itertools.islice(items, int(max_lines))]
        rest = sum(1 for _ in items)
        if rest:
            lines.append("… %d more line%s (max_lines=%d)"
                         % (rest, "" if rest == 1 else "s", max_lines))
    tail = counters_line(trace)
    if tail:
        lines.append(tail)
    return printable("\n".join(lines))


def repr_html(trace):
    """What Jupyter shows of a Trace: a small summary (spans per level, threads, duration,
    what was lost) and the first HTML_LINES lines of its tree (depth 3, 8 children a span),
    HTML-escaped."""
    esc = _html.escape
    levels = trace.level_codes
    span = fmt_ns(extent_ns(trace))
    rows = "".join("<tr><td>%s (%s)</td><td>%d</td></tr>" % (
        esc(lv), esc(LEVEL_NAMES.get(lv, "?")), int((levels == k).sum()))
        for k, lv in enumerate(LEVELS))
    threads = ", ".join("%s (%d)" % (name or "?", tid) for tid, name, _ in trace.threads[:8])
    if len(trace.threads) > 8:
        threads += ", … %d more" % (len(trace.threads) - 8)
    lost = {k: v for k, v in trace.counters.items() if v}
    counters = ", ".join("%s %d" % kv for kv in sorted(lost.items())) or "none"
    line = _formatter(trace, False)
    lines = [line(it) for it in itertools.islice(_items(trace, None, 3, 0, 8, None, True),
                                                  HTML_LINES + 1)]
    if len(lines) > HTML_LINES:
        lines[-1] = "…"
    parts = [
        '<div class="xsp-trace">',
        "<p><b>xsp.Trace</b>: %d spans, %d threads, %s; lost %d</p>" % (
            len(trace), len(trace.threads), esc(span), trace.lost),
        "<table><tr><th>level</th><th>spans</th></tr>%s</table>" % rows,
        "<p>threads: %s</p>" % esc(threads or "none"),
        "<p>counters (lost or dropped): %s</p>" % esc(counters),
        "<pre>%s</pre>" % esc("\n".join(lines)),
        "<p>Full report: <code>xsp.report.html_fragment(trace)</code></p>",
        "</div>",
    ]
    return printable("\n".join(parts))


def extent_ns(trace):
    """Last end minus first start, a Python int (times read as the uint64 they are)."""
    if not len(trace):
        return 0
    return (int(trace.end_ns.view(np.uint64).max())
            - int(trace.start_ns.view(np.uint64).min()))


def counters_line(trace):
    """The tree's last line: the nonzero counters of what was not recorded normally, or None
    when there are none."""
    c = {k: v for k, v in trace.counters.items() if v and k not in QUIET}
    if not c:
        return None
    lost = ("lost.cap", "lost.depth")
    parts = []
    if any(k in c for k in lost):
        parts.append("lost spans: %d (%s)" % (trace.lost, ", ".join(
            "%s %d" % (k, c[k]) for k in lost if k in c)))
    others = sorted(k for k in c if k not in lost)
    if others:
        parts.append("%s: %s" % ("other counters" if parts else "counters", ", ".join(
            "%s %d" % (clean(k), c[k]) for k in others)))
    return "; ".join(parts)


def _check_min_share(min_share):
    if min_share is None:
        return
    if isinstance(min_share, bool) or not isinstance(min_share, (int, float, np.integer,
                                                                 np.floating)):
        raise TypeError("min_share must be a number from 0 to 1, not %s"
                        % type(min_share).__name__)
    if not 0 <= min_share <= 1:
        raise ValueError("min_share must be a fraction from 0 to 1, not %r" % (min_share,))


def _check_max_lines(max_lines):
    if max_lines is None:
        return
    if isinstance(max_lines, bool) or not isinstance(max_lines, (int, np.integer)):
        raise TypeError("max_lines must be an int, not %s" % type(max_lines).__name__)
    if max_lines < 0:
        raise ValueError("max_lines must be 0 or more, not %d" % max_lines)


# -- the walk: what to show, unformatted ------------------------------------------------------

def _items(trace, root, max_depth, min_duration_ns, max_children, min_share, fold):
    """What the tree shows, one line at a time, unformatted: (what, ids, prefix, connector,
    depth, extra) with what "span" (ids: one span id), "fold" (ids: the folded spans; extra:
    whether the first's subtree follows) or "more" (ids: the spans left out by
    max_children).  root: a span id, or None for every root."""
    dur = trace.duration_ns
    visible = dur >= min_duration_ns
    if min_share is not None and len(trace):
        base = int(dur[root]) if root is not None else extent_ns(trace)
        visible &= dur >= float(min_share) * base
    keys = (trace.name_codes, trace.kind_codes, trace.thread_index)

    def shown_children(i, depth):
        if max_depth is not None and depth >= max_depth:
            return []
        kids = trace.children_of(i)
        return _groups(kids[visible[kids]], keys, fold)

    if root is not None:
        yield from _walk([root], shown_children, max_children)
    else:
        roots = np.nonzero(trace.parent_ids < 0)[0]
        for g in _groups(roots[visible[roots]], keys, fold):
            yield from _walk(g, shown_children, max_children)


def _groups(ids, keys, fold):
    """ids (visible siblings, an int array) as runs to show: one span each, or with fold,
    consecutive spans with the same name, kind and thread together."""
    ids = ids.tolist()
    if not fold or len(ids) < 2:
        return [[i] for i in ids]
    out = []
    prev = None
    for k, i in zip(zip(*(col[ids].tolist() for col in keys)), ids):
        if out and k == prev:
            out[-1].append(i)
        else:
            out.append([i])
        prev = k
    return out


def _walk(top, shown_children, max_children):
    """The items of the subtree of the group top, depth first.  An explicit stack: an entry is
    (group, prefix, last, depth) or a ready "more" item (a tuple of 6)."""
    width = 3 * (INDENT - 1)
    todo = [(top, "", True, 0)]
    while todo:
        item = todo.pop()
        if len(item) == 6:
            yield item
            continue
        group, prefix, last, depth = item
        conn = "" if depth == 0 else ("└─ " if last else "├─ ")
        kids = shown_children(group[0], depth)
        if len(group) == 1:
            yield ("span", group, prefix, conn, depth, False)
        else:
            yield ("fold", group, prefix, conn, depth, bool(kids))
        if not kids:
            continue
        shown = kids if max_children is None else kids[:max_children]
        sub = prefix + ("" if depth == 0 else ("   " if last else "│  "))
        if len(sub) > width:
            sub = sub[3:]
        if len(shown) < len(kids):
            rest = [i for g in kids[len(shown):] for i in g]
            todo.append(("more", rest, sub, "└─ ", depth + 1, False))
        for j in range(len(shown) - 1, -1, -1):
            todo.append((shown[j], sub, j == len(shown) - 1 and len(shown) == len(kids),
                         depth + 1))


# -- the text of an item ----------------------------------------------------------------------

def _column(trace, key):
    """{span id: value} of attribute key."""
    ids, vals = trace.attr_column(key)
    return dict(zip(ids.tolist(), vals if isinstance(vals, list) else vals.tolist()))


def _formatter(trace, source):
    """A function of an item of _items that returns its text, with the columns it reads
    fetched once; source: with the source suffix of module and model lines."""
    cols = {"dur": trace.duration_ns, "self": trace.self_ns, "name": trace.name_codes,
            "kind": trace.kind_codes, "flags": trace.flag_bits, "thread": trace.thread_index,
            "parent": trace.parent_ids, "type": _column(trace, "type")}
    places = ({key: _column(trace, key) for key in ("source", "call_site")} if source
              else None)
    return lambda item: _line(trace, cols, item, places)


def _place(text):
    """'models.py:42' of a source or call_site attribute '/path/to/models.py:42'."""
    if not isinstance(text, str):
        return "?"
    return clean(text.replace("\\", "/").rsplit("/", 1)[-1])


def _source_suffix(kind, ids, places):
    """tree(source=True)'s ' @ models.py:42 from train.py:17' for a line of module or model
    spans ids (their first's source; the call site when they share one, else how many
    sites), '' for other spans and spans without either attribute."""
    if KINDS[kind] not in ("module", "model"):
        return ""
    src, calls = places["source"].get(ids[0]), places["call_site"]
    sites = {calls.get(j) for j in ids} - {None}
    text = " @ %s" % _place(src) if src is not None else ""
    if len(sites) == 1:
        text += " from %s" % _place(next(iter(sites)))
    elif sites:
        text += " from %d call sites" % len(sites)
    return text


def _label(trace, cols, i):
    """'name [kind type' of span i: the name cleaned and cut at NAME_MAX, the class when it
    differs from the name."""
    name = clean(trace.strings[cols["name"][i]])
    if len(name) > NAME_MAX:
        name = name[:NAME_MAX - 1] + "…"
    typ = cols["type"].get(i)
    label = "%s [%s" % (name, KINDS[cols["kind"][i]])
    if typ is not None and typ != "" and str(typ) != name:
        label += " " + clean(str(typ))
    return label


def _other_thread(trace, cols, i):
    """' on <thread>' when span i is another CPU thread's work under its parent (an intra-op
    pool thread's under the op that spawned it, another thread's adopted by the region), else
    ''."""
    p = int(cols["parent"][i])
    th = int(cols["thread"][i])
    if p < 0 or int(cols["thread"][p]) == th or trace.threads[th][2] != 0:
        return ""
    tid, tname, _ = trace.threads[th]
    return " on %s" % (clean(tname) if tname else "thread %d" % tid)


def _line(trace, cols, item, places):
    """The text of one item of _items; places: {"source": {span id: str}, "call_site": {...}}
    to show them, or None."""
    what, ids, prefix, conn, depth, extra = item
    dur = cols["dur"]
    if what == "more":
        text = "… %d more (%s)" % (len(ids), fmt_ns(int(dur[ids].sum())))
    else:
        i = ids[0]
        label = _label(trace, cols, i)
        if what == "span":
            d, s = int(dur[i]), int(cols["self"][i])
            text = "%s] %s" % (label, fmt_ns(d))
            if s != d:
                text += " (self %s)" % fmt_ns(s)
            flags = int(cols["flags"][i])
        else:
            total = int(dur[ids].sum())
            text = "x%d %s] %s (mean %s%s)" % (len(ids), label, fmt_ns(total),
                                               fmt_ns(total / len(ids)),
                                               "; first shown below" if extra else "")
            flags = int(np.bitwise_or.reduce(cols["flags"][ids]))
        if flags & 3:
            text += " {%s}" % ",".join(f for b, f in FLAG_NAMES if flags & b)
        if places is not None:
            text += _source_suffix(cols["kind"][i], ids, places)
        text += _other_thread(trace, cols, i)
    if depth > INDENT:
        text += " [depth %d]" % depth
    return prefix + conn + text
