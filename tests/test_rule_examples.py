"""Good/bad example pairs (pylint style): the same workload written badly (the rule must fire) and fixed the way the
rule's own fix text says (the rule must stay silent), both as real kineto JSON through the PyTorch parser.

Only rules whose existing tests lack a *same workload, fixed* pair are here; the others are listed in
``COVERED_ELSEWHERE`` with the tests that already do exactly this, and ``test_every_rule_has_a_pair`` fails when a new
built-in rule has neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.plugins import discover

DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
GEMM = "ampere_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn"  # tensor-core GEMM: keeps TI007 out of the way
GRID = (216, 1, 1)  # fills 108 SMs: keeps TI008 out of the way


@dataclass(frozen=True)
class Example:
    code: str
    bad: str  # what the bad trace does
    good: str  # the same workload, fixed
    build: Callable[[KinetoTrace, bool], None]  # build(trace, fixed)


# --- TI001 gpu-idle-gaps: DataLoader in the main process vs workers + prefetch ---------------------------------
def _ti001(t: KinetoTrace, fixed: bool) -> None:
    # 5 steps of 20 x 50 µs GEMMs (1 ms of GPU work). Bad: the next batch is loaded in the training loop, 2 ms of
    # host time with the GPU idle. Fixed: workers have the batch ready, fetching it takes 40 µs and the step's
    # kernels are queued while the previous step still runs.
    load_us = 40.0 if fixed else 2_000.0
    step_us = 1_000.0 + (0.0 if fixed else load_us) + 20.0
    for s in range(5):
        t0 = s * step_us
        t.step(s, t0, step_us)
        t.annotation(DL, t0, load_us)
        first = t0 + (load_us + 10 if not fixed else 50.0)
        for i in range(20):
            t.kernel(GEMM, first + i * 50, 50.0, launch_us=first - 8 + i * 0.4, launch_dur_us=0.3, grid=GRID)


# --- TI002 host-sync-stalls: loss.item() every step vs accumulate on the GPU, read once --------------------------
def _ti002(t: KinetoTrace, fixed: bool) -> None:
    # Each step: one 1 ms GEMM, then logging the loss. Bad: ``loss.item()`` each step: the host blocks in
    # cudaStreamSynchronize until the GEMM ends, then spends 300 µs in Python before launching the next step, so
    # the GPU idles 300 µs per step. Fixed: the loss is accumulated on the GPU (a 3 µs add kernel) and read once,
    # after the last step; the host runs ahead and the GEMMs are back to back.
    for s in range(4):
        if fixed:
            start = 10 + s * 1_010.0
            t.step(s, s * 1_010.0, 1_010.0)
            t.kernel(GEMM, start, 1_000.0, launch_us=s * 20.0, grid=GRID)
            t.kernel("vectorized_elementwise_kernel<AddFunctor>", start + 1_000, 3.0, launch_us=s * 20.0 + 6, grid=GRID)
        else:
            t0 = s * 1_400.0
            t.step(s, t0, 1_400.0)
            t.kernel(GEMM, t0 + 10, 1_000.0, launch_us=t0, grid=GRID)
            t.cpu_op("aten::item", t0 + 20, 1_000.0)
            t.cpu_op("aten::_local_scalar_dense", t0 + 22, 996.0)
            t.memcpy("DtoH", t0 + 1_010, 2.0, 4, launch_us=t0 + 25, launch_dur_us=5.0)
            t.runtime("cudaStreamSynchronize", t0 + 32, 982.0)
        # a training step: its backward pass runs on the host too (a step without one would be an inference
        # request, whose closing sync is its result and not a stall)
        t.cpu_op("autograd::engine::evaluate_function: MmBackward0", (s * 1_010.0 if fixed else s * 1_400.0) + 2, 4.0)
    if fixed:  # read the accumulated loss once: the GPU has no more work queued, nothing runs dry
        end = 10 + 4 * 1_010.0
        t.memcpy("DtoH", end + 3, 2.0, 4, launch_us=90.0, launch_dur_us=5.0)
        t.runtime("cudaStreamSynchronize", end + 5 - 10, 12.0)


# --- TI003 tiny-kernels: 300 eager elementwise ops vs the same math fused ---------------------------------------
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


EXAMPLES = {
    "TI001": Example(
        "TI001",
        bad="Batches are loaded in the training loop (DataLoader, num_workers=0): the GPU idles 2 ms each step.",
        good="Worker processes prefetch the batches: fetching one takes 40 µs and kernels stay queued.",
        build=_ti001,
    ),
    "TI002": Example(
        "TI002",
        bad="loss.item() every step blocks the host until the GPU finishes, then the GPU waits for Python.",
        good="The loss is summed on the GPU and read once after the loop; the host stays ahead.",
        build=_ti002,
    ),
    "TI003": Example(
        "TI003",
        bad="300 eager elementwise ops of 2 µs each, launched every 8 µs: the GPU waits on every launch.",
        good="The same math fused into 10 kernels of 40 µs (torch.compile / foreach optimizer).",
        build=_ti003,
    ),
}

#: Rules whose existing tests already build the same workload badly and fixed; not duplicated here.
COVERED_ELSEWHERE = {
    "TI004": "test_rules_core.py: test_ti004_lstm_cell_fallback (LSTMCell loop) / test_ti004_negative_cudnn (cuDNN LSTM)",
    "TI005": "test_rules_extra.py: test_ti005_positive (3 ms data wait) / test_ti005_negative_below_threshold (200 µs)",
    "TI006": "test_rules_extra.py: test_ti006_positive (pageable) / test_ti006_negative_pinned (same copies, pinned)",
    "TI007": "test_rules_extra.py: test_ti007_positive_fp32_sgemm / test_ti007_negative_tensor_core_kernels",
    "TI008": "test_rules_extra.py: test_ti008_positive (32 blocks) / test_ti008_negative_full_grids (128 blocks)",
    "TI009": "test_rules_extra.py: test_ti009_positive (straggler) / test_ti009_negative_balanced",
    "TI010": "test_rules_extra.py: test_ti010_positive (1 ms every 5 ms) / test_ti010_negative_busy (back to back)",
    "TI011": "test_rules_quality.py: test_ti011_runtime_calls_without_gpu_activity / test_ti011_negative_gpu_trace",
    "TI012": "test_rules_quality.py: test_ti012_two_kernels / test_ti012_graph_capture / test_ti012_negative_steady_steps",
    "TI013": "test_rules_quality.py: test_ti013_first_step_init, test_ti013_start_up_calls_are_one_time_work_wherever_they_sit / test_ti013_negative_steady_steps",
    "TI014": "test_rules_quality.py: test_ti014_truncated_json / test_ti014_negative_complete_file",
    "TI015": "rules/test_TI015.py: test_ti015_positive_recompile_in_step_4 / test_ti015_fix_dynamic_shapes_compile_once",
    "TI016": "rules/test_TI016.py: test_ti016_positive_one_break_per_step / test_ti016_fix_fullgraph",
    "TI030": "rules/test_TI030.py: test_positive_small_peak_on_an_under_busy_gpu / test_negative_memory_nearly_full",
    "TI031": "rules/test_TI031.py: test_positive_out_of_memory_is_an_error, test_positive_cudafree_in_steady_state / test_negative_roomy_and_no_flushes",
    "TI032": "rules/test_TI032.py: test_positive_reserved_grows_after_warmup, test_positive_cudamalloc_inside_steps / test_negative_growth_only_in_warmup",
    "TI033": "rules/test_TI033.py: test_positive_faults_in_steady_steps / test_negative_faults_only_in_warmup",
    "TI040": "rules/test_TI040.py: test_positive_tiny_gemms / test_fix_raise_the_batch",
    "TI041": "rules/test_TI041.py: test_positive_eager_chains / test_fix_torch_compile",
    "TI020": "test_job_rules.py: test_stragglers_positive_planted_delay / test_stragglers_negative_balanced",
    "TI021": "test_job_rules.py: test_exposed_communication_positive / test_exposed_communication_negative_overlapped",
}


def _analyze(tmp_path, ex: Example, fixed: bool):
    t = KinetoTrace()
    ex.build(t, fixed)
    a = traceinsight.analyze(t.write(tmp_path / f"{ex.code}_{'good' if fixed else 'bad'}.json"))
    assert not a.warnings, a.warnings
    return a


def _codes(a) -> set[str]:
    return {f.code for f in a.findings}


@pytest.mark.parametrize("code", sorted(EXAMPLES))
def test_bad_fires(tmp_path, code):
    a = _analyze(tmp_path, EXAMPLES[code], fixed=False)
    (f,) = [f for f in a.findings if f.code == code]
    assert f.impact_ns > 0


@pytest.mark.parametrize("code", sorted(EXAMPLES))
def test_good_is_silent(tmp_path, code):
    a = _analyze(tmp_path, EXAMPLES[code], fixed=True)
    assert code not in _codes(a), [(f.code, f.title) for f in a.findings]


def test_every_rule_has_a_pair():
    builtin = {c for c, cls in discover().rules.items() if cls.__module__.startswith("traceinsight.rules.")}
    assert set(EXAMPLES) | set(COVERED_ELSEWHERE) == builtin
    assert not set(EXAMPLES) & set(COVERED_ELSEWHERE)


def test_covered_elsewhere_names_real_tests():
    """Each pair named in COVERED_ELSEWHERE must exist, or the 'covered' claim is a promise nobody checks."""
    import re
    from pathlib import Path

    here = Path(__file__).resolve().parent
    for code, where in COVERED_ELSEWHERE.items():
        module, tests = where.split(":", 1)
        names = re.findall(r"\btest_\w+", tests)
        assert len(names) >= 2, f"{code}: name at least a positive and a negative test: {where!r}"
        source = (here / module.strip()).read_text(encoding="utf-8")
        for name in names:
            assert re.search(rf"^def {name}\(", source, flags=re.M), f"{code}: {module.strip()} has no {name}"


# --- the pairs are the same workload, and the fix is the one the finding says ----------------------------------
def test_ti001_bad_gaps_are_data_loading_and_fix_removes_ti005_too(tmp_path):
    bad = _analyze(tmp_path, EXAMPLES["TI001"], fixed=False)
    good = _analyze(tmp_path, EXAMPLES["TI001"], fixed=True)
    (f,) = [f for f in bad.findings if f.code == "TI001"]
    # 4 gaps between steps: last GEMM ends at t0+2010+1000, next starts at t0+3020+2010 -> 2020 µs each
    assert f.metrics["top_cause"] == "data loading"
    assert f.impact_ns == pytest.approx(4 * 2_020_000, rel=0.01)
    assert "TI005" in _codes(bad) and "TI005" not in _codes(good)
    assert bad.summary.kernel_count == good.summary.kernel_count == 100
    assert good.summary.devices[0]["busy_pct"] > 95.0


def test_ti002_fix_keeps_the_work_and_removes_the_idle(tmp_path):
    bad = _analyze(tmp_path, EXAMPLES["TI002"], fixed=False)
    good = _analyze(tmp_path, EXAMPLES["TI002"], fixed=True)
    (f,) = [f for f in bad.findings if f.code == "TI002"]
    assert f.metrics["stalls"] == 4 and f.evidence["call"].iloc[0] == "cudaStreamSynchronize"
    # GPU idle per step: copy ends t0+1012, next GEMM starts t0+1410 -> 398 µs x 3 steps followed by work
    assert f.impact_ns == pytest.approx(3 * 398_000, rel=0.01)
    def gemm_ns(a):
        return int(a.timeline.events.query("kind == 'kernel' and name == @GEMM")["dur_ns"].sum())

    assert gemm_ns(bad) == gemm_ns(good) == 4_000_000
    assert "TI001" in _codes(bad) and "TI001" not in _codes(good)


def test_ti003_fix_keeps_the_work(tmp_path):
    bad = _analyze(tmp_path, EXAMPLES["TI003"], fixed=False)
    good = _analyze(tmp_path, EXAMPLES["TI003"], fixed=True)
    (f,) = [f for f in bad.findings if f.code == "TI003"]
    assert f.metrics["launch_bound_kernels"] == 300
    assert f.impact_ns == pytest.approx(299 * 6_000, rel=0.01)  # each kernel waits 8 - 2 µs on its launch
    assert bad.summary.kernel_count == 300 and good.summary.kernel_count == 10
