"""Job reports (JSON, Markdown, text, HTML) that stay small at thousands of ranks.

Per-rank detail is aggregated: rank findings by rule (how many ranks, the worst few), the rank table only for
small jobs, otherwise percentiles plus the ranks that stand out; the HTML shows ranks x steps as heatmaps instead
of per-rank timeline lanes. The JSON report holds no timings or host names, so the same job gives the same bytes
whatever ran the map.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from traceinsight.vocab.version import __version__
from traceinsight.model.serialize import dumps_compact, finding_dict
from traceinsight.vocab.units import fmt_ns
from traceinsight.job.report_data import FULL_TABLE_RANKS, TOP, headline, rank_rule_groups, rank_table
from traceinsight.job.run import JobAnalysis

def to_dict(ja: JobAnalysis) -> dict[str, Any]:
    j = ja.job
    led = _ledger_by_rank(j.ledger)
    wait = dict(zip(j.ranks["rank"].tolist(), j.ranks["wait_ns"].tolist()))  # ranks are unique (reduce renumbers repeats)
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
                "collective_wait_ns": int(wait[s.rank]),
                "steps": int((s.steps["step"].to_numpy() >= 0).sum()),
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
        "verdict": _verdict(ja),
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


def _ledger_by_rank(ledger: pd.DataFrame) -> dict[int, dict[str, int]]:
    """rank -> {bucket: ns per step}, buckets in the ledger's row order within a rank (a loop over plain lists: a
    groupby costs a frame per rank, seconds at thousands of ranks)."""
    out: dict[int, dict[str, int]] = {}
    for r, b, v in zip(ledger["rank"].tolist(), ledger["bucket"].tolist(), ledger["ns"].tolist()):
        out.setdefault(int(r), {})[str(b)] = int(round(v))
    return dict(sorted(out.items()))


def _verdict(ja: JobAnalysis) -> dict[str, Any]:
    from traceinsight.job.verdict import job_verdict

    return job_verdict(ja)


def render_json(ja: JobAnalysis) -> str:
    return dumps_compact(to_dict(ja))


def _md_table(df: pd.DataFrame, max_rows: int = TOP) -> list[str]:
    if df.empty:
        return []
    df = df.head(max_rows)
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False, name=None):
        lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    return lines


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return "" if v != v else f"{v:g}"
    if isinstance(v, (int, np.integer)):
        return str(v)
    from traceinsight.render.markdown import esc

    return esc(v, 120)


def _pct(per: pd.DataFrame, col: str) -> str:
    v = per[col].dropna().to_numpy(dtype=float)
    if not len(v):
        return "n/a"
    p = np.percentile(v, [0, 50, 95, 100])
    return " / ".join(f"{x:.3f}" for x in p)


def render_markdown(ja: JobAnalysis) -> str:
    from traceinsight.render.markdown import esc
    from traceinsight.job.verdict import job_verdict

    j = ja.job
    h = headline(ja)
    v = job_verdict(ja)
    out = [f"# traceinsight job report: {esc(ja.source, 300)}", "", f"**Verdict: {esc(v['headline'], 200)}.** {esc(v['sentence'], 1000)}", ""]
    step = f"median step {fmt_ns(h['step_ns_median'])}, {h['steps_per_rank']} steps per rank" if h["step_ns_median"] else "no step markers"
    out += [
        f"**{h['ranks']} ranks** (world size {h['world_size'] or 'unknown'}), {step}; median GPU busy "
        f"{'n/a' if h['gpu_busy_pct_median'] is None else format(h['gpu_busy_pct_median'], '.1f')} % of its window; median collective time {fmt_ns(h['comm_ns_median'] or 0)}, of which "
        f"{fmt_ns(h['exposed_comm_ns_median'] or 0)} with no compute beside it and {fmt_ns(h['collective_wait_ns_median'] or 0)} waiting for later ranks.",
        "",
        f"**Clocks:** {j.alignment.describe()}.",
        "",
        "**Ran on:** " + (f"the Dask cluster at {esc(ja.cluster, 200)} (a scheduler is trusted code: it can run code in this process)."
                          if ja.cluster else "local processes on this machine."),
        "",
    ]
    if ja.rule_failures:
        out += [f"**{len(ja.rule_failures)} rule failure(s): these rules' findings are missing**", ""]
        out += [f"- {esc(line, 600)}" for line in ja.rule_failures[:20]] + [""]
    if ja.missing:
        out += [f"**{len(ja.missing)} rank file(s) not analysed** (unreadable, failed or skipped; the job figures leave them out):", ""]
        out += [f"- {esc(line, 400)}" for line in ja.missing[:20]]
        if len(ja.missing) > 20:
            out.append(f"- … and {len(ja.missing) - 20} more (see the JSON report)")
        out.append("")
    if j.failures:
        out += [f"**{len(j.failures)} rank files could not be read** and are left out (see warnings).", ""]
    out += ["## Cross-rank findings", ""]
    if not ja.findings:
        out += ["None.", ""]
    for f in ja.findings:
        out += [f"### {esc(f.code, 20)} {esc(f.title, 300)}", "", f"*{f.severity.value}* · impact {fmt_ns(f.impact_ns)}", "", esc(f.message, 2000), ""]
        out += _md_table(f.evidence) + [""]
        fx = f.fixes.get("pytorch")
        if fx:
            out += [f"**Fix (PyTorch):** {fx.text}", ""]
            if fx.code.strip():
                out += ["```python", fx.code.strip(), "```", ""]
    out += ["## Ranks", ""]
    table = rank_table(ja)
    if len(table) <= FULL_TABLE_RANKS:
        out += _md_table(table, FULL_TABLE_RANKS) + [""]
    else:
        out += ["| metric | min / median / p95 / max |", "|---|---|"]
        out += [f"| {c} | {_pct(table, c)} |" for c in ("step_ms", "busy_pct", "comm_ms", "exposed_ms", "wait_ms", "held_ms")]
        out += ["", f"Ranks that held the others longest (top {TOP}):", ""]
        out += _md_table(table.sort_values(["held_ms", "rank"], ascending=[False, True]), TOP) + [""]
        out += [f"Slowest steps (top {TOP} ranks by median step):", ""]
        out += _md_table(table.sort_values(["step_ms", "rank"], ascending=[False, True]), TOP) + [""]
    out += ["## Per-rank findings, by rule", ""]
    groups = rank_rule_groups(ja)
    if not groups:
        out += ["None.", ""]
    for g in groups:
        worst = ", ".join(f"rank {w['rank']} ({fmt_ns(w['impact_ns'])})" for w in g["worst"][:3])
        out += [
            f"- **{esc(g['code'], 20)} {esc(g['rule'], 60)}** ({g['severity']}): on {g['ranks']} of {j.rank_count} ranks, median impact "
            f"{fmt_ns(g['median_impact_ns'])}; worst: {worst}. Example: {esc(g['example_message'], 400)}"
        ]
    out.append("")
    if ja.warnings:
        out += ["## Warnings", ""] + [f"- {esc(w, 300)}" for w in ja.warnings[:20]]
        if len(ja.warnings) > 20:
            out.append(f"- … and {len(ja.warnings) - 20} more (see the JSON report)")
        out.append("")
    return "\n".join(out)


def render_text(ja: JobAnalysis, width: int = 110) -> str:
    """The Markdown report laid out for a terminal (rich): headings, tables and code blocks drawn, no raw markup."""
    import io

    from rich.console import Console
    from rich.markdown import Markdown

    buf = io.StringIO()
    Console(file=buf, width=max(width, 60), force_terminal=False, color_system=None, highlight=False).print(Markdown(render_markdown(ja)))
    from traceinsight.render.escape import log_document

    return log_document(buf.getvalue())  # no line a CI runner reads as a workflow command


def render(ja: JobAnalysis, fmt: str, **options: Any) -> str:
    """The job report in ``fmt``: the formats' one registry (``traceinsight.render.FORMATS``) picks the renderer."""
    from traceinsight.render import render as render_any

    return render_any(ja, fmt, "job", **options)
