"""xsp.zoo.store, the results database: every table written and read back exactly, the views
over zero, one and many evaluations (typed columns even with no file), union by name over
files of different columns, the schema version check, temporary and half-written files left
out, done_keys, plain DuckDB and pandas reading the same files without xsp, a query over
1,000 evaluations, compaction (every row once before, during and after it; retries and writes
in progress kept), and the rows of a real measurement (a tiny model measured with xsp.measure
under the fake clock: exact values)."""
import datetime as dt
import json
import os

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from torch import nn

import xsp
from xsp.analysis import tables as analysis
from xsp.analysis import flops
from xsp.analysis import memory
from xsp.zoo import store, system
from xsp.zoo.store import SCHEMAS, SchemaVersionError, StoreError
from helpers import descendants

T0 = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)


def ev(eid, status="ok", **kw):
    row = {"evaluation_id": eid, "key": "key-" + eid, "model": "m-" + eid, "family": "cnn",
           "source": "python:tests:m", "task": "inference", "batch_size": 8, "levels": "ML",
           "options": {"record_shapes": False}, "system_id": "sys0", "hostname": "node-1",
           "torch_threads": 2, "status": status, "started_at": T0, "wall_s": 1.5,
           "warmup": 3, "repeat": 10, "latency_M_mean_ns": 1000.0, "latency_M_std_ns": 10.0,
           "latency_M_median_ns": 998.0, "latency_M_n": 10, "throughput_per_s": 8e6}
    row.update(kw)
    return row


def detail(eid):
    """Rows of the four detail tables (without the columns write_evaluation fills in)."""
    return {
        "layers": [{"layer": "conv1", "layer_type": "Conv2d", "calls": 1, "mean_ns": 600.0,
                    "backward_ns": 0.0, "share": 0.6, "forward_share": 0.625},
                   {"layer": "fc", "layer_type": "Linear", "calls": 2, "mean_ns": 300.0,
                    "backward_ns": 0.0, "share": 0.3, "forward_share": 0.3125}],
        "layer_types": pd.DataFrame({"layer_type": ["Conv2d", "Linear"], "count": [1, 2],
                                     "total_ns": [600.0, 300.0], "backward_ns": [0.0, 0.0],
                                     "share": [0.6, 0.3], "forward_share": [0.625, 0.3125],
                                     "count_share": [1 / 3, 2 / 3]}),
        "ops": [{"op": "aten::conv2d", "calls": 1, "total_ns": 550.0, "self_ns": 50.0,
                 "share": 0.05, "gpu_ns": None, "gpu_self_ns": float("nan")}],
        "kernels": [{"kernel": "sgemm_128x64", "calls": 2, "total_ns": 220.0, "min_ns": 100.0,
                     "max_ns": 120.0, "share": 0.22}],
    }


FINGERPRINT = {"system_id": "sys0", "hostname": "node-1", "arch": "x86_64",
               "cpu_model": "AMD EPYC", "cpu_count": 2, "cpu_affinity": 2,
               "memory_bytes": 25275990016, "memory_gib": 24, "os": "Debian GNU/Linux 12",
               "kernel": "6.1.0", "python": "3.11.7", "torch_version": "2.13.0+cpu",
               "torch_cuda": None, "cudnn_version": None, "xsp_version": "0.1.0",
               "torch_threads": 2, "torch_interop_threads": 2, "gpu_count": None,
               "gpu_name": None, "gpu_names": None, "gpu_memory_bytes": None,
               "gpu_capability": None, "gpu_driver": None, "gpu_why": "no CUDA"}


def records(df):
    """A DataFrame's rows as dicts with NaN, NA and NaT as None (for exact comparison)."""
    out = []
    for r in df.astype(object).to_dict("records"):
        out.append({k: (None if v is None or v is pd.NaT or (isinstance(v, float) and
                                                             np.isnan(v)) or v is pd.NA
                        else v) for k, v in r.items()})
    return out


