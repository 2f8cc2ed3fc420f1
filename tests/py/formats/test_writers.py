"""Every file xsp writes goes through one of two writers: the C writer behind Trace.save (xsp run
-o, xsp merge -o; csrc/io/tracefile.c) and xsp.core.util.atomic_write (the Kineto, Chrome, OTLP
and HTML exports, measurements, the peaks cache, the pytest plugin's files).  Both write a
temporary file beside the target under a fresh unpredictable name, created O_EXCL|O_NOFOLLOW,
and rename it over the target (docs/format.md, "Temporary names").  These tests guard:

  - planted links: a symlink at any name a writer could use is never followed (the old names,
    and, with the random source forced, the exact names the next write tries);
  - concurrent saves: threads and processes saving to one path while another loads it: no
    save fails, every load is one of the saved files, whole;
  - failures: a write that fails (file too large, a callback that raises, a directory in the
    way) leaves the old file and no temporary file.

No timing: the readers loop until the writers are done, however fast either is.
"""
import itertools
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import pytest

import xsp
from xsp.core import util as _util

from helpers import have_otlp

SAVES = 160                 # per writer thread or process
FORCED = "ab" * 8           # the random part while it is forced (the shim's 0xab bytes)


def S(name, kind, start, end, parent=None, **attrs):
    return {"name": name, "kind": kind, "start_ns": start, "end_ns": end, "parent": parent,
            "thread": 0, "attrs": attrs}


def make_trace(n, tag):
    """A trace of n + 1 spans (a region and n ops under it), told apart by tag."""
    spans = [S("region %s" % tag, "region", 0, 10 * n + 10)]
    spans += [S("aten::op%d" % (i % 7), "op", 10 * i + 1, 10 * i + 9, 0, seq=i) for i in range(n)]
    return xsp.Trace.from_spans(spans, meta={"levels": "ML", "tag": tag,
                                             "clock.wall_offset_ns": 0})


@pytest.fixture(scope="module")
def traces():
    """Four traces of different sizes, so that a torn file cannot pass for another."""
    return [make_trace(n, "t%d" % k) for k, n in enumerate((0, 300, 2000, 6000))]


def entries(d):
    return sorted(os.listdir(d))


def plant(d, names, victim):
    """Symlinks to victim at each of names in directory d."""
    for name in names:
        os.symlink(victim, os.path.join(d, name))


def victim_file(tmp_path):
    """A file outside the target directory that no save may touch."""
    v = tmp_path / "victim"
    v.write_bytes(b"precious")
    return str(v)


def forced_names(base, count):
    """The first count temporary names a writer in a fresh process tries for a target named
    base while the random part is forced (docs/format.md: .<base>.<16 hex>.<n>.tmp)."""
    return [".%s.%s.%d.tmp" % (base, FORCED, n) for n in range(count)]


def old_names(base, pid):
    """The names the writers used before, and other likely ones: the C writer's
    <path>.tmp.<pid>, the Python writers' .<base>.<pid>.<serial>.tmp."""
    names = ["%s.tmp.%d" % (base, pid), "%s.tmp" % base, "%s~" % base, ".%s.tmp" % base]
    names += [".%s.%d.%d.tmp" % (base, pid, s) for s in range(300)]
    return names


# -- the random source, forced -----------------------------------------------------------------

SHIM = r"""
#include <stddef.h>
#include <string.h>
#include <sys/types.h>
/* getrandom(2) that always gives 0xab bytes: the C writer's next names become known */
ssize_t getrandom(void *buf, size_t n, unsigned int flags)
{
    (void)flags;
    memset(buf, 0xab, n);
    return (ssize_t)n;
}
"""


@pytest.fixture(scope="module")
def forced_random(tmp_path_factory):
    """An LD_PRELOAD library that makes getrandom(2) constant (built here with the C compiler
    that built xsp)."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build the getrandom shim")
    d = tmp_path_factory.mktemp("shim")
    (d / "shim.c").write_text(SHIM)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(d / "shim.so"), str(d / "shim.c")],
                   check=True)
    return str(d / "shim.so")


SAVE_ONCE = textwrap.dedent("""
    import sys, xsp
    tr = xsp.load(sys.argv[1])
    try:
        xsp.save(tr, sys.argv[2])
    except OSError as e:
        print("OSError:", e)
    else:
        print("saved")
