"""What-if replay (traceinsight.derive.whatif): exact replay of measured steps, planted before/after pairs, real nw0 -> nw4.

The planted pairs are written by a tiny program simulator below: it runs one training-loop program with the
physical rules of a GPU stream (FIFO, a task starts after its launch and after the task before it) and writes the
resulting kineto trace. The "after" trace is the same program with the cause removed, so its step time is the
truth the prediction on the "before" trace must hit.
"""

from __future__ import annotations


import numpy as np
import pytest

import traceinsight
from tests.conftest import corpus_file
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.derive import whatif
from traceinsight.derive.views import Views
from traceinsight.derive.derived import Derived

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
LAUNCH_LAT = 6.0  # µs from the start of a launch call to the earliest start of its GPU task
QUEUE_GAP = 2.0  # µs between two queued GPU tasks


def plant(path, *, steps=6, data_us=0.0, sync_at=None, work_after_sync_us=0.0, kernels=40, kernel_us=400.0,
          launch_gap_us=30.0, tail_us=2000.0, warmup_us=0.0, backward=0):
    """Write a trace of a training loop: [data wait] -> blocking pageable H2D copy -> kernels [-> sync -> host work]
    [-> ``backward`` kernels launched by a second thread while the main thread waits, as PyTorch's autograd does]."""
    tr = KinetoTrace(tid=77)
    t, gpu_free = 10.0, 0.0

    def gpu_start(launch_at: float) -> float:
        return max(launch_at + LAUNCH_LAT, gpu_free + QUEUE_GAP)

    for n in range(steps):
        s0 = t
        if data_us:
            tr.annotation(LOADER, t, data_us)
            t += data_us + 15.0
        cs = gpu_start(t)
        tr.memcpy("HtoD", cs, 300.0, nbytes=12_000_000, pageable=True, launch_us=t, launch_dur_us=cs + 300.0 + 3.0 - t)
        gpu_free, t = cs + 300.0, cs + 303.0
        for k in range(kernels):
            if n == 0 and k == 1 and warmup_us:
                # lazy init / autotune on the host, GPU idle, after the first kernel (a gap before the first kernel
                # is set-up the steady-state model recognises itself)
                tr.cpu_op("aten::conv2d", t, warmup_us)
                t += warmup_us
            t += launch_gap_us
            ks = gpu_start(t)
            tr.kernel(f"volta_sgemm_128x64_nn_{k % 3}", ks, kernel_us, launch_us=t, launch_dur_us=4.0)
            gpu_free = ks + kernel_us
            t += 4.0
            if sync_at is not None and k == sync_at:
                end = max(t + 3.0, gpu_free + 4.0)
                tr.runtime("cudaStreamSynchronize", t, end - t)
                t = end + work_after_sync_us
        if backward:
            t += 50.0  # main thread hands off to the autograd thread and blocks (untraced)
            for k in range(backward):
                t += launch_gap_us
                ks = gpu_start(t)
                tr.kernel(f"volta_sgemm_128x64_nt_{k % 3}", ks, kernel_us, launch_us=t, launch_dur_us=4.0, tid=78)
                gpu_free = ks + kernel_us
                t += 4.0
            t += 60.0  # the main thread wakes up
        t += tail_us
        tr.step(n, s0, t - s0)
        t += 10.0
    tr.write(path)
    return path


def views_of(path) -> Views:
    return Derived(traceinsight.load(path))


def measured_median(v: Views) -> float:
    return float(np.median(v.steps["dur_ns"].to_numpy()))


def sync_windows(v: Views) -> list[tuple[int, int]]:
    """The planted cudaStreamSynchronize calls, as a finding's instances would give them."""
    ev = v.events
    s = ev[ev["name"].astype(str) == "cudaStreamSynchronize"]
    return list(zip(s["start_ns"], s["start_ns"] + s["dur_ns"] + 1))


def within(pred: float, truth: float, pct: float) -> bool:
    return abs(pred - truth) <= pct / 100.0 * truth


# --- the replay reproduces what was measured ---------------------------------------------------------------
def test_unmodified_replay_is_exact_on_planted(tmp_path):
    v = views_of(plant(tmp_path / "a.json", data_us=30_000.0, sync_at=20, work_after_sync_us=3_000.0))
    r = whatif.predict_step_ns(v.graphs, "none")
    assert r["steps_used"] == 6
    assert r["step_ns"] == r["baseline_step_ns"] == r["measured_step_ns"]
    assert r["replay_error_pct"] == 0.0
    assert within(r["measured_step_ns"], measured_median(v), 1.0)
    # the same steps timed by their markers (the report's step line): the median of the markers' durations
    st = v.steps
    assert r["marker_step_ns"] == int(round(float(np.median((st["end_ns"] - st["start_ns"]).to_numpy()))))