def test_every_table_round_trips(tmp_path):
    store.write_system(tmp_path, FINGERPRINT)
    path = store.write_evaluation(tmp_path, ev("e1", energy_why="cpu: no RAPL"), detail("e1"))
    assert path == str(tmp_path / "evaluations" / "e1.parquet")
    con = store.open(tmp_path)
    got = records(con.sql("SELECT * FROM evaluations").df())
    assert len(got) == 1
    want = {c: None for c, _ in SCHEMAS["evaluations"]}
    want.update(ev("e1", energy_why="cpu: no RAPL"), options='{"record_shapes": false}')
    assert got[0] == want
    head = {"evaluation_id": "e1", "model": "m-e1", "batch_size": 8}
    for table, rows in detail("e1").items():
        rows = records(rows) if isinstance(rows, pd.DataFrame) else rows
        want = [{**{c: None for c, _ in SCHEMAS[table]}, **head, **r} for r in rows]
        assert records(con.sql("SELECT * FROM %s" % table).df()) == \
            [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()}
             for r in want], table
    assert records(con.sql("SELECT * FROM systems").df()) == [FINGERPRINT]
    # the columns in the schema's order, with their types
    types = {r[0]: r[1] for r in con.execute("DESCRIBE evaluations").fetchall()}
    assert list(types) == [c for c, _ in SCHEMAS["evaluations"]]
    assert (types["batch_size"], types["wall_s"], types["started_at"], types["model"]) == \
        ("BIGINT", "DOUBLE", "TIMESTAMP WITH TIME ZONE", "VARCHAR")
    con.close()


def test_views_over_no_evaluation_have_the_typed_columns(tmp_path):
    for d in (tmp_path / "missing", tmp_path):
        con = store.open(d)
        for table in store.TABLES:
            desc = con.execute("DESCRIBE %s" % table).fetchall()
            assert [r[0] for r in desc] == [c for c, _ in SCHEMAS[table]]
            assert con.execute("SELECT count(*) FROM %s" % table).fetchone() == (0,)
        # a query naming a column of any level works on an empty database
        assert con.execute("SELECT max(latency_MLG_mean_ns), sum(energy_gpu_j) FROM "
                           "evaluations").fetchone() == (None, None)
        con.close()
        assert store.done_keys(d) == set()


def test_views_over_one_and_many_evaluations(tmp_path):
    store.write_evaluation(tmp_path, ev("e0"), detail("e0"))
    assert store.query(tmp_path, "SELECT evaluation_id FROM evaluations")[
        "evaluation_id"].tolist() == ["e0"]
    for i in range(1, 5):
        store.write_evaluation(tmp_path, ev("e%d" % i, batch_size=i), detail("e%d" % i))
    df = store.query(tmp_path, "SELECT evaluation_id, batch_size FROM evaluations ORDER BY 1")
    assert df.values.tolist() == [["e0", 8], ["e1", 1], ["e2", 2], ["e3", 3], ["e4", 4]]
    df = store.query(tmp_path, "SELECT e.batch_size, sum(l.calls) AS calls FROM layers l JOIN "
                               "evaluations e USING (evaluation_id) GROUP BY 1 ORDER BY 1")
    assert df.values.tolist() == [[1, 3], [2, 3], [3, 3], [4, 3], [8, 3]]
    # the detail rows carry the evaluation's model and batch size
    assert store.query(tmp_path, "SELECT DISTINCT model, batch_size FROM ops WHERE "
                                 "evaluation_id = 'e3'").values.tolist() == [["m-e3", 3]]


