"""`xsp zoo ...`: the evaluation pipeline's commands (issue 26).

    xsp zoo run [SPEC] [--models SOURCES] [--batch-sizes 1,8] [--levels ML] [--timeout S]
                [--record-shapes] [--profile-memory] [--with-stack]
                [--memory-limit BYTES] [--engine local|ray] [--address ADDR] [-j N]
                [--no-resume] [--no-progress] -o DIR
    xsp zoo list [SPEC]                     the models of a zoo, one a line
    xsp zoo status DIR                      done / failed / pending, the failed with reasons
    xsp zoo query DIR SQL [--format table|csv|json]
    xsp zoo report DIR... [-o zoo.html]     the cross-model report (xsp.zoo.report): text,
                                            or one HTML file; several DIRs (several
                                            machines' results) read as one

SPEC is "builtin", "builtin-small" or a .toml manifest; --models a comma-separated list of
built-in names and sources (catalog.load).  Exit status: 0 when everything asked for is done,
1 when an evaluation failed (its row says why; `xsp zoo status` lists them), 2 for a usage
error (an unknown model or source, a bad option, bad SQL), before anything runs, 130 after a
Ctrl-C (what finished is kept: run again to resume).

xsp/cli.py hands `xsp zoo ARGS` to main(ARGS); `python -m xsp.zoo.cli ARGS` is the same.
Nothing heavy is imported before a command needs it: `list` imports no torch.
"""
import argparse
import glob
import json
import os
import sys

from xsp.analysis import peaks as _peaks

PROG = "xsp zoo"
_UNITS = {"": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40,
          "tb": 1 << 40, "tib": 1 << 40}


class _Usage(Exception):
    """A usage error: the message is printed, the exit status is 2."""


def _bytes(text):
    """'4096', '512M', '8GiB' -> bytes (K, M, G, T are powers of 1024)."""
    t = text.strip().lower()
    num = t.rstrip("kmgtib")
    unit = t[len(num):]
    try:
        value = float(num)
    except ValueError:
        value = None
    if value is None or unit not in _UNITS or value <= 0:
        raise argparse.ArgumentTypeError("expected a size in bytes such as 4294967296, 4G or "
                                         "512MiB, not %r" % text)
    return int(value * _UNITS[unit])


def _batch_sizes(text):
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        sizes = []
    if not sizes or any(b < 1 for b in sizes):
        raise argparse.ArgumentTypeError("expected positive integers, comma-separated "
                                         "(1,8), not %r" % text)
    return sizes


def _positive(text):
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError("expected a positive integer, not %r" % text)
    return n


def _seconds(text):
    try:
        s = float(text)
    except ValueError:
        s = -1
    if not s > 0:
        raise argparse.ArgumentTypeError("expected a positive number of seconds, not %r"
                                         % text)
    return s


