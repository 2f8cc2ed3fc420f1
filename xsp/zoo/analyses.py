"""xsp.zoo.analyses: the cross-model and cross-system analyses of a results database (issue 26).

Every function takes a source, src: a results directory, a list or tuple of them (the results
of several machines, read as one: store.open), or an open DuckDB connection from store.open
(left open; the report opens one snapshot and passes it to all).  A directory that does not
exist, or one that holds no evaluation, raises NoResultsError (a StoreError) naming it; a
connection with no evaluation gives empty frames.  Each function runs DuckDB SQL over the
views and returns a pandas DataFrame with the columns documented below.  Units are in the
names: _ns nanoseconds per iteration (one call of the workload, one batch), _per_s per
second, _bytes bytes; a share is a fraction (0.25 is 25%).

Which evaluations.  Only status 'ok' rows are read, except by failures() and systems().  A
model is its name; for each model, system and batch size one evaluation is used, the chosen
one: among its ok rows, the one with the most levels (MLG, then ML, then M: the deepest run
has every latency), the latest started among those.  The analyses of layers and ops
(layer_types, top_layers, top_ops) read, for each model and system, one batch size: the
largest whose chosen evaluation has the table's rows, or exactly batch_size when given.

Which latency each number divides by.  Throughput is batch_size / latency_M_mean_ns (run M,
the model alone: the shallowest run, as the evaluations row has it).  Layer and op times
were recorded in run ML, so their shares of the iteration divide by latency_ML_mean_ns, the
iteration of the same run (a share of run M's latency can pass 1, since recording slows the
layers; store's own share columns divide by latency_M_mean_ns and are not used here).  GPU
work divides by latency_MLG_mean_ns, the run that recorded it.  Achieved FLOP/s and B/s
divide by latency_M_mean_ns, the model unslowed.

scaling(src, tolerance=0.05): one row per model, system and batch size (chosen evaluations),
ordered by model, system, batch size
  model, family, task, system_id, batch_size, levels, evaluation_id
  latency_M_mean_ns, latency_M_std_ns, latency_ML_mean_ns, latency_ML_std_ns,
  latency_MLG_mean_ns, latency_MLG_std_ns   per run (NULL where not measured)
  latency_per_sample_ns    latency_M_mean_ns / batch_size
  throughput_per_s         samples per second, batch_size / latency_M_mean_ns
  cost_per_million         the price of a million samples at that throughput, from the
                           manifest's [system] price_per_hour (NULL without one)
  energy_j                 joules metered over the evaluation's measurement (RAPL, NVML; NULL
                           where the machine exposes neither: the evaluations row's
                           energy_why says why)
  relative_throughput      throughput / the model's best on the system
  saturation_batch_size    the model's on the system (see saturation())

saturation(src, tolerance=0.05): one row per model and system
  model, family, system_id
  batch_sizes              how many batch sizes were measured; min_/max_batch_size
  best_throughput_per_s, best_batch_size   the highest measured throughput, at the smallest
                           batch size that reached it
  saturation_batch_size    the smallest batch size whose throughput is at least
                           (1 - tolerance) x the best: past it, larger batches gain less than
                           the tolerance
  saturation_throughput_per_s   the throughput there
  last_growth              throughput at the largest batch size / at the one before, less 1
                           (NaN with one batch size)
  still_growing            last_growth > tolerance: throughput still grew at the largest batch
                           measured (larger ones may be faster: the saturation batch size is a
                           lower bound); None with one batch size
  verdict                  that in words

layer_types(src, by="model", batch_size=None): leaf-layer time by class
  by="model": one row per model, system and layer type, largest time first
    model, family, system_id, batch_size, layer_type, count (leaf calls per iteration),
    forward_ns, backward_ns, time_ns (forward + backward),
    share           time_ns / the model's leaf-layer time (all its types): the shares of a
                    model sum to 1
    latency_share   time_ns / latency_ML_mean_ns: of the iteration (the rest is outside the
                    leaf layers: the model's own code, the loss, the optimizer)
  by="family": one row per family, system and layer type
    family, system_id, layer_type, models (of the family with the type), family_models,
    share           the mean over the family's models of their share (a model without the
                    type counts 0): every model weighs the same, and a family's shares sum
                    to 1
    latency_share   the mean of latency_share likewise

top_layers(src, n=20, batch_size=None): the leaf layers (layers table) with the largest share
of their model's iteration across the zoo; rank, model, family, system_id, batch_size, layer,
layer_type, calls, forward_ns, backward_ns, time_ns, latency_share (time_ns /
latency_ML_mean_ns), share (of the model's leaf-layer time); n=None for every layer

top_ops(src, n=20, batch_size=None): ops across the zoo, by mean share; a profile is one
model on one system (at its batch size, as above)
  rank, op, models (distinct models with the op), profiles (profiles with the op),
  mean_share        the mean over every profile with ops of self_ns / latency_ML_mean_ns (0
                    where the op is absent): the zoo's ops' mean shares sum to at most 1
  max_share, max_model, max_system_id   the profile where its share is the highest
  calls             calls per iteration summed over its profiles

roofline(src, peaks=None, dtype="float32"): one row per chosen evaluation with flops and bytes
(record_shapes=True in the manifest); attrs["left_out"] counts those without
  model, family, system_id, batch_size, device ("cpu" or "cuda", the options'), flops,
  bytes (per iteration, xsp.analysis.flops), intensity (flops / bytes, FLOP/byte),
  latency_M_mean_ns, flops_per_s, bytes_per_s (flops, bytes / latency_M_mean_ns)
  with peaks: peak_flops_per_s (the dtype's), peak_bytes_per_s, roof_flops_per_s
  (min(peak, intensity x bandwidth)), bound ("memory" where intensity x bandwidth is under the
  peak, else "compute"), roof_fraction (flops_per_s / roof_flops_per_s); NaN (bound missing) for
  a system without peaks.  peaks: what xsp.analysis.peaks.load takes (a Peaks, a dict, JSON text, a
  file) for every system, or {system_id: that}.  The zoo records no dtype: dtype names the
  peak to use (the models run in float32 unless their code says otherwise)

memory(src): one row per chosen evaluation with a peak (profile_memory=True)
  model, family, system_id, batch_size, device, peak_cpu_bytes, peak_cuda_bytes,
  peak_bytes          the device's peak (CUDA's on "cuda", else the CPU's)
  per_sample_bytes    (peak_bytes - the peak at the model's smallest batch size) / (batch_size
                      - that batch size): what one more sample costs (weights and workspace
                      counted once); NaN at the smallest

gpu_share(src): one row per chosen evaluation with level G (gpu_ns); empty, with the reason in
attrs["reason"], when none has it
  model, family, system_id, batch_size, latency_MLG_mean_ns, gpu_ns (GPU work per iteration:
  kernels, copies, memsets), gpu_share (gpu_ns / latency_MLG_mean_ns; past 1 where streams
  overlap), cpu_share (1 - gpu_share, at least 0: the rest of the iteration, where the CPU
  runs the framework and the GPU waits)

compare_systems(src, base=None, other=None, by="model"): two systems side by side; base and
other are system_ids among the ok evaluations (default: the two present, base the first by
system_id); anything else raises SystemsError naming the systems present.  The speedup is
that of other over base: base's time / other's (above 1: other is faster).
  by="model": one row per model and batch size measured on both: model, family,
    batch_size, base_latency_ns, other_latency_ns (latency_M_mean_ns), base_throughput_per_s,
    other_throughput_per_s, speedup
  by="layer_type": one row per layer type, at each model's largest batch size with layer
    types on both: layer_type, models, base_ns, other_ns (the type's time_ns summed over those
    models), speedup, base_share (base_ns / all the types' base_ns)
  attrs base and other say which is which

systems(src): one row per system with evaluations (any status), by system_id: system_id,
hostname, cpu_model, cpu_count, gpu_name, gpu_count, torch_version (the systems row; NULL
without one), label ("hostname (GPU or CPU model)"), models (with an ok evaluation), ok
(evaluations with status ok), failed, timeout, killed (failures() rows by status)

failures(src): the evaluations that did not finish and were not done since: for each key
without an ok row, its latest attempt; model, family, system_id, batch_size, levels,
status, reason (its first line), wall_s, started_at, evaluation_id; by model, batch size.

Nothing here imports torch; xsp.analysis.peaks only for peaks=.
"""
import contextlib
import json
import math
import os

