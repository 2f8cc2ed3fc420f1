"""FLOPs and bytes per op, layer, step and model (xsp.flops; docs/analyses.md, "FLOPs and
bytes").

Real models (a CNN, an MLP, attention written by hand and with scaled_dot_product_attention, a
transformer encoder layer, an LSTM) are profiled with torch.profiler(record_shapes=True) and
turned into xsp traces by helpers_flops.torch_trace; their FLOPs are checked against
torch.utils.flop_counter.FlopCounterMode run on the same model and inputs: the total over
forward and backward, the FLOPs per op packet, and each module's forward FLOPs.  The bytes
model, the statuses and the lists of uncovered, failed and input-less ops are checked on a
hand-built trace whose every number is worked out by hand below.
"""
import math
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, flop_registry

import xsp
from xsp.analysis import flops
from helpers_flops import torch_trace
from models import Encoder, TinyCNN


# -- models ------------------------------------------------------------------------------------
class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(5, 7)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(7, 3)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Attention(nn.Module):
    """softmax(QK^T / sqrt(d)) V written out, plus the same through
    scaled_dot_product_attention."""

    def __init__(self, d=8):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.d = d

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        a = torch.softmax(q @ k.transpose(-2, -1) / self.d ** 0.5, dim=-1) @ v
        b = nn.functional.scaled_dot_product_attention(q.unsqueeze(1), k.unsqueeze(1),
                                                       v.unsqueeze(1)).squeeze(1)
        return a + b


class LSTMNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 6, batch_first=True)
        self.fc = nn.Linear(6, 2)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.fc(y[:, -1])


def _make(name):
    torch.manual_seed(0)
    if name == "cnn":
        return TinyCNN(), torch.randn(2, 3, 8, 8)
    if name == "mlp":
        return MLP(), torch.randn(4, 5)
    if name == "attention":
        return Attention(), torch.randn(2, 5, 8)
    if name == "encoder":
        return Encoder().train(), torch.randn(2, 4, 16)
    return LSTMNet(), torch.randn(2, 3, 4)


MODELS = ("cnn", "mlp", "attention", "encoder", "lstm", "lstm_native")


class _Run:
    """One model profiled (forward + backward) and counted by FlopCounterMode, same inputs."""

    def __init__(self, name):
        self.model, self.x = _make(name)
        # lstm_native: oneDNN off, so that aten::lstm runs torch's own cell (linear layers)
        self.native = name == "lstm_native"
        with torch.backends.mkldnn.flags(enabled=not self.native):
            self.trace = torch_trace([self.train_step], self.model)
            with FlopCounterMode(display=False) as fc:
                self.train_step()
            self.total = fc.get_total_flops()
            self.per_packet = {str(k).replace(".", "::", 1): v
                               for k, v in fc.get_flop_counts()["Global"].items()}
            with FlopCounterMode(display=False) as fwd:
                self.model(self.x)
            self.forward = {k: sum(v.values()) for k, v in fwd.get_flop_counts().items()}

    def train_step(self):
        self.model(self.x).sum().backward()


_RUNS = {}


def run(name):
    if name not in _RUNS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _RUNS[name] = _Run(name)
    return _RUNS[name]


# -- against FlopCounterMode -------------------------------------------------------------------
@pytest.mark.parametrize("name", MODELS)
def test_total_equals_flop_counter_mode(name):
    r = run(name)
    s = flops.summary(r.trace)
    assert r.total > 0
    assert s["flops"] == r.total
    assert s["failed"] == {}
    assert s["flops_by_dtype"] == {"float32": r.total}
    # the step and the model see the same total (the loss, a sum, has no formula)
    step = flops.costs(r.trace, by="step")
    assert step["step"].tolist() == ["step#0"]
    assert step["flops"].tolist() == [r.total]
    model = flops.costs(r.trace, by="model")
    assert model["model"].tolist() == [type(r.model).__name__]
    assert model["flops"].tolist() == [r.total]
    assert model["forward_flops"].tolist() == [r.forward["Global"]]
    assert model["forward_flops"][0] + model["backward_flops"][0] == r.total


