"""os.fork() inside a profile: the child runs on with its own exit status; its copy of the
profile is inert (records nothing, has no trace, says so in one warning at most) and never
touches the parent's files; the parent's trace is whole (docs/design.md, "Fork")."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import xsp
from xsp import _core

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def _script(tmp_path, body):
    path = tmp_path / "child.py"
    path.write_text(textwrap.dedent(body))
    return path


def _run(path, *args):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_child_leaving_the_block_keeps_its_exit_status(tmp_path):
    """The reproducer of the issue: `if os.fork() == 0: sys.exit(7)` inside the block."""
    path = _script(tmp_path, """
        import os, sys, torch, xsp
        m = torch.nn.Sequential(torch.nn.Linear(2, 2))
        with xsp.profile(levels="ML") as prof:
            m(torch.ones(1, 2))
            pid = os.fork()
            if pid == 0:
                sys.exit(7)
            _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
        print("parent spans", len(prof.trace.spans(kind="model")), prof.trace.meta["levels"])
    """)
    r = _run(path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["child 7", "parent spans 1 ML"]
    assert r.stderr.count("XSPWarning") == 1 and "the child records nothing" in r.stderr


def test_childs_copy_is_inert_and_the_child_can_profile_again(tmp_path):
    path = _script(tmp_path, """
        import os, sys, warnings, torch, xsp
        m = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
        orig = torch.nn.Module.__call__
        with xsp.profile(levels="ML") as prof:
            m(torch.ones(1, 2))
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                lines = []
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    lines.append("wrapped %s" % (torch.nn.Module.__dict__["__call__"] is not orig))
                    lines.append("active %s" % (xsp._core.active_session() is not None))
                    m(torch.ones(1, 2))
                    prof.step()
                    prof.step()
                    prof.stop()
                    lines.append("state %s trace %s" % (prof._state, prof.trace))
                    with xsp.profile(levels="ML") as again:
                        m(torch.ones(1, 2))
                    lines.append("again %s" % [s.name for s in again.trace.spans(kind="module")])
                lines.append("warnings %d" % len(caught))
                os.write(w, ("\\n".join(lines)).encode())
                os._exit(3)
            os.close(w)
            out = os.read(r, 65536).decode()
            _, status = os.waitpid(pid, 0)
        print(out)
        print("exit", os.waitstatus_to_exitcode(status))
        print("parent", [s.name for s in prof.trace.spans(kind="module")], prof.trace.meta["steps"])
    """)
    r = _run(path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "wrapped False",          # the child got Module.__call__ back
        "active False",           # and no profile recording
        "state forked trace None",
        "again ['0', '1']",       # a new profile in the child records normally
        "warnings 1",             # one warning for the inert copy, however often it is used
        "exit 3",
        "parent ['0', '1'] 0", ]   # the child's step() calls did not reach the parent


def test_forking_script_under_xsp_run_writes_the_parents_files_only(tmp_path):
    """`xsp run`: a child that leaves the profiled script (sys.exit in the child) exits with its
    own status and writes no trace; the parent writes the file once, with its own spans."""
    script = _script(tmp_path, """
        import os, sys, torch
        m = torch.nn.Sequential(torch.nn.Linear(2, 2))
        m(torch.ones(1, 2))
        pid = os.fork()
        if pid == 0:
            open(sys.argv[1], "w").write("child ran\\n")
            sys.exit(5)
        _, status = os.waitpid(pid, 0)
        print("child exit", os.waitstatus_to_exitcode(status))
    """)
    out = tmp_path / "run.xsp"
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-m", "xsp", "run", "-q", "-o", str(out), str(script),
                        str(tmp_path / "marker")], capture_output=True, text=True, env=env,
                       timeout=120, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["child exit 5"]
    assert (tmp_path / "marker").read_text() == "child ran\n"
    tr = xsp.load(str(out))
    assert len(tr.spans(kind="model")) == 1 and tr.meta["region"] == "child.py"
    assert sorted(os.listdir(tmp_path)) == ["child.py", "marker", "run.xsp"]


def test_fork_outside_a_profile_changes_nothing():
    pid = os.fork()
    if pid == 0:
        os._exit(0 if xsp._core.active_session() is None else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with xsp.profile(levels="M") as prof:
        torch.nn.Sequential(torch.nn.ReLU())(torch.ones(1))
    assert [s.kind for s in prof.trace] == ["region", "model"]


def test_forked_child_does_not_record():
    """Guards against forked workers (DataLoader) inheriting a live session: they kept
    recording every op into copies of the buffers that nobody reads, up to the cap each."""
    a = torch.ones(2)
    with xsp.profile() as prof:
        torch.add(a, a)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:                                  # the child
            ok = not _core.active() and not xsp._torch.attached()
            torch.add(a, a)
            with xsp.profile() as child:              # and it can profile on its own
                torch.mul(a, a)
            ok = ok and [s.name for s in child.trace.spans(kind="op")] == ["aten::mul"]
            os.write(w, b"1" if ok else b"0")
            os._exit(0)
        os.close(w)
        got = os.read(r, 1)
        os.close(r)
        os.waitpid(pid, 0)
        torch.add(a, a)
    assert got == b"1"
    assert [s.name for s in prof.trace.spans(kind="op")] == ["aten::add", "aten::add"]