def test_a_view_sees_files_written_after_it_was_opened_a_snapshot_does_not(tmp_path):
    store.write_evaluation(tmp_path, ev("e0"), detail("e0"))
    con = store.open(tmp_path)
    snap = store.open(tmp_path, snapshot=True)
    store.write_evaluation(tmp_path, ev("e1"), detail("e1"))
    assert con.execute("SELECT count(*) FROM evaluations").fetchone() == (2,)
    assert snap.execute("SELECT count(*) FROM evaluations").fetchone() == (1,)
    for table in store.TABLES:
        assert [r[:2] for r in snap.execute("DESCRIBE %s" % table).fetchall()] == \
            [r[:2] for r in con.execute("DESCRIBE %s" % table).fetchall()]
    assert records(snap.sql("SELECT * FROM layers ORDER BY ALL").df()) == \
        records(con.sql("SELECT * FROM layers WHERE evaluation_id = 'e0' ORDER BY ALL").df())
    con.close()
    snap.close()


def test_union_by_name_over_files_of_other_columns(tmp_path):
    store.write_evaluation(tmp_path, ev("e1"))
    # a later writer adds a column; an older one lacked energy_why (written by hand here)
    store.write_evaluation(tmp_path, ev("e2", x_compiler="inductor"),
                           {"layers": [dict(detail("e2")["layers"][0], x_flag=True)]})
    old = store._arrow_table("evaluations", [ev("e0", options="{}")])
    old = old.drop_columns(["energy_why"]).replace_schema_metadata(old.schema.metadata)
    pq.write_table(old, tmp_path / "evaluations" / "e0.parquet")
    df = store.query(tmp_path, "SELECT evaluation_id, x_compiler, energy_why FROM evaluations "
                               "ORDER BY 1")
    assert records(df) == [{"evaluation_id": "e0", "x_compiler": None, "energy_why": None},
                           {"evaluation_id": "e1", "x_compiler": None, "energy_why": None},
                           {"evaluation_id": "e2", "x_compiler": "inductor",
                            "energy_why": None}]
    cols = store.query(tmp_path, "SELECT * FROM evaluations").columns.tolist()
    assert cols == [c for c, _ in SCHEMAS["evaluations"]] + ["x_compiler"]
    assert store.query(tmp_path, "SELECT layer, x_flag FROM layers").values.tolist() == \
        [["conv1", True]]


def newer_file(path, version=b"2", table=b"evaluations"):
    tbl = store._arrow_table("evaluations", [ev("e9", options="{}")])
    meta = dict(tbl.schema.metadata)
    meta[b"xsp.schema_version"] = version
    meta[b"xsp.table"] = table
    pq.write_table(tbl.replace_schema_metadata(meta), path)


def test_a_newer_schema_version_is_a_clear_error(tmp_path):
    store.write_evaluation(tmp_path, ev("e1"))
    bad = tmp_path / "evaluations" / "e9.parquet"
    newer_file(bad)
    with pytest.raises(SchemaVersionError) as e:
        store.open(tmp_path)
    assert str(e.value) == ("%s was written with results schema version 2, newer than this "
                            "xsp reads (1): upgrade xsp to read it" % bad)
    with pytest.raises(SchemaVersionError):
        store.query(tmp_path, "SELECT 1")
    newer_file(bad, version=b"1", table=b"layers")
    with pytest.raises(StoreError) as e:
        store.open(tmp_path)
    assert str(e.value) == "%s holds table layers, not evaluations: move it to its own " \
                           "folder" % bad
    pq.write_table(pa.table({"evaluation_id": ["e9"]}), bad)
    with pytest.raises(StoreError) as e:
        store.open(tmp_path)
    assert str(e.value) == ("%s has no xsp.schema_version in its Parquet metadata: it was not "
                            "written by xsp.zoo.store; move it out of the results directory"
                            % bad)
    newer_file(bad, version=b"1")
    assert store.query(tmp_path, "SELECT count(*) AS n FROM evaluations")["n"].tolist() == [2]


