"""Trace size: xsp's .xsp file against torch.profiler's exported Chrome JSON for the same run,
bytes per span, and the time to save and to load; and Kineto's JSON both ways: xsp's
xsp.save(trace, "x.pt.trace.json") against torch.profiler's export_chrome_trace (same format), and
xsp.load reading torch's file.

Workload: the built-in TinyResNet, forward+backward, --iters iterations, recorded once with
torch.profiler (CPU) and once with xsp at ML (each records the same aten ops; xsp adds module
and model spans).

    python benchmarks/bench_size.py [--iters 3]
"""
import argparse
import os
import sys
import tempfile

import common

import torch

import xsp
from xsp import models
from xsp.formats import chrome


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=3)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    model, x = models.get("resnet", batch=8)

    def work():
        for _ in range(args.iters):
            model.zero_grad(set_to_none=True)
            model(x).sum().backward()

    work()
    d = tempfile.mkdtemp(prefix="xsp-bench-")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
        work()
    tjson = os.path.join(d, "torch.json")
    t0 = common.now()
    p.export_chrome_trace(tjson)
    t_export = common.now() - t0
    n_torch = len(p.events())
    with xsp.profile(levels="ML") as xp:
        work()
    tr = xp.trace
    f = os.path.join(d, "run.xsp")
    t0 = common.now()
    xsp.save(tr, f)
    t_save = common.now() - t0
    t0 = common.now()
    back = xsp.load(f)
    t_load = common.now() - t0
    assert back == tr
    cj = os.path.join(d, "xsp.json")
    chrome.write(tr, cj)
    sx, st, sc = os.path.getsize(f), os.path.getsize(tjson), os.path.getsize(cj)
    print("trace size, TinyResNet forward+backward x %d; %s" % (args.iters, common.machine()))
    print("torch.profiler Chrome JSON: %d bytes, %d events, %.1f bytes/event, export %.1f ms"
          % (st, n_torch, st / n_torch, t_export / 1e6))
    print("xsp .xsp file:              %d bytes, %d spans, %.1f bytes/span, save %.1f ms, "
          "load %.1f ms" % (sx, len(tr), sx / len(tr), t_save / 1e6, t_load / 1e6))
    print("xsp Chrome JSON export:     %d bytes (%.1f bytes/span)" % (sc, sc / len(tr)))
    print("ratio .xsp / torch.profiler JSON: %.4f (target <= 0.1)" % (sx / st))
    kj = os.path.join(d, "xsp.pt.trace.json")
    t0 = common.now()
    xsp.save(tr, kj)
    t_kin = common.now() - t0
    t0 = common.now()
    back = xsp.load(tjson, format="kineto")
    t_read = common.now() - t0
    sk = os.path.getsize(kj)
    print("xsp Kineto JSON export:     %d bytes (%.1f bytes/span), export %.1f ms: %.2fx "
          "torch.profiler's export time" % (sk, sk / len(tr), t_kin / 1e6, t_kin / t_export))
    print("xsp.load of torch.profiler's JSON: %d spans in %.1f ms (%.1f us/span)"
          % (len(back), t_read / 1e6, t_read / 1e3 / len(back)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
