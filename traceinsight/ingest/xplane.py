"""TensorFlow / JAX profiler XSpace (``*.xplane.pb``) -> Timeline, without importing TensorFlow.

Decoding has to touch every event once. Where the C walker (``proto/_wire_scan.c``) is built it does that in one
pass over the file's bytes and hands back flat arrays (no protobuf runtime, no Python object per event). Without a
compiler the same facts come from upb, with classes built from our own descriptor (``proto/xplane_schema.py``), and
column-wise numpy decoding of the events' bytes (``proto/wire.py``). Everything after that (classification, stat
parsing, step numbering) runs on whole columns. The mapping from planes/lines to timeline kinds lives in
``frame_from_table`` so the old Chrome-trace JSON export (``tf_json``), which carries the same planes and lines,
shares it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from ..errors import TraceReadError
from ..timeline import DeviceInfo, Timeline, TraceMeta, assign_steps, build_events, rebase

#: Derived per-device lines written by xprof post-processing; they repeat activity that the stream lines carry.
DERIVED_OP_LINES = frozenset(
    {
        "TensorFlow Ops", "TensorFlow Name Scope", "Framework Ops", "Framework Name Scope", "XLA Ops",
        "XLA Modules", "Async XLA Ops", "Source code", "XLA TraceMe",
    }
)
STEPS_LINE = "Steps"
SKIPPED_LINES = frozenset({"_counters_"})

#: Host events xprof itself treats as explicit step markers (``IsExplicitHostStepMarker``), narrowed to the exact
#: names so ``train_function`` (a tf.function, not a step) is not mistaken for one.
HOST_STEP_NAMES = frozenset({"train", "test", "TraceContext", "train_step", "StepMarker"})

_STREAM_RE = re.compile(r"^Stream #(\d+)")
_GPU_PLANE_RE = re.compile(r"^/device:GPU:(\d+)")
# "<node name>:<OpType>" is how TF names op-execution events (node names have no spaces, op types are identifiers).
_TF_OP_RE = r"^[^\s:]+:[A-Za-z_][A-Za-z0-9_]*$"
_TF_OP_MATCH = re.compile(_TF_OP_RE).match
_NO_STATS_NAMES = frozenset({"MemoryAllocation", "MemoryDeallocation", "ExecutorState::Process",
                             "ExecutorPropagateOutputs", "ThreadpoolListener::StartRegion",
                             "ThreadpoolListener::StopRegion", "ThreadpoolListener::Record"})

_COPY_KIND = {"H2D": "HtoD", "HtoD": "HtoD", "D2H": "DtoH", "DtoH": "DtoH", "D2D": "DtoD", "DtoD": "DtoD",
              "P2P": "PtoP", "PtoP": "PtoP", "H2H": "HtoH"}

#: Stats read per event (everything else stays in the file).
EVENT_STATS = ("correlation_id", "kernel_details", "memcpy_details", "step_num")


class LineBatch:
    """The events of one line as parallel arrays (``codes`` index a shared name table) plus the line's place."""

    __slots__ = ("plane", "device", "line", "tid", "codes", "start_ns", "dur_ns", "stats")

    def __init__(self, plane: str, device: int, line: str, tid: int, codes: Any,
                 start_ns: Any, dur_ns: Any, stats: dict[str, list] | None = None) -> None:
        self.plane, self.device, self.line, self.tid = plane, device, line, tid
        self.codes = np.asarray(codes, dtype=np.int64)
        self.start_ns = np.asarray(start_ns, dtype=np.int64)
        self.dur_ns = np.asarray(dur_ns, dtype=np.int64)
        self.stats = stats or {}


def plane_kind(name: str) -> tuple[str, int]:
    """("host" | "gpu" | "python" | "skip", device index) for a plane name."""
    m = _GPU_PLANE_RE.match(name)
    if m:
        return "gpu", int(m.group(1))
    if name.startswith("/host:CPU") or name.startswith("/host:CUPTI"):
        return "host", -1
    if name.startswith("/host:python"):
        return "python", -1
    return "skip", -1


# ------------------------------------------------------------------------------------------------------------------
# XSpace decoding


#: Use the C wire walker (``proto/_wire_scan.c``) where it is built. Setting this to False, or the environment
#: variable TRACEINSIGHT_PURE_PYTHON=1 (which switches off every native reader), forces the upb + numpy path
#: (``proto/wire.py``); both give the same timeline (tests compare them).
USE_NATIVE = True
FORCE_PURE = "TRACEINSIGHT_PURE_PYTHON"

#: A stat the reader keeps, as both decoders report it (the C walker writes these records itself): its event, the
#: raw value (str/bytes: an index into a list of strings), the code of its key, and the oneof member set last
#: (an XStat field number; 0 = no value).
STAT_RECORD = np.dtype([("ev", "=i8"), ("val", "=u8"), ("key", "=i4"), ("which", "=i4")])


def native_scanner():
    """The C module, or None where it was not built (no compiler at install time) or is switched off."""
    if not USE_NATIVE or os.environ.get(FORCE_PURE):
        return None
    try:
        from .proto import _wire_scan
    except ImportError:
        return None
    return _wire_scan if _wire_scan.STAT_RECORD_SIZE == STAT_RECORD.itemsize else None


class _Plane(NamedTuple):
    """What decoding a plane's lines needs: where its event names sit in the name table, which stats to keep."""

    kind: str
    device: int
    md_ids: np.ndarray  # sorted event metadata ids; row i of the plane is name table row md_offset + i
    md_offset: int
    key_ids: np.ndarray  # sorted stat metadata ids of the EVENT_STATS present ...
    key_codes: np.ndarray  # ... and their index in the sorted list of all such stat names
    refs: dict[int, str]


