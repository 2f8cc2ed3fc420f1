"""xsp's pytest plugin: performance tests that say which layer or op made them slower.

Installed with xsp (entry point pytest11: xsp = xsp.pytest_plugin), active in every pytest run
of a project where xsp is installed, off with `-p no:xsp`.  docs/pytest.md is the guide.

    def test_train_step(xsp_measure):
        m = xsp_measure(train_step, levels="ML", repeat=20)      # an xsp.perf.Result
        m.check(latency="5 ms", ops={"aten::mm": 6}, bytes_allocated="2 MiB")

    def test_trace(xsp_profile):
        with xsp_profile(levels="ML") as prof:
            model(x)
        assert prof.trace.find("Linear")

    @pytest.mark.xsp(threshold=10, repeat=30, allow={"ops": 1})   # per-test options

Options (and ini keys): --xsp-save=DIR (xsp_save): save every test's traces and results;
--xsp-baseline=DIR (xsp_baseline): compare each measured test with its stored run;
--xsp-save-baseline=DIR (xsp_save_baseline): store this run's results as the baseline;
--xsp-threshold=PCT (xsp_threshold, default 5): how much slower than the baseline, beyond the
noise, fails; --xsp-json=PATH (xsp_json): the session's results as JSON.

How it is built: each measurement's record is computed in the test (in pytest-xdist's worker
when there is one) and travels to the controller on the call's TestReport, as the attribute
`xsp_results` (plain data, which xdist serialises with the report); the terminal summary and
the JSON file are written by the controller from those reports only, so workers never share a
file.  Baselines are one file per test and measurement, written and read by whichever process
runs the test.  junitxml gets `xsp.*` properties through item.user_properties.
"""
import hashlib
import json
import math
import os
import re
import sys

import pytest

from xsp import _core, perf
from xsp.core.fmt import fmt_bytes, fmt_ns, fmt_signed
from xsp.core.util import atomic_write
from xsp.formats import save
from xsp.perf import _clean
from xsp.producers.profiler import profile


def _num(v):
    """v, or None for NaN (JSON has no NaN)."""
    return None if isinstance(v, float) and v != v else v


RESULTS_SCHEMA = "xsp.pytest-results/1"
MARKER_KEYS = ("threshold", "levels", "repeat", "warmup", "rounds", "allow", "budget")
DEFAULTS = {"levels": "ML", "repeat": 10, "warmup": 3, "rounds": 1}
FAILURE_LINES = 4           # per measurement, in the terminal summary
_ITEM = pytest.StashKey()
_STATE = pytest.StashKey()


class ProfileLeftOpen(AssertionError):
    """A test ended with an xsp profile still recording; the plugin stopped it."""


# -- options --------------------------------------------------------------------------------
def pytest_addoption(parser):
    group = parser.getgroup("xsp", "xsp performance tests (docs/pytest.md)")
    for opt, ini, meta, helptext in (
            ("--xsp-save", "xsp_save", "DIR",
             "save every xsp trace and result of the run under DIR"),
            ("--xsp-baseline", "xsp_baseline", "DIR",
             "compare each xsp_measure with its stored run under DIR"),
            ("--xsp-save-baseline", "xsp_save_baseline", "DIR",
             "store each xsp_measure's result under DIR as the baseline"),
            ("--xsp-threshold", "xsp_threshold", "PCT",
             "fail a test whose latency is slower than its baseline beyond the noise and by "
             "more than PCT percent (default 5)"),
            ("--xsp-json", "xsp_json", "PATH", "write the session's xsp results to PATH")):
        group.addoption(opt, dest=ini, metavar=meta, default=None, help=helptext)
        parser.addini(ini, helptext + " (%s)" % opt, default=None)


def _option(config, key):
    """(value, where it came from): the command line's option, else the ini key's; None
    when neither is set (or set empty)."""
    v = config.getoption(key)
    if v is not None:
        return (v or None), "--" + key.replace("_", "-")
    v = config.getini(key)
    return (v or None), key


