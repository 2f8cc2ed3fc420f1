"""OpenTelemetry export: a trace as OTLP spans, sent over OTLP/HTTP (protobuf) to a collector
(Jaeger, Tempo, an OpenTelemetry Collector) or written as OTLP/JSON (docs/format.md, "OTLP").

Both encodings are made by C from columns made here with numpy, streamed, with the GIL
released: send() POSTs (with requests) one protobuf request per batch of spans, encoded by
csrc/io/otlppb.c to the very bytes the OpenTelemetry SDK's encoder gives for the SDK spans that
spans() makes; write() writes the OTLP/JSON file (csrc/io/otlpw.c over the JSON layer
csrc/io/jsonw.c, gzip for .gz) to the same JSON value as the SDK's encoder and protobuf's JSON
mapping give (_reference_write, the Python writer it replaced, kept as the tests' reference).
Both take each span's ids, times and attributes from csrc/io/otlpspan.c, the mapping's one
place in C.  The OpenTelemetry packages are an optional extra (`pip install xsp[otlp]`) that
only spans() and to_json() need (they raise ImportError saying what to install when it is
missing); send() needs requests only, write() nothing; importing this module needs neither.

The mapping, in short: every xsp span is one OTLP span (kind INTERNAL, status unset) with the
xsp parent's span id as its parent span id; one trace id per profile, or one per step
(trace_per="step": the spans under each step span share that step's trace id, a step span is
the root of its trace and links to its xsp parent).  Ids are derived from one random 128-bit
trace id (or the one given), so span ids are unique within an export and the same trace id
gives the same ids.  Times are Unix-epoch ns: xsp's CLOCK_MONOTONIC ns plus the trace's meta
clock.wall_offset_ns (wall - monotonic, recorded with the trace), or an offset estimated at
export when the trace has none (resource attribute xsp.clock.wall_anchor says which).

Nothing here changes or removes a local file: send() only reads the trace, and write()
replaces its output path atomically.
"""
import concurrent.futures
import hashlib
import json
import math
import numbers
import os
import secrets
import socket
import struct
import time
import warnings

import numpy as np

from xsp import _core
from xsp.core.util import atomic_write, c_json_write, printable
from xsp._version import __version__
from xsp.core.errors import XSPWarning
from xsp.values.trace import KINDS, LEVELS, core_data

_INSTALL = "pip install xsp[otlp]"
_TRACE_PER = ("profile", "step")
# span attributes xsp sets itself; an xsp attribute whose "xsp.<key>" is one of them becomes
# "xsp.attr.<key>"
_OWN = ("xsp.level", "xsp.kind", "xsp.span_id", "xsp.thread", "xsp.thread_name",
        "xsp.module", "xsp.flags", "xsp.leveled_ns")
_INT64 = (-(1 << 63), 1 << 63)


class ExportError(RuntimeError):
    """An OTLP export that did not reach the collector, in whole or in part.

    endpoint: the URL; sent: spans the collector acknowledged (whole batches, in order; the
    batch that failed by timeout may still have reached it); total: spans of the export;
    reason: what failed (connection refused, HTTP status, timeout).  The local trace is
    untouched."""

    def __init__(self, endpoint, sent, total, reason):
        self.endpoint, self.sent, self.total, self.reason = endpoint, sent, total, reason
        super().__init__("OTLP export to %s failed after %d of %d spans were sent: %s"
                         % (endpoint, sent, total, reason))


def _otel():
    """The OpenTelemetry modules used here, or ImportError saying what to install."""
    try:
        from opentelemetry import trace as api
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    except ImportError as exc:
        raise ImportError("OTLP export needs the OpenTelemetry packages (%s): %s"
                          % (_INSTALL, exc)) from exc
    return api, Resource, ReadableSpan, InstrumentationScope


