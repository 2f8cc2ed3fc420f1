"""The machine's peaks for the roofline: FLOP/s per dtype and memory bandwidth (docs/analyses.md,
"Roofline").

    p = xsp.peaks.get()              # this machine's CPU: cached, else measured (a few seconds)
    p.flops_per_s["float32"], p.bytes_per_s, p.source    # "measured", "cache" or "override"
    p.roof(intensity, "float32")     # min(peak FLOP/s, intensity x bandwidth)

Where the numbers come from, first match wins:

1. an override: get(peaks=...) (a Peaks, a dict, a JSON text or a file path), else the
   environment variable XSP_PEAKS (a JSON text or a file path); a bad one raises PeaksError
   naming the key and the file;
2. the cache: one JSON file per machine under $XDG_CACHE_HOME/xsp (else ~/.cache/xsp), keyed by
   host, CPU model, core count, torch version, torch's threads, the device and the method's
   version (refresh=True measures again);
3. measured by micro-benchmarks (benchmark()): for each dtype a square matmul sized to be compute
   bound (doubled until one call takes a fair part of the budget), repeated to fill the
   budget, best of several rounds, on torch's own threads; for the bandwidth a copy between two
   buffers well beyond the last-level cache (read + write counted: 2 x the buffer per copy).

The theoretical peak (theoretical()) is computed apart and kept beside the measured one: for the
CPU from /proc/cpuinfo's SIMD flags (FLOPs per cycle per core), the clock (cpufreq's maximum,
else the current "cpu MHz") and the physical cores the process may run on; for a GPU from
torch.cuda's device properties.  Where a figure cannot be read it is None with the reason.

torch is imported inside the functions that need it (import xsp stays light).  This module
imports no other xsp module but xsp.core's util and fmt.
"""
import hashlib
import json
import math
import os
import platform
import socket
import time
import warnings

from xsp.core.fmt import fmt_si
from xsp.core.util import atomic_write, deprecated

DTYPES = ("float64", "float32", "bfloat16", "float16")
ENV = "XSP_PEAKS"
METHOD_VERSION = 1      # bump when benchmark() changes, so that old cache files are not reused
MIN_BUDGET_S = 0.01

# what a Peaks dict (to_dict, an override, a cache file) may hold
_KEYS = ("device", "flops_per_s", "bytes_per_s", "source", "method", "theoretical", "key",
         "notes")

__all__ = ["get", "measure", "theoretical", "load", "cache_path", "Peaks", "PeaksError",
           "DTYPES", "ENV"]


class PeaksError(ValueError):
    """A peaks override (argument, XSP_PEAKS, a file) is malformed; the message names the key
    and where it came from."""


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class Peaks:
    """A device's peaks: device ("cpu" or "cuda:N"), flops_per_s {dtype name: FLOP/s},
    bytes_per_s (memory bandwidth, B/s), source ("measured", "cache" or "override"), method
    (how each figure was measured: sizes, repetitions, rounds, best time; or where the
    override came from), theoretical (theoretical()'s dict, or None), key (the cache key) and
    notes (what went differently: a dtype that could not run, an unreadable cache file)."""

    def __init__(self, device, flops_per_s, bytes_per_s, source, method=None, theoretical=None,
                 key=None, notes=None):
        self.device = device
        self.flops_per_s = dict(flops_per_s)
        self.bytes_per_s = bytes_per_s
        self.source = source
        self.method = method if method is not None else {}
        self.theoretical = theoretical
        self.key = key
        self.notes = list(notes or ())

    def flops(self, dtype):
        """The peak FLOP/s for dtype (a name, "float32"), or None when it has none."""
        return self.flops_per_s.get(dtype)

    def ridge(self, dtype):
        """The ridge point for dtype: peak FLOP/s / bandwidth (FLOP/byte), or None when either
        is unknown."""
        p = self.flops(dtype)
        if p is None or not self.bytes_per_s:
            return None
        return p / self.bytes_per_s

    def roof(self, intensity, dtype):
        """The attainable FLOP/s at arithmetic intensity (FLOP/byte) for dtype: min(peak
        FLOP/s, intensity x bandwidth); None when the peak or the bandwidth is unknown or the
        intensity is not a number >= 0."""
        p = self.flops(dtype)
        if p is None or not self.bytes_per_s or not _is_number(intensity) or \
                not intensity >= 0:
            return None
        return min(p, intensity * self.bytes_per_s)

    def to_dict(self):
        """The peaks as a JSON-ready dict (what the cache file holds; get(peaks=) and XSP_PEAKS
        read it back)."""
        return {"device": self.device, "flops_per_s": dict(self.flops_per_s),
                "bytes_per_s": self.bytes_per_s, "source": self.source, "method": self.method,
                "theoretical": self.theoretical, "key": self.key, "notes": list(self.notes)}

    def __repr__(self):
        fl = ", ".join("%s %s" % (d, fmt_si(self.flops_per_s[d], "FLOP/s"))
                       for d in DTYPES if d in self.flops_per_s)
        s = "Peaks(%s, %s: %s; memory %s)" % (self.device, self.source, fl or "no FLOP/s",
                                              fmt_si(self.bytes_per_s, "B/s"))
        if self.notes:
            s += " notes: " + "; ".join(self.notes)
        return s


