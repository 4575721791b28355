"""The ``traceinsight`` command (typer). Exit codes are in ``errors.py`` and README."""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from . import __version__
from .engine import Config, discover, instantiate, run
from .errors import EXIT_FINDINGS, TraceInsightError
from .rule_api import Severity

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Explain why the GPU sits idle in a PyTorch, TensorFlow or Nsight Systems trace, and what to change.",
)


class Format(str, enum.Enum):
    text = "text"
    json = "json"
    md = "md"
    html = "html"


class FailOn(str, enum.Enum):
    never = "never"
    info = "info"
    warning = "warning"
    error = "error"


_SUFFIX_FORMAT = {".html": Format.html, ".htm": Format.html, ".md": Format.md, ".json": Format.json, ".txt": Format.text}


def _fail(exc: TraceInsightError) -> None:
    typer.echo(f"traceinsight: error: {exc}", err=True)
    raise typer.Exit(exc.exit_code)


def _version(value: bool) -> None:
    if value:
        from . import native_status

        typer.echo(f"traceinsight {__version__}")
        for fmt, native in native_status().items():
            typer.echo(f"  {fmt}: {'native reader' if native else 'pure-Python reader (no C compiler at install time)'}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[Optional[bool], typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")] = None,
) -> None:
    """traceinsight command line."""


@app.command()
def analyze(
    path: Annotated[Path, typer.Argument(help="Trace file or folder: .json/.json.gz, .sqlite/.nsys-rep, .xplane.pb, a TensorBoard logdir.")],
    fmt: Annotated[
        Optional[str],
        typer.Option("--format", "-f", help="text, json, md or html; several comma-separated (e.g. html,md,json) write one file each into -o DIR. Default: from -o's extension, else text."),
    ] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the report here instead of stdout (a folder when several formats are asked for).")] = None,
    select: Annotated[Optional[list[str]], typer.Option("--select", help="Only these rule codes or prefixes (repeatable, or comma-separated).")] = None,
    ignore: Annotated[Optional[list[str]], typer.Option("--ignore", help="Skip these rule codes or prefixes.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Rule option, CODE.option=value (repeatable).")] = None,
    rules: Annotated[Optional[list[Path]], typer.Option("--rules", help="Extra rules from a .py file or a folder of them.")] = None,
    config: Annotated[Optional[Path], typer.Option("--config", help="pyproject.toml with [tool.traceinsight]; default: the nearest one.")] = None,
    min_impact: Annotated[
        Optional[float],
        typer.Option("--min-impact", help="Leave out findings costing less than this % of the GPU window (default 1; 0 shows everything).", min=0.0),
    ] = None,
    fail_on: Annotated[FailOn, typer.Option("--fail-on", help="Exit 1 when a finding at or above this severity exists.")] = FailOn.never,
    trace_format: Annotated[Optional[str], typer.Option("--trace-format", help="Force the parser: pytorch, nsys, tensorflow-xplane, tensorflow-logdir, tensorflow-json.")] = None,
    run_name: Annotated[Optional[str], typer.Option("--run", help="TensorBoard logdir: the profile run to read (default: newest).")] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show progress on stderr while reading.")] = True,
    baseline: Annotated[
        Optional[Path],
        typer.Option("--baseline", help="An earlier JSON report (e.g. of main): mark findings new / worse / unchanged, and let --fail-on act only on new and worse ones."),
    ] = None,
    worse_by: Annotated[float, typer.Option("--worse-by", help="With --baseline: a finding is worse when its share of the span grew by this many percent (and by 1 point or more).")] = 25.0,
    scheduler: Annotated[
        Optional[str],
        typer.Option("--scheduler", help="Whole-job analysis: run the per-rank map on this Dask scheduler (tcp://host:8786; env TRACEINSIGHT_SCHEDULER). Object-store URLs, globs and folders of rank files take the job path even without it."),
    ] = None,
) -> None:
    """Read a trace, run the rules, and report findings with their cost and fixes."""
    from .ingest import load
    from .job.cli import analyze_job_cli, wants_job

    formats = _parse_formats(fmt, output)
    try:
        cfg = Config.from_pyproject(config)
        cfg.select = _split(select) or cfg.select
        cfg.ignore = _split(ignore) or cfg.ignore
        if min_impact is not None:
            cfg.min_impact = float(min_impact)
        for a in set_ or []:
            cfg.set_option(a)
        if baseline is None and wants_job(path, scheduler):  # whole job: map per rank, reduce across ranks
            cfg.rule_paths = [*cfg.rule_paths, *(str(r) for r in rules or [])]
            return analyze_job_cli(path, cfg, formats, output, scheduler=scheduler, trace_format=trace_format, fail_on=fail_on.value, report_stem=REPORT_STEM, suffixes=_FORMAT_SUFFIX)
        ruleset = discover([*cfg.rule_paths, *(rules or [])])
        selected = instantiate(ruleset, cfg)
        options = {"run": run_name} if run_name else {}
        timeline = _load_with_progress(load, path, trace_format, options, progress)
        analysis = run(timeline, selected, extra_warnings=ruleset.warnings, min_impact=cfg.min_impact, severity_overrides=cfg.severity)
        if baseline is not None:
            from .baseline import compare, load_report

            analysis.baseline = compare(analysis.findings, load_report(baseline), source=str(baseline), worse_pct=worse_by)
    except TraceInsightError as exc:
        _fail(exc)
        return
    from .render import render

    if len(formats) > 1:
        assert output is not None
        output.mkdir(parents=True, exist_ok=True)
        html_name = f"{REPORT_STEM}.html" if Format.html in formats else None
        for f in formats:
            target = output / f"{REPORT_STEM}.{_FORMAT_SUFFIX[f]}"
            target.write_text(render(analysis, f.value, html_name=html_name), encoding="utf-8")
            typer.echo(f"wrote {target}", err=True)
    elif output:
        text = render(analysis, formats[0].value, html_name=output.with_suffix(".html").name)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
        typer.echo(f"wrote {output} ({len(analysis.findings)} findings)", err=True)
    else:
        text = render(analysis, formats[0].value, html_name=None)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    if fail_on != FailOn.never:
        threshold = Severity.parse(fail_on.value).rank
        gated = analysis.baseline.gating(analysis.findings) if analysis.baseline else analysis.findings
        if any(f.severity.rank >= threshold for f in gated):
            raise typer.Exit(EXIT_FINDINGS)


