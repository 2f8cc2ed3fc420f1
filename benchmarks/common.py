"""Shared helpers of the benchmarks: interleaved rounds, medians and spread, machine info.

The wall-time benchmarks measure all variants in one process and interleave them round by
round (rounds()), in an order shuffled each round, so drift of the machine (frequency, other load) hits all variants
alike and no variant always runs right after the same other one (a rotated order would time
one variant always just after torch.profiler's exit, with caches it left cold); it reports the
median and the interquartile spread over rounds.
"""
import os

# numpy's OpenBLAS threads spin after BLAS work and steal one of few cores from the variants
# being timed; torch is set to one thread by each benchmark too.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import platform  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def machine():
    import torch

    import xsp
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return ("%s, %d cores, Python %s, torch %s, xsp %s, %s" % (
        cpu, os.cpu_count(), platform.python_version(), torch.__version__, xsp.__version__,
        platform.platform()))


def rounds(variants, n_rounds, seed=0):
    """Runs each variant (name -> zero-arg callable returning a dict of numbers) n_rounds
    times, interleaved, in an order shuffled each round (seeded: runs repeat the same orders);
    returns name -> {metric: [values]}, values in round order."""
    names = list(variants)
    out = {k: {} for k in names}
    rng = random.Random(seed)
    for _ in range(n_rounds):
        order = names[:]
        rng.shuffle(order)
        for k in order:
            for metric, v in variants[k]().items():
                out[k].setdefault(metric, []).append(v)
    return out


def paired_scaled(res, k, base, metric):
    """Per-round overheads relative to the base timing of the same round, in the base's units
    at its median: (res[k][metric][r] / res[base][metric][r] - 1) * median(base).  When the
    whole machine slows down (this VM at times runs everything 2x slower for seconds), a
    variant's overhead slows with it; dividing by the same round's base cancels that factor
    as well as the drift between rounds (the two timings are taken moments apart)."""
    b = med(res[base][metric])
    return [(x / y - 1.0) * b for x, y in zip(res[k][metric], res[base][metric])]


def med(xs):
    return statistics.median(xs)


def spread(xs):
    """Interquartile range, or max-min for fewer than 4 values."""
    if len(xs) < 4:
        return max(xs) - min(xs)
    q = statistics.quantiles(xs, n=4)
    return q[2] - q[0]


def fmt(xs, unit=""):
    return "%.1f%s ±%.1f" % (med(xs), unit, spread(xs) / 2)


def now():
    return time.perf_counter_ns()


def ratio(a, b, fmt="%.2f"):
    """a / b formatted, or "n/a" when b is not positive (a tiny or noisy run)."""
    return fmt % (a / b) if b > 0 else "n/a"


def print_ratios(over, xsp="xsp L"):
    """over: variant -> (in-block cost above unprofiled, end-to-end cost above unprofiled), for
    "floor", "torch.profiler" and xsp (and "floor+clock" if measured); prints the ratios the
    targets are stated in."""
    fb = over["floor"][0]
    xb, xe = over[xsp]
    tb, te = over["torch.profiler"]
    print("ratios: xsp/floor in block %s (target <= 1.2); xsp/torch.profiler in block %s "
          "(target <= 0.5); torch.profiler/xsp end to end %s (target >= 20)"
          % (ratio(xb, fb), ratio(xb, tb), ratio(te, xe, "%.1f")))
    if "floor+clock" in over:
        cb = over["floor+clock"][0]
        print("clock floor: two clock reads per op cost %.1f ns above the floor; xsp above the "
              "clock floor %.1f ns/op; xsp/clock floor in block %s"
              % (cb - fb, xb - cb, ratio(xb, cb)))


def activities(torch, cuda):
    """torch.profiler's activities for a run: CPU, and CUDA when cuda."""
    acts = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    return acts


def gpu_lost(trace):
    """GPU records an xsp trace lost, dropped or could not buffer (0 when none)."""
    return sum(trace.counters.get(k, 0)
               for k in ("gpu.dropped", "gpu.lost", "gpu.refused_buffers"))


def gpu_refusal(torch, prog):
    """None when level G can record in this process, else the message a benchmark run with
    --device cuda prints before exiting with status 2."""
    from xsp.producers import profiler
    why = profiler.gpu_unavailable_reason(torch)
    if why is None:
        return None
    return "%s: --device cuda needs level G, unavailable here: %s" % (prog, why)


def bench_helpers():
    """xsp._bench (the floor callbacks, the C++ loop of at::add), which only dev builds have;
    exits with a clear message otherwise."""
    try:
        from xsp import _bench
    except ImportError as exc:
        sys.exit("the benchmarks need xsp._bench, which only dev builds have (%s): install xsp "
                 "with XSP_DEV=1 or XSP_BENCH=1 (make setup does)" % exc)
    return _bench
