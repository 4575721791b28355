#!/usr/bin/env python
"""Regenerate the sample traces in this folder (``python make_samples.py``; about 30 s on a laptop CPU).

No GPU was available where these samples were made, so each PyTorch sample is built in two stages:

1. the host side is RECORDED for real with ``torch.profiler`` on the CPU (real aten ops, real
   ``ProfilerStep#N``, real ``enumerate(DataLoader)#...`` ranges, real ``aten::item`` /
   ``aten::_local_scalar_dense``, real LSTM op chains, real input shapes);
2. the GPU side is PLANTED by this script: every host op that would launch GPU work on CUDA gets the
   ``cuda_runtime`` call, the kernel / memcpy on stream 7, the ``ac2g`` flow and a correlation id, exactly as
   kineto writes them for an NVIDIA A100. Kernel durations come from a roofline estimate of the recorded
   input shapes. Host ops that launch work are shortened to what dispatch + launch costs on a GPU host (the
   CPU recording also contains the CPU math), and a synchronizing call makes the host wait until the
   stream drains, so every later host event moves by the same amount and nesting stays intact.

Two translations are made so the op tree is the one CUDA dispatch records: the oneDNN LSTM ops
(``aten::mkldnn_rnn_layer``, ``MkldnnRnnLayerBackward0``) become their cuDNN twins (``aten::_cudnn_rnn``,
``CudnnRnnBackward0``). Everything planted is listed under the top-level ``traceinsight_sample`` key of each
trace. The script needs only the stdlib and torch (tensorflow for the Keras sample); it does not import the
traceinsight package. The Nsight Systems sample is written with ``tests/helpers/nsys_writer.py``, so the nsys
encoding (memory kinds, enums, ids) has one home shared with the tests.
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

GPU = {
    "id": 0,
    "name": "NVIDIA A100-SXM4-40GB",
    "totalGlobalMem": 42505273344,
    "computeMajor": 8,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "regsPerMultiprocessor": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "sharedMemPerMultiprocessor": 167936,
    "numSms": 108,
    "sharedMemPerBlockOptin": 166912,
}
T4 = {
    "id": 0, "name": "Tesla T4", "totalGlobalMem": 15835398144, "computeMajor": 7, "computeMinor": 5,
    "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 1024, "regsPerBlock": 65536, "regsPerMultiprocessor": 65536,
    "warpSize": 32, "sharedMemPerBlock": 49152, "sharedMemPerMultiprocessor": 65536, "numSms": 40, "sharedMemPerBlockOptin": 65536,
}
# sustained FP32 GEMM FLOP/s, HBM B/s, cuBLAS SGEMM kernel family of each modelled GPU
PERF = {"NVIDIA A100-SXM4-40GB": (14e12, 1.3e12, "ampere"), "Tesla T4": (4.2e12, 0.25e12, "volta")}
STREAM = 7
FP32_FLOPS = 14e12  # sustained FP32 (no TF32) GEMM throughput of an A100, FLOP/s
HBM_BPS = 1.3e12  # sustained HBM bandwidth, B/s
PAGEABLE_BPS = 6e9  # pageable host <-> device copy bandwidth
PINNED_BPS = 22e9
DISPATCH_US = 9.0  # host time of one launching aten op on a GPU host (dispatcher + launch)
LAUNCH_US = 4.5  # cudaLaunchKernel duration

# Ops that never launch GPU work (views, metadata, allocation through the caching allocator).
NO_LAUNCH = {
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::as_strided", "aten::view", "aten::reshape",
    "aten::_reshape_alias", "aten::t", "aten::transpose", "aten::expand", "aten::select", "aten::slice",
    "aten::detach", "detach", "aten::unsqueeze", "aten::squeeze", "aten::chunk", "aten::split", "aten::narrow",
    "aten::permute", "aten::resolve_conj", "aten::resolve_neg", "aten::alias", "aten::_unsafe_view",
    "aten::lift_fresh", "aten::result_type", "aten::unbind", "aten::cudnn_is_acceptable", "aten::numpy_T",
    "aten::is_nonzero", "aten::set_", "aten::unflatten", "aten::flatten", "aten::expand_as", "aten::view_as",
    "aten::unsafe_split", "aten::unsafe_chunk", "aten::contiguous", "aten::to", "aten::_to_copy",
    "aten::_has_compatible_shallow_copy_type", "aten::size", "aten::stride", "aten::dim", "aten::ones_like",
    "aten::zeros_like", "aten::zeros", "aten::ones", "aten::full", "aten::clone", "aten::new_empty",
    "aten::new_empty_strided", "aten::new_zeros", "aten::scalar_tensor", "aten::linear", "aten::matmul",
}
TERMINAL = {  # compute ops whose CPU children are implementation details of the CPU kernel
    "aten::_cudnn_rnn", "aten::_cudnn_rnn_backward", "aten::_local_scalar_dense", "aten::sum", "aten::mean",
    "aten::_log_softmax", "aten::_log_softmax_backward_data", "aten::nll_loss_forward", "aten::nll_loss_backward",
    "aten::mse_loss", "aten::mse_loss_backward", "aten::threshold_backward", "aten::clamp_min", "aten::clamp_",
}
GEMM_OPS = {"aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm", "aten::addmv", "aten::mv"}

_EW = "void at::native::vectorized_elementwise_kernel<4, {f}, std::array<char*, {n}ul> >(int, {f}, std::array<char*, {n}ul>)"
ELEMENTWISE = {
    "aten::add": _EW.format(f="at::native::CUDAFunctor_add<float>", n=3),
    "aten::add_": _EW.format(f="at::native::CUDAFunctor_add<float>", n=3),
    "aten::sub": _EW.format(f="at::native::CUDAFunctor_add<float>", n=3),
    "aten::rsub": _EW.format(f="at::native::CUDAFunctor_add<float>", n=3),
    "aten::mul": _EW.format(f="at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >", n=3),
    "aten::mul_": _EW.format(f="at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >", n=3),
    "aten::div": _EW.format(f="at::native::BinaryFunctor<float, float, float, at::native::binary_internal::DivFunctor<float> >", n=3),
    "aten::sigmoid": _EW.format(f="at::native::sigmoid_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#3}::operator()() const::{lambda(float)#1}", n=2),
    "aten::sigmoid_": _EW.format(f="at::native::sigmoid_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#3}::operator()() const::{lambda(float)#1}", n=2),
    "aten::tanh": _EW.format(f="at::native::tanh_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}", n=2),
    "aten::tanh_": _EW.format(f="at::native::tanh_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}", n=2),
    "aten::fill_": _EW.format(f="at::native::FillFunctor<float>", n=1),
    "aten::zero_": _EW.format(f="at::native::FillFunctor<float>", n=1),
    "aten::clamp_min": _EW.format(f="at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}", n=2),
    "aten::threshold_backward": _EW.format(f="at::native::(anonymous namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::{lambda(float, float)#1}", n=3),
    "aten::copy_": "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1})",
}
REDUCE = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>)"
GENERIC_EW = "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<{op}_kernel_cuda>(at::TensorIteratorBase&)>(int, {op}_kernel_cuda)"
GEMM_SMALL = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"
GEMM_LARGE = "ampere_sgemm_128x64_tn"
GEMM_MID = "ampere_sgemm_64x64_nn"
CUDNN_FWD = [
    (GEMM_LARGE, "input"),  # input projection of all timesteps at once
    ("void RNN_blockPersist_fp_LSTM<float, float, float, 128>(RNNPersistentKernelParams<float, float, float>)", "persist"),
]
CUDNN_BWD = [
    ("void RNN_blockPersist_bp_LSTM<float, float, float, 128>(RNNPersistentKernelParams<float, float, float>)", "persist_bp"),
    ("void persistRNN_addBias<float, float>(int, int, int, int, int, float const*, float*, cudnnRNNMode_t)", "bias"),
    (GEMM_LARGE, "wgrad"),
    (GEMM_MID, "dgrad"),
]
CUDNN_RENAME = {
    "aten::mkldnn_rnn_layer": "aten::_cudnn_rnn",
    "aten::mkldnn_rnn_layer_backward": "aten::_cudnn_rnn_backward",
    "MkldnnRnnLayerBackward0": "CudnnRnnBackward0",
    "autograd::engine::evaluate_function: MkldnnRnnLayerBackward0": "autograd::engine::evaluate_function: CudnnRnnBackward0",
}


# --------------------------------------------------------------------------------------------------- record
def record(body, steps: int, *, seed: int = 0, threads: int = 1) -> dict:
    """Run ``body(step)`` under torch.profiler (CPU) for ``steps`` recorded steps; return the kineto JSON."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(seed)
    random.seed(seed)
    # intra-op threads change no profiler event, only how long the CPU math takes (which gets replaced anyway)
    torch.set_num_threads(max(1, min(threads, os.cpu_count() or 1)))
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"

        def ready(prof):
            prof.export_chrome_trace(str(path))
            out.update(json.loads(path.read_text()))

        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=schedule(wait=0, warmup=1, active=steps, repeat=1), on_trace_ready=ready) as prof:
            for i in range(steps + 1):
                body(i)
                prof.step()
    return out


