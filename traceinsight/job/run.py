"""Analysing a whole job: map ``analyze_rank`` over the rank files, reduce the summaries, run cross-rank rules.

The map runs on a Dask cluster when a scheduler address is given (``--scheduler`` or ``TRACEINSIGHT_SCHEDULER``),
otherwise on local processes (nothing to start). Either way only summaries come back, so the coordinator's memory
depends on ranks x summary size, not on events.

A scheduler is trusted code: Dask sends tasks and results as pickles, so whoever runs the scheduler (or its workers)
can run code in this process. The address is checked before use (a malformed one, or one where nothing answers within
``SCHEDULER_TIMEOUT_S``, is a ``SchedulerError``, exit 7), and every report names the cluster that was used.
"""

from __future__ import annotations

import gc
import os
import re
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from traceinsight.pipeline.config import Config, check_rule_timeout
from traceinsight.assess.severity import DEFAULT_MIN_IMPACT_PCT
from traceinsight.vocab.errors import SchedulerError, TraceReadError
from traceinsight.pipeline.rule_guard import DEFAULT_RULE_TIMEOUT_S, RuleFailure, run_guarded
from traceinsight.rule_api import Finding
from traceinsight.rule_api_job import JobContext
from traceinsight.job.mapper import MapSettings, RankFailure, analyze_rank, analyze_ranks, per_rank_rules, warm
from traceinsight.derive.ranks.reduce import Job, reduce_summaries
from traceinsight.job.storage import SCHEDULER_ENV, expand
from traceinsight.derive.ranks.summary import RankSummary

#: Seconds to wait for the scheduler to answer before giving up with one line (exit 7).
SCHEDULER_TIMEOUT_S = 10
_ADDRESS = re.compile(r"^(?:(tcp|tls|inproc|ucx|ws|wss)://)?(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+)(?::(\d{1,5}))?/?$")


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
    rule_failures: list[str] = field(default_factory=list)  # rule_guard lines, per-rank ones with their rank count
    missing: list[str] = field(default_factory=list)  # rank files not analysed: "path: why" (failed or skipped)
    cluster: str | None = None  # the Dask scheduler the map ran on; None: local processes
    late_rank_rules: tuple[str, ...] = ()  # codes of the cross-rank rules whose findings each name a late rank

    @property
    def rank_findings(self) -> list[tuple[int, dict[str, Any]]]:
        return [(s.rank, f) for s in self.job.summaries for f in s.findings]

    def worst_severity(self):
        from traceinsight.rule_api import Severity

        sev = [f.severity for f in self.findings] + [Severity.parse(f["severity"]) for _, f in self.rank_findings]
        return max(sev, key=lambda s: s.rank) if sev else None


#: Most ranks one local task carries: per-task hand-off (pickling, a round trip to the worker) costs about as much
#: as a tiny rank's analysis, so many ranks go in chunks; a cap keeps the progress bar and the load balanced.
MAX_CHUNK = 16


