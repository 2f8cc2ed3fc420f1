"""The command line end to end: `python -m xsp run` profiles a real script (a CPU ResNet-style
model, forward and backward, two steps) in a child process; summary, export, report and compare
then read what it wrote.  Errors are one line with a non-zero status."""
import json
import os
import subprocess
import sys
import textwrap
from html.parser import HTMLParser

import pytest

import xsp
from xsp import cli

# the `slow` tier (pytest -m "not slow" leaves it out): every test runs `xsp` in child processes
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

SCRIPT = textwrap.dedent("""
    import sys
    import torch
    import xsp
    from xsp import models
    torch.manual_seed(0)
    model, x = models.get("resnet", batch=2)
    for i in range(int(sys.argv[1])):
        model(x).sum().backward()
        xsp.step()
    print("script args", sys.argv[1:])
    if len(sys.argv) > 2:
        raise SystemExit(int(sys.argv[2]))
""")


def xsp_cmd(*args, cwd):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "xsp", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    (d / "train.py").write_text(SCRIPT)
    r = xsp_cmd("run", "--levels", "ML", "-o", "a.xsp", "--chrome", "a.json", "--html",
                "a.html", "--top", "3", "train.py", "2", cwd=d)
    return d, r


def test_run_profiles_the_script(ran):
    d, r = ran
    assert r.returncode == 0, r.stderr
    assert r.stdout == "script args ['2']\n"          # the script's own output, untouched
    assert "xsp report: train.py" in r.stderr and "Top 3 layers" in r.stderr
    assert r.stderr.rstrip().endswith("trace: a.xsp, chrome: a.json, html: a.html")
    tr = xsp.load(str(d / "a.xsp"))
    assert tr.meta["levels"] == "ML" and tr.meta["region"] == "train.py"
    assert [s.name for s in tr.spans(kind="step")] == ["step#0", "step#1"]
    assert len(tr.spans(kind="model")) == 2
    assert {s.name for s in tr.spans(kind="module")} >= {"conv1", "layer1.0.conv1", "fc"}
    assert len(tr.spans(kind="backward")) > 0
    ev = json.loads((d / "a.json").read_text())["traceEvents"]
    assert sum(1 for e in ev if e.get("ph") == "X") == len(tr)


class Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.text, self.imgs = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "img":
            self.imgs.append(dict(attrs))

    def handle_data(self, data):
        self.text.append(data.strip())


def test_run_html_report(ran):
    d, _ = ran
    p = Tags()
    p.feed((d / "a.html").read_text())
    assert p.tags[0] == "html" and "table" in p.tags
    assert "xsp report: train.py" in p.text and "Top 3 layers" in p.text
    # latency per iteration, top layers, layer types, top ops: inline SVG, no PNG
    html = (d / "a.html").read_text()
    assert p.imgs == [] and html.count("<figure><svg") == 4