# --- planted pairs ---------------------------------------------------------------------------------------------
def test_data_wait_pair(tmp_path):
    """The GPU (16 ms a step) overlaps the 30 ms data wait; without it the step is GPU-bound, not 34 - 30 ms."""
    before = views_of(plant(tmp_path / "before.json", data_us=30_000.0))
    after = views_of(plant(tmp_path / "after.json"))
    truth = measured_median(after)
    r = whatif.predict_step_ns(before.graphs, "remove_data_wait")
    naive = measured_median(before) - 30_000_000
    assert not within(naive, truth, 25.0)  # subtraction alone would be far off: the replay is needed
    assert within(r["step_ns"], truth, 5.0), (r, truth)
    assert r["baseline_step_ns"] > 1.8 * r["step_ns"]


def test_data_wait_pair_with_autograd_thread(tmp_path):
    """The backward pass runs on a second host thread: the hand-off edge must carry the saving across threads."""
    before = views_of(plant(tmp_path / "before.json", data_us=30_000.0, kernels=20, backward=20))
    after = views_of(plant(tmp_path / "after.json", kernels=20, backward=20))
    truth = measured_median(after)
    r = whatif.predict_step_ns(before.graphs, "remove_data_wait")
    assert within(r["step_ns"], truth, 5.0), (r, truth)
    g = before.graphs[0]
    assert ((g.ntype != whatif.GPU) & (g.cross >= 0)).sum() >= 2 * 6  # a hand-off each way per step


def test_data_wait_negative(tmp_path):
    """No data wait in the trace: removing it changes nothing."""
    v = views_of(plant(tmp_path / "a.json"))
    r = whatif.predict_step_ns(v.graphs, "remove_data_wait")
    assert r["step_ns"] == r["baseline_step_ns"]


def test_host_sync_pair(tmp_path):
    """A mid-step sync drains the queue, then 3 ms of host work leave the GPU idle; without the sync they overlap."""
    before = views_of(plant(tmp_path / "before.json", sync_at=20, work_after_sync_us=3_000.0, tail_us=200.0))
    after = views_of(plant(tmp_path / "after.json", sync_at=None, work_after_sync_us=0.0, tail_us=3_200.0))
    truth = measured_median(after)
    r = whatif.predict_step_ns(before.graphs, "remove_host_sync", windows=sync_windows(before))
    assert measured_median(before) > 1.1 * truth  # the stall is real
    assert within(r["step_ns"], truth, 5.0), (r, truth)


def test_host_sync_negative_gpu_already_idle(tmp_path):
    """A sync that waits for nothing (the GPU was already done) saves nothing when removed."""
    v = views_of(plant(tmp_path / "a.json", sync_at=39, kernel_us=5.0, launch_gap_us=30.0))
    r = whatif.predict_step_ns(v.graphs, "remove_host_sync", windows=sync_windows(v))
    assert within(r["step_ns"], r["baseline_step_ns"], 1.0)


def test_launch_bound_pair(tmp_path):
    """Tiny kernels launched 30 µs apart: the graph model approaches the same kernels launched back to back."""
    before = views_of(plant(tmp_path / "before.json", kernels=200, kernel_us=5.0, launch_gap_us=30.0, tail_us=100.0))
    after = views_of(plant(tmp_path / "after.json", kernels=200, kernel_us=5.0, launch_gap_us=0.0, tail_us=100.0))
    truth = measured_median(after)
    r = whatif.predict_step_ns(before.graphs, "launch_bound_to_graphs")
    assert measured_median(before) > 2 * truth
    assert within(r["step_ns"], truth, 5.0), (r, truth)


def test_warmup_steps_left_out(tmp_path):
    v = views_of(plant(tmp_path / "a.json", warmup_us=200_000.0, steps=5))
    assert whatif.warmup_mask(np.array([9e6, 1e6, 1.1e6, 1e6])).tolist() == [True, False, False, False]
    assert whatif.warmup_mask(np.array([9e6, 5e6, 1e6, 1.1e6, 1e6])).tolist() == [True, True, False, False, False]
    r = whatif.predict_step_ns(v.graphs, "remove_warmup")
    assert r["steps_used"] == 4
    assert r["step_ns"] <= r["baseline_step_ns"]
    # every what-if is priced on the steady state: the warm-up step is in no baseline, so removing it saves nothing
    none = whatif.predict_step_ns(v.graphs, "none")
    assert none["steps_used"] == 4 and none["step_ns"] == r["step_ns"] == none["baseline_step_ns"]
    assert "steady state" in none["assumptions"]


