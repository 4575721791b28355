"""The steady-state model (traceinsight.derive.steady): one-time work anywhere in the window is booked as warm-up, never
claimed as avoidable idle, never priced by a what-if and never forms the verdict; a window mostly one-time work
cannot be judged. Traces written by the test helpers in the real formats, plus the corpus."""

from __future__ import annotations

import pytest

import traceinsight
from tests.conftest import corpus_file
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.rule_api import Severity
from traceinsight.assess.verdict import details, headline

GEMM = "ampere_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn"
GRID = (216, 1, 1)


def _codes(a, code):
    return [f for f in a.findings if f.code == code]


def test_ti013_start_up_calls_are_one_time_work_wherever_they_sit(tmp_path):
    # no steps, one module load and one JIT compile in the head gap: one-time work by their names, so the ledger
    # books the 9.7 ms they cover as warm-up; what is left (2 ms of kernels, no steps) is too little to judge
    t = KinetoTrace()
    t.kernel(GEMM, 0.0, 10.0, launch_us=-5.0, launch_dur_us=3.0, grid=GRID)
    t.runtime("cuModuleLoadData", 100.0, 2_000.0)
    t.cpu_op("KernelExecutor::compileFusion", 2_200.0, 7_700.0)
    for i in range(40):
        t.kernel(GEMM, 10_010.0 + i * 50, 50.0, launch_us=10_000.0 + i * 0.4, launch_dur_us=0.3, grid=GRID)
    a = traceinsight.analyze(t.write(tmp_path / "jit.json"))
    assert int(a.ledger.gaps["idle_warmup"].sum()) == 9_700_000
    assert sorted(a.ledger.warmup["reason"]) == ["one-time set-up: KernelExecutor::compileFusion", "one-time set-up: cuModuleLoadData"]
    (f,) = _codes(a, "TI013")
    assert f.metrics["warmup_ns"] == 9_700_000 and f.metrics["startup_counted_as_idle_ns"] == 0
    assert f.evidence["set_aside"].tolist() == [True]
    # one home: what the ledger books as warm-up, TI001 does not count, and the verdict sets aside
    assert _codes(a, "TI001") == [] or all(g.metrics["warmup_excluded_ns"] == 9_700_000 for g in _codes(a, "TI001"))
    d = details(a)
    assert d["category"] == "cannot_judge" and d["why"] == "warmup" and "81 % of the window" in d["sentence"]
    assert headline(a)["est_savings_ns"] == 0


def test_ti013_first_launches_load_modules_through_the_window(tmp_path):
    # a first forward in a fresh process: each kernel's first cudaLaunchKernel takes 20 ms (lazy module
    # loading), scattered through the window between fast repeated launches
    t = KinetoTrace()
    at = 0.0
    for rep in range(3):
        for k in range(6):
            name = f"kernel_{k}"
            slow = rep == 0
            dur = 20_000.0 if slow else 5.0
            t.kernel(name, at + dur + 5.0, 30.0, launch_us=at, launch_dur_us=dur, grid=GRID)
            at += dur + 40.0
    a = traceinsight.analyze(t.write(tmp_path / "cold.json"))
    first = a.ledger.warmup[a.ledger.warmup["reason"].str.startswith("first launch of")]
    assert sorted(first["reason"]) == [f"first launch of kernel_{k} (module load)" for k in range(6)]
    t_ = a.ledger.totals()
    assert t_["idle_warmup"] == 5 * 20_000_000  # the first load comes before the GPU's window opens
    # 120 ms of module loading and under 1 ms of GPU work: the window cannot be judged, nothing above info,
    # no saving drawn from the loads, and the what-if baseline is the steady state
    d = details(a)
    assert d["category"] == "cannot_judge" and not d["bound"]
    assert all(f.severity.value == "info" for f in a.findings if f.category != "trace_quality")
    assert headline(a)["est_savings_ns"] == 0
    assert "cudaProfilerStart" not in d["record_better"] and "torch.profiler.schedule" in d["record_better"]


