"""TI031 memory-pressure: positive (out of memory, near capacity, cudaFree flushes), negative, fix."""

from __future__ import annotations

from traceinsight.rule_api import Severity

from ._memory_traces import GiB, kineto_steps, of


#: positive: it fires; negative: it stays silent; fix: the same workload, fixed as its fix text says.
CASES = {
    "positive": ["test_positive_out_of_memory_is_an_error", "test_positive_peak_near_capacity", "test_positive_cudafree_in_steady_state"],
    "negative": ["test_negative_roomy_and_no_flushes", "test_negative_without_steps_exit_frees_are_not_flushes"],
    "fix": ["test_fix_checkpointing_brings_the_peak_down"],
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
