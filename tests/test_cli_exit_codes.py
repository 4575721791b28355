"""``--fail-on`` is what CI gates on: exit 1 exactly when a finding at or above the threshold exists."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from traceinsight.cli.app import app

from .helpers.kineto_writer import KinetoTrace

RULES = '''
from traceinsight.rule_api import Rule, Severity

class Planted(Rule):
    code = "ZZ001"
    name = "planted"
    severity = Severity.WARNING
    graded = False  # keeps its own severity: the common impact scale would drop a 1 µs finding
    summary = "Always one warning."

    def check(self, ctx):
        yield ctx.finding(title="planted warning", message="for exit-code tests", impact_ns=1000)
'''


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    t = KinetoTrace(device_name="NVIDIA A100-SXM4-80GB", sm_count=108)
    t.step(1, 0, 1000)
    t.cpu_op("aten::mm", 10, 100)
    t.kernel("volta_sgemm_128x64_nn", 50, 400)
    t.kernel("volta_sgemm_128x64_nn", 600, 300)
    (d / "planted.py").write_text(RULES)
    return t.write(d / "trace.json"), d / "planted.py"


def _run(args):
    return CliRunner().invoke(app, ["analyze", *map(str, args)])


@pytest.mark.parametrize(
    ("fail_on", "code"),
    [("never", 0), ("info", 1), ("warning", 1), ("error", 0)],
)
def test_fail_on_threshold(trace, fail_on, code):
    path, rules = trace
    r = _run([path, "--rules", rules, "--select", "ZZ001", "--format", "json", "--fail-on", fail_on])
    assert r.exit_code == code, r.output
    assert json.loads(r.stdout)["findings"][0]["severity"] == "warning"  # the report is written either way


def test_fail_on_with_severity_override(trace):
    path, rules = trace
    r = _run([path, "--rules", rules, "--select", "ZZ001", "--set", "ZZ001.severity=error", "--fail-on", "error", "--format", "md"])
    assert r.exit_code == 1, r.output
    assert "planted warning" in r.stdout


def test_no_findings_never_fails(trace):
    path, rules = trace
    for level in ("info", "warning", "error"):
        r = _run([path, "--rules", rules, "--select", "TI004", "--fail-on", level])  # no RNN here: no finding
        assert r.exit_code == 0, r.output


def test_default_is_never(trace):
    path, rules = trace
    assert _run([path, "--rules", rules, "--select", "ZZ001"]).exit_code == 0


def test_html_output_and_fail_on(trace, tmp_path):
    path, rules = trace
    out = tmp_path / "report.html"
    r = _run([path, "--rules", rules, "--select", "ZZ001", "-o", out, "--fail-on", "warning"])
    assert r.exit_code == 1
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_bad_fail_on_value_is_usage_error(trace):
    path, _ = trace
    assert _run([path, "--fail-on", "sometimes"]).exit_code == 2


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["--select", "TI0022"], "--select TI0022: no rule has this code; did you mean TI002?"),
        (["--select", "TI001,ZZ01X"], "--select ZZ01X: no rule has this code; did you mean ZZ001?"),
        (["--ignore", "TI099"], "--ignore TI099: no rule has this code; did you mean TI009?"),
        (["--set", "TI0099.min_gap_us=5"], "--set TI0099: no rule has this code; did you mean TI009?"),
        (["--set", "TI017.severity=error"], "--set TI017: no rule has this code; did you mean TI016?"),
        (["--set", "TI.min_gap_us=5"], "--set TI: no rule has this code;"),  # options need a whole code
    ],
)
def test_unknown_codes_are_usage_errors_with_the_closest_code(trace, args, hint):
    """A typo in the gate's rule selection must fail the gate, not pass it with zero rules run."""
    path, rules = trace
    r = _run([path, "--rules", rules, *args, "--fail-on", "warning"])
    assert r.exit_code == 2, r.output
    assert hint in r.stderr and r.stdout == ""


def test_prefixes_that_match_rules_are_fine(trace):
    path, rules = trace
    assert _run([path, "--rules", rules, "--select", "TI00,ZZ", "--ignore", "TI01"]).exit_code == 0


def test_fail_on_names_the_findings_that_tripped_it(trace):
    path, rules = trace
    r = _run([path, "--rules", rules, "--select", "ZZ001", "--fail-on", "warning", "--format", "json"])
    assert r.exit_code == 1
    assert r.stderr.splitlines()[-2:] == [
        "traceinsight: --fail-on warning: 1 finding(s) at or above warning:",
        "  ZZ001 warning planted warning",
    ]
    assert _run([path, "--rules", rules, "--select", "ZZ001", "--fail-on", "error"]).stderr == ""


def test_every_run_that_writes_files_prints_the_verdict(trace, tmp_path):
    import traceinsight
    from traceinsight.assess.verdict import details

    path, rules = trace
    v = details(traceinsight.analyze(path, rules=[rules], select=["ZZ001", "TI001"]))
    for args in (["-o", tmp_path / "r.html"], ["-f", "html,md,json", "-o", tmp_path / "out"], ["-o", tmp_path / "r.md"]):
        r = _run([path, "--rules", rules, "--select", "ZZ001,TI001", *args])
        assert r.exit_code == 0, r.output
        lines = r.stderr.splitlines()
        assert lines[-1] == f"Verdict: {v['headline']}. {v['sentence']}", lines
        assert all(line.startswith("wrote ") for line in lines[:-1]) and lines[:-1]


# The installed command (``traceinsight.cli.app:main``) in a child process, with an atexit hook that tells whether
# interpreter teardown ran.
MAIN = """
import atexit, sys
atexit.register(lambda: sys.stderr.write("TEARDOWN\\n"))
from traceinsight.cli.app import main
sys.argv = ["traceinsight", *sys.argv[1:]]
main()
"""


def _main(*args):
    return subprocess.run([sys.executable, "-c", MAIN, *map(str, args)], capture_output=True, text=True, timeout=120)


def test_the_command_skips_teardown_after_an_analysis_and_loses_no_output(trace):
    path, rules = trace
    r = _main("analyze", path, "--rules", rules, "--select", "ZZ001", "--format", "json", "--fail-on", "warning")
    assert r.returncode == 1  # the gate's code survives the early exit
    assert json.loads(r.stdout)["findings"][0]["title"] == "planted warning"  # stdout was flushed, whole
    assert "--fail-on warning: 1 finding(s)" in r.stderr
    assert "TEARDOWN" not in r.stderr
    r = _main("analyze", path, "--rules", rules, "--select", "ZZ001", "--format", "md")
    assert (r.returncode, "planted warning" in r.stdout, "TEARDOWN" in r.stderr) == (0, True, False)


def test_the_command_exits_normally_when_no_analysis_ran(tmp_path):
    r = _main("analyze", tmp_path / "missing.json")
    assert r.returncode == 3
    assert "no such file" in r.stderr and "TEARDOWN" in r.stderr
    r = _main("rules")
    assert r.returncode == 0 and "TI001" in r.stdout and "TEARDOWN" in r.stderr
