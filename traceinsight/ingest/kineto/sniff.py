"""Is it PyTorch Profiler (kineto) JSON: judged from the first bytes or a folder's rank files, without importing the
reader (detection tries every format; only the one that answers yes is imported)."""

from __future__ import annotations

from pathlib import Path

from traceinsight.vocab.errors import TraceReadError
from traceinsight.vocab.fence import why_outside
from traceinsight.ingest.byteio import read_head


_TF_MARKERS = (b'"/host:CPU', b'"/device:GPU:', b'"/device:CPU:', b'"/device:TPU:', b"highres-ticks")
_KINETO_STRONG = (b'"schemaVersion"', b'"deviceProperties"', b'"distributedInfo"', b'"ProfilerStep#')
_KINETO_WEAK = (b'"cpu_op"', b'"Operator"', b'"cuda_runtime"', b'"Runtime"', b'"kernel"', b'"Kernel"')


def looks_like_kineto(head: bytes) -> bool:
    """Kineto JSON, judged from the first bytes; TensorFlow's Chrome-trace export (plane names) is left to tf_json."""
    h = head.lstrip()
    if not h.startswith((b"{", b"[")):
        return False
    if any(m in head for m in _KINETO_STRONG):
        return True
    if any(m in head for m in _TF_MARKERS):
        return False
    if any(m in head for m in _KINETO_WEAK):
        return True
    return b'"traceEvents"' in head or (h.startswith(b"[") and b'"ph"' in head)


def sniff(path: Path, head: bytes) -> bool:
    if path.is_dir():
        return bool(rank_files(path))
    return looks_like_kineto(head)


def _json_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and (p.name.endswith(".json") or p.name.endswith(".json.gz")))


def why_not_trace(p: Path) -> str | None:
    """None when the file ``p`` is a PyTorch Profiler trace, else why not (empty, unreadable, other content): the
    one judgement of a rank file that the folder reader and the whole-job path both state."""
    try:
        if not p.stat().st_size:
            return "empty"
        if looks_like_kineto(read_head(p)):
            return None
        return "not a PyTorch Profiler trace (its first bytes are not a kineto trace)"
    except (OSError, TraceReadError) as exc:
        return f"cannot be read ({getattr(exc, 'strerror', None) or exc})"


def split_rank_files(folder: Path, refused: list[str] | None = None) -> tuple[list[Path], list[Path]]:
    """The folder's .json / .json.gz files split into PyTorch Profiler traces and the others (empty, unreadable or
    not a trace), each file's head read once: the reader names the others, since a rank's broken file must not
    vanish from a folder without a word. A link leading out of the allowed roots (``fence``) is neither: it is
    not opened, and goes to ``refused`` as "name: why"."""
    traces: list[Path] = []
    others: list[Path] = []
    for p in _json_files(folder):
        outside = why_outside(p, folder)
        if outside:
            if refused is not None:
                refused.append(f"{p.name}: {outside}")
            continue
        (others if why_not_trace(p) else traces).append(p)
    return traces, others


def rank_files(folder: Path) -> list[Path]:
    """The folder's PyTorch Profiler trace files, by name."""
    return split_rank_files(folder)[0]
