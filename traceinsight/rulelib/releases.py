"""Whether the allocator's releases of device memory were the program's request or the allocator at its limit.

A caching allocator (PyTorch's, TensorFlow's BFC) gives memory back to the driver on its own only when an
allocation fails: it frees its cached blocks and retries, from inside the framework op whose allocation failed,
with its pool at the device's capacity. A release anywhere else was asked for (``torch.cuda.empty_cache()``, an
option that trims the cache), and the allocations that follow it are its consequence, not fragmentation. TI031
names such releases, TI032 names the churn they cause; this is their one judgement.

It is also the one judgement of an allocator that does not cache at all (PyTorch with
``PYTORCH_NO_CUDA_MEMORY_CACHING=1``, JAX with ``XLA_PYTHON_CLIENT_ALLOCATOR=platform``, a plain program that
mallocs and frees per iteration): every tensor freed is a driver free, which synchronises the device, and the next
allocation asks the driver again (``uncached_allocator``). TI032 reports those calls as allocator churn, and TI031
leaves their frees alone: no pressure, no request, the pool is simply off.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.vocab.intervals import merge_intervals
from traceinsight.derive.memory import FREE_CALLS, fmt_bytes
from traceinsight.derive.steady import MIN_REALLOC_STEPS, MIN_REALLOCS_PER_STEP  # the steady-state model's threshold, one home
from traceinsight.rulelib.cache import memo
from traceinsight.rulelib.enclosing import cpu_op_enclosing

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


#: Stream-ordered calls draw from a pool of their own and do not synchronise the device.
_ASYNC = "Async"


def uncached_allocator(views) -> dict[int, pd.DataFrame]:
    """Per rank whose allocator does not cache (``MIN_REALLOCS_PER_STEP``, ``MIN_REALLOC_STEPS``): its synchronising
    malloc and free calls (``Memory.allocator_calls`` without stream-ordered ones) in the repeated part of the window,
    each with ``realloc`` (True for a malloc that follows a free of its step). The repeated part is the steady-state
    steps (``Memory.steady``; steps found from the optimizer's calls count) or, on a rank without steps, everything
    outside the ledger's warm-up regions (start-up allocates once, and its mallocs are warm-up there)."""

    def build() -> dict[int, pd.DataFrame]:
        mem = views.memory
        calls = mem.allocator_calls
        if calls.empty:
            return {}
        names = calls["name"].astype(str)
        calls = calls[~names.str.contains(_ASYNC).to_numpy()]
        if calls.empty:
            return {}
        out: dict[int, pd.DataFrame] = {}
        warm = views.ledger.warmup
        ends = mem.warmup_end
        for r, g in calls.groupby("rank", sort=True):
            g = g.sort_values("start_ns", kind="stable")
            r = int(r)
            if r in ends:
                g = g[mem.steady(g["rank"].to_numpy(), g["start_ns"].to_numpy(), g["step"].to_numpy())]
                key = g["step"].to_numpy()
            else:
                if warm is not None and len(warm):
                    w = warm[warm["rank"].to_numpy() == r]
                    a, b = merge_intervals(w["start_ns"].to_numpy(np.int64), w["end_ns"].to_numpy(np.int64))
                    s = g["start_ns"].to_numpy(np.int64)
                    k = np.searchsorted(a, s, side="right") - 1  # the last merged region starting at or before s
                    inside = (k >= 0) & (s < b[np.maximum(k, 0)])
                    g = g[~inside]
                key = np.zeros(len(g), dtype=np.int64)
            if len(g) < 2:
                continue
            free = g["name"].astype(str).str.contains(FREE_CALLS).to_numpy()
            realloc = np.zeros(len(g), dtype=bool)
            realloc[1:] = free[:-1] & ~free[1:] & (key[1:] == key[:-1])
            per = pd.Series(realloc).groupby(key).sum().to_numpy()
            churn = ((per >= MIN_REALLOCS_PER_STEP).sum() >= MIN_REALLOC_STEPS) if r in ends else \
                (realloc.sum() >= MIN_REALLOCS_PER_STEP * MIN_REALLOC_STEPS)
            if churn:
                out[r] = g.assign(realloc=realloc)
        return out

    return memo(views, "releases.uncached_allocator", build)


def allocator_off_calls(views, calls: pd.DataFrame) -> np.ndarray:
    """Per row of ``calls`` (allocator calls with their rank): True when it is one of ``uncached_allocator``'s, the
    churn of an allocator that does not cache (TI032's claim, never TI031's flush)."""
    off = uncached_allocator(views)
    out = np.zeros(len(calls), dtype=bool)
    if not off or calls.empty:
        return out
    idx = calls.index
    for r, g in off.items():
        out |= (calls["rank"].to_numpy() == r) & idx.isin(g.index)
    return out
