"""One line that says what bounds a run, shared by every report format so they never disagree.

Rules measure overlapping things (an idle gap may *be* a host sync), so adding impacts up would overstate
the story. Instead each finding belongs to the bottleneck category its rule declares (``Rule.category``), the
category with the largest single impact leads, and a specific cause (syncs, launches, input, copies) beats the
generic "GPU idle" when it explains a good part of the idle time. Trace-quality findings never lead. With no finding worth mentioning, GPU busy % decides between "compute" and
unexplained idle time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .rule_api import DEFAULT_CATEGORY, Finding, fmt_ns

if TYPE_CHECKING:  # pragma: no cover
    from .engine import Analysis

#: category -> short label used as the verdict headline: every rule category (rule_api.CATEGORIES) plus "no_gpu".
LABELS: dict[str, str] = {
    "gpu_idle": "GPU idle",
    "host_sync": "host syncs",
    "launch_overhead": "launch overhead",
    "input_pipeline": "input pipeline",
    "copy": "host-device copies",
    "compute": "compute",
    "communication": "communication",
    "trace_quality": "trace quality",
    "no_gpu": "no GPU activity",
}
#: Causes specific enough to beat the generic "GPU idle" when they explain a good part of it.
SPECIFIC_IDLE_CAUSES = ("host_sync", "launch_overhead", "input_pipeline", "copy")
#: Categories that describe the recording rather than the run: they never name the bound.
NOT_A_BOUND = ("trace_quality",)

#: A category must cost at least this share of the span to be named as the bound.
MIN_PCT_SPAN = 2.0
#: GPU busy share above which, absent big findings, the run is called compute-bound.
COMPUTE_BUSY_PCT = 85.0


def category(finding: Finding) -> str:
    """The bottleneck category of one finding: the one its rule declares (``Rule.category``)."""
    return finding.category if finding.category in LABELS else DEFAULT_CATEGORY


def headline(analysis: "Analysis") -> dict[str, Any]:
    """The KPI numbers every format shows: one function, so HTML, Markdown and JSON carry equal values."""
    s = analysis.summary
    counts = {"error": 0, "warning": 0, "info": 0}
    for f in analysis.findings:
        counts[f.severity.value] = counts.get(f.severity.value, 0) + 1
    total = sum(int(f.impact_ns) for f in analysis.findings)
    largest = max((int(f.impact_ns) for f in analysis.findings), default=0)
    busy = s.gpu_busy_pct
    return {
        "span_ns": int(s.span_ns),
        "gpu_busy_pct": None if busy is None else round(float(busy), 1),
        "findings": len(analysis.findings),
        "findings_by_severity": counts,
        # findings overlap (a sync stall is also an idle gap), so the sum is an upper bound, capped at the span
        "est_savings_ns": int(min(total, s.span_ns)) if s.span_ns else int(total),
        "largest_saving_ns": largest,
        "steps": int(s.steps.get("count", 0)) if s.steps else 0,
        "mean_step_ns": float(s.steps["mean_ns"]) if s.steps else None,
    }


def details(analysis: "Analysis") -> dict[str, Any]:
    """The verdict with its reasoning: category, label, sentence, and the impact per category."""
    s = analysis.summary
    span = max(int(s.span_ns), 1)
    busy = s.gpu_busy_pct
    by_cat: dict[str, int] = {}
    top: dict[str, Finding] = {}
    for f in analysis.findings:
        c = category(f)
        if c in NOT_A_BOUND:
            continue
        by_cat[c] = by_cat.get(c, 0) + int(f.impact_ns)
        if c not in top or f.impact_ns > top[c].impact_ns:
            top[c] = f
    # the largest single finding per category, not the sum: sums double-count overlapping evidence
    lead = {c: int(f.impact_ns) for c, f in top.items()}
    cat = None
    if busy is None:
        cat = "no_gpu"
    elif lead:
        cat = max(lead, key=lambda c: (lead[c], c != "gpu_idle"))
        if 100.0 * lead[cat] / span < MIN_PCT_SPAN:
            cat = None
        elif cat == "gpu_idle":
            specific = {c: v for c, v in lead.items() if c in SPECIFIC_IDLE_CAUSES}
            if specific:
                best = max(specific, key=lambda c: specific[c])
                if specific[best] * 3 >= lead["gpu_idle"]:
                    cat = best
    if cat is None:
        cat = "compute" if busy is not None and busy >= COMPUTE_BUSY_PCT else "gpu_idle"

    idle_txt = "" if busy is None else f"the GPU is busy {busy:.1f}% of its active window"
    f = top.get(cat)
    if cat == "no_gpu":
        sentence = "The trace has no GPU kernels or copies, so there is nothing on the GPU to explain."
    elif cat == "compute":
        if f is not None and f.impact_ns and 100.0 * f.impact_ns / span >= MIN_PCT_SPAN:
            sentence = f"{idle_txt[0].upper()}{idle_txt[1:]}; the biggest lever is the kernels themselves ({f.title}, est. {fmt_ns(f.impact_ns)})."
        else:
            sentence = f"{idle_txt[0].upper()}{idle_txt[1:]}; speed-ups now come from faster kernels (precision, fusion, batch size), not from feeding the GPU."
    elif f is not None:
        sentence = f"{idle_txt[0].upper()}{idle_txt[1:]}; the largest cause is {f.title} (est. {fmt_ns(f.impact_ns)}, {100.0 * f.impact_ns / span:.1f}% of the span)."
    else:
        sentence = f"{idle_txt[0].upper()}{idle_txt[1:]}, and no rule pinned down a cause larger than {MIN_PCT_SPAN:.0f}% of the span."
    return {
        "category": cat,
        "label": LABELS[cat],
        "headline": "No GPU activity" if cat == "no_gpu" else f"Bound by {LABELS[cat]}",
        "sentence": sentence,
        "impact_ns_by_category": {c: int(v) for c, v in sorted(by_cat.items(), key=lambda kv: -kv[1])},
    }


def verdict(analysis: "Analysis") -> tuple[str, str]:
    """(label, sentence): what bounds this run, e.g. ("host syncs", "Bound by host syncs: ...")."""
    d = details(analysis)
    return d["label"], d["sentence"]
