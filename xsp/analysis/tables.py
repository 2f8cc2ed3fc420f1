"""The automated analyses of XSP's pipeline, each a pandas DataFrame (docs/analyses.md).

Every analysis takes a *source*: an `xsp.Trace`, an `xsp.Measurement` (leveled latencies, see
xsp.measure) or a span table (a DataFrame shaped like `Trace.to_pandas()`).  They all work on
the span table, so a trace and a leveled measurement are analysed by the same code.

Terms (docs/analyses.md has the formulas):
  - iteration: a step span if the trace has steps, else a model span, else the region, else a
    top-level module span (level L alone), else a root span.  Model time = the sum of the iterations' durations; shares are of model time.
  - compiling iteration: one in which torch.compile compiled (a compile span in it); the
    tables and their shares leave these out unless include_compile=True (_Source.counted).
  - layer: a `module` span; a leaf layer has no module span below it.  Layer aggregates (ranking,
    types, GPU vs CPU) use leaf layers, so no time is counted twice.
  - GPU work: kernel, memcpy and memset spans.  A layer's or op's GPU time is the duration of
    the GPU work in its subtree (inclusive); its CPU time is its latency minus that.
When the source recorded no level G, the G-dependent columns are empty (NaN or None), never 0:
a CPU run does not say that no GPU work happened.
"""
import math
import sys

import numpy as np

from xsp.core import iterations
from xsp.core.util import printable
from xsp.values.trace import KINDS, Trace, ancestor_count, nearest_ancestor

GPU_WORK = ("kernel", "memcpy", "memset")
# the names of torch.compile's compile spans (xsp.compiled.COMPILE, RECOMPILE)
COMPILE_PREFIXES = ("torch.compile: compile ", "torch.compile: recompile ")
ITERATION_KINDS = ("step", "model", "region")


def _is_frame(source):
    """Whether source is a pandas DataFrame (pandas is loaded wherever there is one: the
    tables of a trace do not load it for this test)."""
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(source, pd.DataFrame)


def _src(source, include_compile=False):
    """The _Source of source (itself when it is one: its include_compile then holds)."""
    return source if isinstance(source, _Source) else _Source(source, include_compile)


class _Source:
    """A normalised source: the span table, the trace metadata, whether G was recorded."""

    def __init__(self, source, include_compile=False):
        self.measurement = None
        self.include_compile = bool(include_compile)   # the tables count compiling iterations
        self._compile_spans = None  # compile_spans(), once computed
        self._counted = None        # counted(), once computed
        self._windows = None
        self._iteration_of = None
        self._phase_masks = None    # _phase_masks(self), once computed
        self.dropped_tail = None    # (span id, why) of a last step that is not an iteration
        self.setup_rule = None      # how windows() decided the setup: a sentence, or None
        self._nearest = {}          # (kinds, strict) -> nearest(): analyses share one source
        self._trace = None          # a Trace source: its columns are read one at a time
        self._df = None             # the span table: given, or made when df is first read
        self._cols = {}             # column(): the columns read so far
        self._codes = None          # name_codes(), once computed
        self._levels = None         # walk(): the span ids at each depth, once computed
        if isinstance(source, Trace):
            self._trace = source
            self.columns = source.column_names()
            self.meta = dict(source.meta)
            self.n = len(source)
        elif _is_frame(source):
            self._df = source
            self.meta = dict(source.attrs.get("meta", {}))
        elif hasattr(source, "span_table") and hasattr(source, "trace"):
            # a Measurement (xsp.leveled), recognised by its span_table() and trace: leveled
            # sits above this module (it imports the analyses), so no isinstance here
            self.measurement = source
            self._df = source.span_table()
            self.meta = dict(source.trace.meta)
        else:
            raise TypeError("an analysis takes an xsp.Trace, an xsp.Measurement or a span "
                            "DataFrame (Trace.to_pandas()), not %s" % type(source).__name__)
        if self._df is not None:
            self.columns = list(self._df.columns)
            self.n = len(self._df)
        need = {"id", "parent", "kind", "name", "duration_ns"}
        missing = need - set(self.columns)
        if missing:
            raise ValueError("the span table lacks column(s) %s" % ", ".join(sorted(missing)))
        n = self.n
        if self._trace is None:             # a trace's ids are its indices
            ids = self.column("id")
            if n and not np.array_equal(ids, np.arange(n)):
                raise ValueError("the span table's ids must be 0..n-1 in order (as to_pandas "
                                 "gives)")
        self.parent = self.column("parent").astype(np.int64)
        if n and not (self.parent < np.arange(n)).all():
            bad = int(np.nonzero(self.parent >= np.arange(n))[0][0])
            raise ValueError("span %d: parent %d is not before it (a span table's parents "
                             "must have smaller ids, as in every trace)" % (bad, self.parent[bad]))
        self.kind = self.column("kind")
        if self._trace is not None and n:
            # fixed-width str, not objects: the many kind tests run vectorised (a trace's
            # kinds are KINDS, never missing)
            self.kind = np.array(KINDS)[self._trace.kind_codes]
        self.dur = self.column("duration_ns").astype(np.int64)
        levels = self.meta.get("levels")
        if isinstance(levels, str):
            self.has_gpu = "G" in levels
        else:
            self.has_gpu = bool(np.isin(self.kind, GPU_WORK + ("runtime", "driver")).any())

    @property
    def df(self):
        """The span table (Trace.to_pandas() for a trace, made on first use: the tables read
        single columns through column())."""
        if self._df is None:
            self._df = self._trace.to_pandas()
        return self._df

    def has(self, name):
        """Whether the span table has column name."""
        return name in self.columns

    def column(self, name):
        """Column name of the span table as a numpy array, as df[name].to_numpy() gives it
        (for a trace, without making the table: Trace.column, with None as NaN in a text
        column, as pandas' string columns hold it); read once (shared: read only)."""
        if name not in self._cols:
            if self._trace is None:
                self._cols[name] = self._df[name].to_numpy()
            else:
                self._cols[name] = _as_in_frame(name, self._trace.column(name))
        return self._cols[name]

    @property
    def names(self):
        """The span names (an object array)."""
        return self.column("name")

    def name_codes(self):
        """(codes, table): each span's name as an index into table (an object array of
        distinct names), so that a test on names runs once per distinct name."""
        if self._codes is None:
            if self._trace is not None:
                table = np.empty(len(self._trace.strings), dtype=object)
                table[:] = [printable(v) for v in self._trace.strings]
                # two strings that print the same are one name, as in the span table
                first = {}
                canon = np.array([first.setdefault(v, len(first)) for v in table.tolist()],
                                 dtype=np.int64)
                uniq = np.empty(len(first), dtype=object)
                uniq[:] = list(first)
                self._codes = (canon[self._trace.name_codes], uniq)
            else:
                import pandas as pd
                codes, table = pd.factorize(pd.Series(self.names, dtype=object),
                                            use_na_sentinel=False)
                uniq = np.empty(len(table), dtype=object)
                uniq[:] = list(table)
                self._codes = (np.asarray(codes, dtype=np.int64), uniq)
        return self._codes

    def name_startswith(self, prefixes):
        """Per span, whether its name (a str) starts with one of prefixes."""
        codes, table = self.name_codes()
        hit = np.array([isinstance(v, str) and v.startswith(prefixes) for v in table],
                       dtype=bool)
        return hit[codes] if len(codes) else np.zeros(0, dtype=bool)

    def col(self, name, default=None):
        if name in self.columns:
            return self.column(name)
        return np.full(self.n, default, dtype=object)

    def nearest(self, kinds, strict=True):
        """For each span, the id of its nearest ancestor (strict) or itself-or-ancestor whose
        kind is in kinds; -1 for none (xsp.trace.nearest_ancestor over the table's parents);
        computed once per (kinds, strict) for this source (the result is shared: read only)."""
        memo = (tuple(kinds), strict)
        if memo not in self._nearest:
            self._nearest[memo] = self.walk(np.isin(self.kind, kinds),
                                            include_self=not strict)
        return self._nearest[memo]

    # past this many levels of nesting a walk is pointer jumping: a level at a time costs a
    # numpy pass per level (a 100,000-deep chain: seconds per walk, tests/py/formats/
    # test_hostile_files.py's deep chain), pointer jumping one per doubling of the depth
    WALK_LEVELS_MAX = 256

    def walk(self, mask, include_self=True):
        """nearest_ancestor(self.parent, mask, include_self), computed a level of depth at a
        time (a source's parents come before their children, checked at __init__: each level
        reads the one above it, finished), which is cheaper than pointer jumping when many
        walks share the levels (computed once); by pointer jumping for a nesting deeper than
        WALK_LEVELS_MAX."""
        if self._levels is None:
            depth = ancestor_count(self.parent)
            top = int(depth.max()) if self.n else 0
            if top + 1 > self.WALK_LEVELS_MAX:
                self._levels = False
            else:
                order = np.argsort(depth, kind="stable")
                bounds = np.searchsorted(depth[order], np.arange(top + 2)
                                         if self.n else np.zeros(1, dtype=np.int64))
                self._levels = [order[bounds[d]:bounds[d + 1]]
                                for d in range(len(bounds) - 1)]
        if self._levels is False:
            return nearest_ancestor(self.parent, np.asarray(mask, dtype=bool), include_self)
        m = np.asarray(mask, dtype=bool)
        ptr = np.full(self.n, -1, dtype=np.int64)
        for lv in self._levels:
            if not len(lv):
                continue
            p = self.parent[lv]
            up = np.where(p >= 0, ptr[np.maximum(p, 0)], -1)
            ptr[lv] = np.where(m[lv], lv, up)
        if include_self:
            return ptr
        out = np.full(self.n, -1, dtype=np.int64)
        has = self.parent >= 0
        out[has] = ptr[self.parent[has]]
        return out

    def inclusive_sum(self, values, targets_kinds):
        """For each span of targets_kinds, the sum of values over the spans whose chain of
        ancestors of those kinds includes it (every enclosing one, not only the nearest)."""
        out = np.zeros(self.n, dtype=np.int64)
        vals = np.asarray(values, dtype=np.int64)
        up = self.nearest(targets_kinds)
        below = up >= 0
        np.add.at(out, up[below], vals[below])      # what each target has directly below it
        # then each target's sum goes to the target above it, deepest targets first, so that a
        # target's sum is complete when it moves up: one pass per level of target nesting
        targets = np.nonzero(np.isin(self.kind, targets_kinds) & below)[0]
        if len(targets):
            level = ancestor_count(self.parent, np.isin(self.kind, targets_kinds))[targets]
            if int(level.max()) <= 64:
                for lv in range(int(level.max()), 0, -1):
                    t = targets[level == lv]
                    np.add.at(out, up[t], out[t])
            else:
                # deeper nesting (a scan per level would be quadratic): one pass over the
                # targets from the last, as every target's ancestors have smaller ids; sums
                # wrap as int64 ones do
                acc, to, wrap = out.view(np.uint64).tolist(), up.tolist(), (1 << 64) - 1
                for t in targets[::-1].tolist():
                    acc[to[t]] = (acc[to[t]] + acc[t]) & wrap
                out = np.array(acc, dtype=np.uint64).view(np.int64)
        return out

    # -- iterations (docs/analyses.md, "Iterations") -----------------------------------------
    def top_calls(self):
        """Mask of the top-level module calls: model spans, and module spans with no model or
        module span above them (a loss or a lone layer called under the step)."""
        mods = np.isin(self.kind, ("model", "module"))
        return mods & (self.nearest(("model", "module")) < 0)

    def windows(self):
        """The iterations as time windows: (span ids, starts, ends, setup), arrays in start
        order, and setup = (id, start, end) of the setup window, or None (xsp.iterations'
        rule, which the Kineto export shares).  Computed once."""
        if self._windows is not None:
            return self._windows
        w = iterations.windows(self.kind, self.names, self.parent,
                               self.col("start_ns", 0).astype(np.int64), self.dur,
                               self.col("flags", 0).astype(np.int64), self.meta,
                               carve_step0=self.measurement is None)
        self.setup_rule, self.dropped_tail = w.setup_rule, w.dropped_tail
        self._windows = (w.ids, w.starts, w.ends, w.setup)
        return self._windows

    def iterations(self):
        """Ids of the spans the iterations are (a step, or for the first one, the step#0 it
        was carved from; see windows())."""
        return self.windows()[0]

    def iteration_of(self):
        """For each span, the index of the iteration it belongs to (0, 1, ... in start order),
        -1 for none (setup, a dropped tail, outside every iteration).  A span under an
        iteration span belongs to it (under the step#0 a first iteration was carved from, only
        when it starts in the window); any other span (another thread's work adopted by the
        region, and what runs below it) to the iteration during which its topmost span below
        the region started."""
        if self._iteration_of is not None:
            return self._iteration_of
        ids, ws, we, setup = self.windows()
        n = self.n
        out = np.full(n, -1, dtype=np.int64)
        if len(ids) and n:
            start = self.col("start_ns", 0).astype(np.int64)
            is_win = np.zeros(n, dtype=bool)
            is_win[ids] = True
            win_of = np.full(n, -1, dtype=np.int64)
            win_of[ids] = np.arange(len(ids))
            anc = self.walk(is_win, include_self=True)
            under = anc >= 0
            out[under] = win_of[anc[under]]
            if setup is not None and is_win[setup[0]]:
                # the first iteration carved from step#0: what started before it is setup
                j = int(win_of[setup[0]])
                early = (anc == setup[0]) & (start < ws[j])
                early[setup[0]] = False
                out[early] = -1
            region = self.kind == "region"
            base = self.parent < 0
            base[~base] = region[self.parent[~base]]
            top = self.walk(base, include_self=True)
            loose = np.nonzero(~under & ~region & (top >= 0))[0]
            if len(loose):
                t = start[top[loose]]
                j = np.searchsorted(ws, t, side="right") - 1
                ok = (j >= 0) & (t <= we[np.maximum(j, 0)])
                out[loose[ok]] = j[ok]
        self._iteration_of = out
        return out

    def in_iterations(self):
        """For each span, whether it belongs to an iteration (iteration_of() >= 0)."""
        return self.iteration_of() >= 0

    def latencies(self):
        """Each iteration's latency (window end - start), an int64 array."""
        _, ws, we, _ = self.windows()
        return we - ws

    def model_time(self):
        return int(self.latencies().sum())

    # -- torch.compile (docs/analyses.md, "Compiling iterations") ----------------------------
    def compile_spans(self):
        """Mask of torch.compile's compile spans (kind scope, names COMPILE_PREFIXES)."""
        if self._compile_spans is None:
            self._compile_spans = (self.kind == "scope") & self.name_startswith(
                COMPILE_PREFIXES)
        return self._compile_spans

    def compiling(self):
        """A bool per iteration: whether torch.compile compiled in it (a compile span in it),
        as the report's step line decides it."""
        out = np.zeros(len(self.iterations()), dtype=bool)
        cm = self.compile_spans()
        if cm.any():
            it = self.iteration_of()[cm]
            out[it[it >= 0]] = True
        return out

    def left_out(self):
        """A bool per iteration: the compiling iterations the tables leave out (none with
        include_compile, or when every iteration compiled: then they are all there is)."""
        c = self.compiling()
        if self.include_compile or c.all():
            return np.zeros(len(c), dtype=bool)
        return c

    def counted(self):
        """Per span: whether the tables count it: in an iteration not left out (left_out())
        and not under a compile span (what tracing ran is compilation, not the model's work:
        never counted).  Computed once (the result is shared: read only)."""
        if self._counted is not None:
            return self._counted
        it = self.iteration_of()
        m = it >= 0
        cm = self.compile_spans()
        if cm.any():
            m &= self.walk(cm, include_self=True) < 0
            out = self.left_out()
            if out.any():
                m &= ~out[np.maximum(it, 0)]
        self._counted = m
        return m

    def counted_time(self):
        """The tables' model time: the latencies of the iterations they count."""
        return int(self.latencies()[~self.left_out()].sum())

    def tag(self, df):
        """df with attrs saying what the tables left out: compiling_left_out (iterations),
        compiling_kept (compiling iterations counted: include_compile, or all compiled)."""
        c, out = self.compiling(), self.left_out()
        df.attrs["compiling_left_out"] = int(out.sum())
        df.attrs["compiling_kept"] = int((c & ~out).sum())
        return df


