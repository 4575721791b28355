"""What a GPU row's name says it does: one home for kernel classes (GEMM, attention, elementwise, ...).

A class groups kernels that do the same kind of work whatever library or vendor wrote them, so two traces of one
model on an NVIDIA and an AMD GPU (cuBLAS ``ampere_sgemm_*`` vs hipBLASLt/Tensile ``Cijk_*``, FlashAttention vs
CK ``fmha``) compare class by class. First match wins, in ``CLASSES`` order; copies and memsets are classed by
their kind, not their name.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .patterns import COLLECTIVE
from .masks import category_hits

#: Class names in the order they are tried (and shown).
CLASSES: tuple[str, ...] = ("communication", "attention", "gemm", "elementwise", "copy", "other")

#: Fused attention kernels: FlashAttention 1-3, cuDNN/CK fused MHA, xFormers, PyTorch's efficient attention, Triton's.
ATTENTION = r"flash|fmha|attention|attn|\bmha|_mha|sdpa|cutlass.*mem_eff|fused_multi_head"
#: Matrix multiply and convolution, NVIDIA (cuBLAS, cuBLASLt, cuDNN, CUTLASS, nvjet) and AMD (Tensile ``Cijk_``,
#: hipBLASLt, rocBLAS, MIOpen, Composable Kernel).
GEMM = (
    r"gemm|gemv|conv(?!ert|ersion)|cutlass|xmma|nvjet|wgmma|hmma|scudnn|hcudnn|wgrad|dgrad|winograd|implicit_|cublas|"
    r"matmul|^bmm_|\bsm[89]\d_|h884|s884|h1688|s1688|i8816|16816|16832|"
    r"^Cijk_|hipblaslt|rocblas|miopen|igemm|xdlops|ck::|device_gemm|naive_conv"
)
#: Pointwise and reduction kernels: PyTorch's elementwise/reduce templates, Triton pointwise/reduction, XLA fusions.
ELEMENTWISE = r"\bbn_|elementwise|pointwise|reduce|triton_(poi|red|per)|fusion|loop_|functor|unrolled|vectorized|_copy_kernel|fill|softmax|norm"

_ORDER = (("communication", COLLECTIVE), ("attention", ATTENTION), ("gemm", GEMM), ("elementwise", ELEMENTWISE))



def classify_names(names: "pd.Series | list[str]", kinds: "pd.Series | list[str] | None" = None) -> np.ndarray:
    """The class of each row (an object array of ``CLASSES`` values); ``kinds`` marks memcpy/memset rows as copies."""
    names = pd.Series(names, dtype="category") if not isinstance(names, pd.Series) else names.astype("category")
    cats = names.cat.categories.astype(str)
    codes = names.cat.codes.to_numpy()
    per_cat = np.full(len(cats), "other", dtype=object)
    open_ = np.ones(len(cats), dtype=bool)
    for cls, pattern in _ORDER:
        hit = category_hits(pd.Index(cats), re.compile(pattern, re.IGNORECASE)) & open_
        per_cat[hit] = cls
        open_ &= ~hit
    out = np.where(codes >= 0, per_cat[np.maximum(codes, 0)] if len(cats) else "other", "other").astype(object)
    if kinds is not None:
        k = np.asarray(pd.Series(kinds).astype(str).to_numpy(), dtype=object)
        out[(k == "memcpy") | (k == "memset")] = "copy"
    return out


def classify(name: str, kind: str = "kernel") -> str:
    """The class of one GPU row."""
    return str(classify_names([name], [kind])[0])
