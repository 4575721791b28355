"""The ``traceinsight`` command (typer). Exit codes are in ``errors.py`` and README.

The annotations here are objects, not strings (no ``from __future__ import annotations``): typer reads the
signature of every command on every run, and string annotations cost it some 180 evaluations (7 ms) each time.
"""

import enum
import os
import shutil
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from traceinsight.cli.coerce import Command, Group
from traceinsight.vocab.version import __version__
from traceinsight.pipeline.config import TRUST_ENV, Config, check_rule_timeout, check_worse_by, parse_assignments
from traceinsight.vocab.errors import EXIT_FINDINGS, EXIT_RANKS_MISSING, EXIT_RULE_FAILED, TraceInsightError
from traceinsight.pipeline.plugins import discover
from traceinsight.model.finding import Severity
from traceinsight.pipeline.rule_guard import DEFAULT_RULE_TIMEOUT_S
from traceinsight.render.outputs import REPORT_STEM, SUFFIX
from traceinsight.render import FORMATS, for_extension, names, phrase
from traceinsight.ingest import FORMATS as INPUT_FORMATS
from traceinsight.vocab.sanitize import rich, terminal, terminal_lines

app = typer.Typer(
    cls=Group,
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Explain why the GPU sits idle in a PyTorch, TensorFlow or Nsight Systems trace, and what to change.",
)


#: The output formats (``render.FORMATS``, the one list).
Format = enum.Enum("Format", {name: name for name in FORMATS}, type=str)


class FailOn(str, enum.Enum):
    never = "never"
    info = "info"
    warning = "warning"
    error = "error"


_SUFFIX_FORMAT = {ext: Format(name) for name, f in FORMATS.items() for ext in f.extensions}


def _fail(exc: TraceInsightError) -> None:
    if str(exc):  # messages quote file and trace names: one terminal-safe line
        typer.echo(f"traceinsight: error: {terminal(exc)}", err=True)
    raise typer.Exit(exc.exit_code)


def _version(value: bool) -> None:
    if value:
        from traceinsight import native_status

        typer.echo(f"traceinsight {__version__}")
        for fmt, native in native_status().items():
            typer.echo(f"  {fmt}: {'native reader' if native else 'pure-Python reader (no C compiler at install time)'}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[Optional[bool], typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")] = None,
) -> None:
    """traceinsight command line."""


