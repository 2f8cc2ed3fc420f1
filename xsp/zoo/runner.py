"""xsp.zoo.runner: runs a zoo's evaluations, each in a process of its own (issue 26).

run(zoo, results_dir) plans the evaluations (every entry at every one of its batch sizes),
skips those the results directory already has with status ok (store.done_keys: resuming a
finished zoo costs the listing only), and runs the others on an engine, local processes by
default or Ray tasks.  Every evaluation ends as a row of the store, ok or not: a model that
fails to build, raises, crashes or times out is a row with its status and reason, never the
end of the run.

The local engine and its worker protocol.  Each entry gets a worker process of its own, which
evaluates the entry's pending batch sizes in turn.  No worker is a fork of this process (the
parent's threads, locks, CUDA context and profiler state are never copied): workers come
from multiprocessing's fork server, a fresh interpreter started at the first run of a process
that imports torch, xsp's measurement and the zoo's writers, and the model packages the zoo's
sources need (transformers for hf:, timm, torchvision), then forks one clean worker per
request.  The server only imports: it builds no model, runs no op, initialises no CUDA (torch
does that at first use) and starts no thread of its own (the libraries' helper threads, as
OpenBLAS's and Arrow's, are re-made after a fork by the libraries themselves), so a worker
starts as a fresh interpreter would, in about a tenth of a second instead of the seconds
those imports take (benchmarks/bench_zoo.py).  The server lives as long as this process and
keeps the environment it was started with: each worker takes this process's os.environ as
its own and, where OMP_NUM_THREADS differs from the server's, sets torch's threads from it.
Where the fork server is not available (not on POSIX), or XSP_ZOO_START=spawn, or the server
cannot start, workers are spawned (a fresh interpreter each, the imports paid per entry).
`jobs` workers run at once.
The worker talks to the parent over a one-way pipe, one message per event:

    ("ready", pid)              imports done: the worker is ready to evaluate
    ("start", i, offset)        evaluation i of its list begins: its timeout starts now; its
                                output begins at byte offset of the log
    ("done", i, row)            evaluation i is written (by the worker), its evaluations row
    ("failed", i, row)          evaluation i raised (in build, input, run or write); the
                                worker has written its failed row and exits
    ("broken", reason)          the worker could not start (an import failed: a memory
                                limit too low, a broken install); it exits
    ("end",)                    every evaluation of its list is done; it exits

The parent waits on the pipes and the processes' sentinels at once
(multiprocessing.connection.wait) with the nearest deadline as its timeout, so that it
sleeps until something happens and polls nothing.  What the parent sees from outside it
writes itself:

    timeout   the current evaluation ran past its timeout (the run's, else the entry's), or a
              worker took START_TIMEOUT to start: the worker's process group is killed and
              the row says after how long
    killed    the worker died of a signal during an evaluation (os.kill(pid, 9), the OOM
              killer, a segfault): the signal's name
    failed    the worker exited with a status during an evaluation (os._exit(3)), or before
              its first one (then the row goes to its next evaluation)

and then starts a new worker for the entry's remaining batch sizes: a worker that failed
once is not trusted with more (every failure consumes one evaluation, so restarts end).

A worker: puts itself in a process group of its own (the terminal's Ctrl-C reaches the parent
only; a timeout kills the model's own children too), asks the kernel to kill it when the
parent dies (PR_SET_PDEATHSIG, Linux), ignores SIGINT, sends its stdout and stderr (the fds,
so that C libraries' output too) to a log file of its own, <results>/logs/<first evaluation
id>.log, and, with memory_limit, sets RLIMIT_AS (address space, in bytes: a worker with
torch and xsp imported holds about 1 GB of it before any model is built).  A row's
output_tail is the end of the log from the evaluation's start (TAIL_LINES lines, TAIL_BYTES
bytes at most).  Logs of workers whose evaluations all succeeded are removed; the others stay
beside the results.

Compaction.  Each evaluation's files are its own (store), and a query reads every file, about a
millisecond each: a run that ends, not interrupted, with COMPACT_AT or more evaluations' own
files in the results directory merges them (store.compact), so that a query over a big zoo
reads a handful of files and one over a few evaluations still finds them one file each.
Another run writing into the same directory meanwhile keeps its files (compact() removes only
what it merged and saw unchanged).

Ctrl-C.  Each evaluation is written by its worker as it finishes (atomically: store), so
nothing finished is lost; the parent kills every worker's process group, waits for them,
closes the progress line and re-raises the KeyboardInterrupt.  Running again resumes.

Progress.  A line on stderr when it is a terminal (progress=None), always (True) or never
(False): tqdm's bar when tqdm is installed, else a plain line; it says evaluations done and
failed, the last one and an ETA (the mean wall time per evaluation so far, times what is
left, over the workers).  It is redrawn only when an evaluation ends, from the parent, never
on a timer.

The Ray engine (engine="ray").  The same evaluations as Ray tasks, one task per evaluation, in
a fresh Ray worker process each (max_calls=1, as the local engine's isolation; no retries:
a crash is a row), requesting one GPU when torch sees CUDA on the driver, else one CPU.
ray.init(address=address) joins a cluster (address="auto": the one this machine belongs to);
without an address a local cluster of `jobs` CPUs (2 by default) is started, and shut down at
the end; a Ray already initialised by the caller is used as it is.  The task calls
evaluate.evaluate and writes its rows itself into the results directory, which must be shared
by the nodes (it is on one machine); the driver writes the rows of timeouts and crashed
workers (WorkerCrashedError: killed).  A task's timeout starts when its log file appears
(the task has imported torch and begins), or START_TIMEOUT after it was submitted; at most as
many tasks as the cluster has GPUs (CPUs) are in flight, so that a submitted task starts.  A
task on the driver's host is keyed by the driver's fingerprint, one on another host by its
own (a resumed run re-runs what another system evaluated).  Under Ray, memory_limit is
refused (RLIMIT_AS would count Ray's own mappings; Ray has its memory monitor), and Ray sets
OMP_NUM_THREADS to the task's CPUs, so torch_threads says 1 for a CPU task.

Python API: run(...) -> Results; the same options as `xsp zoo run`.
"""
import collections
import dataclasses
import hashlib
import json
import os
import signal
import sys
import time

