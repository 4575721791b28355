"""Keep freed memory inside the ``traceinsight`` process instead of handing it back to the kernel.

An analysis allocates and frees many arrays of a few MB to a few tens of MB (one column of a million events, a
sort key, a mask). glibc serves every block over its mmap threshold with a fresh ``mmap`` and unmaps it on free,
so the next array of that size page-faults all of its memory in again. On virtual machines a first touch costs
up to ~2.5 ms per MB: on the 1.2 M-event benchmark trace (bench/README.md, "End to end") this was about 1 s of a
4.6 s run. Raising the threshold to glibc's ceiling (32 MiB on 64-bit) and never trimming the heap lets freed
blocks be reused; peak RSS grows by ~5 %.

Only the command line calls ``keep_freed_memory``: it is a short-lived process of ours. The library never does,
because the allocator policy of a host process (a notebook, a training job) is not ours to change.
"""

from __future__ import annotations

import ctypes
import platform
import sys

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3

#: glibc refuses an mmap threshold above HEAP_MAX_SIZE / 2, 32 MiB on 64-bit builds.
MMAP_THRESHOLD = 32 * 1024 * 1024
#: Never give the top of the heap back (the process ends soon after the report is written).
TRIM_THRESHOLD = 2**31 - 1
#: Grow the heap in 256 MiB reservations (address space only: pages are touched when used).
TOP_PAD = 256 * 1024 * 1024


def keep_freed_memory() -> bool:
    """Tune glibc malloc for one large analysis; False (nothing changed) on any other C library or platform."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols: glibc's, checked above
    except (OSError, AttributeError):
        return False
    mallopt.restype = ctypes.c_int  # int mallopt(int param, int value); 1 on success
    return all(mallopt(param, value) == 1 for param, value in (
        (_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD), (_M_TOP_PAD, TOP_PAD)))
