"""Running a zoo (xsp.zoo.runner, evaluate, cli; issue 26): real worker processes, a real
results store, a real local Ray cluster; no mocks.

Nothing here depends on the machine's speed: no latency is asserted, and nothing waits on
wall time but the timeout mechanism under test (a model that sleeps an hour against a 5 s
timeout, every other evaluation with the default 600 s) and hang guards of minutes around
processes that end by themselves.  The small zoo's results are made once per module and read
by the tests that only look at them (resume, the CLI's status and query, the Ray comparison).
"""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import xsp
import xsp.analysis as A
from helpers import TINY_MODELS
from xsp.zoo import catalog, evaluate, runner, store

# the `slow` tier (pytest -m "not slow" leaves it out): real worker processes and a real local Ray cluster
pytestmark = pytest.mark.slow

HANG_GUARD_S = 300          # an upper bound for things that end by themselves

MODELS = '''import os
import time
''' + TINY_MODELS + '''

def boom():
    print("boom is about to raise")
    raise ValueError("boom at build")


def sleeper():
    print("sleeper goes to sleep", flush=True)
    time.sleep(3600)


def killer():
    print("killer kills itself", flush=True)
    os.kill(os.getpid(), 9)


def hog():
    import mmap
    # 6 GiB of address space, never touched: refused under a 4 GiB RLIMIT_AS; without the
    # limit it would be mapped, and build() would refuse the None instead
    return mmap.mmap(-1, 6 << 30), None


def envprobe(path):
    """Writes what the worker sees of its environment, then is an mlp."""
    with open(path, "w") as f:
        f.write("%s %d" % (os.environ.get("XSP_ZOO_PROBE"), torch.get_num_threads()))
    return mlp()


def gated(gate, pidfile):
    """Writes its pid, then waits for the gate file: it holds its worker until the test says."""
    with open(pidfile + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(pidfile + ".tmp", pidfile)
    while not os.path.exists(gate):
        time.sleep(0.05)
    return mlp()
'''

# the layers each python model's evaluation must have (leaf modules, qualified names)
MLP_LAYERS = {("0", "Linear"), ("1", "ReLU"), ("2", "Linear")}
CONV_LAYERS = {("0", "Conv2d"), ("1", "ReLU"), ("2", "AdaptiveAvgPool2d"), ("3", "Flatten"),
               ("4", "Linear")}
HF_MODEL = "gpt2@small"     # a built-in transformers model that builds in a tenth of a second


def _manifest(path, body):
    path.write_text(textwrap.dedent(body))
    return str(path)


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("zoo")
    (d / "models.py").write_text(MODELS)
    return d


def _small_manifest(d):
    return _manifest(d / "small.toml", """\
        [system]
        price_per_hour = 3.6
        [[models]]
        name = "mlp"
        source = "python:models.py:mlp"
        [[models]]
        name = "convnet"
        source = "python:models.py:convnet"
        [[models]]
        name = "%s"
        """ % HF_MODEL)


@pytest.fixture(scope="module")
def small(zoo_dir):
    """The small zoo at batch sizes 1, 2 and levels ML, run once on the local engine, two
    workers at a time: (zoo, results directory, Results)."""
    zoo = catalog.load(_small_manifest(zoo_dir)).override(batch_sizes=[1, 2], levels="ML")
    out = str(zoo_dir / "results")
    res = runner.run(zoo, out, jobs=2, progress=False)
    return zoo, out, res


def _files(d):
    """{path: (size, mtime_ns)} of every file under d."""
    out = {}
    for root, _, names in os.walk(d):
        for n in names:
            p = os.path.join(root, n)
            st = os.stat(p)
            out[p] = (st.st_size, st.st_mtime_ns)
    return out


def _rows(results_dir):
    return store.query(results_dir, "SELECT * FROM evaluations ORDER BY model, batch_size")


def _layer_names(results_dir, evaluation_id):
    df = store.query(results_dir, "SELECT layer, layer_type FROM layers WHERE evaluation_id = "
                                  "'%s'" % evaluation_id)
    return set(zip(df["layer"], df["layer_type"]))


def _trace_layers(results_dir, trace_path):
    """The leaf layers of the iterations of a saved trace, by xsp.analysis.layers."""
    t = xsp.load(os.path.join(results_dir, trace_path))
    L = A.layers(t)
    L = L[L["leaf"] & (L["iteration"] >= 0)]
    return set(zip(L["name"], L["type"]))


