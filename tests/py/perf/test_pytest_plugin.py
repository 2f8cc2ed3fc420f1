"""The pytest plugin (xsp.pytest_plugin, docs/pytest.md), run the way users run it: pytest
sessions of a small project made by pytest's own `pytester`.

The inner sessions install the core's fake clock (every clock reading is the previous one plus
a fixed step), so latencies are exact and have no spread: a run with a step of 20 ns is
exactly twice as slow as one with 10 ns, and an unchanged run compares equal to its baseline.
"""
import json
import os
import re
import shutil
import sys
import xml.etree.ElementTree as ET

import pytest

import xsp
from xsp import perf

# pytester's in-process runs drop from sys.modules every module first imported inside them;
# pandas (which xsp imports only when an analysis needs it) would then be imported a second
# time by a later test in this process, over C types of the first import, and break (a
# StringArray assertion in test_cli when it ran after this file).  Imported here, it stays.
import pandas  # noqa: E402,F401
import xsp.analysis  # noqa: E402,F401
import xsp.report  # noqa: E402,F401

# the `slow` tier (pytest -m "not slow" leaves it out): pytest sessions run by pytester
pytestmark = pytest.mark.slow

pytest_plugins = ["pytester"]

CONFTEST = """
import os
import pytest
import torch
from xsp import _core

torch.manual_seed(0)

@pytest.fixture(autouse=True)
def fake_clock():
    step = int(os.environ.get("XSP_TEST_STEP", "0"))
    if step and _core.active_session() is None:
        _core.set_fake_clock(1000, step)
    yield
    if _core.active_session() is None:      # a test that left one recording: the plugin's
        _core.set_fake_clock(0, 0)          # teardown check stops it, and restores below
"""

PROJECT = """
import os
import pytest
import torch
import xsp

model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
x = torch.randn(8, 16)

def train_step():
    y = model(x)
    if os.environ.get("XSP_TEST_EXTRA_RELU"):
        y = torch.relu(y)
    y.sum().backward()

def test_step(xsp_measure):
    m = xsp_measure(train_step, levels="ML", repeat=4, warmup=1)
    assert m.counts["ops_total"] > 0

@pytest.mark.xsp(repeat=3)
def test_marked(xsp_measure):
    m = xsp_measure(train_step, warmup=1)
    assert m.latency.n == 3
"""


@pytest.fixture
def project(pytester, monkeypatch):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_project=PROJECT)
    monkeypatch.setenv("XSP_TEST_STEP", "10")
    monkeypatch.delenv("XSP_TEST_EXTRA_RELU", raising=False)
    return pytester


def results(path):
    with open(path) as f:
        doc = json.load(f)
    assert doc["schema"] == "xsp.pytest-results/1"
    return {r["key"]: r for r in doc["results"]}


def test_entry_point_is_registered():
    from importlib.metadata import entry_points
    eps = [e for e in entry_points(group="pytest11") if e.name == "xsp"]
    assert [e.value for e in eps] == ["xsp.pytest_plugin"]


def test_passing_tests_summary_json_and_junitxml(project):
    r = project.runpytest("-p", "no:cacheprovider", "--xsp-json", "res.json",
                          "--junitxml", "junit.xml")
    r.assert_outcomes(passed=2)
    res = results(project.path / "res.json")
    assert sorted(res) == ["test_project.py::test_marked::train_step",
                           "test_project.py::test_step::train_step"]
    step = res["test_project.py::test_step::train_step"]
    marked = res["test_project.py::test_marked::train_step"]
    assert (step["iterations"], marked["iterations"]) == (4, 3)      # the marker's repeat
    # the fake clock: every iteration takes the same time, so no spread
    assert step["std_ns"] == 0.0 and step["min_ns"] == step["max_ns"] == step["mean_ns"]
    assert step["mean_ns"] == marked["mean_ns"] > 0
    assert step["counts"] == marked["counts"]
    assert step["counts"]["graph_breaks"] == 0 and step["counts"]["kernels"] is None
    assert step["outcome"] == "passed" and step["failures"] == [] and step["baseline"] is None
    # the terminal summary: one row per measurement, latency and spread
    text = r.stdout.str()
    assert "xsp performance (2 measurements)" in text
    row = [ln for ln in r.outlines if ln.startswith("test_project.py::test_step::train_step")]
    assert len(row) == 1
    assert xsp.core.fmt.fmt_ns(step["mean_ns"]) in row[0] and " 4 " in row[0]
    # junitxml: the properties of each measurement
    tree = ET.parse(str(project.path / "junit.xml"))
    case = [c for c in tree.iter("testcase") if c.get("name") == "test_step"][0]
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["xsp.train_step.latency_ns"] == "%.0f" % step["mean_ns"]
    assert props["xsp.train_step.latency_std_ns"] == "0"
    assert props["xsp.train_step.iterations"] == "4"
    assert props["xsp.train_step.ops_total"] == str(step["counts"]["ops_total"])
    assert props["xsp.train_step.bytes_allocated"] == str(step["counts"]["bytes_allocated"])


