"""The structure of traces of real models: region, model and module spans, ops inside the modules
that ran them, backward functions linked to their forward ops.

Exact op-level expectations are those of torch 2.13 on CPU (the version this project builds
against); module-level ones do not depend on the torch version.
"""
import collections
import inspect

import pytest
import torch

import xsp
from helpers import check_tree, main_tid, nearest_module
import models

CNN_MODULE_CALLS = models.CNN_MODULE_CALLS
ENCODER_MODULE_CALLS = models.ENCODER_MODULE_CALLS

# (module qualified name, module class, op) for every op whose parent is a module or model span.
CNN_MODULE_OPS = collections.Counter({
    ("TinyCNN", "TinyCNN", "aten::flatten"): 1,
    ("conv1", "Conv2d", "aten::conv2d"): 1,
    ("bn1", "BatchNorm2d", "aten::add_"): 1,          # num_batches_tracked += 1 (train mode)
    ("bn1", "BatchNorm2d", "aten::batch_norm"): 1,
    ("relu", "ReLU", "aten::relu"): 1,
    ("layer1.0", "BasicBlock", "aten::add"): 1,       # out + identity
    ("layer1.0.conv1", "Conv2d", "aten::conv2d"): 1,
    ("layer1.0.bn1", "BatchNorm2d", "aten::add_"): 1,
    ("layer1.0.bn1", "BatchNorm2d", "aten::batch_norm"): 1,
    ("layer1.0.relu", "ReLU", "aten::relu"): 2,       # the block calls its relu twice
    ("layer1.0.conv2", "Conv2d", "aten::conv2d"): 1,
    ("layer1.0.bn2", "BatchNorm2d", "aten::add_"): 1,
    ("layer1.0.bn2", "BatchNorm2d", "aten::batch_norm"): 1,
    ("layer1.1", "BasicBlock", "aten::add"): 1,
    ("layer1.1.downsample.0", "Conv2d", "aten::conv2d"): 1,
    ("layer1.1.downsample.1", "BatchNorm2d", "aten::add_"): 1,
    ("layer1.1.downsample.1", "BatchNorm2d", "aten::batch_norm"): 1,
    ("layer1.1.conv1", "Conv2d", "aten::conv2d"): 1,
    ("layer1.1.bn1", "BatchNorm2d", "aten::add_"): 1,
    ("layer1.1.bn1", "BatchNorm2d", "aten::batch_norm"): 1,
    ("layer1.1.relu", "ReLU", "aten::relu"): 2,
    ("layer1.1.conv2", "Conv2d", "aten::conv2d"): 1,
    ("layer1.1.bn2", "BatchNorm2d", "aten::add_"): 1,
    ("layer1.1.bn2", "BatchNorm2d", "aten::batch_norm"): 1,
    ("pool.0", "MaxPool2d", "aten::max_pool2d"): 1,
    ("pool.1", "AdaptiveAvgPool2d", "aten::adaptive_avg_pool2d"): 1,
    ("fc", "Linear", "aten::linear"): 1,
})