import numpy as np
import pandas as pd

from xsp.analysis import peaks as P
from . import store as _store

__all__ = ["scaling", "saturation", "layer_types", "top_layers", "top_ops", "roofline",
           "memory", "gpu_share", "compare_systems", "systems", "failures", "connect",
           "NoResultsError", "SystemsError", "TOLERANCE"]

TOLERANCE = 0.05        # saturation: within 5% of the best throughput


class NoResultsError(_store.StoreError):
    """A results directory that does not exist or holds no evaluation."""


class SystemsError(_store.StoreError):
    """compare_systems was not given two systems present in the results."""


# the chosen evaluation per model, system and batch size (the module docstring)
_CHOSEN = """chosen AS (
  SELECT * FROM evaluations WHERE status = 'ok'
  QUALIFY row_number() OVER (PARTITION BY model, system_id, batch_size
                             ORDER BY length(coalesce(levels, '')) DESC,
                                      started_at DESC NULLS LAST, evaluation_id DESC) = 1)"""


@contextlib.contextmanager
def connect(src):
    """A source as a DuckDB connection, in a with block: src itself when it is a connection
    (left open), else store.open(src, snapshot=True) over the directories, closed at the end
    (a report opens one and passes it to every analysis).  Raises NoResultsError for a
    directory that does not exist or directories without evaluations, TypeError for
    something that is not a source."""
    if hasattr(src, "execute") and hasattr(src, "sql"):
        yield src
        return
    many = isinstance(src, (list, tuple))
    dirs = list(src) if many else [src]
    if not dirs:
        raise NoResultsError("no results directory given: name one (xsp zoo run -o DIR "
                             "writes one)")
    for d in dirs:
        if not isinstance(d, (str, os.PathLike)):
            raise TypeError("a source is a results directory, a list of them or a "
                            "connection from xsp.zoo.store.open, not %s" % type(d).__name__)
        if not os.path.isdir(d):
            raise NoResultsError("%s: no such results directory (`xsp zoo run SPEC -o %s` "
                                 "writes one)" % (os.fspath(d), os.fspath(d)))
    con = _store.open(dirs if many else src, snapshot=True)
    try:
        if not con.execute("SELECT count(*) FROM evaluations").fetchone()[0]:
            raise NoResultsError("%s: no evaluations in %s: run `xsp zoo run SPEC -o DIR` "
                                 "first" % (", ".join(map(os.fspath, dirs)),
                                            "them" if len(dirs) > 1 else "it"))
        yield con
    finally:
        con.close()


