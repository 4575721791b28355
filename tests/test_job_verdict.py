"""The whole-job verdict (``traceinsight.job.verdict``) and the straggler figures it quotes, by value on hand-made
rank summaries (what each rank's map step hands the coordinator): which rank is named, with which words, and what
the others waited for it. Every expected figure is worked out from the planted starts and steps."""

from __future__ import annotations

import pandas as pd
import pytest

from traceinsight.job import reduce_summaries
from traceinsight.job.mapper import MapSettings, per_rank_rules
from traceinsight.job.run import JobAnalysis, run_cross_rank
from traceinsight.derive.ranks.summary import COLL_COLUMNS, STEP_COLUMNS, RankSummary
from traceinsight.job.verdict import job_verdict
from traceinsight.assess.verdict import RULE

MS = 1_000_000


def _summary(rank: int, step_ms: list[float], arrivals_ms: list[float] = (), ledger_ms: dict[str, float] | None = None,
             data_before_ms: list[float] = (), no_steps: bool = False, origin_ns: int = 0,
             findings: list[dict] = ()) -> RankSummary:
    """One rank: steps of ``step_ms`` back to back from 0; ``ledger_ms``: its time ledger per step (bucket -> ms, the
    same in every step; default all compute, an empty dict: no ledger); at each step's start + ``arrivals_ms[i]`` it
    joins an all-reduce that ends, on every rank, 5 ms into the step, having waited ``data_before_ms[i]`` for input
    before it. ``no_steps``: a trace without step markers (one step -1: its whole window). ``findings``: the rank's
    per-rank findings as the map hands them over (``lever``)."""
    starts = [int(sum(step_ms[:i]) * MS) for i in range(len(step_ms))]
    ends = [s + int(d * MS) for s, d in zip(starts, step_ms)]
    steps = pd.DataFrame({c: [0] * len(step_ms) for c in STEP_COLUMNS})
    numbers = [-1] * len(step_ms) if no_steps else list(range(len(step_ms)))
    steps["step"], steps["start_ns"], steps["end_ns"] = numbers, starts, ends
    steps["busy_ns"] = steps["compute_ns"] = [e - s for s, e in zip(starts, ends)]
    coll = pd.DataFrame({c: [0] * len(arrivals_ms) for c in COLL_COLUMNS})
    if len(arrivals_ms):
        coll["group"] = pd.array(["stream 7"] * len(arrivals_ms), dtype="str")
        coll["kind"] = pd.array(["allreduce"] * len(arrivals_ms), dtype="str")
        coll["seq"] = list(range(len(arrivals_ms)))
        coll["start_ns"] = [s + int(a * MS) for s, a in zip(starts, arrivals_ms)]
        coll["end_ns"] = [s + 5 * MS for s in starts]
        coll["bytes"] = 4096
        coll["data_before_ns"] = [int(d * MS) for d in data_before_ms] if len(data_before_ms) else 0
    per_step = {"compute": None} if ledger_ms is None else ledger_ms
    rows = [(i, b, int((step_ms[i] if ms is None else ms) * MS)) for i in range(len(step_ms)) for b, ms in per_step.items()]
    ledger = pd.DataFrame({"step": [numbers[r[0]] for r in rows], "bucket": pd.array([r[1] for r in rows], dtype="str"),
                           "ns": [r[2] for r in rows]})
    return RankSummary(rank=rank, device=0, source=f"rank{rank}", world_size=3, origin_ns=origin_ns, device_names=["GPU"],
                       event_count=100, window_start_ns=0, window_end_ns=ends[-1], busy_ns=ends[-1], compute_ns=ends[-1],
                       comm_ns=0, exposed_ns=0, steps=steps, collectives=coll, ledger=ledger, findings=list(findings))


def lever(code: str, category: str, pct: float, kind: str = "idle") -> dict:
    """A per-rank finding that can form the verdict: a fix, a saving above 0 and its share of the steady window."""
    return {"code": code, "category": category, "fixes": [{"text": "the fix"}], "saving_ns": 1, "share_pct": pct,
            "saving_kind": kind}


def _analyse(summaries: list[RankSummary]) -> JobAnalysis:
    job = reduce_summaries(summaries)
    cross = per_rank_rules(MapSettings())[1]
    findings, warnings, failures = run_cross_rank(job, cross)
    assert failures == []
    late = tuple(r.code for r in cross if r.names_late_rank)  # as run_job fills it: the rules that declare it
    assert late == ("TI020",)
    return JobAnalysis(source="planted", job=job, findings=findings, warnings=warnings, rules_run=[], engine="test", late_rank_rules=late)


