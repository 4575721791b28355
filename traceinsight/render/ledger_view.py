"""The time ledger as every format shows it: one stacked bar per device and per step (HTML), one table (text,
Markdown). Built from the ``Ledger`` alone, so the formats cannot disagree about where the time went.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from traceinsight.vocab.buckets import BUCKETS, LABELS, SHORT
from traceinsight.vocab.units import fmt_ns

if TYPE_CHECKING:  # pragma: no cover
    from traceinsight.derive.ledger import Ledger

#: How each bucket is named in reports (the JSON keeps the bucket ids) and in table heads: ``traceinsight.vocab.buckets``.
BUCKET_LABELS = LABELS
BUCKET_SHORT = SHORT
#: Steps drawn per device, and devices drawn: a bar per step stays readable up to a few dozen.
MAX_STEP_BARS = 40
MAX_DEVICES = 16
#: Rows of the text/Markdown step table.
MAX_STEP_ROWS = 12


def _device_label(rank: int, device: int, multi_rank: bool) -> str:
    return f"rank {rank} · GPU {device}" if multi_rank else f"GPU {device}"


def _segments(ns: dict[str, int], total: int) -> list[dict[str, Any]]:
    return [
        {"bucket": b, "label": BUCKET_LABELS[b], "ns": int(ns.get(b, 0)), "pct": 100.0 * ns.get(b, 0) / total}
        for b in BUCKETS
        if total and ns.get(b, 0) > 0
    ]


def used_buckets(ledger: Ledger) -> list[str]:
    """Buckets that hold any time, in ``BUCKETS`` order (tables and legends show only these)."""
    t = ledger.totals()
    return [b for b in BUCKETS if t[b] > 0]


def _grouped(frame: pd.DataFrame, keys: tuple[str, ...], value: str) -> dict[tuple[int, ...], dict[str, Any]]:
    """Per group of ``keys`` (in sorted order, as groupby(sort=True) gives them), {bucket: value} in row order.

    The ledger's tables are a few rows per device and step: one pass over their columns as Python lists
    costs less than a pandas groupby per table."""
    out: dict[tuple[int, ...], dict[str, Any]] = {}
    for *key, bucket, v in zip(*(frame[k].tolist() for k in keys), frame["bucket"].tolist(), frame[value].tolist()):
        out.setdefault(tuple(key), {})[bucket] = v
    return dict(sorted(out.items()))


def bars(ledger: Ledger) -> dict[str, Any]:
    """Data for the HTML partial: a bar per device, and per device a bar per step (capped)."""
    if ledger.windows.empty:
        return {"devices": [], "legend": [], "devices_omitted": 0}
    multi_rank = ledger.windows["rank"].nunique() > 1 or bool((ledger.windows["rank"] != 0).any())
    by_dev = _grouped(ledger.by_device, ("rank", "device"), "ns")
    by_step: dict[tuple[int, int], list[tuple[int, dict[str, int]]]] = {}
    for (r, d, s), ns in _grouped(ledger.by_step, ("rank", "device", "step"), "ns").items():
        if s >= 0:
            by_step.setdefault((r, d), []).append((s, ns))
    devices = []
    for w in ledger.windows.head(MAX_DEVICES).itertuples(index=False):
        key = (int(w.rank), int(w.device))
        ns = by_dev.get(key, {})
        steps = by_step.get(key, [])
        devices.append(
            {
                "rank": key[0],
                "device": key[1],
                "label": _device_label(key[0], key[1], multi_rank),
                "window_ns": int(w.window_ns),
                "segments": _segments(ns, int(w.window_ns)),
                "steps": [
                    {"step": s, "window_ns": sum(v.values()), "segments": _segments(v, sum(v.values()))} for s, v in steps[:MAX_STEP_BARS]
                ],
                "steps_omitted": max(len(steps) - MAX_STEP_BARS, 0),
            }
        )
    return {
        "devices": devices,
        "legend": [{"bucket": b, "label": BUCKET_LABELS[b]} for b in used_buckets(ledger)],
        "devices_omitted": max(len(ledger.windows) - MAX_DEVICES, 0),
    }


def table(ledger: Ledger) -> tuple[list[str], list[list[str]]]:
    """Columns and rows (strings) of the per-device table: window, then % of the window per used bucket."""
    used = used_buckets(ledger)
    cols = ["device", "window", *[BUCKET_SHORT[b] for b in used]]
    rows = []
    multi_rank = ledger.windows["rank"].nunique() > 1 or bool((ledger.windows["rank"] != 0).any()) if not ledger.windows.empty else False
    for (r, d), pct in _grouped(ledger.by_device, ("rank", "device"), "pct").items():
        win = ledger.window_ns(r, d)
        rows.append([_device_label(r, d, multi_rank), fmt_ns(win), *[_pct(pct.get(b, 0.0)) for b in used]])
    return cols, rows


def step_table(ledger: Ledger) -> tuple[str, list[str], list[list[str]]]:
    """The same per step: (device label, columns, rows) for the first device with steps, ``MAX_STEP_ROWS`` at most."""
    by = ledger.by_step
    stepped = np.flatnonzero(by["step"].to_numpy() >= 0)
    if not len(stepped):
        return "", [], []
    used = used_buckets(ledger)
    r0, d0 = int(by["rank"].iloc[stepped[0]]), int(by["device"].iloc[stepped[0]])  # the first device with steps
    mine = by.iloc[stepped]
    mine = mine[(mine["rank"].to_numpy() == r0) & (mine["device"].to_numpy() == d0)]
    cols = ["step", "time", *[BUCKET_SHORT[b] for b in used]]
    total: dict[int, int] = {}
    for step, n in zip(mine["step"].tolist(), mine["ns"].tolist()):
        total[step] = total.get(step, 0) + n
    rows = [
        [str(step), fmt_ns(total[step]), *[_pct(p.get(b, 0.0)) for b in used]]
        for (step,), p in list(_grouped(mine, ("step",), "pct").items())[:MAX_STEP_ROWS]
    ]
    multi_rank = ledger.windows["rank"].nunique() > 1 or bool((ledger.windows["rank"] != 0).any())
    return _device_label(r0, d0, multi_rank), cols, rows


def _pct(p: float) -> str:
    return "–" if p == 0 else ("<0.1%" if p < 0.05 else f"{p:.1f}%")


def markdown(ledger: Ledger) -> str:
    """Markdown tables of the ledger (devices, then steps), or "" when there is no GPU window."""
    cols, rows = table(ledger)
    if not rows:
        return ""
    out = ["**Where the GPU time went** (% of each device's window, first to last GPU activity):", ""]
    out += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(r) + " |" for r in rows[:MAX_DEVICES]]
    if len(rows) > MAX_DEVICES:
        out.append(f"\n… {len(rows) - MAX_DEVICES} more devices in the HTML and JSON reports.")
    label, scols, srows = step_table(ledger)
    if srows:
        out += ["", f"<details><summary>Per step ({label})</summary>", ""]
        out += ["| " + " | ".join(scols) + " |", "|" + "---|" * len(scols)]
        out += ["| " + " | ".join(r) + " |" for r in srows]
        out += ["", "</details>"]
    return "\n".join(out) + "\n"
