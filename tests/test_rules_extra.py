"""Rules TI005-TI010: one planted positive and one negative trace each, plus what the real corpus must give.

Synthetic traces go through the real kineto JSON format and the PyTorch parser, so a test fails if either
the rule or the way its inputs are parsed drifts. Expected values are derived in the comments from the
planted times, not copied from a run.
"""

from __future__ import annotations

import pytest

import traceinsight
from tests.conftest import corpus_file
from tests.helpers.kineto_writer import KinetoTrace

DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _run(path, code, min_impact=None, **opts):
    a = traceinsight.analyze(path, select=[code], options={code: opts} if opts else None, min_impact=min_impact)
    assert not [w for w in a.warnings if code in w and "failed" in w], a.warnings
    return [f for f in a.findings if f.code == code]


# --- TI005 input-pipeline-bound ---------------------------------------------------------------------------


# --- TI006 pageable-memcpy --------------------------------------------------------------------------------


# --- TI007 no-tensor-cores --------------------------------------------------------------------------------


# --- TI008 small-grids ------------------------------------------------------------------------------------


# --- TI009 rank-imbalance ---------------------------------------------------------------------------------


# --- TI010 low-gpu-utilization ----------------------------------------------------------------------------
def _util_trace(tmp_path, period_us):
    t = KinetoTrace()
    for i in range(5):
        t.kernel("k", i * period_us, 1_000)
    return t.write(tmp_path / "util.json")


def test_ti010_positive(tmp_path):
    # 5 x 1 ms kernels every 5 ms: window 21 ms, busy 5 ms = 23.8 %, idle 16 ms.
    # TI010 saves nothing by itself: the common scale leaves it out unless findings below the floor are asked for
    assert _run(_util_trace(tmp_path, 5_000), "TI010") == []
    (f,) = _run(_util_trace(tmp_path, 5_000), "TI010", min_impact=0)
    assert f.impact_ns == 0  # the verdict never adds to "time saved" (see the rule's definition)
    assert f.metrics["idle_ns"] == 16_000_000
    assert f.metrics["busy_pct"] == pytest.approx(500 / 21, abs=1e-3)
    assert f.severity.value == "info"  # never a warning with 0 ns


def test_ti010_negative_busy(tmp_path):
    assert _run(_util_trace(tmp_path, 1_000), "TI010", min_impact=0) == []


# --- real corpus ------------------------------------------------------------------------------------------


