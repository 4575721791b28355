"""TI001 gpu-idle-gaps: its positive, negative and fix cases, on planted traces and the real corpus."""

from __future__ import annotations

import pytest

import traceinsight
from tests.conftest import corpus_file
from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.rule_cases import DL, GEMM, GRID, Example, analyze_example, busy_steps, codes_of, findings_of


#: positive: it fires; negative: it stays silent; fix: the same workload, fixed as its fix text says.
CASES = {
    "positive": ["test_ti001_data_loading_gaps", "test_example_bad_fires", "test_ti001_host_inside_a_compiled_wrapper_is_host_overhead"],
    "negative": ["test_ti001_negative_busy_gpu", "test_ti001_negative_gap_all_warmup", "test_example_good_is_silent"],
    "fix": ["test_ti001_bad_gaps_are_data_loading_and_fix_removes_ti005_too", "test_ti001_foreach_optimizer_is_not_told_to_use_foreach",
            "test_ti001_compiled_model_is_told_graphs_not_compile", "test_ti001_keras_tf_function_is_told_steps_per_execution",
            "test_ti001_eager_tensorflow_is_told_to_wrap_the_step"],
}


def test_ti001_data_loading_gaps(tmp_path):
    t = KinetoTrace()
    for s in range(5):  # 1 ms compute, then 2 ms in the DataLoader with the GPU idle
        t0 = s * 3000.0
        t.step(s, t0, 3000.0)
        for i in range(20):
            t.kernel("volta_sgemm_128x64_nn", t0 + 10 + i * 50, 50.0, launch_us=t0 + i * 0.5)
        t.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 1015.0, 1980.0)
    (f,) = findings_of(t.write(tmp_path / "t.json"), "TI001")
    # 4 gaps between steps: from the last kernel end (t0+1010) to the next step's first kernel (t0+3010) = 2000 µs
    assert f.impact_ns == pytest.approx(4 * 2_000_000, rel=0.01)
    # the ledger books each ns once: the 1980 µs inside the DataLoader range are data loading; of the 20 µs
    # around it, 10 µs the host is launching the next step (runtime calls from t0+3000) and 10 µs nothing is traced
    assert f.metrics["top_cause"] == "data loading" and f.metrics["cause_pct"]["data loading"] == 99.0
    assert f.metrics["cause_ns"] == {
        "data loading": 4 * 1_980_000,
        "host busy in CPU ops (launch queue empty)": 4 * 10_000,
        "untraced host time (launch queue empty)": 4 * 10_000,
    }
    assert f.metrics["idle_by_category"] == {"input_pipeline": 4 * 1_980_000}
    assert len(f.evidence) == 4 and set(f.evidence["cause"]) == {"data loading"}
    assert "enumerate(DataLoader)" in f.evidence["host_activity"].iloc[0]
    assert f.evidence["duration_us"].iloc[0] == pytest.approx(2000.0, abs=1)


def _loader_steps_with_first_call(t: KinetoTrace, first_call_us: float) -> None:
    """Five 3 ms steps: 1 ms of kernels, then a 2 ms gap inside the DataLoader; each step calls aten::conv2d
    inside the gap (50 µs), except that step 0's first call lasts ``first_call_us`` (cuDNN autotune-like)."""
    for s in range(5):
        t0 = s * 3000.0
        t.step(s, t0, 3000.0)
        for i in range(20):
            t.kernel("volta_sgemm_128x64_nn", t0 + 10 + i * 50, 50.0, launch_us=t0 + i * 0.5)
        t.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 1015.0, 1980.0)
        t.cpu_op("aten::conv2d", t0 + 1100.0, first_call_us if s == 0 else 50.0)


