"""Trace.tree(): folding repeated siblings, min_share, max_lines, the counters line, very deep
nesting and names that would break a line.  Exact text on hand-built traces."""
import pytest

import xsp
import torch


def S(name, kind, start, end, parent=None, **attrs):
    return {"name": name, "kind": kind, "start_ns": start, "end_ns": end, "parent": parent,
            "attrs": attrs}


def loop_trace(counters=None):
    """A layer that runs aten::add twelve times in a row, then a mul and one more add; then
    the same activation layer called twice in a row."""
    spans = [S("r", "region", 0, 1000), S("fc", "module", 0, 500, 0, type="Linear")]
    spans += [S("aten::add", "op", 10 + 20 * k, 20 + 20 * k, 1) for k in range(12)]   # 2..13
    spans += [S("aten::mul", "op", 300, 310, 1),                                        # 14
              S("aten::add", "op", 320, 330, 1),                                        # 15
              S("act", "module", 500, 900, 0, type="ReLU"),                             # 16
              S("aten::relu", "op", 510, 890, 16),                                      # 17
              S("act", "module", 900, 950, 0, type="ReLU"),                             # 18
              S("aten::relu", "op", 905, 945, 18)]                                      # 19
    return xsp.Trace.from_spans(spans, meta={"levels": "ML"}, counters=counters)


FOLDED = [
    "r [region] 1.000 us (self 50 ns)",
    "├─ fc [module Linear] 500 ns (self 360 ns)",
    "│  ├─ x12 aten::add [op] 120 ns (mean 10 ns)",
    "│  ├─ aten::mul [op] 10 ns",
    "│  └─ aten::add [op] 10 ns",
    "└─ x2 act [module ReLU] 450 ns (mean 225 ns; first shown below)",
    "   └─ aten::relu [op] 380 ns",
]


def test_fold_is_the_default_and_counts_consecutive_siblings():
    tr = loop_trace()
    assert tr.tree().splitlines() == FOLDED
    assert tr.tree(fold=True) == tr.tree()


def test_fold_false_shows_every_span():
    lines = loop_trace().tree(fold=False).splitlines()
    assert len(lines) == 20
    assert lines[2:4] == ["│  ├─ aten::add [op] 10 ns"] * 2
    assert lines[-4:] == ["├─ act [module ReLU] 400 ns (self 20 ns)",
                          "│  └─ aten::relu [op] 380 ns",
                          "└─ act [module ReLU] 50 ns (self 10 ns)",
                          "   └─ aten::relu [op] 40 ns"]


def test_fold_with_max_depth_and_max_children():
    tr = loop_trace()
    assert tr.tree(max_depth=1).splitlines() == [
        "r [region] 1.000 us (self 50 ns)",
        "├─ fc [module Linear] 500 ns (self 360 ns)",
        "└─ x2 act [module ReLU] 450 ns (mean 225 ns)",      # no subtree below: no note
    ]
    # max_children counts lines: the folded run is one; "more" counts the spans left out
    assert tr.tree(max_children=1).splitlines()[1:4] == [
        "├─ fc [module Linear] 500 ns (self 360 ns)",
        "│  ├─ x12 aten::add [op] 120 ns (mean 10 ns)",
        "│  └─ … 2 more (20 ns)",
    ]


def test_fold_of_roots_and_flags():
    spans = [S("Net", "module", 0, 10), S("aten::mm", "op", 1, 9, 0),
             S("Net", "module", 10, 30), S("Net", "module", 30, 60)]
    spans[3]["flags"] = 1
    tr = xsp.Trace.from_spans(spans)
    assert tr.tree().splitlines() == [
        "x3 Net [module] 60 ns (mean 20 ns; first shown below) {open at stop}",
        "└─ aten::mm [op] 8 ns",
    ]


def test_min_share_hides_spans_shorter_than_a_share_of_the_trace():
    tr = loop_trace()
    # 10% of the whole trace (1000 ns): the ops and the second act call go; what is left of
    # the act run is a single call, shown as such
    assert tr.tree(min_share=0.1).splitlines() == [
        "r [region] 1.000 us (self 50 ns)",
        "├─ fc [module Linear] 500 ns (self 360 ns)",
        "└─ act [module ReLU] 400 ns (self 20 ns)",
        "   └─ aten::relu [op] 380 ns",
    ]
    assert tr.tree(min_share=0.5).splitlines() == [
        "r [region] 1.000 us (self 50 ns)", "└─ fc [module Linear] 500 ns (self 360 ns)"]
    assert tr.tree(min_share=0) == tr.tree()
    assert tr.tree(min_share=1).splitlines() == ["r [region] 1.000 us (self 50 ns)"]


def test_min_share_of_the_root_printed():
    tr = loop_trace()
    # of act's 400 ns: 95% is 380 ns, so aten::relu stays; 96% is 384 ns, so it goes
    assert tr.tree(root=16, min_share=0.95).splitlines() == [
        "act [module ReLU] 400 ns (self 20 ns)", "└─ aten::relu [op] 380 ns"]
    assert tr.tree(root=16, min_share=0.96).splitlines() == [
        "act [module ReLU] 400 ns (self 20 ns)"]
    # and min_duration_ns still applies with it
    assert tr.tree(root=1, min_share=0.01, min_duration_ns=11).splitlines() == [
        "fc [module Linear] 500 ns (self 360 ns)"]


