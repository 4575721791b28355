"""Are BASE and HEAD the same workload? And what differs around it (GPU, vendor, tool), shown but never judged.

The framework ops per step (top-level ops, vendor-neutral) must largely agree (``MIN_IN_COMMON``), and so must their
input shapes, tensor by tensor, once the batch dimension is set aside. Without framework ops (an Nsight Systems trace
of a CUDA program) the kernel names per step stand in. When the ops a trace records launch little of the step's GPU
work (``MIN_OPS_GPU_SHARE``: a TF graph or a jitted JAX step records a few host ops, the kernels run under the
runtime), they say little of what the step runs, so the kernels per step are compared too, by class (gemm,
elementwise, ...: vendor-neutral), and the lower figure counts. Step markers must be on both sides or on neither.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from typing import Any

from traceinsight.delta import side as S
from traceinsight.delta.stats import MIN_SAMPLES
from traceinsight.vocab.patterns import PRECISION_OP

#: Share of the per-step framework ops (or kernels) both sides must have in common to be compared.
MIN_IN_COMMON = 80.0
#: The framework ops describe the step when the GPU time they launched is at least this share (%) of the step's GPU
#: time on both sides; below it the kernels per class are compared as well. Two Keras CNNs read "100 % of the
#: framework ops in common" from two ``GatherV2`` and a ``LogicalAnd`` (0.07 % of the GPU time) while their steps ran
#: 105 and 162 elementwise kernels.
MIN_OPS_GPU_SHARE = 50.0


def _similarity(x: dict[Any, float], y: dict[Any, float]) -> float:
    """Per-step counts both sides share, as % of the larger side's (100: the same multiset)."""
    tx, ty = sum(x.values()), sum(y.values())
    if max(tx, ty) <= 0:
        return 100.0
    common = sum(min(x.get(k, 0.0), y.get(k, 0.0)) for k in set(x) | set(y))
    return 100.0 * common / max(tx, ty)


def _differences(x: dict[str, float], y: dict[str, float], n: int = 5) -> list[str]:
    keys = sorted(set(x) | set(y), key=lambda k: (-abs(x.get(k, 0.0) - y.get(k, 0.0)), k))
    return [f"{k}: {x.get(k, 0.0):g} -> {y.get(k, 0.0):g} per step" for k in keys[:n] if abs(x.get(k, 0.0) - y.get(k, 0.0)) > 1e-9]


def comparability(base: S.Side, head: S.Side) -> dict[str, Any]:
    """Whether BASE and HEAD run the same workload, with the evidence and the reasons when they do not."""
    reasons: list[str] = []
    wa, wb = base.workload, head.workload
    if wa is None or wb is None:
        which = " and ".join(n for n, w in (("BASE", wa), ("HEAD", wb)) if w is None)
        return {"comparable": False, "matched_by": None, "in_common_pct": None, "shapes_in_common_pct": None,
                "batch_base": None, "batch_head": None,
                "reasons": [f"{which}: a report without a workload block (written before traceinsight could diff); analyse the trace again"]}
    ops_a = {o["name"]: float(o["per_step"]) for o in wa.get("ops", []) if o.get("per_step")}
    ops_b = {o["name"]: float(o["per_step"]) for o in wb.get("ops", []) if o.get("per_step")}
    ops_a, ops_b, cast_note = _without_precision_ops(ops_a, ops_b)
    if cast_note:
        reasons.append(cast_note)
    if ops_a and ops_b:
        matched_by, x, y = "framework_ops", ops_a, ops_b
    else:
        matched_by = "kernels"
        x = {k["name"]: float(k["per_step"]) for k in wa.get("kernels", []) if k.get("per_step")}
        y = {k["name"]: float(k["per_step"]) for k in wb.get("kernels", []) if k.get("per_step")}
        if bool(ops_a) != bool(ops_b):
            reasons.append("only " + ("BASE" if ops_a else "HEAD") + " records framework ops; compared by kernel names")
    in_common = _similarity(x, y)
    what = "framework ops" if matched_by == "framework_ops" else "kernels"
    if matched_by == "framework_ops":
        share = min(_ops_gpu_share(wa), _ops_gpu_share(wb))
        if share < MIN_OPS_GPU_SHARE:
            ca, cb = _class_counts(wa), _class_counts(wb)
            by_class = _similarity(ca, cb)
            reasons.append(f"the framework ops launch {share:.1f}% of the GPU time per step (at least {MIN_OPS_GPU_SHARE:.0f}% to speak for the "
                           f"step): the kernels per class are compared too ({in_common:.0f}% of the framework ops, {by_class:.0f}% of the "
                           "kernels by class in common)")
            if by_class < in_common:
                matched_by, what, in_common, x, y = "kernel_classes", "kernels by class", by_class, ca, cb
    ok = in_common >= MIN_IN_COMMON
    if not ok:
        diffs = _differences(x, y)
        most = f", most of all {diffs[0]}" if diffs else ""
        reasons.insert(0, f"only {in_common:.0f}% of the {what} per step are in common (at least {MIN_IN_COMMON:.0f}% needed): the two run different {what}{most}")
        reasons.extend(diffs)
    ba, bb = wa.get("batch"), wb.get("batch")
    shapes_pct = None
    sa = {k: v for k, v in _shape_counts(wa).items() if not _PRECISION_OP.search(k[0])}
    sb = {k: v for k, v in _shape_counts(wb).items() if not _PRECISION_OP.search(k[0])}
    if ok and ops_a and ops_b and any(k[1] for k in sa) and any(k[1] for k in sb):
        shapes_pct = shape_similarity(sa, sb, ba, bb)
        if shapes_pct < MIN_IN_COMMON:
            ok = False
            reasons.insert(0, f"only {shapes_pct:.0f}% of the framework ops per step have the same input shapes"
                              f" (batch dimension set aside; at least {MIN_IN_COMMON:.0f}% needed)")
            reasons.extend(_differences({f"{k[0]} {k[1]}": v for k, v in sa.items()}, {f"{k[0]} {k[1]}": v for k, v in sb.items()}, 3))
    has_a, has_b = bool(S.step_samples(base).size), bool(S.step_samples(head).size)
    if has_a != has_b:
        ok = False
        reasons.insert(1 if reasons and not ok else 0, f"only {'BASE' if has_a else 'HEAD'} has step markers: the step structure differs")
    elif not has_a and not S.repeats(base) and not S.repeats(head):
        reasons.append("no step markers on either side: the GPU windows are compared, one sample each (no interval)")
    once = one_time_work(base, head, steps_on_both=has_a and has_b,
                         steady=(S.step_samples(base).size, S.step_samples(head).size))
    if once:
        ok = False
        reasons.insert(0, once)
    return {"comparable": ok, "matched_by": matched_by, "in_common_pct": round(in_common, 1),
            "shapes_in_common_pct": None if shapes_pct is None else round(shapes_pct, 1),
            "batch_base": ba, "batch_head": bb, "reasons": reasons}


