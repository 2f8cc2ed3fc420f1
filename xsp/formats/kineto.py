"""Kineto's trace JSON, the format torch.profiler's export_chrome_trace writes and HTA,
TensorBoard's profiler plugin and Perfetto read: write an xsp trace in it, and read one
into an xsp trace (docs/format.md, "Kineto's JSON").

    xsp.save(trace, "run.pt.trace.json")              # write(trace, path): this module's
    tr = xsp.load("torch_trace.json")                # read(path): an xsp.Trace

Writing.  Every span becomes the event torch.profiler would have written for it: ops and
backward functions `cpu_op`, steps `ProfilerStep#N`, record_function scopes `user_annotation`,
model and module calls `python_function` events named as torch's with_modules names them
("nn.Module: Linear_0"), Python function calls (with_stack) `python_function` events named
"file(line): name" as its python tracer names them, CUDA API calls `cuda_runtime`/`cuda_driver`, kernels, copies and
memsets `kernel`/`gpu_memcpy`/`gpu_memset` on the device's process and the stream's thread,
with the args Kineto writes where xsp has the value; `ac2g` flows join each API call to its
GPU work and `fwdbwd` flows each forward op to its backward function.  What only xsp knows
(the module's qualified name, the level, the span id, lost counters, leveled latencies) goes
in args named "xsp.*" and in the top-level key "xsp", which Kineto's readers ignore.  The
events are written by C (csrc/io/kinetow.c over the JSON layer csrc/io/jsonw.c, streamed, gzip
for .gz, the GIL released; the memory instants in csrc/io/kmemw.c) from columns made here with
numpy (_columns); the Python writer it
replaced stays as _reference_write, the tests' reference and the writer of hand-made traces
with values past int64.

Reading (in C, csrc/io/kjson.c and kbuild.c, streamed a chunk at a time with a size cap; every
malformed field a TraceFormatError naming the event and the field).  Events are nested per
thread by time (a stack over the events sorted by start,
longest first), GPU work hangs under the op whose runtime call has its correlation id, and
categories map back to kinds; every arg is kept as an attribute "k.<arg>" (lists as JSON
text), so that writing a loaded trace gives the events back (docs/format.md lists what).

A format of xsp.formats (xsp.load and xsp.save choose it for .pt.trace.json[.gz] and .json.gz):
it imports only the C core and the values.
"""
import gzip
import json
import math
import os
import socket
import uuid

import numpy as np

from xsp import _core
from xsp.core import iterations
from xsp.core.util import atomic_write, c_json_write, printable
from xsp.formats.tracks import SPAWN_FLOW, kineto_pid, spawn_links, tracks, us
from xsp.values.trace import Trace, core_data

KINDS = _core.KINDS
LEVELS = _core.LEVELS
K = {k: i for i, k in enumerate(KINDS)}
ARG = "k."                          # attribute prefix of the args a read event carried


CATEGORY = {"op": "cpu_op", "backward": "cpu_op", "scope": "user_annotation",
            "step": "user_annotation", "model": "python_function",
            "module": "python_function", "python": "python_function",
            "runtime": "cuda_runtime", "driver": "cuda_driver",
            "kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset",
            "sync": "cuda_sync", "overhead": "overhead", "region": "Trace"}
GPU_WORK = ("kernel", "memcpy", "memset")


