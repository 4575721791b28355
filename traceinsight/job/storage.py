"""Where rank traces live: local paths, folders, globs and object-store URLs (``s3://``, ``gs://``, ``az://``,
``file://``), all through fsspec, so a worker reads its own rank straight from the store.

A remote rank is copied to a local temporary file on the worker that reads it (the readers memory-map or stream
local files, and the copy never passes through the coordinator); it is deleted as soon as the rank is summarised.
Store credentials and endpoints come from the usual places (``~/.aws``, ``AWS_*`` / ``FSSPEC_S3_*`` environment
variables) or from ``storage_options``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

from traceinsight.vocab.errors import TraceReadError
from traceinsight.vocab.fence import why_outside

#: Suffixes of per-rank trace files a job folder is made of.
#: The environment variable that names a Dask scheduler for the whole-job path.
SCHEDULER_ENV = "TRACEINSIGHT_SCHEDULER"
RANK_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")
_GLOB = set("*?[")


def is_remote(path: str) -> bool:
    """A URL with a protocol other than plain local files."""
    return "://" in path and not path.startswith("file://")


def is_job_path(path: str | os.PathLike) -> bool:
    """True for inputs that are read rank by rank: object-store URLs, globs, and local folders of rank files."""
    p = str(path)
    if is_remote(p) or p.startswith("file://"):
        return True
    local = Path(p)
    try:
        if local.is_file():  # an existing file is one trace, whatever characters its name holds ("[", "*")
            return False
        if local.is_dir():  # a refused rank (a link out, a FIFO) counts: the job path names it and exits 8
            refused: list[str] = []
            return len(_local_rank_files(local, refused=refused)) + len(refused) >= 2
    except OSError:  # a name too long for the file system: the reader says so in one line
        return False
    return bool(_GLOB & set(p))


def _fs(url: str, storage_options: dict[str, Any] | None):
    try:
        import fsspec
    except ImportError:  # pragma: no cover - fsspec comes with the job extra
        raise TraceReadError(f"{url}: reading object storage needs fsspec: pip install 'traceinsight[job]'") from None
    try:
        return fsspec.core.url_to_fs(url, **(storage_options or {}))
    except (ImportError, ValueError) as exc:
        proto = url.split("://", 1)[0]
        extra = {"s3": "s3", "gs": "gcs", "gcs": "gcs", "az": "az", "abfs": "az"}.get(proto, "job")
        raise TraceReadError(f"{url}: no filesystem for {proto}:// ({exc}); pip install 'traceinsight[{extra}]'") from None


def _local_rank_files(folder: Path, skipped: list[str] | None = None, refused: list[str] | None = None) -> list[str]:
    """The PyTorch rank files of a local folder; files with a rank file's name that cannot be taken (a FIFO or
    other non-file, a link leading out of the folder, unreadable, empty, not a kineto trace) are listed in
    ``skipped`` as "path: why": a broken rank must not vanish from a job without a word. ``refused`` gets the
    ones refused before reading (``unusable``: links out, FIFOs, unreadable files)."""
    from traceinsight.ingest.kineto.sniff import why_not_trace

    out: list[str] = []
    for p in sorted(folder.iterdir()):
        if not p.name.endswith(RANK_SUFFIXES):
            continue
        why = unusable(p, folder)
        if why is None:
            why = why_not_trace(p)
            if why is None:
                out.append(str(p))
                continue
        elif refused is not None:
            refused.append(f"{p}: {why}")
        if skipped is not None:
            skipped.append(f"{p}: {why}")
    return out


def unusable(p: Path, root: Path) -> str | None:
    """Why the local rank file ``p`` (named inside ``root``) is not taken as a rank, or None when it is: a link
    that leads out of the allowed roots (``fence``: the job folder, or the MCP server's roots), a FIFO, device or
    folder (reading one would block or mean nothing), a file this user cannot read."""
    import stat as _stat

    try:
        outside = why_outside(p, root, "job folder")
        if outside:
            return outside
        st = p.stat()
    except (OSError, RuntimeError) as exc:
        return f"cannot be read ({getattr(exc, 'strerror', None) or exc})"
    if not _stat.S_ISREG(st.st_mode):
        kind = "a FIFO" if _stat.S_ISFIFO(st.st_mode) else "a folder" if _stat.S_ISDIR(st.st_mode) else "not a regular file"
        return f"{kind}; not read"
    if not os.access(p, os.R_OK):
        return "cannot be read (permission denied)"
    return None


def _glob_root(pattern: str) -> Path:
    """The folder a local glob cannot leave: the part before its first wildcard."""
    cut = min((pattern.index(c) for c in _GLOB if c in pattern), default=len(pattern))
    head = pattern[:cut]
    return Path(head if head.endswith("/") else os.path.dirname(head) or ".")


def expand(path: str | os.PathLike, storage_options: dict[str, Any] | None = None, skipped: list[str] | None = None) -> list[str]:
    """The rank files ``path`` names, sorted: a file, a folder of rank files, a glob, or an object-store prefix.

    Local rank files that cannot be taken are left out and listed in ``skipped`` ("path: why")."""
    p = str(path)
    if not is_remote(p) and not p.startswith("file://") and (not (_GLOB & set(p)) or os.path.lexists(p)):
        local = Path(p)  # an existing name is itself, whatever characters it holds ("[", "*")
        if local.is_dir():
            files = _local_rank_files(local, skipped)
            if not files:
                raise TraceReadError(f"{local}: no PyTorch profiler rank files (.json / .json.gz) in this folder"
                                     + (f" ({len(skipped)} skipped; first: {skipped[0]})" if skipped else ""))
            return files
        if not local.exists():
            raise TraceReadError(f"{local}: no such file or directory")
        return [p]
    fs, root = _fs(p, storage_options)
    proto = p.split("://", 1)[0] + "://" if "://" in p else ""
    try:
        if _GLOB & set(root):
            found = fs.glob(root)
        elif fs.isdir(root):
            found = [f for f in fs.find(root) if f.endswith(RANK_SUFFIXES)]
        elif fs.exists(root):
            found = [root]
        else:
            raise TraceReadError(f"{p}: nothing there")
    except (OSError, PermissionError) as exc:
        raise TraceReadError(f"{p}: cannot list: {type(exc).__name__}: {exc}") from None
    files = sorted(f for f in found if f.endswith(RANK_SUFFIXES))
    if not is_remote(p):  # a local glob or file:// URL: the same checks as a local folder
        root = _glob_root(root) if _GLOB & set(root) else Path(root)
        kept = []
        for f in files:
            why = unusable(Path(f), root)
            if why is None:
                kept.append(f)
            elif skipped is not None:
                skipped.append(f"{f}: {why}")
        files = kept
    if not files:
        raise TraceReadError(f"{p}: no rank trace files (.json / .json.gz) found")
    if proto == "file://":
        return files
    return [proto + f.lstrip("/") if not f.startswith(proto) else f for f in files]


@contextlib.contextmanager
def local_copy(url: str, storage_options: dict[str, Any] | None = None) -> Iterator[Path]:
    """A local path holding ``url``'s bytes for as long as the block runs (the file itself when it is local)."""
    if not is_remote(url):
        yield Path(url[len("file://") :] if url.startswith("file://") else url)
        return
    fs, root = _fs(url, storage_options)
    name = root.rsplit("/", 1)[-1]
    tmpdir = tempfile.mkdtemp(prefix="traceinsight-rank-")
    target = Path(tmpdir) / name
    try:
        try:
            with fs.open(root, "rb") as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 8 << 20)
        except (OSError, PermissionError) as exc:
            raise TraceReadError(f"{url}: cannot read: {type(exc).__name__}: {exc}") from None
        yield target
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
