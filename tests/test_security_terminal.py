"""Untrusted strings never drive a terminal: no raw ESC / OSC / CSI / C1 / bidi / zero-width character reaches
the text report, stderr, the JSON report or the Markdown report (issue 14, items 2 and 12).

The hostile trace is written by the real kineto and nsys writers, with the attack in every string field a reader
carries to a report: kernel, op and thread names, the GPU name, the file and folder names, baseline titles.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from traceinsight.cli.app import app
from traceinsight.vocab.sanitize import has_unsafe, json_text, markdown_text, terminal, terminal_lines

from .helpers.kineto_writer import KinetoTrace
from .helpers.nsys_writer import NsysTrace

#: Clear screen, set the window title (OSC 0 ... BEL), a C1 CSI, a right-to-left override, a zero-width space.
ATTACK = "\x1b[2J\x1b]0;pwned\x07\u202etxt.exe\u200b\x9b31m"
RAW = ["\x1b", "\x07", "\x9b", "\u202e", "\u200b"]  # none of these may appear raw in any output
VISIBLE = ["\\x1b[2J", "\\x1b]0;pwned\\x07", "\\u202e", "\\u200b", "\\x9b31m"]


def _hostile_kineto(path: Path) -> Path:
    t = KinetoTrace(device_name="GPU" + ATTACK)
    t.step(1, 0, 5000)
    t.cpu_op("aten::mm" + ATTACK, 10, 100)
    for i in range(40):  # many tiny kernels with long gaps: findings that quote the kernel name
        t.kernel("kern" + ATTACK, 50 + i * 120, 20)
    doc = t.to_dict()
    for e in doc["traceEvents"]:
        if e.get("name") == "thread_name":
            e["args"]["name"] = "thread" + ATTACK
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("sec") / ("dir" + ATTACK)
    return _hostile_kineto(folder / ("trace" + ATTACK + ".json"))


def _no_raw(text: str) -> None:
    for ch in RAW:
        assert ch not in text, f"raw {ch!r} reached the output"


# --- the sanitiser itself --------------------------------------------------------------------------------

def test_terminal_form_is_visible_and_one_line():
    assert terminal("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert terminal("t\tn\nr\r") == "t\\tn\\nr\\r"
    assert terminal("\x00\x7f\x85\x9b") == "\\x00\\x7f\\x85\\x9b"
    assert terminal("ab\u202ecd\u2066\u200b\u200d\ufeff") == "ab\\u202ecd\\u2066\\u200b\\u200d\\ufeff"
    assert terminal("\U000e0041") == "\\U000e0041"  # an invisible tag character
    assert terminal("\udcff") == "\\udcff"  # a lone surrogate (undecodable byte) cannot be encoded raw
    assert terminal("line\u2028sep") == "line\\u2028sep"


def test_terminal_form_is_unambiguous_and_keeps_ordinary_text():
    # a name holding the *text* "\x1b" must not read like a name holding ESC
    assert terminal("\\x1b") == "\\\\x1b" != terminal("\x1b")
    assert terminal("volta_sgemm<float, 128>::run(é, 中文, 🚀)") == "volta_sgemm<float, 128>::run(é, 中文, 🚀)"
    assert terminal(None) == "" and terminal(12) == "12"


def test_terminal_limit_bounds_megabyte_names():
    out = terminal("\x1b" * 1_000_000, limit=50)
    assert len(out) == 50 and out.endswith("…") and "\x1b" not in out


def test_terminal_lines_keeps_line_feeds_only():
    assert terminal_lines("a\r\nb\nc\x1b\td") == "a\nb\nc\\x1b\\td"


def test_json_text_escapes_but_keeps_the_value():
    doc = {"name": "k" + ATTACK + "\U000e0041", "n": 1}
    raw = json.dumps(doc, ensure_ascii=False)
    out = json_text(raw)
    assert json.loads(out) == doc
    _no_raw(out)
    assert "\U000e0041" not in out and "\\udb40\\udc41" in out  # astral characters as a surrogate pair


def test_markdown_text_strips_invisible_characters():
    assert markdown_text("a\u200bb\u202ec\u2066d\ufeffe\u00adf") == "abcdef"
    assert not has_unsafe(terminal(ATTACK)) and has_unsafe(ATTACK)


# --- every report and every message -----------------------------------------------------------------------

def test_text_report_escapes_every_trace_string(hostile):
    r = CliRunner().invoke(app, ["analyze", str(hostile)])
    assert r.exit_code == 0, r.output
    _no_raw(r.output)
    for part in ("\\x1b[2J", "\\u202e"):
        assert part in r.output
    assert "kern\\x1b[2J" in r.output and "GPU\\x1b[2J" in r.output and "trace\\x1b[2J" in r.output


def test_json_report_keeps_no_raw_control_or_bidi(hostile):
    r = CliRunner().invoke(app, ["analyze", str(hostile), "-f", "json"])
    assert r.exit_code == 0, r.output
    _no_raw(r.stdout)
    doc = json.loads(r.stdout)
    # escaped, not altered: the decoded report still names the kernel exactly as the trace does
    assert doc["summary"]["top_kernels"][0]["name"] == "kern" + ATTACK
    assert doc["trace"]["devices"][0]["name"] == "GPU" + ATTACK


def test_markdown_report_keeps_no_invisible_or_control_characters(hostile):
    r = CliRunner().invoke(app, ["analyze", str(hostile), "-f", "md"])
    assert r.exit_code == 0, r.output
    _no_raw(r.stdout)
    assert "kern\\\\x1b" in r.stdout  # the ESC shown (its backslash escaped for Markdown)
    for ch in ("\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u202e", "\u2066"):
        assert ch not in r.stdout


def test_error_messages_on_stderr_are_sanitised(tmp_path):
    bad = tmp_path / ("broken" + ATTACK + ".json")
    bad.write_text('this is no trace')
    r = subprocess.run([sys.executable, "-m", "traceinsight.cli.app", "analyze", str(bad)], capture_output=True, text=True, timeout=120)
    assert r.returncode in (2, 3), r.stderr
    assert r.stderr.startswith("traceinsight: error: ") and r.stderr.count("\n") == 1, r.stderr
    _no_raw(r.stderr)
    assert "broken\\x1b[2J" in r.stderr


def test_baseline_titles_are_sanitised(hostile, tmp_path):
    base = {"schema_version": 1, "traceinsight_version": "0.1.0",
            "findings": [{"fingerprint": "00000000000000aa", "code": "TI0" + ATTACK, "title": "old" + ATTACK, "impact_pct_span": 5}]}
    bp = tmp_path / "base.json"
    bp.write_text(json.dumps(base))
    for fmt in ("text", "json", "md"):
        r = CliRunner().invoke(app, ["analyze", str(hostile), "--baseline", str(bp), "-f", fmt])
        assert r.exit_code == 0, r.output
        _no_raw(r.stdout)
    r = CliRunner().invoke(app, ["analyze", str(hostile), "--baseline", str(bp)])
    assert "fixed: TI0\\x1b[2J" in r.stdout and "old\\x1b[2J" in r.stdout


def test_nsys_strings_are_sanitised(tmp_path):
    t = NsysTrace(device_name="GPU" + ATTACK)
    t.step(1, 0, 10_000_000)
    for i in range(20):
        t.kernel("nsyskern" + ATTACK, 100_000 + i * 400_000, 20_000)
    p = t.write(tmp_path / "hostile.sqlite")
    for fmt in ("text", "json", "md"):
        r = CliRunner().invoke(app, ["analyze", str(p), "-f", fmt])
        assert r.exit_code == 0, r.output
        _no_raw(r.stdout)
    r = CliRunner().invoke(app, ["analyze", str(p)])
    assert "nsyskern\\x1b[2J" in r.stdout


def test_rich_markup_in_names_is_inert(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 2000)
    for i in range(20):
        t.kernel("[bold red]boom[/][link=http://x]y[/link]\\", 50 + i * 90, 10)
    # a wide terminal, so the name is shown whole (tables shorten long names to the terminal's width)
    r = CliRunner().invoke(app, ["analyze", str(t.write(tmp_path / "markup.json"))], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "[bold red]boom[/][link=http://x]y[/link]\\\\" in r.stdout


# --- a real pseudo-terminal -----------------------------------------------------------------------------------

def _run_in_pty(args: list[str], timeout: float = 120.0) -> tuple[int, bytes]:
    """Run a command with stdin, stdout and stderr on a fresh pseudo-terminal; return (exit code, all bytes)."""
    master, slave = pty.openpty()
    env = dict(os.environ, COLUMNS="120", LINES="40", TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            if time.monotonic() > deadline:
                proc.kill()
                raise AssertionError("timed out under the pseudo-terminal")
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
    finally:
        os.close(master)
    return proc.wait(timeout=30), b"".join(chunks)


def _assert_terminal_safe(raw: bytes) -> None:
    for seq in (b"\x1b", b"\x07", "\x9b".encode(), "\u202e".encode(), "\u200b".encode(), b"\x9b", b"\x9d"):
        assert seq not in raw, f"raw {seq!r} reached the terminal"


def test_text_report_under_a_real_pseudo_terminal(hostile):
    code, raw = _run_in_pty([sys.executable, "-m", "traceinsight.cli.app", "analyze", str(hostile)])
    assert code == 0, raw.decode(errors="replace")[-2000:]
    _assert_terminal_safe(raw)
    text = raw.decode()
    for part in VISIBLE:
        assert part in text, part
    assert "thread\\x1b[2J" in text or "kern\\x1b[2J" in text


def test_errors_under_a_real_pseudo_terminal(tmp_path):
    bad = tmp_path / ("bad" + ATTACK + ".json")
    bad.write_text("not a trace \x1b]0;title\x07")
    code, raw = _run_in_pty([sys.executable, "-m", "traceinsight.cli.app", "analyze", str(bad), "-o", str(bad)])
    assert code == 2
    _assert_terminal_safe(raw)
    assert "bad\\x1b[2J" in raw.decode()
    assert bad.read_text() == "not a trace \x1b]0;title\x07"
