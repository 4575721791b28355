"""The HTML report: one self-contained file (inline CSS, inline SVG, a little JS) that works offline.

It has to open from a CI artifact, an e-mail attachment or a sandboxed viewer, so nothing is loaded from
anywhere (a CSP meta tag forbids it), everything reads with JavaScript off, and the timeline is aggregated
to pixel columns in Python: a trace with millions of kernels still gives a few thousand SVG nodes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from markupsafe import Markup

from traceinsight.assess import advice
from traceinsight.vocab.version import __version__
from traceinsight.model.analysis import Analysis
from traceinsight.model.finding import Finding
from traceinsight.vocab.units import fmt_ns
from traceinsight.render.common import SLIVER, baseline_sentence, baseline_tag, cause_of, shown_ns, clean, column_label, column_labels, format_cell, saving_label, what_if_text
from traceinsight.render.ledger_view import bars as ledger_bars
from traceinsight.render.templating import asset, env, report_css
from traceinsight.render.timeline_svg import GUTTER, LANE_H, PLOT_W, instance_view, memory_charts, timeline_block

MAX_EVIDENCE_ROWS = 25
MAX_FINDINGS_DETAILED = 60
MAX_INSTANCE_VIEWS = 10  # findings that get a close-up of their largest instance


def render(analysis: Analysis, title: str | None = None, **_: Any) -> str:
    return env().get_template("report.html.j2").render(**context(analysis, title=title))


# --- data for the template -------------------------------------------------------------------------------


def _step_context(analysis: Analysis) -> dict | None:
    """The steps card: the spread sentence and the per-range table (None when there is neither)."""
    from traceinsight.render.steps_view import spread_sentence, step_report

    rep = step_report(analysis)
    if not rep["steps"]["count"] and not rep["ranges"]:
        return None
    src = rep["steps"]["source"]
    return {"steps": rep["steps"], "ranges": rep["ranges"], "sentence": clean(spread_sentence(rep["steps"]), 900),
            "source_line": clean(f"steps from {src['marker']}" if src.get("marker") else "no steps", 120)}


def _with_steady(steps: dict, analysis: Analysis) -> dict:
    """The summary's step figures with the steady steps' median and count (``steady_median_ns``, ``steady_steps``;
    None when the step table has no spread), for the tile that shows the mean of every step."""
    from traceinsight.render.steps_view import step_report

    sp = step_report(analysis)["steps"].get("spread") if steps else None
    return {**steps, "steady_steps": sp["steps"] if sp else None, "steady_median_ns": sp["median_ns"] if sp else None}


def context(analysis: Analysis, title: str | None = None) -> dict[str, Any]:
    s = analysis.summary
    meta = analysis.timeline.meta
    head = analysis.kpis
    verdict = analysis.verdict
    views = analysis.views
    findings = [_finding(i + 1, f, detailed=i < MAX_FINDINGS_DETAILED, cause=cause_of(analysis, f)) for i, f in enumerate(analysis.findings)]
    number = {f.fingerprint: i + 1 for i, f in enumerate(analysis.findings)}
    for fd, f in zip(findings, analysis.findings):
        fd["symptom_n"] = number.get(f.metrics.get("explained_by"))
    for fd, f in zip(findings[:MAX_INSTANCE_VIEWS], analysis.findings):
        fd["instance"] = instance_view(analysis.timeline, views, f)
    for fd, f in zip(findings, analysis.findings):
        fd["baseline"] = clean(baseline_tag(analysis, f), 60)
    tl = timeline_block(analysis, views)
    devices = [
        {
            **d,
            "label": f"rank {d['rank']} · GPU {d['device']}" if len(meta.ranks) > 1 or any(x["rank"] for x in s.devices) else f"GPU {d['device']}",
            "name": clean(d.get("name") or "", 80),
        }
        for d in s.devices
    ]
    kernels = [
        {
            "name": clean(r.name, 240),
            "full": clean(r.name, 1500),
            "count": int(r.count),
            "total_ns": int(r.total_ns),
            "mean_ns": float(r.mean_ns),
            "max_ns": int(r.max_ns),
            "pct": float(r.pct_kernel_time),
        }
        for r in s.top_kernels.itertuples(index=False)
    ]
    dev_meta = [
        {
            "rank": d.rank,
            "index": d.index,
            "name": clean(d.name or "", 80),
            "sm_count": d.sm_count,
            "memory": f"{d.memory_bytes / 2**30:.0f} GiB" if d.memory_bytes else "",
            "cc": clean(d.compute_capability or "", 16),
            "vendor": clean(d.vendor or "", 32),
        }
        for d in meta.devices
    ]
    return {
        "framework": analysis.framework,
        "framework_label": advice.label(analysis.framework),
        "generated": clean(meta.extra.get("generated") or "", 300),
        "title": clean(title or meta.path.rsplit("/", 1)[-1] or "trace", 120),
        "version": __version__,
        "css": report_css(),
        "js": asset("report.js"),
        "head": head,
        "verdict": verdict,
        "ledger": ledger_bars(analysis.ledger),
        "step_rep": _step_context(analysis),
        "efficiency": _efficiency(analysis),
        "busy_pct": head["gpu_busy_pct"],
        "sliver": SLIVER,
        "findings": findings,
        "devices": devices,
        "kernels": kernels,
        "kernel_count": s.kernel_count,
        "kernel_time_ns": s.kernel_time_ns,
        "steps": _with_steady(s.steps, analysis),
        "event_counts": {k: v for k, v in s.event_counts.items() if v},
        "event_total": int(sum(s.event_counts.values())),
        "meta": {
            "path": clean(meta.path, 300),
            "format": clean(meta.source_format, 40),
            "tool": clean(meta.tool, 120),
            "tool_version": clean(meta.tool_version or "", 60),
            "ranks": ", ".join(str(r) for r in meta.ranks[:32]) + (" …" if len(meta.ranks) > 32 else ""),
            "world_size": meta.world_size,
            "devices": dev_meta,
            "extra": [(clean(k, 60), clean(v, 200)) for k, v in list(meta.extra.items())[:20] if not isinstance(v, (dict, list))],
        },
        "warnings": [clean(w, 600) for w in [*meta.warnings, *analysis.warnings]],
        "rules_run": ", ".join(analysis.rules_run),
        "timeline": tl,
        "memory": memory_charts(analysis, tl, len(meta.ranks) > 1),
        "baseline": clean(baseline_sentence(analysis) or "", 300),
        "baseline_fixed": [(clean(x["code"], 20), clean(x["title"], 200)) for x in (analysis.baseline.fixed[:20] if analysis.baseline else [])],
        "gutter": GUTTER,
        "plot_w": PLOT_W,
        "lane_h": LANE_H,
    }


def _efficiency(analysis: Analysis) -> dict[str, Any] | None:
    """The efficiency card: headline, per-class rows, the roofline (an SVG whose text is escaped where it is built)."""
    from traceinsight.render.efficiency_view import (COLUMNS, TOP_OP_COLUMNS, efficiency_of, hardware_lines, headline as eff_headline, roofline_svg,
                                  step_line, table_rows, top_op_rows)

    eff = efficiency_of(analysis)
    if eff is None or eff.classes.empty:
        return None
    measured = eff.available or any(v is not None and v == v for v in eff.classes["achieved_gbs"])
    src = eff.peak.source if eff.peak.source.startswith("https://") else ""
    return {
        "headline": clean(eff_headline(eff), 600),
        "step_line": clean(step_line(eff), 300),
        "hardware": [clean(h.strip(), 300) for h in hardware_lines(eff)],
        "columns": COLUMNS,
        "rows": [[clean(c, 120) for c in r] for r in table_rows(eff)] if measured else [],
        "roofline": Markup(roofline_svg(eff)),
        "top_columns": TOP_OP_COLUMNS,
        "top_rows": [[clean(c, 160) for c in r] for r in top_op_rows(eff)],
        "notes": [clean(n, 300) for n in eff.notes[0 if eff.available else 1:]],
        "source": clean(src, 300),
    }


def _finding(n: int, f: Finding, detailed: bool, cause: Finding | None = None) -> dict[str, Any]:
    ev = f.evidence if isinstance(f.evidence, pd.DataFrame) else pd.DataFrame()
    cols = [str(c) for c in ev.columns][:12]
    rows = []
    if detailed and not ev.empty:
        for row in ev.head(MAX_EVIDENCE_ROWS)[ev.columns[:12]].itertuples(index=False, name=None):
            rows.append([(*format_cell(c, v), isinstance(v, (int, float, np.number)) and not isinstance(v, bool)) for c, v in zip(cols, row)])
    loc = f.location
    where = []
    if loc.rank is not None:
        where.append(f"rank {loc.rank}")
    if loc.device is not None:
        where.append(f"GPU {loc.device}")
    if loc.stream is not None:
        where.append(f"stream {loc.stream}")
    if loc.start_ns is not None:
        where.append(f"{fmt_ns(loc.start_ns)} – {fmt_ns(loc.end_ns if loc.end_ns is not None else loc.start_ns)}")
    # in the order traceinsight.assess.advice chose: the trace's framework first, so its tab is the one that opens
    fixes = [
        {"id": clean(fw, 30), "label": clean(advice.label(fw), 30), "text": fx.text.strip(), "code": fx.code.strip()}
        for fw, fx in f.fixes.items()
        if fx.text.strip()
    ]
    metrics = []
    for k, v in list(f.metrics.items())[:12]:
        if isinstance(v, (dict, list, tuple)):
            continue
        metrics.append((clean(column_label(str(k)), 60), format_cell(str(k), v)[0]))
    return {
        "n": n,
        "code": clean(f.code, 20),
        "rule": clean(f.rule_name, 60),
        "title": clean(f.title, 300),
        "severity": f.severity.value,
        "message": clean(f.message, 4000),
        "impact_ns": int(f.impact_ns),
        "saving_ns": shown_ns(f),
        "kind": f.saving_kind or "idle",
        "saving_label": saving_label(f),
        "share_pct": f.share_pct,
        "symptom_of": None if cause is None else clean(cause.code, 20),
        "severity_basis": clean(f.metrics.get("severity_basis", ""), 400),
        "what_if": clean(what_if_text(f), 800),
        "saving_basis": clean(f.metrics.get("saving_basis", ""), 400),
        "fingerprint": f.fingerprint,
        "where": " · ".join(where),
        "cols": [clean(c, 40) for c in column_labels(cols)],
        "rows": rows,
        "total_rows": int(len(ev)),
        "fixes": fixes,
        "metrics": metrics,
        "detailed": detailed,
    }
