"""The zoo's cross-model analyses and report (xsp.zoo.analyses, xsp.zoo.report; issue 26).

The analyses are checked on results directories written row by row through
xsp.zoo.store.write_evaluation and write_system: synthetic but schema-true evaluations of
four models in three families on two systems (one with a GPU and level G), several batch
sizes, a shallower duplicate, failed attempts and a model named like an HTML injection.
The numbers are chosen so that every value is exact in binary floating point (times are
binary fractions of the latency), so the tests compare with ==: the saturation batch size,
shares that sum to exactly 1, speedups.  Then the text summary's lines, the HTML's structure
(sections, escaping, the bounded-size cut notes), the HTML in headless chromium (no console
error, sorting by a click) and one end-to-end run of a real two-model zoo through the CLI.
Nothing here asserts a measured time."""
import contextlib
import datetime as dt
import io
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from helpers import TINY_MODELS, browser_checker
from xsp.zoo import analyses as Z
from xsp.zoo import cli, report, store
from xsp.zoo.store import StoreError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
T0 = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
EVIL = "<script>alert(1)</script>&"
EVIL_LAYER = "<b>x</b>\"'"
A, B = "sysA", "sysB"       # A: a CPU machine; B: one with a GPU


BC, needs_chromium = browser_checker()


def fingerprint(sid, host, cpu, gpu=None):
    return {"system_id": sid, "hostname": host, "arch": "x86_64", "cpu_model": cpu,
            "cpu_count": 16, "cpu_affinity": 16, "memory_bytes": 1 << 36, "memory_gib": 64,
            "os": "Debian GNU/Linux 12", "kernel": "6.1.0", "python": "3.11.7",
            "torch_version": "2.13.0", "torch_cuda": "12.8" if gpu else None,
            "cudnn_version": None, "xsp_version": "0.1.0", "torch_threads": 16,
            "torch_interop_threads": 16, "gpu_count": 1 if gpu else 0, "gpu_name": gpu,
            "gpu_names": gpu, "gpu_memory_bytes": None, "gpu_capability": None,
            "gpu_driver": None, "gpu_why": None if gpu else "no CUDA"}


# The evaluations: (model, family, system, batch size, latency_M_mean_ns).  Throughput is
# batch / latency: resnet on A 1000, 2000, 3200, 3200 /s (saturates at batch 4); vit on A
# 1000, 2000 (still growing), on B 4000, 8000; bert at one batch size.
FAMILY = {"resnet": "cnn", EVIL: "cnn", "vit": "vit", "bert": "transformer"}
RUNS = [("resnet", A, 1, 1e6), ("resnet", A, 2, 1e6), ("resnet", A, 4, 1.25e6),
        ("resnet", A, 8, 2.5e6), ("resnet", B, 1, 5e5), ("resnet", B, 2, 5e5),
        ("vit", A, 1, 1e6), ("vit", A, 2, 1e6), ("vit", B, 1, 2.5e5), ("vit", B, 2, 2.5e5),
        ("bert", A, 1, 2e6), ("bert", B, 1, 1e6), (EVIL, A, 1, 4e6)]
# layer types as fractions of latency_M (latency_ML is twice it, so a type's share of the
# iteration is half its share of the leaf-layer time): {type: (forward, backward)}
TYPES = {"resnet": {"Conv2d": (0.5, 0), "BatchNorm2d": (0.25, 0), "Linear": (0.25, 0)},
         "vit": {"Linear": (0.5, 0.25), "LayerNorm": (0.25, 0)},
         "bert": {"Linear": (0.5, 0), "Embedding": (0.5, 0)},
         EVIL: {"Conv2d": (1.0, 0)}}
LAYERS = {"resnet": [("conv1", "Conv2d"), ("bn1", "BatchNorm2d"), ("fc", "Linear")],
          "vit": [("blocks.0.attn", "Linear"), ("norm", "LayerNorm")],
          "bert": [("embed", "Embedding"), ("head", "Linear")],
          EVIL: [(EVIL_LAYER, "Conv2d")]}
# ops at the largest batch size of each model and system: {op: share of latency_ML}
OPS = {("resnet", A): {"aten::convolution": 0.5, "aten::addmm": 0.25},
       (EVIL, A): {"aten::convolution": 0.25},
       ("vit", A): {"aten::addmm": 0.5, "aten::layer_norm": 0.25},
       ("bert", A): {"aten::addmm": 0.375, "aten::embedding": 0.125},
       ("resnet", B): {"aten::convolution": 0.25, "aten::addmm": 0.125},
       ("vit", B): {"aten::addmm": 0.25},
       ("bert", B): {"aten::addmm": 0.25}}
MAX_BATCH = {("resnet", A): 8, ("resnet", B): 2, ("vit", A): 2, ("vit", B): 2,
             ("bert", A): 1, ("bert", B): 1, (EVIL, A): 1}
PEAKS_A = {"device": "cpu", "flops_per_s": {"float32": 2e12}, "bytes_per_s": 1e11}
PEAKS_B = {"device": "cuda", "flops_per_s": {"float32": 5e13}, "bytes_per_s": 4e12}


def eid(model, sid, b, levels):
    safe = "evil" if model == EVIL else model
    return "%s-b%d-%s-%s" % (safe, b, levels, sid)


def key(model, sid, b):
    return "%s|batch_size=%d|system=%s" % (model, b, sid)


