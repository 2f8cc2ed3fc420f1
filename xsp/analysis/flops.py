"""FLOPs and bytes moved per op, layer, step and model, from the op input attributes that
xsp.profile(levels="ML", record_shapes=True) records (docs/analyses.md, "FLOPs and bytes").

    from xsp.analysis import flops
    flops.op_costs(trace)             # one row per op and backward span with inputs
    flops.costs(trace, by="layer")    # totals per layer ("layer", "step", "model", "op")
    flops.summary(trace)              # totals, FLOPs per dtype, what had no formula or failed

Where the numbers come from.  Each op span carries its inputs as torch.profiler writes them in
Kineto's JSON (input_dims, input_types, input_strides, concrete_inputs, as JSON text) and its
overload name.  From those the op's call is rebuilt: tensors as meta-device tensors with the
recorded sizes, strides and dtype, scalars and lists from concrete_inputs, None for what torch
did not record; positional inputs are matched to the OpOverload's schema and split into args
and kwargs as the dispatcher hands them to a TorchDispatchMode.  The output comes from running
the OpOverload on the meta tensors, and the FLOPs from PyTorch's own formulas, the registry
behind torch.utils.flop_counter (flop_registry, keyed by OpOverloadPacket), called as
FlopCounterMode calls it: formula(*args, **kwargs, out_val=out).  There is no FLOP table here.
Every distinct signature (op, overload and the four attribute strings) is rebuilt once per call.

Which ops are costed.  The op spans form trees (an op's children are the ops it calls).  Going
down from the top, an op is *costed* when it has a formula, or when nothing below it has one:
its FLOPs (from its formula, or unknown) and its bytes are its own, and the ops inside it are
*nested* (0: they are part of it).  An op without a formula that has ops with formulas below it
is *composite*: its cost is in those ops (0 here).  FlopCounterMode sees the outermost
dispatched op the same way (aten::convolution, never the aten::_convolution inside it; the ops
a CompositeImplicitAutograd op such as aten::linear decomposes into).  Backward spans,
autograd's evaluate_function ops, and op spans that name no operator of this torch but have
spans with inputs below them, are transparent (composite).  Ops without recorded inputs are transparent too and are listed, as are the ops
without a formula and the ones that could not be rebuilt: nothing is silently zero.

Bytes are a model: a costed op reads its tensor inputs and writes its outputs, each counted by
its footprint, the distinct elements its sizes and strides address (a broadcast dimension, of
stride 0, counts once) times the element size.  An output that shares storage with an input
(a view: aten::t, aten::view, a no-op aten::to or contiguous) moves nothing: neither it nor the
input it views is counted.  An argument the op writes (schema `Tensor(a!)`) is counted as
written once; an in-place op's mutated input (add_'s self) as read as well, and an out=
argument not.  copy_, fill_ and zero_ do not really read their destination, so the model counts
one read too many for them.  Inputs passed twice are counted twice (the trace cannot tell that
two inputs are one tensor).  TensorList elements take the dtype of the op's first tensor input
(torch records none for them), else torch's default dtype.

This module reads a Trace through its public API (layer 2, beside xsp.analysis); torch is
imported when a function needs it.
"""
import ast
import json
import math

import numpy as np

from xsp.values.trace import KINDS, Trace, nearest_ancestor

INPUT_ATTRS = ("input_dims", "input_types", "input_strides", "concrete_inputs")
BY = ("layer", "step", "model", "op")
ENGINE = "autograd::engine::evaluate_function: "
OP_COLUMNS = ["id", "name", "overload", "flops", "bytes_read", "bytes_written", "bytes", "dtype",
              "counted", "status"]
METRICS = ["flops", "bytes", "forward_flops", "backward_flops", "forward_bytes",
           "backward_bytes", "uncovered", "failed"]

