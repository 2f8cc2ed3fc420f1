"""Per-op cost in instructions (callgrind): deterministic where wall-clock timing on a small
shared VM is not.  For each variant a child process runs 0 and N torch.add ops under valgrind;
(instructions(N) - instructions(0)) / N is the marginal cost of one op:
  in block     the child exits right after the loop (os._exit), so stopping is not counted
  end to end   the child stops the profiler and builds its results (trace / events)
Instructions are not time (rdtsc, cache misses and page faults cost differently), but they
compare code paths exactly; bench_ops.py gives the wall-clock view.

With --modules N it counts module calls instead: a chain of N identity modules called
MODEL_CALLS times (N module calls per model call; the run with 0 calls the model alone as
often), unprofiled, with empty global forward hooks, under xsp M and under xsp ML.  Several
model calls spread the once-per-child work (the first call's names map, the collector) and
measure module spans in their steady state, as in a training loop.

    python benchmarks/bench_instr.py [--ops 20000] [--modules 0]
"""
import argparse
import os
import re
import subprocess
import sys

import common

VARIANTS = ("unprofiled", "floor", "torch.profiler", "xsp L")
MODULE_VARIANTS = ("unprofiled", "global hooks", "xsp M", "xsp ML")
MODEL_CALLS = 5   # model calls per child with --modules


def child_modules(variant, n, total):
    """Calls a chain of `total` identity modules, of which the first n run, MODEL_CALLS
    times."""
    import torch
    from torch import nn

    import xsp

    class Id(nn.Module):
        def forward(self, x):
            return x

    class Chain(nn.Module):
        def __init__(self):
            super().__init__()
            self.mods = nn.ModuleList(Id() for _ in range(total))
            self.k = 0

        def forward(self, x):
            for m in self.mods[:self.k]:
                x = m(x)
            return x

    torch.set_num_threads(1)
    model, x = Chain(), torch.ones(1)
    model.k = total
    for _ in range(3):
        model(x)
    model.k = n
    if variant == "global hooks":
        mod = torch.nn.modules.module
        mod.register_module_forward_pre_hook(lambda m, a: None)
        mod.register_module_forward_hook(lambda m, a, o: None, always_call=True)
    elif variant.startswith("xsp"):
        p = xsp.profile(levels=variant.split()[1])
        p.start()
    for _ in range(MODEL_CALLS):
        model(x)
    os._exit(0)


def child(variant, n, e2e):
    import torch

    import xsp
    _bench = common.bench_helpers()
    torch.set_num_threads(1)
    a, b = torch.ones(8), torch.ones(8)
    for _ in range(200):
        torch.add(a, b)
    # --layouts: objects of several sizes kept alive, so that Python's and C's allocators start
    # the block in another state (their per-op paths shift with it, by tens of instructions)
    pad = int(os.environ.get("XSP_BENCH_HEAP_PAD", "0"))
    keep = [bytearray(8 * (i % 64 + 1)) for i in range(pad * 97)]
    variant, _, opt = variant.partition("+")     # "xsp L+record_shapes": with that option
    kw = {opt: True} if opt else {}
    # a warm-up session of the variant, as the 200 ops above warm torch: a profiler's first
    # start imports and builds what later ones reuse, and those allocations leave Python's
    # allocator in a state that the block would otherwise pay for (+19 instructions an op in
    # xsp L's obmalloc on 5 of 6 heap layouts, 2026-12-03); --cold leaves it out
    if os.environ.get("XSP_BENCH_COLD") != "1":
        if variant == "floor":
            _bench.floor_attach()
            torch.add(a, b)
            _bench.floor_detach()
        elif variant == "torch.profiler":
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], **kw):
                torch.add(a, b)
        elif variant == "xsp L":
            with xsp.profile(levels="L", **kw):
                torch.add(a, b)
    if variant == "floor":
        _bench.floor_attach()
    elif variant == "torch.profiler":
        p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], **kw)
        p.__enter__()
    elif variant == "xsp L":
        p = xsp.profile(levels="L", **kw)
        p.start()
    for _ in range(n):
        torch.add(a, b)
    del keep
    if not e2e:
        os._exit(0)
    if variant == "torch.profiler":
        p.__exit__(None, None, None)
        p.events()
    elif variant == "xsp L":
        p.stop()
    elif variant == "floor":
        _bench.floor_detach()
    os._exit(0)