@app.command(cls=Command)
def analyze(
    path: Annotated[Path, typer.Argument(help="Trace file or folder: .json/.json.gz, .sqlite/.nsys-rep, .xplane.pb, a TensorBoard logdir.")],
    fmt: Annotated[
        Optional[str],
        typer.Option("--format", "-f", help=f"{phrase('single', notes=True)}; several comma-separated (e.g. html,md,json) write one file each into -o DIR. Default: from -o's extension, else text."),
    ] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the report here instead of stdout (a folder when several formats are asked for).")] = None,
    select: Annotated[Optional[list[str]], typer.Option("--select", help="Only these rule codes or prefixes (repeatable, or comma-separated).")] = None,
    ignore: Annotated[Optional[list[str]], typer.Option("--ignore", help="Skip these rule codes or prefixes.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Rule option, CODE.option=value (repeatable).")] = None,
    rules: Annotated[Optional[list[Path]], typer.Option("--rules", help="Extra rules from a .py file or a folder of them (runs their code).")] = None,
    config: Annotated[
        Optional[Path],
        typer.Option("--config", help=f"pyproject.toml with [tool.traceinsight], rule files included. Default: the nearest one, options only (its rule files load only with {TRUST_ENV}=1)."),
    ] = None,
    fail_on: Annotated[FailOn, typer.Option("--fail-on", help="Exit 1 when a finding at or above this severity exists (listed on stderr).")] = FailOn.never,
    trace_format: Annotated[Optional[str], typer.Option("--trace-format", help=f"Force the parser: {', '.join(INPUT_FORMATS)}.")] = None,
    run_name: Annotated[Optional[str], typer.Option("--run", help="TensorBoard logdir: the profile run to read (default: newest).")] = None,
    step_range: Annotated[Optional[str], typer.Option("--step-range", help="Use this user range (NVTX, record_function, TraceMe; numbers at its end ignored) as the step.")] = None,
    steps_: Annotated[Optional[str], typer.Option("--steps", help="Analyse only steps A through B (e.g. 3:8; either end may be left open).")] = None,
    range_name: Annotated[Optional[str], typer.Option("--range", help="Analyse only from the first to the last instance of this user range.")] = None,
    window: Annotated[Optional[str], typer.Option("--window", help="Analyse only START:END, in ms on the trace's clock (0 = its first event).")] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show progress on stderr while reading.")] = True,
    baseline: Annotated[
        Optional[Path],
        typer.Option("--baseline", help="An earlier JSON report (e.g. of main): mark findings new / worse / unchanged, and let --fail-on act only on new and worse ones."),
    ] = None,
    min_impact: Annotated[
        Optional[float],
        typer.Option("--min-impact", help="Leave out findings costing less than this % of the GPU window (0 to 100; default 1; 0 shows everything)."),
    ] = None,
    worse_by: Annotated[float, typer.Option("--worse-by", help="With --baseline: a finding is worse when its share of the span grew by this many percent (and by 1 point or more).")] = 25.0,
    max_bytes: Annotated[
        Optional[int],
        typer.Option("--max-bytes", help="Size ceiling of a trace, or of what a gzip inflates to, in bytes (default: half the available memory).", min=1),
    ] = None,
    allow_missing_ranks: Annotated[
        bool,
        typer.Option("--allow-missing-ranks", help=f"Whole jobs: accept a job with rank files that could not be read or were skipped (listed in the report); without it they exit {EXIT_RANKS_MISSING}."),
    ] = False,
    rule_timeout: Annotated[
        float,
        typer.Option("--rule-timeout", help=f"Stop a rule that runs longer than this many seconds (0: no limit); it then counts as failed (exit {EXIT_RULE_FAILED}).", show_default=True),
    ] = DEFAULT_RULE_TIMEOUT_S,
    peak_tflops: Annotated[Optional[float], typer.Option("--peak-tflops", help="Dense peak TFLOP/s of the GPU for MFU and % of peak (overrides the built-in table).", min=0.0)] = None,
    peak_bandwidth: Annotated[Optional[float], typer.Option("--peak-bandwidth", help="Peak memory bandwidth of the GPU in GB/s (overrides the built-in table).", min=0.0)] = None,
    model_flops_per_step: Annotated[Optional[float], typer.Option("--model-flops-per-step", help="Model FLOPs of one training/inference step (for MFU where the trace records no shapes, e.g. Nsight Systems).", min=0.0)] = None,
    source_root: Annotated[
        Optional[Path],
        typer.Option("--source-root", exists=True, file_okay=False, help="github and sarif formats: the checkout the trace's Python frames are looked for in; paths are relative to it (default: the working directory). Frames outside it (site-packages, the interpreter) are never named."),
    ] = None,
    scheduler: Annotated[
        Optional[str],
        typer.Option("--scheduler", help="Whole-job analysis: run the per-rank map on this Dask scheduler (tcp://host:8786; env TRACEINSIGHT_SCHEDULER). Object-store URLs, globs and folders of rank files take the job path even without it."),
    ] = None,
) -> None:
    """Read a trace, run the rules, and report findings with their cost and fixes."""
    from traceinsight.render import outputs
    from traceinsight.vocab.allocator import keep_freed_memory
    from traceinsight.job.cli import analyze_job_cli, wants_job

    keep_freed_memory()  # a short-lived process of ours: reuse freed arrays instead of faulting new pages in
    formats = _parse_formats(fmt, output)
    inputs = [path, baseline, config, *(rules or [])]
    try:
        targets = outputs.plan([f.value for f in formats], output)
        outputs.refuse_inputs(targets, inputs)  # before reading: never overwrite what is analysed
        check_worse_by(worse_by)  # numbers are checked where they enter: NaN must not make nothing worse
        check_rule_timeout(rule_timeout)
        # one configuration for both paths: the project's, with the command line's choices over it
        cfg = Config.from_pyproject(config).with_overrides(
            select=_split(select), ignore=_split(ignore), options=parse_assignments(set_ or []), min_impact=min_impact
        )
        cfg.rule_paths = [*cfg.rule_paths, *(str(r) for r in rules or [])]
        if baseline is None and wants_job(path, scheduler):  # whole job: map per rank, reduce across ranks
            _single_trace_formats(formats)
            if _efficiency_settings(peak_tflops, peak_bandwidth, model_flops_per_step) is not None:
                typer.echo("traceinsight: --peak-tflops, --peak-bandwidth and --model-flops-per-step apply to one trace at a "
                           "time; the whole-job report has no efficiency section (analyze one rank's file for it)", err=True)
            return analyze_job_cli(path, cfg, formats, output, scheduler=scheduler, trace_format=trace_format, fail_on=fail_on.value,
                                   rule_timeout=rule_timeout, allow_missing_ranks=allow_missing_ranks, max_bytes=max_bytes)
        kwargs = dict(config=cfg, baseline=baseline, worse_by=worse_by, trace_format=trace_format, run_name=run_name, step_range=step_range,
                      steps=steps_, range_name=range_name, window_ms=window, rule_timeout=rule_timeout, max_bytes=max_bytes,
                      efficiency=_efficiency_settings(peak_tflops, peak_bandwidth, model_flops_per_step))
        analysis = _analyze_one(path, progress, kwargs, targets, inputs, source_root)
    except TraceInsightError as exc:
        _fail(exc)
        return
    if output is not None:  # the report went to files: the verdict still reaches the terminal
        verdict = analysis.verdict
        typer.echo(terminal(f"Verdict: {verdict['headline']}. {verdict['sentence']}", 2000), err=True)
    _rule_failures([f.line() for f in analysis.rule_failures])
    if fail_on != FailOn.never:
        _gate(analysis, Severity.parse(fail_on.value))


