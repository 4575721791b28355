"""Analyses kept for drill-down: a least-recently-used store bounded by count and by bytes.

An agent analyses a trace once and then asks about one finding, one device or one step at a time; keeping the
report (not the timeline) makes each drill-down free and keeps memory bounded by what the results weigh: the
store measures each entry as its encoded JSON size, so the byte bound is the size of what it could hand back.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

#: Defaults: a session rarely compares more than a handful of traces; 256 MiB of reports is far above that.
MAX_ENTRIES = 16
MAX_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Entry:
    id: str
    report: dict[str, Any]
    nbytes: int


class Store:
    """``put`` a report, ``get`` it back by id; the least recently used entries go first when a bound is hit."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError("the store needs room for at least one analysis")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def put(self, key: str, report: dict[str, Any], nbytes: int) -> str:
        """Keep ``report`` under an id derived from ``key`` (the same key, e.g. path + options, gives the same id)."""
        ident = "a" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        self._drop(ident)
        self._entries[ident] = Entry(ident, report, nbytes)
        self._bytes += nbytes
        while len(self._entries) > self.max_entries or (self._bytes > self.max_bytes and len(self._entries) > 1):
            self._drop(next(iter(self._entries)))
        return ident

    def get(self, ident: str) -> Entry | None:
        entry = self._entries.get(ident)
        if entry is not None:
            self._entries.move_to_end(ident)
        return entry

    def ids(self) -> list[str]:
        return list(self._entries)

    def _drop(self, ident: str) -> None:
        entry = self._entries.pop(ident, None)
        if entry is not None:
            self._bytes -= entry.nbytes
