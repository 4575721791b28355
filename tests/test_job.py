"""The whole-job path: map per rank on local processes or a real Dask LocalCluster, ranks from a real
S3-compatible server (moto's server mode on loopback), the CLI's job path, and report sizes at 1,024 ranks."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from bench.bench_job import build_job
from traceinsight.cli.app import app
from traceinsight.vocab.errors import TraceReadError
from traceinsight.job import analyze_job, expand, is_job_path, reduce_summaries, summarize_ranks
from traceinsight.job.cli import raw_path
from traceinsight.job.mapper import MapSettings, analyze_rank, per_rank_rules
from traceinsight.job.report import render
from traceinsight.job.run import JobAnalysis, run_cross_rank

from .conftest import corpus_file

DLRM0 = "pytorch/param_dlrm_v100_8ranks/worker0_step_12.1694128201545.pt.trace.json.gz"


@pytest.fixture(scope="module")
def small_job(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("job4")
    build_job(corpus_file(DLRM0), 4, out, straggler=1, delay_ms=1.5, skew_ms=2.0)
    return out


@pytest.fixture(scope="module")
def local_json(small_job) -> str:
    return render(analyze_job(str(small_job), workers=2), "json")


# --- map engines ----------------------------------------------------------------------------------------------
def test_local_cluster_report_equals_local_run_byte_for_byte(small_job, local_json):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None) as cluster:
        ja = analyze_job(str(small_job), scheduler=cluster.scheduler_address)
    assert ja.engine.startswith("dask")
    assert render(ja, "json") == local_json
    rep = json.loads(local_json)
    assert rep["report"] == "job" and rep["summary"]["ranks"] == 4
    assert sum(rep["ranks"][0]["ledger_ns_per_step"].values()) > 0
    assert [f["code"] for f in rep["findings"]][:1] == ["TI020"] and rep["findings"][0]["metrics"]["rank"] == 1


def test_one_process_map_equals_process_pool(small_job, local_json):
    assert render(analyze_job(str(small_job), workers=1), "json") == local_json


def test_summary_is_compact_and_carries_no_events(small_job):
    (s,) = analyze_rank(str(small_job / "rank0000.pt.trace.json.gz"), MapSettings())
    assert s.event_count > 2000
    assert len(s.collectives) == 8 and len(s.steps) == 1
    assert set(s.collectives["kind"]) == {"sendrecv", "allreduce"}
    # per-rank rules ran on the worker (graded on the one scale: the sub-1 % syncs of this rank are not reported, nor
    # its small grids, which run beside other streams' kernels and so leave no SM time empty worth a finding)
    assert {f["code"] for f in s.findings} >= {"TI001", "TI003"}
    assert not any(f["code"] in ("TI009", "TI020", "TI021") for f in s.findings)  # cross-rank rules run on the coordinator
    from traceinsight.vocab.buckets import BUCKETS

    assert set(s.ledger["bucket"]) <= set(BUCKETS)
    assert int(s.ledger["ns"].sum()) == s.window_ns  # the ledger tiles the rank's GPU window exactly
    size = s.steps.memory_usage(deep=True).sum() + s.collectives.memory_usage(deep=True).sum() + s.ledger.memory_usage(deep=True).sum()
    assert size < 10_000


def test_unreadable_rank_is_left_out_and_said(small_job, tmp_path):
    job = tmp_path / "job"
    shutil.copytree(small_job, job)
    (job / "rank0003.pt.trace.json.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    ja = analyze_job([str(p) for p in sorted(job.iterdir())], workers=2)
    assert ja.job.rank_count == 3 and len(ja.job.failures) == 1
    assert any("rank file left out" in w and "rank0003" in w for w in ja.warnings)


# --- storage --------------------------------------------------------------------------------------------------
def test_expand_folder_glob_and_file_url(small_job):
    files = expand(str(small_job))
    assert [Path(f).name for f in files] == [f"rank{i:04d}.pt.trace.json.gz" for i in range(4)]
    assert expand(str(small_job / "rank000[12]*")) == [str(small_job / "rank0001.pt.trace.json.gz"), str(small_job / "rank0002.pt.trace.json.gz")]
    assert len(expand("file://" + str(small_job))) == 4
    assert is_job_path(str(small_job)) and is_job_path("s3://b/job/") and not is_job_path(str(small_job / "rank0000.pt.trace.json.gz"))
    with pytest.raises(TraceReadError, match="nothing there"):
        expand("file://" + str(small_job / "missing"))


def test_raw_path_restores_urls_collapsed_by_pathlib():
    assert raw_path(Path("s3://bucket/job/")) == "s3://bucket/job"
    assert raw_path(Path("gs://b/x/*.json.gz")) == "gs://b/x/*.json.gz"
    assert raw_path(Path("file:///tmp/job")) == "file:///tmp/job"
    assert raw_path(Path("/tmp/job")) == "/tmp/job"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_s3_end_to_end_on_moto_server(small_job, local_json, monkeypatch):
    moto_server = pytest.importorskip("moto.server")
    s3fs = pytest.importorskip("s3fs")
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        opts = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
        import boto3

        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing").create_bucket(Bucket="traces")
        fs = s3fs.S3FileSystem(**opts)
        for p in sorted(small_job.iterdir()):
            fs.put(str(p), f"traces/job/{p.name}")
        fs.put(str(small_job / "rank0000.pt.trace.json.gz"), "traces/other/rank0000.pt.trace.json.gz")
        ja = analyze_job("s3://traces/job/", storage_options=opts, workers=2)
        rep, local = json.loads(render(ja, "json")), json.loads(local_json)
        assert [r["source"] for r in rep["ranks"]] == [f"s3://traces/job/rank{i:04d}.pt.trace.json.gz" for i in range(4)]
        for r in (rep, local):
            r.pop("source")
            for rank in r["ranks"]:
                rank.pop("source")
        assert rep == local

        # the command line, with the endpoint and credentials from the environment as a user would set them
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        res = CliRunner().invoke(app, ["analyze", "s3://traces/job/", "--format", "json"])
        assert res.exit_code == 0, res.output
        cli = json.loads(res.stdout)
        assert cli["summary"]["ranks"] == 4 and cli["findings"][0]["metrics"]["rank"] == 1
        res = CliRunner().invoke(app, ["analyze", "s3://traces/nope/", "--format", "json"])
        assert res.exit_code != 0 and "traceinsight: error:" in res.output and "Traceback" not in res.output
    finally:
        server.stop()


# --- command line ---------------------------------------------------------------------------------------------
def test_cli_rank_folder_takes_the_job_path(small_job, tmp_path):
    out = tmp_path / "rep"
    res = CliRunner().invoke(app, ["analyze", str(small_job), "--format", "json,md,html", "-o", str(out)])
    assert res.exit_code == 0, res.output
    rep = json.loads((out / "traceinsight-report.json").read_text())
    assert rep["report"] == "job" and rep["summary"]["ranks"] == 4
    assert sum(rep["ranks"][0]["ledger_ns_per_step"].values()) > 0
    assert "Rank 1 makes the others wait" in (out / "traceinsight-report.md").read_text()
    html = (out / "traceinsight-report.html").read_text()
    # the single report's design: CSP, no script, verdict first, labelled heatmaps, a ledger bar per rank
    assert "Content-Security-Policy" in html and "default-src 'none'" in html and "<script" not in html
    assert html.index('id="verdict"') < html.index('id="ledger"') < html.index('id="heatmaps"') < html.index('id="findings"')
    assert 'data-rank="1"' in html.split('id="ledger"')[0] and "straggler <strong>rank 1</strong>" in html
    assert html.count('class="lrow"') == 4 and "rank ↓ · step →" in html and "<title>rank 1, step" in html
    res = CliRunner().invoke(app, ["analyze", str(small_job), "--format", "json", "--fail-on", "warning"])
    assert res.exit_code == 1


def test_cli_job_refuses_the_formats_a_job_has_none_of(small_job, tmp_path):
    """render.FORMATS offers a whole job text, json, md and html; perfetto (one timeline), github and sarif (one
    trace's source lines) are usage errors, and nothing is written (a text report in a .perfetto file was)."""
    for fmt in ("perfetto", "github", "sarif"):
        target = tmp_path / f"job.{fmt}"
        res = CliRunner().invoke(app, ["analyze", str(small_job), "--format", fmt, "-o", str(target)])
        assert res.exit_code == 2 and "a whole-job report is text, json, md or html" in res.output and not target.exists()


def test_a_new_format_is_one_entry_for_the_job_report(small_job, tmp_path, monkeypatch):
    """A format added to render.FORMATS (the JSON renderers under a new name) is written for a whole job too."""
    from traceinsight.render import FORMATS, OutputFormat, outputs

    monkeypatch.setitem(FORMATS, "json2", OutputFormat("j2.json", dict(FORMATS["json"].renderers)))
    ja = analyze_job(str(small_job), workers=1)
    outputs.write_reports(ja, outputs.plan(["json", "json2"], tmp_path / "out", "job"), product="job")
    assert (tmp_path / "out" / "traceinsight-report.j2.json").read_bytes() == (tmp_path / "out" / "traceinsight-report.json").read_bytes()
    assert json.loads((tmp_path / "out" / "traceinsight-report.j2.json").read_text())["report"] == "job"
    assert render(ja, "json2") == render(ja, "json")


# --- scale: 1,024 ranks on the coordinator ------------------------------------------------------------------------
def test_reports_stay_small_at_1024_ranks():
    """1,024 rank summaries (from one real rank, each with its own jitter and one straggler) reduce in seconds and
    render within the budgets: HTML <= 2 MB, Markdown <= 60,000 characters."""
    import traceinsight
    from traceinsight.model.serialize import finding_dict

    tl = traceinsight.load(corpus_file(DLRM0))
    local, cross, _, _ = per_rank_rules(MapSettings())
    base = summarize_ranks(tl)[0]
    base.findings = [finding_dict(f, max_evidence_rows=10) for f in traceinsight.pipeline.engine.run(tl, local).findings]
    rng = np.random.default_rng(3)
    summaries = []
    for r in range(1024):
        s = type(base)(**{**base.__dict__, "rank": r, "world_size": 1024})
        late = 300_000 if r == 517 else int(rng.integers(0, 20_000))
        c = base.collectives.copy()
        c["start_ns"] = c["start_ns"] + late
        c["idle_before_ns"] = c["idle_before_ns"] + late
        s.collectives = c
        summaries.append(s)
    job = reduce_summaries(summaries)
    findings, warnings, _ = run_cross_rank(job, cross)
    ja = JobAnalysis(source="synthetic-1024", job=job, findings=findings, warnings=warnings, rules_run=[], engine="test", late_rank_rules=("TI020",))
    (straggler,) = [f for f in findings if f.code == "TI020"]
    assert straggler.metrics["rank"] == 517 and straggler.metrics["collectives_last"] == 8
    md, html = render(ja, "md"), render(ja, "html")
    assert len(md) <= 60_000 and len(html.encode()) <= 2_000_000
    assert "rank 517" in md.lower() and "| 517 |" in md


def test_job_html_escapes_trace_strings_and_follows_the_cause(small_job):
    """Every string in the job page goes through the autoescaping template; the straggler's fix is its cause's."""
    from traceinsight.job.html import render_html

    ja = analyze_job(str(small_job), workers=1)
    ja.source = "<script>alert(1)</script>"
    ja.warnings = ["<img src=x onerror=alert(1)>"]
    page = render_html(ja)
    assert "<script>alert" not in page and "<img src=x" not in page and "&lt;script&gt;" in page
    (f,) = [f for f in ja.findings if f.code == "TI020"]
    from rules.stragglers import Stragglers

    assert f.metrics["cause"] in Stragglers.cause_fixes
    assert f.fixes["pytorch"] == Stragglers.cause_fixes[f.metrics["cause"]]["pytorch"]
    assert f.fixes["pytorch"].code != Stragglers.fix_pytorch.code


def test_rank_files_of_different_runs_are_not_compared(tmp_path):
    """A logdir that kept an old run beside the new one: rank files declaring world sizes 2 and 8 are not one job.
    The report says so first, runs no cross-rank rule (no imbalance, straggler or wait between programs that never
    ran together) and names no slowest rank; the same folder loaded as one timeline warns the same."""
    import traceinsight
    from tests.helpers.kineto_writer import KinetoTrace
    from traceinsight.job.verdict import job_verdict

    folder = tmp_path / "logdir"
    folder.mkdir()
    for rank, world, step_us in ((0, 2, 3000.0), (3, 8, 9000.0)):
        t = KinetoTrace(rank=rank, world_size=world)
        for s in range(4):
            t.step(s, s * step_us, step_us)
            t.kernel("volta_sgemm_128x64_nn", s * step_us + 10, step_us / 3, launch_us=s * step_us)
            t.kernel("ncclKernel_AllReduce_RING_LL_Sum_float", s * step_us + step_us / 2, 100.0, launch_us=s * step_us + 5)
        t.write(folder / f"rank{rank}.pt.trace.json")
    ja = analyze_job(str(folder), workers=1)
    assert ja.job.mixed_runs == "world sizes 2, 8" and ja.findings == []
    assert any(w.startswith("the rank files look like different runs (world sizes 2, 8)") for w in ja.warnings)
    v = job_verdict(ja)
    assert v["sentence"].startswith("The rank files look like different runs (world sizes 2, 8)") and v["rank"] is None
    tl = traceinsight.load(folder)
    assert tl.meta.extra["mixed_runs"] == "world sizes 2, 8" and any("different runs" in w for w in tl.meta.warnings)
