"""Cost per module call: a model of 200 identity modules called in sequence, so the time is
all module-call machinery.  Variants, interleaved: unprofiled; empty global forward hooks
(pre + always_call post: what a hook-based module recorder pays in torch's slow _call_impl
path before doing anything); xsp M (the nn.Module.__call__ wrapper with the model span, no
module spans); xsp ML (module spans recorded too).

    python benchmarks/bench_modules.py [--calls 50] [--rounds 15]
"""
import argparse
import sys

import common

import torch
from torch import nn

import xsp


class Id(nn.Module):
    def forward(self, x):
        return x


class Chain(nn.Module):
    def __init__(self, n=200):
        super().__init__()
        self.mods = nn.ModuleList(Id() for _ in range(n))

    def forward(self, x):
        for m in self.mods:
            x = m(x)
        return x


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args(argv)
    model, x = Chain(), torch.ones(1)
    per = args.calls * (len(model.mods) + 1)

    def loop():
        t0 = common.now()
        for _ in range(args.calls):
            model(x)
        return (common.now() - t0) / per

    def plain():
        return {"ns": loop()}

    def hooks():
        mod = torch.nn.modules.module
        h1 = mod.register_module_forward_pre_hook(lambda m, a: None)
        h2 = mod.register_module_forward_hook(lambda m, a, o: None, always_call=True)
        try:
            return {"ns": loop()}
        finally:
            h1.remove()
            h2.remove()

    def levels(lv):
        def run():
            with xsp.profile(levels=lv):
                return {"ns": loop()}
        return run

    variants = {"unprofiled": plain, "global hooks": hooks, "xsp M": levels("M"),
                "xsp ML": levels("ML")}
    for f in variants.values():
        f()
    res = common.rounds(variants, args.rounds)
    base = common.med(res["unprofiled"]["ns"])
    print("cost per module call, %d identity modules x %d calls x %d rounds; %s"
          % (len(model.mods) + 1, args.calls, args.rounds, common.machine()))
    print("unprofiled: %.0f ns per module call" % base)
    for k in ("global hooks", "xsp M", "xsp ML"):
        print("%-14s +%s ns per module call" % (k, common.fmt([v - base for v in res[k]["ns"]])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
