"""TI010 low-gpu-utilization: its positive, negative and fix cases, on planted traces and the real corpus."""

from __future__ import annotations

import pytest

from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.rule_cases import findings_of


#: positive: it fires; negative: it stays silent; fix: the same kernels back to back.
CASES = {
    "positive": ["test_ti010_positive"],
    "negative": ["test_ti010_negative_busy"],
    "fix": ["test_ti010_negative_busy"],
}


def _util_trace(tmp_path, period_us):
    t = KinetoTrace()
    for i in range(5):
        t.kernel("k", i * period_us, 1_000)
    return t.write(tmp_path / "util.json")


def test_ti010_positive(tmp_path):
    # 5 x 1 ms kernels every 5 ms: window 21 ms, busy 5 ms = 23.8 %, idle 16 ms.
    # TI010 saves nothing by itself: the common scale leaves it out unless findings below the floor are asked for
    assert findings_of(_util_trace(tmp_path, 5_000), "TI010") == []
    (f,) = findings_of(_util_trace(tmp_path, 5_000), "TI010", min_impact=0)
    assert f.impact_ns == 0  # the verdict never adds to "time saved" (see the rule's definition)
    assert f.metrics["idle_ns"] == 16_000_000
    assert f.metrics["busy_pct"] == pytest.approx(500 / 21, abs=1e-3)
    assert f.severity.value == "info"  # never a warning with 0 ns


def test_ti010_negative_busy(tmp_path):
    assert findings_of(_util_trace(tmp_path, 1_000), "TI010", min_impact=0) == []
