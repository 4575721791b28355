"""Trace-quality rules TI011-TI014 on traces written by the test helpers: each fires on the recording it describes
and stays silent on a sound one; while TI012 stands, performance findings stay at info and the verdict says the
trace cannot be judged."""

from __future__ import annotations

import pytest

import traceinsight
from tests.conftest import corpus_file
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.rule_api import Severity
from traceinsight.verdict import details, headline

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
    assert d["category"] == "cannot_judge" and d["why"] == "too_little_gpu_work" and not d["bound"]


def test_ti012_graph_capture(tmp_path):
    # 400 launches recorded while a graph is captured, 2 kernels executed (the held-back HIP-graph case)
    t = KinetoTrace()
    _steady(t, steps=2)
    for i in range(400):
        t.runtime("cudaLaunchKernel", 3_000.0 + i * 5, 3.0)
    t.runtime("cudaStreamBeginCapture", 2_990.0, 5.0)
    t.runtime("cudaStreamEndCapture", 5_000.0, 5.0)
    t.runtime("cudaGraphInstantiate", 5_010.0, 900.0)
    a = traceinsight.analyze(t.write(tmp_path / "capture.json"))
    (f,) = _codes(a, "TI012")
    assert f.metrics["graph_capture"] and f.metrics["launch_calls"] >= 400
    # the capture and instantiation are one-time work in the ledger; the verdict is "cannot judge", never a bound,
    # and no saving is drawn from the window
    reasons = a.ledger.warmup["reason"].tolist()
    assert "graph capture (launches recorded, not run)" in reasons and "one-time set-up: cudaGraphInstantiate" in reasons
    d = details(a)
    assert d["category"] == "cannot_judge" and d["why"] == "graph_capture" and not d["bound"]
    assert headline(a)["est_savings_ns"] == 0


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
    assert f.evidence["one_time_work"].tolist() == ["warm-up step (ProfilerStep#0); allocator growth: cudaMalloc; one-time set-up: cudaGetDeviceProperties"]
    assert f.evidence["set_aside"].tolist() == [True]
    assert [(i.start_ns, i.end_ns, i.label) for i in f.instances] == [(20_000, 20_020_000, "warm-up")]
    # kept out of the steady-state idle: no TI001 for a loop that is busy from step 1 on
    assert _codes(a, "TI001") == []


def test_ti013_start_up_calls_are_one_time_work_wherever_they_sit(tmp_path):
    # no steps, one module load and one JIT compile in the head gap: one-time work by their names, so the ledger
    # books the 9.7 ms they cover as warm-up; what is left (2 ms of kernels, no steps) is too little to judge
    t = KinetoTrace()
    t.kernel(GEMM, 0.0, 10.0, launch_us=-5.0, launch_dur_us=3.0, grid=GRID)
    t.runtime("cuModuleLoadData", 100.0, 2_000.0)
    t.cpu_op("KernelExecutor::compileFusion", 2_200.0, 7_700.0)
    for i in range(40):
        t.kernel(GEMM, 10_010.0 + i * 50, 50.0, launch_us=10_000.0 + i * 0.4, launch_dur_us=0.3, grid=GRID)
    a = traceinsight.analyze(t.write(tmp_path / "jit.json"))
    assert int(a.ledger.gaps["idle_warmup"].sum()) == 9_700_000
    assert sorted(a.ledger.warmup["reason"]) == ["one-time set-up: KernelExecutor::compileFusion", "one-time set-up: cuModuleLoadData"]
    (f,) = _codes(a, "TI013")
    assert f.metrics["warmup_ns"] == 9_700_000 and f.metrics["startup_counted_as_idle_ns"] == 0
    assert f.evidence["set_aside"].tolist() == [True]
    # one home: what the ledger books as warm-up, TI001 does not count, and the verdict sets aside
    assert _codes(a, "TI001") == [] or all(g.metrics["warmup_excluded_ns"] == 9_700_000 for g in _codes(a, "TI001"))
    d = details(a)
    assert d["category"] == "cannot_judge" and d["why"] == "warmup" and "81 % of the window" in d["sentence"]
    assert headline(a)["est_savings_ns"] == 0


