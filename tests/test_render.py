"""Reports: every format renders, stays within its size promise, escapes trace strings, and agrees on numbers."""

from __future__ import annotations

import html as htmllib
import json
import re
from pathlib import Path

import pandas as pd
import pytest

import traceinsight
from traceinsight.render import render
from traceinsight.render.markdown import MAX_CHARS, esc
from traceinsight.rule_api import Fix, Rule, Severity, fmt_ns
from traceinsight.assess.verdict import LABELS, details

from .conftest import trace_root
from .test_render_synth import HOSTILE, synthetic_analysis, synthetic_timeline

HTML_LIMIT = 2 * 1024 * 1024


def _corpus_traces() -> list[Path]:
    d = trace_root() / "pytorch"
    if not d.is_dir():
        return []
    return sorted(d.glob("*.json.gz")) + [p for p in [d / "param_dlrm_v100_8ranks"] if p.is_dir()]


def _size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.iterdir()) if p.is_dir() else p.stat().st_size


def _kpis(html: str) -> dict[str, str]:
    return dict(re.findall(r'data-kpi="([a-z_]+)" data-value="([^"]*)"', html))


def _finding_impacts_html(html: str) -> list[tuple[str, int]]:
    return [(c, int(v)) for c, v in re.findall(r'<article class="finding [a-z]+(?: symptom)?" id="f\d+" data-code="([^"]*)" data-fingerprint="[0-9a-f]+" data-impact-ns="(\d+)"', html)]


def assert_formats_agree(analysis) -> None:
    """HTML data attributes, JSON fields and Markdown text carry the same span, busy % and impacts."""
    h = render(analysis, "html")
    j = json.loads(render(analysis, "json"))
    md = render(analysis, "md", html_name="report.html")
    k = _kpis(h)
    assert int(k["span_ns"]) == j["summary"]["span_ns"] == j["kpis"]["span_ns"]
    assert fmt_ns(j["kpis"]["span_ns"]) in md
    busy = j["kpis"]["gpu_busy_pct"]
    if busy is None:
        assert k["gpu_busy_pct"] == ""
    else:
        assert float(k["gpu_busy_pct"]) == busy
        assert abs(busy - j["summary"]["gpu_busy_pct"]) < 0.051
        assert f"**GPU busy** {busy:.1f}%" in md
    assert int(k["est_savings_ns"]) == j["kpis"]["est_savings_ns"]
    assert int(k["findings"]) == len(j["findings"]) == len(analysis.findings)
    assert _finding_impacts_html(h) == [(htmllib.escape(f["code"]), f["impact_ns"]) for f in j["findings"]]
    rows = re.findall(r"^\| (\d+) \| `[^`]*` \| [^|]+ \| .* \| ([^|]+?)(?: \(modelled\))? \| [\d.]*%? \|$", md, flags=re.M)
    for n, shown in rows:
        assert shown.strip() == fmt_ns(j["findings"][int(n) - 1]["saving_ns"])
    assert j["verdict"]["label"] in LABELS.values()
    assert f"**Verdict: {j['verdict']['headline']}.**" in md
    assert f"<strong>{htmllib.escape(j['verdict']['label'] if j['verdict']['bound'] else j['verdict']['headline'])}</strong>" in h


def test_synthetic_formats_agree():
    a = synthetic_analysis()
    assert a.findings
    assert_formats_agree(a)
    v = details(a)
    assert v["label"] == "host syncs" and v["sentence"]


def test_html_is_self_contained():
    h = render(synthetic_analysis(), "html")
    assert "Content-Security-Policy" in h and "default-src 'none'" in h
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", h, flags=re.I)
    assert "@import" not in h and "url(" not in h
    assert h.count("<svg") >= 2
    # both fixes are in the page without JS (tabs only hide one of them once the script runs)
    assert "Fix in PyTorch" in h and "Fix in TensorFlow" in h and 'class="nojs"' in h


def _markdown_tables(md: str) -> list[list[list[str]]]:
    """Each Markdown table as rows of cells, split on the pipes that are not escaped."""
    tables, rows = [], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            rows.append(re.split(r"(?<!\\)\|", line)[1:-1])
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def test_hostile_names_are_inert():
    a = synthetic_analysis(hostile=True, n_steps=len(HOSTILE))
    h = render(a, "html")
    assert "<script>alert" not in h
    assert "<img src=x" not in h and "onerror=alert(1)>" not in h
    assert "<b id=injected>" not in h and "</textarea></svg></style>" not in h
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in h  # shown as text, not dropped
    assert "\u202e" not in h and "\x00" not in h and "\x1b" not in h
    assert h.count("<script>") == 1  # ours
    assert "A" * 5000 not in h  # long names are cut (tooltips keep up to 1,500 chars)
    md = render(a, "md")
    assert "<script>" not in md and "<img" not in md and "<b id" not in md
    assert "\u202e" not in md and "\x00" not in md
    tables = _markdown_tables(md)
    assert len(tables) >= 3
    for rows in tables:  # a name with "|" must not split a cell: every row has its header's cells
        assert {len(r) for r in rows} == {len(rows[0])}, rows
    ops = [r[-1].strip() for t in tables if t[0][-1].strip() == "op" for r in t[2:]]
    assert len(ops) == 6 and ops[4].endswith("gnp.exe\\|\\`code\\`\\|\\*bold\\*")  # shown, "|" escaped
    j = json.loads(render(a, "json"))  # JSON keeps raw strings; it is data, not markup
    (sync,) = [f for f in j["findings"] if f["code"] == "XT002"]
    op = sync["evidence"]["columns"].index("op")
    assert [row[op] for row in sync["evidence"]["rows"]] == HOSTILE
    text = render(a, "text")
    assert "XT002" in text and "\x1b" not in text and "\u202e" not in text and "\x00" not in text


