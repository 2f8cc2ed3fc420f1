"""The HTML pieces in a real browser: a page with the timeline, the tree and a table of a small
training loop (test_html_parts.training_trace) is rendered by headless chromium through
scripts/browser_check.py, which checks the parsed DOM, the console and that the screenshot is
not blank.  The checker itself is checked too: a page with console errors and a blank page
must fail, and its own PNG decoder must agree with matplotlib's.

Needs chromium (`XSP_TEST_TOOLS=1 scripts/setup.sh` installs it; `make test` does); skipped,
saying so, without it."""
import re

import numpy as np
import pytest

from helpers import browser_checker
from test_html_parts import training_trace
from xsp.report import parts as H
from xsp.analysis import tables as A

# the `slow` tier (pytest -m "not slow" leaves it out): headless chromium
pytestmark = pytest.mark.slow

B, needs_chromium = browser_checker()


def report_page():
    tr = training_trace()
    step = tr.spans(kind="step")[0]
    return H.page(
        "xsp report parts: a training loop",
        "<h2>Timeline of step#0</h2>", H.timeline_svg(tr, step.start_ns, step.end_ns),
        "<h2>Span tree</h2>", H.tree_html(tr),
        "<h2>Top layers</h2>", H.table_html(A.layer_ranking(tr)))


@needs_chromium
def test_report_parts_render_in_chromium(tmp_path):
    page = report_page()
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    res = B.check(str(path), screenshot=str(tmp_path / "report.png"),
                  expect=["<svg", "<details open", "x40 aten::add_", "&lt;script&gt;&amp;"])
    assert res.ok, res.report()
    assert res.console == []
    # the browser parsed what was written: every span rectangle, every tree line
    dom = res.dom
    assert len(re.findall(r'<rect class="xsp-s ', dom)) == \
        len(re.findall(r'<rect class="xsp-s ', page))
    assert dom.count("<details") == page.count("<details")
    assert "<script>" not in dom                 # the span named <script>&" stayed text
    # ink from the top (the title) down through the timeline, tree and table
    first, last = res.ink_rows
    assert res.ink_fraction > 0.01 and first < 60 and last > 600, res.report()
    assert res.outside == []


@needs_chromium
def test_checker_reports_console_errors_and_blank_pages(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><head></head><body><p>x</p><script>"
                   "console.log('fine'); console.error('xsp-boom'); nosuchfunction();"
                   "</script></body></html>")
    res = B.check(str(bad), window_size=(400, 300))
    assert not res.ok
    levels = [lv for lv, _ in res.console]
    assert levels == ["log", "error", "exception"], res.console
    assert res.console[1][1].startswith("xsp-boom (file://%s" % bad)
    assert any("blank" in e for e in res.errors)
    assert "<script>(function()" not in res.dom      # the checker's prelude is taken out
    missing = tmp_path / "missing.html"
    missing.write_text("<html><body><img src='nothere.png'><p style=\"background:url("
                       "'data:image/png;base64,AA')\">text</p><div style='background:"
                       "url(x.png)'></div></body></html>")
    res = B.check(str(missing), window_size=(400, 300), min_ink=0.0, expect=["<p style"])
    assert res.outside == ["nothere.png", "x.png"]
    assert res.errors == ["the page is not self-contained: it loads nothere.png, x.png"]


def test_png_decoder_agrees_with_matplotlib(tmp_path):
    """The fallback decoder (no matplotlib) on a PNG with every filter type PIL picks."""
    mpimg = pytest.importorskip("matplotlib.image")
    rng = np.random.default_rng(0)
    img = np.full((40, 60, 3), 255, dtype=np.uint8)
    img[5:20, 10:50] = rng.integers(0, 255, (15, 40, 3), dtype=np.uint8)
    img[25:35] = np.linspace(0, 255, 60, dtype=np.uint8)[None, :, None]
    path = str(tmp_path / "x.png")
    mpimg.imsave(path, img)
    w, h, chans, rows = B.decode_png(path)
    got = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(h, w, chans)
    want = (mpimg.imread(path) * 255).round().astype(np.uint8)
    assert (w, h) == (60, 40) and np.array_equal(got, want)
    ink = B.ink(path)
    assert ink[0] == int((img < B.INK_LEVEL).any(axis=-1).sum()) and ink[2:] == (5, 34)


@needs_chromium
def test_the_report_of_a_real_training_loop_renders_in_chromium(tmp_path):
    """xsp.report.html on a recorded training loop (what `xsp report` writes), in the browser:
    every section there, the timeline, tree and plots (inline SVG) parsed, no console
    message, nothing loaded from outside."""
    import torch
    from torch import nn

    import xsp
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = torch.randn(2, 3, 8, 8), torch.tensor([0, 2])
    with xsp.profile(levels="ML", name="train") as prof:
        for _ in range(4):
            opt.zero_grad()
            nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
            prof.step()
    path = tmp_path / "train.html"
    doc = xsp.report.html(prof.trace, path=str(path))
    res = B.check(str(path), screenshot=str(tmp_path / "train.png"),
                  expect=["xsp report: train", "4 iterations: steps", "Iterations, by phase",
                          "Top 10 ops", "Timeline of iteration", "Tree of that iteration",
                          "<svg", "<details open",
                          'aria-label="Step latency per iteration, by phase"'])
    assert res.ok, res.report()
    assert res.console == [] and res.outside == []
    assert len(re.findall(r'<rect class="xsp-s ', res.dom)) == \
        len(re.findall(r'<rect class="xsp-s ', doc)) > 10
    assert res.dom.count("<details") == doc.count("<details")
    assert res.ink_fraction > 0.01, res.report()


@needs_chromium
def test_binned_report_renders_in_chromium(tmp_path):
    # the report of many iterations (test_bounded_report): the binned table and the SVG chart
    # of the iterations parse and draw
    from test_bounded_report import many_steps

    import xsp
    doc = xsp.report.html(many_steps(500), path=str(tmp_path / "many.html"))
    res = B.check(str(tmp_path / "many.html"), screenshot=str(tmp_path / "many.png"),
                  expect=["500 iterations in 30 bins of 16-17", 'class="xsp-iters"'])
    assert res.ok, res.report()
    assert res.console == [] and res.outside == []
    assert res.dom.count("<title>") >= 120 and doc.count("<figcaption>") == 1