# (backward function, its forward op, the nearest module of that op) after sum(cnn(x)).backward()
CNN_BACKWARD_LINKS = collections.Counter({
    ("AddBackward0", "aten::add", "layer1.0"): 1,
    ("AddBackward0", "aten::add", "layer1.1"): 1,
    ("AddmmBackward0", "aten::addmm", "fc"): 1,
    ("ConvolutionBackward0", "aten::convolution", "conv1"): 1,
    ("ConvolutionBackward0", "aten::convolution", "layer1.0.conv1"): 1,
    ("ConvolutionBackward0", "aten::convolution", "layer1.0.conv2"): 1,
    ("ConvolutionBackward0", "aten::convolution", "layer1.1.conv1"): 1,
    ("ConvolutionBackward0", "aten::convolution", "layer1.1.conv2"): 1,
    ("ConvolutionBackward0", "aten::convolution", "layer1.1.downsample.0"): 1,
    ("MaxPool2DWithIndicesBackward0", "aten::max_pool2d_with_indices", "pool.0"): 1,
    ("MeanBackward1", "aten::mean", "pool.1"): 1,
    ("NativeBatchNormBackward0", "aten::native_batch_norm", "bn1"): 1,
    ("NativeBatchNormBackward0", "aten::native_batch_norm", "layer1.0.bn1"): 1,
    ("NativeBatchNormBackward0", "aten::native_batch_norm", "layer1.0.bn2"): 1,
    ("NativeBatchNormBackward0", "aten::native_batch_norm", "layer1.1.bn1"): 1,
    ("NativeBatchNormBackward0", "aten::native_batch_norm", "layer1.1.bn2"): 1,
    ("NativeBatchNormBackward0", "aten::native_batch_norm", "layer1.1.downsample.1"): 1,
    ("ReluBackward0", "aten::relu", "layer1.0.relu"): 2,
    ("ReluBackward0", "aten::relu", "layer1.1.relu"): 2,
    ("ReluBackward0", "aten::relu", "relu"): 1,
    ("SumBackward0", "aten::sum", None): 1,           # the loss's .sum() runs outside the model
    ("TBackward0", "aten::t", "fc"): 1,
    ("ViewBackward0", "aten::view", "TinyCNN"): 1,    # torch.flatten in TinyCNN.forward
})

# Backward function -> the forward op that created its autograd node.
BACKWARD_TO_FORWARD = {
    "AddBackward0": {"aten::add", "aten::add_"},
    "AddmmBackward0": {"aten::addmm"},
    "CloneBackward0": {"aten::clone"},
    "ConvolutionBackward0": {"aten::convolution"},
    "MaxPool2DWithIndicesBackward0": {"aten::max_pool2d_with_indices"},
    "MeanBackward1": {"aten::mean"},
    "MmBackward0": {"aten::mm"},
    "NativeBatchNormBackward0": {"aten::native_batch_norm"},
    "NativeLayerNormBackward0": {"aten::native_layer_norm"},
    "PermuteBackward0": {"aten::permute"},
    "ReluBackward0": {"aten::relu"},
    "ScaledDotProductFlashAttentionForCpuBackward0":
        {"aten::_scaled_dot_product_flash_attention_for_cpu"},
    "SelectBackward0": {"aten::select"},
    "SqueezeBackward1": {"aten::squeeze"},
    "SumBackward0": {"aten::sum"},
    "TBackward0": {"aten::t"},
    "TransposeBackward0": {"aten::transpose"},
    "UnsafeViewBackward0": {"aten::_unsafe_view"},
    "UnsqueezeBackward0": {"aten::unsqueeze"},
    "ViewBackward0": {"aten::view"},
}

# Op that a module span directly contains -> the module classes allowed to have run it.
OP_MODULE_TYPES = {
    "aten::conv2d": {"Conv2d"},
    "aten::batch_norm": {"BatchNorm2d"},
    "aten::layer_norm": {"LayerNorm"},
    "aten::relu": {"ReLU", "TransformerEncoderLayer"},   # the encoder layer calls F.relu
    "aten::max_pool2d": {"MaxPool2d"},
    "aten::adaptive_avg_pool2d": {"AdaptiveAvgPool2d"},
    "aten::linear": {"Linear", "MultiheadAttention"},     # MHA calls F.linear on in_proj
    "aten::dropout": {"Dropout"},
    "aten::scaled_dot_product_attention": {"MultiheadAttention"},
}


def _record(make, fn, calls=1):
    model, x = make()
    fn(model, x)                                  # warm-up: lazy initialisation
    with xsp.profile() as prof:
        for _ in range(calls):
            fn(model, x)
    return model, prof.trace


@pytest.fixture(scope="module")
def cnn_fwd():
    return _record(models.cnn, models.fwd)


