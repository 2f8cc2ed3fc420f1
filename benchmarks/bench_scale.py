"""Scale: sessions of 10^5, 10^6 and 10^7 ops.  Each size runs in a fresh subprocess, which
reports its peak RSS (ru_maxrss), the RSS growth during recording, the stop time (merge +
building the Trace), and save and load times, to show cost grows linearly and memory stays
within the cap.

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


def child(n, cap):
    import torch

    import xsp
    torch.set_num_threads(1)
    a, b = torch.ones(8), torch.ones(8)

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    torch.add(a, b)
    r0 = rss()
    p = xsp.profile(levels="L", max_memory=cap)
    p.start()
    t0 = common.now()
    for _ in range(n):
        torch.add(a, b)
    t1 = common.now()
    r1 = rss()
    p.stop()
    t2 = common.now()
    tr = p.trace
    f = os.path.join(tempfile.mkdtemp(prefix="xsp-scale-"), "t.xsp")
    xsp.save(tr, f)
    t3 = common.now()
    back = xsp.load(f)
    t4 = common.now()
    out = {"n": n, "spans": len(tr), "lost": tr.lost, "loop_ns": t1 - t0, "stop_ns": t2 - t1,
           "save_ns": t3 - t2, "load_ns": t4 - t3, "bytes": os.path.getsize(f),
           "rss_record": r1 - r0, "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
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
    print("%10s %10s %6s %12s %12s %10s %10s %12s %12s %12s" % (
        "ops", "spans", "lost", "rec MiB", "peak MiB", "stop ms", "ns/span", "save ms",
        "load ms", "file B/span"))
    for n in [int(s) for s in args.sizes.split(",")]:
        outp = subprocess.run([sys.executable, __file__, "--child", str(n), "--cap",
                               str(args.cap)], check=True, capture_output=True, text=True).stdout
        r = json.loads(outp.strip().splitlines()[-1])
        assert r["equal"]
        print("%10d %10d %6d %12.1f %12.1f %10.1f %10.1f %12.1f %12.1f %12.2f" % (
            n, r["spans"], r["lost"], r["rss_record"] / 2**20, r["peak_rss"] / 2**20,
            r["stop_ns"] / 1e6, r["stop_ns"] / max(r["spans"], 1), r["save_ns"] / 1e6,
            r["load_ns"] / 1e6, r["bytes"] / max(r["spans"], 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
