"""The self-contained HTML job report, on the single-trace report's design: the same Jinja environment (every value
autoescaped), the same stylesheet and Content-Security-Policy, and no script at all.

Verdict first (``job.verdict``: which rank, what bound, what it costs the job), then the key numbers, a time-ledger
bar per rank, the rank x step heatmaps (step time, time waiting at collectives) drawn as labelled SVG, the
cross-rank findings with their fixes, the rank table and the per-rank findings by rule. At 1,024 ranks the heatmaps
fold neighbouring ranks into one row (the row shows their largest value), so the page stays a few hundred kB.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from traceinsight.vocab.buckets import BUCKETS
from traceinsight.render.common import clean, format_cell, shown_fixes
from traceinsight.render.ledger_view import BUCKET_LABELS
from traceinsight.render.templating import env, report_css
from traceinsight.vocab.units import fmt_ns
from traceinsight.vocab.version import __version__
from traceinsight.job.report_data import FULL_TABLE_RANKS, TOP, headline as _headline, rank_rule_groups as _rank_rule_groups, rank_table as _rank_table
from traceinsight.job.run import JobAnalysis
from traceinsight.job.verdict import job_verdict

#: Most heatmap rows / columns drawn; beyond, neighbouring ranks (steps) are folded together.
MAX_HEAT_ROWS = 128
MAX_HEAT_COLS = 96
#: Colour levels of the heatmaps (CSS classes h0..h8, light to dark).
LEVELS = 9
#: Ranks drawn as ledger bars: all up to this many, else the slowest ones.
MAX_LEDGER_RANKS = 32
CELL_W, CELL_H, LABEL_W, HEAD_H = 14, 12, 64, 28


def _fold(m: np.ndarray, labels: list[int], limit: int, axis: int) -> tuple[np.ndarray, list[str]]:
    """Fold neighbouring rows (axis 0) or columns (axis 1) into at most ``limit``, keeping the largest value."""
    n = m.shape[axis]
    if n <= limit:
        return m, [str(x) for x in labels]
    size = -(-n // limit)
    groups = [(i, min(i + size, n)) for i in range(0, n, size)]
    parts = [(m[a:b] if axis == 0 else m[:, a:b]).max(axis=axis, keepdims=True) for a, b in groups]
    return np.concatenate(parts, axis=axis), [f"{labels[a]}–{labels[b - 1]}" for a, b in groups]


def _heatmap(title: str, what: str, ranks: list[int], steps: list[int], m: np.ndarray) -> dict[str, Any]:
    """A labelled SVG heatmap: rows are ranks, columns steps; cells < 0 (no such step) are left blank."""
    m, rlab = _fold(m, ranks, MAX_HEAT_ROWS, 0)
    m, slab = _fold(m, steps, MAX_HEAT_COLS, 1)
    cw = max(CELL_W, min(40, 400 // max(m.shape[1], 1)))
    ch = max(CELL_H, min(24, 240 // max(m.shape[0], 1)))
    valid = m[m >= 0]
    lo, hi = (int(valid.min()), int(valid.max())) if valid.size else (0, 0)
    span = max(hi - lo, 1)
    cells = []
    for r in range(m.shape[0]):
        for s in range(m.shape[1]):
            v = int(m[r, s])
            if v < 0:
                continue
            lvl = min(int((v - lo) * LEVELS / span), LEVELS - 1) if hi > lo else 0
            cells.append({"x": LABEL_W + s * cw, "y": HEAD_H + r * ch, "lvl": lvl, "title": f"rank {rlab[r]}, step {slab[s]}: {fmt_ns(v)}"})
    every_r = max(1, -(-len(rlab) // 24))
    every_s = max(1, -(-len(slab) // 16))
    return {
        "title": title,
        "what": what,
        "width": LABEL_W + len(slab) * cw + 8,
        "height": HEAD_H + len(rlab) * ch + 8,
        "cells": cells,
        "rows": [{"y": HEAD_H + i * ch + ch / 2 + 4, "label": lab} for i, lab in enumerate(rlab) if i % every_r == 0],
        "cols": [{"x": LABEL_W + i * cw + cw / 2, "label": lab} for i, lab in enumerate(slab) if i % every_s == 0],
        "lo": fmt_ns(lo),
        "hi": fmt_ns(hi),
        "levels": list(range(LEVELS)),
        "folded": len(rlab) < len(ranks),
        "cw": cw,
        "ch": ch,
        "label_w": LABEL_W,
        "head_h": HEAD_H,
    }


def _matrices(ja: JobAnalysis) -> tuple[list[int], list[int], np.ndarray, np.ndarray]:
    """Ranks, steps, and step-time / collective-wait matrices in ns (-1 where a rank has no such step)."""
    st = ja.job.steps
    ranks = [int(r) for r in ja.job.ranks["rank"]]
    steps = sorted(int(s) for s in st["step"].unique()) if len(st) else []
    hs = np.full((len(ranks), max(len(steps), 1)), -1, np.int64)
    hw = hs.copy()
    if len(st):
        r = pd.Index(ranks).get_indexer(st["rank"])
        s = pd.Index(steps).get_indexer(st["step"])
        hs[r, s] = st["dur_ns"].to_numpy(np.int64)
        hw[r, s] = st["wait_ns"].to_numpy(np.int64)
    return ranks, steps or [0], hs, hw


def _segments(ns: dict[str, int], total: int) -> list[dict[str, Any]]:
    """A stacked bar's segments, in bucket order (the single report's ledger bars draw the same)."""
    return [
        {"bucket": b, "label": BUCKET_LABELS[b], "ns": int(ns.get(b, 0)), "pct": 100.0 * ns.get(b, 0) / total}
        for b in BUCKETS
        if total and ns.get(b, 0) > 0
    ]


def _ledger_bars(ja: JobAnalysis, slow_first: list[int]) -> dict[str, Any]:
    led = ja.job.ledger
    if led is None or led.empty:
        return {"ranks": [], "legend": [], "omitted": 0}
    per = {int(r): {str(b): int(round(v)) for b, v in zip(g["bucket"], g["ns"])} for r, g in led.groupby("rank", sort=True)}
    order = sorted(per) if len(per) <= MAX_LEDGER_RANKS else [r for r in slow_first if r in per][:MAX_LEDGER_RANKS]
    used = [b for b in BUCKETS if any(ns.get(b, 0) > 0 for ns in per.values())]
    bars = []
    for r in order:
        total = sum(per[r].values())
        bars.append({"rank": r, "label": f"rank {r}", "total_ns": total, "segments": _segments(per[r], total)})
    return {"ranks": bars, "legend": [{"bucket": b, "label": BUCKET_LABELS[b]} for b in used], "omitted": max(len(per) - len(order), 0)}


def _finding(n: int, f) -> dict[str, Any]:
    ev = f.evidence if isinstance(f.evidence, pd.DataFrame) else pd.DataFrame()
    cols = [str(c) for c in ev.columns][:10]
    rows = [[format_cell(c, v)[0] for c, v in zip(cols, row)] for row in ev.head(TOP)[ev.columns[:10]].itertuples(index=False, name=None)] if not ev.empty else []
    from traceinsight.assess import advice

    return {
        "n": n,
        "code": clean(f.code, 20),
        "title": clean(f.title, 300),
        "severity": f.severity.value,
        "message": clean(f.message, 4000),
        "impact_ns": int(f.impact_ns),
        "cols": [clean(c, 40) for c in cols],
        "rows": rows,
        "total_rows": int(len(ev)),
        "fixes": [{"label": clean(advice.label(fw), 30), "text": fx.text.strip(), "code": fx.code.strip()} for fw, fx in shown_fixes(f, all_frameworks=True)],
    }


def context(ja: JobAnalysis) -> dict[str, Any]:
    j = ja.job
    h = _headline(ja)
    table = _rank_table(ja)
    slow = table.sort_values(["held_ms", "step_ms", "rank"], ascending=[False, False, True])["rank"].astype(int).tolist()
    ranks, steps, hs, hw = _matrices(ja)
    shown = table if len(table) <= FULL_TABLE_RANKS else table.sort_values(["held_ms", "step_ms", "rank"], ascending=[False, False, True]).head(TOP)
    cols = [str(c) for c in shown.columns]
    return {
        "version": __version__,
        "title": clean(ja.source, 200),
        "verdict": job_verdict(ja),
        "head": h,
        "clocks": clean(j.alignment.describe(), 400),
        "cluster": clean(ja.cluster, 200) if ja.cluster else None,
        "rule_failures": [clean(x, 600) for x in ja.rule_failures[:20]],
        "missing": [clean(x, 400) for x in ja.missing[:20]],
        "missing_count": len(ja.missing),
        "failures": len(j.failures),
        "ledger": _ledger_bars(ja, slow),
        "heatmaps": [
            _heatmap("Step time", "each rank's step time", ranks, steps, hs),
            _heatmap("Waiting at collectives", "time each rank waited for the last rank to arrive", ranks, steps, hw),
        ] if j.step_count or len(j.steps) else [],
        "findings": [_finding(i + 1, f) for i, f in enumerate(ja.findings)],
        "rank_cols": cols,
        "rank_rows": [[format_cell(c, v)[0] for c, v in zip(cols, row)] for row in shown.itertuples(index=False, name=None)],
        "rank_rows_all": len(table),
        "groups": [
            {**g, "code": clean(g["code"], 20), "rule": clean(g["rule"], 60), "message": clean(g["example_message"], 400),
             "worst_text": ", ".join(f"rank {w['rank']} ({fmt_ns(w['impact_ns'])})" for w in g["worst"][:3])}
            for g in _rank_rule_groups(ja)
        ],
        "rank_count": j.rank_count,
        "warnings": [clean(w, 300) for w in ja.warnings[:20]],
        "warnings_more": max(len(ja.warnings) - 20, 0),
        "css": report_css(),
    }


def render_html(ja: JobAnalysis) -> str:
    return env().get_template("job.html.j2").render(**context(ja))
