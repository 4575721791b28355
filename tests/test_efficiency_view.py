"""The efficiency view (``traceinsight.derive.efficiency``) row by row on planted traces: each kernel class's time, FLOPs,
bytes, achieved rates against the datasheet peak, roofline position, MFU per step and over the trace, the top ops,
TF32 detection, the notes that say what is missing, and the JSON block. Every figure is worked out by hand from
what was planted (A100 80GB SXM: 312 TFLOP/s bf16 dense, 19.5 fp32, 156 tf32, 2039 GB/s)."""

from __future__ import annotations

import pandas as pd
import pytest

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.nsys_writer import NsysTrace
from traceinsight.derive.derived import Derived
from traceinsight.derive.efficiency import (EfficiencySettings, _compact_dims, _dominant_dtype,
                                     _window_ns)
from traceinsight.ingest import kineto
from traceinsight.vocab.peaks import UNKNOWN_PEAK
from traceinsight.render.efficiency_view import headline, step_line
from traceinsight.model.timeline import Timeline

A100 = "NVIDIA A100-SXM4-80GB"
BF16, F32 = "c10::BFloat16", "float"
BW = 2039.0


def _eff(path, **settings):
    return Derived(traceinsight.load(path), efficiency=EfficiencySettings(**settings) if settings else None).efficiency


def _mm(t, at, m, k, n, dur_us, dtype=BF16, kernel="ampere_bf16_s16816gemm_bf16_128x128", name="aten::mm"):
    op = t.cpu_op(name, at, 20, args={"Input Dims": [[m, k], [k, n]], "Input type": [dtype, dtype], "Concrete Inputs": ["", ""]})
    t.kernel(kernel, at + 40, dur_us, launch_us=at + 5, op=op)
    return op


def _add(t, at, n, dur_us, dtype=BF16):
    op = t.cpu_op("aten::add", at, 20, args={"Input Dims": [[n], [n], []], "Input type": [dtype, dtype, "Scalar"],
                                             "Concrete Inputs": ["", "", "1"]})
    t.kernel("vectorized_elementwise_kernel", at + 40, dur_us, launch_us=at + 5, op=op)


def _training(tmp_path, steps=2):
    """Per 1 ms step: a 1024³ bf16 GEMM (100 µs), a 2^20-element bf16 add (10 µs), a 1 MiB copy (20 µs)."""
    t = KinetoTrace(device_name=A100)
    for s in range(steps):
        t0 = s * 1000
        t.step(s + 1, t0, 1000)
        _mm(t, t0 + 10, 1024, 1024, 1024, 100.0)
        _add(t, t0 + 200, 1 << 20, 10.0)
        t.memcpy("HtoD", t0 + 400, 20.0, nbytes=1 << 20)
    return t.write(tmp_path / "t.json")


def test_classes_rates_roofline_and_mfu(tmp_path):
    e = _eff(_training(tmp_path))
    assert (e.flops_source, e.shapes_recorded, e.available, e.mfu_dtype) == ("shapes", True, True, "bf16")
    assert e.gpu_time_ns == 2 * 130_000
    c = e.classes.set_index("cls")
    assert list(c.index) == ["gemm", "elementwise", "copy"]  # the order of work_classes.CLASSES
    g = c.loc["gemm"]
    flops = 2 * 2 * 1024**3  # two steps
    nbytes = 2 * 2 * 3 * 1024**2
    assert (g["label"], g["time_ns"], g["modelled_ns"], g["flops"], g["bytes"], g["dtype"]) == ("GEMM", 200_000, 200_000, flops, nbytes, "bf16")
    assert g["share_pct"] == pytest.approx(100 * 200 / 260)
    assert g["achieved_tflops"] == pytest.approx(flops / 200e-6 / 1e12)
    assert g["achieved_gbs"] == pytest.approx(nbytes / 200e-6 / 1e9)
    assert g["peak_tflops"] == 312.0 and g["peak_label"] == "312 TFLOP/s bf16 dense, NVIDIA A100 80GB SXM datasheet"
    assert g["pct_of_peak"] == pytest.approx(100 * flops / 200e-6 / 1e12 / 312)
    assert g["pct_of_bandwidth"] == pytest.approx(100 * nbytes / 200e-6 / 1e9 / BW)
    assert g["intensity"] == pytest.approx(flops / nbytes) and g["ridge"] == pytest.approx(312e12 / (BW * 1e9))
    assert g["bound"] == "compute"  # 341 FLOP/byte over a ridge of 153
    a = c.loc["elementwise"]
    n = 1 << 20
    assert (a["time_ns"], a["flops"], a["bytes"], a["dtype"]) == (20_000, 2 * n, 2 * 2 * 3 * n, "bf16")
    assert pd.isna(a["peak_tflops"]) and pd.isna(a["pct_of_peak"])
    assert a["peak_label"] == "2039 GB/s, NVIDIA A100 80GB SXM"
    assert a["achieved_gbs"] == pytest.approx(2 * 2 * 3 * n / 20e-6 / 1e9)
    assert a["pct_of_bandwidth"] == pytest.approx(100 * 2 * 2 * 3 * n / 20e-6 / 1e9 / BW)
    assert a["intensity"] == pytest.approx(1 / 6) and a["ridge"] == pytest.approx(312e12 / (BW * 1e9)) and a["bound"] == "memory"
    cp = c.loc["copy"]
    assert (cp["time_ns"], cp["modelled_ns"], cp["flops"], cp["bytes"]) == (40_000, 40_000, 0.0, 2 * (1 << 20))
    # host-to-device copies run over the host link (PCIe), not in device memory: not a % of DRAM bandwidth
    assert pd.isna(cp["achieved_tflops"]) and pd.isna(cp["intensity"]) and cp["bound"] == "host link"
    assert cp["achieved_gbs"] == pytest.approx(2 * (1 << 20) / 40e-6 / 1e9) == pytest.approx(cp["link_gbs"])
    assert pd.isna(cp["pct_of_bandwidth"]) and pd.isna(cp["device_gbs"])
    # MFU: matrix FLOPs of each step over its duration, against the bf16 peak
    assert e.steps.to_dict("records") == [
        {"rank": 0, "step": s, "dur_ns": 1_000_000, "flops": 2 * 1024**3, "tflops": pytest.approx(2 * 1024**3 / 1e-3 / 1e12),
         "mfu_pct": pytest.approx(100 * 2 * 1024**3 / 1e-3 / 1e12 / 312)} for s in (1, 2)]
    assert e.model_flops == flops and e.mfu_pct == pytest.approx(100 * 2 * 1024**3 / 1e-3 / 1e12 / 312)
    assert e.peak_label() == "312 TFLOP/s bf16 dense, NVIDIA A100 80GB SXM datasheet"
    assert e.peak_label("fp32") == "19.5 TFLOP/s fp32 dense, NVIDIA A100 80GB SXM datasheet"
    assert e.notes == [] and e.counts.assumed == {}
    assert list(e.kernel_cls) == ["gemm", "elementwise"] * 2


