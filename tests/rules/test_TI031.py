"""TI031 memory-pressure: positive (out of memory, near capacity, cudaFree flushes), negative, fix."""

from __future__ import annotations

import traceinsight
from tests.conftest import corpus_file
from traceinsight.rule_api import Severity

from ._memory_traces import GiB, kineto_steps, kineto_uncached, of, xplane_jax


#: positive: it fires; negative: it stays silent; fix: the same workload, fixed as its fix text says.
CASES = {
    "positive": ["test_positive_out_of_memory_is_an_error", "test_positive_peak_near_capacity", "test_positive_cudafree_in_steady_state",
                 "test_positive_empty_cache_outside_ops_is_asked_for", "test_positive_frees_far_below_capacity_are_asked_for",
                 "test_positive_jax_memory_in_use_near_capacity"],
    "negative": ["test_negative_roomy_and_no_flushes", "test_negative_without_steps_exit_frees_are_not_flushes",
                 "test_negative_flush_inside_an_op_is_pressure", "test_negative_a_rank_without_ops_is_never_outside_them",
                 "test_negative_vllm_kv_cache_is_held_on_purpose", "test_negative_jax_preallocated_pool_is_not_pressure",
                 "test_negative_frees_of_an_allocator_that_does_not_cache_are_ti032s", "test_negative_real_vllm_capture"],
    "fix": ["test_fix_checkpointing_brings_the_peak_down", "test_fix_for_asked_for_releases_is_to_stop_asking",
            "test_fix_for_memory_held_on_purpose_is_nothing_to_fix"],
}


def test_positive_out_of_memory_is_an_error(tmp_path):
    (f,) = of(kineto_steps(tmp_path, oom=True), "TI031")
    assert f.severity == Severity.ERROR and f.metrics["oom_events"] == 1


def test_positive_peak_near_capacity(tmp_path):
    (f,) = of(kineto_steps(tmp_path, capacity=16 * GiB, reserved=15 * GiB, held=12 * GiB, batch=2 * GiB), "TI031")
    assert f.metrics["peak_share_pct"] > 90 and f.metrics["oom_events"] == 0


def test_positive_cudafree_in_steady_state(tmp_path):
    (f,) = of(kineto_steps(tmp_path, free_in_steps=True), "TI031")
    assert f.metrics["steady_state_frees"] == 4  # steps 2..5; step 1 is warm-up
    assert f.metrics["flush_ns"] == 4 * 800_000 and f.impact_ns == 4 * 800_000


def test_negative_roomy_and_no_flushes(tmp_path):
    assert not of(kineto_steps(tmp_path), "TI031")


def test_fix_checkpointing_brings_the_peak_down(tmp_path):
    """The fixes named (checkpointing, mixed precision, micro-batches, expandable segments) lower the peak: the
    same run at a lower peak is not reported."""
    f = of(kineto_steps(tmp_path, capacity=16 * GiB, reserved=15 * GiB, held=12 * GiB, name="a.json"), "TI031")[0]
    text = f.fixes["pytorch"].text
    assert "checkpointing" in text and "expandable_segments:True" in text and "accumulation" in text
    assert not of(kineto_steps(tmp_path, capacity=16 * GiB, reserved=10 * GiB, held=6 * GiB, name="b.json"), "TI031")


def test_negative_without_steps_exit_frees_are_not_flushes(tmp_path):
    """A program without step markers: its cudaFree calls at exit cannot be told from flushes in a loop."""
    import traceinsight

    from ..helpers.kineto_writer import KinetoTrace

    t = KinetoTrace()
    for i in range(5):
        t.kernel("k", 1_000 + i * 2_000, 1_000)
    for i in range(3):
        t.runtime("cudaFree", 12_000 + i * 500, 300)
    a = traceinsight.analyze(t.write(tmp_path / "exit.json"))
    assert not of(a, "TI031")


ASKED = "rank 0 GPU 0: allocator cache released 4 times in the steady state (asked for, not pressure)"


def test_positive_empty_cache_outside_ops_is_asked_for(tmp_path):
    """``torch.cuda.empty_cache()`` after each step: its cudaFree runs outside every framework op on a rank that
    records them, with the peak at 62.5 % (neither near capacity nor far below it): the program asked."""
    (f,) = of(kineto_steps(tmp_path, free_in_steps=True, capacity=16 * GiB, reserved=10 * GiB, held=6 * GiB), "TI031")
    assert f.title == ASKED
    assert f.metrics["asked_for"] is True and f.metrics["peak_share_pct"] == 62.5 and f.metrics["oom_events"] == 0
    assert f.metrics["steady_state_frees"] == 4 and f.impact_ns == f.metrics["flush_ns"] == 4 * 800_000
    assert "outside any framework op" in f.message and "memory pressure" not in f.title
    # no risk to the run, only time: graded on the common scale by the GPU time it costs, like any time cost
    from traceinsight.rule_api import level

    assert f.metrics["graded"] is True and f.severity is level(f.share_pct or 0.0)


