"""Perfetto export: a valid gzipped Chrome trace that keeps the timeline, puts each finding on its own named track
with one slice per instance, stays within its size limits, and that traceinsight itself reads back."""

from __future__ import annotations

import gzip
import json

import pytest

import traceinsight
from traceinsight.render import perfetto

from .conftest import corpus_file
from .helpers.kineto_writer import KinetoTrace


def _gappy(tmp_path):
    """Five steps: 1 ms of kernels, then 2 ms in the DataLoader with the GPU idle (TI001 and TI005 fire)."""
    t = KinetoTrace()
    for s in range(5):
        t0 = s * 3000.0
        t.step(s, t0, 3000.0)
        for i in range(20):
            t.kernel("volta_sgemm_128x64_nn", t0 + 10 + i * 50, 50.0, launch_us=t0 + i * 0.5)
        t.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 1015.0, 1980.0)
    return t.write(tmp_path / "t.json")


def _export(analysis, tmp_path, **kw):
    path = perfetto.write(analysis, tmp_path / "findings.json.gz", **kw)
    doc = json.loads(gzip.decompress(path.read_bytes()))  # valid gzip, valid JSON
    return path, doc


def _tracks(doc) -> dict[int, str]:
    return {
        e["tid"]: e["args"]["name"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == perfetto.FINDINGS_PID
    }


def test_file_is_a_chrome_trace_with_one_track_per_finding(tmp_path):
    a = traceinsight.analyze(_gappy(tmp_path))
    assert {"TI001", "TI005"} <= {f.code for f in a.findings}
    _, doc = _export(a, tmp_path)
    assert isinstance(doc["traceEvents"], list) and doc["displayTimeUnit"] == "ns"
    tracks = _tracks(doc)
    assert sorted(tracks.values()) == sorted(f"{f.code} {f.title}" for f in a.findings)
    for e in doc["traceEvents"]:
        assert e["ph"] in ("X", "M")
        if e["ph"] == "X":
            assert e["dur"] >= 0 and isinstance(e["ts"], float)
    # TI001's slices are its gaps: last kernel of a step (t0 + 1010 µs) to the next step's first (t0 + 3010 µs).
    ti001 = next(n for n, f in enumerate(a.findings, 1) if f.code == "TI001")
    gaps = sorted(t for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == perfetto.FINDINGS_PID and e["tid"] == ti001
                  for t in (e["ts"], e["ts"] + e["dur"]))
    assert gaps == pytest.approx([t for s in range(4) for t in (s * 3000 + 1010.0, s * 3000 + 3010.0)], abs=0.01)
    info = doc["metadata"]["traceinsight"]
    assert [m["code"] for m in info["findings"]] == [f.code for f in a.findings]
    assert info["truncated"] == {}


def test_traceinsight_reads_it_back_with_the_findings_tracks(tmp_path):
    a = traceinsight.analyze(_gappy(tmp_path))
    path, doc = _export(a, tmp_path)
    back = traceinsight.load(path)
    assert back.meta.source_format == "pytorch"
    ev, orig = back.events, a.timeline.events
    # the trace itself survives: same kernels at the same times (µs with ns decimals), same steps
    k0 = orig[orig["kind"] == "kernel"].sort_values("start_ns")
    k1 = ev[ev["kind"] == "kernel"].sort_values("start_ns")
    assert len(k1) == len(k0) == 100
    assert (k1["dur_ns"].to_numpy() == k0["dur_ns"].to_numpy()).all()
    assert ((k1["start_ns"] - k1["start_ns"].min()).to_numpy() == (k0["start_ns"] - k0["start_ns"].min()).to_numpy()).all()
    assert (ev["kind"] == "step").sum() == 5
    assert back.meta.devices[0].name == a.timeline.meta.devices[0].name
    # the findings: one named thread per finding, one row per slice written
    rows = ev[ev["pid"] == perfetto.FINDINGS_PID]
    assert set(rows["thread_name"].astype(str)) == set(_tracks(doc).values())
    written = sum(m["instances_written"] for m in doc["metadata"]["traceinsight"]["findings"])
    assert len(rows) == written and set(rows["category"].astype(str)) == {perfetto.FINDING_CATEGORY}


def test_real_nsys_trace_round_trip(tmp_path):
    src = corpus_file("nsys/nsys2026.2_fastvideo-train_2xH100_300ms-slice.sqlite")
    a = traceinsight.analyze(src)
    path, doc = _export(a, tmp_path)
    back = traceinsight.load(path)
    for kind in ("kernel", "memcpy", "memset", "runtime"):
        assert (back.events["kind"] == kind).sum() == (a.timeline.events["kind"] == kind).sum(), kind
    busy0 = traceinsight.derive.views.Views(a.timeline).utilization["busy_pct"].sort_values().to_numpy()
    busy1 = traceinsight.derive.views.Views(back).utilization["busy_pct"].sort_values().to_numpy()
    assert busy1 == pytest.approx(busy0, abs=0.01)
    assert set(back.events.loc[back.events["pid"] == perfetto.FINDINGS_PID, "thread_name"].astype(str)) == set(_tracks(doc).values())


def test_events_per_kind_are_capped_and_the_cap_is_stated(tmp_path):
    a = traceinsight.analyze(_gappy(tmp_path))
    _, doc = _export(a, tmp_path, max_events_per_kind=30)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert len(kernels) == 30
    cut = doc["metadata"]["traceinsight"]["truncated"]["kernel"]
    assert cut["kept"] == 30 and cut["of"] == 100
    assert max(e["ts"] for e in kernels) * 1e3 == pytest.approx(cut["complete_until_ns"], abs=1)  # the earliest 30
    assert doc["metadata"]["traceinsight"]["limits"]["max_events_per_kind"] == 30
    assert "step" not in doc["metadata"]["traceinsight"]["truncated"]  # 5 steps: under the cap


def test_instances_are_capped_to_the_longest(tmp_path):
    a = traceinsight.analyze(_gappy(tmp_path))
    f = next(f for f in a.findings if f.code == "TI001")
    inst = perfetto.instances_of(f, a.timeline.span_ns)
    assert len(inst) == 4
    _, doc = _export(a, tmp_path, max_instances=2)
    n = next(i for i, g in enumerate(a.findings, 1) if g is f)
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == perfetto.FINDINGS_PID and e["tid"] == n]
    assert len(slices) == 2
    meta = next(m for m in doc["metadata"]["traceinsight"]["findings"] if m["tid"] == n)
    assert (meta["instances"], meta["instances_written"]) == (4, 2)


