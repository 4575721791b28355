"""Every fact in one record: the ledger's bucket table, the name patterns shared by the single-trace and the
whole-job paths, one launch-gap bound, one list of output formats, and what a rule declares about itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.vocab import buckets
from traceinsight.assess import verdict
from traceinsight.render import FORMATS, PRODUCTS, OutputFormat, for_extension, names, render, renderer
from traceinsight.render.notebook import render_inline
from traceinsight.rule_api import Rule

REPO = Path(__file__).resolve().parents[1]


def _trace(tmp_path) -> Path:
    t = KinetoTrace()
    at = 0.0
    for s in range(6):
        t0 = at
        t.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", at, 2_000.0)
        at += 2_050.0
        for k in range(4):
            t.kernel(f"void gemm_kernel_{k}<float>", at + 10.0, 300.0, launch_us=at)
            at += 320.0
        t.runtime("cudaMemcpy", at, 400.0)  # a blocking copy: the host waits for the GPU
        t.python("_next_data (torch/utils/data/dataloader.py)", at + 450.0, 30.0)  # not a wait: the ledger ignores it
        at += 500.0
        t.step(s, t0, at - t0)
    return t.write(tmp_path / "t.json")


def test_bucket_table_is_the_ledgers_and_the_verdicts():
    assert buckets.BUCKETS == tuple(b.id for b in buckets.TABLE)
    assert set(buckets.BUSY_BUCKETS) | set(buckets.IDLE_BUCKETS) == set(buckets.BUCKETS)
    assert set(buckets.AVOIDABLE_BUCKETS) <= set(buckets.IDLE_BUCKETS)
    # what each finding category claims is read from the table's claimed_by, and covers every category
    assert verdict.CLAIMS["gpu_idle"] == buckets.AVOIDABLE_BUCKETS
    assert verdict.CLAIMS["host_sync"] == ("idle_host_sync",) and verdict.CLAIMS["trace_quality"] == ()
    assert all(re.fullmatch(r"#[0-9a-f]{6}", b.colour) and re.fullmatch(r"#[0-9a-f]{6}", b.colour_dark) for b in buckets.TABLE)


def test_no_other_home_paints_or_names_a_bucket():
    css = (REPO / "traceinsight" / "render" / "templates" / "report.css").read_text()
    assert ".lb-compute" not in css  # the bucket classes are generated from the table
    for path in (REPO / "traceinsight").rglob("*.py"):
        if path.name == "buckets.py":
            continue
        text = path.read_text()
        for b in buckets.TABLE:
            assert b.sentence not in text or len(b.sentence) < 12, f"{path}: repeats the sentence of {b.id}"
        # a palette keyed by bucket ids (one id alone may name something else, e.g. the "copy" work class)
        painted = [b.id for b in buckets.TABLE if f'"{b.id}": "#' in text]
        assert len(painted) < 2, f"{path}: colours for the buckets {painted}"


def test_notebook_and_report_paint_each_bucket_the_same(tmp_path):
    a = traceinsight.analyze(_trace(tmp_path))
    html = render(a, "html")
    nb = render_inline(a)
    drawn = set(re.findall(r'class="lb lb-([a-z_]+)"', html))
    assert drawn and drawn <= set(buckets.BUCKETS)
    for b in drawn:
        c = buckets.BY_ID[b].colour
        assert f"--b-{b}: {c};" in html and f".lb-{b} " in html
        if b != "idle_warmup":
            assert f"background:{c}" in nb  # the notebook view: the same colour, inline


def test_rule_claims_are_declared_and_checked():
    with pytest.raises(TypeError, match="not ledger buckets"):

        class Bad(Rule):
            code = "XT901"
            claims = ("idle_nonsense",)

    class Narrow(Rule):
        code = "XT902"
        category = "gpu_idle"
        claims = ("idle_data_wait",)

        def check(self, ctx):
            yield ctx.finding(title="t", message="m", impact_ns=10)

    from traceinsight.derive.derived import Derived
    from traceinsight.rule_api import Context

    tl = traceinsight.load(Path(__file__).resolve().parents[1] / "sample_traces" / "dataloader_gaps.json.gz")
    (f,) = Narrow().check(Context(tl, Derived(tl), Narrow()))
    assert f.claims == ("idle_data_wait",) and verdict.claim_buckets(f) == ("idle_data_wait",)


def test_one_launch_gap_bound():
    from traceinsight.derive import ledger, whatif
    from traceinsight.vocab import thresholds

    assert ledger.LAUNCH_GAP_NS is thresholds.LAUNCH_GAP_NS and whatif.LAUNCH_GAP_NS is thresholds.LAUNCH_GAP_NS
    assert f"gaps under {thresholds.LAUNCH_GAP_NS // 1000} us" in whatif.ASSUMPTIONS["launch_bound_to_graphs"]


def test_one_list_of_output_formats():
    from traceinsight.cli import app as cli
    from traceinsight.render import outputs

    assert [f.value for f in cli.Format] == list(FORMATS)
    assert outputs.SUFFIX == {k: f.suffix for k, f in FORMATS.items()}
    assert {ext: f.value for ext, f in cli._SUFFIX_FORMAT.items()} == {".txt": "text", ".json": "json", ".md": "md", ".markdown": "md", ".html": "html", ".htm": "html", ".sarif": "sarif"}
    # the job, the diff and the hooks read the same list: which products a format has, and its renderer for each
    assert names("single") == list(FORMATS)
    assert names("job") == names("diff") == ["text", "json", "md", "html"]
    for name, f in FORMATS.items():
        assert set(f.renderers) <= set(PRODUCTS)
        for product in f.renderers:
            assert callable(renderer(name, product)), (name, product)
    assert for_extension(".SARIF") == "sarif" and for_extension(".sarif", "diff") is None and for_extension(".markdown", "job") == "md"
    with pytest.raises(ValueError, match="'github' for a diff; choose one of text, json, md, html"):
        renderer("github", "diff")


def test_a_new_format_is_one_entry_for_a_trace_and_a_diff(tmp_path, monkeypatch):
    """A format added to FORMATS (here the JSON renderers under a new name and suffix) is planned, rendered and
    written for one trace and for a diff by the one output path, with no other change; the job's case is in
    tests/test_job.py (it needs a rank folder)."""
    from traceinsight.render import outputs

    monkeypatch.setitem(FORMATS, "json2", OutputFormat("j2.json", dict(FORMATS["json"].renderers)))
    a = traceinsight.analyze(_trace(tmp_path))
    for product, obj in (("single", a), ("diff", traceinsight.diff(a, a).data)):
        out = tmp_path / product
        outputs.write_reports(obj, outputs.plan(["json", "json2"], out, product), product=product)
        stem = outputs.STEMS[product]
        assert sorted(p.name for p in out.iterdir()) == [f"{stem}.j2.json", f"{stem}.json"]
        assert (out / f"{stem}.j2.json").read_bytes() == (out / f"{stem}.json").read_bytes()
        assert render(obj, "json2", product) == render(obj, "json", product)
    monkeypatch.setitem(FORMATS, "json2", OutputFormat("j2.json", {"single": FORMATS["json"].renderers["single"]}))
    with pytest.raises(ValueError, match="for a diff"):  # a product the format does not list is refused, not guessed
        render({}, "json2", "diff")


def test_job_summary_measures_what_the_ledger_measures(tmp_path):
    """A rank's data-wait and sync figures in the job path use the ledger's patterns: a data-loader wait counts, a
    blocking cudaMemcpy is a sync (the ledger books the idle after it as idle_host_sync)."""
    from traceinsight.job import summarize_ranks

    tl = traceinsight.load(_trace(tmp_path))
    (s,) = summarize_ranks(tl)
    assert int(s.steps["data_ns"].sum()) == 6 * 2_000_000
    assert int(s.steps["sync_ns"].sum()) == 6 * 400_000
