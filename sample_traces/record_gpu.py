#!/usr/bin/env python
"""Record real PyTorch Profiler traces on a CUDA GPU, one small program per performance problem.

``make_samples.py`` plants GPU activity on host-side recordings because no GPU was at hand; this script is the
real thing, for when one is. Each scenario is a short, ordinary training or inference loop written the way a
user would write it (the problem included), recorded with ``torch.profiler`` exactly as a user would record it,
and exported untouched with ``export_chrome_trace``. Pairs (``*_before`` / ``*_after``) run the same model with
one thing changed, so a diff of the two shows whether the fix worked.

Usage (each scenario runs in its own process, so a crash or hang in one costs only that one)::

    python record_gpu.py --out DIR                 # every scenario
    python record_gpu.py --out DIR lstm_cudnn ...  # only these
    python record_gpu.py --out DIR --smoke         # tiny sizes; runs on a CPU-only torch, to check the script

``DIR/manifest.json`` records the GPU, the torch and CUDA versions and, per scenario, its settings, its wall
time, the step times it measured itself and whether it succeeded. Needs only torch (and torchvision for the
ResNet scenarios).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

SCENARIOS: dict[str, object] = {}
SMOKE = False


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


def _dev():
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _scale(full, smoke):
    return smoke if SMOKE else full


class Recorder:
    """One profiled loop: ``schedule(wait, warmup, active)`` as the PyTorch docs recommend, or from the very
    first step (``cold=True``) as a user who wraps the whole program does. Step times are measured around each
    ``step_fn`` call with a device sync after the loop only (syncing inside would change what is recorded)."""

    def __init__(self, out: Path, name: str, *, wait=1, warmup=2, active=3, cold=False, memory=True, flops=False,
                 shapes=True):
        self.out, self.name = out, name
        self.wait, self.warmup, self.active, self.cold = wait, warmup, active, cold
        self.memory, self.flops, self.shapes = memory, flops, shapes
        self.notes: dict = {}

    def run(self, step_fn):
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        acts = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            acts.append(ProfilerActivity.CUDA)
        path = self.out / f"{self.name}.json"
        kw = dict(activities=acts, record_shapes=self.shapes, profile_memory=self.memory, with_flops=self.flops)
        if self.cold:
            total = self.active
        else:
            total = self.wait + self.warmup + self.active
            kw["schedule"] = schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1)
            kw["on_trace_ready"] = lambda p: p.export_chrome_trace(str(path))
        ends = []
        t0 = time.perf_counter()
        with profile(**kw) as prof:
            for i in range(total):
                step_fn(i)
                ends.append(time.perf_counter())
                prof.step()
        _sync()
        if self.cold:
            prof.export_chrome_trace(str(path))
        starts = [t0] + ends[:-1]
        self.notes["host_step_ms"] = [round((e - s) * 1e3, 3) for s, e in zip(starts, ends)]
        with open(path, "rb") as src, gzip.open(str(path) + ".gz", "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
        path.unlink()
        return self.notes


def _write_notes(out: Path, name: str, notes: dict):
    (out / f"{name}.notes.json").write_text(json.dumps(notes, indent=1, default=str))


# --- recurrent layers ---------------------------------------------------------------------------------------

def _lstm_setup(cell_loop: bool):
    import torch
    from torch import nn

    torch.manual_seed(0)
    dev = _dev()
    B, T, I, H = _scale(64, 4), _scale(32, 4), _scale(256, 8), _scale(512, 8)
    if cell_loop:
        cells = nn.ModuleList([nn.LSTMCell(I, H), nn.LSTMCell(H, H)]).to(dev)
    else:
        cells = nn.LSTM(I, H, num_layers=2, batch_first=True).to(dev)
    head = nn.Linear(H, 10).to(dev)
    params = list(cells.parameters()) + list(head.parameters())
    opt = torch.optim.Adam(params, lr=1e-3)
    x = torch.randn(B, T, I, device=dev)
    y = torch.randint(0, 10, (B,), device=dev)
    lossf = nn.CrossEntropyLoss()

    def forward():
        if not cell_loop:
            out, _ = cells(x)
            return out[:, -1]
        h = [torch.zeros(B, H, device=dev) for _ in range(2)]
        c = [torch.zeros(B, H, device=dev) for _ in range(2)]
        for t in range(T):
            inp = x[:, t]
            for layer, cell in enumerate(cells):
                h[layer], c[layer] = cell(inp, (h[layer], c[layer]))
                inp = h[layer]
        return h[-1]

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = lossf(head(forward()), y)
        loss.backward()
        opt.step()

    return step, dict(batch=B, seq=T, input=I, hidden=H, layers=2, optimizer="Adam")


@scenario
def lstm_cudnn(out):
    """``nn.LSTM`` (2 layers) training: one cuDNN call per layer and direction."""
    step, cfg = _lstm_setup(cell_loop=False)
    return {**cfg, **Recorder(out, "lstm_cudnn").run(step)}


@scenario
def lstm_cell_loop(out):
    """The same model written as an ``nn.LSTMCell`` Python loop over timesteps: cuDNN never runs."""
    step, cfg = _lstm_setup(cell_loop=True)
    return {**cfg, **Recorder(out, "lstm_cell_loop").run(step)}


@scenario
def lstm_cudnn_disabled(out):
    """``nn.LSTM`` with ``torch.backends.cudnn.enabled = False``: PyTorch's own per-timestep fallback."""
    import torch

    torch.backends.cudnn.enabled = False
    step, cfg = _lstm_setup(cell_loop=False)
    return {**cfg, "cudnn_enabled": False, **Recorder(out, "lstm_cudnn_disabled").run(step)}


