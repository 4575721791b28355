"""The JSON report: a versioned document (see docs/json-report.md) with the summary metrics and the findings."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pandas as pd

from traceinsight.derive import workload
from traceinsight.vocab.version import __version__
from traceinsight.model.analysis import Analysis
from traceinsight.model.finding import Finding, instance_columns
from traceinsight.vocab.sanitize import json_text
from traceinsight.render.common import smallest_first
from traceinsight.render.steps_view import step_report

SCHEMA_VERSION = 1
#: Instances kept per finding (the longest ones, in time order); ``total_instances`` says how many there were.
MAX_INSTANCES = 1000


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


def finding_dict(f: Finding, max_evidence_rows: int | None = 50) -> dict[str, Any]:
    """One finding as the JSON report holds it (docs/json-report.md); baseline comparison reads this shape."""
    inst = _instance_dicts(f.instances)
    return {
        "code": f.code,
        "rule": f.rule_name,
        "category": f.category,
        "title": f.title,
        "severity": f.severity.value,
        "message": f.message,
        "impact_ns": int(f.impact_ns),
        "impact_pct_span": round(float(f.impact_pct_span), 3),
        "impact_pct_step": None if f.impact_pct_step is None else round(float(f.impact_pct_step), 3),
        # the kind of figure impact_ns is (traceinsight.assess.savings) and its share of the GPU window the finding is about
        "saving_kind": f.saving_kind or None,
        "saving_ns": None if f.saving_ns is None else int(f.saving_ns),
        "share_pct": None if f.share_pct is None else round(float(f.share_pct), 3),
        "location": {k: (None if v is None else int(v)) for k, v in vars(f.location).items()},
        "fingerprint": f.fingerprint,
        "metrics": jsonable(f.metrics),
        "evidence": {
            "columns": [str(c) for c in f.evidence.columns],
            "rows": evidence_rows(f.evidence, max_evidence_rows),
            "total_rows": int(len(f.evidence)),
        },
        "fixes": {fw: {"text": fx.text, "code": fx.code} for fw, fx in f.fixes.items()},
        "instances": inst,
        "total_instances": len(f.instances),
        "explains": list(f.explains),
        "what_if": None if f.what_if is None else jsonable(f.what_if),
    }


def evidence_rows(evidence: pd.DataFrame, max_rows: int | None = None) -> list[list[Any]]:
    """The first ``max_rows`` rows of ``evidence`` (all when None; ``DataFrame.head``'s count), each a list of
    ``jsonable`` values, read in one object array: ``itertuples`` makes a Series per column, which is most of a
    finding's JSON on a small trace. The object array holds what each column iterates to (numpy numbers as Python
    scalars, datetimes as Timestamps, categoricals and strings as their values, missing ones as NaN or NA)."""
    ev = evidence if max_rows is None or len(evidence) <= max_rows else evidence.head(max_rows)
    return [[jsonable(v) for v in row] for row in ev.to_numpy(dtype=object).tolist()]


def _instance_dicts(instances: Any) -> list[dict[str, Any]]:
    """The kept instances: all, or the ``MAX_INSTANCES`` longest (ties: earlier in the list first), in time order
    (ties: list order). Picked on the columns; a dict is made only for the rows kept."""
    c = instance_columns(instances)
    keep = np.arange(len(c.start_ns))
    if len(keep) > MAX_INSTANCES:
        keep = smallest_first(c.start_ns - c.end_ns, MAX_INSTANCES)  # longest first
        keep = keep[np.argsort(c.start_ns[keep], kind="stable")]
    names = c.labels
    return [
        {"start_ns": s, "end_ns": e, "rank": None if r != r else int(r), "device": None if d != d else int(d), "label": names[k]}
        for s, e, r, d, k in zip(
            c.start_ns[keep].tolist(), c.end_ns[keep].tolist(), c.rank[keep].tolist(), c.device[keep].tolist(), c.label_code[keep].tolist()
        )
    ]


def jsonable(value: Any) -> Any:
    """Plain JSON values from numpy scalars, NaN, pandas NA and anything else (as its string)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(value, float) and value != value:  # NaN
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if value is pd.NA or value is pd.NaT:
        return None
    return str(value)


def render(analysis: Analysis, max_evidence_rows: int | None = 50, **_: Any) -> str:
    # json_text: C1, bidi and zero-width characters from the trace written as \uXXXX escapes (same decoded value)
    return json_text(msgspec.json.format(msgspec.json.encode(to_dict(analysis, max_evidence_rows)), indent=2).decode())


def _efficiency(analysis: Analysis) -> dict[str, Any] | None:
    from traceinsight.render.efficiency_view import efficiency_of

    eff = efficiency_of(analysis)
    return eff.to_dict() if eff is not None else None
