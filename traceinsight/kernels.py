"""The kernel classes a diff compares by (GEMM, attention, elementwise, ...), from ``work_classes``' name patterns.

A class groups kernels that do the same kind of work whatever library or vendor wrote them, so two traces of one
model on an NVIDIA and an AMD GPU (cuBLAS ``ampere_sgemm_*`` vs hipBLASLt/Tensile ``Cijk_*``, FlashAttention vs
CK ``fmha``) compare class by class. First match wins, in ``work_classes.KERNEL_PATTERNS`` order; copies and memsets are classed by
their kind, not their name.
"""

from __future__ import annotations


import numpy as np
import pandas as pd

from .masks import category_hits
from .work_classes import KERNEL_PATTERNS

#: The diff's classes, in the order they are shown: the efficiency view's classes (``work_classes``, the one home of
#: what kernel names mean) grouped so that one model compares across vendors and libraries (cuDNN convolutions and
#: hipBLASLt GEMMs are both matrix math; normalisation and pointwise kernels are both memory-bound elementwise work).
CLASSES: tuple[str, ...] = ("communication", "attention", "gemm", "elementwise", "copy", "other")
COARSE: dict[str, str] = {"gemm": "gemm", "conv": "gemm", "attention": "attention", "elementwise": "elementwise",
                          "norm": "elementwise", "communication": "communication", "copy": "copy", "other": "other"}


def classify_names(names: "pd.Series | list[str]", kinds: "pd.Series | list[str] | None" = None) -> np.ndarray:
    """The class of each row (an object array of ``CLASSES`` values); ``kinds`` marks memcpy/memset rows as copies."""
    names = pd.Series(names, dtype="category") if not isinstance(names, pd.Series) else names.astype("category")
    cats = names.cat.categories.astype(str)
    codes = names.cat.codes.to_numpy()
    per_cat = np.full(len(cats), "other", dtype=object)
    open_ = np.ones(len(cats), dtype=bool)
    for cls, pattern in KERNEL_PATTERNS:
        hit = category_hits(pd.Index(cats), pattern) & open_
        per_cat[hit] = COARSE[cls]
        open_ &= ~hit
    out = np.where(codes >= 0, per_cat[np.maximum(codes, 0)] if len(cats) else "other", "other").astype(object)
    if kinds is not None:
        k = np.asarray(pd.Series(kinds).astype(str).to_numpy(), dtype=object)
        out[(k == "memcpy") | (k == "memset")] = "copy"
    return out


def classify(name: str, kind: str = "kernel") -> str:
    """The class of one GPU row."""
    return str(classify_names([name], [kind])[0])