def _path(config, key):
    """The option's path made absolute once, at configure: a command-line path relative to
    the directory pytest was started in, an ini path relative to the ini file's directory
    (the rootdir without one), so that a test that changes directory, or a run started in a
    subdirectory, still reads and writes the same files.  (None, None) when not set."""
    v, src = _option(config, key)
    if v is None:
        return None, src
    if src.startswith("--"):
        base = str(config.invocation_params.dir)
    else:
        base = str(config.inipath.parent) if config.inipath else str(config.rootpath)
    return os.path.abspath(os.path.join(base, os.path.expanduser(str(v)))), src


def _writable_dir(path, src):
    """Makes directory path (and its parents), or raises pytest.UsageError saying why not."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise pytest.UsageError("%s: %s is not a directory" % (src, path))
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise pytest.UsageError("%s: cannot make directory %s: %s" % (
            src, path, exc.strerror or exc)) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise pytest.UsageError("%s: directory %s is not writable" % (src, path))


class _State:
    """The session's settings and, on the controller, the results gathered from reports."""

    def __init__(self, config):
        self.worker = hasattr(config, "workerinput")
        self.save, src_save = _path(config, "xsp_save")
        self.baseline, src_base = _path(config, "xsp_baseline")
        self.save_baseline, src_saveb = _path(config, "xsp_save_baseline")
        self.json, src_json = _path(config, "xsp_json")
        t, src_t = _option(config, "xsp_threshold")
        try:
            self.threshold = 5.0 if t is None else float(t)
            if not 0 <= self.threshold < math.inf:
                raise ValueError
        except ValueError:
            raise pytest.UsageError("%s must be a percentage >= 0, not %r" % (src_t, t)) \
                from None
        if self.baseline and not os.path.isdir(self.baseline):
            raise pytest.UsageError("%s: %s is not a directory (make one with "
                                    "--xsp-save-baseline=%s)" % (src_base, self.baseline,
                                                                 self.baseline))
        for path, src in ((self.save, src_save), (self.save_baseline, src_saveb)):
            if path:
                _writable_dir(path, src)
        if self.json:
            if os.path.isdir(self.json):
                raise pytest.UsageError("%s: %s is a directory, not a file" % (src_json,
                                                                               self.json))
            _writable_dir(os.path.dirname(self.json), src_json)
        self.results = []           # controller: what the reports carried
        self.worker = hasattr(config, "workerinput")

    # registered as a plugin by pytest_configure: the hooks that gather and write results
    def pytest_runtest_logreport(self, report):
        recs = getattr(report, "xsp_results", None)
        if not recs or report.when != "call" or self.worker:
            return
        for r in recs:
            r = dict(r)
            r["outcome"] = report.outcome
            self.results.append(r)

    def pytest_terminal_summary(self, terminalreporter):
        if self.worker or not self.results:
            return
        _summary(terminalreporter, self)

    def pytest_sessionfinish(self, session):
        if self.worker or not self.json:
            return
        doc = {"schema": RESULTS_SCHEMA, "threshold_pct": self.threshold,
               "baseline": self.baseline,
               "results": sorted(self.results, key=lambda r: r["key"])}
        text = json.dumps(_clean(doc), indent=1, sort_keys=True, allow_nan=False)
        try:
            atomic_write(self.json, lambda f: f.write(text))
        except OSError as exc:
            # the session's reports are already written: say so, never lose them
            tr = session.config.pluginmanager.get_plugin("terminalreporter")
            msg = "xsp: cannot write %s: %s" % (self.json, exc.strerror or exc)
            if tr is not None:
                tr.write_line(msg, red=True)
            else:
                sys.stderr.write(msg + "\n")
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR if \
                session.exitstatus == pytest.ExitCode.OK else session.exitstatus


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "xsp(threshold=None, levels=None, repeat=None, warmup=None, rounds=None, "
        "allow=None, budget=None): options of xsp_measure and xsp_profile for this test "
        "(docs/pytest.md)")
    st = config.stash[_STATE] = _State(config)
    config.pluginmanager.register(st, "xsp-results")


