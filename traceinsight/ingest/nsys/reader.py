"""Nsight Systems: ``nsys export --type sqlite`` files (every schema from 2022.1 to 2026.x) and ``.nsys-rep``.

The SQLite export has one table per record kind, created only when it has rows, with columns added over
the years, so every table and column is probed before use. Each table is read columnar, with small columns
packed into 63-bit words and rowid ranges scanned in parallel (see ``sql``); names are resolved once per
distinct id, never per row. The per-table readers live in ``tables``; this module detects the format,
assembles their parts into the timeline and reads the metadata (devices, clock, processes).
The file is opened read-only and immutable: the reader must not leave a journal or touch the user's file.
``.nsys-rep`` is NVIDIA's closed binary format; only ``nsys export`` reads it.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import sqlite3
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pandas as pd

from traceinsight.vocab.errors import TraceReadError
from traceinsight.model.timeline import COPY_KINDS, KINDS, TIME_LIMIT_NS, DeviceInfo, TraceMeta
from traceinsight.ingest.byteio import resolve_max_bytes
from traceinsight.ingest.parts import ReadResult, Rows
from traceinsight.ingest.nsys import schema as S
from traceinsight.ingest.nsys.sniff import REP_MAGIC, REP_SUFFIXES, SQLITE_MAGIC, sniff  # noqa: F401  (sniff: the package's entry point)
from traceinsight.ingest.nsys.sql import MAX_VALUE_BYTES, UNTYPED_ROWS, connect, string_table, table_columns
from traceinsight.ingest.nsys.memory import read_memory
from traceinsight.ingest.nsys.tables import (Part, factorize, read_graphs, read_host_other, read_kernels, read_memcpy, read_memset,
                          read_nvtx, read_runtime, read_syncs)


ProgressFn = Callable[[str], None]


# --- detection --------------------------------------------------------------------------------------------




# --- entry point ------------------------------------------------------------------------------------------


def read(path: Path, progress: ProgressFn | None = None, max_bytes: int | None = None, **options) -> ReadResult:
    """Read an nsys export; a ``.nsys-rep`` is first converted with ``nsys export`` when nsys is installed."""
    path = Path(path)
    with open(path, "rb") as fh:
        head = fh.read(256)
    if head.startswith(SQLITE_MAGIC):
        return _read_sqlite(path, progress, resolve_max_bytes(max_bytes))
    if path.name.lower().endswith(REP_SUFFIXES) or REP_MAGIC in head:
        return _read_report(path, progress)
    raise TraceReadError(f"{path}: not an Nsight Systems SQLite export (expected the output of nsys export --type sqlite)")


def export_command(path: Path, output: str = "trace.sqlite") -> str:
    """The command a user runs to turn a report into what we read."""
    return f"nsys export --type sqlite -o {shlex.quote(output)} {shlex.quote(str(path))}"


#: Names the nsys command-line tool has; TRACEINSIGHT_NSYS may point at it, and at nothing else.
NSYS_NAMES = ("nsys", "nsys.exe")


def nsys_binary() -> str | None:
    """The nsys to run: ``TRACEINSIGHT_NSYS`` when it names an executable file called nsys, else nsys on PATH.

    The variable exists for installs outside PATH; it must not become a way to run any program (a CI job that
    analyses untrusted traces may inherit it), so anything not named nsys is refused with a clear error."""
    forced = os.environ.get("TRACEINSIGHT_NSYS")
    if forced:
        p = Path(forced)
        if p.name not in NSYS_NAMES:
            raise TraceReadError(f"TRACEINSIGHT_NSYS must name the nsys executable (a file called nsys), not {p.name!r}")
        if not (p.is_file() and os.access(p, os.X_OK)):
            raise TraceReadError(f"TRACEINSIGHT_NSYS={forced!r} is not an executable file")
        return str(p)
    return shutil.which("nsys")


def _read_report(path: Path, progress: ProgressFn | None) -> ReadResult:
    nsys = nsys_binary()
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
        result = _read_sqlite(out, progress)
    result.meta.path = str(path)
    result.meta.extra["converted_with"] = " ".join(cmd[:5])
    return result


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection that sees every committed row and writes nothing next to the user's file.

    ``immutable=1`` (no lock, no journal, no -shm) ignores a ``-wal`` file, whose committed pages SQLite has not yet
    copied back (an export still open, or copied mid-write). When a non-empty -wal sits next to the database, both
    are copied into a private temporary folder and opened there, where SQLite may apply the log."""
    wal = Path(str(path) + "-wal")
    try:
        has_wal = wal.is_file() and wal.stat().st_size > 0
    except OSError:
        has_wal = False
    if not has_wal:
        conn = connect(path)
        try:
            yield conn
        finally:
            conn.close()
        return
    with tempfile.TemporaryDirectory(prefix="traceinsight-wal-") as tmp:
        copy = Path(tmp) / "trace.sqlite"
        try:
            shutil.copyfile(path, copy)
            shutil.copyfile(wal, Path(str(copy) + "-wal"))
        except OSError as exc:
            raise TraceReadError(f"{path}: has a -wal file with committed data, and copying both to read it failed ({exc})") from None
        conn = connect(copy, immutable=False)
        try:
            yield conn
        finally:
            conn.close()




