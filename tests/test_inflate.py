"""A large gzip trace is inflated into one buffer (``byteio.InflatedBuffer``), not into steps joined at the end.

Why it matters: joining held the inflated trace twice (a 1.9 GB trace peaked at 3.96 GB while it was read). The
buffer must give exactly the bytes, completeness, refusals and warnings the joined steps gave, whatever the
stream holds (several members, a cut, a bomb, a size the trailer does not tell), and the kineto scanner must never
give its pages back as it does a file mapping's (they hold the only copy of the bytes). The tests shrink the step
(``byteio._CHUNK``) so that small streams take the buffer and many steps.
"""

from __future__ import annotations

import gzip
import json
import mmap
import zlib
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traceinsight
from traceinsight.ingest import byteio
from traceinsight.ingest.byteio import InflatedBuffer, gunzip
from traceinsight.ingest.kineto import columns
from traceinsight.vocab import native
from traceinsight.vocab.errors import TraceReadError, TraceTooLargeError

from .helpers.kineto_writer import KinetoTrace


def _both(raw: bytes, max_bytes: int = 1 << 30, **kw):
    """gunzip's result (or error) as joined steps and into one buffer, with 64-byte steps."""
    old = byteio._CHUNK
    byteio._CHUNK = 64
    try:
        out = []
        for mapped in (False, True):
            try:
                data, complete = gunzip(raw, Path("t.gz"), max_bytes, mapped=mapped, **kw)
                out.append((type(data), bytes(data), complete))
            except (TraceReadError, TraceTooLargeError) as exc:
                out.append((type(exc), str(exc), None))
        return out
    finally:
        byteio._CHUNK = old


@settings(derandomize=True, deadline=None, max_examples=150, database=None)
@given(parts=st.lists(st.binary(min_size=0, max_size=3000), min_size=1, max_size=3), cut=st.floats(0.05, 1.0))
def test_one_buffer_gives_what_the_joined_steps_give(parts, cut):
    raw = b"".join(gzip.compress(p, compresslevel=1) for p in parts)
    raw = raw[: max(1, int(len(raw) * cut))]
    joined, buffered = _both(raw)
    assert buffered[1:] == joined[1:]
    if joined[0] is bytes and len(raw) * 4 > 64 and buffered[1]:
        assert buffered[0] is InflatedBuffer  # the buffer was used, not the steps


def test_a_stream_larger_than_its_trailer_says_grows_the_buffer():
    """Several members: the trailer read for the size is the last member's (a few bytes), the buffer grows."""
    big = bytes(range(256)) * 400
    raw = gzip.compress(big) + gzip.compress(b"tail")
    joined, buffered = _both(raw)
    assert buffered == (InflatedBuffer, big + b"tail", True) and joined[1:] == buffered[1:]


def test_the_ceiling_and_the_bomb_guard_hold_in_one_buffer():
    bomb = gzip.compress(b"\0" * (4 << 20))
    joined, buffered = _both(bomb, max_bytes=1 << 20)
    assert joined[0] is TraceTooLargeError and buffered[:2] == joined[:2]
    old = byteio.BOMB_FLOOR
    byteio.BOMB_FLOOR = 1 << 16
    try:
        joined, buffered = _both(bomb)
    finally:
        byteio.BOMB_FLOOR = old
    assert joined[0] is TraceTooLargeError and "gzip bomb" in joined[1] and buffered[:2] == joined[:2]


def test_a_buffer_that_cannot_grow_in_place_is_copied_once(monkeypatch):
    """Where the kernel cannot move the pages (no mremap: macOS), a new buffer takes the bytes."""
    def refuse(self, size):
        raise SystemError("mremap not available")

    monkeypatch.setattr(InflatedBuffer, "resize", refuse)
    big = bytes(range(256)) * 300
    raw = gzip.compress(big) + gzip.compress(b"x" * 5000)  # the last trailer says 5000: the buffer must grow
    joined, buffered = _both(raw)
    assert buffered[1:] == joined[1:] == (big + b"x" * 5000, True)
    assert buffered[0] is bytes  # and, unable to shrink, handed over as the bytes themselves


