"""Making untrusted strings safe to show: one function per destination (terminal, JSON, Markdown).

Every name in a report comes from a file someone else wrote: kernel, op, thread and file names, baseline
titles, nsys strings, messages that quote them. A terminal obeys what it prints, so a raw ESC can clear the
screen, set the window title (OSC 0), rewrite the clipboard (OSC 52) or hide text; a bidi override (U+202E)
makes a name read backwards; a zero-width character makes two different names look equal. None of that may
reach a terminal, a CI log or a pull-request comment.

Terminal form (``terminal``), chosen to be visible and unambiguous, the way Python writes a string literal:

* ``\\t``, ``\\n``, ``\\r`` for tab, line feed and carriage return (a single-line field stays on one line);
* ``\\xHH`` for every other C0 control (U+0000-U+001F), DEL and every C1 control (U+0080-U+009F): ESC is
  ``\\x1b``, CSI ``\\x9b``;
* ``\\uHHHH`` (or ``\\UHHHHHHHH``) for bidi controls (U+061C, U+200E/F, U+202A-E, U+2066-9), zero-width and
  invisible characters (U+00AD, U+034F, U+115F/U+1160, U+17B4/5, U+180E, U+200B-D, U+2060-4, U+3164, U+FEFF,
  U+FFA0, tags U+E0000-U+E007F), line/paragraph separators U+2028/9, lone surrogates (undecodable bytes) and
  non-characters;
* a backslash is doubled (``\\\\``), so a name that holds the text ``\\x1b`` never reads like an ESC.

Everything else, including ordinary non-ASCII names (CJK, accents, emoji), is kept as it is.
"""

from __future__ import annotations

import re
from typing import Any

_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_ZERO_WIDTH = "\u00ad\u034f\u115f\u1160\u17b4\u17b5\u180e\u200b-\u200d\u2060-\u2064\u3164\ufeff\uffa0\U000e0000-\U000e007f"
_CONTROLS = "\x00-\x1f\x7f-\x9f"
_OTHER = "\u2028\u2029\ud800-\udfff\ufdd0-\ufdef\ufffe\uffff"

#: Characters the terminal form escapes (the backslash is handled with them so the form stays unambiguous).
_TERMINAL = re.compile(f"[\\\\{_CONTROLS}{_BIDI}{_ZERO_WIDTH}{_OTHER}]")
#: The same, keeping line feeds (for text that is meant to span lines).
_TERMINAL_MULTI = re.compile(f"[\\\\\x00-\x09\x0b-\x1f\x7f-\x9f{_BIDI}{_ZERO_WIDTH}{_OTHER}]")
#: Invisible characters with no business in a document: stripped from Markdown.
_INVISIBLE = re.compile(f"[{_BIDI}{_ZERO_WIDTH}]")
#: Characters JSON text must not carry raw (valid JSON either way, but they reach terminals and diffs).
_JSON_RAW = re.compile(f"[\x7f-\x9f{_BIDI}{_ZERO_WIDTH}{_OTHER}]")

_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\\": "\\\\"}


def _escape_char(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _escape(m: re.Match) -> str:
    return _escape_char(m.group())


def terminal(value: Any, limit: int | None = None) -> str:
    """One line of untrusted text, safe to print on a terminal (see the module doc for the visible form).

    ``limit`` bounds the result (an ellipsis marks the cut), so a megabyte-long name cannot flood a log.
    """
    s = "" if value is None else str(value)
    if limit is not None and len(s) > limit * 4:  # no regex work on text that will be cut anyway
        s = s[: limit * 4]
    s = _TERMINAL.sub(_escape, s)
    if limit is not None and len(s) > limit:
        s = s[: max(limit - 1, 0)] + "…"
    return s


def terminal_lines(value: Any) -> str:
    """Untrusted text that may span lines: as ``terminal`` but line feeds are kept (CR LF becomes LF)."""
    s = "" if value is None else str(value)
    return _TERMINAL_MULTI.sub(_escape, s.replace("\r\n", "\n"))


def rich(value: Any, limit: int | None = None) -> str:
    """``terminal`` plus rich's markup escape, for strings embedded in a rich markup template."""
    from rich.markup import escape

    return escape(terminal(value, limit))


def markdown_text(value: Any) -> str:
    """Untrusted text for Markdown with bidi and zero-width characters removed: a document reader cannot see
    them, and they make two different names look equal or read backwards. Controls and Markdown syntax are
    escaped after this by the renderer.
    """
    s = "" if value is None else str(value)
    return _INVISIBLE.sub("", s)


def json_text(encoded: str) -> str:
    """An encoded JSON document with DEL, C1, bidi, zero-width, separator characters written as ``\\uXXXX``.

    JSON encoders already escape C0 controls; the rest is legal raw JSON but reaches terminals (``cat
    report.json``), diffs and log viewers. Outside strings JSON is pure ASCII, so every match is inside a string
    literal and the escape keeps the decoded value unchanged.
    """
    return _JSON_RAW.sub(_json_escape, encoded)


def _json_escape(m: re.Match) -> str:
    code = ord(m.group())
    if code > 0xFFFF:  # JSON needs a surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def has_unsafe(text: str) -> bool:
    """True when ``text`` holds anything ``terminal_lines`` would escape other than backslashes (for tests)."""
    return any(ch != "\\" for ch in _TERMINAL_MULTI.findall(text))


#: What ``data_text`` makes visible: controls other than tab and line feed, bidi, invisible and separator
#: characters, lone surrogates and non-characters (a backslash stays itself: the text is data, not a literal).
_DATA = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}{_ZERO_WIDTH}{_OTHER}]")


def data_text(value: Any, limit: int | None = None) -> str:
    """Untrusted text handed to a program that shows or reasons over it (an agent's client): every character a
    reader could not see, or that steers a display, written in the visible ``\\xHH`` / ``\\uHHHH`` form, line
    feeds and tabs kept (fix snippets span lines), bounded by ``limit`` like ``terminal``."""
    s = "" if value is None else str(value)
    if limit is not None and len(s) > limit * 4:
        s = s[: limit * 4]
    s = _DATA.sub(_escape, s)
    if limit is not None and len(s) > limit:
        s = s[: max(limit - 1, 0)] + "…"
    return s
