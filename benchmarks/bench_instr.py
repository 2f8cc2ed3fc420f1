"""Per-op cost in instructions (callgrind): deterministic where wall-clock timing on a small
shared VM is not.  For each variant a child process runs 0 and N torch.add ops under valgrind;
(instructions(N) - instructions(0)) / N is the marginal cost of one op:
  in block     the child exits right after the loop (os._exit), so stopping is not counted
  end to end   the child stops the profiler and builds its results (trace / events)
Instructions are not time (rdtsc, cache misses and page faults cost differently), but they
compare code paths exactly; bench_ops.py gives the wall-clock view.

    python benchmarks/bench_instr.py [--ops 20000]
"""
import argparse
import os
import re
import subprocess
import sys

import common

VARIANTS = ("unprofiled", "floor", "torch.profiler", "xsp L")


def child(variant, n, e2e):
    import torch

    import xsp
    from xsp import _torch
    torch.set_num_threads(1)
    a, b = torch.ones(8), torch.ones(8)
    for _ in range(200):
        torch.add(a, b)
    if variant == "floor":
        _torch.floor_attach()
    elif variant == "torch.profiler":
        p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        p.__enter__()
    elif variant == "xsp L":
        p = xsp.profile(levels="L")
        p.start()
    for _ in range(n):
        torch.add(a, b)
    if not e2e:
        os._exit(0)
    if variant == "torch.profiler":
        p.__exit__(None, None, None)
        p.events()
    elif variant == "xsp L":
        p.stop()
    elif variant == "floor":
        _torch.floor_detach()
    os._exit(0)


def instructions(variant, n, e2e):
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
           os.path.realpath(sys.executable), __file__, "--child", variant, str(n),
           "1" if e2e else "0"]
    # a fixed hash seed: dict layouts, and so the garbage collector's work, are the same in
    # every child, so the counts repeat (with random seeds they moved by ~300 per op)
    env = dict(os.environ, PYTHONHASHSEED="0")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    m = re.search(r"Collected : (\d+)", out.stderr)
    if not m:
        raise RuntimeError("callgrind failed for %s %d: %s" % (variant, n, out.stderr[-2000:]))
    return int(m.group(1))


def main(argv=None):
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1")
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=20000)
    args = ap.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