COLD = False   # --cold: the children skip their warm-up session


def instructions(variant, n, e2e, modules=0, pad=0):
    # sys.executable as it is, not its realpath: a virtual environment's python is a symlink,
    # and the resolved interpreter would not find the environment's packages
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
           sys.executable, __file__,
           "--child-modules" if modules else "--child", variant, str(n),
           str(modules) if modules else ("1" if e2e else "0")]
    # a fixed hash seed: dict layouts, and so the garbage collector's work, are the same in
    # every child, so the counts repeat (with random seeds they moved by ~300 per op)
    env = dict(os.environ, PYTHONHASHSEED="0", XSP_BENCH_HEAP_PAD=str(pad),
               XSP_BENCH_COLD="1" if COLD else "0")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    m = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or not m:
        raise RuntimeError("callgrind failed for %s %d: %s" % (variant, n, out.stderr[-2000:]))
    return int(m.group(1))


def main(argv=None):
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1")
        return 0
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child-modules":
        child_modules(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=20000)
    ap.add_argument("--modules", type=int, default=0,
                    help="count N module calls instead of ops")
    ap.add_argument("--options", action="store_true",
                    help="the recording options' cost (record_shapes, profile_memory): "
                         "torch.profiler and xsp L with each, against each without")
    ap.add_argument("--in-block-only", action="store_true",
                    help="only the in-block counts of unprofiled, floor and xsp L (6 valgrind "
                         "runs instead of 12: a quick check of the hot path)")
    ap.add_argument("--layouts", type=int, default=1,
                    help="with --in-block-only: repeat in K heap layouts (objects kept alive "
                         "before the block) and report each and their mean")
    ap.add_argument("--cold", action="store_true",
                    help="no warm-up session before the block: each variant's first start "
                         "and its allocations just before the counted ops")
    args = ap.parse_args(argv)
    global COLD
    COLD = args.cold
    if args.modules:
        return modules_main(args.modules)
    if args.in_block_only:
        return in_block_main(args.ops, args.layouts)
    if args.options:
        return options_main(args.ops)
    n = args.ops
    print("per-op cost in instructions (callgrind), torch.add on 8 floats, %d ops; %s"
          % (n, common.machine()))
    # the unprofiled and floor variants have nothing to stop: their end-to-end cost is their
    # in-block cost; the 12 valgrind runs go two at a time (instruction counts do not care)
    jobs = [(v, k, e2e) for v in VARIANTS for e2e in (False, True) for k in (0, n)
            if e2e is False or v in ("torch.profiler", "xsp L")]
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=2) as pool:
        counts = dict(zip(jobs, pool.map(lambda j: instructions(*j), jobs)))
    res = {}
    for v in VARIANTS:
        for e2e in (False, True):
            e = e2e and v in ("torch.profiler", "xsp L")
            res[v, e2e] = (counts[v, n, e] - counts[v, 0, e]) / n
    base_b, base_e = res["unprofiled", False], res["unprofiled", True]
    print("unprofiled: %.0f instructions/op" % base_b)
    print("%-16s %24s %26s" % ("variant", "in block, instr/op above", "end to end, instr/op above"))
    over = {}
    for v in VARIANTS[1:]:
        over[v] = (res[v, False] - base_b, res[v, True] - base_e)
        print("%-16s %24.0f %26.0f" % (v, over[v][0], over[v][1]))
    common.print_ratios(over)
    return 0