def test_finding_without_instances_spans_its_window_or_the_whole_trace(tmp_path):
    a = traceinsight.analyze(_gappy(tmp_path))
    f = a.findings[0]
    f.instances = []
    inst = perfetto.instances_of(f, a.timeline.span_ns)
    assert inst[["start_ns", "end_ns"]].values.tolist() == [[0, a.timeline.span_ns]]
    assert inst["label"].tolist() == ["whole trace"]
    f.location.start_ns, f.location.end_ns = 1_000, 5_000
    assert perfetto.instances_of(f, a.timeline.span_ns)[["start_ns", "end_ns"]].values.tolist() == [[1_000, 5_000]]


def test_slices_are_the_rules_instances(tmp_path):
    """Labels, ranks and devices of Finding.instances travel to the slices (here TI006's pageable copies)."""
    t = KinetoTrace()
    t.step(0, 0.0, 10_000.0)
    for i in range(4):
        t.memcpy("HtoD", 100.0 + i * 2000, 1500.0, 8 << 20, pageable=True)
    a = traceinsight.analyze(t.write(tmp_path / "t.json"))
    (f,) = [f for f in a.findings if f.code == "TI006"]
    assert len(f.instances) == 4
    _, doc = _export(a, tmp_path)
    n = a.findings.index(f) + 1
    slices = sorted((e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == perfetto.FINDINGS_PID and e["tid"] == n),
                    key=lambda e: e["ts"])
    want = sorted(f.instances, key=lambda i: i.start_ns)
    assert [(e["ts"], e["dur"]) for e in slices] == [(round(i.start_ns / 1e3, 3), round((i.end_ns - i.start_ns) / 1e3, 3)) for i in want]
    for e, i in zip(slices, want):
        assert e["args"].get("device") == i.device and e["args"].get("label", "") == (i.label or "")[:120]


def test_cli_writes_the_perfetto_file(tmp_path, repo):
    from typer.testing import CliRunner

    from traceinsight.cli.app import app

    runner = CliRunner()
    sample = str(repo / "sample_traces" / "vecadd_sync.sqlite")
    out = tmp_path / "vecadd.perfetto.json.gz"
    res = runner.invoke(app, ["analyze", sample, "--format", "perfetto", "-o", str(out)])
    assert res.exit_code == 0, res.output
    back = traceinsight.load(out)
    tracks = set(back.events.loc[back.events["pid"] == perfetto.FINDINGS_PID, "thread_name"].astype(str))
    expected = {f.code for f in traceinsight.analyze(sample).findings}
    assert {"TI002", "TI006"} <= expected  # the sample's planted problems
    assert {t.split()[0] for t in tracks} == expected
    res = runner.invoke(app, ["analyze", sample, "--format", "html,perfetto", "-o", str(tmp_path / "ti")])
    assert res.exit_code == 0, res.output
    assert gzip.decompress((tmp_path / "ti" / "traceinsight-report.perfetto.json.gz").read_bytes()).startswith(b'{"schemaVersion"')
    assert runner.invoke(app, ["analyze", sample, "--format", "perfetto"]).exit_code == 2  # a binary file needs -o