# --- host syncs ---------------------------------------------------------------------------------------------

def _mlp(width, depth, dev):
    from torch import nn

    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 10)).to(dev)


def _sync_setup(item_calls: bool):
    import torch
    from torch import nn

    torch.manual_seed(0)
    dev = _dev()
    W, B = _scale(2048, 16), _scale(1024, 8)
    model = _mlp(W, 4, dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    lossf = nn.CrossEntropyLoss()
    x = torch.randn(B, W, device=dev)
    y = torch.randint(0, 10, (B,), device=dev)
    log = []
    running = torch.zeros((), device=dev)

    def step(i):
        nonlocal running
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(x), y)
        if item_calls:
            log.append(loss.item())  # logging the loss every step: waits for the forward pass
        loss.backward()
        opt.step()
        if item_calls:
            if not torch.isfinite(loss).item():  # a NaN guard after the step: waits again
                raise RuntimeError("loss is not finite")
        else:
            running = running + loss.detach()  # kept on the GPU; read once, outside the loop

    return step, dict(width=W, batch=B, depth=4, item_calls_per_step=2 if item_calls else 0)


@scenario
def sync_before(out):
    """MLP training that reads ``loss.item()`` and a NaN check every step: two host syncs per step."""
    step, cfg = _sync_setup(True)
    return {**cfg, **Recorder(out, "sync_before", active=5).run(step)}


@scenario
def sync_after(out):
    """The same loop with the loss kept on the GPU: no sync inside the step."""
    step, cfg = _sync_setup(False)
    return {**cfg, **Recorder(out, "sync_after", active=5).run(step)}


# --- launch-bound tiny kernels ------------------------------------------------------------------------------

def _tiny_setup(batched: bool):
    import torch

    torch.manual_seed(0)
    dev = _dev()
    n, size = 40, 256
    if batched:  # the fix: one (40, 256) parameter; the 40 "tensors" are its rows
        flat = torch.randn(n, size, device=dev, requires_grad=True)
        opt = torch.optim.SGD([flat], lr=1e-2)
    else:
        params = [torch.randn(size, device=dev, requires_grad=True) for _ in range(n)]

    def step(i):
        if batched:
            (flat * flat).sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return
        loss = sum((p * p).sum() for p in params)
        loss.backward()
        with torch.no_grad():
            for p in params:  # one small update per tensor
                p -= 1e-2 * p.grad
                p.grad = None

    return step, dict(tensors=n, elements=size,
                      layout="one (40, 256) parameter, SGD" if batched else "40 tensors, per-tensor Python update loop")


@scenario
def tiny_kernels_before(out):
    """Per-tensor Python update loop over 40 tensors of 256 floats: hundreds of microsecond kernels."""
    step, cfg = _tiny_setup(False)
    return {**cfg, **Recorder(out, "tiny_kernels_before", active=5, memory=False).run(step)}


