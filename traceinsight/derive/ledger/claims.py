"""Claims: which slices of the ledger a finding's time ranges point at, and their ns per (rank, device, bucket)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

import numpy as np
import pandas as pd

from traceinsight.vocab.buckets import BUCKETS, BUSY_BUCKETS, IDLE_BUCKETS
from traceinsight.vocab.intervals import applies_to
from traceinsight.model.finding import Instances, instance_columns
from traceinsight.derive.ledger.intervals import EMPTY, clipped_ns, merged, overlapping

if TYPE_CHECKING:  # pragma: no cover
    from traceinsight.derive.ledger.account import Ledger

_CODE = {b: i for i, b in enumerate(BUCKETS)}


def _wanted(buckets: str | Iterable[str]) -> set[str]:
    want = {buckets} if isinstance(buckets, str) else set(buckets)
    unknown = want - set(BUCKETS)
    if unknown:
        raise ValueError(f"unknown ledger bucket(s) {sorted(unknown)}; known: {', '.join(BUCKETS)}")
    return want


def _within_arrays(within: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """start_ns, end_ns (int64), rank and device (float64, NaN for unknown; None when ``within`` has no such
    column) of the time ranges a claim is limited to (see ``Ledger.claimed``)."""
    if isinstance(within, pd.DataFrame):
        r = within["rank"].to_numpy(dtype=float) if "rank" in within else None
        d = within["device"].to_numpy(dtype=float) if "device" in within else None
        return within["start_ns"].to_numpy(np.int64), within["end_ns"].to_numpy(np.int64), r, d
    items = within if isinstance(within, (list, Instances)) else list(within)
    if isinstance(items, Instances) or (items and not any(isinstance(it, (tuple, list)) for it in items)):
        # instance-like objects: columns straight from attributes (an ``Instances`` holds them already)
        c = instance_columns(items)
        return c.start_ns, c.end_ns, c.rank, c.device
    if not items:
        return EMPTY, EMPTY, None, None

    def opt(item: Any, name: str) -> float:
        v = None if isinstance(item, (tuple, list)) else getattr(item, name, None)
        return np.nan if v is None else float(v)

    s = np.array([int(it[0]) if isinstance(it, (tuple, list)) else int(it.start_ns) for it in items], np.int64)
    e = np.array([int(it[1]) if isinstance(it, (tuple, list)) else int(it.end_ns) for it in items], np.int64)
    return s, e, np.array([opt(it, "rank") for it in items], float), np.array([opt(it, "device") for it in items], float)


def claimed(ledger: "Ledger", buckets: str | Iterable[str], rank: int | None, device: int | None, within: Any) -> pd.DataFrame:
    """``Ledger.claimed``: the slices in ``buckets`` on ``rank``/``device``, those ``within`` points at (busy ones
    clipped to the ranges, idle ones whole per touched gap)."""
    want = _wanted(buckets)
    sl = ledger.slices
    bucket = sl["bucket"]
    by_code = isinstance(bucket.dtype, pd.CategoricalDtype) and list(bucket.cat.categories) == list(BUCKETS)
    if by_code:  # the ledger's own frame: compare bucket codes, never strings
        code = bucket.cat.codes.to_numpy()
        m = np.isin(np.arange(len(BUCKETS) + 1), [_CODE[b] for b in want])[code]  # code -1 reads the extra False
        idle_row = code >= len(BUSY_BUCKETS)
    else:
        m = bucket.isin(want).to_numpy().copy()
        idle_row = ~bucket.isin(BUSY_BUCKETS).to_numpy()
    s_rank, s_dev = sl["rank"].to_numpy(), sl["device"].to_numpy()
    if rank is not None:
        m &= s_rank == rank
    if device is not None:
        m &= s_dev == device
    if within is None or not m.any():
        return sl[m].reset_index(drop=True)
    w_s, w_e, w_r, w_d = _within_arrays(within)
    if not len(w_s):
        return sl.iloc[:0].reset_index(drop=True)
    s_start, s_end = sl["start_ns"].to_numpy(), sl["end_ns"].to_numpy()
    pos = np.flatnonzero(m)
    # the chosen slices by (rank, device), each device's rows in frame order (the ledger's frame is already so)
    pr, pd_ = s_rank[pos].astype(np.int64), s_dev[pos].astype(np.int64)
    if len(pos) > 1 and not np.all((pr[1:] > pr[:-1]) | ((pr[1:] == pr[:-1]) & (pd_[1:] >= pd_[:-1]))):
        o = np.lexsort((pd_, pr))
        pos, pr, pd_ = pos[o], pr[o], pd_[o]
    cut = np.flatnonzero(np.r_[True, (pr[1:] != pr[:-1]) | (pd_[1:] != pd_[:-1]), True])
    gaps = ledger.gaps
    g_cols = (gaps["rank"].to_numpy(), gaps["device"].to_numpy(), gaps["start_ns"].to_numpy(np.int64), gaps["end_ns"].to_numpy(np.int64))
    src: list[np.ndarray] = []  # per device: the rows of ``sl`` taken, and their (clipped) start and end
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    for a, b in zip(cut[:-1], cut[1:]):
        r, d = int(pr[a]), int(pd_[a])
        keep = applies_to(len(w_s), w_r, w_d, r, d)
        if not keep.any():
            continue
        s0 = w_s[keep]
        ws, we = merged(s0, np.maximum(w_e[keep], s0 + 1))  # a point instance is 1 ns
        got = _claimed_on_device(pos[a:b], idle_row, s_start, s_end, ws, we, g_cols, r, d)
        if got is not None:
            src.append(got[0]), starts.append(got[1]), ends.append(got[2])
    if not src or not sum(len(x) for x in src):
        return sl.iloc[:0].reset_index(drop=True)
    out = sl.iloc[np.concatenate(src)].reset_index(drop=True)
    out["start_ns"] = np.concatenate(starts).astype(s_start.dtype, copy=False)
    out["end_ns"] = np.concatenate(ends).astype(s_end.dtype, copy=False)
    return out


def _claimed_on_device(gpos: np.ndarray, idle_row: np.ndarray, s_start: np.ndarray, s_end: np.ndarray, ws: np.ndarray, we: np.ndarray,
                       g_cols: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], r: int, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """One device's part of ``claimed``: of its chosen slice rows ``gpos``, the rows taken by the merged ranges (ws,
    we) and their (clipped) start and end, in time order; None when nothing is taken. ``g_cols``: the gaps' rank,
    device, start and end."""
    idle = idle_row[gpos]
    d_src: list[np.ndarray] = []
    d_s: list[np.ndarray] = []
    d_e: list[np.ndarray] = []
    # busy slices: clipped to the ranges, a piece per range that overlaps
    bpos = gpos[~idle]
    if len(bpos):
        bs, be = s_start[bpos], s_end[bpos]
        lo = np.searchsorted(we, bs, side="right")
        hi = np.searchsorted(ws, be, side="left")
        n = np.maximum(hi - lo, 0)
        if n.sum():
            rep = np.repeat(np.arange(len(bpos)), n)
            widx = np.repeat(lo, n) + (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n))
            ps, pe = np.maximum(bs[rep], ws[widx]), np.minimum(be[rep], we[widx])
            ok = pe > ps
            d_src.append(bpos[rep][ok]), d_s.append(ps[ok]), d_e.append(pe[ok])
    # idle slices: whole, when the ranges touch their gap
    ipos = gpos[idle]
    if len(ipos):
        g_rank, g_dev, g_start, g_end = g_cols
        on = (g_rank == r) & (g_dev == d)
        gs, ge = g_start[on], g_end[on]
        i = np.searchsorted(we, gs, side="right")
        touched = (i < len(ws)) & (ws[np.minimum(i, len(ws) - 1)] < ge)
        gid = np.searchsorted(gs, s_start[ipos], side="right") - 1
        ipos = ipos[touched[gid]]
        d_src.append(ipos), d_s.append(s_start[ipos]), d_e.append(s_end[ipos])
    if not d_src:
        return None
    cp, cs, ce = np.concatenate(d_src), np.concatenate(d_s), np.concatenate(d_e)
    if len(d_src) > 1:  # this device's rows in time order (slices are disjoint: starts are distinct)
        o = np.argsort(cs, kind="stable")
        cp, cs, ce = cp[o], cs[o], ce[o]
    return cp, cs, ce


def claimed_ns(ledger: "Ledger", buckets: str | Iterable[str], rank: int | None, device: int | None, within: Any) -> dict[tuple[int, int, str], int]:
    """``Ledger.claimed_ns``: the ns of ``claimed`` per (rank, device, bucket), zeros left out, idle ones summed from
    the columns of the gaps the ranges touch (nothing proportional to all slices is read per claim)."""
    want = _wanted(buckets)
    names = sorted(want)
    if within is None:  # whole buckets: the per-device totals are the sums of the slices
        rk, dv, bk, ns = ledger.device_arrays
        m = np.isin(bk, names) & (ns > 0)
        if rank is not None:
            m &= rk == rank
        if device is not None:
            m &= dv == device
        got = sorted(zip(rk[m].tolist(), dv[m].tolist(), bk[m].tolist(), ns[m].tolist()))
        return {(r, d, b): v for r, d, b, v in got}
    lay = ledger._layout
    if lay is None:  # frames not laid out as ``build_ledger`` makes them: sum the frame of slices
        sl = ledger.claimed(want, rank=rank, device=device, within=within)
        ns_ = (sl["end_ns"] - sl["start_ns"]).groupby([sl["rank"], sl["device"], sl["bucket"].astype(str)], sort=True).sum()
        return {(int(r), int(d), str(b)): int(v) for (r, d, b), v in ns_.items() if v}
    w_s, w_e, w_r, w_d = _within_arrays(within)
    out: dict[tuple[int, int, str], int] = {}
    if not len(w_s):
        return out
    idle = [b for b in names if b in IDLE_BUCKETS]
    busy = [b for b in names if b in BUSY_BUCKETS]
    gap_s, gap_e, gap_ns = lay["gap_start"], lay["gap_end"], lay["gap_ns"]
    s_code, s_start, s_end = lay["code"], lay["start"], lay["end"]
    for r, d, s0, s1, g0, g1 in lay["devices"]:
        if (rank is not None and r != rank) or (device is not None and d != device):
            continue
        keep = applies_to(len(w_s), w_r, w_d, r, d)
        if not keep.any():
            continue
        k_s = w_s[keep]
        ws, we = merged(k_s, np.maximum(w_e[keep], k_s + 1))  # a point instance is 1 ns
        got: dict[str, int] = {}
        if idle and g1 > g0:
            touched = g0 + overlapping(gap_s[g0:g1], gap_e[g0:g1], ws, we)
            for b in idle:
                got[b] = int(gap_ns[b][touched].sum())
        if busy:
            codes = s_code[s0:s1]
            for b in busy:
                pos = s0 + np.flatnonzero(codes == _CODE[b])
                got[b] = clipped_ns(s_start[pos], s_end[pos], ws, we)
        for b in names:
            if got.get(b):
                out[(r, d, b)] = got[b]
    return out


def layout(ledger: "Ledger") -> dict[str, Any] | None:
    """``Ledger._layout``: where each (rank, device) sits in the slices and gaps, and their columns as arrays (None
    for frames not laid out as ``build_ledger`` makes them)."""
    if ledger._arrays is not None:  # the arrays the frames were built from
        sl_cols, gp_cols = ledger._arrays["slices"], ledger._arrays["gaps"]
    else:
        sl, gp = ledger.slices, ledger.gaps
        bucket = sl["bucket"]
        if not (isinstance(bucket.dtype, pd.CategoricalDtype) and list(bucket.cat.categories) == list(BUCKETS)):
            return None
        if sl.empty or gp.columns[: 5].tolist() != ["rank", "device", "start_ns", "end_ns", "dur_ns"]:
            return None
        sl_cols = {"rank": sl["rank"].to_numpy(np.int64), "device": sl["device"].to_numpy(np.int64), "start": sl["start_ns"].to_numpy(np.int64),
                   "end": sl["end_ns"].to_numpy(np.int64), "code": bucket.cat.codes.to_numpy()}
        gp_cols = {"rank": gp["rank"].to_numpy(np.int64), "device": gp["device"].to_numpy(np.int64), "start": gp["start_ns"].to_numpy(np.int64),
                   "end": gp["end_ns"].to_numpy(np.int64), "gap_ns": {b: gp[b].to_numpy(np.int64) for b in IDLE_BUCKETS}}
    if not len(sl_cols["start"]):
        return None

    def runs(f: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(rank, device, first row) of each device's run of rows, and the end; None when out of order."""
        r, d, s = f["rank"], f["device"], f["start"]
        if r[0] == r.max() == r.min() and d[0] == d.max() == d.min():  # one device (the usual trace)
            return (r[:1], d[:1], np.array([0, len(r)])) if bool((s[1:] > s[:-1]).all()) else None
        same = (r[1:] == r[:-1]) & (d[1:] == d[:-1])
        ordered = (r[1:] > r[:-1]) | (same & (d[1:] > d[:-1])) | (same & (s[1:] > s[:-1]))
        if not ordered.all():
            return None
        head = np.flatnonzero(np.r_[True, ~same])
        return r[head], d[head], np.r_[head, len(r)]

    s_runs = runs(sl_cols)
    g_runs = runs(gp_cols) if len(gp_cols["start"]) else (EMPTY, EMPTY, np.zeros(1, np.int64))
    if s_runs is None or g_runs is None:
        return None
    g_at = {(int(r), int(d)): (int(a), int(b)) for r, d, a, b in zip(*g_runs[:2], g_runs[2][:-1], g_runs[2][1:])}
    devices = []
    for r, d, a, b in zip(s_runs[0].tolist(), s_runs[1].tolist(), s_runs[2][:-1].tolist(), s_runs[2][1:].tolist()):
        devices.append((r, d, a, b, *g_at.pop((r, d), (0, 0))))
    if g_at:  # gaps of a device without slices: not a ledger's frames
        return None
    return {
        "devices": devices,
        "code": sl_cols["code"],
        "start": sl_cols["start"],
        "end": sl_cols["end"],
        "gap_start": gp_cols["start"],
        "gap_end": gp_cols["end"],
        "gap_ns": gp_cols["gap_ns"],
    }
