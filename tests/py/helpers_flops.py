"""xsp traces built from torch.profiler runs, for the FLOPs and bytes tests (xsp/analysis/flops.py).

Until the torch shim writes the op input attributes itself, torch_trace() runs a workload under
torch.profiler(record_shapes=True), reads its Kineto JSON with xsp.load_kineto (events nested
per thread by time, backward functions linked to their forward op) and rebuilds the trace with
xsp.Trace.from_spans in the shape xsp.profile(levels="ML", record_shapes=True) gives:

  - op and backward spans carry input_dims, input_types, input_strides and concrete_inputs:
    torch's "Input Dims", "Input type", "Input Strides" and "Concrete Inputs" args as JSON text
    (json.dumps, which is how Kineto writes them), and overload, the op's overload name ("" for
    the default one; torch.profiler names an op "aten::add.Tensor" when asked to capture
    overload names, xsp names it "aten::add");
  - module calls are recorded by forward hooks as record_function scopes "xsp.module:<name>|
    <class>" and become `model` spans (a top-level call, named after its class) and `module`
    spans (qualified name, attribute type), as xsp names them;
  - each step is a record_function scope "xsp.step#<k>" and becomes the `step` span "step#<k>";
  - the record_function bookkeeping ops (profiler::*) that these scopes add are left out.

When the shim lands, the tests can profile with xsp directly (same attributes, same names).
"""
import json
import os
import re
import tempfile

import torch
from torch._C._profiler import _ExperimentalConfig
from torch.profiler import ProfilerActivity, profile, record_function

import xsp
from xsp.values.trace import KINDS

MODULE = "xsp.module:"
STEP = "xsp.step#"
ARGS = {"Input Dims": "input_dims", "Input type": "input_types",
        "Input Strides": "input_strides", "Concrete Inputs": "concrete_inputs"}
_OVERLOADED = re.compile(r"(\w+::\w+)\.(\w+)")


def _module_hooks(model):
    """Forward pre/post hooks on model and every submodule that open and close a
    record_function scope per call; returns the hook handles."""
    names = {}
    for qn, m in model.named_modules():
        names.setdefault(m, qn or type(model).__name__)
    stack = []

    def pre(mod, args):
        rf = record_function("%s%s|%s" % (MODULE, names[mod], type(mod).__name__))
        rf.__enter__()
        stack.append(rf)

    def post(mod, args, out):
        stack.pop().__exit__(None, None, None)

    handles = []
    for m in names:
        handles.append(m.register_forward_pre_hook(pre))
        handles.append(m.register_forward_hook(post))
    return handles


def torch_trace(steps, model=None):
    """Runs each callable of steps (a list) as one step under torch.profiler(record_shapes=True,
    overload names captured) and returns the run as an xsp.Trace (the module docstring says
    how).  model: the nn.Module whose calls become model and module spans (None: no module
    spans)."""
    handles = _module_hooks(model) if model is not None else []
    cfg = _ExperimentalConfig(capture_overload_names=True)
    try:
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                     experimental_config=cfg) as prof:
            for k, fn in enumerate(steps):
                with record_function("%s%d" % (STEP, k)):
                    fn()
    finally:
        for h in handles:
            h.remove()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        loaded = xsp.load(path, format="kineto")
    finally:
        os.unlink(path)
    return convert(loaded)


def convert(loaded):
    """The xsp.Trace of a torch.profiler trace read by xsp.load_kineto, in xsp.profile's shape
    (see the module docstring)."""
    keep = [s for s in loaded if not (s.kind == "op" and s.name.startswith("profiler::"))]
    new_id = {s.id: k for k, s in enumerate(keep)}
    spans = []
    for s in keep:
        a = s.attrs
        kind, name, attrs = s.kind, s.name, {}
        if kind == "scope" and name.startswith(MODULE):
            name, typ = name[len(MODULE):].rsplit("|", 1)
            p = s.parent_span
            while p is not None and not (p.kind == "scope" and p.name.startswith(MODULE)):
                p = p.parent_span
            kind = "model" if p is None else "module"
            if kind == "model":
                name = typ
            attrs["type"] = typ
        elif kind == "scope" and name.startswith(STEP):
            kind, name = "step", "step#" + name[len(STEP):]
        elif kind in ("op", "backward"):
            m = _OVERLOADED.fullmatch(name) if kind == "op" else None
            overload = ""
            if m:
                name, overload = m.group(1), m.group(2)
            if "k.Input Dims[]" in a:
                for src, dst in ARGS.items():
                    attrs[dst] = json.dumps(json.loads(a["k.%s[]" % src]))
                attrs["overload"] = overload
            for key in ("seq", "fwd_op"):
                if key in a:
                    attrs[key] = new_id[a[key]] if key == "fwd_op" else a[key]
        parent = s.parent
        spans.append({"name": name, "kind": kind, "start_ns": s.start_ns, "end_ns": s.end_ns,
                      "parent": None if parent is None else new_id[parent],
                      "level": "M" if kind in ("region", "model", "step") else s.level,
                      "thread": int(loaded.thread_index[s.id]), "attrs": attrs})
    assert all(sp["kind"] in KINDS for sp in spans)
    return xsp.Trace.from_spans(spans, threads=list(loaded.threads), meta={"levels": "ML"})
