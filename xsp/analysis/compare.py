"""Comparing two runs: what changed between a `before` and an `after` trace, and whether the
change is larger than the runs' own noise (docs/analyses.md, "Comparing two runs").

    c = xsp.report.compare(before, after)   # or: from xsp.compare import compare
    print(xsp.report.text(c))
    c.layers, c.added, c.removed, c.retyped, c.summary, c.ops, c.kernels   # DataFrames
    if c.worst(0.05): ...                        # the step got slower beyond noise by > 5 %

Sources are what xsp.analysis takes (a Trace, a Measurement, a span table).  Every figure is a
mean over the iterations of per-iteration samples (an iteration where a layer, op or kernel
does not appear counts as 0), so runs of different lengths compare.

Why it is built this way:
  - Layers are matched by qualified name AND type.  nn.Sequential numbers its children by
    position, so inserting a layer renames the ones after it: `features.1` can be a ReLU
    before and a BatchNorm2d after.  Such a pair is listed as *retyped* and never compared;
    a (name, type) on one side only is *added* or *removed*.  Matching by position or by name
    alone put a ReLU against a BatchNorm2d and printed +707.8 % with no warning.
  - A change is called only when it exceeds the noise of both runs, a Welch-style threshold:
        noise_ns = k * sqrt(sb^2 / nb + sa^2 / na)
    with sb, sa the standard deviations (ddof=1) of the per-iteration samples of before and
    after and nb, na their iteration counts; verdict "slower" when delta_ns > noise_ns,
    "faster" when delta_ns < -noise_ns, else "within noise".  With fewer than 2 iterations on
    a side the spread is unknown: the verdict is "no spread (1 iteration)" and the change is
    never called.  k = 2 is roughly a 95 % two-sided test for normal noise; it is a threshold,
    not a p-value: iterations of one run are not independent (caches, clocks, the allocator).
  - A layer's backward time (the autograd backward functions that differentiate its forward
    ops, attributed through to_pandas' module column, as layer_ranking's backward_ns) is its
    own row (pass "backward") beside the forward row (pass "forward"): each has its own noise
    and verdict, and a regression in one is not hidden by the other.
A Comparison is built whole by compare() and then only read.
"""
import math
import numbers

import numpy as np
import pandas as pd

from xsp.analysis import flops, memory
from xsp.analysis import tables as A
from xsp.core.fmt import fmt_count, fmt_ns, fmt_signed
from xsp.core.util import deprecated, printable
from xsp.values.trace import Trace

FIGURE_COLUMNS = ["before_ns", "after_ns", "before_std_ns", "after_std_ns", "delta_ns",
                  "delta_share", "noise_ns", "verdict"]
CALLED = ("slower", "faster")
FEW_ITERATIONS = 5          # below this on a side, the text suggests recording more steps


# -- per-iteration samples ------------------------------------------------------------------
def _samples(frame, keys, n):
    """{key tuple: float array of length n} from a frame with the key columns, `iteration`
    (0..n-1) and `ns`: per key and iteration the sum of ns (0 where the key is absent), keys in
    order of first appearance."""
    out = {}
    if not len(frame) or n == 0:
        return out
    g = frame.groupby(keys + ["iteration"], sort=False)["ns"].sum()
    for idx, v in g.items():
        key, it = tuple(idx[:-1]), int(idx[-1])
        arr = out.get(key)
        if arr is None:
            arr = out[key] = np.zeros(n, dtype=np.float64)
        arr[it] += float(v)
    return out


