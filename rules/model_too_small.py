"""TI040: the GPU is busy, but its matrix math is made of GEMMs too small to fill it."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from traceinsight.rule_api import Context, Fix, Location, Option, Rule, Severity, fmt_ns


class ModelTooSmall(Rule):
    code = "TI040"
    category = "compute"
    name = "model-too-small"
    speeds_up = ("gemm", "conv", "attention")  # the what-if shortens only these classes' kernels
    severity = Severity.WARNING
    summary = "The GPU is busy, but most matrix math is in GEMMs too small to reach the GPU's dense peak."
    why = """
    A GPU reaches its tensor-core peak only on matrix multiplies with enough work per launch to fill every SM for
    many waves. A model whose layers are narrow, or a batch that is small, launches GEMMs that finish in a few
    microseconds at a small fraction of that peak: the timeline looks 95 % busy, yet the GPU does little useful
    work ("insufficient computational complexity"). More of the same work per launch (a larger batch, longer
    sequences, fused layers) costs almost no extra time per launch.
    """
    definition = """
    Needs FLOPs from recorded shapes (PyTorch ``record_shapes=True``) and the GPU's dense peak (the peak table or
    ``--peak-tflops``). **Matrix ops**: the innermost counted matmul, convolution and attention ops that launched
    GPU kernels (``traceinsight.derive.flops``). An op is **tiny** when its FLOPs would take less than ``tiny_us`` =
    **10 µs** at the dense peak of its dtype (at 989.5 TFLOP/s bf16: under 9.9 GFLOP, e.g. a 1024x1024x1024 matmul).

    Reported when the GPU is busy (busy % of its window >= ``min_busy_pct`` = **70 %**: idle time is other rules'
    business), tiny matrix ops' kernel time is >= ``min_share_pct`` = **20 %** of GPU activity time, and those
    kernels achieve < ``max_pct_of_peak`` = **25 %** of the dtype's dense peak.

    **Impact** (a modelled speed-up, not lost idle time) = tiny-op kernel time - the time the same FLOPs would take
    at ``target_pct_of_peak`` = **50 %** of the peak (what large GEMMs reach). Graded on the common scale but at
    most ``max_severity`` = **info** by default.
    """
    fix_pytorch = Fix(
        "Give each GEMM more work: raise the batch size (or pack sequences) until memory allows, merge narrow parallel "
        "layers (e.g. fuse the Q/K/V projections into one matmul), and let `torch.compile` fuse the small ops around "
        "them. For inference with small fixed shapes, capture the step as a CUDA graph so the launches cost nothing.",
        """
        loader = DataLoader(ds, batch_size=256)            # was 16: every GEMM was a few GFLOP
        qkv = nn.Linear(d, 3 * d)                          # one matmul instead of three narrow ones
        model = torch.compile(model, mode="max-autotune")
        """,
    )
    fix_tensorflow = Fix(
        "Raise the global batch size (scale the learning rate) and let XLA fuse the small ops (`jit_compile=True`).",
        """
        ds = ds.batch(256, drop_remainder=True).prefetch(tf.data.AUTOTUNE)   # was 16
        model.compile(optimizer=opt, loss=loss, jit_compile=True)
        """,
    )
    fix_jax = Fix(
        "Give each GEMM more work: raise the batch size (scale the learning rate) or pack sequences, merge narrow "
        "parallel projections into one matmul, and vectorise independent small models or samples with `jax.vmap` inside"
        ' the jitted step.',
        """
        qkv = x @ w_qkv                                            # one matmul instead of three
        q, k, v = jnp.split(qkv, 3, axis=-1)
        apply_all = jax.jit(jax.vmap(apply, in_axes=(0, None)))    # many small models in one launch
        """,
    )
    fix_cuda = Fix(
        "Batch independent small matrix products into one call (`cublasGemmStridedBatchedEx` / `cublasGemmGroupedBatchedEx`) "
        "instead of launching them one by one, and grow the problem per launch where the algorithm allows.",
        """
        cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha,
                                   dA, CUDA_R_16BF, m, m * k, dB, CUDA_R_16BF, k, k * n, &beta,
                                   dC, CUDA_R_16BF, m, m * n, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        """,
    )

    tiny_us = Option(10.0, "An op is tiny when its FLOPs take less than this many µs at the dense peak.")
    min_busy_pct = Option(70.0, "Only when the GPU is busy at least this % of its window.")
    min_share_pct = Option(20.0, "Report when tiny matrix ops take at least this % of GPU activity time.")
    max_pct_of_peak = Option(25.0, "...and achieve less than this % of the dtype's dense peak.")
    target_pct_of_peak = Option(50.0, "The rate (% of peak) the same FLOPs would reach in large GEMMs (for the impact).")
    max_severity = Option("info", "Highest severity on the common scale: a modelled speed-up, not time the GPU lost.", choices=("info", "warning", "error"))

    def check(self, ctx: Context):
        eff = ctx.views.efficiency
        if eff.flops_source != "shapes" or not eff.peak.known or eff.counts is None:
            return
        util = ctx.views.utilization
        if util.empty or float(util["busy_ns"].sum()) < ctx.options["min_busy_pct"] / 100.0 * float(util["window_ns"].sum()):
            return
        ops = eff.counts.ops
        ops = ops[(ops["kernel_ns"] > 0) & ops["cls"].isin(["gemm", "conv", "attention"])]
        if ops.empty:
            return
        peak = np.array([eff.peak.for_dtype(_math_dtype(d, eff))[0] or np.nan for d in ops["dtype"]], dtype=float)
        tiny = (ops["flops"].to_numpy() < peak * 1e12 * ctx.options["tiny_us"] * 1e-6) & np.isfinite(peak)
        if not tiny.any():
            return
        t = ops[tiny]
        tiny_ns = int(t["kernel_ns"].sum())
        share = 100.0 * tiny_ns / max(eff.gpu_time_ns, 1)
        flops = float(t["flops"].sum())
        achieved = flops / (tiny_ns / 1e9) / 1e12
        peak_t = float(np.average(peak[tiny], weights=t["kernel_ns"].to_numpy()))
        pct = 100.0 * achieved / peak_t
        if share < ctx.options["min_share_pct"] or pct >= ctx.options["max_pct_of_peak"]:
            return
        target_ns = flops / (peak_t * 1e12 * ctx.options["target_pct_of_peak"] / 100.0) * 1e9
        impact = int(max(tiny_ns - target_ns, 0))
        shapes = ctx.events["input_shapes"].to_numpy()[t["row"].to_numpy()] if "input_shapes" in ctx.events else None
        ev = pd.DataFrame({"op": t["name"].to_numpy(), "dtype": t["dtype"].to_numpy(),
                           "input_dims": [_compact(s) for s in shapes] if shapes is not None else "",
                           "flops": t["flops"].to_numpy(), "kernel_ns": t["kernel_ns"].to_numpy()})
        ev = ev.groupby(["op", "dtype", "input_dims"], as_index=False).agg(count=("flops", "size"), gflop=("flops", "sum"), kernel_ns=("kernel_ns", "sum"))
        ev["tflops"] = (ev["gflop"] / (ev["kernel_ns"] / 1e9) / 1e12).round(2)
        ev["gflop"] = (ev["gflop"] / ev["count"] / 1e9).round(3)
        ev["total_ms"] = ev["kernel_ns"] / 1e6
        ev = ev.sort_values("kernel_ns", ascending=False).head(20)[["op", "input_dims", "dtype", "count", "gflop", "total_ms", "tflops"]].reset_index(drop=True)
        label = eff.peak.label(_math_dtype(t["dtype"].mode().iloc[0], eff))
        yield ctx.finding(
            title=f"{share:.0f}% of GPU time is GEMMs too small for this GPU ({pct:.1f}% of peak)",
            message=(
                f"The GPU is busy, but {fmt_ns(tiny_ns)} ({share:.1f}% of GPU activity) goes to {len(t):,} matrix ops of under "
                f"{ctx.options['tiny_us']:g} µs of work each at peak, such as `{ev['op'].iloc[0]}` on {ev['input_dims'].iloc[0] or 'small shapes'}; "
                f"they achieve {achieved:.1f} TFLOP/s, {pct:.1f}% of {label}. More work per launch (batch, fused layers) "
                f"would run the same FLOPs at ~{ctx.options['target_pct_of_peak']:g}% of peak: est. {fmt_ns(impact)} saved "
                "(a modelled speed-up, not idle time)."
            ),
            impact_ns=impact,
            evidence=ev,
            location=Location(rank=int(t["rank"].iloc[0]) if t["rank"].nunique() == 1 else None),
            metrics={"tiny_kernel_ns": tiny_ns, "share_pct": round(share, 3), "achieved_tflops": round(achieved, 6),
                     "pct_of_peak": round(pct, 6), "peak_tflops": peak_t, "peak": label, "peak_source": eff.peak.source,
                     "tiny_ops": int(len(t)), "modelled_speedup": True},
            key="model-too-small",
        )


def _math_dtype(dtype: str, eff) -> str:
    """The peak a matrix op's dtype is measured against: FP32 ops count as TF32 where the view saw TF32 kernels."""
    if dtype == "fp32" and eff.mfu_dtype == "tf32":
        return "tf32"
    return dtype


def _compact(text) -> str:
    """"[[16, 1024], [1024, 1024]]" from the recorded (pretty-printed) JSON text."""
    if text is None or (isinstance(text, float) and text != text):
        return ""
    try:
        return json.dumps(json.loads(str(text)), separators=(", ", ": "))[:120]
    except ValueError:
        return str(text)[:120]
