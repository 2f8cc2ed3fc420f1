"""The recording options' cost per op: xsp against torch.profiler with the same option.

One training step of a small MLP (Linear 64 -> 64, ReLU, Linear 64 -> 8, MSE loss, backward:
about 60 ops and backward nodes, each with tensor, scalar and list inputs, and allocations),
repeated --steps times inside each block, timed in one process with every variant interleaved
round by round (shuffled, as the other benchmarks):
  unprofiled
  <option> torch.profiler   torch.profiler.profile(activities=[CPU], <option>=True)
  <option> xsp               xsp.profile(levels="L", <option>=True)
for the options none, record_shapes, profile_memory and with_stack (with_stack only where
xsp.profile takes it).  For each: ns per op above unprofiled inside the block, and end to end
(start + block + stop + building the results: events() / the Trace), per-round paired
(common.paired_scaled), median ± half the IQR; then per option the ratio torch.profiler / xsp;
then each variant's time as a ratio to unprofiled's in the same round (median ± half the IQR).

--model vit times a ViT training step instead (transformers' ViTForImageClassification from a
small ViTConfig: 32x32 images, 8x8 patches, hidden 64, 2 layers, 4 heads, MLP 128, 10 labels;
random weights, nothing downloaded; batch 8; zero_grad, forward with labels, backward, an SGD
step).  --levels sets xsp's levels (default L; ML records the model call and the modules too).

    python benchmarks/bench_options.py [--steps 20] [--rounds 21] [--options a,b]
        [--model mlp|vit] [--levels L|ML]
"""
import argparse
import inspect
import sys

import common

import torch
import torch.nn as nn

import xsp

OPTIONS = ("none", "record_shapes", "profile_memory", "with_stack")


def available():
    """The options this xsp.profile takes."""
    params = inspect.signature(xsp.profile).parameters
    return [o for o in OPTIONS if o == "none" or o in params]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--options", default=",".join(OPTIONS))
    ap.add_argument("--model", choices=("mlp", "vit"), default="mlp")
    ap.add_argument("--levels", choices=("L", "ML"), default="L")
    args = ap.parse_args(argv)
    opts = [o.strip() for o in args.options.split(",") if o.strip()]
    bad = [o for o in opts if o not in OPTIONS]
    if bad or args.steps < 1 or args.rounds < 1:
        ap.error("options are %s; steps and rounds at least 1" % ", ".join(OPTIONS))
    skipped = [o for o in opts if o not in available()]
    opts = [o for o in opts if o in available()]

    torch.manual_seed(0)
    if args.model == "vit":
        try:
            step, what = vit_step()
        except ImportError as e:
            print("--model vit needs transformers: %s" % e, file=sys.stderr)
            return 2
    else:
        step, what = mlp_step()

    def block():
        t0 = common.now()
        for _ in range(args.steps):
            step()
        return common.now() - t0

    with xsp.profile(levels=args.levels) as p:       # ops per step, counted once
        step()
    n_ops = len(p.trace.spans(kind="op")) + len(p.trace.spans(kind="backward"))
    n = n_ops * args.steps

    def result(t_start, t_block, t_stop):
        return {"block": t_block / n, "e2e": (t_start + t_block + t_stop) / n}

    def plain():
        return result(0, block(), 0)

    def tprof(opt):
        kw = {} if opt == "none" else {opt: True}

        def run():
            t0 = common.now()
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], **kw)
            prof.__enter__()
            t1 = common.now()
            tb = block()
            t2 = common.now()
            prof.__exit__(None, None, None)
            prof.events()
            return result(t1 - t0, tb, common.now() - t2)
        return run

    def xprof(opt):
        kw = {} if opt == "none" else {opt: True}

        def run():
            t0 = common.now()
            prof = xsp.profile(levels=args.levels, **kw)
            prof.start()
            t1 = common.now()
            tb = block()
            t2 = common.now()
            prof.stop()
            tr = prof.trace
            r = result(t1 - t0, tb, common.now() - t2)
            got = len(tr.spans(kind="op")) + len(tr.spans(kind="backward"))
            assert got == n, "xsp recorded %d ops and backward nodes, expected %d" % (got, n)
            if opt == "record_shapes":
                assert all("input_dims" in s.attrs for s in tr.spans(kind="op"))
            return r
        return run

    variants = {"unprofiled": plain}
    for o in opts:
        variants[o + " torch.profiler"] = tprof(o)
        variants[o + " xsp"] = xprof(o)
    for f in variants.values():
        f()
    res = common.rounds(variants, args.rounds)
    print(common.machine())
    print("per-op cost of each option: %s (%d ops and backward nodes) x %d steps per block, "
          "%d rounds; xsp levels %s" % (what, n_ops, args.steps, args.rounds, args.levels))
    print("unprofiled: %.0f ns/op (median)" % common.med(res["unprofiled"]["block"]))
    print("%-30s %22s %24s" % ("variant", "in block, ns/op above", "end to end, ns/op above"))
    over = {}
    for k in variants:
        if k == "unprofiled":
            continue
        ob = common.paired_scaled(res, k, "unprofiled", "block")
        oe = common.paired_scaled(res, k, "unprofiled", "e2e")
        over[k] = (common.med(ob), common.med(oe))
        print("%-30s %22s %24s" % (k, common.fmt(ob), common.fmt(oe)))
    for o in opts:
        tb, te = over[o + " torch.profiler"]
        xb, xe = over[o + " xsp"]
        print("%-15s torch.profiler/xsp: in block %s, end to end %s"
              % (o, common.ratio(tb, xb), common.ratio(te, xe)))
    if "none" in opts:
        xb0 = over["none xsp"][0]
        for o in opts:
            if o != "none":
                print("%-15s xsp's cost above no option: %+.1f ns/op in block"
                      % (o, over[o + " xsp"][0] - xb0))
    print("time as a ratio to unprofiled's in the same round, median ± half the IQR:")
    print("%-30s %22s %24s" % ("variant", "in block", "end to end"))
    for k in variants:
        if k != "unprofiled":
            print("%-30s %22s %24s" % (k, times_unprofiled(res, k, "block"),
                                       times_unprofiled(res, k, "e2e")))
    if skipped:
        print("not measured (xsp.profile does not take them): %s" % ", ".join(skipped))
    return 0


def mlp_step():
    """Linear 64 -> 64, ReLU, Linear 64 -> 8, MSE loss, backward; batch 16."""
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    x, y = torch.randn(16, 64), torch.randn(16, 8)
    loss_fn = nn.MSELoss()

    def step():
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
    return step, "an MLP training step"


def vit_step():
    """A small ViT from transformers' ViTConfig with random weights (no download): zero_grad,
    forward with labels (the model's cross-entropy loss), backward, an SGD step; batch 8.
    Raises ImportError when transformers is not importable."""
    from transformers import ViTConfig, ViTForImageClassification
    cfg = ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=64,
                    num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                    num_labels=10)
    model = ViTForImageClassification(cfg)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))

    def step():
        opt.zero_grad(set_to_none=True)
        model(pixel_values=x, labels=y).loss.backward()
        opt.step()
    return step, "a ViT training step (transformers, 2 layers, hidden 64, batch 8)"


def times_unprofiled(res, k, metric):
    """k's time over unprofiled's in the same round (unprofiled has no start or stop: its
    end-to-end time is its block), as "median x ±half the IQR"."""
    rs = [x / y for x, y in zip(res[k][metric], res["unprofiled"]["block"])]
    return "%.3fx ±%.3f" % (common.med(rs), common.spread(rs) / 2)


if __name__ == "__main__":
    sys.exit(main())
