"""Name patterns and interval arithmetic shared by rules TI005-TI010.

Kept apart from ``_common.py`` (owned by the TI001-TI004 author) so the two sets of rules can evolve without
stepping on each other. Everything here is vectorized: rules call these once per trace, never per event.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

# --- input pipeline (TI005) ------------------------------------------------------------------------------
#: Host ranges during which the training loop waits for its next batch. PyTorch's profiler wraps every
#: ``next(iter(loader))`` in ``enumerate(DataLoader)#<Iter>.__next__`` (tb_plugin event_parser.py uses the same
#: prefix, plus ``enumerate(DataPipe)#``); TF's consumer side is ``IteratorGetNext`` (xprof HOST_WAIT_INPUT).
DATA_WAIT_PRIMARY = r"^enumerate\((?:DataLoader|DataPipe)\)#|DataLoader.*__next__|IteratorGetNext"
#: tf.data's own ``Iterator::...`` TraceMe ranges; only waits when seen on a consumer thread (see TI005).
DATA_WAIT_TFDATA = r"^Iterator::"

# --- GEMM / convolution kernels (TI007) ----------------------------------------------------------------
#: Kernels doing matrix-multiply or convolution work (cuBLAS, cuBLASLt, cuDNN, CUTLASS, xmma, Hopper nvjet).
GEMM_CONV = (
    r"gemm|gemv|conv(?!ert)|cutlass::Kernel|cutlass::gemm|cutlass_|cutlass3x|xmma|nvjet|wgmma|hmma|scudnn|hcudnn|"
    r"wgrad|dgrad|winograd|implicit_|cublas|magma|matmul|^bmm_|\bsm[89]\d_|h884|s884|h1688|s1688|i8816|16816|16832"
)
#: Library namespaces whose names contain "gemm" but whose kernels are not GEMMs (FBGEMM's sparse/permute ops).
NOT_GEMM = r"fbgemm_gpu::"
#: Tensor-core kernel names: tb_plugin tensor_core.py TC_Allowlist and xprof kernel_stats_utils.cc, extended with
#: CUTLASS ``tensorop``, Hopper ``wgmma``/``gmma``/``nvjet``, cuBLASLt ``sm80_``/``sm90_`` and explicit tf32/bf16/f16 tags.
TENSOR_CORE = (
    r"h884|s884|h1688|s1688|c1688|hmma|i8816|16816|i16832|xmma|tensorop|wgmma|gmma|nvjet|\bsm[89]\d_|"
    r"tf32|bf16|bfloat16|f16f16|_fp16|_f16_|imma|e4m3|e5m2|e2m1|fp8|conv1x1|conv2d_c1_k1|dgrad_1x1_stride_2x2|first_layer_wgrad_kernel"
)
#: Names that mean CUDA cores even when a TC substring also matches (e.g. ``cutlass_80_simt_sgemm``).
NOT_TENSOR_CORE = r"simt|sgemm|gemv|scudnn|cgemm|wgrad_alg0|dgrad_engine|gemmSN|gemmk1"
#: FP64 math is not helped by AMP or TF32; left out of the share entirely.
FP64 = r"dgemm|zgemm|\bd_?gemm|double"

# --- collectives (TI008, TI009) ------------------------------------------------------------------------
NCCL = r"nccl|rccl"
#: Collective kernels, NCCL or not (symmetric-memory all-reduce, custom all-to-all): few blocks and peer waits by design.
COLLECTIVE = r"nccl|rccl|multimem|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce"

#: NVIDIA GPUs before Volta (compute capability < 7): no tensor cores.
PRE_VOLTA = r"\b(?:[KMP]\d{1,3}\b|GP100|GP10\d|GTX\s*(?:9|10)\d\d|TITAN\s*X|Tesla\s*[KMP]|Quadro\s*[KMP]\d)"
#: NVIDIA GPUs with tensor cores, by marketing name (used only when compute capability is absent).
TENSOR_CORE_GPU = (
    r"V100|TITAN\s*V|T4\b|RTX|A\d{2,4}\b|A100|A800|H100|H200|H800|GH200|B100|B200|GB200|GB300|B300|L4\b|L40|"
    r"Quadro\s*(?:RTX|GV100)|GV100|Jetson\s*(?:AGX\s*)?(?:Xavier|Orin)"
)
NON_NVIDIA = r"AMD|Radeon|Instinct|\bMI\d{3}|Intel|Gaudi|TPU"


def name_mask(names: pd.Series, pattern: str, case: bool = False) -> np.ndarray:
    """Regex match over a (usually categorical) name column, evaluated once per distinct name."""
    if len(names) == 0:
        return np.zeros(0, dtype=bool)
    if isinstance(names.dtype, pd.CategoricalDtype):
        cats = names.cat.categories.astype(str)
        hit = np.asarray(pd.Series(cats).str.contains(pattern, case=case, regex=True), dtype=bool)
        codes = names.cat.codes.to_numpy()
        out = np.zeros(len(names), dtype=bool)
        ok = codes >= 0
        out[ok] = hit[codes[ok]]
        return out
    return np.asarray(names.astype(str).str.contains(pattern, case=case, regex=True), dtype=bool)


def matches(text: str | None, pattern: str) -> bool:
    return bool(text) and re.search(pattern, str(text), flags=re.IGNORECASE) is not None


def merge_grouped(groups: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pd.DataFrame:
    """Union of [start, end) intervals within each group; returns group, start_ns, end_ns sorted.

    One lexsort and a grouped running max: nested or overlapping ranges (an op inside an op, two threads
    waiting at once) count once, which is what "time spent waiting" means.
    """
    if len(starts) == 0:
        return pd.DataFrame({"group": np.zeros(0, np.int64), "start_ns": np.zeros(0, np.int64), "end_ns": np.zeros(0, np.int64)})
    g = np.asarray(groups, dtype=np.int64)
    s = np.asarray(starts, dtype=np.int64)
    e = np.maximum(np.asarray(ends, dtype=np.int64), s)
    order = np.lexsort((s, g))
    g, s, e = g[order], s[order], e[order]
    run_end = pd.Series(e).groupby(g).cummax().to_numpy()
    new = np.ones(len(s), dtype=bool)
    new[1:] = (g[1:] != g[:-1]) | (s[1:] > run_end[:-1])
    idx = np.flatnonzero(new)
    return pd.DataFrame({"group": g[idx], "start_ns": s[idx], "end_ns": np.maximum.reduceat(e, idx)})


def covered_ns(a: np.ndarray, b: np.ndarray, gs: np.ndarray, ge: np.ndarray) -> np.ndarray:
    """For each query [a_i, b_i): how much of it lies inside the disjoint, sorted intervals [gs, ge).

    Uses the cumulative covered length C(t), so the cost is two searchsorted calls whatever the sizes.
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    if len(gs) == 0 or len(a) == 0:
        return np.zeros(len(a), dtype=np.int64)
    gs = np.asarray(gs, dtype=np.int64)
    ge = np.asarray(ge, dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(ge - gs)])

    def c(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(gs, t, side="right")
        tail = np.where(k > 0, np.maximum(ge[np.maximum(k - 1, 0)] - t, 0), 0)
        return cum[k] - tail

    return np.maximum(c(np.maximum(b, a)) - c(a), 0)


def grid_blocks(grid: pd.Series) -> np.ndarray:
    """Blocks per launch from the ``grid`` column ("x,y,z"); NaN where the source gave none."""
    if len(grid) == 0:
        return np.zeros(0, dtype=float)
    if isinstance(grid.dtype, pd.CategoricalDtype):
        cats = pd.Series(grid.cat.categories.astype(str))
        parts = cats.str.extract(r"^\s*\[?\s*(\d+)\s*[, x]\s*(\d+)\s*[, x]\s*(\d+)")
        prod = parts.astype(float).prod(axis=1, min_count=3).to_numpy()
        codes = grid.cat.codes.to_numpy()
        out = np.full(len(grid), np.nan)
        ok = codes >= 0
        out[ok] = prod[codes[ok]]
        return out
    parts = grid.astype(str).str.extract(r"^\s*\[?\s*(\d+)\s*[, x]\s*(\d+)\s*[, x]\s*(\d+)")
    return parts.astype(float).prod(axis=1, min_count=3).to_numpy()
