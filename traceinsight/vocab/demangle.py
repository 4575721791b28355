"""Readable names for mangled C++ kernel symbols (``_Z23RNN_blockPersist_fp_GRU...``).

Demangling runs once per distinct name, through binutils' ``c++filt`` in a single batch when it is on PATH;
without it the raw name stays (rules match substrings, so they still work) and nothing fails.

The batch is one name per line, so the answer is only trusted one-to-one: a name goes to c++filt only when it is
made of the characters a mangled symbol uses (no CR, LF, NUL, space or anything a line-based tool could split or
join on), the exchange is bytes (no newline translation), and the reply must have exactly one line per name. Any
mismatch keeps every raw name, with a warning, rather than giving a kernel another kernel's name.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import lru_cache

import pandas as pd

#: What an Itanium-mangled symbol may hold: identifiers, digits, and the "." / "$" of clone suffixes (".cold").
_MANGLED = re.compile(r"_Z[A-Za-z0-9_.$]+")

MISMATCH_WARNING = "c++filt answered out of step with the names it was given; kernel names are kept mangled"


@lru_cache(maxsize=1)
def _cxxfilt() -> str | None:
    return shutil.which("c++filt")


def demangle_many(names: list[str], warnings: list[str] | None = None) -> dict[str, str]:
    """Map each mangled name in ``names`` to its demangled form (names that are not mangled are left out)."""
    mangled = sorted({n for n in names if isinstance(n, str) and _MANGLED.fullmatch(n)})
    tool = _cxxfilt()
    if not mangled or tool is None:
        return {}
    payload = "\n".join(mangled).encode("ascii") + b"\n"
    try:
        proc = subprocess.run([tool], input=payload, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return {}
    if proc.returncode != 0:
        return {}
    out = proc.stdout.split(b"\n")
    if out and out[-1] == b"":
        out.pop()
    if len(out) != len(mangled):
        if warnings is not None:
            warnings.append(MISMATCH_WARNING)
        return {}
    result = {}
    for m, d in zip(mangled, out):
        text = d.decode("utf-8", "replace")
        if text and text != m:
            result[m] = text
    return result


def demangled_categories(raw: pd.Categorical, warnings: list[str] | None = None) -> pd.Categorical:
    """The same categorical with mangled categories replaced by readable names (codes unchanged)."""
    cats = list(raw.categories)
    mapping = demangle_many([str(c) for c in cats], warnings)
    if not mapping:
        return raw
    new = [mapping.get(str(c), str(c)) for c in cats]
    # Two mangled names may demangle to the same text; keep them apart so categories stay unique.
    seen: dict[str, int] = {}
    for i, n in enumerate(new):
        if n in seen:
            new[i] = cats[i]
        seen[n] = i
    return pd.Categorical.from_codes(raw.codes, categories=new)
