"""Kineto's trace JSON, the format torch.profiler's export_chrome_trace writes and HTA,
TensorBoard's profiler plugin and Perfetto read: write an xsp trace in it, and read one
into an xsp trace (docs/format.md, "Kineto's JSON").

    xsp.kineto.write(trace, "run.pt.trace.json")      # or trace.to_kineto(path)
    tr = xsp.load_kineto("torch_trace.json")         # an xsp.Trace

Writing.  Every span becomes the event torch.profiler would have written for it: ops and
backward functions `cpu_op`, steps `ProfilerStep#N`, record_function scopes `user_annotation`,
model and module calls `python_function` events named as torch's with_modules names them
("nn.Module: Linear_0"), Python function calls (with_stack) `python_function` events named
"file(line): name" as its python tracer names them, CUDA API calls `cuda_runtime`/`cuda_driver`, kernels, copies and
memsets `kernel`/`gpu_memcpy`/`gpu_memset` on the device's process and the stream's thread,
with the args Kineto writes where xsp has the value; `ac2g` flows join each API call to its
GPU work and `fwdbwd` flows each forward op to its backward function.  What only xsp knows
(the module's qualified name, the level, the span id, lost counters, leveled latencies) goes
in args named "xsp.*" and in the top-level key "xsp", which Kineto's readers ignore.

Reading.  Events are nested per thread by time (a stack over the events sorted by start,
longest first), GPU work hangs under the op whose runtime call has its correlation id, and
categories map back to kinds; every arg is kept as an attribute "k.<arg>" (lists as JSON
text), so that writing a loaded trace gives the events back (docs/format.md lists what).

This module imports only the C core: the data layer (xsp.trace) uses it for Trace.to_kineto
and load_kineto.
"""
import decimal
import gzip
import json
import math
import os
import socket
import uuid

import numpy as np

from . import _core
from ._util import atomic_write, printable

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
def _us(ns):
    """Integer ns as Kineto's microseconds with three decimals (exact)."""
    ns = int(ns)
    sign = "-" if ns < 0 else ""
    q, r = divmod(abs(ns), 1000)
    return "%s%d.%03d" % (sign, q, r)


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


def thread_pids(trace, pid):
    """Per track of trace, the process id to write it under: pid, except in a merged job
    (meta ranks) where a track named "rank R: ..." belongs to rank R's process (meta
    rank<R>.pid; R itself when that is missing, so that ranks stay apart)."""
    out = []
    merged = "ranks" in trace.meta
    for tid, name, kind in trace.threads:
        p = pid
        if merged and isinstance(name, str) and name.startswith("rank "):
            head = name[5:].split(":", 1)[0]
            if head.isdigit():
                v = trace.meta.get("rank%s.pid" % head)
                p = v if isinstance(v, int) and v >= 0 else int(head)
        out.append(p)
    return out


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
            except ValueError:
                pass


def write(trace, path, *, base_ns=None, leveled=None):
    """Writes trace (an xsp.Trace) as Kineto's JSON (docs/format.md, "Kineto's JSON"):
    torch.profiler's layout, categories and args, ac2g and fwdbwd flows, xsp's extras in
    "xsp.*" args and the top-level "xsp" key.  A path ending in .gz is gzip-compressed.
    base_ns: baseTimeNanoseconds (default: the trace's own when it was read from Kineto's
    JSON, else 0: xsp's clock is monotonic, not wall time); ts = (t - base_ns) / 1000.
    leveled: {span id: leveled latency ns} (Measurement.to_kineto), written as arg
    "xsp.leveled_ns".  Written atomically; OSError on failure."""
    text = "".join(_events_text(trace, base_ns, leveled or {}))
    path = os.fspath(path)
    if path.endswith(".gz"):
        data = gzip.compress(text.encode("utf-8", "replace"), mtime=0)
        atomic_write(path, lambda f: f.write(data), binary=True)
    else:
        atomic_write(path, lambda f: f.write(text))
    return path


