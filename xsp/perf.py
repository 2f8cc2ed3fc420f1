"""Performance tests: measure a workload, pin what it does, compare it with a stored run.

The library behind the pytest plugin (xsp.pytest_plugin, docs/pytest.md), usable without
pytest:

    r = xsp.perf.measure(train_step, levels="ML", repeat=20)
    r.check(latency="5 ms", ops={"aten::mm": 6}, bytes_allocated="2 MiB", graph_breaks=0)
    xsp.save(r, "baseline/train_step.json")
    r.compare(xsp.perf.load("baseline/train_step.json"), threshold=5).check()

A Result holds, from one xsp.measure of fn:
  - latency: the per-iteration samples of the model latency (the step, in the M run, where
    nothing deeper inflates it), with mean, std (ddof 1), median, min and max;
  - counts, per iteration, which a performance test can pin exactly because they do not
    depend on timing: ops per name (level L), kernel launches, copies and syncs (level G),
    bytes and blocks allocated (PyTorch's memory reporting to profilers, one extra call),
    graph breaks and recompiles of compiled code (Dynamo's own records over the whole
    measurement, warm-up included, where compilation happens);
  - per-iteration time samples of each leaf layer (forward, by name and type), of each op
    (self time) and of each kernel: what names the offenders when a budget or a baseline
    fails.

Why it is built this way:
  - A latency verdict is never taken from one sample: a budget fails only when the mean
    exceeds it by more than its noise (NOISE_K standard errors), and a baseline comparison
    calls a change only beyond the noise of both runs (xsp.compare's Welch-style threshold)
    and beyond the threshold share.
  - Counts are per iteration and must be the same in every iteration; where they vary, the
    largest is pinned and the spread is reported.
  - A Result is plain data (JSON): a baseline written on one machine loads on another, and
    results travel from pytest-xdist's workers to the controller as they are.
"""
import datetime
import json
import math
import numbers
import os
import platform
import re
import socket
import sys

import numpy as np

from xsp import report
from xsp._version import __version__
from xsp.core.errors import ProfilerError
from xsp.core.fmt import fmt_bytes, fmt_count, fmt_ns, fmt_signed
from xsp.core.util import atomic_write, deprecated, printable
from xsp.producers.dynamo import describe_break, dynamo_breaks
from xsp.values.trace import KINDS

SCHEMA = "xsp.perf/1"
NOISE_K = 2.0
OFFENDERS = 5                 # layers and ops named in a failure message, at most
# the scalar counts, per iteration; None where not measured (no level G, no torch._dynamo)
COUNTS = ("ops_total", "kernels", "copies", "copies_htod", "copies_dtoh", "copy_bytes",
          "syncs", "bytes_allocated", "allocations", "graph_breaks", "recompiles")
# the counts by name
NAMED_COUNTS = ("ops", "kernels_by_name")
COUNT_WHAT = {"ops_total": "ops", "kernels": "kernel launches", "copies": "copies",
              "copies_htod": "host-to-device copies", "copies_dtoh": "device-to-host copies",
              "copy_bytes": "bytes copied", "syncs": "synchronisations",
              "bytes_allocated": "bytes allocated", "allocations": "allocations",
              "graph_breaks": "graph breaks", "recompiles": "recompiles"}
HTOD, DTOH = 1, 2             # CUpti_ActivityMemcpyKind


class BudgetExceeded(AssertionError):
    """A performance test's budget or baseline failed; the message names the offenders.
    .failures: the lines of the message that say what failed."""

    def __init__(self, message, failures=()):
        super().__init__(message)
        self.failures = list(failures)


class BaselineError(ValueError):
    """A baseline file cannot be read: .path and, for malformed JSON, .offset (a byte
    offset) or, for a well-formed file of the wrong shape, .field (where in the record)."""

    def __init__(self, message, path=None, offset=None, field=None):
        super().__init__(message)
        self.path = path
        self.offset = offset
        self.field = field


# -- units ----------------------------------------------------------------------------------
_DUR = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
_BYTES = {"b": 1, "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3, "kib": 1024, "mib": 1024 ** 2,
          "gib": 1024 ** 3}
_NUM = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-zµ]*)\s*$")


def parse_duration(value, what="latency"):
    """A duration in ns from '2 ms', '150us', '1.5 s', '800 ns', or a number of seconds (as
    time.perf_counter counts them).  ValueError saying what was wrong otherwise."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        if not 0 < value < math.inf:
            raise ValueError("%s must be a positive duration, not %r" % (what, value))
        return float(value) * 1e9
    m = _NUM.match(value) if isinstance(value, str) else None
    if not m or m.group(2) not in _DUR:
        raise ValueError("%s must be a number of seconds or a string such as '2 ms' (units "
                         "ns, us, ms, s), not %r" % (what, value))
    ns = float(m.group(1)) * _DUR[m.group(2)]
    if ns <= 0:
        raise ValueError("%s must be a positive duration, not %r" % (what, value))
    return ns


def parse_bytes(value, what="bytes_allocated"):
    """A byte count from an int or '4 MiB', '512 kB', '1.5 GB' (units B, kB, MB, GB, KiB,
    MiB, GiB).  ValueError otherwise."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if value < 0:
            raise ValueError("%s must be >= 0, not %r" % (what, value))
        return int(value)
    m = _NUM.match(value) if isinstance(value, str) else None
    unit = m.group(2).lower() if m else None
    if unit == "":
        unit = "b"
    if not m or unit not in _BYTES:
        raise ValueError("%s must be an int or a string such as '4 MiB' (units B, kB, MB, "
                         "GB, KiB, MiB, GiB), not %r" % (what, value))
    return int(round(float(m.group(1)) * _BYTES[unit]))


