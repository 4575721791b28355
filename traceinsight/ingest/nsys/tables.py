"""Nsight Systems tables -> parts: one reader per SQLite table (kernels, copies, memsets, graphs, syncs, runtime
and driver calls, NVTX), each returning its rows as whole columns in a ``Part``; ``nsys`` assembles the parts into
the timeline. Every column is probed before use (tables and columns come and go across nsys versions), and names
are resolved once per distinct id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from traceinsight.model.timeline import COPY_KINDS
from traceinsight.ingest.nsys import schema as S
from traceinsight.ingest.nsys.sql import Field, fetch, fetch_text

_PID = f"((globalPid >> {S.PID_SHIFT}) & {S.ID_MASK})"
_TPID = f"((globalTid >> {S.PID_SHIFT}) & {S.ID_MASK})"
_TTID = f"(globalTid & {S.ID_MASK})"
# 40 bits: 18 minutes per row is plenty (longer rows are clipped). A row that ends before it starts, or whose end -
# start overflows int64 (SQLite then gives a REAL), is corrupt: it reads back as -1 and load drops and counts it.
_DUR = ('CASE WHEN "end" < start OR typeof("end" - start) = \'real\' THEN -1 '
        'ELSE min("end" - start, 1099511627774) END')
_VERSION_SUFFIX = re.compile(r"_v\d+$")
_STEP = re.compile(S.STEP_PATTERN, re.IGNORECASE)
_EMIT_NVTX = re.compile(r"^([A-Za-z_][\w:.<>~]*), (?:seq|op_id|sizes|stashed seq|input_op_ids)\b")


@dataclass
class Part:
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

    def take(self, mask: np.ndarray, kind: str) -> "Part":
        def cut(x):
            if x is None:
                return None
            if isinstance(x, tuple):
                return (x[0], x[1][mask])
            return x[mask]

        return Part(
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


def factorize(values) -> tuple[np.ndarray, np.ndarray]:
    codes, cats = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=True)
    return np.asarray(cats, dtype=object), codes.astype(np.int64)


def _relabel(cats: np.ndarray, codes: np.ndarray, fn: Callable[[str], str]) -> tuple[np.ndarray, np.ndarray]:
    """Apply ``fn`` to each category (not each row); categories that become equal are merged."""
    new_cats, remap = factorize([fn(c) for c in cats])
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
    cats, remap = factorize(labels)
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
        Field("dur", _DUR, 40, sentinel=True),
        Field("device", _col(cols, "deviceId"), 8),
        Field("correlation", _col(cols, "correlationId", "-1"), 32, none=-1, sentinel=True),
        Field("pid", _PID if "globalPid" in cols else "0", 24),
        Field("stream", _col(cols, "streamId", "-1"), 32, none=-1, sentinel=True),
    ]


def read_kernels(conn, cols: set[str], strings: np.ndarray, id_bits: int) -> Part:
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
    n_cats, n_map = factorize(display)
    r_cats, r_map = factorize(raw)
    return Part(
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


def read_memcpy(conn, cols: set[str]) -> Part:
    f = _gpu_fields(cols) + [
        Field("copy", _col(cols, "copyKind"), 6),
        Field("src", _col(cols, "srcKind", "7"), 4, none=7),
        Field("dst", _col(cols, "dstKind", "7"), 4, none=7),
        Field("bytes", _col(cols, "bytes")),
        Field("cause", _col(cols, "migrationCause"), 4),
    ]
    a = fetch(conn, S.MEMCPY, f)
    kind_code = {k: COPY_KINDS.index(v) for k, v in S.MEMCPY_KIND.items()}
    table = np.full(64, COPY_KINDS.index("other"), dtype=np.int64)
    for k, c in kind_code.items():
        table[k] = c
    ck = table[a["copy"]]
    pageable = (a["src"] == S.MEM_KIND_PAGEABLE) | (a["dst"] == S.MEM_KIND_PAGEABLE)
    # Names as kineto prints them ("Memcpy HtoD (Pageable -> Device)") so rules can match either source; a
    # unified-memory migration (no API call copies: the driver moves managed pages) says so and why
    # ("Unified Memory HtoD (page fault)"), so a gap it ends reads as managed memory being touched
    uvm = np.isin(a["copy"], S.UVM_COPY_KINDS)
    key = a["copy"] * 4096 + np.where(uvm, 256 + a["cause"] % 16, a["src"] * 16 + a["dst"])
    uniq, inv = np.unique(key, return_inverse=True)
    labels = []
    for k in uniq.tolist():
        c, rest = k // 4096, k % 4096
        if rest >= 256:
            labels.append(f"Unified Memory {S.MEMCPY_KIND.get(c, 'other')} ({S.MIGRATION_CAUSE.get(rest - 256, 'unknown cause')})")
            continue
        src, dst = rest // 16, rest % 16
        labels.append(f"Memcpy {S.MEMCPY_KIND.get(c, 'other')} ({S.MEM_KIND.get(src, 'Unknown')} -> {S.MEM_KIND.get(dst, 'Unknown')})")
    cats, remap = factorize(labels)
    return Part(
        kind="memcpy",
        category=S.MEMCPY,
        start=a["start"],
        dur=a["dur"],
        name=(cats, remap[inv]),
        ints={k: a[k] for k in ("pid", "device", "stream", "correlation", "bytes")},
        pageable=pageable,
        copy_kind=ck,
    )


def read_memset(conn, cols: set[str]) -> Part:
    f = _gpu_fields(cols) + [Field("mem", _col(cols, "memKind", "2"), 4, none=7), Field("bytes", _col(cols, "bytes"))]
    a = fetch(conn, S.MEMSET, f)
    uniq, inv = np.unique(a["mem"], return_inverse=True)
    cats, remap = factorize([f"Memset ({S.MEM_KIND.get(m, 'Unknown')})" for m in uniq.tolist()])
    return Part(
        kind="memset",
        category=S.MEMSET,
        start=a["start"],
        dur=a["dur"],
        name=(cats, remap[inv]),
        ints={k: a[k] for k in ("pid", "device", "stream", "correlation", "bytes")},
        pageable=a["mem"] == S.MEM_KIND_PAGEABLE,
    )


def read_graphs(conn, cols: set[str]) -> Part:
    """Graph-level trace: one row per graph launch, GPU-busy for its whole span (kind kernel)."""
    a = fetch(conn, S.GRAPH_TRACE, _gpu_fields(cols) + [Field("graph", _col(cols, "graphId", "-1"), none=-1)])
    uniq, inv = np.unique(a["graph"], return_inverse=True)
    cats, remap = factorize([f"CUDA graph {g}" if g >= 0 else "CUDA graph" for g in uniq.tolist()])
    return Part(
        kind="kernel",
        category=S.GRAPH_TRACE,
        start=a["start"],
        dur=a["dur"],
        name=(cats, remap[inv]),
        ints={k: a[k] for k in ("pid", "device", "stream", "correlation")},
    )


def read_syncs(conn, cols: set[str]) -> Part:
    st = "syncType" if "syncType" in cols else ("deprecatedSyncType" if "deprecatedSyncType" in cols else "0")
    a = fetch(conn, S.SYNC, _gpu_fields(cols) + [Field("type", st, 8)])
    uniq, inv = np.unique(a["type"], return_inverse=True)
    names = [S.SYNC_TYPE.get(t, ("Unknown Sync", f"sync type {t}")) for t in uniq.tolist()]
    n_cats, n_map = factorize([n for n, _ in names])
    r_cats, r_map = factorize([r for _, r in names])
    return Part(
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
        Field("dur", _DUR, 40, sentinel=True),
        Field("pid", _TPID if "globalTid" in cols else "0", 24),
        Field("tid", _TTID if "globalTid" in cols else "0", 24),
    ]


def read_runtime(conn, cols: set[str], strings: np.ndarray, id_bits: int) -> Part:
    f = _host_fields(cols) + [
        Field("correlation", _col(cols, "correlationId", "-1"), 32, none=-1, sentinel=True),
        Field("name", _col(cols, "nameId", "-1"), id_bits, none=-1, sentinel=True),
    ]
    a = fetch(conn, S.RUNTIME, f)
    uniq, inv = np.unique(a["name"], return_inverse=True)
    raw = _lookup(strings, uniq)
    r_cats, r_map = factorize(raw)
    n_cats, n_map = factorize([_strip_version(s) for s in raw])
    return Part(
        kind="runtime",
        category=S.RUNTIME,
        start=a["start"],
        dur=a["dur"],
        name=(n_cats, n_map[inv]),
        raw=(r_cats, r_map[inv]),
        ints={k: a[k] for k in ("pid", "tid", "correlation")},
    )


def read_host_other(conn, table: str, cols: set[str], strings: np.ndarray, id_bits: int, category: str) -> Part:
    """OS runtime calls and profiler overhead: kind ``other``, kept so rules can say what the host was doing."""
    f = _host_fields(cols) + [Field("name", _col(cols, "nameId", "-1"), id_bits, none=-1, sentinel=True)]
    a = fetch(conn, table, f)
    if "nameId" in cols:
        cats, codes = _names(strings, a["name"])
    else:
        cats, codes = np.array([table], dtype=object), np.zeros(len(a["start"]), dtype=np.int64)
    return Part(kind="other", category=category, start=a["start"], dur=a["dur"], name=(cats, codes), ints={k: a[k] for k in ("pid", "tid")})


def read_nvtx(conn, cols: set[str], strings: np.ndarray, id_bits: int) -> list[Part]:
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
    raw_cats, codes = factorize(text)
    disp_cats, disp_codes = _relabel(raw_cats, codes, _nvtx_display)
    open_end = a["has_end"] == 0
    # judged in float first: end - start in int64 could wrap; a range that ends before it starts is corrupt (-1:
    # load drops and counts it)
    span = a["end"].astype(np.float64) - a["start"].astype(np.float64)
    bad = ~open_end & ((span < 0) | (span > float(1 << 62)))
    dur = np.where(open_end | bad, np.where(bad, -1, 0), a["end"] - np.where(bad, a["end"], a["start"]))
    part = Part(
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
