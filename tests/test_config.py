"""Rule selection and options from pyproject.toml and the command line; broken plugins; multi-format output."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import traceinsight
from traceinsight.pipeline.config import Config, parse_assignments
from traceinsight.pipeline.engine import instantiate
from traceinsight.pipeline.plugins import discover
from traceinsight.vocab.errors import ConfigError
from traceinsight.cli.app import app

from .helpers.kineto_writer import KinetoTrace

runner = CliRunner()


def _gappy_trace(tmp_path):
    """Two kernels with a 400 µs idle gap between them, on one GPU."""
    t = KinetoTrace()
    t.step(1, 0.0, 1000.0)
    t.kernel("gemm_a", 100.0, 200.0)
    t.kernel("gemm_b", 700.0, 200.0)
    return t.write(tmp_path / "gap.json")


def _codes(result):
    assert result.exit_code == 0, result.output
    return [f["code"] for f in json.loads(result.stdout)["findings"]]


def test_pyproject_options_select_and_severity(tmp_path):
    trace = _gappy_trace(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.traceinsight]\nselect = ["TI001"]\n\n[tool.traceinsight.rule.TI001]\nmin_gap_us = 500\nseverity = "error"\n'
    )
    # The 400 µs gap is below the configured 500 µs: no finding.
    res = runner.invoke(app, ["analyze", str(trace), "-f", "json", "--config", str(tmp_path / "pyproject.toml")])
    assert _codes(res) == []
    # --set overrides the file; the file's severity override stays.
    res = runner.invoke(app, ["analyze", str(trace), "-f", "json", "--config", str(tmp_path / "pyproject.toml"), "--set", "TI001.min_gap_us=100"])
    report = json.loads(res.stdout)
    assert [f["code"] for f in report["findings"]] == ["TI001"]
    assert report["findings"][0]["severity"] == "error"
    assert report["findings"][0]["impact_ns"] == 400_000
    assert report["rules_run"] == ["TI001"]


def test_select_and_ignore_prefixes():
    rs = discover()
    cfg = Config(select=["TI00"], ignore=["TI003", "TI004"])
    codes = [r.code for r in instantiate(rs, cfg)]
    assert "TI001" in codes and "TI003" not in codes and "TI004" not in codes and "TI010" not in codes


def test_bad_option_values_are_usage_errors():
    rs = discover()
    with pytest.raises(ConfigError, match="expects a finite number"):
        instantiate(rs, Config(options={"TI001": {"min_gap_us": "lots"}}))
    with pytest.raises(ConfigError, match="unknown option"):
        instantiate(rs, Config(options={"TI001": {"no_such_option": 1}}))
    with pytest.raises(ConfigError, match="CODE.option=value"):
        parse_assignments(["TI001-min_gap_us=3"])


def test_broken_plugin_is_a_rule_failure_not_a_crash(tmp_path):
    """The report is still written and names the file; the run exits EXIT_RULE_FAILED, not 0 (the gate would have
    run without the rule)."""
    from traceinsight.vocab.errors import EXIT_RULE_FAILED

    trace = _gappy_trace(tmp_path)
    bad = tmp_path / "broken_rule.py"
    bad.write_text("import does_not_exist_anywhere\n")
    res = runner.invoke(app, ["analyze", str(trace), "-f", "json", "--rules", str(bad)])
    assert res.exit_code == EXIT_RULE_FAILED
    warnings = json.loads(res.stdout)["warnings"]
    assert any("broken_rule.py" in w and "ModuleNotFoundError" in w for w in warnings)


def test_crashing_rule_is_reported_and_others_still_run(tmp_path):
    from traceinsight.rule_api import Rule

    class Crashes(Rule):
        code = "XX001"
        name = "crashes"

        def check(self, ctx):
            raise RuntimeError("boom")

    a = traceinsight.analyze(_gappy_trace(tmp_path), extra_rules=[Crashes], select=["XX001", "TI001"])
    assert [f.code for f in a.findings] == ["TI001"]
    assert any("XX001" in w and "failed" in w and "boom" in w for w in a.warnings)
    assert [(f.code, "boom" in f.reason) for f in a.rule_failures] == [("XX001", True)]


def test_several_formats_into_a_folder(tmp_path):
    trace = _gappy_trace(tmp_path)
    out = tmp_path / "ti"
    res = runner.invoke(app, ["analyze", str(trace), "-f", "html,md,json", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["traceinsight-report.html", "traceinsight-report.json", "traceinsight-report.md"]
    assert "traceinsight-report.html" in (out / "traceinsight-report.md").read_text()
    assert json.loads((out / "traceinsight-report.json").read_text())["findings"][0]["code"] == "TI001"
    res = runner.invoke(app, ["analyze", str(trace), "-f", "html,md"])
    assert res.exit_code == 2


EVIL = """
from pathlib import Path
Path(__file__).with_name("ran.marker").write_text("the checkout's code ran")
from traceinsight.rule_api import Rule

