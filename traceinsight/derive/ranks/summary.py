"""The compact summary of one rank: what travels from a worker to the coordinator instead of the rank's events.

Its size grows with steps and collective calls, never with kernels or host ops: a 54 MB rank trace with 2,000
NCCL kernels becomes a few hundred kB. Everything cross-rank rules need is here; everything else stays on the
worker. Times are ns on the rank's own clock, relative to ``origin_ns`` (the wall-clock time of the rank's 0 when
the trace records it): the coordinator puts ranks on one clock (``align``), not the worker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from traceinsight.model.timeline import Timeline
from traceinsight.vocab.intervals import Coverage
from traceinsight.derive.ledger import build_ledger
from traceinsight.vocab.masks import kind_mask, name_mask
from traceinsight.vocab.patterns import COLLECTIVE, DATA_WAIT_KINDS, DATA_WAIT_PRIMARY, SYNC_CALL, SYNC_OP
from traceinsight.derive.views import Views

#: The collective's kind, from a kernel name such as ``ncclKernel_AllReduce_RING_LL_Sum_float``.
_KIND = re.compile(r"(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast|sendrecv|send|recv|reduce)", re.I)

#: Columns of ``RankSummary.steps`` and ``RankSummary.collectives``.
STEP_COLUMNS = ("step", "start_ns", "end_ns", "busy_ns", "compute_ns", "comm_ns", "exposed_ns", "data_ns", "sync_ns")
COLL_COLUMNS = ("group", "seq", "kind", "start_ns", "end_ns", "bytes", "gpu_before_ns", "data_before_ns", "sync_before_ns", "idle_before_ns")


@dataclass
class RankSummary:
    """One rank, reduced to what a job-level diagnosis needs (see the module docstring)."""

    rank: int
    device: int  # the rank's (first) GPU index
    source: str
    world_size: int | None
    origin_ns: int  # wall-clock ns of this rank's time 0 (0 when unknown)
    device_names: list[str]
    event_count: int
    window_start_ns: int
    window_end_ns: int
    busy_ns: int  # union of GPU activity in the window
    compute_ns: int  # union of non-collective GPU activity
    comm_ns: int  # union of collective kernels
    exposed_ns: int  # collective time with no compute beside it
    steps: pd.DataFrame  # STEP_COLUMNS; one row per step (step -1: the whole window when the trace has no steps)
    collectives: pd.DataFrame  # COLL_COLUMNS; one row per collective kernel, in start order
    ledger: pd.DataFrame = field(default_factory=pd.DataFrame)  # step, bucket, ns: the rank's time ledger per step
    findings: list[dict[str, Any]] = field(default_factory=list)  # per-rank rules' findings (to_dict form)
    rules_run: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    rule_failures: list[str] = field(default_factory=list)  # rule_guard.RuleFailure lines of this rank's run

    @property
    def window_ns(self) -> int:
        return max(self.window_end_ns - self.window_start_ns, 0)


def collective_kind(names: pd.Series) -> np.ndarray:
    """``allreduce``, ``allgather``, ... per kernel name, evaluated once per distinct name."""
    kind = _collective_kind_of
    if isinstance(names.dtype, pd.CategoricalDtype):  # one test per category; a missing name reads "nan"
        return _kinds_of_codes(names.array.codes, names.array.categories)
    uniq = pd.unique(names.astype(str))
    kinds = {n: kind(n) for n in uniq}
    return names.astype(str).map(kinds).to_numpy(dtype=object)


def _collective_kind_of(name: str) -> str:
    m = _KIND.search(name)
    return m.group(1).lower().replace("_", "") if m else "collective"


def _kinds_of_codes(codes: np.ndarray, categories: pd.Index) -> np.ndarray:
    """``collective_kind`` of the categorical names with these codes: one test per category that occurs (a missing
    name, code -1, reads "nan"), not per category of the whole column (a trace names thousands of kernels)."""
    out = np.empty(len(codes), dtype=object)
    for c in np.unique(codes).tolist():
        out[codes == c] = _collective_kind_of("nan" if c < 0 else str(categories[c]))
    return out


def _one_value(a: np.ndarray, value: int) -> bool:
    """Every element of ``a`` equals ``value`` (the usual one-rank trace: no row selection needed)."""
    return len(a) > 0 and int(a.min()) == value and int(a.max()) == value


def summarize_ranks(timeline: Timeline, views: Views | None = None, *, source: str = "",
                    by_step: "Callable[[], pd.DataFrame] | None" = None) -> list[RankSummary]:
    """One summary per rank present in ``timeline`` (a rank file holds one; a folder loaded at once, several).
    ``by_step``: the time ledger's per-step frame, asked when first needed (an analysis' own ledger); without it
    the ledger is built from ``views``, once."""
    views = views or Views(timeline)
    if by_step is None:
        by_step = lambda: views.memo("ranks.ledger_by_step", lambda: build_ledger(views).by_step)  # noqa: E731
    ev_rank = timeline.events["rank"].to_numpy()
    if not len(ev_rank):
        ranks = [0]
    elif ev_rank.min() == ev_rank.max():
        ranks = [int(ev_rank[0])]
    else:
        ranks = sorted(int(r) for r in pd.unique(ev_rank))
    return [_summarize_rank(timeline, views, r, source or str(timeline.meta.path or ""), by_step) for r in ranks]


def _rows_of(frame: pd.DataFrame, rank: int) -> np.ndarray | None:
    """Positions of ``rank``'s rows in ``frame``; None when every row is its (nothing to select)."""
    r = frame["rank"].to_numpy()
    return None if _one_value(r, rank) else np.flatnonzero(r == rank)


