"""xsp: across-stack profiling for PyTorch.

    import xsp
    with xsp.profile(levels="ML") as prof:
        model(x)
    print(prof.trace.tree(max_depth=4))
    print(xsp.report.text(prof.trace))
    xsp.save(prof.trace, "run.pt.trace.json")       # .xsp, .pt.trace.json[.gz], .json, .otlp.json
    tr = xsp.load("run.pt.trace.json")

Leveled measurement (each level's latency from the shallowest run that sees it):
    m = xsp.measure(lambda: model(x), levels="ML", repeat=10)
    xsp.report.html(m, "report.html")

One rule: values hold data (xsp.Trace, xsp.Measurement), modules hold verbs, one verb per
direction: xsp.load / xsp.save for files (xsp.formats), xsp.report.text / xsp.report.html for
people, xsp.analysis for tables.  Performance tests are xsp.perf and the pytest plugin
(docs/pytest.md); the command line is `xsp`.

The package's layers, bottom to top, each a folder importing only from those below it:
core (the C extensions' helpers), values, formats, producers (profile, measure) and analysis,
report; then perf, the pytest plugin, the CLI and the zoo (docs/design.md, "Python layers").

Levels: M (model: the profiled block, each top-level model call, steps), L (layer: nn.Module
forwards and the aten ops, autograd backward functions and record_function scopes inside them),
G (GPU: CUDA API calls, kernels, memcpy and memset from CUPTI, each under the op that launched
it; needs a CUDA device).

`import xsp` does not import torch or pandas: each loads when a verb needs it (and matplotlib
never: the reports draw SVG).
"""
import sys as _sys

from xsp.core.errors import (GPUError, LevelUnavailableError, ProfilerError, SessionActiveError,
                             SessionStateError, SourceError, TraceFormatError, TraceLostError,
                             XSPWarning)
from xsp.core.levels import parse_levels
from xsp.formats import load, save
from xsp.producers.profiler import profile, schedule, step
from xsp.values.trace import Span, Trace

from xsp._version import __version__

__all__ = [
    "profile", "schedule", "step", "measure", "sweep", "Measurement", "Trace", "Span",
    "load", "save", "merge", "analysis", "report", "formats", "perf", "parse_levels",
    "TraceFormatError", "ProfilerError", "LevelUnavailableError", "GPUError",
    "SessionActiveError", "SessionStateError", "SourceError", "TraceLostError", "XSPWarning",
    "__version__",
]

# Loaded on first use, so that `import xsp` stays light.
_LAZY = {"measure": ("xsp.producers.leveled", "measure"),
         "sweep": ("xsp.producers.leveled", "sweep"),
         "Measurement": ("xsp.values.measurement", "Measurement"),
         "merge": ("xsp.analysis.distributed", "merge"),
         "analysis": ("xsp.analysis", None), "report": ("xsp.report", None),
         "formats": ("xsp.formats", None), "perf": ("xsp.perf", None)}

# The spellings of the release before the one rule (issue 25): each keeps working for one
# release, with a DeprecationWarning naming the new one.  Modules: importing the old name, or
# reading it as an attribute of xsp, gives the module at its new place.
MOVED = {
    "trace": ("xsp.values.trace", "xsp.Trace and xsp.load"),
    "leveled": ("xsp.producers.leveled", "xsp.measure"),
    "profiler": ("xsp.producers.profiler", "xsp.profile"),
    "kineto": ("xsp.formats.kineto", "xsp.load / xsp.save with a .pt.trace.json path"),
    "chrome": ("xsp.formats.chrome", "xsp.save with a .json path"),
    "otlp": ("xsp.formats.otlp", "xsp.formats.otlp (xsp.save with an .otlp.json path)"),
    "compare": ("xsp.analysis.compare", "xsp.analysis.compare"),
    "flops": ("xsp.analysis.flops", "xsp.analysis.flops"),
    "memory": ("xsp.analysis.memory", "xsp.analysis.memory"),
    "compiled": ("xsp.analysis.compiled", "xsp.analysis.compiled"),
    "distributed": ("xsp.analysis.distributed", "xsp.analysis.distributed (xsp.merge)"),
    "peaks": ("xsp.analysis.peaks", "xsp.analysis.peaks"),
    "errors": ("xsp.core.errors", "the exceptions as xsp.<Name>"),
    "levels": ("xsp.core.levels", "xsp.parse_levels"),
}


def _moved(name):
    import importlib
    import warnings
    new, use = MOVED[name]
    warnings.warn("xsp.%s is deprecated: use %s (it keeps working for one release)" % (
        name, use), DeprecationWarning, stacklevel=3)
    return importlib.import_module(new)


def load_kineto(path, *, max_bytes=None):
    """Deprecated: xsp.load(path) (format="kineto" for a path without a .json extension)."""
    from xsp.core.util import deprecated
    deprecated("xsp.load_kineto(path)", "xsp.load(path)")
    return load(path, format="kineto", max_bytes=max_bytes)


def __getattr__(name):
    import importlib
    if name in MOVED:
        return _moved(name)
    if name not in _LAZY:
        raise AttributeError("module 'xsp' has no attribute %r" % name)
    mod_name, attr = _LAZY[name]
    mod = importlib.import_module(mod_name)
    value = mod if attr is None else getattr(mod, attr)
    globals()[name] = value
    return value


class _MovedFinder:
    """`import xsp.chrome` (a module's old place): the module at its new place, with the
    DeprecationWarning of MOVED.  On sys.meta_path; finds only the names of MOVED."""

    @staticmethod
    def find_spec(fullname, path=None, target=None):
        parts = fullname.split(".")
        if len(parts) != 2 or parts[0] != "xsp" or parts[1] not in MOVED:
            return None
        import importlib.util
        return importlib.util.spec_from_loader(fullname, _MovedLoader())


class _MovedLoader:
    def create_module(self, spec):
        mod = _moved(spec.name.split(".")[1])
        return mod

    def exec_module(self, module):
        pass


if not any(isinstance(f, _MovedFinder) for f in _sys.meta_path):
    _sys.meta_path.insert(0, _MovedFinder())
