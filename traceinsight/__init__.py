"""traceinsight: why the GPU sits idle, from PyTorch, TensorFlow and Nsight Systems traces.

Python API::

    import traceinsight
    tl = traceinsight.load("trace.json.gz")          # -> Timeline (one pandas DataFrame + metadata)
    analysis = traceinsight.analyze(tl)              # -> Analysis (summary metrics + findings)
    change = traceinsight.diff("main.json", "pr.pt.trace.json")  # -> Diff: did the step get faster, and why
    for f in analysis.findings:
        print(f.code, f.title, f.impact_ns)
"""

from __future__ import annotations

import sys as _sys
from importlib.util import module_from_spec as _module_from_spec, spec_from_file_location as _spec_from_file_location
from pathlib import Path as _Path

__version__ = "0.1.0"  # the one home of the version: pyproject.toml reads it from here


def _checkout_rules() -> None:
    """Make ``traceinsight.rules`` importable from a source checkout.

    The wheel ships the top-level ``rules/`` folder as ``traceinsight.rules`` (pyproject's package-dir). When this
    package is imported from a checkout instead (a notebook or ``python -c`` started there, or an editable install
    seen from another worktree) the folder sits beside the package, not inside it, so it is bound here to the same
    name. Only a checkout qualifies: the folder above this package must hold this project's pyproject.toml.
    """
    root = _Path(__file__).resolve().parent.parent
    rules = root / "rules" / "__init__.py"
    if "traceinsight.rules" in _sys.modules or not rules.is_file() or not (root / "pyproject.toml").is_file():
        return
    spec = _spec_from_file_location("traceinsight.rules", rules, submodule_search_locations=[str(rules.parent)])
    if spec is None or spec.loader is None:  # pragma: no cover - a file location always has a loader
        return
    module = _module_from_spec(spec)
    _sys.modules["traceinsight.rules"] = module
    spec.loader.exec_module(module)
    globals()["rules"] = module  # as the import system binds a loaded submodule on its parent


_checkout_rules()

from .config import Config
from .engine import Analysis, analyze
from .errors import TraceInsightError, TraceReadError, UnknownFormatError
from .ingest import load
from .rule_api import CATEGORIES, Context, Finding, Fix, Instance, Location, Option, Rule, Severity
from .rule_api_job import CrossRankRule, JobContext
from .timeline import Timeline, TraceMeta

__all__ = [
    "CATEGORIES",
    "Analysis",
    "Config",
    "Context",
    "CrossRankRule",
    "Finding",
    "Fix",
    "JobContext",
    "Instance",
    "Location",
    "Option",
    "Rule",
    "Severity",
    "Timeline",
    "TraceMeta",
    "TraceInsightError",
    "TraceReadError",
    "UnknownFormatError",
    "analyze",
    "diff",
    "load",
    "native_status",
]

#: The formats an optional C accelerator speeds up (built at install time where a compiler exists).
_NATIVE = {"pytorch": "PyTorch Profiler JSON", "tensorflow-xplane": "TensorFlow XPlane"}


def diff(base, head, **kwargs):
    """Compare two runs (traces, folders of ranks, JSON reports or Analysis objects): ``traceinsight.delta.diff``.

    Returns a ``Diff``: ``.verdict`` (faster, slower, no measurable change, inconclusive, not comparable),
    ``.sentence``, ``.data`` (the JSON document of docs/diff-json.md), ``.render(fmt)``.
    """
    from .delta import diff as _diff

    return _diff(base, head, **kwargs)


def native_status() -> dict[str, bool]:
    """Which formats load through a native accelerator here (False: the pure-Python path, same results, slower)."""
    from .ingest import native

    return {label: native.built(fmt) is not None for fmt, label in _NATIVE.items()}
