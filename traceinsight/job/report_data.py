"""What every job report format shows, computed once from a ``JobAnalysis``: the headline numbers, the per-rank table
and the findings grouped by rule. The JSON/Markdown/text renderer (``report``) and the HTML one (``html``) both read
these, so the formats cannot disagree."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd

from traceinsight.job.run import JobAnalysis
from traceinsight.job.verdict import median_busy_pct


#: Ranks listed one by one in Markdown/text below this job size; above it, percentiles and outliers.
FULL_TABLE_RANKS = 32
TOP = 10


def rank_rule_groups(ja: JobAnalysis) -> list[dict[str, Any]]:
    """Per-rank findings grouped by rule: ranks affected, total and worst impact, the worst ranks."""
    groups: dict[str, list[tuple[int, dict]]] = defaultdict(list)
    for rank, f in ja.rank_findings:
        groups[f["code"]].append((rank, f))
    out = []
    for code, items in groups.items():
        items.sort(key=lambda rf: (-rf[1]["impact_ns"], rf[0]))
        sev = max((f["severity"] for _, f in items), key=lambda s: {"info": 1, "warning": 2, "error": 3}[s])
        out.append(
            {
                "code": code,
                "rule": items[0][1]["rule"],
                "severity": sev,
                "ranks": len({r for r, _ in items}),
                "findings": len(items),
                "total_impact_ns": int(sum(f["impact_ns"] for _, f in items)),
                "median_impact_ns": int(np.median([f["impact_ns"] for _, f in items])),
                "worst": [{"rank": r, "title": f["title"], "impact_ns": f["impact_ns"], "severity": f["severity"]} for r, f in items[:5]],
                "example_message": items[0][1]["message"],
                "fixes": items[0][1]["fixes"],
            }
        )
    out.sort(key=lambda g: (-g["total_impact_ns"], g["code"]))
    return out


def rank_table(ja: JobAnalysis) -> pd.DataFrame:
    j = ja.job
    per = j.ranks.copy()
    st = j.steps[j.steps["step"] >= 0]
    if len(st):
        per["step_ms"] = per["rank"].map(st.groupby("rank")["dur_ns"].median() / 1e6)
    else:
        per["step_ms"] = np.nan
    if len(j.instances):
        per["last_at"] = per["rank"].map(j.instances.groupby("last_rank").size()).fillna(0).astype(int)
        per["held_ms"] = per["rank"].map(j.instances.groupby("last_rank")["held_ns"].sum() / 1e6).fillna(0.0)
    else:
        per["last_at"] = 0
        per["held_ms"] = 0.0
    per["busy_pct"] = 100.0 * per["busy_ns"] / per["window_ns"].clip(lower=1)
    per["comm_ms"] = per["comm_ns"] / 1e6
    per["exposed_ms"] = per["exposed_ns"] / 1e6
    per["wait_ms"] = per["wait_ns"] / 1e6
    return per[["rank", "step_ms", "busy_pct", "comm_ms", "exposed_ms", "wait_ms", "last_at", "held_ms"]].round(3)


def _busy_median(j: Any) -> float | None:
    """The job verdict's median GPU busy (``verdict.median_busy_pct`` over the ranks' ledgers), so the headline and
    the verdict quote one figure; from busy/window per rank where no ledger was kept."""
    led, per = j.ledger, j.ranks
    if led is not None and not led.empty:
        wide = led.pivot_table(index="rank", columns="bucket", values="ns", aggfunc="sum", fill_value=0)
        if float(wide.to_numpy().sum()) > 0:
            return round(median_busy_pct(wide), 3)
    return None if per.empty else round(float(np.median(100.0 * per["busy_ns"] / per["window_ns"].clip(lower=1))), 3)


def headline(ja: JobAnalysis) -> dict[str, Any]:
    j = ja.job
    per = j.ranks
    med = lambda s: None if len(s) == 0 else int(np.median(s))  # noqa: E731
    return {
        "ranks": int(j.rank_count),
        "world_size": j.world_size,
        "rank_files_failed": len(j.failures),
        "steps_per_rank": int(j.step_count),
        "step_ns_median": None if j.step_ns is None else int(j.step_ns),
        "window_ns_median": med(per["window_ns"]),
        "gpu_busy_pct_median": _busy_median(j),
        "comm_ns_median": med(per["comm_ns"]),
        "exposed_comm_ns_median": med(per["exposed_ns"]),
        "collective_wait_ns_median": med(per["wait_ns"]),
        "collective_instances_matched": int(len(j.instances)),
    }
