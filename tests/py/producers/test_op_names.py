"""Operator names on the hot path: schema names are taken from the dispatcher without reading
their bytes again (XSP_NAME_STABLE) until an operator is registered or deregistered; these
tests make the dispatcher reuse and replace operators inside one session and check that every
span still carries the name of the operator that ran."""
import gc

import torch

import xsp


def _lib_op(ns, name):
    lib = torch.library.Library(ns, "DEF")
    lib.define("%s(Tensor x) -> Tensor" % name)
    lib.impl(name, lambda x: x + 1, "CompositeExplicitAutograd")
    return lib, getattr(getattr(torch.ops, ns), name)


def _op_names(trace):
    return [s.name for s in trace.spans(kind="op")]


def test_ops_registered_and_deregistered_inside_a_session():
    x = torch.ones(2)
    with xsp.profile(levels="L") as prof:
        names = []
        for i in range(6):
            lib, op = _lib_op("xsp_names_%d" % i, "f%d" % i)
            op(x)
            op(x)
            names.append("xsp_names_%d::f%d" % (i, i))
            lib._destroy()       # deregisters: the schema string is freed
            del lib, op
            gc.collect()
        torch.add(x, x)
    got = [n for n in _op_names(prof.trace) if n.startswith("xsp_names_") or n == "aten::add"]
    want = []
    for n in names:
        want += [n, "aten::add", n, "aten::add"]    # each call, then the add it runs
    want.append("aten::add")
    assert got == want


def test_user_scopes_reusing_one_address():
    # record_function names are strings owned by the RecordFunction: never taken as stable
    x = torch.ones(2)
    with xsp.profile(levels="L") as prof:
        for i in range(50):
            with torch.autograd.profiler.record_function("scope_%d" % i):
                torch.add(x, x)
    scopes = [s.name for s in prof.trace.spans(kind="scope")]
    assert scopes == ["scope_%d" % i for i in range(50)]
    assert _op_names(prof.trace).count("aten::add") == 50