# -- writing --------------------------------------------------------------------------------
def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    if isinstance(v, str):
        return printable(v)
    if isinstance(v, dict):
        return {printable(str(k)): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def _line(event, ts):
    """One event's JSON with "ts" first, written as a number with three decimals."""
    return '{"ts": %s, %s' % (ts, _dumps(event)[1:])


def _dumps(v):
    """JSON text of v.  ", " and ": " separators: HTA finds the rank with the regex
    '"rank":\\s+(\\d+)'.  Strings are written as they are (ensure_ascii off): the file is
    encoded with errors="replace", so bytes that were not UTF-8 (lone surrogates) become '?'.
    Non-finite floats become strings (_clean), the rare case, tried second."""
    try:
        return json.dumps(v, ensure_ascii=False, allow_nan=False)
    except ValueError:
        return json.dumps(_clean(v), ensure_ascii=False, allow_nan=False)


def _module_names(trace, kinds, attrs):
    """For model and module spans: (python function name, Python module id): the name as
    torch's with_modules writes it, 'nn.Module: <Type>_<n>' with n the module's number among
    the modules of its type in order of first call (by qualified name), and a module id per
    qualified name."""
    names, mids = {}, {}
    by_type, ids = {}, {}
    for i in np.nonzero((kinds == K["model"]) | (kinds == K["module"]))[0].tolist():
        a = attrs[i]
        if "k.Python module id" in a and trace.strings[trace.name_codes[i]].startswith(
                "nn.Module: "):
            names[i] = trace.strings[trace.name_codes[i]]
            mids[i] = a["k.Python module id"]
            continue
        typ = a.get("type") or trace.strings[trace.name_codes[i]]
        qual = trace.strings[trace.name_codes[i]]
        key = (typ, qual)
        if key not in ids:
            n = by_type.get(typ, 0)
            by_type[typ] = n + 1
            ids[key] = (n, len(ids) + 1)
        names[i] = "nn.Module: %s_%d" % (typ, ids[key][0])
        mids[i] = ids[key][1]
    return names, mids


# record_shapes: the op attributes and torch's args, in the order torch writes them
INPUT_ARGS = (("concrete_inputs", "Concrete Inputs"), ("input_types", "Input type"),
              ("input_strides", "Input Strides"), ("input_dims", "Input Dims"))


def _put_inputs(args, a):
    """An op's inputs as torch.profiler(record_shapes=True) writes them: the four lists,
    left out for an op without inputs (as torch does); an attribute that is not JSON (a
    hand-made trace) is left out too."""
    if a.get("input_dims") in (None, "[]"):
        return
    for src, dst in INPUT_ARGS:
        v = a.get(src)
        if isinstance(v, str):
            try:
                args[dst] = json.loads(v)
            except (ValueError, RecursionError):
                pass


def _span_ref(a, key, n):
    """Attribute key of a (a span id: fwd_op, api) when it names one of the trace's n spans,
    else None (a hand-made or damaged trace)."""
    v = a.get(key)
    return v if isinstance(v, int) and 0 <= v < n else None


def _listed(v):
    """The value of a "k.<arg>[]" attribute (a list the reader kept as JSON text): the list
    back, or v itself when it is not a string holding JSON (a hand-made or edited trace)."""
    if not isinstance(v, str):
        return v
    try:
        return json.loads(v)
    except (ValueError, RecursionError):        # not JSON, or nested too deep to parse
        return v


MEM_DEVICES = {"cpu": (0, -1), "cuda": (1, 0), "other": (0, -1)}   # Device Type, Device Id


def _self_instants(trace, ids):
    """For each span id in ids (each with memory: mem.<dev>.* attributes), the first ns of
    its own time: its start, or the first instant that none of its children covers (its
    end - 1 when they cover all of it; its start when it lasts 0 ns).  A reader that folds
    each memory event into the innermost span open at its time (csrc/io/kbuild.c, torch's
    own) gives the event back to this span."""
    start = trace.start_ns.tolist()
    end = trace.end_ns.tolist()
    parent = trace.parent_ids
    want = set(ids)
    kids = {}
    for c in np.nonzero(np.isin(parent, list(want)))[0].tolist():
        kids.setdefault(int(parent[c]), []).append(c)
    out = {}
    for i in ids:
        t = start[i]
        for c in sorted(kids.get(i, ()), key=lambda c: start[c]):
            if start[c] > t:
                break
            t = max(t, end[c])
        out[i] = t if t < end[i] else max(start[i], end[i] - 1)
    return out


def _memory_events(a, p_, t_, ts):
    """torch.profiler's "[memory]" instants for one span's mem.<dev>.* sums, at ts (µs
    text): its allocations (their bytes split evenly, the remainder on the first) with the
    Total Allocated rising to the span's peak, then its frees, the last one leaving its total.
    Counts, bytes, peak and final total are the span's exactly; the order of its events
    within it is not kept (xsp keeps sums)."""
    out = []
    for dev, (dtype, did) in MEM_DEVICES.items():
        vals = [a.get("mem.%s.%s" % (dev, f)) for f in
                ("allocs", "alloc_bytes", "frees", "freed_bytes", "peak", "total")]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
            continue
        n_a, b_a, n_f, b_f, peak, total = vals
        if min(n_a, b_a, n_f, b_f) < 0 or not 0 < n_a + n_f <= 1 << 20:
            continue                    # no memory on dev, or sums no allocator reports
        base = {"Total Reserved": 0, "Device Id": did, "Device Type": dtype, "Addr": 0}
        # the peak is the highest total after one of the span's events: after its last
        # allocation, or without any, after its first free
        tot = peak - b_a if n_a else peak + b_f // n_f + b_f % n_f
        for k in range(n_a):
            size = b_a // n_a + (b_a % n_a if k == 0 else 0)
            tot += size
            out.append(dict(base, **{"Total Allocated": tot, "Bytes": size}))
        for k in range(n_f):
            size = b_f // n_f + (b_f % n_f if k == 0 else 0)
            tot = total if k == n_f - 1 else tot - size
            out.append(dict(base, **{"Total Allocated": tot, "Bytes": -size}))
    return ['{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", '
            '"pid": %s, "tid": %s, "ts": %s, "args": %s}' % (_dumps(p_), _dumps(t_), ts,
                                                              _dumps(args)) for args in out]


def write(trace, path, *, base_ns=None, leveled=None, fsync=False):
    """Writes trace (an xsp.Trace, or an xsp.Measurement: its deepest run's trace with each
    span's leveled latency) as Kineto's JSON (docs/format.md, "Kineto's JSON"):
    torch.profiler's layout, categories and args, ac2g and fwdbwd flows, xsp's extras in
    "xsp.*" args and the top-level "xsp" key.  A path ending in .gz is gzip-compressed.
    base_ns: baseTimeNanoseconds (default: the trace's own when it was read from Kineto's
    JSON, else 0: xsp's clock is monotonic, not wall time); ts = (t - base_ns) / 1000.
    leveled: {span id: leveled latency ns} (a Measurement's leveled_ns()), written as arg
    "xsp.leveled_ns".  The events are written by C (csrc/io/kinetow.c), streamed, with the
    GIL released, from columns made here; a trace with a value C cannot hold (an id or pid past
    int64, a step named by a number: hand-made traces) is written by the Python reference
    writer instead, to the same text.  Written atomically (a reader sees the old file or the
    new one, whole); fsync=True also makes it durable before this returns (docs/api.md,
    xsp.save).  OSError on failure."""
    if not isinstance(trace, Trace) and hasattr(trace, "leveled_ns"):    # a Measurement
        trace, leveled = trace.trace, trace.leveled_ns() if leveled is None else leveled
    path = os.fspath(path)
    try:
        head, tail, cols = _columns(trace, base_ns, leveled or {})
    except _Outside:
        return _reference_write(trace, path, base_ns=base_ns, leveled=leveled, fsync=fsync)
    c_json_write(path, _core.write_kineto, core_data(trace), head, tail, cols, fsync)
    return path


class _Outside(Exception):
    """A value of the trace that the C writer's columns cannot hold (past int64)."""


I64 = 2 ** 63


def _i64(values):
    """values (a sequence of ints) as an int64 array; _Outside for one past int64."""
    try:
        return np.array(values, dtype=np.int64).reshape(-1)
    except (OverflowError, TypeError, ValueError):
        raise _Outside() from None


class _Attrs:
    """trace.attrs_of as a sequence, for the helpers that take every span's attrs."""

    def __init__(self, trace):
        self._t = trace

    def __getitem__(self, i):
        return self._t.attrs_of(i)


def _head(trace, base_ns, pid, track, pids):
    """The text before the span events: the top-level keys, "xsp", and the process and thread
    names (as Kineto writes them), ending after the last of those events."""
    gpus = _gpus(trace, track)
    t0 = int(trace.start_ns.view(np.uint64).min()) if len(trace) else base_ns
    first_ts = us(t0 - base_ns)
    return _top_text(trace, base_ns, gpus) + ",\n".join(
        _line(e, first_ts) for e in _name_events(trace, track, pids, pid, gpus))


def _gpus(trace, track):
    """The devices of the trace's GPU streams, sorted."""
    return sorted(set(d for (d, _), (_, _, k) in zip(track, trace.threads) if k == 1))


def _tail(trace):
    meta = trace.meta
    return '\n  ],\n  "traceName": %s\n}\n' % _dumps(meta.get("kineto.traceName",
                                                              meta.get("region", "xsp")))


def _utf8(text):
    return text.encode("utf-8", "surrogateescape")


def _columns(trace, base_ns, leveled):
    """(head, tail, cols): the text around the events and the columns of xsp_kineto_cols
    (csrc/io/kinetow.h) for trace, vectorised but for the few spans that need Python (module
    and step names).  Raises _Outside for a value past int64."""
    base_ns, pid = kineto_pid(trace, base_ns)
    if not -I64 <= base_ns < I64:
        raise _Outside()
    n = len(trace)
    kinds = trace.kind_codes
    threads = trace.threads
    track, cpu_rank, pids = tracks(trace, pid)
    cols = {"base_ns": base_ns,
            "track_pid": _i64([p for p, _ in track]),
            "track_tid": np.array([t for _, t in track], dtype=np.uint64).reshape(-1),
            "fwd_rank": _i64([cpu_rank.get(t[0], 0) for t in threads])}
    # External ids: the read ones kept, then one per CPU event without one, in trace order
    ext = np.zeros(n, dtype=np.int64)
    next_ext = 1
    ids, vals = trace.attr_column(ARG + "External id")
    if isinstance(vals, list):
        keep = [(i, v) for i, v in zip(ids.tolist(), vals) if isinstance(v, int)]
        ids, vals = [i for i, _ in keep], [v for _, v in keep]
    elif vals.dtype.kind != "i":
        ids, vals = [], []
    vals = _i64(vals)
    if len(vals):
        if int(np.abs(vals).max()) >= 2 ** 62:
            raise _Outside()
        ext[np.asarray(ids, dtype=np.int64)] = vals
        next_ext = max(1, int(vals.max()) + 1)
    new = (ext == 0) & np.isin(kinds, [K[k] for k in ("op", "backward", "scope", "step",
                                                       "model", "module", "python")])
    ext[new] = next_ext + np.arange(int(new.sum()), dtype=np.int64)
    cols["ext"] = ext
    cpu_kind = np.isin(kinds, [K[k] for k in ("op", "backward", "scope", "step", "model",
                                             "module")])
    cols["near_cpu"] = trace.nearest_ancestor(cpu_kind, include_self=False)
    cols["near_mod"] = trace.nearest_ancestor(
        np.isin(kinds, [K["model"], K["module"], K["python"]]), include_self=False)
    # names: the trace's, but module names as with_modules writes them and step names
    name_sid = trace.name_codes.astype(np.int64)
    extra, extra_id = [], {}

    def sid(text):
        if not isinstance(text, str):
            raise _Outside()                    # a step named by a number (hand-made)
        if text not in extra_id:
            extra_id[text] = len(trace.strings) + len(extra)
            extra.append(_utf8(text))
        return extra_id[text]
    mod_id = np.zeros(n, dtype=np.int64)
    is_mod = (kinds == K["model"]) | (kinds == K["module"])
    if is_mod.any():
        mod_names, mod_ids = _module_names(trace, kinds, _Attrs(trace))
        for i, name in mod_names.items():
            name_sid[i] = sid(name)
            v = mod_ids[i]
            mod_id[i] = v if isinstance(v, int) and -I64 <= v < I64 else 0  # k. overrides it
    cols["mod_id"] = mod_id
    cols.update(_step_cols(trace, kinds, leveled, name_sid, sid))
    cols["name_sid"] = name_sid
    cols["extra"] = extra
    lev = sorted(leveled.items())
    cols["lev_id"] = _i64([i for i, _ in lev])
    lv = np.array([v for _, v in lev])
    if lv.dtype.kind == "f":
        cols["lev_val"] = lv.astype(np.float64)
    elif len(lv) == 0 or lv.dtype.kind in "iu":
        cols["lev_val"] = _i64([v for _, v in lev])
    else:
        raise _Outside()
    cols.update(_json_cols(trace))
    links = spawn_links(trace)
    cols["spawn_i"] = _i64([i for i, _ in links])
    cols["spawn_j"] = _i64([j for _, j in links])
    head = _head(trace, base_ns, pid, track, pids).encode("utf-8", "replace")
    return head, _tail(trace).encode("utf-8", "replace"), cols


def _step_cols(trace, kinds, leveled, name_sid, sid):
    """The step columns (how each step span is written: _steps_written), setting the names
    of the step spans in name_sid."""
    out = {"step_id": np.zeros(0, dtype=np.int64), "step_how": np.zeros(0, dtype=np.int64),
           "step_j": np.zeros(0, dtype=np.int64), "step_s0": np.zeros(0, dtype=np.uint64),
           "step_e0": np.zeros(0, dtype=np.uint64), "step_why": [None] * 4}
    if not (kinds == K["step"]).any():
        return out
    kind_of = np.array(KINDS, dtype=object)[kinds]
    steps = _steps_written(trace, kind_of, trace.strings, trace.name_codes.tolist(), leveled)
    ids = sorted(i for i in steps if isinstance(i, int))
    hows = ("step", "setup", "leftover", "priming")
    rows = []
    for i in ids:
        how, j, s0, e0 = steps[i]
        if how == "step":
            name = trace.attrs_of(i).get(ARG + "name") or "ProfilerStep#%d" % j
        else:
            name = "xsp: " + how
        name_sid[i] = sid(name)
        rows.append((i, hows.index(how), j, s0, e0))
    out["step_id"] = _i64([r[0] for r in rows])
    out["step_how"] = _i64([r[1] for r in rows])
    out["step_j"] = _i64([r[2] for r in rows])
    try:
        out["step_s0"] = np.array([r[3] for r in rows], dtype=np.uint64)
        out["step_e0"] = np.array([r[4] for r in rows], dtype=np.uint64)
    except OverflowError:
        raise _Outside() from None
    out["step_why"] = [None] + [_utf8(steps[h]) for h in hows[1:]]
    return out


def _json_cols(trace):
    """json_sid, json_text: for each string that is the value of a list attribute (k.<arg>[],
    the input attributes), its JSON as the reference writer re-writes it, None when it is not
    JSON."""
    keys = [k for k in trace.strings if k.startswith(ARG) and k.endswith("[]")]
    keys += [src for src, _ in INPUT_ARGS if src in trace.strings]
    want = set()
    for key in keys:
        _, vals = trace.attr_column(key)
        if isinstance(vals, list):
            want.update(v for v in vals if isinstance(v, str))
    sids = sorted(i for i, s in enumerate(trace.strings) if s in want) if want else []
    texts = []
    for i in sids:
        try:
            texts.append(_dumps(json.loads(trace.strings[i])).encode("utf-8", "replace"))
        except (ValueError, RecursionError):
            texts.append(None)
    return {"json_sid": np.array(sids, dtype=np.uint32), "json_text": texts}


# -- the reference: the Python writer the C one replaced, kept for the tests that compare them
# (tests/py/formats/test_json_writers.py) and for traces with values past int64
def _reference_write(trace, path, *, base_ns=None, leveled=None, fsync=False):
    """Writes trace as write does, one event at a time in Python."""
    if not isinstance(trace, Trace) and hasattr(trace, "leveled_ns"):    # a Measurement
        trace, leveled = trace.trace, trace.leveled_ns() if leveled is None else leveled
    text = "".join(_events_text(trace, base_ns, leveled or {}))
    path = os.fspath(path)
    if path.endswith(".gz"):
        data = gzip.compress(text.encode("utf-8", "replace"), mtime=0)
        atomic_write(path, lambda f: f.write(data), binary=True, fsync=fsync)
    else:
        atomic_write(path, lambda f: f.write(text), fsync=fsync)
    return path


def _events_text(trace, base_ns, leveled):
    """The reference writer's text, in pieces: the header, then every event (process and
    thread names, one per span with its [memory] instants, then the flows) and the tail."""
    base_ns, pid = kineto_pid(trace, base_ns)
    track, cpu_rank, pids = tracks(trace, pid)
    sp = _RefSpans(trace)
    gpus = _gpus(trace, track)
    t0 = min(sp.start) if sp.n else base_ns
    first_ts = us(t0 - base_ns)
    lines = [_line(e, first_ts) for e in _name_events(trace, track, pids, pid, gpus)]
    lines.extend(_ref_span_lines(trace, sp, base_ns, track, cpu_rank, leveled))
    lines.extend(_line(f, t) for f, t in _ref_flows(trace, sp, base_ns, track))
    return [_top_text(trace, base_ns, gpus), ",\n".join(lines),
            '\n  ],\n  "traceName": %s\n}\n' % _dumps(
                trace.meta.get("kineto.traceName", trace.meta.get("region", "xsp")))]


class _RefSpans:
    """The span columns the reference writer reads, as Python lists, and the derived ones:
    External ids, the enclosing CPU event and module of each span, module names."""

    def __init__(self, trace):
        self.n = n = len(trace)
        kinds = trace.kind_codes
        self.levels = trace.level_codes
        self.start = trace.start_ns.view(np.uint64).tolist()
        self.end = trace.end_ns.view(np.uint64).tolist()
        self.name_codes = trace.name_codes.tolist()
        self.thread_idx = trace.thread_index.tolist()
        self.attrs = [trace.attrs_of(i) for i in range(n)]
        self.kind_of = [KINDS[k] for k in kinds.tolist()]
        self.mod_names, self.mod_ids = _module_names(trace, kinds, self.attrs)
        self.ext = _external_ids(self.attrs, self.kind_of)
        # the op a GPU span's API call ran in: its External id (Kineto's linking key); and
        # the enclosing module or Python function (with_stack) of a module or Python function
        # (its Python parent id)
        cpu_kind = np.isin(kinds, [K[k] for k in ("op", "backward", "scope", "step", "model",
                                                 "module")])
        self.nearest_cpu = trace.nearest_ancestor(cpu_kind, include_self=False).tolist()
        self.nearest_mod = trace.nearest_ancestor(
            np.isin(kinds, [K["model"], K["module"], K["python"]]), include_self=False).tolist()


def _external_ids(attrs, kind_of):
    """One External id per CPU event, in trace order, the read ones kept (0 for the others)."""
    n = len(attrs)
    ext = [0] * n
    next_ext = 1
    for i in range(n):
        a = attrs[i].get(ARG + "External id")
        if isinstance(a, int):
            ext[i] = a
            next_ext = max(next_ext, a + 1)
    for i in range(n):
        if not ext[i] and kind_of[i] in ("op", "backward", "scope", "step", "model", "module",
                                         "python"):
            ext[i] = next_ext
            next_ext += 1
    return ext


def _top_text(trace, base_ns, gpus):
    """The text before the events: the top-level keys as Kineto writes them, then "xsp" (both
    writers)."""
    meta = trace.meta
    top = {"schemaVersion": 1, "deviceProperties": [], "trace_id": meta.get(
        "kineto.trace_id", uuid.uuid4().hex.upper()),
        "host_name": meta.get("kineto.host_name", meta.get("host", socket.gethostname())),
        "displayTimeUnit": "ms", "baseTimeNanoseconds": base_ns}
    for d in gpus:
        top["deviceProperties"].append({"id": int(d), "name": str(meta.get(
            "gpu%d.name" % d, meta.get("gpu.name", "")))})
    if "rank" in meta:
        top["distributedInfo"] = {"backend": meta.get("backend", ""), "rank": meta["rank"],
                                  "world_size": meta.get("world_size", 1)}
    head = "{\n"
    for k, v in top.items():
        head += '  "%s": %s,\n' % (k, _dumps(v))
    head += '  "xsp": %s,\n' % _dumps({"meta": dict(meta), "counters": dict(trace.counters),
                                       "levels": meta.get("levels", "")})
    return head + '  "traceEvents": [\n'


def _name_events(trace, track, pids, pid, gpus):
    """The process and thread name, label and sort-index events, as Kineto writes them (both
    writers)."""
    meta, threads = trace.meta, trace.threads
    ev = []
    cpu_pids = sorted(set(p for (p, _), (_, _, k) in zip(track, threads) if k != 1)) or [pid]
    rank_of_pid = {}
    if "ranks" in meta:
        for p_, (_, tname, _) in zip(pids, threads):
            if isinstance(tname, str) and tname.startswith("rank "):
                rank_of_pid.setdefault(p_, tname[5:].split(":", 1)[0])
    for cp in cpu_pids:
        ev.append({"ph": "M", "name": "process_name", "pid": cp, "tid": 0,
                   "args": {"name": "python" if cp not in rank_of_pid else
                            "rank %s" % rank_of_pid[cp]}})
        ev.append({"ph": "M", "name": "process_labels", "pid": cp, "tid": 0,
                   "args": {"labels": "CPU"}})
        ev.append({"ph": "M", "name": "process_sort_index", "pid": cp, "tid": 0,
                   "args": {"sort_index": cp}})
    for d in gpus:
        ev.append({"ph": "M", "name": "process_name", "pid": int(d), "tid": 0,
                   "args": {"name": "python"}})
        ev.append({"ph": "M", "name": "process_labels", "pid": int(d),
                   "tid": 0, "args": {"labels": "GPU %d" % d}})
        ev.append({"ph": "M", "name": "process_sort_index", "pid": int(d),
                   "tid": 0, "args": {"sort_index": 5000000 + int(d)}})
    for (p_, t_), (tid, tname, tkind) in zip(track, threads):
        if tkind == 1:
            label = "stream %d " % t_
        elif tkind == 0:
            label = "thread %d (%s)" % (tid, tname or "python")
        else:
            label = tname or "overhead"
        ev.append({"ph": "M", "name": "thread_name", "pid": p_, "tid": t_,
                   "args": {"name": label}})
        ev.append({"ph": "M", "name": "thread_sort_index", "pid": p_,
                   "tid": t_, "args": {"sort_index": t_ if tkind != 0 else tid}})
    return ev


def _ref_span_lines(trace, sp, base_ns, track, cpu_rank, leveled):
    """One event per span (its name, category, track and args by the rules of its kind, then
    what only xsp knows) and, with profile_memory, its [memory] instants."""
    names = trace.strings
    mem_ids = [i for i in range(sp.n) if any(key.startswith("mem.") for key in sp.attrs[i])]
    mem_at = _self_instants(trace, mem_ids) if mem_ids else {}
    steps = _steps_written(trace, sp.kind_of, names, sp.name_codes, leveled)
    heads = {}              # (cat, name, pid, tid) -> the event's JSON up to "ts"
    lines = []
    for i in range(sp.n):
        k, a = sp.kind_of[i], sp.attrs[i]
        p_, t_ = track[sp.thread_idx[i]]
        ts, dur = us(sp.start[i] - base_ns), us(sp.end[i] - sp.start[i])
        args = {}
        cat, name, where, times = _ref_rule(trace, sp, i, steps, args)
        if where is not None:
            p_, t_ = where
        if times is not None:
            ts, dur = us(times[0] - base_ns), us(times[1] - times[0])
        _ref_kind_args(trace, sp, i, cpu_rank, args)
        _ref_xsp_args(trace, sp, i, leveled, args)
        cat = a.get(ARG + "cat", cat) if k != "region" else cat
        head = (cat, name, p_, t_)
        h = heads.get(head)
        if h is None:
            h = heads[head] = '{"ph": "X", "cat": %s, "name": %s, "pid": %s, "tid": %s, ' % (
                _dumps(cat), _dumps(name), _dumps(p_), _dumps(t_))
        lines.append('%s"ts": %s, "dur": %s, "args": %s}' % (h, ts, dur, _dumps(args)))
        if i in mem_at and k != "region":      # profile_memory: as torch writes it
            lines.extend(_memory_events(a, p_, t_, us(mem_at[i] - base_ns)))
    return lines


def _ref_rule(trace, sp, i, steps, args):
    """(category, name, (pid, tid) or None, (start, end) or None) of span i by its kind, and
    the args that come with them: the region on Kineto's "Spans" track, xsp's iterations as
    ProfilerStep#N, modules as torch's python_function events."""
    k, a = sp.kind_of[i], sp.attrs[i]
    name = trace.strings[sp.name_codes[i]]
    if k == "region":
        args["Op count"] = 0
        return a.get(ARG + "cat", "Trace"), name, ("Spans", "PyTorch Profiler"), None
    if k == "step":
        # xsp's iterations (xsp.iterations): ProfilerStep#N over each iteration's window, the
        # setup and a leftover after the last step() as annotations of their own
        how, j, s0, e0 = steps[i]
        if how == "step":
            args["xsp.iteration"] = j
            return ("user_annotation", a.get(ARG + "name") or "ProfilerStep#%d" % j, None,
                    (s0, e0))
        args["xsp.why"] = steps[how]
        return "user_annotation", "xsp: " + how, None, None
    if k in ("model", "module", "python"):      # python: with_stack's Python function calls
        args["Python id"] = sp.ext[i]
        pp = sp.nearest_mod[i]
        args["Python parent id"] = sp.ext[pp] if pp >= 0 else None
        if k == "python":
            return "python_function", name, None, None
        args["Python module id"] = sp.mod_ids[i]
        return "python_function", sp.mod_names[i], None, None
    return CATEGORY.get(k, k), name, None, None


def _ref_kind_args(trace, sp, i, cpu_rank, args):
    """The args torch writes for span i's kind: External ids, sequence numbers and inputs of
    CPU events; cbid and correlation of API calls; a GPU activity's launch figures."""
    k, a, n = sp.kind_of[i], sp.attrs[i], sp.n
    if k in ("op", "backward", "scope", "step", "model", "module"):
        args["External id"] = sp.ext[i]
        if k != "model" and k != "module":
            args["Record function id"] = 0
            _put_inputs(args, a)
            args["Ev Idx"] = sp.ext[i] - 1
        seq = a.get("seq")
        if isinstance(seq, int) and seq >= 0 and k in ("op", "backward"):
            args["Sequence number"] = seq
            if k == "backward" and _span_ref(a, "fwd_op", n) is not None:
                f_thread = trace.threads[sp.thread_idx[a["fwd_op"]]][0]
                args["Fwd thread id"] = cpu_rank.get(f_thread, 0)
            else:
                args["Fwd thread id"] = 0
    elif k in ("runtime", "driver"):
        if "cbid" in a:
            args["cbid"] = a["cbid"]
        if "correlation" in a:
            args["correlation"] = a["correlation"]
        if sp.nearest_cpu[i] >= 0:
            args["External id"] = sp.ext[sp.nearest_cpu[i]]
    elif k in GPU_WORK or k == "sync":
        _ref_gpu_args(sp, i, args)


def _ref_gpu_args(sp, i, args):
    """A kernel's, copy's, memset's or sync's args: its launch's External id, device, stream,
    correlation, and a kernel's registers, shared memory, grid and block, a copy's bytes and
    bandwidth."""
    k, a = sp.kind_of[i], sp.attrs[i]
    if sp.nearest_cpu[i] >= 0:
        args["External id"] = sp.ext[sp.nearest_cpu[i]]
    if k == "kernel":
        args["queued"] = 0
    for key in ("device", "stream", "correlation"):
        if key in a:
            args[key] = a[key]
    if k == "kernel":
        if "registers" in a:
            args["registers per thread"] = a["registers"]
        if "smem_static" in a or "smem_dynamic" in a:
            smem = [a.get(key, 0) for key in ("smem_static", "smem_dynamic")]
            if all(isinstance(v, int) for v in smem):   # else only as xsp.smem_*
                args["shared memory"] = sum(smem)
        if "grid_x" in a:
            args["grid"] = [a.get("grid_x", 1), a.get("grid_y", 1), a.get("grid_z", 1)]
        if "block_x" in a:
            args["block"] = [a.get("block_x", 1), a.get("block_y", 1), a.get("block_z", 1)]
    if k in ("memcpy", "memset") and "bytes" in a:
        args["bytes"] = a["bytes"]
        d_ns = sp.end[i] - sp.start[i]
        if isinstance(a["bytes"], (int, float)):
            args["memory bandwidth (GB/s)"] = (a["bytes"] / d_ns) if d_ns else 0.0


def _ref_xsp_args(trace, sp, i, leveled, args):
    """What only xsp knows: the span's id, kind, level, module name, its attributes (a read
    event's own args back under their names), fwd_op and leveled latency."""
    k, a = sp.kind_of[i], sp.attrs[i]
    args["xsp.id"] = i
    args["xsp.kind"] = k
    args["xsp.level"] = LEVELS[sp.levels[i]]
    if k in ("model", "module"):
        args["xsp.module"] = trace.strings[sp.name_codes[i]]
    for key, v in a.items():
        if key.startswith(ARG):
            raw = key[len(ARG):]
            if key.endswith("[]"):
                raw = raw[:-2]
                v = _listed(v)
            args[raw] = v
        elif key not in ("seq", "fwd_op"):
            args.setdefault("xsp." + key, v)
    if isinstance(a.get("fwd_op"), int):
        args["xsp.fwd_op"] = a["fwd_op"]
    if i in leveled:
        args["xsp.leveled_ns"] = leveled[i]


def _ref_flows(trace, sp, base_ns, track):
    """[(flow event, ts)]: a GPU activity from its API call (ac2g, by correlation), a backward
    op from its forward op (fwdbwd), an intra-op thread's span from its spawning op."""
    flows = []
    flow_id = 0
    for i in range(sp.n):
        k, a = sp.kind_of[i], sp.attrs[i]
        p_, t_ = track[sp.thread_idx[i]]
        ts = us(sp.start[i] - base_ns)
        if k == "step" or k == "region":
            continue
        if k in GPU_WORK and "correlation" in a and _span_ref(a, "api", sp.n) is not None:
            j = a["api"]
            pj, tj = track[sp.thread_idx[j]]
            flows.append(({"ph": "s", "id": a["correlation"], "pid": pj, "tid": tj,
                           "cat": "ac2g", "name": "ac2g"}, us(sp.start[j] - base_ns)))
            flows.append(({"ph": "f", "id": a["correlation"], "pid": p_, "tid": t_,
                           "cat": "ac2g", "name": "ac2g", "bp": "e"}, ts))
        if k == "backward" and _span_ref(a, "fwd_op", sp.n) is not None:
            j = a["fwd_op"]
            flow_id += 1
            pj, tj = track[sp.thread_idx[j]]
            flows.append(({"ph": "s", "id": flow_id, "pid": pj, "tid": tj,
                           "cat": "fwdbwd", "name": "fwdbwd"}, us(sp.start[j] - base_ns)))
            flows.append(({"ph": "f", "id": flow_id, "pid": p_, "tid": t_,
                           "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"}, ts))
    for i, j in spawn_links(trace):     # an intra-op thread's span from its spawning op
        flow_id += 1
        pj, tj = track[sp.thread_idx[j]]
        p_, t_ = track[sp.thread_idx[i]]
        ts = us(sp.start[i] - base_ns)
        flows.append(({"ph": "s", "id": flow_id, "pid": pj, "tid": tj, "cat": SPAWN_FLOW,
                       "name": SPAWN_FLOW}, ts))
        flows.append(({"ph": "f", "id": flow_id, "pid": p_, "tid": t_, "cat": SPAWN_FLOW,
                       "name": SPAWN_FLOW, "bp": "e"}, ts))
    return flows


def _steps_written(trace, kind_of, names, name_codes, leveled):
    """How each step span is written: {span id: (how, iteration, start, end)}, how "step" (a
    ProfilerStep#iteration over the iteration's window start..end: a step#0 carved at its first
    model call starts there, what came before it is outside every step, as torch's own traces
    begin), or "setup", "leftover" or "priming" (a step that is no iteration, written as the
    annotation "xsp: <how>"), with the sentence that says why under each how.  A Measurement's
    trace (leveled given): its measured steps are the iterations, its priming steps apart."""
    ids = [i for i, k in enumerate(kind_of) if k == "step"]
    if not ids:
        return {}
    out = {"setup": "", "leftover": "not an iteration",
           "priming": "a priming call of xsp.measure, left out of its statistics"}
    if leveled:
        measured = [i for i in ids if i in leveled]
        for i in ids:
            out[i] = ("priming", -1, 0, 0)
        for j, i in enumerate(measured):
            out[i] = ("step", j, int(trace.start_ns[i]), int(trace.end_ns[i]))
        return out
    w = iterations.windows(np.array(kind_of), np.array([names[c] for c in name_codes],
                                                       dtype=object),
                           trace.parent_ids, trace.start_ns, trace.duration_ns,
                           trace.flag_bits, trace.meta)
    for i in ids:
        out[i] = ("leftover", -1, 0, 0)
    if w.setup is not None:
        out[w.setup[0]] = ("setup", -1, 0, 0)
    for j, (i, s0, e0) in enumerate(zip(w.ids.tolist(), w.starts.tolist(), w.ends.tolist())):
        if kind_of[i] == "step":
            out[i] = ("step", j, s0, e0)
    out["setup"] = w.setup_rule or "the work before the first iteration"
    if w.dropped_tail:
        out["leftover"] = w.dropped_tail[1]
    return out


# -- reading --------------------------------------------------------------------------------
def _fail(path, msg, offset=None, index=None):
    where = "%s: " % path
    if index is not None:
        where += "event %d: " % index
    if offset is not None:
        where += "byte %d: " % offset
    e = _core.TraceFormatError(where + msg)
    e.path = path
    e.offset = offset
    e.event = index
    return e


# The most JSON text read from one file (after gzip) unless asked: above any trace torch writes
# in practice (its JSON of 10^7 events is about 1.3 GB), low enough that a gzip bomb stops
# within seconds.  XSP_KINETO_MAX_BYTES sets it for a process (the CLI's commands).
MAX_BYTES = 2 << 30
_CHUNK = 1 << 20


def max_bytes_default():
    """MAX_BYTES, or $XSP_KINETO_MAX_BYTES when set (a positive int; ValueError otherwise)."""
    v = os.environ.get("XSP_KINETO_MAX_BYTES")
    if v is None:
        return MAX_BYTES
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n <= 0:
        raise ValueError("XSP_KINETO_MAX_BYTES must be a positive number of bytes, not %r" % v)
    return n


def read(path, *, max_bytes=None):
    """Parses a Kineto JSON trace (torch.profiler's export_chrome_trace, .json or .json.gz)
    into an xsp.Trace, streamed: the file (inflated as it is read when it is gzip) goes
    to the C reader (csrc/io/kjson.h) a megabyte at a time, so memory follows the events, not
    the file's size.  More than max_bytes bytes of JSON text (default: max_bytes_default(), 2 GiB)
    is refused.  Raises
    xsp.TraceFormatError (.path; .offset for malformed JSON, nesting deeper than 1000 or the
    cap; .event for a malformed event, with the field named in the message) and OSError."""
    path = os.fspath(path)
    if max_bytes is None:
        max_bytes = max_bytes_default()
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise ValueError("max_bytes must be a positive int, not %r" % (max_bytes,))
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
        f.seek(0)
        chunks = _inflated(f, path, max_bytes) if gz else _chunks(f, path, max_bytes)
        try:
            data = _core.read_kineto(chunks)
        except _core.TraceFormatError as exc:
            if getattr(exc, "path", None) == path:          # the cap or gzip: already located
                raise
            raise _fail(path, str(exc), offset=exc.offset, index=exc.event) from None
    data._add_meta({"kineto.path": os.path.abspath(path)})
    return Trace(data)


def _too_big(path, max_bytes):
    return _fail(path, "more than %d bytes of JSON text: refused (max_bytes; pass a larger "
                 "max_bytes to read it)" % max_bytes, offset=max_bytes)


def _chunks(f, path, max_bytes):
    """The file's bytes a chunk at a time, at most max_bytes of them."""
    total = 0
    while True:
        buf = f.read(_CHUNK)
        if not buf:
            return
        total += len(buf)
        if total > max_bytes:
            raise _too_big(path, max_bytes)
        yield buf


def _inflated(f, path, max_bytes):
    """The gzip file's inflated bytes (every member, as gzip reads them; zero padding after
    the last allowed) a piece at a time, at most max_bytes of them.  The compressed input goes
    in pieces of 4 KiB, so one step makes at most about 4 MB (deflate's limit is 1032:1)
    and a bomb costs no more than the cap."""
    import zlib
    total, pos, d = 0, 0, None
    while True:
        piece = f.read(1 << 12)
        if not piece:
            break
        while piece:
            if d is None:
                if not piece.strip(b"\x00"):
                    pos += len(piece)
                    break
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                out = d.decompress(piece)
            except zlib.error as exc:
                raise _fail(path, "not a gzip file: %s" % exc, offset=pos) from None
            if d.eof:                               # another member may follow
                used, piece, d = len(piece) - len(d.unused_data), d.unused_data, None
            else:
                used, piece = len(piece), b""
            pos += used
            total += len(out)
            if total > max_bytes:
                raise _too_big(path, max_bytes)
            if out:
                yield out
    if d is not None:
        raise _fail(path, "not a gzip file: it ends inside a compressed stream", offset=pos)


__all__ = ["write", "read"]
