"""Small helpers shared by the Python modules: duration formatting and atomic file writes."""
import itertools
import math
import os


def _number(v):
    """v as a float, or None for None, NaN and what is not a number."""
    if v is None:
        return None
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def fmt_ns(ns):
    """A duration for people: 812 ns, 12.345 us, 1.234 ms, 2.000 s; '-' for NaN or None."""
    ns = _number(ns)
    if ns is None:
        return "-"
    a = abs(ns)
    if a >= 1e9:
        return "%.3f s" % (ns / 1e9)
    if a >= 1e6:
        return "%.3f ms" % (ns / 1e6)
    if a >= 1e3:
        return "%.3f us" % (ns / 1e3)
    return "%d ns" % round(ns)


def fmt_signed(ns, share=None):
    """A signed duration for people, "+1.234 ms" or "-193.900 us", followed by a signed share
    when given and not NaN: "+1.234 ms (+3.4%)"; '-' for NaN or None."""
    ns = _number(ns)
    if ns is None:
        return "-"
    text = ("+" if ns >= 0 else "-") + fmt_ns(abs(ns))
    if share is not None and not math.isnan(share):
        text += " (%+.1f%%)" % (100.0 * share)
    return text


def printable(text):
    """text with what cannot be written as UTF-8 (lone surrogates: names that were not valid
    UTF-8, kept by the core byte for byte) replaced by '?'."""
    return text.encode("utf-8", "replace").decode("utf-8")


_tmp_serial = itertools.count()


def atomic_write(path, write, binary=False):
    """Calls write(f) on a new file beside path (text, UTF-8 with lone surrogates written as
    '?'; bytes with binary=True), then renames it over path, so a reader never sees half a
    file and a failure leaves what was there.  The file gets the usual permissions (0666 less the umask).  Raises what write
    or the file system raises (OSError), after removing the temporary file."""
    path = os.fspath(path)
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)), ".%s.%d.%d.tmp" % (
        os.path.basename(path), os.getpid(), next(_tmp_serial)))
    try:
        with (open(tmp, "xb") if binary else
              open(tmp, "x", encoding="utf-8", errors="replace")) as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
