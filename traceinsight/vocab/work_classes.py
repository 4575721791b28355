"""What kind of work a kernel or a framework op does: the kernel classes of the efficiency view and the diff.

One home for these tables (kernel-name patterns, NVIDIA and AMD libraries alike, framework-op names and the FLOPs
formula each op gets), so the efficiency view, its rules, the diff (``kernels``, which groups these classes more
coarsely) and the renderers agree on what "GEMM" or "normalisation" means. Names are heuristics;
where a trace records shapes, the op a kernel was launched by decides its class and the name is only the fallback.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
import pandas as pd

from traceinsight.vocab.buckets import BY_ID
from traceinsight.vocab.patterns import COLLECTIVE, NOT_GEMM

#: The classes, in display order, with their labels.
CLASSES: dict[str, str] = {
    "gemm": "GEMM",
    "conv": "convolution",
    "attention": "attention",
    "elementwise": "elementwise/reduction",
    "norm": "normalisation",
    "communication": "communication",
    "copy": "copies",
    "other": "other",
}

#: How each class is painted (the roofline's points): copies and communication in their ledger buckets' colours, so a
#: class and the bucket its time lands in look the same on one page.
COLOURS: dict[str, str] = {
    "gemm": "#1f77b4", "conv": "#5c940d", "attention": "#9467bd", "elementwise": "#ff7f0e", "norm": "#d62728",
    "communication": BY_ID["communication"].colour, "copy": BY_ID["copy"].colour, "other": "#7f7f7f",
}

#: Classes whose FLOPs run on matrix units (tensor cores, matrix cores): the "model FLOPs" of MFU.
MATRIX_CLASSES: tuple[str, ...] = ("gemm", "conv", "attention")

#: The classes of matrix-multiply and convolution work: what "GEMM/convolution kernels" means everywhere (the
#: efficiency view's GEMM and convolution rows, TI007's GEMM time, the what-if's faster GEMMs, the diff's "gemm").
#: There is no other definition of a GEMM kernel in the package.
GEMM_CLASSES: tuple[str, ...] = ("gemm", "conv")

#: Kernels that only reorder a tensor's memory layout (cuDNN's NCHW<->NHWC conversions around a convolution,
#: transposes): memory-bound elementwise work whatever op launched them. A convolution's op launches them beside its
#: math kernels, and classed by that op they would count as convolution time run on CUDA cores (TI007) and dilute
#: the convolution's rates; their fix is a layout (``channels_last``), not tensor cores.
LAYOUT_KERNEL = re.compile(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw|FoldedNhwc|NhwcToFolded|\btranspose|_transpose|permute", re.I)

#: Kernel-name patterns, first match wins (case-insensitive). Triton/inductor kernels are classed by their name
#: prefix (``triton_poi_`` pointwise, ``triton_red_``/``triton_per_`` reductions, ``triton_tem_`` templates: GEMMs).
#: AMD's GEMMs (Tensile ``Cijk_*``, hipBLASLt, rocBLAS, Composable Kernel ``ck::``) are GEMMs like cuBLAS's. FBGEMM's
#: ``fbgemm_gpu::`` kernels (embedding lookups, permutes) say "gemm" but gather memory: elementwise, first.
KERNEL_PATTERNS: tuple[tuple[str, "re.Pattern[str]"], ...] = tuple(
    (cls, re.compile(rx, re.I))
    for cls, rx in (
        ("communication", COLLECTIVE),
        ("elementwise", NOT_GEMM),
        # FlashAttention, CK/aiter ``fmha``, cuDNN ``..._sdpa``, xFormers, FlashInfer, SageAttention (``sage_fwd``;
        # its ``sage_quant_kernel`` quantises Q/K and is elementwise work, below)
        ("attention", r"flash|fmha|attention|attn|sdpa|\bmha_|_mha\b|cutlass.*mem_eff|fused_multi_head|"
                      r"sage_?(?:fwd|bwd|attn)|sageattn|xformers|flashinfer"),
        ("conv", r"conv(?!ert|ersion)|winograd|implicit_convolve|_fprop|fprop_|dgrad|wgrad|scudnn|hcudnn|miopen.*conv|igemm|fft2d_|im2col|flip_filter|naive_conv"),
        ("gemm", r"gemm|gemv|cutlass|nvjet|wgmma|matmul|cublas|\bCijk_|triton_tem_|\bmm_|_mm\b|\bbmm|magma|xmma|hmma|h884|s884|h1688|s1688|i8816|16816|16832|"
                 r"hipblaslt|rocblas|miopen|xdlops|ck::|device_gemm|\bsm[89]\d_"),
        ("norm", r"norm|welford|\bbn_|_bn_|batchnorm|layernorm|rmsnorm"),
        ("elementwise", r"elementwise|pointwise|vectorized|unrolled|reduce|reduction|softmax|triton_(poi|red|per)_|index|scatter|gather|loop_|functor|"
                        r"\bcat\b|CatArray|copy|fill|where|dropout|relu|gelu|silu|sigmoid|tanh|embedding|sort|topk|cumsum|"
                        r"\bmul|\badd|\bdiv|\bsub|pow|exp|sqrt|clamp|threshold|adam|sgd|foreach|amp_|cast|convert|"
                        r"nchwToNhwc|nhwcToNchw|transpose|permute|scalePackedTensor|computeOffsets|computeBOffsets|"
                        r"EigenMetaKernel|Eigen::internal|nvfuser_|fusion|quant"),
    )
)

#: Framework ops with a FLOPs/bytes model: name -> (class, formula). Ops not listed carry no count; an op nested in a
#: listed op is what is counted (``aten::linear`` is counted through its ``aten::addmm`` child, never twice).
OP_FORMULAS: dict[str, tuple[str, str]] = {
    **{f"aten::{n}": ("gemm", n) for n in ("mm", "addmm", "_addmm_activation", "bmm", "baddbmm", "addbmm", "matmul",
                                           "linear", "einsum", "mv", "addmv", "dot", "_scaled_mm")},
    **{f"aten::{n}": ("conv", "conv") for n in ("convolution", "_convolution", "conv1d", "conv2d", "conv3d")},
    "aten::convolution_backward": ("conv", "conv_backward"),
    "aten::cudnn_convolution_backward": ("conv", "conv_backward_self_first"),
    "aten::miopen_convolution_backward": ("conv", "conv_backward_self_first"),
    **{f"aten::{n}": ("attention", "sdpa") for n in (
        "scaled_dot_product_attention", "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu")},
    **{f"aten::{n}": ("attention", "sdpa_backward") for n in (
        "_scaled_dot_product_flash_attention_backward", "_scaled_dot_product_efficient_attention_backward",
        "_scaled_dot_product_cudnn_attention_backward")},
    **{f"aten::{n}": ("norm", "bytes") for n in (
        "native_layer_norm", "native_layer_norm_backward", "native_batch_norm", "native_batch_norm_backward",
        "cudnn_batch_norm", "cudnn_batch_norm_backward", "miopen_batch_norm", "miopen_batch_norm_backward",
        "native_group_norm", "native_group_norm_backward", "_fused_rms_norm", "rms_norm", "_batch_norm_impl_index",
        "batch_norm", "layer_norm", "group_norm")},
    **{f"aten::{n}": ("copy", "copy") for n in ("copy_", "_to_copy", "clone", "contiguous", "cat", "index_select", "embedding")},
    **{f"aten::{n}": ("elementwise", "elementwise") for n in (
        "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "neg", "pow", "rsqrt", "sqrt", "exp", "log", "abs",
        "relu", "relu_", "gelu", "gelu_backward", "silu", "silu_", "silu_backward", "sigmoid", "sigmoid_backward",
        "tanh", "tanh_backward", "threshold_backward", "clamp", "clamp_min", "clamp_min_", "where", "masked_fill",
        "masked_fill_", "_softmax", "_softmax_backward_data", "_log_softmax", "_log_softmax_backward_data", "softmax",
        "dropout", "native_dropout", "native_dropout_backward", "fill_", "zero_", "addcmul_", "addcdiv_", "lerp_",
        "sin", "cos", "_foreach_add_", "_foreach_mul_", "mse_loss", "mse_loss_backward", "nll_loss_forward",
        "nll_loss_backward", "hardtanh", "hardtanh_", "leaky_relu", "leaky_relu_", "erf")},
    **{f"aten::{n}": ("elementwise", "reduction") for n in ("sum", "mean", "amax", "max", "min", "norm", "var_mean", "std")},
}

#: Dtype names as PyTorch's profiler prints them ("Input type") -> (short dtype, bytes per element).
DTYPES: dict[str, tuple[str, int]] = {
    "float": ("fp32", 4), "double": ("fp64", 8), "c10::Half": ("fp16", 2), "c10::BFloat16": ("bf16", 2),
    "c10::Float8_e4m3fn": ("fp8", 1), "c10::Float8_e5m2": ("fp8", 1), "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1), "signed char": ("int8", 1), "unsigned char": ("uint8", 1), "bool": ("bool", 1),
    "short int": ("int16", 2), "int": ("int32", 4), "long int": ("int64", 8), "c10::complex<float>": ("c64", 8),
}

#: Tensor-core markers in GEMM kernel names that mean an FP32 matmul ran as TF32 (Ampere+). cuBLAS's FP32 SIMT
#: kernels are xmma-named too (``sm80_xmma_gemm_f32f32_..._ffma_...``: fused multiply-add on CUDA cores): a name
#: that says ``ffma`` or ``simt`` is not TF32.
TF32_KERNEL = re.compile(r"^(?!.*(?:ffma|simt)).*(?:tf32|xmma|s1688|s16816|tensorop_s|wgmma|nvjet|sm8\d_xmma|sm9\d_xmma)", re.I)


@lru_cache(maxsize=4096)
def kernel_class_of(name: str) -> str:
    """The class a kernel name suggests ("other" when none). Kept per name: every rank of a job asks about the
    same few names, each answer a dozen regex searches."""
    for cls, rx in KERNEL_PATTERNS:
        if rx.search(name):
            return cls
    return "other"


def kernel_classes(names: "pd.Series") -> np.ndarray:
    """The class of each row of a kernel-name column (an object array; "other" for a missing name), one
    ``kernel_class_of`` per distinct name: the one way every user of the classes reads a column."""
    if not len(names):
        return np.zeros(0, dtype=object)
    if isinstance(names.dtype, pd.CategoricalDtype):
        per = np.array([kernel_class_of(str(c)) for c in names.cat.categories] + ["other"], dtype=object)
        codes = names.cat.codes.to_numpy()
        return per[np.where(codes >= 0, codes, len(per) - 1)]
    return np.array([kernel_class_of(str(n)) for n in names], dtype=object)


def is_gemm_class(classes: np.ndarray) -> np.ndarray:
    """Rows of a class array that are GEMM/convolution work (``GEMM_CLASSES``)."""
    return np.isin(np.asarray(classes, dtype=object), GEMM_CLASSES)
