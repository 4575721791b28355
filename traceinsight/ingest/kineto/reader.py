"""PyTorch Profiler (kineto) Chrome-trace JSON: ``.json``, ``.json.gz`` and folders of per-rank files.

Decoding (``kineto_columns``) gives the event fields as columns, from the native scanner where it is built and
the msgspec decoder otherwise; this module turns them into the timeline. Schema variants handled: 2021
categories (``Kernel``/``Runtime``/``Operator``, string tids like ``"stream 7"``), 2022+ names, epoch-µs integer
timestamps vs ``baseTimeNanoseconds`` + relative floats, ns-resolution floats, AMD ROCm, files without metadata
events, CUPTI range-profiler traces without kernels, and files cut short by a killed job.
"""

from __future__ import annotations

import copy
import dataclasses
import mmap
import os
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from traceinsight.vocab.demangle import demangled_categories
from traceinsight.vocab.errors import TraceReadError
from traceinsight.vocab.masks import codes_in, first_of_key
from traceinsight.model.plausible import mixed_runs, mixed_runs_warning
from traceinsight.model.timeline import COPY_KINDS, KINDS, SMALL_MATCH, DeviceInfo, TraceMeta, categorical
from traceinsight.ingest.byteio import read_bytes
from traceinsight.ingest.heap import collector_paused
from traceinsight.ingest.parts import ReadResult, Rows
from traceinsight.ingest.kineto.sniff import sniff, split_rank_files  # noqa: F401  (the package's entry points)
from traceinsight.ingest.kineto.columns import Declined, EventColumns, native_available, pages_given_back, scan_columns, struct_columns, thread_name_column
from traceinsight.ingest.kineto.memory import memory_rows
from traceinsight.ingest.kineto.decode import Trace, bad_utf8_warning, decode, decode_header, is_cut_short, truncation_warning

# --- category -> kind ---------------------------------------------------------------------------------------

_CAT_KIND = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "cuda_sync": "gpu_sync",
    "xpu_sync": "gpu_sync",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "runtime": "runtime",
    "driver": "runtime",
    "xpu_runtime": "runtime",
    "xpu_driver": "runtime",
    "privateuse1_runtime": "runtime",
    "privateuse1_driver": "runtime",
    "mtia_runtime": "runtime",
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "python_function": "python",
    "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
}
_GPU_KINDS = ("kernel", "memcpy", "memset", "gpu_sync", "gpu_annotation")
#: Category prefixes of the device-side activity of accelerators whose timelines this tool does not model (Meta's
#: MTIA: ``mtia_ccp_events``, its command processor's executions, DMA requests and event waits). Their rows stay
#: "other"; they are counted so that a report says the accelerator ran and is not read, not that the GPU's
#: activity went unrecorded. The accelerator's runtime calls (``mtia_runtime``) are host rows like any runtime's.
_UNREAD_DEVICE_PREFIXES = {"mtia_": "MTIA"}


def _unread_device_rows(cat) -> dict | None:
    """``{"name", "events", "categories"}`` for the rows of an accelerator's device activity that are not read
    (``_UNREAD_DEVICE_PREFIXES``), or None: one test per category, a count per category from the codes."""
    names = [str(c).lower() for c in cat.categories]
    hit = [i for i, c in enumerate(names) if _CAT_KIND.get(c) is None and any(c.startswith(p) for p in _UNREAD_DEVICE_PREFIXES)]
    if not hit:
        return None
    codes = np.asarray(cat.codes)
    per = np.bincount(codes[codes >= 0], minlength=len(names))
    n = int(per[hit].sum())
    if not n:
        return None
    first = names[hit[0]]
    name = next(v for p, v in _UNREAD_DEVICE_PREFIXES.items() if first.startswith(p))
    return {"name": name, "events": n, "categories": [str(cat.categories[i]) for i in hit if per[i]]}
_OTHER, _ANNOTATION, _CPU_OP, _STEP = (KINDS.index(k) for k in ("other", "annotation", "cpu_op", "step"))


