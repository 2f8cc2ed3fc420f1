"""The command line: `xsp` and `python -m xsp`.

    xsp run [--levels ML] [-o trace.xsp] [--chrome t.json] [--html r.html] script.py [args...]
    xsp run [...] -m package.module [args...]
    xsp run --schedule wait=1,warmup=1,active=3,repeat=2 [...] train.py   (one file per cycle)
    xsp summary trace.xsp [--top N] [--sort self|total|calls|mean|gpu|gpu_self] [--tree DEPTH]
    xsp export trace.xsp -o trace.json            (Chrome trace JSON, for Perfetto)
    xsp export trace.xsp --format otlp --endpoint http://localhost:4318/v1/traces
    xsp report trace.xsp -o report.html           (the self-contained HTML report)
    xsp compare before.xsp after.xsp [--top N] [--fail-above PCT] [--fail-on-change]

Errors (bad arguments, a missing or corrupt file) are one line on stderr, `xsp: error: ...`:
exit status 2 for what the argument parser rejects (an unknown command or option, a missing
argument), 1 for everything else (a bad value, a missing or corrupt file).  `xsp run` exits
with the script's own status (130 after Ctrl-C); the trace is written even when the script
fails.  `xsp compare --fail-above PCT` exits with status 3 (one line on stderr says why) when
the step (model) latency got slower beyond noise by more than PCT percent; with
`--fail-on-change` it exits with status 4 when the runs did different work (an exact
difference: op calls, input shapes, FLOPs, bytes, kernels, copies, syncs, allocations); 3 wins
when both hold; 0 otherwise.
"""
import argparse
import importlib.util
import os
import runpy
import sys

import xsp
from xsp import TraceFormatError, report
from xsp.core.fmt import fmt_ns
from xsp.core.util import printable
from xsp.formats import format_of, load, save


