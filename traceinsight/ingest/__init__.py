"""Reading traces: detect the format from the content, hand the file to its reader, finish one Timeline.

Each format is one subpackage (``kineto``, ``xplane``, ``tf``, ``nsys``) declaring its record, an ``InputFormat``
(``ingest.input_format``): its name, ``sniff(path, head) -> bool`` (cheap: the first bytes or the folder layout), its
reader ``read(path, **options) -> ReadResult`` (columns and metadata, imported when a file of the format is read),
what its traces record and what the report says about it. ``FORMATS`` lists the records, once; every later floor
asks ``input_format(meta.source_format)``. Building the frame, the common clock, step numbers and the checks on the
result happen here, once for all of them. A new format is one new subpackage and one line in ``FORMATS``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from traceinsight.vocab.errors import OutOfMemoryError, TraceReadError, UnknownFormatError
from traceinsight.model import plausible
from traceinsight.model.timeline import (Timeline, assign_steps, assign_steps_columns, build_events, event_columns, events_frame, kind_is,
                        rebase, rebase_columns, validate, validate_columns)
from traceinsight.ingest import kineto, nsys, tf, xplane
from traceinsight.ingest.byteio import HEAD_BYTES, check_input, read_head
from traceinsight.ingest.heap import collector_paused, input_size, large_input
from traceinsight.ingest.input_format import UNKNOWN, InputFormat
from traceinsight.ingest.parts import ReadResult, Rows

__all__ = ["FORMATS", "HEAD_BYTES", "InputFormat", "ReadResult", "Rows", "assemble", "detect", "input_format", "load",
           "read_head", "supported"]

ProgressFn = Callable[[str], None]

#: The input formats, in the order detection tries them: the one list of what traceinsight reads (``--trace-format``
#: names, the supported inputs, the records every later floor asks). Detection imports only the sniffers; a run
#: imports the one reader its file needs.
FORMATS: dict[str, InputFormat] = {f.name: f for f in (
    nsys.FORMAT,
    xplane.FORMAT,
    kineto.FORMAT,  # before the logdir reader: a folder of kineto rank files is not a TensorBoard logdir
    tf.LOGDIR,
    tf.JSON,
)}


def supported() -> str:
    """The supported inputs, as the unknown-format error lists them."""
    return "; ".join(f.label for f in FORMATS.values())


def input_format(name: str) -> InputFormat:
    """The record of the format ``name`` (a ``TraceMeta.source_format``); ``UNKNOWN`` (nothing recorded, nothing to
    say) for a name no format declares, such as a timeline built by hand."""
    return FORMATS.get(name, UNKNOWN)


def detect(path: str | os.PathLike) -> str:
    """The format name of ``path`` (a key of FORMATS), judged by content, not only by extension."""
    p = Path(path)
    st = check_input(p)
    head = b""
    if p.is_file():
        if st.st_size == 0:
            raise TraceReadError(f"{p}: the file is empty")
        head = read_head(p)
    for fmt, reader in FORMATS.items():
        if reader.sniff(p, head):
            return fmt
    raise UnknownFormatError(f"{p}: not a trace format traceinsight reads. Supported: {supported()}")


def load(path: str | os.PathLike, *, format: str | None = None, progress: ProgressFn | None = None,
         max_bytes: int | None = None, **options: Any) -> Timeline:
    """Read any supported trace into a Timeline.

    ``format`` forces a reader (a key of FORMATS); otherwise it is detected from the content. ``max_bytes`` caps
    the size of a file or of what a gzip inflates to (default: half the available memory); past it reading stops
    with a TraceTooLargeError. Reader-specific ``options`` (e.g. ``run=`` for TensorBoard logdirs) pass through.
    """
    with collector_paused():
        return _load(Path(path), format, progress, max_bytes, options)


def _load(path: Path, format: str | None, progress: ProgressFn | None, max_bytes: int | None, options: dict[str, Any]) -> Timeline:
    check_input(path)
    fmt = format or detect(path)
    reader = FORMATS.get(fmt)
    if reader is None:
        raise UnknownFormatError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    try:
        # a gigabyte input reuses freed heap blocks instead of faulting in fresh pages per array (ingest/heap.py)
        with np.errstate(all="ignore"), large_input(input_size(path)):  # hostile numbers give NaN/inf that the readers drop
            result = reader.read(path, progress=progress, max_bytes=max_bytes, **options)
            if progress:
                progress("building the timeline")
            return assemble(result)
    except TraceReadError:
        raise
    except MemoryError:
        raise OutOfMemoryError(f"{path}: out of memory while reading the trace") from None
    except RecursionError:
        raise TraceReadError(f"{path}: cannot read {fmt} trace: nesting too deep") from None
    except Exception as exc:  # noqa: BLE001
        # Readers validate what they read; whatever still escapes on hostile input is reported in one line,
        # never as a traceback (the input is what is wrong, so it is an unreadable-trace error).
        raise TraceReadError(f"{path}: cannot read {fmt} trace: {type(exc).__name__}: {exc}") from None


#: String columns that must stay categoricals after parts with different categories are joined.
_CATEGORY_COLUMNS = ("kind", "name", "raw_name", "copy_kind", "category", "grid", "block", "input_shapes",
                     "thread_name", "stack", "input_types", "concrete_inputs")


def assemble(result: ReadResult) -> Timeline:
    """A reader's parts as one timeline: the frame, one clock starting at 0, step numbers, checked rows.

    One part (a single file: every rank of a job) is finished on its column arrays and the frame is built once
    (``_one_part``); several parts are joined as frames first (their categories differ) and finished on the frame."""
    meta = result.meta
    memory = []
    if len(result.parts) == 1:
        events, origin = _one_part(result.parts[0], meta, memory)
    else:
        events, origin = _joined_parts(result.parts, meta, memory)
    if meta.start_unix_ns is None and (result.epoch or (result.epoch is None and origin > 10**18)):
        meta.start_unix_ns = origin  # epoch ns after 2001: a real wall clock
    if events.empty:
        meta.warn("the trace holds no timed events")
    samples = result.samples
    if samples is not None and len(samples):
        samples = samples.copy()
        samples["start_ns"] = samples["start_ns"] - origin  # on the events' clock, 0 = the earliest event
    else:
        samples = None
    if memory:
        from traceinsight.ingest.memory_table import join

        return Timeline(events=events, meta=meta, memory=join(memory, events, origin, meta), samples=samples)
    return Timeline(events=events, meta=meta, samples=samples)


def _one_part(part: Rows, meta, memory: list) -> tuple[pd.DataFrame, int]:
    """The events frame of one part and the origin subtracted, worked on arrays: range checks, plausibility, the
    common clock and profiler steps each read and replace columns of a dict; the frame is built at the end. A part
    without step markers is finished on the frame (choosing a user range as the step reads it as a frame)."""
    cols = event_columns(part.columns, part.optional)
    if part.rank is not None:
        cols["rank"] = np.full(len(cols["start_ns"]), part.rank, dtype=np.int32)
    shift = rebase_columns(cols) if part.own_clock else 0
    if part.memory is not None:
        memory.append((part.memory, part.rank, shift))
    cols = validate_columns(cols, meta)
    cols = plausible.check_columns(cols, meta)
    origin = rebase_columns(cols)
    steps = np.flatnonzero(kind_is(cols["kind"], "step"))
    if not len(steps):
        events = _steps_without_markers(events_frame(cols), meta)
        return events, origin
    from traceinsight.model.steps import source_named

    meta.extra["steps_source"] = source_named(str(cols["name"][int(steps[0])]))
    assign_steps_columns(cols, meta)
    return events_frame(cols), origin


def _joined_parts(parts: list[Rows], meta, memory: list) -> tuple[pd.DataFrame, int]:
    """The events frame of several parts (each on the common clock, or its own one aligned at its first event)."""
    frames = []
    for part in parts:
        ev = build_events(part.columns, part.optional)
        if part.rank is not None:
            ev["rank"] = np.full(len(ev), part.rank, dtype=np.int32)
        shift = rebase(ev) if part.own_clock else 0
        if part.memory is not None:
            memory.append((part.memory, part.rank, shift))
        frames.append(ev)
    if not frames:
        frames = [build_events({"kind": [], "name": [], "start_ns": [], "dur_ns": []})]
    events = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    if len(frames) > 1:
        for col in _CATEGORY_COLUMNS:
            if col in events and not isinstance(events[col].dtype, pd.CategoricalDtype):
                events[col] = events[col].astype("category")
    events = validate(events, meta)
    events = plausible.check(events, meta)
    origin = rebase(events)
    if (events["kind"] == "step").any():
        from traceinsight.model.steps import source_of

        meta.extra["steps_source"] = source_of(events)
        assign_steps(events, meta)
    else:
        events = _steps_without_markers(events, meta)
    return events, origin


def _steps_without_markers(events: pd.DataFrame, meta) -> pd.DataFrame:
    """No ProfilerStep / TF steps: a repeated user range that covers the window becomes the steps, if there is one;
    else the iterations between the optimizer's own calls (``steps.optimizer_iterations``: step rows added), so
    every rule, the ledger and the steady-state model see the loop (without step rows every row keeps step -1,
    which build_events set). Returns the events (a new frame when rows were added)."""
    from traceinsight.model.steps import add_iterations, choose, mark, optimizer_iterations, source_of

    picked = choose(events)
    if picked is not None and mark(events, picked["marker"]):
        meta.extra["steps_source"] = picked
        assign_steps(events, meta)
        return events
    found = optimizer_iterations(events)
    if found is not None:
        events = add_iterations(events, found[0])
        meta.extra["steps_source"] = found[1]
        assign_steps(events, meta)
        return events
    meta.extra["steps_source"] = source_of(events)
    return events
