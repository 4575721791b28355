"""What a trace shows is already in use, so a fix never advises it again: a model on the foreach or fused optimizer
is not told to use foreach, a compiled model is not told to compile, a step replayed as a CUDA graph is not told to
capture one, a TensorFlow step that already runs as a ``tf.function`` (every Keras ``fit``) is not told to wrap it
in one.

Each answer is read from the names the framework leaves in the trace (``IN_USE``: host ops and ranges, kernels,
runtime calls) and kept in the analysis' store (``memo``): several rules ask. Part of ``traceinsight.rulelib``,
the public helper library of the rules.
"""

from __future__ import annotations

import re

import pandas as pd

from traceinsight.rulelib.cache import memo

#: Technique -> the names that show it ran. Foreach optimizers run ``aten::_foreach_*`` ops (kernels:
#: ``multi_tensor_apply_kernel`` with a foreach functor); fused ones ``aten::_fused_adam(w)_`` / ``_fused_sgd_`` (kernels
#: named ``Fused...``); torch.compile leaves ``Torch-Compiled Region``, ``CompiledFunction``, inductor's
#: ``## Call CompiledFxGraph`` ranges and ``triton_`` kernels; CUDA/HIP graphs a ``cudaGraphLaunch`` (or, while they
#: are made, a stream capture or a graph instantiation). A
#: ``tf.function`` runs as a concrete function named ``__inference_<name>_<id>`` (``EagerExecute:
#: __inference_train_function_1047`` when Keras calls its ``train_function``); eager TensorFlow has none.
IN_USE: dict[str, re.Pattern[str]] = {
    "foreach_optimizer": re.compile(r"^aten::_foreach_|foreach_tensor|ForeachFunctor|_foreach_kernel", re.I),
    "fused_optimizer": re.compile(r"^aten::_fused_(adam|adamw|sgd|adagrad)|Fused(Adam|AdamW|SGD)|fused_adam|FusedOptimizer|multi_tensor_adam", re.I),
    "compiled": re.compile(r"^Torch-Compiled Region|^CompiledFunction|CompiledFxGraph|^TorchDynamo|^triton_(poi|red|per|tem|mm)_|inductor", re.I),
    # a launch replays a graph; a capture or an instantiation makes one (a trace of vLLM's or Inductor's capture
    # phase has those and no launch yet): either way the program already uses CUDA/HIP graphs
    "graphs": re.compile(r"^(cuda|hip)GraphLaunch|^cuGraphLaunch|^(cuda|hip|cu)StreamBeginCapture|^(cuda|hip|cu)GraphInstantiate", re.I),
    "tf_function": re.compile(r"__inference_"),
    # a PyTorch DataLoader with num_workers > 0 iterates through ``_MultiProcessingDataLoaderIter``
    "loader_workers": re.compile(r"_MultiProcessingDataLoaderIter"),
}
#: A name is read this far (kernel names run to kilobytes; these signs sit at their start).
_HEAD = 256


def in_use(views) -> frozenset[str]:
    """The techniques of ``IN_USE`` that the trace shows ran (any row, any kind)."""

    def build() -> frozenset[str]:
        ev = views.timeline.events
        names = ev["name"]
        uniq = names.cat.categories if isinstance(names.dtype, pd.CategoricalDtype) else pd.unique(names.dropna())
        heads = [str(u)[:_HEAD] for u in uniq]
        return frozenset(k for k, rx in IN_USE.items() if any(rx.search(h) for h in heads))

    return memo(views, "inuse.in_use", build)