from xsp.core.util import atomic_write
from . import evaluate as _evaluate
from . import store as _store

__all__ = ["run", "Results", "plan", "PRELOAD", "START_ENV", "COMPACT_AT", "START_TIMEOUT",
           "TAIL_LINES", "TAIL_BYTES", "LOGS", "PLANS"]

START_TIMEOUT = 300.0   # seconds a worker may take from its start to its first evaluation
COMPACT_AT = 100        # a run that ends with this many evaluations' own files compacts them
EXIT_GRACE = 30.0       # seconds a worker may take to exit after its last message
TAIL_LINES = 40         # lines of a worker's output kept in a failed row
TAIL_BYTES = 8192       # and bytes at most
LOGS = "logs"           # folder of the workers' logs in the results directory
PLANS = "plans"         # folder of the runs' plans (what `xsp zoo status` counts as pending)
ENGINES = ("local", "ray")


@dataclasses.dataclass
class Results:
    """What a run did: rows, the evaluations rows it wrote (ok or not), in the zoo's order;
    skipped, how many evaluations were done already; done and failed count the rows by
    status (failed: failed, timeout and killed alike)."""
    results_dir: str
    rows: list
    skipped: int = 0

    @property
    def done(self):
        return sum(1 for r in self.rows if r.get("status") == "ok")

    @property
    def failed(self):
        return len(self.rows) - self.done

    @property
    def ok(self):
        """True when no evaluation of this run failed."""
        return self.failed == 0

    def to_pandas(self):
        import pandas as pd
        return pd.DataFrame(self.rows)

    def __repr__(self):
        return "<xsp.zoo.Results %s: %d done, %d failed, %d skipped>" % (
            self.results_dir, self.done, self.failed, self.skipped)


@dataclasses.dataclass
class _Task:
    """One planned evaluation."""
    index: int                  # its place in the zoo's order
    entry: object
    batch_size: int
    key: str
    evaluation_id: str

    @property
    def timeout(self):
        return float(self.entry.timeout_s)

    def label(self):
        return "%s at batch size %d" % (self.entry.name, self.batch_size)


def plan(zoo, system):
    """The evaluations of zoo on system (a fingerprint), in order: each entry at each of its
    batch sizes, as _Task values (index, entry, batch_size, key, evaluation_id)."""
    sid = system.get("system_id")
    out = []
    for e in zoo.entries:
        for b in e.batch_sizes:
            out.append(_Task(len(out), e, int(b), _evaluate.key(e, b, sid),
                             _evaluate.evaluation_id(e, b, sid)))
    return out


def _write_plan(results_dir, tasks):
    """<results>/plans/<digest>.json: the run's evaluations (key, evaluation_id, model,
    batch_size, levels), which `xsp zoo status` counts as pending until they have a row.  The
    name is the digest of the content: the same plan again writes no new file."""
    items = [{"key": t.key, "evaluation_id": t.evaluation_id, "model": t.entry.name,
              "batch_size": t.batch_size, "levels": t.entry.levels} for t in tasks]
    text = json.dumps({"evaluations": items}, sort_keys=True, indent=1) + "\n"
    d = os.path.join(results_dir, PLANS)
    path = os.path.join(d, hashlib.sha256(text.encode()).hexdigest()[:16] + ".json")
    if not os.path.exists(path):
        os.makedirs(d, exist_ok=True)
        atomic_write(path, lambda f: f.write(text))


