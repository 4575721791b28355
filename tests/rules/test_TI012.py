"""TI012 little-gpu-work: its positive, negative and fix cases, on planted traces and the real corpus."""

from __future__ import annotations

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.rule_cases import steady_steps
from traceinsight.verdict import details


#: positive: it fires; negative: it stays silent; fix: steady steps with enough GPU work.
CASES = {
    "positive": ["test_ti012_two_kernels", "test_ti012_graph_capture"],
    "negative": ["test_ti012_negative_steady_steps"],
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
    assert d["category"] == "too_little" and not d["bound"]


def test_ti012_graph_capture(tmp_path):
    # 400 launches recorded while a graph is captured, 2 kernels executed (the held-back HIP-graph case)
    t = KinetoTrace()
    steady_steps(t, steps=2)
    for i in range(400):
        t.runtime("cudaLaunchKernel", 3_000.0 + i * 5, 3.0)
    a = traceinsight.analyze(t.write(tmp_path / "capture.json"))
    (f,) = _of_code(a, "TI012")
    assert f.metrics["graph_capture"] and f.metrics["launch_calls"] >= 400


def test_ti012_negative_steady_steps(tmp_path):
    t = KinetoTrace()
    steady_steps(t)
    a = traceinsight.analyze(t.write(tmp_path / "steady.json"))
    assert _of_code(a, "TI012") == []
    assert details(a)["category"] == "compute"
