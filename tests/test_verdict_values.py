"""The verdict and the headline figures, pinned by value (``traceinsight.assess.verdict``).

Every test plants a trace with the test helpers (the real kineto format), analyses it with no rule running, and
then hands the verdict the findings it is about, so the numbers below are the ledger's own (µs laid out by hand
in each trace) and what the verdict makes of them: the sentence a user reads, the bucket it names, the finding
it credits, and the est. savings. Nothing here depends on a rule's thresholds.
"""

from __future__ import annotations

import pandas as pd
import pytest

import traceinsight
from traceinsight.assess import verdict
from traceinsight.model.finding import Instance
from traceinsight.rule_api import Finding, Fix, Location, Severity
from traceinsight.assess.verdict import claims, claims_of, details, finding_claims, headline, ledger_of

from .helpers.kineto_writer import KinetoTrace
from .helpers.rule_cases import copy_trace

DATA = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
MS = 1_000_000


# --- planted traces ----------------------------------------------------------------------------------------
def data_wait_trace() -> KinetoTrace:
    """6 steps: a 400 µs data wait, then a 560 µs kernel. Window 0.42 -> 5.98 ms = 5.56 ms, 3.36 ms busy; of the
    five 440 µs gaps, 400 µs each sit in the data wait (2.00 ms), 4 µs are host work and 36 µs untraced."""
    t = KinetoTrace()
    for i in range(6):
        b = i * 1000
        t.annotation(DATA, b, 400)
        t.kernel("gemm", b + 420, 560, launch_us=b + 405)
    return t


def two_gpu_trace() -> KinetoTrace:
    """The data-wait loop feeding two GPUs: device 0 runs 560 µs a step, device 1 only 300 µs."""
    t = KinetoTrace(devices=2)
    for i in range(6):
        b = i * 1000
        t.annotation(DATA, b, 400)
        t.kernel("gemm", b + 420, 560, launch_us=b + 405, device=0)
        t.kernel("gemm", b + 420, 300, launch_us=b + 410, device=1)
    return t


def warm_trace(iters: int = 39) -> KinetoTrace:
    """50 ms of autotuning in the first convolution (warm-up), then ``iters`` steps of a 230 µs kernel launched
    after 60 µs of host work: the steady state is launch-bound."""
    t = KinetoTrace()
    t.kernel("k0", 0, 10)
    t.cpu_op("aten::conv2d", 20, 50_000)
    t.kernel("conv", 50_010, 100, launch_us=50_000)
    for i in range(1, iters + 1):
        b = 50_200 + 300 * i
        t.cpu_op("aten::conv2d", b, 50)
        t.kernel("conv", b + 60, 230, launch_us=b + 40)
    return t


def warm_only_trace() -> KinetoTrace:
    """The same warm-up, followed by under a millisecond of steady state."""
    t = KinetoTrace()
    t.kernel("k0", 0, 10)
    t.cpu_op("aten::conv2d", 20, 50_000)
    t.kernel("conv", 50_010, 100, launch_us=50_000)
    for i in range(12):
        b = 50_120 + 40 * i
        t.cpu_op("aten::conv2d", b, 10)
        t.kernel("conv", b + 15, 20, launch_us=b + 5)
    return t


def host_gap_trace(cpu_ops: bool) -> KinetoTrace:
    """10 kernels of 400 µs, 1 ms apart; between them the host runs a 900 µs CPU op (``cpu_ops``) or nothing traced."""
    t = KinetoTrace()
    for i in range(10):
        b = i * 1000
        t.kernel("gemm", b, 400, launch_us=b - 10)
        if cpu_ops:
            t.cpu_op("aten::index", b + 10, 900)
    return t


def kernels_trace(gap_us: int, n: int = 20) -> KinetoTrace:
    """``n`` kernels of ``1000 - gap_us`` µs every millisecond, each launched 300 µs ahead (work queued)."""
    t = KinetoTrace()
    for i in range(n):
        t.kernel("gemm", 1000 * i, 1000 - gap_us, launch_us=1000 * i - 300)
    return t


def analyse(tmp_path, t: KinetoTrace, findings: list[Finding] | None = None):
    """The analysis of ``t`` with no rule run, then ``findings`` planted and the verdict taken again."""
    a = traceinsight.analyze(str(t.write(tmp_path / "t.json")), ignore=["TI"])
    assert a.findings == []
    if findings is not None:
        a.findings = findings
    return a


def finding(code: str, category: str, impact_ns: int, *, title: str | None = None, rank=None, device=None,
            severity=Severity.WARNING, **kw) -> Finding:
    return Finding(code=code, title=title or f"{code} title", severity=severity, message="", impact_ns=impact_ns,
                   location=Location(rank=rank, device=device), category=category, **kw)


def lever(code: str, category: str, saving_ns: int, share_pct: float, *, kind: str = "idle", **kw) -> Finding:
    """A finding as the engine leaves it after ``savings.assess``: its figure, kind and share set, with a fix."""
    return finding(code, category, kw.pop("impact_ns", saving_ns), saving_kind=kind, saving_ns=saving_ns, share_pct=share_pct,
                   fixes={"pytorch": Fix("do this")}, **kw)


RULE_WORDS = f" (the rule: {verdict.RULE})."


