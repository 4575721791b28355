"""The ledger in every report: HTML stacked bars, text and Markdown tables, and the JSON ``ledger`` block."""

from __future__ import annotations

import json
import re

import traceinsight
from traceinsight.vocab.buckets import BUCKETS
from traceinsight.render import render

from .helpers.kineto_writer import KinetoTrace

US = 1_000
DATA = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _analysis(tmp_path):
    t = KinetoTrace()
    for i in range(4):
        b = i * 1000
        t.step(i + 1, b, 1000)
        t.annotation(DATA, b, 400)
        t.kernel("gemm", b + 420, 560, launch_us=b + 405)
    return traceinsight.analyze(str(t.write(tmp_path / "t.json")))


def test_json_report_carries_the_ledger(tmp_path):
    a = _analysis(tmp_path)
    j = json.loads(render(a, "json"))
    led = j["ledger"]
    assert led["buckets"] == list(BUCKETS)
    (dev,) = led["by_device"]
    assert dev["window_ns"] == 3000 * US + 560 * US
    assert sum(dev["ns"].values()) == dev["window_ns"]
    assert dev["ns"]["compute"] == 4 * 560 * US and dev["ns"]["idle_data_wait"] == 3 * 400 * US
    assert abs(dev["pct"]["idle_data_wait"] - 100.0 * 1200 / 3560) < 1e-3
    steps = {s["step"]: s for s in led["by_step"]}
    assert set(steps) == {1, 2, 3, 4}
    # step 2 (1000-2000 µs): data wait to 1400, untraced to the launch call (1405-1409), kernel 1420-1980, then
    # untraced to the step's end; step 1 starts at the first kernel (the window), step 4 ends at the last one
    assert steps[2]["ns"] == {"compute": 560 * US, "idle_data_wait": 400 * US, "idle_host_busy": 4 * US, "idle_untraced": (5 + 11 + 20) * US}
    assert steps[1]["window_ns"] == 580 * US and steps[4]["window_ns"] == 980 * US
    assert sum(s["window_ns"] for s in led["by_step"]) == dev["window_ns"]
    assert j["verdict"]["bucket"] == "idle_data_wait"
    assert j["kpis"]["avoidable_idle_ns"] >= j["kpis"]["est_savings_ns"]


def test_html_draws_a_stacked_bar_per_device_and_per_step(tmp_path):
    a = _analysis(tmp_path)
    h = render(a, "html")
    sec = re.search(r'<section class="card" id="ledger">.*?</section>', h, flags=re.S).group(0)
    dev_bar = re.search(r'<div class="lrow" data-rank="0" data-device="0" data-window-ns="(\d+)">(.*?)</div>\s*</div>', sec, flags=re.S)
    window = int(dev_bar.group(1))
    ns = [int(x) for x in re.findall(r'data-ns="(\d+)"', dev_bar.group(2))]
    assert sum(ns) == window == 3560 * US
    widths = [float(x) for x in re.findall(r"width:([\d.]+)%", dev_bar.group(2))]
    assert abs(sum(widths) - 100.0) < 0.01
    assert len(re.findall(r'class="lrow step" data-step="\d+"', sec)) == 4
    assert "idle: data wait" in sec and "lb-idle_data_wait" in sec
    assert "http" not in sec  # self-contained


def test_text_and_markdown_show_the_table(tmp_path):
    a = _analysis(tmp_path)
    md = render(a, "md")
    assert "**Where the GPU time went**" in md
    row = next(line for line in md.splitlines() if line.startswith("| GPU 0 |"))
    assert "33.7%" in row  # 1.2 ms of data wait in a 3.56 ms window
    assert "| step | time |" in md
    txt = render(a, "text")
    assert "Where the GPU time went" in txt and "data wait" in txt and "33.7%" in txt


def test_no_gpu_trace_renders_without_a_ledger(tmp_path):
    t = KinetoTrace()
    t.cpu_op("aten::add", 0, 100)
    a = traceinsight.analyze(str(t.write(tmp_path / "t.json")))
    assert json.loads(render(a, "json"))["ledger"]["by_device"] == []
    assert 'id="ledger"' not in render(a, "html")
    assert "Where the GPU time went" not in render(a, "md")
