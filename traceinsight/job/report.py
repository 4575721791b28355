"""Job reports (JSON, Markdown, text, HTML) that stay small at thousands of ranks.

Per-rank detail is aggregated: rank findings by rule (how many ranks, the worst few), the rank table only for
small jobs, otherwise percentiles plus the ranks that stand out; the HTML shows ranks x steps as heatmaps instead
of per-rank timeline lanes. The JSON report holds no timings or host names, so the same job gives the same bytes
whatever ran the map.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd

from ..version import __version__
from ..render import escape
from ..render.json_report import finding_dict, jsonable
from ..units import fmt_ns
from .report_data import FULL_TABLE_RANKS, TOP, headline, rank_rule_groups, rank_table
from .run import JobAnalysis

def to_dict(ja: JobAnalysis) -> dict[str, Any]:
    j = ja.job
    led = {int(r): {str(b): int(round(v)) for b, v in zip(g["bucket"], g["ns"])} for r, g in j.ledger.groupby("rank", sort=True)}
    ranks = []
    for s in j.summaries:
        ranks.append(
            {
                "rank": s.rank,
                "source": s.source,
                "device_names": s.device_names,
                "events": s.event_count,
                "window_ns": s.window_ns,
                "busy_ns": s.busy_ns,
                "compute_ns": s.compute_ns,
                "comm_ns": s.comm_ns,
                "exposed_comm_ns": s.exposed_ns,
                "collective_wait_ns": int(j.ranks.loc[j.ranks["rank"] == s.rank, "wait_ns"].iloc[0]),
                "steps": int((s.steps["step"] >= 0).sum()),
                "collectives": int(len(s.collectives)),
                "ledger_ns_per_step": led.get(s.rank, {}),
                "findings": [
                    {k: f[k] for k in ("code", "rule", "severity", "title", "impact_ns", "impact_pct_span", "fingerprint", "message")} for f in s.findings
                ],
            }
        )
    return {
        "tool": "traceinsight",
        "version": __version__,
        "report": "job",
        "source": ja.source,
        "summary": headline(ja),
        "clock_alignment": j.alignment.to_dict(),
        "findings": [finding_dict(f, max_evidence_rows=50) for f in ja.findings],
        "rank_findings_by_rule": rank_rule_groups(ja),
        "ranks": ranks,
        "rules_run": ja.rules_run,
        "rule_failures": ja.rule_failures,
        "missing_rank_files": ja.missing,
        "warnings": ja.warnings,
    }


def render_json(ja: JobAnalysis) -> str:
    return json.dumps(jsonable(to_dict(ja)), indent=1, ensure_ascii=False, sort_keys=False) + "\n"


class _Medium:
    """How the job report is written for one medium: Markdown (escaped with ``escape.markdown``) or plain text for
    a terminal (``escape.terminal``). Every string that came from a trace or a rule goes through ``esc``; the
    report's own words and numbers are written as they are."""

    def __init__(self, md: bool) -> None:
        self.md = md
        self.esc = escape.markdown if md else escape.terminal

    def heading(self, level: int, text: str) -> list[str]:
        if self.md:
            return ["#" * level + " " + text, ""]
        return [text, ("=" if level <= 1 else "-") * min(len(text), 100), ""]

    def bold(self, text: str) -> str:
        return f"**{text}**" if self.md else text

    def italic(self, text: str) -> str:
        return f"*{text}*" if self.md else text

    def table(self, df: pd.DataFrame, max_rows: int = TOP) -> list[str]:
        if df.empty:
            return []
        df = df.head(max_rows)
        cols = [self.esc(c, 40) for c in df.columns]
        rows = [[self._cell(v) for v in row] for row in df.itertuples(index=False, name=None)]
        if self.md:
            lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            return lines + ["| " + " | ".join(r) + " |" for r in rows]
        widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
        fmt = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
        return [fmt(cols), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows]

    def _cell(self, v: Any) -> str:
        if isinstance(v, float):
            return "" if v != v else f"{v:g}"
        if isinstance(v, (int, np.integer)):
            return str(v)
        return self.esc(v, 120)


def _pct(per: pd.DataFrame, col: str) -> str:
    v = per[col].dropna().to_numpy(dtype=float)
    if not len(v):
        return "n/a"
    p = np.percentile(v, [0, 50, 95, 100])
    return " / ".join(f"{x:.3f}" for x in p)


