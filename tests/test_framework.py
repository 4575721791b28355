"""detect_framework: planted Nsight captures (the format where any framework, or none, can appear), planted and real
PyTorch traces, and every real trace at hand (tests/data always, the corpus when present)."""

from __future__ import annotations

import pytest

import traceinsight
from traceinsight.derive.framework import detect_framework, framework_scores

from .conftest import corpus_file
from .helpers.kineto_writer import KinetoTrace
from .helpers.nsys_writer import NsysTrace


def _nsys(tmp_path, build) -> str:
    t = NsysTrace()
    build(t)
    return detect_framework(traceinsight.load(t.write(tmp_path / "t.sqlite")))


def test_plain_cuda_program_is_cuda(tmp_path):
    def build(t):
        t.memcpy("HtoD", 10_000, 50_000, 1 << 20, pageable=True, sync=True)
        t.kernel("vecAdd", 80_000, 20_000, demangled="vecAdd(const float *, const float *, float *, int)")
    assert _nsys(tmp_path, build) == "cuda"


def test_aten_nvtx_ranges_are_pytorch(tmp_path):
    def build(t):
        t.annotation("aten::mm", 0, 30_000)
        t.kernel("gemm", 10_000, 20_000)
    assert _nsys(tmp_path, build) == "pytorch"


def test_aten_kernels_alone_are_pytorch(tmp_path):
    """A capture without NVTX (``--trace=cuda``) still shows PyTorch in its kernels' namespaces."""
    def build(t):
        t.kernel("vectorized_elementwise_kernel", 10_000, 5_000,
                 demangled="void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)")
    assert _nsys(tmp_path, build) == "pytorch"


def test_tensorflow_kernels_are_tensorflow(tmp_path):
    def build(t):
        t.kernel("FillPhiloxRandomKernelLaunch", 10_000, 5_000,
                 demangled="void tensorflow::functor::FillPhiloxRandomKernelLaunch<float>(unsigned long long const*)")
    assert _nsys(tmp_path, build) == "tensorflow"


def test_xla_modules_of_jax_are_jax(tmp_path):
    def build(t):
        t.annotation("XlaModule:#hlo_module=jit_train_step,program_id=3#", 0, 40_000)
        t.kernel("loop_add_fusion", 10_000, 5_000, demangled="loop_add_fusion")
    assert _nsys(tmp_path, build) == "jax"


def test_no_gpu_work_is_unknown(tmp_path):
    def build(t):
        t.osrt("poll", 0, 1_000_000)
    assert _nsys(tmp_path, build) == "unknown"


def test_pytorch_profiler_trace_is_pytorch_even_without_ops(tmp_path):
    t = KinetoTrace()
    t.kernel("gemm", 100.0, 50.0)
    tl = traceinsight.load(t.write(tmp_path / "t.json"))
    assert detect_framework(tl) == "pytorch"


def test_scores_count_rows_once_per_framework(tmp_path):
    t = NsysTrace()
    t.annotation("aten::mm", 0, 30_000)
    t.annotation("aten::add", 40_000, 30_000)
    t.kernel("k", 10_000, 5_000, demangled="void at::native::k(int)")  # name and raw name: still one row
    scores = framework_scores(traceinsight.load(t.write(tmp_path / "t.sqlite")))
    assert scores == {"pytorch": 3, "tensorflow": 0, "jax": 0}


REAL = {
    "pytorch/kineto_resnet50_nw0_v100.pt.trace.json.gz": "pytorch",
    "pytorch/hta_amd_mi250_minitoy_train.json.gz": "pytorch",
    "nsys/nsys2026.1_torch-tiny_rtx3080.sqlite": "pytorch",  # --trace=cuda only: told by at::native kernels
    "nsys/nsys2026.2_fastvideo-train_2xH100_300ms-slice.sqlite": "pytorch",
    "tf/tensorflow-profiler-demo/GPU-multi-worker/34.83.195.179_6003.xplane.pb": "tensorflow",
    "tf/tensorflow-profiler-demo/GPU-multi-worker/34.83.195.179_6003.trace.json.gz": "tensorflow",
    "tf/tracelens-jax-mi300x/tw003.xplane.pb": "jax",
    # corpus only
    "nsys/nsys2025.5_vecadd-syncmemcpy_rtx3060.sqlite": "cuda",
    "nsys/nsys2025.5_cudafortran-osrt-nokernels_rtx4060.sqlite": "cuda",  # CUDA Fortran: runtime calls, no kernels
    "nsys/nsys2022.x_no-cuda-tables_rtxa2000.sqlite": "unknown",
    "nsys/nsys2024.6_nvfuser-pytorch_h200.sqlite": "pytorch",
    "nsys/nsys2022.1_dlprof-pytorch-cnn-cudnn_rtx2070s.sqlite": "pytorch",
    "tf/e4040-t4-keras-cnn/train/plugins/profile/2022_11_04_21_26_12": "tensorflow",
    "tf/generated-cpu/keras3-lstm_cudnn_eligible": "tensorflow",
    "tf/generated-cpu/keras2-gru_cudnn_eligible": "tensorflow",
}


@pytest.mark.parametrize("rel", sorted(REAL))
def test_real_traces(rel):
    assert detect_framework(traceinsight.load(corpus_file(rel))) == REAL[rel]


@pytest.mark.parametrize("sample, expected", [
    ("vecadd_sync.sqlite", "cuda"), ("keras_lstm_fallback", "tensorflow"), ("lstm_fallback.json.gz", "pytorch"),
])
def test_shipped_samples(repo, sample, expected):
    assert detect_framework(traceinsight.load(repo / "sample_traces" / sample)) == expected

