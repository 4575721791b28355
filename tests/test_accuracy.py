"""The labelled accuracy table (tests/accuracy_table.toml): every corpus trace with what an expert reads in it.

Each row fixes the GPU busy % (within 0.5 point), the verdict category and the codes that must and must not be
reported at warning or above; the table's ``why`` lines give the reason for each. Skips cleanly without the corpus.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import traceinsight
from tests.conftest import corpus_file
from traceinsight.assess.verdict import details

TABLE = tomllib.loads((Path(__file__).parent / "accuracy_table.toml").read_text(encoding="utf-8"))["trace"]


def test_table_is_well_formed():
    paths = [row["path"] for row in TABLE]
    assert len(paths) == len(set(paths)), "a trace is labelled twice"
    for row in TABLE:
        why = row.get("why", {})
        assert "verdict" in why, f"{row['path']}: the verdict needs a reason"
        for code in row.get("present", []) + row.get("absent", []):
            assert code in why, f"{row['path']}: {code} needs a one-line reason"
        assert not set(row.get("present", [])) & set(row.get("absent", [])), row["path"]


@pytest.mark.parametrize("row", TABLE, ids=[r["path"].split("/")[-1] or r["path"] for r in TABLE])
def test_accuracy(row):
    a = traceinsight.analyze(corpus_file(row["path"]))
    busy = a.summary.gpu_busy_pct
    if "busy_pct" in row:
        assert busy is not None and busy == pytest.approx(row["busy_pct"], abs=0.5), f"busy {busy}"
    else:
        assert busy is None
    loud = {f.code for f in a.findings if f.severity.rank >= traceinsight.Severity.WARNING.rank}
    missing = set(row.get("present", [])) - loud
    false_alarms = set(row.get("absent", [])) & loud
    assert not missing, f"expected at warning or above: {sorted(missing)}; got {sorted(loud)}"
    assert not false_alarms, f"false alarms: {sorted(false_alarms)} ({'; '.join(row['why'][c] for c in sorted(false_alarms))})"
    d = details(a)
    cat = d["category"]
    if row["verdict"] == "not_judged":
        assert cat == "cannot_judge" and not d["bound"], f"verdict {cat!r} names a bound on a trace too thin to judge"
    else:
        assert cat == row["verdict"], f"verdict {cat!r}, expected {row['verdict']!r}: {row['why']['verdict']}"


def test_savings_never_exceed_the_window():
    """Explained symptoms are not counted again: the headline saving stays within the span on every row."""
    from traceinsight.assess.verdict import headline

    for row in TABLE:
        p = corpus_file(row["path"])
        a = traceinsight.analyze(p)
        h = headline(a)
        assert h["est_savings_ns"] <= max(h["span_ns"], 0) or h["span_ns"] == 0, row["path"]


#: The memory rules: they read the memory table, which a format may not carry for the same run.
MEMORY_CODES = {"TI030", "TI031", "TI032", "TI033"}
TF_RUN = "tf/e4040-t4-keras-cnn/train/plugins/profile/2022_11_04_21_26_12/instance-ecbm"
TF_DEMO = "tf/tensorflow-profiler-demo/GPU-multi-worker/34.83.195.179_6003"


@pytest.mark.parametrize(
    "paths",
    [
        (f"{TF_RUN}.trace.json.gz", f"{TF_RUN}.xplane.pb", "tf/e4040-t4-keras-cnn/train"),
        (f"{TF_DEMO}.trace.json.gz", f"{TF_DEMO}.xplane.pb"),
    ],
    ids=["e4040-json-xplane-logdir", "demo-json-xplane"],
)
def test_one_run_one_set_of_codes_in_every_format(paths):
    """One phenomenon, one code: the trace.json.gz, the xplane and the logdir of one run report the same codes
    (at every severity) with the same severities, and the same verdict."""
    seen = []
    for rel in paths:
        a = traceinsight.analyze(corpus_file(rel))
        codes = sorted((f.code, f.severity.value, f.location.device) for f in a.findings)
        seen.append((rel, codes, details(a)["category"], not a.timeline.memory.empty))
    # TensorFlow's trace.json export leaves the allocator events out: the memory rules (TI030-TI033) can only speak
    # where the memory was exported, and must agree among the formats that have it
    with_memory = [x for x in seen if x[3]]
    for other in with_memory[1:]:
        assert [c for c in other[1] if c[0] in MEMORY_CODES] == [c for c in with_memory[0][1] if c[0] in MEMORY_CODES]
    seen = [(rel, [c for c in codes if c[0] not in MEMORY_CODES], cat, mem) for rel, codes, cat, mem in seen]
    first = seen[0]
    for other in seen[1:]:
        assert other[1] == first[1], f"{other[0]} vs {first[0]}"
        assert other[2] == first[2], f"{other[0]} vs {first[0]}"
