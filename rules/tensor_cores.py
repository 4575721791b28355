"""TI007: matrix math runs on FP32 CUDA cores on a GPU that has tensor cores."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.vocab.gpus import parse_cc
from traceinsight.rule_api import Context, Fix, Location, Option, Rule, Severity, fmt_ns
from traceinsight.vocab.work_classes import GEMM_CLASSES, is_gemm_class, kernel_classes

from traceinsight.vocab.masks import name_mask
from traceinsight.vocab.patterns import FP64, LIBRARY_KERNEL, NON_NVIDIA, NOT_TENSOR_CORE, PRE_VOLTA, TENSOR_CORE, TENSOR_CORE_GPU, VOLTA_PLUS_KERNEL
from traceinsight.rulelib.groups import descending_order
from traceinsight.rulelib.names import matches, names_where, pair_codes


def _has_tensor_cores(name: str | None, cc: str | None, vendor: str | None) -> bool | None:
    """True/False when known; None when neither compute capability nor a recognisable name says."""
    if matches(vendor, NON_NVIDIA) or matches(name, NON_NVIDIA):
        return False  # AMD/Intel matrix cores exist but their kernel names follow other conventions
    parsed = parse_cc(cc)
    if parsed is not None:
        return parsed >= (7, 0)
    if matches(name, PRE_VOLTA):
        return False
    if matches(name, TENSOR_CORE_GPU):
        return True
    return None


#: When the CUDA-core matrix time is mostly in the program's own kernels (no library's name: ``LIBRARY_KERNEL``),
#: autocast, TF32 switches and cuBLAS's tiling rules do not reach it: the kernel itself must use tensor cores, or
#: the program must call the library's GEMM instead. This fix replaces every framework's then.
OWN_KERNEL_FIXES: dict[str, Fix] = {
    "pytorch": Fix(
        "The matrix time is in your own kernel, which computes on CUDA cores: autocast and TF32 switches do not change "
        "it. Call the library GEMM instead (`torch.matmul`/`@` on fp16/bf16 tensors, or TF32 for FP32, picks "
        "tensor-core kernels), or write the kernel for tensor cores (Triton `tl.dot`, CUTLASS, CUDA WMMA/`mma.sync`).",
        """
        c = torch.matmul(a.to(torch.bfloat16), b.to(torch.bfloat16))   # cuBLAS on tensor cores, instead of matmul_k
        torch.set_float32_matmul_precision("high")                      # or keep FP32 inputs on TF32 tensor cores

        @triton.jit                                                      # or a Triton kernel: tl.dot uses tensor cores
        def matmul_kernel(...):
            acc += tl.dot(a_tile, b_tile)
        """,
    ),
    "cuda": Fix(
        "The matrix time is in your own kernel, which computes on CUDA cores: use tensor cores in it (WMMA "
        "`nvcuda::wmma` fragments or `mma.sync` on FP16/BF16/TF32 tiles, or a CUTLASS GEMM), or call cuBLAS "
        "(`cublasGemmEx` with FP16/BF16 inputs, or TF32 math mode for FP32).",
        """
        #include <mma.h>
        using namespace nvcuda;
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::load_matrix_sync(a, A + tile_a, lda); wmma::load_matrix_sync(b, B + tile_b, ldb);
        wmma::mma_sync(acc, a, b, acc);                                   // on tensor cores
        """,
    ),
}
OWN_KERNEL_FIXES["tensorflow"] = OWN_KERNEL_FIXES["jax"] = Fix(
    "The matrix time is in a custom kernel (a custom op), which computes on CUDA cores: the mixed-precision policy "
    "does not change it. Use the framework's matmul/conv ops (they pick tensor-core kernels in fp16/bf16), or write "
    "the kernel for tensor cores (CUTLASS, WMMA, Triton `tl.dot`).",
    "",
)


class NoTensorCores(Rule):
    code = "TI007"
    category = "compute"
    name = "no-tensor-cores"
    speeds_up = ("gemm", "conv")  # the what-if shortens only these classes' kernels
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

    **GEMM/conv kernels**: the efficiency view's GEMM and convolution classes (``traceinsight.vocab.work_classes``, the one
    kernel classifier: the launching op's class where shapes are recorded, else the kernel name's; cuBLAS, cuDNN,
    CUTLASS, xmma, nvjet, hipBLASLt/Tensile ``Cijk_``, CK ``ck::``, Triton templates ``triton_tem_`` …), FP64
    (``dgemm``; AMP does not apply) left out; so this card's GEMM time and rate are the efficiency table's.
    **Tensor-core kernels** among them: names containing a tb_plugin ``TC_Allowlist`` / xprof kernel-stats substring
    (``h884 s884 h1688 s1688 c1688 hmma i8816 16816 i16832 xmma``) or a newer one (``tensorop wgmma gmma nvjet sm80_
    sm90_ tf32 bf16``), unless the name also says CUDA cores (``simt sgemm ffma gemv scudnn cgemm wgrad_alg0 …``;
    e.g. ``cutlass_80_simt_sgemm`` and cuBLAS's ``sm80_xmma_gemm_f32f32_…_ffma`` are FP32 on CUDA cores).

    **With recorded shapes** (PyTorch ``record_shapes=True``) the launching op decides instead of the name: kernels
    of fp16/bf16/fp8 ops run on tensor cores whatever their name; those of FP32 ops only when the name says
    TF32/tensor cores; FP64 ops are left out. **With GPU-metrics samples** (Nsight ``--gpu-metrics-devices``) the
    hardware decides: no finding from names alone when the sampled Tensor Active while GEMM/convolution kernels run
    is >= ``tensor_active_pct`` = **20 %**; otherwise the message quotes it.

    **Own kernels**: when at least half of the CUDA-core time is in kernels no library or framework names
    (``LIBRARY_KERNEL`` in ``traceinsight.vocab.patterns``: a program's own ``matmul_k``), the title says so and the
    fix is to call the library's GEMM or write the kernel for tensor cores (WMMA/``mma.sync``, CUTLASS, Triton
    ``tl.dot``): autocast, TF32 switches and cuBLAS's tiling rules do not reach such a kernel's arithmetic.

    **Share** = non-tensor-core GEMM/conv time / all GEMM/conv time on the considered devices. Reported when
    share >= ``min_share_pct`` = **50 %** and that time is >= ``min_kernel_pct`` = **5 %** of all kernel time.
    tb_plugin only speaks when *no* kernel uses tensor cores (share = 100 %); 50 % also catches models where
    only some layers were converted. xprof's matching check fires when < 10 % of device compute is 16-bit.

    **Impact** = non-tensor-core GEMM/conv time x (1 - 1/speed-up). The speed-up is priced from the hardware: the
    fix selects bf16 tensor cores (fp16 before Ampere), and each FP32 op with FLOPs and bytes (shapes) keeps the
    fraction of its roofline it reaches now, its roofline moving from max(FLOPs / FP32 dense peak, bytes /
    bandwidth) to max(FLOPs / bf16 dense peak, half the bytes / bandwidth). A compute-bound GEMM so speeds up by the
    ratio of the dense peaks (16x on an A100, 14.8x on an H100 SXM: the cap, stated on the card), a memory-bound
    one by its smaller operands. CUDA-core time without FLOPs takes the priced part's factor when that part is at
    least half of it, else ``speedup`` = **2x** (stated); without both dense peaks all of it does. The card's
    saving is what the what-if replay gives back with the GEMM/convolution kernels (``speeds_up``) that much
    faster. Graded on the common scale, but at most ``max_severity`` = **info** by default: modelled headroom
    (and a numerics decision), not time the GPU lost; the verdict names it as the lever.
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
    speedup = Option(2.0, "Speed-up assumed for CUDA-core GEMM time the peaks cannot price (no FLOPs per op, or no dense peaks for the GPU).", above=1)
    tensor_active_pct = Option(20.0, "With GPU-metrics samples: no finding from names alone when Tensor Active during GEMM/conv kernels is at least this %.", max=100)

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
        # GEMM/convolution kernels are the efficiency view's (``work_classes``: the launching op's class where shapes
        # are recorded, else the name's), so this card's GEMM time and rate are the efficiency table's
        cls_all = eff.kernel_cls if eff.kernel_cls is not None and len(eff.kernel_cls) == len(k) else kernel_classes(k["name"])
        cls = cls_all[on_ok] if not on_ok.all() else cls_all
        fp64 = names_where(names, lambda m: m(FP64))
        gemm = is_gemm_class(cls) & ~fp64
        tc = gemm & names_where(names, lambda m: m(TENSOR_CORE) & ~m(NOT_TENSOR_CORE))
        basis = "names"
        if op_of is not None:
            gemm, tc, basis = _by_dtype(gemm, tc, op_of, counts.ops, names_where(names, lambda m: m(TENSOR_CORE) & ~m(NOT_TENSOR_CORE)))
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

        caps = [parse_cc(d.compute_capability) for d in devs if (int(d.rank), int(d.index)) in ok_pairs]
        pre_ampere = bool(caps) and all(c is not None and c < (8, 0) for c in caps)
        target = "fp16" if pre_ampere else "bf16"  # what the fix selects: TF32 and bf16 exist from Ampere on
        price = _price(op_of, non_tc, dur, counts.ops if counts is not None else None, eff.peak, target,
                       max(float(ctx.options["speedup"]), 1.0))
        speedup = price["speedup"]
        impact = int(non_tc_ns * (1.0 - 1.0 / speedup))
        rate = _class_rate(eff)

        evidence = _evidence(names, non_tc, dur, gemm_ns)

        dev_names = sorted({str(d.name) for d in devs if (int(d.rank), int(d.index)) in ok_pairs and d.name})
        remedy = "Mixed precision in fp16 (with a grad scaler)" if pre_ampere else "Mixed precision or TF32"
        # the program's own kernels (no library's name) are out of reach of the precision switches
        own = non_tc & ~names_where(names, lambda m: m(LIBRARY_KERNEL))
        own_ns = int(dur[own].sum())
        own_kernels = 2 * own_ns >= non_tc_ns
        # (the per-GPU variants are about the precision switches too: none applies to the program's own kernels)
        fixes = {**{k: v for k, v in type(self).fixes().items() if ":" not in k}, **OWN_KERNEL_FIXES} if own_kernels else None
        if own_kernels:
            remedy = ("These are the program's own kernels (no library's name), which the precision switches do not reach; "
                      "writing them for tensor cores or calling the library's GEMM instead")
        ranks = sorted({r for r, _ in ok_pairs})
        yield ctx.finding(
            title=f"{share:.0f}% of GEMM/conv time runs without tensor cores" + (", in the program's own kernels" if own_kernels else ""),
            fixes=fixes,
            message=(
                f"On {', '.join(dev_names) or 'a tensor-core GPU'}, {fmt_ns(non_tc_ns)} of {fmt_ns(gemm_ns)} GEMM/convolution "
                f"kernel time ({share:.1f}%; {kshare:.1f}% of all kernel time) is in FP32 CUDA-core kernels such as "
                f"`{evidence['name'].iloc[0]}`{_rate_text(rate)}{_active_text(tensor_active)}. {remedy} would move it to tensor cores: "
                f"{price['how']}. The saving shown is what the what-if replay gives back when that time runs {speedup:.3g}x faster."
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
                "own_kernel_ns": own_ns,
                "basis": basis,
                "tensor_active_pct": None if tensor_active is None else round(tensor_active, 3),
                "modelled_speedup": round(speedup, 4),
                "speedup_basis": price["basis"],
                "priced_dtype": price["dtype"],
                "priced_share_pct": round(price["covered_pct"], 3),
                **({"speedup_cap": round(price["cap"], 4)} if price["cap"] else {}),
                **({"gemm_achieved_tflops": round(rate[0], 6), "gemm_pct_of_peak": None if rate[1] is None else round(rate[1], 4),
                    "gemm_peak": rate[2]} if rate is not None else {}),
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


def _by_dtype(gemm: np.ndarray, tc: np.ndarray, op_of: np.ndarray, ops: pd.DataFrame, tc_name: np.ndarray):
    """Where shapes are recorded, the launching op's dtype decides among the GEMM/convolution kernels: those of
    fp16/bf16/fp8 ops run on tensor cores, those of FP32 ops only when their name says TF32/tensor cores, FP64 ones
    are left out. Kernels without a counted op keep the name-based answer."""
    has = op_of >= 0
    dt = np.full(len(op_of), "", dtype=object)
    dt[has] = ops["dtype"].to_numpy()[op_of[has]]
    mine = has & gemm
    if not mine.any():
        return gemm, tc, "names"
    gemm = gemm & (dt != "fp64")
    tc = tc.copy()
    half = np.isin(dt, ["fp16", "bf16", "fp8"])
    tc[mine] = half[mine] | ((dt[mine] == "fp32") & tc_name[mine])
    tc &= gemm
    return gemm, tc, "dtype"


#: Bytes per element of the dtypes a fix selects (what an op's bytes become once its operands are in that dtype).
_ITEM = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


def _price(op_of: np.ndarray | None, non_tc: np.ndarray, dur: np.ndarray, ops: pd.DataFrame | None, peak, target: str,
           assumed: float) -> dict:
    """The modelled speed-up of the CUDA-core GEMM time on tensor cores in ``target`` (bf16, fp16 before Ampere).

    Each op with FLOPs and bytes keeps the fraction of its roofline it reaches now: its roofline time moves from
    max(FLOPs / FP32 dense peak, bytes / bandwidth) to max(FLOPs / ``target`` dense peak, bytes in ``target`` /
    bandwidth), and its kernel time by the same ratio. So a compute-bound FP32 GEMM speeds up by the ratio of the
    dense peaks (the cap), a memory-bound one by its smaller operands, no op by more than the peaks' ratio.
    Time without FLOPs takes the priced part's factor when that part is at least half the time, else ``assumed``
    (the rule's ``speedup`` option); without both peaks (unknown GPU, a single ``--peak-tflops``) all of it does."""
    non_tc_ns = float(dur[non_tc].sum())
    out = {"speedup": assumed, "dtype": None, "covered_pct": 0.0, "cap": None, "basis": "assumed",
           "how": f"an assumed {assumed:.3g}x speed-up (no FLOPs per op or no dense peaks to price it from)"}
    p_old = peak.tflops.get("fp32") if "*" not in peak.tflops else None
    p_new = peak.tflops.get(target) if "*" not in peak.tflops else None
    if non_tc_ns <= 0 or not p_old or not p_new or p_new <= p_old:
        return out
    cap = p_new / p_old
    out["cap"] = cap
    covered_ns = priced_ns = 0.0
    if op_of is not None and ops is not None and len(ops):
        sel = non_tc & (op_of >= 0)
        if sel.any():
            t = np.bincount(op_of[sel], weights=dur[sel].astype(float), minlength=len(ops))
            used = np.flatnonzero(t > 0)
            flops = np.nan_to_num(ops["flops"].to_numpy(dtype=float)[used])
            nbytes = np.nan_to_num(ops["bytes"].to_numpy(dtype=float)[used])
            item = np.array([_ITEM.get(str(d), 4) for d in ops["dtype"].to_numpy()[used]], dtype=float)
            ok = flops > 0
            bw = float(peak.bandwidth_gbs or 0.0) * 1e9
            mem_old = nbytes / bw if bw > 0 else np.zeros(len(used))
            mem_new = nbytes * (_ITEM[target] / item) / bw if bw > 0 else np.zeros(len(used))
            old = np.maximum(flops / (p_old * 1e12), mem_old)
            new = np.maximum(flops / (p_new * 1e12), mem_new)
            ratio = np.where(ok & (old > 0), new / np.where(old > 0, old, 1.0), 1.0)
            tt = t[used]
            covered_ns = float(tt[ok].sum())
            priced_ns = float((tt * ratio)[ok].sum())
    if covered_ns <= 0:
        out["how"] = (f"an assumed {assumed:.3g}x speed-up (no FLOPs per op to price it from the {target} dense peak; "
                      "record shapes to price it)")
        return out
    factor = covered_ns / max(priced_ns, 1.0)
    rest = non_tc_ns - covered_ns
    rest_factor = factor if covered_ns >= 0.5 * non_tc_ns else assumed
    total_new = priced_ns + rest / rest_factor
    speedup = max(non_tc_ns / max(total_new, 1.0), 1.0)
    pct = 100.0 * covered_ns / non_tc_ns
    label = peak.label(target)
    how = (f"priced per op from its achieved rate against its roofline, moved to {label} and {target} operands "
           f"({pct:.0f} % of that time has FLOPs: {factor:.3g}x faster; at most {cap:.3g}x, the ratio of the {target} "
           f"to the FP32 dense peak)")
    if rest > 0:
        how += (f"; the other {100 - pct:.0f} % is taken at the same factor" if rest_factor == factor
                else f"; the other {100 - pct:.0f} % (no FLOPs) at an assumed {assumed:.3g}x")
    out.update(speedup=speedup, dtype=target, covered_pct=pct, basis="peaks", how=how)
    return out


def _class_rate(eff):
    """(achieved TFLOP/s, % of its dense peak or None, the peak's label) of the efficiency view's GEMM rows (GEMM and
    convolution together): the figures of the efficiency table, not a second computation. None without FLOPs."""
    rows = [r for r in eff.class_rows if r["cls"] in GEMM_CLASSES and r.get("achieved_tflops")]
    if not rows:
        return None
    flops = sum(float(r["modelled_flops"]) for r in rows)
    ns = sum(float(r["modelled_ns"]) for r in rows)
    if flops <= 0 or ns <= 0:
        return None
    achieved = flops / (ns / 1e9) / 1e12
    main = max(rows, key=lambda r: r["modelled_ns"])
    peak = main.get("peak_tflops")
    return achieved, (100.0 * achieved / peak if peak else None), main["peak_label"]


def _rate_text(rate) -> str:
    if rate is None:
        return ""
    if rate[1] is None:
        return f"; the GEMMs achieve {rate[0]:.2f} TFLOP/s ({rate[2]})"
    return f"; the GEMMs achieve {rate[0]:.2f} TFLOP/s, {rate[1]:.0f}% of {rate[2]}"


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