# --- the verdict, branch by branch -------------------------------------------------------------------------
def test_input_pipeline_verdict_in_full(tmp_path):
    a = analyse(tmp_path, data_wait_trace())
    # no finding: nothing claimed, nothing saved, no speed-up, no steps
    assert headline(a) == {
        "span_ns": 5_980_000, "gpu_window_ns": 5_560_000, "gpu_busy_pct": 60.4, "steady_busy_pct": None, "findings": 0, "findings_by_severity": {"error": 0, "warning": 0, "info": 0},
        "est_savings_ns": 0, "est_savings_gpu_ns": 0, "largest_saving_ns": 0, "modelled_speedup_ns": 0,
        "avoidable_idle_ns": 2_200_000, "steps": 0, "mean_step_ns": None}
    # a modelled finding that names no figure models nothing
    a.findings = [finding("TI007", "compute", 1 * MS, saving_kind="modelled")]
    assert headline(a)["modelled_speedup_ns"] == 0
    data = lever("TI005", "input_pipeline", 2 * MS, 35.971, title="the loader runs in the main process")
    a.findings = [data]
    d = details(a)
    assert d["ledger_ns"] == {"compute": 3_360_000, "communication": 0, "copy": 0, "idle_data_wait": 2_000_000,
                              "idle_host_sync": 0, "idle_launch_bound": 0, "idle_host_busy": 20_000, "idle_untraced": 180_000,
                              "idle_gpu_dependency": 0, "idle_warmup": 0, "idle_other": 0}
    assert {k: v for k, v in d.items() if k != "ledger_ns"} == {
        "window_ns": 5_560_000,
        "claimed_ns_by_bucket": {"idle_data_wait": 2_000_000},
        "impact_ns_by_category": {"input_pipeline": 2_000_000},
        "category": "input_pipeline",
        "label": "input pipeline",
        "headline": "Bound by input pipeline",
        "bound": True,
        "sentence": "The GPU is busy 60.4 % of its window (of which 100 % compute); the lever that gives back most is TI005 (the "
                    "loader runs in the main process): 2.00 ms, 36.0 % of its window; GPU idle while the host waits for input data "
                    "holds 2.00 ms (36.0 % of its window)" + RULE_WORDS,
        "bucket": "idle_data_wait",
        "bucket_ns": 2_000_000,
        "bucket_pct": 35.971,  # 2.00 / 5.56 ms
        "lever": "TI005", "lever_ns": 2_000_000, "lever_pct": 35.971,
        "rule": verdict.RULE,
        "claimed_by": data.fingerprint,
        "root_cause": None,
    }


def test_a_bucket_without_a_finding_names_no_bound(tmp_path):
    """The ledger alone never forms the verdict: 2 ms of data wait and no finding on a 60 % busy GPU is compute;
    on a mostly idle GPU it is "no finding explains the idle time"."""
    d = details(analyse(tmp_path, data_wait_trace()))
    assert (d["category"], d["lever"], d["bound"]) == ("compute", None, True)
    d = details(analyse(tmp_path, host_gap_trace(cpu_ops=True)))  # 42.6 % busy
    assert (d["category"], d["headline"], d["bound"], d["bucket"], d["lever"]) == (
        "unexplained", "No finding explains the idle time", False, "idle_host_busy", None)
    assert d["sentence"] == (
        "The GPU is busy 42.6 % of its window (of which 100 % compute); it is idle 57.4 % of its window, most of it GPU idle while "
        "the host runs other framework/Python work (4.63 ms), but no finding explains 5 % of it with a fix (none gives any back), "
        "so no lever is named: read the timeline's longest gaps" + RULE_WORDS)


def test_two_gpus_are_described_together(tmp_path):
    a = analyse(tmp_path, two_gpu_trace())
    a.findings = [lever("TI005", "input_pipeline", 2 * MS, 37.736, title="data")]
    d = details(a)
    # device 0: 5.56 ms window, 3.36 ms busy; device 1: 5.30 ms window, 1.80 ms busy; 2 ms of data wait on each
    assert d["window_ns"] == 5_560_000 + 5_300_000
    assert d["sentence"] == ("The 2 GPUs are busy 47.5 % of their windows (of which 100 % compute); the lever that gives back most "
                             "is TI005 (data): 2.00 ms, 37.7 % of their windows; GPU idle while the host waits for input data holds "
                             "4.00 ms (36.8 % of their windows)" + RULE_WORDS)
    assert (d["bucket_ns"], d["bucket_pct"], d["lever_ns"]) == (4_000_000, 36.832, 2 * MS)


def test_warm_up_is_set_aside_in_the_sentence(tmp_path):
    a = analyse(tmp_path, warm_trace())
    a.findings = [lever("TI003", "launch_overhead", 2_660_000, 21.803, title="launch-bound")]
    d = details(a)
    steady = d["window_ns"] - d["ledger_ns"]["idle_warmup"]
    assert d["ledger_ns"]["idle_warmup"] == 49_990_000 and steady == 12_200_000
    assert d["sentence"] == (
        "49.99 ms of its window (80 %) is warm-up and left out; in the steady state the GPU is busy 74.4 % of the time "
        "(of which 100 % compute); the lever that gives back most is TI003 (launch-bound): 2.66 ms, 21.8 % of the steady state; "
        "GPU idle between kernels the host launches too slowly holds 2.66 ms (21.8 % of the steady state)" + RULE_WORDS)
    # the share is of the steady state, not of the whole window
    assert (d["category"], d["bucket"], d["bucket_ns"], d["bucket_pct"]) == ("launch_overhead", "idle_launch_bound", 2_660_000, 21.803)


def test_host_busy_and_untraced_gaps(tmp_path):
    """An idle finding names the bucket it claims most."""
    a = analyse(tmp_path, host_gap_trace(cpu_ops=True))
    a.findings = [lever("TI001", "gpu_idle", 4_630_000, 49.2, impact_ns=100 * MS, title="GPU idle")]
    d = details(a)
    assert (d["category"], d["headline"], d["bucket"]) == ("host_overhead", "Bound by host/Python overhead", "idle_host_busy")
    a = analyse(tmp_path, host_gap_trace(cpu_ops=False))
    a.findings = [lever("TI001", "gpu_idle", 5_360_000, 57.1, impact_ns=100 * MS, title="GPU idle")]
    d = details(a)
    assert (d["category"], d["bucket"]) == ("host_untraced", "idle_untraced")


def test_busy_gpu_without_idle_is_compute_bound(tmp_path):
    d = details(analyse(tmp_path, kernels_trace(gap_us=0)))
    assert d["sentence"] == (
        "The GPU is busy 100.0 % of its window (of which 100 % compute); no finding names a bound (none gives any back): "
        "the GPU is busy most of the time, so "
        "speed-ups now come from faster kernels (precision, fusion, batch size), not from feeding the GPU" + RULE_WORDS)
    assert (d["category"], d["bucket"], d["bucket_ns"], d["bucket_pct"], d["headline"]) == ("compute", "compute", 20_000_000, 100.0, "Bound by compute")