class Evil(Rule):
    code = "EV001"
    def check(self, ctx):
        return []
"""


def _untrusted_checkout(tmp_path):
    (tmp_path / "evil.py").write_text(EVIL)
    (tmp_path / "pyproject.toml").write_text('[tool.traceinsight]\nselect = ["TI001"]\nrules = ["evil.py"]\n')
    return tmp_path / "ran.marker"


def test_nearest_pyproject_never_runs_its_rule_files_implicitly(tmp_path, monkeypatch):
    """A CI job analysing a pull request's trace in its checkout must not import the checkout's Python."""
    marker = _untrusted_checkout(tmp_path)
    trace = _gappy_trace(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRACEINSIGHT_TRUST_PYPROJECT", raising=False)
    res = runner.invoke(app, ["analyze", str(trace), "-f", "json"])
    assert res.exit_code == 0, res.output
    assert not marker.exists()
    report = json.loads(res.stdout)
    assert report["rules_run"] == ["TI001"]  # plain options from the same file still apply
    assert any("evil.py" in w and "NOT loaded" in w and "--config" in w for w in report["warnings"])


def test_rule_files_load_from_an_explicit_config_or_with_the_opt_in(tmp_path, monkeypatch):
    marker = _untrusted_checkout(tmp_path)
    trace = _gappy_trace(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRACEINSIGHT_TRUST_PYPROJECT", raising=False)
    res = runner.invoke(app, ["analyze", str(trace), "-f", "json", "--config", str(tmp_path / "pyproject.toml"), "--select", "TI001,EV"])
    assert res.exit_code == 0, res.output
    assert marker.exists() and "EV001" in json.loads(res.stdout)["rules_run"]
    marker.unlink()
    monkeypatch.setenv("TRACEINSIGHT_TRUST_PYPROJECT", "1")
    res = runner.invoke(app, ["analyze", str(trace), "-f", "json", "--select", "TI001,EV"])
    assert res.exit_code == 0, res.output
    assert marker.exists()


def test_missing_explicit_config_is_a_usage_error(tmp_path):
    res = runner.invoke(app, ["analyze", str(_gappy_trace(tmp_path)), "--config", str(tmp_path / "nope.toml")])
    assert res.exit_code == 2 and "no such file" in res.stderr


def test_analyze_never_mutates_its_arguments(tmp_path):
    cfg = Config(select=["TI"], options={"TI001": {"min_gap_us": 300}}, severity={"TI002": "error"})
    before = repr(cfg)
    options = {"TI001": {"min_gap_us": 100, "severity": "error"}}
    select = ["TI001"]
    a = traceinsight.analyze(_gappy_trace(tmp_path), select=select, options=options, config=cfg)
    assert repr(cfg) == before
    assert options == {"TI001": {"min_gap_us": 100, "severity": "error"}} and select == ["TI001"]
    assert a.rules_run == ["TI001"] and a.findings[0].severity.value == "error"


def test_cli_and_api_give_the_same_analysis(tmp_path):
    """One orchestration path: the CLI's JSON equals the API's analysis rendered, for the same options."""
    from traceinsight.render import render

    trace = _gappy_trace(tmp_path)
    res = runner.invoke(app, ["analyze", str(trace), "-f", "json", "--select", "TI001", "--set", "TI001.min_gap_us=200"])
    api = json.loads(render(traceinsight.analyze(trace, select=["TI001"], options={"TI001": {"min_gap_us": "200"}}), "json"))
    cli = json.loads(res.stdout)
    assert cli["findings"] == api["findings"] and cli["rules_run"] == api["rules_run"] == ["TI001"]


def test_min_impact_from_pyproject_cli_and_api(tmp_path):
    """One severity scale: findings under min_impact % of their GPU window are left out; 0 shows everything."""
    t = KinetoTrace()
    for i in range(5):  # 1 ms of work every 5 ms: TI010's 0-ns "busy 24 %" summary, below any positive floor
        t.kernel("k", i * 5_000.0, 1_000.0)
    trace = t.write(tmp_path / "util.json")
    a = traceinsight.analyze(trace, select=["TI010"])
    assert a.findings == []
    (f,) = traceinsight.analyze(trace, select=["TI010"], min_impact=0).findings
    assert f.severity.value == "info" and f.impact_ns == 0
    (tmp_path / "pyproject.toml").write_text('[tool.traceinsight]\nselect = ["TI010"]\nmin_impact = 0\n')
    res = runner.invoke(app, ["analyze", str(trace), "-f", "json", "--config", str(tmp_path / "pyproject.toml")])
    assert _codes(res) == ["TI010"]
    res = runner.invoke(app, ["analyze", str(trace), "-f", "json", "--config", str(tmp_path / "pyproject.toml"), "--min-impact", "1"])
    assert _codes(res) == []
    (tmp_path / "bad.toml").write_text('[tool.traceinsight]\nmin_impact = "lots"\n')
    with pytest.raises(ConfigError, match="min_impact"):
        Config.from_pyproject(tmp_path / "bad.toml")
