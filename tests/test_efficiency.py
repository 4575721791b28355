"""Achieved FLOP/s, MFU and the peak table: planted kineto traces with shapes (exact values) and the real corpus
(GEMM FLOPs against an independent count from the raw ``Input Dims``)."""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pytest

import traceinsight
from tests.conftest import corpus_file
from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.nsys_writer import NsysTrace
from traceinsight.derive.efficiency import EfficiencySettings
from traceinsight.vocab.peaks import PEAKS, UNKNOWN_PEAK, lookup
from traceinsight.derive.derived import Derived


def _eff(path, **settings):
    tl = traceinsight.load(path)
    return Derived(tl, efficiency=EfficiencySettings(**settings) if settings else None).efficiency


def _mm(t: KinetoTrace, at: float, m: int, k: int, n: int, dur_us: float, dtype="c10::BFloat16", kernel="sm80_xmma_gemm_bf16bf16_bf16f32",
        gpu_at: float | None = None):
    """aten::linear -> aten::t + aten::addmm (the real nesting), one GEMM kernel launched by addmm (running from
    ``gpu_at`` when given: queued behind earlier work)."""
    lin = t.cpu_op("aten::linear", at, 30.0, args={"Input Dims": [[m, k], [n, k], [n]], "Input type": [dtype] * 3,
                                                   "Concrete Inputs": ["", "", ""]})
    t.cpu_op("aten::t", at + 1, 2.0, args={"Input Dims": [[n, k]], "Input type": [dtype], "Concrete Inputs": [""]})
    add = t.cpu_op("aten::addmm", at + 5, 20.0, args={"Input Dims": [[n], [m, k], [k, n], [], []],
                                                      "Input type": [dtype, dtype, dtype, "Scalar", "Scalar"],
                                                      "Concrete Inputs": ["", "", "", "1", "1"]})
    t.kernel(kernel, at + 40 if gpu_at is None else gpu_at, dur_us, launch_us=at + 10)
    return lin, add


def test_linear_counted_once_with_achieved_rate_and_peak(tmp_path):
    t = KinetoTrace(device_name="NVIDIA A100-SXM4-80GB")
    t.step(1, 0, 3000)
    _mm(t, 10, 4096, 4096, 4096, 1000.0)
    _mm(t, 1100, 4096, 4096, 4096, 1000.0)
    e = _eff(t.write(tmp_path / "t.json"))
    flops = 2 * 2 * 4096**3
    gemm = e.classes.set_index("cls").loc["gemm"]
    assert gemm["flops"] == pytest.approx(flops)  # addmm only: linear is not counted a second time
    assert gemm["achieved_tflops"] == pytest.approx(flops / 2e-3 / 1e12)
    assert gemm["pct_of_peak"] == pytest.approx(100 * flops / 2e-3 / 1e12 / 312.0)
    assert gemm["dtype"] == "bf16" and gemm["bound"] == "compute"
    assert "312 TFLOP/s bf16 dense" in gemm["peak_label"] and "A100 80GB SXM" in gemm["peak_label"]
    assert e.steps["mfu_pct"].iloc[0] == pytest.approx(100 * flops / 3e-3 / 1e12 / 312.0)
    assert e.peak.source.startswith("https://")


def test_mfu_of_a_gpu_bound_loop_is_on_the_gpus_time(tmp_path):
    """Three 1 ms host steps each queue a 10 ms GEMM: the GPU works 40 µs to 30.04 ms on them, long after the host
    steps ended. MFU is the FLOPs over that 30 ms span, not over the 3 ms of host steps (which would read 10x
    higher); a host-bound loop (GPU work shorter than its steps) keeps its steps' time."""
    flops = 3 * 2 * 4096**3
    t = KinetoTrace(device_name="NVIDIA A100-SXM4-80GB")
    for s in range(3):
        t.step(s + 1, s * 1000.0, 1000.0)
        _mm(t, s * 1000.0 + 10, 4096, 4096, 4096, 10_000.0, gpu_at=40.0 + s * 10_000.0)
    e = _eff(t.write(tmp_path / "gpu_bound.json"))
    assert e.mfu_pct == pytest.approx(100 * flops / 30e-3 / 1e12 / 312.0, rel=1e-9)
    host = KinetoTrace(device_name="NVIDIA A100-SXM4-80GB")
    for s in range(3):
        host.step(s + 1, s * 1000.0, 1000.0)
        _mm(host, s * 1000.0 + 10, 4096, 4096, 4096, 500.0)
    assert _eff(host.write(tmp_path / "host_bound.json")).mfu_pct == pytest.approx(100 * flops / 3e-3 / 1e12 / 312.0, rel=1e-9)


