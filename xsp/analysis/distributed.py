"""A distributed job's traces: merging the ranks' traces into one on rank 0's clock and the
analyses across ranks (docs/distributed.md).  The clock samples each rank's profile takes are
xsp.producers.clock; the cross-rank text is xsp.report's.  pandas and the tables load with the
first analysis that makes a table (merging and reading a merged trace need neither)."""
import itertools
import os
import re as _re

import numpy as np

from xsp import _core
from xsp.formats import load
from xsp.values.trace import KINDS, Trace, merge_traces

_MISSING_NAMED = 10  # missing ranks a MergeError names (it counts them all)


def offset_at(meta, t):
    """The offset (ns, to add) that puts time t of the trace with this meta on rank 0's clock:
    on the offset line of its samples (_line: interpolated between the start and stop samples,
    the start sample alone without a stop one, 0 without samples), as the merge applies it."""
    o0, t0, o1, t1 = _line(meta)
    return o0 if t1 == t0 else o0 + (o1 - o0) * (t - t0) / (t1 - t0)


def error_ns(meta):
    """The alignment error bound of a trace's clock (the larger of its two samples'), 0 for
    rank 0 or a trace without samples."""
    return max(float(meta.get("clock.error_ns", 0.0)), float(meta.get("clock.stop_error_ns",
                                                                        0.0)))


__all__ = ["offset_at", "error_ns"]


# -- merging the ranks' traces ----------------------------------------------------------------
class MergeError(ValueError):
    """Traces that cannot be merged into one job: .paths names the files concerned."""

    def __init__(self, message, paths=()):
        super().__init__(message)
        self.paths = list(paths)


def _label(src, i):
    return src if isinstance(src, str) else "trace %d" % i