def test_the_json_block(tmp_path):
    e = _eff(_training(tmp_path))
    d = e.to_dict()
    mfu = 100 * 2 * 1024**3 / 1e-3 / 1e12 / 312
    assert d["flops_source"] == "shapes" and d["shapes_recorded"] is True and d["gpu_time_ns"] == 260_000
    assert d["peak"] == {"gpu": "NVIDIA A100 80GB SXM", "tflops": e.peak.tflops, "bandwidth_gbs": BW, "source": e.peak.source,
                         "dense": True, "known": True, "reason": None}
    assert d["model_flops"] == 4 * 1024**3 and d["mfu_pct"] == round(mfu, 3) and d["mfu_dtype"] == "bf16"
    assert d["mfu_peak"] == "312 TFLOP/s bf16 dense, NVIDIA A100 80GB SXM datasheet"
    gemm = d["classes"][0]
    assert gemm["cls"] == "gemm" and gemm["time_ns"] == 200_000 and type(gemm["time_ns"]) is int
    assert gemm["pct_of_peak"] == round(100 * 4 * 1024**3 / 200e-6 / 1e12 / 312, 3) and gemm["dtype"] == "bf16"
    assert d["classes"][2]["intensity"] is None
    assert d["steps"] == [{"rank": 0, "step": s, "dur_ns": 1_000_000, "flops": 2 * 1024**3,
                           "tflops": round(2 * 1024**3 / 1e-3 / 1e12, 3), "mfu_pct": round(mfu, 3)} for s in (1, 2)]
    assert d["top_ops"] == [{"op": "aten::mm", "cls": "gemm", "input_dims": "[[1024, 1024], [1024, 1024]]", "dtype": "bf16",
                             "count": 2, "gflop": round(2 * 1024**3 / 1e9, 4), "kernel_ns": 200_000,
                             "tflops": round(4 * 1024**3 / 200e-6 / 1e12, 4),
                             "pct_of_peak": round(100 * 4 * 1024**3 / 200e-6 / 1e12 / 312, 4)}]
    assert d["assumptions"] == {} and d["hardware"] is None and d["notes"] == []


def test_top_ops_group_by_shapes_and_rank_by_kernel_time(tmp_path, monkeypatch):
    import traceinsight.derive.efficiency as eff

    t = KinetoTrace(device_name=A100)
    t.step(1, 0, 5000)
    _mm(t, 10, 512, 512, 512, 50.0)
    _mm(t, 200, 1024, 1024, 1024, 100.0)
    _mm(t, 400, 512, 512, 512, 70.0)
    _mm(t, 600, 256, 256, 256, 10.0)
    monkeypatch.setattr(eff, "TOP_OPS", 2)
    top = _eff(t.write(tmp_path / "t.json")).top_ops
    assert top["input_dims"].tolist() == ["[[512, 512], [512, 512]]", "[[1024, 1024], [1024, 1024]]"]
    assert top["count"].tolist() == [2, 1] and top["kernel_ns"].tolist() == [120_000, 100_000]
    assert top["gflop"].tolist() == pytest.approx([2 * 512**3 / 1e9, 2 * 1024**3 / 1e9])
    assert top["tflops"].tolist() == pytest.approx([4 * 512**3 / 120e-6 / 1e12, 2 * 1024**3 / 100e-6 / 1e12])


def test_compact_dims():
    assert _compact_dims("[[8944, 1024],\n [1024, 1024], [], []]") == "[[8944, 1024], [1024, 1024]]"
    assert _compact_dims("not json") == "not json" and _compact_dims("x" * 300) == "x" * 160
    assert _compact_dims("3") == "3" and len(_compact_dims(str([[1] * 100]))) == 160


