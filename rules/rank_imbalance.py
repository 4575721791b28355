"""TI009: one rank (or GPU) does more work than the others, and everybody else waits for it at collectives."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.rule_api import Fix, Location, Option, Severity, fmt_ns, level
from traceinsight.rule_api_job import CrossRankRule, JobContext


class RankImbalance(CrossRankRule):
    code = "TI009"
    min_ranks = 2  # imbalance is between ranks
    category = "gpu_idle"
    name = "rank-imbalance"
    severity = Severity.WARNING
    summary = "Ranks of a distributed job do unequal amounts of work; the fastest ones wait at collectives."
    why = """
    In data-parallel training every collective (all-reduce, all-to-all) completes only when the slowest rank
    arrives, so the job runs at the speed of its straggler. The other ranks show the cost as long NCCL kernels
    (they are launched early and spin until the peer arrives) and as lower GPU busy time. Uneven shards,
    variable sequence lengths, embedding tables placed unevenly (DLRM) or one slow host are typical causes.
    """
    definition = """
    Runs on the ranks of one distributed job only: two or more distinct ranks (several rank files, or a trace
    whose ranks come from ``distributedInfo``), never on two GPUs driven by one process. Per rank: **compute busy** = union of non-NCCL
    kernels, copies and memsets (NCCL kernels are excluded because their duration includes waiting for peers);
    **NCCL time** = union of collective kernels (``nccl``, ``rccl``, ``multimem``, ``all_reduce``, ``all_to_all`` …).

    **Busy imbalance** = (max − median) / median of compute busy. Reported when it exceeds
    ``max_imbalance_pct`` = **10 %** (the brief's tolerance; HTA reports per-rank idle/comm breakdowns without a
    threshold, and tb_plugin flags communication > 10 % of step time — the cost the stragglers impose).
    When step markers exist on several ranks, **step imbalance** = per step number (max − median) / median of
    step duration; it also triggers at the same threshold when the same rank is the slowest in at least half
    of the steps (a consistent straggler rather than noise). The finding points at the straggler (its rank and
    device), and its severity comes from the one scale of `traceinsight.assess.severity` applied to the time balancing
    would give back as a share of that rank's GPU window.

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
    fix_jax = Fix(
        "Give every device the same work: shard the global batch evenly over the mesh (a batch divisible by the device "
        'count, `NamedSharding`) and pad or bucket variable-length examples so every shard has the same shape.',
        """
        mesh = jax.make_mesh((jax.device_count(),), ("data",))
        batch = jax.tree.map(lambda a: jnp.pad(a, ((0, 0), (0, pad_to - a.shape[1]))), batch)
        batch = jax.device_put(batch, NamedSharding(mesh, P("data")))
        """,
    )

    fix_cuda = Fix(
        "Give every rank the same work: split the global problem into equal shards (pad the last one), bucket "
        "variable-size inputs, and check the busy rank's GPU clocks and host (`nvidia-smi -q -d PERFORMANCE`).",
        """
        size_t per_rank = (n + nranks - 1) / nranks;              // equal shards, the last one padded
        compute<<<grid, block, 0, s>>>(d_data + rank * per_rank, per_rank);
        ncclAllReduce(d_grad, d_grad, len, ncclFloat, ncclSum, comm, s);
        """,
    )

    max_imbalance_pct = Option(10.0, "Report when (max - median) / median of per-rank compute busy exceeds this %.")

    def check_job(self, job: JobContext):
        j = job.job
        if not j.is_multi_rank:
            return
        util = j.ranks[j.ranks["window_ns"] > 0].reset_index(drop=True)
        if len(util) < 2:
            return
        busy = util["compute_ns"].to_numpy(dtype=float)
        med = float(np.median(busy))
        if med <= 0:
            return
        imb = 100.0 * (busy.max() - med) / med
        worst = util.iloc[int(np.argmax(busy))]

        # Step-time view across ranks (same step number on several ranks).
        steps = j.steps[j.steps["step"] >= 0]
        step_imb = 0.0
        slowest_rank = None
        slowest_frac = 0.0
        step_ev = None
        if not steps.empty and steps["rank"].nunique() >= 2:
            n_r = steps.groupby("step")["dur_ns"].transform("size")
            st = steps[n_r.to_numpy() >= 2]
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
        step_trigger = step_imb > job.options["max_imbalance_pct"] and slowest_frac >= 0.5 and step_ev is not None and len(step_ev) >= 1
        if imb <= job.options["max_imbalance_pct"] and not step_trigger:
            return

        impact = int(busy.max() - busy.mean())
        busy_pct = 100.0 * util["busy_ns"] / util["window_ns"].clip(lower=1)
        evidence = pd.DataFrame(
            {
                "rank": util["rank"].astype(int),
                "device": util["device"].astype(int),
                "window_ms": (util["window_ns"] / 1e6).round(3),
                "compute_busy_ms": (util["compute_ns"] / 1e6).round(3),
                "nccl_ms": (util["comm_ns"] / 1e6).round(3),
                "busy_pct": busy_pct.astype(float).round(2),
                "vs_median_pct": (100.0 * (util["compute_ns"] - med) / med).round(1),
            }
        ).sort_values("compute_busy_ms", ascending=False, kind="stable").reset_index(drop=True)
        # graded on the one scale, as the share of the straggler's own window that balancing would give back
        sev = level(100.0 * impact / max(float(worst["window_ns"]), 1.0))
        least = util.iloc[int(np.argmin(busy))]
        waits_more = float(least["comm_ns"]) > float(worst["comm_ns"])
        msg = (
            f"Across {len(util)} ranks, compute busy time ranges {fmt_ns(busy.min())}-{fmt_ns(busy.max())} "
            f"(max is {imb:.0f}% above the median {fmt_ns(med)}); rank {int(worst['rank'])} (device {int(worst['device'])}) does the most work. "
            f"NCCL kernel time: {fmt_ns(least['comm_ns'])} on the least-loaded rank {int(least['rank'])}, {fmt_ns(worst['comm_ns'])} on the busiest"
            + (" (the others wait at collectives for the straggler)" if waits_more else "")
            + f". Balancing the work would save about {fmt_ns(impact)}."
        )
        if step_ev is not None:
            spread = f"{step_imb:.0f}%" if step_imb >= 9.5 else f"{step_imb:.1f}%"  # "0%" for a 0.7 % spread read as none
            msg += f" Step times differ by {spread} on average; rank {slowest_rank} is slowest in {100 * slowest_frac:.0f}% of steps."
        key = lambda r, d: f"{int(r)}:{int(d)}"  # noqa: E731
        yield job.finding(
            title=f"Work is unbalanced across ranks ({imb:.0f}% above median)",
            message=msg,
            impact_ns=impact,
            evidence=evidence,
            severity=sev,
            location=Location(rank=int(worst["rank"]), device=int(worst["device"])),
            metrics={
                "busy_imbalance_pct": round(float(imb), 3),
                "step_imbalance_pct": round(step_imb, 3),
                "straggler_rank": int(worst["rank"]),
                "straggler_device": int(worst["device"]),
                "slowest_step_rank": slowest_rank,
                "slowest_step_fraction": round(slowest_frac, 3),
                "compute_busy_ns": {key(r, d): int(b) for r, d, b in zip(util["rank"], util["device"], util["compute_ns"])},
                "nccl_ns": {key(r, d): int(b) for r, d, b in zip(util["rank"], util["device"], util["comm_ns"])},
                "busy_pct": {key(r, d): round(float(b), 3) for r, d, b in zip(util["rank"], util["device"], busy_pct)},
            },
            key="rank-imbalance",
        )
