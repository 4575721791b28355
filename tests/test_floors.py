"""The floors are folders (docs/architecture.md): every module of the package lies in a layer of the floors
contract, the package's top level holds only the floor folders and the public modules, and the contract really
fails on an upward import or an import between independent siblings planted on purpose."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
CONTRACTS = {c["name"]: c for c in CONFIG["tool"]["importlinter"]["contracts"]}
FLOORS = CONTRACTS["Floors: every import points down"]

#: What may sit at the package's top level beside the floor folders: the public modules users import by path.
PUBLIC_TOP = {"__init__", "rule_api", "rule_api_job", "torch", "keras"}


def _layer_members() -> list[str]:
    return [m.strip() for layer in FLOORS["layers"] for m in re.split(r"[|:]", layer)]


def _modules() -> list[str]:
    out = []
    for p in sorted((REPO / "traceinsight").rglob("*.py")):
        parts = list(p.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append(".".join(parts))
    return out


def test_every_module_lies_in_a_floor():
    members = _layer_members()
    loose = [m for m in _modules() if m != "traceinsight" and not any(m == x or m.startswith(x + ".") for x in members)]
    assert loose == []


def test_the_top_level_holds_floor_folders_and_public_modules_only():
    top = {p.stem for p in (REPO / "traceinsight").glob("*.py")}
    assert top <= PUBLIC_TOP, sorted(top - PUBLIC_TOP)
    folders = {p.name for p in (REPO / "traceinsight").iterdir() if (p / "__init__.py").is_file()}
    in_contract = {m.split(".")[1] for m in _layer_members() if m.startswith("traceinsight.") and m.count(".") == 1}
    assert folders <= in_contract, sorted(folders - in_contract)


def _lint(root: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).exists():
        pytest.skip("import-linter is not installed (it is in the test extra)")
    return subprocess.run([exe, "--config", str(root / "pyproject.toml")], capture_output=True, text=True, cwd=root)


@pytest.mark.slow
def test_planted_upward_and_sibling_imports_break_the_contract(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(REPO / "traceinsight", root / "traceinsight", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    shutil.copytree(REPO / "rules", root / "rules", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    units = root / "traceinsight" / "vocab" / "units.py"
    units.write_text(units.read_text(encoding="utf-8") + "\nimport traceinsight.derive.ledger  # planted: points up\n")
    hook = root / "traceinsight" / "torch.py"
    hook.write_text(hook.read_text(encoding="utf-8") + "\nimport traceinsight.delta  # planted: an independent sibling\n")
    res = _lint(root)
    assert res.returncode != 0
    assert "traceinsight.vocab.units -> traceinsight.derive.ledger" in res.stdout
    assert "traceinsight.torch -> traceinsight.delta" in res.stdout


def test_the_wheel_lists_every_package():
    """pyproject's explicit package list (the rules folder ships under another name) names every package of the
    tree, so a new subpackage cannot be left out of the wheel that ``pip install .`` builds."""
    listed = set(CONFIG["tool"]["setuptools"]["packages"])
    tree = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "traceinsight").rglob("__init__.py")}
    assert tree - listed == set()