@pytest.mark.parametrize(("pct", "category"), [(4.99, "unexplained"), (5.0, "host_overhead")])
def test_the_five_percent_line(tmp_path, pct, category):
    """A finding names the bound when its priced saving is at least 5 % of the steady state (a 42.6 %-busy GPU)."""
    a = analyse(tmp_path, host_gap_trace(cpu_ops=True))
    a.findings = [lever("TI001", "gpu_idle", int(9_410_000 * pct / 100), pct, impact_ns=100 * MS)]
    assert details(a)["category"] == category


@pytest.mark.parametrize(("pct", "category"), [(7.44, "compute"), (7.45, "launch_overhead")])
def test_on_a_mostly_busy_gpu_an_idle_lever_must_beat_faster_kernels(tmp_path, pct, category):
    """74.4 % busy: an idle lever names the bound only above 10 % of busy time (7.44 % of the steady state); a
    6.8 % launch-bound sliver on such a GPU is a minor host gap, and the verdict says so."""
    a = analyse(tmp_path, warm_trace())
    a.findings = [lever("TI003", "launch_overhead", int(12_200_000 * pct / 100), pct)]
    d = details(a)
    assert d["category"] == category
    if category == "compute":
        assert f"the largest, TI003, gives back {pct:.1f} %, less than faster kernels would (10 % of busy time)" in d["sentence"]


def test_the_largest_priced_saving_wins_busy_or_idle(tmp_path):
    """A modelled speed-up that gives back more than an idle claim names the bound, and the other way round."""
    a = analyse(tmp_path, warm_trace())
    idle = lever("TI003", "launch_overhead", 1 * MS, 8.2)
    faster = lever("TI041", "compute", 2 * MS, 16.4, kind="modelled", title="unfused")
    a.findings = [idle, faster]
    d = details(a)
    assert (d["category"], d["lever"], d["claimed_by"]) == ("compute", "TI041", faster.fingerprint)
    assert "the lever that gives back most is TI041 (unfused): 2.00 ms, 16.4 % of the steady state; a modelled speed-up" in d["sentence"]
    faster.saving_ns, faster.share_pct = 500_000, 4.1
    assert (details(a)["category"], details(a)["lever"]) == ("launch_overhead", "TI003")


def test_what_cannot_form_the_verdict(tmp_path):
    """No fix, no saving, trace quality: none of these is a lever."""
    a = analyse(tmp_path, host_gap_trace(cpu_ops=True))
    nofix = lever("XT1", "gpu_idle", 4 * MS, 42.0)
    nofix.fixes = {}
    zero = lever("TI021", "communication", 0, 0.0, kind="modelled", impact_ns=9 * MS)
    quality = lever("TI013", "trace_quality", 4 * MS, 42.0, kind="none")
    a.findings = [nofix, zero, quality]
    assert details(a)["category"] == "unexplained"
    assert verdict.levers(a, claims(a)) == []


def test_copies_bound_when_they_are_most_of_busy_time(tmp_path):
    d = details(analyse(tmp_path, copy_trace()))
    assert d["sentence"] == (
        "The GPU is busy 97.3 % of its window (of which 34 % compute, 66 % copies); no finding names a bound (none gives any back) "
        "and copies are 66 % of GPU busy time (7.60 ms; host↔device at 44.2 GB/s over the host link): the GPU mostly moves data, so "
        "fewer, larger, pinned or overlapped transfers save more than faster kernels" + RULE_WORDS)
    assert (d["category"], d["bucket"], d["bucket_ns"], d["bucket_pct"], d["headline"]) == ("copy", "copy", 7_600_000, 63.764, "Bound by copies")


def test_copies_already_pinned_are_told_to_move_less_data(tmp_path):
    """The same copy-bound loop with every copy from pinned memory: "pinned transfers" is what it already does, so
    the lever named is moving less data or overlapping it."""
    s = details(analyse(tmp_path, copy_trace(pageable=False)))["sentence"]
    assert "so moving less data (keep it on the GPU between steps" in s and "already from pinned memory" in s
    assert "pinned or overlapped transfers" not in s


def test_copies_against_a_real_idle_lever(tmp_path):
    """A copy finding and an idle finding: the larger priced saving names the bound."""
    a = analyse(tmp_path, copy_trace(data_us=1000))  # 3 ms of data wait
    pinned = lever("TI006", "copy", 4 * MS, 25.0, kind="modelled")
    data = lever("TI005", "input_pipeline", 3 * MS, 18.75)
    a.findings = [data, pinned]
    assert details(a)["category"] == "copy"
    pinned.saving_ns, pinned.share_pct = 2 * MS, 12.5
    assert (details(a)["category"], details(a)["bucket"]) == ("input_pipeline", "idle_data_wait")


def test_no_gpu_work(tmp_path):
    t = KinetoTrace()
    t.cpu_op("aten::add", 0.0, 10.0)
    a = analyse(tmp_path, t)
    d = details(a)
    assert {k: v for k, v in d.items() if k != "ledger_ns"} == {
        "window_ns": 0, "claimed_ns_by_bucket": {}, "impact_ns_by_category": {}, "category": "no_gpu",
        "label": "no GPU activity", "headline": "No GPU activity", "bound": False,
        "sentence": "The trace has no GPU kernels or copies, so there is nothing on the GPU to explain.",
        "bucket": None, "bucket_ns": 0, "bucket_pct": 0.0, "lever": None, "lever_ns": None, "lever_pct": None,
        "rule": verdict.RULE, "claimed_by": None, "root_cause": None}
    assert verdict.cannot_judge(a) is None
    assert headline(a)["gpu_busy_pct"] is None


