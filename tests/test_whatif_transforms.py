"""The what-if transforms edit exactly what their docstrings say, inside the windows they are given and nowhere
else, and the step times they lead to (``traceinsight.derive.whatif``).

The trace is one training loop written by the kineto helper: per step a 1 ms data wait, 200 µs of untraced host
work, a 500 µs ``cudaPointerGetAttributes`` (a long host call that is not a launch), a 20 µs ``cudaEventRecord``, ten kernels
launched 30 µs apart (every fifth one a GEMM), then a ``cudaStreamSynchronize``. Tests read the graph's arrays
(what a transform edits) and the predicted step (what a user reads).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.helpers.kineto_writer import KinetoTrace
from tests.test_whatif import plant, views_of
from traceinsight.derive import whatif
from traceinsight.model.finding import Instance
from traceinsight.vocab.thresholds import LAUNCH_GAP_NS
from traceinsight.derive.whatif import BLOCKING, DATA_WAIT, GPU, HOST, MARKER

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
GEMM, ELEMENTWISE = "volta_sgemm_32x32_nn", "at::native::vectorized_elementwise_kernel"


def loop_trace(path, steps: int = 4, markers: bool = True):
    tr = KinetoTrace(tid=77)
    t, gpu_free = 10.0, 0.0
    for n in range(steps):
        s0 = t
        tr.annotation(LOADER, t, 1000.0)
        t += 1200.0  # 200 µs of host work (untraced) after the batch arrives
        tr.runtime("cudaPointerGetAttributes", t, 500.0)
        t += 520.0
        tr.runtime("cudaEventRecord", t, 20.0)
        t += 30.0
        for k in range(10):
            t += 30.0
            gemm = k % 5 == 0
            dur = 50.0 if gemm else 10.0
            ks = max(t + 6.0, gpu_free + 2.0)
            tr.kernel(GEMM if gemm else ELEMENTWISE, ks, dur, launch_us=t, launch_dur_us=4.0)
            gpu_free = ks + dur
            t += 4.0
        end = max(t + 3.0, gpu_free + 4.0)
        tr.runtime("cudaStreamSynchronize", t, end - t)
        t = end + 5.0
        if markers:
            tr.step(n, s0, t - s0)
        t += 10.0
    return tr.write(path)


@pytest.fixture
def loop(tmp_path):
    """(views, graph) of the loop; the graph is a fresh copy a test may edit."""
    v = views_of(loop_trace(tmp_path / "loop.json"))
    (g,) = v.graphs
    return v, g


def step_windows(g: whatif.Graph, which) -> list[tuple[int, int]]:
    """The (start, end) of the steps ``which`` (their markers), as a finding's instances would give them."""
    st = g.steps
    return [(int(st["t0"].iloc[i]), int(st["t1"].iloc[i])) for i in which]


def in_steps(g: whatif.Graph, which) -> np.ndarray:
    """Nodes that start inside the steps ``which``, and GPU nodes launched there."""
    m = np.zeros(len(g.start), bool)
    t = g.start.copy()
    gl = (g.ntype == GPU) & (g.launch >= 0)
    t[gl] = g.start[g.launch[gl]]
    for s, e in step_windows(g, which):
        m |= (t >= s) & (t < e)
    return m


def names_of(v, g: whatif.Graph) -> np.ndarray:
    """The event name of each GPU node (kernel names), '' for others."""
    out = np.full(len(g.start), "", object)
    act = v.gpu_activity
    gpu = np.flatnonzero(g.ntype == GPU)
    out[gpu] = act["name"].astype(str).to_numpy()
    return out


# --- the graph the transforms edit -------------------------------------------------------------------------
def test_the_loop_graph(loop):
    v, g = loop
    counts = {t: int((g.ntype == t).sum()) for t in (HOST, DATA_WAIT, BLOCKING, MARKER, GPU)}
    # per step: malloc + event record + 10 launches on the host, one sync, one data wait, 2 markers, 10 kernels
    assert counts == {HOST: 4 * 12, DATA_WAIT: 4, BLOCKING: 4, MARKER: 8, GPU: 40}
    assert len(g.steps) == 4
    host = g.ntype == HOST
    assert sorted(set(g.dur[host & ~g.is_launch].tolist())) == [20_000, 500_000]
    assert (g.dur[host & g.is_launch] == 4_000).all()


