"""Steps from any marker: ProfilerStep when present, else a repeated user range picked by repetition and coverage
(library ranges never), or the range named with ``--step-range`` (API ``step_range=``)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import traceinsight
from traceinsight.cli.app import app
from traceinsight.vocab.errors import ConfigError
from traceinsight.derive.views import Views

from .helpers.kineto_writer import KinetoTrace
from .helpers.nsys_writer import NsysTrace


def _kineto_iterations(tmp_path, n=6):
    # record_function("train_iteration") around each iteration, a "forward" range inside it, no ProfilerStep
    t = KinetoTrace()
    b = 0.0
    for i in range(n):
        t.annotation("train_iteration", b, 1_000.0)
        t.annotation("forward", b + 10.0, 500.0)
        for k in range(8):
            t.kernel("gemm", b + 30.0 + k * 110.0, 100.0, launch_us=b + 20.0 + k * 2.0)
        b += 1_010.0
    return t.write(tmp_path / "iterations.json")


def test_kineto_record_function_ranges_become_steps(tmp_path):
    tl = traceinsight.load(_kineto_iterations(tmp_path))
    src = tl.meta.extra["steps_source"]
    assert src["marker"] == "train_iteration" and src["how"] == "auto"
    assert "repeats 6 times" in src["why"] and "library ranges" in src["why"]
    st = Views(tl).steps
    assert len(st) == 6 and (st["dur_ns"] == 1_000_000).all()
    # GPU work inherits the step of its launch
    ev = tl.events
    assert sorted(ev.loc[(ev["kind"] == "kernel").to_numpy(), "step"].unique().tolist()) == list(range(6))


def test_step_range_names_the_inner_range(tmp_path):
    p = _kineto_iterations(tmp_path)
    a = traceinsight.analyze(p, step_range="forward")
    assert a.timeline.meta.extra["steps_source"]["how"] == "chosen"
    st = a.views.steps
    assert len(st) == 6 and (st["dur_ns"] == 500_000).all()
    with pytest.raises(ConfigError, match="no range named 'backward'"):
        traceinsight.analyze(p, step_range="backward")
    r = CliRunner().invoke(app, ["analyze", str(p), "--step-range", "nope", "-f", "json"])
    assert r.exit_code == 2 and "no range named 'nope'" in r.output


def test_nsys_nvtx_iterations_become_steps(tmp_path):
    t = NsysTrace()
    b = 1_000_000
    for i in range(5):
        t.annotation("iteration", b, 2_000_000)
        for k in range(10):
            t.kernel("gemm", b + 20_000 + k * 190_000, 180_000, launch_ns=b + 10_000 + k * 1_000, launch_dur_ns=800)
        b += 2_010_000
    tl = traceinsight.load(t.write(tmp_path / "nvtx.sqlite"))
    assert tl.meta.extra["steps_source"]["marker"] == "iteration"
    assert len(Views(tl).steps) == 5


def test_library_ranges_never_become_steps(tmp_path):
    # only CUB and NCCL ranges, repeated and covering the window: not iterations
    t = NsysTrace()
    b = 1_000_000
    for i in range(40):
        t.annotation("cub::DeviceRadixSort::SortPairs", b, 400_000)
        t.annotation("ncclAllReduce", b + 500_000, 400_000)
        t.kernel("DeviceRadixSortOnesweepKernel", b + 10_000, 380_000, launch_ns=b + 5_000)
        t.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", b + 510_000, 380_000, launch_ns=b + 505_000)
        b += 1_000_000
    tl = traceinsight.load(t.write(tmp_path / "lib.sqlite"))
    assert tl.meta.extra["steps_source"]["how"] == "none"
    assert Views(tl).steps.empty


def test_json_report_says_which_marker_made_the_steps(tmp_path):
    p = _kineto_iterations(tmp_path)
    r = CliRunner().invoke(app, ["analyze", str(p), "-f", "json"])
    assert r.exit_code == 0, r.output
    j = json.loads(r.output)
    s = j["steps"]
    assert s["source"]["marker"] == "train_iteration" and s["source"]["how"] == "auto"
    assert s["count"] == 6 and len(s["per_step"]) == 6
    assert s["spread"]["median_ns"] == 1_000_000 and s["spread"]["min_ns"] == s["spread"]["max_ns"] == 1_000_000
    assert s["per_step"][1]["ledger_ns"]["compute"] == 800_000
    assert s["outlier"] is None


def test_outlier_step_is_named_with_the_bucket_that_grew(tmp_path):
    t = KinetoTrace()
    b = 0.0
    for i in range(6):
        wait = 3_000.0 if i == 3 else 0.0  # step 3 waits 3 ms for its batch before its kernels
        t.annotation("train_iteration", b, 1_000.0 + wait)
        if wait:
            t.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", b + 5.0, wait)
        for k in range(8):
            t.kernel("gemm", b + wait + 30.0 + k * 110.0, 100.0, launch_us=b + wait + 20.0 + k * 2.0)
        b += 1_010.0 + wait
    j = json.loads(CliRunner().invoke(app, ["analyze", str(t.write(tmp_path / "slow.json")), "-f", "json"]).output)
    o = j["steps"]["outlier"]
    assert o["step"] == 3 and o["cause"] == "idle_data_wait" and o["x_median"] == pytest.approx(4.0, abs=0.01)
    assert j["steps"]["spread"]["max_ns"] == 4_000_000 and j["steps"]["spread"]["p90_ns"] < 4_000_000


def test_ranges_are_projected_on_the_gpu_and_shown_in_every_report(tmp_path):
    p = _kineto_iterations(tmp_path)
    r = CliRunner().invoke(app, ["analyze", str(p), "-f", "json"])
    (fwd,) = [x for x in json.loads(r.output)["ranges"] if x["name"] == "forward"]
    # 6 forward ranges of 500 µs, each launching 8 kernels of 100 µs
    assert fwd == {"name": "forward", "count": 6, "host_ns": 3_000_000, "gpu_ns": 4_800_000, "gpu_ops": 48}
    md = CliRunner().invoke(app, ["analyze", str(p), "-f", "md"]).output
    assert "**Steps:** 6 steps from train\\_iteration \\(picked automatically" in md  # Markdown-escaped
    assert "| forward | 6 | 3.00 ms | 4.80 ms | 48 |" in md
    out = tmp_path / "r.html"
    assert CliRunner().invoke(app, ["analyze", str(p), "-o", str(out)]).exit_code == 0
    html = out.read_text()
    assert 'id="steps"' in html and 'data-range="forward" data-gpu-ns="4800000"' in html and "median 1.00 ms" in html
    assert ">ranges on GPU<" in html and "forward on the GPU: 870.0 µs" in html  # first kernel start to last kernel end


def test_cannot_judge_says_how_to_record_a_better_window(tmp_path):
    t = KinetoTrace()  # three kernels: nothing to judge
    for i in range(3):
        t.kernel("k", 100 * i, 3)
    p = t.write(tmp_path / "thin.json")
    md = CliRunner().invoke(app, ["analyze", str(p), "-f", "md"]).output
    assert "**Verdict: Cannot judge this window.**" in md and "**Record a better window:** " in md and "torch.profiler.schedule" in md
    out = tmp_path / "thin.html"
    CliRunner().invoke(app, ["analyze", str(p), "-o", str(out)])
    assert "data-record-better" in out.read_text()


def _profiler_steps(tmp_path):
    t = KinetoTrace()
    b = 0.0
    for i in range(10):
        t.step(i, b, 1_000.0)
        slow = 2_000.0 if i == 7 else 0.0  # step 7 waits 2 ms in a sync before its kernels
        if slow:
            t.runtime("cudaDeviceSynchronize", b + 5.0, slow)
        for k in range(8):
            t.kernel("gemm", b + slow + 30.0 + k * 110.0, 100.0, launch_us=b + slow + 20.0 + k * 2.0)
        b += 1_010.0 + slow
    return t.write(tmp_path / "ten.json")


def test_windows_are_applied_before_the_analysis(tmp_path):
    p = _profiler_steps(tmp_path)
    a = traceinsight.analyze(p, steps="2:4")
    assert sorted(a.views.steps["step"].tolist()) == [2, 3, 4]
    assert a.timeline.meta.extra["window"]["chosen"] == "steps 2:4"
    assert any("analysed only steps 2:4" in w for w in a.timeline.meta.warnings)
    assert a.ledger.windows["window_ns"].iloc[0] < 3_100_000
    def idle(x):
        t = x.ledger.totals()
        return sum(v for k, v in t.items() if k.startswith("idle_"))

    whole = traceinsight.analyze(p)
    assert idle(whole) > 2_000_000
    assert idle(a) < 500_000  # step 7's 2 ms wait is outside the chosen steps
    w = traceinsight.analyze(p, window_ms="6.5:9.5")
    assert w.timeline.events["start_ns"].min() >= 6_500_000 and (w.timeline.events["start_ns"] + w.timeline.events["dur_ns"]).max() <= 9_500_000
    assert idle(w) > 1_500_000
    r = traceinsight.analyze(_kineto_iterations(tmp_path), range_name="forward")
    assert r.timeline.meta.extra["window"]["chosen"] == "range forward"
    with pytest.raises(ConfigError, match="no such steps"):
        traceinsight.analyze(p, steps="40:50")
    res = CliRunner().invoke(app, ["analyze", str(p), "--steps", "2:4", "-f", "json"])
    assert res.exit_code == 0 and json.loads(res.output)["steps"]["count"] == 3
    bad = CliRunner().invoke(app, ["analyze", str(p), "--window", "abc", "-f", "json"])
    assert bad.exit_code == 2 and "--window" in bad.output


def _optimizer_loop(t: KinetoTrace, n: int, *, zero_grad: bool = True, user_range: str | None = None, zero_grad_last: bool = False) -> None:
    """``n`` iterations of 1 ms: forward kernel, then ``Optimizer.step`` (and ``Optimizer.zero_grad`` first, or
    right after the step with ``zero_grad_last``)."""
    for i in range(n):
        t0 = i * 1_000.0
        if user_range:
            t.annotation(user_range, t0, 990.0)
        if zero_grad and not zero_grad_last:
            t.cpu_op("Optimizer.zero_grad#AdamW.zero_grad", t0 + 1, 10)
        if zero_grad_last and i:
            t.cpu_op("Optimizer.zero_grad#AdamW.zero_grad", t0 - 95, 10)
        op = t.cpu_op("aten::mm", t0 + 20, 30)
        t.kernel("sgemm", t0 + 60, 500, launch_us=t0 + 25, op=op)
        op = t.cpu_op("Optimizer.step#AdamW.step", t0 + 700, 200)
        t.kernel("multi_tensor_apply_kernel", t0 + 720, 100, launch_us=t0 + 710, op=op)


def test_optimizer_ranges_mark_the_iterations_when_nothing_else_does(tmp_path):
    """No ProfilerStep and no repeated user range: iterations run from one Optimizer.zero_grad to the next (the last
    to the end of its optimizer step), and every view reads them as steps."""
    t = KinetoTrace()
    _optimizer_loop(t, 5)
    a = traceinsight.analyze(t.write(tmp_path / "zg.json"))
    src = a.timeline.meta.extra["steps_source"]
    assert src["how"] == "optimizer" and "Optimizer.zero_grad" in src["why"]
    st = a.views.steps
    # the last zero_grad opens an iteration the capture has no end for but its step's: 10 % of every other
    # iteration comes after its step, so that one would be short by it; left out
    assert len(st) == 4 and st["start_ns"].tolist() == [1_000 + i * 1_000_000 for i in range(4)]
    assert st["end_ns"].tolist() == [1_000 + i * 1_000_000 for i in range(1, 5)]
    ev = a.timeline.events
    kernels = ev[ev["kind"] == "kernel"]
    assert sorted(set(kernels["step"])) == [-1, 0, 1, 2, 3]  # GPU rows inherit their launch's iteration
    from traceinsight.render import render

    assert "(found from the optimizer's calls;" in render(a, "text")


def test_the_last_iteration_is_kept_when_zero_grad_closes_each_iteration(tmp_path):
    """``zero_grad`` right after each step (5 µs later): nothing of an iteration follows its step, so the last
    one, from the last zero_grad to the end of its step, is whole and is a step like the rest."""
    t = KinetoTrace()
    _optimizer_loop(t, 5, zero_grad_last=True)
    st = traceinsight.analyze(t.write(tmp_path / "zg_last.json")).views.steps
    assert len(st) == 4 and st["end_ns"].iloc[-1] == 4_900_000
    assert (st["end_ns"] - st["start_ns"]).tolist() == [1_000_000, 1_000_000, 1_000_000, 995_000]


def test_optimizer_step_alone_marks_iterations_between_its_ends(tmp_path):
    t = KinetoTrace()
    _optimizer_loop(t, 5, zero_grad=False)
    a = traceinsight.analyze(t.write(tmp_path / "st.json"))
    assert a.timeline.meta.extra["steps_source"]["how"] == "optimizer"
    assert len(a.views.steps) == 4 and a.views.steps["start_ns"].iloc[0] == 900_000


def test_a_marker_of_the_loop_wins_over_the_optimizer(tmp_path):
    t = KinetoTrace()
    _optimizer_loop(t, 5, user_range="train_iteration")
    a = traceinsight.analyze(t.write(tmp_path / "user.json"))
    assert a.timeline.meta.extra["steps_source"]["how"] == "auto" and a.timeline.meta.extra["steps_source"]["marker"] == "train_iteration"
    t = KinetoTrace()
    for i in range(5):
        t.step(i, i * 1_000.0, 990.0)
    _optimizer_loop(t, 5)
    assert traceinsight.analyze(t.write(tmp_path / "prof.json")).timeline.meta.extra["steps_source"]["how"] == "profiler"
