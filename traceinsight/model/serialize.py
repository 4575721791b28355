"""The serializer: the model's values (findings, their evidence and instances, numpy and pandas scalars) as plain
JSON values, and a document as JSON text. One home for every product that writes JSON: the single-trace report
(``traceinsight.render.json_report``), the MCP server's answers (which are that report's document), the whole-job
report and its per-rank map (``traceinsight.job``), and the diff (``traceinsight.delta``), so a finding reads the
same wherever it lands and a baseline or a diff can read back what any of them wrote.

It sits on the model's floor because it reads only the model: what a product puts into its document (derived
views, verdicts, per-rank tables) is the product's business; how a value becomes JSON is this module's.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from traceinsight.model.finding import Finding, instance_columns
from traceinsight.vocab.sanitize import json_text

#: Instances kept per finding (the longest ones, in time order); ``total_instances`` says how many there were.
MAX_INSTANCES = 1000


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


def dumps(doc: Any) -> str:
    """A document as indented JSON text (the single-trace report, the diff, the MCP answers). ``json_text``: C1,
    bidi and zero-width characters from the trace are written as \\uXXXX escapes (the same decoded value)."""
    return json_text(msgspec.json.format(msgspec.json.encode(doc), indent=2).decode())


def dumps_compact(doc: Any) -> str:
    """A large document (the whole-job report, thousands of ranks) with one-space indents, values made
    ``jsonable`` first; its bytes are those the job report has always had."""
    return json.dumps(jsonable(doc), indent=1, ensure_ascii=False, sort_keys=False) + "\n"


def finding_dict(f: Finding, max_evidence_rows: int | None = 50) -> dict[str, Any]:
    """One finding as the JSON report holds it (docs/json-report.md); baseline comparison reads this shape."""
    inst = instance_dicts(f.instances)
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


def instance_dicts(instances: Any) -> list[dict[str, Any]]:
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


def smallest_first(key: np.ndarray, k: int) -> np.ndarray:
    """``np.argsort(key, kind="stable")[:k]`` (the k smallest keys, ties in index order) without sorting every
    key: a partition finds the k-th smallest, and only the keys up to it are sorted. Reports keep the longest
    few hundred of up to millions of instances."""
    if k >= len(key):
        return np.argsort(key, kind="stable")
    if k <= 0:
        return np.zeros(0, np.intp)
    cand = np.flatnonzero(key <= np.partition(key, k - 1)[k - 1])  # every key below the k-th, and its ties
    return cand[np.argsort(key[cand], kind="stable")][:k]