def _analyze_one(path: Path, progress: bool, kwargs: dict, targets: Any, inputs: list, source_root: Optional[Path]) -> Any:
    """``analyze`` of one trace: the analysis (read with progress), its reports written to ``targets`` and, in a
    GitHub Actions job, the step summary."""
    from traceinsight.pipeline import engine
    from traceinsight.render import outputs

    from traceinsight.ingest.heap import input_size, large_input

    with large_input(input_size(path)):  # a gigabyte trace: the allocator reuses freed blocks (ingest/heap.py)
        analysis = _with_progress(engine.analyze, path, progress, kwargs)
        global _teardown_free
        _teardown_free = True
        width = _terminal_width()
        summary = _step_summary(targets)
        outputs.write_reports(analysis, targets, inputs, say=lambda line: typer.echo(line, err=True),
                              width=width, source_root=source_root, unlocated_to_summary=summary is not None)
    if summary is not None:
        _append_summary(summary, analysis, source_root)
    return analysis


def _rule_failures(lines: list[str]) -> None:
    """After the report is written: one line per failed rule on stderr, and exit EXIT_RULE_FAILED (a gate whose
    rules did not all run cannot pass, nor claim findings)."""
    if not lines:
        return
    for line in lines:
        typer.echo(f"traceinsight: error: {terminal(line, 600)}", err=True)
    raise typer.Exit(EXIT_RULE_FAILED)
def _efficiency_settings(peak_tflops, peak_bandwidth, model_flops_per_step):
    """The user's peaks and model FLOPs, or None when none was given."""
    if peak_tflops is None and peak_bandwidth is None and model_flops_per_step is None:
        return None
    from traceinsight.derive.efficiency import EfficiencySettings

    return EfficiencySettings(peak_tflops=peak_tflops, peak_bandwidth_gbs=peak_bandwidth, model_flops_per_step=model_flops_per_step)


