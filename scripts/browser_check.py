#!/usr/bin/env python3
"""Opens an HTML file in a real browser (headless chromium) and checks that it renders.

    scripts/browser_check.py REPORT.html [--screenshot OUT.png] [--expect TEXT ...]
                             [--window-size 1280,4000] [--min-ink 0.002] [--chromium PATH]

Two runs of chromium (--headless=new --no-sandbox --disable-gpu, a fresh profile each):
  1. --dump-dom with --enable-logging=stderr --v=0: the DOM as parsed (each --expect TEXT must
     be in it) and the page's console messages, read from chromium's log (see _CONSOLE):
     console.error and console.warn, uncaught exceptions and resources that failed to load
     are errors, console.log is reported only; so is anything the page loads from outside
     itself (a src, a <link href>, a CSS url() that is not a data: URL), unless
     --allow-outside;
  2. --screenshot at --window-size: the PNG is decoded (matplotlib.image, or zlib and struct
     here when matplotlib is missing) and its "ink" counted: pixels with a channel under 245,
     i.e. not white.  Under --min-ink of the pixels (default 0.2%) the page is called blank.
Prints a report and exits 0 when every check passed, 1 when one failed, 2 for bad arguments
(an unreadable file) and 77 when no chromium is installed (the automake convention for a
skipped test).  From Python: check(path, ...) returns a Result; find_chromium() the binary or
None.  Standard library only (numpy and matplotlib used when present).
"""
import argparse
import html.parser
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INK_LEVEL = 245         # a pixel with any channel below this is ink (not white)
SKIP = 77


def find_chromium():
    """The path of a chromium-like browser on PATH ($XSP_CHROMIUM first), or None."""
    env = os.environ.get("XSP_CHROMIUM")
    if env:
        return shutil.which(env) or (env if os.access(env, os.X_OK) else None)
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _run(chromium, args, url, timeout):
    """Runs chromium headless with args on url in a fresh profile; returns (rc, out, err)."""
    with tempfile.TemporaryDirectory(prefix="xsp-chromium-") as profile:
        cmd = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
               "--no-first-run", "--no-default-browser-check", "--disable-extensions",
               "--hide-scrollbars", "--user-data-dir=" + profile] + args + [url]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout, env=dict(os.environ, HOME=profile))
        return p.returncode, p.stdout.decode("utf-8", "replace"), \
            p.stderr.decode("utf-8", "replace")


# chromium logs a page's console messages as `[pid:tid:date:INFO:CONSOLE:12] "message", source:
# file:///x.html (12)` (`CONSOLE(12)` in older builds), every one at INFO whatever its console
# level; so the DOM run loads a copy of the page with a first script that tags console.error and
# console.warn messages with their level (_PRELUDE), and a <base> so that relative links still
# point beside the original.  Uncaught exceptions ("Uncaught ...") and resources that failed to
# load ("Failed to load resource") are errors whatever they are tagged.
_CONSOLE = re.compile(r":(?:INFO|WARNING|ERROR|VERBOSE\d*):[^\]]*?CONSOLE[^\]]*\]\s*(.*)")
_TAG = re.compile(r"^\[xsp-console-(error|warn)\] ")
_PRELUDE = ('<script>(function(){["error","warn"].forEach(function(l){var f=console[l];'
            'console[l]=function(){f.call(console,"[xsp-console-"+l+"] "+Array.prototype.map'
            '.call(arguments,String).join(" "))}})})()</script>')


def console_messages(stderr):
    """[(level, message)] of the page's console messages in chromium's stderr log: level
    "error" or "warn" for messages tagged by the prelude, "exception" for uncaught exceptions,
    "load" for resources that failed to load, else "log"."""
    out = []
    for line in stderr.splitlines():
        m = _CONSOLE.search(line)
        if not m:
            continue
        msg = m.group(1).strip()
        q = re.match(r'^"(.*)", source: (.*)$', msg)
        if q:
            msg = "%s (%s)" % (q.group(1), q.group(2))
        t = _TAG.match(msg)
        if t:
            out.append((t.group(1), msg[t.end():]))
        elif msg.startswith("Uncaught"):
            out.append(("exception", msg))
        elif "Failed to load resource" in msg:
            out.append(("load", msg))
        else:
            out.append(("log", msg))
    return out


