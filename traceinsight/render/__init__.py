"""Renderers: each turns an ``Analysis`` into one document, reading only the Analysis (findings, summary, verdict,
ledger, the derived views for the timeline drawing) and the vocabularies (``traceinsight.vocab.buckets``).

``FORMATS`` is the one list of output formats for every product: a single trace (``analyze``), a whole job
(``analyze`` on a folder of ranks) and a diff (``diff``), and the framework hooks and the MCP server. The command
lines' ``--format`` choices, the file suffixes in an output folder, the ``-o`` extensions that pick a format, which
products a format has, and the function that renders each product all come from it. A new format is one module
with a function per product and one line here (docs/architecture.md, "a renderer author works ...").

Each renderer is named by its dotted path (``module:function``) and imported when asked for, so a run imports only
the renderers it uses, and this floor names the job's and the diff's renderers (floors 7 and 8) without importing
them. ``render`` passes a renderer the options it names in its signature and no others, so a caller hands every
option it has (width, the HTML file's name, the source root) and each format takes what it uses.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, NamedTuple

#: What a format can render: one trace's ``Analysis``, a whole job's ``JobAnalysis``, a diff's document (a dict).
PRODUCTS = ("single", "job", "diff")
#: How the products are called in messages ("choose one of ... for a whole job").
PRODUCT_WORDS = {"single": "one trace", "job": "a whole job", "diff": "a diff"}


class OutputFormat(NamedTuple):
    suffix: str  # the file suffix when several formats fill an output folder
    renderers: dict[str, str]  # product -> "module:function" that renders it; a product not here is not offered
    extensions: tuple[str, ...] = ()  # ``-o`` file extensions that choose this format
    binary: bool = False  # rendered as bytes, always to a file
    note: str = ""  # what ``--help`` says after the name ("needs -o")


_R = "traceinsight.render."
_JOB = "traceinsight.job.report:"
_DIFF = "traceinsight.delta.render:"

FORMATS: dict[str, OutputFormat] = {
    "text": OutputFormat("txt", {"single": _R + "text:render", "job": _JOB + "render_text", "diff": _DIFF + "render_text"}, (".txt",)),
    "json": OutputFormat("json", {"single": _R + "json_report:render", "job": _JOB + "render_json", "diff": _DIFF + "render_json"}, (".json",)),
    "md": OutputFormat("md", {"single": _R + "markdown:render", "job": _JOB + "render_markdown", "diff": _DIFF + "render_md"}, (".md", ".markdown")),
    "html": OutputFormat("html", {"single": _R + "html:render", "job": "traceinsight.job.html:render_html", "diff": _DIFF + "render_html"}, (".html", ".htm")),
    # the trace and the findings as Chrome-trace JSON (gzip) for ui.perfetto.dev / chrome://tracing
    "perfetto": OutputFormat("perfetto.json.gz", {"single": _R + "perfetto:render_bytes"}, binary=True, note="needs -o"),
    # GitHub Actions workflow annotations on the user's own lines (``--source-root``), for a CI log
    "github": OutputFormat("github.txt", {"single": _R + "github:render"}, note="workflow annotations on your code's lines"),
    # SARIF 2.1.0 for code scanning: the rule table and a result per finding
    "sarif": OutputFormat("sarif", {"single": _R + "sarif:render"}, (".sarif",), note="code scanning"),
}


def names(product: str = "single") -> list[str]:
    """The formats ``product`` is offered in, in ``FORMATS`` order."""
    return [name for name, f in FORMATS.items() if product in f.renderers]


def phrase(product: str = "single", notes: bool = False) -> str:
    """The formats of ``product`` as the command line's help and messages say them: "text, json, md or html"."""
    said = [name + (f" ({FORMATS[name].note})" if notes and FORMATS[name].note else "") for name in names(product)]
    return said[0] if len(said) == 1 else f"{', '.join(said[:-1])} or {said[-1]}"


def suffix(fmt: str) -> str:
    """The file suffix of ``fmt`` in an output folder (``traceinsight-report.<suffix>``)."""
    return FORMATS[fmt].suffix


def for_extension(ext: str, product: str = "single") -> str | None:
    """The format an ``-o`` file extension (``.md``, any case) chooses for ``product``, or None."""
    ext = ext.lower()
    return next((name for name in names(product) if ext in FORMATS[name].extensions), None)


def renderer(fmt: str, product: str = "single") -> Callable[..., Any]:
    """The function that renders ``product`` in ``fmt`` (imported now); ValueError when there is none."""
    f = FORMATS.get(fmt)
    if f is None or product not in f.renderers:
        known = names(product)
        where = "" if f is None or product == "single" else f" for {PRODUCT_WORDS.get(product, product)}"
        raise ValueError(f"unknown output format {fmt!r}{where}; choose one of {', '.join(known)}")
    module, _, function = f.renderers[product].partition(":")
    return getattr(importlib.import_module(module), function)


def render(obj: Any, fmt: str, product: str = "single", **options: Any) -> "str | bytes":
    """``obj`` (an Analysis, a JobAnalysis or a diff document, as ``product`` says) rendered in ``fmt``: text, or
    bytes for a binary format. ``options`` the renderer does not name are left out."""
    fn = renderer(fmt, product)
    return fn(obj, **_named(fn, options))


def _named(fn: Callable[..., Any], options: dict[str, Any]) -> dict[str, Any]:
    if not options:
        return options
    params = list(inspect.signature(fn).parameters.values())[1:]
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in options.items() if k in named}
