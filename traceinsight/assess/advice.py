"""Which fix a finding shows, and in what order: the one home of the framework- and GPU-dependent choice.

A rule writes its fixes once per framework (``fix_pytorch``, ``fix_tensorflow``, ``fix_jax``, ``fix_cuda``) and,
where the right advice depends on the GPU generation, variants keyed ``"<framework>:<tier>"`` (``fix_variants``).
The engine calls :func:`apply` once per run, so every renderer (HTML, Markdown, text, JSON) shows the same fixes
in the same order without knowing why: the trace's own framework first, then the others, each in the variant its
GPU can run; a finding whose rule has no fix for the trace's framework shows none (``OWN_ONLY``), never another
framework's under its label. A Turing T4 must not be told to use TF32 or bf16, which it does not have, and FP8
only exists from Ada/Hopper (sm_89, sm_90) on.
"""

from __future__ import annotations

from typing import Iterable

from traceinsight.model.finding import Finding, Fix
from traceinsight.vocab.gpus import parse_cc
from traceinsight.model.timeline import TraceMeta

#: Display names of the frameworks fixes are written for, in the order they follow the leading one.
LABELS: dict[str, str] = {"pytorch": "PyTorch", "tensorflow": "TensorFlow", "jax": "JAX", "cuda": "CUDA"}

#: GPU generations whose advice differs. ``pre_ampere``: tensor cores without TF32/bf16 (Volta, Turing: fp16
#: autocast with a grad scaler); ``fp8``: FP8 tensor cores (Ada sm_89, Hopper sm_90 and later). Ampere-class GPUs
#: (sm_80..sm_87) get the rule's base fix.
TIERS: tuple[str, ...] = ("pre_ampere", "fp8")




def tier(cc: tuple[int, int] | None) -> str | None:
    """The advice tier of one compute capability; None for Ampere-class and for unknown GPUs (the base fix)."""
    if cc is None:
        return None
    if cc < (8, 0):
        return "pre_ampere"
    if cc >= (8, 9):
        return "fp8"
    return None


def trace_capability(meta: TraceMeta) -> tuple[int, int] | None:
    """The lowest compute capability among the trace's NVIDIA GPUs: advice must run on every one of them."""
    known = [c for c in (parse_cc(d.compute_capability) for d in meta.devices if not _other_vendor(d.vendor)) if c]
    return min(known) if known else None


def _other_vendor(vendor: str | None) -> bool:
    return bool(vendor) and "nvidia" not in str(vendor).lower()


#: The frameworks a trace is detected as (``derive.framework``): a trace of one of them is shown no other
#: framework's fix. A JAX program told to call ``torch.optim.AdamW(fused=True)`` learns nothing, and neither does a
#: plain CUDA or CuPy program (an Nsight capture with no framework's names) told to wrap ``train_step(batch)`` in
#: ``torch.profiler.profile``: the terminal and Markdown print the leading fix under "Fix in <framework>", so it
#: must be the trace's own. Only an ``"unknown"`` trace (no GPU work and no framework's names) keeps every
#: framework's fix, each under its own label: nothing tells which one is its.
OWN_ONLY = ("pytorch", "tensorflow", "jax", "cuda")


def choose(fixes: dict[str, Fix], framework: str, gpu_tier: str | None) -> dict[str, Fix]:
    """The fixes to show, ordered with ``framework`` first, each framework's variant for ``gpu_tier`` in place of
    its base fix. Variant keys never reach the reports; a framework with only variants keeps none. A finding with
    no fix for a framework in ``OWN_ONLY`` (every detected one: PyTorch, TensorFlow, JAX, plain CUDA) shows none
    rather than another framework's, so the fix that leads (the one the terminal and Markdown print) always fits
    the trace; HTML and JSON keep the other frameworks' fixes after it for reference."""
    if framework in OWN_ONLY and not (fixes.get(framework) or (gpu_tier and fixes.get(f"{framework}:{gpu_tier}"))):
        return {}
    order = [framework, *(f for f in LABELS if f != framework)]
    bases = [k for k in fixes if ":" not in k]
    order += [k for k in bases if k not in order]
    out: dict[str, Fix] = {}
    for fw in order:
        fx = fixes.get(f"{fw}:{gpu_tier}") if gpu_tier else None
        fx = fx or fixes.get(fw)
        if fx is not None and fx.text.strip():
            out[fw] = fx
    return out


def apply(findings: Iterable[Finding], framework: str, meta: TraceMeta) -> None:
    """Replace each finding's fixes by the ones :func:`choose` picks for this trace (in place, once per run).

    An ``"unknown"`` trace keeps every framework's fix, led by the one its profiler implies: the framework whose
    profiler wrote the format (PyTorch for kineto, TensorFlow for XPlane), and plain CUDA for a profiler no
    framework owns (Nsight Systems: an empty capture's fix is an ``nsys`` flag, not ``torch.profiler``)."""
    gpu_tier = tier(trace_capability(meta))
    if framework == "unknown":
        from traceinsight.ingest import input_format

        writers = input_format(meta.source_format).frameworks
        lead = writers[0] if writers else "cuda"
        for f in findings:
            picked = choose(f.fixes, "unknown", gpu_tier)
            f.fixes = {**({lead: picked[lead]} if lead in picked else {}), **picked}
        return
    for f in findings:
        f.fixes = choose(f.fixes, framework, gpu_tier)


def label(framework: str) -> str:
    return LABELS.get(framework, framework)
