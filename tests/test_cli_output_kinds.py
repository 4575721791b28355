"""Small command-line promises (issue 23): an extension we do not write is refused, and rule docs are laid out
for a terminal instead of printed as raw Markdown."""

from __future__ import annotations

from typer.testing import CliRunner

from traceinsight.cli.app import app

from .conftest import REPO

SAMPLE = str(REPO / "sample_traces" / "tiny_kernels.json.gz")


def test_unknown_output_extension_is_a_usage_error(tmp_path):
    out = tmp_path / "report.pdf"
    res = CliRunner().invoke(app, ["analyze", SAMPLE, "-o", str(out)])
    assert res.exit_code == 2 and not out.exists()
    assert ".pdf" in res.output
    ok = CliRunner().invoke(app, ["analyze", SAMPLE, "-o", str(tmp_path / "report.md")])
    assert ok.exit_code == 0 and (tmp_path / "report.md").read_text().startswith("## traceinsight")
    forced = CliRunner().invoke(app, ["analyze", SAMPLE, "-f", "json", "-o", str(tmp_path / "report.data")])
    assert forced.exit_code == 0 and (tmp_path / "report.data").read_text().lstrip().startswith("{")


def test_rule_docs_render_for_a_terminal():
    res = CliRunner().invoke(app, ["rule", "TI003"])
    assert res.exit_code == 0
    lines = res.output.splitlines()
    assert any("TI003" in line and "tiny-kernels" in line for line in lines)
    assert not any(line.lstrip().startswith(("## ", "```")) for line in lines)  # headings and fences drawn
    assert "Why it matters" in res.output