def _source(source, leveled):
    """(trace, leveled) of an xsp.Trace or an xsp.Measurement (duck typed: .trace and
    .leveled_ns()); leveled given explicitly wins over the measurement's."""
    if hasattr(source, "trace") and callable(getattr(source, "leveled_ns", None)):
        if leveled is None:
            leveled = source.leveled_ns()
        source = source.trace
    if not all(hasattr(source, a) for a in ("start_ns", "end_ns", "parent_ids", "meta")):
        raise TypeError("OTLP export takes an xsp.Trace or an xsp.Measurement, not %s"
                        % type(source).__name__)
    if leveled is not None and not hasattr(leveled, "get"):
        raise TypeError("leveled must be a dict {span id: ns} (Measurement.leveled_ns()), "
                        "not %s" % type(leveled).__name__)
    return source, leveled or {}


def wall_clock(trace):
    """(offset_ns, anchor): what to add to the trace's span times to get Unix-epoch ns, and
    where it comes from: "recorded" (meta clock.wall_offset_ns, wall - monotonic taken when
    the trace was recorded), "kineto" (a trace read from Kineto's JSON, whose times are
    already Unix-epoch: offset 0), or "estimated" (neither: time.time_ns() -
    time.monotonic_ns() now, right only for a trace recorded on this machine since its last
    boot and without a wall-clock step since).  Cannot fail."""
    off = trace.meta.get("clock.wall_offset_ns")
    if isinstance(off, int) and not isinstance(off, bool):
        return off, "recorded"
    if trace.meta.get("source") == "kineto":
        return 0, "kineto"
    return time.time_ns() - time.monotonic_ns(), "estimated"


def _value(v):
    """An xsp attribute or meta value as an OTLP attribute value (int64, double or string)."""
    if isinstance(v, bool):
        return v
    if isinstance(v, numbers.Integral):
        v = int(v)
        return v if _INT64[0] <= v < _INT64[1] else str(v)
    if isinstance(v, numbers.Real):
        return float(v)
    return printable(v if isinstance(v, str) else str(v))


def _resource_attrs(trace, service, anchor, offset, extra):
    meta = trace.meta
    host = meta.get("host")
    out = {"service.name": printable(str(service)),
           "host.name": printable(host) if isinstance(host, str) and host
           else socket.gethostname()}
    pid = meta.get("pid")
    if isinstance(pid, int) and not isinstance(pid, bool) and 0 <= pid < _INT64[1]:
        out["process.pid"] = pid
    for key in ("rank", "world_size"):
        if key in meta:
            out["xsp." + key] = _value(meta[key])
    out["xsp.clock.wall_anchor"] = anchor
    out["xsp.clock.wall_offset_ns"] = offset
    if extra is not None:
        items = getattr(extra, "attributes", extra)     # an OpenTelemetry Resource, or a dict
        if not hasattr(items, "items"):
            raise TypeError("resource must be a dict of extra resource attributes (or an "
                            "OpenTelemetry Resource), not %s" % type(extra).__name__)
        out.update((printable(str(k)), _value(v)) for k, v in items.items())
    return out


