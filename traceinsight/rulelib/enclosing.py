"""Which host range encloses which: the innermost op (or any range) on the same thread around each query, for
millions of rows at once (``Enclosing``), and the host rows' columns as plain arrays.

Part of ``traceinsight.rulelib``, the public helper library of the rules (built-in and third-party).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.vocab.intervals import merge_intervals
from traceinsight.rulelib.names import kind_mask
from traceinsight.rulelib.cache import memo


def _rightmost_at_least(values: np.ndarray, hi: np.ndarray, q: np.ndarray) -> np.ndarray:
    """For each query: the largest i < hi with values[i] >= q, or -1 (binary lifting over a sparse max table)."""
    n = len(values)
    if n == 0:
        return np.full(len(q), -1)
    # the answer is usually among the last few candidates (a call sits in the op that started just before it):
    # probe those first, and build the table only for the queries still open
    out = np.full(len(q), -1)
    open_ = np.arange(len(q))
    for back in range(1, 9):
        i = hi[open_] - back
        ok = i >= 0
        found = np.zeros(len(open_), dtype=bool)
        found[ok] = values[i[ok]] >= q[open_[ok]]
        out[open_[found]] = i[found]
        open_ = open_[~found & ok]
        if not len(open_):
            return out
    out[open_] = _rightmost_at_least_table(values, hi[open_], q[open_])
    return out


def _rightmost_at_least_table(values: np.ndarray, hi: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``_rightmost_at_least`` by binary lifting over a sparse max table."""
    n = len(values)
    table = [values]
    k = 1
    while (1 << k) <= n:
        prev = table[-1]
        half = 1 << (k - 1)
        table.append(np.maximum(prev[:-half], prev[half:]))
        k += 1
    hi = hi.copy()
    for level in range(len(table) - 1, -1, -1):
        width = 1 << level
        lo = hi - width
        ok = lo >= 0
        blockmax = np.full(len(q), np.iinfo(np.int64).max)
        blockmax[ok] = table[level][lo[ok]]
        skip = ok & (blockmax < q)
        hi[skip] = lo[skip]
    ans = hi - 1
    valid = ans >= 0
    valid[valid] = values[ans[valid]] >= q[valid]
    return np.where(valid, ans, -1)


