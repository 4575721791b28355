"""Shared fixtures: where real traces live, the repository root, isolated state, and a count of skips by cause.

Real traces come from two places. ``../shared/traces`` (or ``$TRACEINSIGHT_SHARED/traces``) is the full corpus;
``tests/data`` ships a small, permissively licensed subset of it with the same layout, so a fresh clone still
tests every format (PyTorch JSON, Nsight Systems SQLite, TensorFlow XPlane and trace JSON) on real data.
``corpus_file`` looks in the corpus first, then in the subset, and skips only when neither has the file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

try:  # the test extra has it; a bare checkout without it still runs every test that does not
    from hypothesis import settings as _hypothesis_settings
except ImportError:  # pragma: no cover
    _hypothesis_settings = None

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TRACEINSIGHT_SHARED", REPO.parent / "shared"))
CORPUS = SHARED / "traces"
DATA = REPO / "tests" / "data"

#: The one reason every corpus-only test skips with; the summary hook below counts them under one cause.
NEEDS_CORPUS = f"need the real-trace corpus at {CORPUS} (see README.md, 'Running the tests')"

#: Skip reasons of missing optional packages -> (package, how to get it without a CUDA build).
_OPTIONAL = {
    "torch": "torch (CPU build: pip install torch --index-url https://download.pytorch.org/whl/cpu)",
    "tensorflow": "tensorflow (CPU build: pip install tensorflow-cpu)",
    "keras": "tensorflow (CPU build: pip install tensorflow-cpu)",
}


def have_corpus() -> bool:
    return CORPUS.is_dir()


def trace_root() -> Path:
    """The folder real traces are read from: the full corpus when present, else the shipped subset."""
    return CORPUS if have_corpus() else DATA


def corpus_glob(pattern: str) -> list[str]:
    """Paths (relative to the trace root) matching ``pattern``, for parametrising over every real file at hand."""
    root = trace_root()
    return sorted(str(p.relative_to(root)) for p in root.glob(pattern))


def skip_needs_corpus() -> None:
    pytest.skip(NEEDS_CORPUS)


def corpus_file(rel: str) -> Path:
    """A real trace by its corpus-relative path: from the corpus, else from tests/data; skips when neither has it."""
    for root in (CORPUS, DATA):
        p = root / rel
        if p.exists():
            return p
    skip_needs_corpus()
    raise AssertionError("unreachable")  # pragma: no cover


if _hypothesis_settings is not None:
    # property tests are repeatable: the same examples on every run and machine, no example database written
    # next to the checkout (a test's own @settings may change the counts, not this)
    _hypothesis_settings.register_profile("traceinsight", derandomize=True, database=None, deadline=None)
    _hypothesis_settings.load_profile("traceinsight")


#: Settings read from the environment that would carry state between runs or from the user's shell into a test.
_UNSET_FOR_TESTS = ("TRACEINSIGHT_SCHEDULER", "TRACEINSIGHT_TRUST_PYPROJECT", "TRACEINSIGHT_NSYS", "XDG_CACHE_HOME")


@pytest.fixture(scope="session", autouse=True)
def _isolated_state(tmp_path_factory):
    """No test reads or writes the user's cache: compiled templates go to a folder of this session (tests of the
    cache itself point it elsewhere with monkeypatch), and settings from the caller's shell are cleared."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TRACEINSIGHT_CACHE_DIR", str(tmp_path_factory.mktemp("traceinsight-cache")))
    for name in _UNSET_FOR_TESTS:
        mp.delenv(name, raising=False)
    _clear_template_env()
    yield
    mp.undo()
    _clear_template_env()


def _clear_template_env() -> None:
    import sys

    templating = sys.modules.get("traceinsight.render.templating")
    if templating is not None:  # an environment made before the fixture ran holds the cache it found then
        templating.env.cache_clear()


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def corpus() -> Path:
    """../shared/traces itself, for tests that walk the whole corpus; they skip when it is absent."""
    if not have_corpus():
        skip_needs_corpus()
    return CORPUS


def _skip_group(reason: str) -> str | None:
    """The summary line a skip reason belongs to, or None to leave it as pytest prints it."""
    if reason == NEEDS_CORPUS or "real-trace corpus" in reason or " in the corpus" in reason or reason.startswith("corpus file "):
        return NEEDS_CORPUS
    if reason.startswith("could not import "):  # pytest.importorskip: the module asked for, then the one missing
        for module in re.findall(r"'([\w.]+)'", reason)[::-1]:
            if module.split(".")[0] in _OPTIONAL:
                return f"need {_OPTIONAL[module.split('.')[0]]}"
    return None


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line per cause of skips (the corpus, an optional framework), with counts, above ``-ra``'s list, which
    still names every skipped test (``--no-fold-skipped`` in the pytest options): an unexpected skip stays visible.
    """
    causes: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        if not (isinstance(longrepr, tuple) and len(longrepr) == 3):
            continue
        reason = str(longrepr[2]).removeprefix("Skipped: ")
        group = _skip_group(reason) or reason
        causes[group] = causes.get(group, 0) + 1
    if causes:
        terminalreporter.write_sep("=", "skips by cause")
        for group, n in sorted(causes.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"{n:5d} {group}")
