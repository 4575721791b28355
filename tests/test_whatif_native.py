"""The what-if replay's C pass against its pure-Python reference, and the build's shortcuts against plain numpy.

Speed must never change a prediction. The native pass (``traceinsight.derive._replay``) and ``whatif.replay._replay_py`` (the step module) are
run on the same graphs (real traces and planted ones, every transform) and must give the same start and end for
every node; bad input must raise, not crash. The graph builder's shortcuts (per-group sorting, label lookup
tables, per-value name tests) are held to the plain numpy / pandas operations they replace, on random inputs that
include the awkward cases (ties, out-of-order runs, many groups, ids beyond 32 bits, missing names).
"""

from __future__ import annotations

import os
import re

import numpy as np
import pandas as pd
import pytest

from tests.conftest import corpus_file
from tests.test_whatif import plant, views_of
from traceinsight.derive import whatif
from traceinsight.vocab import native
from traceinsight.vocab.masks import name_mask


@pytest.fixture
def replay_module():
    mod = native.built("whatif")
    if mod is None:
        if os.environ.get("CI"):
            pytest.fail("the native what-if replay was not built (is a C compiler installed?)")
        pytest.skip("the native what-if replay is not built here (no C compiler at install time)")
    return mod


def replay_both(g: whatif.Graph, monkeypatch) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    with monkeypatch.context() as m:
        m.delenv(native.PURE_ENV, raising=False)
        fast = whatif.replay(g)
        m.setenv(native.PURE_ENV, "1")
        slow = whatif.replay(g)
    return fast, slow


def assert_same_on_every_transform(v, monkeypatch) -> int:
    graphs = v.graphs
    assert graphs
    for g in graphs:
        for name, fn in whatif.TRANSFORMS.items():
            t = g.copy()
            fn(t, None)
            if len(t.steps) != len(g.steps):
                t.window = whatif.window.replay_window(t, t.steps)
            (fs, fe), (ss, se) = replay_both(t, monkeypatch)
            assert np.array_equal(fs, ss) and np.array_equal(fe, se), (g.rank, name)
            assert fs.dtype == ss.dtype == np.int64
    return len(graphs)


@pytest.mark.parametrize(
    "rel",
    [
        "pytorch/hta_ddp_v100_rank1of2.json.gz",
        "pytorch/kineto_resnet50_nw0_v100.pt.trace.json.gz",
        "pytorch/hta_event_sync_multistream_a100.json.gz",
        "pytorch/tracelens_h100_owlv2_inference.json.gz",
        "pytorch/param_dlrm_v100_8ranks",
        "nsys/nsys2025.5_vecadd-syncmemcpy_rtx3060.sqlite",
        "nsys/nsys2026.2_fastvideo-train_2xH100_300ms-slice.sqlite",
    ],
)
def test_native_replay_equals_python_on_real_traces(rel, replay_module, monkeypatch):
    assert_same_on_every_transform(views_of(corpus_file(rel)), monkeypatch)


def test_native_replay_equals_python_on_planted(tmp_path, replay_module, monkeypatch):
    """Blocking copies, a sync that waits on the GPU, data waits and an autograd hand-off in one trace."""
    v = views_of(plant(tmp_path / "a.json", data_us=5_000.0, sync_at=10, work_after_sync_us=800.0, backward=6))
    g = v.graphs[0]
    assert (g.ntype == whatif.BLOCKING).sum() >= 6 and any(len(w) for w in g.waits)
    assert_same_on_every_transform(v, monkeypatch)
    # the windowed edits too (a subset of the syncs removed)
    for name in ("remove_host_sync", "rnn_to_cudnn", "launch_bound_to_graphs"):
        t = g.copy()
        whatif.TRANSFORMS[name](t, [(int(g.start.min()), int(np.median(g.start)))])
        (fs, fe), (ss, se) = replay_both(t, monkeypatch)
        assert np.array_equal(fs, ss) and np.array_equal(fe, se), name


