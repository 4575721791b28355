"""The compact summary of one rank: what travels from a worker to the coordinator instead of the rank's events.

Its size grows with steps and collective calls, never with kernels or host ops: a 54 MB rank trace with 2,000
NCCL kernels becomes a few hundred kB. Everything cross-rank rules need is here; everything else stays on the
worker. Times are ns on the rank's own clock, relative to ``origin_ns`` (the wall-clock time of the rank's 0 when
the trace records it): the coordinator puts ranks on one clock (``align``), not the worker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..timeline import Timeline
from ..views import Coverage, Views, merge_intervals, name_mask

#: NCCL/RCCL collective kernels (their duration includes the time spent waiting for the peers).
COLLECTIVE = re.compile(r"nccl|rccl|multimem|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce", re.I)
#: The collective's kind, from a kernel name such as ``ncclKernel_AllReduce_RING_LL_Sum_float``.
_KIND = re.compile(r"(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast|sendrecv|send|recv|reduce)", re.I)
#: Host ranges that mean "waiting for input" and calls that block the host on the GPU (the rules' heuristics).
DATA_LOADING = re.compile(r"enumerate\(DataLoader\)|DataLoader|IteratorGetNext|Iterator::|_next_data", re.I)
SYNC = re.compile(r"^(cuda|hip)(DeviceSynchronize|StreamSynchronize|EventSynchronize)|^cu(Ctx|Stream|Event)Synchronize|^aten::(item|_local_scalar_dense|nonzero)$")

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

    @property
    def window_ns(self) -> int:
        return max(self.window_end_ns - self.window_start_ns, 0)


def collective_kind(names: pd.Series) -> np.ndarray:
    """``allreduce``, ``allgather``, ... per kernel name, evaluated once per distinct name."""
    uniq = pd.unique(names.astype(str))
    kinds = {}
    for n in uniq:
        m = _KIND.search(n)
        kinds[n] = m.group(1).lower().replace("_", "") if m else "collective"
    return names.astype(str).map(kinds).to_numpy(dtype=object)


def summarize_ranks(timeline: Timeline, views: Views | None = None, *, source: str = "") -> list[RankSummary]:
    """One summary per rank present in ``timeline`` (a rank file holds one; a folder loaded at once, several)."""
    views = views or Views(timeline)
    ranks = sorted(int(r) for r in pd.unique(timeline.events["rank"])) if len(timeline.events) else [0]
    return [_summarize_rank(timeline, views, r, source or str(timeline.meta.path or "")) for r in ranks]


def _cov(rows: pd.DataFrame) -> Coverage:
    s = rows["start_ns"].to_numpy(np.int64)
    return Coverage(s, s + np.maximum(rows["dur_ns"].to_numpy(np.int64), 0))


def _summarize_rank(tl: Timeline, views: Views, rank: int, source: str) -> RankSummary:
    act = views.gpu_activity
    act = act[act["rank"].to_numpy() == rank]
    is_coll = name_mask(act["name"], COLLECTIVE) & (act["kind"] == "kernel").to_numpy()
    comp_rows, coll_rows = act[~is_coll], act[is_coll]
    compute, comm, busy = _cov(comp_rows), _cov(coll_rows), _cov(act)
    host = views.host_events
    host = host[host["rank"].to_numpy() == rank]
    data = _cov(host[name_mask(host["name"], DATA_LOADING)])
    sync = _cov(host[name_mask(host["name"], SYNC, case=True)])

    if len(act):
        w0 = int(act["start_ns"].min())
        w1 = int((act["start_ns"] + act["dur_ns"].clip(lower=0)).max())
    else:
        w0 = w1 = 0
    st = views.steps
    st = st[(st["rank"].to_numpy() == rank) & (st["step"].to_numpy() >= 0)]
    if st.empty:
        s_num, s0, s1 = np.array([-1]), np.array([w0], np.int64), np.array([w1], np.int64)
    else:
        s_num, s0, s1 = st["step"].to_numpy(np.int64), st["start_ns"].to_numpy(np.int64), st["end_ns"].to_numpy(np.int64)
    b, c = busy.overlap(s0, s1), compute.overlap(s0, s1)
    steps = pd.DataFrame(
        {
            "step": s_num.astype(np.int64),
            "start_ns": s0,
            "end_ns": s1,
            "busy_ns": b,
            "compute_ns": c,
            "comm_ns": comm.overlap(s0, s1),
            "exposed_ns": b - c,  # busy = compute U comm, so busy - compute is comm with no compute beside it
            "data_ns": data.overlap(s0, s1),
            "sync_ns": sync.overlap(s0, s1),
        }
    )

    coll = coll_rows.sort_values("start_ns", kind="stable")
    cs = coll["start_ns"].to_numpy(np.int64)
    ce = cs + np.maximum(coll["dur_ns"].to_numpy(np.int64), 0)
    stream = coll["stream"].to_numpy(np.int64)
    prev_end = np.empty(len(cs), np.int64)
    if len(cs):
        prev_end[0] = min(w0, int(s0.min()))
        prev_end[1:] = np.maximum.accumulate(ce)[:-1]
    prev_end = np.minimum(prev_end, cs)
    gpu_before = compute.overlap(prev_end, cs)
    collectives = pd.DataFrame(
        {
            # Calls of one process group run in order on one NCCL stream, the same order on every rank, so the
            # stream and the call's index on it identify the instance across ranks.
            "group": [f"stream {s}" for s in stream],
            "seq": pd.Series(stream).groupby(stream).cumcount().to_numpy(np.int64),
            "kind": collective_kind(coll["name"]),
            "start_ns": cs,
            "end_ns": ce,
            "bytes": coll["bytes"].to_numpy(np.int64) if "bytes" in coll else np.zeros(len(cs), np.int64),
            "gpu_before_ns": gpu_before,
            "data_before_ns": data.overlap(prev_end, cs),
            "sync_before_ns": sync.overlap(prev_end, cs),
            "idle_before_ns": (cs - prev_end) - busy.overlap(prev_end, cs),
        }
    )
    ms, me = merge_intervals(act["start_ns"].to_numpy(np.int64), (act["start_ns"] + act["dur_ns"].clip(lower=0)).to_numpy(np.int64))
    busy_total = int((me - ms).sum())
    comp_total = int(compute.cum[-1]) if len(compute.cum) else 0
    meta = tl.meta
    return RankSummary(
        rank=rank,
        device=int(act["device"].min()) if len(act) else 0,
        source=source,
        world_size=meta.world_size,
        origin_ns=int(meta.start_unix_ns or 0),
        device_names=sorted({d.name for d in meta.devices if d.rank in (rank, None) and d.name}),
        event_count=int((tl.events["rank"].to_numpy() == rank).sum()),
        window_start_ns=w0,
        window_end_ns=w1,
        busy_ns=busy_total,
        compute_ns=comp_total,
        comm_ns=int(comm.cum[-1]) if len(comm.cum) else 0,
        exposed_ns=busy_total - comp_total,
        steps=steps,
        collectives=collectives,
        ledger=_ledger(views, rank),
        warnings=list(meta.warnings),
    )


def _ledger(views: Views, rank: int) -> pd.DataFrame:
    """The rank's time ledger per step (``traceinsight.ledger``: every ns of its GPU window in one bucket)."""
    try:
        by_step = views.ledger.by_step
    except Exception:  # noqa: BLE001 - a ledger failure must not lose the rank; the summary simply has none
        return pd.DataFrame({"step": pd.Series(dtype="int64"), "bucket": pd.Series(dtype=object), "ns": pd.Series(dtype="int64")})
    mine = by_step[by_step["rank"].to_numpy() == rank]
    return mine.groupby(["step", "bucket"], as_index=False, sort=True)["ns"].sum().astype({"step": "int64", "ns": "int64"})