def _events_text(trace, base_ns, leveled):
    meta = trace.meta
    if base_ns is None:
        base_ns = int(meta.get("kineto.baseTimeNanoseconds", 0))
    pid = meta.get("pid")
    if not (isinstance(pid, int) and 0 <= pid < 2 ** 31):
        pid = int(meta.get("kineto.pid", os.getpid())) if isinstance(
            meta.get("kineto.pid", 0), int) else 0
    n = len(trace)
    kinds = trace.kind_codes
    levels = trace.level_codes
    start = trace.start_ns.view(np.uint64).tolist()
    end = trace.end_ns.view(np.uint64).tolist()
    names = trace.strings
    name_codes = trace.name_codes.tolist()
    thread_idx = trace.thread_index.tolist()
    threads = trace.threads
    attrs = [trace.attrs_of(i) for i in range(n)]
    kind_of = [KINDS[k] for k in kinds.tolist()]
    mod_names, mod_ids = _module_names(trace, kinds, attrs)
    # CPU threads by OS id; GPU tracks (tid = device << 32 | stream) on the device's process
    cpu_rank = {}
    track = []
    pids = thread_pids(trace, pid)
    for i, (tid, tname, tkind) in enumerate(threads):
        if tkind == 1:
            track.append((tid >> 32, tid & 0xFFFFFFFF))
        else:
            track.append((pids[i], tid))
            if tkind == 0:
                cpu_rank.setdefault(tid, len(cpu_rank) + 1)
    # External ids: one per CPU event, in trace order (the read ones kept)
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
    # the op a GPU span's API call ran in: its External id (Kineto's linking key); and the
    # enclosing module or Python function (with_stack) of a module or Python function (its
    # Python parent id)
    cpu_kind = np.isin(kinds, [K[k] for k in ("op", "backward", "scope", "step", "model",
                                             "module")])
    nearest_cpu = trace.nearest_ancestor(cpu_kind, include_self=False).tolist()
    nearest_mod = trace.nearest_ancestor(np.isin(kinds, [K["model"], K["module"], K["python"]]),
                                         include_self=False).tolist()
    out = []
    top = {"schemaVersion": 1, "deviceProperties": [], "trace_id": meta.get(
        "kineto.trace_id", uuid.uuid4().hex.upper()),
        "host_name": meta.get("kineto.host_name", meta.get("host", socket.gethostname())),
        "displayTimeUnit": "ms", "baseTimeNanoseconds": base_ns}
    gpus = sorted(set(d for (d, _), (_, _, k) in zip(track, threads) if k == 1))
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
    head += '  "traceEvents": [\n'
    out.append(head)
    ev = []
    t0 = min(start) if n else base_ns
    first_ts = _us(t0 - base_ns)
    # process and thread names, as Kineto writes them
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
    lines = [_line(e, first_ts) for e in ev]
    flows = []
    flow_id = 0
    heads = {}              # (cat, name, pid, tid) -> the event's JSON up to "ts"
    for i in range(n):
        k = kind_of[i]
        a = attrs[i]
        name = names[name_codes[i]]
        p_, t_ = track[thread_idx[i]]
        ts, dur = _us(start[i] - base_ns), _us(end[i] - start[i])
        args = {}
        if k == "region":
            cat = a.get(ARG + "cat", "Trace")
            p_, t_ = "Spans", "PyTorch Profiler"
            args["Op count"] = 0
        elif k == "step":
            cat = "user_annotation"
            step_no = name.split("#", 1)[1] if "#" in name else "0"
            name = a.get(ARG + "name", "ProfilerStep#%s" % step_no)
        elif k in ("model", "module"):
            cat = "python_function"
            name = mod_names[i]
            args["Python id"] = ext[i]
            pp = nearest_mod[i]
            args["Python parent id"] = ext[pp] if pp >= 0 else None
            args["Python module id"] = mod_ids[i]
        elif k == "python":             # with_stack's Python function calls
            cat = "python_function"
            args["Python id"] = ext[i]
            pp = nearest_mod[i]
            args["Python parent id"] = ext[pp] if pp >= 0 else None
        else:
            cat = CATEGORY.get(k, k)
        if k in ("op", "backward", "scope", "step", "model", "module"):
            args["External id"] = ext[i]
            if k != "model" and k != "module":
                args["Record function id"] = 0
                _put_inputs(args, a)
                args["Ev Idx"] = ext[i] - 1
            seq = a.get("seq")
            if isinstance(seq, int) and seq >= 0 and k in ("op", "backward"):
                args["Sequence number"] = seq
                if k == "backward" and isinstance(a.get("fwd_op"), int):
                    f_thread = threads[thread_idx[a["fwd_op"]]][0]
                    args["Fwd thread id"] = cpu_rank.get(f_thread, 0)
                else:
                    args["Fwd thread id"] = 0
        elif k in ("runtime", "driver"):
            if "cbid" in a:
                args["cbid"] = a["cbid"]
            if "correlation" in a:
                args["correlation"] = a["correlation"]
            if nearest_cpu[i] >= 0:
                args["External id"] = ext[nearest_cpu[i]]
        elif k in GPU_WORK or k == "sync":
            if nearest_cpu[i] >= 0:
                args["External id"] = ext[nearest_cpu[i]]
            if k == "kernel":
                args["queued"] = 0
            for src, dst in (("device", "device"), ("stream", "stream"),
                             ("correlation", "correlation")):
                if src in a:
                    args[dst] = a[src]
            if k == "kernel":
                if "registers" in a:
                    args["registers per thread"] = a["registers"]
                if "smem_static" in a or "smem_dynamic" in a:
                    args["shared memory"] = int(a.get("smem_static", 0)) + int(
                        a.get("smem_dynamic", 0))
                if "grid_x" in a:
                    args["grid"] = [a.get("grid_x", 1), a.get("grid_y", 1), a.get("grid_z", 1)]
                if "block_x" in a:
                    args["block"] = [a.get("block_x", 1), a.get("block_y", 1),
                                     a.get("block_z", 1)]
            if k in ("memcpy", "memset") and "bytes" in a:
                args["bytes"] = a["bytes"]
                d_ns = end[i] - start[i]
                args["memory bandwidth (GB/s)"] = (a["bytes"] / d_ns) if d_ns else 0.0
        # what only xsp knows
        args["xsp.id"] = i
        args["xsp.kind"] = k
        args["xsp.level"] = LEVELS[levels[i]]
        if k in ("model", "module"):
            args["xsp.module"] = names[name_codes[i]]
        for key, v in a.items():
            if key.startswith(ARG):
                raw = key[len(ARG):]
                if key.endswith("[]"):
                    raw = raw[:-2]
                    try:
                        v = json.loads(v)
                    except ValueError:
                        pass
                args[raw] = v
            elif key not in ("seq", "fwd_op"):
                args.setdefault("xsp." + key, v)
        if isinstance(a.get("fwd_op"), int):
            args["xsp.fwd_op"] = a["fwd_op"]
        if i in leveled:
            args["xsp.leveled_ns"] = leveled[i]
        cat = a.get(ARG + "cat", cat) if k != "region" else cat
        head = (cat, name, p_, t_)
        h = heads.get(head)
        if h is None:
            h = heads[head] = '{"ph": "X", "cat": %s, "name": %s, "pid": %s, "tid": %s, ' % (
                _dumps(cat), _dumps(name), _dumps(p_), _dumps(t_))
        lines.append('%s"ts": %s, "dur": %s, "args": %s}' % (h, ts, dur, _dumps(args)))
        # flows
        if k in GPU_WORK and "correlation" in a and isinstance(a.get("api"), int):
            j = a["api"]
            pj, tj = track[thread_idx[j]]
            flows.append(({"ph": "s", "id": a["correlation"], "pid": pj, "tid": tj,
                           "cat": "ac2g", "name": "ac2g"}, _us(start[j] - base_ns)))
            flows.append(({"ph": "f", "id": a["correlation"], "pid": p_, "tid": t_,
                           "cat": "ac2g", "name": "ac2g", "bp": "e"}, ts))
        if k == "backward" and isinstance(a.get("fwd_op"), int):
            j = a["fwd_op"]
            flow_id += 1
            pj, tj = track[thread_idx[j]]
            flows.append(({"ph": "s", "id": flow_id, "pid": pj, "tid": tj,
                           "cat": "fwdbwd", "name": "fwdbwd"}, _us(start[j] - base_ns)))
            flows.append(({"ph": "f", "id": flow_id, "pid": p_, "tid": t_,
                           "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"}, ts))
    lines.extend(_line(f, t) for f, t in flows)
    out.append(",\n".join(lines))
    out.append('\n  ],\n  "traceName": %s\n}\n' % _dumps(meta.get("kineto.traceName",
                                                                  meta.get("region", "xsp"))))
    return out


