"""TI013 warmup-in-window: its positive, negative and fix cases, on planted traces and the real corpus."""

from __future__ import annotations

import pytest

import traceinsight
from tests.conftest import corpus_file
from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.rule_cases import GEMM, GRID, steady_steps, with_warmup


#: positive: it fires; negative: it stays silent; fix: the same steps without the start-up step.
CASES = {
    "positive": ["test_ti013_first_step_init", "test_ti013_plain_cuda_capture_is_told_to_start_after_warmup", "test_ti013_and_ti001_share_the_ledgers_warmup_on_alexnet",
                 "test_ti013_torchscript_fuser_compiling_inside_one_op", "test_ti013_set_up_before_the_first_kernel_without_steps"],
    "negative": ["test_ti013_negative_steady_steps", "test_ti013_negative_fusion_op_that_is_slow_every_time",
                 "test_ti013_negative_head_like_the_other_gaps"],
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
    # (+2.45 ms since the long gap of set-up between the inputs' copies and the first kernel counts as start-up: no steps)
    assert warm == pytest.approx(12_779_569_000, rel=1e-4)
    assert "set-up before the first kernel (program start-up)" in set(a.ledger.warmup["reason"])
    (w,) = _of_code(a, "TI013")
    assert w.metrics["warmup_ns"] == warm and w.metrics["startup_counted_as_idle_ns"] == 0
    assert "first call of aten::cudnn_convolution" in " ".join(w.evidence["one_time_work"])
    (f,) = _of_code(a, "TI001")
    assert f.metrics["warmup_excluded_ns"] == warm
    steady = (lg["dur_ns"] - lg["idle_warmup"]).to_numpy()
    assert f.impact_ns == int(steady[steady >= 100_000].sum())
    # the benchmark makes its inputs on the CPU every iteration (aten::uniform_ of CPU tensors, no GPU call): the
    # steady-state idle is mostly that CPU work, the rest host busy in ops that launch
    assert f.metrics["top_cause"] == "CPU work in ops that make no GPU call" and "warm-up" not in f.title
    assert f.metrics["cause_ns"]["host busy in CPU ops (launch queue empty)"] > 0
    assert not any(c.startswith("warm-up") for c in f.metrics["cause_ns"])




def _torchscript_calls(t: KinetoTrace, compile_ms: float = 296.0, every: bool = False) -> None:
    """Five forward calls of a scripted model, no step markers: aten::mm then ``prim::FusionGroup`` (one fused kernel).
    The second call's fusion group compiles for ``compile_ms`` before launching (TorchScript's profiling executor
    compiles on the second run); ``every``: every call's takes that long (a fusion group that never settles)."""
    t0 = 0.0
    for i in range(5):
        op = t.cpu_op("aten::mm", t0, 40)
        t.kernel(GEMM, t0 + 20, 300, launch_us=t0 + 10, op=op)
        slow = every or i == 1
        d = compile_ms * 1000 if slow else 60.0
        op = t.cpu_op("prim::FusionGroup", t0 + 330, d)
        t.kernel("kernel_0_fused_mul_add_tanh", t0 + 330 + d - 10, 50, launch_us=t0 + 330 + d - 20, op=op)
        t0 += 330 + d + 100


def test_ti013_torchscript_fuser_compiling_inside_one_op(tmp_path):
    """No steps: the 296 ms call of prim::FusionGroup (its other calls take 60 µs, the GPU idles under it) is JIT
    compilation: TI013 claims it as warm-up, and TI001 prices none of it."""
    t = KinetoTrace()
    _torchscript_calls(t)
    a = traceinsight.analyze(t.write(tmp_path / "ts.json"), min_impact=0)
    assert "JIT compilation inside prim::FusionGroup (one-time)" in set(a.ledger.warmup["reason"])
    (w,) = _of_code(a, "TI013")
    assert w.metrics["warmup_ns"] >= 295_000_000
    assert all(f.impact_ns < 1_000_000 for f in _of_code(a, "TI001"))


def test_ti013_negative_fusion_op_that_is_slow_every_time(tmp_path):
    t = KinetoTrace()
    _torchscript_calls(t, compile_ms=5.0, every=True)
    a = traceinsight.analyze(t.write(tmp_path / "slow.json"))
    assert not any(r.startswith("JIT compilation") for r in a.ledger.warmup["reason"])


def _head(tmp_path, head_ms: float, gap_us: float, name: str):
    """An Nsight capture without steps: the weights copied to the GPU, ``head_ms`` of set-up on the host (imports,
    model construction: untraced), then 40 kernels of 200 µs launched ``gap_us`` apart."""
    from tests.helpers.nsys_writer import NsysTrace

    t = NsysTrace()
    t.memcpy("HtoD", 1_000_000, 2_000_000, 512 << 20, launch_ns=900_000)
    t0 = 3_000_000 + int(head_ms * 1e6)
    for i in range(40):
        s = t0 + i * int(200_000 + gap_us * 1000)
        t.kernel("sm90_xmma_gemm_bf16bf16_bf16f32", s, 200_000, launch_ns=s - 20_000)
    return traceinsight.analyze(t.write(tmp_path / name), min_impact=0)


def test_ti013_set_up_before_the_first_kernel_without_steps(tmp_path):
    """~2.3 s of set-up between the weights' copy and the first kernel, gaps of 150 µs afterwards: set-up, claimed by
    TI013, never TI001's idle nor the verdict's."""
    a = _head(tmp_path, 2_300.0, 150.0, "head.nsys.sqlite")
    assert "set-up before the first kernel (program start-up)" in set(a.ledger.warmup["reason"])
    (w,) = _of_code(a, "TI013")
    assert w.metrics["warmup_ns"] >= 2_290_000_000
    assert all(f.impact_ns < 10_000_000 for f in _of_code(a, "TI001"))


def test_ti013_negative_head_like_the_other_gaps(tmp_path):
    """A loop sliced between a copy and its kernels: a 1.5 ms head beside 1 ms gaps is not set-up."""
    a = _head(tmp_path, 1.5, 1_000.0, "slice.nsys.sqlite")
    assert "set-up before the first kernel (program start-up)" not in set(a.ledger.warmup["reason"])


def test_ti013_plain_cuda_capture_is_told_to_start_after_warmup(tmp_path):
    """The same set-up in an Nsight capture of a plain CUDA program: the fix starts the capture after warm-up with
    nsys' capture range, never PyTorch's profiler schedule (the audit's recon_report3.sqlite)."""
    from traceinsight.render import render

    a = _head(tmp_path, 2_300.0, 150.0, "head.nsys.sqlite")
    assert a.framework == "cuda"
    (w,) = _of_code(a, "TI013")
    assert list(w.fixes)[0] == "cuda"
    fx = w.fixes["cuda"]
    assert "--capture-range=cudaProfilerApi" in fx.text and "nvtxRangePushA" in fx.code
    md = render(a, "md", html_name="report.html")
    assert "**Fix in CUDA:** Start the capture after the first iterations" in md
    assert "Fix in PyTorch" not in md and "torch.profiler" not in md
