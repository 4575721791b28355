"""The headline numbers of a trace (span, GPU busy per device, top kernels, steps), independent of rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from traceinsight.model.timeline import KINDS, Timeline
from traceinsight.derive.views import Views


@dataclass
class Summary:
    span_ns: int
    event_counts: dict[str, int]
    devices: list[dict[str, Any]]  # per (rank, device): busy %, busy/idle ns, window, name
    kernel_count: int
    kernel_time_ns: int
    top_kernels: pd.DataFrame  # name, count, total_ns, mean_ns, max_ns, pct_kernel_time
    steps: dict[str, Any] = field(default_factory=dict)  # count, mean_ns, median_ns, max_ns, min_ns

    @property
    def gpu_busy_pct(self) -> float | None:
        """Busy share over all devices, weighted by each device's active window."""
        win = sum(d["window_ns"] for d in self.devices)
        if not win:
            return None
        return 100.0 * sum(d["busy_ns"] for d in self.devices) / win

    def to_dict(self) -> dict[str, Any]:
        return {
            "span_ns": int(self.span_ns),
            "event_counts": {k: int(v) for k, v in self.event_counts.items()},
            "gpu_busy_pct": None if self.gpu_busy_pct is None else round(self.gpu_busy_pct, 3),
            "devices": self.devices,
            "kernel_count": int(self.kernel_count),
            "kernel_time_ns": int(self.kernel_time_ns),
            "top_kernels": [
                {
                    "name": str(r.name),
                    "count": int(r.count),
                    "total_ns": int(r.total_ns),
                    "mean_ns": float(round(r.mean_ns, 1)),
                    "max_ns": int(r.max_ns),
                    "pct_kernel_time": float(round(r.pct_kernel_time, 3)),
                }
                for r in self.top_kernels.itertuples(index=False)
            ],
            "steps": self.steps,
        }


def _kind_counts(kinds: pd.Series) -> dict[str, int]:
    """Rows per kind of ``KINDS``; on a categorical's codes, one comparison per kind (a dozen cheap passes cost
    less than hashing a million rows)."""
    if isinstance(kinds.dtype, pd.CategoricalDtype):
        cat = kinds.array
        where = cat.categories.get_indexer(list(KINDS))
        return {k: int(np.count_nonzero(cat.codes == c)) if c >= 0 else 0 for k, c in zip(KINDS, where.tolist())}
    counts = kinds.value_counts()
    return {k: int(counts.get(k, 0)) for k in KINDS}


def summarize(timeline: Timeline, views: Views | None = None, top_n: int = 15) -> Summary:
    views = views or Views(timeline)
    ev = timeline.events
    event_counts = _kind_counts(ev["kind"])
    names = {(d.rank, d.index): d.name for d in timeline.meta.devices}
    devices = []
    for r in views.utilization.itertuples(index=False):
        devices.append(
            {
                "rank": int(r.rank),
                "device": int(r.device),
                "name": names.get((int(r.rank), int(r.device))),
                "window_ns": int(r.window_ns),
                "busy_ns": int(r.busy_ns),
                "idle_ns": int(r.idle_ns),
                "busy_pct": round(float(r.busy_pct), 3),
            }
        )
    k = views.kernels
    kernel_time = int(k["dur_ns"].sum())
    if k.empty:
        top = pd.DataFrame({"name": [], "count": [], "total_ns": [], "mean_ns": [], "max_ns": [], "pct_kernel_time": []})
    else:
        top = (
            k.groupby("name", observed=True)["dur_ns"]
            .agg(count="size", total_ns="sum", mean_ns="mean", max_ns="max")
            .sort_values("total_ns", ascending=False)
            .head(top_n)
            .reset_index()
        )
        top["pct_kernel_time"] = 100.0 * top["total_ns"] / max(kernel_time, 1)
    steps: dict[str, Any] = {}
    s = views.steps
    if not s.empty:
        d = s["dur_ns"].to_numpy()
        steps = {
            "count": int(views.step_count),
            "mean_ns": float(np.mean(d)),
            "median_ns": float(np.median(d)),
            "min_ns": int(d.min()),
            "max_ns": int(d.max()),
        }
    return Summary(
        span_ns=views.span_ns,
        event_counts=event_counts,
        devices=devices,
        kernel_count=int(len(k)),
        kernel_time_ns=kernel_time,
        top_kernels=top,
        steps=steps,
    )