def _args(g: whatif.Graph) -> list:
    """The native pass's arguments for graph ``g`` (as ``whatif.replay`` builds them)."""
    ends = -1 - g.window[g.window < 0]
    waits = [g.waits[b] for b in ends.tolist()]
    ptr = np.r_[0, np.cumsum([len(w) for w in waits])].astype(np.int64)
    flat = np.array([t for w in waits for t in w], np.int64)
    return [g.window.copy(), g.ntype, g.prev.copy(), g.prev_lat.copy(), g.cross, g.cross_lat, g.launch, g.launch_lat,
            g.dur.copy(), g.own, g.wait_on, ptr, flat, g.start.copy(), g.end.copy()]


def test_native_replay_rejects_bad_input(tmp_path, replay_module):
    """Indices out of range, arrays of the wrong size and overflowing sums raise; nothing is read out of bounds."""
    g = views_of(plant(tmp_path / "a.json", sync_at=3, kernels=6)).graphs[0]
    replay_module.replay(*_args(g))  # the well-formed call works
    n = len(g.start)
    a = _args(g)
    a[0][0] = n + 5  # a window entry past the last node
    with pytest.raises(ValueError, match="out of range"):
        replay_module.replay(*a)
    a = _args(g)
    a[0][-1] = -1 - (n + 5)  # a return event of a node that does not exist
    with pytest.raises(ValueError, match="out of range"):
        replay_module.replay(*a)
    a = _args(g)
    a[2][int(g.window[g.window >= 0][0])] = n  # a predecessor past the last node
    with pytest.raises(ValueError, match="out of range"):
        replay_module.replay(*a)
    a = _args(g)
    assert len(a[12]) > 0
    a[12][:] = n + 1  # a blocking call waiting on a node that does not exist
    with pytest.raises(ValueError, match="out of range"):
        replay_module.replay(*a)
    a = _args(g)
    a[2] = a[2][:-1]  # one array a node short
    with pytest.raises(ValueError, match="mismatched"):
        replay_module.replay(*a)
    a = _args(g)
    with pytest.raises(TypeError):
        a[13] = bytes(a[13])  # an output that cannot be written
        replay_module.replay(*a)


def test_overflow_raises_on_both_paths(tmp_path, replay_module, monkeypatch):
    g = views_of(plant(tmp_path / "a.json", kernels=6)).graphs[0]
    t = g.copy()
    t.dur[:] = np.iinfo(np.int64).max - 10
    for pure in (False, True):
        with monkeypatch.context() as m:
            if pure:
                m.setenv(native.PURE_ENV, "1")
            else:
                m.delenv(native.PURE_ENV, raising=False)
            with pytest.raises(OverflowError):
                whatif.replay(t)


# --- the build's shortcuts against what they replace ------------------------------------------------------
def _reference_order(nh, a, b, start, end):
    order = np.lexsort((end, start, b, a, np.arange(len(start)) >= nh))
    ka, kb, kg = a[order], b[order], order >= nh
    return order, (ka[1:] == ka[:-1]) & (kb[1:] == kb[:-1]) & (kg[1:] == kg[:-1])


