"""The text summary of a trace or measurement (text()), and what the HTML report
(xsp.report.page) shows of the same figures: _Summary computes them once, _pretty formats a
table's cells.

Sources are what xsp.analysis takes: a Trace, a Measurement or a span table.  The text's tables
are numpy group-bys (xsp.analysis.tables' Rows), its memory and FLOPs lines numpy sums, so that
`xsp summary` loads no pandas (issue 28); the HTML lives in xsp.report.page, so that the text
imports none of it.
"""
import numpy as np

from xsp.analysis import memory
from xsp.analysis import tables as A
from xsp.analysis.compiled import graph_breaks
from xsp.analysis.compiled import summary as compiled_summary
from xsp.core.fmt import fmt_bytes, fmt_ns, fmt_share, fmt_si, fmt_signed
from xsp.core.util import printable


def fmt_delta(ns, base=None):
    """A signed duration, "+1.234 ms" or "-193.900 us", with its share of base when given:
    "+1.234 ms (+3.4%)"."""
    return fmt_signed(ns, ns / base if base and ns is not None else None)


# headers of the tables as people read them: units go in the cells ("1.952 ms", "12.3%"),
# so no header carries a unit suffix
HEADERS = {"total_ns": "total", "mean_ns": "mean", "self_ns": "self", "backward_ns": "backward",
           "forward_share": "fwd-share", "step_share": "step-share",
           "cumulative_step_share": "cum-share", "count_share": "call-share",
           "self_share": "self-share", "gpu_ns": "GPU", "gpu_self_ns": "GPU-self",
           "latency_ns": "latency", "std_ns": "std", "added_ns": "added",
           "added_share": "added-share", "noise_ns": "noise", "within_noise": "in-noise",
           "kernel_ns": "kernel-time", "copy_ns": "copy-time", "cpu_ns": "CPU",
           "gpu_share": "GPU-share", "cpu_share": "CPU-share", "min_ns": "min", "max_ns": "max",
           "share": "share", "toplevel_layers_ns": "loss+layers"}
# what the share headers mean, printed under the tables that have them
SHARE_NOTE = ("fwd-share: of the forward time (model and top-level layer calls); step-share: "
              "forward + backward of the iterations' time")
NAME_WIDTH = 60     # longest name in a text table; longer ones are cut with "…"


def header(col):
    """The display header of a DataFrame column: HEADERS, else the name without _ns."""
    if col in HEADERS:
        return HEADERS[col]
    if col.endswith("_ns"):
        return col[:-3]
    if col.endswith("_share"):
        return col[:-6] + " share"
    return col


def _cut(v, width):
    v = "" if v is None else str(v)
    return v if len(v) <= width else v[:width - 1] + "…"


def _pretty(df, ns=(), share=(), width=NAME_WIDTH):
    """A copy of df for reading: ns columns as durations with units, share columns as
    percentages, text cells cut at width characters, headers without unit suffixes
    (header())."""
    out = df.copy()
    for c in out.columns:
        if out[c].dtype == object and c not in ns and c not in share:
            out[c] = [v if v is None or isinstance(v, float) else _cut(v, width)
                      for v in out[c]]
            continue
        if c in ns or c.endswith("_ns"):
            out[c] = [fmt_ns(v) for v in out[c]]
        elif c in share or c.endswith("share"):
            out[c] = [fmt_share(v) for v in out[c]]
        elif out[c].dtype == bool:
            out[c] = ["yes" if v else "no" for v in out[c]]
    out.columns = [header(c) for c in out.columns]
    if not len(out):
        return out
    for i in range(out.shape[1]):
        # a numeric column with gaps becomes object, as fillna("-") made it (pandas 4 refuses)
        col = out.iloc[:, i]
        if col.dtype != object and col.isna().any():
            out.isetitem(i, col.astype(object))
    return out.fillna("-")


