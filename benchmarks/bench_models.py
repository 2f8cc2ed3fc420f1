"""Real models on the CPU: slowdown of each profiler against unprofiled.

Models: xsp's built-in TinyResNet (ResNet-style CNN) and TinyTransformer (two encoder
layers), forward only and forward+backward.  Variants interleaved per round: unprofiled, floor
(do-nothing RecordFunction callback), torch.profiler (CPU activities), xsp ML.  Each timing
covers --iters iterations inside the block; end to end adds stop and building the results.

    python benchmarks/bench_models.py [--iters 5] [--rounds 5]
"""
import argparse
import sys

import common

import torch

import xsp
from xsp import _torch, models


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print("model slowdowns, %d iterations per timing, %d rounds; %s"
          % (args.iters, args.rounds, common.machine()))
    print("%-26s %10s %18s %18s %18s %18s" % ("workload", "unprof ms", "floor", "torch.profiler",
                                              "xsp ML", "xsp ML e2e"))
    for name in ("resnet", "transformer"):
        model, x = models.get(name, batch=8)
        for mode in ("forward", "forward+backward"):
            def work():
                for _ in range(args.iters):
                    if mode == "forward":
                        with torch.no_grad():
                            model(x)
                    else:
                        model.zero_grad(set_to_none=True)
                        model(x).float().sum().backward()

            def plain():
                t0 = common.now()
                work()
                return {"block": common.now() - t0}

            def floor():
                _torch.floor_attach()
                t0 = common.now()
                work()
                t1 = common.now()
                _torch.floor_detach()
                return {"block": t1 - t0}

            def tprof():
                t0 = common.now()
                with torch.profiler.profile(
                        activities=[torch.profiler.ProfilerActivity.CPU]) as p:
                    t1 = common.now()
                    work()
                    t2 = common.now()
                p.events()
                return {"block": t2 - t1, "e2e": common.now() - t0}

            def xspml():
                t0 = common.now()
                with xsp.profile(levels="ML"):
                    t1 = common.now()
                    work()
                    t2 = common.now()
                return {"block": t2 - t1, "e2e": common.now() - t0}

            variants = {"plain": plain, "floor": floor, "tprof": tprof, "xsp": xspml}
            for f in variants.values():
                f()
            res = common.rounds(variants, args.rounds)
            base = common.med(res["plain"]["block"])

            def ratio(k, m="block"):
                return "%.3fx ±%.3f" % (common.med(res[k][m]) / base,
                                        common.spread(res[k][m]) / base / 2)
            print("%-26s %10.1f %18s %18s %18s %18s" % (
                "%s %s" % (name, mode), base / 1e6, ratio("floor"), ratio("tprof"),
                ratio("xsp"), ratio("xsp", "e2e")))
            print("%-26s %10s %18s %18s" % ("", "", "tprof e2e:", ratio("tprof", "e2e")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
