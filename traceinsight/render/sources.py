"""Where a finding's source line is in the checkout: the path a pull-request annotation or a code-scanning result
names, relative to the source root (``--source-root``, the working directory by default), or nothing.

A trace records a file as the profiled program saw it: ``/home/me/proj/train.py`` on the machine that recorded
it, ``train.py`` relative to where it ran, ``torch/nn/modules/module.py`` for a library (the profiler strips the
site-packages prefix). The checkout CI runs in is another folder on another machine. So a recorded file is
looked for under the root: the path below the root when it was recorded there, else the longest tail of it that
names a regular file under the root (``/home/me/proj/train.py`` -> ``train.py`` or ``proj/train.py``).

Never named: a file that is not under the root once links are resolved (a link out of the checkout), a library
or interpreter frame (``rulelib.usercode`` keeps only the user's own frames; site-packages under the root, a
virtual environment in the checkout, is refused here again), a path with ``..``, control characters or an
absurd length. A finding whose file is none of the checkout's goes to the job summary instead: an annotation on
a file the pull request does not have would show nowhere.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..finding import SourceLine

#: Path parts that are never the user's code, even inside the checkout (a virtual environment, caches).
_NOT_OURS = re.compile(r"^(site-packages|dist-packages|\.venv|venv|\.tox|\.nox|__pycache__|\.git)$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
MAX_PATH_CHARS = 4096
MAX_PARTS = 64


class SourceRoot:
    """The checkout findings' files are looked for in; each recorded file is looked up once."""

    def __init__(self, root: "str | os.PathLike[str] | None" = None) -> None:
        self.root = Path(os.path.realpath(root if root is not None else os.getcwd()))
        self._seen: dict[str, str | None] = {}

    def path_of(self, source: SourceLine | None) -> str | None:
        """``source``'s file as a POSIX path relative to the root, when it is a regular file of the checkout."""
        if source is None:
            return None
        file = source.file
        if file not in self._seen:
            self._seen[file] = self._find(file)
        return self._seen[file]

    def local(self, path: "str | os.PathLike[str] | None") -> str | None:
        """A file on this machine (the trace read, as the command line named it) relative to the root, or None
        when it is not a file under the root."""
        if not path:
            return None
        try:
            real = Path(os.path.realpath(path))
            ok = real.is_file() and self.root in real.parents
        except (OSError, ValueError):
            return None
        rel = real.relative_to(self.root).as_posix() if ok else None
        return rel if rel is not None and not _CONTROL.search(rel) else None

    def _find(self, recorded: str) -> str | None:
        if not recorded or len(recorded) > MAX_PATH_CHARS or _CONTROL.search(recorded):
            return None
        text = recorded.replace("\\", "/")
        drive = re.match(r"^[A-Za-z]:/", text)  # a Windows recording: C:/Users/me/proj/train.py
        absolute = text.startswith("/") or drive is not None
        parts = [p for p in (text[2:] if drive else text).split("/") if p not in ("", ".")]
        if not parts or len(parts) > MAX_PARTS or ".." in parts:
            return None
        candidates: list[list[str]] = []
        if absolute and not drive:
            root_parts = self.root.parts[1:]  # without the leading "/"
            if tuple(parts[: len(root_parts)]) == root_parts and len(parts) > len(root_parts):
                candidates.append(parts[len(root_parts):])
        candidates += [parts[i:] for i in range(len(parts))]
        for cand in candidates:
            if any(_NOT_OURS.match(p) for p in cand):
                continue
            rel = "/".join(cand)
            if self._is_checkout_file(rel):
                return rel
        return None

    def _is_checkout_file(self, rel: str) -> bool:
        path = self.root / rel
        try:
            if not path.is_file():
                return False
            real = Path(os.path.realpath(path))
        except (OSError, ValueError):
            return False
        return real == self.root or self.root in real.parents