def _derive(seed, label, i, bits):
    """A nonzero id of `bits` bits, a function of (seed, label, i) only."""
    h = hashlib.blake2b(seed.to_bytes(16, "big") + i.to_bytes(8, "big", signed=True),
                        digest_size=bits // 8, person=label)
    return int.from_bytes(h.digest(), "big") or 1


class TimeRangeError(ValueError):
    """A span's time, anchored to the wall clock, is outside what OTLP can carry (0 to
    2**64-1 ns since the Unix epoch): the trace's times or its wall-clock offset are not
    what its meta says (a file made by hand or damaged)."""


def _trace_id(trace_id):
    """The profile's trace id: the one given, checked, or a random one."""
    if trace_id is None:
        return secrets.randbits(128) or 1
    if isinstance(trace_id, bool) or not isinstance(trace_id, int):
        raise TypeError("trace_id must be an int, not %s" % type(trace_id).__name__)
    if not 0 < trace_id < 1 << 128:
        raise ValueError("trace_id must be from 1 to 2**128-1 (a nonzero 128-bit id), not %d"
                         % trace_id)
    return trace_id


class _Export:
    """What an export of a trace is made of, computed once for spans() and write():
    trace, leveled ({span id: value}), offset and anchor (wall_clock), resource (the resource
    attributes, a dict), base (span id of xsp span 0), trace_ids (the profile's trace id, then
    one per step with trace_per="step") and trace_ix (per span, an int32 index into trace_ids;
    None: all the profile's).  Raises as spans() does; warns when the wall clock is
    estimated."""

    def __init__(self, source, service, trace_per, leveled, resource, trace_id):
        trace, leveled = _source(source, leveled)
        if trace_per not in _TRACE_PER:
            raise ValueError("trace_per must be 'profile' or 'step', not %r" % (trace_per,))
        trace_id = _trace_id(trace_id)
        offset, anchor = wall_clock(trace)
        if anchor == "estimated":
            warnings.warn("the trace has no meta clock.wall_offset_ns (it was recorded by an "
                          "older xsp, or made by hand): its times were anchored to the wall "
                          "clock at export, which is right only if it was recorded on this "
                          "machine since its last boot", XSPWarning, stacklevel=3)
        self.trace, self.leveled, self.offset, self.anchor = trace, leveled, offset, anchor
        self.resource = _resource_attrs(trace, service, anchor, offset, resource)
        n = len(trace)
        # span ids: seed + xsp id, the seed chosen so that none is 0 or past 2**64-1
        self.base = 1 + _derive(trace_id, b"xsp.span", 0, 64) % ((1 << 64) - n - 1)
        self.trace_ids, self.trace_ix = [trace_id], None
        if trace_per == "step" and n:
            step = trace.nearest_ancestor(trace.kind_codes == KINDS.index("step"))
            steps = np.unique(step[step >= 0])
            self.trace_ids += [_derive(trace_id, b"xsp.step", s, 128) for s in steps.tolist()]
            ix = np.searchsorted(steps, step) + 1
            self.trace_ix = np.where(step >= 0, ix, 0).astype(np.int32)
        _check_times(trace, offset, anchor)


def _check_times(trace, offset, anchor):
    """TimeRangeError naming the first span whose start or end, plus offset, is not from 0 to
    2**64-1 ns (the trace's times are the uint64 its columns hold as int64).  Vectorised but
    for the search of that span, when there is one."""
    if not len(trace):
        return
    start, end = trace.start_ns.view(np.uint64), trace.end_ns.view(np.uint64)
    if (int(min(start.min(), end.min())) + offset >= 0
            and int(max(start.max(), end.max())) + offset < 1 << 64):
        return
    for i, (s, e) in enumerate(zip(start.tolist(), end.tolist())):
        why = ("starts before the Unix epoch" if s + offset < 0 else
               "ends past 2**64-1 ns" if e + offset >= 1 << 64 else
               "starts past 2**64-1 ns" if s + offset >= 1 << 64 else
               "ends before the Unix epoch" if e + offset < 0 else None)
        if why:
            raise TimeRangeError("span %d %s once anchored to the wall clock (offset %d ns, "
                                 "%s): the trace's times are not what its meta says"
                                 % (i, why, offset, anchor))


def spans(source, *, service="xsp", trace_per="profile", leveled=None, resource=None,
          trace_id=None):
    """The trace's spans as OpenTelemetry SDK spans (a list of ReadableSpan, in xsp id
    order), ready for any SpanExporter.

    source: an xsp.Trace, or an xsp.Measurement (its .trace, with its leveled latencies).
    service: resource attribute service.name.  trace_per: "profile" (one trace id for the
    whole trace) or "step" (one per step span, for the spans under it; the rest, such as the
    region, keep the profile's).  leveled: {xsp span id: leveled latency ns}, as
    Measurement.leveled_ns() gives, exported as span attribute xsp.leveled_ns.  resource: a
    dict of extra resource attributes (they win over xsp's).  trace_id: the profile's trace id
    (an int of 1 to 2**128-1; default: random); every other id is derived from it, so the
    same trace_id gives the same ids.

    Span ids are unique within the export; a span's parent span id is its xsp parent's span
    id (with trace_per="step", a span whose parent is in another trace, a step span, is a root
    and links to that parent instead).  Times are Unix-epoch ns (wall_clock(trace)); with no
    recorded wall-clock anchor an XSPWarning says that it was estimated at export.  Raises
    ImportError without the OpenTelemetry packages, ValueError or TypeError for a bad option,
    TimeRangeError (a ValueError) for times that cannot be Unix-epoch ns; the trace is only
    read."""
    api, Resource, ReadableSpan, InstrumentationScope = _otel()
    ex = _Export(source, service, trace_per, leveled, resource, trace_id)
    trace, leveled, offset = ex.trace, ex.leveled, ex.offset
    res = Resource(ex.resource)
    scope = InstrumentationScope("xsp", __version__)
    n = len(trace)
    base = ex.base
    parents = trace.parent_ids.tolist()
    ids = ex.trace_ids
    trace_of = [ids[0]] * n if ex.trace_ix is None else [ids[k] for k in ex.trace_ix.tolist()]
    sampled = api.TraceFlags(api.TraceFlags.SAMPLED)
    ctx = [api.SpanContext(trace_of[i], base + i, is_remote=False, trace_flags=sampled)
           for i in range(n)]
    # Unix-epoch times, in Python ints, from the file's uint64 times (the int64 columns wrap
    # past 2**63); _Export checked their range
    start = [t + offset for t in trace.start_ns.view(np.uint64).tolist()]
    end = [t + offset for t in trace.end_ns.view(np.uint64).tolist()]
    names = [printable(s) for s in trace.strings]
    name_codes, kind_codes = trace.name_codes.tolist(), trace.kind_codes.tolist()
    level_codes, thread_index = trace.level_codes.tolist(), trace.thread_index.tolist()
    flags = trace.flag_bits.tolist()
    named = {KINDS.index("model"), KINDS.index("module")}
    # the attributes every span of a (level, kind, track) starts with, in their order, made
    # once and copied (xsp.span_id set in its place)
    tracks = [{"xsp.thread": _value(int(tid)), "xsp.thread_name": printable(name or "")}
              for tid, name, _k in trace.threads]
    first = {}
    keys = {}                       # xsp attribute key -> its OTLP name before renaming
    attrs_of, internal = trace.attrs_of, api.SpanKind.INTERNAL
    parent_attrs = {"xsp.link": "parent"}
    out = []
    for i in range(n):
        lk = (level_codes[i], kind_codes[i], thread_index[i])
        base_attrs = first.get(lk)
        if base_attrs is None:
            th = tracks[lk[2]]
            base_attrs = {"xsp.level": LEVELS[lk[0]], "xsp.kind": KINDS[lk[1]],
                          "xsp.span_id": 0, "xsp.thread": th["xsp.thread"]}
            if th["xsp.thread_name"]:
                base_attrs["xsp.thread_name"] = th["xsp.thread_name"]
            first[lk] = base_attrs
        attrs = base_attrs.copy()
        attrs["xsp.span_id"] = i
        if lk[1] in named:
            attrs["xsp.module"] = names[name_codes[i]]
        if flags[i]:
            attrs["xsp.flags"] = flags[i]
        if i in leveled:
            attrs["xsp.leveled_ns"] = float(leveled[i])
        for k, v in attrs_of(i).items():
            key = keys.get(k)
            if key is None:
                key = keys[k] = "xsp." + printable(k)
            while key in attrs:
                key = "xsp.attr." + key[len("xsp."):]
            # the trace's values: int64, float or str (_value's cases that can occur)
            attrs[key] = printable(v) if v.__class__ is str else v
        p = parents[i]
        parent, links = None, ()
        if p >= 0:
            if trace_of[p] == trace_of[i]:
                parent = ctx[p]
            else:                   # a step span under the region: its own trace's root
                links = (api.Link(ctx[p], parent_attrs),)
        out.append(ReadableSpan(names[name_codes[i]], context=ctx[i], parent=parent,
                                resource=res, attributes=attrs, links=links,
                                kind=internal, start_time=start[i],
                                end_time=end[i], instrumentation_scope=scope))
    return out


def _check_send_options(endpoint, timeout, batch, headers):
    if not isinstance(endpoint, str) or not endpoint.lower().startswith(("http://",
                                                                         "https://")):
        raise ValueError("endpoint must be an http:// or https:// URL (an OTLP/HTTP traces "
                         "endpoint, e.g. http://localhost:4318/v1/traces), not %r"
                         % (endpoint,))
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) \
            or not 0 < timeout < math.inf:
        raise ValueError("timeout must be a number of seconds > 0, not %r" % (timeout,))
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError("batch must be an int >= 1 (spans per request), not %r" % (batch,))
    if headers is not None and not (hasattr(headers, "items") and all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items())):
        raise TypeError("headers must be a dict of str to str, not %r" % (headers,))


