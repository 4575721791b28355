"""The one switch for the C accelerators, and the one place that imports them. Floor 0: the readers and the what-if
both use it, so it sits below both.

Both scanners (kineto JSON, XSpace wire format) are optional extensions built at install time where a compiler
exists; each has a pure-Python path that gives the same timeline (the equality tests hold them to it). Setting
``TRACEINSIGHT_PURE_PYTHON=1`` switches every native path off, which is how the tests and benchmarks compare them.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

#: Set to any non-empty value to use the pure-Python readers even where the C scanners are built.
PURE_ENV = "TRACEINSIGHT_PURE_PYTHON"

#: Format -> the extension module that speeds it up (a dotted path).
MODULES: dict[str, str] = {
    "pytorch": "traceinsight.ingest.kineto._kineto_scan",
    "tensorflow-xplane": "traceinsight.ingest.xplane._wire_scan",
    "whatif": "traceinsight.derive._replay",  # not a format: the what-if replay pass (whatif.replay)
}

_cache: dict[str, ModuleType | None] = {}


def enabled() -> bool:
    """False when the environment asks for the pure-Python paths."""
    return not os.environ.get(PURE_ENV)


def built(fmt: str) -> ModuleType | None:
    """The extension module for ``fmt`` if it was built, whatever the switch says (None: not built)."""
    if fmt not in _cache:
        try:
            _cache[fmt] = importlib.import_module(MODULES[fmt])
        except ImportError:
            _cache[fmt] = None
    return _cache[fmt]


def scanner(fmt: str) -> ModuleType | None:
    """The extension module to use for ``fmt`` now: None where it is not built or switched off."""
    return built(fmt) if enabled() else None