def _df(src, sql, params=None):
    with connect(src) as con:
        return con.execute(sql, params or []).df()


def _check_tolerance(tolerance):
    if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) or \
            not 0 <= tolerance < 1:
        raise ValueError("tolerance must be a fraction in [0, 1), not %r" % (tolerance,))
    return float(tolerance)


def _check_batch(batch_size):
    if batch_size is not None and (not isinstance(batch_size, (int, np.integer)) or
                                   isinstance(batch_size, bool) or batch_size < 1):
        raise ValueError("batch_size must be a positive integer or None, not %r"
                         % (batch_size,))
    return None if batch_size is None else int(batch_size)


def _check_n(n):
    if n is not None and (not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0):
        raise ValueError("n must be a count >= 0 or None, not %r" % (n,))
    return n


# -- throughput and latency against batch size ------------------------------------------------

_SCALING_COLUMNS = [
    "model", "family", "task", "system_id", "batch_size", "levels", "evaluation_id",
    "latency_M_mean_ns", "latency_M_std_ns", "latency_ML_mean_ns", "latency_ML_std_ns",
    "latency_MLG_mean_ns", "latency_MLG_std_ns", "latency_per_sample_ns", "throughput_per_s",
    "cost_per_million", "energy_j"]


def _scaling_rows(src):
    return _df(src, """WITH %s
SELECT model, family, task, system_id, batch_size, levels, evaluation_id,
       latency_M_mean_ns, latency_M_std_ns, latency_ML_mean_ns, latency_ML_std_ns,
       latency_MLG_mean_ns, latency_MLG_std_ns,
       latency_M_mean_ns / batch_size AS latency_per_sample_ns,
       coalesce(throughput_per_s, batch_size * 1e9 / nullif(latency_M_mean_ns, 0))
         AS throughput_per_s, cost_per_million, energy_j
FROM chosen ORDER BY model, system_id NULLS FIRST, batch_size""" % _CHOSEN)


