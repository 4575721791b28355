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
* ``workflow_data`` / ``workflow_property``: the message and the properties of a GitHub Actions workflow command
  (``::warning file=…,title=…::message``). The runner reads every line of a step's output as a possible command:
  a line that starts (after blanks) with ``::`` is one (``::set-env``, ``::add-mask``, ``::stop-commands`` that
  silences every later annotation), and so is ``##[name]`` anywhere in a line (the old syntax). Trace text is
  ``terminal``'s one visible line (no line feed or carriage return can start a line of its own), then escaped by
  GitHub's own rules: ``%`` as ``%25`` (so ``%0A`` in a name stays the text ``%0A``), CR/LF as ``%0D``/``%0A``,
  and in properties also ``:`` as ``%3A`` and ``,`` as ``%2C`` (a name cannot end the properties or add one);
  ``##[`` is broken as ``# #[``. Every workflow line the renderers print starts with text of their own.
* HTML is Jinja's autoescape in the templates; ``html`` is the same escape for the few places that build HTML by
  hand.
"""

from __future__ import annotations

import html as _html
import re
from typing import Any

from traceinsight.vocab.sanitize import markdown_text, rich as _rich, terminal as _terminal

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


def _workflow(value: Any, limit: int | None) -> str:
    s = _terminal(value, limit)  # one line: controls (CR, LF too) as visible escapes, bidi/zero-width visible
    s = s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return s.replace("##[", "# #[")


def workflow_data(value: Any, limit: int | None = 1000) -> str:
    """Untrusted text as the message of a GitHub workflow command (after its ``::``), or on a line of its own that
    starts with text of ours: one line, ``%``/CR/LF escaped by GitHub's rules, no ``##[`` command."""
    return _workflow(value, limit)


def workflow_log(value: Any, limit: int | None = 1000) -> str:
    """Untrusted text on a plain line of a workflow log, after text of ours (the runner shows it as it is, so no
    ``%`` escape): one line, no ``##[`` command."""
    return _terminal(value, limit).replace("##[", "# #[")


_COMMAND_LINE = re.compile(r"^([ \t]*):(?=:)", re.M)


def log_document(text: str) -> str:
    """A whole report for a terminal or CI log (the text formats) with no line a runner reads as a workflow command:
    a line that starts with ``::`` after blanks (a trace name wrapped to the start of a line: ``::stop-commands``)
    has its first colon written ``\\x3a``, and ``##[`` is written ``#\\x23[``, in ``terminal``'s visible escape form
    (a real backslash there is doubled, so the escape reads as one). Reports without either are unchanged."""
    if "::" not in text and "##[" not in text:
        return text
    return _COMMAND_LINE.sub(lambda m: m.group(1) + "\\x3a", text).replace("##[", "#\\x23[")


def workflow_property(value: Any, limit: int | None = 300) -> str:
    """Untrusted text as a property value of a workflow command (``file=``, ``title=``): ``workflow_data`` plus
    ``:`` and ``,``, so it can neither end the property list nor start another property."""
    return _workflow(value, limit).replace(":", "%3A").replace(",", "%2C")