def test_failing_budget_names_the_offenders(project):
    project.makepyfile(test_budget="""
from test_project import train_step

def test_budget(xsp_measure):
    xsp_measure(train_step, repeat=3, warmup=1,
                budget={"latency": "10 ns", "ops": {"aten::addmm": 1}})
""")
    r = project.runpytest("-p", "no:cacheprovider", "test_budget.py", "--xsp-json", "b.json")
    r.assert_outcomes(failed=1)
    rec = results(project.path / "b.json")["test_budget.py::test_budget::train_step"]
    mean = rec["mean_ns"]
    out = r.stdout.str()
    assert "xsp: budget exceeded: train_step (levels ML, 3 iterations)" in out
    assert ("latency %s ± 0 ns (3 iterations) is over the budget 10 ns by %s"
            % (xsp.core.fmt.fmt_ns(mean), xsp.report.summary.fmt_delta(mean - 10, 10))
            in out)
    assert "aten::addmm: 2 calls per iteration, budget 1 (+1)" in out
    # no baseline: the offenders are where the time goes, largest first
    assert "largest layers (forward):" in out and "largest ops (self time):" in out
    assert re.search(r"^E\s+0 \(Linear\)\s+\S+ \S+\s+\d+\.\d% of the step \(ML run\)", out, re.M)
    assert rec["budget"] == "exceeded" and rec["outcome"] == "failed"
    assert rec["failures"][1] == "aten::addmm: 2 calls per iteration, budget 1 (+1)"
    # the failure artifact: saved, its path printed, and it loads
    saved = [ln.split(" (")[0] for ln in r.outlines if "xsp-failures" in ln
             and ln.endswith(" open it)") or ln.endswith(" reads it)")]
    assert [os.path.splitext(p)[1] for p in saved] == [".json", ".xsp"]
    assert len(xsp.load(saved[1])) > 0
    assert perf.load(saved[0]).latency.mean_ns == mean


