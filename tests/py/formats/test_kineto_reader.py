"""The Kineto JSON reader (xsp.load_kineto, csrc/io/kjson.c) pointed at hostile files: numbers
whose value is huge but whose text is short, integers past any machine word, fields of the
wrong type, gzip bombs, deep nesting, broken gzip streams, and JSON-level mutants of a real
torch.profiler trace.  Each one loads or raises xsp.TraceFormatError naming the file and the
event and field (or the byte offset); a mutant that loads goes through every exporter and the
analyses.  Memory is checked in a child process (its peak RSS), never time.
"""
import gzip
import json
import math
import os
import random
import subprocess
import sys
import textwrap

import pytest

import xsp
from xsp import _core
from xsp.formats import kineto

EVENT = {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 2}


def _doc(*events, **top):
    d = {"schemaVersion": 1, "traceEvents": list(events)}
    d.update(top)
    return d


def _write(tmp_path, doc, name="t.json"):
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(p)


def _refused(path, words, event=None, offset=None):
    with pytest.raises(xsp.TraceFormatError) as e:
        xsp.load(path, format="kineto")
    msg = str(e.value)
    assert msg.startswith(path + ": ") and words in msg, msg
    assert e.value.path == path and e.value.event == event and e.value.offset == offset, (
        e.value.event, e.value.offset)
    return msg


# -- numbers: range-checked from their text ----------------------------------------------------
def test_a_huge_exponent_in_ts_is_refused_from_its_text(tmp_path):
    # the 68-byte event: the old reader built a million-digit integer (42 s)
    ev = '{"ph": "X", "name": "a", "ts": 1e999990, "dur": 1, "pid": 1, "tid": 1}'
    p = _write(tmp_path, '{"traceEvents": [%s]}' % ",".join([ev] * 100))
    _refused(p, "event 0: ts 1e999990 is out of range (more than 2**63 ns)", event=0)
    p = _write(tmp_path, '{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1e10000000}]}')
    _refused(p, "dur 1e10000000 is out of range", event=0)


def test_ts_is_exact_decimal_microseconds_rounded_half_to_even(tmp_path):
    cases = {"1.0005": 1000, "1.0015": 1002, "2.5e-3": 2, "3.5e-3": 4, "1e3": 1000000,
             "123456789.123456": 123456789123, "0.00049999999999999999999": 0}
    evs = [dict(EVENT, name="e%d" % k, tid=k + 1, ts="@%s@" % v) for k, v in enumerate(cases)]
    text = json.dumps(_doc(*evs))
    for v in cases:
        text = text.replace('"@%s@"' % v, v)
    tr = xsp.load(_write(tmp_path, text), format="kineto")
    got = {s.name: s.start_ns for s in tr if s.kind == "op"}
    assert got == {"e%d" % k: ns for k, ns in enumerate(cases.values())}


def test_integers_past_int64_and_past_4300_digits(tmp_path):
    digits = "9" * 5000                             # int() refuses these without a flag
    text = json.dumps(_doc(dict(EVENT, args={"x": 0, "big": 2 ** 64, "f": 1.5}),
                           dict(EVENT, ts=5, pid="@pid@")))
    text = text.replace('"x": 0', '"x": ' + digits).replace('"@pid@"', digits)
    tr = xsp.load(_write(tmp_path, text), format="kineto")
    a = tr[1].attrs
    assert a["k.x"] == digits and a["k.big"] == str(2 ** 64) and a["k.f"] == 1.5
    assert len(tr.threads) == 2                     # the long pid is a thread key like others
    p = _write(tmp_path, text.replace('"ts": 1', '"ts": ' + digits, 1), "ts.json")
    _refused(p, "ts %s... is out of range" % digits[:36], event=0)


def test_an_arg_of_1e999_is_infinity_and_every_exporter_takes_it(tmp_path):
    text = json.dumps(_doc(dict(EVENT, args={"x": "@"}))).replace('"@"', "1e999")
    tr = xsp.load(_write(tmp_path, text), format="kineto")
    assert tr[1].attrs["k.x"] == math.inf
    _everything(tr, tmp_path)