def _column(frame: pd.DataFrame, name: str, rows: np.ndarray | None) -> np.ndarray:
    a = frame[name].to_numpy()
    return a if rows is None else a[rows]


def _cov_of(start: np.ndarray, dur: np.ndarray, mask: np.ndarray) -> Coverage:
    """Coverage of the masked rows (only their arrays are taken: no frame rows, no full-length end column)."""
    i = np.flatnonzero(mask)
    s = start[i].astype(np.int64, copy=False)
    return Coverage(s, s + np.maximum(dur[i].astype(np.int64, copy=False), 0))


#: GPU rows up to which a rank's busy union is merged from its own rows rather than read from ``views.busy``: the
#: same intervals, without the per-device row lookup, which costs more than merging a few hundred rows.
SMALL_BUSY = 512


def _busy_of(views: Views, rank: int, devices: np.ndarray) -> Coverage | None:
    """The union of the rank's GPU activity from ``views.busy`` (merged already, per device) when the rank drives
    one device and has more than ``SMALL_BUSY`` rows; None otherwise (the union is merged here)."""
    if len(devices) <= SMALL_BUSY or devices.min() != devices.max():
        return None
    rows = views.device_rows("busy", rank, int(devices[0]))  # a slice: only the two columns are taken
    b = views.busy
    return Coverage(b["start_ns"].to_numpy()[rows], b["end_ns"].to_numpy()[rows])


def _gpu_unions(views: Views, rank: int, act: pd.DataFrame, a_rows: np.ndarray | None, a_s: np.ndarray, a_e: np.ndarray,
                a_dev: np.ndarray) -> tuple[np.ndarray, Coverage, Coverage, Coverage]:
    """The rank's collective kernels (positions among its rows) and the unions of its GPU activity: busy, compute
    (all but collectives) and communication."""
    # a collective kernel: ``views.is_collective``'s test, on the rank's rows without its aligned Series
    names, kinds = act["name"], act["kind"]
    if a_rows is not None:
        names, kinds = names.take(a_rows), kinds.take(a_rows)
    is_coll = name_mask(names, COLLECTIVE) & kind_mask(kinds, ("kernel",))
    ci = np.flatnonzero(is_coll)
    busy = _busy_of(views, rank, a_dev)
    if not len(ci):  # no collective: compute is all of the activity, and its union the busy one
        busy = busy if busy is not None else Coverage(a_s, a_e)
        return ci, busy, busy, Coverage(a_s[:0], a_e[:0])
    # the unions from one sort: each is merged from its rows in start order (a union is the same whatever
    # the order of equal starts), so only the first needs sorting
    if len(a_s) > 1 and not bool((a_s[1:] >= a_s[:-1]).all()):
        by_start = np.argsort(a_s, kind="stable")
        s_sorted, e_sorted, coll_sorted = a_s[by_start], a_e[by_start], is_coll[by_start]
    else:
        s_sorted, e_sorted, coll_sorted = a_s, a_e, is_coll
    busy = busy if busy is not None else Coverage(s_sorted, e_sorted)
    compute = Coverage(s_sorted[~coll_sorted], e_sorted[~coll_sorted])
    comm = Coverage(s_sorted[coll_sorted], e_sorted[coll_sorted])
    return ci, busy, compute, comm


