"""TI003: most kernels are so short that launching them costs more than running them."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.rule_api import Fix, Location, Option, Rule, Severity, fmt_ns


from ._common import SYNC_CALL, innermost_enclosing, lookup, name_mask, short_name, starts_inside, user_code_sentence, user_frames_at


class TinyKernels(Rule):
    code = "TI003"
    category = "launch_overhead"
    name = "tiny-kernels"
    severity = Severity.WARNING
    summary = "Many kernels are shorter than their own launch; the GPU waits on the host between them (launch-bound)."
    why = """
    Launching a kernel costs the host 5-20 µs (framework dispatch + CUDA launch). A kernel that runs for 3 µs
    finishes before the next launch arrives, so the GPU alternates between a little work and waiting. Such
    workloads do not get faster on a faster GPU; they need fewer, larger kernels.
    """
    definition = """
    A kernel is *launch-bound* when it runs shorter than `max_kernel_us` (default **10 µs**, TraceLens'
    `short_kernel_threshold_us`) or shorter than the host call that launched it (HTA's "short GPU kernel":
    GPU duration < CPU launch duration). A finding is made per (rank, device) when launch-bound kernels are at least
    `min_share_pct` (default **50 %**) of all kernels and the idle time before them is at least `min_idle_pct`
    (default **2 %**) of the device's active window; without the second condition a GPU whose queue is full
    (many small kernels back to back, no idle) would be flagged although launching is not its bottleneck.

    Impact: the device-idle gaps (all streams merged) that end at a launch-bound kernel and are shorter than
    `max_gap_us` (default 100 µs, TI001's lower bound, so TI001 and TI003 never count the same gap), leaving out
    gaps that begin while the host is blocked in a synchronizing call (the sync drained the queue: TI002's), and
    gaps whose next kernel was already queued: when its launch call had returned before the GPU ran dry, the GPU
    waited on something of its own (an event another stream records, a cross-stream `cudaStreamWaitEvent`, the
    previous kernel's tail), not on the host, so a faster launch would not have shortened the gap (the time
    ledger's GPU-side dependency; counted in `metrics["gpu_dependency_ns"]`, not in the impact). Gaps whose next
    kernel has no launch in the trace are counted, as nothing shows it was queued. The idle-time condition above
    reads this impact, so tiny kernels that always wait in a full queue or behind GPU-side dependencies are never
    reported. Fusing these kernels (torch.compile, XLA) or replaying them as a CUDA graph removes these gaps; the
    kernels' own run time stays, so this is a lower bound on launch overhead, not on total savings.
    """
    fix_pytorch = Fix(
        "Give each launch more work: larger batches; fuse elementwise chains with `torch.compile`; replay the step "
        "as a CUDA graph (`mode=\"reduce-overhead\"` or `torch.cuda.graphs`) when shapes are static; use the "
        "foreach/fused optimizer implementations instead of one kernel per parameter.",
        """
        model = torch.compile(model, mode="reduce-overhead")      # fusion + CUDA graphs
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)

        # or capture a static step by hand
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_out = model(static_in)
        static_in.copy_(batch); g.replay()
        """,
    )
    fix_tensorflow = Fix(
        "Compile the step with XLA so elementwise ops fuse into few kernels, increase the batch, and run several "
        "steps per `tf.function` call.",
        """
        @tf.function(jit_compile=True)
        def train_step(x, y): ...

        model.compile(optimizer="adam", loss=loss_fn, jit_compile=True, steps_per_execution=32)
        """,
    )

    fix_cuda = Fix(
        "Launch fewer, larger kernels: fuse consecutive elementwise kernels into one, process several items per "
        "thread (grid-stride loops), and capture a repeated sequence of launches as a CUDA graph so it is "
        "submitted with one `cudaGraphLaunch`.",
        """
        cudaGraph_t graph; cudaGraphExec_t exec;
        cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
        for (int k = 0; k < n_small; ++k) small_kernel<<<g, b, 0, s>>>(args[k]);
        cudaStreamEndCapture(s, &graph);
        cudaGraphInstantiate(&exec, graph, 0);
        for (int it = 0; it < iters; ++it) cudaGraphLaunch(exec, s);   // one launch per iteration
        """,
    )

    max_kernel_us = Option(10.0, "Kernels shorter than this (µs) count as tiny (TraceLens short-kernel threshold).")
    min_share_pct = Option(50.0, "Report when at least this % of a device's kernels are launch-bound.")
    min_idle_pct = Option(2.0, "...and the idle gaps before them are at least this % of the device's active window.")
    max_gap_us = Option(100.0, "Only gaps shorter than this (µs) count as launch overhead; longer ones are TI001's.")
    top_n = Option(10, "Evidence rows: the launch-bound kernels the GPU waited for longest, then the most frequent.")

    def check(self, ctx):
        v = ctx.views
        k = v.kernels
        if k.empty:
            return
        k = k[["rank", "device", "stream", "name", "start_ns", "dur_ns", "pid", "correlation"]].copy()
        # the launch of each kernel (duration and row) from the shared launches view
        ln = v.launches
        if not ln.empty:
            lk = ln[ln["kind"] == "kernel"].drop_duplicates("gpu_idx").set_index("gpu_idx")
            k["launch_dur_ns"] = lk["launch_dur_ns"].reindex(k.index).to_numpy()
            k["launch_idx"] = lk["launch_idx"].reindex(k.index).to_numpy()
        else:
            k["launch_dur_ns"] = np.nan
            k["launch_idx"] = np.nan
        tiny = k["dur_ns"].to_numpy() < self.max_kernel_us * 1e3
        shorter = k["dur_ns"].to_numpy() < np.nan_to_num(k["launch_dur_ns"].to_numpy(dtype=float), nan=-1.0)
        k["bound"] = tiny | shorter
        k["tiny"] = tiny

        gaps = v.gaps
        gaps = gaps[gaps["dur_ns"] < self.max_gap_us * 1e3]
        gaps = gaps[~_starts_in_sync(v.host_events, gaps)]
        bound_starts = k.loc[k["bound"], ["rank", "device", "start_ns", "name"]].drop_duplicates(["rank", "device", "start_ns"])
        g = gaps.merge(bound_starts, left_on=["rank", "device", "end_ns"], right_on=["rank", "device", "start_ns"], suffixes=("", "_k"))
        queued = _next_work_queued(v, g)
        dep_by_dev = g[queued].groupby(["rank", "device"])["dur_ns"].agg(dep_ns="sum", n_dep="size")
        g = g[~queued]
        idle_by_dev = g.groupby(["rank", "device"])["dur_ns"].agg(idle_ns="sum", n_gaps="size")

        util = v.utilization.set_index(["rank", "device"])
        stats = k.groupby(["rank", "device"]).agg(
            kernels=("bound", "size"), bound=("bound", "sum"), tiny=("tiny", "sum"), kernel_ns=("dur_ns", "sum")
        )
        stats["bound_ns"] = k[k["bound"]].groupby(["rank", "device"])["dur_ns"].sum()
        stats = stats.join(idle_by_dev).join(dep_by_dev).join(util[["window_ns"]]).fillna(0)
        stats["share_pct"] = 100.0 * stats["bound"] / stats["kernels"].clip(lower=1)
        stats["idle_pct"] = 100.0 * stats["idle_ns"] / stats["window_ns"].clip(lower=1)
        hit = stats[(stats["share_pct"] >= self.min_share_pct) & (stats["idle_pct"] >= self.min_idle_pct)]
        if hit.empty:
            return
        for (rank, device), row in hit.iterrows():
            kb = k[(k["rank"] == rank) & (k["device"] == device) & k["bound"]]
            gd = g[(g["rank"] == rank) & (g["device"] == device)]
            evidence = self._offenders(ctx, kb, gd.groupby("name")["dur_ns"].sum())
            multi = len(ctx.meta.ranks) > 1 or len(stats) > 1
            where = f"rank {rank} GPU {device}" if multi else f"GPU {device}"
            idle = int(row["idle_ns"])
            top = evidence.iloc[0]
            dep = (
                f" {int(row['n_dep'])} more gaps before them ({fmt_ns(int(row['dep_ns']))}) are not counted: the kernel was "
                "already queued, so the GPU waited on a dependency of its own, not on the launch."
                if row["n_dep"]
                else ""
            )
            li = kb["launch_idx"].dropna().astype(np.int64).to_numpy()[:20_000]  # a sample is enough to name the line
            code_at = user_code_sentence(user_frames_at(ctx.events.loc[li], ctx.events, v.host_events), ctx, "Most of them are launched from")
            yield ctx.finding(
                title=f"{where}: {row['share_pct']:.0f} % of kernels are launch-bound (< {self.max_kernel_us:g} µs or shorter than their launch)",
                message=(
                    f"{int(row['bound'])} of {int(row['kernels'])} kernels on {where} ({row['share_pct']:.0f} %) ran shorter than "
                    f"{self.max_kernel_us:g} µs or than their own launch call; together they are "
                    f"{100.0 * row['bound_ns'] / max(row['kernel_ns'], 1):.1f} % of kernel time. The GPU idled "
                    f"{fmt_ns(idle)} ({row['idle_pct']:.1f} % of its active window) in {int(row['n_gaps'])} short gaps waiting "
                    f"for their launch.{dep} Longest waited for: {top['kernel']} ({int(top['count'])}×, mean {fmt_ns(top['mean_us'] * 1e3)}, "
                    f"{fmt_ns(top['idle_before_us'] * 1e3)} idle before it), launched from {top['launched_by']}.{code_at}"
                ),
                impact_ns=idle,
                evidence=evidence,
                instances=gd[["start_ns", "end_ns", "rank", "device"]].assign(label="wait before a launch-bound kernel"),
                location=Location(rank=int(rank), device=int(device)),
                metrics={
                    "kernels": int(row["kernels"]),
                    "launch_bound_kernels": int(row["bound"]),
                    "tiny_kernels": int(row["tiny"]),
                    "launch_bound_share_pct": round(float(row["share_pct"]), 3),
                    "launch_bound_time_share_pct": round(100.0 * float(row["bound_ns"]) / max(float(row["kernel_ns"]), 1.0), 3),
                    "idle_before_ns": idle,
                    "idle_pct": round(float(row["idle_pct"]), 3),
                    "gpu_dependency_gaps": int(row["n_dep"]),
                    "gpu_dependency_ns": int(row["dep_ns"]),
                },
                key=f"rank{rank}-gpu{device}",
            )

    def _offenders(self, ctx, kb: pd.DataFrame, idle_by_name: pd.Series) -> pd.DataFrame:
        """Top kernels by the idle counted before them, then by count, each with the framework op that launched it
        most often. Idle first: a tiny kernel that always sits in the queue is frequent but costs nothing."""
        ev = ctx.events
        names = ev["name"]  # lookup converts only the rows it returns
        launched_by = np.full(len(kb), None, dtype=object)
        li = kb["launch_idx"].to_numpy(dtype=float)
        has = ~np.isnan(li)
        if has.any():
            span_cols = ["rank", "pid", "tid", "start_ns", "dur_ns"]  # all innermost_enclosing reads
            launch_rows = ev.loc[li[has].astype(np.int64), span_cols]
            ops = ctx.views.host_events[[*span_cols, "kind"]]
            ops = ops[(ops["kind"] == "cpu_op").to_numpy()]
            launched_by[has] = lookup(names, innermost_enclosing(launch_rows, ops))
        kb = kb.assign(launched_by=pd.Series(launched_by, index=kb.index).fillna("(unknown)"), name=kb["name"].astype(str))
        agg = kb.groupby("name").agg(count=("dur_ns", "size"), mean_ns=("dur_ns", "mean"), total_ns=("dur_ns", "sum"), launch_ns=("launch_dur_ns", "mean"))
        agg["idle_ns"] = idle_by_name.reindex(agg.index).fillna(0).to_numpy()
        agg = agg.sort_values(["idle_ns", "count"], ascending=False).head(int(self.top_n))
        op = kb[kb["name"].isin(agg.index)].groupby(["name", "launched_by"]).size().reset_index(name="n")
        op = op.sort_values("n", ascending=False).drop_duplicates("name").set_index("name")["launched_by"]
        return pd.DataFrame(
            {
                "kernel": [short_name(n) for n in agg.index],
                "count": agg["count"].to_numpy(),
                "mean_us": agg["mean_ns"].to_numpy() / 1e3,
                "total_us": agg["total_ns"].to_numpy() / 1e3,
                "mean_launch_us": agg["launch_ns"].to_numpy() / 1e3,
                "idle_before_us": agg["idle_ns"].to_numpy() / 1e3,
                "launched_by": op.reindex(agg.index).to_numpy(),
            }
        )


def _next_work_queued(views, gaps: pd.DataFrame) -> np.ndarray:
    """Gaps whose next work had been launched (its launch call returned) by the time the gap began.

    The GPU had the work and still did not run it: it waited on a dependency of its own (an event, another
    stream). The fact comes from the time ledger (its ``idle_gpu_dependency``), so TI003 and the verdict agree on
    which idle the host caused.
    """
    if gaps.empty:
        return np.zeros(0, dtype=bool)
    lg = views.ledger.gaps
    if lg.empty:
        return np.zeros(len(gaps), dtype=bool)
    keys = ["rank", "device", "start_ns", "end_ns"]
    nl = gaps[keys].merge(lg[keys + ["next_launch_end_ns"]].drop_duplicates(keys), on=keys, how="left")["next_launch_end_ns"]
    return (nl.to_numpy(dtype=float) <= gaps["start_ns"].to_numpy(dtype=float)) & nl.notna().to_numpy()


def _starts_in_sync(host: pd.DataFrame, gaps: pd.DataFrame) -> np.ndarray:
    """Gaps whose start falls inside a blocking runtime call of the same rank (the queue drained under a sync)."""
    if gaps.empty or host.empty:
        return np.zeros(len(gaps), dtype=bool)
    rt = host[(host["kind"] == "runtime").to_numpy()]
    return starts_inside(gaps, rt[name_mask(rt["name"], SYNC_CALL)])
