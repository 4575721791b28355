"""Kineto JSON through msgspec: the general decoder, and the reader of the document's header.

Typed structs name only the fields traceinsight uses, so msgspec skips everything else without materialising it.
This path takes any valid JSON (string timestamps, odd types: the "loose" structs), repairs files cut short by a
killed job, and gives the error messages for input that is not JSON. The native scanner hands its work here
whenever it declines a document, and uses ``decode_header`` for the keys outside the event array.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from ...errors import TraceReadError


class Args(msgspec.Struct, gc=False):
    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_legacy: Any = msgspec.field(default=None, name="external id")
    device: Any = None
    stream: Any = None
    nbytes: Any = msgspec.field(default=None, name="bytes")
    grid: Any = None
    block: Any = None
    registers: Any = msgspec.field(default=None, name="registers per thread")
    shared_mem: Any = msgspec.field(default=None, name="shared memory")
    occupancy: Any = msgspec.field(default=None, name="est. achieved occupancy %")
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")
    name: Any = None  # metadata events: process / thread name


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Any = 0
    tid: Any = 0
    ts: float | None = None
    dur: float | None = None
    args: Args | None = None


class LooseEvent(msgspec.Struct, gc=False):
    """For files whose timestamps are strings or other oddities (decoded slower, coerced later)."""

    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    pid: Any = 0
    tid: Any = 0
    ts: Any = None
    dur: Any = None
    args: Args | None = None


class Trace(msgspec.Struct):
    traceEvents: list[Event] = []
    deviceProperties: list[dict[str, Any]] = []
    distributedInfo: dict[str, Any] | None = None
    baseTimeNanoseconds: Any = None
    schemaVersion: Any = None
    displayTimeUnit: Any = None
    cupti_version: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    roctracer_version: Any = None
    hip_runtime_version: Any = None
    trace_id: Any = None
    traceinsight_sample: Any = None  # set by sample_traces/make_samples.py: what in the file was generated


class LooseTrace(Trace):
    traceEvents: list[LooseEvent] = []


_DECODERS = (msgspec.json.Decoder(Trace), msgspec.json.Decoder(LooseTrace))
_LIST_DECODERS = (msgspec.json.Decoder(list[Event]), msgspec.json.Decoder(list[LooseEvent]))


def is_bare_array(data: bytes) -> bool:
    """The bare-array Chrome-trace form (``[{...}, ...]``), judged without copying the document."""
    i = 0
    n = min(len(data), 4096)
    while i < n and data[i] in b" \t\r\n":
        i += 1
    return data[i : i + 1] == b"["


def decode(data: bytes, path: Path, warnings: list[str]) -> Trace:
    """The whole document; a truncated one is cut after its last complete event (with a warning)."""
    try:
        return _decode_any(data)
    except msgspec.ValidationError as exc:
        raise TraceReadError(f"{path}: not a PyTorch profiler trace ({exc})") from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        msg = str(exc)
        bad_utf8 = isinstance(exc, UnicodeDecodeError) or "utf-8" in msg.lower()
    if bad_utf8:
        fixed = data.decode("utf-8", errors="replace").encode("utf-8")
        warnings.append(bad_utf8_warning(path))
        try:
            return _decode_any(fixed)
        except msgspec.ValidationError as exc:
            raise TraceReadError(f"{path}: not a PyTorch profiler trace ({exc})") from None
        except msgspec.DecodeError:
            data = fixed
    recovered = _recover_truncated(data)
    if recovered is None:
        raise TraceReadError(f"{path}: not valid JSON ({msg})") from None
    trace, kept = recovered
    warnings.append(truncation_warning(path, kept))
    return trace


def decode_header(data: bytes, span: tuple[int, int], truncated: bool) -> Trace | None:
    """The document without its event array (``span``), for the metadata keys; None when it does not decode."""
    if is_bare_array(data):
        return Trace()
    start, end = span
    head = memoryview(data)[:start]
    tries = [] if truncated else [bytes(head) + b"[]" + bytes(memoryview(data)[end:])]
    tries.append(bytes(head) + b"[]}")  # cut short: keys after the events are lost, those before are kept
    for doc in tries:
        try:
            return _DECODERS[0].decode(doc)
        except (msgspec.DecodeError, msgspec.ValidationError):
            try:
                return _DECODERS[1].decode(doc)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
    return None


def bad_utf8_warning(path: Path) -> str:
    return f"{path.name}: the file has bytes that are not UTF-8; they were replaced by U+FFFD in names"


def truncation_warning(path: Path, kept: int) -> str:
    return (
        f"{path.name}: the JSON is truncated (the profiler was probably killed while writing); "
        f"{kept:,} events before the cut were recovered, the rest of the trace is lost"
    )


def _decode_any(data: bytes) -> Trace:
    bare = is_bare_array(data)
    try:
        return Trace(traceEvents=_LIST_DECODERS[0].decode(data)) if bare else _DECODERS[0].decode(data)
    except msgspec.ValidationError:
        return Trace(traceEvents=_LIST_DECODERS[1].decode(data)) if bare else _DECODERS[1].decode(data)


def _recover_truncated(data: bytes) -> tuple[Trace, int] | None:
    """Cut after the last complete event and close the JSON; kineto writes one event object per block."""
    start = data.find(b'"traceEvents"')
    bare = is_bare_array(data)
    if start < 0 and not bare:
        return None
    lo = (start if start >= 0 else 0) + 1
    end = len(data)
    for _ in range(200):
        cut = data.rfind(b"}", lo, end)
        if cut < 0:
            break
        candidate = data[: cut + 1] + (b"]" if bare else b"]}")
        try:
            trace = _decode_any(candidate)
            return trace, len(trace.traceEvents)
        except (msgspec.DecodeError, msgspec.ValidationError):
            end = cut
    # Cut before the first event: keep the header, with an empty event list.
    bracket = data.find(b"[", lo)
    if bracket < 0:
        return None
    try:
        trace = _decode_any(data[: bracket + 1] + (b"]" if bare else b"]}"))
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return trace, 0