@pytest.mark.parametrize("name", MODELS)
def test_flops_per_op_packet_equal_flop_counter_mode(name):
    """FlopCounterMode counts per OpOverloadPacket the outermost op with a formula; so do we."""
    r = run(name)
    by_op = flops.costs(r.trace, by="op")
    counted = {op: f for op, f in zip(by_op["op"], by_op["flops"]) if not math.isnan(f)}
    assert counted == {op: float(f) for op, f in r.per_packet.items()}


@pytest.mark.parametrize("name", MODELS)
def test_forward_flops_per_module_equal_flop_counter_mode(name):
    r = run(name)
    top = type(r.model).__name__
    layers = flops.costs(r.trace, by="layer")
    ours = dict(zip(layers["layer"], layers["forward_flops"]))
    theirs = {k[len(top) + 1:]: v for k, v in r.forward.items() if k.startswith(top + ".")}
    assert theirs and set(theirs) <= set(ours)
    for layer, f in ours.items():
        if layer in theirs:
            assert f == theirs[layer], layer
        else:       # FlopCounterMode has no count: nothing with a formula ran in the layer
            row = layers[layers["layer"] == layer].iloc[0]
            assert math.isnan(f) or f == 0, layer
            assert math.isnan(f) == (row["uncovered"] + row["failed"] > 0), layer


def test_the_outermost_op_with_a_formula_is_counted():
    """aten::convolution is counted, never the aten::_convolution inside it (both have
    formulas); aten::conv2d and aten::linear have none and are composite; every counted op has
    no ancestor op with a formula and every nested op has a costed ancestor."""
    r = run("cnn")
    tr = r.trace
    df = flops.op_costs(tr)
    status = dict(zip(df["id"], df["status"]))
    by_name = df.groupby("name")["status"].agg(lambda s: sorted(set(s)))
    assert by_name["aten::convolution"] == ["formula"]
    assert by_name["aten::_convolution"] == ["nested"]
    assert by_name["aten::mkldnn_convolution"] == ["nested"]
    assert by_name["aten::conv2d"] == ["composite"]
    assert by_name["aten::linear"] == ["composite"]
    assert by_name["aten::addmm"] == ["formula"]
    assert by_name["ConvolutionBackward0"] == ["composite"]
    parents = tr.parent_ids
    names = [tr.strings[c] for c in tr.name_codes]

    def has_formula(i):
        ns, _, op = names[i].partition("::")
        pkt = getattr(getattr(torch.ops, ns, None), op, None) if op.isidentifier() else None
        return pkt in flop_registry

    for i, st in status.items():
        chain = []
        p = parents[i]
        while p >= 0:
            chain.append(int(p))
            p = parents[p]
        if st == "formula":
            assert has_formula(i) and not any(has_formula(a) for a in chain), names[i]
        if st == "nested":
            assert any(status.get(a) in ("formula", "no formula") for a in chain), names[i]
    assert df.loc[df["status"] == "nested", ["flops", "bytes"]].to_numpy().sum() == 0


def test_ops_without_a_formula_are_listed():
    """Where torch has no formula (oneDNN's LSTM, CPU's flash attention) FlopCounterMode counts
    nothing and the op is listed as uncovered, with its calls."""
    r = run("lstm")
    s = flops.summary(r.trace)
    names = set(flops.op_costs(r.trace)["name"])
    if "aten::mkldnn_rnn_layer" in names:       # the oneDNN path: no formula below aten::lstm
        assert s["uncovered"]["aten::lstm"] == 1
    layers = flops.costs(r.trace, by="layer").set_index("layer")
    assert layers.loc["fc", "forward_flops"] == r.forward["LSTMNet.fc"]
    a = run("attention")
    s = flops.summary(a.trace)
    assert s["uncovered"]["aten::scaled_dot_product_attention"] == 1
    q = torch.randn(1, 1, 5, 8)
    with FlopCounterMode(display=False) as fc:
        nn.functional.scaled_dot_product_attention(q, q, q)
    assert fc.get_total_flops() == 0
    # the uncovered ops are the costed ops without a formula, counted once each
    df = flops.op_costs(a.trace)
    costed = df[df["status"] == "no formula"]
    assert s["uncovered"] == costed["name"].value_counts().to_dict()
    assert sum(s["uncovered"].values()) + s["counted"] == s["ops"]
    assert all(torch_packet(n) not in flop_registry for n in s["uncovered"])