def _figure(b, a, k):
    """The comparison columns of one figure from its per-iteration samples b and a."""
    nb, na = len(b), len(a)
    mb = float(b.mean()) if nb else math.nan
    ma = float(a.mean()) if na else math.nan
    sb = float(b.std(ddof=1)) if nb >= 2 else math.nan
    sa = float(a.std(ddof=1)) if na >= 2 else math.nan
    delta = ma - mb
    share = delta / mb if mb > 0 else math.nan
    m = min(nb, na)
    if m < 2:
        noise = math.nan
        verdict = "no spread (%d iteration%s)" % (m, "" if m == 1 else "s")
    else:
        noise = k * math.sqrt(sb * sb / nb + sa * sa / na)
        verdict = ("slower" if delta > 0 else "faster") if abs(delta) > noise else \
            "within noise"
    return {"before_ns": mb, "after_ns": ma, "before_std_ns": sb, "after_std_ns": sa,
            "delta_ns": delta, "delta_share": share, "noise_ns": noise, "verdict": verdict}


def _frame(rows, key_columns):
    cols = key_columns + FIGURE_COLUMNS
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=object if c in key_columns or c == "verdict"
                                          else np.float64) for c in cols})
    return pd.DataFrame(rows, columns=cols)


def _ordered(df, direction=0.0):
    """Called changes first, ranked by what explains the step's change: with direction the
    sign of the step's delta (+1 slower, -1 faster), by delta_ns * direction descending (the
    rows that moved the step the most, then those that moved against it); with direction 0,
    by |delta_ns|.  Then the rest by |delta_ns| descending; ties keep their order."""
    if not len(df):
        return df
    called = df["verdict"].isin(CALLED).to_numpy()
    delta = np.nan_to_num(df["delta_ns"].to_numpy(np.float64), nan=0.0)
    size = np.abs(delta)
    if direction:
        size = np.where(called, delta * direction, size)
    order = np.lexsort((np.arange(len(df)), -size, ~called))
    return df.iloc[order].reset_index(drop=True)


def _by_name(nb, na, k, frames, keys, direction=0.0):
    """One row per key found on either side (before's order of first appearance, then
    after's), the figures from frames = (before frame, after frame)."""
    b = _samples(frames[0], keys, nb)
    a = _samples(frames[1], keys, na)
    rows = []
    for key in list(b) + [x for x in a if x not in b]:
        rows.append(dict(zip(keys, key), **_figure(b.get(key, np.zeros(nb)),
                                                   a.get(key, np.zeros(na)), k)))
    return _ordered(_frame(rows, keys), direction)


# -- one side -------------------------------------------------------------------------------
class _Side:
    """What compare() reads from one source: iteration count and per-iteration samples."""

    def __init__(self, source):
        self.src = src = A._src(source)
        lat = A.model_latency(src)
        self.n = len(lat)
        self.kinds = set(lat["kind"])
        self.latency = lat["latency_ns"].to_numpy(np.float64)
        self.phases = A.phases(src)
        self.has_gpu = src.has_gpu
        it = src.iteration_of()
        # leaf layer calls in the iterations: forward time per (name, type) and iteration
        lay = A.layers(src)
        lay = lay[lay["leaf"] & (lay["iteration"] >= 0)]
        types = lay["type"].where(lay["type"].notna(), "?").astype(object)
        self.forward = pd.DataFrame({"name": lay["name"].to_numpy(), "type": types.to_numpy(),
                                     "iteration": lay["iteration"].to_numpy(),
                                     "ns": lay["latency_ns"].to_numpy()})
        # backward functions in the iterations, by the module of the forward op (leaf layer
        # names only, as layer_ranking's backward_ns), typed by that layer's type
        type_of = dict(zip(self.forward["name"][::-1], self.forward["type"][::-1]))
        sel = (src.kind == "backward") & (it >= 0)
        mod = src.col("module", None)[sel]
        keep = np.array([m in type_of for m in mod], dtype=bool)
        mod = mod[keep]
        self.backward = pd.DataFrame({"name": mod, "type": [type_of[m] for m in mod],
                                      "iteration": it[sel][keep], "ns": src.dur[sel][keep]})
        sel = (src.kind == "op") & (it >= 0)
        self.ops = pd.DataFrame({"name": src.df["name"].to_numpy()[sel], "iteration": it[sel],
                                 "ns": src.col("self_ns", 0)[sel].astype(np.int64)})
        sel = (src.kind == "kernel") & (it >= 0)
        self.kernels = pd.DataFrame({"name": src.df["name"].to_numpy()[sel],
                                     "iteration": it[sel], "ns": src.dur[sel]})
        self.exact, self.lacks = _exact_figures(source, src, it)