# --- windows that cannot be judged -------------------------------------------------------------------------
def test_too_little_gpu_work(tmp_path):
    t = KinetoTrace()
    for i in range(3):
        t.kernel("k", 100 * i, 3)
    idle = finding("TI001", "gpu_idle", 10 * MS)
    modelled = finding("TI007", "compute", 10 * MS, saving_kind="modelled", saving_ns=5000)
    a = analyse(tmp_path, t, [idle, modelled])
    d = details(a)
    assert d["sentence"] == ("The GPU did only 9.0 µs of work (3 kernels) in a 203.0 µs window: too little to say what bounds the "
                             "run (a graph capture, a cut profile, or set-up only). Performance findings are kept at info.")
    assert (d["category"], d["why"], d["bound"], d["headline"]) == ("cannot_judge", "too_little_gpu_work", False, "Cannot judge this window")
    assert (d["bucket"], d["bucket_ns"], d["bucket_pct"]) == (None, 9_000, 4.433)  # the busy time, of the window
    assert d["record_better"].startswith("Record steady-state steps: wrap the loop in torch.profiler.profile(")
    # the idle the findings claim is real in the ledger, but a window that cannot be judged claims no saving
    assert claims(a)["total_ns"] > 0
    h = headline(a)
    assert (h["est_savings_ns"], h["est_savings_gpu_ns"], h["largest_saving_ns"], h["modelled_speedup_ns"]) == (0, 0, 0, 0)
    assert h["findings"] == 2 and h["findings_by_severity"] == {"error": 0, "warning": 2, "info": 0}


@pytest.mark.parametrize(("n", "judged"), [(9, False), (10, True)])
def test_ten_kernels_are_enough_to_judge(tmp_path, n, judged):
    """Under 1 ms of GPU work, the number of kernels decides: ten is a pattern, nine is not."""
    t = KinetoTrace()
    for i in range(n):
        t.kernel("k", 100 * i, 3, launch_us=100 * i - 5)
    d = details(analyse(tmp_path, t))
    assert (d["category"] != "cannot_judge") is judged


def test_a_millisecond_of_work_is_enough_to_judge(tmp_path):
    t = KinetoTrace()
    for i, us in enumerate((334, 333, 333)):
        t.kernel("k", 1000 * i, us, launch_us=1000 * i - 5)  # exactly 1 ms of work in 3 kernels
    assert details(analyse(tmp_path, t))["category"] != "cannot_judge"
    t = KinetoTrace()
    for i in range(3):
        t.kernel("k", 1000 * i, 333, launch_us=1000 * i - 5)  # 0.999 ms
    assert details(analyse(tmp_path, t))["category"] == "cannot_judge"


@pytest.mark.parametrize(("graph", "why"), [(True, "graph_capture"), (False, "too_little_gpu_work")])
def test_a_trace_quality_finding_withholds_judgement(tmp_path, graph, why):
    held = finding("TI012", "trace_quality", 0, title="the window is a CUDA graph capture",
                   metrics={"withholds_judgement": True, "graph_capture": graph})
    other = finding("TI099", "trace_quality", 0, metrics={"graph_capture": True})  # says something, withholds nothing
    a = analyse(tmp_path, data_wait_trace(), [other, held, finding("TI005", "input_pipeline", 10 * MS)])
    d = details(a)
    assert (d["category"], d["why"], d["bucket"], d["bucket_ns"]) == ("cannot_judge", why, None, 3_360_000)
    assert d["sentence"] == ("TI012: the window is a CUDA graph capture. The window's busy % and gaps describe that, not a workload "
                             "in steady state; performance findings are kept at info.")
    assert headline(a)["est_savings_ns"] == 0
    a.findings = [other, lever("TI005", "input_pipeline", 2 * MS, 36.0)]
    assert details(a)["category"] == "input_pipeline" and headline(a)["est_savings_ns"] == 2 * MS


def test_a_window_of_warm_up_only(tmp_path):
    a = analyse(tmp_path, warm_only_trace())
    d = details(a)
    assert d["sentence"] == ("One-time work fills 99 % of the window and less than 1 ms of steady state is left (49.99 ms of 50.59 ms "
                             "is one-time work, set aside): the window shows start-up, not the steady state. Performance findings "
                             "are kept at info.")
    assert (d["category"], d["why"], d["bucket"], d["bucket_ns"], d["bucket_pct"]) == ("cannot_judge", "warmup", "idle_warmup", 49_990_000, 98.804)
    # the same answer from plain views (an analysis without the engine's store)
    a.views = None
    assert verdict.cannot_judge(a) == ("warmup", d["sentence"])


# --- est. savings: what findings claim from the ledger -----------------------------------------------------
def test_a_finding_claims_its_buckets_scaled_to_its_impact(tmp_path):
    led = ledger_of(analyse(tmp_path, data_wait_trace()))
    # unlimited: every avoidable bucket of the device
    assert finding_claims(led, finding("TI001", "gpu_idle", 10 * MS)) == {
        (0, 0, "idle_data_wait"): 2_000_000, (0, 0, "idle_host_busy"): 20_000, (0, 0, "idle_untraced"): 180_000}
    # 1.1 ms against the 2.2 ms held: each bucket halved
    assert finding_claims(led, finding("TI001", "gpu_idle", 1_100_000)) == {
        (0, 0, "idle_data_wait"): 1_000_000, (0, 0, "idle_host_busy"): 10_000, (0, 0, "idle_untraced"): 90_000}
    # its category's buckets only; its own declared buckets, when it has them (unknown names dropped)
    assert finding_claims(led, finding("TI005", "input_pipeline", 10 * MS)) == {(0, 0, "idle_data_wait"): 2_000_000}
    assert finding_claims(led, finding("XT1", "gpu_idle", 10 * MS, claims=("idle_untraced", "no_such_bucket"))) == {(0, 0, "idle_untraced"): 180_000}
    # an unknown category is the default one (compute: busy time)
    assert finding_claims(led, finding("XT2", "no_such_category", 10 * MS)) == {(0, 0, "compute"): 3_360_000}
    # nothing: no impact, a category that claims nothing, another rank or device
    assert finding_claims(led, finding("TI005", "input_pipeline", 0)) == {}
    assert finding_claims(led, finding("TI012", "trace_quality", 10 * MS)) == {}
    assert finding_claims(led, finding("TI005", "input_pipeline", 10 * MS, rank=1)) == {}
    assert finding_claims(led, finding("TI005", "input_pipeline", 10 * MS, device=1)) == {}
    assert finding_claims(led, finding("TI005", "input_pipeline", 10 * MS, rank=0, device=0)) == {(0, 0, "idle_data_wait"): 2_000_000}