# torch's C++ type names (caffe2::TypeMeta::name(), as Kineto's "Input type" has them) -> the
# torch dtype attribute; tests/py/analysis/test_flops.py checks each against torch.profiler
DTYPES = {
    "float": "float32", "double": "float64", "c10::Half": "float16",
    "c10::BFloat16": "bfloat16", "long int": "int64", "int": "int32", "short int": "int16",
    "signed char": "int8", "unsigned char": "uint8", "bool": "bool",
    "short unsigned int": "uint16", "unsigned int": "uint32", "long unsigned int": "uint64",
    "c10::complex<float>": "complex64", "c10::complex<double>": "complex128",
    "c10::complex<c10::Half>": "complex32", "c10::Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e5m2": "float8_e5m2", "c10::Float8_e4m3fnuz": "float8_e4m3fnuz",
    "c10::Float8_e5m2fnuz": "float8_e5m2fnuz", "c10::Float8_e8m0fnu": "float8_e8m0fnu",
    "c10::Float4_e2m1fn_x2": "float4_e2m1fn_x2", "c10::qint8": "qint8",
    "c10::quint8": "quint8", "c10::qint32": "qint32", "c10::quint4x2": "quint4x2",
    "c10::bits8": "bits8",
}


class _Failed(Exception):
    """Why an op's call could not be rebuilt or costed (the text of its status)."""


def _torch():
    try:
        import torch
        import torch.utils.flop_counter  # noqa: F401  (fills flop_registry)
    except ImportError as exc:
        raise ImportError("xsp.flops needs PyTorch (torch.utils.flop_counter): %s" % exc) \
            from None
    return torch


def _registry():
    return _torch().utils.flop_counter.flop_registry


# -- rebuilding an op's call -----------------------------------------------------------------
def _packet(torch, name, memo):
    """The OpOverloadPacket named "ns::op" (torch.ops.ns.op), None when torch has none."""
    if name in memo:
        return memo[name]
    pkt = None
    ns, sep, op = name.partition("::")
    if sep and ns.isidentifier() and op.isidentifier():
        try:
            pkt = getattr(getattr(torch.ops, ns), op)
        except (AttributeError, RuntimeError):
            pkt = None
        if not isinstance(pkt, torch._ops.OpOverloadPacket):
            pkt = None
    memo[name] = pkt
    return pkt


def _dtype(torch, typ):
    name = DTYPES.get(typ) if isinstance(typ, str) else None
    return getattr(torch, name, None) if name else None


def _literal(text, what):
    """A recorded Scalar or ScalarList ("1", "0.", "False", "1.+2.j", "[1, 1]", "inf")."""
    if not isinstance(text, str):
        raise _Failed("%s: concrete input %r is not text" % (what, text))
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        pass
    try:
        return float(text)                      # inf, -inf, nan
    except ValueError:
        raise _Failed("%s: cannot read %r" % (what, text)) from None


def _real_type(arg):
    return str(arg.real_type)


def _scalar_type(torch, code, what):
    """The torch dtype of a ScalarType code (what the dispatcher hands a TorchDispatchMode for
    a dtype argument), read from torch: the dtype of a meta tensor made with it."""
    try:
        return torch.ops.aten.empty.memory_format([0], dtype=code, device="meta").dtype
    except (TypeError, RuntimeError, ValueError):
        raise _Failed("%s: %r is not a ScalarType" % (what, code)) from None


def _is_device(arg):
    return _real_type(arg) in ("Device", "Optional[Device]")


def _is_optional(arg):
    return _real_type(arg).startswith("Optional[")


def _tensor(torch, dims, strides, dtype, what):
    if not (isinstance(dims, list) and isinstance(strides, list) and len(dims) == len(strides)):
        raise _Failed("%s: sizes %s and strides %s do not match" % (what, dims, strides))
    try:
        return torch.empty_strided(dims, strides, dtype=dtype, device="meta")
    except (TypeError, RuntimeError, ValueError) as exc:
        raise _Failed("%s: no meta tensor of sizes %s, strides %s, %s (%s)"
                      % (what, dims, strides, dtype, _first_line(exc))) from None


def _first_line(exc):
    text = str(exc).strip().splitlines()
    return "%s: %s" % (type(exc).__name__, text[0] if text else "")


