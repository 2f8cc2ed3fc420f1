"""Real models: slowdown of each profiler against unprofiled, on the CPU or a GPU.

Models: xsp's built-in TinyResNet (ResNet-style CNN) and TinyTransformer (two encoder
layers), forward only and forward+backward.  Variants interleaved per round: unprofiled, floor
(do-nothing RecordFunction callback), torch.profiler (CPU activities; with --device cuda also
CUDA), xsp ML (with --device cuda: xsp MLG).  Each timing covers --iters iterations inside the
block (on a GPU, ending with torch.cuda.synchronize()); end to end adds stop and building the
results.

    python benchmarks/bench_models.py [--iters 5] [--rounds 5] [--device cpu|cuda]
"""
import argparse
import sys

import common

import torch

import xsp
from xsp import models

_bench = common.bench_helpers()


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = ap.parse_args(argv)
    cuda = args.device == "cuda"
    if args.iters < 1 or args.rounds < 1:
        ap.error("--iters and --rounds must be at least 1")
    why = common.gpu_refusal(torch, "bench_models") if cuda else None
    if why:
        print(why, file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    acts = common.activities(torch, cuda)
    levels = "MLG" if cuda else "ML"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    print("model slowdowns (%s), %d iterations per timing, %d rounds; %s"
          % (args.device, args.iters, args.rounds, common.machine()))
    if cuda:
        print("GPU: %s" % torch.cuda.get_device_name())
    print("%-26s %10s %18s %18s %18s %18s" % ("workload", "unprof ms", "floor", "torch.profiler",
                                              "xsp " + levels, "xsp %s e2e" % levels))
    for name in ("resnet", "transformer"):
        model, x = models.get(name, batch=8)
        model, x = model.to(args.device), x.to(args.device)
        for mode in ("forward", "forward+backward"):
            def work():
                for _ in range(args.iters):
                    if mode == "forward":
                        with torch.no_grad():
                            model(x)
                    else:
                        model.zero_grad(set_to_none=True)
                        model(x).float().sum().backward()
                sync()

            def plain():
                t0 = common.now()
                work()
                return {"block": common.now() - t0}

            def floor():
                _bench.floor_attach()
                t0 = common.now()
                work()
                t1 = common.now()
                _bench.floor_detach()
                return {"block": t1 - t0}

            def tprof():
                t0 = common.now()
                with torch.profiler.profile(activities=acts) as p:
                    t1 = common.now()
                    work()
                    t2 = common.now()
                p.events()
                return {"block": t2 - t1, "e2e": common.now() - t0}

            def xspml():
                t0 = common.now()
                with xsp.profile(levels=levels) as p:
                    t1 = common.now()
                    work()
                    t2 = common.now()
                t3 = common.now()
                if cuda:      # outside the timing
                    kernels[0] = len(p.trace.spans(kind="kernel"))
                    kernels[1] = common.gpu_lost(p.trace)
                return {"block": t2 - t1, "e2e": t3 - t0}

            kernels = [0, 0]
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
            if cuda:
                print("%-26s xsp %s recorded %d kernels in the last round, %d GPU records lost "
                      "or dropped" % ("", levels, kernels[0], kernels[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
