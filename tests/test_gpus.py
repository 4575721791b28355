"""The GPU record (``traceinsight.vocab.gpus``, ``traceinsight.vocab.peaks.record``): one compute-capability parser, and the part
identified from the name or, when the name names no product, from (vendor, compute capability, SMs, memory)."""

from __future__ import annotations

import pytest

from traceinsight.vocab.gpus import parse_cc, vendor_of
from traceinsight.vocab.peaks import PEAKS, choose, lookup, record
from traceinsight.render.perfetto import _cc as perfetto_cc
from traceinsight.model.timeline import DeviceInfo

GB = 1_000_000_000
GiB = 1 << 30


@pytest.mark.parametrize("text, want", [
    ("9.0", (9, 0)), ("90", (9, 0)), ("sm_90", (9, 0)), ("sm90", (9, 0)), ("8.6", (8, 6)), ("86", (8, 6)),
    ("sm_100", (10, 0)), ("120", (12, 0)), ("12.0", (12, 0)), ("10.0", (10, 0)), ("7.5", (7, 5)), ("9", (9, 0)),
    ("", None), (None, None), ("gfx90a", None), ("n/a", None),
])
def test_one_compute_capability_parser(text, want):
    assert parse_cc(text) == want
    # every reader of a compute capability agrees with it: the Perfetto export, the peak table's lookup
    assert (perfetto_cc(text, 0), perfetto_cc(text, 1)) == (want if want else (None, None))


def test_the_peak_table_reads_90_as_hopper():
    # "90" once read as compute capability 90.0 in the peak table while TI007 read it as 9: one parser now
    assert lookup("NVIDIA H100 80GB HBM3", "90").gpu == "NVIDIA H100 SXM"
    assert lookup("NVIDIA H100 80GB HBM3", "sm_90").gpu == "NVIDIA H100 SXM"
    assert lookup("NVIDIA H100 80GB HBM3", "8.0") is None  # name and compute capability disagree: no guess


#: (device as a trace describes it) -> the part the table identifies (None: it cannot tell, so no peak).
IDENTIFY = [
    # by name
    (DeviceInfo(0, name="NVIDIA GeForce RTX 3080", compute_capability="8.6", sm_count=68, memory_bytes=10 * GiB), "NVIDIA GeForce RTX 3080"),
    (DeviceInfo(0, name="NVIDIA GeForce RTX 3080", compute_capability="8.6", sm_count=70, memory_bytes=12 * GiB), "NVIDIA GeForce RTX 3080 12GB"),
    (DeviceInfo(0, name="NVIDIA GeForce RTX 3080 Ti", compute_capability="8.6"), "NVIDIA GeForce RTX 3080 Ti"),
    (DeviceInfo(0, name="NVIDIA GeForce RTX 4090 D", compute_capability="8.9"), "NVIDIA GeForce RTX 4090 D"),
    (DeviceInfo(0, name="NVIDIA GeForce RTX 4090", compute_capability="8.9"), "NVIDIA GeForce RTX 4090"),
    (DeviceInfo(0, name="NVIDIA GeForce RTX 2080 Ti", compute_capability="7.5"), "NVIDIA GeForce RTX 2080 Ti"),
    (DeviceInfo(0, name="NVIDIA GeForce RTX 5090", compute_capability="12.0"), "NVIDIA GeForce RTX 5090"),
    (DeviceInfo(0, name="NVIDIA RTX A6000", compute_capability="8.6"), "NVIDIA RTX A6000"),
    (DeviceInfo(0, name="NVIDIA A40", compute_capability="8.6"), "NVIDIA A40"),
    (DeviceInfo(0, name="NVIDIA A10", compute_capability="8.6"), "NVIDIA A10"),
    (DeviceInfo(0, name="NVIDIA RTX 6000 Ada Generation", compute_capability="8.9"), "NVIDIA RTX 6000 Ada Generation"),
    (DeviceInfo(0, name="NVIDIA L4", compute_capability="8.9"), "NVIDIA L4"),
    (DeviceInfo(0, name="NVIDIA L40S", compute_capability="8.9"), "NVIDIA L40S"),
    (DeviceInfo(0, name="NVIDIA H20", compute_capability="9.0"), "NVIDIA H20"),
    (DeviceInfo(0, name="NVIDIA GH200 480GB", compute_capability="9.0", memory_bytes=102 * GB), "NVIDIA GH200 96GB"),
    (DeviceInfo(0, name="NVIDIA B200", compute_capability="10.0"), "NVIDIA B200"),
    (DeviceInfo(0, name="AMD Instinct MI325X", compute_capability="9.4"), "AMD Instinct MI325X"),
    # by signature: XPlane's synthesised names, ROCm's generic one
    (DeviceInfo(0, name="Nvidia GPU (cc 8.6, 46 SMs)", compute_capability="8.6", sm_count=46, vendor="Nvidia"), "NVIDIA GeForce RTX 3070"),
    (DeviceInfo(0, name="Nvidia GPU (cc 8.9, 46 SMs)", compute_capability="8.9", sm_count=46, vendor="Nvidia"), "NVIDIA GeForce RTX 4070"),
    (DeviceInfo(0, name="Nvidia GPU (cc 9.0, 78 SMs)", compute_capability="9.0", sm_count=78, vendor="Nvidia"), "NVIDIA H20"),
    (DeviceInfo(0, name="AMD Radeon Graphics", compute_capability="9.4", sm_count=304, memory_bytes=256 * GiB, vendor="AMD"), "AMD Instinct MI325X"),
    (DeviceInfo(0, name="AMD Radeon Graphics", compute_capability="9.4", sm_count=304, memory_bytes=192 * GiB, vendor="AMD"), "AMD Instinct MI300X"),
    (DeviceInfo(0, name=None, compute_capability="8.6", sm_count=46, vendor="NVIDIA"), "NVIDIA GeForce RTX 3070"),
    # signatures that more than one part shares, or that say too little: no peak, never a guess
    (DeviceInfo(0, name="Nvidia GPU (cc 8.6, 84 SMs)", compute_capability="8.6", sm_count=84, memory_bytes=48 * GiB, vendor="Nvidia"), None),  # A40 or RTX A6000
    (DeviceInfo(0, name="Nvidia GPU (cc 8.0, 108 SMs)", compute_capability="8.0", sm_count=108, vendor="Nvidia"), None),  # A100 40 or 80 GB
    (DeviceInfo(0, name="Nvidia GPU (cc 8.6, 46 SMs)", compute_capability="8.6", sm_count=46, memory_bytes=24 * GiB, vendor="Nvidia"), None),  # no 24 GB 3070
    (DeviceInfo(0, name="Nvidia GPU (cc 9.0, 110 SMs)", compute_capability="9.0", sm_count=110, vendor="Nvidia"), None),  # an MI250X's signature, but NVIDIA
    (DeviceInfo(0, name="NVIDIA GeForce RTX 3080", compute_capability="8.6"), None),  # 10 or 12 GB: memory not recorded
]