class _Fail(Exception):
    """A one-line error: printed as `xsp: error: <msg>`, exit status 1."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write("xsp: error: %s (see xsp %s--help)\n" % (
            message, (self.prog.split(" ", 1)[1] + " ") if " " in self.prog else ""))
        sys.exit(2)


def _parser():
    p = _Parser(prog="xsp", description="Across-stack profiling for PyTorch: model -> layers "
                "-> aten ops -> CUDA API calls -> GPU kernels, in one trace.")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    sub.required = True

    r = sub.add_parser("run", help="profile a whole Python script or module")
    r.add_argument("--levels", default="ML", help="levels to record: M, L, G (default ML)")
    r.add_argument("-o", "--output", help="trace file to write (default: <script>.xsp)")
    r.add_argument("--chrome", help="also write Chrome trace JSON here")
    r.add_argument("--html", help="also write the HTML report here")
    r.add_argument("--top", type=int, default=10, help="rows per table in the summary")
    r.add_argument("--gpu-fallback", action="store_true",
                   help="record M and L when G is unavailable, instead of failing")
    r.add_argument("--record-shapes", action="store_true",
                   help="record each op's inputs (shapes, dtypes, scalars: torch.profiler's "
                        "record_shapes) and each layer call's input shapes; FLOPs, bytes and "
                        "the roofline come from them")
    r.add_argument("--profile-memory", action="store_true",
                   help="record the allocations PyTorch reports, per op and layer")
    r.add_argument("--with-stack", action="store_true",
                   help="record Python calls as spans: each op's Python stack")
    r.add_argument("--model", metavar="CLASS[,CLASS...]",
                   help="the model's class name(s) (or module.Class): only top-level calls of "
                        "it are model calls, any other top-level call is a layer under the "
                        "step (default: every top-level call but losses and lone built-in "
                        "layers; docs/api.md)")
    r.add_argument("--schedule", metavar="K=V[,K=V...]",
                   help="profile a few steps, as torch.profiler's schedule: keys wait, warmup, "
                   "active, repeat, skip_first (e.g. wait=1,warmup=1,active=3,repeat=1); the "
                   "script marks steps with xsp.step(); one trace file per cycle")
    r.add_argument("-q", "--quiet", action="store_true", help="do not print the summary")
    r.add_argument("-m", dest="module", action="store_true",
                   help="run TARGET as a module (like python -m)")
    r.add_argument("target", metavar="TARGET", help="script path (or module name with -m)")
    r.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")

    s = sub.add_parser("summary", help="print the summary of a saved trace")
    s.add_argument("trace")
    s.add_argument("--top", type=int, default=10, help="rows per table (default 10)")
    s.add_argument("--sort", default="self", choices=["self", "total", "calls", "mean",
                                                       "gpu", "gpu_self"],
                   help="sort key of the op table (default self)")
    s.add_argument("--tree", type=int, metavar="DEPTH",
                   help="also print the span tree of one iteration down to DEPTH (spans under "
                        "1%% of it hidden, repeated siblings folded, 60 lines at most)")
    s.add_argument("--tree-all", action="store_true",
                   help="the whole trace, every span, no line limit, no folding (with "
                        "--tree DEPTH: down to DEPTH)")
    s.add_argument("--include-compile", action="store_true",
                   help="count the iterations in which torch.compile compiled in the tables "
                        "and shares (left out by default, as in the step line)")

    e = sub.add_parser("export", help="convert a saved trace: Chrome trace JSON (Perfetto "
                       "first), Kineto's JSON (torch.profiler's, for HTA and TensorBoard), or "
                       "OpenTelemetry spans (sent over OTLP/HTTP, or OTLP/JSON for Jaeger)")
    e.add_argument("trace")
    e.add_argument("-o", "--output", help="file to write (.gz: compressed); required but for "
                   "--format otlp")
    e.add_argument("--format", choices=["chrome", "kineto", "otlp", "otlp-json"],
                   help="default: as xsp.save, from -o's extension (.pt.trace.json[.gz]: "
                   "kineto, .otlp.json[.gz]: otlp-json, any other: chrome), otlp with "
                   "--endpoint")
    e.add_argument("--endpoint", metavar="URL", help="otlp: the collector's OTLP/HTTP traces "
                   "URL, e.g. http://localhost:4318/v1/traces")
    e.add_argument("--service", default="xsp", help="otlp: resource service.name (default "
                   "xsp)")
    e.add_argument("--trace-per", choices=["profile", "step"], default="profile",
                   help="otlp: one trace id for the whole profile (default) or one per step")
    e.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="otlp: give up after this long, retries included (default 10)")

    h = sub.add_parser("report", help="write the self-contained HTML report of a saved trace")
    h.add_argument("trace")
    h.add_argument("-o", "--output", required=True, help="HTML file to write")
    h.add_argument("--top", type=int, default=10)

    c = sub.add_parser("compare", help="what changed between two runs, beyond their noise: "
                       "step, phases, layers (by name and type), ops, kernels")
    c.add_argument("before")
    c.add_argument("after")
    c.add_argument("--top", type=int, default=20, help="rows per table (default 20)")
    c.add_argument("--fail-above", type=float, metavar="PCT",
                   help="exit with status 3 when the step latency got slower beyond noise by "
                   "more than PCT percent (for CI)")
    c.add_argument("--fail-on-change", action="store_true",
                   help="exit with status 4 when the runs did different work: an exact "
                   "difference (op calls, input shapes, FLOPs, bytes, kernels, copies, syncs, "
                   "allocations)")

    g = sub.add_parser("merge", help="one trace of a distributed job from its ranks' traces, "
                       "on rank 0's clock (docs/distributed.md)")
    g.add_argument("traces", nargs="+", help="one trace per rank (.xsp or Kineto JSON)")
    g.add_argument("-o", "--output", required=True, help="the merged .xsp file to write")
    g.add_argument("--allow-missing", action="store_true",
                   help="merge even when some ranks of the world size are missing")
    g.add_argument("-q", "--quiet", action="store_true", help="do not print the summary")
    sub.add_parser("zoo", add_help=False,
                   help="XSP's evaluation pipeline over a model zoo: xsp zoo run|list|status|"
                        "query|report (xsp zoo --help; docs/zoo.md)")
    return p


def _load(path):
    """An .xsp file, or a torch.profiler (Kineto JSON) trace."""
    try:
        return load(path)
    except TraceFormatError as exc:
        raise _Fail(str(exc).replace("\n", " ")) from None
    except OSError as exc:
        msg = str(exc)
        raise _Fail(msg if path in msg else "cannot read %s: %s" % (path, msg)) from None


def _write(what, fn, path):
    try:
        fn(path)
    except OSError as exc:
        raise _Fail("cannot write %s %s: %s" % (what, path, exc.strerror or exc)) from None


def _print_script_error(exc):
    """The script's traceback without the frames of xsp's runner and runpy."""
    import traceback                # here: only xsp run prints a script's traceback
    here = os.path.abspath(__file__)
    skip = {here, os.path.abspath(runpy.__file__), "<frozen runpy>"}
    tb = exc.__traceback__
    while tb is not None and (tb.tb_frame.f_code.co_filename in skip or os.path.abspath(
            tb.tb_frame.f_code.co_filename) in skip):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb if tb is not None else exc.__traceback__)


def _run(ns):
    if ns.top < 1:
        raise _Fail("--top must be at least 1")
    try:
        levels = xsp.parse_levels(ns.levels)
    except (TypeError, ValueError) as exc:
        raise _Fail("--levels: %s" % exc) from None
    if ns.module:
        sys.path.insert(0, os.getcwd())      # as `python -m` does
        try:
            found = importlib.util.find_spec(ns.target) is not None
        except (ImportError, ValueError) as exc:
            found = False
            why = str(exc)
        else:
            why = "no module named %r" % ns.target
        finally:
            sys.path.pop(0)
        if not found:
            raise _Fail("-m %s: %s" % (ns.target, why))
        label = ns.target
    else:
        if not os.path.isfile(ns.target):
            raise _Fail("no such script: %s" % ns.target)
        label = os.path.basename(ns.target)
    label = printable(label)
    models = None
    if ns.model is not None:
        models = [m.strip() for m in ns.model.split(",")]
        if not all(models):
            raise _Fail("--model: give one or more class names separated by commas, e.g. "
                        "--model ResNet or --model ResNet,Head (not %r)" % ns.model)
    sched = _parse_schedule(ns.schedule) if ns.schedule is not None else None
    out = ns.output or (os.path.splitext(label)[0] if not ns.module
                        else ns.target.rsplit(".", 1)[-1]) + ".xsp"
    rank = _launcher_rank()
    if rank is not None:
        # under torchrun every rank runs this command line: one set of files per rank
        out, ns.chrome, ns.html = (_suffixed(p, "rank%d" % rank)
                                   for p in (out, ns.chrome, ns.html))
    # absolute now: the script may change the working directory
    paths = {opt: os.path.abspath(p) for opt, p in (("-o", out), ("--chrome", ns.chrome),
                                                    ("--html", ns.html)) if p}
    for opt, path in paths.items():
        if not os.path.isdir(os.path.dirname(path)):
            raise _Fail("%s %s: no such directory" % (opt, os.path.dirname(path)))
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [ns.target] + list(ns.args)
    sys.path.insert(0, os.getcwd() if ns.module else
                    os.path.dirname(os.path.abspath(ns.target)))
    status = 0
    cycles = _CycleWriter(ns, out, paths, sched) if sched is not None else None
    if "M" in levels and "L" not in levels and "torch" not in sys.modules \
            and importlib.util.find_spec("torch") is not None:
        # level M wraps nn.Module.__call__ when torch is there at start; the script imports
        # torch only later, so import it first (it would be imported by the script anyway)
        import torch  # noqa: F401
    real_exit = os._exit
    try:
        try:
            prof = xsp.profile(levels=levels, name=label, gpu_fallback=ns.gpu_fallback,
                               record_shapes=ns.record_shapes,
                               profile_memory=ns.profile_memory, with_stack=ns.with_stack,
                               model=models, schedule=sched,
                               on_trace_ready=cycles)
        except xsp.ProfilerError as exc:        # G unavailable, a session already active
            raise _Fail(str(exc).replace("pass gpu_fallback=True", "pass --gpu-fallback")
                        .replace("levels='ML'", "--levels ML")) from None
        _set_exit(_exit_hook(real_exit, lambda: _finish(ns, prof.stop(), 0, cycles, prof, out,
                                                       paths, models), ns.quiet))
        try:
            # `with`: its __enter__ and __exit__ are single C calls, so a Ctrl-C cannot land
            # between starting the profile and the block that stops it
            with prof:
                status = _run_script(ns)
        except KeyboardInterrupt:       # in the script or during stop: the trace is kept
            sys.stderr.write("KeyboardInterrupt\n")
            status = 130
        except xsp.ProfilerError as exc:
            if prof.trace is None:      # start failed, or stop lost the trace
                raise _Fail(str(exc)) from None
            _print_script_error(exc)    # the script's own ProfilerError
            status = 1
        except Exception as exc:        # noqa: BLE001 -- the script's failure, reported
            _print_script_error(exc)
            status = 1
    finally:
        _set_exit(real_exit)
        sys.argv = saved_argv
        sys.path[:] = saved_path
    return _finish(ns, prof.trace, status, cycles, prof, out, paths, models)


def _set_exit(fn):
    """fn as os._exit and as posix._exit (the same function under its module's name, which
    `import posix; posix._exit(n)` reaches): the hook and the real one, both or neither."""
    os._exit = fn
    posix = sys.modules.get("posix")
    if posix is not None:
        posix._exit = fn


def _exit_hook(real_exit, finish, quiet):
    """os._exit (or posix._exit) while xsp run runs the script: finish() (stop the profile, write its files and
    the report, as at the script's end), then the real os._exit.

    Why stop and write there rather than only warn: a script that ends with os._exit (to skip
    slow interpreter teardown, or after its own flush) means "exit now, skip the cleanup",
    not "lose the profile"; stopping is one C call and the writes are those of a normal end,
    none of which runs the script's code (no finally blocks, atexit handlers or __del__s that
    os._exit skips), so the script sees the os._exit it asked for, only later.  Where that is
    not safe it only says so: in a process the script forked (a multiprocessing or DataLoader
    worker, whose profile is an inert copy: the files are the parent's; silent there, as os._exit
    is how such children end), and on another thread than the script's (a profile stops only
    on the thread that started it).  The status is always n."""
    import threading
    pid, thread = os.getpid(), threading.get_ident()

    def _exit(n):
        if os.getpid() != pid or not isinstance(n, int):
            return real_exit(n)                 # a forked child; or real_exit's TypeError
        _set_exit(real_exit)                    # once: a second call (from finish) is real
        what = "xsp run: the script called os._exit(%d)" % n
        if threading.get_ident() != thread:
            msg = what + (" on a thread of its own: no trace was written (a profile stops "
                          "only on the thread that started it)")
        else:
            try:
                finish()
                msg = None if quiet else what + ": the trace was written before exiting"
            except _Fail as exc:
                msg = "xsp: error: %s\n%s: not every file was written" % (exc, what)
            except BaseException as exc:        # noqa: BLE001 -- say it, then exit as asked
                msg = what + ": no trace was written (%s: %s)" % (type(exc).__name__, exc)
        if msg:
            sys.stderr.write(msg + "\n")
        sys.stderr.flush()
        real_exit(n)
    return _exit


def _finish(ns, trace, status, cycles, prof, out, paths, models):
    """After the script: the trace, --chrome and --html files and the report; returns the exit
    status (status, or raises _Fail when a file cannot be written)."""
    if cycles is not None and prof._state != "forked":
        return cycles.finish(trace, status)
    if trace is None:
        # a child forked by the script that left the profiled region: its copy of the profile
        # is inert and has no trace; the files are the parent's to write
        return status
    _write("trace", lambda p: save(trace, p, format="xsp"), paths["-o"])
    if ns.chrome:
        _write("Chrome trace", lambda p: save(trace, p, format="chrome"), paths["--chrome"])
    if ns.html:
        _write("HTML report", lambda p: report.html(trace, path=p, top=ns.top), paths["--html"])
    if models and not (trace.kind_codes == xsp.values.trace.KINDS.index("model")).any():
        tops = sorted({s.attrs.get("type", s.name) for s in trace.spans(kind="module")
                       if s.parent is None or trace[s.parent].kind in ("step", "region")})
        sys.stderr.write("xsp: warning: --model %s matched no top-level call, so there are no "
                         "model spans (the top-level calls were of: %s)\n"
                         % (ns.model, ", ".join(map(str, tops)) or "none"))
    if not ns.quiet:
        sys.stderr.write(report.text(trace, top=ns.top))
        sys.stderr.write("trace: %s%s%s\n" % (
            out, (", chrome: " + ns.chrome) if ns.chrome else "",
            (", html: " + ns.html) if ns.html else ""))
    return status


_SCHEDULE_KEYS = ("wait", "warmup", "active", "repeat", "skip_first")


def _parse_schedule(text):
    """--schedule "wait=1,warmup=1,active=3,repeat=1" -> xsp.schedule; _Fail when bad."""
    fields = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, eq, value = (x.strip() for x in part.partition("="))
        if key not in _SCHEDULE_KEYS:
            raise _Fail("--schedule: unknown key %r in %r (keys: %s)"
                        % (key, text, ", ".join(_SCHEDULE_KEYS)))
        if key in fields:
            raise _Fail("--schedule: %s given twice" % key)
        if not eq or not value.isascii() or not value.isdigit():
            raise _Fail("--schedule: %s=%s: the value must be a whole number (0, 1, 2, ...)"
                        % (key, value))
        fields[key] = int(value)
    if not fields:
        raise _Fail("--schedule: give key=value pairs, e.g. wait=1,warmup=1,active=3,repeat=1")
    try:
        return xsp.schedule(**fields)
    except ValueError as exc:
        raise _Fail("--schedule: %s" % str(exc).replace("xsp.schedule: ", "")) from None


def _launcher_rank():
    """This process's rank when a launcher (torchrun) runs several (WORLD_SIZE > 1), else
    None."""
    r, w = os.environ.get("RANK", ""), os.environ.get("WORLD_SIZE", "")
    if r.isdigit() and w.isdigit() and int(w) > 1:
        return int(r)
    return None


def _suffixed(path, tag):
    """run.xsp -> run.<tag>.xsp (None stays None)."""
    if path is None:
        return None
    stem, ext = os.path.splitext(path)
    return "%s.%s%s" % (stem, tag, ext)


class _CycleWriter:
    """xsp run --schedule: on_trace_ready, writing each cycle's files as it is delivered (so a
    long job keeps one trace at a time): <out> when the schedule has a single cycle (repeat=1),
    else <stem>.cycle<k><ext> for -o, --chrome and --html alike.  Never raises into the script:
    a file it cannot write is reported after the run (exit status 1)."""

    def __init__(self, ns, out, paths, sched):
        self.ns, self.sched, self.paths = ns, sched, paths
        self.shown = {"-o": out, "--chrome": ns.chrome, "--html": ns.html}
        self.written = {opt: [] for opt in paths}     # option -> the paths shown, in order
        self.errors = []

    def _name(self, path, k):
        if self.sched.repeat == 1:
            return path
        return _suffixed(path, "cycle%d" % k)

    def __call__(self, prof):
        trace, ns = prof.trace, self.ns
        k = trace.meta.get("cycle", 0)
        outputs = (("-o", "trace", lambda p: save(trace, p, format="xsp")),
                   ("--chrome", "Chrome trace", lambda p: save(trace, p, format="chrome")),
                   ("--html", "HTML report", lambda p: report.html(trace, path=p, top=ns.top)))
        for opt, what, fn in outputs:
            if opt not in self.paths:
                continue
            try:
                _write(what, fn, self._name(self.paths[opt], k))
            except _Fail as exc:
                self.errors.append(str(exc))
            except Exception as exc:   # noqa: BLE001 -- reported after the run, not raised here
                self.errors.append("cannot write %s of cycle %d: %s" % (what, k, exc))
            else:
                self.written[opt].append(self._name(self.shown[opt], k))

    def finish(self, trace, status):
        """After the run: the last cycle's summary and the files written."""
        if trace is None:
            sys.stderr.write("xsp: no cycle of %r recorded an active step: no trace written\n"
                             % (self.sched,))
        elif not self.ns.quiet:
            sys.stderr.write(report.text(trace, top=self.ns.top))
            sys.stderr.write("%s\n" % "; ".join(
                "%s: %s" % (what, ", ".join(self.written[opt]))
                for opt, what in (("-o", "trace"), ("--chrome", "chrome"), ("--html", "html"))
                if self.written.get(opt)))
        if self.errors:
            raise _Fail("; ".join(self.errors))
        return status


