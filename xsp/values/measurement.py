"""Leveled measurement, XSP's key idea: the Measurement that `xsp.measure` makes (the runs are
made by xsp.producers.leveled; this is the value and its statistics).

Profiling a deeper level inflates the latencies seen at the levels above it (every op span
costs the model span its recording time).  So measure() runs the workload unprofiled to warm
up, then once per prefix of the levels asked for (M; M+L; M+L+G), `repeat` iterations each, and
takes every span's latency from the shallowest run that records its level: the model latency
from the M run, layer and op latencies from the M+L run, GPU latencies from the M+L+G run.  The
structure (which spans exist, their nesting, attributes) comes from the deepest run.

Spans of different runs and iterations are matched by their position in the tree, never by
time: a span's key is the chain, from its iteration's step span down to it, of (kind, name,
ordinal among the siblings with the same kind and name).  Roots that another thread recorded
(autograd's device threads; adopted by the region) belong to the iteration during which they
started, keyed under it with the same rule.

Statistics over the iterations are a trimmed mean (drop floor(trim * n) samples at each end)
and, of the samples kept, the population standard deviation; min and max are of all samples.
The overhead table says what each deeper run added to each level's latency.
"""
import numpy as np
import pandas as pd

from xsp.values.compiling import compiling_steps
from xsp.core.fmt import fmt_ns
from xsp.core.util import deprecated
from xsp.values.trace import KINDS, LEVELS, ancestor_count, self_time

NOISE_K = 2.0       # a difference is called when it exceeds NOISE_K standard errors
GPU_WORK = ("kernel", "memcpy", "memset")


def trimmed_stats(samples, trim):
    """(trimmed mean, std of the kept samples, min, max, n) of a 1-d sequence; the mean and std
    drop floor(trim * n) samples at each end of the sorted samples.  NaNs for no samples."""
    x = np.sort(np.asarray(samples, dtype=np.float64))
    n = len(x)
    if n == 0:
        return (np.nan, np.nan, np.nan, np.nan, 0)
    k = int(np.floor(trim * n))
    kept = x[k:n - k] if n - 2 * k > 0 else x
    return (float(kept.mean()), float(kept.std()), float(x[0]), float(x[-1]), n)


def _span_keys(trace, intern, skip=0):
    """Per span of a measured trace: (iteration index or -1, key id or -1).  The first `skip`
    steps (priming calls) and everything in them get -1.  Key ids come from intern, a dict
    shared by all runs: (parent key id, kind, name, ordinal) -> id; the step spans (iteration
    roots) all have key 0.  A span's parent key is that of its nearest ancestor at its own
    level or above (an M span skips L ancestors such as a record_function scope around the
    model call), so that every run that records a span computes the same key for it."""
    n = len(trace)
    kinds = trace.kind_codes
    level = trace.level_codes
    step_kind = KINDS.index("step")
    region_kind = KINDS.index("region")
    # each span's nearest ancestor at its own level or above (M 0 < L 1 < G 2)
    up = np.full(n, -1, dtype=np.int64)
    for lv in range(len(LEVELS)):
        at = level == lv
        if at.any():
            up[at] = trace.nearest_ancestor(level <= lv, include_self=False)[at]
    it = np.full(n, -1, dtype=np.int64)
    key = np.full(n, -1, dtype=np.int64)
    steps = np.nonzero(kinds == step_kind)[0]
    if not len(steps):
        return it, key
    it[steps] = np.arange(len(steps)) - skip
    step_start = trace.start_ns[steps]
    step_end = trace.end_ns[steps]
    key[steps[it[steps] >= 0]] = 0
    it[it < -1] = -1
    names = trace.strings
    knames = KINDS
    counts = {}
    name_col = trace.name_codes
    for i in range(n):
        k = kinds[i]
        if k == step_kind or k == region_kind:
            continue
        p = up[i]
        if p >= 0 and kinds[p] != region_kind:
            if key[p] < 0:
                continue                  # inside a priming call, or outside every step
            pk, itn = key[p], it[p]
        else:
            # a root or a child of the region (another thread's work): it belongs to the step
            # during which it started
            j = int(np.searchsorted(step_start, trace.start_ns[i], side="right")) - 1
            if j < 0 or trace.start_ns[i] > step_end[j] or it[steps[j]] < 0:
                continue
            pk, itn = 0, it[steps[j]]
        tag = (int(pk), knames[k], names[name_col[i]])
        c = counts.get((itn, tag), 0)
        counts[(itn, tag)] = c + 1
        key[i] = intern.setdefault(tag + (c,), len(intern) + 1)
        it[i] = itn
    return it, key