@pytest.mark.parametrize("device, part", IDENTIFY, ids=[f"{d.name}-{d.sm_count}-{d.memory_bytes}" for d, _ in IDENTIFY])
def test_gpu_identification_table(device, part):
    r = record(device)
    assert r.part == part
    if part is not None:
        assert r.identified_by == ("signature" if not device.name or "GPU (cc" in device.name or "Radeon" in device.name else "name")
        # the efficiency view takes the same part's dense peaks
        assert choose([device]).gpu == part and choose([device]).known


def test_the_record_reads_each_fact_once():
    r = record(DeviceInfo(0, name="Nvidia GPU (cc 8.6, 46 SMs)", compute_capability="86", sm_count=46, vendor="Nvidia"))
    assert (r.vendor, r.cc, r.sms, r.tensor_cores) == ("NVIDIA", (8, 6), 46, True)
    assert r.peak.tflops["bf16"] == 40.6 and r.peak.tflops["fp32"] == 20.3  # RTX 3070: FP32-accumulate tensor rate
    assert record(DeviceInfo(0, name="Tesla P100-PCIE-16GB", compute_capability="6.0")).tensor_cores is False
    assert vendor_of("Nvidia") == vendor_of(None, "NVIDIA GeForce RTX 3070") == "NVIDIA"
    assert vendor_of("AMD") == vendor_of(None, "AMD Instinct MI300X") == "AMD"


@pytest.mark.parametrize("part", [
    "NVIDIA GeForce RTX 2080 Ti", "NVIDIA GeForce RTX 3070", "NVIDIA GeForce RTX 3080", "NVIDIA GeForce RTX 3090",
    "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090 D", "NVIDIA GeForce RTX 5090", "NVIDIA A10", "NVIDIA A40",
    "NVIDIA RTX A6000", "NVIDIA RTX 6000 Ada Generation", "NVIDIA L4", "NVIDIA L40S", "NVIDIA H20", "NVIDIA GH200 96GB",
    "NVIDIA B200", "AMD Instinct MI250X (one GCD)", "AMD Instinct MI300X", "AMD Instinct MI325X",
])
def test_the_parts_people_profile_on_have_dense_peaks_with_sources(part):
    (p,) = [p for p in PEAKS if p.gpu == part]
    assert p.source.startswith("https://") and p.bandwidth_gbs > 0 and p.units
    assert p.tflops["fp32"] > 0 and (p.tflops.get("bf16") or p.tflops.get("fp16"))
    for dtype, sparse in p.sparse_tflops.items():  # dense, never the 2:4-sparse headline
        assert sparse / p.tflops[dtype] == pytest.approx(2.0, rel=0.02)