def run(zoo, results_dir, *, batch_sizes=None, levels=None, options=None, engine="local",
        address=None, jobs=None, timeout=None, memory_limit=None, resume=True, progress=None):
    """Runs every evaluation of zoo that results_dir does not have yet and returns Results
    (see the module docstring).  zoo: a catalog.Zoo, or what catalog.load takes ("builtin",
    "builtin-small", a .toml manifest, a --models string); batch_sizes, levels, options
    (record_shapes, profile_memory, with_stack: {name: bool}): every model's, as `xsp zoo run
    --batch-sizes --levels --record-shapes ...` (catalog.Zoo.override).  A zoo that
    does not load raises catalog.ZooError before anything runs.

    engine: "local" (worker processes) or "ray"; address: the Ray cluster to join (None
    starts a local one).  jobs: evaluations at once (local: workers, default 1; Ray: the
    local cluster's CPUs, default 2, or a cap on the tasks in flight on a cluster).  More
    than one at a time on one machine share its CPUs (and caches, memory bandwidth): their
    latencies are a shared machine's; measure with jobs=1 where the numbers matter.
    timeout: seconds per evaluation, for every entry (default: each entry's own timeout_s).
    memory_limit: bytes of address space per worker (RLIMIT_AS; local engine only).
    resume: skip the evaluations whose key has an ok row (False: evaluate everything again).
    progress: None (a line on stderr when it is a terminal), True or False.  Raises
    ValueError for bad options and KeyboardInterrupt after cleaning up on Ctrl-C."""
    if engine not in ENGINES:
        raise ValueError("engine must be one of %s, not %r" % (", ".join(ENGINES), engine))
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ValueError("jobs must be an int >= 1, not %r" % (jobs,))
    if memory_limit is not None and (isinstance(memory_limit, bool) or
                                     not isinstance(memory_limit, int) or memory_limit < 1):
        raise ValueError("memory_limit must be a positive number of bytes, not %r"
                         % (memory_limit,))
    if memory_limit is not None and engine == "ray":
        raise ValueError("memory_limit is applied by the local engine only (RLIMIT_AS in its "
                         "workers); under Ray, use Ray's memory monitor")
    if engine == "ray":
        _import_ray()               # missing: a ZooError before anything runs
    from . import catalog
    if not isinstance(zoo, catalog.Zoo):
        zoo = catalog.load(zoo)
    if timeout is not None or batch_sizes is not None or levels is not None or options:
        zoo = zoo.override(timeout=timeout, batch_sizes=batch_sizes, levels=levels,
                           options=options or None)
    results_dir = os.fspath(results_dir)
    from . import system as _system
    fingerprint = _system.fingerprint()
    tasks = plan(zoo, fingerprint)
    done = _store.done_keys(results_dir) if resume else set()
    todo = [t for t in tasks if t.key not in done]
    skipped = len(tasks) - len(todo)
    if not todo:
        return Results(results_dir, [], skipped)
    # started only when there is work: the server holds this process's stdout and stderr
    # until its imports are done, and a finished zoo needs none of them
    ctx = _start_context([t.entry for t in todo]) if engine == "local" else None
    os.makedirs(results_dir, exist_ok=True)
    _store.write_system(results_dir, fingerprint)   # also for a run whose every row fails
    _write_plan(results_dir, tasks)
    price = (zoo.system or {}).get("price_per_hour")
    bar = _Progress(len(todo), progress)
    try:
        if engine == "local":
            rows = _Local(ctx, todo, results_dir, fingerprint, price, memory_limit,
                          jobs or 1, bar).run()
        else:
            rows = _run_ray(todo, results_dir, fingerprint, price, address, jobs, bar)
    finally:
        bar.close()
    rows.sort(key=lambda ir: ir[0])
    if _own_files(results_dir) >= COMPACT_AT:
        _store.compact(results_dir)
    return Results(results_dir, [r for _, r in rows], skipped)


def _own_files(results_dir):
    """How many evaluations files of results_dir are an evaluation's own (not compacted)."""
    return sum(1 for n in _store._listing(results_dir, "evaluations")
               if not n.startswith(_store.COMPACT_PREFIX))


# -- output tails -------------------------------------------------------------------------------

def _tail(path, offset=0):
    """The end of a log from offset: TAIL_LINES lines, TAIL_BYTES bytes at most; None when
    empty or unreadable."""
    try:                                # never through a link planted at the log's name
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(offset, size - TAIL_BYTES))
            data = f.read()
    except OSError:
        return None
    lines = data.decode("utf-8", "replace").splitlines()[-TAIL_LINES:]
    text = "\n".join(lines).strip("\n")
    return text or None


def _signal_name(n):
    try:
        return signal.Signals(n).name
    except ValueError:
        return "signal %d" % n


def _exit_reason(exitcode, when):
    """(status, reason) of a worker that ended with exitcode (negative: a signal) `when`."""
    if exitcode is not None and exitcode < 0:
        return "killed", "the worker was killed by %s (%d) %s" % (
            _signal_name(-exitcode), -exitcode, when)
    return "failed", "the worker exited with status %s %s" % (exitcode, when)


