"""TI007: matrix math runs on FP32 CUDA cores on a GPU that has tensor cores."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceinsight.gpus import parse_cc
from traceinsight.rule_api import Context, Fix, Location, Option, Rule, Severity, fmt_ns
from traceinsight.work_classes import kernel_class_of

from traceinsight.masks import name_mask
from traceinsight.patterns import FP64, GEMM_CONV, NCCL, NON_NVIDIA, NOT_GEMM, NOT_TENSOR_CORE, PRE_VOLTA, TENSOR_CORE, TENSOR_CORE_GPU, VOLTA_PLUS_KERNEL
from traceinsight.rulelib.groups import descending_order
from traceinsight.rulelib.names import matches, names_where, pair_codes


def _has_tensor_cores(name: str | None, cc: str | None, vendor: str | None) -> bool | None:
    """True/False when known; None when neither compute capability nor a recognisable name says."""
    if matches(vendor, NON_NVIDIA) or matches(name, NON_NVIDIA):
        return False  # AMD/Intel matrix cores exist but their kernel names follow other conventions
    if cc:
        m = re.match(r"\s*(\d+)", str(cc))
        if m:
            return int(m.group(1)) >= 7
    if matches(name, PRE_VOLTA):
        return False
    if matches(name, TENSOR_CORE_GPU):
        return True
    return None


class NoTensorCores(Rule):
    code = "TI007"
    category = "compute"
    name = "no-tensor-cores"
    severity = Severity.WARNING
    summary = "GEMM/convolution kernels run in FP32 on CUDA cores although the GPU has tensor cores."
    why = """
    From Volta on, matrix multiplies and convolutions are 8-16x faster on tensor cores (FP16/BF16, and TF32
    on Ampere and later) than on the FP32 CUDA cores. Kernels named ``sgemm``, ``volta_sgemm_*``,
    ``ampere_sgemm_*``, ``cutlass_*_simt_*`` or ``implicit_convolve_sgemm`` are the CUDA-core path: the model is
    running its heaviest math in plain FP32, usually because mixed precision / TF32 is off.
    """
    definition = """
    Considered devices: compute capability >= 7 from the trace (``meta.devices``); when absent, decided from
    the device name (V100, T4, RTX, A-, H-, B-, L-series …; pre-Volta K/M/P names and AMD/Intel are skipped);
    when the trace has neither (TensorFlow's ``trace.json.gz`` carries no device properties), from the kernels:
    cuBLAS/cuDNN/CUTLASS kernels tagged for Volta or newer (``volta_``, ``turing_``, ``ampere_``, ``sm80_``,
    ``cutlass_80_``, ``xmma`` …) only run on GPUs with tensor cores. ``conv`` does not match ``convert`` or
    ``Conversion`` (type-cast kernels are not convolutions).

    **GEMM/conv kernels**: names matching cuBLAS/cuDNN/CUTLASS/xmma/nvjet patterns (``gemm``, ``gemv``,
    ``conv``, ``cutlass``, ``xmma``, ``scudnn``, ``wgrad``, ``dgrad``, ``winograd`` …), excluding NCCL and FP64
    (``dgemm``; AMP does not apply). **Tensor-core kernels** among them: names containing a tb_plugin
    ``TC_Allowlist`` / xprof kernel-stats substring (``h884 s884 h1688 s1688 c1688 hmma i8816 16816 i16832
    xmma``) or a newer one (``tensorop wgmma gmma nvjet sm80_ sm90_ tf32 bf16``), unless the name also says CUDA
    cores (``simt sgemm gemv scudnn cgemm wgrad_alg0 …``; e.g. ``cutlass_80_simt_sgemm`` is FP32 SIMT).

    **With recorded shapes** (PyTorch ``record_shapes=True``) the launching op decides instead of the name: kernels
    of fp16/bf16/fp8 matmul, convolution and attention ops run on tensor cores whatever their name; those of FP32
    ops only when the name says TF32/tensor cores; FP64 ops are left out; kernels of such ops whose names match no
    kernel class (Triton templates, custom kernels) join the GEMM set. **With GPU-metrics samples** (Nsight
    ``--gpu-metrics-devices``) the hardware decides: no finding from names alone when the sampled Tensor Active
    while GEMM/convolution kernels run is >= ``tensor_active_pct`` = **20 %**; otherwise the message quotes it.

    **Share** = non-tensor-core GEMM/conv time / all GEMM/conv time on the considered devices. Reported when
    share >= ``min_share_pct`` = **50 %** and that time is >= ``min_kernel_pct`` = **5 %** of all kernel time.
    tb_plugin only speaks when *no* kernel uses tensor cores (share = 100 %); 50 % also catches models where
    only some layers were converted. xprof's matching check fires when < 10 % of device compute is 16-bit.

    **Impact** = non-tensor-core GEMM/conv time x (1 - 1/``speedup``) with ``speedup`` = **2**: a deliberately
    low end-to-end factor (tensor-core peak is 8-16x FP32, but memory-bound parts and casts do not speed up).
    With shapes, the FP32 kernels' achieved TFLOP/s against the GPU's dense FP32 peak scales it: kernels far below
    the FP32 peak are bound by memory or size, not by the math tensor cores speed up, so the speed-up is
    1 + (``speedup`` - 1) x min(1, % of FP32 peak / ``compute_bound_pct``) with ``compute_bound_pct`` = **50 %**.
    Graded on the common scale, but at most ``max_severity`` = **info** by default: the saving is modelled
    headroom (an assumed speed-up, and a numerics decision), not time the GPU lost; a compute-bound verdict names
    it as the lever.
    """
    fix_pytorch = Fix(
        "Run the forward/backward under automatic mixed precision (bf16 on Ampere+, fp16 with a GradScaler on "
        "Volta/Turing), and allow TF32 for the FP32 matmuls/convolutions that remain (PyTorch leaves TF32 off for "
        "matmul by default). Keep GEMM dimensions multiples of 8 so cuBLAS can pick tensor-core kernels.",
        """
        torch.set_float32_matmul_precision("high")          # TF32 for FP32 matmuls (Ampere+)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

        scaler = torch.amp.GradScaler("cuda")                 # needed for fp16, not for bf16
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
        """,
    )
    fix_tensorflow = Fix(
        "Turn on the Keras mixed-precision policy (keep the final layer/softmax in float32); TF32 is on by "
        "default on Ampere+ unless it was disabled. Prefer layer sizes that are multiples of 8.",
        """
        import tensorflow as tf
        tf.keras.mixed_precision.set_global_policy("mixed_float16")   # or "mixed_bfloat16"
        tf.config.experimental.enable_tensor_float_32_execution(True)  # default True; check it was not turned off
        outputs = tf.keras.layers.Activation("linear", dtype="float32")(logits)
        """,
    )
    fix_jax = Fix(
        "Compute in bfloat16 (parameters kept in float32) so XLA picks tensor-core GEMMs, or raise the matmul "
        "precision default only where float32 accuracy is needed.",
        """
        x = x.astype(jnp.bfloat16)
        with jax.default_matmul_precision("bfloat16"):
            y = model.apply(params, x)
        """,
    )

    fix_cuda = Fix(
        "Let cuBLAS/cuDNN use tensor cores: keep operands in FP16/BF16 (`cublasGemmEx` with `CUDA_R_16F` / "
        "`CUDA_R_16BF` inputs and FP32 accumulation) or allow TF32 for FP32 GEMMs on Ampere and later with "
        "`cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH)`; keep matrix dimensions multiples of 8.",
        """
        cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH);        // FP32 GEMMs on TF32 tensor cores
        cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha,
                     dA, CUDA_R_16BF, m, dB, CUDA_R_16BF, k, &beta,
                     dC, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        """,
    )
    fix_variants = {
        "pytorch:pre_ampere": Fix(
            "This GPU predates Ampere: its tensor cores run FP16 only (no TF32, no bf16). Run the forward pass "
            "under fp16 autocast and scale the loss with a `GradScaler` so small gradients do not underflow; keep "
            "GEMM dimensions multiples of 8 so cuBLAS picks tensor-core kernels.",
            """
            scaler = torch.amp.GradScaler("cuda")
            for x, y in loader:
                with torch.autocast(device_type="cuda", dtype=torch.float16):
                    loss = loss_fn(model(x), y)
                opt.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            """,
        ),
        "tensorflow:pre_ampere": Fix(
            "This GPU predates Ampere: its tensor cores run FP16 only (no TF32, no bf16). Use the Keras "
            "`mixed_float16` policy (Keras wraps the optimizer in a `LossScaleOptimizer` for you) and keep the "
            "final layer/softmax in float32; prefer layer sizes that are multiples of 8.",
            """
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            outputs = tf.keras.layers.Activation("linear", dtype="float32")(logits)
            # custom loops: opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)
            """,
        ),
        "cuda:pre_ampere": Fix(
            "This GPU predates Ampere: its tensor cores take FP16 operands (no TF32, no bf16). Store GEMM inputs "
            "as `__half` and call `cublasGemmEx` with `CUDA_R_16F` inputs and FP32 accumulation; keep matrix "
            "dimensions multiples of 8.",
            """
            cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha,
                         dA, CUDA_R_16F, m, dB, CUDA_R_16F, k, &beta,
                         dC, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            """,
        ),
        "pytorch:fp8": Fix(
            "Run the forward/backward under bf16 autocast and allow TF32 for the FP32 matmuls that remain. This "
            "GPU also has FP8 tensor cores: for large transformer GEMMs, NVIDIA Transformer Engine's `fp8_autocast` "
            "roughly doubles matmul throughput again once bf16 training is stable.",
            """
            torch.set_float32_matmul_precision("high")          # TF32 for FP32 matmuls
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                loss = loss_fn(model(x), y)
            loss.backward()

            # optional, FP8 GEMMs (pip install transformer_engine):
            import transformer_engine.pytorch as te
            with te.fp8_autocast(enabled=True):
                out = te_layer(x)
            """,
        ),
    }

    min_share_pct = Option(50.0, "Report when this % of GEMM/conv time is on CUDA cores.", max=100)
    min_kernel_pct = Option(5.0, "...and that time is at least this % of all kernel time.", max=100)
    speedup = Option(2.0, "Assumed end-to-end speed-up of those kernels on tensor cores (for the impact).", above=1)
    tensor_active_pct = Option(20.0, "With GPU-metrics samples: no finding from names alone when Tensor Active during GEMM/conv kernels is at least this %.", max=100)
    compute_bound_pct = Option(50.0, "With shapes: the full speed-up applies when the FP32 kernels reach this % of the FP32 peak; less, pro rata.", max=100)

    max_severity = Option("info", "Highest severity on the common scale: modelled headroom (an assumed speed-up), not time the GPU lost; the compute verdict names it. Set to warning to gate on it.", choices=("info", "warning", "error"))

    def check(self, ctx: Context):
        k = ctx.views.kernels
        if k.empty:
            return
        devs = ctx.meta.devices
        eligible = {(int(d.rank), int(d.index)): _has_tensor_cores(d.name, d.compute_capability, d.vendor) for d in devs}
        if any(v is False for v in eligible.values()) and not any(v for v in eligible.values()):
            return  # every listed GPU is known to lack tensor cores
        views = ctx.views
        k_rank, k_dev = views.array("kernels", "rank"), views.array("kernels", "device")
        ud = [(int(r), int(d)) for r, d in pair_codes(k_rank, k_dev)[0].tolist()]  # the (rank, device) pairs present
        known = [eligible.get(rd) for rd in ud]
        if all(v is None for v in known) and set(eligible.values()) == {True}:
            known = [True] * len(known)  # device indices differ from meta, but every listed GPU has tensor cores
        if all(v is None for v in known) and name_mask(k["name"], VOLTA_PLUS_KERNEL).any():
            known = [True] * len(known)  # no device properties, but Volta+ library kernels ran: tensor cores exist
        ok_pairs = {rd for rd, v in zip(ud, known) if v is True}
        if not ok_pairs:
            return
        key = k_rank.astype(np.int64) * 1_000_003 + k_dev.astype(np.int64)
        on_ok = np.isin(key, [r * 1_000_003 + d for r, d in ok_pairs])
        eff = ctx.views.efficiency
        counts = eff.counts if eff.counts is not None and len(eff.counts.ops) else None
        op_of = counts.kernel_op[on_ok] if counts is not None else None
        # the names and durations are all that is read below: rows are taken from these two only
        names, dur = k["name"], views.array("kernels", "dur_ns")
        if not on_ok.all():
            if not on_ok.any():
                return
            names, dur = names[on_ok], dur[on_ok]
        def is_gemm(m):
            return m(GEMM_CONV) & ~m(FP64) & ~m(NCCL) & ~m(NOT_GEMM)

        gemm = names_where(names, is_gemm)  # the patterns combined per distinct name, one pass over the rows
        tc = names_where(names, lambda m: is_gemm(m) & m(TENSOR_CORE) & ~m(NOT_TENSOR_CORE))
        basis = "names"
        if op_of is not None:
            gemm, tc, basis = _by_dtype(gemm, tc, op_of, counts.ops, names_where(names, lambda m: m(TENSOR_CORE) & ~m(NOT_TENSOR_CORE)),
                                        _unclassed(names))
        if not gemm.any():
            return
        gemm_ns = int(dur[gemm].sum())
        non_tc = gemm & ~tc
        non_tc_ns = int(dur[non_tc].sum())
        kernel_ns = int(dur.sum())
        share = 100.0 * non_tc_ns / gemm_ns if gemm_ns else 0.0
        kshare = 100.0 * non_tc_ns / kernel_ns if kernel_ns else 0.0
        if share < ctx.options["min_share_pct"] or kshare < ctx.options["min_kernel_pct"]:
            return
        tensor_active = _tensor_active(eff)
        if basis == "names" and tensor_active is not None and tensor_active >= float(ctx.options["tensor_active_pct"]):
            return  # the hardware counters say the GEMMs keep the tensor cores busy: the names misled
        speedup = max(float(ctx.options["speedup"]), 1.0)
        rate = _fp32_rate(op_of, non_tc, dur, counts.ops, eff) if op_of is not None else None
        if rate is not None and rate[1] is not None:
            # CUDA-core kernels far below the FP32 peak are bound by memory or size, not by the math tensor cores speed up
            speedup = 1.0 + (speedup - 1.0) * min(1.0, rate[1] / float(ctx.options["compute_bound_pct"]))
        impact = int(non_tc_ns * (1.0 - 1.0 / speedup))

        evidence = _evidence(names, non_tc, dur, gemm_ns)

        dev_names = sorted({str(d.name) for d in devs if (int(d.rank), int(d.index)) in ok_pairs and d.name})
        # TF32 and bf16 exist from Ampere on; Volta/Turing tensor cores take fp16 (the fix is chosen the same way)
        caps = [parse_cc(d.compute_capability) for d in devs if (int(d.rank), int(d.index)) in ok_pairs]
        remedy = "Mixed precision in fp16 (with a grad scaler)" if caps and all(c is not None and c < (8, 0) for c in caps) else "Mixed precision or TF32"
        ranks = sorted({r for r, _ in ok_pairs})
        yield ctx.finding(
            title=f"{share:.0f}% of GEMM/conv time runs without tensor cores",
            message=(
                f"On {', '.join(dev_names) or 'a tensor-core GPU'}, {fmt_ns(non_tc_ns)} of {fmt_ns(gemm_ns)} GEMM/convolution "
                f"kernel time ({share:.1f}%; {kshare:.1f}% of all kernel time) is in FP32 CUDA-core kernels such as "
                f"`{evidence['name'].iloc[0]}`{_rate_text(rate)}{_active_text(tensor_active)}. {remedy} would move it to tensor cores (est. {fmt_ns(impact)} saved "
                f"at a modelled {speedup:.2g}x speed-up)."
            ),
            impact_ns=impact,
            evidence=evidence,
            location=Location(rank=ranks[0] if len(ranks) == 1 else None),
            metrics={
                "non_tc_share_pct": round(share, 3),
                "non_tc_share_of_kernel_time_pct": round(kshare, 3),
                "gemm_time_ns": gemm_ns,
                "non_tc_gemm_time_ns": non_tc_ns,
                "tc_gemm_time_ns": gemm_ns - non_tc_ns,
                "kernel_time_ns": kernel_ns,
                "gemm_kernels": int(gemm.sum()),
                "non_tc_kernels": int(non_tc.sum()),
                "basis": basis,
                "tensor_active_pct": None if tensor_active is None else round(tensor_active, 3),
                "modelled_speedup": round(speedup, 4),
                **({"fp32_achieved_tflops": round(rate[0], 6), "fp32_pct_of_peak": None if rate[1] is None else round(rate[1], 4),
                    "fp32_peak": rate[2]} if rate is not None else {}),
            },
            key="tensor-cores",
        )


def _evidence(names: pd.Series, rows: np.ndarray, dur: np.ndarray, gemm_ns: int) -> pd.DataFrame:
    """The 20 kernel names with the most time among ``rows``: name, count, total_ms, pct_of_gemm_time, ordered as
    ``_count_sum_by_name(...).sort_values("sum", ascending=False).head(20)`` orders them, in one frame built
    from the arrays."""
    if not isinstance(names.dtype, pd.CategoricalDtype):
        ev = _count_sum_by_name(names, rows, dur).sort_values("sum", ascending=False).head(20)
        ev["total_ms"] = ev["sum"] / 1e6
        ev["pct_of_gemm_time"] = (100.0 * ev["sum"] / max(gemm_ns, 1)).round(2)
        return ev[["name", "count", "total_ms", "pct_of_gemm_time"]].reset_index(drop=True)
    used, count, total = _code_count_sum(names, rows, dur)
    top = descending_order(total)[:20]
    total = total[top]
    return pd.DataFrame({"name": pd.Categorical.from_codes(used[top], dtype=names.dtype), "count": count[top], "total_ms": total / 1e6,
                         "pct_of_gemm_time": np.round(100.0 * total / max(gemm_ns, 1), 2)})


def _code_count_sum(names: pd.Series, rows: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of a categorical ``names``: the name codes present among ``rows`` (ascending), their row counts and their
    exact int64 sums of ``dur``."""
    codes = names.cat.codes.to_numpy()[rows].astype(np.int64)
    d = dur[rows].astype(np.int64)
    named = codes >= 0  # a row without a name is in no group
    codes, d = codes[named], d[named]
    n_cat = len(names.cat.categories)
    count = np.bincount(codes, minlength=n_cat)
    total = np.zeros(n_cat, np.int64)
    np.add.at(total, codes, d)
    used = np.flatnonzero(count)
    return used, count[used].astype(np.int64), total[used]