def ok_row(model, sid, b, lat, minutes=0):
    levels = "MLG" if (model, sid) == ("vit", B) else "ML"
    row = {"evaluation_id": eid(model, sid, b, levels), "key": key(model, sid, b),
           "model": model, "family": FAMILY[model], "source": "python:models.py:" + model,
           "task": "inference", "batch_size": b, "levels": levels,
           "options": {"device": "cuda" if sid == B else "cpu"}, "system_id": sid,
           "hostname": "host-" + sid[-1].lower(), "torch_threads": 16, "status": "ok",
           "started_at": T0 + dt.timedelta(minutes=minutes), "wall_s": 1.0, "warmup": 2,
           "repeat": 10, "latency_M_mean_ns": lat, "latency_M_std_ns": lat / 100,
           "latency_M_median_ns": lat, "latency_M_n": 10, "latency_ML_mean_ns": 2 * lat,
           "latency_ML_std_ns": lat / 50, "latency_ML_median_ns": 2 * lat, "latency_ML_n": 10,
           "throughput_per_s": b * 1e9 / lat}
    if sid == B:        # a price in its manifest: 3.6 an hour is 1000 / throughput per 10^6
        row.update(price_per_hour=3.6, cost_per_million=1000 / row["throughput_per_s"])
    else:               # energy counters on the machine
        row.update(energy_j=2.5, energy_cpu_j=2.5)
    if levels == "MLG":
        row.update(latency_MLG_mean_ns=4 * lat, latency_MLG_std_ns=lat / 25,
                   latency_MLG_median_ns=4 * lat, latency_MLG_n=10,
                   gpu_ns=(3 if b == 1 else 2) * lat,
                   peak_cuda_bytes=(1 << 30) + (b - 1) * (1 << 20), peak_cpu_bytes=5000,
                   flops=1e7 * b, bytes=1e5 * b)
    if (model, sid) == ("resnet", A):
        row.update(flops=1e8 * b, bytes=2.5e7 * b, peak_cpu_bytes=900000 + 100000 * b)
    return row


def tables_of(model, sid, b, lat):
    types = TYPES[model]
    out = {"layer_types": [
        {"layer_type": t, "count": 1, "total_ns": f * lat, "backward_ns": bw * lat,
         "share": (f + bw) / 1, "forward_share": None, "count_share": None}
        for t, (f, bw) in types.items()]}
    if sid == A:
        out["layers"] = [{"layer": name, "layer_type": t, "calls": 1,
                          "mean_ns": types[t][0] * lat, "backward_ns": types[t][1] * lat,
                          "share": None, "forward_share": None} for name, t in LAYERS[model]]
    ops = OPS.get((model, sid)) if b == MAX_BATCH[(model, sid)] else \
        {"aten::shallow": 0.5} if b == 1 else None
    if ops:
        out["ops"] = [{"op": op, "calls": 3, "total_ns": s * 2 * lat, "self_ns": s * 2 * lat,
                       "share": None} for op, s in ops.items()]
    return out


def write_zoo(d):
    """The synthetic results directory (the module docstring); returns it."""
    store.write_system(d, fingerprint(A, "host-a", "AMD EPYC 9654"))
    store.write_system(d, fingerprint(B, "host-b", "Intel Xeon", gpu="NVIDIA H200"))
    for i, (model, sid, b, lat) in enumerate(RUNS):
        store.write_evaluation(d, ok_row(model, sid, b, lat, minutes=i),
                               tables_of(model, sid, b, lat))
    # a later, shallower evaluation of resnet at batch 1 (levels M): not the chosen one
    shallow = ok_row("resnet", A, 1, 9e5, minutes=100)
    shallow.update(evaluation_id=eid("resnet", A, 1, "M"), levels="M",
                   latency_ML_mean_ns=None, latency_ML_std_ns=None, latency_ML_median_ns=None,
                   latency_ML_n=None, throughput_per_s=1e9 / 9e5)
    store.write_evaluation(d, shallow, {})
    # a failed attempt that a later one did: not a failure
    store.write_evaluation(d, dict(_failure("resnet", A, 4, "failed", "run: boom", 0),
                                   evaluation_id="resnet-b4-attempt0"), {})
    # bert at batch 2 on A: a timeout, then a failure (the latest attempt is the one shown)
    store.write_evaluation(d, dict(_failure("bert", A, 2, "timeout", "did not finish in 2 s",
                                            1), evaluation_id="bert-b2-attempt0"), {})
    store.write_evaluation(d, _failure("bert", A, 2, "failed",
                                       "build: ValueError: boom\nTraceback ...", 2), {})
    store.write_evaluation(d, _failure(EVIL, B, 2, "killed", "killed by <SIGKILL> & more", 3),
                           {})
    return d


def _failure(model, sid, b, status, reason, minutes):
    return {"evaluation_id": eid(model, sid, b, "ML") + "-f", "key": key(model, sid, b),
            "model": model, "family": FAMILY[model], "source": "python:models.py:x",
            "task": "inference", "batch_size": b, "levels": "ML", "system_id": sid,
            "status": status, "reason": reason, "output_tail": "tail",
            "started_at": T0 + dt.timedelta(minutes=minutes), "wall_s": 2.5}


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    return str(write_zoo(tmp_path_factory.mktemp("zoo")))


def rows(df, cols):
    """The DataFrame's columns cols as a list of tuples, NaN, NA and None as None."""
    out = []
    for r in df[cols].astype(object).itertuples(index=False):
        out.append(tuple(None if v is None or v is pd.NA or (isinstance(v, float) and
                                                            np.isnan(v)) else v for v in r))
    return out


# -- the analyses ----------------------------------------------------------------------------