def test_baseline_save_then_compare(project, monkeypatch):
    r = project.runpytest("-p", "no:cacheprovider", "--xsp-save-baseline", "base")
    r.assert_outcomes(passed=2)
    files = sorted(os.listdir(project.path / "base"))
    assert len(files) == 4 and [f[-5:] for f in files[::2]] == [".json", ".json"]
    # unchanged: equal to its baseline, to the nanosecond
    r = project.runpytest("-p", "no:cacheprovider", "--xsp-baseline", "base",
                          "--xsp-json", "same.json")
    r.assert_outcomes(passed=2)
    for rec in results(project.path / "same.json").values():
        assert rec["baseline"]["status"] == "ok"
        assert rec["baseline"]["delta_ns"] == 0.0 and rec["baseline"]["count_changes"] == []
    # slowed: the same ops, each clock reading twice as far apart
    monkeypatch.setenv("XSP_TEST_STEP", "20")
    r = project.runpytest("-p", "no:cacheprovider", "--xsp-baseline", "base",
                          "--xsp-json", "slow.json")
    r.assert_outcomes(failed=2)
    rec = results(project.path / "slow.json")["test_project.py::test_step::train_step"]
    assert rec["baseline"]["status"] == "regressed"
    assert rec["baseline"]["delta_share"] == pytest.approx(1.0)
    assert rec["baseline"]["count_changes"] == []
    out = r.stdout.str()
    assert "xsp: slower than its baseline: train_step" in out
    assert "(+100.0%), beyond the noise (0 ns) and the threshold (5%)" in out
    assert "slower than the baseline beyond their noise (per iteration):" in out
    assert re.search(r"layer 0 \(Linear\)\s+\S+ \S+ -> \S+ \S+\s+\+\S+ \S+ \(\+100\.0%\)", out)
    # ... unless the threshold allows it
    r = project.runpytest("-p", "no:cacheprovider", "--xsp-baseline", "base",
                          "--xsp-threshold", "150")
    r.assert_outcomes(passed=2)
    # a changed op count fails, even at the same speed per op
    monkeypatch.setenv("XSP_TEST_STEP", "10")
    monkeypatch.setenv("XSP_TEST_EXTRA_RELU", "1")
    r = project.runpytest("-p", "no:cacheprovider", "--xsp-baseline", "base",
                          "--xsp-threshold", "1000", "--xsp-json", "ops.json")
    r.assert_outcomes(failed=2)
    rec = results(project.path / "ops.json")["test_project.py::test_step::train_step"]
    assert rec["baseline"]["status"] == "counts changed"
    changes = {c["what"]: (c["before"], c["after"]) for c in rec["baseline"]["count_changes"]}
    assert changes["op aten::relu"] == (1, 2) and changes["op aten::clamp_min"] == (1, 2)
    assert changes["ops"][0] != changes["ops"][1]       # the total, which the extra op changed
    assert "xsp: changed from its baseline: train_step" in r.stdout.str()
    assert "op aten::relu: 1 -> 2 per iteration (+1)" in r.stdout.str()
    # ... unless an allowance covers it
    project.makeini("[pytest]\nxsp_threshold = 1000\n")
    project.makepyfile(test_allow="""
import pytest
from test_project import train_step

@pytest.mark.xsp(allow={"ops": 2, "ops_total": 3, "bytes_allocated": "100%",
                        "allocations": 1})
def test_step(xsp_measure):
    xsp_measure(train_step, levels="ML", repeat=4, warmup=1)
""")
    # the allowance test has its own node id: give it test_step's baseline
    key = "test_allow.py::test_step::train_step"
    from xsp.pytest_plugin import _file_name
    shutil.copy(project.path / "base" / [f for f in files if "test_step" in f][0],
                project.path / "base" / (_file_name(key) + ".json"))
    r = project.runpytest("-p", "no:cacheprovider", "--xsp-baseline", "base", "test_allow.py")
    r.assert_outcomes(passed=1)


def test_no_baseline_is_new_and_bad_directory_is_a_usage_error(project):
    os.mkdir(project.path / "empty")
    r = project.runpytest("-p", "no:cacheprovider", "--xsp-baseline", "empty",
                          "--xsp-json", "n.json")
    r.assert_outcomes(passed=2)
    for rec in results(project.path / "n.json").values():
        assert rec["baseline"] is None
        assert rec["baseline_note"] == "no baseline in %s" % (project.path / "empty")
    assert re.search(r"train_step .* new$", r.stdout.str(), re.M)
    r = project.runpytest("-p", "no:cacheprovider", "--xsp-baseline", "nowhere")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert "--xsp-baseline: %s is not a directory" % (project.path / "nowhere") in \
        r.stderr.str()
    r = project.runpytest("-p", "no:cacheprovider", "--xsp-threshold", "fast")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert "--xsp-threshold must be a percentage >= 0, not 'fast'" in r.stderr.str()


def test_hostile_baseline_files_name_file_and_offset(project):
    project.runpytest("-p", "no:cacheprovider", "--xsp-save-baseline", "base",
                      "test_project.py::test_step").assert_outcomes(passed=1)
    path = [p for p in (project.path / "base").iterdir() if p.suffix == ".json"][0]
    good = path.read_bytes()
    path.write_bytes(good[:100])
    r = project.runpytest("-p", "no:cacheprovider", "--xsp-baseline", "base",
                          "test_project.py::test_step")
    r.assert_outcomes(failed=1)
    assert re.search(r"BaselineError: .*%s: byte \d+: malformed JSON" % re.escape(path.name),
                     r.stdout.str())
    doc = json.loads(good)
    doc["counts"]["ops_total"] = "many"
    path.write_text(json.dumps(doc))
    r = project.runpytest("-p", "no:cacheprovider", "--xsp-baseline", "base",
                          "test_project.py::test_step")
    r.assert_outcomes(failed=1)
    assert "not an xsp.perf result: counts.ops_total is not an int >= 0 or null" in \
        r.stdout.str()