@pytest.mark.skipif(native.built("pytorch") is None, reason="the native kineto scanner is not built here")
def test_a_gzip_trace_read_through_one_buffer_is_the_same_timeline(tmp_path, monkeypatch):
    t = KinetoTrace()
    for i in range(300):
        op = t.cpu_op(f"aten::op{i % 9}", 50.0 * i, 20)
        t.kernel(f"k{i % 5}", 50.0 * i + 25, 10, launch_us=50.0 * i + 2, op=op)
        t.memory(50.0 * i + 1, 4096, allocated=1 << 20, reserved=1 << 21)
    path = t.write(tmp_path / "t.json.gz")
    one = traceinsight.load(path)  # small: the joined steps (one step, no copy)
    releases = []
    real = native.built("pytorch")

    class Spy:
        def scan(self, data, release=False, split_after=0):
            releases.append((type(data), release))
            return real.scan(data, release, split_after)

    monkeypatch.setattr(columns.native, "built", lambda fmt: Spy())
    monkeypatch.setattr(byteio, "_CHUNK", 4096)
    two = traceinsight.load(path)
    assert releases == [(InflatedBuffer, columns.RELEASE_EVENTS)]  # only the event array's pages may go
    pd.testing.assert_frame_equal(one.events, two.events)
    pd.testing.assert_frame_equal(one.memory, two.memory)
    assert one.meta.warnings == two.meta.warnings
    # cut short: the same events recovered, the same warning
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])
    monkeypatch.setattr(byteio, "_CHUNK", 64 << 20)
    a = traceinsight.load(cut)
    monkeypatch.setattr(byteio, "_CHUNK", 4096)
    b = traceinsight.load(cut)
    pd.testing.assert_frame_equal(a.events, b.events)
    assert a.meta.warnings == b.meta.warnings and any("cut short" in w for w in b.meta.warnings)
    # a file mapping is still given back
    plain = tmp_path / "t.json"
    plain.write_bytes(gzip.decompress(path.read_bytes()))
    releases.clear()
    traceinsight.load(plain)
    assert releases == [(mmap.mmap, columns.RELEASE_FILE)]


def _big_pretty_trace(n: int) -> bytes:
    """A kineto document of ``n`` ops and kernels written one member per line, tens of MB: past the 32 MiB the
    scanner reads before it gives pages back."""
    t = KinetoTrace()
    for i in range(n):
        op = t.cpu_op(f"aten::op{i % 13}", 10.0 * i, 5, args={"Input Dims": [[i % 97, 64]]})
        t.kernel(f"kernel_{i % 7}", 10.0 * i + 6, 3, launch_us=10.0 * i + 1, op=op)
    return json.dumps(t.to_dict(), indent=1).encode()


@pytest.mark.skipif(native.built("pytorch") is None, reason="the native kineto scanner is not built here")
@pytest.mark.parametrize("case", ["whole", "cut", "declined", "whole, two threads"])
def test_an_inflated_trace_whose_event_pages_were_given_back_reads_as_the_plain_file(tmp_path, monkeypatch, case):
    """The scanner zeroes the event array's pages of an inflated gzip file behind it (32 MiB at a time). A whole
    document needs only the header after that; a cut one (the cut is checked on the whole document) and one the
    scanner declines (the general decoder reads it all) are read from the file again: every case gives the
    timeline of the same document read from a plain file."""
    two_threads = case.endswith("two threads")
    data = _big_pretty_trace(100_000 if two_threads else 60_000)  # each thread past 32 MiB
    assert len(data) > (80 << 20 if two_threads else 40 << 20)
    if case == "declined":  # the last kernel's timestamp written as a string: the scanner declines at the end
        at = data.index(b'"ts":', data.rindex(b'"cat": "kernel"'))
        data = data[:at] + b'"ts": "1"' + data[data.index(b",", at):]
    if case == "cut":
        data = data[: len(data) - 1000]
    plain = tmp_path / "t.json"
    plain.write_bytes(data)
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(data, compresslevel=1))
    monkeypatch.setattr(columns, "SPLIT_MIN_BYTES", 1 << 62)  # one thread: the plain file's own read, compared
    want = traceinsight.load(plain)
    zeroed = []
    real = native.built("pytorch")

    class Spy:
        def scan(self, data, release=False, split_after=0):
            out = real.scan(data, release, split_after)
            if release == columns.RELEASE_EVENTS:  # pages the threads passed read as zeros now
                spots = [len(data) // 2] if not split_after else [8 << 20, len(data) // 2 + (12 << 20)]
                zeroed.append(all(bytes(data[at & ~4095: (at & ~4095) + 4096]) == bytes(4096) for at in spots))
            return out

    monkeypatch.setattr(columns.native, "built", lambda fmt: Spy())
    monkeypatch.setattr(byteio, "_CHUNK", 1 << 20)  # a few MB of gzip: inflated into one buffer
    if two_threads:  # each thread gives back the pages behind it, the second's from its own start
        monkeypatch.setattr(columns, "SPLIT_MIN_BYTES", 0)
        monkeypatch.setattr(columns, "SPLIT_AFTER_EVENTS", 1000)
        monkeypatch.setattr(columns, "usable_cpus", lambda: columns.SPLIT_MIN_CPUS)
    got = traceinsight.load(packed)
    assert zeroed == [True]
    pd.testing.assert_frame_equal(want.events, got.events)
    assert [w.replace("t.json.gz", "t.json") for w in got.meta.warnings] == want.meta.warnings
