"""traceinsight: why the GPU sits idle, from PyTorch, TensorFlow and Nsight Systems traces.

Python API::

    import traceinsight
    tl = traceinsight.load("trace.json.gz")          # -> Timeline (one pandas DataFrame + metadata)
    analysis = traceinsight.analyze(tl)              # -> Analysis (summary metrics + findings)
    for f in analysis.findings:
        print(f.code, f.title, f.impact_ns)
"""

from __future__ import annotations

import os
from typing import Any, Iterable

from .engine import Analysis, Config, discover, instantiate, run
from .errors import TraceInsightError, TraceReadError, UnknownFormatError
from .ingest import load
from .rule_api import Context, Finding, Fix, Location, Option, Rule, Severity
from .rule_api_job import CrossRankRule, JobContext
from .timeline import Timeline, TraceMeta

__version__ = "0.1.0"

__all__ = [
    "Analysis",
    "Config",
    "Context",
    "CrossRankRule",
    "Finding",
    "Fix",
    "JobContext",
    "Location",
    "Option",
    "Rule",
    "Severity",
    "Timeline",
    "TraceMeta",
    "TraceInsightError",
    "TraceReadError",
    "UnknownFormatError",
    "analyze",
    "load",
    "native_status",
]

#: The formats an optional C accelerator speeds up (built at install time where a compiler exists).
_NATIVE = {"pytorch": "PyTorch Profiler JSON", "tensorflow-xplane": "TensorFlow XPlane"}


def native_status() -> dict[str, bool]:
    """Which formats load through a native accelerator here (False: the pure-Python path, same results, slower)."""
    from .ingest import native

    return {label: native.built(fmt) is not None for fmt, label in _NATIVE.items()}


def analyze(
    trace: "str | os.PathLike | Timeline",
    *,
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    options: dict[str, dict[str, Any]] | None = None,
    rules: Iterable[str | os.PathLike] = (),
    extra_rules: Iterable[type[Rule]] = (),
    config: Config | None = None,
    baseline: "str | os.PathLike | None" = None,
    min_impact: float | None = None,
) -> Analysis:
    """Load (if given a path) and analyse a trace with the built-in, installed and given rules.

    ``select`` / ``ignore`` take rule codes or prefixes; ``options`` maps a code to option overrides;
    ``rules`` are local .py files or folders; ``extra_rules`` are Rule classes defined in the caller's code.
    ``min_impact`` (% of the GPU window, default 1) leaves out findings that cost less; 0 reports everything.
    ``baseline`` is an earlier JSON report: ``analysis.baseline`` then tells which findings are new or worse.
    """
    timeline = trace if isinstance(trace, Timeline) else load(trace)
    cfg = config or Config()
    cfg.select = list(select) or cfg.select
    cfg.ignore = list(ignore) or cfg.ignore
    for code, opts in (options or {}).items():
        cfg.options.setdefault(code.upper(), {}).update(opts)
    ruleset = discover([*cfg.rule_paths, *rules])
    for cls in extra_rules:
        ruleset.add(cls, "analyze(extra_rules=...)")
    if min_impact is not None:
        cfg.min_impact = float(min_impact)
    analysis = run(
        timeline, instantiate(ruleset, cfg), extra_warnings=ruleset.warnings, min_impact=cfg.min_impact, severity_overrides=cfg.severity
    )
    if baseline is not None:
        from .baseline import compare, load_report

        analysis.baseline = compare(analysis.findings, load_report(baseline), source=str(baseline))
    return analysis