def _text_kind(values):
    """How pandas would hold an object column of the text tables: "str" (every value a str or
    missing, one at least: a string column, left as it is) or "object"."""
    some = False
    for v in values.tolist():
        if isinstance(v, str):
            some = True
        elif not (v is None or (isinstance(v, float) and v != v)):
            return "object"
    return "str" if some else "object"


def _rows_text(rows, width=NAME_WIDTH):
    """The text of Rows as _pretty(frame).to_string(index=False) writes it, without pandas:
    the cells as _pretty formats them (durations, shares, cut text, "-" for missing), each
    column right-aligned to its widest cell, one space apart, a numeric column's header with
    a space before it."""
    heads, cells = [], []
    for c in rows.columns:
        v = rows[c]
        numeric = False
        if v.dtype == object and c not in () and not c.endswith("_ns") and \
                not c.endswith("share"):
            if _text_kind(v) == "str":
                col = [v_ if isinstance(v_, str) else None for v_ in v.tolist()]
            else:
                col = [x if x is None or isinstance(x, float) else _cut(x, width)
                       for x in v.tolist()]
        elif c.endswith("_ns"):
            col = [fmt_ns(x) for x in v.tolist()]
        elif c.endswith("share"):
            col = [fmt_share(x) for x in v.tolist()]
        elif v.dtype == bool:
            col = ["yes" if x else "no" for x in v.tolist()]
        else:
            col = v.tolist()
            numeric = v.dtype.kind in "iu" or v.dtype.kind == "f"
            if v.dtype.kind == "f" and np.isnan(v).any():
                numeric = False
        col = ["-" if x is None or (isinstance(x, float) and x != x) else str(x) for x in col]
        h = header(c)
        heads.append(" " + h if numeric else h)
        cells.append(col)
    widths = [max([len(h)] + [len(x) for x in col]) for h, col in zip(heads, cells)]
    lines = [" ".join(h.rjust(w) for h, w in zip(heads, widths))]
    for i in range(len(rows)):
        lines.append(" ".join(col[i].rjust(w) for col, w in zip(cells, widths)))
    return "\n".join(lines)


def _compile_line(m, trace):
    """One line saying what torch.compile did (xsp.compiled), or None when it compiled
    nothing: for a Measurement, the iterations left out; for a trace, the compile spans and the
    steps whose latency includes them."""
    if m is not None:
        compiling = getattr(m, "compiling", None) or {}
        kept = getattr(m, "compiling_kept", None) or {}
        compiled = getattr(m, "compiled", None) or {}
        parts = []
        if compiling:
            parts.append("torch.compile compiled in %d measured iteration%s (%s): left out of "
                         "every latency and count here" % (
                             sum(compiling.values()), "" if sum(compiling.values()) == 1
                             else "s", ", ".join("%d in run %s" % (n, r)
                                                 for r, n in compiling.items())))
        if kept:
            parts.append("torch.compile compiled in every measured iteration of %s: kept, "
                         "their latencies include compile time" % ", ".join(
                             "run %s (%d)" % (r, n) for r, n in kept.items()))
        if parts:
            return "; ".join(parts)
        if compiled:
            return ("torch.compile compiled during the runs (%s), outside the measured "
                    "iterations" % ", ".join("%d in run %s" % (n, r)
                                             for r, n in compiled.items()))
        return None
    if trace is None or not hasattr(trace, "name_codes"):
        return None
    s = compiled_summary(trace)
    if s is None:
        return None
    extra = [w for w in ("%d recompile%s" % (s["recompiles"], "" if s["recompiles"] == 1
                                             else "s") if s["recompiles"] else None,
                         "%d graph break%s" % (s["graph_breaks"], "" if s["graph_breaks"] == 1
                                               else "s") if s["graph_breaks"] else None) if w]
    return ("torch.compile: %d compile%s%s, %s in all%s (xsp.compiled.compiles(trace))" % (
        s["compiles"], "" if s["compiles"] == 1 else "s",
        " (%s)" % ", ".join(extra) if extra else "", fmt_ns(s["compile_ns"]),
        "; the latency of %s includes compile time" % ", ".join(s["steps"])
        if s["steps"] else ""))