class ThreadCodes:
    """Codes for the tuples of integer columns of one table (the (rank, pid, tid) of host rows: a thread), applied
    to the rows of others (-1: a tuple the table lacks): a key computed once for a table many queries look into.

    Per column each row's offset from the column's minimum (its position among the sorted distinct values where
    the values are spread wider than the rows are many), combined in mixed radix; where the product of the radices
    would leave int64, the key so far is first compressed to its distinct values. A column with one value adds
    nothing (usually rank and pid): the key is built in place from the others, few arrays of the table's length."""

    COLUMNS = ("rank", "pid", "tid")

    def __init__(self, columns: list[np.ndarray]) -> None:
        #: per column: (distinct keys before combining or None, lowest value, radix, sorted distinct values or None)
        self._steps: list[tuple[np.ndarray | None, int, int, np.ndarray | None]] = []
        n = len(columns[0])
        key = None
        room = 1
        for col in columns:
            col = np.asarray(col)
            lo = int(col.min()) if n else 0
            radix = int(col.max()) - lo + 1 if n else 1
            uniq = None
            if radix > 2 * n + 1024:  # sparse values (thread ids): their rank among the distinct ones
                uniq = np.sort(pd.unique(col.astype(np.int64, copy=False)))
                radix = len(uniq)
            squeeze = None
            if radix > 1 and key is not None and room * radix >= 2**62:
                squeeze, key = np.unique(key, return_inverse=True)
                key = key.reshape(-1).astype(np.int64)
                room = max(len(squeeze), 1)
            self._steps.append((squeeze, lo, radix, uniq))
            if radix == 1:
                continue
            if uniq is not None:
                code = np.searchsorted(uniq, col).astype(np.int64, copy=False)
            else:
                code = np.subtract(col, lo, dtype=np.int64)  # one pass: the copy is the offset
            if key is None:
                key = code
            else:
                key *= radix
                key += code
            room *= radix
        self.codes = key if key is not None else np.zeros(n, np.int64)

    @staticmethod
    def _find(sorted_values: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Position of each q in ``sorted_values``, -1 where absent."""
        if not len(sorted_values):
            return np.full(len(q), -1, np.int64)
        pos = np.minimum(np.searchsorted(sorted_values, q), len(sorted_values) - 1)
        return np.where(sorted_values[pos] == q, pos, -1)

    def of(self, columns: list[np.ndarray]) -> np.ndarray:
        """The code of each row given as (rank, pid, tid) arrays; -1 where the fitted table has no such thread."""
        key = np.zeros(len(columns[0]), np.int64)
        missing = np.zeros(len(key), dtype=bool)
        for (squeeze, lo, radix, uniq), col in zip(self._steps, columns):
            col = np.asarray(col, np.int64)
            if squeeze is not None:
                key = self._find(squeeze, key)
                missing |= key < 0
            code = self._find(uniq, col) if uniq is not None else col - lo
            missing |= (code < 0) | (code >= radix)
            if radix > 1:
                key = key * radix + code
        return np.where(missing, -1, key)


class Enclosing:
    """Ranges (one table's rows: thread, start, end) sorted once per thread, answering "the innermost range on
    the same thread containing [a, b)" for any number of query batches.

    "Innermost" = the latest-starting range with start <= a and end >= b (outer before inner at equal starts);
    properly nested ranges make that the deepest one. Several rules ask this of the same ranges (the host's
    framework ops): sorting them is the cost, so it is paid once (``cpu_op_enclosing``)."""

    def __init__(self, rank: np.ndarray, pid: np.ndarray, tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        self.threads = ThreadCodes([rank, pid, tid])
        key = self.threads.codes
        start = np.asarray(start, np.int64)
        end = np.asarray(end, np.int64)
        order, self.key, self.start = self._sort(key, start)
        self.order = order
        self.end = end[order]
        # rows sharing a (thread, start): outer (later end) first, as np.lexsort((-end, start, key)) orders them
        tie = (self.start[1:] == self.start[:-1]) & (self.key[1:] == self.key[:-1])
        if tie.any():
            members = np.flatnonzero(np.r_[tie, False] | np.r_[False, tie])  # positions of runs of equal keys
            sub = order[members]
            order[members] = sub[np.lexsort((-end[sub], start[sub], key[sub]))]
            self.end[members] = end[order[members]]

    @staticmethod
    def _sort(key: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The stable order by (thread, start), and the keys and starts in that order.

        Host rows come in long blocks of one thread (a file's thread, or chunks of a few threads interleaved),
        each in start order: then the order is the blocks grouped by thread, a sort of the few blocks, and the
        rows need only be checked. Otherwise one stable sort of a combined int64 key (which exploits the nearly
        sorted runs there are)."""
        n = len(start)
        if not n:
            return np.zeros(0, np.int64), key[:0], start[:0]
        cut = np.flatnonzero(key[1:] != key[:-1]) + 1
        if len(cut) <= min(n // 64, 4096):
            heads, ends = np.r_[0, cut], np.r_[cut, n]
            if len(cut):  # a thread's blocks keep their order
                order = np.concatenate([np.arange(heads[b], ends[b]) for b in np.argsort(key[heads], kind="stable").tolist()])
                k, s = key[order], start[order]
            else:
                order, k, s = np.arange(n), key, start
            if bool(((s[1:] >= s[:-1]) | (k[1:] != k[:-1])).all()):
                return order, k, s
        s0 = int(start.min())
        span = int(start.max()) - s0 + 1
        if (int(key.max()) + 1) * span >= 2**62:
            order = np.lexsort((start, key))
        else:
            comp = key * span  # the combined key, built in place
            comp += start
            comp -= s0
            order = np.argsort(comp, kind="stable")
        return order, key[order], start[order]

    @classmethod
    def of_frame(cls, frame: pd.DataFrame) -> "Enclosing":
        start = frame["start_ns"].to_numpy(np.int64)
        return cls(*(frame[c].to_numpy(np.int64) for c in ThreadCodes.COLUMNS), start, start + frame["dur_ns"].to_numpy(np.int64))

    def find(self, rank: np.ndarray, pid: np.ndarray, tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Per query: the position (in the table the ranges came from) of its innermost enclosing range, or -1."""
        out = np.full(len(start), -1, np.int64)
        if not len(start) or not len(self.key):
            return out
        qkey = self.threads.of([rank, pid, tid])
        qs = np.asarray(start, np.int64)
        qe = np.asarray(end, np.int64)
        qorder = np.argsort(qkey, kind="stable")
        qk = qkey[qorder]
        bounds = np.flatnonzero(np.r_[True, qk[1:] != qk[:-1], True])
        for a, b in zip(bounds[:-1], bounds[1:]):
            if qk[a] < 0:
                continue  # threads without ranges
            lo, hi = np.searchsorted(self.key, qk[a], side="left"), np.searchsorted(self.key, qk[a], side="right")
            if lo == hi:
                continue
            pos = qorder[a:b]
            h = np.searchsorted(self.start[lo:hi], qs[pos], side="right")
            idx = _rightmost_at_least(self.end[lo:hi], h, qe[pos])
            got = idx >= 0
            out[pos[got]] = self.order[lo + idx[got]]
        return out

    def find_frame(self, queries: pd.DataFrame) -> np.ndarray:
        """``find`` for the rows of a frame with rank, pid, tid, start_ns and dur_ns."""
        start = queries["start_ns"].to_numpy(np.int64)
        return self.find(*(queries[c].to_numpy(np.int64) for c in ThreadCodes.COLUMNS), start, start + queries["dur_ns"].to_numpy(np.int64))


def host_columns(views) -> dict[str, np.ndarray]:
    """The host rows' rank, start, end and kind as plain arrays (cached): masks are built on these and only the
    selected rows' few columns are taken, never a row selection of the wide host frame."""

    def build():
        host = views.host_events
        start = host["start_ns"].to_numpy()
        out = {"rank": host["rank"].to_numpy(), "start_ns": start, "dur_ns": host["dur_ns"].to_numpy(), "end_ns": start + host["dur_ns"].to_numpy()}
        return out

    return memo(views, "rulelib.host_columns", build)


def cpu_op_enclosing(views) -> tuple[np.ndarray, Enclosing]:
    """The host's framework ops (kind ``cpu_op``): their positions in ``views.host_events`` and an ``Enclosing``
    over them (positions it returns index the first array). Cached: TI002 and TI003 both ask which op a call
    ran in."""

    def build():
        host = views.host_events
        m = kind_mask(host, "cpu_op")
        pos = np.flatnonzero(m)
        hc = host_columns(views)

        def thread_col(a: np.ndarray) -> np.ndarray:
            """The ops' values of a host column; one value for all of them (one rank, one process) is not copied
            into the key. (Reductions over the whole column, then over the ops' gathered values: a reduction with
            ``where=`` over the host rows costs ten times a plain one.)"""
            if len(pos) and a.dtype.kind == "i":
                lo = a.min()
                if lo == a.max():
                    return np.broadcast_to(lo, len(pos))
                sub = a[pos]
                lo = sub.min()
                return np.broadcast_to(lo, len(pos)) if lo == sub.max() else sub
            return a[pos]

        ops = Enclosing(thread_col(hc["rank"]), thread_col(host["pid"].to_numpy()), thread_col(host["tid"].to_numpy()), hc["start_ns"][pos], hc["end_ns"][pos])
        out = (pos, ops)
        return out

    return memo(views, "rulelib.cpu_op_enclosing", build)


def innermost_enclosing(queries: pd.DataFrame, candidates: pd.DataFrame) -> np.ndarray:
    """Row label in ``candidates`` of the innermost range on the same (rank, pid, tid) containing each query row.

    "Innermost" = the latest-starting candidate with start <= query start and end >= query end; properly nested
    ranges make that the deepest one. Returns an object array of labels (None where nothing encloses).
    """
    out = np.full(len(queries), None, dtype=object)
    pos = innermost_positions(queries, candidates)
    got = pos >= 0
    out[got] = candidates.index.to_numpy()[pos[got]]
    return out


def innermost_positions(queries: pd.DataFrame, candidates: pd.DataFrame) -> np.ndarray:
    """``innermost_enclosing`` as positions in ``candidates`` (-1 where nothing encloses): no labels boxed."""
    if queries.empty or candidates.empty:
        return np.full(len(queries), -1, np.int64)
    return Enclosing.of_frame(candidates).find_frame(queries)


def starts_inside(rows: pd.DataFrame, intervals: pd.DataFrame) -> np.ndarray:
    """For each row (rank, start_ns): does it start inside one of ``intervals`` (rank, start_ns, dur_ns) of the same
    rank, end included? (A gap that opens while the host is blocked in a call belongs to that call.)"""
    out = np.zeros(len(rows), dtype=bool)
    if rows.empty or intervals.empty:
        return out
    r_rank = rows["rank"].to_numpy()
    r_start = rows["start_ns"].to_numpy(dtype=np.int64)
    i_rank = intervals["rank"].to_numpy()
    # one rank (one file): no grouping of the intervals, and no selection of the rows when they share it
    per_rank = [(i_rank[0], intervals)] if i_rank.min() == i_rank.max() else intervals.groupby("rank", sort=False, observed=True)
    for rank, c in per_rank:
        m = r_rank == rank
        every = bool(m.all())
        if not every and not m.any():
            continue
        cs = c["start_ns"].to_numpy(dtype=np.int64)
        ms, me = merge_intervals(cs, cs + c["dur_ns"].to_numpy(dtype=np.int64))
        rs = r_start if every else r_start[m]
        j = np.searchsorted(ms, rs, side="right") - 1
        inside = (j >= 0) & (rs <= me[np.clip(j, 0, None)])
        if every:
            out[:] = inside
        else:
            out[np.flatnonzero(m)] = inside
    return out
