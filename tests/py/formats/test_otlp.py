"""OTLP export (xsp/formats/otlp.py, docs/format.md "OTLP"): traces sent to a local OTLP/HTTP receiver
that the tests start (http.server on 127.0.0.1, port 0), each request decoded with
opentelemetry-proto and compared with the trace field by field; receivers that refuse, answer
503 or stall; the OTLP/JSON file read back into the request that was sent; the command line.

The OpenTelemetry packages are the optional extra xsp[otlp] (`make test` installs them,
pinned); without them these tests skip, with XSP_TEST_TOOLS=1 they fail instead."""
import base64
import contextlib
import http.server
import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
import warnings

import pytest

import xsp

TOOLS = os.environ.get("XSP_TEST_TOOLS") == "1"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def tool(name):
    if TOOLS:
        return __import__(name, fromlist=["_"])
    return pytest.importorskip(name, reason="%s is part of the extra xsp[otlp] (make test "
                               "installs it)" % name)


tool("opentelemetry.sdk")
tool("opentelemetry.exporter.otlp.proto.http")
json_format = tool("google.protobuf.json_format")
trace_service_pb2 = tool("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
trace_pb2 = tool("opentelemetry.proto.trace.v1.trace_pb2")

from xsp.formats import otlp  # noqa: E402

OFFSET = 1_700_000_000_000_000_000          # wall - monotonic of the hand-made traces
TRACE_ID = 0x0123456789ABCDEF0123456789ABCDEF
META = {"clock.wall_offset_ns": OFFSET, "host": "node7", "pid": 4242, "rank": 3,
        "world_size": 8, "levels": "ML"}


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    """The receiver is on this machine: never through a proxy."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


def hand_trace(steps=3, meta=META):
    """A region with `steps` steps, each a model call with two layers and an op in each, on
    one thread, and one op on a second thread under the region; attrs of every type."""
    spans, t = [{"name": "region", "kind": "region", "start_ns": 1000, "end_ns": 0}], 1000
    for s in range(steps):
        t += 10
        step = len(spans)
        spans.append({"name": "step#%d" % s, "kind": "step", "start_ns": t, "end_ns": 0,
                      "parent": 0})
        t += 10
        model = len(spans)
        spans.append({"name": "Net", "kind": "model", "start_ns": t, "end_ns": 0,
                      "parent": step, "attrs": {"shapes": "[2, 8]"}})
        for j in range(2):
            t += 10
            spans.append({"name": "fc%d" % j, "kind": "module", "start_ns": t,
                          "end_ns": t + 50, "parent": model,
                          "attrs": {"type": "Linear", "shapes": "[2, 8]", "seq": s * 2 + j,
                                    "flops": 256.5}})
            spans.append({"name": "aten::linear", "kind": "op", "start_ns": t + 5,
                          "end_ns": t + 40, "parent": len(spans) - 1,
                          "attrs": {"seq": s * 2 + j}})
            t += 50
        spans[model]["end_ns"] = t + 5
        spans[step]["end_ns"] = t + 10
        t += 10
    spans.append({"name": "aten::copy_", "kind": "op", "start_ns": t + 1, "end_ns": t + 9,
                  "parent": 0, "thread": 1, "attrs": {"level": "clash"}})
    spans[0]["end_ns"] = t + 20
    return xsp.Trace.from_spans(spans, threads=[(11, "main", 0), (12, "loader", 0)],
                                meta=dict(meta))


class Receiver:
    """An OTLP/HTTP traces receiver on 127.0.0.1 (port 0) in a thread.  mode: "ok" (200 and an
    ExportTraceServiceResponse), "503" (always Service Unavailable), "stall" (answers nothing
    for `stall` seconds, or until closed), "slow" (as "ok", each answer `stall` seconds late);
    ok_first: requests answered 200 before the mode applies; fail_first: (k, status,
    Retry-After or None), the first k POSTs answered that status (before anything else).
    requests: the decoded ExportTraceServiceRequest of every request answered 200, in order;
    posts: every POST's path; headers: every POST's headers (a dict, names lowercase); bodies:
    every POST's body."""

    def __init__(self, mode="ok", ok_first=0, stall=30.0, fail_first=(0, 0, None)):
        self.mode, self.ok_first, self.stall = mode, ok_first, stall
        self.fail_first = fail_first
        self.requests, self.posts, self.closing = [], [], threading.Event()
        self.headers, self.bodies = [], []
        rx = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                rx.posts.append(self.path)
                rx.headers.append({k.lower(): v for k, v in self.headers.items()})
                rx.bodies.append(body)
                k, status, after = rx.fail_first
                if len(rx.posts) <= k:
                    out = b"try later"
                    self.send_response(status)
                    if after is not None:
                        self.send_header("Retry-After", after)
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                    return
                if rx.mode == "slow":
                    rx.closing.wait(rx.stall)
                if rx.mode in ("ok", "slow") or len(rx.requests) < rx.ok_first:
                    req = trace_service_pb2.ExportTraceServiceRequest()
                    req.ParseFromString(body)
                    rx.requests.append(req)
                    out = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/x-protobuf")
                elif rx.mode == "503":
                    out = b"collector overloaded"
                    self.send_response(503)
                    self.send_header("Content-Type", "text/plain")
                else:                       # stall: no answer, then drop the connection
                    rx.closing.wait(rx.stall)
                    self.close_connection = True
                    return
                self.send_header("Content-Length", str(len(out)))
                try:
                    self.end_headers()
                    self.wfile.write(out)
                except OSError:             # the client gave up waiting (a slow answer)
                    self.close_connection = True

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d/v1/traces" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)

    def spans(self):
        """(resource attributes, span) of every span received, in order."""
        return [(attrs(rs.resource.attributes), sp) for req in self.requests
                for rs in req.resource_spans for ss in rs.scope_spans for sp in ss.spans]


def closed_port_url():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return "http://127.0.0.1:%d/v1/traces" % port


def attrs(kvs):
    """OTLP KeyValues as a dict of Python values."""
    out = {}
    for kv in kvs:
        field = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, field)
    return out


