"""Every report agrees with itself (issue 23): one figure per finding in every format, the headline the union of
the idle the findings claim, findings in the order of the figure shown, no saving on a healthy trace's headline,
and the verdict's finding first. Run over every sample trace and every real trace at hand (corpus or subset)."""

from __future__ import annotations

import html as htmllib
import json
import re
from pathlib import Path

import pytest

import traceinsight
from traceinsight.derive.ledger import AVOIDABLE_BUCKETS
from traceinsight.render import render
from traceinsight.rule_api import fmt_ns
from traceinsight.assess.verdict import claims, details, headline

from .conftest import REPO, corpus_file, corpus_glob

_RECORDED = REPO / "sample_traces" / "h100"  # real GPU recordings, one trace per file (the folder is no job)
# folders are traces (rank folders, TensorBoard runs); a bytecode cache written by importing the sample scripts is not
SAMPLES = sorted(p.name for p in (REPO / "sample_traces").iterdir()
                 if p.name.endswith((".json.gz", ".sqlite")) or (p.is_dir() and p != _RECORDED and p.name != "__pycache__")) + sorted(
    str(p.relative_to(REPO / "sample_traces")) for p in [*_RECORDED.glob("*.json.gz"), *_RECORDED.glob("nsys/*.sqlite")])
CORPUS = [
    *corpus_glob("pytorch/*.json.gz"),
    *corpus_glob("nsys/*.sqlite"),
    *corpus_glob("tf/*/*/plugins/profile/*/*.xplane.pb"),
    *corpus_glob("tf/*/plugins/profile/*/*.xplane.pb"),
]


def _analysis(path: Path):
    try:
        return traceinsight.analyze(path)
    except traceinsight.TraceInsightError as exc:  # a file the corpus keeps as bad input: nothing to agree on
        pytest.skip(f"{path.name}: {exc}")


