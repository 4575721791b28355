"""The HTML report (issue 13, item 4): clean axis ticks, close-ups that span the whole instance, regions drawn as
regions, host lanes with names, column labels that match their cells, no dead links, generated traces labelled;
and advice that fits the trace (framework first, GPU generation) in every renderer."""

from __future__ import annotations

import json
import re

import pytest

import traceinsight
from tests.conftest import REPO, corpus_file
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.assess import advice
from traceinsight.render import html, render, timeline_svg
from traceinsight.render.common import column_label, format_cell
from traceinsight.rule_api import Fix

SAMPLES = REPO / "sample_traces"


# --- ticks ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "w0,w1,labels",
    [
        (180_000_000, 180_040_000, ["180.000 ms", "180.005 ms", "180.010 ms", "180.015 ms", "180.020 ms", "180.025 ms", "180.030 ms", "180.035 ms", "180.040 ms"]),
        (0, 72_920_000, ["0 ms", "10 ms", "20 ms", "30 ms", "40 ms", "50 ms", "60 ms", "70 ms"]),
        (2_500, 9_000, ["3 µs", "4 µs", "5 µs", "6 µs", "7 µs", "8 µs", "9 µs"]),
        (1_200_000_000, 3_400_000_000, ["1.5 s", "2.0 s", "2.5 s", "3.0 s"]),
        (0, 900, ["0 ns", "200 ns", "400 ns", "600 ns", "800 ns"]),
    ],
)
def test_ticks_are_distinct_on_a_125_grid(w0, w1, labels):
    ticks = timeline_svg.axis_ticks(w0, w1)
    assert [t["label"] for t in ticks] == labels
    assert len(set(t["label"] for t in ticks)) == len(ticks)  # never "180.00 ms, 180.00 ms"


def test_edge_ticks_anchor_inwards():
    ticks = timeline_svg.axis_ticks(0, 70_000_000)
    assert ticks[0]["anchor"] == "start" and ticks[0]["x"] == timeline_svg.GUTTER
    assert ticks[-1]["anchor"] == "end" and ticks[-1]["x"] == timeline_svg.GUTTER + timeline_svg.PLOT_W
    assert {t["anchor"] for t in ticks[1:-1]} == {"middle"}


# --- units ------------------------------------------------------------------------------------------------


def test_column_labels_drop_the_unit_the_cell_shows():
    assert column_label("start_ms") == "start"
    assert column_label("duration_us") == "duration"
    assert column_label("gap_ns") == "gap"
    assert column_label("share_pct") == "share %"
    assert column_label("name") == "name"
    # the cell carries its unit: 0.751 ms is shown as what it is, under a header that claims no unit
    assert format_cell("start_ms", 0.751)[0] == "751.0 µs"
    assert format_cell("duration_us", 8720.0)[0] == "8.72 ms"


def _analysis(path, **kw):
    return traceinsight.analyze(path, **kw)


@pytest.fixture(scope="module")
def sync_sample():
    return _analysis(SAMPLES / "sync_stalls.json.gz")


def test_evidence_headers_have_no_unit_suffix(sync_sample):
    page = render(sync_sample, "html")
    heads = re.findall(r"<table class=\"sortable ev\">\s*<thead><tr>(.*?)</tr>", page, re.S)
    assert heads
    for head in heads:
        names = re.findall(r"<th>(.*?)</th>", head)
        assert not [n for n in names if re.search(r"_(ns|us|ms|s)$", n)], names


# --- close-ups, regions, host lanes -----------------------------------------------------------------------


def test_closeup_spans_the_whole_instance(tmp_path):
    t = KinetoTrace()
    for s in range(3):  # a 1.5 ms stall per step
        t0 = s * 4000.0
        t.step(s, t0, 4000.0)
        t.kernel("volta_sgemm_128x64_nn", t0 + 10, 1500.0, launch_us=t0)
        t.cpu_op("aten::item", t0 + 20, 1540.0)
        t.cpu_op("aten::_local_scalar_dense", t0 + 22, 1536.0)
        t.memcpy("DtoH", t0 + 1510, 2.0, 4, launch_us=t0 + 25, launch_dur_us=5.0, pageable=False)
        t.runtime("cudaStreamSynchronize", t0 + 32, 1482.0)
        t.kernel("volta_sgemm_128x64_nn", t0 + 2000, 100.0, launch_us=t0 + 1990)
    a = _analysis(t.write(tmp_path / "t.json"))
    ctx = html.context(a)
    (fd,) = [f for f in ctx["findings"] if f["code"] == "TI002"]
    c = fd["instance"]
    f = next(f for f in a.findings if f.code == "TI002")
    inst = max(f.instances, key=lambda i: i.dur_ns)
    assert inst.dur_ns == 1_482_000
    assert c["w0"] <= inst.start_ns and c["w1"] >= inst.end_ns  # the whole 1.5 ms, not its first 40 µs
    assert c["band"]["w"] == pytest.approx(timeline_svg.PLOT_W * inst.dur_ns / (c["w1"] - c["w0"]), abs=0.05)
    assert c["band"]["w"] > 0.6 * timeline_svg.PLOT_W