def _as_in_frame(name, values):
    """A column of Trace.column as the span table holds it: pandas makes a column whose values
    are all str or None a string column, where None reads back as NaN."""
    if values.dtype != object or not len(values):
        return values
    present = values != None                                    # noqa: E711 (elementwise)
    if not present.any() or present.all():
        return values
    if name != "module" and not all(type(v) is str for v in values[present].tolist()):
        return values
    out = values.copy()
    out[~present] = np.nan
    return out


def _gpu_columns(src):
    """Per span: inclusive kernel count, kernel ns and copy ns (memcpy + memset) of the GPU
    work in its subtree, and the same for the GPU work done in backward passes attributed to
    it through the forward op (module column)."""
    kern = (src.kind == "kernel").astype(np.int64)
    kern_ns = np.where(src.kind == "kernel", src.dur, 0)
    copy_ns = np.where(np.isin(src.kind, ("memcpy", "memset")), src.dur, 0)
    return kern, kern_ns, copy_ns


def _empty(columns):
    import pandas as pd
    return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})


def model_latency(source, batch_size=None):
    """One row per iteration (docs/analyses.md, "Iterations"): iteration (0, 1, ...), id (the
    step, model or region span it is), name, kind, start_ns, latency_ns (its window: for the
    first iteration carved from step#0, from its first model call to the end of step#0) and
    throughput_per_s = batch_size / latency in seconds (NaN without batch_size)."""
    import pandas as pd
    src = _src(source)
    if batch_size is not None and (not isinstance(batch_size, (int, np.integer))
                                   or batch_size <= 0):
        raise ValueError("batch_size must be a positive int, not %r" % (batch_size,))
    ids, ws, we, _ = src.windows()
    lat = we - ws
    with np.errstate(divide="ignore"):          # a zero-length iteration: inf per second
        tput = (batch_size * 1e9 / lat.astype(np.float64)) if batch_size else \
            np.full(len(ids), np.nan)
        return pd.DataFrame({
            "iteration": np.arange(len(ids), dtype=np.int64),
            "id": ids.astype(np.int64),
            "name": src.names[ids],
            "kind": src.kind[ids],
            "start_ns": ws.astype(np.int64),
            "latency_ns": lat.astype(np.int64),
            "throughput_per_s": tput,
        })


def setup(source):
    """The setup: what ran before the first step() and before the first model call in it (it
    is never an iteration).  A dict: id (the step#0 span), start_ns, duration_ns; None when
    the trace has no step spans."""
    s = _src(source).windows()[3]
    if s is None:
        return None
    return {"id": int(s[0]), "start_ns": int(s[1]), "duration_ns": int(s[2] - s[1])}


BACKWARD_OP = "autograd::engine::evaluate_function: "
OPTIMIZER_SCOPES = ("Optimizer.step#", "Optimizer.zero_grad#")
PHASES = ("forward", "toplevel_layers", "backward", "optimizer", "other")


