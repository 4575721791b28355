"""PyTorch Profiler allocator records -> memory rows (``timeline.MEMORY_COLUMNS``).

With ``profile_memory=True`` the profiler writes an instant event per caching-allocator call: ``[memory]`` with
``Bytes`` (+ allocated, - freed), ``Total Allocated`` and ``Total Reserved`` after the call, ``Addr`` and the device
(``Device Type`` is c10's DeviceType: CPU 0, CUDA 1, HIP 6, which ROCm builds write; ``Device Id`` -1 on the host),
and ``[OutOfMemory]`` for an allocation that failed. Files of 2021 carry only ``Bytes``: their totals are left
unknown here and filled from a running sum when the timeline is finished.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from traceinsight.model.plausible import DROPPED_KEY, MAX_DEVICE_ID
from traceinsight.model.timeline import MEMORY_KINDS

#: c10::DeviceType -> the memory table's device_type.
DEVICE_TYPES = {0: "cpu", 1: "cuda", 6: "hip"}
_LIMIT = float(1 << 62)


def memory_rows(raw: dict[str, np.ndarray] | None, origin_us: float, origin_ns: int, warnings: list[str]) -> dict[str, Any] | None:
    """Memory columns on the same clock as the file's rows (``start_ns`` = origin_ns + ns since origin_us)."""
    if raw is None:
        return None
    ts = raw["ts"]
    with np.errstate(invalid="ignore", over="ignore"):
        ok = np.isfinite(ts) & (np.abs((ts - origin_us) * 1000.0) < _LIMIT / 4)
        for f in ("addr", "bytes", "total_allocated", "total_reserved", "device_id", "device_type"):
            v = raw[f]
            ok &= ~(np.abs(v) > _LIMIT)  # NaN (absent) stays; a number no int64 holds drops the row
        no_device = ok & ((raw["device_id"] < -1) | (raw["device_id"] > MAX_DEVICE_ID))  # an id no GPU has: not cut to fit
    if not ok.all():
        warnings.append(f"{int((~ok).sum()):,} memory events with no usable time or size were dropped")
    ok &= ~no_device
    if not ok.any():
        return {"kind": np.zeros(0, dtype=object), "start_ns": np.zeros(0, np.int64), DROPPED_KEY: int(no_device.sum())} if no_device.any() else None
    r = raw if ok.all() else {k: v[ok] for k, v in raw.items()}  # the usual case: every row kept, nothing copied
    oom = r["oom"]
    delta = np.nan_to_num(r["bytes"], nan=0.0).astype(np.int64)
    dtype_code = np.nan_to_num(r["device_type"], nan=-1).astype(np.int64)
    dev_id = np.nan_to_num(r["device_id"], nan=-1).astype(np.int64)
    on_host = dtype_code == 0
    kind = np.where(oom, 2, np.where(delta < 0, 1, 0)).astype(np.int8)  # codes into MEMORY_KINDS
    type_names = ["cpu", "cuda", "hip", "other"]
    type_code = np.full(len(dtype_code), 3, dtype=np.int8)
    for code, name in DEVICE_TYPES.items():
        type_code[dtype_code == code] = type_names.index(name)
    return {
        "kind": pd.Categorical.from_codes(kind, categories=list(MEMORY_KINDS)),
        "start_ns": np.rint((r["ts"] - origin_us) * 1000.0).astype(np.int64) + origin_ns,
        "device": np.where(on_host, -1, dev_id).astype(np.int32),
        "device_type": pd.Categorical.from_codes(type_code, categories=type_names),
        "delta_bytes": delta,
        "allocated": r["total_allocated"],
        "reserved": r["total_reserved"],
        "address": np.nan_to_num(r["addr"], nan=-1).astype(np.int64),
        "pid": r["pid"],
        "tid": r["tid"],
        DROPPED_KEY: int(no_device.sum()),
    }
