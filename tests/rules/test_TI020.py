"""TI020 stragglers: its positive, negative and fix cases, on planted traces and the real corpus."""

from __future__ import annotations

import pytest

import traceinsight
from tests.conftest import corpus_file
from traceinsight.job import analyze_job


#: positive: it fires; negative: it stays silent; fix: the same job without the late rank.
CASES = {
    "positive": ["test_stragglers_positive_planted_delay"],
    "negative": ["test_stragglers_negative_balanced"],
    "fix": ["test_stragglers_negative_balanced", "test_stragglers_cause_fix_keeps_every_framework"],
}


def _job_codes(findings, code):
    return [f for f in findings if f.code == code]


def test_stragglers_positive_planted_delay(straggler_job):
    (f,) = _job_codes(straggler_job.findings, "TI020")
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
    assert _job_codes(balanced_job.findings, "TI020") == []
    assert int(balanced_job.job.instances["held_ns"].max()) < 5_000


def test_corpus_dlrm_straggler_is_the_rank_that_waits_least(dlrm_job):
    """Rank 7 spends the least time in NCCL (1.7 ms vs 3.5-11.3 ms): it arrives last and the others wait for it."""
    (f,) = _job_codes(dlrm_job.findings, "TI020")
    assert f.metrics["rank"] == 7
    assert f.metrics["collectives_last"] == 5 and f.metrics["collectives_matched"] == 8
    assert f.metrics["held_ns"] == pytest.approx(1_310_000, rel=0.01)
    per = dlrm_job.job.ranks.set_index("rank")
    assert per["comm_ns"].idxmin() == 7
    assert dlrm_job.job.alignment.residual_max_ns <= 5_000  # one host: clocks already agree


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


def test_stragglers_cause_fix_keeps_every_framework(straggler_job):
    """The cause's fix replaces the PyTorch and TensorFlow advice; a JAX job keeps the rule's JAX fix, never none."""
    (f,) = _job_codes(straggler_job.findings, "TI020")
    assert "leaves its GPU idle before the collective" in f.fixes["pytorch"].text
    assert "jax.device_put" in f.fixes["jax"].code