def test_fp32_matrix_math_on_tensor_cores_is_measured_against_tf32(tmp_path):
    t = KinetoTrace(device_name=A100)
    t.step(1, 0, 2000)
    _mm(t, 10, 1024, 1024, 1024, 300.0, dtype=F32, kernel="ampere_tf32_s1688gemm_tf32_128x128")
    _mm(t, 400, 1024, 1024, 1024, 100.0, dtype=F32, kernel="ampere_sgemm_128x64_nn")  # a quarter of the time on CUDA cores
    e = _eff(t.write(tmp_path / "t.json"))
    g = e.classes.set_index("cls").loc["gemm"]
    assert (g["dtype"], g["peak_tflops"], e.mfu_dtype) == ("tf32", 156.0, "tf32")
    assert e.mfu_pct == pytest.approx(100 * 4 * 1024**3 / 2e-3 / 1e12 / 156)
    assert e.top_ops["pct_of_peak"].iloc[0] == pytest.approx(100 * 4 * 1024**3 / 400e-6 / 1e12 / 156)
    t = KinetoTrace(device_name=A100)  # half and half: TF32 wins the tie
    t.step(1, 0, 2000)
    _mm(t, 10, 1024, 1024, 1024, 100.0, dtype=F32, kernel="ampere_tf32_s1688gemm_tf32_128x128")
    _mm(t, 400, 1024, 1024, 1024, 100.0, dtype=F32, kernel="ampere_sgemm_128x64_nn")
    assert _eff(t.write(tmp_path / "u.json")).mfu_dtype == "tf32"
    t = KinetoTrace(device_name=A100)  # mostly CUDA cores: plain FP32
    t.step(1, 0, 3000)
    _mm(t, 10, 1024, 1024, 1024, 990.0, dtype=F32, kernel="ampere_tf32_s1688gemm_tf32_128x128")
    _mm(t, 1100, 1024, 1024, 1024, 1010.0, dtype=F32, kernel="ampere_sgemm_128x64_nn")
    e = _eff(t.write(tmp_path / "v.json"))
    assert e.mfu_dtype == "fp32" and e.classes.set_index("cls").loc["gemm", "peak_tflops"] == 19.5
    assert e.top_ops["pct_of_peak"].iloc[0] == pytest.approx(100 * 4 * 1024**3 / 2000e-6 / 1e12 / 19.5)
    t = KinetoTrace(device_name=A100)  # mostly CUDA-core time, but faster than FP32 CUDA cores can go (21.5 > 19.5)
    t.step(1, 0, 2000)
    _mm(t, 10, 1024, 1024, 1024, 99.0, dtype=F32, kernel="ampere_tf32_s1688gemm_tf32_128x128")
    _mm(t, 400, 1024, 1024, 1024, 101.0, dtype=F32, kernel="ampere_sgemm_128x64_nn")
    e = _eff(t.write(tmp_path / "w.json"))
    assert e.mfu_dtype == "tf32" and e.classes.set_index("cls").loc["gemm", "peak_tflops"] == 156.0  # never above 100 % of a peak


def test_user_flops_per_step_and_no_steps(tmp_path):
    t = KinetoTrace(device_name=A100)
    for s in range(3):
        t.step(s + 1, s * 1000, 1000 - (s == 2) * 500)
        _mm(t, s * 1000 + 10, 64, 64, 64, 100.0)
    e = _eff(t.write(tmp_path / "t.json"), model_flops_per_step=1e9)
    assert e.flops_source == "user" and e.mfu_dtype == "bf16"
    assert e.steps["flops"].tolist() == [1e9] * 3 and e.steps["dur_ns"].tolist() == [1_000_000, 1_000_000, 500_000]
    assert e.steps["mfu_pct"].tolist() == pytest.approx([100 * 1e9 / 1e-3 / 1e12 / 312] * 2 + [100 * 1e9 / 0.5e-3 / 1e12 / 312])
    assert e.model_flops == 3e9 and e.mfu_pct == pytest.approx(100 * 3e9 / 2.5e-3 / 1e12 / 312)
    # without step markers: one step's FLOPs over the whole GPU window, said in a note
    t = KinetoTrace(device_name=A100)
    _mm(t, 10, 64, 64, 64, 100.0)
    _mm(t, 500, 64, 64, 64, 100.0)
    e = _eff(t.write(tmp_path / "u.json"), model_flops_per_step=1e9)
    window = (500 + 40 + 100) - (10 + 40)
    assert e.model_flops == 1e9 and e.mfu_pct == pytest.approx(100 * 1e9 / (window * 1e-6) / 1e12 / 312)
    assert e.notes == ["the trace has no step markers: MFU is the given FLOPs for one step over the whole GPU window"]
    assert e.steps.empty
    e = _eff(t.write(tmp_path / "v.json"), model_flops_per_step=1e9 + 0.25)
    assert e.to_dict()["model_flops"] == 1_000_000_000.0  # whole FLOPs


def test_shapes_without_steps_use_the_gpu_window(tmp_path):
    t = KinetoTrace(device_name=A100)
    _mm(t, 10, 1024, 1024, 1024, 100.0)
    _mm(t, 300, 1024, 1024, 1024, 100.0)
    e = _eff(t.write(tmp_path / "t.json"))
    window = (300 + 40 + 100) - (10 + 40)
    assert e.steps.empty and e.mfu_pct == pytest.approx(100 * 4 * 1024**3 / (window * 1e-6) / 1e12 / 312)