def _saturate(group, tol):
    """The saturation() row of one model and system's scaling rows (by batch size)."""
    b = group["batch_size"].to_numpy(np.int64)
    t = group["throughput_per_s"].to_numpy(float)
    ok = ~np.isnan(t)
    b, t = b[ok], t[ok]
    first = group.iloc[0]
    row = {"model": first["model"], "family": first["family"],
           "system_id": first["system_id"], "batch_sizes": len(b),
           "min_batch_size": int(b.min()) if len(b) else None,
           "max_batch_size": int(b.max()) if len(b) else None,
           "best_throughput_per_s": np.nan, "best_batch_size": None,
           "saturation_batch_size": None, "saturation_throughput_per_s": np.nan,
           "last_growth": np.nan, "still_growing": None}
    if not len(b):
        row["verdict"] = "no throughput measured"
        return row
    best = float(t.max())
    at = int(b[np.flatnonzero(t == best)[0]])
    j = int(np.flatnonzero(t >= (1.0 - tol) * best)[0])
    row.update(best_throughput_per_s=best, best_batch_size=at,
               saturation_batch_size=int(b[j]), saturation_throughput_per_s=float(t[j]))
    if len(b) < 2:
        row["verdict"] = "one batch size measured (%d): no trend" % b[0]
        return row
    growth = float(t[-1] / t[-2] - 1.0) if t[-2] > 0 else math.inf
    row["last_growth"] = growth
    row["still_growing"] = bool(growth > tol)
    if row["still_growing"]:
        row["verdict"] = ("still growing at batch %d (%+.0f%% over batch %d): larger batches "
                          "may be faster" % (b[-1], 100 * growth, b[-2]))
    else:
        row["verdict"] = ("saturates at batch %d (within %g%% of the best, at batch %d)"
                          % (b[j], 100 * tol, at))
    return row


_SATURATION_COLUMNS = [
    "model", "family", "system_id", "batch_sizes", "min_batch_size", "max_batch_size",
    "best_throughput_per_s", "best_batch_size", "saturation_batch_size",
    "saturation_throughput_per_s", "last_growth", "still_growing", "verdict"]


def _saturation_of(rows, tol):
    out = [_saturate(g, tol) for _, g in
           rows.groupby(["model", "system_id"], sort=False, dropna=False)]
    df = pd.DataFrame(out, columns=_SATURATION_COLUMNS)
    for c in ("min_batch_size", "max_batch_size", "best_batch_size", "saturation_batch_size"):
        df[c] = df[c].astype("Int64")
    df["batch_sizes"] = df["batch_sizes"].astype("int64")
    df["still_growing"] = df["still_growing"].astype(object)
    return df


def scaling(src, tolerance=TOLERANCE):
    """Latency and throughput against batch size, one row per model, system and batch size
    (the module docstring's columns).  Raises ValueError for a tolerance outside [0, 1)."""
    tol = _check_tolerance(tolerance)
    rows = _scaling_rows(src)
    sat = _saturation_of(rows, tol)
    best = sat[["model", "system_id", "best_throughput_per_s", "saturation_batch_size"]]
    out = rows.merge(best, on=["model", "system_id"], how="left")
    out["relative_throughput"] = out["throughput_per_s"] / out["best_throughput_per_s"]
    out = out.drop(columns=["best_throughput_per_s"])
    cols = _SCALING_COLUMNS + ["relative_throughput", "saturation_batch_size"]
    return out[cols].reset_index(drop=True)


def saturation(src, tolerance=TOLERANCE):
    """Where throughput stops growing, one row per model and system (the module docstring's
    columns), by model and system.  Raises ValueError for a tolerance outside [0, 1)."""
    tol = _check_tolerance(tolerance)
    return _saturation_of(_scaling_rows(src), tol)


# -- layers and ops ------------------------------------------------------------------------

def _picked(table, batch_size):
    """The SQL of the evaluations a layer or op analysis reads: per model and system the
    largest batch size whose chosen evaluation has rows in table (or batch_size)."""
    where = "" if batch_size is None else "WHERE c.batch_size = %d" % batch_size
    return """picked AS (
  SELECT c.* FROM chosen c SEMI JOIN %s USING (evaluation_id) %s
  QUALIFY c.batch_size = max(c.batch_size) OVER (PARTITION BY c.model, c.system_id))""" % (
        table, where)


