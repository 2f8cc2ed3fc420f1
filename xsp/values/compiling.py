"""torch.compile's spans in a trace: their names (xsp.producers.dynamo records them, docs/api.md,
"torch.compile") and which spans and steps they are, for the Measurement beside the Trace and
for the analyses (xsp.analysis.compiled reads them into tables)."""
import numpy as np

from xsp.values.trace import KINDS

REGION = "Torch-Compiled Region: "      # torch's RecordFunction around each compiled frame
COMPILE = "torch.compile: compile "     # + frame name: a compilation's span
RECOMPILE = "torch.compile: recompile "
GRAPH_BREAK = "torch.compile: graph break"
MODULES = "modules"                     # the attribute of the spans compiled code runs
META = "compile.modules"                # meta compile.modules.attached / .unmatched / .unknown
_SCOPE = KINDS.index("scope")
_STEP = KINDS.index("step")
_TEXT = 300                             # longest reason kept in an attribute


def compile_mask(trace):
    """A boolean array over trace's spans: True for the compile spans (names "torch.compile:
    compile ..." and "torch.compile: recompile ...", kind scope)."""
    names = np.array([s.startswith((COMPILE, RECOMPILE)) for s in trace.strings], dtype=bool)
    if not len(names):
        return np.zeros(len(trace), dtype=bool)
    return names[trace.name_codes] & (trace.kind_codes == _SCOPE)


def compiling_steps(trace):
    """The ids of the step spans (an int64 array, increasing) inside which a compilation ran."""
    mask = compile_mask(trace)
    if not mask.any():
        return np.zeros(0, dtype=np.int64)
    step = trace.nearest_ancestor(trace.kind_codes == _STEP, include_self=False)
    s = step[mask]
    return np.unique(s[s >= 0]).astype(np.int64)


__all__ = ["REGION", "COMPILE", "RECOMPILE", "GRAPH_BREAK", "MODULES", "META", "compile_mask",
           "compiling_steps"]
