"""TI007 no-tensor-cores: its positive, negative and fix cases, on planted traces and the real corpus.

With recorded shapes the op's dtype (not the kernel name) decides, and the FP32 kernels' achieved rate against the
FP32 dense peak prices the speed-up; without shapes the kernel names decide, unless sampled GPU metrics say otherwise."""

from __future__ import annotations

import pytest

import traceinsight
from tests.conftest import corpus_file
from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.rule_cases import GEMM, findings_of
from tests.rules._shapes import BF16, FP32, linear


#: positive: it fires; negative: it stays silent; fix: the same GEMMs on tensor-core kernels.
CASES = {
    "positive": ["test_ti007_positive_fp32_sgemm", "test_ti007_positive_cutlass_simt", "test_ti007_own_kernels_get_their_own_fix", "test_positive_fp32_gemms_priced_from_their_rate",
                 "test_positive_compute_bound_fp32_gets_the_peaks_ratio", "test_without_shapes_the_speedup_is_the_stated_assumption", "test_hardware_counters_confirm_cuda_cores"],
    "negative": ["test_ti007_negative_tensor_core_kernels", "test_ti007_negative_pre_volta", "test_negative_bf16_ops_whatever_the_kernel_name",
                 "test_hardware_counters_overrule_names"],
    "fix": ["test_ti007_negative_tensor_core_kernels", "test_fix_mixed_precision"],
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


def test_ti007_own_kernels_get_their_own_fix(tmp_path):
    """A matmul the program wrote itself (``matmul_k``: no library's name) runs on CUDA cores too, but autocast,
    TF32 switches and cuBLAS's tiling rules never reach its arithmetic: the card says so and the fix is to call the
    library GEMM or write the kernel for tensor cores, on a pre-Ampere GPU as well (whose variant is about the
    switches)."""
    (f,) = findings_of(_gemm_trace(tmp_path, "matmul_k(float*, float*, float*, int, int, int)", cc=(7, 5), device="Tesla T4"), "TI007")
    assert f.title.endswith(", in the program's own kernels") and f.metrics["own_kernel_ns"] == 6_000_000
    assert "own kernel" in f.fixes["pytorch"].text and "torch.matmul" in f.fixes["pytorch"].code
    assert "wmma" in f.fixes["cuda"].code and not any(":" in k for k in f.fixes)
    assert "torch.autocast" not in f.fixes["pytorch"].code and "precision switches do not reach" in f.message
    (lib,) = findings_of(_gemm_trace(tmp_path, "ampere_sgemm_128x64_tn"), "TI007")
    assert lib.metrics["own_kernel_ns"] == 0 and "own kernels" not in lib.title


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
    # the GEMM/convolution time is the efficiency view's: a convolution op's layout and offset helpers are its time
    assert f.metrics["non_tc_share_of_kernel_time_pct"] == pytest.approx(67.6, abs=0.1)


def test_corpus_a100_cutlass_tensorop_uses_tensor_cores():
    assert findings_of(corpus_file("pytorch/hta_a100_rank0of16_5streams.json.gz"), "TI007") == []


# --- with recorded shapes (dtype and achieved rate) and with sampled GPU metrics ---


def _run(tmp_path, dtype: str, kernel: str, m: int = 4096, kernel_us: float = 1000.0, n: int = 20):
    t = KinetoTrace(device_name="NVIDIA A100-SXM4-80GB")
    t.step(1, 0, n * kernel_us + 500)
    gpu = 100.0
    for i in range(n):
        gpu = linear(t, 10 + i * 9, m, 4096, 4096, kernel_us, dtype=dtype, kernel=kernel, gpu_at=gpu)
    return [f for f in traceinsight.analyze(t.write(tmp_path / "t.json"), select=["TI007"], min_impact=0).findings]


#: The A100 80GB SXM's dense FP32 and bf16 peaks (TFLOP/s) and its bandwidth (GB/s), from NVIDIA's datasheet.
A100_FP32, A100_BF16, A100_BW = 19.5, 312.0, 2039.0


def _roofline_speedup(m: int, k: int = 4096, n: int = 4096) -> float:
    """What TI007 models for an FP32 linear of (m x k) @ (k x n) moved to bf16 tensor cores: its roofline time
    max(FLOPs / peak, bytes / bandwidth) at FP32 over the same at bf16 (half the bytes)."""
    flops = 2.0 * m * k * n
    nbytes = 4.0 * (m * k + k * n + m * n)
    old = max(flops / (A100_FP32 * 1e12), nbytes / (A100_BW * 1e9))
    new = max(flops / (A100_BF16 * 1e12), nbytes / 2 / (A100_BW * 1e9))
    return old / new


def test_positive_fp32_gemms_priced_from_their_rate(tmp_path):
    (f,) = _run(tmp_path, FP32, "ampere_sgemm_128x64_nn", m=16)  # 0.54 GFLOP per 1 ms kernel: memory-bound
    flops = 2 * 16 * 4096**2
    assert f.metrics["basis"] == "dtype" and f.metrics["non_tc_kernels"] == 20
    # the card quotes the efficiency view's GEMM row: the same rate, the same peak
    eff_row = next(r for r in traceinsight.analyze(tmp_path / "t.json", select=["TI007"]).views.efficiency.class_rows if r["cls"] == "gemm")
    assert f.metrics["gemm_achieved_tflops"] == pytest.approx(eff_row["achieved_tflops"], rel=1e-6)
    assert f.metrics["gemm_achieved_tflops"] == pytest.approx(flops / 1e-3 / 1e12, rel=1e-5)  # 0.54 TFLOP/s
    assert f.metrics["gemm_pct_of_peak"] == pytest.approx(100 * flops / 1e-3 / 1e12 / A100_FP32, rel=1e-3)
    # a memory-bound GEMM gains what its smaller bf16 operands give: 2x, not the peaks' 16x
    assert f.metrics["speedup_basis"] == "peaks" and f.metrics["priced_dtype"] == "bf16"
    assert f.metrics["modelled_speedup"] == pytest.approx(_roofline_speedup(16), rel=1e-3)
    assert f.metrics["modelled_speedup"] == pytest.approx(2.0, rel=1e-3)
    assert f.impact_ns == pytest.approx(20 * 1_000_000 * (1 - 1 / f.metrics["modelled_speedup"]), rel=1e-3)
    assert "19.5 TFLOP/s fp32 dense" in f.message and "312 TFLOP/s bf16 dense" in f.message


def test_positive_compute_bound_fp32_gets_the_peaks_ratio(tmp_path):
    (f,) = _run(tmp_path, FP32, "ampere_sgemm_128x64_nn", kernel_us=8000.0)  # 137 GFLOP in 8 ms: 88 % of FP32 peak
    assert f.metrics["gemm_pct_of_peak"] > 50
    # compute-bound: the ratio of the bf16 to the FP32 dense peak (312 / 19.5 = 16x), which is also the cap
    assert f.metrics["modelled_speedup"] == pytest.approx(_roofline_speedup(4096), rel=1e-3)
    assert f.metrics["modelled_speedup"] == pytest.approx(A100_BF16 / A100_FP32, rel=1e-3) == f.metrics["speedup_cap"]
    assert "at most 16x" in f.message
    assert "est." not in f.message  # one saving figure per card: the header's (the replay's), never a second one


def test_without_shapes_the_speedup_is_the_stated_assumption(tmp_path):
    (f,) = findings_of(_gemm_trace(tmp_path, "ampere_sgemm_128x64_tn"), "TI007")
    assert f.metrics["speedup_basis"] == "assumed" and f.metrics["modelled_speedup"] == 2.0
    assert "assumed 2x speed-up" in f.message


def test_negative_bf16_ops_whatever_the_kernel_name(tmp_path):
    # names alone would call this kernel CUDA-core (no tensor-core marker); its op is bf16, so it ran on tensor cores
    assert _run(tmp_path, BF16, "gemm_kernel_custom_128x64") == []


def test_fix_mixed_precision(tmp_path):
    assert _run(tmp_path, FP32, "ampere_sgemm_128x64_nn")
    assert _run(tmp_path, BF16, "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_nn") == []


def _nsys(tmp_path, tensor_active: int | None):
    from tests.helpers.nsys_writer import NsysTrace

    t = NsysTrace()  # A100, no shapes: names decide unless the GPU's counters say otherwise
    t.step(0, 0, 1_000_000)
    t.kernel("ampere_sgemm_128x64_nn", 10_000, 900_000)
    if tensor_active is not None:
        for i in range(0, 1_000_000, 10_000):
            t.gpu_metrics(i, {"SMs Active [Throughput %]": 95, "Tensor Active [Throughput %]": tensor_active})
    return traceinsight.analyze(t.write(tmp_path / "t.sqlite"), select=["TI007"], min_impact=0).findings


def test_hardware_counters_confirm_cuda_cores(tmp_path):
    (f,) = _nsys(tmp_path, 0)
    assert f.metrics["basis"] == "names" and f.metrics["tensor_active_pct"] == 0
    assert "Tensor Active at 0%" in f.message


def test_hardware_counters_overrule_names(tmp_path):
    assert _nsys(tmp_path, 60) == []  # a kernel named like sgemm that keeps the tensor cores 60 % busy
    (f,) = _nsys(tmp_path, None)  # without samples the name decides
    assert f.metrics["tensor_active_pct"] is None


def test_layout_transforms_are_not_matrix_time(tmp_path):
    """cuDNN converts NCHW<->NHWC around a convolution with kernels its op launches: memory-bound reordering, not
    convolution math on CUDA cores. They keep their own class (elementwise) under the op that launched them, so
    TI007's CUDA-core time and the efficiency view's matrix rows leave them out."""
    from traceinsight.derive.derived import Derived

    t = KinetoTrace(device_name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0))
    t.step(1, 0, 5000)
    op = t.cpu_op("aten::addmm", 10, 50.0, args={"Input Dims": [[64], [64, 64], [64, 64], [], []],
                                                  "Input type": [FP32, FP32, FP32, "Scalar", "Scalar"],
                                                  "Concrete Inputs": ["", "", "", "1", "1"]})
    t.kernel("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>", 100, 1000.0, launch_us=20, op=op)
    t.kernel("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32", 1200, 200.0, launch_us=30, op=op)
    eff = Derived(traceinsight.load(t.write(tmp_path / "t.json"))).efficiency
    assert list(eff.kernel_cls) == ["elementwise", "gemm"]