def test_mfu_leaves_out_the_warmup_the_verdict_sets_aside(tmp_path):
    """The verdict judges the steady state, so MFU beside it must too. A first step four times the others (start-up)
    is a warm-up step: MFU is over the three steady steps and says so. Without steps, one-time work (a module load
    that keeps the GPU idle for 20 ms) is taken off the GPU window MFU divides by."""
    flops = 2 * 4096**3  # one GEMM
    t = KinetoTrace(device_name="NVIDIA A100-SXM4-80GB")
    t.step(1, 0, 12_000)
    t.cpu_op("aten::empty", 100, 10_000)  # one-time host work inside the first step
    _mm(t, 10_200, 4096, 4096, 4096, 1000.0)
    for s in range(3):
        t.step(s + 2, 12_000 + s * 3000.0, 3000.0)
        _mm(t, 12_000 + s * 3000.0 + 10, 4096, 4096, 4096, 1000.0)
    e = _eff(t.write(tmp_path / "steps.json"))
    assert e.mfu_basis == "over the 3 steady steps (1 warm-up step left out)"
    assert e.mfu_pct == pytest.approx(100 * 3 * flops / 9e-3 / 1e12 / 312.0, rel=1e-9)
    assert e.to_dict()["mfu_basis"] == e.mfu_basis

    n = KinetoTrace(device_name="NVIDIA A100-SXM4-80GB")
    _mm(n, 10, 4096, 4096, 4096, 1000.0)
    n.runtime("cuModuleLoadData", 1100, 20_000)  # one-time: the GPU idles under it
    _mm(n, 21_200, 4096, 4096, 4096, 1000.0)
    e = _eff(n.write(tmp_path / "nosteps.json"))
    window_s = (21_240 + 1000 - 50) * 1e-6  # first kernel start to last kernel end
    assert e.mfu_basis.startswith("over the steady state (the GPU window less ")
    steady_s = 2 * flops / (e.mfu_pct / 100 * 312e12)  # the time MFU divides by
    assert steady_s < window_s / 5  # the 20 ms of module loading are not in it
    plain = traceinsight.load(tmp_path / "nosteps.json")
    from traceinsight.derive.efficiency import build
    from traceinsight.derive.views import Views
    assert build(Views(plain)).mfu_basis == ""  # no ledger given: the whole window, as before


def test_user_peak_overrides_the_table(tmp_path):
    t = KinetoTrace(device_name="NVIDIA A100-SXM4-80GB")
    t.step(1, 0, 3000)
    _mm(t, 10, 1024, 1024, 1024, 100.0)
    e = _eff(t.write(tmp_path / "t.json"), peak_tflops=100.0, peak_bandwidth_gbs=1000.0)
    gemm = e.classes.set_index("cls").loc["gemm"]
    assert gemm["pct_of_peak"] == pytest.approx(100 * 2 * 1024**3 / 1e-4 / 1e12 / 100.0)
    assert "given with --peak-tflops" in gemm["peak_label"]