def _gate(analysis, threshold: Severity) -> None:
    """Exit 1 when a (new or worse, with a baseline) finding reaches ``threshold``, naming each that did."""
    gated = analysis.baseline.gating(analysis.findings) if analysis.baseline else analysis.findings
    tripped = [f for f in gated if f.severity.rank >= threshold.rank]
    if not tripped:
        return
    which = " new or worse" if analysis.baseline else ""
    typer.echo(f"traceinsight: --fail-on {threshold.value}: {len(tripped)}{which} finding(s) at or above {threshold.value}:", err=True)
    for f in tripped[:MAX_GATE_LINES]:
        typer.echo(f"  {terminal(f.code, 20)} {f.severity.value} {terminal(f.title, 200)}", err=True)
    if len(tripped) > MAX_GATE_LINES:
        typer.echo(f"  ... and {len(tripped) - MAX_GATE_LINES} more", err=True)
    raise typer.Exit(EXIT_FINDINGS)


MAX_GATE_LINES = 20
#: GitHub's job summary: a file the runner names in this variable, appended to by each step, shown as Markdown.
STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
def _single_trace_formats(formats) -> None:
    """Refuse the formats a whole job is not offered in (``render.FORMATS``): a job has no source lines to annotate,
    no results per line, no one timeline to draw."""
    bad = [f.value for f in formats if f.value not in names("job")]
    if bad:
        raise typer.BadParameter(f"{', '.join(bad)} describe(s) one trace; a whole-job report is {phrase('job')} (analyze one rank's file for {bad[0]})",
                                 param_hint="--format")


def _step_summary(targets) -> Optional[Path]:
    """The job summary file the github format's findings without a source line go to: when the annotations go to
    standard output (the runner reads them there) and GitHub named a summary file; else None."""
    name = os.environ.get(STEP_SUMMARY_ENV, "")
    if not name or not any(t.fmt == "github" and t.path is None for t in targets):
        return None
    return Path(name)


def _append_summary(path: Path, analysis, source_root) -> None:
    """Append the findings no annotation carries to the job summary (appended: other steps write there too)."""
    from traceinsight.vocab.errors import OutputError
    from traceinsight.render.github import summary

    text = summary(analysis, source_root)
    if not text:
        return
    try:
        with open(path, "a", encoding="utf-8", errors="backslashreplace") as f:
            f.write(text)
    except OSError as exc:
        raise OutputError(f"cannot append to the job summary {path}: {exc.strerror or type(exc).__name__}") from None


def _parse_formats(fmt: Optional[str], output: Optional[Path]) -> list[Format]:
    """The formats asked for; several need an output folder. Bad values are usage errors (exit 2)."""
    if not fmt:
        known = _SUFFIX_FORMAT.get(output.suffix.lower()) if output else None
        if output is not None and known is None and output.suffix and not output.is_dir():
            # never write plain text into report.pdf: an extension we do not write is a usage error (exit 2)
            raise typer.BadParameter(
                f"cannot tell the format from {output.suffix!r}: name the file .html, .md, .json, .txt or .sarif, or give --format", param_hint="--output"
            )
        return [known or Format.text]
    out: list[Format] = []
    for part in _split([fmt]):
        try:
            f = Format(part.lower())
        except ValueError:
            raise typer.BadParameter(f"{part!r} is not one of {', '.join(FORMATS)}", param_hint="--format") from None
        if f not in out:
            out.append(f)
    if Format.perfetto in out and output is None:
        raise typer.BadParameter("perfetto writes a gzipped file: give -o FILE (e.g. trace.perfetto.json.gz)", param_hint="--format")
    if len(out) > 1 and output is None:
        raise typer.BadParameter("several formats need -o DIR (a folder to write one file per format)", param_hint="--format")
    return out


def _split(values: Optional[list[str]]) -> list[str]:
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


def _terminal_width() -> int:
    """Columns of the terminal (or $COLUMNS); 110 when neither says."""
    return max(shutil.get_terminal_size((110, 24)).columns, 40)


def _with_progress(analyze, path: Path, progress: bool, kwargs: dict):
    """``analyze(path, **kwargs)``, with a progress bar on stderr while a large file is read on a terminal: bytes
    read (inflated, for gzip) with rate and time left, then the stage; nothing when stderr is not a terminal."""
    try:
        big = path.is_file() and path.stat().st_size > 8 * 1024 * 1024
    except OSError:  # a name too long, a loop: the reader says what is wrong in one line
        big = False
    if not (progress and big and sys.stderr.isatty()):
        return analyze(path, **kwargs)
    with ReadProgress(path.name, path.stat().st_size) as bar:
        return analyze(path, progress=bar, **kwargs)