# -- exact figures: what the runs did, not how long it took -------------------------------------
EXACT_FIGURES = ("op calls", "input shapes", "FLOPs", "bytes moved", "kernel launches",
                 "copies", "memsets", "syncs", "allocations", "bytes allocated")
EXACT_COLUMNS = ["figure", "name", "inputs", "before", "after", "delta"]
_GPU_FIGURES = {"kernel": "kernel launches", "memcpy": "copies", "memset": "memsets",
                "sync": "syncs"}


def _rows(names, iterations, values, inputs=None):
    return pd.DataFrame({"name": names, "inputs": "" if inputs is None else inputs,
                         "iteration": iterations, "ns": values})


def _exact_figures(source, src, it):
    """({figure: frame of name, inputs, iteration, ns (the value)}, {figure: why it is not
    there}) for one side: the EXACT_FIGURES that its recording has, in its iterations.  Op
    calls count a redispatch with the op it redispatches (as torch.profiler and xsp.perf)."""
    out, lacks = {}, {}
    names = src.df["name"].to_numpy()
    is_op = src.kind == "op"
    sel = is_op & ~A.redispatches(is_op, names, src.parent) & (it >= 0)
    if is_op.any():
        out["op calls"] = _rows(names[sel], it[sel], 1)
    else:
        lacks["op calls"] = "level L"
    dims = src.col("input_dims", None)
    has_dims = np.array([isinstance(d, str) for d in dims], dtype=bool)
    if (has_dims & is_op).any():
        keep = sel & has_dims
        out["input shapes"] = _rows(names[keep], it[keep], 1, dims[keep].astype(object))
        if isinstance(source, Trace):
            try:
                c = flops.op_costs(source)
            except (ImportError, ValueError) as exc:
                lacks["FLOPs"] = lacks["bytes moved"] = str(exc).split("\n")[0]
            else:
                ids = c["id"].to_numpy(np.int64)
                ok = it[ids] >= 0
                for fig, col in (("FLOPs", "flops"), ("bytes moved", "bytes")):
                    v = c[col].to_numpy(np.float64)
                    m = ok & ~np.isnan(v) & (v != 0)
                    out[fig] = _rows(c["name"].to_numpy()[m], it[ids[m]], v[m])
        else:
            lacks["FLOPs"] = lacks["bytes moved"] = "a trace (not a span table)"
    else:
        lacks["input shapes"] = lacks["FLOPs"] = lacks["bytes moved"] = "record_shapes=True"
    if src.has_gpu:
        for kind, fig in _GPU_FIGURES.items():
            m = (src.kind == kind) & (it >= 0)
            out[fig] = _rows(names[m], it[m], 1)
    else:
        for fig in _GPU_FIGURES.values():
            lacks[fig] = "level G"
    if memory.has_memory(src.df):
        ms = memory.spans(src.df)
        mit = it[ms["id"].to_numpy(np.int64)]
        m = mit >= 0
        dev = ms["device"].to_numpy()[m]
        out["allocations"] = _rows(dev, mit[m], ms["allocs"].to_numpy(np.float64)[m])
        out["bytes allocated"] = _rows(dev, mit[m], ms["alloc_bytes"].to_numpy(np.float64)[m])
    else:
        lacks["allocations"] = lacks["bytes allocated"] = "profile_memory=True"
    return out, lacks