def test_scaling_reads_the_chosen_evaluation_of_each_batch_size(zoo):
    df = Z.scaling(zoo)
    assert list(df.columns) == [
        "model", "family", "task", "system_id", "batch_size", "levels", "evaluation_id",
        "latency_M_mean_ns", "latency_M_std_ns", "latency_ML_mean_ns", "latency_ML_std_ns",
        "latency_MLG_mean_ns", "latency_MLG_std_ns", "latency_per_sample_ns",
        "throughput_per_s", "cost_per_million", "energy_j", "relative_throughput",
        "saturation_batch_size"]
    onb = df[df["system_id"] == B]
    assert onb["cost_per_million"].tolist() == [1.0, 0.5, 0.25, 0.25, 0.125]
    assert df[df["system_id"] == A]["cost_per_million"].isna().all()
    assert df[df["system_id"] == A]["energy_j"].eq(2.5).all() and onb["energy_j"].isna().all()
    got = rows(df, ["model", "system_id", "batch_size", "levels", "latency_M_mean_ns",
                    "throughput_per_s", "relative_throughput", "saturation_batch_size"])
    assert got == [
        (EVIL, A, 1, "ML", 4e6, 250.0, 1.0, 1),
        ("bert", A, 1, "ML", 2e6, 500.0, 1.0, 1), ("bert", B, 1, "ML", 1e6, 1000.0, 1.0, 1),
        # batch 1 on A: the ML evaluation, not the later one of levels M (9e5 ns)
        ("resnet", A, 1, "ML", 1e6, 1000.0, 0.3125, 4),
        ("resnet", A, 2, "ML", 1e6, 2000.0, 0.625, 4),
        ("resnet", A, 4, "ML", 1.25e6, 3200.0, 1.0, 4),
        ("resnet", A, 8, "ML", 2.5e6, 3200.0, 1.0, 4),
        ("resnet", B, 1, "ML", 5e5, 2000.0, 0.5, 2), ("resnet", B, 2, "ML", 5e5, 4000.0, 1.0, 2),
        ("vit", A, 1, "ML", 1e6, 1000.0, 0.5, 2), ("vit", A, 2, "ML", 1e6, 2000.0, 1.0, 2),
        ("vit", B, 1, "MLG", 2.5e5, 4000.0, 0.5, 2), ("vit", B, 2, "MLG", 2.5e5, 8000.0, 1.0, 2)]
    r = df[(df["model"] == "vit") & (df["system_id"] == B)].iloc[1]
    assert (r["latency_ML_mean_ns"], r["latency_MLG_mean_ns"], r["latency_MLG_std_ns"],
            r["latency_per_sample_ns"]) == (5e5, 1e6, 1e4, 1.25e5)
    assert df["latency_MLG_mean_ns"].isna().sum() == 11


def test_saturation_is_the_smallest_batch_within_the_tolerance_of_the_best(zoo):
    cols = ["model", "system_id", "batch_sizes", "best_throughput_per_s", "best_batch_size",
            "saturation_batch_size", "last_growth", "still_growing", "verdict"]
    assert rows(Z.saturation(zoo), cols) == [
        (EVIL, A, 1, 250.0, 1, 1, None, None, "one batch size measured (1): no trend"),
        ("bert", A, 1, 500.0, 1, 1, None, None, "one batch size measured (1): no trend"),
        ("bert", B, 1, 1000.0, 1, 1, None, None, "one batch size measured (1): no trend"),
        ("resnet", A, 4, 3200.0, 4, 4, 0.0, False,
         "saturates at batch 4 (within 5% of the best, at batch 4)"),
        ("resnet", B, 2, 4000.0, 2, 2, 1.0, True,
         "still growing at batch 2 (+100% over batch 1): larger batches may be faster"),
        ("vit", A, 2, 2000.0, 2, 2, 1.0, True,
         "still growing at batch 2 (+100% over batch 1): larger batches may be faster"),
        ("vit", B, 2, 8000.0, 2, 2, 1.0, True,
         "still growing at batch 2 (+100% over batch 1): larger batches may be faster")]
    # 2000/s at batch 2 is 62.5% of 3200/s: within 37.5% (the bound counts), not within 37%
    wide = Z.saturation(zoo, tolerance=0.375)
    assert wide.loc[(wide["model"] == "resnet") & (wide["system_id"] == A),
                    "saturation_batch_size"].tolist() == [2]
    tight = Z.saturation(zoo, tolerance=0.37)
    assert tight.loc[(tight["model"] == "resnet") & (tight["system_id"] == A),
                     "saturation_batch_size"].tolist() == [4]
    with pytest.raises(ValueError, match="tolerance must be a fraction in"):
        Z.saturation(zoo, tolerance=1.0)


