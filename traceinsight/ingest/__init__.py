"""Reading traces: detect the format from the content, hand the file to its parser, return one Timeline.

Each parser module exposes ``sniff(path, head) -> bool`` (cheap: looks at the first bytes or the file layout)
and ``read(path, **options) -> Timeline``. Parsers know nothing of rules.
"""

from __future__ import annotations

import gzip
import importlib
import os
import zlib
from pathlib import Path
from typing import Callable

from ..errors import TraceReadError, UnknownFormatError
from ..timeline import Timeline

#: Format name -> parser module (inside this package), in the order they are tried.
PARSERS: dict[str, str] = {
    "nsys": "nsys",
    "tensorflow-xplane": "xplane",
    "pytorch": "pytorch",  # before the logdir reader: a folder of kineto rank files is not a TensorBoard logdir
    "tensorflow-logdir": "tf_logdir",
    "tensorflow-json": "tf_json",
}

SUPPORTED = (
    "PyTorch Profiler Chrome trace (.json, .json.gz, or a folder of per-rank files); "
    "TensorFlow profiler (*.xplane.pb, *.trace.json.gz, or a TensorBoard logdir); "
    "Nsight Systems (nsys export --type sqlite .sqlite; .nsys-rep when nsys is installed)"
)

HEAD_BYTES = 65536

ProgressFn = Callable[[str], None]


def read_head(path: Path, n: int = HEAD_BYTES) -> bytes:
    """The first ``n`` bytes, transparently gunzipped; a broken gzip header gives a TraceReadError."""
    with open(path, "rb") as fh:
        raw = fh.read(n)
    if raw[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as gz:
                return gz.read(n)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceReadError(f"{path}: corrupt gzip file ({exc})") from None
    return raw


def _parser(module: str):
    return importlib.import_module(f"{__name__}.{module}")


def detect(path: str | os.PathLike) -> str:
    """The format name of ``path`` (a key of PARSERS), judged by content, not only by extension."""
    p = Path(path)
    if not p.exists():
        raise TraceReadError(f"{p}: no such file or directory")
    head = b""
    if p.is_file():
        if p.stat().st_size == 0:
            raise TraceReadError(f"{p}: the file is empty")
        head = read_head(p)
    for fmt, module in PARSERS.items():
        try:
            mod = _parser(module)
        except ImportError:
            continue
        if mod.sniff(p, head):
            return fmt
    raise UnknownFormatError(f"{p}: not a trace format traceinsight reads. Supported: {SUPPORTED}")


def load(path: str | os.PathLike, *, format: str | None = None, progress: ProgressFn | None = None, **options) -> Timeline:
    """Read any supported trace into a Timeline.

    ``format`` forces a parser (a key of PARSERS); otherwise it is detected from the content.
    Parser-specific ``options`` (e.g. ``run=`` for TensorBoard logdirs) are passed through.
    """
    fmt = format or detect(path)
    if fmt not in PARSERS:
        raise UnknownFormatError(f"unknown format {fmt!r}; choose one of {', '.join(PARSERS)}")
    mod = _parser(PARSERS[fmt])
    try:
        return mod.read(Path(path), progress=progress, **options)
    except TraceReadError:
        raise
    except MemoryError:
        raise TraceReadError(f"{path}: out of memory while reading the trace") from None
    except Exception as exc:  # noqa: BLE001
        # Parsers validate what they read; whatever still escapes on hostile input is reported in one line,
        # never as a traceback (the input is what is wrong, so it is an unreadable-trace error).
        raise TraceReadError(f"{path}: cannot read {fmt} trace: {type(exc).__name__}: {exc}") from None
