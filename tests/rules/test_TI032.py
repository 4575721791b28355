"""TI032 allocator-churn: positive (growth after warm-up, cudaMalloc in steps, reserved >> allocated), negative
(growth during warm-up only), fix."""

from __future__ import annotations

from ._memory_traces import GiB, kineto_steps, of


#: positive: it fires; negative: it stays silent; fix: the same workload, fixed as its fix text says.
CASES = {
    "positive": ["test_positive_reserved_grows_after_warmup", "test_positive_cudamalloc_inside_steps", "test_positive_reserved_far_above_allocated"],
    "negative": ["test_negative_growth_only_in_warmup", "test_negative_growth_that_stops_after_one_more_step"],
    "fix": ["test_fix_static_shapes_stop_the_growth"],
}


def test_positive_reserved_grows_after_warmup(tmp_path):
    (f,) = of(kineto_steps(tmp_path, grow_per_step=GiB // 2), "TI032")
    # steps 2..5 each grow by 0.5 GiB: 10 GiB at the end over the 8 GiB the warm-up step (the first) held
    assert f.metrics["growth_after_warmup_bytes"] == 2 * GiB
    assert f.metrics["level_after_warmup_bytes"] == 8 * GiB


def test_positive_cudamalloc_inside_steps(tmp_path):
    (f,) = of(kineto_steps(tmp_path, malloc_in_steps=True), "TI032")
    assert f.metrics["steady_state_alloc_calls"] == 4 and f.impact_ns == 4 * 200_000


def test_positive_reserved_far_above_allocated(tmp_path):
    (f,) = of(kineto_steps(tmp_path, reserved=20 * GiB), "TI032")
    assert f.metrics["fragmented"] and f.metrics["peak_reserved_bytes"] == 20 * GiB


def test_negative_growth_only_in_warmup(tmp_path):
    """The first step grows the pool (8 GiB reserved from the start here, as after warm-up): nothing after."""
    assert not of(kineto_steps(tmp_path), "TI032")


def test_fix_static_shapes_stop_the_growth(tmp_path):
    f = of(kineto_steps(tmp_path, grow_per_step=GiB, name="a.json"), "TI032")[0]
    assert "expandable_segments:True" in f.fixes["pytorch"].text and "padded_batch" in f.fixes["tensorflow"].text
    assert not of(kineto_steps(tmp_path, grow_per_step=0, name="b.json"), "TI032")


def test_negative_growth_that_stops_after_one_more_step(tmp_path):
    """cudaMalloc in one step after the first only (warm-up that ran one step long): not churn."""
    import traceinsight

    from ..helpers.kineto_writer import KinetoTrace

    t = KinetoTrace()
    for s in range(5):
        t0 = s * 10_000
        t.step(s + 1, t0, 9_990)
        if s == 1:
            t.runtime("cudaMalloc", t0 + 60, 200)
            t.runtime("cudaMalloc", t0 + 400, 200)
        t.kernel("gemm", t0 + 1_200, 5_000)
    assert not of(traceinsight.analyze(t.write(tmp_path / "t.json")), "TI032")
