"""The results database of the evaluation pipeline: a Parquet dataset with DuckDB over it.

Layout.  One file per evaluation and table, written by the process that ran the evaluation
(no shared writer: a distributed run needs only a shared directory):

    <results>/evaluations/<evaluation_id>.parquet     one row
    <results>/layers/<evaluation_id>.parquet          and layer_types, ops, kernels: its rows
    <results>/systems/<system_id>.parquet             one row per system

Every file is written whole or not at all: to a temporary name opened O_EXCL in the same
directory (".<name>.<random>.<n>.tmp", which no view reads), fsynced, then renamed over its
name (xsp._util.atomic_write).  An evaluation's detail tables are written before its
evaluations row, and the views show an evaluation's detail rows only with its evaluations row,
so a reader sees an evaluation entirely or not at all, even when a worker is killed between
two files.  A detail table with no rows writes no file.  Writing an evaluation_id again (a
retry) replaces its files.

A query reads every file (about a millisecond of CPU per file here), so after a run compact()
merges the files into one per table, <table>/compact-<UTC time>-<random>.parquet.  An
evaluation's rows then come from one generation, that of its evaluations row: its own files
where it has an evaluations file (written or retried after the compaction), else the latest
compacted file holding it; so the views show every row once before, during and after a
compaction.

Each file carries its schema version in its Parquet key-value metadata (`xsp.schema_version`,
SCHEMA_VERSION) and its table (`xsp.table`).  open() checks them: a file of a newer version
raises SchemaVersionError, a file without them (not written here) or of another table
StoreError.  Adding a column does not change the version (readers take the union of the
columns by name: an older file shows NULL in a newer column); renaming a column or changing a
unit or a meaning does.

The files are plain Parquet: DuckDB (`read_parquet('<results>/layers/*.parquet',
union_by_name=true)`), pandas (`pd.read_parquet('<results>/layers')`), Polars or Spark read
them without xsp.  open() gives an in-memory DuckDB connection with one view per table (over
one directory, or the union of several: the results of several machines); each view is the
union by name of a typed empty relation (every column below, with its type, even with no
file) and the table's files, so queries may name any column whatever was measured.
The file set is the glob's at query time: files written later are seen (unchecked), except by
a table that had no file when the connection was opened.

Times are nanoseconds (float where they are means), per iteration of the measured workload:
one call of it, one batch.  An evaluation's latencies come from xsp.measure: in run M (the
model alone), ML (layers and ops recorded) and MLG (GPU work too); each deeper run is slower
by what its recording costs, which is XSP's point: every level is read from the shallowest
run that records it.

evaluations: one row per evaluation attempt (a retried key has a row per attempt)
  evaluation_id     unique id of the attempt, the files' name (new_evaluation_id())
  key               the resume key: model, batch size, levels, options and system (done_keys)
  model, family, source, task   the catalog entry's name, family (cnn, vit, ...), source
                    ("hf:ResNetConfig", "python:m:f", ...) and task (inference or train)
  batch_size        samples per iteration
  levels            the levels measured: M, ML or MLG
  options           JSON text of the profile and measurement options (sorted keys)
  system_id         the system (systems.system_id)
  hostname          the host that ran it (one system may span identical hosts)
  torch_threads     torch.get_num_threads() in the worker
  status            ok, failed (the model failed to build or raised), timeout or killed
  reason            why it is not ok (the exception, the timeout, the signal); NULL for ok
  output_tail       the last lines of the worker's output
  started_at        when the evaluation started (UTC)
  wall_s            seconds the whole evaluation took in its worker (building, warm-up,
                    every run, the analyses, writing its files)
  measure_s         seconds of those in xsp.measure (warm-up and every run: the profiled
                    work); wall_s - measure_s is what the pipeline adds inside the worker.
                    NULL for an evaluation that did not finish
  warmup, repeat    unprofiled calls first; measured calls per run
  latency_<R>_mean_ns, _std_ns, _median_ns, _n   for R in M, ML, MLG where measured: the
                    iteration latency in run R, its trimmed mean and the standard deviation
                    of the kept samples (Measurement.overhead), the median and the number of
                    the samples (every measured iteration of the run)
  gpu_ns            GPU work per iteration (kernels, copies, memsets) in run MLG; NULL
                    without G
  throughput_per_s  batch_size / latency_M_mean_ns: from the shallowest run
  flops, bytes      per iteration, by xsp.analysis.flops (needs record_shapes=True; NULL without)
  peak_cpu_bytes, peak_cuda_bytes   the highest total the allocator reported during the
                    profile (needs profile_memory=True; NULL without, or on no such device)
  energy_j          joules of the interval the evaluator metered (EnergyMeter), every
                    counter present summed; energy_cpu_j (RAPL packages), energy_gpu_j (NVML);
                    energy_why why a counter is absent (NULL when both were read)
  price_per_hour    the system's price given in the manifest (any currency)
  cost_per_million  price of a million samples at throughput_per_s (system.cost_per_million)
  trace_path        the saved .xsp trace, relative to the results directory when inside it

layers: the leaf layers (modules without submodules: no time counted twice) of one iteration,
from xsp.analysis.layer_ranking on the measurement, slowest first
  evaluation_id, model, batch_size   as the evaluation's
  layer             the qualified name ("layer1.0.conv1")
  layer_type        the nn.Module class name ("Conv2d")
  calls             calls per iteration
  mean_ns           forward time per iteration (all its calls), leveled: from run ML
  backward_ns       time of the backward functions of its forward ops, per iteration
  share             (mean_ns + backward_ns) / latency_M_mean_ns: layer_ranking's step_share.
                    Layer times come from run ML and the iteration's from run M, so a share
                    can pass 1 where recording costs more than the layer's own work
  forward_share     mean_ns / the iteration's forward time (model and top-level layer calls)

layer_types: the leaf layers grouped by class (xsp.analysis.layer_types), largest first
  evaluation_id, model, batch_size
  layer_type        the class name
  count             leaf layer calls of the type per iteration
  total_ns          their forward time per iteration
  backward_ns       their backward time per iteration
  share, forward_share   as in layers
  count_share       count / all leaf layer calls

ops: the op table of one iteration (xsp.analysis.ops: torch.profiler's key_averages, a
redispatch merged into its caller), by self time
  evaluation_id, model, batch_size
  op                the operator ("aten::addmm")
  calls             calls per iteration
  total_ns          inclusive time per iteration (nested calls of the same op counted too)
  self_ns           exclusive time per iteration
  share             self_ns / latency_M_mean_ns
  gpu_ns, gpu_self_ns   GPU work launched inside the op (nested ops included) or by the op
                    itself, per iteration; NULL without G

kernels: GPU kernels of one iteration by name (xsp.analysis.kernels_by_name); no rows without G
  evaluation_id, model, batch_size
  kernel            the demangled name
  calls             launches per iteration
  total_ns          time per iteration; min_ns, max_ns of one launch
  share             total_ns / latency_M_mean_ns

systems: one row per system (xsp.zoo.system.fingerprint; the first evaluation to record a
system writes its row)
  system_id         hash of the fields that define the system (system.SYSTEM_ID_FIELDS)
  hostname, arch, cpu_model, cpu_count (logical), cpu_affinity (CPUs the process could use),
  memory_bytes, memory_gib, os, kernel, python, torch_version, torch_cuda (CUDA torch was
  built for), cudnn_version, xsp_version, torch_threads, torch_interop_threads, gpu_count,
  gpu_name (device 0), gpu_names ("; "-joined), gpu_memory_bytes, gpu_capability ("9.0"),
  gpu_driver, gpu_why (why the GPU fields are NULL)
"""
import datetime as _dt
import json
import math
import os
import re
import secrets

