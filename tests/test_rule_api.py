"""The shared rule API: categories, lifecycle, instances, explains / what_if, Analysis.views."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.pipeline.plugins import discover
from traceinsight.render import render
from traceinsight.rule_api import CATEGORIES, DEFAULT_CATEGORY, Instance, Rule, as_instances
from traceinsight.assess.verdict import claims, details


def _gappy_trace(tmp_path):
    """One step with three kernels and two long idle gaps (0.3 ms and 0.5 ms)."""
    t = KinetoTrace()
    t.step(0, 0.0, 2000.0)
    t.kernel("k", 0.0, 100.0)
    t.kernel("k", 400.0, 100.0)
    t.kernel("k", 1000.0, 100.0)
    return t.write(tmp_path / "t.json")


def test_every_builtin_rule_declares_a_known_category_and_lifecycle():
    rules = discover().rules
    expected = {
        "TI001": "gpu_idle",
        "TI002": "host_sync",
        "TI003": "launch_overhead",
        "TI004": "compute",
        "TI005": "input_pipeline",
        "TI006": "copy",
        "TI007": "compute",
        "TI008": "compute",
        "TI009": "gpu_idle",
        "TI010": "gpu_idle",
    }
    assert {c: rules[c].category for c in expected} == expected
    assert all(cls.category in CATEGORIES and cls.lifecycle in ("stable", "preview") for cls in rules.values())


def test_unknown_category_is_refused_at_class_definition():
    with pytest.raises(TypeError, match="category 'speed'"):

        class Bad(Rule):
            code = "X001"
            category = "speed"

    with pytest.raises(TypeError, match="lifecycle 'beta'"):

        class Bad2(Rule):
            code = "X002"
            lifecycle = "beta"


def test_undeclared_category_defaults_to_compute():
    class Plain(Rule):
        code = "X003"

    assert Plain.category == DEFAULT_CATEGORY == "compute"


def test_instances_from_dataframe_keep_nanoseconds_and_map_missing_ids_to_none():
    df = pd.DataFrame(
        {"start_ns": [1_000_000_001, 5], "end_ns": [1_000_000_999, 7], "rank": [3, -1], "device": [float("nan"), 2], "label": ["a", "b"]}
    )
    got = as_instances(df)
    assert got == [Instance(1_000_000_001, 1_000_000_999, 3, None, "a"), Instance(5, 7, None, 2, "b")]
    assert got[0].dur_ns == 998
    assert as_instances(pd.DataFrame({"start_ns": [1], "end_ns": [2]})) == [Instance(1, 2)]
    with pytest.raises(ValueError, match="end_ns"):
        as_instances(pd.DataFrame({"start_ns": [1]}))
    with pytest.raises(ValueError, match="ends before"):
        Instance(10, 5)
    with pytest.raises(TypeError):
        as_instances([(1, 2)])


class Marked(Rule):
    """A plugin rule that reports every idle gap as an instance and a what-if."""

    code = "ZZ001"
    name = "marked"
    category = "host_sync"
    lifecycle = "preview"
    summary = "test rule"

    def check(self, ctx):
        gaps = ctx.views.gaps
        yield ctx.finding(
            title="gaps",
            message="m",
            impact_ns=int(gaps["dur_ns"].sum()),
            instances=gaps.assign(label="gap"),
            explains=["abc"],
            what_if={"step_ns": 1, "baseline_step_ns": 2, "assumptions": "none"},
            key="g",
        )


def test_finding_carries_category_instances_explains_what_if_into_json(tmp_path):
    a = traceinsight.analyze(_gappy_trace(tmp_path), select=["ZZ"], extra_rules=[Marked])
    (f,) = a.findings
    assert f.category == "host_sync"
    gap_starts = [i.start_ns for i in f.instances]
    assert [(i.end_ns - i.start_ns) for i in f.instances] == [300_000, 500_000]
    assert gap_starts[1] - gap_starts[0] == 400_000
    j = json.loads(render(a, "json"))["findings"][0]
    assert j["category"] == "host_sync"
    assert [(i["end_ns"] - i["start_ns"], i["label"], i["device"]) for i in j["instances"]] == [(300_000, "gap", f.instances[0].device)] + [
        (500_000, "gap", f.instances[1].device)
    ]
    assert j["explains"] == ["abc"] and j["what_if"]["baseline_step_ns"] == 2


def test_verdict_reads_the_ledger_and_findings_claim_by_their_category(tmp_path):
    a = traceinsight.analyze(_gappy_trace(tmp_path), select=["ZZ"], extra_rules=[Marked])
    assert details(a)["category"] == "cannot_judge"  # three kernels, 0.3 ms of work: not judged
    # the gaps end at kernels launched after the GPU ran dry, with nothing traced on the host meanwhile
    assert a.ledger.totals()["idle_untraced"] > 0
    assert claims(a)["total_ns"] == 0  # a host_sync finding claims only sync idle, and there is none
    a.findings[0].category = "gpu_idle"
    assert claims(a)["by_bucket"]["idle_untraced"] > 0
    a.findings[0].category = "trace_quality"  # describes the recording: never the bound, claims nothing
    assert details(a)["category"] != "trace_quality" and claims(a)["total_ns"] == 0


def test_analysis_carries_the_engines_views(tmp_path):
    a = traceinsight.analyze(_gappy_trace(tmp_path), select=["TI001"])
    assert a.views is not None and a.views.timeline is a.timeline
    assert a.ledger is a.views.ledger  # the engine's ledger is the one its views built, not a second one
    assert int(a.ledger.by_device["ns"].sum()) == int(a.views.utilization["window_ns"].sum())


def test_builtin_time_evidence_comes_as_instances(tmp_path):
    a = traceinsight.analyze(_gappy_trace(tmp_path), select=["TI001"], options={"TI001": {"min_gap_us": 200}})
    (f,) = a.findings
    assert sorted(i.dur_ns for i in f.instances) == [300_000, 500_000]
    assert all(i.rank == 0 and i.device is not None and i.label for i in f.instances)


class EvidenceOnly(Rule):
    """Time-stamped evidence columns but no instances: the renderer must not guess markers from them."""

    code = "ZZ002"
    name = "evidence-only"
    category = "gpu_idle"
    summary = "test rule"

    def check(self, ctx):
        g = ctx.views.gaps
        yield ctx.finding(title="gaps", message="m", impact_ns=1, evidence=g.assign(start_ms=g["start_ns"] / 1e6), key="e")


def test_html_markers_and_closeups_come_from_instances_only(tmp_path):
    import re

    from traceinsight.render import html

    a = traceinsight.analyze(_gappy_trace(tmp_path), select=["ZZ"], extra_rules=[Marked, EvidenceOnly], min_impact=0)
    ctx = html.context(a)
    by_code = {m["code"]: m for m in ctx["timeline"]["marks"]}
    assert len(by_code["ZZ001"]["ticks"]) == 2 and by_code["ZZ001"]["ticks"][0]["title"].startswith("gap: ")
    assert by_code["ZZ002"]["ticks"] == [] and not by_code["ZZ002"]["timed"]
    closeups = {f["code"]: f.get("instance") for f in ctx["findings"]}
    assert closeups["ZZ002"] is None
    big = closeups["ZZ001"]
    assert big["title"].startswith("Largest instance: 500.0 µs")
    assert big["w0"] <= a.findings[0].instances[1].start_ns and big["w1"] >= a.findings[0].instances[1].end_ns
    page = html.render(a)
    assert len(re.findall(r'<rect class="tick [a-z]+"[^>]*><title>#\d ZZ001', page)) == 2
    assert page.count('<figure class="instance"') == 1
