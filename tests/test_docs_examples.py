"""Documentation examples are code: every ```python block tagged with a preceding `<!-- test -->` runs here."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

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


@pytest.mark.slow
@pytest.mark.parametrize("doc, line, code", list(_cases()))
def test_doc_example_runs(doc, line, code, tmp_path, monkeypatch):
    needs = {"torch": "torch", "tensorflow": "tensorflow"}
    for mod, pkg in needs.items():
        if re.search(rf"^\s*(import|from)\s+{mod}\b", code, re.MULTILINE):
            pytest.importorskip(pkg)
    if "traceinsight.keras" in code:
        pytest.importorskip("traceinsight.keras")
    (tmp_path / "sample_traces").symlink_to(REPO / "sample_traces")  # examples may name the shipped samples
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    exec(compile(code, f"{doc.name}:{line}", "exec"), {"__name__": "__doc_example__"})
