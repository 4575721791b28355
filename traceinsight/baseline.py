"""Findings compared with an earlier JSON report, so a CI gate fails on what a change introduced or made worse,
not on problems the main branch already had.

Findings are matched by fingerprint (rule, key, rank, device, stream: the place, not the numbers). Two traces of
the same model rarely cover the same length of time, so "worse" compares each finding's share of its trace's span,
not its absolute time: a finding is worse when its share grew by at least ``worse_pct`` percent of the old share
and by at least ``worse_points`` percentage points (the second guard keeps noise on tiny findings quiet).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .rule_api import Finding

NEW, WORSE, SAME = "new", "worse", "same"


@dataclass
class Comparison:
    source: str  # the baseline report's path
    status: dict[str, str]  # fingerprint of each current finding -> NEW | WORSE | SAME
    before_pct: dict[str, float]  # fingerprint -> the baseline's share of span, for matched findings
    fixed: list[dict[str, Any]] = field(default_factory=list)  # baseline findings that are gone: code, title, ...
    worse_pct: float = 25.0
    worse_points: float = 1.0

    def of(self, f: Finding) -> str:
        return self.status.get(f.fingerprint, NEW)

    def gating(self, findings: list[Finding]) -> list[Finding]:
        """The findings a gate should act on: new ones and worse ones."""
        return [f for f in findings if self.of(f) in (NEW, WORSE)]

    def counts(self) -> dict[str, int]:
        values = list(self.status.values())
        return {NEW: values.count(NEW), WORSE: values.count(WORSE), SAME: values.count(SAME), "fixed": len(self.fixed)}

    def sentence(self) -> str:
        c = self.counts()
        return f"compared with the baseline: {c[NEW]} new, {c[WORSE]} worse, {c[SAME]} unchanged, {c['fixed']} fixed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "counts": self.counts(),
            "worse_pct": self.worse_pct,
            "worse_points": self.worse_points,
            "fixed": self.fixed,
        }


def load_report(path: str | Path) -> dict[str, Any]:
    """A traceinsight JSON report (``analyze -f json``); anything else is a usage error with one line."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"baseline {p}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"baseline {p}: not a traceinsight JSON report ({type(exc).__name__}: {exc})") from None
    findings = doc.get("findings") if isinstance(doc, dict) else None
    if not isinstance(findings, list) or not all(isinstance(f, dict) and isinstance(f.get("fingerprint"), str) for f in findings):
        raise ConfigError(f"baseline {p}: not a traceinsight JSON report (write one with 'traceinsight analyze TRACE -f json -o FILE')")
    return doc


def compare(findings: list[Finding], baseline: dict[str, Any], *, source: str = "", worse_pct: float = 25.0,
            worse_points: float = 1.0) -> Comparison:
    """Classify ``findings`` against a baseline report (as ``load_report`` returns it)."""
    before: dict[str, dict[str, Any]] = {}
    for f in baseline.get("findings", []):
        before.setdefault(f["fingerprint"], f)
    status: dict[str, str] = {}
    before_pct: dict[str, float] = {}
    for f in findings:
        old = before.get(f.fingerprint)
        if old is None:
            status[f.fingerprint] = NEW
            continue
        was = _pct(old.get("impact_pct_span"))
        before_pct[f.fingerprint] = was
        grew = f.impact_pct_span - was
        worse = grew >= worse_points and f.impact_pct_span >= was * (1 + worse_pct / 100.0)
        status[f.fingerprint] = WORSE if worse else SAME
    now = {f.fingerprint for f in findings}
    fixed = [
        {"code": str(f.get("code", "")), "title": str(f.get("title", "")), "fingerprint": fp,
         "impact_pct_span": _pct(f.get("impact_pct_span"))}
        for fp, f in before.items()
        if fp not in now
    ]
    return Comparison(source=source, status=status, before_pct=before_pct, fixed=fixed, worse_pct=worse_pct,
                      worse_points=worse_points)


def _pct(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0
