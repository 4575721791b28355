"""Nsight Systems: ``nsys export --type sqlite`` files (every schema from 2022.1 to 2026.x) and ``.nsys-rep``.

The SQLite export has one table per record kind, created only when it has rows, with columns added over
the years, so every table and column is probed before use. Each table is read columnar, with small columns
packed into 63-bit words and rowid ranges scanned in parallel (see ``nsys_sql``); names are resolved once per
distinct id, never per row.
The file is opened read-only and immutable: the reader must not leave a journal or touch the user's file.
``.nsys-rep`` is NVIDIA's closed binary format; only ``nsys export`` reads it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from ..errors import TraceReadError
from ..timeline import COPY_KINDS, KINDS, DeviceInfo, Timeline, TraceMeta, assign_steps, build_events, rebase
from . import nsys_schema as S
from .nsys_sql import MMAP_BYTES, Field, fetch, fetch_text, string_table, table_columns

SQLITE_MAGIC = b"SQLite format 3\x00"
REP_MAGIC = b"NVIDIA Tegra Profiler Report"
REP_SUFFIXES = (".nsys-rep", ".qdrep")

_PID = f"((globalPid >> {S.PID_SHIFT}) & {S.ID_MASK})"
_TPID = f"((globalTid >> {S.PID_SHIFT}) & {S.ID_MASK})"
_TTID = f"(globalTid & {S.ID_MASK})"
_DUR = 'min(max("end" - start, 0), 1099511627775)'  # 40 bits: 18 minutes per row is plenty
_VERSION_SUFFIX = re.compile(r"_v\d+$")
_EMIT_NVTX = re.compile(r"^([A-Za-z_][\w:.<>~]*), (?:seq|op_id|sizes|stashed seq|input_op_ids)\b")
_STEP = re.compile(S.STEP_PATTERN, re.IGNORECASE)

ProgressFn = Callable[[str], None]


# --- detection --------------------------------------------------------------------------------------------


def sniff(path: Path, head: bytes) -> bool:
    """An nsys SQLite export (SQLite magic + an nsys marker table) or a ``.nsys-rep`` report."""
    if head.startswith(REP_MAGIC) or REP_MAGIC in head[:256]:
        return True
    if path.is_file() and path.name.lower().endswith(REP_SUFFIXES):
        return True
    if not head.startswith(SQLITE_MAGIC):
        return False
    try:
        conn = _connect(path)
    except TraceReadError:
        return False
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError:
        return False
    finally:
        conn.close()
    return bool(names & set(S.MARKER_TABLES)) or any(n.startswith("CUPTI_ACTIVITY_KIND_") for n in names)


# --- entry point ------------------------------------------------------------------------------------------


def read(path: Path, progress: ProgressFn | None = None, **options) -> Timeline:
    """Read an nsys export; a ``.nsys-rep`` is first converted with ``nsys export`` when nsys is installed."""
    path = Path(path)
    with open(path, "rb") as fh:
        head = fh.read(256)
    if head.startswith(SQLITE_MAGIC):
        return _read_sqlite(path, progress)
    if path.name.lower().endswith(REP_SUFFIXES) or REP_MAGIC in head:
        return _read_report(path, progress)
    raise TraceReadError(f"{path}: not an Nsight Systems SQLite export (expected the output of nsys export --type sqlite)")


def export_command(path: Path, output: str = "trace.sqlite") -> str:
    """The command a user runs to turn a report into what we read."""
    return f"nsys export --type sqlite -o {shlex.quote(output)} {shlex.quote(str(path))}"


def _read_report(path: Path, progress: ProgressFn | None) -> Timeline:
    nsys = os.environ.get("TRACEINSIGHT_NSYS") or shutil.which("nsys")
    if not nsys:
        raise TraceReadError(
            f"{path}: .nsys-rep is Nsight Systems' binary report and nsys is not on PATH; convert it first with: "
            f"{export_command(path, Path(path).with_suffix('.sqlite').name)}"
        )
    with tempfile.TemporaryDirectory(prefix="traceinsight-nsys-") as tmp:
        out = Path(tmp) / "trace.sqlite"
        if progress:
            progress("nsys export --type sqlite")
        cmd = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out), str(path)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TraceReadError(f"{path}: running nsys export failed ({exc})") from None
        if proc.returncode != 0 or not out.exists():
            last = (proc.stderr or proc.stdout or "").strip().splitlines()
            reason = last[-1] if last else f"exit code {proc.returncode}"
            raise TraceReadError(f"{path}: nsys export failed: {reason}")
        tl = _read_sqlite(out, progress)
    tl.meta.path = str(path)
    tl.meta.extra["converted_with"] = " ".join(cmd[:5])
    return tl


def _connect(path: Path) -> sqlite3.Connection:
    """Read-only and immutable: no lock, no journal, no WAL file next to the user's trace."""
    uri = Path(path).resolve().as_uri() + "?mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise TraceReadError(f"{path}: cannot open as SQLite ({exc})") from None
    # Captured environments and old exports hold non-UTF-8 bytes; a name with a replacement char beats a crash.
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")  # read-only page access in place; writes nothing
    except sqlite3.Error:
        pass
    return conn


