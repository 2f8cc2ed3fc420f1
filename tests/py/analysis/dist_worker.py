"""A small distributed job for tests/py/analysis/test_distributed.py: WORLD gloo processes on this
host, each profiling STEPS steps of a multiply and an all_reduce at level ML; rank SLOW is the
straggler: in each step it waits until every other rank has begun its all_reduce (they call
it with async_op=True, then say so in the job's store, then wait for it), then sleeps SLEEP
seconds, then calls its own.  So it arrives last, at least SLEEP after the others, by
construction and not by timing, however loaded the machine.  Each rank saves
OUT/rank<r>.xsp.

    python dist_worker.py OUT WORLD SLOW SLEEP [STEPS]

SLOW -1: no straggler, and each rank on the core's fake clock started at a different time
(FAKE_BASE * (rank + 1) ns), level M.
"""
import os
import socket
import sys
import time


FAKE_BASE = 10 ** 12


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(rank, world, out, slow, sleep, steps, port):
    import torch
    import torch.distributed as dist
    # the job's store (300 s timeout: a hang guard), also the straggler's signal
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0)
    dist.init_process_group("gloo", rank=rank, world_size=world, store=store)
    import xsp
    levels = "ML"
    if slow < 0:
        # the fake-clock mode: each rank's clock starts FAKE_BASE * (rank + 1) ns and
        # advances 10 ns a reading; level M only, so that both read it in the same sequence
        from xsp import _core
        _core.set_fake_clock(FAKE_BASE * (rank + 1), 10)
        levels = "M"
    x = torch.ones(1000)
    with xsp.profile(levels=levels) as prof:
        for k in range(steps):
            y = x * 2
            if rank == slow:
                store.wait(["xsp-test/arrived/%d/%d" % (k, r)
                            for r in range(world) if r != slow])
                time.sleep(sleep)
                dist.all_reduce(y)
            elif slow >= 0:
                work = dist.all_reduce(y, async_op=True)    # its c10d op has begun
                store.set("xsp-test/arrived/%d/%d" % (k, rank), "1")
                work.wait()
            else:
                dist.all_reduce(y)
            prof.step()
    prof.trace.save(os.path.join(out, "rank%d.xsp" % rank))
    dist.destroy_process_group()


def main(argv):
    import torch.multiprocessing as mp
    out, world, slow, sleep = argv[0], int(argv[1]), int(argv[2]), float(argv[3])
    steps = int(argv[4]) if len(argv) > 4 else 3
    mp.spawn(run, args=(world, out, slow, sleep, steps, free_port()), nprocs=world)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
