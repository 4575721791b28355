"""Derived views of a timeline that several rules (and the summary) need: computed once, on first use, cached.

All are plain DataFrames built with vectorized numpy/pandas; none walks events in Python. The views know nothing
of what is built on them (the ledger, the what-if graphs, memory, efficiency): ``traceinsight.derive.derived`` owns
those and hands each builder the views (and what else it needs) as arguments. ``memo`` is the one place a query over
the views keeps its answer, named by the module that asks (the steady-state model's host arrays, the rule library's
shared queries): the views hold the slots and know nothing of what is in them. Intervals and masks are
``traceinsight.vocab.intervals`` and ``traceinsight.vocab.masks``.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Callable, TypeVar

import numpy as np
import pandas as pd

from traceinsight.vocab.intervals import Overlaps, merge_intervals
from traceinsight.vocab.masks import first_of_key, join_keys, kind_mask, name_mask, take_rows, texts_at
from traceinsight.vocab.patterns import COLLECTIVE, SYNC_CALL
from traceinsight.model.timeline import GPU_ACTIVITY_KINDS, Timeline


T = TypeVar("T")


class Views:
    """Shared, cached views of one timeline."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.events = timeline.events
        self._memo: dict[str, Any] = {}

    def memo(self, key: str, build: Callable[[], T]) -> T:
        """The value kept under ``key`` ("module.query[:argument]"), built by ``build()`` the first time it is asked:
        a query several modules or rules ask of one timeline is answered once per analysis."""
        try:
            return self._memo[key]
        except KeyError:
            out = self._memo[key] = build()
            return out

    def memo_keys(self) -> list[str]:
        """The keys answered so far, sorted (``Derived.contents`` lists them)."""
        return sorted(self._memo)

    # --- columns as arrays ---------------------------------------------------------------------------------
    def array(self, frame: str, column: str) -> np.ndarray:
        """``getattr(self, frame)[column].to_numpy()`` for a view named ``frame`` (``kernels``, ``utilization``,
        ``host_events``, ...), read once per analysis and shared by everyone who asks: reading a column builds a
        Series each time (tens of µs, which on a rank of a few dozen events costs more than the arithmetic done
        on it). The array is shared: read it, never write to it."""
        cache = self.__dict__.setdefault("_arrays", {})
        key = (frame, column)
        got = cache.get(key)
        if got is None:
            got = cache[key] = getattr(self, frame)[column].to_numpy()
        return got

    # --- time frame -------------------------------------------------------------------------------------
    @cached_property
    def span_ns(self) -> int:
        return self.timeline.span_ns

    # --- GPU activity -------------------------------------------------------------------------------------
    @cached_property
    def _on_device(self) -> np.ndarray:
        return self.array("events", "device") >= 0

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
        return pd.Series(name_mask(act["name"], COLLECTIVE) & kind_mask(act["kind"], ("kernel",)), index=act.index)

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
        r = self.array("gpu_activity", "rank").astype(np.int64)
        d = self.array("gpu_activity", "device").astype(np.int64)
        s = self.array("gpu_activity", "start_ns")
        e = s + np.maximum(self.array("gpu_activity", "dur_ns"), 0)
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
        r, d = self.array("busy", "rank"), self.array("busy", "device")
        same = (r[1:] == r[:-1]) & (d[1:] == d[:-1])
        g_start = self.array("busy", "end_ns")[:-1][same]
        g_end = self.array("busy", "start_ns")[1:][same]
        dur = g_end - g_start
        keep = dur > 0  # rows chosen on the arrays, one frame built
        return pd.DataFrame(
            {
                "rank": r[1:][same][keep],
                "device": d[1:][same][keep],
                "start_ns": g_start[keep],
                "end_ns": g_end[keep],
                "dur_ns": dur[keep],
            }
        )

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
        r, d = self.array("busy", "rank"), self.array("busy", "device")
        s, e = self.array("busy", "start_ns"), self.array("busy", "end_ns")
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
        col = lambda c: self.array("events", c)  # noqa: E731 - each column read once per analysis
        corr = col("correlation")
        dev = col("device")
        kind = ev["kind"]  # compared on its category codes, never as 10^6 Python strings
        linked = corr >= 0
        host_i = np.flatnonzero(kind_mask(kind, ("runtime",)) & linked)
        gpu_i = np.flatnonzero(kind_mask(kind, GPU_ACTIVITY_KINDS) & self._on_device & linked)
        del linked
        # one int64 key per (rank, pid, correlation); the first runtime row of a key wins (as drop_duplicates did)
        hk, gk = join_keys([(a[host_i], a[gpu_i]) for a in (col("rank"), col("pid"), corr)])
        first = first_of_key(hk, gk)
        hit = first >= 0
        li, gi = host_i[first[hit]], gpu_i[hit]
        order = np.argsort(li, kind="stable")  # launch order, as the merge gave (ties: GPU rows, ascending already)
        li, gi = li[order], gi[order]
        launch_start, launch_dur = col("start_ns")[li], col("dur_ns")[li]
        gpu_start = col("start_ns")[gi]
        columns = {
            "launch_idx": ev.index.take(li).to_numpy(),  # row labels, without spelling out a RangeIndex
            "rank": col("rank")[li],
            "pid": col("pid")[li],
            "correlation": corr[li],
            "launch_name": ev["name"].array.take(li),
            "launch_start_ns": launch_start,
            "launch_dur_ns": launch_dur,
            "tid": col("tid")[li],
            "gpu_idx": ev.index.take(gi).to_numpy(),
            "kind": kind.array.take(gi),
            "gpu_name": ev["name"].array.take(gi),
            "gpu_start_ns": gpu_start,
            "gpu_dur_ns": col("dur_ns")[gi],
            "device": dev[gi],
            "stream": col("stream")[gi],
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
        col = lambda c: self.array("events", c)  # noqa: E731 - each column read once per analysis
        pos = np.flatnonzero(kind_mask(ev["kind"], ("step",)))  # the few step rows: no pass over every column
        rank, start = col("rank")[pos], col("start_ns")[pos]
        pos = pos[np.lexsort((start, rank))]  # by rank, then start (stable), as sort_values on the two columns
        start, dur = col("start_ns")[pos], col("dur_ns")[pos]
        return pd.DataFrame(
            {
                "rank": col("rank")[pos],
                "name": texts_at(ev["name"], pos),
                "start_ns": start,
                "dur_ns": dur,
                "step": col("step")[pos],
                "end_ns": start + dur,
            }
        )

    @cached_property
    def step_count(self) -> int:
        s = self.steps
        if s.empty:
            return 0
        return int(np.unique(self.array("steps", "rank"), return_counts=True)[1].max())

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

    def _overlaps(self, frame: str) -> Overlaps:
        if frame not in self.WINDOWED:
            raise ValueError(f"rows_overlapping: unknown frame {frame!r}; one of {', '.join(self.WINDOWED)}")
        cache = self.__dict__.setdefault("_overlap_index", {})
        if frame not in cache:
            df = getattr(self, frame)
            start = df["start_ns"].to_numpy()
            cache[frame] = Overlaps(start, start + df["dur_ns"].to_numpy())
        return cache[frame]

    #: Rows per block of the events' zone map (``events_overlapping``), and blocks per chunk its ends are summed in.
    ZONE_ROWS = 2048
    _ZONE_CHUNK_BLOCKS = 512

    @cached_property
    def _event_zones(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The events' start and duration, and per block of ``ZONE_ROWS`` consecutive rows the earliest start and
        the latest end. Rows come in rough time order (per file, thread, stream), so a short window touches few
        blocks; two reductions, where a sorted index would cost a sort of every row. The ends are summed a
        million rows at a time and not kept (a column of every event, for the few windows a report draws)."""
        start = self.events["start_ns"].to_numpy()
        dur = self.events["dur_ns"].to_numpy()
        n = len(start)
        heads = np.arange(0, n, self.ZONE_ROWS)
        if not len(heads):
            end = start + dur
            return start, dur, end[:0], end[:0]
        hi = np.empty(len(heads), dtype=np.result_type(start, dur))
        chunk = self.ZONE_ROWS * self._ZONE_CHUNK_BLOCKS
        for a in range(0, n, chunk):
            b = min(a + chunk, n)
            hi[a // self.ZONE_ROWS: (b + self.ZONE_ROWS - 1) // self.ZONE_ROWS] = np.maximum.reduceat(start[a:b] + dur[a:b], np.arange(0, b - a, self.ZONE_ROWS))
        return start, dur, np.minimum.reduceat(start, heads), hi

    def events_overlapping(self, start_ns: int, end_ns: int) -> np.ndarray:
        """Positions in ``events`` (ascending) of the rows that overlap [start_ns, end_ns), of every kind.

        Only the blocks whose span meets the window are looked at (all rows when a quarter of them do): for
        the handful of windows a report draws this is far cheaper than building the frames and sorted indices
        ``rows_overlapping`` answers from (which pay off over many queries)."""
        start, dur, lo, hi = self._event_zones
        blocks = np.flatnonzero((lo < end_ns) & (hi > start_ns))
        if len(blocks) * 4 > len(lo):
            return np.flatnonzero((start < end_ns) & (start + dur > start_ns))
        rows = (blocks[:, None] * self.ZONE_ROWS + np.arange(self.ZONE_ROWS)).ravel()
        rows = rows[rows < len(start)]
        s = start[rows]
        return rows[(s < end_ns) & (s + dur[rows] > start_ns)]

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
        pos = pos[self.array("host_events", "rank")[pos] == rank]
        out = self.host_events.iloc[pos]
        if kinds is not None:
            out = out[out["kind"].isin(kinds).to_numpy()]
        return out

    @cached_property
    def host_events(self) -> pd.DataFrame:
        """Every row not on a device (CPU ops, runtime calls, annotations, Python frames, steps)."""
        return take_rows(self.events, np.flatnonzero(~self._on_device))