#: Per step: 6 ms of compute, 3 ms of GPU idle waiting for input, 1 ms of warm-up (set aside).
LOADER = {"compute": 6.0, "idle_data_wait": 3.0, "idle_warmup": 1.0}


def test_without_a_straggler_finding_the_slowest_median_step_is_named():
    """No collectives (so no TI020): rank 2's median step is 11 ms against 10 ms on the others, 10 % slower. The
    median rank's step: 6 ms compute of 10 ms (60.0 %); the input wait, 3 ms, is 33.3 % of the 9 ms left once
    the warm-up is set aside; TI005 prices it on every rank, over the 5 % line and over the 6.7 % (a tenth of the
    66.7 % busy) faster kernels could give back: the bound."""
    ti005 = [lever("TI005", "input_pipeline", 33.3)]
    ja = _analyse([_summary(0, [10, 10, 10], ledger_ms=LOADER, findings=ti005), _summary(1, [10, 9, 10], ledger_ms=LOADER, findings=ti005),
                   _summary(2, [11, 11, 30], ledger_ms={**LOADER, "compute": 7.0}, findings=ti005)])
    assert [f.code for f in ja.findings if f.code == "TI020"] == []
    assert job_verdict(ja) == {
        "category": "input_pipeline", "label": "input pipeline", "headline": "Bound by input pipeline", "bound": True,
        "sentence": "Across 3 ranks the median rank's GPU is busy 60.0 % of its step; the lever that gives back most on the "
                    "median rank is TI005: 33.3 % of its steady step (GPU idle while the host waits for input data: 3.00 ms "
                    "per step, 33.3 % of it). Rank 2 has the slowest median step.",
        "rank": 2, "rank_cost_ns": 0, "bucket": "idle_data_wait", "rule": RULE}


@pytest.mark.parametrize("ledger_ms", [{}, {"compute": 0.0, "idle_other": 0.0}])
def test_no_ledger_is_no_gpu_activity(ledger_ms):
    ja = _analyse([_summary(0, [10, 10], ledger_ms=ledger_ms), _summary(1, [10, 12], ledger_ms=ledger_ms)])
    assert job_verdict(ja) == {"category": "no_gpu", "label": "no GPU activity", "headline": "No GPU activity", "bound": False,
                               "sentence": "No rank has GPU work to judge.", "rank": None, "rank_cost_ns": 0, "bucket": None}


def _bound(ledger_ms: dict[str, float], findings: list[dict] = ()) -> dict:
    step = sum(ledger_ms.values())
    return job_verdict(_analyse([_summary(r, [step] * 2, ledger_ms=ledger_ms, findings=findings) for r in range(3)]))


