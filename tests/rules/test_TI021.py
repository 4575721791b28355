"""TI021 exposed-communication: its positive, negative and fix cases, on planted traces and the real corpus."""

from __future__ import annotations

import pytest

import traceinsight
from tests.conftest import corpus_file
from tests.helpers.kineto_writer import KinetoTrace
from tests.rules.conftest import DLRM


#: positive: it fires; negative: it stays silent; fix: the same collectives overlapped with compute.
CASES = {
    "positive": ["test_exposed_communication_positive"],
    "negative": ["test_exposed_communication_negative_overlapped"],
    "fix": ["test_exposed_communication_negative_overlapped"],
}


def _job_codes(findings, code):
    return [f for f in findings if f.code == code]


def _job_run(tl, code, **kw):
    return [f for f in traceinsight.analyze(tl, select=[code], **kw).findings if f.code == code]


def test_exposed_communication_waiting_is_not_transfer(straggler_job, balanced_job):
    """The 2 ms the other ranks wait per collective is counted as waiting (TI020), not as exposed transfer."""
    a = straggler_job.job.ranks.set_index("rank")
    b = balanced_job.job.ranks.set_index("rank")
    assert int(a.loc[0, "wait_ns"] - b.loc[0, "wait_ns"]) == pytest.approx(8 * 2_000_000, rel=0.01)
    assert int(a.loc[2, "wait_ns"]) <= int(b.loc[2, "wait_ns"])  # the straggler itself never waits longer
    (fa,) = _job_codes(straggler_job.findings, "TI021")
    ev = fa.evidence.set_index("rank")
    assert ev.loc[0, "waiting_ms"] > 0 and "see TI020" in fa.message
    assert (ev["transfer_exposed_ms"] <= ev["exposed_ms"] - ev["waiting_ms"] + 1e-3).all()


def _comm_trace(tmp_path, overlapped: bool):
    """10 ms of compute, then a 4 ms all-reduce: alone on its stream, or beside a 4 ms compute kernel."""
    t = KinetoTrace(rank=0, world_size=2)
    t.step(1, 0, 10_000)  # the marker ends before the GPU work: the GPU is the step's critical path
    t.kernel("volta_sgemm_128x64_nn", 100, 10_000, stream=7)
    t.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 10_200, 4_000, stream=20)
    if overlapped:
        t.kernel("volta_sgemm_128x64_nn", 10_200, 4_000, stream=7, launch_us=10_150)
    return t.write(tmp_path / "r0.pt.trace.json")


def test_exposed_communication_positive(tmp_path):
    (f,) = _job_run(_comm_trace(tmp_path, overlapped=False), "TI021")
    assert f.metrics["exposed_ns"] == 4_000_000 == f.impact_ns
    assert f.metrics["overlap_pct"] == pytest.approx(0.0)
    assert f.metrics["exposed_pct_window"] == pytest.approx(100 * 4_000 / 14_100, abs=1e-3)
    # 28.4 % of the window; the page grades the replay's figure (what the step gets back) on the one scale
    from traceinsight.assess.severity import level

    assert f.saving_kind == "modelled" and f.severity is level(f.share_pct)
    assert "bucket_cap_mb" in f.fixes["pytorch"].text


def test_exposed_communication_negative_overlapped(tmp_path):
    assert _job_run(_comm_trace(tmp_path, overlapped=True), "TI021") == []


def test_corpus_dlrm_exposed_communication_is_waiting(dlrm_job):
    """DLRM's NCCL time is almost all waiting for later ranks (the transfers take 7-86 µs): no TI021."""
    assert _job_codes(dlrm_job.findings, "TI021") == []
    per = dlrm_job.job.ranks
    assert (per["wait_ns"] >= 0.95 * per["exposed_ns"]).all()


def test_corpus_a100_ddp_rank_exposed_communication():
    """The A100 DDP rank (NCCL ~29 % of kernel time, 47 ms) with 84 % of it not overlapped: TI021 speaks."""
    (f,) = _job_run(corpus_file("pytorch/hta_nccl_data_a100_rank0of2.json.gz"), "TI021")
    assert f.metrics["exposed_ns"] == pytest.approx(39_190_669, rel=0.001)
    assert f.metrics["comm_ns"] == pytest.approx(46_876_493, rel=0.001)
    assert f.metrics["overlap_pct"] == pytest.approx(16.4, abs=0.1)
    assert f.metrics["exposed_pct_window"] == pytest.approx(5.9, abs=0.1)
    # 5.9 % of its window would be a warning, but overlapping it is a modelled speed-up of busy work: the what-if
    # replay gives the host-bound steps (TI001: host overhead) nothing back, so the page shows ~0 and info
    assert f.saving_kind == "modelled" and f.saving_ns < f.impact_ns / 100 and f.severity.value == "info"
    assert f.location.rank == 0


def test_corpus_ddp_v100_exposed_communication_warning():
    (f,) = _job_run(corpus_file("pytorch/hta_ddp_v100_rank1of2.json.gz"), "TI021")
    assert 20 <= f.metrics["exposed_pct_window"] < 30
    # >= 20 % of the window as measured; the steps are launch-bound (TI003's replay gives back 45 %), so the replay
    # of faster or hidden communication gives them nothing: a modelled speed-up off the critical path, info
    assert f.saving_kind == "modelled" and f.saving_ns < 100_000 and f.severity.value == "info"  # off the critical path: ~0 (replay noise of µs)
    assert f.location.rank == 1
    # a V100 has no bf16: gradients compress in fp16 there
    assert "fp16_compress_hook" in f.fixes["pytorch"].code and "bf16" not in f.fixes["pytorch"].code
