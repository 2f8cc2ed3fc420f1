"""Numbers for people: the one place where xsp turns a number into text.

Every report (text, HTML, the CLI, the zoo's, the pytest plugin's summary and xsp.perf's
messages) formats a number with one of these, so that one value prints one way everywhere:

    kind                 function        examples
    duration             fmt_ns          812 ns, 12.345 us, 1.234 ms, 2.000 s
    signed duration      fmt_signed      +1.234 ms, -193.900 us (-1.9%)
    bytes                fmt_bytes       812 B, 12.3 KiB, 117.7 MiB, 2.0 GiB
    SI quantity, rate    fmt_si          30.7 k, 1.23 GFLOP/s, 512 B/s
    share, percentage    fmt_share       12.3%; precise=True: 0.0123%, 45.6%
    count                fmt_count       12; exact=True: 1,048,576 or 2.50 (a mean)

A missing value (None, NaN, what is not a number) is "-" in each.  Light: imports nothing but
the standard library, so that `import xsp` and the CLI stay fast.
"""
import math

_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_BINARY = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def number(v):
    """v as a float, or None for None, NaN and what is not a number."""
    if v is None:
        return None
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def fmt_ns(ns):
    """A duration for people: 812 ns, 12.345 us, 1.234 ms, 2.000 s; '-' when missing."""
    ns = number(ns)
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
    when given and not NaN: "+1.234 ms (+3.4%)"; '-' when missing."""
    ns = number(ns)
    if ns is None:
        return "-"
    text = ("+" if ns >= 0 else "-") + fmt_ns(abs(ns))
    share = number(share)
    if share is not None:
        text += " (%+.1f%%)" % (100.0 * share)
    return text


def fmt_bytes(n):
    """A byte count for people, in binary units with one decimal: 812 B, 12.3 KiB, 117.7 MiB,
    2.0 GiB; '-' when missing."""
    n = number(n)
    if n is None:
        return "-"
    a = abs(n)
    for unit, size in _BINARY:
        if a >= size:
            return "%.1f %s" % (n / size, unit)
    return "%d B" % round(n)


def fmt_si(v, unit=""):
    """A quantity or rate with an SI prefix and three significant digits: 30.7 k,
    1.23 GFLOP/s (unit "FLOP/s"), 0.02; '-' when missing."""
    v = number(v)
    if v is None:
        return "-"
    for div, prefix in _SI:
        if abs(v) >= div:
            return "%.3g %s%s" % (v / div, prefix, unit)
    return ("%.3g %s" % (v, unit)).strip()


def fmt_share(x, precise=False):
    """A fraction as a percentage: "12.3%" (one decimal); precise: three significant digits,
    for fractions that can be tiny ("0.0123%", "45.6%"); '-' when missing."""
    x = number(x)
    if x is None:
        return "-"
    return ("%.3g%%" if precise else "%.1f%%") % (100.0 * x)


def fmt_count(n, exact=False):
    """A count: "12"; exact: with thousands separators and two decimals where it is not whole
    (a mean over iterations): "1,048,576", "2.50"; '-' when missing."""
    n = number(n)
    if n is None:
        return "-"
    if not exact:
        return "%d" % n
    return "{:,.0f}".format(n) if n.is_integer() else "{:,.2f}".format(n)


__all__ = ["number", "fmt_ns", "fmt_signed", "fmt_bytes", "fmt_si", "fmt_share", "fmt_count"]