def test_profile_fixture_saves_on_failure_and_with_save(project):
    project.makepyfile(test_prof="""
from test_project import train_step, model, x

def test_fails(xsp_profile):
    with xsp_profile(levels="ML") as prof:
        train_step()
    assert len(prof.trace) == 0, "deliberate"

def test_passes(xsp_profile):
    with xsp_profile() as prof:
        model(x)
    assert prof.trace.meta["levels"] == "ML"
""")
    r = project.runpytest("-p", "no:cacheprovider", "test_prof.py")
    r.assert_outcomes(failed=1, passed=1)
    saved = [ln.split(" (")[0] for ln in r.outlines
             if ln.endswith("(a trace: xsp summary, xsp report and xsp.load open it)")]
    assert len(saved) == 1 and "test_prof.py_test_fails_profile0" in saved[0]
    tr = xsp.load(saved[0])
    assert "Sequential" in [s.name for s in tr] and tr.meta["levels"] == "ML"
    r = project.runpytest("-p", "no:cacheprovider", "test_prof.py", "--xsp-save", "all")
    r.assert_outcomes(failed=1, passed=1)
    names = sorted(os.listdir(project.path / "all"))
    assert len(names) == 2 and names[0].startswith("test_prof.py_test_fails_profile0-")
    assert names[1].startswith("test_prof.py_test_passes_profile0-")


def test_profile_left_open_fails_and_the_next_test_is_not_affected(project):
    project.makepyfile(test_leak="""
import xsp
from test_project import train_step

def test_leaks():
    prof = xsp.profile(levels="ML")
    prof.start()
    train_step()

def test_next(xsp_profile):
    with xsp_profile() as prof:
        train_step()
    assert len(prof.trace) > 0
""")
    r = project.runpytest("-p", "no:cacheprovider", "test_leak.py")
    r.assert_outcomes(failed=1, passed=1)
    out = r.stdout.str()
    assert ("test_leak.py::test_leaks left an xsp profile recording (<xsp.profile levels=ML "
            "recording>, made at %s:5): xsp stopped it so that the next test is not affected"
            % (project.path / "test_leak.py")) in out
    assert xsp._core.active_session() is None


def test_marker_misuse_is_a_clear_error(project):
    project.makepyfile(test_bad="""
import pytest
from test_project import train_step

@pytest.mark.xsp(repaet=3)
def test_typo(xsp_measure):
    xsp_measure(train_step)
""")
    r = project.runpytest("-p", "no:cacheprovider", "test_bad.py")
    assert "unknown @pytest.mark.xsp option 'repaet'; options: threshold, levels" in \
        r.stdout.str() + r.stderr.str()


def test_plugin_off_with_p_no_xsp(project):
    r = project.runpytest("-p", "no:cacheprovider", "-p", "no:xsp", "test_project.py")
    r.assert_outcomes(errors=2)
    assert "fixture 'xsp_measure' not found" in r.stdout.str()
    r = project.runpytest("-p", "no:cacheprovider", "-p", "no:xsp", "--xsp-save", "d")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert "unrecognized arguments: --xsp-save" in r.stderr.str()


def test_xdist_two_workers(project):
    if os.environ.get("XSP_TEST_TOOLS") != "1":
        pytest.importorskip("xdist", reason="pytest-xdist is a test tool (make test installs it)")
    project.makepyfile(test_more="""
import os
from test_project import train_step

def test_a(xsp_measure):
    xsp_measure(train_step, repeat=3, warmup=1)

def test_b(xsp_measure):
    xsp_measure(train_step, repeat=3, warmup=1)

def test_c(xsp_profile):
    with xsp_profile() as prof:
        train_step()
    assert len(prof.trace) > 0
""")
    r = project.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--xsp-json",
                                     "x.json", "--xsp-save-baseline", "base")
    r.assert_outcomes(passed=5)
    assert "2 workers" in r.stdout.str()
    res = results(project.path / "x.json")
    assert len(res) == 4
    assert set(rec["worker"] for rec in res.values()) == {"gw0", "gw1"}
    assert len([p for p in os.listdir(project.path / "base") if p.endswith(".json")]) == 4
    assert "xsp performance (4 measurements)" in r.stdout.str()
    # and the baselines written by two workers compare under two workers
    r = project.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--xsp-baseline",
                                     "base", "--xsp-json", "y.json")
    r.assert_outcomes(passed=5)
    assert set(rec["baseline"]["status"] for rec in results(project.path / "y.json").values()) \
        == {"ok"}


