"""The job path of ``traceinsight analyze``: taken for object-store URLs, globs, folders of rank files, or when a
Dask scheduler is given. Kept here so the command module only dispatches."""

from __future__ import annotations

import os
import re
from pathlib import Path

import typer

from traceinsight.pipeline.config import Config
from traceinsight.vocab.errors import EXIT_FINDINGS, EXIT_RANKS_MISSING, EXIT_RULE_FAILED, TraceInsightError
from traceinsight.rule_api import Severity
from traceinsight.job.storage import SCHEDULER_ENV, is_job_path

_URL = re.compile(r"^([a-zA-Z][\w+.-]+):/+(.*)$")


def raw_path(path: str | os.PathLike) -> str:
    """The user's path with a URL's ``//`` restored (a ``pathlib.Path`` argument collapses ``s3://b`` to ``s3:/b``)."""
    s = str(path)
    m = _URL.match(s)
    if not m or "://" in s:
        return s
    proto, rest = m.groups()
    return f"{proto}:///{rest}" if proto == "file" else f"{proto}://{rest}"


def wants_job(path: str | os.PathLike, scheduler: str | None) -> bool:
    """An explicit ``--scheduler`` sends any input to the job path; ``TRACEINSIGHT_SCHEDULER`` only says where a
    job path runs, so a single trace file stays local even when the variable is set."""
    return bool(scheduler) or is_job_path(raw_path(path))


def analyze_job_cli(path, cfg: Config, formats: list, output: Path | None, *, scheduler: str | None, trace_format: str | None, fail_on: str,
                    rule_timeout: float | None = None, allow_missing_ranks: bool = False, max_bytes: int | None = None) -> None:
    """Run the job analysis and write its report(s) like the single-trace path does; exit codes are the same, plus
    EXIT_RANKS_MISSING when a rank file was not analysed (unless ``allow_missing_ranks``)."""
    from traceinsight.render.outputs import plan, write_reports
    from traceinsight.pipeline.rule_guard import DEFAULT_RULE_TIMEOUT_S
    from traceinsight.vocab.sanitize import terminal
    from traceinsight.job.run import analyze_job

    scheduler = scheduler or os.environ.get(SCHEDULER_ENV) or None
    if scheduler:
        typer.echo(f"traceinsight: running the per-rank map on the Dask scheduler {terminal(scheduler, 200)} (trusted: it can run code here)", err=True)
    try:
        ja = _with_rank_progress(lambda progress: analyze_job(raw_path(path), config=cfg, scheduler=scheduler, trace_format=trace_format, progress=progress,
                                                              rule_timeout=DEFAULT_RULE_TIMEOUT_S if rule_timeout is None else rule_timeout, max_bytes=max_bytes))
    except TraceInsightError as exc:
        typer.echo(f"traceinsight: error: {terminal(exc)}", err=True)
        raise typer.Exit(exc.exit_code)
    write_reports(ja, plan([f.value for f in formats], output, "job"), product="job", say=lambda line: typer.echo(line, err=True),
                  tally=f"{len(ja.findings)} cross-rank findings, {ja.job.rank_count} ranks")
    if ja.rule_failures:
        for line in ja.rule_failures:
            typer.echo(f"traceinsight: error: {terminal(line, 600)}", err=True)
        raise typer.Exit(EXIT_RULE_FAILED)
    if ja.missing and not allow_missing_ranks:
        typer.echo(f"traceinsight: error: {len(ja.missing)} rank file(s) not analysed (pass --allow-missing-ranks to accept a partial job):", err=True)
        for line in ja.missing[:20]:
            typer.echo(f"  {terminal(line, 400)}", err=True)
        if len(ja.missing) > 20:
            typer.echo(f"  ... and {len(ja.missing) - 20} more (all in the report)", err=True)
        raise typer.Exit(EXIT_RANKS_MISSING)
    if fail_on != "never":
        worst = ja.worst_severity()
        if worst is not None and worst.rank >= Severity.parse(fail_on).rank:
            raise typer.Exit(EXIT_FINDINGS)


def _with_rank_progress(run):
    """``run(progress)`` with a rich bar of ranks done on stderr when it is a terminal (quiet otherwise)."""
    import sys

    if not sys.stderr.isatty():
        return run(None)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    with Progress(TextColumn("ranks"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("ranks", total=None)
        return run(lambda done, total: bar.update(task, completed=done, total=total))
