"""Renderers: each turns an ``Analysis`` into one document, reading only the Analysis (findings, summary, verdict,
ledger, the derived views for the timeline drawing) and the vocabularies (``traceinsight.vocab.buckets``).

``FORMATS`` is the one list of output formats: the command line's ``--format`` choices, the file suffixes in an
output folder, the ``-o`` extensions that pick a format, and the module that renders each all come from it. A new
format is one module here with ``render(analysis, **options) -> str`` and one line in ``FORMATS``.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

from traceinsight.model.analysis import Analysis


class OutputFormat(NamedTuple):
    module: str  # the renderer, a module of traceinsight.render
    suffix: str  # the file suffix when several formats fill an output folder
    extensions: tuple[str, ...] = ()  # ``-o`` file extensions that choose this format
    binary: bool = False  # rendered as bytes (``render_bytes``), always to a file


FORMATS: dict[str, OutputFormat] = {
    "text": OutputFormat("text", "txt", (".txt",)),
    "json": OutputFormat("json_report", "json", (".json",)),
    "md": OutputFormat("markdown", "md", (".md",)),
    "html": OutputFormat("html", "html", (".html", ".htm")),
    # the trace and the findings as Chrome-trace JSON (gzip) for ui.perfetto.dev / chrome://tracing
    "perfetto": OutputFormat("perfetto", "perfetto.json.gz", binary=True),
    # GitHub Actions workflow annotations on the user's own lines (``--source-root``), for a CI log
    "github": OutputFormat("github", "github.txt"),
    # SARIF 2.1.0 for code scanning: the rule table and a result per finding
    "sarif": OutputFormat("sarif", "sarif", (".sarif",)),
}


def renderer(fmt: str):
    """The module that renders ``fmt`` (imported now: a run imports only the renderers it was asked for)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown output format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return importlib.import_module(f"{__name__}.{FORMATS[fmt].module}")


def render(analysis: Analysis, fmt: str, **kwargs) -> "str | bytes":
    """``fmt`` rendered: text for the text formats, bytes for the binary ones."""
    mod = renderer(fmt)
    return mod.render_bytes(analysis) if FORMATS[fmt].binary else mod.render(analysis, **kwargs)
