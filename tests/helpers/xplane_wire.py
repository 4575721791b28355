"""A deliberately separate protobuf reader for tests: raw wire format, no descriptors.

It lets tests count XSpace events and read xprof tool protos (overview_page.pb) without trusting the
schema module under test, so a wrong field number in the parser cannot also hide in the expected values.
"""

from __future__ import annotations

import struct


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7


def fields(buf: bytes):
    """Yield (field number, wire type, value) for one message; length-delimited values stay bytes."""
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            val, i = _varint(buf, i)
        elif wt == 1:
            val = buf[i:i + 8]
            i += 8
        elif wt == 2:
            ln, i = _varint(buf, i)
            val = buf[i:i + ln]
            i += ln
        elif wt == 5:
            val = buf[i:i + 4]
            i += 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
        yield num, wt, val


def first(buf: bytes, num: int):
    for f, _, v in fields(buf):
        if f == num:
            return v
    return None


def all_of(buf: bytes, num: int) -> list:
    return [v for f, _, v in fields(buf) if f == num]


def as_double(raw: bytes | None) -> float:
    return struct.unpack("<d", raw)[0] if raw else 0.0


def count_events(xspace: bytes) -> dict[str, dict[str, int]]:
    """plane name -> line name -> number of events (XSpace.planes=1, XPlane.name=2/lines=3, XLine.name=2/events=4)."""
    out: dict[str, dict[str, int]] = {}
    for plane in all_of(xspace, 1):
        pname = (first(plane, 2) or b"").decode()
        lines = out.setdefault(pname, {})
        for line in all_of(plane, 3):
            lname = (first(line, 2) or b"").decode()
            lines[lname] = lines.get(lname, 0) + len(all_of(line, 4))
    return out