@pytest.mark.parametrize(("ledger_ms", "findings", "category", "bucket", "tail"), [
    # a mostly idle GPU (30 % busy): a priced lever at exactly 5 % of the steady step is the bound ...
    ({"compute": 3.0, "idle_other": 6.5, "idle_host_sync": 0.5}, [lever("TI002", "host_sync", 5.0)], "host_sync", "idle_host_sync",
     "(GPU idle after the host blocked in a sync: 500.0 µs per step, 5.0 % of it)."),
    # ... just under it, nothing explains the idle: no bound is named, the largest idle bucket is said
    ({"compute": 3.0, "idle_other": 6.503, "idle_host_sync": 0.497}, [lever("TI002", "host_sync", 4.97)], "unexplained", "idle_other",
     "(GPU idle with no launch in the trace to explain it: 6.50 ms per step, 65.0 % of it)."),
    # a mostly busy GPU (80 %): a 20 % sync lever beats the 8 % faster kernels could give back
    ({"compute": 8.0, "idle_host_sync": 2.0}, [lever("TI002", "host_sync", 20.0)], "host_sync", "idle_host_sync",
     "(GPU idle after the host blocked in a sync: 2.00 ms per step, 20.0 % of it)."),
    # the same idle with no finding that prices it: the GPU's own work is the bound, never a bare bucket
    ({"compute": 8.0, "idle_host_sync": 2.0}, [], "compute", "compute", "(compute: 8.00 ms per step, 80.0 % of it)."),
    # 95 % busy: a 5 % sync lever is under the 9.5 % kernel headroom, so compute
    ({"compute": 9.5, "idle_host_sync": 0.5}, [lever("TI002", "host_sync", 5.0)], "compute", "compute",
     "(compute: 9.50 ms per step, 95.0 % of it)."),
    # copies at exactly half of busy time (and no lever) are the bound; just under half, compute is
    ({"compute": 4.0, "copy": 4.0, "idle_other": 0.4}, [], "copy", "copy", "(copies: 4.00 ms per step, 47.6 % of it)."),
    ({"compute": 4.01, "copy": 3.99, "idle_other": 0.4}, [], "compute", "compute", "(compute: 4.01 ms per step, 47.7 % of it)."),
    # warm-up is set aside, never the bound, however large: 1 ms of input wait is 14.3 % of the 7 ms steady step
    ({"compute": 6.0, "idle_warmup": 3.0, "idle_data_wait": 1.0}, [lever("TI005", "input_pipeline", 14.3)], "input_pipeline",
     "idle_data_wait", "(GPU idle while the host waits for input data: 1.00 ms per step, 14.3 % of it)."),
    # a GPU that is never busy and no finding: nothing explains it
    ({"idle_other": 10.0}, [], "unexplained", "idle_other", "(GPU idle with no launch in the trace to explain it: 10.00 ms per step, 100.0 % of it)."),
    # exposed communication priced by its finding is a busy-work lever
    ({"compute": 6.0, "communication": 3.0, "idle_other": 1.0}, [lever("TI021", "communication", 30.0, "modelled")], "communication",
     "communication", "(communication not overlapped with compute: 3.00 ms per step, 30.0 % of it)."),
])
def test_the_bound_is_the_priced_lever_over_five_percent_else_copies_compute_or_unexplained(ledger_ms, findings, category, bucket, tail):
    v = _bound(ledger_ms, findings)
    assert (v["category"], v["bucket"]) == (category, bucket)
    assert v["sentence"].endswith(tail), v["sentence"]
    assert v["bound"] == (category != "unexplained")
    assert v["rank"] is None  # every rank alike: no rank named


def test_a_slowest_step_within_two_percent_names_no_rank():
    ja = _analyse([_summary(0, [10, 10, 10]), _summary(1, [10, 10, 10]), _summary(2, [10.2, 10.2, 10.2])])
    v = job_verdict(ja)
    assert (v["rank"], v["rank_cost_ns"], v["headline"]) == (None, 0, "Bound by compute") and "Rank" not in v["sentence"]
    ja = _analyse([_summary(0, [10, 10, 10]), _summary(1, [10, 10, 10]), _summary(2, [10.3, 10.3, 10.3])])
    assert job_verdict(ja)["rank"] == 2  # 3 % over: named
    # two ranks are enough to name one; step 0 counts like any other (medians 11 against 10 ms)
    ja = _analyse([_summary(0, [10, 10]), _summary(1, [12, 10])])
    v = job_verdict(ja)
    assert (v["rank"], v["rank_cost_ns"], v["headline"]) == (1, 0, "Bound by compute")


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
    """No cause stands out (every rank did the same before the collective): the sentence ends with the cost."""
    v = job_verdict(straggler)
    assert (v["rank"], v["rank_cost_ns"]) == (2, 6 * MS)
    assert v["sentence"].endswith("(compute: 10.00 ms per step, 100.0 % of it). Rank 2 holds the job back: the others "
                                  "wait 3.00 ms per step for it at collectives (6.00 ms in all).")
    assert v["headline"].endswith("; rank 2 is the straggler")


def test_the_worst_of_two_stragglers_is_named_with_its_cause():
    """Four ranks, two steps. At the first all-reduce rank 3 arrives last, 3 ms after the next-latest, having waited
    2 ms for input before it; at the second rank 2 arrives last, 1.5 ms after the next. Both are stragglers; the
    verdict names rank 3 (3 ms held in all, 1.5 ms per step) and says why it is late."""
    ja = _analyse([_summary(0, [10, 10], [0, 0]), _summary(1, [10, 10], [0.5, 0.5]), _summary(2, [10, 10], [1, 2.5]),
                   _summary(3, [10, 10], [4, 1], data_before_ms=[2, 0])])
    assert sorted((f.metrics["rank"], f.impact_ns) for f in ja.findings if f.code == "TI020") == [(2, 1_500_000), (3, 3 * MS)]
    v = job_verdict(ja)
    assert (v["rank"], v["rank_cost_ns"], v["headline"]) == (3, 3 * MS, "Bound by compute; rank 3 is the straggler")
    assert v["sentence"].endswith(" Rank 3 holds the job back: the others wait 1.50 ms per step for it at collectives "
                                  "(3.00 ms in all): it waits longer for input data.")