@pytest.fixture(scope="module")
def cnn_bwd():
    return _record(models.cnn, models.fwd_bwd)


@pytest.fixture(scope="module")
def enc_fwd():
    return _record(models.encoder, models.fwd)


@pytest.fixture(scope="module")
def enc_bwd():
    return _record(models.encoder, models.fwd_bwd)


ALL = ["cnn_fwd", "cnn_bwd", "enc_fwd", "enc_bwd"]
CALLER = {"cnn_fwd": models.fwd, "cnn_bwd": models.fwd_bwd, "enc_fwd": models.fwd,
          "enc_bwd": models.fwd_bwd}


def _source(cls):
    """A module span's attribute source: file:line of its class's forward."""
    code = inspect.unwrap(cls.forward).__code__
    return "%s:%d" % (code.co_filename, code.co_firstlineno)


def _model_call_site(fn):
    """The model call's attribute call_site: the line of fn that calls model(x)."""
    lines, first = inspect.getsourcelines(fn)
    line, = [first + k for k, ln in enumerate(lines) if "model(x)" in ln]
    return "%s:%d" % (fn.__code__.co_filename, line)


@pytest.mark.parametrize("which", ALL)
def test_region_is_the_single_root_on_the_main_thread(which, request):
    model, trace = request.getfixturevalue(which)
    check_tree(trace)
    roots = trace.roots()
    assert len(roots) == 1
    region = roots[0]
    assert (region.id, region.kind, region.level, region.name, region.attrs) == (
        0, "region", "M", "xsp.profile", {})
    assert region.thread == main_tid() and region.thread_name == "MainThread"
    assert trace.meta["levels"] == "ML" and trace.meta["region"] == "xsp.profile"
    assert trace.meta["hook_errors"] == 0
    assert trace.lost == 0
    # the intra-op pool's counters only where it ran ops (the encoder's flash-attention
    # backward allocates on it), each such op under the op that spawned it
    pool = [s for s in trace if s.thread_name.startswith("intra-op thread ")]
    links = {"intraop.linked": sum(1 for s in pool if s.parent_span.thread != s.thread),
             "intraop.unlinked": 0, "intraop.ambiguous": 0} if pool else {}
    assert trace.counters == {"lost.cap": 0, "lost.depth": 0, "unmatched_end": 0,
                              "forced_end": 0, "open_at_stop": 0,
                              "fwd_op.skipped": 0, **links}
    assert bool(pool) == (which == "enc_bwd" and torch.get_num_threads() > 1)
    # no step() call: no step span at all
    assert trace.spans(kind="step") == []
    assert all(s.flags == 0 for s in trace)


@pytest.mark.parametrize("which, cls", [("cnn_fwd", "TinyCNN"), ("cnn_bwd", "TinyCNN"),
                                        ("enc_fwd", "Encoder"), ("enc_bwd", "Encoder")])
def test_one_model_span_per_top_level_call(which, cls, request):
    model, trace = request.getfixturevalue(which)
    ms = trace.spans(kind="model")
    assert [(m.name, m.level, m.parent, m.attrs) for m in ms] == [
        (cls, "M", 0, {"type": cls, "source": _source(type(model)),
                       "call_site": _model_call_site(CALLER[which])})]
    # every module span lies under the model span
    for s in trace.spans(kind="module"):
        assert ms[0] in s.ancestors()


def test_three_calls_give_three_model_spans():
    model, trace = _record(models.cnn, models.fwd, calls=3)
    ms = trace.spans(kind="model")
    assert [(m.name, m.parent) for m in ms] == [("TinyCNN", 0)] * 3
    assert ms[0].end_ns <= ms[1].start_ns and ms[1].end_ns <= ms[2].start_ns
    for m in ms:
        assert [c.name for c in m.children if c.kind == "module"] == [
            "conv1", "bn1", "relu", "layer1", "pool", "fc"]
    assert len(trace.spans(kind="module")) == 3 * len(CNN_MODULE_CALLS)