def chunk_size(ranks: int, workers: int) -> int:
    """Ranks per local task: about 16 tasks per worker, 1 to ``MAX_CHUNK`` ranks each."""
    return max(1, min(MAX_CHUNK, ranks // (max(workers, 1) * 16)))


def _map_local(urls: list[str], settings: MapSettings, workers: int | None, progress: Callable[[int, int], None] | None = None,
               chunk: int | None = None) -> list:
    """``analyze_rank`` over ``urls`` in order, on ``workers`` local processes (in this one when 1), ``chunk`` ranks
    per task (default ``chunk_size``). The rules are discovered and the reading modules imported here first, so
    workers forked from this process start with both."""
    n = max(1, min(len(urls), workers or os.cpu_count() or 1))
    out: list = []
    if n == 1:
        for u in urls:
            out.append(analyze_rank(u, settings))
            if progress:
                progress(len(out), len(urls))
        return out
    warm(settings)
    # each worker moves what it inherited (modules, rules) out of the collector's reach: a full collection then
    # walks only the rank's own objects, not the tens of thousands imported before the fork (a few ms per rank)
    with ProcessPoolExecutor(max_workers=n, initializer=gc.freeze) as pool:
        for res in pool.map(analyze_rank, urls, [settings] * len(urls), chunksize=chunk or chunk_size(len(urls), n)):  # in order
            out.append(res)
            if progress:
                progress(len(out), len(urls))
    return out


def check_address(address: str) -> str:
    """A scheduler address as Dask takes it (``tcp://host:port``, ``host:port``); SchedulerError otherwise."""
    a = address.strip()
    if re.fullmatch(r"inproc://[\w.:/-]+", a):  # a scheduler in this very process (tests, notebooks)
        return a
    m = _ADDRESS.match(a)
    if not m or (m.group(3) is not None and not 0 < int(m.group(3)) < 65536):
        raise SchedulerError(f"scheduler address {a[:100]!r} is not of the form tcp://HOST:PORT (from --scheduler or {SCHEDULER_ENV})")
    return a


def connect(address: str, timeout_s: float = SCHEDULER_TIMEOUT_S):
    """A ``distributed.Client`` on ``address``, or one SchedulerError line when it is malformed or silent."""
    address = check_address(address)
    try:
        from distributed import Client
    except ImportError:
        raise SchedulerError("--scheduler needs dask.distributed: pip install 'traceinsight[job]'") from None
    client = Client.__new__(Client)  # kept by hand: a client whose start failed must be closed here, not at exit
    try:
        Client.__init__(client, address, set_as_default=False, timeout=timeout_s)
        return client
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        _abandon(client)
        raise SchedulerError(f"no Dask scheduler answered at {address} within {timeout_s:g} s ({reason})") from None
    except Exception as exc:  # noqa: BLE001 - something answered that is no Dask scheduler (an HTTP server's bytes read as a 3 EiB frame: MemoryError)
        _abandon(client)
        raise SchedulerError(f"no Dask scheduler at {address}: what answered there is not one ({type(exc).__name__})") from None


def _abandon(client: Any) -> None:
    """Stop a client whose connection failed and mark it closed, so that its finaliser has nothing left to do:
    otherwise it tries to close the connection at interpreter exit, waits 20 s and prints an ignored-exception
    traceback after the one-line error."""
    try:
        client._loop_runner.stop()
    except Exception:  # noqa: BLE001 - a client that failed before it had a loop
        pass
    try:
        client.status = "closed"
    except Exception:  # noqa: BLE001
        pass


def _map_dask(urls: list[str], settings: MapSettings, scheduler: Any, chunk: int | None = None) -> list:
    own = not hasattr(scheduler, "submit")
    client = connect(scheduler) if own else scheduler
    try:
        # ranks in chunks as on local processes: a Dask task costs about a millisecond of scheduling on its own
        size = chunk or chunk_size(len(urls), max(1, sum(client.nthreads().values())))
        chunks = [urls[i : i + size] for i in range(0, len(urls), size)]
        futures = client.map(analyze_ranks, chunks, settings=settings, key=[f"traceinsight-ranks-{i}" for i in range(len(chunks))], pure=False)
        return [res for part in client.gather(futures) for res in part]
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
    progress: Callable[[int, int], None] | None = None,
    rule_timeout: float | None = DEFAULT_RULE_TIMEOUT_S,
    max_bytes: int | None = None,
) -> JobAnalysis:
    """Analyse a job rank by rank: a folder, glob, object-store prefix or list of rank files.

    ``scheduler``: a Dask scheduler address or a ``distributed.Client``; None uses ``TRACEINSIGHT_SCHEDULER`` when
    set, else local processes (``workers`` of them, default: CPU count). ``progress(done, total)`` hears each rank
    the local map finishes (for a progress bar). Rank files that were skipped (not regular files, links leading out
    of the folder) or failed are in ``missing``; rules that failed, in ``rule_failures``.
    """
    t0 = time.perf_counter()
    cfg = config or Config()
    settings = MapSettings.from_config(cfg, storage_options=dict(storage_options or {}), trace_format=trace_format,
                                       rule_timeout=check_rule_timeout(rule_timeout), max_bytes=max_bytes)
    skipped: list[str] = []
    urls = list(path) if isinstance(path, list) else expand(path, storage_options, skipped=skipped)
    source = str(path) if not isinstance(path, list) else f"{len(urls)} rank files"
    scheduler = scheduler or os.environ.get(SCHEDULER_ENV) or None
    t_map = time.perf_counter()
    if scheduler is not None:
        results = _map_dask(urls, settings, scheduler)
        cluster = scheduler if isinstance(scheduler, str) else str(getattr(getattr(scheduler, "scheduler", None), "address", "a distributed.Client"))
        engine = f"dask ({cluster})"
    else:
        results = _map_local(urls, settings, workers, progress)
        engine, cluster = "local processes", None
    t_reduce = time.perf_counter()
    summaries: list[RankSummary] = []
    failures: list[str] = []
    for url, res in zip(urls, results):
        if isinstance(res, RankFailure):
            failures.append(res.error if res.error.startswith(res.source) else f"{res.source}: {res.error}")
        else:
            summaries.extend(res)
    if not summaries:
        raise TraceReadError(f"{source}: no rank could be read" + (f" ({failures[0]})" if failures else ""))
    job = reduce_summaries(summaries, failures)
    _, cross, rule_warnings, _ = per_rank_rules(settings)
    findings, warnings, cross_failures = run_cross_rank(job, cross, min_impact=settings.min_impact, rule_timeout=settings.rule_timeout)
    missing = [*failures, *skipped]
    rule_failures = _per_rank_failures(summaries) + [f.line() for f in cross_failures]
    warnings = [*rule_failures, *rule_warnings, *(f"rank file left out: {f}" for f in missing), *job.warnings, *warnings]
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
        rule_failures=rule_failures,
        missing=missing,
        cluster=cluster,
        late_rank_rules=tuple(r.code for r in cross if r.names_late_rank),
    )