# what send() retries, as the SDK's exporter does (opentelemetry-exporter-otlp-proto-http 1.45.2,
# opentelemetry/exporter/otlp/common/http.py): HTTP 429, 502, 503, 504 and connection errors
# (a timeout included), at most 6 attempts, waiting 2**k s (+-20%) before attempt k + 2 or what
# Retry-After says, never past the timeout; a connection error is retried once at once first
_RETRY_STATUS = frozenset((429, 502, 503, 504))
_MAX_ATTEMPTS = 6
_JITTER = 0.2


def _requests():
    """The requests module, or ImportError saying what to install."""
    try:
        import requests
    except ImportError as exc:
        raise ImportError("otlp.send needs the requests package (pip install requests, or %s): "
                          "%s" % (_INSTALL, exc)) from exc
    return requests


def _retry_after(response):
    """Seconds the collector's Retry-After asks to wait (delay-seconds or an HTTP-date), or
    None (no header, or one that cannot be read)."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    import datetime
    import email.utils
    try:
        at = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=datetime.timezone.utc)
    return max(at.timestamp() - time.time(), 0.0)


class _Poster:
    """POSTs request bodies to one endpoint through one requests.Session (its connection kept
    alive from batch to batch), retrying as the SDK's exporter does (_RETRY_STATUS above).
    The request is prepared once (headers, the environment's proxies and certificates, as
    Session.request would take them for each) and given each body in turn.  attempts and last
    (the last response or exception) say how the last post went."""

    def __init__(self, requests, endpoint, headers):
        self.requests = requests
        self.session = requests.Session()
        hdrs = {"content-type": "application/x-protobuf", "user-agent": "xsp/" + __version__}
        hdrs.update((k.lower(), v) for k, v in (headers or {}).items())
        self.transient = (requests.exceptions.ConnectionError, requests.exceptions.Timeout)
        self.attempts, self.last = 0, None
        try:
            self.base = self.session.prepare_request(
                requests.Request("POST", endpoint, headers=hdrs, data=b""))
            self.settings = self.session.merge_environment_settings(
                self.base.url, {}, None, None, None)
            self.error = None
        except Exception as exc:        # a URL requests cannot use: every post fails with it
            self.base, self.error = None, exc

    def close(self):
        self.session.close()

    def _request(self, body, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            self.last = self.requests.exceptions.Timeout("the timeout was spent")
            return
        self.attempts += 1
        if self.error is not None:
            self.last = self.error
            return
        prep = self.base.copy()
        prep.prepare_body(body, None)
        try:
            self.last = self.session.send(prep, timeout=left, allow_redirects=False,
                                          **self.settings)
        except Exception as exc:        # what requests raises: the reason of the failure
            self.last = exc

    def post(self, body, limit):
        """Whether the collector accepted body (HTTP 2xx or 3xx) within limit seconds, its
        retries included."""
        import random
        deadline = time.monotonic() + limit
        self.attempts, self.last = 0, None
        for attempt in range(_MAX_ATTEMPTS):
            backoff = 2 ** attempt * random.uniform(1 - _JITTER, 1 + _JITTER)
            self._request(body, deadline)
            if isinstance(self.last, self.transient) and time.monotonic() < deadline:
                self._request(body, deadline)       # a stale pooled connection: once, at once
            last = self.last
            if isinstance(last, self.requests.Response):
                if 200 <= last.status_code < 400:
                    return True
                transient = last.status_code in _RETRY_STATUS
                after = _retry_after(last) if transient else None
                if after is not None:
                    backoff = after
            else:
                transient = isinstance(last, self.transient)
            if (not transient or attempt + 1 == _MAX_ATTEMPTS
                    or backoff > deadline - time.monotonic()):
                return False
            time.sleep(backoff)
        return False

    def why(self, timeout):
        """What failed, in words, from the last post."""
        requests, last = self.requests, self.last
        tries = "" if self.attempts < 2 else " (%d attempts)" % self.attempts
        if isinstance(last, requests.Response):
            text = (last.text or "").strip().replace("\n", " ")
            return "HTTP %d %s%s%s" % (last.status_code, last.reason or "", tries,
                                       (": " + text[:200]) if text else "")
        if isinstance(last, requests.exceptions.Timeout):
            return "no answer in time (timeout %gs, for all batches and retries)%s" % (
                timeout, tries)
        if isinstance(last, requests.exceptions.ConnectionError):
            chain, exc = [], last
            while exc is not None and len(chain) < 8:
                chain.append(exc)
                exc = exc.__cause__ or exc.__context__ or (exc.args[0] if exc.args and isinstance(
                    exc.args[0], BaseException) else None)
            if any(isinstance(e, ConnectionRefusedError) or "refused" in str(e) for e in chain):
                return "connection refused%s" % tries
            return "cannot connect: %s%s" % (last, tries)
        return "%s: %s%s" % (type(last).__name__, last, tries)


def _pb_varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _pb_field(tag, payload):
    """A length-delimited field: tag (its first byte), the length, the bytes."""
    return bytes((tag,)) + _pb_varint(len(payload)) + payload


def _pb_any(v):
    """An attribute value (as _value gives it) as a serialized AnyValue."""
    if isinstance(v, bool):
        return b"\x10\x01" if v else b"\x10\x00"            # 2: bool_value
    if isinstance(v, int):
        return b"\x18" + _pb_varint(v % (1 << 64))          # 3: int_value (two's complement)
    if isinstance(v, float):
        return b"\x21" + struct.pack("<d", v)               # 4: double_value
    return _pb_field(0x0A, v.encode("utf-8"))               # 1: string_value


def _pb_resource(attrs):
    """The serialized Resource of the export's resource attributes (a KeyValue each, in
    order; an empty key dropped, as the SDK's Resource drops it), as the SDK's encoder gives
    it."""
    return b"".join(_pb_field(0x0A, _pb_field(0x0A, k.encode("utf-8"))
                              + _pb_field(0x12, _pb_any(v)))
                    for k, v in attrs.items() if k)


def _pb_scope():
    """The serialized InstrumentationScope: name "xsp", version xsp's."""
    return _pb_field(0x0A, b"xsp") + _pb_field(0x12, __version__.encode("utf-8"))