def test_every_file_carries_its_schema_version(tmp_path):
    store.write_system(tmp_path, FINGERPRINT)
    store.write_evaluation(tmp_path, ev("e1"), detail("e1"))
    for table in store.TABLES:
        name = "sys0" if table == "systems" else "e1"
        meta = pq.read_schema(tmp_path / table / (name + ".parquet")).metadata
        assert meta[b"xsp.schema_version"] == b"1" and meta[b"xsp.table"] == table.encode()


def test_temporary_and_half_written_files_are_not_read(tmp_path):
    store.write_evaluation(tmp_path, ev("e1"), detail("e1"))
    whole = (tmp_path / "evaluations" / "e1.parquet").read_bytes()
    # what a writer killed mid-write leaves: its temporary name, half a file
    for table in ("evaluations", "layers"):
        (tmp_path / table / ".e2.parquet.0123456789abcdef.0.tmp").write_bytes(
            whole[:len(whole) // 2])
    assert store.query(tmp_path, "SELECT evaluation_id FROM evaluations")[
        "evaluation_id"].tolist() == ["e1"]
    assert store.query(tmp_path, "SELECT count(*) AS n FROM layers")["n"].tolist() == [2]
    glob = str(tmp_path / "evaluations" / "*.parquet")
    assert duckdb.sql("SELECT count(*) FROM read_parquet('%s')" % glob).fetchall() == [(1,)]
    assert len(pd.read_parquet(tmp_path / "evaluations")) == 1


def test_a_failed_write_leaves_nothing(tmp_path, monkeypatch):
    def broken(tbl, f, **kw):
        f.write(b"PAR1 half a file")
        raise OSError(28, "No space left on device")

    store.write_evaluation(tmp_path, ev("e1"))
    monkeypatch.setattr(pq, "write_table", broken)
    with pytest.raises(OSError, match="No space left"):
        store.write_evaluation(tmp_path, ev("e2"))
    assert sorted(os.listdir(tmp_path / "evaluations")) == ["e1.parquet"]


def test_detail_rows_without_their_evaluation_row_are_not_seen(tmp_path):
    # a worker killed after its detail files and before its evaluations row
    store.write_evaluation(tmp_path, ev("e1"), detail("e1"))
    os.unlink(tmp_path / "evaluations" / "e1.parquet")
    store.write_evaluation(tmp_path, ev("e2"), detail("e2"))
    assert store.query(tmp_path, "SELECT DISTINCT evaluation_id FROM layers")[
        "evaluation_id"].tolist() == ["e2"]


def test_rewriting_an_evaluation_replaces_its_tables(tmp_path):
    store.write_evaluation(tmp_path, ev("e1"), detail("e1"))
    store.write_evaluation(tmp_path, ev("e1", status="timeout", reason="past 60 s"), {})
    assert sorted(os.listdir(tmp_path / "layers")) == []
    df = store.query(tmp_path, "SELECT status, reason FROM evaluations")
    assert df.values.tolist() == [["timeout", "past 60 s"]]


def test_done_keys_are_the_ok_evaluations(tmp_path):
    store.write_evaluation(tmp_path, ev("a"))
    store.write_evaluation(tmp_path, ev("b", status="failed", reason="ValueError: x"))
    store.write_evaluation(tmp_path, ev("c", status="timeout", key="key-a"))
    store.write_evaluation(tmp_path, ev("d", status="killed"))
    store.write_evaluation(tmp_path, ev("e"))
    assert store.done_keys(tmp_path) == {"key-a", "key-e"}


def test_bad_rows_are_refused_before_anything_is_written(tmp_path):
    cases = [
        (ev("e1", status="done"), None,
         "status must be one of ok, failed, timeout, killed, not 'done'"),
        (ev("../e1"), None, "evaluation_id must be a string of letters, digits, '.', '_' and "
                            "'-' (at most 200, not starting with '.', '_' or '-': it names a "
                            "file), not '../e1'"),
        (ev("e1"), {"systems": []}, "unknown detail table(s) 'systems': the tables of an "
                                    "evaluation are layers, layer_types, ops, kernels"),
        (ev("e1", batch_size="eight"), None, None),
        (ev("e1"), {"layers": [dict(detail("e1")["layers"][0], evaluation_id="e2")]},
         "table layers: a row's evaluation_id is not the evaluation's ('e1')"),
        (ev("e1", started_at=dt.datetime(2026, 1, 1)), None,
         "started_at 2026-01-01 00:00:00 has no time zone: give an aware datetime "
         "(datetime.now(timezone.utc)) or epoch seconds"),
    ]
    for row, tables, msg in cases:
        with pytest.raises(StoreError) as e:
            store.write_evaluation(tmp_path, row, tables)
        if msg is not None:
            assert str(e.value) == msg
        else:
            assert str(e.value).startswith("table evaluations, column batch_size: the values "
                                           "are not BIGINT: ")
    assert not os.path.exists(tmp_path / "evaluations")


def test_started_at_from_epoch_seconds(tmp_path):
    store.write_evaluation(tmp_path, ev("e1", started_at=T0.timestamp()))
    assert store.query(tmp_path, "SELECT started_at FROM evaluations")["started_at"][0] == \
        pd.Timestamp(T0)


def test_write_system_keeps_the_first_row(tmp_path):
    p = store.write_system(tmp_path, FINGERPRINT)
    assert store.write_system(tmp_path, dict(FINGERPRINT, hostname="node-2")) == p
    assert store.query(tmp_path, "SELECT hostname FROM systems")["hostname"].tolist() == \
        ["node-1"]
    fp = system.fingerprint()           # this machine's, system_id computed from it
    store.write_system(tmp_path, dict(fp, system_id=None))
    assert os.path.exists(tmp_path / "systems" / (fp["system_id"] + ".parquet"))


def test_a_results_path_with_glob_characters(tmp_path):
    d = tmp_path / "run[1]*"
    store.write_evaluation(d, ev("e1"), detail("e1"))
    store.write_evaluation(d, ev("e2"), detail("e2"))
    assert store.query(d, "SELECT count(*) AS n FROM layers")["n"].tolist() == [4]
    assert store.done_keys(d) == {"key-e1", "key-e2"}


def test_plain_duckdb_and_pandas_read_the_same_rows(tmp_path):
    for i in range(3):
        store.write_evaluation(tmp_path, ev("e%d" % i, batch_size=i + 1), detail("e%d" % i))
    for table in ("evaluations", "layers", "ops"):
        ours = store.query(tmp_path, "SELECT * FROM %s ORDER BY ALL" % table)
        glob = str(tmp_path / table / "*.parquet")
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        plain = con.sql("SELECT * FROM read_parquet('%s', union_by_name=true) ORDER BY ALL"
                        % glob).df()
        con.close()
        assert records(plain) == records(ours), table
        pdf = pd.read_parquet(tmp_path / table)
        pdf = pdf.sort_values(list(pdf.columns)).reset_index(drop=True)
        assert records(pdf) == records(ours), table


def test_a_query_over_1000_evaluations(tmp_path, monkeypatch):
    # what this test checks is the query; the disk's fsync (two per file, which the writes
    # make) would be most of its time
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    n = 1000
    for i in range(n):
        status = "failed" if i % 10 == 9 else "ok"
        store.write_evaluation(
            tmp_path, ev("e%04d" % i, status=status, model="m%d" % (i % 4), batch_size=i % 8 + 1,
                         throughput_per_s=float(i), wall_s=0.5),
            {"layers": [{"layer": "fc", "layer_type": "Linear", "calls": 1,
                         "mean_ns": float(i)}] if i % 10 == 0 else []})
    agg = """SELECT model, count(*) AS n, sum(batch_size) AS batch,
                    sum(throughput_per_s) AS tput, sum(wall_s) AS wall
             FROM evaluations WHERE status = 'ok' GROUP BY model ORDER BY model"""
    ok = [i for i in range(n) if i % 10 != 9]
    want = [["m%d" % m, sum(1 for i in ok if i % 4 == m),
             sum(i % 8 + 1 for i in ok if i % 4 == m), float(sum(i for i in ok if i % 4 == m)),
             0.5 * sum(1 for i in ok if i % 4 == m)] for m in range(4)]
    assert store.query(tmp_path, agg).values.tolist() == want      # over 1,100 files
    # compacted: one file per table, the same answers
    name = store.compact(tmp_path)
    assert files(tmp_path) == {"evaluations": [name + ".parquet"],
                               "layers": [name + ".parquet"]}
    con = store.open(tmp_path)
    assert con.sql(agg).df().values.tolist() == want
    total = con.sql("SELECT sum(l.mean_ns) AS s FROM layers l JOIN evaluations e "
                    "USING (evaluation_id) WHERE e.status = 'ok'").df()
    con.close()
    assert total["s"].tolist() == [float(sum(i for i in ok if i % 10 == 0))]
    assert len(store.done_keys(tmp_path)) == len(ok)


# -- compaction ---------------------------------------------------------------------------

def everything(d):
    """Every view's rows, sorted: what a reader sees."""
    con = store.open(d)
    try:
        return {t: records(con.sql("SELECT * FROM %s ORDER BY ALL" % t).df())
                for t in store.TABLES}
    finally:
        con.close()


def files(d):
    return {t: sorted(os.listdir(os.path.join(d, t))) for t in store.TABLES
            if os.path.isdir(os.path.join(d, t))}


def five(d):
    store.write_system(d, FINGERPRINT)
    for i in range(5):
        store.write_evaluation(d, ev("e%d" % i, batch_size=i + 1), detail("e%d" % i))


def test_compact_merges_the_files_and_keeps_every_row_once(tmp_path):
    five(tmp_path)
    before = everything(tmp_path)
    name = store.compact(tmp_path)
    assert name.startswith("compact-")
    want = {t: [name + ".parquet"] for t in ("evaluations",) + store.DETAIL_TABLES}
    assert files(tmp_path) == dict(want, systems=["sys0.parquet"])
    assert everything(tmp_path) == before
    # plain readers without xsp read the compacted files alike
    for table in ("evaluations", "layers"):
        glob = str(tmp_path / table / "*.parquet")
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        plain = con.sql("SELECT * FROM read_parquet('%s', union_by_name=true) ORDER BY ALL"
                        % glob).df()
        con.close()
        assert records(plain) == before[table]
        pdf = pd.read_parquet(tmp_path / table)
        assert records(pdf.sort_values(list(pdf.columns)).reset_index(drop=True)) == \
            before[table]
    assert store.compact(tmp_path) is None          # one file per table: nothing to merge
    store.write_evaluation(tmp_path, ev("e5"), detail("e5"))
    before = everything(tmp_path)
    name2 = store.compact(tmp_path)                 # the former compacted files merged too
    assert files(tmp_path)["layers"] == [name2 + ".parquet"] and name2 > name
    assert everything(tmp_path) == before
    assert store.compact(tmp_path / "missing") is None


def test_a_retry_after_compaction_wins_over_the_compacted_rows(tmp_path):
    five(tmp_path)
    store.compact(tmp_path)
    store.write_evaluation(tmp_path, ev("e1", status="failed", reason="OOM"), {})
    df = store.query(tmp_path, "SELECT evaluation_id, status FROM evaluations ORDER BY 1")
    assert df.values.tolist() == [["e0", "ok"], ["e1", "failed"], ["e2", "ok"], ["e3", "ok"],
                                  ["e4", "ok"]]
    assert store.query(tmp_path, "SELECT DISTINCT evaluation_id FROM layers ORDER BY 1")[
        "evaluation_id"].tolist() == ["e0", "e2", "e3", "e4"]
    new = detail("e1")
    new["layers"] = new["layers"][:1]
    store.write_evaluation(tmp_path, ev("e1", batch_size=2), new)
    assert store.query(tmp_path, "SELECT evaluation_id, layer FROM layers WHERE "
                                 "evaluation_id = 'e1'").values.tolist() == [["e1", "conv1"]]
    before = everything(tmp_path)
    store.compact(tmp_path)
    assert everything(tmp_path) == before and len(files(tmp_path)["layers"]) == 1
    assert store.done_keys(tmp_path) == {"key-e%d" % i for i in range(5)}


def test_views_show_rows_once_while_a_compaction_runs(tmp_path, monkeypatch):
    five(tmp_path)
    before = everything(tmp_path)
    # the moment after the compacted files are written, before the merged ones are removed
    monkeypatch.setattr(store, "_unlink_if_same", lambda path, ident: None)
    store.compact(tmp_path)
    assert len(files(tmp_path)["evaluations"]) == 6
    assert everything(tmp_path) == before
    glob = str(tmp_path / "evaluations" / "*.parquet")      # a plain glob sees them twice
    assert duckdb.sql("SELECT count(*) FROM read_parquet('%s')" % glob).fetchall() == [(10,)]


def test_compaction_keeps_an_evaluation_being_written(tmp_path):
    five(tmp_path)
    store.compact(tmp_path)
    # a retry of e1 killed (or still going) between its detail files and its evaluations row
    new = detail("e1")
    new["layers"] = [dict(new["layers"][0], mean_ns=1.0)]
    store.write_evaluation(tmp_path, ev("e1"), new)
    os.unlink(tmp_path / "evaluations" / "e1.parquet")
    # and an orphan: detail rows of an evaluation that has no evaluations row at all
    store.write_evaluation(tmp_path, ev("e9"), detail("e9"))
    os.unlink(tmp_path / "evaluations" / "e9.parquet")
    before = everything(tmp_path)
    name = store.compact(tmp_path)
    assert files(tmp_path)["layers"] == sorted(["e1.parquet", "e9.parquet", name + ".parquet"])
    assert everything(tmp_path) == before           # e1's compacted rows, no e9
    store.write_evaluation(tmp_path, ev("e1"), new)     # the retry's evaluations row lands
    assert store.query(tmp_path, "SELECT mean_ns FROM layers WHERE evaluation_id = 'e1'")[
        "mean_ns"].tolist() == [1.0]


def test_compacted_names_are_not_evaluation_ids(tmp_path):
    with pytest.raises(StoreError) as e:
        store.write_evaluation(tmp_path, ev("compact-1"))
    assert str(e.value) == ("evaluation_id 'compact-1' starts with 'compact-', which names "
                            "compacted files")


# -- the rows of a real measurement -------------------------------------------------------

STEP = 1000


def test_rows_from_a_real_measurement(tmp_path, fake_clock, one_thread):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(3, 4)
    fake_clock(1_000_000, STEP)
    with torch.no_grad():
        m = xsp.measure(lambda: model(x), levels="ML", warmup=1, repeat=2, progress=False)
        # the costs from a profile of their own (op inputs and allocations read the clock
        # too, which would blur the latencies' exact arithmetic)
        with xsp.profile(levels="ML", record_shapes=True, profile_memory=True) as prof:
            model(x)
            prof.step()
            model(x)
    fp = dict(FINGERPRINT, torch_threads=1)
    row, tables = store.rows_from_measurement(
        m, prof.trace, model="mlp", batch_size=3, evaluation_id="e1", system=fp,
        price_per_hour=3.6,
        key="k1", options={"record_shapes": True}, started_at=T0, trace_path="traces/e1.xsp")
    tml = m.traces["ML"]
    model_span = tml.spans(kind="model")[1]           # a measured iteration's
    n = descendants(tml, model_span.id)
    # run M: step = model (1 step) + 2; run ML: the model grows by 2 steps per span inside it
    assert {k: v for k, v in row.items() if k.startswith("latency_")} == {
        "latency_M_mean_ns": 3.0 * STEP, "latency_M_std_ns": 0.0,
        "latency_M_median_ns": 3.0 * STEP, "latency_M_n": 2,
        "latency_ML_mean_ns": (3 + 2 * n) * STEP, "latency_ML_std_ns": 0.0,
        "latency_ML_median_ns": (3 + 2 * n) * STEP, "latency_ML_n": 2}
    assert n == 25
    assert row["throughput_per_s"] == 1e6                   # 3 samples in 3 us
    assert row["cost_per_million"] == 3.6 / 3600 / 1e6 * 1e6
    assert (row["flops"], row["gpu_ns"]) == (2 * 3 * 4 * 8 + 2 * 3 * 8 * 2, None)
    assert row["bytes"] == flops.costs(prof.trace, by="step")["bytes"].iloc[1] > 0
    assert row["peak_cpu_bytes"] == memory.summary(prof.trace)["cpu"]["peak_bytes"] > 0
    assert row["peak_cuda_bytes"] is None
    assert (row["system_id"], row["hostname"], row["torch_threads"]) == ("sys0", "node-1", 1)
    assert (row["levels"], row["warmup"], row["repeat"], row["status"]) == ("ML", 1, 2, "ok")

    layers = tables["layers"]
    spans = {s.name: s for s in tml.spans(kind="module") if s.parent_span.id == model_span.id}
    assert layers[["layer", "layer_type", "calls"]].values.tolist() == [
        ["0", "Linear", 1], ["2", "Linear", 1], ["1", "ReLU", 1]]
    # a module span reads the clock twice, each span inside it twice more
    for name, mean_ns in zip(layers["layer"], layers["mean_ns"]):
        assert mean_ns == (1 + 2 * descendants(tml, spans[name].id)) * STEP, name
    assert layers["share"].tolist() == [v / (3 * STEP) for v in layers["mean_ns"]]
    assert layers[["evaluation_id", "model", "batch_size"]].drop_duplicates().values.tolist() \
        == [["e1", "mlp", 3]]
    lt = tables["layer_types"]
    assert lt[["layer_type", "count", "total_ns"]].values.tolist() == [
        ["Linear", 2, layers["mean_ns"][0] + layers["mean_ns"][1]],
        ["ReLU", 1, layers["mean_ns"][2]]]
    ops = tables["ops"]
    want = analysis.ops(m)
    assert ops[["op", "calls", "total_ns", "self_ns"]].values.tolist() == \
        want[["name", "calls", "total_ns", "self_ns"]].values.tolist()
    assert ops.set_index("op").loc["aten::addmm", "calls"] == 2
    assert len(tables["kernels"]) == 0 and list(tables["kernels"].columns) == \
        [c for c, _ in SCHEMAS["kernels"]]

    store.write_evaluation(tmp_path, row, tables)
    back = records(store.query(tmp_path, "SELECT * FROM evaluations"))[0]
    assert back["options"] == json.dumps({"record_shapes": True}) and back["started_at"] == T0
    assert {k: back[k] for k in row if k not in ("options",)} == \
        {k: v for k, v in row.items() if k != "options"}
    got = store.query(tmp_path, "SELECT layer, mean_ns, share FROM layers ORDER BY mean_ns "
                                "DESC, layer")
    assert got.values.tolist() == layers[["layer", "mean_ns", "share"]].values.tolist()
    assert store.query(tmp_path, "SELECT count(*) AS n FROM ops")["n"].tolist() == [len(ops)]
    assert not os.path.exists(tmp_path / "kernels")       # no kernel: no file
    with pytest.raises(TypeError, match=r"unknown evaluations column\(s\) 'latency'"):
        store.rows_from_measurement(m, model="mlp", batch_size=3, latency=1)