def test_all_is_never_worse_than_each(tmp_path):
    v = views_of(plant(tmp_path / "a.json", data_us=30_000.0, sync_at=20, work_after_sync_us=3_000.0))
    al = whatif.predict_step_ns(v.graphs, "all")["step_ns"]
    for name in ("remove_data_wait", "remove_host_sync", "launch_bound_to_graphs"):
        assert al <= whatif.predict_step_ns(v.graphs, name)["step_ns"] * 1.001
    # the GPU's own work per step (40 x 400 µs + the copy) bounds every prediction from below
    assert al >= 16_000_000
    # the causes found, combined (what kpis.what_if_all_step_ns uses)
    both = whatif.predict_step_ns(v.graphs, [("remove_host_sync", sync_windows(v)), "remove_data_wait"])
    assert both["transform"] == "remove_host_sync+remove_data_wait"
    assert both["step_ns"] <= whatif.predict_step_ns(v.graphs, "remove_data_wait")["step_ns"]
    assert both["step_ns"] < whatif.predict_step_ns(v.graphs, "remove_host_sync", windows=sync_windows(v))["step_ns"]
    with pytest.raises(ValueError, match="unknown what-if transform"):
        whatif.predict_step_ns(v.graphs, "faster_gpu")


def test_no_gpu_work(tmp_path):
    tr = KinetoTrace()
    tr.cpu_op("aten::add", 0.0, 10.0)
    v = views_of(tr.write(tmp_path / "cpu.json"))
    r = whatif.predict_step_ns(v.graphs, "all")
    assert r["step_ns"] is None and r["steps_used"] == 0


# --- the real before/after pair --------------------------------------------------------------------------------
def test_real_resnet50_nw0_to_nw4():
    """DataLoader num_workers=0 with the data wait removed predicts num_workers=4's measured median step (±10 %)."""
    nw0 = views_of(corpus_file("pytorch/kineto_resnet50_nw0_v100.pt.trace.json.gz"))
    nw4 = views_of(corpus_file("pytorch/kineto_resnet50_nw4_v100.pt.trace.json.gz"))
    truth = measured_median(nw4)  # 126.5 ms
    r = whatif.predict_step_ns(nw0.graphs, "remove_data_wait")
    assert r["replay_error_pct"] == 0.0
    assert within(r["step_ns"], truth, 10.0), (r["step_ns"], truth)
    # and not by plain subtraction of the data wait (about 106 ms, -16 %)
    assert r["step_ns"] > measured_median(nw0) - 71_000_000 + 5_000_000


@pytest.mark.parametrize(
    "rel",
    [
        "pytorch/hta_ddp_v100_rank1of2.json.gz",
        "pytorch/tracelens_h100_owlv2_inference.json.gz",
        "pytorch/hta_a100_rank0of16_5streams.json.gz",
        "pytorch/hta_nccl_data_a100_rank0of2.json.gz",
        "pytorch/param_linear_rtx2080ti.json.gz",
        "nsys/nsys2026.2_fastvideo-train_2xH100_300ms-slice.sqlite",
    ],
)
def test_real_replay_exact(rel):
    """The unmodified graph replays every corpus step exactly (no edge contradicts the trace); its speed is
    checked by bench/bench_timing_guards.py, not here."""
    v = views_of(corpus_file(rel))
    r = whatif.predict_step_ns(v.graphs, "all")
    assert r["replay_error_pct"] == 0.0
    assert r["step_ns"] <= r["baseline_step_ns"]