def test_cold_window_with_steps_is_judged_without_its_one_time_work(tmp_path):
    # four steps; module loads (first launches of 15 ms) sit inside step 0 and in the middle of step 1 (a kernel
    # first used there); steps 2 and 3 are steady. The loads are booked, and the verdict reads the rest
    t = KinetoTrace()
    b = 0.0
    for s in range(6):
        slow = {0: (0, 1, 2), 1: (3,)}.get(s, ())
        start = b
        at = b + 10.0
        for k in range(3 if s == 0 else 4):
            d = 15_000.0 if k in slow else 5.0
            t.kernel(f"kernel_{k}", at + d + 5.0, 400.0, launch_us=at, launch_dur_us=d, grid=GRID)
            at += d + 410.0
        t.step(s, start, at - start + 10.0)
        b = at + 20.0
    a = traceinsight.analyze(t.write(tmp_path / "cold_steps.json"))
    reasons = a.ledger.warmup["reason"].tolist()
    assert sum(r.startswith("first launch of") for r in reasons) == 4
    d = details(a)
    assert d["category"] != "cannot_judge"
    assert d["category"] == "compute"  # the steady steps launch back to back: the GPU is the bound
    assert headline(a)["est_savings_ns"] < 1_000_000
    assert not any(f.severity.rank >= Severity.WARNING.rank for f in a.findings if f.category != "trace_quality")


def test_ti013_jit_compile_on_nvfuser_is_one_time_work():
    # nvFuser: KernelExecutor::compileFusion / NVRTC (397 ms) and first launches that load modules fill 84 % of
    # the window, with 0.4 ms of GPU work left and no steps: the window cannot be judged
    a = traceinsight.analyze(corpus_file("nsys/nsys2024.6_nvfuser-pytorch_h200.sqlite"))
    led = a.ledger
    reasons = " ".join(led.warmup["reason"])
    assert "KernelExecutor::compileFusion" in reasons and "first launch of reduce_kernel" in reasons
    assert led.totals()["idle_warmup"] == pytest.approx(425_299_838, rel=1e-3)
    (w,) = _codes(a, "TI013")
    assert w.metrics["startup_counted_as_idle_ns"] == 0
    d = details(a)
    assert d["category"] == "cannot_judge" and d["why"] == "warmup"
    assert "--capture-range=cudaProfilerApi" in d["record_better"]
    assert headline(a)["est_savings_ns"] == 0
    assert all(f.severity.value == "info" for f in a.findings if f.category != "trace_quality")


def test_blocking_call_at_the_window_start_is_one_time_work(tmp_path):
    # nsys: the capture opens while the host is blocked in a cudaMemcpy DtoH that waits on 300 ms of kernels queued
    # before the capture started (they ran, their launches are not in the file); then 8 steady NVTX steps
    from tests.helpers.nsys_writer import NsysTrace

    t = NsysTrace()
    for i in range(3):
        t.kernel("queued_before", 1_000_000 + i * 100_000_000, 99_000_000, launch=False)
    t.memcpy("DtoH", 301_000_000, 50_000, 4096, sync=True, launch_ns=500_000, launch_dur_ns=300_600_000)
    b = 302_000_000
    for s in range(8):
        t.step(s, b, 2_000_000)
        for k in range(10):
            t.kernel("gemm", b + 20_000 + k * 190_000, 180_000, launch_ns=b + 10_000 + k * 1_000, launch_dur_ns=800)
        b += 2_000_000
    a = traceinsight.analyze(t.write(tmp_path / "opening_block.sqlite"))
    opening = a.ledger.warmup[a.ledger.warmup["reason"].str.contains("at the window's start")]
    assert len(opening) == 1 and int(opening["start_ns"].iloc[0]) <= int(a.ledger.windows["start_ns"].iloc[0]) + 1_000_000
    d = details(a)
    assert d["category"] != "host_sync" and d["bound"]
    assert a.ledger.totals()["idle_host_sync"] < 1_000_000  # only the ms after the call returned, before step 0
    assert not any(f.severity.rank >= Severity.WARNING.rank for f in a.findings if f.category != "trace_quality")


