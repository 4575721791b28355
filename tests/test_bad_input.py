"""Bad input never gives a traceback: a one-line error with exit 3, or a partial analysis that says what was lost."""

from __future__ import annotations

import gzip
import json

import pytest
from typer.testing import CliRunner

import traceinsight
from traceinsight.cli.app import app
from traceinsight.vocab.errors import EXIT_UNREADABLE, TraceReadError

from .helpers.kineto_writer import KinetoTrace

runner = CliRunner()


def _analyze(path, *extra):
    result = runner.invoke(app, ["analyze", str(path), "--format", "json", *extra])
    assert "Traceback" not in (result.stdout + result.stderr)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    return result


def _good_trace(tmp_path, n_kernels=200):
    t = KinetoTrace()
    t.step(1, 0.0, n_kernels * 20.0 + 50)
    for i in range(n_kernels):
        t.cpu_op("aten::add", 10.0 + i * 20, 8.0)
        t.kernel("elementwise_kernel", 20.0 + i * 20, 5.0)
    return t.write(tmp_path / "good.json")


def _assert_unreadable(result, needle):
    assert result.exit_code == EXIT_UNREADABLE, result.stdout + result.stderr
    lines = [ln for ln in result.stderr.strip().splitlines() if ln]
    assert len(lines) == 1 and lines[0].startswith("traceinsight: error:"), result.stderr
    assert needle.lower() in lines[0].lower()


def test_empty_file(tmp_path):
    p = tmp_path / "empty.json"
    p.write_bytes(b"")
    _assert_unreadable(_analyze(p), "empty")


def test_missing_path(tmp_path):
    _assert_unreadable(_analyze(tmp_path / "nope.json"), "no such file")


def test_wrong_format_lists_supported_formats(tmp_path):
    p = tmp_path / "notes.csv"
    p.write_text("a,b,c\n1,2,3\n")
    _assert_unreadable(_analyze(p), "Supported:")
    png = tmp_path / "image.json"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    _assert_unreadable(_analyze(png), "not a trace format")


def test_corrupt_gzip(tmp_path):
    p = tmp_path / "trace.json.gz"
    p.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"this is not deflate data" * 10)
    _assert_unreadable(_analyze(p), "gzip")


def test_truncated_json_recovers_events_before_the_cut(tmp_path):
    good = _good_trace(tmp_path)
    full = traceinsight.load(good)
    data = good.read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[: int(len(data) * 0.6)])
    tl = traceinsight.load(cut)
    n_full = int((full.events["kind"] == "kernel").sum())
    n_cut = int((tl.events["kind"] == "kernel").sum())
    assert 0.4 * n_full < n_cut < 0.8 * n_full
    assert any("truncated" in w and "recovered" in w for w in tl.meta.warnings)
    result = _analyze(cut)
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert any("truncated" in w for w in report["trace"]["warnings"])


def test_truncated_gzip_recovers(tmp_path):
    good = _good_trace(tmp_path, n_kernels=2000)
    gz = tmp_path / "trace.json.gz"
    gz.write_bytes(gzip.compress(good.read_bytes()))
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gz.read_bytes()[: int(gz.stat().st_size * 0.5)])
    tl = traceinsight.load(cut)
    assert 0 < (tl.events["kind"] == "kernel").sum() < 2000
    assert any("gzip stream is cut short" in w for w in tl.meta.warnings)


def test_truncated_before_any_event_is_unreadable(tmp_path):
    p = tmp_path / "head.json"
    p.write_text('{"schemaVersion": 1, "traceEvents": [')
    tl = traceinsight.load(p)  # a valid head with no events: an empty timeline that says so
    assert tl.events.empty
    assert any("no timed events" in w for w in tl.meta.warnings)


def test_non_utf8_bytes_in_names(tmp_path):
    good = _good_trace(tmp_path, n_kernels=5)
    data = good.read_bytes().replace(b"elementwise_kernel", b"elementwise_\xff\xfekernel", 1)
    bad = tmp_path / "latin.json"
    bad.write_bytes(data)
    tl = traceinsight.load(bad)
    names = tl.events["name"].astype(str)
    assert names.str.contains("\ufffd").sum() == 1
    assert any("not UTF-8" in w for w in tl.meta.warnings)
    assert _analyze(bad).exit_code == 0


def test_missing_fields_are_tolerated(tmp_path):
    doc = {
        "schemaVersion": 1,
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 10, "dur": 5},  # no args
            {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 30},  # no dur
            {"ph": "X", "name": "no_cat", "ts": 40, "dur": 1},  # no cat, pid, tid
            {"ph": "X", "cat": "cpu_op", "name": "no_ts", "dur": 3},  # no ts: dropped
            {"cat": "cpu_op"},  # nothing
        ],
    }
    p = tmp_path / "sparse.json"
    p.write_text(json.dumps(doc))
    tl = traceinsight.load(p)
    assert sorted(tl.events["name"].astype(str)) == ["k1", "k2", "no_cat"]
    k = tl.events[tl.events["kind"] == "kernel"]
    assert k["device"].tolist() == [0, 0] and k["stream"].tolist() == [7, 7]
    assert k["dur_ns"].tolist() == [5000, 0]


def test_wrong_types_give_one_line_error(tmp_path):
    p = tmp_path / "weird.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": 5}))
    _assert_unreadable(_analyze(p), "not a PyTorch profiler trace")
    with pytest.raises(TraceReadError):
        traceinsight.load(p)


def test_folder_without_traces(tmp_path):
    (tmp_path / "readme.txt").write_text("hello")
    _assert_unreadable(_analyze(tmp_path), "not a trace format")


def test_usage_error_exit_code(tmp_path):
    good = _good_trace(tmp_path, n_kernels=3)
    result = runner.invoke(app, ["analyze", str(good), "--set", "TI999.x=1"])
    assert result.exit_code == 2
    assert "--set TI999: no rule has this code" in result.stderr
    result = runner.invoke(app, ["analyze", str(good), "--format", "pdf"])
    assert result.exit_code == 2
