"""The merged trace: `xsp.Trace` and `xsp.Span`, views over columns owned by the C core.

A Trace holds numpy columns (one entry per span, the span's id being its index, ids growing
with start time) and builds Span objects only when asked.  Derived data (children, exclusive
times, depths) is computed once, vectorised, on first use.

Exclusive ("self") time of a span = its duration minus the durations of its children on the
same track (thread); children on other tracks (another thread's work adopted by the region,
or GPU work) ran concurrently and are not subtracted.

This is the data layer: it imports only the C core and the small helpers beside it, never the
analyses, exporters or reports built on it (xsp.analysis, xsp.chrome, xsp.report), which read
a Trace through its public members only.  The walks up the parent chain and the self-time
computation that the layers above need over their own span tables (a Measurement's, a
DataFrame's) are the module functions nearest_ancestor, ancestor_count and self_time, which
the Trace uses itself.
"""
import html as _html
import itertools

import numpy as np

from . import _core
from ._util import fmt_ns as _fmt_ns
from ._util import printable as _printable
from .levels import LEVEL_NAMES as _LEVEL_NAMES

KINDS = _core.KINDS
LEVELS = _core.LEVELS
NO_PARENT = 0xFFFFFFFF


def load(path):
    """Reads a trace written by Trace.save. Raises xsp.TraceFormatError (with .offset) for a
    truncated, corrupt or foreign file, OSError when it cannot be read."""
    return Trace(_core.load(path))


# -- walks over a parent array (any span table: a Trace's, a Measurement's, a DataFrame's) ------

def _parents_and_mask(parents, mask):
    p = np.asarray(parents)
    if p.ndim != 1:
        raise ValueError("parents must be a 1-d array of span ids, not of shape %s"
                         % (p.shape,))
    p = p.astype(np.int64, copy=False)
    if mask is None:
        return p, None
    m = np.asarray(mask)
    if m.dtype != np.bool_ and m.size:
        raise TypeError("mask must be a boolean array, not of dtype %s" % m.dtype)
    if m.shape != p.shape:
        raise ValueError("mask has shape %s; it needs one entry per span (%d)"
                         % (m.shape, len(p)))
    return p, m.astype(np.bool_, copy=False)


def _passes(n):
    """Pointer jumping doubles the distance covered per pass: a chain of n spans takes at most
    this many passes; more means parents has a cycle."""
    return int(n).bit_length() + 1


def _cycle():
    return ValueError("parents has a cycle (a span table's parents must form a forest)")


def nearest_ancestor(parents, mask, include_self=True):
    """For every span, the id of the nearest span on its parent chain where mask is True: the
    span itself first when include_self, then its parent, grandparent, ...; -1 where there is
    none.  Returns an int64 array.

    parents: a 1-d int array of parent ids, negative for a root (Trace.parent_ids, the parent
    column of a span table); mask: a boolean array of the same length.  Vectorised: pointer
    jumping, each pass doubling how far every unresolved span has looked up, so the passes
    grow with the log of the nesting depth, never a Python loop per span.  Raises ValueError
    for parents with a cycle or a mask of the wrong length, TypeError for a mask that is not
    boolean."""
    p, m = _parents_and_mask(parents, mask)
    n = len(p)
    p = np.where(p < 0, -1, p)
    # ptr[i]: a span at or above i with no span of the mask from i up to, not including,
    # ptr[i]; final once ptr[i] is in the mask or -1
    ptr = np.where(m, np.arange(n, dtype=np.int64), p)
    live = np.nonzero(ptr >= 0)[0]
    live = live[~m[ptr[live]]]
    for _ in range(_passes(n)):
        if not len(live):
            break
        nxt = ptr[ptr[live]]
        ptr[live] = nxt
        live = live[nxt >= 0]
        live = live[~m[ptr[live]]]
    else:
        if len(live):
            raise _cycle()
    if include_self:
        return ptr
    out = np.full(n, -1, dtype=np.int64)
    has = p >= 0
    out[has] = ptr[p[has]]
    return out


