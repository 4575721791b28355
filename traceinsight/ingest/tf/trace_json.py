"""TensorFlow profiler Chrome-trace export (``<host>.trace.json.gz``, TF 2.0-2.x and xprof's trace_viewer tool).

It is the same XSpace flattened: one pid per plane (named by a ``process_name`` metadata event), one tid per line
(``thread_name``), ``ts``/``dur`` in microseconds, stats as string ``args``. So it is decoded into the same line
batches as ``xplane`` and classified by the same code; only the container differs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from traceinsight.vocab.errors import TraceReadError
from traceinsight.model.timeline import TraceMeta
from traceinsight.ingest.byteio import read_bytes
from traceinsight.ingest.parts import ReadResult, Rows
from traceinsight.ingest.xplane.lines import EVENT_STATS, LineBatch, device_info, frame_from_lines, host_only_warning, plane_kind





def _load_json(path: Path, max_bytes: int | None = None) -> dict:
    warnings: list[str] = []
    raw = read_bytes(path, warnings, max_bytes=max_bytes)
    if warnings:  # a cut gzip stream: the JSON in it is cut too, and json has no partial reading
        raise TraceReadError(f"{path}: corrupt or truncated gzip (the stream is cut short)")
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise TraceReadError(f"{path}: not valid JSON (truncated?): {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceReadError(f"{path}: no traceEvents list; not a TensorFlow trace export")
    return doc


def _key(v: Any) -> Any:
    """A pid or tid usable as a dict key: JSON arrays and objects become their text (hostile files carry them)."""
    return json.dumps(v, sort_keys=True) if isinstance(v, (list, dict)) else v


def _args(e: dict) -> dict:
    a = e.get("args")
    return a if isinstance(a, dict) else {}


def _times_ns(values: list) -> tuple[np.ndarray, np.ndarray]:
    """Microsecond numbers as int64 ns, and which were usable: a JSON number (not a bool) whose ns fit int64."""
    us = np.array([v if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan for v in values],
                  dtype=np.float64)
    ns = us * 1000.0
    ok = np.isfinite(ns) & (np.abs(ns) < 2.0 ** 62)
    return np.rint(np.where(ok, ns, 0.0)).astype(np.int64), ok


def _tid(tid: Any) -> int:
    try:
        t = int(tid)
    except (TypeError, ValueError, OverflowError):
        return -1
    return t if -(1 << 63) <= t < (1 << 63) else -1


def read_columns(path: Path, max_bytes: int | None = None):
    doc = _load_json(path, max_bytes)
    events = doc["traceEvents"]
    planes: dict[Any, str] = {}
    lines: dict[tuple, str] = {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "M":
            args = _args(e)
            if e.get("name") == "process_name":
                planes[_key(e.get("pid"))] = str(args.get("name", ""))
            elif e.get("name") == "thread_name":
                lines[(_key(e.get("pid")), _key(e.get("tid")))] = str(args.get("name", ""))
    complete = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    meta = TraceMeta(source_format="tensorflow-json", path=str(path), tool="TensorFlow profiler (trace.json)")
    # group by line; events are appended per line in file order
    groups: dict[tuple, list] = {}
    for e in complete:
        groups.setdefault((_key(e.get("pid")), _key(e.get("tid"))), []).append(e)
    name_table: list[str] = []
    name_index: dict[str, int] = {}
    batches: list[LineBatch] = []
    devices = {}
    dropped = 0
    for (pid, tid), evs in groups.items():
        kind, device = plane_kind(planes.get(pid, ""))
        if kind == "skip":
            continue
        # an event whose ts or dur is no number within range is dropped (and counted), not the whole trace
        ts, ts_ok = _times_ns([e.get("ts", 0) for e in evs])
        du, du_ok = _times_ns([e.get("dur", 0) for e in evs])
        keep = ts_ok & du_ok
        if not keep.all():
            dropped += int((~keep).sum())
            evs = [e for e, k in zip(evs, keep.tolist()) if k]
            ts, du = ts[keep], du[keep]
            if not evs:
                continue
        if kind == "gpu" and device not in devices:
            devices[device] = device_info(device, {})
        codes = []
        for e in evs:
            # the xplane's event name is the op's full "name:type" (``long_name`` here); ``name`` is only its display
            # form ("_Send"), so take the long one: the same op gets the same name, and the same codes, in both formats
            nm = str(_args(e).get("long_name") or e.get("name", ""))
            c = name_index.get(nm)
            if c is None:
                c = name_index[nm] = len(name_table)
                name_table.append(nm)
            codes.append(c)
        stats: dict[str, list] = {}
        for key in EVENT_STATS:
            col = [_args(e).get(key) for e in evs]
            if any(v is not None for v in col):
                stats[key] = col
        batches.append(LineBatch(kind, device, lines.get((pid, tid), str(tid)), _tid(tid), codes, ts, du, stats))
    if not batches:
        raise TraceReadError(f"{path}: no events on /host or /device planes; not a TensorFlow trace export")
    if dropped:
        meta.warn(f"{dropped} event{'s' if dropped > 1 else ''} dropped: ts or dur is not a number within range")
    meta.devices = [devices[k] for k in sorted(devices)]
    columns, optional = frame_from_lines(batches, name_table, meta)
    warning = host_only_warning(meta.devices, np.asarray(columns["kind"], dtype=object))
    if warning:
        meta.warn(warning)
    return columns, optional, meta, False


def read(path: Path, progress=None, max_bytes: int | None = None, **options) -> ReadResult:
    if progress:
        progress(f"reading {path.name}")
    columns, optional, meta, absolute = read_columns(path, max_bytes)
    return ReadResult([Rows(columns, optional)], meta, epoch=absolute)
