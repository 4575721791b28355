"""Whole training loops as kineto traces, for comparing two runs: one model on two vendors, with and without a
data-loader wait, at two batch sizes, or two different models.

Each step: an optional ``enumerate(DataLoader)#...`` wait, then per layer a top-level framework op with its
input shapes whose GPU kernel runs while the host waits for it (a small launch gap after each). The kernel names
are the vendor's: cuBLAS ``ampere_sgemm_*`` on NVIDIA, Tensile ``Cijk_*`` (hipBLASLt) on AMD, both launched from
``aten::linear``. Step lengths vary by a fixed, seeded pattern so the per-step samples have a spread.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .kineto_writer import KinetoTrace

GPUS = {"nvidia": ("NVIDIA H100 80GB HBM3", 132, (9, 0)), "amd": ("AMD Instinct MI300X", 304, (9, 4))}
GEMM = {"nvidia": "ampere_sgemm_128x64_tn", "amd": "Cijk_Alik_Bljk_SB_MT64x64x16_MI32x32x1x2_SN_1LDSB0_GRVW4"}
RELU = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)"
CONV = "void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, int, float const*, int, float*, float const*, kernel_conv_params, unsigned long long, int, float, float, int, float const*, float const*, bool, int, int)"
DATA_WAIT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def write_model(
    path: str | Path,
    *,
    model: str = "mlp",
    vendor: str = "nvidia",
    steps: int = 10,
    batch: int = 32,
    data_wait_us: float = 0.0,
    gemm_us: float = 400.0,
    layers: int = 6,
    jitter_us: float = 30.0,
    slow_factor: float = 1.0,
    seed: int = 0,
    rank: int | None = None,
    world_size: int | None = None,
    extra_host_us: float = 0.0,
    loader_ops: bool = False,
    startup_us: float = 0.0,
    step_data_wait_us: "list[float] | None" = None,
    step_extra_host_us: "dict[int, float] | None" = None,
    compiled_region: bool = False,
) -> Path:
    """One rank's trace of ``steps`` training steps; ``slow_factor`` scales the GPU kernels' time. ``loader_ops``:
    the data wait builds the batch on the training thread (``num_workers=0``), its ops traced inside it: per sample
    the dataset's ``__getitem__`` ops, then the collate's ``aten::stack``. ``startup_us``: the program starts up
    before the first step (a runtime call and a first kernel, then the host busy elsewhere that long).
    ``step_data_wait_us``: the data wait of each step (overrides ``data_wait_us``); ``step_extra_host_us``: host time
    added at the end of the given steps (1-based: an outlier step); ``compiled_region``: each iteration is one
    ``torch.compile`` call (a ``Torch-Compiled Region`` around its ops) and no step markers are written."""
    name, sms, cc = GPUS[vendor]
    t = KinetoTrace(device_name=name, sm_count=sms, compute_capability=cc, rank=rank, world_size=world_size)
    rng = np.random.default_rng(seed)
    scale = batch / 32.0
    cursor = 100.0
    if startup_us:
        t.runtime("cudaGetDeviceCount", cursor, 50.0)
        t.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>()", cursor + 70.0, 5.0, launch_us=cursor + 60.0)
        cursor += startup_us
    for s in range(steps):
        start = cursor
        wait = step_data_wait_us[s] if step_data_wait_us is not None else data_wait_us
        if wait:
            data_wait_us = wait
            t.annotation(DATA_WAIT, cursor, data_wait_us)
            if loader_ops:
                per = data_wait_us / (batch + 1)
                for i in range(batch):
                    t.cpu_op("aten::to", cursor + i * per + 1.0, per / 3, args={"Input Dims": [[3, 32, 32]]})
                    t.cpu_op("aten::div", cursor + i * per + 2.0 + per / 3, per / 3, args={"Input Dims": [[3, 32, 32], []]})
                t.cpu_op("aten::stack", cursor + batch * per + 1.0, per / 2, args={"Input Dims": [[3, 32, 32]] * batch})
            cursor += data_wait_us
        region_start = cursor
        for layer in range(layers):
            if model == "mlp":
                ops = [("aten::linear", [[batch, 512], [512, 512], [512]], GEMM[vendor], gemm_us * scale),
                       ("aten::relu", [[batch, 512]], RELU, 40.0 * scale)]
            else:
                ops = [("aten::conv2d", [[batch, 64, 56, 56], [64, 64, 3, 3]], CONV, gemm_us * scale),
                       ("aten::batch_norm", [[batch, 64, 56, 56], [64], [64]], "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>()", 60.0 * scale),
                       ("aten::max_pool2d", [[batch, 64, 56, 56]], "void at::native::max_pool_forward_nchw<float, float>()", 30.0 * scale)]
            for op, dims, kernel, dur in ops:
                dur = dur * slow_factor
                t.cpu_op(op, cursor, 20.0, args={"Input Dims": dims})
                t.kernel(kernel, cursor + 12.0, dur, launch_us=cursor + 6.0)
                cursor = cursor + 12.0 + dur + 8.0  # the host waits for the kernel, then launches the next
        if compiled_region:
            t.cpu_op("Torch-Compiled Region: 0/0", region_start - 1.0, cursor - region_start + 2.0)
        cursor += extra_host_us + float(rng.uniform(0.0, jitter_us)) + (step_extra_host_us or {}).get(s + 1, 0.0)
        if not compiled_region:
            t.step(s + 1, start, cursor - start)
        cursor += 5.0
    return t.write(Path(path))


def write_compiled(path: str | Path, *, steps: int = 4, kernels: int = 60, kernel_us: float = 4.4, python_us: float = 20.0,
                   pause_every: int = 10, pause_us: float = 150.0, wrapper: bool = True, foreach: bool = False,
                   graphs: bool = False) -> Path:
    """A torch.compile'd CNN at a small batch, as the PyTorch profiler records it: per step inductor's
    ``## Call CompiledFxGraph <hash> ##`` range around the generated ``call`` (``wrapper=False``: not recorded), and
    inside it ``kernels`` Triton kernels of ``kernel_us`` launched with ``cuLaunchKernel`` after ``python_us`` of the
    launcher's Python each (``pause_us`` before every ``pause_every``-th: buffer set-up between fused groups; no
    framework op: the host shows only the range), then an optimizer step of ``aten::_foreach_*`` ops when ``foreach``;
    ``graphs``: a ``cudaGraphLaunch`` at each step's end (part of the model replayed as a CUDA graph)."""
    t = KinetoTrace()
    per = python_us + 6.0
    pauses = (kernels - 1) // pause_every
    step_us = 50.0 + kernels * per + pauses * (pause_us - python_us) + (200.0 if foreach else 0.0) + 50.0
    for s in range(steps):
        t0 = s * step_us
        t.step(s, t0, step_us - 5)
        c = t0 + 40
        if wrapper:
            t.annotation("## Call CompiledFxGraph fcg7wqbcxk2h5lrkk5mbbxmhmbl3y4duhsxb ##", c - 5,
                         kernels * per + pauses * (pause_us - python_us) + 10)
        for k in range(kernels):
            py = pause_us if k and k % pause_every == 0 else python_us
            launch = c + py
            t.kernel(f"triton_poi_fused_convolution_relu_{k % 7}", launch + 5, kernel_us, launch_us=launch, launch_dur_us=5.0,
                     launch_name="cuLaunchKernel")
            c += py + 6.0
        if graphs:
            t.runtime("cudaGraphLaunch", t0 + step_us - 40, 8)
        if foreach:
            for name in ("aten::_foreach_mul_", "aten::_foreach_add_"):
                op = t.cpu_op(name, c, 90)
                t.kernel("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FpTensorListMetadata>", c + 20, 30,
                         launch_us=c + 10, op=op)
                c += 100
    return t.write(path)
