"""The contract between xsp.profile and its C session (csrc/python/sessionopts.h): one
SessionOptions, checked and copied by Session._setup; the stop reads the tables it was given
there (dicts filled in place), never an attribute of a Python object."""
import threading

import pytest
import torch

import xsp
from xsp import _core


def test_fields_default_to_none_and_unknown_ones_are_refused():
    o = _core.SessionOptions("ML")
    assert (o.levels, o.region, o.wrapper, o.thread_names, o.span_attrs) == (
        "ML", None, None, None, None)
    assert (o.max_bytes, o.gpu, o.torch_options) == (0, False, 0)
    with pytest.raises(TypeError, match="no option 'wraper'"):
        _core.SessionOptions("M", wraper=None)
    with pytest.raises(TypeError):
        _core.SessionOptions("M", gpu=1)            # a bool, not an int
    with pytest.raises(TypeError, match="at most 2 positional"):
        _core.SessionOptions("M", "r", 3)


@pytest.mark.parametrize("fields, words", [
    ({"levels": None}, "levels must be a str"),
    ({"region": 3}, "region a str"),
    ({"module_type": torch.nn.Module, "wrapper": print}, "wrapper (a ModuleCall)"),
    ({"thread_names": [1]}, "thread_names must be a dict"),
    ({"span_attrs": "x"}, "span_attrs must be a dict"),
    ({"on_trace_ready": print}, "goes with a schedule"),
])
def test_setup_checks_every_field(fields, words):
    o = _core.SessionOptions("M", "r")
    for k, v in fields.items():
        setattr(o, k, v)
    with pytest.raises(TypeError, match=words.replace("(", r"\(").replace(")", r"\)")):
        _core.Session()._setup(o)


def test_setup_takes_options_once():
    s = _core.Session()
    with pytest.raises(TypeError, match="SessionOptions"):
        s._setup({"levels": "M"})
    s._setup(_core.SessionOptions("M", "r"))
    with pytest.raises(xsp.SessionStateError, match="set up already"):
        s._setup(_core.SessionOptions("M", "r"))


def test_stop_reads_the_tables_given_at_setup_filled_in_place():
    """Meta and thread names added to the dicts during the block reach the trace; replacing the
    options' fields after _setup changes nothing (the session keeps its own references)."""
    meta, names = {"given": 1}, {}
    o = _core.SessionOptions("M", "r", meta=meta, thread_names=names)
    s = _core.Session()
    s._setup(o)
    o.meta, o.thread_names = {"replaced": 1}, {}
    with s:
        meta["added"] = "in the block"
        names[threading.get_native_id()] = "named in the block"
    tr = xsp.Trace(s._data)
    assert tr.meta["given"] == 1 and tr.meta["added"] == "in the block"
    assert "replaced" not in tr.meta
    assert [name for _, name, _ in tr.threads] == ["named in the block"]


def test_a_profile_hands_its_tables_over_and_reads_no_attribute():
    """Regression: the stop read the profile's _span_attrs and _ModuleCalls' _errors and sites
    by name from their instance dicts; now they are the objects given at setup, so replacing
    the attributes changes nothing."""
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    with xsp.profile(levels="ML") as prof:
        prof._span_attrs = {"events": [(0, 2 ** 62, "Sequential", {"planted": 1})]}
        prof._modules._errors = 5
        prof._modules.sites = None
        net(torch.ones(1, 2))
    tr = prof.trace
    model, = tr.spans(kind="model")
    assert "planted" not in model.attrs and "source" in model.attrs
    assert tr.meta["hook_errors"] == 0