import numpy as np
import pandas as pd

from xsp.analysis import flops, memory
from xsp.analysis import tables as A
from xsp.analysis.compiled import compiling_steps
from xsp.core.util import atomic_write
from . import system as _system

SCHEMA_VERSION = 1
VERSION_KEY = b"xsp.schema_version"
TABLE_KEY = b"xsp.table"
STATUSES = ("ok", "failed", "timeout", "killed")
RUNS = ("M", "ML", "MLG")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}\Z")
_GLOB_CHARS = re.compile(r"[*?\[\]{}]")
COMPACT_PREFIX = "compact-"     # compacted files' names (compact()): no evaluation_id's

S, I, F, T = "string", "int64", "float64", "timestamp"


def _latency_columns():
    out = []
    for r in RUNS:
        out += [("latency_%s_mean_ns" % r, F), ("latency_%s_std_ns" % r, F),
                ("latency_%s_median_ns" % r, F), ("latency_%s_n" % r, I)]
    return out


_HEAD = [("evaluation_id", S), ("model", S), ("batch_size", I)]
SCHEMAS = {
    "evaluations": [
        ("evaluation_id", S), ("key", S), ("model", S), ("family", S), ("source", S),
        ("task", S), ("batch_size", I), ("levels", S), ("options", S), ("system_id", S),
        ("hostname", S), ("torch_threads", I), ("status", S), ("reason", S),
        ("output_tail", S), ("started_at", T), ("wall_s", F), ("measure_s", F), ("warmup", I),
        ("repeat", I),
    ] + _latency_columns() + [
        ("gpu_ns", F), ("throughput_per_s", F), ("flops", F), ("bytes", F),
        ("peak_cpu_bytes", I), ("peak_cuda_bytes", I), ("energy_j", F), ("energy_cpu_j", F),
        ("energy_gpu_j", F), ("energy_why", S), ("price_per_hour", F),
        ("cost_per_million", F), ("trace_path", S)],
    "layers": _HEAD + [("layer", S), ("layer_type", S), ("calls", I), ("mean_ns", F),
                       ("backward_ns", F), ("share", F), ("forward_share", F)],
    "layer_types": _HEAD + [("layer_type", S), ("count", I), ("total_ns", F),
                            ("backward_ns", F), ("share", F), ("forward_share", F),
                            ("count_share", F)],
    "ops": _HEAD + [("op", S), ("calls", I), ("total_ns", F), ("self_ns", F), ("share", F),
                    ("gpu_ns", F), ("gpu_self_ns", F)],
    "kernels": _HEAD + [("kernel", S), ("calls", I), ("total_ns", F), ("min_ns", F),
                        ("max_ns", F), ("share", F)],
    "systems": [
        ("system_id", S), ("hostname", S), ("arch", S), ("cpu_model", S), ("cpu_count", I),
        ("cpu_affinity", I), ("memory_bytes", I), ("memory_gib", I), ("os", S), ("kernel", S),
        ("python", S), ("torch_version", S), ("torch_cuda", S), ("cudnn_version", I),
        ("xsp_version", S), ("torch_threads", I), ("torch_interop_threads", I),
        ("gpu_count", I), ("gpu_name", S), ("gpu_names", S), ("gpu_memory_bytes", I),
        ("gpu_capability", S), ("gpu_driver", S), ("gpu_why", S)],
}
TABLES = tuple(SCHEMAS)
DETAIL_TABLES = ("layers", "layer_types", "ops", "kernels")
_SQL_TYPES = {S: "VARCHAR", I: "BIGINT", F: "DOUBLE", T: "TIMESTAMPTZ"}


