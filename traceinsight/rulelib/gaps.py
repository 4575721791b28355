"""Idle gaps as the rules read them: which launch ended each gap, which the host could have prevented, the
ledger's account of each gap row for row, blocking calls, syncs that close a step, inference requests.

Part of ``traceinsight.rulelib``, the public helper library of the rules (built-in and third-party).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.vocab.buckets import IDLE_BUCKETS
from traceinsight.vocab.masks import join_keys, kind_mask as views_kind_mask, name_mask
from traceinsight.derive.steady import host_arrays
from traceinsight.vocab.patterns import SYNC_CALL, TRAINING_KERNEL, TRAINING_OP
from traceinsight.rulelib.enclosing import starts_inside
from traceinsight.rulelib.names import hits_per_category, any_code_in, kind_mask, names_where
from traceinsight.rulelib.cache import memo


def next_launch_ns(views, gaps: pd.DataFrame) -> np.ndarray:
    """For each gap: when the host launched the GPU work that ended it (NaN where no launch is linked)."""
    out = np.full(len(gaps), np.nan)
    ln = views.launches
    if gaps.empty or ln.empty:
        return out
    # the earliest launch per (rank, device, GPU start), looked up at each gap's (rank, device, end): one int64 key
    # per row, sorted once (no grouped frame, no MultiIndex)
    lk, gk = join_keys([(ln["rank"].to_numpy(), gaps["rank"].to_numpy()), (ln["device"].to_numpy(), gaps["device"].to_numpy()),
                        (ln["gpu_start_ns"].to_numpy(), gaps["end_ns"].to_numpy())])
    order = np.argsort(lk, kind="stable")
    keys, starts = lk[order], ln["launch_start_ns"].to_numpy()[order]
    firsts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    keys, earliest = keys[firsts], np.minimum.reduceat(starts, firsts)
    pos = np.minimum(np.searchsorted(keys, gk), len(keys) - 1)
    hit = keys[pos] == gk
    out[hit] = earliest[pos[hit]]
    return out


def host_starved_gaps(views, gaps: pd.DataFrame) -> pd.DataFrame:
    """The gaps the host could have prevented: the work that ended them was launched after the gap began (or is
    not linked to a launch). When it was already queued, the GPU waited on a GPU-side dependency (another stream,
    an event, a peer), and a blocked host did not cause that idle."""
    nl = next_launch_ns(views, gaps)
    keep = np.isnan(nl) | (nl >= gaps["start_ns"].to_numpy(dtype=float))
    return gaps[keep]


def sync_calls(views) -> pd.DataFrame:
    """The blocking runtime calls (``SYNC_CALL``) of the host: rank, start_ns, dur_ns, end_ns (cached)."""

    def build():
        ha = host_arrays(views.views)  # the host columns the ledger has read already (kept in the views' memo)
        m = views_kind_mask(ha["kind"], ("runtime",))
        if m.any():  # one pattern: ``name_mask`` (what ``names_where`` asks per category, without its per-category column)
            m &= name_mask(ha["name"], SYNC_CALL)
        start, dur = ha["start_ns"][m], ha["dur_ns"][m]
        out = pd.DataFrame({"rank": ha["rank"][m], "start_ns": start, "dur_ns": dur, "end_ns": start + dur})
        return out

    return memo(views, "rulelib.next_launch_ns", build)


def _read_only(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The cached arrays, marked read-only: every caller shares them, so a change in place would change the
    analysis for all (an attempt raises instead)."""
    for a in arrays.values():
        a.flags.writeable = False
    return arrays


def gap_columns(views) -> dict[str, np.ndarray]:
    """``views.gaps``' columns (rank, device, start_ns, end_ns, dur_ns, all int64) as arrays, read once per analysis
    (cached): TI001 and these helpers read them again and again, and each read of a frame column builds a Series."""

    def build() -> dict[str, np.ndarray]:
        gaps = views.gaps
        return _read_only({c: gaps[c].to_numpy(np.int64) for c in ("rank", "device", "start_ns", "end_ns", "dur_ns")})

    return memo(views, "rulelib.gap_columns", build)


def ledger_gaps(views) -> pd.DataFrame:
    """The ledger's gaps (next launch, ns per idle bucket, cause) row for row with ``views.gaps`` (same index).

    Both cut each device's window the same way, so the frames normally agree row for row and this is the
    ledger's frame as is; otherwise the rows are matched on (rank, device, start_ns, end_ns). Cached.
    """

    def build():
        gaps = views.gaps
        lg = views.ledger.gaps
        keys = ["rank", "device", "start_ns", "end_ns"]
        if _ledger_aligned(views):
            out = lg.set_axis(gaps.index)
        else:
            out = gaps[keys].merge(lg.drop_duplicates(keys), on=keys, how="left").set_axis(gaps.index)
        return out

    return memo(views, "rulelib.ledger_gaps", build)


def _ledger_aligned(views) -> bool:
    """Do the ledger's gaps and ``views.gaps`` agree row for row (the usual case: both cut each device's window the
    same way)? Compared on arrays, cached."""

    def build() -> bool:
        lc, gc = views.ledger.gap_columns, gap_columns(views)
        return len(lc["start_ns"]) == len(gc["start_ns"]) and all(np.array_equal(lc[c], gc[c]) for c in ("rank", "device", "start_ns", "end_ns"))

    return memo(views, "rulelib.ledger_aligned", build)