def send(source, endpoint, *, service="xsp", trace_per="profile", timeout=10.0, batch=1000,
         headers=None, leveled=None, resource=None, trace_id=None):
    """Sends the trace (an xsp.Trace or xsp.Measurement; options as spans()) as OTLP/HTTP
    protobuf to endpoint, the collector's traces URL (e.g. http://localhost:4318/v1/traces),
    in requests of at most `batch` spans, with the HTTP headers given (Content-Type
    application/x-protobuf; a header given wins over xsp's, by name in any case).  Returns the
    number of spans sent (all of them; 0 for an empty trace, with no request).

    Each request is encoded by C (csrc/io/otlppb.c, in a thread with the GIL released, the
    next batch while one is posted: at most two requests' bytes are held) to the bytes the
    OpenTelemetry SDK's encoder gives for spans() of the same batch, and POSTed with requests:
    the OpenTelemetry packages are not needed, requests is.  Nothing is read from the
    OTEL_EXPORTER_OTLP_* environment variables: the endpoint, headers and timeout are the
    arguments.  What is transient is
    retried as the SDK's exporter retries it (connection errors and timeouts, HTTP 429, 502,
    503, 504; up to 6 attempts, backoff 1, 2, 4, 8, 16 s +-20%, or the Retry-After asked);
    `timeout` bounds the time spent on the collector, every batch and retry together
    (connecting, sending, waiting for answers and between retries); encoding, about 0.2 us a
    span (docs/performance.md), comes on top.  When a batch fails, raises ExportError (a
    RuntimeError) naming the endpoint, how many spans of how many were sent (the batches
    before it) and what failed (connection refused, the HTTP status, no answer within the
    timeout).  ImportError without requests; ValueError or TypeError for a bad option,
    TimeRangeError as spans(), before anything is sent.  Reads the trace only: nothing local
    is changed or removed."""
    _check_send_options(endpoint, timeout, batch, headers)
    requests = _requests()
    ex = _Export(source, service, trace_per, leveled, resource, trace_id)
    total, sent = len(ex.trace), 0
    if not total:
        return 0
    n_batches = -(-total // batch)
    encode = _encoder(ex)
    waited = 0.0                    # seconds spent on the collector so far
    poster = _Poster(requests, endpoint, headers)
    # the next batch is encoded (the GIL released) while this one is posted
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="xsp-otlp-encode")
    try:
        following = pool.submit(encode, 0, min(batch, total))
        for k, lo in enumerate(range(0, total, batch)):
            hi = min(lo + batch, total)
            body = following.result()
            following = pool.submit(encode, hi, min(hi + batch, total)) if hi < total else None
            left = float(timeout) - waited
            if left <= 0:
                raise ExportError(endpoint, sent, total, "timed out: the timeout (%gs) was "
                                  "spent before batch %d of %d" % (timeout, k + 1, n_batches))
            t0 = time.monotonic()
            ok = poster.post(body, left)
            waited += time.monotonic() - t0
            if not ok:
                raise ExportError(endpoint, sent, total, "batch %d of %d: %s" % (
                    k + 1, n_batches, poster.why(timeout)))
            sent += hi - lo
            del body
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        poster.close()
    return sent