def test_two_measurements_in_one_test_are_kept_apart(project):
    project.makepyfile(test_two="""
from test_project import train_step, model, x

def forward():
    model(x)

def test_two(xsp_measure):
    a = xsp_measure(train_step, repeat=3, warmup=1)
    b = xsp_measure(forward, repeat=3, warmup=1)
    c = xsp_measure(forward, repeat=3, warmup=1)
    assert a.counts["ops_total"] > b.counts["ops_total"] == c.counts["ops_total"]
""")
    r = project.runpytest("-p", "no:cacheprovider", "test_two.py", "--xsp-json", "t.json")
    r.assert_outcomes(passed=1)
    assert sorted(results(project.path / "t.json")) == [
        "test_two.py::test_two::forward", "test_two.py::test_two::forward#2",
        "test_two.py::test_two::train_step"]


def test_marker_on_the_class_and_the_closest_wins(project):
    project.makepyfile(test_cls="""
import pytest
from test_project import train_step

@pytest.mark.xsp(repeat=2, levels="M")
class TestSteps:
    def test_class_options(self, xsp_measure):
        m = xsp_measure(train_step, warmup=0)
        assert (m.latency.n, m.data["levels"], m.counts["ops_total"]) == (2, "M", None)

    @pytest.mark.xsp(repeat=3)
    def test_closest(self, xsp_measure):
        m = xsp_measure(train_step, warmup=0)
        assert (m.latency.n, m.data["levels"]) == (3, "M")

    def test_argument_wins(self, xsp_measure):
        m = xsp_measure(train_step, levels="ML", repeat=4, warmup=0)
        assert (m.latency.n, m.data["levels"]) == (4, "ML")
""")
    project.runpytest("-p", "no:cacheprovider", "test_cls.py").assert_outcomes(passed=3)


# -- what a tester broke (each names what it guards against) ----------------------------------
def test_unwritable_output_paths_are_usage_errors(project):
    (project.path / "afile").write_text("x")
    os.mkdir(project.path / "adir")
    for args, words in ((["--xsp-save", "afile/sub"], "--xsp-save: cannot make directory"),
                        (["--xsp-save-baseline", "afile"], "--xsp-save-baseline: %s is not a "
                         "directory" % (project.path / "afile")),
                        (["--xsp-json", "adir"], "--xsp-json: %s is a directory, not a file"
                         % (project.path / "adir")),
                        (["--xsp-json", "afile/r.json"], "--xsp-json: %s is not a directory"
                         % (project.path / "afile"))):
        r = project.runpytest("-p", "no:cacheprovider", *args)
        assert r.ret == pytest.ExitCode.USAGE_ERROR, args
        assert words in r.stderr.str(), args


def test_paths_are_fixed_at_startup_not_by_the_test_s_directory(project, tmp_path):
    """A test that changes directory used to read its baseline from there: 'new', and a
    regression passed."""
    project.makepyfile(test_cd="""
from test_project import train_step

def test_cd(xsp_measure, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    xsp_measure(train_step, repeat=3, warmup=1)
""")
    project.runpytest("-p", "no:cacheprovider", "test_cd.py", "--xsp-save-baseline",
                      "base").assert_outcomes(passed=1)
    assert len(os.listdir(project.path / "base")) == 2
    r = project.runpytest("-p", "no:cacheprovider", "test_cd.py", "--xsp-baseline", "base",
                          "--xsp-json", "cd.json")
    r.assert_outcomes(passed=1)
    assert results(project.path / "cd.json")["test_cd.py::test_cd::train_step"][
        "baseline"]["status"] == "ok"
    # ini paths are relative to the ini file, wherever pytest starts
    project.makeini("[pytest]\nxsp_json = from_ini.json\n")
    os.mkdir(project.path / "sub")
    sub = project.path / "sub"
    old = os.getcwd()
    os.chdir(sub)
    try:
        r = project.runpytest("-p", "no:cacheprovider", str(project.path / "test_cd.py"),
                              "--rootdir", str(project.path), "-c",
                              str(project.path / "tox.ini"))
    finally:
        os.chdir(old)
    r.assert_outcomes(passed=1)
    assert (project.path / "from_ini.json").exists() and not (sub / "from_ini.json").exists()