def _count_sum_by_name(names: pd.Series, rows: np.ndarray, dur: np.ndarray) -> pd.DataFrame:
    """``frame[rows].groupby("name", observed=True)["dur_ns"].agg(["count", "sum"]).reset_index()`` on the name
    codes: one bincount and one exact sum per code, names in category order (a groupby's order), the same name
    dtype. A column that is not categorical goes through the groupby itself."""
    if not isinstance(names.dtype, pd.CategoricalDtype):
        return pd.DataFrame({"name": names[rows].to_numpy(), "dur_ns": dur[rows]}).groupby("name")["dur_ns"].agg(["count", "sum"]).reset_index()
    used, count, total = _code_count_sum(names, rows, dur)
    return pd.DataFrame({"name": pd.Categorical.from_codes(used, dtype=names.dtype), "count": count, "sum": total})


def _by_dtype(gemm: np.ndarray, tc: np.ndarray, op_of: np.ndarray, ops: pd.DataFrame, tc_name: np.ndarray, unclassed: np.ndarray):
    """Where shapes are recorded, the launching op's dtype decides: kernels of fp16/bf16/fp8 matrix ops run on tensor
    cores, those of FP32 ops only when their name says TF32/tensor cores, FP64 ones are left out; kernels of matrix
    ops whose names say nothing (Triton templates, custom kernels) join the GEMM set, while their layout and
    elementwise helpers stay out. Kernels without a counted op keep the name-based answer."""
    has = op_of >= 0
    cls = np.full(len(op_of), "", dtype=object)
    dt = np.full(len(op_of), "", dtype=object)
    cls[has] = ops["cls"].to_numpy()[op_of[has]]
    dt[has] = ops["dtype"].to_numpy()[op_of[has]]
    matrix = has & np.isin(cls, ["gemm", "conv", "attention"])
    if not matrix.any():
        return gemm, tc, "names"
    gemm = gemm.copy()
    tc = tc.copy()
    gemm[matrix] = (gemm[matrix] | unclassed[matrix]) & (dt[matrix] != "fp64")
    half = np.isin(dt, ["fp16", "bf16", "fp8"])
    tc[matrix] = half[matrix] | ((dt[matrix] == "fp32") & tc_name[matrix])
    tc &= gemm
    return gemm, tc, "dtype"