# --- each transform, what it edits -------------------------------------------------------------------------
def test_remove_data_wait(loop):
    _, g = loop
    t = g.copy()
    whatif.remove_data_wait(t)
    dw = g.ntype == DATA_WAIT
    assert (t.dur[dw] == 0).all() and (g.dur[dw] == 1_000_000).all()
    assert (t.dur[~dw] == g.dur[~dw]).all()
    t = g.copy()
    whatif.remove_data_wait(t, step_windows(g, [1]))
    assert t.dur[dw].tolist() == [1_000_000, 0, 1_000_000, 1_000_000]
    assert (t.dur[~dw] == g.dur[~dw]).all()  # the other tasks of that step keep their time
    t = g.copy()
    whatif.remove_data_wait(t, step_windows(g, [3]))  # the last step, up to the end of the trace
    assert t.dur[dw].tolist() == [1_000_000, 1_000_000, 1_000_000, 0]
    # windows are half-open: one that ends where a data wait starts does not reach it
    s1 = int(g.start[np.flatnonzero(dw)[1]])
    t = g.copy()
    whatif.remove_data_wait(t, [(s1 - 100_000, s1)])
    assert (t.dur == g.dur).all()
    whatif.remove_data_wait(t, [(s1 - 100_000, s1 + 1)])
    assert t.dur[dw].tolist() == [1_000_000, 0, 1_000_000, 1_000_000]


def test_remove_host_sync(loop):
    _, g = loop
    blk = g.ntype == BLOCKING
    assert g.wait_on[blk].all()
    t = g.copy()
    whatif.remove_host_sync(t, step_windows(g, [0, 2]))
    assert t.wait_on[blk].tolist() == [False, True, False, True]
    assert (t.dur == g.dur).all()
    t = g.copy()
    whatif.remove_host_sync(t)
    assert not t.wait_on[blk].any()


def test_launch_bound_to_graphs_everywhere(loop):
    _, g = loop
    t = g.copy()
    whatif.launch_bound_to_graphs(t)
    host, gpu = g.ntype == HOST, g.ntype == GPU
    # launches and short host calls cost nothing; the 500 µs host call stays; data waits and syncs keep theirs
    assert (t.dur[host & g.is_launch] == 0).all()
    assert sorted(set(t.dur[host & ~g.is_launch].tolist())) == [0, 500_000]
    assert (t.dur[~host & ~gpu] == g.dur[~host & ~gpu]).all() and (t.dur[gpu] == g.dur[gpu]).all()
    # host time between calls goes when under LAUNCH_GAP_NS; the 200 µs after each sync is real host work
    short = host & (g.prev_lat <= LAUNCH_GAP_NS)
    assert (t.prev_lat[short] == 0).all() and (g.prev_lat[short] > 0).any()
    assert (t.prev_lat[host & ~short] == g.prev_lat[host & ~short]).all() and (g.prev_lat[host & ~short] > LAUNCH_GAP_NS).any()
    # GPU tasks: a typical launch latency and kernel-to-kernel delay at most, never more than they had
    assert (t.launch_lat[gpu] == np.minimum(g.launch_lat[gpu], g.defaults["launch"])).all()
    assert (t.prev_lat[gpu] == np.minimum(g.prev_lat[gpu], g.defaults["queue"])).all()
    assert (g.launch_lat[gpu] > g.defaults["launch"]).any()  # the trace has longer ones to cap
    # nothing else: blocking edges, data waits' latencies
    assert (t.wait_on == g.wait_on).all()
    other = ~host & ~gpu
    assert (t.prev_lat[other] == g.prev_lat[other]).all()


def test_launch_bound_to_graphs_in_windows(loop):
    _, g = loop
    t = g.copy()
    whatif.launch_bound_to_graphs(t, step_windows(g, [1]))
    inside = in_steps(g, [1])
    host, gpu = g.ntype == HOST, g.ntype == GPU
    assert (t.dur[host & g.is_launch & inside] == 0).all()
    assert (t.dur[~inside] == g.dur[~inside]).all()
    assert (t.prev_lat[~inside] == g.prev_lat[~inside]).all()
    assert (t.launch_lat[~inside] == g.launch_lat[~inside]).all()
    assert (t.prev_lat[host & inside & (g.prev_lat <= LAUNCH_GAP_NS)] == 0).all()
    assert (t.launch_lat[gpu & inside] <= g.defaults["launch"]).all()


def test_launch_bound_hand_off_edges(tmp_path):
    """Host time across a hand-off between threads (the autograd thread) goes like time on one thread."""
    v = views_of(plant(tmp_path / "a.json", steps=3, kernels=4, backward=4, launch_gap_us=30.0))
    (g,) = v.graphs
    host = g.ntype == HOST
    hand = host & (g.cross >= 0)
    assert hand.any()
    t = g.copy()
    whatif.launch_bound_to_graphs(t)
    short = hand & (g.cross_lat <= LAUNCH_GAP_NS)
    assert (t.cross_lat[short] == 0).all() and (g.cross_lat[short] > 0).any()
    assert (t.cross_lat[hand & ~short] == g.cross_lat[hand & ~short]).all()
    v_ = g.copy()
    whatif.typical_gpu_latencies(v_)  # GPU latencies only: the host's hand-offs keep theirs
    assert (v_.cross_lat[host] == g.cross_lat[host]).all()
    u = g.copy()
    whatif.launch_bound_to_graphs(u, [(0, 1)])  # a window before the trace: nothing to edit
    for k in ("dur", "prev_lat", "cross_lat", "launch_lat"):
        assert (getattr(u, k) == getattr(g, k)).all(), k


