"""Memory per op and layer, and the memory timeline, from xsp.profile(profile_memory=True).

What is recorded (docs/analyses.md, "Memory"): every allocation and free that PyTorch reports to
profilers (c10's memory reporting, the mechanism of torch.profiler's profile_memory: the CPU
allocator and CUDA's caching allocator), each attributed to the span open on the allocating
thread, innermost first.  Per span and device type (cpu, cuda, other) the trace keeps
mem.<dev>.allocs / alloc_bytes / frees / freed_bytes (the span's own events, not its
children's), mem.<dev>.peak (the highest total allocated on the device that the allocator
reported during those events) and mem.<dev>.total (the total after the last of them).  Events
with no span open are counted in the trace's counters memory.outside_spans.<dev>.*.

Every function takes an xsp.Trace or a span table (Trace.to_pandas()).
"""
import numpy as np

from xsp.values.trace import Trace, nearest_ancestor

DEVICES = ("cpu", "cuda", "other")
FIELDS = ("allocs", "alloc_bytes", "frees", "freed_bytes", "peak", "total")
OP_KINDS = ("op", "backward", "scope")


def _table(source):
    import pandas as pd
    if isinstance(source, Trace):
        return source.to_pandas()
    if isinstance(source, pd.DataFrame):
        return source
    raise TypeError("a memory analysis takes an xsp.Trace or a span DataFrame "
                    "(Trace.to_pandas()), not %s" % type(source).__name__)


def _num(df, key):
    """Column key as float (NaN where missing or not a number)."""
    import pandas as pd
    if key not in df.columns:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df[key], errors="coerce").to_numpy(dtype=float)


def has_memory(source):
    """Whether the trace carries memory per span (recorded with profile_memory=True): a
    mem.<dev>.<field> column, told for a trace from its attribute keys (no table is made)."""
    if isinstance(source, Trace):
        columns = source.column_names()
    else:
        columns = _table(source).columns
    return any(c.startswith("mem.") and c.split(".")[-1] in FIELDS for c in columns)


def _require(df):
    if not has_memory(df):
        raise ValueError("this trace has no memory per span: record it with "
                         "xsp.profile(..., profile_memory=True)")


def spans(source, device=None):
    """One row per span and device with memory events of its own: id, name, kind, module (the
    span's module, as to_pandas gives it: a backward op's is its forward op's), device, allocs,
    alloc_bytes, frees, freed_bytes, self_bytes (alloc_bytes - freed_bytes: what the span left
    allocated, torch.profiler's "self memory"), peak_bytes, total_bytes, start_ns, end_ns; in
    span order.  device: one of DEVICES to keep only its rows.  Raises ValueError when the
    trace has no memory, or for an unknown device."""
    import pandas as pd
    df = _table(source)
    _require(df)
    if device is not None and device not in DEVICES:
        raise ValueError("device must be one of %s, not %r" % (", ".join(DEVICES), device))
    rows = []
    for dev in DEVICES if device is None else (device,):
        vals = {f: _num(df, "mem.%s.%s" % (dev, f)) for f in FIELDS}
        # a span has memory on dev when it has all six numbers, as recording and load_kineto
        # write them; a hand-made or damaged trace's partial or out-of-range ones are left out
        has = np.logical_and.reduce([np.abs(vals[f]) < 2.0 ** 63 for f in FIELDS])
        if not has.any():
            continue
        ids = np.nonzero(has)[0]
        part = pd.DataFrame({
            "id": ids.astype(np.int64),
            "name": df["name"].to_numpy()[ids],
            "kind": df["kind"].to_numpy()[ids],
            "module": df["module"].to_numpy()[ids] if "module" in df.columns else None,
            "device": dev,
            "allocs": vals["allocs"][ids].astype(np.int64),
            "alloc_bytes": vals["alloc_bytes"][ids].astype(np.int64),
            "frees": vals["frees"][ids].astype(np.int64),
            "freed_bytes": vals["freed_bytes"][ids].astype(np.int64),
            "peak_bytes": vals["peak"][ids].astype(np.int64),
            "total_bytes": vals["total"][ids].astype(np.int64),
            "start_ns": df["start_ns"].to_numpy()[ids].astype(np.int64),
            "end_ns": df["end_ns"].to_numpy()[ids].astype(np.int64),
        })
        part.insert(10, "self_bytes", part["alloc_bytes"] - part["freed_bytes"])
        rows.append(part)
    cols = ["id", "name", "kind", "module", "device", "allocs", "alloc_bytes", "frees",
            "freed_bytes", "self_bytes", "peak_bytes", "total_bytes", "start_ns", "end_ns"]
    if not rows:
        return pd.DataFrame({c: [] for c in cols})
    out = pd.concat(rows, ignore_index=True)
    return out.sort_values(["id", "device"], kind="stable").reset_index(drop=True)[cols]


def _inclusive(parent, own, combine):
    """own (per span, NaN for none) folded into every ancestor with combine (np.add or
    np.fmax): a span's value over its subtree.  Parents come before children."""
    out = own.copy()
    for i in range(len(parent) - 1, -1, -1):
        p = parent[i]
        if p >= 0 and not np.isnan(out[i]):
            out[p] = out[i] if np.isnan(out[p]) else combine(out[p], out[i])
    return out