def check_against(trace, received, offset=OFFSET):
    """The received spans are the trace's, one for one, in id order: names, times + the wall
    offset, parents, level, kind, attributes; span ids unique; returns {xsp id: span id}."""
    assert len(received) == len(trace)
    by_xsp = {}
    for (_res, sp), span in zip(received, trace):
        a = attrs(sp.attributes)
        assert a["xsp.span_id"] == span.id
        by_xsp[span.id] = sp.span_id
        assert len(sp.trace_id) == 16 and len(sp.span_id) == 8
        assert sp.name == span.name
        assert sp.kind == trace_pb2.Span.SPAN_KIND_INTERNAL
        assert sp.status.code == 0                                # unset
        assert sp.start_time_unix_nano == span.start_ns + offset
        assert sp.end_time_unix_nano == span.end_ns + offset
        assert a["xsp.level"] == span.level and a["xsp.kind"] == span.kind
        assert a["xsp.thread"] == span.thread
        if span.kind in ("model", "module"):
            assert a["xsp.module"] == span.name
        else:
            assert "xsp.module" not in a
        for k, v in span.attrs.items():
            key = "xsp.attr." + k if k == "level" else "xsp." + k
            assert a[key] == v, (span.id, k)
    assert len(set(by_xsp.values())) == len(trace)
    for (_res, sp), span in zip(received, trace):
        if span.parent is None:
            assert sp.parent_span_id == b""
        elif sp.trace_id == received[span.parent][1].trace_id:
            assert sp.parent_span_id == by_xsp[span.parent]
    return by_xsp


# -- the mapping ----------------------------------------------------------------------------