def _is_error(level, msg):
    return level in ("error", "warn", "exception", "load")


def _with_prelude(path, tmpdir):
    """A copy of the HTML file path in tmpdir with <base> and _PRELUDE first in its <head>;
    returns (copy's path, the inserted text)."""
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", "replace")
    base = os.path.dirname(path).rstrip("/") + "/"
    ins = '<base href="file://%s">%s' % (base.replace('"', "%22"), _PRELUDE)
    m = re.search(r"<head\b[^>]*>", text, re.I) or re.search(r"<html\b[^>]*>", text, re.I) \
        or re.search(r"<!DOCTYPE[^>]*>", text, re.I)
    at = m.end() if m else 0
    copy = os.path.join(tmpdir, os.path.basename(path))
    with open(copy, "w", encoding="utf-8") as f:
        f.write(text[:at] + ins + text[at:])
    return copy, ins


class _Refs(html.parser.HTMLParser):
    """The resources a page loads: src of any element, href of <link>, url(...) in CSS."""

    def __init__(self):
        super().__init__()
        self.refs = []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("src"):
            self.refs.append(a["src"])
        if tag == "link" and a.get("href"):
            self.refs.append(a["href"])
        if a.get("style"):
            self.refs.extend(_CSS_URL.findall(a["style"]))
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.refs.extend(_CSS_URL.findall(data))


_CSS_URL = re.compile(r"""url\(\s*['"]?([^'")]+)""")


def outside_refs(dom):
    """The resources the page loads from outside itself (not data: URLs, not #fragments):
    a self-contained report has none."""
    p = _Refs()
    p.feed(dom)
    return [r for r in p.refs if not r.strip().lower().startswith(("data:", "#", "about:"))]