def test_ti001_leaves_out_the_ledgers_warmup(tmp_path):
    # the first conv2d (1.5 ms, 30x its later calls) is warm-up in the ledger: step 0's gap counts its other 500 µs
    t = KinetoTrace()
    _loader_steps_with_first_call(t, 1500.0)
    a = traceinsight.analyze(t.write(tmp_path / "t.json"))
    assert int(a.ledger.by_device.set_index("bucket").loc["idle_warmup", "ns"]) == 1_500_000
    (f,) = [x for x in a.findings if x.code == "TI001"]
    assert f.impact_ns == 4 * 2_000_000 - 1_500_000
    assert f.metrics["warmup_excluded_ns"] == 1_500_000
    assert f.metrics["cause_ns"]["data loading"] == 4 * 1_980_000 - 1_500_000
    assert "warm-up (one-time start-up work)" not in f.metrics["cause_ns"]
    assert sum(f.metrics["cause_ns"].values()) == f.impact_ns
    # shares of the steady state: the window (10 µs to 13.01 ms) less the warm-up
    assert f.metrics["long_gap_idle_pct"] == pytest.approx(100.0 * 6_500_000 / (13_000_000 - 1_500_000), abs=0.001)
    row = f.evidence[f.evidence["warmup_us"] > 0]
    assert row["duration_us"].tolist() == [pytest.approx(2000.0, abs=1)] and row["warmup_us"].tolist() == [1500.0]
    # the gap is mostly warm-up (1.5 of 2 ms), yet warm-up is never a gap's cause: its steady-state part is
    assert row["cause"].tolist() == ["data loading"] and set(f.evidence["cause"]) == {"data loading"}
    assert "1.50 ms of warm-up" in f.message
    # TI013 reports the same 1.5 ms, with the call that held it
    (w,) = [x for x in a.findings if x.code == "TI013"]
    assert w.metrics["warmup_ns"] == 1_500_000 and w.metrics["startup_counted_as_idle_ns"] == 0
    assert w.evidence["one_time_work"].tolist() == ["first call of aten::conv2d"]
    assert [(i.start_ns, i.end_ns, i.label) for i in w.instances] == [(1_010_000, 3_010_000, "warm-up")]


def test_ti001_largest_gap_is_its_steady_state_part(tmp_path):
    """The message's largest gap is measured as TI001 counts gaps, warm-up left out: step 0's 4.9 ms gap holds a
    4 ms first call (warm-up), so its 0.9 ms is smaller than the 2 ms gaps of the later steps, and the 4.9 ms is
    never quoted as if it were steady-state idle."""
    t = KinetoTrace()
    t.step(0, 0.0, 5900.0)  # under twice the later steps: not a warm-up step as a whole
    for i in range(20):
        t.kernel("volta_sgemm_128x64_nn", 10 + i * 50, 50.0, launch_us=i * 0.5)
    t.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 1015.0, 4880.0)
    t.cpu_op("aten::conv2d", 1100.0, 4000.0)
    for s in range(1, 5):
        t0 = 2900.0 + s * 3000.0
        t.step(s, t0, 3000.0)
        for i in range(20):
            t.kernel("volta_sgemm_128x64_nn", t0 + 10 + i * 50, 50.0, launch_us=t0 + i * 0.5)
        t.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 1015.0, 1980.0)
        t.cpu_op("aten::conv2d", t0 + 1100.0, 50.0)
    a = traceinsight.analyze(t.write(tmp_path / "t.json"))
    (f,) = [x for x in a.findings if x.code == "TI001"]
    assert f.metrics["warmup_excluded_ns"] == 4_000_000
    assert "The largest gap lasted 2.00 ms." in f.message and "4.90 ms" not in f.message
    assert f.evidence["duration_us"].iloc[-1] == pytest.approx(4900.0, abs=1)  # listed last: 0.9 ms once warm-up is out


def test_ti001_negative_gap_all_warmup(tmp_path):
    # one 20 ms first step (the ledger's warm-up: 20x the later ones) then healthy steps: no idle-gap finding
    t = KinetoTrace()
    t.step(0, 0.0, 21_000.0)
    t.kernel("volta_sgemm_128x64_nn", 10.0, 10.0, launch_us=0.0)
    for i in range(20):
        t.kernel("volta_sgemm_128x64_nn", 20_020.0 + i * 50, 50.0, launch_us=20_000.0 + i * 0.5)
    busy_steps(t, 5, 1010.0, 1000.0, first=21_000.0)
    a = traceinsight.analyze(t.write(tmp_path / "t.json"))
    assert int(a.ledger.gaps["idle_warmup"].max()) == int(a.ledger.gaps["dur_ns"].max()) == 20_000_000
    assert [x for x in a.findings if x.code == "TI001"] == []


