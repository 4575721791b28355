"""TI032: the caching allocator keeps growing or churning after warm-up, or holds far more than is in use."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.derive.memory import FREE_CALLS, fmt_bytes
from traceinsight.rule_api import Context, Fix, Location, Option, Rule, Severity, fmt_ns
from traceinsight.vocab.masks import kind_mask
from traceinsight.rulelib.releases import MIN_REALLOCS_PER_STEP, asked_for, uncached_allocator

#: The fixes of an allocator that does not cache (``uncached_allocator``): turn the pool back on. Not CUDA graphs or
#: compilation: the host is blocked in the driver's malloc and free, each free draining the device.
FIX_ALLOCATOR_OFF = {
    "pytorch": Fix(
        "Turn the caching allocator back on: unset `PYTORCH_NO_CUDA_MEMORY_CACHING` (a debugging switch that makes "
        "every tensor's free a synchronising `cudaFree`/`hipFree` and every allocation a driver malloc) and remove "
        "any custom allocator that frees per tensor; `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` lets the "
        "pool grow in place if fragmentation was the reason it was switched off.",
        """
        # unset PYTORCH_NO_CUDA_MEMORY_CACHING   (or: export PYTORCH_NO_CUDA_MEMORY_CACHING=0)
        # export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
        import torch
        assert torch.cuda.memory.get_allocator_backend() == "native"   # the caching allocator
        """,
    ),
    "tensorflow": Fix(
        "Use TensorFlow's pooling allocator: unset `TF_GPU_ALLOCATOR` (or set `cuda_malloc_async`, the stream-ordered "
        "pool) instead of an allocator that calls the driver per tensor.",
        """
        # unset TF_GPU_ALLOCATOR   (the BFC pool), or: export TF_GPU_ALLOCATOR=cuda_malloc_async
        import tensorflow as tf
        """,
    ),
    "jax": Fix(
        "Use JAX's pooling allocator: unset `XLA_PYTHON_CLIENT_ALLOCATOR=platform` (it allocates and frees on every "
        "use, for debugging) and keep preallocation, or set `XLA_PYTHON_CLIENT_PREALLOCATE=false` to let the pool "
        "grow on demand without freeing per array.",
        """
        # unset XLA_PYTHON_CLIENT_ALLOCATOR   (default: the BFC pool)
        # export XLA_PYTHON_CLIENT_PREALLOCATE=false   # grow on demand, still pooled
        import jax
        """,
    ),
    "cuda": Fix(
        "Allocate once outside the loop and reuse the buffers, or use the stream-ordered pool "
        "(`cudaMallocAsync`/`cudaFreeAsync` with a high release threshold) so no iteration calls the synchronising "
        "`cudaMalloc`/`cudaFree`.",
        """
        cudaMemPool_t pool; cudaDeviceGetDefaultMemPool(&pool, 0);
        uint64_t keep = UINT64_MAX; cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
        for (int it = 0; it < iters; ++it) { cudaMallocAsync(&buf, bytes, s); step<<<g, b, 0, s>>>(buf); cudaFreeAsync(buf, s); }
        """,
    ),
}


class AllocatorChurn(Rule):
    code = "TI032"
    name = "allocator-churn"
    category = "gpu_idle"
    severity = Severity.WARNING
    lifecycle = "preview"
    #: a memory finding is a risk or an opportunity, not time measured on the timeline: its severity is the rule's
    graded = False
    #: the host blocked in the driver's malloc and free is idle with a known reason: TI001's gaps under them are its doing
    root_cause = True
    summary = "The GPU memory pool grows or calls the driver (cudaMalloc/cudaFree) after warm-up, or reserves far more than it uses."
    why = """
    A caching allocator (PyTorch's CUDA caching allocator, TensorFlow's BFC allocator) asks the driver for memory
    while the program warms up and then serves every step from its cache: in the steady state the reserved level
    is flat and no `cudaMalloc` is called. When shapes change from step to step (dynamic sequence lengths, ragged
    batches, varying numbers of detections) the cached blocks no longer fit: the allocator splits and caches ever
    more sizes, `cudaMalloc` appears inside steps (each call costs tens of µs to ms and holds the host while the
    GPU drains its queue), reserved keeps rising, and reserved ends far above what tensors use (fragmentation),
    until the pool is flushed (TI031) or the job runs out of memory. Growth during warm-up is expected and is not
    reported.
    """
    definition = """
    The steady state is the steps after warm-up: warm-up ends, per rank with at least two steps, at the end of its
    first step, extended over the time ledger's warm-up regions (first calls that are outliers). Without step
    markers there is no steady state to judge (a program's start-up and exit allocate and free too) and only the
    fragmentation test applies. Per GPU:

    * **growth**: the highest reserved level after warm-up exceeds the highest before it (or the first level
      after, when the profile starts in steady state) by at least `min_growth_mib` (default **256 MiB**) and
      `min_growth_pct` (default **5 %**) of that level. Where only allocated memory is recorded (tensors come and go
      within a step), the per-step peaks after the first steady step are compared with that step's peak instead;
    * **allocator calls**: at least `min_calls` (default **2**) calls that grow the device pool (`cudaMalloc`,
      `cuMemAlloc`, `cuMemCreate`, `hipMalloc`) inside steady-state steps, in at least `min_steps` (default **2**)
      different steps: growth that recurs, not warm-up that ran one step long. Their time is the impact;
    * **fragmentation**: peak reserved at least `min_reserved_ratio` (default **2×**) peak allocated and the gap at
      least `min_gap_gib` (default **1 GiB**): the cache holds blocks no tensor uses. Not where an engine or
      framework reserves a pool on purpose (JAX's and TensorFlow's preallocation: `Memory.reservation`);
    * **no caching at all**, with or without step markers: in the repeated part of the window (steady-state steps,
      iterations found from the optimizer's own `Optimizer.zero_grad`/`Optimizer.step` ranges when nothing else
      marks them; without any, everything outside the ledger's warm-up) memory freed to the driver (`cudaFree`,
      `hipFree`, each a device synchronisation) is allocated again (`cudaMalloc`, `hipMalloc`) at least
      `MIN_REALLOCS_PER_STEP` (**3**) times per step in at least 2 steps (`rulelib.uncached_allocator`). All those
      calls' time is the impact; the fix is the caching allocator, and TI031 leaves these frees alone.
    """
    fix_pytorch = Fix(
        "Keep shapes static (pad or bucket sequence lengths to a few sizes, `drop_last=True` in the DataLoader) and "
        "let the allocator grow segments instead of caching every size: "
        "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (or `max_split_size_mb:128` against fragmentation). "
        "Pre-allocate buffers you refill every step, and run one step at the largest shape first so the pool is "
        "sized in warm-up.",
        """
        # export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
        lengths = [128, 256, 512, 1024]
        pad_to = next(l for l in lengths if l >= batch_len)        # a few static shapes instead of every length
        x = torch.nn.functional.pad(x, (0, pad_to - x.shape[-1]))
        loader = DataLoader(ds, batch_size=64, drop_last=True)
        """,
    )
    fix_tensorflow = Fix(
        "Keep shapes static: `padded_batch` with fixed `padded_shapes` or bucketing "
        "(`tf.data.experimental.bucket_by_sequence_length`), `drop_remainder=True`, and an `input_signature` on "
        "`tf.function` so no new graph and buffer sizes appear each step; the XLA equivalent is fixed shapes "
        "(JAX recompiles and reallocates per new shape).",
        """
        ds = ds.padded_batch(64, padded_shapes=([512], []), drop_remainder=True)
        @tf.function(input_signature=[tf.TensorSpec([64, 512], tf.int32)])
        def train_step(x): ...
        """,
    )
    fix_jax = Fix(
        "JAX's allocator preallocates 75 % of the GPU and serves every step from that pool: churn means new shapes "
        '(each compiles a new program with new buffers) or the pool switched off '
        '(`XLA_PYTHON_CLIENT_ALLOCATOR=platform` allocates and frees per use, a debugging setting). Keep shapes static '
        '(pad or bucket to a few sizes), leave the default allocator on, and donate the buffers a step replaces.',
        """
        # unset XLA_PYTHON_CLIENT_ALLOCATOR (platform allocates and frees on every use)
        x = jnp.pad(x, ((0, 0), (0, pad_to - x.shape[1])))            # a few static shapes
        train_step = jax.jit(train_step, donate_argnums=(0,))          # reuse the state's buffers
        """,
    )
    fix_cuda = Fix(
        "Allocate once outside the loop and reuse the buffers, or use the stream-ordered pool "
        "(`cudaMallocAsync`/`cudaFreeAsync` with a high release threshold) so steady-state steps never reach the driver.",
        """
        float *buf; cudaMalloc(&buf, max_bytes);          // once, at the largest size
        for (int it = 0; it < iters; ++it) step<<<grid, block, 0, s>>>(buf, n[it]);  // no cudaMalloc/cudaFree inside
        cudaFree(buf);
        """,
    )

    min_growth_mib = Option(256.0, "Report reserved growth after warm-up of at least this many MiB...")
    min_growth_pct = Option(5.0, "...and at least this % of the level at the end of warm-up.")
    min_calls = Option(2, "Report at least this many pool-growing calls after warm-up.")
    min_steps = Option(2, "...in at least this many steady-state steps (growth that stops is warm-up that ran long).")
    min_reserved_ratio = Option(2.0, "Report peak reserved at least this many times peak allocated...")
    min_gap_gib = Option(1.0, "...with at least this much reserved but unused (GiB).")

    def check(self, ctx: Context):
        mem = ctx.views.memory
        off = uncached_allocator(ctx.views)
        for rank, calls in off.items():
            yield self._uncached(ctx, rank, calls)
        grows = mem.steady_allocator_calls(FREE_CALLS, matching=False)
        if off and len(grows):  # one claim per call: an allocator that does not cache is reported once, above
            grows = grows[~grows["rank"].isin(list(off)).to_numpy()]
        frees = mem.steady_allocator_calls(FREE_CALLS)
        held = mem.reservation
        table = ctx.timeline.memory
        done_ranks = set()
        for d in mem.devices:
            on = (table["rank"].to_numpy() == d.rank) & (table["device"].to_numpy() == d.device) & kind_mask(table["kind"], ("alloc", "free"))
            rows = table if on.all() else table[on]  # a one-GPU trace of allocations and frees: its rows, no copy
            growth, base = _growth(rows, mem.steady(rows["rank"].to_numpy(), rows["start_ns"].to_numpy(), rows["step"].to_numpy()))
            grew = growth >= self.min_growth_mib * (1 << 20) and base is not None and growth >= self.min_growth_pct / 100.0 * max(base, 1.0)
            g = grows[grows["rank"].to_numpy() == d.rank] if d.rank not in done_ranks else grows.iloc[:0]
            done_ranks.add(d.rank)
            n_steps = len(np.unique(g["step"].to_numpy()))
            n_calls = len(g) if len(g) >= self.min_calls and n_steps >= self.min_steps else 0
            frag = (not (held is not None and held.pool)
                    and d.peak_reserved is not None and d.peak_allocated is not None and d.peak_allocated > 0
                    and d.peak_reserved >= self.min_reserved_ratio * d.peak_allocated
                    and d.peak_reserved - d.peak_allocated >= self.min_gap_gib * (1 << 30))
            if not (grew or n_calls or frag):
                continue
            yield self._finding(ctx, f"rank {d.rank} GPU {d.device}", d, growth if grew else 0.0, base, g if n_calls else g.iloc[:0], frag, frees)
        if not mem.devices and len(grows):
            for rank, g in grows.groupby("rank", sort=True):
                if len(g) >= self.min_calls and len(np.unique(g["step"].to_numpy())) >= self.min_steps:
                    yield self._finding(ctx, f"rank {int(rank)}", None, 0.0, None, g, False, frees)

    def _uncached(self, ctx: Context, rank: int, calls: pd.DataFrame):
        """An allocator that does not cache: every free a synchronising driver call, every allocation a driver malloc."""
        names = calls["name"].astype(str)
        free = names.str.contains(FREE_CALLS).to_numpy()
        dur = calls["dur_ns"].to_numpy()
        call_ns, free_ns = int(dur.sum()), int(dur[free].sum())
        steps = calls["step"].to_numpy()
        n_steps = len(np.unique(steps[steps >= 0]))
        reallocs = int(calls["realloc"].sum())
        free_names = ", ".join(sorted(set(names[free])))
        malloc_names = ", ".join(sorted(set(names[~free])))
        where = f"rank {rank}"
        longest = int(dur[free].max()) if free.any() else 0
        in_steps = f" across {n_steps} iterations" if n_steps else " outside warm-up"
        evidence = calls.groupby([names.rename("call"), "step"], sort=True).agg(
            calls=("dur_ns", "size"), time_ms=("dur_ns", lambda x: x.sum() / 1e6),
            longest_ms=("dur_ns", lambda x: x.max() / 1e6)).reset_index()
        return ctx.finding(
            title=(f"{where}: the allocator does not cache: {int(free.sum()):,} {free_names or 'free'} and "
                   f"{int((~free).sum()):,} {malloc_names or 'malloc'} calls in the repeated part, {fmt_ns(call_ns)}"),
            message=(f"On {where}, memory freed to the driver is allocated again {reallocs:,} times{in_steps} "
                     f"(a malloc right after a free of the same iteration, at least {MIN_REALLOCS_PER_STEP} per iteration): "
                     f"{int(free.sum()):,} frees ({free_names or 'none'}) took {fmt_ns(free_ns)}, the longest "
                     f"{fmt_ns(longest)}, each synchronising the device, and {int((~free).sum()):,} mallocs "
                     f"({malloc_names or 'none'}) took {fmt_ns(call_ns - free_ns)}. A caching allocator keeps freed "
                     "blocks and serves the next allocation from them without the driver; here it is off or "
                     "bypassed, so the host waits in malloc/free instead of launching work."),
            impact_ns=call_ns,
            evidence=evidence,
            fixes=FIX_ALLOCATOR_OFF,
            instances=pd.DataFrame({"start_ns": calls["start_ns"], "end_ns": calls["start_ns"] + calls["dur_ns"],
                                    "rank": calls["rank"], "device": -1, "label": names}),
            metrics={"allocator_caches": False, "reallocations": reallocs, "free_calls": int(free.sum()),
                     "malloc_calls": int((~free).sum()), "free_ns": free_ns, "alloc_call_ns": call_ns - free_ns,
                     "longest_free_ns": longest, "iterations": n_steps, "growth_after_warmup_bytes": 0,
                     "steady_state_alloc_calls": int((~free).sum()), "fragmented": False},
            location=Location(rank=rank),
            key=f"{where} uncached",
        )

    @staticmethod
    def _why(ctx: Context, d, calls: pd.DataFrame, frees: pd.DataFrame) -> str:
        """What keeps the allocator from reusing its blocks: the program's own releases (TI031) when they run in the
        steady state and were asked for, else changing shapes or fragmentation."""
        if len(calls) and len(frees):
            rank = int(calls["rank"].iloc[0])
            mine = frees[frees["rank"].to_numpy() == rank]
            how = asked_for(ctx.views, mine, d)
            if how:
                return (f"here the program itself hands the cache back ({len(mine)} releases {how}, TI031: "
                        "`torch.cuda.empty_cache()` or the like), so every step allocates from the driver again.")
        return "changing shapes or fragmentation keep it from reusing its blocks."

    def _finding(self, ctx: Context, where: str, d, growth: float, base: float | None, calls: pd.DataFrame, frag: bool,
                 frees: pd.DataFrame):
        call_ns = int(calls["dur_ns"].sum()) if len(calls) else 0
        parts, bits = [], []
        if growth:
            parts.append(f"the pool grew by {fmt_bytes(growth)} after warm-up (from {fmt_bytes(base)})")
            bits.append(f"+{fmt_bytes(growth)} after warm-up")
        if len(calls):
            steps = calls["step"].to_numpy()
            n_steps = len(np.unique(steps[steps >= 0]))
            parts.append(f"{len(calls)} pool-growing call{'s' if len(calls) > 1 else ''} ({', '.join(sorted(set(calls['name'].astype(str))))}) "
                         f"ran in the steady state{f' across {n_steps} steps' if n_steps else ''}, {fmt_ns(call_ns)} in all")
            bits.append(f"{len(calls)} cudaMalloc in steady state")
        if frag:
            parts.append(f"it reserves {fmt_bytes(d.peak_reserved)} for at most {fmt_bytes(d.peak_allocated)} in use "
                         f"({d.peak_reserved / d.peak_allocated:.1f}×)")
            bits.append("reserved ≫ allocated")
        evidence = pd.DataFrame()
        if len(calls):
            evidence = calls.groupby([calls["name"].astype(str), "step"], sort=True).agg(
                calls=("dur_ns", "size"), time_ms=("dur_ns", lambda x: x.sum() / 1e6)).reset_index().rename(columns={"name": "call"})
        elif d is not None and not d.steps.empty:
            evidence = d.steps.assign(peak_reserved_gib=(d.steps["peak_reserved"] / 2**30).round(3),
                                      peak_allocated_gib=(d.steps["peak_allocated"] / 2**30).round(3))[["step", "peak_allocated_gib", "peak_reserved_gib"]]
        return ctx.finding(
            title=f"{where}: allocator churn ({', '.join(bits)})",
            message=f"On {where}, " + "; ".join(parts) + ". A caching allocator in steady state should neither grow nor call the driver: "
                    + self._why(ctx, d, calls, frees),
            impact_ns=call_ns,
            evidence=evidence,
            instances=pd.DataFrame({"start_ns": calls["start_ns"], "end_ns": calls["start_ns"] + calls["dur_ns"],
                                    "rank": calls["rank"], "device": -1, "label": calls["name"].astype(str)}) if len(calls) else None,
            metrics={"growth_after_warmup_bytes": int(growth), "level_after_warmup_bytes": None if base is None else int(base),
                     "steady_state_alloc_calls": int(len(calls)), "alloc_call_ns": call_ns, "fragmented": bool(frag),
                     "peak_reserved_bytes": None if d is None or d.peak_reserved is None else int(d.peak_reserved),
                     "peak_allocated_bytes": None if d is None or d.peak_allocated is None else int(d.peak_allocated)},
            location=Location(rank=d.rank if d is not None else None, device=d.device if d is not None else None),
            key=where,
        )


def _growth(rows: pd.DataFrame, steady: np.ndarray) -> tuple[float, float | None]:
    """How far the pool grew in the steady state, and from what level.

    With reserved recorded: its highest level after warm-up less its highest level before (or its first level
    after, when the profile starts in steady state). With only allocated (tensors come and go within a step):
    the highest per-step peak after the first steady step less that step's peak, so within-step activations are
    never taken for growth."""
    if not steady.any():
        return 0.0, None
    res = rows["reserved"].to_numpy(dtype=float)
    if np.isfinite(res).any():
        first = int(np.argmax(steady))  # rows are in time order: what came before the first steady row is warm-up
        after = res[steady]
        before = res[:first]
        if np.isfinite(before).any():
            base = float(np.nanmax(before))
        elif np.isfinite(after).any():
            base = float(after[np.isfinite(after)][0])
        else:
            return 0.0, None
        return (float(np.nanmax(after)) - base if np.isfinite(after).any() else 0.0), base
    st = rows[steady & (rows["step"].to_numpy() >= 0)]
    peaks = st.groupby("step", sort=True)["allocated"].max().to_numpy(dtype=float)
    if len(peaks) < 2 or not np.isfinite(peaks).all():
        return 0.0, None
    return float(peaks[1:].max() - peaks[0]), float(peaks[0])
