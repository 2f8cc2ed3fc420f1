"""Reading torch.profiler's JSON: xsp.load against json.load and HTA's parser on the
same file, time and peak memory, at several sizes (linear in events?).

The file: a real torch.profiler trace (TinyResNet forward+backward, CPU, one iteration per
ProfilerStep) whose iterations are repeated, shifted in time with their ids, flows and
correlations renumbered, until it holds --events events: the content of every event is
torch's own.  Each reader runs in a child process of its own (so that its peak RSS is its
own), --rounds times, interleaved in a shuffled order; the figures are medians.

    python benchmarks/bench_kineto_read.py [--events 100000,1000000] [--rounds 3] [--no-hta]

Prints per size: the file's bytes and events, each reader's seconds and peak RSS growth
(after its imports), xsp's ratios to json.load (time) and to the file's size (memory), and us
per event (the same at every size when reading is linear).
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap

import common

CHILD = textwrap.dedent("""
    import json, os, sys, time
    what, path = sys.argv[1], sys.argv[2]
    if what == "xsp":
        import xsp
        def read(p):
            return xsp.load(p, format="kineto")
    elif what == "json":
        def read(p):
            with open(p) as f:
                return json.load(f)
    else:
        os.environ.setdefault("HTA_DISABLE_NS_ROUNDING", "1")
        import logging
        logging.disable(logging.WARNING)
        from hta.common.trace_parser import parse_trace_dataframe
        from hta.configs.parser_config import ParserConfig
        def read(p):
            return parse_trace_dataframe(p, ParserConfig.get_default_cfg())
    def hwm():  # peak RSS, bytes: ru_maxrss would start at the parent's after exec
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))
    before = hwm()
    t0 = time.perf_counter()
    out = read(path)
    dt = time.perf_counter() - t0
    peak = hwm()
    n = len(out) if what == "xsp" else 0
    print(json.dumps({"s": dt, "rss": peak - before, "spans": n}))
""")


def torch_trace(path):
    """A real torch.profiler trace of TinyResNet forward+backward, 4 profiled steps."""
    import torch

    from xsp import models
    torch.set_num_threads(1)
    model, x = models.get("resnet", batch=4)
    model(x).sum().backward()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
        for _ in range(4):
            model.zero_grad(set_to_none=True)
            model(x).sum().backward()
            p.step()
    p.export_chrome_trace(path)


def tiled(src, n, dst):
    """Writes dst: src's events repeated until n events, each copy shifted after the last."""
    with open(src) as f:
        doc = json.load(f)
    evs = doc["traceEvents"]
    meta = [e for e in evs if e.get("ph") == "M"]
    body = [e for e in evs if e.get("ph") != "M" and e.get("cat") != "Trace"]
    t_lo = min(float(e["ts"]) for e in body)
    t_hi = max(float(e["ts"]) + float(e.get("dur", 0)) for e in body)
    shift = t_hi - t_lo + 1.0
    ids = ("External id", "Record function id", "correlation", "Ev Idx")
    with open(dst, "w") as f:
        head = {k: v for k, v in doc.items() if k != "traceEvents"}
        f.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')
        f.write(",\n".join(json.dumps(e) for e in meta))
        k, rep, step = 0, 0, 0
        while k < n:
            for e in body:
                c = dict(e)
                c["ts"] = round(float(e["ts"]) + rep * shift, 3)
                if isinstance(c.get("id"), int):
                    c["id"] = e["id"] + rep * 1000000
                if isinstance(c.get("args"), dict):
                    a = dict(c["args"])
                    for key in ids:
                        if isinstance(a.get(key), int):
                            a[key] += rep * 1000000
                    c["args"] = a
                if c.get("name", "").startswith("ProfilerStep#"):
                    c["name"] = "ProfilerStep#%d" % step
                    step += 1
                f.write(",\n" + json.dumps(c))
                k += 1
                if k >= n:
                    break
            rep += 1
        f.write("\n]}\n")


def child(what, path):
    r = subprocess.run([sys.executable, "-c", CHILD, what, path], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError("%s failed: %s" % (what, r.stderr[-2000:]))
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", default="100000,1000000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-hta", action="store_true")
    args = ap.parse_args(argv)
    readers = ["xsp", "json"]
    if not args.no_hta:
        try:
            import hta  # noqa: F401
            readers.append("hta")
        except ImportError:
            print("(HTA is not installed: pip install HolisticTraceAnalysis==0.5.0)")
    d = tempfile.mkdtemp(prefix="xsp-bench-kineto-")
    src = os.path.join(d, "torch.json")
    torch_trace(src)
    print("reading torch.profiler's JSON; %s" % common.machine())
    for n in [int(x) for x in args.events.split(",")]:
        path = os.path.join(d, "t%d.pt.trace.json" % n)
        tiled(src, n, path)
        size = os.path.getsize(path)
        res = {r: [] for r in readers}
        rng = random.Random(n)
        for _ in range(args.rounds):
            order = readers[:]
            rng.shuffle(order)
            for r in order:
                res[r].append(child(r, path))
        if os.environ.get("XSP_BENCH_RAW"):
            print(res)
        med = {r: {k: statistics.median(x[k] for x in res[r]) for k in ("s", "rss")}
               for r in readers}
        print("\n%d events, %.1f MB (%.0f bytes/event), medians of %d rounds:" % (
            n, size / 1e6, size / n, args.rounds))
        for r in readers:
            print("  %-10s %7.2f s (%5.2f us/event)  peak RSS +%7.1f MB (%.2fx the file)" % (
                {"xsp": "xsp", "json": "json.load", "hta": "HTA parse"}[r], med[r]["s"],
                med[r]["s"] / n * 1e6, med[r]["rss"] / 1e6, med[r]["rss"] / size))
        print("  xsp / json.load time: %.2f (target <= 1.5); xsp memory / file: %.2f "
              "(target <= 3); spans %d" % (med["xsp"]["s"] / med["json"]["s"],
                                           med["xsp"]["rss"] / size, res["xsp"][0]["spans"]))
        if "hta" in med:
            print("  xsp / HTA parse time: %.3f" % (med["xsp"]["s"] / med["hta"]["s"]))
        os.unlink(path)


if __name__ == "__main__":
    main()
