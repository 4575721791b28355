"""The verdict and the est. savings read from the ledger, on planted traces and on the real corpus."""

from __future__ import annotations

from pathlib import Path

import pytest

import traceinsight
from traceinsight.vocab.buckets import AVOIDABLE_BUCKETS, BUSY_BUCKETS
from traceinsight.rule_api import Finding, Fix, Location, Severity
from traceinsight.assess.verdict import COPY_BOUND_PCT, MIN_BOUND_PCT, claims, details, finding_claims, headline, ledger_of

from .conftest import REPO, corpus_file, trace_root
from .helpers.kineto_writer import KinetoTrace
from .helpers.rule_cases import copy_trace

US = 1_000
DATA = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _analyze(tmp_path, t: KinetoTrace, **kw):
    return traceinsight.analyze(str(t.write(tmp_path / "t.json")), **kw)


def _steps_with(t: KinetoTrace, n: int, body) -> None:
    for i in range(n):
        body(t, i * 1000)


# --- planted verdicts --------------------------------------------------------------------------------------
def test_data_wait_names_the_input_pipeline(tmp_path):
    t = KinetoTrace()

    def step(t, b):
        t.annotation(DATA, b, 400)
        t.kernel("gemm", b + 420, 560, launch_us=b + 405)

    _steps_with(t, 6, step)
    a = _analyze(tmp_path, t)
    d = details(a)
    assert d["category"] == "input_pipeline" and d["headline"] == "Bound by input pipeline"
    assert d["bucket"] == "idle_data_wait"
    # 5 gaps of 440 µs between the kernels, of which 400 µs inside the next data wait
    assert d["ledger_ns"]["idle_data_wait"] == 5 * 400 * US
    assert "waits for input data" in d["sentence"]


def test_sync_stall_names_host_syncs(tmp_path):
    t = KinetoTrace()

    def step(t, b):
        t.kernel("gemm", b, 600, launch_us=b - 10)
        t.runtime("cudaStreamSynchronize", b + 50, 560)  # blocked until 10 µs after the GPU drained
        t.cpu_op("aten::add", b + 610, 300)

    _steps_with(t, 5, step)
    # the planted kernels have a one-block grid: TI008 would price a faster kernel above the sync (the verdict
    # names the largest priced saving); this test is about the sync
    a = _analyze(tmp_path, t, ignore=["TI008"])
    d = details(a)
    assert d["category"] == "host_sync", d["sentence"]
    assert d["ledger_ns"]["idle_host_sync"] == 4 * 400 * US


def test_launch_bound_and_too_little_work(tmp_path):
    t = KinetoTrace()
    for i in range(400):  # 400 kernels of 2 µs, one launch every 10 µs: 0.8 ms of work, clearly launch-bound
        t.kernel("tiny", 10 * i + 6, 2, launch_us=10 * i, launch_dur_us=4)
    d = details(_analyze(tmp_path, t))
    assert d["category"] == "launch_overhead" and d["bound"]

    t = KinetoTrace()  # a handful of kernels and microseconds of work: nothing to judge
    for i in range(3):
        t.kernel("k", 100 * i, 3)
    d = details(_analyze(tmp_path, t))
    assert d["category"] == "cannot_judge" and d["why"] == "too_little_gpu_work" and not d["bound"]
    assert d["headline"] == "Cannot judge this window"
    assert "compute" not in d["headline"]
    assert "torch.profiler.schedule(wait=1, warmup=2, active=3)" in d["record_better"]


def test_copies_dominating_busy_time_are_copy_bound(tmp_path):
    a = _analyze(tmp_path, copy_trace(), ignore=["TI008"])  # one-block grids: TI008 would price the kernel's speed-up above all
    d = details(a)
    tot = d["ledger_ns"]
    assert 100.0 * tot["copy"] / sum(tot[b] for b in BUSY_BUCKETS) >= COPY_BOUND_PCT
    assert d["category"] == "copy" and d["headline"] == "Bound by copies"


def test_busy_gpu_is_compute_bound_even_with_small_idle(tmp_path):
    t = KinetoTrace()
    for i in range(50):
        t.kernel("gemm", 1000 * i, 980, launch_us=1000 * i - 300)  # 20 µs gaps, work queued: GPU-side only
    a = _analyze(tmp_path, t)
    d = details(a)
    assert d["category"] == "compute"
    assert 100.0 * max(d["ledger_ns"][b] for b in AVOIDABLE_BUCKETS) / d["window_ns"] < MIN_BOUND_PCT
    assert headline(a)["est_savings_ns"] == 0