@scenario
def tiny_kernels_after(out):
    """The same loss and update with the 40 tensors stored as one (40, 256) parameter: a handful of kernels."""
    step, cfg = _tiny_setup(True)
    return {**cfg, **Recorder(out, "tiny_kernels_after", active=5, memory=False).run(step)}


# --- input pipeline -----------------------------------------------------------------------------------------

class SlowDataset:
    """Images decoded on the host: each item costs ``delay`` seconds of CPU (a sleep stands in for decoding)."""

    def __init__(self, n, shape, delay):
        self.n, self.shape, self.delay = n, shape, delay

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch

        time.sleep(self.delay)
        g = torch.Generator().manual_seed(i)
        return torch.randn(self.shape, generator=g), i % 10


def _loader_run(out, name, workers: int):
    import torch
    from torch import nn
    from torch.utils.data import DataLoader

    torch.manual_seed(0)
    dev = _dev()
    B = _scale(128, 4)
    ds = SlowDataset(B * 12, (3, 64, 64), 0.0003)
    dl = DataLoader(ds, batch_size=B, num_workers=workers, pin_memory=workers > 0 and dev.type == "cuda",
                    persistent_workers=workers > 0, prefetch_factor=4 if workers else None)
    model = nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    lossf = nn.CrossEntropyLoss()
    it = iter(dl)

    def step(i):
        x, y = next(it)
        x, y = x.to(dev, non_blocking=workers > 0), y.to(dev, non_blocking=workers > 0)
        opt.zero_grad(set_to_none=True)
        lossf(model(x), y).backward()
        opt.step()

    notes = Recorder(out, name, wait=2, warmup=1, active=5).run(step)
    return dict(batch=B, num_workers=workers, item_cpu_ms=0.3, pin_memory=workers > 0, **notes)


@scenario
def dataloader_before(out):
    """``DataLoader(num_workers=0)``: every batch is prepared on the training thread while the GPU waits."""
    return _loader_run(out, "dataloader_before", 0)


@scenario
def dataloader_after(out):
    """``num_workers=8, pin_memory=True``, non-blocking copies: batches are ready before the step asks."""
    return _loader_run(out, "dataloader_after", 8)


# --- steady state -------------------------------------------------------------------------------------------

