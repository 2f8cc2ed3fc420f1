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

import pytest

from ._util import atomic_write, fmt_ns, fmt_signed

RESULTS_SCHEMA = "xsp.pytest-results/1"
MARKER_KEYS = ("threshold", "levels", "repeat", "warmup", "rounds", "allow", "budget")
DEFAULTS = {"levels": "ML", "repeat": 10, "warmup": 3, "rounds": 1}
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
    v = config.getoption(key)
    if v is None:
        v = config.getini(key)
    return v or None


class _State:
    """The session's settings and, on the controller, the results gathered from reports."""

    def __init__(self, config):
        self.save = _option(config, "xsp_save")
        self.baseline = _option(config, "xsp_baseline")
        self.save_baseline = _option(config, "xsp_save_baseline")
        self.json = _option(config, "xsp_json")
        t = _option(config, "xsp_threshold")
        try:
            self.threshold = 5.0 if t is None else float(t)
            if not 0 <= self.threshold < math.inf:
                raise ValueError
        except ValueError:
            raise pytest.UsageError("--xsp-threshold / xsp_threshold must be a percentage "
                                    ">= 0, not %r" % (t,)) from None
        if self.baseline and not os.path.isdir(self.baseline):
            raise pytest.UsageError("--xsp-baseline: %s is not a directory (make one with "
                                    "--xsp-save-baseline=%s)" % (self.baseline, self.baseline))
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
        text = json.dumps(doc, indent=1, sort_keys=True, allow_nan=False)
        os.makedirs(os.path.dirname(os.path.abspath(self.json)), exist_ok=True)
        atomic_write(self.json, lambda f: f.write(text))


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
        self.names = {}             # measurement name -> times used


def _item_state(item):
    st = item.stash.get(_ITEM, None)
    if st is None:
        st = item.stash[_ITEM] = _ItemState()
    return st


def _marker_options(item):
    """The xsp marker's keyword options (the closest marker wins per key)."""
    out = {}
    for mark in reversed(list(item.iter_markers("xsp"))):
        if mark.args:
            raise pytest.UsageError("%s: @pytest.mark.xsp takes keyword options only (%s)"
                                    % (item.nodeid, ", ".join(MARKER_KEYS)))
        for k in mark.kwargs:
            if k not in MARKER_KEYS:
                raise pytest.UsageError("%s: unknown @pytest.mark.xsp option %r; options: %s"
                                        % (item.nodeid, k, ", ".join(MARKER_KEYS)))
        out.update(mark.kwargs)
    return out


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
    from .profiler import profile
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
    from . import perf
    item = request.node
    cfg = request.config.stash[_STATE]
    opts = _marker_options(item)
    st = _item_state(item)

    def measure(fn, levels=None, *, repeat=None, warmup=None, rounds=None, name=None,
                budget=None, allow=None, threshold=None, **kwargs):
        __tracebackhide__ = True

        def pick(v, key):
            return v if v is not None else opts.get(key, DEFAULTS.get(key))
        label = name or getattr(fn, "__name__", None) or "fn"
        n = st.names.get(label, 0)
        st.names[label] = n + 1
        if n:
            label = "%s#%d" % (label, n + 1)
        key = "%s::%s" % (item.nodeid, label)
        r = perf.measure(fn, pick(levels, "levels"), repeat=pick(repeat, "repeat"),
                         warmup=pick(warmup, "warmup"), rounds=pick(rounds, "rounds"),
                         name=label, **kwargs)
        r.data["test"] = item.nodeid
        thr = pick(threshold, "threshold")
        thr = cfg.threshold if thr is None else float(thr)
        allow_all = dict(opts.get("allow") or {})
        allow_all.update(allow or {})
        verdict, baseline_note = None, None
        if cfg.baseline:
            path = os.path.join(cfg.baseline, _file_name(key) + ".json")
            if os.path.exists(path):
                verdict = r.compare(perf.load(path), threshold=thr, allow=allow_all)
            else:
                baseline_note = "no baseline in %s" % cfg.baseline
        if cfg.save_baseline:
            os.makedirs(cfg.save_baseline, exist_ok=True)
            base = os.path.join(cfg.save_baseline, _file_name(key))
            r.save(base + ".json")
            if r.trace is not None:
                r.trace.save(base + ".xsp")
        budgets = dict(opts.get("budget") or {})
        budgets.update(budget or {})
        record = _record(key, r, verdict, baseline_note)
        st.results.append((key, r, verdict, record))
        _properties(item, label, r, record)
        failures = []
        try:
            if budgets:
                r.check(**budgets)
            record["budget"] = "ok" if budgets else None
        except perf.BudgetExceeded as exc:
            record["budget"] = "exceeded"
            record["failures"].extend(exc.failures)
            failures.append(exc)
        if verdict is not None and verdict.failed:
            try:
                verdict.check()
            except perf.BudgetExceeded as exc:
                record["failures"].extend(exc.failures)
                failures.append(exc)
        if failures:
            if len(failures) == 1:
                raise failures[0]
            raise perf.BudgetExceeded("\n".join(str(f) for f in failures),
                                      [x for f in failures for x in f.failures])
        return r
    return measure


