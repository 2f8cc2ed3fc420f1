"""The machine an evaluation ran on: its fingerprint, its energy counters, its price.

fingerprint() describes the system as the results database keeps it (the `systems` table of
xsp.zoo.store): the hardware (CPU model and count, memory, GPUs and their driver), the
software stack (OS, kernel, Python, torch and its CUDA, xsp) and the run's settings (the CPUs
the process may use, torch's thread counts).  `system_id` is a short hash of the fields that
define the system (SYSTEM_ID_FIELDS): hardware and software stack, not the host's name and not
the settings of one run (affinity, threads), so that the identical nodes of a cluster are one
system whose results pool, and a resumed run on the same machine finds its own results again.
An evaluator that varies threads on purpose says so in the evaluation's options, which are
part of its key.

Files are read under a `root` argument ("/" by default), so that tests point it at a fake
tree: <root>/proc/cpuinfo, proc/meminfo, proc/self/status (Cpus_allowed_list),
proc/sys/kernel/{hostname,osrelease}, etc/os-release (else usr/lib/os-release),
proc/driver/nvidia/version (the GPU driver) and sys/class/powercap (RAPL).  Only with the real
root do missing files fall back to what the process can ask (os.uname, os.cpu_count,
os.sched_getaffinity).  What cannot be known is None, never an error: a CPU build of torch
gives None for every GPU field and `gpu_why` says why.

Energy (EnergyMeter) comes from two counters, each absent with its reason where the machine
has none:
  - cpu: Linux powercap's RAPL zones, /sys/class/powercap/intel-rapl:N/energy_uj (microjoules,
    a counter that wraps at max_energy_range_uj).  Only package zones count (intel-rapl:N
    whose name is package-N; sub-zones intel-rapl:N:M such as core and dram lie inside their
    package, and psys covers the whole platform: counting them would count twice); every
    package is summed.  Since Linux 5.10 energy_uj is readable by root only (the PLATYPUS
    side channel): a permission error makes the counter absent with that reason.  A delta is
    exact for at most one wrap between start and stop (about 20 minutes at 200 W for a
    32-bit counter); the wrap is taken as max_energy_range_uj, one energy unit (about 61 uJ)
    short of the hardware's true range.
  - gpu: NVML's nvmlDeviceGetTotalEnergyConsumption (millijoules since the driver loaded;
    Volta and later), through the pynvml module (pip install nvidia-ml-py), summed over the
    GPUs this process sees: those CUDA_VISIBLE_DEVICES names (indices or GPU- UUIDs), all of
    them when it is unset.  Absent without pynvml, without a driver, on a GPU that does not
    support it, or for MIG instances (NVML counts energy per physical GPU).

cost_per_million(throughput, price_per_hour) turns a throughput and a system's price into the
cost of a million samples.
"""
import hashlib
import json
import math
import numbers
import os
import platform
import re
import socket
import sys

from xsp._version import __version__ as _xsp_version

# the fields hashed into system_id, in this order (see the module docstring)
SYSTEM_ID_FIELDS = ("arch", "cpu_model", "cpu_count", "memory_gib", "os", "kernel", "python",
                    "torch_version", "torch_cuda", "cudnn_version", "xsp_version", "gpu_count",
                    "gpu_names", "gpu_driver")
SYSTEM_ID_LEN = 12          # hex digits of the sha256 kept
POWERCAP = "sys/class/powercap"
_PACKAGE_ZONE = re.compile(r"intel-rapl:(\d+)\Z")


def _path(root, rel):
    return os.path.join(os.fspath(root), rel)


