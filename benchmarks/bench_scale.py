"""Scale: sessions of 10^5, 10^6 and 10^7 ops.  Each size runs in a fresh subprocess, which
reports its peak RSS (ru_maxrss), the RSS growth during recording, the stop time (merge +
building the Trace), and save and load times, to show cost grows linearly and memory stays
within the cap.

Stop's memory (issue 28: its peak at most 1.2x the larger of the event log and the trace).
"log" is the RSS growth while recording (the event log and the pool: nothing else grows in
the loop); "trace" the bytes of what the Trace holds, counted from its sizes (the C span
array and attribute array, the string table, and the attribute columns that xsp.Trace copies
out of C); "stop peak" the process's highest RSS from the start of stop until the Trace is
built, less the RSS before recording started.  The peak is the kernel's own high-water mark
(VmHWM): writing "5" to /proc/self/clear_refs just before stop resets it to the current RSS,
and Linux raises it before every unmap or discard that lowers RSS, so no short peak between
two samples is missed (no sampling thread).  "peak/max" is stop peak / max(log, trace).
Each size runs twice, each time in a fresh process, in alternating order: "released", as
xsp stops (each log chunk given back as soon as stop has read it), and "kept", the reference,
the same stop with the whole log kept until the trace is made (xsp._core._set_release(False),
which is how stop worked before).  --workload train records training steps instead of the
loop (forward and backward of four Linear(8, 8) layers, 185 spans a step, some with sequence
numbers and backward links); its sizes count steps.

    python benchmarks/bench_scale.py [--sizes 100000,1000000,10000000]
    python benchmarks/bench_scale.py --workload train --sizes 540,5400,54000
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

import common

ATTR_BYTES = 16             # sizeof(xsp_attr), csrc/core/trace.h
ATTR_COLUMN_BYTES = 4 + 4 + 8 + 8 + 4   # xsp.Trace's key, type, int, float, str columns


def child(n, cap, keep, workload):
    import torch

    import xsp
    from xsp import _core
    from xsp.values.trace import core_data
    torch.set_num_threads(1)
    a, b = torch.ones(8), torch.ones(8)
    model = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(4)])
    x = torch.ones(2, 8)
    _core._set_release(not keep)

    def step():
        if workload == "train":
            model(x).sum().backward()
        else:
            torch.add(a, b)

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def hwm():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return None

    step()
    r0 = rss()
    p = xsp.profile(levels="L", max_memory=cap)
    p.start()
    t0 = common.now()
    for _ in range(n):
        step()
    t1 = common.now()
    r1 = rss()
    try:                    # the high-water mark from here on (see the docstring)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        reset = True
    except OSError:
        reset = False
    p.stop()                # returns the Trace: built here, attribute columns included
    t2 = common.now()
    peak = hwm() if reset else None
    tr = p.trace
    data = core_data(tr)
    n_attrs = len(data.attrs()["key"]) // 4
    trace_bytes = (len(tr) * data.span_layout()[0]         # C spans
                   + n_attrs * (ATTR_BYTES + ATTR_COLUMN_BYTES)
                   + sum(len(x.encode("utf-8", "surrogateescape")) + 8 for x in tr.strings))
    f = os.path.join(tempfile.mkdtemp(prefix="xsp-scale-"), "t.xsp")
    xsp.save(tr, f)
    t3 = common.now()
    back = xsp.load(f)
    t4 = common.now()
    out = {"n": n, "spans": len(tr), "lost": tr.lost, "loop_ns": t1 - t0, "stop_ns": t2 - t1,
           "save_ns": t3 - t2, "load_ns": t4 - t3, "bytes": os.path.getsize(f),
           "rss_record": r1 - r0, "trace_bytes": trace_bytes,
           "stop_peak": None if peak is None else peak - r0,
           "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
           "equal": back == tr}
    os.unlink(f)
    print(json.dumps(out))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,1000000,10000000")
    ap.add_argument("--cap", type=int, default=1 << 30)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--keep", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--workload", choices=("add", "train"), default="add")
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.cap, args.keep, args.workload)
        return 0
    print("scale, %s at level L, cap %d MiB; %s" % (
        "training steps of 4 Linear(8, 8)" if args.workload == "train" else "torch.add loop",
        args.cap >> 20, common.machine()))
    unit = "steps" if args.workload == "train" else "ops"
    print("%10s %9s %10s %5s %9s %9s %9s %8s %9s %9s %8s %8s %8s %7s" % (
        unit, "log", "spans", "lost", "log MiB", "trace MiB", "stop peak", "peak/max", "peak MiB",
        "stop ms", "ns/span", "save ms", "load ms", "file B"))
    summary = []
    for k, n in enumerate(int(s) for s in args.sizes.split(",")):
        rows = {}
        for mode in (("released", "kept") if k % 2 == 0 else ("kept", "released")):
            cmd = [sys.executable, __file__, "--child", str(n), "--cap", str(args.cap),
                   "--workload", args.workload]
            outp = subprocess.run(cmd + (["--keep"] if mode == "kept" else []), check=True,
                                  capture_output=True, text=True).stdout
            rows[mode] = r = json.loads(outp.strip().splitlines()[-1])
            assert r["equal"]
        for mode in ("released", "kept"):
            r = rows[mode]
            stop_peak = r["stop_peak"]
            r["ratio"] = (stop_peak / max(r["rss_record"], r["trace_bytes"])
                          if stop_peak is not None else float("nan"))
            print("%10d %9s %10d %5d %9.1f %9.1f %9s %8.2f %9.1f %9.1f %8.1f %8.1f %8.1f %7.2f"
                  % (n, mode, r["spans"], r["lost"], r["rss_record"] / 2**20,
                     r["trace_bytes"] / 2**20,
                     "n/a" if stop_peak is None else "%.1f" % (stop_peak / 2**20), r["ratio"],
                     r["peak_rss"] / 2**20, r["stop_ns"] / 1e6,
                     r["stop_ns"] / max(r["spans"], 1), r["save_ns"] / 1e6, r["load_ns"] / 1e6,
                     r["bytes"] / max(r["spans"], 1)))
        rel, kept = rows["released"], rows["kept"]
        if rel["stop_peak"] is not None:
            summary.append("%d %s: stop peak released / kept %.2f, stop time %.2f" % (
                n, unit, rel["stop_peak"] / kept["stop_peak"], rel["stop_ns"] / kept["stop_ns"]))
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
