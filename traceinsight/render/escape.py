"""One escape function per output medium: every renderer, single-trace and whole-job, goes through these.

Trace strings (kernel, op, GPU, thread and file names, messages that quote them, baseline titles) are untrusted.
What makes a string inert depends on where it lands, so each medium has exactly one function here and no renderer
writes its own:

* ``markdown``: a pull-request comment or job summary. Invisible characters are dropped, controls shown as visible
  escapes, ``& < >`` become entities (no ``<img>`` beacon, no HTML), every Markdown metacharacter is
  backslash-escaped (no link, image, heading, list, table cell break, code span or emphasis), ``@`` becomes an
  entity (no mention), and the result is one bounded line.
* ``terminal``: plain text for a terminal or CI log (``sanitize.terminal``: controls, escape sequences, bidi and
  zero-width characters as visible ``\\x1b``-style escapes, one bounded line).
* ``rich``: ``terminal`` plus rich's markup escape, for text printed through a rich console.
* HTML is Jinja's autoescape in the templates; ``html`` is the same escape for the few places that build HTML by
  hand.
"""

from __future__ import annotations

import html as _html
import re
from typing import Any

from ..sanitize import markdown_text, rich as _rich, terminal as _terminal

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|~>-])")
#: What GitHub turns into a link without any syntax: ``scheme://`` and ``www.``.
_ORDERED = re.compile(r"^(\s*\d+)([.)])")
_AUTOLINK = re.compile(r"(?i)(?<=[a-z])(:)(?=//)|(?<=\bwww)(\.)")


def markdown(value: Any, limit: int = 200) -> str:
    """Untrusted text made inert in Markdown, also inside a table cell or at the start of a line."""
    s = _terminal(markdown_text(value), limit)  # invisible characters dropped, controls escaped, one line, bounded
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD_SPECIAL.sub(r"\\\1", s)
    s = _AUTOLINK.sub(lambda m: "\\" + m.group(), s)
    s = _ORDERED.sub(r"\1\\\2", s)  # "1. x" at the start would open a numbered list
    return s.replace("@", "&#64;")


def terminal(value: Any, limit: int | None = 200) -> str:
    """Untrusted text for a terminal or log, one line (see ``sanitize.terminal``)."""
    return _terminal(value, limit)


def rich(value: Any, limit: int | None = None) -> str:
    """Untrusted text for a rich markup template."""
    return _rich(value, limit)


def html(value: Any, limit: int | None = None) -> str:
    """Untrusted text for HTML built outside a Jinja template (attribute-safe: quotes escaped too)."""
    s = "" if value is None else str(value)
    if limit is not None and len(s) > limit:
        s = s[: max(limit - 1, 0)] + "…"
    return _html.escape(s, quote=True)
