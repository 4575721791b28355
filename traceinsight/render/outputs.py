"""Writing reports: never over an input, never half a file, and every failure as one line (exit 2).

A CI job often runs ``traceinsight analyze t.json -o "$OUT"`` with names built by a script, so ``-o`` can end
up naming the trace itself, a link to it, or a file inside the logdir being read. Writing there would destroy
the evidence the report is about, so every target is checked against every input (trace, baseline, config,
rule files) before anything is read or written: the same path after resolving links, the same file
(device and inode: hard links), or a place inside an input folder.

A report is written to a temporary file in the target's folder and moved over the target with ``os.replace``,
so a full disk, a quota or an interrupted run leaves the old file or nothing, never a truncated report that a
later CI step would read as valid. Targets that are not regular files (``/dev/stdout``, a pipe, ``/dev/full``)
are written directly, since replacing them would swap a device node for a file.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from traceinsight.vocab.errors import OutputError
from traceinsight.render import FORMATS
from traceinsight.vocab.sanitize import terminal

#: File stem of the reports written into an output folder when several formats are asked for.
REPORT_STEM = "traceinsight-report"
#: File stem of a diff's outputs in a folder (``traceinsight diff -f md,html -o DIR``).
DIFF_STEM = "traceinsight-diff"
#: Each product's file stem in an output folder (the job's reports are named like one trace's).
STEMS = {"single": REPORT_STEM, "job": REPORT_STEM, "diff": DIFF_STEM}
#: Format -> the file suffix in an output folder (``render.FORMATS``; ``plan`` reads FORMATS itself).
SUFFIX = {name: f.suffix for name, f in FORMATS.items()}
#: Files of an input folder looked at when checking for hard links to them (a logdir holds a few dozen).
MAX_FOLDER_FILES = 10_000


class ReaderGone(OutputError):
    """Standard output was a pipe whose reader went away (``| head``): exit 2 without a message."""


@dataclass(frozen=True)
class Target:
    fmt: str  # text, json, md, html or perfetto
    path: Path | None  # None: standard output
    html_name: str | None  # the HTML report's file name, for the Markdown pointer


def plan(formats: list[str], output: Path | None, product: str = "single") -> list[Target]:
    """Where each format goes: stdout, the ``-o`` file, or one file per format in the ``-o`` folder (named
    ``<the product's stem>.<the format's suffix>``).

    Raises OutputError for a single format aimed at an existing folder (the report would have no name). A
    Markdown file names the HTML report written with it, or, alone, the one already beside it; none otherwise.
    """
    if output is None:
        return [Target(formats[0], None, None)]
    st = _stat(output)  # not Path.is_dir(): it raises on a name too long for the file system
    if len(formats) > 1:
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise OutputError(f"-o {output} is a file; several formats need a folder to write one file per format")
        stem = STEMS[product]
        html = f"{stem}.{FORMATS['html'].suffix}" if "html" in formats else None
        return [Target(f, output / f"{stem}.{FORMATS[f].suffix}", html) for f in formats]
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputError(f"-o {output} is a folder; give a file name (or ask for several formats with -f to fill a folder)")
    # one format: the Markdown points at an HTML report only where one by that name lies beside it (an earlier
    # call's); a pointer to a page that was never written sends the reader after nothing
    sibling = output.with_suffix(".html")
    html = sibling.name if formats[0] == "md" and sibling != output and _stat(sibling) is not None else None
    return [Target(formats[0], output, html)]


def refuse_inputs(targets: Iterable[Target], inputs: Iterable[str | os.PathLike | None]) -> None:
    """Raise OutputError when a target is an input, a link to one, or lies inside an input folder."""
    paths = [Path(p) for p in inputs if p is not None and str(p) != ""]
    files: list[tuple[Path, os.stat_result]] = []
    folders: list[Path] = []
    for p in paths:
        st = _stat(p)
        if st is None:
            continue
        if stat.S_ISDIR(st.st_mode):
            folders.append(_real(p))
            files.extend(_folder_files(p))
        else:
            files.append((p, st))
    for t in targets:
        if t.path is None:
            continue
        real = _real(t.path)
        for folder in folders:
            if real == folder or folder in real.parents:
                raise OutputError(f"refusing to write {t.path}: it is inside the input folder {folder}; write the report elsewhere")
        st = _stat(t.path)
        for p, ist in files:
            same_file = st is not None and (st.st_dev, st.st_ino) == (ist.st_dev, ist.st_ino)
            if same_file or real == _real(p):
                raise OutputError(f"refusing to write {t.path}: it is the input {p}; write the report elsewhere")


def write_reports(analysis: Any, targets: list[Target], inputs: Iterable[str | os.PathLike | None] = (),
                  render: Callable[..., str] | None = None, say: Callable[[str], None] | None = None, *,
                  product: str = "single", tally: str | None = None, **options: Any) -> None:
    """Render each target's format for ``product`` and write it (stdout or atomically to a file); OutputError on
    any failure. ``options`` go to each renderer that names them (``traceinsight.render.render``); ``tally`` is
    said after a lone file's name (default: how many findings)."""
    if render is None:
        from traceinsight.render import render as render_any

        def render(obj: Any, fmt: str, **kw: Any) -> "str | bytes":
            return render_any(obj, fmt, product, **kw)
    targets = list(targets)
    refuse_inputs(targets, inputs)  # checked again: the caller may not have, and inputs can change while reading
    for t in targets:
        text = render(analysis, t.fmt, html_name=t.html_name, **options)
        if t.path is None:
            write_stdout(text if text.endswith("\n") else text + "\n")
            continue
        write_file(t.path, text)
        if say is not None:
            if tally is None:
                tally = f"{len(getattr(analysis, 'findings', []))} findings"
            say(f"wrote {terminal(t.path)}" + (f" ({tally})" if len(targets) == 1 and tally else ""))


