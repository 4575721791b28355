"""traceinsight: why the GPU sits idle, from PyTorch, TensorFlow and Nsight Systems traces.

Python API::

    import traceinsight
    tl = traceinsight.load("trace.json.gz")          # -> Timeline (one pandas DataFrame + metadata)
    analysis = traceinsight.analyze(tl)              # -> Analysis (summary metrics + findings)
    for f in analysis.findings:
        print(f.code, f.title, f.impact_ns)
"""

from __future__ import annotations

__version__ = "0.1.0"  # the one home of the version: pyproject.toml reads it from here

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
    "load",
    "native_status",
]

#: The formats an optional C accelerator speeds up (built at install time where a compiler exists).
_NATIVE = {"pytorch": "PyTorch Profiler JSON", "tensorflow-xplane": "TensorFlow XPlane"}


def native_status() -> dict[str, bool]:
    """Which formats load through a native accelerator here (False: the pure-Python path, same results, slower)."""
    from .ingest import native

    return {label: native.built(fmt) is not None for fmt, label in _NATIVE.items()}