def torch_packet(name):
    ns, _, op = name.partition("::")
    return getattr(getattr(torch.ops, ns), op)


def test_layers_own_the_backward_of_their_forward_ops():
    """A layer's backward FLOPs are those of the backward ops differentiating its forward ops
    (fwd_op): for a conv, the input and weight gradients (2x its forward) or the weight
    gradient alone for the first conv, whose input needs no gradient; the leaf layers' totals
    add up to the model's."""
    r = run("cnn")
    layers = flops.costs(r.trace, by="layer").set_index("layer")
    assert layers.loc["conv1", "backward_flops"] == layers.loc["conv1", "forward_flops"]
    for conv in ("layer1.0.conv1", "layer1.0.conv2", "layer1.1.conv1", "layer1.1.conv2",
                 "layer1.1.downsample.0"):
        assert layers.loc[conv, "backward_flops"] == 2 * layers.loc[conv, "forward_flops"]
    assert layers.loc["layer1", "forward_flops"] == r.forward["TinyCNN.layer1"]
    leaves = [n for n in layers.index if not any(m.startswith(n + ".") for m in layers.index)]
    assert leaves == ["conv1", "bn1", "relu", "layer1.0.conv1", "layer1.0.bn1", "layer1.0.relu",
                      "layer1.0.conv2", "layer1.0.bn2", "layer1.1.downsample.0",
                      "layer1.1.downsample.1", "layer1.1.conv1", "layer1.1.bn1",
                      "layer1.1.relu", "layer1.1.conv2", "layer1.1.bn2", "pool.0", "pool.1",
                      "fc"]
    assert np.nansum(layers.loc[leaves, "flops"]) == r.total
    assert layers.loc["layer1.0.relu", "calls"] == 2
    assert layers.loc["fc", "type"] == "Linear"


def test_steps_each_get_their_ops():
    torch.manual_seed(0)
    model, x = MLP(), torch.randn(4, 5)
    small = torch.randn(1, 5)
    tr = torch_trace([lambda: model(x).sum().backward(), lambda: model(small)], model)
    counts = []
    for inp, backward in ((x, True), (small, False)):
        with FlopCounterMode(display=False) as fc:
            y = model(inp)
            if backward:
                y.sum().backward()
        counts.append(fc.get_total_flops())
    steps = flops.costs(tr, by="step")
    assert steps["step"].tolist() == ["step#0", "step#1"]
    assert steps["flops"].tolist() == counts
    assert steps["backward_flops"].tolist()[1] == 0
    assert flops.summary(tr)["flops"] == sum(counts)


def test_each_distinct_signature_is_rebuilt_once(monkeypatch):
    r = run("cnn")
    calls = []
    real = flops._cost

    def counting(torch_, registry, pkt, overload, sig):
        calls.append((str(pkt), overload) + sig)
        return real(torch_, registry, pkt, overload, sig)

    monkeypatch.setattr(flops, "_cost", counting)
    df = flops.op_costs(r.trace)
    spans = r.trace.to_pandas().set_index("id")
    costed = df[df["status"].isin(("formula", "no formula"))]
    distinct = {(n,) + tuple(spans.loc[i, ["overload"] + list(flops.INPUT_ATTRS)])
                for n, i in zip(costed["name"], costed["id"])}
    assert len(calls) == len(set(calls)) == len(distinct) == df.attrs["signatures"]
    assert len(costed) > len(distinct)          # the conv blocks repeat signatures


def test_the_type_names_are_torch_profilers():
    """Every C++ type name in flops.DTYPES is what torch.profiler records for that dtype."""
    made = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for typ, name in flops.DTYPES.items():
            made.append((typ, torch.empty(2, dtype=getattr(torch, name))))

    def aliases():
        for _, t in made:
            torch.ops.aten.alias(t)

    tr = torch_trace([aliases])
    recorded = [s.attrs["input_types"] for s in tr.spans(kind="op", name="aten::alias")]
    assert recorded == ['["%s"]' % typ for typ, _ in made]


