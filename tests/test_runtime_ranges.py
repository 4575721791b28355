"""A runtime's own ranges are neither steps nor a diff's samples, and a diff's "same workload" counts what a step runs.

Found on public traces: a JAX micro-benchmark (PJRT on MI300X) got "3 steps from BufferSequencingEvent::Execute", the
first 99.7 % compilation and the last holding no GPU work; two Keras CNNs (TF on a T4) were diffed by the runs of
``ExecutorState::Process`` (the TF executor, per batch of graph nodes) and read "100 % of the framework ops per step
in common" from two ``GatherV2`` and a ``LogicalAnd`` while their steps ran 105 and 162 elementwise kernels.
"""

from __future__ import annotations

import traceinsight
from traceinsight.delta import diff
from traceinsight.derive import workload
from traceinsight.derive.views import Views

from .helpers.kineto_writer import KinetoTrace
from .helpers.xplane_writer import XSpaceTrace

US = 1_000


def _jax_calls(path, *, user_range: str | None = None):
    """Four jitted calls of 1 ms: PJRT's ``BufferSequencingEvent::Execute`` spans each on its own thread (99 % of the
    GPU window), four kernels run inside it; with ``user_range``, a TraceMe of that name on the Python thread spans
    the first 600 µs of each call (61 % of the GPU window)."""
    t = XSpaceTrace()
    b = 100 * US
    for _ in range(4):
        t.host_range("BufferSequencingEvent::Execute", b, 990 * US, thread="pjrt_gpu_stream")
        if user_range:
            t.host_range(user_range, b + 5 * US, 600 * US, thread="python3")
        for k in range(4):
            t.kernel("loop_add_fusion", b + 20 * US + k * 240 * US, 200 * US)
        b += 1_000 * US
    return t.write(path)


def test_a_runtime_range_is_never_the_step(tmp_path):
    tl = traceinsight.load(_jax_calls(tmp_path / "jax.xplane.pb"))
    src = tl.meta.extra["steps_source"]
    assert (src["marker"], src["how"]) == (None, "none")
    assert Views(tl).steps.empty


def test_the_users_range_is_the_step_beside_a_wider_runtime_range(tmp_path):
    tl = traceinsight.load(_jax_calls(tmp_path / "jax.xplane.pb", user_range="decode_iteration"))
    src = tl.meta.extra["steps_source"]
    assert (src["marker"], src["how"]) == ("decode_iteration", "auto")
    assert "repeats 4 times" in src["why"] and "covers 61 %" in src["why"] and "runtime's own ranges" in src["why"]
    st = Views(tl).steps
    assert len(st) == 4 and (st["dur_ns"] == 600 * US).all()


def _kineto_ranges(tmp_path, *, empty_last: bool, late: bool = False):
    """Four ``chunk`` ranges of 1 ms, 8 kernels launched in each (``late``: they run after the range ended, the host
    a range ahead of the GPU: the first range holds none by time); with ``empty_last`` the last launches nothing."""
    t = KinetoTrace()
    b = 0.0
    for i in range(4):
        t.annotation("chunk", b, 1_000.0)
        if not (empty_last and i == 3):
            for k in range(8):
                run = b + (1_010.0 if late else 30.0) + k * 110.0
                t.kernel("gemm", run, 100.0, launch_us=b + 20.0 + k * 2.0)
        b += 1_010.0
    return t.write(tmp_path / "chunks.json")


def test_a_range_one_of_whose_instances_holds_no_gpu_work_is_no_step(tmp_path):
    src = traceinsight.load(_kineto_ranges(tmp_path, empty_last=True)).meta.extra["steps_source"]
    assert (src["marker"], src["how"]) == (None, "none")
    # the same ranges, each launching its kernels: the steps
    src = traceinsight.load(_kineto_ranges(tmp_path, empty_last=False)).meta.extra["steps_source"]
    assert (src["marker"], src["how"]) == ("chunk", "auto") and "each instance holding GPU work" in src["why"]


def test_gpu_work_launched_in_a_range_is_held_by_it_though_it_runs_later(tmp_path):
    tl = traceinsight.load(_kineto_ranges(tmp_path, empty_last=False, late=True))
    assert tl.meta.extra["steps_source"]["marker"] == "chunk" and len(Views(tl).steps) == 4


# --- diff: TF graph steps ----------------------------------------------------------------------------------------
def _keras(path, elementwise: int):
    """One Keras step (``train``, 10 ms) as TF's executor runs it: two host ops of the graph (``GatherV2``,
    ``LogicalAnd``) with no kernel of theirs, six ``ExecutorState::Process`` runs on two pool threads, overlapping,
    the kernels under them (4 GEMMs and ``elementwise`` elementwise kernels), and a user's ``record_function``-like
    range nowhere."""
    t = XSpaceTrace()
    t.step(0, 0, 10_000 * US)
    t.op("GatherV2:GatherV2", 50 * US, 10 * US)
    t.op("LogicalAnd:LogicalAnd", 70 * US, 10 * US)
    for i in range(6):
        t.host_range("ExecutorState::Process", 100 * US + i * 1_500 * US, 2_000 * US, thread=f"tf_inter_op_{i % 2}")
    at = 150 * US
    for k in range(4 + elementwise):
        name = "volta_sgemm_128x64_nn" if k < 4 else "void Eigen::internal::EigenMetaKernel<float>"
        t.kernel(name, at, 200 * US if k < 4 else 50 * US)
        at += 300 * US if k < 4 else 100 * US
    return t.write(path)


def test_the_tf_executor_is_no_repeated_region(tmp_path):
    a = traceinsight.analyze(_keras(tmp_path / "a.xplane.pb", 40))
    assert a.timeline.meta.extra["steps_source"]["how"] == "profiler" and len(a.views.steps) == 1
    assert [r["name"] for r in workload.repeats(a.views)] == []


def test_a_diff_of_two_graphs_counts_their_kernels_by_class(tmp_path):
    base, head = _keras(tmp_path / "a.xplane.pb", 40), _keras(tmp_path / "b.xplane.pb", 70)
    d = diff(base, head).data
    c = d["comparability"]
    # the two host ops are all the framework ops and both sides have them: they alone would read 100 %
    assert not c["comparable"] and (c["matched_by"], c["in_common_pct"]) == ("kernel_classes", 59.5)  # 44 of 74
    assert c["reasons"][0].startswith("only 59% of the kernels by class per step are in common")
    assert "elementwise: 40 -> 70 per step" in c["reasons"]
    assert any(r.startswith("the framework ops launch 0.0% of the GPU time per step") for r in c["reasons"])
    assert d["verdict"] == "not comparable" and d["step"] is None
    # on the user's word the one step a side is the sample, not the executor's runs
    d = diff(base, head, same_workload=True).data
    assert d["samples"]["basis"] == "steps" and (d["samples"]["base_count"], d["samples"]["head_count"]) == (1, 1)
    assert d["step"]["change_pct"] == 0.0 and d["verdict"] == "inconclusive"
