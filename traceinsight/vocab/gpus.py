"""One GPU as the analysis knows it: vendor, compute capability (parsed here, once, for every user), SMs/CUs,
memory, tensor cores, and the part the peak table identifies with its dense peaks and their sources. Floor 0.

Traces describe devices unevenly: kineto writes the name, compute capability, SMs and memory; XPlane often only a
vendor, a compute capability and a core count ("Nvidia GPU (cc 8.6, 46 SMs)"); Nsight the name. ``record`` reads
whatever is there into one ``GpuRecord`` (``traceinsight.vocab.peaks.record``, beside the table it looks the part up in);
the part is found by name, or, when the name names no product, by its signature (vendor, compute capability, SM/CU
count and memory where known) when exactly one part in the table has it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


def parse_cc(cc: Any) -> tuple[int, int] | None:
    """The compute capability a string says: ``"7.5"`` / ``"sm_75"`` / ``"75"`` / ``"90"`` / ``"sm_100"`` /
    ``"12.0"`` -> (major, minor); None when it says no version. The one parser: advice tiers, TI007, the peak
    table and the Perfetto export all read compute capabilities through it."""
    if cc is None or isinstance(cc, bool):
        return None
    s = str(cc).strip().lower()
    if not s:
        return None
    m = re.match(r"^(?:sm_?|gfx)?(\d+)\.(\d+)", s)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.match(r"^(?:sm_?)?(\d)(\d)$", s)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.match(r"^(?:sm_?)?(\d{2})(\d)$", s)  # sm_100, sm_120
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.match(r"^(\d+)$", s)  # a bare major ("9")
    if m:
        return int(m.group(1)), 0
    return None


def cc_text(cc: tuple[int, int] | None) -> str | None:
    """(8, 6) -> "8.6" (the form the peak table lists)."""
    return None if cc is None else f"{cc[0]}.{cc[1]}"


#: Vendor spellings, folded to one name per vendor.
_VENDORS = (("NVIDIA", r"nvidia|geforce|quadro|tesla|\brtx\b"), ("AMD", r"\bamd\b|radeon|instinct|\bmi\d{3}"),
            ("Intel", r"intel|gaudi|\bxe\b"))


def vendor_of(vendor: Any, name: Any = None) -> str | None:
    """"NVIDIA", "AMD", "Intel" from a vendor field ("Nvidia", "AMD") or, without one, the device name; None."""
    for text in (vendor, name):
        if not text:
            continue
        for v, rx in _VENDORS:
            if re.search(rx, str(text), re.I):
                return v
    return None


#: Sustained pinned host<->device bandwidth (GB/s) of the PCIe generation NVIDIA GPUs of a compute capability from
#: this one on ship with, newest first: x16 links move about 3/4 of their raw rate in practice (PCIe 3.0: 12 of 16,
#: 4.0: 24 of 32, 5.0: 48 of 64). Hopper and Blackwell are PCIe 5.0, Ampere and Ada 4.0, earlier parts 3.0.
#: Boards with NVLink-C2C to the CPU (GH200, GB200) are faster still: the figure stays a lower bound there.
PCIE_PINNED_GBS: tuple[tuple[tuple[int, int], float], ...] = (((9, 0), 48.0), ((8, 0), 24.0), ((0, 0), 12.0))


def pinned_link_gbs(cc: Any, vendor: Any = None, name: Any = None) -> float:
    """The pinned host<->device bandwidth to expect of a GPU (``PCIE_PINNED_GBS`` by its compute capability; PCIe
    3.0's 12 GB/s for any other vendor, or when the trace says no compute capability: a reference that, if
    anything, is low, so a copy measured against it is never called slower than it is)."""
    parsed = parse_cc(cc)
    if parsed is None or vendor_of(vendor, name) not in (None, "NVIDIA"):
        return PCIE_PINNED_GBS[-1][1]
    return next(g for since, g in PCIE_PINNED_GBS if parsed >= since)


@dataclass(frozen=True)
class GpuRecord:
    """One device: what the trace says, read once, and the part it is (``peak``: the peak table's entry, with its
    dense rates per dtype, bandwidth and sources; None when the table cannot tell)."""

    name: str | None
    vendor: str | None
    cc: tuple[int, int] | None
    sms: int | None  # SMs (NVIDIA) / CUs (AMD)
    memory_bytes: int | None
    peak: Any = None  # traceinsight.vocab.peaks.Peak | None
    identified_by: str = ""  # "name", "signature" or "" (not identified)

    @property
    def part(self) -> str | None:
        return self.peak.gpu if self.peak is not None else None

    @property
    def tensor_cores(self) -> bool | None:
        """True/False when known: NVIDIA from compute capability 7.0 (Volta) on; otherwise whether the identified
        part has tensor/matrix-core rates (fp16, bf16 or tf32) in the peak table; None when nothing says."""
        if self.vendor == "NVIDIA" and self.cc is not None:
            return self.cc >= (7, 0)
        if self.peak is not None:
            return any(k in self.peak.tflops for k in ("fp16", "bf16", "tf32"))
        return None