def _values(torch, op, dims, types, strides, concrete):
    """The op's arguments, one per schema argument, rebuilt from the recorded inputs."""
    args = op._schema.arguments
    if len(dims) != len(args):
        raise _Failed("%d inputs recorded, the schema %s has %d arguments"
                      % (len(dims), op._schema, len(args)))
    first = next((_dtype(torch, t) for t in types if _dtype(torch, t) is not None), None)
    out = []
    for a, d, t, s, c in zip(args, dims, types, strides, concrete):
        what = "argument %s" % a.name
        dt = _dtype(torch, t)
        if _is_device(a):
            out.append("meta")                  # factories make meta tensors
        elif dt is not None:
            out.append(_tensor(torch, d, s, dt, what))
        elif t == "TensorList":
            if not (isinstance(d, list) and isinstance(s, list) and len(d) == len(s)):
                raise _Failed("%s: a TensorList with %s sizes and %s strides" % (what, d, s))
            lt = first if first is not None else torch.get_default_dtype()
            out.append([_tensor(torch, di, si, lt, what) for di, si in zip(d, s)])
        elif t in ("Scalar", "ScalarList"):
            v = _literal(c, what)
            if _real_type(a) in ("ScalarType", "Optional[ScalarType]") and isinstance(v, int) \
                    and not isinstance(v, bool):
                v = _scalar_type(torch, v, what)
            out.append(v)
        elif t == "":                           # None, or what torch does not record
            if _is_optional(a):
                out.append(None)
            elif a.has_default_value():
                out.append(a.default_value)     # a string, say
            else:
                raise _Failed("%s (%s) was not recorded" % (what, a.real_type))
        else:
            raise _Failed("%s: input type %r is not rebuilt" % (what, t))
    return out


def _same(v, d):
    """Whether a rebuilt value equals a schema default (as the dispatcher compares IValues)."""
    if v is None or d is None:
        return v is None and d is None
    if type(v) is not type(d) and not (isinstance(v, list) and isinstance(d, (list, tuple))):
        return False
    try:
        return bool(v == d) if not isinstance(v, list) else list(v) == list(d)
    except Exception:
        return False


def _split(op, values):
    """(args, kwargs) as a TorchDispatchMode gets them (torch's parseIValuesToPyArgsKwargs):
    positional arguments up to the last one that differs from its default, kwarg-only
    arguments that differ from their default as keywords."""
    sch = op._schema.arguments

    def is_default(i):
        return sch[i].has_default_value() and _same(values[i], sch[i].default_value)

    kw_start = len(values)
    while kw_start > 0 and sch[kw_start - 1].kwarg_only:
        kw_start -= 1
    pos_end = kw_start
    while pos_end > 0 and is_default(pos_end - 1):
        pos_end -= 1
    args = tuple(values[:pos_end])
    kwargs = {sch[i].name: values[i] for i in range(kw_start, len(values)) if not is_default(i)}
    return args, kwargs


def _tensors(x):
    if hasattr(x, "untyped_storage") and hasattr(x, "stride"):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return []


def footprint(t):
    """Bytes a tensor's sizes and strides address: the product of the sizes of the dimensions
    whose stride is not 0 (a broadcast dimension counts once), times the element size; 0 for
    an empty tensor.  Returns an int."""
    if t.numel() == 0:
        return 0
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            n *= int(size)
    return n * t.element_size()


def _bytes(torch, op, values, out):
    """(bytes read, bytes written) by the model of the module docstring."""
    sch = op._schema.arguments
    inputs = []                                 # (tensor, mutated, out= argument)
    for a, v in zip(sch, values):
        inputs.extend((t, a.is_write, a.is_out) for t in _tensors(v))
    written, viewed = {}, set()
    for o in _tensors(out):
        hit = [k for k, (t, _, _) in enumerate(inputs) if torch._C._is_alias_of(o, t)]
        if not hit:
            written[("out", id(o))] = footprint(o)
        elif any(inputs[k][1] for k in hit):
            k = next(k for k in hit if inputs[k][1])
            written[("in", k)] = footprint(inputs[k][0])
        else:
            viewed.update(hit)
    for k, (t, w, _) in enumerate(inputs):
        if w:
            written[("in", k)] = footprint(t)
    read = sum(footprint(t) for k, (t, _, out_arg) in enumerate(inputs)
               if k not in viewed and not out_arg)
    return read, sum(written.values())


