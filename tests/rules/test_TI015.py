"""TI015 recompile-in-steady-state: positive (a compile in step 4), negative (compiles only in the first step),
fix (the same workload compiled once with dynamic shapes), on kineto traces written by the test helpers."""

from __future__ import annotations

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.assess.verdict import details

GEMM = "ampere_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn"
GRID = (216, 1, 1)
COMPILE = "torch/_dynamo/convert_frame.py: _compile.compile_inner"


CASES = {
    "positive": ["test_ti015_positive_recompile_in_step_4", "test_ti015_is_the_root_cause_of_the_idle_gaps_it_covers"],
    "negative": ["test_ti015_negative_compiles_only_at_start"],
    "fix": ["test_ti015_fix_dynamic_shapes_compile_once"],
}


def _run(tmp_path, recompile_at: tuple[int, ...], name: str = "t.json"):
    # 8 steps of 20 x 50 µs kernels; a compile (Dynamo + Inductor) of 30 ms in step 0, and again in the given steps
    t = KinetoTrace()
    b = 0.0
    for s in range(8):
        c = 30_000.0 if (s == 0 or s in recompile_at) else 0.0
        t.step(s, b, 1_100.0 + c)
        if c:
            t.annotation(COMPILE, b + 5.0, c)
            t.annotation("Torch-Compiled Region: 0/1", b + c + 10.0, 1_050.0)
        else:
            t.annotation("Torch-Compiled Region: 0/0", b + 10.0, 1_050.0)
        for k in range(20):
            t.kernel(GEMM, b + c + 30.0 + k * 52.0, 50.0, launch_us=b + c + 20.0 + k * 1.0, grid=GRID)
        b += 1_110.0 + c
    return traceinsight.analyze(t.write(tmp_path / name))


def _ti015(a):
    return [f for f in a.findings if f.code == "TI015"]


def test_ti015_positive_recompile_in_step_4(tmp_path):
    a = _run(tmp_path, (4,))
    (f,) = _ti015(a)
    assert f.metrics["recompiles"] == 1 and f.metrics["recompile_ns"] == 30_000_000 and f.metrics["steps"] == [4]
    # the GPU waited for the compile: its idle is a steady-state cost, not warm-up
    assert 29_000_000 <= f.impact_ns <= 30_100_000
    assert f.severity.value == "error"  # 30 ms of a 38.8 ms steady window
    reasons = " ".join(a.ledger.warmup["reason"])
    assert "_compile.compile_inner" in reasons  # step 0's compile is one-time work
    assert a.ledger.totals()["idle_warmup"] < 1_000_000  # ... but step 4's 30 ms is not (step 0's precedes the GPU's window)
    assert details(a)["category"] != "cannot_judge"


def test_ti015_negative_compiles_only_at_start(tmp_path):
    a = _run(tmp_path, ())
    assert _ti015(a) == []
    # the first compile is one-time work (before the GPU's first kernel here), and the steps are judged
    assert any("_compile.compile_inner" in r for r in a.ledger.warmup["reason"])
    assert details(a)["category"] not in ("cannot_judge", "host_overhead", "host_untraced")


def test_ti015_fix_dynamic_shapes_compile_once(tmp_path):
    # the fix the rule gives (dynamic=True / bucketing): the same 8 steps, compiled once in step 0
    bad, good = _run(tmp_path, (2, 5), "bad.json"), _run(tmp_path, (), "good.json")
    (f,) = _ti015(bad)
    assert f.metrics["recompiles"] == 2 and f.metrics["steps"] == [2, 5]
    assert _ti015(good) == []


def test_ti015_is_the_root_cause_of_the_idle_gaps_it_covers(tmp_path):
    """TI015 is in TI001's category (GPU idle) but names its reason: it explains TI001, whose long gap is the
    recompile, by the time its instances cover, is never explained itself, and the verdict names it."""
    a = _run(tmp_path, (4,))
    (rec,) = _ti015(a)
    (gaps,) = [f for f in a.findings if f.code == "TI001"]
    assert rec.root_cause is True and gaps.root_cause is False
    assert gaps.metrics["explained_by"] == rec.fingerprint and rec.explains == [gaps.fingerprint]
    assert gaps.metrics["explained_ns"] == 30_000_000  # the 30 ms compile covers that much of the gaps
    assert "explained_by" not in rec.metrics and gaps.explains == []
    assert a.verdict["lever"] == "TI015" and "the lever that gives back most is TI015" in a.verdict["sentence"]
    # with no recompile there is nothing to explain: TI001, if it fires, is nobody's symptom
    assert all("explained_by" not in f.metrics for f in _run(tmp_path, (), "calm.json").findings if f.code == "TI001")