def test_layer_type_shares_per_model_and_family_sum_to_one(zoo):
    df = Z.layer_types(zoo)
    assert list(df.columns) == ["model", "family", "system_id", "batch_size", "layer_type",
                                "count", "forward_ns", "backward_ns", "time_ns", "share",
                                "latency_share"]
    got = rows(df, ["model", "system_id", "batch_size", "layer_type", "time_ns", "share",
                    "latency_share"])
    # each model at its largest batch size with layer types (resnet on A: 8, not 1, 2, 4)
    assert got == [
        (EVIL, A, 1, "Conv2d", 4e6, 1.0, 0.5),
        ("bert", A, 1, "Embedding", 1e6, 0.5, 0.25), ("bert", A, 1, "Linear", 1e6, 0.5, 0.25),
        ("bert", B, 1, "Embedding", 5e5, 0.5, 0.25), ("bert", B, 1, "Linear", 5e5, 0.5, 0.25),
        ("resnet", A, 8, "Conv2d", 1.25e6, 0.5, 0.25),
        ("resnet", A, 8, "BatchNorm2d", 6.25e5, 0.25, 0.125),
        ("resnet", A, 8, "Linear", 6.25e5, 0.25, 0.125),
        ("resnet", B, 2, "Conv2d", 2.5e5, 0.5, 0.25),
        ("resnet", B, 2, "BatchNorm2d", 1.25e5, 0.25, 0.125),
        ("resnet", B, 2, "Linear", 1.25e5, 0.25, 0.125),
        # forward and backward: 0.5 + 0.25 of the latency of run M
        ("vit", A, 2, "Linear", 7.5e5, 0.75, 0.375), ("vit", A, 2, "LayerNorm", 2.5e5, 0.25,
                                                       0.125),
        ("vit", B, 2, "Linear", 1.875e5, 0.75, 0.375),
        ("vit", B, 2, "LayerNorm", 6.25e4, 0.25, 0.125)]
    assert df.groupby(["model", "system_id"])["share"].sum().tolist() == [1.0] * 7
    assert df[df["model"] == "vit"]["backward_ns"].tolist() == [2.5e5, 0.0, 6.25e4, 0.0]
    fam = Z.layer_types(zoo, by="family")
    assert list(fam.columns) == ["family", "system_id", "layer_type", "models",
                                 "family_models", "share", "latency_share"]
    # cnn on A: the mean of resnet's shares and the evil model's (all Conv2d)
    assert rows(fam[fam["family"] == "cnn"], ["system_id", "layer_type", "models",
                                              "family_models", "share", "latency_share"]) == [
        (A, "Conv2d", 2, 2, 0.75, 0.375), (A, "BatchNorm2d", 1, 2, 0.125, 0.0625),
        (A, "Linear", 1, 2, 0.125, 0.0625), (B, "Conv2d", 1, 1, 0.5, 0.25),
        (B, "BatchNorm2d", 1, 1, 0.25, 0.125), (B, "Linear", 1, 1, 0.25, 0.125)]
    assert fam.groupby(["family", "system_id"])["share"].sum().tolist() == [1.0] * 6
    # one batch size for every model: those measured there
    at1 = Z.layer_types(zoo, batch_size=1)
    assert sorted(set(zip(at1["model"], at1["system_id"]))) == [
        (EVIL, A), ("bert", A), ("bert", B), ("resnet", A), ("resnet", B), ("vit", A),
        ("vit", B)]
    assert set(at1["batch_size"]) == {1}
    with pytest.raises(ValueError, match="by must be 'model' or 'family'"):
        Z.layer_types(zoo, by="layer")


def test_top_layers_and_ops_across_the_zoo(zoo):
    layers = Z.top_layers(zoo, n=5)
    assert list(layers.columns) == ["rank", "model", "family", "system_id", "batch_size",
                                    "layer", "layer_type", "calls", "forward_ns",
                                    "backward_ns", "time_ns", "latency_share", "share"]
    assert rows(layers, ["rank", "model", "layer", "latency_share", "share"]) == [
        (1, EVIL, EVIL_LAYER, 0.5, 1.0), (2, "vit", "blocks.0.attn", 0.375, 0.75),
        (3, "bert", "embed", 0.25, 0.5), (4, "bert", "head", 0.25, 0.5),
        (5, "resnet", "conv1", 0.25, 0.5)]
    assert len(Z.top_layers(zoo, n=None)) == 8
    ops = Z.top_ops(zoo)
    assert list(ops.columns) == ["rank", "op", "models", "profiles", "mean_share",
                                 "max_share", "max_model", "max_system_id", "calls"]
    # 7 profiles with ops; ops of a smaller batch size (aten::shallow) are not read
    assert rows(ops, list(ops.columns)) == [
        (1, "aten::addmm", 3, 6, 1.75 / 7, 0.5, "vit", A, 18),
        (2, "aten::convolution", 2, 3, 1.0 / 7, 0.5, "resnet", A, 9),
        (3, "aten::layer_norm", 1, 1, 0.25 / 7, 0.25, "vit", A, 3),
        (4, "aten::embedding", 1, 1, 0.125 / 7, 0.125, "bert", A, 3)]
    assert len(Z.top_ops(zoo, n=2)) == 2
    assert Z.top_ops(zoo, batch_size=1)["op"].tolist()[0] == "aten::shallow"


def test_roofline_one_point_per_model_and_batch_size(zoo):
    plain = Z.roofline(zoo)
    assert list(plain.columns) == ["model", "family", "system_id", "batch_size", "device",
                                   "flops", "bytes", "intensity", "latency_M_mean_ns",
                                   "flops_per_s", "bytes_per_s"]
    assert plain.attrs["left_out"] == 7
    df = Z.roofline(zoo, peaks={A: PEAKS_A, B: PEAKS_B})
    assert rows(df, ["model", "system_id", "batch_size", "device", "intensity",
                     "flops_per_s", "bytes_per_s", "roof_flops_per_s", "bound",
                     "roof_fraction"]) == [
        ("resnet", A, 1, "cpu", 4.0, 1e11, 2.5e10, 4e11, "memory", 0.25),
        ("resnet", A, 2, "cpu", 4.0, 2e11, 5e10, 4e11, "memory", 0.5),
        ("resnet", A, 4, "cpu", 4.0, 3.2e11, 8e10, 4e11, "memory", 0.8),
        ("resnet", A, 8, "cpu", 4.0, 3.2e11, 8e10, 4e11, "memory", 0.8),
        ("vit", B, 1, "cuda", 100.0, 4e10, 4e8, 5e13, "compute", 4e10 / 5e13),
        ("vit", B, 2, "cuda", 100.0, 8e10, 8e8, 5e13, "compute", 8e10 / 5e13)]
    # one set of peaks for every system: sysB's rows run on cuda, so CPU peaks do not fit
    from xsp.analysis.peaks import PeaksError
    with pytest.raises(PeaksError, match="these are peaks of cpu, not of cuda"):
        Z.roofline(zoo, peaks=PEAKS_A)
    only_a = Z.roofline(zoo, peaks={A: PEAKS_A})
    assert rows(only_a, ["bound"]) == [("memory",)] * 4 + [(None,), (None,)]
    assert only_a["roof_flops_per_s"].isna().tolist() == [False] * 4 + [True, True]