def ledger_gap_columns(views) -> dict[str, np.ndarray]:
    """``ledger_gaps``' columns as arrays, read once per analysis (cached): the ns of each idle bucket it has (int64,
    0 where a gap the ledger lacks has none), ``cause`` (objects) and ``next_launch_end_ns`` (float)."""

    def build() -> dict[str, np.ndarray]:
        if _ledger_aligned(views):  # the ledger's own rows: its arrays as they are
            lc = views.ledger.gap_columns
            return {k: lc[k] for k in (*IDLE_BUCKETS, "cause", "next_launch_end_ns") if k in lc}
        lg = ledger_gaps(views)
        out: dict[str, np.ndarray] = {}
        for b in IDLE_BUCKETS:
            if b in lg:
                col = lg[b]
                int_col = isinstance(col.dtype, np.dtype) and col.dtype.kind == "i"
                out[b] = col.to_numpy(np.int64) if int_col else col.fillna(0).to_numpy(np.int64)
        out["cause"] = lg["cause"].to_numpy(dtype=object)
        out["next_launch_end_ns"] = lg["next_launch_end_ns"].to_numpy(dtype=float)
        return _read_only(out)

    return memo(views, "rulelib.ledger_gap_columns", build)


def closing_syncs(stalls: pd.DataFrame, steps: pd.DataFrame, launches: pd.DataFrame) -> np.ndarray:
    """Stalls that close their step: no GPU work is launched by the rank after the call and before the step ends.

    In an inference loop such a sync hands the request's result to the caller (or ends a latency measurement);
    it is the request's completion, not a stall the step could avoid.
    """
    out = np.zeros(len(stalls), dtype=bool)
    if stalls.empty or steps.empty:
        return out
    # per rank: the latest step starting at or before the call's end (the last of equal starts in start order,
    # as merge_asof takes it), kept when the call ends inside it; then no launch between the call and its end
    st = steps[["rank", "start_ns", "end_ns"]].sort_values("start_ns")
    s_rank, s_start = st["rank"].to_numpy().astype(np.int64), st["start_ns"].to_numpy()
    s_end = st["end_ns"].to_numpy().astype(float)
    q_rank, t = stalls["rank"].to_numpy().astype(np.int64), stalls["end_ns"].to_numpy()
    l_rank, l_start = launches["rank"].to_numpy(), launches["launch_start_ns"].to_numpy()
    for rank in np.unique(q_rank).tolist():
        si = np.flatnonzero(s_rank == rank)
        if not len(si):
            continue
        qi = np.flatnonzero(q_rank == rank)
        j = np.searchsorted(s_start[si], t[qi], side="right") - 1
        qi, j = qi[j >= 0], si[j[j >= 0]]
        inside = t[qi] <= s_end[j]
        qi, end = qi[inside], s_end[j[inside]]
        if launches.empty:
            out[qi] = True
            continue
        ls = np.sort(l_start[l_rank == rank], kind="stable")  # launches come nearly in time order: timsort takes the runs
        after = np.searchsorted(ls, end.astype(np.int64)) - np.searchsorted(ls, t[qi], side="right")
        out[qi[after == 0]] = True
    return out


def inference_ranks(views) -> frozenset[int]:
    """The ranks that run inference (or a benchmark of it): no backward pass or optimizer step on the rank's host,
    or, on a rank whose trace records no framework ops (an Nsight capture: runtime calls only), none among its
    kernels' names (``TRAINING_KERNEL``).

    All ranks at once, one name test per distinct name, no per-rank copy of the host rows; a rank without host
    rows is not called inference. Cached on the views."""

    def build():
        host = views.host_events
        rank = host["rank"].to_numpy()
        if len(rank) and rank.min() == rank.max():  # one rank (one file): is any training op on its host at all
            names = host["name"]
            if isinstance(names.dtype, pd.CategoricalDtype):
                hit = hits_per_category(names, lambda m: m(TRAINING_OP, case=True))
                any_training = any_code_in(names.cat.codes.to_numpy(), hit)
            else:
                any_training = bool(name_mask(names, TRAINING_OP, case=True).any())
            out = frozenset() if any_training else frozenset({int(rank[0])})
        else:
            training = names_where(host["name"], lambda m: m(TRAINING_OP, case=True))
            out = frozenset(int(r) for r in pd.unique(rank)) - frozenset(int(r) for r in pd.unique(rank[training]))
        if out:
            with_ops = frozenset(int(r) for r in pd.unique(rank[kind_mask(host, "cpu_op")]))
            blind = out - with_ops  # no framework ops: the host cannot say, the kernels can
            if blind:
                gpu = views.gpu_activity
                if len(gpu):
                    trained = names_where(gpu["name"], lambda m: m(TRAINING_KERNEL, case=True))
                    out = out - (blind & frozenset(int(r) for r in pd.unique(gpu["rank"].to_numpy()[trained])))
        return out

    return memo(views, "rulelib.inference_ranks", build)


def request_boundary_gaps(views, gaps: pd.DataFrame) -> np.ndarray:
    """Gaps that begin inside a sync closing an inference step: the idle between two requests of an inference
    loop (each request's sync hands its result back), which lengthens no request."""
    out = np.zeros(len(gaps), dtype=bool)
    if gaps.empty or views.steps.empty:
        return out
    calls = sync_calls(views)  # first: most ranks have none, and then which ranks infer is never asked
    if calls.empty:
        return out
    ranks = inference_ranks(views)
    if not ranks:  # a training run: no request boundaries
        return out
    calls = calls[np.isin(calls["rank"].to_numpy(), np.fromiter(ranks, dtype=np.int64))]
    if calls.empty:
        return out
    return starts_inside(gaps, calls[closing_syncs(calls, views.steps, views.launches)])
