"""TI015: compilation or autotuning runs again in the steady state (torch.compile recompiles, XLA/tf.function
retracing, cuDNN re-tuning for new shapes)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.vocab.buckets import AVOIDABLE_BUCKETS
from traceinsight.vocab.intervals import merge_intervals
from traceinsight.vocab.masks import name_mask
from traceinsight.vocab.patterns import RECOMPILE_CALL
from traceinsight.rule_api import Context, Fix, Location, Option, Rule, Severity, fmt_ns
from traceinsight.rulelib.warmup import steady_recompiles


class RecompileInSteadyState(Rule):
    code = "TI015"
    name = "recompile-in-steady-state"
    category = "gpu_idle"
    root_cause = True  # the idle it costs has a known reason: TI001's gaps around a recompile are its doing
    severity = Severity.WARNING
    summary = "Compilation or autotuning runs again after the first steps: the program recompiles in the steady state."
    why = """
    Compiling (torch.compile / Inductor / Triton, XLA, tf.function tracing, nvFuser) and autotuning (cuDNN
    benchmark mode, Triton autotune) belong to the first steps. When they run again later, something makes the
    compiled code unusable: input shapes that change from step to step, a guard that fails (a Python value that
    changes, a new dtype), or a graph break that leaves new code paths to compile. Each recompile stalls the
    step for tens to thousands of milliseconds while the GPU waits, and with dynamic shapes it keeps happening.
    """
    definition = """
    Host ranges whose names say compilation or autotuning (`compile`, `compilation`, `autotune`, `nvrtc`,
    `KernelExecutor::compile`, `cudnnFind*`; `Torch-Compiled Region` and `CompiledFunction`, which are compiled
    code running, do not count) that begin after the rank's second step began (`steady.steady_recompiles`). At
    the start such ranges are one-time work (the ledger books them as warm-up, TI013); after it they are a cost
    the steady state pays, and the ledger keeps their idle in its steady-state buckets. **Impact** = the
    avoidable idle the ledger books in the gaps those ranges touch (the GPU waited while the host compiled).
    A root cause (`Rule.root_cause`): the GPU idle of TI001's gaps that these ranges cover is this finding's doing,
    so TI001 is listed under it and its saving is not counted twice.
    Reported when the ranges add up to at least `min_total_us` (default **1000 µs**); needs step markers
    (without them nothing says where the steady state begins).
    """
    fix_pytorch = Fix(
        "Find why it recompiles with `TORCH_LOGS=recompiles` and remove the cause: mark varying dimensions dynamic "
        "(`torch._dynamo.mark_dynamic(x, 0)` or `torch.compile(dynamic=True)`), pad inputs to a few fixed shapes "
        "(bucketing), keep Python values that guards read constant, and fix graph breaks (`torch._dynamo.explain`).",
        """
        # see each recompile and the guard that failed:  TORCH_LOGS=recompiles python train.py
        model = torch.compile(model, dynamic=True)          # or: torch._dynamo.mark_dynamic(batch, 0)
        batch = pad_to_bucket(batch, buckets=(128, 256, 512))  # few shapes -> few compiles
        """,
    )
    fix_tensorflow = Fix(
        "Stop retracing: give `tf.function` an `input_signature` with `None` for varying dimensions (or "
        "`reduce_retracing=True`), and pad batches to a few shapes for XLA (`jit_compile=True`).",
        """
        @tf.function(input_signature=[tf.TensorSpec([None, 128], tf.float32)], reduce_retracing=True)
        def train_step(x): ...
        ds = ds.padded_batch(64, padded_shapes=[512])  # fixed shapes: one XLA compile
        """,
    )
    fix_jax = Fix(
        "Stop recompiling: every new input shape or static argument value compiles a new program. Pad inputs to a few "
        "fixed shapes, pass values that change per step as arrays rather than `static_argnums`, and find each compile "
        'with `jax.config.update("jax_log_compiles", True)`.',
        """
        jax.config.update("jax_log_compiles", True)
        x = jnp.pad(x, ((0, 0), (0, bucket - x.shape[1])))    # a few fixed shapes
        state, loss = train_step(state, x, jnp.float32(lr))   # a changing value as an array, not a static argument
        """,
    )

    fix_cuda = Fix(
        "Compile and tune once: build NVRTC programs and load their modules at start-up (keep the `CUfunction` of "
        "each kernel variant, do not compile per call), run `cudnnFind*` once per input shape and reuse the "
        "algorithm it picked, and keep the set of shapes small (pad to a few sizes).",
        """
        static std::map<std::array<int, 4>, cudnnConvolutionFwdAlgo_t> algo_of;   // tuned once per shape
        auto it = algo_of.find(shape);
        if (it == algo_of.end()) {
            cudnnFindConvolutionForwardAlgorithm(handle, x_desc, w_desc, conv_desc, y_desc, 1, &found, &perf);
            it = algo_of.emplace(shape, perf.algo).first;
        }
        cudnnConvolutionForward(handle, &alpha, x_desc, x, w_desc, w, conv_desc, it->second, ws, ws_bytes, &beta, y_desc, y);
        """,
    )

    min_total_us = Option(1000.0, "Report when the recompile ranges after the first steps add up to at least this (µs).")

    def check(self, ctx: Context):
        v = ctx.views
        host = v.host_events
        if host.empty or v.steps.empty:
            return
        if not name_mask(host["name"], RECOMPILE_CALL).any():
            return  # no compilation range at all (tested once per distinct name): none can be in the steady state
        late = np.flatnonzero(steady_recompiles(v.views))  # the steady-state model reads the views
        if not len(late):
            return
        rank = host["rank"].to_numpy()[late].astype(np.int64)
        start = host["start_ns"].to_numpy(np.int64)[late]
        end = start + np.maximum(host["dur_ns"].to_numpy(np.int64)[late], 0)
        names = host["name"].take(late).astype(str).to_numpy()
        step = host["step"].to_numpy()[late] if "step" in host else np.full(len(late), -1)
        led = v.ledger
        for r in np.unique(rank).tolist():
            m = rank == r
            a, b = merge_intervals(start[m], end[m])
            total = int((b - a).sum())
            if total < self.min_total_us * 1e3:
                continue
            inst = pd.DataFrame({"start_ns": a, "end_ns": b, "rank": r, "label": "recompile"})
            idle = int(led.claim(AVOIDABLE_BUCKETS, rank=r, within=inst))
            steps = sorted({int(x) for x in step[m] if x >= 0})
            ev = (pd.DataFrame({"name": names[m], "step": step[m], "start_ms": start[m] / 1e6, "duration_ms": (end[m] - start[m]) / 1e6})
                  .sort_values("duration_ms", ascending=False).head(20).round(3))
            where = f"rank {r}: " if len(ctx.meta.ranks) > 1 else ""
            yield ctx.finding(
                title=f"{where}compilation runs again in the steady state: {len(a)} time(s), {fmt_ns(total)}" + (f" (steps {', '.join(map(str, steps[:6]))})" if steps else ""),
                message=(
                    f"After the first steps the host still compiles or autotunes ({fmt_ns(total)} in {len(a)} range(s), e.g. "
                    f"{names[m][0][:80]}); the GPU sat idle {fmt_ns(idle)} meanwhile. Compiled code is being rebuilt, most often "
                    "because input shapes or guarded values change between steps."
                ),
                evidence=ev,
                instances=inst,
                impact_ns=idle,
                location=Location(rank=r),
                metrics={"recompile_ns": total, "recompiles": int(len(a)), "idle_ns": idle, "steps": steps},
                key=f"rank{r}",
            )
