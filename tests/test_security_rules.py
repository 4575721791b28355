"""User rules fail loudly and options are validated where they enter (issue 28, items 2, 3 and 6).

A rule is code we did not write: whatever it does (raise, ``sys.exit()``, return strings or NaN, hang), the run
writes its report with the failure shown, prints one line naming the rule and its file, and exits
EXIT_RULE_FAILED, on single traces and whole jobs alike. Option values from ``--set``, a pyproject.toml or the API
that are NaN, infinite, out of range or of the wrong type are usage errors (exit 2) stating the allowed range.
"""

from __future__ import annotations

import json
import math
import textwrap
import time

import pytest
from typer.testing import CliRunner

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.cli.app import app
from traceinsight.pipeline.config import Config
from traceinsight.vocab.errors import EXIT_RULE_FAILED, EXIT_USAGE, ConfigError
from traceinsight.rule_api import Option

runner = CliRunner()


def _trace(tmp_path, name="t.json", rank=None):
    t = KinetoTrace(rank=rank, world_size=2 if rank is not None else None)
    t.step(1, 0.0, 1000.0)
    t.kernel("gemm_a", 100.0, 200.0)
    t.kernel("gemm_b", 700.0, 200.0)
    return t.write(tmp_path / name)


RULE = textwrap.dedent(
    """
    import math, sys, time
    from traceinsight.rule_api import Rule, Finding, Severity

    class Bad(Rule):
        code = "ZZ001"
        name = "bad"
        summary = "misbehaves"

        def check(self, ctx):
    {body}
    """
)

BODIES = {
    "exit0": "        sys.exit(0)",
    "exit_none": "        raise SystemExit",
    "raises": "        raise RuntimeError('boom')",
    "strings": "        return ['not a finding']",
    "a_string": "        return 'oops'",
    "nan_impact": "        return [Finding(code='ZZ001', title='t', severity=Severity.WARNING, message='m', impact_ns=math.nan)]",
    "inf_pct": "        yield ctx.finding(title='t', message='m', impact_ns=10)\n        yield Finding(code='ZZ001', title='t', severity=Severity.WARNING, message='m', impact_pct_span=math.inf)",
    "negative": "        return [Finding(code='ZZ001', title='t', severity=Severity.WARNING, message='m', impact_ns=-5)]",
    "hangs": "        while True:\n            pass",
    "sleeps": "        time.sleep(3600)",
}


def _rule_file(tmp_path, kind: str):
    p = tmp_path / f"rule_{kind}.py"
    p.write_text(RULE.format(body=BODIES[kind]))
    return p


@pytest.mark.parametrize("kind", sorted(BODIES))
def test_bad_rule_exits_with_its_own_code_and_report_is_written(tmp_path, kind):
    trace = _trace(tmp_path)
    rule = _rule_file(tmp_path, kind)
    out = tmp_path / "r.json"
    t0 = time.monotonic()
    res = runner.invoke(app, ["analyze", str(trace), "-o", str(out), "--rules", str(rule), "--rule-timeout", "1", "--fail-on", "info"])
    assert time.monotonic() - t0 < 30
    assert res.exit_code == EXIT_RULE_FAILED, res.output
    lines = [ln for ln in res.stderr.splitlines() if "ZZ001" in ln]
    assert len(lines) == 1 and str(rule.name) in lines[0], res.stderr
    report = json.loads(out.read_text())
    assert any("ZZ001" in w and "failed" in w for w in report["warnings"])
    assert "TI001" in report["rules_run"]  # the other rules ran


def test_rules_file_that_exits_on_import(tmp_path):
    trace = _trace(tmp_path)
    rule = tmp_path / "exits.py"
    rule.write_text("import sys\nsys.exit(0)\n")
    res = runner.invoke(app, ["analyze", str(trace), "-f", "md", "--rules", str(rule)])
    assert res.exit_code == EXIT_RULE_FAILED
    assert "exits.py" in res.stderr and "sys.exit(0)" in res.stderr
    assert "exits.py" in res.stdout  # the Markdown report shows it


def test_missing_rules_file_is_not_silently_ignored(tmp_path):
    res = runner.invoke(app, ["analyze", str(_trace(tmp_path)), "--rules", str(tmp_path / "nope.py")])
    assert res.exit_code == EXIT_RULE_FAILED


def test_api_records_failures_and_timeout(tmp_path):
    from traceinsight.rule_api import Rule

    class Hangs(Rule):
        code = "ZZ002"
        name = "hangs"

        def check(self, ctx):
            while True:
                pass

    a = traceinsight.analyze(_trace(tmp_path), extra_rules=[Hangs], select=["ZZ002", "TI001"], rule_timeout=0.5)
    (f,) = a.rule_failures
    assert f.code == "ZZ002" and "rule-timeout" in f.reason and f.origin.endswith("test_security_rules.py")
    assert [x.code for x in a.findings] == ["TI001"]


