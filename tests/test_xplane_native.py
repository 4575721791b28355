"""The C XSpace walker (xplane/_wire_scan.c) against the upb + numpy path it speeds up, and on hostile bytes.

Both paths must give the same timeline for every capture: the C walker is only a faster way to the same columns.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import subprocess
import sys

import pandas as pd
import pytest

import traceinsight
from traceinsight.vocab.errors import TraceReadError
from traceinsight.vocab import native as native_switch
from traceinsight.ingest.xplane import space as xplane_space

from .conftest import corpus_file, corpus_glob

XPLANES = corpus_glob("tf/**/*.xplane.pb")


def _built() -> bool:
    try:
        from traceinsight.ingest.xplane import _wire_scan  # noqa: F401
    except ImportError:
        return False
    return True


native = pytest.mark.skipif(not _built(), reason="the _wire_scan extension is not built "
                                                  "(python setup.py build_ext --inplace)")


def _load(path, use_native: bool, monkeypatch):
    if use_native:
        monkeypatch.delenv(native_switch.PURE_ENV, raising=False)
    else:
        monkeypatch.setenv(native_switch.PURE_ENV, "1")
    assert (xplane_space.native_scanner() is not None) == use_native
    return traceinsight.load(path)


def _assert_same(a, b) -> None:
    pd.testing.assert_frame_equal(a.events, b.events)
    assert dataclasses.asdict(a.meta) == dataclasses.asdict(b.meta)


@native
@pytest.mark.parametrize("rel", XPLANES)
def test_native_matches_numpy(rel, monkeypatch):
    path = corpus_file(rel)
    fast = _load(path, True, monkeypatch)
    slow = _load(path, False, monkeypatch)
    assert len(fast.events)
    _assert_same(fast, slow)


@native
def test_native_load_needs_no_protobuf():
    """The C walker reads the metadata too: a load neither imports protobuf nor builds message classes."""
    path = corpus_file("tf/e4040-t4-keras-cnn/train/plugins/profile/2022_11_04_21_26_12/instance-ecbm.xplane.pb")
    code = ("import sys, traceinsight; traceinsight.load(sys.argv[1]); "
            "print(any(m.startswith('google.protobuf') for m in sys.modules))")
    env = {k: v for k, v in os.environ.items() if k != native_switch.PURE_ENV}
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "False"


def test_pure_python_switch(monkeypatch):
    monkeypatch.setenv(native_switch.PURE_ENV, "1")
    assert xplane_space.native_scanner() is None


# -- a hand-written XSpace: layouts serializers do not write, but the format allows ---------------------------------


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    return bytes(out + bytes([v]))


def _int(field: int, v: int) -> bytes:
    return _varint(field << 3) + _varint(v)


def _msg(field: int, payload: bytes | str) -> bytes:
    payload = payload.encode() if isinstance(payload, str) else payload
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _double(field: int, v: float) -> bytes:
    return _varint(field << 3 | 1) + struct.pack("<d", v)


def _entry(field: int, key: int, name: str) -> bytes:
    """A metadata map entry {key, value: {id, name}}."""
    return _msg(field, _int(1, key) + _msg(2, _int(1, key) + _msg(2, name)))


def _space(events: list[bytes], stream_events: list[bytes] = ()) -> bytes:
    host = (_msg(2, "/host:CPU") + _entry(4, 1, "train") + _entry(4, 2, "op:MatMul") + _entry(4, 2, "op2:MatMul")
            + _entry(4, 3, "cudaLaunchKernel") + _entry(5, 1, "correlation_id") + _entry(5, 2, "step_num")
            + _entry(5, 3, "kernel_details") + _entry(5, 4, "regs:12 grid:2,1,1 block:64,1,1")
            + _msg(3, _int(1, 5) + _msg(2, "thread") + _int(3, 1_000) + b"".join(_msg(4, e) for e in events)))
    gpu = (_msg(2, "/device:GPU:0") + _entry(4, 7, "gemm_kernel") + _entry(5, 9, "correlation_id")
           + _entry(5, 8, "kernel_details") + _msg(6, _int(1, 10) + _int(3, 7))  # a plane stat without metadata
           + _msg(3, _msg(2, "Stream #3(Compute)") + _int(3, 2_000) + b"".join(_msg(4, e) for e in stream_events)))
    env = _msg(2, "Task Environment") + _entry(5, 1, "profile_start_time") + _msg(6, _int(1, 1) + _int(3, 10**18))
    return _msg(1, env) + _msg(1, host) + _msg(1, gpu) + _msg(3, "a warning") + _msg(4, "host-a")


ODD_EVENTS = [
    # fields in reverse order, and an unknown varint and fixed32 field
    _msg(4, _int(3, 5) + _int(1, 2)) + _int(3, 9_000) + _int(2, 4_000_000) + _int(1, 1)
    + _int(9, 77) + _varint(10 << 3 | 5) + b"abcd",
    # num_occurrences after offset_ps clears it (oneof); a stat with two values: the last one set counts
    _int(1, 2) + _int(2, 5_000_000) + _int(5, 3) + _int(3, 1_500) + _msg(4, _int(1, 1) + _double(2, 1.5) + _int(4, 42)),
    # the same stat twice: the last wins; a ref value; an unknown stat; a negative offset
    _int(1, 3) + _int(2, -2_000) + _int(3, 800) + _msg(4, _int(1, 1) + _int(3, 11)) + _msg(4, _int(1, 1) + _int(3, 12))
    + _msg(4, _int(1, 3) + _int(7, 4)) + _msg(4, _int(1, 99) + _msg(5, "ignored")),
    # an id missing from the metadata, no duration, stats with no value and a string step number
    _int(1, 42) + _int(2, 7_000_000) + _msg(4, _int(1, 1)) + _msg(4, _int(1, 2) + _msg(5, "7")),
]
STREAM_EVENTS = [
    _int(1, 7) + _int(2, 4_100_000) + _int(3, 2_000) + _msg(4, _int(1, 9) + _int(3, 12))
    + _msg(4, _int(1, 8) + _msg(5, "regs:32 grid:4,1,1 block:128,1,1 occ_pct:50.0")),
    _int(1, 7) + _int(2, 4_300_000) + _int(3, 2_000)
    + _msg(4, _int(1, 8) + _msg(6, b"regs:16 grid:1,1,1 block:32,1,1")),  # bytes_value
]


@native
def test_odd_layouts_decode_like_upb(tmp_path, monkeypatch):
    path = tmp_path / "odd.xplane.pb"
    path.write_bytes(_space(ODD_EVENTS, STREAM_EVENTS))
    fast = _load(path, True, monkeypatch)
    slow = _load(path, False, monkeypatch)
    _assert_same(fast, slow)
    ev = fast.events
    assert len(ev) == 6 and "a warning" in " ".join(fast.meta.warnings)
    assert fast.meta.start_unix_ns == 10**18 + 1_000 - 2  # line timestamp + the negative offset
    assert ev["name"].astype(str).tolist() == ["train 5", "op2:MatMul", "cudaLaunchKernel", "", "gemm_kernel",
                                                "gemm_kernel"]  # a map key written twice: the last entry names it
    assert ev["correlation"].tolist() == [-1, 42, 12, -1, 12, -1]  # the last value set, and the last stat, win
    assert ev["grid"].astype(str).tolist()[4:] == ["4,1,1", "1,1,1"]  # str and bytes kernel_details


@pytest.mark.parametrize("use_native", [pytest.param(True, marks=native), False])
@pytest.mark.parametrize("case", ["varint", "stat", "event", "line", "truncated", "garbage"])
def test_corrupt_bytes_clear_error(tmp_path, monkeypatch, case, use_native):
    good = _space(ODD_EVENTS, STREAM_EVENTS)
    data = {
        "varint": _space([_int(1, 2) + b"\x10" + b"\xff" * 11]),  # an 11-byte varint
        "stat": _space([_int(1, 3) + _msg(4, _int(1, 1) + _varint(5 << 3 | 2) + _varint(50) + b"ab")]),
        "event": _space([_int(1, 3) + _varint(4 << 3 | 2) + _varint(1 << 40)]),  # length past the end
        "line": good.replace(_msg(2, "thread"), _varint(2 << 3 | 2) + _varint(500) + b"thread"),
        "truncated": good[: len(good) * 2 // 3],
        "garbage": b"\x0a\xff\xff\xff\xff\x0f" + b"\x00" * 40,
    }[case]
    path = tmp_path / "bad.xplane.pb"
    path.write_bytes(data)
    with pytest.raises(TraceReadError) as info:
        _load(path, use_native, monkeypatch)
    msg = str(info.value)
    assert "\n" not in msg and "bad.xplane.pb" in msg and "XSpace" in msg


@native
@pytest.mark.parametrize("cut", [0.05, 0.3, 0.5, 0.7, 0.95])
def test_truncated_corpus_file_native(tmp_path, monkeypatch, cut):
    data = corpus_file("tf/tensorflow-profiler-demo/GPU-multi-worker/34.83.195.179_6003.xplane.pb").read_bytes()
    path = tmp_path / "cut.xplane.pb"
    path.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(TraceReadError) as info:
        _load(path, True, monkeypatch)
    assert "\n" not in str(info.value) and "cut.xplane.pb" in str(info.value)


@native
def test_scan_events_checks_its_arguments():
    from traceinsight.ingest.xplane import _wire_scan as scan

    span = struct.pack("<qq", 0, 2)
    with pytest.raises(ValueError):
        scan.scan_events(b"\x22\x00", struct.pack("<qq", 0, 9), [b""], 1)  # span past the buffer
    with pytest.raises(ValueError):
        scan.scan_events(b"\x22\x00", span, [b"abc"], 1)  # a wanted table that is not (id, key) pairs
    with pytest.raises(ValueError):
        scan.scan_events(b"\x22\x00", span, [b""], 5)  # fewer events than announced
    cols, stats, strings = scan.scan_events(b"\x22\x00", span, [b""], 1)
    assert cols == bytes(24) and stats == b"" and strings == []


def test_native_walker_is_built_in_ci():
    """CI has a C compiler: there the native tests must run, not skip."""
    if not _built() and os.environ.get("CI"):
        pytest.fail("the _wire_scan extension was not built (is a C compiler installed?)")


# -- native = pure on the wire format's corners (issue 14): both paths follow upb, fault for fault --------------------


def _both(tmp_path, monkeypatch, data: bytes, name: str = "t.xplane.pb"):
    """Load ``data`` on both paths; they must agree on the frame, the metadata and any error message."""
    path = tmp_path / name
    path.write_bytes(data)
    out = []
    for use_native in (True, False):
        try:
            out.append(_load(path, use_native, monkeypatch))
        except TraceReadError as exc:
            out.append(str(exc))
    fast, slow = out
    assert isinstance(fast, str) == isinstance(slow, str), (fast, slow)
    if isinstance(fast, str):
        assert fast == slow
        assert "\n" not in fast
    else:
        _assert_same(fast, slow)
    return fast


def _group(field: int, inner: bytes = b"", depth: int = 1) -> bytes:
    """``depth`` nested groups (wire types 3/4) of one field number around ``inner``."""
    return _varint(field << 3 | 3) * depth + inner + _varint(field << 3 | 4) * depth


def _overlong(v: int, size: int) -> bytes:
    """``v`` as a varint padded to ``size`` bytes (valid protobuf: upb reads it as ``v``)."""
    b = _varint(v)
    return b[:-1] + bytes([b[-1] | 0x80]) + b"\x80" * (size - len(b) - 1) + b"\x00" if size > len(b) else b


def _unknown_everywhere(filler: bytes) -> bytes:
    """The odd capture with ``filler`` (unknown fields) added to the space, every plane, line, event and stat."""
    events = [e + filler for e in ODD_EVENTS[1:]]
    stream = [e.replace(_msg(4, _int(1, 9) + _int(3, 12)), _msg(4, _int(1, 9) + _int(3, 12) + filler))
              for e in STREAM_EVENTS]
    space = _space(events, stream)
    # the filler at the end of each plane and each line (those are the last fields of their messages)
    out = bytearray()
    for f, wt, val in _fields(space):
        if f == 1:
            plane = b""
            for pf, pwt, pval in _fields(val):
                plane += _msg(pf, pval + filler) if pf == 3 else _raw(pf, pwt, pval)
            out += _msg(1, plane + filler)
        else:
            out += _raw(f, wt, val)
    return bytes(out) + filler


def _fields(buf: bytes):
    from .helpers.xplane_wire import fields

    return fields(buf)


def _raw(f: int, wt: int, val) -> bytes:
    if wt == 0:
        return _int(f, val)
    if wt == 2:
        return _msg(f, val)
    return _varint(f << 3 | wt) + val


@native
@pytest.mark.parametrize("filler", [
    _group(19, _int(1, 5) + _msg(2, b"\xff") + _group(20)),  # a group holding varint, bytes and a group
    _group(19, _varint(0 << 3 | 0) + b"\x01" + _varint(0 << 3 | 3) + _varint(0 << 3 | 4)),  # field 0 inside a group
    _group(19, depth=90),
    _varint(2**29 - 1 << 3) + b"\x05",  # the highest field number
    _varint(13 << 3 | 5) + b"abcd" + _varint(14 << 3 | 1) + bytes(8),
], ids=["group", "field0-in-group", "deep-groups", "max-field", "fixed"])
def test_unknown_fields_everywhere_are_skipped(tmp_path, monkeypatch, filler):
    """Unknown fields, groups among them, anywhere in the capture: both paths skip them and read the same events."""
    plain = _both(tmp_path, monkeypatch, _unknown_everywhere(b""), "plain.xplane.pb")
    odd = _both(tmp_path, monkeypatch, _unknown_everywhere(filler))
    assert not isinstance(odd, str), odd
    pd.testing.assert_frame_equal(plain.events, odd.events)


WIRE = "not a valid XSpace protobuf (truncated or corrupt wire format)"
UTF8 = "not a valid XSpace protobuf (a string field is not valid UTF-8)"
EVENT = "not a valid XSpace protobuf (an event is truncated or corrupt)"


def _plane_with(extra: bytes, line_extra: bytes = b"", event_extra: bytes = b"") -> bytes:
    return _msg(1, _msg(2, "/host:CPU") + _entry(4, 1, "train") + extra
                + _msg(3, _msg(2, "thread") + _int(3, 1_000) + line_extra
                       + _msg(4, _int(1, 1) + _int(2, 5_000) + _int(3, 900) + event_extra)))


@native
@pytest.mark.parametrize("data,expect", [
    # groups: nesting to upb's limit of 100 levels (a plane has 99 left, an event 97), and past it
    (_plane_with(_group(9, depth=99)), None),
    (_plane_with(_group(9, depth=100)), WIRE),
    (_plane_with(b"", event_extra=_group(9, depth=97)), None),
    (_plane_with(b"", event_extra=_group(9, depth=98)), EVENT),
    (_plane_with(_varint(9 << 3 | 3) + _varint(8 << 3 | 4)), WIRE),  # a group closed by another field's key
    (_plane_with(_varint(9 << 3 | 4)), WIRE),  # an end-group key with no group
    (_plane_with(b"", event_extra=_varint(9 << 3 | 3)), EVENT),  # a group left open
    (_plane_with(b"\x00\x01"), WIRE),  # field number 0 outside a group
    (_plane_with(b"", event_extra=_varint(9 << 3 | 6) + b"\x01"), EVENT),  # wire type 6
    # over-long keys and lengths: upb reads a key or a length of at most 5 bytes (a key within 32 bits)
    (_plane_with(_overlong(9 << 3, 5) + b"\x01"), None),
    (_plane_with(_overlong(9 << 3, 6) + b"\x01"), WIRE),
    (_plane_with(b"", event_extra=_overlong(9 << 3, 5) + b"\x01"), None),
    (_plane_with(b"", event_extra=_overlong(9 << 3, 6) + b"\x01"), EVENT),
    (_plane_with(b"", event_extra=_varint(2**29 << 3) + b"\x01"), EVENT),  # a field number past 2**29 - 1
    (_plane_with(_varint(9 << 3 | 2) + _overlong(1, 5) + b"x"), None),
    (_plane_with(_varint(9 << 3 | 2) + _overlong(1, 6) + b"x"), WIRE),
    (_plane_with(b"", event_extra=_varint(4 << 3 | 2) + _overlong(2, 5) + _int(1, 1)), None),
    (_plane_with(b"", event_extra=_varint(4 << 3 | 2) + _overlong(2, 6) + _int(1, 1)), EVENT),
    (_plane_with(b"", event_extra=_varint(9 << 3) + b"\xff" * 9 + b"\x7f"), None),  # a 10-byte value, bits past 64
    (_plane_with(b"", event_extra=_varint(9 << 3) + b"\xff" * 10 + b"\x01"), EVENT),  # an 11-byte value
    # a stat the reader does not keep is still checked, on both paths
    (_plane_with(_entry(5, 4, "correlation_id"), event_extra=_msg(4, _int(1, 3) + b"\x2a\x05ab")), EVENT),
], ids=["groups-99", "groups-100", "event-groups-97", "event-groups-98", "group-mismatch", "stray-end",
        "open-group", "field-0", "wire-type-6", "key-5-bytes", "key-6-bytes", "event-key-5-bytes", "event-key-6-bytes",
        "event-field-2^29", "length-5-bytes", "length-6-bytes", "event-length-5-bytes", "event-length-6-bytes",
        "value-10-bytes", "value-11-bytes", "unkept-stat-checked"])
def test_wire_corners_agree(tmp_path, monkeypatch, data, expect):
    from traceinsight.ingest.xplane.schema import messages

    out = _both(tmp_path, monkeypatch, data)
    if expect is None:
        assert not isinstance(out, str), out
        assert out.events["name"].astype(str).tolist() == ["train"]
        messages()["XSpace"].FromString(data)  # the full upb schema reads it too
    else:
        assert isinstance(out, str) and out.endswith(expect), out


@native
@pytest.mark.parametrize("where", ["space", "plane", "line", "event_md", "event_md_display", "stat_md_description",
                                   "md_stat", "plane_stat"])
def test_bad_utf8_in_any_string_field(tmp_path, monkeypatch, where):
    """upb checks every proto3 string it decodes, the ones the reader never uses too; so does the C walker, and a
    later wire fault does not change which fault is reported."""
    bad = b"ok\xed\xa0\x80"  # a UTF-16 surrogate: Python's decoder and upb both refuse it
    plane = {
        "plane": _msg(2, bad),
        "line": _msg(3, _msg(2, bad)),
        "event_md": _msg(4, _int(1, 1) + _msg(2, _msg(2, bad))),
        "event_md_display": _msg(4, _int(1, 1) + _msg(2, _msg(2, "x") + _msg(4, bad))),
        "stat_md_description": _msg(5, _int(1, 1) + _msg(2, _msg(2, "x") + _msg(3, bad))),
        "md_stat": _msg(4, _int(1, 1) + _msg(2, _msg(5, _int(1, 1) + _msg(5, bad) + _int(4, 3)))),
        "plane_stat": _msg(6, _int(1, 1) + _msg(5, bad) + _int(4, 3)),
    }.get(where, b"")
    data = _msg(1, _msg(2, "/host:CPU") + plane) + (_msg(2, bad) if where == "space" else b"")
    assert _both(tmp_path, monkeypatch, data + b"\x0a\x05ab").endswith(UTF8)  # then a truncated plane


@native
def test_map_entry_with_unknown_fields_is_left_out(tmp_path, monkeypatch):
    """upb keeps a metadata map entry holding any field besides key and value among the plane's unknown fields, not
    in the map: the C walker leaves it out too, so names and the name categories agree."""
    entries = (_entry(4, 1, "train") + _msg(4, _int(1, 2) + _msg(2, _msg(2, "hidden")) + _int(9, 1))
               + _msg(4, _int(1, 3) + _msg(2, _msg(2, "hidden2")) + _group(9))
               + _msg(4, _int(1, 4) + _int(2, 7))  # a value of the wrong wire type
               + _msg(4, _int(1, 5) + _msg(2, _msg(2, "kept") + _int(9, 1))))  # unknown inside the value: kept
    data = _msg(1, _msg(2, "/host:CPU") + entries + _msg(3, _msg(2, "t") + b"".join(
        _msg(4, _int(1, i) + _int(2, 1000 * i) + _int(3, 10)) for i in (1, 2, 3, 4, 5))))
    tl = _both(tmp_path, monkeypatch, data)
    assert tl.events["name"].astype(str).tolist() == ["train", "", "", "", "kept"]
    assert list(tl.events["raw_name"].cat.categories) == ["train", "kept", ""]


@native
@pytest.mark.parametrize("value", [_msg(5, "abc"), _msg(5, "7x"), _double(2, float("nan")), _double(2, float("inf")),
                                   _double(2, 1e300), _int(3, 2**64 - 1), _msg(6, b"\xff\xfe"), _msg(5, "9" * 40)])
def test_hostile_stat_values_drop_the_stat_not_the_trace(tmp_path, monkeypatch, value):
    """A step number or correlation id that is no usable whole number counts as absent; memcpy details that are
    not UTF-8 are read with replacement characters. The trace loads, the same on both paths."""
    host = (_msg(2, "/host:CPU") + _entry(4, 1, "train") + _entry(4, 2, "cudaLaunchKernel")
            + _entry(5, 1, "step_num") + _entry(5, 2, "correlation_id") + _entry(5, 3, "memcpy_details")
            + _msg(3, _msg(2, "thread") + _int(3, 1_000)
                   + _msg(4, _int(1, 1) + _int(2, 0) + _int(3, 5_000_000) + _msg(4, _int(1, 1) + value))
                   + _msg(4, _int(1, 2) + _int(2, 10_000) + _int(3, 900) + _msg(4, _int(1, 2) + value)
                          + _msg(4, _int(1, 3) + value))))
    tl = _both(tmp_path, monkeypatch, _msg(1, host))
    ev = tl.events.sort_values("start_ns")
    assert ev["correlation"].tolist() == [-1, -1]
    assert ev["name"].astype(str).tolist() == ["train", "cudaLaunchKernel"]
    assert ev["bytes"].tolist() == [0, 0]


# A structure-aware generator: XSpaces with the layouts serializers never write but the format allows (fields
# shuffled, repeated, over-long varints, unknown fields and groups), and now and then a fault; the property test
# below holds native = pure on all of them, and never refuses what the full upb schema reads.

class _OddSpace:
    NAMES = ["train", "op:MatMul", "cudaLaunchKernel", "gemm", "MemcpyH2D", "memset32", "train_step", "x", "", "test"]
    STATS = ["correlation_id", "kernel_details", "memcpy_details", "step_num", "profile_start_time", "other",
             "compute_cap_major", "device_vendor"]
    LINES = ["thread", "Stream #3(Compute)", "Steps", "XLA Ops", "Stream #4(MemcpyH2D)", "_counters_", ""]
    PLANES = ["Task Environment", "/host:CPU", "/device:GPU:0", "/device:GPU:1", "/host:python", "other"]

    def __init__(self, rng, odd: float, bad: float) -> None:
        self.rng, self.odd, self.bad = rng, odd, bad

    def p(self, x: float) -> bool:
        return self.rng.random() < x

    def varint(self, v: int, max_len: int = 10) -> bytes:
        b = _varint(v)
        if self.p(self.odd / 3):
            room = max_len - len(b) + (1 if self.p(self.bad) else 0)
            if room > 0:
                b = _overlong(v, len(b) + self.rng.randint(1, room))
        return b

    def key(self, f: int, wt: int) -> bytes:
        return self.varint(f << 3 | wt, 5)

    def int_(self, f: int, v: int) -> bytes:
        return self.key(f, 0) + self.varint(v)

    def msg(self, f: int, payload: bytes) -> bytes:
        return self.key(f, 2) + self.varint(len(payload), 5) + payload

    def string(self, f: int, text: str) -> bytes:
        b = text.encode()
        if self.p(self.bad):
            b += self.rng.choice([b"\xff", b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\x80"])
        return self.msg(f, b)

    def noise(self, depth: int = 4) -> bytes:
        r, rng = self.rng.random(), self.rng
        f = rng.choice([12, 13, 19, 100, 2047, (1 << 29) - 1] + list(range(1, 12)))
        if r < 0.25:
            return self.key(f, 0) + self.varint(rng.choice([0, 1, 300, 1 << 63, (1 << 64) - 1]))
        if r < 0.4:
            return self.key(f, 1) + rng.randbytes(8)
        if r < 0.5:
            return self.key(f, 5) + rng.randbytes(4)
        if r < 0.7:
            return self.msg(f, rng.randbytes(rng.randint(0, 6)))
        if r < 0.9 and depth > 0:
            inner = b"".join(self.noise(depth - 1) for _ in range(rng.randint(0, 2)))
            if self.p(self.bad):
                return self.key(f, 3) + inner + rng.choice([b"", self.key(f + 1, 4)])
            return self.key(f, 3) + inner + self.key(f, 4)
        if r < 0.95:
            return _group(f, depth=rng.randint(90, 101) if self.p(self.bad * 10) else rng.randint(1, 90))
        if not self.p(self.bad * 10):
            return self.key(f, 0) + self.varint(1)
        return rng.choice([b"\x00\x01", self.key(f, 4), self.key(f, 6) + b"\x01", self.key(f, 7),
                           b"\x88\x80\x80\x80\x80\x00\x01", b"\x88\x80\x80\x80\x10\x01", b"\x08" + b"\xff" * 11])

    def fields(self, parts: list[bytes]) -> bytes:
        parts = list(parts)
        if self.p(self.odd):
            self.rng.shuffle(parts)
        out = []
        for x in parts + [b""]:
            while self.p(self.odd / 2):
                out.append(self.noise())
            out.append(x)
        return b"".join(out)

    def stat(self, mids: list[int]) -> bytes:
        rng = self.rng
        which = rng.choice([2, 3, 4, 5, 6, 7, 0])
        parts = [self.int_(1, rng.choice(mids))]
        if which == 2:
            parts.append(self.key(2, 1) + struct.pack("<d", rng.choice([1.5, -0.0, 1e300, float("nan"), 7.0])))
        elif which in (3, 4, 7):
            parts.append(self.int_(which, rng.choice([0, 7, 12, 1 << 63, 2, (1 << 64) - 1])))
        elif which == 5:
            parts.append(self.string(5, rng.choice(["7", "regs:32 grid:4,1,1 block:128,1,1", "size:4096", "",
                                                    "abc", "7.5", "-3", "9" * 30, "size:99999999999999999999"])))
        elif which == 6:
            parts.append(self.msg(6, rng.choice([b"regs:16 grid:1,1,1 block:32,1,1", b"\xff\x00", b"12"])))
        if self.p(self.odd):
            parts.append(self.int_(rng.choice([3, 4]), 5))
        return self.fields(parts)

    def event(self, ids: list[int], smids: list[int]) -> bytes:
        rng = self.rng
        parts = [self.int_(1, rng.choice(ids)), self.int_(2, rng.choice([0, 1000, 4_000_000, -2000, 1 << 62]))]
        if self.p(0.8):
            parts.append(self.int_(3, rng.choice([0, 500, 2_000, 1 << 62])))
        parts += [self.msg(4, self.stat(smids)) for _ in range(rng.randint(0, 3))]
        if self.p(self.odd):
            parts.append(self.int_(5, 3))
        return self.fields(parts)

    def entry(self, f: int, key: int, name: str, is_event: bool) -> bytes:
        value = [self.int_(1, key), self.string(2, name)]
        if is_event and self.p(self.odd):
            value.append(self.string(4, "disp"))
        if is_event and self.p(self.odd):
            value.append(self.msg(5, self.stat([1, 2])))
        if is_event and self.p(self.odd):
            value.append(self.msg(6, self.varint(3) + self.varint(1 << 40) + (b"\xff" if self.p(self.bad) else b"")))
        if not is_event and self.p(self.odd):
            value.append(self.string(3, "desc"))
        return self.msg(f, self.fields([self.int_(1, key), self.msg(2, self.fields(value))]))

    def line(self, ids: list[int], smids: list[int]) -> bytes:
        rng = self.rng
        parts = [self.int_(1, rng.randint(0, 9)), self.string(2, rng.choice(self.LINES)),
                 self.int_(3, rng.choice([1000, 0, 1 << 40]))]
        if self.p(self.odd):
            parts.append(self.string(11, "disp"))
        parts += [self.msg(4, self.event(ids, smids)) for _ in range(rng.randint(0, 5))]
        return self.fields(parts)

    def plane(self, name: str) -> bytes:
        rng = self.rng
        ids = rng.sample(range(1, 12), rng.randint(1, 6))
        smids = rng.sample(range(1, 12), rng.randint(1, 5))
        parts = [self.string(2, name)]
        parts += [self.entry(4, i, rng.choice(self.NAMES), True) for i in ids]
        if self.p(self.odd):
            parts.append(self.entry(4, rng.choice(ids), rng.choice(self.NAMES), True))
        parts += [self.entry(5, i, rng.choice(self.STATS), False) for i in smids]
        parts += [self.msg(6, self.stat(smids)) for _ in range(rng.randint(0, 2))]
        parts += [self.msg(3, self.line(ids + [99], smids + [98])) for _ in range(rng.randint(0, 3))]
        return self.fields(parts)

    def space(self) -> bytes:
        rng = self.rng
        parts = [self.msg(1, self.plane(n)) for n in rng.sample(self.PLANES, rng.randint(1, 4))]
        for field, text, chance in ((3, "a warning", 0.3), (2, "an error", 0.2), (4, "host-a", 0.3)):
            if self.p(chance):
                parts.append(self.string(field, text))
        data = self.fields(parts)
        return data[: rng.randint(1, len(data))] if self.p(self.bad * 2) else data


def odd_space(seed: int, odd: float = 0.2, bad: float = 0.01) -> bytes:
    import random

    return _OddSpace(random.Random(seed), odd, bad).space()


hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@native
@settings(derandomize=True, deadline=None, max_examples=150, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), odd=st.sampled_from([0.05, 0.2, 0.4]), bad=st.sampled_from([0.0, 0.01, 0.05]))
def test_odd_spaces_native_equals_pure(tmp_path, monkeypatch, seed, odd, bad):
    from traceinsight.ingest.xplane.schema import messages

    data = odd_space(seed, odd, bad)
    out = _both(tmp_path, monkeypatch, data)
    if isinstance(out, str) and "not a valid XSpace protobuf" in out:
        with pytest.raises(Exception):  # noqa: B017 - what upb's full schema reads, the reader reads
            messages()["XSpace"].FromString(data)


@native
@pytest.mark.parametrize("content,expect", [(b"\xff" * 12, UTF8), (b"abc" * 4, WIRE)])
def test_string_running_past_its_message(tmp_path, monkeypatch, content, expect):
    """upb checks a string's UTF-8 before it notices the string runs past its message (not past the data): both
    paths then report the UTF-8 fault, and a clean overrunning string as a wire fault."""
    data = _msg(1, _msg(2, "/host:CPU") + _varint(2 << 3 | 2) + _varint(10)) + content
    assert _both(tmp_path, monkeypatch, data).endswith(expect)


@native
@pytest.mark.parametrize("value", [_msg(5, "1700000000"), _msg(6, b"\xff"), _int(3, 2**64 - 1), _double(2, float("nan")),
                                   _int(4, -5), _double(2, 1e300)])
def test_hostile_plane_stats_lose_their_fact(tmp_path, monkeypatch, value):
    """profile_start_time, memory_size and core_count of any oneof member: a value that is no whole number in range
    is dropped (no wall clock, no memory size), the capture still loads."""
    env = _msg(2, "Task Environment") + _entry(5, 1, "profile_start_time") + _msg(6, _int(1, 1) + value)
    gpu = (_msg(2, "/device:GPU:0") + _entry(4, 7, "gemm_kernel") + _entry(5, 1, "memory_size")
           + _entry(5, 2, "core_count") + _msg(6, _int(1, 1) + value) + _msg(6, _int(1, 2) + value)
           + _msg(3, _msg(2, "Stream #3(Compute)") + _int(3, 2_000) + _msg(4, STREAM_EVENTS[0])))
    tl = _both(tmp_path, monkeypatch, _msg(1, env) + _msg(1, gpu))
    assert len(tl.events) == 1 and tl.meta.start_unix_ns is None
    assert tl.meta.devices[0].memory_bytes is None and tl.meta.devices[0].sm_count is None