def test_claims_on_two_gpus_count_the_device_that_saves_most(tmp_path):
    a = analyse(tmp_path, two_gpu_trace())
    led = ledger_of(a)
    t0, t1 = led.totals(0, 0), led.totals(0, 1)
    avoid0 = t0["idle_data_wait"] + t0["idle_host_busy"] + t0["idle_untraced"]
    avoid1 = t1["idle_data_wait"] + t1["idle_host_busy"] + t1["idle_untraced"]
    assert avoid0 == 2_200_000 and avoid1 == 3_500_000  # device 1 idles 700 µs a gap
    a.findings = [finding("TI001", "gpu_idle", 100 * MS)]
    cl = claims(a)
    assert (cl["total_ns"], cl["gpu_ns"], cl["per_finding"]) == (3_500_000, 5_700_000, [3_500_000])
    assert cl["by_bucket"]["idle_data_wait"] == 4_000_000  # per bucket, the devices add up
    h = headline(a)
    assert (h["est_savings_ns"], h["est_savings_gpu_ns"], h["largest_saving_ns"], h["avoidable_idle_ns"]) == (3_500_000, 5_700_000, 3_500_000, 5_700_000)
    # a finding on device 0 only
    a.findings = [finding("TI001", "gpu_idle", 100 * MS, rank=0, device=0)]
    assert (claims(a)["total_ns"], claims(a)["gpu_ns"]) == (2_200_000, 2_200_000)


def test_overlapping_claims_count_once_and_busy_claims_not_at_all(tmp_path):
    a = analyse(tmp_path, data_wait_trace())
    gap = finding("TI001", "gpu_idle", 10 * MS)
    data = finding("TI005", "input_pipeline", 1 * MS)
    faster = finding("TI007", "compute", 500_000, saving_kind="modelled", saving_ns=400_000, share_pct=7.2)
    faster2 = finding("TI008", "compute", 300_000, saving_kind="modelled", saving_ns=250_000)
    cl = claims_of(ledger_of(a), [gap, data, faster, faster2])
    # per bucket the largest claim counts: the gap's 2 ms of data wait, not 2 + 1 ms; compute: TI007's 0.5 ms
    assert cl["by_bucket"] == {"idle_data_wait": 2_000_000, "idle_host_busy": 20_000, "idle_untraced": 180_000, "compute": 500_000}
    assert (cl["total_ns"], cl["gpu_ns"]) == (2_200_000, 2_200_000)
    # one claim per nanosecond: the data-loading finding names 1 ms of the wait, the gap finding the rest of it
    assert cl["per_finding"] == [1_200_000, 1_000_000, 0, 0]
    a.findings = [gap, data, faster, faster2]
    h = headline(a)
    assert (h["est_savings_ns"], h["largest_saving_ns"], h["modelled_speedup_ns"]) == (2_200_000, 1_200_000, 400_000)
    assert details(a)["impact_ns_by_category"] == {"gpu_idle": 10 * MS, "input_pipeline": 1 * MS, "compute": 800_000}
    assert list(details(a)["impact_ns_by_category"]) == ["gpu_idle", "input_pipeline", "compute"]  # largest first
    assert details(a)["claimed_ns_by_bucket"] == cl["by_bucket"]


def test_a_cause_takes_the_buckets_it_claims_from_its_symptom(tmp_path):
    """A data-loading cause explaining an idle-gap symptom takes the gap's data-wait idle, and only that."""
    led = ledger_of(analyse(tmp_path, data_wait_trace()))
    gap = finding("TI001", "gpu_idle", 10 * MS)
    cause = finding("XT5", "input_pipeline", 1, explains=[gap.fingerprint])  # own claim: 1 ns
    cl = claims_of(led, [gap, cause])
    assert cl["each"][1] == {(0, 0, "idle_data_wait"): 2_000_000}
    assert cl["per_finding"] == [200_000, 2_000_000]  # the gap finding keeps what the cause leaves
    # a fingerprint that names no finding of the run takes nothing (and does not stop the others)
    lone = finding("XT5", "input_pipeline", 1, explains=["0123456789abcdef"])
    assert claims_of(led, [gap, lone])["each"][1] == {(0, 0, "idle_data_wait"): 1}
    lone.explains = ["0123456789abcdef", gap.fingerprint]
    assert claims_of(led, [gap, lone])["each"][1] == {(0, 0, "idle_data_wait"): 2_000_000}
    # a cause keeps its own claim where that is larger than what it takes
    half = finding("TI001", "gpu_idle", 1_100_000)  # claims half of each bucket: 1 ms of the data wait
    big = finding("XT5", "input_pipeline", 10 * MS, explains=[half.fingerprint])  # its own: all 2 ms
    assert claims_of(led, [half, big])["each"][1] == {(0, 0, "idle_data_wait"): 2_000_000}