def test_unknown_gpu_gives_no_percentage(tmp_path):
    t = KinetoTrace(device_name="NVIDIA GeForce RTX 5070 Ti Laptop GPU")
    t.step(1, 0, 3000)
    _mm(t, 10, 1024, 1024, 1024, 100.0)
    e = _eff(t.write(tmp_path / "t.json"))
    assert e.mfu_pct is None and e.classes.set_index("cls").loc["gemm", "pct_of_peak"] is None
    assert any(UNKNOWN_PEAK in n for n in e.notes)
    assert e.classes.set_index("cls").loc["gemm", "achieved_tflops"] == pytest.approx(2 * 1024**3 / 1e-4 / 1e12)


def test_without_shapes_names_the_flag(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 3000)
    op = t.cpu_op("aten::mm", 10, 20)
    t.kernel("ampere_sgemm_128x64_nn", 40, 100, launch_us=15, op=op)
    path = t.write(tmp_path / "t.json")
    e = _eff(path)
    assert e.flops_source == "none" and e.mfu_pct is None
    assert any("record_shapes=True" in n for n in e.notes)
    from traceinsight.render import render

    out = render(traceinsight.analyze(path), "text")
    assert "record_shapes=True" in out and "MFU 0" not in out


def test_nsys_mfu_from_model_flops(tmp_path):
    t = NsysTrace()
    for s in range(3):
        t.step(s, s * 10_000_000, 10_000_000)
        t.kernel("sm90_xmma_gemm_bf16bf16", s * 10_000_000 + 100_000, 9_000_000)
    path = t.write(tmp_path / "t.sqlite")
    e = _eff(path, model_flops_per_step=1e12, peak_tflops=500.0)
    assert e.flops_source == "user"
    assert e.mfu_pct == pytest.approx(100 * 1e12 / 10e-3 / 1e12 / 500.0, rel=1e-3)
    e = _eff(path)
    assert e.mfu_pct is None and any("--model-flops-per-step" in n for n in e.notes)


def test_conv_and_attention_formulas(tmp_path):
    t = KinetoTrace(device_name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0))
    t.step(1, 0, 5000)
    conv = t.cpu_op("aten::_convolution", 10, 30, args={
        "Input Dims": [[8, 64, 56, 56], [128, 64, 3, 3], [], [], [], [], [], [], []],
        "Input type": ["c10::BFloat16", "c10::BFloat16", "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"],
        "Concrete Inputs": ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]})
    t.kernel("sm90_xmma_fprop_implicit_gemm_bf16", 50, 100, launch_us=20, op=conv)
    sd = t.cpu_op("aten::_scaled_dot_product_flash_attention", 200, 30, args={
        "Input Dims": [[2, 16, 1024, 64]] * 3 + [[], [], [], []],
        "Input type": ["c10::BFloat16"] * 3 + ["Scalar"] * 4,
        "Concrete Inputs": ["", "", "", "0.", "True", "False", ""]})
    t.kernel("flash_fwd_kernel", 300, 100, launch_us=210, op=sd)
    e = _eff(t.write(tmp_path / "t.json"))
    c = e.classes.set_index("cls")
    assert c.loc["conv", "flops"] == pytest.approx(2 * 8 * 28 * 28 * 128 * 64 * 9)  # stride 2: 28x28 outputs
    assert c.loc["attention", "flops"] == pytest.approx(0.5 * 4 * 2 * 16 * 1024 * 1024 * 64)  # causal: half
    assert not e.counts.assumed
    assert e.classes.set_index("cls").loc["conv", "peak_tflops"] == 989.5