#: A window with at least this share (%) booked as warm-up is one-time work (compilation, autotuning, first calls).
ONE_TIME_PCT = 50.0


def one_time_work(base: S.Side, head: S.Side, *, steps_on_both: bool, steady: tuple[int, int] = (0, 0)) -> str | None:
    """The reason two captures cannot be compared when one (or both) is mostly one-time work, else None. Steps on
    both sides are compared without their warm-up steps, so a side mostly of one-time work still compares when the
    steady steps after its warm-up are enough for an interval (``stats.MIN_SAMPLES``); with fewer, the few steps
    left after a compilation would decide the answer, so the window is called one-time work instead."""
    pa, pb = S.warmup_share_pct(base), S.warmup_share_pct(head)
    big_a, big_b = (pa or 0.0) >= ONE_TIME_PCT, (pb or 0.0) >= ONE_TIME_PCT
    if steps_on_both:
        big_a, big_b = big_a and steady[0] < MIN_SAMPLES, big_b and steady[1] < MIN_SAMPLES
    if not (big_a or big_b):
        return None
    advice = "profile after warm-up (a profiler schedule with wait/warmup steps) to compare the steady state"
    if big_a and big_b:
        return f"both windows are mostly one-time work (BASE {pa:.0f}%, HEAD {pb:.0f}% warm-up: compilation, autotuning, first calls): they compare start-up, not the workload; {advice}"
    which, other = ("BASE", "HEAD") if big_a else ("HEAD", "BASE")
    share, rest = (pa, pb) if big_a else (pb, pa)
    return (f"{which}'s window is one-time work ({share:.0f}% of it warm-up: compilation, autotuning, first calls), {other}'s is "
            f"steady state ({rest or 0:.0f}% warm-up); {advice}")


_PRECISION_OP = re.compile(PRECISION_OP)


def _without_precision_ops(x: dict[str, float], y: dict[str, float]) -> tuple[dict[str, float], dict[str, float], str | None]:
    """Both sides' ops per step without the casts and loss-scaling ops a change of precision adds or removes
    (``PRECISION_OP``), and a note of what was set aside when the sides differ in them (else None)."""
    cx = sum(v for k, v in x.items() if _PRECISION_OP.search(k))
    cy = sum(v for k, v in y.items() if _PRECISION_OP.search(k))
    if not cx and not cy:
        return x, y, None
    x2 = {k: v for k, v in x.items() if not _PRECISION_OP.search(k)}
    y2 = {k: v for k, v in y.items() if not _PRECISION_OP.search(k)}
    note = (None if abs(cx - cy) < 1e-9 else
            f"dtype casts and mixed-precision loss scaling are set aside ({cx:g} per step in BASE, {cy:g} in HEAD): a change "
            "of precision adds or removes them without changing the model")
    return x2, y2, note