def test_markdown_escape():
    assert esc("a|b") == "a\\|b"
    assert "<" not in esc("<script>") and "`" not in esc("`x`").replace("\\`", "")
    assert "\n" not in esc("a\nb")
    assert "@" not in esc("@team")


class _Many(Rule):
    code = "XT050"
    name = "many-things"
    severity = Severity.WARNING
    category = "gpu_idle"  # GPU idle the ledger holds: each finding's figure is its claim (traceinsight.assess.savings)
    summary = "Lots of findings with big evidence."
    fix_pytorch = Fix("Do the thing " * 20, "x = 1\n" * 30 + "```\nnested fence\n```")
    fix_tensorflow = Fix("Do the TF thing.", "```\nnested fence\n```")

    def check(self, ctx):
        ev = pd.DataFrame({"name": ["k" * 300] * 200, "start_ns": range(200), "dur_ns": range(200)})
        for i in range(400):
            yield ctx.finding(title=f"thing {i} " + "|" * 50, message="m" * 1500, impact_ns=1_000_000 - i, evidence=ev, key=str(i))


def test_markdown_budget_and_truncation_note():
    a = traceinsight.analyze(synthetic_timeline(), select=["XT050"], extra_rules=[_Many])
    md = render(a, "md", html_name="traceinsight.html")
    assert len(md) <= MAX_CHARS
    m = re.search(r"\*\*(\d+) more findings — see the HTML report\.\*\*", md)
    assert m and int(m.group(1)) > 0
    assert "traceinsight.html" in md
    assert "````python" in md  # fence longer than the backticks inside the fix
    h = render(a, "html")
    assert len(h.encode()) <= HTML_LIMIT
    assert_formats_agree(a)


def test_no_gpu_and_no_findings():
    from traceinsight.model.timeline import TraceMeta, Timeline, build_events

    ev = build_events({"kind": ["cpu_op"], "name": ["aten::add"], "start_ns": [0], "dur_ns": [1000]})
    a = traceinsight.analyze(Timeline(ev, TraceMeta(source_format="pytorch")), ignore=["TI"])
    assert details(a)["label"] == "no GPU activity"
    for fmt in ("html", "md", "json", "text"):
        assert render(a, fmt)
    assert_formats_agree(a)


# --- the real-trace corpus --------------------------------------------------------------------------------

_ANALYSES: dict[Path, object] = {}


def _analysis(p: Path):
    if p not in _ANALYSES:  # every parser is in-tree: a file it cannot read is a failure, not a skip
        _ANALYSES[p] = traceinsight.analyze(p)
    return _ANALYSES[p]


def test_largest_corpus_trace_fits():
    traces = _corpus_traces()
    if not traces:
        pytest.skip("no PyTorch traces in the corpus")
    biggest = max(traces, key=_size)
    a = _analysis(biggest)
    h = render(a, "html")
    md = render(a, "md", html_name="report.html")
    assert len(h.encode()) <= HTML_LIMIT, f"{biggest.name}: HTML {len(h.encode())} bytes"
    assert len(md) <= MAX_CHARS
    assert_formats_agree(a)


@pytest.mark.slow
@pytest.mark.parametrize("rel", [p.name for p in _corpus_traces()] or ["(none)"])
def test_corpus_renders(rel):
    p = trace_root() / "pytorch" / rel
    if not p.exists():
        pytest.skip(f"{p} not in the corpus")
    a = _analysis(p)
    h = render(a, "html")
    assert h.startswith("<!DOCTYPE html>") and h.rstrip().endswith("</html>")
    assert len(h.encode()) <= HTML_LIMIT
    assert h.count("<rect") < 20_000  # aggregated, not one node per event
    md = render(a, "md", html_name="report.html")
    assert len(md) <= MAX_CHARS
    j = json.loads(render(a, "json"))
    assert j["schema_version"] == 1
    assert render(a, "text")
    assert_formats_agree(a)


