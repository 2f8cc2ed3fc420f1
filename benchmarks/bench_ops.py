"""Per-op recording cost on the CPU: xsp against the RecordFunction floor and torch.profiler.

A loop of many small aten ops (torch.add on 8 floats: one RecordFunction event per call),
timed in one process with the variants interleaved round by round:
  unprofiled        no callback at all
  floor             a do-nothing global RecordFunction callback with xsp's scopes (what any
                    RecordFunction-based profiler pays before recording anything)
  torch.profiler    torch.profiler.profile(activities=[CPU])
  xsp L             xsp.profile(levels="L")
For each: ns per op above unprofiled inside the block, and end to end (block + stop + building
the trace object; torch.profiler's exit is where it spends most).  Prints ratios.

    python benchmarks/bench_ops.py [--ops 2000] [--rounds 101]

Short batches interleaved many times: this machine (a 2-core VM) drifts by tens of percent
over seconds, so long batches would compare variants under different conditions.
"""
import argparse
import sys

import common

import torch

import xsp
from xsp import _torch


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=101)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    a, b = torch.ones(8), torch.ones(8)
    n = args.ops

    def loop():
        for _ in range(n):
            torch.add(a, b)

    def plain():
        t0 = common.now()
        loop()
        t1 = common.now()
        return {"block": (t1 - t0) / n, "e2e": (t1 - t0) / n}

    def floor():
        _torch.floor_attach()
        t0 = common.now()
        loop()
        t1 = common.now()
        _torch.floor_detach()
        t2 = common.now()
        return {"block": (t1 - t0) / n, "e2e": (t2 - t0) / n}

    def tprof():
        t0 = common.now()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
            t1 = common.now()
            loop()
            t2 = common.now()
        p.events()   # building the results is part of using them
        t3 = common.now()
        return {"block": (t2 - t1) / n, "e2e": (t3 - t0) / n}

    def xspl():
        t0 = common.now()
        with xsp.profile(levels="L") as p:
            t1 = common.now()
            loop()
            t2 = common.now()
        assert len(p.trace) == n, (len(p.trace), n)
        t3 = common.now()
        return {"block": (t2 - t1) / n, "e2e": (t3 - t0) / n}

    variants = {"unprofiled": plain, "floor": floor, "torch.profiler": tprof, "xsp L": xspl}
    for f in variants.values():      # warm-up: lazy initialisation of everything
        f()
    res = common.rounds(variants, args.rounds)
    base_b = common.med(res["unprofiled"]["block"])
    base_e = common.med(res["unprofiled"]["e2e"])
    print("per-op cost, torch.add on 8 floats, %d ops x %d rounds; %s" % (n, args.rounds,
                                                                         common.machine()))
    print("unprofiled: %.0f ns/op" % base_b)
    print("%-16s %22s %22s" % ("variant", "in block, ns/op above", "end to end, ns/op above"))
    over = {}
    for k in ("floor", "torch.profiler", "xsp L"):
        ob = [x - base_b for x in res[k]["block"]]
        oe = [x - base_e for x in res[k]["e2e"]]
        over[k] = (common.med(ob), common.med(oe))
        print("%-16s %22s %22s" % (k, common.fmt(ob), common.fmt(oe)))
    common.print_ratios(over)
    return 0


if __name__ == "__main__":
    sys.exit(main())
