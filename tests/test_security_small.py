"""The small ones of issue 28 (item 11): baselines are this tool's reports with capped strings, a lone surrogate
escape is replaced rather than fatal (both kineto decoders), messages name options that exist, and a 50 MB kernel
name is cut at ingest instead of costing minutes in every name regex."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.cli.app import app
from traceinsight.vocab.errors import EXIT_USAGE
from traceinsight.model.plausible import MAX_NAME_CHARS
from traceinsight.render.json_report import SCHEMA_VERSION

from .test_kineto_native import assert_same, native_built  # noqa: F401 - the fixture skips without the scanner

runner = CliRunner()


def _trace(tmp_path, extra=None):
    t = KinetoTrace()
    t.step(1, 0.0, 2000.0)
    t.kernel("gemm", 100.0, 200.0)
    t.kernel(extra or "gemm2", 700.0, 200.0)
    return t


@pytest.mark.parametrize("doc", [
    {"findings": [{"fingerprint": "0123456789abcdef", "code": "X"}]},  # another tool's file shaped like ours
    {"schema_version": 99, "traceinsight_version": "9", "findings": []},
    {"schema_version": True, "traceinsight_version": "0", "findings": []},
    {"schema_version": 1, "traceinsight_version": "0", "findings": [{"fingerprint": "not-hex"}]},
])
def test_baseline_must_be_our_report(tmp_path, doc):
    p = tmp_path / "b.json"
    p.write_text(json.dumps(doc))
    res = runner.invoke(app, ["analyze", str(_trace(tmp_path).write(tmp_path / "t.json")), "--baseline", str(p)])
    assert res.exit_code == EXIT_USAGE and "baseline" in res.stderr and "Traceback" not in res.output


def test_baseline_strings_are_capped(tmp_path):
    t = _trace(tmp_path).write(tmp_path / "t.json")
    p = tmp_path / "b.json"
    p.write_text(json.dumps({"schema_version": SCHEMA_VERSION, "traceinsight_version": "0.1.0",
                             "findings": [{"fingerprint": "0123456789abcdef", "code": "C" * 300_000, "title": "T" * 300_000}]}))
    res = runner.invoke(app, ["analyze", str(t), "--baseline", str(p), "-f", "md"])
    assert res.exit_code == 0, res.output
    assert "C" * 21 not in res.output and "T" * 301 not in res.output and len(res.output) < 60_000


def test_lone_surrogate_is_replaced_on_both_paths(tmp_path, monkeypatch, native_built):
    d = _trace(tmp_path, "XSURX").to_dict()
    p = tmp_path / "s.json"
    p.write_text(json.dumps(d).replace("XSURX", "ab\\ud800cd").replace('"gemm"', '"ok\\ud83d\\ude00"'))
    tl = assert_same(p, monkeypatch)
    names = set(tl.events["name"].astype(str))
    assert "ab\ufffdcd" in names and "ok\U0001F600" in names  # the lone one replaced, the pair kept
    assert any("1 lone UTF-16 surrogate" in w for w in tl.meta.warnings)


def test_escaped_backslash_before_u_is_text(tmp_path):
    from traceinsight.ingest.kineto.decode import replace_lone_surrogates

    assert replace_lone_surrogates(b'"a\\\\ud800"') == (b'"a\\\\ud800"', 0)
    assert replace_lone_surrogates(b'"a\\\\\\ud800"') == (b'"a\\\\\\ufffd"', 1)


def test_fifty_megabyte_kernel_name_is_cut(tmp_path):
    """Cut at ingest (how fast: bench/bench_timing_guards.py --only hostile; 170 s before names were capped)."""
    p = _trace(tmp_path, "K" * 50_000_000).write(tmp_path / "big.json")
    res = runner.invoke(app, ["analyze", str(p), "-f", "json"])
    assert res.exit_code == 0
    rep = json.loads(res.stdout)
    assert any("names longer than" in w for w in rep["trace"]["warnings"])
    assert len(res.stdout) < 2_000_000 and "K" * (MAX_NAME_CHARS + 1) not in res.stdout


ALLOWED_FOREIGN = {"--type", "--trace", "--force-overwrite"}  # nsys's own flags, quoted in nsys advice


def test_messages_name_options_that_exist():
    import typer.main

    commands = list(typer.main.get_command(app).commands)
    assert "analyze" in commands
    help_text = "".join(runner.invoke(app, [cmd, "--help"], terminal_width=200).output for cmd in commands)
    help_text += runner.invoke(app, ["--help"]).output
    pkg = Path(traceinsight.__file__).parent
    named = set()
    for f in pkg.rglob("*.py"):  # what messages tell the user to pass (nsys's own flags and CSS variables aside)
        for line in f.read_text().splitlines():
            if any(k in line for k in ("Error(", "echo(", "warn(", "append(")) and "nsys" not in line:
                named |= set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", line))
    missing = sorted(o for o in named - ALLOWED_FOREIGN if o not in help_text)
    assert not missing, missing


def test_max_bytes_is_an_option(tmp_path):
    p = _trace(tmp_path).write(tmp_path / "t.json")
    res = runner.invoke(app, ["analyze", str(p), "--max-bytes", "100"])
    assert res.exit_code == 3 and "--max-bytes" in res.stderr
