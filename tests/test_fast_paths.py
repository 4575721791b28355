"""The in-place and shortcut paths behind the ledger, the views and the job summary, each checked against the
plain computation it replaces (same arrays, same dtypes)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from traceinsight import ledger as L
from traceinsight.job import reduce as R
from traceinsight.job.summary import collective_kind
from traceinsight.intervals import merge_intervals


def _reference_merge(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """merge_intervals as it was: one stable sort, a running max, a reduceat."""
    if len(s) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    o = np.argsort(s, kind="stable")
    s, e = s[o].astype(np.int64), e[o].astype(np.int64)
    run = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > run[:-1]]
    idx = np.flatnonzero(new)
    return s[idx], np.maximum.reduceat(e, idx)


def _intervals(rng, n: int, shuffled: int, empty: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    s = np.sort(rng.integers(0, 50 * n + 1, n)).astype(np.int64)
    if shuffled:  # a few rows out of start order, as threads interleave on a host
        i = rng.choice(n, size=min(shuffled, n), replace=False)
        s[i] = rng.integers(0, 50 * n + 1, len(i))
    d = rng.integers(0, 200, n)
    d[rng.random(n) < empty] = 0
    return s, s + d


@pytest.mark.parametrize("n,shuffled", [(0, 0), (1, 0), (2, 0), (500, 0), (500, 3), (2000, 40), (2000, 500)])
def test_merge_intervals_equals_the_sorting_merge(n, shuffled):
    rng = np.random.default_rng(n + shuffled)
    s, e = _intervals(rng, n, shuffled)
    s_copy, e_copy = s.copy(), e.copy()
    got, want = merge_intervals(s, e), _reference_merge(s, e)
    for g, w in zip(got, want):
        assert g.dtype == np.int64 and np.array_equal(g, w)
    assert np.array_equal(s, s_copy) and np.array_equal(e, e_copy)  # the caller's arrays are left alone


@pytest.mark.parametrize("n,shuffled", [(0, 0), (1, 0), (3, 0), (500, 0), (500, 3), (3000, 30), (3000, 400)])
def test_union_of_thread_runs_equals_merged(n, shuffled):
    rng = np.random.default_rng(7 * n + shuffled)
    s, e = _intervals(rng, n, shuffled, empty=0.0)
    e = np.maximum(e, s + 1)  # the caller hands over non-empty intervals only
    want = L._merged(s, e)
    got = L._union_of_runs(L._run_unions(s.copy(), e.copy()))  # the host-busy union the ledger builds
    for g, w in zip(got, want):
        assert g.dtype == np.int64 and np.array_equal(g, w)


def test_first_max_row_is_argmax_with_ties():
    rng = np.random.default_rng(3)
    m = rng.integers(0, 4, (6, 5000)).astype(np.int64)  # many ties and all-zero columns
    assert np.array_equal(L._first_max_row(m), m.argmax(axis=0))


def test_collective_kind_on_categories_equals_per_string():
    names = pd.Series(["ncclKernel_AllReduce_RING_LL_Sum_float", "ncclDevKernel_ReduceScatter", None, "all_gather_x", "ncclKernel_SendRecv", "foo"] * 3)
    cat = names.astype("category")
    assert list(collective_kind(cat)) == list(collective_kind(names.astype(object).where(names.notna(), "nan")))
    assert collective_kind(cat.iloc[:0]).dtype == object and len(collective_kind(cat.iloc[:0])) == 0


def test_match_numbers_pairs_in_first_appearance_order():
    rng = np.random.default_rng(5)
    n = 400
    coll = pd.DataFrame(
        {
            "rank": rng.integers(0, 3, n),
            "group": rng.choice(["stream 7", "stream 13", "stream 2"], n).astype(object),
            "seq": rng.integers(0, 40, n),
            "kind": rng.choice(["allreduce", "allreduce", "allgather"], n).astype(object),
        }
    )
    got = R._match(coll, [])
    codes, _ = pd.factorize(pd.MultiIndex.from_frame(coll[["group", "seq"]]))
    n_r = pd.Series(coll["rank"].to_numpy()).groupby(codes).transform("nunique").to_numpy()
    n_k = pd.Series(coll["kind"].to_numpy()).groupby(codes).transform("nunique").to_numpy()
    ok = (n_r >= 2) & ~((n_r >= 2) & (n_k > 1))
    want = np.full(n, -1, np.int64)
    want[ok] = pd.factorize(codes[ok])[0]
    assert np.array_equal(got["instance"].to_numpy(), want)
    one = R._match(coll.assign(rank=4), [])
    assert (one["instance"].to_numpy() == -1).all()


def test_utilization_by_runs_equals_the_groupby():
    from traceinsight.views import Views

    rng = np.random.default_rng(11)
    rows = []
    for r, d in [(0, 0), (0, 1), (1, 0), (3, 2)]:
        s, e = merge_intervals(*_intervals(rng, 300, 0, empty=0.0))
        rows.append(pd.DataFrame({"rank": r, "device": d, "start_ns": s, "end_ns": e}))
    rows.append(pd.DataFrame({"rank": [5], "device": [0], "start_ns": [7], "end_ns": [7]}))  # a zero-length window
    busy = pd.concat(rows, ignore_index=True).astype("int64")
    v = Views.__new__(Views)
    v.__dict__["busy"] = busy
    b = busy.assign(len_ns=busy["end_ns"] - busy["start_ns"])
    want = b.groupby(["rank", "device"], sort=True).agg(window_start_ns=("start_ns", "min"), window_end_ns=("end_ns", "max"), busy_ns=("len_ns", "sum"))
    want["window_ns"] = want["window_end_ns"] - want["window_start_ns"]
    want["idle_ns"] = want["window_ns"] - want["busy_ns"]
    want["busy_pct"] = np.where(want["window_ns"] > 0, 100.0 * want["busy_ns"] / want["window_ns"].clip(lower=1), 0.0)
    pd.testing.assert_frame_equal(v.utilization, want.reset_index(), check_exact=True)