# -- the device --------------------------------------------------------------------------------
def _torch():
    import torch
    return torch


def _device(device, here=True):
    """'cpu' or 'cuda:N' (the current device for 'cuda'); ValueError for anything else, and
    with here for a CUDA device this machine does not have.  here=False (an override, which
    may be of another machine): 'cpu', 'cuda' or 'cuda:N' as given, unchecked."""
    if not isinstance(device, str):
        raise TypeError("device must be a str ('cpu', 'cuda' or 'cuda:N'), not %s"
                        % type(device).__name__)
    d = device.strip().lower()
    if d == "cpu":
        return "cpu"
    if d == "cuda" or (d.startswith("cuda:") and d[5:].isdigit()):
        if not here:
            return d
        torch = _torch()
        if not torch.cuda.is_available():
            raise ValueError("device %r: CUDA is not available (torch %s%s)" % (
                device, torch.__version__, ", a CPU build" if torch.version.cuda is None
                else ""))
        idx = torch.cuda.current_device() if d == "cuda" else int(d[5:])
        if idx >= torch.cuda.device_count():
            raise ValueError("device %r: this machine has %d CUDA device(s)"
                             % (device, torch.cuda.device_count()))
        return "cuda:%d" % idx
    raise ValueError("device must be 'cpu', 'cuda' or 'cuda:N', not %r" % (device,))


def _cpu_model(cpuinfo=None):
    for block in _cpuinfo_blocks(cpuinfo):
        for k in ("model name", "Model", "Hardware", "cpu model"):
            if block.get(k):
                return block[k]
    return platform.processor() or platform.machine() or "?"


def _affinity():
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def _key(device):
    """The cache key: what makes peaks differ between machines and settings."""
    torch = _torch()
    key = {"host": socket.gethostname(), "cpu_model": _cpu_model(),
           "cores": os.cpu_count(), "affinity": len(_affinity()),
           "torch": str(torch.__version__), "threads": torch.get_num_threads(),
           "device": device, "method_version": METHOD_VERSION}
    if device != "cpu":
        key["gpu"] = torch.cuda.get_device_name(int(device[5:]))
    return key


def cache_path(device="cpu"):
    """The cache file this machine's peaks for device are kept in (it may not exist):
    $XDG_CACHE_HOME/xsp/peaks-<device>-<hash of the key>.json, ~/.cache/xsp without
    XDG_CACHE_HOME.  Raises ValueError for an unknown device (as get)."""
    dev = _device(device)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    digest = hashlib.sha256(json.dumps(_key(dev), sort_keys=True).encode()).hexdigest()[:16]
    return os.path.join(base, "xsp", "peaks-%s-%s.json" % (dev.replace(":", ""), digest))


# -- the theoretical peak ----------------------------------------------------------------------
# FLOPs per cycle per core (float32, float64) by the widest SIMD the flags show, assuming two
# FMA units per core (an FMA is 2 FLOPs): an upper bound where a core has one unit or splits
# 256-bit operations (AMD Zen 1), which halves it
_ISA = (("avx512f", "AVX-512 FMA", 64, 32), ("fma", "AVX2 FMA", 32, 16),
        ("avx", "AVX (add + mul)", 16, 8), ("sse2", "SSE2 (add + mul)", 8, 4),
        ("asimd", "NEON FMA", 16, 8))


