"""Per-op recording cost: xsp against the RecordFunction floor and torch.profiler.

A loop of many small aten ops (torch.add on 8 floats: one RecordFunction event per call),
timed in one process with the variants interleaved round by round:
  unprofiled        no callback at all
  floor             a do-nothing global RecordFunction callback with xsp's scopes (what any
                    RecordFunction-based profiler pays before recording anything)
  floor+clock       the same callback reading the TSC (x86-64; xsp's clock when the kernel's
                    clocksource is tsc) at entry and at exit: what a profiler that timestamps
                    both ends of an op with it pays at least
  torch.profiler    torch.profiler.profile(activities=[CPU]) (with --device cuda: CPU, CUDA)
  xsp L             xsp.profile(levels="L") (with --device cuda: xsp LG, levels="LG")
For each: ns per op above unprofiled inside the block, and end to end (start + block + stop +
building the trace object; torch.profiler's exit is where it spends most).  Prints ratios.

Two loops, each its own table:
  python   the ops called from a Python for loop (what eager PyTorch code does)
  c++      at::add called from a C++ loop (xsp._bench.bench_add): the same dispatcher and
           RecordFunction path without the interpreter, whose own cost and cache footprint
           make the Python loop's differences noisier
Inside every block, ops/4 untimed ops run first (the same in every variant), so that the
timed ops measure the steady state, not the first ops after a start that left caches cold;
end to end is the timed ops' rate plus start and stop spread over every op recorded (stop
handles the untimed ops' records too).

    python benchmarks/bench_ops.py [--ops 2000] [--rounds 101] [--loop python|c++|both]
                                   [--device cpu|cuda]

With --device cuda (the Python loop only) the tensors live on the GPU, each op launches one
kernel, every block ends with torch.cuda.synchronize(), and the profilers record the GPU too.

Costs are per-round paired overheads (common.paired_scaled: a variant's timing divided by the
unprofiled timing of the same round, taken moments apart, minus one, times the median
unprofiled timing), reported as median ± half the interquartile range over rounds.  Short
batches interleaved many times, in shuffled order: this machine (a 2-core VM) drifts by tens of
percent, at times by 2x, over seconds.
"""
import argparse
import sys

import common

import torch

import xsp

_bench = common.bench_helpers()


def measure(args, cpp):
    """Prints one table: the variants over args.rounds rounds."""
    cuda = args.device == "cuda"
    n, warm = args.ops, args.ops // 4
    if cpp:
        def timed():
            """The untimed ops, then the timed ones; returns the timed ops' duration in ns."""
            return _bench.bench_add(n, warm)
    else:
        a, b = torch.ones(8, device=args.device), torch.ones(8, device=args.device)

        def work(k):
            for _ in range(k):
                torch.add(a, b)
            if cuda:
                torch.cuda.synchronize()

        def timed():
            work(warm)
            t0 = common.now()
            work(n)
            return common.now() - t0

    acts = common.activities(torch, cuda)
    levels = "LG" if cuda else "L"
    xsp_name = "xsp " + levels
    counts = {}

    def result(t_start, t_block, t_stop):
        # start and stop (which handles the records of the untimed ops too) spread over every
        # op the session recorded; the timed ops at their own rate
        return {"block": t_block / n, "e2e": t_block / n + (t_start + t_stop) / (n + warm)}

    def plain():
        return result(0, timed(), 0)

    def floor_of(clock):
        def floor():
            t0 = common.now()
            _bench.floor_attach(clock=clock)
            t1 = common.now()
            tb = timed()
            t2 = common.now()
            _bench.floor_detach()
            return result(t1 - t0, tb, common.now() - t2)
        return floor

    def tprof():
        t0 = common.now()
        p = torch.profiler.profile(activities=acts)
        p.__enter__()
        t1 = common.now()
        tb = timed()
        t2 = common.now()
        p.__exit__(None, None, None)
        p.events()   # building the results is part of using them
        return result(t1 - t0, tb, common.now() - t2)

    def xspl():
        t0 = common.now()
        p = xsp.profile(levels=levels)
        p.start()
        t1 = common.now()
        tb = timed()
        t2 = common.now()
        p.stop()      # builds the Trace
        r = result(t1 - t0, tb, common.now() - t2)
        # checked outside the timing
        ops = len(p.trace.spans(kind="op", name="aten::add"))
        assert ops == n + warm, ("xsp recorded %d aten::add, expected %d" % (ops, n + warm))
        if cuda:
            counts["kernels"] = len(p.trace.spans(kind="kernel"))
            counts["lost"] = common.gpu_lost(p.trace)
        return r

    variants = {"unprofiled": plain, "floor": floor_of(False), "floor+clock": floor_of(True),
                "torch.profiler": tprof, xsp_name: xspl}
    for f in variants.values():      # warm-up: lazy initialisation of everything
        f()
    res = common.rounds(variants, args.rounds)
    what = "at::add from a C++ loop" if cpp else "torch.add from a Python loop"
    print("per-op cost, %s on 8 floats (%s), %d timed ops (after %d untimed) x %d rounds"
          % (what, args.device, n, warm, args.rounds))
    if cuda:
        print("GPU: %s; xsp LG recorded %d kernels in the last round (expected %d), %d GPU "
              "records lost or dropped" % (torch.cuda.get_device_name(), counts["kernels"],
                                           n + warm, counts["lost"]))
    print("unprofiled: %.0f ns/op (median), %.0f ns/op (fastest round)"
          % (common.med(res["unprofiled"]["block"]), min(res["unprofiled"]["block"])))
    print("%-16s %22s %24s" % ("variant", "in block, ns/op above", "end to end, ns/op above"))
    over = {}
    for k in ("floor", "floor+clock", "torch.profiler", xsp_name):
        ob = common.paired_scaled(res, k, "unprofiled", "block")
        oe = common.paired_scaled(res, k, "unprofiled", "e2e")
        over[k] = (common.med(ob), common.med(oe))
        print("%-16s %22s %24s" % (k, common.fmt(ob), common.fmt(oe)))
    common.print_ratios(over, xsp_name)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=101)
    ap.add_argument("--loop", choices=("python", "c++", "both"), default="both")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = ap.parse_args(argv)
    if args.ops < 4:
        ap.error("--ops must be at least 4")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.device == "cuda":
        if args.loop == "c++":
            ap.error("--loop c++ runs CPU tensors only: not with --device cuda")
        args.loop = "python"
        why = common.gpu_refusal(torch, "bench_ops")
        if why:
            print(why, file=sys.stderr)
            return 2
    torch.set_num_threads(1)
    print(common.machine())
    if args.loop in ("python", "both"):
        measure(args, cpp=False)
    if args.loop in ("c++", "both"):
        if args.loop == "both":
            print()
        measure(args, cpp=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
