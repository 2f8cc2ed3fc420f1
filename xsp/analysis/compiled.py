"""torch.compile's compilations in a finished trace, as tables (docs/api.md, "torch.compile"):
compiles(trace) and graph_breaks(trace) (DataFrames), summary(trace); compile_mask and
compiling_steps are xsp.values.compiling's (xsp.measure leaves the iterations that compiled out
of its statistics, and xsp.analysis's tables leave them out of a trace's).  Recording them is
xsp.producers.dynamo."""
import numbers

import numpy as np

from xsp.values.compiling import (COMPILE, GRAPH_BREAK, MODULES, RECOMPILE, REGION, _SCOPE,
                                  _STEP, compile_mask, compiling_steps)


# -- reading a trace ----------------------------------------------------------------------------
def compiles(trace):
    """One row per compilation in trace (a DataFrame, in start order): id, name, type
    ("compile" or "recompile"), start_ns, duration_ns, step (the enclosing step's name, or
    None), compile_id, frame, outcome, reason (the recompile's, "" for a first compile),
    graphs, graph_breaks, graph_break_reasons ("; "-joined, from the graph break spans inside
    it: "reason (file:line)").  Attributes a trace lacks (written by another xsp) are None."""
    import pandas as pd
    ids = np.nonzero(compile_mask(trace))[0]
    step = trace.nearest_ancestor(trace.kind_codes == _STEP, include_self=False)
    gb = np.nonzero((trace.kind_codes == _SCOPE) & np.array(
        [s == GRAPH_BREAK for s in trace.strings], dtype=bool)[trace.name_codes])[0] \
        if len(trace) else np.zeros(0, dtype=np.int64)
    under = trace.nearest_ancestor(compile_mask(trace), include_self=False)
    reasons = {}
    for g in gb.tolist():
        a = trace.attrs_of(g)
        where = a.get("source")
        reasons.setdefault(int(under[g]), []).append(
            "%s (%s)" % (a.get("reason", "?"), where) if where else a.get("reason", "?"))
    rows = []
    dur = trace.duration_ns                 # once: the property makes a new array per call
    for i in ids.tolist():
        a = trace.attrs_of(i)
        rows.append({"id": i, "name": trace.strings[trace.name_codes[i]],
                     "type": a.get("type"), "start_ns": int(trace.start_ns[i]),
                     "duration_ns": int(dur[i]),
                     "step": trace.strings[trace.name_codes[step[i]]] if step[i] >= 0 else None,
                     "compile_id": a.get("compile_id"), "frame": a.get("frame"),
                     "outcome": a.get("outcome"), "reason": a.get("reason", ""),
                     "graphs": a.get("graphs"), "graph_breaks": a.get("graph_breaks"),
                     "graph_break_reasons": "; ".join(map(str, reasons.get(i, [])))})
    cols = ["id", "name", "type", "start_ns", "duration_ns", "step", "compile_id", "frame",
            "outcome", "reason", "graphs", "graph_breaks", "graph_break_reasons"]
    return pd.DataFrame(rows, columns=cols)


def graph_breaks(trace):
    """One row per graph break in trace (a DataFrame, in trace order): id (the graph break
    span), compile_id, frame and step (of the compilation that made it, None outside one),
    reason (Dynamo's, see describe_break) and source ("file:line" of the user's line, None
    when torch kept no stack)."""
    import pandas as pd
    cols = ["id", "compile_id", "frame", "step", "reason", "source"]
    if not len(trace):
        return pd.DataFrame(columns=cols)
    gb = np.nonzero((trace.kind_codes == _SCOPE) & np.array(
        [s == GRAPH_BREAK for s in trace.strings], dtype=bool)[trace.name_codes])[0]
    under = trace.nearest_ancestor(compile_mask(trace), include_self=False)
    step = trace.nearest_ancestor(trace.kind_codes == _STEP, include_self=False)
    rows = []
    for g in gb.tolist():
        a = trace.attrs_of(g)
        c = trace.attrs_of(int(under[g])) if under[g] >= 0 else {}
        rows.append({"id": g, "compile_id": a.get("compile_id"), "frame": c.get("frame"),
                     "step": trace.strings[trace.name_codes[step[g]]] if step[g] >= 0
                     else None, "reason": a.get("reason"), "source": a.get("source")})
    return pd.DataFrame(rows, columns=cols)


def summary(trace):
    """What torch.compile did in trace, or None when it compiled nothing there: {compiles,
    recompiles, graph_breaks, compile_ns (the compile spans' total time), steps (names of the
    steps that compiled)}."""
    if not len(trace) or not compile_mask(trace).any():      # the usual case: no table made
        return None
    df = compiles(trace)
    if not len(df):
        return None
    return {"compiles": int(len(df)), "recompiles": int((df["type"] == "recompile").sum()),
            "graph_breaks": int(sum(int(v) for v in df["graph_breaks"]     # ints only: a
                                    if isinstance(v, numbers.Integral))),      # hand-made file
            "compile_ns": int(df["duration_ns"].sum()),
            "steps": [s for s in dict.fromkeys(df["step"]) if s is not None]}


__all__ = ["compile_mask", "compiling_steps", "compiles", "graph_breaks", "summary",
           "REGION", "COMPILE", "RECOMPILE", "GRAPH_BREAK", "MODULES"]
