"""The in-place and shortcut paths behind the ledger, the views and the job summary, each checked against the
plain computation it replaces (same arrays, same dtypes)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from traceinsight.derive import ledger as L
from traceinsight.derive.ranks import reduce as R
from traceinsight.derive.ranks.summary import collective_kind
from traceinsight.vocab.intervals import merge_intervals


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
    want = L.intervals.merged(s, e)
    got = L.intervals.union_of_runs(L.intervals.run_unions(s.copy(), e.copy()))  # the host-busy union the ledger builds
    for g, w in zip(got, want):
        assert g.dtype == np.int64 and np.array_equal(g, w)


def test_first_max_row_is_argmax_with_ties():
    rng = np.random.default_rng(3)
    m = rng.integers(0, 4, (6, 5000)).astype(np.int64)  # many ties and all-zero columns
    assert np.array_equal(L.frames.first_max_row(m), m.argmax(axis=0))


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
    from traceinsight.derive.views import Views

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


def _reference_closing_syncs(stalls: pd.DataFrame, steps: pd.DataFrame, launches: pd.DataFrame) -> np.ndarray:
    """closing_syncs as it was: a merge_asof of the calls on the steps by rank, then a groupby over ranks."""
    out = np.zeros(len(stalls), dtype=bool)
    if stalls.empty or steps.empty:
        return out
    st = steps[["rank", "start_ns", "end_ns"]].sort_values("start_ns")
    q = pd.DataFrame({"rank": stalls["rank"].to_numpy().astype(np.int64), "t": stalls["end_ns"].to_numpy(), "pos": np.arange(len(stalls))})
    m = pd.merge_asof(q.sort_values("t"), st.assign(rank=st["rank"].astype(np.int64)), left_on="t", right_on="start_ns", by="rank", direction="backward")
    m = m[m["end_ns"].notna().to_numpy() & (m["t"].to_numpy() <= m["end_ns"].to_numpy(dtype=float))]
    if m.empty:
        return out
    if launches.empty:
        out[m["pos"].to_numpy()] = True
        return out
    closing = np.ones(len(m), dtype=bool)
    for rank, g in m.groupby("rank", sort=False):
        ls = np.sort(launches.loc[launches["rank"].to_numpy() == rank, "launch_start_ns"].to_numpy())
        after = np.searchsorted(ls, g["end_ns"].to_numpy(dtype=np.int64)) - np.searchsorted(ls, g["t"].to_numpy(), side="right")
        closing[np.flatnonzero((m["rank"] == rank).to_numpy())] = after == 0
    out[m["pos"].to_numpy()[closing]] = True
    return out


def test_closing_syncs_equals_the_merge_asof():
    """Steps touching and overlapping, calls before, inside, at the ends of and after steps, ranks without steps or
    launches: the per-rank searchsorted gives the merge_asof's answer."""
    from traceinsight.rulelib.gaps import closing_syncs

    closing = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        n_steps, n_calls, n_launch = int(rng.integers(1, 12)), int(rng.integers(1, 40)), int(rng.integers(0, 60))
        s0 = rng.integers(0, 40, n_steps) * 5  # a coarse grid: calls end exactly where steps start and end
        steps = pd.DataFrame({"rank": rng.integers(0, 3, n_steps).astype(np.int32), "start_ns": s0.astype(np.int64),
                              "end_ns": (s0 + rng.integers(0, 30, n_steps) * 5).astype(np.int64)})
        c0 = rng.integers(0, 50, n_calls) * 5
        stalls = pd.DataFrame({"rank": rng.integers(0, 4, n_calls).astype(np.int32), "start_ns": c0.astype(np.int64),
                               "end_ns": (c0 + rng.integers(0, 4, n_calls) * 5).astype(np.int64)})
        launches = pd.DataFrame({"rank": rng.integers(0, 3, n_launch).astype(np.int32),
                                 "launch_start_ns": (rng.integers(0, 50, n_launch) * 5).astype(np.int64)})
        for ln in (launches, launches.iloc[:0]):
            got, want = closing_syncs(stalls, steps, ln), _reference_closing_syncs(stalls, steps, ln)
            assert got.dtype == want.dtype and np.array_equal(got, want), seed
            closing += int(want.sum())
    assert closing > 20  # the inputs reach the positive case


