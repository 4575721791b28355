"""The per-rule docs in docs/rules/ are generated from the rules and must be current; every built-in rule must carry
what a good rule needs (a stable code and name, a one-sentence summary, why, definition, fixes with code, option help).

When a test here fails because docs are stale, run ``python docs/gen_rule_docs.py`` and commit the result.
"""

from __future__ import annotations

import importlib.util
import re
import textwrap
from pathlib import Path

import pytest

from traceinsight.assess.advice import TIERS

from traceinsight.pipeline.plugins import discover
from traceinsight.rule_api import CATEGORIES, Fix, Severity

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "rules"

#: The rule modules shipped in rules/ (one rule each): the registry must find every one, so a rule file whose
#: class fails to import or lost its code cannot drop out of the docs (or a CI gate) silently.
RULE_FILES = sorted(p.stem for p in (ROOT / "rules").glob("*.py") if not p.name.startswith("_"))


def _gen():
    spec = importlib.util.spec_from_file_location("gen_rule_docs", ROOT / "docs" / "gen_rule_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


GEN = _gen()
RULES = GEN.builtin_rules()


# --- generated docs are current ----------------------------------------------------------------------------
def test_committed_docs_are_current():
    problems = GEN.stale(DOCS)
    assert problems == [], "docs/rules/ is stale; run: python docs/gen_rule_docs.py\n" + "\n".join(problems)


def test_every_rule_file_is_registered():
    assert sorted(cls.__module__.rsplit(".", 1)[-1] for cls in RULES.values()) == RULE_FILES


def test_every_rule_has_a_page_an_index_row_and_a_readme_row():
    pages = GEN.render()
    assert set(pages) == {f"{c}.md" for c in RULES} | {"README.md"}
    index = pages["README.md"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for code, cls in RULES.items():
        assert f"| [{code}]({code}.md) | `{cls.name}` | {cls.category} | {cls.severity.value} | {cls.lifecycle} |" in index
        assert f"| [{code}](docs/rules/{code}.md) | `{cls.name}` | {cls.category} |" in readme
        assert pages[f"{code}.md"].endswith(cls.docs().rstrip("\n") + "\n")  # the same text `traceinsight rule` prints


def test_stale_detection(tmp_path):
    """The staleness check itself: a changed page, a missing page and an orphaned page are all reported."""
    pages = GEN.render()
    for name, text in pages.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert GEN.stale(tmp_path, pages) == []
    (tmp_path / "TI001.md").write_text(pages["TI001.md"].replace("gpu-idle-gaps", "gpu-idle"), encoding="utf-8")
    (tmp_path / "TI002.md").unlink()
    (tmp_path / "TI999.md").write_text("old", encoding="utf-8")
    readme = tmp_path.parent / f"{tmp_path.name}-README.md"
    readme.write_text(f"intro\n{GEN.BEGIN}\n| TI001 | hand-edited |\n{GEN.END}\nrest\n", encoding="utf-8")
    assert GEN.stale(tmp_path, pages, readme=readme) == [
        "README.md: rule table out of date",
        "TI001.md: out of date",
        "TI002.md: missing",
        "TI999.md: no such rule any more",
    ]
    readme.write_text(GEN.readme_with_table(readme.read_text(encoding="utf-8")), encoding="utf-8")
    assert readme.read_text(encoding="utf-8").startswith("intro\n") and readme.read_text(encoding="utf-8").endswith("\nrest\n")
    assert GEN.stale(tmp_path, pages, readme=readme)[0] != "README.md: rule table out of date"


def test_main_check_and_write(tmp_path):
    assert GEN.main(["--check", "--out", str(tmp_path)]) == 1
    assert GEN.main(["--out", str(tmp_path)]) == 0
    assert GEN.main(["--check", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(GEN.render())


def test_cli_prints_the_same_page():
    from typer.testing import CliRunner

    from traceinsight.cli.app import app

    res = CliRunner().invoke(app, ["rule", "TI006"])
    assert res.exit_code == 0, res.output
    # the page laid out for a terminal (rich): every heading of the Markdown page is there, as text
    out = " ".join(res.output.split())
    for line in RULES["TI006"].docs().splitlines():
        if line.startswith("#"):
            assert line.lstrip("# ").strip() in out, line


# --- codes and names are unique (their stability is guarded by the committed pages above) ------------------
def test_codes_and_names_unique_and_no_discovery_warnings():
    rs = discover()
    assert not rs.failures, [f.line() for f in rs.failures]
    names = [cls.name for cls in RULES.values()]
    assert len(names) == len(set(names))
    assert len({cls for cls in RULES.values()}) == len(RULES)  # one class per code


# --- what every built-in rule must have --------------------------------------------------------------------
@pytest.mark.parametrize("code", sorted(RULES))
def test_rule_metadata(code):
    cls = RULES[code]
    assert re.fullmatch(r"TI\d{3}", cls.code) and cls.code == code
    assert re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)+", cls.name), f"{code}: name {cls.name!r} is not kebab-case"
    assert isinstance(cls.severity, Severity)
    assert "category" in vars(cls) and cls.category in CATEGORIES, f"{code}: declare the bound its findings belong to"
    summary = cls.summary
    assert summary and "\n" not in summary and summary == summary.strip(), f"{code}: summary must be one line"
    assert summary[0].isupper() and summary.endswith("."), f"{code}: summary must be a sentence: {summary!r}"
    assert len(summary) <= 120, f"{code}: summary is {len(summary)} chars; keep it to one short line"
    assert len(textwrap.dedent(cls.why).strip()) >= 80, f"{code}: 'why' is missing or too thin"
    assert len(textwrap.dedent(cls.definition).strip()) >= 80, f"{code}: 'definition' is missing or too thin"


@pytest.mark.parametrize("code", sorted(RULES))
def test_rule_fixes_have_code(code):
    cls = RULES[code]
    for fw, fx in (("pytorch", cls.fix_pytorch), ("tensorflow", cls.fix_tensorflow)):
        assert isinstance(fx, Fix)
        assert fx.text.strip(), f"{code}: no {fw} fix text"
        assert fx.code.strip(), f"{code}: the {fw} fix has no code snippet"
    bases = {k for k in cls.fixes() if ":" not in k} - {"jax"}  # JAX advice where the rule has some
    assert bases in ({"pytorch", "tensorflow"}, {"pytorch", "tensorflow", "cuda"})
    for key in set(cls.fixes()) - bases - {"jax"}:  # GPU-generation variants of a framework the rule covers
        fw, _, tier = key.partition(":")
        assert fw in bases and tier in TIERS, key


@pytest.mark.parametrize("code", sorted(RULES))
def test_rule_options_documented(code):
    cls = RULES[code]
    for name, opt in cls.options.items():
        assert opt.name == name
        assert opt.help.strip(), f"{code}: option {name!r} has no help text"
        assert re.fullmatch(r"[a-z][a-z0-9_]*", name), f"{code}: option {name!r} is not snake_case"
        cls(**{name: opt.default})  # the default converts through its own type


@pytest.mark.parametrize("code", sorted(RULES))
def test_rule_page_sections(code):
    doc = RULES[code].docs()
    assert doc.startswith(f"# {code} {RULES[code].name}\n")
    sections = ["## Why it matters", "## What is measured", "## Fix in PyTorch", "## Fix in TensorFlow"]
    if RULES[code].options:
        sections.insert(2, "## Options")
    positions = [doc.index(s) for s in sections]
    assert positions == sorted(positions)
    n_jax = int(bool(RULES[code].fix_jax.code))
    assert doc.count("```python") == 2 + n_jax + sum(1 for k in RULES[code].fix_variants if not k.startswith("cuda:"))
    assert doc.count("```cuda") == bool(RULES[code].fix_cuda.text) + sum(1 for k in RULES[code].fix_variants if k.startswith("cuda:"))


@pytest.mark.parametrize("code", ["TI001", "TI002", "TI003", "TI004"])
def test_rule_docs_have_definition_and_fixes(code):
    rs = discover()
    cls = rs.rules[code]
    doc = cls.docs()
    for section in ("## Why it matters", "## What is measured", "## Options", "## Fix in PyTorch", "## Fix in TensorFlow", "```python"):
        assert section in doc, (code, section)
    assert all(o.help for o in cls.options.values())