def _unclassed(names: pd.Series) -> np.ndarray:
    """Rows whose kernel name matches no kernel class (``traceinsight.work_classes``), one test per distinct name."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        per = np.array([kernel_class_of(str(c)) == "other" for c in names.cat.categories] + [False])
        codes = names.cat.codes.to_numpy()
        return per[np.where(codes >= 0, codes, len(per) - 1)]
    return np.array([kernel_class_of(str(n)) == "other" for n in names], dtype=bool)


def _fp32_rate(op_of: np.ndarray, non_tc: np.ndarray, dur: np.ndarray, ops: pd.DataFrame, eff):
    """(achieved TFLOP/s, % of the FP32 dense peak or None, the peak's label) of the CUDA-core matrix kernels whose
    ops have FLOPs; None when none has."""
    sel = non_tc & (op_of >= 0)
    if not sel.any():
        return None
    used = np.unique(op_of[sel])
    flops = float(np.nansum(ops["flops"].to_numpy()[used]))
    ns = float(ops["kernel_ns"].to_numpy()[used].sum())
    if flops <= 0 or ns <= 0:
        return None
    achieved = flops / (ns / 1e9) / 1e12
    peak, _ = eff.peak.for_dtype("fp32")
    return achieved, (100.0 * achieved / peak if peak else None), eff.peak.label("fp32")


def _rate_text(rate) -> str:
    if rate is None:
        return ""
    if rate[1] is None:
        return f"; they achieve {rate[0]:.2f} TFLOP/s ({rate[2]})"
    return f"; they achieve {rate[0]:.2f} TFLOP/s, {rate[1]:.0f}% of {rate[2]}"


def _tensor_active(eff) -> float | None:
    """Mean sampled Tensor Active (%) while GEMM or convolution kernels ran (Nsight ``--gpu-metrics-devices``)."""
    hw = eff.hardware
    if hw is None or hw.empty:
        return None
    sub = hw[(hw["metric"] == "Tensor Active") & hw["scope"].isin(["GEMM", "convolution"])]
    if sub.empty or sub["samples"].sum() <= 0:
        return None
    return float((sub["mean_pct"] * sub["samples"]).sum() / sub["samples"].sum())


def _active_text(pct: float | None) -> str:
    return "" if pct is None else f"; the GPU's own counters show Tensor Active at {pct:.0f}% while they run"