def test_next_launch_ns_equals_the_grouped_reindex():
    """The earliest launch of the work that ends each gap, by sorted keys, equals the groupby-min + reindex."""
    from types import SimpleNamespace

    from traceinsight.rulelib.gaps import next_launch_ns

    found = 0
    for seed in range(30):
        rng = np.random.default_rng(seed)
        n, g = int(rng.integers(1, 60)), int(rng.integers(1, 30))
        ln = pd.DataFrame({"rank": rng.integers(0, 3, n).astype(np.int32), "device": rng.integers(0, 2, n).astype(np.int32),
                           "gpu_start_ns": (rng.integers(0, 20, n) * 10).astype(np.int64),
                           "launch_start_ns": rng.integers(-5000, 200, n).astype(np.int64)})
        gaps = pd.DataFrame({"rank": rng.integers(0, 4, g).astype(np.int64), "device": rng.integers(0, 3, g).astype(np.int64),
                             "start_ns": np.zeros(g, np.int64), "end_ns": (rng.integers(0, 25, g) * 10).astype(np.int64)})
        first = ln.groupby(["rank", "device", "gpu_start_ns"], sort=False)["launch_start_ns"].min()
        want = first.reindex(pd.MultiIndex.from_arrays([gaps["rank"].to_numpy(), gaps["device"].to_numpy(), gaps["end_ns"].to_numpy()])).to_numpy(dtype=float)
        got = next_launch_ns(SimpleNamespace(launches=ln), gaps)
        assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True), seed
        found += int((~np.isnan(want)).sum())
    assert found > 50


def test_call_sites_equal_the_named_aggregation():
    """TI002's per-site table equals the groupby(sort=False).agg(...) it replaces: values, dtypes, order."""
    from traceinsight.rules.host_sync_stalls import _blocked_by, call_sites

    for seed in range(25):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(1, 40))
        names = pd.Categorical(rng.choice(["cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpy"], n))
        site = pd.Series(rng.choice(np.array(["aten::item", "aten::to", None], dtype=object), n), dtype=object)
        frame = pd.Series(rng.choice(np.array(["train.py(12): step", None], dtype=object), n), dtype=object)
        s = pd.DataFrame({"name": names, "site": site, "frame": frame,
                          "reason": rng.choice(["synchronizing call", "GPU-side sync record"], n),
                          "dur_ns": rng.integers(0, 5, n).astype(np.int64) * 1000, "gpu_idle_ns": rng.integers(0, 3, n).astype(np.int64) * 500,
                          "start_ns": rng.integers(0, 10**6, n).astype(np.int64)}, index=rng.permutation(n) * 7)
        stacks = bool(seed % 2)
        want = (
            s.assign(name=s["name"].astype(str), site=s["site"].fillna("(none)"), frame=s["frame"].fillna("(no user frame)" if stacks else "(no stack)"))
            .groupby(["name", "site", "frame", "reason"], sort=False)
            .agg(calls=("dur_ns", "size"), blocked_ns=("dur_ns", "sum"), max_ns=("dur_ns", "max"), gpu_idle_ns=("gpu_idle_ns", "sum"), first_ns=("start_ns", "min"))
            .reset_index()
        )
        got = call_sites(s, stacks)
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        pd.testing.assert_frame_equal(got.sort_values("blocked_ns", ascending=False), want.sort_values("blocked_ns", ascending=False), check_exact=True)
        for key in (s["name"].astype(str), s["site"].fillna("(none)")):
            assert _blocked_by(key, s["dur_ns"]) == {str(k): int(n) for k, n in s.groupby(key)["dur_ns"].sum().items()}


def test_small_grids_per_kernel_equals_the_groupby():
    """TI007's per-kernel table equals the groupby-agg it replaces, medians of odd and even groups included."""
    from traceinsight.rules.small_grids import per_kernel

    for seed in range(25):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(1, 50))
        names = rng.choice(np.array(["gemm_a", "gemm_b", "conv", "Zeta", "éclair"], dtype=object), n)
        blocks = rng.integers(1, 200, n).astype(float)
        dur = (rng.integers(1, 10**6, n)).astype(float)
        top = pd.DataFrame({"name": names, "blocks": blocks, "dur": dur})
        want = top.groupby("name").agg(count=("dur", "size"), total_ms=("dur", "sum"), median_blocks=("blocks", "median")).reset_index()
        pd.testing.assert_frame_equal(per_kernel(names, blocks, dur), want, check_exact=True)


def test_first_seen_groups_number_groups_as_the_groupby():
    """Group numbers equal ``groupby(sort=False).ngroup()``, key values equal the groupby's index; a missing key is
    refused (a groupby would silently drop its rows)."""
    from traceinsight.rulelib.groups import first_seen_groups

    rng = np.random.default_rng(7)
    n = 300
    df = pd.DataFrame({"a": rng.choice(np.array(["x", "y", "zz"], dtype=object), n), "b": rng.integers(0, 4, n), "c": rng.choice(["p", "q"], n)})
    group, values = first_seen_groups([df["a"], df["b"], df["c"]])
    g = df.groupby(["a", "b", "c"], sort=False)
    assert np.array_equal(group, g.ngroup().to_numpy())
    index = g.size().index
    for level, got in enumerate(values):
        assert got.equals(index.get_level_values(level)) and got.dtype == index.get_level_values(level).dtype
    with pytest.raises(ValueError):
        first_seen_groups([pd.Series(["x", None], dtype=object)])
