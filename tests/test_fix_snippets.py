"""Every fix snippet can be pasted: stored dedented, valid Python, and shown exactly so in HTML, Markdown and JSON."""

from __future__ import annotations

import ast
import html
import json
import re

import pytest

import traceinsight
from traceinsight.pipeline.engine import discover
from traceinsight.render import render
from traceinsight.rule_api import Fix, Severity

from .conftest import REPO

#: Fix keys whose snippets are not Python (plain CUDA C advice); every other snippet must parse.
NOT_PYTHON = {"cuda"}

RULES = discover().rules


def _assert_pasteable(code: str, where: str, python: bool = True) -> None:
    lines = code.split("\n")
    assert lines[0].strip(), f"{where}: blank first line"
    assert lines[-1].strip(), f"{where}: blank last line"
    assert not lines[0][:1].isspace(), f"{where}: first line indented"
    if python:
        try:
            ast.parse(code)
        except SyntaxError as exc:  # pragma: no cover - the message is the point
            pytest.fail(f"{where}: does not parse ({exc}):\n{code}")


def test_fix_dedents_what_rules_write():
    fx = Fix("t", """
        for x, y in loader:
            x = x.to("cuda", non_blocking=True)
        """)
    assert fx.code == 'for x, y in loader:\n    x = x.to("cuda", non_blocking=True)'
    assert Fix("t", "a = 1").code == "a = 1"
    assert Fix("t").code == ""


@pytest.mark.parametrize("code", sorted(RULES))
def test_every_rule_snippet_parses(code):
    fixes = RULES[code].fixes()
    assert fixes, f"{code} has no fix"
    for fw, fx in fixes.items():
        if fx.code:
            _assert_pasteable(fx.code, f"{code} fix {fw}", python=fw.partition(":")[0] not in NOT_PYTHON)


#: Rules that cannot fire on a plain CUDA program's trace, with why: they need no CUDA fix.
NO_CUDA_FINDING = {"TI016": "graph breaks are torch.compile's (its compiled-region ranges); a CUDA program has none"}


@pytest.mark.parametrize("code", sorted(RULES))
def test_every_rule_has_a_fix_for_each_framework(code):
    """A trace is shown its own framework's fix only (``advice.choose``): a rule without a JAX fix would leave a JAX
    trace with none, and before that rule showed it PyTorch code. A plain CUDA program's Nsight capture ("cuda") is
    one too: before, it was shown PyTorch's ``torch.profiler`` advice for its missing kernels."""
    fixes = RULES[code].fixes()
    wanted = {"pytorch", "tensorflow", "jax"} | ({"cuda"} if code not in NO_CUDA_FINDING else set())
    missing = wanted - {k for k, fx in fixes.items() if fx.text.strip()}
    assert not missing, f"{code} has no fix for {sorted(missing)}"


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "jax", "cuda"])
@pytest.mark.parametrize("tier", [None, "pre_ampere", "fp8"])
def test_a_detected_framework_leads_with_its_own_fix_or_none(framework, tier):
    """Every rule, on a trace of each detected framework and each GPU tier: the fix that leads (the one the terminal
    and Markdown print under "Fix in <framework>") is the trace's own framework's, or there is none; a rule without
    it never lends another framework's."""
    from traceinsight.assess import advice

    for code, cls in sorted(RULES.items()):
        chosen = advice.choose(cls.fixes(), framework, tier)
        assert not chosen or list(chosen)[0] == framework, f"{code} on a {framework} trace leads with {list(chosen)[0]}"
        if code not in NO_CUDA_FINDING or framework != "cuda":
            assert chosen, f"{code} shows no fix on a {framework} trace"
    bare = {"pytorch": Fix("pt"), "tensorflow": Fix("tf")}  # a rule (a plug-in's) with no JAX and no CUDA fix
    if framework in ("jax", "cuda"):
        assert advice.choose(bare, framework, tier) == {}
    assert list(advice.choose(bare, "unknown", tier)) == ["pytorch", "tensorflow"]  # nothing tells which is its own