# -- reading --------------------------------------------------------------------------------
class _Bad(Exception):
    pass


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


def _ns(v, what, path, i):
    """A ts or dur (µs, a Decimal or an int from the parser) as integer ns."""
    if isinstance(v, float) and not math.isfinite(v):
        raise _fail(path, "%s %s is not a finite number" % (what, v), index=i)
    if isinstance(v, bool) or not isinstance(v, (int, float, decimal.Decimal)):
        raise _fail(path, "%s must be a number, not %s" % (what, type(v).__name__), index=i)
    try:
        ns = int((decimal.Decimal(v) * 1000).to_integral_value(decimal.ROUND_HALF_EVEN))
    except (decimal.InvalidOperation, OverflowError, ValueError):
        raise _fail(path, "%s %s is not a finite number" % (what, v), index=i) from None
    if not -2 ** 63 < ns < 2 ** 63:
        raise _fail(path, "%s %s is out of range (more than 2**63 ns)" % (what, v), index=i)
    return ns


def _plain(v):
    """A parsed JSON value with Decimals back to ints or floats."""
    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() and "." not in str(v) and "E" not in \
            str(v).upper() else float(v)
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _attr_value(v):
    """An arg as an attribute value (int, float, str) and whether it was JSON-encoded."""
    if isinstance(v, bool):
        return int(v), False
    if isinstance(v, int):
        if -2 ** 63 <= v < 2 ** 63:
            return v, False
        return str(v), False
    if isinstance(v, float):
        return v, False
    if isinstance(v, str):
        return v, False
    return json.dumps(v), True


