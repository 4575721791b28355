"""TI003 tiny-kernels: its positive, negative and fix cases, on planted traces and the real corpus."""

from __future__ import annotations

import pytest

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.rule_cases import GEMM, GRID, Example, analyze_example, busy_steps, codes_of, findings_of


#: positive: it fires; negative: it stays silent; fix: the same workload, fixed as its fix text says.
CASES = {
    "positive": ["test_ti003_launch_bound", "test_example_bad_fires"],
    "negative": ["test_ti003_negative_small_but_queued", "test_ti003_negative_big_kernels", "test_example_good_is_silent"],
    "fix": ["test_ti003_fix_keeps_the_work", "test_ti003_compiled_model_gets_graphs_or_batch", "test_ti003_optimizer_in_use_is_not_advised", "test_ti003_inference_is_not_told_to_fuse_its_optimizer"],
}


def test_ti003_launch_bound(tmp_path):
    t = KinetoTrace()
    t.step(0, 0.0, 2000.0)
    for i in range(100):  # 3 µs kernels launched every 15 µs: GPU idle 12 µs before each
        op = t.cpu_op("aten::add_", i * 15.0, 14.0)
        t.kernel("vectorized_elementwise_kernel<AddFunctor>", i * 15.0 + 10, 3.0, launch_us=i * 15.0 + 2, launch_dur_us=6.0, op=op)
    (f,) = findings_of(t.write(tmp_path / "t.json"), "TI003")
    assert f.metrics["launch_bound_kernels"] == 100 and f.metrics["launch_bound_share_pct"] == 100.0
    assert f.impact_ns == pytest.approx(99 * 12_000, rel=0.01)
    assert f.evidence["launched_by"].iloc[0] == "aten::add_" and f.evidence["count"].iloc[0] == 100


def test_ti003_negative_small_but_queued(tmp_path):
    t = KinetoTrace()
    t.step(0, 0.0, 2000.0)
    for i in range(100):  # tiny kernels but the queue is full: back to back, no idle
        t.kernel("tiny", 100.0 + i * 5.0, 5.0, launch_us=i * 0.9, launch_dur_us=0.8)
    assert findings_of(t.write(tmp_path / "t.json"), "TI003") == []


def _two_stream_periods(t: KinetoTrace, periods: int, late) -> None:
    """Per 80 µs period: a 60 µs GEMM on stream 13 (queued well ahead), then two 3 µs kernels on stream 7 that
    must wait for it (event recorded on 13, ``cudaStreamWaitEvent`` on 7). The GPU is idle 8 µs before the first
    tiny kernel of every period. ``late(i)``: is that kernel launched by the host only after the GEMM ended (the
    GPU waits on the host) or queued with the GEMM (the GPU waits on its own event)?"""
    for i in range(periods):
        t0 = i * 80.0
        t.kernel("volta_sgemm_128x64_nn", t0 + 10.0, 60.0, launch_us=t0, launch_dur_us=2.0, stream=13)
        t.runtime("cudaEventRecord", t0 + 2.2, 0.5)
        t.runtime("cudaStreamWaitEvent", t0 + 2.8, 0.5)
        b1 = t0 + 68.0 if late(i) else t0 + 3.5
        t.kernel("vectorized_elementwise_kernel<AddFunctor>", t0 + 78.0, 3.0, launch_us=b1, launch_dur_us=4.0, stream=7)
        t.kernel("vectorized_elementwise_kernel<MulFunctor>", t0 + 81.0, 3.0, launch_us=b1 + 5.0, launch_dur_us=4.0, stream=7)


def test_ti003_counts_only_gaps_the_host_caused(tmp_path):
    t = KinetoTrace()
    t.step(0, 0.0, 50 * 80.0)
    _two_stream_periods(t, 50, late=lambda i: i % 2 == 0)  # every other tiny kernel launched after the GPU ran dry
    a = traceinsight.analyze(t.write(tmp_path / "t.json"), select=["TI003"])
    (f,) = [f for f in a.findings if f.code == "TI003"]
    # 25 gaps of 8 µs waited on the host; the 25 before already-queued kernels are GPU-side waits
    assert f.impact_ns == pytest.approx(25 * 8_000, abs=100)
    assert f.metrics["gpu_dependency_gaps"] == 25 and f.metrics["gpu_dependency_ns"] == pytest.approx(25 * 8_000, abs=100)
    assert len(f.instances) == 25 and f.metrics["launch_bound_kernels"] == 100
    assert f.evidence["kernel"].iloc[0].startswith("vectorized_elementwise_kernel<AddFunctor>")
    assert f.evidence["idle_before_us"].iloc[0] == pytest.approx(200.0, abs=0.2)
    # the ledger agrees: the same 200 µs are launch-bound, the queued gaps GPU-side dependency
    tot = a.ledger.totals()
    assert tot["idle_launch_bound"] == pytest.approx(25 * 8_000, abs=100)
    assert tot["idle_gpu_dependency"] >= 25 * 8_000