# -- the local engine ---------------------------------------------------------------------------

def test_small_zoo_rows(small):
    zoo, out, res = small
    models = ["mlp", "convnet", HF_MODEL]
    assert [(r["model"], r["batch_size"], r["status"]) for r in res.rows] == \
        [(m, b, "ok") for m in models for b in (1, 2)]
    assert (res.done, res.failed, res.skipped) == (6, 0, 0)
    df = _rows(out)
    assert sorted(zip(df["model"], df["batch_size"], df["status"])) == \
        sorted((m, b, "ok") for m in models for b in (1, 2))
    fp = store.query(out, "SELECT * FROM systems")
    assert len(fp) == 1 and set(df["system_id"]) == {fp["system_id"][0]}
    for _, r in df.iterrows():
        e = zoo[r["model"]]
        sid = r["system_id"]
        assert r["evaluation_id"] == evaluate.evaluation_id(e, r["batch_size"], sid)
        assert r["key"] == evaluate.key(e, r["batch_size"], sid)
        assert r["levels"] == "ML" and r["task"] == "inference"
        assert (r["warmup"], r["repeat"]) == (evaluate.WARMUP, evaluate.REPEAT)
        assert r["latency_M_n"] == r["latency_ML_n"] == evaluate.REPEAT
        assert r["throughput_per_s"] == pytest.approx(r["batch_size"] * 1e9 /
                                                      r["latency_M_mean_ns"])
        assert r["cost_per_million"] == pytest.approx(3.6 / 3600 / r["throughput_per_s"] * 1e6)
        assert r["trace_path"] == "traces/%s.xsp" % r["evaluation_id"]
        # the layer table is the saved trace's leaf layers
        layers = _layer_names(out, r["evaluation_id"])
        assert layers == _trace_layers(out, r["trace_path"]), r["model"]
        if r["model"] == "mlp":
            assert layers == MLP_LAYERS
        elif r["model"] == "convnet":
            assert layers == CONV_LAYERS
        else:
            assert "Embedding" in {t for _, t in layers}, layers
        assert json.loads(r["options"])["device"] in ("cpu", "cuda")
    assert not os.path.exists(os.path.join(out, runner.LOGS)) or \
        not os.listdir(os.path.join(out, runner.LOGS))      # logs of all-ok workers go


def test_second_run_skips_everything(small):
    zoo, out, _ = small
    before = _files(out)
    res = runner.run(zoo, out, jobs=2, progress=False)
    assert (res.done, res.failed, res.skipped, res.rows) == (0, 0, 6, [])
    assert _files(out) == before            # no file written, none touched


def _failures_manifest(d):
    return _manifest(d / "failures.toml", """\
        batch_sizes = [1]
        [[models]]
        name = "mlp"
        source = "python:models.py:mlp"
        [[models]]
        name = "boom"
        source = "python:models.py:boom"
        batch_sizes = [1, 2]
        [[models]]
        name = "sleeper"
        source = "python:models.py:sleeper"
        timeout = 5
        [[models]]
        name = "killer"
        source = "python:models.py:killer"
        [[models]]
        name = "hog"
        source = "python:models.py:hog"
        """)


@pytest.fixture(scope="module")
def failures(zoo_dir):
    """The failures zoo, its workers spawned (runner.START_ENV): the small zoo's come from the
    fork server, so both ways of starting a worker meet every kind of end."""
    zoo = catalog.load(_failures_manifest(zoo_dir))
    out = str(zoo_dir / "failures")
    mp = pytest.MonkeyPatch()
    mp.setenv(runner.START_ENV, "spawn")
    try:
        return out, runner.run(zoo, out, jobs=2, memory_limit=4 << 30, progress=False)
    finally:
        mp.undo()