def test_rnn_to_cudnn_keeps_only_gemms_in_its_region(loop):
    v, g = loop
    names = names_of(v, g)
    t = g.copy()
    whatif.rnn_to_cudnn(t, step_windows(g, [2]))
    inside = in_steps(g, [2])
    gpu = g.ntype == GPU
    elementwise = gpu & (names == ELEMENTWISE)
    assert g.gemm[gpu & (names == GEMM)].all() and not g.gemm[elementwise].any()
    assert (t.dur[elementwise & inside] == 0).all() and (g.dur[elementwise & inside] == 10_000).all()
    assert (t.dur[gpu & g.gemm] == 50_000).all()
    assert (t.dur[~inside] == g.dur[~inside]).all()
    # launched back to back as in the graph model, inside the region only
    assert (t.dur[(g.ntype == HOST) & g.is_launch & inside] == 0).all()
    assert (t.launch_lat[~inside] == g.launch_lat[~inside]).all()
    # the long host call in the region is not a kernel: it keeps its time
    assert sorted(set(t.dur[(g.ntype == HOST) & ~g.is_launch & inside].tolist())) == [0, 500_000]


def gpu_gaps_trace(path):
    """4 steps of ten 40 µs kernels, all launched early in the step (25 µs apart; the first launch call takes 20 µs,
    the others 4 µs); the first kernel starts 100 µs after its launch, and two kernels start 50 µs after the one
    before them, where the rest follow 2 µs apart: GPU idle that no launch and no other stream explains. A sync
    waits for the GPU at the end of each step."""
    tr = KinetoTrace(tid=77)
    t = 10.0
    for n in range(4):
        s0 = t
        gpu = t + 100.0
        for k in range(10):
            tr.kernel("gemm", gpu, 40.0, launch_us=t + 25 * k, launch_dur_us=20.0 if k == 0 else 4.0)
            gpu += 40.0 + (50.0 if k in (3, 7) else 2.0)
        end = gpu + 4.0
        tr.runtime("cudaStreamSynchronize", t + 250.0, end - t - 250.0)
        t = end + 10.0
        tr.step(n, s0, t - s0)
        t += 10.0
    return tr.write(path)


def test_typical_gpu_latencies(tmp_path):
    v = views_of(gpu_gaps_trace(tmp_path / "gaps.json"))
    (g,) = v.graphs
    assert (g.defaults["launch"], g.defaults["queue"]) == (6_000, 2_000)
    gpu = g.ntype == GPU
    first = np.flatnonzero(gpu & (g.launch_lat == 100_000))  # each step's first kernel
    assert len(first) == 4
    assert sorted(set(g.prev_lat[gpu].tolist())) == [0, 2_000, 50_000]
    t = g.copy()
    whatif.typical_gpu_latencies(t)
    # at most the typical kernel-to-kernel delay, and the typical launch latency after the launch call returns
    # (its 20 µs: 26 µs after its start)
    assert sorted(set(t.prev_lat[gpu].tolist())) == [0, 2_000]
    assert (t.launch_lat[first] == 26_000).all()
    assert (t.launch_lat[gpu & (g.launch_lat != 100_000)] == g.launch_lat[gpu & (g.launch_lat != 100_000)]).all()
    for k in ("dur", "own", "cross_lat"):
        assert (getattr(t, k) == getattr(g, k)).all()
    assert (t.prev_lat[~gpu] == g.prev_lat[~gpu]).all() and (t.launch_lat[~gpu] == g.launch_lat[~gpu]).all()
    # what the step loses is that unexplained idle: 74 µs of launch wait and 2 x 48 µs of queue wait
    r = whatif.predict_step_ns(v.graphs, "typical_gpu_latencies")
    assert (r["baseline_step_ns"], r["step_ns"]) == (640_000, 640_000 - 74_000 - 96_000)
    # the graph model launches at once and caps the launch latency itself (6 µs): 20 µs more
    assert whatif.predict_step_ns(v.graphs, "launch_bound_to_graphs")["step_ns"] == 640_000 - 94_000 - 96_000
    # the very first kernel is launched by the first host call (node 0): a window around that launch call reaches
    # the kernel, which starts 100 µs later, outside it
    assert g.launch[first[0]] == 0
    ls = int(g.start[0])
    u = g.copy()
    whatif.typical_gpu_latencies(u, [(ls, ls + 1)])
    assert u.launch_lat[first].tolist() == [26_000, 100_000, 100_000, 100_000]
    # ... and so does a window around the kernel itself, though its launch was before it
    ks = int(g.start[first[0]])
    u = g.copy()
    whatif.typical_gpu_latencies(u, [(ks, ks + 1)])
    assert u.launch_lat[first].tolist() == [26_000, 100_000, 100_000, 100_000]
    # in windows: the steps outside keep their latencies
    u = g.copy()
    whatif.typical_gpu_latencies(u, step_windows(g, [3]))
    inside = in_steps(g, [3])
    assert (u.prev_lat[~inside] == g.prev_lat[~inside]).all() and (u.launch_lat[~inside] == g.launch_lat[~inside]).all()
    assert (u.prev_lat[gpu & inside] == t.prev_lat[gpu & inside]).all() and (u.launch_lat[gpu & inside] == t.launch_lat[gpu & inside]).all()