class _Line(NamedTuple):
    """A line kept for decoding; ``payload`` is its (start, end) in the file (C walker) or its events (numpy)."""

    plane: int
    kind: str
    device: int
    name: str
    tid: int
    timestamp_ns: int
    n: int
    read_stats: bool
    payload: Any


class Space(NamedTuple):
    """What the reader takes from an XSpace, whichever decoder read it.

    ``planes``: per XPlane, (name, event metadata ids (int64 array), their names, {stat metadata id: name}, stats as
    (metadata_id, oneof field number or 0, value; a ref value is its id)). ``lines``: per XLine, (plane index, id,
    name, display_name, timestamp_ns, event count, payload): the payload is the line's (start, end) in ``data`` for
    the C walker, or its events as byte strings for the numpy decoder.
    """

    planes: list[tuple]
    errors: list[str]
    warnings: list[str]
    hostnames: list[str]
    lines: list[tuple]
    data: bytes


def _check_planes(path: Path, names: list[str]) -> None:
    if not names:
        raise TraceReadError(f"{path}: the XSpace holds no planes (not a profiler capture, or truncated)")
    if not any(n.startswith("/") or n == "Task Environment" for n in names):
        raise TraceReadError(f"{path}: protobuf decodes but has no profiler planes; not an xplane.pb")


_ONEOF_FIELD = {"double_value": 2, "uint64_value": 3, "int64_value": 4, "str_value": 5, "bytes_value": 6,
                "ref_value": 7}


def _space_upb(path: Path, data: bytes) -> Space:
    """Decoded by upb with the raw-events schema: every line's events stay byte strings for the numpy decoder."""
    from google.protobuf.message import DecodeError

    from .proto.xplane_schema import messages

    try:
        space = messages(raw_events=True)["XSpace"].FromString(data)
    except DecodeError as exc:
        raise TraceReadError(f"{path}: not a valid XSpace protobuf (truncated or corrupt: {exc})") from None
    except RecursionError:
        raise TraceReadError(f"{path}: not a valid XSpace protobuf (nesting too deep)") from None
    _check_planes(path, [p.name for p in space.planes])
    planes = []
    for plane in space.planes:
        md = list(plane.event_metadata.items())
        stats = []
        for s in plane.stats:
            which = s.WhichOneof("value")
            stats.append((s.metadata_id, _ONEOF_FIELD[which], getattr(s, which)) if which else (s.metadata_id, 0, None))
        planes.append((plane.name, np.array([k for k, _ in md], dtype=np.int64), [v.name for _, v in md],
                       {k: v.name for k, v in plane.stat_metadata.items()}, stats))
    lines = [(p, ln.id, ln.name, ln.display_name, ln.timestamp_ns, len(ln.events), ln.events)
             for p, plane in enumerate(space.planes) for ln in plane.lines]
    return Space(planes, list(space.errors), list(space.warnings), list(space.hostnames), lines, data)


def _space_native(path: Path, data: bytes, scan) -> Space:
    """Decoded by the C walker: metadata as small tables, lines as headers and byte spans (no protobuf import)."""
    try:
        planes, errors, warnings, hostnames, heads = scan.parse_space(data)
    except ValueError as exc:
        raise TraceReadError(f"{path}: not a valid XSpace protobuf (truncated or corrupt: {exc})") from None
    _check_planes(path, [p[0] for p in planes])
    planes = [(name, np.frombuffer(md_ids, dtype=np.int64), md_names,
               dict(zip(np.frombuffer(sm_ids, dtype=np.int64).tolist(), sm_names)), stats)
              for name, md_ids, md_names, sm_ids, sm_names, stats in planes]
    lines = [(p, lid, name, dname, ts, n, (s, e)) for p, s, e, lid, name, dname, ts, n in heads]
    return Space(planes, errors, warnings, hostnames, lines, data)


def load_space(path: Path, scan=None) -> Space:
    """Read and decode the file's XSpace, with the C walker ``scan`` (``native_scanner()``) or upb."""
    data = path.read_bytes()
    if not data:
        raise TraceReadError(f"{path}: the file is empty")
    return _space_native(path, data, scan) if scan is not None else _space_upb(path, data)


def _plane_stats(stats: list[tuple], refs: dict[int, str]) -> dict[str, Any]:
    return {refs.get(mid, ""): refs.get(value) if field == 7 else value for mid, field, value in stats}


def _plane_tables(space: Space) -> tuple[list[_Plane | None], list[str], list[str], list[DeviceInfo], dict[str, Any]]:
    """Per plane of the space (None: not read), the stat keys in use, the name table, devices, environment."""
    name_table: list[str] = []
    devices: list[DeviceInfo] = []
    env: dict[str, Any] = {}
    found: list[tuple | None] = []  # (kind, device, sorted metadata ids, first name table row, refs)
    for name, md_ids, md_names, refs, stats in space.planes:
        kind, device = ("env", -1) if name == "Task Environment" else plane_kind(name)
        if kind == "env":
            env.update(_plane_stats(stats, refs))
        elif kind == "gpu":
            devices.append(_device_info(device, _plane_stats(stats, refs)))
        if kind in ("env", "skip"):
            found.append(None)
            continue
        # sorted ids; a map key written twice keeps its last entry, as a map does
        order = np.argsort(md_ids, kind="stable")
        ids = md_ids[order]
        last = np.r_[ids[1:] != ids[:-1], True] if len(ids) else np.zeros(0, dtype=bool)
        found.append((kind, device, ids[last], len(name_table), refs))
        name_table.extend([md_names[i] for i in order[last].tolist()])
    keys = sorted({v for f in found if f for v in f[4].values() if v in EVENT_STATS})
    planes: list[_Plane | None] = []
    for f in found:
        wanted = sorted((k, keys.index(v)) for k, v in f[4].items() if v in EVENT_STATS) if f else []
        ids, codes = (np.array(x, dtype=np.int64) for x in (zip(*wanted) if wanted else ((), ())))
        planes.append(_Plane(*f[:4], ids, codes, f[4]) if f else None)
    return planes, keys, name_table, devices, env


