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
    order = np.argsort(starts, kind="stable")
    s = np.asarray(starts, dtype=np.int64)[order]
    e = np.asarray(ends, dtype=np.int64)[order]
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


def _category_hits(cats: pd.Index, rx: "re.Pattern[str]") -> np.ndarray:
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


def name_mask(names: pd.Series, pattern: "str | re.Pattern[str]", case: bool = False) -> np.ndarray:
    """Rows whose name matches ``pattern`` (searched anywhere), evaluated once per distinct name.

    A string pattern is case-insensitive unless ``case``; a compiled pattern keeps its own flags.
    """
    rx = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, 0 if case else re.IGNORECASE)
    if len(names) == 0:
        return np.zeros(0, dtype=bool)
    if isinstance(names.dtype, pd.CategoricalDtype):
        hit = _category_hits(names.cat.categories, rx)
        if not hit.any():
            return np.zeros(len(names), dtype=bool)
        # one lookup per row; a missing name (code -1) reads the extra False at the end
        return np.append(hit, False)[names.cat.codes.to_numpy()]
    return np.fromiter((rx.search(str(n)) is not None for n in names), dtype=bool, count=len(names))


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
    def gpu_activity(self) -> pd.DataFrame:
        """Kernels, copies and memsets on a device (what makes a GPU busy)."""
        ev = self.events
        mask = ev["kind"].isin(GPU_ACTIVITY_KINDS).to_numpy() & (ev["device"].to_numpy() >= 0)
        return ev[mask]

    @cached_property
    def kernels(self) -> pd.DataFrame:
        ev = self.gpu_activity
        return ev[ev["kind"] == "kernel"]

    @cached_property
    def is_collective(self) -> pd.Series:
        """Per row of ``gpu_activity``: a collective-communication kernel (NCCL, RCCL, ...), aligned on its index."""
        act = self.gpu_activity
        return pd.Series(name_mask(act["name"], COLLECTIVE) & (act["kind"] == "kernel").to_numpy(), index=act.index)

    @cached_property
    def runtime_calls(self) -> pd.DataFrame:
        """Host runtime/driver API calls (launches, copies, syncs)."""
        host = self.host_events
        return host[(host["kind"] == "runtime").to_numpy()]

    @cached_property
    def is_sync_call(self) -> pd.Series:
        """Per row of ``runtime_calls``: a call that blocks until the GPU finishes (``SYNC_CALL``), aligned on its index."""
        rt = self.runtime_calls
        return pd.Series(name_mask(rt["name"], SYNC_CALL), index=rt.index)

    @cached_property
    def busy(self) -> pd.DataFrame:
        """Per (rank, device): the union of GPU activity over all streams, as merged intervals."""
        parts = []
        act = self.gpu_activity
        for (rank, device), g in act.groupby(["rank", "device"], observed=True, sort=True):
            s = g["start_ns"].to_numpy()
            e = s + np.maximum(g["dur_ns"].to_numpy(), 0)
            ms, me = merge_intervals(s, e)
            parts.append(pd.DataFrame({"rank": rank, "device": device, "start_ns": ms, "end_ns": me}))
        if not parts:
            return pd.DataFrame({c: pd.Series(dtype="int64") for c in ("rank", "device", "start_ns", "end_ns")})
        return pd.concat(parts, ignore_index=True)

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
        b = b.assign(len_ns=b["end_ns"] - b["start_ns"])
        agg = b.groupby(["rank", "device"], sort=True).agg(
            window_start_ns=("start_ns", "min"), window_end_ns=("end_ns", "max"), busy_ns=("len_ns", "sum")
        )
        agg["window_ns"] = agg["window_end_ns"] - agg["window_start_ns"]
        agg["idle_ns"] = agg["window_ns"] - agg["busy_ns"]
        agg["busy_pct"] = np.where(agg["window_ns"] > 0, 100.0 * agg["busy_ns"] / agg["window_ns"].clip(lower=1), 0.0)
        return agg.reset_index()

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
        kind = ev["kind"]  # compared as a categorical (on its codes), never as 10^6 Python strings
        host_i = np.flatnonzero((kind == "runtime").to_numpy() & (corr >= 0))
        gpu_i = np.flatnonzero(kind.isin(GPU_ACTIVITY_KINDS).to_numpy() & (dev >= 0) & (corr >= 0))
        # one int64 key per (rank, pid, correlation), joined by sorting: a hash merge of 10^6 rows costs more
        codes = [pd.factorize(a)[0].astype(np.int64) for a in (ev["rank"].to_numpy(), ev["pid"].to_numpy(), corr)]
        key = np.zeros(len(ev), np.int64)
        for c in codes:  # mixed radix over the codes: unique, and far from int64's range whatever the raw values
            key = key * (int(c.max()) + 1 if len(c) else 1) + c
        hk = key[host_i]
        order = np.argsort(hk, kind="stable")
        hk_sorted = hk[order]
        first = np.ones(len(hk_sorted), dtype=bool)  # the first runtime row of a key wins (as drop_duplicates did)
        first[1:] = hk_sorted[1:] != hk_sorted[:-1]
        hk_sorted, h_rows = hk_sorted[first], host_i[order[first]]
        gk = key[gpu_i]
        pos = np.clip(np.searchsorted(hk_sorted, gk), 0, max(len(hk_sorted) - 1, 0))
        hit = (len(hk_sorted) > 0) & (hk_sorted[pos] == gk) if len(hk_sorted) else np.zeros(len(gk), dtype=bool)
        li, gi = h_rows[pos[hit]], gpu_i[hit]
        order = np.lexsort((gi, li))  # launch order, as the merge gave
        li, gi = li[order], gi[order]
        labels = ev.index.to_numpy()
        m = pd.DataFrame(
            {
                "launch_idx": labels[li],
                "rank": ev["rank"].to_numpy()[li],
                "pid": ev["pid"].to_numpy()[li],
                "correlation": corr[li],
                "launch_name": ev["name"].take(li).reset_index(drop=True),
                "launch_start_ns": ev["start_ns"].to_numpy()[li],
                "launch_dur_ns": ev["dur_ns"].to_numpy()[li],
                "tid": ev["tid"].to_numpy()[li],
                "gpu_idx": labels[gi],
                "kind": ev["kind"].take(gi).reset_index(drop=True),
                "gpu_name": ev["name"].take(gi).reset_index(drop=True),
                "gpu_start_ns": ev["start_ns"].to_numpy()[gi],
                "gpu_dur_ns": ev["dur_ns"].to_numpy()[gi],
                "device": dev[gi],
                "stream": ev["stream"].to_numpy()[gi],
            }
        )
        m["launch_delay_ns"] = (m["gpu_start_ns"] - (m["launch_start_ns"] + m["launch_dur_ns"])).clip(lower=0)
        return m

    # --- steps ---------------------------------------------------------------------------------------
    @cached_property
    def steps(self) -> pd.DataFrame:
        """One row per step marker: rank, step number, name, start/end/dur.

        The number is the marker's own ``step`` value, which ``timeline.assign_steps`` derived from its name.
        """
        ev = self.events
        s = ev[ev["kind"] == "step"]
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

    # --- host activity -------------------------------------------------------------------------------
    def host_rows_overlapping(self, rank: int, start_ns: int, end_ns: int, kinds: tuple[str, ...] | None = None) -> pd.DataFrame:
        """Host rows of ``rank`` that overlap [start_ns, end_ns) (for explaining what the host did in a gap).

        Called once per shown gap, so the mask is built on cached arrays and only the matching rows are taken.
        """
        rank_a, start_a, end_a = self._host_arrays
        m = (rank_a == rank) & (start_a < end_ns) & (end_a > start_ns)
        out = self.host_events.iloc[np.flatnonzero(m)]
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
        ev = self.events
        return ev[ev["device"].to_numpy() < 0]

    # --- time ledger -------------------------------------------------------------------------------------
    @cached_property
    def ledger(self):
        """Every ns of each device's window in one bucket (``traceinsight.ledger``), built once."""
        from .ledger import build_ledger  # the ledger builds on these views

        return build_ledger(self)
