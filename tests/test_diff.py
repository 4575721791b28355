"""``traceinsight diff BASE HEAD``: comparability, step change with its interval, the ledger bucket that moved,
kernels matched across vendors, the noise-aware gate and its exit codes, and every output format.

Helper-written traces (tests/helpers/model_traces.py) pin the logic without the corpus; the real before/after pair
(ResNet-50, DataLoader num_workers 0 -> 4 on a V100) checks it on real data when the corpus is there.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import traceinsight
from traceinsight.cli.app import app
from traceinsight.delta import diff
from traceinsight.delta.stats import MIN_SAMPLES, shift
from traceinsight.vocab.errors import EXIT_INCONCLUSIVE, EXIT_NOT_COMPARABLE, EXIT_OK, EXIT_SLOWER
from traceinsight.vocab.kernels import classify

from .conftest import corpus_file
from .helpers.model_traces import GEMM, write_model


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("diff")
    return {
        "waits": write_model(d / "waits.json", data_wait_us=3000, seed=1),
        "fixed": write_model(d / "fixed.json", seed=2),
        "fixed2": write_model(d / "fixed2.json", seed=3),
        "amd": write_model(d / "amd.json", vendor="amd", seed=4),
        "conv": write_model(d / "conv.json", model="conv", seed=5),
        "batch64": write_model(d / "batch64.json", batch=64, seed=6),
        "slow12": write_model(d / "slow12.json", slow_factor=1.12, seed=7),
        "noisy": write_model(d / "noisy.json", steps=5, jitter_us=6000, seed=8),
        "noisy_slow": write_model(d / "noisy_slow.json", steps=5, jitter_us=6000, extra_host_us=1500, seed=9),
        "two_steps": write_model(d / "two_steps.json", steps=2, seed=10),
        "three_slow": write_model(d / "three_slow.json", steps=3, slow_factor=1.12, seed=11),
    }


def run(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["diff", *map(str, args)])
    return res.exit_code, res.output


# --- statistics ---------------------------------------------------------------------------------------------
def test_shift_is_the_median_change_with_an_interval_around_it():
    base = np.array([100.0, 102, 98, 101, 99, 100, 103, 97])
    s = shift(base, base - 20)
    assert s.estimate == pytest.approx(-20.0)
    assert s.low <= -20 <= s.high and s.high < 0  # clearly faster: the interval excludes no change
    same = shift(base, base)
    assert same.estimate == 0 and same.low < 0 < same.high  # identical samples: no change, within the noise
    assert shift(base, base - 20) == s  # seeded: the same answer every time


def test_shift_has_no_interval_below_the_minimum_samples():
    s = shift([100.0] * (MIN_SAMPLES - 1), [50.0] * (MIN_SAMPLES - 1))
    assert s.estimate == -50 and not s.has_interval


def test_kernel_classes_are_vendor_neutral():
    assert classify(GEMM["nvidia"]) == classify(GEMM["amd"]) == "gemm"
    assert classify("flash_fwd_kernel<Flash_fwd_kernel_traits<128>>") == "attention"
    assert classify("ncclDevKernel_AllReduce_Sum_f32_RING_LL") == "communication"
    assert classify("Memcpy HtoD (Pageable -> Device)", "memcpy") == "copy"
    assert classify("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>") == "elementwise"
    assert classify("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float>()") == "elementwise"


# --- verdicts on helper traces -------------------------------------------------------------------------------
def test_removing_the_data_wait_is_faster_and_the_data_wait_bucket_fell(traces):
    d = diff(traces["waits"], traces["fixed"]).data
    assert d["verdict"] == "faster"
    s = d["step"]
    assert s["high_ns"] < 0 and s["low_ns"] <= s["change_ns"] <= s["high_ns"]
    assert s["change_ns"] == pytest.approx(-3.0e6, rel=0.05)  # the 3 ms wait per step
    top = d["ledger"][0]
    # the first step's wait lies before the GPU's first work, outside the ledger's window: 9 of 10 waits are booked
    assert top["bucket"] == "idle_data_wait" and top["change_ns"] == pytest.approx(-2.7e6, rel=0.05)
    assert "data wait" in d["sentence"]
    # the what-if check: BASE's TI005 predicted the step without the wait; HEAD measured it
    w = {x["code"]: x for x in d["what_if"]}
    assert w["TI005"]["status"] == "fixed"
    assert w["TI005"]["predicted_step_ns"] == pytest.approx(s["head_median_ns"], rel=0.05)
    assert "TI005" in {f["code"] for f in d["findings"]["fixed"]}


def test_reversed_fails_the_gate_with_its_exit_code(traces):
    code, out = run(traces["fixed"], traces["waits"], "--fail-if-slower", "5")
    assert code == EXIT_SLOWER, out
    assert "fail" in out.lower()


def test_a_trace_against_itself_is_no_change_and_passes(traces):
    d = diff(traces["fixed"], traces["fixed"], fail_if_slower=5)
    assert d.verdict == "no measurable change" and d.gate == "pass"
    assert d.data["step"]["change_ns"] == 0
    assert all(r["change_ns"] == 0 for r in d.data["ledger"])
    code, _ = run(traces["fixed"], traces["fixed"], "--fail-if-slower", "5")
    assert code == EXIT_OK


def test_two_runs_of_one_setup_are_no_measurable_change(traces):
    d = diff(traces["fixed"], traces["fixed2"], fail_if_slower=5)
    assert d.verdict == "no measurable change" and d.gate == "pass"


def test_different_models_are_not_comparable_with_their_own_exit_code(traces):
    d = diff(traces["fixed"], traces["conv"]).data
    assert d["verdict"] == "not comparable" and d["step"] is None
    assert d["comparability"]["in_common_pct"] < 80
    assert any("aten::linear" in r for r in d["comparability"]["reasons"])
    code, out = run(traces["fixed"], traces["conv"], "--fail-if-slower", "5")
    assert code == EXIT_NOT_COMPARABLE and "Not comparable" in out
    code, _ = run(traces["fixed"], traces["conv"])  # refused without a gate too
    assert code == EXIT_NOT_COMPARABLE


def test_one_model_on_two_vendors_compares_by_framework_op(traces):
    d = diff(traces["fixed"], traces["amd"]).data
    assert d["comparability"]["comparable"] and d["comparability"]["matched_by"] == "framework_ops"
    ctx = {c["what"]: c for c in d["context"]}
    assert ctx["vendor"]["differs"] and ctx["vendor"]["base"] == "NVIDIA" and ctx["vendor"]["head"] == "AMD"
    k = {r["name"]: r for r in d["kernels"]}
    assert k[GEMM["amd"]]["status"] == "matched" and k[GEMM["amd"]]["matched_with"] == [GEMM["nvidia"]]
    assert k[GEMM["nvidia"]]["matched_with"] == [GEMM["amd"]] and k[GEMM["amd"]]["op"] == "aten::linear"
    gemm = {c["class"]: c for c in d["kernel_classes"]}["gemm"]
    assert gemm["base_per_step"] == gemm["head_per_step"] == 6  # six linear layers a step on both
    assert d["verdict"] != "not comparable"


def test_a_larger_batch_with_a_longer_step_reads_as_the_gain_per_sample(traces):
    d = diff(traces["fixed"], traces["batch64"], fail_if_slower=5).data
    assert d["comparability"]["batch_base"] == 32 and d["comparability"]["batch_head"] == 64
    assert d["step"]["change_ns"] > 0  # the step got longer...
    p = d["per_sample"]
    assert p is not None and p["high_ns"] < 0  # ...but each sample got cheaper
    assert d["verdict"] == "faster" and d["gate"]["result"] == "pass"


def test_a_batch_equal_to_a_channel_count_still_matches_shapes(tmp_path):
    """Batch 32 -> 64 on a conv net with 64 channels: the weight [64, 64, 3, 3] leads with 64 on both sides and
    must not be read as a batch dimension, while the activations [32|64, 64, 56, 56] must."""
    a = write_model(tmp_path / "c32.json", model="conv", batch=32, seed=1)
    b = write_model(tmp_path / "c64.json", model="conv", batch=64, seed=2)
    d = diff(a, b).data
    assert d["comparability"]["comparable"] and d["comparability"]["shapes_in_common_pct"] == 100.0
    assert d["per_sample"] is not None and d["per_sample"]["batch_head"] == 64


def test_changed_shapes_at_one_batch_are_not_comparable(tmp_path):
    from .helpers.kineto_writer import KinetoTrace

    def write(p: Path, width: int) -> Path:
        t = KinetoTrace()
        for s in range(5):
            t0 = s * 2000.0
            for i in range(4):
                t.cpu_op("aten::linear", t0 + 10 + i * 300, 50, args={"Input Dims": [[32, width], [width, width], [width]]})
                t.kernel("ampere_sgemm_128x64_tn", t0 + 30 + i * 300, 200, launch_us=t0 + 20 + i * 300)
            t.step(s + 1, t0, 1500)
        return t.write(p)

    d = diff(write(tmp_path / "a.json", 512), write(tmp_path / "b.json", 1024)).data
    assert d["verdict"] == "not comparable" and d["comparability"]["in_common_pct"] == 100.0
    assert "input shapes" in d["comparability"]["reasons"][0]


def test_slower_kernels_are_slower_and_the_kernel_table_says_which(traces):
    d = diff(traces["fixed"], traces["slow12"], fail_if_slower=5).data
    assert d["verdict"] == "slower" and d["gate"]["result"] == "fail"
    assert d["ledger"][0]["bucket"] == "compute" and d["ledger"][0]["change_ns"] > 0
    assert d["kernels"][0]["name"] == GEMM["nvidia"] and d["kernels"][0]["change_ns_per_step"] > 0
    assert d["ops"][0]["name"] == "aten::linear"
    assert diff(traces["fixed"], traces["slow12"], fail_if_slower=50).gate == "pass"  # slower, but within 50 %


def test_a_slowdown_within_the_noise_is_inconclusive(traces):
    d = diff(traces["noisy"], traces["noisy_slow"], fail_if_slower=5).data
    assert d["step"]["change_pct"] > 5 and d["step"]["low_ns"] <= 0  # slower by the median, not outside the noise
    assert d["gate"]["result"] == "inconclusive"
    code, _ = run(traces["noisy"], traces["noisy_slow"], "--fail-if-slower", "5")
    assert code == EXIT_INCONCLUSIVE


def test_too_few_steps_give_no_interval(traces):
    """2 and 3 steps: 10 ways to split 5 samples, so even a complete separation has a one-sided chance of 1/10
    under no change: no interval, no verdict, and the power line says how many steps would do."""
    d = diff(traces["two_steps"], traces["three_slow"], fail_if_slower=5).data
    assert d["step"]["low_ns"] is None and d["step"]["separated"] == 1
    assert d["verdict"] == "inconclusive" and d["gate"]["result"] == "inconclusive" and d["decided_by"] is None
    assert d["power"]["detectable_pct"] is None and d["power"]["sentence"].startswith("with 2 and 3 steps no change can be told from noise")
    # 2 against 10 steps can give an interval (66 splits): the interval, not the count, decides
    assert diff(traces["two_steps"], traces["slow12"]).data["step"]["low_ns"] is not None


def test_busy_compared_is_the_steady_states_when_one_side_starts_up(tmp_path, traces):
    """One run profiled from program start (200 ms of start-up before its first step, booked as warm-up), the other
    from its first step: the same loop, so the same steady-state busy %, which is what the diff compares (the whole
    window's figure of the cold run is a few %)."""
    cold_path = write_model(tmp_path / "cold.json", startup_us=200_000, seed=2)
    cold = traceinsight.analyze(cold_path)
    led = cold.ledger.totals()
    assert led["idle_warmup"] > 0.85 * sum(led.values())
    steady = round(100 * (led["compute"] + led["copy"] + led["communication"]) / (sum(led.values()) - led["idle_warmup"]), 1)
    assert cold.kpis["gpu_busy_pct"] < 15 < 85 < steady
    d = diff(cold_path, traces["fixed"]).data
    assert d["busy_pct"]["base"] == steady
    assert d["busy_pct"]["head"] == pytest.approx(traceinsight.analyze(traces["fixed"]).kpis["gpu_busy_pct"], abs=0.05)
    assert abs(d["busy_pct"]["change"]) < 1 and d["verdict"] == "no measurable change"


def test_a_report_with_a_damaged_verdict_ledger_falls_back_to_the_window_busy(traces, tmp_path):
    """The verdict block is read only for the steady busy %: a figure there past any float (a 401-digit integer)
    is damage, and the diff uses the whole window's busy % instead of failing."""
    res = CliRunner().invoke(app, ["analyze", str(traces["fixed"]), "-f", "json", "-o", str(tmp_path / "r.json")])
    assert res.exit_code == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    doc["verdict"]["window_ns"] = 10**400
    doc["verdict"]["ledger_ns"]["idle_warmup"] = 1
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    code, out = run(tmp_path / "bad.json", traces["fixed"])
    assert code == EXIT_OK, out
    d = diff(tmp_path / "bad.json", traces["fixed"]).data
    assert d["busy_pct"]["base"] == doc["kpis"]["gpu_busy_pct"]


# --- reports as inputs, JSON schema, outputs -----------------------------------------------------------------
def test_json_reports_diff_like_their_traces(traces, tmp_path):
    for name in ("waits", "fixed"):
        res = CliRunner().invoke(app, ["analyze", str(traces[name]), "-f", "json", "-o", str(tmp_path / f"{name}.json")])
        assert res.exit_code == 0, res.output
    rep = json.loads((tmp_path / "waits.json").read_text())
    w = rep["workload"]
    assert len(w["steps"]) == 10 and w["batch"] == 32 and {o["name"] for o in w["ops"]} == {"aten::linear", "aten::relu"}
    assert {k["class"] for k in w["kernels"]} == {"gemm", "elementwise"}
    from_reports = diff(tmp_path / "waits.json", tmp_path / "fixed.json").data
    from_traces = diff(traces["waits"], traces["fixed"]).data
    for key in ("verdict", "step", "ledger", "kernel_classes", "what_if"):
        assert from_reports[key] == from_traces[key], key
    mixed = diff(tmp_path / "waits.json", traces["fixed"]).data  # a saved main report against a fresh trace
    assert mixed["step"] == from_traces["step"]


def test_numbers_later_reports_add_are_compared(traces, tmp_path):
    """Peak memory or MFU, once a report carries them (in ``kpis`` or a ``memory``/``efficiency`` block), show up
    in the diff's ``kpis`` without the diff knowing them."""
    for name, peak, mfu in (("a", 10e9, 31.0), ("b", 12e9, 35.5)):
        res = CliRunner().invoke(app, ["analyze", str(traces["fixed"]), "-f", "json", "-o", str(tmp_path / f"{name}.json")])
        assert res.exit_code == 0
        doc = json.loads((tmp_path / f"{name}.json").read_text())
        doc["kpis"]["mfu_pct"] = mfu
        doc["memory"] = {"peak_bytes": peak, "note": "text is skipped",
                         "devices": [{"rank": 0, "peak_allocated_bytes": peak / 2, "headroom_bytes": 70e9}, {"rank": 1, "peak_allocated_bytes": peak, "headroom_bytes": 68e9}]}
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    k = {x["name"]: x for x in diff(tmp_path / "a.json", tmp_path / "b.json").data["kpis"]}
    assert k["memory.peak_bytes"]["change"] == pytest.approx(2e9) and k["mfu_pct"]["change"] == pytest.approx(4.5)
    assert "memory.note" not in k
    assert k["memory.peak_allocated_bytes"]["base"] == 10e9 and k["memory.peak_allocated_bytes"]["head"] == 12e9  # the largest device
    assert k["memory.headroom_bytes"]["base"] == 68e9  # the tightest device
    html = diff(tmp_path / "a.json", tmp_path / "b.json").render("html")
    assert 'data-kpi="memory.peak_bytes"' in html and 'data-kpi="mfu_pct"' in html


def test_the_mfu_coverage_note_speaks_for_both_sides_in_the_markdown_table(traces, tmp_path):
    """The note on what MFU's FLOPs cover is about the row (BASE and HEAD), so the Markdown table puts it with the
    label, as the HTML does; after HEAD's figure a reader takes it for HEAD's alone."""
    for name, mfu, cov in (("a", 28.6, 100), ("b", 35.8, 100)):
        res = CliRunner().invoke(app, ["analyze", str(traces["fixed"]), "-f", "json", "-o", str(tmp_path / f"{name}.json")])
        assert res.exit_code == 0
        doc = json.loads((tmp_path / f"{name}.json").read_text())
        doc["efficiency"] = {"mfu_pct": mfu, "classes": [{"cls": "gemm", "time_ns": 100, "modelled_ns": cov}]}
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    md = diff(tmp_path / "a.json", tmp_path / "b.json").render("md")
    (row,) = [line for line in md.splitlines() if line.startswith("| MFU")]
    assert row == "| MFU (counted FLOPs cover all of the GEMM/convolution/attention time) | 28.6% | 35.8% |"


def test_a_report_without_a_workload_is_refused_with_a_reason(traces, tmp_path):
    res = CliRunner().invoke(app, ["analyze", str(traces["fixed"]), "-f", "json", "-o", str(tmp_path / "r.json")])
    assert res.exit_code == 0
    old = json.loads((tmp_path / "r.json").read_text())
    del old["workload"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    d = diff(tmp_path / "old.json", traces["fixed"]).data
    assert d["verdict"] == "not comparable" and "analyse the trace again" in d["comparability"]["reasons"][0]


def _schema() -> dict:
    return json.loads(resources.files("traceinsight.delta").joinpath("schema.json").read_text())


@pytest.mark.parametrize("pair", [("waits", "fixed"), ("fixed", "conv"), ("fixed", "amd"), ("fixed", "batch64"), ("two_steps", "fixed")])
def test_diff_json_validates_against_its_schema(traces, pair):
    jsonschema = pytest.importorskip("jsonschema")
    res = CliRunner().invoke(app, ["diff", str(traces[pair[0]]), str(traces[pair[1]]), "-f", "json", "--fail-if-slower", "5"])
    doc = json.loads(res.stdout)
    jsonschema.validate(doc, _schema())
    assert doc["schema_version"] == 2
    from traceinsight.delta.render import render

    for fmt in ("text", "md", "html"):  # every verdict renders in every format
        out = render(doc, fmt)
        assert doc["verdict"] in out.lower() or doc["verdict"].capitalize() in out


def test_the_schema_rejects_a_wrong_document(traces):
    jsonschema = pytest.importorskip("jsonschema")
    doc = diff(traces["waits"], traces["fixed"]).data
    doc["verdict"] = "quicker"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, _schema())


def test_docs_list_every_top_level_field(repo, traces):
    text = (repo / "docs" / "diff-json.md").read_text()
    top = text.split("## Top level", 1)[1].split("\n## ", 1)[0]
    documented = {name for cell in re.findall(r"^\| (`[^|]+) \|", top, re.M) for name in re.findall(r"`([a-z_]+)`", cell)}
    doc = diff(traces["waits"], traces["fixed"]).data
    assert set(doc) <= documented, set(doc) - documented


def test_markdown_html_and_text_carry_the_verdict(traces, tmp_path):
    code, _ = run(traces["waits"], traces["fixed"], "-f", "md,html,json,text", "-o", tmp_path)
    assert code == EXIT_OK
    md = (tmp_path / "traceinsight-diff.md").read_text()
    assert md.startswith("## ") and "**faster**" in md and "idle: data wait" in md and len(md) < 60_000
    html = (tmp_path / "traceinsight-diff.html").read_text()
    assert "Content-Security-Policy" in html and "default-src 'none'" in html and "<script" not in html
    assert 'data-verdict="faster"' in html and 'data-bucket="idle_data_wait"' in html
    assert html.count('class="lbar"') >= 2 * 10  # both ledgers, per step, side by side
    text = (tmp_path / "traceinsight-diff.txt").read_text()
    assert "Faster" in text and "idle: data wait" in text


def test_counts_per_step_are_whole_or_to_a_tenth_in_every_format(traces):
    """A mean count over steps (131 launches over 3 steps) shows as 43.7, not 43.6666, in Markdown, HTML and text;
    a whole count stays whole."""
    from traceinsight.delta.render import count, render_html, render_md, render_text

    assert [count(43.6666), count(265.0), count(1130.2), count(20.04), count(None)] == ["43.7", "265", "1130.2", "20", "—"]
    d = diff(traces["waits"], traces["fixed"]).data
    assert d["kernel_classes"]
    d["kernel_classes"][0]["base_per_step"], d["kernel_classes"][0]["head_per_step"] = 20.0, 43.6666
    for text in (render_md(d), render_html(d), render_text(d, width=200)):
        assert "20 → 43.7" in text and "43.6666" not in text


def test_hostile_names_are_escaped_in_every_format(tmp_path):
    from .helpers.kineto_writer import KinetoTrace

    def write(p: Path, kernel: str) -> Path:
        t = KinetoTrace()
        for s in range(4):
            t0 = s * 1000.0
            t.cpu_op("aten::mm", t0 + 10, 50, args={"Input Dims": [[8, 8], [8, 8]]})
            t.kernel(kernel, t0 + 30, 400 + 10 * s, launch_us=t0 + 20)
            t.step(s + 1, t0, 900)
        return t.write(p)

    evil = '<script>alert(1)</script>|@everyone `x`'
    a, b = write(tmp_path / "a.json", "volta_sgemm_128x64_nn"), write(tmp_path / "b.json", evil)
    d = diff(a, b)
    assert "<script>alert" not in d.render("html")
    md = d.render("md")
    assert "<script>" not in md and "@everyone" not in md
    assert "\x1b" not in d.render("text")


def test_bad_inputs_are_one_line_errors(tmp_path, traces):
    code, out = run(tmp_path / "missing.json", traces["fixed"])
    assert code == 3 and "Traceback" not in out
    code, out = run(traces["fixed"], traces["fixed"], "-f", "pdf")
    assert code == 2
    code, out = run(traces["fixed"], traces["waits"], "-o", traces["fixed"])
    assert code == 2 and "refusing" in out


def test_api_accepts_analyses(traces):
    a, b = traceinsight.analyze(traces["waits"]), traceinsight.analyze(traces["fixed"])
    d = traceinsight.diff(a, b)
    assert d.verdict == "faster" and d.gate is None and "faster" in repr(d).lower()
    frame = d._repr_html_()  # Jupyter: the page in a sandboxed frame, its markup escaped into srcdoc
    assert frame.startswith("<iframe sandbox srcdoc=") and "<style>" not in frame and "&lt;style&gt;" in frame


# --- whole jobs ------------------------------------------------------------------------------------------------
def test_two_job_folders_compare_per_rank_and_name_the_fixed_straggler(tmp_path):
    for run_name, slow in (("before", 1.5), ("after", 1.0)):
        for rank in range(4):
            write_model(tmp_path / run_name / f"rank{rank}.json", rank=rank, world_size=4, seed=rank, slow_factor=slow if rank == 2 else 1.0)
    d = diff(tmp_path / "before", tmp_path / "after").data
    r = d["ranks"]
    assert [row["rank"] for row in r["rows"]] == [0, 1, 2, 3]
    assert r["straggler_base"]["rank"] == 2 and r["straggler_base"]["is_straggler"]
    assert not r["straggler_head"]["is_straggler"]
    assert d["verdict"] == "faster"  # the job's step is its slowest rank's
    assert "straggler fixed: rank 2" in d_render(d)
    from traceinsight.delta.render import render

    html = render(d, "html")
    assert html.count("<tr data-rank=") == 4 and "straggler fixed: rank 2" in html
    assert "| 2 |" in render(d, "md")


def d_render(d: dict) -> str:
    from traceinsight.delta.render import render_text

    return render_text(d)


# --- the real before/after pair --------------------------------------------------------------------------------
def test_corpus_resnet50_num_workers_0_to_4():
    nw0 = corpus_file("pytorch/kineto_resnet50_nw0_v100.pt.trace.json.gz")
    nw4 = corpus_file("pytorch/kineto_resnet50_nw4_v100.pt.trace.json.gz")
    d = diff(nw0, nw4).data
    assert d["comparability"]["comparable"] and d["verdict"] == "faster"
    s = d["step"]
    assert s["change_pct"] < -20  # about 176 -> 127 ms per step
    # two slow HEAD steps (host busy) keep the step interval from excluding 0; the data wait fell in every step
    assert d["decided_by"] == "buckets" and d["evidence"]["moved"] == ["idle_data_wait"] and d["evidence"]["accounts"]
    assert {(o["side"], o["sample"]) for o in d["outliers"]} >= {("head", 5), ("head", 9)}
    assert d["ledger"][0]["bucket"] == "idle_data_wait" and d["ledger"][0]["change_ns"] < -30e6
    assert "every BASE step's data wait" in d["sentence"] and "HEAD step 9" in d["sentence"]
    assert "TI005" in {w["code"] for w in d["what_if"]}
    code, out = run(nw4, nw0, "--fail-if-slower", "5")
    assert code == EXIT_SLOWER, out
    code, _ = run(nw0, nw0, "--fail-if-slower", "5")
    assert code == EXIT_OK


def test_corpus_second_num_workers_capture_and_its_reversal_fail_the_gate():
    """The second nw0 capture against nw4: one rank test per bucket finds the data wait down in every steady step
    (the first step's ledger is clipped by the GPU window and left out); reversed, the gate fails with exit 1."""
    nw0 = corpus_file("judged/kineto_resnet50_nw0_run2_v100.pt.trace.json.gz")
    nw4 = corpus_file("pytorch/kineto_resnet50_nw4_v100.pt.trace.json.gz")
    d = diff(nw0, nw4).data
    assert d["verdict"] == "faster" and d["decided_by"] == "buckets" and d["step"]["low_ns"] < 0 < d["step"]["high_ns"]
    assert {(c["side"], c["step"]) for c in d["evidence"]["clipped"]} == {("base", 16), ("head", 5)}
    code, out = run(nw4, nw0, "--fail-if-slower", "5")
    assert code == EXIT_SLOWER, out


def test_recorded_cold_capture_is_not_comparable_as_one_time_work():
    """A torch.compile run profiled from its first step against the warm run: the reason names the one-time side."""
    h100 = Path(__file__).resolve().parents[1] / "sample_traces" / "h100"
    d = diff(h100 / "compile_cold.json.gz", h100 / "compile_dynamic.json.gz").data
    assert d["verdict"] == "not comparable"
    assert d["comparability"]["reasons"][0].startswith("BASE's window is one-time work (98% of it warm-up")


def test_corpus_two_models_are_not_comparable():
    nw0 = corpus_file("pytorch/kineto_resnet50_nw0_v100.pt.trace.json.gz")
    other = corpus_file("pytorch/hta_alexnet_a100_cudasync.json.gz")
    code, out = run(nw0, other)
    assert code == EXIT_NOT_COMPARABLE and "Not comparable" in out


def test_without_step_markers_the_gpu_window_is_compared_once(tmp_path):
    from .helpers.kineto_writer import KinetoTrace

    def write(p: Path, dur: float) -> Path:
        t = KinetoTrace()
        at = 10.0
        for _ in range(20):  # the host waits for each kernel before launching the next
            t.cpu_op("aten::mm", at, 50, args={"Input Dims": [[64, 64], [64, 64]]})
            t.kernel("ampere_sgemm_128x64_tn", at + 20, dur, launch_us=at + 10)
            at += 20 + dur + 30
        return t.write(p)

    a, slow = write(tmp_path / "a.json", 300), write(tmp_path / "slow.json", 1100)
    same = diff(a, a, fail_if_slower=5).data
    assert same["step"]["basis"] == "gpu_window" and same["step"]["low_ns"] is None
    assert same["verdict"] == "inconclusive" and same["gate"]["result"] == "pass"  # no change, nothing to doubt
    worse = diff(a, slow, fail_if_slower=5).data
    assert worse["step"]["change_ns"] > 0 and worse["gate"]["result"] == "inconclusive"  # slower, but one sample
    assert worse["what_if"] == [] and "GPU window" in worse["sentence"]


@pytest.mark.parametrize("damage", [
    {"workload": {"steps": [{"rank": "x", "step": 1, "dur_ns": 5}]}},
    {"workload": {"steps": [{"rank": 0, "step": 1, "dur_ns": 1.5e400}]}},
    {"workload": {"kernels": "not a list"}},
    {"ledger": {"by_step": [{"step": 1, "ns": {"compute": "many"}}]}},
    {"summary": {"devices": [{"rank": 0, "busy_pct": []}]}},
])
def test_a_damaged_report_is_a_one_line_usage_error(traces, tmp_path, damage):
    res = CliRunner().invoke(app, ["analyze", str(traces["fixed"]), "-f", "json", "-o", str(tmp_path / "r.json")])
    assert res.exit_code == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    for key, value in damage.items():
        doc[key] = {**doc[key], **value} if isinstance(doc.get(key), dict) else value
    (tmp_path / "bad.json").write_text(json.dumps(doc).replace("1.5e+400", "1.5e400"))
    code, out = run(tmp_path / "bad.json", traces["fixed"])
    assert code == 2 and "Traceback" not in out and "bad.json" in out and len(out.strip().splitlines()) == 1


# --- the decision rule (docs/diff.md), one case each, on helper-written pairs --------------------------------
WAITS = [3000.0, 3100.0, 2950.0, 3050.0, 3000.0, 2980.0]


@pytest.fixture(scope="module")
def rule_pairs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("rule")
    return {
        "waits": write_model(d / "waits.json", steps=6, step_data_wait_us=WAITS, seed=21),
        # the fix, with one slow step (9 ms of host time at its end): the step interval crosses 0
        "fixed_outlier": write_model(d / "fixed_outlier.json", steps=6, step_extra_host_us={4: 9000.0}, seed=22),
        "waits3": write_model(d / "waits3.json", steps=3, step_data_wait_us=WAITS[:3], seed=23),
        "fixed3": write_model(d / "fixed3.json", steps=2, seed=24),
        "region": write_model(d / "region.json", steps=6, compiled_region=True, seed=25),
        "region_slow": write_model(d / "region_slow.json", steps=6, compiled_region=True, slow_factor=1.2, seed=26),
    }


def test_an_outlier_step_is_named_and_a_consistent_bucket_decides(rule_pairs):
    d = diff(rule_pairs["waits"], rule_pairs["fixed_outlier"], fail_if_slower=5).data
    s = d["step"]
    assert s["low_ns"] < 0 < s["high_ns"]  # the step test alone cannot tell: one HEAD step is 9 ms slow
    assert d["verdict"] == "faster" and d["decided_by"] == "buckets"
    ev = d["evidence"]
    assert ev["moved"] == ["idle_data_wait"] and ev["accounts"]
    wait = next(r for r in ev["buckets"] if r["bucket"] == "idle_data_wait")
    assert wait["separated"] == -1 and wait["p_value"] == pytest.approx(2 / 924, abs=1e-5)  # 6 and 6: every split counted
    assert "every BASE step's data wait (2.95 ms–3.10 ms) is above every HEAD step's" in d["sentence"]
    (o,) = [o for o in d["outliers"] if o["side"] == "head"]
    assert o["sample"] == 4 and o["excess_ns"] > 8e6 and o["bucket"] == "idle_untraced"
    assert "HEAD step 4 (+" in d["sentence"]


def test_the_reversed_fix_fails_the_gate_with_exit_1_not_5(rule_pairs):
    d = diff(rule_pairs["fixed_outlier"], rule_pairs["waits"], fail_if_slower=5).data
    assert d["verdict"] == "slower" and d["gate"]["result"] == "fail"
    code, out = run(rule_pairs["fixed_outlier"], rule_pairs["waits"], "--fail-if-slower", "5")
    assert code == EXIT_SLOWER, out


def test_a_consistent_bucket_over_too_few_steps_decides_nothing(rule_pairs):
    """3 and 2 steps: the data wait is lower in every HEAD step, but 10 splits cannot make that significant."""
    d = diff(rule_pairs["waits3"], rule_pairs["fixed3"], fail_if_slower=5).data
    assert d["verdict"] == "inconclusive" and d["decided_by"] is None and d["evidence"]["moved"] == []
    assert d["power"]["detectable_pct"] is None and "record \u2265" in d["power"]["sentence"]


def test_power_says_what_six_and_six_steps_can_detect(rule_pairs):
    p = diff(rule_pairs["waits"], rule_pairs["fixed_outlier"]).data["power"]
    assert (p["n_base"], p["n_head"]) == (6, 6) and p["detectable_pct"] > 0 and p["steps_for_5pct"] >= 4
    assert p["sentence"].startswith(f"with 6 and 6 steps (spread {p['spread_pct']:.1f}% of the BASE median), changes under {p['detectable_pct']:.1f}%")


def test_compiled_regions_are_the_samples_without_step_markers(rule_pairs):
    d = diff(rule_pairs["region"], rule_pairs["region_slow"], fail_if_slower=5).data
    smp = d["samples"]
    assert (smp["basis"], smp["name"], smp["base_count"], smp["head_count"]) == ("compiled_region", "Torch-Compiled Region", 6, 6)
    assert d["step"]["basis"] == "compiled_region" and d["step"]["low_ns"] > 0
    assert d["verdict"] == "slower" and d["gate"]["result"] == "fail" and d["sentence"].startswith("Slower: compiled region +")
    md, html, text = (diff(rule_pairs["region"], rule_pairs["region_slow"]).render(f) for f in ("md", "html", "text"))
    for out in (md, html, text):
        assert "the compiled region" in out and "runs 6 and 6 times" in out


def test_attention_backends_pair_only_at_a_similar_time_within_one_op():
    from traceinsight.delta.compare import kernel_diff
    from traceinsight.delta.side import Side

    def side(kernels):
        return Side({"workload": {"kernels": kernels}}, "x")

    k = lambda name, ns, op="Torch-Compiled Region: 0/0", cls="other": {"name": name, "class": cls, "op": op, "count": 4, "total_ns": int(4 * ns), "per_step": 1.0, "ns_per_step": ns}
    base = side([k("aiter::fmha_fwd_hd128_bf16_rtz", 30e6, cls="attention"), k("triton_red_fused_mean_0", 3e6, cls="elementwise")])
    head = side([k("sage_fwd", 30.5e6), k("sage_quant_kernel", 2.7e6), k("triton_red_fused_mean_1", 3e6)])
    rows, classes = kernel_diff(base, head)
    by = {r["name"]: r for r in rows}
    assert by["sage_fwd"]["class"] == "attention" and by["sage_fwd"]["matched_with"] == ["aiter::fmha_fwd_hd128_bf16_rtz"]
    assert by["sage_quant_kernel"]["class"] == "elementwise"
    # the two reductions pair (same class and op, time within 2x); the quantiser is new, not "renamed" to the FMHA
    assert by["triton_red_fused_mean_1"]["matched_with"] == ["triton_red_fused_mean_0"] and by["sage_quant_kernel"]["status"] == "new"
    att = next(c for c in classes if c["class"] == "attention")
    assert att["change_ns_per_step"] == pytest.approx(0.5e6)
    # a kernel of a very different time from the same op and class is removed + new, never renamed
    rows, _ = kernel_diff(side([k("flash_fwd_big", 30e6, cls="attention")]), side([k("fmha_small", 1e6, cls="attention")]))
    assert {r["name"]: r["status"] for r in rows} == {"flash_fwd_big": "vanished", "fmha_small": "new"}


def test_every_format_and_the_mcp_tool_carry_the_same_outcome_and_figures(rule_pairs, tmp_path):
    """The decision, its evidence lines and the labelled figures are read from one document: JSON, Markdown,
    HTML, text and the agent's ``diff`` tool say the same thing."""
    from traceinsight.agent.tools import Session
    from traceinsight.delta.render import evidence_lines, figure, shown_figures

    for name in ("waits", "fixed_outlier"):
        (tmp_path / f"{name}.json").write_bytes(rule_pairs[name].read_bytes())
    d = diff(rule_pairs["waits"], rule_pairs["fixed_outlier"], fail_if_slower=5)
    doc = json.loads(d.render("json"))
    s = Session([tmp_path])
    ids = [s.analyze(f"{n}.json")["analysis_id"] for n in ("waits", "fixed_outlier")]
    mcp = s.diff(*ids, fail_if_slower=5)["diff"]
    for key in ("verdict", "decided_by", "sentence", "power", "evidence", "outliers", "gate", "kpis", "samples"):
        assert mcp[key] == doc[key], key
    md, html, text = d.render("md"), d.render("html"), d.render("text", width=400)
    lines = evidence_lines(doc)
    assert any(x.startswith("buckets tested: idle: data wait") for x in lines) and any(x.startswith("power: with 6 and 6 steps") for x in lines)
    from html import unescape

    from traceinsight.render.markdown import esc

    page = unescape(html)
    for x in lines:
        assert esc(x, 600) in md and x in page and x in text, x
    assert doc["sentence"] in text.replace("\n", " ") or doc["sentence"][:80] in text
    slow = diff(rule_pairs["region"], rule_pairs["region_slow"])  # slower kernels: the GPU time figure moves
    figs = shown_figures(slow.data)
    assert [k["label"] for k in figs if k["name"] == "efficiency.gpu_time_ns"] == ["GPU kernel time, whole capture"]
    md, page, text = slow.render("md"), unescape(slow.render("html")), slow.render("text", width=400)
    for k in figs:
        assert esc(k["label"], 60) in md and k["label"] in page and k["label"] in text
        assert figure(k, "head") in md and figure(k, "head") in page and figure(k, "head") in text
    assert "modelled_speedup_ns" not in md + page + text and "efficiency.gpu_time_ns" not in md + text