def _select_lines(lines: list[tuple], planes: list[_Plane | None]) -> list[_Line]:
    """The lines that become timeline rows; stats are not read on derived GPU lines."""
    kept = []
    for p, lid, name, display_name, ts, n, payload in lines:
        plane = planes[p]
        lname = name or display_name
        if plane is None or not n or lname in SKIPPED_LINES:
            continue
        derived = lname in DERIVED_OP_LINES or lname == STEPS_LINE
        kept.append(_Line(p, plane.kind, plane.device, lname, lid, ts, n, not (plane.kind == "gpu" and derived),
                          payload))
    return kept


# XEvent fields: metadata_id=1, offset_ps=2 | num_occurrences=5 (oneof), duration_ps=3, stats=4
# XStat fields: metadata_id=1, value oneof: double=2, uint64=3, int64=4, str=5, bytes=6, ref=7
_STAT_VALUE_FIELDS = (2, 3, 4, 5, 6, 7)


def _decode_native(scan, data: bytes, lines: list[_Line], planes: list[_Plane | None], n: int):
    """Events and kept stats from the C walker in one pass over the lines' bytes."""
    spans = np.array([ln.payload for ln in lines], dtype=np.int64).tobytes()
    tables: dict[int, bytes] = {}
    for ln in lines:
        if ln.plane not in tables:
            pl = planes[ln.plane]
            tables[ln.plane] = np.column_stack([pl.key_ids, pl.key_codes]).astype(np.int64).tobytes()
    wanted = [tables[ln.plane] if ln.read_stats else b"" for ln in lines]
    cols, stats, strings = scan.scan_events(data, spans, wanted, n)
    mid, offset, dur = np.frombuffer(cols, dtype=np.int64).reshape(3, n)
    return mid, offset, dur, np.frombuffer(stats, dtype=STAT_RECORD), strings


def _decode_numpy(lines: list[_Line], planes: list[_Plane | None], n: int):
    """Events and kept stats decoded column-wise with numpy from each event's bytes (``proto/wire.py``)."""
    from .proto.wire import _PAD, decode_events

    chunks: list[bytes] = []
    for ln in lines:
        chunks.extend(ln.payload)
    lens = np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks))
    chunks.append(bytes(_PAD))  # zero padding: a varint read running off the end stops inside it
    data = b"".join(chunks)
    del chunks
    ends = np.cumsum(lens)
    buf = np.frombuffer(data, dtype=np.uint8)
    mids, offset, dur_ps, (st_ev, st_s, st_e) = decode_events(buf, ends - lens, ends)
    sizes = np.array([ln.n for ln in lines], dtype=np.int64)
    ev_plane = np.repeat(np.array([ln.plane for ln in lines], dtype=np.int64), sizes)
    read = np.repeat(np.array([ln.read_stats for ln in lines], dtype=bool), sizes)
    keep = read[st_ev] if len(st_ev) else np.zeros(0, dtype=bool)
    if not keep.any() or not any(pl is not None and len(pl.key_ids) for pl in planes):
        return mids, offset, dur_ps, np.zeros(0, dtype=STAT_RECORD), []
    recs, strings = _stat_records(data, buf, st_ev[keep], st_s[keep], st_e[keep], ev_plane, planes)
    return mids, offset, dur_ps, recs, strings


def _stat_records(data: bytes, buf: np.ndarray, ev: np.ndarray, s: np.ndarray, e: np.ndarray,
                  ev_plane: np.ndarray, planes: list[_Plane | None]) -> tuple[np.ndarray, list]:
    """The kept stats among ``buf[s:e]`` as STAT_RECORD rows in event and file order, plus their strings."""
    from .proto.wire import decode_fields, leading_varint_in

    wanted = [set(pl.key_ids.tolist()) if pl is not None else set() for pl in planes]
    # serializers write XStat.metadata_id first: match its bytes against the ids we use, decode only those stats
    keep = leading_varint_in(buf, s, e, ev_plane[ev], wanted)
    ev, s, e = ev[keep], s[keep], e[keep]
    # event order, and file order within an event, so the last stat of a key wins later
    order = np.argsort(ev, kind="stable")
    ev, s, e = ev[order], s[order], e[order]
    values, seen, spans, _ = decode_fields(buf, s, e, varint_fields=(1, 3, 4, 7), bytes_fields=(5, 6),
                                           fixed64_fields=(2,))
    mid = values[1].view(np.int64)
    plane = ev_plane[ev]
    key_code = np.full(len(mid), -1, dtype=np.int64)
    for p in np.unique(plane).tolist():
        pl = planes[p]
        if not len(pl.key_ids):
            continue
        pos = np.minimum(np.searchsorted(pl.key_ids, mid), len(pl.key_ids) - 1)
        hit = (plane == p) & (pl.key_ids[pos] == mid)
        key_code[hit] = pl.key_codes[pos[hit]]
    use = np.flatnonzero(key_code >= 0)
    recs = np.zeros(len(use), dtype=STAT_RECORD)
    recs["ev"], recs["key"] = ev[use], key_code[use]
    # the oneof member set last wins
    order = np.stack([seen[f][use] for f in _STAT_VALUE_FIELDS])
    which = np.where(order.max(axis=0) >= 0, np.array(_STAT_VALUE_FIELDS)[order.argmax(axis=0)], 0)
    recs["which"] = which
    val = np.zeros(len(use), dtype=np.uint64)
    for f in (2, 3, 4, 7):
        m = which == f
        val[m] = values[f][use[m]]
    strings: list = []
    m = np.flatnonzero((which == 5) | (which == 6))
    if len(m):
        a, b = spans[5][0][use[m]], spans[5][1][use[m]]
        is6 = which[m] == 6
        a[is6], b[is6] = spans[6][0][use[m[is6]]], spans[6][1][use[m[is6]]]
        strings = [data[x:y] if f6 else data[x:y].decode("utf-8", "replace")
                   for x, y, f6 in zip(a.tolist(), b.tolist(), is6.tolist())]
        val[m] = np.arange(len(m), dtype=np.uint64)
    recs["val"] = val
    return recs, strings


