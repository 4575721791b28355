"""One kernel classifier (``traceinsight.vocab.work_classes``) behind every user: the efficiency view, TI007, the what-if's
GEMM speed-up, the rules that declare what they speed up, and the diff's classes. A GEMM is a GEMM everywhere,
NVIDIA's, AMD's and Triton's alike."""

from __future__ import annotations

import numpy as np
import pytest

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from tests.rules._shapes import FP32, linear
from traceinsight.vocab import kernels, patterns
from traceinsight.derive import whatif
from traceinsight.vocab.work_classes import GEMM_CLASSES, kernel_class_of, kernel_classes

#: GEMM kernels of every library a trace may show, NVIDIA, AMD and compiler-generated.
GEMMS = [
    "ampere_sgemm_128x64_nn", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>(Params)",
    "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0", "hipblasltKernel_gemm_bf16", "void ck::kernel_gemm_xdl_cshuffle_v3<...>",
    "triton_tem_fused_mm_0", "rocblas_gemm_kernel",
]


@pytest.mark.parametrize("name", GEMMS)
def test_every_library_gemm_is_a_gemm_for_every_user(name):
    assert kernel_class_of(name) == "gemm"
    assert kernels.classify(name) == "gemm"  # the diff's coarse class
    assert kernel_classes(__import__("pandas").Series([name], dtype="category"))[0] == "gemm"


def test_not_gemms_stay_out():
    assert kernel_class_of("fbgemm_gpu::embedding_forward_kernel") == "elementwise"  # says gemm, gathers memory
    assert kernel_class_of("ncclDevKernel_AllReduce_Sum_bf16_RING_LL") == "communication"
    assert kernel_class_of("fmha_cutlassF_f32_aligned_64x64_rf_sm80") == "attention"  # cutlass, but attention
    assert kernel_class_of("triton_poi_fused_add_0") == "elementwise"


def test_there_is_one_gemm_definition():
    assert not hasattr(patterns, "GEMM_CONV")  # the old second list of GEMM names is gone
    from traceinsight.assess import savings

    assert not hasattr(savings, "GEMM_RULES")  # rules say what they speed up (Rule.speeds_up)
    from rules.model_too_small import ModelTooSmall
    from rules.tensor_cores import NoTensorCores
    from rules.unfused_memory_bound import UnfusedMemoryBound

    assert NoTensorCores.speeds_up == GEMM_CLASSES
    assert ModelTooSmall.speeds_up == ("gemm", "conv", "attention")
    assert UnfusedMemoryBound.speeds_up == ("elementwise", "norm")


def _trace(tmp_path):
    """Per step: an FP32 linear on a cuBLAS SIMT kernel (shapes recorded), a Triton template GEMM and an elementwise
    kernel without an op."""
    t = KinetoTrace(device_name="NVIDIA A100-SXM4-80GB")
    gpu = 100.0
    for s in range(3):
        t0 = s * 10_000
        t.step(s + 1, t0, 10_000)
        gpu = linear(t, t0 + 10, 2048, 4096, 4096, 3000.0, dtype=FP32, kernel="ampere_sgemm_128x64_nn", gpu_at=max(gpu, t0 + 100))
        t.kernel("triton_tem_fused_mm_0", gpu + 10, 1000.0, launch_us=t0 + 50)
        t.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float> >", gpu + 1020, 500.0, launch_us=t0 + 60)
        gpu += 1600
    return t.write(tmp_path / "t.json")


def test_ti007_the_efficiency_view_and_the_what_if_see_the_same_gemm_time(tmp_path):
    a = traceinsight.analyze(_trace(tmp_path), min_impact=0)
    e = a.views.efficiency
    rows = {r["cls"]: r for r in e.class_rows}
    gemm_ns = sum(rows[c]["time_ns"] for c in GEMM_CLASSES if c in rows)
    assert gemm_ns == 3 * (3_000_000 + 1_000_000)  # the SIMT GEMM and the Triton template GEMM
    (f,) = [f for f in a.findings if f.code == "TI007"]
    assert f.metrics["gemm_time_ns"] == gemm_ns  # TI007's GEMM time is the table's
    assert f.metrics["gemm_achieved_tflops"] == pytest.approx(rows["gemm"]["modelled_flops"] / (rows["gemm"]["modelled_ns"] / 1e9) / 1e12)
    g = a.views.graphs[0]
    assert int(g.dur[(g.ntype == whatif.GPU) & g.gemm].sum()) == gemm_ns  # the replay shortens the same kernels
    # the what-if of TI007 shortens GEMMs only: the elementwise kernels keep their time
    w = whatif.faster_gpu_work(1_000_000, classes=GEMM_CLASSES)
    h = g.copy()
    w(h)
    ew = (g.ntype == whatif.GPU) & ~g.gemm
    assert np.array_equal(h.dur[ew], g.dur[ew]) and h.dur[g.gemm].sum() == pytest.approx(gemm_ns - 1_000_000, abs=10)