def test_peak_table_dense_below_sparse_and_sourced():
    for p in PEAKS:
        assert re.match(r"https://", p.source), p.gpu
        assert p.bandwidth_gbs > 0 and p.tflops["fp32"] > 0
        for dtype, sparse in p.sparse_tflops.items():
            # the datasheet's sparse figure is 2:4 structured sparsity: exactly twice the dense rate, up to its rounding
            assert p.tflops[dtype] < sparse and sparse / p.tflops[dtype] == pytest.approx(2.0, rel=0.02), (p.gpu, dtype)
        assert p.tflops.get("bf16", 0) >= p.tflops["fp32"] or "bf16" not in p.tflops
    assert "bf16" not in lookup("Tesla T4", "7.5").tflops and "bf16" not in lookup("Tesla V100-SXM2-16GB", "7.0").tflops
    h100 = lookup("NVIDIA H100 80GB HBM3", "9.0")
    assert h100.tflops["bf16"] == 989.5 and h100.sparse_tflops["bf16"] == 1979.0  # the datasheet's 1,979 is sparse
    assert lookup("NVIDIA A100-SXM4-40GB", "8.0", 42_000_000_000).bandwidth_gbs == 1555
    assert lookup("NVIDIA A100-SXM4-80GB", "8.0", 85_000_000_000).bandwidth_gbs == 2039
    assert lookup("NVIDIA H100 80GB HBM3", "8.0") is None  # name and compute capability disagree: no guess
    assert lookup("AMD Radeon Graphics", "9.0") is None
    # a name that names no product: the signature (compute capability, SMs/CUs, memory) when it is unique
    assert lookup("AMD GPU (cc 9.4, 304 CUs)", "9.4", 206_141_652_992, 304).gpu == "AMD Instinct MI300X"
    assert lookup("AMD Radeon Graphics", "9.0", 68_702_699_520, 110).gpu == "AMD Instinct MI250X (one GCD)"
    assert lookup("AMD Radeon Graphics", "9.0", 68_702_699_520, 104) is None  # an MI250 GCD or an MI210
    assert lookup("NVIDIA GPU", "8.0", 85_000_000_000, 108) is None  # A100 80GB: PCIe or SXM
    assert lookup("NVIDIA GPU", "8.0", 42_000_000_000, 108).bandwidth_gbs == 1555


# --- the real corpus ---------------------------------------------------------------------------------------
_MATMUL = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"}


def _independent_gemm_flops(path) -> float:
    """2·M·N·K over leaf matmul-family ops, straight from the raw JSON (a per-event loop, no traceinsight code)."""
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh)
    ops = [e for e in doc["traceEvents"] if e.get("ph") == "X" and str(e.get("cat", "")).lower() in ("cpu_op", "operator")
           and e.get("name") in _MATMUL and "Input Dims" in e.get("args", {})]
    by_thread: dict = {}
    for e in ops:
        by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    total = 0.0
    for evs in by_thread.values():
        evs.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
        for i, e in enumerate(evs):
            end = float(e["ts"]) + float(e["dur"])
            if i + 1 < len(evs) and float(evs[i + 1]["ts"]) < end:
                continue  # holds another matmul op: not a leaf
            total += _mm_flops(e["name"], e["args"]["Input Dims"])
    return total


def _mm_flops(name: str, d: list) -> float:
    if name == "aten::linear":
        x, w = d[0], d[1]
        return 2.0 * float(np.prod(x[:-1])) * x[-1] * w[0]
    a, b = (d[1], d[2]) if name in ("aten::addmm", "aten::baddbmm") else (d[0], d[1])
    if len(a) == 1:
        a = [1] + a
    if len(b) == 1:
        b = b + [1]
    batch = np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))
    return 2.0 * float(np.prod(batch)) * a[-2] * a[-1] * b[-1]


@pytest.mark.parametrize("rel", [
    "pytorch/tracelens_h100_qwen1.5-0.5b_inference.json.gz",
    "pytorch/tracelens_mi300x_resnet_act_ckpt_rank0of8.json.gz",
    "pytorch/kineto_resnet50_nw0_v100.pt.trace.json.gz",
    "pytorch/hta_a100_rank0of16_5streams.json.gz",
    "pytorch/tracelens_b200_eager_rank0of8.json.gz",
])
def test_corpus_gemm_flops_match_an_independent_count(rel):
    path = corpus_file(rel)
    e = _eff(path)
    ops = e.counts.ops
    ours = float(ops.loc[ops["cls"] == "gemm", "flops"].sum())
    ref = _independent_gemm_flops(path)
    assert ref > 0
    assert ours == pytest.approx(ref, rel=0.005)