def test_ti001_causes_sync_host_and_k2k(tmp_path):
    t = KinetoTrace()
    t.step(0, 0.0, 10_000.0)
    t.kernel("k_a", 10.0, 1000.0, launch_us=0.0)
    # gap 1 (1010 -> 2510): a cudaStreamSynchronize waiting for k_a from 5 µs, then the host builds the next
    # launch; the sync blocked 1010 µs, so it owns that much of the gap (the host's 490 µs after it are its own)
    t.runtime("cudaStreamSynchronize", 5.0, 1010.0)
    op = t.cpu_op("aten::linear", 1100.0, 1410.0)
    t.kernel("k_b", 2510.0, 1000.0, launch_us=2500.0, op=op)
    # gap 2 (3510 -> 4510): launched long before, the GPU waited on something else (kernel-to-kernel delay)
    t.kernel("k_c", 4510.0, 1000.0, launch_us=2600.0)
    # gap 3 (5510 -> 7010): host busy in a framework op that dispatches 1.4 ms before its own launch
    op_d = t.cpu_op("aten::index", 5520.0, 1475.0)
    t.kernel("k_d", 7010.0, 1000.0, launch_us=6990.0, op=op_d)
    (f,) = findings_of(t.write(tmp_path / "t.json"), "TI001")
    ev = f.evidence.sort_values("start_ms")
    assert list(ev["cause"].str.split(" ").str[0]) == ["host", "kernel-to-kernel", "host"]
    assert ev["cause"].iloc[0] == "host synchronization"
    assert ev["cause"].iloc[2].startswith("host busy in CPU ops")
    assert f.impact_ns == pytest.approx(1_500_000 + 1_000_000 + 1_500_000, rel=0.001)
    assert f.metrics["cause_ns"]["host synchronization"] == 1_010_000


def test_ti001_a_short_sync_does_not_own_the_host_work_after_it(tmp_path):
    """A sync that blocked 115 µs opens a 1.5 ms gap the host then spends in ``aten::linear`` before the next
    launch: without the sync the host would have been only 115 µs further on, so the gap is the host's work (its
    cause and the fix), with the sync's 115 µs beside it."""
    t = KinetoTrace()
    t.step(0, 0.0, 10_000.0)
    t.kernel("k_a", 10.0, 1000.0, launch_us=0.0)
    t.runtime("cudaStreamSynchronize", 900.0, 115.0)
    op = t.cpu_op("aten::linear", 1100.0, 1410.0)
    t.kernel("k_b", 2510.0, 1000.0, launch_us=2500.0, op=op)
    (f,) = findings_of(t.write(tmp_path / "t.json"), "TI001")
    assert list(f.evidence["cause"]) == ["host busy in CPU ops (launch queue empty)"]
    assert f.metrics["cause_ns"]["host synchronization"] == 115_000
    assert f.metrics["top_cause"] == "host busy in CPU ops (launch queue empty)"
    assert "compile the model" in f.fixes["pytorch"].text


def test_ti001_cpu_work_that_calls_no_gpu_api_is_its_own_cause(tmp_path):
    """The host makes each step's input on the CPU (``aten::randn`` of a CPU tensor, 3 ms, no GPU call inside),
    copies it over and runs one kernel: the gaps are CPU work, whose fix is to make the tensor on the GPU or
    ahead of the step, not to compile the model (nothing here is eager dispatch)."""
    t = KinetoTrace()
    for s in range(4):
        t0 = s * 4200.0
        t.step(s, t0, 4200.0)
        t.cpu_op("aten::randn", t0 + 10.0, 3000.0)
        to = t.cpu_op("aten::to", t0 + 3020.0, 150.0)
        t.memcpy("HtoD", t0 + 3040.0, 100.0, 4 << 20, launch_us=t0 + 3030.0, launch_dur_us=120.0)
        t.kernel("matmul_k", t0 + 3200.0, 900.0, launch_us=t0 + 3180.0, op=to)
    (f,) = findings_of(t.write(tmp_path / "t.json"), "TI001")
    assert f.metrics["top_cause"] == "CPU work in ops that make no GPU call"
    assert set(f.evidence["cause"]) == {"CPU work in ops that make no GPU call"}
    fix = f.fixes["pytorch"].text
    assert 'device="cuda"' in f.fixes["pytorch"].code and "torch.compile" not in fix and "compile the model" not in fix