def test_positive_frees_far_below_capacity_are_asked_for(tmp_path):
    """Releases inside an op, or on a trace without ops (Nsight), on a device whose peak stayed under half its
    capacity: no allocation failed there, so they were asked for too."""
    (f,) = of(kineto_steps(tmp_path, free_in_steps=True, free_in_op=True), "TI031")  # 8 of 80 GiB
    assert f.title == ASKED and f.metrics["asked_for"] is True and f.metrics["peak_share_pct"] == 10.0
    assert "while the device's peak stayed at 8.0 GiB of its 80.0 GiB" in f.message
    (n,) = of(_nsys_frees(tmp_path, held=2 * GiB), "TI031")  # 3 of 16 GiB
    assert n.title == ASKED and n.metrics["asked_for"] is True and n.metrics["peak_share_pct"] == 18.75


def test_negative_flush_inside_an_op_is_pressure(tmp_path):
    """A release inside an aten op near capacity is the allocator flushing when an allocation failed: memory
    pressure. So is one at 62.5 % inside an op, or on an Nsight rank (no ops to be outside of)."""
    near = dict(capacity=16 * GiB, reserved=15 * GiB, held=12 * GiB)
    (f,) = of(kineto_steps(tmp_path, free_in_steps=True, free_in_op=True, name="near.json", **near), "TI031")
    assert f.title == "rank 0 GPU 0: memory pressure (peak 94 % of capacity, 4 cudaFree flushes)"
    assert "asked_for" not in f.metrics and f.fixes["pytorch"].text.startswith("Lower the memory a step needs")
    # near capacity, a release outside every op is still pressure: the allocator may be flushing for the program
    (o,) = of(kineto_steps(tmp_path, free_in_steps=True, name="near_out.json", **near), "TI031")
    assert "asked_for" not in o.metrics and "memory pressure" in o.title
    mid = dict(capacity=16 * GiB, reserved=10 * GiB, held=6 * GiB)
    (m,) = of(kineto_steps(tmp_path, free_in_steps=True, free_in_op=True, name="mid.json", **mid), "TI031")
    assert m.title == "rank 0 GPU 0: memory pressure (4 cudaFree flushes)" and "asked_for" not in m.metrics
    (n,) = of(_nsys_frees(tmp_path, held=9 * GiB), "TI031")  # 10 of 16 GiB, runtime calls only
    assert n.title == "rank 0 GPU 0: memory pressure (4 cudaFree flushes)" and "asked_for" not in n.metrics


def test_fix_for_asked_for_releases_is_to_stop_asking(tmp_path):
    (f,) = of(kineto_steps(tmp_path, free_in_steps=True), "TI031")
    text = f.fixes["pytorch"].text
    assert text.startswith("Remove `torch.cuda.empty_cache()`") and "checkpointing" not in text
    # the fixed loop (no empty_cache) releases nothing in the steady state: not reported
    assert not of(kineto_steps(tmp_path, name="fixed.json"), "TI031")


def _nsys_frees(tmp_path, held: int):
    """An Nsight capture on a 16 GiB GPU: ``held`` bytes allocated at start, then per 10 ms step a 1 GiB cudaMalloc,
    a 5 ms kernel and a cudaFree of that GiB (800 µs), runtime calls only."""
    from ..helpers.nsys_writer import NsysTrace

    t = NsysTrace(memory_bytes=16 * GiB)
    t.cuda_malloc(10_000, held)
    for s in range(5):
        t0 = 1_000_000 + s * 10_000_000
        t.step(s, t0, 9_900_000)
        addr = t.cuda_malloc(t0 + 100_000, 1 * GiB)
        t.kernel("volta_sgemm_128x64_nn", t0 + 1_000_000, 5_000_000)
        t.cuda_free(t0 + 7_000_000, addr, 1 * GiB, dur_ns=800_000)
    import traceinsight

    return traceinsight.analyze(t.write(tmp_path / f"nsys{held >> 30}.sqlite"))