def test_corpus_h100_mfu_with_peak_and_source():
    e = _eff(corpus_file("pytorch/tracelens_h100_qwen1.5-0.5b_inference.json.gz"))
    assert e.peak.gpu == "NVIDIA H100 SXM" and e.peak.source.startswith("https://")
    assert e.mfu_dtype == "bf16" and 0 < e.mfu_pct < 100
    gemm = e.classes.set_index("cls").loc["gemm"]
    assert 0 < gemm["pct_of_peak"] < 100 and "989.5 TFLOP/s bf16 dense" in gemm["peak_label"]
    d = e.to_dict()
    assert d["mfu_peak"].startswith("989.5 TFLOP/s bf16 dense") and d["peak"]["dense"] is True
    top = d["top_ops"][0]  # the MLP up-projection of every layer: 2 x 8944 x 1024 x 2816 per call
    assert (top["op"], top["input_dims"], top["dtype"]) == ("aten::mm", "[[8944, 1024], [1024, 2816]]", "bf16")
    assert top["gflop"] == pytest.approx(2 * 8944 * 1024 * 2816 / 1e9, rel=1e-4)
    assert top["tflops"] == pytest.approx(top["gflop"] * top["count"] / (top["kernel_ns"] / 1e9) / 1e3, rel=1e-3)


def test_corpus_trace_without_shapes_asks_for_record_shapes():
    from traceinsight.render.efficiency_view import table_rows

    e = _eff(corpus_file("pytorch/hta_ddp_v100_rank1of2.json.gz"))
    assert e.flops_source == "none" and e.mfu_pct is None
    assert any("record_shapes=True" in n for n in e.notes)
    rows = {r[0]: r for r in table_rows(e)}
    assert rows["GEMM"][5:] == [""] * 7  # no rate, no bound, no peak: never "0" or "nan"
    assert rows["copies"][-2:] == ["memory", "900 GB/s"]  # copies carry their own bytes


# --- outputs ------------------------------------------------------------------------------------------------
def test_every_output_prints_the_peak_beside_mfu(tmp_path):
    from traceinsight.render import render

    t = KinetoTrace(device_name="NVIDIA A100-SXM4-80GB")
    t.step(1, 0, 3000)
    _mm(t, 10, 4096, 4096, 4096, 1000.0)
    a = traceinsight.analyze(t.write(tmp_path / "t.json"))
    mfu = 100 * 2 * 4096**3 / 3e-3 / 1e12 / 312.0
    label = "312 TFLOP/s bf16 dense, NVIDIA A100 80GB SXM datasheet"
    text = render(a, "text", width=200)
    assert f"MFU {mfu:.1f}% of {label}" in text and "GEMM" in text
    md = render(a, "md")
    assert f"MFU {mfu:.1f}% of {label}" in md and "| GEMM |" in md
    doc = json.loads(render(a, "json"))
    assert doc["efficiency"]["mfu_pct"] == pytest.approx(mfu, abs=1e-3)
    assert doc["efficiency"]["mfu_peak"] == label and doc["efficiency"]["peak"]["dense"] is True
    assert doc["efficiency"]["classes"][0]["cls"] == "gemm"
    html = render(a, "html")
    assert 'id="efficiency"' in html and '<svg class="roofline"' in html and "312 TFLOP/s bf16 dense" in html


def test_cli_peak_and_model_flops_flags(tmp_path):
    from typer.testing import CliRunner

    from traceinsight.cli.app import app

    t = NsysTrace()
    for s in range(2):
        t.step(s, s * 10_000_000, 10_000_000)
        t.kernel("sm90_xmma_gemm_bf16bf16", s * 10_000_000 + 100_000, 9_000_000)
    path = t.write(tmp_path / "t.sqlite")
    out = tmp_path / "r.json"
    r = CliRunner().invoke(app, ["analyze", str(path), "-o", str(out), "--model-flops-per-step", "2e12", "--peak-tflops", "400"])
    assert r.exit_code == 0, r.output
    eff = json.loads(out.read_text())["efficiency"]
    assert eff["flops_source"] == "user" and eff["mfu_pct"] == pytest.approx(100 * 2e12 / 10e-3 / 1e12 / 400, rel=1e-3)
    assert eff["mfu_peak"].startswith("400 TFLOP/s") and "--peak-tflops" in eff["mfu_peak"]