def read(path):
    """Parses a Kineto JSON trace (torch.profiler's export_chrome_trace, .json or .json.gz)
    into the core's TraceData.  Raises xsp.TraceFormatError (.path, .offset for malformed
    JSON, .event for a malformed event) and OSError."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise _fail(path, "not a gzip file: %s" % exc, offset=0) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(path, "not UTF-8", offset=exc.start) from None
    try:
        doc = json.loads(text, parse_float=decimal.Decimal, parse_int=int)
    except json.JSONDecodeError as exc:
        raise _fail(path, "malformed JSON: %s" % exc.msg,
                    offset=len(text[:exc.pos].encode("utf-8"))) from None
    except RecursionError:
        raise _fail(path, "nested too deeply") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise _fail(path, "not a Kineto trace: no traceEvents list at the top level")
    return _build(path, doc)


def _build(path, doc):
    events = doc["traceEvents"]
    # counters: what was not read as recorded (never silently); informative totals go in meta
    counters = {"kineto.skipped": 0, "kineto.unattributed": 0, "kineto.clamped": 0,
                "kineto.overlaps": 0}
    flows = 0
    thread_names = {}
    xs = []                 # (index, event)
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            raise _fail(path, "not an object but %s" % type(e).__name__, index=i)
        ph = e.get("ph")
        if ph == "M":
            if e.get("name") == "thread_name" and isinstance(e.get("args"), dict):
                thread_names[(_plain(e.get("pid")), _plain(e.get("tid")))] = str(
                    e["args"].get("name", ""))
            continue
        if ph in ("s", "f", "t"):
            flows += 1
            continue
        if ph != "X":
            counters["kineto.skipped"] += 1
            continue
        for key in ("name", "ts", "dur"):
            if key not in e:
                raise _fail(path, "a complete event (ph X) without %r" % key, index=i)
        if not isinstance(e["name"], str):
            raise _fail(path, "name must be a string, not %s" % type(e["name"]).__name__,
                        index=i)
        if "args" in e and not isinstance(e["args"], dict):
            raise _fail(path, "args must be an object, not %s" % type(e["args"]).__name__,
                        index=i)
        xs.append((i, e))
    base = doc.get("baseTimeNanoseconds", 0)
    base = int(base) if isinstance(base, (int, decimal.Decimal)) and not isinstance(
        base, bool) else 0
    recs = []
    region = None
    for i, e in xs:
        ts = _ns(e["ts"], "ts", path, i)
        dur = _ns(e["dur"], "dur", path, i)
        if dur < 0:
            raise _fail(path, "dur %s is negative" % e["dur"], index=i)
        start = base + ts
        if start < 0:
            raise _fail(path, "ts %s is before time 0" % e["ts"], index=i)
        cat = e.get("cat")
        cat = cat if isinstance(cat, str) else ""
        args = _plain(e.get("args") or {})
        pid, tid = _plain(e.get("pid")), _plain(e.get("tid"))
        r = {"i": i, "start": start, "end": start + dur, "name": e["name"], "cat": cat,
             "args": args, "pid": pid, "tid": tid, "parent": None, "kind": None}
        if cat == "Trace" and region is None:
            region = r
            continue
        recs.append(r)
    gpu_cats = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "overhead")
    cpu, gpu = [], []
    for r in recs:
        if r["cat"] in gpu_cats:
            gpu.append(r)
        elif r["cat"] == "Trace" or (r["cat"] == "" and isinstance(r["pid"], str)):
            counters["kineto.skipped"] += 1     # a second Trace span, a viewer's own track
        else:
            cpu.append(r)
    # kinds
    for r in cpu:
        c, nm = r["cat"], r["name"]
        if c == "cpu_op":
            r["kind"] = "op"
        elif c == "user_annotation":
            r["kind"] = "step" if nm.startswith("ProfilerStep#") else "scope"
        elif c == "python_function" and nm.startswith("nn.Module: "):
            r["kind"] = "module"
        elif c == "python_function":
            r["kind"] = "python"        # a Python function frame (with_stack)
        elif c == "cuda_runtime":
            r["kind"] = "runtime"
        elif c == "cuda_driver":
            r["kind"] = "driver"
        else:
            r["kind"] = "scope"         # gpu_user_annotation, ...
    # nest per CPU thread by time
    by_thread = {}
    for r in cpu:
        by_thread.setdefault((r["pid"], r["tid"]), []).append(r)
    for key, rs in by_thread.items():
        rs.sort(key=lambda r: (r["start"], -(r["end"] - r["start"]), r["i"]))
        stack = []
        for r in rs:
            while stack and not (r["start"] >= stack[-1]["start"] and
                                 r["start"] < stack[-1]["end"] or
                                 r["start"] == stack[-1]["start"] == stack[-1]["end"]):
                stack.pop()
            if stack and r["end"] > stack[-1]["end"]:
                counters["kineto.overlaps"] += 1
                r["end"] = stack[-1]["end"]     # cut to its parent: a span nests
            r["parent"] = stack[-1] if stack else None
            stack.append(r)
    # backward functions: the only child of "autograd::engine::evaluate_function: X" named X
    for r in cpu:
        p = r["parent"]
        if r["kind"] == "op" and p is not None and p["kind"] == "op" and \
                p["name"] == "autograd::engine::evaluate_function: " + r["name"]:
            r["kind"] = "backward"
    # modules: a top-level one (no module above it) is a model call
    for r in cpu:
        if r["kind"] == "module":
            p = r["parent"]
            while p is not None and p["kind"] != "module" and p["kind"] != "model":
                p = p["parent"]
            if p is None:
                r["kind"] = "model"
    # GPU work under the op whose runtime call carries its correlation id
    runtime_by_corr = {}
    for r in cpu:
        if r["kind"] in ("runtime", "driver") and isinstance(r["args"].get("correlation"),
                                                             int):
            runtime_by_corr[r["args"]["correlation"]] = r
    for r in gpu:
        r["kind"] = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
                     "cuda_sync": "sync", "overhead": "overhead"}[r["cat"]]
        call = runtime_by_corr.get(r["args"].get("correlation"))
        if call is not None:
            r["api"] = call
            r["parent"] = call["parent"] if r["kind"] != "sync" else call
        else:
            counters["kineto.unattributed"] += 1
    allr = cpu + gpu
    if not allr and region is None:
        raise _fail(path, "no complete events (ph X) to read")
    t_lo = min([r["start"] for r in allr] + ([region["start"]] if region else []))
    t_hi = max([r["end"] for r in allr] + ([region["end"]] if region else []))
    if region is None:
        region = {"i": -1, "start": t_lo, "end": t_hi, "name": "torch.profiler trace",
                  "cat": "", "args": {}, "pid": None, "tid": None}
    region.update(kind="region", parent=None, start=min(region["start"], t_lo),
                  end=max(region["end"], t_hi))
    # clamp children that start before their parent (another track's clock)
    for r in allr:
        p = r["parent"]
        if p is not None and r["start"] < p["start"]:
            counters["kineto.clamped"] += 1
            r["end"] = max(r["end"] - (p["start"] - r["start"]), p["start"])
            r["start"] = p["start"]
    # threads: CPU threads, then GPU streams (device << 32 | stream)
    threads, tindex = [], {}
    main_pid = None
    for r in cpu:
        if isinstance(r["pid"], int):
            main_pid = r["pid"]
            break
    for r in sorted(cpu, key=lambda r: r["start"]):
        key = ("cpu", r["pid"], r["tid"])
        if key not in tindex:
            tid = r["tid"] if isinstance(r["tid"], int) and 0 <= r["tid"] < 2 ** 63 else \
                len(tindex)
            tindex[key] = len(threads)
            threads.append((tid, thread_names.get((r["pid"], r["tid"]), ""), 0))
    for r in sorted(gpu, key=lambda r: r["start"]):
        key = _gpu_track(r)
        _, dev, stream = key
        if key not in tindex:
            tindex[key] = len(threads)
            threads.append(((dev << 32) | stream, thread_names.get((r["pid"], r["tid"]), ""),
                            1))
    if not threads:
        threads.append((0, "", 0))
    for r in cpu:
        r["thread"] = tindex[("cpu", r["pid"], r["tid"])]
    for r in gpu:
        r["thread"] = tindex[_gpu_track(r)]
    region["thread"] = cpu[0]["thread"] if cpu else 0
    # the steps adopt the roots of their thread's spans; other roots hang under the region
    depth = {}
    for r in allr:
        _depth(r, depth)
    order = [region] + sorted(allr, key=lambda r: (r["start"], depth[id(r)], r["i"]))
    for k, r in enumerate(order):
        r["id"] = k
    spans = []
    lv = {"region": 0, "step": 0, "model": 0, "op": 1, "backward": 1, "scope": 1,
          "module": 1, "runtime": 2, "driver": 2, "kernel": 2, "memcpy": 2, "memset": 2,
          "sync": 2, "overhead": 2, "python": 1}
    for r in order:
        attrs = {}
        for key, v in r["args"].items():
            val, enc = _attr_value(v)
            attrs[ARG + key + ("[]" if enc else "")] = val
        if r["kind"] == "region":
            if r["i"] >= 0:
                attrs[ARG + "name"] = r["name"]
            name = r["name"] if r["i"] >= 0 else "torch.profiler trace"
        else:
            name = r["name"]
        a = r["args"]
        if r["kind"] in ("op", "backward") and isinstance(a.get("Sequence number"), int):
            attrs["seq"] = a["Sequence number"]
        if r["kind"] in ("op", "backward", "scope") and isinstance(a.get("Input Dims"), list):
            for dst, src in INPUT_ARGS:      # record_shapes: as xsp records them
                if isinstance(a.get(src), list):
                    attrs[dst] = json.dumps(a[src])
        if r["kind"] == "step":
            attrs[ARG + "name"] = r["name"]
            name = "step#" + r["name"].split("#", 1)[1].strip()
        if r["kind"] in ("model", "module"):
            typ = r["name"][len("nn.Module: "):].rsplit("_", 1)[0]
            attrs["type"] = typ
        if r["kind"] in GPU_WORK or r["kind"] in ("runtime", "driver", "sync"):
            for src, dst in (("correlation", "correlation"), ("device", "device"),
                             ("stream", "stream"), ("cbid", "cbid"), ("bytes", "bytes"),
                             ("registers per thread", "registers")):
                if isinstance(a.get(src), int):
                    attrs[dst] = a[src]
            for ax, key in (("grid", "grid"), ("block", "block")):
                v = a.get(ax)
                if isinstance(v, list) and len(v) == 3 and all(isinstance(x, int) for x in v):
                    attrs[key + "_x"], attrs[key + "_y"], attrs[key + "_z"] = v
            if "api" in r:
                attrs["api"] = r["api"]["id"]
        if r["kind"] != "region" and r["cat"]:
            attrs[ARG + "cat"] = r["cat"]
        parent = r["parent"]["id"] if r.get("parent") is not None else (
            -1 if r["kind"] == "region" else 0)
        if len(attrs) > 250:
            raise _fail(path, "%d args: more than xsp keeps per span (250)" % len(attrs),
                        index=r["i"])
        spans.append((r["start"], r["end"], parent, lv[r["kind"]], K[r["kind"]], name,
                      r["thread"], 0, attrs))
    # fwd_op: the forward op that starts at a fwdbwd flow's "s" end, for the backward node at
    # its "f" end (torch's own link), else by (sequence number, forward thread)
    _link_backward(doc["traceEvents"], order, spans, base)
    levels = "M" + ("L" if any(r["kind"] not in ("region", "step", "model") for r in cpu)
                    else "") + ("G" if gpu else "")
    meta = {"levels": levels, "source": "kineto", "kineto.path": os.path.abspath(path),
            "kineto.events": len(events), "kineto.flows": flows,
            "kineto.baseTimeNanoseconds": base,
            "steps": sum(1 for r in cpu if r["kind"] == "step"),
            "region": region["name"]}
    if main_pid is not None and 0 <= main_pid < 2 ** 63:
        meta["pid"] = main_pid
    for key in ("trace_id", "host_name", "traceName", "schemaVersion", "displayTimeUnit"):
        v = doc.get(key)
        if isinstance(v, (str, int)) and not isinstance(v, bool):
            meta["kineto." + key] = v
    di = doc.get("distributedInfo")
    if isinstance(di, dict):
        for key in ("rank", "world_size", "backend"):
            if isinstance(di.get(key), (int, str)) and not isinstance(di.get(key), bool):
                meta[key] = di[key]
    try:
        return _core.build(spans, threads, meta, counters)
    except (ValueError, TypeError, OverflowError) as exc:
        raise _fail(path, "cannot be made into a trace: %s" % exc) from None


def _depth(r, memo):
    """r's number of ancestors, memoised by id in memo (each record's chain walked once)."""
    chain = []
    while r is not None and id(r) not in memo:
        chain.append(r)
        r = r.get("parent")
    d = memo[id(r)] if r is not None else -1
    for x in reversed(chain):
        d += 1
        memo[id(x)] = d
    return d


def _gpu_track(r):
    """("gpu", device, stream) of a GPU event: its args' device and stream (else its pid and
    tid), 0 where they are not ids."""
    dev = r["args"].get("device", r["pid"])
    stream = r["args"].get("stream", r["tid"])
    dev = dev if isinstance(dev, int) and 0 <= dev < 2 ** 31 else 0
    stream = stream if isinstance(stream, int) and 0 <= stream < 2 ** 32 else 0
    return ("gpu", dev, stream)


def _link_backward(events, order, spans, base):
    """Sets attribute fwd_op on backward spans: through fwdbwd flows (s at the forward op's
    start, f at the backward node's start on its thread), else the last op before it on the
    forward thread with the same sequence number."""
    starts = {}
    for r in order:
        if r["kind"] in ("op", "backward"):
            starts.setdefault((r["pid"], r["tid"], r["start"]), []).append(r)
    s_end, f_end = {}, {}
    for e in events:
        if isinstance(e, dict) and e.get("cat") == "fwdbwd" and e.get("ph") in ("s", "f"):
            try:
                t = base + _ns(e.get("ts"), "ts", "", 0)
            except Exception:
                continue
            key = (_plain(e.get("pid")), _plain(e.get("tid")), t)
            (s_end if e["ph"] == "s" else f_end)[_plain(e.get("id"))] = key
    linked = set()
    for fid, fkey in f_end.items():
        skey = s_end.get(fid)
        if skey is None:
            continue
        bw = [r for r in starts.get(fkey, []) if r["kind"] == "backward"]
        fw = [r for r in starts.get(skey, []) if r["kind"] == "op"]
        if bw and fw:
            spans[bw[0]["id"]][8]["fwd_op"] = fw[0]["id"]
            linked.add(bw[0]["id"])
    last = {}
    for r in order:
        if r["kind"] == "op" and "seq" in spans[r["id"]][8]:
            last[spans[r["id"]][8]["seq"]] = r
        if r["kind"] == "backward" and r["id"] not in linked:
            seq = spans[r["id"]][8].get("seq")
            f = last.get(seq)
            if f is not None and f["start"] <= r["start"]:
                spans[r["id"]][8]["fwd_op"] = f["id"]


__all__ = ["write", "read"]