SAMPLES = ["lstm_fallback.json.gz", "sync_stalls.json.gz", "dataloader_gaps.json.gz", "vecadd_sync.sqlite"]


@pytest.fixture(scope="module")
def analyses():
    return [traceinsight.analyze(REPO / "sample_traces" / s) for s in SAMPLES]


def test_reports_carry_the_dedented_snippets(analyses):
    seen = set()
    for a in analyses:
        doc = json.loads(render(a, "json"))
        md = render(a, "md", html_name="report.html")
        page = render(a, "html")
        html_blocks = [html.unescape(b) for b in re.findall(r"<pre><code>(.*?)</code></pre>", page, re.DOTALL)]
        md_blocks = re.findall(r"^```python\n(.*?)\n```$", md, re.DOTALL | re.MULTILINE)
        md_cuda = re.findall(r"^```cuda\n(.*?)\n```$", md, re.DOTALL | re.MULTILINE)  # plain CUDA advice
        for f, jf in zip(a.findings, doc["findings"]):
            for fw, fx in f.fixes.items():
                if not fx.code:
                    continue
                seen.add(f.code)
                assert jf["fixes"][fw]["code"] == fx.code
                assert fx.code in html_blocks, f"{f.code} {fw}: not verbatim in the HTML"
                if fx.code in md:  # Markdown shows the top findings' fixes in full
                    assert fx.code in (md_cuda if fw in NOT_PYTHON else md_blocks)
        python_fixes = {fx.code for f in a.findings for fw, fx in f.fixes.items() if fw not in NOT_PYTHON}
        for block in html_blocks + md_blocks:
            _assert_pasteable(block, "a rendered snippet", python=block in python_fixes or block in md_blocks)
    assert {"TI002", "TI004", "TI005", "TI006"} <= seen


def test_inline_code_in_prose_is_escaped_then_marked_up():
    from traceinsight.render.templating import inline_code

    assert str(inline_code("Use `x < y` and <b>`pin_memory=True`</b>")) == (
        "Use <code>x &lt; y</code> and &lt;b&gt;<code>pin_memory=True</code>&lt;/b&gt;"
    )
    assert str(inline_code("a lone ` backtick")) == "a lone ` backtick"


def test_html_fix_prose_shows_code_not_backticks(analyses):
    page = render(analyses[-1], "html")  # vecadd: TI006's fix names `pin_memory=True`
    fix_paras = re.findall(r"<h4>Fix in [^<]+</h4>\s*<p>(.*?)</p>", page, re.DOTALL)
    assert fix_paras and not any("`" in p for p in fix_paras)
    assert any("<code>pin_memory=True</code>" in p for p in fix_paras)


@pytest.mark.parametrize(("source_format", "lead"), [("nsys", "cuda"), ("pytorch", "pytorch"), ("tensorflow-xplane", "tensorflow")])
def test_an_unknown_trace_leads_with_the_fix_its_profiler_implies(source_format, lead):
    """No framework's names and no GPU work: every framework's fix stays (nothing tells which is the program's), led
    by the one its profiler implies. An empty Nsight capture is told an ``nsys`` flag first, not ``torch.profiler``."""
    from traceinsight.assess import advice
    from traceinsight.model.finding import Finding
    from traceinsight.model.timeline import TraceMeta

    f = Finding(code="TI011", title="t", severity=Severity.WARNING, message="m", impact_ns=0, impact_pct_span=0.0, impact_pct_step=None,
                fixes={"pytorch": Fix("pt"), "tensorflow": Fix("tf"), "jax": Fix("jx"), "cuda": Fix("cu")})
    advice.apply([f], "unknown", TraceMeta(source_format=source_format))
    assert list(f.fixes)[0] == lead and set(f.fixes) == {"pytorch", "tensorflow", "jax", "cuda"}