def test_memory_and_gpu_share(zoo, tmp_path):
    m = Z.memory(zoo)
    assert rows(m, ["model", "system_id", "batch_size", "device", "peak_bytes",
                    "per_sample_bytes"]) == [
        ("resnet", A, 1, "cpu", 1e6, None), ("resnet", A, 2, "cpu", 1.1e6, 1e5),
        ("resnet", A, 4, "cpu", 1.3e6, 1e5), ("resnet", A, 8, "cpu", 1.7e6, 1e5),
        ("vit", B, 1, "cuda", float(1 << 30), None),
        ("vit", B, 2, "cuda", float((1 << 30) + (1 << 20)), float(1 << 20))]
    g = Z.gpu_share(zoo)
    assert rows(g, list(g.columns)) == [
        ("vit", "vit", B, 1, 1e6, 7.5e5, 0.75, 0.25), ("vit", "vit", B, 2, 1e6, 5e5, 0.5, 0.5)]
    store.write_evaluation(tmp_path, ok_row("resnet", A, 1, 1e6))
    none = Z.gpu_share(str(tmp_path))
    assert len(none) == 0 and list(none.columns) == list(g.columns)
    assert none.attrs["reason"].startswith("no ok evaluation measured level G")
    assert Z.memory(str(tmp_path))["peak_bytes"].tolist() == [1e6]


def test_compare_systems_speedup_per_model_and_layer_type(zoo):
    c = Z.compare_systems(zoo)
    assert (c.attrs["base"], c.attrs["other"]) == (A, B)
    assert list(c.columns) == ["model", "family", "batch_size", "base_latency_ns",
                               "other_latency_ns", "base_throughput_per_s",
                               "other_throughput_per_s", "speedup"]
    assert rows(c, ["model", "batch_size", "speedup"]) == [
        ("bert", 1, 2.0), ("resnet", 1, 2.0), ("resnet", 2, 2.0), ("vit", 1, 4.0),
        ("vit", 2, 4.0)]
    back = Z.compare_systems(zoo, base=B, other=A)
    assert back["speedup"].tolist() == [0.5, 0.5, 0.5, 0.25, 0.25]
    assert Z.compare_systems(zoo, other=A).attrs["base"] == B
    t = Z.compare_systems(zoo, by="layer_type")
    # at each model's largest batch size on both: resnet 2, vit 2, bert 1
    assert rows(t, list(t.columns)) == [
        ("Linear", 3, 2e6, 812500.0, 2e6 / 812500.0, 0.5),
        ("Embedding", 1, 1e6, 5e5, 2.0, 0.25), ("Conv2d", 1, 5e5, 2.5e5, 2.0, 0.125),
        ("BatchNorm2d", 1, 2.5e5, 1.25e5, 2.0, 0.0625),
        ("LayerNorm", 1, 2.5e5, 6.25e4, 4.0, 0.0625)]
    with pytest.raises(Z.SystemsError, match=r"base system 'sysC' has no ok evaluation here; "
                       r"the systems present are: sysA \(host-a \(AMD EPYC 9654\)\), sysB "):
        Z.compare_systems(zoo, base="sysC")
    with pytest.raises(Z.SystemsError, match="the same system"):
        Z.compare_systems(zoo, base=A, other=A)


def test_compare_systems_needs_two(tmp_path):
    one = tmp_path / "one"
    store.write_system(one, fingerprint(A, "host-a", "AMD EPYC 9654"))
    store.write_evaluation(one, ok_row("resnet", A, 1, 1e6))
    with pytest.raises(Z.SystemsError) as e:
        Z.compare_systems(str(one))
    assert str(e.value) == (
        "comparing systems needs two; the results hold 1 with ok evaluations (sysA (host-a "
        "(AMD EPYC 9654))): add the results of another machine (a list of directories, or "
        "copy its files into this one)")
    for sid in (B, "sysC"):
        store.write_evaluation(one, ok_row("resnet", sid, 1, 1e6))
    with pytest.raises(Z.SystemsError, match=r"hold 3 with ok evaluations \(sysA .*, sysB, "
                       r"sysC\): give base= and other= \(two of them\)$"):
        Z.compare_systems(str(one))
    assert Z.compare_systems(str(one), base=B, other="sysC")["speedup"].tolist() == [1.0]


def test_systems_and_failures(zoo):
    s = Z.systems(zoo)
    assert rows(s, ["system_id", "label", "models", "ok", "failed", "timeout", "killed"]) == [
        (A, "host-a (AMD EPYC 9654)", 4, 9, 1, 0, 0), (B, "host-b (NVIDIA H200)", 3, 5, 0, 0, 1)]
    f = Z.failures(zoo)
    assert list(f.columns) == ["model", "family", "system_id", "batch_size", "levels",
                               "status", "reason", "wall_s", "started_at", "evaluation_id"]
    # resnet's failed attempt at batch 4 was done later; bert's timeout was tried again
    assert rows(f, ["model", "system_id", "batch_size", "status", "reason"]) == [
        (EVIL, B, 2, "killed", "killed by <SIGKILL> & more"),
        ("bert", A, 2, "failed", "build: ValueError: boom")]


