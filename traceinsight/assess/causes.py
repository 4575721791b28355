"""Root causes over symptoms: after every rule ran, link each symptom finding to the cause that explains it.

Rules measure overlapping things: an idle gap (TI001) may be a data-loading wait (TI005) or the drain after a
host sync (TI002); the tiny kernels and short gaps of TI003 may be the per-timestep loop of an RNN that fell back
from cuDNN (TI004). Reported side by side they compete for the verdict and their savings add up to more than the
run. Here a *cause* finding lists, in ``Finding.explains``, the fingerprints of the *symptom* findings it
accounts for; the symptom gets ``metrics["explained_by"]`` and ``metrics["explained_ns"]`` (the part of its
impact the cause already claims), and the finding list is ordered so each cause is followed by what it explains.

A cause explains a symptom on the same rank (and device, when both name one) when at least ``MIN_SHARE`` of the
symptom's impact is its doing, measured two ways, whichever says more:

- by time: the symptom's instances (its gaps, its kernels' waits) covered by the cause's instances (data waits,
  RNN regions, stalls, copies);
- by attribution: a symptom that already splits its impact by category (``metrics["idle_by_category"]``, e.g.
  TI001's gaps by what the host did) credits the cause's category with that share.

Only symptom categories (``gpu_idle``, ``launch_overhead``) are ever explained, and only by cause categories
(``input_pipeline``, ``host_sync``, ``copy``, ``compute``, ``communication``) or by a finding whose rule declares
itself a root cause (``Rule.root_cause``: idle time with a known reason, such as a recompile in the steady
state), which is then never explained itself; trace-quality findings are neither.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from traceinsight.model.finding import Finding, instance_columns
from traceinsight.vocab import categories
from traceinsight.vocab.intervals import Coverage, applies_to

#: Categories whose findings are effects of something else (the GPU waited): ``Category.role``.
SYMPTOMS = categories.SYMPTOMS
#: Categories whose findings name a reason the GPU waited or a region that behaves a known way.
CAUSES = categories.CAUSES
#: A cause explains a symptom when it accounts for at least this share of the symptom's impact.
MIN_SHARE = 0.5


def _intervals(f: Finding, rank, device) -> tuple[np.ndarray, np.ndarray]:
    """The finding's instances on (rank, device); an instance with no rank/device applies to all."""
    cols = instance_columns(getattr(f, "instances", None))
    keep = applies_to(len(cols.start_ns), cols.rank, cols.device, rank, device)
    return cols.start_ns[keep], cols.end_ns[keep]


def _same_place(a: Finding, b: Finding) -> bool:
    la, lb = a.location, b.location
    if la.rank is not None and lb.rank is not None and la.rank != lb.rank:
        return False
    if la.device is not None and lb.device is not None and la.device != lb.device:
        return False
    return True


def _share_explained(cause: Finding, symptom: Finding, category_shared: bool = False) -> tuple[float, int]:
    """(share of the symptom's impact the cause accounts for, ns of it). ``category_shared``: another candidate
    cause at the same place has the same category, so the symptom's idle of that category cannot be credited to
    this one by attribution (a sync stall and an allocator flush are both "host synchronization"); only the time
    its own instances cover counts."""
    impact = int(symptom.impact_ns)
    if impact <= 0:
        return 0.0, 0
    best = 0
    by_cat = symptom.metrics.get("idle_by_category") or {}
    if cause.category in by_cat and not category_shared:
        best = int(by_cat[cause.category])
    loc = symptom.location
    ss, se = _intervals(symptom, loc.rank, loc.device)
    if len(ss):
        cs, ce = _intervals(cause, loc.rank, loc.device)
        if len(cs):
            covered = int(Coverage(cs, ce).overlap(ss, se).sum())
            total = int((se - ss).sum())
            if total > 0:
                best = max(best, int(impact * min(covered / total, 1.0)))
    best = min(best, impact)
    return best / impact, best


def link(findings: Iterable[Finding]) -> list[Finding]:
    """Fill ``explains`` on causes and ``explained_by`` on symptoms; return the findings ordered causes-first.

    A symptom is given to the one cause that explains most of it (so savings are never claimed twice); a
    finding never explains itself or a finding of its own rule.
    """
    findings = list(findings)
    causes = [f for f in findings if f.category in CAUSES or f.root_cause]
    for s in findings:
        if s.category not in SYMPTOMS or s.root_cause:
            continue
        best = None
        here = [c for c in causes if c is not s and c.code != s.code and _same_place(c, s)]
        per_category: dict[str, int] = {}
        for c in here:
            per_category[c.category] = per_category.get(c.category, 0) + 1
        for c in here:
            share, ns = _share_explained(c, s, per_category[c.category] > 1)
            if share >= MIN_SHARE and (best is None or ns > best[1]):
                best = (c, ns, share)
        if best is None:
            continue
        c, ns, share = best
        if s.fingerprint not in c.explains:
            c.explains.append(s.fingerprint)
        s.metrics["explained_by"] = c.fingerprint
        s.metrics["explained_ns"] = int(ns)
        s.metrics["explained_share_pct"] = round(100.0 * share, 1)
    return order(findings)


def order(findings: list[Finding]) -> list[Finding]:
    """Causes and unexplained findings in the given order, each cause followed by the symptoms it explains."""
    by_fp = {f.fingerprint: f for f in findings}
    explained = {f.fingerprint for f in findings if f.metrics.get("explained_by") in by_fp}
    out: list[Finding] = []
    for f in findings:
        if f.fingerprint in explained:
            continue
        out.append(f)
        out.extend(by_fp[fp] for fp in f.explains if fp in by_fp and fp in explained)
    return out


def attach_what_if(findings: list[Finding], views, transforms: dict[str, "str | None"]) -> None:
    """Predicted step time with each root cause removed (``traceinsight.derive.whatif``), on causes only: a symptom that
    a cause explains gets none (its cause's prediction covers it), and trace-quality findings are not causes.
    ``transforms``: rule code -> the what-if transform its rule declares (``Rule.what_if``)."""
    todo = [
        f for f in findings
        if f.what_if is None and transforms.get(f.code) and not f.metrics.get("explained_by") and not categories.about_recording(f.category)
    ]
    if not todo:  # no root cause with a model: the what-if machinery is not even imported
        return
    from traceinsight.derive.whatif import what_if_for

    for f in todo:
        try:
            f.what_if = what_if_for(views.graphs, transforms.get(f.code), f.instances or None)
        except Exception as exc:  # a model failure must not take the analysis down; say so on the finding
            f.metrics["what_if_error"] = f"{type(exc).__name__}: {exc}"
