"""XPlane allocator events -> memory rows (``timeline.MEMORY_COLUMNS``).

TensorFlow's BFC allocator, with memory profiling on, records a ``MemoryAllocation`` / ``MemoryDeallocation``
TraceMe on the host plane per call, with the allocator's state after it (``bytes_allocated`` = bytes in use,
``bytes_reserved``, ``peak_bytes_in_use``), the block (``allocation_bytes``, ``requested_bytes``, ``addr``), the op
(``tf_op``) and the allocator (``allocator_name``, ``GPU_0_bfc``). XProf's memory profile is built from the same
events. XProf counts memory in use as heap (``bytes_allocated``) plus stack (``bytes_reserved``, memory the
allocator set aside beyond tensors, often 0): ``allocated`` is the heap, ``reserved`` the two together.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from traceinsight.model.plausible import DROPPED_KEY, MAX_DEVICE_ID

#: Stats read from every event that carries them (the memory events): decoded next to ``lines.EVENT_STATS``.
MEMORY_STATS = ("allocator_name", "bytes_allocated", "bytes_reserved", "allocation_bytes", "requested_bytes", "addr",
                "tf_op")
_NAMES = {"MemoryAllocation": 1, "MemoryDeallocation": -1}
_GPU = re.compile(r"(?:GPU|gpu|device)_?(\d+)")
_LIMIT = float(1 << 62)


def _numbers(col: np.ndarray | None, n: int) -> np.ndarray:
    if col is None:
        return np.full(n, np.nan)
    return pd.to_numeric(pd.Series(col, dtype=object), errors="coerce").to_numpy(dtype=np.float64)


def memory_from_table(t, name_table: list[str]) -> dict[str, Any] | None:
    """The memory rows among the decoded events of ``t`` (a ``lines.LineTable``), on its clock; None if none."""
    if not any(k in t.stats for k in ("bytes_allocated", "allocation_bytes")):
        return None
    names = np.array(list(name_table) + [""], dtype=object)
    sign_of = np.array([_NAMES.get(str(x), 0) for x in names], dtype=np.int8)
    host = np.repeat(np.array([p == "host" for p in t.plane], dtype=bool), t.sizes)
    sign = np.where(host, sign_of[t.codes], 0)
    rows = np.flatnonzero(sign != 0)
    if not len(rows):
        return None
    n = len(rows)

    def stat(key: str) -> np.ndarray:
        col = t.stats.get(key)
        return _numbers(None if col is None else col[rows], n)

    size = stat("allocation_bytes")
    size = np.where(np.isnan(size), stat("requested_bytes"), size)
    ok = np.abs(np.nan_to_num(size)) < _LIMIT
    alloc_name = t.stats.get("allocator_name")
    allocator = np.array([str(a) if a is not None else "" for a in (alloc_name[rows] if alloc_name is not None else [None] * n)], dtype=object)
    uniq, inv = np.unique(allocator, return_inverse=True)
    dev_of = np.array([_device_of(u) for u in uniq.tolist()], dtype=np.int64)
    device = dev_of[inv] if len(uniq) else np.full(n, -1, np.int64)
    bad_device = device == _NO_DEVICE
    ok &= ~bad_device
    delta = (sign[rows] * np.abs(np.nan_to_num(size))).astype(np.int64)
    op_col = t.stats.get("tf_op")
    op = np.array([str(o) if o not in (None, "") else None for o in (op_col[rows] if op_col is not None else [None] * n)],
                  dtype=object)
    addr = stat("addr")
    allocated = stat("bytes_allocated")
    out = {
        "kind": np.where(delta < 0, "free", "alloc").astype(object),
        "start_ns": t.start_ns[rows],
        "device": device,
        "device_type": np.where(device >= 0, "cuda", "cpu").astype(object),
        "delta_bytes": delta,
        "allocated": allocated,
        "reserved": allocated + np.nan_to_num(stat("bytes_reserved")),
        "address": np.where(np.isfinite(addr) & (np.abs(addr) < _LIMIT), addr, -1).astype(np.int64),
        "pid": np.zeros(n, np.int64),
        "tid": np.repeat(np.asarray(t.tid, dtype=np.int64), t.sizes)[rows],
        "op": pd.Categorical(op),
    }
    if not ok.all():
        out = {k: (v[ok] if not isinstance(v, pd.Categorical) else v[ok]) for k, v in out.items()}
        out[DROPPED_KEY] = int((~ok).sum())
    return out


#: ``_device_of`` for an allocator whose GPU index no device has (its rows are dropped and counted).
_NO_DEVICE = -2


def _device_of(allocator: str) -> int:
    """The GPU index in an allocator's name (``GPU_0_bfc`` -> 0), -1 for host allocators, ``_NO_DEVICE`` for an
    index past ``MAX_DEVICE_ID`` (a 20-digit id must drop its rows, not the trace, nor be cut to another GPU's)."""
    m = _GPU.search(allocator)
    if not m or "host" in allocator.lower() or "cpu" in allocator.lower():
        return -1
    digits = m.group(1)
    return int(digits) if len(digits) <= 6 and int(digits) <= MAX_DEVICE_ID else _NO_DEVICE