def _exact_changes(b, a):
    """(changes DataFrame of EXACT_COLUMNS, {figure: why not compared}).  A figure is
    compared when both runs have it; a row is a change when the per-iteration means differ
    exactly (total_b * na != total_a * nb: integers, no noise).  Rows in EXACT_FIGURES order,
    then before's order of first appearance, then after's; FLOPs and bytes moved with a
    "(total)" row first."""
    rows, skipped = [], {}
    for fig in EXACT_FIGURES:
        if fig not in b.exact or fig not in a.exact:
            why = [(side.lacks[fig], label) for side, label in ((b, "before"), (a, "after"))
                   if fig in side.lacks]
            if len(why) == 2 and why[0][0] == why[1][0]:
                why = [(why[0][0], "either run")]
            skipped[fig] = "; ".join("%s not in %s" % w for w in why)
            continue
        if not b.n or not a.n:
            skipped[fig] = "no iteration"
            continue
        fb, fa = b.exact[fig], a.exact[fig]

        def totals(f):
            if not len(f):
                return {}
            return {k: float(v) for k, v in f.groupby(["name", "inputs"], sort=False)["ns"]
                    .sum().items()}
        tb, ta = totals(fb), totals(fa)
        keys = list(tb) + [x for x in ta if x not in tb]
        if fig in ("FLOPs", "bytes moved"):
            tb[("(total)", "")] = float(sum(tb.values()))
            ta[("(total)", "")] = float(sum(ta.values()))
            keys.insert(0, ("(total)", ""))
        for key in keys:
            vb, va = tb.get(key, 0.0), ta.get(key, 0.0)
            if vb * a.n != va * b.n:
                rows.append({"figure": fig, "name": key[0], "inputs": key[1],
                             "before": vb / b.n, "after": va / a.n,
                             "delta": va / a.n - vb / b.n})
    if not rows:
        df = pd.DataFrame({c: pd.Series(dtype=object if c in ("figure", "name", "inputs")
                                        else np.float64) for c in EXACT_COLUMNS})
    else:
        df = pd.DataFrame(rows, columns=EXACT_COLUMNS)
    return df, skipped


def _latency_label(b, a):
    kinds = b.kinds | a.kinds
    if kinds == {"step"}:
        return "step"
    if kinds == {"model"}:
        return "model"
    return "iteration"


def _layer_tables(b, a, k, direction=0.0):
    """(layers, added, removed, retyped) DataFrames; see Comparison."""
    fb = _samples(b.forward, ["name", "type"], b.n)
    fa = _samples(a.forward, ["name", "type"], a.n)
    bwb = _samples(b.backward, ["name", "type"], b.n)
    bwa = _samples(a.backward, ["name", "type"], a.n)
    zb, za = np.zeros(b.n), np.zeros(a.n)

    def mean(x):
        return float(x.mean()) if len(x) else math.nan

    rows, added, removed, retyped = [], [], [], []
    for key in [x for x in fb if x in fa]:
        rows.append(dict(name=key[0], type=key[1], **{"pass": "forward"},
                         **_figure(fb[key], fa[key], k)))
        if key in bwb or key in bwa:
            rows.append(dict(name=key[0], type=key[1], **{"pass": "backward"},
                             **_figure(bwb.get(key, zb), bwa.get(key, za), k)))
    # per name, the types found on one side only: paired in order of first appearance as
    # retyped (same name, another type: not compared), the rest added or removed
    only_b, only_a = {}, {}
    for key in fb:
        if key not in fa:
            only_b.setdefault(key[0], []).append(key[1])
    for key in fa:
        if key not in fb:
            only_a.setdefault(key[0], []).append(key[1])
    for name, tb in only_b.items():
        ta = only_a.get(name, [])
        for t_b, t_a in zip(tb, ta):
            retyped.append({"name": name, "before_type": t_b, "after_type": t_a,
                            "before_ns": mean(fb[(name, t_b)]), "after_ns": mean(fa[(name, t_a)])})
        for t in tb[len(ta):]:
            removed.append({"name": name, "type": t, "before_ns": mean(fb[(name, t)]),
                            "before_backward_ns": mean(bwb.get((name, t), zb))})
    for name, ta in only_a.items():
        tb = only_b.get(name, [])
        for t in ta[len(tb):]:
            added.append({"name": name, "type": t, "after_ns": mean(fa[(name, t)]),
                          "after_backward_ns": mean(bwa.get((name, t), za))})

    def table(rows, cols):
        if not rows:
            return pd.DataFrame({c: pd.Series(dtype=np.float64 if c.endswith("_ns") else object)
                                 for c in cols})
        return pd.DataFrame(rows, columns=cols)

    return (_ordered(_frame(rows, ["name", "type", "pass"]), direction),
            table(added, ["name", "type", "after_ns", "after_backward_ns"]),
            table(removed, ["name", "type", "before_ns", "before_backward_ns"]),
            table(retyped, ["name", "before_type", "after_type", "before_ns", "after_ns"]))