def test_region_findings_are_drawn_as_regions():
    a = _analysis(SAMPLES / "lstm_fallback.json.gz")
    ctx = html.context(a)
    (mark,) = [m for m in ctx["timeline"]["marks"] if m["code"] == "TI004"]
    f = next(f for f in a.findings if f.code == "TI004")
    w0, w1 = ctx["timeline"]["w0"], ctx["timeline"]["w1"]
    widest = max(mark["ticks"], key=lambda k: k["w"])
    inst = max((i for i in f.instances if i.end_ns > w0 and i.start_ns < w1), key=lambda i: i.dur_ns)
    expect = timeline_svg.PLOT_W * (min(inst.end_ns, w1) - max(inst.start_ns, w0)) / (w1 - w0)
    assert widest["w"] == pytest.approx(expect, abs=0.05) and widest["w"] > 50  # a region, not a 1-pixel tick


def test_host_lanes_name_ranges_and_ops(sync_sample):
    lanes = html.context(sync_sample)["timeline"]["lanes"]
    by_label = {lane["label"]: lane for lane in lanes}
    assert {"host ranges", "CPU ops"} <= set(by_label)
    ranges = [b["title"] for b in by_label["host ranges"]["boxes"]]
    assert any(t.startswith("Optimizer.step#") for t in ranges), ranges
    ops = [b["title"] for b in by_label["CPU ops"]["boxes"]]
    assert any(o.startswith("aten::item: ") for o in ops), ops
    for b in by_label["CPU ops"]["boxes"]:  # names fit their box
        assert len(b["text"]) * 5.6 <= b["w"]


# --- links, generated traces, framework ----------------------------------------------------------------


def _nav(page: str) -> list[str]:
    return re.findall(r'<a href="#([a-z]+)">', re.search(r'<nav class="toc">(.*?)</nav>', page, re.S).group(1))


def test_no_dead_links_on_a_cpu_only_report(tmp_path):
    t = KinetoTrace()
    t.step(0, 0.0, 1000.0)
    t.cpu_op("aten::add", 10.0, 100.0)
    page = render(_analysis(t.write(tmp_path / "t.json")), "html")
    assert _nav(page) == ["findings", "trace"]
    ids = set(re.findall(r'id="([^"]+)"', page))
    assert set(_nav(page)) <= ids


def test_every_nav_link_has_its_target(sync_sample):
    page = render(sync_sample, "html")
    assert _nav(page) == ["findings", "timeline", "efficiency", "kernels", "trace"]  # the sample records shapes: an efficiency section
    assert set(_nav(page)) <= set(re.findall(r'id="([^"]+)"', page))


def test_generated_samples_say_so(sync_sample, tmp_path):
    assert "planted" in sync_sample.timeline.meta.extra["generated"]
    page = render(sync_sample, "html")
    assert "data-generated" in page and "Generated trace:" in page
    assert "> Generated trace: host side recorded" in render(sync_sample, "md")
    assert "planted" in json.loads(render(sync_sample, "json"))["trace"]["generated"]
    nsys = _analysis(SAMPLES / "vecadd_sync.sqlite")
    assert "nsys_writer" in nsys.timeline.meta.extra["generated"]
    t = KinetoTrace()
    t.step(0, 0.0, 1000.0)
    t.kernel("k", 10.0, 100.0, launch_us=0.0)
    plain = _analysis(t.write(tmp_path / "t.json"))
    assert "generated" not in plain.timeline.meta.extra
    assert "data-generated" not in render(plain, "html")
    assert json.loads(render(plain, "json"))["trace"]["generated"] is None


def _first_tab(page: str, code: str) -> str:
    art = re.search(rf'<article [^>]*data-code="{code}".*?</article>', page, re.S).group(0)
    return re.findall(r'<section class="fix" data-tab="([a-z]+)"', art)[0]


def test_plain_cuda_program_leads_with_cuda_advice():
    a = _analysis(SAMPLES / "vecadd_sync.sqlite")
    assert a.framework == "cuda"
    (f,) = [f for f in a.findings if f.code == "TI006"]
    assert list(f.fixes)[0] == "cuda" and "cudaMallocHost" in f.fixes["cuda"].code
    page = render(a, "html")
    assert _first_tab(page, "TI006") == "cuda"
    assert '<html lang="en" class="nojs" data-framework="cuda">' in page
    assert json.loads(render(a, "json"))["trace"]["framework"] == "cuda"
    md = render(a, "md")
    # Markdown and the terminal show the trace's own framework only; HTML and JSON keep every framework's fix
    assert "**Fix in CUDA:**" in md and "**Fix in PyTorch:**" not in md and "**Fix in TensorFlow:**" not in md
    assert "fix (CUDA):" in render(a, "text") and "fix (PyTorch)" not in render(a, "text")
    assert "Fix in PyTorch" in page and set(json.loads(render(a, "json"))["findings"][0]["fixes"]) >= {"cuda", "pytorch"}


