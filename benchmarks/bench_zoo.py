"""The evaluation pipeline's own cost (issue 26): what `xsp zoo run` adds per evaluation beyond
the profiled work, with workers forked from the fork server against workers spawned, in one
run; and how fast the results database answers over 1,000 evaluations, before and after
compaction.

    python benchmarks/bench_zoo.py [--models builtin-small] [--batch-sizes 1,8] [--levels ML]
                                   [--evaluations 1000] [--rounds 5] [--no-pipeline]
                                   [--no-query] [--keep DIR]

Pipeline.  For each way of starting workers (runner.START_ENV: the fork server, then spawn),
the zoo is run by the command line, `python -m xsp zoo run ... -o DIR`, in a fresh results
directory, timed from outside (the whole command: interpreter, imports, fingerprint, workers,
writes).  Each evaluation says in its row how long its xsp.measure took (measure_s: warm-up
and every run, the profiled work); the pipeline's cost per evaluation is

    (the command's wall time - the sum of measure_s) / evaluations

and is split into what the workers spend outside xsp.measure (wall_s - measure_s: building
the model, the analyses, writing the files) and the rest (starting the command and the
workers, imports).  Then the same command again: a finished zoo, everything skipped.  The two
start methods run one after the other, not interleaved (each is a whole zoo); the machine's
load hits them in turn.  common sets OMP_NUM_THREADS=1 (unless set): the workers inherit it,
which changes the profiled work, not the pipeline's cost.

Query.  --evaluations evaluations of a zoo-like size (20 layers, 10 layer types, 40 ops each)
are written through the store's own writer, then each query runs --rounds times on a fresh
connection (xsp.zoo.open included, as `xsp zoo query` does it), one file per evaluation and
table, and again after store.compact(): the median and the spread.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import common

QUERIES = {
    "throughput": "SELECT model, batch_size, throughput_per_s FROM evaluations ORDER BY 3 DESC",
    "layer types": "SELECT layer_type, sum(total_ns) AS ns FROM layer_types "
                   "JOIN evaluations USING (evaluation_id) WHERE status = 'ok' "
                   "GROUP BY 1 ORDER BY 2 DESC",
    "top ops": "SELECT op, count(*) AS models, avg(share) AS share FROM ops "
               "GROUP BY 1 ORDER BY 3 DESC LIMIT 20",
}


def _zoo_run(args, out, start):
    env = dict(os.environ)
    env["XSP_ZOO_START"] = start
    cmd = [sys.executable, "-m", "xsp", "zoo", "run", "--models", args.models,
           "--batch-sizes", args.batch_sizes, "--levels", args.levels, "-o", out,
           "--no-progress"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode not in (0, 1):
        sys.exit("bench_zoo: %s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr))
    return wall, r.stdout.strip().splitlines()[0]


def pipeline(args):
    from xsp.zoo import store
    print("pipeline: xsp zoo run --models %s --batch-sizes %s --levels %s (one worker at a "
          "time)" % (args.models, args.batch_sizes, args.levels))
    res = {}
    for start in ("forkserver", "spawn"):
        with tempfile.TemporaryDirectory(prefix="bench_zoo_") as tmp:
            out = args.keep if start == "forkserver" and args.keep else tmp
            if os.path.exists(os.path.join(out, "evaluations")):
                sys.exit("bench_zoo: %s has results already: give a new directory" % out)
            wall, line = _zoo_run(args, out, start)
            again, line2 = _zoo_run(args, out, start)
            df = store.query(out, "SELECT status, wall_s, measure_s FROM evaluations")
        n = len(df)
        ok = df[df["status"] == "ok"]
        measured = float(ok["measure_s"].sum())
        inside = float((ok["wall_s"] - ok["measure_s"]).sum())
        per = (wall - measured) / n
        res[start] = per
        print("  %-10s %3d evaluations (%d ok) in %6.1f s; profiled work %6.1f s; pipeline "
              "%.2f s per evaluation (in the workers outside xsp.measure %.2f, starting and "
              "imports %.2f); run again: %.1f s (%s)"
              % (start, n, len(ok), wall, measured, per, inside / n,
                 per - inside / n, again, line2))
    print("  fork server / spawn, pipeline cost per evaluation: %.2f"
          % (res["forkserver"] / res["spawn"]))


def _fill(out, n):
    """n evaluations of 4 models x 5 batch sizes x ... written by store.write_evaluation."""
    from xsp.zoo import store
    fp = {"system_id": "bench-system", "hostname": "bench"}
    store.write_system(out, fp)
    for i in range(n):
        eid = "bench-%05d" % i
        model = "model-%03d" % (i // 5)
        bs = 2 ** (i % 5)
        row = {"evaluation_id": eid, "key": eid, "model": model, "family": "f%d" % (i % 7),
               "source": "python:bench:m", "task": "inference", "batch_size": bs,
               "levels": "ML", "system_id": "bench-system", "status": "ok",
               "started_at": 1.7e9 + i, "wall_s": 1.0, "measure_s": 0.5,
               "latency_M_mean_ns": 1e6 * bs, "latency_ML_mean_ns": 1.2e6 * bs,
               "throughput_per_s": 1e3 / (1 + i % 5)}
        layers = [{"layer": "block.%d" % j, "layer_type": "T%d" % (j % 10), "calls": 1,
                   "mean_ns": 1e4 * (j + 1), "backward_ns": 0.0, "share": 0.01,
                   "forward_share": 0.05} for j in range(20)]
        types = [{"layer_type": "T%d" % j, "count": 2, "total_ns": 2e4 * (j + 1),
                  "backward_ns": 0.0, "share": 0.02, "forward_share": 0.1,
                  "count_share": 0.1} for j in range(10)]
        ops = [{"op": "aten::op%d" % j, "calls": 3, "total_ns": 3e4, "self_ns": 1e4,
                "share": 0.01 * (j % 5)} for j in range(40)]
        store.write_evaluation(out, row, {"layers": layers, "layer_types": types,
                                          "ops": ops})


def _time_query(out, sql, rounds):
    from xsp.zoo import store
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        df = store.query(out, sql)
        times.append(time.perf_counter() - t0)
    return times, len(df)


def _fmt(times):
    q = statistics.quantiles(times, n=4) if len(times) > 1 else times * 3
    return "%.3f s (IQR %.3f-%.3f)" % (statistics.median(times), q[0], q[2])


def query(args):
    from xsp.zoo import store
    with tempfile.TemporaryDirectory(prefix="bench_zoo_q_") as out:
        t0 = time.perf_counter()
        _fill(out, args.evaluations)
        print("query: %d evaluations written in %.1f s (%d files)" % (
            args.evaluations, time.perf_counter() - t0,
            sum(len(files) for _, _, files in os.walk(out))))
        before = {k: _time_query(out, sql, args.rounds) for k, sql in QUERIES.items()}
        t0 = time.perf_counter()
        store.compact(out)
        took = time.perf_counter() - t0
        after = {k: _time_query(out, sql, args.rounds) for k, sql in QUERIES.items()}
        for k in QUERIES:
            (tb, nb), (ta, na) = before[k], after[k]
            assert nb == na, (k, nb, na)
            print("  %-12s %5d rows: one file per evaluation %s; compacted %s (%.0fx)"
                  % (k, nb, _fmt(tb), _fmt(ta), statistics.median(tb) / statistics.median(ta)))
        print("  compact() of the %d evaluations: %.2f s" % (args.evaluations, took))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="builtin-small")
    ap.add_argument("--batch-sizes", default="1,8")
    ap.add_argument("--levels", default="ML")
    ap.add_argument("--evaluations", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-pipeline", action="store_true")
    ap.add_argument("--no-query", action="store_true")
    ap.add_argument("--keep", metavar="DIR", help="run the fork server's zoo into DIR and keep "
                    "it (for `xsp zoo report DIR`)")
    args = ap.parse_args()
    print(common.machine())
    if not args.no_pipeline:
        pipeline(args)
    if not args.no_query:
        query(args)


if __name__ == "__main__":
    main()