def test_without_steps_the_window_is_the_unit_and_no_rank_is_slowest():
    """Traces without step markers: the ledger is per window, and a window longer than the others is no slow step."""
    ti001 = [lever("TI001", "gpu_idle", 20.0)]
    ja = _analyse([_summary(r, [d], ledger_ms={"compute": 8.0, "idle_host_busy": 2.0}, no_steps=True, findings=ti001) for r, d in enumerate([10, 10, 11])])
    v = job_verdict(ja)
    assert v["sentence"] == ("Across 3 ranks the median rank's GPU is busy 80.0 % of its window; the lever that gives back most on "
                             "the median rank is TI001: 20.0 % of its steady window (GPU idle while the host runs other "
                             "framework/Python work: 2.00 ms per window, 20.0 % of it).")
    assert (v["rank"], v["category"]) == (None, "host_overhead")


def test_one_rank_has_no_slowest_rank():
    v = job_verdict(_analyse([_summary(0, [10, 12, 30])]))
    assert (v["rank"], v["rank_cost_ns"], v["headline"]) == (None, 0, "Bound by compute")
    assert v["sentence"].endswith("per step, 100.0 % of it).")


def test_a_bucket_one_rank_lacks_counts_as_zero_there():
    """Only rank 0 books (and prices) 3 ms of host-sync idle per step: the median rank has none, so compute is the
    bound."""
    ja = _analyse([_summary(0, [10, 10], ledger_ms={"compute": 7.0, "idle_host_sync": 3.0}, findings=[lever("TI002", "host_sync", 30.0)]),
                   _summary(1, [10, 10], ledger_ms={"compute": 10.0}), _summary(2, [10, 10], ledger_ms={"compute": 10.0})])
    v = job_verdict(ja)
    assert (v["bucket"], v["rank"]) == ("compute", None)
    assert v["sentence"] == ("Across 3 ranks the median rank's GPU is busy 100.0 % of its step; no finding names a bound (the "
                             "largest, TI002, gives back 0.0 %), so the GPU's own work bounds the job (compute: 10.00 ms per "
                             "step, 100.0 % of it).")


def test_skewed_clocks_are_aligned_before_the_waits_are_measured(straggler):
    """The straggler job again, but each rank's clock reads its time 0 differently (origins 0, +2.5 ms, -1.2 ms):
    the collectives end together, so the clocks are aligned on them and the waits come out the same. In job time
    each rank's step 0 starts at 0 ms again."""
    skewed = _analyse([_summary(0, [10, 10], [0, 0]), _summary(1, [10, 10], [1, 1], origin_ns=2_500_000),
                       _summary(2, [10, 10], [4, 4], origin_ns=-1_200_000)])
    cols = ["last_rank", "held_ns", "mean_wait_ns", "last_start_ns", "second_start_ns", "first_start_ns"]
    assert skewed.job.instances[cols].to_numpy().tolist() == straggler.job.instances[cols].to_numpy().tolist()
    assert skewed.job.instances["last_start_ns"].tolist() == [4 * MS, 14 * MS]
    st = skewed.job.steps
    assert st.loc[st["step"] == 0, "start_ns"].tolist() == [0, 0, 0] and set(st["dur_ns"]) == {10 * MS}
    assert job_verdict(skewed)["sentence"] == job_verdict(straggler)["sentence"]


def test_rank_files_that_repeat_a_rank_are_numbered_in_file_name_order():
    """Two files that both say rank 0 (no distributedInfo, or copies): ranks are assigned by file name, and said."""
    b, a = _summary(0, [10, 10]), _summary(0, [10, 12])
    b.source, a.source = "node1/trace.json", "node0/trace.json"
    job = reduce_summaries([b, a])
    assert [(s.rank, s.source) for s in job.summaries] == [(0, "node0/trace.json"), (1, "node1/trace.json")]
    assert job.warnings == ["ranks repeat across the 2 rank files (no or equal distributedInfo.rank); ranks were assigned in file-name order"]