def test_several_directories_read_as_one(zoo, tmp_path):
    """The results of two machines in two directories give what one directory of both
    gives; a directory named twice, and an evaluation in both, count once."""
    da, db = tmp_path / "a", tmp_path / "b"
    store.write_system(da, fingerprint(A, "host-a", "AMD EPYC 9654"))
    store.write_system(db, fingerprint(B, "host-b", "Intel Xeon", gpu="NVIDIA H200"))
    for i, (model, sid, b, lat) in enumerate(RUNS):
        store.write_evaluation(da if sid == A else db, ok_row(model, sid, b, lat, minutes=i),
                               tables_of(model, sid, b, lat))
    both = [str(da), str(db), str(da)]
    pd.testing.assert_frame_equal(Z.compare_systems(both), Z.compare_systems(zoo))
    pd.testing.assert_frame_equal(Z.layer_types(both, by="family"),
                                  Z.layer_types(zoo, by="family"))
    assert Z.scaling(both)["throughput_per_s"].tolist() == \
        Z.scaling(zoo)["throughput_per_s"].tolist()
    # bert on B also written into a's directory: seen once, from the first directory
    store.write_evaluation(da, ok_row("bert", B, 1, 1e6, minutes=11),
                           tables_of("bert", B, 1, 1e6))
    store.write_system(da, fingerprint(B, "host-b", "Intel Xeon", gpu="NVIDIA H200"))
    con = store.open([str(da), str(db)])
    try:
        assert con.execute("SELECT count(*) FROM evaluations WHERE model = 'bert' AND "
                           "system_id = 'sysB'").fetchone() == (1,)
        assert con.execute("SELECT count(*) FROM layer_types WHERE model = 'bert' AND "
                           "evaluation_id LIKE '%sysB'").fetchone() == (2,)
        assert con.execute("SELECT count(*) FROM systems").fetchone() == (2,)
        # a connection is a source too, and stays open
        assert len(Z.top_ops(con)) == 4
        assert con.execute("SELECT 1").fetchone() == (1,)
    finally:
        con.close()
    with pytest.raises(StoreError, match="no results directory given"):
        store.open([])


