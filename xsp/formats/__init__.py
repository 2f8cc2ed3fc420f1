"""File formats: one module per format, each with read(path) -> xsp.Trace and write(value, path).

    xsp.save(trace, "run.xsp")               # xsp's own (msgpack; docs/format.md)
    xsp.save(trace, "run.pt.trace.json.gz")  # Kineto's JSON, torch.profiler's (HTA, TensorBoard)
    xsp.save(trace, "run.json")              # Chrome trace events (Perfetto, chrome://tracing)
    xsp.save(trace, "run.otlp.json")         # OpenTelemetry's OTLP/JSON (Jaeger)
    tr = xsp.load("run.pt.trace.json")       # any of the readable ones, by extension or content

The format comes from the path's extension (FORMATS, first match wins), or from format= (one
of the names of FORMATS).  xsp.load reads a path with no known extension by its first bytes:
JSON or gzip is read as trace-event JSON (Kineto's reader), anything else as an .xsp file.
A value that is not a Trace or a Measurement is saved by its own __xsp_save__(path, format)
method (xsp.perf's Result: its baseline JSON).

This layer sits on the values (xsp.values) and the core only: a format is a value's bytes.
"""
import os

from xsp.core.errors import TraceFormatError

# (extension, format), first match wins: longer extensions first
EXTENSIONS = ((".xsp", "xsp"), (".otlp.json", "otlp"), (".otlp.json.gz", "otlp"),
              (".pt.trace.json", "kineto"), (".pt.trace.json.gz", "kineto"),
              (".json.gz", "kineto"), (".json", "chrome"))
FORMATS = ("xsp", "kineto", "chrome", "otlp")
_MODULES = {"xsp": "native", "kineto": "kineto", "chrome": "chrome", "otlp": "otlp"}


def _module(fmt):
    import importlib
    return importlib.import_module("xsp.formats." + _MODULES[fmt])


def format_of(path):
    """The format a path's extension names ("xsp", "kineto", "chrome", "otlp"), or None.
    Case-insensitive; cannot fail for a str, bytes or os.PathLike."""
    name = os.fsdecode(os.fspath(path)).lower()
    for ext, fmt in EXTENSIONS:
        if name.endswith(ext):
            return fmt
    return None


def _check_format(fmt):
    if fmt not in FORMATS:
        raise ValueError("format must be one of %s, not %r" % (", ".join(FORMATS), fmt))
    return fmt


def _sniff(path):
    """"kineto" for a file that starts with gzip's magic or (after blanks) '{', else "xsp";
    an unreadable file is "xsp" (whose reader then raises the OSError)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return "xsp"
    return "kineto" if head[:2] == b"\x1f\x8b" or head.lstrip()[:1] == b"{" else "xsp"


def load(path, format=None, **options):
    """The trace in the file at path, as an xsp.Trace.  format: one of FORMATS, or None (from
    the extension; a path with none known by its first bytes).  options go to the format's
    reader (kineto: max_bytes).  Raises xsp.TraceFormatError (.path, .offset where known) for
    a file that is not a valid trace of that format, OSError when it cannot be read,
    ValueError for an unknown format."""
    fmt = _check_format(format) if format is not None else (format_of(path) or _sniff(path))
    if fmt == "chrome":     # trace-event JSON: xsp's Chrome export and Kineto's are one syntax
        fmt = "kineto"
    if fmt == "otlp":
        raise TraceFormatError("%s: xsp writes OTLP/JSON but does not read it; save the trace "
                               "as .xsp or .pt.trace.json to read it back" % os.fsdecode(
                                   os.fspath(path)))
    return _module(fmt).read(path, **options)


def save(value, path, format=None, **options):
    """Writes value (an xsp.Trace, an xsp.Measurement, or a value with __xsp_save__) to path,
    atomically, in format (one of FORMATS; None: from the extension).  A Measurement is written
    as its deepest run's trace with each span's leveled latency (Kineto, OTLP, Chrome: the
    spans of the deepest run; .xsp: refused, since the file holds one trace: save
    measurement.trace).  options go to the format's writer (otlp: service, trace_per, ...).
    Returns path.  Raises ValueError for a path whose extension names no format (pass
    format=), TypeError for a value that cannot be saved, OSError when it cannot be written
    (what was at path stays)."""
    hook = getattr(type(value), "__xsp_save__", None)
    if hook is not None:
        return hook(value, path, format, **options)
    fmt = _check_format(format) if format is not None else format_of(path)
    if fmt is None:
        raise ValueError("xsp.save: %r has no extension xsp knows (.xsp, .pt.trace.json[.gz], "
                         ".json, .otlp.json); pass format= (one of %s)" % (
                             os.fsdecode(os.fspath(path)), ", ".join(FORMATS)))
    _module(fmt).write(value, path, **options)
    return path


def __getattr__(name):             # the format modules, on first use: xsp.formats.kineto, ...
    if name in _MODULES.values():
        mod = _module({v: k for k, v in _MODULES.items()}[name])
        globals()[name] = mod
        return mod
    raise AttributeError("module 'xsp.formats' has no attribute %r" % name)


__all__ = ["load", "save", "format_of", "FORMATS", "EXTENSIONS", "native", "kineto", "chrome",
           "otlp"]
