"""The cross-rank summary of a merged trace (xsp.report.text of a distributed job)."""
from xsp.analysis.distributed import ranks
from xsp.core.fmt import fmt_ns


def text(trace):
    """The cross-rank summary of a merged trace: how the clocks were aligned, a table per rank
    and the straggler."""
    df = ranks(trace)
    m = trace.meta
    out = ["xsp job: %s rank%s (world size %s), job %s" % (
        m.get("merged", len(df)), "" if len(df) == 1 else "s", m.get("world_size", "?"),
        m.get("job_id", "?"))]
    err = max([float(m.get("rank%d.clock.error_ns" % r, 0.0)) for r in df["rank"]] or [0.0])
    out.append("clocks: %s%s" % (m.get("clock.aligned", "?"),
                                 "; aligned within %s" % fmt_ns(err) if
                                 m.get("clock.aligned") == "process group" else ""))
    head = ["rank", "host", "steps", "step", "± std", "compute", "comm", "overlap", "wait",
            "caused", "last"]
    rows = [head]
    for _, r in df.iterrows():
        rows.append([str(r["rank"]) + (" *" if r["straggler"] else ""), str(r["host"]),
                     str(r["steps"]), fmt_ns(r["step_ns"]), fmt_ns(r["step_std_ns"]),
                     fmt_ns(r["compute_ns"]), fmt_ns(r["comm_ns"]), fmt_ns(r["overlap_ns"]),
                     fmt_ns(r["wait_ns"]), fmt_ns(r["caused_ns"]), str(r["last_arrivals"])])
    w = [max(len(x[i]) for x in rows) for i in range(len(head))]
    for x in rows:
        out.append("  " + "  ".join(c.ljust(w[i]) if i < 2 else c.rjust(w[i])
                                    for i, c in enumerate(x)))
    out.append("(per iteration means, the setup before the first left out, as xsp summary "
               "finds them; compute, comm and overlap: time covered on the rank's "
               "threads; wait: in collectives, for the last rank to arrive; caused: the "
               "waiting it caused by arriving last; last: collectives it arrived last at; "
               "* the straggler: the rank the others wait for)")
    if len(df) > 1 and df["straggler"].any():
        s = df[df["straggler"]].iloc[0]
        others = df[~df["straggler"]]
        out.append("straggler: rank %d, last at %d of %d collectives, making the others wait "
                   "up to %s per step (compute %s per step against their %s)" % (
                       s["rank"], s["last_arrivals"], int(df["last_arrivals"].sum()),
                       fmt_ns(s["caused_ns"]), fmt_ns(s["compute_ns"]),
                       fmt_ns(others["compute_ns"].mean())))
    return "\n".join(out) + "\n"



__all__ = ["text"]