def _stat_columns(recs: np.ndarray, strings: list, ev_plane: np.ndarray, planes: list[_Plane | None],
                  keys: list[str], n_events: int) -> dict[str, np.ndarray]:
    """Per key some event holds a value for: an object column over all events (None where absent; the last stat of
    a key in an event wins)."""
    if not len(recs):
        return {}
    which, raw = recs["which"], np.ascontiguousarray(recs["val"])
    vals = np.full(len(recs), None, dtype=object)
    for f, dtype in ((2, np.float64), (3, np.uint64), (4, np.int64)):
        m = which == f
        if m.any():
            vals[m] = raw[m].view(dtype).astype(object)
    m = np.flatnonzero(which == 7)
    if len(m):
        # a ref names a stat metadata entry of the event's plane: look each distinct (plane, id) up once
        ref_plane = ev_plane[recs["ev"][m]]
        for p in np.unique(ref_plane).tolist():
            mp = m[ref_plane == p]
            ids, inv = np.unique(raw[mp], return_inverse=True)
            refs = planes[p].refs
            names = np.array([refs.get(i) for i in ids.tolist()] + [None], dtype=object)[:-1]
            vals[mp] = names[inv]
    m = (which == 5) | (which == 6)
    if m.any():
        table = np.empty(len(strings), dtype=object)
        table[:] = strings
        vals[m] = table[raw[m].astype(np.intp)]
    ev, kc = recs["ev"], recs["key"]
    out = {}
    for k, key in enumerate(keys):
        m = kc == k
        if not m.any():
            continue
        # records are in event order: keep the last one per event
        idx, v = ev[m], vals[m]
        last = np.r_[idx[1:] != idx[:-1], True]
        idx, v = idx[last], v[last]
        if np.not_equal(v, None).any():
            col = np.full(n_events, None, dtype=object)
            col[idx] = v
            out[key] = col
    return out


def _index_in(ids: np.ndarray, values: np.ndarray, base: int = 0) -> np.ndarray:
    """``base`` + the position of each value in the sorted unique ``ids``, -1 where absent.

    Metadata ids are small dense integers, so a lookup table answers in one gather; sparse ids take a binary search.
    """
    if not len(ids):
        return np.full(len(values), -1, dtype=np.int64)
    lo, hi = int(ids[0]), int(ids[-1])
    if lo >= 0 and hi < max(1 << 16, 8 * len(ids)):
        lut = np.full(hi + 3, -1, dtype=np.int64)  # indexed by value + 1: both ends stay -1 for values out of range
        lut[ids + 1] = np.arange(base, base + len(ids))
        return np.take(lut, values + 1, mode="clip")
    pos = np.minimum(np.searchsorted(ids, values), len(ids) - 1)
    return np.where(ids[pos] == values, pos + base, -1)


def _name_codes(mids: np.ndarray, lines: list[_Line], bounds: np.ndarray, planes: list[_Plane | None]) -> np.ndarray:
    """Event metadata ids -> rows of the name table (-1: not in the plane's metadata), plane by plane."""
    line_plane = np.array([ln.plane for ln in lines], dtype=np.int64)
    codes = np.full(len(mids), -1, dtype=np.int64)
    for p in np.unique(line_plane).tolist():
        rows = np.flatnonzero(line_plane == p)
        if rows[-1] - rows[0] + 1 == len(rows):  # lines of a plane are contiguous: one slice
            spans = [slice(bounds[rows[0]], bounds[rows[-1] + 1])]
        else:
            spans = [slice(bounds[r], bounds[r + 1]) for r in rows.tolist()]
        for sl in spans:
            codes[sl] = _index_in(planes[p].md_ids, mids[sl], planes[p].md_offset)
    return codes


def decode_space(space: Space, scan=None, source: Path | str = "") -> tuple[LineTable, list[str], list[DeviceInfo],
                                                                          dict[str, Any], list[str]]:
    """The lines' events as one table, the name table, devices, task-environment facts and the XSpace's warnings.

    ``space`` comes from ``load_space`` with the same ``scan``; the events of all lines are decoded at once, by the
    C walker when given, else column-wise with numpy.
    """
    planes, keys, name_table, devices, env = _plane_tables(space)
    messages = [f"profiler error: {e}" for e in space.errors] + [f"profiler warning: {w}" for w in space.warnings]
    kept = _select_lines(space.lines, planes)
    sizes = np.array([ln.n for ln in kept], dtype=np.int64)
    bounds = np.r_[0, np.cumsum(sizes)]
    n = int(bounds[-1])
    if not kept:
        mids = offset = dur_ps = np.zeros(0, dtype=np.int64)
        recs, strings = np.zeros(0, dtype=STAT_RECORD), []
    else:
        try:
            if scan is not None:
                mids, offset, dur_ps, recs, strings = _decode_native(scan, space.data, kept, planes, n)
            else:
                mids, offset, dur_ps, recs, strings = _decode_numpy(kept, planes, n)
        except ValueError as exc:  # WireError, or the C walker's report
            raise TraceReadError(f"{source}: not a valid XSpace protobuf (corrupt event: {exc})") from None
    ev_plane = np.repeat(np.array([ln.plane for ln in kept], dtype=np.int64), sizes)
    table = LineTable(
        plane=[ln.kind for ln in kept], device=[ln.device for ln in kept], line=[ln.name for ln in kept],
        tid=[ln.tid for ln in kept], sizes=sizes, codes=_name_codes(mids, kept, bounds, planes),
        start_ns=np.repeat(np.array([ln.timestamp_ns for ln in kept], dtype=np.int64), sizes) + offset // 1000,
        dur_ns=(dur_ps + 500) // 1000,  # start: == (ts * 1000 + offset) // 1000 without the int64 overflow
        stats=_stat_columns(recs, strings, ev_plane, planes, keys, n))
    return table, name_table, devices, env, messages


