"""The notebook view of an Analysis (``Analysis._repr_html_``): verdict, key numbers, the time ledger per device in
the buckets' own colours (``traceinsight.vocab.buckets``, the same as the HTML report's) and the leading findings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceinsight.assess import advice
from traceinsight.vocab import buckets
from traceinsight.render.common import clean, figure_text, shown_ns
from traceinsight.render.timeline_svg import MAX_DEVICES_DRAWN
from traceinsight.render.templating import env

if TYPE_CHECKING:  # pragma: no cover
    from traceinsight.model.analysis import Analysis

MAX_INLINE_FINDINGS = 8


def render_inline(analysis: "Analysis") -> str:
    """The compact report ``Analysis._repr_html_`` shows in Jupyter: verdict, key numbers, the time ledger per
    device and the findings with their leading fix. Self-contained and script-free (notebooks strip scripts of
    untrusted outputs), so it reads the same in JupyterLab, VS Code, GitHub's viewer and nbviewer."""
    meta = analysis.timeline.meta
    head = analysis.kpis
    findings = []
    for i, f in enumerate(analysis.findings[:MAX_INLINE_FINDINGS]):
        first = next(((fw, fx) for fw, fx in f.fixes.items() if fx.text.strip()), None)
        findings.append({
            "n": i + 1, "code": clean(f.code, 20), "severity": f.severity.value, "title": clean(f.title, 300),
            "message": clean(f.message, 1500), "impact_ns": int(f.impact_ns), "saving_ns": shown_ns(f), "figure": clean(figure_text(f), 200),
            "fix": None if first is None else {"label": advice.label(first[0]), "text": first[1].text.strip(), "code": first[1].code},
        })
    ledger = []
    lg = analysis.ledger
    if lg is not None and not lg.by_device.empty:
        many = len(meta.ranks) > 1
        for (rank, device), g in lg.by_device.groupby(["rank", "device"], sort=True):
            total = max(int(g["ns"].sum()), 1)
            parts = [{"bucket": b, "name": buckets.SENTENCE.get(b, b), "ns": int(ns), "pct": 100.0 * ns / total, "color": buckets.BY_ID[b].colour if b in buckets.BY_ID else "#868e96"}
                     for b, ns in zip(g["bucket"], g["ns"]) if ns > 0]
            ledger.append({"rank": int(rank), "device": int(device), "label": f"rank {rank} GPU {device}" if many else f"GPU {device}",
                           "parts": parts, "top": sorted(parts, key=lambda p: -p["ns"])[:4]})
            if len(ledger) >= MAX_DEVICES_DRAWN:
                break
    gpus = sorted({clean(d.name, 60) for d in meta.devices if d.name})
    ctx = {
        "title": clean(meta.path.rsplit("/", 1)[-1] or "trace", 120),
        "meta_format": clean(meta.source_format, 40),
        "framework": analysis.framework,
        "framework_label": advice.label(analysis.framework),
        "gpu": ", ".join(gpus[:3]),
        "generated": clean(meta.extra.get("generated") or "", 300),
        "verdict": analysis.verdict,
        "head": head,
        "busy_pct": head["gpu_busy_pct"],
        "ledger": ledger,
        "findings": findings,
        "more": max(len(analysis.findings) - MAX_INLINE_FINDINGS, 0),
        "rules_run": len(analysis.rules_run),
    }
    return env().get_template("inline.html.j2").render(**ctx)
