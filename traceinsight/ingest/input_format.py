"""The record of one input format: how it is recognised and read, what its traces record, and what the report says
about it. Each format declares its record in its own folder (``ingest/<fmt>/__init__.py``, importing nothing heavy)
and ``ingest.FORMATS`` lists them, once; every later floor asks the record a question (``input_format(name).shapes``)
instead of comparing format names, so a new format is its folder plus one line in that list.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class InputFormat:
    """One input format. ``name`` is what ``--trace-format`` takes and what its reader writes as
    ``TraceMeta.source_format`` (a format that only finds files of others, like a TensorBoard logdir, leaves theirs)."""

    name: str
    #: The format in the list of supported inputs (the unknown-format error): what it is and which files it takes.
    label: str
    #: Cheap: the first bytes or the folder layout (``(path, head) -> bool``); detection tries every format in order.
    sniff: Callable[[Path, bytes], bool]
    #: ``"module:function"``, imported only when a file of this format is read (``(path, **options) -> ReadResult``).
    reader: str

    # --- what a trace of this format records: the questions later floors ask ---------------------------------------
    #: The frameworks whose profiler writes it, the first unless the names in the trace show another (one: always
    #: that one, whatever ran under it; none: any program, told by its names: ``derive.framework``).
    frameworks: tuple[str, ...] = ()
    #: Framework ops carry their input shapes when the user asks for them: FLOPs per op are counted from shapes.
    shapes: bool = False
    #: Kernels carry the compiler's own per-op FLOPs and bytes (``op_flops``, ``op_bytes``): whose, in the words the
    #: efficiency view's coverage uses ("XLA's per-op costs"); None: they do not.
    op_costs: str | None = None

    # --- what the report says about it ------------------------------------------------------------------------------
    #: How to record a steady-state window with this profiler, whatever the framework (None: the framework's way).
    record_steady: str | None = None
    #: The efficiency note when the trace gives no FLOPs per op and no shapes (None: nothing to say).
    no_flops: str | None = None
    #: How to record shapes, in the sentence that stands where a withheld MFU would.
    record_shapes: str = "record shapes"
    #: How to record Python stacks, where the format can hold them (None: it cannot; no hint is given).
    record_stacks: str | None = None

    @property
    def read(self) -> Callable[..., Any]:
        """The reader function (its module is imported now)."""
        module, _, function = self.reader.partition(":")
        return getattr(importlib.import_module(module), function)


def _never(path: Path, head: bytes) -> bool:
    return False


def _unreadable(path: Any, **options: Any) -> Any:  # pragma: no cover - UNKNOWN is never in FORMATS
    raise NotImplementedError("no reader for an unknown format")


#: What is known of a format no record names (a timeline built by hand, a name from elsewhere): nothing recorded,
#: nothing to say.
UNKNOWN = InputFormat(name="unknown", label="", sniff=_never, reader=f"{__name__}:_unreadable")
