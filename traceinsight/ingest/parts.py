"""What a reader hands back: columns and metadata, never a finished timeline.

Building the frame, putting every rank on one clock, numbering steps and checking the result is the same work for
every format, so it happens once, in ``ingest.load``; a reader's job ends at "these are my rows".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from traceinsight.model.timeline import TraceMeta


@dataclass
class Rows:
    """One file's (or one rank's) rows as column arrays, in the form ``timeline.build_events`` takes.

    ``rank`` fills the rank column when set. ``own_clock``: the rows are on a clock no other part shares (hosts
    without a common time base), so they are aligned at their own first event before the parts are joined."""

    columns: dict[str, Any]
    optional: dict[str, Any] = field(default_factory=dict)
    rank: int | None = None
    own_clock: bool = False
    #: memory rows (``timeline.MEMORY_COLUMNS`` as arrays) on the same clock as ``columns``; None when there are none
    memory: dict[str, Any] | None = None

    def __len__(self) -> int:
        return len(self.columns["start_ns"])


@dataclass
class ReadResult:
    """A reader's answer. ``epoch``: start_ns are nanoseconds since the Unix epoch (True), not (False), or judge by
    magnitude (None: an origin after 2001 is taken as a wall clock). A reader that knows the wall-clock time of its
    earliest event better (nsys) sets ``meta.start_unix_ns`` itself."""

    parts: list[Rows]
    meta: TraceMeta
    epoch: bool | None = False
    samples: Any = None  # a pandas frame of sampled hardware metrics (start_ns on the parts' clock), or None