def test_steps_without_matrix_work_do_not_dilute_mfu(tmp_path):
    t = KinetoTrace(device_name=A100)
    t.step(1, 0, 1000)
    _mm(t, 10, 1024, 1024, 1024, 100.0)
    t.step(2, 1000, 3000)
    t.kernel("vectorized_elementwise_kernel", 1100, 100)
    e = _eff(t.write(tmp_path / "t.json"))
    assert e.steps["flops"].tolist() == [2 * 1024**3, 0.0] and e.steps["mfu_pct"].iloc[1] == 0.0
    assert e.mfu_pct == pytest.approx(100 * 2 * 1024**3 / 1e-3 / 1e12 / 312)  # over step 1 only


def test_matrix_time_not_tied_to_an_op_is_the_coverage(tmp_path):
    t = KinetoTrace(device_name=A100)
    t.step(1, 0, 2000)
    _mm(t, 10, 1024, 1024, 1024, 90.0)
    t.kernel("ampere_bf16_s16816gemm_bf16_64x64", 500, 10.0)  # a GEMM kernel no op launched: 10 % of GEMM time
    e = _eff(t.write(tmp_path / "t.json"))
    assert e.notes == []  # 90 % covered: enough for no note
    assert e.coverage["pct"] == pytest.approx(90.0) and (e.coverage["matrix_time_ns"], e.coverage["covered_ns"]) == (100_000, 90_000)
    assert "(shapes cover 90 % of matrix GPU time)." in headline(e)  # every MFU carries its coverage
    t.kernel("ampere_bf16_s16816gemm_bf16_64x64", 700, 0.01)
    e = _eff(t.write(tmp_path / "u.json"))
    assert e.notes == ["shapes cover 90 % of matrix GPU time: the rest is in kernels not tied to an op with recorded shapes "
                       "(no External id or launch record, a graph replay, or an op without a FLOPs model)"]
    assert e.to_dict()["shape_coverage_pct"] == pytest.approx(100 * 90 / 100.01, abs=1e-3)


def _unlinked_mm(t, at, m, k, n, kernel_at, dur_us, dtype=BF16):
    """An aten::mm whose launch is recorded but whose kernel the trace does not tie to it (no correlation)."""
    t.cpu_op("aten::mm", at, 20, args={"Input Dims": [[m, k], [k, n]], "Input type": [dtype, dtype], "Concrete Inputs": ["", ""]})
    t.runtime("cudaLaunchKernel", at + 5, 3)
    t.kernel("ampere_bf16_s16816gemm_bf16_128x128", kernel_at, dur_us)


def test_flops_count_every_leaf_op_with_shapes_linked_or_not(tmp_path):
    t = KinetoTrace(device_name=A100)
    t.step(1, 0, 2000)
    _mm(t, 10, 1024, 1024, 1024, 100.0)  # linked: 2.15 GFLOP in 100 µs
    _unlinked_mm(t, 300, 2048, 1024, 1024, 400, 100.0)  # launched on the GPU, kernel not linked: 4.3 GFLOP
    t.cpu_op("aten::mm", 700, 20, args={"Input Dims": [[512, 512], [512, 512]], "Input type": [BF16, BF16],
                                        "Concrete Inputs": ["", ""]})  # no launch, no kernel: ran on the host
    e = _eff(t.write(tmp_path / "t.json"))
    linked, unlinked = 2 * 1024**3, 2 * 2048 * 1024 * 1024
    assert e.model_flops == pytest.approx(linked + unlinked)  # the host op's FLOPs are not the GPU's
    g = e.classes.set_index("cls").loc["gemm"]
    assert g["flops"] == pytest.approx(linked + unlinked) and g["modelled_flops"] == pytest.approx(linked)
    assert g["achieved_tflops"] == pytest.approx(linked / 100e-6 / 1e12)  # the rate: the linked part only
    assert (e.coverage["unlinked_ops"], e.coverage["unlinked_flops"]) == (1, pytest.approx(unlinked))
    assert e.coverage["pct"] == pytest.approx(50.0) and e.mfu_pct is not None  # 50 %: still enough for an MFU
    assert any(n.startswith("1 matrix op(s) with shapes launched no kernel the trace links to them; their 4.3 GFLOP") for n in e.notes)
    assert e.steps["flops"].tolist() == [pytest.approx(linked + unlinked)]


