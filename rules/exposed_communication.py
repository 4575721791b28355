"""TI021: communication that is not hidden behind compute, per rank."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.rule_api import Fix, Location, Option, Severity, fmt_ns, level
from traceinsight.rule_api_job import CrossRankRule, JobContext

#: DDP/FSDP overlap advice; ``compress`` and ``hook`` name the gradient compression the GPU supports.
_DDP_TEXT = (
    "Overlap communication with backward: DDP starts all-reduce per bucket, so tune `bucket_cap_mb` (smaller "
    "buckets start earlier, larger ones cost fewer launches) and keep `gradient_as_bucket_view=True`; "
    "accumulate gradients over several micro-batches under `no_sync()` so you all-reduce once per N steps; "
    "with FSDP set `backward_prefetch=BackwardPrefetch.BACKWARD_PRE` and `forward_prefetch=True`; compress "
    "gradients {compress} when the link is the limit."
)
_DDP_CODE = """
    model = DDP(model, device_ids=[local_rank], bucket_cap_mb=50, gradient_as_bucket_view=True)
    model.register_comm_hook(None, torch.distributed.algorithms.ddp_comm_hooks.default_hooks.{hook})
    for i, batch in enumerate(loader):
        ctx = model.no_sync() if (i + 1) % accum_steps else contextlib.nullcontext()
        with ctx:
            loss = model(batch).sum() / accum_steps
            loss.backward()
        if (i + 1) % accum_steps == 0:
            opt.step(); opt.zero_grad(set_to_none=True)