@pytest.mark.parametrize("which, expected", [("cnn_fwd", CNN_MODULE_CALLS),
                                             ("cnn_bwd", CNN_MODULE_CALLS),
                                             ("enc_fwd", ENCODER_MODULE_CALLS),
                                             ("enc_bwd", ENCODER_MODULE_CALLS)])
def test_module_spans_have_qualified_names_and_types(which, expected, request):
    model, trace = request.getfixturevalue(which)
    named = dict(model.named_modules())
    mods = trace.spans(kind="module")
    assert [s.name for s in mods] == expected
    model_span = trace.spans(kind="model")[0]
    for s in mods:
        assert s.level == "L"
        cls = type(named[s.name])
        assert s.attrs == {"type": cls.__name__, "source": _source(cls),
                           "call_site": s.attrs["call_site"]}
        # the parent is the enclosing module (by qualified name) or the model span
        parent = s.parent_span
        # called from the code of the enclosing module's class (its forward or a helper)
        outer = type(named[parent.name]) if parent.kind == "module" else type(model)
        assert s.attrs["call_site"].rsplit(":", 1)[0] == _source(outer).rsplit(":", 1)[0]
        if "." in s.name:
            assert (parent.kind, parent.name) == ("module", s.name.rsplit(".", 1)[0])
        else:
            assert parent == model_span


def test_module_calls_match_torch_hooks():
    """The module spans are exactly the forwards that torch's per-module hooks see, in order
    (an oracle independent of xsp's global hooks and name maps)."""
    for make in (models.cnn, models.encoder):
        model, x = make()
        seen = []
        handles = [m.register_forward_pre_hook(lambda mod, args, n=n: seen.append(n))
                   for n, m in model.named_modules() if n]
        model(x)
        for h in handles:
            h.remove()
        _, trace = _record(make, models.fwd)
        assert [s.name for s in trace.spans(kind="module")] == seen


def test_ops_sit_in_the_module_that_ran_them(cnn_fwd):
    model, trace = cnn_fwd
    got = collections.Counter(
        (s.parent_span.name, s.parent_span.attrs["type"], s.name)
        for s in trace.spans(kind="op") if s.parent_span.kind in ("module", "model"))
    assert got == CNN_MODULE_OPS
    # the aten::conv2d under layer1.0.conv1 really is that Conv2d's: its convolution is the
    # only one whose weight shape matches (4 -> 4, 3x3) and it is nested, not a sibling
    conv = [s for s in trace.spans(name="aten::conv2d") if s.parent_span.name == "layer1.0.conv1"]
    assert len(conv) == 1
    assert [c.name for c in conv[0].children] == ["aten::convolution"]


@pytest.mark.parametrize("which", ALL)
def test_every_forward_op_has_its_module_as_ancestor(which, request):
    model, trace = request.getfixturevalue(which)
    named = dict(model.named_modules())
    main = main_tid()
    fwd = trace.spans(kind="model")[0]
    n_checked = 0
    for s in trace.spans(kind="op"):
        if not (s.thread == main and fwd.start_ns <= s.start_ns and s.end_ns <= fwd.end_ns):
            continue
        n_checked += 1
        mod = nearest_module(s)
        assert mod is not None, s
        assert fwd in s.ancestors()
        if mod.kind == "module":
            assert mod.attrs["type"] == type(named[mod.name]).__name__
        if s.parent_span == mod and s.name in OP_MODULE_TYPES:
            assert mod.attrs["type"] in OP_MODULE_TYPES[s.name], (s.name, mod.name)
    assert n_checked > 50