def test_timeout_off_the_main_thread(tmp_path):
    """A Dask worker runs tasks on a thread: the watchdog stops the rule there too."""
    import threading

    from traceinsight.rule_api import Rule

    class Hangs(Rule):
        code = "ZZ003"
        name = "hangs-too"

        def check(self, ctx):
            while True:
                pass

    out = {}
    th = threading.Thread(target=lambda: out.setdefault("a", traceinsight.analyze(_trace(tmp_path), extra_rules=[Hangs], select=["ZZ003"], rule_timeout=0.5)))
    th.start()
    th.join(30)
    assert not th.is_alive()
    assert [f.code for f in out["a"].rule_failures] == ["ZZ003"]


def test_job_path_reports_rule_failure_per_rank(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    for r in range(2):
        _trace(job, f"rank{r}.json", rank=r)
    rule = _rule_file(tmp_path, "exit0")
    res = runner.invoke(app, ["analyze", str(job), "-f", "md", "--rules", str(rule)])
    assert res.exit_code == EXIT_RULE_FAILED, res.output
    assert "2 of 2 ranks" in res.stderr and "ZZ001" in res.stdout


# --- options ------------------------------------------------------------------------------------------------
BAD_SETS = [
    "TI001.min_gap_us=nan",
    "TI001.min_gap_us=-inf",
    "TI001.min_gap_us=inf",
    "TI001.min_gap_us=-1",
    "TI002.top_n=0",
    "TI002.top_n=2.5",
    "TI007.speedup=0",
    "TI007.speedup=1",
    "TI012.capture_ratio=0",
    "TI012.capture_ratio=-3",
    "TI008.max_severity=abc",
    "TI010.max_busy_pct=101",
    "TI005.include_tfdata_iterator=maybe",
]


@pytest.mark.parametrize("assignment", BAD_SETS)
def test_bad_set_values_are_usage_errors_with_the_range(tmp_path, assignment):
    res = runner.invoke(app, ["analyze", str(_trace(tmp_path)), "--set", assignment])
    assert res.exit_code == EXIT_USAGE, res.output
    assert "expects" in res.stderr and "Traceback" not in res.output


@pytest.mark.parametrize("flag,value", [("--min-impact", "inf"), ("--min-impact", "nan"), ("--min-impact", "-1"), ("--min-impact", "101"),
                                        ("--worse-by", "nan"), ("--worse-by", "-inf"), ("--rule-timeout", "nan"), ("--rule-timeout", "-1")])
def test_bad_numbers_on_the_command_line(tmp_path, flag, value):
    res = runner.invoke(app, ["analyze", str(_trace(tmp_path)), flag, value, "--fail-on", "info"])
    assert res.exit_code == EXIT_USAGE, res.output
    assert "from 0 to" in res.stderr


def test_pull_request_pyproject_cannot_switch_rules_off(tmp_path, monkeypatch):
    """Options only, found implicitly (no --config): an out-of-range value is refused, not a silent switch-off."""
    (tmp_path / "pyproject.toml").write_text("[tool.traceinsight.rule.TI002]\ntop_n = 0\n[tool.traceinsight]\nmin_impact = nan\n")
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["analyze", str(_trace(tmp_path))])
    assert res.exit_code == EXIT_USAGE and "min_impact" in res.stderr


def test_api_validates_too(tmp_path):
    with pytest.raises(ConfigError, match="top_n"):
        traceinsight.analyze(_trace(tmp_path), options={"TI002": {"top_n": 0}})
    with pytest.raises(ConfigError, match="min-impact"):
        traceinsight.analyze(_trace(tmp_path), min_impact=math.inf)
    with pytest.raises(ConfigError, match="worse-by"):
        traceinsight.analyze(_trace(tmp_path), worse_by=math.nan)
    with pytest.raises(ConfigError):
        Config().with_overrides(min_impact=float("nan"))


def test_option_declares_type_and_range():
    o = Option(5.0, "x", max=100)
    o.name = "p"
    assert o.convert("7") == 7.0 and o.allowed() == "a finite number from 0 to 100"
    for bad in ("nan", "inf", -1, 101, True, [1], None):
        with pytest.raises(ValueError, match="from 0 to 100"):
            o.convert(bad)
    c = Option("info", choices=("info", "warning"))
    c.name = "s"
    assert c.convert("Warning") == "warning"
    with pytest.raises(ValueError, match="one of info, warning"):
        c.convert("abc")


def test_rule_whose_constructor_exits(tmp_path):
    rule = tmp_path / "ctor.py"
    rule.write_text(RULE.format(body="        pass") + "\n    def __init__(self, **kw):\n        raise SystemExit(0)\n")
    res = runner.invoke(app, ["analyze", str(_trace(tmp_path)), "--rules", str(rule), "-f", "json"])
    assert res.exit_code == EXIT_RULE_FAILED, res.output
    assert "could not be created" in res.stderr and json.loads(res.stdout)["findings"] is not None
