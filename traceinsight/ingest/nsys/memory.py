"""Nsight Systems memory tables -> memory rows (``timeline.MEMORY_COLUMNS``).

``CUDA_GPU_MEMORY_USAGE_EVENTS`` (``--cuda-memory-usage=true``) has one row per driver allocation or release
(``memoryOperationType`` 0 / 1, ENUM_CUDA_DEV_MEM_EVENT_OPER) with its size, address, device, memory kind and the
correlation id of the runtime call (``cudaMalloc``, ``cudaFree``). The driver sees what a framework's caching
allocator *reserves*, not what its tensors use, so the running sum per device is both ``allocated`` and
``reserved`` here; memory that was allocated before the capture began is not in it. Host kinds (``memKind`` 0
pageable, 1 pinned) go to device -1.

``CUDA_UM_CPU_PAGE_FAULT_EVENTS`` / ``CUDA_UM_GPU_PAGE_FAULT_EVENTS`` (``--cuda-um-cpu-page-faults``,
``--cuda-um-gpu-page-faults``) become ``um_fault_cpu`` / ``um_fault_gpu`` rows; a GPU fault record groups
``numberOfPageFaults`` faults over ``[start, end)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from traceinsight.model.plausible import DROPPED_KEY, MAX_DEVICE_ID, MAX_FAULTS_PER_ROW, MAX_GPU_BYTES
from traceinsight.ingest.nsys import schema as S
from traceinsight.ingest.nsys.sql import Field, fetch

USAGE = "CUDA_GPU_MEMORY_USAGE_EVENTS"
UM_CPU = "CUDA_UM_CPU_PAGE_FAULT_EVENTS"
UM_GPU = "CUDA_UM_GPU_PAGE_FAULT_EVENTS"
#: ENUM_CUDA_MEM_KIND values that are host memory.
HOST_KINDS = (0, 1)
_PID = f"((globalPid >> {S.PID_SHIFT}) & {S.ID_MASK})"


def _col(cols: set[str], name: str, default: str) -> str:
    return f'"{name}"' if name in cols else default


def read_memory(conn, tables: dict[str, set[str]]) -> dict[str, Any] | None:
    """The memory rows of every memory table the export has (raw row times), or None when it has none."""
    pieces = []
    cols = tables.get(USAGE)
    if cols and {"start", "bytes"} <= cols:
        pieces.append(_usage(conn, cols))
    cols = tables.get(UM_CPU)
    if cols and "start" in cols:
        pieces.append(_faults(conn, UM_CPU, cols, "um_fault_cpu"))
    cols = tables.get(UM_GPU)
    if cols and "start" in cols:
        pieces.append(_faults(conn, UM_GPU, cols, "um_fault_gpu"))
    dropped = sum(p.get(DROPPED_KEY, 0) for p in pieces)
    pieces = [p for p in pieces if len(p["start_ns"])]
    if not pieces:
        return {"kind": np.zeros(0, dtype=object), "start_ns": np.zeros(0, np.int64), DROPPED_KEY: dropped} if dropped else None
    for p in pieces:
        p.pop(DROPPED_KEY, None)
    out: dict[str, Any] = {DROPPED_KEY: dropped}
    for key in pieces[0]:
        vals = [p[key] for p in pieces]
        out[key] = np.concatenate([np.asarray(v, dtype=object) if isinstance(v, pd.Categorical) else v for v in vals]) \
            if len(vals) > 1 else vals[0]
    return out


def _usage(conn, cols: set[str]) -> dict[str, Any]:
    a = fetch(conn, USAGE, [
        Field("start", "start"),
        Field("pid", _PID if "globalPid" in cols else "0", 24),
        # whole 64-bit values: a packed field would cut an id or a kind to fit, and charge another device
        Field("device", _col(cols, "deviceId", "0")),
        Field("mem_kind", _col(cols, "memKind", "2")),
        Field("oper", _col(cols, "memoryOperationType", "0")),
        Field("bytes", "bytes"),
        Field("address", _col(cols, "address", "-1")),
        Field("correlation", _col(cols, "correlationId", "-1"), 32, none=-1, sentinel=True),
    ])
    # time order, allocations before releases at the same time (as nsys-ai orders them): peaks are not hidden
    host = np.isin(a["mem_kind"], HOST_KINDS)
    # an operation other than allocate (0) or release (1), a size past any device, a device id no GPU has: not
    # one row a driver writes; dropped (and counted) before the running sums, which they would corrupt
    ok = np.isin(a["oper"], (0, 1)) & (np.abs(a["bytes"]) <= MAX_GPU_BYTES) & (host | ((a["device"] >= 0) & (a["device"] <= MAX_DEVICE_ID)))
    dropped = int((~ok).sum())
    order = np.lexsort((a["oper"][ok], a["start"][ok]))
    a = {k: v[ok][order] for k, v in a.items()}
    host = host[ok][order]
    size = np.abs(a["bytes"])
    delta = np.where(a["oper"] == 1, -size, size)
    device = np.where(host, -1, a["device"]).astype(np.int64)
    level = np.zeros(len(delta), dtype=np.float64)
    for d in np.unique(device):
        m = device == d
        level[m] = np.cumsum(delta[m].astype(np.float64))  # floats: int64 sums could wrap
    return {
        DROPPED_KEY: dropped,
        "kind": np.where(delta < 0, "free", "alloc").astype(object),
        "start_ns": a["start"],
        "dur_ns": np.zeros(len(delta), np.int64),
        "device": device,
        "device_type": np.where(host, "cpu", "cuda").astype(object),
        "delta_bytes": delta,
        "allocated": level,
        "reserved": level,
        "address": a["address"],
        "count": np.ones(len(delta), np.int64),
        "pid": a["pid"],
        "tid": np.full(len(delta), -1, np.int64),
        "correlation": a["correlation"],
    }


def _faults(conn, table: str, cols: set[str], kind: str) -> dict[str, Any]:
    gpu = kind == "um_fault_gpu"
    fields = [
        Field("start", "start"),
        Field("end", _col(cols, "end", "start")),
        Field("pid", _PID if "globalPid" in cols else "0", 24),
        Field("device", _col(cols, "deviceId", "-1") if gpu else "-1", none=-1),
        Field("count", _col(cols, "numberOfPageFaults", "1")),
        Field("address", _col(cols, "address", "-1")),
    ]
    a = fetch(conn, table, fields)
    ok = a["count"] <= MAX_FAULTS_PER_ROW
    if gpu:
        ok &= (a["device"] >= -1) & (a["device"] <= MAX_DEVICE_ID)
    dropped = int((~ok).sum())
    if dropped:
        a = {k: v[ok] for k, v in a.items()}
    n = len(a["start"])
    return {
        DROPPED_KEY: dropped,
        "kind": np.full(n, kind, dtype=object),
        "start_ns": a["start"],
        "dur_ns": np.clip(a["end"] - a["start"], 0, None),
        "device": a["device"] if gpu else np.full(n, -1, np.int64),
        "device_type": np.full(n, "cuda" if gpu else "cpu", dtype=object),
        "delta_bytes": np.zeros(n, np.int64),
        "allocated": np.full(n, np.nan),
        "reserved": np.full(n, np.nan),
        "address": a["address"],
        "count": np.clip(a["count"], 1, None),
        "pid": a["pid"],
        "tid": np.full(n, -1, np.int64),
        "correlation": np.full(n, -1, np.int64),
    }
