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
from typing import Any

from traceinsight.vocab.gpus import GpuRecord, cc_text, parse_cc, vendor_of

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
    units: int | None = None  # SMs (NVIDIA) / CUs (AMD) per device: with the compute capability, the signature
    signature_memory_gb: tuple[float, float] | None = None  # device memory range of that signature

    def peak_for(self, dtype: str) -> float | None:
        return self.tflops.get(dtype)

    @property
    def vendor(self) -> str | None:
        return vendor_of(None, self.gpu)


def _p(gpu: str, pattern: str, fp32: float, tf32: float | None, fp16: float | None, fp8: float | None, bw: float, source: str,
       *, sparse: tuple[float | None, float | None, float | None] | None = None, cc: tuple[str, ...] = (),
       mem: tuple[float, float] | None = None, note: str = "", units: int | None = None,
       sig_mem: tuple[float, float] | None = None, bf16: bool = True) -> Peak:
    """One entry: dense TF32, FP16/BF16 and FP8 rates, and ``sparse`` = the datasheet's (TF32, FP16/BF16, FP8)
    figures with 2:4 sparsity as printed there (None where the GPU has no sparsity). ``bf16=False``: the tensor
    cores take FP16 only (Volta, Turing)."""
    dense = {"fp32": fp32}
    for k, v in (("tf32", tf32), ("fp16", fp16), ("bf16", fp16 if bf16 else None), ("fp8", fp8)):
        if v is not None:
            dense[k] = v
    sp: dict[str, float] = {}
    if sparse is not None:
        for k, v in zip(("tf32", "fp16", "fp8"), sparse):
            if v is not None:
                sp[k] = v
        if "fp16" in sp:
            sp["bf16"] = sp["fp16"]
    return Peak(gpu, pattern, dense, bw, source, sp, cc, mem, note, units, sig_mem)


_V100 = "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
_A100 = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
_H100 = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_H200 = "https://nvdam.widen.net/s/nb5zzzsjdf/hpc-datasheet-sc23-h200-datasheet-3002446"
_MI200 = "https://www.amd.com/en/products/accelerators/instinct/mi200/"
_TURING = "https://images.nvidia.com/aem-dam/en-zz/Solutions/design-visualization/technologies/turing-architecture/NVIDIA-Turing-Architecture-Whitepaper.pdf"
_GA102 = "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf"
_ADA = "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf"
_RTX_BLACKWELL = "https://images.nvidia.com/aem-dam/Solutions/geforce/blackwell/nvidia-rtx-blackwell-gpu-architecture.pdf"
#: GeForce parts run tensor math with FP32 accumulation (what PyTorch asks for) at half their FP16-accumulate rate.
_GEFORCE = "tensor rates with FP32 accumulate (what PyTorch uses); FP16 accumulate is 2x"
#: Parts whose whitepaper gives the per-SM rates and clocks but not every SKU's totals: SMs x rate x boost clock.
_DERIVED = "; SMs x per-SM rate x boost clock from the architecture whitepaper"

