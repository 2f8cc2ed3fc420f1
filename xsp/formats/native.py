"""xsp's own file format, .xsp: msgpack, written and read by the C core (docs/format.md)."""
import os

from xsp.values.trace import Trace, read_xsp, write_xsp


def read(path):
    """The trace in an .xsp file.  Raises xsp.TraceFormatError (with .offset) for a truncated,
    corrupt or foreign file, OSError when it cannot be read."""
    return read_xsp(path)


def write(value, path, *, fsync=True):
    """Writes value (an xsp.Trace) as an .xsp file, atomically and durably: the file and its
    directory are fsynced before this returns, always (fsync=True is accepted for symmetry
    with the exports; fsync=False raises ValueError, since the record of a run is not written
    any other way).  TypeError for a value that is not a Trace (a Measurement: save
    measurement.trace, or a .pt.trace.json with the leveled latencies); OSError when it
    cannot be written."""
    if fsync is not True:
        raise ValueError("an .xsp file is always fsynced (the record of a run); fsync=%r is not "
                         "a choice here: pass fsync=True or leave it out" % (fsync,))
    if not isinstance(value, Trace):
        what = type(value).__name__
        raise TypeError("an .xsp file holds one xsp.Trace, not a %s%s" % (
            what, ": save measurement.trace, or the measurement as .pt.trace.json (Kineto's "
            "JSON, with each span's leveled latency)" if hasattr(value, "leveled_ns") else ""))
    write_xsp(value, os.fspath(path))


__all__ = ["read", "write"]
