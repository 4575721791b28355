"""Getting a trace's bytes into memory: opening, mapping, inflating, and the limits that keep hostile input bounded.

Every reader that takes a file's bytes takes them from here, so a FIFO, a device, a gzip bomb or a file that is
too big is refused in one place and with one message, whatever the format. The ceiling is checked while a gzip
stream is inflated, never after: a 10 MB file that inflates to 10 GiB stops at the ceiling, in memory and time.
"""

from __future__ import annotations

from typing import Callable

import gzip
import mmap
import os
import stat
import zlib
from pathlib import Path

from traceinsight.vocab.errors import TraceReadError, TraceTooLargeError

try:  # ISA-L inflates about twice as fast as zlib; same format, same results
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover
    _zlib = zlib

HEAD_BYTES = 65536
GZIP_MAGIC = b"\x1f\x8b"

#: Output inflated per call while streaming: large enough that the per-call cost vanishes, small enough that the
#: overshoot past the ceiling stays negligible.
_CHUNK = 64 << 20

#: Gzip-bomb guard (see ``gunzip``): the inflated size past which the compression ratio is checked, and the ratio.
BOMB_FLOOR = 256 << 20
BOMB_RATIO = 200

#: The ceiling is this share of the memory the machine has available, because a parsed trace costs a few times
#: its raw size (columns, categories, the frame): a raw size above about half of free memory cannot end well.
_MEMORY_SHARE = 0.5
_FALLBACK_MAX = 16 << 30  # where available memory cannot be read


#: The least default ceiling, whatever the free memory.
_MIN_DEFAULT_MAX = 1 << 30


def default_max_bytes() -> int:
    """The default ceiling on a trace's (inflated) size: half the memory available now, at least 1 GiB."""
    avail = _available_memory()
    if avail is None:
        return _FALLBACK_MAX
    return max(_MIN_DEFAULT_MAX, int(avail * _MEMORY_SHARE))


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo", "rb") as fh:
            for line in fh:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def resolve_max_bytes(max_bytes: int | None) -> int:
    if max_bytes is None:
        return default_max_bytes()
    if max_bytes <= 0:
        raise TraceReadError(f"max_bytes must be positive, not {max_bytes}")
    return int(max_bytes)