START_UP = "before the first step (program start-up)"


def _start_up(a) -> list[list[int]]:
    w = a.ledger.warmup
    return w.loc[w["reason"] == START_UP, ["start_ns", "end_ns"]].to_numpy().tolist()


def _nsys_with_start_up(tmp_path, *, start_up: bool, steps: int = 6, name: str = "prog.sqlite"):
    """A whole-program Nsight capture: with ``start_up``, CUDA start-up calls and one fill kernel in the first 5 ms,
    then the host busy elsewhere (imports, model set-up) until the first NVTX step at 200 ms; ``steps`` steps of
    ten 180 µs GEMMs launched ahead."""
    from tests.helpers.nsys_writer import NsysTrace

    t = NsysTrace()
    if start_up:
        t.runtime("cudaGetDeviceCount", 0, 2_000_000)
        t.cuda_malloc(3_000_000, 1 << 20)
        t.kernel("fill_kernel", 5_010_000, 50_000, launch_ns=5_000_000)
    b = 200_000_000
    for s in range(steps):
        t.step(s, b, 2_000_000)
        for k in range(10):
            t.kernel("gemm", b + 20_000 + k * 190_000, 180_000, launch_ns=b + 10_000 + k * 1_000, launch_dur_ns=800)
        b += 2_000_000
    return traceinsight.analyze(t.write(tmp_path / name))


def test_start_up_before_the_first_step_is_warm_up(tmp_path):
    """From the program's first runtime call to the first step it starts up: none of it repeats, so the GPU's idle
    there (after the fill kernel, 5.06 ms, to the first step, 200 ms) is warm-up, whatever the calls are named."""
    a = _nsys_with_start_up(tmp_path, start_up=True)
    assert _start_up(a) == [[0, 200_000_000]]
    assert a.ledger.totals()["idle_warmup"] == 200_000_000 - 5_060_000
    d = details(a)
    assert d["category"] == "compute" and d["bound"]  # the steps launch ahead: the GPU bounds them


def test_work_that_starts_with_the_first_step_has_no_start_up(tmp_path):
    """Nothing runs before the first step (or there is one step only: nothing says the loop has begun): no start-up
    region, no warm-up."""
    for start_up, steps in ((False, 6), (True, 1)):
        a = _nsys_with_start_up(tmp_path, start_up=start_up, steps=steps, name=f"p{start_up}{steps}.sqlite")
        assert _start_up(a) == [], (start_up, steps)
    assert a.ledger.totals()["idle_warmup"] < 200_000_000 - 5_060_000


def _kineto_with_start_up(tmp_path, start_up: bool):
    """Kineto: the writer's ``PyTorch Profiler (0)`` range opens the file at 0; with ``start_up`` the program makes
    runtime calls and runs a fill kernel from 10 µs on; six 2 ms steps from 100 ms."""
    t = KinetoTrace()
    if start_up:
        t.runtime("cudaGetDeviceCount", 10, 2_000)
        t.runtime("cudaMalloc", 3_000, 20)
        t.kernel("fill_kernel", 5_010, 50, launch_us=5_000)
    b = 100_000.0
    for s in range(6):
        t.step(s, b, 2_000)
        for k in range(10):
            t.kernel(GEMM, b + 20 + k * 190, 180, launch_us=b + 10 + k, launch_dur_us=0.8, grid=GRID)
        b += 2_000
    return traceinsight.analyze(t.write(tmp_path / f"k{start_up}.json"))


def test_kineto_start_up_begins_at_the_programs_first_call_not_the_profilers_range(tmp_path):
    a = _kineto_with_start_up(tmp_path, True)
    assert _start_up(a) == [[10_000, 100_000_000]]
    assert a.ledger.totals()["idle_warmup"] == 100_000_000 - 5_060_000
    # the profiler's own range around the window is no program work: steps from 100 ms and nothing before them
    quiet = _kineto_with_start_up(tmp_path, False)
    assert _start_up(quiet) == [] and quiet.ledger.totals()["idle_warmup"] == 0


