"""Hostile and broken input through the readers (issue 14): every case below failed before its fix.

Each asserts on values: what was kept, what was dropped and counted, the one-line error, and that the native and
pure paths agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import traceinsight
from traceinsight.errors import TraceReadError, TraceTooLargeError
from traceinsight.ingest import native

from .helpers.kineto_writer import KinetoTrace

PURE = native.PURE_ENV


def _load_both(path, monkeypatch, **kw):
    """The timeline (or the one-line error) from the native and from the pure path."""
    out = []
    for pure in (False, True):
        with monkeypatch.context() as m:
            if pure:
                m.setenv(PURE, "1")
            else:
                m.delenv(PURE, raising=False)
            try:
                out.append(traceinsight.load(path, **kw))
            except TraceReadError as exc:
                assert "\n" not in str(exc)
                out.append(str(exc))
    return out


def _same(a, b):
    import pandas as pd

    assert type(a) is type(b), (a, b)
    if isinstance(a, str):
        assert a == b
    else:
        pd.testing.assert_frame_equal(a.events, b.events)
        assert a.meta.warnings == b.meta.warnings
        assert [d.name for d in a.meta.devices] == [d.name for d in b.meta.devices]


# --- item 4: truncation recovery in linear time, every complete event kept --------------------------------------


def _many_events(n: int, pad: str = "") -> tuple[bytes, list[int]]:
    """A kineto document of ``n`` kernel events, one per line, and the byte offset where each event ends."""
    head = b'{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU"}], "traceEvents": [\n'
    parts, ends, pos = [head], [], len(head)
    for i in range(n):
        ev = (f'{{"ph": "X", "cat": "kernel", "name": "k{i % 97}{pad}", "pid": 0, "tid": 7, "ts": {1000 + 3 * i}.5, '
              f'"dur": 1.25, "args": {{"device": 0, "stream": 7, "correlation": {i}, "note": "a}}]\\\\\\"{{["}}}}')
        line = (ev + (",\n" if i < n - 1 else "\n")).encode()
        parts.append(line)
        ends.append(pos + len(ev))
        pos += len(line)
    parts.append(b"]}\n")
    return b"".join(parts), ends


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure"])
def test_cut_file_keeps_every_complete_event_in_linear_time(tmp_path, monkeypatch, pure):
    data, ends = _many_events(120_000)
    full = tmp_path / "full.json"
    full.write_bytes(data)
    cut_at = int(len(data) * 0.73)
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[:cut_at])
    if pure:
        monkeypatch.setenv(PURE, "1")
    t0 = time.perf_counter()
    traceinsight.load(full)
    normal = time.perf_counter() - t0
    t0 = time.perf_counter()
    tl = traceinsight.load(cut)
    recovering = time.perf_counter() - t0
    complete = sum(1 for e in ends if e < cut_at)
    assert len(tl.events) == complete
    assert any(f"{complete:,} events before the cut were recovered" in w for w in tl.meta.warnings)
    assert recovering < 3 * normal + 0.5, (recovering, normal)


def test_recovery_when_the_native_scanner_declines(tmp_path, monkeypatch):
    """The native scanner declines numbers over 79 characters; the pure path then recovers the cut file alone."""
    data, ends = _many_events(3000)
    long_number = b"1" + b"0" * 90
    data = data.replace(b'"dur": 1.25', b'"dur": 1.25, "x": ' + long_number, 1)
    ends = [e + len(b', "x": ') + len(long_number) for e in ends]
    cut_at = int(len(data) * 0.5)
    (tmp_path / "c.json").write_bytes(data[:cut_at])
    fast, slow = _load_both(tmp_path / "c.json", monkeypatch)
    _same(fast, slow)
    assert len(fast.events) == sum(1 for e in ends if e < cut_at)
