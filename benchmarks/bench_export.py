"""Exporting a trace: xsp.save to Kineto's JSON (.pt.trace.json), to Chrome trace-event JSON
(.json) and to OTLP/JSON (.otlp.json), and the OTLP export over HTTP (otlp.send to a local sink:
its requests encoded by C, csrc/io/otlppb.c, and posted with requests; and otlp.spans, the
OpenTelemetry SDK spans that an SDK exporter would take) against torch.profiler's
export_chrome_trace of the same workload, at several sizes (linear in spans?).

The workload: a Python loop of small aten ops (x.add_(1) on a 4-element tensor: add_ and the
scalar's conversion, 5 op events each), as many as make --spans spans, recorded once by
torch.profiler (CPU activity) and once by xsp (levels ML), in this process; the two recordings
hold the same ops.  Then, --rounds times interleaved in a shuffled order (common.rounds),
torch's export_chrome_trace (of a fresh recording each round: its results export once),
xsp.save(.pt.trace.json), xsp.save(.json) and xsp.save(.otlp.json) of the xsp trace, each to
a fresh file on the same disk; otlp.send to a sink on 127.0.0.1 (a child process that reads
each request and answers 200 with an empty response: xsp's encoding and the HTTP requests, no
collector's work; it needs requests only) and, with the OpenTelemetry packages (xsp[otlp]),
otlp.spans (the SDK spans); the figures are medians.  With --reference, the Python writers the
C ones replaced (kineto._reference_write, chrome._reference_write, otlp._reference_write: the
SDK's encoder and protobuf's JSON mapping) at the smallest size, for comparison.  --no-send
leaves otlp.send out.

xsp.save leaves the JSON exports to the kernel's writeback, as torch's export_chrome_trace
does (neither fsyncs); every timed write starts after an os.sync() (not timed), so that none
waits for the disk to take the pages an earlier one left.  --durable adds the three saves with fsync=True (the file and its
directory fsynced before the save returns, docs/api.md), each its own variant in the rounds.

    python benchmarks/bench_export.py [--spans 100000,1000000] [--rounds 3] [--reference]
                                      [--xsp-only 10000000] [--profile-memory] [--no-send]
                                      [--durable]

--profile-memory: the loop is of x + 1 (an allocation and a free each) and both profilers
record memory: torch writes its "[memory]" instants, xsp its sums, written back as those
instants in the Kineto export.

--xsp-only N: also xsp's exports alone at N spans, one round (10^7: torch.profiler's recording
and export of as many would take most of this VM's memory), for the linearity of xsp's
writers and of otlp.send (unless --no-send).

Prints per size: spans/events, each export's seconds and us per span, the file sizes (for
otlp.send the request bytes the sink read), and the ratios xsp / torch (the target: <= 1.0);
for the file writers also the calling thread's CPU time (time.thread_time: user and system,
where the writers run, the GIL released, as torch's export) and its ratio to torch's: the
wall time less what the thread waited for (the disk, the VM's host, other processes).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import common


MEMORY = False      # --profile-memory: x + 1 (an allocation and a free), memory recorded


def workload(n):
    import torch
    x = torch.zeros(4)

    def run():
        if MEMORY:
            for _ in range(n):
                x + 1
        else:
            for _ in range(n):
                x.add_(1)
    return run


def ops_for(spans):
    """The ops that make about spans spans (each x.add_(1) records a few: add_ and the
    scalar's conversion), from a recording of 1000 ops."""
    import xsp
    with xsp.profile(levels="ML", profile_memory=MEMORY) as prof:
        workload(1000)()
    return max(1, round(spans * 1000 / len(prof.trace)))


def record_torch(n):
    """torch.profiler's profile of n ops (its results can be exported once only: one
    recording per round)."""
    import torch
    run = workload(n)
    workload(100)()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=MEMORY) as p:
        run()
    return p


def record_xsp(n):
    import xsp
    run = workload(n)
    workload(100)()
    with xsp.profile(levels="ML", profile_memory=MEMORY) as prof:
        run()
    return prof.trace


def torch_export(n, path, events):
    """Records n ops with torch.profiler (not timed) and times its export_chrome_trace."""
    p = record_torch(n)
    r = timed(p.export_chrome_trace, path)
    events.append(len(p.events()))
    return r


def timed(fn, path):
    """Times fn(path), a write of a new file, from a clean page cache: os.sync() first (not
    timed), so that no write waits for the writeback of an earlier one's pages."""
    if os.path.exists(path):
        os.unlink(path)
    os.sync()
    c0 = time.thread_time()
    t0 = time.perf_counter()
    fn(path)
    dt = time.perf_counter() - t0
    cpu = time.thread_time() - c0
    size = os.path.getsize(path)
    os.unlink(path)
    return {"s": dt, "cpu": cpu, "bytes": size}


def timed_call(fn):
    """Times fn() (freeing its result is not timed)."""
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    del out
    return {"s": dt, "bytes": 0}

