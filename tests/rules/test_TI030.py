"""TI030 memory-headroom: positive, negative, fix."""

from __future__ import annotations

import pytest

from ._memory_traces import GiB, kineto_steps, of


#: positive: it fires; negative: it stays silent; fix: the same workload, fixed as its fix text says.
CASES = {
    "positive": ["test_positive_small_peak_on_an_under_busy_gpu"],
    "negative": ["test_negative_memory_nearly_full", "test_negative_busy_gpu_with_large_kernels"],
    "fix": ["test_fix_a_larger_batch_leaves_less_to_grow", "test_fix_on_a_jax_trace_is_jax"],
}


def test_positive_small_peak_on_an_under_busy_gpu(tmp_path):
    (f,) = of(kineto_steps(tmp_path), "TI030")
    m = f.metrics
    assert m["peak_bytes"] == 8 * GiB and m["capacity_bytes"] == 80 * GiB
    usable = 80 * GiB * 0.9 - 1.5 * GiB
    assert m["usable_bytes"] == int(usable)
    assert m["batch_bound_bytes"] == 2 * GiB  # peak allocated (6 GiB) less what is held throughout (4 GiB)
    assert m["batch_factor"] == pytest.approx(8.0)  # capped
    assert f.location.device == 0 and "batch" in f.fixes["pytorch"].text
    # the GPU window runs from the first kernel to the end of the last: 4 steps of 9 ms + 5 ms, 25 ms of it busy;
    # at 8x the batch the same idle is shared by 8x the work
    # (at 8x the batch the same idle shared by 8x the work is the simple model, kept only where nothing is replayed)
    assert "throughput_gain_simple" not in m and "throughput_gain_upper_bound" not in m
    # the arithmetic and the cap are on the card: 1 + spare / batch-bound, capped at 8x
    by_memory = 1 + (usable - 8 * GiB) / (2 * GiB)
    assert m["batch_factor_by_memory"] == pytest.approx(by_memory, rel=1e-3) and m["batch_factor_cap"] == 8.0
    assert f"= {by_memory:,.1f}×, capped at 8.0×" in f.message and f"(the cap; memory alone allows ~{by_memory:,.0f}×)" in f.title
    # priced by the what-if replay at 8x the batch: the per-sample time it gives, with its assumptions
    ratio = m["what_if_step_ns"] / (8 * m["what_if_baseline_step_ns"])
    assert m["what_if_per_sample_ratio"] == pytest.approx(ratio, rel=1e-3) and m["what_if_throughput_gain"] == pytest.approx(1 / ratio, rel=1e-3)
    assert m["what_if_step_ns"] > m["what_if_baseline_step_ns"]  # more work per step, less time per sample
    assert ratio < 1 and "launch-bound" in f.message and "an estimate" in f.message
    # its gain is per sample: the title says it, and the card carries no step figure (never "0 ns")
    assert f.title.endswith(f", throughput ×{m['what_if_throughput_gain']:.2f} (modelled)")
    assert (f.saving_kind, f.share_pct) == ("none", None)


def test_negative_memory_nearly_full(tmp_path):
    assert not of(kineto_steps(tmp_path, reserved=60 * GiB, held=50 * GiB, batch=5 * GiB), "TI030")


def test_negative_busy_gpu_with_large_kernels(tmp_path):
    assert not of(kineto_steps(tmp_path, kernel_us=50_000, gap_us=100), "TI030")


def test_fix_a_larger_batch_leaves_less_to_grow(tmp_path):
    before = of(kineto_steps(tmp_path, capacity=24 * GiB, name="a.json"), "TI030")[0].metrics["batch_factor"]
    after = of(kineto_steps(tmp_path, capacity=24 * GiB, batch=6 * GiB, reserved=12 * GiB, name="b.json"), "TI030")
    # 24 GiB: usable 20.1 GiB; before (8 GiB peak, 2 GiB per batch) ~7x; after (12 GiB peak, 6 GiB per batch) ~2.4x
    assert before == pytest.approx(1 + (24 * GiB * 0.9 - 1.5 * GiB - 8 * GiB) / (2 * GiB), rel=1e-3)
    assert after and after[0].metrics["batch_factor"] < before / 2


def test_fix_on_a_jax_trace_is_jax():
    """judged/tl_mi300_jax_conv_legacy: a JAX program is shown JAX's fix first (it was PyTorch's: the rule had none)."""
    import traceinsight
    from tests.conftest import corpus_file
    from traceinsight.render import render

    a = traceinsight.analyze(corpus_file("judged/tl_mi300_jax_conv_legacy.xplane.pb"))
    assert a.framework == "jax"
    for f in a.findings:
        assert list(f.fixes)[:1] == ["jax"], (f.code, list(f.fixes))
    text = render(a, "text")
    assert "fix (PyTorch)" not in text and "fix (JAX): Raise the batch size" in text
    assert "(null)" not in text and "GPU memory, rank 0 GPUs 0-7:" in text