def test_bad_baseline_files_fail_clearly_and_are_replaced(project):
    project.runpytest("-p", "no:cacheprovider", "--xsp-save-baseline", "base",
                      "test_project.py::test_step").assert_outcomes(passed=1)
    path = [p for p in (project.path / "base").iterdir() if p.suffix == ".json"][0]
    good = json.loads(path.read_text())
    cases = []
    doc = json.loads(json.dumps(good))
    doc["latency"]["samples_ns"][0] = float("nan")
    cases.append((json.dumps(doc), "NaN is not JSON"))
    doc = json.loads(json.dumps(good))
    doc["latency"]["samples_ns"] = [float("inf")] * len(good["latency"]["samples_ns"])
    cases.append((json.dumps(doc), "Infinity is not JSON"))
    doc = json.loads(json.dumps(good))
    doc["latency"]["n"] = 50
    cases.append((json.dumps(doc), "latency.n is not the number of samples (4)"))
    doc = json.loads(json.dumps(good))
    del doc["counts"]["syncs"]
    cases.append((json.dumps(doc), "counts.syncs is missing"))
    doc = json.loads(json.dumps(good))
    doc["machine"] = []
    cases.append((json.dumps(doc), "machine is not an object"))
    doc = json.loads(json.dumps(good))
    doc["times"]["ops"] = {"aten::mm": [1.0]}
    cases.append((json.dumps(doc), "times.ops is not an object of lists of 4 finite numbers"))
    doc = json.loads(json.dumps(good))
    doc["zz"] = json.loads("[" * 800 + "]" * 800)
    cases.append((json.dumps(doc), "nested too deeply"))
    for text, words in cases:
        path.write_text(text)
        r = project.runpytest("-p", "no:cacheprovider", "--xsp-baseline", "base",
                              "test_project.py::test_step", "--xsp-json", "bad.json")
        r.assert_outcomes(failed=1)
        assert words in r.stdout.str(), words
        assert "BaselineError: %s: " % path in r.stdout.str(), words
        rec = results(project.path / "bad.json")["test_project.py::test_step::train_step"]
        assert rec["status"] == "bad baseline" and words in rec["failures"][0]
    # a directory in its place: not read as a file
    path.unlink()
    os.mkdir(path)
    r = project.runpytest("-p", "no:cacheprovider", "--xsp-baseline", "base",
                          "test_project.py::test_step")
    r.assert_outcomes(failed=1)
    assert "%s: not a regular file (a directory)" % path in r.stdout.str()
    os.rmdir(path)
    # comparing with and saving into one directory replaces a bad file with this run's
    path.write_text("{")
    r = project.runpytest("-p", "no:cacheprovider", "--xsp-baseline", "base",
                          "--xsp-save-baseline", "base", "test_project.py::test_step")
    r.assert_outcomes(failed=1)
    assert perf.load(str(path)).latency.n == 4
    project.runpytest("-p", "no:cacheprovider", "--xsp-baseline", "base",
                      "test_project.py::test_step").assert_outcomes(passed=1)


def test_a_run_that_failed_against_its_baseline_does_not_replace_it(project, monkeypatch):
    project.runpytest("-p", "no:cacheprovider", "--xsp-save-baseline", "base",
                      "test_project.py::test_step").assert_outcomes(passed=1)
    path = [p for p in (project.path / "base").iterdir() if p.suffix == ".json"][0]
    before = path.read_text()
    monkeypatch.setenv("XSP_TEST_STEP", "20")
    r = project.runpytest("-p", "no:cacheprovider", "--xsp-baseline", "base",
                          "--xsp-save-baseline", "base", "test_project.py::test_step")
    r.assert_outcomes(failed=1)
    assert path.read_text() == before
    assert "the baseline %s was kept: this run failed against it" % path in r.stdout.str()
    # again: it still fails (the regression was not laundered into the baseline)
    project.runpytest("-p", "no:cacheprovider", "--xsp-baseline", "base",
                      "test_project.py::test_step").assert_outcomes(failed=1)