def test_the_report_imports_no_torch(zoo):
    """Reading results needs no torch (a laptop reads a GPU cluster's results)."""
    code = ("import sys; from xsp.zoo import report; report.text(sys.argv[1]); "
            "report.html(sys.argv[1]); print(sorted(m for m in ('torch', 'xsp.zoo.catalog', "
            "'xsp.zoo.runner') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code, zoo], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert (r.returncode, r.stdout, r.stderr) == (0, "[]\n", "")


def test_missing_and_empty_results_directories(tmp_path):
    missing = str(tmp_path / "nothing")
    with pytest.raises(Z.NoResultsError) as e:
        Z.scaling(missing)
    assert isinstance(e.value, StoreError)
    assert str(e.value) == ("%s: no such results directory (`xsp zoo run SPEC -o %s` writes "
                            "one)" % (missing, missing))
    with pytest.raises(Z.NoResultsError, match=r": no evaluations in it: run `xsp zoo run "):
        report.text(str(tmp_path))
    with pytest.raises(Z.NoResultsError, match="no results directory given"):
        report.html([])
    with pytest.raises(TypeError, match="a source is a results directory"):
        Z.failures([3])


# -- the text summary ------------------------------------------------------------------------

def test_text_summary(zoo):
    out = report.text(zoo)
    lines = out.splitlines()
    assert lines[:8] == [
        "xsp zoo report: %s" % zoo,
        "14 ok evaluations, 2 not done (1 failed, 0 timeout, 1 killed); 4 models, 3 families, "
        "2 systems",
        "",
        "systems:",
        "  system  host                    ok  not ok",
        "  sysA    host-a (AMD EPYC 9654)   9       1",
        "  sysB    host-b (NVIDIA H200)     5       1",
        ""]
    i = lines.index("throughput (samples/s; saturation: the smallest batch within 5% of the "
                    "best):")
    assert lines[i + 1:i + 9] == [
        "  model                       system     best  at batch  saturates  trend",
        "  vit                         sysB      8 k/s         2          2  still growing (+100%)",
        "  resnet                      sysB      4 k/s         2          2  still growing (+100%)",
        "  resnet                      sysA    3.2 k/s         4          4  saturated",
        "  vit                         sysA      2 k/s         2          2  still growing (+100%)",
        "  bert                        sysB      1 k/s         1          1  one batch size",
        "  bert                        sysA     500 /s         1          1  one batch size",
        "  %s  sysA     250 /s         1          1  one batch size" % EVIL]
    i = lines.index("layer types (mean share of the models' leaf-layer time, per system):")
    assert lines[i + 2:i + 4] == ["  Linear       sysB    50.0%       3",
                                  "  Conv2d       sysA    37.5%       2"]
    i = lines.index("top ops (mean share of the iteration in run ML over the profiles):")
    assert lines[i + 1:i + 3] == ["  op                 share  models  highest in",
                                  "  aten::addmm        25.0%       3  vit (50.0%)"]
    assert "speedup of sysB over sysA: 2.64x (the geometric mean over 5 models and batch " \
           "sizes measured on both)" in lines
    assert lines[-4:] == [
        "failures: 2",
        "  model                       batch    system  status  reason",
        "  %s  batch 2  sysB    killed  killed by <SIGKILL> & more" % EVIL,
        "  bert                        batch 2  sysA    failed  build: ValueError: boom"]
    assert max(map(len, lines)) <= report.TEXT_WIDTH
    short = report.text(zoo, top=2, width=60)
    assert max(map(len, short.splitlines())) <= 60
    assert "  … 5 more" in short.splitlines()       # 7 models on their systems, 2 shown
    assert "  vit     sysB    8 k/s         2          2  still growing…" in short.splitlines()


# -- the HTML report ---------------------------------------------------------------------------

SECTIONS = ["summary", "systems", "scaling", "layer-types", "top-layers", "top-ops", "roofline",
            "memory", "gpu", "compare", "failures"]


def test_html_report_structure_and_escaping(zoo, tmp_path):
    path = tmp_path / "zoo.html"
    doc = report.html(zoo, str(path), peaks={A: PEAKS_A, B: PEAKS_B})
    assert path.read_text(encoding="utf-8") == doc
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    assert re.findall(r'<section id="([a-z-]+)">', doc) == SECTIONS
    # the price (system B) and energy (system A) columns, as some rows have them
    assert '<th class="xsp-num">cost per million</th><th class="xsp-num">energy j</th>' in doc
    # every name from the results is text: the one script is the sort script
    assert EVIL not in doc and "<b>x</b>" not in doc and "<SIGKILL>" not in doc
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&amp;" in doc
    assert "&lt;b&gt;x&lt;/b&gt;&quot;&#x27;" in doc and "killed by &lt;SIGKILL&gt; &amp; more" \
        in doc
    assert doc.count("<script") == 1 and "table.xsp-sort" in doc
    assert BC.outside_refs(doc) == []
    # plots: a throughput plot per system, one line per model there; the stacked bars; the
    # roofline per system; the GPU share; the speedups
    assert doc.count('class="xsp-z xsp-scaling"') == 2
    assert doc.count('<polyline class="xsp-line"') == 7
    assert doc.count('class="xsp-rf"') == 2 and "float32 peak 50 TFLOP/s" in doc
    assert doc.count('class="xsp-z xsp-stacked"') == 3
    assert "vit @ host-b (batch 2): GPU work 50.0% (of the iteration in run MLG)" in doc
    assert "vit (batch 2): speedup" not in doc and ">4x</text>" in doc
    # the tables are sortable and carry their values
    assert doc.count('<table class="xsp xsp-sort">') == 13
    assert '<td class="xsp-num" data-v="3200.0">3.2 k</td>' in doc
    assert "saturates at batch 4 (within 5% of the best, at batch 4)" in doc
    assert "no more rows not shown" not in doc and "more rows not shown" not in doc
    # without peaks: no roofs, said
    plain = report.html(zoo)
    assert ("No roofs: give the peaks of the machine (xsp zoo report --peaks, or peaks= of "
            "xsp.zoo.report.html).") in plain and \
        "no roofs: the peaks are unknown" in plain


def test_html_report_cuts_what_it_does_not_show(zoo):
    doc = report.html(zoo, max_models=2, max_rows=3, max_systems=1)
    assert "2 more models not shown (4 in all): see the table" in doc        # throughput, A
    assert "4 more rows not shown (7 in all): xsp.zoo.analyses.saturation(DIR)" in doc
    assert "10 more rows not shown (13 in all): xsp.zoo.analyses.scaling(DIR)" in doc
    assert "5 more rows not shown (8 in all): xsp.zoo.analyses.top_layers(DIR, n=None)" in doc
    assert "1 more systems not drawn: their rows are in the tables" in doc
    assert doc.count('<polyline class="xsp-line"') == 2
    assert all(len(re.findall(r"<tr>", t)) <= 4 for t in
               re.findall(r'<table class="xsp xsp-sort">.*?</table>', doc, re.S))
    with pytest.raises(ValueError, match="max_rows must be a positive integer"):
        report.html(zoo, max_rows=0)


def _many(d, n):
    """A results directory of n models on one system, one batch size each, ML."""
    store.write_system(d, fingerprint(A, "host-a", "AMD EPYC 9654"))
    for i in range(n):
        m = "model-%03d" % i
        row = ok_row("resnet", A, 1, 1e6 + 1000 * i)
        row.update(evaluation_id="m%03d" % i, key="k%03d" % i, model=m,
                   family="family-%d" % (i % 7), flops=None, bytes=None, peak_cpu_bytes=None)
        store.write_evaluation(d, row, {"layer_types": tables_of("resnet", A, 1, 1e6)[
            "layer_types"]})
    return str(d)


def test_html_report_size_is_bounded(tmp_path):
    """30 models or 60: the same page but for the counts in the cut notes."""
    docs = [report.html(_many(tmp_path / str(n), n), max_models=5, max_rows=5)
            for n in (30, 60)]
    assert abs(len(docs[0]) - len(docs[1])) < 200
    assert "55 more models not shown (60 in all): see the table" in docs[1]
    assert "55 more rows not shown (60 in all): xsp.zoo.analyses.saturation(DIR)" in docs[1]
    # what one system without G, FLOPs or memory shows: the reasons
    for why in ("No GPU share: no ok evaluation measured level G",
                "One system in these results",
                "No roofline: no ok evaluation has FLOPs and bytes: they need the ops&#x27; "
                "shapes (record_shapes = true in the manifest).",
                "No memory: no ok evaluation recorded memory"):
        assert why in docs[0], why


@needs_chromium
def test_html_report_renders_and_sorts_in_chromium(zoo, tmp_path):
    path = tmp_path / "zoo.html"
    doc = report.html(zoo, str(path), peaks={A: PEAKS_A, B: PEAKS_B})
    res = BC.check(str(path), screenshot=str(tmp_path / "zoo.png"), window_size=(1280, 3000),
                   expect=["Throughput and latency against batch size", "Two systems side by "
                           "side", "&lt;script&gt;alert(1)&lt;/script&gt;&amp;"])
    assert res.ok, res.report()
    assert res.console == [] and res.outside == []
    assert res.dom.count("<svg") == doc.count("<svg") and res.dom.count("<tr>") >= 60
    # sorting: click the saturation table's "best throughput" header twice, then its
    # "model" header; the page writes the orders it got where the DOM dump shows them
    probe = """<script>(function(){
var t=document.querySelectorAll('#scaling table.xsp-sort')[0],h=t.tHead.rows[0].cells,out=[];
function col(j){return Array.prototype.map.call(t.tBodies[0].rows,function(r){
  return r.cells[0].textContent+'/'+r.cells[2].textContent;}).join(',');}
h[4].click();out.push(h[4].getAttribute('aria-sort')+':'+col());
h[4].click();out.push(h[4].getAttribute('aria-sort')+':'+col());
h[0].click();out.push((h[4].getAttribute('aria-sort')||'none')+':'+col());
var p=document.createElement('pre');p.id='probe';p.textContent=out.join('\\n');
document.body.appendChild(p);})();</script></body>"""
    probed = tmp_path / "probed.html"
    probed.write_text(doc.replace("</body>", probe), encoding="utf-8")
    res = BC.check(str(probed), window_size=(800, 600), min_ink=0.0)
    assert res.ok, res.report()
    got = re.search(r'<pre id="probe">(.*?)</pre>', res.dom, re.S).group(1).splitlines()
    up = ["&lt;script&gt;alert(1)&lt;/script&gt;&amp;/sysA", "bert/sysA", "bert/sysB",
          "vit/sysA", "resnet/sysA", "resnet/sysB", "vit/sysB"]
    assert got[0] == "ascending:" + ",".join(up)
    assert got[1] == "descending:" + ",".join(reversed(up))
    # by name, the sort stable: a model's systems keep the order of the throughput before
    assert got[2] == ("none:&lt;script&gt;alert(1)&lt;/script&gt;&amp;/sysA,bert/sysB,"
                      "bert/sysA,resnet/sysB,resnet/sysA,vit/sysB,vit/sysA")


# -- end to end: a real zoo through the command line -----------------------------------------

MODELS = TINY_MODELS


def _cli(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(list(args))
    return rc, out.getvalue(), err.getvalue()


def test_report_of_a_real_zoo_run_through_the_cli(tmp_path):
    (tmp_path / "models.py").write_text(MODELS)
    (tmp_path / "zoo.toml").write_text(textwrap.dedent("""\
        batch_sizes = [1, 2]
        levels = "ML"
        [[models]]
        name = "mlp"
        family = "mlp"
        source = "python:models.py:mlp"
        [[models]]
        name = "convnet"
        family = "cnn"
        source = "python:models.py:convnet"
        """))
    out = str(tmp_path / "results")
    # the profile options from the command line, for every model of the manifest
    r = subprocess.run([sys.executable, "-m", "xsp.zoo.cli", "run", str(tmp_path / "zoo.toml"),
                        "--record-shapes", "--profile-memory", "--no-progress", "-o", out],
                       capture_output=True, text=True,
                       timeout=300, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    rc, text, err = _cli("report", out)
    assert (rc, err) == (0, "")
    lines = text.splitlines()
    assert lines[:2] == ["xsp zoo report: %s" % out,
                         "4 ok evaluations, 0 not done (0 failed, 0 timeout, 0 killed); 2 "
                         "models, 2 families, 1 system"]
    assert lines[-1] == "failures: none"
    sat = Z.saturation(out)
    assert sorted(sat["model"]) == ["convnet", "mlp"] and set(sat["batch_sizes"]) == {2}
    assert set(sat["saturation_batch_size"]) <= {1, 2}
    types = Z.layer_types(out)
    assert set(zip(types["model"], types["layer_type"])) == {
        ("mlp", "Linear"), ("mlp", "ReLU"), ("convnet", "Conv2d"), ("convnet", "ReLU"),
        ("convnet", "AdaptiveAvgPool2d"), ("convnet", "Flatten"), ("convnet", "Linear")}
    assert set(types["batch_size"]) == {2}
    assert types.groupby("model")["share"].sum().round(12).tolist() == [1.0, 1.0]
    rf = Z.roofline(out)
    assert len(rf) == 4 and (rf["flops"] > 0).all() and (rf["intensity"] > 0).all()
    assert len(Z.memory(out)) == 4 and Z.top_ops(out)["mean_share"].gt(0).all()
    html_path = str(tmp_path / "f.html")
    assert _cli("report", out, "-o", html_path) == (0, "report: %s\n" % html_path, "")
    with open(html_path, encoding="utf-8") as f:
        doc = f.read()
    assert re.findall(r'<section id="([a-z-]+)">', doc) == SECTIONS
    assert doc.count('<polyline class="xsp-line"') == 2 and 'class="xsp-rf"' in doc
    assert "aten::addmm" in doc
    if BC.find_chromium() is not None:
        res = BC.check(html_path, window_size=(1280, 3000))
        assert res.ok, res.report()
    # --peaks: a JSON file of one machine's peaks draws the roofs for every system
    (tmp_path / "peaks.json").write_text(json.dumps(PEAKS_A))
    roofed = str(tmp_path / "roofs.html")
    assert _cli("report", out, "-o", roofed, "--peaks", str(tmp_path / "peaks.json")) == (
        0, "report: %s\n" % roofed, "")
    with open(roofed, encoding="utf-8") as f:
        doc = f.read()
    assert '<polyline class="xsp-roof"' in doc and "No roofs" not in doc
    rc, _, err = _cli("report", out, "--peaks", str(tmp_path / "peaks.json"))
    assert (rc, err) == (2, "xsp zoo report: error: --peaks draws the HTML report's roofs: "
                            "give -o FILE too\n")
    rc, _, err = _cli("report", out, "-o", roofed, "--peaks", "{\"device\": 1}")
    assert rc == 2 and err.startswith("xsp zoo report: error: --peaks: "), err
    rc, _, err = _cli("report", str(tmp_path / "nothing"))
    assert (rc, err) == (2, "xsp zoo report: error: %s: no such results directory (`xsp zoo "
                            "run SPEC -o %s` writes one)\n" % ((str(tmp_path / "nothing"),) * 2))
