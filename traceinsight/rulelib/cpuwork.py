"""Host work that launches nothing: framework ops that compute on the CPU inside the step.

Why: "the host is busy in framework ops" has two fixes that do not overlap. Eager dispatch (many ops, each
launching a kernel, the host slower than the GPU runs them) wants fewer launches: compilation, CUDA graphs. An op
that computes on the CPU for milliseconds and launches nothing (``torch.randn`` of a CPU tensor, a NumPy-side
transform, a CPU-placed TensorFlow op) wants that work moved to the GPU or out of the step; compiling the model
does nothing for it. The trace tells them apart: a call into the GPU's runtime or driver on the op's thread inside
its span (a launch, a copy, an allocation, a sync), or none. An op that only waits in ``cudaMalloc`` or a sync is
not CPU work either, so any such call counts, not only launches.
"""

from __future__ import annotations

import numpy as np

from traceinsight.rulelib.cache import memo
from traceinsight.rulelib.enclosing import ThreadCodes, host_columns
from traceinsight.vocab.masks import kind_mask


def cpu_only_ops(views, min_ns: int) -> dict[str, np.ndarray]:
    """Framework ops (kind ``cpu_op``) of at least ``min_ns`` during which their thread made no call into the GPU's
    runtime or driver (no host row of kind ``runtime`` on the same rank and thread starts inside the op): ``rank``,
    ``start_ns``, ``end_ns`` arrays, in host-row order. Ops nest, so an outer op around such a one calls the GPU
    elsewhere and is not in the answer; only the work that called nothing is. Cached per ``min_ns``."""

    def build() -> dict[str, np.ndarray]:
        host = views.host_events
        hc = host_columns(views)
        empty = {"rank": np.zeros(0, np.int64), "start_ns": np.zeros(0, np.int64), "end_ns": np.zeros(0, np.int64)}
        if host.empty:
            return empty
        kind = host["kind"]
        pos = np.flatnonzero((hc["dur_ns"] >= min_ns) & kind_mask(kind, ("cpu_op",)))  # few long ops
        if not len(pos):
            return empty
        tid_all, pid_all = host["tid"].to_numpy(), host["pid"].to_numpy()
        rank = hc["rank"][pos].astype(np.int64)
        start, end = hc["start_ns"][pos].astype(np.int64), hc["end_ns"][pos].astype(np.int64)
        calls = np.flatnonzero(kind_mask(kind, ("runtime",)))
        called = np.zeros(len(pos), dtype=bool)
        if len(calls):
            # the long ops' threads coded once; a call on any other thread cannot fall inside one of them
            threads = ThreadCodes([rank, pid_all[pos], tid_all[pos]])
            c_code = threads.of([hc["rank"][calls], pid_all[calls], tid_all[calls]])
            on = c_code >= 0
            c_code, c_t = c_code[on], hc["start_ns"][calls[on]].astype(np.int64)
            if len(c_t):
                # the threads numbered 0..k-1 (the codes' mixed radix can be wide), then one sortable key per
                # (thread, time), the times rebased to fit
                uniq, op_thread = np.unique(threads.codes, return_inverse=True)
                c_thread = np.searchsorted(uniq, c_code)
                base = int(min(start.min(), c_t.min()))
                span = int(max(end.max(), c_t.max())) - base + 1
                keys = np.sort(c_thread * span + (c_t - base))
                op_key = op_thread.reshape(-1).astype(np.int64) * span
                lo = np.searchsorted(keys, op_key + (start - base), side="left")
                hi = np.searchsorted(keys, op_key + (end - base), side="left")
                called = hi > lo
        keep = ~called
        return {"rank": rank[keep], "start_ns": start[keep], "end_ns": end[keep]}

    return memo(views, f"rulelib.cpu_only_ops:{int(min_ns)}", build)