class StoreError(ValueError):
    """A results directory, a file in it or rows to write are not what the store expects; the
    message says which and what to do."""


class SchemaVersionError(StoreError):
    """A file was written with a newer schema version than this xsp reads."""


_ARROW_TYPES = {}


def _arrow_type(pa, t):
    if not _ARROW_TYPES:
        _ARROW_TYPES.update({S: pa.string(), I: pa.int64(), F: pa.float64(),
                             T: pa.timestamp("us", tz="UTC")})
    return _ARROW_TYPES[t]


def new_evaluation_id():
    """A fresh evaluation id: the UTC time and 8 random hex digits, "20260102T030405Z-1a2b3c4d"
    (ids sort by start time; two workers never draw the same one)."""
    now = _dt.datetime.now(_dt.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(4)


def _check_id(what, v):
    if not isinstance(v, str) or not _ID.match(v):
        raise StoreError("%s must be a string of letters, digits, '.', '_' and '-' (at most "
                         "200, not starting with '.', '_' or '-': it names a file), not %r"
                         % (what, v))
    return v


def _timestamp(v):
    """started_at as an aware UTC datetime: from one, a pandas Timestamp, or epoch seconds."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, pd.Timestamp):
        v = v.to_pydatetime()
    if isinstance(v, _dt.datetime):
        if v.tzinfo is None:
            raise StoreError("started_at %s has no time zone: give an aware datetime "
                             "(datetime.now(timezone.utc)) or epoch seconds" % (v,))
        return v.astimezone(_dt.timezone.utc)
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
        return _dt.datetime.fromtimestamp(float(v), _dt.timezone.utc)
    raise StoreError("started_at must be a datetime or epoch seconds, not %s"
                     % type(v).__name__)


def _records(table, rows):
    """rows (a DataFrame, a list of dicts, or one dict for the one-row tables) as
    (columns in order, {column: list of values})."""
    if isinstance(rows, pd.DataFrame):
        cols = [str(c) for c in rows.columns]
        if len(set(cols)) != len(cols):
            raise StoreError("table %s: the rows have duplicate column names" % table)
        return cols, {str(c): rows[c] for c in rows.columns}, len(rows)
    if isinstance(rows, dict):
        rows = [rows]
    if not isinstance(rows, (list, tuple)) or not all(isinstance(r, dict) for r in rows):
        raise StoreError("table %s: rows must be a DataFrame or a list of dicts, not %s"
                         % (table, type(rows).__name__))
    cols = list(dict.fromkeys(str(k) for r in rows for k in r))
    return cols, {c: [r.get(c) for r in rows] for c in cols}, len(rows)


def _arrow_table(table, rows, fill=None):
    """rows as a pyarrow Table of the table's schema: its columns in order, with their types
    (a missing one all NULL, or fill[column] in every row; NaN is NULL), then any other
    columns, typed by inference."""
    import pyarrow as pa
    cols, values, n = _records(table, rows)
    for c, v in (fill or {}).items():
        if c not in values:
            values[c] = [v] * n
    known = dict(SCHEMAS[table])
    arrays, names = [], []
    for name in [c for c, _ in SCHEMAS[table]] + [c for c in cols if c not in known]:
        t = known.get(name)
        v = values.get(name)
        try:
            if v is None:
                arr = pa.nulls(n, type=_arrow_type(pa, t))
            elif t is None:
                arr = pa.array(v, from_pandas=True)
            else:
                if t == T:
                    v = [_timestamp(x) for x in v]
                arr = pa.array(v, type=_arrow_type(pa, t), from_pandas=True)
        except StoreError:
            raise
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
            want = _SQL_TYPES.get(t, "a Parquet type")
            raise StoreError("table %s, column %s: the values are not %s: %s"
                             % (table, name, want, e)) from None
        arrays.append(arr)
        names.append(name)
    meta = {VERSION_KEY: str(SCHEMA_VERSION).encode(), TABLE_KEY: table.encode()}
    return pa.Table.from_arrays(arrays, names=names).replace_schema_metadata(meta)


def _write(path, tbl):
    import pyarrow.parquet as pq
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, lambda f: pq.write_table(tbl, f), binary=True)


def _file(results_dir, table, name):
    return os.path.join(os.fspath(results_dir), table, name + ".parquet")


def _evaluation_row(row):
    if not isinstance(row, dict):
        raise StoreError("the evaluation row must be a dict, not %s" % type(row).__name__)
    row = dict(row)
    _check_id("evaluation_id", row.get("evaluation_id"))
    if row["evaluation_id"].startswith(COMPACT_PREFIX):
        raise StoreError("evaluation_id %r starts with %r, which names compacted files"
                         % (row["evaluation_id"], COMPACT_PREFIX))
    if row.get("status") not in STATUSES:
        raise StoreError("status must be one of %s, not %r"
                         % (", ".join(STATUSES), row.get("status")))
    opts = row.get("options")
    if opts is not None and not isinstance(opts, str):
        row["options"] = json.dumps(opts, sort_keys=True)
    return row


def write_evaluation(results_dir, evaluation_row, tables=None):
    """Writes one evaluation: its detail tables first ({table: rows}, tables among
    DETAIL_TABLES; rows a DataFrame or a list of dicts, their evaluation_id, model and
    batch_size filled in from the evaluation where absent), then its evaluations row (a dict;
    options may be a dict, written as JSON text; started_at an aware datetime or epoch
    seconds).  A detail table with no rows writes no file (and removes one a former write of
    this evaluation_id left).  Returns the path of the evaluations file.  Raises StoreError for
    a bad id, status, table or value (before anything is written) and OSError as the file
    system does."""
    row = _evaluation_row(evaluation_row)
    eid = row["evaluation_id"]
    tables = dict(tables or {})
    bad = [t for t in tables if t not in DETAIL_TABLES]
    if bad:
        raise StoreError("unknown detail table(s) %s: the tables of an evaluation are %s"
                         % (", ".join(map(repr, bad)), ", ".join(DETAIL_TABLES)))
    built = {}
    for t in DETAIL_TABLES:
        rows = tables.get(t)
        cols, values, n = _records(t, [] if rows is None else rows)
        if not n:
            built[t] = None
            continue
        fill = {c: row.get(c) for c in ("evaluation_id", "model", "batch_size")}
        for c, want in fill.items():
            if c in values and any(v != want for v in list(values[c])):
                raise StoreError("table %s: a row's %s is not the evaluation's (%r)"
                                 % (t, c, want))
        built[t] = _arrow_table(t, rows, fill)
    ev = _arrow_table("evaluations", [row])
    for t, tbl in built.items():
        path = _file(results_dir, t, eid)
        if tbl is not None:
            _write(path, tbl)
        else:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
    path = _file(results_dir, "evaluations", eid)
    _write(path, ev)
    return path


def write_system(results_dir, fingerprint):
    """Writes the systems row of a fingerprint (xsp.zoo.system.fingerprint()) unless the
    system already has one: the fields that define it are the same for every writer.  Returns
    the path of its file.  Columns of the fingerprint that the schema does not know are kept."""
    if not isinstance(fingerprint, dict):
        raise StoreError("the fingerprint must be a dict, not %s" % type(fingerprint).__name__)
    fp = dict(fingerprint)
    if fp.get("system_id") is None:
        fp["system_id"] = _system.system_id(fp)
    path = _file(results_dir, "systems", _check_id("system_id", fp["system_id"]))
    if not os.path.exists(path):
        _write(path, _arrow_table("systems", [fp]))
    return path


# -- reading ------------------------------------------------------------------------------

def _lit(s):
    return "'" + s.replace("'", "''") + "'"


def _dir(results_dir, table):
    return os.path.join(os.path.abspath(os.fspath(results_dir)), table)


def _listing(results_dir, table):
    """{file name: (inode, mtime_ns, size)} of the table's Parquet files (what the glob
    *.parquet matches: temporary files end in .tmp)."""
    out = {}
    try:
        with os.scandir(_dir(results_dir, table)) as it:
            for e in it:
                if e.name.endswith(".parquet") and e.is_file():
                    st = e.stat()
                    out[e.name] = (st.st_ino, st.st_mtime_ns, st.st_size)
    except (FileNotFoundError, NotADirectoryError):
        pass
    return out


def _source(results_dir, table, names, glob=False):
    """The SQL file set of a table that has the files names: with glob, the glob of its
    folder (read at query time) unless the path has glob characters, else the list of them;
    None when names is empty."""
    d = _dir(results_dir, table)
    if not names:
        return None
    if glob and not _GLOB_CHARS.search(d):
        return _lit(os.path.join(d, "*.parquet"))
    return "[%s]" % ", ".join(_lit(os.path.join(d, n)) for n in sorted(names))


def _empty_relation(table, extra=""):
    cols = ", ".join("CAST(NULL AS %s) AS \"%s\"" % (_SQL_TYPES[t], c)
                     for c, t in SCHEMAS[table])
    return "SELECT %s%s WHERE false" % (cols, extra)


def _scan(table, src):
    """The rows of a table's files (src: _source's) with their generation, column _xsp_gen:
    the name of the compacted file they are in, or '~' (after every compacted name) for an
    evaluation's own file.  The typed empty relation comes first: every column of the schema,
    in its order, with its type, then the columns only some files have."""
    sql = _empty_relation(table, ", CAST(NULL AS VARCHAR) AS _xsp_gen")
    if src is not None:
        sql += (" UNION ALL BY NAME SELECT * EXCLUDE (_xsp_file), CASE WHEN "
                "starts_with(parse_filename(_xsp_file), '%s') THEN parse_filename(_xsp_file, "
                "true) ELSE '~' END AS _xsp_gen FROM read_parquet(%s, union_by_name = true, "
                "filename = '_xsp_file')" % (COMPACT_PREFIX, src))
    return "(%s)" % sql


def _relation(table, src, ev_src, ev_scan=None):
    """The SQL of a table as its view shows it (ev_scan: a relation holding _scan of the
    evaluations, instead of scanning them again).  An evaluation's rows come from one
    generation, that of its evaluations row: its own files when it has an evaluations file,
    else the latest compacted file that holds it (so neither a compaction in progress nor a
    retry after one shows a row twice, and detail rows show only with their evaluations
    row)."""
    if table == "systems":
        return "SELECT * EXCLUDE (_xsp_gen) FROM %s" % _scan(table, src)
    ev_scan = ev_scan or _scan("evaluations", ev_src)
    if table == "evaluations":
        return ("SELECT * EXCLUDE (_xsp_gen) FROM %s QUALIFY _xsp_gen = max(_xsp_gen) OVER "
                "(PARTITION BY evaluation_id)" % ev_scan)
    return ("SELECT d.* EXCLUDE (_xsp_gen) FROM %s d SEMI JOIN (SELECT evaluation_id, "
            "max(_xsp_gen) AS _xsp_gen FROM %s GROUP BY evaluation_id) w USING "
            "(evaluation_id, _xsp_gen)" % (_scan(table, src), ev_scan))


# (path, inode, mtime_ns, size) of the files this process has checked: a file is checked
# once, not at every open() (the check reads its footer: most of open()'s time)
_CHECKED = set()
_CHECKED_MAX = 1 << 20


def _check_files(con, results_dir, table, listing):
    """Raises SchemaVersionError or StoreError for a file of the listing (_listing's) that
    this xsp cannot read as the table's."""
    d = _dir(results_dir, table)
    todo = {os.path.join(d, n): ident for n, ident in listing.items()
            if (os.path.join(d, n),) + ident not in _CHECKED}
    if not todo:
        return
    src = "[%s]" % ", ".join(_lit(f) for f in sorted(todo))
    meta = {}
    for f, k, v in con.execute(
            "SELECT file_name, key, value FROM parquet_kv_metadata(%s) WHERE key IN (%s, %s)"
            % (src, _lit(VERSION_KEY.decode()), _lit(TABLE_KEY.decode()))).fetchall():
        meta.setdefault(f, {})[bytes(k)] = bytes(v)
    for f in sorted(todo):
        m = meta.get(f, {})
        v = m.get(VERSION_KEY)
        if v is None:
            raise StoreError("%s has no %s in its Parquet metadata: it was not written by "
                             "xsp.zoo.store; move it out of the results directory"
                             % (f, VERSION_KEY.decode()))
        try:
            version = int(v.decode())
        except ValueError:
            raise StoreError("%s: %s is %r, not a number" % (f, VERSION_KEY.decode(), v)) \
                from None
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                "%s was written with results schema version %d, newer than this xsp reads "
                "(%d): upgrade xsp to read it" % (f, version, SCHEMA_VERSION))
        if m.get(TABLE_KEY, table.encode()) != table.encode():
            raise StoreError("%s holds table %s, not %s: move it to its own folder"
                             % (f, m[TABLE_KEY].decode(errors="replace"), table))
    if len(_CHECKED) + len(todo) > _CHECKED_MAX:
        _CHECKED.clear()
    _CHECKED.update((f,) + ident for f, ident in todo.items())


