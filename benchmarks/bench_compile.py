"""Recording overhead on a torch.compile'd model (Inductor's C++ backend on the CPU): the
compiled model unprofiled, under xsp at M, L and ML, and under torch.profiler (CPU), in one
process, interleaved round by round (common.rounds).  Each round times --iters calls inside
one profile; a round's figure is the mean time per call.  Reported: the median over rounds
with its spread, the overhead per call above the unprofiled compiled model, and the ratio of
torch.profiler's overhead to xsp's.

The model is compiled once, before any round, outside every profile (a first compile takes
seconds); xsp does not change what Dynamo compiled (tests/py/producers/test_compile.py), so every
variant runs the same compiled code.

    python benchmarks/bench_compile.py [--iters 50] [--rounds 15] [--backend inductor]
                                       [--width 64]
"""
import argparse
import sys

import common

import torch
from torch import nn

import xsp


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--backend", default="inductor")
    ap.add_argument("--width", type=int, default=64, help="layer width (small: the "
                    "per-call cost is mostly the framework's, which is what profilers add to)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    w = args.width
    net = nn.Sequential(nn.Linear(w, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(), nn.Linear(w, 10))
    f = torch.compile(net, backend=args.backend)
    x = torch.randn(8, w)
    with torch.no_grad():
        for _ in range(3):
            f(x)                        # compile and warm up, unprofiled

    def timed(ctx):
        def run():
            with torch.no_grad():
                if ctx is None:
                    t0 = common.now()
                    for _ in range(args.iters):
                        f(x)
                    t1 = common.now()
                else:
                    with ctx():
                        t0 = common.now()
                        for _ in range(args.iters):
                            f(x)
                        t1 = common.now()
            return {"per_call": (t1 - t0) / args.iters / 1e3}
        return run

    variants = {
        "compiled, unprofiled": timed(None),
        "xsp M": timed(lambda: xsp.profile(levels="M")),
        "xsp L": timed(lambda: xsp.profile(levels="L")),
        "xsp ML": timed(lambda: xsp.profile(levels="ML")),
        "torch.profiler": timed(lambda: torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU])),
    }
    res = common.rounds(variants, args.rounds)
    base = "compiled, unprofiled"
    print("a torch.compile'd MLP (width %d, backend %s), %d calls per round, %d rounds; %s"
          % (w, args.backend, args.iters, args.rounds, common.machine()))
    print("%-22s %18s %18s" % ("variant", "per call, us", "overhead, us"))
    over = {}
    for k in variants:
        o = common.paired_scaled(res, k, base, "per_call")
        over[k] = common.med(o)
        print("%-22s %18s %18s" % (k, common.fmt(res[k]["per_call"]),
                                   "-" if k == base else common.fmt(o)))
    for k in ("xsp M", "xsp L", "xsp ML"):
        print("torch.profiler overhead / %s overhead: %s" % (
            k, common.ratio(over["torch.profiler"], over[k])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
