"""Third-party rules load the same two ways the built-ins do: a local file (--rules) and an entry point."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap

from typer.testing import CliRunner

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.cli import app

RULE_SRC = textwrap.dedent(
    '''
    from traceinsight.rule_api import Rule, Option, Fix, Location, fmt_ns

    class KernelCount(Rule):
        code = "{code}"
        name = "kernel-count"
        summary = "Counts kernels (a test rule)."
        why = "Tests that plugins run."
        fix_pytorch = Fix("Nothing to fix.", "pass")
        at_least = Option(1, "Report when at least this many kernels ran.")

        def check(self, ctx):
            n = len(ctx.views.kernels)
            if n >= self.at_least:
                yield ctx.finding(title=f"{{n}} kernels", message=f"{{n}} kernels in {{fmt_ns(ctx.views.span_ns)}}", impact_ns=0, key="k")
    '''
)


def _trace(tmp_path):
    t = KinetoTrace()
    t.step(0, 0.0, 500.0)
    for i in range(3):
        t.kernel("k", 10.0 + i * 100, 50.0)
    return t.write(tmp_path / "t.json")


def test_rule_from_file_via_cli(tmp_path):
    rule = tmp_path / "my_rule.py"
    rule.write_text(RULE_SRC.format(code="ACME001"))
    res = CliRunner().invoke(app, ["analyze", str(_trace(tmp_path)), "--rules", str(rule), "--select", "ACME", "--format", "json", "--no-progress", "--set", "ACME001.at_least=2"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout[res.stdout.index("{"):])
    codes = [f["code"] for f in data["findings"]]
    assert codes == ["ACME001"] and data["findings"][0]["title"] == "3 kernels"


def test_rule_from_entry_point(tmp_path, monkeypatch):
    pkg = tmp_path / "site"
    (pkg / "acme_rules").mkdir(parents=True)
    (pkg / "acme_rules" / "__init__.py").write_text(RULE_SRC.format(code="ACME002"))
    dist = pkg / "acme_rules-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-rules\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[traceinsight.rules]\nACME002 = acme_rules:KernelCount\n")
    monkeypatch.syspath_prepend(str(pkg))
    importlib.invalidate_caches()
    a = traceinsight.analyze(_trace(tmp_path), select=["ACME002", "TI001"])
    assert "ACME002" in a.rules_run and "TI001" in a.rules_run
    assert [f.title for f in a.findings if f.code == "ACME002"] == ["3 kernels"]
    sys.modules.pop("acme_rules", None)


def test_rule_docs_cli():
    res = CliRunner().invoke(app, ["rule", "TI001"])
    assert res.exit_code == 0, res.output
    assert "gpu-idle-gaps" in res.output and "min_gap_us" in res.output and "DataLoader" in res.output


def test_graded_severity_says_why_it_differs_from_the_declared_one(tmp_path):
    """A custom rule declared warning whose cost grades it otherwise says so in every format (issue 23)."""
    import traceinsight
    from traceinsight.render import render
    from traceinsight.rule_api import Rule, Severity

    class Declared(Rule):
        code = "ZZ950"
        name = "declared-warning"
        severity = Severity.WARNING
        category = "gpu_idle"
        summary = "A planted idle cost."

        def check(self, ctx):
            yield ctx.finding(title="planted", message="planted", impact_ns=10**12)

    from tests.conftest import REPO

    a = traceinsight.analyze(REPO / "sample_traces" / "dataloader_gaps.json.gz", extra_rules=[Declared], select=["ZZ950"])
    (f,) = a.findings
    assert f.severity is Severity.ERROR  # most of the window is avoidable idle: graded error
    assert f.metrics["severity_basis"].startswith("graded error on the common scale") and "declared warning" in f.metrics["severity_basis"]
    assert "declared warning" in render(a, "md") and "declared warning" in render(a, "text") and "declared warning" in render(a, "html")