def test_helper_writes_torch_profilers_text():
    r = run("cnn")
    conv = r.trace.spans(kind="op", name="aten::conv2d")[0]
    a = conv.attrs
    assert a["input_dims"] == "[[2, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], []]"
    assert a["input_types"] == '["float", "float", "", "ScalarList", "ScalarList", ' \
                               '"ScalarList", "Scalar"]'
    assert a["input_strides"] == "[[192, 64, 8, 1], [27, 9, 3, 1], [], [], [], [], []]"
    assert a["concrete_inputs"] == '["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"]'
    assert a["overload"] == ""
    adds = {s.attrs["overload"] for s in r.trace.spans(kind="op", name="aten::add_")}
    assert adds == {"Tensor"}


# -- the bytes model and the lists, on a hand-built trace --------------------------------------
def _contiguous(dims):
    out, acc = [], 1
    for d in reversed(dims):
        out.insert(0, acc)
        acc *= d
    return out


def _strides_of(d):
    if d and isinstance(d[0], list):
        return [_contiguous(x) for x in d]
    return _contiguous(d) if d else []


def O(name, start, end, parent, inputs=None, overload="", kind="op", **extra):
    """An op span; inputs: a list of (dims, type, concrete[, strides]) per input."""
    attrs = dict(extra)
    if inputs is not None:
        dims = [i[0] for i in inputs]
        attrs.update(
            input_dims=repr(dims).replace("'", '"'),
            input_types=repr([i[1] for i in inputs]).replace("'", '"'),
            input_strides=repr([i[3] if len(i) > 3 else _strides_of(i[0]) for i in inputs]),
            concrete_inputs=repr([i[2] for i in inputs]).replace("'", '"'),
            overload=overload)
    return {"name": name, "kind": kind, "start_ns": start, "end_ns": end, "parent": parent,
            "attrs": attrs}


F = "float"
# every expected number, by span id: (status, flops, bytes read, bytes written); float32 is 4
# bytes, c10::Half 2, double 8
EXPECTED = {
    4: ("composite", 0, 0, 0),          # aten::linear: its costs are in t and addmm
    5: ("no formula", None, 0, 0),      # aten::t: a view, reads and writes nothing
    6: ("nested", 0, 0, 0),             # aten::transpose, inside t
    7: ("formula", 2 * 2 * 3 * 4,       # addmm: b [4] + x [2,3] + W^T [3,4] read, [2,4] written
        (4 + 6 + 12) * 4, 8 * 4),
    8: ("nested", 0, 0, 0),             # resolve_conj, inside addmm
    10: ("no formula", None, 32, 32),   # relu [2,4]
    11: ("nested", 0, 0, 0),            # clamp_min, inside relu
    12: ("no formula", None, 32 + 16, 32),  # add: [2,4] + a broadcast [2,4] (strides 0, 1)
    13: ("no formula", None, 0, 0),     # view: an alias of its input
    14: ("no formula", None, 32, 32),   # reshape of a transposed [4,2]: a copy
    15: ("nested", 0, 0, 0),            # clone, inside reshape
    16: ("no formula", None, 64, 32),   # add_: reads self and other, writes self
    17: ("no formula", None, 64, 32),   # add.out: reads self and other, writes out only
    18: ("no formula", None, 32 + 16, 32),  # copy_ float <- half: dst counted read (the model)
    19: ("no formula", None, 20, 20),   # cat of [2] and [3] (default dtype float32)
    20: ("formula", 2 * 2 * 3 * 4,      # mm in half: [2,3] + [3,4] read, [2,4] written
         (6 + 12) * 2, 8 * 2),
    21: ("no formula", None, 0, 24),    # empty [2,3] float32 (dtype code 6), made on meta
    22: ("no formula", None, 24 + 8, 24),   # mul by a 0-dim double tensor
    26: ("composite", 0, 0, 0),         # MmBackward0: its cost is in the mm inside it
    27: ("formula", 2 * 2 * 4 * 3,      # mm [2,4] x [4,3] in the backward of addmm #7
         (8 + 12) * 4, 6 * 4),
}
FAILED = {
    23: "failed: my::op is not an operator of this torch (torch.ops has no such op)",
    24: "failed: 1 inputs recorded, the schema aten::mm(Tensor self, Tensor mat2) -> Tensor "
        "has 2 arguments",
}


