"""TI002 host-sync-stalls: positive, negative and fix cases on planted traces and the real corpus."""

from __future__ import annotations

import pytest

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.rule_cases import GEMM, GRID, Example, analyze_example, busy_steps, codes_of, findings_of
from tests.conftest import corpus_file


#: positive: it fires; negative: it stays silent; fix: the same workload, fixed as its fix text says.
CASES = {
    "positive": ["test_ti002_item_sync_stalls", "test_ti002_pageable_copy_and_sync_memcpy", "test_example_bad_fires",
                 "test_nsys_training_is_told_from_backward_kernels"],
    "negative": ["test_ti002_negative_async_pipeline", "test_closing_inference_syncs_cost_nothing", "test_example_good_is_silent",
                 "test_nsys_without_training_kernels_stays_inference"],
    "fix": ["test_ti002_fix_keeps_the_work_and_removes_the_idle"],
}


def _sync_loop(tmp_path, training: bool):
    """Four 2 ms steps, each: a 500 µs kernel, a sync waiting for it, a second kernel 300 µs after the first ends,
    a sync closing the step (nothing launched after it). Training when an optimizer step runs on the host."""
    t = KinetoTrace()
    for s in range(4):
        t0 = s * 2000.0
        t.step(s, t0, 2000.0)
        t.kernel("volta_sgemm_128x64_nn", t0 + 10, 500.0, launch_us=t0)
        t.runtime("cudaStreamSynchronize", t0 + 20, 495.0)
        t.kernel("volta_sgemm_128x64_nn", t0 + 810, 500.0, launch_us=t0 + 800)
        t.runtime("cudaStreamSynchronize", t0 + 820, 495.0)
        if training:
            t.cpu_op("Optimizer.step#SGD.step", t0 + 1400, 50.0)
    a = traceinsight.analyze(t.write(tmp_path / "t.json"), select=["TI002"])
    (f,) = a.findings
    return f


def test_closing_inference_syncs_cost_nothing(tmp_path):
    f = _sync_loop(tmp_path, training=False)
    assert f.metrics["inference"] is True and f.metrics["stalls"] == 8 and f.metrics["closing_syncs"] == 4
    # only the mid-step syncs cost: the 300 µs gap each leaves before the next launch; the closing ones hand the
    # request's result back
    assert f.impact_ns == f.metrics["gpu_idle_ns"] == 4 * 300_000
    assert f.metrics["blocked_ns"] == 8 * 495_000
    assert "4 of them close an inference step" in f.message


def test_closing_syncs_cost_in_training(tmp_path):
    f = _sync_loop(tmp_path, training=True)
    assert f.metrics["inference"] is False and f.metrics["closing_syncs"] == 0
    # each closing sync is now charged its own duration of the 700 µs gap after it (the last one has no gap after)
    assert f.impact_ns == 4 * 300_000 + 3 * 495_000
    assert "close an inference step" not in f.message


WGRAD = "sm80_xmma_wgrad_implicit_gemm_indexed_f32f32_tf32f32_f32_nhwckrsc_nchw"  # cuDNN's weight-gradient kernel


def _nsys_sync_loop(tmp_path, second_kernel: str):
    """``_sync_loop`` as an Nsight capture (runtime calls and kernels, no framework ops): whether the rank trains can
    only be read from its kernels' names, here the second kernel's."""
    from tests.helpers.nsys_writer import NsysTrace

    t = NsysTrace()
    for s in range(4):
        t0 = s * 2_000_000
        t.step(s, t0, 2_000_000)
        t.kernel("volta_sgemm_128x64_nn", t0 + 10_000, 500_000, launch_ns=t0)
        t.sync(t0 + 20_000, 495_000)
        t.kernel(second_kernel, t0 + 810_000, 500_000, launch_ns=t0 + 800_000)
        t.sync(t0 + 820_000, 495_000)
    path = t.write(tmp_path / "nsys.sqlite")
    (f,) = traceinsight.analyze(path, select=["TI002"]).findings
    return path, f


