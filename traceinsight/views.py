"""Derived views of a timeline that several rules (and the summary) need: computed once, on first use, cached.

All are plain DataFrames built with vectorized numpy/pandas; none walks events in Python.
"""

from __future__ import annotations

import re
import weakref
from functools import cached_property

import numpy as np
import pandas as pd

from .patterns import COLLECTIVE, SYNC_CALL
from .timeline import GPU_ACTIVITY_KINDS, Timeline


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
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    out_s = s[idx]
    out_e = np.maximum.reduceat(e, idx)
    return out_s, out_e


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

    def before(self, t: np.ndarray) -> np.ndarray:
        """Covered time before each t."""
        t = np.asarray(t, np.int64)
        if len(self.s) == 0:
            return np.zeros(len(t), np.int64)
        i = np.searchsorted(self.s, t, side="right")
        prev = np.clip(i - 1, 0, None)
        full = np.where(i > 0, self.cum[prev], 0)
        over = np.where(i > 0, np.maximum(self.e[prev] - t, 0), 0)
        return full - over

    def overlap(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Covered time inside each [a_i, b_i) (0 for empty or reversed windows)."""
        a = np.asarray(a, np.int64)
        return np.maximum(self.before(np.maximum(np.asarray(b, np.int64), a)) - self.before(a), 0)


#: Per categories Index and pattern, which categories match: name masks are asked for again and again (the
#: ledger, the views and the rules test the same few patterns on subsets that share one set of categories).
_CATEGORY_HITS: dict[tuple[int, str, int], tuple["weakref.ref[pd.Index]", np.ndarray]] = {}


def category_hits(cats: pd.Index, rx: "re.Pattern[str]") -> np.ndarray:
    """Per category, whether ``rx`` finds a match in it: one regex search per distinct name, never per row."""
    key = (id(cats), rx.pattern, rx.flags)
    got = _CATEGORY_HITS.get(key)
    if got is not None and got[0]() is cats:
        return got[1]
    hit = np.fromiter((rx.search(str(c)) is not None for c in cats), dtype=bool, count=len(cats))
    if len(_CATEGORY_HITS) > 512:
        _CATEGORY_HITS.clear()
    try:
        _CATEGORY_HITS[key] = (weakref.ref(cats), hit)
    except TypeError:  # not weakly referable: answer without keeping it
        pass
    return hit


#: Up to this many wanted categories, a mask is built by comparing the codes with each (one cheap pass per
#: category); above it, by one table lookup per row.
_FEW_CODES = 16


def codes_in(codes: np.ndarray, hit: np.ndarray, missing: bool = False) -> np.ndarray:
    """Per row, whether its category code is one of those ``hit`` marks (one bool per category); a missing value
    (code -1) gives ``missing``. The one home of "rows in these categories" for views, ledger and rules.

    Rules ask about one or two categories of a million rows: a comparison per wanted code, into one reused
    buffer, is several times cheaper than a table lookup, which first widens every small code to a full-length
    index array."""
    wanted = np.flatnonzero(hit)
    if len(wanted) > _FEW_CODES or missing:
        return np.append(np.asarray(hit, dtype=bool), missing).take(codes)  # code -1 reads the extra last entry
    out = np.zeros(len(codes), dtype=bool)
    tmp = np.empty(len(codes), dtype=bool)
    for c in wanted.tolist():
        np.equal(codes, c, out=tmp)
        out |= tmp
    return out


def name_mask(names: pd.Series, pattern: "str | re.Pattern[str]", case: bool = False) -> np.ndarray:
    """Rows whose name matches ``pattern`` (searched anywhere), evaluated once per distinct name.

    A string pattern is case-insensitive unless ``case``; a compiled pattern keeps its own flags.
    """
    rx = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, 0 if case else re.IGNORECASE)
    if len(names) == 0:
        return np.zeros(0, dtype=bool)
    if isinstance(names.dtype, pd.CategoricalDtype):
        cat = names.array
        return codes_in(cat.codes, category_hits(cat.categories, rx))
    return np.fromiter((rx.search(str(n)) is not None for n in names), dtype=bool, count=len(names))


def kind_mask(kinds: pd.Series, wanted: "tuple[str, ...] | list[str]") -> np.ndarray:
    """Rows whose value (a kind, a copy kind: a few categories) is one of ``wanted``; on the category codes when
    the column is categorical."""
    if isinstance(kinds.dtype, pd.CategoricalDtype):
        cat = kinds.array
        return codes_in(cat.codes, np.isin(np.asarray(cat.categories, dtype=object), list(wanted)))
    return kinds.isin(wanted).to_numpy()


def take_rows(frame: pd.DataFrame, positions: np.ndarray) -> pd.DataFrame:
    """``frame.iloc[positions]``, column by column: a numpy take per column (of the codes for a categorical)
    into a frame built without a second copy. Same columns, dtypes, index labels and values as pandas' take,
    which on the events (a million rows, two dozen columns) costs about half as much again."""
    if not frame.columns.is_unique or any(dt == object for dt in frame.dtypes):
        return frame.iloc[positions]  # a frame built from object arrays would infer their dtype again
    cols = {name: (col.to_numpy().take(positions) if isinstance(col.dtype, np.dtype) else col.array.take(positions)) for name, col in frame.items()}
    out = pd.DataFrame(cols, index=frame.index.take(positions), columns=frame.columns, copy=False)
    return out.__finalize__(frame)


def _join_keys(columns: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """One int64 key per row of two tables from several integer columns (each given as the pair of the two tables'
    arrays), equal exactly when all columns are equal. Mixed radix over each column's offset from its minimum
    while the product of the ranges stays far inside int64 (ranks, pids and correlation ids usually do); a
    column that would overflow is replaced by its codes (hashing), which is slower."""
    n_a, n_b = len(columns[0][0]), len(columns[0][1])
    key_a, key_b = np.zeros(n_a, np.int64), np.zeros(n_b, np.int64)
    room = 1
    for a, b in columns:
        a, b = a.astype(np.int64, copy=False), b.astype(np.int64, copy=False)
        if n_a + n_b == 0:
            continue
        lo = min(int(a.min()) if n_a else int(b.min()), int(b.min()) if n_b else int(a.min()))
        hi = max(int(a.max()) if n_a else int(b.max()), int(b.max()) if n_b else int(a.max()))
        span = hi - lo + 1
        if room * span >= 2**62 and room > 1:  # compress the key so far to its distinct values (at most n rows)
            codes, uniq = pd.factorize(np.concatenate([key_a, key_b]))
            key_a, key_b, room = codes[:n_a].astype(np.int64), codes[n_a:].astype(np.int64), max(len(uniq), 1)
        if room * span >= 2**62:  # and this column to its distinct values: two factors of at most n each
            codes, uniq = pd.factorize(np.concatenate([a, b]))
            a, b, lo, span = codes[:n_a].astype(np.int64), codes[n_a:].astype(np.int64), 0, max(len(uniq), 1)
        if span == 1:  # a constant column adds nothing to the key
            continue
        # key * span + (column - lo), in place (the key is this function's own array)
        key_a *= span
        key_a += a
        key_a -= lo
        key_b *= span
        key_b += b
        key_b -= lo
        room *= span
    return key_a, key_b


class _Overlaps:
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


class Views:
    """Shared, cached views of one timeline."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.events = timeline.events

    # --- time frame -------------------------------------------------------------------------------------
    @cached_property
    def span_ns(self) -> int:
        return self.timeline.span_ns

    # --- GPU activity -------------------------------------------------------------------------------------
    @cached_property
    def _on_device(self) -> np.ndarray:
        return self.events["device"].to_numpy() >= 0

    @cached_property
    def gpu_activity(self) -> pd.DataFrame:
        """Kernels, copies and memsets on a device (what makes a GPU busy)."""
        ev = self.events
        return take_rows(ev, np.flatnonzero(kind_mask(ev["kind"], GPU_ACTIVITY_KINDS) & self._on_device))

    @cached_property
    def kernels(self) -> pd.DataFrame:
        act = self.gpu_activity
        return take_rows(act, np.flatnonzero(kind_mask(act["kind"], ("kernel",))))

    @cached_property
    def is_collective(self) -> pd.Series:
        """Per row of ``gpu_activity``: a collective-communication kernel (NCCL, RCCL, ...), aligned on its index."""
        act = self.gpu_activity
        return pd.Series(name_mask(act["name"], COLLECTIVE) & (act["kind"] == "kernel").to_numpy(), index=act.index)

    @cached_property
    def runtime_calls(self) -> pd.DataFrame:
        """Host runtime/driver API calls (launches, copies, syncs)."""
        host = self.host_events
        return take_rows(host, np.flatnonzero(kind_mask(host["kind"], ("runtime",))))

    @cached_property
    def is_sync_call(self) -> pd.Series:
        """Per row of ``runtime_calls``: a call that blocks until the GPU finishes (``SYNC_CALL``), aligned on its index."""
        rt = self.runtime_calls
        return pd.Series(name_mask(rt["name"], SYNC_CALL), index=rt.index)

    @cached_property
    def busy(self) -> pd.DataFrame:
        """Per (rank, device): the union of GPU activity over all streams, as merged intervals."""
        act = self.gpu_activity
        if act.empty:
            return pd.DataFrame({c: pd.Series(dtype="int64") for c in ("rank", "device", "start_ns", "end_ns")})
        # only the four columns, grouped by one stable sort (a groupby would take every column of every row)
        r = act["rank"].to_numpy().astype(np.int64)
        d = act["device"].to_numpy().astype(np.int64)
        s = act["start_ns"].to_numpy()
        e = s + np.maximum(act["dur_ns"].to_numpy(), 0)
        if r.min() != r.max() or d.min() != d.max():
            order = np.lexsort((d, r))
            r, d, s, e = r[order], d[order], s[order], e[order]
        cut = np.flatnonzero(np.r_[True, (r[1:] != r[:-1]) | (d[1:] != d[:-1]), True])
        parts = [merge_intervals(s[a:b], e[a:b]) for a, b in zip(cut[:-1], cut[1:])]
        n = np.array([len(p[0]) for p in parts])
        return pd.DataFrame(
            {
                "rank": np.repeat(r[cut[:-1]], n),
                "device": np.repeat(d[cut[:-1]], n),
                "start_ns": np.concatenate([p[0] for p in parts]),
                "end_ns": np.concatenate([p[1] for p in parts]),
            }
        )

    @cached_property
    def gaps(self) -> pd.DataFrame:
        """Per (rank, device): idle gaps between busy intervals, inside the device's active window."""
        b = self.busy
        if b.empty:
            return pd.DataFrame({c: pd.Series(dtype="int64") for c in ("rank", "device", "start_ns", "end_ns", "dur_ns")})
        same = (b["rank"].to_numpy()[1:] == b["rank"].to_numpy()[:-1]) & (b["device"].to_numpy()[1:] == b["device"].to_numpy()[:-1])
        g_start = b["end_ns"].to_numpy()[:-1][same]
        g_end = b["start_ns"].to_numpy()[1:][same]
        out = pd.DataFrame(
            {
                "rank": b["rank"].to_numpy()[1:][same],
                "device": b["device"].to_numpy()[1:][same],
                "start_ns": g_start,
                "end_ns": g_end,
                "dur_ns": g_end - g_start,
            }
        )
        return out[out["dur_ns"] > 0].reset_index(drop=True)

    @cached_property
    def utilization(self) -> pd.DataFrame:
        """Per (rank, device): active window (first to last GPU activity), busy and idle time, busy %."""
        b = self.busy
        if b.empty:
            return pd.DataFrame(
                {c: pd.Series(dtype="float64") for c in ("rank", "device", "window_start_ns", "window_end_ns", "window_ns", "busy_ns", "idle_ns", "busy_pct")}
            )
        # ``busy`` is sorted by (rank, device, start) with disjoint intervals: each device's rows are one run, its
        # first start the window's start and its largest end the window's end (reductions per run, no groupby)
        r, d = b["rank"].to_numpy(), b["device"].to_numpy()
        s, e = b["start_ns"].to_numpy(), b["end_ns"].to_numpy()
        head = np.flatnonzero(np.r_[True, (r[1:] != r[:-1]) | (d[1:] != d[:-1])])
        w0 = np.minimum.reduceat(s, head)
        w1 = np.maximum.reduceat(e, head)
        busy = np.add.reduceat(e - s, head)
        window = w1 - w0
        return pd.DataFrame(
            {
                "rank": r[head],
                "device": d[head],
                "window_start_ns": w0,
                "window_end_ns": w1,
                "busy_ns": busy,
                "window_ns": window,
                "idle_ns": window - busy,
                "busy_pct": np.where(window > 0, 100.0 * busy / np.maximum(window, 1), 0.0),
            }
        )

    # --- host <-> GPU links ---------------------------------------------------------------------------
    @cached_property
    def launches(self) -> pd.DataFrame:
        """Each runtime/driver call joined to the GPU activity it created, on (rank, pid, correlation).

        Columns: ``launch_idx`` / ``gpu_idx`` (row labels in ``events``), the call's name/start/dur/tid, the GPU
        row's kind/name/start/dur/device/stream, and ``launch_delay_ns`` = GPU start - end of the call (>= 0).
        """
        ev = self.events
        corr = ev["correlation"].to_numpy()
        dev = ev["device"].to_numpy()
        kind = ev["kind"]  # compared on its category codes, never as 10^6 Python strings
        linked = corr >= 0
        host_i = np.flatnonzero(kind_mask(kind, ("runtime",)) & linked)
        gpu_i = np.flatnonzero(kind_mask(kind, GPU_ACTIVITY_KINDS) & self._on_device & linked)
        del linked
        # one int64 key per (rank, pid, correlation), joined by sorting: a hash merge of 10^6 rows costs more
        hk, gk = _join_keys([(a[host_i], a[gpu_i]) for a in (ev["rank"].to_numpy(), ev["pid"].to_numpy(), corr)])
        order = np.argsort(hk, kind="stable")
        hk_sorted = hk[order]
        first = np.ones(len(hk_sorted), dtype=bool)  # the first runtime row of a key wins (as drop_duplicates did)
        first[1:] = hk_sorted[1:] != hk_sorted[:-1]
        hk_sorted, h_rows = hk_sorted[first], host_i[order[first]]
        # each GPU key's place among the host keys, searched in key order (neighbouring searches share their path)
        pos = np.zeros(len(gk), np.intp)
        if len(hk_sorted):
            by_key = np.argsort(gk, kind="stable")
            pos[by_key] = np.minimum(np.searchsorted(hk_sorted, gk[by_key]), len(hk_sorted) - 1)
            hit = hk_sorted[pos] == gk
        else:
            hit = np.zeros(len(gk), dtype=bool)
        li, gi = h_rows[pos[hit]], gpu_i[hit]
        order = np.lexsort((gi, li))  # launch order, as the merge gave
        li, gi = li[order], gi[order]
        launch_start, launch_dur = ev["start_ns"].to_numpy()[li], ev["dur_ns"].to_numpy()[li]
        gpu_start = ev["start_ns"].to_numpy()[gi]
        columns = {
            "launch_idx": ev.index.take(li).to_numpy(),  # row labels, without spelling out a RangeIndex
            "rank": ev["rank"].to_numpy()[li],
            "pid": ev["pid"].to_numpy()[li],
            "correlation": corr[li],
            "launch_name": ev["name"].array.take(li),
            "launch_start_ns": launch_start,
            "launch_dur_ns": launch_dur,
            "tid": ev["tid"].to_numpy()[li],
            "gpu_idx": ev.index.take(gi).to_numpy(),
            "kind": kind.array.take(gi),
            "gpu_name": ev["name"].array.take(gi),
            "gpu_start_ns": gpu_start,
            "gpu_dur_ns": ev["dur_ns"].to_numpy()[gi],
            "device": dev[gi],
            "stream": ev["stream"].to_numpy()[gi],
            "launch_delay_ns": np.maximum(gpu_start - (launch_start + launch_dur), 0),
        }
        return pd.DataFrame(columns, index=pd.RangeIndex(len(li)), copy=False)

    # --- steps ---------------------------------------------------------------------------------------
    @cached_property
    def steps(self) -> pd.DataFrame:
        """One row per step marker: rank, step number, name, start/end/dur.

        The number is the marker's own ``step`` value, which ``timeline.assign_steps`` derived from its name.
        """
        ev = self.events
        pos = np.flatnonzero(kind_mask(ev["kind"], ("step",)))  # the few step rows: no pass over every column
        s = {c: ev[c].take(pos) for c in ("rank", "name", "start_ns", "dur_ns", "step")}
        out = pd.DataFrame(
            {
                "rank": s["rank"].to_numpy(),
                "name": s["name"].astype(str).to_numpy(),
                "start_ns": s["start_ns"].to_numpy(),
                "dur_ns": s["dur_ns"].to_numpy(),
                "step": s["step"].to_numpy(),
            }
        )
        out["end_ns"] = out["start_ns"] + out["dur_ns"]
        return out.sort_values(["rank", "start_ns"]).reset_index(drop=True)

    @cached_property
    def step_count(self) -> int:
        s = self.steps
        if s.empty:
            return 0
        return int(s.groupby("rank").size().max())

    @cached_property
    def mean_step_ns(self) -> float | None:
        s = self.steps
        if s.empty:
            return None
        return float(s["dur_ns"].mean())

    # --- windows ---------------------------------------------------------------------------------------
    #: The cached frames ``rows_overlapping`` answers for (each has start_ns and dur_ns).
    WINDOWED = ("gpu_activity", "runtime_calls", "host_events")

    def rows_overlapping(self, frame: str, start_ns: int, end_ns: int) -> np.ndarray:
        """Positions in ``getattr(self, frame)`` (one of ``WINDOWED``) of the rows that overlap [start_ns, end_ns),
        ascending: ``frame.iloc[positions]`` is what a boolean mask over the whole frame would take."""
        return self._overlaps(frame).rows(start_ns, end_ns)

    def _overlaps(self, frame: str) -> _Overlaps:
        if frame not in self.WINDOWED:
            raise ValueError(f"rows_overlapping: unknown frame {frame!r}; one of {', '.join(self.WINDOWED)}")
        cache = self.__dict__.setdefault("_overlap_index", {})
        if frame not in cache:
            df = getattr(self, frame)
            start = df["start_ns"].to_numpy()
            cache[frame] = _Overlaps(start, start + df["dur_ns"].to_numpy())
        return cache[frame]

    #: Rows per block of the events' zone map (``events_overlapping``).
    ZONE_ROWS = 2048

    @cached_property
    def _event_zones(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The events' start and end, and per block of ``ZONE_ROWS`` consecutive rows the earliest start and the
        latest end. Rows come in rough time order (per file, thread, stream), so a short window touches few
        blocks; two reductions, where a sorted index would cost a sort of every row."""
        start = self.events["start_ns"].to_numpy()
        end = start + self.events["dur_ns"].to_numpy()
        heads = np.arange(0, len(start), self.ZONE_ROWS)
        if not len(heads):
            return start, end, end[:0], end[:0]
        return start, end, np.minimum.reduceat(start, heads), np.maximum.reduceat(end, heads)

    def events_overlapping(self, start_ns: int, end_ns: int) -> np.ndarray:
        """Positions in ``events`` (ascending) of the rows that overlap [start_ns, end_ns), of every kind.

        Only the blocks whose span meets the window are looked at (all rows when a quarter of them do): for
        the handful of windows a report draws this is far cheaper than building the frames and sorted indices
        ``rows_overlapping`` answers from (which pay off over many queries)."""
        start, end, lo, hi = self._event_zones
        blocks = np.flatnonzero((lo < end_ns) & (hi > start_ns))
        if len(blocks) * 4 > len(lo):
            return np.flatnonzero((start < end_ns) & (end > start_ns))
        rows = (blocks[:, None] * self.ZONE_ROWS + np.arange(self.ZONE_ROWS)).ravel()
        rows = rows[rows < len(start)]
        return rows[(start[rows] < end_ns) & (end[rows] > start_ns)]

    def device_rows(self, frame: str, rank: int, device: int, start_ns: int | None = None, end_ns: int | None = None) -> slice:
        """The rows of ``busy`` or ``gaps`` (sorted by rank, device, start; disjoint within a device) on one device,
        as a slice; with a window, only those overlapping [start_ns, end_ns)."""
        if frame not in ("busy", "gaps"):
            raise ValueError(f"device_rows: unknown frame {frame!r}; busy or gaps")
        cache = self.__dict__.setdefault("_device_bounds", {})
        if frame not in cache:
            df = getattr(self, frame)
            r, d = df["rank"].to_numpy(), df["device"].to_numpy()
            cut = np.flatnonzero(np.r_[True, (r[1:] != r[:-1]) | (d[1:] != d[:-1]), True]) if len(df) else np.zeros(1, np.int64)
            cache[frame] = ({(int(r[a]), int(d[a])): (int(a), int(b)) for a, b in zip(cut[:-1], cut[1:])}, df["start_ns"].to_numpy(), df["end_ns"].to_numpy())
        bounds, start, end = cache[frame]
        lo, hi = bounds.get((int(rank), int(device)), (0, 0))
        if start_ns is not None and end_ns is not None and hi > lo:
            lo, hi = lo + int(np.searchsorted(end[lo:hi], start_ns, side="right")), lo + int(np.searchsorted(start[lo:hi], end_ns, side="left"))
            hi = max(hi, lo)
        return slice(lo, hi)

    @cached_property
    def device_keys(self) -> list[tuple[int, int]]:
        """The (rank, device) pairs with GPU activity, sorted: read off ``busy``, which holds at least one interval
        per such device, sorted by (rank, device)."""
        b = self.busy
        if b.empty:
            return []
        r, d = b["rank"].to_numpy(), b["device"].to_numpy()
        head = np.flatnonzero(np.r_[True, (r[1:] != r[:-1]) | (d[1:] != d[:-1])])
        return list(zip(r[head].tolist(), d[head].tolist()))

    # --- host activity -------------------------------------------------------------------------------
    def host_rows_overlapping(self, rank: int, start_ns: int, end_ns: int, kinds: tuple[str, ...] | None = None) -> pd.DataFrame:
        """Host rows of ``rank`` that overlap [start_ns, end_ns) (for explaining what the host did in a gap).

        Called once per shown gap, so the window is found on a start-ordered index and only its rows are taken.
        """
        pos = self.rows_overlapping("host_events", start_ns, end_ns)
        pos = pos[self._host_arrays[0][pos] == rank]
        out = self.host_events.iloc[pos]
        if kinds is not None:
            out = out[out["kind"].isin(kinds).to_numpy()]
        return out

    @cached_property
    def _host_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ev = self.host_events
        start = ev["start_ns"].to_numpy()
        return ev["rank"].to_numpy(), start, start + ev["dur_ns"].to_numpy()

    @cached_property
    def host_events(self) -> pd.DataFrame:
        """Every row not on a device (CPU ops, runtime calls, annotations, Python frames, steps)."""
        return take_rows(self.events, np.flatnonzero(~self._on_device))

    # --- time ledger -------------------------------------------------------------------------------------
    @cached_property
    def ledger(self):
        """Every ns of each device's window in one bucket (``traceinsight.ledger``), built once."""
        from .ledger import build_ledger  # the ledger builds on these views

        return build_ledger(self)

    # --- GPU memory --------------------------------------------------------------------------------------
    @cached_property
    def memory(self):
        """GPU memory per device: allocated / reserved over time, peaks, per-step headroom (``traceinsight.memory``)."""
        from .memory import Memory  # built on these views (steps, runtime calls, the ledger's warm-up)

        return Memory(self)