def ancestor_count(parents, mask=None):
    """For every span, how many of its ancestors (parent, grandparent, ..., the span itself
    not included) are in mask; with mask None, all of them: the span's depth (roots 0).
    Returns an int64 array.  Arguments and errors as for nearest_ancestor; also pointer
    jumping (over the chain of the mask's spans that nearest_ancestor gives)."""
    p, m = _parents_and_mask(parents, mask)
    if m is not None:
        p = nearest_ancestor(p, m, include_self=False)
    up = np.where(p < 0, -1, p)
    # cnt[i]: the spans above i up to and including up[i]; final once up[i] is -1
    cnt = (up >= 0).astype(np.int64)
    live = np.nonzero(up >= 0)[0]
    for _ in range(_passes(len(up))):
        if not len(live):
            break
        u = up[live]
        cnt[live] += cnt[u]
        up[live] = up[u]
        live = live[up[live] >= 0]
    else:
        if len(live):
            raise _cycle()
    return cnt


def self_time(durations, parents, tracks):
    """Exclusive durations: each span's duration minus the durations of its children on the
    same track (equal values in tracks: a thread index or OS thread id), an int64 array.
    Children on another track ran concurrently and are not subtracted.  parents as for
    nearest_ancestor."""
    dur = np.asarray(durations).astype(np.int64, copy=False)
    p = np.asarray(parents).astype(np.int64, copy=False)
    tr = np.asarray(tracks)
    same = p >= 0
    same[same] = tr[same] == tr[p[same]]
    child_sum = np.zeros(len(dur), dtype=np.int64)
    np.add.at(child_sum, p[same], dur[same])
    return dur - child_sum


# numpy formats of the C span fields (csrc/core/trace.h, xsp_span), in native byte order
_SPAN_FORMATS = {"start_ns": "=i8", "end_ns": "=i8", "parent": "=u4", "name": "=u4",
                 "thread": "=u4", "attr_off": "=u4", "attr_n": "=u2", "level": "u1",
                 "kind": "u1", "flags": "=u4"}