def _cpuinfo_blocks(text=None):
    """/proc/cpuinfo (or text) as a list of {field: value}, one per processor."""
    if text is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            return []
    blocks, cur = [], {}
    for line in text.splitlines():
        if not line.strip():
            if cur:
                blocks.append(cur)
            cur = {}
            continue
        k, sep, v = line.partition(":")
        if sep:
            cur[k.strip()] = v.strip()
    if cur:
        blocks.append(cur)
    return blocks


def _read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return None


def cpu_theoretical(cpuinfo, max_khz=None, cpus=None):
    """The CPU's theoretical peak from the text of /proc/cpuinfo: {"flops_per_s": {"float32",
    "float64"} or None, "flops_per_cycle_per_core", "isa", "cores" (distinct physical cores,
    (physical id, core id), among the processors in cpus: all when None), "hz",
    "hz_source" ("cpufreq max" when max_khz, the highest cpuinfo_max_freq in kHz, is given;
    else "/proc/cpuinfo cpu MHz", the current clock), "bytes_per_s": None (memory channels
    and speed are not in /proc), "assumes", "reason" (None, or why flops_per_s is None)}.
    Pure: the reader (theoretical) passes the files' contents."""
    out = {"flops_per_s": None, "flops_per_cycle_per_core": None, "isa": None, "cores": None,
           "hz": None, "hz_source": None, "bytes_per_s": None,
           "bytes_reason": "memory channels and their speed are not readable from /proc or "
                           "/sys without root (dmidecode)",
           "assumes": "two FMA units per core; one unit, or 256-bit operations split in two "
                      "(AMD Zen 1), halves it: the figure is an upper bound",
           "reason": None}
    blocks = _cpuinfo_blocks(cpuinfo)
    if cpus is not None:
        want = {int(c) for c in cpus}
        sel = [b for b in blocks if b.get("processor", "").isdigit() and
               int(b["processor"]) in want]
        blocks = sel or blocks
    if not blocks:
        out["reason"] = "/proc/cpuinfo is unreadable or lists no processor"
        return out
    flags = set((blocks[0].get("flags") or blocks[0].get("Features") or "").split())
    for flag, isa, f32, f64 in _ISA:
        if flag in flags:
            out["isa"] = isa
            out["flops_per_cycle_per_core"] = {"float32": f32, "float64": f64}
            break
    phys = {(b.get("physical id"), b.get("core id")) for b in blocks}
    out["cores"] = len(phys) if all(b.get("core id") is not None for b in blocks) else \
        len(blocks)
    if max_khz:
        out["hz"], out["hz_source"] = float(max_khz) * 1e3, "cpufreq max"
    else:
        mhz = [float(b["cpu MHz"]) for b in blocks if _is_float(b.get("cpu MHz"))]
        if mhz:
            out["hz"], out["hz_source"] = max(mhz) * 1e6, "/proc/cpuinfo cpu MHz (current)"
    if out["flops_per_cycle_per_core"] is None:
        out["reason"] = ("no SIMD flag xsp knows in /proc/cpuinfo (%s)"
                         % ", ".join(f for f, *_ in _ISA))
    elif out["hz"] is None:
        out["reason"] = ("no clock: neither cpufreq's cpuinfo_max_freq nor 'cpu MHz' in "
                         "/proc/cpuinfo")
    else:
        out["flops_per_s"] = {d: v * out["cores"] * out["hz"]
                              for d, v in out["flops_per_cycle_per_core"].items()}
    return out


def _is_float(s):
    try:
        float(s)
        return True
    except (TypeError, ValueError):
        return False


# FP32 lanes per SM by compute capability (CUDA cores; tensor cores not counted: cuBLAS runs
# float32 matmuls on CUDA cores unless TF32 is allowed)
_FP32_PER_SM = {(6, 0): 64, (6, 1): 128, (6, 2): 128, (7, 0): 64, (7, 2): 64, (7, 5): 64,
                (8, 0): 64, (8, 6): 128, (8, 7): 128, (8, 9): 128, (9, 0): 128, (10, 0): 128,
                (10, 3): 128, (12, 0): 128, (12, 1): 128}