def check_input(path: Path) -> os.stat_result:
    """The path exists and is a regular file or a folder; anything else (a FIFO, /dev/zero, a socket) is refused
    before a byte is read, since reading it could block forever or never end."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise TraceReadError(f"{path}: no such file or directory") from None
    except OSError as exc:
        raise TraceReadError(f"{path}: cannot open ({exc.strerror or exc})") from None
    mode = st.st_mode
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return st
    what = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    raise TraceReadError(f"{path}: is {what}; traceinsight reads trace files and folders only")


def _check_size(path: Path, size: int, max_bytes: int, what: str = "the file is") -> None:
    if size > max_bytes:
        raise TraceTooLargeError(
            f"{path}: {what} over the size ceiling ({_mib(size)} > {_mib(max_bytes)}); raise it with --max-bytes "
            "if this machine has the memory")


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MiB" if n >= 1 << 20 else f"{n:,} bytes"


def read_head(path: Path, n: int = HEAD_BYTES) -> bytes:
    """The first ``n`` bytes, transparently gunzipped; a broken gzip header gives a TraceReadError."""
    with open(path, "rb") as fh:
        raw = fh.read(n)
    if raw[:2] == GZIP_MAGIC:
        try:
            with gzip.open(path, "rb") as gz:
                return gz.read(n)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceReadError(f"{path}: corrupt gzip file ({exc})") from None
    return raw


def read_bytes(path: Path, warnings: list[str], *, max_bytes: int | None = None,
               mapped: bool = False, on_bytes: Callable[[int, int], None] | None = None) -> bytes | mmap.mmap:
    """The file's content, inflated when it is gzip, within ``max_bytes`` (None: the default ceiling).

    ``mapped``: a plain file is mapped rather than copied (for a reader that scans bytes without keeping them). A
    mapping faults if the file is truncated while it is read (a profiler rewriting the same path mid-load);
    profilers write a trace once and only append, so the copy this saves is worth that narrow window. A gzip
    stream cut short (a killed job) gives what was written before the cut, with a warning. ``on_bytes(done, total)``
    hears how many bytes of the file are read (inflated, for gzip) as the work goes on, for a progress bar."""
    limit = resolve_max_bytes(max_bytes) if max_bytes is not None else None  # None: the default, read when needed
    path = Path(path)
    st = check_input(path)
    if stat.S_ISDIR(st.st_mode):
        raise TraceReadError(f"{path}: is a folder, not a file")
    with open(path, "rb") as fh:
        magic = fh.read(2)
        if not magic:
            raise TraceReadError(f"{path}: the file is empty")
        if magic != GZIP_MAGIC:
            # the default ceiling is never under 1 GiB: a smaller file needs no look at the machine's free memory
            if limit is not None or st.st_size > _MIN_DEFAULT_MAX:
                _check_size(path, st.st_size, limit if limit is not None else default_max_bytes())
            if mapped:
                try:
                    view = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
                except (OSError, ValueError):
                    pass
                else:
                    if hasattr(view, "madvise"):
                        view.madvise(mmap.MADV_SEQUENTIAL)
                    if on_bytes:
                        on_bytes(st.st_size, st.st_size)
                    return view
            fh.seek(0)
            out = fh.read()
            if on_bytes:
                on_bytes(st.st_size, st.st_size)
            return out
        limit = limit if limit is not None else default_max_bytes()
        _check_size(path, st.st_size, limit)
        fh.seek(0)
        raw = fh.read()
    data, complete = gunzip(raw, path, limit, bomb_guard=max_bytes is None, on_bytes=on_bytes, mapped=mapped)
    del raw
    if not complete:
        warnings.append(f"{path.name}: the gzip stream is cut short; reading what was written before the cut")
    if not data:
        raise TraceReadError(f"{path}: the gzip file holds no data")
    return data


def gunzip(raw: bytes, path: Path, max_bytes: int, *, bomb_guard: bool = True,
           on_bytes: Callable[[int, int], None] | None = None, mapped: bool = False) -> tuple[bytes | mmap.mmap, bool]:
    """Every member of a gzip file inflated, and whether the last member was complete.

    Inflating runs in bounded steps and stops the moment the output passes ``max_bytes``. ``bomb_guard`` also
    stops a stream that, past ``BOMB_FLOOR`` bytes, has inflated more than ``BOMB_RATIO`` times the input it has
    consumed: profiler JSON compresses 10-30x, a gzip bomb about 1000x, so a bomb ends after a few hundred MB
    whatever the ceiling. A file smaller than one step (most traces) is inflated by one call, with no copy.
    ``mapped``: a larger one is inflated into one ``InflatedBuffer`` (for a reader that takes any buffer) instead
    of steps joined into a second copy at the end."""
    into_one = mapped and _CAN_MAP and len(raw) * 4 > _CHUNK  # a file a few steps long or more
    parts: list[bytes] | _Inflated = _Inflated(_inflated_size_hint(raw, max_bytes)) if into_one else []
    filled = 0
    rest = memoryview(raw)
    members = 0
    consumed_before = 0  # input bytes of the members already complete
    while len(rest):
        d = _zlib.decompressobj(31)
        pending = rest
        try:
            while True:
                chunk = d.decompress(pending, min(_CHUNK, max_bytes + 1 - filled))
                if chunk:
                    parts.append(chunk)
                    filled += len(chunk)
                    if filled > max_bytes:
                        raise TraceTooLargeError(
                            f"{path}: inflates past the size ceiling ({_mib(max_bytes)}): stopped there (a gzip "
                            "bomb, or a trace larger than this machine can analyse); raise it with --max-bytes")
                    used = consumed_before + len(rest) - len(d.unconsumed_tail)
                    if on_bytes:
                        on_bytes(used, len(raw))
                    if bomb_guard and filled > BOMB_FLOOR and filled > BOMB_RATIO * max(used, 1):
                        raise TraceTooLargeError(
                            f"{path}: inflates over {BOMB_RATIO}x its compressed size ({_mib(filled)} from "
                            f"{_mib(used)}): stopped as a likely gzip bomb; pass --max-bytes to read it anyway")
                if d.eof:
                    break
                pending = d.unconsumed_tail
                if not pending and not chunk:
                    break  # input used up before the member ended: cut short
        except (zlib.error, _zlib.error) as exc:
            if members:  # trailing garbage after complete members
                break
            raise TraceReadError(f"{path}: corrupt gzip data ({exc})") from None
        members += 1
        if not d.eof:
            return _joined(parts), False
        consumed_before += len(rest) - len(d.unused_data)
        rest = memoryview(d.unused_data)
        if bytes(rest[:2]) != GZIP_MAGIC:
            if 0 < len(rest) < 2 and GZIP_MAGIC.startswith(bytes(rest)):
                return _joined(parts), False  # cut inside the next member's magic
            break
    return _joined(parts), True


def _joined(parts: "list[bytes] | _Inflated") -> bytes | mmap.mmap:
    if isinstance(parts, _Inflated):
        return parts.result()
    return parts[0] if len(parts) == 1 else b"".join(parts)


class InflatedBuffer(mmap.mmap):
    """A gzip file's content inflated into anonymous memory (``read_bytes(mapped=True)``). Not a file mapping: its
    pages hold the only copy of the bytes, so a reader must not give them back as it does a file's."""