# --- assembly ---------------------------------------------------------------------------------------------


def _concat_cat(pairs: list[tuple[np.ndarray, np.ndarray] | None], sizes: list[int]) -> pd.Categorical:
    """Concatenate per-part (categories, codes) into one Categorical; None parts are missing values."""
    all_cats = [c for p in pairs if p is not None for c in p[0]]
    gcats, gmap = factorize(all_cats) if all_cats else (np.empty(0, dtype=object), np.empty(0, dtype=np.int64))
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


def _assemble(parts: list[Part], thread_names: dict[int, str]) -> Rows:
    sizes = [p.n for p in parts]
    total = sum(sizes)

    def ints(name: str, default: int) -> np.ndarray:
        return np.concatenate([p.ints.get(name, np.full(p.n, default, dtype=np.int64)) for p in parts]) if parts else np.empty(0, np.int64)

    def floats(attr: str) -> np.ndarray:
        return np.concatenate([getattr(p, attr) if getattr(p, attr) is not None else np.full(p.n, np.nan) for p in parts])

    kind_codes = np.concatenate([np.full(p.n, KINDS.index(p.kind), dtype=np.int64) for p in parts]) if parts else np.empty(0, np.int64)
    copy_codes = np.concatenate([p.copy_kind if p.copy_kind is not None else np.full(p.n, -1, dtype=np.int64) for p in parts]) if parts else np.empty(0, np.int64)
    cat_names = [p.category for p in parts]
    tables, tcodes = factorize(cat_names) if parts else (np.empty(0, dtype=object), np.empty(0, np.int64))
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
    return Rows(columns, optional)


def _thread_names(columns: dict, names: dict[int, str]) -> pd.Categorical:
    """Host rows get their thread's name (ThreadNames keyed by pid/tid); GPU rows stay missing."""
    keys = np.array(sorted(names), dtype=np.int64)
    cats, remap = factorize([names[k] for k in keys.tolist()])
    row_keys = (columns["pid"] << 24) | columns["tid"]
    pos = np.clip(np.searchsorted(keys, row_keys), 0, len(keys) - 1)
    hit = (keys[pos] == row_keys) & (columns["device"] < 0)
    codes = np.where(hit, remap[pos], -1)
    return pd.Categorical.from_codes(codes, categories=pd.Index(cats, dtype=object))


def _fix_sync_devices(parts: list[Part]) -> None:
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