def _connect():
    import duckdb
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    return con


def open(results_dir, snapshot=False):  # noqa: A001 -- xsp.zoo.open, as the issue names it
    """An in-memory DuckDB connection with one view per table (TABLES) over the Parquet files
    of results_dir (see the module docstring); a directory that does not exist gives empty
    views.  A view reads its files at every query (a millisecond or so of CPU per file: run
    compact() after a run), and with snapshot=True the tables are read into memory once
    instead (files written afterwards are not seen), for the many queries of a report.

    results_dir may also be a list or tuple of directories (the results of several machines,
    copied side by side): each view is then the union of theirs, and an evaluation_id found
    in several shows once, with its detail rows, from the first directory that has it (a
    systems row likewise by system_id); a directory named twice counts once.  Raises
    SchemaVersionError for a file of a newer schema, StoreError for a file the store did not
    write or an empty list of directories."""
    dirs = _dirs(results_dir)
    con = _connect()
    try:
        srcs = []
        for d in dirs:
            s = {}
            for table in TABLES:
                listing = _listing(d, table)
                _check_files(con, d, table, listing)
                s[table] = _source(d, table, listing, glob=True)
            srcs.append(s)
        for table in TABLES:
            rel = (_relation(table, srcs[0][table], srcs[0]["evaluations"]) if len(srcs) == 1
                   else _union_relation(table, srcs))
            con.execute('CREATE %s "%s" AS %s' % ("TABLE" if snapshot else "VIEW", table, rel))
    except BaseException:
        con.close()
        raise
    return con


