"""Fixed cost of a session: start and stop of a profile around a single op, xsp at M, L and ML
against torch.profiler (CPU activities), interleaved round by round.

What a short profiled region pays besides its ops: for xsp, attaching the RecordFunction
callback, installing and restoring the nn.Module.__call__ wrapper (M, L), stopping the core and
building the Trace; for torch.profiler, starting and stopping Kineto and building its events.

    python benchmarks/bench_session.py [--rounds 101]
"""
import argparse
import sys

import common

import torch

import xsp


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=101)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    a = torch.ones(8)

    def xsp_at(levels):
        def run():
            t0 = common.now()
            p = xsp.profile(levels=levels)
            p.start()
            t1 = common.now()
            torch.add(a, a)
            t2 = common.now()
            p.stop()
            t3 = common.now()
            return {"start": t1 - t0, "stop": t3 - t2, "total": t3 - t0 - (t2 - t1)}
        return run

    def tprof():
        t0 = common.now()
        p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        p.__enter__()
        t1 = common.now()
        torch.add(a, a)
        t2 = common.now()
        p.__exit__(None, None, None)
        p.events()
        t3 = common.now()
        return {"start": t1 - t0, "stop": t3 - t2, "total": t3 - t0 - (t2 - t1)}

    variants = {"xsp M": xsp_at("M"), "xsp L": xsp_at("L"), "xsp ML": xsp_at("ML"),
                "torch.profiler": tprof}
    for f in variants.values():
        f()
    res = common.rounds(variants, args.rounds)
    print("session fixed cost (start + stop around one op), %d rounds; %s"
          % (args.rounds, common.machine()))
    print("%-16s %18s %18s %18s %14s" % ("variant", "start, us", "stop, us", "total, us",
                                         "tprof/variant"))
    tp = common.med(res["torch.profiler"]["total"])
    for k in variants:
        r = res[k]
        us = {m: [v / 1e3 for v in r[m]] for m in r}
        print("%-16s %18s %18s %18s %14.1f" % (k, common.fmt(us["start"]), common.fmt(us["stop"]),
                                               common.fmt(us["total"]),
                                               tp / common.med(r["total"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