def test_finding_closeup_shows_its_largest_instance():
    """Each timed finding gets a close-up window around its longest evidence interval, with that device's lanes."""
    a = traceinsight.analyze(synthetic_timeline(n_steps=4), select=["TI001", "TI006"])
    gaps = next(f for f in a.findings if f.code == "TI001")
    h = render(a, "html")
    art = re.search(r'<article class="finding [^"]*" id="f\d+" data-code="TI001".*?</article>', h, flags=re.S).group(0)
    fig = re.search(r'<figure class="instance" data-w0="(\d+)" data-w1="(\d+)">(.*?)</figure>', art, flags=re.S)
    assert fig, "TI001 has time-stamped evidence, so it gets a close-up"
    w0, w1, body = int(fig.group(1)), int(fig.group(2)), fig.group(3)
    ev = gaps.evidence
    (start_col,) = [c for c in ev.columns if str(c).startswith("start_")]
    (dur_col,) = [c for c in ev.columns if str(c).startswith("duration_") or str(c).startswith("dur_")]
    scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}
    dur_ns = ev[dur_col].astype(float) * scale[str(dur_col).rsplit("_", 1)[1]]
    i = int(dur_ns.to_numpy().argmax())
    s = float(ev[start_col].iloc[i]) * scale[str(start_col).rsplit("_", 1)[1]]
    e = s + float(dur_ns.iloc[i])
    assert w0 < s and e < w1 and (w1 - w0) < 4 * (e - s) + 50_000  # a close-up, not the whole step
    assert f"Largest instance: {fmt_ns(e - s)}" in body
    assert 'class="gap"' in body and "GPU 0 all streams" in body and "host CUDA API" in body
    # a finding without time-stamped evidence gets no close-up
    for other in re.findall(r'<article class="finding [^"]*" id="f\d+" data-code="(TI00[^1])".*?</article>', h, flags=re.S):
        block = re.search(rf'data-code="{other}".*?</article>', h, flags=re.S).group(0)
        f = next(x for x in a.findings if x.code == other)
        has_time = any(str(c).startswith(("start_", "at_", "first_at_")) for c in f.evidence.columns)
        assert ('class="instance"' in block) == has_time


def test_the_mean_step_tile_names_the_steady_median_when_warm_up_steps_are_in_it():
    """resnet_cold's first two steps are start-up (cuDNN autotuning, allocator growth): the mean of all four (2.62 s)
    says little of the 16 ms loop the rest of the page judges, so the header and the HTML tile add the steady
    steps' median; a trace whose steps are all steady shows the mean alone."""
    from pathlib import Path

    import traceinsight
    from traceinsight.render import render

    root = Path(__file__).resolve().parent.parent / "sample_traces" / "h100"
    cold = traceinsight.analyze(root / "resnet_cold.json.gz")
    assert "**Mean step** 2.62 s × 4 (steady median 16.05 ms × 2)" in render(cold, "md")
    assert "steady median 16.05 ms × 2" in render(cold, "html")
    warm = render(traceinsight.analyze(root / "resnet_warm.json.gz"), "md")
    assert "**Mean step**" in warm and "steady median" not in warm.split("**Mean step**")[1].split("·")[0]


def test_a_busy_share_of_a_sliver_window_names_the_window(tmp_path):
    """11 µs of GPU work in a 34 ms capture is "100 % busy" of its own window: the header says of which window, so
    the figure is not read as the capture's; a window that is most of the span is left as it was."""
    import traceinsight
    from tests.helpers.kineto_writer import KinetoTrace
    from traceinsight.render import render

    t = KinetoTrace()
    t.cpu_op("aten::empty", 0, 10_000)
    t.kernel("k", 5_000, 10, launch_us=4_990)
    md = render(traceinsight.analyze(t.write(tmp_path / "sliver.json")), "md")
    assert "**GPU busy** 100.0% of a 10.0 µs GPU window" in md
    t = KinetoTrace()
    t.kernel("k", 0, 8_000, launch_us=-10)
    t.kernel("k", 9_000, 1_000, launch_us=8_990)
    md = render(traceinsight.analyze(t.write(tmp_path / "full.json")), "md")
    assert "GPU window" not in md.split("**GPU busy**")[1].split("·")[0]


def test_a_symptom_card_says_its_figure_is_what_its_cause_leaves():
    """A symptom is shown under its root cause; its own figure and severity are the part the cause does not explain
    (the loader's gaps that are not data wait), so the card says that, not that the cause carries the severity."""
    from pathlib import Path

    import traceinsight
    from traceinsight.render import render

    a = traceinsight.analyze(Path(__file__).resolve().parent.parent / "sample_traces" / "dataloader_gaps.json.gz")
    md = render(a, "md")
    assert "*Symptom of `TI005`: shown with its root cause, which carries the time it explains; this card's figure and severity are the rest.*" in md
    assert "which carries the severity" not in md and "which carries the severity" not in render(a, "html")
