"""GitHub Actions workflow annotations: each finding on the line of the user's code it is about, in the pull
request's diff, the way linters report there (``--format github``).

One ``::notice`` / ``::warning`` / ``::error`` line per finding whose ``source`` (the innermost user frame of a
``with_stack=True`` recording) is a file of the checkout (``render.sources``: relative to ``--source-root``,
library and interpreter frames never): ``::warning file=train.py,line=28,title=TI002 host-sync-stalls::…`` with
the title, the function it happened in, the saving and the first line of the fix. The line is where that function
begins (PyTorch's Python tracer records a function by its first line, not by the line running in it). A finding without such a line cannot be pinned to code: it
is a plain line of the log here, and the command line writes it to the job summary (``summary``) when GitHub
gives one (``$GITHUB_STEP_SUMMARY``).

Every line this prints starts with text of its own (``::notice``, ``traceinsight:``), and every piece of trace text
in it goes through ``escape.workflow_data`` / ``escape.workflow_property``, so no kernel, file or rule name can
start, end or add a workflow command.
"""

from __future__ import annotations

from typing import Any

from traceinsight.model.analysis import Analysis
from traceinsight.render import escape
from traceinsight.render.common import figure_text, shown_fixes
from traceinsight.render.sources import SourceRoot

#: A finding's severity as a workflow command (the annotation's colour and whether it counts as an error).
COMMANDS = {"info": "notice", "warning": "warning", "error": "error"}
#: Where unlocated findings went, for the line that says so.
SUMMARY_NOTE = "see the job summary"


FIX_CHARS = 400


def first_line(text: str) -> str:
    """The first non-blank line of a fix's text, at most FIX_CHARS (an annotation is a glance, the report has all)."""
    line = next((line.strip() for line in str(text).splitlines() if line.strip()), "")
    return line if len(line) <= FIX_CHARS else line[: FIX_CHARS - 1] + "…"


def annotation_text(f: Any) -> str:
    """What an annotation says: the finding's title, the function of the user's code it happened in (a Python
    profiler names a function by the line where it begins, not by the line that was running), its saving, the
    first line of its fix (unescaped)."""
    src = getattr(f, "source", None)
    where = f" (in {src.function}())" if src is not None and src.function and not src.function.startswith("<") else ""
    parts = [str(f.title).rstrip(".") + where]
    fig = figure_text(f)
    if fig:
        parts.append(fig)
    fixes = shown_fixes(f, all_frameworks=False)
    if fixes:
        parts.append("Fix: " + first_line(fixes[0][1].text))
    return ". ".join(p for p in parts if p)


def split(analysis: Analysis, source_root: Any = None) -> tuple[list[tuple[Any, str]], list[Any]]:
    """(findings with the checkout path of their line, findings without one), in the report's order."""
    root = SourceRoot(source_root)
    located, unlocated = [], []
    for f in analysis.findings:
        path = root.path_of(getattr(f, "source", None))
        if path is None or "##[" in path:  # "##[" cannot be escaped in a property (no % form for it): not named
            unlocated.append(f)
        else:
            located.append((f, path))
    return located, unlocated


def annotation(f: Any, path: str) -> str:
    """One workflow command for a finding on ``path``:``f.source.line``."""
    cmd = COMMANDS.get(f.severity.value, "warning")
    props = [
        f"file={escape.workflow_property(path, 1000)}",
        f"line={int(f.source.line)}",
        f"title={escape.workflow_property(f'{f.code} {f.rule_name}'.strip(), 200)}",
    ]
    return f"::{cmd} {','.join(props)}::{escape.workflow_data(annotation_text(f), 1500)}"


def render(analysis: Analysis, source_root: Any = None, unlocated_to_summary: bool = False, **_: Any) -> str:
    """The annotations, then one plain line per finding without a line of the checkout (or, when the command line
    wrote those to the job summary, one line saying so)."""
    located, unlocated = split(analysis, source_root)
    lines = [annotation(f, path) for f, path in located]
    if unlocated and unlocated_to_summary:
        lines.append(f"traceinsight: {len(unlocated)} finding(s) without a line of this repository's code: {SUMMARY_NOTE}.")
    else:
        for f in unlocated:
            lines.append(f"traceinsight: {escape.workflow_log(f'{f.code} {f.severity.value}: {annotation_text(f)}', 1500)}")
    if not analysis.findings:
        lines.append(f"traceinsight: no findings from {len(analysis.rules_run)} rule(s).")
    return "\n".join(lines) + "\n"


def summary(analysis: Analysis, source_root: Any = None) -> str:
    """Markdown for the job summary: the findings no annotation could carry ("" when every finding has one)."""
    _, unlocated = split(analysis, source_root)
    if not unlocated:
        return ""
    esc = escape.markdown
    out = ["### traceinsight: findings without a line of this repository's code", ""]
    out += ["| code | severity | finding |", "|---|---|---|"]
    for f in unlocated:
        out.append(f"| `{esc(f.code, 20)}` | {f.severity.value} | {esc(annotation_text(f), 600)} |")
    return "\n".join(out) + "\n\n"