def test_max_lines_ends_with_how_many_were_left_out():
    tr = loop_trace(counters={"lost.cap": 2})
    lines = tr.tree(fold=False, max_lines=3).splitlines()
    assert lines == ["r [region] 1.000 us (self 50 ns)",
                     "├─ fc [module Linear] 500 ns (self 360 ns)",
                     "│  ├─ aten::add [op] 10 ns",
                     "… 17 more lines (max_lines=3)",
                     "lost spans: 2 (lost.cap 2)"]
    assert tr.tree(max_lines=6).splitlines()[-2:] == ["… 1 more line (max_lines=6)",
                                                      "lost spans: 2 (lost.cap 2)"]
    assert tr.tree(max_lines=7) == tr.tree()             # nothing left out: no such line
    assert tr.tree(max_lines=0).splitlines() == ["… 7 more lines (max_lines=0)",
                                                 "lost spans: 2 (lost.cap 2)"]


def test_counters_line_is_readable():
    """Regression guard (the last line printed the counters dict as it is)."""
    tr = loop_trace(counters={"lost.cap": 2, "lost.depth": 1, "unmatched_end": 4,
                              "gpu.records": 9, "forced_end": 3, "open_at_stop": 1,
                              "names.cut": 1})
    assert tr.tree().splitlines()[-1] == (
        "lost spans: 3 (lost.cap 2, lost.depth 1); other counters: names.cut 1, unmatched_end 4")
    assert loop_trace(counters={"lost.depth": 5, "lost.cap": 0}).tree().splitlines()[-1] == \
        "lost spans: 5 (lost.depth 5)"
    assert loop_trace(counters={"unmatched_end": 1}).tree().splitlines()[-1] == \
        "counters: unmatched_end 1"
    # a count of records and what the lines' flags show are not losses: no line
    assert loop_trace(counters={"gpu.records": 5, "forced_end": 2, "lost.cap": 0}).tree() \
        == "\n".join(FOLDED)


def test_lines_past_32_levels_keep_their_width_and_say_their_depth():
    n = 40
    tr = xsp.Trace.from_spans([S("s%d" % i, "scope", i, 2 * n - i, i - 1 if i else None)
                               for i in range(n)])
    lines = tr.tree().splitlines()
    assert len(lines) == n
    assert lines[32] == "   " * 31 + "└─ s32 [scope] 16 ns (self 2 ns)"
    assert lines[33] == "   " * 31 + "└─ s33 [scope] 14 ns (self 2 ns) [depth 33]"
    assert lines[39] == "   " * 31 + "└─ s39 [scope] 2 ns [depth 39]"
    # the depth is that of the tree printed: from a root deep inside, no note until 32 more
    assert tr.tree(root=20).splitlines()[-1] == "   " * 18 + "└─ s39 [scope] 2 ns"


def test_names_that_would_break_a_line_are_escaped():
    tr = xsp.Trace.from_spans([S("r", "region", 0, 10), S("a\nb\tc\x00", "op", 1, 2, 0),
                               S("x\u2028y", "op", 3, 4, 0, type="T\rU"),
                               S("z" * 500, "op", 5, 6, 0)])
    lines = tr.tree().splitlines()
    assert len(lines) == 4
    assert lines[1] == "├─ a\\nb\\tc\\x00 [op] 1 ns"
    assert lines[2] == "├─ x\\u2028y [op T\\rU] 1 ns"
    assert lines[3] == "└─ " + "z" * 399 + "… [op] 1 ns"


def test_bad_arguments():
    tr = loop_trace()
    with pytest.raises(ValueError, match=r"min_share must be a fraction from 0 to 1, not 1\.5"):
        tr.tree(min_share=1.5)
    with pytest.raises(ValueError, match="min_share"):
        tr.tree(min_share=-0.1)
    with pytest.raises(TypeError, match="min_share must be a number from 0 to 1, not str"):
        tr.tree(min_share="0.1")
    with pytest.raises(ValueError, match="max_lines must be 0 or more, not -1"):
        tr.tree(max_lines=-1)
    with pytest.raises(TypeError, match="max_lines must be an int, not float"):
        tr.tree(max_lines=2.0)


def test_repr_html_folds_as_tree_does():
    h = loop_trace()._repr_html_()
    pre = h[h.index("<pre>") + 5:h.index("</pre>")].split("\n")
    assert pre == FOLDED


def test_tree_of_a_deep_trace():
    """Guards against Trace.tree() recursing once per level (RecursionError at ~1000)."""
    depth = 1000
    with xsp.profile(levels="L") as prof:
        scopes = [torch.profiler.record_function("s%d" % i) for i in range(depth)]
        for s in scopes:
            s.__enter__()
        for s in reversed(scopes):
            s.__exit__(None, None, None)
    lines = prof.trace.tree().splitlines()
    scope_lines = [ln for ln in lines if "[scope]" in ln]
    assert len(scope_lines) == depth
    assert scope_lines[-1].lstrip(" │└├─").startswith("s%d [scope]" % (depth - 1))