def test_nsys_training_is_told_from_backward_kernels(tmp_path):
    """A weight-gradient kernel in every step: training, so the closing syncs cost what the kineto trace with an
    optimizer op costs (``test_closing_syncs_cost_in_training``)."""
    from traceinsight.derive.derived import Derived
    from traceinsight.rulelib.gaps import inference_ranks

    path, f = _nsys_sync_loop(tmp_path, WGRAD)
    assert inference_ranks(Derived(traceinsight.load(path))) == frozenset()
    assert f.metrics["inference"] is False and f.metrics["closing_syncs"] == 0
    assert f.impact_ns == 4 * 300_000 + 3 * 495_000


def test_nsys_without_training_kernels_stays_inference(tmp_path):
    from traceinsight.derive.derived import Derived
    from traceinsight.rulelib.gaps import inference_ranks

    path, f = _nsys_sync_loop(tmp_path, "volta_sgemm_128x64_nn")
    assert inference_ranks(Derived(traceinsight.load(path))) == frozenset({0})
    assert f.metrics["inference"] is True and f.metrics["closing_syncs"] == 4
    assert f.impact_ns == 4 * 300_000


def test_framework_ops_decide_before_kernel_names(tmp_path):
    """A rank that records framework ops is judged by them: no backward op or optimizer step, so inference,
    whatever its kernels are called."""
    t = KinetoTrace()
    for s in range(4):
        t0 = s * 2000.0
        t.step(s, t0, 2000.0)
        t.cpu_op("aten::conv2d", t0 + 1, 8.0)
        t.kernel(WGRAD, t0 + 10, 500.0, launch_us=t0 + 2)
        t.runtime("cudaStreamSynchronize", t0 + 20, 495.0)
        t.kernel("volta_sgemm_128x64_nn", t0 + 810, 500.0, launch_us=t0 + 800)
        t.runtime("cudaStreamSynchronize", t0 + 820, 495.0)
    (f,) = traceinsight.analyze(t.write(tmp_path / "ops.json"), select=["TI002"]).findings
    assert f.metrics["inference"] is True and f.metrics["closing_syncs"] == 4


def _item_step(t: KinetoTrace, t0: float, wait_us: float):
    """loss.item(): aten::item -> _local_scalar_dense -> DtoH copy + cudaStreamSynchronize waiting for a long kernel."""
    t.kernel("volta_sgemm_128x64_nn", t0 + 10, wait_us, launch_us=t0)
    item = t.cpu_op("aten::item", t0 + 20, wait_us + 40)
    t.cpu_op("aten::_local_scalar_dense", t0 + 22, wait_us + 36)
    t.memcpy("DtoH", t0 + 10 + wait_us, 2.0, 4, launch_us=t0 + 25, launch_dur_us=5.0, pageable=False)
    t.runtime("cudaStreamSynchronize", t0 + 32, wait_us - 18)
    # after the sync the host needs 300 µs of Python before the next launch: GPU idle
    t.kernel("volta_sgemm_128x64_nn", t0 + wait_us + 360, 100.0, launch_us=t0 + wait_us + 350)
    return item


def test_ti002_item_sync_stalls(tmp_path):
    t = KinetoTrace()
    for s in range(3):
        t.step(s, s * 2000.0, 2000.0)
        _item_step(t, s * 2000.0, 1000.0)
    t.runtime("cudaDeviceSynchronize", 6500.0, 30.0)  # shorter than min_stall_us: ignored
    (f,) = findings_of(t.write(tmp_path / "t.json"), "TI002")
    assert f.metrics["stalls"] == 3
    assert f.metrics["blocked_ns"] == pytest.approx(3 * 982_000, rel=0.001)
    assert f.evidence["framework_op"].iloc[0] == "aten::_local_scalar_dense"  # innermost op of loss.item()
    assert f.evidence["call"].iloc[0] == "cudaStreamSynchronize"
    # GPU idle from the copy's end (t0+1012) to the next kernel (t0+1360): 348 µs per step
    assert f.impact_ns == pytest.approx(3 * 348_000, rel=0.01)
    assert f.severity.value == "warning"


