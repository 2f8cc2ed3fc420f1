"""Small helpers shared by the Python modules: duration formatting and atomic file writes."""
import math
import os
import tempfile


def fmt_ns(ns):
    """A duration for people: 812 ns, 12.345 us, 1.234 ms, 2.000 s; '-' for NaN or None."""
    if ns is None:
        return "-"
    try:
        ns = float(ns)
    except (TypeError, ValueError):
        return "-"
    if math.isnan(ns):
        return "-"
    a = abs(ns)
    if a >= 1e9:
        return "%.3f s" % (ns / 1e9)
    if a >= 1e6:
        return "%.3f ms" % (ns / 1e6)
    if a >= 1e3:
        return "%.3f us" % (ns / 1e3)
    return "%d ns" % round(ns)


def atomic_write(path, write):
    """Calls write(f) on a new text file (UTF-8) beside path, then renames it over path, so a
    reader never sees half a file and a failure leaves what was there.  Raises what write or
    the file system raises (OSError), after removing the temporary file."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".%s." % os.path.basename(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
