"""The merged trace: `xsp.Trace` and `xsp.Span`, views over columns owned by the C core.

A Trace holds numpy columns (one entry per span, the span's id being its index, ids growing
with start time) and builds Span objects only when asked.  Derived data (children, exclusive
times, depths) is computed once, vectorised, on first use.

Exclusive ("self") time of a span = its duration minus the durations of its children on the
same track (thread); children on other tracks (another thread's work adopted by the region,
or GPU work) ran concurrently and are not subtracted.

This is the data layer: it imports only the C core and the small helpers beside it, never the
analyses, formats or reports built on it (xsp.analysis, xsp.formats, xsp.report), which read
a Trace through its public members only; its two views people look at, tree() and Jupyter's
_repr_html_, hand the trace to their renderer in xsp.report.tree when called.  The walks up the parent chain and the self-time
computation that the layers above need over their own span tables (a Measurement's, a
DataFrame's) are the module functions nearest_ancestor, ancestor_count and self_time, which
the Trace uses itself.
"""

import numpy as np

from xsp import _core
from xsp.core.tree import ancestor_count, nearest_ancestor, self_time
from xsp.core.fmt import fmt_ns as _fmt_ns
from xsp.core.util import printable as _printable

KINDS = _core.KINDS
LEVELS = _core.LEVELS
NO_PARENT = 0xFFFFFFFF


def read_xsp(path):
    """The trace in an .xsp file (the C core's reader; xsp.load chooses it for .xsp paths).
    Raises xsp.TraceFormatError (with .offset) for a truncated, corrupt or foreign file,
    OSError when it cannot be read."""
    return Trace(_core.load(path))


def write_xsp(trace, path):
    """Writes trace as an .xsp file (msgpack; docs/format.md), atomically (the C core's
    writer; xsp.save chooses it for .xsp paths).  Raises OSError on failure."""
    trace._data.save(path)


def core_data(trace):
    """The C trace a Trace wraps (an xsp._core.TraceData, read-only and never changed), for
    the writers that hand it to C: the Kineto and Chrome JSON exporters (xsp.formats.kineto,
    chrome; csrc/io/kinetow.h, chromew.h).  Cannot fail."""
    return trace._data


