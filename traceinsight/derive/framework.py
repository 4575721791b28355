"""Which framework produced the work in a trace, so advice can lead with the fix the user can actually apply.

The source format settles most cases (its record's ``frameworks``, ``ingest.input_format``): a PyTorch Profiler
trace is PyTorch. An XPlane or TensorFlow trace JSON is written by TensorFlow or by JAX (same profiler, same format),
and an Nsight Systems capture can hold any of them or a plain CUDA program; those are told apart by the names the framework leaves behind: ATen ops and kernels
from ``at::native`` (PyTorch), TensorFlow op lines, executor threads, ``tf.data`` and ``tensorflow::`` kernels
(TensorFlow), ``jit_*`` XLA modules and the PJRT / ``py_xla_execute`` threads (JAX). An Nsight capture with CUDA
calls or GPU work and none of those names is a plain CUDA program.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from traceinsight.ingest import input_format

if TYPE_CHECKING:  # pragma: no cover
    from traceinsight.model.timeline import Timeline

FRAMEWORKS = ("pytorch", "tensorflow", "jax", "cuda", "unknown")

#: Names only one framework writes, searched in event names, raw names, source categories and thread names:
#: (prefixes, substrings). Plain string tests, not regexes: kernel names run to kilobytes and there are many.
SIGNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "pytorch": (
        ("aten::", "ProfilerStep#", "enumerate(DataLoader)", "Optimizer.step", "Optimizer.zero_grad", "nn.Module:",
         "autograd::", "torch/", "torch."),
        ("at::native::", "c10::"),
    ),
    "tensorflow": (
        ("TensorFlow Ops", "TensorFlow Name Scope", "tf_Compute", "tf_data_", "tf_gpu_private", "tf_GPU_Event_Manager",
         "tf_numa", "IteratorGetNext", "Iterator::", "__inference_"),
        ("tensorflow::", "StatefulPartitionedCall", "keras", "Keras"),
    ),
    "jax": (
        ("jit_", "py_xla_execute", "tf_pjrt_thread_pool", "XlaModule", "PjitFunction"),
        ("pjit", "/jax/", "jax."),
    ),
}  # fmt: skip

#: How a profiler's tool name spells each framework ("TensorFlow/XLA profiler" run by JAX names it).
TOOL_WORDS = {"pytorch": "PyTorch", "tensorflow": "TensorFlow", "jax": "JAX"}

#: Kinds that show CUDA (or HIP) work at all.
_GPU_KINDS = ("kernel", "memcpy", "memset", "runtime", "gpu_sync")


#: Signs sit at the start of a name (a C++ kernel's namespace, an op prefix); no need to read kilobytes past it.
_HEAD = 256


def framework_scores(timeline: Timeline) -> dict[str, int]:
    """Rows carrying each framework's names (a row counts once per framework, whichever column holds the name)."""
    ev = timeline.events
    hits = {framework: np.zeros(len(ev), dtype=bool) for framework in SIGNS}
    for col in ("name", "raw_name", "category", "thread_name"):
        if col not in ev:
            continue
        codes, uniques = _codes(ev[col])
        heads = [str(u)[:_HEAD] for u in uniques]
        for framework, (prefixes, parts) in SIGNS.items():
            hit = np.fromiter(
                (h.startswith(prefixes) or any(p in h for p in parts) for h in heads), dtype=bool, count=len(heads)
            )
            if hit.any():
                hits[framework] |= (codes >= 0) & hit[np.maximum(codes, 0)]
    return {framework: int(hit.sum()) for framework, hit in hits.items()}


def _codes(values: pd.Series) -> tuple[np.ndarray, "pd.Index | np.ndarray"]:
    """Integer codes and the distinct values they index (-1 for missing): regexes then run once per value."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        return values.cat.codes.to_numpy(), values.cat.categories
    return pd.factorize(values, use_na_sentinel=True)


def detect_framework(timeline: Timeline) -> str:
    """``"pytorch"``, ``"tensorflow"``, ``"jax"``, ``"cuda"`` (CUDA work, no framework) or ``"unknown"``."""
    writers = input_format(timeline.meta.source_format).frameworks
    if len(writers) == 1:
        return writers[0]  # e.g. torch.profiler wrote it, whatever ran under it
    scores = framework_scores(timeline)
    if writers:  # one profiler, several frameworks: the first unless the trace's names (or the tool) show another
        first, *others = writers
        tool = timeline.meta.tool or ""
        for other in others:
            if scores[other] > scores[first] or (scores[first] == 0 and TOOL_WORDS.get(other, other) in tool):
                return other
        return first
    best = max(SIGNS, key=lambda f: scores[f])
    if scores[best] > 0:
        return best
    if timeline.events["kind"].isin(_GPU_KINDS).any():
        return "cuda"
    return "unknown"
