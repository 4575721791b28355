"""Every line of the judged traces' expectations (``../shared/traces/judged/EXPECTED.md``) as a test.

An expert read each trace from its raw events and wrote what a report must and must not say; this module parses
those lines (it does not copy them) and checks each against the report, with the expert's reading ("Truth: ...")
as the reason in the failure message. A line this module cannot read fails too, so a new kind of expectation is
never skipped in silence. Skips when the corpus is absent (``corpus`` fixture).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import CORPUS, have_corpus

EXPECTED = CORPUS / "judged" / "EXPECTED.md"

#: Finding categories that describe the recording, not the run: "no performance finding" leaves them out.
TRACE_QUALITY = "trace_quality"


@dataclass(frozen=True)
class Expectation:
    trace: str
    line: str
    truth: str

    @property
    def id(self) -> str:
        return f"{self.trace.split('.')[0]}: {self.line}"


def _truth(block: list[str]) -> str:
    """The expert's conclusion of a section: its "Truth:" sentence, else its reading's first line."""
    text = " ".join(s.strip() for s in block)
    m = re.search(r"Truth:\s*(.+?)(?=\s+- False alarms|\s+- Caveat|\s+Expected:|$)", text)
    if m:
        return m.group(1).strip()
    m = re.search(r"Reading:\s*(.+?)(?=\s+Expected:|$)", text)
    return m.group(1).strip()[:300] if m else "(no reading given)"


def parse(path: Path) -> list[Expectation]:
    """The expectation lines of EXPECTED.md, each with its trace and the reading's reason. A section's
    "Expected:" list belongs to the last trace heading above it (a heading without a file name does not start
    a trace)."""
    out: list[Expectation] = []
    trace, block, in_expected, foreign = None, [], False, False
    for raw in path.read_text(encoding="utf-8").splitlines():
        head = re.match(r"^##\s+`([^`]+)`", raw)
        if head:
            trace, block, in_expected, foreign = head.group(1), [], False, False
            continue
        if raw.startswith("## "):  # a note between a trace's reading and its list: not part of the reading
            in_expected, foreign = False, True
            continue
        if raw.strip() == "Expected:":
            in_expected = True
            continue
        if in_expected and raw.startswith("- ") and trace:
            out.append(Expectation(trace, raw[2:].strip(), _truth(block)))
        elif not in_expected and not foreign:
            block.append(raw)
    return out


EXPECTATIONS = parse(EXPECTED) if have_corpus() and EXPECTED.exists() else []


def _codes(text: str) -> list[str]:
    return re.findall(r"TI\d{3}", text)


def _names(text: str) -> list[str]:
    return [w.strip() for w in text.split(",") if w.strip()]


_REPORTS: dict[str, object] = {}


def report(trace: str):
    """The analysis of a judged trace, made once per test session (every expectation of a trace reads it)."""
    if trace not in _REPORTS:
        import traceinsight

        _REPORTS[trace] = traceinsight.analyze(CORPUS / "judged" / trace)
    return _REPORTS[trace]


def _perf(a) -> list:
    return [f for f in a.findings if f.category != TRACE_QUALITY]


def check(e: Expectation, a) -> str | None:
    """None when the report meets the expectation, else what it says instead."""
    line = e.line
    verdict = a.verdict["category"]
    sev = {f.code: [] for f in a.findings}
    for f in a.findings:
        sev[f.code].append(f.severity.value)
    m = re.fullmatch(r"GPU busy ([\d.]+) % \(±([\d.]+)\)", line)
    if m:
        want, tol = float(m.group(1)), float(m.group(2))
        got = a.kpis["gpu_busy_pct"]
        return None if got is not None and abs(got - want) <= tol + 1e-9 else f"GPU busy {got} %"
    m = re.fullmatch(r"verdict one of: (.+)", line)
    if m:
        return None if verdict in _names(m.group(1)) else f"verdict {verdict} ({a.verdict['headline']})"
    m = re.fullmatch(r"verdict none of: (.+)", line)
    if m:
        return f"verdict {verdict} ({a.verdict['headline']})" if verdict in _names(m.group(1)) else None
    m = re.fullmatch(r"must report: (.+)", line)
    if m:
        missing = [c for c in _codes(m.group(1)) if c not in sev]
        return f"no {', '.join(missing)} finding" if missing else None
    m = re.fullmatch(r"must report one of: (.+)", line)
    if m:
        return None if any(c in sev for c in _codes(m.group(1))) else "none of them reported"
    m = re.fullmatch(r"not at warning or above: (.+)", line)
    if m:
        loud = {c: s for c in _codes(m.group(1)) for s in sev.get(c, []) if s != "info"}
        return f"graded {loud}" if loud else None
    m = re.fullmatch(r"absent: (.+)", line)
    if m:
        there = [c for c in _codes(m.group(1)) if c in sev]
        return f"reported {there}" if there else None
    if line.startswith("healthy:"):
        loud = [(f.code, f.severity.value) for f in _perf(a) if f.severity.value != "info"]
        saving = a.kpis["est_savings_ns"], a.kpis["modelled_speedup_ns"]
        if loud or any(saving):
            return f"findings at warning or above {loud}; headline savings (idle, modelled) {saving} ns"
        return None
    if line == "no finding at error":
        loud = [f.code for f in a.findings if f.severity.value == "error"]
        return f"errors: {loud}" if loud else None
    if line.startswith("every device named"):
        worked = {(d["rank"], d["device"]) for d in a.summary.devices}
        bad = [
            (d.rank, d.index, d.vendor, d.name)
            for d in a.timeline.meta.devices
            if (d.rank, d.index) in worked and (not (d.name or "").strip() or "null" in str(d.name).lower() or not (d.vendor or "").strip())
        ]
        unknown = worked - {(d.rank, d.index) for d in a.timeline.meta.devices}
        return f"unnamed devices {bad + sorted(unknown)}" if bad or unknown else None
    m = re.fullmatch(r"one of (.+) costing at least ([\d.]+) ms", line)
    if m:
        want = float(m.group(2)) * 1e6
        got = [(f.code, f.saving_ns) for f in a.findings if f.code in _codes(m.group(1))]
        return None if any((ns or 0) >= want for _, ns in got) else f"figures shown {got}"
    raise AssertionError(f"an expectation this test cannot read: {line!r}")


#: Readings the report does not meet yet, each with why (strict: the day one passes, the test fails until it is
#: taken off this list). Keep it short; a line here is an open disagreement with the expert, not an accepted one.
DISAGREE: dict[str, str] = {}


@pytest.mark.parametrize("e", [pytest.param(e, marks=pytest.mark.xfail(strict=True, reason=DISAGREE[e.id])) if e.id in DISAGREE else e
                               for e in EXPECTATIONS], ids=[e.id for e in EXPECTATIONS])
def test_judged_trace_meets_its_reading(e: Expectation, corpus):
    wrong = check(e, report(e.trace))
    assert wrong is None, f"{e.trace}: expected '{e.line}' because {e.truth}; the report says: {wrong}"


def test_every_expectation_is_read(corpus):
    """The parser found every trace section's expectations, and every line is of a kind ``check`` reads."""
    if not EXPECTED.exists():
        pytest.skip("no EXPECTED.md in the corpus")
    traces = {e.trace for e in EXPECTATIONS}
    files = {p.name for p in (CORPUS / "judged").iterdir() if p.suffix in (".gz", ".pb", ".sqlite")}
    assert traces == files, f"traces without expectations: {files - traces}; expectations without a trace: {traces - files}"
    kinds = (r"GPU busy ", r"verdict (one|none) of: ", r"must report", r"not at warning or above: ", r"absent: ", r"healthy:",
             r"no finding at error$", r"every device named", r"one of .+ costing at least ")
    unread = [e.line for e in EXPECTATIONS if not any(re.match(k, e.line) for k in kinds)]
    assert not unread


def test_parser_reads_a_section_and_its_reason(tmp_path):
    """The parser on a small file of the same layout: the trace, each line, and the reason it carries."""
    p = tmp_path / "EXPECTED.md"
    p.write_text(
        "# title\n\n## `a.json.gz`\nReading: A100, busy 50 %. Truth: input-bound.\n\nExpected:\n- GPU busy 50.0 % (±1.0)\n"
        "- verdict one of: input_pipeline\n\n## Notes\nnothing\n\nExpected:\n- must report: TI005\n",
        encoding="utf-8",
    )
    got = parse(p)
    assert [(e.trace, e.line) for e in got] == [
        ("a.json.gz", "GPU busy 50.0 % (±1.0)"), ("a.json.gz", "verdict one of: input_pipeline"), ("a.json.gz", "must report: TI005")]
    assert all(e.truth == "input-bound." for e in got)