def merge_traces(inputs, meta, id_keys=("fwd_op", "api")):
    """The data layer's half of xsp.distributed.merge: one Trace of the spans of several,
    each moved onto a common clock (the C core's merge, core/tmerge.h).  inputs: (Trace,
    rank, o0, t0, o1, t1) tuples, the offset line o0 + (o1 - o0) * (t - t0) / (t1 - t0);
    meta: the merged trace's meta (a dict of int, float, str); id_keys: the attributes whose
    values are span ids.  ValueError (the core's message), TypeError, MemoryError."""
    data = _core.merge([(t._data,) + tuple(rest) for t, *rest in inputs], id_keys)
    data._add_meta(meta)            # before anyone has it: the Trace is made after
    return Trace(data)


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
        self._names = None          # _printable_names(), once computed

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

    def _attr_values(self, sel, strings=None):
        """The values of attributes sel (indices): see attr_column; strings: the table to take
        string values from (default self.strings)."""
        types = self._atype[sel]
        if len(sel) and (types == 0).all():
            return self._aint[sel].astype(np.int64, copy=False)
        if len(sel) and (types == 1).all():
            return self._afloat[sel].astype(np.float64, copy=False)
        if not len(sel):
            return np.zeros(0, dtype=np.int64)
        strings = self.strings if strings is None else strings
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

    def stack_of(self, i):
        """The Python call stack of span i (a span id or Span), innermost first, as
        torch.profiler's event.stack: the names ("file.py(42): forward") of the python spans
        among its ancestors, which a profile made with with_stack=True records; [] for a span
        without any.  Raises IndexError for an id out of range."""
        i = self[int(getattr(i, "id", i))].id
        py = KINDS.index("python")
        out = []
        p = int(self._parent[i])
        while p != NO_PARENT:
            if self._kind[p] == py:
                out.append(self.strings[self._name[p]])
            p = int(self._parent[p])
        return out

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
        """Deprecated: xsp.save(trace, path) (an .xsp path)."""
        from xsp.core.util import deprecated
        deprecated("Trace.save(path)", "xsp.save(trace, path)")
        write_xsp(self, str(path) if not isinstance(path, (str, bytes)) else path)

    def to_kineto(self, path):
        """Deprecated: xsp.save(trace, path) (a .pt.trace.json[.gz] path)."""
        from xsp.core.util import deprecated
        deprecated("Trace.to_kineto(path)", "xsp.save(trace, path)")
        from xsp.formats import kineto
        return kineto.write(self, path)

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
                   "module": "L", "op": "L", "backward": "L", "scope": "L", "python": "L"}

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
        span = _fmt_ns(self._extent_ns())
        per = ", ".join("%s %d" % (lv, int((self._level == k).sum()))
                        for k, lv in enumerate(LEVELS) if (self._level == k).any())
        return "<xsp.Trace %d spans (%s), %d threads, %s, lost %d>" % (
            n, per or "none", len(self.threads), span, self.lost)

    def _repr_html_(self):
        """What Jupyter shows: a small summary (spans per level, threads, duration, what was
        lost) and the first lines of tree(), HTML-escaped (xsp.report.tree.repr_html).  The
        full report with tables and plots is xsp.report.html_fragment(trace)."""
        from xsp.report import tree
        return tree.repr_html(self)

    def tree(self, max_depth=None, min_duration_ns=0, max_children=None, root=None,
             min_share=None, fold=True, max_lines=None, source=False):
        """A readable text tree: one line per span with kind, duration and self time.

        max_depth: deepest level shown (the top line is depth 0); min_duration_ns: hide
        shorter spans; min_share: hide spans shorter than this fraction (0 to 1) of the root
        printed (of the whole trace when printing every root); max_children: show at most this
        many children (folded lines) per span, the rest summarised in one line; root: a span
        or span id to print the subtree of (default: every root).

        fold: consecutive siblings with the same name and kind become one line, "x12
        aten::add [op] 1.200 us (mean 100 ns)": their total and mean duration; below it, the
        subtree of the first of them (the line then ends "first shown below").

        max_lines: stop after this many lines and end with one saying how many were left out.
        A last line lists the counters of what was not recorded normally, when any is
        nonzero: "lost spans: 3 (lost.cap 2, lost.depth 1); other counters: unmatched_end 1"
        ("counters: unmatched_end 1" when no span was lost).  Lines deeper than 32 levels keep
        the indent of 32 and end with "[depth N]".  Names are shown with control characters
        escaped, bytes that are not UTF-8 as '?', and cut to 400 characters ("…").

        source: module and model lines end with where their code is, " @ models.py:42 from
        train.py:17": the file name and line of the class's forward (attribute "source") and
        of the call (attribute "call_site"); a folded line shows its first span's source and
        the call site its spans share, or "from 3 call sites".
        Raises TypeError or ValueError for a min_share or max_lines out of range.
        """
        from xsp.report import tree       # a view: the rendering lives with the reports
        return tree.text(self, max_depth, min_duration_ns, max_children, root, min_share, fold,
                         max_lines, source)

    def _extent_ns(self):
        """Last end minus first start, a Python int (times read as the uint64 they are)."""
        if not len(self):
            return 0
        return int(self.end_ns.view(np.uint64).max()) - int(self.start_ns.view(np.uint64).min())

    # The attributes xsp itself writes, by the type it writes them with (docs/api.md).  A file
    # or a hand-made trace may hold another type under these keys; to_pandas shows such a
    # value as text (str()) for a text key and as missing (None) for a numeric key, so that
    # the layers above (analyses, reports) always see the types they compute with.
    _TEXT_ATTRS = frozenset(("type", "shapes", "source", "call_site"))
    _INT_ATTRS = frozenset((
        "seq", "fwd_op", "mem_bytes", "correlation", "device", "stream", "grid_x", "grid_y",
        "grid_z", "block_x", "block_y", "block_z", "registers", "smem_static", "smem_dynamic",
        "graph_id", "graph_node", "bytes", "copy_kind", "value", "cbid", "sync_type", "api"))
    _NUMBER_ATTRS = frozenset(("flops", "dram_bytes"))
    _COLUMNS = ("id", "parent", "level", "kind", "name", "start_ns", "end_ns", "duration_ns",
                "self_ns", "thread", "depth", "module", "flags")

    def _attr_column_values(self, key, values):
        """values (attr_column's) as a list, with the types of the known keys enforced."""
        vals = values.tolist() if isinstance(values, np.ndarray) else list(values)
        if key in self._TEXT_ATTRS:
            return [v if isinstance(v, str) else str(v) for v in vals]
        if key in self._INT_ATTRS and not (isinstance(values, np.ndarray)
                                           and values.dtype == np.int64):
            return [v if isinstance(v, int) else None for v in vals]
        if key in self._NUMBER_ATTRS:
            return [None if isinstance(v, str) else v for v in vals]
        return vals

    def to_pandas(self):
        """One row per span (strings that were not UTF-8 with '?' for the bytes, as the
        reports write them): id, parent (-1 for roots), level, kind, name, start_ns, end_ns,
        duration_ns, self_ns, thread (OS id; int64, or uint64 when a track's id is 2**63 or
        more), depth, module (qualified name of the nearest enclosing module or model span, the
        span itself included; for a backward function and what runs inside it, the module of
        the forward op it differentiates), flags, then one column per attribute key (type,
        seq, fwd_op, ...; missing where a span lacks it).  An attribute whose key is one of
        the columns before is in column "attr.<key>"; the attributes xsp writes keep their
        type (a value of another type, only in a hand-made or damaged trace, is shown as text
        for type and shapes, as missing for the numeric ones).  Each column is column(name)."""
        import pandas as pd

        return pd.DataFrame({c: self.column(c) for c in self.column_names()})

    def column_names(self):
        """The names of to_pandas' columns, in its order (a new list; no table is built)."""
        names = list(self._COLUMNS)
        for _, key in self._attr_keys():
            while key in names:
                key = "attr." + key
            names.append(key)
        return names

    def column(self, name):
        """One column of to_pandas (name: one of column_names()) as a numpy array, without
        pandas: strings (kind, level, name, module, text attributes) as object arrays, None
        where a span lacks an attribute.  Raises KeyError for a name that is not a column."""
        n = len(self)
        if name in ("level", "kind", "name", "module") and not n:
            # as to_pandas has always typed them in an empty table: float64 (pandas' dtype of
            # an empty list), the module column object
            return np.zeros(0) if name != "module" else np.full(0, None, dtype=object)
        if name == "id":
            return np.arange(n, dtype=np.int64)
        if name == "parent":
            return self.parent_ids
        if name == "level":
            return np.array(LEVELS, dtype=object)[self._level]
        if name == "kind":
            return np.array(KINDS, dtype=object)[self._kind]
        if name == "name":
            return self._printable_names()[self._name]
        if name in ("start_ns", "end_ns", "duration_ns", "self_ns", "depth"):
            return getattr(self, name)
        if name == "thread":
            tid_list = [t[0] for t in self.threads]
            tids = np.array(tid_list, dtype=np.uint64 if tid_list and max(tid_list) >= 2 ** 63
                            else np.int64)
            return tids[self._thread] if n else np.zeros(0, dtype=np.int64)
        if name == "module":
            module = np.full(n, None, dtype=object)
            owner = self._module_owner()
            has = owner >= 0
            module[has] = self._printable_names()[self._name[owner[has]]]
            return module
        if name == "flags":
            return self._flags.astype(np.int64)
        taken = list(self._COLUMNS)
        for kid, key in self._attr_keys():     # the column each key got (attr.<key> on a clash)
            col = key
            while col in taken:
                col = "attr." + col
            taken.append(col)
            if col == name:
                break
        else:
            raise KeyError("no column %r in this trace (column_names() lists them)" % name)
        strings = self._printable_names()
        col = np.full(n, None, dtype=object)
        ids, sel = self._attr_entries(kid, self._attr_owner())
        if len(ids):
            vals = np.empty(len(ids), dtype=object)
            vals[:] = self._attr_column_values(key, self._attr_values(sel, strings))
            col[ids] = vals
        return col

    def _attr_keys(self):
        """The attribute keys as to_pandas orders its columns (by string id): (string id,
        key as str) pairs."""
        if not len(self._akey):
            return []
        strings = self._printable_names()
        # the distinct key ids in order, by counting (np.unique would load numpy.ma: about
        # 10 ms of `xsp summary`'s start, issue 28)
        return [(k, strings[k]) for k in np.flatnonzero(np.bincount(self._akey)).tolist()]

    def _printable_names(self):
        """The strings as pandas can hold them, an object array: a name that was not UTF-8
        (lone surrogates, kept byte for byte by the core) with '?' for them, as the reports and
        exporters write it (pandas' default string columns are Arrow's when pyarrow is
        installed, which refuse surrogates).  Computed once."""
        if self._names is None:
            strings = self.strings
            try:
                "".join(strings).encode("utf-8")
            except UnicodeEncodeError:
                strings = [_printable(v) for v in strings]
            names = np.empty(len(strings), dtype=object)
            names[:] = strings
            self._names = names
        return self._names

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
    duration_ns = property(lambda s: int(s._t.end_ns.view(np.uint64)[s.id])
                           - int(s._t.start_ns.view(np.uint64)[s.id]),
                           doc="end_ns - start_ns (exact: the times as the uint64 they are).")
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


__all__ = ["Trace", "Span", "read_xsp", "write_xsp", "merge_traces", "nearest_ancestor", "ancestor_count", "self_time"]
