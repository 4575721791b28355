"""The JSON report: a versioned document (see docs/json-report.md) with the summary metrics and the findings."""

from __future__ import annotations

from typing import Any

import msgspec

from .. import __version__
from ..engine import Analysis
from ..verdict import details, headline, ledger_of

SCHEMA_VERSION = 1


def to_dict(analysis: Analysis, max_evidence_rows: int | None = 50) -> dict[str, Any]:
    meta = analysis.timeline.meta
    return {
        "schema_version": SCHEMA_VERSION,
        "traceinsight_version": __version__,
        "trace": {
            "path": meta.path,
            "format": meta.source_format,
            "tool": meta.tool,
            "tool_version": meta.tool_version,
            "ranks": list(meta.ranks),
            "world_size": meta.world_size,
            "start_unix_ns": meta.start_unix_ns,
            "devices": [vars(d) for d in meta.devices],
            "warnings": list(meta.warnings),
        },
        "verdict": details(analysis),
        "kpis": headline(analysis),
        "ledger": ledger_of(analysis).to_dict(),
        "summary": analysis.summary.to_dict(),
        "findings": [_finding(analysis, f, max_evidence_rows) for f in analysis.findings],
        "baseline": analysis.baseline.to_dict() if analysis.baseline is not None else None,
        "rules_run": list(analysis.rules_run),
        "warnings": list(analysis.warnings),
    }


def _finding(analysis: Analysis, f, max_evidence_rows: int | None) -> dict[str, Any]:
    d = f.to_dict(max_evidence_rows)
    if analysis.baseline is not None:
        d["baseline_status"] = analysis.baseline.of(f)
    return d


def render(analysis: Analysis, max_evidence_rows: int | None = 50, **_: Any) -> str:
    return msgspec.json.format(msgspec.json.encode(to_dict(analysis, max_evidence_rows)), indent=2).decode()
