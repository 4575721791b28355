"""``baseline.compare`` and ``load_report`` by value, on hand-made findings and reports: each status at its exact
boundary (both guards of "worse" are inclusive), what a fixed finding carries, and the one-line errors."""

from __future__ import annotations

import json

import pytest

from traceinsight.baseline import NEW, SAME, WORSE, Comparison, compare, load_report
from traceinsight.errors import ConfigError
from traceinsight.rule_api import Finding, Location, Severity


def _f(key: str, pct: float) -> Finding:
    return Finding(code="TI001", title=key, severity=Severity.WARNING, message="", impact_pct_span=pct, key=key, location=Location(rank=0))


def _report(*rows) -> dict:
    return {"findings": [dict(r) for r in rows]}


@pytest.mark.parametrize(
    ("was", "now", "expected"),
    [
        (4.0, 5.0, WORSE),  # +1 point and +25 %: both guards met exactly
        (4.0, 4.999, SAME),
        (10.0, 12.5, WORSE),  # +25 % exactly, +2.5 points
        (10.0, 12.49, SAME),  # +2.49 points, but 24.9 %
        (1.0, 2.0, WORSE),  # +1 point exactly, +100 %
        (1.0, 1.99, SAME),  # +99 %, but 0.99 points
        (10.0, 9.0, SAME),
    ],
)
def test_worse_at_its_boundaries(was, now, expected):
    f = _f("a", now)
    c = compare([f], _report({"fingerprint": f.fingerprint, "code": "TI001", "title": "a", "impact_pct_span": was}))
    assert c.status == {f.fingerprint: expected} and c.before_pct == {f.fingerprint: was}


def test_custom_thresholds():
    f = _f("a", 10.995)
    base = _report({"fingerprint": f.fingerprint, "impact_pct_span": 10.0})
    assert compare([f], base, worse_pct=10.0, worse_points=0.5).of(f) == SAME  # 10.995 < 10 x 1.10
    f.impact_pct_span = 11.0
    assert compare([f], base, worse_pct=10.0, worse_points=1.0).of(f) == WORSE
    assert compare([f], base, worse_pct=10.0, worse_points=1.01).of(f) == SAME


def test_statuses_fixed_and_the_report_dict():
    new, same, gone = _f("new", 3.0), _f("same", 3.0), _f("gone", 1.0)
    base = _report(
        {"fingerprint": same.fingerprint, "code": "TI001", "title": "same", "impact_pct_span": 3.0},
        {"fingerprint": same.fingerprint, "code": "TI001", "title": "a duplicate: the first one counts", "impact_pct_span": 0.1},
        {"fingerprint": gone.fingerprint, "code": "TI009", "title": "gone", "impact_pct_span": "7.5"},
        {"fingerprint": "f" * 16},  # no code, title or share: read as empty and 0
        {"fingerprint": "e" * 16, "impact_pct_span": "NaN"},
    )
    c = compare([new, same], base, source="main.json")
    assert (c.of(new), c.of(same), c.of(gone)) == (NEW, SAME, NEW)
    assert c.before_pct == {same.fingerprint: 3.0}
    assert c.to_dict() == {
        "source": "main.json",
        "counts": {NEW: 1, WORSE: 0, SAME: 1, "fixed": 3},
        "worse_pct": 25.0,
        "worse_points": 1.0,
        "fixed": [
            {"code": "TI009", "title": "gone", "fingerprint": gone.fingerprint, "impact_pct_span": 7.5},
            {"code": "", "title": "", "fingerprint": "f" * 16, "impact_pct_span": 0.0},
            {"code": "", "title": "", "fingerprint": "e" * 16, "impact_pct_span": 0.0},
        ],
        "mfu": {"before_pct": None, "after_pct": None},  # neither report knew its FLOPs
    }
    assert c.sentence() == "compared with the baseline: 1 new, 0 worse, 1 unchanged, 3 fixed"
    assert [x.key for x in c.gating([new, same])] == ["new"]


def test_a_report_without_findings_makes_everything_new():
    f = _f("a", 1.0)
    c = compare([f], {})
    assert c.status == {f.fingerprint: NEW} and c.fixed == [] and isinstance(c, Comparison)


def test_load_report_errors_are_one_exact_line(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_report(tmp_path / "none.json")
    assert str(e.value) == f"baseline {tmp_path / 'none.json'}: no such file"
    with pytest.raises(ConfigError) as e:
        load_report(tmp_path)
    assert str(e.value) == f"baseline {tmp_path}: not a regular file"
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ConfigError) as e:
        load_report(bad)
    assert str(e.value).startswith(f"baseline {bad}: not a traceinsight JSON report (JSONDecodeError: Expecting property name")
    hint = "write one with 'traceinsight analyze TRACE -f json -o FILE'"
    for doc in ([], {"findings": []}):  # not this tool's: no schema or version
        bad.write_text(json.dumps(doc))
        with pytest.raises(ConfigError) as e:
            load_report(bad)
        assert str(e.value) == f"baseline {bad}: not a traceinsight JSON report (no schema_version / traceinsight_version; {hint})"
    ours = {"schema_version": 1, "traceinsight_version": "0.1.0"}
    for findings in ({}, [{"fingerprint": 3}]):
        bad.write_text(json.dumps({**ours, "findings": findings}))
        with pytest.raises(ConfigError) as e:
            load_report(bad)
        assert str(e.value) == f"baseline {bad}: not a traceinsight JSON report (findings with 16-hex-digit fingerprints expected; {hint})"
    big = tmp_path / "big.json"
    big.write_text(json.dumps({**ours, "findings": []}) + " " * 100)
    with pytest.raises(ConfigError) as e:
        load_report(big, max_bytes=50)
    size = big.stat().st_size
    assert str(e.value) == f"baseline {big}: {size} bytes is too large for a traceinsight JSON report (limit 50)"
    assert load_report(big, max_bytes=size) == {**ours, "findings": []}
