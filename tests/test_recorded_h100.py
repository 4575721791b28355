"""Real traces recorded on an NVIDIA H100 (``sample_traces/h100``, made by ``sample_traces/record_gpu.py``): each
program has one known problem, or is its fix, and the analysis must say what an expert would say of it.

The expectations are about the problem each program was written to have (a host sync per step, a data loader on
the training thread, a window that starts cold), and about figures that follow from how it was recorded (a
profiler wrapped around the whole program holds its start-up). They are not fitted numbers: ranges are wide where
a re-recording would move them.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

import traceinsight
from traceinsight.delta import diff
from traceinsight.rule_api import Severity

H100 = Path(__file__).resolve().parents[1] / "sample_traces" / "h100"


@lru_cache(maxsize=None)
def _analysis(name: str) -> traceinsight.Analysis:
    return traceinsight.analyze(H100 / name)


def _codes(a, at_least: str = "info") -> set[str]:
    order = {"info": 0, "warning": 1, "error": 2}
    return {f.code for f in a.findings if order[f.severity.value] >= order[at_least]}


def _finding(a, code: str):
    (f,) = [f for f in a.findings if f.code == code]
    return f


def _ledger(a) -> dict[str, int]:
    return {str(b): int(n) for b, n in zip(a.ledger.by_device["bucket"], a.ledger.by_device["ns"])}


def _steady_busy_pct(a) -> float:
    led = _ledger(a)
    window = sum(led.values())
    busy = led["compute"] + led["copy"] + led["communication"]
    return 100.0 * busy / (window - led["idle_warmup"])


def _warmup_pct(a) -> float:
    led = _ledger(a)
    return 100.0 * led["idle_warmup"] / sum(led.values())


# --- recurrent layers ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["lstm_cell_loop.json.gz", "lstm_cudnn_disabled.json.gz", "nsys/lstm_nocudnn.sqlite"])
def test_an_lstm_without_cudnn_is_the_root_cause(name):
    """A Python LSTMCell loop, and nn.LSTM with cuDNN switched off (kineto, and Nsight with kernels only): TI004 is
    the root cause the verdict names, TI003's launch-bound kernels are its symptom, and its fix removes most of
    the step."""
    a = _analysis(name)
    ti004 = _finding(a, "TI004")
    assert ti004.severity.value == "error"
    assert a.verdict["root_cause"] == ti004.fingerprint
    assert a.verdict["headline"].endswith("(root cause: TI004)")
    assert _finding(a, "TI003").metrics.get("explained_by") == ti004.fingerprint
    w = ti004.what_if
    assert w is not None and w["step_ns"] < 0.5 * w["baseline_step_ns"]


def test_an_lstm_on_cudnn_is_not_a_fallback():
    a = _analysis("lstm_cudnn.json.gz")
    assert "TI004" not in _codes(a)


# --- host syncs ---------------------------------------------------------------------------------------------
def test_item_every_step_is_a_host_sync_and_its_fix_is_faster():
    before, after = _analysis("sync_before.json.gz"), _analysis("sync_after.json.gz")
    # the verdict names the largest priced lever: FP32 GEMMs on an H100 (TI007's replay) give back more than the
    # sync alone; the sync is still a warning of its own
    assert before.verdict["lever"] == "TI007" and _finding(before, "TI007").saving_ns > _finding(before, "TI002").saving_ns
    ti002 = _finding(before, "TI002")
    # .item() each step: a few % of the window at least (8 % in this recording), never an info-level footnote
    assert ti002.severity.rank >= Severity.WARNING.rank and 5 <= ti002.share_pct < 50
    assert "TI002" not in _codes(after)
    assert after.kpis["gpu_busy_pct"] > before.kpis["gpu_busy_pct"] + 5
    d = diff(H100 / "sync_before.json.gz", H100 / "sync_after.json.gz").data
    assert d["verdict"] == "faster"
    assert d["comparability"]["comparable"]
    assert -40 < d["step"]["change_pct"] < -10


def test_nsys_training_is_told_from_its_kernels_and_its_syncs_found():
    """An Nsight capture has no framework ops; its backward and optimizer kernels make it training, so the
    ``.item()`` at the end of every step is an avoidable sync (an inference request's closing sync would not be).
    Its share of each gap is what the host waited in it: the host reaches ``.item()`` barely ahead of the GPU
    (it spends each step's end in ``empty_cache()``'s ``cudaFree`` calls and Python), so most of the gap after it
    is that host work, which would delay the next launch with or without the sync: the loop is host-bound, and
    the sync and the flushes are levers beside it."""
    a = _analysis("nsys/train_sync.sqlite")
    sync = _finding(a, "TI002")
    assert 0 < sync.saving_ns <= sync.impact_ns
    assert _finding(a, "TI031").saving_ns > 0  # the flushes' host time, claimed as host busy
    assert a.verdict["category"] == "host_untraced"
    booked = a.ledger.totals()
    assert booked["idle_host_sync"] < booked["idle_host_busy"] + booked["idle_untraced"]


def test_empty_cache_every_step_is_named_as_asked_for_not_pressure():
    """``torch.cuda.empty_cache()`` after every step: the releases run outside every framework op (kineto) or
    with the peak far below capacity (Nsight), so they are the program's request, and the fix is to remove it."""
    for name in ("memory_churn.json.gz", "nsys/train_sync.sqlite"):
        a = _analysis(name)
        f = _finding(a, "TI031")
        assert f.metrics.get("asked_for") is True, name
        assert "memory pressure" not in f.title and "asked for, not pressure" in f.title
        assert "empty_cache" in f.fixes["pytorch"].text and "Remove" in f.fixes["pytorch"].text
        churn = _finding(a, "TI032")
        assert churn.severity.value == "warning" and "hands the cache back" in churn.message


def test_nsys_fix_pair_diff_compares_steady_states():
    a, b = _analysis("nsys/train_sync.sqlite"), _analysis("nsys/train_fixed.sqlite")
    assert "TI002" not in _codes(b) and "TI031" not in _codes(b)
    assert b.verdict["category"] == "compute"
    d = diff(H100 / "nsys/train_sync.sqlite", H100 / "nsys/train_fixed.sqlite").data
    assert d["verdict"] == "faster"
    # the busy figures are the steady state's (the verdict's), not the whole capture's ~1 %
    assert 60 < d["busy_pct"]["base"] < d["busy_pct"]["head"] <= 100


# --- launch overhead, input pipeline ------------------------------------------------------------------------
def test_per_tensor_update_loop_is_launch_bound():
    a = _analysis("tiny_kernels_before.json.gz")
    assert _finding(a, "TI003").severity.value == "error"
    assert a.verdict["category"] == "launch_overhead"


def test_dataloader_on_the_training_thread_and_its_fix():
    before, after = _analysis("dataloader_before.json.gz"), _analysis("dataloader_after.json.gz")
    assert before.verdict["category"] == "input_pipeline"
    assert _finding(before, "TI005").severity.value == "error"
    assert "TI005" not in _codes(after)
    d = diff(H100 / "dataloader_before.json.gz", H100 / "dataloader_after.json.gz").data
    # the batch-building ops left with the loader's workers: still the same model
    assert d["comparability"]["comparable"] and d["comparability"]["in_common_pct"] > 95
    assert d["verdict"] == "faster"
    s = d["step"]
    # the loader's workers take the batch building off the step: about 25 times faster (74 ms -> 3 ms), the whole
    # interval well below zero, and its low end no lower than the step itself (a step cannot shrink by more)
    assert -100 < s["change_pct"] < -90 and s["high_pct"] < -50
    assert -s["base_median_ns"] <= s["low_ns"] < s["high_ns"] < 0


# --- steady state -------------------------------------------------------------------------------------------
def test_a_cold_resnet_window_is_set_aside_as_warm_up():
    """Profiled from the first step without a schedule (no step markers): cuDNN autotunes every convolution shape
    in the first step, ten seconds of it. Nearly all of the window is warm-up, and what is left is judged as the
    warm run is."""
    cold, warm = _analysis("resnet_cold.json.gz"), _analysis("resnet_warm.json.gz")
    assert _warmup_pct(cold) > 90
    assert _steady_busy_pct(cold) > 60
    assert _warmup_pct(warm) == 0 and "TI013" not in _codes(warm)
    assert warm.verdict["category"] == "compute"


def test_a_torch_compile_window_is_warm_up_and_the_verdict_shows_steady_work():
    a = _analysis("compile_cold.json.gz")
    assert _warmup_pct(a) > 90
    # the host work the verdict names is the steady state's, not the compilation that filled the warm-up
    assert "longest gap the host was in" in a.verdict["sentence"]
    assert "dynamo" not in a.verdict["sentence"] and "compile_inner" not in a.verdict["sentence"]


def test_a_recompile_in_the_steady_state_is_the_root_cause_of_the_idle():
    a = _analysis("compile_recompile.json.gz")
    ti015 = _finding(a, "TI015")
    assert ti015.severity.value == "error"
    assert _finding(a, "TI001").metrics.get("explained_by") == ti015.fingerprint
    assert a.verdict["lever"] == "TI015" and "the lever that gives back most is TI015" in a.verdict["sentence"]


def test_a_graph_capture_is_warm_up_and_the_replays_are_judged():
    """Warm-up passes, one capture (its launches recorded, not run), then replays: the capture and the warm-up are
    set aside, and the replays, whose kernels outnumber the recorded launches, are a workload to judge."""
    a = _analysis("cudagraph_capture.json.gz")
    assert "TI012" not in _codes(a)
    assert "graph capture (launches recorded, not run)" in set(a.ledger.warmup["reason"])
    assert _warmup_pct(a) > 50
    assert a.verdict["category"] == "compute" and _steady_busy_pct(a) > 70


def test_a_whole_program_nsys_capture_is_judged_on_its_steps():
    """Nsight records the program from its start: imports, model set-up and CUDA start-up come before the first
    NVTX step and are left out, so the steps' own busy time decides the verdict."""
    a = _analysis("nsys/train_fixed.sqlite")
    assert _warmup_pct(a) > 90
    assert _steady_busy_pct(a) > 85
    # the KPIs carry the steady figure beside the whole capture's, and the page shows it on the busy card
    assert a.kpis["steady_busy_pct"] == round(_steady_busy_pct(a), 1) and a.kpis["gpu_busy_pct"] < 5
    from traceinsight.render.html import render as render_html

    page = render_html(a)
    assert f'data-kpi="steady_busy_pct" data-value="{a.kpis["steady_busy_pct"]}"' in page
    assert _analysis("resnet_warm.json.gz").kpis["steady_busy_pct"] is None  # no warm-up: the one figure


# --- memory -------------------------------------------------------------------------------------------------
def test_memory_near_capacity_and_out_of_memory():
    near = _finding(_analysis("memory_pressure.json.gz"), "TI031")
    assert near.metrics["peak_share_pct"] > 90 and near.metrics["oom_events"] == 0
    assert "TI030" not in _codes(_analysis("memory_pressure.json.gz"))
    oom = _finding(_analysis("memory_oom.json.gz"), "TI031")
    assert oom.severity.value == "error" and oom.metrics["oom_events"] > 0


def test_a_small_model_has_headroom():
    f = _finding(_analysis("sync_before.json.gz"), "TI030")
    assert f.metrics["peak_share_pct"] < 5 and "batch could grow" in f.title


# --- compute efficiency -------------------------------------------------------------------------------------
def test_fp32_without_tensor_cores_and_bf16():
    fp32, bf16 = _analysis("efficiency_fp32.json.gz"), _analysis("efficiency_bf16.json.gz")
    assert "TI007" in _codes(fp32)
    assert fp32.verdict["category"] == "compute"
    e32, e16 = fp32.views.efficiency, bf16.views.efficiency
    assert e32.mfu_dtype == "fp32" and e16.mfu_dtype == "bf16"
    # same model FLOPs; the GPU-bound fp32 run's MFU is priced on the GPU's time, not on host steps that ran ahead
    assert e32.model_flops == pytest.approx(e16.model_flops, rel=1e-6)
    achieved_fp32 = e32.model_flops / (e32.gpu_time_ns / 1e9) / 1e12
    assert 20 < achieved_fp32 < 67  # below the H100's 67 TFLOP/s FP32 peak
    assert e32.mfu_pct < 67
    assert e16.mfu_pct < e32.mfu_pct  # bf16's peak is 15x higher, and this run is host-bound
    d = diff(H100 / "efficiency_fp32.json.gz", H100 / "efficiency_bf16.json.gz").data
    s = d["step"]
    # bf16 steps take about a third of fp32's: the median change and the interval's low end are both far below
    # zero; with three steps a side the interval may still reach past zero, and then the verdict says it cannot
    # tell (never "no measurable change", never "slower")
    assert s["change_pct"] < -40
    # three steps a side give no interval, and the first fp32 step (27 ms, while the launch queue fills) is shorter than a bf16
    # step, so the sides are not completely separated: the diff says it cannot tell, names that step, and never
    # claims "no measurable change" or "slower"
    assert s["low_pct"] is None and d["verdict"] == "inconclusive"
    assert "too few steps for an interval" in d["sentence"] and "outlier: BASE step 4" in d["sentence"]


# --- JAX (XPlane) -------------------------------------------------------------------------------------------
def test_jax_first_steps_are_compilation_and_their_kernels_are_read():
    """XLA runs everything on one stream named for all it carries ("Stream #14(MemcpyOther,Compute,...)") while it
    compiles and autotunes: its kernels are kernels, the one command-buffer instantiation is warm-up, not a graph
    capture window, and the steps after compilation are judged."""
    a = _analysis("jax/jax_cold")
    assert a.summary.event_counts["kernel"] > 1000
    assert "TI012" not in _codes(a)
    assert _warmup_pct(a) > 90
    # after compilation the GPU is busy 92.6 % of the steady state: the 7 % of sync idle (TI002) is less than
    # faster kernels would give back, so the verdict is compute and the sentence names the sync as the runner-up
    assert a.verdict["category"] == "compute" and "the largest, TI002" in a.verdict["sentence"]


def test_jax_float_loss_every_step_is_a_host_sync():
    """``float(loss)`` converts the device array for the host (``np.asarray(jax.Array)``): the ledger books the
    GPU idle behind it as a host sync, as it does for ``.item()``."""
    a = _analysis("jax/jax_sync")
    assert a.verdict["category"] == "host_sync"
    # XPlane numbers its lines with 64-bit keys: the evidence names the thread by its recorded name instead
    gap_rows = _finding(a, "TI001").evidence["host_activity"].astype(str)
    assert not gap_rows.str.match(r"thread -?\d{10,}:").any()
    assert gap_rows.str.startswith("thread python3:").sum() >= 5
    assert _ledger(a)["idle_host_sync"] > 0.3 * sum(_ledger(a).values())


# --- more pairs and problems (a third recording run) ---------------------------------------------------------
def test_bf16_on_a_small_resnet_moves_the_bound_to_the_host():
    """Autocast halves the GPU work of ResNet-18 at batch 64, and its casts add host dispatch: the step gets
    slower, and the diff must say so rather than call the change a win."""
    a = _analysis("resnet_bf16.json.gz")
    assert a.verdict["category"] == "launch_overhead"
    d = diff(H100 / "resnet_warm.json.gz", H100 / "resnet_bf16.json.gz").data
    assert d["verdict"] == "slower"
    moved = {r["bucket"]: r["change_ns"] for r in d["ledger"]}
    assert moved["compute"] < 0 < moved["idle_launch_bound"]


def test_serving_requests_closing_syncs_are_not_a_finding():
    """An inference loop hands each answer back to the host (``.cpu()``): that sync closes the request and is
    needed, so it is not reported as avoidable; the small batch makes the run launch-bound."""
    a = _analysis("inference_requests.json.gz")
    assert a.verdict["category"] == "launch_overhead"
    assert "TI002" not in _codes(a, "warning")


def test_pageable_copies_are_priced_on_the_critical_path():
    """64 MiB batches copied from pageable memory: the host call lasts as long as the staged copy, so faster
    (pinned) copies shorten the step and TI006 has a saving to show."""
    f = _finding(_analysis("pageable_copies.json.gz"), "TI006")
    assert f.severity.value == "warning"
    assert f.saving_ns > 0.02 * f.metrics["time_ns"]
    assert f.what_if["step_ns"] < 0.97 * f.what_if["baseline_step_ns"]


def test_a_fix_that_rewrites_the_step_is_compared_on_the_users_word():
    """Batching 40 per-tensor updates into one parameter changes the op mix: by itself the diff will not call it
    the same program; with ``same_workload`` it compares, says so, and finds the step far faster."""
    plain = diff(H100 / "tiny_kernels_before.json.gz", H100 / "tiny_kernels_after.json.gz").data
    assert plain["verdict"] == "not comparable" and "vouched" not in plain["comparability"]
    d = diff(H100 / "tiny_kernels_before.json.gz", H100 / "tiny_kernels_after.json.gz", same_workload=True).data
    assert d["comparability"]["vouched"] is True and d["comparability"]["reasons"][0].startswith("compared on the user's word")
    assert d["verdict"] == "faster" and d["step"]["change_pct"] < -80


def test_the_memory_and_recompile_fixes_remove_their_findings():
    churn, fixed = _analysis("memory_churn.json.gz"), _analysis("memory_churn_fixed.json.gz")
    # the pool's growth is a risk (TI032 keeps its warning); the releases the program asked for cost the GPU little
    # here (it stays 96 % busy): the host time of the flushes while the GPU waited, under 5 % of the window, so the
    # common scale grades TI031 info, and says so
    assert "TI032" in _codes(churn, "warning") and "TI031" in _codes(churn)
    released = _finding(churn, "TI031")
    assert released.severity.value == "info" and 0 < released.share_pct < 5
    assert released.metrics["severity_basis"].startswith("graded info on the common scale: ")
    assert not {"TI031", "TI032"} & _codes(fixed)
    d = diff(H100 / "memory_churn.json.gz", H100 / "memory_churn_fixed.json.gz").data
    # every step has its own sequence length: five steps a side cannot tell a change from the spread
    assert d["verdict"] == "inconclusive" and d["comparability"]["comparable"]
    assert "TI015" not in _codes(_analysis("compile_dynamic.json.gz"))
    d = diff(H100 / "compile_recompile.json.gz", H100 / "compile_dynamic.json.gz").data
    assert d["verdict"] == "faster"
    assert "TI015" in {f["code"] for f in d["findings"]["fixed"]}


def test_empty_cache_waits_for_the_gpu_in_the_replay():
    """``cudaFree`` synchronises the device, so in the what-if replay it returns when the GPU catches up: faster
    GEMMs shorten a compute-bound step instead of leaving the host's 70 ms of cudaFree waits as fixed work."""
    f = _finding(_analysis("memory_churn.json.gz"), "TI007")
    assert f.what_if["step_ns"] < 0.9 * f.what_if["baseline_step_ns"]
    assert f.what_if["replay_error_pct"] < 5


# --- the what-if against the recorded fixes -----------------------------------------------------------------
@pytest.mark.parametrize("before, after, code, within", [
    ("sync_before.json.gz", "sync_after.json.gz", "TI002", 0.10),
    ("dataloader_before.json.gz", "dataloader_after.json.gz", "TI005", 0.10),
    ("tiny_kernels_before.json.gz", "tiny_kernels_after.json.gz", "TI003", 0.10),
    # fp32 -> bf16: TI007 priced from the achieved rate and the bf16 dense peak (the replay lets the launches that
    # waited for a full queue return when the GPU catches up); a 2x factor predicted a quarter of the saving
    ("efficiency_fp32.json.gz", "efficiency_bf16.json.gz", "TI007", 0.25),
])
def test_the_what_if_prices_each_recorded_fix_close_to_its_measured_saving(before, after, code, within):
    f = _finding(_analysis(before), code)
    base, predicted = f.what_if["baseline_step_ns"], f.what_if["step_ns"]
    measured_after = float(_analysis(after).views.steps["dur_ns"].median())
    measured_saving, predicted_saving = base - measured_after, base - predicted
    assert measured_saving > 0
    assert abs(predicted_saving - measured_saving) <= within * measured_saving, (predicted_saving / 1e6, measured_saving / 1e6)