def write_stdout(text: str) -> None:
    """The report on standard output; a closed pipe ends quietly, other errors as one line."""
    data = text.encode(sys.stdout.encoding or "utf-8", "backslashreplace")
    try:
        out = sys.stdout.buffer
        out.write(data)
        out.flush()
    except BrokenPipeError:  # ``| head``: the reader has what it wanted; no message, no traceback at exit
        _silence_stdout()
        raise ReaderGone("") from None
    except OSError as exc:
        _silence_stdout()
        raise OutputError(f"cannot write the report to standard output: {_reason(exc)}") from None


def write_file(path: Path, text: str | bytes) -> None:
    """Write ``text`` (UTF-8) or bytes to ``path`` so that a failure leaves the old file or nothing, never half a report."""
    # lone surrogates from undecodable names stay visible
    data = text if isinstance(text, bytes) else text.encode("utf-8", "backslashreplace")
    real = _real(path)
    st = _stat(path)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputError(f"cannot write {path}: it is a folder")
    if st is not None and not stat.S_ISREG(st.st_mode):
        _write_special(path, data)
        return
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: cannot create its folder {real.parent}: {_reason(exc)}") from None
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), _file_mode(st))
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, real)
        tmp = None
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {_reason(exc)}") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _write_special(path: Path, data: bytes) -> None:
    """A device or pipe (``-o /dev/stdout``): written in place, since it cannot be replaced."""
    try:
        with open(path, "wb", buffering=0) as f:
            view = memoryview(data)
            while view:
                n = f.write(view)
                if not n:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                view = view[n:]
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {_reason(exc)}") from None


def _file_mode(existing: os.stat_result | None) -> int:
    """An existing report keeps its permissions; a new one gets what ``open`` would give (0666 minus umask)."""
    if existing is not None:
        return stat.S_IMODE(existing.st_mode)
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "no space left on the device"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.EROFS:
        return "read-only file system"
    if exc.errno == errno.ENOTDIR:
        return "a part of the path is a file, not a folder"
    return exc.strerror or type(exc).__name__


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again with a traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _stat(p: Path) -> os.stat_result | None:
    try:
        return os.stat(p)
    except (OSError, ValueError):
        return None


def _real(p: Path) -> Path:
    try:
        return Path(os.path.realpath(p))
    except (OSError, ValueError):
        return Path(os.path.abspath(p))


def _folder_files(folder: Path) -> list[tuple[Path, os.stat_result]]:
    out: list[tuple[Path, os.stat_result]] = []
    for root, _dirs, names in os.walk(folder):
        for name in names:
            st = _stat(Path(root) / name)
            if st is not None and stat.S_ISREG(st.st_mode):
                out.append((Path(root) / name, st))
            if len(out) >= MAX_FOLDER_FILES:
                return out
    return out
