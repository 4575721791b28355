"""Documentation examples are code: every ```python block tagged with a preceding `<!-- test -->` runs here."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from traceinsight.vocab.units import fmt_ns

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "docs" / "hooks.md", REPO / "README.md"]
_BLOCK = re.compile(r"<!--\s*test\s*-->\s*\n```python[^\n]*\n(.*?)\n```", re.DOTALL)


def tagged_blocks(path: Path) -> list[tuple[int, str]]:
    """(line number, code) of each ```python block directly preceded by `<!-- test -->` (only blank lines between)."""
    text = path.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in _BLOCK.finditer(text)]


def _cases():
    for doc in DOCS:
        if not doc.is_file():
            continue
        for line, code in tagged_blocks(doc):
            yield pytest.param(doc, line, code, id=f"{doc.relative_to(REPO)}:{line}")


def test_extractor_finds_only_tagged_blocks(tmp_path):
    md = tmp_path / "x.md"
    md.write_text("<!-- test -->\n```python\nA = 1\n```\n\n```python\nB = 2\n```\n<!-- test -->\n\n```python\nC = 3\n```\n")
    assert [c for _, c in tagged_blocks(md)] == ["A = 1", "C = 3"]


def _check_report_handler(ns: dict, out: str) -> None:
    trace, report = ns["handler"].paths[-1]
    assert trace.is_file() and trace.name.startswith("rank0.") and trace.name.endswith(".pt.trace.json.gz")
    assert report.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")
    assert out == f"{trace.name} -> {report.name}\n"


def _check_keras_callback(ns: dict, out: str) -> None:
    report = Path("tb_logs/report.html")
    assert report.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")
    codes = [f.code for f in ns["cb"].analysis.findings]
    assert out == f"{codes}\n"


def _check_custom_rule(ns: dict, out: str) -> None:
    findings = ns["analysis"].findings
    assert [f.code for f in findings] == ["ACME001"]
    (f,) = findings
    assert re.fullmatch(r"\d+ \.item\(\) calls", f.title) and int(f.title.split()[0]) > 2 and f.impact_ns > 0
    # declared a host-sync rule with its claims: graded on the sync idle it claims (never a modelled speed-up of a
    # category it did not declare), at most its own estimate, and it prints the figure the report shows
    assert f.saving_kind == "idle" and 0 < f.saving_ns <= f.impact_ns and f.severity.value != "error"
    assert out == f"{[(f.code, f.title, f.severity.value, fmt_ns(f.saving_ns))]}\n"


#: What each tagged example must have done, found by a line of its code: an example that runs but prints the
#: wrong thing (or a new example nobody checks) fails.
CHECKS = {
    "report_handler(": _check_report_handler,
    "TraceInsightCallback(": _check_keras_callback,
    "class ItemCalls(Rule)": _check_custom_rule,
}


def test_every_tagged_example_has_a_check():
    for param in _cases():
        code = param.values[2]
        assert sum(marker in code for marker in CHECKS) == 1, f"{param.id}: add its expected outcome to CHECKS"


@pytest.mark.slow
@pytest.mark.parametrize("doc, line, code", list(_cases()))
def test_doc_example_runs(doc, line, code, tmp_path, monkeypatch, capsys):
    needs = {"torch": "torch", "tensorflow": "tensorflow"}
    for mod, pkg in needs.items():
        if re.search(rf"^\s*(import|from)\s+{mod}\b", code, re.MULTILINE):
            pytest.importorskip(pkg)
    if "traceinsight.keras" in code:
        pytest.importorskip("tensorflow")  # the optional framework; traceinsight.keras itself must import
    (tmp_path / "sample_traces").symlink_to(REPO / "sample_traces")  # examples may name the shipped samples
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    ns = {"__name__": "__doc_example__"}
    capsys.readouterr()
    exec(compile(code, f"{doc.name}:{line}", "exec"), ns)
    out = capsys.readouterr().out
    (check,) = [fn for marker, fn in CHECKS.items() if marker in code]
    check(ns, out)