def _count_text(key, n):
    """Count key's value n as text: bytes for the byte counts, else a plain count."""
    return fmt_bytes(n) if key.endswith("bytes") or key == "bytes_allocated" else fmt_count(n)


# -- statistics -----------------------------------------------------------------------------
def stats(samples):
    """{n, mean_ns, std_ns (ddof 1, NaN below 2), median_ns, min_ns, max_ns} of samples."""
    x = sorted(float(v) for v in samples)
    n = len(x)
    if not n:
        return {"n": 0, "mean_ns": math.nan, "std_ns": math.nan, "median_ns": math.nan,
                "min_ns": math.nan, "max_ns": math.nan}
    mean = sum(x) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in x) / (n - 1)) if n > 1 else math.nan
    med = x[n // 2] if n % 2 else 0.5 * (x[n // 2 - 1] + x[n // 2])
    return {"n": n, "mean_ns": mean, "std_ns": std, "median_ns": med, "min_ns": x[0],
            "max_ns": x[-1]}


def _figure(before, after):
    """xsp.compare's figure of two sample lists (means, noise, verdict)."""
    from xsp.analysis.compare import _figure as fig
    return fig(np.asarray(before, dtype=np.float64), np.asarray(after, dtype=np.float64),
               NOISE_K)


# -- what one measurement did ---------------------------------------------------------------
def _dynamo_state():
    """(graph breaks so far {reason: n}, compilation metrics so far (a list), unique graphs)
    of torch._dynamo when it is imported, else None."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return None
    c = utils.counters
    try:
        metrics = list(utils.get_compilation_metrics())
    except Exception:           # a torch without it: recompiles unknown
        metrics = None
    made = dynamo_breaks()          # every break Dynamo made, as explain counts them
    breaks = list(made) if made is not None else dict(c.get("graph_break", {}))
    return (breaks, metrics, int(c.get("stats", {}).get("unique_graphs", 0)))


def _dynamo_delta(before, after):
    """{graph_breaks, recompiles, graphs, graph_break_reasons, recompile_reasons} between two
    _dynamo_state()s (before None: Dynamo was imported during the measurement), or None when
    Dynamo was never imported (nothing was compiled)."""
    if after is None:
        return None
    b_breaks, b_metrics, b_graphs = before if before is not None else (None, [], 0)
    a_breaks, a_metrics, a_graphs = after
    reasons = {}
    if isinstance(a_breaks, list):      # Dynamo's breaks (xsp.compiled.dynamo_breaks)
        seen = set(map(id, b_breaks)) if isinstance(b_breaks, list) else set()
        for r in a_breaks:
            if id(r) not in seen:
                why, where = describe_break(r)
                k = ("%s (%s)" % (why, where) if where else why)[:200]
                reasons[k] = reasons.get(k, 0) + 1
    else:                               # a torch without that list: its counter
        b_breaks = b_breaks if isinstance(b_breaks, dict) else {}
        for k, v in a_breaks.items():
            d = int(v) - int(b_breaks.get(k, 0))
            if d > 0:
                reasons[str(k).split("\n")[0][:200]] = d
    recompiles, why = None, []
    if a_metrics is not None and b_metrics is not None:
        seen = set(id(m) for m in b_metrics)
        new = [m for m in a_metrics if id(m) not in seen]
        why = [str(getattr(m, "recompile_reason", None)).split("\n")[0][:200] for m in new
               if getattr(m, "recompile_reason", None)]
        recompiles = len(why)
    return {"graph_breaks": sum(reasons.values()), "recompiles": recompiles,
            "graphs": a_graphs - b_graphs, "graph_break_reasons": reasons,
            "recompile_reasons": why}


def _count_memory(fn, sync):
    """One call of fn inside a memory-counting window: ({allocs, alloc_bytes} summed over
    devices), or (None, why) when allocations cannot be counted here."""
    try:
        from xsp import _torch
    except ImportError as exc:
        return None, "xsp._torch is not built (%s)" % exc
    try:
        _torch.mem_begin()
    except RuntimeError as exc:
        return None, str(exc)
    try:
        fn()
        if sync is not None:
            sync()
    except RuntimeError as exc:
        if "Profiler is already enabled" in str(exc):
            # fn runs torch.profiler itself, whose profiler state cannot sit beside the
            # counter's on the thread: the call is not counted (its timed runs were fine)
            return None, ("fn starts torch.profiler itself, which cannot run beside xsp's "
                          "allocation counter (one profiler state per thread)")
        exc.add_note("(in xsp.perf's extra call of fn that counts allocations; "
                     "count_memory=False leaves it out)")
        raise
    finally:
        counts = _torch.mem_end()       # the window closes however the call ended
    return {"allocs": sum(d["allocs"] for d in counts.values()),
            "alloc_bytes": sum(d["alloc_bytes"] for d in counts.values()),
            "by_device": counts}, None


def _iteration_rows(m, run):
    """One DataFrame of the spans inside the iterations of every round of one run of a
    Measurement: kind, name, type, duration_ns, self_ns, iteration (0.., pooled across the
    rounds as the Measurement numbers them), leaf (a module span with no module below it),
    copy_kind and bytes (memcpy spans)."""
    import pandas as pd
    from xsp.analysis.tables import redispatches
    frames = []
    mod = KINDS.index("module")
    for t, (it, _) in zip(m.all_traces[run], m._keys[run]):
        df = t.to_pandas()
        cols = {c: df[c].to_numpy() for c in ("kind", "name", "duration_ns", "self_ns")}
        cols["type"] = (df["type"].to_numpy() if "type" in df.columns
                        else np.full(len(df), None, dtype=object))
        is_mod = t.kind_codes == mod
        up = t.nearest_ancestor(is_mod, include_self=False)
        leaf = is_mod.copy()
        leaf[up[is_mod & (up >= 0)]] = False
        cols["leaf"] = leaf
        # an op's redispatch to another overload is one call with it, as torch.profiler counts
        cols["redispatch"] = redispatches(t.kind_codes == KINDS.index("op"),
                                          df["name"].to_numpy(), t.parent_ids)
        for key in ("copy_kind", "bytes"):
            ids, vals = t.attr_column(key)
            col = np.full(len(df), -1, dtype=np.int64)
            if len(ids):
                col[ids] = np.asarray(vals, dtype=np.int64)
            cols[key] = col
        cols["iteration"] = it
        frames.append(pd.DataFrame(cols)[it >= 0])
    return pd.concat(frames, ignore_index=True)


def _per_iteration_counts(rows, n):
    """{name: per-iteration count list (length n)} of rows (kind already selected)."""
    out = {}
    for (name, it), c in rows.groupby(["name", "iteration"]).size().items():
        out.setdefault(str(name), [0] * n)[int(it)] = int(c)
    return out


def _per_iteration_sums(rows, key_cols, value, n):
    out = {}
    for key, s in rows.groupby(key_cols + ["iteration"], dropna=False)[value].sum().items():
        k = "|".join("?" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)
                     for v in key[:-1])
        out.setdefault(k, [0.0] * n)[int(key[-1])] = float(s)
    return out


def _pinned(per_it):
    """(pinned count: the largest over the iterations, [min, max] when they differ else
    None) of a per-iteration list."""
    return (max(per_it), [min(per_it), max(per_it)] if min(per_it) != max(per_it) else None)


def _machine():
    out = {"host": socket.gethostname(), "python": platform.python_version(),
           "platform": platform.platform(), "processor": platform.processor() or
           platform.machine(), "cpus": os.cpu_count()}
    out["xsp"] = __version__
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch"] = torch.__version__
        try:
            if torch.cuda.is_available():
                out["gpu"] = torch.cuda.get_device_name()
        except Exception:
            pass
    return out


def from_measurement(m, *, name, memory=None, memory_why=None, dynamo=None):
    """A Result from an xsp.Measurement; memory: _count_memory's counts (None: not counted,
    memory_why says why); dynamo: _dynamo_delta's dict (None: nothing was compiled)."""
    # iterations kept per run: those in which torch.compile compiled are left out of every
    # count and time, as of the latency (Measurement.compiling)
    kept = getattr(m, "n_iterations", None) or {}
    runs = m.runs
    m_rows = _iteration_rows(m, "M")
    lat = m_rows[m_rows["kind"] == "step"].sort_values("iteration")["duration_ns"]
    latency = [float(v) for v in lat.to_numpy()]
    # the step's mean in each run: the time of the layers and ops is a share of the step of
    # their own run (the M run's latency has no recording of ops in it)
    step_ns = {}
    for run in runs:
        rows = m_rows if run == "M" else _iteration_rows(m, run)
        st = rows[rows["kind"] == "step"]["duration_ns"].to_numpy(np.float64)
        step_ns[run] = float(st.mean()) if len(st) else None
    counts = {k: None for k in COUNTS}
    named = {"ops": {}, "kernels_by_name": {}}
    varying = {}
    times = {"layers": {}, "ops": {}, "kernels": {}}
    why = {}
    if "ML" in runs:
        n_it = kept.get("ML", m.repeat * m.rounds)
        rows = _iteration_rows(m, "ML")
        ops = rows[rows["kind"] == "op"]
        per_it = _per_iteration_counts(ops[~ops["redispatch"]], n_it)
        for k, v in per_it.items():
            named["ops"][k], spread = _pinned(v)
            if spread:
                varying["op " + k] = spread
        tot = [0] * n_it
        for v in per_it.values():
            tot = [a + b for a, b in zip(tot, v)]
        counts["ops_total"], spread = _pinned(tot) if n_it else (0, None)
        if spread:
            varying["ops_total"] = spread
        leaf = rows[rows["leaf"]]
        times["layers"] = _per_iteration_sums(leaf, ["name", "type"], "duration_ns", n_it)
        times["modules"] = _per_iteration_sums(rows[rows["kind"] == "module"],
                                               ["name", "type"], "duration_ns", n_it)
        times["ops"] = _per_iteration_sums(ops, ["name"], "self_ns", n_it)
    else:
        why["ops"] = "level L not measured"
    if "MLG" in runs:
        n_it = kept.get("MLG", m.repeat * m.rounds)
        rows = _iteration_rows(m, "MLG")
        kern = rows[rows["kind"] == "kernel"]
        per_it = _per_iteration_counts(kern, n_it)
        for k, v in per_it.items():
            named["kernels_by_name"][k], spread = _pinned(v)
            if spread:
                varying["kernel " + k] = spread
        times["kernels"] = _per_iteration_sums(kern, ["name"], "duration_ns", n_it)
        copies = rows[rows["kind"] == "memcpy"]
        syncs = rows[rows["kind"] == "sync"]
        for key, sel, col in (("kernels", kern, None), ("copies", copies, None),
                              ("copies_htod", copies[copies["copy_kind"] == HTOD], None),
                              ("copies_dtoh", copies[copies["copy_kind"] == DTOH], None),
                              ("copy_bytes", copies, "bytes"), ("syncs", syncs, None)):
            if col is None:
                v = np.bincount(sel["iteration"].to_numpy(np.int64), minlength=n_it)[:n_it]
            else:
                v = np.bincount(sel["iteration"].to_numpy(np.int64),
                                weights=np.maximum(sel[col].to_numpy(np.float64), 0),
                                minlength=n_it)[:n_it]
            counts[key], spread = _pinned([int(x) for x in v])
            if spread:
                varying[key] = spread
    else:
        why["kernels"] = "level G not measured"
    if memory is not None:
        counts["bytes_allocated"] = int(memory["alloc_bytes"])
        counts["allocations"] = int(memory["allocs"])
    else:
        why["bytes_allocated"] = memory_why or "not counted"
    compile_info = None
    if dynamo is not None:
        counts["graph_breaks"] = dynamo["graph_breaks"]
        counts["recompiles"] = dynamo["recompiles"]
        compile_info = {"graphs": dynamo["graphs"],
                        "graph_break_reasons": dynamo["graph_break_reasons"],
                        "recompile_reasons": dynamo["recompile_reasons"]}
    else:
        # torch.compile imports torch._dynamo: without it nothing can have been compiled
        counts["graph_breaks"] = counts["recompiles"] = 0
    return Result({
        "schema": SCHEMA, "name": name, "levels": m.levels, "runs": list(runs),
        "repeat": m.repeat, "rounds": m.rounds, "warmup": m.warmup,
        "latency": {"samples_ns": latency, **stats(latency)},
        "step_ns": step_ns,
        "leveled": [{k: (None if isinstance(v, float) and math.isnan(v) else v)
                     for k, v in r.items()} for r in m.overhead.to_dict("records")],
        "counts": counts, "named": named, "varying": varying, "unmeasured": why,
        "compile": compile_info, "times": times, "machine": _machine(),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }, measurement=m)


