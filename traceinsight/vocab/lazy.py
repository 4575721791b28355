"""Package attributes imported on first use, so importing a package costs only what a run asks of it.

``traceinsight`` exposes its API this way (``import traceinsight.cli.app`` loads no reader or renderer it does not
use), each format package its reader (detection needs only ``sniff``), and ``traceinsight.job`` its machinery.
Floor 0: imports nothing from the package.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Callable


def attributes(package: str, namespace: dict[str, Any], table: dict[str, "str | tuple[str, str]"]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``table`` maps a public name to the submodule defining it (or to
    ``(submodule, name there)`` when the names differ); the value is imported on first access and kept in
    ``namespace`` (the package's globals), so later reads are plain."""

    def __getattr__(name: str) -> Any:
        target = table.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        mod, attr = target if isinstance(target, tuple) else (target, name)
        value = getattr(import_module(f".{mod}", package), attr)
        namespace[name] = value
        return value

    return __getattr__
