"""The whole-job verdict (``traceinsight.job.verdict``) and the straggler figures it quotes, by value on hand-made
rank summaries (what each rank's map step hands the coordinator): which rank is named, with which words, and what
the others waited for it. Every expected figure is worked out from the planted starts and steps."""

from __future__ import annotations

import pandas as pd
import pytest

from traceinsight.job import reduce_summaries
from traceinsight.job.mapper import MapSettings, per_rank_rules
from traceinsight.job.run import JobAnalysis, run_cross_rank
from traceinsight.job.summary import COLL_COLUMNS, STEP_COLUMNS, RankSummary
from traceinsight.job.verdict import job_verdict

MS = 1_000_000


def _summary(rank: int, step_ms: list[float], arrivals_ms: list[float] = ()) -> RankSummary:
    """One rank: steps of ``step_ms`` back to back from 0, busy with compute all through; at the end of each step an
    all-reduce this rank joins ``arrivals_ms[i]`` ms after the step's start and that ends, on every rank, 5 ms in."""
    starts = [int(sum(step_ms[:i]) * MS) for i in range(len(step_ms))]
    ends = [s + int(d * MS) for s, d in zip(starts, step_ms)]
    steps = pd.DataFrame({c: [0] * len(step_ms) for c in STEP_COLUMNS})
    steps["step"], steps["start_ns"], steps["end_ns"] = list(range(len(step_ms))), starts, ends
    steps["busy_ns"] = steps["compute_ns"] = [e - s for s, e in zip(starts, ends)]
    coll = pd.DataFrame({c: [0] * len(arrivals_ms) for c in COLL_COLUMNS})
    if len(arrivals_ms):
        coll["group"] = pd.array(["stream 7"] * len(arrivals_ms), dtype="str")
        coll["kind"] = pd.array(["allreduce"] * len(arrivals_ms), dtype="str")
        coll["seq"] = list(range(len(arrivals_ms)))
        coll["start_ns"] = [s + int(a * MS) for s, a in zip(starts, arrivals_ms)]
        coll["end_ns"] = [s + 5 * MS for s in starts]
        coll["bytes"] = 4096
    ledger = pd.DataFrame({"step": list(range(len(step_ms))), "bucket": pd.array(["compute"] * len(step_ms), dtype="str"),
                           "ns": [e - s for s, e in zip(starts, ends)]})
    return RankSummary(rank=rank, device=0, source=f"rank{rank}", world_size=3, origin_ns=0, device_names=["GPU"],
                       event_count=100, window_start_ns=0, window_end_ns=ends[-1], busy_ns=ends[-1], compute_ns=ends[-1],
                       comm_ns=0, exposed_ns=0, steps=steps, collectives=coll, ledger=ledger)


def _analyse(summaries: list[RankSummary]) -> JobAnalysis:
    job = reduce_summaries(summaries)
    findings, warnings, failures = run_cross_rank(job, per_rank_rules(MapSettings())[1])
    assert failures == []
    return JobAnalysis(source="planted", job=job, findings=findings, warnings=warnings, rules_run=[], engine="test")


def test_without_a_straggler_finding_the_slowest_median_step_is_named():
    """No collectives (so no TI020): rank 2's median step is 11 ms against 10 ms on the others, 10 % slower."""
    ja = _analyse([_summary(0, [10, 10, 10]), _summary(1, [10, 9, 10]), _summary(2, [11, 11, 30])])
    assert [f.code for f in ja.findings if f.code == "TI020"] == []
    v = job_verdict(ja)
    assert (v["rank"], v["rank_cost_ns"], v["category"]) == (2, 0, "compute")
    assert v["sentence"].endswith(" Rank 2 has the slowest median step.")
    assert "straggler" not in v["headline"]


def test_a_slowest_step_within_two_percent_names_no_rank():
    ja = _analyse([_summary(0, [10, 10, 10]), _summary(1, [10, 10, 10]), _summary(2, [10.2, 10.2, 10.2])])
    v = job_verdict(ja)
    assert v["rank"] is None and "Rank" not in v["sentence"]
    ja = _analyse([_summary(0, [10, 10, 10]), _summary(1, [10, 10, 10]), _summary(2, [10.3, 10.3, 10.3])])
    assert job_verdict(ja)["rank"] == 2  # 3 % over: named


@pytest.fixture(scope="module")
def straggler():
    """Two 10 ms steps; in each an all-reduce that rank 0 joins at 0 ms, rank 1 at 1 ms and rank 2 at 4 ms, ending
    at 5 ms on all. Rank 2 holds the others 4 - 1 = 3 ms per step (6 ms in all); the others wait 4 and 3 ms for it,
    3.5 ms on average (over the n - 1 = 2 ranks that wait, not over all 3)."""
    return _analyse([_summary(0, [10, 10], [0, 0]), _summary(1, [10, 10], [1, 1]), _summary(2, [10, 10], [4, 4])])


def test_the_others_wait_is_the_mean_over_the_ranks_that_wait(straggler):
    inst = straggler.job.instances
    assert inst["last_rank"].tolist() == [2, 2]
    assert inst["held_ns"].tolist() == [3 * MS, 3 * MS]
    assert inst["mean_wait_ns"].tolist() == [3_500_000, 3_500_000]
    (f,) = [f for f in straggler.findings if f.code == "TI020"]
    assert f.metrics["rank"] == 2 and f.impact_ns == 6 * MS
    assert f.metrics["held_per_step_ns"] == 3 * MS and f.metrics["others_wait_per_step_ns"] == 3_500_000
    assert "the other ranks waited 3.50 ms per step on average for the last arrival" in f.message


def test_the_job_verdict_names_the_straggler_and_its_cost(straggler):
    v = job_verdict(straggler)
    assert (v["rank"], v["rank_cost_ns"]) == (2, 6 * MS)
    assert " Rank 2 holds the job back: the others wait 3.00 ms per step for it at collectives (6.00 ms in all)" in v["sentence"]
    assert v["headline"].endswith("; rank 2 is the straggler")
