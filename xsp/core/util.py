"""Small helpers shared by the Python modules: printable text, atomic file writes, deprecation
warnings.  Numbers are formatted in xsp.core.fmt."""
import errno
import itertools
import os
import secrets


def printable(text):
    """text with what cannot be written as UTF-8 (lone surrogates: names that were not valid
    UTF-8, kept by the core byte for byte) replaced by '?'."""
    return text.encode("utf-8", "replace").decode("utf-8")


# Temporary names.  The C writer (xsp_trace_save, csrc/io/tracefile.c) and atomic_write use
# one scheme, ".<base>.<16 random hex digits>.<n>.tmp" beside the target (docs/format.md): a
# fresh random part per attempt and a per-process counter, opened O_EXCL|O_NOFOLLOW, so that
# no two writers share a name and nothing at a name (a symlink someone planted) is followed.
TMP_TRIES = 100             # names tried before a write gives up (FileExistsError)
TMP_BASE_MAX = 200          # bytes of the target's name kept in a temporary name
_tmp_serial = itertools.count()         # next() on a count is atomic: no lock


def _tmp_random():
    """The random part of a temporary name (a seam: tests replace it to plant at the exact
    name the next write will try)."""
    return secrets.token_hex(8)


def _tmp_create(path):
    """A new temporary file beside path, never an existing file and never through a link:
    returns (fd, name), or raises OSError (FileExistsError after TMP_TRIES taken names)."""
    head, base = os.path.split(path)
    raw = os.fsencode(base)
    if len(raw) > TMP_BASE_MAX:
        base = os.fsdecode(raw[:TMP_BASE_MAX])
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(TMP_TRIES):
        tmp = os.path.join(head, ".%s.%s.%d.tmp" % (base, _tmp_random(), next(_tmp_serial)))
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name after %d tries" % TMP_TRIES,
                          tmp)


def _sync_dir(path):
    """fsyncs the directory holding path, so that a rename into it is on disk; best effort, as
    the C writer (a directory that cannot be opened or synced is skipped: the file is there)."""
    try:
        fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path, write, binary=False, fsync=True):
    """Calls write(f) on a new file beside path (text, UTF-8 with lone surrogates written as
    '?'; bytes with binary=True), fsyncs it (when fsync) and renames it over path, so that a
    reader never sees half a file, whatever other threads and processes write there at the
    same time, and a failure leaves what was there.  fsync=True also makes the file and the
    rename durable (on the disk before this returns: a machine that loses power afterwards
    still has it whole); with fsync=False the kernel writes the file back in its own time,
    as any buffered write, and a power loss soon after may leave path empty or as it was on
    some file systems.  The temporary file has a fresh unpredictable name, created
    O_EXCL|O_NOFOLLOW (never an existing file, never through a symlink), and the usual
    permissions (0666 less the umask).  Raises what write or the file system raises (OSError),
    after removing the temporary file."""
    path = os.fspath(path)
    fd, tmp = _tmp_create(path)
    try:
        f = open(fd, "wb") if binary else open(fd, "w", encoding="utf-8", errors="replace")
    except BaseException:
        os.close(fd)
        _unlink(tmp)
        raise
    try:
        with f:
            write(f)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise
    if fsync:
        _sync_dir(path)


def c_json_write(path, writer, data, head, tail, cols, fsync):
    """Writes a JSON export to path with one of the C writers (_core.write_kineto,
    write_chrome, write_otlp; csrc/io/jsonw.h) through atomic_write: gzip for a path ending
    in .gz, and the writeback hints only when the file will be fsynced.  Raises what
    atomic_write raises."""
    flags = (1 if os.fsdecode(path).endswith(".gz") else 0) | (2 if fsync else 0)
    atomic_write(path, lambda f: writer(f.fileno(), flags, data, head, tail, cols), binary=True,
                 fsync=fsync)


def _unlink(tmp):
    try:
        os.unlink(tmp)
    except OSError:
        pass


def deprecated(old, new, stacklevel=3):
    """Warns, once per call site, that spelling old (e.g. "Trace.save(path)") is deprecated
    and names its replacement new ("xsp.save(trace, path)"): a DeprecationWarning, pointed at
    the caller of the function that calls this one.  Cannot fail."""
    import warnings
    warnings.warn("%s is deprecated: use %s (it keeps working for one release)" % (old, new),
                  DeprecationWarning, stacklevel=stacklevel)
