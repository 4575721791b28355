"""TI033 um-oversubscription: positive, negative (faults in warm-up only), fix."""

from __future__ import annotations

from ._memory_traces import nsys_um, of


#: positive: it fires; negative: it stays silent; fix: the same workload, fixed as its fix text says.
CASES = {
    "positive": ["test_positive_faults_in_steady_steps"],
    "negative": ["test_negative_faults_only_in_warmup"],
    "fix": ["test_fix_prefetch"],
}


def test_positive_faults_in_steady_steps(tmp_path):
    (f,) = of(nsys_um(tmp_path), "TI033")
    assert f.metrics["gpu_faults"] == 3 * 300 and f.metrics["cpu_faults"] == 3  # steps 2..4
    assert f.impact_ns == 3 * 800_000 and f.metrics["steps"] == 3


def test_negative_faults_only_in_warmup(tmp_path):
    assert not of(nsys_um(tmp_path, faults_in_steps=False), "TI033")


def test_fix_prefetch(tmp_path):
    f = of(nsys_um(tmp_path, name="a.sqlite"), "TI033")[0]
    assert "cudaMemPrefetchAsync" in f.fixes["cuda"].code