def test_ti002_pageable_copy_and_sync_memcpy(tmp_path):
    t = KinetoTrace()
    t.step(0, 0.0, 5000.0)
    t.kernel("k", 10.0, 500.0, launch_us=0.0)
    t.cpu_op("aten::to", 20.0, 800.0)
    t.memcpy("DtoH", 510.0, 200.0, 1 << 20, pageable=True, launch_us=30.0, launch_dur_us=690.0)
    t.memcpy("DtoH", 1500.0, 300.0, 1 << 20, sync=True, launch_us=1400.0)
    t.kernel("k", 3000.0, 500.0, launch_us=2990.0)
    path = t.write(tmp_path / "t.json")
    (f,) = findings_of(path, "TI002")
    # the blocking cudaMemcpy is TI002's; the async copy that pageable memory made blocking is TI006's, judged on
    # the GPU's clock (its extra copy time and the idle its call caused), so no nanosecond is claimed twice
    kinds = dict(zip(f.evidence["call"], f.evidence["kind"]))
    assert kinds == {"cudaMemcpy": "synchronizing call"}
    assert f.metrics["blocked_ns"] == pytest.approx(401_000, rel=0.001)
    # GPU idle 1800 -> 3000 µs begins while the cudaMemcpy (1400 -> 1801 µs) blocks: charged up to the call's 401 µs
    assert f.impact_ns == pytest.approx(401_000, rel=0.01)
    (p,) = findings_of(path, "TI006", min_total_us=0.0)
    assert p.metrics["async_calls"] == 1 and p.metrics["count"] == 1


def test_ti002_negative_async_pipeline(tmp_path):
    t = KinetoTrace()
    busy_steps(t, 4, 1000.0, 990.0)
    t.runtime("cudaStreamSynchronize", 3995.0, 10.0)  # a sync on an idle stream: a few µs, no stall
    assert findings_of(t.write(tmp_path / "t.json"), "TI002") == []


def test_ti002_real_alexnet_cudasync():
    # asked for below the floor: on this 0.5 %-busy run the syncs cost the GPU under 1 % of its window
    (f,) = findings_of(corpus_file("pytorch/hta_alexnet_a100_cudasync.json.gz"), "TI002", min_impact=0)
    assert f.metrics["stalls"] >= 7
    assert set(f.metrics["by_call"]) == {"cudaStreamSynchronize", "cudaDeviceSynchronize"}
    assert f.metrics["by_site"].get("aten::copy_", 0) > 0
    assert f.metrics["gpu_sync_rows"] > 0


def _ti002(t: KinetoTrace, fixed: bool) -> None:
    # Each step: one 1 ms GEMM, then logging the loss. Bad: ``loss.item()`` each step: the host blocks in
    # cudaStreamSynchronize until the GEMM ends, then spends 300 µs in Python before launching the next step, so
    # the GPU idles 300 µs per step. Fixed: the loss is accumulated on the GPU (a 3 µs add kernel) and read once,
    # after the last step; the host runs ahead and the GEMMs are back to back.
    for s in range(4):
        if fixed:
            start = 10 + s * 1_010.0
            t.step(s, s * 1_010.0, 1_010.0)
            t.kernel(GEMM, start, 1_000.0, launch_us=s * 20.0, grid=GRID)
            t.kernel("vectorized_elementwise_kernel<AddFunctor>", start + 1_000, 3.0, launch_us=s * 20.0 + 6, grid=GRID)
        else:
            t0 = s * 1_400.0
            t.step(s, t0, 1_400.0)
            t.kernel(GEMM, t0 + 10, 1_000.0, launch_us=t0, grid=GRID)
            t.cpu_op("aten::item", t0 + 20, 1_000.0)
            t.cpu_op("aten::_local_scalar_dense", t0 + 22, 996.0)
            t.memcpy("DtoH", t0 + 1_010, 2.0, 4, launch_us=t0 + 25, launch_dur_us=5.0)
            t.runtime("cudaStreamSynchronize", t0 + 32, 982.0)
        # a training step: its backward pass runs on the host too (a step without one would be an inference
        # request, whose closing sync is its result and not a stall)
        t.cpu_op("autograd::engine::evaluate_function: MmBackward0", (s * 1_010.0 if fixed else s * 1_400.0) + 2, 4.0)
    if fixed:  # read the accumulated loss once: the GPU has no more work queued, nothing runs dry
        end = 10 + 4 * 1_010.0
        t.memcpy("DtoH", end + 3, 2.0, 4, launch_us=90.0, launch_dur_us=5.0)
        t.runtime("cudaStreamSynchronize", end + 5 - 10, 12.0)


