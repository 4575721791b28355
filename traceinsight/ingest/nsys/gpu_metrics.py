"""GPU-metrics sampling (``nsys profile --gpu-metrics-devices``): the GPU_METRICS and TARGET_INFO_GPU_METRICS tables.

The hardware's own answer to "is the busy GPU doing useful work": SM Active, SM Issue, Tensor Active and DRAM
read/write bandwidth, each a 0-100 % throughput sampled every few microseconds per GPU. Only the metrics the
efficiency view reads are kept; the GPU of a sample is the low byte of its ``typeId`` (as Nsight's own recipes
decode it), its time the session clock the activity tables use.
"""

from __future__ import annotations

import re
import sqlite3

import numpy as np
import pandas as pd

#: Short names for the metrics kept, from the names Nsight Systems versions have used.
METRICS: tuple[tuple[str, "re.Pattern[str]"], ...] = (
    ("SM Active", re.compile(r"^SMs? Active\b", re.I)),
    ("SM Issue", re.compile(r"^SM Issue\b", re.I)),
    ("Tensor Active", re.compile(r"^Tensor Active\b", re.I)),
    ("DRAM Read", re.compile(r"^DRAM Read Bandwidth\b", re.I)),
    ("DRAM Write", re.compile(r"^DRAM Write Bandwidth\b", re.I)),
)

COLUMNS = ("start_ns", "device", "metric", "value")


def read_gpu_metrics(conn: sqlite3.Connection, tables: dict[str, set[str]]) -> pd.DataFrame | None:
    """Samples as ``start_ns`` (session clock), ``device``, ``metric`` (short name), ``value`` (%); None when absent."""
    info, data = tables.get("TARGET_INFO_GPU_METRICS"), tables.get("GPU_METRICS")
    if not info or not data or not {"metricId", "metricName"} <= info or not {"typeId", "metricId", "value"} <= data:
        return None
    ts = "timestamp" if "timestamp" in data else ("rawTimestamp" if "rawTimestamp" in data else None)
    if ts is None:
        return None
    wanted: dict[int, str] = {}
    for metric_id, name in conn.execute("SELECT DISTINCT metricId, metricName FROM TARGET_INFO_GPU_METRICS"):
        for short, rx in METRICS:
            if isinstance(name, str) and rx.search(name) and isinstance(metric_id, int):
                wanted.setdefault(metric_id, short)
    if not wanted:
        return None
    ids = ",".join(str(int(i)) for i in wanted)
    rows = conn.execute(f"SELECT {ts}, typeId, metricId, value FROM GPU_METRICS WHERE metricId IN ({ids}) AND {ts} IS NOT NULL").fetchall()
    if not rows:
        return None
    arr = np.array(rows, dtype=np.float64)
    names = np.array([wanted[int(m)] for m in arr[:, 2]], dtype=object)
    return pd.DataFrame({
        "start_ns": arr[:, 0].astype(np.int64),
        "device": (arr[:, 1].astype(np.int64) & 0xFF).astype(np.int32),
        "metric": pd.Categorical(names, categories=[m for m, _ in METRICS]),
        "value": np.clip(arr[:, 3], 0.0, 100.0),
    })