"""


class ExposedCommunication(CrossRankRule):
    code = "TI021"
    needs_collectives = True  # exposed communication is collective time
    name = "exposed-communication"
    severity = Severity.WARNING
    category = "communication"
    lifecycle = "preview"
    summary = "Collective (NCCL/RCCL) time on a GPU with no compute beside it: communication the step waits for."
    why = """
    Gradient all-reduce, FSDP all-gather / reduce-scatter and all-to-all are meant to run while the GPU computes
    (DDP starts a bucket's all-reduce as soon as its gradients are ready; FSDP prefetches the next layer's
    parameters). Communication that runs with no kernel beside it adds straight to the step time: the GPU has
    nothing to do until the bytes arrive. HTA reports the same thing from the other side, as the share of
    communication time overlapped with computation.
    """
    definition = """
    Per rank, over its GPU window: **communication** = union of collective kernels (``nccl``, ``rccl``,
    ``all_reduce`` … names); **compute** = union of every other kernel, copy and memset; **exposed** =
    communication time with no compute at the same time (busy − compute). **Overlap** = 1 − exposed /
    communication (HTA's comm/comp overlap).

    In a multi-rank job the time a rank's collective kernels spent waiting for a later rank (last arrival − its
    own start, per matched collective) is taken out first: that is a straggler's cost (TI020), not a transfer to
    hide. On one rank's trace the waiting cannot be told apart and the whole exposed time counts.

    A rank is reported when the remaining exposed time is at least ``min_exposed_pct`` = **5 %** of its GPU window
    and at least ``min_exposed_us`` = **100 µs**; its severity comes from the one scale every rule uses
    (`traceinsight.assess.severity`: error >= 20 %, warning >= 5 %, info below) applied to that share. The message also gives
    the exposed time as a share of the GPU's busy time: on a GPU that is mostly idle for other reasons, a quarter
    of its work being unhidden communication is still worth fixing once the idle is gone. It runs on one rank's trace too: exposed communication is a property of each
    rank.

    **Impact** = the median over reported ranks of that exposed transfer time: what the step would lose if it were
    hidden behind compute.
    """
    fix_pytorch = Fix(_DDP_TEXT.format(compress="(`bf16_compress_hook`)"), _DDP_CODE.format(hook="bf16_compress_hook"))
    #: before Ampere there is no bf16: gradients compress in fp16
    fix_variants = {
        "pytorch:pre_ampere": Fix(
            _DDP_TEXT.format(compress="in fp16 (`fp16_compress_hook`: this GPU predates Ampere and has no bf16)"),
            _DDP_CODE.format(hook="fp16_compress_hook"),
        ),
    }
    fix_tensorflow = Fix(
        "Let the all-reduce overlap the backward pass: `MultiWorkerMirroredStrategy` with "
        "`CommunicationOptions(bytes_per_pack=...)` packs gradients so reduction starts early; accumulate "
        "gradients over several micro-batches to reduce less often.",
        """
        options = tf.distribute.experimental.CommunicationOptions(
            bytes_per_pack=50 * 1024 * 1024,
            implementation=tf.distribute.experimental.CommunicationImplementation.NCCL)
        strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        """,
    )
    fix_jax = Fix(
        "Let XLA overlap the collectives with compute: keep the whole step in one `jax.jit` over sharded inputs so the "
        "compiler schedules gradient reductions during the backward pass, turn on the latency-hiding scheduler "
        "(`--xla_gpu_enable_latency_hiding_scheduler=true`), and accumulate gradients over micro-batches to reduce less"
        ' often.',
        """
        # export XLA_FLAGS=--xla_gpu_enable_latency_hiding_scheduler=true
        mesh = jax.make_mesh((jax.device_count(),), ("data",))
        batch = jax.device_put(batch, NamedSharding(mesh, P("data")))
        train_step = jax.jit(train_step, donate_argnums=(0,))
        """,
    )

    fix_cuda = Fix(
        "Overlap the collective with compute: split the work into chunks and issue each chunk's `ncclAllReduce` on "
        "a communication stream as soon as its data is ready (an event), while the compute stream goes on with the "
        "next chunk.",
        """
        for (int c = 0; c < chunks; ++c) {
            grad<<<grid, block, 0, compute>>>(d_grad + c * len, len);
            cudaEventRecord(ready[c], compute);
            cudaStreamWaitEvent(comm_stream, ready[c], 0);
            ncclAllReduce(d_grad + c * len, d_grad + c * len, len, ncclFloat, ncclSum, comm, comm_stream);
        }
        """,
    )

    min_exposed_pct = Option(5.0, "Report a rank whose exposed communication is at least this % of its GPU window (severity info).", max=100)
    min_exposed_us = Option(100.0, "...and at least this much in total (µs).")

    def check_job(self, job: JobContext):
        j = job.job
        per = j.ranks
        if per.empty or int(per["comm_ns"].sum()) == 0:
            return
        o = job.options
        win = per["window_ns"].clip(lower=1).astype(float)
        waiting = per["wait_ns"].clip(upper=per["exposed_ns"])
        transfer = (per["exposed_ns"] - waiting).clip(lower=0)
        share = 100.0 * transfer / win
        hit = (share >= o["min_exposed_pct"]) & (transfer >= o["min_exposed_us"] * 1e3)
        if not hit.any():
            return
        flagged = per[hit]
        overlap = 100.0 * (1.0 - per["exposed_ns"] / per["comm_ns"].clip(lower=1))
        impact = int(np.median(transfer[hit]))
        top = float(share[hit].max())
        worst = flagged.assign(share=share[hit]).sort_values("share", ascending=False)
        w = worst.iloc[0]
        wr = int(w["rank"])
        kernel_share = 100.0 * per["comm_ns"] / per["busy_ns"].clip(lower=1)
        n, total = int(hit.sum()), len(per)
        where = f"rank {wr}" if total == 1 else f"{n} of {total} ranks"
        msg = (
            f"On {where}, communication runs with no compute beside it: {fmt_ns(transfer.loc[w.name])} "
            f"({share[hit].max():.0f} % of the GPU window, {100.0 * transfer.loc[w.name] / max(float(w['busy_ns']), 1.0):.0f} % of GPU busy time) on rank {wr}, "
            f"where collectives are {kernel_share.loc[w.name]:.0f} % of GPU busy time and only {max(overlap.loc[w.name], 0):.0f} % of their time overlaps compute."
        )
        if j.is_multi_rank and int(waiting.sum()) > 0:
            msg += (
                f" Not counted: time collectives spent waiting for later ranks ({fmt_ns(float(waiting.median()))} per rank, median; "
                f"{fmt_ns(waiting.loc[w.name])} on rank {wr}), which is fixed on the late rank (see TI020), not by hiding transfers."
            )
        msg += " Hide it behind backward (DDP buckets, FSDP prefetch) or communicate less often (gradient accumulation)."
        ev = pd.DataFrame(
            {
                "rank": per["rank"].astype(int),
                "comm_ms": (per["comm_ns"] / 1e6).round(3),
                "exposed_ms": (per["exposed_ns"] / 1e6).round(3),
                "transfer_exposed_ms": (transfer / 1e6).round(3),
                "waiting_ms": (waiting / 1e6).round(3),
                "exposed_pct_window": share.round(1),
                "overlap_pct": overlap.clip(lower=0).round(1),
                "comm_pct_busy": kernel_share.round(1),
            }
        ).sort_values("exposed_pct_window", ascending=False).reset_index(drop=True)
        yield job.finding(
            title=f"Exposed communication: {share[hit].max():.0f} % of the GPU window on rank {wr} is collectives with no compute beside them",
            message=msg,
            impact_ns=impact,
            evidence=ev,
            location=Location(rank=wr) if total == 1 else Location(),
            severity=level(top),
            metrics={
                "ranks_flagged": n,
                "ranks_total": total,
                "worst_rank": wr,
                "exposed_ns": int(w["exposed_ns"]),
                "exposed_transfer_ns": int(transfer.loc[w.name]),
                "exposed_pct_window": round(float(share[hit].max()), 3),
                "comm_ns": int(w["comm_ns"]),
                "overlap_pct": round(float(max(overlap.loc[w.name], 0.0)), 3),
                "comm_pct_busy": round(float(kernel_share.loc[w.name]), 3),
                "waiting_ns": int(waiting.loc[w.name]),
                "median_transfer_exposed_ns": impact,
            },
            key="exposed-communication",
        )
