"""Host facts the ledger books idle time by: the rows that mean a data wait, and the host calls that block until
the GPU catches up (syncs, blocking copies, copies to pageable memory, GPU-side sync records)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from traceinsight.vocab.masks import kind_mask, name_mask
from traceinsight.vocab.patterns import DATA_WAIT_KINDS, DATA_WAIT_PRIMARY, DATA_WAIT_TFDATA, SYNC_CALL, SYNC_OP, SYNC_RANGE
from traceinsight.derive.steady import host_arrays, may_match

if TYPE_CHECKING:  # pragma: no cover
    from traceinsight.derive.views import Views

_DATA_WAIT_KINDS = DATA_WAIT_KINDS


# --- host facts ------------------------------------------------------------------------------------------
def data_wait_mask(host: pd.DataFrame) -> np.ndarray:
    """Host rows that mean "the loop waits for its next batch".

    tf.data's ``Iterator::`` ranges run on producer threads too, where they overlap useful work; they count only
    on a consumer thread (one that holds a primary wait or the step markers).
    """
    if host.empty:
        return np.zeros(0, dtype=bool)
    names = host["name"]
    if not (may_match(names, DATA_WAIT_PRIMARY, case=True) or may_match(names, DATA_WAIT_TFDATA, case=True)):
        return np.zeros(len(host), dtype=bool)  # no name of a wait among the categories (most ranks)
    primary = name_mask(names, DATA_WAIT_PRIMARY, case=True)
    tfdata = name_mask(names, DATA_WAIT_TFDATA, case=True)
    if primary.any() or tfdata.any():  # rare names first, then their kinds
        kind_ok = kind_mask(host["kind"], _DATA_WAIT_KINDS)
        primary &= kind_ok
        tfdata &= kind_ok & ~primary
    if tfdata.any():
        rank = host["rank"].to_numpy().astype(np.int64)
        tid = host["tid"].to_numpy().astype(np.int64)
        consumer = primary | kind_mask(host["kind"], ("step",))
        keys = set(zip(rank[consumer].tolist(), tid[consumer].tolist()))
        idx = np.flatnonzero(tfdata)
        on_consumer = np.fromiter(((r, t) in keys for r, t in zip(rank[idx].tolist(), tid[idx].tolist())), dtype=bool, count=len(idx))
        primary = primary.copy()
        primary[idx[on_consumer]] = True
    return primary


def _is_positions(index: pd.Index) -> bool:
    """Row labels 0, 1, 2, ...: a label is its row's position."""
    return isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1


def blocking_parts(views: "Views") -> list[tuple[np.ndarray, np.ndarray, np.ndarray, str]]:
    """Host calls that block until the GPU catches up, as (rank, start_ns, end_ns, reason) arrays per reason, the
    empty ones left out: the ledger needs only the ranges, and frames of them cost more than finding them.

    Synchronizing runtime calls and blocking copies/memsets, ops that sync by nature (``aten::item``, ...), and
    async copies into pageable host memory (the driver runs them synchronously). GPU-side sync records stand in
    only on ranks whose host trace shows no blocking call.
    """
    ev = views.events
    ha = host_arrays(views)
    kind = ha["kind"]
    h_rank, h_start, h_dur = ha["rank"], ha["start_ns"], ha["dur_ns"]

    def rows(m: np.ndarray, reason: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
        m = np.flatnonzero(m)  # few rows: positions, then three small gathers instead of three full masks
        s = h_start[m].astype(np.int64, copy=False)
        return h_rank[m].astype(np.int64), s, s + h_dur[m], reason

    names = ha["name"]
    # a pattern no category matches gives no rows (an empty part, dropped below): its masks are not built
    parts = [
        rows(name_mask(names, pattern) & kind_mask(kind, kinds), reason)
        for pattern, kinds, reason in ((SYNC_CALL, ("runtime",), "synchronizing call"), (SYNC_OP, ("cpu_op",), "synchronizing op"),
                                       (SYNC_RANGE, ("annotation",), "synchronizing op"))
        if may_match(names, pattern)
    ]
    ln = views.launches
    pageable = ev["pageable"] if "pageable" in ev else None
    if pageable is not None and pageable.dtype == bool and not pageable.to_numpy().any():
        pageable = None  # no row is pageable: no launch copies to pageable memory
    if not ln.empty and pageable is not None:
        idx = ln["gpu_idx"].to_numpy()
        ck_col = ev["copy_kind"]
        if _is_positions(ev.index) and isinstance(ck_col.dtype, pd.CategoricalDtype) and len(idx) and idx.min() >= 0 and idx.max() < len(ev):
            # row labels are positions: the pageable flag first (rarely set), then the copy kind of those rows on
            # its category codes, no 10^5 boxed strings
            m = pageable.to_numpy(dtype=bool)[idx]
            if m.any():
                at = np.flatnonzero(m)
                m[at] = kind_mask(ck_col.take(idx[at]), ("DtoH",))
        else:
            ck = ck_col.reindex(idx).astype(object).to_numpy()
            pg = pageable.reindex(idx).to_numpy(dtype=bool)
            m = (ck == "DtoH") & pg
        if m.any():  # (none: an empty part, dropped below)
            s = ln["launch_start_ns"].to_numpy()[m].astype(np.int64, copy=False)
            parts.append((ln["rank"].to_numpy()[m].astype(np.int64), s, s + ln["launch_dur_ns"].to_numpy()[m], "copy to pageable host memory"))
    parts = [p for p in parts if len(p[0])]
    gs_mask = kind_mask(ev["kind"], ("gpu_sync",))
    if gs_mask.any():
        if parts:
            gs_mask &= ~np.isin(ev["rank"].to_numpy(), np.unique(np.concatenate([p[0] for p in parts])))
        if gs_mask.any():
            s = ev["start_ns"].to_numpy()[gs_mask].astype(np.int64, copy=False)
            parts.append((ev["rank"].to_numpy()[gs_mask].astype(np.int64), s, s + ev["dur_ns"].to_numpy()[gs_mask], "GPU-side sync record"))
    return parts
