"""Beyond one process (xsp/analysis/distributed.py, docs/distributed.md): ranks in the meta, the clock
exchange, merging the ranks' traces, the analyses across ranks, and the CLI; real gloo jobs
of 2 and 4 processes on this host (tests/py/analysis/dist_worker.py) and synthetic traces with
injected clock offsets for exact values.  The real jobs' checks hold on a loaded machine: the
straggler arrives last by construction (it waits in the job's store for the others' calls
before its sleep), and times are compared by causality, not by how close they came."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import xsp
from xsp import _core
from xsp.analysis import distributed as D
from xsp.values.trace import KINDS, Trace

# the `slow` tier (pytest -m "not slow" leaves it out): real gloo jobs of 2 and 4 processes
pytestmark = pytest.mark.slow

HERE = os.path.dirname(os.path.abspath(__file__))
SLEEP = 0.02


def run_job(out, world, slow, steps=3):
    r = subprocess.run([sys.executable, os.path.join(HERE, "dist_worker.py"), str(out),
                        str(world), str(slow), str(SLEEP), str(steps)],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    return [str(out / ("rank%d.xsp" % i)) for i in range(world)]


@pytest.fixture(scope="module")
def job2(tmp_path_factory):
    return run_job(tmp_path_factory.mktemp("job2"), 2, slow=1)


def test_ranks_and_clock_samples_in_the_meta(job2):
    metas = [xsp.load(p).meta for p in job2]
    for r, m in enumerate(metas):
        assert (m["rank"], m["world_size"], m["backend"], m["rank_source"]) == (
            r, 2, "gloo", "torch.distributed")
        assert m["clock.sync"] == "process group" and m["host"]
        assert isinstance(m["clock.wall_offset_ns"], int)
        for k in ("clock.offset_ns", "clock.error_ns", "clock.stop_offset_ns",
                  "clock.stop_error_ns"):
            assert isinstance(m[k], float), k
        assert m["clock.stop_at_ns"] > m["clock.at_ns"]
    assert metas[0]["job_id"] == metas[1]["job_id"]
    assert metas[0]["clock.offset_ns"] == metas[0]["clock.error_ns"] == 0.0
    # one host: the offset to rank 0 is within the error bound of 0
    assert abs(metas[1]["clock.offset_ns"]) <= metas[1]["clock.error_ns"] + 1000
    # the exchange ran outside the recording: no send or recv of xsp's in the trace
    names = {s.name for s in xsp.load(job2[1])}
    assert not any("send" in n or "recv" in n for n in names)


def test_merge_aligns_the_collectives_and_names_the_straggler(job2, tmp_path):
    job = D.merge(job2)
    assert job.meta["ranks"] == "0,1" and job.meta["merged"] == 2
    assert job.meta["clock.aligned"] == "process group"
    assert sorted(set(D.rank_of(job).tolist())) == [0, 1]
    regions = [s for s in job if s.kind == "region"]
    assert sorted(s.attrs["rank"] for s in regions) == [0, 1]
    assert all(name.startswith(("rank 0: ", "rank 1: ")) for _, name, _ in job.threads)
    # aligned: no rank's all_reduce ends before the other's has begun (it cannot: it needs the
    # other's data), within the stated error and 1 ms for the conversion of each rank's ticks
    # to ns: a bound on the clocks, not on scheduling, so how late a process runs on a loaded
    # machine does not matter
    coll = D.collectives(job)
    err = max(job.meta["rank1.clock.error_ns"], 1.0)
    gl = coll[coll["name"] == "gloo:all_reduce"]
    assert len(gl) == 6
    for _, g in gl.groupby("index"):
        assert g["end_ns"].min() >= g["start_ns"].max() - err - 1e6
    table = D.ranks(job)
    assert table["rank"].tolist() == [0, 1] and table["steps"].tolist() == [3, 3]
    assert table["straggler"].tolist() == [False, True]
    assert table["last_arrivals"].tolist() == [0, 3]
    # rank 0 waits for rank 1's sleep in every step (rank 1 starts sleeping once rank 0's
    # all_reduce has begun, dist_worker.py: at least SLEEP, less 20% for the clocks' error)
    assert table["wait_ns"].iloc[0] >= 0.8 * SLEEP * 1e9 and table["wait_ns"].iloc[1] == 0
    text = xsp.report.ranks.text(job)
    assert "straggler: rank 1, last at 3 of 3 collectives, making the others wait up to" in text
    assert table["caused_ns"].iloc[1] >= 0.8 * SLEEP * 1e9 and table["caused_ns"].iloc[0] == 0
    assert "clocks: process group; aligned within" in text
    # one rank's trace back out of the job
    r1 = D.rank_trace(job, 1)
    assert r1.meta["rank"] == 1 and len(r1) == len(xsp.load(job2[1]))
    assert [s.name for s in r1][:3] == [s.name for s in xsp.load(job2[1])][:3]


def test_merged_exports_have_a_process_per_rank(job2, tmp_path):
    job = D.merge(job2)
    pids = [xsp.load(p).meta["pid"] for p in job2]
    xsp.formats.chrome.write(job, str(tmp_path / "c.json"))
    xsp.save(job, str(tmp_path / "k.json"), format="kineto")
    for f in ("c.json", "k.json"):
        ev = json.load(open(tmp_path / f))["traceEvents"]
        procs = {e["pid"]: e["args"]["name"] for e in ev if e.get("name") == "process_name"
                 and isinstance(e["pid"], int)}
        assert sorted(procs) == sorted(pids), f
        cpu = {e["pid"] for e in ev if e.get("ph") == "X" and isinstance(e["pid"], int)}
        assert cpu == set(pids), f


def test_four_ranks(tmp_path):
    paths = run_job(tmp_path, 4, slow=2, steps=2)
    job = D.merge(paths)
    table = D.ranks(job)
    assert table["rank"].tolist() == [0, 1, 2, 3]
    assert table.loc[table["straggler"], "rank"].tolist() == [2]
    assert table["last_arrivals"].tolist() == [0, 0, 2, 0]
    # rank 2 sleeps once the others' all_reduce calls have begun (dist_worker.py): each waits
    # at least SLEEP per step, less 20% for the clocks' error, however loaded the machine
    assert (table.loc[table["rank"] != 2, "wait_ns"] >= 0.8 * SLEEP * 1e9).all()
    assert len({xsp.load(p).meta["job_id"] for p in paths}) == 1


# -- exact values on synthetic traces ---------------------------------------------------------
def rank_trace(rank, world=2, offset=0.0, stop_offset=None, at=1000, stop_at=101000,
               job="00000000000000aa", host="h", start=1000):
    """A rank's trace: region, 2 steps each with a c10d::allreduce_ op, at times shifted by
    -offset (so that the merge's +offset puts them back on rank 0's clock)."""
    K = KINDS.index
    spans = []
    meta = {"rank": rank, "world_size": world, "pid": 100 + rank, "host": host,
            "levels": "ML", "region": "xsp.profile"}
    if job is not None:
        meta["job_id"] = job
        meta.update({"clock.sync": "process group", "clock.offset_ns": float(offset),
                     "clock.error_ns": 50.0, "clock.at_ns": at})
        if stop_offset is not None:
            meta.update({"clock.stop_offset_ns": float(stop_offset),
                         "clock.stop_error_ns": 70.0, "clock.stop_at_ns": stop_at})
    spans.append([start, start + 100000, -1, 0, K("region"), "xsp.profile", 0, 0, {}])
    for k in range(2):
        b = start + 1000 + k * 50000
        st = len(spans)
        spans.append([b, b + 40000, 0, 0, K("step"), "step#%d" % k, 0, 0, {}])
        spans.append([b + 10000 + (rank % 3) * 5000, b + 30000, st, 1, K("op"),
                      "c10d::allreduce_", 0, 0, {}])
    return Trace(_core.build(spans, [(1000 + rank, "MainThread", 0)], meta, {}))


def test_merge_recovers_injected_offsets_exactly():
    """Rank 1's clock runs 7000 ns behind rank 0's at its start sample and 8000 ns behind at
    its stop sample: the merge adds the offset interpolated between them, to the ns."""
    r0 = rank_trace(0, offset=0.0, stop_offset=0.0)
    r1 = rank_trace(1, offset=7000.0, stop_offset=8000.0, at=1000, stop_at=101000)
    job = D.merge([r0, r1])
    rk = D.rank_of(job)
    want = []
    for s in r1:
        off = lambda t: 7000.0 + 1000.0 * (t - 1000) / 100000  # noqa: E731
        want.append((s.name, int(np.rint(s.start_ns + off(s.start_ns))),
                     int(np.rint(s.end_ns + off(s.end_ns)))))
    got = [(s.name, s.start_ns, s.end_ns) for s, r in zip(job, rk) if r == 1]
    assert got == want
    got0 = [(s.name, s.start_ns, s.end_ns) for s, r in zip(job, rk) if r == 0]
    assert got0 == [(s.name, s.start_ns, s.end_ns) for s in r0]
    assert job.meta["rank1.clock.error_ns"] == 70.0
    # the collectives' waits, exactly: rank 1 calls 5000 ns later on its own clock, which is
    # 7000 ns + the drift at that time behind: on rank 0's clock it arrives that much later
    coll = D.collectives(job)
    w = coll[coll["rank"] == 0]["wait_ns"].tolist()
    assert w == [int(np.rint(12000 + 1000 * (t - 1000) / 100000)) for t in (17000, 67000)]
    assert coll[coll["rank"] == 1]["last"].tolist() == [True, True]
    assert D.ranks(job)["straggler"].tolist() == [False, True]


def test_same_host_without_samples_and_several_hosts_without_them():
    a = rank_trace(0, job=None)
    b = rank_trace(1, job=None)
    assert D.merge([a, b]).meta["clock.aligned"] == "same host"
    c = rank_trace(1, job=None, host="other")
    assert D.merge([a, c]).meta["clock.aligned"] == \
        "no: ranks on hosts h, other without clock samples"


@pytest.mark.parametrize("make, words", [
    (lambda: [rank_trace(0), Trace.from_spans([{"name": "r", "kind": "region", "start_ns": 0,
                                                 "end_ns": 5}])],
     "trace 1 has no rank in its meta"),
    (lambda: [rank_trace(0), rank_trace(0)], "rank 0 twice: trace 0 and trace 1"),
    (lambda: [rank_trace(0, world=2), rank_trace(1, world=3)],
     "mixed world sizes: 2 in trace 0; 3 in trace 1"),
    (lambda: [rank_trace(0, job="01"), rank_trace(1, job="02")],
     "mixed jobs: job 01: trace 0; job 02: trace 1"),
    (lambda: [rank_trace(0, world=3), rank_trace(2, world=3)],
     "ranks 1 of 3 are missing (have 0, 2: trace 0, trace 1)"),
    (lambda: [rank_trace(0), rank_trace(5)], "rank 5 outside world size 2: trace 1"),
    # a world size from a file, of any size: the missing ranks counted, the first ten named
    # (listing them all took memory without bound)
    (lambda: [rank_trace(0, world=10**15), rank_trace(3, world=10**15)],
     "ranks 1, 2, 4, 5, 6, 7, 8, 9, 10, 11, ... (999999999999998 in all) of "
     "1000000000000000 are missing (have 0, 3: trace 0, trace 1)"),
])
def test_merge_errors(make, words):
    with pytest.raises(D.MergeError) as e:
        D.merge(make())
    assert words in str(e.value)


def test_missing_ranks_allowed_when_asked():
    job = D.merge([rank_trace(0, world=3), rank_trace(2, world=3)], allow_missing=True)
    assert job.meta["ranks"] == "0,2" and job.meta["world_size"] == 3


def test_meta_from_the_launcher_s_environment(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "abc")
    with xsp.profile(levels="M") as prof:
        pass
    m = prof.trace.meta
    assert (m["rank"], m["world_size"], m["local_rank"], m["rank_source"], m["job"]) == (
        3, 4, 1, "environment", "abc")
    assert m["clock.sync"] == "same host"


def test_cli_merge_and_ranked_file_names(job2, tmp_path):
    cli = [sys.executable, "-m", "xsp"]
    out = str(tmp_path / "job.xsp")
    r = subprocess.run(cli + ["merge"] + job2 + ["-o", out], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "straggler: rank 1" in r.stdout and os.path.exists(out)
    r = subprocess.run(cli + ["summary", out, "--top", "2"], capture_output=True, text=True)
    assert r.returncode == 0 and "== rank 0 ==" in r.stdout and "== rank 1 ==" in r.stdout
    r = subprocess.run(cli + ["merge", job2[0], "-o", out], capture_output=True, text=True)
    assert r.returncode == 1
    assert r.stderr == "xsp: error: ranks 1 of 2 are missing (have 0: %s)\n" % job2[0]
    # under a launcher (torchrun sets RANK and WORLD_SIZE) each rank writes its own files
    script = tmp_path / "s.py"
    script.write_text("x = 1\n")
    env = dict(os.environ, RANK="1", WORLD_SIZE="2")
    r = subprocess.run(cli + ["run", "--levels", "M", "-q", "--chrome", "s.json", str(script)],
                       capture_output=True, text=True, cwd=str(tmp_path), env=env)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path))[-2:] == ["s.rank1.json", "s.rank1.xsp"]
    assert xsp.load(str(tmp_path / "s.rank1.xsp")).meta["rank"] == 1


def test_xsp_merge_and_the_html_report_of_a_job(job2, tmp_path):
    job = xsp.merge(job2)
    assert job.meta["ranks"] == "0,1"
    path = str(tmp_path / "job.html")
    html = xsp.report.html(job, path)
    assert "<h3>Ranks</h3>" in html and "clocks aligned by process group" in html
    table = D.ranks(job)
    # the table's rows are the ranks() rows
    assert html.count("<tr>") >= len(table) + 1


def test_fake_clock_offsets_are_recovered_exactly(tmp_path):
    """Each rank on the core's fake clock, started FAKE_BASE ns apart: the exchange measures
    exactly that offset with zero error (both ranks read their clocks equally often), and the
    merge puts rank 1's steps at exactly rank 0's times."""
    import dist_worker
    paths = run_job(tmp_path, 2, slow=-1, steps=3)
    m0, m1 = xsp.load(paths[0]).meta, xsp.load(paths[1]).meta
    off = -float(dist_worker.FAKE_BASE)
    assert (m1["clock.offset_ns"], m1["clock.error_ns"]) == (off, 0.0)
    assert (m1["clock.stop_offset_ns"], m1["clock.stop_error_ns"]) == (off, 0.0)
    job = D.merge(paths)
    rk = D.rank_of(job)
    steps = {r: [(s.name, s.start_ns, s.end_ns) for s, k in zip(job, rk)
                 if k == r and s.kind == "step"] for r in (0, 1)}
    assert len(steps[0]) == 3 and steps[1] == steps[0]
    r1 = [s for s in xsp.load(paths[1]) if s.kind == "step"]
    assert [s.start_ns for s in r1] == [t + dist_worker.FAKE_BASE for _, t, _ in steps[0]]


def xsp_run_rank(rank, setup_ns=1000000, step_ns=300000):
    """A rank's trace shaped as `xsp run` records a training script that calls xsp.step() at
    the end of each of 3 iterations: step#0 holds the setup (imports, model building and DDP's
    initial c10d::broadcast_ of the parameters, rank 1's 400 us after rank 0's) and then the
    first iteration, from its model call; every iteration is step_ns long: a 200 us Net call,
    then a c10d::allreduce_ that rank 1 enters 5 us after rank 0, ending at 290 us."""
    K = KINDS.index
    t0 = 1000
    meta = {"rank": rank, "world_size": 2, "pid": 100 + rank, "host": "h", "levels": "ML",
            "region": "xsp run", "job_id": "00000000000000bb", "clock.sync": "process group",
            "clock.offset_ns": 0.0, "clock.error_ns": 0.0, "clock.at_ns": t0}
    end = t0 + setup_ns + 3 * step_ns
    spans = [[t0, end, -1, 0, K("region"), "xsp run", 0, 0, {}]]
    for k in range(3):
        b = t0 + setup_ns + k * step_ns            # the iteration's start
        st = len(spans)
        spans.append([t0 if k == 0 else b, b + step_ns, 0, 0, K("step"), "step#%d" % k, 0, 0,
                      {}])
        if k == 0:
            spans.append([t0 + 100 + rank * 400000, t0 + 500000, st, 1, K("op"),
                          "c10d::broadcast_", 0, 0, {}])
        spans.append([b, b + 200000, st, 0, K("model"), "Net", 0, 0, {}])
        spans.append([b + 200000 + rank * 5000, b + 290000, st, 1, K("op"),
                      "c10d::allreduce_", 0, 0, {}])
    return Trace(_core.build(spans, [(1000 + rank, "MainThread", 0)], meta, {}))


def test_ranks_table_leaves_the_setup_step_out():
    """Regression: `xsp merge` under `xsp run` gave a mean step of 1.081 s +- 2.020 s against
    about 300 ms per iteration: ranks() averaged every step span, step#0's setup included.
    The cross-rank tables use the iterations as `xsp summary` finds them (xsp.analysis), so
    every rank has 3 iterations of exactly 300 us, and the setup's broadcast (where rank 1
    arrives 400 us late) is in no wait, cause or arrival count."""
    from xsp.analysis import tables as A
    job = D.merge([xsp_run_rank(0), xsp_run_rank(1)])
    # the same rule as the summary: one rank's iterations, and its setup
    for r in (0, 1):
        one = D.rank_trace(job, r)
        assert A.model_latency(one)["latency_ns"].tolist() == [300000] * 3
        assert A.setup(one)["duration_ns"] == 1000000
    table = D.ranks(job)
    assert table["steps"].tolist() == [3, 3]
    assert table["step_ns"].tolist() == [300000.0, 300000.0]
    assert table["step_std_ns"].tolist() == [0.0, 0.0]
    # per iteration: rank 0 waits 5 us for rank 1 at each allreduce, never the setup's 400 us
    assert table["wait_ns"].tolist() == [5000.0, 0.0]
    assert table["caused_ns"].tolist() == [0.0, 5000.0]
    assert table["last_arrivals"].tolist() == [0, 3]
    assert table["straggler"].tolist() == [False, True]
    # comm: the allreduce, 90 us (rank 0) and 85 us (rank 1) per iteration
    assert table["comm_ns"].tolist() == [90000.0, 85000.0]
    coll = D.collectives(job)
    assert coll[["name", "rank", "iteration"]].values.tolist() == [
        ["c10d::broadcast_", 0, -1], ["c10d::broadcast_", 1, -1],
        ["c10d::allreduce_", 0, 0], ["c10d::allreduce_", 1, 0],
        ["c10d::allreduce_", 0, 1], ["c10d::allreduce_", 1, 1],
        ["c10d::allreduce_", 0, 2], ["c10d::allreduce_", 1, 2]]
    text = xsp.report.ranks.text(job)
    assert "per iteration means, the setup before the first left out" in text
    assert "straggler: rank 1, last at 3 of 3 collectives" in text


def test_fake_clock_job_s_ranks_table_counts_the_summary_s_iterations(tmp_path):
    """On a real 2-rank job on the fake clock, each rank's row of ranks() has exactly the
    iterations and mean step that xsp.analysis finds in that rank's trace."""
    from xsp.analysis import tables as A
    job = D.merge(run_job(tmp_path, 2, slow=-1, steps=3))
    table = D.ranks(job)
    for r in (0, 1):
        lat = A.model_latency(D.rank_trace(job, r))["latency_ns"]
        assert (table["steps"][r], table["step_ns"][r]) == (len(lat), float(lat.mean()))
