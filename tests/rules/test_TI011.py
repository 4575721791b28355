"""TI011 no-gpu-activity: its positive, negative and fix cases, on planted traces and the real corpus."""

from __future__ import annotations

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.rule_cases import steady_steps
from traceinsight.assess.verdict import details


#: positive: it fires; negative: it stays silent; fix: the same program with its GPU activity recorded.
CASES = {
    "positive": ["test_ti011_runtime_calls_without_gpu_activity", "test_ti011_plain_cuda_capture_is_told_how_to_record_with_nsys"],
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


def test_ti011_plain_cuda_capture_is_told_how_to_record_with_nsys(tmp_path):
    """An Nsight capture of a plain CUDA program (runtime calls, no kernel rows, no framework's names) is a "cuda"
    trace: its fix is the CUDA one (nsys with CUDA tracing on), never PyTorch's ``torch.profiler`` under "Fix in
    PyTorch" (the audit's ltgemm_profile.sqlite and qcu_report7.sqlite)."""
    from tests.helpers.nsys_writer import NsysTrace
    from traceinsight.render import render

    t = NsysTrace()
    t.runtime("cudaMalloc", 1_000_000, 100_000)
    t.runtime("cudaMemcpy", 2_000_000, 50_000)
    t.runtime("cudaFree", 3_000_000, 80_000)
    a = traceinsight.analyze(t.write(tmp_path / "nokernels.sqlite"))
    assert a.framework == "cuda"
    (f,) = _of_code(a, "TI011")
    assert f.metrics["gpu_api_calls"] == 3
    assert list(f.fixes)[0] == "cuda"
    assert "--trace=cuda" in f.fixes["cuda"].text and "cudaProfilerStart" in f.fixes["cuda"].code
    md = render(a, "md", html_name="report.html")
    assert "**Fix in CUDA:** Record the GPU's activity" in md
    assert "Fix in PyTorch" not in md and "torch.profiler" not in md


def test_ti011_a_tpu_profile_is_said_to_be_out_of_reach(tmp_path):
    """A JAX run on TPUs: its XSpace has /device:TPU planes and no GPU. That is not a capture "without a GPU" to be
    fixed by installing CUDA jaxlib: the finding says the TPUs' work is not read here, with no fix to apply."""
    import traceinsight
    from tests.helpers.xplane_writer import XSpaceTrace

    t = XSpaceTrace()
    t.gpu.name = "/device:TPU:0"
    t.gpu.stats = []
    t.op("TfrtTpuLoadedExecutable::Execute", 0, 2_000_000)
    t.kernel("fusion.1", 100_000, 1_500_000)  # on the TPU plane's line: an XLA op
    a = traceinsight.analyze(t.write(tmp_path / "tpu.xplane.pb"))
    (f,) = [x for x in a.findings if x.code == "TI011"]
    assert f.title == "TPU profile: 1 TPU(s) ran the work, and traceinsight reads GPU traces only"
    assert f.fixes == {} and f.severity.value == "info" and f.metrics["tpu_planes"] == 1
    assert not any("recorded without a GPU" in w or "no /device:GPU planes" in w for w in a.timeline.meta.warnings)
    assert any(w.startswith("TPU profile: 1 /device:TPU planes") for w in a.timeline.meta.warnings)


def _mtia_inference(t) -> None:
    """An MTIA inference capture as kineto writes it: ops and ``mtia_runtime`` calls on the host (a command's record
    and enqueue share one correlation id), the device's command-processor events (``mtia_ccp_events``) on the
    device's pid, and no CUDA kernel or copy."""
    for i in range(4):
        t0 = i * 1_000.0
        t.cpu_op("aten::linear", t0, 300.0)
        for name in ("recordEvent", "enqueueCommand memcpyHtoDAsync"):
            t.events.append({"ph": "X", "cat": "mtia_runtime", "name": name, "pid": t.pid, "tid": t.tid, "ts": t._ts(t0 + 10), "dur": 5.0,
                             "args": {"correlation": 500 + i, "device": 17, "stream_id": "108"}})
        for j, name in enumerate(("dma_request", "pe_exe", "event_wait")):
            t.events.append({"ph": "X", "cat": "mtia_ccp_events", "name": name, "pid": 17, "tid": 3900 + j, "ts": t._ts(t0 + 50 + 100 * j), "dur": 80.0,
                             "args": {"stream": 108}})


def test_ti011_an_mtia_profile_is_said_to_be_out_of_reach(tmp_path):
    """An MTIA run recorded its device's work as ``mtia_ccp_events``: the accelerator ran, so "record CUDA
    activities" would be a wrong fix; the finding names the accelerator and its unread events, at info, with no fix.
    Its runtime giving a command's calls one correlation id loses no link (there is no GPU row to link to), so no
    lost-events warning either."""
    import traceinsight
    from tests.helpers.kineto_writer import KinetoTrace

    t = KinetoTrace()
    _mtia_inference(t)
    a = traceinsight.analyze(t.write(tmp_path / "mtia.json"))
    (f,) = [x for x in a.findings if x.code == "TI011"]
    assert f.title == "MTIA profile: the MTIA accelerator ran the work, and traceinsight reads GPU timelines only"
    assert f.fixes == {} and f.severity.value == "info" and f.metrics["unread_device_events"] == 12
    assert "12 MTIA device events (mtia_ccp_events)" in f.message
    assert a.timeline.meta.extra["unread_accelerator"] == {"name": "MTIA", "events": 12, "categories": ["mtia_ccp_events"]}
    assert not any("correlation ids" in w for w in a.timeline.meta.warnings)
    assert "TI014" not in {x.code for x in a.findings}


def test_ti011_shared_correlation_ids_are_still_lost_links_beside_gpu_rows(tmp_path):
    """The same shared ids beside a CUDA kernel: a link to a GPU row may be lost, so the warning stays."""
    import traceinsight
    from tests.helpers.kineto_writer import KinetoTrace

    t = KinetoTrace()
    _mtia_inference(t)
    for i in range(2):
        t.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": t.pid, "tid": t.tid, "ts": t._ts(5_000 + i), "dur": 0.5,
                         "args": {"correlation": 900}})
    t.kernel("sgemm", 5_100, 50, launch_us=5_010)
    a = traceinsight.analyze(t.write(tmp_path / "mixed.json"))
    assert any("runtime calls share" in w for w in a.timeline.meta.warnings)
