"""The main job: profile a built-in model on the CPU and show where its time goes.

    python -m xsp.demo [--model resnet|transformer] [--levels ML] [--steps 3] [--out out]

Runs warm-up iterations unprofiled, then profiles forward + backward + optimizer steps with
xsp, prints the trace tree (first step), the top layers, and writes out/<model>.xsp and
out/<model>.json (Chrome trace: open in https://ui.perfetto.dev or chrome://tracing).
"""
import argparse
import os
import sys
import time


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m xsp.demo", description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet", choices=["resnet", "transformer"])
    ap.add_argument("--levels", default=None,
                    help="level letters (default: MLG with a CUDA device, else ML)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--depth", type=int, default=5, help="depth of the printed tree")
    ap.add_argument("--out", default="out", help="folder for the trace files")
    args = ap.parse_args(argv)

    import torch

    import xsp
    from xsp import models

    torch.set_num_threads(1)
    cuda = torch.cuda.is_available()
    levels = args.levels or ("MLG" if cuda else "ML")
    model, x = models.get(args.model, args.batch)
    if cuda:
        model, x = model.cuda(), x.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def train_step():
        opt.zero_grad()
        loss = model(x).float().logsumexp(dim=1).mean()
        loss.backward()
        opt.step()

    for _ in range(2):          # warm-up: lazy initialisation stays out of the trace
        train_step()

    t0 = time.perf_counter()
    with xsp.profile(levels=levels, name="demo:%s" % args.model) as prof:
        for _ in range(args.steps):
            train_step()
            prof.step()
    wall = time.perf_counter() - t0
    tr = prof.trace

    print("== %r (wall %.1f ms including stop)" % (tr, wall * 1e3))
    steps = tr.spans(kind="step")
    first = steps[0] if steps else tr.roots()[0]
    print("\n== tree of %s (depth <= %d, spans >= 20 us, 12 children at most)"
          % (first.name, args.depth))
    print(tr.tree(root=first, max_depth=args.depth, min_duration_ns=20_000, max_children=12))
    print("\n== top layers (leaf modules, all steps; share = forward share of the profiled time)")
    top = tr.top(10)
    top["forward_ms"] = top["total_ns"] / 1e6
    top["backward_ms"] = top["backward_ns"] / 1e6
    top["share"] = (100 * top["share"]).round(1).astype(str) + " %"
    print(top[["name", "type", "calls", "forward_ms", "backward_ms", "share"]]
          .to_string(index=False))
    print("\n== top ops by self time")
    df = tr.to_pandas()
    ops = df[df.kind == "op"].groupby("name")["self_ns"].agg(["count", "sum"])
    ops = ops.sort_values("sum", ascending=False).head(8)
    ops["self_ms"] = ops["sum"] / 1e6
    print(ops[["count", "self_ms"]].to_string())
    kernels = df[df.kind == "kernel"]
    if len(kernels):
        print("\n== top GPU kernels by total time")
        k = kernels.groupby("name")["duration_ns"].agg(["count", "sum"])
        k = k.sort_values("sum", ascending=False).head(8)
        k["total_ms"] = k["sum"] / 1e6
        k.index = [n if len(n) < 70 else n[:67] + "..." for n in k.index]
        print(k[["count", "total_ms"]].to_string())
        print("GPU busy %.3f ms (kernels) across %d streams; %d kernels, %d copies, %d memsets"
              % (kernels["duration_ns"].sum() / 1e6, kernels["thread"].nunique(), len(kernels),
                 int((df.kind == "memcpy").sum()), int((df.kind == "memset").sum())))
    print("\ncounters:", tr.counters)

    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, args.model)
    tr.save(base + ".xsp")
    tr.to_chrome_trace(base + ".json")
    print("\nwrote %s.xsp (%d bytes) and %s.json (%d bytes; open in ui.perfetto.dev)"
          % (base, os.path.getsize(base + ".xsp"), base, os.path.getsize(base + ".json")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