def _device_info(index: int, stats: dict[str, Any]) -> DeviceInfo:
    major, minor = stats.get("compute_cap_major"), stats.get("compute_cap_minor")
    cc = f"{major}.{minor}" if major is not None and minor is not None else None
    vendor = stats.get("device_vendor") or ("Nvidia" if cc else None)
    name = stats.get("device_type_string") or stats.get("device_name")
    if not name and vendor:
        unit = "CUs" if str(vendor).upper() == "AMD" else "SMs"
        cores = stats.get("core_count")
        name = f"{vendor} GPU (cc {cc}{f', {cores} {unit}' if cores else ''})"
    mem = stats.get("memory_size")
    cores = stats.get("core_count")
    return DeviceInfo(index=index, name=name, sm_count=int(cores) if cores else None,
                      memory_bytes=int(mem) if mem else None, compute_capability=cc,
                      vendor=str(vendor) if vendor else None)


# ------------------------------------------------------------------------------------------------------------------
# Plane/line -> timeline kinds (shared with tf_json)


class LineTable(NamedTuple):
    """Decoded lines as whole columns: per line its place, per event its name, times and stats.

    The rows of line i follow those of line i - 1 (``sizes`` = rows per line). ``codes`` index the name table
    (-1: unknown id); ``stats`` maps an EVENT_STATS key that some event carries to an object column (None where
    absent).
    """

    plane: list[str]
    device: list[int]
    line: list[str]
    tid: list[int]
    sizes: np.ndarray
    codes: np.ndarray
    start_ns: np.ndarray
    dur_ns: np.ndarray
    stats: dict[str, np.ndarray]


def table_from_batches(batches: list[LineBatch]) -> LineTable:
    """One LineTable from per-line batches (how tf_json hands its lines over)."""
    sizes = np.array([len(b.codes) for b in batches], dtype=np.int64)
    n = int(sizes.sum())
    stats: dict[str, np.ndarray] = {}
    for key in EVENT_STATS:
        if not any(key in b.stats for b in batches):
            continue
        out = np.empty(n, dtype=object)
        pos = 0
        for b, size in zip(batches, sizes.tolist()):
            col = b.stats.get(key)
            out[pos:pos + size] = col if col is not None else None
            pos += size
        stats[key] = out

    def joined(arrays: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)

    return LineTable([b.plane for b in batches], [b.device for b in batches], [b.line for b in batches],
                     [b.tid for b in batches], sizes, joined([b.codes for b in batches]),
                     joined([b.start_ns for b in batches]), joined([b.dur_ns for b in batches]), stats)


def _flags(table: list[str], pattern: str) -> np.ndarray:
    rx = re.compile(pattern)
    return np.fromiter((rx.search(x) is not None for x in table), dtype=bool, count=len(table))


KINDS = ("other", "annotation", "cpu_op", "python", "runtime", "kernel", "memcpy", "memset", "gpu_annotation", "step")
_K = {k: np.int8(i) for i, k in enumerate(KINDS)}
COPY_KINDS = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "other")
_COPY_CODE = {k: i for i, k in enumerate(COPY_KINDS)}
_COPY_RX = re.compile(r"(H2D|D2H|D2D|P2P|HtoD|DtoH|DtoD|PtoP)")
_LINE_COPY_RX = re.compile(r"Memcpy(H2D|D2H|D2D|P2P)")
# what a line is, which decides how its rows are classified
_L_OTHER, _L_HOST, _L_PYTHON, _L_STREAM, _L_DERIVED, _L_STEPS, _L_GPU_OTHER = range(7)
#: row kind by line class; host and stream rows are then refined by name and stats
_LINE_KIND = np.array([_K["other"], _K["annotation"], _K["python"], _K["kernel"], _K["gpu_annotation"], _K["other"],
                       _K["other"]], dtype=np.int8)


def _distinct_names(name_table: list[str]) -> tuple[np.ndarray, list[str]]:
    """The distinct names in first-seen order ("" for unknown ids last unless seen) and each table row's index
    among them; the extra last row is where code -1 (unknown) goes."""
    names = list(name_table) + [""]
    cats = list(dict.fromkeys(names))
    if len(cats) == len(names):
        return np.arange(len(names), dtype=np.int64), cats
    index = dict(zip(cats, range(len(cats))))
    return np.fromiter(map(index.__getitem__, names), dtype=np.int64, count=len(names)), cats