def test_warmup_is_left_out_of_the_steady_state(tmp_path):
    t = KinetoTrace()
    t.kernel("k0", 0, 10)
    t.cpu_op("aten::conv2d", 20, 50_000)  # 50 ms of autotuning in the first convolution
    t.kernel("conv", 50_010, 100, launch_us=50_000)
    for i in range(1, 40):
        b = 50_200 + 300 * i
        t.cpu_op("aten::conv2d", b, 50)
        t.kernel("conv", b + 60, 230, launch_us=b + 40)
    d = details(_analyze(tmp_path, t))
    assert d["ledger_ns"]["idle_warmup"] >= 49_000 * US
    assert "warm-up and left out" in d["sentence"]
    # the steady state: 70 µs gaps while the host is still launching, 21.8 % of it; no rule prices them (the
    # kernels are not tiny), so they name no bound and the mostly busy GPU is compute-bound, the gaps said
    assert d["category"] == "compute"
    assert "the largest idle: GPU idle between kernels the host launches too slowly, 21.8 %" in d["sentence"]


# --- savings -----------------------------------------------------------------------------------------------
_CATEGORY = {"TI001": "gpu_idle", "TI005": "input_pipeline", "TI007": "compute", "TI010": "gpu_idle"}


def _finding(code: str, impact: int, **loc) -> Finding:
    return Finding(code=code, title=code, severity=Severity.WARNING, message="", impact_ns=impact, location=Location(**loc), category=_CATEGORY[code])