# The OTLP/HTTP sink: reads each POST and answers 200 with an empty
# ExportTraceServiceResponse (zero bytes); prints its port.  A GET answers the bytes of the
# request bodies read so far (and resets the count).
SINK = r"""
import http.server, sys
got = [0]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        out = str(got[0]).encode()
        got[0] = 0
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        self.rfile.read(n)
        got[0] += n
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


def timed_send(tr, url, tid):
    """Times otlp.send of tr to the sink (all batches and requests); bytes: what the sink read."""
    import urllib.request
    from xsp.formats import otlp
    urllib.request.urlopen(url).read()             # the sink's count reset
    t0 = time.perf_counter()
    otlp.send(tr, url, trace_id=tid, timeout=3600)
    dt = time.perf_counter() - t0
    return {"s": dt, "bytes": int(urllib.request.urlopen(url).read())}


def have_otlp():
    try:
        import opentelemetry.exporter.otlp.proto.http  # noqa: F401
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", default="100000,1000000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reference", action="store_true")
    ap.add_argument("--xsp-only", type=int, default=0)
    ap.add_argument("--profile-memory", action="store_true")
    ap.add_argument("--no-send", action="store_true")
    ap.add_argument("--durable", action="store_true")
    args = ap.parse_args(argv)
    global MEMORY
    MEMORY = args.profile_memory
    import torch

    import xsp
    from xsp.formats import chrome, kineto, otlp
    torch.set_num_threads(1)
    d = tempfile.mkdtemp(prefix="xsp-bench-export-")
    sdk = have_otlp()
    sink = url = None
    if not args.no_send:
        sink = subprocess.Popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True,
                                env=dict(os.environ, PYTHONPATH=""))
        url = "http://127.0.0.1:%s/v1/traces" % sink.stdout.readline().strip()
        os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1"
        import requests  # noqa: F401  (imported before the timing, as torch's modules are)
    tid = 0x0123456789ABCDEF0123456789ABCDEF     # one trace id: no random part
    print("exports of a loop of %s; %s" % (
        "x + 1 with profile_memory" if MEMORY else "aten::add_", common.machine()))
    sizes = [int(x) for x in args.spans.split(",")]
    try:
        for n in sizes:
            ops = ops_for(n)
            tr = record_xsp(ops)
            events = []
            variants = {
                "torch export_chrome_trace": lambda: torch_export(ops, os.path.join(d, "t.json"),
                                                                  events),
                "xsp.save .pt.trace.json": lambda: timed(lambda f: xsp.save(tr, f),
                                                         os.path.join(d, "x.pt.trace.json")),
                "xsp.save .json": lambda: timed(lambda f: xsp.save(tr, f),
                                                os.path.join(d, "x.json")),
                "xsp.save .otlp.json": lambda: timed(lambda f: xsp.save(tr, f, trace_id=tid),
                                                     os.path.join(d, "x.otlp.json")),
            }
            if args.durable:
                variants["xsp.save .pt.trace.json fsync"] = lambda: timed(
                    lambda f: xsp.save(tr, f, fsync=True), os.path.join(d, "y.pt.trace.json"))
                variants["xsp.save .json fsync"] = lambda: timed(
                    lambda f: xsp.save(tr, f, fsync=True), os.path.join(d, "y.json"))
                variants["xsp.save .otlp.json fsync"] = lambda: timed(
                    lambda f: xsp.save(tr, f, trace_id=tid, fsync=True),
                    os.path.join(d, "y.otlp.json"))
            if sdk:
                variants["otlp.spans (SDK spans)"] = lambda: timed_call(
                    lambda: otlp.spans(tr, trace_id=tid))
            if url:
                variants["otlp.send (local sink)"] = lambda: timed_send(tr, url, tid)
            if args.reference and n == min(sizes):
                variants["Python writer, Kineto"] = lambda: timed(
                    lambda f: kineto._reference_write(tr, f), os.path.join(d, "r.pt.trace.json"))
                variants["Python writer, Chrome"] = lambda: timed(
                    lambda f: chrome._reference_write(tr, f), os.path.join(d, "r.json"))
                if sdk:
                    variants["Python writer, OTLP"] = lambda: timed(
                        lambda f: otlp._reference_write(tr, f, trace_id=tid),
                        os.path.join(d, "r.otlp.json"))
            res = common.rounds(variants, args.rounds, seed=n)
            print("\n%d spans: torch.profiler %d events, xsp %d spans; medians of %d rounds:"
                  % (n, events[0], len(tr), args.rounds))
            base = common.med(res["torch export_chrome_trace"]["s"])
            base_cpu = common.med(res["torch export_chrome_trace"]["cpu"])
            for k, r in res.items():
                s = common.med(r["s"])
                size = common.med(r["bytes"])
                cpu = common.med(r["cpu"]) if "cpu" in r else None
                print("  %-32s %7.2f s  %6.2f us/span  %s  %s%s" % (
                    k, s, s / len(tr) * 1e6, "%7.1f MB" % (size / 1e6) if size else "   (no file)",
                    "" if k.startswith("torch") else "xsp/torch %.2f" % (s / base),
                    "" if cpu is None else "  cpu %.2f s%s" % (
                        cpu, "" if k.startswith("torch") else " (%.2f)" % (cpu / base_cpu))))
            del tr
        if args.xsp_only:
            n = args.xsp_only
            tr = record_xsp(ops_for(n))
            print("\n%d spans, xsp alone: %d spans, one round:" % (n, len(tr)))
            for ext in (".pt.trace.json", ".json", ".otlp.json"):
                r = timed(lambda f: xsp.save(tr, f), os.path.join(d, "x" + ext))
                print("  xsp.save %-15s %7.2f s  %6.2f us/span  %7.1f MB  cpu %.2f s" % (
                    ext, r["s"], r["s"] / len(tr) * 1e6, r["bytes"] / 1e6, r["cpu"]))
            if url:
                r = timed_send(tr, url, tid)
                print("  otlp.send (local sink)   %7.2f s  %6.2f us/span  %7.1f MB sent" % (
                    r["s"], r["s"] / len(tr) * 1e6, r["bytes"] / 1e6))
    finally:
        shutil.rmtree(d, ignore_errors=True)
        if sink:
            sink.kill()
            sink.wait()


if __name__ == "__main__":
    main()
