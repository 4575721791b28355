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
def test_ti011_runtime_calls_without_gpu_activity(tmp_path):
    t = KinetoTrace()
    t.step(0, 0.0, 1_000.0)
    t.cpu_op("aten::mm", 10.0, 200.0)
    t.runtime("cudaMalloc", 20.0, 100.0)
    t.runtime("cudaStreamSynchronize", 300.0, 50.0)
    a = traceinsight.analyze(t.write(tmp_path / "nogpu.json"))
    (f,) = _codes(a, "TI011")
    assert f.severity.value == "warning" and f.category == "trace_quality"
    assert f.metrics["gpu_api_calls"] == 2
    assert details(a)["category"] == "no_gpu"
    assert _codes(a, "TI002") == []  # a sync's cost is GPU idle: nothing to measure


def test_ti011_negative_gpu_trace(tmp_path):
    t = KinetoTrace()
    _steady(t)
    assert _codes(traceinsight.analyze(t.write(tmp_path / "gpu.json")), "TI011") == []


# --- TI012 too little GPU work ------------------------------------------------------------------------------------
def test_ti012_two_kernels(tmp_path):
    # two 5 µs kernels 10 ms apart: "0.1 % busy" and "idle 99.9 %" would both be noise
    t = KinetoTrace()
    t.step(0, 0.0, 11_000.0)
    t.cpu_op("aten::index", 100.0, 9_800.0)
    t.kernel("vectorized_elementwise_kernel", 50.0, 5.0, launch_us=40.0)
    t.kernel("reduce_kernel", 10_050.0, 5.0, launch_us=10_000.0)
    a = traceinsight.analyze(t.write(tmp_path / "tiny.json"))
    (f,) = _codes(a, "TI012")
    assert f.metrics["gpu_ops"] == 2 and f.metrics["gpu_busy_ns"] == 10_000
    assert f.severity.value == "warning" and not f.metrics["graph_capture"]
    # the idle gap is still found, but judgement is withheld: info, and no performance verdict
    (idle,) = _codes(a, "TI001")
    assert idle.severity.value == "info"
    d = details(a)
    assert d["category"] == "too_little" and not d["bound"]


def test_ti012_graph_capture(tmp_path):
    # 400 launches recorded while a graph is captured, 2 kernels executed (the held-back HIP-graph case)
    t = KinetoTrace()
    _steady(t, steps=2)
    for i in range(400):
        t.runtime("cudaLaunchKernel", 3_000.0 + i * 5, 3.0)
    a = traceinsight.analyze(t.write(tmp_path / "capture.json"))
    (f,) = _codes(a, "TI012")
    assert f.metrics["graph_capture"] and f.metrics["launch_calls"] >= 400


def test_ti012_negative_steady_steps(tmp_path):
    t = KinetoTrace()
    _steady(t)
    a = traceinsight.analyze(t.write(tmp_path / "steady.json"))
    assert _codes(a, "TI012") == []
    assert details(a)["category"] == "compute"


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


def test_ti013_first_step_init(tmp_path):
    t = KinetoTrace()
    _with_warmup(t, init=True)
    a = traceinsight.analyze(t.write(tmp_path / "warm.json"))
    (f,) = _codes(a, "TI013")
    # the ledger's warm-up: step 0 (21 ms) is over twice the later steps' 1.01 ms, so its 20 ms gap is set aside
    assert f.metrics["warmup_ns"] == int(a.ledger.gaps["idle_warmup"].sum()) == 20_000_000
    assert f.metrics["warmup_pct"] == pytest.approx(100.0 * 20_000_000 / 26_060_000, abs=0.001)
    assert f.metrics["startup_counted_as_idle_ns"] == 0
    assert f.evidence["one_time_work"].tolist() == ["first step (ProfilerStep#0)"]
    assert f.evidence["set_aside"].tolist() == [True]
    assert [(i.start_ns, i.end_ns, i.label) for i in f.instances] == [(20_000, 20_020_000, "warm-up")]
    # kept out of the steady-state idle: no TI001 for a loop that is busy from step 1 on
    assert _codes(a, "TI001") == []


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
    (f,) = _codes(a, "TI013")
    assert f.metrics["warmup_ns"] == 0 and f.metrics["startup_counted_as_idle_ns"] == 10_000_000
    assert "counted as idle" in f.title
    assert f.evidence["one_time_work"].iloc[0] == "cuModuleLoadData ×1, KernelExecutor::compileFusion ×1"
    assert f.evidence["set_aside"].tolist() == [False]
    assert [(i.start_ns, i.end_ns, i.label) for i in f.instances] == [(15_000, 10_015_000, "start-up calls (counted as idle)")]  # times from the first event (the launch at -5 µs)
    # one home: what the ledger does not book as warm-up, TI001 counts
    (g,) = _codes(a, "TI001")
    assert g.impact_ns == 10_000_000 and g.metrics["warmup_excluded_ns"] == 0