def test_ti001_optimizer_step_names_a_late_launch(tmp_path):
    t = KinetoTrace()
    for s in range(4):  # 1 ms of kernels, then 1.5 ms the host steps the optimizer before launching again
        t0 = s * 2600.0
        t.step(s, t0, 2600.0)
        for i in range(10):
            t.kernel("volta_sgemm_128x64_nn", t0 + 10 + i * 100, 100.0, launch_us=t0 + i * 0.5)
        t.cpu_op("Optimizer.step#SGD.step", t0 + 1020.0, 1500.0)
    (f,) = findings_of(t.write(tmp_path / "t.json"), "TI001")
    assert f.metrics["top_cause"] == "optimizer step"
    assert set(f.evidence["cause"]) == {"optimizer step"}
    assert f.metrics["cause_ns"]["optimizer step"] == sum(f.metrics["cause_ns"].values()) == f.impact_ns


def test_ti001_optimizer_does_not_hide_a_sync(tmp_path):
    """A gap that opens under a blocking sync is the sync's even inside the optimizer step (the queue drained)."""
    t = KinetoTrace()
    for s in range(4):
        t0 = s * 2600.0
        t.step(s, t0, 2600.0)
        for i in range(10):
            t.kernel("volta_sgemm_128x64_nn", t0 + 10 + i * 100, 100.0, launch_us=t0 + i * 0.5)
        # the optimizer step reads a value back right away (a grad-norm ``.item()``): the host blocks 1010 µs,
        # until the kernels are done, then steps the optimizer 590 µs more before launching the next step
        t.cpu_op("Optimizer.step#SGD.step", t0 + 15.0, 2585.0)
        t.runtime("cudaStreamSynchronize", t0 + 20.0, 1010.0)
    (f,) = findings_of(t.write(tmp_path / "t.json"), "TI001")
    assert set(f.evidence["cause"]) == {"host synchronization"}
    assert f.metrics["idle_by_category"]["host_sync"] == f.metrics["cause_ns"]["host synchronization"]


def test_ti001_causes_are_the_ledgers():
    """Every ns of TI001's gaps is booked as the ledger books it; each gap's label is its largest bucket."""
    import traceinsight
    from traceinsight.vocab.buckets import IDLE_BUCKETS
    from traceinsight.rules.gpu_idle_gaps import BUCKET_CAUSE, CAUSE_CPU_WORK, CAUSE_OPT

    a = traceinsight.analyze(corpus_file("pytorch/hta_ddp_v100_rank1of2.json.gz"), select=["TI001"])
    (f,) = a.findings
    assert sum(f.metrics["cause_ns"].values()) == f.impact_ns
    lg = a.ledger.gaps
    lg = lg[(lg["rank"] == f.location.rank) & (lg["device"] == f.location.device)].set_index("start_ns")
    starts = [i.start_ns for i in f.instances]
    rows = lg.loc[starts]
    assert (rows["end_ns"].to_numpy() == [i.end_ns for i in f.instances]).all()
    # warm-up is the ledger's and set aside: TI001 counts each gap's other ns only (2.2 ms of warm-up here)
    assert f.metrics["warmup_excluded_ns"] == int(lg["idle_warmup"].sum()) == 2_200_000
    assert f.impact_ns == int((rows["dur_ns"] - rows["idle_warmup"]).sum())
    booked = {BUCKET_CAUSE[b]: int(rows[b].sum()) for b in IDLE_BUCKETS if rows[b].sum() and b != "idle_warmup"}
    assert "warm-up (one-time start-up work)" not in f.metrics["cause_ns"]
    opt = f.metrics["cause_ns"].get(CAUSE_OPT, 0) + f.metrics["cause_ns"].get(CAUSE_CPU_WORK, 0)
    got = {c: n for c, n in f.metrics["cause_ns"].items() if c not in (CAUSE_OPT, CAUSE_CPU_WORK)}
    # the optimizer and CPU work only rename host-busy / untraced ns; every other cause is the ledger's to the ns
    for c, n in booked.items():
        if c.startswith(("host busy", "untraced")):
            continue
        assert got.get(c, 0) == n, c
    assert sum(got.values()) + opt == sum(booked.values())
    labels = [i.label for i in f.instances]
    # a gap's label is its largest bucket other than warm-up (the ledger's own cause counts warm-up)
    steady = [b for b in IDLE_BUCKETS if b != "idle_warmup"]
    for lab, cause in zip(labels, rows[steady].idxmax(axis=1)):
        assert (lab == BUCKET_CAUSE[cause] or (lab == CAUSE_OPT and cause in ("idle_host_busy", "idle_untraced"))
                or (lab == CAUSE_CPU_WORK and cause == "idle_host_busy"))


