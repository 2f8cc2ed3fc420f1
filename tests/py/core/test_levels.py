"""Level letters (xsp.parse_levels, xsp.profile(levels=...)) and what each level records."""
import inspect

import pytest
import torch

import xsp
from helpers import check_tree, profiled
import models


@pytest.mark.parametrize("text, parsed", [
    ("ML", "ML"), ("LM", "ML"), ("lm", "ML"), ("Ml", "ML"), ("M/L", "ML"), ("l, m", "ML"),
    ("L+M", "ML"), (" m ", "M"), ("mm", "M"), ("M", "M"), ("l", "L"), ("L", "L"),
])
def test_letters_any_order_case_and_separators(text, parsed):
    assert xsp.parse_levels(text) == parsed
    assert xsp.profile(levels=text).levels == parsed


@pytest.mark.parametrize("text, bad", [("MX", "X"), ("mlq", "q"), ("M-L", "-"), ("é", "é")])
def test_unknown_letter_is_named_with_the_valid_ones(text, bad):
    with pytest.raises(ValueError) as ei:
        xsp.parse_levels(text)
    msg = str(ei.value)
    assert repr(bad) in msg
    for valid in ("M (model)", "L (layer)", "G (GPU)"):
        assert valid in msg
    with pytest.raises(ValueError):
        xsp.profile(levels=text)


@pytest.mark.parametrize("text", ["", " ", "/,+"])
def test_no_letter_is_a_value_error(text):
    with pytest.raises(ValueError, match="names no level") as ei:
        xsp.parse_levels(text)
    assert "M (model), L (layer), G (GPU)" in str(ei.value)


@pytest.mark.parametrize("value, tname", [(None, "NoneType"), (1, "int"), (["M"], "list"),
                                          (b"ML", "bytes")])
def test_non_string_is_a_type_error(value, tname):
    with pytest.raises(TypeError) as ei:
        xsp.parse_levels(value)
    assert str(ei.value) == ("levels must be a string of level letters such as 'ML', not %s"
                             % tname)
    with pytest.raises(TypeError):
        xsp.profile(levels=value)


@pytest.mark.parametrize("text,parsed", [("G", "G"), ("g", "G"), ("MLG", "MLG"), ("gm", "MG"),
                                         ("M/L/G", "MLG")])
def test_gpu_level_letters_parse(text, parsed):
    """G is a level letter like the others; whether it can be recorded is checked when the
    profile is made (and again by CUPTI at start: tests/py/producers/test_gpu_level.py)."""
    assert xsp.parse_levels(text) == parsed
    if torch.cuda.is_available():
        assert xsp.profile(levels=text).levels == parsed
    else:
        with pytest.warns(xsp.XSPWarning, match="level G cannot be recorded"):
            prof = xsp.profile(levels=text, gpu_fallback=True)
        assert prof.levels == parsed.replace("G", "")


def test_level_M_records_region_and_model_spans_only():
    model, x = models.cnn()
    models.fwd(model, x)
    trace = profiled(models.fwd, model, x, levels="M")
    check_tree(trace)
    fwd, call = models.TinyCNN.forward.__code__, models.fwd.__code__
    lines, first = inspect.getsourcelines(models.fwd)
    line, = [first + k for k, ln in enumerate(lines) if "model(x)" in ln]
    assert [(s.id, s.parent, s.level, s.kind, s.name, s.attrs) for s in trace] == [
        (0, None, "M", "region", "xsp.profile", {}),
        (1, 0, "M", "model", "TinyCNN", {
            "type": "TinyCNN", "source": "%s:%d" % (fwd.co_filename, fwd.co_firstlineno),
            "call_site": "%s:%d" % (call.co_filename, line)}),
    ]
    assert trace.meta["levels"] == "M"


def test_level_L_records_modules_and_ops_without_region():
    model, x = models.cnn()
    models.fwd(model, x)
    trace = profiled(models.fwd, model, x, levels="L")
    check_tree(trace)
    roots = trace.roots()
    # without M there is no region, steps or model span: the top-level call is a module span
    # named after its class
    assert [(r.kind, r.level, r.name, r.attrs["type"]) for r in roots] == [
        ("module", "L", "TinyCNN", "TinyCNN")]
    assert {s.level for s in trace} == {"L"}
    assert {s.kind for s in trace} == {"module", "op"}
    assert [s.name for s in roots[0].children if s.kind == "module"] == [
        "conv1", "bn1", "relu", "layer1", "pool", "fc"]
    assert trace.meta["levels"] == "L"


def test_level_M_with_nothing_inside_is_the_region_alone():
    with xsp.profile(levels="M") as prof:
        pass
    assert [(s.kind, s.name, s.parent) for s in prof.trace] == [("region", "xsp.profile", None)]


def test_level_M_does_not_need_the_torch_shim():
    """levels='M' installs module hooks but never attaches the RecordFunction callback."""
    import xsp._torch
    a = torch.ones(2)
    with xsp.profile(levels="m"):
        assert not xsp._torch.attached()
        torch.add(a, a)
    with xsp.profile(levels="ml"):
        assert xsp._torch.attached()
    assert not xsp._torch.attached()
