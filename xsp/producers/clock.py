"""Clock samples between ranks (docs/distributed.md): the producer half of a distributed job;
merging the ranks' traces and the analyses across ranks are xsp.analysis.distributed.

Clock alignment, NTP-style.  When torch.distributed is initialised with more than one rank,
a profile exchanges clock samples with rank 0 right before recording starts and right after
it stops (outside the recording: the exchange's own ops are not in the trace).  Rank r and
rank 0 do ROUNDS round trips over the process group (CPU tensors; a gloo group is made once
when the default group's backend is not gloo):

    r reads t1, sends it; 0 reads t2 on receipt, t3, replies (t2, t3); r reads t4
    offset = ((t2 - t1) + (t3 - t4)) / 2      (rank 0's clock minus rank r's)
    error  = ((t4 - t1) - (t3 - t2)) / 2      (the true offset lies within offset ± error)

and keeps the round trip with the smallest error.  The start and stop samples give the offset
at both ends; the merge shifts every span of rank r by the offset interpolated linearly
between them (the drift).  Rank 0 also draws a job id and sends it to every rank, so that
traces of different jobs are never merged.  Without a process group, ranks on one host share
CLOCK_MONOTONIC (offset 0, "same host"); ranks on several hosts without samples cannot be
aligned, and the merge says so.

Every rank must enter and leave the profile (SPMD, as the training loop itself does): the
exchange is collective.  Pass clock_sync=False to xsp.profile when only some ranks profile.
"""
import random

ROUNDS = 8
_GLOO = {}          # the gloo group made for the exchange, per default group


def _dist():
    import torch.distributed as dist
    return dist


def active():
    """True when torch.distributed is initialised with more than one rank."""
    import sys
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        dist = torch.distributed
        return bool(dist.is_available() and dist.is_initialized() and
                    dist.get_world_size() > 1)
    except Exception:
        return False


def _group(dist):
    """A process group that moves CPU tensors: the default one under gloo, else a gloo group
    made once (collectively: every rank gets here in the same exchange)."""
    if dist.get_backend() == "gloo":
        return None
    key = id(dist.distributed_c10d._get_default_group())
    if key not in _GLOO:
        _GLOO[key] = dist.new_group(backend="gloo")
    return _GLOO[key]


def exchange(now, rounds=ROUNDS, job=None):
    """One exchange of clock samples with rank 0 (see the module docstring).  now: the clock
    (xsp._core.now).  job: rank 0's job id to send (drawn when None).  Returns {"offset_ns",
    "error_ns", "at_ns" (this rank's clock at the best sample's middle), "job"}; on rank 0
    offset and error are 0.  Raises what torch.distributed raises."""
    import torch
    dist = _dist()
    g = _group(dist)
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0 and job is None:
        job = random.getrandbits(62)
    jt = torch.tensor([job if rank == 0 else 0], dtype=torch.int64)
    dist.broadcast(jt, 0, group=g)
    job = int(jt.item())
    best = None
    t3 = None
    for peer in range(1, world):
        if rank == 0:
            for _ in range(rounds):
                t1 = torch.zeros(1, dtype=torch.int64)
                dist.recv(t1, peer, group=g)
                t2 = now()
                t3 = now()
                dist.send(torch.tensor([t2, t3], dtype=torch.int64), peer, group=g)
        elif rank == peer:
            for _ in range(rounds):
                t1 = now()
                dist.send(torch.tensor([t1], dtype=torch.int64), 0, group=g)
                reply = torch.zeros(2, dtype=torch.int64)
                dist.recv(reply, 0, group=g)
                t4 = now()
                t2, t3 = int(reply[0]), int(reply[1])
                offset = ((t2 - t1) + (t3 - t4)) / 2.0
                error = ((t4 - t1) - (t3 - t2)) / 2.0
                if best is None or error < best[1]:
                    best = (offset, error, (t1 + t4) // 2)
    # rank 0 talks to the ranks one after the other: leave together, so that no rank starts
    # recording (or stops waiting) later than the others because of the exchange itself
    dist.barrier(group=g)
    if rank == 0:
        # its last reading, not a new one: with two ranks both then read the clock equally
        # often, which keeps a fake clock's readings in step (tests)
        return {"offset_ns": 0.0, "error_ns": 0.0, "at_ns": t3 if t3 is not None else now(),
                "job": job}
    return {"offset_ns": best[0], "error_ns": max(best[1], 0.0), "at_ns": best[2], "job": job}


def start_meta(now):
    """Meta entries from the exchange before recording: clock.sync, clock.offset_ns,
    clock.error_ns, clock.at_ns, job_id; {"clock.sync": "same host" or "none"} without a
    process group (the ranks of one host share the monotonic clock)."""
    if not active():
        return {"clock.sync": "none"}
    s = exchange(now)
    return {"clock.sync": "process group", "clock.offset_ns": float(s["offset_ns"]),
            "clock.error_ns": float(s["error_ns"]), "clock.at_ns": int(s["at_ns"]),
            "job_id": "%016x" % s["job"]}


def stop_meta(now, job_id):
    """Meta entries from the exchange after recording: clock.stop_offset_ns,
    clock.stop_error_ns, clock.stop_at_ns ({} without a process group)."""
    if not active():
        return {}
    s = exchange(now, job=int(job_id, 16) if job_id else None)
    return {"clock.stop_offset_ns": float(s["offset_ns"]),
            "clock.stop_error_ns": float(s["error_ns"]), "clock.stop_at_ns": int(s["at_ns"])}


__all__ = ["active", "exchange", "start_meta", "stop_meta"]