def merge(sources, *, allow_missing=False, names=None):
    """One trace of a distributed job from its ranks' traces (paths, .xsp or Kineto JSON, or
    xsp.Trace objects), on rank 0's clock (docs/distributed.md, "Merging").

    Each rank's spans are shifted by its clock offset to rank 0 (interpolated between the
    start and stop samples), its region gets attribute rank, its threads are named
    "rank R: <name>", and meta gets ranks (e.g. "0,1"), world_size, job_id, and per rank
    rank<R>.pid, rank<R>.host, rank<R>.clock.offset_ns and rank<R>.clock.error_ns;
    clock.aligned says how ("process group", "same host", or "no: ..." when ranks on several
    hosts had no samples).  names: what to call the sources in messages (default: the paths,
    or "trace N").  Raises MergeError naming the files for: a trace without a rank,
    duplicate ranks, mixed world sizes, mixed jobs, and missing ranks (unless
    allow_missing)."""
    items = []
    for i, src in enumerate(sources):
        tr = load(src) if isinstance(src, (str, os.PathLike)) else src
        if not isinstance(tr, Trace):
            raise TypeError("merge takes paths or xsp.Trace objects, not %s"
                            % type(tr).__name__)
        label = names[i] if names is not None else _label(
            os.fspath(src) if isinstance(src, os.PathLike) else src, i)
        items.append((label, tr))
    if not items:
        raise MergeError("merge needs at least one trace")
    for name, tr in items:
        if not isinstance(tr.meta.get("rank"), int):
            raise MergeError("%s has no rank in its meta: not a trace of a distributed job "
                             "(ranks come from torch.distributed or RANK/WORLD_SIZE)" % name,
                             [name])
    by_rank = {}
    for name, tr in items:
        r = tr.meta["rank"]
        if r in by_rank:
            raise MergeError("rank %d twice: %s and %s" % (r, by_rank[r][0], name),
                             [by_rank[r][0], name])
        by_rank[r] = (name, tr)
    sizes = {}
    for name, tr in items:
        sizes.setdefault(tr.meta.get("world_size"), []).append(name)
    if len(sizes) > 1:
        raise MergeError("mixed world sizes: " + "; ".join(
            "%s in %s" % (w, ", ".join(ns)) for w, ns in sizes.items()),
            [n for ns in sizes.values() for n in ns])
    world = next(iter(sizes))
    jobs = {}
    for name, tr in items:
        jobs.setdefault(tr.meta.get("job_id", tr.meta.get("job")), []).append(name)
    if len(jobs) > 1:
        raise MergeError("mixed jobs: " + "; ".join(
            "job %s: %s" % (j, ", ".join(ns)) for j, ns in jobs.items()),
            [n for ns in jobs.values() for n in ns])
    if isinstance(world, int):
        extra = sorted(r for r in by_rank if not 0 <= r < world)
        if extra:
            raise MergeError("rank %s outside world size %d: %s" % (
                ", ".join(map(str, extra)), world, ", ".join(by_rank[r][0] for r in extra)),
                [by_rank[r][0] for r in extra])
        # the ranks present are few, a world size from a file any number: the missing ones
        # are counted and the first of them named, never listed whole
        n_missing = world - len(by_rank)
        if n_missing and not allow_missing:
            first = list(itertools.islice((r for r in range(world) if r not in by_rank),
                                          _MISSING_NAMED))
            named = ", ".join(map(str, first)) + (
                ", ... (%d in all)" % n_missing if n_missing > len(first) else "")
            raise MergeError("ranks %s of %d are missing (have %s: %s)" % (
                named, world, ", ".join(map(str, sorted(by_rank))),
                ", ".join(by_rank[r][0] for r in sorted(by_rank))),
                [by_rank[r][0] for r in sorted(by_rank)])
    ranks = sorted(by_rank)
    hosts = {by_rank[r][1].meta.get("host") for r in ranks}
    synced = all(by_rank[r][1].meta.get("clock.sync") == "process group" for r in ranks)
    if synced:
        aligned = "process group"
    elif len(hosts) <= 1:
        aligned = "same host"
    else:
        aligned = "no: ranks on hosts %s without clock samples" % ", ".join(
            sorted(str(h) for h in hosts))
    # every rank's spans on rank 0's clock, in C (core/tmerge.c): shifted, re-interned, one
    # sort by start with parents first, fwd_op and api renumbered, "rank" on each region
    meta = {}
    inputs = []
    for r in ranks:
        name, tr = by_rank[r]
        m = tr.meta
        inputs.append((tr, int(r)) + (_line(m) if synced else (0.0, 0.0, 0.0, 0.0)))
        meta["rank%d.pid" % r] = m.get("pid", -1) if isinstance(m.get("pid"), int) else -1
        meta["rank%d.host" % r] = str(m.get("host", ""))
        meta["rank%d.clock.offset_ns" % r] = float(m.get("clock.offset_ns", 0.0))
        meta["rank%d.clock.error_ns" % r] = float(error_ns(m))
        meta["rank%d.file" % r] = str(name)
    meta.update({"ranks": ",".join(map(str, ranks)), "world_size": world if isinstance(
        world, int) else len(ranks), "clock.aligned": aligned, "merged": len(ranks),
        "levels": "".join(lv for lv in "MLG" if all(
            lv in str(by_rank[r][1].meta.get("levels", "")) for r in ranks)),
        "region": "job of %d ranks" % len(ranks)})
    j = next(iter(jobs))
    if j is not None:
        meta["job_id"] = str(j)
    if isinstance(by_rank[ranks[0]][1].meta.get("clock.wall_offset_ns"), int):
        meta["clock.wall_offset_ns"] = by_rank[ranks[0]][1].meta["clock.wall_offset_ns"]
    try:
        return merge_traces(inputs, meta)
    except ValueError as exc:
        raise MergeError("%s (%s)" % (exc, ", ".join(by_rank[r][0] for r in ranks)),
                         [by_rank[r][0] for r in ranks]) from None


