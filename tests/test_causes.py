"""Root-cause linking (traceinsight.assess.causes): which finding explains which, by value.

Two levels: planted kineto traces through the whole engine (the links a user sees, on one rank and across ranks),
and ``causes.link`` on hand-made findings, where each path (attribution by category, coverage by time) and each
boundary (``MIN_SHARE``, same place, same rule, symptom/cause categories) can be isolated.
"""

from __future__ import annotations

import pytest

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.assess import causes
from traceinsight.pipeline.plugins import discover
from traceinsight.rule_api import Finding, Instance, Location, Severity


# --- planted traces through the engine ------------------------------------------------------------------
def _loader_rank(t: KinetoTrace) -> None:
    """Five 3 ms steps: 1 ms of kernels, then 2 ms with the GPU idle inside the DataLoader."""
    for s in range(5):
        t0 = s * 3000.0
        t.step(s, t0, 3000.0)
        for i in range(20):
            t.kernel("volta_sgemm_128x64_nn", t0 + 10 + i * 50, 50.0, launch_us=t0 + i * 0.5)
        t.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 1015.0, 1980.0)


def _item_rank(t: KinetoTrace) -> None:
    """Five 3 ms steps: a 1 ms kernel waited for by loss.item() (the host sits 1040 µs in it), then ~2 ms before the
    host launches again."""
    for s in range(5):
        t0 = s * 3000.0
        t.step(s, t0, 3000.0)
        t.kernel("volta_sgemm_128x64_nn", t0 + 10, 1000.0, launch_us=t0)
        t.cpu_op("aten::item", t0 + 20, 1040.0)
        t.cpu_op("aten::_local_scalar_dense", t0 + 22, 1036.0)
        t.memcpy("DtoH", t0 + 1010, 2.0, 4, launch_us=t0 + 25, launch_dur_us=5.0, pageable=False)
        t.runtime("cudaStreamSynchronize", t0 + 32, 982.0)
        t.kernel("volta_sgemm_128x64_nn", t0 + 2960, 30.0, launch_us=t0 + 2950)


def _by_code(findings, code, rank=None):
    return [f for f in findings if f.code == code and (rank is None or f.location.rank == rank)]


def test_data_wait_explains_the_idle_gaps(tmp_path):
    t = KinetoTrace()
    _loader_rank(t)
    a = traceinsight.analyze(t.write(tmp_path / "t.json"))
    (idle,) = _by_code(a.findings, "TI001")
    (data,) = _by_code(a.findings, "TI005")
    # the 4 gaps of 2 ms: 1980 µs of each inside the DataLoader, booked as input pipeline
    assert idle.impact_ns == 8_000_000
    assert idle.metrics["idle_by_category"] == {"input_pipeline": 7_920_000}
    assert idle.metrics["explained_by"] == data.fingerprint
    assert idle.metrics["explained_ns"] == 7_920_000
    assert idle.metrics["explained_share_pct"] == 99.0
    assert data.explains == [idle.fingerprint]
    assert "explained_by" not in data.metrics
    # the cause comes first and its symptom right after it, although the symptom costs more
    codes = [f.code for f in a.findings]
    assert codes.index("TI001") == codes.index("TI005") + 1
    # a symptom a cause explains gets no what-if of its own (its cause's covers it); the cause gets one
    assert idle.what_if is None and data.what_if is not None


