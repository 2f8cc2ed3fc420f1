"""Chrome trace event JSON export (chrome://tracing, Perfetto UI).

Each span becomes a complete event ("ph": "X") on its thread's track.  Timestamps are in
microseconds, written with exactly three decimals from integer nanoseconds (no float
rounding), relative to the earliest span, so a child never appears to start before or end
after its parent and the viewers nest them as recorded.

The span events are written by C (csrc/io/chromew.c, over the JSON writer csrc/io/jsonw.c that
the Kineto export shares), streamed to the file; the header (otherData, process and thread
names) is made here.  _reference_write is the Python writer it replaced, kept as the tests'
reference.
"""
import json
import math
import os

import numpy as np

from xsp import _core
from xsp.core.util import atomic_write, c_json_write, printable
from xsp.formats.kineto import read as kineto_read
from xsp.formats.tracks import (SPAWN_FLOW, chrome_pid, first_start_ns, spawn_links, thread_pids,
                                 us)
from xsp.values.trace import KINDS, LEVELS, Trace, core_data


def _finite(obj):
    """JSON has no NaN or infinity: non-finite floats become strings; and strings holding
    bytes that were not UTF-8 (lone surrogates, which viewers may refuse as JSON escapes) get
    '?' for them."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return repr(obj)
    if isinstance(obj, str):
        return printable(obj)
    if isinstance(obj, dict):
        return {_finite(k): _finite(v) for k, v in obj.items()}
    return obj


def _dumps(obj):
    return json.dumps(_finite(obj), allow_nan=False)


def read(path, **options):
    """The trace in a trace-event JSON file (xsp's Chrome export, torch.profiler's, any
    Chrome/Perfetto JSON with complete events): the trace-event reader of
    xsp.formats.kineto, which this format shares its syntax with.  Errors as kineto.read."""
    return kineto_read(path, **options)


def write(trace, path, *, fsync=False):
    """Writes trace (an xsp.Trace; of an xsp.Measurement, its deepest run's) to path as Chrome
    trace event JSON (chrome://tracing, Perfetto UI): one track per thread, complete ("X")
    events with ns-exact microsecond timestamps relative to the first span, so nesting is kept;
    span id, parent and attributes go into args (an attribute named id or parent as attr.id,
    attr.parent).  The process id is the trace's meta pid; one that is not an int from 0 to
    2**31-1 (a damaged or hand-made trace) is replaced by 0 and otherData.xsp.pid_note says so.
    A path ending in .gz is gzip-compressed.  The events are written by C (csrc/io/chromew.c),
    streamed, with the GIL released; written atomically (fsync=True: durable too, docs/api.md,
    xsp.save); raises OSError on failure."""
    if not isinstance(trace, Trace) and hasattr(trace, "leveled_ns"):    # a Measurement
        trace = trace.trace
    path = os.fspath(path)
    pid, note = chrome_pid(trace)
    t0 = first_start_ns(trace)
    pids = thread_pids(trace, pid)
    links = spawn_links(trace)
    cols = {"t0": t0, "track_pid": _int64(pids, "a track's pid"),
            "spawn_i": np.array([i for i, _ in links], dtype=np.int64),
            "spawn_j": np.array([j for _, j in links], dtype=np.int64)}
    head = _head(trace, pid, note, pids).encode("utf-8", "replace")
    c_json_write(path, _core.write_chrome, core_data(trace), head, b"\n]}\n", cols, fsync)
    return path


def _int64(values, what):
    """values as an int64 array; ValueError naming what for one outside int64."""
    try:
        return np.array(values, dtype=np.int64).reshape(-1)
    except OverflowError:
        raise ValueError("%s is outside int64: %r" % (what, max(values, key=abs))) from None


def _head(trace, pid, note, pids):
    """The text before the span events: otherData, then the process and thread names."""
    other = {"meta": trace.meta, "counters": trace.counters}
    if note:
        other["pid_note"] = note
    out = ['{"displayTimeUnit":"ns","otherData":', _dumps({"xsp": other}), ',"traceEvents":[\n']
    lines = []
    for p in sorted(set(pids)) or [pid]:
        label = "xsp: %s" % (trace.meta.get("region", "trace"),)
        if "ranks" in trace.meta:
            r = [name.split(":", 1)[0] for (_, name, _), q in zip(trace.threads, pids)
                 if q == p and isinstance(name, str) and name.startswith("rank ")]
            label += " (%s)" % r[0] if r else ""
        lines.append(_dumps({"ph": "M", "name": "process_name", "pid": p,
                             "args": {"name": label}}))
    for (tid, name, _kind), p in zip(trace.threads, pids):
        lines.append(_dumps({"ph": "M", "name": "thread_name", "pid": p, "tid": tid,
                             "args": {"name": name or "thread %d" % tid}}))
    out.append(",\n".join(lines))
    return "".join(out)


# -- the reference: the Python writer the C one replaced, kept for the tests that compare them
def _reference_write(trace, path):
    """Writes trace as write does, in Python (one event at a time): the tests' reference for
    the C writer (tests/py/formats/test_json_writers.py)."""
    if not isinstance(trace, Trace) and hasattr(trace, "leveled_ns"):    # a Measurement
        trace = trace.trace
    pid, note = chrome_pid(trace)
    # times as the uint64 they are in the trace: exact past 2**63 too, in Python ints
    t0 = first_start_ns(trace)
    parents = trace.parent_ids
    atomic_write(path, lambda f: _write(trace, f, pid, note, t0, parents))


def _write(trace, f, pid, note, t0, parents):
    other = {"meta": trace.meta, "counters": trace.counters}
    if note:
        other["pid_note"] = note
    f.write('{"displayTimeUnit":"ns","otherData":')
    f.write(_dumps({"xsp": other}))
    f.write(',"traceEvents":[\n')
    pids = thread_pids(trace, pid)
    first = True
    for p in sorted(set(pids)) or [pid]:
        if not first:
            f.write(",\n")
        first = False
        label = "xsp: %s" % (trace.meta.get("region", "trace"),)
        if "ranks" in trace.meta:
            r = [name.split(":", 1)[0] for (_, name, _), q in zip(trace.threads, pids)
                 if q == p and isinstance(name, str) and name.startswith("rank ")]
            label += " (%s)" % r[0] if r else ""
        f.write(_dumps({"ph": "M", "name": "process_name", "pid": p, "args": {"name": label}}))
    for (tid, name, _kind), p in zip(trace.threads, pids):
        f.write(",\n")
        f.write(_dumps({"ph": "M", "name": "thread_name", "pid": p, "tid": tid,
                        "args": {"name": name or "thread %d" % tid}}))
    names = [_dumps(s) for s in trace.strings]
    cats = [_dumps("%s.%s" % (lv, k)) for lv in LEVELS for k in KINDS]
    tids = [t[0] for t in trace.threads]
    tpids = pids
    start = trace.start_ns.view(np.uint64).tolist()
    end = trace.end_ns.view(np.uint64).tolist()
    name, kind, level = trace.name_codes, trace.kind_codes, trace.level_codes
    thread = trace.thread_index
    attrs_of = trace.attrs_of
    for i in range(len(trace)):
        args = attrs_of(i)
        for k in ("id", "parent"):
            if k in args:
                key = "attr." + k
                while key in args:
                    key = "attr." + key
                args[key] = args.pop(k)
        args["id"] = i
        if parents[i] >= 0:
            args["parent"] = int(parents[i])
        f.write(',\n{"ph":"X","name":%s,"cat":%s,"pid":%d,"tid":%d,"ts":%s,"dur":%s,'
                '"args":%s}' % (names[name[i]], cats[level[i] * len(KINDS) + kind[i]],
                                tpids[thread[i]],
                                tids[thread[i]], us(start[i] - t0),
                                us(end[i] - start[i]), _dumps(args)))
    # an intra-op pool thread's span, from the op that spawned it on another thread: a flow
    for n, (i, j) in enumerate(spawn_links(trace), 1):
        ts = us(start[i] - t0)
        for ph, k, bp in (("s", j, ""), ("f", i, ',"bp":"e"')):
            f.write(',\n{"ph":"%s","id":%d,"ts":%s,"cat":"%s","name":"%s","pid":%d,"tid":%d%s}'
                    % (ph, n, ts, SPAWN_FLOW, SPAWN_FLOW, tpids[thread[k]], tids[thread[k]],
                       bp))
    f.write("\n]}\n")


__all__ = ["read", "write"]
