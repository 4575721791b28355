"""TensorFlow / JAX profiler XSpace (``*.xplane.pb``) -> Timeline, without importing TensorFlow.

The protobuf is decoded with classes built from our own descriptor (``proto/xplane_schema.py``). Decoding has to
touch every event once; everything after that (classification, stat parsing, step numbering) runs on whole
columns. The mapping from planes/lines to timeline kinds lives in ``frame_from_lines`` so the old Chrome-trace JSON
export (``tf_json``), which carries the same planes and lines, shares it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable

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


def _load_space(path: Path):
    from google.protobuf.message import DecodeError

    from .proto.xplane_schema import messages

    data = path.read_bytes()
    if not data:
        raise TraceReadError(f"{path}: the file is empty")
    try:
        # events stay undecoded byte strings here; decode_space decodes them column-wise
        space = messages(raw_events=True)["XSpace"].FromString(data)
    except DecodeError as exc:
        raise TraceReadError(f"{path}: not a valid XSpace protobuf (truncated or corrupt: {exc})") from None
    except RecursionError:
        raise TraceReadError(f"{path}: not a valid XSpace protobuf (nesting too deep)") from None
    if not len(space.planes):
        raise TraceReadError(f"{path}: the XSpace holds no planes (not a profiler capture, or truncated)")
    if not any(p.name.startswith("/") or p.name == "Task Environment" for p in space.planes):
        raise TraceReadError(f"{path}: protobuf decodes but has no profiler planes; not an xplane.pb")
    return space


def _stat_value(stat, refs: dict[int, str]):
    which = stat.WhichOneof("value")
    if which is None:
        return None
    if which == "ref_value":
        return refs.get(stat.ref_value)
    return getattr(stat, which)


def _plane_stats(plane, refs: dict[int, str]) -> dict[str, Any]:
    return {refs.get(s.metadata_id, ""): _stat_value(s, refs) for s in plane.stats}


# XEvent fields: metadata_id=1, offset_ps=2 | num_occurrences=5 (oneof), duration_ps=3, stats=4
# XStat fields: metadata_id=1, value oneof: double=2, uint64=3, int64=4, str=5, bytes=6, ref=7
_STAT_VALUE_FIELDS = (2, 3, 4, 5, 6, 7)


def _member(values: np.ndarray, ids) -> np.ndarray:
    """``np.isin(values, ids)`` through a lookup table (metadata ids are small, dense integers)."""
    ids = np.fromiter(ids, dtype=np.int64)
    top = int(ids.max()) if len(ids) else -1
    if top < 0 or top > 1 << 22 or ids.min() < 0:
        return np.isin(values, ids)
    lut = np.zeros(top + 2, dtype=bool)
    lut[ids] = True
    return lut[np.clip(values, -1, top + 1)]


def _decode_stats(data: bytes, buf: np.ndarray, ev: np.ndarray, s: np.ndarray, e: np.ndarray,
                  ev_plane: np.ndarray, plane_wanted: list[dict[int, str]], plane_refs: list[dict[int, str]],
                  n_events: int) -> dict[str, np.ndarray]:
    """Event stats we use, as object columns over all events (None where absent); last stat of a key wins."""
    from .proto.wire import decode_fields, leading_varint_in

    keys = sorted({k for w in plane_wanted for k in w.values()})
    # serializers write XStat.metadata_id first: match its bytes against the ids we use, decode only those stats
    plane = ev_plane[ev]
    keep = leading_varint_in(buf, s, e, plane, [set(w) for w in plane_wanted])
    ev, s, e = ev[keep], s[keep], e[keep]
    # event order, and file order within an event, so the last stat of a key wins below
    order = np.argsort(ev, kind="stable")
    ev, s, e = ev[order], s[order], e[order]
    values, seen, spans, _ = decode_fields(buf, s, e, varint_fields=(1, 3, 4, 7), bytes_fields=(5, 6),
                                           fixed64_fields=(2,))
    mid = values[1].view(np.int64)
    plane = ev_plane[ev]
    key_code = np.full(len(mid), -1, dtype=np.int64)
    for p in np.unique(plane).tolist():
        wanted = plane_wanted[p]
        if not wanted:
            continue
        in_plane = plane == p
        ids = np.array(sorted(wanted), dtype=np.int64)
        codes = np.array([keys.index(wanted[i]) for i in ids.tolist()], dtype=np.int64)
        pos = np.minimum(np.searchsorted(ids, mid), len(ids) - 1)
        hit = in_plane & (ids[pos] == mid)
        key_code[hit] = codes[pos[hit]]
    use = np.flatnonzero(key_code >= 0)
    out: dict[str, np.ndarray] = {}
    if not len(use):
        return out
    # the oneof member set last wins
    order = np.stack([seen[f][use] for f in _STAT_VALUE_FIELDS])
    which = np.where(order.max(axis=0) >= 0, np.array(_STAT_VALUE_FIELDS)[order.argmax(axis=0)], 0)
    vals = np.full(len(use), None, dtype=object)
    for f in (2, 3, 4):
        m = which == f
        if m.any():
            raw = values[f][use[m]]
            vals[m] = (raw.view(np.float64) if f == 2 else raw.view(np.int64) if f == 4 else raw).astype(object)
    m = which == 7
    if m.any():
        refs_ids = values[7][use[m]].tolist()
        planes = plane[use[m]].tolist()
        vals[m] = np.array([plane_refs[p].get(r) for p, r in zip(planes, refs_ids)] + [None], dtype=object)[:-1]
    for f in (5, 6):
        m = which == f
        if m.any():
            a, b = spans[f][0][use[m]].tolist(), spans[f][1][use[m]].tolist()
            items = [data[x:y] for x, y in zip(a, b)]
            if f == 5:
                items = [x.decode("utf-8", "replace") for x in items]
            vals[m] = np.array(items + [None], dtype=object)[:-1]
    ev_use, kc = ev[use], key_code[use]
    for k, key in enumerate(keys):
        m = kc == k
        if m.any():
            col = np.full(n_events, None, dtype=object)
            # stats are in event order; keep the last one per event
            idx, v = ev_use[m], vals[m]
            last = np.r_[idx[1:] != idx[:-1], True]
            col[idx[last]] = v[last]
            out[key] = col
    return out


def decode_space(space) -> tuple[list[LineBatch], list[str], list[DeviceInfo], dict[str, Any], list[str]]:
    """Lines (as batches), the name table, devices, task-environment facts and the XSpace's own warnings.

    ``space`` comes from the raw-events schema: every line's events are byte strings, decoded here for all lines
    at once (``proto/wire.py``).
    """
    from .proto.wire import _PAD, WireError, decode_events

    name_table: list[str] = []
    devices: list[DeviceInfo] = []
    env: dict[str, Any] = {}
    chunks: list[bytes] = []
    lines: list[tuple] = []  # (plane idx, kind, device, name, tid, timestamp_ns, n, read stats)
    plane_md: list[tuple[np.ndarray, int]] = []
    plane_wanted: list[dict[int, str]] = []
    plane_refs: list[dict[int, str]] = []
    for plane in space.planes:
        refs = {k: v.name for k, v in plane.stat_metadata.items()}
        if plane.name == "Task Environment":
            env.update(_plane_stats(plane, refs))
            continue
        kind, device = plane_kind(plane.name)
        if kind == "skip":
            continue
        if kind == "gpu":
            devices.append(_device_info(device, _plane_stats(plane, refs)))
        md = sorted((k, v.name) for k, v in plane.event_metadata.items())
        md_ids = np.array([k for k, _ in md], dtype=np.int64)
        plane_md.append((md_ids, len(name_table)))
        name_table.extend(v for _, v in md)
        plane_wanted.append({k: v for k, v in refs.items() if v in EVENT_STATS})
        plane_refs.append(refs)
        p_idx = len(plane_md) - 1
        for line in plane.lines:
            lname = line.name or line.display_name
            events = line.events
            if not len(events) or lname in SKIPPED_LINES:
                continue
            derived = lname in DERIVED_OP_LINES or lname == STEPS_LINE
            evs = list(events)
            chunks.extend(evs)
            lines.append((p_idx, kind, device, lname, line.id, line.timestamp_ns, len(evs),
                          not (kind == "gpu" and derived)))
    messages = [f"profiler error: {e}" for e in space.errors] + [f"profiler warning: {w}" for w in space.warnings]
    if not lines:
        return [], name_table, devices, env, messages

    lens = np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks))
    chunks.append(bytes(_PAD))  # zero padding: a varint read running off the end stops inside it
    data = b"".join(chunks)
    del chunks
    ends = np.cumsum(lens)
    starts = ends - lens
    buf = np.frombuffer(data, dtype=np.uint8)
    sizes = np.array([ln[6] for ln in lines], dtype=np.int64)
    bounds = np.r_[0, np.cumsum(sizes)]
    try:
        mids, offset, dur_ps, (st_ev, st_s, st_e) = decode_events(buf, starts, ends)
        line_plane = np.array([ln[0] for ln in lines], dtype=np.int64)
        ev_plane = np.repeat(line_plane, sizes)
        read_stats = np.repeat(np.array([ln[7] for ln in lines], dtype=bool), sizes)
        keep = read_stats[st_ev] if len(st_ev) else np.zeros(0, dtype=bool)
        stats = _decode_stats(data, buf, st_ev[keep], st_s[keep], st_e[keep], ev_plane, plane_wanted, plane_refs,
                              len(mids)) if keep.any() and any(plane_wanted) else {}
    except WireError as exc:
        raise TraceReadError(f"not a valid XSpace protobuf (corrupt event: {exc})") from None

    # names: event metadata ids -> rows of the name table, per plane
    codes = np.full(len(mids), -1, dtype=np.int64)
    for p, (md_ids, md_offset) in enumerate(plane_md):
        if not len(md_ids):
            continue
        lo = bounds[np.searchsorted(line_plane, p, side="left")]
        hi = bounds[np.searchsorted(line_plane, p, side="right")]
        if hi <= lo:
            continue
        m = mids[lo:hi]
        pos = np.minimum(np.searchsorted(md_ids, m), len(md_ids) - 1)
        codes[lo:hi] = np.where(md_ids[pos] == m, pos + md_offset, -1)
    ts = np.repeat(np.array([ln[5] for ln in lines], dtype=np.int64), sizes)
    start = ts + offset // 1000  # == (ts * 1000 + offset) // 1000 without the int64 overflow
    dur = (dur_ps + 500) // 1000
    # which lines carry each stat (a line without it gets no column, as a per-line decoder would leave it)
    line_has = {key: np.add.reduceat(np.not_equal(col, None), bounds[:-1]) > 0 for key, col in stats.items()}
    batches = []
    for i, (_, kind, device, lname, tid, _, _, _) in enumerate(lines):
        lo, hi = bounds[i], bounds[i + 1]
        bstats = {key: col[lo:hi] for key, col in stats.items() if line_has[key][i]}
        batches.append(LineBatch(kind, device, lname, tid, codes[lo:hi], start[lo:hi], dur[lo:hi], bstats))
    return batches, name_table, devices, env, messages


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


def _flags(table: list[str], pattern: str) -> np.ndarray:
    rx = re.compile(pattern)
    return np.fromiter((rx.search(x) is not None for x in table), dtype=bool, count=len(table))


def frame_from_lines(batches: list[LineBatch], name_table: list[str], meta: TraceMeta) -> tuple[dict[str, Any], dict[str, Any]]:
    """Columns for ``build_events`` from decoded lines; classification runs per line and per distinct name."""
    if not batches:
        return {"kind": [], "name": [], "start_ns": [], "dur_ns": []}, {}
    sizes = np.array([len(b.codes) for b in batches], dtype=np.int64)
    n = int(sizes.sum())
    # distinct names: the table may repeat a name across planes
    table_codes, categories = pd.factorize(pd.Index(list(name_table) + [""], dtype=object))
    raw_codes = np.concatenate([b.codes for b in batches])
    codes = table_codes[np.where(raw_codes < 0, len(name_table), raw_codes)]
    cats = [str(x) for x in categories]
    start = np.concatenate([b.start_ns for b in batches])
    dur = np.concatenate([b.dur_ns for b in batches])

    def per_line(values, dtype=None) -> np.ndarray:
        return np.repeat(np.asarray(values, dtype=dtype), sizes)

    plane = per_line([b.plane for b in batches], dtype=object)
    device = per_line([b.device for b in batches]).astype(np.int32)
    line_table, line_idx = np.unique(np.array([b.line or "" for b in batches], dtype=object), return_inverse=True)
    line_codes = per_line(line_idx)
    tid = per_line([b.tid for b in batches]).astype(np.int64)

    def stat(key: str) -> np.ndarray | None:
        if not any(key in b.stats for b in batches):
            return None
        out = np.empty(n, dtype=object)
        pos = 0
        for b, size in zip(batches, sizes):
            col = b.stats.get(key)
            out[pos:pos + size] = col if col is not None else None
            pos += size
        return out

    corr_raw = stat("correlation_id")
    corr = np.full(n, -1, dtype=np.int64)
    if corr_raw is not None:
        has = pd.notna(corr_raw)
        corr[has] = pd.to_numeric(pd.Series(corr_raw[has]), errors="coerce").fillna(-1).astype(np.int64).to_numpy()
    kdetails = stat("kernel_details")
    mdetails = stat("memcpy_details")
    step_num = stat("step_num")

    # line-level facts
    lt = [str(x) for x in line_table]
    l_stream = np.array([int(m.group(1)) if (m := _STREAM_RE.match(x)) else -1 for x in lt], dtype=np.int64)
    l_copy = _flags(lt, r"^Stream #\d+.*Memcpy")
    l_copy_dir = np.array([(_COPY_KIND.get(m.group(1)) if (m := re.search(r"Memcpy(H2D|D2H|D2D|P2P)", x)) else None)
                           for x in lt], dtype=object)
    l_steps = np.array([x == STEPS_LINE for x in lt], dtype=bool)
    l_derived = np.array([x in DERIVED_OP_LINES for x in lt], dtype=bool)
    stream = l_stream[line_codes]

    is_gpu = plane == "gpu"
    is_host = plane == "host"
    is_stream = is_gpu & (stream >= 0)
    is_steps_line = is_gpu & l_steps[line_codes]
    is_derived = is_gpu & l_derived[line_codes]

    # name-level facts
    low = [x.lower() for x in cats]
    u_memcpy = np.array(["memcpy" in x for x in low], dtype=bool)
    u_memset = np.array(["memset" in x for x in low], dtype=bool)
    u_tfop = np.array([_TF_OP_MATCH(x) is not None for x in cats], dtype=bool)
    u_python = np.array([x.startswith("$") for x in cats], dtype=bool)
    u_memory = np.array([x in ("MemoryAllocation", "MemoryDeallocation") for x in cats], dtype=bool)
    u_hoststep = np.array([x in HOST_STEP_NAMES for x in cats], dtype=bool)
    u_trainlike = np.array([x.startswith(("train", "test")) and "/" not in x for x in cats], dtype=bool)
    copy_rx = re.compile(r"(H2D|D2H|D2D|P2P|HtoD|DtoH|DtoD|PtoP)")
    u_copy_dir = np.array([(_COPY_KIND.get(m.group(1)) if c and (m := copy_rx.search(x)) else None)
                           for x, c in zip(cats, u_memcpy)], dtype=object)

    kind_codes = {k: i for i, k in enumerate(("other", "annotation", "cpu_op", "python", "runtime", "kernel", "memcpy",
                                              "memset", "gpu_annotation", "step"))}
    kind = np.zeros(n, dtype=np.int8)
    kind[is_host] = kind_codes["annotation"]
    kind[is_host & u_tfop[codes]] = kind_codes["cpu_op"]
    kind[is_host & u_memory[codes]] = kind_codes["other"]
    kind[(is_host & u_python[codes]) | (plane == "python")] = kind_codes["python"]
    kind[is_host & (corr >= 0)] = kind_codes["runtime"]
    kind[is_stream] = kind_codes["kernel"]
    is_copy = is_stream & (u_memcpy[codes] | l_copy[line_codes])
    kind[is_copy] = kind_codes["memcpy"]
    kind[is_stream & u_memset[codes]] = kind_codes["memset"]
    kind[is_derived] = kind_codes["gpu_annotation"]

    if step_num is not None:
        has_num = pd.notna(step_num)
        host_marker = is_host & (u_hoststep[codes] | (has_num & u_trainlike[codes]))
    else:
        has_num = np.zeros(n, dtype=bool)
        host_marker = is_host & u_hoststep[codes]

    out_cats = list(cats)
    name_codes = codes.copy()
    keep = None
    if is_steps_line.any():
        # the device "Steps" line (present when the capture grouped GPU work): one row per step id across GPUs
        idx = np.flatnonzero(is_steps_line)
        sdf = pd.DataFrame({"i": idx, "c": codes[idx], "s": start[idx], "e": start[idx] + dur[idx]})
        agg = sdf.groupby("c", sort=False).agg(i=("i", "first"), s=("s", "min"), e=("e", "max"))
        keep = np.ones(n, dtype=bool)
        keep[idx] = False
        first = agg["i"].to_numpy()
        keep[first] = True
        start, dur = start.copy(), dur.copy()
        start[first] = agg["s"].to_numpy()
        dur[first] = (agg["e"] - agg["s"]).to_numpy()
        kind[first] = kind_codes["step"]
        for i in first:
            out_cats.append(f"Step {cats[codes[i]]}")
            name_codes[i] = len(out_cats) - 1
        meta.extra["step_source"] = "device Steps line"
    elif host_marker.any():
        idx = np.flatnonzero(host_marker)
        kind[idx] = kind_codes["step"]
        for i in idx:
            nm = cats[codes[i]]
            if has_num[i]:
                out_cats.append(f"{nm} {int(step_num[i])}")
                name_codes[i] = len(out_cats) - 1
        meta.extra["step_source"] = "host step markers"
    else:
        meta.warn("no step markers in the capture (Keras 3 and JAX emit none unless asked); per-step metrics are unavailable")

    copy_kind = np.full(n, None, dtype=object)
    if is_copy.any():
        ci = np.flatnonzero(is_copy)
        ck = u_copy_dir[codes[ci]]
        miss = pd.isna(ck)
        ck[miss] = l_copy_dir[line_codes[ci[miss]]]
        ck[pd.isna(ck)] = "other"
        copy_kind[ci] = ck
    nbytes = np.zeros(n, dtype=np.int64)
    if mdetails is not None:
        has_md = pd.notna(mdetails)
        sizes_ = pd.Series(mdetails[has_md], dtype=object).astype(str).str.extract(r"size:(\d+)", expand=False)
        nbytes[has_md] = pd.to_numeric(sizes_, errors="coerce").fillna(0).astype(np.int64).to_numpy()

    kinds_order = list(kind_codes)
    is_step = kind == kind_codes["step"]
    device = np.where(is_gpu & ~is_step, device, -1).astype(np.int32)
    columns = {
        "kind": pd.Categorical.from_codes(kind, categories=kinds_order),
        "name": pd.Categorical.from_codes(name_codes, categories=pd.Index(out_cats).unique())
        if len(set(out_cats)) == len(out_cats) else pd.Categorical(np.array(out_cats, dtype=object)[name_codes]),
        "raw_name": pd.Categorical.from_codes(codes, categories=cats),
        "start_ns": start,
        "dur_ns": np.maximum(dur, 0),
        "pid": np.zeros(n, dtype=np.int64),  # one process per XSpace: GPU rows join host launches on correlation
        "tid": np.where(is_stream, stream, tid),
        "device": device,
        "stream": np.where(is_stream, stream, -1),
        "correlation": np.where(is_gpu | (kind == kind_codes["runtime"]), corr, -1),
        "bytes": nbytes,
        "copy_kind": pd.Categorical(copy_kind, categories=["HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "other"]),
    }
    line_cat = pd.Categorical.from_codes(line_codes, categories=lt) if len(set(lt)) == len(lt) else pd.Categorical(
        np.array(lt, dtype=object)[line_codes])
    optional: dict[str, Any] = {"category": line_cat, "thread_name": line_cat}
    if kdetails is not None:
        kd_mask = pd.notna(kdetails) & (kind == kind_codes["kernel"])
        if kd_mask.any():
            optional.update(_kernel_details(kdetails, kd_mask))
    if keep is not None:
        columns = {k: v[keep] for k, v in columns.items()}
        optional = {k: v[keep] for k, v in optional.items()}
    return columns, optional


def _kernel_details(raw: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """Split "regs:38 shm:0 grid:160,1,1 block:1024,1,1" (and the newer static/dynamic_shared form) into columns."""
    n = len(raw)
    s = pd.Series(raw[mask]).astype(str)
    # parse each distinct string once
    uniq = pd.Series(s.unique())
    regs = pd.to_numeric(uniq.str.extract(r"regs:(\d+)", expand=False), errors="coerce")
    shm = pd.to_numeric(uniq.str.extract(r"(?:^|\s)shm:(\d+)", expand=False), errors="coerce")
    ss = pd.to_numeric(uniq.str.extract(r"static_shared:(\d+)", expand=False), errors="coerce")
    ds = pd.to_numeric(uniq.str.extract(r"dynamic_shared:(\d+)", expand=False), errors="coerce")
    shared = shm.where(shm.notna(), ss.fillna(0) + ds.fillna(0)).where(shm.notna() | ss.notna() | ds.notna())
    grid = uniq.str.extract(r"grid:([\d,]+)", expand=False)
    block = uniq.str.extract(r"block:([\d,]+)", expand=False)
    occ = pd.to_numeric(uniq.str.extract(r"occ_pct:([\d.]+)", expand=False), errors="coerce")
    pos = pd.Index(uniq).get_indexer(s)
    out: dict[str, np.ndarray] = {}
    for col, values in (("registers", regs), ("shared_mem", shared), ("occupancy", occ)):
        arr = np.full(n, np.nan)
        arr[mask] = values.to_numpy(dtype=float)[pos]
        if not np.isnan(arr).all():
            out[col] = arr
    for col, values in (("grid", grid), ("block", block)):
        arr = np.full(n, None, dtype=object)
        arr[mask] = values.to_numpy(dtype=object)[pos]
        out[col] = arr
    return out


def finish(columns: dict[str, Any], optional: dict[str, Any], meta: TraceMeta, *, absolute: bool) -> Timeline:
    """Build, rebase, assign steps: the last stage every TF reader shares."""
    events = build_events(columns, optional)
    origin = rebase(events)
    if absolute:
        meta.start_unix_ns = origin
    assign_steps(events)
    return Timeline(events, meta)


def host_only_warning(devices: list[DeviceInfo], kinds: np.ndarray) -> str | None:
    if not devices:
        return ("host-only capture: no /device:GPU planes (CUPTI was not loaded or the run had no GPU); "
                "GPU metrics are unavailable")
    if not np.isin(kinds, ["kernel", "memcpy", "memset"]).any():
        return "the capture has GPU planes but no GPU activity (CUPTI may have failed to trace kernels)"
    return None


def read_columns(path: Path) -> tuple[dict[str, Any], dict[str, Any], TraceMeta, bool]:
    """Decode one xplane.pb to timeline columns on its own clock; ``absolute`` = times are ns since the epoch."""
    space = _load_space(path)
    batches, name_table, devices, env, messages = decode_space(space)
    meta = TraceMeta(source_format="tensorflow-xplane", path=str(path), tool="TensorFlow/XLA profiler (XSpace)")
    meta.devices = sorted(devices, key=lambda d: d.index)
    for m in messages:
        meta.warn(m)
    if len(space.hostnames):
        meta.extra["hostnames"] = list(space.hostnames)
    start_time = env.get("profile_start_time")
    absolute = bool(start_time)
    if absolute:
        for b in batches:
            b.start_ns = b.start_ns + int(start_time)
        stop = env.get("profile_stop_time")
        if stop:
            meta.extra["profile_duration_ns"] = int(stop) - int(start_time)
    columns, optional = frame_from_lines(batches, name_table, meta)
    warning = host_only_warning(meta.devices, np.asarray(columns["kind"], dtype=object))
    if warning:
        meta.warn(warning)
    if any(d.vendor and str(d.vendor).upper() == "AMD" for d in meta.devices) or any(
        b.line.startswith("py_xla_execute") for b in batches
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