def _encoder(ex):
    """encode(lo, hi): the request of spans lo to hi - 1 of the export ex (a non-empty trace),
    the serialized ExportTraceServiceRequest (csrc/io/otlppb.c, the GIL released)."""
    data, cols = core_data(ex.trace), _cols(ex)
    res, scope = _pb_resource(ex.resource), _pb_scope()
    return lambda lo, hi: _core.encode_otlp(data, res, scope, cols, lo, hi)


def _bodies(ex, batch):
    """(lo, hi, body) for each batch of the export ex, as send() sends them: spans lo to hi - 1
    and their request; none for an empty trace."""
    total = len(ex.trace)
    if not total:
        return
    encode = _encoder(ex)
    for lo in range(0, total, batch):
        hi = min(lo + batch, total)
        yield lo, hi, encode(lo, hi)


def _hex_ids(obj):
    """OTLP/JSON: the protobuf JSON mapping writes bytes as base64; OTLP wants trace and span
    ids as lowercase hex.  Converts traceId, spanId and parentSpanId (spans and links) in
    place."""
    import base64
    for rs in obj.get("resourceSpans", ()):
        for ss in rs.get("scopeSpans", ()):
            for sp in ss.get("spans", ()):
                for item in [sp] + list(sp.get("links", ())):
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in item:
                            item[key] = base64.b64decode(item[key]).hex()
    return obj