def test_links_stay_on_their_rank(tmp_path):
    folder = tmp_path / "ranks"
    for r, plant in enumerate([_loader_rank, _item_rank]):
        t = KinetoTrace(rank=r, world_size=2)
        plant(t)
        t.write(folder / f"rank{r}.pt.trace.json")
    a = traceinsight.analyze(folder)
    (idle0,) = _by_code(a.findings, "TI001", 0)
    (idle1,) = _by_code(a.findings, "TI001", 1)
    (data0,) = _by_code(a.findings, "TI005")
    (sync1,) = _by_code(a.findings, "TI002")
    assert data0.location.rank == 0 and sync1.location.rank == 1
    # rank 0 idles on data, rank 1 after its host syncs: each symptom is given to its own rank's cause
    assert idle0.metrics["explained_by"] == data0.fingerprint and idle0.metrics["explained_ns"] == 7_920_000
    # rank 1's sync owns what the host sat in ``.item()`` (1040 µs a step); the ~0.9 ms of untraced host time after
    # it would delay the next launch without the sync too, so the sync explains only its part of the idle
    assert idle1.metrics["idle_by_category"] == {"host_sync": 5 * 1_040_000}
    assert idle1.metrics["explained_by"] == sync1.fingerprint and idle1.metrics["explained_share_pct"] == 53.4
    assert data0.explains == [idle0.fingerprint] and sync1.explains == [idle1.fingerprint]
    order = [(f.code, f.location.rank) for f in a.findings]
    assert order.index(("TI001", 0)) == order.index(("TI005", 0)) + 1
    assert order.index(("TI001", 1)) == order.index(("TI002", 1)) + 1


def test_two_host_sync_causes_split_the_gaps_by_the_time_each_covers(tmp_path):
    """Each step: a sync waits for a 1 ms kernel (TI002), then ``empty_cache``'s cudaFree holds the host 1.5 ms with
    the GPU idle (TI031). Of TI001's 12.5 ms, the sync owns what it blocked (995 µs a step: 5.97 ms, TI002's own
    figure) and the rest is the host's work after it, the flushes' and untraced; the flushes cover 7.5 ms of the
    12.5 ms (60 %), so TI031 explains that much, no more."""
    t = KinetoTrace()
    for s in range(6):
        t0 = s * 4000.0
        t.step(s, t0, 4000.0)
        t.cpu_op("aten::mm", t0 + 1, 8.0)
        t.kernel("volta_sgemm_128x64_nn", t0 + 10, 1000.0, launch_us=t0 + 2)
        t.runtime("cudaStreamSynchronize", t0 + 20, 995.0)
        t.runtime("cudaFree", t0 + 1100, 1500.0)
        t.cpu_op("aten::mm", t0 + 3000, 8.0)
        t.kernel("volta_sgemm_128x64_nn", t0 + 3010, 900.0, launch_us=t0 + 3002)
    a = traceinsight.analyze(t.write(tmp_path / "two_syncs.json"))
    (gaps,) = _by_code(a.findings, "TI001")
    (flush,) = _by_code(a.findings, "TI031")
    (sync,) = _by_code(a.findings, "TI002")
    assert gaps.impact_ns == 12_500_000 and gaps.metrics["idle_by_category"] == {"host_sync": 6 * 995_000}
    assert sync.impact_ns == sync.saving_ns == 6 * 995_000
    assert flush.impact_ns == 5 * 1_500_000  # steps 1-5 (step 0 is warm-up)
    assert gaps.metrics["explained_by"] == flush.fingerprint
    assert (gaps.metrics["explained_ns"], gaps.metrics["explained_share_pct"]) == (7_500_000, 60.0)
    assert sync.explains == []


#: rule code -> the what-if transform its rule declares, as the engine passes it
_TRANSFORMS = {code: cls.what_if for code, cls in discover().rules.items()}


# --- causes.link on hand-made findings ------------------------------------------------------------------
def _f(code, category, impact_ns, *, rank=0, device=None, key="", instances=(), idle_by_category=None, root_cause=False):
    metrics = {} if idle_by_category is None else {"idle_by_category": dict(idle_by_category)}
    return Finding(
        root_cause=root_cause,
        code=code,
        title=code,
        severity=Severity.WARNING,
        message="",
        impact_ns=impact_ns,
        location=Location(rank=rank, device=device),
        metrics=metrics,
        key=key,
        category=category,
        instances=[Instance(s, e, r, d) for s, e, r, d in instances],
    )


