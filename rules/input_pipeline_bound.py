"""TI005: the training loop waits for its input pipeline (DataLoader / tf.data) instead of feeding the GPU."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.rulelib import in_use
from traceinsight.rule_api import Context, Fix, Location, Option, Rule, Severity, fmt_ns

from traceinsight.vocab.intervals import Coverage, merge_grouped
from traceinsight.vocab.masks import name_mask

from traceinsight.vocab.patterns import DATA_WAIT_PRIMARY, DATA_WAIT_TFDATA
from traceinsight.rulelib.usercode import lead_source, shown_frames, user_code_sentence, user_frame_texts

#: Host kinds that carry data-loading ranges; Python frames are left out because with_stack traces repeat the
#: same wait as nested frames on the same thread, and the op/annotation already covers it.
_WAIT_KINDS = ("cpu_op", "annotation", "other")


class InputPipelineBound(Rule):
    code = "TI005"
    what_if = "remove_data_wait"  # the what-if transform that models this rule's fix
    category = "input_pipeline"
    name = "input-pipeline-bound"
    severity = Severity.WARNING
    summary = "A large share of each step is spent waiting for the next batch from the input pipeline."
    why = """
    While the training loop sits in ``next(data_iter)`` nothing new is queued on the GPU, so whatever part of that
    wait the GPU cannot cover with already-queued work becomes idle GPU time. A data loader that runs in the main
    process (``num_workers=0``), decodes images on the fly or reads from slow storage can easily cost a third of
    every step; in the tb_plugin ResNet-50 sample it is 39.6 % of the step with ``num_workers=0`` and 1 % with 4.
    """
    definition = """
    **Data wait** = the union, per rank, of host ranges named ``enumerate(DataLoader)#…`` /
    ``enumerate(DataPipe)#…`` (PyTorch profiler, the prefix tb_plugin's event parser uses), any op or annotation whose
    name contains ``DataLoader`` and ``__next__``, and TensorFlow ``IteratorGetNext*`` (xprof's HOST_WAIT_INPUT).
    tf.data ``Iterator::…`` ranges count only on a thread that also consumes (has an ``IteratorGetNext`` or a step
    marker), since on tf.data's own worker threads they are background production, not waiting.

    **Share** = data wait inside step markers / total step time (summed over ranks). Without step markers:
    data wait / span of the trace, and the finding says so.

    Reported when share >= ``min_share_pct`` = **5 %** (tb_plugin's DataLoader recommendation, also xprof's
    "moderately input-bound" bound); severity becomes **error** at ``error_share_pct`` = **20 %** (xprof's
    "HIGHLY input-bound" bound, kHighlyInfeedBoundThresholdInPercent).

    **Impact** = the part of the data wait during which the rank's GPU is idle (``views.gaps``; with several
    devices on one rank the smallest overlap of any of them, so the estimate never exceeds what every device
    would gain). Time the GPU spends on queued work while the host waits is not counted: it is not lost.
    """
    fix_pytorch = Fix(
        "Load batches in worker processes and overlap them with compute: raise `num_workers` (start with the "
        "number of CPU cores per GPU), keep the workers alive between epochs, pin host memory so the copy can be "
        "asynchronous, and prefetch a few batches per worker. If workers are already many, the cost is in the "
        "transform: move decoding/augmentation to the GPU (e.g. DALI, torchvision.transforms.v2 on tensors) or "
        "pre-process offline.",
        """
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=256, shuffle=True,
            num_workers=8,            # was 0: loading ran in the training process
            pin_memory=True,          # page-locked batches -> async H2D copies
            persistent_workers=True,  # no worker re-spawn each epoch
            prefetch_factor=4,        # batches queued per worker
        )
        for x, y in loader:
            x = x.cuda(non_blocking=True); y = y.cuda(non_blocking=True)
        """,
    )
    #: The loader already runs worker processes (``_MultiProcessingDataLoaderIter`` in the wait's name) and the step
    #: still waits: the workers are too few or too slow, so "raise num_workers from 0" would advise what is done.
    FIX_WITH_WORKERS = Fix(
        "The DataLoader already loads in worker processes (`_MultiProcessingDataLoaderIter`) and the step still waits "
        "for them: they are too few or too slow for the GPU. Raise `num_workers` towards the CPU cores per GPU, queue "
        "more batches per worker (`prefetch_factor`), keep them alive between epochs, and if the cores are already "
        "busy make each sample cheaper: decode once and cache, move augmentation to the GPU (DALI, "
        "torchvision.transforms.v2 on GPU tensors), or pre-process offline.",
        """
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=256, shuffle=True,
            num_workers=os.cpu_count() // torch.cuda.device_count(),  # more workers, up to the cores per GPU
            prefetch_factor=8, persistent_workers=True, pin_memory=True,
        )
        # then profile a worker alone: time dataset[i] for a few i (decode vs augmentation)
        """,
    )
    fix_tensorflow = Fix(
        "Parallelise and overlap the tf.data pipeline: map with `num_parallel_calls=tf.data.AUTOTUNE`, cache "
        "what fits after the expensive decode, and end the pipeline with `.prefetch(tf.data.AUTOTUNE)` so the "
        "next batch is ready while the current step runs. The TensorBoard Profiler's input-pipeline page shows "
        "which stage is slow.",
        """
        ds = (tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE)
              .map(parse_and_augment, num_parallel_calls=tf.data.AUTOTUNE)
              .cache()                       # after decode, if it fits in memory/disk
              .shuffle(10_000)
              .batch(256, drop_remainder=True)
              .prefetch(tf.data.AUTOTUNE))   # overlap input with the training step
        """,
    )
    fix_jax = Fix(
        "Keep the next batches on the device before the step asks: prefetch to device (two batches), do the "
        "decoding in tf.data or grain worker threads, and jit the step so the host returns at once.",
        """
        batches = flax.jax_utils.prefetch_to_device(iter(ds.as_numpy_iterator()), size=2)
        train_step = jax.jit(train_step, donate_argnums=(0,))
        for batch in batches:
            state, metrics = train_step(state, batch)
        """,
    )

    fix_cuda = Fix(
        "The GPU waits while the host prepares the next input: prepare inputs ahead in a host thread into a ring of "
        "pinned buffers (`cudaMallocHost`) and copy the next one with `cudaMemcpyAsync` on a copy stream while the "
        "current one computes, so input i+1 is on the device when step i ends.",
        """
        for (int i = 0; i < n; ++i) {                     // h_in[] filled ahead by a loader thread
            int cur = i % 2, nxt = (i + 1) % 2;
            cudaMemcpyAsync(d_in[nxt], h_in[nxt], bytes, cudaMemcpyHostToDevice, copy);
            cudaEventRecord(ready[nxt], copy);
            cudaStreamWaitEvent(compute, ready[cur], 0);   // input i copied (the first before the loop)
            step<<<grid, block, 0, compute>>>(d_in[cur], d_out);
        }
        """,
    )

    min_share_pct = Option(5.0, "Report when data wait is at least this % of step time (tb_plugin: 5 %).", max=100)
    error_share_pct = Option(20.0, "Severity becomes error at this % of step time (xprof: highly input-bound, 20 %).", max=100)
    include_tfdata_iterator = Option(True, "Count tf.data `Iterator::...` ranges on consumer threads.")

    def check(self, ctx: Context):
        host = ctx.views.host_events
        if host.empty:
            return
        names = host["name"]
        primary = name_mask(names, DATA_WAIT_PRIMARY, case=True)
        tfdata = name_mask(names, DATA_WAIT_TFDATA, case=True) if ctx.options["include_tfdata_iterator"] else None
        if not primary.any() and (tfdata is None or not tfdata.any()):
            return  # no name says data wait: the kinds need not be read
        kind_ok = host["kind"].isin(_WAIT_KINDS).to_numpy()
        primary = kind_ok & primary
        tfdata = kind_ok & tfdata & ~primary if tfdata is not None else None
        if not primary.any() and (tfdata is None or not tfdata.any()):
            return  # no data wait at all: nothing below would find one
        waits = host[primary]
        if tfdata is not None:
            if tfdata.any():
                steps_rows = host[host["kind"] == "step"]
                consumers = pd.concat([waits[["rank", "tid"]], steps_rows[["rank", "tid"]]]).drop_duplicates()
                cand = host[tfdata]
                on_consumer = cand.merge(consumers.assign(_c=True), on=["rank", "tid"], how="left")["_c"].fillna(False).to_numpy(dtype=bool)
                waits = pd.concat([waits, cand[on_consumer]])
        if waits.empty:
            return

        starts = waits["start_ns"].to_numpy()
        wait_u = merge_grouped(waits["rank"].to_numpy(), starts, starts + waits["dur_ns"].to_numpy())
        steps = ctx.views.steps
        ranks = np.unique(wait_u["group"].to_numpy())

        per_step = []
        wait_in_steps = 0
        step_total = 0
        if not steps.empty:
            for rank in ranks:
                w = wait_u[wait_u["group"] == rank]
                st = steps[steps["rank"] == rank]
                if st.empty:
                    continue
                cov = Coverage(w["start_ns"].to_numpy(), w["end_ns"].to_numpy()).overlap(st["start_ns"].to_numpy(), st["end_ns"].to_numpy())
                per_step.append(pd.DataFrame({"rank": rank, "step": st["step"].to_numpy(), "step_ms": st["dur_ns"].to_numpy() / 1e6, "data_wait_ms": cov / 1e6}))
                wait_in_steps += int(cov.sum())
            step_total = int(steps[steps["rank"].isin(ranks)]["dur_ns"].sum())
        if step_total > 0:
            basis = "step time"
            wait_ns = wait_in_steps
            denom = step_total
        else:
            basis = "trace span"
            wait_ns = int((wait_u["end_ns"] - wait_u["start_ns"]).sum())
            denom = int(ctx.views.span_ns) * max(len(ranks), 1)
        if denom <= 0:
            return
        share = 100.0 * wait_ns / denom
        if share < ctx.options["min_share_pct"]:
            return

        # Impact: data wait while the GPU(s) of that rank had nothing to do.
        gaps = ctx.views.gaps
        impact = 0
        for rank in ranks:
            w = wait_u[wait_u["group"] == rank]
            g_rank = gaps[gaps["rank"] == rank]
            if g_rank.empty:
                continue
            per_dev = [
                int(Coverage(g["start_ns"].to_numpy(), g["end_ns"].to_numpy()).overlap(w["start_ns"].to_numpy(), w["end_ns"].to_numpy()).sum())
                for _, g in g_rank.groupby("device", sort=True)
            ]
            impact += min(per_dev)

        if per_step:
            evidence = pd.concat(per_step, ignore_index=True)
            evidence["share_pct"] = np.where(evidence["step_ms"] > 0, 100.0 * evidence["data_wait_ms"] / evidence["step_ms"].where(evidence["step_ms"] > 0, 1), 0.0).round(2)
        else:
            top = waits.assign(dur_ms=waits["dur_ns"] / 1e6).groupby(["rank", "name"], observed=True)["dur_ms"].agg(["count", "sum"]).reset_index()
            evidence = top.sort_values("sum", ascending=False).head(20).rename(columns={"sum": "total_ms"})

        names = waits["name"].astype(str).value_counts()
        top_name = str(names.index[0])
        sev = Severity.ERROR if share >= ctx.options["error_share_pct"] else Severity.WARNING
        if ctx.views.gpu_activity.empty:
            sev = Severity.INFO  # a CPU-only profile: the wait costs the host's step, no GPU lost anything (TI011)
        n_steps = len(evidence) if per_step else 0
        msg = (
            f"{share:.1f}% of {basis} ({fmt_ns(wait_ns)} of {fmt_ns(denom)}) is spent waiting for input "
            f"(`{top_name}`" + (f" and {len(names) - 1} other name(s)" if len(names) > 1 else "") + "). "
            f"During {fmt_ns(impact)} of that wait the GPU was idle."
        )
        frame_texts = user_frame_texts(waits, ctx.events, ctx.views.host_events)
        msg += user_code_sentence(shown_frames(frame_texts), ctx, "The wait is at")
        if n_steps:
            msg += f" Over {n_steps} step(s) the per-step share ranges {evidence['share_pct'].min():.1f}-{evidence['share_pct'].max():.1f}%."
        workers = "loader_workers" in in_use(ctx.views)
        yield ctx.finding(
            fixes={**type(self).fixes(), **({"pytorch": self.FIX_WITH_WORKERS} if workers else {})},
            title=f"Input pipeline takes {share:.1f}% of {basis}",
            message=msg,
            impact_ns=impact,
            evidence=evidence,
            instances=wait_u.rename(columns={"group": "rank"}).assign(label="data wait"),
            severity=sev,
            location=Location(rank=int(ranks[0]) if len(ranks) == 1 else None),
            source=lead_source(frame_texts),
            metrics={
                "share_pct": round(share, 3),
                "basis": basis,
                "data_wait_ns": int(wait_ns),
                "denominator_ns": int(denom),
                "data_wait_gpu_idle_ns": int(impact),
                "wait_ranges": int(len(waits)),
                "ranks": [int(r) for r in ranks],
                "names": {str(k): int(v) for k, v in names.head(10).items()},
            },
            key="input-wait",
        )