def test_a_finding_only_one_time_work_supports_stays_at_info(tmp_path):
    # the cold window with steps: a performance finding pointing at the module loads (their 15 ms launch calls) is
    # graded info; the same finding pointing at steady steps keeps the scale's grade
    from traceinsight.rule_api import Finding, Location, as_instances
    from traceinsight.assess.severity import grade
    from traceinsight.derive.steady import one_time_ns

    t = KinetoTrace()
    b = 0.0
    for s in range(6):
        slow = {0: (0, 1, 2), 1: (3,)}.get(s, ())
        start, at = b, b + 10.0
        for k in range(3 if s == 0 else 4):
            d = 15_000.0 if k in slow else 5.0
            t.kernel(f"kernel_{k}", at + d + 5.0, 400.0, launch_us=at, launch_dur_us=d, grid=GRID)
            at += d + 410.0
        t.step(s, start, at - start + 10.0)
        b = at + 20.0
    a = traceinsight.analyze(t.write(tmp_path / "cold_steps.json"))
    loads = a.ledger.warmup[a.ledger.warmup["reason"].str.startswith("first launch of")]
    inst = loads[["start_ns", "end_ns"]].assign(rank=0, device=0)

    def finding(instances, impact):
        return Finding(code="TI003", title="t", severity=Severity.ERROR, message="", impact_ns=impact,
                       location=Location(rank=0, device=0), category="launch_overhead", instances=as_instances(instances))

    assert one_time_ns(a.ledger.warmup, inst) == (60_000_000, 60_000_000)
    on_loads = finding(inst, 60_000_000)
    steady = a.views.steps.iloc[3:5]
    on_steps = finding(steady[["start_ns", "end_ns"]].assign(rank=0, device=0), 60_000_000)
    out = grade([on_loads, on_steps], a.views, {})
    assert [f.severity.value for f in out] == ["info", "error"]


# --- the model's boundaries, by value (issue 40) -------------------------------------------------------------
def test_a_leading_step_is_compared_with_the_median_of_the_steps_after_it():
    """Steps of 5, 1 and 3 ms: the first is 2.5 times the median of the two after it (2 ms), so it is warm-up;
    against a median that included itself (3 ms) it would be under 2 times and judged steady. The second step has
    one step after it, too few to compare with, and stops the run."""
    from traceinsight.derive.steady import warmup_steps

    ms = 1_000_000
    assert warmup_steps([5 * ms, 1 * ms, 3 * ms]).tolist() == [True, False, False]
    assert warmup_steps([4 * ms, 1 * ms, 3 * ms]).tolist() == [True, False, False]  # exactly 2 times: warm-up
    assert warmup_steps([3.9 * ms, 1 * ms, 3 * ms]).tolist() == [False, False, False]
    assert warmup_steps([10 * ms, 5 * ms, 1 * ms, 3 * ms]).tolist() == [True, True, False, False]  # 10 >= 2 x 3, 5 >= 2 x 2
    assert warmup_steps([5 * ms, 1 * ms]).tolist() == [False, False]  # one step after it: nothing to compare with


def _steps_trace(tmp_path, durs_us, name, *, loads=(), mallocs=()):
    """Steps of ``durs_us`` back to back from 0; in each, 20 short kernels launched at its start; ``loads``: one-time
    calls (cuModuleLoadData) as (start, dur) µs; ``mallocs``: cudaMalloc calls at these µs."""
    t = KinetoTrace()
    at = 0.0
    for s, d in enumerate(durs_us):
        t.step(s, at, d)
        for k in range(20):
            t.kernel(GEMM, at + 20 + k * 10, 8.0, launch_us=at + 1 + k * 0.5, launch_dur_us=0.4, grid=GRID)
        at += d
    for start, dur in loads:
        t.runtime("cuModuleLoadData", start, dur)
    for start in mallocs:
        t.runtime("cudaMalloc", start, 30.0)
    # one kernel closes the window at the end of the last step
    t.kernel(GEMM, at - 20, 8.0, launch_us=at - 30, launch_dur_us=0.4, grid=GRID)
    return traceinsight.analyze(t.write(tmp_path / name))