def _phase_masks(src):
    """Per span, which phase it is the outermost span of (or none): forward (model spans),
    toplevel_layers (top-level module calls outside a model: the loss, lone layers), backward
    (autograd's backward functions and the engine's evaluate_function ops, outside the model
    calls), optimizer (the Optimizer.step# and Optimizer.zero_grad# scopes that torch's
    optimizers record).  Computed once per source (phases, forward_time and the layer tables
    of one report share it)."""
    if src._phase_masks is not None:
        return src._phase_masks
    in_model = src.nearest(("model",)) >= 0
    is_model = src.kind == "model"
    top_layer = (src.kind == "module") & src.top_calls() & ~in_model
    bw = ((src.kind == "backward") | ((src.kind == "op")
                                      & src.name_startswith(BACKWARD_OP)))
    bw &= ~in_model
    opt = (src.kind == "scope") & ~in_model
    opt &= src.name_startswith(OPTIMIZER_SCOPES)
    out = {}
    for name, m in (("forward", is_model), ("toplevel_layers", top_layer), ("backward", bw),
                    ("optimizer", opt)):
        out[name] = m & (src.walk(m, include_self=False) < 0)
    src._phase_masks = out
    return out


def phases(source):
    """One row per iteration: iteration, step_ns (the iteration's latency), forward_ns (its
    model calls), toplevel_layers_ns (top-level layer calls outside the model: the loss, lone
    layers), backward_ns (backward functions, on any thread), optimizer_ns (the optimizer's
    step and zero_grad), other_ns (step_ns minus the four: Python, data loading, waiting).
    Each is the sum of the outermost spans of that phase in the iteration."""
    import pandas as pd
    return pd.DataFrame(_phase_cols(_src(source)))


def _phase_cols(src):
    """phases' table as a dict of numpy columns."""
    lat = src.latencies()
    n_it = len(lat)
    it = src.iteration_of()
    df = {"iteration": np.arange(n_it, dtype=np.int64), "step_ns": lat.astype(np.int64)}
    rest = lat.astype(np.int64).copy()
    for name, m in _phase_masks(src).items():
        sel = m & (it >= 0)
        v = np.zeros(n_it, dtype=np.int64)      # summed in int64: exact, no float rounding
        np.add.at(v, it[sel], src.dur[sel])
        df[name + "_ns"] = v
        rest -= v
    df["other_ns"] = rest
    return df


def _summary_rows(src, top, sort):
    """The text report's tables as Rows (None for an empty one): ranking (layer_ranking's
    first top rows), types (layer_types), ops (ops' first top rows by sort): the figures of
    the DataFrames, without pandas."""
    ranking, _ = _ranking_rows(src, top)
    ids, self_ns, gpu, gpu_self = _op_spans(src)
    ops_rows = _op_rows(src, ids, self_ns, gpu, gpu_self, sort, top)[0] if len(ids) else None
    return {"ranking": ranking, "types": _types_rows(src), "ops": ops_rows}


def _layer_mask(src):
    """The layer spans: module spans, and (when L was recorded) model spans with no module
    span below them: a model that is a single layer is that layer too."""
    is_mod = src.kind == "module"
    levels = src.meta.get("levels")
    has_l = ("L" in levels) if isinstance(levels, str) else bool(is_mod.any())
    if has_l:
        is_model = src.kind == "model"
        up = src.nearest(("model",))
        has_mod = np.zeros(src.n, dtype=bool)
        u = up[is_mod]
        has_mod[u[u >= 0]] = True
        is_mod = is_mod | (is_model & ~has_mod)
    return is_mod


def _layer_rows(src):
    is_mod = _layer_mask(src)
    ids = np.nonzero(is_mod)[0]
    enclosing = src.walk(is_mod, include_self=False)
    has_mod_child = np.zeros(src.n, dtype=bool)
    e = enclosing[is_mod]
    has_mod_child[e[e >= 0]] = True
    depth = ancestor_count(src.parent, is_mod)      # layer ancestors of each layer span
    return ids, ~has_mod_child, depth


def layers(source, shapes=False):
    """One row per layer call (module span; a model span that has no module below it) in
    execution order: index, id, name (qualified), type, depth (layer ancestors), leaf,
    iteration (-1 outside every iteration: setup), latency_ns (inclusive), self_ns,
    allocated_bytes (memory allocated in the call where PyTorch reports it: CUDA caching
    allocator, with xsp.profile(profile_memory=True); NaN otherwise), and with shapes=True the
    input shapes (recorded with xsp.profile(record_shapes=True))."""
    import pandas as pd
    src = _src(source)
    if shapes and not src.has("shapes"):
        raise ValueError("this trace has no input shapes: record it with "
                         "xsp.profile(..., record_shapes=True)")
    ids, leaf, depth = _layer_rows(src)
    mem = src.col("mem_bytes", None)[ids]
    df = pd.DataFrame({
        "index": np.arange(len(ids), dtype=np.int64),
        "id": ids.astype(np.int64),
        "name": src.names[ids],
        "type": src.col("type", None)[ids],
        "depth": depth[ids],
        "leaf": leaf[ids],
        "iteration": src.iteration_of()[ids],
        "latency_ns": src.dur[ids],
        "self_ns": src.col("self_ns", 0)[ids].astype(np.int64),
        "allocated_bytes": pd.array([np.nan if v is None else v for v in mem], dtype="Float64")
        if len(ids) else pd.array([], dtype="Float64"),
    })
    if shapes:
        df.insert(4, "shapes", src.col("shapes", None)[ids])
    return df


def _leaf_layers(src):
    """The leaf layer calls the tables count (_Source.counted)."""
    import pandas as pd
    ids, leaf, _ = _layer_rows(src)
    keep = ids[leaf[ids] & src.counted()[ids]]
    return pd.DataFrame({
        "id": keep,
        "name": src.names[keep],
        "type": src.col("type", None)[keep],
        "latency_ns": src.dur[keep],
        "iteration": src.iteration_of()[keep],
    })


def forward_time(src):
    """The forward time of the iterations: their model calls and top-level layer calls."""
    ph = _phase_masks(src)
    m = (ph["forward"] | ph["toplevel_layers"]) & src.counted()
    return int(src.dur[m].sum())


def _backward_by_module(src):
    """Backward time per module name (the backward functions whose forward op ran in that
    module: to_pandas' module column; with steps, those in the iterations), a Series."""
    import pandas as pd
    is_bw = src.kind == "backward"
    if (src.kind[src.iterations()] == "step").any():
        is_bw &= src.counted()                # iterations are steps: the backward is in them
    # else the iterations are the model calls (no steps), which the backward follows
    if not is_bw.any() or not src.has("module"):
        return pd.Series(dtype=np.int64)
    return pd.Series(src.dur[is_bw]).groupby(src.column("module")[is_bw]).sum()


class Rows:
    """A table as numpy columns in order, what the tables' DataFrames are made of: the text
    report reads it without pandas (xsp summary loads none); frame() makes the DataFrame.
    attrs as a DataFrame's."""

    def __init__(self, cols, attrs=None):
        self.cols = dict(cols)
        self.attrs = dict(attrs or {})

    def __len__(self):
        return len(next(iter(self.cols.values()))) if self.cols else 0

    def __getitem__(self, col):
        return self.cols[col]

    @property
    def columns(self):
        return list(self.cols)

    def head(self, n):
        return Rows({c: v[:n] for c, v in self.cols.items()}, self.attrs)

    def drop(self, columns):
        return Rows({c: v for c, v in self.cols.items() if c not in columns}, self.attrs)

    def frame(self):
        import pandas as pd
        df = pd.DataFrame(self.cols)
        df.attrs.update(self.attrs)
        return df


def _isna(values):
    """Per value of an object array: None or NaN (pandas' isna for str and numbers)."""
    return np.array([v is None or (isinstance(v, float) and v != v) for v in values.tolist()],
                    dtype=bool) if len(values) else np.zeros(0, dtype=bool)