class Trace:
    """One merged, hierarchical trace: model -> modules -> ops -> CUDA API calls and GPU work.

    len(trace), iteration (Span objects in id order, i.e. by start time), trace[i],
    trace.roots(), trace.tree(), trace.to_pandas(), trace.save(path); trace.meta and
    trace.counters are dicts (counters say what was lost: "lost.cap", "lost.depth",
    "unmatched_end", ...).  The span table, one entry per span indexed by span id: start_ns,
    end_ns, duration_ns, self_ns, parent_ids, depth, kind_codes, level_codes, name_codes,
    thread_index, flag_bits (numpy arrays), attrs_of(i), attr_column(key), and
    nearest_ancestor(mask) for walks up the parent chain.  Reports and exports are one layer
    up: xsp.report.text(trace), xsp.report.html(trace, path), xsp.chrome.write(trace, path).
    """

    def __init__(self, data):
        self._data = data
        # the span columns: read-only strided views of the C span array (no copy; each view
        # keeps data alive).  Times are uint64 in C, viewed as int64 (as astype did before:
        # times at or above 2**63 would wrap; clocks start near 0 or at the epoch).
        itemsize, fields = data.span_layout()
        names, formats, offsets = [], [], []
        for name, off, size in fields:
            fmt = _SPAN_FORMATS[name]
            if np.dtype(fmt).itemsize != size:
                raise RuntimeError("xsp: span field %s is %d bytes in the C core, %s here: "
                                   "rebuild xsp" % (name, size, fmt))
            names.append(name)
            formats.append(fmt)
            offsets.append(off)
        spans = np.frombuffer(data, dtype=np.dtype({"names": names, "formats": formats,
                                                    "offsets": offsets,
                                                    "itemsize": itemsize}))
        self.start_ns = spans["start_ns"]
        self.end_ns = spans["end_ns"]
        self._parent = spans["parent"]
        self._name = spans["name"]
        self._thread = spans["thread"]
        self._attr_off = spans["attr_off"]
        self._attr_n = spans["attr_n"]
        self._level = spans["level"]
        self._kind = spans["kind"]
        self._flags = spans["flags"]
        a = data.attrs()
        self._akey = np.frombuffer(a["key"], dtype=np.uint32)
        self._atype = np.frombuffer(a["type"], dtype=np.uint32)
        self._aint = np.frombuffer(a["int"], dtype=np.int64)
        self._afloat = np.frombuffer(a["float"], dtype=np.float64)
        self._astr = np.frombuffer(a["str"], dtype=np.uint32)
        self.strings = data.strings()
        self.threads = data.threads()
        self.meta = data.meta()
        self.counters = data.counters()
        self._children = None
        self._self_ns = None
        self._depth = None

    # -- columns -------------------------------------------------------------------------
    @property
    def duration_ns(self):
        """Inclusive durations, an int64 array indexed by span id."""
        return self.end_ns - self.start_ns

    @property
    def parent_ids(self):
        """Parent ids, an int64 array with -1 for roots."""
        p = self._parent.astype(np.int64)
        p[self._parent == NO_PARENT] = -1
        return p

    @property
    def kind_codes(self):
        """Each span's kind as an index into xsp.trace.KINDS ('region', 'model', 'step',
        'module', 'op', ...), a read-only uint8 array indexed by span id (a view of the C
        trace: no copy)."""
        return self._kind

    @property
    def level_codes(self):
        """Each span's level as an index into xsp.trace.LEVELS (0 'M', 1 'L', 2 'G'), a
        read-only uint8 array indexed by span id."""
        return self._level

    @property
    def name_codes(self):
        """Each span's name as an index into strings, a read-only uint32 array indexed by
        span id (trace.strings[trace.name_codes[i]] is span i's name)."""
        return self._name

    @property
    def thread_index(self):
        """Each span's track as an index into threads, a read-only uint32 array indexed by
        span id (trace.threads[trace.thread_index[i]] is span i's (tid, name, kind))."""
        return self._thread

    @property
    def flag_bits(self):
        """Each span's flags, a read-only uint32 array indexed by span id: bit 1 open at stop
        (ended at the stop time), bit 2 forced end (an enclosing span ended first)."""
        return self._flags

    @property
    def self_ns(self):
        """Exclusive durations (see the module docstring), an int64 array."""
        if self._self_ns is None:
            self._self_ns = self_time(self.duration_ns, self.parent_ids, self._thread)
        return self._self_ns

    @property
    def depth(self):
        """Depth of each span (roots 0), an int32 array."""
        if self._depth is None:
            self._depth = ancestor_count(self.parent_ids).astype(np.int32)
        return self._depth

    def nearest_ancestor(self, mask, include_self=True):
        """For every span, the id of the nearest span on its parent chain (the span itself
        first when include_self, then its parent, grandparent, ...) where mask, a boolean
        array indexed by span id, is True; -1 where there is none.  An int64 array, computed
        vectorised (pointer jumping; xsp.trace.nearest_ancestor over parent_ids).  E.g. the
        enclosing op of every span: trace.nearest_ancestor(trace.kind_codes ==
        KINDS.index("op"), include_self=False).  Raises ValueError for a mask of the wrong
        length, TypeError for one that is not boolean."""
        return nearest_ancestor(self.parent_ids, mask, include_self)

    # -- attributes ----------------------------------------------------------------------
    def attrs_of(self, i):
        """The attributes of span i (a span id) as a new dict: key -> int, float or str
        (type, seq, fwd_op, ...; {} for a span without attributes)."""
        n = int(self._attr_n[i])
        if not n:
            return {}
        off = int(self._attr_off[i])
        out = {}
        for j in range(off, off + n):
            t = self._atype[j]
            if t == 0:
                v = int(self._aint[j])
            elif t == 1:
                v = float(self._afloat[j])
            else:
                v = self.strings[self._astr[j]]
            out[self.strings[self._akey[j]]] = v
        return out

    def attr_column(self, key):
        """The spans that have attribute key and their values: (span_ids, values), span_ids an
        int64 array in increasing order and values in the same order: an int64 array when
        every value is an int, a float64 array when every value is a float, else a list (str
        values, or values of mixed types).  A key no span has gives two empty int64 arrays.
        A span's value is the one attrs_of(i) gives."""
        try:
            k = self.strings.index(key)
        except ValueError:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        ids, sel = self._attr_entries(k, self._attr_owner())
        return ids, self._attr_values(sel)

    def _attr_owner(self):
        """For each attribute, the id of the span it belongs to (from attr_off/attr_n, so any
        layout of the attribute array works)."""
        n_attr = len(self._akey)
        owner = np.full(n_attr, -1, dtype=np.int64)
        counts = self._attr_n.astype(np.int64)
        total = int(counts.sum())
        if total:
            spans = np.repeat(np.arange(len(self), dtype=np.int64), counts)
            first = np.repeat(self._attr_off.astype(np.int64), counts)
            within = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
            owner[first + within] = spans
        return owner

    def _attr_entries(self, key_id, owner):
        """(span ids, attribute indices) of the attributes with key string key_id that belong
        to a span, by span id; one per span: the last, as attrs_of keeps it."""
        sel = np.nonzero(self._akey == key_id)[0]
        ids = owner[sel]
        keep = ids >= 0
        sel, ids = sel[keep], ids[keep]
        if len(ids) > 1 and (np.diff(ids) < 0).any():      # the usual layout is span order
            order = np.lexsort((sel, ids))
            sel, ids = sel[order], ids[order]
        if len(ids) > 1:
            last = np.ones(len(ids), dtype=bool)
            last[:-1] = ids[1:] != ids[:-1]
            sel, ids = sel[last], ids[last]
        return ids, sel

    def _attr_values(self, sel):
        """The values of attributes sel (indices): see attr_column."""
        types = self._atype[sel]
        if len(sel) and (types == 0).all():
            return self._aint[sel].astype(np.int64, copy=False)
        if len(sel) and (types == 1).all():
            return self._afloat[sel].astype(np.float64, copy=False)
        if not len(sel):
            return np.zeros(0, dtype=np.int64)
        strings = self.strings
        return [int(self._aint[j]) if t == 0 else float(self._afloat[j]) if t == 1
                else strings[self._astr[j]] for j, t in zip(sel.tolist(), types.tolist())]

    def _module_owner(self):
        """For each span, the id of the module or model span it belongs to (itself, its nearest
        such ancestor, or for a backward function and what runs inside it, the owner of the
        forward op it differentiates), -1 for none.  Vectorised: nearest_ancestor over the
        parent chain where a linked backward function's parent is its forward op."""
        is_mod = np.isin(self._kind, (KINDS.index("module"), KINDS.index("model")))
        # step: where each span looks next: its forward op if a linked backward function,
        # else its parent
        step = self.parent_ids
        if "fwd_op" in self.strings and len(self._akey):
            owners, sel = self._attr_entries(self.strings.index("fwd_op"), self._attr_owner())
            ints = self._atype[sel] == 0
            owners, target = owners[ints], self._aint[sel[ints]]
            ok = (target >= 0) & (target < owners)   # forward ops come first: no cycle, even
            step[owners[ok]] = target[ok]            # in a file
        return nearest_ancestor(step, is_mod, include_self=True)

    def _child_index(self):
        if self._children is None:
            p = self.parent_ids
            ids = np.nonzero(p >= 0)[0]
            order = ids[np.argsort(p[ids], kind="stable")]
            counts = np.bincount(p[ids], minlength=len(self)) if len(ids) else \
                np.zeros(len(self), dtype=np.int64)
            offs = np.zeros(len(self) + 1, dtype=np.int64)
            np.cumsum(counts, out=offs[1:])
            self._children = (offs, order)
        return self._children

    def children_of(self, i):
        """Ids of span i's children, in start order."""
        offs, order = self._child_index()
        return order[offs[i]:offs[i + 1]]

    # -- spans ---------------------------------------------------------------------------
    def __len__(self):
        return len(self.start_ns)

    def __getitem__(self, i):
        n = len(self)
        if not isinstance(i, (int, np.integer)):
            raise TypeError("trace indices are span ids (int), not %s" % type(i).__name__)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("span id %d out of range (trace has %d spans)" % (i, n))
        return Span(self, int(i))

    def __iter__(self):
        for i in range(len(self)):
            yield Span(self, i)

    def roots(self):
        """Spans without a parent, in start order."""
        return [Span(self, int(i)) for i in np.nonzero(self._parent == NO_PARENT)[0]]

    def spans(self, kind=None, level=None, name=None):
        """Spans filtered by kind ('op', 'module', ...), level ('M', 'L', 'G') and exact name."""
        mask = np.ones(len(self), dtype=bool)
        if kind is not None:
            if kind not in KINDS:
                raise ValueError("unknown kind %r; kinds are %s" % (kind, ", ".join(KINDS)))
            mask &= self._kind == KINDS.index(kind)
        if level is not None:
            if level not in LEVELS:
                raise ValueError("unknown level %r; levels are M, L, G" % (level,))
            mask &= self._level == LEVELS.index(level)
        if name is not None:
            try:
                sid = self.strings.index(name)
            except ValueError:
                return []
            mask &= self._name == sid
        return [Span(self, int(i)) for i in np.nonzero(mask)[0]]

    @property
    def lost(self):
        """Total spans lost (memory cap and nesting depth); details in `counters`."""
        return int(self.counters.get("lost.cap", 0) + self.counters.get("lost.depth", 0))

    # -- equality, files -------------------------------------------------------------------
    def __eq__(self, other):
        if not isinstance(other, Trace):
            return NotImplemented
        return self._data.equal(other._data)

    __hash__ = None

    def save(self, path):
        """Writes the compact .xsp file (msgpack; docs/format.md). Raises OSError on failure."""
        self._data.save(str(path) if not isinstance(path, (str, bytes)) else path)

    def to_bytes(self):
        """The .xsp file's bytes."""
        return self._data.dumps()

    @classmethod
    def from_bytes(cls, data):
        """Parses .xsp bytes; raises xsp.TraceFormatError as load() does."""
        return cls(_core.loads(data))

    # keys of a span dict for from_spans, and each kind's default level (GPU kinds: "G")
    _SPAN_KEYS = ("name", "kind", "start_ns", "end_ns", "parent", "level", "thread", "flags",
                  "attrs")
    _KIND_LEVEL = {"region": "M", "model": "M", "step": "M",
                   "module": "L", "op": "L", "backward": "L", "scope": "L"}

    @classmethod
    def from_spans(cls, spans, threads=None, meta=None, counters=None):
        """A trace built from Python data, for tests and importers.

        spans: a list of dicts, one per span, already in trace order (sorted by start_ns, a
        parent before its children); a span's id is its index.  Keys: name (str), kind (one of
        xsp.trace.KINDS), start_ns, end_ns (ints), and optionally parent (a span id, None for
        a root: the default), level ('M', 'L' or 'G'; by default region/model/step are M,
        module/op/backward/scope L, the GPU kinds G), thread (an index into threads, default
        0), flags (default 0), attrs (dict str -> int, float or str; default {}).
        threads: list of (tid, name, kind) tracks, kind 0 CPU thread, 1 GPU stream, 2
        overhead; default [(1, "main", 0)].  meta: dict str -> int, float or str; counters:
        dict str -> int.

        Raises ValueError naming the span for an unknown or missing key, an unknown kind or
        level, a value out of range, or spans out of trace order (the message of the trace's
        invariant check); TypeError for a value of the wrong type.
        """
        rows = []
        for i, s in enumerate(spans):
            if not isinstance(s, dict):
                raise TypeError("span %d must be a dict, not %s" % (i, type(s).__name__))
            for key in s:
                if key not in cls._SPAN_KEYS:
                    raise ValueError("span %d: unknown key %r; keys are %s"
                                     % (i, key, ", ".join(cls._SPAN_KEYS)))
            for key in cls._SPAN_KEYS[:4]:
                if key not in s:
                    raise ValueError("span %d: missing key %r" % (i, key))
            kind = s["kind"]
            if kind not in KINDS:
                raise ValueError("span %d: key 'kind': unknown kind %r; kinds are %s"
                                 % (i, kind, ", ".join(KINDS)))
            level = s.get("level", cls._KIND_LEVEL.get(kind, "G"))
            if level not in LEVELS:
                raise ValueError("span %d: key 'level': unknown level %r; levels are %s"
                                 % (i, level, ", ".join(LEVELS)))
            parent = s.get("parent")
            rows.append((s["start_ns"], s["end_ns"], -1 if parent is None else parent,
                         LEVELS.index(level), KINDS.index(kind), s["name"], s.get("thread", 0),
                         s.get("flags", 0), s.get("attrs", {})))
        return cls(_core.build(rows, [(1, "main", 0)] if threads is None else threads,
                               {} if meta is None else meta,
                               {} if counters is None else counters))

    # -- views -------------------------------------------------------------------------------
    def __repr__(self):
        n = len(self)
        span = _fmt_ns(self.end_ns.max() - self.start_ns.min()) if n else "0 ns"
        per = ", ".join("%s %d" % (lv, int((self._level == k).sum()))
                        for k, lv in enumerate(LEVELS) if (self._level == k).any())
        return "<xsp.Trace %d spans (%s), %d threads, %s, lost %d>" % (
            n, per or "none", len(self.threads), span, self.lost)

    _HTML_TREE_LINES = 40

    def _repr_html_(self):
        """What Jupyter shows: a small summary (spans per level, threads, duration, what was
        lost) and the first lines of tree(), HTML-escaped.  The full report with tables and
        plots is xsp.report.html_fragment(trace)."""
        esc = _html.escape
        n = len(self)
        span = _fmt_ns(self.end_ns.max() - self.start_ns.min()) if n else "0 ns"
        rows = "".join("<tr><td>%s (%s)</td><td>%d</td></tr>" % (
            esc(lv), esc(_LEVEL_NAMES.get(lv, "?")), int((self._level == k).sum()))
            for k, lv in enumerate(LEVELS))
        threads = ", ".join("%s (%d)" % (name or "?", tid) for tid, name, _ in self.threads[:8])
        if len(self.threads) > 8:
            threads += ", … %d more" % (len(self.threads) - 8)
        lost = {k: v for k, v in self.counters.items() if v}
        counters = ", ".join("%s %d" % kv for kv in sorted(lost.items())) or "none"
        lines = list(itertools.islice(self._tree_lines(None, 3, 0, 8),
                                      self._HTML_TREE_LINES + 1))
        if len(lines) > self._HTML_TREE_LINES:
            lines[-1] = "…"
        parts = [
            '<div class="xsp-trace">',
            "<p><b>xsp.Trace</b>: %d spans, %d threads, %s; lost %d</p>" % (
                n, len(self.threads), esc(span), self.lost),
            "<table><tr><th>level</th><th>spans</th></tr>%s</table>" % rows,
            "<p>threads: %s</p>" % esc(threads or "none"),
            "<p>counters (lost or dropped): %s</p>" % esc(counters),
            "<pre>%s</pre>" % esc("\n".join(lines)),
            "<p>Full report: <code>xsp.report.html_fragment(trace)</code></p>",
            "</div>",
        ]
        return _printable("\n".join(parts))

    def tree(self, max_depth=None, min_duration_ns=0, max_children=None, root=None):
        """A readable text tree: one line per span with kind, duration and self time.

        max_depth: deepest level shown (the top line is depth 0); min_duration_ns: hide
        shorter spans; max_children: show at most this many children per span (the rest
        summarised in one line); root: a span or span id to print the subtree of (default:
        every root).
        """
        if root is not None:
            root = self[int(getattr(root, "id", root))].id
        lines = list(self._tree_lines(root, max_depth, min_duration_ns, max_children))
        if self.lost or self.counters.get("unmatched_end"):
            lines.append("(lost spans: %d; counters: %s)" % (self.lost, self.counters))
        return "\n".join(lines)

    def _tree_lines(self, root, max_depth, min_duration_ns, max_children):
        """The lines of tree(), one at a time (so a caller may stop early); root: a span id
        or None for every root."""
        dur = self.duration_ns
        selft = self.self_ns

        def label(i):
            s = "%s [%s" % (self.strings[self._name[i]], KINDS[self._kind[i]])
            typ = self.attrs_of(i).get("type") if self._attr_n[i] else None
            if typ and typ != self.strings[self._name[i]]:
                s += " " + typ
            s += "] %s" % _fmt_ns(dur[i])
            if selft[i] != dur[i]:
                s += " (self %s)" % _fmt_ns(selft[i])
            if self._flags[i]:
                s += " {%s}" % ",".join(f for b, f in ((1, "open at stop"), (2, "forced end"))
                                        if self._flags[i] & b)
            return s

        def walk(top):
            # explicit stack: traces nest up to 1024 levels per thread, past Python's recursion
            # limit; an entry is a span (id, prefix, last, depth) or a ready line (str)
            todo = [(top, "", True, 0)]
            while todo:
                item = todo.pop()
                if isinstance(item, str):
                    yield item
                    continue
                i, prefix, last, depth = item
                conn = "" if depth == 0 else ("└─ " if last else "├─ ")
                yield prefix + conn + label(i)
                if max_depth is not None and depth >= max_depth:
                    continue
                kids = [int(k) for k in self.children_of(i) if dur[k] >= min_duration_ns]
                shown = kids if max_children is None else kids[:max_children]
                sub = prefix + ("" if depth == 0 else ("   " if last else "│  "))
                if len(shown) < len(kids):
                    rest = kids[len(shown):]
                    todo.append(sub + "└─ … %d more (%s)" % (len(rest), _fmt_ns(dur[rest].sum())))
                for j in range(len(shown) - 1, -1, -1):
                    todo.append((shown[j], sub, j == len(shown) - 1 and len(shown) == len(kids),
                                 depth + 1))

        if root is not None:
            yield from walk(root)
        else:
            for r in np.nonzero(self._parent == NO_PARENT)[0]:
                if dur[r] >= min_duration_ns:
                    yield from walk(int(r))

    def to_pandas(self):
        """One row per span: id, parent (-1 for roots), level, kind, name, start_ns, end_ns,
        duration_ns, self_ns, thread (OS id), depth, module (qualified name of the nearest
        enclosing module or model span, the span itself included; for a backward function and
        what runs inside it, the module of the forward op it differentiates), flags, then one column per
        attribute key (type, seq, fwd_op, ...; missing where a span lacks it)."""
        import pandas as pd

        n = len(self)
        names = np.array(self.strings, dtype=object)
        tids = np.array([t[0] for t in self.threads], dtype=np.int64)
        module = np.full(n, None, dtype=object)
        owner = self._module_owner()
        has = owner >= 0
        module[has] = names[self._name[owner[has]]]
        df = pd.DataFrame({
            "id": np.arange(n, dtype=np.int64),
            "parent": self.parent_ids,
            "level": np.array(LEVELS, dtype=object)[self._level] if n else [],
            "kind": np.array(KINDS, dtype=object)[self._kind] if n else [],
            "name": names[self._name] if n else [],
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "duration_ns": self.duration_ns,
            "self_ns": self.self_ns,
            "thread": tids[self._thread] if n else np.zeros(0, dtype=np.int64),
            "depth": self.depth,
            "module": module,
            "flags": self._flags.astype(np.int64),
        })
        if len(self._akey):
            owner = self._attr_owner()
            for k in np.unique(self._akey):
                col = np.full(n, None, dtype=object)
                ids, sel = self._attr_entries(k, owner)
                if len(ids):
                    values = self._attr_values(sel)
                    vals = np.empty(len(ids), dtype=object)
                    vals[:] = values.tolist() if isinstance(values, np.ndarray) else values
                    col[ids] = vals
                df[self.strings[k]] = col
        return df

    def top(self, n=10, kind="module", leaf_only=True):
        """The n names of the given kind with the most total time, as a DataFrame with columns
        name, type, calls, total_ns, mean_ns, self_ns, share (of the profiled time), and for
        kind "module" or "model" also backward_ns: the time of the autograd backward functions
        that differentiate the forward ops run in that module (see to_pandas' module column).
        leaf_only keeps spans with no child of the same kind (for modules: the layers)."""
        df = self.to_pandas()
        sel = df[df["kind"] == kind]
        if leaf_only and len(sel):
            kid = df["kind"].to_numpy() == kind
            has_same_kind_child = np.zeros(len(df), dtype=bool)
            par = df["parent"].to_numpy()
            has_same_kind_child[par[kid & (par >= 0)]] = True
            sel = sel[~has_same_kind_child[sel["id"].to_numpy()]]
        total = float(self.duration_ns[self._parent == NO_PARENT].max()) if len(self) else 0.0
        if "type" not in sel:
            sel = sel.assign(type=None)
        g = sel.groupby("name", sort=False).agg(
            type=("type", "first"), calls=("id", "size"), total_ns=("duration_ns", "sum"),
            self_ns=("self_ns", "sum"))
        g["mean_ns"] = g["total_ns"] // g["calls"]
        g["share"] = g["total_ns"] / total if total else 0.0
        g = g.sort_values("total_ns", ascending=False).head(n).reset_index()
        cols = ["name", "type", "calls", "total_ns", "mean_ns", "self_ns", "share"]
        if kind in ("module", "model"):
            bw = df[df["kind"] == "backward"].groupby("module")["duration_ns"].sum()
            g["backward_ns"] = g["name"].map(bw).fillna(0).astype(np.int64)
            cols.insert(6, "backward_ns")
        return g[cols]


