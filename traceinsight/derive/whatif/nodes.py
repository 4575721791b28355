"""The graph's nodes: a rank's rows as coded columns (``vocab.masks.coded``), and its host tasks (runtime calls,
data waits, step markers) as node columns."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceinsight.vocab.intervals import merge_grouped
from traceinsight.vocab.masks import coded, coded_hits, coded_in, coded_match, coded_rows
from traceinsight.vocab.patterns import DATA_WAIT_KINDS, DATA_WAIT_PRIMARY, IMPLICIT_SYNC_CALL, SYNC_CALL
from traceinsight.derive.views import Views
from traceinsight.derive.whatif.graph import BLOCKING, DATA_WAIT, HOST, MARKER


def pair_key(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One int64 per (a, b) pair, e.g. (pid, tid): ids fit in 32 bits on every source (negative ids included)."""
    return (np.asarray(a, np.int64) << 32) | (np.asarray(b, np.int64) & 0xFFFFFFFF)


def latest_end_before(end_sorted_ids: np.ndarray, ends_sorted: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each t: the id of the node with the latest end < t among ``end_sorted_ids`` (-1 if none).

    Strictly before: a zero-length node (a step marker) must not find itself.
    """
    i = np.searchsorted(ends_sorted, t, side="left") - 1
    return np.where(i >= 0, np.take(end_sorted_ids, i, mode="clip"), -1)


def of_rank(df: pd.DataFrame, rank: int) -> pd.DataFrame:
    """The rows of ``rank``; the frame itself when it holds no other rank (no copy of a single-rank trace)."""
    m = df["rank"].to_numpy() == rank
    return df if m.all() else df[m]


def host_nodes(views: Views, rank: int, ng: int) -> tuple[dict[str, np.ndarray], int, slice, tuple, np.ndarray]:
    """The rank's host nodes, written into the first rows of the node columns (pid, tid, start, end, ntype),
    which have room for ``ng`` GPU nodes after them, and their row labels (``lbl``, host nodes only; -1 for nodes
    that are no row): merged data waits first, then runtime calls not inside one,
    then step markers (a start node per step, then an end node per step). Also returned: the number of host
    nodes, the runtime calls' node ids (a slice), their names in node order, and each marker's step number.

    Every column is allocated once at its final length and the runtime calls (most of the nodes) are gathered
    straight into it: no host-length temporaries beyond a few masks, no concatenation afterwards.
    """
    ev = of_rank(views.host_events, rank)
    kind, names = coded(ev["kind"]), coded(ev["name"])
    s = ev["start_ns"].to_numpy(np.int64)
    dur = ev["dur_ns"].to_numpy(np.int64)
    pid = ev["pid"].to_numpy(np.int64)
    tid = ev["tid"].to_numpy(np.int64)
    rt = coded_in(kind, ("runtime",))
    # data waits: merged per thread, the runtime calls inside them dropped (the names first: most traces have none)
    dw: dict[str, np.ndarray] = {}
    dw_name = coded_hits(names, re.compile(DATA_WAIT_PRIMARY))
    dwm = coded_in(kind, DATA_WAIT_KINDS) & coded_rows(names, dw_name) if dw_name.any() else None
    if dwm is not None and dwm.any():
        thread_key = pair_key(pid, tid)
        m = merge_grouped(thread_key[dwm], s[dwm], s[dwm] + np.maximum(dur[dwm], 0))
        first = pd.DataFrame({"k": thread_key[dwm], "pid": pid[dwm], "tid": tid[dwm]}).drop_duplicates("k").set_index("k")
        dw = {"lbl": np.full(len(m), -1, np.int64), "pid": first.loc[m["group"], "pid"].to_numpy(np.int64),
              "tid": first.loc[m["group"], "tid"].to_numpy(np.int64), "start": m["start_ns"].to_numpy(np.int64),
              "end": m["end_ns"].to_numpy(np.int64), "ntype": np.full(len(m), DATA_WAIT, np.int64)}
        inside = np.zeros(len(s), bool)
        dk = pair_key(dw["pid"], dw["tid"])
        for k in np.unique(dk):
            sel = np.flatnonzero(rt & (thread_key == k))
            gs, ge = dw["start"][dk == k], dw["end"][dk == k]
            i = np.searchsorted(gs, s[sel], side="right") - 1
            inside[sel] = (i >= 0) & (s[sel] < ge[np.clip(i, 0, None)])
        rt &= ~inside
    rti = np.flatnonzero(rt)
    rt_names = (names[0][rti], names[1], names[2])
    blocking = coded_match(rt_names, SYNC_CALL, case=True) | coded_match(rt_names, IMPLICIT_SYNC_CALL, case=True)
    sti = np.flatnonzero(coded_in(kind, ("step",)))
    n_dw, n_rt, n_mk = len(dw.get("start", ())), len(rti), 2 * len(sti)
    nh = n_dw + n_rt + n_mk
    cols = {k: np.empty(nh if k == "lbl" else nh + ng, np.int64) for k in ("lbl", "pid", "tid", "start", "end", "ntype")}
    for k, v in dw.items():
        cols[k][:n_dw] = v
    R, M = slice(n_dw, n_dw + n_rt), slice(n_dw + n_rt, nh)
    idx = ev.index
    if isinstance(idx, pd.RangeIndex):  # labels from positions: no label array of every host row
        np.multiply(rti, idx.step, out=cols["lbl"][R])
        cols["lbl"][R] += idx.start
    else:
        np.take(idx.to_numpy().astype(np.int64, copy=False), rti, out=cols["lbl"][R])
    np.take(pid, rti, out=cols["pid"][R])
    np.take(tid, rti, out=cols["tid"][R])
    np.take(s, rti, out=cols["start"][R])
    e_rt = cols["end"][R]
    np.take(dur, rti, out=e_rt)
    np.maximum(e_rt, 0, out=e_rt)
    e_rt += cols["start"][R]
    nt_rt = cols["ntype"][R]
    nt_rt[:] = HOST
    nt_rt[blocking] = BLOCKING
    stn = ev["step"].to_numpy()[sti].astype(np.int64)
    if len(sti):  # zero-length markers at the step's start and at its end
        st_s = s[sti]
        st_e = st_s + np.maximum(dur[sti], 0)
        cols["lbl"][M] = -1
        cols["pid"][M] = np.r_[pid[sti], pid[sti]]
        cols["tid"][M] = np.r_[tid[sti], tid[sti]]
        cols["start"][M] = cols["end"][M] = np.r_[st_s, st_e]
        cols["ntype"][M] = MARKER
    return cols, nh, R, rt_names, stn