def test_typical_gpu_latencies_cross_stream(tmp_path):
    """A kernel that waits for another stream keeps only the typical delay after it."""
    tr = KinetoTrace()
    for i in range(30):
        b = 1000 * i
        tr.kernel("producer", b, 100, launch_us=b - 50, stream=7)
        tr.kernel("consumer", b + 105, 100, launch_us=b - 40, stream=8)  # starts 5 µs after the producer ends
    v = views_of(tr.write(tmp_path / "x.json"))
    (g,) = v.graphs
    gpu = g.ntype == GPU
    dep = gpu & (g.cross >= 0)
    assert dep.sum() == 30 and (g.cross_lat[dep] == 5_000).all()
    t = g.copy()
    whatif.typical_gpu_latencies(t)
    assert (t.cross_lat[dep] == min(5_000, g.defaults["queue"])).all()


def test_cut_time(loop):
    _, g = loop
    dw = np.flatnonzero(g.ntype == DATA_WAIT)
    blk = np.flatnonzero(g.ntype == BLOCKING)
    s0, e0 = int(g.start[dw[0]]), int(g.end[dw[0]])
    t = g.copy()
    whatif.cut_time(t, [(s0, e0)])  # the first data wait never happened
    assert t.dur[dw].tolist() == [0, 1_000_000, 1_000_000, 1_000_000]
    t = g.copy()
    whatif.cut_time(t, [(s0, s0 + 250_000), (e0 - 250_000, e0)])  # a quarter at each end
    assert t.dur[dw[0]] == 500_000
    assert (t.dur[dw[1:]] == 1_000_000).all()
    # a blocking call loses the part of its own cost (its last ``own`` ns) inside a window
    b = blk[0]
    own = int(g.own[b])
    assert own > 0
    t = g.copy()
    whatif.cut_time(t, [(int(g.end[b]) - own, int(g.end[b]) - own // 2)])
    assert t.own[b] == own - own // 2
    assert (t.own[blk[1:]] == g.own[blk[1:]]).all()
    t = g.copy()
    whatif.cut_time(t, [(int(g.end[b]) - 10 * own, int(g.end[b]))])
    assert t.own[b] == 0
    # an edge's latency loses the part of it inside a window: the 200 µs of host work after the first data wait
    d = dw[0]
    (a,) = np.flatnonzero(g.prev == d)
    assert g.prev_lat[a] == 200_000
    t = g.copy()
    whatif.cut_time(t, [(int(g.end[d]) + 50_000, int(g.end[d]) + 200_000)])
    assert t.prev_lat[a] == 50_000
    t = g.copy()
    whatif.cut_time(t, [(int(g.end[d]), int(g.end[d]) + 450_000)])
    assert t.prev_lat[a] == 0 and t.dur[a] == 250_000  # the 500 µs call after it loses its first 250 µs too
    # a GPU task's launch latency is measured from its launch call's start
    k = np.flatnonzero(g.ntype == GPU)[0]
    ls = int(g.start[g.launch[k]])
    t = g.copy()
    whatif.cut_time(t, [(ls, ls + 1_000)])
    assert t.launch_lat[k] == g.launch_lat[k] - 1_000
    # no windows: nothing cut
    t = g.copy()
    whatif.cut_time(t, [])
    for name in ("dur", "own", "prev_lat", "cross_lat", "launch_lat"):
        assert (getattr(t, name) == getattr(g, name)).all()


def _cut_time_everywhere(g: whatif.Graph, windows) -> None:
    """The reference ``cut_time``: every range measured against the windows, new arrays for dur and own."""
    from traceinsight.vocab.intervals import Coverage

    w = np.asarray(list(windows), np.int64).reshape(-1, 2)
    if len(w) == 0:
        return
    cov = Coverage(w[:, 0], w[:, 1])
    g.dur = np.maximum(g.dur - cov.overlap(g.start, g.end), 0)
    g.own = np.maximum(g.own - cov.overlap(g.end - g.own, g.end), 0)
    for pred, lat, ref in ((g.prev, g.prev_lat, g.end), (g.cross, g.cross_lat, g.end), (g.launch, g.launch_lat, g.start)):
        has = (pred >= 0) & (lat > 0)
        a = ref[pred[has]]
        lat[has] = np.maximum(lat[has] - cov.overlap(a, a + lat[has]), 0)


def test_cut_time_only_near_the_windows_equals_cutting_everywhere(loop):
    _, g = loop
    rng = np.random.default_rng(11)
    t0, t1 = int(g.start.min()), int(g.end.max())
    base = g.copy()
    base.prev_lat[::7] = -base.prev_lat[::7]  # negative latencies and durations stay as they are unless cut
    base.dur[::11] = -5
    cases = [[], [(t0, t1)], [(t1 + 10, t1 + 20)], [(t0 - 20, t0 - 10)], [(t0 + 5, t0 + 5)], [(t1, t0)]]
    for _ in range(40):
        k = int(rng.integers(1, 5))
        a = rng.integers(t0 - 10_000, t1, k)
        cases.append(list(zip(a.tolist(), (a + rng.integers(0, (t1 - t0) // 4, k)).tolist())))
    for windows in cases:
        got, want = base.copy(), base.copy()
        whatif.cut_time(got, windows)
        _cut_time_everywhere(want, windows)
        for name in ("dur", "own", "prev_lat", "cross_lat", "launch_lat"):
            assert np.array_equal(getattr(got, name), getattr(want, name)), (name, windows)
    assert any(not np.array_equal(_cut(base, c).dur, base.dur) for c in cases[6:])  # the windows did cut


def _cut(g: whatif.Graph, windows) -> whatif.Graph:
    t = g.copy()
    whatif.cut_time(t, windows)
    return t


def test_remove_warmup_drops_leading_warmup_steps_once(tmp_path):
    v = views_of(plant(tmp_path / "a.json", warmup_us=200_000.0, steps=3))
    (g,) = v.graphs
    assert len(g.steps) == 3
    t = g.copy()
    whatif.remove_warmup(t)
    expected = g.steps.iloc[1:].reset_index(drop=True)
    pd.testing.assert_frame_equal(t.steps, expected)
    once = t.dur.copy()
    whatif.remove_warmup(t)  # applied once: a graph already in steady state is left as it is
    pd.testing.assert_frame_equal(t.steps, expected)
    assert (t.dur == once).all()
    r = whatif.predict_step_ns(v.graphs, "remove_warmup")
    assert r["steps_used"] == 2


def conv_trace(path, autotune: bool):
    """40 convolutions of 230 µs, each launched 60 µs into a 300 µs host step; with ``autotune`` the first one
    spends 50 ms on the host first (cuDNN benchmarking, one-time work the ledger books as warm-up). No markers."""
    t = KinetoTrace()
    t0 = 0
    if autotune:
        t.kernel("k0", 0, 10)
        t.cpu_op("aten::conv2d", 20, 50_000)
        t0 = 50_010
    for i in range(40):
        b = t0 + 300 * i
        t.cpu_op("aten::conv2d", b, 50)
        t.kernel("conv", b + 60, 230, launch_us=b + 40)
    return t.write(path)


def test_remove_warmup_cuts_the_ledgers_warmup_without_markers(tmp_path):
    """Without step markers the window is one step: the ledger's warm-up is cut out of baseline and prediction."""
    warm, plain = views_of(conv_trace(tmp_path / "w.json", True)), views_of(conv_trace(tmp_path / "p.json", False))
    (g,) = warm.graphs
    assert g.steps.empty and len(g.defaults["warmup"]) == 1
    t = g.copy()
    whatif.remove_warmup(t)
    once = (t.dur.copy(), t.prev_lat.copy(), t.launch_lat.copy())
    assert (once[1] < g.prev_lat).any() or (once[0] < g.dur).any()
    whatif.remove_warmup(t)
    assert all((a == b).all() for a, b in zip(once, (t.dur, t.prev_lat, t.launch_lat)))
    r = whatif.predict_step_ns(warm.graphs, "none")
    truth = whatif.predict_step_ns(plain.graphs, "none")["step_ns"]
    assert r["steps_used"] == 1
    assert r["measured_step_ns"] > truth + 49_000_000  # the measured window holds the 50 ms
    assert abs(r["baseline_step_ns"] - truth) <= 0.01 * truth  # the baseline does not
    assert r["assumptions"].endswith("; priced on the steady state (the ledger's warm-up left out of baseline and prediction); "
                                     "no step markers: the whole traced window is one step")


def test_all_applies_every_transform_in_its_windows(loop):
    v, g = loop
    base = whatif.predict_step_ns(v.graphs, "none")["step_ns"]
    assert whatif.predict_step_ns(v.graphs, "all", windows=[(0, 1)])["step_ns"] == base  # windows before the trace
    each = whatif.predict_step_ns(v.graphs, "all")["step_ns"]
    assert each < base - 1_000_000  # at least the data wait goes
    t = g.copy()
    whatif.TRANSFORMS["all"](t, step_windows(g, [0]))
    inside = in_steps(g, [0])
    assert (t.dur[~inside] == g.dur[~inside]).all() and (t.wait_on[~inside] == g.wait_on[~inside]).all()
    assert (t.dur[inside & (g.ntype == DATA_WAIT)] == 0).all() and not t.wait_on[inside & (g.ntype == BLOCKING)].any()


# --- windows, names, and what the reports get ---------------------------------------------------------------
def test_windows_edit_only_inside_them(loop):
    v, g = loop
    base = whatif.predict_step_ns(v.graphs, "none")
    one = step_windows(g, [1])
    assert len(one) == 1  # a single window edits (not only lists of several)
    t = g.copy()
    whatif.remove_data_wait(t, one)
    assert (t.dur[g.ntype == DATA_WAIT] == 0).sum() == 1
    # an empty list of windows edits nothing
    for name in ("remove_data_wait", "remove_host_sync", "launch_bound_to_graphs", "rnn_to_cudnn", "typical_gpu_latencies"):
        assert whatif.predict_step_ns(v.graphs, name, windows=[])["step_ns"] == base["step_ns"], name
    # the GPU tasks launched in a window are in it, wherever they run
    late = np.flatnonzero(g.ntype == GPU)[0]
    ls = int(g.start[g.launch[late]])
    t = g.copy()
    whatif.typical_gpu_latencies(t, [(ls, ls + 1)])
    assert t.launch_lat[late] == min(g.launch_lat[late], g.defaults["launch"] + int(g.end[g.launch[late]] - ls))
    assert (t.launch_lat[np.flatnonzero(g.ntype == GPU)[1:]] == g.launch_lat[np.flatnonzero(g.ntype == GPU)[1:]]).all()


def test_transforms_by_name_function_or_list(loop):
    v, g = loop
    dw = step_windows(g, [0, 1])
    r = whatif.predict_step_ns(v.graphs, [("remove_data_wait", dw), "remove_host_sync"])
    assert r["transform"] == "remove_data_wait+remove_host_sync"
    assert r["assumptions"].startswith(whatif.ASSUMPTIONS["remove_data_wait"] + "; " + whatif.ASSUMPTIONS["remove_host_sync"])
    # a pair's windows limit its own edit: the data wait of step 0 only
    first = step_windows(g, [0])
    pair = whatif.predict_step_ns(v.graphs, [("remove_data_wait", first)])
    # steps of 1.121, 2.121, 2.121 and 2.111 ms: the median is 2.116 ms
    assert pair["step_ns"] == whatif.predict_step_ns(v.graphs, "remove_data_wait", windows=first)["step_ns"] == 2_116_000
    assert whatif.predict_step_ns(v.graphs, ["remove_data_wait"])["step_ns"] == 1_121_000
    # a list given windows: each name without its own windows takes them
    limited = whatif.predict_step_ns(v.graphs, ["remove_data_wait", "remove_host_sync"], windows=[(0, 1)])
    assert limited["step_ns"] == whatif.predict_step_ns(v.graphs, "none")["step_ns"]

    def halve_kernels(g, windows=None):
        """every GPU task takes half its time

        (more text that is not the summary)"""
        g.dur[g.ntype == GPU] //= 2

    r = whatif.predict_step_ns(v.graphs, halve_kernels)
    assert (r["transform"], r["assumptions"]) == ("halve_kernels", "every GPU task takes half its time")

    class Undocumented:
        def __call__(self, g, windows=None):
            pass

    r = whatif.predict_step_ns(v.graphs, Undocumented())
    assert r["transform"] == "custom" and r["step_ns"] == r["baseline_step_ns"]
    r = whatif.predict_step_ns(v.graphs, lambda g, windows=None: None)
    assert (r["transform"], r["assumptions"]) == ("<lambda>", "")
    with pytest.raises(ValueError, match=r"unknown what-if transform 'nope'; known: none, remove_data_wait, "):
        whatif.predict_step_ns(v.graphs, ["remove_data_wait", "nope"])


def test_windows_of_instances():
    assert whatif.windows_of(None) is None
    assert whatif.windows_of([]) is None
    assert whatif.windows_of(pd.DataFrame({"start_ns": [], "end_ns": []})) is None
    w = whatif.windows_of(pd.DataFrame({"start_ns": [1000.7, 5000.0], "end_ns": [2000.2, 6000.9]}))
    assert w == [(1000, 2000), (5000, 6000)] and all(type(x) in (int, np.int64) for p in w for x in p)
    w = whatif.windows_of([Instance(start_ns=10, end_ns=20), Instance(start_ns=30, end_ns=45, rank=0)])
    assert w == [(10, 20), (30, 45)]


def test_what_if_for_a_cause(loop, tmp_path):
    v, g = loop
    # a transform that acts on every task of its kind ignores the finding's instances
    inst = pd.DataFrame({"start_ns": [int(g.start[0])], "end_ns": [int(g.start[0]) + 1]})
    assert whatif.what_if_for(v.graphs, "remove_data_wait", inst) == whatif.predict_step_ns(v.graphs, "remove_data_wait")
    # a windowed one edits its instances only
    first = pd.DataFrame(step_windows(g, [0]), columns=["start_ns", "end_ns"])
    assert whatif.what_if_for(v.graphs, "remove_host_sync", first) == whatif.predict_step_ns(v.graphs, "remove_host_sync", windows=step_windows(g, [0]))
    # no GPU work to replay: no prediction
    tr = KinetoTrace()
    tr.cpu_op("aten::add", 0.0, 10.0)
    cpu = views_of(tr.write(tmp_path / "cpu.json"))
    assert whatif.predict_step_ns(cpu.graphs, "remove_data_wait")["step_ns"] is None
    assert whatif.what_if_for(cpu.graphs, "remove_data_wait") is None


def test_predicted_steps_of_the_loop(loop):
    """A step of the loop: 1 ms data wait, 200 µs host work, the 500 µs call, 20 µs gap, the 20 µs event record,
    40 µs to the first launch, ten launches 34 µs apart, a 16 µs sync, 5 + 10 µs to the next step: 2.121 ms."""
    v, g = loop
    measured = whatif.step_times(g, g.start, g.end)
    assert measured.tolist() == [2_121_000, 2_121_000, 2_121_000, 2_111_000]  # the last ends at its marker
    base = whatif.predict_step_ns(v.graphs, "none")
    assert (base["step_ns"], base["baseline_step_ns"], base["measured_step_ns"], base["steps_used"]) == (2_121_000,) * 3 + (4,)
    assert base["assumptions"] == "the unmodified graph replayed" and base["replay_error_pct"] == 0.0
    # the GPU is idle during the wait: all of it comes back
    assert whatif.predict_step_ns(v.graphs, "remove_data_wait")["step_ns"] == 1_121_000
    # graph model: the host goes from the 500 µs call straight to the launches (the event record and the gaps
    # go); the kernels then run 6 µs after, back to back (180 µs + 9 x 2 µs), and the sync ends 4 µs after them
    assert whatif.predict_step_ns(v.graphs, "launch_bound_to_graphs")["step_ns"] == 1_000_000 + 200_000 + 500_000 + 6_000 + 198_000 + 4_000 + 15_000
    # the 16 µs sync keeps its own 4 µs
    assert whatif.predict_step_ns(v.graphs, "remove_host_sync")["step_ns"] == 2_121_000 - 12_000
    # all of them: the host's 200 µs + 500 µs are left, the GPU's 204 µs run behind them
    assert whatif.predict_step_ns(v.graphs, "all")["step_ns"] == 200_000 + 500_000 + 4_000 + 15_000


@pytest.mark.parametrize("logging_step", [True, False])
def test_step_boundaries(tmp_path, logging_step):
    """A step ends when both the host and the GPU are done with it: a host that runs ahead (no sync) cannot make a
    step shorter than its GPU work."""
    tr = KinetoTrace(tid=77)
    t, gpu_free = 10.0, 0.0
    for n in range(3):
        s0 = t
        for k in range(5):  # 5 kernels of 200 µs launched 10 µs apart: the host is done long before the GPU
            ks = max(t + 6.0, gpu_free + 2.0)
            tr.kernel("gemm", ks, 200.0, launch_us=t, launch_dur_us=4.0)
            gpu_free = ks + 200.0
            t += 10.0
        tr.step(n, s0, t - s0)
        t += 50.0
    if logging_step:
        tr.step(3, t, 20.0)  # a last step that only logs: it launches nothing
    v = views_of(tr.write(tmp_path / "ahead.json"))
    (g,) = v.graphs
    steps = whatif.step_times(g, g.start, g.end)
    # each step is its GPU work: 5 x 200 µs and 2 µs of queue delay before each kernel (the first kernel of all
    # waits its 6 µs launch latency instead); the logging step ran while the GPU was still busy with the step
    # before, so it adds nothing (and never a negative time)
    # without it, the last step ends with its GPU work, long after its marker
    assert steps.tolist() == [1_014_000, 1_010_000, 1_010_000] + ([0] if logging_step else [])
    r = whatif.predict_step_ns(v.graphs, "none")
    assert r["replay_error_pct"] == 0.0


def test_a_window_without_markers_is_one_step(tmp_path):
    """No step markers: one step from the first launch to the end of the last GPU task."""
    v = views_of(conv_trace(tmp_path / "p.json", False))
    (g,) = v.graphs
    # 40 convolutions every 300 µs: the first launched at 40 µs, the last ends at 39 x 300 + 60 + 230 µs
    assert whatif.step_times(g, g.start, g.end).tolist() == [11_990_000 - 40_000]
    # a sync at the end returns after the last kernel: the step still ends with the GPU work
    (g,) = views_of(loop_trace(tmp_path / "l.json", markers=False)).graphs
    gpu = g.ntype == GPU
    assert g.end.max() > g.end[gpu].max()
    assert whatif.step_times(g, g.start, g.end).tolist() == [int(g.end[gpu].max() - g.start[g.launch[gpu]].min())]
    r = whatif.predict_step_ns(v.graphs, "none")
    assert (r["step_ns"], r["measured_step_ns"], r["steps_used"]) == (11_950_000, 11_950_000, 1)


def test_the_graph_model_removes_host_time_up_to_launch_gap(tmp_path):
    """``LAUNCH_GAP_NS`` (100 µs) is the line between per-op overhead a CUDA graph removes and real host work: a
    host call or a gap of exactly 100 µs goes, 1 µs more stays."""
    tr = KinetoTrace(tid=77)
    t = 10.0
    for n in range(3):
        s0 = t
        tr.runtime("cudaFuncGetAttributes", t, 100.0)
        t += 200.0  # a gap of exactly 100 µs
        tr.runtime("cudaPointerGetAttributes", t, 101.0)
        t += 202.0  # a gap of 101 µs
        tr.kernel("gemm", t + 6.0, 50.0, launch_us=t, launch_dur_us=4.0)
        t += 60.0
        tr.step(n, s0, t - s0)
        t += 10.0
    v = views_of(tr.write(tmp_path / "edge.json"))
    (g,) = v.graphs
    t = g.copy()
    whatif.launch_bound_to_graphs(t)
    host = (g.ntype == HOST) & ~g.is_launch
    assert sorted(g.dur[host].tolist()) == [100_000] * 3 + [101_000] * 3
    assert sorted(t.dur[host].tolist()) == [0] * 3 + [101_000] * 3
    after = (g.ntype == HOST) & (g.prev_lat >= 100_000)  # the pointer call after the first gap, the launch after the second
    assert sorted(g.prev_lat[after].tolist()) == [100_000] * 3 + [101_000] * 3
    assert sorted(t.prev_lat[after].tolist()) == [0] * 3 + [101_000] * 3


def test_a_copy_for_declared_writes_shares_the_rest_read_only(loop):
    _, g = loop
    t = g.copy(("dur",))
    assert not np.shares_memory(t.dur, g.dur)
    for name in ("prev_lat", "cross_lat", "launch_lat", "own", "wait_on"):
        assert np.shares_memory(getattr(t, name), getattr(g, name)) and not getattr(t, name).flags.writeable
    before = g.prev_lat.copy()
    with pytest.raises(ValueError):
        t.prev_lat[0] = 123  # an edit the transform did not declare fails, and the graph copied from keeps its values
    assert np.array_equal(g.prev_lat, before)
    full = g.copy()
    assert all(not np.shares_memory(getattr(full, n), getattr(g, n)) for n in ("dur", "prev_lat", "cross_lat", "launch_lat", "own", "wait_on"))


def test_predictions_with_declared_writes_equal_those_on_full_copies(loop):
    _, g = loop
    grow = whatif.predict.grow_batch(2.0, 50_000)
    faster = whatif.predict.faster_gpu_work(400_000)
    assert grow.writes == ("dur",) and faster.writes == ("dur",)
    for fn in (grow, faster):
        undeclared = lambda t, windows=None, fn=fn: fn(t, windows)  # noqa: E731 - no ``writes``: a full copy
        got, want = whatif.predict_step_ns([g], fn), whatif.predict_step_ns([g], undeclared)
        numbers = ("step_ns", "baseline_step_ns", "measured_step_ns", "steps_used", "replay_error_pct")
        assert {k: got[k] for k in numbers} == {k: want[k] for k in numbers}
        assert got["step_ns"] != got["baseline_step_ns"]  # the transform did change the replay