def test_a_cause_without_such_buckets_takes_the_share_it_explains(tmp_path):
    """A cause whose own claim is busy time (an RNN fallback) takes the part of the symptom's avoidable idle its
    ``explained_ns`` says, and none of the symptom's busy claim."""
    led = ledger_of(analyse(tmp_path, data_wait_trace()))
    symptom = finding("TI001", "gpu_idle", 10 * MS, metrics={"explained_ns": 1_100_000})  # half of its 2.2 ms
    cause = finding("XT4", "compute", 3_360_000, explains=[symptom.fingerprint])  # own claim: all compute
    assert claims_of(led, [symptom, cause])["each"][1] == {
        (0, 0, "compute"): 3_360_000, (0, 0, "idle_data_wait"): 1_000_000, (0, 0, "idle_host_busy"): 10_000, (0, 0, "idle_untraced"): 90_000}
    symptom.metrics["explained_ns"] = 100 * MS  # never more than all of it
    assert claims_of(led, [symptom, cause])["each"][1] == {
        (0, 0, "compute"): 3_360_000, (0, 0, "idle_data_wait"): 2_000_000, (0, 0, "idle_host_busy"): 20_000, (0, 0, "idle_untraced"): 180_000}
    symptom.metrics.pop("explained_ns")  # a cause that does not say how much explains nothing
    assert claims_of(led, [symptom, cause])["each"][1] == {(0, 0, "compute"): 3_360_000}
    busy_symptom = finding("TI007", "compute", 10 * MS, metrics={"explained_ns": 10 * MS})
    cause.explains = [busy_symptom.fingerprint]
    assert claims_of(led, [busy_symptom, cause])["each"][1] == {(0, 0, "compute"): 3_360_000}


# --- who the verdict credits -------------------------------------------------------------------------------
def test_the_verdict_quotes_the_lever_and_its_what_if(tmp_path):
    a = analyse(tmp_path, data_wait_trace())
    what_if = {"step_ns": 600_000, "baseline_step_ns": 1_000_000}
    data = lever("TI005", "input_pipeline", 2 * MS, 35.971, title="the loader runs in the main process", what_if=what_if)
    small = lever("XT6", "input_pipeline", 500_000, 9.0)
    a.findings = [small, data]
    d = details(a)
    assert "the lever that gives back most is TI005 (the loader runs in the main process): 2.00 ms, 36.0 % of its window; " \
           "if fixed: step 1.00 → 0.60 ms (−40 %); GPU idle while" in d["sentence"]
    assert (d["claimed_by"], d["root_cause"], d["headline"], d["lever_ns"]) == (data.fingerprint, None, "Bound by input pipeline", 2 * MS)


def test_a_cause_named_for_its_symptoms_time_is_the_root_cause(tmp_path):
    a = analyse(tmp_path, data_wait_trace())
    cause = lever("XT4", "compute", 1 * MS, 18.0, title="an RNN runs step by step")
    symptom = lever("TI005", "input_pipeline", 1 * MS, 18.0, impact_ns=10 * MS,
                    metrics={"explained_by": cause.fingerprint, "explained_ns": 1 * MS})
    cause.explains = [symptom.fingerprint]
    a.findings = [symptom, cause]
    cl = claims(a)
    # the cause takes half the symptom's 2 ms; the symptom keeps the other half, its own
    assert cl["each"][1][(0, 0, "idle_data_wait")] == 1 * MS and cl["each"][0] == {(0, 0, "idle_data_wait"): 1 * MS}
    cause.saving_ns = 1_000_001
    d = details(a)
    assert (d["claimed_by"], d["root_cause"]) == (cause.fingerprint, cause.fingerprint)
    assert d["headline"] == "Bound by input pipeline (root cause: XT4)"


def test_a_cause_of_its_own_kind_of_time_is_not_called_a_root_cause(tmp_path):
    a = analyse(tmp_path, data_wait_trace())
    gap = lever("TI001", "gpu_idle", 200_000, 3.6, impact_ns=10 * MS, metrics={"explained_by": "x"})
    cause = lever("XT5", "input_pipeline", 2 * MS, 36.0, explains=[gap.fingerprint])
    gap.metrics["explained_by"] = cause.fingerprint
    a.findings = [gap, cause]
    d = details(a)
    assert (d["claimed_by"], d["root_cause"], d["headline"]) == (cause.fingerprint, None, "Bound by input pipeline")


def test_a_symptom_shows_what_its_cause_leaves(tmp_path):
    """One claim per nanosecond: the cause names the data wait it explains, the gap finding keeps the rest."""
    led = ledger_of(analyse(tmp_path, data_wait_trace()))
    gap = finding("TI001", "gpu_idle", 10 * MS)
    data = finding("TI005", "input_pipeline", 10 * MS, explains=[gap.fingerprint])
    gap.metrics["explained_by"] = data.fingerprint
    cl = claims_of(led, [gap, data])
    assert cl["per_finding"] == [200_000, 2_000_000]  # 20 µs host work + 180 µs untraced left to the gap
    assert cl["total_ns"] == 2_200_000  # the union still holds all of it, once


def test_modelled_speed_ups_form_the_verdict_by_their_figure(tmp_path):
    a = analyse(tmp_path, kernels_trace(gap_us=0))
    tc = lever("TI007", "compute", 1 * MS, 5.0, kind="modelled", title="GEMMs without tensor cores")
    occ = lever("TI008", "compute", 3 * MS, 15.0, kind="modelled", title="small grids")
    a.findings = [tc, occ]
    d = details(a)
    assert "the lever that gives back most is TI008 (small grids): 3.00 ms, 15.0 % of its window; a modelled speed-up" in d["sentence"]
    assert (d["claimed_by"], d["root_cause"], d["category"]) == (occ.fingerprint, None, "compute")
    h = headline(a)
    assert (h["est_savings_ns"], h["modelled_speedup_ns"]) == (0, 3 * MS)


def test_copy_bound_credits_a_copy_finding(tmp_path):
    a = analyse(tmp_path, copy_trace())
    pinned = lever("TI006", "copy", 2 * MS, 16.8, kind="modelled", title="pageable copies")
    a.findings = [pinned]
    d = details(a)
    assert (d["category"], d["lever"], d["claimed_by"]) == ("copy", "TI006", pinned.fingerprint)


def _evidence(text: str) -> pd.DataFrame:
    return pd.DataFrame({"start_ns": [0], "host_activity": [text]})


