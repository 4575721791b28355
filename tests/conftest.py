"""Shared fixtures: where the real-trace corpus lives, and the repository root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TRACEINSIGHT_SHARED", REPO.parent / "shared"))
CORPUS = SHARED / "traces"


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def corpus() -> Path:
    """../shared/traces (the real GPU traces); tests that need it skip when it is absent."""
    if not CORPUS.is_dir():
        pytest.skip(f"real-trace corpus not found at {CORPUS} (set TRACEINSIGHT_SHARED to the folder holding traces/)")
    return CORPUS


def corpus_file(rel: str) -> Path:
    """A corpus file for parametrised tests; skips when the corpus is absent."""
    p = CORPUS / rel
    if not p.exists():
        pytest.skip(f"corpus file {p} not found")
    return p
