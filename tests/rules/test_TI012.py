"""TI012 little-gpu-work: its positive, negative and fix cases, on planted traces and the real corpus."""

from __future__ import annotations

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.rule_cases import steady_steps
from traceinsight.assess.verdict import details, headline


#: positive: it fires; negative: it stays silent; fix: steady steps with enough GPU work.
CASES = {
    "positive": ["test_ti012_two_kernels", "test_ti012_graph_capture", "test_ti012_plain_cuda_capture_is_told_nsys_capture_range"],
    "negative": ["test_ti012_negative_steady_steps", "test_ti012_negative_one_capture_among_real_work"],
    "fix": ["test_ti012_negative_steady_steps"],
}


def _of_code(a, code):
    return [f for f in a.findings if f.code == code]


def test_ti012_two_kernels(tmp_path):
    # two 5 µs kernels 10 ms apart: "0.1 % busy" and "idle 99.9 %" would both be noise
    t = KinetoTrace()
    t.step(0, 0.0, 11_000.0)
    t.cpu_op("aten::index", 100.0, 9_800.0)
    t.kernel("vectorized_elementwise_kernel", 50.0, 5.0, launch_us=40.0)
    t.kernel("reduce_kernel", 10_050.0, 5.0, launch_us=10_000.0)
    a = traceinsight.analyze(t.write(tmp_path / "tiny.json"))
    (f,) = _of_code(a, "TI012")
    assert f.metrics["gpu_ops"] == 2 and f.metrics["gpu_busy_ns"] == 10_000
    assert f.severity.value == "warning" and not f.metrics["graph_capture"]
    # the idle gap is still found, but judgement is withheld: info, and no performance verdict
    (idle,) = _of_code(a, "TI001")
    assert idle.severity.value == "info"
    d = details(a)
    assert d["category"] == "cannot_judge" and d["why"] == "too_little_gpu_work" and not d["bound"]


def test_ti012_graph_capture(tmp_path):
    # 400 launches recorded while a graph is captured, 2 kernels executed (the held-back HIP-graph case)
    t = KinetoTrace()
    steady_steps(t, steps=2)
    for i in range(400):
        t.runtime("cudaLaunchKernel", 3_000.0 + i * 5, 3.0)
    t.runtime("cudaStreamBeginCapture", 2_990.0, 5.0)
    t.runtime("cudaStreamEndCapture", 5_000.0, 5.0)
    t.runtime("cudaGraphInstantiate", 5_010.0, 900.0)
    a = traceinsight.analyze(t.write(tmp_path / "capture.json"))
    (f,) = _of_code(a, "TI012")
    assert f.metrics["graph_capture"] and f.metrics["launch_calls"] >= 400
    # the capture and instantiation are one-time work in the ledger; the verdict is "cannot judge", never a bound,
    # and no saving is drawn from the window
    reasons = a.ledger.warmup["reason"].tolist()
    assert "graph capture (launches recorded, not run)" in reasons and "one-time set-up: cudaGraphInstantiate" in reasons
    d = details(a)
    assert d["category"] == "cannot_judge" and d["why"] == "graph_capture" and not d["bound"]
    assert headline(a)["est_savings_ns"] == 0
    # the title names what makes the window unjudgeable, counted inside the capture: the launches it recorded
    # (the 400 between begin and end), not launches against kernels over the whole window
    assert f.title.startswith("Cannot judge this window: graph capture: 400 kernel launches were recorded inside "
                              "1 stream capture(s) (2.02 ms), where they do not run")


def test_ti012_negative_steady_steps(tmp_path):
    t = KinetoTrace()
    steady_steps(t)
    a = traceinsight.analyze(t.write(tmp_path / "steady.json"))
    assert _of_code(a, "TI012") == []
    assert details(a)["category"] == "compute"


def test_ti012_negative_one_capture_among_real_work(tmp_path):
    """One graph instantiation among steps whose kernels run (XLA builds its command buffers, torch.compile captures
    once while warming up): the kernels that ran outnumber the launches recorded, so the window is no capture."""
    t = KinetoTrace()
    steady_steps(t)
    t.runtime("cudaGraphInstantiate", 50.0, 900.0)
    a = traceinsight.analyze(t.write(tmp_path / "one_capture.json"))
    assert _of_code(a, "TI012") == []
    assert details(a)["category"] != "cannot_judge"


def test_ti012_plain_cuda_capture_is_told_nsys_capture_range(tmp_path):
    """Two kernels in an Nsight capture of a plain CUDA program: the fix is to record steady iterations with nsys'
    capture range, not PyTorch's ``g.replay()`` under a torch.profiler schedule (the audit's recon_report3.sqlite)."""
    from tests.helpers.nsys_writer import NsysTrace
    from traceinsight.render import render

    t = NsysTrace()
    t.kernel("vecadd_kernel", 1_050_000, 5_000, launch_ns=1_040_000)
    t.kernel("reduce_kernel", 11_050_000, 5_000, launch_ns=11_000_000)
    a = traceinsight.analyze(t.write(tmp_path / "tiny.sqlite"))
    assert a.framework == "cuda"
    (f,) = _of_code(a, "TI012")
    assert f.metrics["gpu_ops"] == 2
    assert list(f.fixes)[0] == "cuda"
    assert "--capture-range=cudaProfilerApi" in f.fixes["cuda"].text and "cudaGraphLaunch" in f.fixes["cuda"].code
    md = render(a, "md", html_name="report.html")
    assert "Fix in PyTorch" not in md and "g.replay()" not in md and "**Fix in CUDA:** Record a few steady" in md
