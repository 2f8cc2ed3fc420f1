"""xsp.zoo.system: the fingerprint read from a fake /proc and /etc tree (exact values), the
system_id's stability, RAPL energy on a fake powercap tree (two packages, sub-zones and psys
left out, wraparound, unreadable and missing counters: exact joules and reasons), NVML absent
here (its reason exactly) and its arithmetic through a fake binding, and cost_per_million."""
import builtins
import os
import platform
import sys
import types

import pytest

from xsp._version import __version__ as XSP_VERSION
from xsp.zoo import system
from xsp.zoo.system import EnergyMeter, cost_per_million, fingerprint

NO_NVML = "gpu: NVML: pynvml is not installed (pip install nvidia-ml-py)"


def write(root, rel, text):
    path = os.path.join(str(root), rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with builtins.open(path, "w") as f:
        f.write(text)
    return path


CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
physical id\t: 0

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+

processor\t: 2
model name\t: Intel(R) Xeon(R) Platinum 8480+

processor\t: 3
model name\t: Intel(R) Xeon(R) Platinum 8480+
"""


def fake_machine(root, hostname="node-7", cpus_allowed="0-1,3"):
    write(root, "proc/cpuinfo", CPUINFO)
    write(root, "proc/meminfo", "MemTotal:       16777216 kB\nMemFree:  1 kB\n")
    write(root, "proc/self/status", "Name:\tpython\nCpus_allowed_list:\t%s\n" % cpus_allowed)
    write(root, "proc/sys/kernel/hostname", hostname + "\n")
    write(root, "proc/sys/kernel/osrelease", "6.1.0-18-amd64\n")
    write(root, "etc/os-release", 'NAME="Debian GNU/Linux"\nPRETTY_NAME="Debian GNU/Linux 12 '
          '(bookworm)"\nID=debian\n')


def fake_torch(cuda=False, threads=8, interop=4):
    """A stand-in for the torch module with what fingerprint asks of it."""
    props = types.SimpleNamespace(total_memory=80 * 2 ** 30, major=9, minor=0)
    cuda_ns = types.SimpleNamespace(
        is_available=lambda: cuda, device_count=lambda: 2,
        get_device_name=lambda i: ["NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"][i],
        get_device_properties=lambda i: props)
    return types.SimpleNamespace(
        __version__="2.13.0+cu130" if cuda else "2.13.0+cpu",
        version=types.SimpleNamespace(cuda="13.0" if cuda else None),
        get_num_threads=lambda: threads, get_num_interop_threads=lambda: interop,
        cuda=cuda_ns,
        backends=types.SimpleNamespace(cudnn=types.SimpleNamespace(version=lambda: 91002)))


def test_fingerprint_of_a_fake_tree_exact(tmp_path):
    fake_machine(tmp_path)
    fp = fingerprint(root=tmp_path, torch=fake_torch())
    sid = fp.pop("system_id")
    assert fp == {
        "hostname": "node-7", "arch": platform.machine(),
        "cpu_model": "Intel(R) Xeon(R) Platinum 8480+", "cpu_count": 4, "cpu_affinity": 3,
        "memory_bytes": 16 * 2 ** 30, "memory_gib": 16,
        "os": "Debian GNU/Linux 12 (bookworm)", "kernel": "6.1.0-18-amd64",
        "python": platform.python_version(), "torch_version": "2.13.0+cpu", "torch_cuda": None,
        "xsp_version": XSP_VERSION, "torch_threads": 8, "torch_interop_threads": 4,
        "gpu_count": None, "gpu_name": None, "gpu_names": None, "gpu_memory_bytes": None,
        "gpu_capability": None, "cudnn_version": None, "gpu_driver": None,
        "gpu_why": "torch.cuda.is_available() is False (a CPU build of torch: "
                   "torch.version.cuda is None)"}
    assert len(sid) == system.SYSTEM_ID_LEN and int(sid, 16) >= 0
    assert sid == system.system_id(fp)


def test_fingerprint_gpu_fields_through_torch_cuda(tmp_path):
    fake_machine(tmp_path)
    write(tmp_path, "proc/driver/nvidia/version",
          "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build\n"
          "GCC version:  gcc version 12.2.0\n")
    fp = fingerprint(root=tmp_path, torch=fake_torch(cuda=True))
    got = {k: fp[k] for k in fp if k.startswith(("gpu", "cudnn", "torch_"))}
    assert got == {"torch_version": "2.13.0+cu130", "torch_cuda": "13.0", "torch_threads": 8,
                   "torch_interop_threads": 4, "gpu_count": 2,
                   "gpu_name": "NVIDIA H100 80GB HBM3",
                   "gpu_names": "NVIDIA H100 80GB HBM3; NVIDIA H100 PCIe",
                   "gpu_memory_bytes": 80 * 2 ** 30, "gpu_capability": "9.0",
                   "cudnn_version": 91002, "gpu_driver": "580.65.06", "gpu_why": None}
    assert fp["system_id"] != fingerprint(root=tmp_path, torch=fake_torch())["system_id"]


def test_system_id_keeps_to_the_fields_that_define_the_machine(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    fake_machine(a)
    fake_machine(b, hostname="node-8", cpus_allowed="0")     # another host, another taskset
    fake_machine(c)
    write(c, "proc/cpuinfo", CPUINFO.replace("8480+", "8468"))
    sid = fingerprint(root=a, torch=fake_torch())["system_id"]
    assert fingerprint(root=a, torch=fake_torch())["system_id"] == sid       # stable
    # the host's name, the affinity and torch's thread counts vary per node and run: the
    # same system
    assert fingerprint(root=b, torch=fake_torch(threads=1, interop=1))["system_id"] == sid
    assert fingerprint(root=c, torch=fake_torch())["system_id"] != sid       # another CPU
    assert "hostname" not in system.SYSTEM_ID_FIELDS


def test_fingerprint_of_an_empty_tree_is_nones_not_errors(tmp_path):
    fp = fingerprint(root=tmp_path, torch=fake_torch())
    for k in ("hostname", "cpu_model", "cpu_count", "cpu_affinity", "memory_bytes",
              "memory_gib", "os", "kernel", "gpu_count", "gpu_driver"):
        assert fp[k] is None, k
    assert fp["torch_threads"] == 8 and len(fp["system_id"]) == 12


def test_fingerprint_of_this_machine():
    import torch
    fp = fingerprint()
    assert fp["torch_version"] == torch.__version__ and fp["torch_cuda"] == torch.version.cuda
    assert fp["cpu_count"] >= 1 and 1 <= fp["cpu_affinity"] <= fp["cpu_count"]
    assert fp["memory_bytes"] > 0 and fp["torch_threads"] == torch.get_num_threads()
    assert fp["python"] == platform.python_version()
    if not torch.cuda.is_available():
        assert fp["gpu_count"] is None and fp["gpu_name"] is None and fp["gpu_driver"] is None
        assert fp["gpu_why"].startswith("torch.cuda.is_available() is False")
    assert fp["system_id"] == fingerprint()["system_id"]


# -- RAPL ---------------------------------------------------------------------------------

MAX = 262143328850      # a real max_energy_range_uj


def zone(root, name, label, energy, top=MAX):
    d = os.path.join(str(root), "sys/class/powercap", name)
    write(d, "name", label + "\n")
    write(d, "energy_uj", "%d\n" % energy)
    write(d, "max_energy_range_uj", "%d\n" % top)
    return d


def set_energy(zone_dir, uj):
    write(zone_dir, "energy_uj", "%d\n" % uj)


@pytest.fixture
def no_pynvml(monkeypatch):
    """NVML absent whatever is installed: `import pynvml` raises ImportError."""
    monkeypatch.setitem(sys.modules, "pynvml", None)


def test_rapl_two_packages_with_wraparound_subzones_left_out(tmp_path, no_pynvml):
    p0 = zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000)
    core = zone(tmp_path, "intel-rapl:0:0", "core", 5_000)
    p1 = zone(tmp_path, "intel-rapl:1", "package-1", MAX - 1_000_000)
    psys = zone(tmp_path, "intel-rapl:2", "psys", 0)
    mmio = zone(tmp_path, "intel-rapl-mmio:0", "package-0", 0)
    m = EnergyMeter(root=tmp_path).start()
    set_energy(p0, 3_500_000)           # +2.5 J
    set_energy(p1, 500_000)             # wrapped: +1.0 J + 0.5 J
    for d in (core, psys, mmio):        # inside a package, or the whole platform: not counted
        set_energy(d, 99_000_000)
    assert m.stop() == 4.0
    assert (m.cpu_j, m.gpu_j) == (4.0, None)
    assert m.why == NO_NVML


def test_rapl_reads_anew_at_each_start(tmp_path, no_pynvml):
    p0 = zone(tmp_path, "intel-rapl:0", "package-0", 0)
    m = EnergyMeter(root=tmp_path)
    with m:
        set_energy(p0, 250_000)
    assert m.cpu_j == 0.25
    m.start()
    set_energy(p0, 1_250_000)
    assert m.stop() == 1.0
    with pytest.raises(RuntimeError, match=r"^EnergyMeter.stop\(\) before start\(\)$"):
        m.stop()


def test_rapl_missing_dir_and_no_package_zone(tmp_path, no_pynvml):
    m = EnergyMeter(root=tmp_path).start()
    assert m.stop() is None and m.cpu_j is None
    assert m.why == "cpu: no RAPL: %s/sys/class/powercap does not exist; %s" % (tmp_path, NO_NVML)
    zone(tmp_path, "intel-rapl:0:0", "core", 0)
    zone(tmp_path, "intel-rapl:1", "psys", 0)
    m = EnergyMeter(root=tmp_path).start()
    assert m.stop() is None
    assert m.why == ("cpu: no RAPL package zone (intel-rapl:N named package-N) under "
                     "%s/sys/class/powercap; %s" % (tmp_path, NO_NVML))


def test_rapl_unreadable_counter_is_absent_never_partial(tmp_path, no_pynvml):
    zone(tmp_path, "intel-rapl:0", "package-0", 0)
    p1 = zone(tmp_path, "intel-rapl:1", "package-1", 0)
    os.unlink(os.path.join(p1, "energy_uj"))
    os.mkdir(os.path.join(p1, "energy_uj"))          # unreadable even for root
    m = EnergyMeter(root=tmp_path).start()
    assert m.stop() is None and m.cpu_j is None
    assert m.why == "cpu: RAPL: cannot read %s/energy_uj: Is a directory; %s" % (p1, NO_NVML)


def test_rapl_counter_gone_at_stop(tmp_path, no_pynvml):
    p0 = zone(tmp_path, "intel-rapl:0", "package-0", 0)
    m = EnergyMeter(root=tmp_path).start()
    write(p0, "energy_uj", "garbage\n")
    assert m.stop() is None
    assert m.why == "cpu: RAPL: %s/energy_uj holds 'garbage', not a number; %s" % (p0, NO_NVML)


def test_rapl_permission_denied_says_so(tmp_path, no_pynvml, monkeypatch):
    # energy_uj is root-only since Linux 5.10; the tests run as root, so the refusal comes
    # from an open() that refuses it (the module's own name lookup finds it first)
    p0 = zone(tmp_path, "intel-rapl:0", "package-0", 0)

    def refusing(path, *a, **k):
        if str(path).endswith("energy_uj"):
            raise PermissionError(13, "Permission denied", str(path))
        return builtins.open(path, *a, **k)

    monkeypatch.setattr(system, "open", refusing, raising=False)
    m = EnergyMeter(root=tmp_path).start()
    assert m.stop() is None
    assert m.why == ("cpu: RAPL: permission denied reading %s/energy_uj (root only since "
                     "Linux 5.10); %s" % (p0, NO_NVML))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file of mode 0400 anyway")
def test_rapl_permission_denied_for_real(tmp_path, no_pynvml):
    p0 = zone(tmp_path, "intel-rapl:0", "package-0", 0)
    os.chmod(os.path.join(p0, "energy_uj"), 0)
    m = EnergyMeter(root=tmp_path).start()
    assert m.stop() is None and "permission denied reading" in m.why


# -- NVML ---------------------------------------------------------------------------------

def test_nvml_absent_here(tmp_path, no_pynvml):
    m = EnergyMeter(root=tmp_path).start()
    assert m.stop() is None and m.gpu_j is None
    assert m.why.split("; ")[1] == NO_NVML


class FakeNvml:
    """The five NVML calls the meter makes, over a dict of millijoule counters by index."""

    class NVMLError(Exception):
        pass

    def __init__(self, mj, uuids=(), init_error=None):
        self.mj = dict(mj)
        self.uuids = list(uuids)
        self.init_error = init_error
        self.inits = self.shutdowns = 0

    def nvmlInit(self):
        if self.init_error:
            raise self.NVMLError(self.init_error)
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return len(self.mj)

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("h", i)

    def nvmlDeviceGetHandleByUUID(self, u):
        return ("h", self.uuids.index(u))

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return self.mj[h[1]]


def test_nvml_sums_the_visible_gpus_in_joules(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nv = FakeNvml({0: 10_000, 1: 20_000})
    m = EnergyMeter(root=tmp_path, nvml=nv).start()
    nv.mj = {0: 10_500, 1: 21_250}          # +0.5 J, +1.25 J
    assert m.stop() == 1.75 and m.gpu_j == 1.75
    assert m.why == "cpu: no RAPL: %s/sys/class/powercap does not exist" % tmp_path
    assert (nv.inits, nv.shutdowns) == (1, 1)
    # with CUDA_VISIBLE_DEVICES: only the GPUs it names (Ray's one GPU per task)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    m = EnergyMeter(root=tmp_path, nvml=nv).start()
    nv.mj = {0: 99_000, 1: 21_500}
    assert m.gpu_j is None and m.stop() == 0.25
    nv.uuids = ["GPU-aaaa", "GPU-bbbb"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa")
    m = EnergyMeter(root=tmp_path, nvml=nv).start()
    nv.mj = {0: 100_000, 1: 0}
    assert m.stop() == 1.0


def test_nvml_with_rapl_gives_the_sum_and_no_reason(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    p0 = zone(tmp_path, "intel-rapl:0", "package-0", 0)
    nv = FakeNvml({0: 0})
    m = EnergyMeter(root=tmp_path, nvml=nv).start()
    set_energy(p0, 2_000_000)
    nv.mj = {0: 3_000}
    assert m.stop() == 5.0 and (m.cpu_j, m.gpu_j, m.why) == (2.0, 3.0, None)


def test_nvml_absent_for_its_reasons(tmp_path, monkeypatch):
    def why(nv):
        m = EnergyMeter(root=tmp_path, nvml=nv).start()
        m.stop()
        return m.why.split("; ")[1]

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert why(FakeNvml({}, init_error="Driver Not Loaded")) == "gpu: NVML: Driver Not Loaded"
    assert why(FakeNvml({})) == "gpu: NVML: no GPU is visible to this process"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    nv = FakeNvml({0: 0})
    assert why(nv) == "gpu: NVML: no GPU is visible to this process"
    assert nv.shutdowns == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-1234")
    assert why(FakeNvml({0: 0})) == ("gpu: NVML: CUDA_VISIBLE_DEVICES names a MIG instance "
                                     "(MIG-1234): NVML counts energy per physical GPU only")

    class Unsupported(FakeNvml):
        def nvmlDeviceGetTotalEnergyConsumption(self, h):
            raise self.NVMLError("Not Supported")

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert why(Unsupported({0: 0})) == \
        "gpu: NVML: nvmlDeviceGetTotalEnergyConsumption: Not Supported"


# -- cost ---------------------------------------------------------------------------------

def test_cost_per_million():
    assert cost_per_million(1000, 3.6) == 1.0           # 0.001 an s, 1000 samples an s
    assert cost_per_million(2000.0, 7.2) == 1.0
    assert cost_per_million(1000, 0) == 0.0
    for t, p in ((None, 1.0), (100.0, None), (0, 1.0), (-5.0, 1.0), (float("nan"), 1.0),
                 (float("inf"), 1.0), (10.0, float("nan"))):
        assert cost_per_million(t, p) is None, (t, p)
    with pytest.raises(ValueError, match=r"^price_per_hour must not be negative, not -1$"):
        cost_per_million(10.0, -1)
    with pytest.raises(TypeError, match=r"^price_per_hour must be a number, not str$"):
        cost_per_million(10.0, "3")
    with pytest.raises(TypeError, match=r"^throughput_per_s must be a number, not bool$"):
        cost_per_million(True, 3)
