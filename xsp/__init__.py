"""xsp: across-stack profiling for PyTorch.

    import xsp
    with xsp.profile(levels="ML") as prof:
        model(x)
    print(prof.trace.tree(max_depth=4))

Leveled measurement (each level's latency from the shallowest run that sees it):
    m = xsp.measure(lambda: model(x), levels="ML", repeat=10)
    print(m.report())
Analyses (DataFrames) are in xsp.analysis, reports in xsp.report (xsp.report.text(trace),
xsp.report.html(trace, path)), the Chrome trace export in xsp.chrome (xsp.chrome.write(trace,
path)); performance tests in xsp.perf and the pytest plugin (docs/pytest.md); the command line
is `xsp`.

Levels: M (model: the profiled block, each top-level model call, steps), L (layer: nn.Module
forwards and the aten ops, autograd backward functions and record_function scopes inside them),
G (GPU: CUDA API calls, kernels, memcpy and memset from CUPTI, each under the op that launched
it; needs a CUDA device).

`import xsp` does not import torch; the torch shim is loaded when a profile needs it.
"""
from .errors import (GPUError, LevelUnavailableError, ProfilerError, SessionActiveError,
                     SessionStateError, SourceError, TraceFormatError, TraceLostError,
                     XSPWarning)
from .levels import parse_levels
from .profiler import profile, schedule, step
from .trace import Span, Trace, load, load_kineto

from ._version import __version__

__all__ = [
    "profile",
    "schedule",
    "step",
    "measure",
    "sweep",
    "Measurement",
    "analysis",
    "chrome",
    "report",
    "perf",
    "merge",
    "distributed",
    "otlp",
    "peaks",
    "flops",
    "memory",
    "compiled",
    "Trace",
    "Span",
    "load",
    "load_kineto",
    "parse_levels",
    "TraceFormatError",
    "ProfilerError",
    "LevelUnavailableError",
    "GPUError",
    "SessionActiveError",
    "SessionStateError",
    "SourceError",
    "TraceLostError",
    "XSPWarning",
    "__version__",
]

# Loaded on first use, so that `import xsp` stays light (pandas and matplotlib load then).
_LAZY = {"measure": ("leveled", "measure"), "sweep": ("leveled", "sweep"),
         "Measurement": ("leveled", "Measurement"), "analysis": ("analysis", None),
         "chrome": ("chrome", None), "report": ("report", None), "perf": ("perf", None),
         "merge": ("distributed", "merge"), "distributed": ("distributed", None),
         "otlp": ("otlp", None), "peaks": ("peaks", None),
         "flops": ("flops", None), "memory": ("memory", None),
         "compiled": ("compiled", None)}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError("module 'xsp' has no attribute %r" % name)
    import importlib
    mod_name, attr = _LAZY[name]
    mod = importlib.import_module("." + mod_name, __name__)
    value = mod if attr is None else getattr(mod, attr)
    globals()[name] = value
    return value
