"""docs/timeline.md and traceinsight/model/timeline.py describe the same schema."""

from __future__ import annotations

import re

import numpy as np

from traceinsight.model.timeline import (COLUMNS, KINDS, MEMORY_COLUMNS, MEMORY_KINDS, OPTIONAL_COLUMNS, Timeline, TraceMeta,
                                   assign_steps, build_events, build_memory, rebase)
from traceinsight.vocab.intervals import merge_intervals
from traceinsight.derive.views import Views

from .conftest import REPO


def _doc_table(text: str, heading: str) -> dict[str, str]:
    section = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^\| `([a-z_]+)` \| ([a-z0-9]+) \|", section, flags=re.M))


def test_documented_columns_match_code():
    text = (REPO / "docs" / "timeline.md").read_text(encoding="utf-8")
    assert _doc_table(text, "Required columns") == COLUMNS
    assert _doc_table(text, "Optional columns") == OPTIONAL_COLUMNS
    kinds = re.findall(r"^\| `([a-z_]+)` \| (?:a |an |kept|one)", text.split("## Kinds", 1)[1].split("\n## ", 1)[0], flags=re.M)
    assert tuple(kinds) == KINDS


def test_documented_memory_table_matches_code():
    text = (REPO / "docs" / "timeline.md").read_text(encoding="utf-8")
    assert _doc_table(text, "Memory") == MEMORY_COLUMNS
    section = text.split("## Memory", 1)[1].split("\n## ", 1)[0]
    kinds = re.search(r"^\| `kind` \| category \| (.*) \|$", section, flags=re.M).group(1)
    assert tuple(re.findall(r"`([a-z_]+)`", kinds)) == MEMORY_KINDS


def test_build_memory_defaults_and_dtypes():
    m = build_memory({"kind": ["alloc"], "start_ns": [5], "delta_bytes": [64]})
    for col, dtype in MEMORY_COLUMNS.items():
        assert str(m[col].dtype) == dtype
    assert m["device"].tolist() == [-1] and m["step"].tolist() == [-1] and m["count"].tolist() == [1]
    assert np.isnan(m["allocated"].iloc[0]) and list(m["kind"].cat.categories) == list(MEMORY_KINDS)
    assert build_memory().empty and list(build_memory().columns) == list(MEMORY_COLUMNS)


def test_build_events_defaults_and_dtypes():
    ev = build_events({"kind": ["kernel", "cpu_op"], "name": ["k", "op"], "start_ns": [30, 10], "dur_ns": [5, 40]})
    for col, dtype in COLUMNS.items():
        assert str(ev[col].dtype) == dtype
    assert ev["device"].tolist() == [-1, -1] and ev["step"].tolist() == [-1, -1]
    assert list(ev["kind"].cat.categories) == list(KINDS)
    assert rebase(ev) == 10 and ev["start_ns"].tolist() == [20, 0]


def test_assign_steps_and_inheritance():
    ev = build_events(
        {
            "kind": ["step", "step", "runtime", "kernel", "cpu_op"],
            "name": ["ProfilerStep#4", "ProfilerStep#5", "cudaLaunchKernel", "k", "op"],
            "start_ns": [0, 100, 90, 150, 250],
            "dur_ns": [100, 100, 5, 10, 10],
            "device": [-1, -1, -1, 0, -1],
            "stream": [-1, -1, -1, 7, -1],
            "correlation": [-1, -1, 11, 11, -1],
        }
    )
    assign_steps(ev)
    # The kernel starts in step 5 but was launched in step 4: it belongs to step 4.
    assert ev["step"].tolist() == [4, 5, 4, 4, -1]


def test_merge_intervals_and_gaps():
    s, e = merge_intervals(np.array([0, 5, 20, 21, 50]), np.array([10, 8, 25, 30, 60]))
    assert s.tolist() == [0, 20, 50] and e.tolist() == [10, 30, 60]
    ev = build_events(
        {"kind": ["kernel"] * 3, "name": ["a", "b", "c"], "start_ns": [0, 20, 50], "dur_ns": [10, 10, 10], "device": [0, 0, 0], "stream": [7, 8, 7]}
    )
    v = Views(Timeline(ev, TraceMeta("test")))
    assert v.gaps["dur_ns"].tolist() == [10, 20]
    u = v.utilization.iloc[0]
    assert u["busy_ns"] == 30 and u["window_ns"] == 60 and round(u["busy_pct"], 3) == 50.0