def test_below_half_coverage_no_mfu_is_headlined(tmp_path):
    t = KinetoTrace(device_name=A100)
    t.step(1, 0, 2000)
    _mm(t, 10, 1024, 1024, 1024, 100.0)
    for i in range(9):  # 900 µs of GEMM kernels no op launched (a graph replay): shapes cover 10 %
        t.kernel("ampere_bf16_s16816gemm_bf16_128x128", 300 + i * 110, 100.0)
    e = _eff(t.write(tmp_path / "t.json"))
    assert e.coverage["pct"] == pytest.approx(10.0)
    assert e.mfu_pct is None and e.steps["mfu_pct"].isna().all() and step_line(e) == ""
    rate = 2 * 1024**3 / 100e-6 / 1e12
    assert headline(e) == (f"MFU unknown: shapes cover 10 % of matrix GPU time (100.0 µs of 1.00 ms), under the 50 % an MFU "
                           f"needs; on the covered part: GEMM {rate:.1f} TFLOP/s ({100 * rate / 312:.1f} % of peak). For MFU, "
                           "record with `torch.profiler.profile(..., record_shapes=True)` outside graph replays, or pass "
                           "--model-flops-per-step.")
    d = e.to_dict()
    assert d["mfu_pct"] is None and d["mfu_withheld"].startswith("MFU unknown: shapes cover 10 %")
    assert d["coverage"]["pct"] == pytest.approx(10.0) and d["coverage"]["mfu_min_pct"] == 50.0
    # the user's FLOPs per step make an MFU whatever the shapes cover
    e = _eff(tmp_path / "t.json", model_flops_per_step=1e12)
    assert e.mfu_pct is not None and e.coverage is None


def test_flops_without_any_tied_matrix_time_give_no_mfu(tmp_path):
    t = KinetoTrace(device_name=A100)
    t.step(1, 0, 2000)
    t.cpu_op("aten::mm", 10, 20, args={"Input Dims": [[1024, 1024], [1024, 1024]], "Input type": [BF16, BF16], "Concrete Inputs": ["", ""]})
    t.runtime("cudaGraphLaunch", 15, 3)
    t.kernel("graph_node_17", 100, 500.0)  # a replayed kernel, its op unknown and its name saying nothing
    e = _eff(t.write(tmp_path / "t.json"))
    assert e.model_flops == pytest.approx(2 * 1024**3) and e.coverage["pct"] is None and e.mfu_pct is None
    assert headline(e).startswith("MFU unknown: no GEMM/convolution/attention kernel time is tied to an op with shapes")


def test_what_is_missing_is_said(tmp_path):
    t = KinetoTrace(device_name=A100)  # shapes recorded, but only elementwise work
    t.step(1, 0, 1000)
    _add(t, 10, 1 << 20, 10.0)
    e = _eff(t.write(tmp_path / "t.json"))
    assert e.flops_source == "none" and e.mfu_pct is None and e.mfu_dtype is None and not e.available
    assert e.notes == ["shapes are recorded, but no matmul/convolution/attention op with a FLOPs model ran on the GPU"]
    assert e.to_dict()["mfu_peak"] is None and e.top_ops is None
    t = KinetoTrace(device_name=A100)
    t.step(1, 0, 1000)
    op = t.cpu_op("aten::mm", 10, 20)  # no shapes
    t.kernel("ampere_sgemm_128x64_nn", 40, 100, launch_us=15, op=op)
    e = _eff(t.write(tmp_path / "u.json"))
    assert e.notes == [kineto.FORMAT.no_flops] and not e.shapes_recorded
    t = KinetoTrace(device_name="NVIDIA GeForce GTX 480")
    t.step(1, 0, 1000)
    _mm(t, 10, 1024, 1024, 1024, 100.0)
    e = _eff(t.write(tmp_path / "v.json"))
    assert e.notes == [f"{UNKNOWN_PEAK} (NVIDIA GeForce GTX 480 is not in the peak table)"] and e.mfu_pct is None
    assert e.steps["mfu_pct"].tolist() == [None] and e.steps["tflops"].tolist() == pytest.approx([2 * 1024**3 / 1e-3 / 1e12])
    g = e.classes.set_index("cls").loc["gemm"]
    assert g["peak_label"] == UNKNOWN_PEAK and g["ridge"] is None and g["bound"] is None


def test_nsys_without_flops_says_what_to_pass(tmp_path):
    t = NsysTrace()
    t.step(0, 0, 10_000_000)
    t.kernel("sm90_xmma_gemm_bf16bf16", 100_000, 9_000_000)
    e = _eff(t.write(tmp_path / "t.sqlite"))
    assert e.flops_source == "none" and e.counts is None and e.steps.empty
    assert e.notes[0] == ("Nsight Systems records no tensor shapes, so FLOPs per kernel cannot be known from the trace; pass "
                          "--model-flops-per-step for MFU")


def test_a_user_bandwidth_alone_keeps_the_table_flops(tmp_path):
    e = _eff(_training(tmp_path), peak_bandwidth_gbs=1000.0)
    c = e.classes.set_index("cls")
    assert c.loc["gemm", "peak_tflops"] == 312.0 and c.loc["gemm", "ridge"] == pytest.approx(312e12 / 1e12)
    assert c.loc["elementwise", "peak_label"] == "1000 GB/s, NVIDIA A100 80GB SXM"
    e = _eff(_training(tmp_path), peak_tflops=100.0, peak_bandwidth_gbs=1000.0)
    assert e.classes.set_index("cls").loc["elementwise", "peak_label"] == "1000 GB/s, given"