def _render_document(ja: JobAnalysis, m: _Medium) -> str:
    j = ja.job
    h = headline(ja)
    e = m.esc
    out = m.heading(1, f"traceinsight job report: {e(ja.source, 200)}")
    step = f"median step {fmt_ns(h['step_ns_median'])}, {h['steps_per_rank']} steps per rank" if h["step_ns_median"] else "no step markers"
    out += [
        f"{m.bold(str(h['ranks']) + ' ranks')} (world size {h['world_size'] or 'unknown'}), {step}; median GPU busy "
        f"{h['gpu_busy_pct_median']} % of its window; median collective time {fmt_ns(h['comm_ns_median'] or 0)}, of which "
        f"{fmt_ns(h['exposed_comm_ns_median'] or 0)} with no compute beside it and {fmt_ns(h['collective_wait_ns_median'] or 0)} waiting for later ranks.",
        "",
        f"{m.bold('Clocks:')} {e(j.alignment.describe(), 1000)}.",
        "",
        f"{m.bold('Ran on:')} " + (f"the Dask cluster at {e(ja.cluster, 200)} (a scheduler is trusted code: it can run code in this process)."
                                    if ja.cluster else "local processes on this machine."),
        "",
    ]
    if ja.rule_failures:
        out += [m.bold(f"{len(ja.rule_failures)} rule failure(s): these rules' findings are missing") , ""]
        out += [f"- {e(line, 600)}" for line in ja.rule_failures[:20]] + [""]
    if ja.missing:
        out += [m.bold(f"{len(ja.missing)} rank file(s) not analysed") + " (unreadable, failed or skipped; the job figures leave them out):", ""]
        out += [f"- {e(line, 400)}" for line in ja.missing[:20]]
        if len(ja.missing) > 20:
            out.append(f"- … and {len(ja.missing) - 20} more (see the JSON report)")
        out.append("")
    out += m.heading(2, "Cross-rank findings")
    if not ja.findings:
        out += ["None.", ""]
    for f in ja.findings:
        out += m.heading(3, f"{e(f.code, 20)} {e(f.title, 300)}")
        out += [f"{m.italic(f.severity.value)} · impact {fmt_ns(f.impact_ns)}", "", e(f.message, 2000), ""]
        out += m.table(f.evidence) + [""]
        fx = f.fixes.get("pytorch")
        if fx:
            out += [f"{m.bold('Fix (PyTorch):')} {e(fx.text, 2000)}", ""]
    out += m.heading(2, "Ranks")
    table = rank_table(ja)
    if len(table) <= FULL_TABLE_RANKS:
        out += m.table(table, FULL_TABLE_RANKS) + [""]
    else:
        pct = pd.DataFrame({"metric": list(_PCT_COLS), "min / median / p95 / max": [_pct(table, c) for c in _PCT_COLS]})
        out += m.table(pct, len(_PCT_COLS)) + [""]
        out += [f"Ranks that held the others longest (top {TOP}):", ""]
        out += m.table(table.sort_values(["held_ms", "rank"], ascending=[False, True]), TOP) + [""]
        out += [f"Slowest steps (top {TOP} ranks by median step):", ""]
        out += m.table(table.sort_values(["step_ms", "rank"], ascending=[False, True]), TOP) + [""]
    out += m.heading(2, "Per-rank findings, by rule")
    groups = rank_rule_groups(ja)
    if not groups:
        out += ["None.", ""]
    for g in groups:
        worst = ", ".join(f"rank {int(w['rank'])} ({fmt_ns(w['impact_ns'])})" for w in g["worst"][:3])
        out += [
            f"- {m.bold(e(g['code'], 20) + ' ' + e(g['rule'], 60))} ({e(g['severity'], 10)}): on {g['ranks']} of {j.rank_count} ranks, median impact "
            f"{fmt_ns(g['median_impact_ns'])}; worst: {worst}. Example: {e(g['example_message'], 400)}"
        ]
    out.append("")
    if ja.warnings:
        out += m.heading(2, "Warnings") + [f"- {e(w, 300)}" for w in ja.warnings[:20]]
        if len(ja.warnings) > 20:
            out.append(f"- … and {len(ja.warnings) - 20} more (see the JSON report)")
        out.append("")
    return "\n".join(out)


_PCT_COLS = ("step_ms", "busy_pct", "comm_ms", "exposed_ms", "wait_ms", "held_ms")


def render_markdown(ja: JobAnalysis) -> str:
    return _render_document(ja, _Medium(md=True))


def render_text(ja: JobAnalysis) -> str:
    return _render_document(ja, _Medium(md=False))


def render(ja: JobAnalysis, fmt: str) -> str:
    if fmt == "json":
        return render_json(ja)
    if fmt == "md":
        return render_markdown(ja)
    if fmt == "html":
        from .html import render_html

        return render_html(ja)
    return render_text(ja)
