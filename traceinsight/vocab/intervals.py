"""Time intervals as numpy arrays: unions, coverage, window queries. Floor 0: no timeline, no rules.

Every stage that reasons about [start, end) ranges (views, ledger, what-if, rules, renderers) uses these, so an
interval means the same thing everywhere: half-open, integer ns, touching intervals merge.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of [start, end) intervals, sorted; touching intervals merge."""
    if len(starts) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    if len(s) > 1 and not bool((s[1:] >= s[:-1]).all()):  # rows usually come in start order: no sort, no copies
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    idx, _ = run_bounds(s, run_end)
    out_s = s[idx]
    out_e = np.maximum.reduceat(e, idx)
    return out_s, out_e


def run_bounds(starts: np.ndarray, reach: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first and the last row of each group of start-ordered intervals that merge (non-empty input): a row
    opens a group when it starts after ``reach`` of the row before, the end reached so far (a running maximum of
    the ends, or the previous of the ends sorted apart). Touching intervals stay in one group."""
    new = np.empty(len(starts), dtype=bool)
    new[0] = True
    np.greater(starts[1:], reach[:-1], out=new[1:])
    head = np.flatnonzero(new)
    last = np.empty(len(head), np.intp)
    last[:-1] = head[1:] - 1
    last[-1] = len(starts) - 1
    return head, last


#: Below this many rows ``lexsort_ints`` is ``np.lexsort`` (the range checks cost more than they save).
LEXSORT_PACK_ROWS = 4096


def lexsort_ints(keys: "list[np.ndarray] | tuple[np.ndarray, ...]") -> np.ndarray:
    """``np.lexsort(keys)`` (the last key primary, stable) for integer keys, faster on many rows: the leading keys
    (from the primary down, while their ranges multiply to under 2^62) packed into one int64 and sorted once,
    stable (rows of a thread or stream come mostly in time order: a sort of a few runs); rows that tie on the
    packed keys are then ordered by the remaining keys among themselves only. The same permutation as
    ``np.lexsort``, ties included."""
    keys = [np.asarray(k) for k in keys]
    n = len(keys[0]) if keys else 0
    if n < LEXSORT_PACK_ROWS or any(k.dtype.kind not in "biu" or (k.dtype.kind == "u" and k.dtype.itemsize >= 8) for k in keys):
        return np.lexsort(keys)
    packed: np.ndarray | None = None
    room, used = 1, 0
    for k in reversed(keys):
        lo, hi = int(k.min()), int(k.max())
        span = hi - lo + 1
        if room * span >= 2**62:
            break
        part = k.astype(np.int64)  # a copy, offset in place
        part -= lo
        if packed is None:
            packed = part
        else:
            packed *= span
            packed += part
        room, used = room * span, used + 1
    if packed is None:
        return np.lexsort(keys)
    order = np.argsort(packed, kind="stable")
    rest = keys[: len(keys) - used]
    if rest:
        ps = packed[order]
        tie = np.flatnonzero(ps[1:] == ps[:-1])
        if len(tie):  # the tied runs, in place: each run's rows by the remaining keys (stable among equals)
            at = np.unique(np.r_[tie, tie + 1])
            sub = order[at]
            order[at] = sub[np.lexsort([k[sub] for k in rest] + [packed[sub]])]
    return order


#: Up to this many runs ``run_cummax`` takes each run's running maximum in place, one slice at a time.
FEW_RUNS = 64


def run_cummax(values: np.ndarray, new: np.ndarray) -> np.ndarray:
    """The running maximum of integer ``values`` restarted where ``new`` is True (``new[0]`` must be), as
    ``pd.Series(values).groupby(np.cumsum(new)).cummax()`` gives it: the latest end so far on a thread whose rows
    come sorted by thread. A few runs (threads): one accumulate per run into one array; many: every run's values
    lifted above the run before's (one accumulate over all) when that fits in int64, else pandas."""
    values = np.asarray(values)
    heads = np.flatnonzero(new)
    if len(heads) <= FEW_RUNS:
        out = np.empty_like(values)
        bounds = [*heads.tolist(), len(values)]
        for a, b in zip(bounds[:-1], bounds[1:]):
            np.maximum.accumulate(values[a:b], out=out[a:b])
        return out
    grp = np.cumsum(new) - 1
    lo, hi = int(values.min()), int(values.max())
    base = hi - min(lo, 0) + 1
    if int(grp[-1]) * base + hi < 2**62 and lo >= 0:
        lifted = grp * base
        lifted += values
        np.maximum.accumulate(lifted, out=lifted)
        lifted -= grp * base
        return lifted.astype(values.dtype, copy=False)
    return pd.Series(values).groupby(grp).cummax().to_numpy()


def pair_opens(rank: np.ndarray, tid: np.ndarray, start: np.ndarray, opens: np.ndarray, closes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(open rows, close rows): each row of ``opens`` paired with the first row of ``closes`` that starts at or
    after it on the same rank and thread (a ``cudaStreamBeginCapture`` and its ``cudaStreamEndCapture``); an open
    without one is left out. A loop over the opens, which are few (one per capture)."""
    got_o, got_c = [], []
    for o in opens.tolist():
        same = closes[(rank[closes] == rank[o]) & (tid[closes] == tid[o]) & (start[closes] >= start[o])]
        if len(same):
            got_o.append(o)
            got_c.append(int(same[np.argmin(start[same])]))
    return np.asarray(got_o, dtype=np.intp), np.asarray(got_c, dtype=np.intp)


def merge_grouped(groups: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pd.DataFrame:
    """``merge_intervals`` within each group (e.g. per rank): columns group, start_ns, end_ns, sorted.

    One lexsort and a grouped running max: nested or overlapping ranges (an op inside an op, two threads
    waiting at once) count once.
    """
    if len(starts) == 0:
        return pd.DataFrame({"group": np.zeros(0, np.int64), "start_ns": np.zeros(0, np.int64), "end_ns": np.zeros(0, np.int64)})
    g = np.asarray(groups, dtype=np.int64)
    s = np.asarray(starts, dtype=np.int64)
    e = np.maximum(np.asarray(ends, dtype=np.int64), s)
    order = np.lexsort((s, g))
    g, s, e = g[order], s[order], e[order]
    run_end = pd.Series(e).groupby(g).cummax().to_numpy()
    new = np.ones(len(s), dtype=bool)
    new[1:] = (g[1:] != g[:-1]) | (s[1:] > run_end[:-1])
    idx = np.flatnonzero(new)
    return pd.DataFrame({"group": g[idx], "start_ns": s[idx], "end_ns": np.maximum.reduceat(e, idx)})


class Coverage:
    """The union of some intervals, answering "how much of [a, b) is covered" for many windows at once.

    Built on the cumulative covered length C(t): each query costs two searchsorted calls whatever the sizes.
    """

    def __init__(self, starts: np.ndarray, ends: np.ndarray) -> None:
        self.s, self.e = merge_intervals(np.asarray(starts, np.int64), np.asarray(ends, np.int64))
        self.cum = np.cumsum(self.e - self.s)
        self._tables: tuple[np.ndarray, np.ndarray] | None = None

    def _lookup(self) -> tuple[np.ndarray, np.ndarray]:
        """(end, base) per i = the number of intervals starting at or before t, so that C(t) = base[i] +
        min(t, end[i]): base is the covered time up to interval i-1's end minus that end. Entry 0 (t before every
        interval) reads min(t, 0) + 0, which is <= 0 and clipped to 0; every other entry is >= 0 as it stands
        (t >= the interval's start). Built on the first query."""
        if self._tables is None:
            end = np.empty(len(self.e) + 1, np.int64)
            end[0] = 0
            end[1:] = self.e
            base = np.empty(len(self.e) + 1, np.int64)
            base[0] = 0
            np.subtract(self.cum, self.e, out=base[1:])
            self._tables = (end, base)
        return self._tables

    def before(self, t: np.ndarray) -> np.ndarray:
        """Covered time before each t."""
        t = np.asarray(t, np.int64)
        if len(self.s) == 0:
            return np.zeros(len(t), np.int64)
        end, base = self._lookup()
        i = np.searchsorted(self.s, t, side="right")
        out = end.take(i)
        np.minimum(out, t, out=out)
        out += base.take(i)
        return np.maximum(out, 0, out=out)

    def overlap(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Covered time inside each [a_i, b_i) (0 for empty or reversed windows)."""
        a = np.asarray(a, np.int64)
        out = self.before(np.maximum(np.asarray(b, np.int64), a))
        out -= self.before(a)
        return np.maximum(out, 0, out=out)


class Overlaps:
    """Which rows of a frame overlap a window [a, b): rows in start order with the running maximum of their ends,
    so a window costs two binary searches and a look at the rows that can reach into it, not a pass over all."""

    def __init__(self, start: np.ndarray, end: np.ndarray) -> None:
        self.order = np.argsort(start, kind="stable")
        self.start = start[self.order]
        self.end = end[self.order]
        self.reach = np.maximum.accumulate(self.end) if len(self.end) else self.end

    def rows(self, a: int, b: int) -> np.ndarray:
        """Positions (ascending, as a boolean mask would give them) of the rows with start < b and end > a."""
        hi = int(np.searchsorted(self.start, b, side="left"))
        lo = int(np.searchsorted(self.reach[:hi], a, side="right"))  # rows before lo all end by a
        keep = self.end[lo:hi] > a
        return np.sort(self.order[lo:hi][keep])


def applies_to(n: int, ranks: np.ndarray | None, devices: np.ndarray | None, rank: int | None, device: int | None) -> np.ndarray:
    """Which of ``n`` instances apply to (rank, device): an unknown (NaN) or absent rank/device applies to all, and
    a None ``rank``/``device`` asks for any."""
    keep = np.ones(n, dtype=bool)
    if ranks is not None and rank is not None:
        keep &= np.isnan(ranks) | (ranks == rank)
    if devices is not None and device is not None:
        keep &= np.isnan(devices) | (devices == device)
    return keep