def test_ti003_negative_queued_behind_a_cross_stream_event(tmp_path):
    t = KinetoTrace()
    t.step(0, 0.0, 50 * 80.0)
    _two_stream_periods(t, 50, late=lambda i: False)  # the host is always ahead: every gap is the event wait
    a = traceinsight.analyze(t.write(tmp_path / "t.json"), select=["TI003"])
    # 67 % of kernels are tiny and 10 % of the window idles before them, yet none of it waits on a launch
    assert a.ledger.totals()["idle_gpu_dependency"] >= 50 * 8_000 and a.ledger.totals()["idle_launch_bound"] == 0
    assert [f for f in a.findings if f.code == "TI003"] == []


def test_ti003_negative_big_kernels(tmp_path):
    t = KinetoTrace()
    busy_steps(t, 2, 2000.0, 1500.0)
    assert findings_of(t.write(tmp_path / "t.json"), "TI003") == []


def _ti003(t: KinetoTrace, fixed: bool) -> None:
    # An optimizer-style loop of 300 elementwise ops on small tensors: 2 µs kernels that the host can only launch
    # every 8 µs (launch-bound). Fixed with fusion (torch.compile / a fused optimizer, foreach=True): the same math
    # as 10 kernels of 40 µs (fusion also drops the intermediate round trips to memory), still launched 8 µs apart
    # but now each kernel outlasts its launch.
    t.step(0, 0.0, 3_000.0)
    n, dur = (10, 40.0) if fixed else (300, 2.0)
    for i in range(n):
        start = 10 + i * (dur + 0.5) if fixed else 10 + i * 8.0
        op = t.cpu_op("aten::_foreach_add_" if fixed else "aten::add_", start - 8, 7.0)
        t.kernel("vectorized_elementwise_kernel<AddFunctor>", start, dur, launch_us=start - 6, launch_dur_us=5.0, op=op, grid=GRID)


def test_ti003_fix_keeps_the_work(tmp_path):
    bad = analyze_example(tmp_path, EXAMPLE, fixed=False)
    good = analyze_example(tmp_path, EXAMPLE, fixed=True)
    (f,) = [f for f in bad.findings if f.code == "TI003"]
    assert f.metrics["launch_bound_kernels"] == 300
    assert f.impact_ns == pytest.approx(299 * 6_000, rel=0.01)  # each kernel waits 8 - 2 µs on its launch
    assert bad.summary.kernel_count == 300 and good.summary.kernel_count == 10


EXAMPLE = Example(
    "TI003",
    bad="300 eager elementwise ops of 2 µs each, launched every 8 µs: the GPU waits on every launch.",
    good="The same math fused into 10 kernels of 40 µs (torch.compile / foreach optimizer).",
    build=_ti003,
)


def test_example_bad_fires(tmp_path):
    a = analyze_example(tmp_path, EXAMPLE, fixed=False)
    (f,) = [f for f in a.findings if f.code == EXAMPLE.code]
    assert f.impact_ns > 0


def test_example_good_is_silent(tmp_path):
    a = analyze_example(tmp_path, EXAMPLE, fixed=True)
    assert EXAMPLE.code not in codes_of(a), [(f.code, f.title) for f in a.findings]