def _read(root, rel):
    """The text of <root>/<rel> stripped, or None when it cannot be read."""
    try:
        with open(_path(root, rel), encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _real(root):
    return os.path.realpath(os.fspath(root)) == "/"


def _cpu_list_count(text):
    """How many CPUs a Linux CPU list names ("0-3,8,10-11" -> 7); None when malformed."""
    n = 0
    try:
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            lo, _, hi = part.partition("-")
            n += (int(hi) if hi else int(lo)) - int(lo) + 1
    except ValueError:
        return None
    return n or None


def _cpuinfo(root):
    """(model, logical CPU count) from <root>/proc/cpuinfo; Nones where it says nothing."""
    text = _read(root, "proc/cpuinfo")
    if text is None:
        return None, None
    model, count = None, 0
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        if key == "processor":
            count += 1
        # x86's "model name"; ARM kernels without it name the board in "Hardware"
        elif model is None and key in ("model name", "cpu model", "hardware"):
            model = value.strip() or None
    return model, count or None


def _meminfo_bytes(root):
    text = _read(root, "proc/meminfo")
    m = re.search(r"^MemTotal:\s*(\d+)\s*kB", text or "", re.M)
    return int(m.group(1)) * 1024 if m else None


def _affinity(root):
    """The CPUs this process may run on: Cpus_allowed_list of <root>/proc/self/status."""
    m = re.search(r"^Cpus_allowed_list:\s*(\S+)", _read(root, "proc/self/status") or "", re.M)
    if m:
        return _cpu_list_count(m.group(1))
    if _real(root) and hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return None


def _os_name(root):
    for rel in ("etc/os-release", "usr/lib/os-release"):
        text = _read(root, rel)
        if text is None:
            continue
        m = re.search(r'^PRETTY_NAME=("?)(.*)\1\s*$', text, re.M)
        if m:
            return m.group(2)
    return platform.platform() if _real(root) else None


def _nvidia_driver(root):
    """The driver version from <root>/proc/driver/nvidia/version ("Kernel Module  550.54.15")."""
    m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]*)",
                  _read(root, "proc/driver/nvidia/version") or "")
    return m.group(1) if m else None


def _import_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _gpus(torch):
    """The GPU fields from torch.cuda: a dict of gpu_count, gpu_name (device 0), gpu_names
    (every device's, "; "-joined), gpu_memory_bytes and gpu_capability (device 0), and gpu_why
    (None, or why they are None)."""
    out = dict.fromkeys(("gpu_count", "gpu_name", "gpu_names", "gpu_memory_bytes",
                         "gpu_capability", "cudnn_version"))
    if torch is None:
        out["gpu_why"] = "torch is not importable"
        return out
    try:
        available = bool(torch.cuda.is_available())
    except Exception as e:          # a broken driver install raises from inside torch
        out["gpu_why"] = "torch.cuda.is_available() raised %s: %s" % (type(e).__name__, e)
        return out
    if not available:
        out["gpu_why"] = ("torch.cuda.is_available() is False" +
                          (" (a CPU build of torch: torch.version.cuda is None)"
                           if getattr(torch.version, "cuda", None) is None else ""))
        return out
    n = int(torch.cuda.device_count())
    names = [str(torch.cuda.get_device_name(i)) for i in range(n)]
    props = torch.cuda.get_device_properties(0)
    out.update(gpu_count=n, gpu_name=names[0], gpu_names="; ".join(names),
               gpu_memory_bytes=int(props.total_memory),
               gpu_capability="%d.%d" % (props.major, props.minor), gpu_why=None)
    try:
        v = torch.backends.cudnn.version()
        out["cudnn_version"] = None if v is None else int(v)
    except Exception:
        pass
    return out


def system_id(fp):
    """The short hash of a fingerprint's SYSTEM_ID_FIELDS (12 hex digits)."""
    ident = {k: fp.get(k) for k in SYSTEM_ID_FIELDS}
    text = json.dumps(ident, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:SYSTEM_ID_LEN]


