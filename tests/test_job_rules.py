"""Cross-rank rules (TI020 stragglers, TI021 exposed communication, TI009 rank imbalance) on written traces, on
synthetic jobs made of real corpus ranks, and on the real multi-rank corpus."""

from __future__ import annotations


import pytest

import traceinsight
from traceinsight.config import Config
from bench.bench_job import build_job
from traceinsight.job import analyze_job

from .conftest import corpus_file
from .helpers.kineto_writer import KinetoTrace

DLRM = "pytorch/param_dlrm_v100_8ranks"
DLRM0 = DLRM + "/worker0_step_12.1694128201545.pt.trace.json.gz"


def _codes(findings, code):
    return [f for f in findings if f.code == code]


def _run(tl, code, **kw):
    return [f for f in traceinsight.analyze(tl, select=[code], **kw).findings if f.code == code]


# --- synthetic jobs from a real rank ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def straggler_job(tmp_path_factory):
    """4 copies of DLRM rank 0, clocks skewed by up to 3 ms, rank 2 reaching each of the 8 collectives 2 ms late."""
    out = tmp_path_factory.mktemp("job_straggler")
    build_job(corpus_file(DLRM0), 4, out, straggler=2, delay_ms=2.0, skew_ms=3.0)
    return analyze_job(str(out), workers=2)


@pytest.fixture(scope="module")
def balanced_job(tmp_path_factory):
    out = tmp_path_factory.mktemp("job_balanced")
    build_job(corpus_file(DLRM0), 4, out, straggler=None, skew_ms=3.0)
    return analyze_job(str(out), workers=2)


def test_stragglers_positive_planted_delay(straggler_job):
    (f,) = _codes(straggler_job.findings, "TI020")
    assert f.metrics["rank"] == 2
    assert f.metrics["collectives_last"] == 8 == f.metrics["collectives_matched"]
    assert f.metrics["median_held_ns"] == pytest.approx(2_000_000, rel=0.01)
    assert f.impact_ns == pytest.approx(8 * 2_000_000, rel=0.01)
    # the straggler's launches were moved late with nothing else in between: its GPU idled longer before them
    assert f.metrics["cause"] == "gpu_idle"
    assert f.location.rank == 2
    assert "Rank 2 makes the others wait" in f.message


def test_clock_alignment_recovers_skew(straggler_job, balanced_job):
    for ja in (straggler_job, balanced_job):
        al = ja.job.alignment
        assert al.collectives_used == 8
        assert al.spread_before_ns > 1_000_000  # the skewed trace clocks disagree by milliseconds
        assert al.residual_max_ns < 5_000  # aligned to within the traces' µs rounding


def test_stragglers_negative_balanced(balanced_job):
    assert _codes(balanced_job.findings, "TI020") == []
    assert int(balanced_job.job.instances["held_ns"].max()) < 5_000


def test_exposed_communication_waiting_is_not_transfer(straggler_job, balanced_job):
    """The 2 ms the other ranks wait per collective is counted as waiting (TI020), not as exposed transfer."""
    a = straggler_job.job.ranks.set_index("rank")
    b = balanced_job.job.ranks.set_index("rank")
    assert int(a.loc[0, "wait_ns"] - b.loc[0, "wait_ns"]) == pytest.approx(8 * 2_000_000, rel=0.01)
    assert int(a.loc[2, "wait_ns"]) <= int(b.loc[2, "wait_ns"])  # the straggler itself never waits longer
    (fa,) = _codes(straggler_job.findings, "TI021")
    ev = fa.evidence.set_index("rank")
    assert ev.loc[0, "waiting_ms"] > 0 and "see TI020" in fa.message
    assert (ev["transfer_exposed_ms"] <= ev["exposed_ms"] - ev["waiting_ms"] + 1e-3).all()


# --- written traces -----------------------------------------------------------------------------------------
def _comm_trace(tmp_path, overlapped: bool):
    """10 ms of compute, then a 4 ms all-reduce: alone on its stream, or beside a 4 ms compute kernel. The host's
    step marker ends before the GPU work does, so the GPU is the step's critical path (the all-reduce is on it)."""
    t = KinetoTrace(rank=0, world_size=2)
    t.step(1, 0, 10_000)
    t.kernel("volta_sgemm_128x64_nn", 100, 10_000, stream=7)
    t.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 10_200, 4_000, stream=20)
    if overlapped:
        t.kernel("volta_sgemm_128x64_nn", 10_200, 4_000, stream=7, launch_us=10_150)
    return t.write(tmp_path / "r0.pt.trace.json")


def test_exposed_communication_positive(tmp_path):
    (f,) = _run(_comm_trace(tmp_path, overlapped=False), "TI021")
    assert f.metrics["exposed_ns"] == 4_000_000 == f.impact_ns
    assert f.metrics["overlap_pct"] == pytest.approx(0.0)
    assert f.metrics["exposed_pct_window"] == pytest.approx(100 * 4_000 / 14_100, abs=1e-3)
    # 28.4 % of the window; the page grades the replay's figure (what the step gets back) on the one scale
    from traceinsight.severity import level

    assert f.saving_kind == "modelled" and f.severity is level(f.share_pct)
    assert "bucket_cap_mb" in f.fixes["pytorch"].text


def test_exposed_communication_negative_overlapped(tmp_path):
    assert _run(_comm_trace(tmp_path, overlapped=True), "TI021") == []


