"""Kineto JSON through msgspec: the general decoder, and the reader of the document's header.

Typed structs name only the fields traceinsight uses, so msgspec skips everything else without materialising it.
This path takes any valid JSON (string timestamps, odd types: the "loose" structs), repairs files cut short by a
killed job, and gives the error messages for input that is not JSON. The native scanner hands its work here
whenever it declines a document, and uses ``decode_header`` for the keys outside the event array.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from traceinsight.vocab.errors import TraceReadError


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
    input_dims_legacy: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input dims")  # PyTorch 1.8's spelling
    input_types: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Concrete Inputs")
    name: Any = None  # metadata events: process / thread name
    # allocator records ([memory], [OutOfMemory] instant events)
    mem_addr: Any = msgspec.field(default=None, name="Addr")
    mem_bytes: Any = msgspec.field(default=None, name="Bytes")
    mem_total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    mem_total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    mem_device_type: Any = msgspec.field(default=None, name="Device Type")
    mem_device_id: Any = msgspec.field(default=None, name="Device Id")


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


_LEADING_WS = re.compile(rb"[ \t\r\n]*")


def is_bare_array(data: bytes) -> bool:
    """The bare-array Chrome-trace form (``[{...}, ...]``) after any amount of JSON whitespace, as the native scanner
    judges it; without copying the document."""
    i = _LEADING_WS.match(data).end()
    return data[i : i + 1] == b"["


#: The deepest nesting the native scanner takes (the top-level object or array is level 1; the C file's MAX_DEPTH
#: is the same number, checked by the tests). Past it the scanner declines and leaves the document to msgspec,
#: whose answer is then the answer of both paths: it decodes nesting a few hundred levels deeper and stops with a
#: RecursionError at the interpreter's limit, which becomes one clean error. Kineto writes at most 6 levels.
MAX_DEPTH = 256


def too_deep(path: Path) -> TraceReadError:
    return TraceReadError(f"{path}: not valid JSON (nested too deeply)")


#: A JSON number token too large for a double (``1e400``), as a value (after ``:``, ``,`` or ``[``).
_HUGE_NUMBER = re.compile(rb"(?<=[:\[,])(\s*)(-?)\d+(?:\.\d+)?[eE]\+?\d{3,}(?=\s*[,}\]])")


def clamp_huge_numbers(data: bytes) -> bytes:
    """The document with numbers beyond a double's range written as 1e300 (same sign): msgspec refuses them as a
    whole-document error, while they are only one event's bad field (dropped as out of range later, as the native
    scanner's infinity is). Only numbers outside strings: a name that reads "[1e400]" keeps its text."""
    data = bytes(data)
    huge = [m for m in _HUGE_NUMBER.finditer(data) if abs(float(m.group(0).strip())) == float("inf")]
    if not huge:
        return data
    inside = _inside_strings(data, [m.start() for m in huge])
    out, last = [], 0
    for m, in_string in zip(huge, inside):
        if not in_string:
            out += [data[last : m.start()], m.group(1) + m.group(2) + b"1e300"]
            last = m.end()
    return b"".join(out) + data[last:]


_SURROGATE = re.compile(rb"(\\+)u([dD][89a-fA-F][0-9a-fA-F]{2})")


def replace_lone_surrogates(data: bytes) -> tuple[bytes, int]:
    """The document with each ``\\uD800``-``\\uDFFF`` escape that is not half of a pair written as ``\\ufffd``, and
    how many there were: one bad escape in one name must not reject the whole trace (msgspec refuses the document).
    Escapes preceded by an even number of backslashes are text, not escapes, and stay."""
    data = bytes(data)
    found = [m for m in _SURROGATE.finditer(data) if len(m.group(1)) % 2 == 1]
    out, last, n, i = [], 0, 0, 0
    while i < len(found):
        m = found[i]
        high = int(m.group(2), 16) < 0xDC00
        nxt = found[i + 1] if i + 1 < len(found) else None
        if high and nxt is not None and nxt.start() == m.end() and len(nxt.group(1)) == 1 and int(nxt.group(2), 16) >= 0xDC00:
            i += 2  # a proper pair
            continue
        at = m.end(1) - 1  # the escaping backslash
        out += [data[last:at], b"\\ufffd"]
        last = m.end()
        n += 1
        i += 1
    return (b"".join(out) + data[last:], n) if n else (data, 0)