def _metrics_trace(tmp_path):
    """An nsys capture with GPU-metrics sampling every 10 µs: a GEMM (SM 90 %, tensor 70 %), an elementwise kernel
    (SM 60 %, tensor 0 %), idle otherwise."""
    t = NsysTrace()
    t.step(0, 0, 1_000_000)
    t.kernel("sm80_xmma_gemm_bf16bf16", 100_000, 400_000)
    t.kernel("void at::native::vectorized_elementwise_kernel<4>", 600_000, 200_000)
    for i in range(0, 1_000_000, 10_000):
        gemm, ew = 100_000 <= i < 500_000, 600_000 <= i < 800_000
        t.gpu_metrics(i, {"SMs Active [Throughput %]": 90 if gemm else (60 if ew else 0),
                          "Tensor Active [Throughput %]": 70 if gemm else 0,
                          "GPC Clock Frequency [MHz]": 1410})
    return t.write(tmp_path / "t.sqlite")


def test_nsys_gpu_metrics_per_class_and_step(tmp_path):
    e = _eff(_metrics_trace(tmp_path))
    hw = e.hardware.set_index(["scope", "metric"])["mean_pct"]
    assert hw[("busy", "SM Active")] == pytest.approx((40 * 90 + 20 * 60) / 60)
    assert hw[("busy", "Tensor Active")] == pytest.approx(40 * 70 / 60)
    assert hw[("GEMM", "Tensor Active")] == 70 and hw[("elementwise/reduction", "Tensor Active")] == 0
    assert hw[("step 0", "SM Active")] == pytest.approx((40 * 90 + 20 * 60) / 100)
    assert "GPC Clock" not in " ".join(e.hardware["metric"])  # only the metrics the view reads
    from traceinsight.render import render

    text = render(traceinsight.analyze(_metrics_trace(tmp_path)), "text", width=200)
    assert "Hardware counters while the GPU is busy: SM Active 80%, Tensor Active 47% (60 samples)" in text


def test_mfu_in_the_baseline_comparison(tmp_path):
    from traceinsight.render import render

    def run(kernel_us: float, name: str):
        t = KinetoTrace(device_name="NVIDIA A100-SXM4-80GB")
        t.step(1, 0, 5000)
        _mm(t, 10, 4096, 4096, 4096, kernel_us)
        return t.write(tmp_path / name)

    before = tmp_path / "before.json"
    before.write_text(render(traceinsight.analyze(run(4000.0, "a.json")), "json"))
    a = traceinsight.analyze(run(1000.0, "b.json"), baseline=before)  # same FLOPs, same step time
    mfu = 100 * 2 * 4096**3 / 5e-3 / 1e12 / 312.0
    assert a.baseline.mfu_before_pct == pytest.approx(mfu, abs=1e-3) and a.baseline.mfu_after_pct == pytest.approx(mfu)
    assert f"MFU {mfu:.1f}% → {mfu:.1f}%" in a.baseline.sentence()
    assert json.loads(render(a, "json"))["baseline"]["mfu"]["after_pct"] == pytest.approx(mfu)