def gpu_theoretical(props):
    """A GPU's theoretical peak from torch.cuda.get_device_properties(): {"flops_per_s":
    {"float32"} or None (SMs x FP32 lanes per SM x 2 x clock: CUDA cores, no tensor cores;
    float64 and the 16-bit types run on tensor cores, whose rates the properties do not give),
    "bytes_per_s" (2 x memory clock x bus width / 8, or None), "sms", "hz", "reason",
    "bytes_reason"}.  Pure: reads the fields of props by name."""
    out = {"flops_per_s": None, "bytes_per_s": None, "sms": None, "hz": None,
           "assumes": "float32 on CUDA cores (TF32 off); no tensor-core rates",
           "reason": None, "bytes_reason": None}
    sms = getattr(props, "multi_processor_count", None)
    khz = getattr(props, "clock_rate", None)
    cc = (getattr(props, "major", None), getattr(props, "minor", None))
    out["sms"] = sms
    lanes = _FP32_PER_SM.get(cc)
    if not sms or not khz:
        out["reason"] = "the device properties give no SM count or clock (clock_rate)"
    elif lanes is None:
        out["reason"] = "FP32 lanes per SM unknown for compute capability %s.%s" % cc
    else:
        out["hz"] = float(khz) * 1e3
        out["flops_per_s"] = {"float32": float(sms * lanes * 2) * out["hz"]}
    mkhz = getattr(props, "memory_clock_rate", None)
    bus = getattr(props, "memory_bus_width", None)
    if mkhz and bus:
        out["bytes_per_s"] = 2.0 * float(mkhz) * 1e3 * float(bus) / 8.0
    else:
        out["bytes_reason"] = ("the device properties give no memory clock or bus width "
                               "(memory_clock_rate, memory_bus_width)")
    return out


def theoretical(device="cpu"):
    """The theoretical peak of device ("cpu", "cuda", "cuda:N"), a dict: for the CPU
    cpu_theoretical() of /proc/cpuinfo, cpufreq and the CPUs this process may run on; for a GPU
    gpu_theoretical() of its properties.  Figures that cannot be read are None with the reason
    beside them.  Raises ValueError for an unknown device."""
    dev = _device(device)
    if dev == "cpu":
        cpus = _affinity()
        khz = [_read("/sys/devices/system/cpu/cpu%d/cpufreq/cpuinfo_max_freq" % c)
               for c in cpus]
        khz = [float(k) for k in khz if _is_float(k)]
        text = _read("/proc/cpuinfo")
        return cpu_theoretical(text or "", max(khz) if khz else None, cpus)
    torch = _torch()
    return gpu_theoretical(torch.cuda.get_device_properties(int(dev[5:])))


# -- the micro-benchmarks ----------------------------------------------------------------------
def _llc_bytes(cpus):
    """The last-level cache of the CPUs cpus, in bytes (each instance once), or None."""
    seen = {}
    for c in cpus:
        base = "/sys/devices/system/cpu/cpu%d/cache" % c
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            if not name.startswith("index"):
                continue
            lvl, typ = _read(os.path.join(base, name, "level")), \
                _read(os.path.join(base, name, "type"))
            size = _read(os.path.join(base, name, "size"))
            shared = _read(os.path.join(base, name, "shared_cpu_list"))
            if not (lvl and lvl.isdigit() and size) or typ == "Instruction":
                continue
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:].upper(), 1)
            digits = size[:-1] if size[-1:].isalpha() else size
            if not digits.isdigit():
                continue
            seen[(int(lvl), shared or str(c))] = int(digits) * mult
    if not seen:
        return None
    top = max(lvl for lvl, _ in seen)
    total = sum(v for (lvl, _), v in seen.items() if lvl == top)
    return total or None


def _sync(torch, dev):
    if dev != "cpu":
        return lambda: torch.cuda.synchronize(dev)
    return lambda: None


def _rounds(call, sync, t_call, deadline, rounds):
    """(best seconds per round, reps per round, rounds run): rounds of reps calls, reps sized
    so that `rounds` rounds fill the time to deadline, then more rounds while time is left (at
    most 50): on a shared machine one round can lose its core to another process, so the
    best round is the figure."""
    left = deadline - time.perf_counter()
    reps = max(1, int(left / rounds / max(t_call, 1e-9)))
    best, done = math.inf, 0
    while done < rounds or (done < 50 and time.perf_counter() + best <= deadline):
        sync()
        t0 = time.perf_counter()
        for _ in range(reps):
            call()
        sync()
        best = min(best, time.perf_counter() - t0)
        done += 1
    return best, reps, done


def _timed(call, sync, times=2):
    """The shortest of `times` timed calls, in seconds."""
    best = math.inf
    for _ in range(times):
        sync()
        t0 = time.perf_counter()
        call()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


