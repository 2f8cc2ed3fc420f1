"""Merging a distributed job's traces (xsp.analysis.distributed.merge): R rank files of N spans each,
recorded by real sessions (level ML, torch.add in a loop, a step every 1000 ops, RANK and
WORLD_SIZE set as torchrun sets them), merged in a fresh process that reports the merge's
time and its peak RSS (ru_maxrss).  There is nothing to compare with in torch.profiler,
which has no merge: the figures are absolute.

    python benchmarks/bench_merge.py [--ranks 8] [--ops 100000]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import common

GEN = """
import os, sys
os.environ.update(RANK=sys.argv[2], WORLD_SIZE=sys.argv[3])
import torch, xsp
torch.set_num_threads(1)
a, b = torch.ones(8), torch.ones(8)
torch.add(a, b)
with xsp.profile(levels="ML", max_memory=8 << 30) as p:
    for i in range(int(sys.argv[1])):
        torch.add(a, b)
        if i % 1000 == 999:
            p.step()
xsp.save(p.trace, sys.argv[4])
"""

MERGE = """
import json, resource, sys, time
from xsp.analysis import distributed
paths = sys.argv[1:]
t0 = time.perf_counter()
job = distributed.merge(paths)
t1 = time.perf_counter()
print(json.dumps({"spans": len(job), "merge_s": t1 - t0,
                  "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--ops", type=int, default=100000)
    args = ap.parse_args(argv)
    d = tempfile.mkdtemp(prefix="xsp-merge-")
    paths = []
    for r in range(args.ranks):
        p = os.path.join(d, "rank%d.xsp" % r)
        subprocess.run([sys.executable, "-c", GEN, str(args.ops), str(r), str(args.ranks), p],
                       check=True)
        paths.append(p)
    size = sum(os.path.getsize(p) for p in paths)
    out = subprocess.run([sys.executable, "-c", MERGE] + paths, check=True,
                         capture_output=True, text=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    print("merge, %d ranks x %d ops at ML; %s" % (args.ranks, args.ops, common.machine()))
    print("input: %d files, %.1f MB; merged: %d spans" % (len(paths), size / 1e6, res["spans"]))
    print("merge %.2f s (%.2f us/span), peak RSS %.0f MB (%.0f bytes/span)" % (
        res["merge_s"], res["merge_s"] * 1e6 / res["spans"], res["maxrss_mb"],
        res["maxrss_mb"] * 2 ** 20 / res["spans"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