def test_rnn_region_to_cudnn(tmp_path):
    """A per-timestep loop (a GEMM and four elementwise kernels per step, launch-bound) inside a region: the
    cuDNN-equivalent keeps the GEMM time only; outside the region nothing changes."""
    tr = KinetoTrace(tid=77)
    t, gpu_free = 10.0, 0.0
    for n in range(4):
        s0 = t
        for k in range(50 * 5):
            t += 25.0
            ks = max(t + LAUNCH_LAT, gpu_free + QUEUE_GAP)
            gemm = k % 5 == 0
            tr.kernel("volta_sgemm_32x32_nn" if gemm else "at::native::vectorized_elementwise_kernel", ks, 8.0 if gemm else 3.0, launch_us=t, launch_dur_us=4.0)
            gpu_free = ks + (8.0 if gemm else 3.0)
            t += 4.0
        end = max(t + 3.0, gpu_free + 4.0)
        tr.runtime("cudaDeviceSynchronize", t, end - t)
        t = end + 500.0  # host work outside the RNN (loss, logging)
        tr.step(n, s0, t - s0)
        t += 10.0
    v = views_of(tr.write(tmp_path / "rnn.json"))
    ev = v.events
    syncs = ev[ev["name"].astype(str) == "cudaDeviceSynchronize"]["start_ns"].to_numpy()
    windows = list(zip(v.steps["start_ns"].to_numpy(), syncs))  # the RNN region: step start to its sync (TI004's instances)
    r = whatif.predict_step_ns(v.graphs, "rnn_to_cudnn", windows=windows)
    gemm_ns = 50 * 8_000
    # the region shrinks to about its GEMM time (+ queue delays); the 500 µs of host work after it stays
    assert r["baseline_step_ns"] > 7_000_000
    assert 500_000 + gemm_ns <= r["step_ns"] <= 500_000 + gemm_ns + 50 * 5 * (QUEUE_GAP * 1000) + 200_000, r


def test_format_what_if():
    assert whatif.format_what_if({"step_ns": 139_000_000, "baseline_step_ns": 174_800_000}) == "step 174.8 → 139.0 ms (−20 %)"
    assert whatif.format_what_if({"step_ns": 900_000, "baseline_step_ns": 1_200_000}) == "step 1.20 → 0.90 ms (−25 %)"
    assert whatif.format_what_if({"step_ns": None, "baseline_step_ns": 5}) == ""
    assert whatif.format_what_if(None) == ""
    # the replay's step runs until its GPU work ends; where the markers' median (the report's step line) differs
    # at the shown precision, the line says so, and not where it does not
    w = {"step_ns": 119_000_000, "baseline_step_ns": 158_800_000, "marker_step_ns": 154_980_000}
    assert whatif.format_what_if(w) == "step 158.8 → 119.0 ms (−25 %) (steps timed until their GPU work ends; their markers' median: 155.0 ms)"
    assert whatif.format_what_if({**w, "marker_step_ns": 158_790_000}) == "step 158.8 → 119.0 ms (−25 %)"
    # a speed-up whose replayed step comes out longer gives nothing back: never shown as a step that gets slower
    assert whatif.format_what_if({"step_ns": 118_900_000, "baseline_step_ns": 116_900_000}) == "step 116.9 ms: no shorter (the replay gives nothing back)"


def _assert_topological(g: whatif.Graph) -> None:
    """Every predecessor a replayed task reads is itself replayed earlier (or lies outside the replayed window)."""
    n = len(g.start)
    pos_start = np.full(n, -1)
    pos_end = np.full(n, -1)  # where a node's end becomes known
    w = g.window
    starts = w >= 0
    pos_start[w[starts]] = np.flatnonzero(starts)
    pos_end[w[starts]] = np.flatnonzero(starts)
    blocking = g.ntype == whatif.BLOCKING
    pos_end[blocking] = -1
    ends = ~starts
    pos_end[-1 - w[ends]] = np.flatnonzero(ends)
    ids = w[starts]
    here = pos_start[ids]
    for pred, ref in ((g.prev, pos_end), (g.cross, pos_end), (g.launch, pos_start)):
        p = pred[ids]
        has = p >= 0
        seen = ref[p[has]]
        bad = (seen >= 0) & (seen >= here[has])
        assert not bad.any(), f"{int(bad.sum())} tasks read a predecessor replayed after them"
    for b in -1 - w[ends]:
        for t in g.waits[b]:
            assert pos_end[t] < pos_end[b] or pos_end[t] == -1


def test_replay_order_is_topological(tmp_path):
    v = views_of(plant(tmp_path / "a.json", data_us=5_000.0, sync_at=20, work_after_sync_us=1_000.0))
    for g in v.graphs:
        _assert_topological(g)


@pytest.mark.parametrize(
    "rel",
    ["pytorch/kineto_resnet50_nw0_v100.pt.trace.json.gz", "pytorch/hta_nccl_data_a100_rank0of2.json.gz",
     "pytorch/tracelens_h100_owlv2_inference.json.gz", "nsys/nsys2026.2_fastvideo-train_2xH100_300ms-slice.sqlite"],
)
def test_real_replay_order_is_topological(rel):
    for g in views_of(corpus_file(rel)).graphs:
        _assert_topological(g)


