"""The kernel classes a diff compares by (GEMM, attention, elementwise, ...), from ``work_classes``' name patterns.

A class groups kernels that do the same kind of work whatever library or vendor wrote them, so two traces of one
model on an NVIDIA and an AMD GPU (cuBLAS ``ampere_sgemm_*`` vs hipBLASLt/Tensile ``Cijk_*``, FlashAttention vs
CK ``fmha``) compare class by class. Classed by ``work_classes.kernel_classes`` (first match wins, in ``KERNEL_PATTERNS`` order); copies and memsets are classed by
their kind, not their name.
"""

from __future__ import annotations


import numpy as np
import pandas as pd

from traceinsight.vocab.work_classes import kernel_classes

#: The diff's classes, in the order they are shown: the efficiency view's classes (``work_classes``, the one home of
#: what kernel names mean) grouped so that one model compares across vendors and libraries (cuDNN convolutions and
#: hipBLASLt GEMMs are both matrix math; normalisation and pointwise kernels are both memory-bound elementwise work).
CLASSES: tuple[str, ...] = ("communication", "attention", "gemm", "elementwise", "copy", "other")
COARSE: dict[str, str] = {"gemm": "gemm", "conv": "gemm", "attention": "attention", "elementwise": "elementwise",
                          "norm": "elementwise", "communication": "communication", "copy": "copy", "other": "other"}


def classify_names(names: "pd.Series | list[str]", kinds: "pd.Series | list[str] | None" = None) -> np.ndarray:
    """The class of each row (an object array of ``CLASSES`` values); ``kinds`` marks memcpy/memset rows as copies."""
    names = pd.Series(names, dtype="category") if not isinstance(names, pd.Series) else names.astype("category")
    out = pd.Series(kernel_classes(names), dtype=object).map(COARSE).to_numpy(dtype=object)
    if kinds is not None:
        k = np.asarray(pd.Series(kinds).astype(str).to_numpy(), dtype=object)
        out[(k == "memcpy") | (k == "memset")] = "copy"
    return out


def classify(name: str, kind: str = "kernel") -> str:
    """The class of one GPU row."""
    return str(classify_names([name], [kind])[0])
