"""Trace-quality rules TI011-TI014 on traces written by the test helpers: each fires on the recording it describes
and stays silent on a sound one; while TI012 stands, performance findings stay at info and the verdict says the
trace cannot be judged."""

from __future__ import annotations

import pytest

import traceinsight
from tests.conftest import corpus_file
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.rule_api import Severity
from traceinsight.verdict import details

GEMM = "ampere_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn"
GRID = (216, 1, 1)


def _codes(a, code):
    return [f for f in a.findings if f.code == code]


def _steady(t: KinetoTrace, steps: int = 5, first: float = 0.0) -> None:
    """Steps of 20 back-to-back 50 µs GEMMs launched ahead: 100 operations, a healthy GPU."""
    for s in range(steps):
        t0 = first + s * 1_010.0
        t.step(s, t0, 1_010.0)
        for i in range(20):
            t.kernel(GEMM, t0 + 10 + i * 50, 50.0, launch_us=t0 + i * 0.4, launch_dur_us=0.3, grid=GRID)


# --- TI011 no GPU activity ------------------------------------------------------------------------------------


# --- TI012 too little GPU work ------------------------------------------------------------------------------------


# --- TI013 warm-up in the window ----------------------------------------------------------------------------------
def _with_warmup(t: KinetoTrace, init: bool) -> None:
    # step 0 waits 20 ms before its first kernel (with start-up calls when ``init``), then 5 healthy steps
    t.step(0, 0.0, 21_020.0)
    if init:
        t.runtime("cudaMalloc", 100.0, 8_000.0)
        t.runtime("cudaGetDeviceProperties", 8_200.0, 50.0)
    t.kernel(GEMM, 10.0, 10.0, launch_us=0.0, grid=GRID)
    for i in range(20):
        t.kernel(GEMM, 20_020.0 + i * 50, 50.0, launch_us=20_000.0 + i * 0.4, launch_dur_us=0.3, grid=GRID)
    _steady_after(t, 21_020.0)


def _steady_after(t: KinetoTrace, first: float) -> None:
    for s in range(1, 6):
        t0 = first + (s - 1) * 1_010.0
        t.step(s, t0, 1_010.0)
        for i in range(20):
            t.kernel(GEMM, t0 + 10 + i * 50, 50.0, launch_us=t0 + i * 0.4, launch_dur_us=0.3, grid=GRID)


# --- TI014 events lost --------------------------------------------------------------------------------------------


PLANTED_COST = '''
from traceinsight.rule_api import Rule

class PlantedCost(Rule):
    code = "ZZ901"
    name = "planted-cost"
    category = "gpu_idle"
    summary = "One finding costing 1.3 ms."

    def check(self, ctx):
        yield ctx.finding(title="planted", message="1.3 ms", impact_ns=1_300_000)
'''


def test_severity_is_graded_on_the_steady_state_window(tmp_path):
    """A cost is judged against the window less the ledger's warm-up, as the verdict judges causes: 1.3 ms is 5.0 %
    of the 26.06 ms window but 21 % of the 6.06 ms steady state, where fixing it would show."""
    t = KinetoTrace()
    _with_warmup(t, init=False)
    (tmp_path / "planted.py").write_text(PLANTED_COST)
    a = traceinsight.analyze(t.write(tmp_path / "warm.json"), rules=[tmp_path / "planted.py"])
    assert int(a.ledger.by_device.set_index("bucket").loc["idle_warmup", "ns"]) == 20_000_000
    (f,) = _codes(a, "ZZ901")
    assert f.severity is Severity.ERROR
    plain = KinetoTrace()  # the same loop without the warm-up step: the same 1.3 ms is 21 % of it too
    _steady_after(plain, 0.0)
    (g,) = _codes(traceinsight.analyze(plain.write(tmp_path / "plain.json"), rules=[tmp_path / "planted.py"]), "ZZ901")
    assert g.severity is Severity.ERROR