def _by_model_types(batch_size):
    return """WITH %s, %s,
t AS (
  SELECT p.model, p.family, p.system_id, p.batch_size, l.layer_type,
         sum(l.count)::BIGINT AS count, sum(l.total_ns) AS forward_ns,
         sum(coalesce(l.backward_ns, 0)) AS backward_ns,
         sum(l.total_ns + coalesce(l.backward_ns, 0)) AS time_ns,
         any_value(p.latency_ML_mean_ns) AS latency_ML_mean_ns
  FROM picked p JOIN layer_types l USING (evaluation_id)
  GROUP BY p.model, p.family, p.system_id, p.batch_size, l.layer_type),
m AS (
  SELECT model, family, system_id, batch_size, layer_type, count, forward_ns, backward_ns,
         time_ns,
         time_ns / nullif(sum(time_ns) OVER (PARTITION BY model, system_id), 0) AS share,
         time_ns / nullif(latency_ML_mean_ns, 0) AS latency_share
  FROM t)""" % (_CHOSEN, _picked("layer_types", batch_size))


def layer_types(src, by="model", batch_size=None):
    """Leaf-layer time by layer type, per model (by="model") or per family (by="family"),
    with shares (the module docstring's columns).  Raises ValueError for another `by` or a
    bad batch_size."""
    bs = _check_batch(batch_size)
    if by == "model":
        return _df(src, _by_model_types(bs) + """
SELECT * FROM m ORDER BY model, system_id NULLS FIRST, time_ns DESC, layer_type""")
    if by == "family":
        return _df(src, _by_model_types(bs) + """,
f AS (SELECT family, system_id, count(DISTINCT model) AS family_models FROM m
      GROUP BY family, system_id)
SELECT m.family, m.system_id, m.layer_type, count(DISTINCT m.model) AS models,
       any_value(f.family_models) AS family_models,
       sum(m.share) / any_value(f.family_models) AS share,
       sum(m.latency_share) / any_value(f.family_models) AS latency_share
FROM m JOIN f ON m.family IS NOT DISTINCT FROM f.family
             AND m.system_id IS NOT DISTINCT FROM f.system_id
GROUP BY m.family, m.system_id, m.layer_type
ORDER BY m.family NULLS FIRST, m.system_id NULLS FIRST, share DESC, m.layer_type""")
    raise ValueError("by must be 'model' or 'family', not %r" % (by,))


def top_layers(src, n=20, batch_size=None):
    """The leaf layers with the largest share of their model's iteration across the zoo, at
    most n (None: all); the module docstring's columns."""
    n = _check_n(n)
    bs = _check_batch(batch_size)
    df = _df(src, """WITH %s, %s,
t AS (
  SELECT p.model, p.family, p.system_id, p.batch_size, l.layer, l.layer_type, l.calls,
         l.mean_ns AS forward_ns, coalesce(l.backward_ns, 0) AS backward_ns,
         l.mean_ns + coalesce(l.backward_ns, 0) AS time_ns,
         (l.mean_ns + coalesce(l.backward_ns, 0)) / nullif(p.latency_ML_mean_ns, 0)
           AS latency_share
  FROM picked p JOIN layers l USING (evaluation_id))
SELECT row_number() OVER (ORDER BY latency_share DESC NULLS LAST, model, system_id, layer)
         AS rank, *,
       time_ns / nullif(sum(time_ns) OVER (PARTITION BY model, system_id), 0) AS share
FROM t ORDER BY rank""" % (_CHOSEN, _picked("layers", bs)))
    return (df if n is None else df.head(n)).reset_index(drop=True)


def top_ops(src, n=20, batch_size=None):
    """The ops with the largest mean share of the iteration across the zoo, at most n (None:
    all); the module docstring's columns."""
    n = _check_n(n)
    bs = _check_batch(batch_size)
    df = _df(src, """WITH %s, %s,
o AS (
  SELECT p.model, p.system_id, o.op, sum(o.calls)::BIGINT AS calls,
         sum(o.self_ns) / nullif(any_value(p.latency_ML_mean_ns), 0) AS share
  FROM picked p JOIN ops o USING (evaluation_id)
  GROUP BY p.model, p.system_id, o.op),
g AS (
  SELECT op, count(DISTINCT model) AS models, count(*) AS profiles,
         sum(coalesce(share, 0)) / (SELECT count(*) FROM picked) AS mean_share,
         max(share) AS max_share,
         arg_max(model, coalesce(share, -1)) AS max_model,
         arg_max(system_id, coalesce(share, -1)) AS max_system_id,
         sum(calls)::BIGINT AS calls
  FROM o GROUP BY op)
SELECT row_number() OVER (ORDER BY mean_share DESC NULLS LAST, op) AS rank, *
FROM g ORDER BY rank""" % (_CHOSEN, _picked("ops", bs)))
    return (df if n is None else df.head(n)).reset_index(drop=True)


