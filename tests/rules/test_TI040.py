"""TI040 model-too-small: a busy GPU whose GEMMs are too small to reach its dense peak."""

from __future__ import annotations

import pytest

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from tests.rules._shapes import linear


#: positive: it fires; negative: it stays silent; fix: the same workload, fixed as its fix text says.
CASES = {
    "positive": ["test_positive_tiny_gemms"],
    "negative": ["test_negative_large_gemms", "test_negative_idle_gpu"],
    "fix": ["test_fix_raise_the_batch"],
}


def _trace(tmp_path, m: int, kernel_us: float, n_ops: int):
    """One step on an A100 80GB (312 TFLOP/s bf16 dense): ``n_ops`` bf16 linears [m,1024]x[1024,1024] whose kernels
    run back to back (the GPU is busy), launched well ahead."""
    t = KinetoTrace(device_name="NVIDIA A100-SXM4-80GB")
    step = n_ops * kernel_us + 200
    t.step(1, 0, step)
    gpu = 100.0
    for i in range(n_ops):
        gpu = linear(t, 10 + i * 0.9 * min(kernel_us, 10), m, 1024, 1024, kernel_us, gpu_at=gpu)
    return traceinsight.analyze(t.write(tmp_path / "t.json"), select=["TI040"], min_impact=0)


def test_positive_tiny_gemms(tmp_path):
    (f,) = _trace(tmp_path, 16, 18.0, 100).findings  # 33.6 MFLOP each: 0.1 µs at peak, 18 µs measured
    flops = 2 * 16 * 1024 * 1024
    assert f.metrics["tiny_ops"] == 100 and f.metrics["tiny_kernel_ns"] == 100 * 18_000
    assert f.metrics["achieved_tflops"] == pytest.approx(flops / 18e-6 / 1e12, rel=1e-6)
    assert f.metrics["peak_tflops"] == 312.0 and "A100 80GB SXM" in f.metrics["peak"]
    # modelled: the same FLOPs at 50 % of 312 TFLOP/s
    assert f.impact_ns == pytest.approx(100 * 18_000 - 100 * flops / 156e12 * 1e9, abs=2)
    assert f.severity.value == "info" and f.metrics["modelled_speedup"] is True
    assert f.evidence["input_dims"].iloc[0].startswith("[[1024], [16, 1024], [1024, 1024]")


def test_negative_large_gemms(tmp_path):
    assert not _trace(tmp_path, 8192, 400.0, 20).findings  # 17 GFLOP each: 55 µs at peak, not tiny


def test_fix_raise_the_batch(tmp_path):
    # the same layer with a 256x larger batch: 8.6 GFLOP per GEMM (27.5 µs at peak), run at ~60 % of peak
    assert _trace(tmp_path, 4096, 45.0, 40).findings == []


def test_negative_idle_gpu(tmp_path):
    t = KinetoTrace(device_name="NVIDIA A100-SXM4-80GB")
    t.step(1, 0, 20_000)
    for i in range(100):  # the same tiny GEMMs, but 200 µs apart: idleness is other rules' finding
        linear(t, 10 + i * 200, 16, 1024, 1024, 18.0, gpu_at=20 + i * 200)
    assert not traceinsight.analyze(t.write(tmp_path / "t.json"), select=["TI040"], min_impact=0).findings
