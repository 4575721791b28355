"""Reports are never written over an input, never half-written, and an output error is one line with exit 2
(issue 14, items 3 and 8). Every case runs the real command in a subprocess, as a CI job would."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from typer.testing import CliRunner

from traceinsight.cli.app import app
from traceinsight.vocab.errors import OutputError
from traceinsight.render.outputs import Target, plan, refuse_inputs, write_file

from .helpers.kineto_writer import KinetoTrace


def _trace(path: Path) -> Path:
    t = KinetoTrace()
    t.step(1, 0, 1000)
    t.cpu_op("aten::mm", 10, 100)
    t.kernel("volta_sgemm_128x64_nn", 50, 400)
    t.kernel("volta_sgemm_128x64_nn", 600, 300)
    return t.write(path)


def _cli(*args, preexec=None) -> subprocess.CompletedProcess:
    """The command in a subprocess where the process matters (limits), else in-process (same code, faster)."""
    argv = ["analyze", *map(str, args)]
    if preexec is not None:
        return subprocess.run([sys.executable, "-m", "traceinsight.cli.app", *argv], capture_output=True, text=True,
                              timeout=120, preexec_fn=preexec)
    r = CliRunner().invoke(app, argv)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception  # a traceback: the test fails with it
    return subprocess.CompletedProcess(argv, r.exit_code, r.stdout, r.stderr)


def _one_line_exit_2(r: subprocess.CompletedProcess, *words: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceinsight: error: "), r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


@pytest.fixture
def trace(tmp_path) -> Path:
    return _trace(tmp_path / "t.json")


def _snapshot(p: Path) -> tuple[bytes, int]:
    return p.read_bytes(), p.stat().st_mtime_ns


# --- never over an input ---------------------------------------------------------------------------------

def test_output_equal_to_the_input_is_refused(trace):
    before = _snapshot(trace)
    r = _cli(trace, "-o", trace)
    _one_line_exit_2(r, "refusing to write", "t.json")
    assert _snapshot(trace) == before


def test_output_spelled_differently_is_refused(trace, tmp_path):
    before = _snapshot(trace)
    other = tmp_path / "sub" / ".." / "t.json"
    (tmp_path / "sub").mkdir()
    _one_line_exit_2(_cli(trace, "-o", other, "-f", "json"), "refusing")
    assert _snapshot(trace) == before


def test_symlink_and_hardlink_to_the_input_are_refused(trace, tmp_path):
    before = _snapshot(trace)
    sym = tmp_path / "link.json"
    sym.symlink_to(trace)
    hard = tmp_path / "hard.json"
    os.link(trace, hard)
    for target in (sym, hard):
        _one_line_exit_2(_cli(trace, "-o", target), "refusing")
    assert _snapshot(trace) == before and sym.is_symlink()
    # and the other way round: analysing the link, writing the real file
    _one_line_exit_2(_cli(sym, "-o", trace), "refusing")
    assert _snapshot(trace) == before


def test_output_into_an_input_folder_is_refused(tmp_path):
    logdir = tmp_path / "run"
    trace = _trace(logdir / "t.json")
    before = _snapshot(trace)
    _one_line_exit_2(_cli(logdir, "--trace-format", "pytorch", "-o", trace), "refusing", "input folder")
    _one_line_exit_2(_cli(logdir, "--trace-format", "pytorch", "-o", logdir / "report.html"), "input folder")
    _one_line_exit_2(_cli(logdir, "--trace-format", "pytorch", "-f", "html,json", "-o", logdir), "input folder")
    assert _snapshot(trace) == before
    assert sorted(p.name for p in logdir.iterdir()) == ["t.json"]


def test_hardlink_outside_an_input_folder_is_refused(tmp_path):
    logdir = tmp_path / "run"
    trace = _trace(logdir / "t.json")
    outside = tmp_path / "elsewhere.json"
    os.link(trace, outside)
    before = _snapshot(trace)
    _one_line_exit_2(_cli(logdir, "--trace-format", "pytorch", "-o", outside), "refusing")
    assert _snapshot(trace) == before


def test_output_over_the_baseline_is_refused(trace, tmp_path):
    base = tmp_path / "base.json"
    assert _cli(trace, "-f", "json", "-o", base).returncode == 0
    before = _snapshot(base)
    _one_line_exit_2(_cli(trace, "--baseline", base, "-o", base), "refusing")
    assert _snapshot(base) == before


def test_several_formats_whose_file_is_the_input_are_refused(tmp_path):
    out = tmp_path / "out"
    trace = _trace(out / "traceinsight-report.json")
    before = _snapshot(trace)
    _one_line_exit_2(_cli(trace, "-f", "json,md", "-o", out), "refusing")
    assert _snapshot(trace) == before and not (out / "traceinsight-report.md").exists()


def test_refusal_comes_before_reading(tmp_path):
    """A refused target costs nothing: the (possibly huge) trace is not even parsed."""
    junk = tmp_path / "junk.json"
    junk.write_bytes(b"\x00not a trace")
    _one_line_exit_2(_cli(junk, "-o", junk), "refusing")  # exit 2 (usage), not 3 (unreadable)


def test_ordinary_outputs_still_work(trace, tmp_path):
    r = _cli(trace, "-o", tmp_path / "new" / "deeper" / "r.json")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "new" / "deeper" / "r.json").read_text())["schema_version"] >= 1
    r = _cli(trace, "-f", "json,md,html,text", "-o", tmp_path / "all")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "all").iterdir()) == [
        "traceinsight-report.html", "traceinsight-report.json", "traceinsight-report.md", "traceinsight-report.txt"]


# --- output errors ---------------------------------------------------------------------------------------

def test_output_is_a_folder(trace, tmp_path):
    _one_line_exit_2(_cli(trace, "-o", tmp_path / "."), "is a folder")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_output_to_a_full_device(trace):
    _one_line_exit_2(_cli(trace, "-o", "/dev/full"), "no space left")
    assert Path("/dev/full").is_char_device()  # written in place, not replaced by a file


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_stdout_to_a_full_device(trace):
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "traceinsight.cli.app", "analyze", str(trace)], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    _one_line_exit_2(r, "standard output")


def test_unwritable_place(trace):
    _one_line_exit_2(_cli(trace, "-o", "/proc/traceinsight-report.json"), "cannot write")


def test_parent_that_cannot_be_created(trace, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    _one_line_exit_2(_cli(trace, "-o", blocker / "sub" / "r.json"), "cannot write", "folder")


def test_a_failed_write_leaves_the_old_report_and_no_temporary(trace, tmp_path):
    """RLIMIT_FSIZE makes the write itself fail half-way (EFBIG), as a full disk would."""
    report = tmp_path / "r.html"
    report.write_text("previous report")

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    r = _cli(trace, "-o", report, preexec=small_files)
    _one_line_exit_2(r, "cannot write")
    assert report.read_text() == "previous report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "t.json"]


def test_closed_pipe_is_quiet(trace):
    p = subprocess.Popen([sys.executable, "-m", "traceinsight.cli.app", "analyze", str(trace), "-f", "html"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # before the report is written: the write meets a closed pipe
    err = p.stderr.read().decode()
    p.wait(timeout=120)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert p.returncode == 2 and err == ""


# --- the module on its own -------------------------------------------------------------------------------

def test_plan_and_refuse_inputs(tmp_path):
    trace = _trace(tmp_path / "t.json")
    assert plan(["json"], None) == [Target("json", None, None)]
    # one format: no pointer to an HTML page nobody wrote; the one already beside it is named
    assert plan(["md"], tmp_path / "r.md") == [Target("md", tmp_path / "r.md", None)]
    (tmp_path / "r.html").write_text("<html></html>")
    assert plan(["md"], tmp_path / "r.md") == [Target("md", tmp_path / "r.md", "r.html")]
    assert plan(["json"], tmp_path / "r.json") == [Target("json", tmp_path / "r.json", None)]
    assert plan(["md", "html"], tmp_path / "d")[0] == Target("md", tmp_path / "d" / "traceinsight-report.md", "traceinsight-report.html")
    with pytest.raises(OutputError, match="is a folder"):
        plan(["md"], tmp_path)
    refuse_inputs([Target("json", tmp_path / "other.json", None)], [trace, None])  # no error
    with pytest.raises(OutputError, match="is the input"):
        refuse_inputs([Target("json", trace, None)], [trace])


def test_write_file_keeps_permissions_and_replaces_atomically(tmp_path):
    p = tmp_path / "r.txt"
    p.write_text("old")
    p.chmod(0o640)
    write_file(p, "new \udcff")  # a lone surrogate (undecodable byte in a name) must not fail the write
    assert p.read_text(encoding="utf-8") == "new \\udcff"
    assert (p.stat().st_mode & 0o777) == 0o640
    assert [q.name for q in tmp_path.iterdir()] == ["r.txt"]


def test_several_formats_into_a_file_is_one_line(trace, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    _one_line_exit_2(_cli(trace, "-f", "json,md", "-o", f), "is a file")
    assert f.read_text() == "x"


def test_output_name_too_long_is_one_line(trace, tmp_path):
    _one_line_exit_2(_cli(trace, "-o", tmp_path / ("r" * 300 + ".md")), "cannot write")
    _one_line_exit_2(_cli(trace, "-f", "json,md", "-o", tmp_path / ("d" * 300)), "cannot write")
