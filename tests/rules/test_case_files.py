"""Every built-in rule has one case file, tests/rules/test_<CODE>.py, whose ``CASES`` name its positive, negative and
fix tests (the sqlfluff model): a new rule without one, or a case list naming a test that does not exist, fails."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from traceinsight.pipeline.plugins import discover

HERE = Path(__file__).resolve().parent
BUILTIN = sorted(c for c, cls in discover().rules.items() if cls.__module__.startswith("traceinsight.rules."))


def _cases_and_tests(path: Path) -> tuple[dict, set[str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    cases, tests = None, set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["CASES"]:
            cases = ast.literal_eval(node.value)
        elif isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            tests.add(node.name)
    assert cases is not None, f"{path.name} has no CASES"
    return cases, tests


@pytest.mark.parametrize("code", BUILTIN)
def test_rule_has_a_case_file_with_positive_negative_and_fix(code):
    path = HERE / f"test_{code}.py"
    assert path.is_file(), f"{code} has no case file {path.name}"
    cases, tests = _cases_and_tests(path)
    assert set(cases) == {"positive", "negative", "fix"}, cases
    for kind, names in cases.items():
        assert names, f"{code}: no {kind} case"
        missing = set(names) - tests
        assert not missing, f"{code}: CASES names tests {path.name} does not define: {sorted(missing)}"


def test_no_case_file_without_a_rule():
    files = {p.stem.removeprefix("test_") for p in HERE.glob("test_TI*.py")}
    assert files <= set(BUILTIN), files - set(BUILTIN)