def test_spans_follow_the_trace():
    tr = hand_trace()
    sdk = otlp.spans(tr, trace_id=TRACE_ID)
    assert len(sdk) == len(tr)
    assert {s.context.trace_id for s in sdk} == {TRACE_ID}
    assert len({s.context.span_id for s in sdk}) == len(tr) and all(
        0 < s.context.span_id < 2 ** 64 for s in sdk)
    for s, span in zip(sdk, tr):
        assert s.start_time == span.start_ns + OFFSET and s.end_time == span.end_ns + OFFSET
        want = None if span.parent is None else sdk[span.parent].context.span_id
        assert (s.parent.span_id if s.parent else None) == want
    # the same trace id gives the same ids; another one, other span ids
    again = otlp.spans(tr, trace_id=TRACE_ID)
    assert [s.context.span_id for s in again] == [s.context.span_id for s in sdk]
    other = otlp.spans(tr)
    assert other[0].context.trace_id != TRACE_ID
    assert other[0].context.span_id != sdk[0].context.span_id


def test_resource_attributes():
    res = otlp.spans(hand_trace(), service="trainer", resource={"deployment.environment": "ci"}
                     )[0].resource.attributes
    assert dict(res) == {"service.name": "trainer", "host.name": "node7", "process.pid": 4242,
                         "xsp.rank": 3, "xsp.world_size": 8, "xsp.clock.wall_anchor":
                         "recorded", "xsp.clock.wall_offset_ns": OFFSET,
                         "deployment.environment": "ci"}
    bare = otlp.spans(hand_trace(meta={"clock.wall_offset_ns": 0}))[0].resource.attributes
    assert bare["host.name"] == socket.gethostname()
    assert not {"process.pid", "xsp.rank", "xsp.world_size"} & set(bare)


def test_estimated_wall_clock_is_said():
    """A trace without meta clock.wall_offset_ns (an older file, a hand-made trace): anchored
    at export, with a warning and the resource attribute saying so."""
    tr = hand_trace(meta={})
    lo = time.time_ns() - time.monotonic_ns()
    with pytest.warns(xsp.XSPWarning, match="estimated|anchored to the wall clock at export"):
        sdk = otlp.spans(tr)
    hi = time.time_ns() - time.monotonic_ns()
    res = sdk[0].resource.attributes
    assert res["xsp.clock.wall_anchor"] == "estimated"
    off = res["xsp.clock.wall_offset_ns"]
    assert abs(off - lo) < 50_000_000 and abs(off - hi) < 50_000_000
    assert [s.start_time - off for s in sdk] == tr.start_ns.tolist()


def test_measurement_exports_its_trace_with_leveled_latencies():
    tr = hand_trace()

    class Measured:                 # duck typed as xsp.Measurement
        trace = tr

        def leveled_ns(self):
            return {2: 1234.5, 3: 77.0}

    sdk = otlp.spans(Measured())
    assert len(sdk) == len(tr)
    assert sdk[2].attributes["xsp.leveled_ns"] == 1234.5
    assert sdk[3].attributes["xsp.leveled_ns"] == 77.0
    assert "xsp.leveled_ns" not in sdk[4].attributes


def test_bad_options():
    tr = hand_trace()
    with pytest.raises(ValueError, match="trace_per"):
        otlp.spans(tr, trace_per="epoch")
    with pytest.raises(ValueError, match="trace_id"):
        otlp.spans(tr, trace_id=0)
    with pytest.raises(TypeError, match="xsp.Trace"):
        otlp.spans("trace.xsp")
    with pytest.raises(ValueError, match="http://"):
        otlp.send(tr, "localhost:4318")
    with pytest.raises(ValueError, match="batch"):
        otlp.send(tr, "http://127.0.0.1:1/v1/traces", batch=0)
    with pytest.raises(ValueError, match="timeout"):
        otlp.send(tr, "http://127.0.0.1:1/v1/traces", timeout=0)


