"""XSpace (``*.xplane.pb``) decoding: planes, their metadata, and every line's events as whole columns.

Decoding has to touch every event once. Where the C walker (``_wire_scan.c``) is built it does that in one
pass over the file's bytes and hands back flat arrays (no protobuf runtime, no Python object per event). Without a
compiler the same facts come from upb, with classes built from our own descriptor (``schema.py``), and
column-wise numpy decoding of the events' bytes (``wire.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from traceinsight.vocab.errors import TraceReadError
from traceinsight.model.timeline import DeviceInfo
from traceinsight.vocab import native
from traceinsight.ingest.byteio import read_bytes
from traceinsight.ingest.xplane.memory import MEMORY_STATS
from traceinsight.ingest.xplane.lines import DERIVED_OP_LINES, EVENT_STATS, SKIPPED_LINES, STEPS_LINE, LineTable, device_info, plane_kind


#: A stat the reader keeps, as both decoders report it (the C walker writes these records itself): its event, the
#: raw value (str/bytes: an index into a list of strings), the code of its key, and the oneof member set last
#: (an XStat field number; 0 = no value).
STAT_RECORD = np.dtype([("ev", "=i8"), ("val", "=u8"), ("key", "=i4"), ("which", "=i4")])


def native_scanner():
    """The C wire walker (``_wire_scan.c``), or None where it was not built or ``native`` switches it off; the
    upb + numpy path (``wire.py``) gives the same timeline (tests compare them)."""
    scan = native.scanner("tensorflow-xplane")
    return scan if scan is not None and scan.STAT_RECORD_SIZE == STAT_RECORD.itemsize else None


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


#: What a malformed file is told, the same on both paths: the C walker raises ValueError with the first two texts,
#: the upb path maps DecodeError onto them, and both find the first fault of the metadata in file order, as upb
#: does. Faults inside events are found in another order by the two event decoders, so they share one text.
ERR_WIRE = "truncated or corrupt wire format"
ERR_UTF8 = "a string field is not valid UTF-8"
ERR_EVENT = "an event is truncated or corrupt"


def _not_xspace(path: Path | str, why: str) -> str:
    return f"{path}: not a valid XSpace protobuf ({why})"


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

    from traceinsight.ingest.xplane.schema import messages

    try:
        space = messages(raw_events=True)["XSpace"].FromString(data)
    except DecodeError as exc:
        # upb's two complaints, in the C walker's words
        raise TraceReadError(_not_xspace(path, ERR_UTF8 if "UTF-8" in str(exc) else ERR_WIRE)) from None
    except RecursionError:
        raise TraceReadError(_not_xspace(path, ERR_WIRE)) from None
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
    except ValueError as exc:  # ERR_WIRE or ERR_UTF8
        raise TraceReadError(_not_xspace(path, str(exc))) from None
    _check_planes(path, [p[0] for p in planes])
    planes = [(name, np.frombuffer(md_ids, dtype=np.int64), md_names,
               dict(zip(np.frombuffer(sm_ids, dtype=np.int64).tolist(), sm_names)), stats)
              for name, md_ids, md_names, sm_ids, sm_names, stats in planes]
    lines = [(p, lid, name, dname, ts, n, (s, e)) for p, s, e, lid, name, dname, ts, n in heads]
    return Space(planes, errors, warnings, hostnames, lines, data)


def load_space(path: Path, scan=None, max_bytes: int | None = None) -> Space:
    """Read and decode the file's XSpace, with the C walker ``scan`` (``native_scanner()``) or upb."""
    data = read_bytes(path, [], max_bytes=max_bytes)
    if not isinstance(data, bytes):
        data = bytes(data)
    return _space_native(path, data, scan) if scan is not None else _space_upb(path, data)