def _host_coverages(views: Views, rank: int) -> tuple[Coverage, Coverage]:
    """The rank's data-wait and synchronizing host rows as coverages: the ledger's own tests
    (traceinsight.vocab.patterns), so a job's data-wait and sync figures measure its buckets' rows."""
    host = views.host_events
    h_rows = _rows_of(host, rank)
    h_names = host["name"] if h_rows is None else host["name"].take(h_rows)
    h_s, h_d = _column(host, "start_ns", h_rows), _column(host, "dur_ns", h_rows)
    h_kinds = host["kind"] if h_rows is None else host["kind"].take(h_rows)
    data = _cov_of(h_s, h_d, name_mask(h_names, DATA_WAIT_PRIMARY, case=True) & kind_mask(h_kinds, DATA_WAIT_KINDS))
    sync = _cov_of(h_s, h_d, (name_mask(h_names, SYNC_CALL) & kind_mask(h_kinds, ("runtime",))) | (name_mask(h_names, SYNC_OP) & kind_mask(h_kinds, ("cpu_op",))))
    return data, sync


def _summarize_rank(tl: Timeline, views: Views, rank: int, source: str, by_step: "Callable[[], pd.DataFrame]") -> RankSummary:
    # The rank's GPU activity and host rows as a few arrays: on a one-rank trace the views' own columns, never a
    # take of every column of 10^5-10^6 rows.
    act = views.gpu_activity
    a_rows = _rows_of(act, rank)
    a_s = _column(act, "start_ns", a_rows).astype(np.int64, copy=False)
    a_e = a_s + np.maximum(_column(act, "dur_ns", a_rows).astype(np.int64, copy=False), 0)
    a_dev = _column(act, "device", a_rows)
    ci, busy, compute, comm = _gpu_unions(views, rank, act, a_rows, a_s, a_e, a_dev)
    data, sync = _host_coverages(views, rank)

    if len(a_s):
        w0 = int(a_s.min())
        w1 = int(a_e.max())
    else:
        w0 = w1 = 0
    st = views.steps
    st_step = st["step"].to_numpy()
    own = (st["rank"].to_numpy() == rank) & (st_step >= 0)
    if not own.any():
        s_num, s0, s1 = np.array([-1]), np.array([w0], np.int64), np.array([w1], np.int64)
    else:
        s_num, s0, s1 = (a.astype(np.int64, copy=False)[own] for a in (st_step, st["start_ns"].to_numpy(), st["end_ns"].to_numpy()))
    # the collective kernels in start order (stable: equal starts keep row order)
    co = ci[np.argsort(a_s[ci], kind="stable")]
    pos = co if a_rows is None else a_rows[co]  # positions in ``act``
    cs = a_s[co]
    ce = a_e[co]
    stream = act["stream"].to_numpy()[pos].astype(np.int64, copy=False)
    prev_end = np.empty(len(cs), np.int64)
    if len(cs):
        prev_end[0] = min(w0, int(s0.min()))
        prev_end[1:] = np.maximum.accumulate(ce)[:-1]
    prev_end = np.minimum(prev_end, cs)

    # each coverage answers the steps' windows and the gaps before the collectives in one query
    k = len(s0)
    qa, qb = np.concatenate([s0, prev_end]), np.concatenate([s1, cs])
    b_all, c_all, d_all, y_all = (cov.overlap(qa, qb) for cov in (busy, compute, data, sync))
    b, c = b_all[:k], c_all[:k]
    steps = _int_frame(
        {
            "step": s_num.astype(np.int64),
            "start_ns": s0,
            "end_ns": s1,
            "busy_ns": b,
            "compute_ns": c,
            "comm_ns": comm.overlap(s0, s1),
            "exposed_ns": b - c,  # busy = compute U comm, so busy - compute is comm with no compute beside it
            "data_ns": d_all[:k],
            "sync_ns": y_all[:k],
        }
    )

    u_stream, inv = np.unique(stream, return_inverse=True)
    # Calls of one process group run in order on one NCCL stream, the same order on every rank, so the stream and
    # the call's index on it identify the instance across ranks.
    group = np.array([f"stream {s}" for s in u_stream.tolist()] + [""], dtype=object)[inv.reshape(-1)] if len(cs) else []
    seq = _cumcount(stream)
    kind = _kinds_of(act["name"], pos)
    nbytes = act["bytes"].to_numpy()[pos].astype(np.int64) if "bytes" in act else np.zeros(len(cs), np.int64)
    collectives = pd.DataFrame(
        {
            "group": group,
            "seq": seq,
            "kind": kind,
            "start_ns": cs,
            "end_ns": ce,
            "bytes": nbytes,
            "gpu_before_ns": c_all[k:],
            "data_before_ns": d_all[k:],
            "sync_before_ns": y_all[k:],
            "idle_before_ns": (cs - prev_end) - b_all[k:],
        }
    )
    busy_total = int(busy.cum[-1]) if len(busy.cum) else 0  # the union of all activity, as ``busy`` holds it
    comp_total = int(compute.cum[-1]) if len(compute.cum) else 0
    meta = tl.meta
    ev_rank = tl.events["rank"].to_numpy()
    return RankSummary(
        rank=rank,
        device=int(a_dev.min()) if len(a_s) else 0,
        source=source,
        world_size=meta.world_size,
        origin_ns=int(meta.start_unix_ns or 0),
        device_names=sorted({d.name for d in meta.devices if d.rank in (rank, None) and d.name}),
        event_count=len(ev_rank) if _one_value(ev_rank, rank) else int((ev_rank == rank).sum()),
        window_start_ns=w0,
        window_end_ns=w1,
        busy_ns=busy_total,
        compute_ns=comp_total,
        comm_ns=int(comm.cum[-1]) if len(comm.cum) else 0,
        exposed_ns=busy_total - comp_total,
        steps=steps,
        collectives=collectives,
        ledger=_ledger(by_step, rank),
        warnings=list(meta.warnings),
    )