# ------------------------------------------------------------------------------------------------- complete
def _numel(dims) -> int:
    n = 1
    for d in dims or []:
        n *= int(d)
    return n


def _gemm_flops(name: str, dims) -> float:
    try:
        if name in ("aten::addmm", "aten::baddbmm"):
            (m, k), (_, n) = dims[1][-2:], dims[2][-2:]
            batch = _numel(dims[1][:-2])
        else:
            (m, k), (_, n) = dims[0][-2:], dims[1][-2:]
            batch = _numel(dims[0][:-2])
        return 2.0 * m * k * n * batch
    except (IndexError, TypeError, ValueError):
        return 2e6


def _launch_grid(numel: int) -> tuple[list[int], list[int]]:
    blocks = max(1, min(65535, (numel + 511) // 512))
    return [blocks, 1, 1], [128, 1, 1]


class Completer:
    """Plants the GPU side of a CPU-recorded kineto trace (see the module docstring for the model)."""

    def __init__(self, trace: dict, *, sample: str, cudnn: bool = False, pinned_inputs: bool = True, seed: int = 0, gpu: dict = GPU):
        self.trace = trace
        self.gpu = gpu
        self.flops, self.hbm, self.family = PERF[gpu["name"]]
        self.sample = sample
        self.cudnn = cudnn
        self.pinned_inputs = pinned_inputs
        self.rng = random.Random(seed)
        self.corr = 1000
        self.stream_free = 0.0
        self.new_events: list[dict] = []
        self.segments: list[tuple[float, float, float, float]] = []  # launching ops: recorded span -> new span
        self.counts: dict[str, int] = {}

    # -- helpers ---------------------------------------------------------------------------------------
    def _jitter(self, us: float, spread: float = 0.06) -> float:
        return round(us * (1.0 + self.rng.uniform(-spread, spread)), 3)

    def _runtime(self, pid, tid, name: str, cbid: int, ts: float, dur: float, ext: int) -> int:
        self.corr += 1
        self.new_events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": pid, "tid": tid, "ts": round(ts, 3), "dur": round(dur, 3), "args": {"External id": ext, "cbid": cbid, "correlation": self.corr}})
        return self.corr

    def _flow(self, corr: int, pid, tid, host_ts: float, gpu_ts: float) -> None:
        self.new_events.append({"ph": "s", "id": corr, "pid": pid, "tid": tid, "ts": round(host_ts, 3), "cat": "ac2g", "name": "ac2g"})
        self.new_events.append({"ph": "f", "id": corr, "pid": 0, "tid": STREAM, "ts": round(gpu_ts, 3), "cat": "ac2g", "name": "ac2g", "bp": "e"})

    def _gpu_start(self, host_ts: float) -> float:
        return max(host_ts + self._jitter(2.6), self.stream_free + 0.9)

    def launch_kernel(self, pid, tid, ts: float, ext: int, name: str, dur: float, numel: int = 4096, regs: int = 32) -> float:
        ldur = self._jitter(LAUNCH_US)
        corr = self._runtime(pid, tid, "cudaLaunchKernel", 211, ts, ldur, ext)
        k_ts = self._gpu_start(ts)
        grid, block = _launch_grid(numel)
        bps = grid[0] / self.gpu["numSms"]
        self.new_events.append({
            "ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": STREAM, "ts": round(k_ts, 3), "dur": round(dur, 3),
            "args": {"External id": ext, "queued": 0, "device": 0, "context": 1, "stream": STREAM, "correlation": corr,
                     "registers per thread": regs, "shared memory": 0, "blocks per SM": round(bps, 6), "warps per SM": round(bps * 4, 6),
                     "grid": grid, "block": block, "est. achieved occupancy %": int(min(100, bps * 4 / 64 * 100))},
        })
        self._flow(corr, pid, tid, ts, k_ts)
        self.stream_free = k_ts + dur
        self.counts["kernel"] = self.counts.get("kernel", 0) + 1
        return ts + ldur

    def memcpy(self, pid, tid, ts: float, ext: int, kind: str, nbytes: int, pageable: bool) -> float:
        ldur = self._jitter(6.0)
        corr = self._runtime(pid, tid, "cudaMemcpyAsync", 41, ts, ldur, ext)
        c_ts = self._gpu_start(ts)
        bw = PAGEABLE_BPS if pageable else PINNED_BPS
        dur = 1.5 + nbytes / bw * 1e6
        label = {"HtoD": ("Pageable" if pageable else "Pinned") + " -> Device", "DtoH": "Device -> " + ("Pageable" if pageable else "Pinned")}[kind]
        self.new_events.append({
            "ph": "X", "cat": "gpu_memcpy", "name": f"Memcpy {kind} ({label})", "pid": 0, "tid": STREAM, "ts": round(c_ts, 3), "dur": round(dur, 3),
            "args": {"External id": ext, "device": 0, "context": 1, "stream": STREAM, "correlation": corr, "bytes": int(nbytes), "memory bandwidth (GB/s)": round(nbytes / dur / 1e3, 4)},
        })
        self._flow(corr, pid, tid, ts, c_ts)
        self.stream_free = c_ts + dur
        self.counts["memcpy"] = self.counts.get("memcpy", 0) + 1
        return ts + ldur

    def stream_sync(self, pid, tid, ts: float, ext: int) -> float:
        """cudaStreamSynchronize at ``ts``: returns when the stream has drained (the host stall)."""
        end = max(ts + self._jitter(3.0), self.stream_free + 1.5)
        corr = self._runtime(pid, tid, "cudaStreamSynchronize", 131, ts, end - ts, ext)
        self.new_events.append({"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": STREAM, "ts": round(max(ts, self.stream_free - 0.5), 3), "dur": round(end - max(ts, self.stream_free - 0.5), 3),
                                "args": {"External id": ext, "cuda_sync_kind": "Stream Sync", "stream": STREAM, "correlation": corr, "device": 0, "context": 1}})
        self.counts["sync"] = self.counts.get("sync", 0) + 1
        return end

    # -- what a host op launches on CUDA -------------------------------------------------------------------
    def plan(self, ev: dict, parent: str) -> list[tuple]:
        name = ev["name"]
        dims = ev.get("args", {}).get("Input Dims") or []
        first = _numel(dims[0]) if dims and isinstance(dims[0], list) and all(isinstance(d, int) for d in dims[0]) else 4096
        ew_us = 1.6 + 3 * 4 * first / self.hbm * 1e6
        if name == "aten::_local_scalar_dense":
            return [("memcpy", "DtoH", 4, True), ("sync",)]
        if name == "aten::copy_" and parent == "aten::_to_copy" and first > 64:
            return [("memcpy", "HtoD", 4 * first, not self.pinned_inputs)]
        if name == "aten::_cudnn_rnn":
            x = dims[0] if dims else [24, 32, 64]
            t, b, i = (x + [1, 1, 1])[:3]
            h = dims[2][1] if len(dims) > 2 and len(dims[2]) > 1 else 128
            proj = 2.0 * t * b * i * 4 * h / FP32_FLOPS * 1e6 + 4
            return [("kernel", CUDNN_FWD[0][0], proj, t * b * 4 * h), ("kernel", CUDNN_FWD[1][0], 6.5 * t + 8, b * 4 * h)]
        if name == "aten::_cudnn_rnn_backward":
            x = dims[0] if dims else [24, 32, 64]
            t, b, i = (x + [1, 1, 1])[:3]
            return [("kernel", CUDNN_BWD[0][0], 9.0 * t + 10, b * 512), ("kernel", CUDNN_BWD[1][0], 3.1, 512), ("kernel", CUDNN_BWD[2][0], 12.0, 4096), ("kernel", CUDNN_BWD[3][0], 9.0, 4096)]
        if name in NO_LAUNCH or not (name.startswith("aten::")):
            return []
        if name in GEMM_OPS:
            flops = _gemm_flops(name, dims)
            kname = GEMM_SMALL if flops < 5e6 else (GEMM_MID if flops < 1e8 else GEMM_LARGE)
            if self.family != "ampere":
                kname = kname.replace("ampere_", self.family + "_").replace("sm80_", "sm75_")
            return [("kernel", kname, 3.2 + flops / self.flops * 1e6, max(1, int(flops // 4096)))]
        if name in ("aten::sum", "aten::mean", "aten::mse_loss", "aten::norm"):
            return [("kernel", REDUCE, ew_us + 2.0, first)]
        if name in ELEMENTWISE:
            return [("kernel", ELEMENTWISE[name], ew_us, first)]
        return [("kernel", GENERIC_EW.format(op=name.split("::", 1)[1].rstrip("_")), ew_us, first)]

    # -- the pass ------------------------------------------------------------------------------------------
    def run(self) -> dict:
        tr = self.trace
        evs = tr["traceEvents"]
        host = [e for e in evs if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]
        for e in host:
            e["name"] = CUDNN_RENAME.get(e["name"], e["name"]) if self.cudnn else e["name"]
        # children of the cuDNN RNN ops are the oneDNN kernel's internals: a CUDA run records none of them
        drop: set[int] = set()
        if self.cudnn:
            rnn = [(e["ts"], e["ts"] + e["dur"], e["tid"]) for e in host if e["name"] in ("aten::_cudnn_rnn", "aten::_cudnn_rnn_backward")]
            for e in host:
                if any(e["tid"] == tid and s < e["ts"] and e["ts"] + e["dur"] <= t_end for s, t_end, tid in rnn):
                    drop.add(id(e))
        host = [e for e in host if id(e) not in drop]
        evs[:] = [e for e in evs if id(e) not in drop]
        host.sort(key=lambda e: (e["tid"], e["ts"], -e["dur"]))
        # parent links per thread (ops nest properly on one thread)
        parent: dict[int, dict | None] = {}
        has_child: set[int] = set()
        stack: list[dict] = []
        for e in host:
            while stack and (stack[-1]["tid"] != e["tid"] or stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]):
                stack.pop()
            parent[id(e)] = stack[-1] if stack else None
            if stack:
                has_child.add(id(stack[-1]))
            stack.append(e)

        def under(e: dict, prefix: str) -> bool:
            p = parent[id(e)]
            while p is not None:
                if p["name"].startswith(prefix):
                    return True
                p = parent[id(p)]
            return False

        # An op "launches" when CUDA dispatch would put work on the GPU for it. GEMMs and the cuDNN RNN ops are
        # terminal: their CPU children (bias expand/copy, oneDNN internals) are how the CPU kernel works.
        def terminal(e: dict) -> bool:
            return e["name"] in GEMM_OPS or e["name"] in TERMINAL

        def inside_terminal(e: dict) -> bool:
            p = parent[id(e)]
            while p is not None:
                if terminal(p):
                    return True
                p = parent[id(p)]
            return False

        leaves = sorted((e for e in host if e.get("cat") == "cpu_op" and (terminal(e) or id(e) not in has_child) and not inside_terminal(e)), key=lambda e: e["ts"])
        cum = 0.0
        for e in leaves:
            par = parent[id(e)]
            if under(e, "enumerate(DataLoader)"):
                continue  # collation runs on the host in a CUDA run too
            actions = self.plan(e, par["name"] if par else "")
            if not actions:
                continue
            ext = e["args"].get("External id", 0)
            new_s = e["ts"] + cum
            t = new_s + min(e["dur"], 2.0) * 0.5
            for act in actions:
                if act[0] == "kernel":
                    t = self.launch_kernel(e["pid"], e["tid"], t, ext, act[1], self._jitter(act[2]), numel=int(act[3])) + 0.3
                elif act[0] == "memcpy":
                    t = self.memcpy(e["pid"], e["tid"], t, ext, act[1], act[2], act[3]) + 0.3
                elif act[0] == "sync":
                    t = self.stream_sync(e["pid"], e["tid"], t, ext) + 0.3
            new_dur = max(t - new_s, min(e["dur"], self._jitter(DISPATCH_US)))
            self.segments.append((e["ts"], e["ts"] + e["dur"], new_s, new_s + new_dur))
            cum = new_s + new_dur - (e["ts"] + e["dur"])
        self._shift(evs)
        self._decorate(evs)
        return tr

    def _shift(self, evs: list[dict]) -> None:
        """Map recorded host times onto the GPU-host timeline: linear inside each launching op, a translation between."""
        segs = sorted(self.segments)
        starts = [s[0] for s in segs]

        def f(t: float) -> float:
            k = bisect.bisect_right(starts, t) - 1
            if k < 0:
                return t
            s, e, ns, ne = segs[k]
            if t <= e:
                return ns + (t - s) * ((ne - ns) / (e - s) if e > s else 0.0)
            return t + (ne - e)

        planted = {id(e) for e in self.new_events}
        for e in evs:
            if id(e) in planted or not isinstance(e.get("ts"), (int, float)):
                continue
            s = e["ts"]
            e["ts"] = round(f(s), 3)
            if "dur" in e:
                e["dur"] = round(max(0.0, f(s + e["dur"]) - e["ts"]), 3)

    def _decorate(self, evs: list[dict]) -> None:
        """Device properties, GPU process/stream names and per-step GPU annotations, as kineto writes them."""
        tr = self.trace
        steps = [e for e in evs if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
        kernels = sorted((e for e in self.new_events if e.get("cat") in ("kernel", "gpu_memcpy")), key=lambda e: e["ts"])
        corr_ts = {e["args"]["correlation"]: e["ts"] for e in self.new_events if e.get("cat") == "cuda_runtime"}
        for st in steps:
            inside = [k for k in kernels if st["ts"] <= corr_ts.get(k["args"]["correlation"], -1) < st["ts"] + st["dur"]]
            if inside:
                s, e_ = inside[0]["ts"], max(k["ts"] + k["dur"] for k in inside)
                evs.append({"ph": "X", "cat": "gpu_user_annotation", "name": st["name"], "pid": 0, "tid": STREAM, "ts": s, "dur": round(e_ - s, 3), "args": {"External id": st["args"].get("External id", 0)}})
        meta_ts = min(e["ts"] for e in evs if isinstance(e.get("ts"), (int, float)))
        evs.extend([
            {"ph": "M", "name": "process_name", "ts": meta_ts, "pid": 0, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "process_labels", "ts": meta_ts, "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
            {"ph": "M", "name": "process_sort_index", "ts": meta_ts, "pid": 0, "tid": 0, "args": {"sort_index": 5000000}},
            {"ph": "M", "name": "thread_name", "ts": meta_ts, "pid": 0, "tid": STREAM, "args": {"name": f"stream {STREAM} "}},
            {"ph": "M", "name": "thread_sort_index", "ts": meta_ts, "pid": 0, "tid": STREAM, "args": {"sort_index": STREAM}},
        ])
        evs.extend(self.new_events)
        evs.sort(key=lambda e: (0 if e.get("ph") == "M" else 1, e.get("ts", 0) if isinstance(e.get("ts"), (int, float)) else 0))
        tr["deviceProperties"] = [self.gpu]
        tr["cupti_version"] = 24
        tr["cuda_runtime_version"] = 12040
        tr["cuda_driver_version"] = 12040
        tr["trace_id"] = "".join(self.rng.choice("0123456789ABCDEF") for _ in range(32))
        tr.pop("host_name", None)
        tr["traceName"] = self.sample
        tr["traceinsight_sample"] = {
            "provenance": "host side recorded on CPU with torch.profiler, GPU activity planted by make_samples.py",
            "planted": dict(sorted(self.counts.items())),
            "gpu_model": self.gpu["name"],
            "translated_ops": sorted(set(CUDNN_RENAME.values())) if self.cudnn else [],
        }


def write_gz(trace: dict, path: Path) -> None:
    data = json.dumps(trace, separators=(",", ":")).encode()
    with open(path, "wb") as fh, gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0, compresslevel=9) as gz:
        gz.write(data)


# --------------------------------------------------------------------------------------------------- samples
def sample_lstm(cudnn: bool) -> dict:
    """The same LSTM model trained two ways: nn.LSTM over the sequence (cuDNN) vs an nn.LSTMCell Python loop."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    seq, batch, n_in, hidden = 16, 32, 64, 128
    head = nn.Linear(hidden, 1)
    if cudnn:
        rnn = nn.LSTM(n_in, hidden)
    else:
        rnn = nn.LSTMCell(n_in, hidden)
    params = list(rnn.parameters()) + list(head.parameters())
    opt = torch.optim.SGD(params, lr=0.01, foreach=True)
    x = torch.randn(seq, batch, n_in)
    y = torch.randn(batch, 1)

    def body(_step):
        opt.zero_grad(set_to_none=True)
        if cudnn:
            out, _ = rnn(x)
            last = out[-1]
        else:
            h = torch.zeros(batch, hidden)
            c = torch.zeros(batch, hidden)
            for t in range(seq):
                h, c = rnn(x[t], (h, c))
            last = h
        loss = nn.functional.mse_loss(head(last), y)
        loss.backward()
        opt.step()

    trace = record(body, steps=3)
    return Completer(trace, sample="lstm_cudnn" if cudnn else "lstm_fallback", cudnn=cudnn).run()


def sample_sync_stalls() -> dict:
    """An MLP training loop that logs ``loss.item()`` every step, between forward and backward."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, foreach=True)
    x = torch.randn(1024, 2048)
    y = torch.randint(0, 10, (1024,))
    seen = []

    def body(_step):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        seen.append(loss.item())  # the host waits here for the whole forward pass
        loss.backward()
        opt.step()
        seen.append(loss.item())

    trace = record(body, steps=5, threads=8)
    return Completer(trace, sample="sync_stalls", gpu=T4).run()  # a T4: the GPU queue outruns the host


def sample_tiny_kernels() -> dict:
    """A per-parameter Python update loop over many small tensors: each op launches a ~2 µs kernel."""
    import torch

    torch.manual_seed(0)
    params = [torch.randn(256) for _ in range(40)]
    grads = [torch.randn(256) for _ in range(40)]
    bufs = [torch.zeros(256) for _ in range(40)]

    def body(_step):
        with torch.no_grad():
            for p, g, b in zip(params, grads, bufs):
                b.mul_(0.9).add_(g)
                p.add_(b, alpha=-0.01)
                p.clamp_(-3.0, 3.0)

    trace = record(body, steps=4)
    return Completer(trace, sample="tiny_kernels").run()


class SlowDataset:
    """A map-style dataset whose __getitem__ costs ~0.35 ms of host work (decode/augment stand-in)."""

    def __init__(self, n: int, dim: int):
        import torch

        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        time.sleep(0.00035)
        return self.x[i], self.y[i]


def sample_dataloader_gaps() -> dict:
    """DataLoader(num_workers=0) over a slow dataset: the GPU waits for every batch."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, foreach=True)
    loader = DataLoader(SlowDataset(64 * 8, 512), batch_size=32, num_workers=0, shuffle=False)
    it = iter(enumerate(loader))

    def body(_step):
        _, (x, y) = next(it)
        x = x.to("cpu", copy=True, non_blocking=True)  # stands in for .to("cuda", non_blocking=True) from pinned memory
        y = y.to("cpu", copy=True, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    trace = record(body, steps=5)
    return Completer(trace, sample="dataloader_gaps").run()


# --------------------------------------------------------------------------------------------------- nsys
def sample_nsys(path: Path) -> str:
    """A plain CUDA C vecAdd that copies its inputs in and its result out with synchronous ``cudaMemcpy`` from
    ``malloc``'d (pageable) host buffers, each iteration, as in the real RTX 3060 capture of such a program
    (nsys2025.5_vecadd-syncmemcpy in the corpus: 4 MiB pageable copies at 6.2 GB/s HtoD and 7.2 GB/s DtoH).

    Written with tests/helpers/nsys_writer.py, the one place that knows how Nsight Systems encodes a copy:
    pageable host memory is ``srcKind`` (HtoD) or ``dstKind`` (DtoH) = 0 in ENUM_CUDA_MEM_KIND, pinned is 1.
    """
    sys.path.insert(0, str(HERE.parent))
    from tests.helpers.nsys_writer import NsysTrace

    rng = random.Random(0)
    t = NsysTrace(
        "NVIDIA GeForce RTX 3060", 28, memory_bytes=12_622_168_064, compute_capability=(8, 6),
        pid=24601, tid=24601, version="2024.6.1.90",
    )
    t.thread_names[t.tid] = "vecadd"
    n = 1 << 22  # floats per vector
    nbytes = 4 * n
    htod_gbps, dtoh_gbps = 6.2, 7.2  # pageable: staged through the driver's pinned bounce buffer
    t.runtime("cudaMalloc", 0, 180_000_000)  # the first call creates the context
    now = 180_020_000
    for _ in range(12):
        for _ in range(2):  # a and b: cudaMemcpy(d_x, h_x, bytes, cudaMemcpyHostToDevice) from malloc'd memory
            dur = int(nbytes / htod_gbps)
            t.memcpy("HtoD", now + 6_000, dur, nbytes, pageable=True, sync=True, launch_ns=now, launch_dur_ns=dur + 9_000)
            now += dur + 9_000 + rng.randint(2_000, 4_000)
        kernel_start = now + 4_000
        kernel_dur = 210_000 + rng.randint(0, 8_000)
        t.kernel(
            "vecAdd", kernel_start, kernel_dur, launch_ns=now, launch_dur_ns=5_000,
            grid=((n + 255) // 256, 1, 1), block=(256, 1, 1), registers=16,
            demangled="vecAdd(const float *, const float *, float *, int)",
        )
        now += 6_000
        copy_start = kernel_start + kernel_dur + 2_000
        dur = int(nbytes / dtoh_gbps)
        # cudaMemcpy DtoH waits for the kernel (same stream), then copies into pageable memory.
        t.memcpy("DtoH", copy_start, dur, nbytes, pageable=True, sync=True, launch_ns=now, launch_dur_ns=copy_start + dur + 4_000 - now)
        now = copy_start + dur + 4_000 + 600_000 + rng.randint(0, 40_000)  # host-side check of the result
    t.write(path)
    return "tests/helpers/nsys_writer.py"


# --------------------------------------------------------------------------------------------------- keras
def sample_keras(logdir: Path) -> None:
    """A tiny Keras LSTM with recurrent_dropout>0 (so not the cuDNN path), profiled with tf.profiler on the CPU."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    import numpy as np
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    if logdir.exists():
        shutil.rmtree(logdir)
    model = tf.keras.Sequential([tf.keras.Input((16, 8)), tf.keras.layers.LSTM(32, recurrent_dropout=0.2), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.random.default_rng(0).standard_normal((64, 16, 8)).astype("float32")
    y = np.zeros((64, 1), "float32")
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)  # build and trace outside the profile
    tf.profiler.experimental.start(str(logdir))
    for i in range(3):
        with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
            model.train_on_batch(x[:32], y[:32])
    tf.profiler.experimental.stop()


# --------------------------------------------------------------------------------------------------- main
SAMPLES = {
    "lstm_fallback.json.gz": lambda: sample_lstm(cudnn=False),
    "lstm_cudnn.json.gz": lambda: sample_lstm(cudnn=True),
    "sync_stalls.json.gz": sample_sync_stalls,
    "tiny_kernels.json.gz": sample_tiny_kernels,
    "dataloader_gaps.json.gz": sample_dataloader_gaps,
}


def main(argv: list[str]) -> int:
    only = set(argv)
    t0 = time.time()
    for name, make in SAMPLES.items():
        if only and name not in only:
            continue
        t = time.time()
        write_gz(make(), HERE / name)
        print(f"{name:28s} {(HERE / name).stat().st_size / 1024:7.1f} KiB  {time.time() - t:5.1f} s", flush=True)
    if not only or "vecadd_sync.sqlite" in only:
        how = sample_nsys(HERE / "vecadd_sync.sqlite")
        print(f"{'vecadd_sync.sqlite':28s} {(HERE / 'vecadd_sync.sqlite').stat().st_size / 1024:7.1f} KiB  (written with {how})")
    if not only or "keras_lstm_fallback" in only:
        t = time.time()
        sample_keras(HERE / "keras_lstm_fallback")
        size = sum(p.stat().st_size for p in (HERE / "keras_lstm_fallback").rglob("*") if p.is_file())
        print(f"{'keras_lstm_fallback/':28s} {size / 1024:7.1f} KiB  {time.time() - t:5.1f} s")
    print(f"total {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