def pytest_unconfigure(config):
    st = config.stash.get(_STATE, None)
    if st is not None and config.pluginmanager.is_registered(st):
        config.pluginmanager.unregister(st)


# -- per test -------------------------------------------------------------------------------
class _ItemState:
    def __init__(self):
        self.profiles = []          # (label, xsp.profile)
        self.results = []           # (key, Result, verdict or None, record dict)
        self.labels = set()         # measurement names used in this test
        self.notes = []             # lines for the report's "xsp" section


def _item_state(item):
    st = item.stash.get(_ITEM, None)
    if st is None:
        st = item.stash[_ITEM] = _ItemState()
    return st


MERGED_KEYS = ("allow", "budget")     # dicts: merged across markers, closest wins per entry


def _marker_options(item):
    """The xsp marker's keyword options: the closest marker wins per option, and for the
    dicts allow and budget per entry.  pytest.UsageError for a misused marker."""
    out = {}
    for mark in reversed(list(item.iter_markers("xsp"))):
        if mark.args:
            raise pytest.UsageError("%s: @pytest.mark.xsp takes keyword options only (%s)"
                                    % (item.nodeid, ", ".join(MARKER_KEYS)))
        for k, v in mark.kwargs.items():
            if k not in MARKER_KEYS:
                raise pytest.UsageError("%s: unknown @pytest.mark.xsp option %r; options: %s"
                                        % (item.nodeid, k, ", ".join(MARKER_KEYS)))
            if k in MERGED_KEYS:
                if not isinstance(v, dict):
                    raise pytest.UsageError("%s: @pytest.mark.xsp(%s=...) must be a dict, not "
                                            "%s" % (item.nodeid, k, type(v).__name__))
                out[k] = dict(out.get(k) or {}, **v)
            else:
                out[k] = v
    return out


def _checked_options(where, threshold, allow, budget):
    """Validates what the marker and the call give before anything is measured: threshold
    (percent), allow (allowance keys and values) and budget (Result.check's keywords and
    values).  Raises ValueError or TypeError naming where."""
    if threshold is not None:
        try:
            t = float(threshold)
        except (TypeError, ValueError):
            t = -1.0
        if isinstance(threshold, bool) or not 0 <= t < math.inf:
            raise ValueError("%s: threshold must be a percentage >= 0, not %r"
                             % (where, threshold))
    for k, v in (allow or {}).items():
        if not perf.allowance_key(k):
            raise ValueError("%s: unknown allowance %r; allowances: %s, ops, kernels_by_name, "
                             "op:NAME, kernel:NAME" % (where, k, ", ".join(perf.COUNTS)))
        perf._allowance({k: v}, k, 0)
    perf.check_budgets(where, budget or {})