class ReadProgress:
    """A rich progress bar for reading one trace: ``__call__(message)`` names the stage, ``bytes(done, total)``
    moves the bar (the readers call it as they read). A context manager; prints to stderr only."""

    def __init__(self, name: str, total: int, console=None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

        self._bar = Progress(
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
            console=console or Console(stderr=True), transient=True,
        )
        self._name = rich(name)
        self._task = self._bar.add_task(f"reading {self._name}", total=total)

    def __enter__(self) -> "ReadProgress":
        self._bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self._bar.stop()

    def __call__(self, message: str) -> None:
        self._bar.update(self._task, description=f"{self._name}: {rich(message)}")

    def bytes(self, done: int, total: int) -> None:
        self._bar.update(self._task, completed=done, total=total)


@app.command("rules", cls=Command)
def list_rules(
    rules: Annotated[Optional[list[Path]], typer.Option("--rules", help="Also list rules from these files or folders.")] = None,
) -> None:
    """List every available rule: code, name, default severity, category, lifecycle, summary."""
    rs = discover(rules or [])
    for w in rs.problems():
        typer.echo(f"warning: {terminal(w)}", err=True)
    for code, cls in sorted(rs.rules.items()):
        preview = " (preview)" if cls.lifecycle == "preview" else ""
        typer.echo(terminal(f"{code:<8} {cls.name:<26} {cls.severity.value:<8} {cls.category:<16} {cls.summary}{preview}"))


@app.command("rule", cls=Command)
def show_rule(
    code: Annotated[str, typer.Argument(help="Rule code, e.g. TI001.")],
    rules: Annotated[Optional[list[Path]], typer.Option("--rules", help="Also look in these files or folders.")] = None,
) -> None:
    """Print one rule's documentation: why it matters, what is measured, options, fixes."""
    rs = discover(rules or [])
    cls = rs.rules.get(code.upper())
    if cls is None:
        from traceinsight.pipeline.engine import closest_code

        close = closest_code(code, rs.rules)
        hint = f"did you mean {close}? " if close else ""
        typer.echo(f"traceinsight: error: no rule {terminal(code, 40)}; {hint}see 'traceinsight rules'", err=True)
        raise typer.Exit(2)
    _print_markdown(terminal_lines(cls.docs()))


def _print_markdown(text: str) -> None:
    """Markdown laid out for a terminal (rich: headings, lists, code blocks), colours only on a terminal."""
    from rich.console import Console
    from rich.markdown import Markdown

    Console(highlight=False, width=_terminal_width(), force_terminal=sys.stdout.isatty() or None).print(Markdown(text))


@app.command("mcp", cls=Command)
def mcp_server(
    root: Annotated[
        Optional[list[Path]],
        typer.Option("--root", help="A folder the server may read traces from (repeatable). Default: the working directory."),
    ] = None,
    allow_rules: Annotated[bool, typer.Option("--allow-rules", help="Let analyze() run rule files (they are code) under the roots.")] = False,
    max_analyses: Annotated[int, typer.Option("--max-analyses", help="Analyses that may run at once; another is answered 'busy' (1-64).")] = 2,
) -> None:
    """Serve the analysis to an AI agent over MCP (stdio): analyze, finding, ledger, steps, ranges, rules, rule."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        typer.echo("traceinsight: error: the MCP server needs the mcp SDK: pip install 'traceinsight[mcp]' (from a checkout: pip install '.[mcp]')", err=True)
        raise typer.Exit(2) from None
    from traceinsight.agent.server import serve
    from traceinsight.agent.tools import ToolError

    try:
        serve(root or [], allow_rules=allow_rules, max_analyses=max_analyses)
    except ToolError as exc:
        typer.echo(f"traceinsight: error: {terminal(exc)}", err=True)
        raise typer.Exit(2) from None


#: Set by ``analyze`` once a single-trace analysis has run: from then on nothing the process holds needs tearing
#: down (reports are written and closed, pools and temporary folders were context-managed).
_teardown_free = False


@app.command("diff", cls=Command)
def diff_cmd(
    base: Annotated[Path, typer.Argument(help="BASE: a trace, a folder of rank traces, or a JSON report (analyze -f json), e.g. main's.")],
    head: Annotated[Path, typer.Argument(help="HEAD: the same kinds, e.g. the pull request's.")],
    fmt: Annotated[Optional[str], typer.Option("--format", "-f", help=f"{phrase('diff')}; several comma-separated write one file each into -o DIR. Default: from -o's extension, else text.")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write here instead of stdout (a folder when several formats are asked for).")] = None,
    fail_if_slower: Annotated[
        Optional[float],
        typer.Option("--fail-if-slower", help="Exit 1 when HEAD's step is slower by more than this percentage and outside the noise of the per-step samples; exit 5 when it is slower by more but within the noise."),
    ] = None,
    trace_format: Annotated[Optional[str], typer.Option("--trace-format", help="Force the parser for trace inputs (see analyze).")] = None,
    same_workload: Annotated[bool, typer.Option("--same-workload", help="Compare even when the op mix differs: you vouch both run the same model (a fix that rewrote the step, e.g. batched per-tensor ops). The report says the comparison rests on your word.")] = False,
) -> None:
    """Compare two runs: step time with its confidence interval, where it moved in the time ledger, kernels, findings.

    Exit codes: 0 done (gate passed), 1 slower than --fail-if-slower, 2 usage, 3 unreadable, 4 not comparable,
    5 inconclusive (the gate cannot tell slower from noise).
    """
    from traceinsight.delta.cli import run as run_diff

    offered = names("diff")
    formats = [f.lower() for f in _split([fmt])] if fmt else [(for_extension(output.suffix, "diff") if output else None) or "text"]
    for f in formats:
        if f not in offered:
            raise typer.BadParameter(f"{f!r} is not one of {', '.join(offered)}", param_hint="--format")
    if len(formats) > 1 and output is None:
        raise typer.BadParameter("several formats need -o DIR (a folder to write one file per format)", param_hint="--format")
    try:
        code = run_diff(base, head, list(dict.fromkeys(formats)), output, fail_if_slower=fail_if_slower, width=_terminal_width(), same_workload=same_workload,
                        say=lambda line: typer.echo(terminal(line, 2000), err=True), **({"trace_format": trace_format} if trace_format else {}))
    except TraceInsightError as exc:
        _fail(exc)
        return
    raise typer.Exit(code)


class _RecordCommand(Command):
    """``record [OPTIONS] -- COMMAND...``: everything after the first ``--`` is the command to run, untouched (its
    own options included); options before it that ``record`` does not know are ``analyze``'s, passed on."""

    def parse_args(self, ctx, args):
        if "--" in args:
            i = args.index("--")
            ctx.meta[_RECORD_COMMAND] = args[i + 1:]
            args = args[:i]
        return super().parse_args(ctx, args)


_RECORD_COMMAND = "traceinsight.record.command"
_RECORD_FORMATS = "html,md,json"


@app.command("record", cls=_RecordCommand, options_metavar="[OPTIONS] -- COMMAND [ARGS]...",
             context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def record_cmd(
    ctx: typer.Context,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Folder for the trace and the reports (default: traceinsight-record/SCRIPT-TIME).")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="Report formats, comma-separated (text, json, md, html, perfetto).")] = _RECORD_FORMATS,
    skip: Annotated[int, typer.Option("--skip", min=1, help="Steps run unprofiled first (the cold start: compilation, allocator growth, autotuning).")] = 5,
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="Steps profiled but not kept (the profiler's own start-up).")] = 2,
    active: Annotated[int, typer.Option("--active", min=1, help="Steps recorded and analysed.")] = 5,
    step_marker: Annotated[Optional[str], typer.Option("--step-marker", help="MODULE:FUNCTION whose every call is one step (JAX, custom loops; __main__:FUNC for the script's own).")] = None,
    shapes: Annotated[bool, typer.Option("--shapes/--no-shapes", help="PyTorch: record input shapes (FLOPs, MFU).")] = True,
    memory: Annotated[bool, typer.Option("--memory/--no-memory", help="PyTorch: record allocations (the memory view).")] = True,
    with_stack: Annotated[bool, typer.Option("--with-stack", help="PyTorch: record Python stacks (findings name your lines; the trace grows).")] = False,
    nsys: Annotated[bool, typer.Option("--nsys", help="Record with Nsight Systems (nsys on PATH), capturing the same steps (cudaProfilerApi range).")] = False,
    stop_after_window: Annotated[bool, typer.Option("--stop-after-window", help="End the program (exit 0) once the window is recorded.")] = False,
    sweep: Annotated[Optional[str], typer.Option("--sweep", help="NAME=V1,V2,...: run once per value ({NAME} in the command, else the environment variable NAME) and compare.")] = None,
    device: Annotated[Optional[str], typer.Option("--device", help="With --sweep: cpu, gpu or cpu,gpu (cpu hides the GPUs: CUDA_VISIBLE_DEVICES=''; {device} in the command becomes cpu or cuda).")] = None,
    samples_per_step: Annotated[Optional[str], typer.Option("--samples-per-step", help="With --sweep: samples in one step, a number or the swept NAME (default: the value, when NAME says batch).")] = None,
) -> None:
    """Run a training or inference command unmodified, record a steady-state window, and analyse it.

    traceinsight record [OPTIONS] -- python train.py ARGS...  (also torchrun ...; analyze's options go before --).
    The command's output, signals and exit status are its own; the trace is kept next to the report.
    """
    from traceinsight.record import sweep as sweep_mod
    from traceinsight.record.run import CommandNotFound, EXIT_NOT_FOUND, Window, record

    command = ctx.meta.get(_RECORD_COMMAND) or []
    if not command:
        raise typer.BadParameter("give the command to run after --, e.g. traceinsight record -- python train.py", param_hint="COMMAND")
    analyze_args = list(ctx.args)
    formats = _record_formats(fmt)
    _check_analyze_args(analyze_args)
    if nsys and shutil.which("nsys") is None:
        typer.echo("traceinsight: error: --nsys needs Nsight Systems' nsys on PATH", err=True)
        raise typer.Exit(2)
    try:
        name_values = sweep_mod.parse(sweep) if sweep else None
        devices = sweep_mod.parse_devices(device)
        basis = sweep_mod.samples_basis(name_values[0], samples_per_step) if name_values else None
    except sweep_mod.SweepError as exc:
        raise typer.BadParameter(str(exc)) from None
    if not name_values and device:
        raise typer.BadParameter("--device goes with --sweep (without a sweep, run the command as you want it)", param_hint="--device")
    window = Window(skip=skip, warmup=warmup, active=active, marker=step_marker, nsys=nsys, shapes=shapes, memory=memory, stack=with_stack,
                    stop_after_window=stop_after_window)
    out = output or _default_record_dir(command)
    say = lambda line: typer.echo(f"traceinsight: {terminal(line, 2000)}", err=True)  # noqa: E731
    try:
        if not name_values:
            rec = record(command, out, window)
            for note in rec.notes:
                say(note)
            code = _analyse_recording(rec.trace, out, formats, analyze_args) if rec.trace else None
            say(f"trace and report in {out}" if rec.trace else f"no trace recorded (status in {out})")
            raise typer.Exit(rec.returncode or (code if code is not None else 0 if rec.returncode == 0 and rec.trace else 3))
        name, values = name_values
        runs = []
        run_formats = list(dict.fromkeys([*formats, "json"]))  # the comparison reads each run's JSON report
        for dev in devices:
            for value in values:
                run_command, env = sweep_mod.command_for(command, name, value, dev)
                run_dir = out / sweep_mod.run_name(name, value, dev)
                say(f"run {name}={value}{f' on {dev}' if dev else ''}: {' '.join(run_command)}")
                rec = record(run_command, run_dir, window, env)
                for note in rec.notes:
                    say(note)
                if rec.trace:
                    _analyse_recording(rec.trace, run_dir, run_formats, analyze_args)
                report = run_dir / f"{REPORT_STEM}.json"
                runs.append(sweep_mod.Run(value=value, device=dev, run_dir=run_dir, exit_code=rec.returncode, notes=rec.notes,
                                          report=_read_json(report) if rec.trace and report.is_file() else None))
        doc = sweep_mod.compare(name, runs, basis, tuple(run_formats))
        paths = sweep_mod.write(doc, out)
        for line in sweep_mod.summary_lines(doc):
            say(line)
        say(f"comparison: {paths[-1]} (also {', '.join(p.name for p in paths[:-1])})")
        failed = [r.exit_code for r in runs if r.exit_code]
        raise typer.Exit(failed[0] if failed else 0)
    except CommandNotFound as exc:
        typer.echo(f"traceinsight: error: {terminal(exc)}", err=True)
        raise typer.Exit(EXIT_NOT_FOUND) from None