def hand_trace():
    spans = [
        {"name": "prof", "kind": "region", "start_ns": 0, "end_ns": 1000},             # 0
        {"name": "step#0", "kind": "step", "start_ns": 0, "end_ns": 1000, "parent": 0},  # 1
        {"name": "Net", "kind": "model", "start_ns": 10, "end_ns": 600, "parent": 1,
         "attrs": {"type": "Net"}},                                                    # 2
        {"name": "fc", "kind": "module", "start_ns": 20, "end_ns": 200, "parent": 2,
         "attrs": {"type": "Linear"}},                                                 # 3
        O("aten::linear", 30, 190, 3, [([2, 3], F, ""), ([4, 3], F, ""), ([4], F, "")]),
        O("aten::t", 40, 60, 4, [([4, 3], F, "")]),                                    # 5
        O("aten::transpose", 45, 55, 5, [([4, 3], F, ""), ([], "Scalar", "0"),
                                         ([], "Scalar", "1")], overload="int"),        # 6
        O("aten::addmm", 70, 180, 4, [([4], F, ""), ([2, 3], F, ""),
                                      ([3, 4], F, "", [1, 3]), ([], "Scalar", "1"),
                                      ([], "Scalar", "1")], seq=7),                    # 7
        O("aten::resolve_conj", 80, 90, 7, [([2, 3], F, "")]),                         # 8
        {"name": "act", "kind": "module", "start_ns": 210, "end_ns": 300, "parent": 2,
         "attrs": {"type": "ReLU"}},                                                   # 9
        O("aten::relu", 220, 290, 9, [([2, 4], F, "")]),                               # 10
        O("aten::clamp_min", 230, 280, 10, [([2, 4], F, ""), ([], "Scalar", "0")]),    # 11
        O("aten::add", 310, 320, 2, [([2, 4], F, ""), ([2, 4], F, "", [0, 1]),
                                     ([], "Scalar", "1")], overload="Tensor"),         # 12
        O("aten::view", 330, 340, 2, [([2, 4], F, ""), ([], "ScalarList", "[8]")]),    # 13
        O("aten::reshape", 350, 370, 2, [([4, 2], F, "", [1, 4]),
                                         ([], "ScalarList", "[8]")]),                  # 14
        O("aten::clone", 355, 365, 14, [([4, 2], F, "", [1, 4]), ([], "", "")]),       # 15
        O("aten::add_", 380, 390, 2, [([8], F, ""), ([8], F, ""), ([], "Scalar", "1")],
          overload="Tensor"),                                                          # 16
        O("aten::add", 400, 410, 2, [([8], F, ""), ([8], F, ""), ([], "Scalar", "1"),
                                     ([8], F, "")], overload="out"),                   # 17
        O("aten::copy_", 420, 430, 2, [([8], F, ""), ([8], "c10::Half", ""),
                                       ([], "Scalar", "False")]),                      # 18
        O("aten::cat", 440, 450, 2, [([[2], [3]], "TensorList", ""),
                                     ([], "Scalar", "0")]),                            # 19
        O("aten::mm", 460, 470, 2, [([2, 3], "c10::Half", ""), ([3, 4], "c10::Half", "")]),
        O("aten::empty", 480, 490, 2, [([], "ScalarList", "[2, 3]"), ([], "Scalar", "6"),
                                       ([], "", ""), ([], "", ""), ([], "", ""),
                                       ([], "", "")], overload="memory_format"),       # 21
        O("aten::mul", 500, 510, 2, [([2, 3], F, ""), ([], "double", "")],
          overload="Tensor"),                                                          # 22
        O("my::op", 520, 530, 2, [([2], F, "")]),                                      # 23
        O("aten::mm", 540, 550, 2, [([2, 3], F, "")]),                                 # 24
        O("aten::bmm", 560, 570, 2),                                                   # 25
        O("MmBackward0", 610, 700, 1, [([2, 4], F, "")], kind="backward", fwd_op=7),  # 26
        O("aten::mm", 620, 690, 26, [([2, 4], F, ""), ([4, 3], F, "")]),               # 27
    ]
    return xsp.Trace.from_spans(spans, meta={"levels": "ML"})