def test_the_warm_up_step_of_5_1_3_ms_is_booked_and_the_other_two_are_steady(tmp_path):
    a = _steps_trace(tmp_path, [5_000, 1_000, 3_000], "513.json")
    w = a.ledger.warmup
    steps = w[w["reason"].str.startswith("warm-up step")]
    assert steps[["start_ns", "end_ns"]].to_numpy().tolist() == [[0, 5_000_000]]
    from traceinsight.derive.steady import judgement

    assert judgement(a.ledger, a.views.steps)["steady_steps"] == 2


def test_a_step_warm_up_covers_by_half_or_more_is_not_steady(tmp_path):
    """Four 10 ms steps: module loads cover step 0 whole and 7.5 ms of step 1 (75 %): only steps 2 and 3 are steady.
    A load covering 5 ms of step 1 (exactly half) leaves it out too; 4.9 ms (49 %) does not."""
    from traceinsight.derive.steady import judgement

    for cover_us, steady in ((7_500, 2), (5_000, 2), (4_900, 3), (10_000, 2)):
        a = _steps_trace(tmp_path, [10_000] * 4, f"cover{cover_us}.json", loads=[(0, 10_000), (10_000, cover_us)])
        assert judgement(a.ledger, a.views.steps)["steady_steps"] == steady, cover_us


def test_one_steady_step_cannot_be_judged_two_can(tmp_path):
    """Module loading fills most of the window: with one step outside it the window gets "cannot judge", with two
    it is judged (MIN_STEADY_STEPS = 2)."""
    from traceinsight.derive.steady import judgement

    one = _steps_trace(tmp_path, [10_000] * 3, "one.json", loads=[(0, 10_000), (10_000, 9_000)])
    j = judgement(one.ledger, one.views.steps)
    assert (j["judgeable"], j["steady_steps"]) == (False, 1)
    assert j["reason"].startswith("one-time work (module loading, set-up, compilation, allocator growth) fills ")
    assert j["reason"].endswith("% of the window and only 1 step outside it shows the rest repeats")
    assert details(one)["category"] == "cannot_judge"
    two = _steps_trace(tmp_path, [10_000] * 4, "two.json", loads=[(0, 10_000), (10_000, 10_000), (20_000, 1_000)])
    j = judgement(two.ledger, two.views.steps)
    assert j["warmup_ns"] * 2 >= j["window_ns"]  # most of the window is warm-up: only the step count decides
    assert (j["judgeable"], j["steady_steps"], j["reason"]) == (True, 2, None)
    assert details(two)["category"] != "cannot_judge"


def test_allocator_growth_is_warm_up_only_before_the_second_step(tmp_path):
    """cudaMalloc in the first step grows the caching allocator's pool: one-time work. From the second step's start
    on (at it, inside it, later) the pool is reused and a cudaMalloc is steady-state work."""
    a = _steps_trace(tmp_path, [3_000] * 4, "alloc.json", mallocs=[500.0, 2_969.0, 3_000.0, 4_000.0, 7_000.0])
    w = a.ledger.warmup
    grown = w[w["reason"].str.startswith("allocator growth")]
    assert grown[["start_ns", "end_ns"]].to_numpy().tolist() == [[500_000, 530_000], [2_969_000, 2_999_000]]
    assert set(grown["reason"]) == {"allocator growth: cudaMalloc"}