def test_summary_export_report_compare(ran, tmp_path, capsys):
    d, _ = ran
    trace = str(d / "a.xsp")
    assert cli.main(["summary", trace, "--top", "2", "--tree", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("xsp report: train.py\nlevels ML,")
    assert "Top 2 layers" in out
    tree = out[out.index("\nTree of iteration "):].splitlines()[2:]
    assert tree[0].startswith("step#")
    # the model once among the step's children; whether it is the last one shown depends on
    # timing (children under 1% of the step are hidden, and a slow first step, e.g. on a
    # loaded machine, hides the backward nodes after it)
    assert sum(ln.startswith(("├─ TinyResNet [model]", "└─ TinyResNet [model]"))
               for ln in tree) == 1
    assert len(tree) <= 61
    assert cli.main(["export", trace, "-o", str(tmp_path / "t.json")]) == 0
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert cli.main(["report", trace, "-o", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert cli.main(["compare", trace, trace, "--top", "4"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "xsp compare: %s -> %s" % (trace, trace)
    step = [ln for ln in lines if ln.split()[:1] == ["step"]]
    assert len(step) == 1 and "+0 ns (+0.0%)" in step[0] and step[0].endswith("within noise")
    i = lines.index("Layers (leaf modules matched by name and type, time per iteration; "
                    "called changes first)")
    assert lines[i + 1].split() == ["name", "type", "pass", "before", "after", "change",
                                    "noise", "verdict"]
    assert all("+0 ns (+0.0%)" in ln and ln.endswith("within noise")
               for ln in lines[i + 2:i + 6])
    assert lines[i + 6].startswith("  ... ")


def test_compare_shows_the_regression(tmp_path, capsys):
    from helpers import sibling
    S = sibling("analysis", "test_analysis").S
    def tr(fc1):
        return xsp.Trace.from_spans([
            S("prof", "region", 0, 1000), S("Net", "model", 0, 1000, 0, type="Net"),
            S("fc1", "module", 10, 10 + fc1, 1, type="Linear"),
            S("act", "module", 600, 700, 1, type="ReLU")], meta={"levels": "ML"})
    xsp.save(tr(300), str(tmp_path / "before.xsp"))
    xsp.save(tr(450), str(tmp_path / "after.xsp"))
    assert cli.main(["compare", str(tmp_path / "before.xsp"), str(tmp_path / "after.xsp")]) == 0
    out = capsys.readouterr().out.splitlines()
    i = out.index("Layers (leaf modules matched by name and type, time per iteration; "
                  "called changes first)")
    # one iteration (the model call) per run: the spread is unknown, nothing is called
    assert out[i + 2].split() == ["fc1", "Linear", "forward", "300", "ns", "450", "ns", "+150",
                                  "ns", "(+50.0%)", "-", "no", "spread", "(1", "iteration)"]
    assert out[i + 3].split() == ["act", "ReLU", "forward", "100", "ns", "100", "ns", "+0",
                                  "ns", "(+0.0%)", "-", "no", "spread", "(1", "iteration)"]
    c = xsp.report.compare(xsp.load(str(tmp_path / "before.xsp")),
                           xsp.load(str(tmp_path / "after.xsp")))
    assert c.layers[["name", "before_ns", "after_ns", "delta_ns", "delta_share"]].values.tolist() \
        == [["fc1", 300.0, 450.0, 150.0, 0.5], ["act", 100.0, 100.0, 0.0, 0.0]]
    assert len(c.kernels) == 0


def test_script_status_and_failure_keep_the_trace(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    r = xsp_cmd("run", "-q", "train.py", "1", "3", cwd=tmp_path)
    assert r.returncode == 3 and r.stderr == ""
    assert len(xsp.load(str(tmp_path / "train.xsp")).spans(kind="step")) == 1
    (tmp_path / "boom.py").write_text("import torch\ntorch.ones(2).sum()\nraise KeyError('x')\n")
    r = xsp_cmd("run", "boom.py", cwd=tmp_path)
    assert r.returncode == 1 and "KeyError: 'x'" in r.stderr
    assert xsp.load(str(tmp_path / "boom.xsp")).spans(name="aten::sum")


EXIT_SCRIPT = textwrap.dedent("""
    import os, sys, threading, torch
    with torch.profiler.record_function("before exit"):
        torch.ones(3).sum()
    if sys.argv[1] == "fork":                   # a child that ends with os._exit, as workers do
        pid = os.fork()
        if pid == 0:
            torch.ones(4).sum()
            os._exit(7)
        print("child", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    if sys.argv[1] == "thread":
        threading.Thread(target=os._exit, args=(4,)).start()
        threading.Event().wait()
    if sys.argv[1] == "posix":                  # the same function under its module's name
        import posix
        posix._exit(6)
    try:
        print("leaving", flush=True)
        os._exit(3)
    finally:
        print("a finally block that os._exit skips", flush=True)
""")


def test_run_of_a_script_that_ends_with_os_exit(tmp_path):
    """Regression guard (bug: a script ending with os._exit(n) under xsp run kept its status
    but wrote no trace and said nothing).  The trace is written before the real os._exit, whose
    status is kept and which still skips the script's cleanup; on a thread of the script's own
    nothing can be written, and stderr says so; a forked child's os._exit is the plain one."""
    (tmp_path / "ex.py").write_text(EXIT_SCRIPT)
    r = xsp_cmd("run", "--top", "1", "ex.py", "main", cwd=tmp_path)
    assert r.returncode == 3, r.stderr
    assert r.stdout == "leaving\n"
    assert r.stderr.splitlines()[-2:] == [
        "trace: ex.xsp", "xsp run: the script called os._exit(3): the trace was written "
        "before exiting"]
    assert [s.kind for s in xsp.load(str(tmp_path / "ex.xsp")).spans(name="before exit")] == [
        "scope"]
    os.unlink(tmp_path / "ex.xsp")
    r = xsp_cmd("run", "-q", "-o", "q.xsp", "ex.py", "main", cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (3, "leaving\n", "")
    assert len(xsp.load(str(tmp_path / "q.xsp")).spans(name="before exit")) == 1
    # on another thread: nothing written, and stderr says why
    r = xsp_cmd("run", "-q", "-o", "t.xsp", "ex.py", "thread", cwd=tmp_path)
    assert (r.returncode, r.stdout) == (4, "")
    assert r.stderr == ("xsp run: the script called os._exit(4) on a thread of its own: no "
                        "trace was written (a profile stops only on the thread that started "
                        "it)\n")
    assert not (tmp_path / "t.xsp").exists()
    # a forked child's os._exit(7) ends the child only, silently; the parent writes the trace
    r = xsp_cmd("run", "-q", "-o", "f.xsp", "ex.py", "fork", cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (3, "child 7\nleaving\n", "")
    assert len(xsp.load(str(tmp_path / "f.xsp")).spans(name="before exit")) == 1
    # posix._exit is os._exit under another name: the same
    r = xsp_cmd("run", "-o", "p.xsp", "ex.py", "posix", cwd=tmp_path)
    assert (r.returncode, r.stdout) == (6, ""), r.stderr
    assert r.stderr.splitlines()[-1] == ("xsp run: the script called os._exit(6): the trace "
                                         "was written before exiting")
    assert len(xsp.load(str(tmp_path / "p.xsp")).spans(name="before exit")) == 1
    assert sorted(os.listdir(tmp_path)) == ["ex.py", "f.xsp", "p.xsp", "q.xsp"]


def test_export_format_from_the_extension(tmp_path, capsys):
    """Without --format, xsp export writes what xsp.save would to -o's name: Kineto's JSON to
    .pt.trace.json[.gz], OTLP/JSON to .otlp.json[.gz], Chrome's to any other; never JSON into a
    .xsp file."""
    import gzip
    from xsp.formats import format_of
    from helpers import sibling
    S = sibling("analysis", "test_analysis").S
    trace = str(tmp_path / "t.xsp")
    xsp.save(xsp.Trace.from_spans([S("prof", "region", 0, 1000),
                                   S("Net", "model", 0, 1000, 0, type="Net")],
                                  meta={"levels": "ML"}), trace)
    for name, key in (("a.json", "traceEvents"), ("b.pt.trace.json", "schemaVersion"),
                      ("c.pt.trace.json.gz", "schemaVersion"), ("d.otlp.json", "resourceSpans"),
                      ("e.otlp.json.gz", "resourceSpans"), ("f.trace", "traceEvents")):
        out = tmp_path / name
        assert cli.main(["export", trace, "-o", str(out)]) == 0
        raw = out.read_bytes()
        doc = json.loads(gzip.decompress(raw) if name.endswith(".gz") else raw)
        assert key in doc, name
        # Kineto's JSON has a schema version, Chrome's (the same trace-event syntax) none
        assert ("schemaVersion" in doc) == (format_of(name) == "kineto"), name
    capsys.readouterr()
    assert cli.main(["export", trace, "-o", str(tmp_path / "g.xsp")]) == 1
    assert capsys.readouterr().err.startswith("xsp: error: -o %s: xsp export writes JSON"
                                              % (tmp_path / "g.xsp"))
    assert not (tmp_path / "g.xsp").exists()
    # an explicit --format wins over the name
    assert cli.main(["export", trace, "--format", "chrome",
                     "-o", str(tmp_path / "h.otlp.json")]) == 0
    assert "traceEvents" in json.loads((tmp_path / "h.otlp.json").read_text())


@pytest.mark.parametrize("argv,status,message", [
    (["summary", "missing.xsp"], 1, "xsp: error: cannot read 'missing.xsp'"),
    (["run", "--levels", "Q", "x.py"], 1, "xsp: error: --levels: unknown level letter 'Q'"),
    (["run", "nope.py"], 1, "xsp: error: no such script: nope.py"),
    (["summary", "t.xsp", "--top", "0"], 1, "xsp: error: --top must be at least 1"),
    (["frob"], 2, "xsp: error: argument COMMAND: invalid choice: 'frob'"),
    (["export", "t.xsp"], 1, "xsp: error: --format chrome needs -o FILE"),
    ([], 2, "xsp: error: the following arguments are required: COMMAND"),
])
def test_errors_are_one_line(argv, status, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) if status == 2 else _nothing() as ex:
        rc = cli.main(argv)
    rc = ex.value.code if status == 2 else rc
    err = capsys.readouterr().err
    assert rc == status
    assert err.startswith(message) and err.count("\n") == 1, err


def test_bad_trace_file_names_the_byte(tmp_path, capsys):
    good = xsp.Trace.from_spans([{"name": "r", "kind": "region", "start_ns": 0, "end_ns": 5}])
    data = good.to_bytes()
    (tmp_path / "cut.xsp").write_bytes(data[:len(data) // 2])
    assert cli.main(["summary", str(tmp_path / "cut.xsp")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("xsp: error: ") and "byte" in err and err.count("\n") == 1
    (tmp_path / "j.xsp").write_text("{}")
    assert cli.main(["compare", str(tmp_path / "j.xsp"), str(tmp_path / "j.xsp")]) == 1
    assert "not an xsp trace file" in capsys.readouterr().err


def test_console_script_is_declared():
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    assert '[project.scripts]\nxsp = "xsp.cli:main"' in text
    exe = os.path.join(os.path.dirname(sys.executable), "xsp")
    if os.path.exists(exe):                # installed by `make setup` into the venv
        r = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and "compare" in r.stdout


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_run_module_directory_changes_interrupts(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert cli.main(["run", "-q", "-m", "no_such_pkg.mod"]) == 1
    err = capsys.readouterr().err
    assert err == "xsp: error: -m no_such_pkg.mod: No module named 'no_such_pkg'\n"
    assert not (tmp_path / "mod.xsp").exists()
    # -m finds modules in the current directory, as python -m does
    (tmp_path / "localpkg").mkdir()
    (tmp_path / "localpkg" / "__init__.py").write_text("")
    (tmp_path / "localpkg" / "job.py").write_text(
        "import sys, torch\nprint('job', sys.argv[1:], torch.ones(3).sum().item())\n")
    assert cli.main(["run", "-q", "-m", "localpkg.job", "a"]) == 0
    assert capsys.readouterr().out == "job ['a'] 3.0\n"
    assert xsp.load("job.xsp").spans(name="aten::sum")
    # a script that changes directory: outputs still land where xsp run started
    (tmp_path / "chd.py").write_text(
        "import os\nos.makedirs('sub', exist_ok=True)\nos.chdir('sub')\n"
        "raise ValueError('bad')\n")
    try:
        assert cli.main(["run", "-q", "chd.py"]) == 1
    finally:
        os.chdir(tmp_path)
    err = capsys.readouterr().err
    assert err.startswith('Traceback (most recent call last):\n  File "')
    assert err.splitlines()[1].endswith('chd.py", line 4, in <module>')   # script frames only
    assert err.endswith("ValueError: bad\n")
    assert (tmp_path / "chd.xsp").exists() and not (tmp_path / "sub" / "chd.xsp").exists()
    assert xsp.load(str(tmp_path / "chd.xsp")).meta["exception"] == "ValueError"
    (tmp_path / "intr.py").write_text("raise KeyboardInterrupt\n")
    assert cli.main(["run", "-q", "intr.py"]) == 130
    assert capsys.readouterr().err == "KeyboardInterrupt\n"
    meta = xsp.load(str(tmp_path / "intr.xsp")).meta      # the trace says how the script ended
    assert meta["interrupted"] == "KeyboardInterrupt in the block"
    assert cli.main(["report", "intr.xsp", "-o", "r.html", "--top", "0"]) == 1
    assert capsys.readouterr().err == "xsp: error: --top must be at least 1\n"


def test_reports_with_names_that_are_not_utf8(tmp_path):
    bad = b"layer\xff".decode("utf-8", "surrogateescape")
    tr = xsp.Trace.from_spans([
        {"name": "r\udcff", "kind": "region", "start_ns": 0, "end_ns": 100},
        {"name": "Net", "kind": "model", "start_ns": 0, "end_ns": 100, "parent": 0},
        {"name": bad, "kind": "module", "start_ns": 10, "end_ns": 90, "parent": 1,
         "attrs": {"type": "Linear"}}], meta={"levels": "ML", "region": "r\udcff"})
    xsp.report.html(tr, path=str(tmp_path / "r.html"))
    text = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "layer?" in text and "xsp report: r?" in text
    assert "layer?" in xsp.report.text(tr)
    assert oct(os.stat(tmp_path / "r.html").st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask():
    old = os.umask(0)
    os.umask(old)
    return old
