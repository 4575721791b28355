"""TI041: much of the GPU time is memory-bound elementwise and normalisation kernels that a compiler would fuse."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceinsight.vocab.masks import name_mask, texts_at
from traceinsight.rule_api import Context, Fix, Location, Option, Rule, Severity, fmt_ns

#: Kernels a graph compiler already generated (fused): Triton/inductor, XLA fusions, TensorRT/nvFuser.
COMPILED = re.compile(r"^triton_|\btriton_|fusion|\bnvfuser|CudaCodeGen|__myelin|kernel_cutlass_fused", re.I)


class UnfusedMemoryBound(Rule):
    code = "TI041"
    category = "compute"
    name = "unfused-memory-bound"
    speeds_up = ("elementwise", "norm")  # the what-if shortens only these classes' kernels
    severity = Severity.WARNING
    summary = "Much of the GPU time is memory-bound elementwise/normalisation kernels run one op at a time (unfused)."
    why = """
    Elementwise ops, reductions and normalisations do a few FLOPs per byte: their speed is the memory bandwidth.
    Run eagerly, each op reads its inputs from GPU memory and writes its output back, so a chain of five
    pointwise ops moves the same tensor ten times. A graph compiler (``torch.compile``/inductor, XLA) fuses such
    chains into one kernel that reads once and writes once, and folds the normalisation into its neighbours.
    When these kernels are a large share of a busy GPU, fusion is the cheapest speed-up left.
    """
    definition = """
    **Memory-bound kernels**: the elementwise/reduction and normalisation classes of the efficiency view
    (``traceinsight.vocab.work_classes``: the launching op's class where shapes are recorded, else the kernel name).
    Kernels a compiler generated (``triton_*``, XLA ``fusion``, nvFuser) are left out: they are fused already.

    Reported when the GPU is busy (busy % of its window >= ``min_busy_pct`` = **50 %**: on a mostly idle GPU faster
    kernels do not shorten the step, and the idle time is other rules' finding), unfused memory-bound kernel time is
    >= ``min_share_pct`` = **25 %** of GPU activity time and there are >= ``min_kernels`` = **100** of them
    (one-off big reductions are not a fusion problem).
    Where bytes are known (shapes), the evidence shows the achieved GB/s against the GPU's peak bandwidth.

    **Impact** (a modelled speed-up, not lost idle time) = that time x (1 - 1/``speedup``), ``speedup`` = **2**: a
    conservative factor for fusing chains of two or more memory-bound ops (each fused op saves a write and a
    read of its output). Graded on the common scale but at most ``max_severity`` = **info** by default.
    """
    fix_pytorch = Fix(
        "Compile the model (`torch.compile`) so inductor fuses chains of pointwise ops, reductions and normalisations "
        "into single Triton kernels; for hand-written blocks use the fused implementations (`F.scaled_dot_product_attention`, "
        "fused optimizers with `fused=True`, `torch.nn.functional.rms_norm`).",
        """
        model = torch.compile(model)                      # inductor fuses pointwise chains and norms
        opt = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)
        """,
    )
    fix_tensorflow = Fix(
        "Turn on XLA so elementwise chains and normalisations fuse into one kernel each.",
        """
        model.compile(optimizer=opt, loss=loss, jit_compile=True)
        # or for a custom step:  @tf.function(jit_compile=True)
        """,
    )
    fix_jax = Fix(
        "Jit the whole step: XLA fuses chains of elementwise ops, reductions and normalisations into single kernels "
        'only inside one compiled program; use `jax.nn.dot_product_attention` for attention.',
        """
        train_step = jax.jit(train_step)                           # elementwise chains fuse
        out = jax.nn.dot_product_attention(q, k, v, is_causal=True)
        """,
    )
    fix_cuda = Fix(
        "Fuse consecutive elementwise passes into one kernel that reads its inputs once and writes once (or use "
        "CUTLASS/cuBLASLt epilogues for bias + activation after a GEMM).",
        """
        __global__ void bias_gelu_residual(const half* x, const half* b, const half* r, half* y, int n, int c) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = __float2half(gelu(__half2float(x[i]) + __half2float(b[i % c])) + __half2float(r[i]));
        }
        """,
    )

    min_busy_pct = Option(50.0, "Only when the GPU is busy at least this % of its window.")
    min_share_pct = Option(25.0, "Report when unfused memory-bound kernels take at least this % of GPU activity time.")
    min_kernels = Option(100, "...and there are at least this many of them.")
    speedup = Option(2.0, "Assumed speed-up of those kernels once fused (for the impact).")
    max_severity = Option("info", "Highest severity on the common scale: a modelled speed-up, not time the GPU lost.", choices=("info", "warning", "error"))

    def check(self, ctx: Context):
        eff = ctx.views.efficiency
        k = ctx.views.kernels
        if k.empty or eff.kernel_cls is None or eff.gpu_time_ns <= 0:
            return
        v = ctx.views
        if float(v.array("utilization", "busy_ns").sum()) < ctx.options["min_busy_pct"] / 100.0 * float(v.array("utilization", "window_ns").sum()):
            return
        cls = eff.kernel_cls
        mem = pd.Series(cls, copy=False).isin(["elementwise", "norm"]).to_numpy(dtype=bool, copy=True)  # hashed, not sorted strings
        if not mem.any() and (ctx.options["min_share_pct"] > 0 or ctx.options["min_kernels"] > 0):
            return  # no memory-bound kernel class at all: nothing to share or count
        compiled = name_mask(k["name"], COMPILED)  # once per distinct name, not per kernel (10^6 regex searches)
        mem &= ~compiled
        n = int(mem.sum())
        dur = k["dur_ns"].to_numpy()
        mem_ns = int(dur[mem].sum())
        share = 100.0 * mem_ns / eff.gpu_time_ns
        if share < ctx.options["min_share_pct"] or n < ctx.options["min_kernels"]:
            return
        impact = int(mem_ns * (1.0 - 1.0 / max(float(ctx.options["speedup"]), 1.0)))
        # the names of the memory-bound kernels only, each distinct name turned to text once
        ev = pd.DataFrame({"kernel": texts_at(k["name"], np.flatnonzero(mem)), "class": cls[mem], "dur": dur[mem]})
        ev = ev.groupby(["kernel", "class"], as_index=False)["dur"].agg(["count", "sum"]).reset_index()
        ev = ev.sort_values("sum", ascending=False).head(20)
        ev["total_ms"] = ev["sum"] / 1e6
        ev["pct_of_gpu_time"] = (100.0 * ev["sum"] / eff.gpu_time_ns).round(2)
        ev = ev[["kernel", "class", "count", "total_ms", "pct_of_gpu_time"]].reset_index(drop=True)
        c = eff.classes.set_index("cls")
        bw = ""
        gbs = [float(c.loc[x, "achieved_gbs"]) for x in ("elementwise", "norm") if x in c.index and c.loc[x, "achieved_gbs"] is not None and c.loc[x, "achieved_gbs"] == c.loc[x, "achieved_gbs"]]
        if gbs and eff.peak.bandwidth_gbs:
            bw = f" They move data at ~{max(gbs):.0f} GB/s of the GPU's {eff.peak.bandwidth_gbs:g} GB/s ({eff.peak.gpu}): the bytes, not the math, set their time."
        ranks = sorted(set(k["rank"].to_numpy()[mem].tolist()))
        yield ctx.finding(
            title=f"{share:.0f}% of GPU time is unfused elementwise/normalisation kernels",
            message=(
                f"{n:,} memory-bound kernels (elementwise, reductions, normalisation) take {fmt_ns(mem_ns)}, {share:.1f}% of GPU "
                f"activity, each op reading and writing its tensors separately (e.g. `{ev['kernel'].iloc[0][:120]}`).{bw} "
                f"Fusing them would save est. {fmt_ns(impact)} at a {float(ctx.options['speedup']):g}x speed-up "
                "(a modelled speed-up, not idle time)."
            ),
            impact_ns=impact,
            evidence=ev,
            location=Location(rank=ranks[0] if len(ranks) == 1 else None),
            metrics={"memory_bound_ns": mem_ns, "share_pct": round(share, 3), "kernels": n,
                     "compiled_kernels": int(compiled.sum()), "modelled_speedup": True},
            key="unfused-memory-bound",
        )
