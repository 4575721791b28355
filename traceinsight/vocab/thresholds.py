"""Thresholds that more than one stage applies, each defined once with its reason. Floor 0.

The ledger books a gap as launch overhead with ``LAUNCH_GAP_NS``, TI001/TI003 read that booking, and the what-if's
CUDA-graph model removes exactly such host gaps: one number, so the time the ledger calls launch-bound is the time
the what-if takes out.
"""

from __future__ import annotations

#: Host time between two launches up to this long is per-op launch overhead (which a CUDA graph removes); longer
#: means the host did something else in between. 100 µs is far above launch latency (5-20 µs).
LAUNCH_GAP_NS = 100_000
