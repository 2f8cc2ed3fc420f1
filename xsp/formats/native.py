"""xsp's own file format, .xsp: msgpack, written and read by the C core (docs/format.md)."""
import os

from xsp.values.trace import Trace, read_xsp, write_xsp


def read(path):
    """The trace in an .xsp file.  Raises xsp.TraceFormatError (with .offset) for a truncated,
    corrupt or foreign file, OSError when it cannot be read."""
    return read_xsp(path)


def write(value, path):
    """Writes value (an xsp.Trace) as an .xsp file, atomically.  TypeError for a value that
    is not a Trace (a Measurement: save measurement.trace, or a .pt.trace.json with the
    leveled latencies); OSError when it cannot be written."""
    if not isinstance(value, Trace):
        what = type(value).__name__
        raise TypeError("an .xsp file holds one xsp.Trace, not a %s%s" % (
            what, ": save measurement.trace, or the measurement as .pt.trace.json (Kineto's "
            "JSON, with each span's leveled latency)" if hasattr(value, "leveled_ns") else ""))
    write_xsp(value, os.fspath(path))


__all__ = ["read", "write"]