def measure(fn, levels="ML", *, repeat=10, warmup=3, rounds=1, trim=0.1, name=None,
            count_memory=True, sync=None, **profile_kwargs):
    """Measures fn() with xsp.measure (warm-up, then one run per level prefix, repeat
    iterations each), then, with count_memory, calls it once more counting the allocations
    PyTorch reports, and returns a Result.  Dynamo's graph breaks and recompiles are counted
    over all of it.  name: the Result's name (default: fn's).  Other arguments go to
    xsp.measure (progress is off)."""
    from xsp.producers.leveled import _cuda_sync
    from xsp.producers.leveled import measure as leveled_measure
    if name is None:
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or "fn"
    before = _dynamo_state()
    m = leveled_measure(fn, levels, warmup=warmup, repeat=repeat, rounds=rounds, trim=trim,
                        progress=False, sync=sync, **profile_kwargs)
    memory, memory_why = None, None
    if count_memory:
        sync_fn = _cuda_sync() if sync is None else (_cuda_sync() if sync else None)
        memory, memory_why = _count_memory(fn, sync_fn)
    dynamo = _dynamo_delta(before, _dynamo_state())
    return from_measurement(m, name=name, memory=memory, memory_why=memory_why,
                            dynamo=dynamo)


# -- the result -----------------------------------------------------------------------------
class Result:
    """What one performance measurement did (see the module docstring).  data: the JSON
    record (docs/pytest.md, "The result file"); measurement: the xsp.Measurement it came from
    (None for a loaded one).  latency: the latency dict (samples_ns, n, mean_ns, std_ns,
    median_ns, min_ns, max_ns); counts: {count: per-iteration value or None}; ops: {op name:
    calls per iteration}; kernels_by_name likewise; compile: graphs, graph break and
    recompile reasons (None when nothing was compiled)."""

    def __init__(self, data, measurement=None, path=None):
        self.data = _clean(data)
        self.measurement = measurement
        self.path = path

    name = property(lambda self: self.data["name"])
    @property
    def latency(self):
        """The latency record (an xsp.values.measurement.Latency; trim 0)."""
        from xsp.values.measurement import Latency
        d = self.data["latency"]
        return Latency(**{k: d.get(k) for k in Latency.FIELDS if k != "trim"})
    counts = property(lambda self: self.data["counts"])
    ops = property(lambda self: self.data["named"]["ops"])
    kernels_by_name = property(lambda self: self.data["named"]["kernels_by_name"])
    compile = property(lambda self: self.data["compile"])

    @property
    def trace(self):
        """The deepest run's trace (None for a loaded Result)."""
        return self.measurement.trace if self.measurement is not None else None

    # -- budgets --------------------------------------------------------------------------
    def check(self, *, latency=None, layers=None, ops=None, kernels=None, **limits):
        """Raises BudgetExceeded, naming the offenders, when a budget is exceeded; returns
        self otherwise.  Every budget is an upper bound per iteration:
          latency: a duration ('2 ms', or seconds); fails only when the mean latency is above
              it by more than its noise (NOISE_K standard errors), never on one sample;
          layers: {qualified module name: duration}: the module's forward time per iteration
              (all its calls, at level L from the ML run), with the same noise rule;
          ops: an int (all ops) or {op name: calls}; kernels: an int (all launches) or
              {kernel name: launches};
          copies, copies_htod, copies_dtoh, syncs, allocations, graph_breaks, recompiles: ints;
          copy_bytes, bytes_allocated: bytes (an int or '4 MiB').
        A budget on a count that was not measured (kernels without level G) fails, saying
        why: it cannot be checked."""
        __tracebackhide__ = True
        failures, details = [], []
        if latency is not None:
            budget = parse_duration(latency)
            lat = self.latency
            over = _over_budget(lat, budget)
            if over:
                failures.append("latency %s ± %s (%d iterations) is over the budget %s" % (
                    fmt_ns(lat.mean_ns), fmt_ns(lat.std_ns), lat.n, over))
                details.extend(self._top_lines())
        for name, value in (layers or {}).items():
            budget = parse_duration(value, "the budget of layer %r" % (name,))
            table = self.data["times"].get("modules") or {}
            keys = [k for k in table if k.split("|")[0] == name]
            if "ML" not in self.data["runs"]:
                failures.append("layer %s budget cannot be checked: level L not measured"
                                % name)
                continue
            if not keys:
                failures.append("layer %s: no module of that name ran (modules: %s)" % (
                    name, ", ".join(sorted(set(k.split("|")[0] for k in table))[:12]) or
                    "none"))
                continue
            st = stats([sum(v) for v in zip(*(table[k] for k in keys))])
            over = _over_budget(st, budget)
            if over:
                failures.append("layer %s: %s ± %s per iteration is over the budget %s" % (
                    name, fmt_ns(st["mean_ns"]), fmt_ns(st["std_ns"]), over))
        for key, value, named_key, total_key in (("ops", ops, "ops", "ops_total"),
                                                 ("kernels", kernels, "kernels_by_name",
                                                  "kernels")):
            if value is None:
                continue
            if self.counts[total_key] is None:
                failures.append("%s budget cannot be checked: %s" % (
                    key, self.data["unmeasured"].get(key, "not measured")))
                continue
            have = self.data["named"][named_key]
            if isinstance(value, dict):
                for nm, lim in value.items():
                    lim = _count_limit(lim, "%s[%r]" % (key, nm))
                    if have.get(nm, 0) > lim:
                        failures.append("%s: %d %s per iteration, budget %d (+%d)" % (
                            nm, have.get(nm, 0), "calls" if key == "ops" else "launches",
                            lim, have.get(nm, 0) - lim))
            else:
                lim = _count_limit(value, key)
                if self.counts[total_key] > lim:
                    failures.append("%s: %d per iteration, budget %d (+%d)" % (
                        COUNT_WHAT[total_key], self.counts[total_key], lim,
                        self.counts[total_key] - lim))
                    details.append("  most frequent: " + ", ".join(
                        "%s x%d" % (nm, c) for nm, c in sorted(
                            have.items(), key=lambda x: (-x[1], x[0]))[:OFFENDERS]))
        for key, value in limits.items():
            if key not in COUNT_WHAT or key == "ops_total":
                raise TypeError("check() got an unknown budget %r; budgets: latency, layers, ops, "
                                "kernels, %s" % (key, ", ".join(
                                    k for k in COUNTS if k not in ("ops_total", "kernels"))))
            if value is None:
                continue
            lim = (parse_bytes(value, key) if key in ("bytes_allocated", "copy_bytes")
                   else _count_limit(value, key))
            have = self.counts[key]
            if have is None:
                failures.append("%s budget cannot be checked: %s" % (
                    COUNT_WHAT[key], self._why(key)))
            elif have > lim:
                failures.append("%s: %s per iteration, budget %s (+%s)" % (
                    COUNT_WHAT[key], _count_text(key, have), _count_text(key, lim),
                    _count_text(key, have - lim)))
                if key in ("graph_breaks", "recompiles") and self.compile:
                    reasons = (self.compile["graph_break_reasons"] if key == "graph_breaks"
                               else self.compile["recompile_reasons"])
                    items = reasons.items() if isinstance(reasons, dict) else \
                        [(r, 1) for r in reasons]
                    for r, c in list(items)[:OFFENDERS]:
                        details.append("  %s x%d: %s" % (COUNT_WHAT[key], c, r))
        rec = getattr(self, "_record", None)
        if rec is not None:             # the pytest plugin's record of this measurement
            rec["budget"] = "exceeded" if failures else (rec.get("budget") or "ok")
            rec["failures"].extend(f for f in failures if f not in rec["failures"])
            if failures:
                rec["status"] = "budget exceeded"
        if failures:
            raise BudgetExceeded(self._message("budget exceeded", failures, details), failures)
        return self

    def _why(self, key):
        u = self.data["unmeasured"]
        if key in ("kernels", "copies", "copies_htod", "copies_dtoh", "copy_bytes", "syncs"):
            return u.get("kernels", "not measured")
        if key in ("bytes_allocated", "allocations"):
            return u.get("bytes_allocated", "not measured")
        if key in ("graph_breaks", "recompiles"):
            if self.compile is not None and self.counts[key] is None:
                return "this torch keeps no compilation metrics"
            return u.get("graph_breaks", "not measured")
        return u.get(key, "not measured")

    def _top_lines(self):
        """Where the time goes (no baseline to say what grew): the largest leaf layers
        (forward) and ops (self time), per iteration."""
        out = []
        mean = (self.data.get("step_ns") or {}).get("ML")
        for title, table in (("layers (forward)", self.data["times"]["layers"]),
                             ("ops (self time)", self.data["times"]["ops"])):
            rows = sorted(((sum(v) / len(v), k) for k, v in table.items() if v),
                          key=lambda x: -x[0])[:OFFENDERS]
            if rows:
                out.append("  largest %s:" % title)
                out.extend("    %-40s %12s  %5.1f%% of the step (ML run)" % (
                    printable(k.replace("|", " (") + (")" if "|" in k else "")), fmt_ns(v),
                    100.0 * v / mean if mean else math.nan) for v, k in rows)
        return out

    def _message(self, head, failures, details):
        n = self.latency.n
        lines = ["xsp: %s: %s (levels %s, %d iteration%s)" % (
            head, self.name, self.data["levels"], n, "" if n == 1 else "s")]
        lines.extend("  " + f for f in failures)
        lines.extend(details)
        return printable("\n".join(lines))

    # -- baselines ------------------------------------------------------------------------
    def compare(self, baseline, *, threshold=5.0, allow=None):
        """A Verdict of this run against baseline (a Result).  threshold: percent; the
        latency fails when it is slower beyond the noise of both runs AND by more than
        threshold percent.  allow: {count: allowance} where an allowance is an int (absolute)
        or 'N%' (relative) and count a name of COUNTS, 'ops' (each op's count),
        'kernels_by_name', or 'op:NAME' for one op; counts not listed must match exactly."""
        return Verdict(self, baseline, threshold, allow or {})

    # -- files ----------------------------------------------------------------------------
    def to_json(self):
        return json.dumps(self.data, indent=1, sort_keys=True, allow_nan=False,
                          default=_json_default)

    def __xsp_save__(self, path, format=None):
        """xsp.save(result, path): the record as JSON (atomically), read back by
        xsp.perf.load; returns path.  ValueError for a format other than None or "perf"."""
        if format not in (None, "perf"):
            raise ValueError("a performance Result is saved as its JSON record (format "
                             "'perf'), not as %r" % (format,))
        text = self.to_json()
        atomic_write(path, lambda f: f.write(text))
        return path

    def save(self, path):
        """Deprecated: xsp.save(result, path)."""
        deprecated("Result.save(path)", "xsp.save(result, path)")
        return self.__xsp_save__(path)

    def __xsp_report__(self, kind, top=10):
        """xsp.report.text(result) and xsp.report.html(result): the latency, the counts and
        where the time goes; a Result that has its measurement adds the measurement's report."""
        lat = self.latency
        lines = [repr(self)[1:-1], "  latency: %s ± %s (median %s, %d iteration%s)" % (
            fmt_ns(lat.mean_ns), fmt_ns(lat.std_ns), fmt_ns(lat.median_ns), lat.n,
            "" if lat.n == 1 else "s")]
        lines += ["  %s: %s" % (k, _count_text(k, v)) for k, v in self.counts.items()
                  if v is not None]
        lines += self._top_lines()
        text = printable("\n".join(lines)) + "\n"
        if kind == "text":
            return text + ("\n" + report.text(self.measurement, top=top)
                           if self.measurement is not None else "")
        import html as _h
        frag = '<div class="xsp-result"><pre>%s</pre></div>' % _h.escape(text)
        if self.measurement is not None:
            frag += report.html_fragment(self.measurement, top=top)
        return frag

    def __repr__(self):
        lat = self.latency
        return "<xsp.perf.Result %s: %s ± %s over %d iterations, %s ops>" % (
            self.name, fmt_ns(lat.mean_ns), fmt_ns(lat.std_ns), lat.n,
            _count_text("ops_total", self.counts["ops_total"]))


