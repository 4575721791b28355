"""The graph's nodes: a rank's rows as category codes, and its host tasks (runtime calls, data waits, step
markers) as node columns."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceinsight.vocab.intervals import merge_grouped
from traceinsight.vocab.masks import category_hits, codes_in
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


def column_codes(col: pd.Series) -> tuple[np.ndarray, list[str], "pd.Index | None"]:
    """(code per row, the distinct values as str, the categories of a categorical) of a kind or name column, so
    that a test runs once per distinct value; a categorical's missing values get code -1 (they match nothing, as
    in ``views.name_mask``)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        cat = col.array  # the Categorical itself: its codes and categories without the ``.cat`` accessor's Series
        return cat.codes, [str(c) for c in cat.categories], cat.categories
    codes, uniq = pd.factorize(col.to_numpy(), use_na_sentinel=False)  # NaN is a value here, read as "nan"
    return codes, [str(c) for c in uniq], None


def _rows_where(col: tuple[np.ndarray, list[str]], hit: np.ndarray) -> np.ndarray:
    """Per row: the per-value answer ``hit`` (code -1 reads False), by ``masks.codes_in``."""
    return codes_in(col[0], hit)


def kind_in(col: tuple[np.ndarray, list[str]], names: tuple[str, ...]) -> np.ndarray:
    """Rows whose kind is one of ``names`` (``col`` from ``column_codes``)."""
    return _rows_where(col, np.fromiter((c in names for c in col[1]), bool, len(col[1])))


def _name_hits(col: tuple[np.ndarray, list[str], "pd.Index | None"], rx: "re.Pattern[str]") -> np.ndarray:
    """Per distinct value of a ``column_codes`` column: does ``rx`` match it. A categorical's answers come from the
    per-categories cache of ``views`` (the ledger and the rules test the same patterns on the same names)."""
    if col[2] is not None:
        return category_hits(col[2], rx)
    return np.fromiter((rx.search(c) is not None for c in col[1]), bool, len(col[1]))


def name_match(col: tuple[np.ndarray, list[str], "pd.Index | None"], pattern: "str | re.Pattern[str]", case: bool = False) -> np.ndarray:
    """``views.name_mask`` (same flags, same answer) on ``column_codes`` columns: one regex search per distinct name."""
    rx = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, 0 if case else re.IGNORECASE)
    return _rows_where(col, _name_hits(col, rx))


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
    kind, names = column_codes(ev["kind"]), column_codes(ev["name"])
    s = ev["start_ns"].to_numpy(np.int64)
    dur = ev["dur_ns"].to_numpy(np.int64)
    pid = ev["pid"].to_numpy(np.int64)
    tid = ev["tid"].to_numpy(np.int64)
    rt = kind_in(kind, ("runtime",))
    # data waits: merged per thread, the runtime calls inside them dropped (the names first: most traces have none)
    dw: dict[str, np.ndarray] = {}
    dw_name = _name_hits(names, re.compile(DATA_WAIT_PRIMARY))
    dwm = kind_in(kind, DATA_WAIT_KINDS) & _rows_where(names, dw_name) if dw_name.any() else None
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
    blocking = name_match(rt_names, SYNC_CALL, case=True) | name_match(rt_names, IMPLICIT_SYNC_CALL, case=True)
    sti = np.flatnonzero(kind_in(kind, ("step",)))
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
