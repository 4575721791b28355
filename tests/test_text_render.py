"""Terminal tables fit the terminal and never cut a number: names shorten, digits stay whole."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.cli.app import app
from traceinsight.render import render
from traceinsight.rule_api import fmt_ns

LONG = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ull> >(int, T2, T3)"


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    t = KinetoTrace()
    t.step(0, 0.0, 200_000.0)
    for i in range(12_345):
        t.kernel(LONG if i % 2 else "volta_sgemm_128x64_nn", i * 15.0, 12.5)
    return t.write(tmp_path_factory.mktemp("wide") / "t.json")


def _table_lines(text: str, title: str) -> list[str]:
    lines = text.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith(title))
    j = next(n for n in range(i + 1, len(lines)) if lines[n].startswith("└"))
    return lines[i + 1 : j + 1]


@pytest.mark.parametrize("width", [40, 60, 80, 120, 200])
def test_numbers_stay_whole_at_any_width(trace, width):
    a = traceinsight.analyze(trace, select=["TI001"])
    text = render(a, "text", width=width)
    rows = [line for line in _table_lines(text, "Top kernels by GPU time") if line.startswith("│")]
    top = a.summary.top_kernels
    for line, r in zip(rows, top.itertuples(index=False)):
        cells = [c.strip() for c in line.strip("│").split("│")]
        assert cells[1:] == [f"{int(r.count):,}", fmt_ns(r.total_ns), fmt_ns(r.mean_ns), f"{r.pct_kernel_time:.1f}"]
        assert str(r.name).startswith(cells[0].rstrip("…")) and len(cells[0]) >= 8
    table = _table_lines(text, "Top kernels by GPU time")
    if width >= 80:  # room for every number and a shortened name: the table fits
        assert max(len(line) for line in table) <= width
    else:  # too narrow: the table runs wider rather than cut a digit, and names are what shrank
        assert all("…" in line for line in table if line.startswith("│"))
    if width >= 200:
        assert any(LONG in line for line in table) or any(LONG[:100] in line for line in table)


def test_cli_sizes_text_to_the_terminal(trace):
    res = CliRunner().invoke(app, ["analyze", str(trace), "--select", "TI001"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    assert max(len(line) for line in res.stdout.splitlines()) <= 80
    res = CliRunner().invoke(app, ["analyze", str(trace), "--select", "TI001"], env={"COLUMNS": "150"})
    assert max(len(line) for line in res.stdout.splitlines()) > 100