def to_json(source, **options):
    """The OTLP/JSON encoding of the export (one ExportTraceServiceRequest, as a dict):
    the SDK's encoder, protobuf's JSON mapping (lowerCamelCase names, enums as integers,
    64-bit integers as decimal strings, default values left out), ids as lowercase hex.
    options: as spans()."""
    try:
        from google.protobuf import json_format
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    except ImportError as exc:
        raise ImportError("OTLP export needs the OpenTelemetry packages (%s): %s"
                          % (_INSTALL, exc)) from exc
    request = encode_spans(spans(source, **options))
    return _hex_ids(json_format.MessageToDict(request, use_integers_for_enums=True))


def write(source, path, *, service="xsp", trace_per="profile", leveled=None, resource=None,
          trace_id=None, fsync=False):
    """Writes the OTLP/JSON of the export (the value to_json(source, ...) gives; options as
    spans()) to path, atomically: a file that Jaeger's UI loads ("JSON File" upload) and that
    an OTLP/HTTP JSON receiver accepts.  A path ending in .gz is gzip-compressed; fsync=True
    makes the file durable before this returns (docs/api.md, xsp.save).  Returns path.  The spans are written by C (csrc/io/otlpw.c), streamed, with the GIL released, from
    columns made here; the OpenTelemetry packages are not needed.  Raises OSError when it
    cannot be written (what was at path stays), ValueError, TypeError or TimeRangeError as
    spans(), before anything is written."""
    ex = _Export(source, service, trace_per, leveled, resource, trace_id)
    path = os.fspath(path)
    head, tail, cols = _columns(ex)
    c_json_write(path, _core.write_otlp, core_data(ex.trace), head, tail, cols, fsync)
    return path


