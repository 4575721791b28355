"""The same hostile trace strings through every renderer and every output path (issue 28, item 1).

A kernel, op, GPU or folder name is written by whoever produced the trace. In a pull-request comment (Markdown)
it must not become an ``<img>`` beacon, a link, a heading or a table; on a terminal (text) it must not carry an
escape sequence or a bidi override; in HTML it must stay text. Single-trace and whole-job reports alike.
"""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.cli.app import app
from traceinsight.render import escape

runner = CliRunner()

HOSTILE = [
    "<img src=http://evil.test/b.png>",
    "[click](http://evil.test/c)",
    "x\n# FAKE HEADING\n| fake | table |\n|---|---|",
    "@victim",
    "\x1b]0;pwned\x07\x1b[2J",
    "\u202eevil",
    "![i](http://evil.test/i.png) <script>alert(1)</script>",
]
FOLDER = "job<img src=x onerror=alert(1)>[l](http:evil.test)"


def _write(path, rank=None, world=None):
    t = KinetoTrace(device_name=HOSTILE[0] + HOSTILE[4], rank=rank, world_size=world)
    # two steps: the hostile sync sits in the second, so it is steady-state work a report names (not the head of
    # the run, which the ledger may set aside as warm-up)
    t.step(1, 0.0, 5_000.0)
    t.step(2, 5_000.0, 15_000.0)
    at = 100.0
    for i in range(400):  # many tiny launch-bound kernels with hostile names, gaps between them
        name = HOSTILE[i % len(HOSTILE)]
        t.kernel(name, at, 2.0)
        at += 12.0
    t.runtime("cudaStreamSynchronize", at + 210, 3000.0)
    t.cpu_op(HOSTILE[2], at + 205, 3100.0)
    t.kernel(HOSTILE[1], at + 4000, 500.0)
    t.kernel(HOSTILE[6], at + 9000, 500.0)
    return t.write(path)


def _md_is_inert(md: str) -> None:
    assert "<img" not in md and "<script" not in md
    assert not re.search(r"\]\(http", md), "a live Markdown link or image"
    assert not re.search(r"(?m)^\s*#+\s*FAKE", md), "a heading from the trace"
    assert not re.search(r"(?m)^\|\s*fake\s*\|", md), "a table row from the trace"
    assert "@victim" not in md and "\x1b" not in md and "\u202e" not in md and "\x07" not in md


def _text_is_inert(text: str) -> None:
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert not re.search(r"(?m)^# FAKE", text)


def _html_is_inert(html: str) -> None:
    assert "<img src=http://evil" not in html and "<script>alert(1)" not in html and "<img src=x onerror" not in html
    assert "\x1b" not in html


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    d = tmp_path_factory.mktemp("single")
    return _write(d / "hostile.json"), d


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    d = tmp_path_factory.mktemp("jobs") / FOLDER
    d.mkdir()
    for r in range(2):
        _write(d / f"rank{r}.json", rank=r, world=2)
    return d


@pytest.mark.parametrize("kind", ["single", "job"])
def test_every_format_is_inert(kind, single, job, tmp_path):
    src = str(single[0]) if kind == "single" else str(job)
    out = tmp_path / "out"
    res = runner.invoke(app, ["analyze", src, "-f", "md,text,html,json", "-o", str(out), "--min-impact", "0"])
    assert res.exit_code == 0, res.output
    md = (out / "traceinsight-report.md").read_text()
    _md_is_inert(md)
    _text_is_inert((out / "traceinsight-report.txt").read_text())
    _html_is_inert((out / "traceinsight-report.html").read_text())
    rep = json.loads((out / "traceinsight-report.json").read_text())
    assert rep  # valid JSON whatever the names held
    # the hostile names did reach the reports (escaped), so the checks above tested something
    assert "evil" in md and ("victim" in md or "FAKE" in md)


@pytest.mark.parametrize("kind", ["single", "job"])
@pytest.mark.parametrize("fmt", ["md", "text"])
def test_stdout_paths_are_inert(kind, fmt, single, job):
    src = str(single[0]) if kind == "single" else str(job)
    res = runner.invoke(app, ["analyze", src, "-f", fmt, "--min-impact", "0"])
    assert res.exit_code == 0, res.output
    (_md_is_inert if fmt == "md" else _text_is_inert)(res.stdout)
    _text_is_inert(res.stderr)


@pytest.mark.parametrize("s", HOSTILE + [FOLDER, "1. list", "- item", "> quote", "***", "www.evil.test", "http://evil.test/x"])
def test_one_function_per_medium(s):
    md = escape.markdown(s, 500)
    _md_is_inert(md)
    assert "\n" not in md and not re.match(r"\s*([-*+>#]|\d+\.)\s", md)
    assert "http://" not in md and "www.evil" not in md  # no autolink either
    t = escape.terminal(s, 500)
    assert "\n" not in t and "\x1b" not in t
    h = escape.html(s)
    assert "<" not in h and ">" not in h and '"' not in h


def test_github_and_sarif_are_inert(single, tmp_path):
    """The annotations format starts no workflow command of the trace's (every line is ours), SARIF stays JSON."""
    from tests.test_github_sarif import runner_commands

    out = tmp_path / "out"
    res = runner.invoke(app, ["analyze", str(single[0]), "-f", "github,sarif", "-o", str(out), "--min-impact", "0",
                              "--source-root", str(single[1])])
    assert res.exit_code == 0, res.output
    gh = (out / "traceinsight-report.github.txt").read_text()
    assert {name for name, _, _ in runner_commands(gh)} <= {"notice", "warning", "error"}
    assert all(line.startswith(("::notice ", "::warning ", "::error ", "traceinsight: ")) for line in gh.splitlines())
    _text_is_inert(gh)
    sarif = (out / "traceinsight-report.sarif").read_text()
    doc = json.loads(sarif)
    assert doc["version"] == "2.1.0" and doc["runs"][0]["results"]
    assert "evil" in sarif and "\x1b" not in sarif and "\u202e" not in sarif  # reached it, as visible escapes


@pytest.mark.parametrize(("raw", "want"), [
    ('x" onmouseover="alert(1)', "x&quot; onmouseover=&quot;alert(1)"),
    ("x' onfocus='alert(1)", "x&#x27; onfocus=&#x27;alert(1)"),
    ("<b>&amp;</b>", "&lt;b&gt;&amp;amp;&lt;/b&gt;"),
    ("`a` & 'b' \"c\" <d>", "`a` &amp; &#x27;b&#x27; &quot;c&quot; &lt;d&gt;"),
    (None, ""),
])
def test_html_escape_is_attribute_safe(raw, want):
    """``escape.html`` on strings holding both quotes, ``<``, ``&`` and backticks: every character that can end an
    attribute value (either quote) or open markup is an entity, and a browser reads back exactly the input, inside a
    double- or a single-quoted attribute alike (backticks end no attribute in HTML5, so they stay)."""
    from html.parser import HTMLParser

    h = escape.html(raw)
    assert h == want
    for quote in ('"', "'"):
        seen: list = []

        class Attrs(HTMLParser):
            def handle_starttag(self, tag, attrs):
                seen.append(attrs)

        Attrs().feed(f"<a title={quote}{h}{quote} href={quote}#{quote}>t</a>")
        assert seen == [[("title", "" if raw is None else raw), ("href", "#")]], quote
