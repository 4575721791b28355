"""Where the rule library keeps a shared query's answer: the analysis' ``Derived.memo`` slot of that name."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

T = TypeVar("T")


def memo(views: Any, key: str, build: Callable[[], T]) -> T:
    """``views.memo(key, build)`` on the analysis' store (``traceinsight.derive.derived.Derived``); plain views (a test, a
    notebook) have no store, and the answer is computed each time."""
    keep = getattr(views, "memo", None)
    return keep(key, build) if keep is not None else build()