# -- fields of the wrong type: TraceFormatError naming the event and the field -------------------
@pytest.mark.parametrize("event, words", [
    (dict(EVENT, pid=[1]), "pid must be an integer or a string, not list"),
    (dict(EVENT, tid={"a": 1}), "tid must be an integer or a string, not dict"),
    (dict(EVENT, tid=True), "tid must be an integer or a string, not bool"),
    (dict(EVENT, cat=["cpu_op"]), "cat must be a string, not list"),
    (dict(EVENT, ph=1), "ph must be a string, not int"),
    (dict(EVENT, name=None), "name must be a string, not NoneType"),
    (dict(EVENT, ts=[1]), "ts must be a number, not list"),
    (dict(EVENT, dur="2"), "dur must be a number, not str"),
    (dict(EVENT, args=[1]), "args must be an object, not list"),
    (dict(EVENT, cat="kernel", args={"correlation": [1]}), "args.correlation must be an integer, not list"),
    (dict(EVENT, cat="cuda_runtime", args={"correlation": {"a": 1}}),
     "args.correlation must be an integer, not dict"),
    (dict(EVENT, cat="kernel", args={"device": [0]}), "args.device must be an integer, not list"),
    (dict(EVENT, cat="gpu_memcpy", args={"stream": "7"}), "args.stream must be an integer, not str"),
    (dict(EVENT, cat="kernel", args={"correlation": int("123456789" * 400)}),
     "args.correlation 12345678912345678912... (3600 digits) is out of int64's range"),
    (dict(EVENT, cat="kernel", args={"device": -(2 ** 63) - 1}),
     "args.device -9223372036854775809... (19 digits) is out of int64's range"),
    ({"ph": "M", "name": "thread_name", "pid": [1], "tid": 1, "args": {"name": "t"}},
     "pid must be an integer or a string, not list"),
    ({"ph": "s", "cat": "fwdbwd", "id": {"x": 1}, "pid": 1, "tid": 1, "ts": 1},
     "id must be an integer or a string, not dict"),
    (dict(EVENT, args={"a%d" % i: i for i in range(251)}), "more than 250 args"),
])
def test_a_malformed_field_names_its_event_and_field(tmp_path, event, words):
    p = _write(tmp_path, _doc(EVENT, event))
    _refused(p, "event 1: " + words, event=1)


def test_the_cli_says_what_is_wrong_without_a_traceback(tmp_path):
    p = _write(tmp_path, _doc(EVENT, dict(EVENT, tid=[1, 2])))
    r = subprocess.run([sys.executable, "-m", "xsp", "summary", p], capture_output=True,
                       text=True)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "event 1: tid must be an integer or a string, not list" in r.stderr
    # a bad cap in the environment: one line, for every command that reads
    for cmd in (["summary", p], ["export", p, "-o", str(tmp_path / "x.json")],
                ["report", p, "-o", str(tmp_path / "x.html")], ["compare", p, p]):
        r = subprocess.run([sys.executable, "-m", "xsp", *cmd], capture_output=True, text=True,
                           env=dict(os.environ, XSP_KINETO_MAX_BYTES="abc"))
        assert (r.returncode, r.stdout, r.stderr) == (
            1, "", "xsp: error: XSP_KINETO_MAX_BYTES must be a positive number of bytes, not "
                   "'abc'\n"), cmd


@pytest.mark.parametrize("text, words, offset", [
    ('{"traceEvents": [], "traceEvents": []}', "traceEvents is given twice", 35),
    ('{"traceEvents": [{"args": ' + "[" * 100000 + "]" * 100000 + "}]}",
     "nested more than 1000 levels deep", 26 + 997),
    ('{"traceEvents": [{"ph": "X", "name": "a", "ts": NaN, "dur": 1}]}', "malformed JSON", None),
    ('{"traceEvents": []} {}', "malformed JSON", 20),
    ('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1', "ends inside a value", 59),
])
def test_malformed_json_gives_the_byte_offset(tmp_path, text, words, offset):
    p = _write(tmp_path, text)
    with pytest.raises(xsp.TraceFormatError) as e:
        xsp.load(p, format="kineto")
    assert words in str(e.value) and e.value.event is None
    if offset is not None:
        assert e.value.offset == offset and "byte %d: " % offset in str(e.value)
    else:
        assert isinstance(e.value.offset, int)