def test_ti013_first_launches_load_modules_through_the_window(tmp_path):
    # a first forward in a fresh process: each kernel's first cudaLaunchKernel takes 20 ms (lazy module
    # loading), scattered through the window between fast repeated launches
    t = KinetoTrace()
    at = 0.0
    for rep in range(3):
        for k in range(6):
            name = f"kernel_{k}"
            slow = rep == 0
            dur = 20_000.0 if slow else 5.0
            t.kernel(name, at + dur + 5.0, 30.0, launch_us=at, launch_dur_us=dur, grid=GRID)
            at += dur + 40.0
    a = traceinsight.analyze(t.write(tmp_path / "cold.json"))
    first = a.ledger.warmup[a.ledger.warmup["reason"].str.startswith("first launch of")]
    assert sorted(first["reason"]) == [f"first launch of kernel_{k} (module load)" for k in range(6)]
    t_ = a.ledger.totals()
    assert t_["idle_warmup"] == 5 * 20_000_000  # the first load comes before the GPU's window opens
    # 120 ms of module loading and under 1 ms of GPU work: the window cannot be judged, nothing above info,
    # no saving drawn from the loads, and the what-if baseline is the steady state
    d = details(a)
    assert d["category"] == "cannot_judge" and not d["bound"]
    assert all(f.severity.value == "info" for f in a.findings if f.category != "trace_quality")
    assert headline(a)["est_savings_ns"] == 0
    assert "cudaProfilerStart" not in d["record_better"] and "torch.profiler.schedule" in d["record_better"]


def test_cold_window_with_steps_is_judged_without_its_one_time_work(tmp_path):
    # four steps; module loads (first launches of 15 ms) sit inside step 0 and in the middle of step 1 (a kernel
    # first used there); steps 2 and 3 are steady. The loads are booked, and the verdict reads the rest
    t = KinetoTrace()
    b = 0.0
    for s in range(6):
        slow = {0: (0, 1, 2), 1: (3,)}.get(s, ())
        start = b
        at = b + 10.0
        for k in range(3 if s == 0 else 4):
            d = 15_000.0 if k in slow else 5.0
            t.kernel(f"kernel_{k}", at + d + 5.0, 400.0, launch_us=at, launch_dur_us=d, grid=GRID)
            at += d + 410.0
        t.step(s, start, at - start + 10.0)
        b = at + 20.0
    a = traceinsight.analyze(t.write(tmp_path / "cold_steps.json"))
    reasons = a.ledger.warmup["reason"].tolist()
    assert sum(r.startswith("first launch of") for r in reasons) == 4
    d = details(a)
    assert d["category"] != "cannot_judge"
    assert d["category"] == "compute"  # the steady steps launch back to back: the GPU is the bound
    assert headline(a)["est_savings_ns"] < 1_000_000
    assert not any(f.severity.rank >= Severity.WARNING.rank for f in a.findings if f.category != "trace_quality")


def test_ti013_negative_steady_steps(tmp_path):
    t = KinetoTrace()
    _steady(t)
    assert _codes(traceinsight.analyze(t.write(tmp_path / "steady.json")), "TI013") == []


def test_ti013_and_ti001_share_the_ledgers_warmup_on_alexnet():
    # AlexNet benchmark: the first convolution (cuDNN autotune), the first pooling and a 3 s first launch of a cuDNN
    # kernel hold 12.78 s of the 12.92 s window. TI013 reports exactly the ledger's warm-up; TI001 counts none of it
    a = traceinsight.analyze(corpus_file("pytorch/hta_alexnet_a100_cudasync.json.gz"), select=["TI001", "TI013"])
    lg = a.ledger.gaps
    warm = int(lg["idle_warmup"].sum())
    assert warm == pytest.approx(12_777_121_000, rel=1e-4)
    (w,) = _codes(a, "TI013")
    assert w.metrics["warmup_ns"] == warm and w.metrics["startup_counted_as_idle_ns"] == 0
    assert "first call of aten::cudnn_convolution" in " ".join(w.evidence["one_time_work"])
    (f,) = _codes(a, "TI001")
    assert f.metrics["warmup_excluded_ns"] == warm
    steady = (lg["dur_ns"] - lg["idle_warmup"]).to_numpy()
    assert f.impact_ns == int(steady[steady >= 100_000].sum())
    assert f.metrics["top_cause"].startswith("host busy") and "warm-up" not in f.title
    assert not any(c.startswith("warm-up") for c in f.metrics["cause_ns"])


