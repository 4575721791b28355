"""TI006: host<->device copies from pageable memory, which are slow and silently synchronous."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.vocab.gpus import pinned_link_gbs
from traceinsight.rule_api import Context, Fix, Option, Rule, Severity, fmt_ns

from traceinsight.vocab.masks import kind_mask, name_mask
from traceinsight.rulelib.gaps import host_starved_gaps
from traceinsight.vocab.patterns import ASYNC_COPY_CALL


class PageableMemcpy(Rule):
    code = "TI006"
    category = "copy"
    name = "pageable-memcpy"
    severity = Severity.WARNING
    summary = "Host-device copies use pageable (not page-locked) host memory."
    why = """
    The GPU's copy engines can only DMA from page-locked memory. A copy from pageable memory is staged by the
    driver through a pinned bounce buffer in chunks, which roughly halves bandwidth, and — the bigger cost —
    makes ``cudaMemcpyAsync`` behave synchronously: the host thread blocks until the copy is done, so it cannot
    queue the next kernels and the copy cannot overlap compute (Nsight Systems' ``cuda_memcpy_async`` rule:
    "This leads to low GPU utilization").
    """
    definition = """
    Rows of kind ``memcpy`` whose ``pageable`` column is True (kineto: ``Pageable`` in the copy name; Nsight
    Systems: ``srcKind`` or ``dstKind`` = 0, the same test ``nsys analyze cuda_memcpy_async`` applies).

    **Pinned reference bandwidth** per direction: the achieved bandwidth (total bytes / total time) of the
    same trace's pinned copies of that direction that are at least ``ref_min_bytes`` (1 MiB, below which copies
    are latency-bound); when the trace has none, ``pinned_gbps`` when set, else what the GPU's PCIe generation
    sustains pinned (``traceinsight.vocab.gpus.pinned_link_gbs``: **12 GB/s** for PCIe 3.0 parts and unknown GPUs,
    **24** for Ampere/Ada on PCIe 4.0, **48** for Hopper and later on PCIe 5.0; a lower bound on NVLink-C2C boards,
    so the impact is an underestimate there). A flat PCIe 3.0 figure hid an 18 GB/s pageable copy on an H200.

    **Impact, on the GPU's clock** = the copies' own extra GPU time, Σ max(0, duration − (``latency_us`` +
    bytes / reference bandwidth)), plus the GPU idle their *async* API calls caused: an async call made
    blocking by pageable memory holds the host, and when the GPU runs dry meanwhile, the idle gap that begins
    while the call is blocked is lost too, up to the call's own duration (the host would have queued the next
    work that much sooner), and only when the work ending the gap was launched after it began (otherwise the GPU
    waited on a GPU-side dependency, not on the host). The host's blocked time itself is not the
    cost: while it waits, the GPU usually still runs queued work (blocking synchronous `cudaMemcpy` calls are
    TI002's). The async calls forced synchronous are counted in ``metrics["async_calls"]``.

    Reported when the pageable copies take at least ``min_total_us`` = **100 µs** in total (a floor that keeps
    one-off 4-byte scalar reads out), graded on the common scale (impact as a share of the GPU window).
    """
    fix_pytorch = Fix(
        "Allocate host tensors in page-locked memory and copy them asynchronously: `pin_memory=True` in the "
        "DataLoader (its pin-memory thread does it for every batch), `tensor.pin_memory()` for tensors you "
        "build yourself (pin once, reuse the buffer), and `non_blocking=True` on `.to()`/`.cuda()`. For "
        "device-to-host results, copy into a pinned buffer instead of calling `.cpu()`.",
        """
        loader = DataLoader(ds, batch_size=256, num_workers=8, pin_memory=True)
        for x, y in loader:
            x = x.to("cuda", non_blocking=True)

        staging = torch.empty(shape, dtype=torch.float32, pin_memory=True)  # reuse every step
        staging.copy_(cpu_batch); gpu_batch = staging.to("cuda", non_blocking=True)

        host_out = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
        host_out.copy_(out, non_blocking=True); torch.cuda.current_stream().synchronize()
        """,
    )
    fix_tensorflow = Fix(
        "Let TensorFlow stage input batches for you: end the tf.data pipeline with prefetching to the GPU so the "
        "runtime copies from its own pinned buffers ahead of the step, instead of feeding NumPy arrays per step.",
        """
        ds = ds.batch(256).prefetch(tf.data.AUTOTUNE)
        ds = ds.apply(tf.data.experimental.prefetch_to_device("/gpu:0"))
        # or with a strategy: strategy.experimental_distribute_dataset(ds) (prefetches to each device)
        """,
    )
    fix_jax = Fix(
        "Put input on the device ahead of the step instead of passing NumPy arrays to every call: `jax.device_put` the "
        "next batch while the current step runs (it returns at once), and keep results on the device instead of "
        'converting them with `np.asarray` every step.',
        """
        it = iter(ds)
        nxt = jax.device_put(next(it))                 # the copy starts now
        for _ in range(steps):
            batch, nxt = nxt, jax.device_put(next(it))
            state, loss = train_step(state, batch)
        """,
    )

    fix_cuda = Fix(
        "Copy from page-locked host memory: allocate the buffers with `cudaMallocHost` (or pin existing ones "
        "with `cudaHostRegister`) and use `cudaMemcpyAsync` on a non-default stream, so the copy runs at full "
        "PCIe/NVLink speed and overlaps kernels instead of being staged through a driver bounce buffer.",
        """
        float *h_a;
        cudaMallocHost(&h_a, bytes);              // was: malloc(bytes)
        cudaStream_t s; cudaStreamCreate(&s);
        cudaMemcpyAsync(d_a, h_a, bytes, cudaMemcpyHostToDevice, s);
        vecAdd<<<grid, block, 0, s>>>(d_a, d_b, d_c, n);
        cudaMemcpyAsync(h_c, d_c, bytes, cudaMemcpyDeviceToHost, s);
        cudaStreamSynchronize(s);
        cudaFreeHost(h_a);
        """,
    )

    min_total_us = Option(100.0, "Report when pageable copies take at least this long in total (µs).")
    pinned_gbps = Option(0.0, "Pinned bandwidth assumed when the trace has no large pinned copy of that direction (GB/s); 0: by the GPU's PCIe generation (12, 24 or 48).")
    ref_min_bytes = Option(1 << 20, "Pinned copies at least this large (bytes) set the reference bandwidth.")
    latency_us = Option(2.0, "Fixed per-copy cost a pinned copy would still pay (µs).")

    def check(self, ctx: Context):
        ev = ctx.views.gpu_activity
        is_copy = kind_mask(ev["kind"], ("memcpy",))  # on the kind codes
        if not is_copy.any():
            return
        copies = ev[is_copy]
        pageable = copies["pageable"].to_numpy(dtype=bool)
        pg = copies[pageable]
        total = int(pg["dur_ns"].sum()) if len(pg) else 0
        if total < ctx.options["min_total_us"] * 1e3 or pg.empty:
            return

        # Reference bandwidth (bytes per ns == GB/s) per direction from large pinned copies in the same trace.
        pinned = copies[~pageable]
        pinned = pinned[(pinned["bytes"] >= ctx.options["ref_min_bytes"]).to_numpy() & (pinned["dur_ns"] > 0).to_numpy()]
        ref = pinned.groupby("copy_kind", observed=True).agg(b=("bytes", "sum"), t=("dur_ns", "sum"))
        ref_gbps = (ref["b"] / ref["t"]).to_dict() if not ref.empty else {}
        direction = pg["copy_kind"].astype(str).fillna("other").to_numpy()
        assumed = float(ctx.options["pinned_gbps"]) or min(
            (pinned_link_gbs(d.compute_capability, d.vendor, d.name) for d in ctx.meta.devices), default=pinned_link_gbs(None))
        bw = np.array([ref_gbps.get(d, assumed) for d in np.unique(direction)])
        bw_of = dict(zip(np.unique(direction), bw))
        row_bw = pd.Series(direction).map(bw_of).to_numpy(dtype=float)
        nbytes = pg["bytes"].to_numpy(dtype=float)
        dur = pg["dur_ns"].to_numpy(dtype=np.int64)
        expected = ctx.options["latency_us"] * 1e3 + nbytes / np.maximum(row_bw, 1e-9)
        excess = np.maximum(dur - expected, 0.0)
        excess_ns = int(excess.sum())

        # Which pageable copies were issued through an async API (and therefore blocked the host anyway).
        launches = ctx.views.launches
        async_calls = 0
        idle_ns = 0
        if not launches.empty:
            la = launches[launches["gpu_idx"].isin(pg.index)]
            is_async = name_mask(la["launch_name"].astype("category"), ASYNC_COPY_CALL, case=False)
            async_calls = int(is_async.sum())
            idle_ns = _idle_under_calls(host_starved_gaps(ctx.views, ctx.views.gaps), la[is_async].drop_duplicates("launch_idx"))
        impact = excess_ns + idle_ns

        t = pd.DataFrame({"direction": direction, "bytes": nbytes, "dur_ns": dur, "excess_ns": excess, "ref_gbps": row_bw})
        evidence = t.groupby("direction", sort=True).agg(
            count=("bytes", "size"), total_mb=("bytes", "sum"), time_ns=("dur_ns", "sum"), excess_ns=("excess_ns", "sum"), pinned_gbps=("ref_gbps", "first")
        ).reset_index()
        evidence["achieved_gbps"] = (evidence["total_mb"] / evidence["time_ns"].clip(lower=1)).round(3)
        evidence["total_mb"] = (evidence["total_mb"] / 1e6).round(3)
        evidence["time_ms"] = evidence["time_ns"] / 1e6
        evidence["excess_ms"] = evidence["excess_ns"] / 1e6
        evidence["pinned_gbps"] = evidence["pinned_gbps"].round(2)
        evidence = evidence[["direction", "count", "total_mb", "time_ms", "achieved_gbps", "pinned_gbps", "excess_ms"]]

        achieved = float(nbytes.sum() / max(total, 1))
        ref_note = ", ".join(f"{d} {g:.1f} GB/s" + ("" if d in ref_gbps else " (assumed)") for d, g in bw_of.items())
        yield ctx.finding(
            title=f"{len(pg)} copies from pageable host memory ({fmt_ns(total)})",
            message=(
                f"{len(pg)} host-device copies moved {nbytes.sum() / 1e6:.1f} MB from/to pageable memory in {fmt_ns(total)} "
                f"({achieved:.2f} GB/s achieved; pinned reference {ref_note}). At pinned bandwidth they would take "
                f"{fmt_ns(excess_ns)} less GPU time"
                + (f"; {async_calls} of them were async calls forced to run synchronously, and the GPU ran dry for {fmt_ns(idle_ns)} under them" if async_calls else "")
                + f". Pinned buffers would save about {fmt_ns(impact)}."
            ),
            impact_ns=impact,
            evidence=evidence,
            instances=pd.DataFrame(
                {"start_ns": pg["start_ns"], "end_ns": pg["start_ns"] + pg["dur_ns"], "rank": pg["rank"], "device": pg["device"], "label": direction}
            ),
            metrics={
                "count": int(len(pg)),
                "bytes": int(nbytes.sum()),
                "time_ns": total,
                "achieved_gbps": round(achieved, 4),
                "pinned_reference_gbps": {d: round(float(g), 4) for d, g in bw_of.items()},
                "reference_measured": {d: d in ref_gbps for d in bw_of},
                "excess_ns": excess_ns,
                "gpu_idle_ns": int(idle_ns),
                "async_calls": async_calls,
                "pageable_share_of_copy_time_pct": round(100.0 * total / max(int(copies["dur_ns"].sum()), 1), 3),
            },
            key="pageable",
        )


def _idle_under_calls(gaps: pd.DataFrame, calls: pd.DataFrame) -> int:
    """GPU idle caused by blocking calls: for each gap of the caller's rank that begins while a call is in
    progress, at most that call's duration (the host would have queued the next work that much sooner)."""
    if gaps.empty or calls.empty:
        return 0
    total = 0
    for rank, c in calls.groupby("rank", sort=False):
        g = gaps[gaps["rank"].to_numpy() == rank]
        if g.empty:
            continue
        c = c.sort_values("launch_start_ns")
        cs = c["launch_start_ns"].to_numpy(dtype=np.int64)
        ce = cs + c["launch_dur_ns"].to_numpy(dtype=np.int64)
        run_end = np.maximum.accumulate(ce)
        gs = g["start_ns"].to_numpy(dtype=np.int64)
        j = np.searchsorted(cs, gs, side="right") - 1
        jj = np.clip(j, 0, None)
        inside = (j >= 0) & (gs <= run_end[jj])
        charged = np.minimum(g["dur_ns"].to_numpy(dtype=np.int64), ce[jj] - cs[jj])
        total += int(charged[inside].sum())
    return total