def _dirs(results_dir):
    """The directories of open()'s results_dir: [it], or the list's, each once (by real
    path), in order."""
    if not isinstance(results_dir, (list, tuple)):
        return [results_dir]
    if not results_dir:
        raise StoreError("no results directory given: name at least one")
    out, seen = [], set()
    for d in results_dir:
        real = os.path.realpath(os.fspath(d))
        if real not in seen:
            seen.add(real)
            out.append(d)
    return out


def _union_relation(table, srcs):
    """The SQL of a table over several directories (srcs: each one's {table: _source}): the
    union by name of each one's _relation tagged with its index, an evaluation's rows (a
    system's row) from the first directory that has its evaluations row (its row)."""
    def tagged(t):
        return " UNION ALL BY NAME ".join(
            "SELECT *, %d AS _xsp_dir FROM (%s)" % (i, _relation(t, s[t], s["evaluations"]))
            for i, s in enumerate(srcs))
    if table in ("systems", "evaluations"):
        key = "system_id" if table == "systems" else "evaluation_id"
        return ("SELECT * EXCLUDE (_xsp_dir) FROM (%s) QUALIFY _xsp_dir = min(_xsp_dir) OVER "
                "(PARTITION BY %s)" % (tagged(table), key))
    return ("SELECT d.* EXCLUDE (_xsp_dir) FROM (%s) d SEMI JOIN (SELECT evaluation_id, "
            "min(_xsp_dir) AS _xsp_dir FROM (%s) GROUP BY evaluation_id) w USING "
            "(evaluation_id, _xsp_dir)" % (tagged(table), tagged("evaluations")))