# Ops whose output depends on their inputs' values, which meta tensors do not have: they have
# no FLOPs formula and cannot run on meta, so they are costed as reading their tensor inputs
# (no formula, like the other uncovered ops) instead of being listed as failures.
DATA_DEPENDENT = frozenset({
    "aten.item", "aten._local_scalar_dense", "aten.is_nonzero", "aten.equal", "aten.allclose",
    "aten.nonzero", "aten.nonzero_static", "aten.unique", "aten._unique", "aten._unique2",
    "aten.unique_consecutive", "aten.unique_dim", "aten.masked_select", "aten.tolist"})


def _fits(op, types):
    """Whether the recorded input types can be op's arguments: as many, a tensor where the
    schema takes a Tensor, a scalar where it takes none, a TensorList where it takes a list
    of tensors ("" fits anything: None, or what torch does not record)."""
    args = op._schema.arguments
    if len(args) != len(types):
        return False
    for a, t in zip(args, types):
        typ = str(a.type)
        if t in ("", "ScalarList"):
            continue
        if t == "TensorList":
            ok = "Tensor" in typ and "[]" in typ or "List[Tensor" in typ
        elif t == "Scalar":
            ok = "Tensor" not in typ
        else:                                   # a dtype: a tensor
            ok = "Tensor" in typ and "[]" not in typ and "List" not in typ
        if not ok:
            return False
    return True


def _call(torch, pkt, overload, dims, types, strides, concrete):
    """(op, values, args, kwargs, output) of the op run on meta tensors.  With no overload
    recorded (a torch.profiler trace: Kineto's JSON names ops without one), the overloads
    whose schema fits the recorded input types are tried, "default" first, then in torch's
    order, and the first that runs is taken.  Raises _Failed (the first candidate's reason)."""
    if overload:
        names = [overload]
    else:
        names = ["default"] + [o for o in pkt.overloads() if o != "default"]
    first = None
    for name in names:
        try:
            op = getattr(pkt, name)
        except AttributeError:
            continue
        if not overload and not _fits(op, types):
            continue
        try:
            values = _values(torch, op, dims, types, strides, concrete)
            args, kwargs = _split(op, values)
            try:
                out = op(*args, **kwargs)
            except Exception as exc:
                if str(pkt) in DATA_DEPENDENT:    # reads its inputs, makes a Python value
                    return op, values, args, kwargs, None
                raise _Failed("running it on meta tensors raised %s" % _first_line(exc)) \
                    from None
        except _Failed as exc:
            first = first or exc
            continue
        return op, values, args, kwargs, out
    if first is not None:
        raise first
    if overload or not hasattr(pkt, "default"):
        raise _Failed("torch has no overload %s.%s" % (str(pkt).replace(".", "::", 1),
                                                       overload or "default"))
    _values(torch, pkt.default, dims, types, strides, concrete)     # none fits: why not
    raise _Failed("no overload of %s takes inputs of types %s" % (
        str(pkt).replace(".", "::", 1), types))


def _cost(torch, registry, pkt, overload, sig):
    """(flops or None, bytes read, bytes written) of one signature; raises _Failed."""
    parsed = []
    for key, text in zip(INPUT_ATTRS, sig):
        try:
            v = json.loads(text)
        except (TypeError, ValueError):
            raise _Failed("%s is not JSON: %r" % (key, text)) from None
        if not isinstance(v, list):
            raise _Failed("%s is not a JSON list: %r" % (key, text))
        parsed.append(v)
    dims, types, strides, concrete = parsed
    if not len(dims) == len(types) == len(strides) == len(concrete):
        raise _Failed("input attributes of different lengths (%d dims, %d types, %d strides, "
                      "%d concrete inputs)" % (len(dims), len(types), len(strides),
                                               len(concrete)))
    op, values, args, kwargs, out = _call(torch, pkt, overload, dims, types, strides,
                                          concrete)
    flops = None
    if pkt in registry:
        try:
            flops = float(registry[pkt](*args, **kwargs, out_val=out))
        except Exception as exc:
            raise _Failed("its flop formula raised %s" % _first_line(exc)) from None
    if out is None:                             # DATA_DEPENDENT: no output tensor
        return None, sum(footprint(v) for v in values if isinstance(v, torch.Tensor)), 0
    read, written = _bytes(torch, op, values, out)
    return flops, read, written


