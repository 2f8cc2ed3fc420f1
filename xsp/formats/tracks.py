"""Where a span goes in a trace-event file: the tracks, process and thread ids and relative
times that the Kineto and Chrome exports resolve the same way, in one place.

A track of the trace (trace.threads: (tid, name, kind), kind 0 a CPU thread, 1 a GPU stream,
2 a track of its own) is written under a process id and a thread id.  A CPU track's process
is the trace's, except in a merged job, where a track named "rank R: ..." is rank R's process
(thread_pids); a GPU stream's (device, stream) pair is packed in its tid, high and low 32 bits,
and Kineto writes it as (pid device, tid stream) (tracks).  The spans of PyTorch's intra-op
pool threads hang under the op that spawned them on another thread: both exports draw that
link as a flow of category SPAWN_FLOW (spawn_links).  Times are integer nanoseconds written as
microseconds with exactly three decimals (us), relative to an origin each format chooses (the
first span for Chrome, Kineto's baseTimeNanoseconds), so no float rounding moves a child out
of its parent.

Which process id a trace's events carry differs by format, by what its readers expect:
Chrome's viewers take any id, and a meta pid that is not one is replaced by 0 with a note
(chrome_pid); Kineto's files keep the pid torch wrote (meta kineto.pid) when the meta has no
process id of its own (kineto_pid).
"""
import os

import numpy as np

# the name the core gives a track of PyTorch's intra-op pool (csrc/core/spawn.h)
INTRAOP_THREAD = "intra-op thread "
# the category (and name) of the flows from a spawning op to its intra-op spans
SPAWN_FLOW = "xsp_intraop"


def us(ns):
    """Integer ns as microseconds with exactly three decimals, "-1.250" for -1250 (exact)."""
    ns = int(ns)
    sign = "-" if ns < 0 else ""
    q, r = divmod(abs(ns), 1000)
    return "%s%d.%03d" % (sign, q, r)


def first_start_ns(trace):
    """The earliest span start as the uint64 it is in the trace (a Python int, exact past
    2**63); 0 for an empty trace."""
    return int(trace.start_ns.view(np.uint64).min()) if len(trace) else 0


def chrome_pid(trace):
    """(pid, note): the trace's meta pid when it is a process id (an int from 0 to 2**31-1),
    else 0 with a note saying why; without a meta pid (a hand-made trace), this process's."""
    if "pid" not in trace.meta:
        return os.getpid(), None
    pid = trace.meta["pid"]
    if isinstance(pid, int) and 0 <= pid < 2 ** 31:
        return pid, None
    return 0, ("meta pid %r is not a process id (an int from 0 to 2**31-1); events use pid 0"
               % (pid,))


def kineto_pid(trace, base_ns=None):
    """(base_ns, pid) of a Kineto file: base_ns as given, else the meta's
    kineto.baseTimeNanoseconds (0 for a hand-made meta); the meta pid when it is a process id,
    else the meta's kineto.pid (torch's, of a loaded file), else this process's (0 when
    kineto.pid is not an int)."""
    meta = trace.meta
    if base_ns is None:
        base_ns = meta.get("kineto.baseTimeNanoseconds", 0)
        base_ns = base_ns if isinstance(base_ns, int) else 0
    pid = meta.get("pid")
    if not (isinstance(pid, int) and 0 <= pid < 2 ** 31):
        pid = int(meta.get("kineto.pid", os.getpid())) if isinstance(
            meta.get("kineto.pid", 0), int) else 0
    return base_ns, pid


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
            if head.isascii() and head.isdigit():       # int() takes other digits too
                v = trace.meta.get("rank%s.pid" % head)
                p = v if isinstance(v, int) and v >= 0 else int(head)
        out.append(p)
    return out


def tracks(trace, pid):
    """(track, cpu_rank, pids): per track the (pid, tid) Kineto writes (a GPU stream as
    (device, stream)), the rank of each CPU tid in order of first appearance (Kineto's Fwd
    thread id, from 1), and each track's process id (thread_pids)."""
    cpu_rank = {}
    track = []
    pids = thread_pids(trace, pid)
    for i, (tid, _name, kind) in enumerate(trace.threads):
        if kind == 1:
            track.append((tid >> 32, tid & 0xFFFFFFFF))
        else:
            track.append((pids[i], tid))
            if kind == 0:
                cpu_rank.setdefault(tid, len(cpu_rank) + 1)
    return track, cpu_rank, pids


def spawn_links(trace):
    """[(span id, spawner id)] of the spans of intra-op pool threads whose parent (the op that
    spawned the parallel region) is on another thread, in id order."""
    names = [isinstance(n, str) and n.startswith(INTRAOP_THREAD) for _, n, _ in trace.threads]
    if not any(names):
        return []
    th = trace.thread_index
    par = trace.parent_ids
    pool = np.array(names, dtype=bool)[th]
    ok = pool & (par >= 0)
    ids = np.nonzero(ok)[0]
    ids = ids[th[par[ids]] != th[ids]]
    return list(zip(ids.tolist(), par[ids].tolist()))
