"""Interval primitives of the ledger: sorted, disjoint half-open ``[start, end)`` int64 arrays, merged, unioned,
searched and swept without a loop over intervals (the slices, claims and host facts are all built on them)."""

from __future__ import annotations

from typing import Any

import numpy as np

from traceinsight.vocab.intervals import merge_intervals, run_bounds

EMPTY = np.zeros(0, np.int64)


def points_inside(s: np.ndarray, e: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each t (sorted): is it inside one of the merged intervals (s, e)? Few intervals among many points
    (syncs among 10^5 gaps): each interval's points are found by two searches in t, not each point in them."""
    if len(s) == 0:
        return np.zeros(len(t), dtype=bool)
    if 8 * len(s) < len(t):
        lo = np.searchsorted(t, s, side="left")
        n = np.searchsorted(t, e, side="left") - lo
        out = np.zeros(len(t), dtype=bool)
        out[spans(lo, np.maximum(n, 0))] = True
        return out
    i = np.searchsorted(s, t, side="right") - 1
    ok = i >= 0
    out = np.zeros(len(t), dtype=bool)
    out[ok] = e[i[ok]] > t[ok]
    return out


def merged(starts: Any, ends: Any) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(starts, np.int64)
    e = np.maximum(np.asarray(ends, np.int64), s)
    keep = e > s
    if not keep.all():  # copies only when some interval is empty (fresh memory is what costs here)
        s, e = s[keep], e[keep]
    return merge_intervals(s, e)


def run_unions(s: np.ndarray, e: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The union of each sorted run of non-empty intervals (every e > s) whose int64 arrays the caller hands over:
    host rows of several threads come as a few runs in start order, and each run is merged in place (its running
    end computed in ``e`` itself, a group's end read at its last row), so no array of the input's length is
    allocated besides two masks (fresh memory is what costs at 10^6 rows). Many runs: one union of all."""
    if len(s) == 0:
        return []
    down = np.flatnonzero(s[1:] < s[:-1]) + 1 if len(s) > 1 else EMPTY
    if len(down) > 64:
        return [merge_intervals(s, e)]
    cuts = np.r_[0, down, len(s)]
    out = []
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        rs, re_ = s[a:b], e[a:b]
        np.maximum.accumulate(re_, out=re_)
        idx, last = run_bounds(rs, re_)
        # the running end at a group's last row is the group's largest end: every earlier end lies before its start
        out.append((rs[idx], re_[last]))
    return out


def union_of_runs(runs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The union of several merged interval sets.

    Starts and ends are sorted apart (each set is a sorted run of both, so the stable sort only merges runs, and
    no permutation is gathered): the k-th smallest end closes a merged interval exactly when the next start lies
    beyond it, since by then k + 1 intervals have started and k + 1 have ended. Touching intervals merge, as in
    ``merge_intervals``, whose answer this is.
    """
    if len(runs) <= 1:
        return runs[0] if runs else (EMPTY, EMPTY)
    s = np.sort(np.concatenate([a for a, _ in runs]), kind="stable")
    e = np.sort(np.concatenate([b for _, b in runs]), kind="stable")
    if len(s) == 0:
        return EMPTY, EMPTY
    idx, last = run_bounds(s, e)
    return s[idx], e[last]


def clipped_ns(s: np.ndarray, e: np.ndarray, ws: np.ndarray, we: np.ndarray) -> int:
    """The total length of the intervals (s, e) (disjoint, sorted) inside the merged ranges (ws, we)."""
    lo = np.searchsorted(we, s, side="right")  # the ranges overlapping interval i lie in [lo, hi)
    hi = np.searchsorted(ws, e, side="left")
    n = np.maximum(hi - lo, 0)
    if not n.any():
        return 0
    rep = np.repeat(np.arange(len(s)), n)
    widx = spans(lo, n)
    piece = np.minimum(e[rep], we[widx]) - np.maximum(s[rep], ws[widx])
    return int(piece[piece > 0].sum())


def spans(lo: np.ndarray, n: np.ndarray) -> np.ndarray:
    """The positions lo[i], lo[i] + 1, ..., lo[i] + n[i] - 1 of every i, concatenated."""
    total = int(n.sum())
    return np.repeat(lo - (np.cumsum(n) - n), n) + np.arange(total)


def overlapping(a: np.ndarray, b: np.ndarray, g0: np.ndarray, g1: np.ndarray) -> np.ndarray:
    """Positions (ascending, each once) of the intervals of the merged set (a, b) that overlap one of the merged
    intervals (g0, g1); the smaller set is searched in the larger."""
    if len(a) == 0 or len(g0) == 0:
        return EMPTY
    if len(g0) < len(a):
        lo = np.searchsorted(b, g0, side="right")  # the first interval ending after each gap starts ...
        hi = np.searchsorted(a, g1, side="left")  # ... to the last starting before it ends
        lo[1:] = np.maximum(lo[1:], hi[:-1])  # an interval spanning several gaps is taken at the first
        return spans(lo, np.maximum(hi - lo, 0))
    i = np.searchsorted(g1, a, side="right")  # the first gap ending after each interval starts
    ok = i < len(g0)
    ok[ok] = g0[i[ok]] < b[ok]
    return np.flatnonzero(ok)


def sweep(sets: list[tuple[int, np.ndarray, np.ndarray]], default: int) -> tuple[np.ndarray, np.ndarray]:
    """The segments between consecutive distinct edges of ``sets`` (code, starts, ends; merged, highest precedence
    first) and the code of the first set covering each (``default`` where none does): (edges, codes)."""
    p = np.unique(np.concatenate([x for _, a, b in sets for x in (a, b)] or [EMPTY]))
    left = p[:-1]
    label = np.full(len(left), default, dtype=np.int8)
    for code, a, b in reversed(sets):
        label[points_inside(a, b, left)] = code
    return p, label