def _over_budget(st, budget):
    """The budget rule for a duration: None when the mean of st (stats()) is within budget, or
    above it by no more than its noise (NOISE_K standard errors; with one sample, none); else
    the text "BUDGET by +DELTA (+SHARE%), beyond its noise (NOISE)"."""
    if not st["n"] or st["mean_ns"] <= budget:
        return None
    noise = NOISE_K * st["std_ns"] / math.sqrt(st["n"]) if st["n"] > 1 else math.nan
    delta = st["mean_ns"] - budget
    if delta <= noise:
        return None
    return "%s by %s, beyond its noise (%s)" % (fmt_ns(budget), fmt_signed(delta, delta / budget),
                                               fmt_ns(noise))


def _json_default(v):
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return None if math.isnan(v) else float(v)
    if isinstance(v, np.bool_):
        return bool(v)
    raise TypeError("not JSON: %r" % (v,))


BUDGETS = ("latency", "layers", "ops", "kernels") + tuple(
    k for k in COUNTS if k not in ("ops_total", "kernels"))


def check_budgets(where, budgets):
    """Validates Result.check's budgets without a Result: TypeError for an unknown budget,
    ValueError for a bad value, both naming where."""
    try:
        for k, v in budgets.items():
            if k not in BUDGETS:
                raise TypeError("unknown budget %r; budgets: %s" % (k, ", ".join(BUDGETS)))
            if v is None:
                continue
            if k == "latency":
                parse_duration(v)
            elif k == "layers":
                if not isinstance(v, dict):
                    raise ValueError("the layers budget must be a dict {name: duration}")
                for nm, d in v.items():
                    parse_duration(d, "the budget of layer %r" % (nm,))
            elif k in ("ops", "kernels"):
                for nm, lim in (v.items() if isinstance(v, dict) else [(None, v)]):
                    _count_limit(lim, k if nm is None else "%s[%r]" % (k, nm))
            elif k in ("bytes_allocated", "copy_bytes"):
                parse_bytes(v, k)
            else:
                _count_limit(v, k)
    except (TypeError, ValueError) as exc:
        raise type(exc)("%s: %s" % (where, exc)) from None