def _line(meta):
    """(o0, t0, o1, t1): the offset line of a trace's clock samples (offset_at)."""
    if "clock.offset_ns" not in meta:
        return (0.0, 0.0, 0.0, 0.0)
    o0, t0 = float(meta["clock.offset_ns"]), float(meta["clock.at_ns"])
    if "clock.stop_offset_ns" not in meta:
        return (o0, t0, o0, t0)
    return (o0, t0, float(meta["clock.stop_offset_ns"]), float(meta["clock.stop_at_ns"]))


# -- analyses across ranks --------------------------------------------------------------------
COMM = _re.compile(r"^(c10d::|gloo:|nccl:|nccl|record_param_comms|ProcessGroup)", _re.I)
COMPUTE_KINDS = ("op", "backward", "kernel", "memcpy", "memset")


def rank_of(trace):
    """Per span, its rank: the attribute rank of its region (a merged trace), else the
    trace's meta rank (or 0)."""

    def rank(v, default):           # an int64; anything else (a hand-made file) is not a rank
        return v if isinstance(v, int) and not isinstance(v, bool) and \
            -2 ** 63 <= v < 2 ** 63 else default

    n = len(trace)
    out = np.full(n, rank(trace.meta.get("rank"), 0), dtype=np.int64)
    region = trace.kind_codes == KINDS.index("region")
    ids, vals = trace.attr_column("rank")
    if len(ids):
        default = int(out[0]) if n else 0
        r_of = {i: rank(v, default) for i, v in zip(ids.tolist(), np.asarray(vals).tolist())}
        top = trace.nearest_ancestor(region, include_self=True)
        has = top >= 0
        out[has] = [r_of.get(int(t), default) for t in top[has]]
    return out


def _union(iv):
    """Sorted disjoint intervals covering the (start, end) pairs of iv."""
    out = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return out


def _length(u):
    return sum(e - s for s, e in u)


def _intersection(a, b):
    i = j = 0
    total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _comm_mask(trace):
    names = np.array(trace.strings, dtype=object)[trace.name_codes]
    return np.array([bool(COMM.match(n)) for n in names], dtype=bool)


def iterations(trace):
    """(iteration, latencies): per span, the index of its rank's iteration it belongs to (-1
    for none: setup, a dropped tail, outside every iteration), and {rank: that rank's
    iteration latencies (int64 ns)}.  The iterations are xsp.analysis's, as `xsp summary`
    and the single-process reports find them (docs/analyses.md, "Iterations"), each rank's
    on its own spans (rank_trace): one rule, so that the setup before the first iteration
    (under `xsp run`, the script's imports and model building in step#0) is no step."""
    from xsp.analysis import tables as A
    rk = rank_of(trace)
    out = np.full(len(trace), -1, dtype=np.int64)
    lat = {}
    for r in sorted(set(rk.tolist())):
        sel = np.nonzero(rk == r)[0]
        src = A._src(trace if len(sel) == len(trace) else rank_trace(trace, r))
        out[sel] = src.iteration_of()
        lat[r] = src.latencies()
    return out, lat


def collectives(trace):
    """One row per collective call on each rank: name, index (its ordinal among that rank's
    calls of the name), rank, iteration (of that rank: iterations(); -1 in setup or outside
    every iteration), start_ns, end_ns, duration_ns, wait_ns (how long this rank
    waited for the last one to arrive: the latest start among the ranks minus its own), last
    (this rank arrived last) and caused_ns (for the last one: the longest wait it caused,
    the latest start minus the earliest; 0 for the others).  A collective is an outermost communication span (names
    matching COMM: c10d::*, gloo:*, nccl:*, nccl kernels ...) of the kind the ranks share;
    a call that some rank lacks has wait_ns NaN.  Times are on rank 0's clock (a merged
    trace)."""
    return _collectives(trace, iterations(trace)[0])


