"""TI020: one rank reaches the collectives late and every other rank waits for it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.rule_api import Fix, Location, Option, Severity, fmt_ns, level
from traceinsight.rule_api_job import CrossRankRule, JobContext

#: What the late rank did longer before the collectives it was last at: column of the summary -> words.
_CAUSES = {
    "data_before_ns": ("waited longer for input (data loading)", "input_pipeline"),
    "sync_before_ns": ("spent longer blocked in host syncs", "host_sync"),
    "gpu_before_ns": ("had more GPU work before the collective (slower kernels or a bigger share of the work)", "compute"),
    "idle_before_ns": ("left its GPU idle longer before launching the collective (the host was busy: Python, launches, untraced work)", "gpu_idle"),
}


class Stragglers(CrossRankRule):
    code = "TI020"
    min_ranks = 2  # a straggler is late against other ranks
    needs_collectives = True  # it is read from matched collectives
    names_late_rank = True  # each finding is one late rank: the job verdict names the worst
    name = "rank-stragglers"
    severity = Severity.WARNING
    category = "communication"
    lifecycle = "preview"
    summary = "A rank reaches the collectives late and the other ranks wait for it."
    why = """
    A collective finishes only when the last rank has joined, so in synchronous data-parallel training the whole
    job runs at the pace of its latest rank at every all-reduce. The other ranks have already launched their NCCL
    kernel and spin in it: their GPU looks busy but does nothing. One slow host, a data-loader hiccup, a host sync
    or an uneven shard on one rank therefore costs the job that delay on every GPU, every step.
    """
    definition = """
    Collective kernels (NCCL/RCCL) are matched across ranks by their stream and their index on it (the calls of a
    process group run in the same order on every rank) and the ranks are put on one clock by aligning collective
    end times (see the report's clock note). Per matched **instance**: the **last** rank is the one whose kernel
    starts last; **held** = its start − the second-latest start (the delay it alone imposed: without it the
    collective could have started that much earlier); the others' **wait** = last start − their start.

    Per rank, over the instances it was last at: total held time, the mean wait of the others, per step (median
    step count of the ranks) and as % of the median step. A finding per rank whose held time is at least
    ``min_held_pct_step`` = **2 %** of step time (of its GPU window when the traces have no steps) and at least
    ``min_held_us`` = **50 µs** in total; severity from the one scale of `traceinsight.assess.severity` on that share. What the rank did
    longer is read from its own summary: per instance, its data-loading, host-sync, GPU-compute and GPU-idle time
    since its previous collective minus the median of the other ranks; the largest excess is named, and beside it
    the bucket of its time ledger (ns per step) that exceeds the median rank's the most.

    **Impact** = the rank's total held time: the wall time the job would save if that rank arrived with the
    second-latest one.
    """
    fix_pytorch = Fix(
        "Find out why this rank is late, from the cause named: give its DataLoader more workers / pinned memory, "
        "remove host syncs (`.item()`, `.cpu()`) from its step, balance its share of the data or embedding tables, "
        "and check the host (CPU contention, throttling: `nvidia-smi -q -d PERFORMANCE`). Where the lateness is "
        "inherent, overlap it: DDP buckets (`bucket_cap_mb`) start all-reduces during backward.",
        """
        loader = DataLoader(ds, batch_size=bs, sampler=DistributedSampler(ds, drop_last=True),
                            num_workers=8, pin_memory=True, persistent_workers=True)
        model = DDP(model, device_ids=[local_rank], bucket_cap_mb=25, gradient_as_bucket_view=True)
        """,
    )
    fix_tensorflow = Fix(
        "Shard input evenly (`tf.distribute` auto-shard), prefetch on every worker, and remove host round-trips "
        "(`.numpy()` inside the step) from the slow worker's step function.",
        """
        ds = ds.prefetch(tf.data.AUTOTUNE)
        dist_ds = strategy.experimental_distribute_dataset(ds)
        """,
    )
    fix_jax = Fix(
        "Find out why this process is late, from the cause named: put its next batch on the device ahead of the step, "
        "remove host conversions (`float(loss)`, `np.asarray`) from its loop, give every process an equal shard, and "
        'check its host for CPU contention.',
        """
        nxt = jax.device_put(next(it))          # prefetch to the device
        if step % 100 == 0:                      # convert for logging every N steps only
            print(float(loss))
        """,
    )

    fix_cuda = Fix(
        "Find why this rank reaches the collective late, from the cause named: host work or a blocking sync before "
        "its `ncclAllReduce`, a larger shard, a slower host or GPU (`nvidia-smi -q -d PERFORMANCE`). Queue the "
        "collective on the stream right after the kernels it depends on, with no host sync between them.",
        """
        compute<<<grid, block, 0, s>>>(d_grad, count);                     // no cudaDeviceSynchronize() here
        ncclAllReduce(d_grad, d_grad, count, ncclFloat, ncclSum, comm, s);
        cudaStreamSynchronize(s);                                           // wait once, after it is queued
        """,
    )

    #: The fix for the cause a straggler finding names (``metrics["cause"]``): a rank late from data loading needs
    #: a faster input pipeline, one late from host syncs needs the syncs gone, one with more GPU work needs its
    #: share balanced, one whose host leaves the GPU idle needs fewer, larger launches. No cause: the class fix.
    cause_fixes: dict[str, dict[str, Fix]] = {
        "input_pipeline": {
            "pytorch": Fix(
                "This rank waits longer for input than the others: give its DataLoader worker processes, pinned memory "
                "and prefetching, and check that its shard is not larger or slower to decode than the others'.",
                """
                loader = DataLoader(ds, batch_size=bs, sampler=DistributedSampler(ds, drop_last=True),
                                    num_workers=8, pin_memory=True, persistent_workers=True, prefetch_factor=4)
                """,
            ),
            "tensorflow": Fix(
                "This worker waits longer for input: shard evenly and prefetch on every worker.",
                """
                ds = ds.shard(num_shards, index).map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
                """,
            ),
        },
        "host_sync": {
            "pytorch": Fix(
                "This rank blocks longer in host syncs: remove `.item()`, `.cpu()`, `print(tensor)` and data-dependent "
                "shapes from its step (often rank-0-only logging); `torch.cuda.set_sync_debug_mode('warn')` finds them.",
                """
                torch.cuda.set_sync_debug_mode("warn")
                if step % 100 == 0:            # log every N steps, not every step
                    print(loss.detach().item())
                """,
            ),
            "tensorflow": Fix(
                "This worker blocks longer on host round-trips: remove `.numpy()` and Python-side checks from its step "
                "function, and log every N steps.",
                """
                @tf.function
                def train_step(x, y):
                    ...
                """,
            ),
        },
        "compute": {
            "pytorch": Fix(
                "This rank has more GPU work per step: balance the data (equal batch sizes, bucketed sequence lengths, "
                "`drop_last=True`) or the model (embedding tables, pipeline stages) across ranks, and check that its GPU "
                "is not throttled (`nvidia-smi -q -d PERFORMANCE`).",
                """
                sampler = DistributedSampler(ds, drop_last=True)
                loader = DataLoader(ds, batch_size=bs, sampler=sampler)
                """,
            ),
            "tensorflow": Fix(
                "This worker has more GPU work per step: give every worker the same global-batch share and sequence "
                "length buckets.",
                """
                ds = ds.bucket_by_sequence_length(lambda x, y: tf.shape(x)[0], bucket_boundaries, bucket_batch_sizes)
                """,
            ),
        },
        "gpu_idle": {
            "pytorch": Fix(
                "This rank's host is busier and leaves its GPU idle before the collective: look for extra Python work "
                "on this rank (logging, checkpointing, metrics on rank 0), move it off the step, and cut per-op launch "
                "overhead with `torch.compile` (CUDA graphs: `mode=\"reduce-overhead\"`).",
                """
                model = torch.compile(model, mode="reduce-overhead")
                if rank == 0 and step % 100 == 0:   # rank-0-only work off the hot path
                    log_metrics(step)
                """,
            ),
            "tensorflow": Fix(
                "This worker's host is busier: compile the step with `tf.function(jit_compile=True)` and move "
                "logging and checkpointing out of the step.",
                """
                train_step = tf.function(train_step, jit_compile=True)
                """,
            ),
        },
    }

    min_held_pct_step = Option(2.0, "Report a rank whose held time per step is at least this % of the median step.")
    min_held_us = Option(50.0, "...and at least this much in total (µs).")
    max_ranks = Option(10, "Report at most this many ranks (the worst ones); the rest are counted in the last finding's metrics.", min=1)

    def check_job(self, job: JobContext):
        j = job.job
        inst = j.instances
        if not j.is_multi_rank or inst.empty:
            return
        o = job.options
        coll = j.collectives
        n_steps = j.step_count
        step_ns = j.step_ns
        per = inst.groupby("last_rank").agg(
            n_last=("instance", "size"), held_ns=("held_ns", "sum"), others_wait_ns=("mean_wait_ns", "sum"), max_held_ns=("held_ns", "max"), median_held_ns=("held_ns", "median")
        )
        per = per.sort_values(["held_ns", "n_last"], ascending=[False, False])
        basis_ns = float(step_ns) if step_ns and n_steps else float(j.span_ns or 1)
        per_basis = per["held_ns"] / (n_steps if step_ns and n_steps else 1)
        pct = 100.0 * per_basis / basis_ns
        keep = (pct >= o["min_held_pct_step"]) & (per["held_ns"] >= o["min_held_us"] * 1e3)
        flagged = per[keep].head(int(o["max_ranks"]))
        if flagged.empty:
            return
        causes = _causes(coll, inst)
        led = _ledger_excess(j.ledger)
        unit = "per step" if step_ns and n_steps else "over the trace"
        basis_word = "step time" if step_ns and n_steps else "the GPU window"
        for rank, row in flagged.iterrows():
            rank = int(rank)
            p = float(pct.loc[rank])
            held_unit = float(per_basis.loc[rank])
            wait_unit = float(row["others_wait_ns"]) / (n_steps if step_ns and n_steps else 1)
            mine = inst[inst["last_rank"] == rank].sort_values("held_ns", ascending=False)
            cause = causes.get(rank)
            cause_text = ""
            if cause is not None:
                words, cat, excess = cause
                cause_text = f" Before those collectives it {words}: {fmt_ns(excess / max(int(row['n_last']), 1))} more per collective than the median rank."
            if rank in led:
                bucket, extra = led[rank]
                cause_text += f" Its time ledger: {fmt_ns(extra)} more per step in {bucket.replace('_', ' ')} than the median rank."
            msg = (
                f"Rank {rank} makes the others wait {fmt_ns(held_unit)} {unit} ({p:.0f} % of {basis_word}): it was the last to arrive at "
                f"{int(row['n_last'])} of {len(inst)} collectives, {fmt_ns(row['median_held_ns'])} after the next-latest rank (median; "
                f"{fmt_ns(row['max_held_ns'])} at most). At those collectives the other ranks waited {fmt_ns(wait_unit)} {unit} on average "
                "for the last arrival (including waits for other late ranks)." + cause_text
            )
            ev = pd.DataFrame(
                {
                    "collective": [f"{k} #{s} ({g})" for k, s, g in zip(mine["kind"], mine["seq"], mine["group"])],
                    "ranks": mine["n_ranks"].astype(int).to_numpy(),
                    "held_ms": (mine["held_ns"] / 1e6).round(3).to_numpy(),
                    "others_wait_ms": (mine["mean_wait_ns"] / 1e6).round(3).to_numpy(),
                    "transfer_ms": (mine["transfer_ns"] / 1e6).round(3).to_numpy(),
                    "start_ms": (mine["last_start_ns"] / 1e6).round(3).to_numpy(),
                }
            )
            late = pd.DataFrame(
                {
                    "start_ns": j.rank_ns(rank, mine["second_start_ns"].to_numpy(np.int64)),
                    "end_ns": j.rank_ns(rank, mine["last_start_ns"].to_numpy(np.int64)),
                    "rank": rank,
                    "label": [f"{k} #{s}: the others waited" for k, s in zip(mine["kind"], mine["seq"])],
                }
            )
            yield job.finding(
                instances=late,
                title=f"Rank {rank} is a straggler: the others wait {fmt_ns(held_unit)} {unit} for it ({p:.0f} % of {basis_word})",
                message=msg,
                impact_ns=int(row["held_ns"]),
                evidence=ev,
                location=Location(rank=rank),
                severity=level(p),
                metrics={
                    "rank": rank,
                    "collectives_last": int(row["n_last"]),
                    "collectives_matched": int(len(inst)),
                    "held_ns": int(row["held_ns"]),
                    "held_per_step_ns": int(round(held_unit)),
                    "median_held_ns": int(row["median_held_ns"]),
                    "others_wait_per_step_ns": int(round(wait_unit)),
                    "pct_step": round(p, 3),
                    "steps": int(n_steps),
                    "cause": None if cause is None else cause[1],
                    "cause_excess_ns": None if cause is None else int(cause[2]),
                    "clock_residual_p95_ns": int(j.alignment.residual_p95_ns),
                },
                key=f"straggler-rank-{rank}",
                fixes={**type(self).fixes(), **self.cause_fixes[cause[1]]} if cause is not None and cause[1] in self.cause_fixes else None,
            )


#: Ledger buckets that make a rank late (its GPU not reaching the collective): idle causes and its own compute.
_LATE_BUCKETS = ("compute", "copy", "idle_data_wait", "idle_host_sync", "idle_launch_bound", "idle_host_busy", "idle_untraced", "idle_gpu_dependency", "idle_other")


def _ledger_excess(ledger: pd.DataFrame) -> dict[int, tuple[str, float]]:
    """Per rank: the ledger bucket (ns per step) it exceeds the median rank by most, when it exceeds it at all."""
    if ledger is None or ledger.empty:
        return {}
    wide = ledger.pivot_table(index="rank", columns="bucket", values="ns", aggfunc="sum", fill_value=0)
    wide = wide[[b for b in _LATE_BUCKETS if b in wide.columns]]
    if wide.empty or len(wide) < 2:
        return {}
    excess = wide - wide.median()
    best = excess.idxmax(axis=1)
    return {int(r): (str(b), float(excess.loc[r, b])) for r, b in best.items() if excess.loc[r, b] > 0}


def _causes(coll: pd.DataFrame, inst: pd.DataFrame) -> dict[int, tuple[str, str, float]]:
    """Per last rank: the before-collective component it exceeded the others' median by most (summed)."""
    m = coll[coll["instance"] >= 0]
    if m.empty:
        return {}
    cols = list(_CAUSES)
    med = m.groupby("instance")[cols].median()
    last = inst.set_index("instance")["last_rank"]
    mine = m[m["rank"].to_numpy() == m["instance"].map(last).to_numpy()].set_index("instance")
    excess = (mine[cols] - med.reindex(mine.index)).clip(lower=0)
    excess["rank"] = mine["rank"]
    tot = excess.groupby("rank")[cols].sum()
    out = {}
    for rank, row in tot.iterrows():
        best = row.idxmax()
        if row[best] > 0:
            words, cat = _CAUSES[best]
            out[int(rank)] = (words, cat, float(row[best]))
    return out