def test_ledger_gaps_row_for_row(tmp_path):
    """rulelib.gaps.ledger_gaps gives the ledger's facts on views.gaps' rows, also when the two frames differ."""
    from traceinsight.rulelib.gaps import ledger_gaps
    from traceinsight.derive.derived import Derived

    t = KinetoTrace()
    t.step(0, 0.0, 5000.0)
    t.kernel("k_a", 10.0, 100.0, launch_us=0.0)
    t.kernel("k_b", 400.0, 100.0, launch_us=350.0)  # launched 50 µs before it ran, after the GPU ran dry
    t.kernel("k_c", 900.0, 100.0, launch_us=100.0)  # queued long before: a GPU-side dependency
    v = Derived(traceinsight.load(t.write(tmp_path / "t.json")))
    lg = ledger_gaps(v)
    assert list(lg.index) == list(v.gaps.index) and list(lg["start_ns"]) == [110_000, 500_000]
    # gap 1: launched late; 4 µs of it the host is in the launch call, the rest nothing is traced
    assert list(lg["cause"]) == ["idle_untraced", "idle_gpu_dependency"]
    assert (lg["idle_host_busy"].iloc[0], lg["idle_untraced"].iloc[0]) == (4_000, 286_000)
    assert lg["next_launch_end_ns"].iloc[1] < lg["start_ns"].iloc[1]
    # a views whose gaps are a subset (another gap definition): matched on the keys, not by position
    v2 = Derived(v.timeline)
    v2.views.__dict__["gaps"] = v.gaps.iloc[[1]]  # cached_property slots: a views whose gaps differ from the ledger's
    v2.__dict__["ledger"] = v.ledger
    lg2 = ledger_gaps(v2)
    assert list(lg2.index) == [1] and lg2["cause"].iloc[0] == "idle_gpu_dependency"


def test_ti001_negative_busy_gpu(tmp_path):
    t = KinetoTrace()
    busy_steps(t, 4, 1000.0, 990.0)
    assert findings_of(t.write(tmp_path / "t.json"), "TI001") == []


def test_ti001_real_dataloader_nw0_vs_nw4():
    (f0,) = findings_of(corpus_file("pytorch/kineto_resnet50_nw0_v100.pt.trace.json.gz"), "TI001")
    f4 = findings_of(corpus_file("pytorch/kineto_resnet50_nw4_v100.pt.trace.json.gz"), "TI001")
    assert f0.metrics["top_cause"] == "data loading" and f0.metrics["cause_pct"]["data loading"] > 70
    assert f0.metrics["idle_pct"] == pytest.approx(39.4, abs=1.0)  # HTA temporal breakdown: 39.4 %
    dl0 = f0.metrics["cause_ns"]["data loading"]
    dl4 = sum(f.metrics["cause_ns"].get("data loading", 0) for f in f4)
    assert dl0 > 20 * max(dl4, 1)
    assert all(f.impact_ns < f0.impact_ns / 2 for f in f4)


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