def _collectives(trace, it):
    import pandas as pd
    comm = _comm_mask(trace)
    outer = comm & (trace.nearest_ancestor(comm, include_self=False) < 0)
    ranks = rank_of(trace)
    names = np.array(trace.strings, dtype=object)[trace.name_codes]
    rows = []
    seen = {}
    dur = trace.duration_ns                 # once: the property makes a new array per call
    for i in np.nonzero(outer)[0].tolist():
        if KINDS[trace.kind_codes[i]] in ("region", "step", "model"):
            continue
        key = (int(ranks[i]), names[i])
        k = seen.get(key, 0)
        seen[key] = k + 1
        rows.append({"name": names[i], "index": k, "rank": int(ranks[i]),
                     "iteration": int(it[i]), "start_ns": int(trace.start_ns[i]),
                     "end_ns": int(trace.end_ns[i]), "duration_ns": int(dur[i])})
    df = pd.DataFrame(rows, columns=["name", "index", "rank", "iteration", "start_ns",
                                     "end_ns", "duration_ns"])
    all_ranks = sorted(set(ranks.tolist()))
    wait = np.full(len(df), np.nan)
    last = np.zeros(len(df), dtype=bool)
    caused = np.zeros(len(df))
    if len(df):
        for _, g in df.groupby(["name", "index"]):
            if sorted(g["rank"]) != all_ranks:
                continue
            st = g["start_ns"].to_numpy()
            latest = st.max()
            wait[g.index] = latest - st
            j = g.index[st == latest][0]
            last[j] = True
            caused[j] = latest - st.min()
    df["wait_ns"] = wait
    df["last"] = last
    df["caused_ns"] = caused
    return df


def ranks(trace):
    """One row per rank of a merged trace (or the one rank of a single trace): rank, host,
    steps (the rank's iterations, as `xsp summary` counts them: iterations()), step_ns (their
    mean latency), step_std_ns (ddof 1), and per iteration the means of comm_ns (time covered
    by communication spans), compute_ns (covered by other ops and GPU work, outermost, every
    thread), overlap_ns (covered by both), wait_ns (waiting in collectives for the last rank:
    collectives()' wait_ns summed), caused_ns, then last_arrivals (the collectives this rank
    arrived last at) and straggler; every figure over the iterations only, never the setup
    before the first one."""
    import pandas as pd
    kinds = np.array(KINDS, dtype=object)[trace.kind_codes]
    rk = rank_of(trace)
    comm = _comm_mask(trace)
    comp_mask = np.isin(kinds, COMPUTE_KINDS) & ~comm
    comp_outer = comp_mask & (trace.nearest_ancestor(comp_mask | comm, include_self=False) < 0)
    comm_outer = comm & (trace.nearest_ancestor(comm, include_self=False) < 0)
    it, lats = iterations(trace)
    in_it = it >= 0
    comp_outer &= in_it
    comm_outer &= in_it
    coll = _collectives(trace, it)
    coll = coll[coll["iteration"] >= 0]
    # one row per call the user made: c10d's ops when there are any (every backend's
    # collectives go through them), not again the backend's own spans of the same call
    if coll["name"].str.startswith("c10d::").any():
        coll = coll[coll["name"].str.startswith("c10d::")]
    rows = []
    start, end = trace.start_ns, trace.end_ns
    for r in sorted(set(rk.tolist())):
        mine = rk == r
        lat = lats[r].astype(np.float64)
        n = max(len(lat), 1)
        cu = _union(list(zip(start[mine & comm_outer].tolist(), end[mine & comm_outer].tolist())))
        pu = _union(list(zip(start[mine & comp_outer].tolist(), end[mine & comp_outer].tolist())))
        c = coll[coll["rank"] == r]
        host = trace.meta.get("rank%d.host" % r, trace.meta.get("host", ""))
        rows.append({"rank": r, "host": host, "steps": len(lat),
                     "step_ns": float(lat.mean()) if len(lat) else np.nan,
                     "step_std_ns": float(lat.std(ddof=1)) if len(lat) > 1 else np.nan,
                     "comm_ns": _length(cu) / n, "compute_ns": _length(pu) / n,
                     "overlap_ns": _intersection(cu, pu) / n,
                     "wait_ns": float(np.nansum(c["wait_ns"])) / n,
                     "caused_ns": float(c["caused_ns"].sum()) / n,
                     "last_arrivals": int(c["last"].sum())})
    df = pd.DataFrame(rows, columns=["rank", "host", "steps", "step_ns", "step_std_ns",
                                     "comm_ns", "compute_ns", "overlap_ns", "wait_ns",
                                     "caused_ns", "last_arrivals"])
    # the straggler: the rank the others wait for (the most waiting caused by arriving last
    # at collectives); without collectives, the largest mean step
    df["straggler"] = False
    if len(df) > 1 and df["caused_ns"].max() > 0:
        df.loc[df["caused_ns"].idxmax(), "straggler"] = True
    elif len(df) > 1 and df["step_ns"].notna().any():
        df.loc[df["step_ns"].idxmax(), "straggler"] = True
    return df