def _matmul(torch, dev, dtype, budget_s, rounds):
    """FLOP/s of torch.mm on n x n matrices of dtype: n doubled from 256 (1024 on a GPU) until
    one call takes budget / (4 rounds), n reaches 2048 (16384) or the next size would not fit
    in the budget left, then rounds of calls until the budget is spent (at least `rounds`),
    the best round; 2 n^3 FLOPs per call (torch.utils.flop_counter's count).  Raises what
    torch raises for a dtype the device cannot multiply."""
    sync = _sync(torch, dev)
    deadline = time.perf_counter() + budget_s
    dt = getattr(torch, dtype)
    n, n_max = (256, 2048) if dev == "cpu" else (1024, 16384)
    target = budget_s / (4.0 * rounds)
    while True:
        a = torch.rand(n, n, device=dev).to(dt)
        b = torch.rand(n, n, device=dev).to(dt)
        c = torch.empty(n, n, device=dev, dtype=dt)

        def call():
            torch.mm(a, b, out=c)
        call()                               # warm: the library's first call, page faults
        t = _timed(call, sync)
        # twice the size is about 8 times the time: its sizing calls and `rounds` calls
        # must fit in what is left of the budget
        left = deadline - time.perf_counter()
        if t >= target or 2 * n > n_max or 8 * t * (3 + rounds) > left:
            break
        n *= 2
    best, reps, done = _rounds(call, sync, t, deadline, rounds)
    flops = 2.0 * n ** 3 * reps
    return {"n": n, "reps": reps, "rounds": done, "best_s": best, "flops": flops,
            "flops_per_s": flops / best}