BREAKS_SHOWN = 10    # graph breaks listed in the text report; the rest are counted


def _break_lines(trace):
    """The text report's lines on torch.compile's graph breaks (xsp.compiled.graph_breaks):
    one per break, "  graph break at file:line: reason", the first BREAKS_SHOWN of them."""
    if trace is None or not hasattr(trace, "name_codes"):
        return []
    gb = graph_breaks(trace)
    out = ["  graph break at %s: %s" % (r.source or "an unknown line", r.reason or "?")
           for r in gb.head(BREAKS_SHOWN).itertuples(index=False)]
    if len(gb) > BREAKS_SHOWN:
        out.append("  ... %d more graph breaks (xsp.compiled.graph_breaks(trace))"
                   % (len(gb) - BREAKS_SHOWN))
    return out


def fmt_counters(counters):
    """What was lost or dropped, for reading: "none", or "lost.cap 2, gpu.dropped 5"."""
    lost = {k: v for k, v in counters.items() if v}
    return ", ".join("%s %d" % kv for kv in sorted(lost.items())) or "none"


def _median(x):
    """np.median of a non-empty float64 vector, computed as it computes it (the mean of the
    middle value or two after a partition; NaN when a value is NaN), without loading numpy.ma
    as np.median's NaN check does (about 10 ms of `xsp summary`'s start, issue 28)."""
    if np.isnan(x).any():
        return np.nan
    k = len(x) // 2
    if len(x) % 2:
        return np.partition(x, k)[k]
    return np.mean(np.partition(x, [k - 1, k])[k - 1:k + 1])


def _spread(x):
    """(mean, std with ddof=1 or NaN for one sample, median, min, max) of samples x."""
    x = np.asarray(x, dtype=np.float64)
    if not len(x):
        return (np.nan,) * 5
    return (float(x.mean()), float(x.std(ddof=1)) if len(x) > 1 else np.nan,
            float(_median(x)), float(x.min()), float(x.max()))


def _pm(mean, std):
    return fmt_ns(mean) + ("" if np.isnan(std) else " ± " + fmt_ns(std))