def assert_page_agrees(a) -> None:
    h = headline(a)
    cl = claims(a)
    idle = [f for f in a.findings if f.saving_kind == "idle"]
    if a.verdict["category"] == "cannot_judge":  # nothing is drawn from a window that cannot be judged
        assert h["est_savings_ns"] == 0 and all(f.saving_ns == 0 for f in a.findings if f.saving_kind != "none")
        assert all(f.severity.value == "info" for f in a.findings if f.category != "trace_quality")
        return
    # 1. each idle finding's figure is its claim; the headline is their union (per device, largest device)
    for f, c, own in zip(a.findings, cl["each"], cl["per_finding"]):
        if f.saving_kind == "idle":
            assert f.saving_ns == own
    # claims are disjoint (one claim per nanosecond): on each device and bucket they add up, to at most the bucket
    union: dict[tuple[int, int, str], int] = {}
    for f, c in zip(a.findings, cl["each"]):
        for k, v in c.items():
            if k[2] in AVOIDABLE_BUCKETS:
                union[k] = union.get(k, 0) + v
    for (r, d, b), v in union.items():
        assert v <= a.ledger.totals(r, d)[b]
    per_dev: dict[tuple[int, int], int] = {}
    for (r, d, _), v in union.items():
        per_dev[(r, d)] = per_dev.get((r, d), 0) + v
    # the headline counts a device whose claimed idle reaches 5 % of its steady state (the verdict's bar)
    steady = {k: sum(a.ledger.totals(*k).values()) - a.ledger.totals(*k)["idle_warmup"] for k in per_dev}
    worth = [v for k, v in per_dev.items() if steady[k] > 0 and 100.0 * v / steady[k] >= 5.0]
    assert h["est_savings_ns"] == max(worth, default=0)
    if h["est_savings_ns"]:
        assert h["est_savings_ns"] >= max((f.saving_ns for f in idle), default=0)
    assert h["est_savings_ns"] <= h["avoidable_idle_ns"]
    for (r, d), v in per_dev.items():  # each device's union is within that device's own avoidable idle
        t = a.ledger.totals(rank=r, device=d)
        assert v <= sum(t[b] for b in AVOIDABLE_BUCKETS), (r, d)
    if not idle:
        assert h["est_savings_ns"] == 0  # modelled speed-ups are never the headline
    # 2. healthy: >= 90 % busy and no avoidable idle -> no headline saving
    if (h["gpu_busy_pct"] or 0) >= 90 and h["avoidable_idle_ns"] == 0:
        assert h["est_savings_ns"] == 0
    # 3. order: causes/unexplained by kind then figure; symptoms right after their cause
    fps = {f.fingerprint for f in a.findings}
    top = [f for f in a.findings if f.metrics.get("explained_by") not in fps]
    kinds = {"idle": 0, "modelled": 1, "none": 2}
    v = details(a)
    named = v["root_cause"] or v["claimed_by"]
    rest = top[1:] if top and top[0].fingerprint == named else top  # the verdict's finding leads (see 5.)
    keys = [(kinds[f.saving_kind], -f.saving_ns) for f in rest]
    assert keys == sorted(keys), [(f.code, f.saving_kind, f.saving_ns) for f in top]
    for i, f in enumerate(a.findings):
        cause = f.metrics.get("explained_by")
        if cause in fps:
            before = [g for g in a.findings[:i] if g.metrics.get("explained_by") != cause]
            assert before[-1].fingerprint == cause
    # 4. share is of the finding's GPU window; a symptom never out-ranks its cause
    for f in a.findings:
        if f.share_pct is not None and f.saving_kind == "idle":
            assert 0 <= f.share_pct <= 100.0, (f.code, f.share_pct)  # idle claimed on a device: within its window
        cause = next((c for c in a.findings if c.fingerprint == f.metrics.get("explained_by")), None)
        if cause is not None:  # a symptom shows (and is graded on) no more than its own claim
            assert f.saving_ns <= f.impact_ns
    # 5. the verdict's finding is the first card, with the card's figure in the sentence
    if named and v["bucket"] in AVOIDABLE_BUCKETS:
        lever = next(f for f in a.findings if f.fingerprint == named)
        lead = lever.metrics.get("explained_by") if lever.metrics.get("explained_by") in fps else named
        assert top[0].fingerprint == lead, (top[0].code, v["sentence"])  # the lever, or the cause whose group it is in
        assert fmt_ns(lever.saving_ns) in v["sentence"]
    # 6. every format shows the same figure for each finding, and the same headline
    page = render(a, "html")
    j = json.loads(render(a, "json"))
    md = render(a, "md")
    text = render(a, "text", width=200)
    kpi = dict(re.findall(r'data-kpi="([a-z_]+)" data-value="([^"]*)"', page))
    assert int(kpi["est_savings_ns"]) == j["kpis"]["est_savings_ns"] == h["est_savings_ns"]
    assert f"**Est. savings** up to {fmt_ns(h['est_savings_ns'])}" in md
    assert [f["saving_ns"] for f in j["findings"]] == [f.saving_ns for f in a.findings]
    shown = [int(x) for x in re.findall(r'data-saving-ns="(\d+)"', page)]
    assert sorted(set(shown)) == sorted({f.saving_ns for f in a.findings if f.saving_kind != "none"})
    rows = re.findall(r"^\| (\d+) \| `[^`]*` \| [^|]+ \| .* \| ([^|]*?)(?: \(modelled\))? \| [\d.]*%? \|$", md, flags=re.M)
    for n, cell in rows:
        f = a.findings[int(n) - 1]
        assert cell.strip() == ("" if f.saving_kind == "none" else fmt_ns(f.saving_ns))
    for f in a.findings:
        if f.saving_kind in ("idle", "modelled"):
            assert fmt_ns(f.saving_ns) in text
            assert htmllib.escape(fmt_ns(f.saving_ns)) in page


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_report_agrees_with_itself(name):
    assert_page_agrees(_analysis(REPO / "sample_traces" / name))


@pytest.mark.parametrize("rel", CORPUS)
def test_corpus_report_agrees_with_itself(rel):
    assert_page_agrees(_analysis(corpus_file(rel)))