def test_attribution_path_links_without_instances():
    sym = _f("TI001", "gpu_idle", 1000, device=0, idle_by_category={"host_sync": 600, "input_pipeline": 300})
    sync = _f("TI002", "host_sync", 50)
    data = _f("TI005", "input_pipeline", 5000)
    out = causes.link([sym, data, sync])
    assert sym.metrics["explained_by"] == sync.fingerprint
    assert (sym.metrics["explained_ns"], sym.metrics["explained_share_pct"]) == (600, 60.0)
    assert sync.explains == [sym.fingerprint] and data.explains == []
    assert out == [data, sync, sym]


def test_min_share_is_inclusive():
    at = _f("TI001", "gpu_idle", 1000, key="a", idle_by_category={"host_sync": 500})
    below = _f("TI001", "gpu_idle", 1000, key="b", idle_by_category={"host_sync": 499})
    sync = _f("TI002", "host_sync", 10)
    causes.link([at, below, sync])
    assert causes.MIN_SHARE == 0.5
    assert at.metrics["explained_by"] == sync.fingerprint and at.metrics["explained_share_pct"] == 50.0
    assert "explained_by" not in below.metrics and sync.explains == [at.fingerprint]


def test_time_path_links_by_coverage():
    # the symptom's gaps: 0-100 and 200-300 ns; the cause covers 0-100 and half of the second: 150 of 200 ns
    sym = _f("TI003", "launch_overhead", 800, device=0, instances=[(0, 100, 0, 0), (200, 300, 0, 0)])
    rnn = _f("TI004", "compute", 10, instances=[(-50, 100, 0, None), (250, 400, 0, None)])
    out = causes.link([sym, rnn])
    assert sym.metrics["explained_by"] == rnn.fingerprint
    assert sym.metrics["explained_ns"] == 600  # 800 ns x 150/200
    assert sym.metrics["explained_share_pct"] == 75.0
    assert out == [rnn, sym]


def test_time_path_counts_only_the_symptoms_rank_and_device():
    sym = _f("TI003", "launch_overhead", 100, rank=0, device=0, instances=[(0, 100, 0, 0)])
    # instances on another rank and another device of the same rank cover nothing of the symptom's
    other = _f("TI004", "compute", 10, rank=None, instances=[(0, 100, 1, 0), (0, 100, 0, 1)])
    causes.link([sym, other])
    assert "explained_by" not in sym.metrics and other.explains == []
    # an instance naming no rank/device applies everywhere
    anywhere = _f("TI004", "compute", 10, rank=None, key="x", instances=[(0, 60, None, None)])
    causes.link([sym, anywhere])
    assert sym.metrics["explained_by"] == anywhere.fingerprint and sym.metrics["explained_ns"] == 60


def test_coverage_share_is_capped_at_the_impact():
    sym = _f("TI001", "gpu_idle", 100, instances=[(0, 100, 0, 0)], idle_by_category={"input_pipeline": 400})
    data = _f("TI005", "input_pipeline", 10, instances=[(0, 100, 0, 0), (0, 100, 0, 0)])
    causes.link([sym, data])
    assert sym.metrics["explained_ns"] == 100 and sym.metrics["explained_share_pct"] == 100.0


def test_other_rank_or_device_never_links():
    sym = _f("TI001", "gpu_idle", 1000, rank=0, device=0, idle_by_category={"host_sync": 1000})
    on_rank1 = _f("TI002", "host_sync", 10, rank=1)
    on_dev1 = _f("TI002", "host_sync", 10, rank=0, device=1, key="d1")
    causes.link([sym, on_rank1, on_dev1])
    assert "explained_by" not in sym.metrics and on_rank1.explains == [] and on_dev1.explains == []
    everywhere = _f("TI002", "host_sync", 10, rank=None, key="all")
    causes.link([sym, on_rank1, on_dev1, everywhere])
    assert sym.metrics["explained_by"] == everywhere.fingerprint


def test_the_cause_that_explains_most_wins():
    sym = _f("TI001", "gpu_idle", 1000, idle_by_category={"host_sync": 550, "input_pipeline": 700})
    sync = _f("TI002", "host_sync", 10)
    data = _f("TI005", "input_pipeline", 10)
    causes.link([sym, sync, data])
    assert sym.metrics["explained_by"] == data.fingerprint and sym.metrics["explained_ns"] == 700
    assert data.explains == [sym.fingerprint] and sync.explains == []