def _as_int(v) -> int | None:
    """A metadata cell as a whole number within int64, or None: SQLite keeps whatever type was written (text, a
    blob, NaN, infinity, a float past int64), and a bad cell loses its fact, not the trace."""
    if isinstance(v, int):
        return int(v) if -(1 << 63) <= v < (1 << 63) else None
    if isinstance(v, float) and np.isfinite(v) and abs(v) < 2.0 ** 63:
        return int(v)
    return None


def _text(v) -> str | None:
    if v is None:
        return None
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _devices(conn, tables: dict[str, set[str]], seen: np.ndarray) -> list[DeviceInfo]:
    out: dict[int, DeviceInfo] = {}
    cols = tables.get("TARGET_INFO_GPU")
    if cols:
        want = ["id", "cuDevice", "name", "smCount", "totalMemory", "computeMajor", "computeMinor"]
        sel = ", ".join(f'"{c}"' if c in cols else "NULL" for c in want)
        for gid, cu, name, sms, mem, major, minor in conn.execute(f"SELECT {sel} FROM TARGET_INFO_GPU"):
            idx = _as_int(cu) if cu is not None else _as_int(gid)
            if idx is None or idx in out:
                continue
            cc = f"{major}.{minor}" if major is not None and minor is not None else None
            out[idx] = DeviceInfo(
                index=idx,
                name=_text(name),
                sm_count=_as_int(sms),
                memory_bytes=_as_int(mem),
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
    utc = _as_int(row[0]) if row else None
    if utc is None:
        return None, "unknown"
    sysclk = _as_int(row[1])
    if sysclk is not None and origin >= sysclk > 0:
        at, clock = utc + origin - sysclk, "target system clock"
    else:
        at, clock = utc + origin, "capture-relative"
    return (at, clock) if 0 <= at < 1 << 63 else (None, "unknown")  # a corrupt session start: no wall clock


# --- main reader ---------------------------------------------------------------------------------------------


def _read_sqlite(path: Path, progress: ProgressFn | None, max_bytes: int | None = None) -> ReadResult:
    untyped: dict[str, int] = {}
    token = UNTYPED_ROWS.set(untyped)
    try:
        with _opened(path) as conn:
            result = _read_conn(conn, path, progress, max_bytes)
    except TraceReadError as exc:
        msg = str(exc)
        raise type(exc)(msg if msg.startswith(str(path)) else f"{path}: {msg}") from None
    except sqlite3.DatabaseError as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "too big" in msg:
            msg += f": a value over {MAX_VALUE_BYTES >> 20} MiB, which no nsys export holds"
        raise TraceReadError(f"{path}: cannot read the nsys SQLite export ({msg})") from None
    finally:
        UNTYPED_ROWS.reset(token)
    for table, n in sorted(untyped.items()):
        result.meta.warn(f"{n:,} {table} rows whose start or end is not an integer (TEXT, BLOB or REAL; nsys writes integer ns) "
                         "were dropped")
    return result


def _read_conn(conn: sqlite3.Connection, path: Path, progress: ProgressFn | None, max_bytes: int | None = None) -> ReadResult:
    tables = table_columns(conn)
    if not (set(tables) & set(S.MARKER_TABLES)) and not any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in tables):
        raise TraceReadError(f"{path}: SQLite file without Nsight Systems tables (expected nsys export --type sqlite output)")
    meta_kv = _kv(conn, tables)
    meta = TraceMeta(source_format="nsys", path=str(path), tool="Nsight Systems", tool_version=meta_kv.get("EXPORT_PRODUCT_VERSION"))
    if meta_kv.get("EXPORT_SCHEMA_VERSION"):
        meta.extra["schema_version"] = meta_kv["EXPORT_SCHEMA_VERSION"]
    if "traceinsight" in meta_kv.get("DERIVED_BY", ""):  # written by tests/helpers/nsys_writer.py, not by nsys
        meta.extra["generated"] = f"every event generated ({meta_kv['DERIVED_BY']})"
    if not meta_kv:
        meta.warn("this nsys export has no export metadata table: the Nsight Systems version is unknown")

    strings = string_table(conn, max_bytes) if "StringIds" in tables else np.empty(0, dtype=object)
    id_bits = 31 if len(strings) < (1 << 31) - 1 else 64

    def step(msg: str) -> None:
        if progress:
            progress(msg)

    parts: list[Part] = []
    readers = [
        (S.KERNEL, lambda c: [read_kernels(conn, c, strings, id_bits)]),
        (S.GRAPH_TRACE, lambda c: [read_graphs(conn, c)]),
        (S.MEMCPY, lambda c: [read_memcpy(conn, c)]),
        (S.MEMSET, lambda c: [read_memset(conn, c)]),
        (S.SYNC, lambda c: [read_syncs(conn, c)]),
        (S.RUNTIME, lambda c: [read_runtime(conn, c, strings, id_bits)]),
        (S.NVTX, lambda c: read_nvtx(conn, c, strings, id_bits)),
        (S.OSRT, lambda c: [read_host_other(conn, S.OSRT, c, strings, id_bits, "osrt")]),
        (S.PROFILER_OVERHEAD, lambda c: [read_host_other(conn, S.PROFILER_OVERHEAD, c, strings, id_bits, S.PROFILER_OVERHEAD)]),
        (S.CUPTI_OVERHEAD, lambda c: [read_host_other(conn, S.CUPTI_OVERHEAD, c, strings, id_bits, S.CUPTI_OVERHEAD)]),
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
            name_id, gtid = _as_int(name_id), _as_int(gtid)
            if name_id is None or gtid is None:
                continue
            key = (((gtid >> S.PID_SHIFT) & S.ID_MASK) << 24) | (gtid & S.ID_MASK)
            if 0 <= name_id < len(strings) and strings[name_id] is not None:
                thread_names[key] = strings[name_id]

    step("arranging columns")
    rows = _assemble(parts, thread_names)
    start, dur = rows.columns["start_ns"], rows.columns["dur_ns"]
    placeable = (np.abs(start) <= TIME_LIMIT_NS) & (dur >= 0) & (dur <= TIME_LIMIT_NS)  # what validate keeps
    origin = int(start[placeable].min()) if placeable.any() else 0  # what load's rebase will subtract

    meta.start_unix_ns, meta.extra["clock"] = _clock(conn, tables, origin)
    meta.devices = _devices(conn, tables, rows.columns["device"])
    rows.memory = read_memory(conn, tables)
    meta.extra["processes"] = _processes(conn, tables)
    if "DERIVED_FROM" in meta_kv:
        meta.extra["derived_from"] = meta_kv["DERIVED_FROM"]
        meta.warn(
            f"this export is a time-window slice of {meta_kv['DERIVED_FROM']}: GPU work near its edges may lack "
            "the API call that launched it"
        )
    return ReadResult([rows], meta, samples=_gpu_metrics(conn, tables, meta))


def _gpu_metrics(conn: sqlite3.Connection, tables: dict[str, set[str]], meta: TraceMeta):
    from traceinsight.ingest.nsys.gpu_metrics import read_gpu_metrics

    try:
        return read_gpu_metrics(conn, tables)
    except (sqlite3.Error, ValueError, OverflowError) as exc:
        meta.warn(f"GPU metrics samples could not be read ({type(exc).__name__}); SM/tensor activity is not shown")
        return None


def _close_open_ranges(parts: list[Part], meta: TraceMeta) -> None:
    """NVTX ranges never closed (capture stopped inside them) last until the end of the capture."""
    ends = []
    for p in parts:
        ok = (p.dur >= 0) & (np.abs(p.start) <= 1 << 61) & (p.dur <= 1 << 61)  # corrupt rows are dropped later
        if ok.any():
            ends.append(int((p.start[ok] + p.dur[ok]).max()))
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
    rows = conn.execute("SELECT pid, name FROM PROCESSES WHERE pid IS NOT NULL")
    return {pid: _text(name) or "" for pid, name in ((_as_int(p), n) for p, n in rows) if pid is not None}