# -- gzip: streamed, capped, every member --------------------------------------------------------
def test_a_gzip_bomb_stops_at_the_cap_with_its_offset(tmp_path):
    p = tmp_path / "bomb.json.gz"
    with gzip.open(p, "wb") as g:
        g.write(b'{"traceEvents": [')
        g.write(b" " * (64 << 20))
        g.write(b"]}")
    assert os.path.getsize(p) < 200000
    with pytest.raises(xsp.TraceFormatError) as e:
        xsp.load(str(p), max_bytes=16 << 20, format="kineto")
    assert "more than %d bytes of JSON text" % (16 << 20) in str(e.value)
    assert e.value.offset == 16 << 20
    # under the default cap the blanks are read, in bounded memory (a child's peak RSS)
    code = textwrap.dedent("""
        import sys, xsp
        def hwm():  # peak RSS, bytes: ru_maxrss would start at pytest's after exec
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))
        before = hwm()
        try:
            xsp.load(sys.argv[1], format="kineto")
        except xsp.TraceFormatError as e:
            print(e)
        print((hwm() - before) >> 20)
    """)
    r = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    msg, grown_mb = r.stdout.splitlines()
    assert "no complete events" in msg and int(grown_mb) < 32, r.stdout
    # the CLI's commands take the cap from the environment
    env = dict(os.environ, XSP_KINETO_MAX_BYTES=str(1 << 20))
    r = subprocess.run([sys.executable, "-m", "xsp", "summary", str(p)], capture_output=True,
                       text=True, env=env)
    assert r.returncode != 0 and "more than 1048576 bytes of JSON text" in r.stderr


@pytest.mark.parametrize("kind", ["number", "string"])
def test_one_token_past_the_cap_is_refused_at_its_first_byte(tmp_path, kind):
    """A 400 KB gzip holding one number of 400 million digits (or a string of as many bytes)
    ran for minutes: yajl lexes a token that spans pieces of text again at each one.  One
    token of more than XSP_KJSON_MAX_TOKEN (16 MiB) is refused where it begins, read in bounded
    memory (checked in a child), long before its end."""
    head = b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "dur": 1, "ts": '
    p = tmp_path / ("token.json.gz")
    with gzip.open(p, "wb", compresslevel=1) as g:
        g.write(head + (b'"' if kind == "string" else b""))
        chunk = (b"7" if kind == "number" else b"x") * (1 << 20)
        for _ in range(200):                        # 200 MB of one token
            g.write(chunk)
        g.write((b'"' if kind == "string" else b"") + b"}]}")
    code = textwrap.dedent('''
        import sys, xsp
        try:
            xsp.load(sys.argv[1], format="kineto")
        except xsp.TraceFormatError as e:
            print(e.offset, e)
        with open("/proc/self/status") as f:
            print(next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")))
        ''')
    r = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    first, peak_kb = r.stdout.splitlines()
    assert first == "%d %s: byte %d: a %s of more than 16777216 bytes: refused (the reader's " \
                    "limit for one token)" % (len(head), p, len(head), kind)
    assert int(peak_kb) < 400 << 10                 # the token is never held whole


def test_gzip_members_padding_truncation_and_garbage(tmp_path):
    text = json.dumps(_doc(EVENT, dict(EVENT, ts=10))).encode()
    whole = xsp.load(_write(tmp_path, text.decode(), "plain.json"), format="kineto")
    two = tmp_path / "two.json.gz"
    two.write_bytes(gzip.compress(text[:30]) + gzip.compress(text[30:]) + b"\0" * 512)
    assert [(s.name, s.start_ns) for s in xsp.load(str(two), format="kineto")] == \
        [(s.name, s.start_ns) for s in whole]
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(text)[:-12])
    with pytest.raises(xsp.TraceFormatError, match="not a gzip file"):
        xsp.load(str(cut), format="kineto")
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(gzip.compress(text) + b"garbage!")
    with pytest.raises(xsp.TraceFormatError, match="not a gzip file") as e:
        xsp.load(str(bad), format="kineto")
    assert e.value.offset == len(gzip.compress(text))


def test_the_same_trace_whatever_the_chunks(torch_trace):
    with open(torch_trace, "rb") as f:
        raw = f.read()
    whole = xsp.Trace(_core.read_kineto([raw]))
    rng = random.Random(7)
    pieces, i = [], 0
    while i < len(raw):
        n = rng.choice([1, 2, 3, 17, 4096, 65536])
        pieces.append(raw[i:i + n])
        i += n
    split = xsp.Trace(_core.read_kineto(iter(pieces)))
    assert split.to_bytes() == whole.to_bytes()
    loaded = xsp.load(torch_trace, format="kineto")
    assert loaded.meta["kineto.path"] == os.path.abspath(torch_trace)
    assert len(loaded) == len(whole) > 100


