"""TI030: GPU memory left unused on a GPU that has work to spare: the batch (or the work per launch) could grow."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.derive.memory import fmt_bytes
from traceinsight.rule_api import Context, Fix, Location, Option, Rule, Severity


class MemoryHeadroom(Rule):
    code = "TI030"
    name = "memory-headroom"
    category = "compute"
    severity = Severity.INFO
    lifecycle = "preview"
    #: a memory finding is a risk or an opportunity, not time measured on the timeline: its severity is the rule's
    graded = False
    #: a larger batch makes a step longer and a sample cheaper: the gain is throughput, never a step-time saving
    per_sample = True
    summary = "Peak GPU memory is far below capacity while the GPU is under-busy or runs small kernels: a larger batch fits."
    why = """
    Batch size is one of the main levers on GPU usage: with a small batch each kernel has too little work to fill
    the GPU and the fixed per-step costs (launches, syncs, the optimizer, the Python loop) are paid for few samples.
    How far it can grow is set by memory. When the peak the caching allocator ever reserved is a small share of the
    device, there is room, and on a GPU that is idle much of the time or runs small kernels that room is the
    cheapest speed-up there is (DLProf's "memory underutilized" advice and the PyTorch TensorBoard plugin's
    "increase batch size" rule make the same call).
    """
    definition = """
    Per GPU with memory events and a known capacity (kineto `deviceProperties.totalGlobalMem`, Nsight Systems
    `TARGET_INFO_GPU.totalMemory`, XPlane `memory_size`): the **peak** is the largest reserved level (allocated
    where reserved is not recorded). Reported when the peak is at most `max_peak_share_pct` (default **50 %**,
    DLProf's memory-underutilisation cut) of capacity **and** the GPU is busy less than `max_busy_pct` (default
    **80 %**) of its window or its median kernel is shorter than `small_kernel_us` (default **20 µs**, where launch
    cost is a large part of a kernel's time).

    **Usable memory** = capacity × (1 − `margin_pct` / 100) − `margin_gib` (defaults **10 %** and **1.5 GiB**):
    reserved memory does not include the CUDA context (300-600 MiB), NCCL's buffers and channels (hundreds of MiB
    per communicator) or cuBLAS/cuDNN workspaces, so they are set aside. **Batch-bound memory** = peak allocated −
    the lowest allocated level of the window (what stays allocated throughout: weights, gradients, optimizer
    state). The batch can grow about `1 + (usable − peak) / batch-bound` times; the card states that arithmetic and
    caps it at `max_factor` (default **8×**: beyond it activations, workspaces and the kernels chosen change too
    much for a memory-only estimate). Files whose
    allocator totals were rebuilt from deltas (2021 kineto) are skipped: their level before the profile is unknown.
    **Price**: the what-if replay at the suggested batch, an estimate with its assumptions stated on the card:
    GPU tasks of at least `small_kernel_us` take `factor` times as long (their work scales with the batch), shorter
    launch-bound ones keep their time, and the host's work per step, launches and waits keep theirs; the card gives
    the step time for `factor` times the samples and the time per sample it comes to (`metrics["what_if_per_sample_ratio"]`,
    `["what_if_throughput_gain"]`), and the title says it. Without steps to replay, the simpler model window /
    (busy + idle / factor) (`metrics["throughput_gain_simple"]`, only then). The finding claims no step time: its
    gain is per sample, so its card carries no step figure (impact 0, severity info).
    """
    fix_pytorch = Fix(
        "Raise the batch size (or the micro-batch under gradient accumulation) towards the factor reported, then "
        "re-profile; scale the learning rate with it (linear scaling, with warm-up). For inference, batch more "
        "requests per forward pass.",
        """
        loader = DataLoader(ds, batch_size=256 * 2, num_workers=8, pin_memory=True)  # was 256
        # check the new peak: torch.cuda.max_memory_reserved() / torch.cuda.get_device_properties(0).total_memory
        """,
    )
    fix_tensorflow = Fix(
        "Raise the global batch size in `dataset.batch(...)` (per replica × replicas under a strategy) towards the "
        "factor reported; TensorFlow reserves memory as it needs it when `set_memory_growth` is on, so the peak in "
        "the trace is the real need.",
        """
        ds = ds.batch(256 * 2).prefetch(tf.data.AUTOTUNE)  # was 256
        """,
    )
    fix_jax = Fix(
        "Raise the batch size towards the factor reported and re-profile, scaling the learning rate with it. JAX "
        "preallocates 75 % of the GPU at start-up (`XLA_PYTHON_CLIENT_MEM_FRACTION`), so judge the room on the memory "
        'in use, not on what was preallocated.',
        """
        global_batch = per_device_batch * jax.device_count()   # raise per_device_batch towards the factor
        lr = base_lr * global_batch / base_batch                # linear scaling, with warm-up
        """,
    )
    fix_cuda = Fix(
        "Give each launch more work: process more items per kernel (batch the inputs) so the grid fills the GPU, "
        "using the device memory that is free.",
        """
        size_t free_b, total_b; cudaMemGetInfo(&free_b, &total_b);
        int batch = min(max_batch, (int)((free_b - margin_bytes) / bytes_per_item));
        process<<<(batch * items + 255) / 256, 256>>>(d_in, d_out, batch);
        """,
    )

    max_peak_share_pct = Option(50.0, "Report when the peak is at most this % of capacity.")
    max_busy_pct = Option(80.0, "...and the GPU is busy less than this % of its window...")
    small_kernel_us = Option(20.0, "...or its median kernel is shorter than this (µs).")
    margin_pct = Option(10.0, "Share of capacity set aside for what reserved memory does not show (%).")
    margin_gib = Option(1.5, "Fixed amount set aside for the CUDA context, NCCL and library workspaces (GiB).")
    max_factor = Option(8.0, "Cap on the reported batch growth factor.")

    def check(self, ctx: Context):
        mem = ctx.views.memory
        util = ctx.views.utilization
        hits = []
        for d in mem.devices:
            if not d.capacity or not d.peak or d.relative or d.peak_share is None:
                continue
            if d.peak_share * 100.0 > self.max_peak_share_pct:
                continue
            u = util[(util["rank"].to_numpy() == d.rank) & (util["device"].to_numpy() == d.device)]
            busy = float(u["busy_pct"].iloc[0]) if len(u) else None
            # only the kernels' durations are read: taken as an array, not as rows of the frame
            k_dur = ctx.views.array("kernels", "dur_ns")[(ctx.views.array("kernels", "rank") == d.rank) & (ctx.views.array("kernels", "device") == d.device)]
            median_us = float(np.median(k_dur)) / 1e3 if len(k_dur) else None
            under_busy = busy is not None and busy < self.max_busy_pct
            small = median_us is not None and median_us < self.small_kernel_us
            if not (under_busy or small):
                continue
            usable = d.capacity * (1 - self.margin_pct / 100.0) - self.margin_gib * (1 << 30)
            mem_rows = ctx.timeline.memory
            allocated = mem_rows["allocated"].to_numpy(dtype=float)[(mem_rows["rank"].to_numpy() == d.rank) & (mem_rows["device"].to_numpy() == d.device)]
            low = float(np.nanmin(allocated)) if len(allocated) else 0.0
            peak_alloc = d.peak_allocated if d.peak_allocated is not None else d.peak
            batch_bound = max(peak_alloc - low, 1.0)
            spare = usable - d.peak
            if spare <= 0:
                continue
            by_memory = 1.0 + spare / batch_bound  # what the free memory allows, before the cap
            factor = min(by_memory, self.max_factor)
            if factor < 1.5:
                continue
            # priced by a simple model: the GPU's work grows with the batch, its idle per step (launch gaps, syncs,
            # host work) does not, so the time per sample falls from window to busy + idle / factor
            gain = None
            if len(u) and float(u["window_ns"].iloc[0]) > 0:
                win, bsy = float(u["window_ns"].iloc[0]), float(u["busy_ns"].iloc[0])
                gain = win / (bsy + (win - bsy) / factor)
            hits.append({"d": d, "busy": busy, "median_us": median_us, "under_busy": under_busy, "small": small,
                         "usable": usable, "low": low, "batch_bound": batch_bound, "spare": spare, "factor": factor, "gain": gain,
                         "by_memory": by_memory})
        for rank in sorted({h["d"].rank for h in hits}):
            group = [h for h in hits if h["d"].rank == rank]
            yield self._finding(ctx, min(group, key=lambda h: h["factor"]), group)

    def _finding(self, ctx: Context, h: dict, group: list[dict]):
        """One finding per rank: the GPU with the least room speaks for the rank's GPUs (evidence lists them all)."""
        d, factor, gain, busy, median_us = h["d"], h["factor"], h["gain"], h["busy"], h["median_us"]
        why = (f"the GPU is busy only {busy:.0f} % of its window" if h["under_busy"] else "") + \
              (" and " if h["under_busy"] and h["small"] else "") + \
              (f"its median kernel takes {median_us:.1f} µs" if h["small"] else "")
        many = len(group) > 1
        capped = h["by_memory"] > factor  # a factor at the cap says so: memory alone would allow more, not promised
        arithmetic = (f"1 + {fmt_bytes(h['spare'])} / {fmt_bytes(h['batch_bound'])} = {h['by_memory']:,.1f}×"
                      + (f", capped at {factor:.1f}× (`max_factor`: beyond it activations, workspaces and the kernels "
                         "themselves change too much for a memory-only estimate)" if capped else ""))
        price = None
        try:
            price = ctx.what_if_batch(factor, int(self.small_kernel_us * 1e3))
        except Exception as exc:  # a model failure must not take the finding down; say so on it
            price = {"error": f"{type(exc).__name__}: {exc}"}
        priced = price is not None and "error" not in price and price.get("per_sample_ratio")
        where = f"rank {d.rank}, {len(group)} GPUs" if many else f"GPU {d.device}"
        evidence = pd.DataFrame([{"rank": g["d"].rank, "device": g["d"].device, "capacity_gib": round(g["d"].capacity / 2**30, 2),
                                  "peak_gib": round(g["d"].peak / 2**30, 3), "held_throughout_gib": round(g["low"] / 2**30, 3),
                                  "usable_gib": round(g["usable"] / 2**30, 2), "busy_pct": None if g["busy"] is None else round(g["busy"], 1),
                                  "median_kernel_us": None if g["median_us"] is None else round(g["median_us"], 2),
                                  "batch_factor": round(g["factor"], 2)} for g in group])
        return ctx.finding(
            title=f"{where}: peak memory {fmt_bytes(d.peak)} of {fmt_bytes(d.capacity)} ({100 * d.peak_share:.0f} %): batch could grow ~{factor:.1f}×"
                  + (f" (the cap; memory alone allows ~{h['by_memory']:,.0f}×)" if capped else "")
                  + (f", throughput ×{round(price['throughput_gain'], 4):.2f} (modelled)" if priced else
                     f", throughput up to ×{gain:.2f} (modelled)" if gain else ""),
            message=(
                (f"All {len(group)} GPUs of rank {d.rank} have room; the tightest, GPU {d.device}: " if many else "")
                + f"the peak {'reserved' if d.peak_reserved is not None else 'allocated'} memory on rank {d.rank} GPU {d.device} is "
                f"{fmt_bytes(d.peak)}, {100 * d.peak_share:.0f} % of its {fmt_bytes(d.capacity)}, while {why}. Setting aside "
                f"{self.margin_pct:.0f} % + {self.margin_gib:g} GiB for the CUDA context, NCCL and library workspaces leaves "
                f"{fmt_bytes(h['spare'])} unused; the memory that scales with the batch is about {fmt_bytes(h['batch_bound'])} "
                f"(peak allocated minus the {fmt_bytes(h['low'])} held throughout), so the batch could grow about {arithmetic}."
                + (f" Priced by the what-if replay at {factor:.1f}× the batch (an estimate: kernels of {self.small_kernel_us:g} µs "
                   f"or longer take {factor:.1f}× as long, shorter launch-bound ones and the host's work per step keep their "
                   f"time): a step takes {price['step_ns'] / 1e6:.2f} ms instead of {price['baseline_step_ns'] / 1e6:.2f} ms for "
                   f"{factor:.1f}× the samples, {100 * price['per_sample_ratio']:.0f} % of today's time per sample "
                   f"(throughput ×{price['throughput_gain']:.2f})." if priced else
                   (f" If the GPU's idle time per step stayed as it is while its work grew with the batch, throughput would rise "
                    f"up to {gain:.2f}×." if gain else ""))
            ),
            evidence=evidence,
            metrics={"rank": d.rank, "device": d.device, "devices": [g["d"].device for g in group], "capacity_bytes": d.capacity,
                     "peak_bytes": int(d.peak), "peak_share_pct": round(100 * d.peak_share, 3), "usable_bytes": int(h["usable"]),
                     "batch_bound_bytes": int(h["batch_bound"]), "batch_factor": round(factor, 3),
                     "batch_factor_uncapped": round(h["by_memory"], 3), "batch_factor_capped": bool(capped),
                     "busy_pct": busy, "median_kernel_us": median_us,
                     **({"throughput_gain_simple": None if gain is None else round(gain, 3)} if not priced else {}),
                     "batch_factor_by_memory": round(h["by_memory"], 3), "batch_factor_cap": self.max_factor,
                     **({"what_if_step_ns": int(price["step_ns"]), "what_if_baseline_step_ns": int(price["baseline_step_ns"]),
                         "what_if_per_sample_ratio": round(price["per_sample_ratio"], 4),
                         "what_if_throughput_gain": round(price["throughput_gain"], 4)} if priced else {}),
                     **({"what_if_error": price["error"]} if price and "error" in price else {})},
            location=Location(rank=d.rank, device=None if many else d.device),
            key=f"{d.rank}" if many else f"{d.rank}:{d.device}",
        )