# -- FLOPs, memory, GPU ------------------------------------------------------------------------

def _device_of(options):
    try:
        d = json.loads(options).get("device") if isinstance(options, str) else None
    except (ValueError, AttributeError):
        d = None
    return d if d in ("cpu", "cuda") else "cpu"


def _peaks_for(peaks, system_ids, devices):
    """{(system_id, device): xsp.analysis.peaks.Peaks or None} for the rows' systems."""
    per_system = (isinstance(peaks, dict) and "flops_per_s" not in peaks and not any(
        isinstance(k, str) and (k in ("cpu", "cuda") or k.startswith("cuda:")) for k in peaks))
    out = {}
    for sid, dev in set(zip(system_ids, devices)):
        spec = peaks.get(sid) if per_system else peaks
        where = "peaks[%r]" % sid if per_system else "peaks argument"
        out[(sid, dev)] = None if spec is None else P.load(spec, dev, where)
    return out


_ROOF_COLUMNS = ["peak_flops_per_s", "peak_bytes_per_s", "roof_flops_per_s", "bound",
                 "roof_fraction"]


def roofline(src, peaks=None, dtype="float32"):
    """FLOPs, bytes, intensity and achieved FLOP/s and B/s per model and batch size, with the
    roof and the bound when peaks are given (the module docstring's columns).  Raises
    xsp.analysis.peaks.PeaksError for malformed peaks."""
    df = _df(src, """WITH %s
SELECT model, family, system_id, batch_size, options, flops, bytes,
       flops / nullif(bytes, 0) AS intensity, latency_M_mean_ns,
       flops * 1e9 / nullif(latency_M_mean_ns, 0) AS flops_per_s,
       bytes * 1e9 / nullif(latency_M_mean_ns, 0) AS bytes_per_s
FROM chosen ORDER BY model, system_id NULLS FIRST, batch_size""" % _CHOSEN)
    df.insert(4, "device", [_device_of(o) for o in df["options"]])
    df = df.drop(columns=["options"])
    known = df["flops"].notna() & df["bytes"].notna()
    left_out = int((~known).sum())
    df = df[known].reset_index(drop=True)
    if peaks is not None:
        got = _peaks_for(peaks, df["system_id"].tolist(), df["device"].tolist())
        pf, pb = [], []
        for sid, dev in zip(df["system_id"], df["device"]):
            p = got[(sid, dev)]
            pf.append(np.nan if p is None or p.flops(dtype) is None else p.flops(dtype))
            pb.append(np.nan if p is None or not p.bytes_per_s else p.bytes_per_s)
        df["peak_flops_per_s"] = np.asarray(pf, float)
        df["peak_bytes_per_s"] = np.asarray(pb, float)
        slope = df["intensity"] * df["peak_bytes_per_s"]
        df["roof_flops_per_s"] = np.fmin(df["peak_flops_per_s"], slope).where(
            df["peak_flops_per_s"].notna() & slope.notna())
        df["bound"] = [None if math.isnan(r) else ("memory" if s < f else "compute")
                       for r, s, f in zip(df["roof_flops_per_s"], slope,
                                          df["peak_flops_per_s"])]
        df["roof_fraction"] = df["flops_per_s"] / df["roof_flops_per_s"]
    df.attrs["left_out"] = left_out
    if not len(df):
        df.attrs["reason"] = ("no ok evaluation has FLOPs and bytes: they need the ops' "
                              "shapes (record_shapes = true in the manifest)")
    return df


