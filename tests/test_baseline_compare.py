"""``baseline.compare`` and ``load_report`` by value, on hand-made findings and reports: each status at its exact
boundary (both guards of "worse" are inclusive), what a fixed finding carries, and the one-line errors."""

from __future__ import annotations

import json
import os

import pytest

from traceinsight.pipeline.baseline import NEW, SAME, WORSE, Comparison, compare, load_report
from traceinsight.vocab.errors import ConfigError
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


def test_defaults_and_custom_thresholds_travel_into_the_report():
    c = compare([], {})
    assert (c.source, c.worse_pct, c.worse_points) == ("", 25.0, 1.0)
    c = compare([], {}, source="b.json", worse_pct=10.0, worse_points=0.5, mfu_pct=41.0)
    d = c.to_dict()
    assert (d["source"], d["worse_pct"], d["worse_points"]) == ("b.json", 10.0, 0.5)
    assert d["mfu"] == {"before_pct": None, "after_pct": 41.0}


@pytest.mark.parametrize(
    ("efficiency", "before"),
    [
        ({"mfu_pct": 38.25}, 38.25),
        ({"mfu_pct": 40}, 40.0),  # an integer in the JSON
        ({"mfu_pct": None}, None),  # the report knew no FLOPs
        ({"mfu_pct": "38"}, None),  # a string is not a share
        ({"mfu_pct": float("inf")}, None),
        ({"mfu_pct": float("nan")}, None),
        ({}, None),
        ([38.0], None),  # not a block: ignored, no error
        ("38", None),
    ],
)
def test_mfu_of_the_baseline_report(efficiency, before):
    c = compare([], {"findings": [], "efficiency": efficiency}, mfu_pct=45.04)
    assert c.mfu_before_pct == before and c.mfu_after_pct == 45.04
    assert type(c.mfu_before_pct) is (float if before is not None else type(None))
    tail = f"; MFU {before:.1f}% → 45.0%" if before is not None else ""
    assert c.sentence() == "compared with the baseline: 0 new, 0 worse, 0 unchanged, 0 fixed" + tail


def test_mfu_needs_both_reports():
    base = {"findings": [], "efficiency": {"mfu_pct": 30.0}}
    assert compare([], base).sentence() == "compared with the baseline: 0 new, 0 worse, 0 unchanged, 0 fixed"
    assert compare([], {"findings": []}, mfu_pct=30.0).sentence() == "compared with the baseline: 0 new, 0 worse, 0 unchanged, 0 fixed"
    assert compare([], base, mfu_pct=31.26).sentence() == "compared with the baseline: 0 new, 0 worse, 0 unchanged, 0 fixed; MFU 30.0% → 31.3%"


_OURS = {"schema_version": 1, "traceinsight_version": "0.1.0"}
_HINT = "write one with 'traceinsight analyze TRACE -f json -o FILE'"


def _refused(path, doc) -> str:
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError) as e:
        load_report(path)
    return str(e.value)


def test_both_identity_fields_are_required(tmp_path):
    p = tmp_path / "r.json"
    no_id = f"baseline {p}: not a traceinsight JSON report (no schema_version / traceinsight_version; {_HINT})"
    assert _refused(p, {"traceinsight_version": "0.1.0", "findings": []}) == no_id
    assert _refused(p, {"schema_version": 1, "findings": []}) == no_id
    assert _refused(p, {"schema_version": 1, "traceinsight_version": 1, "findings": []}) == no_id


@pytest.mark.parametrize(("version", "shown"), [(2, "'2'"), (True, "'True'"), ("1", "'1'"), ("9" * 30, repr("9" * 20))])
def test_schema_versions_not_read_are_named(tmp_path, version, shown):
    p = tmp_path / "r.json"
    assert _refused(p, {**_OURS, "schema_version": version, "findings": []}) == (
        f"baseline {p}: report schema version {shown} is not one this traceinsight reads (1); {_HINT}")


def test_findings_limit_is_inclusive(tmp_path, monkeypatch):
    import traceinsight.pipeline.baseline as baseline

    monkeypatch.setattr(baseline, "MAX_BASELINE_FINDINGS", 3)
    p = tmp_path / "r.json"
    rows = [{"fingerprint": f"{i:016x}"} for i in range(4)]
    p.write_text(json.dumps({**_OURS, "findings": rows[:3]}))
    assert len(load_report(p)["findings"]) == 3
    assert _refused(p, {**_OURS, "findings": rows}) == (
        f"baseline {p}: not a traceinsight JSON report (findings with 16-hex-digit fingerprints expected; {_HINT})")


def test_what_is_shown_of_a_baseline_finding_is_bounded(tmp_path):
    p = tmp_path / "r.json"
    rows = [
        {"fingerprint": "0" * 16, "code": "C" * 20, "title": "t" * 300},  # at the limits: kept as they are
        {"fingerprint": "1" * 16, "code": "C" * 21, "title": "t" * 301},  # one over: cut, with an ellipsis
        {"fingerprint": "2" * 16, "code": 12345, "title": ["a", "b"]},  # not strings: their text
        {"fingerprint": "3" * 16, "code": 10**25},  # not a string and over the limit once written out
        {"fingerprint": "4" * 16},  # absent fields stay absent
    ]
    p.write_text(json.dumps({**_OURS, "findings": rows}))
    got = load_report(p)["findings"]
    assert got[0] == {"fingerprint": "0" * 16, "code": "C" * 20, "title": "t" * 300}
    assert got[1] == {"fingerprint": "1" * 16, "code": "C" * 19 + "…", "title": "t" * 299 + "…"}
    assert got[2] == {"fingerprint": "2" * 16, "code": "12345", "title": "['a', 'b']"}
    assert got[3] == {"fingerprint": "3" * 16, "code": "1" + "0" * 18 + "…"}
    assert got[4] == {"fingerprint": "4" * 16}


def test_a_file_that_grows_past_its_size_is_refused(tmp_path):
    """A file whose size says little but whose read gives more (procfs reports 0 bytes) is cut at the limit."""
    status = "/proc/self/status"
    if not os.path.isfile(status) or os.stat(status).st_size != 0:
        pytest.skip("no procfs")
    with pytest.raises(ConfigError) as e:
        load_report(status, max_bytes=50)
    assert str(e.value) == f"baseline {status}: too large for a traceinsight JSON report (limit 50 bytes)"


def test_os_errors_are_one_bounded_line(tmp_path):
    long = tmp_path / ("x" * 300 + ".json")  # longer than any file name may be
    with pytest.raises(ConfigError) as e:
        load_report(long)
    detail = str(OSError(36, "File name too long", str(long)))[:200]
    assert str(e.value) == f"baseline {long}: not a traceinsight JSON report (OSError: {detail})"


def test_a_file_swapped_after_the_check_is_refused(tmp_path, monkeypatch):
    """Between the stat and the open a regular file may be replaced by a folder or a device: the open side checks
    again (the stat is made to see the regular file that was there a moment before)."""
    import traceinsight.pipeline.baseline as baseline

    regular = os.stat(__file__)
    real_stat = os.stat
    monkeypatch.setattr(baseline.os, "stat", lambda p, *a, **k: regular if str(p) in (str(tmp_path), os.devnull) else real_stat(p, *a, **k))
    for path in (tmp_path, os.devnull):
        with pytest.raises(ConfigError) as e:
            load_report(path)
        assert str(e.value) == f"baseline {path}: not a regular file"