def test_op_costs_bytes_model_and_statuses():
    df = flops.op_costs(hand_trace())
    assert list(df.columns) == ["id", "name", "overload", "flops", "bytes_read",
                                "bytes_written", "bytes", "dtype", "counted", "status"]
    assert df["id"].tolist() == sorted(set(EXPECTED) | set(FAILED))
    rows = df.set_index("id")
    for i, (status, fl, rd, wr) in EXPECTED.items():
        row = rows.loc[i]
        assert row["status"] == status, (i, row["name"])
        assert (math.isnan(row["flops"]) if fl is None else row["flops"] == fl), i
        assert (row["bytes_read"], row["bytes_written"], row["bytes"]) == (rd, wr, rd + wr), i
        assert row["counted"] == (status == "formula"), i
    for i, status in FAILED.items():
        row = rows.loc[i]
        assert row["status"] == status
        assert math.isnan(row["flops"]) and math.isnan(row["bytes"])
    assert rows.loc[20, "dtype"] == "float16"
    assert rows.loc[7, "dtype"] == "float32"
    assert pd.isna(rows.loc[21, "dtype"])       # empty: no tensor input
    assert pd.isna(rows.loc[19, "dtype"])       # cat: torch records no TensorList dtype
    assert rows.loc[12, "overload"] == "Tensor" and rows.loc[7, "overload"] == ""


def test_summary_lists_uncovered_failed_and_input_less_ops():
    s = flops.summary(hand_trace())
    costed = {i: e for i, e in EXPECTED.items() if e[0] in ("formula", "no formula")}
    assert s["flops"] == sum(e[1] for e in costed.values() if e[1] is not None) == 144
    assert s["bytes"] == sum(e[2] + e[3] for e in costed.values())
    assert s["flops_by_dtype"] == {"float32": 96.0, "float16": 48.0}
    assert s["uncovered"] == {"aten::add": 2, "aten::add_": 1, "aten::cat": 1,
                              "aten::copy_": 1, "aten::empty": 1, "aten::mul": 1,
                              "aten::relu": 1, "aten::reshape": 1, "aten::t": 1,
                              "aten::view": 1}
    assert s["failed"] == {"my::op": FAILED[23][len("failed: "):],
                           "aten::mm": FAILED[24][len("failed: "):]}
    assert s["no_inputs"] == {"aten::bmm": 1}
    assert (s["ops"], s["counted"]) == (len(costed) + len(FAILED), 3)


def test_costs_per_layer_model_step_and_op():
    tr = hand_trace()
    b = {i: e[2] + e[3] for i, e in EXPECTED.items()}
    layers = flops.costs(tr, by="layer")
    assert list(layers.columns) == ["layer", "type", "calls", "flops", "bytes",
                                    "forward_flops", "backward_flops", "forward_bytes",
                                    "backward_bytes", "uncovered", "failed"]
    fc = layers.iloc[0].to_dict()
    assert fc == {"layer": "fc", "type": "Linear", "calls": 1, "flops": 96.0,
                  "bytes": b[5] + b[7] + b[27], "forward_flops": 48.0, "backward_flops": 48.0,
                  "forward_bytes": b[5] + b[7], "backward_bytes": b[27], "uncovered": 1,
                  "failed": 0}
    act = layers.iloc[1].to_dict()
    assert act["layer"] == "act" and math.isnan(act["flops"]) and act["bytes"] == b[10]
    assert act["backward_flops"] == 0 and act["uncovered"] == 1
    assert len(layers) == 2
    model = flops.costs(tr, by="model").iloc[0].to_dict()
    forward = [i for i in EXPECTED if 4 <= i <= 22]
    assert model["model"] == "Net" and model["calls"] == 1
    assert model["forward_flops"] == 96 and model["backward_flops"] == 48
    assert model["forward_bytes"] == sum(b[i] for i in forward)
    assert model["failed"] == 2             # my::op and the mm without its second input
    step = flops.costs(tr, by="step").iloc[0].to_dict()
    assert (step["step"], step["flops"], step["backward_flops"]) == ("step#0", 144, 48)
    assert step["bytes"] == sum(b.values())
    ops = flops.costs(tr, by="op").set_index("op")
    assert ops.loc["aten::mm", "calls"] == 3            # half, failed, backward
    assert ops.loc["aten::mm", "flops"] == 96 and ops.loc["aten::mm", "failed"] == 1
    assert ops.loc["aten::mm", "forward_flops"] == 48
    assert ops.loc["aten::mm", "backward_flops"] == 48
    assert math.isnan(ops.loc["aten::relu", "flops"])
    assert ops.loc["aten::add", "calls"] == 2 and ops.loc["aten::add", "bytes"] == b[12] + b[17]
    assert list(ops.index[:3]) == ["aten::t", "aten::addmm", "aten::relu"]