def layers(source, device="cpu"):
    """One row per layer call (module span) in span order: id, name, type, alloc_bytes and
    self_bytes (allocated, and left allocated, by the call's forward: every span below it),
    peak_bytes (the highest total allocated on the device reported inside it: the layer's
    peak), backward_alloc_bytes (allocated by the backward functions of the ops it ran, summed
    per qualified name over the trace: the same for every call of that name).  NaN where the
    call saw no event on the device.  Raises ValueError when the trace has no memory."""
    import pandas as pd
    df = _table(source)
    _require(df)
    if device not in DEVICES:
        raise ValueError("device must be one of %s, not %r" % (", ".join(DEVICES), device))
    parent = df["parent"].to_numpy().astype(np.int64)
    alloc = _num(df, "mem.%s.alloc_bytes" % device)
    freed = _num(df, "mem.%s.freed_bytes" % device)
    net = alloc - np.nan_to_num(freed)
    kind = df["kind"].to_numpy()
    # forward: the subtree; backward work is not below the module span (autograd runs it
    # later), so it is attributed through the module column to_pandas computes
    inc_alloc = _inclusive(parent, alloc, np.add)
    inc_net = _inclusive(parent, net, np.add)
    inc_peak = _inclusive(parent, _num(df, "mem.%s.peak" % device), np.fmax)
    is_bw = np.zeros(len(df), dtype=bool)
    bw_root = kind == "backward"
    if bw_root.any():
        # a backward function and everything below it
        is_bw = nearest_ancestor(parent, bw_root, include_self=True) >= 0
    bw = pd.Series(np.where(is_bw, np.nan_to_num(alloc), 0.0)).groupby(
        df["module"].to_numpy() if "module" in df.columns else np.full(len(df), None)).sum()
    ids = np.nonzero(kind == "module")[0]
    names = df["name"].to_numpy()[ids]
    return pd.DataFrame({
        "id": ids.astype(np.int64),
        "name": names,
        "type": df["type"].to_numpy()[ids] if "type" in df.columns else None,
        "alloc_bytes": inc_alloc[ids],
        "self_bytes": inc_net[ids],
        "peak_bytes": inc_peak[ids],
        "backward_alloc_bytes": np.array([bw.get(n, 0.0) for n in names], dtype=float),
    })


def timeline(source, device="cpu"):
    """The memory timeline: one row per span with events on the device, by end time: time_ns
    (the span's end), total_bytes (allocated on the device after its last event), peak_bytes
    (the highest total reported during its events, at some time inside it), start_ns, id,
    name.  Raises ValueError when the trace has no memory."""
    import pandas as pd
    s = spans(source, device=device)
    out = pd.DataFrame({"time_ns": s["end_ns"], "total_bytes": s["total_bytes"],
                        "peak_bytes": s["peak_bytes"], "start_ns": s["start_ns"],
                        "id": s["id"], "name": s["name"]})
    return out.sort_values(["time_ns", "id"], kind="stable").reset_index(drop=True)


def _numbers(source):
    """key -> the column mem.<dev>.<field> as float64, NaN where a span lacks it or it is not a
    number (as _num reads the span table).  A Trace whose memory attributes are all numbers is
    read from its attribute columns, without pandas (the text summary's path: xsp summary loads
    no pandas); a span table, or a Trace with text among them (only a hand-made or damaged one),
    through pandas' to_numeric as _num does, so that both give the same figures.  Raises
    ValueError when there is no memory."""
    if isinstance(source, Trace):
        _require(source)
        n, cols = len(source), {}
        for key in source.column_names():
            if not key.startswith("mem."):
                continue
            ids, vals = source.attr_column(key)
            if not isinstance(vals, np.ndarray):        # text among the values
                break
            col = np.full(n, np.nan)
            col[ids] = vals                             # int64 or float64, as to_numeric
            cols[key] = col
        else:
            return lambda key: cols[key] if key in cols else np.full(n, np.nan)
    df = _table(source)
    _require(df)
    return lambda key: _num(df, key)


def summary(source):
    """Totals per device: {device: {allocs, alloc_bytes, frees, freed_bytes, peak_bytes,
    outside_alloc_bytes, outside_freed_bytes}} over every span (and the events outside them,
    from the counters when source is a Trace); peak_bytes is None where no span of the device
    has a peak (only in a hand-made or damaged trace).  Reads a Trace without pandas."""
    num = _numbers(source)
    counters = dict(source.counters) if isinstance(source, Trace) else {}
    out = {}
    for dev in DEVICES:
        a = num("mem.%s.allocs" % dev)
        if np.isnan(a).all():
            continue
        peak = num("mem.%s.peak" % dev)
        out[dev] = {
            "allocs": int(np.nansum(a)),
            "alloc_bytes": int(np.nansum(num("mem.%s.alloc_bytes" % dev))),
            "frees": int(np.nansum(num("mem.%s.frees" % dev))),
            "freed_bytes": int(np.nansum(num("mem.%s.freed_bytes" % dev))),
            "peak_bytes": None if np.isnan(peak).all() else int(np.nanmax(peak)),
            "outside_alloc_bytes": int(counters.get(
                "memory.outside_spans.%s.alloc_bytes" % dev, 0)),
            "outside_freed_bytes": int(counters.get(
                "memory.outside_spans.%s.freed_bytes" % dev, 0)),
        }
    return out


__all__ = ["has_memory", "spans", "layers", "timeline", "summary", "DEVICES"]