def _fmt_s(s):
    return ("%.0f s" if s >= 10 else "%.1f s") % s


# -- the local engine -------------------------------------------------------------------------

def _detach():
    """In a worker: a process group of its own, death with the parent, no SIGINT."""
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)     # PR_SET_PDEATHSIG
            if os.getppid() == 1:       # the parent died before the call
                os._exit(1)
        except (OSError, AttributeError):
            pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _open_log(log_path):
    """A new, empty log_path for writing (appending), made by this process: whatever was at
    that name (a former attempt's log, or a link planted there by someone who can write the
    results directory: the name is predictable) is removed, never followed, and the file is
    created O_EXCL|O_NOFOLLOW; raises OSError when it cannot be (after 10 tries)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
    for _ in range(10):
        try:
            os.unlink(log_path)
        except FileNotFoundError:
            pass
        try:
            return os.open(log_path, flags, 0o644)
        except FileExistsError:
            continue                    # made again between the two calls: once more
    raise OSError("could not create the log %s: something makes it again and again"
                  % log_path)


def _redirect(log_path):
    """fds 1 and 2 into a new log_path (_open_log), sys.stdout/stderr over them,
    line-buffered."""
    fd = _open_log(log_path)
    for n in (1, 2):
        os.dup2(fd, n)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)


def _flush():
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            pass


# what every evaluation imports: the fork server's preload, a spawned worker's first imports
PRELOAD = ("torch", "xsp", "xsp.analysis.tables", "xsp.producers.leveled", "xsp.analysis.flops",
           "xsp.analysis.memory",
           "xsp.zoo.catalog", "xsp.zoo.evaluate", "xsp.zoo.store", "xsp.zoo.system",
           "pyarrow.parquet")
# the packages of the zoo's sources (and their costly common modules), preloaded when the zoo
# has such a source and the package is installed
SOURCE_PACKAGES = {"hf": ("transformers", "transformers.modeling_utils"), "timm": ("timm",),
                   "torchvision": ("torchvision",)}
START_ENV = "XSP_ZOO_START"     # "spawn": spawn every worker (no fork server)


def _start_context(entries):
    """The multiprocessing context workers start from: the fork server, its preload set
    (when it is not running yet) to PRELOAD and the packages of the entries' sources that are
    installed, and the server started now, so that its imports overlap this process's own
    work until the first worker is asked for; "spawn" where there is no fork server, START_ENV says so or the server cannot start."""
    import importlib.util
    import multiprocessing
    if os.environ.get(START_ENV, "forkserver") == "spawn" or \
            "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    extra = []
    for e in entries:
        mods = SOURCE_PACKAGES.get(str(e.source).partition(":")[0], ())
        if mods and mods[0] not in extra and importlib.util.find_spec(mods[0]) is not None:
            extra.extend(mods)
    ctx.set_forkserver_preload(list(PRELOAD) + extra)   # ignored once the server runs
    from multiprocessing import forkserver
    try:
        forkserver.ensure_running()
    except (OSError, EOFError) as exc:
        sys.stderr.write("xsp zoo: the fork server failed to start (%s: %s); workers are "
                         "spawned\n" % (type(exc).__name__, exc))
        return multiprocessing.get_context("spawn")
    return ctx


def _adopt_environment(env):
    """In a worker: env (the parent's os.environ at the run) as its environment; torch's
    threads from OMP_NUM_THREADS where that differs from the one torch was imported with."""
    before = os.environ.get("OMP_NUM_THREADS")
    if env is None or env == dict(os.environ):
        return
    os.environ.clear()
    os.environ.update(env)
    want = env.get("OMP_NUM_THREADS")
    if want != before and want is not None and "torch" in sys.modules:
        try:
            n = int(want)
        except ValueError:
            return
        if n >= 1:
            sys.modules["torch"].set_num_threads(n)


def _worker_main(conn, work, results_dir, system, price, memory_limit, log_path, env=None):
    """A worker of the local engine (see the module docstring): evaluates work, a list of
    (entry, batch_size), in turn, and tells the parent over conn; env: the parent's
    environment."""
    _detach()
    _redirect(log_path)
    import importlib
    import traceback
    try:
        if memory_limit is not None:
            import resource
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
        for name in PRELOAD:        # paid once here; nothing when the fork server did it
            importlib.import_module(name)
        _adopt_environment(env)
    except BaseException as exc:
        traceback.print_exc()
        _exit(conn, ("broken", "start: " + _evaluate._one_line(exc)))
    conn.send(("ready", os.getpid()))
    for i, (entry, batch_size) in enumerate(work):
        print("xsp.zoo: evaluating %s at batch size %d" % (entry.name, batch_size))
        _flush()
        offset = os.fstat(1).st_size
        conn.send(("start", i, offset))
        started = time.time()
        t0 = time.perf_counter()
        try:
            row = _evaluate.evaluate(entry, batch_size, results_dir, system=system,
                                     price_per_hour=price)
        except BaseException as exc:
            if isinstance(exc, _evaluate.EvaluationError):
                reason, details = exc.reason, exc.details
            else:                   # raised outside evaluate's phases (a KeyboardInterrupt)
                reason = "run: " + _evaluate._one_line(exc)
                details = traceback.format_exc()
            sys.stderr.write(details)
            _flush()
            row = _evaluate.failure_row(entry, batch_size, system, "failed", reason,
                                        output_tail=_tail(log_path, offset),
                                        started_at=started,
                                        wall_s=time.perf_counter() - t0, price_per_hour=price)
            try:
                _evaluate.write_failure(results_dir, row)
            except BaseException:
                traceback.print_exc()
                row = None              # the parent writes it
            _exit(conn, ("failed", i, row))
        _flush()
        conn.send(("done", i, row))
    _exit(conn, ("end",))


def _exit(conn, msg):
    """A worker's last message, then its exit: os._exit, so that threads a model left running
    or a slow interpreter teardown do not keep the parent waiting."""
    _flush()
    try:
        conn.send(msg)
        conn.close()
    finally:
        os._exit(0)


class _Worker:
    """The parent's side of one worker process."""

    def __init__(self, ctx, tasks, results_dir, system, price, memory_limit):
        self.tasks = list(tasks)        # this worker's evaluations, in order
        self.current = None             # index of the one running, or None
        self.ready = False
        self.broken = None              # why it could not start, when it said so
        self.exiting = False            # it said its last message
        self.eof = False                # its pipe is closed
        self.reaped = False             # its process has been waited for
        self.finished = set()           # indexes with a row (ok or not)
        self.had_failure = False
        d = os.path.join(results_dir, LOGS)
        os.makedirs(d, exist_ok=True)
        self.log_path = os.path.join(d, self.tasks[0].evaluation_id + ".log")
        try:
            os.unlink(self.log_path)    # a former attempt's: the tail is this one's
        except FileNotFoundError:
            pass
        self.offset = 0
        self.t_start = time.monotonic()
        self.started_at = time.time()
        self.deadline = self.t_start + START_TIMEOUT
        r, w = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(
            target=_worker_main, name="xsp-zoo-worker",
            args=(w, [(t.entry, t.batch_size) for t in self.tasks], results_dir, system,
                  price, memory_limit, self.log_path, dict(os.environ)))
        self.proc.start()
        w.close()
        self.conn = r
        self.alive = True

    def remaining(self):
        """The tasks without a row yet."""
        return [t for i, t in enumerate(self.tasks) if i not in self.finished]

    def exited(self):
        """Whether the worker has exited, without reaping it (its pid, and so its process
        group's id, stay reserved until kill() reaps it)."""
        from multiprocessing.connection import wait
        return bool(wait([self.proc.sentinel], 0))

    def kill(self):
        """Kills the worker's process group (itself and what its model started, which live on
        after a worker that crashed) and reaps it; once reaped, does nothing."""
        if self.reaped:
            return
        pid = self.proc.pid
        # The group's id is the worker's pid, reserved while the worker is unreaped or any
        # member lives.  multiprocessing may reap an exited worker first (Process.start reaps
        # finished children): the id could then only name another group after the kernel's
        # pids wrapped around between that and this call.
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass    # no such group: the worker died before it made its own
        try:
            self.proc.kill()            # a zombie's pid is still its own
        except (ProcessLookupError, OSError):
            pass
        self.proc.join(30)
        self.reaped = self.proc.exitcode is not None

    def close(self):
        try:
            self.conn.close()
        except OSError:
            pass
        try:
            self.proc.close()
        except ValueError:
            pass
        self.alive = False


class _Local:
    """The local engine's parent loop (see the module docstring)."""

    def __init__(self, ctx, tasks, results_dir, system, price, memory_limit, jobs, bar):
        self.ctx = ctx
        self.results_dir = results_dir
        self.system = system
        self.price = price
        self.memory_limit = memory_limit
        self.jobs = jobs
        self.bar = bar
        groups = collections.OrderedDict()
        for t in tasks:
            groups.setdefault(id(t.entry), []).append(t)
        self.queue = collections.deque(groups.values())     # per entry, its pending tasks
        self.workers = []
        self.rows = []                                      # (index, row)
        self.unstartable = None     # why workers cannot start here, once one could not

    def run(self):
        try:
            while self.queue or self.workers:
                while self.queue and len(self.workers) < self.jobs and not self.unstartable:
                    self._start(self.queue.popleft())
                if self.unstartable and not self.workers:
                    self._not_started()
                    break
                self._wait()
        except BaseException:
            for w in self.workers:
                w.kill()
                w.close()
            self.workers = []
            raise
        return self.rows

    def _not_started(self):
        """Once a worker could not start (an import failed, the interpreter died before the
        worker's code ran), none will: every evaluation left gets that failure's row
        without another worker being tried."""
        for tasks in self.queue:
            for t in tasks:
                row = _evaluate.failure_row(
                    t.entry, t.batch_size, self.system, "failed",
                    "not evaluated: no worker could start (see %s)" % self.unstartable,
                    price_per_hour=self.price)
                self.rows.append((t.index, _evaluate.write_failure(self.results_dir, row)))
                self.bar.update(row)
        self.queue.clear()

    def _start(self, tasks):
        try:
            w = _Worker(self.ctx, tasks, self.results_dir, self.system, self.price,
                        self.memory_limit)
        except (OSError, EOFError) as exc:
            if self.ctx.get_start_method() != "forkserver":
                raise
            # the fork server could not start (its preload failed) or answer: spawn instead
            import multiprocessing
            sys.stderr.write("xsp zoo: the fork server failed (%s: %s); workers are spawned\n"
                             % (type(exc).__name__, exc))
            self.ctx = multiprocessing.get_context("spawn")
            w = _Worker(self.ctx, tasks, self.results_dir, self.system, self.price,
                        self.memory_limit)
        self.workers.append(w)

    def _wait(self):
        from multiprocessing.connection import wait
        now = time.monotonic()
        timeout = max(0.0, min(w.deadline for w in self.workers) - now)
        waitables = {}
        for w in self.workers:
            if not w.eof:
                waitables[w.conn] = w
            waitables[w.proc.sentinel] = w
        ready = wait(list(waitables), timeout)
        touched = []
        for obj in ready:
            w = waitables[obj]
            if w not in touched:
                touched.append(w)
        for w in touched:
            self._drain(w)
            if w.exited():
                self._drain(w)          # what it sent before it exited
                self._ended(w)
        now = time.monotonic()
        for w in list(self.workers):
            if w.alive and now >= w.deadline:
                self._drain(w)
                if w.alive and time.monotonic() >= w.deadline:
                    self._timed_out(w)

    def _drain(self, w):
        """Handles every message the worker has sent."""
        while w.alive:
            if w.eof:
                return
            try:
                if not w.conn.poll():
                    return
                msg = w.conn.recv()
            except (EOFError, OSError):
                w.eof = True
                return
            self._message(w, msg)

    def _message(self, w, msg):
        kind = msg[0]
        now = time.monotonic()
        if kind == "ready":
            w.ready = True
            w.deadline = now + START_TIMEOUT
        elif kind == "start":
            i = msg[1]
            w.current = i
            w.t_start, w.started_at = now, time.time()
            w.offset = msg[2]
            w.deadline = now + w.tasks[i].timeout
        elif kind in ("done", "failed"):
            i, row = msg[1], msg[2]
            task = w.tasks[i]
            if row is None:             # the worker could not write its failure
                row = self._failure(w, task, "failed", "the evaluation raised; its row could "
                                    "not be written by the worker (see the output)")
            w.current = None
            w.deadline = now + START_TIMEOUT
            if kind == "failed":
                w.exiting = True
                w.deadline = now + EXIT_GRACE
            self._record(w, i, row)
        elif kind in ("broken", "end"):
            w.exiting = True
            w.deadline = now + EXIT_GRACE
            if kind == "broken":
                w.broken = msg[1]

    def _failure(self, w, task, status, reason, offset=None):
        row = _evaluate.failure_row(
            task.entry, task.batch_size, self.system, status, reason,
            output_tail=_tail(w.log_path, w.offset if offset is None else offset),
            started_at=w.started_at, wall_s=time.monotonic() - w.t_start,
            price_per_hour=self.price)
        return _evaluate.write_failure(self.results_dir, row)

    def _record(self, w, i, row):
        w.finished.add(i)
        if row.get("status") != "ok":
            w.had_failure = True
        self.rows.append((w.tasks[i].index, row))
        self.bar.update(row)

    def _first_pending(self, w):
        for i in range(len(w.tasks)):
            if i not in w.finished:
                return i
        return None

    def _ended(self, w):
        """The worker's process has exited: a row for what it left unfinished, a new worker
        for the rest."""
        w.kill()                        # its group first (what the model left), then reaped
        code = w.proc.exitcode
        if w.current is not None:
            i = w.current
            status, reason = _exit_reason(code, "during the evaluation")
            self._record(w, i, self._failure(w, w.tasks[i], status, reason))
        elif self._first_pending(w) is not None and (w.broken or not w.exiting):
            # it could not start, or died between evaluations: the next one takes the row
            i = self._first_pending(w)
            if w.broken:
                status, reason = "failed", "the worker could not start: " + w.broken
            elif not w.ready:
                status, reason = _exit_reason(code, "before it could start")
                if not _tail(w.log_path):
                    reason += (" (nothing in its log: it died in multiprocessing's "
                               "bootstrap, whose output is this process's stderr; a script "
                               "that calls xsp.zoo.run needs `if __name__ == \"__main__\":`)")
            else:
                status, reason = _exit_reason(code, "between two evaluations")
            if w.broken or not w.ready:
                self.unstartable = "%s at batch size %d" % (w.tasks[i].entry.name,
                                                            w.tasks[i].batch_size)
            self._record(w, i, self._failure(w, w.tasks[i], status, reason, offset=0))
        self._retire(w)

    def _timed_out(self, w):
        if w.exiting and w.current is None:     # said its last word but does not exit
            w.kill()
            self._ended(w)
            return
        if w.current is not None:
            i = w.current
            reason = "the evaluation did not finish in %s (its timeout); the worker " \
                     "was killed" % _fmt_s(w.tasks[i].timeout)
        else:
            i = self._first_pending(w)
            reason = "the worker did not start the evaluation in %s; it was killed" \
                % _fmt_s(START_TIMEOUT)
        w.kill()
        self._drain(w)
        if i is not None and i not in w.finished:
            self._record(w, i, self._failure(w, w.tasks[i], "timeout", reason,
                                             offset=w.offset if w.current is not None else 0))
        w.current = None
        self._retire(w)

    def _retire(self, w):
        """Closes a worker that has ended and queues a new one for its remaining tasks."""
        w.kill()
        w.close()
        self.workers.remove(w)
        left = w.remaining()
        if left:
            self.queue.appendleft(left)
        elif not w.had_failure:
            try:
                os.unlink(w.log_path)
            except OSError:
                pass


# -- progress ---------------------------------------------------------------------------------

class _Progress:
    """The progress line (see the module docstring)."""

    def __init__(self, total, enabled):
        self.total = total
        self.n = self.failed = 0
        self.t0 = time.monotonic()
        self.bar = None
        self.plain = False
        stream = sys.stderr
        if enabled is None:
            try:
                enabled = stream.isatty()
            except (AttributeError, ValueError, OSError):
                enabled = False
        if not enabled:
            return
        try:
            from tqdm.std import tqdm
        except ImportError:
            self.plain = True
            self._draw("")
            return
        self.bar = tqdm(total=total, desc="xsp zoo", unit="eval", file=stream, miniters=1,
                        mininterval=0, dynamic_ncols=True)

    def update(self, row):
        self.n += 1
        if row.get("status") != "ok":
            self.failed += 1
        label = "%s b%s %s" % (row.get("model"), row.get("batch_size"), row.get("status"))
        if self.bar is not None:
            self.bar.set_postfix_str("%d failed, last %s" % (self.failed, label), refresh=False)
            self.bar.update(1)
        elif self.plain:
            self._draw(label)

    def _draw(self, label):
        left = self.total - self.n
        eta = "-"
        if self.n:
            s = (time.monotonic() - self.t0) / self.n * left
            eta = "%d:%02d:%02d" % (s // 3600, s % 3600 // 60, s % 60)
        line = "xsp zoo: %d/%d done, %d failed, ETA %s%s" % (
            self.n, self.total, self.failed, eta, ", last " + label if label else "")
        sys.stderr.write("\r\x1b[K" + line)
        sys.stderr.flush()

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.plain:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self.plain = False


# -- the Ray engine ---------------------------------------------------------------------------

def _ray_task(entry, batch_size, results_dir, system, price, log_path):
    """One evaluation as a Ray task (see the module docstring): its output into log_path, its
    rows written here; returns its evaluations row."""
    import socket
    import traceback

    import torch  # noqa: F401 -- before the log appears: the timeout starts after imports

    import xsp.analysis  # noqa: F401
    if system is not None and system.get("hostname") != socket.gethostname():
        system = None                   # another host: its own fingerprint
    _redirect(log_path)
    print("xsp.zoo: evaluating %s at batch size %d (pid %d)" % (entry.name, batch_size,
                                                                 os.getpid()))
    _flush()
    offset = os.fstat(1).st_size
    started, t0 = time.time(), time.perf_counter()
    try:
        return _evaluate.evaluate(entry, batch_size, results_dir, system=system,
                                  price_per_hour=price)
    except _evaluate.EvaluationError as exc:
        sys.stderr.write(exc.details)
        _flush()
        if system is None:
            from . import system as _system
            system = _system.fingerprint()
        row = _evaluate.failure_row(entry, batch_size, system, "failed", exc.reason,
                                    output_tail=_tail(log_path, offset), started_at=started,
                                    wall_s=time.perf_counter() - t0, price_per_hour=price)
        try:
            return _evaluate.write_failure(results_dir, row)
        except BaseException:
            traceback.print_exc()
            _flush()
            row["_unwritten"] = True
            return row


def _import_ray():
    try:
        import ray
    except ImportError as exc:
        from .catalog import ZooError
        raise ZooError("engine ray: Ray cannot be imported (%s); install it with pip install "
                       "'xsp[ray]'" % (exc,), "engine") from None
    return ray


def _run_ray(tasks, results_dir, system, price, address, jobs, bar):
    import logging
    ray = _import_ray()
    import torch
    started_here = not ray.is_initialized()
    if started_here:
        quiet = {"log_to_driver": False, "logging_level": logging.WARNING}
        if address:
            ray.init(address=address, **quiet)
        else:
            ray.init(num_cpus=jobs or 2, include_dashboard=False, **quiet)
    try:
        gpu = bool(torch.cuda.is_available())
        res = ray.cluster_resources()
        capacity = int(res.get("GPU" if gpu else "CPU", 1)) or 1
        if jobs:
            capacity = min(capacity, jobs)
        need = {"num_gpus": 1} if gpu else {"num_cpus": 1}
        remote = ray.remote(max_retries=0, max_calls=1, **need)(_ray_task)
        return _RayLoop(ray, remote, tasks, results_dir, system, price, capacity, bar).run()
    finally:
        if started_here:
            ray.shutdown()


class _RayLoop:
    """The driver's loop of the Ray engine."""

    def __init__(self, ray, remote, tasks, results_dir, system, price, capacity, bar):
        self.ray, self.remote = ray, remote
        self.pending = collections.deque(tasks)
        self.results_dir, self.system, self.price = results_dir, system, price
        self.capacity = capacity
        self.bar = bar
        # ref -> [task, log path, deadline, start (monotonic) or None, submitted (epoch s)]
        self.inflight = {}
        self.rows = []
        d = os.path.join(results_dir, LOGS)
        os.makedirs(d, exist_ok=True)
        self.log_dir = d

    def run(self):
        ray = self.ray
        try:
            while self.pending or self.inflight:
                while self.pending and len(self.inflight) < self.capacity:
                    self._submit(self.pending.popleft())
                now = time.monotonic()
                wait_s = max(0.0, min(0.5, min(v[2] for v in self.inflight.values()) - now))
                ready, _ = ray.wait(list(self.inflight), num_returns=1, timeout=wait_s)
                for ref in ready:
                    self._finished(ref)
                now = time.monotonic()
                for ref, v in list(self.inflight.items()):
                    task, log, deadline, start = v[:4]
                    if start is None and os.path.exists(log):
                        v[3] = now
                        v[2] = now + task.timeout
                    elif now >= deadline:
                        self._timed_out(ref)
        except BaseException:
            for ref in list(self.inflight):
                try:
                    ray.cancel(ref, force=True)
                except Exception:
                    pass
            raise
        return self.rows

    def _submit(self, task):
        log = os.path.join(self.log_dir, task.evaluation_id + ".log")
        try:
            os.unlink(log)
        except FileNotFoundError:
            pass
        ref = self.remote.remote(task.entry, task.batch_size, self.results_dir, self.system,
                                 self.price, log)
        self.inflight[ref] = [task, log, time.monotonic() + START_TIMEOUT + task.timeout, None,
                              time.time()]

    def _record(self, task, row, log):
        self.rows.append((task.index, row))
        self.bar.update(row)
        if row.get("status") == "ok":
            try:
                os.unlink(log)
            except OSError:
                pass

    def _failure(self, v, status, reason):
        task, log, _, start, submitted = v
        wall = time.monotonic() - start if start is not None else None
        row = _evaluate.failure_row(task.entry, task.batch_size, self.system, status, reason,
                                    output_tail=_tail(log), started_at=submitted, wall_s=wall,
                                    price_per_hour=self.price)
        return _evaluate.write_failure(self.results_dir, row)

    def _finished(self, ref):
        ray = self.ray
        v = self.inflight.pop(ref)
        task, log = v[0], v[1]
        try:
            row = ray.get(ref)
            if row.pop("_unwritten", False):
                row = _evaluate.write_failure(self.results_dir, row)
        except (ray.exceptions.WorkerCrashedError, ray.exceptions.OutOfMemoryError) as exc:
            row = self._failure(v, "killed", "the Ray worker died during the evaluation (%s)"
                                % _evaluate._one_line(exc))
        except ray.exceptions.TaskCancelledError as exc:
            row = self._failure(v, "killed", "the Ray task was cancelled (%s)"
                                % _evaluate._one_line(exc))
        except Exception as exc:
            row = self._failure(v, "failed", "the Ray task failed: %s"
                                % _evaluate._one_line(exc))
        self._record(task, row, log)

    def _timed_out(self, ref):
        ray = self.ray
        v = self.inflight[ref]
        task, start = v[0], v[3]
        ray.cancel(ref, force=True)
        try:
            row = ray.get(ref, timeout=60)      # it finished just before the cancel
            self.inflight.pop(ref)
            self._record(task, row, v[1])
            return
        except Exception:
            pass
        self.inflight.pop(ref)
        if start is not None:
            reason = "the evaluation did not finish in %s (its timeout); the Ray " \
                     "task was cancelled" % _fmt_s(task.timeout)
        else:
            reason = "the Ray task did not start in %s; it was cancelled" % \
                _fmt_s(START_TIMEOUT + task.timeout)
        self._record(task, self._failure(v, "timeout", reason), v[1])