def options_main(n):
    """Each option's instructions per op, in block and end to end, for torch.profiler and xsp
    L, and the ratio torch.profiler / xsp per option."""
    print("per-op cost of the recording options in instructions (callgrind), torch.add on 8 "
          "floats, %d ops; %s" % (n, common.machine()))
    opts = ("", "record_shapes", "profile_memory")
    tools = ("torch.profiler", "xsp L")
    jobs = [("unprofiled", k, False) for k in (0, n)]
    jobs += [(t + ("+" + o if o else ""), k, e2e) for t in tools for o in opts
             for e2e in (False, True) for k in (0, n)]
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=2) as pool:
        counts = dict(zip(jobs, pool.map(lambda j: instructions(*j), jobs)))
    base = (counts["unprofiled", n, False] - counts["unprofiled", 0, False]) / n
    print("unprofiled: %.0f instructions/op" % base)
    print("%-32s %24s %26s" % ("variant", "in block, instr/op above", "end to end, instr/op above"))
    over = {}
    for t in tools:
        for o in opts:
            v = t + ("+" + o if o else "")
            b = (counts[v, n, False] - counts[v, 0, False]) / n - base
            e = (counts[v, n, True] - counts[v, 0, True]) / n - base
            over[t, o] = (b, e)
            print("%-32s %24.0f %26.0f" % (v, b, e))
    for o in opts:
        (tb, te), (xb, xe) = over["torch.profiler", o], over["xsp L", o]
        print("%-16s torch.profiler/xsp: in block %s, end to end %s; the option adds %+.0f "
              "instr/op to xsp, %+.0f to torch.profiler (in block)"
              % (o or "no option", common.ratio(tb, xb), common.ratio(te, xe),
                 xb - over["xsp L", ""][0], tb - over["torch.profiler", ""][0]))
    return 0


def in_block_main(n, layouts=1):
    print("per-op cost in instructions (callgrind), in block only, %d ops, %d heap layout(s), "
          "%s; %s" % (n, layouts, "cold (no warm-up session)" if COLD else
                      "after a warm-up session", common.machine()))
    variants = ("unprofiled", "floor", "xsp L")
    jobs = [(v, k, pad) for pad in range(layouts) for v in variants for k in (0, n)]
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=2) as pool:
        counts = dict(zip(jobs, pool.map(lambda j: instructions(j[0], j[1], False, pad=j[2]),
                                         jobs)))
    above = {}
    for pad in range(layouts):
        per = {v: (counts[v, n, pad] - counts[v, 0, pad]) / n for v in variants}
        above[pad] = {v: per[v] - per["unprofiled"] for v in variants[1:]}
        print("layout %d: unprofiled %.0f instructions/op; floor +%.0f, xsp L +%.0f above it; "
              "xsp L / floor %.3f, xsp L - floor %+.0f"
              % (pad, per["unprofiled"], above[pad]["floor"], above[pad]["xsp L"],
                 above[pad]["xsp L"] / above[pad]["floor"],
                 above[pad]["xsp L"] - above[pad]["floor"]))
    floor = sum(a["floor"] for a in above.values()) / layouts
    xsp = sum(a["xsp L"] for a in above.values()) / layouts
    print("floor      +%.0f instructions/op above unprofiled (mean of %d layouts)" % (floor, layouts))
    print("xsp L      +%.0f instructions/op above unprofiled (mean of %d layouts)" % (xsp, layouts))
    print("xsp L / floor: %.3f" % (xsp / floor))
    return 0


def modules_main(n):
    print("per-module-call cost in instructions (callgrind), %d identity modules, %d model "
          "calls; %s" % (n, MODEL_CALLS, common.machine()))
    jobs = [(v, k) for v in MODULE_VARIANTS for k in (0, n)]
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=2) as pool:
        counts = dict(zip(jobs, pool.map(lambda j: instructions(j[0], j[1], False, n), jobs)))
    per = {v: (counts[v, n] - counts[v, 0]) / (n * MODEL_CALLS) for v in MODULE_VARIANTS}
    print("unprofiled: %.0f instructions per module call" % per["unprofiled"])
    for v in MODULE_VARIANTS[1:]:
        print("%-14s +%.0f instructions per module call" % (v, per[v] - per["unprofiled"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
