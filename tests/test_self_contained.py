"""The package, the rules and the docs cite only what ships with them: no notes or traces outside the repository."""

from __future__ import annotations

import re

import pytest

from .conftest import REPO

# Research notes and the corpus live beside the repository, not in it; a user cannot follow a link to them.
OUTSIDE = re.compile(r"research/|shared/(traces|research)|\.\./shared|\b(tf_and_rnn|pytorch_anchors|nsys|peers_2026)\.md\b")


@pytest.mark.parametrize("folder", ["traceinsight", "rules", "docs"])
def test_no_reference_outside_the_repository(folder):
    hits = []
    for path in sorted((REPO / folder).rglob("*")):
        if path.suffix not in (".py", ".md", ".j2", ".js", ".css", ".c", ".txt") or not path.is_file():
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert hits == []