def test_a_graph_capture_is_one_time_work_from_its_begin_to_its_end(tmp_path):
    """cudaStreamBeginCapture at 1 ms and cudaStreamEndCapture at 3 ms (50 µs) on the same thread: the launches
    between them are recorded, not run, so 1 ms to 3.05 ms is one-time work. An end on another thread, or before
    the begin, closes nothing."""
    t = KinetoTrace()
    t.kernel(GEMM, 10.0, 10.0, launch_us=0.5, launch_dur_us=0.3, grid=GRID)
    t.runtime("cudaStreamBeginCapture", 1_000.0, 20.0)
    t.runtime("cudaStreamEndCapture", 3_000.0, 50.0)
    t.runtime("cudaStreamEndCapture", 2_000.0, 50.0, tid=99)  # another thread's end, before this one's
    t.runtime("cudaStreamEndCapture", 4_500.0, 50.0, tid=98)  # an end on the next thread, before its begin
    t.runtime("cudaStreamBeginCapture", 5_000.0, 20.0, tid=98)  # no end after it on its thread
    for i in range(40):
        t.kernel(GEMM, 6_010.0 + i * 50, 50.0, launch_us=6_000.0 + i * 0.4, launch_dur_us=0.3, grid=GRID)
    a = traceinsight.analyze(t.write(tmp_path / "capture.json"))
    w = a.ledger.warmup
    cap = w[w["reason"] == "graph capture (launches recorded, not run)"]
    assert cap[["rank", "start_ns", "end_ns"]].to_numpy().tolist() == [[0, 1_000_000, 3_050_000]]


def test_a_first_launch_of_exactly_a_millisecond_is_a_module_load(tmp_path):
    """Module loading is a first launch call of at least 1 ms (WARMUP_MIN_NS) and 10 times the rank's median launch:
    exactly 1 ms counts, 999 µs does not; a name longer than 60 characters is cut in the reason."""
    long_name = "k" * 70
    t = KinetoTrace()
    at = 0.0
    for name, first in ((long_name, 1_000.0), ("kernel_b", 999.0)):
        for rep in range(20):
            d = first if rep == 0 else 5.0
            t.kernel(name, at + d + 5.0, 30.0, launch_us=at, launch_dur_us=d, grid=GRID)
            at += d + 40.0
    a = traceinsight.analyze(t.write(tmp_path / "edge.json"))
    w = a.ledger.warmup
    assert w.loc[w["reason"].str.startswith("first launch of"), "reason"].tolist() == ["first launch of " + "k" * 59 + "… (module load)"]


@pytest.mark.parametrize(("source", "framework", "which"), [
    ("nsys", "pytorch", "nsys"), ("pytorch", "jax", "jax"), ("pytorch", "pytorch", "pytorch"), ("pytorch", "other", "pytorch"),
    ("tensorflow-xplane", "other", "tensorflow"), ("tensorflow-json", "tensorflow", "tensorflow"), ("rocprof", "other", "any"),
    ("rocprof", "jax", "jax"),
])
def test_record_better_follows_the_profiler_then_the_framework(source, framework, which):
    """The profiler's own way (Nsight's capture range, its format's record), else the framework's, else the way of
    the framework whose profiler writes the format; a format no record names gets the general advice."""
    from traceinsight.derive.steady import RECORD_BETTER, record_better
    from traceinsight.ingest import nsys

    expected = nsys.FORMAT.record_steady if which == "nsys" else RECORD_BETTER[which]
    assert record_better(source, framework) == expected


def test_one_time_ns_adds_up_every_ranks_part(tmp_path):
    """Instances on the four module loads of the cold window (15 ms each): two named on rank 0, two naming no rank
    (they are measured against every rank's warm-up): all 60 ms is one-time work. No instance: (0, 0)."""
    import numpy as np
    import pandas as pd

    from traceinsight.derive.steady import one_time_ns

    t = KinetoTrace()
    b = 0.0
    for s in range(6):
        slow = {0: (0, 1, 2), 1: (3,)}.get(s, ())
        start, at = b, b + 10.0
        for k in range(3 if s == 0 else 4):
            d = 15_000.0 if k in slow else 5.0
            t.kernel(f"kernel_{k}", at + d + 5.0, 400.0, launch_us=at, launch_dur_us=d, grid=GRID)
            at += d + 410.0
        t.step(s, start, at - start + 10.0)
        b = at + 20.0
    a = traceinsight.analyze(t.write(tmp_path / "cold_steps.json"))
    loads = a.ledger.warmup[a.ledger.warmup["reason"].str.startswith("first launch of")]
    inst = loads[["start_ns", "end_ns"]].reset_index(drop=True).assign(rank=[0, 0, np.nan, np.nan], device=0)
    assert one_time_ns(a.ledger.warmup, inst) == (60_000_000, 60_000_000)
    assert one_time_ns(a.ledger.warmup, pd.DataFrame({"start_ns": [], "end_ns": [], "rank": [], "device": []})) == (0, 0)


