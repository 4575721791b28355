"""Helpers shared by the built-in rules: name patterns and interval queries that several rules ask the same way.

Kept out of ``views`` because they are heuristics (which names mean "data loading", "a sync"), not facts about
the trace; every helper is vectorized so rules stay linear in the number of events.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

# --- name patterns ---------------------------------------------------------------------------------------
#: Host ranges that mean "waiting for input": PyTorch DataLoader iteration, tf.data / TF iterator ops.
DATA_LOADING = re.compile(r"enumerate\(DataLoader\)|DataLoader|IteratorGetNext|Iterator::|MultiDeviceIteratorGetNextFromShard|_next_data|dataloader\.py", re.I)
#: Optimizer updates (PyTorch ``Optimizer.step#SGD.step``, fused/foreach kernels' host ops, Keras apply_gradients).
OPTIMIZER = re.compile(r"Optimizer\.step|optimizer|zero_grad|ResourceApply|apply_gradients|_foreach_", re.I)
#: Runtime/driver calls that block the calling host thread until GPU work finishes.
SYNC_CALL = re.compile(
    r"^(cuda|hip)(DeviceSynchronize|StreamSynchronize|EventSynchronize|ThreadSynchronize|CtxSynchronize)"
    r"|^cu(Ctx|Stream|Event)Synchronize"
    r"|^(cuda|hip)Memcpy(?!.*Async)(2D|3D|ToSymbol|FromSymbol|Peer|DtoH|HtoD|DtoD|WithStream)?(_v\d+|_ptds)?$"
    r"|^cuMemcpy(DtoH|HtoD|DtoD|AtoH|HtoA)?(_v\d+)?$"
    r"|^(cuda|hip)Memset(?!.*Async)(2D|3D|D8|D16|D32)?(_v\d+|_ptds)?$"
)
#: Framework ops that force a device-to-host synchronization by their nature.
SYNC_OP = re.compile(r"^aten::(item|_local_scalar_dense|nonzero|is_nonzero|tolist|equal|masked_select|unique|_unique2)$|\.tolist|\.item\(|\.cpu\(")


def name_mask(names: pd.Series, pattern: re.Pattern[str]) -> np.ndarray:
    """Boolean mask of rows whose name matches; matched once per distinct name (names are categorical)."""
    if len(names) == 0:
        return np.zeros(0, dtype=bool)
    if isinstance(names.dtype, pd.CategoricalDtype):
        cats = names.cat.categories
        hit = np.fromiter((bool(pattern.search(str(c))) for c in cats), dtype=bool, count=len(cats))
        codes = names.cat.codes.to_numpy()
        return np.where(codes >= 0, hit[np.clip(codes, 0, None)] if len(cats) else False, False)
    return names.astype(str).str.contains(pattern, regex=True).to_numpy()


def short_name(name: str, width: int = 80) -> str:
    """Kernel names can be kilobytes of templates; evidence tables need the head of them."""
    name = str(name)
    return name if len(name) <= width else name[: width - 1] + "…"


# --- interval queries ---------------------------------------------------------------------------------------
class Coverage:
    """The union of some intervals, answering "how much of [a, b) is covered" for many windows at once."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray) -> None:
        from traceinsight.views import merge_intervals

        self.s, self.e = merge_intervals(np.asarray(starts, np.int64), np.asarray(ends, np.int64))
        self.cum = np.cumsum(self.e - self.s)

    def before(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, np.int64)
        if len(self.s) == 0:
            return np.zeros(len(t), np.int64)
        i = np.searchsorted(self.s, t, side="right")
        prev = np.clip(i - 1, 0, None)
        full = np.where(i > 0, self.cum[prev], 0)
        over = np.where(i > 0, np.maximum(self.e[prev] - t, 0), 0)
        return full - over

    def overlap(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.before(b) - self.before(a)


def overlap_by_rank(rows: pd.DataFrame, windows: pd.DataFrame) -> np.ndarray:
    """For each window (rank, start_ns, end_ns): the time covered by ``rows`` of the same rank."""
    out = np.zeros(len(windows), np.int64)
    if rows.empty or windows.empty:
        return out
    w_rank = windows["rank"].to_numpy()
    for rank, g in rows.groupby("rank", observed=True, sort=False):
        m = w_rank == rank
        if not m.any():
            continue
        s = g["start_ns"].to_numpy()
        cov = Coverage(s, s + g["dur_ns"].to_numpy())
        out[m] = cov.overlap(windows["start_ns"].to_numpy()[m], windows["end_ns"].to_numpy()[m])
    return out


def _rightmost_at_least(values: np.ndarray, hi: np.ndarray, q: np.ndarray) -> np.ndarray:
    """For each query: the largest i < hi with values[i] >= q, or -1 (binary lifting over a sparse max table)."""
    n = len(values)
    if n == 0:
        return np.full(len(q), -1)
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


def innermost_enclosing(queries: pd.DataFrame, candidates: pd.DataFrame) -> np.ndarray:
    """Row label in ``candidates`` of the innermost range on the same (rank, pid, tid) containing each query row.

    "Innermost" = the latest-starting candidate with start <= query start and end >= query end; properly nested
    ranges make that the deepest one. Returns an object array of labels (None where nothing encloses).
    """
    out = np.full(len(queries), None, dtype=object)
    if queries.empty or candidates.empty:
        return out
    keys = ["rank", "pid", "tid"]
    q_pos = np.arange(len(queries))
    qk = queries[keys].assign(_pos=q_pos, _s=queries["start_ns"].to_numpy(), _e=(queries["start_ns"] + queries["dur_ns"]).to_numpy())
    cgroups = {k: g for k, g in candidates.groupby(keys, observed=True, sort=False)}
    for k, qg in qk.groupby(keys, observed=True, sort=False):
        cg = cgroups.get(k)
        if cg is None:
            continue
        cs = cg["start_ns"].to_numpy()
        ce = cs + cg["dur_ns"].to_numpy()
        order = np.lexsort((-ce, cs))  # outer before inner at equal starts
        cs, ce, labels = cs[order], ce[order], cg.index.to_numpy()[order]
        qs = qg["_s"].to_numpy()
        qe = qg["_e"].to_numpy()
        hi = np.searchsorted(cs, qs, side="right")
        idx = _rightmost_at_least(ce, hi, qe)
        got = idx >= 0
        res = np.full(len(qg), None, dtype=object)
        res[got] = labels[idx[got]]
        out[qg["_pos"].to_numpy()] = res
    return out


def innermost_frame(stack: object) -> str | None:
    """The innermost frame of a ``stack`` cell (" <- " separated, innermost last)."""
    if stack is None or (isinstance(stack, float) and stack != stack):
        return None
    parts = [p.strip() for p in str(stack).split(" <- ") if p.strip()]
    return parts[-1] if parts else None


def lookup(series: pd.Series, labels: np.ndarray) -> np.ndarray:
    """``series[label]`` for each label (None -> None), in one reindex."""
    labels = np.asarray(labels, dtype=object)
    valid = ~pd.isna(labels)
    out = np.full(len(labels), None, dtype=object)
    if valid.any():
        out[valid] = series.reindex(labels[valid].astype(np.int64)).astype(object).to_numpy()
    return out
