"""Helpers every document renderer shares: making untrusted trace strings displayable, and formatting cells.

Kernel and op names come straight from the trace file, so they can hold anything: markup, control characters,
bidi overrides that visually reorder the text around them, megabyte-long template names. Renderers escape for
their own syntax; this module removes what no syntax can show safely and bounds the length.
"""

from __future__ import annotations

import re

from traceinsight.render.escape import terminal

import math
from typing import Any

import numpy as np

from traceinsight.vocab.units import fmt_ns
from traceinsight.model.serialize import smallest_first  # noqa: F401  (the timeline drawing keeps the longest too)

def clean(value: Any, limit: int = 200) -> str:
    """A single-line, length-bounded, visibly-escaped version of an untrusted string (``sanitize.terminal``)."""
    return terminal(value, limit)


_UNIT_NS = {"_ns": 1, "_us": 1e3, "_ms": 1e6, "_s": 1e9}


def time_scale(col: str) -> float | None:
    """Nanoseconds per unit of a time column named like ``start_ns`` / ``duration_us`` / ``gap_ms``, else None."""
    c = str(col).lower()
    for suffix, scale in _UNIT_NS.items():
        if c.endswith(suffix):
            return scale
    return None


_PCT = ("_pct", "_percent")


def column_label(col: str) -> str:
    """The header of an evidence column or metric: its name without the unit suffix, because :func:`format_cell`
    writes the unit into every cell (``start_ms`` -> ``start``, shown as "751.0 µs", not "0.751" or a mislabelled
    "751.0 µs" under START_MS); percentages keep a "%"."""
    c = str(col)
    low = c.lower()
    if time_scale(c) is not None:
        return c[: c.rfind("_")] or c
    for suffix in _PCT:
        if low.endswith(suffix):
            return c[: -len(suffix)] + " %"
    return c


#: Time columns that hold a point in time (not a duration): neighbours differ by far less than their size, so they
#: keep microsecond precision ("1,058.431 ms") where a duration is rounded to 3 significant digits.
_INSTANT = re.compile(r"(^|_)(start|end|at|first|last|begin|ts|time_of)(_|$)")


def column_labels(cols: list[str]) -> list[str]:
    """:func:`column_label` of each column, made unique: a time column whose bare name is another column's
    (``step`` and ``step_ms``) is called "``step`` time"."""
    bare = [column_label(c) for c in cols]
    return [f"{b} time" if time_scale(c) is not None and bare.count(b) > 1 else b for c, b in zip(cols, bare)]


def format_cell(col: str, value: Any, limit: int = 160) -> tuple[str, Any]:
    """(display text, sort key) for one evidence cell; times in *_ns columns are shown humanly."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (ValueError, AttributeError):
            pass
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "", ""
    if isinstance(value, bool):
        return ("yes" if value else "no"), int(value)
    if isinstance(value, (int, float)):
        scale = time_scale(col)
        if scale is not None:
            ns = value * scale
            if _INSTANT.search(str(col).lower()) and abs(ns) >= 1e6:
                return f"{ns / 1e6:,.3f} ms", value
            return fmt_ns(ns), value
        if str(col).lower().endswith(("pct", "_percent", "%")):
            return f"{value:.1f}%", value
        if isinstance(value, float):
            return (f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"), value
        return f"{value:,}" if abs(value) >= 10000 else str(value), value
    text = clean(value, limit)
    return text, text.lower()


def baseline_tag(analysis: Any, f: Any) -> str:
    """"new", "worse (was 3.1% of span)" or "" for a finding, when the run was compared with a baseline report."""
    cmp = getattr(analysis, "baseline", None)
    if cmp is None:
        return ""
    status = cmp.of(f)
    if status == "new":
        return "new"
    if status == "worse":
        return f"worse (was {cmp.before_pct.get(f.fingerprint, 0.0):.1f}% of span)"
    return ""


def baseline_sentence(analysis: Any) -> str | None:
    cmp = getattr(analysis, "baseline", None)
    return None if cmp is None else cmp.sentence()


#: A GPU window under this share of the trace's span is named beside the busy % (the % is of that window: 11 µs of
#: work in a 34 ms capture reads "100 %" otherwise).
SLIVER = 0.05

#: How each kind of saving (``traceinsight.assess.savings``) is worded next to its figure.
SAVING_LABELS = {"idle": "est. saved", "modelled": "modelled speed-up", "none": ""}


def saving_label(f: Any) -> str:
    """"est. saved" for GPU idle a finding claims, "modelled speed-up" for an assumed speed-up of busy work."""
    return SAVING_LABELS.get(getattr(f, "saving_kind", "") or "idle", "est. saved")


def share_text(f: Any) -> str:
    """"12.3 % of GPU window": the figure's share of the steady-state GPU window the finding is about."""
    share = getattr(f, "share_pct", None)
    return "" if share is None else f"{share:.1f} % of GPU window"


def shown_ns(f: Any) -> int:
    """The figure every format shows for a finding (``traceinsight.assess.savings``): its saving, else the rule's estimate."""
    saving = getattr(f, "saving_ns", None)
    return int(saving if saving is not None else f.impact_ns)


def figure_text(f: Any) -> str:
    """The one line every format shows for a finding's figure: "est. saved 59.38 ms · 90.3 % of GPU window"."""
    label = saving_label(f)
    if not label:
        return ""
    share = share_text(f)
    return f"{label} {fmt_ns(shown_ns(f))}" + (f" · {share}" if share else "")


def cause_of(analysis: Any, f: Any) -> Any:
    """The root-cause finding that explains ``f`` (shown with it, as its symptom), or None."""
    fp = f.metrics.get("explained_by")
    if not fp:
        return None
    return next((c for c in analysis.findings if c.fingerprint == fp), None)


def what_if_text(f: Any) -> str:
    """The what-if line: predicted step, and why it and the claimed figure differ when they do."""
    from traceinsight.derive.whatif import format_what_if

    w = getattr(f, "what_if", None)
    text = format_what_if(w)
    if not text:
        return ""
    why = (w or {}).get("why") or f.metrics.get("what_if_note") or ""
    return text + (f" ({why})" if why else "")


def shown_fixes(f: Any, all_frameworks: bool) -> list[tuple[str, Any]]:
    """The fixes a format shows: every framework's (HTML, JSON) or only the trace's own, the first one
    (terminal, Markdown: a PR comment should not carry three frameworks' advice)."""
    items = [(fw, fx) for fw, fx in f.fixes.items() if fx.text.strip()]
    return items if all_frameworks else items[:1]