def _record_formats(fmt: str) -> list[str]:
    out = []
    for part in _split([fmt]):
        try:
            out.append(Format(part.lower()).value)
        except ValueError:
            raise typer.BadParameter(f"{part!r} is not one of text, json, md, html, perfetto", param_hint="--format") from None
    if not out:
        raise typer.BadParameter("name one format or more", param_hint="--format")
    return list(dict.fromkeys(out))


def _analyze_command():
    import click

    group = typer.main.get_command(app)
    return group.get_command(click.Context(group), "analyze")


def _check_analyze_args(args: list[str]) -> None:
    """Parse analyze's options now, before the program runs for minutes: a typo is a usage error at once."""
    import click

    if not args:
        return
    try:
        _analyze_command().make_context("traceinsight record", ["TRACE", *args]).close()
    except click.UsageError as exc:
        raise typer.BadParameter(f"{exc.format_message()} (options before -- that record does not take go to analyze)") from None


def _analyse_recording(trace: Path, out: Path, formats: list[str], args: list[str]) -> int:
    """``traceinsight analyze TRACE -f FORMATS -o OUT ARGS``: the reports beside the trace; returns its exit status."""
    import click

    target = out if len(formats) > 1 else out / f"{REPORT_STEM}.{SUFFIX[formats[0]]}"
    cmd = _analyze_command()
    try:
        with cmd.make_context("traceinsight analyze", [str(trace), "-f", ",".join(formats), "-o", str(target), *args]) as actx:
            cmd.invoke(actx)
    except (typer.Exit, click.exceptions.Exit) as done:
        return int(done.exit_code or 0)
    return 0