def _parser():
    p = argparse.ArgumentParser(prog=PROG, description="XSP's evaluation pipeline: a model zoo "
                                "across batch sizes and systems, into a results database")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="evaluate a zoo into a results directory (resumes)")
    r.add_argument("spec", nargs="?", metavar="SPEC",
                   help="builtin, builtin-small or a .toml manifest")
    r.add_argument("--models", metavar="SOURCES",
                   help="comma-separated built-in names and sources (hf:, timm:, "
                        "torchvision:, python:FILE.py:FUNC), instead of SPEC")
    r.add_argument("--batch-sizes", type=_batch_sizes, metavar="1,8",
                   help="every model's batch sizes")
    r.add_argument("--levels", metavar="ML", help="every model's levels: M, ML or MLG")
    for opt, what in (("record-shapes", "the ops' shapes: FLOPs, bytes, the roofline"),
                      ("profile-memory", "allocations per op: the memory tables"),
                      ("with-stack", "Python calls as spans")):
        r.add_argument("--" + opt, action="store_true",
                       help="every model with %s=True: %s" % (opt.replace("-", "_"), what))
    r.add_argument("--timeout", type=_seconds, metavar="S", help="seconds per evaluation")
    r.add_argument("--memory-limit", type=_bytes, metavar="BYTES",
                   help="address space per worker (RLIMIT_AS): 8G, 512M, ...")
    r.add_argument("--engine", choices=("local", "ray"), default="local")
    r.add_argument("--address", metavar="ADDR",
                   help="the Ray cluster to join (auto: this machine's)")
    r.add_argument("-j", "--jobs", type=_positive, metavar="N",
                   help="evaluations at once (local default 1; a local Ray cluster's CPUs, "
                        "default 2)")
    r.add_argument("--no-resume", action="store_true",
                   help="evaluate everything again, also what is done")
    r.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    r.add_argument("-o", "--output", required=True, metavar="DIR", help="results directory")

    ls = sub.add_parser("list", help="the models of a zoo, one a line")
    ls.add_argument("spec", nargs="?", default="builtin", metavar="SPEC")

    st = sub.add_parser("status", help="done / failed / pending evaluations of a results "
                                       "directory, the failed with their reasons")
    st.add_argument("results", metavar="DIR")

    q = sub.add_parser("query", help="run SQL over a results directory's views (evaluations, "
                                     "layers, layer_types, ops, kernels, systems)")
    q.add_argument("results", metavar="DIR")
    q.add_argument("sql", metavar="SQL")
    q.add_argument("--format", choices=("table", "csv", "json"), default="table")

    rp = sub.add_parser("report", help="the cross-model report of a results directory (of "
                                       "several: the results of several machines, together)")
    rp.add_argument("results", metavar="DIR", nargs="+")
    rp.add_argument("-o", "--output", metavar="zoo.html",
                    help="write the HTML report here (without: the text summary)")
    rp.add_argument("--peaks", metavar="PEAKS",
                    help="the roofline's roofs: a JSON file or text as xsp.analysis.peaks.load takes "
                         "(one machine's, for every system), or 'here' for this machine's "
                         "(measured once and cached, xsp.analysis.peaks); HTML only")
    return p


# -- commands ---------------------------------------------------------------------------------

def _load_zoo(ns):
    from . import catalog
    if ns.spec and ns.models:
        raise _Usage("give a zoo as SPEC or as --models, not both")
    if not ns.spec and not ns.models:
        raise _Usage("give a zoo: SPEC (builtin, builtin-small, a .toml manifest) or --models")
    zoo = catalog.load(ns.spec or ns.models)
    opts = {k: True for k in ("record_shapes", "profile_memory", "with_stack")
            if getattr(ns, k, False)}
    if ns.batch_sizes is not None or ns.levels is not None or opts:
        zoo = zoo.override(batch_sizes=ns.batch_sizes, levels=ns.levels,
                           options=opts or None)
    return zoo


def _run(ns):
    zoo = _load_zoo(ns)             # before the heavier imports: a usage error is quick
    from . import runner
    try:
        res = runner.run(zoo, ns.output, engine=ns.engine, address=ns.address, jobs=ns.jobs,
                         timeout=ns.timeout, memory_limit=ns.memory_limit,
                         resume=not ns.no_resume, progress=False if ns.no_progress else None)
    except ValueError as exc:
        if type(exc).__name__ == "ZooError":
            raise
        raise _Usage(str(exc)) from None
    out = sys.stdout
    out.write("%d evaluated: %d done, %d failed; %d skipped (done before); results in %s\n"
              % (len(res.rows), res.done, res.failed, res.skipped, ns.output))
    _failed_lines(out, [r for r in res.rows if r.get("status") != "ok"])
    return 1 if res.failed else 0


def _failed_lines(out, rows):
    """One line per failed evaluation: model, batch size, status, reason (its first line)."""
    if not rows:
        return
    items = [(str(r["model"]), "batch %d" % int(r["batch_size"]), str(r["status"]),
              (str(r.get("reason") or "").splitlines() or [""])[0]) for r in rows]
    w = [max(len(it[i]) for it in items) for i in range(3)]
    for it in items:
        out.write("  %-*s  %-*s  %-*s  %s\n" % (w[0], it[0], w[1], it[1], w[2], it[2], it[3]))


