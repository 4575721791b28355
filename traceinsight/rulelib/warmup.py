"""Warm-up as the rules read it: the time ledger is its one home (its warm-up bucket, the steady-state model of
``traceinsight.derive.steady``); these helpers give the ledger's warm-up ns per gap, the start-up calls at the head of a
device's window, the leading warm-up steps (``warmup_steps``) and compiles in the steady state (``steady_recompiles``).

Part of ``traceinsight.rulelib``, the public helper library of the rules (built-in and third-party).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.vocab.buckets import WARMUP_BUCKET
from traceinsight.vocab.intervals import merge_intervals
from traceinsight.vocab.masks import name_mask
from traceinsight.vocab.patterns import INIT_CALL
from traceinsight.derive.steady import may_match, steady_recompiles, warmup_steps  # noqa: F401  (the steady-state model, as the rules read it)
from traceinsight.rulelib.enclosing import ThreadCodes
from traceinsight.rulelib.gaps import ledger_gap_columns
from traceinsight.rulelib.names import kind_mask, short_name
from traceinsight.rulelib.cache import memo


def gap_warmup_ns(views) -> np.ndarray:
    """Per row of ``views.gaps``: the ns the ledger books as warm-up (``WARMUP_BUCKET``) inside the gap. The ledger is
    warm-up's one home: TI001 leaves these ns out of its idle, TI013 reports them, the verdict sets them aside."""
    lg = ledger_gap_columns(views)
    if WARMUP_BUCKET not in lg:
        return np.zeros(len(lg["cause"]), np.int64)
    return lg[WARMUP_BUCKET]