def _resnet_setup(bf16: bool = False):
    """ResNet-18 training at batch 64 on 224x224 images with cuDNN's benchmark mode; ``bf16``: under
    ``torch.autocast(dtype=torch.bfloat16)`` with channels-last tensors."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    dev = _dev()
    torch.backends.cudnn.benchmark = True
    try:
        import torchvision

        model = torchvision.models.resnet18(num_classes=100)
    except ImportError:  # smoke runs without torchvision
        model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 100))
    layout = torch.channels_last if bf16 else torch.contiguous_format
    model = model.to(dev).to(memory_format=layout)
    B, S = _scale(64, 2), _scale(224, 32)
    x = torch.randn(B, 3, S, S, device=dev).to(memory_format=layout)
    y = torch.randint(0, 100, (B,), device=dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    lossf = nn.CrossEntropyLoss()
    ctx = (lambda: torch.autocast(dev.type, dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext

    def step(i):
        opt.zero_grad(set_to_none=True)
        with ctx():
            loss = lossf(model(x), y)
        loss.backward()
        opt.step()

    cfg = dict(model="resnet18", batch=B, image=S, cudnn_benchmark=True)
    return step, ({**cfg, "precision": "bf16 autocast, channels_last"} if bf16 else cfg)


@scenario
def resnet_cold(out):
    """ResNet-18 training profiled from its very first step (the profiler wraps the whole loop): cuDNN
    autotuning, cuBLAS set-up and allocator growth fill the window."""
    step, cfg = _resnet_setup()
    return {**cfg, **Recorder(out, "resnet_cold", cold=True, active=4, flops=True).run(step)}


@scenario
def resnet_warm(out):
    """The same program profiled with ``schedule(wait=5, warmup=2, active=3)``: steady state only."""
    step, cfg = _resnet_setup()
    return {**cfg, **Recorder(out, "resnet_warm", wait=5, warmup=2, active=3, flops=True).run(step)}


@scenario
def cudagraph_capture(out):
    """Inference served through a CUDA graph, profiled across the capture: warm-up on a side stream, the
    capture (launches recorded, not run), then replays."""
    import torch

    torch.manual_seed(0)
    dev = _dev()
    W, B = _scale(4096, 16), _scale(256, 4)
    model = _mlp(W, 6, dev).eval()
    static_in = torch.randn(B, W, device=dev)
    state = {}

    def step(i):
        with torch.no_grad():
            if dev.type != "cuda":
                model(static_in)
            elif i == 0:
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        model(static_in)
                torch.cuda.current_stream().wait_stream(s)
            elif i == 1:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    state["out"] = model(static_in)
                state["g"] = g
            else:
                static_in.copy_(torch.randn(B, W, device=dev))
                state["g"].replay()
                state["out"].argmax(-1)

    notes = Recorder(out, "cudagraph_capture", cold=True, active=6).run(step)
    return dict(width=W, batch=B, depth=6, steps="0 warm-up, 1 capture, 2-5 replay", **notes)


def _compile_setup(dynamic=None):
    import torch
    from torch import nn

    torch.manual_seed(0)
    dev = _dev()
    W = _scale(2048, 16)
    model = _mlp(W, 4, dev)
    cmodel = torch.compile(model, dynamic=dynamic)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    lossf = nn.CrossEntropyLoss()
    return dev, W, cmodel, opt, lossf


@scenario
def compile_cold(out):
    """``torch.compile`` MLP profiled from its first step: Dynamo tracing and Inductor compilation in the window."""
    import torch

    dev, W, cmodel, opt, lossf = _compile_setup()
    B = _scale(512, 4)
    x, y = torch.randn(B, W, device=dev), torch.randint(0, 10, (B,), device=dev)

    def step(i):
        opt.zero_grad(set_to_none=True)
        lossf(cmodel(x), y).backward()
        opt.step()

    return dict(width=W, batch=B, **Recorder(out, "compile_cold", cold=True, active=4, memory=False).run(step))


@scenario
def compile_recompile(out):
    """A warm ``torch.compile`` model whose batch size changes inside the window (the last batch of an epoch):
    it recompiles in steady state."""
    return _recompile(out, "compile_recompile", dynamic=None)


@scenario
def compile_dynamic(out):
    """The same loop compiled with ``dynamic=True``: one graph for every batch size, nothing compiles in the window."""
    return _recompile(out, "compile_dynamic", dynamic=True)


def _recompile(out, name, dynamic):
    import torch

    dev, W, cmodel, opt, lossf = _compile_setup(dynamic)
    sizes = [_scale(512, 4)] * 5 + [_scale(512, 4), _scale(384, 3), _scale(512, 4)]

    def step(i):
        B = sizes[i]
        x, y = torch.randn(B, W, device=dev), torch.randint(0, 10, (B,), device=dev)
        opt.zero_grad(set_to_none=True)
        lossf(cmodel(x), y).backward()
        opt.step()

    notes = Recorder(out, name, wait=3, warmup=2, active=3, memory=False).run(step)
    return dict(width=W, batch_sizes=sizes, dynamic=dynamic, **notes)


@scenario
def resnet_bf16(out):
    """The warm ResNet-18 run under ``torch.autocast(dtype=torch.bfloat16)`` with channels-last tensors: the fix
    TI007/TI041 point at, for a before/after with ``resnet_warm``."""
    step, cfg = _resnet_setup(bf16=True)
    return {**cfg, **Recorder(out, "resnet_bf16", wait=5, warmup=2, active=3, flops=True).run(step)}


@scenario
def inference_requests(out):
    """Serving one request at a time: the input comes from host memory, the model runs under ``no_grad`` and the
    answer goes back to the host (``.cpu()``), which waits for the GPU; each request is one profiler step."""
    import torch

    torch.manual_seed(0)
    dev = _dev()
    W = _scale(1024, 16)
    model = _mlp(W, 8, dev).eval()
    reqs = [torch.randn(_scale(4, 1), W) for _ in range(12)]

    def step(i):
        with torch.no_grad():
            logits = model(reqs[i].to(dev))
            logits.argmax(-1).cpu()

    notes = Recorder(out, "inference_requests", wait=2, warmup=2, active=8).run(step)
    return dict(width=W, depth=8, batch=_scale(4, 1), **notes)


@scenario
def pageable_copies(out):
    """Each step copies a 64 MiB batch from ordinary (pageable) host memory with ``non_blocking=True``: without
    pinned memory the copy is staged by the driver and the host waits for it."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    dev = _dev()
    W, B = _scale(4096, 16), _scale(4096, 8)
    model = _mlp(W, 2, dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    lossf = nn.CrossEntropyLoss()
    xs = [torch.randn(B, W) for _ in range(2)]  # pageable
    y = torch.randint(0, 10, (B,), device=dev)

    def step(i):
        x = xs[i % 2].to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        lossf(model(x), y).backward()
        opt.step()

    notes = Recorder(out, "pageable_copies", wait=1, warmup=2, active=4, memory=False).run(step)
    return dict(width=W, batch=B, batch_mib=B * W * 4 >> 20, pinned=False, **notes)


# --- memory -------------------------------------------------------------------------------------------------

def _encoder(dev, d=1024, layers=4):
    from torch import nn

    layer = nn.TransformerEncoderLayer(d, 16, 4 * d, batch_first=True, dropout=0.0)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).to(dev)