def test_footprint_counts_broadcast_dimensions_once():
    t = torch.empty_strided((3, 4, 5), (0, 5, 1), device="meta")
    assert flops.footprint(t) == 4 * 5 * 4
    assert flops.footprint(torch.empty(0, 7, device="meta")) == 0
    assert flops.footprint(torch.empty((), dtype=torch.float64, device="meta")) == 8


def test_bad_input():
    spans = [{"name": "prof", "kind": "region", "start_ns": 0, "end_ns": 10},
             {"name": "aten::mm", "kind": "op", "start_ns": 1, "end_ns": 9, "parent": 0}]
    no_shapes = xsp.Trace.from_spans(spans)
    for fn in (flops.op_costs, flops.summary, flops.costs):
        with pytest.raises(ValueError, match=r"record_shapes=True"):
            fn(no_shapes)
    with pytest.raises(TypeError, match="xsp.Trace"):
        flops.op_costs(no_shapes.to_pandas())
    with pytest.raises(ValueError, match="by must be one of 'layer', 'step', 'model', 'op'"):
        flops.costs(hand_trace(), by="kernel")


def test_views_and_no_op_conversions_move_nothing():
    """Outputs that share storage with their input (a no-op to(), expand, contiguous on a
    contiguous tensor) count no bytes; a real conversion reads 4 and writes 8 bytes per
    element."""
    spans = [{"name": "prof", "kind": "region", "start_ns": 0, "end_ns": 100},
             O("aten::to", 10, 20, 0, [([4], F, ""), ([], "Scalar", "6"),
                                       ([], "Scalar", "False"), ([], "Scalar", "False"),
                                       ([], "", "")], overload="dtype"),
             O("aten::expand", 30, 40, 0, [([4], F, ""), ([], "ScalarList", "[2, 4]"),
                                           ([], "Scalar", "False")]),
             O("aten::contiguous", 50, 60, 0, [([2, 4], F, ""), ([], "Scalar", "0")]),
             O("aten::to", 70, 80, 0, [([4], F, ""), ([], "Scalar", "7"),
                                       ([], "Scalar", "False"), ([], "Scalar", "False"),
                                       ([], "", "")], overload="dtype")]
    df = flops.op_costs(xsp.Trace.from_spans(spans))
    assert df["status"].tolist() == ["no formula"] * 4
    assert df["bytes_read"].tolist() == [0, 0, 0, 4 * 4]
    assert df["bytes_written"].tolist() == [0, 0, 0, 4 * 8]


def test_calls_that_cannot_be_rebuilt_say_why():
    """torch records no Tensor?[] list: aten::index cannot be rebuilt.  (aten::item, which
    cannot run on meta tensors, is an expected uncovered op, not a failure.)"""
    y = torch.randn(3, 2)
    idx = torch.tensor([0, 2])
    tr = torch_trace([lambda: (y[idx], y.sum().item())])
    s = flops.summary(tr)
    assert s["failed"] == {
        "aten::index": "argument indices (List[Optional[Tensor]]) was not recorded"}
    assert s["uncovered"]["aten::item"] == 1
    df = flops.op_costs(tr).set_index("name")
    assert df.loc["aten::index", "status"] == "failed: " + s["failed"]["aten::index"]
    assert math.isnan(df.loc["aten::index", "bytes"])