def _record(key, r, verdict, note):
    from .perf import _clean
    lat = r.latency
    return _clean({"test": r.data.get("test"), "key": key, "name": r.name, "levels": r.data["levels"],
            "iterations": lat["n"], "mean_ns": lat["mean_ns"], "std_ns": lat["std_ns"],
            "median_ns": lat["median_ns"], "min_ns": lat["min_ns"], "max_ns": lat["max_ns"],
            "counts": dict(r.counts), "compile": r.compile,
            "baseline": verdict.summary() if verdict is not None else None,
            "baseline_note": note, "worker": os.environ.get("PYTEST_XDIST_WORKER"),
            "budget": None, "failures": [], "files": []})


def _properties(item, label, r, record):
    """junitxml properties of one measurement (names prefixed xsp.<measurement>.)."""
    p = "xsp.%s." % label
    props = [("latency_ns", "%.0f" % r.latency["mean_ns"]),
             ("latency_std_ns", "" if r.latency["std_ns"] is None
              else "%.0f" % r.latency["std_ns"]),
             ("iterations", r.latency["n"]), ("levels", r.data["levels"])]
    for k, v in r.counts.items():
        if v is not None:
            props.append((k, v))
    if record["baseline"] is not None:
        b = record["baseline"]
        props += [("baseline_status", b["status"]),
                  ("baseline_delta_ns", "%.0f" % b["delta_ns"])]
    for k, v in props:
        item.user_properties.append((p + k, v))


# -- hooks ----------------------------------------------------------------------------------
@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """The profile-in-progress rule: a test that leaves a profile recording fails, and the
    profile is stopped so that the next test is not affected."""
    __tracebackhide__ = True
    from . import _core
    before = _core.active_session()
    try:
        out = yield
    except BaseException:
        _stop_leaked(item, before)
        raise
    msg = _stop_leaked(item, before)
    if msg:
        raise ProfileLeftOpen(msg)
    return out


def _stop_leaked(item, before):
    from . import _core
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
    return ("%s left an xsp profile recording (%s): %s.  Use `with xsp_profile(...) as prof:` "
            "or `with xsp.profile(...)`, which stop on every exit" % (item.nodeid, what, how))


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
        os.makedirs(where, exist_ok=True)
        for label, prof in st.profiles:
            try:
                tr = prof.trace
            except Exception:
                tr = None
            if tr is None:
                continue
            path = os.path.join(where, _file_name("%s::%s" % (item.nodeid, label)) + ".xsp")
            tr.save(path)
            saved.append(path)
        for key, r, _, record in st.results:
            base = os.path.join(where, _file_name(key))
            r.save(base + ".json")
            record["files"].append(base + ".json")
            saved.append(base + ".json")
            if r.trace is not None:
                r.trace.save(base + ".xsp")
                record["files"].append(base + ".xsp")
                saved.append(base + ".xsp")
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
    if r["failures"]:
        return "FAIL"
    b = r["baseline"]
    if b is None:
        return "new" if r["baseline_note"] else "-"
    return b["status"]


def _summary(tr, st):
    """The terminal table: one row per measurement, then what failed."""
    tr.write_sep("-", "xsp performance (%d measurement%s)" % (
        len(st.results), "" if len(st.results) == 1 else "s"))
    rows = [["test", "latency", "± std", "n", "ops", "allocated", "vs baseline", "verdict"]]
    from .perf import fmt_bytes
    for r in sorted(st.results, key=lambda r: r["key"]):
        b = r["baseline"]
        change = "-" if b is None else fmt_signed(b["delta_ns"], b["delta_share"])
        rows.append([r["key"], fmt_ns(r["mean_ns"]), fmt_ns(r["std_ns"]), str(r["iterations"]),
                     "-" if r["counts"]["ops_total"] is None else str(r["counts"]["ops_total"]),
                     fmt_bytes(r["counts"]["bytes_allocated"]), change, _verdict_of(r)])
    width = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        tr.write_line("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                for i, (c, w) in enumerate(zip(row, width))).rstrip())
    for r in st.results:
        for f in r["failures"]:
            tr.write_line("%s: %s" % (r["key"], f))
    if st.json:
        tr.write_line("xsp: results written to %s" % st.json)
