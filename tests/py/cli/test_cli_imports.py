"""What each command of the CLI imports (issue 28: the CLI starts fast; pandas, matplotlib and
torch load only when a command needs them).  Checked on sys.modules in a fresh interpreter, never
on timing: docs/performance.md has the measured times.

Guards against a module-level import of a heavy package creeping into the modules a light
command loads (cli, xsp.report's package, xsp.formats, the values).
"""
import json
import subprocess
import sys

import pytest

import xsp

HEAVY = ("pandas", "matplotlib", "torch")

PROBE = """
import json, runpy, sys
watch = json.loads(sys.argv[2])
sys.argv = ["xsp"] + json.loads(sys.argv[1])
try:
    runpy.run_module("xsp", run_name="__main__")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
sys.stdout.flush()
sys.stderr.write("\\nXSP-PROBE " + json.dumps(
    [code, sorted(m for m in watch if m in sys.modules)]) + "\\n")
"""


def loaded(*args, watch=HEAVY):
    """(exit status, the modules of watch (the heavy packages) in sys.modules after `xsp ARGS`
    ran in a new interpreter)."""
    p = subprocess.run([sys.executable, "-c", PROBE, json.dumps(list(args)),
                        json.dumps(list(watch))], capture_output=True, text=True, timeout=300)
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("XSP-PROBE ")]
    assert line, p.stderr
    code, mods = json.loads(line[-1][len("XSP-PROBE "):])
    return code, mods


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A small saved trace (levels ML, no op inputs, no memory): two steps of a model with a
    layer and two ops each."""
    spans = []
    for k in range(2):
        t = 1000 + k * 10_000
        step = len(spans)
        spans += [
            {"name": "step#%d" % k, "kind": "step", "start_ns": t, "end_ns": t + 9000},
            {"name": "Net", "kind": "model", "start_ns": t + 100, "end_ns": t + 8000,
             "parent": step, "attrs": {"type": "Net"}},
            {"name": "fc", "kind": "module", "start_ns": t + 200, "end_ns": t + 5000,
             "parent": step + 1, "attrs": {"type": "Linear"}},
            {"name": "aten::linear", "kind": "op", "start_ns": t + 300, "end_ns": t + 4800,
             "parent": step + 2},
            {"name": "aten::relu", "kind": "op", "start_ns": t + 5200, "end_ns": t + 7000,
             "parent": step + 1},
        ]
    path = tmp_path_factory.mktemp("cli") / "small.xsp"
    xsp.save(xsp.Trace.from_spans(spans, meta={"levels": "ML", "region": "xsp.profile"}),
             str(path))
    return str(path)


@pytest.fixture(scope="module")
def recorded_with(tmp_path_factory):
    """Two small saved traces of one step: "memory" with each op's allocations
    (profile_memory's mem.cpu.* attributes), "inputs" with those and an addmm's recorded inputs
    (record_shapes' attributes: 2 x 3 @ 3 x 4 plus a bias, float32)."""
    mem = {"mem.cpu.allocs": 1, "mem.cpu.alloc_bytes": 32, "mem.cpu.frees": 0,
           "mem.cpu.freed_bytes": 0, "mem.cpu.peak": 4096, "mem.cpu.total": 4096}
    inputs = {"input_dims": "[[4], [2, 3], [3, 4], [], []]",
              "input_types": '["float", "float", "float", "Scalar", "Scalar"]',
              "input_strides": "[[1], [3, 1], [4, 1], [], []]",
              "concrete_inputs": '["", "", "", "1", "1"]', "overload": "default"}
    out = {}
    for name, attrs in (("memory", mem), ("inputs", dict(mem, **inputs))):
        spans = [{"name": "step#0", "kind": "step", "start_ns": 0, "end_ns": 9000},
                 {"name": "Net", "kind": "model", "start_ns": 100, "end_ns": 8000, "parent": 0,
                  "attrs": {"type": "Net"}},
                 {"name": "fc", "kind": "module", "start_ns": 200, "end_ns": 5000, "parent": 1,
                  "attrs": {"type": "Linear"}},
                 {"name": "aten::addmm", "kind": "op", "start_ns": 300, "end_ns": 4800,
                  "parent": 2, "attrs": attrs}]
        path = tmp_path_factory.mktemp("cli") / (name + ".xsp")
        xsp.save(xsp.Trace.from_spans(spans, meta={"levels": "ML", "region": "xsp.profile"}),
                 str(path))
        out[name] = str(path)
    return out


def test_summary_of_a_trace_with_memory_imports_nothing_heavy(recorded_with):
    """The memory lines are numpy sums over the trace's mem.* columns (issue 28)."""
    assert loaded("summary", recorded_with["memory"]) == (0, [])


def test_summary_loads_no_numpy_ma(small, recorded_with):
    """numpy.ma is about 10 ms of the start (numpy 2 loads it in np.unique's and np.median's
    masked-array checks): the text summary's column keys and medians spare it (issue 28)."""
    for path in (small, recorded_with["memory"]):
        assert loaded("summary", path, watch=["numpy.ma"]) == (0, [])


def test_summary_of_a_trace_with_op_inputs_imports_torch_only(recorded_with):
    """The FLOPs line needs torch (its flop formulas, run on meta tensors rebuilt from the
    recorded inputs: docs/analyses.md); its sums and the memory lines need no pandas."""
    assert loaded("summary", recorded_with["inputs"]) == (0, ["torch"])


def test_help_imports_nothing_heavy():
    assert loaded("--help") == (0, [])


def test_export_imports_nothing_heavy(small, tmp_path):
    assert loaded("export", small, "-o", str(tmp_path / "t.json")) == (0, [])
    assert loaded("export", small, "--format", "kineto",
                  "-o", str(tmp_path / "t.pt.trace.json")) == (0, [])


def test_summary_imports_no_torch_or_matplotlib(small):
    """The text summary of a trace without op inputs: no torch (the FLOPs line, which needs
    torch's formulas, is there only with record_shapes) and no matplotlib (plots are HTML's)."""
    code, mods = loaded("summary", small)
    assert code == 0
    assert "torch" not in mods and "matplotlib" not in mods


def test_summary_imports_no_pandas(small):
    """The text summary's tables are numpy group-bys over the span columns (issue 28)."""
    assert loaded("summary", small) == (0, [])


def test_html_report_imports_no_torch_or_matplotlib(small, tmp_path):
    """The HTML report draws its plots as SVG itself (issue 28: matplotlib's PNGs were most of
    its time)."""
    code, mods = loaded("report", small, "-o", str(tmp_path / "r.html"))
    assert code == 0 and "torch" not in mods and "matplotlib" not in mods


def test_import_xsp_and_the_pytest_plugin_load_nothing_heavy():
    """`import xsp` and the pytest plugin (loaded by every pytest run where xsp is installed)."""
    code = ("import sys, xsp, xsp.pytest_plugin\n"
            "print(sorted(m for m in %r if m in sys.modules))" % (HEAVY,))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    assert out.strip() == "[]"