class _Summary:
    """Everything the reports show, computed once."""

    def __init__(self, source, top, op_sort="self_ns", include_compile=False):
        self.src = A._src(source, include_compile)
        # a Measurement (xsp.leveled) is recognised by duck typing, as xsp.analysis does it (a
        # span_table() method and a trace attribute; the Measurement docstring says so):
        # leveled is a layer above the reports (it imports them), so no isinstance here
        self.measurement = self.src.measurement
        meta = self.src.meta
        self.title = "xsp report: %s" % meta.get("region", "trace")
        self.levels = meta.get("levels", "?")
        if self.measurement is not None:
            self.levels = self.measurement.levels
        self.top = top
        # the iterations and phases as numpy columns (the text report needs no pandas); the
        # tables as DataFrames (the HTML report's) are made when first read
        ids, ws, we, _ = self.src.windows()
        self.it_ids, self.it_lat = ids, we - ws
        self.phase_cols = A._phase_cols(self.src)
        self.setup = A.setup(self.src)
        self.op_sort = op_sort
        self.has_gpu = self.src.has_gpu
        self.has_layers = bool(A._layer_mask(self.src).any())
        self.iteration_kind = str(self.src.kind[ids[0]]) if len(ids) else None
        self._frames = {}
        self.overhead = self.measurement.overhead if self.measurement is not None else None
        trace = self.measurement.trace if self.measurement is not None else \
            (source if hasattr(source, "counters") else None)
        self.counters = dict(trace.counters) if trace is not None else {}
        if self.measurement is not None:      # what any session of the measurement lost
            self.counters = {}
            for ts in self.measurement.all_traces.values():
                for t in ts:
                    for k, v in t.counters.items():
                        self.counters[k] = self.counters.get(k, 0) + v
        self.n_spans = len(trace) if trace is not None else self.src.n
        self.compile_line = _compile_line(self.measurement, trace)
        self.trace_obj = trace
        steps = meta.get("steps")
        self.steps = steps if isinstance(steps, int) and not isinstance(steps, bool) else None

    def _frame(self, key, make):
        if key not in self._frames:
            self._frames[key] = make()
        return self._frames[key]

    @property
    def iters(self):
        return self._frame("iters", lambda: A.model_latency(self.src))

    @property
    def phases(self):
        return self._frame("phases", lambda: A.phases(self.src))

    @property
    def ranking(self):
        return self._frame("ranking", lambda: A.layer_ranking(self.src, n=self.top))

    @property
    def types(self):
        return self._frame("types", lambda: A.layer_types(self.src))

    @property
    def ops(self):
        return self._frame("ops", lambda: A.ops(self.src, sort=self.op_sort, n=self.top))

    @property
    def kernels(self):
        return self._frame("kernels", lambda: A.kernels_by_name(self.src).head(self.top))

    @property
    def gvc(self):
        return self._frame("gvc", lambda: A.gpu_vs_cpu(self.src))

    def rows(self):
        """The text report's tables as numpy Rows (ranking, types, ops): no pandas."""
        return self._frame("rows", lambda: A._summary_rows(self.src, self.top, self.op_sort))

    def compiling_iterations(self):
        """A bool per iteration (self.iters' rows): whether a torch.compile compilation ran
        inside it (a compile span in it: the rule every table uses, xsp.analysis); None
        without iterations."""
        if not len(self.it_ids):
            return None
        return self.src.compiling()

    def tables_line(self):
        """The line saying which compiling iterations the tables leave out or count, or None
        when none compiled (or for a Measurement, whose iterations measure already chose)."""
        if self.measurement is not None:
            return None
        c = self.src.compiling()
        n = int(c.sum())
        if not n:
            return None
        its = "iteration%s %s" % ("" if n == 1 else "s",
                                   ", ".join(str(i) for i in np.nonzero(c)[0][:10]))
        if int(self.src.left_out().sum()):
            return ("tables and shares: the %d %s that compiled (%s) left out, as in the step "
                    "line (include_compile=True counts them)" % (n, "iteration" if n == 1
                                                                 else "iterations", its))
        if self.src.include_compile and not c.all():
            return ("tables and shares: the %d that compiled (%s) counted "
                    "(include_compile=True): their compile time is in them" % (n, its))
        return ("tables and shares: every iteration compiled, so they count them: compile "
                "time is in them")

    def iteration_words(self):
        n = len(self.it_ids)
        what = {"step": "steps (the work between step() calls)", "model": "model calls",
                "module": "top-level layer calls", "region": "the profiled region"}.get(
                    self.iteration_kind, "root spans")
        return "%d iteration%s: %s" % (n, "" if n == 1 else "s", what)

    def headline(self):
        lat = self.it_lat
        if self.measurement is None:
            lines = [self.title, "levels %s, %d spans, %s" % (
                self.levels, self.n_spans, self.iteration_words())]
            meta = self.src.meta
            ended = meta.get("interrupted") or meta.get("exception")
            if ended:
                lines.append("the profiled block ended with %s" % ended)
            if self.setup is not None:
                carved = len(self.it_ids) and int(self.it_ids[0]) == self.setup["id"]
                lines.append("setup (before the first step()%s; not an iteration): %s" % (
                    " and its first model call" if carved else "",
                    fmt_ns(self.setup["duration_ns"])))
                if carved:
                    lines.append("note: iteration 0 is step#0 from its first model call on: "
                                 "what its step did before the model call (data, zero_grad) "
                                 "is in the setup")
                elif self.src.setup_rule is not None:
                    lines.append("note: %s" % self.src.setup_rule)
            elif self.src.setup_rule is not None:       # step#0 is iteration 0, whole
                lines.append(self.src.setup_rule)
            if self.src.dropped_tail is not None:
                lines.append("not an iteration: the step after the last step() (%s)"
                             % self.src.dropped_tail[1])
            if "M" not in str(self.levels) and "L" in str(self.levels):
                lines.append("note: steps (step()) and model calls are level M: with L alone "
                             "the iterations are the top-level calls")
            named = meta.get("model")
            if isinstance(named, str) and named:
                if not (self.src.kind == "model").any():
                    lines.append("model named %s: no top-level call matched it (every "
                                 "top-level call is a layer)" % named)
                else:
                    lines.append("model named: %s" % named)
        else:
            m = self.measurement
            lines = [self.title, "levels %s, %d spans per iteration (run %s: %d spans in all)"
                     % (self.levels, self.src.n, m.runs[-1], self.n_spans)]
            lines.append("leveled measurement: runs %s, %d warm-up, %d repeat (+%d priming)%s, "
                         "trim %g" % (" / ".join(m.runs), m.warmup, m.repeat, m.skip,
                                      " x %d interleaved rounds" % m.rounds
                                      if m.rounds > 1 else "", m.trim))
            ov = m.overhead.iloc[0]
            s = "model latency %s (trimmed mean of the M run; std %s)" % (
                fmt_ns(ov["latency_ns"]), fmt_ns(ov["std_ns"]))
            if m.batch_size:
                s += ", throughput %.1f samples/s at batch %d" % (m.throughput_per_s,
                                                                 m.batch_size)
            lines.append(s)
        compiling = self.compiling_iterations() if self.measurement is None else None
        kept = np.arange(len(lat))       # the iterations the statistics are of
        if compiling is not None and compiling.any() and not compiling.all():
            kept = np.nonzero(~compiling)[0]    # a compile is shown, not mixed into latencies
            lat = lat[kept]
        if self.measurement is None and len(lat):
            mean, std, med, lo, hi = _spread(lat)
            label = "step latency" if self.iteration_kind == "step" else "iteration latency"
            if compiling is not None and compiling.any():
                label += (" (the %d that compiled left out)" % int(compiling.sum())
                          if not compiling.all() else " (every one compiled: compile time "
                          "included)")
            lines.append("%s: mean %s, median %s, min %s, max %s" % (
                label, _pm(mean, std), fmt_ns(med), fmt_ns(lo), fmt_ns(hi)))
            if len(lat) > 2 and hi > 3 * med:
                worst = int(kept[int(np.argmax(lat))])
                lines.append("note: iteration %d took %.1fx the median%s; the mean includes "
                             "it (profile after a warm-up, or with xsp.schedule(warmup=...))"
                             % (worst, hi / med, " (the first call pays one-off costs)"
                                if worst == 0 else ""))
            if self.iteration_kind == "step":
                parts = []
                for name, label in (("forward", "forward (model calls)"),
                                    ("toplevel_layers", "loss and top-level layers"),
                                    ("backward", "backward"), ("optimizer", "optimizer"),
                                    ("other", "other")):
                    v = self.phase_cols[name + "_ns"]
                    if len(v) == len(compiling if compiling is not None else ()) \
                            and len(kept) < len(v):
                        v = v[kept]
                    if name in ("toplevel_layers", "backward", "optimizer") and not v.any():
                        continue
                    if name == "forward" and self.lacks_modules():
                        continue                # unknown, not 0: said below
                    mean, std, _, _, _ = _spread(v)
                    parts.append("%s %s" % (label, _pm(mean, std)))
                lines.append("per step (mean ± std): " + ", ".join(parts))
        if self.lacks_modules():
            lines.append("note: this torch.profiler trace has no module calls (torch.profiler "
                         "records them only with with_stack=True): no layer tables and no "
                         "forward time; the ops are all there")
        if self.compile_line:
            lines.append(self.compile_line)
            lines.extend(_break_lines(self.trace_obj))
        note = self.tables_line()
        if note:
            lines.append(note)
        lines.append("lost or dropped: %s" % fmt_counters(self.counters))
        cost = self.cost_line()
        if cost:
            lines.append(cost)
        return lines

    def cost_line(self):
        """What recording cost, from meta overhead.* (a single profile; a measurement has its
        overhead table), or None."""
        meta = self.src.meta if self.measurement is None else {}
        spans, stop = meta.get("overhead.spans"), meta.get("overhead.stop_ns")
        if not isinstance(spans, int) or not isinstance(stop, int):
            return None
        est, per = meta.get("overhead.estimate_ns"), meta.get("overhead.per_span_ns")
        if not isinstance(est, int) or not isinstance(per, int):
            return ("xsp's own cost: %d spans recorded (no per-span cost was calibrated), stop "
                    "%s" % (spans, fmt_ns(stop)))
        t0, t1 = meta.get("start_ns"), meta.get("stop_ns")
        share = ""
        if isinstance(t0, int) and isinstance(t1, int) and t1 > t0:
            share = ", %s of the profiled time" % fmt_share((est - stop) / (t1 - t0))
        return ("xsp's own cost (estimate): %s = %d spans x %s per span (calibrated on this "
                "machine%s) + stop %s" % (fmt_ns(est), spans, fmt_ns(per), share, fmt_ns(stop)))

    def gpu_total(self):
        return self.gvc[self.gvc["layer"] == "(model)"].iloc[0]

    def lacks_modules(self):
        """Whether the trace is a torch.profiler one without module calls (torch 2.13 records
        them, as python_function events, only with with_stack=True; with_modules alone gives
        none): what it lacks, said once in the headline and in the tables."""
        if self.measurement is not None or self.src.meta.get("source") != "kineto":
            return False
        kinds = self.src.kind
        return not np.isin(kinds, ["model", "module"]).any() and bool((kinds == "op").any())

    def no_layers(self):
        if "L" not in str(self.levels):
            return "no layers: level L was not recorded"
        if self.lacks_modules():
            return "no layer calls: the torch.profiler trace has no module information"
        return "no layer calls in the iterations"