class Latency:
    """One latency record, the same for an xsp.Measurement (m.latency) and a performance Result
    (xsp.perf: r.latency): samples_ns (a tuple of floats, one per iteration, in the order
    measured), n (their number), mean_ns and std_ns (the trimmed mean and the sample standard
    deviation, ddof 1, of the samples kept after dropping floor(trim * n) at each end of the
    sorted samples; std_ns NaN below 2 kept), median_ns, min_ns and max_ns (of all samples),
    trim.  NaN for the figures of no samples.  Immutable."""

    __slots__ = ("samples_ns", "n", "mean_ns", "std_ns", "median_ns", "min_ns", "max_ns",
                 "trim")
    FIELDS = ("samples_ns", "n", "mean_ns", "std_ns", "median_ns", "min_ns", "max_ns", "trim")

    def __init__(self, samples_ns, n, mean_ns, std_ns, median_ns, min_ns, max_ns, trim=0.0):
        for k, v in zip(self.FIELDS, (tuple(float(x) for x in samples_ns), int(n),
                                      *(float("nan") if x is None else float(x) for x in (
                                          mean_ns, std_ns, median_ns, min_ns, max_ns)),
                                      float(trim))):
            object.__setattr__(self, k, v)

    def __setattr__(self, key, value):
        raise AttributeError("a Latency is immutable")

    @classmethod
    def of(cls, samples, trim=0.0):
        """The record of samples (a sequence of ns): see the class."""
        x = np.asarray(samples, dtype=np.float64)
        n = len(x)
        if not n:
            return cls((), 0, None, None, None, None, None, trim)
        srt = np.sort(x)
        k = int(np.floor(trim * n))
        kept = srt[k:n - k] if n - 2 * k > 0 else srt
        std = float(kept.std(ddof=1)) if len(kept) > 1 else None
        return cls(x.tolist(), n, float(kept.mean()), std, float(np.median(srt)),
                   float(srt[0]), float(srt[-1]), trim)

    def as_dict(self):
        """{field: value}, samples_ns as a list (the JSON of a performance result)."""
        return {k: list(getattr(self, k)) if k == "samples_ns" else getattr(self, k)
                for k in self.FIELDS}

    def __getitem__(self, key):
        """Deprecated: latency.<key> (Result.latency was a dict in the release before)."""
        deprecated("latency[%r]" % (key,), "latency.%s" % key)
        if key not in self.FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def __eq__(self, other):
        if not isinstance(other, Latency):
            return NotImplemented
        return all(_same(getattr(self, k), getattr(other, k)) for k in self.FIELDS)

    __hash__ = None

    def __repr__(self):
        return "<xsp.Latency %s ± %s (median %s, n %d)>" % (
            fmt_ns(self.mean_ns), fmt_ns(self.std_ns), fmt_ns(self.median_ns), self.n)


def _same(a, b):
    return a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)