def memory(src):
    """Peak memory per model and batch size, and what one more sample costs (the module
    docstring's columns)."""
    df = _df(src, """WITH %s
SELECT model, family, system_id, batch_size, options, peak_cpu_bytes, peak_cuda_bytes
FROM chosen WHERE peak_cpu_bytes IS NOT NULL OR peak_cuda_bytes IS NOT NULL
ORDER BY model, system_id NULLS FIRST, batch_size""" % _CHOSEN)
    df.insert(4, "device", [_device_of(o) for o in df["options"]])
    df = df.drop(columns=["options"])
    cuda = df["device"] == "cuda"
    peak = df["peak_cpu_bytes"].astype("Float64").where(~cuda, df["peak_cuda_bytes"])
    df["peak_bytes"] = peak.astype(float)
    per = np.full(len(df), np.nan)
    for _, g in df.groupby(["model", "system_id"], sort=False, dropna=False):
        g = g[g["peak_bytes"].notna()]
        if len(g) < 2:
            continue
        b0, p0 = g["batch_size"].iloc[0], g["peak_bytes"].iloc[0]
        for i, b, p in zip(g.index[1:], g["batch_size"].iloc[1:], g["peak_bytes"].iloc[1:]):
            per[i] = (p - p0) / (b - b0)
    df["per_sample_bytes"] = per
    if not len(df):
        df.attrs["reason"] = ("no ok evaluation recorded memory: profile_memory = true in the "
                              "manifest records it")
    return df


def gpu_share(src):
    """GPU work against the iteration per model and batch size (the module docstring's
    columns); empty, with attrs["reason"], when no evaluation has level G."""
    df = _df(src, """WITH %s
SELECT model, family, system_id, batch_size, latency_MLG_mean_ns, gpu_ns,
       gpu_ns / nullif(latency_MLG_mean_ns, 0) AS gpu_share,
       greatest(1 - gpu_ns / nullif(latency_MLG_mean_ns, 0), 0) AS cpu_share
FROM chosen WHERE gpu_ns IS NOT NULL
ORDER BY model, system_id NULLS FIRST, batch_size""" % _CHOSEN)
    if not len(df):
        df.attrs["reason"] = ("no ok evaluation measured level G: GPU work is recorded at "
                              "levels MLG on a machine with CUDA")
    return df


# -- two systems -----------------------------------------------------------------------------

def _pick_systems(con, base, other):
    present = [r[0] for r in con.execute(
        "SELECT DISTINCT system_id FROM evaluations WHERE status = 'ok' AND system_id IS NOT "
        "NULL ORDER BY system_id").fetchall()]
    labels = dict(zip(*[systems(con)[c].tolist() for c in ("system_id", "label")]))
    named = ", ".join("%s (%s)" % (s, labels[s]) if labels.get(s, s) != s else s
                      for s in present) or "none"
    for what, s in (("base", base), ("other", other)):
        if s is not None and s not in present:
            raise SystemsError("%s system %r has no ok evaluation here; the systems present "
                               "are: %s" % (what, s, named))
    if base is not None and base == other:
        raise SystemsError("base and other are the same system (%s): name two of: %s"
                           % (base, named))
    if base is None or other is None:
        given = base if base is not None else other
        rest = [s for s in present if s != given]
        if len(present) != 2:
            raise SystemsError(
                "comparing systems needs two; the results hold %d with ok evaluations (%s): "
                "%s" % (len(present), named, "give base= and other= (two of them)"
                        if len(present) > 2 else "add the results of another machine (a "
                        "list of directories, or copy its files into this one)"))
        base, other = (given, rest[0]) if base is not None else \
            (rest[0], given) if other is not None else (present[0], present[1])
    return base, other


def compare_systems(src, base=None, other=None, by="model"):
    """Speedup of system other over system base per model and batch size (by="model") or per
    layer type (by="layer_type"); the module docstring's columns.  Raises SystemsError when
    the results do not hold the two systems, ValueError for another `by`."""
    if by not in ("model", "layer_type"):
        raise ValueError("by must be 'model' or 'layer_type', not %r" % (by,))
    with connect(src) as con:
        base, other = _pick_systems(con, base, other)
        params = [base, other]
        if by == "model":
            df = con.execute("""WITH %s,
b AS (SELECT * FROM chosen WHERE system_id = $1), o AS (SELECT * FROM chosen WHERE system_id = $2)
SELECT b.model, b.family, b.batch_size, b.latency_M_mean_ns AS base_latency_ns,
       o.latency_M_mean_ns AS other_latency_ns,
       coalesce(b.throughput_per_s, b.batch_size * 1e9 / nullif(b.latency_M_mean_ns, 0))
         AS base_throughput_per_s,
       coalesce(o.throughput_per_s, o.batch_size * 1e9 / nullif(o.latency_M_mean_ns, 0))
         AS other_throughput_per_s,
       b.latency_M_mean_ns / nullif(o.latency_M_mean_ns, 0) AS speedup
FROM b JOIN o USING (model, batch_size)
ORDER BY b.model, b.batch_size""" % _CHOSEN, params).df()
        else:
            df = con.execute("""WITH %s,
lt AS (SELECT c.model, c.system_id, c.batch_size, l.layer_type,
              l.total_ns + coalesce(l.backward_ns, 0) AS time_ns
       FROM chosen c JOIN layer_types l USING (evaluation_id)
       WHERE c.system_id IN ($1, $2)),
both_ AS (SELECT model, max(batch_size) AS batch_size FROM (
            SELECT model, batch_size FROM lt GROUP BY model, batch_size
            HAVING count(DISTINCT system_id) = 2) GROUP BY model),
s AS (SELECT lt.* FROM lt SEMI JOIN both_ USING (model, batch_size)),
g AS (SELECT layer_type, count(DISTINCT model) AS models,
             coalesce(sum(time_ns) FILTER (WHERE system_id = $1), 0) AS base_ns,
             coalesce(sum(time_ns) FILTER (WHERE system_id = $2), 0) AS other_ns
      FROM s GROUP BY layer_type)
SELECT layer_type, models, base_ns, other_ns, base_ns / nullif(other_ns, 0) AS speedup,
       base_ns / nullif(sum(base_ns) OVER (), 0) AS base_share
FROM g ORDER BY base_ns DESC, layer_type""" % _CHOSEN, params).df()
    df.attrs["base"], df.attrs["other"] = base, other
    return df