def _copy(torch, dev, budget_s, rounds):
    """Bytes/s of dst.copy_(src) over float32 buffers well beyond the last-level cache (CPU:
    4 x the LLC, at least 64 MiB, at most 1 GiB; GPU: 8 x L2, at least 256 MiB, at most 2 GiB
    and an eighth of its memory): 2 x the buffer per copy (read + write), rounds until the
    budget is spent, the best round."""
    sync = _sync(torch, dev)
    deadline = time.perf_counter() + budget_s
    if dev == "cpu":
        llc = _llc_bytes(_affinity())
        want = max(64 << 20, 4 * (llc or 0))
        nbytes = min(want, 1 << 30)
        where = {"llc_bytes": llc}
    else:
        props = torch.cuda.get_device_properties(int(dev[5:]))
        l2 = getattr(props, "L2_cache_size", 0) or 0
        want = max(256 << 20, 8 * l2)
        nbytes = min(want, 2 << 30, props.total_memory // 8)
        where = {"l2_bytes": l2}
    n = nbytes // 4
    src = torch.empty(n, dtype=torch.float32, device=dev).fill_(1.0)
    dst = torch.empty(n, dtype=torch.float32, device=dev).fill_(0.0)

    def call():
        dst.copy_(src)
    call()                                   # warm
    t = _timed(call, sync, times=1)
    best, reps, done = _rounds(call, sync, t, deadline, rounds)
    moved = 2.0 * n * 4 * reps
    out = {"buffer_bytes": n * 4, "reps": reps, "rounds": done, "best_s": best,
           "bytes": moved, "bytes_per_s": moved / best, "capped": want > nbytes}
    out.update(where)
    return out


def measure(device="cpu", budget_s=2.0, dtypes=None, rounds=3):
    """Deprecated: benchmark(device, ...) (xsp.measure is the one verb that measures a
    workload; a device's peaks are benchmarked)."""
    deprecated("xsp.analysis.peaks.measure(device)", "xsp.analysis.peaks.benchmark(device)")
    return benchmark(device, budget_s=budget_s, dtypes=dtypes, rounds=rounds)


def benchmark(device="cpu", budget_s=2.0, dtypes=None, rounds=3):
    """Benchmarks device's peaks now (no cache read or written): for each dtype (default: all of
    DTYPES) the FLOP/s of a compute-bound matmul, and the memory bandwidth of a streaming copy;
    the budget (seconds, about what it takes) is shared between them.  A dtype the device
    cannot multiply is left out and said in notes.  Returns a Peaks with source "measured".
    Raises ValueError for an unknown device or dtype, a budget under 0.01 s or rounds < 1."""
    dev = _device(device)
    if not _is_number(budget_s) or not budget_s >= MIN_BUDGET_S:
        raise ValueError("budget_s must be a number of seconds >= %g, not %r"
                         % (MIN_BUDGET_S, budget_s))
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise ValueError("rounds must be an int >= 1, not %r" % (rounds,))
    dtypes = list(DTYPES if dtypes is None else dtypes)
    bad = [d for d in dtypes if d not in DTYPES]
    if bad or not dtypes:
        raise ValueError("dtypes must be a non-empty list of %s, not %r"
                         % (", ".join(DTYPES), dtypes))
    torch = _torch()
    each = budget_s / (len(dtypes) + 1)
    flops, how, notes = {}, {"matmul": {}, "threads": torch.get_num_threads()}, []
    if dev != "cpu":
        how["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    t0 = time.perf_counter()
    for d in dtypes:
        try:
            r = _matmul(torch, dev, d, each, rounds)
        except (RuntimeError, TypeError, NotImplementedError) as e:
            notes.append("%s: matmul did not run on %s (%s)" % (
                d, dev, (str(e).splitlines() or [type(e).__name__])[0]))
            continue
        flops[d] = r.pop("flops_per_s")
        how["matmul"][d] = r
    cp = _copy(torch, dev, each, rounds)
    bw = cp.pop("bytes_per_s")
    how["copy"] = cp
    how["seconds"] = time.perf_counter() - t0
    how["budget_s"] = budget_s
    return Peaks(dev, flops, bw, "measured", method=how, theoretical=theoretical(dev),
                 key=_key(dev), notes=notes)


# -- overrides and the cache -------------------------------------------------------------------
def _bad(where, key, what):
    return PeaksError("%s: key %r: %s" % (where, key, what))


def _device_matches(want, have):
    """Whether peaks of device `have` serve device `want` ("cuda" stands for any cuda:N)."""
    cuda = want.startswith("cuda") and have.startswith("cuda")
    return have == want or (cuda and "cuda" in (want, have))


def from_dict(d, device, where, source="override"):
    """A Peaks from a dict shaped like Peaks.to_dict() (flops_per_s and bytes_per_s required),
    or a dict of such dicts keyed by device ("cpu", "cuda", "cuda:0"); where names the origin
    in messages.  Raises PeaksError naming the key for an unknown key, a missing one, an
    unknown dtype, a value that is not a positive finite number, or peaks of another
    device."""
    if not isinstance(d, dict):
        raise PeaksError("%s: peaks must be a JSON object (a dict), not %s"
                         % (where, type(d).__name__))
    if d and all(isinstance(k, str) and (k in ("cpu", "cuda") or (
            k.startswith("cuda:") and k[5:].isdigit())) for k in d):
        for k in [device] + sorted(k for k in d if k != device and _device_matches(device, k)):
            if k in d:
                return from_dict(d[k], device, "%s[%r]" % (where, k), source)
        raise PeaksError("%s: has peaks for %s, not for %s"
                         % (where, ", ".join(sorted(d)), device))
    for k in d:
        if k not in _KEYS:
            raise _bad(where, k, "unknown key; keys are %s" % ", ".join(_KEYS))
    for k in ("flops_per_s", "bytes_per_s"):
        if k not in d:
            raise _bad(where, k, "missing (a peaks override needs flops_per_s {dtype: FLOP/s} "
                                 "and bytes_per_s)")
    fl = d["flops_per_s"]
    if not isinstance(fl, dict) or not fl:
        raise _bad(where, "flops_per_s", "must be a non-empty object {dtype: FLOP/s}, not %r"
                   % (fl,))
    for dt, v in fl.items():
        if dt not in DTYPES:
            raise _bad(where, "flops_per_s.%s" % dt, "unknown dtype; dtypes are %s"
                       % ", ".join(DTYPES))
        if not _is_number(v) or not (0 < v < math.inf):
            raise _bad(where, "flops_per_s.%s" % dt, "must be a positive finite number, "
                       "not %r" % (v,))
    bw = d["bytes_per_s"]
    if not _is_number(bw) or not (0 < bw < math.inf):
        raise _bad(where, "bytes_per_s", "must be a positive finite number, not %r" % (bw,))
    have = d.get("device")
    if have is not None:
        if not isinstance(have, str):
            raise _bad(where, "device", "must be a str, not %r" % (have,))
        if not _device_matches(device, have):
            raise _bad(where, "device", "these are peaks of %s, not of %s" % (have, device))
    for k in ("method", "theoretical", "key"):
        if d.get(k) is not None and not isinstance(d[k], dict):
            raise _bad(where, k, "must be an object, not %r" % (d[k],))
    notes = d.get("notes") or []
    if not isinstance(notes, list):
        raise _bad(where, "notes", "must be a list, not %r" % (notes,))
    method = dict(d.get("method") or {})
    if source == "override":
        method = {"override": where, "measured": method} if method else {"override": where}
    return Peaks(device, {k: float(v) for k, v in fl.items()}, float(bw), source,
                 method=method, theoretical=d.get("theoretical"), key=d.get("key"),
                 notes=[str(n) for n in notes])


def load(spec, device="cpu", where=None):
    """An override as Peaks (source "override"): spec a Peaks, a dict (from_dict), a JSON text
    (starting with "{" or "[") or the path of a JSON file.  where names the origin in messages
    (default: "peaks argument").  Raises PeaksError for a file that cannot be read or is not
    JSON, or malformed peaks (which key, which file); TypeError for another kind of spec.  The
    device need not be on this machine (peaks for a GPU trace read on a laptop)."""
    dev = _device(device, here=False)
    where = where or "peaks argument"
    if isinstance(spec, Peaks):
        return from_dict(spec.to_dict(), dev, where)
    if isinstance(spec, dict):
        return from_dict(spec, dev, where)
    if isinstance(spec, (str, os.PathLike)):
        text = os.fspath(spec)
        if isinstance(spec, str) and text.lstrip()[:1] in ("{", "["):
            try:
                d = json.loads(text)
            except ValueError as e:
                raise PeaksError("%s: not valid JSON: %s" % (where, e)) from None
            return from_dict(d, dev, where)
        path = os.path.abspath(text)
        try:
            with open(path, encoding="utf-8") as f:
                raw = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise PeaksError("%s: file %s cannot be read: %s" % (where, path, e)) from None
        try:
            d = json.loads(raw)
        except ValueError as e:
            raise PeaksError("%s: file %s is not valid JSON: %s" % (where, path, e)) from None
        return from_dict(d, dev, "%s (file %s)" % (where, path))
    raise TypeError("peaks must be a Peaks, a dict, a JSON text or a file path, not %s"
                    % type(spec).__name__)


def _read_cache(path, dev, key):
    """(Peaks or None, note or None): the cache file's peaks if it is this machine's."""
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        p = from_dict(d, dev, "cache file %s" % path, source="cache")
    except (FileNotFoundError, NotADirectoryError):      # no cache file (yet)
        return None, None
    except (OSError, ValueError) as e:       # PeaksError and JSON errors are ValueErrors
        return None, "cache file %s unreadable (%s): measured again" % (path, e)
    if p.key != key:
        return None, "cache file %s is of another machine or setting: measured again" % path
    return p, None


def get(device="cpu", refresh=False, peaks=None, budget_s=2.0):
    """This machine's peaks for device ("cpu", "cuda", "cuda:N"), a Peaks: the override
    (peaks=: a Peaks, dict, JSON text or file path; else the environment variable XSP_PEAKS)
    with source "override"; else the cache file (cache_path()) with source "cache"; else
    measured (benchmark(device, budget_s)) and written to the cache, source "measured".
    refresh=True measures again and rewrites the cache (an override still wins).  A cache
    file that cannot be read or written is said in the result's notes and with a warning.
    Raises PeaksError for a bad override (naming the key and the file or XSP_PEAKS),
    ValueError for an unknown device or a device without CUDA."""
    dev = _device(device)
    if peaks is not None:
        return load(peaks, dev, "peaks argument")
    env = os.environ.get(ENV)
    if env is not None and env.strip():
        return load(env, dev, ENV)
    key = _key(dev)
    path = cache_path(dev)
    note = None
    if not refresh:
        p, note = _read_cache(path, dev, key)
        if p is not None:
            return p
    p = benchmark(dev, budget_s=budget_s)
    if note:
        p.notes.append(note)
        warnings.warn(note, RuntimeWarning, stacklevel=2)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic_write(path, lambda f: json.dump(p.to_dict(), f, indent=1, sort_keys=True))
    except OSError as e:
        msg = "peaks not cached: cannot write %s (%s)" % (path, e)
        p.notes.append(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=2)
    return p