def _encoder_training(d: int, B: int, T: int, layers: int, bf16: bool = False):
    """A step of transformer-encoder training (AdamW, a loss on the output's mean square) on one fixed batch of
    ``B`` sequences of ``T`` tokens; ``bf16``: the forward under ``torch.autocast(dtype=torch.bfloat16)``."""
    import torch

    torch.manual_seed(0)
    dev = _dev()
    model = _encoder(dev, d, layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(B, T, d, device=dev)
    ctx = (lambda: torch.autocast(dev.type, dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext

    def step(i):
        opt.zero_grad(set_to_none=True)
        with ctx():
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()

    return step


@scenario
def memory_pressure(out):
    """Training that leaves almost no free memory: another tensor (a cache, a second model) holds most of the
    GPU and the step's peak fills the rest."""
    import torch

    dev = _dev()
    d, B, T = _scale(1024, 16), _scale(16, 2), _scale(1024, 8)
    step = _encoder_training(d, B, T, _scale(8, 1))

    ballast_bytes = 0
    if dev.type == "cuda":
        step(0)
        _sync()
        peak = torch.cuda.max_memory_allocated()
        free, total = torch.cuda.mem_get_info()
        ballast_bytes = max(0, int(free - 0.25 * peak - (256 << 20)))
        ballast = torch.empty(ballast_bytes, dtype=torch.uint8, device=dev)  # noqa: F841 (held on purpose)
    notes = Recorder(out, "memory_pressure", wait=1, warmup=1, active=3).run(step)
    extra = {}
    if dev.type == "cuda":
        free, total = torch.cuda.mem_get_info()
        extra = dict(total_bytes=total, free_after_bytes=free, max_reserved=torch.cuda.max_memory_reserved(),
                     alloc_retries=torch.cuda.memory_stats().get("num_alloc_retries"))
    return dict(d_model=d, batch=B, seq=T, ballast_bytes=ballast_bytes, **extra, **notes)


@scenario
def memory_churn(out):
    """Variable-length batches with ``torch.cuda.empty_cache()`` after every step (a common attempt to avoid
    out-of-memory): the caching allocator gives its blocks back and asks the driver again each step."""
    return _churn(out, "memory_churn", empty_cache=True)


@scenario
def memory_churn_fixed(out):
    """The same batches without ``empty_cache()``: the allocator keeps and reuses its blocks."""
    return _churn(out, "memory_churn_fixed", empty_cache=False)


def _churn(out, name, empty_cache: bool):
    import torch

    torch.manual_seed(0)
    dev = _dev()
    d = _scale(1024, 16)
    model = _encoder(dev, d, _scale(4, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    lengths = [_scale(n, 4 + n % 5) for n in (512, 1900, 760, 1408, 300, 2048, 1100, 640, 1750)]

    def step(i):
        x = torch.randn(_scale(8, 2), lengths[i], d, device=dev)
        opt.zero_grad(set_to_none=True)
        model(x).pow(2).mean().backward()
        opt.step()
        if empty_cache and dev.type == "cuda":
            torch.cuda.empty_cache()

    notes = Recorder(out, name, wait=2, warmup=2, active=5).run(step)
    return dict(d_model=d, seq_lengths=lengths, empty_cache_every_step=empty_cache, **notes)


@scenario
def memory_oom(out):
    """A step that runs out of memory, is caught, and is retried at a smaller batch (a common recovery loop)."""
    import torch

    torch.manual_seed(0)
    dev = _dev()
    d = _scale(1024, 16)
    model = _encoder(dev, d, _scale(4, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tries = []

    def train(B, T):
        x = torch.randn(B, T, d, device=dev)
        opt.zero_grad(set_to_none=True)
        model(x).pow(2).mean().backward()
        opt.step()

    if dev.type == "cuda":
        train(4, 512)
        _sync()
        free, _ = torch.cuda.mem_get_info()
        ballast = torch.empty(max(0, free - (3 << 30)), dtype=torch.uint8, device=dev)  # noqa: F841

    def step(i):
        B = _scale(64, 2)
        while True:
            try:
                train(B, _scale(2048, 8))
                tries.append((i, B, "ok"))
                return
            except torch.OutOfMemoryError:
                tries.append((i, B, "oom"))
                opt.zero_grad(set_to_none=True)
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
                B //= 2
                if B == 0:
                    raise

    notes = Recorder(out, "memory_oom", cold=True, active=3).run(step)
    return dict(d_model=d, tries=tries, **notes)


# --- compute efficiency -------------------------------------------------------------------------------------

def _efficiency_run(out, name, bf16: bool):
    d, B, T = _scale(1024, 16), _scale(16, 2), _scale(512, 8)
    step = _encoder_training(d, B, T, _scale(6, 1), bf16=bf16)

    notes = Recorder(out, name, wait=2, warmup=2, active=3, flops=True, memory=False).run(step)
    return dict(d_model=d, batch=B, seq=T, layers=6, precision="bf16 autocast" if bf16 else "fp32 (TF32 off)",
                **notes)


@scenario
def efficiency_fp32(out):
    """Transformer encoder training in plain FP32 (PyTorch leaves TF32 matmul off): no tensor cores."""
    return _efficiency_run(out, "efficiency_fp32", False)


@scenario
def efficiency_bf16(out):
    """The same model under ``torch.autocast(dtype=torch.bfloat16)``: the GEMMs move to tensor cores."""
    return _efficiency_run(out, "efficiency_bf16", True)


# --- driver -------------------------------------------------------------------------------------------------

def _machine() -> dict:
    info = {"python": sys.version.split()[0]}
    try:
        import torch

        info.update(torch=torch.__version__, cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version())
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            info.update(gpu=p.name, sms=p.multi_processor_count, memory_bytes=p.total_memory)
    except Exception as e:  # noqa: BLE001 (recorded, not fatal)
        info["torch_error"] = repr(e)
    with contextlib.suppress(Exception):
        info["nvidia_smi"] = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    return info


def main(argv=None):
    global SMOKE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per scenario")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args(argv)
    SMOKE = a.smoke
    a.out.mkdir(parents=True, exist_ok=True)
    if a.child:
        (name,) = a.names
        t0 = time.perf_counter()
        notes = SCENARIOS[name](a.out)
        notes = {"scenario": name, "doc": " ".join(SCENARIOS[name].__doc__.split()), "wall_s": round(time.perf_counter() - t0, 2), **notes}
        _write_notes(a.out, name, notes)
        return 0
    # compilation is the slowest and least certain: last, so a time-out there costs nothing else
    names = a.names or sorted(SCENARIOS, key=lambda n: n.startswith("compile"))
    manifest = {"recorded_by": "sample_traces/record_gpu.py", "smoke": SMOKE, "machine": _machine(), "scenarios": {}}
    for name in names:
        t0 = time.perf_counter()
        cmd = [sys.executable, __file__, "--out", str(a.out), "--child", name] + (["--smoke"] if SMOKE else [])
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
            status, tail = ("ok" if r.returncode == 0 else f"rc {r.returncode}"), (r.stderr or "")[-1500:]
        except subprocess.TimeoutExpired:
            status, tail = "timeout", ""
        entry = {"status": status, "wall_s": round(time.perf_counter() - t0, 2)}
        notes_file = a.out / f"{name}.notes.json"
        if notes_file.exists():
            entry.update(json.loads(notes_file.read_text()))
            notes_file.unlink()
        if status != "ok":
            entry["stderr_tail"] = tail
        manifest["scenarios"][name] = entry
        print(f"{name}: {status} in {entry['wall_s']} s", flush=True)
        (a.out / "manifest.json").write_text(json.dumps(manifest, indent=1, default=str))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