def _per_rank_failures(summaries: list[RankSummary]) -> list[str]:
    """Each distinct rule failure once, with how many ranks it happened on."""
    count: dict[str, int] = {}
    for s in summaries:
        for line in dict.fromkeys(s.rule_failures):
            count[line] = count.get(line, 0) + 1
    n = len(summaries)
    return [line if n == 1 else f"{line} (on {k} of {n} ranks)" for line, k in count.items()]


def run_cross_rank(job: Job, rules, min_impact: float = DEFAULT_MIN_IMPACT_PCT,
                   rule_timeout: float | None = DEFAULT_RULE_TIMEOUT_S) -> tuple[list[Finding], list[str], list[RuleFailure]]:
    """Cross-rank rules over the job; a failing rule becomes a RuleFailure, as in the per-rank engine.

    As on one timeline, a finding costing less than ``min_impact`` % of its window is left out: the window of the
    rank it names (its largest device window), else the job's median rank window.
    """
    findings: list[Finding] = []
    warnings: list[str] = []
    failures: list[RuleFailure] = []
    if job.mixed_runs:  # different runs in one folder: nothing across them is one job's (said in job.warnings)
        return findings, warnings, failures
    for rule in rules:
        found, failure = run_guarded(rule, lambda rule=rule: rule.check_job(JobContext(job, rule)), rule_timeout)
        if failure is not None:  # one broken rule must not hide the others, nor pass silently
            failures.append(failure)
            continue
        for f in found:
            if rule.severity != type(rule).severity and f.severity == type(rule).severity:
                f.severity = rule.severity
        findings.extend(f for f in found if not f.impact_ns or 100.0 * f.impact_ns / max(_window_of(job, f), 1) >= min_impact)
    findings.sort(key=lambda f: (-f.impact_ns, -f.severity.rank, f.code, f.key))
    return findings, warnings, failures


def _window_of(job: Job, f: Finding) -> int:
    r = job.ranks
    if f.location.rank is not None and (r["rank"] == f.location.rank).any():
        return int(r.loc[r["rank"] == f.location.rank, "window_ns"].max())
    return int(r["window_ns"].median()) if len(r) else 0
