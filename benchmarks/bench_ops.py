"""Per-op recording cost: xsp against the RecordFunction floor and torch.profiler.

A loop of many small aten ops (torch.add on 8 floats: one RecordFunction event per call),
timed in one process with the variants interleaved round by round:
  unprofiled        no callback at all
  floor             a do-nothing global RecordFunction callback with xsp's scopes (what any
                    RecordFunction-based profiler pays before recording anything)
  floor+clock       the same callback reading xsp's clock (the TSC on x86-64) at entry and at
                    exit: what any profiler that timestamps both ends of an op pays at least
  torch.profiler    torch.profiler.profile(activities=[CPU]) (with --device cuda: CPU, CUDA)
  xsp L             xsp.profile(levels="L") (with --device cuda: xsp LG, levels="LG")
For each: ns per op above unprofiled inside the block, and end to end (block + stop + building
the trace object; torch.profiler's exit is where it spends most).  Prints ratios.

    python benchmarks/bench_ops.py [--ops 2000] [--rounds 101] [--device cpu|cuda]

With --device cuda the tensors live on the GPU, each op launches one kernel, every block ends
with torch.cuda.synchronize(), and the profilers record the GPU too (CUPTI).

Costs are per-round paired differences (a variant's timing minus the unprofiled timing of the
same round, taken moments apart), reported as median ± half the interquartile range over
rounds.  Short batches interleaved many times: this machine (a 2-core VM) drifts by tens of
percent, at times by 2x, over seconds, so long batches would compare variants under different
conditions.
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
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = ap.parse_args(argv)
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("bench_ops: --device cuda needs a CUDA device and a CUDA build of torch "
              "(torch %s, cuda available: False)" % torch.__version__, file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    a, b = torch.ones(8, device=args.device), torch.ones(8, device=args.device)
    n = args.ops
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    acts = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    xsp_name = "xsp LG" if cuda else "xsp L"

    def loop():
        for _ in range(n):
            torch.add(a, b)
        sync()

    def plain():
        t0 = common.now()
        loop()
        t1 = common.now()
        return {"block": (t1 - t0) / n, "e2e": (t1 - t0) / n}

    def floor_of(clock):
        def floor():
            _torch.floor_attach(clock=clock)
            t0 = common.now()
            loop()
            t1 = common.now()
            _torch.floor_detach()
            t2 = common.now()
            return {"block": (t1 - t0) / n, "e2e": (t2 - t0) / n}
        return floor

    def tprof():
        t0 = common.now()
        with torch.profiler.profile(activities=acts) as p:
            t1 = common.now()
            loop()
            t2 = common.now()
        p.events()   # building the results is part of using them
        t3 = common.now()
        return {"block": (t2 - t1) / n, "e2e": (t3 - t0) / n}

    def xspl():
        t0 = common.now()
        with xsp.profile(levels="LG" if cuda else "L") as p:
            t1 = common.now()
            loop()
            t2 = common.now()
        ops = len(p.trace.spans(kind="op"))
        assert ops == n, ("xsp recorded %d ops, expected %d" % (ops, n))
        if cuda:
            counts["kernels"] = len(p.trace.spans(kind="kernel"))
            counts["lost"] = sum(p.trace.counters.get(k, 0)
                                 for k in ("gpu.dropped", "gpu.lost", "gpu.refused_buffers"))
        t3 = common.now()
        return {"block": (t2 - t1) / n, "e2e": (t3 - t0) / n}

    counts = {}
    variants = {"unprofiled": plain, "floor": floor_of(False), "floor+clock": floor_of(True),
                "torch.profiler": tprof, xsp_name: xspl}
    for f in variants.values():      # warm-up: lazy initialisation of everything
        f()
    res = common.rounds(variants, args.rounds)
    print("per-op cost, torch.add on 8 floats (%s), %d ops x %d rounds; %s"
          % (args.device, n, args.rounds, common.machine()))
    if cuda:
        print("GPU: %s; xsp LG recorded %d kernels in the last round (expected %d), %d GPU "
              "records lost or dropped" % (torch.cuda.get_device_name(), counts["kernels"], n,
                                           counts["lost"]))
    print("unprofiled: %.0f ns/op (median), %.0f ns/op (fastest round)"
          % (common.med(res["unprofiled"]["block"]), min(res["unprofiled"]["block"])))
    print("%-16s %22s %24s" % ("variant", "in block, ns/op above", "end to end, ns/op above"))
    over = {}
    for k in ("floor", "floor+clock", "torch.profiler", xsp_name):
        ob = common.paired(res, k, "unprofiled", "block")
        oe = common.paired(res, k, "unprofiled", "e2e")
        over[k] = (common.med(ob), common.med(oe))
        print("%-16s %22s %24s" % (k, common.fmt(ob), common.fmt(oe)))
    common.print_ratios(over, xsp_name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