REPORT_STEM = "traceinsight-report"
_FORMAT_SUFFIX = {Format.text: "txt", Format.json: "json", Format.md: "md", Format.html: "html"}


def _parse_formats(fmt: Optional[str], output: Optional[Path]) -> list[Format]:
    """The formats asked for; several need an output folder. Bad values are usage errors (exit 2)."""
    if not fmt:
        return [(_SUFFIX_FORMAT.get(output.suffix.lower()) if output else None) or Format.text]
    out: list[Format] = []
    for part in _split([fmt]):
        try:
            f = Format(part.lower())
        except ValueError:
            raise typer.BadParameter(f"{part!r} is not one of text, json, md, html", param_hint="--format") from None
        if f not in out:
            out.append(f)
    if len(out) > 1 and output is None:
        raise typer.BadParameter("several formats need -o DIR (a folder to write one file per format)", param_hint="--format")
    if len(out) > 1 and output is not None and output.exists() and not output.is_dir():
        raise typer.BadParameter(f"{output} is a file; several formats need a folder", param_hint="--output")
    return out


def _split(values: Optional[list[str]]) -> list[str]:
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


def _load_with_progress(load, path: Path, trace_format: Optional[str], options: dict, progress: bool):
    big = path.is_file() and path.stat().st_size > 8 * 1024 * 1024
    if not (progress and big and sys.stderr.isatty()):
        return load(path, format=trace_format, **options)
    from rich.console import Console

    console = Console(stderr=True)
    with console.status(f"reading {path.name} ...") as status:
        return load(path, format=trace_format, progress=lambda msg: status.update(f"{path.name}: {msg}"), **options)


@app.command("rules")
def list_rules(
    rules: Annotated[Optional[list[Path]], typer.Option("--rules", help="Also list rules from these files or folders.")] = None,
) -> None:
    """List every available rule: code, name, default severity, summary."""
    rs = discover(rules or [])
    for w in rs.warnings:
        typer.echo(f"warning: {w}", err=True)
    for code, cls in sorted(rs.rules.items()):
        typer.echo(f"{code:<8} {cls.name:<26} {cls.severity.value:<8} {cls.summary}")


@app.command("rule")
def show_rule(
    code: Annotated[str, typer.Argument(help="Rule code, e.g. TI001.")],
    rules: Annotated[Optional[list[Path]], typer.Option("--rules", help="Also look in these files or folders.")] = None,
) -> None:
    """Print one rule's documentation: why it matters, what is measured, options, fixes."""
    rs = discover(rules or [])
    cls = rs.rules.get(code.upper())
    if cls is None:
        typer.echo(f"traceinsight: error: no rule {code}; see 'traceinsight rules'", err=True)
        raise typer.Exit(2)
    typer.echo(cls.docs())


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("traceinsight: interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
