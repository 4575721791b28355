"""Where a finding's source line is in the checkout: the path a pull-request annotation or a code-scanning result
names, relative to the source root (``--source-root``, the working directory by default), or nothing.

A trace records a file as the profiled program saw it: ``/home/me/proj/train.py`` on the machine that recorded
it, or relative to the entry of ``sys.path`` it was found under (PyTorch strips those prefixes: ``python
src/train.py`` records ``train.py``, and a library ``torch/nn/modules/module.py``). The checkout CI runs in is
another folder on another machine. So a recorded file is looked for under the root, in this order: the path below
the root when it was recorded there; the longest tail of it that names a regular file under the root
(``/home/me/proj/src/train.py`` -> ``src/train.py``); else the one file of the checkout whose path ends with the
longest tail of the recorded one (``train.py`` -> ``src/train.py``), found in an index of the checkout's files
(hidden folders, virtual environments and caches left out; at most MAX_INDEX_FILES files). Two files that match
equally well (``a/train.py`` and ``b/train.py`` for ``train.py``) name neither: an annotation on the wrong file is
worse than none.

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

from traceinsight.model.finding import SourceLine

#: Path parts that are never the user's code, even inside the checkout (a virtual environment, caches).
_NOT_OURS = re.compile(r"^(site-packages|dist-packages|\.venv|venv|\.tox|\.nox|__pycache__|\.git)$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
MAX_PATH_CHARS = 4096
MAX_PARTS = 64
#: Files of the checkout indexed for recorded paths that are only a tail of the checkout's (a bound on the walk).
MAX_INDEX_FILES = 200_000
#: Folders the index never enters: hidden ones (``.git``, ``.venv``), environments, caches, dependencies.
_SKIP_DIRS = re.compile(r"^(\..*|venv|env|site-packages|dist-packages|node_modules|__pycache__)$")


class SourceRoot:
    """The checkout findings' files are looked for in; each recorded file is looked up once."""

    def __init__(self, root: "str | os.PathLike[str] | None" = None) -> None:
        self.root = Path(os.path.realpath(root if root is not None else os.getcwd()))
        self._seen: dict[str, str | None] = {}
        self._index: dict[str, list[tuple[str, ...]]] | None = None

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
        return self._by_tail(parts)

    def _by_tail(self, parts: list[str]) -> str | None:
        """The one indexed file whose path shares the longest tail with ``parts`` (the file name at least)."""
        best, best_len, tied = None, 0, False
        for cand in self._files().get(parts[-1], ()):
            n = 0
            while n < min(len(cand), len(parts)) and cand[-1 - n] == parts[-1 - n]:
                n += 1
            if n > best_len:
                best, best_len, tied = cand, n, False
            elif n == best_len:
                tied = True
        if best is None or tied:
            return None
        rel = "/".join(best)
        return rel if self._is_checkout_file(rel) else None

    def _files(self) -> dict[str, list[tuple[str, ...]]]:
        """The checkout's files by name (walked once, links to folders not followed)."""
        if self._index is None:
            index: dict[str, list[tuple[str, ...]]] = {}
            count = 0
            for folder, dirs, names in os.walk(self.root):
                dirs[:] = sorted(d for d in dirs if not _SKIP_DIRS.match(d))
                rel = Path(folder).relative_to(self.root).parts
                for name in names:
                    index.setdefault(name, []).append((*rel, name))
                    count += 1
                if count >= MAX_INDEX_FILES:
                    break
            self._index = index
        return self._index

    def _is_checkout_file(self, rel: str) -> bool:
        path = self.root / rel
        try:
            if not path.is_file():
                return False
            real = Path(os.path.realpath(path))
        except (OSError, ValueError):
            return False
        return real == self.root or self.root in real.parents
