"""TI033: unified-memory page faults during the run: data migrating between host and GPU on demand."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.rule_api import Context, Fix, Location, Option, Rule, Severity, fmt_ns


class UnifiedMemoryFaults(Rule):
    code = "TI033"
    name = "um-oversubscription"
    category = "copy"
    severity = Severity.WARNING
    lifecycle = "preview"
    #: a memory finding is a risk or an opportunity, not time measured on the timeline: its severity is the rule's
    graded = False
    summary = "Unified-memory page faults during steps: pages migrate (or are evicted) between host and GPU on demand."
    why = """
    Managed (unified) memory moves pages to whichever processor touches them. A GPU fault stalls the warps that
    touched the page while the driver migrates it (µs per 4-64 KiB page, far below copy-engine bandwidth); when the
    working set exceeds device memory (oversubscription) pages are evicted and fault back in every step, the
    "swapping to the CPU" that makes a GPU crawl. Host faults mean the CPU touched memory the GPU owned, pulling it
    back. Steady-state steps should fault nothing: the data should already be where it is used.
    """
    definition = """
    Nsight Systems' `CUDA_UM_GPU_PAGE_FAULT_EVENTS` (grouped records: `numberOfPageFaults` over `[start, end)`) and
    `CUDA_UM_CPU_PAGE_FAULT_EVENTS` (recorded with `--cuda-um-gpu-page-faults=true`, `--cuda-um-cpu-page-faults=true`).
    Reported when at least `min_faults` (default **1**) faults fall inside steps after the rank's warm-up (end of its
    first step, extended over the ledger's warm-up regions; at least two steps); faults before are first touches. **Impact**: the duration of the
    GPU fault groups after warm-up (the faulting warps were stalled over them; host faults stall the host thread and
    are counted, not timed).
    """
    fix_pytorch = Fix(
        "Keep tensors in device memory (`tensor.to('cuda')`, not managed allocations) and, if the model does not fit, "
        "shrink it instead of oversubscribing: mixed precision, activation checkpointing, FSDP/ZeRO sharding, or CPU "
        "offload of optimizer state with explicit, overlapped copies.",
        """
        model = model.to("cuda")                                  # device memory, not managed
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x.to("cuda", non_blocking=True))
        # too large for one GPU: shard instead of oversubscribing
        model = torch.distributed.fsdp.FullyShardedDataParallel(model)
        """,
    )
    fix_tensorflow = Fix(
        "Turn off unified-memory oversubscription (`per_process_gpu_memory_fraction` > 1 / "
        "`TF_GPU_ALLOCATOR` managed settings) and fit the model in device memory: mixed precision, smaller batch, "
        "recomputation.",
        """
        gpus = tf.config.list_physical_devices("GPU")
        tf.config.set_logical_device_configuration(gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=14_000)])
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        """,
    )
    fix_jax = Fix(
        "Fit the step in device memory instead of oversubscribing it: rematerialise activations (`jax.checkpoint`), "
        "compute in bf16, shard parameters and optimizer state over the devices, and move what must leave the GPU with "
        'explicit, overlapped `jax.device_put` copies.',
        """
        block = jax.checkpoint(block)
        params = jax.tree.map(lambda p: p.astype(jnp.bfloat16), params)
        """,
    )
    fix_cuda = Fix(
        "Prefetch managed memory to where it is used before the kernels run and advise the driver of placement, or "
        "use explicit device allocations and async copies.",
        """
        cudaMemAdvise(ptr, bytes, cudaMemAdviseSetPreferredLocation, device);
        cudaMemPrefetchAsync(ptr, bytes, device, stream);   // before the kernels that read it
        kernel<<<grid, block, 0, stream>>>(ptr);
        cudaMemPrefetchAsync(ptr, bytes, cudaCpuDeviceId, stream);  // only if the host reads it next
        """,
    )

    min_faults = Option(1, "Report at least this many page faults after warm-up.")

    def check(self, ctx: Context):
        mem = ctx.views.memory
        if mem.table.empty:
            return  # no memory rows, so no page fault (the fault rows are not even selected)
        faults = mem.faults
        if faults.empty:
            return
        steady = faults[mem.steady(faults["rank"].to_numpy(), faults["start_ns"].to_numpy(), faults["step"].to_numpy())]
        for rank, f in steady.groupby("rank", sort=True):
            count = int(f["count"].sum())
            if count < self.min_faults:
                continue
            gpu = f[(f["kind"] == "um_fault_gpu").to_numpy()]
            cpu = f[(f["kind"] == "um_fault_cpu").to_numpy()]
            stall = int(gpu["dur_ns"].sum())
            steps = f["step"].to_numpy()
            n_steps = len(np.unique(steps[steps >= 0]))
            evidence = f.groupby([f["kind"].astype(str), "device", "step"], sort=True).agg(
                records=("count", "size"), faults=("count", "sum"), time_ms=("dur_ns", lambda x: x.sum() / 1e6)).reset_index()
            yield ctx.finding(
                title=f"rank {int(rank)}: {count:,} unified-memory page faults after warm-up",
                message=(f"After warm-up, rank {int(rank)} took {int(gpu['count'].sum()):,} GPU page faults "
                         f"({fmt_ns(stall)} of fault handling) and {int(cpu['count'].sum()):,} host page faults"
                         + (f" across {n_steps} steps" if n_steps else "")
                         + ": managed memory is migrating on demand, the sign of a working set that does not stay on the GPU "
                           "(oversubscription) or of data touched alternately by host and device."),
                impact_ns=stall,
                evidence=evidence,
                instances=pd.DataFrame({"start_ns": gpu["start_ns"], "end_ns": gpu["start_ns"] + gpu["dur_ns"], "rank": gpu["rank"],
                                        "device": gpu["device"], "label": "UM faults"}) if len(gpu) else None,
                metrics={"rank": int(rank), "gpu_faults": int(gpu["count"].sum()), "cpu_faults": int(cpu["count"].sum()),
                         "gpu_fault_ns": stall, "steps": n_steps},
                location=Location(rank=int(rank)),
                key=str(int(rank)),
            )
