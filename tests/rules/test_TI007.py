"""TI007 no-tensor-cores: its positive, negative and fix cases, on planted traces and the real corpus."""

from __future__ import annotations

import pytest

from tests.conftest import corpus_file
from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.rule_cases import GEMM, findings_of


#: positive: it fires; negative: it stays silent; fix: the same GEMMs on tensor-core kernels.
CASES = {
    "positive": ["test_ti007_positive_fp32_sgemm", "test_ti007_positive_cutlass_simt"],
    "negative": ["test_ti007_negative_tensor_core_kernels", "test_ti007_negative_pre_volta"],
    "fix": ["test_ti007_negative_tensor_core_kernels"],
}


def _gemm_trace(tmp_path, gemm_name, cc=(8, 0), device="NVIDIA A100-SXM4-80GB"):
    t = KinetoTrace(device_name=device, compute_capability=cc)
    for i in range(6):
        t.kernel(gemm_name, i * 1_100, 1_000)
    t.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float> >", 7_000, 1_000)
    return t.write(tmp_path / "gemm.json")


def test_ti007_positive_fp32_sgemm(tmp_path):
    # 6 ms of sgemm, 1 ms elementwise: 100 % of GEMM time, 85.7 % of kernel time; impact 6 ms x (1 - 1/2).
    (f,) = findings_of(_gemm_trace(tmp_path, "ampere_sgemm_128x64_tn"), "TI007")
    assert f.metrics["non_tc_share_pct"] == pytest.approx(100.0)
    assert f.metrics["non_tc_share_of_kernel_time_pct"] == pytest.approx(600 / 7, abs=1e-3)
    assert f.metrics["gemm_kernels"] == 6
    assert f.impact_ns == 3_000_000
    assert "autocast" in f.fixes["pytorch"].code and "mixed_float16" in f.fixes["tensorflow"].code


def test_ti007_positive_cutlass_simt(tmp_path):
    # "cutlass" alone is not tensor cores: the SIMT variant runs on CUDA cores.
    (f,) = findings_of(_gemm_trace(tmp_path, "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(Params)"), "TI007")
    assert f.metrics["non_tc_share_pct"] == pytest.approx(100.0)


def test_ti007_negative_tensor_core_kernels(tmp_path):
    assert findings_of(_gemm_trace(tmp_path, "ampere_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn"), "TI007") == []
    assert findings_of(_gemm_trace(tmp_path, "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>(Params)"), "TI007") == []


def test_ti007_negative_pre_volta(tmp_path):
    # A P100 (compute capability 6.0) has no tensor cores: FP32 sgemm is all it can do.
    assert findings_of(_gemm_trace(tmp_path, "maxwell_sgemm_128x64_nn", cc=(6, 0), device="Tesla P100-PCIE-16GB"), "TI007") == []


def test_corpus_resnet50_v100_fp32_no_tensor_cores():
    # The tb_plugin ResNet-50 sample trains in FP32 on a V100: cuDNN dgrad/wgrad/implicit_convolve_sgemm and
    # volta_sgemm only, no h884/hmma kernel.
    (f,) = findings_of(corpus_file("pytorch/kineto_resnet50_nw0_v100.pt.trace.json.gz"), "TI007")
    assert f.metrics["non_tc_share_pct"] == pytest.approx(100.0)
    assert f.metrics["non_tc_share_of_kernel_time_pct"] == pytest.approx(66.7, abs=0.1)


def test_corpus_a100_cutlass_tensorop_uses_tensor_cores():
    assert findings_of(corpus_file("pytorch/hta_a100_rank0of16_5streams.json.gz"), "TI007") == []