def fingerprint(root="/", torch=None):
    """The system this process runs on, a dict (every value a str, an int or None):

    system_id (hash of SYSTEM_ID_FIELDS), hostname, arch (os.uname's machine), cpu_model,
    cpu_count (logical CPUs), cpu_affinity (CPUs this process may use), memory_bytes
    (MemTotal), memory_gib (rounded: what system_id hashes, as MemTotal moves by a few kB with
    the kernel), os (PRETTY_NAME), kernel, python, torch_version, torch_cuda (the CUDA torch
    was built for; None for a CPU build), cudnn_version, xsp_version, torch_threads,
    torch_interop_threads, gpu_count, gpu_name, gpu_names, gpu_memory_bytes, gpu_capability,
    gpu_driver, gpu_why (why the GPU fields are None, else None).

    root: where the files are read (see the module docstring).  torch: the torch module to ask
    (default: import it; None values where it does not import)."""
    torch = _import_torch() if torch is None else torch
    real = _real(root)
    model, count = _cpuinfo(root)
    if count is None and real:
        count = os.cpu_count()
    if model is None and real:
        model = platform.processor() or None
    mem = _meminfo_bytes(root)
    hostname = _read(root, "proc/sys/kernel/hostname") or (socket.gethostname() if real
                                                           else None)
    kernel = _read(root, "proc/sys/kernel/osrelease") or (os.uname().release if real else None)
    fp = {
        "system_id": None,
        "hostname": hostname,
        "arch": platform.machine() or None,
        "cpu_model": model,
        "cpu_count": count,
        "cpu_affinity": _affinity(root),
        "memory_bytes": mem,
        "memory_gib": None if mem is None else int(round(mem / 2 ** 30)),
        "os": _os_name(root),
        "kernel": kernel,
        "python": platform.python_version(),
        "torch_version": None if torch is None else str(torch.__version__),
        "torch_cuda": None if torch is None else getattr(torch.version, "cuda", None),
        "xsp_version": _xsp_version,
        "torch_threads": None if torch is None else int(torch.get_num_threads()),
        "torch_interop_threads": None if torch is None else int(torch.get_num_interop_threads()),
    }
    fp.update(_gpus(torch))
    why = fp.pop("gpu_why")
    fp["gpu_driver"] = _nvidia_driver(root) if fp["gpu_count"] else None
    fp["gpu_why"] = why
    fp["system_id"] = system_id(fp)
    return fp


# -- energy -------------------------------------------------------------------------------

class _Rapl:
    """The package zones of powercap's RAPL under root: read() gives {zone dir: microjoules}."""

    def __init__(self, root):
        self.base = _path(root, POWERCAP)
        self.zones = []         # [(zone directory, max_energy_range_uj)]
        self.why = None
        if not os.path.isdir(self.base):
            self.why = "no RAPL: %s does not exist" % self.base
            return
        found = []
        for d in sorted(os.listdir(self.base)):
            m = _PACKAGE_ZONE.match(d)
            if not m:
                continue
            name = _read(self.base, os.path.join(d, "name"))
            if name is not None and not name.startswith("package"):
                continue        # psys: the whole platform, which holds the packages
            found.append((int(m.group(1)), d))
        if not found:
            self.why = "no RAPL package zone (intel-rapl:N named package-N) under %s" % self.base
            return
        try:
            for _, d in sorted(found):
                self.zones.append((d, self._number(d, "max_energy_range_uj")))
        except _Unreadable as e:
            self.zones, self.why = [], str(e)

    def _number(self, zone, name):
        path = os.path.join(self.base, zone, name)
        try:
            with open(path, encoding="ascii") as f:
                text = f.read()
        except PermissionError:
            raise _Unreadable("RAPL: permission denied reading %s (root only since Linux "
                              "5.10)" % path) from None
        except (OSError, UnicodeDecodeError) as e:
            raise _Unreadable("RAPL: cannot read %s: %s" % (path, getattr(e, "strerror", None)
                                                          or e)) from None
        try:
            return int(text.strip())
        except ValueError:
            raise _Unreadable("RAPL: %s holds %r, not a number" % (path, text.strip()[:40])) \
                from None

    def read(self):
        return {d: self._number(d, "energy_uj") for d, _ in self.zones}

    def joules(self, before, after):
        total = 0
        for d, top in self.zones:
            delta = after[d] - before[d]
            if delta < 0:       # the counter wrapped (once) in between
                delta += top
            total += delta
        return total / 1e6


class _Unreadable(Exception):
    pass


class _Nvml:
    """The GPUs this process sees, through an NVML binding (pynvml): read() gives {index:
    millijoules}."""

    def __init__(self, nvml):
        self.nvml = nvml
        self.handles = {}
        self.why = None
        if nvml is None:
            self.why = "NVML: pynvml is not installed (pip install nvidia-ml-py)"
            return
        try:
            nvml.nvmlInit()
        except Exception as e:
            self.why = "NVML: %s" % (e,)
            return
        try:
            self.handles = self._visible()
            if not self.handles:
                self.why = "NVML: no GPU is visible to this process"
        except _Unreadable as e:
            self.why = str(e)
        except Exception as e:
            self.why = "NVML: %s" % (e,)
        if self.why is not None:
            self.handles = {}
            self.close()

    def _visible(self):
        nvml = self.nvml
        env = os.environ.get("CUDA_VISIBLE_DEVICES")
        if env is None:
            return {i: nvml.nvmlDeviceGetHandleByIndex(i)
                    for i in range(nvml.nvmlDeviceGetCount())}
        out = {}
        for item in [s.strip() for s in env.split(",") if s.strip()]:
            if item.startswith("MIG-"):
                raise _Unreadable("NVML: CUDA_VISIBLE_DEVICES names a MIG instance (%s): "
                                  "NVML counts energy per physical GPU only" % item)
            if item.startswith("GPU-"):
                out[item] = nvml.nvmlDeviceGetHandleByUUID(item)
            else:
                try:
                    out[int(item)] = nvml.nvmlDeviceGetHandleByIndex(int(item))
                except ValueError:
                    break       # CUDA ignores the list from an entry it cannot parse on
        return out

    def read(self):
        try:
            return {k: int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(h))
                    for k, h in self.handles.items()}
        except Exception as e:
            raise _Unreadable("NVML: nvmlDeviceGetTotalEnergyConsumption: %s" % (e,)) from None

    def joules(self, before, after):
        return sum(after[k] - before[k] for k in self.handles) / 1e3

    def close(self):
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass


def _import_pynvml():
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


class EnergyMeter:
    """Energy over an interval: m.start(); ...; j = m.stop() (also `with EnergyMeter() as m`).

    stop() returns the joules of every counter present summed (CPU packages by RAPL, GPUs by
    NVML; see the module docstring), or None when none is.  Afterwards `cpu_j` and `gpu_j` are
    each counter's joules (None where absent) and `why` is None when both were measured, else
    the reasons of the absent ones, "cpu: ...; gpu: ..." (a counter that cannot be read at the
    start or stop is absent with its reason; a partial sum is never given).

    root: where sysfs is read (tests give a fake tree).  nvml: the NVML binding to use, a
    module with pynvml's functions (default: import pynvml; absent without it)."""

    def __init__(self, root="/", nvml=None):
        self.root = root
        self._nvml_module = nvml
        self._started = None
        self.cpu_j = None
        self.gpu_j = None
        self.why = None

    def start(self):
        """Reads the counters now; the sources are found anew at every start."""
        rapl = _Rapl(self.root)
        gpu = _Nvml(self._nvml_module if self._nvml_module is not None else _import_pynvml())
        self._started = []
        for label, src in (("cpu", rapl), ("gpu", gpu)):
            before, why = None, src.why
            if why is None:
                try:
                    before = src.read()
                except _Unreadable as e:
                    why = str(e)
            self._started.append((label, src, before, why))
        return self

    def stop(self):
        """The joules since start() (None when no counter is present); see the class."""
        if self._started is None:
            raise RuntimeError("EnergyMeter.stop() before start()")
        got, whys = {}, []
        for label, src, before, why in self._started:
            if why is None:
                try:
                    got[label] = src.joules(before, src.read())
                except _Unreadable as e:
                    why = str(e)
            if why is not None:
                whys.append("%s: %s" % (label, why))
            if isinstance(src, _Nvml) and src.handles:
                src.close()
        self._started = None
        self.cpu_j, self.gpu_j = got.get("cpu"), got.get("gpu")
        self.why = "; ".join(whys) or None
        return sum(got.values()) if got else None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        if self._started is not None:
            self.stop()
        return False


def cost_per_million(throughput_per_s, price_per_hour):
    """The cost of a million samples at throughput_per_s samples a second on a system priced
    price_per_hour (any currency: the result is in it): price / 3600 / throughput * 1e6.
    None when either is None or NaN, or the throughput is not positive and finite (nothing was
    measured).  A negative price raises ValueError, a value that is not a number TypeError."""
    for name, v in (("throughput_per_s", throughput_per_s), ("price_per_hour", price_per_hour)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Real)):
            raise TypeError("%s must be a number, not %s" % (name, type(v).__name__))
    if throughput_per_s is None or price_per_hour is None:
        return None
    t, p = float(throughput_per_s), float(price_per_hour)
    if math.isnan(t) or math.isnan(p):
        return None
    if p < 0:
        raise ValueError("price_per_hour must not be negative, not %r" % (price_per_hour,))
    if not (t > 0 and math.isfinite(t)):
        return None
    return p / 3600.0 / t * 1e6


__all__ = ["fingerprint", "system_id", "EnergyMeter", "cost_per_million", "SYSTEM_ID_FIELDS"]

if __name__ == "__main__":      # python -m xsp.zoo.system: this machine's fingerprint
    json.dump(fingerprint(), sys.stdout, indent=1)
    print()