#: Stats decoded per event: the timeline's and the allocator's (only memory events carry the latter).
_READ_STATS = EVENT_STATS + MEMORY_STATS


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
            devices.append(device_info(device, _plane_stats(stats, refs)))
        if kind in ("env", "skip"):
            found.append(None)
            continue
        # sorted ids; a map key written twice keeps its last entry, as a map does
        order = np.argsort(md_ids, kind="stable")
        ids = md_ids[order]
        last = np.r_[ids[1:] != ids[:-1], True] if len(ids) else np.zeros(0, dtype=bool)
        found.append((kind, device, ids[last], len(name_table), refs))
        name_table.extend([md_names[i] for i in order[last].tolist()])
    keys = sorted({v for f in found if f for v in f[4].values() if v in _READ_STATS})
    planes: list[_Plane | None] = []
    for f in found:
        wanted = sorted((k, keys.index(v)) for k, v in f[4].items() if v in _READ_STATS) if f else []
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
    """Events and kept stats decoded column-wise with numpy from each event's bytes (``wire.py``)."""
    from traceinsight.ingest.xplane.wire import PAD, decode_events

    chunks: list[bytes] = []
    for ln in lines:
        chunks.extend(ln.payload)
    lens = np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks))
    chunks.append(bytes(PAD))  # zero padding: a varint read running off the end stops inside it
    data = b"".join(chunks)
    del chunks
    ends = np.cumsum(lens)
    buf = np.frombuffer(data, dtype=np.uint8)
    mids, offset, dur_ps, (st_ev, st_s, st_e) = decode_events(buf, ends - lens, ends)
    sizes = np.array([ln.n for ln in lines], dtype=np.int64)
    ev_plane = np.repeat(np.array([ln.plane for ln in lines], dtype=np.int64), sizes)
    # the stats the C walker reads (and so checks): those of lines that keep stats, on planes with stats to keep
    read = np.repeat(np.array([ln.read_stats and len(planes[ln.plane].key_ids) > 0 for ln in lines], dtype=bool),
                     sizes)
    keep = read[st_ev] if len(st_ev) else np.zeros(0, dtype=bool)
    if not keep.any():
        return mids, offset, dur_ps, np.zeros(0, dtype=STAT_RECORD), []
    recs, strings = _stat_records(data, buf, st_ev[keep], st_s[keep], st_e[keep], ev_plane, planes)
    return mids, offset, dur_ps, recs, strings


def _stat_records(data: bytes, buf: np.ndarray, ev: np.ndarray, s: np.ndarray, e: np.ndarray,
                  ev_plane: np.ndarray, planes: list[_Plane | None]) -> tuple[np.ndarray, list]:
    """The kept stats among ``buf[s:e]`` as STAT_RECORD rows in event and file order, plus their strings."""
    from traceinsight.ingest.xplane.wire import STAT_DEPTH, decode_fields, leading_varint_in, odd_stats

    wanted = [set(pl.key_ids.tolist()) if pl is not None else set() for pl in planes]
    # the C walker walks (and so checks) every stat here. Stats laid out as serializers write them are well formed
    # and lead with their metadata id: match its bytes against the ids we use and decode only those. Any other
    # layout (a repeated or late id, unknown fields) is decoded in full, which checks it too.
    odd = odd_stats(buf, s, e)
    keep = odd | leading_varint_in(buf, s, e, ev_plane[ev], wanted)
    ev, s, e = ev[keep], s[keep], e[keep]
    # event order, and file order within an event, so the last stat of a key wins later
    order = np.argsort(ev, kind="stable")
    ev, s, e = ev[order], s[order], e[order]
    values, seen, spans, _ = decode_fields(buf, s, e, varint_fields=(1, 3, 4, 7), bytes_fields=(5, 6),
                                           fixed64_fields=(2,), depth=STAT_DEPTH)
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
        # text either way (the stats kept are parsed as text), as the C walker makes them
        strings = [data[x:y].decode("utf-8", "replace") for x, y in zip(a.tolist(), b.tolist())]
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
        except ValueError:  # WireError, or the C walker's report: the two find faults in another order
            raise TraceReadError(_not_xspace(source, ERR_EVENT)) from None
    ev_plane = np.repeat(np.array([ln.plane for ln in kept], dtype=np.int64), sizes)
    table = LineTable(
        plane=[ln.kind for ln in kept], device=[ln.device for ln in kept], line=[ln.name for ln in kept],
        tid=[ln.tid for ln in kept], sizes=sizes, codes=_name_codes(mids, kept, bounds, planes),
        start_ns=np.repeat(np.array([ln.timestamp_ns for ln in kept], dtype=np.int64), sizes) + offset // 1000,
        dur_ns=(dur_ps + 500) // 1000,  # start: == (ts * 1000 + offset) // 1000 without the int64 overflow
        stats=_stat_columns(recs, strings, ev_plane, planes, keys, n))
    return table, name_table, devices, env, messages