# --- per-table parts ------------------------------------------------------------------------------------------


@dataclass
class _Part:
    """The rows of one table (or one slice of it), as arrays; categorical columns as (categories, codes)."""

    kind: str
    category: str
    start: np.ndarray
    dur: np.ndarray
    name: tuple[np.ndarray, np.ndarray]
    raw: tuple[np.ndarray, np.ndarray] | None = None
    ints: dict[str, np.ndarray] = field(default_factory=dict)  # pid tid device stream correlation bytes
    pageable: np.ndarray | None = None
    copy_kind: np.ndarray | None = None  # codes into COPY_KINDS
    grid: tuple[np.ndarray, np.ndarray] | None = None
    block: tuple[np.ndarray, np.ndarray] | None = None
    registers: np.ndarray | None = None
    shared_mem: np.ndarray | None = None
    open_end: np.ndarray | None = None  # NVTX ranges still open at the end of the capture

    @property
    def n(self) -> int:
        return len(self.start)

    def take(self, mask: np.ndarray, kind: str) -> "_Part":
        def cut(x):
            if x is None:
                return None
            if isinstance(x, tuple):
                return (x[0], x[1][mask])
            return x[mask]

        return _Part(
            kind=kind,
            category=self.category,
            start=self.start[mask],
            dur=self.dur[mask],
            name=cut(self.name),
            raw=cut(self.raw),
            ints={k: v[mask] for k, v in self.ints.items()},
            pageable=cut(self.pageable),
            copy_kind=cut(self.copy_kind),
            grid=cut(self.grid),
            block=cut(self.block),
            registers=cut(self.registers),
            shared_mem=cut(self.shared_mem),
            open_end=cut(self.open_end),
        )


def _factorize(values) -> tuple[np.ndarray, np.ndarray]:
    codes, cats = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=True)
    return np.asarray(cats, dtype=object), codes.astype(np.int64)


def _relabel(cats: np.ndarray, codes: np.ndarray, fn: Callable[[str], str]) -> tuple[np.ndarray, np.ndarray]:
    """Apply ``fn`` to each category (not each row); categories that become equal are merged."""
    new_cats, remap = _factorize([fn(c) for c in cats])
    return new_cats, np.where(codes >= 0, remap[np.clip(codes, 0, None)], -1) if len(remap) else codes


def _lookup(strings: np.ndarray, ids: np.ndarray) -> list[str]:
    out = []
    for i in ids.tolist():
        s = strings[i] if 0 <= i < len(strings) else None
        out.append(s if s is not None else f"<string {i}>")
    return out


