"""The main job: profile a built-in model on the CPU and show where its time goes.

    python -m xsp.demo [--model resnet|transformer] [--levels ML] [--steps 3] [--out out]

Runs warm-up iterations unprofiled, then profiles forward + backward + optimizer steps with
xsp, prints the trace tree (first step) and the report (top layers, layer types, kernels, GPU
vs CPU), then measures the forward pass level by level (xsp.measure: M, ML[, MLG]) and prints
what each level added; writes out/<model>.xsp, out/<model>.json (Chrome trace: open in
https://ui.perfetto.dev or chrome://tracing) and out/<model>.html (the report).
"""
import argparse
import os
import sys
import time

import xsp
from xsp.core.fmt import fmt_ns


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m xsp.demo", description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet", choices=["resnet", "transformer"])
    ap.add_argument("--levels", default=None,
                    help="level letters (default: MLG with a CUDA device, else ML)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--depth", type=int, default=5, help="depth of the printed tree")
    ap.add_argument("--out", default="out", help="folder for the trace files")
    ap.add_argument("--repeat", type=int, default=5,
                    help="iterations per run of the leveled measurement (0: skip it)")
    args = ap.parse_args(argv)

    import torch

    from xsp import models      # torch, pandas: after the arguments, so that --help is quick
    from xsp.report import summary as report

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
    print("\n== report (xsp.report: layers, types, kernels, GPU vs CPU)")
    print(report.text(tr, top=8))
    print("\nlost or dropped:", report.fmt_counters(tr.counters))

    if args.repeat:
        # XSP's leveled measurement: each level's latency from the shallowest run that sees
        # it, and what every deeper level added to the levels above
        print("\n== leveled measurement of the forward pass (xsp.measure, levels %s, 3 "
              "interleaved rounds)" % levels)
        with torch.no_grad():
            m = xsp.measure(lambda: model(x), levels=levels, warmup=2, repeat=args.repeat,
                            rounds=3, batch_size=args.batch, progress=False)
        ov = m.overhead
        for r in ov.itertuples(index=False):
            first = r.run == ov[ov["level"] == r.level]["run"].iloc[0]
            print("  level %s in run %-3s  %12s ± %-10s %s" % (
                r.level, r.run, fmt_ns(r.latency_ns), fmt_ns(r.std_ns),
                "(its own run)" if first else "added %s%s" % (
                    report.fmt_delta(r.added_ns, ov[ov["level"] == r.level]["latency_ns"]
                                     .iloc[0]),
                    ", within the noise (± %s): use a larger --repeat" % fmt_ns(r.noise_ns)
                    if r.within_noise else "")))
        print("  forward latency (model(x) under no_grad, from the M run) %.3f ms, throughput %.0f samples/s at batch %d" % (
            m.latency_ns / 1e6, m.throughput_per_s, args.batch))

    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, args.model)
    xsp.save(tr, base + ".xsp")
    xsp.save(tr, base + ".json")
    xsp.report.html(tr, path=base + ".html")
    print("\nwrote %s.xsp (%d bytes), %s.json (%d bytes; open in ui.perfetto.dev) and %s.html"
          " (the report)" % (base, os.path.getsize(base + ".xsp"), base,
                             os.path.getsize(base + ".json"), base))
    exe = os.path.join(os.path.dirname(sys.executable), "xsp")
    cmd = os.path.relpath(exe) if os.path.exists(exe) else "%s -m xsp" % sys.executable
    print("next: %s summary %s.xsp | %s compare a.xsp b.xsp | %s run script.py"
          % (cmd, base, cmd, cmd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