def _kind_tester(kind: np.ndarray):
    """``kind_is("memcpy", "memset")``: a row mask from KINDS codes (``vocab.masks.codes_in``)."""

    def kind_is(*names: str) -> np.ndarray:
        hit = np.zeros(len(KINDS), dtype=bool)
        hit[[KINDS.index(k) for k in names]] = True
        return codes_in(kind, hit)

    return kind_is

_STEP_RE = re.compile(r"^ProfilerStep#\d+$")
_MAX_DUR_NS = 7 * 24 * 3600 * 10**9  # longer is a corrupted CUPTI record (HTA drops these too)

# --- reading ---------------------------------------------------------------------------------------------


def read(path: Path, progress=None, max_bytes: int | None = None, **_: Any) -> ReadResult:
    path = Path(path)
    if path.is_dir():
        return _read_folder(path, progress, max_bytes)
    rows, meta = _read_file(path, progress, max_bytes)
    rank = meta.extra.get("distributed_rank")
    if rank is not None:
        rows.rank = int(rank)
        meta.ranks = [int(rank)]
        for d in meta.devices:
            d.rank = int(rank)
    _kernel_warnings(rows, meta)
    return ReadResult([rows], meta, epoch=None)


def _read_folder(folder: Path, progress, max_bytes: int | None) -> ReadResult:
    refused: list[str] = []
    files, others = split_rank_files(folder, refused)
    if not files:
        raise TraceReadError(f"{folder}: no PyTorch profiler trace files (.json / .json.gz) in this folder"
                             + (f" ({len(refused)} refused; first: {refused[0]})" if refused else ""))
    if progress:
        progress(f"reading {len(files)} rank files")
    results = _read_files(files, max_bytes, RANK_POOL)
    metas = [m for _, m in results]
    ranks = [m.extra.get("distributed_rank") for m in metas]
    if any(r is None for r in ranks) or len(set(ranks)) != len(ranks):
        reason = "some files have no distributedInfo.rank" if any(r is None for r in ranks) else "ranks repeat across files"
        ranks = list(range(len(files)))
        warning = f"{folder.name}: {reason}; ranks were assigned in file-name order (0..{len(files) - 1})"
    else:
        warning = None
    parts = []
    meta = TraceMeta(source_format="pytorch", path=str(folder), tool=metas[0].tool, tool_version=metas[0].tool_version)
    for (rows, m), rank in zip(results, ranks):
        rows.rank = int(rank)
        parts.append(rows)
        for d in m.devices:
            d.rank = int(rank)
            meta.devices.append(d)
        meta.warnings.extend(m.warnings)
        meta.extra.setdefault("files", []).append(Path(m.path).name)
    if warning:
        meta.warn(warning)
    if refused:
        meta.warn(f"{folder.name}: {len(refused)} rank file(s) dropped: " + "; ".join(refused[:5])
                  + (f" and {len(refused) - 5} more" if len(refused) > 5 else ""))
    if others:
        shown = ", ".join(p.name for p in others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        meta.warn(f"{folder.name}: {len(others)} .json file(s) left out, not PyTorch Profiler traces: {shown}")
    meta.ranks = sorted(set(int(r) for r in ranks))
    sizes = {m.world_size for m in metas if m.world_size}
    meta.world_size = max(sizes) if sizes else len(files)
    mixed = mixed_runs([m.world_size for m in metas], [[d.name for d in m.devices] for m in metas])
    if mixed:
        meta.extra["mixed_runs"] = mixed
        meta.warn(mixed_runs_warning(f"{folder.name}: ", mixed))
    meta.extra["absolute_origin_ns"] = [m.extra.get("absolute_origin_ns") for m in metas]
    unread = [m.extra["unread_accelerator"] for m in metas if "unread_accelerator" in m.extra]
    if unread:
        meta.extra["unread_accelerator"] = {"name": unread[0]["name"], "events": sum(u["events"] for u in unread),
                                            "categories": sorted({c for u in unread for c in u["categories"]})}
    for rows in parts:
        _kernel_warnings(rows, meta)
    return ReadResult(parts, meta, epoch=None)


#: How the files of a rank folder are read in parallel: "threads", "processes" or "serial". Threads won (see
#: bench/README.md): the native scanner releases the GIL, numpy does for most column work, and nothing is pickled.
RANK_POOL = "threads"


def _read_files(files: list[Path], max_bytes: int | None, pool: str) -> list[tuple[Rows, TraceMeta]]:
    workers = min(len(files), os.cpu_count() or 1)
    if workers <= 1 or pool == "serial":
        return [_read_file(f, None, max_bytes) for f in files]  # one file at a time: each may use two threads
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor  # a rank folder only: the pools cost 0.015 s to import

    executor = ThreadPoolExecutor if pool == "threads" else ProcessPoolExecutor
    with collector_paused(), executor(max_workers=workers) as ex:  # paused once for all threads (each file's pause would race)
        # the pool uses the cores: each file is scanned by one thread
        return list(ex.map(_read_file, files, [None] * len(files), [max_bytes] * len(files), [False] * len(files)))


def _kernel_warnings(rows: Rows, meta: TraceMeta) -> None:
    """Say why GPU analyses will be empty: a CPU-only profile, or a CUPTI range-profiler trace."""
    kind = rows.columns["kind"]
    if not len(kind) or (kind.codes == KINDS.index("kernel")).any():
        return
    category = rows.optional.get("category")
    if category is not None and "cuda_profiler_range" in set(map(str, pd.Categorical(category).categories)):
        meta.warn("no kernel events: this trace was recorded in CUPTI range-profiler mode (hardware counters only), so GPU timeline analyses have nothing to work on")
    else:
        meta.warn("no GPU kernels in this trace (CPU-only profile, or CUDA activities were not recorded)")


def _read_file(path: Path, progress=None, max_bytes: int | None = None, split: bool = True) -> tuple[Rows, TraceMeta]:
    # The msgspec path allocates millions of short-lived objects that hold no cycles; the cyclic collector would
    # rescan them again and again (measured: ~2x slower), so it is paused for this function.
    with collector_paused():
        return _read_file_nogc(path, progress, max_bytes, split)


def _read_file_nogc(path: Path, progress=None, max_bytes: int | None = None, split: bool = True) -> tuple[Rows, TraceMeta]:
    warnings: list[str] = []
    if progress:
        progress("decompressing")
    data = read_bytes(path, warnings, max_bytes=max_bytes, mapped=native_available(), on_bytes=getattr(progress, "bytes", None))
    if progress:
        progress("parsing JSON")
    try:
        cols, header = _columns(data, path, warnings, split, lambda: read_bytes(path, [], max_bytes=max_bytes))
    finally:
        if isinstance(data, mmap.mmap):
            data.close()
    del data
    if progress:
        progress("arranging columns")
    unread = _unread_device_rows(cols.cat)
    rows, origin_ns = _build(cols, header, path, warnings)
    if cols.memory is not None:
        base_ns = _base_time_ns(header.baseTimeNanoseconds, path, [])
        rows.memory = memory_rows(cols.memory, (origin_ns - base_ns) / 1000.0, origin_ns, warnings)
    meta = _meta(header, path, rows.columns["device"])
    meta.extra["absolute_origin_ns"] = origin_ns
    if unread is not None:
        meta.extra["unread_accelerator"] = unread
    for w in warnings:
        meta.warn(w)
    return rows, meta


def _columns(data: bytes | mmap.mmap, path: Path, warnings: list[str], split: bool = True,
             reread: Callable[[], bytes] | None = None) -> tuple[EventColumns, Trace]:
    """The event columns and the header, from the native scanner when it takes the document (``split``: with two
    threads on a large one). ``reread``: the file's bytes again, for the checks that need the whole document after
    a scan that gave some of ``data``'s pages back (a cut, a declined document: rare, and only for large gzip files)."""
    if native_available():
        try:
            cols, where = scan_columns(data, split)
        except Declined:
            pass
        else:
            # the scanner calls a document cut where it stops parsing; one damaged in the middle is not, and the
            # general decoder then gives the error
            if where["truncated"] and reread is not None and pages_given_back(data):
                data = reread()
            cut_ok = not where["truncated"] or is_cut_short(data)
            header = decode_header(data, where["span"], where["truncated"]) if cut_ok else None
            if header is not None:
                if cols.bad_utf8:
                    warnings.append(bad_utf8_warning(path))
                if where["truncated"]:
                    warnings.append(truncation_warning(path, cols.n_events))
                return cols, header
    if reread is not None and pages_given_back(data):  # the general decoder reads the whole document
        data = reread()
    trace = decode(bytes(data) if isinstance(data, mmap.mmap) else data, path, warnings)
    cols = struct_columns(trace.traceEvents)
    trace.traceEvents = []
    return cols, trace


def _compact(c: pd.Categorical, keep: np.ndarray | None = None) -> pd.Categorical:
    """``c`` without unused categories (and with rows outside ``keep`` made missing); order is kept."""
    codes = c.codes
    if keep is not None:
        codes = np.where(keep, codes, -1)
    used = np.bincount(codes[codes >= 0], minlength=len(c.categories)) > 0
    if used.all():
        return c if keep is None else pd.Categorical.from_codes(codes, dtype=c.dtype, validate=False)
    if not used.any():
        return categorical(np.full(len(codes), -1, dtype=np.int8), c.categories[:0])
    remap = np.append(np.cumsum(used) - 1, -1)  # code -1 maps through the appended slot
    return categorical(remap[codes], c.categories[used])


def _rows(cols: EventColumns, keep: np.ndarray) -> EventColumns:
    """The same columns for the rows in ``keep`` only (grid, block and dims are compacted where they are used)."""
    out = copy.copy(cols)
    out.has_ts = cols.has_ts[keep]
    for attr in ("pid", "tid", "grid", "block", "input_dims", "input_types", "concrete_inputs"):
        setattr(out, attr, getattr(cols, attr)[keep])
    out.cat, out.name = _compact(cols.cat[keep]), _compact(cols.name[keep])  # categories stay those the rows use
    out.floats = {k: v[keep] for k, v in cols.floats.items()}
    out.bad_ids = cols.bad_ids[keep] if cols.bad_ids is not None else None
    return out


def _op_arg_columns(cols: EventColumns, is_op: np.ndarray) -> dict[str, pd.Categorical]:
    """The optional ``input_types`` / ``concrete_inputs`` columns (raw JSON text on framework ops), present only
    when the trace recorded them (``record_shapes=True``); the FLOPs model reads dtypes and scalar arguments here."""
    out = {}
    for col in ("input_types", "concrete_inputs"):
        values = _compact(getattr(cols, col), is_op)
        if len(values.categories):
            out[col] = values
    return out


def _build(cols: EventColumns, header: Trace, path: Path, warnings: list[str]) -> tuple[Rows, int]:
    if not cols.has_ts.all():  # complete events without a timestamp are not on the timeline
        cols = _rows(cols, cols.has_ts)
    n = len(cols.pid)
    if not n and cols.n_events:
        warnings.append(f"{path.name}: the trace has events but none with a duration (ph 'X')")
    f, out_of_range = _in_range(cols)
    cat, name_raw = cols.cat, cols.name

    # kind from category (case-insensitive: the 2021 schema capitalises), ProfilerStep annotations become steps.
    # Worked on integer codes into KINDS: one lookup per category, never a string per row.
    kind_of_cat = np.array([KINDS.index(_CAT_KIND.get(str(c).lower(), "other")) for c in cat.categories] + [_OTHER], dtype=np.int8)
    kind = kind_of_cat[cat.codes]
    is_step_name = np.array([bool(_STEP_RE.match(str(s))) for s in name_raw.categories] + [False])[name_raw.codes]
    kind[is_step_name & ((kind == _ANNOTATION) | (kind == _CPU_OP))] = _STEP
    kind_is = _kind_tester(kind)
    gpu = kind_is(*_GPU_KINDS)
    pid = cols.pid
    tid = cols.tid
    # a GPU row without a device / stream takes its pid / tid (as a float, as np.where would mix them); host rows -1
    host = ~gpu
    device = _as_int64(f.pop("device"), pid, host)
    stream = _as_int64(f.pop("stream"), tid, host)
    correlation = _as_int64(f.pop("correlation"), -1)
    ext = f.pop("external_id")
    legacy = f.pop("external_id_legacy")
    if header.schemaVersion is None:  # the 2021 schema spells it "external id"
        np.copyto(ext, legacy, where=np.isnan(ext))
    del legacy
    external_id = _as_int64(ext, -1)

    # A GPU row's pid becomes the host process that launched it (so rank/pid/correlation links hold).
    if gpu.any():
        pid = launching_pids(pid, correlation, gpu, kind_is("runtime") & (correlation >= 0))

    # Times: relative to this file's first event, in ns, exact for the durations.
    ts_us = f.pop("ts")
    finite = np.isfinite(ts_us)
    no_ts = ~finite & ~out_of_range
    if no_ts.any():
        warnings.append(f"{path.name}: {int(no_ts.sum()):,} events had no usable timestamp and were dropped")
    if out_of_range.any():
        warnings.append(f"{path.name}: {int(out_of_range.sum()):,} events with a number out of range (a time, duration "
                        "or id past what 64-bit integers hold) were dropped")
    origin_us = float(np.min(ts_us[finite])) if finite.any() else 0.0
    # each step in place, the same float operations in the same order as rint((ts - origin) * 1000)
    ts_us[~finite] = origin_us
    ts_us -= origin_us
    ts_us *= 1000.0
    start_ns = _as_int64(np.rint(ts_us, out=ts_us), 0)
    dur_us = f.pop("dur")
    dur_us[np.isnan(dur_us)] = 0.0
    negative = dur_us < 0  # no event ends before it starts: -1 here, dropped and counted by timeline.validate
    np.clip(dur_us, 0, None, out=dur_us)
    bad_dur = (dur_us * 1000.0 > _MAX_DUR_NS) & ~out_of_range  # judged before the conversion, which would wrap
    dur_us[bad_dur] = 0.0
    dur_us *= 1000.0
    dur_ns = _as_int64(np.rint(dur_us, out=dur_us), 0)
    dur_ns[negative] = -1
    if bad_dur.any():
        warnings.append(f"{path.name}: {int(bad_dur.sum()):,} events with impossible durations (> 7 days, a known CUPTI fault) were dropped")
    base_ns = _base_time_ns(header.baseTimeNanoseconds, path, warnings)
    origin_ns = int(round(origin_us * 1000.0)) + base_ns

    copy_kind, pageable = _copy_columns(kind_is("memcpy"), name_raw, n)
    nbytes = _as_int64(f.pop("bytes"), 0)
    np.copyto(nbytes, 0, where=~kind_is("memcpy", "memset"))
    optional = _optional_columns(cols, f, kind_is, cat, external_id, pid, tid)

    keep = finite & ~bad_dur & ~out_of_range
    rows = Rows(
        {
            "kind": categorical(kind, KINDS),
            "name": demangled_categories(name_raw, warnings),
            "raw_name": name_raw,
            "start_ns": start_ns,
            "dur_ns": dur_ns,
            "pid": pid,
            "tid": tid,
            "device": device,
            "stream": stream,
            "correlation": correlation,
            "bytes": nbytes,
            "copy_kind": categorical(copy_kind, COPY_KINDS),
            "pageable": pageable,
        },
        optional,
    )
    if not keep.all():
        rows.columns = _take(rows.columns, keep)
        rows.optional = _take(rows.optional, keep)
    rows.columns["start_ns"] = rows.columns["start_ns"] + origin_ns  # absolute (or file-clock) ns; load rebases
    return rows, origin_ns


def _copy_columns(is_copy: np.ndarray, name_raw: pd.Categorical, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Copies: direction (codes into ``COPY_KINDS``, -1: none) and pageable host memory, from the name ("Memcpy
    DtoH (Device -> Pageable)"), one test per distinct name."""
    copy_kind = np.full(n, -1, dtype=np.int8)
    pageable = np.zeros(n, dtype=bool)
    if is_copy.any():
        names = [str(c) for c in name_raw.categories]
        dir_of = np.array([COPY_KINDS.index(d) if d else -1 for d in map(_copy_dir, names)] + [-1], dtype=np.int8)
        pg_of = np.array(["pageable" in c.lower() for c in names] + [False])
        copy_kind[is_copy] = dir_of[name_raw.codes[is_copy]]
        pageable[is_copy] = pg_of[name_raw.codes[is_copy]]
    return copy_kind, pageable


def _optional_columns(cols: EventColumns, f: dict[str, np.ndarray], kind_is: Any, cat: pd.Categorical, external_id: np.ndarray, pid: np.ndarray,
                      tid: np.ndarray) -> dict[str, Any]:
    """The optional columns: category, external id, the kernels' launch configuration, the ops' input shapes and
    arguments, the thread names."""
    optional: dict[str, Any] = {"category": cat, "external_id": external_id}
    is_kernel = kind_is("kernel")
    if is_kernel.any():
        optional["grid"] = _compact(cols.grid, is_kernel)
        optional["block"] = _compact(cols.block, is_kernel)
        for col in ("registers", "shared_mem", "occupancy"):  # a count no int64 holds is no count (blank, as 1e400)
            v = f[col]  # blanked in place: the frame's column is this buffer
            with np.errstate(invalid="ignore"):
                blank = ~is_kernel if _largest(v) <= _ID_LIMIT else ~(is_kernel & (np.abs(v) <= _ID_LIMIT))
            np.copyto(v, np.nan, where=blank)
            optional[col] = v
    shapes = _compact(cols.input_dims, kind_is("cpu_op"))
    if len(shapes.categories):
        optional["input_shapes"] = shapes
    optional.update(_op_arg_columns(cols, kind_is("cpu_op")))
    tn = cols.thread_names
    if len(tn["pid"]):
        optional["thread_name"] = thread_name_column(pid, tid, tn)
    return optional


def launching_pids(pid: np.ndarray, correlation: np.ndarray, gpu: np.ndarray, runtime: np.ndarray) -> np.ndarray:
    """``pid`` with each GPU row's replaced by the pid of the first ``runtime`` call of its correlation id, or by the
    host's most common pid (the smallest among equals; 0 without host rows) when no call has that id. On sorted
    arrays: what a Series map of the ids and ``mode`` give, without their fixed costs on a small rank."""
    if len(pid) <= SMALL_MATCH:
        return _launching_pids_small(pid, correlation, gpu, runtime)
    host_pids = pid[~gpu]
    host_pids = host_pids[host_pids >= 0]
    if len(host_pids):
        lo = int(host_pids.min())
        if int(host_pids.max()) - lo < (1 << 22):  # pids are small numbers: count them in a table, no sort
            main_pid = lo + int(np.argmax(np.bincount(host_pids - lo)))  # the first maximum: the smallest pid
        else:
            u_pid, n_pid = np.unique(host_pids, return_counts=True)
            main_pid = int(u_pid[np.argmax(n_pid)])
    else:
        main_pid = 0
    calls = np.flatnonzero(runtime)
    first = first_of_key(correlation[calls], correlation[gpu])  # each id's first call
    out = pid.copy()
    out[gpu] = np.where(first >= 0, pid[calls[np.maximum(first, 0)]] if len(calls) else main_pid, main_pid)
    return out


def _launching_pids_small(pid: np.ndarray, correlation: np.ndarray, gpu: np.ndarray, runtime: np.ndarray) -> np.ndarray:
    """``launching_pids`` on a few rows: counts and first calls from dicts, without numpy's fixed costs."""
    counts: dict[int, int] = {}
    for p in pid[~gpu].tolist():
        if p >= 0:
            counts[p] = counts.get(p, 0) + 1
    top = max(counts.values(), default=0)
    main_pid = min((p for p, c in counts.items() if c == top), default=0)
    first: dict[int, int] = {}
    for c, p in zip(correlation[runtime].tolist(), pid[runtime].tolist()):
        first.setdefault(c, p)
    out = pid.copy()
    out[gpu] = [first.get(c, main_pid) for c in correlation[gpu].tolist()]
    return out


def _take(columns: dict[str, Any], keep: np.ndarray) -> dict[str, Any]:
    return {k: (v[keep] if v is not None else None) for k, v in columns.items()}


#: The largest |timestamp| (ns) and |id| taken: times within it keep every start, end and span inside int64.
_TS_LIMIT_NS = float(1 << 61)
_ID_LIMIT = float(1 << 62)
_ID_FIELDS = ("correlation", "external_id", "external_id_legacy", "device", "stream", "bytes")


def _in_range(cols: EventColumns) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The float columns with out-of-range values blanked (NaN), and which rows had one: a timestamp or duration past
    ``_TS_LIMIT_NS`` or infinite, an id or byte count no int64 holds, a pid/tid the decoder could not hold. Checked
    before any conversion to int64, which would wrap them into negative spans and absurd percentages.

    The arrays are ``cols.floats``'s own, blanked in place and taken from ``cols`` (its ``floats`` left empty): the
    conversions after this one write their int64 results into the same buffers (``_as_int64``), so a gigabyte trace
    holds each of these columns once instead of beside a converted copy."""
    f = {k: v if v.flags.writeable and v.flags.c_contiguous else v.copy() for k, v in cols.floats.items()}
    cols.floats = {}
    bad = np.zeros(len(f["ts"]), dtype=bool)
    with np.errstate(invalid="ignore", over="ignore"):  # |inf| is past every limit, NaN within (absent, not bad)
        for key in ("ts", "dur"):
            if _largest(f[key]) * 1000.0 > _TS_LIMIT_NS:  # rounding is monotone: no row past the limit otherwise
                bad |= np.abs(f[key]) * 1000.0 > _TS_LIMIT_NS
        for key in _ID_FIELDS:
            v = f[key]
            if _largest(v) > _ID_LIMIT:
                over = np.abs(v) > _ID_LIMIT
                bad |= over
                v[over] = np.nan
    if cols.bad_ids is not None:
        bad |= cols.bad_ids
    if bad.any():
        f["ts"][bad] = np.nan
        f["dur"][bad] = np.nan
    return f, bad


def _largest(v: np.ndarray) -> float:
    """The largest magnitude in a float column, NaN (absent) left out, inf kept; 0 for none: two reductions that
    allocate nothing, so the usual column (every value in range) costs no mask."""
    if not len(v):
        return 0.0
    hi, lo = float(np.fmax.reduce(v)), float(np.fmin.reduce(v))
    if hi != hi:  # all NaN
        return 0.0
    return max(abs(hi), abs(lo))


def _as_int64(v: np.ndarray, absent: int | np.ndarray, blank: np.ndarray | None = None) -> np.ndarray:
    """A float column as int64 in its own buffer (``v`` is consumed): values truncated as ``astype`` does, NaN
    replaced by ``absent``: a number, or the same row of an integer column taken through a float first (what
    ``np.where(isnan(v), column, v).astype(np.int64)`` gives, which this replaces). Rows in ``blank`` become -1
    whatever they held (a host row's device), and are never looked up in ``absent``."""
    nan = np.isnan(v)
    out = v.view(np.int64)
    with np.errstate(invalid="ignore"):
        np.copyto(out, v, casting="unsafe")  # same buffer, same strides: numpy casts element by element, no copy
    if blank is not None:
        np.copyto(out, -1, where=blank)
        nan &= ~blank
    if np.isscalar(absent):
        np.copyto(out, absent, where=nan)
    else:
        at = np.flatnonzero(nan)
        out[at] = absent[at].astype(np.float64).astype(np.int64)
    return out


def _base_time_ns(base: Any, path: Path, warnings: list[str]) -> int:
    """``baseTimeNanoseconds`` when it is a usable number of ns since the epoch; otherwise 0, with a warning."""
    if base is None:
        return 0
    if isinstance(base, (int, float)) and not isinstance(base, bool) and abs(base) <= _TS_LIMIT_NS:  # inf, nan fail
        return int(base)
    warnings.append(f"{path.name}: baseTimeNanoseconds is not a usable time ({str(base)[:40]}); times are relative to the trace")
    return 0


def _copy_dir(name: str) -> str | None:
    m = re.search(r"\b(HtoD|DtoH|DtoD|HtoH|PtoP)\b", name)
    if m:
        return m.group(1)
    low = name.lower()
    if "memcpy" in low or "copy" in low:
        return "other"
    return None


def _meta(trace: Trace, path: Path, device: np.ndarray) -> TraceMeta:
    dist = trace.distributedInfo or {}
    amd = trace.roctracer_version is not None or trace.hip_runtime_version is not None
    meta = TraceMeta(
        source_format="pytorch",
        path=str(path),
        tool="PyTorch Profiler (kineto)",
        tool_version=f"schema {trace.schemaVersion}" if trace.schemaVersion is not None else "legacy (no schemaVersion)",
    )
    rank = _small_int(dist.get("rank"))
    meta.extra["distributed_rank"] = rank
    if dist.get("rank") is not None and rank is None:
        meta.warn(f"{path.name}: distributedInfo.rank is not a rank number ({str(dist.get('rank'))[:40]}); ignored")
    world = _small_int(dist.get("world_size"))
    if world is not None:
        meta.world_size = world
    for key in ("cupti_version", "cuda_runtime_version", "cuda_driver_version", "roctracer_version", "hip_runtime_version", "trace_id"):
        val = getattr(trace, key)
        if val is not None:
            meta.extra[key] = val
    if dist.get("backend"):
        meta.extra["distributed_backend"] = dist.get("backend")
    if isinstance(trace.traceinsight_sample, dict):  # reports must say the GPU side was not measured
        meta.extra["generated"] = str(trace.traceinsight_sample.get("provenance") or "generated by sample_traces/make_samples.py")
    seen = set()
    for p in trace.deviceProperties or []:
        if not isinstance(p, dict) or "id" not in p:
            continue
        idx = int(p["id"])
        seen.add(idx)
        cc = f"{p['computeMajor']}.{p['computeMinor']}" if "computeMajor" in p and "computeMinor" in p else None
        name = str(p.get("name", "")) or None
        vendor = "AMD" if amd or (name and ("AMD" in name or "Instinct" in name)) else "NVIDIA"
        meta.devices.append(
            DeviceInfo(index=idx, name=name, sm_count=_int(p.get("numSms")), memory_bytes=_int(p.get("totalGlobalMem")), compute_capability=cc, vendor=vendor)
        )
    gpu_devs = sorted(set(np.unique(device[device >= 0]).tolist()))
    described = {d.index: d for d in meta.devices}
    stand_ins = _stand_ins([d for d in gpu_devs if d not in seen], described, set(gpu_devs))
    if stand_ins:
        meta.warn(
            f"{path.name}: the GPU ids in events ({', '.join(map(str, sorted(stand_ins)))}) are not ids in deviceProperties "
            f"({', '.join(map(str, sorted(described)))}), as on ROCm virtual functions; they take the description "
            + ("every listed GPU shares" if len({_spec(d) for d in described.values()}) == 1 else "of the unused ids, in order"))
    for d in gpu_devs:
        if d not in seen:
            src = stand_ins.get(d)
            meta.devices.append(dataclasses.replace(src, index=int(d)) if src else DeviceInfo(index=int(d), vendor="AMD" if amd else None))
    meta.devices.sort(key=lambda d: d.index)
    if not trace.deviceProperties and gpu_devs:
        meta.warn(f"{path.name}: no deviceProperties in the trace; GPU names and SM counts are unknown")
    return meta


def _spec(d: DeviceInfo) -> tuple:
    return (d.name, d.sm_count, d.memory_bytes, d.compute_capability, d.vendor)


def _stand_ins(missing: list[int], described: dict[int, DeviceInfo], used: set[int]) -> dict[int, DeviceInfo]:
    """For GPU ids the events use but deviceProperties does not list (ROCm reports a virtual function's or an
    agent's id in events, the HIP ordinal in deviceProperties): the description to take. When every listed GPU is
    the same model, that model, which is certain; otherwise the listed ids no event uses, matched in order."""
    if not missing or not described:
        return {}
    if len({_spec(d) for d in described.values()}) == 1:
        first = next(iter(described.values()))
        return {m: first for m in missing}
    spare = [described[k] for k in sorted(described) if k not in used]
    return {m: d for m, d in zip(sorted(missing), spare)}


def _small_int(v: Any) -> int | None:
    """A rank or world size: a whole number in 0 .. 2^31-1, else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, float) and not (np.isfinite(v) and v.is_integer()):
        return None
    return int(v) if 0 <= v < 1 << 31 else None


def _int(v: Any) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None
