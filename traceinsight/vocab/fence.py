"""The one gate for files found inside a folder: a job folder's rank files, a TensorBoard logdir's host files, a rules
folder's modules, the rule files a configuration names.

A folder is read by listing it, and a listed name may be a link to anywhere: ``job/rank1.json -> ../../secret.json``
would pull a file the user never named into the analysis (its GPU and kernel names into the report). Every reader
that lists a folder asks ``why_outside`` before it opens an entry; the answer is the same sentence on every path.

Where a file may lead is the *allowed roots*: the MCP server's roots while it analyses (``confined``), otherwise the
folder being listed itself (the job folder for the command line and the API). A path is inside when its real path
(links resolved) is the root or under it.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from pathlib import Path
from typing import Iterable, Iterator

_ROOTS: contextvars.ContextVar[tuple[Path, ...] | None] = contextvars.ContextVar("traceinsight_roots", default=None)


@contextlib.contextmanager
def confined(roots: Iterable[str | os.PathLike]) -> Iterator[tuple[Path, ...]]:
    """Inside the block, files found in folders may lead only into ``roots`` (real paths), whatever folder is listed."""
    real = tuple(Path(os.path.realpath(r)) for r in roots)
    token = _ROOTS.set(real)
    try:
        yield real
    finally:
        _ROOTS.reset(token)


def roots() -> tuple[Path, ...] | None:
    """The roots set by ``confined``, or None outside it."""
    return _ROOTS.get()


def inside(path: str | os.PathLike, allowed: Iterable[Path]) -> bool:
    """Whether the real path of ``path`` is one of ``allowed`` (real paths) or under one."""
    try:
        real = Path(os.path.realpath(path))
    except (OSError, ValueError):
        return False
    return any(real == r or real.is_relative_to(r) for r in allowed)


def why_outside(path: str | os.PathLike, folder: str | os.PathLike, what: str = "folder") -> str | None:
    """None when ``path`` (an entry found in ``folder``) may be read, else why not (the caller writes "path: why").

    Allowed: the session's roots under ``confined``, else ``folder`` itself (``what`` names it in the message:
    "job folder", "logdir", "rules folder")."""
    scope = roots()
    if scope is None:
        scope, where = (Path(os.path.realpath(folder)),), f"the {what}"
    else:
        where = "the server's roots"
    if inside(path, scope):
        return None
    return f"a link to a file outside {where}; not read"