def test_window_and_dominant_dtype_helpers():
    act = pd.DataFrame({"start_ns": [50, 10, 30], "dur_ns": [5, 10, 40]})
    assert _window_ns(act) == 70 - 10 and _window_ns(act.iloc[:0]) == 0
    ops = pd.DataFrame({"dtype": ["bf16", "fp32", "bf16", ""], "flops": [1.0, 3.0, 1.0, 9.0], "bytes": [0, 0, 0, 0]})
    assert _dominant_dtype(ops) == "fp32"  # by FLOPs, unknown dtypes aside
    ops = pd.DataFrame({"dtype": ["bf16", "fp32", ""], "flops": [0.0, 0.0, 5.0], "bytes": [10, 5, 100]})
    assert _dominant_dtype(ops) == "bf16"  # no FLOPs: by bytes
    assert _dominant_dtype(pd.DataFrame({"dtype": [""], "flops": [0.0], "bytes": [1]})) is None
    assert _dominant_dtype(ops.iloc[:0]) is None and _dominant_dtype(None) is None


def _metrics_trace(tmp_path):
    """GPU-metrics samples every 10 µs over two steps: a GEMM (SM 90 %) in step 0, an elementwise kernel (SM 60 %)
    in step 1, idle otherwise (SM 0 %)."""
    t = NsysTrace()
    t.step(0, 0, 500_000)
    t.step(1, 500_000, 500_000)
    t.kernel("sm80_xmma_gemm_bf16bf16", 100_000, 200_000)
    t.kernel("void at::native::vectorized_elementwise_kernel<4>", 600_000, 100_000)
    for i in range(0, 1_000_000, 10_000):
        gemm, ew = 100_000 <= i < 300_000, 600_000 <= i < 700_000
        t.gpu_metrics(i, {"SMs Active [Throughput %]": 90 if gemm else (60 if ew else 0)})
    return t.write(tmp_path / "m.sqlite")


def test_hardware_samples_per_scope(tmp_path):
    e = _eff(_metrics_trace(tmp_path))
    hw = {(r["scope"], r["metric"]): (r["mean_pct"], r["samples"]) for r in e.hardware.to_dict("records")}
    sm = next(m for s, m in hw if s == "all")
    assert hw[("all", sm)] == (pytest.approx((20 * 90 + 10 * 60) / 100), 100)
    assert hw[("busy", sm)] == (pytest.approx((20 * 90 + 10 * 60) / 30), 30)
    assert hw[("GEMM", sm)] == (90, 20) and hw[("elementwise/reduction", sm)] == (60, 10)
    assert hw[("step 0", sm)] == (pytest.approx(20 * 90 / 50), 50) and hw[("step 1", sm)] == (pytest.approx(10 * 60 / 50), 50)
    assert len(hw) == 6
    assert e.notes[-1] == "GPU-metrics samples are present: SM and tensor-core activity below are the hardware's own measure"
    d = e.to_dict()["hardware"]
    assert {"scope": "GEMM", "metric": sm, "mean_pct": 90.0, "samples": 20} in d


def test_hardware_samples_at_the_edges(tmp_path):
    """A sample belongs to a kernel or a step while it runs: not before it, not at its end."""
    t = NsysTrace()
    t.step(0, 100_000, 400_000)
    t.kernel("sm80_xmma_gemm_bf16bf16", 200_000, 100_000)
    for at, v in ((50_000, 10), (200_000, 90), (300_000, 20), (500_000, 30)):
        t.gpu_metrics(at, {"SMs Active [Throughput %]": v})
    e = _eff(t.write(tmp_path / "edges.sqlite"))
    hw = {(r["scope"]): (r["mean_pct"], r["samples"]) for r in e.hardware.to_dict("records")}
    assert hw == {"all": (37.5, 4), "busy": (90.0, 1), "GEMM": (90.0, 1), "step 0": (55.0, 2)}
    t = NsysTrace()  # no sampling: no hardware block
    t.kernel("sm80_xmma_gemm_bf16bf16", 200_000, 100_000)
    assert _eff(t.write(tmp_path / "none.sqlite")).hardware is None


def test_a_kernel_no_op_launched_is_classed_by_its_own_name(tmp_path):
    """Shapes tie the GEMM kernel to its op; an elementwise kernel launched outside any op keeps the class its
    name says (not the class of some op), so the GEMM row holds only the GEMM's 100 µs."""
    t = KinetoTrace(device_name=A100)
    t.step(1, 0, 1000)
    _mm(t, 10, 1024, 1024, 1024, 100.0)
    t.kernel("vectorized_elementwise_kernel", 300, 10.0, launch_us=290)
    e = _eff(t.write(tmp_path / "t.json"))
    c = e.classes.set_index("cls")
    assert c["time_ns"].to_dict() == {"gemm": 100_000, "elementwise": 10_000}
    assert list(e.kernel_cls) == ["gemm", "elementwise"]


def test_a_matrix_class_without_modelled_ops_has_no_ridge(tmp_path):
    """GEMM time whose kernels no op with shapes launched has no dtype, so no peak to place it against: no ridge
    point and no bound (the bf16 elementwise class beside it keeps its ridge, and is memory-bound; a copy is placed
    against the FP32 peak)."""
    t = KinetoTrace(device_name=A100)
    t.step(1, 0, 1000)
    _add(t, 10, 1 << 20, 10.0)
    t.kernel("ampere_bf16_s16816gemm_bf16_128x128", 300, 100.0, launch_us=290)
    t.memcpy("HtoD", 500, 20.0, nbytes=1 << 20)
    rows = {r["cls"]: r for r in _eff(t.write(tmp_path / "t.json")).to_dict()["classes"]}
    g = rows["gemm"]
    assert (g["time_ns"], g["modelled_ns"], g["dtype"], g["ridge"], g["bound"]) == (100_000, 0, None, None, None)
    assert rows["elementwise"]["bound"] == "memory" and rows["elementwise"]["ridge"] == round(312e12 / (BW * 1e9), 3)  # its bf16 peak
    # copies have no dtype of their own: their ridge is against the FP32 peak; an HtoD copy is bound by the host link
    assert rows["copy"]["bound"] == "host link" and rows["copy"]["ridge"] == round(19.5e12 / (BW * 1e9), 3)


