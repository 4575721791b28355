"""TI001: the GPU sat idle for long stretches, and what the host was doing instead."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.rule_api import Fix, Location, Option, Rule, Severity, fmt_ns

from ._common import DATA_LOADING, OPTIMIZER, SYNC_CALL, SYNC_OP, name_mask, overlap_by_rank, request_boundary_gaps, short_name, warmup_gaps

CAUSE_DATA = "data loading"
CAUSE_OPT = "optimizer step"
CAUSE_SYNC = "host synchronization"
CAUSE_CPU = "host busy in CPU ops (launch queue empty)"
CAUSE_UNTRACED = "untraced host time (launch queue empty)"
CAUSE_K2K = "kernel-to-kernel delay (launched early; GPU-side dependency)"
CAUSE_UNKNOWN = "unknown (no launch linked)"
CAUSES = (CAUSE_DATA, CAUSE_OPT, CAUSE_SYNC, CAUSE_CPU, CAUSE_UNTRACED, CAUSE_K2K, CAUSE_UNKNOWN)
#: The finding category (rule_api.CATEGORIES) of the rule that owns each gap cause, for root-cause linking.
CAUSE_CATEGORY = {CAUSE_DATA: "input_pipeline", CAUSE_SYNC: "host_sync"}


def attribute_gaps(views, gaps: pd.DataFrame) -> pd.DataFrame:
    """Gives each gap a cause from what the host did meanwhile; vectorized over all gaps (not just the shown ones).

    Order of the tests: data loading and optimizer ranges covering at least half the gap win (they name a
    concrete culprit); then a blocking sync touching the gap; then the launch of the work that ended the gap:
    launched after the gap began means the host was late (busy in traced ops, or somewhere untraced), launched
    before means the GPU waited on something else (events, another stream, a copy).
    """
    g = gaps.reset_index(drop=True).copy()
    if g.empty:
        g["cause"] = pd.Series(dtype="object")
        return g
    host = views.host_events[["rank", "kind", "name", "start_ns", "dur_ns"]]  # filtered five times below: keep it narrow
    host = host[host["kind"].isin(("cpu_op", "python", "annotation", "runtime", "other")).to_numpy()]
    names = host["name"]
    dl = host[name_mask(names, DATA_LOADING)]
    opt = host[name_mask(names, OPTIMIZER)]
    sync = host[name_mask(names, SYNC_CALL) | name_mask(names, SYNC_OP)]
    busy_host = host[host["kind"].isin(("cpu_op", "python", "runtime")).to_numpy()]
    dur = g["dur_ns"].to_numpy()
    g["data_loading_ns"] = overlap_by_rank(dl, g)
    g["optimizer_ns"] = overlap_by_rank(opt, g)
    g["sync_ns"] = overlap_by_rank(sync, g)
    g["host_ops_ns"] = overlap_by_rank(busy_host, g)

    # the launch of the GPU work that ended each gap
    ln = views.launches
    if not ln.empty:
        first = ln.groupby(["rank", "device", "gpu_start_ns"], sort=False)["launch_start_ns"].min().reset_index()
        first = first.rename(columns={"gpu_start_ns": "end_ns", "launch_start_ns": "next_launch_ns"})
        g = g.merge(first, on=["rank", "device", "end_ns"], how="left")
    else:
        g["next_launch_ns"] = np.nan
    nl = g["next_launch_ns"].to_numpy(dtype=float)
    start = g["start_ns"].to_numpy()
    has_launch = ~np.isnan(nl)
    late = has_launch & (nl > start)
    cause = np.select(
        [
            g["data_loading_ns"].to_numpy() * 2 >= dur,
            g["optimizer_ns"].to_numpy() * 2 >= dur,
            g["sync_ns"].to_numpy() > 0,
            late & (g["host_ops_ns"].to_numpy() * 2 >= dur),
            late,
            has_launch,
        ],
        [CAUSE_DATA, CAUSE_OPT, CAUSE_SYNC, CAUSE_CPU, CAUSE_UNTRACED, CAUSE_K2K],
        default=CAUSE_UNKNOWN,
    )
    g["cause"] = cause
    return g


class GpuIdleGaps(Rule):
    code = "TI001"
    category = "gpu_idle"
    name = "gpu-idle-gaps"
    severity = Severity.WARNING
    summary = "The GPU sits idle in long gaps between its work; each gap is traced to what the host was doing."
    why = """
    Every microsecond the GPU has nothing queued is lost throughput you already pay for. Short gaps between
    back-to-back kernels are normal; gaps of hundreds of microseconds mean the host did not keep the launch queue
    full: it was loading data, blocked in a synchronization, stepping the optimizer in Python, or simply slower
    than the GPU.
    """
    definition = """
    Per (rank, device), GPU activity (kernels, copies, memsets on all streams) is merged into busy intervals; the
    *window* runs from the first to the last activity. A gap is a hole between busy intervals, and a *long gap* one
    of at least `min_gap_us` (default **100 µs**). The impact is the summed duration of the long gaps, and it is
    graded like every finding on the common scale (share of the device's window: error >= 20 %, warning >= 5 %,
    info >= 1 %), so idle that is large in total is reported even when it sits in a few gaps. Warm-up gaps at the
    start of the window (TI013) are left out: they are one-off start-up, not steady-state idle. So are, in an
    inference run, gaps that begin inside the sync closing a step (TI002: the request's result): the idle
    between two requests lengthens no request (``metrics["between_requests_ns"]``). `min_idle_pct`
    (default **1 %**, the scale's floor) is the smallest share reported at all.

    Thresholds against peers: HTA's idle-time breakdown calls a same-stream gap under 30 µs "kernel wait"
    (`consecutive_kernel_delay=30`) and its critical-path analysis treats up to 1.5 ms as a plausible kernel-kernel
    dependency; TraceLens splits idle into micro/macro by `micro_idle_thresh_us`; Nsight Systems' `gpu_gaps`
    reports gaps over 500 ms, far too coarse for training steps of tens of ms. 100 µs is well above launch latency
    (5–20 µs) and same-stream kernel-to-kernel delay (< 30 µs), so only host-caused stalls count, yet small enough
    to catch per-step data-loading or sync stalls.

    Each long gap gets one cause, tested in this order: host ranges of data loading (`enumerate(DataLoader)`,
    `IteratorGetNext`, `Iterator::`) or of the optimizer (`Optimizer.step`) cover at least half the gap; a blocking
    sync (`cudaStreamSynchronize`, `cudaDeviceSynchronize`, `cudaEventSynchronize`, blocking `cudaMemcpy`,
    `aten::item`, `aten::_local_scalar_dense`) overlaps it; the work ending the gap was launched after the gap began
    (empty launch queue: host busy in traced CPU ops, or in untraced time when those cover less than half); it was
    launched before the gap began (kernel-to-kernel delay, a GPU-side dependency).
    """
    fix_pytorch = Fix(
        "Match the cause. Data loading: use worker processes, pinned memory and prefetching so the next batch is "
        "ready. Synchronization: remove `.item()`, `.cpu()`, `print(tensor)` from the step (see TI002). Host busy: "
        "batch more work per launch (TI003) or capture the step with CUDA graphs.",
        """
        loader = torch.utils.data.DataLoader(ds, batch_size=256, num_workers=8, pin_memory=True,
                                             persistent_workers=True, prefetch_factor=4)
        for x, y in loader:
            x = x.cuda(non_blocking=True); y = y.cuda(non_blocking=True)
            loss = model(x).loss_fn(y)
            ...
            running_loss += loss.detach()          # not loss.item() every step
        model = torch.compile(model, mode="reduce-overhead")  # CUDA graphs when the host is the bottleneck
        """,
    )
    fix_tensorflow = Fix(
        "Overlap input with compute: parallel map, prefetch (to the GPU), cache; keep Python-side logging of "
        "tensors out of the step; compile the step with XLA when the host cannot keep up.",
        """
        ds = (tf.data.Dataset.from_tensor_slices(files)
              .interleave(tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE)
              .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
              .batch(256).cache().prefetch(tf.data.AUTOTUNE))
        ds = ds.apply(tf.data.experimental.prefetch_to_device("/gpu:0"))

        @tf.function(jit_compile=True)
        def train_step(x, y): ...
        """,
    )

    fix_cuda = Fix(
        "Keep the GPU fed ahead of the host: stage inputs in pinned buffers (`cudaMallocHost`) and copy them with "
        "`cudaMemcpyAsync` on a second stream while the current batch computes; replace `cudaDeviceSynchronize` "
        "with events the next stream waits on; capture a fixed sequence of launches once as a CUDA graph.",
        """
        cudaStream_t copy, compute; cudaStreamCreate(&copy); cudaStreamCreate(&compute);
        cudaEvent_t ready; cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
        cudaMemcpyAsync(d_in[next], h_in[next], bytes, cudaMemcpyHostToDevice, copy);  // h_in from cudaMallocHost
        cudaEventRecord(ready, copy);
        kernel<<<grid, block, 0, compute>>>(d_in[cur], d_out);     // overlaps the copy above
        cudaStreamWaitEvent(compute, ready, 0);                      // no host-side cudaDeviceSynchronize
        """,
    )

    min_gap_us = Option(100.0, "Gaps shorter than this (µs) are normal launch/dependency latency and are ignored.")
    min_idle_pct = Option(1.0, "Report a device when its long gaps add up to at least this % of its active window.")
    top_n = Option(10, "Evidence rows: the largest gaps shown.")

    def check(self, ctx):
        v = ctx.views
        util = v.utilization
        if util.empty:
            return
        min_gap = int(self.min_gap_us * 1e3)
        gaps = v.gaps
        warm = warmup_gaps(v)
        if not warm.empty:  # one-off start-up (TI013) is not steady-state idle
            wk = warm.set_index(["rank", "device", "start_ns"]).index
            gaps = gaps[~gaps.set_index(["rank", "device", "start_ns"]).index.isin(wk)]
        between = request_boundary_gaps(v, gaps)  # idle between inference requests lengthens no request
        between_ns = gaps[between].groupby(["rank", "device"])["dur_ns"].sum().to_dict() if between.any() else {}
        gaps = gaps[~between]
        long = gaps[gaps["dur_ns"] >= min_gap]
        if long.empty:
            return
        per_dev = long.groupby(["rank", "device"], sort=True)["dur_ns"].agg(long_ns="sum", n_gaps="count").reset_index()
        per_dev = per_dev.merge(util, on=["rank", "device"], how="left")
        per_dev["long_pct"] = 100.0 * per_dev["long_ns"] / per_dev["window_ns"].clip(lower=1)
        hit = per_dev[per_dev["long_pct"] >= self.min_idle_pct]
        if hit.empty:
            return
        sel = long.merge(hit[["rank", "device"]], on=["rank", "device"])
        attributed = attribute_gaps(v, sel)
        for row in hit.itertuples(index=False):
            rank, device = int(row.rank), int(row.device)
            g = attributed[(attributed["rank"] == rank) & (attributed["device"] == device)]
            by_cause = g.groupby("cause")["dur_ns"].sum().sort_values(ascending=False)
            total = int(row.long_ns)
            shares = {c: round(100.0 * int(ns) / total, 1) for c, ns in by_cause.items()}
            top_cause = by_cause.index[0]
            evidence = self._evidence(v, g.nlargest(int(self.top_n), "dur_ns"))
            cause_words = ", ".join(f"{c} {shares[c]:.0f} %" for c in by_cause.index[:3])
            multi = len(ctx.meta.ranks) > 1 or util["device"].nunique() > 1
            where = f"rank {rank} GPU {device}" if multi else f"GPU {device}"
            yield ctx.finding(
                title=f"{where} idle {row.long_pct:.0f} % of the time in long gaps, mostly {top_cause}",
                message=(
                    f"{where} was idle for {fmt_ns(total)} in {int(row.n_gaps)} gaps of "
                    f"{self.min_gap_us:g} µs or more, {row.long_pct:.1f} % of its {fmt_ns(row.window_ns)} active window "
                    f"(all idle time: {100.0 - row.busy_pct:.1f} %). By cause: {cause_words}. "
                    f"The largest gap lasted {fmt_ns(g['dur_ns'].max())}."
                ),
                impact_ns=total,
                evidence=evidence,
                instances=g[["start_ns", "end_ns", "rank", "device"]].assign(label=g["cause"]).sort_values("start_ns"),
                location=Location(rank=rank, device=device),
                metrics={
                    "idle_pct": round(100.0 - float(row.busy_pct), 3),
                    "long_gap_idle_pct": round(float(row.long_pct), 3),
                    "long_gap_ns": total,
                    "long_gaps": int(len(g)),
                    "window_ns": int(row.window_ns),
                    "cause_ns": {c: int(ns) for c, ns in by_cause.items()},
                    "cause_pct": shares,
                    "top_cause": top_cause,
                    "idle_by_category": _by_category(by_cause),
                    "between_requests_ns": int(between_ns.get((rank, device), 0)),
                },
                key=f"rank{rank}-gpu{device}",
            )

    @staticmethod
    def _evidence(views, top: pd.DataFrame) -> pd.DataFrame:  # noqa: D401
        rows = []
        for gap in top.itertuples(index=False):
            host = views.host_rows_overlapping(int(gap.rank), int(gap.start_ns), int(gap.end_ns), kinds=("cpu_op", "python", "annotation", "runtime"))
            if not host.empty:
                ov = np.minimum(host["start_ns"] + host["dur_ns"], gap.end_ns) - np.maximum(host["start_ns"], gap.start_ns)
                names = host.assign(_ov=ov.to_numpy()).groupby("name", observed=True)["_ov"].sum().nlargest(3)
                activity = "; ".join(f"{short_name(n, 60)} ({fmt_ns(t)})" for n, t in names.items())
            else:
                activity = "(nothing traced)"
            nl = getattr(gap, "next_launch_ns", np.nan)
            rows.append(
                {
                    "start_ms": gap.start_ns / 1e6,
                    "duration_us": gap.dur_ns / 1e3,
                    "cause": gap.cause,
                    "host_activity": activity,
                    "next_launch_after_gap_start_us": None if nl != nl else (nl - gap.start_ns) / 1e3,
                }
            )
        return pd.DataFrame(rows)


def _by_category(by_cause: pd.Series) -> dict[str, int]:
    """Idle ns per finding category whose rule owns the cause (data loading -> input_pipeline, ...)."""
    out: dict[str, int] = {}
    for cause, ns in by_cause.items():
        cat = CAUSE_CATEGORY.get(str(cause))
        if cat:
            out[cat] = out.get(cat, 0) + int(ns)
    return out