def _run_script(ns):
    """Runs the script or module as __main__; returns its exit status (sys.exit's).  Any other
    exception, KeyboardInterrupt included, leaves through the profile's with block, so that the
    trace says how the script ended (meta "interrupted" or "exception")."""
    try:
        if ns.module:
            runpy.run_module(ns.target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(ns.target, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if not isinstance(code, int) and code is not None:
            sys.stderr.write("%s\n" % code)
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


def _summary(ns):
    from xsp.report import summary     # pandas: here, so that the other commands stay light
    if ns.top < 1:
        raise _Fail("--top must be at least 1")
    if ns.tree is not None and ns.tree < 0:
        raise _Fail("--tree must be at least 0")
    trace = _load(ns.trace)
    sort = {"gpu": "gpu_ns", "gpu_self": "gpu_self_ns", "calls": "calls"}.get(
        ns.sort, ns.sort + "_ns")
    if sort.startswith("gpu") and "G" not in str(trace.meta.get("levels", "")):
        raise _Fail("--sort %s: %s has no GPU times (level G was not recorded)"
                    % (ns.sort, ns.trace))
    # a merged job: the ranks, then each rank's report (the tree is of the last rank's)
    sys.stdout.write(report.text(trace, top=ns.top, op_sort=sort,
                                 include_compile=ns.include_compile))
    if "ranks" in trace.meta:
        from xsp.analysis import distributed    # here: only a merged job has ranks
        last = [int(r) for r in str(trace.meta["ranks"]).split(",")][-1]
        trace = distributed.rank_trace(trace, last)
    if ns.tree_all:                 # the whole trace, down to --tree DEPTH when given
        sys.stdout.write("\n" + trace.tree(max_depth=ns.tree, fold=False) + "\n")
    elif ns.tree is not None:
        root, what = summary.median_iteration(trace)
        sys.stdout.write("\nTree of %s (depth <= %d; spans under 1%% hidden, repeated "
                         "siblings folded; --tree-all for everything)\n" % (what, ns.tree))
        sys.stdout.write(trace.tree(root=root, max_depth=ns.tree, min_share=0.01, fold=True,
                                    max_lines=60) + "\n")
    return 0


# xsp.formats.format_of's names -> export's --format
_EXPORT_FORMAT = {"kineto": "kineto", "chrome": "chrome", "otlp": "otlp-json"}


def _export_format(ns):
    """--format, or what xsp.save would write to -o (with --endpoint: otlp)."""
    if ns.format is not None:
        return ns.format
    if ns.endpoint and not ns.output:
        return "otlp"
    if ns.output and format_of(ns.output) == "xsp":
        raise _Fail("-o %s: xsp export writes JSON (chrome, kineto or otlp-json), not a .xsp "
                    "file: copy the trace, or pass --format" % ns.output)
    return _EXPORT_FORMAT.get(format_of(ns.output) if ns.output else None, "chrome")


def _export(ns):
    ns.format = _export_format(ns)
    if ns.format == "otlp" and not ns.endpoint:
        raise _Fail("--format otlp needs --endpoint URL (the collector's OTLP/HTTP traces URL, "
                    "e.g. http://localhost:4318/v1/traces)")
    if ns.format != "otlp" and not ns.output:
        raise _Fail("--format %s needs -o FILE" % ns.format)
    if ns.format == "otlp" and ns.output:
        raise _Fail("--format otlp sends to --endpoint and writes no file: leave out -o (or "
                    "use --format otlp-json -o FILE)")
    if ns.format.startswith("otlp"):
        if ns.endpoint and ns.format != "otlp":
            raise _Fail("--endpoint is for --format otlp (otlp-json writes -o FILE)")
        if not 0 < ns.timeout < float("inf"):
            raise _Fail("--timeout must be a number of seconds > 0, not %s" % ns.timeout)
        return _export_otlp(ns, _load(ns.trace))
    trace = _load(ns.trace)
    what = "Kineto trace" if ns.format == "kineto" else "Chrome trace"
    _write(what, lambda p: save(trace, p, format=ns.format), ns.output)
    return 0


def _export_otlp(ns, trace):
    """--format otlp (send to --endpoint) and otlp-json (write -o): one line says what was
    done; a wall-clock anchor estimated at export is a warning line."""
    import warnings
    from xsp.formats import otlp
    opts = {"service": ns.service, "trace_per": ns.trace_per}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if ns.format == "otlp":
                n = otlp.send(trace, ns.endpoint, timeout=ns.timeout, **opts)
            else:
                _write("OTLP JSON", lambda p: otlp.write(trace, p, **opts), ns.output)
        except (ImportError, ValueError, TypeError, otlp.ExportError) as exc:
            raise _Fail(str(exc).replace("\n", " ")) from None
    for w in caught:
        sys.stderr.write("xsp: warning: %s\n" % w.message)
    if ns.format == "otlp":
        sys.stdout.write("sent %d spans to %s\n" % (n, ns.endpoint))
    else:
        sys.stdout.write("wrote %d spans as OTLP JSON to %s\n" % (len(trace), ns.output))
    return 0


def _report(ns):
    if ns.top < 1:
        raise _Fail("--top must be at least 1")
    trace = _load(ns.trace)
    _write("HTML report", lambda p: report.html(trace, path=p, top=ns.top), ns.output)
    return 0


def _compare(ns):
    from xsp.analysis.compare import compare, fmt_change, fmt_exact     # pandas
    if ns.top < 1:
        raise _Fail("--top must be at least 1")
    pct = ns.fail_above
    if pct is not None and not 0 <= pct < float("inf"):
        raise _Fail("--fail-above must be a percentage >= 0, not %s" % pct)
    before, after = _load(ns.before), _load(ns.after)
    c = compare(before, after)
    sys.stdout.write(report.text(c, top=ns.top, names=(ns.before, ns.after)))
    sys.stdout.flush()
    if pct is not None:
        w = c.worst(pct / 100.0)
        if w is not None:
            sys.stderr.write("xsp compare: %s latency slower by %s, beyond the noise (%s) and "
                             "above --fail-above %g%%\n" % (w["what"], fmt_change(
                                 w["delta_ns"], w["delta_share"]), fmt_ns(w["noise_ns"]), pct))
            return 3
        if min(c.iterations) < 2:
            sys.stderr.write("xsp compare: --fail-above: a run has fewer than 2 iterations, so "
                             "no change can be called; record more steps\n")
    if ns.fail_on_change and c.changed:
        r = c.changes.iloc[0]
        sys.stderr.write("xsp compare: the runs did different work: %d exact difference%s, "
                         "the first %s %s%s %s -> %s per iteration (--fail-on-change)\n" % (
                             len(c.changes), "" if len(c.changes) == 1 else "s", r["figure"],
                             r["name"], " " + r["inputs"] if r["inputs"] else "",
                             fmt_exact(r["before"]), fmt_exact(r["after"])))
        return 4
    return 0


def _merge(ns):
    from xsp.analysis import distributed
    from xsp.report import ranks
    traces = [_load(p) for p in ns.traces]
    try:
        job = distributed.merge(traces, allow_missing=ns.allow_missing, names=ns.traces)
    except distributed.MergeError as exc:
        raise _Fail(str(exc)) from None
    _write("merged trace", lambda p: save(job, p, format="xsp"), ns.output)
    if not ns.quiet:
        sys.stdout.write(ranks.text(job))
        sys.stdout.write("merged: %s\n" % ns.output)
    return 0


def main(argv=None):
    """Entry point of `xsp` and `python -m xsp`; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["zoo"]:
        # the evaluation pipeline's commands (docs/zoo.md), their own parser
        from xsp.zoo import cli as zoo_cli
        return zoo_cli.main(argv[1:])
    ns = _parser().parse_args(argv)
    try:
        if ns.cmd != "run" and "XSP_KINETO_MAX_BYTES" in os.environ:
            from xsp.formats import kineto
            try:                        # the reading commands' cap: a bad one said at once
                kineto.max_bytes_default()
            except ValueError as exc:
                raise _Fail(str(exc)) from None
        return {"run": _run, "summary": _summary, "export": _export, "report": _report,
                "compare": _compare, "merge": _merge}[ns.cmd](ns)
    except _Fail as exc:
        sys.stderr.write("xsp: error: %s\n" % exc)
        return 1
    except BrokenPipeError:
        return 1


if __name__ == "__main__":
    sys.exit(main())
