"""Whether the allocator's releases of device memory were the program's request or the allocator at its limit.

A caching allocator (PyTorch's, TensorFlow's BFC) gives memory back to the driver on its own only when an
allocation fails: it frees its cached blocks and retries, from inside the framework op whose allocation failed,
with its pool at the device's capacity. A release anywhere else was asked for (``torch.cuda.empty_cache()``, an
option that trims the cache), and the allocations that follow it are its consequence, not fragmentation. TI031
names such releases, TI032 names the churn they cause; this is their one judgement.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..memory import fmt_bytes
from .enclosing import cpu_op_enclosing

#: A release on a device whose memory peak stayed under this share of its capacity was asked for: the allocator
#: cannot have been at its limit.
ASKED_BELOW_PEAK_SHARE = 0.5


def outside_framework_ops(views, calls: pd.DataFrame) -> np.ndarray:
    """Per row of ``calls`` (rank, pid, tid, start_ns, dur_ns): True when its rank records framework ops and none of
    them encloses the call on its thread. A rank without framework ops (an Nsight capture) says nothing: False."""
    out = np.zeros(len(calls), dtype=bool)
    if calls.empty:
        return out
    pos, ops = cpu_op_enclosing(views)
    if not len(pos):
        return out
    op_ranks = np.unique(views.host_events["rank"].to_numpy()[pos])
    inside = ops.find_frame(calls) >= 0
    return ~inside & np.isin(calls["rank"].to_numpy(), op_ranks)


def asked_for(views, frees: pd.DataFrame, device=None) -> str | None:
    """How the releases ``frees`` show they were asked for ("outside any framework op", or the device's low peak
    in words), or None when nothing says so. ``device``: the device's memory (``DeviceMemory``) when known."""
    if frees.empty:
        return None
    if bool(outside_framework_ops(views, frees).all()):
        return "outside any framework op"
    if device is not None and not device.relative and device.peak_share is not None and device.peak_share < ASKED_BELOW_PEAK_SHARE:
        return f"while the device's peak stayed at {fmt_bytes(device.peak)} of its {fmt_bytes(device.capacity)}"
    return None