def _list(ns):
    from . import catalog
    sys.stdout.write(catalog.list_text(catalog.load(ns.spec)))
    return 0


def _status_counts(results_dir):
    """(done keys, failed rows (latest per key without an ok one), pending plan items)."""
    from . import runner, store
    df = store.query(results_dir, "SELECT key, evaluation_id, model, batch_size, status, "
                                  "reason, started_at FROM evaluations")
    done = set(df.loc[df["status"] == "ok", "key"])
    bad = df[(df["status"] != "ok") & ~df["key"].isin(done)]
    bad = bad.sort_values("started_at", kind="stable").drop_duplicates("key", keep="last")
    bad = bad.sort_values(["model", "batch_size"], kind="stable")
    seen = set(df["key"])
    pending = {}
    for path in sorted(glob.glob(os.path.join(results_dir, runner.PLANS, "*.json"))):
        try:
            with open(path, encoding="utf-8") as f:
                items = json.load(f)["evaluations"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        for it in items:
            if it.get("key") not in seen:
                pending.setdefault(it.get("key"), it)
    return done, bad.to_dict("records"), list(pending.values())


def _status(ns):
    if not os.path.isdir(ns.results):
        raise _Usage("%s: no such results directory" % ns.results)
    done, failed, pending = _status_counts(ns.results)
    out = sys.stdout
    out.write("done     %d\nfailed   %d\npending  %d\n" % (len(done), len(failed), len(pending)))
    if failed:
        out.write("failed:\n")
        _failed_lines(out, failed)
    if pending:
        out.write("pending:\n")
        for it in sorted(pending, key=lambda it: (str(it.get("model")),
                                                  int(it.get("batch_size") or 0))):
            out.write("  %s  batch %s\n" % (it.get("model"), it.get("batch_size")))
    return 1 if failed else 0


def _query(ns):
    import duckdb

    from . import store
    if not os.path.isdir(ns.results):
        raise _Usage("%s: no such results directory" % ns.results)
    try:
        df = store.query(ns.results, ns.sql)
    except duckdb.Error as exc:
        raise _Usage("the query failed: %s" % (str(exc).strip().splitlines() or [""])[0]) \
            from None
    out = sys.stdout
    if ns.format == "csv":
        df.to_csv(out, index=False)
    elif ns.format == "json":
        out.write(df.to_json(orient="records", date_format="iso") + "\n")
    elif len(df.columns) and not len(df):
        out.write("  ".join(str(c) for c in df.columns) + "\n")
    else:
        out.write(df.to_string(index=False) + "\n")
    return 0


def _report(ns):
    from . import report
    src = ns.results[0] if len(ns.results) == 1 else ns.results
    peaks = None
    if ns.peaks is not None:
        if not ns.output:
            raise _Usage("--peaks draws the HTML report's roofs: give -o FILE too")
        try:
            peaks = _peaks.get() if ns.peaks == "here" else _peaks.load(ns.peaks,
                                                                         where="--peaks")
        except _peaks.PeaksError as exc:
            raise _Usage(str(exc)) from None
    if ns.output:
        report.html(src, ns.output, peaks=peaks)
        sys.stdout.write("report: %s\n" % ns.output)
    else:
        sys.stdout.write(report.text(src))
    return 0


def main(argv=None):
    """Runs `xsp zoo ARGV`; returns the exit status (see the module docstring)."""
    ns = _parser().parse_args(argv)
    try:
        return {"run": _run, "list": _list, "status": _status, "query": _query,
                "report": _report}[ns.cmd](ns)
    except _Usage as exc:
        sys.stderr.write("%s %s: error: %s\n" % (PROG, ns.cmd, exc))
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("%s %s: interrupted; what finished is kept: run it again to resume\n"
                         % (PROG, ns.cmd))
        return 130
    except BrokenPipeError:
        return 1
    except Exception as exc:
        from .catalog import ZooError
        store = sys.modules.get(__package__ + ".store")
        if isinstance(exc, ZooError) or (store is not None and
                                         isinstance(exc, store.StoreError)):
            sys.stderr.write("%s %s: error: %s\n" % (PROG, ns.cmd, exc))
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
