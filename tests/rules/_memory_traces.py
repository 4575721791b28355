"""Traces the memory rules' case files share, written in the real formats by the test writers."""

from __future__ import annotations

import traceinsight

from ..helpers.kineto_writer import KinetoTrace
from ..helpers.nsys_writer import NsysTrace
from ..helpers.xplane_writer import XSpaceTrace

GiB = 1 << 30


def kineto_steps(tmp_path, *, capacity=80 * GiB, held=4 * GiB, batch=2 * GiB, reserved=8 * GiB, kernel_us=5_000.0,
                 gap_us=3_000.0, steps=5, grow_per_step=0, malloc_in_steps=False, free_in_steps=False, free_in_op=False,
                 oom=False, engine_op=None, name="t.json", **analyze):
    """``steps`` training steps on one GPU: per step one activation allocation of ``batch`` over ``held`` bytes
    kept throughout, a kernel of ``kernel_us`` and ``gap_us`` of idle; ``reserved`` grows by ``grow_per_step``
    after the first step; optional cudaMalloc / cudaFree runtime calls inside every step after the first, the
    cudaFree outside every framework op (as ``torch.cuda.empty_cache()`` runs) or, with ``free_in_op``, inside an
    ``aten::empty_strided`` (as the caching allocator flushes when an allocation fails). ``engine_op``: a range a
    serving engine records in every step (``vllm::unified_attention``), the trace's only sign of the engine."""
    t = KinetoTrace(memory_bytes=capacity)
    step_us = kernel_us + gap_us + 1_000
    res = reserved
    for s in range(steps):
        t0 = s * step_us
        t.step(s + 1, t0, step_us - 10)
        t.cpu_op("aten::empty", t0 + 50, 30)
        if engine_op:
            t.cpu_op(engine_op, t0 + 1_100, kernel_us)
        if s:
            res += grow_per_step
            if malloc_in_steps:
                t.runtime("cudaMalloc", t0 + 60, 200)
            if free_in_steps:
                if free_in_op:
                    t.cpu_op("aten::empty_strided", t0 + 250, 900)
                t.runtime("cudaFree", t0 + 300, 800)
        t.memory(t0 + 60, batch, allocated=held + batch, reserved=res)
        t.kernel("volta_sgemm_128x64_nn", t0 + 1_200, kernel_us)
        t.memory(t0 + 1_200 + kernel_us, -batch, allocated=held, reserved=res)
    if oom:
        t.out_of_memory((steps - 1) * step_us + 500, 40 * GiB, allocated=held + batch, reserved=res)
    return traceinsight.analyze(t.write(tmp_path / name), **analyze)


def nsys_um(tmp_path, *, faults_in_steps=True, name="um.sqlite"):
    t = NsysTrace()
    for s in range(4):
        t0 = s * 10_000_000
        t.step(s + 1, t0, 9_900_000)
        t.kernel("k", t0 + 1_000_000, 5_000_000)
        if s == 0 or faults_in_steps:
            t.um_gpu_faults(t0 + 1_500_000, 800_000, 300)
            t.um_cpu_fault(t0 + 7_000_000)
    return traceinsight.analyze(t.write(tmp_path / name))


def of(analysis, code):
    return [f for f in analysis.findings if f.code == code]


def kineto_uncached(tmp_path, *, iterations=6, layers=8, caching=False, markers="optimizer", name="u.json", **analyze):
    """A data-parallel CNN training loop on ROCm as the PyTorch profiler records it with the caching allocator off
    (``PYTORCH_NO_CUDA_MEMORY_CACHING=1``): per iteration ``Optimizer.zero_grad``, ``layers`` convolutions each
    allocating its output with ``hipMalloc`` and freeing its input with ``hipFree`` (a device synchronisation that
    grows with the iteration, as the real run's did), then ``Optimizer.step``. ``caching``: the same loop with the
    pool on (the driver's malloc is called in the first iteration only, its free never). ``markers``: "optimizer" (no step markers, as the
    real trace), "profiler" (ProfilerStep ranges too) or "none" (no optimizer ranges either)."""
    t = KinetoTrace(memory_bytes=64 * GiB)
    t0 = 0.0
    for it in range(iterations):
        driver = not caching or it == 0
        free_us = 200.0 * (1 + it)
        layer_us = 400.0 + (0.0 if caching else free_us) + (60.0 if driver else 0.0)
        it_us = 40.0 + layers * layer_us + 200.0
        if markers == "profiler":
            t.step(it + 1, t0, it_us)
        if markers != "none":
            t.cpu_op("Optimizer.zero_grad#SGD.zero_grad", t0 + 5, 20)
        c = t0 + 40
        for k in range(layers):
            op = t.cpu_op("aten::conv2d", c, layer_us - 10)
            if driver:
                t.runtime("hipMalloc", c + 5, 50)
            t.kernel("Cijk_Ailk_Bljk_SB_MT64x64x16_conv", c + 70, 300, launch_us=c + 60, launch_name="hipLaunchKernel", op=op)
            if not caching:  # a pool keeps what a tensor frees: the driver's free is never called
                t.runtime("hipFree", c + 380, free_us)
            c += layer_us
        if markers != "none":
            op = t.cpu_op("Optimizer.step#SGD.step", c, 150)
            t.kernel("sgd_update_kernel", c + 20, 100, launch_us=c + 10, launch_name="hipLaunchKernel", op=op)
        t0 += it_us + 10
    return traceinsight.analyze(t.write(tmp_path / name), **analyze)


def xplane_jax(tmp_path, *, in_use=1 * GiB, pool=14 * GiB, capacity=16 * GiB, name="j.xplane.pb"):
    """Four JAX training steps (``jit_train_step``) in an XSpace: each allocates ``in_use`` bytes from a BFC pool of
    ``pool`` bytes reserved up front (JAX preallocates; ``pool=None``: nothing reserved beyond what is in use)."""
    t = XSpaceTrace(memory_bytes=capacity)
    for s in range(4):
        t0 = s * 10_000_000
        t.step(s + 1, t0, 9_000_000)
        t.op("jit_train_step", t0 + 100_000, 8_000_000)
        t.alloc(t0 + 200_000, in_use, op="jit_train_step", grow_to=pool)
        t.kernel("fusion_1", t0 + 1_000_000, 5_000_000)
        t.free(t0 + 7_000_000, in_use, op="jit_train_step")
    return traceinsight.analyze(t.write(tmp_path / name))