def _ops_gpu_share(w: dict[str, Any]) -> float:
    """The % of a workload's GPU time per step that its top-level framework ops launched (100 without GPU time)."""
    total = sum(float(k.get("ns_per_step") or 0.0) for k in w.get("kernels", []))
    linked = sum(float(o.get("gpu_ns_per_step") or 0.0) for o in w.get("ops", []))
    return 100.0 if total <= 0 else min(100.0, 100.0 * linked / total)


def _class_counts(w: dict[str, Any]) -> dict[str, float]:
    """Kernels per step by class (``vocab.kernels`` classes)."""
    out: dict[str, float] = defaultdict(float)
    for k in w.get("kernels", []):
        out[str(k.get("class") or "other")] += float(k.get("per_step") or 0.0)
    return dict(out)


def _shape_counts(w: dict[str, Any]) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = defaultdict(float)
    for s in w.get("shapes", []):
        out[(s["name"], s.get("shapes") or "")] += float(s.get("per_step") or 0.0)
    return dict(out)


#: A tensor's leading dimension in a shapes string as the profiler prints it (``[[32, 3, 224, 224], [64, 3, 7, 7]]``).
_LEAD_DIM = re.compile(r"(?<=\[)(\d+)(?=[,\]])")
#: Tensors per op whose leading dimension is tried both ways (as batch and as not): at most 2^6 variants.
MAX_BATCH_TENSORS = 6


def _batch_variants(shapes: str, head_batch: int, base_batch: int) -> list[str]:
    """``shapes`` (HEAD's) written as BASE would print it: each tensor leading with HEAD's batch size may be an
    activation (its batch becomes BASE's) or a weight that happens to have that size (unchanged), so every choice
    is a candidate, the all-activations one first."""
    spans = [m.span() for m in _LEAD_DIM.finditer(shapes) if int(m.group()) == head_batch]
    if len(spans) > MAX_BATCH_TENSORS:
        choices = [tuple([True] * len(spans)), tuple([False] * len(spans))]
    else:
        choices = sorted(itertools.product((True, False), repeat=len(spans)), key=lambda c: -sum(c))
    out = []
    for choice in choices:
        text, last = [], 0
        for (a, b), swap in zip(spans, choice):
            text.append(shapes[last:a] + (str(base_batch) if swap else shapes[a:b]))
            last = b
        out.append("".join(text) + shapes[last:])
    return out


def shape_similarity(a: dict[tuple[str, str], float], b: dict[tuple[str, str], float], batch_a: int | None, batch_b: int | None) -> float:
    """Per-step (op, input shapes) both sides share, as % of the larger side's. With two batch sizes, a HEAD shape
    matches a BASE shape that differs only in tensors leading with HEAD's batch where BASE has its own."""
    if not batch_a or not batch_b or batch_a == batch_b:
        return _similarity(a, b)
    left = dict(a)
    common = 0.0
    for (name, shapes), count in sorted(b.items(), key=lambda kv: -kv[1]):
        for v in _batch_variants(shapes, batch_b, batch_a):
            have = left.get((name, v), 0.0)
            if have > 0:
                take = min(have, count)
                left[(name, v)] = have - take
                common += take
                count -= take
                if count <= 0:
                    break
    total = max(sum(a.values()), sum(b.values()))
    return 100.0 * common / total if total > 0 else 100.0


def context(base: S.Side, head: S.Side) -> list[dict[str, Any]]:
    """What differs around the workload (GPU, vendor, trace format, tool, framework, world size): shown, never judged."""
    def gpus(side: S.Side, key: str) -> str:
        vals = sorted({str(d.get(key)) for d in S.devices(side) if d.get(key)})
        return ", ".join(vals) if vals else "unknown"

    rows = [
        ("GPU", gpus(base, "name"), gpus(head, "name")),
        ("vendor", gpus(base, "vendor"), gpus(head, "vendor")),
        ("format", str(base.trace.get("format")), str(head.trace.get("format"))),
        ("tool", f"{base.trace.get('tool') or ''} {base.trace.get('tool_version') or ''}".strip(), f"{head.trace.get('tool') or ''} {head.trace.get('tool_version') or ''}".strip()),
        ("framework", str(base.trace.get("framework")), str(head.trace.get("framework"))),
        ("ranks", str(len(base.trace.get("ranks") or [])), str(len(head.trace.get("ranks") or []))),
    ]
    return [{"what": w, "base": x, "head": y, "differs": x != y} for w, x, y in rows]