def test_native_and_general_readers_agree_on_types_and_concrete_inputs(tmp_path, monkeypatch):
    from tests.test_kineto_native import assert_same
    from traceinsight.vocab import native

    if native.built("pytorch") is None:
        pytest.skip("the native kineto scanner is not built here")
    t = KinetoTrace()
    t.step(1, 0, 3000)
    op = t.cpu_op("aten::einsum", 10, 40, args={"Input Dims": [[], [[8, 32, 64], [8, 64, 16]]],
                                                 "Input type": ["", "TensorList"],
                                                 "Concrete Inputs": ["bij,bjk->bik", "\"quoted\" \\u00e9"]})
    t.kernel("sm80_xmma_gemm_bf16bf16", 100, 10, launch_us=20, op=op)
    tl = assert_same(t.write(tmp_path / "t.json"), monkeypatch)
    ops = tl.events[tl.events["kind"] == "cpu_op"]
    assert json.loads(ops["concrete_inputs"].iloc[0])[0] == "bij,bjk->bik"
    assert json.loads(ops["input_types"].iloc[0]) == ["", "TensorList"]
    e = Derived(tl).efficiency
    assert e.counts.ops["flops"].iloc[0] == 2 * 8 * 32 * 64 * 16  # einsum from its equation


def test_conv_without_arguments_takes_its_output_from_the_backward(tmp_path):
    """Older traces record no Concrete Inputs: a stride-2 convolution's output size comes from its backward op
    (grad_output), not from the stride-1 assumption."""
    t = KinetoTrace(device_name="NVIDIA A100-SXM4-80GB")
    t.step(1, 0, 5000)
    x, w = [32, 64, 56, 56], [128, 64, 3, 3]
    fwd = t.cpu_op("aten::_convolution", 10, 30, args={"Input Dims": [x, w, [], [], [], [], [], [], [], [], [], [], []],
                                                        "Input type": ["float"] * 2 + [""] * 11})
    t.kernel("implicit_convolve_sgemm", 50, 100, launch_us=20, op=fwd)
    odd = t.cpu_op("aten::_convolution", 200, 30, args={"Input Dims": [[32, 64, 28, 28], w, [], [], [], [], [], [], [], [], [], [], []],
                                                         "Input type": ["float"] * 2 + [""] * 11})
    t.kernel("implicit_convolve_sgemm", 250, 100, launch_us=220, op=odd)
    bwd = t.cpu_op("aten::cudnn_convolution_backward", 400, 30, args={
        "Input Dims": [x, [32, 128, 28, 28], w, [], [], [], [], [], [], [], []], "Input type": ["float"] * 3 + [""] * 8})
    t.kernel("dgrad_engine", 450, 100, launch_us=420, op=bwd)
    e = _eff(t.write(tmp_path / "t.json"))
    ops = e.counts.ops.set_index("row")
    conv = e.counts.ops[e.counts.ops["name"] == "aten::_convolution"].sort_values("start_ns")
    assert conv["flops"].iloc[0] == 2 * 32 * 28 * 28 * 128 * 64 * 9  # from grad_output: stride 2
    assert conv["flops"].iloc[1] == 2 * 32 * 28 * 28 * 128 * 64 * 9 and conv["assumed"].iloc[1].startswith("stride 1")
    assert e.counts.assumed == {"stride 1, same padding (Concrete Inputs not recorded)": 1,
                                "grad input and grad weight both computed (output_mask not recorded)": 1}
    assert len(ops) == 3


def test_roofline_draws_only_classes_with_flops_and_bytes(tmp_path):
    from traceinsight.render.efficiency_view import roofline_svg

    e = _eff(corpus_file("pytorch/tracelens_h100_qwen1.5-0.5b_inference.json.gz"))
    svg = roofline_svg(e)
    assert svg.count("<circle") == 3  # GEMM, attention, elementwise: copies move bytes but do no FLOPs
    assert "copies" not in svg and "nan" not in svg.lower()


