"""TI013 warmup-in-window: its positive, negative and fix cases, on planted traces and the real corpus."""

from __future__ import annotations

import pytest

import traceinsight
from tests.conftest import corpus_file
from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.rule_cases import GEMM, GRID, steady_steps, with_warmup


#: positive: it fires; negative: it stays silent; fix: the same steps without the start-up step.
CASES = {
    "positive": ["test_ti013_first_step_init", "test_ti013_start_up_calls_the_ledger_cannot_measure"],
    "negative": ["test_ti013_negative_steady_steps"],
    "fix": ["test_ti013_negative_steady_steps"],
}


def _of_code(a, code):
    return [f for f in a.findings if f.code == code]


def test_ti013_first_step_init(tmp_path):
    t = KinetoTrace()
    with_warmup(t, init=True)
    a = traceinsight.analyze(t.write(tmp_path / "warm.json"))
    (f,) = _of_code(a, "TI013")
    # the ledger's warm-up: step 0 (21 ms) is over twice the later steps' 1.01 ms, so its 20 ms gap is set aside
    assert f.metrics["warmup_ns"] == int(a.ledger.gaps["idle_warmup"].sum()) == 20_000_000
    assert f.metrics["warmup_pct"] == pytest.approx(100.0 * 20_000_000 / 26_060_000, abs=0.001)
    assert f.metrics["startup_counted_as_idle_ns"] == 0
    assert f.evidence["one_time_work"].tolist() == ["first step (ProfilerStep#0)"]
    assert f.evidence["set_aside"].tolist() == [True]
    assert [(i.start_ns, i.end_ns, i.label) for i in f.instances] == [(20_000, 20_020_000, "warm-up")]
    # kept out of the steady-state idle: no TI001 for a loop that is busy from step 1 on
    assert _of_code(a, "TI001") == []


def test_ti013_start_up_calls_the_ledger_cannot_measure(tmp_path):
    # no steps, one module load and one JIT compile in the head gap: made once, nothing to compare them with,
    # so the ledger books the 10 ms as host time; TI013 names the start-up and says it stays in the idle
    t = KinetoTrace()
    t.kernel(GEMM, 0.0, 10.0, launch_us=-5.0, launch_dur_us=3.0, grid=GRID)
    t.runtime("cuModuleLoadData", 100.0, 2_000.0)
    t.cpu_op("KernelExecutor::compileFusion", 2_200.0, 7_700.0)
    for i in range(40):
        t.kernel(GEMM, 10_010.0 + i * 50, 50.0, launch_us=10_000.0 + i * 0.4, launch_dur_us=0.3, grid=GRID)
    a = traceinsight.analyze(t.write(tmp_path / "jit.json"))
    assert int(a.ledger.gaps["idle_warmup"].sum()) == 0
    (f,) = _of_code(a, "TI013")
    assert f.metrics["warmup_ns"] == 0 and f.metrics["startup_counted_as_idle_ns"] == 10_000_000
    assert "counted as idle" in f.title
    assert f.evidence["one_time_work"].iloc[0] == "cuModuleLoadData ×1, KernelExecutor::compileFusion ×1"
    assert f.evidence["set_aside"].tolist() == [False]
    assert [(i.start_ns, i.end_ns, i.label) for i in f.instances] == [(15_000, 10_015_000, "start-up calls (counted as idle)")]  # times from the first event (the launch at -5 µs)
    # one home: what the ledger does not book as warm-up, TI001 counts
    (g,) = _of_code(a, "TI001")
    assert g.impact_ns == 10_000_000 and g.metrics["warmup_excluded_ns"] == 0


def test_ti013_negative_steady_steps(tmp_path):
    t = KinetoTrace()
    steady_steps(t)
    assert _of_code(traceinsight.analyze(t.write(tmp_path / "steady.json")), "TI013") == []


def test_ti013_and_ti001_share_the_ledgers_warmup_on_alexnet():
    # AlexNet benchmark: the first convolution (cuDNN autotune) and first pooling calls hold 11.68 s of the 12.92 s
    # window. TI013 reports exactly the ledger's warm-up; TI001 counts none of it, so its cost is host time
    a = traceinsight.analyze(corpus_file("pytorch/hta_alexnet_a100_cudasync.json.gz"), select=["TI001", "TI013"])
    lg = a.ledger.gaps
    warm = int(lg["idle_warmup"].sum())
    assert warm == pytest.approx(11_675_400_000, rel=1e-4)
    (w,) = _of_code(a, "TI013")
    assert w.metrics["warmup_ns"] == warm and w.metrics["startup_counted_as_idle_ns"] == 0
    assert "first call of aten::cudnn_convolution" in w.evidence.sort_values("warmup_ms")["one_time_work"].iloc[-1]
    (f,) = _of_code(a, "TI001")
    assert f.metrics["warmup_excluded_ns"] == warm
    steady = (lg["dur_ns"] - lg["idle_warmup"]).to_numpy()
    assert f.impact_ns == int(steady[steady >= 100_000].sum()) == 1_177_925_000
    assert f.metrics["top_cause"].startswith("host busy") and "warm-up" not in f.title
    assert not any(c.startswith("warm-up") for c in f.metrics["cause_ns"])


def test_ti013_names_unbooked_jit_compile_on_nvfuser():
    # nvFuser: a 397 ms head gap inside KernelExecutor::compileFusion (made once: the ledger cannot book it as
    # warm-up); TI013 names it and says it stays in the idle, which TI001 counts, as the verdict does
    a = traceinsight.analyze(corpus_file("nsys/nsys2024.6_nvfuser-pytorch_h200.sqlite"), select=["TI001", "TI013"])
    assert int(a.ledger.gaps["idle_warmup"].sum()) == 0
    (w,) = _of_code(a, "TI013")
    assert w.metrics["warmup_ns"] == 0 and w.metrics["startup_counted_as_idle_ns"] == 396_815_915
    assert "KernelExecutor::compileFusion" in w.evidence["one_time_work"].iloc[0] and "counted as idle" in w.title
    (f,) = _of_code(a, "TI001")
    assert f.metrics["warmup_excluded_ns"] == 0 and f.impact_ns >= 396_815_915