class Measurement:
    """The result of xsp.measure: leveled latencies over the structure of the deepest run.

    levels: the levels measured ("M", "ML" or "MLG"); runs: the runs made, shallowest first;
    traces: {run: Trace} (the first round's); all_traces: {run: [Trace per round]}; trace: the
    deepest run's (first round); warmup, repeat, rounds, trim, batch_size: as given.  span_table(): one row per span of one iteration of the deepest run with leveled
    latencies (see docs/analyses.md); overhead: what each deeper run added to each level;
    latency_ns: the model latency (trimmed mean of the iteration latency in the M run);
    unmatched: {run: spans of that run found nowhere in the deepest run's structure};
    compiled: {run: compilations torch.compile made during that run} (measure warns);
    compiling: {run: measured iterations left out of every statistic because a compilation ran
    in them (a compile span in the step, xsp.compiled): latency, layers, ops, overhead};
    compiling_kept: {run: iterations that compiled but were kept, because every iteration of
    that run compiled (or every one of the deepest run's first round): nothing else was left
    to measure}; n_iterations: {run: iterations kept, all rounds}.
    Every analysis in xsp.analysis accepts a Measurement.

    xsp.analysis and xsp.report recognise a Measurement by duck typing, by its span_table()
    method and trace attribute (they sit below this module and do not import it): another
    object with both is taken for a Measurement.
    """

    def __init__(self, levels, traces, warmup, repeat, trim, batch_size, skip=1):
        """traces: {run: Trace} or {run: [Trace per round]} (interleaved rounds)."""
        self.levels = levels
        self.runs = tuple(traces)
        self.all_traces = {r: list(t) if isinstance(t, (list, tuple)) else [t]
                           for r, t in traces.items()}
        self.rounds = len(self.all_traces[self.runs[0]])
        self.traces = {r: ts[0] for r, ts in self.all_traces.items()}
        self.trace = self.traces[self.runs[-1]]
        self.warmup = warmup
        self.repeat = repeat
        self.trim = trim
        self.batch_size = batch_size
        self._intern = {}
        self.skip = skip    # priming steps at the start of each session, left out
        self.compiled = {}  # run -> compilations torch.compile made during it (measure)
        # run -> measured iterations left out because torch.compile compiled in them (a
        # compile span inside the step, xsp.compiled): their latency is mostly compile time
        self.compiling = {}
        self.n_iterations = {}  # run -> iterations kept, all rounds
        # per run, per round: (iteration, key) arrays; the kept iterations are numbered on
        # from the rounds before (round k's first follows round k-1's last), so the rounds
        # pool into one sample per iteration
        self._keys = {}
        # run -> iterations that compiled but are kept: every one of the run compiled (a
        # workload that recompiles on each call), so there was nothing else to measure
        self.compiling_kept = {}
        for r, ts in self.all_traces.items():
            keyed = [_span_keys(t, self._intern, skip) for t in ts]
            bads = [_compiling_iterations(t, it) for t, (it, _) in zip(ts, keyed)]
            ns = [int(it.max()) + 1 if len(it) else 0 for it, _ in keyed]
            left = [n - len(b) for n, b in zip(ns, bads)]
            if sum(len(b) for b in bads) and (not sum(left) or (r == self.runs[-1]
                                                                 and not left[0])):
                self.compiling_kept[r] = sum(len(b) for b in bads)
                bads = [np.zeros(0, dtype=np.int64)] * len(bads)
            self._keys[r] = []
            kept = 0
            for (it, key), bad, n in zip(keyed, bads, ns):
                if len(bad):
                    drop = np.isin(it, bad)
                    it = np.where(drop, -1, it)
                    key = np.where(drop, -1, key)
                    self.compiling[r] = self.compiling.get(r, 0) + len(bad)
                good = np.setdiff1d(np.arange(n), bad)
                remap = np.full(max(n, 1), -1, dtype=np.int64)
                remap[good] = kept + np.arange(len(good))
                it = np.where(it >= 0, remap[np.maximum(it, 0)], -1)
                kept += len(good)
                self._keys[r].append((it, key))
            self.n_iterations[r] = kept
        self._table = None
        self._overhead = None
        deep_keys = set(k for _, key in self._keys[self.runs[-1]] for k in key.tolist())
        self.unmatched = {r: int(sum(1 for _, key in self._keys[r] for k in key.tolist()
                                     if k > 0 and k not in deep_keys)) for r in self.runs}

    def _samples(self, run):
        """{key id: array of durations, one per iteration where the key occurs (all rounds)}."""
        keys, durs = [], []
        for (it, key), t in zip(self._keys[run], self.all_traces[run]):
            ok = key >= 0
            keys.append(key[ok])
            durs.append(t.duration_ns[ok])
        df = pd.DataFrame({"key": np.concatenate(keys), "dur": np.concatenate(durs)})
        return {k: g.to_numpy() for k, g in df.groupby("key")["dur"]}

    def span_table(self):
        """One row per span of the deepest run's first measured iteration (ids renumbered
        0..n-1 in start order, the step span first with parent -1; depth and fwd_op follow the
        new ids), with the columns of Trace.to_pandas() where duration_ns is the leveled
        latency (rounded to ns), end_ns = start_ns + duration_ns (start_ns is the deep run's:
        it orders the spans) and self_ns follows from them, plus latency_ns (exact trimmed mean), std_ns, min_ns, max_ns,
        samples, source_run (the run it was taken from) and ns_<run> (trimmed mean in each
        run, NaN where the run does not record it)."""
        if self._table is not None:
            return self._table.copy()
        deep = self.runs[-1]
        it, key = self._keys[deep][0]
        sel = np.nonzero((it == 0) & (key >= 0))[0]
        full = self.trace.to_pandas()
        df = full.iloc[sel].reset_index(drop=True)
        remap = np.full(len(self.trace), -1, dtype=np.int64)
        remap[sel] = np.arange(len(sel))
        par = df["parent"].to_numpy()
        newpar = np.where(par >= 0, remap[np.maximum(par, 0)], -1)
        keys = key[sel]
        newpar[(newpar < 0) & (keys != 0)] = 0      # adopted roots hang under the step
        df["id"] = np.arange(len(sel), dtype=np.int64)
        df["parent"] = newpar
        df["depth"] = ancestor_count(newpar)
        if "fwd_op" in df.columns:        # ids of the deep trace -> ids of this table
            df["fwd_op"] = [None if v is None or (isinstance(v, float) and np.isnan(v))
                            or remap[int(v)] < 0 else int(remap[int(v)])
                            for v in df["fwd_op"].tolist()]
            df["fwd_op"] = df["fwd_op"].astype(object)
        samples = {r: self._samples(r) for r in self.runs}
        stats = {r: {k: trimmed_stats(v, self.trim) for k, v in samples[r].items()}
                 for r in self.runs}
        lat, std, mn, mx, cnt, src_run = [], [], [], [], [], []
        per_run = {r: [] for r in self.runs}
        levels = df["level"].to_numpy()
        for k, lv in zip(keys.tolist(), levels):
            want = self.runs[min(self.levels.index(lv), len(self.runs) - 1)]
            order = [want] + [r for r in self.runs if r != want]
            chosen = next((r for r in order if k in stats[r]), deep)
            s = stats[chosen].get(k, (np.nan, np.nan, np.nan, np.nan, 0))
            lat.append(s[0])
            std.append(s[1])
            mn.append(s[2])
            mx.append(s[3])
            cnt.append(s[4])
            src_run.append(chosen)
            for r in self.runs:
                per_run[r].append(stats[r][k][0] if k in stats[r] else np.nan)
        df["latency_ns"] = np.array(lat, dtype=np.float64)
        df["duration_ns"] = np.rint(np.nan_to_num(df["latency_ns"].to_numpy())).astype(np.int64)
        df["end_ns"] = df["start_ns"] + df["duration_ns"]
        # self time from the leveled durations: minus the children on the same thread
        df["self_ns"] = self_time(df["duration_ns"].to_numpy(), df["parent"].to_numpy(),
                                  df["thread"].to_numpy())
        df["std_ns"] = std
        df["min_ns"] = mn
        df["max_ns"] = mx
        df["samples"] = np.array(cnt, dtype=np.int64)
        df["source_run"] = src_run
        for r in self.runs:
            df["ns_" + r] = np.array(per_run[r], dtype=np.float64)
        df.attrs["meta"] = dict(self.trace.meta)
        self._table = df
        return df.copy()

    @property
    def overhead(self):
        """One row per (level, run that records it): level, run, latency_ns (trimmed mean over
        iterations of the level's time per iteration: M the iteration (step) span, L the L
        spans not inside another L span, G the GPU work: kernels, copies, memsets), std_ns,
        added_ns (latency_ns minus the level's latency in its own, shallowest run),
        added_share (added_ns / that latency), noise_ns = NOISE_K * sqrt(s0^2/n0 + s^2/n)
        (the standard errors of both runs' trimmed samples: s the sample standard deviation,
        ddof 1, of the kept samples, n their number; NaN in the level's own run, and where a
        run kept one sample: the spread is unknown) and within_noise (|added_ns| <= noise_ns,
        or the spread unknown: the difference cannot be told from the spread; measure with a
        larger repeat)."""
        if self._overhead is not None:
            return self._overhead.copy()
        rows = []
        for li, lv in enumerate(self.levels):
            base = None
            for r in self.runs[li:]:
                per_it = self._per_iteration(lv, r)
                mean, std, _, _, n = trimmed_stats(per_it, self.trim)
                kept = n - 2 * int(np.floor(self.trim * n)) if n else 0
                kept = kept if kept > 0 else n
                # the squared standard error of the mean, from the kept samples' sample
                # variance (ddof 1); unknown (NaN) for a single sample
                se2 = std * std * kept / (kept - 1) / kept if kept > 1 else np.nan
                if base is None:
                    base, base_se2 = mean, se2
                    noise, within = np.nan, False
                else:
                    noise = NOISE_K * float(np.sqrt(base_se2 + se2))
                    # a spread that is unknown cannot tell the difference either
                    within = bool(np.isnan(noise) or abs(mean - base) <= noise)
                rows.append({"level": lv, "run": r, "latency_ns": mean, "std_ns": std,
                             "added_ns": mean - base,
                             "added_share": (mean - base) / base if base else np.nan,
                             "noise_ns": noise, "within_noise": within})
        self._overhead = pd.DataFrame(rows, columns=["level", "run", "latency_ns", "std_ns",
                                                     "added_ns", "added_share", "noise_ns",
                                                     "within_noise"])
        return self._overhead.copy()

    def _per_iteration(self, lv, r):
        """Level lv's time in each kept iteration of run r (all rounds, a float64 array): M the
        iteration (step) span, L the L spans not inside another L span, G the GPU work."""
        n_it = self.n_iterations[r]
        per_it = np.zeros(n_it)
        for (it, _), t in zip(self._keys[r], self.all_traces[r]):
            lvl = t.level_codes
            kinds = np.array(KINDS, dtype=object)[t.kind_codes]
            if lv == "M":
                sel = kinds == "step"
            elif lv == "L":
                # L spans with no L span anywhere above them (a record_function scope
                # around the model call encloses the model's modules: counted once)
                sel = (lvl == 1) & (t.nearest_ancestor(lvl == 1, include_self=False) < 0)
            else:
                sel = np.isin(kinds, GPU_WORK)
            sel &= it >= 0
            per_it += np.bincount(it[sel], weights=t.duration_ns[sel].astype(np.float64),
                                  minlength=n_it)[:n_it]
        return per_it

    @property
    def latency(self):
        """The model latency as a Latency: the iteration (step) latencies of the M run, its
        mean_ns the trimmed mean (trim as measured)."""
        return Latency.of(self._per_iteration("M", self.runs[0]), trim=self.trim)

    @property
    def latency_ns(self):
        """Model latency: the trimmed mean of the iteration latency in the M run
        (latency.mean_ns)."""
        return float(self.overhead["latency_ns"].iloc[0])

    @property
    def throughput_per_s(self):
        """batch_size / model latency in seconds; None without batch_size."""
        if not self.batch_size:
            return None
        return self.batch_size * 1e9 / self.latency_ns

    def leveled_ns(self):
        """{span id of the deepest run's first-round trace (self.trace): leveled latency in
        ns}: for each span inside a measured iteration, the trimmed mean over the
        iterations of its key in the shallowest run that records its level (the latency
        span_table() gives it)."""
        deep = self.runs[-1]
        it, key = self._keys[deep][0]
        samples = {r: self._samples(r) for r in self.runs}
        out = {}
        levels = self.trace.level_codes
        for i in np.nonzero(key >= 0)[0].tolist():
            k = int(key[i])
            want = self.runs[min(int(levels[i]), len(self.runs) - 1)]
            for r in [want] + [x for x in self.runs if x != want]:
                if k in samples[r]:
                    out[i] = trimmed_stats(samples[r][k], self.trim)[0]
                    break
        return out

    # -- deprecated spellings (issue 25: values hold data, modules hold verbs) ----------------
    def to_kineto(self, path):
        """Deprecated: xsp.save(measurement, path) (a .pt.trace.json[.gz] path)."""
        deprecated("Measurement.to_kineto(path)", "xsp.save(measurement, path)")
        from xsp.formats import kineto
        return kineto.write(self, path)

    def report(self, top=10):
        """Deprecated: xsp.report.text(measurement)."""
        deprecated("Measurement.report()", "xsp.report.text(measurement)")
        from xsp import report
        return report.text(self, top=top)

    def to_html(self, path=None, top=10):
        """Deprecated: xsp.report.html(measurement, path)."""
        deprecated("Measurement.to_html()", "xsp.report.html(measurement, path)")
        from xsp import report
        return report.html(self, path=path, top=top)

    def _repr_html_(self):             # a notebook's view of the value (xsp.report's fragment)
        from xsp import report
        return report.html_fragment(self, top=10)

    def __repr__(self):
        return "<xsp.Measurement levels=%s runs=%s repeat=%d latency %.0f ns>" % (
            self.levels, "/".join(self.runs), self.repeat, self.latency_ns)


def _compiling_iterations(trace, it):
    """The measured iterations (values of it, an int64 array) of a trace whose step has a
    compile span in it (xsp.compiled): sorted, unique."""
    steps = compiling_steps(trace)
    if not len(steps):
        return np.zeros(0, dtype=np.int64)
    v = it[steps]
    return np.unique(v[v >= 0])


__all__ = ["Measurement", "Latency", "trimmed_stats"]