def compare(before, after, *, k=2.0):
    """Compares two runs (docs/analyses.md, "Comparing two runs"); returns a Comparison.
    before, after: what xsp.analysis takes (Trace, Measurement, span DataFrame).  k: the noise
    multiplier (noise_ns = k * sqrt(sb^2/nb + sa^2/na)), a positive number."""
    if isinstance(k, bool) or not isinstance(k, numbers.Real) or not 0 < k < math.inf:
        raise ValueError("k must be a positive finite number, not %r" % (k,))
    b, a = _Side(before), _Side(after)
    label = _latency_label(b, a)
    summary = [dict(figure=label, **_figure(b.latency, a.latency, k))]
    for ph in A.PHASES:
        col = ph + "_ns"
        summary.append(dict(figure=ph, **_figure(b.phases[col].to_numpy(np.float64),
                                                 a.phases[col].to_numpy(np.float64), k)))
    # the step's direction, when its change is called: rows are ranked by how much they
    # explain it
    direction = {"slower": 1.0, "faster": -1.0}.get(summary[0]["verdict"], 0.0)
    layers, added, removed, retyped = _layer_tables(b, a, k, direction)
    ops = _by_name(b.n, a.n, k, (b.ops, a.ops), ["name"], direction)
    if b.has_gpu and a.has_gpu:
        kernels = _by_name(b.n, a.n, k, (b.kernels, a.kernels), ["name"], direction)
    else:
        kernels = _frame([], ["name"])
    changes, not_compared = _exact_changes(b, a)
    return Comparison(summary=_frame(summary, ["figure"]), layers=layers, added=added,
                      removed=removed, retyped=retyped, ops=ops, kernels=kernels,
                      iterations=(b.n, a.n), has_gpu=(b.has_gpu, a.has_gpu), k=float(k),
                      latency=label, changes=changes, not_compared=not_compared)


# -- the result -----------------------------------------------------------------------------
def fmt_change(delta, share):
    """A signed change with its share, as xsp.report.fmt_delta writes it: '+1.234 ms
    (+3.4%)', '-193.900 us (-1.9%)'; without the share where it is NaN (before is 0)."""
    return fmt_signed(delta, share)


def fmt_exact(v, signed=False):
    """An exact per-iteration figure: an integer with thousands separators (1,048,576), two
    decimals where the mean over the iterations is not whole; signed: with its sign."""
    text = fmt_count(v, exact=True)
    return ("+" + text) if signed and v > 0 else text


def _cells(row):
    return [fmt_ns(row["before_ns"]), fmt_ns(row["after_ns"]),
            fmt_change(row["delta_ns"], row["delta_share"]), fmt_ns(row["noise_ns"]),
            row["verdict"]]


def _table(header, rows, left):
    """Lines of a plain-text table, two spaces in; the first `left` columns left-aligned."""
    cells = [header] + [[printable(str(c)) for c in r] for r in rows]
    width = [max(len(r[i]) for r in cells) for i in range(len(header))]
    out = []
    for r in cells:
        parts = [c.ljust(w) if i < left else c.rjust(w)
                 for i, (c, w) in enumerate(zip(r, width))]
        out.append("  " + "  ".join(parts).rstrip())
    return out


FIGURE_HEADER = ["before", "after", "change", "noise", "verdict"]


