"""The ``traceinsight diff`` command's work: read both sides, compare, write the outputs, pick the exit code.

Kept here so ``cli.py`` only declares the options. Exit codes (errors.py, README "Exit codes"): 0 done (and the
gate passed), 1 slower than ``--fail-if-slower`` outside the noise, 2 usage, 3 unreadable input, 4 not
comparable (always, gate or not: there is no verdict to act on), 5 inconclusive under the gate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from traceinsight.vocab.errors import EXIT_INCONCLUSIVE, EXIT_NOT_COMPARABLE, EXIT_OK, EXIT_SLOWER, OutputError
from traceinsight.render.outputs import Target, refuse_inputs, write_file, write_stdout
from traceinsight.delta import FAIL, INCONCLUSIVE, NOT_COMPARABLE, diff

#: File stem of the outputs written into a folder when several formats are asked for.
DIFF_STEM = "traceinsight-diff"
SUFFIX = {"text": "txt", "json": "json", "md": "md", "html": "html"}


def plan(formats: list[str], output: Path | None) -> list[Target]:
    if output is None:
        return [Target(formats[0], None, None)]
    if len(formats) > 1:
        if output.exists() and not output.is_dir():
            raise OutputError(f"-o {output} is a file; several formats need a folder to write one file per format")
        html = f"{DIFF_STEM}.html" if "html" in formats else None
        return [Target(f, output / f"{DIFF_STEM}.{SUFFIX[f]}", html) for f in formats]
    if output.is_dir():
        raise OutputError(f"-o {output} is a folder; give a file name (or ask for several formats with -f to fill a folder)")
    return [Target(formats[0], output, output.with_suffix(".html").name)]


def exit_code(data: dict[str, Any]) -> int:
    if data["verdict"] == NOT_COMPARABLE:
        return EXIT_NOT_COMPARABLE
    g = data.get("gate")
    if g is None:
        return EXIT_OK
    return {FAIL: EXIT_SLOWER, INCONCLUSIVE: EXIT_INCONCLUSIVE}.get(g["result"], EXIT_OK)


def run(base: Path, head: Path, formats: list[str], output: Path | None, *, fail_if_slower: float | None,
        width: int, say: Callable[[str], None], same_workload: bool = False, **analyze_kwargs: Any) -> int:
    """Compare, write, and return the exit code; a TraceInsightError escapes to the caller's one-line handler."""
    targets = plan(formats, output)
    refuse_inputs(targets, [base, head])
    d = diff(base, head, fail_if_slower=fail_if_slower, same_workload=same_workload, **analyze_kwargs)
    for t in targets:
        text = d.render(t.fmt, **({"width": width} if t.fmt == "text" else {"html_name": t.html_name} if t.fmt == "md" else {}))
        if t.path is None:
            write_stdout(text if text.endswith("\n") else text + "\n")
        else:
            write_file(t.path, text)
            say(f"wrote {t.path}")
    if output is not None or formats[0] != "text":
        say(d.sentence)
    g = d.data.get("gate")
    if g is not None:
        say(f"--fail-if-slower {g['fail_if_slower_pct']:g}: {g['result']}")
    return exit_code(d.data)