def _any_value(v):
    """An attribute value (as _value gives it) in protobuf's JSON mapping of an AnyValue."""
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v if math.isfinite(v) else
                "NaN" if math.isnan(v) else "Infinity" if v > 0 else "-Infinity"}
    return {"stringValue": v}


def _columns(ex):
    """(head, tail, cols): the text around the spans (the request, its one resource and scope)
    and the columns of xsp_otlp_cols (csrc/io/otlpspan.h) for the export ex."""
    if not len(ex.trace):           # no spans: the request's JSON mapping is empty
        return b"{}", b"\n", _cols(ex)
    # the resource's attributes as the SDK's Resource keeps them (an empty key is dropped)
    res = [{"key": k, "value": _any_value(v)} for k, v in ex.resource.items() if k]
    head = '{"resourceSpans":[{"resource":%s,"scopeSpans":[{"scope":%s,"spans":[' % (
        json.dumps({"attributes": res}, separators=(",", ":")),
        json.dumps({"name": "xsp", "version": __version__}, separators=(",", ":")))
    return head.encode("utf-8"), b"]}]}]}\n", _cols(ex)


def _cols(ex):
    """The columns of xsp_otlp_cols (csrc/io/otlpspan.h) for the export ex, as write_otlp and
    encode_otlp take them."""
    n = len(ex.trace)
    if not n:
        return {"span_base": 0, "offset": 0, "trace_hi": np.ones(1, np.uint64),
                "trace_lo": np.ones(1, np.uint64), "trace_ix": np.zeros(0, np.int32),
                "lev_id": np.zeros(0, np.int64), "lev_val": np.zeros(0, np.float64)}
    lev_id, lev_val = _leveled_columns(ex.leveled, n)
    ids = ex.trace_ids
    return {"span_base": ex.base, "offset": ex.offset % (1 << 64),
            "trace_hi": np.array([t >> 64 for t in ids], dtype=np.uint64),
            "trace_lo": np.array([t & ((1 << 64) - 1) for t in ids], dtype=np.uint64),
            "trace_ix": np.zeros(0, np.int32) if ex.trace_ix is None else ex.trace_ix,
            "lev_id": lev_id, "lev_val": lev_val}


def _leveled_columns(leveled, n):
    """(ids, values) of leveled ({span id: ns}) for the spans 0..n-1 that `i in leveled`
    finds, increasing, the values as float() makes them."""
    ids = set()
    for k in leveled:
        try:
            i = int(k)
        except (TypeError, ValueError, OverflowError):
            continue
        if 0 <= i < n and i == k:
            ids.add(i)
    ids = sorted(i for i in ids if i in leveled)
    return (np.array(ids, dtype=np.int64),
            np.array([float(leveled[i]) for i in ids], dtype=np.float64))


# -- the reference: the Python writer the C one replaced, kept for the tests that compare them
def _reference_write(source, path, **options):
    """Writes the OTLP/JSON of the export as write did before the C writer: the SDK's encoder
    and protobuf's JSON mapping (to_json), one json.dumps (tests/py/formats/
    test_json_writers.py compares the two).  Needs the OpenTelemetry packages."""
    text = json.dumps(to_json(source, **options), separators=(",", ":")) + "\n"
    atomic_write(path, lambda f: f.write(text))
    return path


def write_json(source, path, **options):
    """Deprecated: xsp.save(source, path) (an .otlp.json path), or write(source, path)."""
    from xsp.core.util import deprecated
    deprecated("xsp.otlp.write_json(source, path)", "xsp.save(source, path)")
    return write(source, path, **options)


__all__ = ["ExportError", "TimeRangeError", "spans", "send", "to_json", "write", "wall_clock"]