def test_hostile_shapes_give_no_flops_and_no_error(tmp_path):
    t = KinetoTrace(device_name="NVIDIA A100-SXM4-80GB")
    t.step(1, 0, 3000)
    for i, dims in enumerate([[[-5, 3], [3, -7]], [[10**300, 2], [2, 10**300]], "not a list", [["a", 1], [1]], [[True, 2], [2, 3]],
                              {"x": 1}, [[2**50, 2], [2, 2]]]):
        op = t.cpu_op("aten::mm", 10 + i * 100, 20, args={"Input Dims": dims, "Input type": ["float", 7], "Concrete Inputs": [None]})
        t.cpu_op("aten::_convolution", 10 + i * 100 + 30, 20, args={"Input Dims": [[1, 2, 3, 3], [2, 2, 1, 1]], "Input type": {"a": 1},
                                                                     "Concrete Inputs": {"3": [1, 1]}})
        t.kernel("ampere_sgemm_128x64_nn", 40 + i * 100, 50, launch_us=15 + i * 100, op=op)
    a = traceinsight.analyze(t.write(tmp_path / "t.json"))
    e = a.views.efficiency
    assert e.flops_source == "none" and list(e.counts.ops["name"]) == ["aten::_convolution"] * 7  # odd arguments ignored
    assert e.counts.ops["kernel_ns"].sum() == 0 and e.mfu_pct is None
    assert not a.warnings and not any("could not read" in n for n in e.notes)


def test_docs_peak_table_matches_the_code(repo):
    doc = (repo / "docs" / "efficiency.md").read_text(encoding="utf-8")
    for p in PEAKS:
        row = next((line for line in doc.splitlines() if line.startswith(f"| {p.gpu} |")), None)
        assert row is not None, p.gpu
        assert f"| {p.tflops['fp32']:g} |" in row and f"| {p.bandwidth_gbs:g} |" in row and p.source in row
        if "bf16" in p.tflops:
            assert f"| {p.tflops['bf16']:g}" in row


def test_tensorflow_traces_say_where_flops_would_come_from(tmp_path):
    """An XPlane trace carries no FLOPs per op (XProf takes them from the compiled HLO module); the note says so
    and names the flag that gives MFU; with the flag, MFU is measured and the note goes."""
    from tests.helpers.xplane_writer import XSpaceTrace

    x = XSpaceTrace()
    for i in range(3):
        x.step(i, 1_000_000 * i, 1_000_000)
        x.op(f"model/dense_{i}/MatMul", 1_000_000 * i + 10_000, 50_000)
        x.kernel("volta_sgemm_128x64_nn", 1_000_000 * i + 20_000, 400_000)
    path = x.write(tmp_path / "t.xplane.pb")
    e = _eff(path)
    assert e.flops_source == "none" and e.mfu_pct is None
    assert ("FLOPs per op: not recorded in this XPlane trace (no `flops`/`bytes_accessed` HLO op stats on its device events; "
            "XProf derives them from the compiled HLO module, which the trace does not carry); pass --model-flops-per-step "
            "for MFU") in e.notes
    e = _eff(path, model_flops_per_step=2e9, peak_tflops=10.0)
    assert e.flops_source == "user" and not any("not recorded" in n for n in e.notes)


def test_mfu_is_exact_to_the_last_digit(tmp_path):
    """MFU = FLOPs / seconds / 1e12 / peak TFLOP/s in %, over the steps: 1e12 FLOPs per 10 ms step at 500 TFLOP/s is
    exactly 20 % (the reports print it to one decimal, a CI gate compares it to its own threshold)."""
    t = NsysTrace()
    for s in range(3):
        t.step(s, s * 10_000_000, 10_000_000)
        t.kernel("sm90_xmma_gemm_bf16bf16", s * 10_000_000 + 100_000, 9_000_000)
    e = _eff(t.write(tmp_path / "t.sqlite"), model_flops_per_step=1e12, peak_tflops=500.0)
    assert e.mfu_pct == pytest.approx(20.0, rel=1e-14)
    assert [s["flops"] for s in e.to_dict()["steps"]] == [1e12] * 3


def test_tensorflow_trace_json_names_the_flag_for_mfu(repo):
    """A TensorFlow trace.json (tests/data, shipped) has no FLOPs per op either; its note names the flag."""
    e = _eff(repo / "tests/data/tf/tensorflow-profiler-demo/GPU-multi-worker/34.83.195.179_6003.trace.json.gz")
    assert e.flops_source == "none" and e.mfu_pct is None
    assert "this TensorFlow trace records no FLOPs per op; pass --model-flops-per-step for MFU" in e.notes