#: The table, most specific names first (the first matching entry wins).
PEAKS: tuple[Peak, ...] = (
    _p("NVIDIA H100 NVL", r"H100\s*NVL", 60.0, 417.5, 835.5, 1670.5, 3900, _H100, sparse=(835, 1671, 3341), cc=("9.0",), units=132, sig_mem=(95, 105)),
    _p("NVIDIA H100 PCIe", r"H100.*PCIe", 51.0, 378.0, 756.5, 1513.0, 2000, _H100, sparse=(756, 1513, 3026), cc=("9.0",), units=114, sig_mem=(75, 90)),
    _p("NVIDIA H100 SXM", r"H100", 67.0, 494.5, 989.5, 1979.0, 3350, _H100, sparse=(989, 1979, 3958), cc=("9.0",),
       note="'H100 80GB HBM3' is the SXM part; PCIe and NVL name themselves", units=132, sig_mem=(75, 90)),
    _p("NVIDIA H200 NVL", r"H200\s*NVL", 60.0, 417.5, 835.5, 1670.5, 4800, _H200, sparse=(835, 1671, 3341), cc=("9.0",), units=132, sig_mem=(135, 150)),
    _p("NVIDIA H200 SXM", r"(?<!G)H200", 67.0, 494.5, 989.5, 1979.0, 4800, _H200, sparse=(989, 1979, 3958), cc=("9.0",), units=132, sig_mem=(135, 150)),
    _p("NVIDIA B200", r"\bB200\b", 75.0, 1125.0, 2250.0, 4500.0, 8000, "https://www.nvidia.com/en-us/data-center/hgx/",
       sparse=(2250, 4500, 9000), cc=("10.0",), note="HGX B200 figures for 8 GPUs divided by 8", units=148, sig_mem=(170, 200)),
    _p("NVIDIA GH200 96GB", r"GH200", 67.0, 494.5, 989.5, 1979.0, 4000, "https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/",
       sparse=(989, 1979, 3958), cc=("9.0",), mem=(90, 110), note="the superchip's H100-class GPU with 96 GB HBM3", units=132, sig_mem=(90, 110)),
    _p("NVIDIA GH200 144GB", r"GH200", 67.0, 494.5, 989.5, 1979.0, 4900, "https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/",
       sparse=(989, 1979, 3958), cc=("9.0",), mem=(130, 160), note="the superchip's H100-class GPU with 144 GB HBM3e", units=132, sig_mem=(130, 160)),
    _p("NVIDIA H20", r"\bH20\b", 44.0, 74.0, 148.0, 296.0, 4000, "https://www.nvidia.com/en-us/data-center/h100/",
       cc=("9.0",), note="a Hopper part sold in China; NVIDIA publishes no datasheet online: dense figures from its product "
       "brief as partners list them (78 SMs, 96 GB HBM3); the source is the Hopper family page", units=78, sig_mem=(90, 105)),
    _p("NVIDIA A100 80GB PCIe", r"A100.*PCIE.*80|A100.*80.*PCIE", 19.5, 156.0, 312.0, None, 1935, _A100, sparse=(312, 624, None), cc=("8.0",), units=108, sig_mem=(80, 90)),
    _p("NVIDIA A100 80GB SXM", r"A100", 19.5, 156.0, 312.0, None, 2039, _A100, sparse=(312, 624, None), cc=("8.0",), mem=(60, 90), units=108, sig_mem=(80, 90)),
    _p("NVIDIA A100 40GB", r"A100", 19.5, 156.0, 312.0, None, 1555, _A100, sparse=(312, 624, None), cc=("8.0",), mem=(30, 50), units=108, sig_mem=(38, 45)),
    _p("NVIDIA A10", r"\bA10\b(?!G)", 31.2, 62.5, 125.0, None, 600,
       "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf", sparse=(125, 250, None), cc=("8.6",), units=72, sig_mem=(22, 26)),
    _p("NVIDIA L40S", r"L40S", 91.6, 183.0, 362.05, 733.0, 864,
       "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413", sparse=(366, 733, 1466), cc=("8.9",), units=142, sig_mem=(44, 52)),
    _p("NVIDIA L4", r"\bL4\b", 30.3, 60.0, 121.0, 242.5, 300,
       "https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet", sparse=(120, 242, 485), cc=("8.9",),
       note="the datasheet quotes tensor figures with sparsity only; dense = half", units=58, sig_mem=(22, 26)),
    _p("NVIDIA T4", r"\bT4\b", 8.1, None, 65.0, None, 320,
       "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf",
       cc=("7.5",), bf16=False, note="Turing: FP16 tensor cores only (no TF32/bf16); no sparsity", units=40, sig_mem=(14, 17)),
    _p("NVIDIA V100S PCIe", r"V100S", 16.4, None, 130.0, None, 1134, _V100, cc=("7.0",), bf16=False, units=80, sig_mem=(30, 36)),
    _p("NVIDIA V100 PCIe", r"V100.*PCIE", 14.0, None, 112.0, None, 900, _V100, cc=("7.0",), bf16=False, units=80, sig_mem=(15, 36)),
    _p("NVIDIA V100 SXM2", r"V100", 15.7, None, 125.0, None, 900, _V100, cc=("7.0",), bf16=False,
       note="Volta: FP16 tensor cores only; DGX Station/SXM2 parts", units=80, sig_mem=(15, 36)),
    _p("NVIDIA GeForce RTX 4090", r"RTX\s*4090(?!\s*D)(?!.*Laptop)", 82.6, 82.6, 165.2, 330.3, 1008,
       "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf", sparse=(165.2, 330.4, 660.6), cc=("8.9",),
       note="tensor rates with FP32 accumulate (what PyTorch uses); FP16 accumulate is 2x", units=128, sig_mem=(22, 26)),
    _p("NVIDIA GeForce RTX 3090", r"RTX\s*3090(?!\s*Ti)(?!.*Laptop)", 35.6, 35.6, 71.0, None, 936,
       "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf", sparse=(71, 142, None), cc=("8.6",),
       note="tensor rates with FP32 accumulate (what PyTorch uses); FP16 accumulate is 2x", units=82, sig_mem=(22, 26)),
    _p("NVIDIA GeForce RTX 4090 D", r"RTX\s*4090\s*D(?!.*Laptop)", 73.5, 73.5, 147.1, 294.2, 1008, _ADA, cc=("8.9",),
       note=_GEFORCE + _DERIVED + " (114 SMs, 2.52 GHz)", units=114, sig_mem=(22, 26)),
    _p("NVIDIA GeForce RTX 4080 SUPER", r"RTX\s*4080\s*SUPER(?!.*Laptop)", 52.2, 52.2, 104.4, 208.9, 736, _ADA, cc=("8.9",),
       note=_GEFORCE + _DERIVED + " (80 SMs, 2.55 GHz)", units=80, sig_mem=(15, 17.5)),
    _p("NVIDIA GeForce RTX 4080", r"RTX\s*4080(?!\s*SUPER)(?!.*Laptop)", 48.7, 48.7, 97.5, 194.9, 716.8, _ADA, cc=("8.9",),
       note=_GEFORCE + " (ADA whitepaper appendix)", units=76, sig_mem=(15, 17.5)),
    _p("NVIDIA GeForce RTX 4070 Ti SUPER", r"RTX\s*4070\s*Ti\s*SUPER(?!.*Laptop)", 44.1, 44.1, 88.2, 176.4, 672, _ADA, cc=("8.9",),
       note=_GEFORCE + _DERIVED + " (66 SMs, 2.61 GHz)", units=66, sig_mem=(15, 17.5)),
    _p("NVIDIA GeForce RTX 4070 Ti", r"RTX\s*4070\s*Ti(?!\s*SUPER)(?!.*Laptop)", 40.1, 40.1, 80.2, 160.4, 504, _ADA, cc=("8.9",),
       note=_GEFORCE + _DERIVED + " (60 SMs, 2.61 GHz)", units=60, sig_mem=(11.5, 13.5)),
    _p("NVIDIA GeForce RTX 4070 SUPER", r"RTX\s*4070\s*SUPER(?!.*Laptop)", 35.5, 35.5, 71.0, 141.9, 504, _ADA, cc=("8.9",),
       note=_GEFORCE + _DERIVED + " (56 SMs, 2.475 GHz)", units=56, sig_mem=(11.5, 13.5)),
    _p("NVIDIA GeForce RTX 4070", r"RTX\s*4070(?!\s*(?:Ti|SUPER))(?!.*Laptop)", 29.1, 29.1, 58.3, 116.6, 504, _ADA, cc=("8.9",),
       note=_GEFORCE + _DERIVED + " (46 SMs, 2.475 GHz)", units=46, sig_mem=(11.5, 13.5)),
    _p("NVIDIA GeForce RTX 4060 Ti", r"RTX\s*4060\s*Ti(?!.*Laptop)", 22.1, 22.1, 44.1, 88.3, 288, _ADA, cc=("8.9",),
       note=_GEFORCE + _DERIVED + " (34 SMs, 2.535 GHz)", units=34, sig_mem=(7.5, 17.5)),
    _p("NVIDIA GeForce RTX 4060", r"RTX\s*4060(?!\s*Ti)(?!.*Laptop)", 15.1, 15.1, 30.2, 60.5, 272, _ADA, cc=("8.9",),
       note=_GEFORCE + _DERIVED + " (24 SMs, 2.46 GHz)", units=24, sig_mem=(7.5, 9)),
    _p("NVIDIA RTX 6000 Ada Generation", r"RTX\s*6000\s*Ada", 91.1, 182.1, 364.2, 728.5, 960,
       "https://www.nvidia.com/en-us/design-visualization/rtx-6000/", sparse=(364.2, 728.5, 1457.0), cc=("8.9",),
       note="the datasheet quotes FP8 tensor with sparsity (1457 TFLOPS); dense = half", units=142, sig_mem=(45, 52)),
    _p("NVIDIA GeForce RTX 3090 Ti", r"RTX\s*3090\s*Ti(?!.*Laptop)", 40.0, 40.0, 80.0, None, 1008, _GA102, cc=("8.6",),
       note=_GEFORCE + _DERIVED + " (84 SMs, 1.86 GHz)", units=84, sig_mem=(22, 26)),
    _p("NVIDIA GeForce RTX 3080 Ti", r"RTX\s*3080\s*Ti(?!.*Laptop)", 34.1, 34.1, 68.2, None, 912, _GA102, cc=("8.6",),
       note=_GEFORCE + _DERIVED + " (80 SMs, 1.665 GHz)", units=80, sig_mem=(11.5, 13.5)),
    _p("NVIDIA GeForce RTX 3080 12GB", r"RTX\s*3080(?!\s*Ti)(?!.*Laptop)", 30.6, 30.6, 61.3, None, 912, _GA102, cc=("8.6",),
       mem=(11.5, 13.5), note=_GEFORCE + _DERIVED + " (70 SMs, 1.71 GHz)", units=70, sig_mem=(11.5, 13.5)),
    _p("NVIDIA GeForce RTX 3080", r"RTX\s*3080(?!\s*Ti)(?!.*Laptop)", 29.8, 29.8, 59.5, None, 760, _GA102, cc=("8.6",),
       mem=(9.5, 11.5), note=_GEFORCE + " (GA102 whitepaper: 10 GB part, 68 SMs)", units=68, sig_mem=(9.5, 11.5)),
    _p("NVIDIA GeForce RTX 3070 Ti", r"RTX\s*3070\s*Ti(?!.*Laptop)", 21.7, 21.7, 43.5, None, 608, _GA102, cc=("8.6",),
       note=_GEFORCE + _DERIVED + " (48 SMs, 1.77 GHz)", units=48, sig_mem=(7.5, 9)),
    _p("NVIDIA GeForce RTX 3070", r"RTX\s*3070(?!\s*Ti)(?!.*Laptop)", 20.3, 20.3, 40.6, None, 448, _GA102, cc=("8.6",),
       note=_GEFORCE + " (GA102 whitepaper appendix: 46 SMs, 1.725 GHz)", units=46, sig_mem=(7.5, 9)),
    _p("NVIDIA GeForce RTX 3060 Ti", r"RTX\s*3060\s*Ti(?!.*Laptop)", 16.2, 16.2, 32.4, None, 448, _GA102, cc=("8.6",),
       note=_GEFORCE + _DERIVED + " (38 SMs, 1.665 GHz)", units=38, sig_mem=(7.5, 9)),
    _p("NVIDIA GeForce RTX 3060", r"RTX\s*3060(?!\s*Ti)(?!.*Laptop)", 12.7, 12.7, 25.5, None, 360, _GA102, cc=("8.6",),
       note=_GEFORCE + _DERIVED + " (28 SMs, 1.777 GHz)", units=28, sig_mem=(11.5, 13.5)),
    _p("NVIDIA RTX A6000", r"RTX\s*A6000", 38.7, 77.4, 154.8, None, 768, "https://www.nvidia.com/en-us/design-visualization/rtx-a6000/",
       sparse=(154.8, 309.7, None), cc=("8.6",), units=84, sig_mem=(45, 52)),
    _p("NVIDIA A40", r"\bA40\b", 37.4, 74.8, 149.7, None, 696,
       "https://images.nvidia.com/content/Solutions/data-center/a40/nvidia-a40-datasheet.pdf", sparse=(149.6, 299.4, None),
       cc=("8.6",), units=84, sig_mem=(45, 52)),
    _p("NVIDIA TITAN RTX", r"TITAN\s*RTX", 16.3, None, 130.5, None, 672, _TURING, cc=("7.5",), bf16=False,
       note="Turing: FP16 tensor cores only; the TITAN runs FP32 accumulate at the full rate", units=72, sig_mem=(22, 26)),
    _p("NVIDIA GeForce RTX 2080 Ti", r"RTX\s*2080\s*Ti", 13.4, None, 53.8, None, 616, _TURING, cc=("7.5",), bf16=False,
       note="Turing: FP16 tensor cores only; " + _GEFORCE + " (Turing whitepaper, reference clocks)", units=68, sig_mem=(10, 12)),
    _p("NVIDIA GeForce RTX 2080 SUPER", r"RTX\s*2080\s*SUPER", 11.2, None, 44.6, None, 496, _TURING, cc=("7.5",), bf16=False,
       note="Turing: FP16 tensor cores only; " + _GEFORCE + _DERIVED + " (48 SMs, 1.815 GHz)", units=48, sig_mem=(7.5, 9)),
    _p("NVIDIA GeForce RTX 2080", r"RTX\s*2080(?!\s*(?:Ti|SUPER))", 10.1, None, 40.3, None, 448, _TURING, cc=("7.5",), bf16=False,
       note="Turing: FP16 tensor cores only; " + _GEFORCE + " (Turing whitepaper, reference clocks)", units=46, sig_mem=(7.5, 9)),
    _p("NVIDIA GeForce RTX 2070 SUPER", r"RTX\s*2070\s*SUPER", 9.1, None, 36.3, None, 448, _TURING, cc=("7.5",), bf16=False,
       note="Turing: FP16 tensor cores only; " + _GEFORCE + _DERIVED + " (40 SMs, 1.77 GHz)", units=40, sig_mem=(7.5, 9)),
    _p("NVIDIA GeForce RTX 2070", r"RTX\s*2070(?!\s*SUPER)", 7.5, None, 29.9, None, 448, _TURING, cc=("7.5",), bf16=False,
       note="Turing: FP16 tensor cores only; " + _GEFORCE + " (Turing whitepaper, reference clocks)", units=36, sig_mem=(7.5, 9)),
    _p("NVIDIA GeForce RTX 2060", r"RTX\s*2060(?!\s*SUPER)", 6.5, None, 25.8, None, 336, _TURING, cc=("7.5",), bf16=False,
       note="Turing: FP16 tensor cores only; " + _GEFORCE + _DERIVED + " (30 SMs, 1.68 GHz)", units=30, sig_mem=(5.5, 7)),
    _p("NVIDIA GeForce RTX 5090", r"RTX\s*5090(?!.*Laptop)", 104.8, 104.8, 209.5, 419.0, 1792, _RTX_BLACKWELL, cc=("12.0",),
       note=_GEFORCE + _DERIVED + " (170 SMs, 2.407 GHz)", units=170, sig_mem=(30, 35)),
    _p("NVIDIA GeForce RTX 5080", r"RTX\s*5080(?!.*Laptop)", 56.3, 56.3, 112.6, 225.1, 960, _RTX_BLACKWELL, cc=("12.0",),
       note=_GEFORCE + _DERIVED + " (84 SMs, 2.617 GHz)", units=84, sig_mem=(15, 17.5)),
    _p("NVIDIA GeForce RTX 5070 Ti", r"RTX\s*5070\s*Ti(?!.*Laptop)", 43.9, 43.9, 87.9, 175.7, 896, _RTX_BLACKWELL, cc=("12.0",),
       note=_GEFORCE + _DERIVED + " (70 SMs, 2.452 GHz)", units=70, sig_mem=(15, 17.5)),
    _p("NVIDIA GeForce RTX 5070", r"RTX\s*5070(?!\s*Ti)(?!.*Laptop)", 30.9, 30.9, 61.7, 123.5, 672, _RTX_BLACKWELL, cc=("12.0",),
       note=_GEFORCE + _DERIVED + " (48 SMs, 2.512 GHz)", units=48, sig_mem=(11.5, 13.5)),
    _p("AMD Instinct MI325X", r"MI325X", 163.4, 653.7, 1307.4, 2614.9, 6000,
       "https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html", sparse=(1307.4, 2614.9, 5229.8), cc=("9.4",),
       note="the MI300X's compute with 256 GB HBM3E; fp32 = matrix FP32", units=304, sig_mem=(240, 275)),
    _p("AMD Instinct MI300X", r"MI300X", 163.4, 653.7, 1307.4, 2614.9, 5300,
       "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html", sparse=(1307.4, 2614.9, 5229.8), cc=("9.4",),
       note="fp32 = matrix FP32 (vector FP32 is 81.7)", units=304, sig_mem=(185, 215)),
    _p("AMD Instinct MI250X (one GCD)", r"MI250X(?!\s*/)", 47.85, None, 191.5, None, 1638.4, _MI200 + "mi250x.html",
       cc=("9.0",), note="package figures (matrix FP32 95.7, FP16/BF16 383, 3.2768 TB/s) halved: each GCD is one device",
       units=110, sig_mem=(60, 70)),
    _p("AMD Instinct MI250 (one GCD)", r"MI250(?!X)", 45.25, None, 181.05, None, 1638.4, _MI200 + "mi250.html",
       cc=("9.0",), note="package figures (matrix FP32 90.5, FP16/BF16 362.1, 3.2768 TB/s) halved: each GCD is one device",
       units=104, sig_mem=(60, 70)),
    _p("AMD Instinct MI210", r"MI210", 45.3, None, 181.0, None, 1600, _MI200 + "mi210.html", cc=("9.0",),
       note="fp32 = matrix FP32 (vector FP32 is 22.6)", units=104, sig_mem=(60, 70)),
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


def lookup(name: str | None, compute_capability: "str | tuple[int, int] | None" = None, memory_bytes: int | None = None,
           units: int | None = None, vendor: str | None = None) -> Peak | None:
    """The table entry for a device, or None when it is unknown or its variant cannot be told (``identify``)."""
    return identify(name, compute_capability, memory_bytes, units, vendor)[0]


def identify(name: str | None, compute_capability: "str | tuple[int, int] | None" = None, memory_bytes: int | None = None,
             units: int | None = None, vendor: str | None = None) -> tuple[Peak | None, str]:
    """(the table entry, "name" | "signature" | "") for a device.

    By name first (checked against the compute capability); a name that names no product ("AMD Radeon Graphics",
    XPlane's synthesised "Nvidia GPU (cc 8.6, 46 SMs)") is identified by its signature instead: vendor, compute
    capability, SM/CU count and, where the trace records it, memory size; used only when exactly one entry has that
    signature (an MI250 GCD and an MI210 share theirs, an A40 and an RTX A6000 theirs: no peak)."""
    cc = parse_cc(compute_capability) if not isinstance(compute_capability, tuple) else compute_capability
    mem_gb = memory_bytes / 1e9 if memory_bytes else None
    vendor = vendor_of(vendor, name)
    if not name or not any(re.search(p.pattern, name, re.I) for p in PEAKS):
        hit = _by_signature(cc, units, mem_gb, vendor)
        return hit, ("signature" if hit is not None else "")
    for p in PEAKS:
        if not re.search(p.pattern, name, re.I):
            continue
        if p.memory_gb is not None:
            if mem_gb is None:
                continue
            if not p.memory_gb[0] <= mem_gb <= p.memory_gb[1]:
                continue
        if cc and p.compute_capability and cc_text(cc) not in p.compute_capability:
            return None, ""  # the name and the compute capability disagree: do not guess
        return p, "name"
    return None, ""


def record(device: Any) -> GpuRecord:
    """The ``gpus.GpuRecord`` of a ``DeviceInfo`` (or anything with its fields): what the trace says, read once
    (vendor folded, compute capability parsed), and the part this table identifies."""
    name = getattr(device, "name", None)
    vendor = vendor_of(getattr(device, "vendor", None), name)
    cc = parse_cc(getattr(device, "compute_capability", None))
    sms = getattr(device, "sm_count", None)
    mem = getattr(device, "memory_bytes", None)
    peak, how = identify(name, cc, mem, sms, vendor)
    return GpuRecord(name, vendor, cc, sms, mem, peak, how)


def _by_signature(cc: tuple[int, int] | None, units: int | None, mem_gb: float | None, vendor: str | None) -> Peak | None:
    if not cc or not units:
        return None
    hits = [p for p in PEAKS if p.units == units and cc_text(cc) in p.compute_capability
            and (vendor is None or p.vendor == vendor)
            and (mem_gb is None or (p.signature_memory_gb is not None and p.signature_memory_gb[0] <= mem_gb <= p.signature_memory_gb[1]))]
    if mem_gb is None and any(p.memory_gb is not None for p in hits):
        return None  # variants told apart by memory alone, and the memory is not recorded
    return hits[0] if len(hits) == 1 else None  # variants sharing a signature (A100 80GB PCIe/SXM) stay unknown


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
    named = [d for d in devices if getattr(d, "name", None)
             or (getattr(d, "compute_capability", None) and getattr(d, "sm_count", None))]  # a signature identifies too
    if not named:
        return PeakChoice(None, {}, None, "", "the trace does not name its GPU")
    found = {id(d): record(d).peak for d in named}
    models = {p.gpu for p in found.values() if p is not None}
    if not models:
        d = named[0]
        if not d.name:
            return PeakChoice(None, {}, None, "", f"a GPU with compute capability {d.compute_capability} and {d.sm_count} SMs/CUs "
                              "matches no single part in the peak table")
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