def compact(results_dir):
    """Merges the files of every evaluation into one file per table,
    <table>/compact-<UTC time>-<random>.parquet (with the former compacted files), and removes
    the files it merged: a query then reads a handful of files instead of one per evaluation
    and table.  Returns the name of the new files (without .parquet), or None when there was
    nothing to merge (at most one file per table).

    The views show the same rows before, during and after it (see _relation), and an
    evaluation written or retried meanwhile keeps its own files, which win over the compacted
    rows.  Only files unchanged since they were read are removed; one rewritten in the
    microseconds between that check and its removal would be lost, so run it when no worker
    writes (xsp zoo run's end).  Plain readers (DuckDB's glob, pandas) see rows twice while it
    runs, never after.  Raises as open() does, and OSError."""
    import pyarrow as pa
    tables = ("evaluations",) + DETAIL_TABLES
    listed = {t: _listing(results_dir, t) for t in tables}
    if all(len(v) <= 1 for v in listed.values()):
        return None
    now = _dt.datetime.now(_dt.timezone.utc)
    name = "%s%s-%s" % (COMPACT_PREFIX, now.strftime("%Y%m%dT%H%M%S%fZ"), secrets.token_hex(4))
    con = _connect()
    try:
        srcs = {t: _source(results_dir, t, listed[t]) for t in tables}
        for t in tables:
            _check_files(con, results_dir, t, listed[t])
        con.execute("CREATE TEMP TABLE _xsp_ev AS SELECT * FROM %s"
                    % _scan("evaluations", srcs["evaluations"]))
        winner = dict(con.execute("SELECT evaluation_id, max(_xsp_gen) FROM _xsp_ev GROUP BY 1"
                                  ).fetchall())
        # the detail tables first and the evaluations last, as write_evaluation does: the new
        # generation shows when its evaluations rows do
        for t in DETAIL_TABLES + ("evaluations",):
            tbl = con.sql(_relation(t, srcs[t], None, "_xsp_ev")).to_arrow_table()
            if not tbl.num_rows:
                continue
            known = dict(SCHEMAS[t])
            cols = [tbl.column(c).cast(_arrow_type(pa, known[c])) if c in known
                    else tbl.column(c) for c in tbl.column_names]
            meta = {VERSION_KEY: str(SCHEMA_VERSION).encode(), TABLE_KEY: t.encode()}
            _write(_file(results_dir, t, name), pa.Table.from_arrays(
                cols, names=tbl.column_names).replace_schema_metadata(meta))
    finally:
        con.close()
    for t in tables:
        for f, ident in listed[t].items():
            stem = f[:-len(".parquet")]
            own = not stem.startswith(COMPACT_PREFIX)
            # an evaluation's own detail file is merged when its evaluations file was (one
            # written before its evaluations row, a retry in progress, is not: it stays)
            if own and t != "evaluations" and winner.get(stem) != "~":
                continue
            _unlink_if_same(os.path.join(_dir(results_dir, t), f), ident)
    return name


