"""tests/data: the real traces shipped with the tests are listed with their licence, fit the budget, stay identical
to their corpus copies, and cover every input format with real GPU activity, corpus or not."""

from __future__ import annotations

import re

import pytest

import traceinsight

from .conftest import CORPUS, DATA

BUDGET_BYTES = 8_000_000
PERMISSIVE = re.compile(r"^(MIT|BSD(-[23]-Clause)?|Apache-2\.0)$")
#: Specifications shipped unmodified (SOURCES.md, "Specifications"): a standard's schema under its own notice.
SPEC_LICENCES = {"sarif/sarif-schema-2.1.0.json": "OASIS copyright notice"}


def _listed() -> dict[str, tuple[int, str]]:
    """SOURCES.md table rows: path -> (bytes, licence)."""
    rows = {}
    for line in (DATA / "SOURCES.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`") and cells[1].isdigit():
            rows[cells[0].strip("`")] = (int(cells[1]), cells[4])
    return rows


def _files() -> dict[str, int]:
    return {str(p.relative_to(DATA)): p.stat().st_size for p in DATA.rglob("*") if p.is_file() and p.name != "SOURCES.md"}


def test_every_file_listed_with_size_and_permissive_licence():
    listed, files = _listed(), _files()
    assert set(listed) == set(files)
    for rel, (size, licence) in listed.items():
        assert files[rel] == size, rel
        assert PERMISSIVE.match(licence) or SPEC_LICENCES.get(rel) == licence, f"{rel}: {licence}"


def test_within_budget():
    assert sum(_files().values()) <= BUDGET_BYTES


@pytest.mark.parametrize("rel", sorted(r for r in _files() if r not in SPEC_LICENCES))
def test_identical_to_corpus_copy(rel):
    src = CORPUS / rel
    if not src.exists():
        pytest.skip(f"{src} not in the corpus")
    assert (DATA / rel).read_bytes() == src.read_bytes()


# Expected (source format, GPU kernels) of each shipped file, read without the corpus.
EXPECTED = {
    "pytorch/kineto_resnet50_nw0_v100.pt.trace.json.gz": ("pytorch", 8772),
    "pytorch/hta_alexnet_a100_cudasync.json.gz": ("pytorch", 79),
    "pytorch/hta_event_sync_a100.json.gz": ("pytorch", 4),
    "nsys/nsys2026.1_torch-tiny_rtx3080.sqlite": ("nsys", 2),
    "nsys/nsys2026.2_fastvideo-train_2xH100_300ms-slice.sqlite": ("nsys", 4010),
    "tf/tensorflow-profiler-demo/GPU-multi-worker/34.83.195.179_6003.xplane.pb": ("tensorflow-xplane", None),
    "tf/tensorflow-profiler-demo/GPU-multi-worker/34.83.195.179_6003.trace.json.gz": ("tensorflow-json", None),
    "tf/tracelens-jax-mi300x/tw003.xplane.pb": ("tensorflow-xplane", None),
}


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_shipped_file_reads_as_its_format_with_gpu_work(rel):
    fmt, kernels = EXPECTED[rel]
    tl = traceinsight.load(DATA / rel)
    assert tl.meta.source_format == fmt
    n = int((tl.events["kind"] == "kernel").sum())
    assert n == kernels if kernels is not None else n > 100
    assert tl.meta.devices


def test_every_format_covered():
    assert {fmt for fmt, _ in EXPECTED.values()} == {"pytorch", "nsys", "tensorflow-xplane", "tensorflow-json"}
