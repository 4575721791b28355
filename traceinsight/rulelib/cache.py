"""Where the rule library keeps a shared query's answer: the analysis' memo slot of that name (``Views.memo``, which
the analysis' store ``Derived`` answers for)."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

T = TypeVar("T")


def memo(views: Any, key: str, build: Callable[[], T]) -> T:
    """``views.memo(key, build)``: the store (``ctx.views``) or plain views (a test, a notebook) keep the answer
    under ``key`` for every rule that asks after the first."""
    return views.memo(key, build)