def test_ti013_negative_steady_steps(tmp_path):
    t = KinetoTrace()
    _steady(t)
    assert _codes(traceinsight.analyze(t.write(tmp_path / "steady.json")), "TI013") == []


def test_ti013_and_ti001_share_the_ledgers_warmup_on_alexnet():
    # AlexNet benchmark: the first convolution (cuDNN autotune) and first pooling calls hold 11.68 s of the 12.92 s
    # window. TI013 reports exactly the ledger's warm-up; TI001 counts none of it, so its cost is host time
    a = traceinsight.analyze(corpus_file("pytorch/hta_alexnet_a100_cudasync.json.gz"), select=["TI001", "TI013"])
    lg = a.ledger.gaps
    warm = int(lg["idle_warmup"].sum())
    assert warm == pytest.approx(11_675_400_000, rel=1e-4)
    (w,) = _codes(a, "TI013")
    assert w.metrics["warmup_ns"] == warm and w.metrics["startup_counted_as_idle_ns"] == 0
    assert "first call of aten::cudnn_convolution" in w.evidence.sort_values("warmup_ms")["one_time_work"].iloc[-1]
    (f,) = _codes(a, "TI001")
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
    (w,) = _codes(a, "TI013")
    assert w.metrics["warmup_ns"] == 0 and w.metrics["startup_counted_as_idle_ns"] == 396_815_915
    assert "KernelExecutor::compileFusion" in w.evidence["one_time_work"].iloc[0] and "counted as idle" in w.title
    (f,) = _codes(a, "TI001")
    assert f.metrics["warmup_excluded_ns"] == 0 and f.impact_ns >= 396_815_915


# --- TI014 events lost --------------------------------------------------------------------------------------------
def test_ti014_truncated_json(tmp_path):
    t = KinetoTrace()
    _steady(t, steps=8)
    p = t.write(tmp_path / "full.json", gz=False)
    data = p.read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[: int(len(data) * 0.8)])
    a = traceinsight.analyze(cut)
    (f,) = _codes(a, "TI014")
    assert f.category == "trace_quality" and "truncated" in f.evidence["reader_warning"].iloc[0]


def test_ti014_negative_complete_file(tmp_path):
    t = KinetoTrace()
    _steady(t, steps=8)
    assert _codes(traceinsight.analyze(t.write(tmp_path / "full.json", gz=False)), "TI014") == []


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
    from traceinsight.severity import base_ns, level, share_pct

    assert level(share_pct(f, a.views)) is Severity.ERROR
    # the page grades the figure it shows: the idle the ledger holds for the finding, on the same steady window
    assert f.share_pct == pytest.approx(100.0 * f.saving_ns / base_ns(f, a.views), abs=1e-3)
    assert f.severity is level(f.share_pct)
    plain = KinetoTrace()  # the same loop without the warm-up step: the same 1.3 ms is 21 % of it too
    _steady_after(plain, 0.0)
    b = traceinsight.analyze(plain.write(tmp_path / "plain.json"), rules=[tmp_path / "planted.py"])
    (g,) = _codes(b, "ZZ901")
    assert level(share_pct(g, b.views)) is Severity.ERROR
