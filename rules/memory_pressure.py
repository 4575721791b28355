"""TI031: GPU memory at its limit: out-of-memory events, a peak near capacity, or allocator flushes (cudaFree) in
the steady state."""

from __future__ import annotations

import pandas as pd

from traceinsight.derive.memory import FREE_CALLS, fmt_bytes
from traceinsight.rule_api import Context, Fix, Location, Option, Rule, Severity, fmt_ns
from traceinsight.rulelib.releases import allocator_off_calls, asked_for

FIX_EMPTY_CACHE = Fix(
    "Remove `torch.cuda.empty_cache()` (and `gc.collect()` paired with it) from the training loop: the caching "
    "allocator reuses freed blocks by itself, and each call hands them back to the driver, synchronises the device "
    "and makes the next step allocate again. Call it only between phases (after evaluation, before a larger model).",
    """
    for batch in loader:
        loss = step(batch)
        # torch.cuda.empty_cache()   # remove: the allocator keeps its blocks for the next step
    """,
)


class MemoryPressure(Rule):
    code = "TI031"
    name = "memory-pressure"
    category = "host_sync"
    #: a flush costs the GPU the idle while the host sits in its calls: the device drains under the first (a sync),
    #: and the driver's own work in them and the ones after, with nothing queued, is host time between launches
    claims = ("idle_host_sync", "idle_host_busy")
    severity = Severity.WARNING
    lifecycle = "preview"
    #: a memory finding is a risk or an opportunity, not time measured on the timeline: its severity is the rule's
    graded = False
    summary = "GPU memory is at its limit: out-of-memory events, a peak near capacity, or cudaFree flushes in steady state."
    why = """
    A caching allocator that cannot find a free block first returns its cached blocks to the driver (`cudaFree`
    on every one: each call synchronises the whole device, so the host stops until all queued work ends) and then
    retries; when that fails the framework raises out-of-memory. Long before the error, a run near capacity pays
    these flushes in the middle of steps, and a job that fits only just breaks on the next longer sequence or larger
    batch. The PyTorch TensorBoard plugin flagged memory above 90 % of the device for the same reason.
    """
    definition = """
    Per GPU with memory events:

    * **out of memory**: any `[OutOfMemory]` event (kineto) — severity **error**;
    * **near capacity**: the peak reserved (allocated where reserved is not recorded) at least `min_peak_share_pct`
      (default **90 %**, the TensorBoard plugin's cut) of the device's capacity. Memory an engine or framework
      reserves on purpose is judged on what is in use (`Memory.reservation`, from the trace's own names and
      framework): JAX's 75 % preallocation and TensorFlow's BFC pool on their allocated level; a serving engine's
      KV cache (vLLM `gpu_memory_utilization`, SGLang `mem_fraction_static`, TensorRT-LLM
      `free_gpu_memory_fraction`) is sized to the GPU by design and is never pressure by itself. Such a peak gets
      an info finding that names the engine and why it is no pressure;
    * **flushes**: calls that release device memory (`cudaFree`, `hipFree`, `cuMemFree`, `cuMemRelease`,
      `cuMemUnmap`) inside steps after the rank's warm-up (the end of its first step, extended over the ledger's
      warm-up regions; a rank needs at least two steps, without step markers a program's exit cannot be told from
      its loop), at least `min_flushes` (default **1**): a caching allocator only calls them under pressure or when
      asked to (`empty_cache`). Their time is the impact: the host is blocked in each while the device drains.
      Releases that run outside every framework op (the allocator's own flush runs inside the op whose allocation
      failed) or on a device whose peak stayed under half its capacity (`ASKED_BELOW_PEAK_SHARE`) are the
      program's request, not pressure: the finding says so ("asked for, not pressure") and its PyTorch fix is to
      remove `torch.cuda.empty_cache()` from the loop.
    """
    fix_pytorch = Fix(
        "Lower the memory a step needs: activation checkpointing on the largest blocks, mixed precision (bf16/fp16 "
        "activations), a smaller micro-batch with gradient accumulation to keep the global batch, and "
        "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` so the allocator grows segments instead of flushing "
        "its cache. Remove `torch.cuda.empty_cache()` from the training loop.",
        """
        # export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
        from torch.utils.checkpoint import checkpoint
        h = checkpoint(block, h, use_reentrant=False)           # recompute activations in backward
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).loss / accum_steps                   # micro-batch = batch / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            opt.step(); opt.zero_grad(set_to_none=True)
        """,
    )
    fix_tensorflow = Fix(
        "Lower the memory a step needs: mixed precision (`mixed_float16`), recomputation of activations "
        "(`tf.recompute_grad`), a smaller per-replica batch with gradient accumulation; keep "
        "`set_memory_growth` off in production so the BFC allocator reserves once.",
        """
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        block = tf.recompute_grad(block)
        """,
    )
    fix_jax = Fix(
        "Lower the memory a step needs: rematerialise the largest blocks (`jax.checkpoint`), compute in bf16, donate "
        "the buffers the step replaces (`donate_argnums`), or use a smaller micro-batch with gradient accumulation; "
        'raise `XLA_PYTHON_CLIENT_MEM_FRACTION` only when nothing else shares the GPU.',
        """
        block = jax.checkpoint(block)                              # recompute activations in backward
        train_step = jax.jit(train_step, donate_argnums=(0,))      # reuse the state's buffers in place
        """,
    )
    fix_cuda = Fix(
        "Allocate once and reuse: keep device buffers for the life of the loop (or use a stream-ordered pool, "
        "`cudaMallocAsync` with a release threshold) instead of `cudaMalloc`/`cudaFree` per iteration, which "
        "synchronises the device.",
        """
        cudaMemPool_t pool; cudaDeviceGetDefaultMemPool(&pool, 0);
        uint64_t keep = UINT64_MAX; cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
        cudaMallocAsync(&buf, bytes, stream); /* ... */ cudaFreeAsync(buf, stream);
        """,
    )

    min_peak_share_pct = Option(90.0, "Report a peak at least this % of capacity.")
    min_flushes = Option(1, "Report at least this many memory-releasing calls after warm-up.")

    def check(self, ctx: Context):
        mem = ctx.views.memory
        frees = mem.steady_allocator_calls(FREE_CALLS)
        if len(frees):  # stream-ordered frees do not synchronise
            frees = frees[~frees["name"].astype(str).str.contains("Async").to_numpy()]
        if len(frees):  # frees that pair with mallocs every step are an allocator that does not cache: TI032's
            frees = frees[~allocator_off_calls(ctx.views, frees)]
        seen_ranks = set()
        held = mem.reservation
        for d in mem.devices:
            near = d.peak_share is not None and not d.relative and d.peak and d.peak_share * 100.0 >= self.min_peak_share_pct
            f = frees[frees["rank"].to_numpy() == d.rank] if d.rank not in seen_ranks else frees.iloc[:0]
            seen_ranks.add(d.rank)
            n_flush = len(f) if len(f) >= self.min_flushes else 0
            on_purpose = False
            if near and held is not None:
                # memory an engine holds on purpose is judged on what is in use: a pool's allocated level, and for an
                # engine whose own KV cache fills its reservation, nothing (the cache is sized to the GPU by design)
                used = mem.in_use_peak(d)
                near = bool(held.pool and used is not None and d.capacity and used / d.capacity * 100.0 >= self.min_peak_share_pct)
                on_purpose = not near
            if on_purpose and not (d.oom_events or n_flush):
                yield self._held_on_purpose(ctx, d, held)
                continue
            if not (d.oom_events or near or n_flush):
                continue
            yield self._finding(ctx, d, near, f if n_flush else f.iloc[:0])
        if not mem.devices and len(frees) >= self.min_flushes:  # runtime calls only (no memory events recorded)
            for rank, f in frees.groupby("rank", sort=True):
                yield self._finding(ctx, None, False, f, rank=int(rank))

    def _held_on_purpose(self, ctx: Context, d, held):
        """An info finding that says who holds the memory and why it is no pressure: the peak alone would have read
        as "memory pressure" to anyone who does not know the engine."""
        where = f"rank {d.rank} GPU {d.device}"
        share = 100 * d.peak_share
        return ctx.finding(
            title=f"{where}: {share:.0f} % of memory reserved by {held.engine} on purpose, not pressure",
            message=(f"On {where}, the peak reached {fmt_bytes(d.peak)} of {fmt_bytes(d.capacity)} ({share:.0f} %). "
                     + held.sentence(share) + ". No allocation failed and no allocator flush ran in the steady "
                     "state: this is no memory pressure."),
            impact_ns=0,
            severity=Severity.INFO,
            fixes=dict.fromkeys(("pytorch", "tensorflow", "jax"), Fix(
                f"Nothing to fix: {held.engine} sized this reservation on purpose. Lower it only when another "
                "process must share the GPU or a request needs memory outside it.", held.lower)),
            metrics={"rank": d.rank, "device": d.device, "oom_events": 0, "peak_bytes": int(d.peak),
                     "capacity_bytes": d.capacity, "peak_share_pct": round(share, 3), "steady_state_frees": 0,
                     "flush_ns": 0, "reserved_by": held.engine, "reserved_for": held.holds},
            location=Location(rank=d.rank, device=d.device),
            key=where,
        )

    def _finding(self, ctx: Context, d, near: bool, frees: pd.DataFrame, rank: int | None = None):
        flush_ns = int(frees["dur_ns"].sum()) if len(frees) else 0
        oom = d is not None and bool(d.oom_events)
        where = f"rank {d.rank} GPU {d.device}" if d is not None else f"rank {rank}"
        n = len(frees)
        calls = ", ".join(sorted(set(frees["name"].astype(str)))) if n else ""
        released = (f"{n} memory-releasing call{'s' if n > 1 else ''} ({calls}) ran after warm-up for {fmt_ns(flush_ns)}, "
                    "each synchronising the device")
        metrics = {"rank": d.rank if d is not None else rank, "device": d.device if d is not None else None,
                   "oom_events": d.oom_events if d is not None else 0,
                   "peak_bytes": None if d is None or d.peak is None else int(d.peak),
                   "capacity_bytes": d.capacity if d is not None else None,
                   "peak_share_pct": None if d is None or d.peak_share is None else round(100 * d.peak_share, 3),
                   "steady_state_frees": int(n), "flush_ns": flush_ns}
        how = asked_for(ctx.views, frees, d) if n and not oom and not near else None
        if how:
            # the program's own releases (``empty_cache``), not the allocator at its limit: said so, and the fix is
            # to stop asking
            title = f"{where}: allocator cache released {n} times in the steady state (asked for, not pressure)"
            message = (f"On {where}, {released}, {how}: the program asks for them (`torch.cuda.empty_cache()` or an option "
                       "that releases cached memory); a caching allocator under pressure releases from inside the "
                       "allocation that failed. The next steps then allocate from the driver again (TI032).")
            severity, fixes, metrics["asked_for"] = None, {**type(self).fixes(), "pytorch": FIX_EMPTY_CACHE}, True
            metrics["graded"] = True  # no risk to the run, only the GPU time the releases cost: the common scale grades it
        else:
            parts = []
            if oom:
                parts.append(f"{d.oom_events} allocation{'s' if d.oom_events > 1 else ''} failed with out-of-memory")
            held = ctx.views.memory.reservation if near else None
            if near and held is not None and held.pool:
                # judged on what was in use: the pool the framework reserved is no pressure (``Memory.reservation``)
                used = ctx.views.memory.in_use_peak(d)
                parts.append(f"the memory in use reached {fmt_bytes(used)} of {fmt_bytes(d.capacity)} ({100 * used / d.capacity:.0f} %)"
                             + (f" in step {d.peak_step}" if d.peak_step is not None else "")
                             + f", inside the pool {held.engine} reserved")
                metrics["peak_in_use_share_pct"] = round(100 * used / d.capacity, 3)
            elif near:
                parts.append(f"the peak reached {fmt_bytes(d.peak)} of {fmt_bytes(d.capacity)} ({100 * d.peak_share:.0f} %)"
                             + (f" in step {d.peak_step}" if d.peak_step is not None else "")
                             + (f" at {d.peak_op}" if d.peak_op else ""))
            if n:
                parts.append(released)
            share = metrics.get("peak_in_use_share_pct", None if d is None or d.peak_share is None else 100 * d.peak_share)
            in_use = "in use " if "peak_in_use_share_pct" in metrics else ""
            title_bits = (["out of memory"] if oom else []) + ([f"peak {in_use}{share:.0f} % of capacity"] if near else []) + \
                         ([f"{n} cudaFree flushes"] if n else [])
            title = f"{where}: memory pressure ({', '.join(title_bits)})"
            message = f"On {where}, " + "; ".join(parts) + ". The allocator is at its limit: lower what a step needs or let it grow segments instead of flushing."
            severity, fixes = (Severity.ERROR if oom else None), None
        evidence = pd.DataFrame()
        if n:
            evidence = frees.groupby([frees["name"].astype(str), "step"], sort=True).agg(
                calls=("dur_ns", "size"), time_ms=("dur_ns", lambda x: x.sum() / 1e6)).reset_index().rename(columns={"name": "call"})
        return ctx.finding(
            title=title,
            message=message,
            impact_ns=flush_ns,
            severity=severity,
            evidence=evidence,
            **({"fixes": fixes} if fixes else {}),
            instances=pd.DataFrame({"start_ns": frees["start_ns"], "end_ns": frees["start_ns"] + frees["dur_ns"],
                                    "rank": frees["rank"], "device": -1, "label": frees["name"].astype(str)}) if n else None,
            metrics=metrics,
            location=Location(rank=metrics["rank"], device=metrics["device"]),
            key=where,
        )
