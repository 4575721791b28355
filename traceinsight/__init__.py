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

from traceinsight.vocab.lazy import attributes as _lazy_attributes

import sys as _sys
from importlib.util import module_from_spec as _module_from_spec, spec_from_file_location as _spec_from_file_location
from pathlib import Path as _Path

from traceinsight.vocab.version import __version__


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

#: The public API, imported on first use: ``import traceinsight.cli.app`` (or any submodule) pays only for what that
#: run needs, not for every reader and renderer.
_API: dict[str, str] = {
    "Config": "pipeline.config",
    "Analysis": "model.analysis",
    "analyze": "pipeline.engine",
    "TraceInsightError": "vocab.errors",
    "TraceReadError": "vocab.errors",
    "UnknownFormatError": "vocab.errors",
    "load": "ingest",
    "CATEGORIES": "rule_api",
    "Context": "rule_api",
    "Finding": "rule_api",
    "Fix": "rule_api",
    "Instance": "rule_api",
    "Location": "rule_api",
    "Option": "rule_api",
    "Rule": "rule_api",
    "Severity": "rule_api",
    "CrossRankRule": "rule_api_job",
    "JobContext": "rule_api_job",
    "Timeline": "model.timeline",
    "TraceMeta": "model.timeline",
}


__getattr__ = _lazy_attributes(__name__, globals(), _API)


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])


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
    from traceinsight.delta import diff as _diff

    return _diff(base, head, **kwargs)


def native_status() -> dict[str, bool]:
    """Which formats load through a native accelerator here (False: the pure-Python path, same results, slower)."""
    from traceinsight.vocab import native

    return {label: native.built(fmt) is not None for fmt, label in _NATIVE.items()}
