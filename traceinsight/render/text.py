"""Terminal output (rich): the summary, then the findings sorted by estimated time saved."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..engine import Analysis
from ..rule_api import fmt_ns
from ..verdict import details, ledger_of
from ..whatif import format_what_if
from .common import baseline_sentence, baseline_tag
from .ledger_view import table as ledger_table

_SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def render(analysis: Analysis, width: int = 110, **_: Any) -> str:
    buf = io.StringIO()
    con = Console(file=buf, width=width, force_terminal=False, color_system=None, highlight=False)
    tl, s = analysis.timeline, analysis.summary
    meta = tl.meta
    con.print(f"[bold]{escape(meta.path or '(timeline)')}[/]  {escape(meta.tool or meta.source_format)}"
              + (f" {escape(str(meta.tool_version))}" if meta.tool_version else ""))
    v = details(analysis)
    con.print(f"[bold]Verdict: {escape(v['headline'])}.[/] {escape(v['sentence'])}")
    busy = s.gpu_busy_pct
    con.print(f"span {fmt_ns(s.span_ns)}, {len(tl.events):,} events, {s.kernel_count:,} kernels ({fmt_ns(s.kernel_time_ns)} kernel time)"
              + (f", GPU busy {busy:.1f}%" if busy is not None else ", no GPU activity"))
    if s.devices:
        t = Table(title="GPU utilization (first to last GPU activity)", title_justify="left")
        for c in ("rank", "device", "name", "window", "busy", "idle", "busy %"):
            t.add_column(c, justify="right" if c not in ("name",) else "left")
        for d in s.devices:
            t.add_row(str(d["rank"]), str(d["device"]), escape(str(d["name"] or "")), fmt_ns(d["window_ns"]), fmt_ns(d["busy_ns"]),
                      fmt_ns(d["idle_ns"]), f"{d['busy_pct']:.1f}")
        con.print(t)
    cols, rows = ledger_table(ledger_of(analysis))
    if rows:
        t = Table(title="Where the GPU time went (% of each device's window)", title_justify="left")
        for c in cols:
            t.add_column(c, justify="left" if c == "device" else "right")
        for r in rows:
            t.add_row(*[escape(x) for x in r])
        con.print(t)
    if s.steps:
        st = s.steps
        con.print(f"steps: {st['count']}  mean {fmt_ns(st['mean_ns'])}  median {fmt_ns(st['median_ns'])}  max {fmt_ns(st['max_ns'])}")
    if not s.top_kernels.empty:
        t = Table(title="Top kernels by GPU time", title_justify="left")
        for c in ("kernel", "count", "total", "mean", "% kernel time"):
            t.add_column(c, justify="left" if c == "kernel" else "right", overflow="ellipsis", no_wrap=True, max_width=70 if c == "kernel" else None)
        for r in s.top_kernels.head(10).itertuples(index=False):
            t.add_row(escape(str(r.name)), f"{int(r.count):,}", fmt_ns(r.total_ns), fmt_ns(r.mean_ns), f"{r.pct_kernel_time:.1f}")
        con.print(t)
    con.print()
    if analysis.findings:
        con.print(f"[bold]{len(analysis.findings)} finding(s)[/], largest estimated saving first:")
        for f in analysis.findings:
            style = _SEV_STYLE.get(f.severity.value, "")
            impact = f" - est. {fmt_ns(f.impact_ns)} ({f.impact_pct_span:.1f}% of span)" if f.impact_ns else ""
            tag = baseline_tag(analysis, f)
            tag = f"[bold]{escape('[' + (tag.upper() if tag == 'new' else tag) + ']')}[/] " if tag else ""
            con.print(f"\n[{style}]{f.code} {f.severity.value.upper()}[/] {tag}[bold]{escape(f.title)}[/]{impact}")
            con.print(f"  {escape(f.message)}")
            if format_what_if(f.what_if):
                con.print(f"  if fixed: {escape(format_what_if(f.what_if))}")
            for fw, fx in f.fixes.items():
                con.print(f"  fix ({fw}): {escape(fx.text.strip().splitlines()[0] if fx.text.strip() else '')}")
    else:
        con.print(f"No findings from {len(analysis.rules_run)} rule(s).")
    sentence = baseline_sentence(analysis)
    if sentence:
        con.print(f"\n[bold]{escape(sentence[0].upper() + sentence[1:])}.[/]")
        for fx in analysis.baseline.fixed[:10]:
            con.print(f"  fixed: {escape(fx['code'])} {escape(fx['title'])}")
    for w in [*meta.warnings, *analysis.warnings]:
        con.print(f"[yellow]warning:[/] {escape(w)}")
    return buf.getvalue()
