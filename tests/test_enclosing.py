"""The shared "innermost enclosing range" index of the rules (``rulelib.enclosing.Enclosing``) against a direct search,
and the small array helpers the rules' fast paths rest on."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from traceinsight.rulelib.enclosing import Enclosing, innermost_positions, starts_inside, ThreadCodes
from traceinsight.rulelib.names import kind_mask, names_where


def _direct(q: pd.DataFrame, c: pd.DataFrame) -> np.ndarray:
    """Per query: among the candidates on its thread with start <= q.start and end >= q.end, the one that sorts
    last by (start, -end, position): the latest start, the innermost at equal starts, the later row of equals."""
    out = np.full(len(q), -1)
    cs = c["start_ns"].to_numpy()
    ce = cs + c["dur_ns"].to_numpy()
    for i, row in enumerate(q.itertuples(index=False)):
        ok = (c["rank"].to_numpy() == row.rank) & (c["pid"].to_numpy() == row.pid) & (c["tid"].to_numpy() == row.tid)
        ok &= (cs <= row.start_ns) & (ce >= row.start_ns + row.dur_ns)
        k = np.flatnonzero(ok)
        if len(k):
            out[i] = k[np.lexsort((k, -ce[k], cs[k]))][-1]
    return out


def _frame(rng, n, *, ranks, pids, tids, span=2_000):
    start = rng.integers(0, span, n)
    return pd.DataFrame(
        {
            "rank": rng.choice(ranks, n).astype(np.int32),
            "pid": rng.choice(pids, n).astype(np.int64),
            "tid": rng.choice(tids, n).astype(np.int64),
            "start_ns": start,
            "dur_ns": rng.integers(0, 400, n),
        }
    )


@pytest.mark.parametrize(
    "ranks, pids, tids",
    [
        ([0], [7], [11]),  # one thread: no key at all
        ([0, 3], [7, -3], [11, 12, 40]),  # a few threads, small offsets
        ([1], [5], [2**40 + 1, 3, 2**50]),  # thread ids spread wider than the rows are many (distinct-value codes)
    ],
)
def test_enclosing_matches_a_direct_search(ranks, pids, tids):
    rng = np.random.default_rng(len(tids) * 7 + len(ranks))
    cand = _frame(rng, 600, ranks=ranks, pids=pids, tids=tids)
    # planted equal starts and equal ranges: the innermost (shorter) wins, and of equal ranges the later row
    cand = pd.concat([cand, cand.iloc[:40], cand.iloc[:40].assign(dur_ns=lambda d: d["dur_ns"] // 2)], ignore_index=True)
    q = _frame(rng, 300, ranks=ranks + [9], pids=pids, tids=tids + [99])  # rank 9 and tid 99 have no ranges
    q["dur_ns"] //= 8
    expect = _direct(q, cand)
    assert (expect >= 0).sum() > 50 and (expect < 0).sum() > 10  # both cases are exercised
    np.testing.assert_array_equal(innermost_positions(q, cand), expect)
    idx = Enclosing.of_frame(cand)  # one index, asked twice
    np.testing.assert_array_equal(idx.find_frame(q), expect)
    np.testing.assert_array_equal(idx.find_frame(q.iloc[::-1]), expect[::-1])


def test_thread_codes_mark_unknown_threads():
    tc = ThreadCodes([np.array([0, 0, 1]), np.array([5, 5, 5]), np.array([10, 11, 10])])
    assert len(set(tc.codes.tolist())) == 3
    got = tc.of([np.array([0, 1, 2, 0]), np.array([5, 5, 5, 6]), np.array([11, 10, 10, 10])])
    assert got[0] == tc.codes[1] and got[1] == tc.codes[2]
    assert got[2] == -1 and got[3] == -1  # rank 2, pid 6: not in the table


def test_kind_mask_and_names_where_on_categoricals():
    kinds = pd.Series(pd.Categorical(["cpu_op", "runtime", None, "kernel", "runtime"]))
    frame = pd.DataFrame({"kind": kinds})
    assert kind_mask(frame, "runtime").tolist() == [False, True, False, False, True]
    assert kind_mask(frame, ("cpu_op", "kernel")).tolist() == [True, False, False, True, False]
    assert kind_mask(frame, "python").tolist() == [False] * 5
    names = pd.Series(pd.Categorical(["sgemm_fp64", "sgemm", None, "relu", "SGEMM"]))
    got = names_where(names, lambda m: m("gemm") & ~m("fp64"))
    assert got.tolist() == [False, True, False, False, True]  # a missing name matches nothing
    assert names_where(names.astype(object), lambda m: m("gemm") & ~m("fp64")).tolist() == got.tolist()


def test_starts_inside_one_rank_and_several():
    rows = pd.DataFrame({"rank": [0, 0, 0, 1, 1], "start_ns": [5, 10, 30, 10, 50]})
    one = pd.DataFrame({"rank": [0, 0], "start_ns": [0, 8], "dur_ns": [4, 2]})  # merged: [0, 4] and [8, 10]
    assert starts_inside(rows, one).tolist() == [False, True, False, False, False]
    two = pd.concat([one, pd.DataFrame({"rank": [1], "start_ns": [40], "dur_ns": [10]})], ignore_index=True)
    assert starts_inside(rows, two).tolist() == [False, True, False, False, True]


def test_names_where_with_many_matching_names():
    # more matching names than are compared one by one: a table per category is read instead
    vals = [f"op{i}_backward" for i in range(30)] + ["fwd", None]
    names = pd.Series(pd.Categorical(vals * 3))
    got = names_where(names, lambda m: m("backward"))
    assert got.tolist() == [v is not None and "backward" in v for v in vals * 3]


def test_any_code_in_past_the_first_few():
    from traceinsight.rulelib.names import any_code_in as _any_code_in

    def hit(*wanted):
        out = np.zeros(50, dtype=bool)
        out[np.asarray(wanted, dtype=np.int64)] = True
        return out

    codes = np.array([0, 1, 2, 40, -1], dtype=np.int8)
    assert _any_code_in(codes, hit(5, 2))
    assert not _any_code_in(codes, hit(5, 6))
    assert _any_code_in(codes, hit(*range(20, 45)))  # found only among the codes tested all at once
    assert not _any_code_in(codes, hit(*range(20, 39)))