@pytest.mark.parametrize("groups", [1, 2, 3, 200])
@pytest.mark.parametrize("shape", ["sorted_runs", "random", "ties", "wide_ids"])
def test_order_in_groups_equals_lexsort(groups, shape):
    rng = np.random.default_rng(groups * 7 + len(shape))
    n, nh = 5_000, 3_000
    a = rng.integers(0, max(groups // 2, 1), n)
    b = rng.integers(-3, groups, n) if groups != 2 else rng.choice([-4, 9], n)  # 2: two threads / streams per half
    if shape == "sorted_runs":  # time order broken at a few places (concatenated captures)
        start = np.concatenate([np.sort(rng.integers(0, 10**6, k)) for k in (1_000, 2_000, 2_000)])
    elif shape == "ties":  # many equal starts, ends in every order
        start = rng.integers(0, 50, n)
    else:
        start = rng.integers(0, 10**6, n)
    end = start + rng.integers(0, 3, n)
    if shape == "wide_ids":  # ids beyond 32 bits take the general path
        a = a + (rng.integers(0, 2, n) << 40)
    got, got_same = whatif.edges.order_in_groups(nh, a, b, a[nh:], start, end)  # host: (a, b); GPU: (device a, stream b)
    ref, ref_same = _reference_order(nh, a, b, start, end)
    assert np.array_equal(got, ref)
    assert np.array_equal(got_same, ref_same)


def test_position_equals_reindex():
    rng = np.random.default_rng(3)
    for spread in (10, 10**9):  # dense row labels (lookup table) and sparse ones (search)
        labels = rng.choice(np.arange(0, 4_000 * spread, spread), 4_000, replace=False).astype(np.int64)
        labels[rng.random(4_000) < 0.2] = -1  # nodes that are no rows
        wanted = np.r_[rng.choice(labels, 3_000), rng.integers(-5, 4_000 * spread, 1_000), -1]
        got = whatif.edges._position(labels, wanted)
        s = pd.Series(np.arange(len(labels)), index=labels)
        ref = s[s.index >= 0].reindex(wanted).fillna(-1).to_numpy(np.int64)
        assert np.array_equal(got, ref)
    assert np.array_equal(whatif.edges._position(np.full(3, -1), np.array([0, 1])), [-1, -1])


def test_launch_positions_equal_position():
    rng = np.random.default_rng(5)
    nh, ng = 3_000, 2_000
    labels = rng.permutation(20_000)[: nh + ng].astype(np.int64)  # unique row labels, as a RangeIndex gives
    lbl = labels[:nh].copy()
    rt = slice(400, 2_600)  # the runtime calls: the only host nodes that are rows
    lbl[: rt.start] = -1
    lbl[rt.stop:] = -1
    act = labels[nh:]
    li = np.r_[rng.choice(lbl[rt], 1_500), rng.choice(act, 100), rng.integers(0, 20_000, 400)]
    gi = np.r_[rng.choice(act, 1_500), rng.choice(lbl[rt], 100), rng.integers(0, 20_000, 400)]
    for ranged in (True, False):
        lp, gp = whatif.edges.launch_positions(lbl, rt, act, li, gi, ranged)
        assert np.array_equal(lp, whatif.edges._position(lbl, li))
        assert np.array_equal(gp, whatif.edges._position(act, gi))


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_cross_candidates_equal_brute_force(threads):
    """The node of another thread that ended last (strictly) before each node started, ties by node id."""
    rng = np.random.default_rng(threads)
    n = 1_500
    start = np.sort(rng.integers(0, 100_000, n))
    start[rng.random(n) < 0.05] = rng.integers(0, 100_000)  # a few out of order
    end = start + rng.integers(0, 400, n)
    tid = rng.integers(0, threads, n) * 7 - 3
    ids = np.arange(10, 10 + n)
    full_s, full_e, full_t = (np.r_[np.zeros(10, np.int64), x] for x in (start, end, tid))
    q = np.flatnonzero(rng.random(n) < 0.5)
    got_q, got_c, got_e = whatif.edges._cross_in_group(ids, q, full_s, full_e, full_t)
    ref = {}
    for i in ids[q]:
        before = [j for j in ids if full_e[j] < full_s[i]]
        if before:
            c = max(before, key=lambda j: (full_e[j], j))
            if full_t[c] != full_t[i]:
                ref[int(i)] = c
    assert dict(zip(got_q.tolist(), got_c.tolist())) == ref
    assert np.array_equal(got_e, full_e[got_c])


@pytest.mark.parametrize("categorical", [True, False])
def test_name_tests_equal_name_mask(categorical):
    names = pd.Series(["cudaStreamSynchronize", "cudaMemcpy", None, "enumerate(DataLoader)#x", "cudaLaunchKernel",
                       "nan", "CUDASTREAMSYNCHRONIZE", "volta_sgemm_128x64_nn"] * 50)
    if categorical:
        names = names.astype("category")
    from traceinsight.vocab.masks import coded, coded_in, coded_match  # the coded columns the what-if graph asks

    col = coded(names)
    for pattern, case in ((whatif.SYNC_CALL, True), (whatif.DATA_WAIT_PRIMARY, True), (whatif.SYNC_CALL, False),
                          (r"^nan$", True), (re.compile("memcpy", re.I), False)):
        assert np.array_equal(coded_match(col, pattern, case=case), name_mask(names, pattern, case=case))
    kinds = pd.Series(["runtime", "kernel", None, "step"] * 10)
    kinds = kinds.astype("category") if categorical else kinds
    ref = np.isin(kinds.astype(str).to_numpy(), ("runtime", "step"))
    assert np.array_equal(coded_in(coded(kinds), ("runtime", "step")), ref)
