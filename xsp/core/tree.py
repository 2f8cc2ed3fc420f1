"""Walks over a parent array: any span table's (a Trace's parent_ids, a Measurement's span
table, a DataFrame's parent column).  Vectorised with numpy (pointer jumping), never a Python
loop per span; no other xsp module below it, so every layer can use them (xsp.trace re-exports
them as its public API).
"""
import numpy as np


def _parents_and_mask(parents, mask):
    p = np.asarray(parents)
    if p.ndim != 1:
        raise ValueError("parents must be a 1-d array of span ids, not of shape %s"
                         % (p.shape,))
    p = p.astype(np.int64, copy=False)
    if mask is None:
        return p, None
    m = np.asarray(mask)
    if m.dtype != np.bool_ and m.size:
        raise TypeError("mask must be a boolean array, not of dtype %s" % m.dtype)
    if m.shape != p.shape:
        raise ValueError("mask has shape %s; it needs one entry per span (%d)"
                         % (m.shape, len(p)))
    return p, m.astype(np.bool_, copy=False)


def _passes(n):
    """Pointer jumping doubles the distance covered per pass: a chain of n spans takes at most
    this many passes; more means parents has a cycle."""
    return int(n).bit_length() + 1


def _cycle():
    return ValueError("parents has a cycle (a span table's parents must form a forest)")


def nearest_ancestor(parents, mask, include_self=True):
    """For every span, the id of the nearest span on its parent chain where mask is True: the
    span itself first when include_self, then its parent, grandparent, ...; -1 where there is
    none.  Returns an int64 array.

    parents: a 1-d int array of parent ids, negative for a root (Trace.parent_ids, the parent
    column of a span table); mask: a boolean array of the same length.  Vectorised: pointer
    jumping, each pass doubling how far every unresolved span has looked up, so the passes
    grow with the log of the nesting depth, never a Python loop per span.  Raises ValueError
    for parents with a cycle or a mask of the wrong length, TypeError for a mask that is not
    boolean."""
    p, m = _parents_and_mask(parents, mask)
    n = len(p)
    p = np.where(p < 0, -1, p)
    # ptr[i]: a span at or above i with no span of the mask from i up to, not including,
    # ptr[i]; final once ptr[i] is in the mask or -1
    ptr = np.where(m, np.arange(n, dtype=np.int64), p)
    live = np.nonzero(ptr >= 0)[0]
    live = live[~m[ptr[live]]]
    for _ in range(_passes(n)):
        if not len(live):
            break
        nxt = ptr[ptr[live]]
        ptr[live] = nxt
        live = live[nxt >= 0]
        live = live[~m[ptr[live]]]
    else:
        if len(live):
            raise _cycle()
    if include_self:
        return ptr
    out = np.full(n, -1, dtype=np.int64)
    has = p >= 0
    out[has] = ptr[p[has]]
    return out


def ancestor_count(parents, mask=None):
    """For every span, how many of its ancestors (parent, grandparent, ..., the span itself
    not included) are in mask; with mask None, all of them: the span's depth (roots 0).
    Returns an int64 array.  Arguments and errors as for nearest_ancestor; also pointer
    jumping (over the chain of the mask's spans that nearest_ancestor gives)."""
    p, m = _parents_and_mask(parents, mask)
    if m is not None:
        p = nearest_ancestor(p, m, include_self=False)
    up = np.where(p < 0, -1, p)
    # cnt[i]: the spans above i up to and including up[i]; final once up[i] is -1
    cnt = (up >= 0).astype(np.int64)
    live = np.nonzero(up >= 0)[0]
    for _ in range(_passes(len(up))):
        if not len(live):
            break
        u = up[live]
        cnt[live] += cnt[u]
        up[live] = up[u]
        live = live[up[live] >= 0]
    else:
        if len(live):
            raise _cycle()
    return cnt


def self_time(durations, parents, tracks):
    """Exclusive durations: each span's duration minus the durations of its children on the
    same track (equal values in tracks: a thread index or OS thread id), an int64 array.
    Children on another track ran concurrently and are not subtracted.  parents as for
    nearest_ancestor."""
    dur = np.asarray(durations).astype(np.int64, copy=False)
    p = np.asarray(parents).astype(np.int64, copy=False)
    tr = np.asarray(tracks)
    same = p >= 0
    same[same] = tr[same] == tr[p[same]]
    child_sum = np.zeros(len(dur), dtype=np.int64)
    np.add.at(child_sum, p[same], dur[same])
    return dur - child_sum