def test_ti001_bad_gaps_are_data_loading_and_fix_removes_ti005_too(tmp_path):
    bad = analyze_example(tmp_path, EXAMPLE, fixed=False)
    good = analyze_example(tmp_path, EXAMPLE, fixed=True)
    (f,) = [f for f in bad.findings if f.code == "TI001"]
    # 4 gaps between steps: last GEMM ends at t0+2010+1000, next starts at t0+3020+2010 -> 2020 µs each
    assert f.metrics["top_cause"] == "data loading"
    assert f.impact_ns == pytest.approx(4 * 2_020_000, rel=0.01)
    assert "TI005" in codes_of(bad) and "TI005" not in codes_of(good)
    assert bad.summary.kernel_count == good.summary.kernel_count == 100
    assert good.summary.devices[0]["busy_pct"] > 95.0


EXAMPLE = Example(
    "TI001",
    bad="Batches are loaded in the training loop (DataLoader, num_workers=0): the GPU idles 2 ms each step.",
    good="Worker processes prefetch the batches: fetching one takes 40 µs and kernels stay queued.",
    build=_ti001,
)


def test_example_bad_fires(tmp_path):
    a = analyze_example(tmp_path, EXAMPLE, fixed=False)
    (f,) = [f for f in a.findings if f.code == EXAMPLE.code]
    assert f.impact_ns > 0


def test_example_good_is_silent(tmp_path):
    a = analyze_example(tmp_path, EXAMPLE, fixed=True)
    assert EXAMPLE.code not in codes_of(a), [(f.code, f.title) for f in a.findings]


def _optimizer_trace(tmp_path, name, op=None):
    t = KinetoTrace()
    for s in range(4):  # 1 ms of kernels, then 1.5 ms the host steps the optimizer (``op`` inside it) before launching again
        t0 = s * 2600.0
        t.step(s, t0, 2600.0)
        for i in range(10):
            t.kernel("volta_sgemm_128x64_nn", t0 + 10 + i * 100, 100.0, launch_us=t0 + i * 0.5)
        t.cpu_op("Optimizer.step#AdamW.step", t0 + 1020.0, 1500.0)
        if op:
            for k in range(5):
                o = t.cpu_op(op, t0 + 1030.0 + k * 290, 280.0)
                t.kernel("void at::native::multi_tensor_apply_kernel<TensorListMetadata<4>>", t0 + 1050.0 + k * 290, 5.0,
                         launch_us=t0 + 1040.0 + k * 290, op=o)
    (f,) = findings_of(t.write(tmp_path / name), "TI001")
    assert f.metrics["top_cause"] == "optimizer step"
    return f.fixes["pytorch"]


def test_ti001_foreach_optimizer_is_not_told_to_use_foreach(tmp_path):
    """The optimizer already runs ``aten::_foreach_*`` ops: its fix is the fused optimizer, never "use foreach"; once
    fused, compiling or capturing the step."""
    plain = _optimizer_trace(tmp_path, "plain.json")
    assert "fused (or foreach)" in plain.text
    fx = _optimizer_trace(tmp_path, "foreach.json", "aten::_foreach_add_")
    assert "already runs the foreach implementation" in fx.text and "fused=True" in fx.code
    assert "use the fused (or foreach)" not in fx.text
    fused = _optimizer_trace(tmp_path, "fused.json", "aten::_fused_adamw_")
    assert "already fused" in fused.text and "fused=True" not in fused.code


def test_ti001_host_inside_a_compiled_wrapper_is_host_overhead(tmp_path):
    """A torch.compile'd model at a small batch: between its Triton launches the host runs the generated code's Python
    inside inductor's ``## Call CompiledFxGraph`` range. The gaps are host overhead, not untraced host time; without
    the range in the trace the same gaps are untraced."""
    from tests.helpers.model_traces import write_compiled

    a = traceinsight.analyze(write_compiled(tmp_path / "c.json"))
    tot = a.ledger.totals()
    assert tot["idle_host_busy"] > 10 * tot["idle_untraced"]
    (f,) = [f for f in a.findings if f.code == "TI001"]
    assert f.metrics["top_cause"] == "host busy in CPU ops (launch queue empty)"
    bare = traceinsight.analyze(write_compiled(tmp_path / "bare.json", wrapper=False)).ledger.totals()
    assert bare["idle_untraced"] > 10 * bare["idle_host_busy"]
    assert bare["idle_untraced"] + bare["idle_host_busy"] == tot["idle_untraced"] + tot["idle_host_busy"]


