"""The ``traceinsight diff`` command's work: read both sides, compare, write the outputs, pick the exit code.

Kept here so ``cli.py`` only declares the options. Exit codes (errors.py, README "Exit codes"): 0 done (and the
gate passed), 1 slower than ``--fail-if-slower`` outside the noise, 2 usage, 3 unreadable input, 4 not
comparable (always, gate or not: there is no verdict to act on), 5 inconclusive under the gate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from traceinsight.vocab.errors import EXIT_INCONCLUSIVE, EXIT_NOT_COMPARABLE, EXIT_OK, EXIT_SLOWER
from traceinsight.render.outputs import DIFF_STEM, plan, refuse_inputs, write_reports  # noqa: F401  (DIFF_STEM: the outputs' file stem)
from traceinsight.delta import FAIL, INCONCLUSIVE, NOT_COMPARABLE, diff


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
    targets = plan(formats, output, "diff")
    refuse_inputs(targets, [base, head])
    d = diff(base, head, fail_if_slower=fail_if_slower, same_workload=same_workload, **analyze_kwargs)
    write_reports(d.data, targets, product="diff", say=say, tally="", width=width)
    if output is not None or formats[0] != "text":
        say(d.sentence)
    g = d.data.get("gate")
    if g is not None:
        say(f"--fail-if-slower {g['fail_if_slower_pct']:g}: {g['result']}")
    return exit_code(d.data)
