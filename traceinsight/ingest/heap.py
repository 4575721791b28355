"""How the process's memory allocator behaves while a large trace is read.

Why: reading a gigabyte trace makes and drops a hundred or so column-sized arrays (tens of MB each: masks, codes,
converted copies). By default glibc serves every block that large with a fresh ``mmap`` and unmaps it when it is
freed, so the next array of the same size is faulted in again, page by page, by the kernel; and numpy asks for
transparent huge pages on large arrays, whose first touch costs several times more than small pages on the
virtual machines such jobs run on. Measured on the 1.9 GB replica (``bench/bench_load.py --synthetic 40``): 1.25 M
minor page faults and 2.3-4.1 s of system time for 3.5 s of user time.

``large_input`` keeps freed blocks in the heap for reuse while one large input is read, without huge pages, and
gives everything left free back to the kernel at the end (``malloc_trim``), so the memory a load leaves resident
is its result. Inputs under ``LARGE`` and allocators other than glibc's are left as they are: the settings are
process-wide, so they are held only for the read, and small traces (the usual case, and the cold-start target)
never load ``ctypes``.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
from pathlib import Path
from typing import Iterator

#: Inputs at least this large (bytes on disk) are read with the allocator settings below.
LARGE = 256 << 20

# glibc's mallopt parameters (malloc.h) and the values restored after a read: its default cap on mapped blocks,
# and the trim threshold its dynamic rule settles on once it has freed a block of the largest mapped size (32 MiB).
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_DEFAULT_MMAP_MAX = 65536
_SETTLED_TRIM = 64 << 20
_HOLD_TRIM = (1 << 31) - 1  # the largest value mallopt takes (an int): freed blocks stay in the heap

_libc_cache: list = []
_held = [0]  # large_inputs open: only the first sets and the last restores (the CLI holds one around load's)
_lock = threading.Lock()
_saved: list = []  # numpy's huge-page setting before the first large_input  # rank files or several traces may be loaded from threads at once


def _libc():
    """glibc's ``mallopt`` and ``malloc_trim`` (None elsewhere: musl, macOS, Windows)."""
    if not _libc_cache:
        lib = None
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                cand = ctypes.CDLL(None)
                if hasattr(cand, "mallopt") and hasattr(cand, "malloc_trim") and hasattr(cand, "gnu_get_libc_version"):
                    cand.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
                    cand.malloc_trim.argtypes = [ctypes.c_size_t]
                    lib = cand
            except (OSError, AttributeError):
                lib = None
        _libc_cache.append(lib)
    return _libc_cache[0]


def input_size(path: Path) -> int:
    """Bytes on disk of a trace file, or of the files directly in a folder (a rank folder); 0 if unreadable."""
    try:
        if path.is_dir():
            return sum(e.stat().st_size for e in os.scandir(path) if e.is_file())
        return path.stat().st_size
    except OSError:
        return 0


def _hugepages(on: bool) -> bool | None:
    """Sets whether numpy asks for transparent huge pages on large arrays; the previous setting (None: no switch)."""
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:  # pragma: no cover (another numpy layout)
        return None
    return bool(_set_madvise_hugepage(on))


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a trace is read and assembled, on again after (if it was on).

    Why: the read makes a few large arrays and few container objects, and no cycles worth finding, while pandas'
    and numpy's half a million long-lived objects are walked by every full collection the allocations trigger
    (on the 1.9 GB replica: 139 collections, 28 ms, for nothing collected). Process-wide, as ``gc`` is: loads in
    several threads each restore what they found, so the collector may come back early, never stay off."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


@contextlib.contextmanager
def large_input(nbytes: int) -> Iterator[None]:
    """While reading (and analysing) an input of ``nbytes``: freed blocks reused from the heap, no huge pages; all
    free memory given back at the end. A no-op under ``LARGE`` or without glibc. Nested or concurrent ones share
    the settings: the first sets them, the last restores them (``traceinsight analyze`` holds one around the whole
    command, ``load`` another within it; threads may load several large files at once)."""
    lib = _libc() if nbytes >= LARGE else None
    if lib is None:
        yield
        return
    with _lock:
        if not _held[0]:
            huge = _hugepages(False)
            lib.mallopt(_M_MMAP_MAX, 0)
            lib.mallopt(_M_TRIM_THRESHOLD, _HOLD_TRIM)
            _saved[:] = [huge]
        _held[0] += 1
    try:
        yield
    finally:
        with _lock:
            _held[0] -= 1
            if not _held[0]:
                lib.mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX)
                lib.mallopt(_M_TRIM_THRESHOLD, _SETTLED_TRIM)
                lib.malloc_trim(0)
                if _saved and _saved[0] is not None:
                    _hugepages(_saved[0])