def inside_warmup(views, rank: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
    """Per interval: whether a warm-up region of its rank (the ledger's ``warmup``: one-time work, a call that waits
    on work queued before the window) covers it whole. A rule that quotes a span of time says which of it is set
    aside, so no figure on the page is the warm-up's time presented as a cost."""
    rank, s, e = np.asarray(rank, np.int64), np.asarray(start_ns, np.int64), np.asarray(end_ns, np.int64)
    out = np.zeros(len(s), dtype=bool)
    regions = views.ledger.warmup
    if not len(regions) or not len(s):
        return out
    r_rank = regions["rank"].to_numpy(np.int64)
    for r in np.unique(rank):
        on = r_rank == r
        if not on.any():
            continue
        ms, me = merge_intervals(regions["start_ns"].to_numpy(np.int64)[on], regions["end_ns"].to_numpy(np.int64)[on])
        mine = np.flatnonzero(rank == r)
        i = np.searchsorted(ms, s[mine], side="right") - 1
        ok = i >= 0
        out[mine[ok]] = me[i[ok]] >= e[mine[ok]]
    return out


def warmup_by_gap(views) -> pd.DataFrame:
    """The gaps (rows of ``views.gaps``) in which the ledger booked warm-up: rank, device, start_ns, end_ns, dur_ns,
    warmup_ns, window_ns, and ``why``: the ledger's warm-up regions of the rank that cover the gap most (innermost
    first among equals), up to three. Cached: TI013 reads it, TI001 leaves the same ns out."""

    def build():
        gaps = views.gaps
        warm = gap_warmup_ns(views)
        m = warm > 0
        g = gaps.loc[m, ["rank", "device", "start_ns", "end_ns", "dur_ns"]].assign(warmup_ns=warm[m])
        win = _device_windows(views, g["rank"].to_numpy(), g["device"].to_numpy())
        if win is not None:
            g = g.assign(window_ns=win)
        else:
            g = g.merge(views.utilization[["rank", "device", "window_ns"]], on=["rank", "device"], how="left")
        regions = views.ledger.warmup
        why = []
        for row in g.itertuples(index=False) if len(g) else ():  # no gap with warm-up: no row class to make
            r = regions[regions["rank"].to_numpy() == row.rank] if len(regions) else regions
            if not len(r):
                why.append("")
                continue
            s, e = r["start_ns"].to_numpy(), r["end_ns"].to_numpy()
            ov = np.minimum(e, row.end_ns) - np.maximum(s, row.start_ns)
            k = np.flatnonzero(ov > 0)
            k = k[np.lexsort(((e - s)[k], -ov[k]))][:3]
            why.append("; ".join(short_name(str(x), 60) for x in r["reason"].to_numpy()[k]))
        out = g.assign(why=why).reset_index(drop=True)
        return out

    return memo(views, "rulelib.gap_warmup_ns", build)


def _device_windows(views, rank: np.ndarray, device: np.ndarray) -> np.ndarray | None:
    """The active window (``views.utilization``'s window_ns) of each row's (rank, device), or None when a row's
    device has none (the caller then merges, to keep what a merge does with such rows)."""
    util = views.utilization
    if not len(rank):
        return np.zeros(0, np.int64) if len(util) else None
    u_rank, u_dev, u_win = util["rank"].to_numpy(), util["device"].to_numpy(), util["window_ns"].to_numpy()
    if len(util) == 1:
        one = (rank == u_rank[0]) & (device == u_dev[0])
        return np.full(len(rank), u_win[0]) if one.all() else None
    codes = ThreadCodes([u_rank, u_dev])
    order = np.argsort(codes.codes, kind="stable")
    keys = codes.codes[order]
    q = codes.of([rank, device])
    pos = np.minimum(np.searchsorted(keys, q), len(keys) - 1)
    if not bool(((q >= 0) & (keys[pos] == q)).all()):
        return None
    return u_win[order][pos]


def has_startup_calls(views) -> bool:
    """Could the host hold a named start-up call (``INIT_CALL``)? False when no host name can be one: then
    ``startup_call_gaps`` is empty whatever its threshold, and a rule asks no further (its frames are not built)."""
    host = views.host_events
    return not host.empty and may_match(host["name"], INIT_CALL)


def startup_call_gaps(views, *, min_share_pct: float = 5.0) -> pd.DataFrame:
    """Idle gaps at the head of each device's window that hold named one-off start-up calls (``INIT_CALL``) and
    are at least ``min_share_pct`` of the window, with the ledger's warm-up ns inside each.

    This is evidence about the recording, not a second account of time: the ledger books a span as warm-up only
    when it can measure it against a later repetition (a first call or step far slower than the ones after it),
    and a start-up call that happens once (a JIT compile, a module load) has nothing to compare with. TI013 names
    such gaps so the reader knows the window starts with start-up, and says their time stays in the idle figures.
    The head of a device's run ends at the rank's second step, or without steps at a tenth of its GPU operations.
    Columns: rank, device, start_ns, end_ns, dur_ns, window_ns, warmup_ns, init_calls.
    """
    def build() -> pd.DataFrame:
        cols = ["rank", "device", "start_ns", "end_ns", "dur_ns", "window_ns", "warmup_ns", "init_calls"]
        empty = pd.DataFrame({c: [] for c in cols})
        gaps = views.gaps
        util = views.utilization
        if gaps.empty or util.empty:
            return empty
        host = views.host_events
        if not has_startup_calls(views):  # no name can be a start-up call: no gap holds one
            return empty
        m = kind_mask(host, ("runtime", "cpu_op", "annotation", "python", "other")) & name_mask(host["name"], INIT_CALL)
        init = np.flatnonzero(m)  # only the start-up calls' rows
        if not len(init):  # no start-up call anywhere: no gap holds one (the answer below, without its frames)
            return empty
        win = _device_windows(views, gaps["rank"].to_numpy(), gaps["device"].to_numpy())
        if win is not None:  # the few gaps long enough are chosen on arrays; only they become rows
            pick = np.flatnonzero(gaps["dur_ns"].to_numpy() >= min_share_pct / 100.0 * win)
            g = gaps.iloc[pick].assign(warmup_ns=gap_warmup_ns(views)[pick], window_ns=win[pick])
        else:
            g = gaps.assign(warmup_ns=gap_warmup_ns(views)).merge(util[["rank", "device", "window_ns"]], on=["rank", "device"])
            g = g[g["dur_ns"].to_numpy() >= min_share_pct / 100.0 * g["window_ns"].to_numpy()]
        if g.empty:
            return empty
        # where each gap's device run ends its head, for the few (rank, device) pairs the gaps name, on arrays
        act = views.gpu_activity
        a_rank, a_dev, a_start = act["rank"].to_numpy(), act["device"].to_numpy(), act["start_ns"].to_numpy()
        steps = views.steps
        s_rank, s_start = steps["rank"].to_numpy(), steps["start_ns"].to_numpy()
        head_end: dict[tuple[int, int], int] = {}
        for rank, device in zip(g["rank"].to_numpy(), g["device"].to_numpy()):
            key = (int(rank), int(device))
            if key in head_end:
                continue
            sel = (a_rank == rank) & (a_dev == device)
            if not sel.any():
                head_end[key] = -1
                continue
            st = np.sort(s_start[s_rank == rank]) if not steps.empty else np.zeros(0)
            starts = np.sort(a_start[sel])
            if len(st) >= 2:
                head_end[key] = int(st[1])
            else:
                head_end[key] = int(starts[min(len(starts) - 1, max(len(starts) // 10, 1))])
        he = np.array([head_end[(int(r), int(d))] for r, d in zip(g["rank"], g["device"])], dtype=np.int64)
        g = g[g["end_ns"].to_numpy() <= he]
        if g.empty:
            return empty
        calls = [""] * len(g)
        if len(init):
            i_rank = host["rank"].to_numpy()[init]
            i_start = host["start_ns"].to_numpy()[init]
            i_end = i_start + host["dur_ns"].to_numpy()[init]
            i_name = host["name"].take(init)
            for i, (rank, start, end) in enumerate(zip(g["rank"].to_numpy(), g["start_ns"].to_numpy(), g["end_ns"].to_numpy())):
                names = i_name[(i_rank == rank) & (i_start < end) & (i_end > start)].astype(str).value_counts()
                calls[i] = ", ".join(f"{short_name(n, 40)} ×{c}" for n, c in names.head(3).items())
        g = g.assign(init_calls=calls)
        out = g[(g["init_calls"] != "").to_numpy()][cols].reset_index(drop=True)
        return out

    return memo(views, f"rulelib.startup_call_gaps:{float(min_share_pct)}", build)
