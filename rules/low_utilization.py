"""TI010: the verdict — a GPU is idle most of its active window; the other rules say why."""

from __future__ import annotations

import pandas as pd

from traceinsight.rule_api import Context, Fix, Location, Option, Rule, Severity, fmt_ns


class LowGpuUtilization(Rule):
    code = "TI010"
    category = "gpu_idle"
    name = "low-gpu-utilization"
    severity = Severity.INFO
    summary = "A GPU is busy less than half of its active window (a summary of the verdict; shown only with --min-impact 0)."
    why = """
    This is the symptom every other rule explains: the share of wall time in which at least one kernel, copy or
    memset runs on the device. Below 50 % the device spends more time waiting than working, and the idle time
    is the upper bound of what fixing the host side (input pipeline, syncs, launch overhead, stragglers) can
    win. The finding names the device and its idle time; the specific causes come from TI001-TI009.
    """
    definition = """
    Per (rank, device), from ``views.utilization``: window = first to last GPU activity, busy = union of
    kernels/copies/memsets over all streams, busy % = busy / window. Reported when busy % <
    ``max_busy_pct`` = **50 %** (tb_plugin's "low utilization" recommendation; also nsys ``gpu_time_util``'s
    default ``threshold=50``) and the window is at least ``min_window_us`` = **1000 µs** (shorter windows say
    little about a workload). One finding lists every low device.

    **No double counting**: the finding's ``impact_ns`` is **0** on purpose. Its idle time is the sum of what
    TI001 (gaps), TI002 (syncs), TI005 (input) and others already report as their time saved, so adding it to
    the "sorted by time saved" list would count the same nanoseconds twice. The idle time is in
    ``metrics["idle_ns"]`` and in the title/message; the finding sorts after those with a saving.
    Because it saves nothing on its own, the common severity scale (impact as a share of the GPU window) leaves
    it out of the report by default: the verdict already states the busy %. It appears, at **info**, when
    findings below the floor are asked for (``--min-impact 0`` / ``min_impact = 0``).
    """
    fix_pytorch = Fix(
        "Find what the GPU waits for — see the other findings (input pipeline, host syncs, small kernels, "
        "stragglers). Generic levers: a larger batch, overlapping data loading (`num_workers`, `pin_memory`), "
        "removing `.item()`/`.cpu()` syncs from the step, and `torch.compile` / CUDA graphs for launch-bound models.",
        """
        loader = DataLoader(ds, batch_size=256, num_workers=8, pin_memory=True, persistent_workers=True)
        model = torch.compile(model)                 # fewer, larger kernels; less Python per step
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            loss = step(x, y)                        # no loss.item() here: log every N steps instead
        """,
    )
    fix_tensorflow = Fix(
        "Check the TensorBoard Profiler overview/input-pipeline pages and the other findings; generic levers are "
        "`tf.function` (no eager per-op dispatch), XLA, a prefetching tf.data pipeline and a larger batch.",
        """
        ds = ds.map(f, num_parallel_calls=tf.data.AUTOTUNE).batch(256).prefetch(tf.data.AUTOTUNE)
        model.compile(optimizer="adam", loss=loss, jit_compile=True, steps_per_execution=32)
        """,
    )
    fix_jax = Fix(
        "Find what the GPU waits for in the other findings (input, host syncs, small kernels). Generic levers: jit the "
        "whole step (no op-by-op dispatch), a larger batch, the next batch put on the device while this step runs, and "
        'no host conversions (`float(loss)`, `np.asarray`) inside the loop.',
        """
        train_step = jax.jit(train_step, donate_argnums=(0,))
        nxt = jax.device_put(next(it))                  # the copy runs while the current step computes
        for _ in range(steps):
            batch, nxt = nxt, jax.device_put(next(it))
            state, loss = train_step(state, batch)
        """,
    )

    fix_cuda = Fix(
        "Find what the GPU waits for in the other findings (host syncs, copies, small kernels). Generic levers: more "
        "work per launch, copies from pinned memory with `cudaMemcpyAsync` overlapping kernels on another stream, no "
        "`cudaDeviceSynchronize` inside the loop (events instead), and a CUDA graph for a repeated launch sequence.",
        """
        cudaMallocHost(&h_buf, bytes);                               // pinned: the async copy really is async
        cudaMemcpyAsync(d_next, h_buf, bytes, cudaMemcpyHostToDevice, copy);
        kernel<<<grid, block, 0, compute>>>(d_cur, d_out);          // overlaps the copy
        cudaEventRecord(done, compute);                              // not cudaDeviceSynchronize() every iteration
        """,
    )

    max_busy_pct = Option(50.0, "Report devices busy less than this % of their active window (tb_plugin: 50 %).", max=100)
    min_window_us = Option(1000.0, "Ignore devices whose active window is shorter than this (µs).")

    def check(self, ctx: Context):
        u = ctx.views.utilization
        if u.empty:
            return
        v = ctx.views
        hit = (v.array("utilization", "busy_pct") < ctx.options["max_busy_pct"]) & (v.array("utilization", "window_ns") >= ctx.options["min_window_us"] * 1e3)
        if not hit.any():
            return
        low = u[hit]
        idle = int(low["idle_ns"].sum())
        window = int(low["window_ns"].sum())
        busy_pct = 100.0 * float(low["busy_ns"].sum()) / max(window, 1)
        worst = low.sort_values("busy_pct").iloc[0]
        evidence = pd.DataFrame(
            {
                "rank": low["rank"].astype(int),
                "device": low["device"].astype(int),
                "window_ms": low["window_ns"] / 1e6,
                "busy_ms": low["busy_ns"] / 1e6,
                "idle_ms": low["idle_ns"] / 1e6,
                "busy_pct": low["busy_pct"].astype(float).round(2),
            }
        ).sort_values("busy_pct").reset_index(drop=True)
        sev = Severity.INFO
        where = (
            f"rank {int(worst['rank'])} device {int(worst['device'])}"
            if len(low) == 1
            else f"{len(low)} of {len(u)} GPUs (lowest: rank {int(worst['rank'])} device {int(worst['device'])} at {float(worst['busy_pct']):.1f}%)"
        )
        yield ctx.finding(
            title=f"GPU busy only {busy_pct:.1f}% of its active window ({fmt_ns(idle)} idle)",
            message=(
                f"{where}: busy {busy_pct:.1f}% of {fmt_ns(window)}, idle {fmt_ns(idle)}. This is the overall verdict, "
                f"not an extra saving: the causes and their time saved are in the other findings (TI001 idle gaps, "
                f"TI002 host syncs, TI003 tiny kernels, TI005 input pipeline, TI006 pageable copies, TI009 stragglers)."
            ),
            impact_ns=0,
            evidence=evidence,
            severity=sev,
            location=Location(rank=int(worst["rank"]), device=int(worst["device"])) if len(low) == 1 else Location(),
            metrics={
                "busy_pct": round(busy_pct, 3),
                "idle_ns": idle,
                "window_ns": window,
                "devices_low": int(len(low)),
                "devices_total": int(len(u)),
                "min_busy_pct": round(float(worst["busy_pct"]), 3),
            },
            key="low-utilization",
        )
