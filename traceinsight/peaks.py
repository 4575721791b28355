"""Dense peak throughput and memory bandwidth per GPU, each figure with the datasheet it comes from.

Datasheets headline the 2:4-structured-sparsity figure for tensor-core math (2x the dense rate); no framework
trains at it, so quoting it halves every MFU. This table holds the **dense** figures (the sparse ones are kept next
to them so a test can check dense < sparse) and one source per GPU. Figures are per device as the runtime lists it:
an MI250/MI250X shows up as two devices (one per GCD), each with half the package's figures.

Lookup is by the device name the trace records, checked against its compute capability when both are present; a
GPU that is not in the table, or a name that does not say which variant it is, gives no peak (never a guess): the
report then says "peak unknown; pass --peak-tflops".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Dtype groups a peak is quoted for. fp16 and bf16 share tensor-core rates on every GPU listed.
PEAK_DTYPES: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8")


@dataclass(frozen=True)
class Peak:
    """One GPU: dense TFLOP/s per dtype, memory bandwidth in GB/s, the source, and how it is recognised."""

    gpu: str
    pattern: str  # regex over the device name (case-insensitive)
    tflops: dict[str, float]  # dense; fp32 = the FP32 rate a plain-FP32 GEMM can reach (CUDA cores / AMD matrix FP32)
    bandwidth_gbs: float
    source: str
    sparse_tflops: dict[str, float] = field(default_factory=dict)  # the datasheet's 2:4-sparse figures, where given
    compute_capability: tuple[str, ...] = ()  # "major.minor" values this GPU reports ("" = any)
    memory_gb: tuple[float, float] | None = None  # (min, max) device memory that tells variants of one name apart
    note: str = ""

    def peak_for(self, dtype: str) -> float | None:
        return self.tflops.get(dtype)


def _p(gpu: str, pattern: str, fp32: float, tf32: float | None, fp16: float | None, fp8: float | None, bw: float, source: str,
       *, sparse: bool = True, cc: tuple[str, ...] = (), mem: tuple[float, float] | None = None, note: str = "") -> Peak:
    dense = {"fp32": fp32}
    for k, v in (("tf32", tf32), ("fp16", fp16), ("bf16", fp16), ("fp8", fp8)):
        if v is not None:
            dense[k] = v
    sp = {k: round(v * 2, 2) for k, v in dense.items() if k != "fp32"} if sparse else {}
    return Peak(gpu, pattern, dense, bw, source, sp, cc, mem, note)


_V100 = "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
_A100 = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
_H100 = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_H200 = "https://nvdam.widen.net/s/nb5zzzsjdf/hpc-datasheet-sc23-h200-datasheet-3002446"
_MI200 = "https://www.amd.com/en/products/accelerators/instinct/mi200/"

#: The table, most specific names first (the first matching entry wins).
PEAKS: tuple[Peak, ...] = (
    _p("NVIDIA H100 NVL", r"H100\s*NVL", 60.0, 417.5, 835.5, 1670.5, 3900, _H100, cc=("9.0",)),
    _p("NVIDIA H100 PCIe", r"H100.*PCIe", 51.0, 378.0, 756.5, 1513.0, 2000, _H100, cc=("9.0",)),
    _p("NVIDIA H100 SXM", r"H100", 67.0, 494.5, 989.5, 1979.0, 3350, _H100, cc=("9.0",),
       note="'H100 80GB HBM3' is the SXM part; PCIe and NVL name themselves"),
    _p("NVIDIA H200 NVL", r"H200\s*NVL", 60.0, 417.5, 835.5, 1670.5, 4800, _H200, cc=("9.0",)),
    _p("NVIDIA H200 SXM", r"(?<!G)H200", 67.0, 494.5, 989.5, 1979.0, 4800, _H200, cc=("9.0",)),
    _p("NVIDIA B200", r"\bB200\b", 75.0, 1125.0, 2250.0, 4500.0, 8000, "https://www.nvidia.com/en-us/data-center/hgx/",
       cc=("10.0",), note="HGX B200 figures for 8 GPUs divided by 8"),
    _p("NVIDIA A100 80GB PCIe", r"A100.*PCIE.*80|A100.*80.*PCIE", 19.5, 156.0, 312.0, None, 1935, _A100, cc=("8.0",)),
    _p("NVIDIA A100 80GB SXM", r"A100", 19.5, 156.0, 312.0, None, 2039, _A100, cc=("8.0",), mem=(60, 90)),
    _p("NVIDIA A100 40GB", r"A100", 19.5, 156.0, 312.0, None, 1555, _A100, cc=("8.0",), mem=(30, 50)),
    _p("NVIDIA A10", r"\bA10\b(?!G)", 31.2, 62.5, 125.0, None, 600,
       "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf", cc=("8.6",)),
    _p("NVIDIA L40S", r"L40S", 91.6, 183.0, 362.05, 733.0, 864,
       "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413", cc=("8.9",)),
    _p("NVIDIA L4", r"\bL4\b", 30.3, 60.0, 121.0, 242.5, 300,
       "https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet", cc=("8.9",),
       note="the datasheet quotes tensor figures with sparsity only; dense = half"),
    _p("NVIDIA T4", r"\bT4\b", 8.1, None, 65.0, None, 320,
       "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf",
       sparse=False, cc=("7.5",), note="Turing: FP16 tensor cores only (no TF32/bf16); no sparsity"),
    _p("NVIDIA V100S PCIe", r"V100S", 16.4, None, 130.0, None, 1134, _V100, sparse=False, cc=("7.0",)),
    _p("NVIDIA V100 PCIe", r"V100.*PCIE", 14.0, None, 112.0, None, 900, _V100, sparse=False, cc=("7.0",)),
    _p("NVIDIA V100 SXM2", r"V100", 15.7, None, 125.0, None, 900, _V100, sparse=False, cc=("7.0",),
       note="Volta: FP16 tensor cores only; DGX Station/SXM2 parts"),
    _p("NVIDIA GeForce RTX 4090", r"RTX\s*4090(?!\s*D)(?!.*Laptop)", 82.6, 82.6, 165.2, 330.3, 1008,
       "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf", cc=("8.9",),
       note="tensor rates with FP32 accumulate (what PyTorch uses); FP16 accumulate is 2x"),
    _p("NVIDIA GeForce RTX 3090", r"RTX\s*3090(?!\s*Ti)(?!.*Laptop)", 35.6, 35.6, 71.0, None, 936,
       "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf", cc=("8.6",),
       note="tensor rates with FP32 accumulate (what PyTorch uses); FP16 accumulate is 2x"),
    _p("AMD Instinct MI300X", r"MI300X", 163.4, 653.7, 1307.4, 2614.9, 5300,
       "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html", cc=("9.4",),
       note="fp32 = matrix FP32 (vector FP32 is 81.7)"),
    _p("AMD Instinct MI250X (one GCD)", r"MI250X(?!\s*/)", 47.85, None, 191.5, None, 1638.4, _MI200 + "mi250x.html",
       sparse=False, cc=("9.0",), note="package figures (matrix FP32 95.7, FP16/BF16 383, 3.2768 TB/s) halved: each GCD is one device"),
    _p("AMD Instinct MI250 (one GCD)", r"MI250(?!X)", 45.25, None, 181.05, None, 1638.4, _MI200 + "mi250.html",
       sparse=False, cc=("9.0",), note="package figures (matrix FP32 90.5, FP16/BF16 362.1, 3.2768 TB/s) halved: each GCD is one device"),
    _p("AMD Instinct MI210", r"MI210", 45.3, None, 181.0, None, 1600, _MI200 + "mi210.html", sparse=False, cc=("9.0",),
       note="fp32 = matrix FP32 (vector FP32 is 22.6)"),
)


@dataclass(frozen=True)
class PeakChoice:
    """The peak an analysis uses: from the table, from the user, or unknown (then ``reason`` says why)."""

    gpu: str | None
    tflops: dict[str, float]
    bandwidth_gbs: float | None
    source: str
    reason: str = ""

    @property
    def known(self) -> bool:
        return bool(self.tflops)

    def for_dtype(self, dtype: str | None) -> tuple[float | None, str]:
        """(TFLOP/s, the dtype it is quoted for) for math in ``dtype``; a user's ``--peak-tflops`` applies to all."""
        if "*" in self.tflops:
            return self.tflops["*"], dtype or "any"
        if dtype in self.tflops:
            return self.tflops[dtype], dtype
        return None, dtype or ""

    def label(self, dtype: str | None = None) -> str:
        """"989.5 TFLOP/s bf16 dense, NVIDIA H100 SXM datasheet" — what is printed beside a percentage."""
        value, d = self.for_dtype(dtype)
        if value is None:
            return UNKNOWN_PEAK
        where = "given with --peak-tflops" if self.source == USER else f"{self.gpu} datasheet"
        return f"{value:g} TFLOP/s {d} dense, {where}"