def test_ti003_graph_replays_are_charged_once(tmp_path):
    # 6 replays of a captured graph: one 60 µs cudaGraphLaunch runs 40 kernels of 30 µs back to back; the next
    # replay is launched 20 µs before the last kernel ends, so the GPU waits 45 µs for it. Kernels of a replay were
    # not launched one by one: only the first of each is compared with the call, so 6 of 240 kernels are
    # "launch-bound" and TI003 stays silent; charged per kernel, all 240 would be (each shorter than its call)
    from tests.helpers.nsys_writer import NsysTrace
    import numpy as np

    from rules.tiny_kernels import _charged_once

    t = NsysTrace()
    b = 1_000_000
    for r in range(6):
        corr = t.runtime("cudaGraphLaunch", b, 60_000)
        for k in range(40):
            t.kernel("graph_node_kernel", b + 65_000 + k * 31_000, 30_000, correlation=corr)
        b += 65_000 + 39 * 31_000 + 30_000 - 20_000
    a = traceinsight.analyze(t.write(tmp_path / "replays.sqlite"))
    assert [f for f in a.findings if f.code == "TI003"] == []
    dur = np.array([200e3, 200e3, 200e3, 5e3])
    idx = np.array([7.0, 7.0, 7.0, 9.0])
    assert np.isnan(_charged_once(dur, idx, np.array([30, 10, 20, 40]))).tolist() == [True, False, True, False]


def test_ti003_compiled_model_gets_graphs_or_batch(tmp_path):
    """torch.compile'd CNN at a small batch, median kernel 4.4 µs, every kernel launch-bound: fusion is done, the lever
    is CUDA graphs (``mode="reduce-overhead"``) or a bigger batch, not "compile the model"."""
    from tests.helpers.model_traces import write_compiled

    (f,) = findings_of(write_compiled(tmp_path / "c.json"), "TI003")
    assert f.metrics["launch_bound_share_pct"] == 100.0
    fx = f.fixes["pytorch"]
    assert fx.text.startswith("The model is already compiled") and 'mode="reduce-overhead"' in fx.code and "batch" in fx.text
    assert "foreach" not in fx.text


def test_ti003_optimizer_in_use_is_not_advised(tmp_path):
    """Eager model whose optimizer already runs ``_foreach_`` ops: the fix keeps its other levers, not "use foreach"."""
    t = KinetoTrace()
    t.step(0, 0.0, 2000.0)
    for i in range(100):
        op = t.cpu_op("aten::_foreach_add_" if i % 10 == 0 else "aten::add_", i * 15.0, 14.0)
        t.kernel("vectorized_elementwise_kernel<AddFunctor>", i * 15.0 + 10, 3.0, launch_us=i * 15.0 + 2, launch_dur_us=6.0, op=op)
    (f,) = findings_of(t.write(tmp_path / "t.json"), "TI003")
    assert "foreach/fused optimizer implementations instead" not in f.fixes["pytorch"].text
    assert "already runs its foreach or fused implementation" in f.fixes["pytorch"].text
    t2 = KinetoTrace()
    t2.step(0, 0.0, 2000.0)
    t2.cpu_op("Optimizer.step#SGD.step", 1990.0, 5.0)  # a training run: its optimizer may be fused
    for i in range(100):
        op = t2.cpu_op("aten::add_", i * 15.0, 14.0)
        t2.kernel("vectorized_elementwise_kernel<AddFunctor>", i * 15.0 + 10, 3.0, launch_us=i * 15.0 + 2, launch_dur_us=6.0, op=op)
    (g,) = findings_of(t2.write(tmp_path / "t2.json"), "TI003")
    assert "foreach/fused optimizer implementations" in g.fixes["pytorch"].text


def test_ti003_inference_is_not_told_to_fuse_its_optimizer(tmp_path):
    """A forward-only run (no backward op, no optimizer step on its host) has no optimizer: its fix batches requests
    and fuses/replays the forward, and says nothing of foreach or fused optimizers."""
    t = KinetoTrace()
    t.step(0, 0.0, 2000.0)
    for i in range(100):
        op = t.cpu_op("aten::add_", i * 15.0, 14.0)
        t.kernel("vectorized_elementwise_kernel<AddFunctor>", i * 15.0 + 10, 3.0, launch_us=i * 15.0 + 2, launch_dur_us=6.0, op=op)
    (f,) = findings_of(t.write(tmp_path / "t.json"), "TI003")
    fx = f.fixes["pytorch"]
    assert "batch more requests" in fx.text and "CUDA graph" in fx.text
    assert "optimizer" not in fx.text and "foreach" not in fx.text and "fused=True" not in fx.code