def _kinds_of(names: pd.Series, pos: np.ndarray) -> np.ndarray:
    """``collective_kind(names.take(pos))`` without the taken Series: on the codes when the names are categorical."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        cat = names.array
        return _kinds_of_codes(cat.codes[pos], cat.categories)
    return collective_kind(names.take(pos))


def _int_frame(columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """``pd.DataFrame(columns)`` for equal-length int64 arrays, built as one 2-D block (half the cost of a
    frame of separate columns: a rank's step table is built once per rank, on tiny ranks too); other columns
    take the dict constructor."""
    arrays = list(columns.values())
    if arrays and all(isinstance(a, np.ndarray) and a.dtype == np.int64 and a.ndim == 1 and len(a) == len(arrays[0]) for a in arrays):
        return pd.DataFrame(np.stack(arrays, axis=1), columns=list(columns))
    return pd.DataFrame(columns)


def _cumcount(keys: np.ndarray) -> np.ndarray:
    """Per element, how many earlier elements have the same key (``groupby(keys).cumcount()``, on arrays)."""
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    idx = np.arange(len(sk), dtype=np.int64)
    first = np.maximum.accumulate(np.where(np.r_[True, sk[1:] != sk[:-1]], idx, 0)) if len(sk) else idx
    out = np.empty(len(sk), np.int64)
    out[order] = idx - first
    return out


def _ledger(ledger_by_step: "Callable[[], pd.DataFrame]", rank: int) -> pd.DataFrame:
    """The rank's time ledger per step (``traceinsight.derive.ledger``: every ns of its GPU window in one bucket)."""
    try:
        by_step = ledger_by_step()
    except Exception:  # noqa: BLE001 - a ledger failure must not lose the rank; the summary simply has none
        return pd.DataFrame({"step": pd.Series(dtype="int64"), "bucket": pd.Series(dtype=object), "ns": pd.Series(dtype="int64")})
    return _sum_by(by_step, by_step["rank"].to_numpy() == rank, ["step", "bucket"])


def _sum_by(frame: pd.DataFrame, rows: np.ndarray, keys: list[str]) -> pd.DataFrame:
    """``frame[rows].groupby(keys, as_index=False, sort=True)["ns"].sum()`` with int64 keys and sums, on arrays:
    the ledger's frames hold tens of rows, where a groupby's fixed cost is most of the time. Each key's codes
    follow its sorted distinct values, so the rows come out in the groupby's order; key columns keep their dtype
    (their values are taken from a row of each group)."""
    pos = np.flatnonzero(rows)
    if len(pos) <= SMALL_GROUPS:
        small = _sum_small(frame, pos, keys)
        if small is not None:
            return small
    combined = np.zeros(len(pos), np.int64)
    missing = np.zeros(len(pos), dtype=bool)
    for k in keys:
        codes, uniq = pd.factorize(frame[k].to_numpy()[pos], sort=True)
        combined = combined * max(len(uniq), 1) + codes
        missing |= codes < 0
    if missing.any():  # a missing key is no group (as a groupby drops it)
        pos, combined = pos[~missing], combined[~missing]
    groups, first, inv = np.unique(combined, return_index=True, return_inverse=True)
    sums = np.zeros(len(groups), np.int64)
    np.add.at(sums, inv.reshape(-1), frame["ns"].to_numpy(np.int64)[pos])
    rows = pos[first]
    # the step key as int64 (a frame astype costs a millisecond); other keys keep their column's dtype
    out = {k: frame[k].to_numpy().take(rows).astype(np.int64) if k == "step" else frame[k].iloc[rows].reset_index(drop=True) for k in keys}
    return pd.DataFrame({**out, "ns": sums})


#: Rows up to which ``_sum_by`` groups in a dict: a rank's ledger holds a dozen rows per step and device, where
#: pandas' factorize, unique and take cost more than the rows themselves.
SMALL_GROUPS = 256


def _sum_small(frame: pd.DataFrame, pos: np.ndarray, keys: list[str]) -> pd.DataFrame | None:
    """``_sum_by`` of the rows at ``pos`` grouped in a dict (the same rows, order, sums and dtypes); None when a key
    is missing in some row (NaN, None: the general path drops those rows) or a sum leaves int64."""
    cols = [frame[k] for k in keys]
    values = [c.to_numpy()[pos].tolist() for c in cols]
    ns = frame["ns"].to_numpy(np.int64)[pos].tolist()
    sums: dict[tuple, int] = {}
    first: dict[tuple, int] = {}
    for i, key in enumerate(zip(*values)):
        if key in sums:
            sums[key] += ns[i]
        else:
            if any(v is None or v != v for v in key):
                return None
            sums[key] = ns[i]
            first[key] = i
    try:
        order = sorted(sums)
    except TypeError:  # keys of mixed types: the general path orders them as pandas does
        return None
    total = np.array([sums[k] for k in order]) if order else np.zeros(0, np.int64)
    if total.dtype != np.int64:
        return None
    rows = pos[np.array([first[k] for k in order], dtype=np.int64)]
    out = {}
    for k, col in zip(keys, cols):
        # the key's own dtype, stated: an object column of strings must not be read again as str
        out[k] = col.to_numpy().take(rows).astype(np.int64) if k == "step" else pd.Series(col.array.take(rows), dtype=col.dtype, name=k)
    return pd.DataFrame({**out, "ns": total})
