"""A hostile ``--baseline`` is refused with one line (exit 2) before it can use memory (issue 14, item 5), and the
analysis raises no numpy RuntimeWarning on traces at the edges of the time range (item 12)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import traceinsight
from traceinsight.pipeline.baseline import MAX_REPORT_BYTES, load_report
from traceinsight.vocab.errors import ConfigError
from traceinsight.render import render

from .helpers.kineto_writer import KinetoTrace


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    t = KinetoTrace()
    t.step(1, 0, 1000)
    t.kernel("volta_sgemm_128x64_nn", 50, 400)
    return t.write(tmp_path_factory.mktemp("b") / "t.json")


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # a runaway read dies here, not in the CI runner


def _cli_baseline(trace: Path, baseline: Path | str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traceinsight.cli.app", "analyze", str(trace), "--baseline", str(baseline)],
                          capture_output=True, text=True, timeout=120, preexec_fn=_limited)


def _one_line_exit_2(r: subprocess.CompletedProcess, *words: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceinsight: error: baseline"), r.stderr[-2000:]
    for w in words:
        assert w in lines[0]


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_dev_zero_is_refused_up_front(trace):
    _one_line_exit_2(_cli_baseline(trace, "/dev/zero"), "not a regular file")


def test_fifo_is_refused_without_blocking(trace, tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    _one_line_exit_2(_cli_baseline(trace, fifo), "not a regular file")  # the timeout would catch a blocked open


def test_folder_is_refused(trace, tmp_path):
    _one_line_exit_2(_cli_baseline(trace, tmp_path), "not a regular file")


def test_huge_file_is_refused_without_reading_it(trace, tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # sparse: no disk used, but stat says 10 GiB
        f.truncate(10 << 30)
    _one_line_exit_2(_cli_baseline(trace, big), "too large")


def test_limit_is_exact(tmp_path):
    report = {"schema_version": 1, "traceinsight_version": "0.1.0", "findings": []}
    doc = json.dumps(report).encode()
    p = tmp_path / "b.json"
    p.write_bytes(doc)
    assert load_report(p, max_bytes=len(doc)) == report
    with pytest.raises(ConfigError, match="too large"):
        load_report(p, max_bytes=len(doc) - 1)
    assert MAX_REPORT_BYTES >= 16 << 20  # real reports (evidence capped per finding) are far below this


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("[" * 200_000 + "]" * 200_000, "RecursionError"),  # deep nesting
        ('{"findings": [{"fingerprint": "x", "impact_pct_span": ' + "9" * 5000 + "}]}", "ValueError"),  # digit limit
        (b"\xff\xfe{}".decode("latin-1"), "UnicodeDecodeError"),
        ("", "JSONDecodeError"),
    ],
)
def test_malformed_baselines_are_one_line(tmp_path, content, why):
    p = tmp_path / "b.json"
    p.write_bytes(content.encode("latin-1") if why == "UnicodeDecodeError" else content.encode())
    with pytest.raises(ConfigError, match=why):
        load_report(p)


def test_non_finite_shares_are_read_as_zero(trace, tmp_path):
    a = traceinsight.analyze(trace)
    fp = a.findings[0].fingerprint if a.findings else "0000000000000000"
    p = tmp_path / "b.json"
    p.write_text('{"schema_version": 1, "traceinsight_version": "0", "findings": [{"fingerprint": "%s", "impact_pct_span": 1e999}, '
                 '{"fingerprint": "00000000000000ff", "impact_pct_span": NaN}]}' % fp)
    from traceinsight.pipeline.baseline import compare

    cmp = compare(a.findings, load_report(p))
    assert all(v == 0.0 for v in cmp.before_pct.values())
    assert [f["impact_pct_span"] for f in cmp.fixed] == [0.0]


def test_no_runtime_warning_on_a_trace_spanning_the_time_range(tmp_path):
    """Kernels ~31 years apart (inside the int64 range): the HTML close-up of the idle gap used to overflow
    ``PLOT_W * (t - w0)`` in int64 and print a RuntimeWarning on stderr. Such rows are now dropped as implausible
    (plausible.py) with a warning; nothing prints a RuntimeWarning either way."""
    t = KinetoTrace()
    for i in range(5):
        t.kernel("k", 50 + i * 20, 10)
        t.kernel("k", 1e15 + i * 20, 10)
    p = t.write(tmp_path / "far.json")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = traceinsight.analyze(p)
        assert a.timeline.span_ns < 10**9 and any("from the rest of the trace" in w for w in a.timeline.meta.warnings)
        for fmt in ("text", "json", "md", "html"):
            render(a, fmt)