def _unlink_if_same(path, ident):
    """Removes path if it is still the file (inode, mtime_ns, size) ident."""
    try:
        st = os.stat(path)
        if (st.st_ino, st.st_mtime_ns, st.st_size) == ident:
            os.unlink(path)
    except FileNotFoundError:
        pass


def query(results_dir, sql):
    """The result of one SQL query over the views of open(results_dir), a DataFrame."""
    con = open(results_dir)
    try:
        return con.sql(sql).df()
    finally:
        con.close()


def done_keys(results_dir):
    """The keys of the evaluations with status ok: what a resumed run skips."""
    if not _listing(results_dir, "evaluations"):
        return set()
    df = query(results_dir, "SELECT DISTINCT key FROM evaluations "
                            "WHERE status = 'ok' AND key IS NOT NULL")
    return set(df["key"].tolist())


# -- from a measurement -------------------------------------------------------------------

def _num(v):
    """v as a float, None for None, NaN and infinities."""
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _run_samples(m, run):
    """The iteration (step) latencies of a run of a Measurement, every measured iteration of
    every round: the steps after the priming ones, without those torch.compile compiled in
    (as the Measurement leaves them out); None where they do not add up to its count."""
    out = []
    for t in m.all_traces[run]:
        steps = t.spans(kind="step")[m.skip:]
        left = set()
        if run in m.compiling:
            left = set(int(i) for i in compiling_steps(t))
        out += [s.duration_ns for s in steps if s.id not in left]
    return out if len(out) == m.n_iterations.get(run) else None


def _latencies(m):
    ov = m.overhead
    row = {}
    for r in m.runs:
        at = ov[(ov["level"] == "M") & (ov["run"] == r)]
        samples = _run_samples(m, r)
        row["latency_%s_mean_ns" % r] = _num(at["latency_ns"].iloc[0])
        row["latency_%s_std_ns" % r] = _num(at["std_ns"].iloc[0])
        row["latency_%s_median_ns" % r] = (float(np.median(samples)) if samples else None)
        row["latency_%s_n" % r] = int(m.n_iterations[r])
    g = ov[(ov["level"] == "G") & (ov["run"] == "MLG")]
    row["gpu_ns"] = _num(g["latency_ns"].iloc[0]) if len(g) else None
    return row


def _has_attr(trace, key):
    return len(trace.attr_column(key)[0]) > 0