def allowance_key(k):
    """Whether k names an allowance: a count, 'ops', 'kernels_by_name', 'op:NAME' or
    'kernel:NAME'."""
    return isinstance(k, str) and (k in COUNTS or k in NAMED_COUNTS or
                                   k.startswith(("op:", "kernel:")))


def _count_limit(v, what):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
        raise ValueError("the %s budget must be an int >= 0, not %r" % (what, v))
    return int(v)


def _clean(x):
    """NaN -> None, recursively, so that the record is strict JSON."""
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


# -- loading --------------------------------------------------------------------------------
_SHAPE = {"schema": str, "name": str, "levels": str, "repeat": int, "rounds": int,
          "latency": dict, "counts": dict, "named": dict, "times": dict, "unmeasured": dict,
          "varying": dict}


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


MAX_DEPTH = 32            # a result nests 4 levels; deeper is not one (checked without recursion)


def _too_deep(data, limit=MAX_DEPTH):
    stack = [(data, 1)]
    while stack:
        v, d = stack.pop()
        if d > limit:
            return True
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return False


def from_dict(data, path=None):
    """A Result from its JSON record; BaselineError (with .field) when it is not one."""
    def bad(field, msg):
        raise BaselineError("%s: not an xsp.perf result: %s %s" % (path or "<data>", field,
                                                                    msg), path, field=field)
    if _too_deep(data):
        raise BaselineError("%s: nested too deeply to be a result file (more than %d levels)"
                            % (path or "<data>", MAX_DEPTH), path)
    if not isinstance(data, dict):
        bad("(top level)", "is a %s, not an object" % type(data).__name__)
    if data.get("schema") != SCHEMA:
        bad("schema", "is %r, not %r" % (data.get("schema"), SCHEMA))
    for k, t in _SHAPE.items():
        if not isinstance(data.get(k), t) or (t is int and isinstance(data.get(k), bool)):
            bad(k, "is missing or not a %s" % t.__name__)
    for k in ("machine", "step_ns", "compile"):
        if data.get(k) is not None and not isinstance(data[k], dict):
            bad(k, "is not an object")
    samples = data["latency"].get("samples_ns")
    if not isinstance(samples, list) or not samples or not all(
            _number(v) and v >= 0 for v in samples):
        bad("latency.samples_ns", "is not a non-empty list of finite numbers >= 0")
    n = data["latency"].get("n")
    if not isinstance(n, int) or isinstance(n, bool) or n != len(samples):
        bad("latency.n", "is not the number of samples (%d)" % len(samples))
    for k in COUNTS:
        if k not in data["counts"]:
            bad("counts.%s" % k, "is missing")
        v = data["counts"][k]
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            bad("counts.%s" % k, "is not an int >= 0 or null")
    for k in NAMED_COUNTS:
        d = data["named"].get(k)
        if not isinstance(d, dict) or not all(isinstance(v, int) and not isinstance(v, bool)
                                              and v >= 0 for v in d.values()):
            bad("named.%s" % k, "is not an object of ints >= 0")
    for k in ("layers", "ops", "kernels", "modules"):
        d = data["times"].get(k, {} if k == "modules" else None)
        if not isinstance(d, dict) or not all(
                isinstance(v, list) and len(v) == n and all(_number(x) for x in v)
                for v in d.values()):
            bad("times.%s" % k, "is not an object of lists of %d finite numbers (one per "
                "iteration)" % n)
    return Result(data, path=path)


