"""TI013 warmup-in-window: its positive, negative and fix cases, on planted traces and the real corpus."""

from __future__ import annotations

import pytest

import traceinsight
from tests.conftest import corpus_file
from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.rule_cases import GEMM, GRID, steady_steps, with_warmup


#: positive: it fires; negative: it stays silent; fix: the same steps without the start-up step.
CASES = {
    "positive": ["test_ti013_first_step_init", "test_ti013_and_ti001_share_the_ledgers_warmup_on_alexnet"],
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
    assert f.evidence["one_time_work"].tolist() == ["warm-up step (ProfilerStep#0); allocator growth: cudaMalloc; one-time set-up: cudaGetDeviceProperties"]
    assert f.evidence["set_aside"].tolist() == [True]
    assert [(i.start_ns, i.end_ns, i.label) for i in f.instances] == [(20_000, 20_020_000, "warm-up")]
    # kept out of the steady-state idle: no TI001 for a loop that is busy from step 1 on
    assert _of_code(a, "TI001") == []


def test_ti013_negative_steady_steps(tmp_path):
    t = KinetoTrace()
    steady_steps(t)
    assert _of_code(traceinsight.analyze(t.write(tmp_path / "steady.json")), "TI013") == []


def test_ti013_and_ti001_share_the_ledgers_warmup_on_alexnet():
    # AlexNet benchmark: the first convolution (cuDNN autotune), the first pooling and a 3 s first launch of a cuDNN
    # kernel hold 12.78 s of the 12.92 s window. TI013 reports exactly the ledger's warm-up; TI001 counts none of it
    a = traceinsight.analyze(corpus_file("pytorch/hta_alexnet_a100_cudasync.json.gz"), select=["TI001", "TI013"])
    lg = a.ledger.gaps
    warm = int(lg["idle_warmup"].sum())
    assert warm == pytest.approx(12_777_121_000, rel=1e-4)
    (w,) = _of_code(a, "TI013")
    assert w.metrics["warmup_ns"] == warm and w.metrics["startup_counted_as_idle_ns"] == 0
    assert "first call of aten::cudnn_convolution" in " ".join(w.evidence["one_time_work"])
    (f,) = _of_code(a, "TI001")
    assert f.metrics["warmup_excluded_ns"] == warm
    steady = (lg["dur_ns"] - lg["idle_warmup"]).to_numpy()
    assert f.impact_ns == int(steady[steady >= 100_000].sum())
    assert f.metrics["top_cause"].startswith("host busy") and "warm-up" not in f.title
    assert not any(c.startswith("warm-up") for c in f.metrics["cause_ns"])