# -- systems and failures -----------------------------------------------------------------------

_FAILURES = """failures AS (
  SELECT * FROM evaluations e WHERE status <> 'ok' AND NOT EXISTS (
    SELECT 1 FROM evaluations k WHERE k.status = 'ok' AND k.key = e.key)
  QUALIFY row_number() OVER (PARTITION BY coalesce(key, evaluation_id)
                             ORDER BY started_at DESC NULLS LAST, evaluation_id DESC) = 1)"""


def failures(src):
    """The evaluations that did not finish and were not done since (the module docstring's
    columns)."""
    df = _df(src, """WITH %s
SELECT model, family, system_id, batch_size, levels, status, reason, wall_s, started_at,
       evaluation_id
FROM failures ORDER BY model, batch_size, system_id NULLS FIRST, evaluation_id""" % _FAILURES)
    df["reason"] = [(str(r).strip().splitlines() or [""])[0] if isinstance(r, str) else r
                    for r in df["reason"]]
    return df


def systems(src):
    """The systems with evaluations and what each holds (the module docstring's columns)."""
    df = _df(src, """WITH %s,
ids AS (SELECT DISTINCT system_id FROM evaluations),
st AS (SELECT system_id,
              count(DISTINCT model) FILTER (WHERE status = 'ok') AS models,
              count(*) FILTER (WHERE status = 'ok') AS ok
       FROM evaluations GROUP BY system_id),
fl AS (SELECT system_id, count(*) FILTER (WHERE status = 'failed') AS failed,
              count(*) FILTER (WHERE status = 'timeout') AS timeout,
              count(*) FILTER (WHERE status = 'killed') AS killed
       FROM failures GROUP BY system_id),
sy AS (SELECT * FROM systems QUALIFY row_number() OVER (PARTITION BY system_id) = 1)
SELECT ids.system_id, sy.hostname, sy.cpu_model, sy.cpu_count, sy.gpu_name, sy.gpu_count,
       sy.torch_version, coalesce(st.models, 0) AS models, coalesce(st.ok, 0) AS ok,
       coalesce(fl.failed, 0) AS failed, coalesce(fl.timeout, 0) AS timeout,
       coalesce(fl.killed, 0) AS killed
FROM ids LEFT JOIN sy ON ids.system_id IS NOT DISTINCT FROM sy.system_id
LEFT JOIN st ON ids.system_id IS NOT DISTINCT FROM st.system_id
LEFT JOIN fl ON ids.system_id IS NOT DISTINCT FROM fl.system_id
ORDER BY ids.system_id NULLS FIRST""" % _FAILURES)
    labels = []
    for r in df.itertuples(index=False):
        what = r.gpu_name if isinstance(r.gpu_name, str) and r.gpu_name else r.cpu_model
        host = r.hostname if isinstance(r.hostname, str) else None
        if host is None:
            labels.append(r.system_id if isinstance(r.system_id, str) else "(no system)")
        else:
            labels.append("%s (%s)" % (host, what) if isinstance(what, str) else host)
    df.insert(7, "label", labels)
    return df