def _no_constant(name):
    raise ValueError(name)


def load(path):
    """Reads a Result's JSON file.  BaselineError naming the file and the byte offset of
    malformed JSON (NaN and Infinity are not JSON), or the field of a record of the wrong
    shape, or saying that the path is not a regular file; OSError as open raises."""
    import stat
    path = os.fspath(path)
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise BaselineError("%s: not a regular file (a %s)" % (
            path, "directory" if stat.S_ISDIR(st.st_mode) else "special file"), path)
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BaselineError("%s: byte %d: not UTF-8" % (path, exc.start), path,
                            offset=exc.start) from None
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        off = len(text[:exc.pos].encode("utf-8"))
        raise BaselineError("%s: byte %d: malformed JSON: %s" % (path, off, exc.msg), path,
                            offset=off) from None
    except ValueError as exc:          # NaN, Infinity, -Infinity
        m = re.search(r"-?\b%s\b" % re.escape(str(exc).lstrip("-")), text)
        off = len(text[:m.start()].encode("utf-8")) if m else None
        raise BaselineError("%s: byte %s: %s is not JSON (results are strict JSON)" % (
            path, off, exc), path, offset=off) from None
    except RecursionError:
        raise BaselineError("%s: nested too deeply to be a result file" % path, path) from None
    try:
        return from_dict(data, path)
    except RecursionError:
        raise BaselineError("%s: nested too deeply to be a result file" % path, path) from None