def test_negative_a_rank_without_ops_is_never_outside_them(tmp_path):
    """Two ranks at 62.5 % of 16 GiB, one flush per step each: rank 0 records ops (its flush inside
    ``aten::empty_strided``), rank 1 records none. Rank 1's flushes are outside no op it recorded, so nothing says
    the program asked: both are memory pressure."""
    from ..helpers.kineto_writer import KinetoTrace
    import traceinsight

    for rank in (0, 1):
        t = KinetoTrace(memory_bytes=16 * GiB, rank=rank, world_size=2)
        for s in range(5):
            t0 = s * 9_000.0
            t.step(s + 1, t0, 8_990.0)
            if s:
                if rank == 0:
                    t.cpu_op("aten::empty_strided", t0 + 250, 900)
                t.runtime("cudaFree", t0 + 300, 800)
            t.memory(t0 + 60, 2 * GiB, allocated=8 * GiB, reserved=10 * GiB)
            t.kernel("volta_sgemm_128x64_nn", t0 + 1_200, 5_000)
            t.memory(t0 + 6_200, -2 * GiB, allocated=6 * GiB, reserved=10 * GiB)
        t.write(tmp_path / "job" / f"rank{rank}.pt.trace.json")
    found = of(traceinsight.analyze(tmp_path / "job"), "TI031")
    assert sorted(f.title for f in found) == [f"rank {r} GPU 0: memory pressure (4 cudaFree flushes)" for r in (0, 1)]
    assert not any(f.metrics.get("asked_for") for f in found)


# --- memory held on purpose is judged on memory in use ---------------------------------------------------------

NEAR = dict(capacity=16 * GiB, reserved=15 * GiB, held=12 * GiB, batch=2 * GiB)


def test_negative_vllm_kv_cache_is_held_on_purpose(tmp_path):
    """The same 94 % peak as the positive case, in a trace whose steps run vLLM's attention op: vLLM sizes its KV
    cache to the GPU on purpose, so the finding says so, at info, and prices nothing."""
    (f,) = of(kineto_steps(tmp_path, engine_op="vllm::unified_attention", **NEAR), "TI031")
    assert f.severity == Severity.INFO and f.impact_ns == 0
    assert f.metrics["reserved_by"] == "vLLM" and f.metrics["peak_share_pct"] > 90
    assert "reserved by vLLM on purpose, not pressure" in f.title
    assert "gpu_memory_utilization" in f.message and "memory pressure" not in f.title
    # the same peak without the engine's names is pressure
    (p,) = of(kineto_steps(tmp_path, name="plain.json", **NEAR), "TI031")
    assert p.severity == Severity.WARNING and "memory pressure" in p.title


def test_negative_jax_preallocated_pool_is_not_pressure(tmp_path):
    """JAX reserved 15 of 16 GiB up front and used 1 GiB: no pressure (info naming JAX); TI032 sees no fragmentation."""
    a = xplane_jax(tmp_path)
    assert a.framework == "jax"
    (f,) = of(a, "TI031")
    assert f.severity == Severity.INFO and f.metrics["reserved_by"] == "JAX" and "XLA_PYTHON_CLIENT_MEM_FRACTION" in f.message
    assert not of(a, "TI032")


def test_positive_jax_memory_in_use_near_capacity(tmp_path):
    """Inside the pool JAX reserved, 14.5 of 16 GiB in use: that is pressure, judged and reported on memory in use."""
    (f,) = of(xplane_jax(tmp_path, in_use=int(14.5 * GiB), pool=None), "TI031")
    assert f.severity == Severity.WARNING and f.metrics["peak_in_use_share_pct"] == 90.625
    assert "memory pressure (peak in use 91 % of capacity)" in f.title and list(f.fixes)[0] == "jax"


def test_negative_frees_of_an_allocator_that_does_not_cache_are_ti032s(tmp_path):
    """hipFree per tensor with the caching allocator off: TI032's allocator churn, not a flush under pressure."""
    a = kineto_uncached(tmp_path)
    assert of(a, "TI032") and not of(a, "TI031")


def test_negative_real_vllm_capture():
    """judged/tl4_vllm_decode_full_graph_capture: vLLM's KV cache holds 94 % of the GPU. Expected: no warning."""
    a = traceinsight.analyze(corpus_file("judged/tl4_vllm_decode_full_graph_capture.json.gz"))
    (f,) = of(a, "TI031")
    assert f.severity == Severity.INFO and f.metrics["reserved_by"] == "vLLM" and "not pressure" in f.title


def test_fix_for_memory_held_on_purpose_is_nothing_to_fix(tmp_path):
    (f,) = of(kineto_steps(tmp_path, engine_op="vllm::unified_attention", **NEAR), "TI031")
    fx = f.fixes["pytorch"]
    assert fx.text.startswith("Nothing to fix") and "gpu_memory_utilization=0.8" in fx.code
    assert "checkpoint" not in fx.code


def test_ti031_off_scale_grade_says_its_basis():
    """A memory finding is a risk, not time on the timeline: graded by its rule, off the common scale, and the card
    says so (a warning beside a 0 ns figure would otherwise read as a mistake)."""
    from pathlib import Path

    import traceinsight

    a = traceinsight.analyze(Path(__file__).resolve().parents[2] / "sample_traces" / "h100" / "memory_pressure.json.gz")
    for f in a.findings:
        if f.code in ("TI031", "TI032") and f.severity.value != "info":
            assert f.metrics["severity_basis"].startswith(f"the rule's own grade ({f.severity.value}): a risk to the run"), f.code
