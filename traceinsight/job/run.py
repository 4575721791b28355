"""Analysing a whole job: map ``analyze_rank`` over the rank files, reduce the summaries, run cross-rank rules.

The map runs on a Dask cluster when a scheduler address is given (``--scheduler`` or ``TRACEINSIGHT_SCHEDULER``),
otherwise on local processes (nothing to start). Either way only summaries come back, so the coordinator's memory
depends on ranks x summary size, not on events.
"""

from __future__ import annotations

import os
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import Config
from ..severity import DEFAULT_MIN_IMPACT_PCT
from ..errors import TraceReadError
from ..rule_api import Finding
from ..rule_api_job import JobContext
from .mapper import MapSettings, RankFailure, analyze_rank, per_rank_rules
from .reduce import Job, reduce_summaries
from .storage import SCHEDULER_ENV, expand
from .summary import RankSummary



@dataclass
class JobAnalysis:
    """The result of a whole-job analysis: the reduced job, cross-rank findings, and each rank's own findings."""

    source: str
    job: Job
    findings: list[Finding]  # cross-rank rules' findings, largest impact first
    warnings: list[str]
    rules_run: list[str]
    engine: str  # "local processes (N)" or "dask <address>"
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def rank_findings(self) -> list[tuple[int, dict[str, Any]]]:
        return [(s.rank, f) for s in self.job.summaries for f in s.findings]

    def worst_severity(self):
        from ..rule_api import Severity

        sev = [f.severity for f in self.findings] + [Severity.parse(f["severity"]) for _, f in self.rank_findings]
        return max(sev, key=lambda s: s.rank) if sev else None


def _map_local(urls: list[str], settings: MapSettings, workers: int | None) -> list:
    n = max(1, min(len(urls), workers or os.cpu_count() or 1))
    if n == 1:
        return [analyze_rank(u, settings) for u in urls]
    with ProcessPoolExecutor(max_workers=n) as pool:
        return list(pool.map(analyze_rank, urls, [settings] * len(urls), chunksize=1))


def _map_dask(urls: list[str], settings: MapSettings, scheduler: Any) -> list:
    try:
        from distributed import Client
    except ImportError:
        raise TraceReadError("--scheduler needs dask.distributed: pip install 'traceinsight[job]'") from None
    own = not hasattr(scheduler, "submit")
    client = Client(scheduler, set_as_default=False) if own else scheduler
    try:
        futures = client.map(analyze_rank, urls, settings=settings, key=[f"traceinsight-rank-{i}" for i in range(len(urls))], pure=False)
        return client.gather(futures)
    finally:
        if own:
            client.close()


def analyze_job(
    path: str | os.PathLike | list[str],
    *,
    config: Config | None = None,
    scheduler: Any = None,
    storage_options: dict[str, Any] | None = None,
    trace_format: str | None = None,
    workers: int | None = None,
) -> JobAnalysis:
    """Analyse a job rank by rank: a folder, glob, object-store prefix or list of rank files.

    ``scheduler``: a Dask scheduler address or a ``distributed.Client``; None uses ``TRACEINSIGHT_SCHEDULER`` when
    set, else local processes (``workers`` of them, default: CPU count).
    """
    t0 = time.perf_counter()
    cfg = config or Config()
    settings = MapSettings.from_config(cfg, storage_options=dict(storage_options or {}), trace_format=trace_format)
    urls = list(path) if isinstance(path, list) else expand(path, storage_options)
    source = str(path) if not isinstance(path, list) else f"{len(urls)} rank files"
    scheduler = scheduler or os.environ.get(SCHEDULER_ENV) or None
    t_map = time.perf_counter()
    if scheduler is not None:
        results = _map_dask(urls, settings, scheduler)
        engine = f"dask ({scheduler if isinstance(scheduler, str) else 'client'})"
    else:
        results = _map_local(urls, settings, workers)
        engine = "local processes"
    t_reduce = time.perf_counter()
    summaries: list[RankSummary] = []
    failures: list[str] = []
    for url, res in zip(urls, results):
        if isinstance(res, RankFailure):
            failures.append(res.error)
        else:
            summaries.extend(res)
    if not summaries:
        raise TraceReadError(f"{source}: no rank could be read" + (f" ({failures[0]})" if failures else ""))
    job = reduce_summaries(summaries, failures)
    _, cross, rule_warnings = per_rank_rules(settings)
    findings, warnings = run_cross_rank(job, cross, min_impact=settings.min_impact)
    warnings = [*rule_warnings, *(f"rank file left out: {f}" for f in failures), *job.warnings, *warnings]
    t_end = time.perf_counter()
    rules_run = sorted(set(summaries[0].rules_run) | {r.code for r in cross})
    return JobAnalysis(
        source=source,
        job=job,
        findings=findings,
        warnings=list(dict.fromkeys(warnings)),
        rules_run=rules_run,
        engine=engine,
        timings={"map_s": t_reduce - t_map, "reduce_s": t_end - t_reduce, "total_s": t_end - t0},
    )


def run_cross_rank(job: Job, rules, min_impact: float = DEFAULT_MIN_IMPACT_PCT) -> tuple[list[Finding], list[str]]:
    """Cross-rank rules over the job; a crashing rule becomes a warning, as in the per-rank engine.

    As on one timeline, a finding costing less than ``min_impact`` % of its window is left out: the window of the
    rank it names (its largest device window), else the job's median rank window.
    """
    findings: list[Finding] = []
    warnings: list[str] = []
    for rule in rules:
        try:
            found = list(rule.check_job(JobContext(job, rule)) or [])
        except Exception as exc:  # one broken rule must not hide the others
            tb = traceback.extract_tb(exc.__traceback__)[-1]
            warnings.append(f"rule {rule.code} failed and was skipped: {type(exc).__name__}: {exc} ({Path(tb.filename).name}:{tb.lineno})")
            continue
        for f in found:
            if rule.severity != type(rule).severity and f.severity == type(rule).severity:
                f.severity = rule.severity
        findings.extend(f for f in found if not f.impact_ns or 100.0 * f.impact_ns / max(_window_of(job, f), 1) >= min_impact)
    findings.sort(key=lambda f: (-f.impact_ns, -f.severity.rank, f.code, f.key))
    return findings, warnings


def _window_of(job: Job, f: Finding) -> int:
    r = job.ranks
    if f.location.rank is not None and (r["rank"] == f.location.rank).any():
        return int(r.loc[r["rank"] == f.location.rank, "window_ns"].max())
    return int(r["window_ns"].median()) if len(r) else 0
