"""Scale: sessions of 10^5, 10^6 and 10^7 ops.  Each size runs in a fresh subprocess, which
reports its peak RSS (ru_maxrss), the RSS growth during recording, the stop time (merge +
building the Trace), and save and load times, to show cost grows linearly and memory stays
within the cap.

Stop's memory (issue 28: its peak at most 1.2x the larger of the event log and the trace),
compared in the same process: "log" is the RSS growth while recording (the event log and the
pool: nothing else grows in the loop); "trace" the bytes of what the Trace holds, counted
from its sizes (the C span array and attribute array, the string table, and the attribute
columns that xsp.Trace copies out of C); "stop peak" the process's highest RSS from the
start of stop until the Trace is built, less the RSS before recording started.  The peak is
the kernel's own high-water mark (VmHWM): writing "5" to /proc/self/clear_refs just before
stop resets it to the current RSS, and Linux raises it before every unmap or discard that
lowers RSS, so no short peak between two samples is missed (no sampling thread).  The ratio
"peak/max" is stop peak / max(log, trace).

    python benchmarks/bench_scale.py [--sizes 100000,1000000,10000000]
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

import common
from xsp.values.trace import core_data

ATTR_BYTES = 16             # sizeof(xsp_attr), csrc/core/trace.h
ATTR_COLUMN_BYTES = 4 + 4 + 8 + 8 + 4   # xsp.Trace's key, type, int, float, str columns

def child(n, cap):
    import torch

    import xsp
    torch.set_num_threads(1)
    a, b = torch.ones(8), torch.ones(8)

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def hwm():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return None

    torch.add(a, b)
    r0 = rss()
    p = xsp.profile(levels="L", max_memory=cap)
    p.start()
    t0 = common.now()
    for _ in range(n):
        torch.add(a, b)
    t1 = common.now()
    r1 = rss()
    try:                    # the high-water mark from here on (see the docstring)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        reset = True
    except OSError:
        reset = False
    p.stop()
    tr = p.trace            # the Trace built (its attribute columns copied out)
    t2 = common.now()
    peak = hwm() if reset else None
    data = core_data(tr)
    n_attrs = len(data.attrs()["key"]) // 4
    trace_bytes = (len(tr) * data.span_layout()[0]         # C spans
                   + n_attrs * ATTR_BYTES                   # C attributes
                   + n_attrs * ATTR_COLUMN_BYTES            # the Trace's attribute columns
                   + sum(len(x.encode("utf-8", "surrogateescape")) + 8 for x in tr.strings))
    f = os.path.join(tempfile.mkdtemp(prefix="xsp-scale-"), "t.xsp")
    xsp.save(tr, f)
    t3 = common.now()
    back = xsp.load(f)
    t4 = common.now()
    out = {"n": n, "spans": len(tr), "lost": tr.lost, "loop_ns": t1 - t0, "stop_ns": t2 - t1,
           "save_ns": t3 - t2, "load_ns": t4 - t3, "bytes": os.path.getsize(f),
           "rss_record": r1 - r0, "trace_bytes": trace_bytes,
           "stop_peak": None if peak is None else peak - r0, "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
           "equal": back == tr}
    os.unlink(f)
    print(json.dumps(out))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,1000000,10000000")
    ap.add_argument("--cap", type=int, default=1 << 30)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.cap)
        return 0
    print("scale, torch.add loop at level L, cap %d MiB; %s" % (args.cap >> 20, common.machine()))
    print("%10s %10s %6s %10s %10s %10s %9s %10s %10s %9s %9s %9s %11s" % (
        "ops", "spans", "lost", "log MiB", "trace MiB", "stop peak", "peak/max", "peak MiB",
        "stop ms", "ns/span", "save ms", "load ms", "file B/span"))
    for n in [int(s) for s in args.sizes.split(",")]:
        outp = subprocess.run([sys.executable, __file__, "--child", str(n), "--cap",
                               str(args.cap)], check=True, capture_output=True, text=True).stdout
        r = json.loads(outp.strip().splitlines()[-1])
        assert r["equal"]
        stop_peak = r["stop_peak"]
        ratio = (stop_peak / max(r["rss_record"], r["trace_bytes"])
                 if stop_peak is not None else float("nan"))
        print("%10d %10d %6d %10.1f %10.1f %10s %9.2f %10.1f %10.1f %9.1f %9.1f %9.1f %11.2f" % (
            n, r["spans"], r["lost"], r["rss_record"] / 2**20, r["trace_bytes"] / 2**20,
            "n/a" if stop_peak is None else "%.1f" % (stop_peak / 2**20), ratio,
            r["peak_rss"] / 2**20, r["stop_ns"] / 1e6, r["stop_ns"] / max(r["spans"], 1),
            r["save_ns"] / 1e6, r["load_ns"] / 1e6, r["bytes"] / max(r["spans"], 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
