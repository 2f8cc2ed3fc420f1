"""xsp: across-stack profiling for PyTorch.

    import xsp
    with xsp.profile(levels="ML") as prof:
        model(x)
    print(prof.trace.tree(max_depth=4))

Levels: M (model: the profiled block, each top-level model call, steps), L (layer: nn.Module
forwards and the aten ops, autograd backward functions and record_function scopes inside them),
G (GPU: CUDA API calls, kernels, memcpy and memset from CUPTI, each under the op that launched
it; needs a CUDA device).

`import xsp` does not import torch; the torch shim is loaded when a profile needs it.
"""
from ._core import TraceFormatError
from .errors import LevelUnavailableError, ProfilerError, XSPWarning
from .levels import parse_levels
from .profiler import profile
from .trace import Span, Trace, load

__version__ = "0.1.0"

__all__ = [
    "profile",
    "Trace",
    "Span",
    "load",
    "parse_levels",
    "TraceFormatError",
    "ProfilerError",
    "LevelUnavailableError",
    "XSPWarning",
    "__version__",
]