def _names(strings: np.ndarray, ids: np.ndarray, fn: Callable[[str], str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    uniq, inv = np.unique(ids, return_inverse=True)
    labels = _lookup(strings, uniq)
    if fn is not None:
        labels = [fn(s) for s in labels]
    cats, remap = _factorize(labels)
    return cats, remap[inv] if len(remap) else inv.astype(np.int64)


def _strip_version(name: str) -> str:
    return _VERSION_SUFFIX.sub("", name)


def readable_kernel_name(demangled: str) -> str:
    """``void ns::kern<float, 4>(float*, int)`` -> ``kern``: what a person calls the kernel."""
    s = demangled.strip()
    if s.startswith("void "):
        s = s[5:]
    depth, cut = 0, len(s)
    for i, ch in enumerate(s):  # drop the parameter list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    s = s[:cut]
    s = re.sub(r"<.*>", "", s)
    return s.rsplit("::", 1)[-1] or demangled


def _nvtx_display(text: str) -> str:
    """PyTorch ``emit_nvtx`` labels (``aten::mul, op_id = 7``) shown as the op name."""
    m = _EMIT_NVTX.match(text)
    return m.group(1) if m else text


def _col(cols: set[str], name: str, default: str = "0") -> str:
    return f'"{name}"' if name in cols else default


def _gpu_fields(cols: set[str]) -> list[Field]:
    return [
        Field("start", "start"),
        Field("dur", _DUR, 40),
        Field("device", _col(cols, "deviceId"), 8),
        Field("correlation", _col(cols, "correlationId", "-1"), 32, none=-1, sentinel=True),
        Field("pid", _PID if "globalPid" in cols else "0", 24),
        Field("stream", _col(cols, "streamId", "-1"), 32, none=-1, sentinel=True),
    ]


def _read_kernels(conn, cols: set[str], strings: np.ndarray, id_bits: int) -> _Part:
    f = _gpu_fields(cols) + [
        Field("short", _col(cols, "shortName", "-1"), id_bits, none=-1, sentinel=True),
        Field("demangled", _col(cols, "demangledName", "-1"), id_bits, none=-1, sentinel=True),
        Field("regs", f'min({_col(cols, "registersPerThread")}, 1023)', 10),
        Field("smem", f'min({_col(cols, "staticSharedMemory")} + {_col(cols, "dynamicSharedMemory")}, 4294967295)', 32),
        # CUDA limits: gridX < 2^31, gridY/Z <= 65535, blockX/Y <= 1024, blockZ <= 64.
        Field("grid", f'({_col(cols, "gridX")} & 2147483647) | (({_col(cols, "gridY")} & 65535) << 31) | (({_col(cols, "gridZ")} & 65535) << 47)', 63),
        Field("block", f'({_col(cols, "blockX")} & 2047) | (({_col(cols, "blockY")} & 2047) << 11) | (({_col(cols, "blockZ")} & 127) << 22)', 29),
    ]
    a = fetch(conn, S.KERNEL, f)
    # One unique pass over (short, demangled) gives both the display and the raw name per distinct kernel.
    key = (a["short"] + 1) * (1 << 32) + (a["demangled"] + 1)
    uniq, inv = np.unique(key, return_inverse=True)
    shorts = _lookup(strings, (uniq >> 32) - 1)
    longs = _lookup(strings, (uniq & 0xFFFFFFFF) - 1)
    display, raw = [], []
    for s, d in zip(shorts, longs):
        s_ok, d_ok = not s.startswith("<string "), not d.startswith("<string ")
        raw.append(d if d_ok else s)
        display.append(s if s_ok and s else (readable_kernel_name(d) if d_ok else d))
    n_cats, n_map = _factorize(display)
    r_cats, r_map = _factorize(raw)
    return _Part(
        kind="kernel",
        category=S.KERNEL,
        start=a["start"],
        dur=a["dur"],
        name=(n_cats, n_map[inv]),
        raw=(r_cats, r_map[inv]),
        ints={k: a[k] for k in ("pid", "device", "stream", "correlation")},
        grid=_dims(a["grid"], (31, 16, 16)),
        block=_dims(a["block"], (11, 11, 7)),
        registers=a["regs"].astype(np.float64),
        shared_mem=a["smem"].astype(np.float64),
    )


def _dims(packed: np.ndarray, widths: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    uniq, inv = np.unique(packed, return_inverse=True)
    labels = []
    for v in uniq.tolist():
        x = v & ((1 << widths[0]) - 1)
        y = (v >> widths[0]) & ((1 << widths[1]) - 1)
        z = (v >> (widths[0] + widths[1])) & ((1 << widths[2]) - 1)
        labels.append(f"{x},{y},{z}")
    return np.array(labels, dtype=object), inv.astype(np.int64)


def _read_memcpy(conn, cols: set[str]) -> _Part:
    f = _gpu_fields(cols) + [
        Field("copy", _col(cols, "copyKind"), 6),
        Field("src", _col(cols, "srcKind", "7"), 4, none=7),
        Field("dst", _col(cols, "dstKind", "7"), 4, none=7),
        Field("bytes", _col(cols, "bytes")),
    ]
    a = fetch(conn, S.MEMCPY, f)
    kind_code = {k: COPY_KINDS.index(v) for k, v in S.MEMCPY_KIND.items()}
    table = np.full(64, COPY_KINDS.index("other"), dtype=np.int64)
    for k, c in kind_code.items():
        table[k] = c
    ck = table[a["copy"]]
    pageable = (a["src"] == S.MEM_KIND_PAGEABLE) | (a["dst"] == S.MEM_KIND_PAGEABLE)
    # Names as kineto prints them ("Memcpy HtoD (Pageable -> Device)") so rules can match either source.
    key = a["copy"] * 256 + a["src"] * 16 + a["dst"]
    uniq, inv = np.unique(key, return_inverse=True)
    labels = []
    for k in uniq.tolist():
        c, src, dst = k // 256, (k // 16) % 16, k % 16
        labels.append(f"Memcpy {S.MEMCPY_KIND.get(c, 'other')} ({S.MEM_KIND.get(src, 'Unknown')} -> {S.MEM_KIND.get(dst, 'Unknown')})")
    cats, remap = _factorize(labels)
    return _Part(
        kind="memcpy",
        category=S.MEMCPY,
        start=a["start"],
        dur=a["dur"],
        name=(cats, remap[inv]),
        ints={k: a[k] for k in ("pid", "device", "stream", "correlation", "bytes")},
        pageable=pageable,
        copy_kind=ck,
    )


def _read_memset(conn, cols: set[str]) -> _Part:
    f = _gpu_fields(cols) + [Field("mem", _col(cols, "memKind", "2"), 4, none=7), Field("bytes", _col(cols, "bytes"))]
    a = fetch(conn, S.MEMSET, f)
    uniq, inv = np.unique(a["mem"], return_inverse=True)
    cats, remap = _factorize([f"Memset ({S.MEM_KIND.get(m, 'Unknown')})" for m in uniq.tolist()])
    return _Part(
        kind="memset",
        category=S.MEMSET,
        start=a["start"],
        dur=a["dur"],
        name=(cats, remap[inv]),
        ints={k: a[k] for k in ("pid", "device", "stream", "correlation", "bytes")},
        pageable=a["mem"] == S.MEM_KIND_PAGEABLE,
    )


def _read_graphs(conn, cols: set[str]) -> _Part:
    """Graph-level trace: one row per graph launch, GPU-busy for its whole span (kind kernel)."""
    a = fetch(conn, S.GRAPH_TRACE, _gpu_fields(cols) + [Field("graph", _col(cols, "graphId", "-1"), none=-1)])
    uniq, inv = np.unique(a["graph"], return_inverse=True)
    cats, remap = _factorize([f"CUDA graph {g}" if g >= 0 else "CUDA graph" for g in uniq.tolist()])
    return _Part(
        kind="kernel",
        category=S.GRAPH_TRACE,
        start=a["start"],
        dur=a["dur"],
        name=(cats, remap[inv]),
        ints={k: a[k] for k in ("pid", "device", "stream", "correlation")},
    )


def _read_syncs(conn, cols: set[str]) -> _Part:
    st = "syncType" if "syncType" in cols else ("deprecatedSyncType" if "deprecatedSyncType" in cols else "0")
    a = fetch(conn, S.SYNC, _gpu_fields(cols) + [Field("type", st, 8)])
    uniq, inv = np.unique(a["type"], return_inverse=True)
    names = [S.SYNC_TYPE.get(t, ("Unknown Sync", f"sync type {t}")) for t in uniq.tolist()]
    n_cats, n_map = _factorize([n for n, _ in names])
    r_cats, r_map = _factorize([r for _, r in names])
    return _Part(
        kind="gpu_sync",
        category=S.SYNC,
        start=a["start"],
        dur=a["dur"],
        name=(n_cats, n_map[inv]),
        raw=(r_cats, r_map[inv]),
        ints={k: a[k] for k in ("pid", "device", "stream", "correlation")},
    )


def _host_fields(cols: set[str]) -> list[Field]:
    return [
        Field("start", "start"),
        Field("dur", _DUR, 40),
        Field("pid", _TPID if "globalTid" in cols else "0", 24),
        Field("tid", _TTID if "globalTid" in cols else "0", 24),
    ]


def _read_runtime(conn, cols: set[str], strings: np.ndarray, id_bits: int) -> _Part:
    f = _host_fields(cols) + [
        Field("correlation", _col(cols, "correlationId", "-1"), 32, none=-1, sentinel=True),
        Field("name", _col(cols, "nameId", "-1"), id_bits, none=-1, sentinel=True),
    ]
    a = fetch(conn, S.RUNTIME, f)
    uniq, inv = np.unique(a["name"], return_inverse=True)
    raw = _lookup(strings, uniq)
    r_cats, r_map = _factorize(raw)
    n_cats, n_map = _factorize([_strip_version(s) for s in raw])
    return _Part(
        kind="runtime",
        category=S.RUNTIME,
        start=a["start"],
        dur=a["dur"],
        name=(n_cats, n_map[inv]),
        raw=(r_cats, r_map[inv]),
        ints={k: a[k] for k in ("pid", "tid", "correlation")},
    )


def _read_host_other(conn, table: str, cols: set[str], strings: np.ndarray, id_bits: int, category: str) -> _Part:
    """OS runtime calls and profiler overhead: kind ``other``, kept so rules can say what the host was doing."""
    f = _host_fields(cols) + [Field("name", _col(cols, "nameId", "-1"), id_bits, none=-1, sentinel=True)]
    a = fetch(conn, table, f)
    if "nameId" in cols:
        cats, codes = _names(strings, a["name"])
    else:
        cats, codes = np.array([table], dtype=object), np.zeros(len(a["start"]), dtype=np.int64)
    return _Part(kind="other", category=category, start=a["start"], dur=a["dur"], name=(cats, codes), ints={k: a[k] for k in ("pid", "tid")})


def _read_nvtx(conn, cols: set[str], strings: np.ndarray, id_bits: int) -> list[_Part]:
    types = ", ".join(str(t) for t in (*S.NVTX_RANGES, S.NVTX_MARK))
    where = f"eventType IN ({types})"
    f = [
        Field("start", "start"),
        Field("end", '"end"', none=0),
        Field("etype", "eventType", 8),
        Field("has_end", '"end" IS NOT NULL', 1),
        Field("pid", _TPID if "globalTid" in cols else "0", 24),
        Field("tid", _TTID if "globalTid" in cols else "0", 24),
        Field("text_id", _col(cols, "textId", "-1"), id_bits, none=-1, sentinel=True),
    ]
    a = fetch(conn, S.NVTX, f, where)
    n = len(a["start"])
    if n == 0:
        return []
    text = fetch_text(conn, S.NVTX, '"text"', where) if "text" in cols else np.full(n, None, dtype=object)
    has_id = a["text_id"] >= 0
    if has_id.any():
        ids = np.clip(a["text_id"], 0, max(len(strings) - 1, 0))
        from_ids = strings[ids] if len(strings) else np.full(n, None, dtype=object)
        text = np.where(has_id & (text == None), from_ids, text)  # noqa: E711 (elementwise)
    text = np.where(text == None, "<unnamed range>", text)  # noqa: E711
    raw_cats, codes = _factorize(text)
    disp_cats, disp_codes = _relabel(raw_cats, codes, _nvtx_display)
    open_end = a["has_end"] == 0
    dur = np.where(open_end, 0, np.maximum(a["end"] - a["start"], 0))
    part = _Part(
        kind="annotation",
        category=S.NVTX,
        start=a["start"],
        dur=dur,
        name=(disp_cats, disp_codes),
        raw=(raw_cats, codes),
        ints={k: a[k] for k in ("pid", "tid")},
        open_end=open_end & (a["etype"] != S.NVTX_MARK),
    )
    is_range = np.isin(a["etype"], S.NVTX_RANGES)
    step_cat = np.array([bool(_STEP.match(str(c))) for c in disp_cats], dtype=bool)
    is_step = is_range & (step_cat[np.clip(disp_codes, 0, None)] if len(step_cat) else False)
    out = []
    for mask, kind in ((is_range & ~is_step, "annotation"), (is_step, "step"), (~is_range, "other")):
        if mask.any():
            out.append(part.take(mask, kind))
    return out


# --- assembly ---------------------------------------------------------------------------------------------


def _concat_cat(pairs: list[tuple[np.ndarray, np.ndarray] | None], sizes: list[int]) -> pd.Categorical:
    """Concatenate per-part (categories, codes) into one Categorical; None parts are missing values."""
    all_cats = [c for p in pairs if p is not None for c in p[0]]
    gcats, gmap = _factorize(all_cats) if all_cats else (np.empty(0, dtype=object), np.empty(0, dtype=np.int64))
    chunks, offset = [], 0
    for p, n in zip(pairs, sizes):
        if p is None:
            chunks.append(np.full(n, -1, dtype=np.int64))
            continue
        cats, codes = p
        local = gmap[offset : offset + len(cats)]
        offset += len(cats)
        chunks.append(np.where(codes >= 0, local[np.clip(codes, 0, None)], -1) if len(local) else np.full(n, -1, dtype=np.int64))
    codes = np.concatenate(chunks) if chunks else np.empty(0, dtype=np.int64)
    return pd.Categorical.from_codes(codes, categories=pd.Index(gcats, dtype=object))


def _assemble(parts: list[_Part], thread_names: dict[int, str]) -> pd.DataFrame:
    sizes = [p.n for p in parts]
    total = sum(sizes)

    def ints(name: str, default: int) -> np.ndarray:
        return np.concatenate([p.ints.get(name, np.full(p.n, default, dtype=np.int64)) for p in parts]) if parts else np.empty(0, np.int64)

    def floats(attr: str) -> np.ndarray:
        return np.concatenate([getattr(p, attr) if getattr(p, attr) is not None else np.full(p.n, np.nan) for p in parts])

    kind_codes = np.concatenate([np.full(p.n, KINDS.index(p.kind), dtype=np.int64) for p in parts]) if parts else np.empty(0, np.int64)
    copy_codes = np.concatenate([p.copy_kind if p.copy_kind is not None else np.full(p.n, -1, dtype=np.int64) for p in parts]) if parts else np.empty(0, np.int64)
    cat_names = [p.category for p in parts]
    tables, tcodes = _factorize(cat_names) if parts else (np.empty(0, dtype=object), np.empty(0, np.int64))
    category = pd.Categorical.from_codes(
        np.concatenate([np.full(p.n, c, dtype=np.int64) for p, c in zip(parts, tcodes)]) if parts else np.empty(0, np.int64),
        categories=pd.Index(tables, dtype=object),
    )
    columns = {
        "kind": pd.Categorical.from_codes(kind_codes, categories=list(KINDS)),
        "name": _concat_cat([p.name for p in parts], sizes),
        "raw_name": _concat_cat([p.raw if p.raw is not None else p.name for p in parts], sizes),
        "start_ns": np.concatenate([p.start for p in parts]) if parts else np.empty(0, np.int64),
        "dur_ns": np.concatenate([p.dur for p in parts]) if parts else np.empty(0, np.int64),
        "pid": ints("pid", 0),
        "tid": ints("tid", 0),
        "device": ints("device", -1),
        "stream": ints("stream", -1),
        "correlation": ints("correlation", -1),
        "bytes": ints("bytes", 0),
        "copy_kind": pd.Categorical.from_codes(copy_codes, categories=list(COPY_KINDS)),
        "pageable": np.concatenate([p.pageable if p.pageable is not None else np.zeros(p.n, dtype=bool) for p in parts]) if parts else np.empty(0, bool),
    }
    optional = {
        "category": category,
        "grid": _concat_cat([p.grid for p in parts], sizes),
        "block": _concat_cat([p.block for p in parts], sizes),
        "registers": floats("registers") if parts else np.empty(0),
        "shared_mem": floats("shared_mem") if parts else np.empty(0),
    }
    if thread_names and total:
        optional["thread_name"] = _thread_names(columns, thread_names)
    return build_events(columns, optional)


def _thread_names(columns: dict, names: dict[int, str]) -> pd.Categorical:
    """Host rows get their thread's name (ThreadNames keyed by pid/tid); GPU rows stay missing."""
    keys = np.array(sorted(names), dtype=np.int64)
    cats, remap = _factorize([names[k] for k in keys.tolist()])
    row_keys = (columns["pid"] << 24) | columns["tid"]
    pos = np.clip(np.searchsorted(keys, row_keys), 0, len(keys) - 1)
    hit = (keys[pos] == row_keys) & (columns["device"] < 0)
    codes = np.where(hit, remap[pos], -1)
    return pd.Categorical.from_codes(codes, categories=pd.Index(cats, dtype=object))


def _fix_sync_devices(parts: list[_Part]) -> None:
    """Sync records say device 0 even for another GPU's stream; use the device its (pid, stream) ran work on."""
    gpu = [p for p in parts if p.kind in ("kernel", "memcpy", "memset")]
    syncs = [p for p in parts if p.kind == "gpu_sync"]
    if not gpu or not syncs:
        return
    pid = np.concatenate([p.ints["pid"] for p in gpu])
    stream = np.concatenate([p.ints["stream"] for p in gpu])
    dev = np.concatenate([p.ints["device"] for p in gpu])
    key = (pid << 32) | (stream & 0xFFFFFFFF)
    keys, first = np.unique(key, return_index=True)
    # Fallback for streams with no GPU work in the file: a process that used a single device.
    pairs = np.unique(np.stack([pid, dev], axis=1), axis=0)
    pids, n_dev = np.unique(pairs[:, 0], return_counts=True)
    single = pids[n_dev == 1]
    single_dev = pairs[np.isin(pairs[:, 0], single), 1]
    for p in syncs:
        k = (p.ints["pid"] << 32) | (p.ints["stream"] & 0xFFFFFFFF)
        pos = np.clip(np.searchsorted(keys, k), 0, len(keys) - 1)
        hit = (keys[pos] == k) & (p.ints["stream"] >= 0)
        fallback = p.ints["device"]
        if len(single):
            spos = np.clip(np.searchsorted(single, p.ints["pid"]), 0, len(single) - 1)
            fallback = np.where(single[spos] == p.ints["pid"], single_dev[spos], fallback)
        p.ints["device"] = np.where(hit, dev[first[pos]], fallback)


# --- metadata ---------------------------------------------------------------------------------------------


def _kv(conn, tables: dict[str, set[str]]) -> dict[str, str]:
    for t in S.META_TABLES:
        if t in tables and {"name", "value"} <= tables[t]:
            return {str(k): str(v) for k, v in conn.execute(f'SELECT name, value FROM "{t}"')}
    return {}


def _devices(conn, tables: dict[str, set[str]], seen: np.ndarray) -> list[DeviceInfo]:
    out: dict[int, DeviceInfo] = {}
    cols = tables.get("TARGET_INFO_GPU")
    if cols:
        want = ["id", "cuDevice", "name", "smCount", "totalMemory", "computeMajor", "computeMinor"]
        sel = ", ".join(f'"{c}"' if c in cols else "NULL" for c in want)
        for gid, cu, name, sms, mem, major, minor in conn.execute(f"SELECT {sel} FROM TARGET_INFO_GPU"):
            idx = cu if cu is not None else gid
            if idx is None or int(idx) in out:
                continue
            cc = f"{major}.{minor}" if major is not None and minor is not None else None
            out[int(idx)] = DeviceInfo(
                index=int(idx),
                name=name,
                sm_count=int(sms) if sms is not None else None,
                memory_bytes=int(mem) if mem is not None else None,
                compute_capability=cc,
                vendor="NVIDIA",
            )
    for d in np.unique(seen).tolist():
        if d >= 0 and d not in out:
            out[d] = DeviceInfo(index=int(d), vendor="NVIDIA")
    return [out[k] for k in sorted(out)]


def _clock(conn, tables: dict[str, set[str]], origin: int) -> tuple[int | None, str]:
    """Wall-clock time of ``origin`` (a raw row time) and which clock the rows use.

    Up to 2026.1 row times count from the capture start; 2026.2 writes the raw target clock, and then the
    session table's ``systemClockNs`` is the capture start on that clock.
    """
    cols = tables.get("TARGET_INFO_SESSION_START_TIME")
    if not cols or "utcEpochNs" not in cols:
        return None, "unknown"
    sys_col = '"systemClockNs"' if "systemClockNs" in cols else "NULL"
    row = conn.execute(f'SELECT "utcEpochNs", {sys_col} FROM TARGET_INFO_SESSION_START_TIME').fetchone()
    if not row or row[0] is None:
        return None, "unknown"
    utc, sysclk = int(row[0]), row[1]
    if sysclk is not None and origin >= int(sysclk) > 0:
        return utc + origin - int(sysclk), "target system clock"
    return utc + origin, "capture-relative"


# --- main reader ---------------------------------------------------------------------------------------------


def _read_sqlite(path: Path, progress: ProgressFn | None) -> Timeline:
    conn = _connect(path)
    try:
        return _read_conn(conn, path, progress)
    except sqlite3.DatabaseError as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TraceReadError(f"{path}: cannot read the nsys SQLite export ({msg})") from None
    finally:
        conn.close()


def _read_conn(conn: sqlite3.Connection, path: Path, progress: ProgressFn | None) -> Timeline:
    tables = table_columns(conn)
    if not (set(tables) & set(S.MARKER_TABLES)) and not any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in tables):
        raise TraceReadError(f"{path}: SQLite file without Nsight Systems tables (expected nsys export --type sqlite output)")
    meta_kv = _kv(conn, tables)
    meta = TraceMeta(source_format="nsys", path=str(path), tool="Nsight Systems", tool_version=meta_kv.get("EXPORT_PRODUCT_VERSION"))
    if meta_kv.get("EXPORT_SCHEMA_VERSION"):
        meta.extra["schema_version"] = meta_kv["EXPORT_SCHEMA_VERSION"]
    if not meta_kv:
        meta.warn("this nsys export has no export metadata table: the Nsight Systems version is unknown")

    strings = string_table(conn) if "StringIds" in tables else np.empty(0, dtype=object)
    id_bits = 31 if len(strings) < (1 << 31) - 1 else 64

    def step(msg: str) -> None:
        if progress:
            progress(msg)

    parts: list[_Part] = []
    readers = [
        (S.KERNEL, lambda c: [_read_kernels(conn, c, strings, id_bits)]),
        (S.GRAPH_TRACE, lambda c: [_read_graphs(conn, c)]),
        (S.MEMCPY, lambda c: [_read_memcpy(conn, c)]),
        (S.MEMSET, lambda c: [_read_memset(conn, c)]),
        (S.SYNC, lambda c: [_read_syncs(conn, c)]),
        (S.RUNTIME, lambda c: [_read_runtime(conn, c, strings, id_bits)]),
        (S.NVTX, lambda c: _read_nvtx(conn, c, strings, id_bits)),
        (S.OSRT, lambda c: [_read_host_other(conn, S.OSRT, c, strings, id_bits, "osrt")]),
        (S.PROFILER_OVERHEAD, lambda c: [_read_host_other(conn, S.PROFILER_OVERHEAD, c, strings, id_bits, S.PROFILER_OVERHEAD)]),
        (S.CUPTI_OVERHEAD, lambda c: [_read_host_other(conn, S.CUPTI_OVERHEAD, c, strings, id_bits, S.CUPTI_OVERHEAD)]),
    ]
    for table, reader in readers:
        cols = tables.get(table)
        if not cols or "start" not in cols or ("end" not in cols):
            continue
        step(f"reading {table}")
        parts.extend(p for p in reader(cols) if p.n)

    if not any(p.category in S.GPU_TABLES for p in parts):
        meta.warn(
            "no GPU activity recorded: the export has no CUDA kernel, memcpy or memset rows "
            "(profiled without --trace=cuda, or the capture ended before GPU work started)"
        )
    _fix_sync_devices(parts)
    _close_open_ranges(parts, meta)

    thread_names: dict[int, str] = {}
    if "ThreadNames" in tables and {"nameId", "globalTid"} <= tables["ThreadNames"] and len(strings):
        for name_id, gtid in conn.execute("SELECT nameId, globalTid FROM ThreadNames WHERE globalTid IS NOT NULL"):
            key = (((int(gtid) >> S.PID_SHIFT) & S.ID_MASK) << 24) | (int(gtid) & S.ID_MASK)
            if 0 <= name_id < len(strings) and strings[name_id] is not None:
                thread_names[key] = strings[name_id]

    step("building timeline")
    events = _assemble(parts, thread_names)
    origin = rebase(events)
    if (events["kind"] == "step").any():
        assign_steps(events)  # without step rows every row keeps step -1, which build_events already set

    meta.start_unix_ns, meta.extra["clock"] = _clock(conn, tables, origin)
    meta.devices = _devices(conn, tables, events["device"].to_numpy())
    meta.extra["processes"] = _processes(conn, tables)
    if "DERIVED_FROM" in meta_kv:
        meta.extra["derived_from"] = meta_kv["DERIVED_FROM"]
        meta.warn(
            f"this export is a time-window slice of {meta_kv['DERIVED_FROM']}: GPU work near its edges may lack "
            "the API call that launched it"
        )
    return Timeline(events=events, meta=meta)


def _close_open_ranges(parts: list[_Part], meta: TraceMeta) -> None:
    """NVTX ranges never closed (capture stopped inside them) last until the end of the capture."""
    ends = [int((p.start + p.dur).max()) for p in parts if p.n]
    if not ends:
        return
    last = max(ends)
    opened = 0
    for p in parts:
        if p.open_end is not None and p.open_end.any():
            p.dur = np.where(p.open_end, np.maximum(last - p.start, 0), p.dur)
            opened += int(p.open_end.sum())
    if opened:
        meta.warn(f"{opened} NVTX range(s) were still open when the capture stopped; they are shown until its end")


def _processes(conn, tables: dict[str, set[str]]) -> dict[int, str]:
    cols = tables.get("PROCESSES")
    if not cols or not {"pid", "name"} <= cols:
        return {}
    return {int(pid): str(name) for pid, name in conn.execute("SELECT pid, name FROM PROCESSES WHERE pid IS NOT NULL")}