def test_failures_are_rows(failures):
    """A model that raises (at both batch sizes: the worker is restarted for the second), one
    that sleeps past its timeout, one that kills itself with SIGKILL and one that passes its
    memory limit each become a row with its reason and output; the others are done."""
    out, res = failures
    got = {(r["model"], r["batch_size"]): r for r in res.rows}
    assert [(r["model"], r["batch_size"], r["status"]) for r in res.rows] == [
        ("mlp", 1, "ok"), ("boom", 1, "failed"), ("boom", 2, "failed"),
        ("sleeper", 1, "timeout"), ("killer", 1, "killed"), ("hog", 1, "failed")]
    assert (res.done, res.failed) == (1, 5)
    for b in (1, 2):
        r = got[("boom", b)]
        assert r["reason"] == "build: ValueError: boom at build"
        assert "boom is about to raise" in r["output_tail"]
        assert 'raise ValueError("boom at build")' in r["output_tail"]
    r = got[("sleeper", 1)]
    assert r["reason"] == ("the evaluation did not finish in 5.0 s (its timeout); the worker "
                           "was killed")
    assert "sleeper goes to sleep" in r["output_tail"]
    assert r["wall_s"] >= 5.0
    r = got[("killer", 1)]
    assert r["reason"] == "the worker was killed by SIGKILL (9) during the evaluation"
    assert "killer kills itself" in r["output_tail"]
    assert got[("hog", 1)]["reason"] == "build: OSError: [Errno 12] Cannot allocate memory"
    # the store has the same rows, failed ones with empty tables and no trace
    df = _rows(out)
    assert sorted(zip(df["model"], df["batch_size"], df["status"])) == sorted(
        (r["model"], r["batch_size"], r["status"]) for r in res.rows)
    bad = df[df["status"] != "ok"]
    assert bad["trace_path"].isna().all()
    n = store.query(out, "SELECT count(*) AS n FROM layers WHERE evaluation_id IN (%s)" % ", ".join(
        "'%s'" % e for e in bad["evaluation_id"]))["n"][0]
    assert n == 0
    assert store.done_keys(out) == {got[("mlp", 1)]["key"]}
    # the failed workers' logs stay beside the results
    logs = os.listdir(os.path.join(out, runner.LOGS))
    assert sorted(n.split("-b")[0] for n in logs) == ["boom", "boom", "hog", "killer",
                                                      "sleeper"]


def test_workers_take_the_run_environment_and_big_runs_compact(small, zoo_dir, monkeypatch):
    """xsp.zoo.run takes a manifest's path and the command line's overrides.  A worker forked
    from the fork server (started by an earlier run of this process, with the environment of
    then) sees the environment of its own run, and torch's threads follow
    OMP_NUM_THREADS; a run that ends with COMPACT_AT evaluations' own files compacts them:
    one file per table, the same rows."""
    probe = str(zoo_dir / "probe.txt")
    manifest = _manifest(zoo_dir / "probe.toml", """\
        [[models]]
        name = "envprobe"
        source = "python:models.py:envprobe"
        config = {path = "%s"}
        """ % probe)
    monkeypatch.setenv("XSP_ZOO_PROBE", "seen")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(runner, "COMPACT_AT", 2)
    out = str(zoo_dir / "probe")
    # the zoo as its manifest's path, the batch sizes and levels as --batch-sizes, --levels
    res = runner.run(manifest, out, batch_sizes=[1, 2], levels="ML",
                     options={"profile_memory": True}, progress=False)
    assert [(r["batch_size"], r["levels"]) for r in res.rows] == [(1, "ML"), (2, "ML")]
    assert [json.loads(r["options"])["profile_memory"] for r in res.rows] == [True, True]
    assert all(r["peak_cpu_bytes"] > 0 for r in res.rows)
    assert (res.done, res.failed) == (2, 0)
    with open(probe) as f:
        assert f.read() == "seen 1"
    assert [r["torch_threads"] for r in res.rows] == [1, 1]
    for table in ("evaluations", "layers", "layer_types", "ops"):
        names = os.listdir(os.path.join(out, table))
        assert len(names) == 1 and names[0].startswith(store.COMPACT_PREFIX), (table, names)
    df = _rows(out)
    assert sorted(zip(df["evaluation_id"], df["status"])) == sorted(
        (r["evaluation_id"], "ok") for r in res.rows)
    # measure_s: the profiled work's share of the evaluation's wall time, both measured
    assert all(0 < m <= w for m, w in zip(df["measure_s"], df["wall_s"]))


