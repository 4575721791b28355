"""Kineto traces with recorded shapes for the efficiency rules (TI007, TI040, TI041): framework ops carry
``Input Dims`` / ``Input type`` / ``Concrete Inputs`` as PyTorch writes them, and launch their kernels."""

from __future__ import annotations

from tests.helpers.kineto_writer import KinetoTrace

BF16 = "c10::BFloat16"
FP32 = "float"


def linear(t: KinetoTrace, at: float, m: int, k: int, n: int, kernel_us: float, *, dtype: str = BF16,
           kernel: str = "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32", gpu_at: float | None = None,
           grid=(216, 1, 1)) -> float:
    """aten::linear -> aten::t, aten::addmm (the real nesting); addmm launches one GEMM kernel. Returns its end (µs)."""
    t.cpu_op("aten::linear", at, 8.0, args={"Input Dims": [[m, k], [n, k], [n]], "Input type": [dtype] * 3,
                                              "Concrete Inputs": ["", "", ""]})
    t.cpu_op("aten::t", at + 0.5, 1.0, args={"Input Dims": [[n, k]], "Input type": [dtype], "Concrete Inputs": [""]})
    op = t.cpu_op("aten::addmm", at + 2, 5.0, args={"Input Dims": [[n], [m, k], [k, n], [], []],
                                                     "Input type": [dtype, dtype, dtype, "Scalar", "Scalar"],
                                                     "Concrete Inputs": ["", "", "", "1", "1"]})
    start = at + 10 if gpu_at is None else gpu_at
    t.kernel(kernel, start, kernel_us, launch_us=at + 3, op=op, grid=grid)
    return start + kernel_us


def pointwise(t: KinetoTrace, at: float, name: str, shape: list[int], kernel_us: float, *, dtype: str = BF16,
              gpu_at: float | None = None, kernel: str | None = None) -> float:
    """One eager elementwise op (``aten::mul`` ...) and its vectorized kernel."""
    op = t.cpu_op(name, at, 4.0, args={"Input Dims": [shape, shape], "Input type": [dtype, dtype], "Concrete Inputs": ["", ""]})
    start = at + 5 if gpu_at is None else gpu_at
    kname = kernel or f"void at::native::vectorized_elementwise_kernel<4, at::native::{name.split('::')[-1]}_kernel_cuda>"
    t.kernel(kname, start, kernel_us, launch_us=at + 1, op=op, grid=(216, 1, 1))
    return start + kernel_us
