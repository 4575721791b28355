"""Odd-but-valid traces give no silent wrong figures (issue 28, item 9), on the native and the pure kineto decoder
alike and on Nsight exports: negative durations, overlapping or renamed steps, shared correlation ids and absurd
windows are dropped or unlinked with a warning that says how many and why."""

from __future__ import annotations

import pytest

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.nsys_writer import NsysTrace

from .test_kineto_native import assert_same, native_built  # noqa: F401 - the fixture skips without the scanner


def _base():
    t = KinetoTrace()
    t.step(1, 0.0, 5000.0)
    t.kernel("gemm", 100.0, 1000.0)
    t.kernel("gemm", 2000.0, 1000.0)
    return t


def _warn(tl, text):
    return [w for w in tl.meta.warnings if text in w]


def test_negative_kernel_duration_is_dropped_and_counted(tmp_path, monkeypatch, native_built):
    t = _base()
    t.kernel("neg", 3000.0, 100.0)
    d = t.to_dict()
    for e in d["traceEvents"]:
        if e.get("name") == "neg" and e.get("cat") == "kernel":
            e["dur"] = -500.0
    p = tmp_path / "neg.json"
    import json

    p.write_text(json.dumps(d))
    tl = assert_same(p, monkeypatch)
    assert "neg" not in set(tl.events.loc[tl.events["kind"] == "kernel", "name"].astype(str))
    assert _warn(tl, "1 events with a negative duration")
    a = traceinsight.analyze(p)
    assert any(f.code == "TI014" for f in a.findings)


def test_overlapping_steps_are_dropped(tmp_path, monkeypatch, native_built):
    t = KinetoTrace()
    for i in range(2000):  # 2,000 one-millisecond steps in an 11 ms trace
        t.step(i, (i % 11) * 1000.0 + (i // 11) * 0.001, 1000.0)
    t.kernel("gemm", 100.0, 5000.0)
    p = t.write(tmp_path / "steps.json")
    tl = assert_same(p, monkeypatch)
    (w,) = _warn(tl, "step markers overlap")
    assert w.startswith("1,989 of 2,000")
    a = traceinsight.analyze(p)
    assert a.summary.steps["count"] == 11


def test_repeated_step_numbers_are_renumbered(tmp_path, monkeypatch, native_built):
    t = KinetoTrace()
    for i in range(50):
        t.step(1, i * 1000.0, 900.0)  # every marker named ProfilerStep#1
        t.kernel("gemm", i * 1000.0 + 100, 500.0)
    p = t.write(tmp_path / "same.json")
    tl = assert_same(p, monkeypatch)
    assert _warn(tl, "49 of 50 step markers on rank")
    a = traceinsight.analyze(p)
    assert a.summary.steps["count"] == 50


def test_shared_correlation_id_is_unlinked(tmp_path, monkeypatch, native_built):
    import json

    t = _base()
    for i in range(100):
        t.kernel("k", 3000.0 + i * 20, 5.0)
    d = t.to_dict()
    for e in d["traceEvents"]:
        if "correlation" in e.get("args", {}) and e.get("cat") in ("cuda_runtime", "kernel", "ac2g"):
            e["args"]["correlation"] = 7
        if e.get("ph") in ("s", "f") and e.get("cat") == "ac2g":
            e["id"] = 7
    p = tmp_path / "corr.json"
    p.write_text(json.dumps(d))
    tl = assert_same(p, monkeypatch)
    (w,) = _warn(tl, "share 1 correlation ids")
    assert w.startswith("102 runtime calls")
    gpu = tl.events[tl.events["device"] >= 0]
    assert (gpu["correlation"] == -1).all()


def test_absurd_window_is_cut(tmp_path, monkeypatch, native_built):
    t = _base()
    t.kernel("far", 1e12, 100.0)  # 10^15 ns after the rest
    p = t.write(tmp_path / "far.json")
    tl = assert_same(p, monkeypatch)
    (w,) = _warn(tl, "events lie more than 24 h from the rest of the trace")
    assert w.startswith("2 events")  # the kernel and its launch call
    a = traceinsight.analyze(p)
    assert a.summary.span_ns < 10**9
    assert any(f.code == "TI014" for f in a.findings)


def test_same_checks_on_nsys(tmp_path):
    n = NsysTrace()
    for i in range(30):
        n.step(i, i * 1_000_000 // 3, 1_000_000)  # overlapping NVTX steps
    n.kernel("gemm", 100_000, 500_000)
    n.kernel("far", 10**15, 1000)
    p = n.write(tmp_path / "odd.sqlite")
    tl = traceinsight.load(p)
    assert _warn(tl, "step markers overlap") and _warn(tl, "from the rest of the trace")
    assert tl.events["start_ns"].max() < 10**12
