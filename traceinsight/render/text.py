"""Terminal output (rich): the summary, then the findings sorted by estimated time saved."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from rich.markup import escape as markup_escape
from rich.table import Table

from traceinsight.model.analysis import Analysis
from traceinsight.vocab.units import fmt_ns
from traceinsight.render.escape import rich as escape  # terminal-safe and markup-safe: every trace string goes through it
from traceinsight.render.escape import log_document, terminal
from traceinsight.assess import advice
from traceinsight.render.common import baseline_sentence, baseline_tag, cause_of, figure_text, shown_fixes, what_if_text
from traceinsight.render.ledger_view import table as ledger_table

_SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


#: Narrowest a name column is squeezed to before the table is allowed to run wider than the terminal.
MIN_NAME_W = 12


def _table(title: str, header: list[str], rows: list[list[str]], text_col: int, width: int) -> Table:
    """A table that fits ``width`` by shortening the one text column; numbers are never cut or wrapped.

    Every other column is sized to its widest cell; the text column gets what is left (at least MIN_NAME_W, in
    which case the table runs wider than the terminal rather than hide digits) and longer names end in "…".
    """
    rows = [[terminal(c) for c in r] for r in rows]  # sized by what the terminal shows (escapes included)
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    chrome = 3 * len(header) + 1  # one space of padding each side and a rule between and around the columns
    room = max(width - chrome - sum(w for i, w in enumerate(widths) if i != text_col), MIN_NAME_W)
    name_w = min(widths[text_col], room)
    t = Table(title=title, title_justify="left", width=chrome + name_w + sum(w for i, w in enumerate(widths) if i != text_col))
    for i, h in enumerate(header):
        if i == text_col:
            t.add_column(h, justify="left", no_wrap=True, overflow="ellipsis", width=name_w)
        else:
            t.add_column(h, justify="right", no_wrap=True, min_width=widths[i], width=widths[i])
    for r in rows:
        t.add_row(*[markup_escape(_shorten(c, name_w) if i == text_col else c) for i, c in enumerate(r)])
    return t


def _print(con: Console, table: Table) -> None:
    """Print a table whole: on a terminal too narrow for its numbers it runs wider rather than cut them."""
    if table.width is not None and table.width > con.width:
        con = Console(file=con.file, width=table.width, force_terminal=False, color_system=None, highlight=False)
    con.print(table)


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def render(analysis: Analysis, width: int = 110, **_: Any) -> str:
    """The terminal report, ``width`` columns wide (the CLI passes the terminal's width)."""
    buf = io.StringIO()
    con = Console(file=buf, width=max(width, 40), force_terminal=False, color_system=None, highlight=False, soft_wrap=False)
    tl, s = analysis.timeline, analysis.summary
    meta = tl.meta
    con.print(f"[bold]{escape(meta.path or '(timeline)')}[/]  {escape(meta.tool or meta.source_format)}"
              + (f" {escape(str(meta.tool_version))}" if meta.tool_version else ""))
    v = analysis.verdict
    con.print(f"[bold]Verdict: {escape(v['headline'])}.[/] {escape(v['sentence'])}")
    if v.get("record_better"):
        con.print(f"Record a better window: {escape(v['record_better'])}")
    from traceinsight.render.steps_view import spread_sentence, step_report

    rep = step_report(analysis)
    if rep["steps"]["count"]:
        con.print(escape(spread_sentence(rep["steps"])))
    busy = s.gpu_busy_pct
    con.print(f"span {fmt_ns(s.span_ns)}, {len(tl.events):,} events, {s.kernel_count:,} kernels ({fmt_ns(s.kernel_time_ns)} kernel time)"
              + (f", GPU busy {busy:.1f}%" if busy is not None else ", no GPU activity"))
    if s.devices:
        rows = [
            [str(d["rank"]), str(d["device"]), str(d["name"] or ""), fmt_ns(d["window_ns"]), fmt_ns(d["busy_ns"]), fmt_ns(d["idle_ns"]), f"{d['busy_pct']:.1f}"]
            for d in s.devices
        ]
        _print(con, _table("GPU utilization (first to last GPU activity)", ["rank", "device", "name", "window", "busy", "idle", "busy %"], rows, text_col=2, width=width))
    cols, rows = ledger_table(analysis.ledger)
    if rows:
        _print(con, _table("Where the GPU time went (% of each device's window)", cols, rows, text_col=0, width=width))
    mem_devices = analysis.views.memory.devices
    if mem_devices:
        from traceinsight.render.memory_view import summary_groups

        for where, line in summary_groups(mem_devices):
            con.print(f"GPU memory, {where}: {escape(line)}")
    if s.steps:
        st = s.steps
        con.print(f"steps: {st['count']}  mean {fmt_ns(st['mean_ns'])}  median {fmt_ns(st['median_ns'])}  max {fmt_ns(st['max_ns'])}")
    _efficiency(con, analysis, width)
    if not s.top_kernels.empty:
        rows = [
            [str(r.name), f"{int(r.count):,}", fmt_ns(r.total_ns), fmt_ns(r.mean_ns), f"{r.pct_kernel_time:.1f}"]
            for r in s.top_kernels.head(10).itertuples(index=False)
        ]
        _print(con, _table("Top kernels by GPU time", ["kernel", "count", "total", "mean", "% kernel time"], rows, text_col=0, width=width))
    con.print()
    if analysis.findings:
        con.print(f"[bold]{len(analysis.findings)} finding(s)[/], the verdict's first, then largest saving first (GPU idle, then modelled speed-ups of busy work):")
        for f in analysis.findings:
            style = _SEV_STYLE.get(f.severity.value, "")
            cause = cause_of(analysis, f)
            fig = figure_text(f)
            impact = f" - {fig}" if fig else ""
            tag = baseline_tag(analysis, f)
            tag = f"[bold]{escape('[' + (tag.upper() if tag == 'new' else tag) + ']')}[/] " if tag else ""
            pad = "    " if cause is not None else ""
            lead = f"{pad}symptom of {escape(cause.code)}: " if cause is not None else ""
            con.print(f"\n{lead}[{style}]{escape(f.code)} {f.severity.value.upper()}[/] {tag}[bold]{escape(f.title)}[/]{impact}")
            con.print(f"{pad}  {escape(f.message)}")
            if f.metrics.get("severity_basis"):
                con.print(f"{pad}  severity: {escape(f.metrics['severity_basis'])}")
            if what_if_text(f):
                con.print(f"{pad}  if fixed: {escape(what_if_text(f))}")
            for fw, fx in shown_fixes(f, all_frameworks=False):
                con.print(f"{pad}  fix ({escape(advice.label(fw))}): {escape(fx.text.strip().splitlines()[0])}")
    else:
        con.print(f"No findings from {len(analysis.rules_run)} rule(s).")
    sentence = baseline_sentence(analysis)
    if sentence:
        con.print(f"\n[bold]{escape(sentence[0].upper() + sentence[1:])}.[/]")
        for fx in analysis.baseline.fixed[:10]:
            con.print(f"  fixed: {escape(fx['code'])} {escape(fx['title'])}")
    for w in [*meta.warnings, *analysis.warnings]:
        con.print(f"[yellow]warning:[/] {escape(w)}")
    return log_document(buf.getvalue())  # a CI log reads "::name" at a line's start as a workflow command


def _efficiency(con: Console, analysis: Analysis, width: int) -> None:
    """The efficiency section: MFU with its peak, then achieved rates per kernel class."""
    from traceinsight.render.efficiency_view import COLUMNS, efficiency_of, hardware_lines, headline, step_line, table_rows

    eff = efficiency_of(analysis)
    if eff is None or eff.classes.empty:
        return
    con.print(f"[bold]Efficiency:[/] {escape(headline(eff))}")
    line = step_line(eff)
    if line:
        con.print(escape(line))
    for hw in hardware_lines(eff):
        con.print(escape(hw))
    if eff.available or any(r is not None for r in eff.classes["achieved_gbs"]):
        _print(con, _table("Is the busy GPU doing useful work (per kernel class; dense peaks)", COLUMNS, table_rows(eff), text_col=0, width=width))
    for n in eff.notes[1 if not eff.available else 0:]:
        con.print(f"  note: {escape(n)}")
