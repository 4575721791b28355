"""TI014 events-lost: its positive, negative and fix cases, on planted traces and the real corpus."""

from __future__ import annotations

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.rule_cases import steady_steps


#: positive: it fires; negative: it stays silent; fix: the same trace, complete.
CASES = {
    "positive": ["test_ti014_truncated_json"],
    "negative": ["test_ti014_negative_complete_file"],
    "fix": ["test_ti014_negative_complete_file"],
}


def _of_code(a, code):
    return [f for f in a.findings if f.code == code]


def test_ti014_truncated_json(tmp_path):
    t = KinetoTrace()
    steady_steps(t, steps=8)
    p = t.write(tmp_path / "full.json", gz=False)
    data = p.read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[: int(len(data) * 0.8)])
    a = traceinsight.analyze(cut)
    (f,) = _of_code(a, "TI014")
    assert f.category == "trace_quality" and "truncated" in f.evidence["reader_warning"].iloc[0]


def test_ti014_negative_complete_file(tmp_path):
    t = KinetoTrace()
    steady_steps(t, steps=8)
    assert _of_code(traceinsight.analyze(t.write(tmp_path / "full.json", gz=False)), "TI014") == []
