"""``vocab.intervals.Coverage`` against counting covered nanoseconds one by one, on small random cases."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from traceinsight.vocab.intervals import Coverage


def _covered(starts, ends, lo: int, hi: int) -> np.ndarray:
    """Per ns in [lo, hi): is it inside some [start, end)."""
    grid = np.zeros(hi - lo, dtype=bool)
    for s, e in zip(starts.tolist(), ends.tolist()):
        grid[max(s, lo) - lo : max(min(e, hi), lo) - lo] = True
    return grid


def test_before_and_overlap_count_covered_nanoseconds():
    rng = np.random.default_rng(7)
    lo, hi = -60, 260
    for trial in range(300):
        k = int(rng.integers(0, 8))
        s = rng.integers(-40, 200, k)
        e = s + rng.integers(0, 40, k)  # empty, touching and overlapping intervals among them
        cov = Coverage(s, e)
        grid = _covered(s, e, lo, hi)
        t = rng.integers(lo, hi, 50)
        want_before = np.array([int(grid[: x - lo].sum()) for x in t.tolist()])
        assert np.array_equal(cov.before(t), want_before), trial
        a = rng.integers(lo, hi, 50)
        b = np.clip(a + rng.integers(-20, 80, 50), lo, hi)  # reversed windows too: 0
        want = np.array([int(grid[x - lo : y - lo].sum()) if y > x else 0 for x, y in zip(a.tolist(), b.tolist())])
        got = cov.overlap(a, b)
        assert got.dtype == np.int64 and np.array_equal(got, want), trial
        assert int(cov.cum[-1] if len(cov.cum) else 0) == int(grid.sum())


def test_times_before_the_first_interval_and_empty_coverage():
    cov = Coverage(np.array([100, 300]), np.array([200, 400]))
    assert cov.before(np.array([-10**15, 0, 100, 150, 250, 350, 10**15])).tolist() == [0, 0, 0, 50, 100, 150, 200]
    assert cov.overlap(np.array([-10**15, 150]), np.array([10**15, 120])).tolist() == [200, 0]
    empty = Coverage(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert empty.before(np.array([1, 2])).tolist() == [0, 0] and empty.overlap(np.array([0]), np.array([9])).tolist() == [0]


def test_lexsort_ints_is_numpys_lexsort():
    from traceinsight.vocab import intervals

    rng = np.random.default_rng(5)
    for trial in range(60):
        n = int(rng.integers(intervals.LEXSORT_PACK_ROWS, intervals.LEXSORT_PACK_ROWS * 3))
        small = rng.integers(0, 3, n)  # few values: many ties
        times = rng.integers(-(2**40), 2**40, n) if trial % 3 else rng.integers(0, 50, n)
        wide = rng.integers(-(2**62), 2**62, n)  # no room to pack: np.lexsort's own order
        ends = times + rng.integers(0, 5, n)
        for keys in ([-ends, times, small], [times, small], [small], [wide, small], [small, wide], [-ends, times, small.astype(np.int32), small.astype(bool)]):
            assert np.array_equal(intervals.lexsort_ints(keys), np.lexsort(keys)), trial
    big = rng.integers(0, 4, intervals.LEXSORT_PACK_ROWS).astype(np.uint64) + np.uint64(2**63)  # beyond int64
    keys = [big, rng.integers(0, 3, len(big))]
    assert np.array_equal(intervals.lexsort_ints(keys), np.lexsort(keys))
    few = [np.array([3, 1, 2]), np.array([0, 0, 1])]
    assert np.array_equal(intervals.lexsort_ints(few), np.lexsort(few))


@pytest.mark.parametrize("runs, lo, dtype", [(1, 0, np.int64), (3, 0, np.int64), (200, 0, np.int64), (200, -50, np.int64), (5, 0, np.int32)])
def test_run_cummax_is_the_grouped_cummax(runs, lo, dtype):
    """The running maximum restarted at each run's first row, as pandas' grouped cummax gives it: a few runs (one
    accumulate each), many (lifted into one accumulate), values below 0 (pandas), narrower integers."""
    from traceinsight.vocab.intervals import run_cummax

    rng = np.random.default_rng(runs)
    n = 3000
    values = rng.integers(lo, 10**6, n).astype(dtype)
    new = np.zeros(n, bool)
    new[0] = True
    new[rng.choice(np.arange(1, n), runs - 1, replace=False)] = True
    got = run_cummax(values, new)
    want = pd.Series(values).groupby(np.cumsum(new)).cummax().to_numpy()
    assert got.dtype == values.dtype and np.array_equal(got, want)
    assert got[0] == values[0] and np.array_equal(got[new], values[new])  # every run starts again at its own value


def test_pair_opens_pairs_each_open_with_the_first_close_on_its_rank_and_thread():
    """A capture's begin pairs with the first end at or after it on the same rank and thread: not rank 1's end on
    a thread of the same number, not an earlier end, and an open with no close is left out."""
    from traceinsight.vocab.intervals import pair_opens

    rank = np.array([0, 1, 0, 0, 0, 0])
    tid = np.array([7, 7, 7, 7, 8, 9])
    start = np.array([100, 150, 50, 300, 200, 10])
    opens, closes = np.array([0, 4, 5]), np.array([1, 2, 3])
    o, c = pair_opens(rank, tid, start, opens, closes)
    assert o.tolist() == [0] and c.tolist() == [3]
