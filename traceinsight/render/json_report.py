"""The JSON report: a versioned document (see docs/json-report.md) with the summary metrics and the findings.

``to_dict`` is the single trace's document (the MCP server answers with it, a diff reads it back); how each value
becomes JSON is the model's serializer (``traceinsight.model.serialize``), shared with the job and the diff."""

from __future__ import annotations

from typing import Any

from traceinsight.derive import workload
from traceinsight.vocab.version import __version__
from traceinsight.model.analysis import Analysis
from traceinsight.model.finding import Finding
from traceinsight.model.serialize import dumps, finding_dict, jsonable
from traceinsight.render.steps_view import step_report

SCHEMA_VERSION = 1


def to_dict(analysis: Analysis, max_evidence_rows: int | None = 50) -> dict[str, Any]:
    meta = analysis.timeline.meta
    return {
        "schema_version": SCHEMA_VERSION,
        "traceinsight_version": __version__,
        "trace": {
            "path": meta.path,
            "format": meta.source_format,
            "framework": analysis.framework,
            "generated": meta.extra.get("generated"),  # set for generated sample traces: GPU activity not measured
            "tool": meta.tool,
            "tool_version": meta.tool_version,
            "ranks": list(meta.ranks),
            "world_size": meta.world_size,
            "start_unix_ns": meta.start_unix_ns,
            "devices": [vars(d) for d in meta.devices],
            "warnings": list(meta.warnings),
        },
        "verdict": analysis.verdict,
        "kpis": analysis.kpis,
        "ledger": analysis.ledger.to_dict(),
        "steps": jsonable(step_report(analysis)["steps"]),
        "ranges": jsonable(step_report(analysis)["ranges"]),
        "summary": analysis.summary.to_dict(),
        "workload": workload.of(analysis.views.views, analysis.ledger.warmup),
        "memory": jsonable(analysis.views.memory.to_dict()),
        "efficiency": _efficiency(analysis),
        "findings": [_finding(analysis, f, max_evidence_rows) for f in analysis.findings],
        "baseline": analysis.baseline.to_dict() if analysis.baseline is not None else None,
        "rules_run": list(analysis.rules_run),
        "warnings": list(analysis.warnings),
    }


def _finding(analysis: Analysis, f: Finding, max_evidence_rows: int | None) -> dict[str, Any]:
    d = finding_dict(f, max_evidence_rows)
    if analysis.baseline is not None:
        d["baseline_status"] = analysis.baseline.of(f)
    return d


def render(analysis: Analysis, max_evidence_rows: int | None = 50, **_: Any) -> str:
    return dumps(to_dict(analysis, max_evidence_rows))


def _efficiency(analysis: Analysis) -> dict[str, Any] | None:
    from traceinsight.render.efficiency_view import efficiency_of

    eff = efficiency_of(analysis)
    return eff.to_dict() if eff is not None else None
