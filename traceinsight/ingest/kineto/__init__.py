"""PyTorch Profiler (kineto) Chrome-trace JSON: one file, a gzip of one, or a folder of per-rank files.

``decode`` (msgspec) and the native scanner (``_kineto_scan.c``) both give ``columns.EventColumns``; ``reader``
turns those into timeline columns.
"""

from .reader import read, sniff

__all__ = ["read", "sniff"]
