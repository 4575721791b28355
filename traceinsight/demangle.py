"""Readable names for mangled C++ kernel symbols (``_Z23RNN_blockPersist_fp_GRU...``).

Demangling runs once per distinct name, through binutils' ``c++filt`` in a single batch when it is on PATH;
without it the raw name stays (rules match substrings, so they still work) and nothing fails.
"""

from __future__ import annotations

import shutil
import subprocess
from functools import lru_cache

import pandas as pd


@lru_cache(maxsize=1)
def _cxxfilt() -> str | None:
    return shutil.which("c++filt")


def demangle_many(names: list[str]) -> dict[str, str]:
    """Map each mangled name in ``names`` to its demangled form (names that are not mangled are left out)."""
    mangled = [n for n in names if isinstance(n, str) and n.startswith("_Z") and "\n" not in n]
    tool = _cxxfilt()
    if not mangled or tool is None:
        return {}
    try:
        proc = subprocess.run([tool], input="\n".join(mangled) + "\n", capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return {}
    out = proc.stdout.split("\n")
    if proc.returncode != 0 or len(out) < len(mangled):
        return {}
    return {m: d for m, d in zip(mangled, out) if d and d != m}


def demangled_categories(raw: pd.Categorical) -> pd.Categorical:
    """The same categorical with mangled categories replaced by readable names (codes unchanged)."""
    cats = list(raw.categories)
    mapping = demangle_many([str(c) for c in cats])
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
