"""``Analysis``: the result of analysing one timeline, as plain data. Renderers read this and nothing else.

The engine fills every field once: the findings (graded, linked, with their what-if), the derived data the rules
used (``views``, a ``traceinsight.derive.derived.Derived``, and its ``ledger``), and the verdict and key numbers every
format shows (``verdict``, ``kpis``: ``traceinsight.assess.verdict.details`` and ``headline``), so no renderer derives or
decides anything a second time. ``_repr_html_`` is the notebook hook: the one place the model calls a renderer,
imported when a notebook asks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from traceinsight.derive.derived import Derived
    from traceinsight.model.finding import Finding, Severity
    from traceinsight.derive.ledger import Ledger
    from traceinsight.derive.summary import Summary
    from traceinsight.model.timeline import Timeline


@dataclass
class Analysis:
    """The result of analysing one timeline: summary metrics, findings (largest impact first), warnings, the verdict."""

    timeline: "Timeline"
    summary: "Summary"
    findings: "list[Finding]"
    warnings: list[str]
    rules_run: list[str]
    timings: dict[str, float] = field(default_factory=dict)
    baseline: Any = None  # a baseline.Comparison when the run was compared with an earlier report
    views: "Derived | None" = None  # the rules' derived data (views, ledger, what-if graphs), computed once
    ledger: "Ledger | None" = None  # the time ledger (traceinsight.derive.ledger)
    framework: str = "unknown"  # traceinsight.derive.framework.detect_framework: whose advice leads
    #: rules that failed to load, raised, returned malformed findings or timed out (rule_guard.RuleFailure); each is
    #: also a line in ``warnings``, and the command line exits EXIT_RULE_FAILED
    rule_failures: list = field(default_factory=list)
    #: what bounds the run, with its reasoning (``verdict.details``): category, headline, sentence, ledger totals
    verdict: dict[str, Any] = field(default_factory=dict)
    #: the key numbers every format shows (``verdict.headline``): span, busy %, findings, estimated savings
    kpis: dict[str, Any] = field(default_factory=dict)

    def _repr_html_(self) -> str:
        """Jupyter shows an Analysis as a compact, script-free version of the HTML report."""
        from traceinsight.render.notebook import render_inline

        return render_inline(self)

    def worst_severity(self) -> "Severity | None":
        if not self.findings:
            return None
        return max((f.severity for f in self.findings), key=lambda s: s.rank)
