"""The map step: read one rank where it is stored, run the per-rank rules on it there, and return its summary.

This function is what a worker runs (a local process or a Dask worker); it takes and returns only small, picklable
things, and the rank's events die with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from traceinsight.pipeline.config import Config
from traceinsight.pipeline.engine import discover, instantiate, run
from traceinsight.model.serialize import finding_dict
from traceinsight.assess.severity import DEFAULT_MIN_IMPACT_PCT
from traceinsight.vocab.errors import TraceInsightError
from traceinsight.rule_api_job import CrossRankRule
from traceinsight.pipeline.rule_guard import DEFAULT_RULE_TIMEOUT_S, RuleFailure, describe
from traceinsight.job.storage import local_copy
from traceinsight.derive.ranks.summary import RankSummary, summarize_ranks


@dataclass
class MapSettings:
    """Everything a worker needs besides the path: rule selection and options, store options, a forced format."""

    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    severity: dict[str, str] = field(default_factory=dict)
    rule_paths: list[str] = field(default_factory=list)
    storage_options: dict[str, Any] = field(default_factory=dict)
    trace_format: str | None = None
    max_evidence_rows: int = 10
    min_impact: float = DEFAULT_MIN_IMPACT_PCT
    rule_timeout: float | None = DEFAULT_RULE_TIMEOUT_S
    max_bytes: int | None = None  # size ceiling per rank file (None: the default)

    @classmethod
    def from_config(cls, cfg: Config, **kw: Any) -> "MapSettings":  # noqa: D102
        return cls(select=list(cfg.select), ignore=list(cfg.ignore), options=dict(cfg.options), severity=dict(cfg.severity), rule_paths=list(cfg.rule_paths), min_impact=float(cfg.min_impact), **kw)

    def rules_key(self) -> str:
        """What decides the rule set: equal keys, equal rules (the per-process cache of ``per_rank_rules``)."""
        return repr((self.select, self.ignore, sorted(self.options.items()), sorted(self.severity.items()), self.rule_paths))

    def config(self) -> Config:
        return Config(select=list(self.select), ignore=list(self.ignore), options=dict(self.options), severity=dict(self.severity), rule_paths=list(self.rule_paths), min_impact=self.min_impact)


@dataclass
class RankFailure:
    """A rank file that could not be read or analysed: the job goes on without it and says so."""

    source: str
    error: str


#: Rule sets already discovered and configured in this process, by ``MapSettings.rules_key``: a worker analysing
#: 1,000 ranks discovers and imports the rules once, not 1,000 times. Rules keep no state between ``check`` calls.
_RULES: dict[str, tuple[list, list, list[str], list[RuleFailure]]] = {}


def per_rank_rules(settings: MapSettings):
    """The selected rules split into those that run on a rank's events and the cross-rank ones, with the
    discovery warnings and failures; discovered once per process and settings."""
    key = settings.rules_key()
    hit = _RULES.get(key)
    if hit is None:
        ruleset = discover(settings.rule_paths)
        rules = instantiate(ruleset, settings.config())
        local = [r for r in rules if not isinstance(r, CrossRankRule)]
        cross = [r for r in rules if isinstance(r, CrossRankRule)]
        hit = _RULES[key] = (local, cross, list(ruleset.warnings), list(ruleset.failures))
    return hit


def warm(settings: MapSettings) -> None:
    """Discover the rules and import the modules a rank's analysis needs, in this process: local workers forked
    from it then start with both instead of each paying for them (a tenth of a second per worker). A discovery
    error is left for the ranks to report, as they would without this."""
    import importlib

    try:
        per_rank_rules(settings)
    except TraceInsightError:
        pass
    for name in _RANK_MODULES:
        importlib.import_module(name)


#: Modules ``analyze_rank`` imports on first use (the readers, the ledger, the what-if, the efficiency model).
_RANK_MODULES = ("traceinsight.ingest", "traceinsight.ingest.kineto.reader", "traceinsight.derive.ledger", "traceinsight.derive.whatif",
                 "traceinsight.derive.efficiency", "traceinsight.derive.flops", "traceinsight.model.plausible", "traceinsight.model.steps")


def analyze_rank(url: str, settings: MapSettings) -> list[RankSummary] | RankFailure:
    """Read ``url``, run the per-rank rules, summarise; a bad rank becomes a RankFailure, never an exception.

    A rule that fails is not a bad rank: its failure travels in the summaries (``rule_failures``) and the job
    reports it the way a single trace does.
    """
    from traceinsight.ingest import load

    try:
        local, _, warnings, failures = per_rank_rules(settings)
        with local_copy(url, settings.storage_options) as path:
            timeline = load(path, format=settings.trace_format, max_bytes=settings.max_bytes)
        analysis = run(timeline, local, extra_warnings=warnings, min_impact=settings.min_impact, severity_overrides=settings.severity,
                       rule_failures=failures, rule_timeout=settings.rule_timeout, with_summary=False)
        store = analysis.views
        summaries = summarize_ranks(timeline, store.views, source=url, by_step=lambda: store.ledger.by_step)
    except TraceInsightError as exc:
        return RankFailure(url, str(exc))
    except MemoryError:
        return RankFailure(url, "out of memory while reading the rank")
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - a bug or a plugin's SystemExit on one rank must not end the job
        return RankFailure(url, f"analysis failed: {describe(exc)}")
    by_rank = {s.rank: s for s in summaries}
    for f in analysis.findings:
        target = by_rank.get(f.location.rank) if f.location.rank is not None else None
        d = finding_dict(f, max_evidence_rows=settings.max_evidence_rows)
        d["instances"] = d.get("instances", [])[: settings.max_evidence_rows]  # a summary, not every gap
        (target or summaries[0]).findings.append(d)
    for s in summaries:
        s.rules_run = list(analysis.rules_run)
        s.rule_failures = [f.line() for f in analysis.rule_failures]
        s.warnings = list(dict.fromkeys([*s.warnings, *analysis.warnings]))
    return summaries


def analyze_ranks(urls: list[str], settings: MapSettings) -> list[list[RankSummary] | RankFailure]:
    """``analyze_rank`` of each url in turn: one task for a chunk of ranks (each still fails alone)."""
    return [analyze_rank(u, settings) for u in urls]