# -- mutants of a real torch.profiler trace ------------------------------------------------------
@pytest.fixture(scope="module")
def torch_trace(tmp_path_factory):
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x = torch.randn(4, 8)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True,
                 with_modules=True) as prof:
        for _ in range(3):
            with record_function("step"):
                model(x).sum().backward()
            prof.step()
    p = str(tmp_path_factory.mktemp("torch") / "torch.pt.trace.json")
    prof.export_chrome_trace(p)
    return p


def _everything(tr, tmp_path):
    """Every exporter and the analyses that take a Trace; only typed errors may escape."""
    from xsp import report
    from xsp.analysis import tables as analysis
    from xsp.formats import chrome
    from xsp.analysis import flops
    from xsp.analysis import memory
    steps = [
        lambda: tr.tree(max_depth=4), tr.to_pandas,
        lambda: xsp.load(_saved(tr, tmp_path)),
        lambda: xsp.save(tr, str(tmp_path / "m.pt.trace.json"), format="kineto"),
        lambda: xsp.load(str(tmp_path / "m.pt.trace.json"), format="kineto"),
        lambda: chrome.write(tr, str(tmp_path / "m.json")),
        lambda: report.text(tr), lambda: analysis.ops(tr),
        lambda: flops.summary(tr), lambda: memory.summary(tr),
    ]
    for step in steps:
        try:
            step()
        except xsp.TraceFormatError:
            pass
        except ValueError as exc:              # the analyses' refusals say what is missing
            assert "no " in str(exc) or "not" in str(exc), repr(exc)


def _saved(tr, tmp_path):
    p = str(tmp_path / "m.xsp")
    xsp.save(tr, p)
    return p


HOSTILE_VALUES = [None, True, -1, 0, 2 ** 70, "9" * 400 + "@", 1.5, "", "x", [], [1, [2]],
                  {}, {"a": {"b": []}}, "\u00e9\u0000\n", "1e999990@", "-1e999990@"]


def _mutate(rng, doc):
    evs = doc["traceEvents"]
    for _ in range(rng.randint(1, 4)):
        e = rng.choice(evs)
        if not isinstance(e, dict):
            continue
        op = rng.random()
        if op < 0.6 and e:
            key = rng.choice(list(e) + ["ts", "dur", "pid", "tid", "ph", "cat", "args", "id"])
            if key == "args" and isinstance(e.get("args"), dict) and e["args"] and op < 0.3:
                k = rng.choice(list(e["args"]))
                e["args"][k] = rng.choice(HOSTILE_VALUES)
            else:
                e[key] = rng.choice(HOSTILE_VALUES)
        elif op < 0.8 and e:
            del e[rng.choice(list(e))]
        else:
            evs.insert(rng.randrange(len(evs) + 1), rng.choice(HOSTILE_VALUES[:14]))


def _text(doc):
    text = json.dumps(doc)
    return text.replace('"1e999990@"', "1e999990").replace('"-1e999990@"', "-1e999990") \
        .replace('"' + "9" * 400 + '@"', "9" * 400)


def test_mutants_of_a_real_trace_load_or_name_what_is_wrong(torch_trace, tmp_path):
    with open(torch_trace) as f:
        seed = json.load(f)
    rng = random.Random(20261202)
    accepted = refused_at_event = 0
    for m in range(int(os.environ.get("XSP_FUZZ_MUTANTS", "200"))):
        doc = json.loads(json.dumps(seed))
        _mutate(rng, doc)
        p = _write(tmp_path, _text(doc), "mutant.json")
        try:
            tr = xsp.load(p, format="kineto")
        except xsp.TraceFormatError as e:
            assert str(e).startswith(p + ": "), str(e)
            assert e.event is not None or e.offset is not None or "no complete events" in str(e)
            refused_at_event += e.event is not None
            continue
        accepted += 1
        if accepted % 10 == 1:
            _everything(tr, tmp_path)
    assert accepted > 20 and refused_at_event > 20, (accepted, refused_at_event)