def test_only_symptoms_are_explained_and_only_by_causes():
    # a cause category is never a symptom; a symptom category is never a cause; a rule never explains itself
    data = _f("TI005", "input_pipeline", 1000, idle_by_category={"host_sync": 1000})
    sync = _f("TI002", "host_sync", 10)
    quality = _f("TI010", "trace_quality", 10)
    sym = _f("TI001", "gpu_idle", 1000, key="a", idle_by_category={"trace_quality": 1000, "gpu_idle": 1000})
    sym2 = _f("TI001", "gpu_idle", 10, key="b")
    causes.link([data, sync, quality, sym, sym2])
    assert "explained_by" not in data.metrics and "explained_by" not in sym.metrics
    assert sync.explains == [] and quality.explains == [] and sym2.explains == []
    # zero impact: nothing to explain
    zero = _f("TI001", "gpu_idle", 0, key="z", idle_by_category={"host_sync": 0})
    causes.link([zero, sync])
    assert "explained_by" not in zero.metrics


def test_order_puts_each_symptom_after_its_cause():
    s1 = _f("TI001", "gpu_idle", 1000, key="1", idle_by_category={"input_pipeline": 900})
    s2 = _f("TI003", "launch_overhead", 1000, key="2", idle_by_category={"host_sync": 900})
    lone = _f("TI001", "gpu_idle", 1000, key="3")
    sync = _f("TI002", "host_sync", 10)
    data = _f("TI005", "input_pipeline", 10)
    out = causes.link([s1, s2, lone, sync, data])
    assert out == [lone, sync, s2, data, s1]
    # linking twice neither duplicates a link nor reorders
    again = causes.link(out)
    assert again == out and data.explains == [s1.fingerprint]


def test_attach_what_if_only_on_unexplained_causes(tmp_path):
    t = KinetoTrace()
    _loader_rank(t)
    views = traceinsight.analyze(t.write(tmp_path / "t.json")).views
    free = _f("TI005", "input_pipeline", 1000, key="free")
    explained = _f("TI005", "input_pipeline", 1000, key="explained")
    explained.metrics["explained_by"] = "0123456789abcdef"
    quality = _f("TI005", "trace_quality", 1000, key="quality")
    causes.attach_what_if([explained, quality, free], views, _TRANSFORMS)
    # removing the 4 x 1980 µs data waits: the 3 ms steps come down to about 1 ms
    assert free.what_if["baseline_step_ns"] == pytest.approx(3_000_000, rel=0.01)
    assert free.what_if["step_ns"] < 0.4 * free.what_if["baseline_step_ns"]
    assert explained.what_if is None and quality.what_if is None


def test_attach_what_if_edits_only_the_causes_instances_and_records_a_failure(tmp_path):
    t = KinetoTrace()
    _item_rank(t)
    a = traceinsight.analyze(t.write(tmp_path / "t.json"))
    (sync,) = _by_code(a.findings, "TI002")
    # TI002's model edits only the stalls it names: without instances there is nothing to edit and no prediction
    bare = _f("TI002", "host_sync", 1000, key="bare")
    placed = _f("TI002", "host_sync", 1000, key="placed")
    placed.instances = sync.instances
    causes.attach_what_if([bare, placed], a.views, _TRANSFORMS)
    assert bare.what_if is None and "what_if_error" not in bare.metrics
    # the report adds its comparison with the claim (traceinsight.assess.savings); the replay's own keys are the same
    replay = lambda w: {k: v for k, v in w.items() if k not in ("saving_ns", "steps_in_window", "agrees", "why")}  # noqa: E731
    assert replay(placed.what_if) == replay(sync.what_if) and placed.what_if["step_ns"] < placed.what_if["baseline_step_ns"]
    # a model that fails says so on the finding instead of taking the analysis down
    broken = _f("TI005", "input_pipeline", 1000)
    causes.attach_what_if([broken], None, _TRANSFORMS)
    assert broken.what_if is None and broken.metrics["what_if_error"].startswith("AttributeError: ")