def _file_name(key):
    """A file name for a test and measurement key: readable, and unique by a hash."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", key).strip("_.")[:120] or "test"
    return "%s-%s" % (safe, hashlib.sha1(key.encode("utf-8", "replace")).hexdigest()[:10])


@pytest.fixture
def xsp_profile(request):
    """A maker of xsp.profile for this test: `with xsp_profile(levels="ML") as prof:`.
    Arguments as xsp.profile's (levels defaults to the xsp marker's, else "ML").  The traces
    are saved, and their paths printed in the failure report, when the test fails or when
    --xsp-save is given."""
    opts = _marker_options(request.node)
    st = _item_state(request.node)

    def make(levels=None, **kwargs):
        prof = profile(levels=levels or opts.get("levels") or DEFAULTS["levels"], **kwargs)
        st.profiles.append(("profile%d" % len(st.profiles), prof))
        return prof
    return make


@pytest.fixture
def xsp_measure(request):
    """A maker of measurements for this test: `m = xsp_measure(fn, levels="ML", repeat=20)`
    runs xsp.perf.measure (xsp.measure plus the counts) and returns the xsp.perf.Result.
    Keyword arguments: levels, repeat, warmup, rounds (default: the xsp marker's, else ML, 10,
    3, 1), name (the measurement's name in the summary and the baseline; default fn's name),
    budget (a dict of Result.check's budgets, checked here; the marker's budget too), allow
    (count allowances against the baseline), and xsp.profile's options.  With --xsp-baseline
    the result is compared with its stored run and a regression raises BudgetExceeded naming
    the layers and ops that grew."""
    item = request.node
    cfg = request.config.stash[_STATE]
    opts = _marker_options(item)
    st = _item_state(item)
    _checked_options("%s: @pytest.mark.xsp" % item.nodeid, opts.get("threshold"),
                     opts.get("allow"), opts.get("budget"))

    def measure(fn, levels=None, *, repeat=None, warmup=None, rounds=None, name=None,
                budget=None, allow=None, threshold=None, **kwargs):
        __tracebackhide__ = True

        def pick(v, key):
            return v if v is not None else opts.get(key, DEFAULTS.get(key))
        where = "%s: xsp_measure" % item.nodeid
        _checked_options(where, threshold, allow, budget)
        thr = pick(threshold, "threshold")
        thr = cfg.threshold if thr is None else float(thr)
        allow_all = dict(opts.get("allow") or {}, **(allow or {}))
        budgets = dict(opts.get("budget") or {}, **(budget or {}))
        # a name unique in the test: fn's, then fn#2, fn#3, ...
        base_label = name or getattr(fn, "__name__", None) or "fn"
        label, k = base_label, 1
        while label in st.labels:
            k += 1
            label = "%s#%d" % (base_label, k)
        st.labels.add(label)
        key = "%s::%s" % (item.nodeid, label)
        # the baseline is read before measuring: a file that is not a result fails the test
        # without the measurement's time spent, and is replaced when this run saves one
        baseline, baseline_error, baseline_note = None, None, None
        base_path = (os.path.join(cfg.baseline, _file_name(key) + ".json")
                     if cfg.baseline else None)
        if base_path:
            if os.path.lexists(base_path):
                try:
                    baseline = perf.load(base_path)
                except (perf.BaselineError, OSError) as exc:
                    baseline_error = exc
            else:
                baseline_note = "no baseline in %s" % cfg.baseline
        r = perf.measure(fn, pick(levels, "levels"), repeat=pick(repeat, "repeat"),
                         warmup=pick(warmup, "warmup"), rounds=pick(rounds, "rounds"),
                         name=label, **kwargs)
        r.data["test"] = item.nodeid
        verdict = (r.compare(baseline, threshold=thr, allow=allow_all)
                   if baseline is not None else None)
        record = _record(key, r, verdict, baseline_note)
        r._record = record              # Result.check's failures go into the record too
        st.results.append((key, r, verdict, record))
        _properties(item, label, r, record)
        if cfg.save_baseline:
            out = os.path.join(cfg.save_baseline, _file_name(key))
            if verdict is not None and verdict.failed and base_path == out + ".json":
                # comparing with and saving into one directory: a run that failed against
                # its baseline does not replace it (the regression would pass next time)
                record["baseline_note"] = "baseline kept: this run failed against it"
                st.notes.append("%s: the baseline %s was kept: this run failed against it"
                                % (label, base_path))
            else:
                save(r, out + ".json")
                if r.trace is not None:
                    save(r.trace, out + ".xsp")
        failures = []
        if baseline_error is not None:
            record["failures"].append(str(baseline_error))
            record["status"] = "bad baseline"
            failures.append(baseline_error)
        try:
            if budgets:
                r.check(**budgets)
            record["budget"] = "ok" if budgets else None
        except perf.BudgetExceeded as exc:
            failures.append(exc)
        if verdict is not None and verdict.failed:
            try:
                verdict.check()
            except perf.BudgetExceeded as exc:
                record["failures"].extend(exc.failures)
                record["status"] = verdict.status
                failures.append(exc)
        if failures:
            if len(failures) == 1:
                raise failures[0]
            raise perf.BudgetExceeded("\n".join(str(f) for f in failures),
                                      [x for f in failures for x in
                                       getattr(f, "failures", [str(f)])])
        return r
    return measure


def _record(key, r, verdict, note):
    lat = r.latency
    return _clean({
        "test": r.data.get("test"), "key": key, "name": r.name, "levels": r.data["levels"],
        "iterations": _num(lat.n), "mean_ns": _num(lat.mean_ns), "std_ns": _num(lat.std_ns),
        "median_ns": _num(lat.median_ns), "min_ns": _num(lat.min_ns), "max_ns": _num(lat.max_ns),
        "counts": dict(r.counts), "compile": r.compile,
        "baseline": verdict.summary() if verdict is not None else None,
        "baseline_note": note, "worker": os.environ.get("PYTEST_XDIST_WORKER"),
        "budget": None, "status": None, "failures": [], "files": []})


def _properties(item, label, r, record):
    """junitxml properties of one measurement (names prefixed xsp.<measurement>.)."""
    p = "xsp.%s." % label
    lat = r.latency
    props = [("latency_ns", "%.0f" % lat.mean_ns)]
    if lat.std_ns == lat.std_ns:                # NaN for one iteration: no spread
        props.append(("latency_std_ns", "%.0f" % lat.std_ns))
    props += [("iterations", lat.n), ("levels", r.data["levels"])]
    for k, v in r.counts.items():
        if v is not None:
            props.append((k, v))
    if record["baseline"] is not None:
        b = record["baseline"]
        props.append(("baseline_status", b["status"]))
        if b["delta_ns"] is not None:
            props.append(("baseline_delta_ns", "%.0f" % b["delta_ns"]))
    for k, v in props:
        item.user_properties.append((p + k, v))


# -- hooks ----------------------------------------------------------------------------------
# The profile-in-progress rule: a profile that a test, or one of its fixtures, started and left
# recording fails that test (its call, or its teardown for a fixture's), and is stopped so that
# the next test is not affected.  A profile already recording before the test's setup (pytest
# run under `xsp run`) is left alone.
_BEFORE = pytest.StashKey()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    item.stash[_BEFORE] = _core.active_session()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    __tracebackhide__ = True
    before = _core.active_session()     # a fixture's profile may record through the call
    try:
        out = yield
    except BaseException as exc:
        msg = _stop_leaked(item, before)
        if msg:
            _item_state(item).notes.append(msg)
            exc.add_note("xsp: " + msg)
        raise
    msg = _stop_leaked(item, before)
    if msg:
        raise ProfileLeftOpen(msg)
    return out


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    __tracebackhide__ = True
    before = item.stash.get(_BEFORE, None)
    when = "after its fixtures' teardown"
    try:
        out = yield
    except BaseException as exc:        # a fixture's teardown failed: stop it all the same
        msg = _stop_leaked(item, before, when)
        if msg:
            exc.add_note("xsp: " + msg)
        raise
    msg = _stop_leaked(item, before, when)
    if msg:
        raise ProfileLeftOpen(msg)
    return out


def _stop_leaked(item, before, when=None):
    leaked = _core.active_session()
    if leaked is None or leaked is before:
        return None
    how = "xsp stopped it so that the next test is not affected"
    what = "%r, made at %s" % (leaked, getattr(leaked, "_where", None) or "?")
    try:
        leaked.stop()
    except Exception as exc:  # another thread started it: it cannot be stopped from here
        how = "xsp could not stop it (%s: %s): later tests that profile will fail" % (
            type(exc).__name__, exc)
    return ("%s left an xsp profile recording%s (%s): %s.  Use `with xsp_profile(...) as "
            "prof:` or `with xsp.profile(...)`, which stop on every exit" % (
                item.nodeid, " " + when if when else "", what, how))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    rep = yield
    st = item.stash.get(_ITEM, None)
    if st is None or rep.when != "call":
        return rep
    cfg = item.config.stash[_STATE]
    where = cfg.save
    if where is None and rep.failed:
        where = os.path.join(str(item.config._tmp_path_factory.getbasetemp()), "xsp-failures") \
            if hasattr(item.config, "_tmp_path_factory") else \
            os.path.join(str(item.config.rootpath), ".xsp-failures")
    saved = []
    if where is not None:
        try:
            os.makedirs(where, exist_ok=True)
        except OSError as exc:
            st.notes.append("cannot save this test's traces in %s: %s" % (
                where, exc.strerror or exc))
            where = None
    if where is not None:
        for label, prof in st.profiles:
            try:
                tr = prof.trace
            except Exception:
                tr = None
            if tr is None:
                continue
            path = os.path.join(where, _file_name("%s::%s" % (item.nodeid, label)) + ".xsp")
            save(tr, path, format="xsp")
            saved.append(path)
        for key, r, _, record in st.results:
            base = os.path.join(where, _file_name(key))
            save(r, base + ".json")
            record["files"].append(base + ".json")
            saved.append(base + ".json")
            if r.trace is not None:
                save(r.trace, base + ".xsp")
                record["files"].append(base + ".xsp")
                saved.append(base + ".xsp")
    if st.notes:
        rep.sections.append(("xsp", "\n".join(st.notes)))
    if saved:
        rep.sections.append(("xsp: saved", "\n".join(
            ["%s (%s)" % (p, "a trace: xsp summary, xsp report and xsp.load open it"
                          if p.endswith(".xsp") else "the measurement: xsp.perf.load reads it")
             for p in saved])))
        for i, p in enumerate(saved):
            item.user_properties.append(("xsp.file%d" % i, p))
    rep.xsp_results = [record for _, _, _, record in st.results]
    return rep


def _verdict_of(r):
    """The summary's verdict: what failed, or how the run compares with its baseline."""
    if r.get("status"):
        return r["status"]                  # regressed, counts changed, budget exceeded, ...
    if r["failures"]:
        return "failed"
    if r.get("outcome") == "failed":
        return "test failed"                # the test failed on something else
    b = r["baseline"]
    if b is None:
        return "new" if r["baseline_note"] and r["baseline_note"].startswith("no baseline") \
            else "-"
    return b["status"]