def test_backward_spans_link_to_their_forward_ops(cnn_bwd):
    model, trace = cnn_bwd
    bwd = trace.spans(kind="backward")
    links = collections.Counter()
    for b in bwd:
        assert b.level == "L"
        # each backward function runs inside the engine's evaluate_function op
        assert b.parent_span.kind == "op"
        assert b.parent_span.name == "autograd::engine::evaluate_function: " + b.name
        if b.name == "torch::autograd::AccumulateGrad":
            assert b.attrs == {}
            continue
        f = trace[b.attrs["fwd_op"]]
        assert set(b.attrs) == {"seq", "fwd_op"}
        assert f.kind == "op" and f.attrs["seq"] == b.attrs["seq"]
        assert f.name in BACKWARD_TO_FORWARD[b.name]
        assert f.end_ns <= b.start_ns
        mod = nearest_module(f)
        links[(b.name, f.name, mod.name if mod else None)] += 1
    assert links == CNN_BACKWARD_LINKS
    # one AccumulateGrad per parameter (weights, biases, batch-norm affine parameters)
    assert sum(b.name == "torch::autograd::AccumulateGrad" for b in bwd) == \
        len(list(model.parameters())) == 20


def test_backward_links_in_the_encoder(enc_bwd):
    model, trace = enc_bwd
    named = dict(model.named_modules())
    linked = collections.Counter()
    for b in trace.spans(kind="backward"):
        if b.name == "torch::autograd::AccumulateGrad":
            continue
        f = trace[b.attrs["fwd_op"]]
        assert f.name in BACKWARD_TO_FORWARD[b.name], (b.name, f.name)
        assert f.attrs["seq"] == b.attrs["seq"]
        mod = nearest_module(f)
        if mod is not None and mod.kind == "module":
            assert mod.attrs["type"] == type(named[mod.name]).__name__
        linked[(b.name, mod.name if mod else None)] += 1
    # the linears: addmm for 2-d inputs (head, self_attn.out_proj's weights) and for the
    # flattened 3-d inputs of linear1/linear2; mm for the fused q/k/v projection
    assert linked[("AddmmBackward0", "head")] == 1
    assert linked[("AddmmBackward0", "layer.linear1")] == 1
    assert linked[("AddmmBackward0", "layer.linear2")] == 1
    assert linked[("AddmmBackward0", "layer.self_attn")] == 1
    assert linked[("MmBackward0", "layer.self_attn")] == 1
    assert linked[("NativeLayerNormBackward0", "layer.norm1")] == 1
    assert linked[("NativeLayerNormBackward0", "layer.norm2")] == 1
    assert linked[("TBackward0", "head")] == 1
    assert linked[("MeanBackward1", "Encoder")] == 1
    assert linked[("SumBackward0", None)] == 1
    assert sum(b.name == "torch::autograd::AccumulateGrad"
               for b in trace.spans(kind="backward")) == len(list(model.parameters()))


def test_forward_only_has_no_backward_spans(cnn_fwd, enc_fwd):
    for model, trace in (cnn_fwd, enc_fwd):
        assert trace.spans(kind="backward") == []


def test_encoder_fast_path_in_eval_no_grad_skips_submodules():
    """Documents what xsp sees when TransformerEncoderLayer takes its fused fast path (eval
    mode, no grad): the layer's submodule forwards never run, so the only module spans are
    the layer and the head, and the layer's work is one fused op."""
    model, x = models.encoder()
    model.eval()
    with torch.no_grad():
        model(x)
        with xsp.profile() as prof:
            model(x)
    trace = prof.trace
    check_tree(trace)
    assert [s.name for s in trace.spans(kind="module")] == ["layer", "head"]
    layer = trace.spans(kind="module", name="layer")[0]
    assert [c.name for c in layer.children] == ["aten::_transformer_encoder_layer_fwd"]