def test_copies_in_device_memory_are_measured_against_its_bandwidth(tmp_path):
    """Copies split by where their bytes go: a 4 MiB device-to-device copy in 10 µs is device-memory work (419 GB/s,
    a share of DRAM bandwidth), a 1 MiB host-to-device one in 100 µs crosses the host link (10.5 GB/s, no share of
    DRAM bandwidth). The device side holds less time, so the row is bound by the host link and its % of bandwidth
    is left out (the device's smaller part would stand for the row)."""
    t = KinetoTrace(device_name=A100)
    t.step(1, 0, 1000)
    _add(t, 10, 1 << 20, 10.0)
    t.memcpy("DtoD", 300, 10.0, nbytes=4 << 20)
    t.memcpy("HtoD", 500, 100.0, nbytes=1 << 20)
    cp = {r["cls"]: r for r in _eff(t.write(tmp_path / "t.json")).to_dict()["classes"]}["copy"]
    assert cp["device_gbs"] == pytest.approx((4 << 20) / 10e3, rel=1e-3) and cp["link_gbs"] == pytest.approx((1 << 20) / 100e3, rel=1e-3)
    assert cp["bound"] == "host link" and cp["pct_of_bandwidth"] is None
    t2 = KinetoTrace(device_name=A100)
    t2.step(1, 0, 1000)
    _add(t2, 10, 1 << 20, 10.0)
    t2.memcpy("DtoD", 300, 100.0, nbytes=40 << 20)
    cp = {r["cls"]: r for r in _eff(t2.write(tmp_path / "d.json")).to_dict()["classes"]}["copy"]
    assert cp["bound"] == "memory" and cp["pct_of_bandwidth"] == pytest.approx(100 * (40 << 20) / 100e3 / BW, rel=1e-3)


def test_model_flops_without_a_dtype_are_measured_against_the_bf16_peak(tmp_path):
    """FLOPs per step given by the user, no shapes to say the dtype, no peak given: MFU is against the GPU's bf16
    dense peak (A100: 312 TFLOP/s), and says so. 1e12 FLOPs per 10 ms step is 100 TFLOP/s, 32.05 %."""
    t = NsysTrace()
    for s in range(3):
        t.step(s, s * 10_000_000, 10_000_000)
        t.kernel("sm90_xmma_gemm_bf16bf16", s * 10_000_000 + 100_000, 9_000_000)
    e = _eff(t.write(tmp_path / "t.sqlite"), model_flops_per_step=1e12)
    assert (e.flops_source, e.mfu_dtype) == ("user", "bf16")
    assert e.mfu_pct == pytest.approx(100 * 100 / 312)
    assert e.to_dict()["mfu_peak"] == "312 TFLOP/s bf16 dense, NVIDIA A100 80GB SXM datasheet"


def test_kernel_names_as_plain_strings_give_the_same_classes(tmp_path):
    """A timeline assembled through the API with names as plain strings (not categories) classes its kernels the
    same way: by their ops where shapes tie them, else by their own names."""
    t = KinetoTrace(device_name=A100)
    t.step(1, 0, 1000)
    _mm(t, 10, 1024, 1024, 1024, 100.0)
    t.kernel("vectorized_elementwise_kernel", 300, 10.0, launch_us=290)
    tl = traceinsight.load(t.write(tmp_path / "t.json"))
    plain = Timeline(events=tl.events.assign(name=tl.events["name"].astype(object)), meta=tl.meta)
    e = Derived(plain).efficiency
    assert list(e.kernel_cls) == ["gemm", "elementwise"]
    assert e.classes.set_index("cls")["time_ns"].to_dict() == {"gemm": 100_000, "elementwise": 10_000}
    assert e.to_dict() == Derived(tl).efficiency.to_dict()


def test_the_gpus_span_of_the_steps_is_found_on_any_rank(tmp_path):
    """The GPU-bound loop of ``test_efficiency.py`` on rank 1 of a job (steps are keyed by rank and step): two 1 ms
    host steps each queue a 1.5 ms GEMM, the GPU works over [40, 3040) µs, and MFU is the FLOPs over those 3 ms."""
    t = KinetoTrace(device_name=A100, rank=1, world_size=2)
    for s, gpu_at in ((0, 40.0), (1, 1540.0)):
        t.step(s + 1, 1000 * s, 1000)
        op = t.cpu_op("aten::mm", 1000 * s + 10, 20, args={"Input Dims": [[1024, 1024], [1024, 1024]],
                                                         "Input type": [BF16, BF16], "Concrete Inputs": ["", ""]})
        t.kernel("ampere_bf16_s16816gemm_bf16_128x128", gpu_at, 1500.0, launch_us=1000 * s + 15, op=op)
    e = _eff(t.write(tmp_path / "t.json"))
    assert e.mfu_pct == pytest.approx(100 * 2 * 2 * 1024**3 / 3e-3 / 1e12 / 312)
    assert e.steps["dur_ns"].tolist() == [1_000_000, 1_000_000]
    assert e.steps["tflops"].tolist() == pytest.approx([2 * 1024**3 / 1e-3 / 1e12] * 2, rel=1e-12)  # each step's own