@pytest.mark.parametrize(("cpu_ops", "evidence", "said"), [
    (True, _evidence("aten::index (eager dispatch)"), "; in the longest gap the host was in aten::index (eager dispatch)"),
    (False, _evidence("train.py:42 step" + "x" * 300), "; in the longest gap the host was in train.py:42 step" + "x" * 144),
    (True, _evidence("loader (nothing traced)"), ""),
    (True, _evidence(""), ""),
    (True, pd.DataFrame({"start_ns": [0]}), ""),
    (True, pd.DataFrame({"host_activity": []}), ""),
    # the longest gap of the bound's own cause: a sync gap's activity is not what host-busy idle was spent on
    (True, pd.DataFrame({"start_ns": [0, 1], "cause": ["host synchronization", "host busy in CPU ops (launch queue empty)"],
                         "host_activity": ["model.py:143 forward", "aten::index"]}), "; in the longest gap the host was in aten::index"),
    (False, pd.DataFrame({"start_ns": [0, 1], "cause": ["unknown (no launch linked)", "untraced host time (launch queue empty)"],
                          "host_activity": ["cudaMallocAsync", "train.py:42 step"]}), "; in the longest gap the host was in train.py:42 step"),
    (True, pd.DataFrame({"start_ns": [0], "cause": ["host synchronization"], "host_activity": ["model.py:143 forward"]}), ""),
])
def test_host_idle_names_what_the_host_was_doing(tmp_path, cpu_ops, evidence, said):
    a = analyse(tmp_path, host_gap_trace(cpu_ops))
    gap = lever("TI001", "gpu_idle", 4 * MS, 40.0, impact_ns=100 * MS, title="GPU idle", evidence=evidence)
    a.findings = [gap]
    s = details(a)["sentence"]
    assert s.endswith(f" ({'49.2' if cpu_ops else '57.1'} % of its window){said}" + RULE_WORDS)


def test_what_the_host_did_is_said_only_for_host_idle(tmp_path):
    a = analyse(tmp_path, data_wait_trace())
    a.findings = [lever("TI001", "gpu_idle", 2 * MS, 36.0, impact_ns=100 * MS, title="GPU idle", evidence=_evidence("aten::index"))]
    assert details(a)["sentence"].endswith("holds 2.00 ms (36.0 % of its window)" + RULE_WORDS)


# --- the headline figures ----------------------------------------------------------------------------------
def test_headline_counts_and_step_figures(tmp_path):
    t = data_wait_trace()
    for i in range(6):
        t.step(i, i * 1000, 990)
    a = analyse(tmp_path, t)
    a.findings = [finding("TI005", "input_pipeline", 1 * MS, severity=Severity.ERROR),
                  finding("TI001", "gpu_idle", 0, severity=Severity.INFO),
                  finding("TI002", "host_sync", 0, severity=Severity.INFO)]
    h = headline(a)
    assert h == {
        "span_ns": 5_990_000, "gpu_window_ns": 5_560_000, "gpu_busy_pct": 60.4, "steady_busy_pct": None, "findings": 3,
        "findings_by_severity": {"error": 1, "warning": 0, "info": 2},
        "est_savings_ns": 1 * MS, "est_savings_gpu_ns": 1 * MS, "largest_saving_ns": 1 * MS, "modelled_speedup_ns": 0,
        "avoidable_idle_ns": 2_200_000, "steps": 6, "mean_step_ns": 990_000.0,
    }
    assert headline(a, claims(a)) == h


def test_the_engine_fills_verdict_and_kpis_once(tmp_path):
    """``assess`` is what the engine runs: the analysis carries exactly what ``details`` and ``headline`` say."""
    a = traceinsight.analyze(str(data_wait_trace().write(tmp_path / "t.json")))
    assert a.findings  # the rules found the data wait
    assert a.verdict == details(a)
    assert {k: a.kpis[k] for k in headline(a)} == headline(a)
    a.verdict, a.kpis = {}, {}
    verdict.assess(a)
    assert a.verdict == details(a) and a.kpis == headline(a)
    assert a.verdict["category"] == "input_pipeline" and a.kpis["est_savings_ns"] == 2_200_000


def test_the_ledger_is_the_engines_else_the_stores(tmp_path):
    a = analyse(tmp_path, data_wait_trace())
    assert ledger_of(a) is a.ledger
    a.ledger = None
    assert ledger_of(a) is a.views.ledger
    assert details(a)["ledger_ns"]["idle_data_wait"] == 2_000_000


def test_claims_inside_instances_stay_on_their_rank_and_device(tmp_path):
    led = ledger_of(analyse(tmp_path, data_wait_trace()))
    g = led.gaps.iloc[1]  # the second gap: 400 µs of data wait
    inst = [Instance(start_ns=int(g.start_ns), end_ns=int(g.end_ns), rank=0, device=0)]
    assert finding_claims(led, finding("TI005", "input_pipeline", 10 * MS, instances=inst)) == {(0, 0, "idle_data_wait"): 400_000}
    assert finding_claims(led, finding("TI005", "input_pipeline", 10 * MS, rank=1, instances=inst)) == {}
    assert finding_claims(led, finding("TI005", "input_pipeline", 10 * MS, device=1, instances=inst)) == {}
    # scaled to its impact as a whole finding is
    assert finding_claims(led, finding("TI005", "input_pipeline", 100_000, instances=inst)) == {(0, 0, "idle_data_wait"): 100_000}


def test_a_cause_that_does_not_say_how_much_takes_nothing(tmp_path):
    led = ledger_of(analyse(tmp_path, data_wait_trace()))
    symptom = finding("TI005", "input_pipeline", 10 * MS)  # one bucket: all 2 ms of data wait
    cause = finding("XT4", "compute", 3_360_000, explains=[symptom.fingerprint])
    assert claims_of(led, [symptom, cause])["each"][1] == {(0, 0, "compute"): 3_360_000}
    symptom.metrics["explained_ns"] = 500_000
    assert claims_of(led, [symptom, cause])["each"][1] == {(0, 0, "compute"): 3_360_000, (0, 0, "idle_data_wait"): 500_000}


