"""A CI gate against a baseline report: fail on what a change introduced or made worse, not on old problems.

The traces are written by the kineto test writer: a training loop whose steps end in a blocking
``cudaStreamSynchronize`` (1 ms on "main", 3 ms on the "PR", which also copies from pageable memory at a
realistic staged bandwidth, so the copies cost GPU time).
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import traceinsight
from traceinsight.pipeline.baseline import NEW, SAME, WORSE, compare, load_report
from traceinsight.cli.app import app
from traceinsight.vocab.errors import ConfigError
from traceinsight.render import render
from traceinsight.model.serialize import finding_dict

from .helpers.kineto_writer import KinetoTrace


def _trace(sync_us: float, pageable: bool) -> KinetoTrace:
    t = KinetoTrace()
    t0 = 0.0
    for s in range(4):
        at = t0 + 50
        for _ in range(40):
            t.kernel("volta_sgemm_128x64_nn", at, 150, launch_us=at - 20)
            at += 160
        t.runtime("cudaStreamSynchronize", at, sync_us)
        at += sync_us
        # 1 MiB: 30 µs from pinned memory, 350 µs (3 GB/s, staged) from pageable memory
        copy_us = 350 if pageable else 30
        t.memcpy("HtoD", at, copy_us, nbytes=1 << 20, pageable=pageable, launch_us=at - 10)
        at += copy_us + 10
        for _ in range(10):
            t.kernel("volta_sgemm_128x64_nn", at, 150, launch_us=at - 20)
            at += 160
        t.step(s, t0, at - t0)
        t0 = at
    return t


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("baseline")
    main = _trace(1000, pageable=False).write(d / "main.json")
    pr = _trace(3000, pageable=True).write(d / "pr.json")
    report = d / "main-report.json"
    res = CliRunner().invoke(app, ["analyze", str(main), "-f", "json", "-o", str(report)])
    assert res.exit_code == 0, res.output
    return main, pr, report


def _run(*args):
    return CliRunner().invoke(app, ["analyze", *map(str, args)])


def test_statuses_new_worse_same_and_fixed(traces):
    main, pr, report = traces
    a = traceinsight.analyze(pr)
    cmp = compare(a.findings, load_report(report), source=str(report))
    by_code = {f.code: cmp.of(f) for f in a.findings}
    assert by_code["TI001"] == WORSE  # idle share grew from ~17 % to ~29 % of the span
    assert by_code["TI006"] == NEW  # pageable copies only on the PR
    # TI002 is not reported: the planted sync begins after the GPU already ran dry, so it causes no GPU idle
    # (the gap is TI001's); TI007 stays the same
    assert "TI002" not in by_code and by_code["TI007"] == SAME
    assert cmp.counts() == {NEW: 1, WORSE: 1, SAME: len(a.findings) - 2, "fixed": 0}
    # the other way round, the pageable-copy finding is fixed and the idle gaps are not worse
    back = compare(traceinsight.analyze(main).findings, {"findings": [finding_dict(f) for f in a.findings]})
    assert [x["code"] for x in back.fixed] == ["TI006"]
    # the idle gaps are not worse on main (TI007/TI008 keep their absolute time, so on main's shorter span their
    # share of the span rises: those are not compared here)
    idle = next(f for f in traceinsight.analyze(main).findings if f.code == "TI001")
    assert back.of(idle) != WORSE


def test_worse_needs_both_a_relative_and_an_absolute_rise(traces):
    _, pr, _ = traces
    a = traceinsight.analyze(pr)
    f = next(x for x in a.findings if x.code == "TI001")
    now = f.impact_pct_span

    def status(before_pct):
        return compare([f], {"findings": [{"fingerprint": f.fingerprint, "impact_pct_span": before_pct}]}).of(f)

    assert status(now / 1.3) == WORSE  # +30 % and several points
    assert status(now / 1.2) == SAME  # +20 %: under the 25 % default
    tiny = compare([f], {"findings": [{"fingerprint": f.fingerprint, "impact_pct_span": now - 0.5}]}, worse_pct=1)
    assert tiny.of(f) == SAME  # less than one point of the span is noise


def test_gate_fails_only_on_new_or_worse(traces):
    main, pr, report = traces
    assert _run(main, "--fail-on", "warning").exit_code == 1  # plain gate: the old warnings count
    assert _run(main, "--baseline", report, "--fail-on", "warning").exit_code == 0  # nothing new on main
    res = _run(pr, "--baseline", report, "--fail-on", "warning")
    assert res.exit_code == 1  # TI001 got worse
    assert "[worse (was" in res.output and "[NEW]" in res.output
    assert "compared with the baseline: 1 new, 1 worse" in res.output.lower()
    assert _run(pr, "--baseline", report, "--fail-on", "warning", "--worse-by", "500").exit_code == 0  # only the new info
    assert _run(pr, "--baseline", report, "--fail-on", "info", "--worse-by", "500").exit_code == 1  # the new TI006


def test_reports_carry_the_comparison(traces):
    _, pr, report = traces
    a = traceinsight.analyze(pr, baseline=report)
    assert [f.code for f in a.baseline.gating(a.findings)] == ["TI001", "TI006"]
    doc = json.loads(render(a, "json"))
    assert doc["baseline"]["counts"] == {"new": 1, "worse": 1, "same": len(a.findings) - 2, "fixed": 0}
    assert {f["code"]: f["baseline_status"] for f in doc["findings"]}["TI006"] == "new"
    md = render(a, "md")
    assert "**Baseline:** compared with the baseline: 1 new, 1 worse" in md and "**new** · " in md
    html = render(a, "html")
    assert '<span class="bl new">new</span>' in html and "data-baseline" in html
    assert "baseline" not in json.loads(render(traceinsight.analyze(pr), "json"))["findings"][0]


def test_a_bad_baseline_is_a_usage_error(tmp_path, traces):
    main, _, _ = traces
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a report"}')
    res = _run(main, "--baseline", bad)
    assert res.exit_code == 2 and "not a traceinsight JSON report" in res.output
    assert _run(main, "--baseline", tmp_path / "missing.json").exit_code == 2
    with pytest.raises(ConfigError):
        load_report(tmp_path / "missing.json")
