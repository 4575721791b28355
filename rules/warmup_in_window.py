"""TI013: start-up work (lazy initialisation, autotuning, JIT compilation) sits inside the profiled window."""

from __future__ import annotations

import pandas as pd

from traceinsight.rule_api import Context, Fix, Location, Option, Rule, Severity, fmt_ns

from ._common import warmup_gaps


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
    A *warm-up gap* is an idle gap of a device that (a) ends before the rank's second step begins (or, without step
    markers, before a tenth of the device's GPU operations have run), and (b) either holds host start-up calls
    (`cudaMalloc`, `cuModuleLoad*`, `cuLibraryLoad*`, `cudaGetDeviceProperties`, `cuGetProcAddress`,
    `cudnnFind*`/autotune, `cublasCreate`, compile/JIT ranges …) or, on a device that ran at least 10 GPU
    operations (enough for a steady state to compare with), is at least `dominant_pct` (default **50 %**) of the
    device's window by itself; it must also be at least `min_share_pct` (default **5 %**) of that window.
    Warm-up gaps are reported here and left out of TI001's idle (the steady-state figures); the finding's
    instances mark them for the time ledger's warm-up bucket. A trace-quality finding: never a performance
    verdict, not graded by cost.
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

    min_share_pct = Option(5.0, "A warm-up gap must be at least this % of its device's window.")
    dominant_pct = Option(50.0, "A first gap this large (% of the window) is warm-up even without start-up calls.")

    def check(self, ctx: Context):
        v = ctx.views
        w = warmup_gaps(v, min_share_pct=self.min_share_pct, dominant_pct=self.dominant_pct)
        if w.empty:
            return
        for (rank, device), g in w.groupby(["rank", "device"], sort=True):
            total = int(g["dur_ns"].sum())
            win = int(g["window_ns"].iloc[0])
            evidence = pd.DataFrame(
                {
                    "start_ms": (g["start_ns"] / 1e6).round(3),
                    "duration_ms": (g["dur_ns"] / 1e6).round(3),
                    "pct_of_window": (100.0 * g["dur_ns"] / max(win, 1)).round(1),
                    "start_up_calls": g["init_calls"].astype(str),
                }
            )
            multi = len(ctx.meta.ranks) > 1 or v.utilization["device"].nunique() > 1
            where = f"rank {int(rank)} GPU {int(device)}" if multi else f"GPU {int(device)}"
            yield ctx.finding(
                title=f"{where}: {fmt_ns(total)} of warm-up inside the window ({100.0 * total / max(win, 1):.0f} % of it)",
                message=(
                    f"{where} waited {fmt_ns(total)} in {len(g)} start-up gap(s) at the beginning of the profile "
                    f"({100.0 * total / max(win, 1):.1f} % of its {fmt_ns(win)} window): one-off initialisation, not the "
                    "steady-state loop. It is left out of the idle-gap figures; profile later steps to see the loop alone."
                ),
                evidence=evidence,
                instances=pd.DataFrame({"start_ns": g["start_ns"], "end_ns": g["end_ns"], "rank": g["rank"], "device": g["device"], "label": "warm-up"}),
                location=Location(rank=int(rank), device=int(device)),
                metrics={"warmup_ns": total, "window_ns": win, "gaps": int(len(g)), "warmup_pct": round(100.0 * total / max(win, 1), 3)},
                key=f"rank{int(rank)}-gpu{int(device)}",
            )