def test_ti013_jit_compile_on_nvfuser_is_one_time_work():
    # nvFuser: KernelExecutor::compileFusion / NVRTC (397 ms) and first launches that load modules fill 84 % of
    # the window, with 0.4 ms of GPU work left and no steps: the window cannot be judged
    a = traceinsight.analyze(corpus_file("nsys/nsys2024.6_nvfuser-pytorch_h200.sqlite"))
    led = a.ledger
    reasons = " ".join(led.warmup["reason"])
    assert "KernelExecutor::compileFusion" in reasons and "first launch of reduce_kernel" in reasons
    assert led.totals()["idle_warmup"] == pytest.approx(425_299_838, rel=1e-3)
    (w,) = _codes(a, "TI013")
    assert w.metrics["startup_counted_as_idle_ns"] == 0
    d = details(a)
    assert d["category"] == "cannot_judge" and d["why"] == "warmup"
    assert "--capture-range=cudaProfilerApi" in d["record_better"]
    assert headline(a)["est_savings_ns"] == 0
    assert all(f.severity.value == "info" for f in a.findings if f.category != "trace_quality")


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
    assert f.severity is Severity.ERROR
    plain = KinetoTrace()  # the same loop without the warm-up step: the same 1.3 ms is 21 % of it too
    _steady_after(plain, 0.0)
    (g,) = _codes(traceinsight.analyze(plain.write(tmp_path / "plain.json"), rules=[tmp_path / "planted.py"]), "ZZ901")
    assert g.severity is Severity.ERROR


def test_blocking_call_at_the_window_start_is_one_time_work(tmp_path):
    # nsys: the capture opens while the host is blocked in a cudaMemcpy DtoH that waits on 300 ms of kernels queued
    # before the capture started (they ran, their launches are not in the file); then 8 steady NVTX steps
    from tests.helpers.nsys_writer import NsysTrace

    t = NsysTrace()
    for i in range(3):
        t.kernel("queued_before", 1_000_000 + i * 100_000_000, 99_000_000, launch=False)
    t.memcpy("DtoH", 301_000_000, 50_000, 4096, sync=True, launch_ns=500_000, launch_dur_ns=300_600_000)
    b = 302_000_000
    for s in range(8):
        t.step(s, b, 2_000_000)
        for k in range(10):
            t.kernel("gemm", b + 20_000 + k * 190_000, 180_000, launch_ns=b + 10_000 + k * 1_000, launch_dur_ns=800)
        b += 2_000_000
    a = traceinsight.analyze(t.write(tmp_path / "opening_block.sqlite"))
    opening = a.ledger.warmup[a.ledger.warmup["reason"].str.contains("at the window's start")]
    assert len(opening) == 1 and int(opening["start_ns"].iloc[0]) <= int(a.ledger.windows["start_ns"].iloc[0]) + 1_000_000
    d = details(a)
    assert d["category"] != "host_sync" and d["bound"]
    assert a.ledger.totals()["idle_host_sync"] < 1_000_000  # only the ms after the call returned, before step 0
    assert not any(f.severity.rank >= Severity.WARNING.rank for f in a.findings if f.category != "trace_quality")


def test_a_finding_only_one_time_work_supports_stays_at_info(tmp_path):
    # the cold window with steps: a performance finding pointing at the module loads (their 15 ms launch calls) is
    # graded info; the same finding pointing at steady steps keeps the scale's grade
    from traceinsight.rule_api import Finding, Location, as_instances
    from traceinsight.severity import grade
    from traceinsight.steady import one_time_ns

    t = KinetoTrace()
    b = 0.0
    for s in range(6):
        slow = {0: (0, 1, 2), 1: (3,)}.get(s, ())
        start, at = b, b + 10.0
        for k in range(3 if s == 0 else 4):
            d = 15_000.0 if k in slow else 5.0
            t.kernel(f"kernel_{k}", at + d + 5.0, 400.0, launch_us=at, launch_dur_us=d, grid=GRID)
            at += d + 410.0
        t.step(s, start, at - start + 10.0)
        b = at + 20.0
    a = traceinsight.analyze(t.write(tmp_path / "cold_steps.json"))
    loads = a.ledger.warmup[a.ledger.warmup["reason"].str.startswith("first launch of")]
    inst = loads[["start_ns", "end_ns"]].assign(rank=0, device=0)

    def finding(instances, impact):
        return Finding(code="TI003", title="t", severity=Severity.ERROR, message="", impact_ns=impact,
                       location=Location(rank=0, device=0), category="launch_overhead", instances=as_instances(instances))

    assert one_time_ns(a.views, inst) == (60_000_000, 60_000_000)
    on_loads = finding(inst, 60_000_000)
    steady = a.views.steps.iloc[3:5]
    on_steps = finding(steady[["start_ns", "end_ns"]].assign(rank=0, device=0), 60_000_000)
    out = grade([on_loads, on_steps], a.views, {})
    assert [f.severity.value for f in out] == ["info", "error"]