def test_ti001_compiled_model_is_told_graphs_not_compile(tmp_path):
    from tests.helpers.model_traces import write_compiled

    (f,) = findings_of(write_compiled(tmp_path / "c.json"), "TI001")
    fx = f.fixes["pytorch"]
    assert "already compiled" in fx.text and 'mode="reduce-overhead"' in fx.code and "larger batch" in fx.text
    # compiled and already replayed as graphs: the gaps are in the code outside them, not "use CUDA graphs"
    (g,) = findings_of(write_compiled(tmp_path / "g.json", graphs=True), "TI001")
    assert "already runs compiled and as CUDA graphs" in g.fixes["pytorch"].text


def _keras_xplane(path, *, function: bool, host: str = "untraced"):
    """Six Keras steps in an XSpace (as the audit's hd2551 T4 profile): each call launches 20 GEMMs (1 ms of GPU
    work), then 2 ms pass with the GPU idle before the next call: Keras's per-batch Python between calls, untraced
    (``host="untraced"``) or an eager ``LogicalAnd`` op (``"busy"``); with ``"sync"``, the host instead blocks
    2 ms in a stream sync reading results back after the first 10 GEMMs. With ``function`` each step runs as a
    ``tf.function``: the ``train_function`` call and its ``__inference_train_function_1047`` concrete function."""
    from tests.helpers.xplane_writer import XSpaceTrace

    t = XSpaceTrace()
    us = 1000
    for s in range(6):
        t0 = s * 3000 * us
        t.step(s, t0, 3000 * us)
        if function:
            t.op("train_function", t0, 400 * us)
            t.op("EagerExecute: __inference_train_function_1047", t0 + 5 * us, 390 * us)
        if host == "sync":
            for i in range(10):
                t.kernel("volta_sgemm_128x64_nn", t0 + 30 * us + i * 50 * us, 50 * us, launch_ns=t0 + 10 * us + i * 15 * us)
            t.runtime("cudaStreamSynchronize", t0 + 400 * us, 2000 * us)
            for i in range(10):
                t.kernel("volta_sgemm_128x64_nn", t0 + 2420 * us + i * 50 * us, 50 * us, launch_ns=t0 + 2405 * us + i * us)
            continue
        for i in range(20):
            t.kernel("volta_sgemm_128x64_nn", t0 + 30 * us + i * 50 * us, 50 * us, launch_ns=t0 + 10 * us + i * 15 * us)
        if host == "busy":
            t.op("LogicalAnd:LogicalAnd", t0 + 1100 * us, 1800 * us)
    return t.write(path)


@pytest.mark.parametrize("host,cause", [("untraced", "untraced host time (launch queue empty)"),
                                        # an 1.8 ms eager op that makes no GPU call: CPU work, of the per-batch loop
                                        ("busy", "CPU work in ops that make no GPU call"),
                                        ("sync", "host synchronization")])
def test_ti001_keras_tf_function_is_told_steps_per_execution(tmp_path, host, cause):
    """The step already runs as a ``tf.function`` (``rulelib.in_use``: its ``__inference_`` function): the gaps are
    the Python between calls (or its reads of results), so the fix is more steps per call
    (``steps_per_execution``), never "wrap the step in `tf.function`", which is what it already does."""
    a = traceinsight.analyze(_keras_xplane(tmp_path / "keras.xplane.pb", function=True, host=host))
    assert a.framework == "tensorflow"
    (f,) = [x for x in a.findings if x.code == "TI001"]
    assert f.metrics["top_cause"] == cause
    assert list(f.fixes)[0] == "tensorflow"
    fx = f.fixes["tensorflow"]
    assert "already runs as a `tf.function`" in fx.text and "steps_per_execution" in fx.text
    assert "steps_per_execution=32" in fx.code
    assert "wrap the step in `tf.function`" not in fx.text and "def train_step(x, y)" not in fx.code
    if host != "sync":  # the Python between calls: a graph loop of N steps per call is the other way
        assert "tf.range" in fx.code and "per-batch loop" in fx.text
    else:
        assert "reads results between calls" in fx.text