def test_how_to_record_better_follows_profiler_and_framework(tmp_path):
    """A window that cannot be judged says how to record a better one, for the profiler and framework at hand."""
    from traceinsight.derive.steady import RECORD_BETTER
    from traceinsight.ingest import nsys

    from .helpers.nsys_writer import NsysTrace
    from .helpers.xplane_writer import XSpaceTrace

    n = NsysTrace()
    for i in range(3):
        n.kernel("k", 1_000_000 + 100_000 * i, 3_000)
    d = details(traceinsight.analyze(str(n.write(tmp_path / "t.sqlite")), ignore=["TI"]))
    assert (d["why"], d["record_better"]) == ("too_little_gpu_work", nsys.FORMAT.record_steady)  # Nsight's own capture range
    x = XSpaceTrace()
    for i in range(3):
        x.op(f"jit_train_step/pjit/jax.numpy.dot_{i}", 1_000_000 + 100_000 * i, 10_000)
        x.kernel("fusion_1", 1_005_000 + 100_000 * i, 3_000)
    a = traceinsight.analyze(str(x.write(tmp_path / "t.xplane.pb")), ignore=["TI"])
    assert a.framework == "jax"
    assert details(a)["record_better"] == RECORD_BETTER["jax"]


def comm_trace(comm_us: int, gemm_us: int = 600) -> KinetoTrace:
    """10 steps of a GEMM, then an all-reduce of ``comm_us`` that nothing overlaps (exposed communication)."""
    t = KinetoTrace(rank=0, world_size=2)
    for i in range(10):
        b = i * 1000
        t.kernel("volta_sgemm_128x64_nn", b, gemm_us, launch_us=b - 50)
        t.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", b + gemm_us + 2, comm_us, launch_us=b - 40, stream=20)
    return t


def test_exposed_communication(tmp_path):
    """Exposed communication names the bound only through a finding whose replay prices it (a DDP rank whose
    TI021 gives back 0 ns is not "bound by communication")."""
    a = analyse(tmp_path, comm_trace(300))
    assert a.ledger.totals()["communication"] == 10 * 300_000
    # 9 ms busy in a 9.902 ms window; the 3 ms of all-reduce are 30.3 % of it, but no finding prices them
    assert details(a)["category"] == "compute"
    overlap = lever("TI021", "communication", 0, 0.0, kind="modelled", impact_ns=3 * MS, title="exposed communication")
    a.findings = [overlap]
    assert details(a)["category"] == "compute"
    overlap.saving_ns, overlap.share_pct = 1_500_000, 15.15
    d = details(a)
    assert (d["category"], d["bucket"], d["headline"], d["lever_ns"]) == ("communication", "communication", "Bound by communication", 1_500_000)
    assert "(of which 67 % compute, 33 % exposed communication)" in d["sentence"]
    # a sliver of communication (under 0.5 % of busy time) is not worth a word in the mix
    d = details(analyse(tmp_path, comm_trace(2, gemm_us=990)))
    assert d["category"] == "compute"
    assert "(of which 100 % compute)" in d["sentence"] and "communication" not in d["sentence"].split(";")[0]


@pytest.mark.parametrize(("comm_ns", "mix"), [
    (50_000, "(of which 100 % compute)"),  # 0.5 % of busy time: noise, and it would read "0 %"
    (60_000, "(of which 99 % compute, 1 % exposed communication)"),
])
def test_shares_in_the_busy_mix(tmp_path, comm_ns, mix):
    t = KinetoTrace(rank=0, world_size=2)
    for i in range(10):
        b = i * 1010
        gemm = 1000 - comm_ns / 10_000
        t.kernel("volta_sgemm_128x64_nn", b, gemm, launch_us=b - 50)
        t.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", b + 1002, comm_ns / 10_000, launch_us=b - 40, stream=20)
    d = details(analyse(tmp_path, t))
    assert d["ledger_ns"]["communication"] == comm_ns and sum(d["ledger_ns"][b] for b in ("compute", "communication")) == 10 * MS
    assert mix in d["sentence"]


def test_kernels_that_take_no_time(tmp_path):
    """Ten kernels of zero length: enough launches to judge, but no work to describe."""
    t = KinetoTrace()
    for i in range(10):
        t.kernel("k", 100 * i, 0, launch_us=100 * i - 5)
    d = details(analyse(tmp_path, t))
    assert d["sentence"].startswith("The GPU is busy 0.0 % of its window (no work); it is idle 100.0 % of its window")
    assert d["category"] == "unexplained"


def test_findings_that_claim_none_of_the_bound_are_not_credited(tmp_path):
    a = analyse(tmp_path, kernels_trace(gap_us=0))
    a.findings = [lever("TI005", "input_pipeline", 0, 0.0, impact_ns=10 * MS), lever("TI001", "gpu_idle", 0, 0.0, impact_ns=10 * MS)]
    d = details(a)
    assert (d["category"], d["claimed_by"], d["root_cause"]) == ("compute", None, None)
    assert d["sentence"].endswith("not from feeding the GPU" + RULE_WORDS)


@pytest.mark.parametrize("kind", ["memcpy", "memset"])
def test_copies_and_memsets_count_as_gpu_work(tmp_path, kind):
    """Ten short copies (or memsets) are as much a pattern to judge as ten kernels."""
    t = KinetoTrace()
    for i in range(10):
        if kind == "memcpy":
            t.memcpy("HtoD", 100 * i, 3, 4096, launch_us=100 * i - 5)
        else:
            t.memset(100 * i, 3, 4096, launch_us=100 * i - 5)
    assert details(analyse(tmp_path, t))["category"] != "cannot_judge"


def test_a_verdict_on_one_step_says_so(tmp_path):
    """A window with a single step marker (TensorBoard's callback profiles one batch by default): the verdict rests
    on that step, and its sentence says nothing shows the run repeats it; with two steps it does not."""
    for n in (1, 2):
        t = data_wait_trace()
        for i in range(n):
            t.step(i, i * 1000, 990)
        a = analyse(tmp_path, t)
        a.findings = [lever("TI005", "input_pipeline", 3 * MS, 30.0)]
        said = "only one step was recorded, so nothing shows the rest of the run repeats it" in details(a)["sentence"]
        assert said is (n == 1), n
