"""TI013: start-up work (lazy initialisation, autotuning, JIT compilation) sits inside the profiled window."""

from __future__ import annotations

import pandas as pd

from traceinsight.rule_api import Context, Fix, Location, Option, Rule, Severity, fmt_ns

from traceinsight.rulelib.warmup import gap_warmup_ns, has_startup_calls, startup_call_gaps, warmup_by_gap


class WarmupInWindow(Rule):
    code = "TI013"
    name = "warm-up-in-window"
    category = "trace_quality"
    severity = Severity.WARNING
    summary = "The window starts with one-off warm-up (lazy init, cuDNN autotune, JIT compile), kept out of steady-state figures."
    why = """
    The first iteration of a program pays one-off costs: CUDA context and module loading, memory-pool growth,
    cuDNN/cuBLAS autotuning (`torch.backends.cudnn.benchmark`), XLA/nvFuser/Triton compilation. Inside a
    profile they look like a huge idle gap and would turn a healthy run into "GPU idle 60 %". Such a gap says the
    profile started too early, not that the steady-state loop has a problem.
    """
    definition = """
    Warm-up has one home, the time ledger and its steady-state model (`traceinsight.derive.steady`): it books idle time
    as `idle_warmup` while the host is inside one-time work, wherever it sits in the window: the first call of an
    op or runtime call lasting at least 1 ms and 10 times the median of its later calls (`WARMUP_MIN_NS`,
    `WARMUP_RATIO`: cuDNN autotuning inside the first convolution, lazy library init), and the same per input
    shape where shapes are recorded, for a shape that comes back at least twice on its rank (autotuning searches once per
    shape: every convolution of a ResNet's first step); the first launch of a
    kernel whose launch call takes at least 1 ms and 10 times the rank's median launch (lazy module loading);
    named set-up calls (`cuModuleLoad*`, `cuLibraryLoad*`, `cudnnCreate`/`cudnnFind*`, `cublasCreate`, nvrtc
    and compile ranges, graph capture from `cudaStreamBeginCapture` to `EndCapture`, `cudaGraphInstantiate`);
    `cudaMalloc` before the rank's second step (allocator growth); a blocking call that begins before the rank's
    first traced launch (it waits on work queued before the window); with two steps or more, everything before
    the first step begins (program start-up in a whole-program capture: imports, model set-up); and leading
    steps each twice the median of
    the steps after them (`WARMUP_FIRST_STEP_RATIO`). This rule reports a device whose ledger warm-up is at least
    `min_share_pct` (default **5 %**) of its window, with the gaps that hold it and the one-time work inside each.
    That time is what the verdict sets aside, TI001 leaves out of its idle and the what-if replay leaves out of
    its baseline; when it fills the window (`steady.judgement`), the verdict is "cannot judge this window" and
    performance findings stay at info.

    It also names a gap at the head of the device's run (before the rank's second step, or without steps before a
    tenth of its GPU operations) that holds other start-up calls (`cudaFree`, `cudaStreamCreate` …) and is at
    least `min_share_pct` of the window, when the ledger booked under half of it as warm-up: that time stays in
    the idle figures (TI001, the verdict), and the finding says so. Either way it means the profile started too
    early. A trace-quality finding: never a performance verdict, not graded by cost.
    """
    fix_pytorch = Fix(
        "Start the profiler after a few iterations: `schedule(wait=1, warmup=2, active=5)` skips the first steps, "
        "which pay for lazy init, cuDNN autotuning and compilation.",
        """
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
            schedule=torch.profiler.schedule(wait=1, warmup=2, active=5),
        ) as prof:
            for batch in loader:
                train_step(batch)
                prof.step()
        """,
    )
    fix_tensorflow = Fix(
        "Profile later batches: `TensorBoard(profile_batch=(10, 15))` skips tracing, autotuning and XLA compilation.",
        """
        tb = tf.keras.callbacks.TensorBoard(log_dir, profile_batch=(10, 15))
        """,
    )
    fix_jax = Fix(
        "Profile after the first steps: a jitted function compiles on its first call (and autotunes its kernels), so "
        'run a few steps and `jax.block_until_ready` before `jax.profiler.start_trace`.',
        """
        for _ in range(3):
            state, loss = train_step(state, batch)     # compile and warm up
        jax.block_until_ready(state)
        jax.profiler.start_trace("/tmp/trace")
        """,
    )

    fix_cuda = Fix(
        "Start the capture after the first iterations, which pay for context creation, module loading, "
        "cuBLAS/cuDNN handle creation and autotuning: `nsys profile --capture-range=cudaProfilerApi "
        "--capture-range-end=stop` with `cudaProfilerStart()` after warm-up (or `--capture-range=nvtx`), and an "
        "NVTX range around each iteration.",
        """
        for (int it = 0; it < 3; ++it) step();        // context, module loading, cublasCreate, cudnnFind*: not captured
        cudaDeviceSynchronize();
        cudaProfilerStart();                          // nsys profile --capture-range=cudaProfilerApi --capture-range-end=stop
        for (int it = 0; it < 5; ++it) { nvtxRangePushA("step"); step(); nvtxRangePop(); }
        cudaDeviceSynchronize();
        cudaProfilerStop();
        """,
    )

    min_share_pct = Option(5.0, "A device's warm-up, or a head gap with start-up calls, must be at least this % of its window.", max=100)

    def check(self, ctx: Context):
        v = ctx.views
        util = v.utilization
        if util.empty:
            return
        if self.min_share_pct > 0 and not gap_warmup_ns(v).any() and not has_startup_calls(v):
            return  # no gap holds warm-up and no start-up call was made: nothing to report (no frame is built)
        warm = warmup_by_gap(v)
        calls = startup_call_gaps(v, min_share_pct=self.min_share_pct)
        calls = calls[calls["warmup_ns"].to_numpy() * 2 < calls["dur_ns"].to_numpy()]  # not already the ledger's
        if warm.empty and calls.empty and self.min_share_pct > 0:
            return  # no device has warm-up or start-up calls to report (the loop below would pass over every one)
        multi = len(ctx.meta.ranks) > 1 or util["device"].nunique() > 1
        for u in util.sort_values(["rank", "device"]).itertuples(index=False):
            rank, device, win = int(u.rank), int(u.device), max(int(u.window_ns), 1)
            w = warm[(warm["rank"].to_numpy() == rank) & (warm["device"].to_numpy() == device)]
            c = calls[(calls["rank"].to_numpy() == rank) & (calls["device"].to_numpy() == device)]
            total = int(w["warmup_ns"].sum())
            booked = total * 100.0 >= self.min_share_pct * win
            if not booked and c.empty:
                continue
            counted = int(c["dur_ns"].sum())
            where = f"rank {rank} GPU {device}" if multi else f"GPU {device}"
            rows = []
            if booked:
                for g in w.nlargest(10, "warmup_ns").sort_values("start_ns").itertuples(index=False):
                    rows.append({"start_ms": round(g.start_ns / 1e6, 3), "duration_ms": round(g.dur_ns / 1e6, 3), "warmup_ms": round(g.warmup_ns / 1e6, 3),
                                 "pct_of_window": round(100.0 * g.warmup_ns / win, 1), "one_time_work": g.why, "set_aside": True})
            for g in c.itertuples(index=False):
                rows.append({"start_ms": round(g.start_ns / 1e6, 3), "duration_ms": round(g.dur_ns / 1e6, 3), "warmup_ms": round(g.warmup_ns / 1e6, 3),
                             "pct_of_window": round(100.0 * g.dur_ns / win, 1), "one_time_work": g.init_calls, "set_aside": False})
            spans = [(int(g.start_ns), int(g.end_ns), "warm-up") for g in (w.itertuples(index=False) if booked else ())]
            spans += [(int(g.start_ns), int(g.end_ns), "start-up calls (counted as idle)") for g in c.itertuples(index=False)]
            spans.sort()
            instances = pd.DataFrame({"start_ns": [s for s, _, _ in spans], "end_ns": [e for _, e, _ in spans], "rank": rank, "device": device, "label": [l for _, _, l in spans]})
            if booked:
                title = f"{where}: {fmt_ns(total)} of warm-up inside the window ({100.0 * total / win:.0f} % of it)"
                message = (
                    f"{where} waited {fmt_ns(total)} on one-time work in {len(w)} gap(s) ({100.0 * total / win:.1f} % of its "
                    f"{fmt_ns(win)} window): the first call of an op far slower than its later calls, or a first step far "
                    "longer than the rest. It is set aside: left out of the verdict's shares and of TI001's idle. Profile "
                    "later steps to see the steady-state loop alone."
                )
                if counted:
                    message += f" Start-up calls in {fmt_ns(counted)} more at the start of the window have no later repetition to measure; that time stays in the idle figures."
            else:
                title = f"{where}: start-up calls in {fmt_ns(counted)} at the start of the window ({100.0 * counted / win:.0f} % of it), counted as idle"
                message = (
                    f"{where} sat idle {fmt_ns(counted)} at the start of its {fmt_ns(win)} window ({100.0 * counted / win:.1f} %) while the "
                    f"host made one-off start-up calls ({'; '.join(c['init_calls'])}). Made once, they have no later call to be "
                    "measured against, so the time ledger cannot set their time aside as warm-up: it stays in the idle figures "
                    "(TI001, the verdict). Profile later steps to see the steady-state loop alone."
                )
            yield ctx.finding(
                title=title,
                message=message,
                evidence=pd.DataFrame(rows),
                instances=instances,
                location=Location(rank=rank, device=device),
                metrics={
                    "warmup_ns": total if booked else 0,
                    "window_ns": int(u.window_ns),
                    "gaps": int(len(w)) if booked else 0,
                    "warmup_pct": round(100.0 * total / win, 3) if booked else 0.0,
                    "startup_counted_as_idle_ns": counted,
                },
                key=f"rank{rank}-gpu{device}",
            )
