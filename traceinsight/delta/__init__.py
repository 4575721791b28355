"""``traceinsight diff BASE HEAD`` (``traceinsight.diff``): did the change make the step faster, and which part of the time ledger moved.

``diff(a, b)`` takes two traces, two JSON reports (``analyze -f json``), two ``Analysis`` objects or any mix, and
returns a ``Diff``: its ``data`` is the documented JSON document (docs/diff-json.md), ``verdict`` one of
``faster``, ``slower``, ``no measurable change``, ``inconclusive`` (too few steps), ``not comparable``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from traceinsight.delta.compare import FAIL, FASTER, INCONCLUSIVE, NO_CHANGE, NOT_COMPARABLE, PASS, SCHEMA_VERSION, SLOWER, compare
from traceinsight.pipeline.config import check_fail_if_slower
from traceinsight.delta.side import Side, check, from_analysis, load_side

__all__ = ["Diff", "diff", "FASTER", "SLOWER", "NO_CHANGE", "INCONCLUSIVE", "NOT_COMPARABLE", "PASS", "FAIL", "SCHEMA_VERSION"]


@dataclass
class Diff:
    """The comparison of BASE and HEAD: ``data`` is the JSON document, the rest reads it."""

    data: dict[str, Any]

    @property
    def verdict(self) -> str:
        return self.data["verdict"]

    @property
    def sentence(self) -> str:
        return self.data["sentence"]

    @property
    def gate(self) -> str | None:
        g = self.data.get("gate")
        return None if g is None else g["result"]

    def render(self, fmt: str = "text", **kwargs: Any) -> str:
        from traceinsight.delta.render import render

        return render(self.data, fmt, **kwargs)

    def _repr_html_(self) -> str:
        """Jupyter shows the HTML diff in a sandboxed frame: the page's own stylesheet stays out of the notebook."""
        from html import escape

        return f'<iframe sandbox srcdoc="{escape(self.render("html"), quote=True)}" style="width:100%;height:900px;border:0" title="traceinsight diff"></iframe>'


    def __repr__(self) -> str:
        return f"Diff({self.verdict!r}: {self.sentence})"


def _side(x: Any, **kwargs: Any) -> Side:
    if isinstance(x, Side):
        return x
    if hasattr(x, "findings") and hasattr(x, "timeline"):  # an Analysis
        return from_analysis(x)
    if isinstance(x, dict):
        label = str((x.get("trace") or {}).get("path") or "report")
        check(x, label)
        return Side(x, label)
    return load_side(x, **kwargs)


def diff(base: "str | os.PathLike[str] | Any", head: "str | os.PathLike[str] | Any", *, fail_if_slower: float | None = None, same_workload: bool = False, **analyze_kwargs: Any) -> Diff:
    """Compare ``base`` with ``head`` (paths to traces or reports, report dicts, or Analysis objects).

    ``fail_if_slower`` (%) adds the gate's result (``Diff.gate``: pass, fail, inconclusive, not comparable);
    ``analyze_kwargs`` go to ``traceinsight.analyze`` for sides given as traces (e.g. ``trace_format``).
    """
    if fail_if_slower is not None:
        fail_if_slower = check_fail_if_slower(fail_if_slower)
    return Diff(compare(_side(base, **analyze_kwargs), _side(head, **analyze_kwargs), fail_if_slower=fail_if_slower, same_workload=same_workload))
