"""The category record (``traceinsight.vocab.categories``) is the one home of what a finding category means: the
rule API's list, the kind of saving, grading, symptom or cause, the verdict's label and headline and the job page's
words all read it, and it agrees with the bucket record beside it."""

from __future__ import annotations

import ast
from pathlib import Path

from traceinsight.assess import causes, savings, severity, verdict
from traceinsight.job import verdict as job_verdict
from traceinsight.model import finding
from traceinsight.vocab import buckets, categories

REPO = Path(__file__).resolve().parents[1]


def test_every_reader_takes_the_record():
    assert finding.CATEGORIES == tuple(c.id for c in categories.TABLE if c.rule)
    assert finding.DEFAULT_CATEGORY == "compute" and "compute" in finding.CATEGORIES
    assert set(savings.BUSY_CATEGORIES) == {"compute", "copy", "communication"}
    assert severity.UNGRADED_CATEGORIES == {"trace_quality"}
    assert set(causes.SYMPTOMS) == {"gpu_idle", "launch_overhead"}
    assert set(causes.CAUSES) == {"input_pipeline", "host_sync", "copy", "compute", "communication"}
    assert verdict.LABELS["host_sync"] == "host syncs" and verdict.DEFAULT_IDLE == "gpu_idle"
    assert job_verdict._CAUSE_WORDS["input_pipeline"] == "it waits longer for input data"


def test_the_record_agrees_with_the_bucket_record():
    for b in buckets.TABLE:
        assert b.verdict in categories.BY_ID, b.id  # the category a bucket names as the bound has a record
        assert set(b.claimed_by) <= set(categories.RULE_CATEGORIES), b.id
    for c in categories.TABLE:
        if c.busy:  # a busy category claims its own busy bucket, which names it back
            assert [buckets.BY_ID[b].verdict for b in c.claims] == [c.id] and all(buckets.BY_ID[b].busy for b in c.claims)
        if c.recording:
            assert c.claims == () and not c.graded
    assert [c.id for c in categories.TABLE if not c.bound] == ["cannot_judge", "unexplained", "no_gpu"]


def test_verdict_headlines_come_from_the_record():
    v = verdict._verdict("no_gpu", None, 0, 0, "nothing ran")
    assert v["headline"] == "No GPU activity" and v["bound"] is False and v["label"] == "no GPU activity"
    v = verdict._verdict("host_sync", "idle_host_sync", 5, 10, "s")
    assert v["headline"] == "Bound by host syncs" and v["bound"] is True


def _category_literals(tree: ast.AST) -> list[str]:
    """Comparisons with a category that has a property in the record (busy, about the recording, symptom/cause)."""
    special = {c.id for c in categories.TABLE if c.recording} | {"trace_quality"}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for o in [node.left, *node.comparators]:
                elts = o.elts if isinstance(o, (ast.Tuple, ast.List, ast.Set)) else [o]
                if any(isinstance(e, ast.Constant) and e.value in special for e in elts):
                    out.append(f"l.{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_module_tests_a_category_by_name_for_what_the_record_says():
    """``f.category == "trace_quality"`` is ``categories.about_recording(f.category)``: the question, not the name."""
    offenders = {}
    for path in sorted([*(REPO / "traceinsight").rglob("*.py"), *(REPO / "rules").glob("*.py")]):
        found = _category_literals(ast.parse(path.read_text(encoding="utf-8")))
        if found:
            offenders[str(path.relative_to(REPO))] = found
    assert offenders == {}
