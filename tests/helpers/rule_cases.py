"""What the rule case files (tests/rules/test_<CODE>.py) share: running one rule on a trace, the healthy workloads
they plant around a problem, and the bad/good example pair (the same workload written badly, and fixed the way the
rule's own fix text says)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import traceinsight

from .kineto_writer import KinetoTrace

DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
GEMM = "ampere_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn"  # a tensor-core GEMM: keeps TI007 out of the way
GRID = (216, 1, 1)  # fills 108 SMs: keeps TI008 out of the way


def findings_of(path, code, min_impact=None, **options):
    """The findings of rule ``code`` alone on ``path`` (or a timeline), its options given as keywords; the rule must
    not have failed."""
    a = traceinsight.analyze(path, select=[code], options={code: options} if options else None, min_impact=min_impact)
    assert not [w for w in a.warnings if code in w and "failed" in w], a.warnings
    return [f for f in a.findings if f.code == code]


def busy_steps(t: KinetoTrace, steps: int, step_us: float, busy_us: float, *, first=0.0, kernel_us=50.0):
    """Steps whose first ``busy_us`` are back-to-back 50 µs kernels launched well ahead (a healthy GPU)."""
    for s in range(steps):
        t0 = first + s * step_us
        t.step(s, t0, step_us)
        n = int(busy_us // kernel_us)
        for i in range(n):
            t.kernel("volta_sgemm_128x64_nn", t0 + 10 + i * kernel_us, kernel_us, launch_us=t0 + i * 0.5)


def steady_steps(t: KinetoTrace, steps: int = 5, first: float = 0.0) -> None:
    """Steps of 20 back-to-back 50 µs GEMMs launched ahead: 100 operations, a healthy GPU."""
    for s in range(steps):
        t0 = first + s * 1_010.0
        t.step(s, t0, 1_010.0)
        for i in range(20):
            t.kernel(GEMM, t0 + 10 + i * 50, 50.0, launch_us=t0 + i * 0.4, launch_dur_us=0.3, grid=GRID)


def with_warmup(t: KinetoTrace, init: bool) -> None:
    """Step 0 waits 20 ms before its first kernel (with start-up calls when ``init``), then 5 healthy steps."""
    t.step(0, 0.0, 21_020.0)
    if init:
        t.runtime("cudaMalloc", 100.0, 8_000.0)
        t.runtime("cudaGetDeviceProperties", 8_200.0, 50.0)
    t.kernel(GEMM, 10.0, 10.0, launch_us=0.0, grid=GRID)
    for i in range(20):
        t.kernel(GEMM, 20_020.0 + i * 50, 50.0, launch_us=20_000.0 + i * 0.4, launch_dur_us=0.3, grid=GRID)
    steady_after(t, 21_020.0)


def steady_after(t: KinetoTrace, first: float) -> None:
    """Steps 1-5 of ``steady_steps`` from ``first`` on."""
    for s in range(1, 6):
        t0 = first + (s - 1) * 1_010.0
        t.step(s, t0, 1_010.0)
        for i in range(20):
            t.kernel(GEMM, t0 + 10 + i * 50, 50.0, launch_us=t0 + i * 0.4, launch_dur_us=0.3, grid=GRID)


@dataclass(frozen=True)
class Example:
    """A bad/good pair: ``build(trace, fixed)`` writes the same workload, badly or fixed."""

    code: str
    bad: str  # what the bad trace does
    good: str  # the same workload, fixed
    build: Callable[[KinetoTrace, bool], None]


def analyze_example(tmp_path, ex: Example, fixed: bool):
    t = KinetoTrace()
    ex.build(t, fixed)
    a = traceinsight.analyze(t.write(tmp_path / f"{ex.code}_{'good' if fixed else 'bad'}.json"))
    assert not a.warnings, a.warnings
    return a


def codes_of(a) -> set[str]:
    return {f.code for f in a.findings}


def copy_trace(data_us: int = 0, pageable: bool = True) -> KinetoTrace:
    """4 steps of a 1.5 ms blocking H2D copy, a 1 ms kernel, a 0.4 ms blocking D2H copy (copies 66 % of busy
    time), each after an optional data wait of ``data_us``; the copies from pageable or pinned host memory."""
    t = KinetoTrace()
    for i in range(4):
        b = i * (3000 + data_us)
        if data_us:
            t.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", b, data_us)
            b += data_us
        t.memcpy("HtoD", b, 1500, 64 << 20, pageable=pageable, sync=True)
        t.kernel("vec_add", b + 1510, 1000, launch_us=b + 1502)
        t.memcpy("DtoH", b + 2520, 400, 16 << 20, pageable=pageable, sync=True, launch_us=b + 2511)
    return t