""")


def save_forced(shim, src, path):
    """Saves the trace at src to path in a fresh process whose getrandom is forced; returns
    what it printed ("saved" or "OSError: <message>")."""
    env = dict(os.environ, LD_PRELOAD=shim)
    out = subprocess.run([sys.executable, "-c", SAVE_ONCE, src, path], env=env, check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


def test_the_c_writer_refuses_links_at_the_exact_names_it_tries(tmp_path, traces, forced_random):
    """Regression guard (bug: Trace.save wrote <path>.tmp.<pid> opened O_CREAT|O_TRUNC, so a
    symlink planted there had its target overwritten).  With getrandom forced, the names the
    save tries are known: links at the first five are refused (O_EXCL|O_NOFOLLOW) and the
    sixth name is used; links at all 100 make the save fail, touching nothing."""
    victim = victim_file(tmp_path)
    d = tmp_path / "shared"
    d.mkdir()
    src = str(tmp_path / "src.xsp")
    xsp.save(traces[1], src)
    path = str(d / "t.xsp")
    plant(d, forced_names("t.xsp", 5), victim)
    assert save_forced(forced_random, src, path) == "saved"
    assert open(victim, "rb").read() == b"precious"
    assert not os.path.islink(path) and xsp.load(path) == traces[1]
    assert entries(d) == sorted(forced_names("t.xsp", 5) + ["t.xsp"])
    assert all(os.readlink(d / n) == victim for n in forced_names("t.xsp", 5))
    # every name taken: the save fails, the old file and the links stay as they were
    plant(d, forced_names("t.xsp", 100)[5:], victim)
    before = open(path, "rb").read()
    xsp.save(traces[2], src)
    assert save_forced(forced_random, src, path) == (
        "OSError: cannot save '%s': File exists" % path)
    assert open(victim, "rb").read() == b"precious"
    assert open(path, "rb").read() == before
    assert entries(d) == sorted(forced_names("t.xsp", 100) + ["t.xsp"])


def test_atomic_write_refuses_links_at_the_exact_names_it_tries(tmp_path, monkeypatch):
    """The same for the Python writers, with their random part forced through its seam."""
    monkeypatch.setattr(_util, "_tmp_random", lambda: FORCED)
    monkeypatch.setattr(_util, "_tmp_serial", itertools.count())
    victim = victim_file(tmp_path)
    d = tmp_path / "shared"
    d.mkdir()
    path = str(d / "t.json")
    plant(d, forced_names("t.json", 5), victim)
    _util.atomic_write(path, lambda f: f.write("new"))
    assert open(victim, "rb").read() == b"precious"
    assert not os.path.islink(path) and open(path).read() == "new"
    assert entries(d) == sorted(forced_names("t.json", 5) + ["t.json"])
    # the next names, 6 to 105 (the count goes on), all taken: FileExistsError, nothing touched
    monkeypatch.setattr(_util, "_tmp_serial", itertools.count())
    plant(d, forced_names("t.json", 100)[5:], victim)
    with pytest.raises(FileExistsError) as info:
        _util.atomic_write(path, lambda f: f.write("newer"))
    assert info.value.filename == os.path.join(str(d), forced_names("t.json", 100)[-1])
    assert open(victim, "rb").read() == b"precious"
    assert open(path).read() == "new"
    assert entries(d) == sorted(forced_names("t.json", 100) + ["t.json"])


def writers(trace):
    """Every kind of file xsp writes, as (file name, write(path)): xsp.save of a .xsp (the C writer)
    and the Python writers, which all go through atomic_write."""
    from xsp import perf, report
    from xsp.formats import chrome
    from xsp.formats import kineto
    from xsp.formats import otlp
    result = perf.measure(lambda: None, repeat=2, warmup=0)
    out = [
        ("t.xsp", lambda p: xsp.save(trace, p)),
        ("t.pt.trace.json", lambda p: kineto.write(trace, p)),
        ("t.pt.trace.json.gz", lambda p: kineto.write(trace, p)),
        ("t.chrome.json", lambda p: chrome.write(trace, p)),
        ("t.html", lambda p: report.html(trace, p)),
        ("t.result.json", lambda p: xsp.save(result, p)),
    ]
    if have_otlp():
        out.append(("t.otlp.json", lambda p: otlp.write_json(trace, p)))
    return out




def test_no_writer_follows_a_link_at_an_old_or_likely_name(tmp_path, traces):
    """Links at the names the writers used before (<path>.tmp.<pid>, .<base>.<pid>.<n>.tmp
    for the next 300 n) and at other likely names: every writer leaves their target alone,
    writes a regular file, and leaves no file of its own beside it."""
    victim = victim_file(tmp_path)
    for name, write in writers(traces[1]):
        d = tmp_path / ("d-" + name)
        d.mkdir()
        links = old_names(name, os.getpid())
        plant(d, links, victim)
        path = str(d / name)
        write(path)
        assert open(victim, "rb").read() == b"precious", name
        assert os.path.isfile(path) and not os.path.islink(path), name
        assert entries(d) == sorted(links + [name]), name
    assert xsp.load(str(tmp_path / "d-t.xsp" / "t.xsp")) == traces[1]
    assert xsp.load(str(tmp_path / "d-t.pt.trace.json.gz" / "t.pt.trace.json.gz"), format="kineto")[
        1].name == "aten::op0"


def test_a_link_at_the_target_itself_is_replaced_not_followed(tmp_path, traces):
    """rename() replaces a symlink at the target: the file it pointed to is not written."""
    victim = victim_file(tmp_path)
    for name, write in writers(traces[0])[:2]:
        path = tmp_path / name
        os.symlink(victim, path)
        write(str(path))
        assert open(victim, "rb").read() == b"precious"
        assert path.is_file() and not path.is_symlink()


def test_temporary_names_are_beside_the_target_and_fit_a_long_name(tmp_path, traces,
                                                                   monkeypatch):
    """A target name of 255 bytes (NAME_MAX) still gets a temporary name that fits: the
    target's name is cut to 200 bytes in it; a relative path's temporary file is in the
    current directory."""
    long = "x" * 251 + ".xsp"
    xsp.save(traces[1], str(tmp_path / long))
    _util.atomic_write(str(tmp_path / (long + "j")[1:]), lambda f: f.write("ok"))
    assert entries(tmp_path) == sorted([long, (long + "j")[1:]])
    names = []
    real = os.open
    monkeypatch.setattr(os, "open", lambda p, *a: names.append(p) or real(p, *a))
    monkeypatch.setattr(_util, "_tmp_random", lambda: FORCED)
    monkeypatch.setattr(_util, "_tmp_serial", itertools.count(7))
    monkeypatch.chdir(tmp_path)
    _util.atomic_write(long, lambda f: f.write("ok"))
    _util.atomic_write("sub-less.json", lambda f: f.write("ok"))
    assert names[0] == ".%s.%s.7.tmp" % ("x" * 200, FORCED)
    assert names[1] == "." and names[2] == ".sub-less.json.%s.8.tmp" % FORCED


def test_new_files_get_0666_less_the_umask(tmp_path, traces):
    old = os.umask(0o027)
    try:
        xsp.save(traces[0], str(tmp_path / "t.xsp"))
        _util.atomic_write(str(tmp_path / "t.txt"), lambda f: f.write("x"))
    finally:
        os.umask(old)
    assert oct(os.stat(tmp_path / "t.xsp").st_mode & 0o777) == "0o640"
    assert oct(os.stat(tmp_path / "t.txt").st_mode & 0o777) == "0o640"


# -- concurrent saves --------------------------------------------------------------------------

def hammer(save_fns, read):
    """Runs each of save_fns in a thread of its own while this thread keeps calling read()
    until every saver is done (and once more after); returns (failed saves, loads).  read()
    asserts what it reads."""
    failures = []

    def run(fn):
        try:
            fn()
        except BaseException as e:          # noqa: BLE001 - counted and reported
            failures.append(repr(e))

    threads = [threading.Thread(target=run, args=(fn,)) for fn in save_fns]
    for t in threads:
        t.start()
    loads = 0
    while any(t.is_alive() for t in threads):
        read()
        loads += 1
    for t in threads:
        t.join()
    read()
    return failures, loads + 1


def test_threads_saving_to_one_path_never_show_a_torn_file(tmp_path, traces):
    """Regression guard (bug: every thread used the same temporary name: 4 threads saving 160
    times to one path gave 65 failed saves and 17 empty, truncated or trailing-garbage
    loads).  4 threads save 160 times each while this one loads: no save fails, every load
    is one of the four traces, byte for byte."""
    path = str(tmp_path / "t.xsp")
    xsp.save(traces[0], path)
    saved = {tr.to_bytes(): tr for tr in traces}
    seen = set()

    def read():
        with open(path, "rb") as f:
            data = f.read()
        assert data in saved, "a torn file of %d bytes" % len(data)
        seen.add(data)
        assert xsp.load(path) in traces

    def saver(tr):
        return lambda: [xsp.save(tr, path) for _ in range(SAVES)]

    failures, loads = hammer([saver(tr) for tr in traces], read)
    assert failures == []
    assert loads >= 1 and seen <= set(saved)
    assert entries(tmp_path) == ["t.xsp"]


def test_threads_writing_one_file_with_atomic_write_never_show_a_torn_file(tmp_path):
    """The same for the Python writers (texts of 1 to 300,000 characters)."""
    path = str(tmp_path / "t.json")
    texts = [json.dumps({"w": k, "pad": "p" * n}) for k, n in enumerate((0, 3000, 60000, 300000))]
    _util.atomic_write(path, lambda f: f.write(texts[0]))

    def read():
        with open(path, encoding="utf-8") as f:
            data = f.read()
        assert data in texts, "a torn file of %d characters" % len(data)

    def saver(text):
        return lambda: [_util.atomic_write(path, lambda f: f.write(text))
                        for _ in range(SAVES)]

    failures, loads = hammer([saver(t) for t in texts], read)
    assert failures == [] and loads >= 1
    assert entries(tmp_path) == ["t.json"]


CHILD = textwrap.dedent("""
    import sys, xsp
    from xsp.core.util import atomic_write
    tr = xsp.load(sys.argv[1])
    text = open(sys.argv[1] + ".txt").read()
    for _ in range(int(sys.argv[4])):
        xsp.save(tr, sys.argv[2])
        atomic_write(sys.argv[3], lambda f: f.write(text))