def test_malformed_input_attributes_fail_with_their_reason():
    def mm(start, **attrs):
        a = {"input_dims": "[[2, 3], [3, 4]]", "input_types": '["float", "float"]',
             "input_strides": "[[3, 1], [4, 1]]", "concrete_inputs": '["", ""]'}
        a.update(attrs)
        return {"name": "aten::mm", "kind": "op", "start_ns": start, "end_ns": start + 1,
                "parent": 0, "attrs": a}

    spans = [{"name": "prof", "kind": "region", "start_ns": 0, "end_ns": 100},
             mm(1, input_dims="not json"),
             mm(3, input_types='["float", "float", "float"]'),
             mm(5, input_strides="[[3, 1], [4]]"),
             mm(7, input_dims="[[2, 3], [5, 4]]"),
             mm(9, overload="nope"),
             mm(11, input_types='["float", "Storage"]'),
             mm(13)]
    df = flops.op_costs(xsp.Trace.from_spans(spans))
    assert df["status"].tolist() == [
        "failed: input_dims is not JSON: 'not json'",
        "failed: input attributes of different lengths (2 dims, 3 types, 2 strides, 2 concrete "
        "inputs)",
        "failed: argument mat2: sizes [3, 4] and strides [4] do not match",
        "failed: running it on meta tensors raised RuntimeError: a and b must have same "
        "reduction dim, but got [2, 3] X [5, 4].",
        "failed: torch has no overload aten::mm.nope",
        "failed: argument mat2: input type 'Storage' is not rebuilt",
        "formula"]
    s = flops.summary(xsp.Trace.from_spans(spans))
    assert (s["ops"], s["counted"], s["flops"]) == (7, 1, 2 * 2 * 3 * 4)
    assert s["failed"]["aten::mm"].count("; ") == 5


def test_engine_ops_with_empty_inputs_are_transparent():
    """Should the shim give autograd's evaluate_function ops an empty input list, they stay
    transparent: neither costed (they are no operator) nor listed as failed, also around a
    backward function that ran no op."""
    spans = [{"name": "prof", "kind": "region", "start_ns": 0, "end_ns": 100},
             O("autograd::engine::evaluate_function: ExpandBackward0", 10, 20, 0, []),
             O("ExpandBackward0", 11, 19, 1, [([2, 4], F, "")], kind="backward"),
             O("autograd::engine::evaluate_function: MmBackward0", 30, 60, 0, []),
             O("MmBackward0", 31, 59, 3, [([2, 4], F, "")], kind="backward"),
             O("aten::mm", 32, 58, 4, [([2, 4], F, ""), ([4, 3], F, "")])]
    tr = xsp.Trace.from_spans(spans)
    df = flops.op_costs(tr)
    assert df["status"].tolist() == ["composite"] * 4 + ["formula"]
    s = flops.summary(tr)
    assert (s["failed"], s["uncovered"], s["no_inputs"]) == ({}, {}, {})
    assert flops.costs(tr, by="op")["backward_flops"].tolist() == [2 * 2 * 4 * 3]


def test_a_torch_profiler_trace_costs_without_failures(tmp_path):
    """Kineto's JSON names ops without their overload: the overload whose schema fits the
    recorded input types is taken (sum.dim_IntList, add_.Tensor), so a torch.profiler trace
    of a training loop costs every op FlopCounterMode costs, none failing."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)

    def work():
        for _ in range(2):
            loss = m(x).sum(dim=1).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            x.add_(1.0)

    with FlopCounterMode(display=False) as fc:
        work()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        work()
    path = str(tmp_path / "t.json")
    p.export_chrome_trace(path)
    s = xsp.analysis.flops.summary(xsp.load(path, format="kineto"))
    assert s["failed"] == {} and s["flops"] == fc.get_total_flops() > 0


def test_data_dependent_ops_are_uncovered_not_failed():
    """aten::item (and the other ops whose output depends on their inputs' values) cannot run
    on meta tensors and have no formula: costed as reading their tensor inputs, counted as
    uncovered, never listed as failures."""
    import torch
    x = torch.randn(4, 4)
    with xsp.profile(levels="ML", record_shapes=True) as prof:
        (x @ x).sum().item()
        torch.nonzero(x > 0)
    s = xsp.analysis.flops.summary(prof.trace)
    assert s["failed"] == {} and s["uncovered"]["aten::item"] == 1
    assert s["uncovered"]["aten::nonzero"] == 1
    costs = xsp.analysis.flops.op_costs(prof.trace)
    item = costs[costs["name"] == "aten::item"].iloc[0]
    assert (item["bytes_read"], item["bytes_written"]) == (4, 0)