# -- comparing with a baseline ---------------------------------------------------------------
def _allowance(allow, key, base):
    """The allowed absolute difference of a count whose baseline value is base."""
    a = allow.get(key)
    if a is None:
        return 0
    if isinstance(a, str) and a.strip().endswith("%"):
        try:
            pct = float(a.strip()[:-1])
        except ValueError:
            pct = -1
        if pct < 0:
            raise ValueError("allowance for %s must be an int or 'N%%', not %r" % (key, a))
        return abs(base) * pct / 100.0
    if isinstance(a, bool) or not isinstance(a, numbers.Real) or a < 0:
        raise ValueError("allowance for %s must be an int or 'N%%', not %r" % (key, a))
    return a


class Verdict:
    """This run against a baseline.  latency: xsp.compare's figure (before_ns, after_ns, std,
    delta_ns, delta_share, noise_ns, verdict); regressed: the latency is slower beyond the
    noise and the threshold; count_changes: [(what, before, after)] beyond the allowances;
    offenders: [(what, figure)] of the layers, ops and kernels slower beyond their noise,
    largest change first; failed: regressed or counts changed; status: 'regressed',
    'counts changed', 'faster', 'ok'.  check() raises BudgetExceeded when failed."""

    def __init__(self, result, baseline, threshold, allow):
        if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or \
                not 0 <= threshold < math.inf:
            raise ValueError("threshold must be a percentage >= 0, not %r" % (threshold,))
        self.result, self.baseline, self.threshold = result, baseline, float(threshold)
        self.latency = _figure(baseline.latency.samples_ns, result.latency.samples_ns)
        share = self.latency["delta_share"]
        self.regressed = (self.latency["verdict"] == "slower" and
                          not (share * 100.0 <= self.threshold))
        self.faster = self.latency["verdict"] == "faster"
        self.count_changes = []
        self.notes = []
        for key in COUNTS:
            b, a = baseline.counts.get(key), result.counts.get(key)
            if b is None or a is None:
                if (b is None) != (a is None):
                    self.notes.append("%s measured in %s only" % (
                        COUNT_WHAT[key], "the baseline" if a is None else "this run"))
                continue
            if abs(a - b) > _allowance(allow, key, b):
                self.count_changes.append((COUNT_WHAT[key], b, a))
        for nk, per in (("ops", "op"), ("kernels_by_name", "kernel")):
            bn, an = baseline.data["named"].get(nk, {}), result.data["named"].get(nk, {})
            for name in list(bn) + [x for x in an if x not in bn]:
                b, a = bn.get(name, 0), an.get(name, 0)
                lim = _allowance(allow, "%s:%s" % (per, name), b) if \
                    "%s:%s" % (per, name) in allow else _allowance(allow, nk, b)
                if abs(a - b) > lim:
                    self.count_changes.append(("%s %s" % (per, name), b, a))
        self.offenders = []
        for title, key in (("layer", "layers"), ("op", "ops"), ("kernel", "kernels")):
            bt, at = baseline.data["times"].get(key, {}), result.data["times"].get(key, {})
            nb, na = baseline.latency.n, result.latency.n
            for name in list(bt) + [x for x in at if x not in bt]:
                f = _figure(bt.get(name, [0.0] * nb), at.get(name, [0.0] * na))
                if f["verdict"] == "slower":
                    label = name.replace("|", " (") + (")" if "|" in name else "")
                    self.offenders.append(("%s %s" % (title, label), f))
        self.offenders.sort(key=lambda x: -x[1]["delta_ns"])
        self.failed = self.regressed or bool(self.count_changes)
        self.status = ("regressed" if self.regressed else "counts changed"
                       if self.count_changes else "faster" if self.faster else "ok")

    def lines(self):
        """What failed, one line each, then the offenders."""
        f = self.latency
        out = []
        if self.regressed:
            out.append("latency %s -> %s: %s, beyond the noise (%s) and the threshold "
                       "(%g%%)" % (fmt_ns(f["before_ns"]), fmt_ns(f["after_ns"]),
                                   fmt_signed(f["delta_ns"], f["delta_share"]),
                                   fmt_ns(f["noise_ns"]), self.threshold))
        for what, b, a in self.count_changes:
            key = next((k for k, v in COUNT_WHAT.items() if v == what), "")
            out.append("%s: %s -> %s per iteration (%s)" % (
                what, _count_text(key, b), _count_text(key, a),
                "new" if b == 0 else "gone" if a == 0 else
                ("+" if a > b else "-") + _count_text(key, abs(a - b))))
        return out

    def offender_lines(self):
        if not self.offenders:
            return []
        out = ["  slower than the baseline beyond their noise (per iteration):"]
        for what, f in self.offenders[:OFFENDERS]:
            out.append("    %-44s %12s -> %-12s %s" % (
                printable(what), fmt_ns(f["before_ns"]), fmt_ns(f["after_ns"]),
                fmt_signed(f["delta_ns"], f["delta_share"])))
        if len(self.offenders) > OFFENDERS:
            out.append("    ... %d more" % (len(self.offenders) - OFFENDERS))
        return out

    def check(self):
        """Raises BudgetExceeded when failed; returns self otherwise."""
        __tracebackhide__ = True
        if self.failed:
            lines = self.lines()
            details = self.offender_lines()
            if self.baseline.path:
                details.append("  baseline: %s (%s, %s)" % (
                    self.baseline.path, self.baseline.data.get("created", "?"),
                    self.baseline.data.get("machine", {}).get("host", "?")))
            raise BudgetExceeded(self.result._message("slower than its baseline"
                                                      if self.regressed else
                                                      "changed from its baseline",
                                                      lines, details), lines)
        return self

    def summary(self):
        """A plain dict for the terminal table and the JSON results."""
        f = self.latency
        return {"status": self.status, "delta_ns": f["delta_ns"],
                "delta_share": f["delta_share"], "noise_ns": f["noise_ns"],
                "latency_verdict": f["verdict"], "count_changes": [
                    {"what": w, "before": b, "after": a} for w, b, a in self.count_changes],
                "offenders": [{"what": w, "delta_ns": x["delta_ns"]}
                              for w, x in self.offenders[:OFFENDERS]],
                "notes": self.notes}


__all__ = ["measure", "from_measurement", "Result", "Verdict", "load", "from_dict",
           "BudgetExceeded", "BaselineError", "parse_duration", "parse_bytes", "stats",
           "ProfilerError"]
