"""TI002 host-sync-stalls: positive, negative and fix cases on planted traces and the real corpus."""

from __future__ import annotations

import pytest

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace


def _sync_loop(tmp_path, training: bool):
    """Four 2 ms steps, each: a 500 µs kernel, a sync waiting for it, a second kernel 300 µs after the first ends,
    a sync closing the step (nothing launched after it). Training when an optimizer step runs on the host."""
    t = KinetoTrace()
    for s in range(4):
        t0 = s * 2000.0
        t.step(s, t0, 2000.0)
        t.kernel("volta_sgemm_128x64_nn", t0 + 10, 500.0, launch_us=t0)
        t.runtime("cudaStreamSynchronize", t0 + 20, 495.0)
        t.kernel("volta_sgemm_128x64_nn", t0 + 810, 500.0, launch_us=t0 + 800)
        t.runtime("cudaStreamSynchronize", t0 + 820, 495.0)
        if training:
            t.cpu_op("Optimizer.step#SGD.step", t0 + 1400, 50.0)
    a = traceinsight.analyze(t.write(tmp_path / "t.json"), select=["TI002"])
    (f,) = a.findings
    return f


def test_closing_inference_syncs_cost_nothing(tmp_path):
    f = _sync_loop(tmp_path, training=False)
    assert f.metrics["inference"] is True and f.metrics["stalls"] == 8 and f.metrics["closing_syncs"] == 4
    # only the mid-step syncs cost: the 300 µs gap each leaves before the next launch; the closing ones hand the
    # request's result back
    assert f.impact_ns == f.metrics["gpu_idle_ns"] == 4 * 300_000
    assert f.metrics["blocked_ns"] == 8 * 495_000
    assert "4 of them close an inference step" in f.message


def test_closing_syncs_cost_in_training(tmp_path):
    f = _sync_loop(tmp_path, training=True)
    assert f.metrics["inference"] is False and f.metrics["closing_syncs"] == 0
    # each closing sync is now charged its own duration of the 700 µs gap after it (the last one has no gap after)
    assert f.impact_ns == 4 * 300_000 + 3 * 495_000
    assert "close an inference step" not in f.message