# --- GPU generation ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("cc,tier", [("7.0", "pre_ampere"), ("7.5", "pre_ampere"), ("sm_75", "pre_ampere"), ("8.0", None), ("8.6", None), ("8.9", "fp8"), ("9.0", "fp8"), ("10.0", "fp8"), (None, None), ("", None)])
def test_tiers(cc, tier):
    assert advice.tier(advice.parse_cc(cc)) == tier


def test_choose_orders_and_picks_variants():
    fixes = {"pytorch": Fix("base pt"), "tensorflow": Fix("base tf"), "cuda": Fix("base cu"), "pytorch:pre_ampere": Fix("fp16 pt")}
    got = advice.choose(fixes, "tensorflow", "pre_ampere")
    assert list(got) == ["tensorflow", "pytorch", "cuda"]
    assert got["pytorch"].text == "fp16 pt" and got["tensorflow"].text == "base tf"
    assert advice.choose(fixes, "pytorch", None)["pytorch"].text == "base pt"
    # a JAX trace is never led by another framework's fix: none when the finding has no JAX fix
    assert advice.choose(fixes, "jax", "fp8") == {}
    assert list(advice.choose({**fixes, "jax": Fix("base jx")}, "jax", "fp8")) == ["jax", "pytorch", "tensorflow", "cuda"]
    assert list(advice.choose(fixes, "unknown", None)) == ["pytorch", "tensorflow", "cuda"]


def test_t4_trace_gets_fp16_not_tf32_or_bf16(sync_sample):
    """The PyTorch sample's GPU is a Tesla T4 (sm_75): TI007 must advise fp16 + GradScaler, never TF32/bf16."""
    assert [d.compute_capability for d in sync_sample.timeline.meta.devices] == ["7.5"]
    (f,) = [f for f in sync_sample.findings if f.code == "TI007"]
    pt = f.fixes["pytorch"]
    assert "GradScaler" in pt.code and "float16" in pt.code
    for word in ("bfloat16", "tf32", "TF32 for"):
        assert word not in pt.code
    assert "bfloat16" not in f.fixes["tensorflow"].code and "mixed_float16" in f.fixes["tensorflow"].code
    assert not any(":" in k for k in f.fixes)  # variant keys never reach a report


def test_keras_t4_trace_opens_on_tensorflow_fp16_advice():
    a = _analysis(corpus_file("tf/e4040-t4-keras-cnn"))
    assert a.framework == "tensorflow"
    page = render(a, "html")
    for f in a.findings:
        assert list(f.fixes)[0] == "tensorflow"
        assert _first_tab(page, f.code) == "tensorflow"
    (t7,) = [f for f in a.findings if f.code == "TI007"]
    assert "mixed_float16" in t7.fixes["tensorflow"].code and "bfloat16" not in t7.fixes["tensorflow"].code
    assert "Mixed precision in fp16 (with a grad scaler)" in t7.message and "TF32" not in t7.message
    assert json.loads(render(a, "json"))["trace"]["framework"] == "tensorflow"


def test_ampere_trace_keeps_the_base_advice(tmp_path):
    t = KinetoTrace()  # the writer's default device is an A100 (sm_80)
    for s in range(3):
        t.step(s, s * 1000.0, 1000.0)
        for i in range(15):
            t.kernel("volta_sgemm_128x64_nn", s * 1000.0 + 10 + i * 60, 55.0, launch_us=s * 1000.0 + i)
    a = _analysis(t.write(tmp_path / "t.json"))
    caps = {d.compute_capability for d in a.timeline.meta.devices}
    (f,) = [f for f in a.findings if f.code == "TI007"]
    if caps == {"8.0"}:
        assert "bfloat16" in f.fixes["pytorch"].code


# --- notebooks ----------------------------------------------------------------------------------------------


def test_repr_html_is_a_compact_self_contained_report(sync_sample):
    page = sync_sample._repr_html_()
    v = sync_sample.verdict
    assert page.startswith(f'<div class="ti-nb" data-verdict="{v["category"]}" data-framework="pytorch">')
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert v["headline"] in page
    # the ledger of the device, as shares that add up to the window
    shares = [float(x) for x in re.findall(r'<span style="width:([0-9.]+)%;background', page)]
    assert sum(shares) == pytest.approx(100.0, abs=0.05)
    assert 'data-bucket="idle_host_sync"' in page
    # every finding, largest first, with its leading fix and inline code as <code>
    assert re.findall(r'<tr data-code="(TI\d+)">', page) == [f.code for f in sync_sample.findings]
    assert "<summary>Fix in PyTorch</summary>" in page
    assert "<code>.item()</code>" in page
    assert "Generated trace:" in page
    assert len(page) < 40_000