def test_long_runs_replay_the_middle_steps(tmp_path, monkeypatch):
    """The replay loop is bounded: only the middle MAX_STEPS steps of a rank are replayed."""
    monkeypatch.setattr(whatif, "MAX_STEPS", 4)
    v = views_of(plant(tmp_path / "a.json", steps=9, kernels=5))
    g = whatif.build_graph(v.views, 0, max_steps=whatif.MAX_STEPS, warmup=v.ledger.warmup)
    assert g.steps["step"].tolist() == [2, 3, 4, 5]
    assert len(g.window) < len(g.start) / 2


def test_what_if_for_findings(tmp_path):
    """The per-rule entry point: each rule declares the transform that models its fix (``Rule.what_if``); causes get
    a prediction, symptoms, rules without a model and instance-less windowed causes none."""
    from traceinsight.pipeline.plugins import discover

    rules = discover([]).rules
    assert {c: rules[c].what_if for c in ("TI001", "TI002", "TI003", "TI004", "TI005", "TI007")} == {
        "TI001": None, "TI002": "remove_host_sync", "TI003": "launch_bound_to_graphs", "TI004": "rnn_to_cudnn",
        "TI005": "remove_data_wait", "TI007": None,
    }
    v = views_of(plant(tmp_path / "a.json", data_us=30_000.0, sync_at=20, work_after_sync_us=3_000.0))
    d = whatif.what_if_for(v.graphs, rules["TI005"].what_if)
    assert d["transform"] == "remove_data_wait" and d["step_ns"] < d["baseline_step_ns"]
    assert whatif.what_if_for(v.graphs, rules["TI001"].what_if) is None
    assert whatif.what_if_for(v.graphs, rules["TI002"].what_if) is None  # no instances: nothing to edit
    ev = v.events
    s = ev[ev["name"].astype(str) == "cudaStreamSynchronize"]
    inst = s.assign(end_ns=s["start_ns"] + s["dur_ns"] + 1)[["start_ns", "end_ns"]]
    d2 = whatif.what_if_for(v.graphs, rules["TI002"].what_if, inst)
    assert d2["step_ns"] == whatif.predict_step_ns(v.graphs, "remove_host_sync", windows=sync_windows(v))["step_ns"]
    assert d2["step_ns"] < d2["baseline_step_ns"]
    with pytest.raises(ValueError, match="unknown what-if transform"):
        whatif.what_if_for(v.graphs, "TI005")  # a rule code is not a transform


def test_warmup_window_cut(tmp_path):
    """Without step markers, a warm-up range (lazy init / autotune inside the first op) is cut out of the window:
    the prediction is the same run without it."""
    before = plant(tmp_path / "before.json", warmup_us=50_000.0, steps=3)
    after = plant(tmp_path / "after.json", steps=3)
    vb, va = views_of(before), views_of(after)
    # drop the step markers' meaning: compare whole windows (first launch to last GPU task)
    for v in (vb, va):
        v.views.events = v.events[v.events["kind"].astype(str) != "step"]
    ev = vb.events
    conv = ev[ev["name"].astype(str) == "aten::conv2d"]
    windows = list(zip(conv["start_ns"], conv["start_ns"] + conv["dur_ns"]))
    r = whatif.predict_step_ns(vb.graphs, "remove_warmup", windows=windows)
    truth = whatif.predict_step_ns(va.graphs, "none")["step_ns"]
    assert r["steps_used"] == 1 and r["baseline_step_ns"] > truth + 40_000_000
    assert within(r["step_ns"], truth, 1.0), (r, truth)


@pytest.mark.parametrize(
    ("baseline", "step", "text"),
    [
        (20e9, 10e9, "step 20.0 → 10.0 s (−50 %)"),
        (1e10, 1e10, "step 10.0 → 10.0 s (+0 %)"),  # 10 s and up: seconds
        (9.999e9, 9e9, "step 9999.0 → 9000.0 ms (−10 %)"),
        (1e6, 1.5e6, "step 1.00 ms: no shorter (the replay gives nothing back)"),  # 1 ms and up: ms; a longer step: no gain
        (999_999, 500_000, "step 1000.0 → 500.0 µs (−50 %)"),
        (10e6, 9.99e6, "step 10.0 → 9.99 ms (−0 %)"),
    ],
)
def test_format_what_if_units_and_sign(baseline, step, text):
    from traceinsight.vocab.units import format_what_if

    assert format_what_if({"baseline_step_ns": baseline, "step_ns": step}) == text
    assert format_what_if({"baseline_step_ns": baseline, "step_ns": None}) == ""
    assert format_what_if({"baseline_step_ns": 0, "step_ns": step}) == "" and format_what_if(None) == ""