def decode(data: bytes, path: Path, warnings: list[str]) -> Trace:
    """The whole document; a truncated one is cut after its last complete event (with a warning). Nesting deeper
    than msgspec recurses is refused whatever else the document holds."""
    got = _decode_repaired(data, path, warnings)
    if isinstance(got, Trace):
        return got
    data, msg = got
    recovered = _recover_truncated(data, cut=_TRUNCATED in msg or _error_at_end(msg, data), path=path, warnings=warnings)
    if recovered is None:
        raise TraceReadError(f"{path}: not valid JSON ({msg})") from None
    trace, kept = recovered
    warnings.append(truncation_warning(path, kept))
    return trace


def _decode_repaired(data: bytes, path: Path, warnings: list[str] | None) -> Trace | tuple[bytes, str]:
    """The document decoded after the repairs that keep it whole, in whatever order its faults come: bytes that are
    not UTF-8 replaced (with a warning, once), numbers past a double's range clamped (once). Invalid JSON gives the
    (repaired) bytes and msgspec's message, for the caller to recover a cut or refuse; a document of the wrong
    shape raises."""
    clamped = replaced = unpaired = False
    while True:
        try:
            return _decode_any(data)
        except RecursionError:  # msgspec's nesting limit: no traceback, one line
            raise too_deep(path) from None
        except msgspec.ValidationError as exc:
            if clamped or "out of range" not in str(exc):
                raise TraceReadError(f"{path}: not a PyTorch profiler trace ({exc})") from None
            data, clamped = clamp_huge_numbers(data), True
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            msg = str(exc)
            if not unpaired and "surrogate" in msg:
                data, n = replace_lone_surrogates(data)
                unpaired = True
                if n:
                    if warnings is not None:
                        warnings.append(f"{path.name}: {n:,} lone UTF-16 surrogate escapes (half of a pair) in names were replaced by U+FFFD")
                    continue
            if replaced or not (isinstance(exc, UnicodeDecodeError) or "utf-8" in msg.lower()):
                return data, msg
            data, replaced = data.decode("utf-8", errors="replace").encode("utf-8"), True
            if warnings is not None:
                warnings.append(bad_utf8_warning(path))