def _line_facts(t: LineTable) -> dict[str, Any]:
    """Line facts, worked out once per distinct line name. Per line: ``idx`` (its name in ``names``, the sorted
    distinct names), ``cls``, ``stream`` (-1: not a stream), ``gpu``. Per name: ``copy`` (a memcpy stream) and
    ``copy_dir`` (a COPY_KINDS index, -1: none)."""
    names, line_idx = np.unique(np.array([x or "" for x in t.line], dtype=object), return_inverse=True)
    lt = [str(x) for x in names]
    stream = np.array([int(m.group(1)) if (m := _STREAM_RE.match(x)) else -1 for x in lt], dtype=np.int64)
    copy_dir = np.array([_COPY_CODE[_COPY_KIND[m.group(1)]] if (m := _LINE_COPY_RX.search(x)) else -1 for x in lt],
                        dtype=np.int64)
    by_name = np.array([_L_DERIVED if x in DERIVED_OP_LINES else _L_STEPS if x == STEPS_LINE else _L_GPU_OTHER
                        for x in lt], dtype=np.int8)
    by_name[stream >= 0] = _L_STREAM
    plane_cls = {"host": _L_HOST, "python": _L_PYTHON}
    cls = np.array([by_name[i] if p == "gpu" else plane_cls.get(p, _L_OTHER)
                    for p, i in zip(t.plane, line_idx.tolist())], dtype=np.int8)
    return {"names": lt, "idx": line_idx, "cls": cls, "stream": np.where(cls == _L_STREAM, stream[line_idx], -1),
            "gpu": np.array([p == "gpu" for p in t.plane], dtype=bool), "copy": _flags(lt, r"^Stream #\d+.*Memcpy"),
            "copy_dir": copy_dir}


def _used(codes: np.ndarray, size: int) -> np.ndarray:
    """Which of ``size`` names occur among ``codes``."""
    return np.bincount(codes, minlength=size) > 0 if len(codes) else np.zeros(size, dtype=bool)


def _name_flags(cats: list[str], used: np.ndarray, test) -> np.ndarray:
    """``test(name)`` for the names in use (False elsewhere): per-name text checks run once per distinct name."""
    out = np.zeros(len(cats), dtype=bool)
    idx = np.flatnonzero(used)
    out[idx] = [bool(test(cats[i])) for i in idx.tolist()]
    return out


def _host_name_kind(x: str) -> np.int8:
    """A host event's kind from its name alone (a correlation id later makes it a runtime call)."""
    if x.startswith("$"):
        return _K["python"]
    if x in ("MemoryAllocation", "MemoryDeallocation"):
        return _K["other"]
    if _TF_OP_MATCH(x) is not None:
        return _K["cpu_op"]
    return _K["annotation"]


def _correlations(raw: np.ndarray | None, n: int) -> np.ndarray:
    corr = np.full(n, -1, dtype=np.int64)
    if raw is not None:
        has = pd.notna(raw)
        corr[has] = pd.to_numeric(pd.Series(raw[has]), errors="coerce").fillna(-1).astype(np.int64).to_numpy()
    return corr


def _memcpy_bytes(raw: np.ndarray | None, n: int) -> np.ndarray:
    """``size:<n>`` of memcpy_details; each distinct text is parsed once."""
    nbytes = np.zeros(n, dtype=np.int64)
    if raw is None:
        return nbytes
    has = pd.notna(raw)
    if has.any():
        pos, uniq = pd.factorize(pd.Series(raw[has], dtype=object).astype(str))
        sizes = pd.Series(uniq).str.extract(r"size:(\d+)", expand=False)
        nbytes[has] = pd.to_numeric(sizes, errors="coerce").fillna(0).astype(np.int64).to_numpy()[pos]
    return nbytes


def frame_from_lines(batches: list[LineBatch], name_table: list[str], meta: TraceMeta) -> tuple[dict[str, Any], dict[str, Any]]:
    """Columns for ``build_events`` from decoded lines (see ``frame_from_table``)."""
    if not batches:
        return {"kind": [], "name": [], "start_ns": [], "dur_ns": []}, {}
    return frame_from_table(table_from_batches(batches), name_table, meta)


def frame_from_table(t: LineTable, name_table: list[str], meta: TraceMeta) -> tuple[dict[str, Any], dict[str, Any]]:
    """Columns for ``build_events``: classification runs per line and per distinct name, then on whole columns."""
    if not len(t.sizes):
        return {"kind": [], "name": [], "start_ns": [], "dur_ns": []}, {}
    table_codes, cats = _distinct_names(name_table)
    lf = _line_facts(t)
    # code -1 (unknown id) takes the last entry: the "" row
    t, steps = _collapse_steps(t._replace(codes=table_codes[t.codes]), lf["cls"])
    codes, n = t.codes, len(t.codes)
    cls = np.repeat(lf["cls"], t.sizes)
    line_codes = np.repeat(lf["idx"], t.sizes)
    corr = _correlations(t.stats.get("correlation_id"), n)

    kind = _LINE_KIND[cls]
    host = np.flatnonzero(cls == _L_HOST)
    if len(host):
        hc = codes[host]
        host_kind = np.zeros(len(cats), dtype=np.int8)
        used = np.flatnonzero(_used(hc, len(cats)))
        host_kind[used] = [_host_name_kind(cats[i]) for i in used.tolist()]
        kind[host] = np.where(corr[host] >= 0, _K["runtime"], host_kind[hc])
    stream_rows = np.flatnonzero(cls == _L_STREAM)
    copy_rows = stream_rows[:0]
    if len(stream_rows):
        sc = codes[stream_rows]
        used = _used(sc, len(cats))
        u_memcpy = _name_flags(cats, used, lambda x: "memcpy" in x.lower())
        u_memset = _name_flags(cats, used, lambda x: "memset" in x.lower())
        is_copy = u_memcpy[sc] | lf["copy"][line_codes[stream_rows]]
        kind[stream_rows] = np.where(u_memset[sc], _K["memset"], np.where(is_copy, _K["memcpy"], _K["kernel"]))
        copy_rows = stream_rows[is_copy]
    name_codes, out_cats = _steps(t, steps, codes, cats, kind, host, meta)

    is_gpu = np.repeat(lf["gpu"], t.sizes)
    is_step = kind == _K["step"]
    columns = {
        "kind": pd.Categorical.from_codes(kind, categories=list(KINDS)),
        "name": pd.Categorical.from_codes(name_codes, categories=pd.Index(out_cats).unique())
        if len(set(out_cats)) == len(out_cats) else pd.Categorical(np.array(out_cats, dtype=object)[name_codes]),
        "raw_name": pd.Categorical.from_codes(codes, categories=cats),
        "start_ns": t.start_ns,
        "dur_ns": np.maximum(t.dur_ns, 0),
        "pid": np.zeros(n, dtype=np.int64),  # one process per XSpace: GPU rows join host launches on correlation
        "tid": np.repeat(np.where(lf["stream"] >= 0, lf["stream"], np.asarray(t.tid, dtype=np.int64)), t.sizes),
        "device": np.where(is_gpu & ~is_step, np.repeat(np.asarray(t.device, dtype=np.int32), t.sizes), -1)
        .astype(np.int32),
        "stream": np.repeat(lf["stream"], t.sizes),
        "correlation": np.where(is_gpu | (kind == _K["runtime"]), corr, -1),
        "bytes": _memcpy_bytes(t.stats.get("memcpy_details"), n),
        "copy_kind": pd.Categorical.from_codes(_copy_codes(codes, cats, copy_rows, lf, line_codes, n),
                                               categories=list(COPY_KINDS)),
    }
    line_cat = pd.Categorical.from_codes(line_codes, categories=lf["names"])
    optional: dict[str, Any] = {"category": line_cat, "thread_name": line_cat}
    kdetails = t.stats.get("kernel_details")
    if kdetails is not None:
        kd_mask = pd.notna(kdetails) & (kind == _K["kernel"])
        if kd_mask.any():
            optional.update(_kernel_details(kdetails, kd_mask))
    return columns, optional