class Span:
    """One span of a Trace: id, parent, level, kind, name, start_ns, end_ns, thread, attrs,
    duration_ns (inclusive), self_ns (exclusive), children, parent_span."""

    __slots__ = ("_t", "id")

    def __init__(self, trace, i):
        self._t = trace
        self.id = i

    parent = property(lambda s: None if s._t._parent[s.id] == NO_PARENT
                      else int(s._t._parent[s.id]), doc="Parent span id, None for a root.")
    level = property(lambda s: LEVELS[s._t._level[s.id]], doc="'M', 'L' or 'G'.")
    kind = property(lambda s: KINDS[s._t._kind[s.id]], doc="'region', 'model', 'op', ...")
    name = property(lambda s: s._t.strings[s._t._name[s.id]])
    start_ns = property(lambda s: int(s._t.start_ns[s.id]))
    end_ns = property(lambda s: int(s._t.end_ns[s.id]))
    duration_ns = property(lambda s: int(s._t.end_ns[s.id] - s._t.start_ns[s.id]))
    self_ns = property(lambda s: int(s._t.self_ns[s.id]))
    thread = property(lambda s: int(s._t.threads[s._t._thread[s.id]][0]),
                      doc="OS thread id of the thread that recorded the span.")
    thread_name = property(lambda s: s._t.threads[s._t._thread[s.id]][1])
    flags = property(lambda s: int(s._t._flags[s.id]))
    attrs = property(lambda s: s._t.attrs_of(s.id), doc="Attributes: type, seq, fwd_op, ...")

    @property
    def children(self):
        return [Span(self._t, int(k)) for k in self._t.children_of(self.id)]

    @property
    def parent_span(self):
        p = self.parent
        return None if p is None else Span(self._t, p)

    def ancestors(self):
        """Parent, grandparent, ... up to the root."""
        out, p = [], self.parent_span
        while p is not None:
            out.append(p)
            p = p.parent_span
        return out

    def __eq__(self, other):
        return isinstance(other, Span) and other._t is self._t and other.id == self.id

    def __hash__(self):
        return hash((id(self._t), self.id))

    def __repr__(self):
        return "<Span #%d %s %s %r %s>" % (self.id, self.level, self.kind, self.name,
                                           _fmt_ns(self.duration_ns))


__all__ = ["Trace", "Span", "load", "nearest_ancestor", "ancestor_count", "self_time"]