def test_import_works_without_opentelemetry():
    """xsp.otlp imports without the extra; using it says what to install."""
    code = ("import sys; sys.modules['opentelemetry'] = None\n"
            "import xsp, xsp.otlp\n"
            "try:\n"
            "    xsp.formats.otlp.spans(xsp.Trace.from_spans([]))\n"
            "except ImportError as e:\n"
            "    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr
    assert "pip install xsp[otlp]" in r.stdout


# -- sending --------------------------------------------------------------------------------

def test_send_to_a_receiver():
    tr = hand_trace()
    with Receiver() as rx:
        n = otlp.send(tr, rx.url, service="trainer", trace_id=TRACE_ID)
    assert n == len(tr)
    assert rx.posts == ["/v1/traces"]
    received = rx.spans()
    check_against(tr, received)
    assert {sp.trace_id for _, sp in received} == {TRACE_ID.to_bytes(16, "big")}
    res = received[0][0]
    assert res["service.name"] == "trainer" and res["host.name"] == "node7"
    assert res["process.pid"] == 4242 and res["xsp.rank"] == 3 and res["xsp.world_size"] == 8
    scope = rx.requests[0].resource_spans[0].scope_spans[0].scope
    assert scope.name == "xsp" and scope.version == xsp.__version__


def test_one_trace_per_step():
    tr = hand_trace(steps=3)
    with Receiver() as rx:
        otlp.send(tr, rx.url, trace_per="step", trace_id=TRACE_ID)
    received = rx.spans()
    by_xsp = check_against(tr, received)
    step_ids = tr.nearest_ancestor(tr.kind_codes == xsp.values.trace.KINDS.index("step")).tolist()
    tid = [sp.trace_id for _, sp in received]
    steps = [s.id for s in tr.spans(kind="step")]
    assert len({tid[s] for s in steps}) == 3 and TRACE_ID.to_bytes(16, "big") not in \
        {tid[s] for s in steps}
    for span in tr:
        owner = step_ids[span.id]
        assert tid[span.id] == (tid[owner] if owner >= 0 else TRACE_ID.to_bytes(16, "big"))
    for s in steps:                 # the root of its trace, linked to the region
        sp = received[s][1]
        assert sp.parent_span_id == b""
        assert [(lk.trace_id, lk.span_id) for lk in sp.links] == [
            (TRACE_ID.to_bytes(16, "big"), by_xsp[0])]
    # every other parent is the xsp parent, in the same trace
    for span in tr:
        if span.parent is not None and span.kind != "step":
            assert received[span.id][1].parent_span_id == by_xsp[span.parent]


def test_batches():
    tr = hand_trace(steps=4)
    with Receiver() as rx:
        assert otlp.send(tr, rx.url, batch=7, trace_id=TRACE_ID) == len(tr)
    assert len(rx.requests) == math.ceil(len(tr) / 7)
    assert [sum(len(ss.spans) for rs in r.resource_spans for ss in rs.scope_spans)
            for r in rx.requests] == [7] * (len(tr) // 7) + ([len(tr) % 7] if len(tr) % 7
                                                            else [])
    check_against(tr, rx.spans())


def test_real_profile():
    """A real xsp.profile of a small model, two steps: every span arrives, nested as
    recorded, at its recorded time plus the trace's own wall-clock offset."""
    import torch
    from torch import nn
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(4, 8)
    with xsp.profile(levels="ML", record_shapes=True) as prof:
        for _ in range(2):
            model(x).sum().backward()
            prof.step()
    tr = prof.trace
    offset, anchor = otlp.wall_clock(tr)
    assert anchor == ("recorded" if "clock.wall_offset_ns" in tr.meta else "estimated")
    with Receiver() as rx, warnings.catch_warnings():
        warnings.simplefilter("ignore", xsp.XSPWarning)
        assert otlp.send(tr, rx.url, batch=50) == len(tr)
    received = rx.spans()
    check_against(tr, received, offset=offset)
    if "clock.wall_offset_ns" in tr.meta:   # recorded now: the wall time of the recording
        assert abs(received[0][1].start_time_unix_nano - time.time_ns()) < 600 * 10 ** 9
    modules = [sp for _, sp in received if attrs(sp.attributes)["xsp.kind"] == "module"]
    assert {attrs(sp.attributes)["xsp.module"] for sp in modules} >= {"0", "1", "2"}
    assert all("xsp.shapes" in attrs(sp.attributes) for sp in modules)
    assert len({sp.trace_id for _, sp in received}) == 1


@contextlib.contextmanager
def bounded(limit):
    t0 = time.monotonic()
    yield
    assert time.monotonic() - t0 < limit


def test_503_gives_the_error():
    tr = hand_trace()
    with Receiver("503") as rx, bounded(12), pytest.raises(otlp.ExportError) as ei:
        otlp.send(tr, rx.url, timeout=3)
    e = ei.value
    assert isinstance(e, RuntimeError)
    assert (e.endpoint, e.sent, e.total) == (rx.url, 0, len(tr))
    msg = str(e)
    assert rx.url in msg and "0 of %d spans" % len(tr) in msg and "HTTP 503" in msg
    assert len(rx.posts) >= 2               # retried: 503 is transient


def test_partial_send_counts_what_was_sent():
    tr = hand_trace()
    with Receiver("503", ok_first=2) as rx, pytest.raises(otlp.ExportError) as ei:
        otlp.send(tr, rx.url, timeout=2, batch=5)
    assert ei.value.sent == 10 and "10 of %d spans" % len(tr) in str(ei.value)
    assert "batch 3 of %d" % math.ceil(len(tr) / 5) in str(ei.value)
    assert sum(len(ss.spans) for r in rx.requests for rs in r.resource_spans
               for ss in rs.scope_spans) == 10


def test_stalled_receiver_times_out():
    tr = hand_trace()
    with Receiver("stall") as rx, bounded(12), pytest.raises(otlp.ExportError) as ei:
        otlp.send(tr, rx.url, timeout=1.5)      # the stall lasts 30 s: the bound is the timeout
    assert rx.url in str(ei.value) and "0 of %d" % len(tr) in str(ei.value)
    assert "timeout" in str(ei.value) or "timed out" in str(ei.value)


def test_timeout_bounds_all_batches():
    """The timeout is for the whole send, not per batch: a collector that takes 0.6 s per
    request, 1 span per request, timeout 2 s: about 3 batches get through, then the error,
    within 8 s, well before the len(tr) x 0.6 s = 12 s a per-batch timeout would take
    (margins wide enough for a loaded machine)."""
    tr = hand_trace()
    assert len(tr) * 0.6 >= 1.5 * 8
    with Receiver("slow", stall=0.6) as rx, bounded(8), pytest.raises(otlp.ExportError) as ei:
        otlp.send(tr, rx.url, timeout=2.0, batch=1)
    e = ei.value
    # sent counts the acknowledged spans; the batch that timed out may have arrived late
    assert 1 <= e.sent <= 5 and len(rx.requests) - e.sent in (0, 1) and e.total == len(tr)
    assert "%d of %d spans" % (e.sent, len(tr)) in str(e)


def test_refused_connection():
    url = closed_port_url()
    with bounded(12), pytest.raises(otlp.ExportError) as ei:
        otlp.send(hand_trace(), url, timeout=2)
    assert url in str(ei.value) and "connection refused" in str(ei.value)


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_transient_status_is_retried(status):
    """429, 502, 503 and 504 are retried (the SDK exporter's transient statuses), after the
    Retry-After the collector asks for (0 s here: no backoff to wait)."""
    tr = hand_trace()
    with Receiver(fail_first=(2, status, "0")) as rx, bounded(8):
        assert otlp.send(tr, rx.url, trace_id=TRACE_ID, timeout=5) == len(tr)
    assert len(rx.posts) == 3 and len(rx.requests) == 1
    assert rx.bodies[0] == rx.bodies[1] == rx.bodies[2]
    check_against(tr, rx.spans())


@pytest.mark.parametrize("status", [400, 500])
def test_other_status_is_not_retried(status):
    tr = hand_trace()
    with Receiver(fail_first=(1, status, None)) as rx, pytest.raises(otlp.ExportError) as ei:
        otlp.send(tr, rx.url, timeout=5)
    assert len(rx.posts) == 1 and ei.value.sent == 0
    assert "batch 1 of 1: HTTP %d" % status in str(ei.value) and "try later" in str(ei.value)


def test_headers():
    """Content-Type application/x-protobuf on every request; the headers given are sent, and
    win over xsp's whatever their case."""
    tr = hand_trace()
    with Receiver() as rx:
        otlp.send(tr, rx.url, batch=7, headers={"Authorization": "Bearer k", "user-AGENT": "me"})
    assert len(rx.headers) == math.ceil(len(tr) / 7) == 3
    for h in rx.headers:
        assert h["content-type"] == "application/x-protobuf"
        assert h["authorization"] == "Bearer k" and h["user-agent"] == "me"
        assert int(h["content-length"]) > 0


@pytest.mark.parametrize("trace_per", ["profile", "step"])
def test_requests_are_the_sdk_encoders_bytes(trace_per):
    """Each request's body is, byte for byte, what the OpenTelemetry SDK's encoder gives for
    the SDK spans of its batch (encode_spans(spans(...)[lo:hi]).SerializeToString()); the full
    comparison over every kind of trace is in test_json_writers.py."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    tr = hand_trace()
    opts = dict(trace_per=trace_per, trace_id=TRACE_ID, service="svc", leveled={2: 1.5},
                resource={"flag": True, "ratio": 0.25, "big": 2 ** 70, "n": -3, "": "dropped",
                          "nan": float("nan"), "s": "", "\u20ac": "\u20ac" * 50})
    sdk = otlp.spans(tr, **opts)
    with Receiver() as rx:
        otlp.send(tr, rx.url, batch=7, **opts)
    assert rx.bodies == [encode_spans(sdk[lo:lo + 7]).SerializeToString()
                         for lo in range(0, len(sdk), 7)]


def test_empty_trace_sends_nothing():
    with Receiver() as rx:
        assert otlp.send(xsp.Trace.from_spans([], meta=META), rx.url) == 0
    assert rx.posts == []


def test_send_needs_no_opentelemetry(tmp_path):
    """send encodes and posts by itself: with the OpenTelemetry packages and protobuf hidden,
    the receiver gets the trace."""
    tr = hand_trace()
    code = ("import sys; sys.modules['opentelemetry'] = None; sys.modules['google'] = None\n"
            "import xsp\n"
            "tr = xsp.load(sys.argv[1])\n"
            "print(xsp.formats.otlp.send(tr, sys.argv[2], trace_id=%d, batch=5))\n" % TRACE_ID)
    path = str(tmp_path / "t.xsp")
    xsp.save(tr, path)
    with Receiver() as rx:
        r = subprocess.run([sys.executable, "-c", code, path, rx.url], cwd=ROOT,
                           capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, PYTHONPATH=ROOT, NO_PROXY="127.0.0.1"))
    assert r.returncode == 0, r.stderr
    assert r.stdout == "%d\n" % len(tr)
    check_against(tr, rx.spans())


# -- OTLP/JSON ------------------------------------------------------------------------------

def test_json_is_what_is_sent(tmp_path):
    tr = hand_trace()
    path = str(tmp_path / "t.json")
    assert otlp.write_json(tr, path, trace_per="step", trace_id=TRACE_ID) == path
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    spans = [sp for rs in doc["resourceSpans"] for ss in rs["scopeSpans"]
             for sp in ss["spans"]]
    assert len(spans) == len(tr)
    for sp in spans:                # OTLP/JSON: ids as lowercase hex, enums as integers
        assert len(sp["traceId"]) == 32 and len(sp["spanId"]) == 16
        assert sp["traceId"] == sp["traceId"].lower() and int(sp["traceId"], 16)
        assert "parentSpanId" not in sp or len(sp["parentSpanId"]) == 16
        assert sp["kind"] == 1
        for lk in sp.get("links", ()):
            assert len(lk["traceId"]) == 32 and len(lk["spanId"]) == 16
    assert spans[0]["traceId"] == "%032x" % TRACE_ID
    # back to the protobuf mapping (base64 bytes), then the request: what send() sends
    for sp in spans:
        for item in [sp] + sp.get("links", []):
            for key in ("traceId", "spanId", "parentSpanId"):
                if key in item:
                    item[key] = base64.b64encode(bytes.fromhex(item[key])).decode()
    parsed = json_format.ParseDict(doc, trace_service_pb2.ExportTraceServiceRequest())
    with Receiver() as rx:
        otlp.send(tr, rx.url, trace_per="step", trace_id=TRACE_ID)
    assert parsed == rx.requests[0]


# -- the command line -----------------------------------------------------------------------

def xsp_cmd(*args, cwd):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    return subprocess.run([sys.executable, "-m", "xsp", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def saved(tmp_path):
    tr = hand_trace()
    xsp.save(tr, str(tmp_path / "f.xsp"))
    return tmp_path, tr, (tmp_path / "f.xsp").read_bytes()


def test_cli_sends(saved):
    d, tr, _ = saved
    with Receiver() as rx:
        r = xsp_cmd("export", "f.xsp", "--format", "otlp", "--endpoint", rx.url,
                    "--service", "trainer", "--trace-per", "step", cwd=d)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "sent %d spans to %s\n" % (len(tr), rx.url) and r.stderr == ""
    received = rx.spans()
    check_against(tr, received)
    assert received[0][0]["service.name"] == "trainer"
    assert len({sp.trace_id for _, sp in received}) == 4      # 3 steps and the profile


def test_cli_writes_json(saved):
    d, tr, _ = saved
    r = xsp_cmd("export", "f.xsp", "--format", "otlp-json", "-o", "out.json", cwd=d)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "wrote %d spans as OTLP JSON to out.json\n" % len(tr)
    doc = json.loads((d / "out.json").read_text())
    assert sum(len(ss["spans"]) for rs in doc["resourceSpans"]
               for ss in rs["scopeSpans"]) == len(tr)


@pytest.mark.parametrize("mode", ["503", "stall", "refused"])
def test_cli_failure_keeps_the_file(saved, mode):
    d, tr, before = saved
    with Receiver("503" if mode == "503" else "stall") as rx:
        url = closed_port_url() if mode == "refused" else rx.url
        t0 = time.monotonic()
        r = xsp_cmd("export", "f.xsp", "--format", "otlp", "--endpoint", url, "--timeout", "1.5",
                    cwd=d)
        took = time.monotonic() - t0
    assert r.returncode == 1 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("xsp: error: OTLP export to %s failed after "
                                                   "0 of %d spans" % (url, len(tr)))
    assert {"503": "HTTP 503", "stall": "timeout", "refused": "connection refused"}[mode] \
        in lines[0]
    assert took < 30                       # the interpreter's start, then about --timeout
    assert (d / "f.xsp").read_bytes() == before
    assert sorted(os.listdir(d)) == ["f.xsp"]


@pytest.mark.parametrize("args, msg", [
    (["--format", "otlp"], "--format otlp needs --endpoint URL"),
    (["--format", "otlp-json"], "--format otlp-json needs -o FILE"),
    (["--format", "chrome"], "--format chrome needs -o FILE"),
    (["--format", "kineto"], "--format kineto needs -o FILE"),
    (["--format", "otlp", "--endpoint", "http://127.0.0.1:1/v1/traces", "-o", "x.json"],
     "writes no file"),
    (["--format", "otlp", "--endpoint", "localhost:4318"], "http:// or https:// URL"),
    (["--format", "otlp", "--endpoint", "http://127.0.0.1:1/v1/traces", "--timeout", "0"],
     "--timeout must be"),
])
def test_cli_errors(saved, args, msg):
    d, _, before = saved
    r = xsp_cmd("export", "f.xsp", *args, cwd=d)
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("xsp: error: ") and msg in lines[0], r.stderr
    assert (d / "f.xsp").read_bytes() == before