# -- the trace's op trees --------------------------------------------------------------------
def _has_below(parent, mask):
    """For each span, whether a span of mask is strictly below it (a bool array)."""
    has = np.zeros(len(parent), dtype=bool)
    cur = np.unique(parent[np.nonzero(mask)[0]])
    cur = cur[cur >= 0]
    while len(cur):
        cur = cur[~has[cur]]
        has[cur] = True
        cur = np.unique(parent[cur])
        cur = cur[cur >= 0]
    return has


def _column(trace, key):
    """{span id: value} of an attribute."""
    ids, vals = trace.attr_column(key)
    vals = vals.tolist() if isinstance(vals, np.ndarray) else vals
    return dict(zip(ids.tolist(), vals))


class _Costs:
    """Everything op_costs, costs and summary need, computed once for a trace."""

    def __init__(self, trace):
        if not isinstance(trace, Trace):
            raise TypeError("xsp.flops takes an xsp.Trace, not %s" % type(trace).__name__)
        torch = _torch()
        registry = _registry()
        n = len(trace)
        kind = trace.kind_codes
        names = np.array(trace.strings, dtype=object)[trace.name_codes] if n else \
            np.zeros(0, dtype=object)
        parent = trace.parent_ids
        is_op = kind == KINDS.index("op")
        is_bw = kind == KINDS.index("backward")
        attrs = {k: _column(trace, k) for k in INPUT_ATTRS + ("overload",)}
        has_in = np.zeros(n, dtype=bool)
        for i in attrs["input_dims"]:
            has_in[i] = True
        has_in &= is_op | is_bw
        if not has_in.any():
            raise ValueError(
                "this trace has no op inputs (span attribute input_dims), so no FLOPs or bytes "
                "can be computed: record it with xsp.profile(levels=\"ML\", record_shapes=True)")
        # per name: the operator it names (None: not an operator of this torch) and whether
        # PyTorch has a formula for it; then per span, through the name codes
        strings, codes = trace.strings, trace.name_codes
        memo, pkts = {}, {}
        known = np.zeros(len(strings), dtype=bool)
        has_formula = np.zeros(len(strings), dtype=bool)
        engine_name = np.array([x.startswith(ENGINE) for x in strings], dtype=bool)
        for code in np.unique(codes[is_op]).tolist():
            pkts[strings[code]] = pkt = _packet(torch, strings[code], memo)
            known[code] = pkt is not None
            has_formula[code] = pkt is not None and pkt in registry
        resolved = is_op & known[codes]
        formula = resolved & has_in & has_formula[codes]
        engine = is_op & engine_name[codes]     # autograd's evaluate_function ops
        costable = is_op & has_in & ~engine     # an op whose inputs are known
        # an op is costed where it has a formula or nothing below has one (a name torch does
        # not know counts as an op only where no span with inputs is below it)
        c0 = costable & (formula | ~_has_below(parent, formula))
        c0 &= resolved | ~_has_below(parent, has_in)
        above = nearest_ancestor(parent, c0, include_self=False)
        costed = c0 & (above < 0)
        nested = has_in & (above >= 0)
        self.trace, self.n, self.names, self.parent = trace, n, names, parent
        rows = np.nonzero(has_in)[0]
        flops = np.full(len(rows), np.nan)
        b_read = np.full(len(rows), np.nan)
        b_written = np.full(len(rows), np.nan)
        status = np.empty(len(rows), dtype=object)
        dtype = np.full(len(rows), None, dtype=object)
        overload = np.empty(len(rows), dtype=object)
        cache, floats = {}, {}
        for r, i in enumerate(rows.tolist()):
            ov = attrs["overload"].get(i, "")
            overload[r] = ov if isinstance(ov, str) else str(ov)
            sig = tuple(attrs[k].get(i) for k in INPUT_ATTRS)
            if sig[1] not in floats:
                floats[sig[1]] = _first_float(torch, sig[1])
            dtype[r] = floats[sig[1]]
            if nested[i]:
                status[r], flops[r], b_read[r], b_written[r] = "nested", 0.0, 0.0, 0.0
                continue
            if not costed[i]:
                status[r], flops[r], b_read[r], b_written[r] = "composite", 0.0, 0.0, 0.0
                continue
            pkt = pkts.get(names[i])
            key = (names[i], overload[r]) + sig
            if key not in cache:
                if pkt is None:
                    cache[key] = "failed: %s is not an operator of this torch (torch.ops has " \
                                 "no such op)" % names[i]
                elif any(not isinstance(s, str) for s in sig):
                    cache[key] = "failed: input attributes missing or not text (%s)" % ", ".join(
                        k for k, s in zip(INPUT_ATTRS, sig) if not isinstance(s, str))
                else:
                    try:
                        cache[key] = _cost(torch, registry, pkt, overload[r], sig)
                    except _Failed as exc:
                        cache[key] = "failed: %s" % exc
            got = cache[key]
            if isinstance(got, str):
                status[r] = got
                continue
            f, rd, wr = got
            status[r] = "formula" if f is not None else "no formula"
            flops[r] = f if f is not None else np.nan
            b_read[r], b_written[r] = rd, wr
        self.signatures = len(cache)
        self.rows = rows
        # op_costs' columns as numpy arrays (summary needs no pandas); the DataFrame when asked
        self.cols = {
            "id": rows.astype(np.int64), "name": names[rows] if len(rows) else
            np.zeros(0, dtype=object), "overload": overload, "flops": flops,
            "bytes_read": b_read, "bytes_written": b_written, "bytes": b_read + b_written,
            "dtype": dtype, "counted": status == "formula", "status": status}
        self._df = None
        # ops without inputs, outside every costed op and with no span with inputs below them
        # (autograd's evaluate_function ops hold backward functions): their cost is unknown
        no_in = (is_op | is_bw) & ~has_in & (above < 0) & ~_has_below(parent, has_in)
        self.no_inputs = _counts(names[no_in])
        # backward: under a backward span or the engine's evaluate_function op
        self.backward = nearest_ancestor(parent, is_bw | engine, include_self=True) >= 0

    @property
    def df(self):
        """op_costs' DataFrame, made on first use."""
        if self._df is None:
            import pandas as pd
            self._df = pd.DataFrame({k: (v if len(v) else []) if k == "name" else v
                                     for k, v in self.cols.items()})
            self._df.attrs["signatures"] = self.signatures
        return self._df

    def costed(self):
        """A bool per row of cols: the costed ops (formula, no formula, failed)."""
        st = self.cols["status"]
        return (st != "nested") & (st != "composite") if len(st) else np.zeros(0, dtype=bool)

    def costed_rows(self):
        """The rows of the costed ops (formula, no formula, failed)."""
        st = self.df["status"]
        return self.df[~st.isin(("nested", "composite"))]