def test_share_edge_cases():
    sync = _f("TI002", "host_sync", 10)
    tiny = _f("TI001", "gpu_idle", 1, key="tiny", idle_by_category={"host_sync": 1})
    nothing = _f("TI001", "gpu_idle", 2, key="nothing")  # no attribution, no instances: nothing to link by
    causes.link([tiny, nothing, sync])
    assert tiny.metrics["explained_by"] == sync.fingerprint and tiny.metrics["explained_ns"] == 1
    assert "explained_by" not in nothing.metrics
    # two thirds, to one decimal
    third = _f("TI001", "gpu_idle", 3, key="third", idle_by_category={"host_sync": 2})
    causes.link([third, sync])
    assert third.metrics["explained_share_pct"] == 66.7
    # zero-length gaps cover nothing (and divide by nothing); a 1 ns gap covered whole is explained whole
    empty = _f("TI003", "launch_overhead", 5, key="empty", instances=[(10, 10, 0, 0)])
    one = _f("TI003", "launch_overhead", 5, key="one", instances=[(10, 11, 0, 0)])
    rnn = _f("TI004", "compute", 1, instances=[(0, 100, 0, 0)])
    causes.link([empty, one, rnn])
    assert "explained_by" not in empty.metrics and one.metrics["explained_ns"] == 5


def test_only_the_symptoms_own_rank_and_device_instances_count():
    # the symptom is on rank 0 / device 0; its instances elsewhere are not its impact's
    for other in [(200, 300, 0, 1), (200, 300, 1, 0)]:
        sym = _f("TI003", "launch_overhead", 100, rank=0, device=0, instances=[(0, 100, 0, 0), other])
        rnn = _f("TI004", "compute", 1, rank=None, instances=[(200, 300, None, None)])
        causes.link([sym, rnn])
        assert "explained_by" not in sym.metrics, other


def test_a_rule_never_explains_its_own_findings_and_ties_go_to_the_first():
    sym = _f("TI001", "gpu_idle", 100, idle_by_category={"host_sync": 100})
    same_rule = _f("TI001", "host_sync", 10, key="cause")
    causes.link([sym, same_rule])
    assert "explained_by" not in sym.metrics
    # a tie in what two causes cover goes to the first listed
    a = _f("TI002", "host_sync", 1, key="a", instances=[(0, 100, 0, None)])
    b = _f("TI002b", "host_sync", 1, key="b", instances=[(0, 100, 0, None)])
    tie = _f("TI001", "gpu_idle", 100, key="tie", instances=[(10, 90, 0, None)], idle_by_category={"host_sync": 80})
    causes.link([tie, a, b])
    assert tie.metrics["explained_by"] == a.fingerprint


def test_a_root_cause_rule_explains_idle_of_its_own_category_and_is_never_explained():
    """A finding whose rule declares itself a root cause (TI015's recompile) explains an idle symptom by the time
    its instances cover, although both are ``gpu_idle``; a host-sync cause covering the recompile does not explain
    it in turn; without the flag the same finding is an ordinary symptom, explained by the sync and explaining
    nothing."""
    gaps = _f("TI001", "gpu_idle", 100, key="g", instances=[(0, 100, 0, None)])
    rec = _f("TI015", "gpu_idle", 80, key="r", instances=[(10, 90, 0, None)], idle_by_category={"host_sync": 80}, root_cause=True)
    sync = _f("TI002", "host_sync", 80, key="s", instances=[(10, 90, 0, None)])
    causes.link([gaps, rec, sync])
    assert gaps.metrics["explained_by"] == rec.fingerprint and gaps.metrics["explained_ns"] == 80
    assert rec.explains == [gaps.fingerprint] and "explained_by" not in rec.metrics and sync.explains == []
    plain = _f("TI015", "gpu_idle", 80, key="p", instances=[(10, 90, 0, None)], idle_by_category={"host_sync": 80})
    gaps2 = _f("TI001", "gpu_idle", 100, key="g2", instances=[(0, 100, 0, None)])
    causes.link([gaps2, plain, sync])
    assert gaps2.metrics["explained_by"] == sync.fingerprint and plain.metrics["explained_by"] == sync.fingerprint
    assert plain.explains == []