def is_cut_short(data: bytes) -> bool:
    """Whether the document is valid JSON cut short (msgspec reports the end of the input), rather than damaged in
    the middle, which is an error on both paths and not a cut however its events look. Decoded as Raw: a syntax
    check that makes no objects."""
    try:
        msgspec.json.decode(data, type=msgspec.Raw)
    except msgspec.DecodeError as exc:
        return _TRUNCATED in str(exc) or _error_at_end(str(exc), data)
    except (msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        return False
    return False


_TRUNCATED = "truncated"
_AT_BYTE = re.compile(r"\(byte (\d+)\)$")


def _error_at_end(msg: str, data: bytes) -> bool:
    """Whether msgspec's error lies at the end of the input: a cut inside a token (``1.``, ``-``), which msgspec
    words as a malformed value rather than as truncation."""
    m = _AT_BYTE.search(msg)  # ("trailing characters" counts past the bytes it refuses: never a cut)
    return m is not None and "trailing" not in msg and int(m.group(1)) >= len(data)


def decode_header(data: bytes, span: tuple[int, int], truncated: bool) -> Trace | None:
    """The document without its event array (``span``), for the metadata keys; None when it does not decode."""
    if is_bare_array(data):
        return Trace()
    start, end = span
    head = bytes(data[:start])  # slices copy (an mmap too): no view may outlive the mapping, which is closed next
    tries = [] if truncated else [head + b"[]" + bytes(data[end:])]
    tries.append(head + b"[]}")  # cut short: keys after the events are lost, those before are kept
    for doc in tries:  # a header the typed decoders refuse (bad UTF-8, huge numbers) goes to the general path
        try:
            return _DECODERS[0].decode(doc)
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
            try:
                return _DECODERS[1].decode(doc)
            except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
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


_EVENT_BREAK = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")


def _recover_truncated(data: bytes, cut: bool, path: Path = Path("trace.json"),
                       warnings: list[str] | None = None) -> tuple[Trace, int] | None:
    """Cut after the last complete event and close the JSON: one structural pass over the bytes, one decode.

    ``last_complete_event`` finds the end of the last event object that closed before the cut, so every complete
    event is kept and the cost is linear in the file (the old way, re-decoding for each of the last ``}``, was
    quadratic and gave up after 200 tries).

    ``cut``: msgspec stopped at the end of the input. Otherwise the JSON goes wrong before the end, which is still a
    cut when the damage lies in the file's last, unfinished event: a killed writer's partial event followed by bytes
    that do not continue it (a restarted writer's output, a block of NULs from a crashed file system). That holds
    when the event array never closes, every element that closes before the end decodes (the damage is past the
    last one), and what follows the last of them holds no break between two events (``}, {``): damage that flips a
    quote reads the rest of the file as unclosed, but its later events still show their breaks. Damage anywhere
    else is an error."""
    bare = is_bare_array(data)
    start = 0 if bare else _events_key(data)
    if start is None:
        return None
    closer = b"]" if bare else b"]}"
    found = last_complete_event(data, start)
    if found is None:
        return None
    bracket, end, closes = found
    if not cut and (closes or _EVENT_BREAK.search(data, max(end, bracket) + 1)):
        return None
    candidate = data[: end + 1] + closer if end >= 0 else data[: bracket + 1] + closer
    try:
        trace = _decode_repaired(candidate, path, warnings)
    except TraceReadError:
        return None
    if not isinstance(trace, Trace):
        return None
    return trace, len(trace.traceEvents)


_KEY_BEFORE = re.compile(rb'"((?:[^"\\]|\\.){0,200})"$')


def _skip_ws_back(data: bytes, i: int) -> int:
    """The offset just past the last byte before ``i`` that is not JSON whitespace."""
    while i > 0 and data[i - 1] in b" \t\r\n":
        i -= 1
    return i


def _events_key(data: bytes) -> int | None:
    """Offset of the top-level ``traceEvents`` array's ``[``: the first bracket opened at depth 2 whose key reads
    ``traceEvents`` (escapes decoded, as the decoders read keys), never a same-named key nested in the header."""
    for pos, br, ch, d in _brackets(data):
        for i in np.flatnonzero((ch == 91) & (d == 2)).tolist():
            at = pos + int(br[i])
            colon = _skip_ws_back(data, at) - 1
            if colon < 0 or data[colon] != 58:  # ':'
                continue
            key_end = _skip_ws_back(data, colon)
            m = _KEY_BEFORE.search(bytes(data[max(0, key_end - 1300): key_end]))
            if m is None:
                continue
            try:
                if msgspec.json.decode(b'"' + m.group(1) + b'"') == "traceEvents":
                    return at
            except (msgspec.DecodeError, UnicodeDecodeError):
                continue
    return None


#: Bytes scanned per numpy step by ``last_complete_event`` (bounded memory whatever the file size).
_STEP = 1 << 26

_QUOTE, _BACKSLASH = 34, 92
_OPENERS, _CLOSERS = (123, 91), (125, 93)


def _brackets(data: bytes):
    """Per step of ``_STEP`` bytes: (offset of the step, positions of its brackets outside strings, the bracket
    bytes, the depth after each). A bracket lies outside strings where the count of real quotes before it, added
    to the state the step began in, is even; a running sum gives each bracket's depth."""
    depth = 0
    for pos, chunk, quotes, in_string in _real_quotes(data):
        br = np.flatnonzero((chunk == 123) | (chunk == 91) | (chunk == 125) | (chunk == 93))
        br = br[(np.searchsorted(quotes, br) & 1) == int(in_string)]
        ch = chunk[br]
        is_close = (ch == 125) | (ch == 93)
        d = depth + np.cumsum(np.where(is_close, -1, 1))
        yield pos, br, ch, d
        if len(d):
            depth = int(d[-1])


def _inside_strings(data: bytes, positions: list[int]) -> list[bool]:
    """For each offset (of a byte that is not a quote, in increasing order): whether it lies inside a string."""
    out = []
    want = iter(positions)
    p = next(want, None)
    for pos, chunk, quotes, in_string in _real_quotes(data):
        while p is not None and p < pos + len(chunk):
            out.append(bool(np.searchsorted(quotes, p - pos) & 1) != in_string)
            p = next(want, None)
        if p is None:
            break
    return out


def _real_quotes(data: bytes):
    """Per step of ``_STEP`` bytes: (offset, the bytes, the sorted offsets in the step of its real quotes, whether
    the step began inside a string). A quote is real after an even run of backslashes. Positions and binary
    searches, not a running parity over every byte: numpy's xor-accumulate is an element-at-a-time loop."""
    buf = np.frombuffer(data, dtype=np.uint8)
    n = len(buf)
    in_string = False
    carry = 0  # length of the backslash run that ends the previous step
    for pos in range(0, n, _STEP):
        chunk = buf[pos : pos + _STEP]
        m = len(chunk)
        qmask = chunk == _QUOTE
        is_slash = chunk == _BACKSLASH
        slashes = np.flatnonzero(is_slash) if is_slash.any() or carry else np.empty(0, dtype=np.int64)
        run_start = np.empty(0, dtype=np.int64)
        if len(slashes) or carry:
            # quotes right after a backslash: real only after an even run of backslashes
            cand = np.flatnonzero(qmask[1:] & is_slash[:-1]) + 1
            runs = np.zeros(len(cand), dtype=np.int64)
            if len(slashes):
                first = np.ones(len(slashes), dtype=bool)
                first[1:] = slashes[1:] != slashes[:-1] + 1
                run_start = np.maximum.accumulate(np.where(first, slashes, -1))
                k = np.searchsorted(slashes, cand - 1)
                runs = cand - run_start[k] + np.where(run_start[k] == 0, carry, 0)
            if carry and qmask[0]:
                cand = np.append(0, cand)
                runs = np.append(carry, runs)
            qmask[cand[runs % 2 == 1]] = False
        if m and is_slash[-1]:
            rs = int(run_start[-1])
            carry = m - rs + (carry if rs == 0 else 0)
        else:
            carry = 0
        quotes = np.flatnonzero(qmask)
        yield pos, chunk, quotes, in_string
        in_string = in_string != bool(len(quotes) & 1)


def last_complete_event(data: bytes, start: int) -> tuple[int, int, bool] | None:
    """(offset of the event array's ``[``, offset of the ``}`` closing its last complete element or -1 when none
    closed, whether the array itself closes), for the array that follows ``start``; None when there is no array.

    Vectorised, and over the few bytes that matter only: the positions of quotes, backslashes and brackets. A quote
    is real after an even run of backslashes; a bracket lies outside strings when an even number of real quotes
    precedes it; a running sum gives each bracket's depth, and an element of the array closes where a closing
    bracket brings the depth back to that of the array's inside."""
    array_depth = None
    bracket = last_end = -1
    for pos, br, ch, d in _brackets(data):
        is_close = (ch == 125) | (ch == 93)
        begin = None
        if array_depth is None:
            opens = np.flatnonzero((br >= start - pos) & (ch == 91))
            if len(opens):
                i0 = int(opens[0])
                bracket, array_depth, begin = pos + int(br[i0]), int(d[i0]), i0 + 1
        else:
            begin = 0
        if begin is not None:
            cl, dd, bb = is_close[begin:], d[begin:], br[begin:]
            ends = np.flatnonzero(cl & (dd == array_depth))
            done = np.flatnonzero(cl & (dd < array_depth))
            if len(done):  # the array itself closed: the cut (or the damage) is after it
                ends = ends[ends < done[0]]
                if len(ends):
                    last_end = pos + int(bb[ends[-1]])
                return bracket, last_end, True
            if len(ends):
                last_end = pos + int(bb[ends[-1]])
    if array_depth is None:
        return None
    return bracket, last_end, False