def _overhead_notes(ov):
    """Lines saying which overheads of a Measurement are within the noise."""
    out = []
    if ov is None or "within_noise" not in ov.columns:
        return out
    for r in ov.itertuples(index=False):
        if r.run == ov[ov["level"] == r.level]["run"].iloc[0] or not r.within_noise:
            continue
        if isinstance(r.noise_ns, float) and np.isnan(r.noise_ns):
            out.append("%s in run %s: %s added, spread unknown (one sample): measure with "
                       "repeat >= 2 to tell" % (r.level, r.run, fmt_delta(r.added_ns)))
        else:
            out.append("%s in run %s: %s added is within the noise (± %s): measure with a "
                       "larger repeat to tell" % (r.level, r.run, fmt_delta(r.added_ns),
                                                   fmt_ns(r.noise_ns)))
    return out


def _median_index(iters):
    """The row of model_latency's table that is the median iteration by latency (the upper
    one of an even count), or None for no iteration."""
    if not len(iters):
        return None
    return int(np.argsort(iters["latency_ns"].to_numpy(), kind="stable")[len(iters) // 2])


def median_iteration(source):
    """(span id, description) of the median iteration by latency, for a tree or timeline of a
    typical iteration; (None, "the whole trace") when there is none."""
    it = A.model_latency(source)
    j = _median_index(it)
    if j is None:
        return None, "the whole trace"
    return int(it["id"].iloc[j]), "iteration %d (%s, the median of %d by latency)" % (
        j, it["name"].iloc[j], len(it))


def text(source, top=10, op_sort="self_ns", include_compile=False):
    """The readable summary: headline (iterations, setup, step latency with its spread and
    the phases of a step), overhead per level (measurements), top layers, layer types, top
    ops (sorted by op_sort, a column of xsp.analysis.ops), top kernels and GPU against CPU
    time.  The tables leave out the iterations in which torch.compile compiled, as the step
    line does, and a line says so; include_compile=True counts them.  Returns a str."""
    s = _Summary(source, top, op_sort, include_compile)
    out = s.headline()

    def section(title, df, empty):
        out.append("")
        out.append(title)
        if df is None or not len(df):
            out.append("  " + empty)
        elif isinstance(df, A.Rows):
            out.extend("  " + ln for ln in _rows_text(df).splitlines())
        else:
            out.extend("  " + ln for ln in _pretty(df).to_string(index=False).splitlines())

    if s.overhead is not None:
        section("Overhead per level (what each deeper run added)", s.overhead, "-")
        out.extend("  " + ln for ln in _overhead_notes(s.overhead))
    rows = s.rows()
    ranking, ops = rows["ranking"], rows["ops"]
    section("Top %d layers (leaf layers, by forward time; backward attributed through the "
            "forward op)" % top, ranking.drop(columns=["cumulative_step_share"])
            if ranking is not None else None, s.no_layers())
    section("Layer types", rows["types"], s.no_layers())
    if ranking is not None and len(ranking):
        out.append("  " + SHARE_NOTE)
    section("Top %d ops (by %s)" % (top, header(s.op_sort)), ops if s.has_gpu or ops is None
            else ops.drop(columns=["gpu_ns", "gpu_self_ns"]),
            "no ops recorded (level L)" if "L" not in str(s.levels) else "no ops in the "
            "iterations")
    if s.has_gpu:
        section("Top %d kernels" % top, s.kernels, "no kernels recorded")
        g = s.gpu_total()
        out.append("")
        out.append("GPU vs CPU: model %s = GPU work %s (%s) + CPU %s (%s)" % (
            fmt_ns(g["latency_ns"]), fmt_ns(g["gpu_ns"]), fmt_share(g["gpu_share"]),
            fmt_ns(g["cpu_ns"]), fmt_share(g["cpu_share"])))
    else:
        out.append("")
        out.append("Kernels, GPU vs CPU: level G was not recorded")
    out.extend(_work_lines(source, s))
    return printable("\n".join(out) + "\n")


def _work_lines(source, s):
    """The text report's lines on FLOPs (record_shapes) and memory (profile_memory): [] when
    the trace has neither."""
    trace = source if hasattr(source, "counters") and hasattr(source, "threads") else None
    if trace is None and s.measurement is not None:
        trace = s.measurement.trace
    if trace is None:
        return []
    out = []
    if "input_dims" in trace.strings:     # an attribute key some span has (record_shapes)
        from xsp.analysis import flops      # here: only a trace with op inputs needs it
        f = flops.summary(trace)
        out += ["", "Work (analytical, from the recorded op inputs; xsp.flops): %s FLOPs, %s "
                "bytes moved; %d op calls without a formula%s" % (
                    fmt_si(f["flops"]), fmt_si(f["bytes"]), sum(f["uncovered"].values()),
                    "; failed to rebuild: %s" % ", ".join(sorted(f["failed"])) if f["failed"]
                    else "")]
    if memory.has_memory(trace):
        out += ["", "Memory (profile_memory; xsp.memory):"]
        for dev, tot in memory.summary(trace).items():
            out.append("  %s: %d allocations, %s allocated, %s freed, peak %s allocated; "
                       "outside every span %s allocated" % (
                           dev, tot["allocs"], fmt_bytes(tot["alloc_bytes"]),
                           fmt_bytes(tot["freed_bytes"]), fmt_bytes(tot["peak_bytes"]),
                           fmt_bytes(tot["outside_alloc_bytes"])))
    return out