def _costs(trace):
    """(flops, bytes) per iteration: the mean over the trace's steps (the whole trace when it
    has none) of what xsp.flops counts; Nones without op inputs."""
    if not _has_attr(trace, "input_dims"):
        return None, None
    if len(trace.spans(kind="step")):
        c = flops.costs(trace, by="step")
        f, b = c["flops"].to_numpy(float), c["bytes"].to_numpy(float)
        return (_num(np.nanmean(f)) if (~np.isnan(f)).any() else None,
                _num(np.nanmean(b)) if (~np.isnan(b)).any() else None)
    s = flops.summary(trace)
    return _num(s["flops"]), _num(s["bytes"])


def _peaks(trace):
    if not memory.has_memory(trace):
        return None, None
    s = memory.summary(trace)
    return tuple(s[d]["peak_bytes"] if d in s else None for d in ("cpu", "cuda"))


def _rename(df, names, head):
    out = df[list(names)].rename(columns=names)
    for c, v in reversed(list(head.items())):
        out.insert(0, c, v)
    return out


def rows_from_measurement(measurement, trace=None, *, model, batch_size, evaluation_id=None,
                          system=None, energy=None, price_per_hour=None, **columns):
    """The rows of an ok evaluation from an xsp.measure Measurement: (evaluation row, {table:
    DataFrame}) for write_evaluation.

    trace: the trace whose op inputs and memory give flops, bytes and the peaks (a profile
    recorded with record_shapes=True and profile_memory=True; default the measurement's
    deepest trace, which has them when measure was given those options).  model, batch_size:
    the evaluation's.  evaluation_id: default new_evaluation_id().  system: a fingerprint
    (xsp.zoo.system.fingerprint()), for system_id, hostname and torch_threads.  energy: a
    stopped EnergyMeter, for the energy columns.  price_per_hour: for cost_per_million.  Other
    keyword arguments are evaluations columns (key, family, source, task, options, started_at,
    wall_s, trace_path, ...), which override what is derived; a name that is not one raises
    TypeError."""
    unknown = [c for c in columns if c not in dict(SCHEMAS["evaluations"])]
    if unknown:
        raise TypeError("rows_from_measurement: unknown evaluations column(s) %s"
                        % ", ".join(map(repr, unknown)))
    m = measurement
    trace = m.trace if trace is None else trace
    eid = new_evaluation_id() if evaluation_id is None else evaluation_id
    row = {"evaluation_id": eid, "model": model, "batch_size": int(batch_size),
           "levels": m.levels, "status": "ok", "warmup": int(m.warmup),
           "repeat": int(m.repeat)}
    if system is not None:
        row.update(system_id=system.get("system_id"), hostname=system.get("hostname"),
                   torch_threads=system.get("torch_threads"))
    row.update(_latencies(m))
    lat = row["latency_M_mean_ns"]
    row["throughput_per_s"] = batch_size * 1e9 / lat if lat else None
    row["flops"], row["bytes"] = _costs(trace)
    row["peak_cpu_bytes"], row["peak_cuda_bytes"] = _peaks(trace)
    if energy is not None:
        parts = [j for j in (energy.cpu_j, energy.gpu_j) if j is not None]
        row.update(energy_j=sum(parts) if parts else None, energy_cpu_j=energy.cpu_j,
                   energy_gpu_j=energy.gpu_j, energy_why=energy.why)
    row["price_per_hour"] = price_per_hour
    row["cost_per_million"] = _system.cost_per_million(row["throughput_per_s"], price_per_hour)
    row.update(columns)
    head = {"evaluation_id": eid, "model": model, "batch_size": int(batch_size)}
    tables = {
        "layers": _rename(A.layer_ranking(m), {
            "name": "layer", "type": "layer_type", "calls": "calls", "total_ns": "mean_ns",
            "backward_ns": "backward_ns", "step_share": "share",
            "forward_share": "forward_share"}, head),
        "layer_types": _rename(A.layer_types(m), {
            "type": "layer_type", "count": "count", "total_ns": "total_ns",
            "backward_ns": "backward_ns", "step_share": "share",
            "forward_share": "forward_share", "count_share": "count_share"}, head),
        "ops": _rename(A.ops(m), {
            "name": "op", "calls": "calls", "total_ns": "total_ns", "self_ns": "self_ns",
            "self_share": "share", "gpu_ns": "gpu_ns", "gpu_self_ns": "gpu_self_ns"}, head),
        "kernels": _rename(A.kernels_by_name(m), {
            "name": "kernel", "count": "calls", "total_ns": "total_ns", "min_ns": "min_ns",
            "max_ns": "max_ns", "share": "share"}, head),
    }
    return row, tables


__all__ = ["open", "query", "done_keys", "compact", "write_evaluation", "write_system",
           "rows_from_measurement", "new_evaluation_id", "SCHEMAS", "TABLES", "DETAIL_TABLES",
           "SCHEMA_VERSION", "STATUSES", "StoreError", "SchemaVersionError"]
