"""The ledger's interval pieces against plain references, and its labelling of mixed busy intervals and of gaps
that warm-up, data waits or partial host work cut (the cases it does not settle one piece per interval/gap)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from traceinsight.derive import ledger as L
from traceinsight.model.timeline import Timeline, TraceMeta, assign_steps, build_events
from traceinsight.vocab.intervals import merge_intervals
from traceinsight.derive.views import Views
from traceinsight.derive.derived import Derived


def _random_set(rng: np.random.Generator, n: int, span: int) -> tuple[np.ndarray, np.ndarray]:
    s = rng.integers(0, span, n)
    return merge_intervals(s, s + rng.integers(1, span // 10 + 2, n))


@pytest.mark.parametrize("seed", range(6))
def test_union_of_runs_is_the_merged_union(seed):
    rng = np.random.default_rng(seed)
    runs = [_random_set(rng, int(rng.integers(0, 40)), 1000) for _ in range(int(rng.integers(1, 6)))]
    runs.append((np.array([5, 20], np.int64), np.array([20, 30], np.int64)))  # touching intervals merge
    want = merge_intervals(np.concatenate([a for a, _ in runs]), np.concatenate([b for _, b in runs]))
    got = L.intervals.union_of_runs(runs)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert L.intervals.union_of_runs([])[0].size == 0


@pytest.mark.parametrize("seed", range(6))
def test_overlapping_finds_exactly_the_overlapping_intervals(seed):
    rng = np.random.default_rng(10 + seed)
    a, b = _random_set(rng, int(rng.integers(0, 60)), 2000)
    g0, g1 = _random_set(rng, int(rng.integers(0, 60)), 2000)  # both directions of the search get used
    got = L.intervals.overlapping(a, b, g0, g1)
    want = [i for i in range(len(a)) if any(a[i] < y and b[i] > x for x, y in zip(g0, g1))]
    assert got.tolist() == want


def test_sweep_labels_by_precedence():
    sets = [(0, np.array([10]), np.array([20])), (1, np.array([0, 15]), np.array([12, 30]))]
    p, label = L.intervals.sweep(sets, -1)
    assert p.tolist() == [0, 10, 12, 15, 20, 30]
    assert label.tolist() == [1, 0, 0, 0, 1]


def test_first_calls_from_positions_equal_those_from_a_mask():
    rng = np.random.default_rng(4)
    n = 4000
    names = pd.Series(pd.Categorical(rng.choice(["a", "b", "c", None], n)))
    start = rng.integers(0, 10**6, n)
    dur = np.where(rng.random(n) < 0.03, 5 * L.WARMUP_MIN_NS, rng.integers(1, 10**5, n))
    rank = np.zeros(n, np.int32)
    for p in (0.1, 0.9):  # sparse and dense candidates
        cand = rng.random(n) < p
        want = L.warmup._outlier_first_calls(names, cand, rank, start, dur)
        assert np.array_equal(L.warmup._outlier_first_calls(names, np.flatnonzero(cand), rank, start, dur), want)


def _trace(rows: list[tuple]) -> Timeline:
    """rows: (kind, name, start_us, dur_us, device, correlation)"""
    kind, name, start, dur, device, corr = (list(c) for c in zip(*rows))
    ev = build_events(
        {
            "kind": kind, "name": name, "start_ns": np.array(start, np.int64) * 1000, "dur_ns": np.array(dur, np.int64) * 1000,
            "rank": [0] * len(rows), "device": device, "stream": [7 if d >= 0 else -1 for d in device], "correlation": corr,
        }
    )
    assign_steps(ev)
    return Timeline(ev, TraceMeta("pytorch", ranks=[0]))


def _slices(tl: Timeline) -> list[tuple[int, int, str, int]]:
    sl = Derived(tl).ledger.slices
    return [(int(a) // 1000, int(b) // 1000, str(c), int(d)) for a, b, c, d in zip(sl["start_ns"], sl["end_ns"], sl["bucket"], sl["step"])]


def test_mixed_busy_interval_and_step_cut():
    # a collective overlapped by compute, then exposed; a copy hidden under compute; a step edge inside a kernel
    tl = _trace(
        [
            ("kernel", "gemm", 0, 100, 0, -1),
            ("kernel", "ncclDevKernel_AllReduce", 50, 100, 0, -1),
            ("memcpy", "Memcpy HtoD", 160, 40, 0, -1),
            ("kernel", "gemm", 170, 10, 0, -1),
            ("step", "ProfilerStep#1", 0, 175, -1, -1),
        ]
    )
    assert _slices(tl) == [
        (0, 100, "compute", 1),
        (100, 150, "communication", 1),
        (150, 160, "idle_other", 1),
        (160, 170, "copy", 1),
        (170, 175, "compute", 1),
        (175, 180, "compute", -1),
        (180, 200, "copy", -1),
    ]


def test_gap_cut_by_data_wait_and_partial_host_work():
    # gap 1 [100, 400): launched late (long gap), a data wait covers part of it and host work another part;
    # gap 2 [500, 600): host work covers all of it
    tl = _trace(
        [
            ("kernel", "gemm", 0, 100, 0, 1),
            ("runtime", "cudaLaunchKernel", 0, 5, -1, 1),
            ("kernel", "gemm", 400, 100, 0, 2),
            ("runtime", "cudaLaunchKernel", 390, 5, -1, 2),
            ("kernel", "gemm", 600, 50, 0, 3),
            ("runtime", "cudaLaunchKernel", 590, 5, -1, 3),
            ("annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 150, 100, -1, -1),
            ("cpu_op", "aten::add", 280, 50, -1, -1),
            ("cpu_op", "aten::mul", 450, 200, -1, -1),
        ]
    )
    assert _slices(tl) == [
        (0, 100, "compute", -1),
        (100, 150, "idle_untraced", -1),
        (150, 250, "idle_data_wait", -1),
        (250, 280, "idle_untraced", -1),
        (280, 330, "idle_host_busy", -1),
        (330, 390, "idle_untraced", -1),
        (390, 395, "idle_host_busy", -1),
        (395, 400, "idle_untraced", -1),
        (400, 500, "compute", -1),
        (500, 600, "idle_host_busy", -1),
        (600, 650, "compute", -1),
    ]


def test_steps_far_apart_and_several_devices():
    # step numbers a million apart (the (device, step) groups are found by sorting, not by a table)
    rows = [
        ("kernel", "gemm", 0, 100, 0, 0), ("kernel", "gemm", 200, 100, 1, 0), ("kernel", "gemm", 50, 500, 0, 1),
        ("kernel", "gemm", 700, 100, 0, 1), ("step", "ProfilerStep#1", 0, 150, -1, 0),
        ("step", "ProfilerStep#900000", 150, 400, -1, 0), ("step", "ProfilerStep#7", 0, 600, -1, 1),
    ]
    kind, name, start, dur, device, rank = (list(c) for c in zip(*rows))
    ev = build_events(
        {
            "kind": kind, "name": name, "start_ns": np.array(start) * 1000, "dur_ns": np.array(dur) * 1000, "rank": rank,
            "device": device, "stream": [7 if d >= 0 else -1 for d in device], "correlation": [-1] * len(rows),
        }
    )
    assign_steps(ev)
    led = Derived(Timeline(ev, TraceMeta("pytorch", ranks=[0, 1]))).ledger
    bs = led.by_step[led.by_step["ns"] > 0]
    got = sorted((int(r), int(d), int(s), str(b), int(n) // 1000) for r, d, s, b, n in zip(bs["rank"], bs["device"], bs["step"], bs["bucket"], bs["ns"]))
    assert got == [
        (0, 0, 1, "compute", 100),
        (0, 1, 900000, "compute", 100),
        (1, 0, -1, "compute", 100),
        (1, 0, -1, "idle_other", 100),
        (1, 0, 7, "compute", 500),
        (1, 0, 7, "idle_other", 50),
    ]


def test_union_of_runs_at_a_million_row_scale():
    """Two threads' host work, 2 x 150 000 rows interleaved (disjoint within a thread): the union the ledger reads
    host-busy time from is exact at the sizes where its working arrays come from fresh memory."""
    n = 150_000
    a = np.arange(n, dtype=np.int64) * 10
    runs = [(a, a + 3), (a + 5, a + 7)]
    s, e = L.intervals.union_of_runs(runs)
    assert len(s) == 2 * n and s[:4].tolist() == [0, 5, 10, 15] and e[:4].tolist() == [3, 7, 13, 17]
    assert int((e - s).sum()) == 5 * n