def _summary(tr, st):
    """The terminal table: one row per measurement, then what failed (each measurement once,
    in the table's order, at most FAILURE_LINES lines)."""
    tr.write_sep("-", "xsp performance (%d measurement%s)" % (
        len(st.results), "" if len(st.results) == 1 else "s"))
    rows = [["test", "latency", "± std", "n", "ops", "allocated", "vs baseline", "verdict"]]
    results = sorted(st.results, key=lambda r: r["key"])
    for r in results:
        b = r["baseline"]
        change = "-" if b is None else fmt_signed(b["delta_ns"], b["delta_share"])
        rows.append([r["key"], fmt_ns(r["mean_ns"]), fmt_ns(r["std_ns"]), str(r["iterations"]),
                     "-" if r["counts"]["ops_total"] is None else str(r["counts"]["ops_total"]),
                     fmt_bytes(r["counts"]["bytes_allocated"]), change, _verdict_of(r)])
    width = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        tr.write_line("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                for i, (c, w) in enumerate(zip(row, width))).rstrip())
    for r in results:
        fails = r["failures"]
        if fails:
            tr.write_line("%s:" % r["key"])
            for f in fails[:FAILURE_LINES]:
                tr.write_line("  " + f.split("\n")[0])
            if len(fails) > FAILURE_LINES:
                tr.write_line("  ... %d more (the test's failure report has them all)"
                              % (len(fails) - FAILURE_LINES))
    if st.json:
        tr.write_line("xsp: results written to %s" % st.json)