def _copy_codes(codes: np.ndarray, cats: list[str], copy_rows: np.ndarray, lf: dict, line_codes: np.ndarray,
                n: int) -> np.ndarray:
    """COPY_KINDS index per row (-1: not a copy): the direction in the name, else in the line name, else other."""
    out = np.full(n, -1, dtype=np.int8)
    if not len(copy_rows):
        return out
    u_dir = np.full(len(cats), -1, dtype=np.int64)
    used = np.flatnonzero(_used(codes[copy_rows], len(cats)))
    u_dir[used] = [_COPY_CODE[_COPY_KIND[m.group(1)]] if "memcpy" in x.lower() and (m := _COPY_RX.search(x)) else -1
                   for x in (cats[i] for i in used.tolist())]
    ck = u_dir[codes[copy_rows]]
    ck = np.where(ck >= 0, ck, lf["copy_dir"][line_codes[copy_rows]])
    out[copy_rows] = np.where(ck >= 0, ck, _COPY_CODE["other"])
    return out


def _collapse_steps(t: LineTable, line_cls: np.ndarray) -> tuple[LineTable, np.ndarray | None]:
    """The device "Steps" lines (one per GPU, present when the capture grouped GPU work) as one row per step name,
    at its first row, spanning the step on every GPU; the other rows of those lines go. Also returns those rows."""
    bounds = np.r_[0, np.cumsum(t.sizes)]
    lines = np.flatnonzero(line_cls == _L_STEPS)
    if not len(lines):
        return t, None
    rows = np.concatenate([np.arange(bounds[i], bounds[i + 1]) for i in lines.tolist()])
    c, s = t.codes[rows], t.start_ns[rows]
    e = s + t.dur_ns[rows]
    _, first_pos, inv = np.unique(c, return_index=True, return_inverse=True)
    lo = np.full(len(first_pos), np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(len(first_pos), np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, inv, s)
    np.maximum.at(hi, inv, e)
    order = np.argsort(first_pos, kind="stable")  # steps in order of first appearance
    first = rows[first_pos[order]]
    drop = np.setdiff1d(rows, first)  # sorted
    start, dur = np.delete(t.start_ns, drop), np.delete(t.dur_ns, drop)
    first = first - np.searchsorted(drop, first)  # their rows once the others are gone
    start[first] = lo[order]
    dur[first] = hi[order] - lo[order]
    line_of = np.searchsorted(bounds, drop, side="right") - 1
    sizes = t.sizes - np.bincount(line_of, minlength=len(t.sizes))
    stats = {k: np.delete(v, drop) for k, v in t.stats.items()}
    return t._replace(sizes=sizes, codes=np.delete(t.codes, drop), start_ns=start, dur_ns=dur, stats=stats), first


def _steps(t: LineTable, steps: np.ndarray | None, codes: np.ndarray, cats: list[str], kind: np.ndarray,
           host: np.ndarray, meta: TraceMeta) -> tuple[np.ndarray, list[str]]:
    """Step rows: sets their kind (in place) and names them; returns the name codes and names.

    Steps come from the device Steps line (``steps``: its rows) where there is one; otherwise from the host events
    xprof treats as step markers.
    """
    name_codes, out_cats = codes.copy(), list(cats)
    if steps is not None:
        kind[steps] = _K["step"]
        for i in steps.tolist():
            out_cats.append(f"Step {cats[codes[i]]}")
            name_codes[i] = len(out_cats) - 1
        meta.extra["step_source"] = "device Steps line"
        return name_codes, out_cats
    step_num = t.stats.get("step_num")
    hc = codes[host]
    used = _used(hc, len(cats))
    marker = _name_flags(cats, used, lambda x: x in HOST_STEP_NAMES)[hc]
    has_num = np.zeros(len(codes), dtype=bool)
    if step_num is not None:
        has_num = pd.notna(step_num)
        trainlike = _name_flags(cats, used, lambda x: x.startswith(("train", "test")) and "/" not in x)
        marker |= has_num[host] & trainlike[hc]
    if marker.any():
        idx = host[marker]
        kind[idx] = _K["step"]
        for i in idx.tolist():
            if has_num[i]:
                out_cats.append(f"{cats[codes[i]]} {int(step_num[i])}")
                name_codes[i] = len(out_cats) - 1
        meta.extra["step_source"] = "host step markers"
    else:
        meta.warn("no step markers in the capture (Keras 3 and JAX emit none unless asked); per-step metrics are unavailable")
    return name_codes, out_cats


_KD_FIELDS = {name: re.compile(rx) for name, rx in (
    ("regs", r"regs:(\d+)"), ("shm", r"(?:^|\s)shm:(\d+)"), ("static", r"static_shared:(\d+)"),
    ("dynamic", r"dynamic_shared:(\d+)"), ("occ", r"occ_pct:([\d.]+)"), ("grid", r"grid:([\d,]+)"),
    ("block", r"block:([\d,]+)"))}


def _kd_number(text: str | None) -> float:
    """A matched number as ``pd.to_numeric(errors="coerce")`` reads it: NaN when absent, non-ASCII or malformed."""
    if text is None or not text.isascii():
        return np.nan
    try:
        return float(text)
    except ValueError:
        return np.nan


def _kd_parse(text: str) -> tuple:
    """(registers, shared memory, occupancy, grid, block) of one kernel_details string; NaN where absent."""
    found = {}
    for name, rx in _KD_FIELDS.items():
        m = rx.search(text)
        found[name] = m.group(1) if m else None
    shm, static, dynamic = (_kd_number(found[k]) for k in ("shm", "static", "dynamic"))
    if np.isnan(shm) and not (np.isnan(static) and np.isnan(dynamic)):
        shm = np.nan_to_num(static) + np.nan_to_num(dynamic)
    return (_kd_number(found["regs"]), shm, _kd_number(found["occ"]),
            found["grid"] if found["grid"] is not None else np.nan,
            found["block"] if found["block"] is not None else np.nan)


def _kernel_details(raw: np.ndarray, mask: np.ndarray) -> dict[str, Any]:
    """Split "regs:38 shm:0 grid:160,1,1 block:1024,1,1" (and the newer static/dynamic_shared form) into columns."""
    n = len(raw)
    # parse each distinct string once
    pos, uniq = pd.factorize(pd.Series(raw[mask]).astype(str))
    parsed = list(zip(*map(_kd_parse, uniq))) if len(uniq) else [()] * 5
    out: dict[str, Any] = {}
    for col, values in zip(("registers", "shared_mem", "occupancy"), parsed[:3]):
        arr = np.full(n, np.nan)
        arr[mask] = np.array(values, dtype=float)[pos]
        if not np.isnan(arr).all():
            out[col] = arr
    for col, values in zip(("grid", "block"), parsed[3:]):
        # the Categorical the timeline stores, built from the distinct strings instead of one object per row
        distinct = pd.Categorical(np.array(list(values) + [None], dtype=object)[:-1])
        codes = np.full(n, -1, dtype=distinct.codes.dtype)
        codes[mask] = distinct.codes[pos]
        out[col] = pd.Categorical.from_codes(codes, dtype=distinct.dtype)
    return out


def finish(columns: dict[str, Any], optional: dict[str, Any], meta: TraceMeta, *, absolute: bool) -> Timeline:
    """Build, rebase, assign steps: the last stage every TF reader shares."""
    events = build_events(columns, optional)
    origin = rebase(events)
    if absolute:
        meta.start_unix_ns = origin
    assign_steps(events)
    return Timeline(events, meta)


def host_only_warning(devices: list[DeviceInfo], kinds: Any) -> str | None:
    """``kinds``: the kind column (array or Categorical: a Categorical is checked on its codes, not per row)."""
    if not devices:
        return ("host-only capture: no /device:GPU planes (CUPTI was not loaded or the run had no GPU); "
                "GPU metrics are unavailable")
    if not pd.Series(kinds, copy=False).isin(["kernel", "memcpy", "memset"]).any():
        return "the capture has GPU planes but no GPU activity (CUPTI may have failed to trace kernels)"
    return None


def read_columns(path: Path) -> tuple[dict[str, Any], dict[str, Any], TraceMeta, bool]:
    """Decode one xplane.pb to timeline columns on its own clock; ``absolute`` = times are ns since the epoch."""
    scan = native_scanner()
    space = load_space(path, scan)
    table, name_table, devices, env, messages = decode_space(space, scan, source=path)
    meta = TraceMeta(source_format="tensorflow-xplane", path=str(path), tool="TensorFlow/XLA profiler (XSpace)")
    meta.devices = sorted(devices, key=lambda d: d.index)
    for m in messages:
        meta.warn(m)
    if space.hostnames:
        meta.extra["hostnames"] = list(space.hostnames)
    start_time = env.get("profile_start_time")
    absolute = bool(start_time)
    if absolute:
        table = table._replace(start_ns=table.start_ns + int(start_time))
        stop = env.get("profile_stop_time")
        if stop:
            meta.extra["profile_duration_ns"] = int(stop) - int(start_time)
    columns, optional = frame_from_table(table, name_table, meta)
    warning = host_only_warning(meta.devices, columns["kind"])
    if warning:
        meta.warn(warning)
    if any(d.vendor and str(d.vendor).upper() == "AMD" for d in meta.devices) or any(
        line.startswith("py_xla_execute") for line in table.line
    ):
        meta.tool = "JAX/XLA profiler (XSpace)"
    return columns, optional, meta, absolute


def sniff(path: Path, head: bytes) -> bool:
    if path.is_dir():
        return False
    name = path.name
    if name.endswith(".xplane.pb"):
        return True
    # content check: XSpace starts with field 1 (planes, length-delimited) whose XPlane holds a plane name
    return head[:1] == b"\x0a" and (b"/host:CPU" in head or b"/device:" in head or b"Task Environment" in head)


def read(path: Path, progress=None, **options) -> Timeline:
    if progress:
        progress(f"decoding {path.name}")
    columns, optional, meta, absolute = read_columns(path)
    return finish(columns, optional, meta, absolute=absolute)