def _read_json(path: Path):
    import json

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _default_record_dir(command: list[str]) -> Path:
    import time

    script = next((Path(a).stem for a in command if a.endswith(".py")), Path(command[0]).name)
    return Path("traceinsight-record") / f"{script}-{time.strftime('%Y%m%d-%H%M%S')}"


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("traceinsight: interrupted", err=True)
        sys.exit(130)
    except MemoryError:  # past every reader's own handler (a diff's resampling, a renderer): one line, its own code
        from traceinsight.vocab.errors import EXIT_OUT_OF_MEMORY

        typer.echo("traceinsight: error: out of memory: the input needs more memory than this machine has", err=True)
        sys.exit(EXIT_OUT_OF_MEMORY)
    except SystemExit as done:
        if not _teardown_free:
            raise
        _exit_now(done.code)


def _exit_now(code: object) -> None:
    """End the process without interpreter teardown.

    Teardown would free, one object and one mapping at a time, the timeline, its views and the analysis (about
    0.8 GB on the 1.2 M-event benchmark trace), memory the kernel reclaims at once anyway: that cost 0.1-0.2 s of
    wall time after the last report was already written (bench/README.md, "End to end"). Only the command line
    does this, and only after a single-trace analysis, whose pools, temporary folders and report files are all
    closed by then; the whole-job path (Dask clients, worker processes) exits normally.
    """
    if code is not None and not isinstance(code, int):  # sys.exit("message"): Python prints it and exits 1
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (| head): nothing more can reach it
            pass
    os._exit(code or 0)


if __name__ == "__main__":  # pragma: no cover
    main()

