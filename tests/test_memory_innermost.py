"""The op a memory row is attributed to: ``memory_table.innermost`` against a brute-force reading of its contract
(the latest-starting op on the row's thread with start <= t <= end), on nested and on overlapping ops, and on
threads whose ops interleave in the reader's row order."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from traceinsight.ingest import memory_table


def _brute(ops: pd.DataFrame, rank, pid, tid, t) -> np.ndarray:
    out = np.full(len(t), -1, dtype=np.int64)
    s = ops["start_ns"].to_numpy()
    e = s + ops["dur_ns"].to_numpy()
    for i in range(len(t)):
        same = (ops["rank"].to_numpy() == rank[i]) & (ops["pid"].to_numpy() == pid[i]) & (ops["tid"].to_numpy() == tid[i])
        cand = np.flatnonzero(same & (s <= t[i]) & (e >= t[i]))
        if len(cand):  # latest start; among equal starts, the one the (thread, start) order puts last
            best = s[cand].max()
            out[i] = cand[s[cand] == best].max()
    return out


def _nested_ops(rng: np.random.Generator, threads: int, per_thread: int) -> pd.DataFrame:
    """Properly nested ops: each thread a sequence of top-level ops with children inside them."""
    rows = []
    for th in range(threads):
        t = int(rng.integers(0, 50))
        for _ in range(per_thread):
            dur = int(rng.integers(20, 200))
            rows.append((0, 100 + th % 2, 7 + th, t, dur))
            c = t + 1
            while c < t + dur - 3:
                cd = int(rng.integers(1, max(2, (t + dur - c) // 2)))
                rows.append((0, 100 + th % 2, 7 + th, c, cd))
                if cd > 4:
                    rows.append((0, 100 + th % 2, 7 + th, c + 1, cd - 2))  # a grandchild
                c += cd + int(rng.integers(0, 3))
            t += dur + int(rng.integers(0, 20))
    r, p, tid, s, d = (np.array(x, dtype=np.int64) for x in zip(*rows))
    order = rng.permutation(len(s))  # the reader's row order is not the thread's
    return pd.DataFrame({"rank": r[order], "pid": p[order], "tid": tid[order], "start_ns": s[order], "dur_ns": d[order]})


def _overlapping_ops(rng: np.random.Generator, n: int) -> pd.DataFrame:
    """Ops that overlap without nesting (async ranges, broken records): the contract still holds."""
    s = rng.integers(0, 2000, n)
    return pd.DataFrame({"rank": rng.integers(0, 2, n), "pid": np.full(n, 5), "tid": rng.integers(1, 4, n),
                         "start_ns": s, "dur_ns": rng.integers(0, 300, n)})


def _queries(rng: np.random.Generator, ops: pd.DataFrame, q: int):
    pick = rng.integers(0, len(ops), q)
    t = rng.integers(-10, int((ops["start_ns"] + ops["dur_ns"]).max()) + 20, q)
    tid = ops["tid"].to_numpy()[pick].copy()
    tid[:5] = 999  # a thread with no op
    return ops["rank"].to_numpy()[pick], ops["pid"].to_numpy()[pick], tid, t


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape", ["nested", "overlapping", "string_ids"])
@pytest.mark.parametrize("queries", [600, 40])
def test_innermost_matches_its_contract(seed, shape, queries):
    """600 queries fall in nearly every op; 40 leave most ops holding none, which the search of enclosing ops
    leaves out of its tables (``_enclosing``): the answers must not change. ``string_ids``: pids a string gave
    (negative numbers), which no packed key holds (the threads are numbered through a MultiIndex)."""
    rng = np.random.default_rng(seed)
    ops = _overlapping_ops(rng, 400) if shape == "overlapping" else _nested_ops(rng, 3, 30)
    if shape == "string_ids":
        ops["pid"] = -ops["pid"] - 2
        ops = ops.sort_values(["tid", "start_ns"], kind="stable").reset_index(drop=True)  # runs of one thread
    rank, pid, tid, t = _queries(rng, ops, queries)
    got = memory_table.innermost(ops, rank, pid, tid, t)
    want = _brute(ops, rank, pid, tid, t)
    assert (want >= 0).sum() > queries // 6 and (want < 0).sum() >= 5  # both answers are exercised
    np.testing.assert_array_equal(got, want)
