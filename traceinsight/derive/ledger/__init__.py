"""The time ledger: every nanosecond of each GPU's active window in exactly one bucket.

Rules measure overlapping things (an idle gap may *be* a host sync, and also sit inside a data wait), so their
impacts cannot be added up. The ledger is the one account they all draw on: per (rank, device), the window from
the device's first to its last GPU activity (the window of GPU busy %) is cut into slices, each slice gets one
bucket, and the buckets of a device sum exactly to its window (per step: to the step's part of the window).
Findings *claim* slices (``Ledger.claim``), so a saving can never exceed the idle it really causes, and the
verdict reads the largest bucket instead of the largest finding.

Buckets, and how a nanosecond t of device d on rank r is booked (first match wins):

Busy (some stream of d runs; a GPU is idle only when no stream runs):

1. ``compute``: a kernel that is not a collective runs at t.
2. ``communication``: only collective kernels (NCCL/RCCL, ...) run at t. A collective overlapped by compute
   costs no wall time, so only *exposed* communication lands here.
3. ``copy``: only copies/memsets run at t. Copies hidden under kernels are free, so they count as what hides
   them.

Idle (no stream runs). A *gap* is a maximal idle stretch inside the window; the *next work* is the GPU activity
that ends it, and its *launch* the host call that enqueued it (``views.launches``; the earliest call returning
among the activities that start at the gap's end).

4. ``idle_warmup``: t is inside a warm-up region of the rank's host (see ``warmup_regions`` and
   ``traceinsight.derive.steady``): one-time work anywhere in the window, which no steady-state change removes.
5. ``idle_gpu_dependency``: the next work's launch call had returned by the time the gap began: the work was
   queued, so the GPU waited on something of its own (an event, another stream, a copy engine), not on the host.
6. ``idle_data_wait``: the host is inside a data-wait range at t (``enumerate(DataLoader)#...``,
   ``IteratorGetNext``, tf.data ``Iterator::`` on a consumer thread).
7. ``idle_host_sync``: the gap began while the host was blocked in a synchronizing call (explicit syncs,
   blocking copies/memsets, async copies to pageable memory, ``aten::item``-like ops; GPU-side sync records
   where the host side is missing). The queue drained under the blocked host, so the gap (beyond data wait and
   warm-up) is the sync's cost for as long as the host was blocked in the call (B), including the time to launch
   new work after it returns: without the call the host would have gone on B earlier. A gap longer than B still
   lasts the rest without the sync; that rest is what the host did after the call and is booked as below
   (``idle_launch_bound`` when the gap is short, ``idle_host_busy``, ``idle_untraced``, ``idle_other``). In a loop
   that syncs every step, B is the GPU's lead over the host at the sync, so this is exactly what removing the
   sync gives back (TI002 prices its stalls the same way).
8. ``idle_launch_bound``: a gap shorter than ``LAUNCH_GAP_NS`` (100 µs) whose next work was still being
   launched when the GPU ran dry: the host issues work back to back but slower than the GPU runs it.
9. ``idle_other`` (early): the next work has no launch in the trace (sliced trace, unlinked row), so nothing
   says whether host or GPU held it back.
10. ``idle_host_busy``: a longer host-caused gap and traced host work (framework ops, Python frames, runtime
    calls, framework dispatch and compiled code's wrappers traced as ranges: ``FRAMEWORK_DISPATCH``,
    ``COMPILED_WRAPPER``) runs at t: the host was busy with something other than feeding the GPU.
11. ``idle_untraced``: the same, but the host trace shows nothing at t (the rank has host events elsewhere).
12. ``idle_other``: everything else (a rank with no host events at all).

``AVOIDABLE_BUCKETS`` are the idle buckets a host-side change can remove; warm-up, GPU-side dependencies and
unattributed idle are left out of savings.

Steps: a step's window is its host step marker's range ``[start, end)`` clipped to the device window; slices are
cut at step boundaries, and time outside every step is step ``-1``, so summing ``by_step`` over steps gives
``by_device``.

Everything is interval arithmetic on sorted numpy arrays (one loop over (rank, device) pairs, none over events).

The steps, one module each: ``intervals`` (merged interval arrays and their searches), ``host`` (data waits and
blocking calls), ``warmup`` (warm-up regions), ``slices`` (one device's slices and gaps by precedence), ``build``
(``build_ledger``: the host facts per rank, the devices' slices, totals per step and device, each gap's buckets and
cause), ``frames`` (the frames built from those arrays on first read), ``account`` (the ``Ledger`` record, totals
and the JSON block) and ``claims`` (what a finding's time ranges claim).
"""

# The names callers use stay importable from here; the steps' own helpers are read from their modules.
from traceinsight.vocab.buckets import AVOIDABLE_BUCKETS, BUCKETS, BUSY_BUCKETS, IDLE_BUCKETS  # noqa: F401
from traceinsight.vocab.thresholds import LAUNCH_GAP_NS  # noqa: F401
from traceinsight.derive.steady import WARMUP_FIRST_STEP_RATIO, WARMUP_MIN_NS, WARMUP_RATIO  # noqa: F401  (the steady-state model's thresholds)
from traceinsight.derive.ledger.host import blocking_parts, data_wait_mask  # noqa: F401
from traceinsight.derive.ledger.warmup import WARMUP_SHAPE_REPEATS, warmup_regions  # noqa: F401
from traceinsight.derive.ledger.account import Ledger  # noqa: F401
from traceinsight.derive.ledger.build import build_ledger  # noqa: F401