""")


def test_processes_saving_to_one_path_never_show_a_torn_file(tmp_path, traces):
    """3 processes, each saving its trace (Trace.save) and its text (atomic_write) 160 times
    to the same two paths while this process loads both: every save succeeds, every load is
    one of the saved files, whole."""
    d = tmp_path / "out"
    d.mkdir()
    path, jpath = str(d / "t.xsp"), str(d / "t.json")
    texts = {"start"}
    procs = []
    xsp.save(traces[0], path)
    _util.atomic_write(jpath, lambda f: f.write("start"))
    saved = {tr.to_bytes() for tr in traces}
    for k, tr in enumerate(traces[1:]):
        src = str(tmp_path / ("src%d.xsp" % k))
        xsp.save(tr, src)
        text = "text %d " % k + "p" * (50000 * k)
        texts.add(text)
        with open(src + ".txt", "w") as f:
            f.write(text)
        procs.append(subprocess.Popen([sys.executable, "-c", CHILD, src, path, jpath,
                                       str(SAVES)], stderr=subprocess.PIPE, text=True))
    loads = 0
    while True:
        running = any(p.poll() is None for p in procs)
        with open(path, "rb") as f:
            data = f.read()
        assert data in saved, "a torn file of %d bytes" % len(data)
        with open(jpath) as f:
            text = f.read()
        assert text in texts, "a torn file of %d characters" % len(text)
        loads += 1
        if not running:
            break
    errs = [p.stderr.read() for p in procs]
    assert [p.wait() for p in procs] == [0, 0, 0], errs
    assert errs == ["", "", ""]
    assert loads >= 1
    assert entries(d) == ["t.json", "t.xsp"]


# -- failures ----------------------------------------------------------------------------------

TOO_LARGE = textwrap.dedent("""
    import resource, signal, sys, xsp
    from xsp.core.util import atomic_write
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)      # write gets EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    tr = xsp.load(sys.argv[1])
    for what, fn in (("save", lambda: tr.save(sys.argv[2])),
                     ("atomic_write", lambda: atomic_write(sys.argv[3],
                                                           lambda f: f.write("x" * 100000)))):
        try:
            fn()
        except OSError as e:
            print(what, type(e).__name__, e.errno, e.strerror or e)
        else:
            print(what, "saved")
