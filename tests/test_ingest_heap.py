"""The allocator settings a large load holds (``ingest/heap.py``): the same timeline, and nothing left changed."""

from __future__ import annotations

import pandas as pd
import pytest

import traceinsight
from traceinsight.ingest import heap

from .helpers.kineto_writer import KinetoTrace


def _trace(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 400)
    op = t.cpu_op("aten::mm", 10, 50)
    t.kernel("ampere_sgemm_128x64_nn", 70, 30, launch_us=20, op=op)
    t.memory(30, 1 << 20, allocated=1 << 20, reserved=2 << 20)
    return t.write(tmp_path / "t.json")


def _hugepages() -> bool:
    from numpy._core.multiarray import _get_madvise_hugepage

    return bool(_get_madvise_hugepage())


def test_a_large_load_reads_the_same_timeline_and_restores_the_settings(tmp_path, monkeypatch):
    if heap._libc() is None:
        pytest.skip("not glibc: large_input is a no-op here")
    path = _trace(tmp_path)
    plain = traceinsight.load(path)
    before = _hugepages()
    seen = []
    real = heap._hugepages

    def spy(on):
        seen.append(on)
        return real(on)

    monkeypatch.setattr(heap, "_hugepages", spy)
    monkeypatch.setattr(heap, "LARGE", 0)  # every input counts as large
    large = traceinsight.load(path)
    assert seen == [False, before]  # switched off for the read, then back
    assert _hugepages() == before
    pd.testing.assert_frame_equal(plain.events, large.events)
    pd.testing.assert_frame_equal(plain.memory, large.memory)


def test_small_inputs_leave_the_allocator_alone(tmp_path, monkeypatch):
    path = _trace(tmp_path)
    calls = []
    monkeypatch.setattr(heap, "_libc", lambda: calls.append(1))
    traceinsight.load(path)
    assert calls == []  # under LARGE, glibc is not even looked up (no ctypes import on the cold-start path)
    assert heap.input_size(path) == path.stat().st_size
    assert heap.input_size(tmp_path) == path.stat().st_size  # a folder: its files
    assert heap.input_size(tmp_path / "missing.json") == 0


def test_nested_large_inputs_set_once_and_restore_once(monkeypatch):
    """``analyze`` holds one around ``load``'s: the inner one neither sets nor restores (restoring early would hand
    the rest of the analysis the default allocator, and a second switch-off would lose numpy's own setting)."""
    if heap._libc() is None:
        pytest.skip("not glibc: large_input is a no-op here")
    before = _hugepages()
    seen = []
    real = heap._hugepages

    def spy(on):
        seen.append(on)
        return real(on)

    monkeypatch.setattr(heap, "_hugepages", spy)
    with heap.large_input(heap.LARGE):
        with heap.large_input(heap.LARGE):
            assert seen == [False]
        assert seen == [False] and not _hugepages()  # the inner exit left the settings held
    assert seen == [False, before] and _hugepages() == before
    assert heap._held == [0]