def test_worker_logs_are_never_written_or_read_through_a_planted_link(tmp_path):
    """A worker's log has a predictable name (<results>/logs/<evaluation id>.log) in a
    directory others may write: a link planted there is replaced by a new file of the
    worker's own (O_EXCL|O_NOFOLLOW), never written through, and a row's output tail never
    reads through one."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "model-b1-ML-0123456789ab.log"
    log.symlink_to(victim)
    code = ("import sys; from xsp.zoo import runner; runner._redirect(sys.argv[1]); "
            "print('the worker speaks')")
    r = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True,
                       timeout=HANG_GUARD_S)
    assert r.returncode == 0, r.stderr
    assert victim.read_text() == "precious\n"
    assert not log.is_symlink() and log.read_text() == "the worker speaks\n"
    assert runner._tail(str(log)) == "the worker speaks"
    log.unlink()
    log.symlink_to(victim)
    assert runner._tail(str(log)) is None


# -- Ctrl-C and resume, through the command line ---------------------------------------------

def _cli(*args, cwd=None, timeout=HANG_GUARD_S):
    return subprocess.run([sys.executable, "-m", "xsp.zoo.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def _main(*args):
    """(exit status, stdout, stderr) of xsp.zoo.cli.main(args) in this process."""
    import contextlib
    import io

    from xsp.zoo import cli
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(list(args))
    return rc, out.getvalue(), err.getvalue()


# `xsp zoo run` with Python's own SIGINT handler, whatever this process's SIGINT is: a test
# run started as a background job of a non-interactive shell (`make test &`, nohup) has SIGINT
# ignored, its children inherit that through exec and Python then installs no handler, so the
# SIGINT below would be ignored (respected, rightly, by xsp zoo run) and the run never end
CTRL_C_ABLE = ("import runpy, signal, sys; signal.signal(signal.SIGINT, "
               "signal.default_int_handler); sys.argv[0] = 'xsp zoo'; "
               "runpy.run_module('xsp.zoo.cli', run_name='__main__', alter_sys=True)")


def _wait_for(path, proc):
    deadline = time.monotonic() + HANG_GUARD_S
    while not os.path.exists(path):
        assert proc.poll() is None, "the run ended before %s appeared: %s" % (
            path, proc.communicate())
        assert time.monotonic() < deadline, "hang guard: %s never appeared" % path
        time.sleep(0.05)


def test_interrupted_run_resumes(zoo_dir):
    """`xsp zoo run` gets SIGINT while a worker evaluates the second model: it kills the
    worker, keeps the first model's rows and exits 130; run again, it evaluates only the
    rest."""
    gate, pidfile = str(zoo_dir / "gate"), str(zoo_dir / "gated.pid")
    manifest = _manifest(zoo_dir / "interrupted.toml", """\
        batch_sizes = [1, 2]
        [[models]]
        name = "mlp"
        source = "python:models.py:mlp"
        [[models]]
        name = "gated"
        source = "python:models.py:gated"
        config = {gate = "%s", pidfile = "%s"}
        """ % (gate, pidfile))
    out = str(zoo_dir / "interrupted")
    proc = subprocess.Popen([sys.executable, "-c", CTRL_C_ABLE, "run", manifest, "-o", out],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(pidfile, proc)            # mlp is done (one worker at a time, in order)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=HANG_GUARD_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, (stdout, stderr)
    assert "xsp zoo run: interrupted; what finished is kept: run it again to resume" in stderr
    with open(pidfile) as f:
        worker = int(f.read())
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)                  # the worker was killed and reaped
    first = _rows(out)
    assert list(zip(first["model"], first["batch_size"], first["status"])) == \
        [("mlp", 1, "ok"), ("mlp", 2, "ok")]
    kept = _files(os.path.join(out, "evaluations"))

    r = _cli("status", out)
    assert (r.returncode, r.stdout) == (0, "done     2\nfailed   0\npending  2\npending:\n"
                                           "  gated  batch 1\n  gated  batch 2\n"), r.stderr

    with open(gate, "w"):
        pass
    r = _cli("run", manifest, "-o", out)
    # stderr is a pipe: no progress line (and the workers' output is in their logs)
    assert (r.returncode, r.stdout, r.stderr) == (
        0, "2 evaluated: 2 done, 0 failed; 2 skipped (done before); results in %s\n" % out, "")
    after = _files(os.path.join(out, "evaluations"))
    assert {p: after[p] for p in kept} == kept      # mlp's rows were not evaluated again
    assert len(after) == 4
    df = _rows(out)
    assert sorted(zip(df["model"], df["batch_size"], df["status"])) == \
        [("gated", 1, "ok"), ("gated", 2, "ok"), ("mlp", 1, "ok"), ("mlp", 2, "ok")]
    assert _main("status", out) == (0, "done     4\nfailed   0\npending  0\n", "")


def test_progress_line_on_a_terminal_only():
    """The progress line is drawn on a terminal (a real pty here), as evaluations end, and
    not on a pipe."""
    import fcntl
    import pty
    import struct
    import termios
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    saved = sys.stderr
    try:
        sys.stderr = open(slave, "w", closefd=False)
        bar = runner._Progress(2, None)
        for status in ("ok", "failed"):
            bar.update({"model": "m", "batch_size": 1, "status": status})
        bar.close()
        sys.stderr.flush()
    finally:
        sys.stderr = saved
        os.close(slave)
    text = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:             # EIO: the pty's other end is closed and drained
            break
        if not chunk:
            break
        text += chunk
    os.close(master)
    text = text.decode("utf-8", "replace")
    assert "xsp zoo" in text and "2/2" in text and "1 failed, last m b1 failed" in text, text
    r, w = os.pipe()
    try:
        sys.stderr = open(w, "w", closefd=False)
        bar = runner._Progress(2, None)
        assert bar.bar is None and not bar.plain
        bar.close()
    finally:
        sys.stderr = saved
        os.close(r)
        os.close(w)


# -- the command line ---------------------------------------------------------------------------

def test_cli_list_and_usage_errors(zoo_dir):
    manifest = _small_manifest(zoo_dir)
    r = _cli("list", manifest)
    src = "python:%s" % (zoo_dir / "models.py")
    hf = catalog.load(HF_MODEL).entries[0]
    rows = [("mlp", "python", src + ":mlp", "1,8"),
            ("convnet", "python", src + ":convnet", "1,8"),
            (HF_MODEL, hf.family, hf.source, ",".join(map(str, hf.batch_sizes)))]
    w = [max(len(row[i]) for row in rows) for i in range(3)]
    assert (r.returncode, r.stdout) == (0, "".join(
        "%-*s  %-*s  %-*s  %s\n" % (w[0], a, w[1], b, w[2], c, d) for a, b, c, d in rows))

    out = str(zoo_dir / "never")
    r = _cli("run", "--models", "no-such-model", "-o", out)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("xsp zoo run: error: --models: model 'no-such-model': name: "
                               "unknown model")
    r = _cli("run", "--models", "python:%s:nothing_here" % (zoo_dir / "models.py"), "-o", out)
    assert r.returncode == 2 and "defines no function 'nothing_here'" in r.stderr
    r = _cli("run", manifest, "--levels", "X", "-o", out)
    assert r.returncode == 2 and r.stdout == ""
    r = _cli("run", "-o", out)
    assert r.returncode == 2 and "give a zoo" in r.stderr
    assert not os.path.exists(out)          # nothing ran
    r = _cli("report", str(zoo_dir))
    assert (r.returncode, r.stdout, r.stderr) == (
        2, "", "xsp zoo report: error: %s: no evaluations in it: run `xsp zoo run SPEC -o "
               "DIR` first\n" % zoo_dir)


def test_cli_status_and_query(small, failures):
    _, out, _ = small
    assert _main("status", out) == (0, "done     6\nfailed   0\npending  0\n", "")
    fout, _ = failures
    r = _cli("status", fout)
    assert (r.returncode, r.stdout) == (1, """\