def _groups(codes):
    """Rows grouped by codes (ints) in order of first appearance, as groupby(sort=False):
    (group index of each row, the row where each group first appears)."""
    if not len(codes):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    _, first, inv = np.unique(codes, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank[inv.reshape(-1)], first[order]


def _group_sum(g, k, values):
    """Sum of int64 values per group (k groups), wrapping as int64 sums do."""
    out = np.zeros(k, dtype=np.int64)
    np.add.at(out, g, np.asarray(values, dtype=np.int64))
    return out


def _group_first(g, k, values, na):
    """The first value per group that is not missing (na), as groupby's first; NaN for none."""
    out = np.full(k, np.nan, dtype=object)
    rows = np.nonzero(~na)[0]
    if len(rows):
        pos = np.full(k, len(values), dtype=np.int64)
        np.minimum.at(pos, g[rows], rows)
        has = pos < len(values)
        out[has] = values[pos[has]]
    return out


def _welford(g, values, groups):
    """The sample standard deviation (ddof=1, NaN for one value) of values per group, for the
    groups asked (indices): Welford's update in float64, value by value in row order, the
    computation pandas' groupby std makes, so the figures are the same to the last bit."""
    want = set(int(x) for x in groups)
    acc = {}
    sel = np.nonzero(np.isin(g, list(want)))[0] if want else np.zeros(0, dtype=np.int64)
    for k, v in zip(g[sel].tolist(), np.asarray(values)[sel].tolist()):
        n, mean, m2 = acc.get(k, (0, 0.0, 0.0))
        v = float(v)
        n += 1
        old = mean
        mean += (v - old) / n
        m2 += (v - old) * (v - mean)
        acc[k] = (n, mean, m2)
    out = []
    for k in groups:
        n, _, m2 = acc.get(int(k), (0, 0.0, 0.0))
        out.append(math.sqrt(m2 / (n - 1)) if n > 1 else np.nan)
    return np.array(out, dtype=np.float64)


def _order(key, first, descending=True):
    """The rows by key (largest first when descending), ties by first (smallest first)."""
    o = np.argsort(first, kind="stable")
    k = key[o]
    return o[np.argsort(-k if descending else k, kind="stable")]


def _leaf_ids(src):
    """The leaf layer calls the tables count (_Source.counted): their ids."""
    ids, leaf, _ = _layer_rows(src)
    return ids[leaf[ids] & src.counted()[ids]]


def _backward_sums(src):
    """Backward time per module name as a dict (see _backward_by_module)."""
    is_bw = src.kind == "backward"
    if (src.kind[src.iterations()] == "step").any():
        is_bw &= src.counted()
    if not is_bw.any() or not src.has("module"):
        return {}
    out = {}
    for m, d in zip(src.column("module")[is_bw].tolist(), src.dur[is_bw].tolist()):
        if m is None or (isinstance(m, float) and m != m):
            continue
        out[m] = (out.get(m, 0) + d + (1 << 63)) % (1 << 64) - (1 << 63)
    return out


def _ranking_rows(src, n=None, std_all=False):
    """layer_ranking's table as Rows, its first n rows; std_ns of those rows only, unless
    std_all (then std_ns is left for the caller: None)."""
    keep = _leaf_ids(src)
    cols = ["rank", "name", "type", "calls", "total_ns", "mean_ns", "std_ns", "backward_ns",
            "forward_share", "step_share", "cumulative_step_share"]
    if not len(keep):
        return None, cols
    names = src.names[keep]
    na = _isna(names) if src._trace is None else np.zeros(len(keep), dtype=bool)
    keep, names = keep[~na], names[~na]
    codes = src.name_codes()[0][keep]
    g, first_row = _groups(codes)
    k = len(first_row)
    types = src.col("type", None)[keep]
    lat = src.dur[keep]
    calls = np.bincount(g, minlength=k).astype(np.int64)
    total = _group_sum(g, k, lat)
    first = keep[first_row]
    o = _order(total, first)
    bw = _backward_sums(src)
    gname = names[first_row][o]
    bwn = np.array([bw.get(nm, 0) for nm in gname.tolist()], dtype=np.int64)
    total, calls = total[o], calls[o]
    ft, mt = forward_time(src), src.counted_time()
    with np.errstate(divide="ignore", invalid="ignore"):
        fshare = total / ft if ft else np.full(k, np.nan)
        sshare = (total + bwn) / mt if mt else np.full(k, np.nan)
    m = k if n is None else min(n, k)
    gi = o[:m]
    out = {"rank": np.arange(1, k + 1, dtype=np.int64), "name": gname,
           "type": _group_first(g, k, types, _isna(types))[o], "calls": calls,
           "total_ns": total, "mean_ns": total // calls,
           "std_ns": None if std_all else _welford(g, lat, gi),
           "backward_ns": bwn, "forward_share": fshare, "step_share": sshare,
           "cumulative_step_share": np.cumsum(sshare)}
    rows = Rows({c: (v if v is None or c == "std_ns" else v[:m]) for c, v in out.items()})
    return rows, (g, lat, o)


def layer_ranking(source, n=None, include_compile=False):
    """Leaf layers in the iterations by total forward latency, slowest first: rank (1, 2,
    ...), name, type, calls, total_ns (forward), mean_ns (total / calls, floored), std_ns (the
    sample standard deviation of the calls' latencies, NaN for one call), backward_ns
    (the autograd backward functions that differentiate the layer's forward ops: the module
    column), forward_share (total_ns / the iterations' forward time: model and top-level layer
    calls), step_share ((total_ns + backward_ns) / the iterations' time) and
    cumulative_step_share.  The iterations in which torch.compile compiled are left out
    (include_compile=True counts them; docs/analyses.md, "Compiling iterations"): attrs
    compiling_left_out says how many."""
    src = _src(source, include_compile)
    rows, how = _ranking_rows(src, n, std_all=True)
    if rows is None:
        return src.tag(_empty(how))
    rows.cols["std_ns"] = _pandas_std(*how)[:len(rows)]
    return src.tag(rows.frame())


def _pandas_std(g, values, order):
    """pandas' groupby std of values per group (all of them: cython), in order."""
    import pandas as pd
    return pd.Series(values).groupby(g).std().to_numpy()[order]


def layer_types(source, include_compile=False):
    """Leaf layers in the iterations grouped by type (class): type, count, total_ns (forward),
    backward_ns, count_share (of leaf layer calls), forward_share (of the forward time) and
    step_share ((total + backward) / the iterations' time), by total latency, largest first.
    Compiling iterations are left out as in layer_ranking."""
    src = _src(source, include_compile)
    rows = _types_rows(src)
    if rows is None:
        return src.tag(_empty(["type", "count", "total_ns", "backward_ns", "count_share",
                               "forward_share", "step_share"]))
    return src.tag(rows.frame())


def _types_rows(src):
    """layer_types' table as Rows (None without leaf layers)."""
    keep = _leaf_ids(src)
    if not len(keep):
        return None
    types = src.col("type", None)[keep].copy()
    types[_isna(types)] = "?"
    names = src.names[keep]
    g, first_row = _groups(_codes_of(types))
    k = len(first_row)
    count = np.bincount(g, minlength=k).astype(np.int64)
    total = _group_sum(g, k, src.dur[keep])
    first = keep[first_row]
    gtype = types[first_row]
    # backward per type: each module name's backward goes to the type of its first leaf call
    name_type = {}
    for nm, t in zip(names.tolist(), types.tolist()):
        if not (nm is None or (isinstance(nm, float) and nm != nm)):
            name_type.setdefault(nm, t)
    per_type = {}
    for nm, v in _backward_sums(src).items():
        t = name_type.get(nm)
        if t is not None:
            per_type[t] = (per_type.get(t, 0) + v + (1 << 63)) % (1 << 64) - (1 << 63)
    bwn = np.array([per_type.get(t, 0) for t in gtype.tolist()], dtype=np.int64)
    o = _order(total, first)
    total, count, bwn, gtype = total[o], count[o], bwn[o], gtype[o]
    ft, mt = forward_time(src), src.counted_time()
    with np.errstate(divide="ignore", invalid="ignore"):
        return Rows({"type": gtype, "count": count, "total_ns": total, "backward_ns": bwn,
                     "count_share": count / len(keep),
                     "forward_share": total / ft if ft else np.full(k, np.nan),
                     "step_share": (total + bwn) / mt if mt else np.full(k, np.nan)})


def _codes_of(values):
    """An int code per value of an object array (equal values, equal codes)."""
    seen = {}
    return np.array([seen.setdefault(v, len(seen)) for v in values.tolist()], dtype=np.int64)


def redispatches(is_op, names, parent):
    """torch.profiler's rule (EventList._remove_dup_nodes) as a mask: an op that is the only
    child of an op of the same name (a redispatch to another overload) is one call with it,
    not two.  is_op: bool per span; names: the span names (an array); parent: parent ids (-1
    for roots).  True for the spans to merge into their parent."""
    n = len(parent)
    has_p = parent >= 0
    kids = np.bincount(parent[has_p], minlength=n) if n else np.zeros(0, np.int64)
    dup = np.zeros(n, dtype=bool)
    pp = np.nonzero(has_p & is_op)[0]
    q = parent[pp]
    dup[pp] = is_op[q] & (names[q] == names[pp]) & (kids[q] == 1)
    return dup


def _op_spans(src):
    """The op spans ops() counts (ids) and per span its self time (a merged redispatch's added
    to the call it is merged into), and with G the GPU work it launched, inclusive and its
    own (gpu, gpu_self; None without G)."""
    # what torch.compile runs while it compiles (tracing with fake tensors) is compilation,
    # shown as its own spans (xsp.compiled), not the iteration's ops: counted() leaves it out
    sel = (src.kind == "op") & src.counted()
    par = src.parent
    names = src.names if src._trace is None else src.name_codes()[0]
    dup = redispatches(src.kind == "op", names, par) & sel
    sel &= ~dup
    ids = np.nonzero(sel)[0]
    if not len(ids):
        return ids, None, None, None
    # a merged redispatch's self time is its own: it goes to the call it is merged into (the
    # top of its chain of same-name single children)
    self_ns = src.col("self_ns", 0).astype(np.int64)
    if dup.any():
        self_ns = self_ns.copy()
        top = nearest_ancestor(par, ~dup, include_self=True)
        d = np.nonzero(dup)[0]
        np.add.at(self_ns, top[d], self_ns[d])
    gpu = gpu_self = None
    if src.has_gpu:
        _, kern_ns, copy_ns = _gpu_columns(src)
        work = kern_ns + copy_ns
        gpu = src.inclusive_sum(work, ("op",))
        up = src.nearest(("op",))
        gpu_self = np.zeros(src.n, dtype=np.int64)
        w = (work > 0) & (up >= 0)
        np.add.at(gpu_self, up[w], work[w])
    return ids, self_ns, gpu, gpu_self


def _op_rows(src, ids, self_ns, gpu, gpu_self, sort="self_ns", n=None, std_all=False):
    """ops' table (not by shape) as Rows, its first n rows, over the op spans ids (self_ns,
    gpu and gpu_self per span; gpu None without G); std_ns of the rows kept only, or with
    std_all left for the caller (None).  Also (group of each op, its total_ns, the groups'
    order)."""
    codes = src.name_codes()[0][ids]
    na = _isna(src.names[ids]) if src._trace is None else None
    if na is not None and na.any():
        ids, codes = ids[~na], codes[~na]
    g, first_row = _groups(codes)
    k = len(first_row)
    total = src.dur[ids]
    cols = {"name": src.names[ids[first_row]],
            "calls": np.bincount(g, minlength=k).astype(np.int64),
            "total_ns": _group_sum(g, k, total), "self_ns": _group_sum(g, k, self_ns[ids])}
    cols["mean_ns"] = cols["total_ns"] // cols["calls"]
    mt = src.counted_time()
    with np.errstate(divide="ignore", invalid="ignore"):
        cols["self_share"] = cols["self_ns"] / mt if mt else np.full(k, np.nan)
    if gpu is not None:
        cols["gpu_ns"] = _group_sum(g, k, gpu[ids])
        cols["gpu_self_ns"] = _group_sum(g, k, gpu_self[ids])
    else:
        cols["gpu_ns"] = np.full(k, np.nan)
        cols["gpu_self_ns"] = np.full(k, np.nan)
    first = ids[first_row]
    if sort == "std_ns":
        key = _pandas_std(g, total, np.arange(k)) if std_all else \
            _welford(g, total, np.arange(k))
        cols["std_ns"] = key
    else:
        key = cols[sort]
    o = _order(np.asarray(key, dtype=np.float64) if key.dtype != np.int64 else key, first)
    m = k if n is None else min(n, k)
    if sort != "std_ns":
        cols["std_ns"] = None if std_all else _welford(g, total, o[:m])
    else:
        cols["std_ns"] = cols["std_ns"][o][:m]
    out = {}
    for c in ("name", "calls", "total_ns", "self_ns", "mean_ns", "std_ns", "self_share",
              "gpu_ns", "gpu_self_ns"):
        v = cols[c]
        out[c] = v if v is None or c == "std_ns" else v[o][:m]
    return Rows(out), (g, total, o)


def ops(source, by_shape=False, sort="self_ns", n=None, include_compile=False):
    """The op table, like torch.profiler's key_averages: one row per op name (and per input
    shapes with by_shape: an op's input_dims, recorded with record_shapes=True, as torch's
    group_by_input_shape uses Input Dims) over the ops in the iterations,
    an op that is the only child of an op of the same name (a redispatch) merged into it as
    torch.profiler does: name, [shapes,] calls, total_ns (inclusive, every call counted, nested calls of the same
    name too, as torch.profiler does), self_ns, mean_ns (total / calls), self_share (self_ns /
    the iterations' time), and with level G gpu_ns (the GPU work launched inside the op,
    nested ops included) and gpu_self_ns (launched by the op itself, not a nested op); NaN
    without G.  Sorted by `sort` (a column name), largest first.  Ops run while torch.compile
    compiled, under its compile spans, are never counted, and the iterations in which it
    compiled are left out as in layer_ranking (include_compile=True counts them)."""
    src = _src(source, include_compile)
    cols = ["name"] + (["shapes"] if by_shape else []) + [
        "calls", "total_ns", "self_ns", "mean_ns", "std_ns", "self_share", "gpu_ns",
        "gpu_self_ns"]
    if sort not in cols or sort in ("name", "shapes"):
        raise ValueError("sort must be one of %s, not %r"
                         % (", ".join(c for c in cols if c not in ("name", "shapes")), sort))
    # an op's shapes: its input_dims (record_shapes: torch's Input Dims, which
    # key_averages(group_by_input_shape=True) groups by), else a "shapes" attribute
    shape_col = ("input_dims" if src.has("input_dims") else
                 "shapes" if src.has("shapes") else None)
    if by_shape and shape_col is None:
        raise ValueError("this trace has no op input shapes: record it with "
                         "xsp.profile(..., record_shapes=True)")
    ids, self_ns, gpu, gpu_self = _op_spans(src)
    if not len(ids):
        return src.tag(_empty(cols))
    if not by_shape:
        rows, (g, total, o) = _op_rows(src, ids, self_ns, gpu, gpu_self, sort, n,
                                       std_all=True)
        rows.cols["std_ns"] = _pandas_std(g, total, o)[:len(rows)]
        return src.tag(rows.frame())
    import pandas as pd
    df = pd.DataFrame({"name": src.names[ids], "first": ids,
                       "total_ns": src.dur[ids], "self_ns": self_ns[ids]})
    keys = ["name"]
    if by_shape:
        df["shapes"] = [str(v) if v is not None else "" for v in src.col(shape_col, None)[ids]]
        keys.append("shapes")
    if src.has_gpu:
        df["gpu_ns"] = gpu[ids]
        df["gpu_self_ns"] = gpu_self[ids]
    g = df.groupby(keys, sort=False).agg(
        calls=("first", "size"), total_ns=("total_ns", "sum"), self_ns=("self_ns", "sum"),
        std_ns=("total_ns", "std"), first=("first", "min"),
        **({"gpu_ns": ("gpu_ns", "sum"), "gpu_self_ns": ("gpu_self_ns", "sum")}
           if src.has_gpu else {})).reset_index()
    if not src.has_gpu:
        g["gpu_ns"] = np.nan
        g["gpu_self_ns"] = np.nan
    g["mean_ns"] = g["total_ns"] // g["calls"]
    mt = src.counted_time()
    g["self_share"] = g["self_ns"] / mt if mt else np.nan
    g = g.sort_values([sort, "first"], ascending=[False, True], kind="stable")
    g = g[cols].reset_index(drop=True)
    return src.tag(g if n is None else g.head(n))


KERNEL_ATTRS = ("device", "stream", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
                "block_z", "registers", "smem_static", "smem_dynamic", "correlation",
                "graph_id")


def kernels(source):
    """One row per kernel in start order: index, id, name, start_ns, duration_ns, op (name of
    the op that launched it), layer (qualified name of the module whose forward launched it, or
    for backward kernels the module of the forward op, from the module column), then the
    kernel attributes device, stream, grid_x/y/z, block_x/y/z, registers, smem_static,
    smem_dynamic, correlation, graph_id (None where absent).  Empty without level G."""
    import pandas as pd
    src = _src(source)
    ids = np.nonzero(src.kind == "kernel")[0]
    op = src.nearest(("op",))[ids]
    names = src.names
    df = pd.DataFrame({
        "index": np.arange(len(ids), dtype=np.int64),
        "id": ids.astype(np.int64),
        "name": names[ids],
        "start_ns": src.col("start_ns", 0)[ids].astype(np.int64),
        "duration_ns": src.dur[ids],
        "op": pd.Series(np.where(op >= 0, names[np.maximum(op, 0)], None) if len(ids)
                        else [], dtype=object),
        "layer": pd.Series(src.col("module", None)[ids], dtype=object),
        "iteration": src.iteration_of()[ids],
    })
    for a in KERNEL_ATTRS:
        df[a] = src.col(a, None)[ids]
    return df


def kernels_by_name(source, include_compile=False):
    """Kernels aggregated by name: name, count, total_ns, mean_ns (floored), min_ns, max_ns and
    share (total / model time), largest total first.  Empty without level G.  Compiling
    iterations are left out as in layer_ranking."""
    src = _src(source, include_compile)
    k = kernels(src)
    k = k[src.counted()[k["id"].to_numpy(dtype=np.int64)]] if len(k) else k
    cols = ["name", "count", "total_ns", "mean_ns", "min_ns", "max_ns", "share"]
    if not len(k):
        return src.tag(_empty(cols))
    g = k.groupby("name", sort=False).agg(count=("id", "size"), total_ns=("duration_ns", "sum"),
                                          min_ns=("duration_ns", "min"),
                                          max_ns=("duration_ns", "max"),
                                          first=("id", "min")).reset_index()
    g = g.sort_values(["total_ns", "first"], ascending=[False, True], kind="stable")
    g["mean_ns"] = g["total_ns"] // g["count"]
    mt = src.counted_time()
    g["share"] = g["total_ns"] / mt if mt else np.nan
    return src.tag(g[cols].reset_index(drop=True))


def _by(src, kinds, label):
    """GPU work aggregated over spans of `kinds` by name (inclusive of nested ones)."""
    import pandas as pd
    kern, kern_ns, copy_ns = _gpu_columns(src)
    ids = np.nonzero(np.isin(src.kind, kinds) & src.counted())[0]
    cols = [label, "type", "calls", "latency_ns", "kernels", "kernel_ns", "copy_ns", "gpu_ns",
            "cpu_ns", "gpu_share"]
    if not len(ids):
        return src.tag(_empty(cols))
    names = src.names
    df = pd.DataFrame({label: names[ids], "type": src.col("type", None)[ids],
                       "latency_ns": src.dur[ids], "first": ids})
    if src.has_gpu:
        df["kernels"] = src.inclusive_sum(kern, kinds)[ids]
        df["kernel_ns"] = src.inclusive_sum(kern_ns, kinds)[ids]
        df["copy_ns"] = src.inclusive_sum(copy_ns, kinds)[ids]
    g = df.groupby(label, sort=False).agg(
        type=("type", "first"), calls=("first", "size"), latency_ns=("latency_ns", "sum"),
        first=("first", "min"),
        **({"kernels": ("kernels", "sum"), "kernel_ns": ("kernel_ns", "sum"),
            "copy_ns": ("copy_ns", "sum")} if src.has_gpu else {})).reset_index()
    if src.has_gpu:
        g["gpu_ns"] = g["kernel_ns"] + g["copy_ns"]
        g["cpu_ns"] = g["latency_ns"] - g["gpu_ns"]
        g["gpu_share"] = np.where(g["latency_ns"] > 0, g["gpu_ns"] / g["latency_ns"].clip(1),
                                  np.nan)
    else:
        for c in ("kernels", "kernel_ns", "copy_ns", "gpu_ns", "cpu_ns", "gpu_share"):
            g[c] = np.nan
    g = g.sort_values("first", kind="stable")
    return src.tag(g[cols].reset_index(drop=True))


def kernels_by_layer(source, include_compile=False):
    """GPU work per layer (every module name, in order of first call): layer, type, calls,
    latency_ns (sum of the calls' forward latency), kernels (count), kernel_ns, copy_ns
    (memcpy + memset), gpu_ns = kernel_ns + copy_ns of the work launched inside the layer's
    forward (nested layers included), cpu_ns = latency_ns - gpu_ns (negative when kernels run
    asynchronously past the layer's CPU span), gpu_share = gpu_ns / latency_ns.  G columns are
    NaN without level G.  Compiling iterations are left out as in layer_ranking."""
    return _by(_src(source, include_compile), ("module",), "layer")


def kernels_by_op(source, include_compile=False):
    """As kernels_by_layer, per op name (aten::...): op, calls, latency_ns, kernels,
    kernel_ns, copy_ns, gpu_ns, cpu_ns, gpu_share; an op's GPU work includes that of the ops
    nested in it."""
    src = _src(source, include_compile)
    return src.tag(_by(src, ("op",), "op").drop(columns=["type"]))


def gpu_vs_cpu(source, include_compile=False):
    """GPU against CPU time per leaf layer, in order of first call: layer, type, calls,
    latency_ns, gpu_ns, cpu_ns, gpu_share, cpu_share (= cpu_ns / latency_ns); the last row,
    layer "(model)", is the model time against all GPU work in the iterations.  G columns are
    NaN without level G.  Compiling iterations are left out as in layer_ranking."""
    import pandas as pd
    src = _src(source, include_compile)
    by = _by(src, ("module",), "layer")
    leaf = set(_leaf_layers(src)["name"])
    by = by[by["layer"].isin(leaf)].reset_index(drop=True)
    cols = ["layer", "type", "calls", "latency_ns", "gpu_ns", "cpu_ns", "gpu_share",
            "cpu_share"]
    by["cpu_share"] = by["cpu_ns"] / by["latency_ns"].where(by["latency_ns"] > 0)
    its = src.iterations()[~src.left_out()]
    mt = src.counted_time()
    if src.has_gpu:
        kern, kern_ns, copy_ns = _gpu_columns(src)
        in_it = src.counted()
        gpu = int((kern_ns + copy_ns)[in_it].sum())
        total = {"gpu_ns": gpu, "cpu_ns": mt - gpu,
                 "gpu_share": gpu / mt if mt else np.nan,
                 "cpu_share": (mt - gpu) / mt if mt else np.nan}
    else:
        total = {"gpu_ns": np.nan, "cpu_ns": np.nan, "gpu_share": np.nan, "cpu_share": np.nan}
    row = pd.DataFrame([{"layer": "(model)", "type": None, "calls": len(its),
                         "latency_ns": mt, **total}])
    out = pd.concat([by[cols], row[cols]], ignore_index=True) if len(by) else row[cols]
    return src.tag(out)


# -- the roofline (docs/analyses.md, "Roofline") ------------------------------------------------
ROOFLINE_BY = ("kernel", "op", "layer", "model")
OP_KINDS = ("op", "backward")
OUTSIDE_LAYERS = "(outside layers)"
# the roofline columns every `by` other than "kernel" ends with
ROOF_COLUMNS = ["dtype", "flops", "bytes", "duration_ns", "arithmetic_intensity",
                "flops_per_s", "bytes_per_s", "roof_flops_per_s", "bound", "roof_fraction",
                "source", "ops", "uncounted"]
KERNEL_ROOF_COLUMNS = ["name", "count", "duration_ns", "flops", "dram_bytes",
                       "arithmetic_intensity", "gflops", "dram_gbps", "bound", "dtype",
                       "flops_per_s", "bytes_per_s", "roof_flops_per_s", "roof_fraction",
                       "source"]


class _Roof:
    """The roofs of one call: peak FLOP/s per dtype and the bandwidth, from a Peaks (peak()
    None for a dtype it lacks) or from the constant peak_gflops / peak_dram_gbps (any dtype,
    an unknown one too)."""

    def __init__(self, peaks=None, gflops=None, gbps=None):
        self.peaks = peaks
        self.const = float(gflops) * 1e9 if gflops is not None else None
        self.bw = float(gbps) * 1e9 if gbps is not None else peaks.bytes_per_s

    def peak(self, dtype):
        if self.const is not None:
            return self.const
        return self.peaks.flops(dtype) if dtype is not None else None


def _objects(values, index):
    """values as an object column (None stays None: pandas would make it NaN in a str
    column)."""
    import pandas as pd
    return pd.Series(list(values), index=index, dtype=object)


def _has_inputs(src):
    """Whether the source's op spans carry their inputs (xsp.profile(record_shapes=True)):
    what xsp.flops computes FLOPs and bytes from."""
    import pandas as pd
    if not src.has("input_dims"):
        return False
    v = src.column("input_dims")[np.isin(src.kind, OP_KINDS)]
    return bool(pd.notna(v).any())


def _op_costs(source, src):
    """xsp.analysis.flops.op_costs of the source, checked: a DataFrame with id, flops, bytes, dtype,
    counted, status (one row per op span with inputs)."""
    if not isinstance(source, Trace):
        raise TypeError("the roofline's FLOPs and bytes come from an xsp.Trace's op inputs "
                        "(xsp.analysis.flops.op_costs), not from a %s: pass the trace (for a "
                        "Measurement, its .trace)" % type(source).__name__)
    from xsp.analysis import flops     # here: the text summary's tables need no FLOPs
    oc = flops.op_costs(source)
    need = {"id", "flops", "bytes", "dtype", "counted", "status"}
    missing = need - set(oc.columns)
    if missing:
        raise ValueError("xsp.analysis.flops.op_costs gave no column(s) %s" % ", ".join(sorted(missing)))
    ids = oc["id"].to_numpy().astype(np.int64)
    if len(ids) and (ids.min() < 0 or ids.max() >= src.n):
        raise ValueError("xsp.analysis.flops.op_costs gave span ids outside the trace")
    return oc


def _span_costs(source, src, need_costs):
    """Per span (arrays indexed by span id): flops and bytes (NaN: none), dtype (None),
    status (None: no cost row), source ("analytical", "measured" or None), has (the spans
    that carry a cost: op_costs rows and the ops that launched measured kernels).

    Measured replaces analytical per tree of ops (an op with no op above it and everything
    below it): when every kernel launched in the tree carries both `flops` and `dram_bytes`
    attributes (hardware counters), the tree's analytical rows are dropped and each kernel's
    counts go to the op that launched it (the nearest op above it that is not "nested" in
    another op's formula), the tree's only cost rows then; otherwise the tree keeps its
    analytical values and its kernels' counters, if any, are not used (such trees are
    counted: `partial`, the last value returned)."""
    import pandas as pd
    n = src.n
    flops = np.full(n, np.nan)
    nbytes = np.full(n, np.nan)
    dtype = np.full(n, None, dtype=object)
    status = np.full(n, None, dtype=object)
    how = np.full(n, None, dtype=object)
    if need_costs:
        oc = _op_costs(source, src)
        ids = oc["id"].to_numpy().astype(np.int64)
        flops[ids] = pd.to_numeric(oc["flops"], errors="coerce").to_numpy(float)
        nbytes[ids] = pd.to_numeric(oc["bytes"], errors="coerce").to_numpy(float)
        dtype[ids] = [d if isinstance(d, str) and d else None for d in oc["dtype"]]
        status[ids] = [str(s) for s in oc["status"]]
        how[ids] = "analytical"
    is_k = src.kind == "kernel"
    kf = pd.to_numeric(pd.Series(src.col("flops", None)), errors="coerce").to_numpy(float)
    kb = pd.to_numeric(pd.Series(src.col("dram_bytes", None)), errors="coerce").to_numpy(float)
    meas = is_k & np.isfinite(kf) & np.isfinite(kb)
    partial = 0
    if meas.any():
        # each span's tree: its outermost op ancestor-or-self
        top = src.nearest(OP_KINDS, strict=False).copy()
        up = src.nearest(OP_KINDS, strict=True)
        while True:
            nxt = np.where(top >= 0, up[np.maximum(top, 0)], -1)
            move = nxt >= 0
            if not move.any():
                break
            top[move] = nxt[move]
        kt = top[is_k]
        n_k = np.bincount(kt[kt >= 0], minlength=n)
        mt = top[meas]
        n_m = np.bincount(mt[mt >= 0], minlength=n)
        whole = (n_k > 0) & (n_k == n_m)            # trees whose every kernel is measured
        partial = int(((n_m > 0) & ~whole).sum())
        in_whole = (top >= 0) & whole[np.maximum(top, 0)]
        not_nested = np.isin(src.kind, OP_KINDS) & (status.astype(str) != "nested")
        launcher = nearest_ancestor(src.parent, not_nested, include_self=False)
        # the tree's analytical rows give way to its kernels' counts, on their launchers
        sel = in_whole & np.isin(src.kind, OP_KINDS)
        flops[sel] = np.nan
        nbytes[sel] = np.nan
        how[sel] = None
        status[sel] = None
        k = np.nonzero(meas & in_whole & (launcher >= 0))[0]
        lk = launcher[k]
        flops[lk] = 0.0
        nbytes[lk] = 0.0
        np.add.at(flops, lk, kf[k])
        np.add.at(nbytes, lk, kb[k])
        how[lk] = "measured"
        status[lk] = "measured"
    return flops, nbytes, dtype, status, how, partial


def _in_scope(src):
    """The spans a roofline counts: those the tables count (_Source.counted: in the
    iterations, the compiling ones left out), and when the iterations are not steps (model
    calls, which the backward follows), the backward functions and what runs in them too."""
    m = src.counted()
    if not (src.kind[src.iterations()] == "step").any():
        m = m | (src.nearest(("backward",), strict=False) >= 0)
    return m


def _dtype_label(parts):
    """'float32', or for several dtypes 'bfloat16+float32' (most FLOPs first); None for
    none."""
    ds = sorted(((-f, d) for d, f in parts.items() if isinstance(d, str)))
    return "+".join(d for _, d in ds) or None


def _roof_columns(F, B, t_ns, parts, roof):
    """The derived roofline columns of rows with FLOPs F, bytes B, durations t_ns (float
    arrays, NaN: unknown) and parts (per row {dtype: FLOPs}): arithmetic_intensity = F / B,
    flops_per_s, bytes_per_s, roof_flops_per_s = min(peak, intensity x bandwidth) with the
    peak of a row of several dtypes their FLOP-weighted harmonic mean (the time their FLOPs
    take at each one's peak), bound ("memory" where intensity x bandwidth < peak, else
    "compute"), roof_fraction (achieved / roof: bytes_per_s / bandwidth when memory bound,
    flops_per_s / peak when compute bound)."""
    F, B, t = (np.asarray(x, dtype=float) for x in (F, B, t_ns))
    with np.errstate(divide="ignore", invalid="ignore"):
        ai = np.where(B > 0, F / B, np.nan)
        secs = np.where(t > 0, t * 1e-9, np.nan)
        fps = F / secs
        bps = B / secs
    rf = np.full(len(F), np.nan)
    frac = np.full(len(F), np.nan)
    bound = np.full(len(F), None, dtype=object)
    if roof is not None and roof.bw:
        bw = roof.bw
        for i in range(len(F)):
            if not np.isfinite(ai[i]):
                continue
            ws = {d: f for d, f in parts[i].items() if f > 0}
            if ws:
                peaks = [roof.peak(d) for d in ws]
                if any(p is None for p in peaks):
                    continue
                peak = sum(ws.values()) / sum(f / p for f, p in zip(ws.values(), peaks))
            else:
                peak = math.inf          # no FLOPs: on the memory slope at intensity 0
            mem = ai[i] * bw
            if mem < peak:
                rf[i], bound[i], frac[i] = mem, "memory", bps[i] / bw
            else:
                rf[i], bound[i], frac[i] = peak, "compute", fps[i] / peak
    return {"arithmetic_intensity": ai, "flops_per_s": fps, "bytes_per_s": bps,
            "roof_flops_per_s": rf, "bound": bound, "roof_fraction": frac}


def _resolve_roof(peaks, peak_gflops, peak_dram_gbps, device):
    """(_Roof or None, the peaks as a dict or None, note or None) for a roofline call."""
    legacy = (peak_gflops, peak_dram_gbps)
    if any(v is not None for v in legacy):
        if peaks is not None and peaks is not False:
            raise ValueError("give peaks= or peak_gflops= and peak_dram_gbps=, not both")
        for name, v in zip(("peak_gflops", "peak_dram_gbps"), legacy):
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                    or not 0 < float(v) < math.inf:
                raise ValueError("%s must be a positive number (with the other one), not %r"
                                 % (name, v))
        return (_Roof(gflops=peak_gflops, gbps=peak_dram_gbps),
                {"peak_gflops": float(peak_gflops), "peak_dram_gbps": float(peak_dram_gbps)},
                None)
    if peaks is False:
        return None, None, "no roofs: peaks=False"
    from xsp.analysis import peaks as P     # here: only the roofline needs the machine's roofs
    if isinstance(peaks, P.Peaks):
        p = peaks
    elif peaks is not None:
        p = P.load(peaks, device, "roofline's peaks argument")
    else:
        try:
            p = P.get(device)
        except P.PeaksError:
            raise                       # a bad XSP_PEAKS: the user must hear of it
        except ValueError as e:         # no such device here (a GPU trace on a CPU machine)
            return None, None, "no roofs: no peaks for %s on this machine (%s); pass peaks=" \
                % (device, e)
    return _Roof(peaks=p), p.to_dict(), None


def roofline(source, by="kernel", peaks=None, *, peak_gflops=None, peak_dram_gbps=None,
             include_compile=False):
    """The roofline table: per row its work (FLOPs, bytes), its time, and where that puts it
    under the machine's roofs (docs/analyses.md, "Roofline").

    by="op" (op name and dtype, longest first), "layer" (the layer that owns the ops: to_pandas'
    module column, a backward op going to the layer of its forward op; longest first, ops
    outside every layer last as "(outside layers)"), "model" (one row, "(model)": every op in
    the iterations) end with the columns dtype (the compute dtype of the FLOPs, "a+b" for
    several, most FLOPs first), flops (sum over the ops with a formula), bytes (sum of the
    bytes model), duration_ns, arithmetic_intensity = flops / bytes, flops_per_s, bytes_per_s,
    roof_flops_per_s = min(peak FLOP/s of the dtype, intensity x bandwidth), bound ("memory"
    or "compute"), roof_fraction (achieved / roof), source ("analytical", "measured" or
    "mixed"), ops (the op spans whose costs are in the row) and uncounted (those of them with
    no formula: their FLOPs are not in flops; NaN flops when no op of the row has one).
    "op" starts with name, calls; "layer" with layer, type, calls (forward calls),
    forward_ns, backward_ns (duration_ns = forward_ns + backward_ns); "model" with model,
    iterations.  Durations without level G: an op row's is the inclusive time of its spans;
    a layer's the time of the op spans it owns (nested spans owned by another layer not
    counted), forward and backward; the model's the iterations' time.  With level G: the
    GPU work (kernels, copies, memsets) launched by those spans.  Analytical costs come from
    xsp.analysis.flops.op_costs (op inputs: xsp.profile(record_shapes=True)), its nested and composite
    ops left out (their work is in the costed op); kernels with `flops` and `dram_bytes`
    attributes (hardware counters) replace them (see _span_costs).

    by="kernel" (the default, as before): per kernel name, largest total first: name, count,
    duration_ns (total), flops, dram_bytes (sums of the kernel attributes; NaN unless every
    kernel of the name has them), arithmetic_intensity, gflops = flops / duration_ns,
    dram_gbps, bound, then dtype (of the ops that launched them, when inputs were recorded),
    flops_per_s, bytes_per_s, roof_flops_per_s, roof_fraction, source ("measured" or None).

    peaks: None for this machine's (xsp.peaks.get() for "cuda" when the source has kernels,
    else "cpu": cached, XSP_PEAKS, or measured once), a Peaks, an override (dict, JSON text,
    path: xsp.peaks.load), or False for no roofs; or the constants peak_gflops and
    peak_dram_gbps (GFLOP/s and GB/s, for every dtype).  Roof columns are NaN (bound None)
    where a row's FLOPs or bytes, or its dtype's peak, are unknown; the returned frame's
    attrs say which peaks were used ("peaks") or why none ("peaks_note"), and how many trees
    of ops had some but not all kernels measured ("partial").  by="op", "layer" and "model"
    leave out the iterations in which torch.compile compiled, as layer_ranking does
    (include_compile=True counts them; attrs compiling_left_out); by="kernel" takes every
    kernel.

    Raises ValueError for an unknown `by`, bad peak constants, both peaks and constants, and
    for by="op"/"layer"/"model" on a source without op inputs or measured kernels (record with
    xsp.profile(record_shapes=True)); TypeError for op inputs in a source that is not an
    xsp.Trace (xsp.flops reads a Trace); xsp.peaks.PeaksError for a bad override."""
    if by not in ROOFLINE_BY:
        raise ValueError("by must be one of %s, not %r (peak_gflops and peak_dram_gbps are "
                         "keyword arguments)" % (", ".join(ROOFLINE_BY), by))
    src = _src(source, include_compile)
    device = "cuda" if (src.kind == "kernel").any() else "cpu"
    if by == "kernel":
        return _roofline_kernels(source, src, peaks, peak_gflops, peak_dram_gbps, device)
    c = _RooflineCosts(source, src, by)
    out = _roofline_rows(c.frame(by), c.keys)
    lead = _roofline_lead(out, by, c)
    roof, pinfo, note = None, None, None
    if any(any(d is not None for d in p) or (f == 0 and b > 0)
           for p, f, b in zip(out["parts"], out["flops"], out["bytes"])):
        roof, pinfo, note = _resolve_roof(peaks, peak_gflops, peak_dram_gbps, device)
    res = _roofline_result(out, lead, by, roof)
    res.attrs.update({"peaks": pinfo, "peaks_note": note, "partial": c.partial,
                      "durations": "GPU work" if c.gpu else "CPU spans"})
    return src.tag(res)


class _RooflineCosts:
    """The per-span costs a roofline by op, layer or model groups: each costed op span's FLOPs,
    bytes, dtype and source (how), the spans in scope (the counted iterations), the GPU work
    each span launched and whether durations are GPU work (gpu).  Raises ValueError for a
    source without op inputs or measured kernels."""

    def __init__(self, source, src, by):
        import pandas as pd
        has_in = _has_inputs(src)
        k = src.kind == "kernel"
        if not has_in and not (k & pd.notna(src.col("flops", None)).astype(bool)
                               & pd.notna(src.col("dram_bytes", None)).astype(bool)).any():
            raise ValueError("roofline(by=%r) needs the ops' inputs (FLOPs and bytes come "
                             "from their shapes): record with xsp.profile(record_shapes=True), "
                             "or kernels with flops and dram_bytes attributes" % by)
        self.src = src
        (self.flops, self.nbytes, self.dtype, status, self.how,
         self.partial) = _span_costs(source, src, has_in)
        self.scope = _in_scope(src)
        # nested and composite ops cost 0 here: their work is in the op that is costed
        has = (self.how != None) & self.scope                   # noqa: E711 (elementwise)
        has &= ~np.isin(status.astype(str), ("nested", "composite"))
        self.ids = np.nonzero(has)[0]
        self.gpu = src.has_gpu and k.any()
        self.work = np.where(np.isin(src.kind, GPU_WORK), src.dur, 0).astype(np.int64)
        self.is_op = np.isin(src.kind, OP_KINDS)

    def frame(self, by):
        """One row per costed span: its group key(s) (self.keys), first (its id), flops,
        bytes, dtype, how, nan (no FLOPs); by op also its duration (dur)."""
        import pandas as pd
        src, ids = self.src, self.ids
        if by == "op":
            dur = src.inclusive_sum(self.work, OP_KINDS)[ids] if self.gpu else src.dur[ids]
            df = pd.DataFrame({"name": src.names[ids],
                               "dtype_key": [d or "" for d in self.dtype[ids]], "first": ids,
                               "dur": dur})
            self.keys = ["name", "dtype_key"]
        else:
            if by == "layer":
                key = np.array([o if isinstance(o, str) else OUTSIDE_LAYERS
                                for o in src.col("module", None)], dtype=object)
            else:
                key = np.full(src.n, "(model)", dtype=object)
            df = pd.DataFrame({"key": key[ids], "first": ids})
            self.keys = "key"
        df["flops"] = self.flops[ids]
        df["bytes"] = self.nbytes[ids]
        df["dtype"] = _objects(self.dtype[ids], df.index)
        df["how"] = _objects(self.how[ids], df.index)
        df["nan"] = np.isnan(self.flops[ids])
        return df


def _roofline_rows(df, keys):
    """One row per group of costed spans: key, first span, flops (NaN when none has a
    formula), bytes, parts (FLOPs per dtype), dtype label, source, ops, uncounted, calls,
    dur."""
    import pandas as pd
    rows = []
    for name, part in df.groupby(keys, sort=False, dropna=False):
        fl = part["flops"].to_numpy()
        pdt = {}
        for d, f in zip(part["dtype"], fl):
            if np.isfinite(f):
                d = d if isinstance(d, str) else None
                pdt[d] = pdt.get(d, 0.0) + f
        srcs = set(part["how"])
        rows.append({
            "key": name, "first": int(part["first"].min()),
            "flops": float(np.nansum(fl)) if np.isfinite(fl).any() else np.nan,
            "bytes": float(np.nansum(part["bytes"])) if part["bytes"].notna().any()
            else np.nan,
            "parts": pdt, "dtype": _dtype_label(pdt) if pdt else
            _dtype_label({d: 0.0 for d in part["dtype"]}),
            "source": srcs.pop() if len(srcs) == 1 else "mixed",
            "ops": len(part), "uncounted": int(part["nan"].sum()),
            "calls": len(part), "dur": int(part["dur"].sum()) if "dur" in part else 0})
    return pd.DataFrame(rows, columns=["key", "first", "flops", "bytes", "parts", "dtype",
                                       "source", "ops", "uncounted", "calls", "dur"])


def _roofline_lead(out, by, c):
    """The leading columns of the table by op (name, calls), layer (layer, type, calls,
    forward_ns, backward_ns) or model (model, iterations); sets out's duration_ns."""
    src = c.src
    if by == "op":
        out["name"] = [kk[0] for kk in out["key"]]
        out["duration_ns"] = out["dur"].astype(np.int64)
        return out[["name", "calls"]]
    if by == "layer":
        fwd, bwd, calls, typ = _layer_times(src, c.scope, c.gpu, c.work, c.is_op)
        names = out["key"].tolist()
        out["layer"] = names
        out["type"] = _objects([typ.get(n) for n in names], out.index)
        out["calls"] = _objects([calls.get(n) for n in names], out.index)
        out["forward_ns"] = np.array([fwd.get(n, 0) for n in names], dtype=np.int64)
        out["backward_ns"] = np.array([bwd.get(n, 0) for n in names], dtype=np.int64)
        out["duration_ns"] = out["forward_ns"] + out["backward_ns"]
        return out[["layer", "type", "calls", "forward_ns", "backward_ns"]]
    t = int(c.work[c.scope].sum()) if c.gpu else src.counted_time()
    out["model"] = "(model)"
    out["iterations"] = int((~src.left_out()).sum())
    out["duration_ns"] = np.full(len(out), t, dtype=np.int64)
    return out[["model", "iterations"]]


def _roofline_result(out, lead, by, roof):
    """The table: lead, then the work, time and roof columns; longest first (by layer the
    ops outside every layer last)."""
    cols = _roof_columns(out["flops"], out["bytes"], out["duration_ns"],
                         out["parts"].tolist(), roof)
    res = lead.copy()
    res["dtype"] = _objects(out["dtype"], res.index)
    res["flops"] = out["flops"].astype(float)
    res["bytes"] = out["bytes"].astype(float)
    res["duration_ns"] = out["duration_ns"].astype(np.int64)
    for c, v in cols.items():
        res[c] = _objects(v, res.index) if c == "bound" else v
    res["source"] = _objects(out["source"], res.index)
    res["ops"] = out["ops"].astype(np.int64)
    res["uncounted"] = out["uncounted"].astype(np.int64)
    res["_first"] = out["first"]
    res["_outside"] = (res[res.columns[0]] == OUTSIDE_LAYERS) if by == "layer" else False
    res = res.sort_values(["_outside", "duration_ns", "_first"], ascending=[True, False, True],
                          kind="stable").drop(columns=["_first", "_outside"])
    res = res.reset_index(drop=True)
    if not len(res):
        res = _empty(list(lead.columns) + ROOF_COLUMNS)
    return res


def _layer_times(src, scope, gpu, work, is_op):
    """Per layer name (OUTSIDE_LAYERS for no layer): forward and backward ns, forward calls,
    type.  Without G, the time of the op spans each layer owns: an op span whose nearest op
    ancestor has another owner (or that has none) adds its duration to its owner's and takes
    it from that ancestor's owner's, so nested work is counted once, for its own layer.  With
    G, the GPU work each layer owns.  Backward: under the backward phase (backward functions
    and the engine's evaluate_function ops)."""
    import pandas as pd
    owner = np.array([o if isinstance(o, str) else OUTSIDE_LAYERS
                      for o in src.col("module", None)], dtype=object)
    bwp = src.walk(_phase_masks(src)["backward"], include_self=True) >= 0
    fwd, bwd = {}, {}

    def add(d, keys, vals):         # sums wrap as int64 ones do (times past 2**63 in a file)
        for kk, v in zip(keys.tolist(), vals.tolist()):
            d[kk] = (d.get(kk, 0) + int(v) + (1 << 63)) % (1 << 64) - (1 << 63)
    if gpu:
        sel = np.isin(src.kind, GPU_WORK) & scope
        for d, m in ((fwd, sel & ~bwp), (bwd, sel & bwp)):
            add(d, owner[m], work[m])
    else:
        up = src.nearest(OP_KINDS, strict=True)
        sel = is_op & scope
        has_up = up >= 0
        diff = np.ones(src.n, dtype=bool)
        diff[has_up] = owner[has_up] != owner[up[has_up]]
        outer = np.nonzero(sel & diff)[0]
        for d, m in ((fwd, ~bwp[outer]), (bwd, bwp[outer])):
            o = outer[m]
            add(d, owner[o], src.dur[o])
            inner = o[up[o] >= 0]
            add(d, owner[up[inner]], -src.dur[inner])
    lid = np.nonzero(np.isin(src.kind, ("module", "model")) & scope)[0]
    names = src.names[lid]
    calls = pd.Series(names).value_counts().to_dict() if len(lid) else {}
    typ = {}
    for nm, t in zip(names.tolist(), src.col("type", None)[lid].tolist()):
        typ.setdefault(nm, t if isinstance(t, str) else None)
    return fwd, bwd, calls, typ


def _roofline_kernels(source, src, peaks, peak_gflops, peak_dram_gbps, device):
    """roofline(by="kernel"): see roofline."""
    import pandas as pd
    k = kernels(src)            # every kernel, in the iterations or not, as before
    if not len(k):
        res = _empty(KERNEL_ROOF_COLUMNS)
        res.attrs.update({"peaks": None, "peaks_note": None, "partial": 0,
                          "durations": "GPU work"})
        return res
    ids = k["id"].to_numpy()
    k["flops"] = pd.to_numeric(pd.Series(src.col("flops", None)[ids]), errors="coerce")
    k["dram_bytes"] = pd.to_numeric(pd.Series(src.col("dram_bytes", None)[ids]),
                                    errors="coerce")
    dt = np.full(src.n, None, dtype=object)
    if _has_inputs(src):
        oc = _op_costs(source, src)
        dt[oc["id"].to_numpy().astype(np.int64)] = [
            d if isinstance(d, str) and d else None for d in oc["dtype"]]
    launcher = src.nearest(OP_KINDS)[ids]
    k["dtype"] = np.where(launcher >= 0, dt[np.maximum(launcher, 0)], None)
    g = k.groupby("name", sort=False).agg(
        count=("id", "size"), duration_ns=("duration_ns", "sum"),
        flops=("flops", lambda s: s.sum(min_count=len(s))),
        dram_bytes=("dram_bytes", lambda s: s.sum(min_count=len(s))),
        first=("id", "min")).reset_index()
    parts = []
    for name in g["name"]:
        sub = k[k["name"] == name]
        pdt = {}
        for d, f in zip(sub["dtype"], sub["flops"]):
            if np.isfinite(f):
                pdt[d] = pdt.get(d, 0.0) + float(f)
        parts.append(pdt)
    g["parts"] = parts
    g["dtype"] = [_dtype_label(p) for p in parts]
    g = g.sort_values(["duration_ns", "first"], ascending=[False, True], kind="stable")
    g = g.reset_index(drop=True)
    dur = g["duration_ns"].where(g["duration_ns"] > 0).astype(float)
    g["arithmetic_intensity"] = g["flops"] / g["dram_bytes"].where(g["dram_bytes"] > 0)
    g["gflops"] = g["flops"] / dur
    g["dram_gbps"] = g["dram_bytes"] / dur
    roof, pinfo, note = None, None, None
    legacy = peak_gflops is not None or peak_dram_gbps is not None
    if legacy or any(p and None not in p for p in g["parts"]):
        roof, pinfo, note = _resolve_roof(peaks, peak_gflops, peak_dram_gbps, device)
    cols = _roof_columns(g["flops"], g["dram_bytes"], g["duration_ns"], g["parts"].tolist(),
                         roof)
    for c in ("flops_per_s", "bytes_per_s", "roof_flops_per_s", "roof_fraction"):
        g[c] = cols[c]
    g["bound"] = _objects(cols["bound"], g.index)
    g["dtype"] = _objects(g["dtype"], g.index)
    g["source"] = _objects(np.where(g["flops"].notna() & g["dram_bytes"].notna(), "measured",
                                    None), g.index)
    res = g[KERNEL_ROOF_COLUMNS].reset_index(drop=True)
    res.attrs.update({"peaks": pinfo, "peaks_note": note, "partial": 0,
                      "durations": "GPU work"})
    return res


__all__ = ["model_latency", "setup", "phases", "ops", "layers", "layer_ranking", "layer_types", "kernels",
           "kernels_by_name", "kernels_by_layer", "kernels_by_op", "gpu_vs_cpu", "roofline"]
