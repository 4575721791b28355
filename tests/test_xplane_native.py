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
from traceinsight.errors import TraceReadError
from traceinsight.ingest import native as native_switch
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