""")


def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temporary(tmp_path, traces):
    """A file size limit (RLIMIT_FSIZE) under the new file's size: the write fails with EFBIG
    after the temporary file was made; both writers remove it and keep the old file."""
    d = tmp_path / "out"
    d.mkdir()
    src = str(tmp_path / "big.xsp")
    xsp.save(traces[3], src)
    assert os.path.getsize(src) > 4096
    path, jpath = str(d / "t.xsp"), str(d / "t.json")
    xsp.save(traces[0], path)
    _util.atomic_write(jpath, lambda f: f.write("old"))
    old = open(path, "rb").read()
    out = subprocess.run([sys.executable, "-c", TOO_LARGE, src, path, jpath],
                         capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [
        "save OSError None cannot save '%s': File too large" % path,
        "atomic_write OSError 27 File too large"]
    assert open(path, "rb").read() == old and open(jpath).read() == "old"
    assert entries(d) == ["t.json", "t.xsp"]


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_a_write_callback_that_raises_leaves_the_old_file(tmp_path, exc):
    path = str(tmp_path / "t.json")
    _util.atomic_write(path, lambda f: f.write("old"))

    def write(f):
        f.write("half")
        raise exc

    with pytest.raises(type(exc)):
        _util.atomic_write(path, write)
    assert open(path).read() == "old"
    assert entries(tmp_path) == ["t.json"]


def test_a_directory_in_the_way_or_a_missing_one_leaves_nothing(tmp_path, traces):
    """The target is a directory (the rename fails after the file was written) or the
    directory is missing (nothing can be created): OSError, nothing left behind."""
    (tmp_path / "d.xsp").mkdir()
    with pytest.raises(OSError, match="cannot save '%s': Is a directory" % (
            tmp_path / "d.xsp")):
        xsp.save(traces[1], str(tmp_path / "d.xsp"))
    with pytest.raises(IsADirectoryError):
        _util.atomic_write(str(tmp_path / "d.xsp"), lambda f: f.write("x"))
    with pytest.raises(OSError, match="No such file or directory"):
        xsp.save(traces[1], str(tmp_path / "missing" / "t.xsp"))
    with pytest.raises(FileNotFoundError):
        _util.atomic_write(str(tmp_path / "missing" / "t.json"), lambda f: f.write("x"))
    assert entries(tmp_path) == ["d.xsp"] and entries(tmp_path / "d.xsp") == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_directory_leaves_the_old_file(tmp_path, traces):
    d = tmp_path / "ro"
    d.mkdir()
    traces[0].save(str(d / "t.xsp"))
    _util.atomic_write(str(d / "t.json"), lambda f: f.write("old"))
    old = (d / "t.xsp").read_bytes()
    d.chmod(0o555)
    try:
        with pytest.raises(OSError, match="Permission denied"):
            traces[1].save(str(d / "t.xsp"))
        with pytest.raises(PermissionError):
            _util.atomic_write(str(d / "t.json"), lambda f: f.write("new"))
    finally:
        d.chmod(0o755)
    assert (d / "t.xsp").read_bytes() == old and (d / "t.json").read_text() == "old"
    assert entries(d) == ["t.json", "t.xsp"]


def test_a_trace_cannot_be_changed_so_saving_on_another_thread_is_safe(tmp_path):
    """Regression: save() writes with the GIL released, and TraceData once had add_attrs,
    set_meta and set_thread_name, which freed the arrays a save was reading (a segfault; then a
    "saving" guard).  Now a trace is finished at stop and has no method that changes it: saves
    on one thread while another reads every column give whole, equal files."""
    import threading
    spans = [{"name": "r", "kind": "region", "start_ns": 0, "end_ns": 10}] + [
        {"name": "s%d" % i, "kind": "op", "start_ns": i + 1, "end_ns": i + 2, "parent": 0,
         "attrs": {"k": i}} for i in range(50000)]
    tr = xsp.Trace.from_spans(spans)
    td = tr._data
    assert [m for m in dir(td) if m.startswith(("set", "add"))] == []
    errors = []

    def saver(k):
        try:
            for _ in range(3):
                td.save(str(tmp_path / ("t%d.xsp" % k)))
        except Exception as exc:     # noqa: BLE001 -- reported below
            errors.append(exc)

    threads = [threading.Thread(target=saver, args=(k,)) for k in range(2)]
    for th in threads:
        th.start()
    for _ in range(20):
        assert td.attrs()["key"] and len(td.strings()) == 50004 and len(td) == 50001
    for th in threads:
        th.join()
    assert errors == []
    assert xsp.load(str(tmp_path / "t0.xsp")) == tr == xsp.load(str(tmp_path / "t1.xsp"))


# -- durability: which saves fsync (docs/api.md, xsp.save; docs/format.md, "Durability")
EXPORTS = [("kineto", "t.pt.trace.json", "write_kineto"),
           ("kineto", "t.pt.trace.json.gz", "write_kineto"),
           ("chrome", "t.json", "write_chrome"),
           ("otlp", "t.otlp.json", "write_otlp"),
           ("otlp", "t.otlp.json.gz", "write_otlp")]


@pytest.fixture
def fsyncs(monkeypatch):
    """Records what os.fsync is called on: 'file' (a regular file) or 'dir'."""
    import stat
    seen = []
    real = os.fsync

    def record(fd):
        seen.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        return real(fd)

    monkeypatch.setattr(os, "fsync", record)
    return seen


def text(path):
    """The file's text, gunzipped, with Kineto's trace_id (random per export, as torch's) cut."""
    import gzip
    import re
    data = open(path, "rb").read()
    data = gzip.decompress(data) if path.endswith(".gz") else data
    return re.sub(rb'"trace_id": "[0-9A-F]{32}"', b'"trace_id": ""', data)


@pytest.mark.parametrize("fmt,name,fn", EXPORTS)
def test_exports_fsync_only_when_asked_and_write_the_same_bytes(tmp_path, traces, fsyncs,
                                                                monkeypatch, fmt, name, fn):
    """An export is renamed into place atomically either way; fsync=True adds the fsync of the
    file and of its directory, and the C writer's writeback hints (flag 2; flag 1 is gzip).
    The file's bytes do not depend on it."""
    from xsp import _core
    flags = []
    real = getattr(_core, fn)

    def spy(fd, fl, *rest):
        flags.append(fl)
        return real(fd, fl, *rest)

    monkeypatch.setattr(_core, fn, spy)
    gz = 1 if name.endswith(".gz") else 0
    plain, durable = str(tmp_path / ("a." + name)), str(tmp_path / ("b." + name))
    same = {"trace_id": 0x1234} if fmt == "otlp" else {}     # else a random id per export
    assert xsp.save(traces[2], plain, **same) == plain
    assert (fsyncs, flags) == ([], [gz])
    assert xsp.save(traces[2], durable, fsync=True, **same) == durable
    assert (fsyncs, flags) == (["file", "dir"], [gz, gz | 2])
    assert text(plain) == text(durable)
    assert entries(tmp_path) == sorted(["a." + name, "b." + name])
    again = xsp.load(plain) if fmt != "otlp" else None
    if again is not None:
        # the Chrome file read back gains the reader's region span
        assert len(again) == len(traces[2]) + (fmt == "chrome") == 2001 + (fmt == "chrome")


def test_records_are_durable_by_default(tmp_path, traces, fsyncs):
    """atomic_write fsyncs unless told not to: the HTML report, measurements, the zoo's
    tables and the plugin's files keep the fsync of the file and of its directory."""
    _util.atomic_write(str(tmp_path / "r.json"), lambda f: f.write("{}"))
    assert fsyncs == ["file", "dir"]
    _util.atomic_write(str(tmp_path / "s.json"), lambda f: f.write("{}"), fsync=False)
    assert fsyncs == ["file", "dir"]
    xsp.report.html(traces[1], str(tmp_path / "r.html"))
    assert fsyncs == ["file", "dir"] * 2
    assert entries(tmp_path) == ["r.html", "r.json", "s.json"]


def test_an_xsp_save_is_always_durable(tmp_path, traces):
    """fsync=True is accepted for an .xsp file (it is fsynced anyway, by the C writer);
    fsync=False is refused with a message that says why, and writes nothing."""
    path = str(tmp_path / "t.xsp")
    assert xsp.save(traces[1], path, fsync=True) == path
    assert xsp.load(path) == traces[1]
    with pytest.raises(ValueError, match=r"an \.xsp file is always fsynced"):
        xsp.save(traces[2], str(tmp_path / "u.xsp"), fsync=False)
    assert entries(tmp_path) == ["t.xsp"]