def test_ti002_fix_keeps_the_work_and_removes_the_idle(tmp_path):
    bad = analyze_example(tmp_path, EXAMPLE, fixed=False)
    good = analyze_example(tmp_path, EXAMPLE, fixed=True)
    (f,) = [f for f in bad.findings if f.code == "TI002"]
    assert f.metrics["stalls"] == 4 and f.evidence["call"].iloc[0] == "cudaStreamSynchronize"
    # GPU idle per step: copy ends t0+1012, next GEMM starts t0+1410 -> 398 µs x 3 steps followed by work
    assert f.impact_ns == pytest.approx(3 * 398_000, rel=0.01)
    def gemm_ns(a):
        return int(a.timeline.events.query("kind == 'kernel' and name == @GEMM")["dur_ns"].sum())

    assert gemm_ns(bad) == gemm_ns(good) == 4_000_000
    assert "TI001" in codes_of(bad) and "TI001" not in codes_of(good)


EXAMPLE = Example(
    "TI002",
    bad="loss.item() every step blocks the host until the GPU finishes, then the GPU waits for Python.",
    good="The loss is summed on the GPU and read once after the loop; the host stays ahead.",
    build=_ti002,
)


def test_example_bad_fires(tmp_path):
    a = analyze_example(tmp_path, EXAMPLE, fixed=False)
    (f,) = [f for f in a.findings if f.code == EXAMPLE.code]
    assert f.impact_ns > 0


def test_example_good_is_silent(tmp_path):
    a = analyze_example(tmp_path, EXAMPLE, fixed=True)
    assert EXAMPLE.code not in codes_of(a), [(f.code, f.title) for f in a.findings]


def _opening_block(tmp_path, steady_syncs: bool):
    """A 5 ms stream sync at the window's head while the GPU runs nothing traced (it waits on work queued before
    the profile started), then four 2 ms steps; with ``steady_syncs`` each step also blocks 495 µs on its kernel."""
    t = KinetoTrace()
    t.kernel("volta_sgemm_128x64_nn", 0, 10.0, launch_us=-5)
    t.runtime("cudaStreamSynchronize", 20, 5000.0)
    for s in range(4):
        t0 = 6000.0 + s * 2000.0
        t.step(s, t0, 2000.0)
        t.kernel("volta_sgemm_128x64_nn", t0 + 10, 500.0, launch_us=t0)
        if steady_syncs:
            t.runtime("cudaStreamSynchronize", t0 + 20, 495.0)
        t.kernel("volta_sgemm_128x64_nn", t0 + 810, 500.0, launch_us=t0 + 800)
    return traceinsight.analyze(t.write(tmp_path / f"open{int(steady_syncs)}.json"), min_impact=0)


def test_a_block_set_aside_as_warmup_is_said_not_counted(tmp_path):
    """The 5 ms opening block is warm-up (the ledger sets it aside, TI013 reports it): TI002 counts the four 495 µs
    stalls of the steady state (1.98 ms) and says the 5 ms was set aside; with no steady stall it stays silent."""
    a = _opening_block(tmp_path, steady_syncs=True)
    (f,) = [f for f in a.findings if f.code == "TI002"]
    assert f.metrics["stalls"] == 4 and f.metrics["blocked_ns"] == 4 * 495_000
    assert f.metrics["warmup_stalls"] == 1 and f.metrics["warmup_blocked_ns"] == 5_000_000
    assert f.title.startswith("host blocked on the GPU 4 times for 1.98 ms") and f.title.endswith("(+5.00 ms of warm-up, set aside)")
    quiet = _opening_block(tmp_path, steady_syncs=False)
    assert [f.code for f in quiet.findings if f.code == "TI002"] == []
