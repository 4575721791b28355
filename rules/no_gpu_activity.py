"""TI011: the trace holds no GPU activity at all, so there is nothing on the GPU to judge."""

from __future__ import annotations

import pandas as pd

from traceinsight.rule_api import Context, Fix, Rule, Severity

from traceinsight.vocab.masks import name_mask
from traceinsight.vocab.patterns import GPU_API


class NoGpuActivity(Rule):
    code = "TI011"
    name = "no-gpu-activity"
    category = "trace_quality"
    severity = Severity.WARNING
    summary = "No kernel, copy or memset was recorded: the trace cannot say anything about the GPU."
    why = """
    Every GPU judgement (busy %, idle gaps, syncs, copies) needs the GPU's own activity records. A trace without
    them is a CPU profile: it is not "100 % idle" and not "compute-bound", it is silent about the GPU. The
    common causes are a capture that stopped before the first kernel, CUPTI range-profiler (counter) mode, a
    profiler started without CUDA activities, or a run that never used the GPU.
    """
    definition = """
    Reported when the timeline has no kernel, memcpy or memset on a device. Severity **warning** when the host
    made GPU API calls (`cuda*`, `cu*`, `hip*`) or the capture lists a GPU: the program had a GPU but its
    activity was not recorded; **info** when neither (a CPU-only profile, e.g. a TensorFlow trace recorded without a GPU). This is a
    trace-quality finding: it never becomes a performance verdict and is not graded by cost.
    """
    fix_pytorch = Fix(
        "Record CUDA activities and keep the profiler running over a few steady steps: "
        "`torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=...)`; "
        "do not enable the CUPTI range profiler (counters) for a timeline.",
        """
        from torch.profiler import profile, schedule, ProfilerActivity
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                     schedule=schedule(wait=1, warmup=2, active=5)) as prof:
            for batch in loader:
                train_step(batch); prof.step()
        """,
    )
    fix_tensorflow = Fix(
        "Profile on a machine with a visible GPU (check `tf.config.list_physical_devices('GPU')`) and keep the "
        "profile window over training steps, e.g. `TensorBoard(profile_batch=(10, 15))`.",
        """
        tf.config.list_physical_devices("GPU")        # must not be empty
        tb = tf.keras.callbacks.TensorBoard(log_dir, profile_batch=(10, 15))
        """,
    )
    fix_jax = Fix(
        "Check that JAX sees the GPU (`jax.devices()` must list GPU devices, not only the CPU: install the CUDA or ROCm"
        ' build of jaxlib) and keep the trace over a few steps after warm-up.',
        """
        print(jax.devices())                 # GPU devices, not [CpuDevice(id=0)]
        with jax.profiler.trace("/tmp/trace"):
            state, loss = train_step(state, batch)
            jax.block_until_ready(state)
        """,
    )

    fix_cuda = Fix(
        "Record the GPU's activity: run `nsys profile` with CUDA tracing on (`--trace=cuda,nvtx`; a `--trace` list "
        "without `cuda` records no kernel), keep the capture open while kernels run (a `--duration`, `--delay` or "
        "`--capture-range` that ends before the first launch records none) and let them finish inside it; check "
        "that the program sees a GPU (`cudaGetDeviceCount`) and that its launches succeed (`cudaGetLastError`).",
        """
        // nsys profile --trace=cuda,nvtx --capture-range=cudaProfilerApi --capture-range-end=stop -o run ./app
        int n = 0; cudaGetDeviceCount(&n);            // must be > 0: the program sees a GPU
        cudaProfilerStart();                          // #include <cuda_profiler_api.h>
        for (int it = 0; it < 5; ++it) step();        // kernels launched inside the capture
        cudaDeviceSynchronize();                      // and finished before it ends
        cudaProfilerStop();
        """,
    )

    def check(self, ctx: Context):
        if not ctx.views.gpu_activity.empty:
            return
        host = ctx.views.host_events
        api = host[(host["kind"].isin(("runtime", "other"))).to_numpy()]
        n_api = int(name_mask(api["name"], GPU_API, case=True).sum()) if len(api) else 0
        gpus = [d for d in ctx.meta.devices if d.name or d.compute_capability or d.sm_count]
        counts = ctx.events["kind"].astype(str).value_counts()
        evidence = pd.DataFrame({"kind": counts.index.astype(str), "events": counts.to_numpy()})
        tpus = int(ctx.meta.extra.get("tpu_planes", 0) or 0)
        other = ctx.meta.extra.get("unread_accelerator")
        elsewhere = None  # another accelerator ran: the trace is not "without a GPU", it is out of this tool's reach
        if tpus:
            elsewhere = (f"TPU profile: {tpus} TPU(s) ran the work, and traceinsight reads GPU traces only",
                         f"The capture holds {tpus} /device:TPU planes and no GPU: the accelerator's work is not read, so "
                         "nothing here judges it; only the host side is shown. Open the profile in XProf/TensorBoard's "
                         "profile plugin, which reads TPU planes.",
                         {"tpu_planes": tpus})
        elif isinstance(other, dict) and other.get("events"):  # the device ran, in categories this tool does not model
            name, cats, n = str(other.get("name", "accelerator")), ", ".join(map(str, other.get("categories", []))), int(other["events"])
            elsewhere = (f"{name} profile: the {name} accelerator ran the work, and traceinsight reads GPU timelines only",
                         f"The trace holds {n:,} {name} device event{'s' if n != 1 else ''} ({cats}) and no GPU kernel or "
                         f"copy: the accelerator's work is not read, so nothing here judges it; only the host side "
                         f"(ops, runtime calls) is shown. Read its device timeline with the accelerator's own tools "
                         f"or Holistic Trace Analysis.",
                         {"unread_device_events": n})
        if elsewhere is not None:
            title, message, extra = elsewhere
            yield ctx.finding(
                title=title,
                message=message,
                severity=Severity.INFO,
                evidence=evidence,
                fixes={},
                metrics={"gpu_api_calls": n_api, "events": int(len(ctx.events)), **extra},
                key="no-gpu-activity",
            )
            return
        if n_api or gpus:
            why = f"the program made {n_api} GPU API calls" if n_api else f"the capture lists {len(gpus)} GPU(s) ({gpus[0].name or 'unnamed'})"
            title = f"No GPU activity recorded although {why}"
            message = (
                f"Although {why}, the trace holds no kernel, copy or memset: the "
                "GPU's activity was not recorded (capture stopped before the first kernel, counter/range-profiler "
                "mode, or CUDA activities not enabled). Nothing on the GPU can be judged from it."
            )
            sev = Severity.WARNING
        else:
            title = "No GPU activity: this is a CPU-only profile"
            message = "The trace has no GPU API calls and no GPU activity: it was recorded without a GPU. GPU findings do not apply."
            sev = Severity.INFO
        yield ctx.finding(
            title=title,
            message=message,
            severity=sev,
            evidence=evidence,
            metrics={"gpu_api_calls": n_api, "events": int(len(ctx.events))},
            key="no-gpu-activity",
        )