def test_unicode_module_names():
    """Modules registered under non-ASCII attribute names keep those names."""
    torch.manual_seed(0)
    block = torch.nn.Sequential()
    block.add_module("çonv_ü", torch.nn.Linear(2, 2))
    block.add_module("模块🙂", torch.nn.ReLU())
    model = torch.nn.Sequential()
    model.add_module("blöck", block)
    x = torch.ones(1, 2)
    model(x)
    with xsp.profile() as prof:
        model(x)
    names = {n for n, _ in model.named_modules() if n}
    spans = prof.trace.spans(kind="module")
    assert [(s.name, s.attrs["type"]) for s in spans] == [
        ("blöck", "Sequential"), ("blöck.çonv_ü", "Linear"), ("blöck.模块🙂", "ReLU")]
    assert {s.name for s in spans} == names


def test_shared_module_is_named_as_named_modules_names_it():
    """Regression guard (bug: _ModuleCalls._qualnames builds {id(module): name} from
    named_modules(remove_duplicate=False), so the LAST alias wins): a module object registered
    twice must get the qualified name that model.named_modules() reports for it (its first
    alias), not an alias that named_modules() never yields."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(2, 2)
    seq = torch.nn.Sequential()
    seq.add_module("first", lin)
    seq.add_module("again", lin)
    x = torch.ones(1, 2)
    seq(x)
    with xsp.profile() as prof:
        seq(x)
    assert [n for n, _ in seq.named_modules()] == ["", "first"]
    assert [(s.name, s.attrs["type"]) for s in prof.trace.spans(kind="module")] == [
        ("first", "Linear"), ("first", "Linear")]


def test_module_added_during_a_profile_gets_its_qualified_name():
    """Regression guard (bug: when a module is not in the cached name map of its model,
    _ModuleCalls._enter calls _qualnames(root) to rebuild it, but _qualnames returns the cached
    map whenever the root is still alive, so a submodule added after the model's first call in
    the same profile is named by its class, 'Tanh', instead of its qualified name 'c')."""
    x = torch.ones(2)
    seq = torch.nn.Sequential()
    seq.add_module("a", torch.nn.ReLU())
    with xsp.profile() as prof:
        seq(x)
        seq.add_module("c", torch.nn.Tanh())
        seq(x)
    assert [(s.name, s.attrs["type"]) for s in prof.trace.spans(kind="module")] == [
        ("a", "ReLU"), ("a", "ReLU"), ("c", "Tanh")]


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return 2 * x * g


class _UsesSquare(torch.nn.Module):
    def forward(self, x):
        return _Square.apply(x)


def test_custom_autograd_function_links_to_its_forward():
    m = _UsesSquare()
    x = torch.ones(3, requires_grad=True)
    m(x).sum().backward()
    with xsp.profile() as prof:
        m(x).sum().backward()
    trace = prof.trace
    check_tree(trace)
    fwd, = trace.spans(name="_Square")
    assert (fwd.kind, fwd.parent_span.kind, fwd.parent_span.name) == ("op", "model", "_UsesSquare")
    assert [c.name for c in fwd.children] == ["aten::mul"]
    bwd, = trace.spans(name="_SquareBackward")
    assert bwd.kind == "backward"
    assert bwd.attrs == {"seq": fwd.attrs["seq"], "fwd_op": fwd.id}
    assert [c.name for c in bwd.children] == ["aten::mul", "aten::mul"]


def test_backward_of_a_forward_run_before_the_profile_has_no_link():
    """A backward function whose forward op was not recorded keeps its sequence number but
    gets no fwd_op (nothing is guessed)."""
    m = _UsesSquare()
    x = torch.ones(3, requires_grad=True)
    loss = m(x).sum()
    with xsp.profile() as prof:
        loss.backward()
    bwd = prof.trace.spans(kind="backward")
    assert [b.name for b in bwd] == ["SumBackward0", "_SquareBackward",
                                     "torch::autograd::AccumulateGrad"]
    assert [set(b.attrs) for b in bwd] == [{"seq"}, {"seq"}, set()]
    assert bwd[0].attrs["seq"] == bwd[1].attrs["seq"] + 1
