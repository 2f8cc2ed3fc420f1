"""The iteration rule (docs/analyses.md, "Iterations"): which spans of a trace are its
iterations, as time windows, what is setup, and whether the last step is a leftover.

One rule for every consumer: the analyses (xsp.analysis, over a span table), the Kineto export
(xsp.kineto writes the iterations as ProfilerStep#N, setup apart, no empty tail) and through
them every report and the CLI.  It works on plain arrays (kinds as strings, names, parents,
starts, durations, flags) so that a Trace, a Measurement's span table and a DataFrame are
judged the same way.
"""
from collections import namedtuple

import numpy as np

from xsp.core.tree import nearest_ancestor

# ids, starts, ends: int64 arrays in start order (the iterations); setup: (span id, start,
# end) of the setup window or None; setup_rule: how the setup was decided (a sentence) or None;
# dropped_tail: (span id, why) of a last step that is not an iteration, or None
Windows = namedtuple("Windows", "ids starts ends setup setup_rule dropped_tail")


def top_calls(kind, parent):
    """Mask of the top-level module calls: model spans, and module spans with no model or
    module span above them (a loss or a lone layer called under the step)."""
    mods = np.isin(kind, ("model", "module"))
    return mods & (nearest_ancestor(parent, mods, include_self=False) < 0)


def windows(kind, names, parent, start, dur, flags, meta, carve_step0=True):
    """The iterations of a span table (arrays of one entry per span, ids 0..n-1): kind (str),
    names (str), parent (int, negative for a root), start and dur (int ns), flags (int: bit 0
    set on a span still open at stop), meta (the trace's metadata: "interrupted",
    "exception").  carve_step0: whether a first step named "step#0" (xsp's work before the
    first step()) is judged as setup or carved at its first model call; False for a
    Measurement's span table, whose steps are all iterations.

    With steps: every step is an iteration, except that step#0 is setup (wholly, or up to its
    first model call, which starts iteration 0) and a last step still open at stop is a
    leftover when it is no iteration.  Without steps: the model calls, else the top-level
    module calls, else the region, else the roots.  Returns Windows; cannot fail on arrays of
    one length."""
    kind = np.asarray(kind)
    parent = np.asarray(parent, dtype=np.int64)
    start = np.asarray(start, dtype=np.int64)
    end = start + np.asarray(dur, dtype=np.int64)
    n = len(kind)
    steps = np.nonzero(kind == "step")[0]
    setup = rule = tail = None
    calls = np.nonzero(top_calls(kind, parent))[0]
    if not len(steps):
        its = np.nonzero(kind == "model")[0]
        if not len(its):
            its = calls
        if not len(its):
            its = np.nonzero(kind == "region")[0]
        if not len(its):
            its = np.nonzero(parent < 0)[0]
        ids, st, en = its.astype(np.int64), start[its], end[its]
    else:
        is_step = kind == "step"
        owner = nearest_ancestor(parent, is_step, include_self=False)[calls]
        loose = owner < 0
        if loose.any():
            # a call under no step (another thread's, adopted by the region): the step during
            # which it started
            order = np.argsort(start[steps], kind="stable")
            ss, se = start[steps][order], end[steps][order]
            j = np.searchsorted(ss, start[calls[loose]], side="right") - 1
            ok = (j >= 0) & (start[calls[loose]] <= se[np.maximum(j, 0)])
            owner[np.nonzero(loose)[0][ok]] = steps[order][j[ok]]
        has_call = np.zeros(n, dtype=bool)
        has_call[owner[owner >= 0]] = True
        first_call = {}             # step -> start of its earliest top-level call
        for c, o in zip(calls.tolist(), owner.tolist()):
            if o >= 0 and (o not in first_call or start[c] < first_call[o]):
                first_call[o] = int(start[c])
        ids, st, en = [], [], []
        flags = np.asarray(flags, dtype=np.int64)
        first, last = steps[0], steps[-1]
        seg0 = names[first] == "step#0" and carve_step0
        # no model call anywhere (plain tensor code): none to carve step#0 at, so step#0 is the
        # first iteration when it did any work (step() at the end of each iteration) and all
        # setup only when empty (step() at the start of each one)
        bare0 = seg0 and not len(calls) and bool((parent == first).any())
        at_end = seg0 and (first in first_call or bare0)   # step() ends each iteration
        ended = meta.get("interrupted") or meta.get("exception")
        for k in steps.tolist():
            if k == first and bare0:
                ids.append(k)
                st.append(int(start[k]))
                en.append(int(end[k]))
                rule = ("no setup: the trace has no model call to carve step#0 at, so step#0 "
                        "(the work before the first step()) is iteration 0")
                continue
            if k == first and seg0:
                # the work before the first step(): setup, and when it holds a model call
                # (step() called at the end of each iteration), an iteration from that call's
                # start
                c = first_call.get(k)
                if c is None:
                    setup = (k, int(start[k]), int(end[k]))
                    rule = ("step#0 holds no model call (step() starts each iteration): it is "
                            "all setup" if len(calls) else "step#0 is empty (step() starts "
                            "each iteration): it is all setup")
                    continue
                rule = ("step() ends each iteration (step#0 holds a model call): iteration 0 "
                        "is step#0 from its first model call on, what came before is setup")
                setup = (k, int(start[k]), c)
                ids.append(k)
                st.append(c)
                en.append(int(end[k]))
                continue
            if k == last and k != first and flags[k] & 1:
                # open at stop: the step after the last step(), ended by the stop; an iteration
                # only if it is one
                why = None
                if len(calls) and not has_call[k]:
                    why = "no model call in it"
                elif at_end:
                    why = ("step() ends each iteration (step#0 holds %s), so what follows the "
                           "last step() is a leftover"
                           % ("work and no step has a model call" if bare0 else "a model call"))
                elif ended:
                    why = "the block ended with %s: the step is incomplete" % ended
                if why is not None:
                    tail = (int(k), why)
                    continue
            ids.append(k)
            st.append(int(start[k]))
            en.append(int(end[k]))
        ids, st, en = (np.array(ids, dtype=np.int64), np.array(st, dtype=np.int64),
                       np.array(en, dtype=np.int64))
    order = np.argsort(st, kind="stable")
    return Windows(ids[order], st[order], en[order], setup, rule, tail)