def test_profile_left_open_by_a_fixture_fails_its_teardown(project):
    project.makepyfile(test_fx="""
import pytest
import xsp
from test_project import train_step

@pytest.fixture
def leaky():
    p = xsp.profile(levels="ML")
    p.start()
    yield p

def test_uses_it(leaky):
    train_step()

def test_next(xsp_measure):
    xsp_measure(train_step, repeat=2, warmup=0)
""")
    r = project.runpytest("-p", "no:cacheprovider", "test_fx.py")
    r.assert_outcomes(passed=2, errors=1)
    out = r.stdout.str()
    assert "ERROR at teardown of test_uses_it" in out
    assert ("test_fx.py::test_uses_it left an xsp profile recording after its fixtures' "
            "teardown (<xsp.profile levels=ML recording>, made at %s:7)"
            % (project.path / "test_fx.py")) in out


def test_fn_that_runs_torch_profiler_is_measured_without_the_allocation_count(project):
    project.makepyfile(test_tp="""
import torch
from test_project import train_step

def fn():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        train_step()

def test_tp(xsp_measure):
    m = xsp_measure(fn, repeat=2, warmup=1)
    assert m.counts["bytes_allocated"] is None and m.counts["ops_total"] > 0
    assert "torch.profiler itself" in m.data["unmeasured"]["bytes_allocated"]
""")
    # in a subprocess: torch.profiler imports modules that register torch libraries, which a
    # second in-process session (pytester drops the modules it imported) would register again
    project.runpytest_subprocess("-p", "no:cacheprovider", "test_tp.py").assert_outcomes(
        passed=1)


def test_names_never_collide_and_check_failures_reach_the_summary(project):
    project.makepyfile(test_nm="""
from test_project import train_step

def test_names(xsp_measure):
    xsp_measure(train_step, repeat=2, warmup=0)
    xsp_measure(train_step, repeat=2, warmup=0)
    xsp_measure(train_step, repeat=2, warmup=0, name="train_step#2")

def test_check(xsp_measure):
    m = xsp_measure(train_step, repeat=2, warmup=0)
    m.check(ops=1)

def test_other_failure(xsp_measure):
    xsp_measure(train_step, repeat=2, warmup=0)
    assert False
""")
    r = project.runpytest("-p", "no:cacheprovider", "test_nm.py", "--xsp-json", "n.json")
    r.assert_outcomes(passed=1, failed=2)
    res = results(project.path / "n.json")
    assert sorted(k for k in res if "test_names" in k) == [
        "test_nm.py::test_names::train_step", "test_nm.py::test_names::train_step#2",
        "test_nm.py::test_names::train_step#2#2"]
    chk = res["test_nm.py::test_check::train_step"]
    assert (chk["budget"], chk["status"]) == ("exceeded", "budget exceeded")
    assert chk["failures"][0].startswith("ops: ") and "budget 1" in chk["failures"][0]
    assert re.search(r"test_check::train_step .* budget exceeded$", r.stdout.str(), re.M)
    assert re.search(r"test_other_failure::train_step .* test failed$", r.stdout.str(), re.M)


def test_marker_values_checked_before_measuring_and_dicts_merged(project):
    project.makepyfile(test_mk="""
import pytest
from test_project import train_step

pytestmark = pytest.mark.xsp(budget={"ops": 1}, allow={"ops": 1})

class TestMerged:
    pytestmark = pytest.mark.xsp(budget={"latency": "10 s"})

    def test_merged(self, xsp_measure):
        xsp_measure(train_step, repeat=2, warmup=0)     # the module's ops budget still holds

@pytest.mark.xsp(threshold="abc")
def test_bad_threshold(xsp_measure):
    xsp_measure(train_step)

@pytest.mark.xsp(allow={"opz": 1})
def test_bad_allow(xsp_measure):
    xsp_measure(train_step)

def test_bad_budget(xsp_measure):
    xsp_measure(train_step, budget={"latncy": "1 ms"})
""")
    r = project.runpytest("-p", "no:cacheprovider", "test_mk.py", "--xsp-json", "m.json")
    out = r.stdout.str()
    assert "ops: " in out and "per iteration, budget 1" in out
    assert "test_mk.py::test_bad_threshold: @pytest.mark.xsp: threshold must be a percentage " \
        ">= 0, not 'abc'" in out
    assert "test_mk.py::test_bad_allow: @pytest.mark.xsp: unknown allowance 'opz'" in out
    assert "test_mk.py::test_bad_budget: xsp_measure: unknown budget 'latncy'" in out
    # the three misuses were refused before anything was measured
    assert sorted(results(project.path / "m.json")) == [
        "test_mk.py::TestMerged::test_merged::train_step"]