def test_first_launches_are_of_kernels_and_per_rank(tmp_path):
    """Three ranks of one job. Rank 0's first launch of kernel_a, at 50 ms, takes 20 ms (a module load); rank 1 has
    launched kernel_a quickly since 0 ms, which says nothing about rank 0's module. Rank 2 runs only a copy, whose
    call takes 2 ms: a copy is no kernel and loads no module."""
    folder = tmp_path / "job"
    for r in range(3):
        t = KinetoTrace(rank=r, world_size=3)
        if r == 2:
            t.memcpy("HtoD", 2_100.0, 10.0, 4096, launch_us=0.0, launch_dur_us=2_000.0)
            t.memcpy("HtoD", 2_200.0, 10.0, 4096, launch_us=2_150.0, launch_dur_us=5.0)
        else:
            at = 50_000.0 if r == 0 else 0.0
            for rep in range(20):
                d = 20_000.0 if (r == 0 and rep == 0) else 5.0
                t.kernel("kernel_a", at + d + 5.0, 30.0, launch_us=at, launch_dur_us=d, grid=GRID)
                at += d + 40.0
        t.write(folder / f"rank{r}.pt.trace.json")
    a = traceinsight.analyze(folder)
    w = a.ledger.warmup
    first = w[w["reason"].str.startswith("first launch of")]
    assert first[["rank", "reason"]].to_numpy().tolist() == [[0, "first launch of kernel_a (module load)"]]
    assert first["end_ns"].iloc[0] - first["start_ns"].iloc[0] == 20_000_000


def test_a_set_up_call_every_step_makes_is_per_step_work(tmp_path):
    """A "one-time" name the program still calls in each of its last steps (MIOpen asks hipGetDeviceProperties for
    every convolution) is per-step work from the second step on: only the first step's call is set-up. Loads that
    thin out (lazy module loading over the first three of four steps) stay one-time, later ones included."""
    every = _steps_trace(tmp_path, [3_000] * 4, "every.json", loads=[(100.0 + 3_000 * s, 50.0) for s in range(4)])
    w = every.ledger.warmup
    assert w[w["reason"] == "one-time set-up: cuModuleLoadData"]["start_ns"].tolist() == [100_000]
    lazy = _steps_trace(tmp_path, [3_000] * 4, "lazy.json", loads=[(100.0 + 3_000 * s, 50.0) for s in range(3)])
    w = lazy.ledger.warmup
    assert w[w["reason"] == "one-time set-up: cuModuleLoadData"]["start_ns"].tolist() == [100_000, 3_100_000, 6_100_000]


def test_a_python_frame_whose_path_says_compile_is_no_recompile(tmp_path):
    """``torch/_compile.py(42): inner`` is the ``_disable_dynamo`` wrapper every eager optimizer step runs in: a
    Python frame's name is its file's path, so "compile" in it is no compilation (TI015 stays silent); a framework
    range named for compiling in the same steps is counted."""
    from traceinsight.derive.steady import steady_recompiles

    for kind in ("python", "annotation"):
        t = KinetoTrace()
        for s in range(4):
            t.step(s, s * 3000.0, 3000.0)
            t.kernel(GEMM, s * 3000.0 + 20, 8.0, launch_us=s * 3000.0 + 1, launch_dur_us=0.4, grid=GRID)
            getattr(t, kind)("torch/_compile.py(42): inner" if kind == "python" else "compile_inner", s * 3000.0 + 100, 200.0)
        a = traceinsight.analyze(t.write(tmp_path / f"{kind}.json"))
        late = int(steady_recompiles(a.views.views).sum())
        if kind == "python":
            assert late == 0 and not any(f.code == "TI015" for f in a.findings)
        else:  # steps 1-3 begin at or after the second step: three recompiles in the steady state
            assert late == 3
