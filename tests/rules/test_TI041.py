"""TI041 unfused-memory-bound: eager elementwise/normalisation kernels a compiler would fuse."""

from __future__ import annotations

import pytest

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from tests.rules._shapes import linear, pointwise


#: positive: it fires; negative: it stays silent; fix: the same workload, fixed as its fix text says.
CASES = {
    "positive": ["test_positive_eager_chains"],
    "negative": ["test_negative_gemm_dominated", "test_negative_idle_gpu"],
    "fix": ["test_fix_torch_compile"],
}


def _trace(tmp_path, compiled: bool, n_chains: int = 40):
    """Per layer one GEMM (100 µs) then a chain of 4 pointwise ops on [2048, 2048] bf16 (20 µs each; 24 MiB moved
    per op in 20 µs is ~1.3 TB/s). Compiled: inductor's one fused Triton kernel (25 µs) instead of the chain."""
    t = KinetoTrace(device_name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0), sm_count=132)
    t.step(1, 0, n_chains * 200 + 500)
    gpu = 50.0
    for i in range(n_chains):
        at = 5 + i * 40
        gpu = linear(t, at, 4096, 4096, 4096, 100.0, gpu_at=gpu, kernel="sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n")
        if compiled:
            gpu = pointwise(t, at + 12, "aten::mul", [2048, 2048], 25.0, gpu_at=gpu, kernel="triton_poi_fused_add_mul_silu_0")
        else:
            for j, op in enumerate(("aten::mul", "aten::add", "aten::silu", "aten::mul")):
                gpu = pointwise(t, at + 12 + j * 6, op, [2048, 2048], 20.0, gpu_at=gpu)
    return traceinsight.analyze(t.write(tmp_path / "t.json"), select=["TI041"], min_impact=0)


def test_positive_eager_chains(tmp_path):
    (f,) = _trace(tmp_path, compiled=False).findings
    assert f.metrics["kernels"] == 160 and f.metrics["memory_bound_ns"] == 160 * 20_000
    assert f.metrics["share_pct"] == pytest.approx(100 * 80 / 180, abs=1e-3)
    assert f.impact_ns == 160 * 20_000 // 2  # 2x modelled fusion speed-up
    assert f.severity.value == "info" and "~1258 GB/s of the GPU's 3350 GB/s" in f.message
    assert set(f.evidence["class"]) == {"elementwise"}


def test_negative_gemm_dominated(tmp_path):
    assert not _trace(tmp_path, compiled=False, n_chains=0).findings


def test_fix_torch_compile(tmp_path):
    assert _trace(tmp_path, compiled=True).findings == []


def test_negative_idle_gpu(tmp_path):
    """The same eager chains on a GPU idle most of the time (the host is the bound): no fusion finding."""
    t = KinetoTrace(device_name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0), sm_count=132)
    t.step(1, 0, 40 * 1000 + 500)
    for i in range(40):
        at = 5 + i * 1000
        gpu = at + 20
        for j, op in enumerate(("aten::mul", "aten::add", "aten::silu", "aten::mul")):
            gpu = pointwise(t, at + j * 6, op, [2048, 2048], 20.0, gpu_at=gpu)
    assert not traceinsight.analyze(t.write(tmp_path / "t.json"), select=["TI041"], min_impact=0).findings
