"""Traces the memory rules' case files share, written in the real formats by the test writers."""

from __future__ import annotations

import traceinsight

from ..helpers.kineto_writer import KinetoTrace
from ..helpers.nsys_writer import NsysTrace

GiB = 1 << 30


def kineto_steps(tmp_path, *, capacity=80 * GiB, held=4 * GiB, batch=2 * GiB, reserved=8 * GiB, kernel_us=5_000.0,
                 gap_us=3_000.0, steps=5, grow_per_step=0, malloc_in_steps=False, free_in_steps=False, free_in_op=False,
                 oom=False, name="t.json", **analyze):
    """``steps`` training steps on one GPU: per step one activation allocation of ``batch`` over ``held`` bytes
    kept throughout, a kernel of ``kernel_us`` and ``gap_us`` of idle; ``reserved`` grows by ``grow_per_step``
    after the first step; optional cudaMalloc / cudaFree runtime calls inside every step after the first, the
    cudaFree outside every framework op (as ``torch.cuda.empty_cache()`` runs) or, with ``free_in_op``, inside an
    ``aten::empty_strided`` (as the caching allocator flushes when an allocation fails)."""
    t = KinetoTrace(memory_bytes=capacity)
    step_us = kernel_us + gap_us + 1_000
    res = reserved
    for s in range(steps):
        t0 = s * step_us
        t.step(s + 1, t0, step_us - 10)
        t.cpu_op("aten::empty", t0 + 50, 30)
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