def test_rank_imbalance_silent_on_two_devices_of_one_process(tmp_path):
    t = KinetoTrace(devices=2)
    for i in range(4):
        t.kernel("volta_sgemm_128x64_nn", 100 + i * 2_000, 1_000, device=0)
        t.kernel("volta_sgemm_128x64_nn", 100 + i * 2_000, 1_800, device=1, stream=9)
    assert _run(t.write(tmp_path / "two_gpus.json"), "TI009") == []


# --- real corpus ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dlrm_job():
    return analyze_job(str(corpus_file(DLRM)), workers=2)


def test_corpus_dlrm_straggler_is_the_rank_that_waits_least(dlrm_job):
    """Rank 7 spends the least time in NCCL (1.7 ms vs 3.5-11.3 ms): it arrives last and the others wait for it."""
    (f,) = _codes(dlrm_job.findings, "TI020")
    assert f.metrics["rank"] == 7
    assert f.metrics["collectives_last"] == 5 and f.metrics["collectives_matched"] == 8
    assert f.metrics["held_ns"] == pytest.approx(1_310_000, rel=0.01)
    per = dlrm_job.job.ranks.set_index("rank")
    assert per["comm_ns"].idxmin() == 7
    assert dlrm_job.job.alignment.residual_max_ns <= 5_000  # one host: clocks already agree


def test_corpus_dlrm_exposed_communication_is_waiting(dlrm_job):
    """DLRM's NCCL time is almost all waiting for later ranks (the transfers take 7-86 µs): no TI021."""
    assert _codes(dlrm_job.findings, "TI021") == []
    per = dlrm_job.job.ranks
    assert (per["wait_ns"] >= 0.95 * per["exposed_ns"]).all()


def test_corpus_dlrm_imbalance_same_on_job_and_single_timeline(dlrm_job):
    (job_f,) = _codes(analyze_job(str(corpus_file(DLRM)), workers=2, config=Config(min_impact=0)).findings, "TI009")
    # 138.75 µs of a ~13 ms window: under the 1 % reporting floor on both paths, so both are asked for everything
    (tl_f,) = _run(traceinsight.load(corpus_file(DLRM), format="pytorch"), "TI009", min_impact=0)
    # the single-trace report grades on its figure and says why in severity_basis (traceinsight.savings); the rule's
    # own metrics are the same on both paths
    report_only = {"severity_basis", "what_if_note", "saving_basis"}
    assert {k: v for k, v in job_f.metrics.items() if k not in report_only} == {k: v for k, v in tl_f.metrics.items() if k not in report_only}
    assert job_f.metrics["busy_imbalance_pct"] == pytest.approx(17.1, abs=0.1)


def test_corpus_a100_ddp_rank_exposed_communication():
    """The A100 DDP rank (NCCL ~29 % of kernel time, 47 ms) with 84 % of it not overlapped: TI021 speaks."""
    (f,) = _run(corpus_file("pytorch/hta_nccl_data_a100_rank0of2.json.gz"), "TI021")
    assert f.metrics["exposed_ns"] == pytest.approx(39_190_669, rel=0.001)
    assert f.metrics["comm_ns"] == pytest.approx(46_876_493, rel=0.001)
    assert f.metrics["overlap_pct"] == pytest.approx(16.4, abs=0.1)
    assert f.metrics["exposed_pct_window"] == pytest.approx(5.9, abs=0.1)
    # 5.9 % of its window would be a warning, but overlapping it is a modelled speed-up of busy work: the what-if
    # replay gives the host-bound steps (TI001: host overhead) nothing back, so the page shows ~0 and info
    assert f.saving_kind == "modelled" and f.saving_ns < f.impact_ns / 100 and f.severity.value == "info"
    assert f.location.rank == 0


def test_corpus_ddp_v100_exposed_communication_warning():
    (f,) = _run(corpus_file("pytorch/hta_ddp_v100_rank1of2.json.gz"), "TI021")
    assert 20 <= f.metrics["exposed_pct_window"] < 30
    # >= 20 % of the window as measured; the steps are launch-bound (TI003's replay gives back 45 %), so the replay
    # of faster or hidden communication gives them nothing: a modelled speed-up off the critical path, info
    assert f.saving_kind == "modelled" and f.saving_ns == 0 and f.severity.value == "info"
    assert f.location.rank == 1


def test_corpus_single_rank_has_no_straggler_or_imbalance():
    p = corpus_file("pytorch/hta_nccl_data_a100_rank0of2.json.gz")
    found = {f.code for f in traceinsight.analyze(p, select=["TI009", "TI020"]).findings}
    assert found == set()


def test_corpus_sampled_pair_point_to_point_calls_are_not_matched(tmp_path):
    """Ranks 0 and 1 of a 128-rank job exchange send/recv with other peers too: calls at the same stream position
    that end up to 134 ms apart once aligned are not one collective, and are left out instead of faking waits."""
    for r in (0, 1):
        p = corpus_file(f"pytorch/hta_sampled_128rank_job_rank{r}.json.gz")
        (tmp_path / p.name).write_bytes(p.read_bytes())
    ja = analyze_job(str(tmp_path), workers=2)
    assert ja.job.world_size == 128 and ja.job.rank_count == 2
    assert any("6 of 10 collective calls" in w and "not one collective" in w for w in ja.warnings)
    al = ja.job.alignment
    assert al.collectives_used == 4 and al.residual_max_ns < 500_000
    assert len(ja.job.instances) == 4
