"""xsp.measure and xsp.sweep: the runs of a leveled measurement (docs/analyses.md).

measure() runs the workload unprofiled to warm up, then once per prefix of the levels asked for
(M; M+L; M+L+G), `repeat` iterations each, and hands the traces to xsp.Measurement, which takes
every span's latency from the shallowest run that records its level (xsp/values/measurement.py
says how spans of different runs are matched and how the statistics are made).
"""
import sys

import numpy as np
import pandas as pd

from xsp.core.errors import LevelUnavailableError, ProfilerError, XSPWarning
from xsp.core.levels import parse_levels
from xsp.producers.profiler import profile
from xsp.values.measurement import Measurement
from xsp.values.trace import KINDS

RUN_ORDER = ("M", "ML", "MLG")


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
        from xsp.producers.profiler import _import_torch, gpu_unavailable_reason
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
        from xsp.values.compiling import compile_mask
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


__all__ = ["measure", "sweep"]
