"""After recording (issue 28): what reading a trace costs against the stop that built it.

A training loop of a small MLP (forward, backward, SGD step, xsp.step()) recorded at level ML
until the trace has about N spans; then, in the same process and on the same trace, the stop
(merge + building the xsp.Trace), xsp.analysis.ops (the op table), xsp.report.text and
xsp.report.html (to a file; its size is printed: it must stay bounded however big the trace).
The imports the first analysis and report need (pandas) are paid before the timing,
on a one-iteration trace.  Each size runs in a fresh subprocess, rounds times; the figures are medians over the rounds and
each step's ratio to the stop of its own round.  Targets (issue 28): ops <= 10x stop, text <=
20x stop, html <= 5 us per span.

    python benchmarks/bench_post.py [--spans 100000,1000000] [--rounds 3]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import common


def child(n_spans):
    import torch
    from torch import nn

    import xsp
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(16, 16), nn.ReLU())])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 16)

    def step():
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    with xsp.profile(levels="ML") as probe:          # spans per iteration
        step()
        xsp.step()
    per_iter = max(len(probe.trace) - 2, 1)
    # the first analysis and report import pandas: paid here, not timed below
    xsp.analysis.ops(probe.trace)
    xsp.report.text(probe.trace)
    xsp.report.html(probe.trace)
    iters = max(n_spans // per_iter, 1)
    prof = xsp.profile(levels="ML")
    prof.start()
    for _ in range(iters):
        step()
        xsp.step()
    t0 = common.now()
    prof.stop()
    tr = prof.trace
    t1 = common.now()
    ops = xsp.analysis.ops(tr)
    t2 = common.now()
    text = xsp.report.text(tr)
    t3 = common.now()
    path = os.path.join(tempfile.mkdtemp(prefix="xsp-post-"), "r.html")
    xsp.report.html(tr, path)
    t4 = common.now()
    out = {"spans": len(tr), "iters": iters, "stop_ns": t1 - t0, "ops_ns": t2 - t1,
           "text_ns": t3 - t2, "html_ns": t4 - t3, "html_bytes": os.path.getsize(path),
           "ops_rows": len(ops), "text_lines": text.count("\n") + 1}
    os.unlink(path)
    print(json.dumps(out))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", default="100000,1000000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child)
        return 0
    print("after recording: an MLP training loop at level ML; %s" % common.machine())
    print("%9s %8s %9s %14s %14s %14s %9s %9s" % (
        "spans", "stop ms", "ns/span", "ops ms (x)", "text ms (x)", "html ms (x)",
        "html us/sp", "html KB"))
    for n in [int(s) for s in args.spans.split(",")]:
        runs = []
        for _ in range(args.rounds):
            outp = subprocess.run([sys.executable, __file__, "--child", str(n)], check=True,
                                  capture_output=True, text=True).stdout
            runs.append(json.loads(outp.strip().splitlines()[-1]))
        med = {k: common.med([r[k] for r in runs]) for k in runs[0]}
        x = {k: common.med([r[k] / r["stop_ns"] for r in runs]) for k in
             ("ops_ns", "text_ns", "html_ns")}
        print("%9d %8.1f %9.1f %8.0f (%4.1f) %8.0f (%4.1f) %8.0f (%4.1f) %9.2f %9.0f" % (
            med["spans"], med["stop_ns"] / 1e6, med["stop_ns"] / med["spans"],
            med["ops_ns"] / 1e6, x["ops_ns"], med["text_ns"] / 1e6, x["text_ns"],
            med["html_ns"] / 1e6, x["html_ns"], med["html_ns"] / 1e3 / med["spans"],
            med["html_bytes"] / 1e3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