# -- PNG ---------------------------------------------------------------------------------------
def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def decode_png(path):
    """(width, height, channels, rows): rows a list of bytes, one per scanline, unfiltered.
    8-bit greyscale, RGB, grey+alpha and RGBA, not interlaced (what chromium writes).  Raises
    ValueError for anything else."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("%s is not a PNG file" % path)
    pos, idat, hdr = 8, [], None
    while pos < len(data):
        n, typ = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if typ == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif typ == b"IDAT":
            idat.append(body)
        elif typ == b"IEND":
            break
        pos += 12 + n
    if hdr is None:
        raise ValueError("%s has no IHDR chunk" % path)
    w, h, depth, ctype, _, _, interlace = hdr
    chans = {0: 1, 2: 3, 4: 2, 6: 4}.get(ctype)
    if depth != 8 or chans is None or interlace:
        raise ValueError("%s: unsupported PNG (bit depth %d, colour type %d, interlace %d)"
                         % (path, depth, ctype, interlace))
    raw = zlib.decompress(b"".join(idat))
    stride = w * chans
    rows, prev = [], bytearray(stride)
    for y in range(h):
        ft = raw[y * (stride + 1)]
        cur = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if ft == 1:
            for i in range(chans, stride):
                cur[i] = (cur[i] + cur[i - chans]) & 255
        elif ft == 2:
            cur = bytearray((a + b) & 255 for a, b in zip(cur, prev))
        elif ft == 3:
            for i in range(stride):
                left = cur[i - chans] if i >= chans else 0
                cur[i] = (cur[i] + ((left + prev[i]) >> 1)) & 255
        elif ft == 4:
            for i in range(stride):
                left = cur[i - chans] if i >= chans else 0
                up_left = prev[i - chans] if i >= chans else 0
                cur[i] = (cur[i] + _paeth(left, prev[i], up_left)) & 255
        elif ft != 0:
            raise ValueError("%s: bad PNG filter type %d in row %d" % (path, ft, y))
        rows.append(bytes(cur))
        prev = cur
    return w, h, chans, rows


def ink(path):
    """(ink pixels, all pixels, first ink row, last ink row) of a PNG; rows -1 with no ink.
    A pixel is ink when one of its colour channels is under INK_LEVEL (alpha ignored)."""
    try:
        import numpy as np
        from matplotlib import image as mpimg
    except ImportError:
        np = None
    if np is not None:
        a = mpimg.imread(path)                      # floats in 0..1 for a PNG
        if a.dtype.kind == "f":
            a = (a * 255).round().astype("uint8")
        rgb = a[..., :3] if a.ndim == 3 else a[..., None]
        mask = (rgb < INK_LEVEL).any(axis=-1)
        rows = np.flatnonzero(mask.any(axis=1))
        return (int(mask.sum()), int(mask.size), int(rows[0]) if len(rows) else -1,
                int(rows[-1]) if len(rows) else -1)
    w, h, chans, rows = decode_png(path)
    colour = min(chans, 3) if chans != 2 else 1
    count, first, last = 0, -1, -1
    for y, row in enumerate(rows):
        n = sum(1 for x in range(w)
                if min(row[x * chans:x * chans + colour]) < INK_LEVEL)
        if n:
            count += n
            first = y if first < 0 else first
            last = y
    return count, w * h, first, last


# -- the check -----------------------------------------------------------------------------------
class Result:
    """What check() found: ok (every check passed), errors (what failed, as sentences),
    console ([(level, message)]), outside (resources loaded from outside the page), dom (the
    serialised DOM), screenshot (path), ink_fraction,
    ink_rows ((first, last) row with ink), chromium (the binary), version."""

    def __init__(self):
        self.errors = []
        self.console = []
        self.outside = []
        self.dom = ""
        self.screenshot = None
        self.ink_fraction = 0.0
        self.ink_rows = (-1, -1)
        self.chromium = None
        self.version = None

    @property
    def ok(self):
        return not self.errors

    def report(self):
        lines = ["browser check: %s" % ("ok" if self.ok else "FAILED"),
                 "  browser: %s (%s)" % (self.chromium, self.version or "version unknown"),
                 "  DOM: %d characters" % len(self.dom),
                 "  console: %s" % ("; ".join("%s %s" % m for m in self.console) or "nothing"),
                 "  loads from outside the page: %s" % (", ".join(self.outside) or "nothing"),
                 "  screenshot: %s, ink %.3f%% of the pixels, rows %d..%d" % (
                     self.screenshot, 100 * self.ink_fraction, *self.ink_rows)]
        lines.extend("  error: " + e for e in self.errors)
        return "\n".join(lines)


def check(path, screenshot=None, expect=(), window_size=(1280, 4000), min_ink=0.002,
          chromium=None, timeout=90, self_contained=True):
    """Renders the HTML file path in headless chromium and checks it (see the module
    docstring).  screenshot: where to write the PNG (default: beside path, .png).  expect:
    strings the parsed DOM must contain.  self_contained: fail when the page loads anything
    from outside itself (a src, a <link href>, a CSS url() that is not a data: URL; chromium
    does not log a failed load of a file:// resource).  Returns a Result.  Raises
    FileNotFoundError for a missing file or no chromium (chromium None and none on PATH),
    subprocess.TimeoutExpired when chromium hangs past timeout seconds."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError("no such HTML file: %s" % path)
    chromium = chromium or find_chromium()
    if chromium is None:
        raise FileNotFoundError("no chromium on PATH (apt-get install chromium, or set "
                                "XSP_CHROMIUM)")
    res = Result()
    res.chromium = chromium
    try:
        res.version = subprocess.run([chromium, "--version"], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, timeout=timeout
                                     ).stdout.decode().strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    url = "file://" + path
    with tempfile.TemporaryDirectory(prefix="xsp-page-") as tmp:
        copy, _ = _with_prelude(path, tmp)
        rc, dom, err = _run(chromium, ["--enable-logging=stderr", "--v=0", "--dump-dom"],
                            "file://" + copy, timeout)
    # the DOM as the page made it: without what _with_prelude inserted
    dom = re.sub(r'<base href="file://[^"]*">', "", dom, count=1).replace(_PRELUDE, "", 1)
    res.dom = dom
    res.console = [(lv, msg.replace("file://" + copy, url))
                   for lv, msg in console_messages(err)]
    if rc != 0:
        res.errors.append("chromium --dump-dom exited with status %d: %s"
                          % (rc, (err.strip().splitlines() or [""])[-1]))
    if "<body" not in dom:
        res.errors.append("the dumped DOM has no <body>: the page did not load")
    for text in expect:
        if text not in dom:
            res.errors.append("the DOM lacks %r" % (text,))
    for level, msg in res.console:
        if _is_error(level, msg):
            res.errors.append("console %s: %s" % (level.lower(), msg))
    res.outside = outside_refs(dom)
    if self_contained and res.outside:
        res.errors.append("the page is not self-contained: it loads %s"
                          % ", ".join(res.outside[:5]))

    res.screenshot = os.path.abspath(screenshot or os.path.splitext(path)[0] + ".png")
    if os.path.exists(res.screenshot):
        os.unlink(res.screenshot)
    rc, _, err = _run(chromium, ["--screenshot=" + res.screenshot,
                                 "--window-size=%d,%d" % tuple(window_size)], url, timeout)
    if rc != 0 or not os.path.isfile(res.screenshot):
        res.errors.append("chromium --screenshot made no PNG (status %d): %s"
                          % (rc, (err.strip().splitlines() or [""])[-1]))
        return res
    n_ink, n_all, first, last = ink(res.screenshot)
    res.ink_fraction = n_ink / n_all if n_all else 0.0
    res.ink_rows = (first, last)
    if res.ink_fraction < min_ink:
        res.errors.append("the screenshot is blank: %.3f%% of its pixels are not white "
                          "(at least %.3f%% expected)" % (100 * res.ink_fraction,
                                                          100 * min_ink))
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description="Render an HTML file in headless chromium and "
                                             "check it (DOM, console errors, not blank).")
    ap.add_argument("html")
    ap.add_argument("--screenshot", help="where to write the PNG (default: beside the HTML)")
    ap.add_argument("--expect", action="append", default=[],
                    help="a string the parsed DOM must contain (repeatable)")
    ap.add_argument("--window-size", default="1280,4000", help="W,H in px (default 1280,4000)")
    ap.add_argument("--min-ink", type=float, default=0.002,
                    help="least fraction of non-white pixels (default 0.002)")
    ap.add_argument("--chromium", help="the browser binary (default: chromium on PATH)")
    ap.add_argument("--allow-outside", action="store_true",
                    help="let the page load files or URLs from outside itself")
    a = ap.parse_args(argv)
    try:
        size = tuple(int(v) for v in a.window_size.split(","))
        if len(size) != 2:
            raise ValueError
    except ValueError:
        ap.error("--window-size must be W,H, not %r" % a.window_size)
    if not os.path.isfile(a.html):
        print("browser_check: no such file: %s" % a.html, file=sys.stderr)
        return 2
    chromium = a.chromium or find_chromium()
    if chromium is None:
        print("browser_check: skipped: no chromium on PATH (apt-get install chromium, or "
              "XSP_TEST_TOOLS=1 scripts/setup.sh)", file=sys.stderr)
        return SKIP
    res = check(a.html, screenshot=a.screenshot, expect=a.expect, window_size=size,
                min_ink=a.min_ink, chromium=chromium, self_contained=not a.allow_outside)
    print(res.report())
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
