"""Leveled measurement, XSP's key idea: `xsp.measure` and `xsp.sweep`.

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
import sys

import numpy as np
import pandas as pd

from . import report as _report
from .errors import LevelUnavailableError, ProfilerError, XSPWarning
from .levels import parse_levels
from .profiler import profile
from .trace import KINDS, LEVELS, ancestor_count, self_time

RUN_ORDER = ("M", "ML", "MLG")
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


class _Progress:
    """The progress bar of measure(): tqdm's, on a terminal (the stream's isatty()) or, in a
    Jupyter notebook, tqdm's widget (tqdm.autonotebook's choice); nothing on any other stream
    or without tqdm (an optional dependency: pip install xsp[progress]).

    measure() advances it only where no profile records (after a warm-up call, after each
    run's profile has stopped), never between two step() calls, so that its writes are never
    timed; tqdm bounds their rate (mininterval), and miniters=1 keeps tqdm's monitor thread
    from refreshing the bar on its own while a run is measured."""

    def __init__(self, total, enabled, stream=None):
        self.total = max(int(total), 1)
        self.done = 0
        self.bar = None
        if enabled:
            self.bar = _make_bar(self.total, stream if stream is not None else sys.stderr)

    def advance(self, label, n=1):
        """Count n more calls done; label says where measure() is ("warm-up", "run ML")."""
        self.done += n
        if self.bar is not None:
            self.bar.set_postfix_str(label, refresh=False)
            self.bar.update(n)

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _make_bar(total, stream):
    """A tqdm bar of total calls for stream, or None: no tqdm, not a terminal nor a notebook."""
    try:
        import warnings
        with warnings.catch_warnings():     # autonotebook warns that notebook mode is new
            warnings.simplefilter("ignore")
            from tqdm.autonotebook import tqdm as auto
        from tqdm.std import tqdm as std
    except ImportError:
        return None
    notebook = auto is not std and stream is sys.stderr
    if not notebook:
        try:
            if not stream.isatty():
                return None
        except (AttributeError, ValueError, OSError):   # no isatty, or a closed stream
            return None
    try:
        return auto(total=total, desc="xsp.measure", unit="call", miniters=1,
                    mininterval=0.1, **({} if notebook else {"file": stream}))
    except Exception:       # a notebook without a usable widget: no bar rather than an error
        return None


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

    @property
    def latency_ns(self):
        """Model latency: the trimmed mean of the iteration latency in the M run."""
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

    def to_kineto(self, path):
        """The deepest run's trace as Kineto's JSON (Trace.to_kineto), each span inside a
        measured iteration carrying its leveled latency as arg "xsp.leveled_ns"."""
        from .kineto import write
        return write(self.trace, path, leveled=self.leveled_ns())

    def report(self, top=10):
        """The text summary (xsp.report.text)."""
        return _report.text(self, top=top)

    def to_html(self, path=None, top=10):
        """The self-contained HTML report (xsp.report.html); written to path when given."""
        return _report.html(self, path=path, top=top)

    def _repr_html_(self):
        return _report.html_fragment(self, top=10)

    def __repr__(self):
        return "<xsp.Measurement levels=%s runs=%s repeat=%d latency %.0f ns>" % (
            self.levels, "/".join(self.runs), self.repeat, self.latency_ns)


def _check_args(levels, warmup, repeat, trim, batch_size):
    lv = parse_levels(levels)
    if lv not in RUN_ORDER:
        raise ValueError("measure runs the prefixes M, ML, MLG of XSP's levels; levels=%r "
                         "(%s) is not one of them" % (levels, lv))
    for name, v, lo in (("warmup", warmup, 0), ("repeat", repeat, 1)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < lo:
            raise ValueError("%s must be an int >= %d, not %r" % (name, lo, v))
    if not isinstance(trim, (int, float)) or not 0 <= trim < 0.5:
        raise ValueError("trim must be a fraction in [0, 0.5), not %r" % (trim,))
    if batch_size is not None and (not isinstance(batch_size, (int, np.integer))
                                   or batch_size <= 0):
        raise ValueError("batch_size must be a positive int, not %r" % (batch_size,))
    return lv


def _cuda_sync():
    """torch.cuda.synchronize when torch has initialised CUDA, else a no-op."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.synchronize
    return None


def measure(fn, levels="MLG", *, warmup=3, repeat=10, rounds=1, trim=0.1, batch_size=None,
            sync=None, gpu_fallback=False, progress=True, name="xsp.measure", **profile_kwargs):
    """Leveled measurement of fn() (called with no arguments), see the module docstring.

    levels: "M", "ML" or "MLG" (any case): the runs are its prefixes.  warmup: unprofiled calls
    first.  repeat: calls per run, one step (iteration) each.  rounds: the sequence of runs is
    made this many times, interleaved (M, ML, MLG, M, ML, MLG, ...), and the samples of a run
    pooled: drift of the machine over time (frequency, caches, neighbours) then weighs on every
    level alike instead of on the later runs.  trim: fraction of samples dropped
    at each end for the trimmed mean.  batch_size: for throughput.  sync: call
    torch.cuda.synchronize() at the end of every call (default: when torch has initialised
    CUDA by the end of the warm-up), so that a call's latency includes its GPU work.
    gpu_fallback: when G cannot be recorded, measure M and L with a warning instead of raising
    LevelUnavailableError.  progress: show a progress bar (tqdm's, when installed) on stderr
    when it is a terminal, or in a notebook (see _Progress).  Other keyword arguments
    go to xsp.profile (max_memory, record_shapes, ...).  Returns a Measurement.
    """
    lv = _check_args(levels, warmup, repeat, trim, batch_size)
    if not isinstance(rounds, (int, np.integer)) or isinstance(rounds, bool) or rounds < 1:
        raise ValueError("rounds must be an int >= 1, not %r" % (rounds,))
    if not callable(fn):
        raise TypeError("measure(fn): fn must be callable with no arguments, not %s"
                        % type(fn).__name__)
    if "G" in lv:
        from .profiler import _import_torch, gpu_unavailable_reason
        why = gpu_unavailable_reason(_import_torch())
        if why is not None:
            msg = "level G cannot be recorded: " + why
            if not gpu_fallback:
                raise LevelUnavailableError(msg + "; measure levels='ML', or pass "
                                            "gpu_fallback=True to fall back to M and L")
            import warnings
            warnings.warn(msg + "; measuring M and L only (gpu_fallback=True)", XSPWarning,
                          stacklevel=2)
            lv = "ML"
    runs = [r for r in RUN_ORDER if len(r) <= len(lv)]
    bar = _Progress(warmup + (repeat + 1) * len(runs) * rounds, progress)
    traces = {r: [] for r in runs}
    try:
        for _ in range(warmup):
            fn()
            bar.advance("warm-up")      # no profile records during the warm-up
        sync_fn = (_cuda_sync() if sync is None else
                   (_cuda_sync() or (lambda: None)) if sync else None)
        compiled = {}
        for r in [r for _ in range(rounds) for r in runs]:
            before = _compilations()
            with profile(levels=r, name=name, **profile_kwargs) as prof:
                # one priming call first, left out of the statistics: a session's first call
                # pays one-off costs (module names mapped, names interned)
                for _ in range(repeat + 1):
                    fn()
                    if sync_fn is not None:
                        sync_fn()
                    prof.step()
            # advanced once the profile has stopped: a write between two step() calls would
            # be timed in the next iteration
            bar.advance("run %s" % r, repeat + 1)
            traces[r].append(prof.trace)
            n_new = _compilations() - before
            if n_new:
                compiled[r] = compiled.get(r, 0) + n_new
            steps = int((prof.trace.kind_codes == KINDS.index("step")).sum())
            if steps != repeat + 1:
                raise ProfilerError(
                    "measure: fn made %d steps in %d calls: it calls prof.step() or "
                    "xsp.step() itself; measure marks one step per call of fn, so remove the "
                    "step() call from fn" % (steps - (repeat + 1), repeat + 1))
    finally:
        bar.close()
    m = Measurement(lv, traces, warmup, repeat, trim, batch_size)
    m.compiled = compiled
    if compiled:
        import warnings
        from .compiled import compile_mask
        seen = {r: sum(int(compile_mask(t).sum()) for t in traces[r]) for r in compiled}
        parts = []
        if m.compiling:
            n = sum(m.compiling.values())
            parts.append("the %d measured iteration%s that compiled (%s) %s left out of the "
                         "statistics" % (n, "" if n == 1 else "s", ", ".join(
                             "%d in run %s" % (k, r) for r, k in m.compiling.items()),
                             "is" if n == 1 else "are"))
        if m.compiling_kept:
            parts.append("every measured iteration of %s compiled, so they are kept and their "
                         "latencies include compile time" % ", ".join(
                             "run %s (%d)" % (r, k) for r, k in m.compiling_kept.items()))
        if not parts and all(seen.values()):
            parts.append("only in the priming calls, which are left out of the statistics")
        elif not parts:
            parts.append("xsp recorded no compile span (torch._dynamo was imported after the "
                         "profile was made), so the latencies may include compile time")
        how = "; ".join(parts)
        warnings.warn("measure: torch.compile compiled during the measured runs (%s): %s; "
                      "give a larger warmup so that every compile happens before" % (
                          ", ".join("%d in run %s" % (n, r) for r, n in compiled.items()), how),
                      XSPWarning, stacklevel=2)
    return m


def _compiling_iterations(trace, it):
    """The measured iterations (values of it, an int64 array) of a trace whose step has a
    compile span in it (xsp.compiled): sorted, unique."""
    from .compiled import compiling_steps
    steps = compiling_steps(trace)
    if not len(steps):
        return np.zeros(0, dtype=np.int64)
    v = it[steps]
    return np.unique(v[v >= 0])


def _compilations():
    """How many compilations torch._dynamo has recorded so far (0 when it is not imported):
    a compile during a measured run is told apart by the count before and after it."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return 0
    try:
        return int(utils.counters.get("stats", {}).get("unique_graphs", 0)) + \
            sum(utils.counters.get("graph_break", {}).values())
    except Exception:
        return 0


def sweep(make, batch_sizes, *, levels="M", warmup=3, repeat=10, trim=0.1, progress=True,
          return_measurements=False, **kwargs):
    """Model latency and throughput across batch sizes: for each b in batch_sizes, measures
    make(b) (a callable with no arguments running one batch of b).  Returns a DataFrame with
    batch_size, latency_ns (trimmed mean of the iteration latency in the M run), std_ns,
    throughput_per_s (b / latency in s) and added_ns (what the deepest run added to it);
    with return_measurements=True, (DataFrame, [Measurement per batch size])."""
    bs = list(batch_sizes)
    if not bs:
        raise ValueError("sweep needs at least one batch size")
    rows, ms = [], []
    for b in bs:
        if not isinstance(b, (int, np.integer)) or isinstance(b, bool) or b <= 0:
            raise ValueError("batch sizes must be positive ints, not %r" % (b,))
        m = measure(make(b), levels=levels, warmup=warmup, repeat=repeat, trim=trim,
                    batch_size=int(b), progress=progress, **kwargs)
        ov = m.overhead
        m_rows = ov[ov["level"] == "M"]
        rows.append({"batch_size": int(b), "latency_ns": m.latency_ns,
                     "std_ns": float(m_rows["std_ns"].iloc[0]),
                     "throughput_per_s": m.throughput_per_s,
                     "added_ns": float(m_rows["added_ns"].iloc[-1])})
        ms.append(m)
    df = pd.DataFrame(rows)
    return (df, ms) if return_measurements else df


__all__ = ["measure", "sweep", "Measurement", "trimmed_stats"]