def test_two_causes_of_one_category_split_nothing_by_attribution():
    """A sync stall and an allocator flush are both host synchronization: the symptom's host-sync idle cannot be
    credited whole to either, so only the time each one's instances cover counts."""
    sync = _f("TI002", "host_sync", 30, key="sync", instances=[(0, 30, 0, None)])
    flush = _f("TI031", "host_sync", 20, key="flush", instances=[(60, 70, 0, None)])
    gaps = _f("TI001", "gpu_idle", 100, key="gaps", instances=[(0, 100, 0, None)], idle_by_category={"host_sync": 100})
    causes.link([gaps, flush, sync])
    assert "explained_by" not in gaps.metrics  # 30 % and 10 % covered: neither explains half
    alone = _f("TI001", "gpu_idle", 100, key="alone", instances=[(0, 100, 0, None)], idle_by_category={"host_sync": 100})
    causes.link([alone, flush])
    assert alone.metrics["explained_by"] == flush.fingerprint  # the only host-sync cause: the category is its
    assert alone.metrics["explained_ns"] == 100
    most = _f("TI001", "gpu_idle", 100, key="most", instances=[(0, 100, 0, None)], idle_by_category={"host_sync": 100})
    big = _f("TI002", "host_sync", 80, key="big", instances=[(0, 80, 0, None)])
    causes.link([most, flush, big])
    assert most.metrics["explained_by"] == big.fingerprint
    assert most.metrics["explained_ns"] == 80
    # the larger claim wins whatever the order of the causes
    sym2 = _f("TI001", "gpu_idle", 1000, key="2", idle_by_category={"host_sync": 550, "input_pipeline": 700})
    data, sync = _f("TI005", "input_pipeline", 10), _f("TI002", "host_sync", 10, key="s")
    causes.link([sym2, data, sync])
    assert sym2.metrics["explained_by"] == data.fingerprint


def test_an_unexplained_symptom_first_does_not_stop_linking():
    lone = _f("TI001", "gpu_idle", 1000, key="lone")
    sym = _f("TI001", "gpu_idle", 1000, key="sym", idle_by_category={"host_sync": 900})
    sync = _f("TI002", "host_sync", 10)
    assert causes.link([lone, sym, sync]) == [lone, sync, sym]


def test_order_moves_only_symptoms_that_name_their_cause():
    # a cause listing a finding that does not name it back (no explained_by) leaves that finding in its place
    sym = _f("TI001", "gpu_idle", 1000)
    cause = _f("TI002", "host_sync", 10)
    cause.explains.append(sym.fingerprint)
    assert causes.order([sym, cause]) == [sym, cause]
    assert causes.order([cause, sym]) == [cause, sym]
    stranger = _f("TI002", "host_sync", 10, key="claims-a-stranger")
    stranger.explains.append("0000000000000000")
    assert causes.order([stranger]) == [stranger]


def test_a_cause_holding_its_symptoms_idle_says_its_figure_is_more_than_its_estimate():
    """A root cause's card takes the idle its symptoms claim of it, so its figure can exceed its own estimate (the
    recorded recompiles: TI015 holds TI001's idle around them); the message then says so instead of "at most its own
    estimate", which the figure beside it would contradict."""
    from pathlib import Path

    a = traceinsight.analyze(Path(__file__).resolve().parent.parent / "sample_traces" / "h100" / "compile_recompile.json.gz")
    (f,) = [x for x in a.findings if x.code == "TI015"]
    assert f.explains and f.saving_ns > f.impact_ns
    assert "more than its own estimate of" in f.message and "at most its own estimate" not in f.message