USER = "user"
UNKNOWN_PEAK = "peak unknown; pass --peak-tflops"


def lookup(name: str | None, compute_capability: str | None = None, memory_bytes: int | None = None) -> Peak | None:
    """The table entry for a device, or None when the name is absent, unknown, or does not say which variant."""
    if not name:
        return None
    cc = _cc(compute_capability)
    mem_gb = memory_bytes / 1e9 if memory_bytes else None
    for p in PEAKS:
        if not re.search(p.pattern, name, re.I):
            continue
        if p.memory_gb is not None:
            if mem_gb is None:
                continue
            if not p.memory_gb[0] <= mem_gb <= p.memory_gb[1]:
                continue
        if cc and p.compute_capability and cc not in p.compute_capability:
            return None  # the name and the compute capability disagree: do not guess
        return p
    return None


def _cc(value: str | None) -> str | None:
    if not value:
        return None
    m = re.match(r"\s*(\d+)(?:\.(\d+))?", str(value))
    return f"{m.group(1)}.{m.group(2) or 0}" if m else None


def choose(devices: list, peak_tflops: float | None = None, peak_bandwidth_gbs: float | None = None) -> PeakChoice:
    """The peak for the devices of a trace: the user's figures win; else the table's for the device(s) (one model)."""
    if peak_tflops is not None or peak_bandwidth_gbs is not None:
        table = _from_devices(devices)
        tflops = {"*": float(peak_tflops)} if peak_tflops is not None else (dict(table.tflops) if table.known else {})
        bw = float(peak_bandwidth_gbs) if peak_bandwidth_gbs is not None else table.bandwidth_gbs
        src = USER if peak_tflops is not None else table.source
        return PeakChoice(table.gpu or "your GPU", tflops, bw, src, "" if tflops else table.reason)
    return _from_devices(devices)


def _from_devices(devices: list) -> PeakChoice:
    named = [d for d in devices if getattr(d, "name", None)]
    if not named:
        return PeakChoice(None, {}, None, "", "the trace does not name its GPU")
    found = {id(d): lookup(d.name, d.compute_capability, d.memory_bytes) for d in named}
    models = {p.gpu for p in found.values() if p is not None}
    if not models:
        d = named[0]
        if any(re.search(p.pattern, d.name, re.I) for p in PEAKS):
            why = (f"{d.name} with compute capability {d.compute_capability} and {((d.memory_bytes or 0) / 1e9):.0f} GB "
                   "matches no variant in the peak table")
        else:
            why = f"{d.name} is not in the peak table"
        return PeakChoice(d.name, {}, None, "", why)
    if len(models) > 1 or any(p is None for p in found.values()):
        return PeakChoice(named[0].name, {}, None, "", "the trace mixes GPU models")
    p = next(iter(found.values()))
    assert p is not None
    return PeakChoice(p.gpu, dict(p.tflops), p.bandwidth_gbs, p.source)