def _first_float(torch, types_s):
    """The torch dtype name (float32, ...) of the first floating (or complex) tensor input."""
    try:
        types = json.loads(types_s) if isinstance(types_s, str) else []
    except ValueError:
        return None
    for t in types if isinstance(types, list) else []:
        dt = _dtype(torch, t) if isinstance(t, str) else None
        if dt is not None and (dt.is_floating_point or dt.is_complex):
            return str(dt).replace("torch.", "")
    return None


def _counts(values):
    out = {}
    for v in values.tolist() if hasattr(values, "tolist") else values:
        out[v] = out.get(v, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


# -- public API --------------------------------------------------------------------------------
def op_costs(trace):
    """One row per op and backward span of trace that has inputs recorded (span attribute
    input_dims), in id order: id, name, overload, flops (float: from PyTorch's formula for a
    costed op, NaN where it has none or failed, 0 for a nested or composite op), bytes_read,
    bytes_written, bytes (the bytes model, NaN for a failed op, 0 for a nested or composite
    one), dtype (torch dtype name of the first floating tensor input, e.g. "float32", the
    compute dtype for a roofline; missing (NaN) without one), counted (True where the FLOPs
    come from a formula), status ("formula", "no formula", "nested", "composite" or "failed: <why>").
    docs/analyses.md, "FLOPs and bytes", says which ops are costed.  The DataFrame's
    attrs["signatures"] is the number of distinct signatures rebuilt.

    Raises TypeError for something other than an xsp.Trace, ValueError for a trace without op
    inputs (record it with xsp.profile(levels="ML", record_shapes=True)), ImportError without
    PyTorch."""
    return _Costs(trace).df


def _group_sums(c, members, keys):
    """Metric columns per group: members is a list of (row index in costed rows, group key)
    pairs, each pair counted once; keys gives the groups in output order."""
    rows = c.costed_rows()
    st = rows["status"].to_numpy()
    fl = rows["flops"].to_numpy()
    by = rows["bytes"].to_numpy()
    bw = c.backward[rows["id"].to_numpy()] if len(rows) else np.zeros(0, dtype=bool)
    acc = {k: {"f": [0.0, 0.0], "fn": [0, 0], "b": [0.0, 0.0], "bn": [0, 0], "u": 0, "x": 0,
               "n": [0, 0]} for k in keys}
    for r, k in set(members):
        a = acc[k]
        ph = 1 if bw[r] else 0
        a["n"][ph] += 1
        if st[r] == "formula":
            a["f"][ph] += fl[r]
            a["fn"][ph] += 1
        elif st[r] == "no formula":
            a["u"] += 1
        else:
            a["x"] += 1
        if not math.isnan(by[r]):
            a["b"][ph] += by[r]
            a["bn"][ph] += 1

    def total(s, cnt, n):
        # a sum where something was counted; 0 where nothing was costed; NaN where every
        # costed op's value is unknown
        return s if cnt else (0.0 if n == 0 else np.nan)

    out = []
    for k in keys:
        a = acc[k]
        ff = [total(a["f"][p], a["fn"][p], a["n"][p]) for p in (0, 1)]
        bb = [total(a["b"][p], a["bn"][p], a["n"][p]) for p in (0, 1)]
        out.append({"flops": total(a["f"][0] + a["f"][1], sum(a["fn"]), sum(a["n"])),
                    "bytes": total(a["b"][0] + a["b"][1], sum(a["bn"]), sum(a["n"])),
                    "forward_flops": ff[0], "backward_flops": ff[1],
                    "forward_bytes": bb[0], "backward_bytes": bb[1],
                    "uncovered": a["u"], "failed": a["x"]})
    return out


def _module_owner(trace, parent, is_mod):
    """For each span, the module or model span it belongs to: itself, its nearest such
    ancestor, or for a backward span (and what runs in it) the owner of the forward op it
    differentiates (attribute fwd_op); -1 for none."""
    step = parent.copy()
    for i, f in _column(trace, "fwd_op").items():
        if isinstance(f, int) and 0 <= f < i:
            step[i] = f
    return nearest_ancestor(step, is_mod, include_self=True)


def costs(trace, by="layer"):
    """Totals of the costed ops (op_costs) per group, a DataFrame, groups in order of first
    appearance.  by="layer": one row per layer name (module spans, and model spans with no
    module below them; analyses.md, "Terms"): layer, type, calls (spans of that name), then
    the metrics; a layer's totals include its sublayers' (as its latency does), its forward ops
    are those that ran inside it and its backward ops the backward ops that differentiate them
    (to_pandas' module column).  by="model": the same per model span name (column model).
    by="step": one row per step span (column step): the ops inside it, and ops on other threads
    that started during it.  by="op": one row per op name (column op): calls (costed calls).

    The metrics: flops, bytes, forward_flops, backward_flops, forward_bytes, backward_bytes
    (backward: ops inside autograd's backward functions or its evaluate_function ops; for a
    step, forward is everything else, the optimizer included), uncovered (costed ops without
    a formula) and failed (costed ops not rebuilt).  A sum is over the ops whose value is
    known; it is NaN where no op of the group has a known value (a layer of ReLUs: no formula)
    and 0 where the group has no costed op.

    Raises ValueError for an unknown `by` and as op_costs does (TypeError, ImportError too)."""
    import pandas as pd
    if by not in BY:
        raise ValueError("by must be one of %s, not %r" % (", ".join(map(repr, BY)), by))
    c = _Costs(trace)
    rows = c.costed_rows()
    ids = rows["id"].to_numpy()
    kind = trace.kind_codes
    if by == "op":
        keys = list(dict.fromkeys(rows["name"].tolist()))
        members = [(r, nm) for r, nm in enumerate(rows["name"].tolist())]
        calls = _counts(rows["name"])
        out = pd.DataFrame([{"op": k, "calls": calls[k], **m}
                            for k, m in zip(keys, _group_sums(c, members, keys))],
                           columns=["op", "calls"] + METRICS)
        return out
    if by == "step":
        is_step = kind == KINDS.index("step")
        steps = np.nonzero(is_step)[0]
        up = nearest_ancestor(c.parent, is_step, include_self=False)[ids] if len(ids) else ids
        if len(steps) and len(ids) and (up < 0).any():
            starts = trace.start_ns[steps]
            ends = trace.end_ns[steps]
            t = trace.start_ns[ids]
            k = np.searchsorted(starts, t, side="right") - 1
            ok = (up < 0) & (k >= 0)
            inside = ok.copy()
            inside[ok] = t[ok] < ends[k[ok]]
            up = np.where(inside, steps[np.clip(k, 0, None)], up)
        keys = steps.tolist()
        members = [(r, int(s)) for r, s in enumerate(up.tolist()) if s >= 0]
        out = pd.DataFrame([{"step": c.names[s], **m}
                            for s, m in zip(keys, _group_sums(c, members, keys))],
                           columns=["step"] + METRICS)
        return out
    is_mod = np.isin(kind, (KINDS.index("module"), KINDS.index("model")))
    owner = _module_owner(trace, c.parent, is_mod)
    mod_up = nearest_ancestor(c.parent, is_mod, include_self=False)
    if by == "model":
        groups = kind == KINDS.index("model")
    else:
        has_mod_below = _has_below(c.parent, kind == KINDS.index("module"))
        groups = (kind == KINDS.index("module")) | ((kind == KINDS.index("model"))
                                                   & ~has_mod_below)
    members = []
    for r, i in enumerate(ids.tolist()):
        m = owner[i]
        while m >= 0:
            if groups[m]:
                members.append((r, c.names[m]))
            m = mod_up[m]
    span_ids = np.nonzero(groups)[0]
    keys = list(dict.fromkeys(c.names[span_ids].tolist()))
    calls = _counts(c.names[span_ids])
    types = _column(trace, "type")
    first_type = {}
    for s in span_ids.tolist():
        first_type.setdefault(c.names[s], types.get(s))
    col = "layer" if by == "layer" else "model"
    cols = [col, "type", "calls"] + METRICS
    return pd.DataFrame([{col: k, "type": first_type[k], "calls": calls[k], **m}
                         for k, m in zip(keys, _group_sums(c, members, keys))], columns=cols)


def summary(trace):
    """The totals of a trace, a dict: flops (sum over the ops with a formula), bytes (sum over
    the costed ops, the failed ones left out), flops_by_dtype ({dtype name: flops}, "unknown"
    for ops without a floating input), ops (costed ops), counted (costed ops with a formula),
    uncovered ({op name: count} of costed ops without a formula), failed ({op name: why}, the
    distinct reasons joined by "; "), no_inputs ({name: count} of op and backward spans outside
    every costed op that have no inputs recorded), signatures (distinct signatures rebuilt).
    Raises as op_costs does."""
    c = _Costs(trace)
    keep = c.costed()
    names, status = c.cols["name"][keep], c.cols["status"][keep]
    formula = status == "formula"
    fl = c.cols["flops"][keep][formula]
    by_dtype = {}
    for dt, f in zip(c.cols["dtype"][keep][formula].tolist(), fl.tolist()):
        key = dt if isinstance(dt, str) else "unknown"
        by_dtype[key] = by_dtype.get(key, 0.0) + f
    failed = {}
    for nm, st in zip(names.tolist(), status.tolist()):
        if st.startswith("failed: "):
            why = st[len("failed: "):]
            failed.setdefault(nm, [])
            if why not in failed[nm]:
                failed[nm].append(why)
    b = c.cols["bytes"][keep]
    # the sum pandas' Series.sum took: NaN counted as 0, over the same float64 values in order
    return {"flops": float(np.where(np.isnan(fl), 0.0, fl).sum()),
            "bytes": float(b[~np.isnan(b)].sum()),
            "flops_by_dtype": by_dtype, "ops": int(keep.sum()), "counted": int(formula.sum()),
            "uncovered": _counts(names[status == "no formula"]),
            "failed": {k: "; ".join(v) for k, v in failed.items()},
            "no_inputs": c.no_inputs, "signatures": c.signatures}


__all__ = ["op_costs", "costs", "summary", "footprint"]