__all__ += ["merge", "MergeError", "rank_of", "iterations", "collectives", "ranks",
            "COMM"]


def rank_trace(trace, rank):
    """One rank's spans of a merged trace as a trace of their own (times on rank 0's clock,
    meta the job's plus rank), for the single-process analyses and reports.  ValueError when
    the trace has no such rank; xsp.TraceFormatError when one of its tracks has a kind other
    than 0, 1, 2 (a file may hold any)."""

    rk = rank_of(trace)
    sel = np.nonzero(rk == rank)[0]
    if not len(sel):
        raise ValueError("no rank %r in this trace (ranks %s)" % (
            rank, trace.meta.get("ranks", sorted(set(rk.tolist())))))
    remap = np.full(len(trace), -1, dtype=np.int64)
    remap[sel] = np.arange(len(sel))
    used = sorted(set(trace.thread_index[sel].tolist()))
    tmap = {t: i for i, t in enumerate(used)}
    prefix = "rank %d: " % rank
    threads = [(tid, name[len(prefix):] if isinstance(name, str) and name.startswith(prefix)
                else name, kind)
               for tid, name, kind in (trace.threads[t] for t in used)]
    for t, (_, _, kind) in zip(used, threads):
        if kind not in (0, 1, 2):       # a file may hold any uint32 there; a build takes 0..2
            e = _core.TraceFormatError(
                "rank_trace: track %d has kind %d, which this xsp cannot rebuild (0 CPU thread, "
                "1 GPU stream, 2 overhead): the trace was written by another xsp or damaged"
                % (t, kind))
            e.path = e.offset = None
            raise e
    spans = []
    names = trace.strings
    # the columns as lists once (parent_ids makes a new array per call); the file's uint64
    # times (the int64 columns wrap past 2**63)
    start, end = trace.start_ns.view(np.uint64).tolist(), trace.end_ns.view(np.uint64).tolist()
    parents, remap_l = trace.parent_ids.tolist(), remap.tolist()
    levels, kinds = trace.level_codes.tolist(), trace.kind_codes.tolist()
    name_codes, thread_idx = trace.name_codes.tolist(), trace.thread_index.tolist()
    flags = trace.flag_bits.tolist()
    for i in sel.tolist():
        a = trace.attrs_of(i)
        for key in ("fwd_op", "api"):
            if isinstance(a.get(key), int):
                v = remap_l[a[key]] if 0 <= a[key] < len(trace) else -1
                if v >= 0:
                    a[key] = v
                else:
                    del a[key]
        p = parents[i]
        spans.append((start[i], end[i], remap_l[p] if p >= 0 else -1, levels[i], kinds[i],
                      names[name_codes[i]], tmap[thread_idx[i]], flags[i], a))
    meta = {k: v for k, v in trace.meta.items() if not k.startswith("rank") or k == "ranks"}
    pid = trace.meta.get("rank%d.pid" % rank, -1)
    meta.update(rank=int(rank), pid=pid if isinstance(pid, int) else -1,
                host=str(trace.meta.get("rank%d.host" % rank, "")),
                region=names[trace.name_codes[sel[0]]])
    meta.pop("ranks", None)
    meta.pop("merged", None)
    return Trace(_core.build(spans, threads, meta, {}))


__all__.append("rank_trace")