def test_the_coverage_note_gives_the_tied_share(tmp_path):
    """40 µs of GEMM time tied to an op with shapes, 60 µs in a GEMM kernel no op launched: shapes cover 40 %, so
    no MFU is headlined either."""
    t = KinetoTrace(device_name=A100)
    t.step(1, 0, 2000)
    _mm(t, 10, 1024, 1024, 1024, 40.0)
    t.kernel("ampere_bf16_s16816gemm_bf16_64x64", 500, 60.0)
    e = _eff(t.write(tmp_path / "t.json"))
    assert e.notes == ["shapes cover 40 % of matrix GPU time: the rest is in kernels not tied to an op with recorded shapes "
                       "(no External id or launch record, a graph replay, or an op without a FLOPs model)"]
    assert e.mfu_pct is None and headline(e).startswith("MFU unknown: shapes cover 40 % of matrix GPU time")


def test_a_gemm_of_empty_matrices_gives_no_mfu_and_no_dtype(tmp_path):
    """An mm with a zero dimension has no FLOPs: the view has no MFU, and no MFU dtype to print beside it."""
    t = KinetoTrace(device_name=A100)
    t.step(1, 0, 1000)
    _mm(t, 10, 0, 1024, 1024, 100.0)
    e = _eff(t.write(tmp_path / "t.json"))
    assert (e.flops_source, e.mfu_pct, e.mfu_dtype) == ("none", None, None)
    assert e.to_dict()["mfu_peak"] is None


def test_the_diff_compares_no_mfu_below_half_coverage_and_compares_the_coverage(tmp_path):
    from traceinsight.delta import diff

    def trace(name, replayed):
        t = KinetoTrace(device_name=A100)
        t.step(1, 0, 3000)
        _mm(t, 10, 1024, 1024, 1024, 100.0)
        for i in range(replayed):  # GEMM kernels no op launched (a graph replay)
            t.kernel("ampere_bf16_s16816gemm_bf16_128x128", 300 + i * 110, 100.0)
        return t.write(tmp_path / name)

    d = diff(trace("a.json", 9), trace("b.json", 11)).data  # shapes cover 10 % and 8.3 %
    kpis = {k["name"]: k for k in d["kpis"]}
    assert "efficiency.mfu_pct" not in kpis  # neither side headlines an MFU, so the diff shows no MFU change
    assert kpis["efficiency.shape_coverage_pct"]["base"] == pytest.approx(10.0)
    assert kpis["efficiency.shape_coverage_pct"]["head"] == pytest.approx(100 / 12, abs=1e-3)
    d = diff(trace("c.json", 0), trace("d.json", 0)).data  # both fully covered: the MFU is compared
    assert "efficiency.mfu_pct" in {k["name"] for k in d["kpis"]}


def test_xplane_per_op_flops_where_xla_recorded_them(tmp_path):
    from tests.helpers.xplane_writer import XSpaceTrace

    def trace(name, cost):
        t = XSpaceTrace()
        t.step(1, 1_000_000, 2_000_000)
        t.op("train_step", 1_000_000, 10_000)
        t.kernel("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x128", 1_100_000, 100_000,
                 {"flops": 2_000_000_000, "bytes_accessed": 6_000_000} if cost else None)
        t.kernel("cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64", 1_300_000, 100_000)  # no cost recorded
        t.kernel("loop_add_fusion", 1_500_000, 20_000, {"flops": 1_000_000, "bytes_accessed": 12_000_000} if cost else None)
        return t.write(tmp_path / name)

    e = _eff(trace("a.xplane.pb", True))
    assert e.flops_source == "recorded" and e.model_flops == pytest.approx(2e9)
    g = e.classes.set_index("cls").loc["gemm"]
    assert (g["flops"], g["modelled_ns"], g["time_ns"]) == (pytest.approx(2e9), 100_000, 200_000)
    assert g["achieved_tflops"] == pytest.approx(2e9 / 100e-6 / 1e12) and g["bytes"] == pytest.approx(6e6)
    assert e.coverage["pct"] == pytest.approx(50.0)
    ew = e.classes.set_index("cls").loc["elementwise"]
    assert ew["achieved_gbs"] == pytest.approx(12e6 / 20e-6 / 1e9)
    assert e.notes[0] == "XLA's per-op costs cover 50 % of matrix GPU time: the rest is in kernels not tied to an op with a recorded cost"
    e = _eff(tmp_path / "a.xplane.pb", peak_tflops=312.0)  # XLA records no dtype: the user's peak applies to all
    assert headline(e).endswith("FLOPs as XLA recorded them per op (XLA's per-op costs cover 50 % of matrix GPU time).")
    assert e.mfu_pct == pytest.approx(100 * 2e9 / (e.steps["dur_ns"].sum() / 1e9) / 1e12 / 312.0)
    e = _eff(trace("b.xplane.pb", False))
    assert e.flops_source == "none" and any(n.startswith("FLOPs per op: not recorded in this XPlane trace") for n in e.notes)