def test_ti001_eager_tensorflow_is_told_to_wrap_the_step(tmp_path):
    """The same gaps without a ``tf.function`` in the trace (eager TensorFlow): wrapping the step is the advice."""
    (f,) = findings_of(_keras_xplane(tmp_path / "eager.xplane.pb", function=False), "TI001")
    assert f.metrics["top_cause"] == "untraced host time (launch queue empty)"
    fx = f.fixes["tensorflow"]
    assert "wrap the step in `tf.function`" in fx.text and "steps_per_execution" not in fx.text
    (g,) = findings_of(_keras_xplane(tmp_path / "eager_sync.xplane.pb", function=False, host="sync"), "TI001")
    assert g.metrics["top_cause"] == "host synchronization"
    assert "@tf.function" in g.fixes["tensorflow"].code and "already runs" not in g.fixes["tensorflow"].text


def test_a_graph_capture_shows_cuda_graphs_in_use(tmp_path):
    """A trace of a capture phase (vLLM's, Inductor's ``reduce-overhead``) has stream captures and graph
    instantiations but no replay yet: the program uses CUDA/HIP graphs all the same, so no fix tells it to."""
    from traceinsight.derive.derived import Derived
    from traceinsight.rulelib import in_use

    for calls, used in ((("hipStreamBeginCapture", "hipStreamEndCapture"), True), (("hipGraphInstantiateWithFlags",), True),
                        (("hipGraphLaunch",), True), (("hipMemcpyAsync",), False)):
        t = KinetoTrace()
        t.kernel("k", 100, 10, launch_us=90)
        for i, name in enumerate(calls):
            t.runtime(name, 10 + 20 * i, 5)
        assert ("graphs" in in_use(Derived(traceinsight.load(t.write(tmp_path / f"{calls[0]}.json"))))) is used, calls


def test_ti001_the_gap_is_named_by_the_thread_that_held_it(tmp_path):
    """A runtime launching from a thread of its own (JAX's PJRT stream threads): in each 1 ms gap the launcher holds
    only its 10 µs launch call, while the dispatching thread runs an op for 900 µs. The evidence names the thread
    that held the gap and its op, not the launcher's call."""
    t = KinetoTrace()
    for s in range(4):
        t0 = s * 2000.0
        t.step(s, t0, 2000.0, )
        t.cpu_op("my_dispatch", t0 + 1050.0, 900.0, tid=1)
        t.kernel("k", t0 + 10, 1000.0, launch_us=t0 + 1, tid=2)
    (f,) = findings_of(t.write(tmp_path / "t.json"), "TI001")
    acts = f.evidence["host_activity"].tolist()
    assert acts and all(a.startswith("thread 1: ") and "my_dispatch" in a for a in acts), acts


def test_ti001_graph_replays_without_compile_are_told_the_code_between_them(tmp_path):
    """A serving engine replaying its own CUDA graphs (no torch.compile in the trace), with the host busy 1 ms in
    its scheduler between replays: capturing graphs is what it already does, so the fix is the code between them."""
    t = KinetoTrace()
    for s in range(4):
        t0 = s * 2000.0
        t.step(s, t0, 2000.0)
        t.kernel("fused_decode_kernel", t0 + 20, 800.0, launch_us=t0 + 5, launch_name="cudaGraphLaunch")
        t.cpu_op("scheduler.prepare", t0 + 850.0, 1100.0)
    (f,) = findings_of(t.write(tmp_path / "t.json"), "TI001")
    fx = f.fixes["pytorch"]
    assert "already runs as CUDA/HIP graph replays" in fx.text and "torch.compile" not in fx.code