class _Inflated:
    """The steps of ``gunzip`` written one after another into one anonymous mapping, grown in place (``resize``:
    the kernel moves the pages, nothing is copied). Why: joining the steps at the end held the inflated trace twice
    (a 1.9 GB trace peaked at 3.96 GB while it was read, 2.1x its size) and wrote every page twice."""

    def __init__(self, hint: int) -> None:
        self.buf = _anonymous(max(hint, mmap.PAGESIZE))
        self.n = 0

    def append(self, chunk: bytes) -> None:
        need = self.n + len(chunk)
        if need > len(self.buf):
            self._grow(max(need, len(self.buf) * 3 // 2))
        self.buf[self.n:need] = chunk
        self.n = need

    def _grow(self, size: int) -> None:
        try:
            self.buf.resize(size)
        except (OSError, ValueError, TypeError, SystemError):  # no mremap (macOS): a new mapping, the bytes copied once
            bigger = _anonymous(size)
            bigger[: self.n] = self.buf[: self.n]
            self.buf.close()
            self.buf = bigger

    def result(self) -> bytes | mmap.mmap:
        if not self.n:
            self.buf.close()
            return b""
        if self.n < len(self.buf):
            try:
                self.buf.resize(self.n)
            except (OSError, ValueError, TypeError, SystemError):
                out = bytes(self.buf[: self.n])  # no shrinking here: the bytes themselves, as before
                self.buf.close()
                return out
        return self.buf


#: Anonymous memory that grows in place needs a private mapping: a shared one (Python's default) is backed by an
#: object of its first size, and the pages a resize adds past it fault (SIGBUS) when touched.
_CAN_MAP = hasattr(mmap, "MAP_PRIVATE")


def _anonymous(size: int) -> InflatedBuffer:
    return InflatedBuffer(-1, size, flags=mmap.MAP_PRIVATE)


def _inflated_size_hint(raw: bytes, max_bytes: int) -> int:
    """The inflated size a gzip file says in its last member's trailer (ISIZE: the size modulo 2^32; exact for one
    member under 4 GiB), within the ceiling; the buffer grows past it if the stream holds more."""
    isize = int.from_bytes(raw[-4:], "little") if len(raw) >= 18 else 0
    return min(max(isize, len(raw)), max_bytes + 1)