class Comparison:
    """What changed between two runs.  Every table has the figure columns before_ns, after_ns
    (means per iteration), before_std_ns, after_std_ns (ddof=1; NaN below 2 iterations),
    delta_ns = after - before, delta_share = delta / before (NaN where before is 0), noise_ns
    = k * sqrt(sb^2/nb + sa^2/na) and verdict ("slower", "faster", "within noise" or "no
    spread (1 iteration)").

    summary: one row per figure: the iteration latency (figure "step", or "model" /
        "iteration" when the iterations are not steps), then the phases forward,
        toplevel_layers, backward, optimizer, other (xsp.analysis.phases), in that order.
    layers: leaf layers matched by (name, type): name, type, pass ("forward": the layer's
        calls; "backward": the backward functions of its forward ops), then the figures.
    added / removed: (name, type) found only in after / before and not retyped: name, type,
        after_ns / before_ns (forward), after_backward_ns / before_backward_ns.
    retyped: the same name with another type (never compared): name, before_type,
        after_type, before_ns, after_ns (forward).
    ops: per op name, self time per iteration.  kernels: per kernel name, GPU time per
        iteration (empty unless both runs recorded level G).
    layers, ops and kernels: called changes first, ranked by what explains the step's
        change (when the step got slower, the largest increases first, then the rows that
        got faster; the reverse when it got faster; by |delta_ns| when its change is not
        called), then the rest by |delta_ns|, largest first.
    changes: the exact differences, what the runs did rather than how long it took (no
        noise): one row per figure and name whose per-iteration mean differs: figure (one of
        EXACT_FIGURES: "op calls" per op name, "input shapes" calls per op name and inputs
        (input_dims, record_shapes=True), "FLOPs" and "bytes moved" per op name and
        "(total)" (xsp.flops, record_shapes=True), "kernel launches", "copies", "memsets",
        "syncs" per name (level G), "allocations" and "bytes allocated" per device
        (xsp.memory, profile_memory=True)), name, inputs ("" but for input shapes), before,
        after (means per iteration), delta.  Empty when the runs did the same work.
    not_compared: {figure: why} for the exact figures one run or both did not record
        ("level G not in either run", "record_shapes=True not in after").
    iterations: (nb, na); has_gpu: (before, after); k: the noise multiplier.
    """

    def __init__(self, *, summary, layers, added, removed, retyped, ops, kernels, iterations,
                 has_gpu, k, latency, changes=None, not_compared=None):
        self.summary = summary
        self.layers = layers
        self.added = added
        self.removed = removed
        self.retyped = retyped
        self.ops = ops
        self.kernels = kernels
        self.iterations = iterations
        self.has_gpu = has_gpu
        self.k = k
        self.latency = latency          # the summary's first figure: step, model, iteration
        self.changes = changes if changes is not None else pd.DataFrame(
            {c: pd.Series(dtype=object) for c in EXACT_COLUMNS})
        self.not_compared = dict(not_compared or {})

    def head(self, top):
        """A Comparison whose layers, ops and kernels tables keep their first top rows (the
        called and largest changes); the other tables whole."""
        if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or top < 1:
            raise ValueError("top must be a positive int, not %r" % (top,))
        return Comparison(summary=self.summary, layers=self.layers.head(top),
                          added=self.added, removed=self.removed, retyped=self.retyped,
                          ops=self.ops.head(top), kernels=self.kernels.head(top),
                          iterations=self.iterations, has_gpu=self.has_gpu, k=self.k,
                          latency=self.latency, changes=self.changes,
                          not_compared=self.not_compared)

    @property
    def changed(self):
        """Whether the runs did different work: an exact difference (changes not empty)."""
        return bool(len(self.changes))

    def verdicts(self):
        """{verdict: number of rows} over the timed rows: the summary's (but the phases that
        are 0 in both runs), layers, ops and kernels."""
        s = self.summary
        keep = (s["figure"] == self.latency) | (s["before_ns"] != 0) | (s["after_ns"] != 0)
        out = {}
        for df in (s[keep], self.layers, self.ops, self.kernels):
            for v, n in df["verdict"].value_counts(sort=False).items():
                out[v] = out.get(v, 0) + int(n)
        return out

    def headline(self):
        """One line: what differs.  "no difference beyond noise; N rows within noise" when
        neither an exact figure nor a time beyond noise differs."""
        v = self.verdicts()
        called = sum(v.get(x, 0) for x in CALLED)
        within = v.get("within noise", 0)
        spread = sum(n for x, n in v.items() if x.startswith("no spread"))
        exact = ("%d exact difference%s" % (len(self.changes), "" if len(self.changes) == 1
                                            else "s")) if self.changed else None
        if spread and not called:
            times = "times: no change can be called (fewer than 2 iterations in a run)"
        elif called:
            times = "%d row%s beyond noise, %d within noise" % (
                called, "" if called == 1 else "s", within)
        elif exact is None:
            return "no difference beyond noise; %d row%s within noise" % (
                within, "" if within == 1 else "s")
        else:
            times = "no time beyond noise; %d row%s within noise" % (
                within, "" if within == 1 else "s")
        return "; ".join(x for x in (exact or "no exact difference", times))

    # -- for CI -----------------------------------------------------------------------------
    def regressions(self, threshold_share=0.0, layers=False):
        """The called "slower" changes whose delta_share exceeds threshold_share (0.05: more
        than 5 % slower): the iteration latency (summary's first row) and, with layers=True,
        the layers rows.  A DataFrame: what ("step", "layer fc1 (Linear, forward)"), then
        the figure columns; largest share first (a change from 0 counts as infinite)."""
        rows = [dict(what=self.latency, **self.summary.iloc[0][FIGURE_COLUMNS].to_dict())]
        if layers:
            for _, r in self.layers.iterrows():
                rows.append(dict(what="layer %s (%s, %s)" % (r["name"], r["type"], r["pass"]),
                                 **r[FIGURE_COLUMNS].to_dict()))
        out = []
        for r in rows:
            share = r["delta_share"]
            if math.isnan(share):
                share = math.inf if r["delta_ns"] > 0 else math.nan
            if r["verdict"] == "slower" and share > threshold_share:
                out.append((share, r))
        out.sort(key=lambda x: -x[0])
        return pd.DataFrame([r for _, r in out], columns=["what"] + FIGURE_COLUMNS)

    def worst(self, threshold_share=0.0, layers=False):
        """The largest of regressions(threshold_share, layers) as a dict, or None when there
        is none: `if c.worst(0.05): fail the build`."""
        r = self.regressions(threshold_share, layers)
        return r.iloc[0].to_dict() if len(r) else None

    # -- reading ----------------------------------------------------------------------------
    def text(self, top=20, names=("before", "after")):
        """Deprecated: xsp.report.text(comparison)."""
        deprecated("Comparison.text()", "xsp.report.text(comparison)")
        return self._text(top=top, names=names)

    def _text(self, top=20, names=("before", "after")):
        """The comparison as text (xsp.report.text(comparison)): the summary, the layers
        added, removed and retyped (each
        section only when not empty), then the layers, ops and kernels tables (top rows
        each).  Returns a str."""
        if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or top < 1:
            raise ValueError("top must be a positive int, not %r" % (top,))
        nb, na = self.iterations
        out = ["xsp compare: %s -> %s" % tuple(names)]
        out.append("iterations: %d -> %d; a change is called when |change| > noise = %g x "
                   "sqrt(sb^2/nb + sa^2/na)" % (nb, na, self.k))
        out.append("(each row is its own test: among many rows of two runs of the same code, "
                   "a few are called by chance; trust the step first, then the largest rows)")
        if min(nb, na) < FEW_ITERATIONS:
            out.append("note: fewer than %d iterations in a run (%d and %d): the noise is "
                       "poorly known%s; record more steps (xsp.step() after each iteration)"
                       % (FEW_ITERATIONS, nb, na,
                          ", and below 2 no change is called" if min(nb, na) < 2 else ""))
        out.append(self.headline())
        out.append("")
        # exact differences first: what the runs did, never noise
        if self.changed:
            out.append("Exact differences (per iteration; counted, not timed: no noise)")
            rows = [[r["figure"], r["name"], r["inputs"], fmt_exact(r["before"]),
                     fmt_exact(r["after"]), fmt_exact(r["delta"], True)]
                    for _, r in self.changes.iterrows()]
            out.extend(_table(["figure", "name", "inputs", "before", "after", "change"],
                              rows, 3))
        else:
            out.append("Exact differences: none (%s compared)" % ", ".join(
                f for f in EXACT_FIGURES if f not in self.not_compared))
        if self.not_compared:
            groups = {}
            for f, why in self.not_compared.items():
                groups.setdefault(why, []).append(f)
            out.append("  (not compared: %s)" % "; ".join(
                "%s: %s" % (", ".join(fs), why) for why, fs in groups.items()))
        out.append("")
        rows = [[r["figure"]] + _cells(r) for _, r in self.summary.iterrows()
                if r["figure"] == self.latency or r["before_ns"] or r["after_ns"]]
        out.extend(_table(["figure"] + FIGURE_HEADER, rows, 1))

        def section(title, header, rows, left):
            if rows:
                out.append("")
                out.append(title)
                out.extend(_table(header, rows, left))

        section("Layers added (in %s only; time per iteration)" % names[1],
                ["name", "type", "forward", "backward"],
                [[r["name"], r["type"], fmt_ns(r["after_ns"]), fmt_ns(r["after_backward_ns"])]
                 for _, r in self.added.iterrows()], 2)
        section("Layers removed (in %s only; time per iteration)" % names[0],
                ["name", "type", "forward", "backward"],
                [[r["name"], r["type"], fmt_ns(r["before_ns"]),
                  fmt_ns(r["before_backward_ns"])] for _, r in self.removed.iterrows()], 2)
        section("Layers retyped (same name, another type: not compared)",
                ["name", "before type", "after type", "before", "after"],
                [[r["name"], r["before_type"], r["after_type"], fmt_ns(r["before_ns"]),
                  fmt_ns(r["after_ns"])] for _, r in self.retyped.iterrows()], 3)
        if len(self.retyped):
            out.append("  (an nn.Sequential numbers its layers by position: inserting or "
                       "removing one renames those after it)")

        def ranked(title, df, keys, empty):
            out.append("")
            out.append(title)
            if not len(df):
                out.append("  " + empty)
                return
            rows = [[r[c] for c in keys] + _cells(r) for _, r in df.head(top).iterrows()]
            out.extend(_table(keys + FIGURE_HEADER, rows, len(keys)))
            if len(df) > top:
                out.append("  ... %d more" % (len(df) - top))

        ranked("Layers (leaf modules matched by name and type, time per iteration; called "
               "changes first)", self.layers, ["name", "type", "pass"],
               "no layer in both runs (level L)")
        ranked("Ops (self time per iteration)", self.ops, ["name"], "no ops recorded (level L)")
        if all(self.has_gpu):
            ranked("Kernels (GPU time per iteration)", self.kernels, ["name"],
                   "no kernels recorded")
        else:
            out.append("")
            out.append("Kernels: level G was not recorded in %s" % (
                "either run" if not any(self.has_gpu) else
                names[0] if not self.has_gpu[0] else names[1]))
        return printable("\n".join(out) + "\n")

    def __str__(self):
        return self._text()

    def __repr__(self):
        s = self.summary.iloc[0]
        called = self.layers["verdict"].value_counts() if len(self.layers) else {}
        return ("<xsp.analysis.compare.Comparison %s %s %s; iterations %d -> %d; layers: %d slower, "
                "%d faster, %d added, %d removed, %d retyped>" % (
                    self.latency, fmt_change(s["delta_ns"], s["delta_share"]), s["verdict"],
                    self.iterations[0], self.iterations[1], called.get("slower", 0),
                    called.get("faster", 0), len(self.added), len(self.removed),
                    len(self.retyped)))


__all__ = ["compare", "Comparison", "EXACT_FIGURES"]
