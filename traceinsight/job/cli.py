"""The job path of ``traceinsight analyze``: taken for object-store URLs, globs, folders of rank files, or when a
Dask scheduler is given. Kept here so the command module only dispatches."""

from __future__ import annotations

import os
import re
from pathlib import Path

import typer

from ..config import Config
from ..errors import EXIT_FINDINGS, TraceInsightError
from ..rule_api import Severity
from .storage import SCHEDULER_ENV, is_job_path

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
    return bool(scheduler or os.environ.get(SCHEDULER_ENV)) or is_job_path(raw_path(path))


def analyze_job_cli(path, cfg: Config, formats: list, output: Path | None, *, scheduler: str | None, trace_format: str | None, fail_on: str, report_stem: str, suffixes: dict) -> None:
    """Run the job analysis and write its report(s) like the single-trace path does; exit codes are the same."""
    from ..outputs import write_file, write_stdout
    from ..sanitize import terminal
    from .report import render
    from .run import analyze_job

    try:
        ja = analyze_job(raw_path(path), config=cfg, scheduler=scheduler, trace_format=trace_format)
    except TraceInsightError as exc:
        typer.echo(f"traceinsight: error: {terminal(exc)}", err=True)
        raise typer.Exit(exc.exit_code)
    if len(formats) > 1:
        assert output is not None
        for f in formats:
            target = output / f"{report_stem}.{suffixes[f]}"
            write_file(target, render(ja, f.value))
            typer.echo(f"wrote {terminal(target)}", err=True)
    elif output:
        write_file(output, render(ja, formats[0].value))
        typer.echo(f"wrote {terminal(output)} ({len(ja.findings)} cross-rank findings, {ja.job.rank_count} ranks)", err=True)
    else:
        text = render(ja, formats[0].value)
        write_stdout(text if text.endswith("\n") else text + "\n")
    if fail_on != "never":
        worst = ja.worst_severity()
        if worst is not None and worst.rank >= Severity.parse(fail_on).rank:
            raise typer.Exit(EXIT_FINDINGS)
