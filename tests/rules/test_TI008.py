"""TI008 small-grids: its positive, negative and fix cases, on planted traces and the real corpus."""

from __future__ import annotations

import pytest

from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.rule_cases import findings_of


#: positive: it fires; negative: it stays silent; fix: the same launches with grids that fill the SMs.
CASES = {
    "positive": ["test_ti008_positive"],
    "negative": ["test_ti008_negative_full_grids"],
    "fix": ["test_ti008_negative_full_grids"],
}


def _grid_trace(tmp_path, small_grid):
    t = KinetoTrace(sm_count=108)
    for i in range(5):
        t.kernel("void gemv_small", i * 1_000, 1_000, grid=small_grid)
    for i in range(5):
        t.kernel("void big_kernel", 5_000 + i * 500, 500, grid=(216, 1, 1))
    for i in range(3):  # collectives use few blocks on purpose: never counted
        t.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 8_000 + i * 1_000, 1_000, grid=(2, 1, 1))
    return t.write(tmp_path / "grid.json")


def test_ti008_positive(tmp_path):
    # Under-filled: 5 ms of 7.5 ms non-NCCL kernel time = 66.7 %; empty SM time = 5 ms x (1 - 32/108).
    (f,) = findings_of(_grid_trace(tmp_path, (32, 1, 1)), "TI008")
    assert f.metrics["share_pct"] == pytest.approx(200 / 3, abs=1e-3)
    assert f.metrics["underfilled_ns"] == 5_000_000
    assert f.metrics["kernel_ns_with_grid"] == 7_500_000
    assert f.metrics["sm_count"] == [108]
    assert f.impact_ns == pytest.approx(5_000_000 * (1 - 32 / 108), abs=1)
    assert f.evidence["name"].iloc[0] == "void gemv_small" and f.evidence["median_blocks"].iloc[0] == 32


def test_ti008_negative_full_grids(tmp_path):
    # 2 x 4 x 16 = 128 blocks >= 108 SMs: every launch fills the GPU.
    assert findings_of(_grid_trace(tmp_path, (2, 4, 16)), "TI008") == []


def test_ti008_prices_only_the_time_a_small_grid_runs_alone(tmp_path):
    """Five 1 ms launches of 32 blocks on a 108-SM GPU (5 ms under-filled, 66.7 % of the kernel time); a full-grid
    kernel on another stream runs beside the first 600 µs of each, so the SMs they leave are not empty then. Only the
    400 µs each runs alone is priced: 5 x 400 µs x (1 - 32/108). (DeepEP's few-block communication kernels beside
    the GEMMs cost nothing: the expert's reading of a DualPipe trace.)"""
    t = KinetoTrace(sm_count=108)
    for i in range(5):
        t.kernel("void gemv_small", i * 1_000, 1_000, grid=(32, 1, 1))
        t.kernel("void big_beside", i * 1_000, 600, grid=(216, 1, 1), stream=8)
    for i in range(5):
        t.kernel("void big_kernel", 5_000 + i * 500, 500, grid=(216, 1, 1))
    (f,) = findings_of(t.write(tmp_path / "beside.json"), "TI008")
    assert f.metrics["underfilled_ns"] == 5_000_000  # the share describes the launches ...
    assert f.impact_ns == pytest.approx(5 * 400_000 * (1 - 32 / 108), abs=1)  # ... the price, only the time alone
    # the same launches with nothing beside them: the whole 5 ms is priced
    (g,) = findings_of(_grid_trace(tmp_path, (32, 1, 1)), "TI008")
    assert g.impact_ns == pytest.approx(5_000_000 * (1 - 32 / 108), abs=1)
