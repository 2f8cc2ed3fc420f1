"""Reports: xsp.report.text(value) and xsp.report.html(value, path=None) for every value.

    print(xsp.report.text(prof.trace))            # a Trace (a merged job: its ranks first)
    xsp.report.html(m, "report.html")             # a Measurement, to a self-contained file
    print(xsp.report.text(xsp.analysis.compare.compare(before, after)))   # a Comparison

The values: an xsp.Trace (a merged distributed job's too), an xsp.Measurement, a span table
(a DataFrame of Trace.to_pandas()'s columns), an xsp.analysis.compare.Comparison, and any value
with an __xsp_report__(kind, **options) method (xsp.perf's Result).  The rooms: summary (the
text summary of a trace or measurement, and the figures it shares with the HTML), page (the
HTML report), parts (its SVG plots, timeline and tree), ranks (the cross-rank table), tree
(Trace.tree()'s text and a notebook's view of a trace).  Loaded on first use: `import xsp`
stays light, and the text loads neither the HTML nor pandas (`xsp summary`, issue 28): summary,
page and xsp.analysis.compare are imported where they are needed.
"""
import sys

from xsp.core.util import deprecated, printable

__all__ = ["text", "html", "html_fragment", "compare", "compare_text"]


def _is_comparison(value):
    # a Comparison exists only once its module is loaded: importing it here (pandas) is not
    # needed to say that value is none
    compare = sys.modules.get("xsp.analysis.compare")
    return compare is not None and isinstance(value, compare.Comparison)


def _is_job(value):
    meta = getattr(value, "meta", None)
    return isinstance(meta, dict) and "ranks" in meta and hasattr(value, "kind_codes")


def text(value, top=10, *, op_sort="self_ns", include_compile=False, names=("before", "after")):
    """The text report of value (see the module's list) as a str.  top: rows per table;
    op_sort: the op table's order ("self_ns", "total_ns", "calls", ...); include_compile: count
    the iterations in which torch.compile compiled (left out by default); names: the two runs'
    names in a Comparison's heading.  A merged job: the cross-rank table, then each rank's
    report.  Raises TypeError for a value no report is made of, ValueError for bad options."""
    hook = getattr(type(value), "__xsp_report__", None)
    if hook is not None:
        return hook(value, "text", top=top)
    if _is_comparison(value):
        return value._text(top=20 if top == 10 else top, names=names)
    from xsp.report import summary
    if _is_job(value):
        from xsp.analysis import distributed     # here: only a merged job has ranks
        from xsp.report import ranks
        out = [ranks.text(value)]
        for r in distributed.ranks(value)["rank"].tolist():
            out.append("\n== rank %d ==\n" % r)
            out.append(summary.text(distributed.rank_trace(value, r), top=top,
                                    op_sort=op_sort, include_compile=include_compile))
        return "".join(out)
    return summary.text(value, top=top, op_sort=op_sort, include_compile=include_compile)


def html_fragment(value, top=10, *, include_compile=False):
    """The HTML report of value as a fragment (a <div>), as Jupyter shows it."""
    hook = getattr(type(value), "__xsp_report__", None)
    if hook is not None:
        return hook(value, "html", top=top)
    if _is_comparison(value):
        import html as _html_mod
        return printable('<div class="xsp-report"><pre>%s</pre></div>' % _html_mod.escape(
            value._text(top=20 if top == 10 else top)))
    from xsp.report import page
    return page.html_fragment(value, top=top, include_compile=include_compile)


def html(value, path=None, top=10, *, include_compile=False):
    """The HTML report of value as one self-contained document (tables, an SVG timeline of the
    median iteration, the collapsible tree, SVG plots; bounded in size however large
    the trace), written to path atomically when given.  Returns the document (a str).  Raises
    TypeError for a value no report is made of, OSError when path cannot be written."""
    from xsp.report import page
    if getattr(type(value), "__xsp_report__", None) is None and not _is_comparison(value):
        return page.html(value, path=path, top=top, include_compile=include_compile)
    frag = html_fragment(value, top=top, include_compile=include_compile)
    return page.document(frag, path)


def compare(before, after, top=None, *, k=2.0):
    """Deprecated: xsp.analysis.compare.compare(before, after) (then .head(top))."""
    deprecated("xsp.report.compare(before, after)", "xsp.analysis.compare.compare(before, after)")
    from xsp.analysis.compare import compare as _compare
    c = _compare(before, after, k=k)
    return c if top is None else c.head(top)


def compare_text(before, after, top=20, names=("before", "after"), *, k=2.0):
    """Deprecated: xsp.report.text(xsp.analysis.compare.compare(before, after))."""
    deprecated("xsp.report.compare_text(before, after)",
               "xsp.report.text(xsp.analysis.compare.compare(before, after))")
    from xsp.analysis.compare import compare as _compare
    return _compare(before, after, k=k)._text(top=top, names=names)


def __getattr__(name):             # the rooms, on first use: xsp.report.summary, .parts, ...
    import importlib
    if name in ("summary", "page", "parts", "ranks", "tree"):
        mod = importlib.import_module("xsp.report." + name)
        globals()[name] = mod
        return mod
    raise AttributeError("module 'xsp.report' has no attribute %r" % name)