def test_overlapping_findings_do_not_add_up(tmp_path):
    t = KinetoTrace()

    def step(t, b):
        t.annotation(DATA, b, 400)
        t.kernel("gemm", b + 420, 560, launch_us=b + 405)

    _steps_with(t, 6, step)
    a = _analyze(tmp_path, t, ignore=["TI"])  # no rule runs
    led = ledger_of(a)
    wait = led.totals()["idle_data_wait"]
    # an idle-gap finding and an input finding that both explain the same data wait, each claiming all of it
    a.findings = [_finding("TI001", 10 * wait, rank=0, device=0), _finding("TI005", wait, rank=0)]
    assert sum(finding_claims(led, f).get((0, 0, "idle_data_wait"), 0) for f in a.findings) == 2 * wait
    assert claims(a)["by_bucket"]["idle_data_wait"] == wait
    h = headline(a)
    assert h["est_savings_ns"] <= led.avoidable_ns
    # a finding claims at most its impact; an impact of 0 claims nothing
    a.findings = [_finding("TI005", wait // 4, rank=0), _finding("TI010", 0)]
    assert headline(a)["est_savings_ns"] == pytest.approx(wait // 4, abs=1)
    # busy-time claims (faster kernels) never enter the headline saving
    a.findings = [_finding("TI007", 10**9)]
    assert headline(a)["est_savings_ns"] == 0 and claims(a)["by_bucket"]["compute"] > 0


def test_claims_inside_instances(tmp_path):
    t = KinetoTrace()

    def step(t, b):
        t.annotation(DATA, b, 400)
        t.kernel("gemm", b + 420, 560, launch_us=b + 405)

    _steps_with(t, 6, step)
    a = _analyze(tmp_path, t, ignore=["TI"])  # no rule runs
    led = ledger_of(a)
    g = led.gaps.iloc[0]

    class Inst:
        start_ns, end_ns, rank, device = int(g.start_ns), int(g.end_ns), 0, 0

    f = _finding("TI005", 10**9, rank=0)
    f.instances = [Inst()]  # type: ignore[attr-defined]
    assert sum(finding_claims(led, f).values()) == int(g.idle_data_wait)


# --- the real corpus ---------------------------------------------------------------------------------------
def _corpus_paths() -> list[Path]:
    out: list[Path] = []
    root = trace_root()  # the corpus, else the shipped subset in tests/data
    out += sorted((root / "pytorch").rglob("*.json.gz"))
    out += sorted((root / "nsys").glob("*.sqlite"))
    out += sorted((root / "tf").rglob("*.xplane.pb"))
    out += sorted((root / "tf").rglob("*.trace.json.gz"))
    out += sorted((REPO / "sample_traces").glob("*.json.gz")) + sorted((REPO / "sample_traces").glob("*.sqlite"))
    return out


_CACHE: dict[str, object] = {}


def _corpus_analysis(rel: str):
    if rel not in _CACHE:
        p = corpus_file(rel)
        _CACHE[rel] = traceinsight.analyze(str(p))
    return _CACHE[rel]


@pytest.mark.parametrize("path", _corpus_paths(), ids=lambda p: p.name)
def test_ledger_tiles_windows_and_savings_stay_inside_them(path):
    a = traceinsight.analyze(str(path))
    led = ledger_of(a)
    util = a.summary.devices
    for d in util:
        if d["window_ns"] <= 0:
            continue
        t = led.totals(d["rank"], d["device"])
        assert sum(t.values()) == d["window_ns"]
        assert sum(t[b] for b in BUSY_BUCKETS) == d["busy_ns"]
    h = headline(a)
    biggest_window = max((d["window_ns"] for d in util), default=0)
    assert 0 <= h["est_savings_ns"] <= min(h["span_ns"], biggest_window)
    per_dev_avoidable = max((sum(led.totals(d["rank"], d["device"])[b] for b in AVOIDABLE_BUCKETS) for d in util), default=0)
    assert h["est_savings_ns"] <= per_dev_avoidable
    assert h["largest_saving_ns"] <= per_dev_avoidable


def test_corpus_dataloader_run_idles_mostly_in_data_wait():
    a = _corpus_analysis("pytorch/kineto_resnet50_nw0_v100.pt.trace.json.gz")
    t = ledger_of(a).totals()
    idle = sum(v for b, v in t.items() if b.startswith("idle_"))
    assert t["idle_data_wait"] > 0.6 * idle
    assert details(a)["category"] == "input_pipeline"
    b = _corpus_analysis("pytorch/kineto_resnet50_nw4_v100.pt.trace.json.gz")
    tb = ledger_of(b).totals()
    assert tb["idle_data_wait"] < 0.01 * sum(tb.values())  # with 4 workers the wait is gone
    assert details(b)["category"] != "input_pipeline"


def test_corpus_sync_memcpy_benchmark_names_its_largest_lever():
    """Copies are 99 % of busy time, but the idle the host leaves between them (TI001, 42 % of the window) gives
    back more than pinning the copies (TI006's replay): the verdict names the larger priced saving."""
    a = _corpus_analysis("nsys/nsys2025.5_vecadd-syncmemcpy_rtx3060.sqlite")
    d = details(a)
    assert d["ledger_ns"]["copy"] > 0.9 * sum(d["ledger_ns"][b] for b in BUSY_BUCKETS)
    by = {f.code: f for f in a.findings}
    assert by["TI001"].saving_ns > by["TI006"].saving_ns > 0
    assert (d["lever"], d["category"]) == ("TI001", "host_overhead")


@pytest.mark.parametrize(
    "rel",
    ["pytorch/tracelens_h100_qwen1.5-0.5b_inference.json.gz", "pytorch/hta_ns_resolution_v100_rank0.pt.trace.json.gz"],
)
def test_corpus_busy_runs_are_compute_bound(rel):
    a = _corpus_analysis(rel)
    d = details(a)
    t = d["ledger_ns"]
    assert t["compute"] >= 0.9 * d["window_ns"]
    assert d["category"] == "compute"
    assert max(t[b] for b in AVOIDABLE_BUCKETS) < 0.05 * d["window_ns"]


@pytest.mark.parametrize(
    "rel",
    ["nsys/nsys2026.1_torch-tiny_rtx3080.sqlite", "pytorch/hta_triton_example_a100.json.gz", "pytorch/hta_event_sync_a100.json.gz"],
)
def test_corpus_tiny_captures_are_not_judged(rel):
    a = _corpus_analysis(rel)
    d = details(a)
    assert d["category"] == "cannot_judge" and not d["bound"]
    assert headline(a)["est_savings_ns"] == 0  # a window that cannot be judged claims no saving
    assert all(f.severity.value == "info" for f in a.findings if f.category != "trace_quality")


def test_corpus_first_convolution_autotune_is_warmup():
    a = _corpus_analysis("pytorch/hta_alexnet_a100_cudasync.json.gz")
    led = ledger_of(a)
    t = led.totals()
    assert t["idle_warmup"] > 0.95 * sum(t.values())
    assert any("conv" in r for r in led.warmup["reason"])
    # the first launch of a cuDNN kernel waits 3 s in cudaLaunchKernel: module loading, booked as one-time work
    first = led.warmup[led.warmup["reason"].str.startswith("first launch of")]
    assert len(first) == 1 and "cudnn" in first["reason"].iloc[0] and int((first["end_ns"] - first["start_ns"]).iloc[0]) > 3_000_000_000
    d = details(a)
    assert "warm-up and left out" in d["sentence"] and d["category"] == "host_overhead"
    # the saving is drawn from the steady state only (the 143 ms left), never from the one-time work
    assert headline(a)["est_savings_ns"] <= sum(t.values()) - t["idle_warmup"]


def test_a_trace_quality_finding_never_forms_the_verdict(tmp_path):
    """What a trace-quality finding explains is no cost: it names no root cause, and the symptom it lists keeps its
    own figure (no time is taken from it, and none is claimed twice)."""
    t = KinetoTrace()

    def step(t, b):
        t.annotation(DATA, b, 400)
        t.kernel("gemm", b + 420, 560, launch_us=b + 405)

    _steps_with(t, 6, step)
    a = _analyze(tmp_path, t, ignore=["TI"])  # no built-in rule: the test plants its own findings
    symptom = _finding("TI005", 10**9, rank=0)
    symptom.saving_ns, symptom.share_pct, symptom.fixes = 2_000_000, 36.0, {"pytorch": Fix("workers")}
    cause = Finding(code="XT900", title="loader runs in the main process", severity=Severity.WARNING, message="", category="trace_quality")
    cause.explains = [symptom.fingerprint]
    cause.what_if = {"step_ns": 600_000, "baseline_step_ns": 1_000_000, "assumptions": "no data wait"}
    a.findings = [symptom, cause]
    d = details(a)
    assert d["headline"] == "Bound by input pipeline"
    assert d["claimed_by"] == symptom.fingerprint and d["root_cause"] is None
    assert "XT900" not in d["sentence"]
