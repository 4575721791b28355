"""Plausibility of a timeline's rows, the same for every format: what no real capture holds is dropped or unlinked,
and a reader warning says how many and why (TI014 reports the dropped ones).

Valid-but-odd traces used to give silent wrong figures: 2,000 overlapping one-millisecond steps in an 11 ms trace
counted as 2,000 steps and fed the what-if; 20,000 steps all named ``ProfilerStep#1`` became one step; one
correlation id shared by 5,000 launches tied every kernel to every launch; two kernels 10^15 ns apart made a
"999,000 s" window. Each check here is one vectorized pass, run once per load after the rows are range-checked
(``timeline.validate``) and before steps are numbered.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .masks import join_keys

#: No capture has a stretch this long with no event at all: rows beyond such a gap have corrupt times.
MAX_GAP_NS = 24 * 3600 * 10**9
#: Characters kept of one name (kernel, op, thread, category): real demangled names stay under a few kB, and every
#: regex, demangler and renderer after this point works on names of at most this length.
MAX_NAME_CHARS = 16_384
_NAME_COLUMNS = ("name", "raw_name", "thread_name", "category")
#: Steps overlapping by less than this (or 1 % of the earlier step) are rounding, not overlap.
STEP_OVERLAP_SLACK_NS = 1_000


def check(events: pd.DataFrame, meta) -> pd.DataFrame:
    """``events`` with implausible rows dropped (or unlinked), each kind of problem in one warning on ``meta``."""
    if events.empty:
        return events
    _cap_names(events, meta)
    events = _far_from_the_rest(events, meta)
    events = _overlapping_steps(events, meta)
    _shared_correlations(events, meta)
    return events


def _cap_names(events: pd.DataFrame, meta) -> None:
    """Names longer than MAX_NAME_CHARS cut (with "…"), in place: a 50 MB kernel name costs one pass here instead
    of minutes in every name regex after it."""
    cut = 0
    for col in _NAME_COLUMNS:
        if col not in events:
            continue
        ser = events[col]
        if isinstance(ser.dtype, pd.CategoricalDtype):
            cats = ser.cat.categories
            if not len(cats) or cats.dtype.kind in "iufcbmM":
                continue
            long = np.fromiter((isinstance(c, str) and len(c) > MAX_NAME_CHARS for c in cats), bool, len(cats))
            if not long.any():
                continue
            labels = np.array([c[: MAX_NAME_CHARS - 1] + "…" if lg else c for c, lg in zip(cats, long)], dtype=object)
            codes = ser.cat.codes.to_numpy()
            cut += int(long.sum())
            values = np.where(codes >= 0, labels[np.clip(codes, 0, None)], None)
            events[col] = pd.Categorical(values)
        elif ser.dtype == object or pd.api.types.is_string_dtype(ser.dtype):
            lengths = ser.str.len()
            long = (lengths > MAX_NAME_CHARS).to_numpy()
            if long.any():
                cut += int(long.sum())
                events.loc[long, col] = ser[long].str.slice(0, MAX_NAME_CHARS - 1) + "…"
    if cut:
        meta.warn(f"{cut:,} names longer than {MAX_NAME_CHARS:,} characters were cut to that length")


def _far_from_the_rest(events: pd.DataFrame, meta) -> pd.DataFrame:
    """Rows separated from the bulk of the trace by more than MAX_GAP_NS of nothing: the largest such cluster (by
    rows; the earliest on a tie) is the capture, the rest have corrupt times."""
    start = events["start_ns"].to_numpy()
    lo, hi = int(start.min()), int(start.max())
    if hi - lo <= MAX_GAP_NS:
        return events
    order = np.argsort(start, kind="stable")
    s = start[order]
    cut = np.flatnonzero(np.diff(s) > MAX_GAP_NS) + 1
    if not len(cut):
        return events
    bounds = np.concatenate(([0], cut, [len(s)]))
    sizes = np.diff(bounds)
    k = int(np.argmax(sizes))
    keep_lo, keep_hi = int(s[bounds[k]]), int(s[bounds[k + 1] - 1])
    far = (start < keep_lo) | (start > keep_hi)
    meta.warn(f"{int(far.sum()):,} events lie more than {MAX_GAP_NS // (3600 * 10**9)} h from the rest of the trace "
              f"(the rows spanned {(hi - lo) / 3.6e12:,.1f} h, longer than one capture): implausible timestamps, were dropped")
    return events[~far].reset_index(drop=True)


def _overlapping_steps(events: pd.DataFrame, meta) -> pd.DataFrame:
    kind = events["kind"]
    is_step = (kind == "step").to_numpy()
    if is_step.sum() < 2:
        return events
    rows = np.flatnonzero(is_step)
    s = events["start_ns"].to_numpy()[rows]
    e = s + events["dur_ns"].to_numpy()[rows]
    group = events["rank"].to_numpy()[rows].astype(np.int64) * 4096 + (events["device"].to_numpy()[rows].astype(np.int64) + 1)
    order = np.lexsort((s, group))
    drop = np.zeros(len(rows), dtype=bool)
    # greedy in start order per group: a step that starts before the last kept step ends (beyond rounding) overlaps it
    g_prev, end_prev, dur_prev = None, 0, 0
    if len(rows) > 200_000:  # a loop over this many markers is itself implausible: keep the cheap check only
        return events
    for i in order.tolist():
        gi = int(group[i])
        if gi != g_prev:
            g_prev, end_prev, dur_prev = gi, int(e[i]), int(e[i] - s[i])
            continue
        slack = max(STEP_OVERLAP_SLACK_NS, dur_prev // 100)
        if int(s[i]) < end_prev - slack:
            drop[i] = True
            continue
        end_prev, dur_prev = int(e[i]), int(e[i] - s[i])
    if not drop.any():
        return events
    meta.warn(f"{int(drop.sum()):,} of {len(rows):,} step markers overlap an earlier step (steps follow one another); "
              "those overlapping were dropped")
    keep = np.ones(len(events), dtype=bool)
    keep[rows[drop]] = False
    return events[keep].reset_index(drop=True)


def _shared_correlations(events: pd.DataFrame, meta) -> None:
    """Runtime calls of one process sharing a correlation id (which each launch gets uniquely) are unlinked, with
    the GPU rows carrying that id: a link would tie every such kernel to every such call."""
    corr = events["correlation"].to_numpy()
    runtime = (events["kind"] == "runtime").to_numpy() & (corr >= 0)
    if runtime.sum() < 2:
        return
    r_rank, r_pid, r_corr = events["rank"].to_numpy()[runtime], events["pid"].to_numpy()[runtime], corr[runtime]
    # one int64 key per call (equal exactly when rank, pid and id are): a repeat is a key counted twice
    key, _ = join_keys([(r_rank, r_rank[:0]), (r_pid, r_pid[:0]), (r_corr, r_corr[:0])])
    _, inv, count = np.unique(key, return_inverse=True, return_counts=True)
    dup = count[inv.reshape(-1)] > 1  # every call of a shared id (``duplicated(keep=False)``)
    if not dup.any():
        return
    host = pd.DataFrame({"rank": r_rank, "pid": r_pid, "corr": r_corr})
    bad = host[dup]
    n_ids = len(bad.drop_duplicates(["rank", "pid", "corr"]))
    keys = set(zip(bad["rank"].tolist(), bad["corr"].tolist()))
    rank = events["rank"].to_numpy()
    cand = np.flatnonzero(np.isin(corr, bad["corr"].unique()))
    hit = np.array([(int(rank[i]), int(corr[i])) in keys for i in cand.tolist()], dtype=bool) if len(cand) else np.zeros(0, bool)
    rows = cand[hit]
    new = corr.copy()
    new[rows] = -1
    events["correlation"] = new
    meta.warn(f"{int(dup.sum()):,} runtime calls share {n_ids:,} correlation ids (each launch has its own): the links of "
              f"{len(rows):,} rows through those ids were dropped, so launch and GPU rows are not matched through them")