done     1
failed   5
pending  0
failed:
  boom     batch 1  failed   build: ValueError: boom at build
  boom     batch 2  failed   build: ValueError: boom at build
  hog      batch 1  failed   build: OSError: [Errno 12] Cannot allocate memory
  killer   batch 1  killed   the worker was killed by SIGKILL (9) during the evaluation
  sleeper  batch 1  timeout  the evaluation did not finish in 5.0 s (its timeout); \
the worker was killed
""")
    sql = "SELECT model, batch_size, status FROM evaluations ORDER BY model, batch_size"
    r = _cli("query", fout, sql)
    assert (r.returncode, r.stdout) == (0, """\
  model  batch_size  status
   boom           1  failed
   boom           2  failed
    hog           1  failed
 killer           1  killed
    mlp           1      ok
sleeper           1 timeout
""")
    # the other forms in this process: the same main() as `python -m xsp.zoo.cli`
    assert _main("query", fout, sql, "--format", "csv") == (0, (
        "model,batch_size,status\nboom,1,failed\nboom,2,failed\nhog,1,failed\n"
        "killer,1,killed\nmlp,1,ok\nsleeper,1,timeout\n"), "")
    rc, stdout, _ = _main("query", fout, sql + " LIMIT 1", "--format", "json")
    assert (rc, json.loads(stdout)) == (0, [{"model": "boom", "batch_size": 1,
                                             "status": "failed"}])
    assert _main("query", out, "SELECT layer, layer_type FROM layers WHERE model = 'mlp' AND "
                               "batch_size = 1 ORDER BY layer") == (
        0, "layer layer_type\n    0     Linear\n    1       ReLU\n    2     Linear\n", "")
    assert _main("query", out, "SELECT model FROM evaluations WHERE false") == \
        (0, "model\n", "")
    rc, stdout, stderr = _main("query", out, "SELECT nope FROM evaluations")
    assert (rc, stdout) == (2, "")
    assert stderr.startswith("xsp zoo query: error: the query failed: Binder Error")
    assert _main("status", str(out) + "-none") == (
        2, "", "xsp zoo status: error: %s-none: no such results directory\n" % out)


def test_cli_run_resumes_a_finished_zoo(small, zoo_dir):
    zoo, out, _ = small
    before = _files(out)
    r = _cli("run", _small_manifest(zoo_dir), "--batch-sizes", "1,2", "--levels", "ML",
             "-o", out)
    assert (r.returncode, r.stdout, r.stderr) == (
        0, "0 evaluated: 0 done, 0 failed; 6 skipped (done before); results in %s\n" % out, "")
    assert _files(out) == before


# -- the Ray engine -----------------------------------------------------------------------------

def _ray():
    try:
        import ray
    except ImportError:
        if os.environ.get("XSP_TEST_TOOLS") == "1":
            pytest.fail("ray is not installed, and XSP_TEST_TOOLS=1 (make test) needs it: "
                        "scripts/setup.sh installs it")
        pytest.skip("ray is not installed (pip install 'xsp[ray]')")
    return ray


def test_ray_engine_gives_the_local_rows(small, zoo_dir):
    """The python models of the small zoo at batch size 1 as Ray tasks on a real local
    cluster: the same evaluations, statuses, layers and ops as the local engine's, apart from
    timings."""
    ray = _ray()
    zoo, local_out, _ = small
    zoo = catalog.Zoo(tuple(e for e in zoo.entries if e.name in ("mlp", "convnet")),
                      dict(zoo.system), zoo.path).override(batch_sizes=[1])
    out = str(zoo_dir / "ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        res = runner.run(zoo, out, engine="ray", progress=False)
    finally:
        ray.shutdown()
    assert [(r["model"], r["batch_size"], r["status"]) for r in res.rows] == \
        [("mlp", 1, "ok"), ("convnet", 1, "ok")]
    ray_rows = _rows(out)
    local = _rows(local_out)
    local = local[local["model"].isin(["mlp", "convnet"]) &
                  (local["batch_size"] == 1)].reset_index(drop=True)
    same = ["evaluation_id", "key", "model", "family", "source", "task", "batch_size", "levels",
            "options", "system_id", "status", "warmup", "repeat", "latency_M_n",
            "latency_ML_n", "trace_path", "price_per_hour"]
    assert ray_rows[same].to_dict("records") == local[same].to_dict("records")
    for eid in ray_rows["evaluation_id"]:
        assert _layer_names(out, eid) == _layer_names(local_out, eid)
    for table in ("layers", "layer_types", "ops"):
        cols = {"layers": "layer, layer_type, calls", "layer_types": "layer_type, count",
                "ops": "op, calls"}[table]
        q = "SELECT evaluation_id, %s FROM %s ORDER BY ALL" % (cols, table)
        ids = tuple(ray_rows["evaluation_id"])
        lq = store.query(local_out, q)
        lq = lq[lq["evaluation_id"].isin(ids)].reset_index(drop=True)
        assert store.query(out, q).to_dict("records") == lq.to_dict("records"), table
