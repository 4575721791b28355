"""TI009: one rank (or GPU) does more work than the others, and everybody else waits for it at collectives."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.rule_api import Context, Fix, Option, Rule, Severity, fmt_ns

from traceinsight.views import merge_grouped, name_mask

from ._common import COLLECTIVE

_K = 1_000_003  # packs (rank, device) into one integer group key


class RankImbalance(Rule):
    code = "TI009"
    category = "gpu_idle"
    name = "rank-imbalance"
    severity = Severity.WARNING
    summary = "GPUs of a distributed job do unequal amounts of work; the fastest ones wait at collectives."
    why = """
    In data-parallel training every collective (all-reduce, all-to-all) completes only when the slowest rank
    arrives, so the job runs at the speed of its straggler. The other ranks show the cost as long NCCL kernels
    (they are launched early and spin until the peer arrives) and as lower GPU busy time. Uneven shards,
    variable sequence lengths, embedding tables placed unevenly (DLRM) or one slow host are typical causes.
    """
    definition = """
    Needs at least two (rank, device) pairs with GPU activity. Per pair: **compute busy** = union of non-NCCL
    kernels, copies and memsets (NCCL kernels are excluded because their duration includes waiting for peers);
    **NCCL time** = union of collective kernels (``nccl``, ``rccl``, ``multimem``, ``all_reduce``, ``all_to_all`` …).

    **Busy imbalance** = (max − median) / median of compute busy. Reported when it exceeds
    ``max_imbalance_pct`` = **10 %** (the brief's tolerance; HTA reports per-rank idle/comm breakdowns without a
    threshold, and tb_plugin flags communication > 10 % of step time — the cost the stragglers impose).
    When step markers exist on several ranks, **step imbalance** = per step number (max − median) / median of
    step duration; it also triggers at the same threshold when the same rank is the slowest in at least half
    of the steps (a consistent straggler rather than noise). Severity **error** above ``error_imbalance_pct`` =
    **50 %**.

    **Impact** = max − mean of compute busy: the critical-path time a perfectly balanced split of the same
    work would remove (every rank would finish at the mean).
    """
    fix_pytorch = Fix(
        "Give every rank the same amount of work: shard data with `DistributedSampler` (and `drop_last=True`), "
        "bucket variable-length samples by length, balance embedding-table placement (TorchRec planner), and tune "
        "DDP `bucket_cap_mb` so gradient all-reduce overlaps backward. Check the straggler's host (CPU contention, "
        "thermal throttling, slower NIC) with `nvidia-smi -q -d PERFORMANCE` and per-rank data-loader time.",
        """
        sampler = torch.utils.data.distributed.DistributedSampler(ds, shuffle=True, drop_last=True)
        loader = DataLoader(ds, batch_size=per_rank_bs, sampler=sampler, num_workers=8, pin_memory=True)
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            ...
        model = DDP(model, device_ids=[local_rank], bucket_cap_mb=50, gradient_as_bucket_view=True)
        """,
    )
    fix_tensorflow = Fix(
        "Shard the input per worker with `tf.distribute` (auto-shard by FILE when there are enough files, DATA "
        "otherwise) and pad/bucket variable-length batches so every replica gets equal work.",
        """
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
        ds = ds.with_options(options)
        ds = ds.bucket_by_sequence_length(lambda x, y: tf.shape(x)[0], bucket_boundaries, bucket_batch_sizes)
        dist_ds = strategy.experimental_distribute_dataset(ds)
        """,
    )

    max_imbalance_pct = Option(10.0, "Report when (max - median) / median of per-rank compute busy exceeds this %.")
    error_imbalance_pct = Option(50.0, "Severity becomes error above this imbalance %.")

    def check(self, ctx: Context):
        act = ctx.views.gpu_activity
        if act.empty:
            return
        group = act["rank"].to_numpy().astype(np.int64) * _K + act["device"].to_numpy().astype(np.int64)
        if len(np.unique(group)) < 2:
            return
        is_nccl = name_mask(act["name"], COLLECTIVE) & (act["kind"] == "kernel").to_numpy()
        s = act["start_ns"].to_numpy()
        e = s + np.maximum(act["dur_ns"].to_numpy(), 0)
        comp = merge_grouped(group[~is_nccl], s[~is_nccl], e[~is_nccl])
        comm = merge_grouped(group[is_nccl], s[is_nccl], e[is_nccl])
        comp_ns = (comp["end_ns"] - comp["start_ns"]).groupby(comp["group"]).sum()
        comm_ns = (comm["end_ns"] - comm["start_ns"]).groupby(comm["group"]).sum()
        util = ctx.views.utilization.copy()
        util["group"] = util["rank"].astype(np.int64) * _K + util["device"].astype(np.int64)
        util["compute_busy_ns"] = util["group"].map(comp_ns).fillna(0).astype(np.int64)
        util["nccl_ns"] = util["group"].map(comm_ns).fillna(0).astype(np.int64)
        if len(util) < 2:
            return
        busy = util["compute_busy_ns"].to_numpy(dtype=float)
        med = float(np.median(busy))
        if med <= 0:
            return
        imb = 100.0 * (busy.max() - med) / med
        worst = util.iloc[int(np.argmax(busy))]

        # Step-time view across ranks (same step number on several ranks).
        steps = ctx.views.steps
        step_imb = 0.0
        slowest_rank = None
        slowest_frac = 0.0
        step_ev = None
        if not steps.empty and steps["rank"].nunique() >= 2:
            st = steps[steps["step"] >= 0]
            g = st.groupby("step")["dur_ns"]
            n_r = g.transform("size")
            st = st[n_r.to_numpy() >= 2]
            if not st.empty:
                g = st.groupby("step")["dur_ns"]
                per = pd.DataFrame({"max_ns": g.max(), "median_ns": g.median()})
                per["imbalance_pct"] = 100.0 * (per["max_ns"] - per["median_ns"]) / per["median_ns"].clip(lower=1)
                per["slowest_rank"] = st.loc[g.idxmax().to_numpy(), "rank"].to_numpy()
                step_imb = float(per["imbalance_pct"].mean())
                counts = per["slowest_rank"].value_counts()
                slowest_rank = int(counts.index[0])
                slowest_frac = float(counts.iloc[0]) / len(per)
                step_ev = per
        step_trigger = step_imb > ctx.options["max_imbalance_pct"] and slowest_frac >= 0.5 and step_ev is not None and len(step_ev) >= 1
        if imb <= ctx.options["max_imbalance_pct"] and not step_trigger:
            return

        impact = int(busy.max() - busy.mean())
        evidence = pd.DataFrame(
            {
                "rank": util["rank"].astype(int),
                "device": util["device"].astype(int),
                "window_ms": util["window_ns"] / 1e6,
                "compute_busy_ms": util["compute_busy_ns"] / 1e6,
                "nccl_ms": util["nccl_ns"] / 1e6,
                "busy_pct": util["busy_pct"].astype(float).round(2),
                "vs_median_pct": (100.0 * (util["compute_busy_ns"] - med) / med).round(1),
            }
        ).sort_values("compute_busy_ms", ascending=False).reset_index(drop=True)
        level = max(imb, step_imb if step_trigger else 0.0)
        sev = Severity.ERROR if level > ctx.options["error_imbalance_pct"] else Severity.WARNING
        least = util.iloc[int(np.argmin(busy))]
        waits_more = float(least["nccl_ns"]) > float(worst["nccl_ns"])
        msg = (
            f"Across {len(util)} GPUs, compute busy time ranges {fmt_ns(busy.min())}-{fmt_ns(busy.max())} "
            f"(max is {imb:.0f}% above the median {fmt_ns(med)}); rank {int(worst['rank'])} (device {int(worst['device'])}) does the most work. "
            f"NCCL kernel time: {fmt_ns(least['nccl_ns'])} on the least-loaded rank {int(least['rank'])}, {fmt_ns(worst['nccl_ns'])} on the busiest"
            + (" (the others wait at collectives for the straggler)" if waits_more else "")
            + f". Balancing the work would save about {fmt_ns(impact)}."
        )
        if step_ev is not None:
            msg += f" Step times differ by {step_imb:.0f}% on average; rank {slowest_rank} is slowest in {100 * slowest_frac:.0f}% of steps."
        yield ctx.finding(
            title=f"Work is unbalanced across GPUs ({imb:.0f}% above median)",
            message=msg,
            impact_ns=impact,
            evidence=evidence,
            severity=sev,
            metrics={
                "busy_imbalance_pct": round(float(imb), 3),
                "step_imbalance_pct": round(step_imb, 3),
                "straggler_rank": int(worst["rank"]),
                "straggler_device": int(worst["device"]),
                "slowest_step_rank": slowest_rank,
                "slowest_step_fraction": round(slowest_frac, 3),
                "compute_busy_ns": {f"{int(r)}:{int(d)}": int(b) for r, d, b in zip(util["rank"], util["device"], util["compute_busy_ns"])},
                "nccl_ns": {f"{int(r)}:{int(d)}": int(b) for r, d, b in zip(util["rank"], util["device"], util["nccl_ns"])},
                "busy_pct": {f"{int(r)}:{int(d)}": round(float(b), 3) for r, d, b in zip(util["rank"], util["device"], util["busy_pct"])},
            },
            key="rank-imbalance",
        )
